//! The schema of a real database as SQL, read with `pg_dump --schema-only`
//! run from the sandbox's own PostgreSQL (its binaries, or its image with
//! the host's network), so the dump matches the major the rehearsal runs
//! on and nothing needs installing beyond what the sandbox already uses.
//!
//! Read-only: pg_dump takes ACCESS SHARE locks and reads the catalogue; a
//! role with `pg_read_all_data` (or owning the schema) suffices. The
//! password travels in `PGPASSWORD`, never on a command line, and never in
//! a message.
//!
//! TLS: pg_dump gets the TLS settings rollsafe's own connections use
//! ([`crate::db::tls_options`], from a URL or a key=value string alike):
//! `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`. A pg_dump in a
//! container sees those files through read-only mounts.

use std::process::Command;
use std::time::Duration;

use super::{Sandbox, SandboxError, TlsFile};
use crate::db;

/// How long a schema dump may take before it is abandoned.
const DUMP_TIMEOUT: Duration = Duration::from_secs(300);

/// The connection parameters pg_dump reads from its environment.
const PG_ENV: &[&str] = &[
    "PGHOST",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGPASSWORD",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
];

/// The TLS files `url` names, absolute (pg_dump may run elsewhere).
fn tls_files(url: &str) -> Result<Vec<TlsFile>, SandboxError> {
    let options = db::tls_options(url)?;
    let cwd = std::env::current_dir().unwrap_or_default();
    Ok([
        ("PGSSLROOTCERT", options.root_cert),
        ("PGSSLCERT", options.client_cert),
        ("PGSSLKEY", options.client_key),
    ]
    .into_iter()
    .filter_map(|(var, path)| {
        path.map(|p| TlsFile {
            var,
            host_path: cwd.join(p),
        })
    })
    .collect())
}

/// `url` as libpq environment variables (absent ones left out), the TLS
/// files at their paths on this host.
fn pg_env(url: &str) -> Result<Vec<(&'static str, String)>, SandboxError> {
    let config = db::config(url)?;
    let mut env = Vec::new();
    if let Some(postgres::config::Host::Tcp(h)) = config.get_hosts().first() {
        env.push(("PGHOST", h.clone()));
    }
    if let Some(p) = config.get_ports().first() {
        env.push(("PGPORT", p.to_string()));
    }
    if let Some(u) = config.get_user() {
        env.push(("PGUSER", u.to_string()));
    }
    if let Some(d) = config.get_dbname() {
        env.push(("PGDATABASE", d.to_string()));
    }
    if let Some(p) = config.get_password() {
        env.push(("PGPASSWORD", String::from_utf8_lossy(p).into_owned()));
    }
    let tls = db::tls_options(url)?;
    env.push(("PGSSLMODE", tls.mode));
    if let Some(keyword) = tls.root_cert_keyword {
        env.push(("PGSSLROOTCERT", keyword));
    }
    for f in tls_files(url)? {
        env.push((f.var, f.host_path.display().to_string()));
    }
    Ok(env)
}

/// Statements of a plain dump the server cannot run: psql's meta-commands
/// (`\restrict`, `\unrestrict`, `\connect`), which recent pg_dump minors
/// write around the SQL.
fn without_meta_commands(dump: &str) -> String {
    dump.lines()
        .filter(|l| !l.starts_with('\\'))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Sandbox {
    /// The schema of the database at `url` (no data, no owners; its GRANTs
    /// and policies included, so the apps' roles get what they have in
    /// production), as SQL that recreates it in a sandbox database. The
    /// roles the GRANTs name must exist there first
    /// ([`crate::target::Target::roles`]).
    pub fn dump_schema(&self, url: &str) -> Result<String, SandboxError> {
        self.pg_dump(
            url,
            &[
                "--schema-only",
                "--no-owner",
                "--no-publications",
                "--no-subscriptions",
                "--no-tablespaces",
                "--no-security-labels",
            ],
        )
    }

    /// The planner statistics of the database at `url` (`pg_dump
    /// --statistics-only`, PostgreSQL 18's pg_dump: it reads them from
    /// older servers too), as `pg_restore_relation_stats` /
    /// `pg_restore_attribute_stats` calls that import them into a sandbox
    /// database of 18 or later with the same tables.
    pub fn dump_statistics(&self, url: &str) -> Result<String, SandboxError> {
        self.pg_dump(url, &["--statistics-only", "--no-owner"])
    }

    /// The rows of `tables` (qualified names) of the database at `url`, as
    /// INSERT statements that load them into a sandbox database with the
    /// dumped schema: triggers (and so foreign-key checks, whose other end
    /// may not be copied) are disabled while they load.
    pub fn dump_rows(&self, url: &str, tables: &[String]) -> Result<String, SandboxError> {
        if tables.is_empty() {
            return Ok(String::new());
        }
        let mut args: Vec<String> = [
            "--data-only",
            "--inserts",
            "--disable-triggers",
            "--no-owner",
            "--no-privileges",
        ]
        .map(String::from)
        .to_vec();
        for t in tables {
            args.push(format!("--table={t}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.pg_dump(url, &args)
    }

    fn pg_dump(&self, url: &str, args: &[&str]) -> Result<String, SandboxError> {
        // A server rollsafe does not own has no pg_dump of its own: one
        // installed here that reads its major will do.
        let major = self.server_major();
        let files = tls_files(url)?;
        let mut cmd: Command = match self.shared.backend.pg_dump(&files) {
            Some(cmd) => cmd,
            None => Command::new(super::binaries::find_pg_dump(major).ok_or_else(|| {
                SandboxError::Dump {
                    detail: format!(
                        "no pg_dump of PostgreSQL {major} or newer is installed here; install one (apt-get install postgresql-client-{major}) or rehearse with --postgres docker or --postgres local"
                    ),
                }
            })?),
        };
        cmd.args(args);
        for var in PG_ENV {
            cmd.env_remove(var);
        }
        let in_container = self.kind() == super::BackendKind::Docker;
        for (k, v) in pg_env(url)? {
            match files.iter().find(|f| f.var == k) {
                Some(f) if in_container => cmd.env(k, f.container_path()),
                _ => cmd.env(k, v),
            };
        }
        let out = run_reading(&mut cmd, DUMP_TIMEOUT).map_err(|detail| SandboxError::Dump {
            detail: db::scrub(&detail, url),
        })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let first = stderr
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("no message");
            return Err(SandboxError::Dump {
                detail: db::scrub(first, url),
            });
        }
        Ok(without_meta_commands(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// Runs `cmd` to completion, reading its output as it comes (a dump is
/// larger than a pipe's buffer), killing it after `timeout`.
fn run_reading(cmd: &mut Command, timeout: Duration) -> Result<std::process::Output, String> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("pg_dump could not be started ({e})"))?;
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = child.stdout.take().map(|o| reader(Box::new(o)));
    let stderr = child.stderr.take().map(|e| reader(Box::new(e)));
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "pg_dump did not finish within {}s",
                    timeout.as_secs()
                ));
            }
        }
    };
    let collect = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    Ok(std::process::Output {
        status,
        stdout: collect(stdout),
        stderr: collect(stderr),
    })
}

/// The variables a `docker run` passes through from its own environment
/// (`-e NAME` without a value: the password never appears in its
/// arguments), and a read-only mount of each TLS file at
/// [`TlsFile::container_path`].
pub(crate) fn docker_env_args(files: &[TlsFile]) -> Vec<String> {
    let mut args: Vec<String> = PG_ENV
        .iter()
        .flat_map(|v| ["-e".to_string(), v.to_string()])
        .collect();
    for f in files {
        args.push("-v".into());
        args.push(format!(
            "{}:{}:ro",
            f.host_path.display(),
            f.container_path()
        ));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::{pg_env, without_meta_commands};

    #[test]
    fn meta_commands_are_dropped() {
        let dump = "\\restrict abc\nSET x = 1;\nCREATE TABLE t (a int);\n\\unrestrict abc\n";
        assert_eq!(
            without_meta_commands(dump),
            "SET x = 1;\nCREATE TABLE t (a int);"
        );
    }

    #[test]
    fn url_becomes_libpq_environment() {
        let env = pg_env("postgres://u:s3cret@127.0.0.1:5433/app?sslmode=require").unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PGHOST"), Some("127.0.0.1"));
        assert_eq!(get("PGPORT"), Some("5433"));
        assert_eq!(get("PGUSER"), Some("u"));
        assert_eq!(get("PGDATABASE"), Some("app"));
        assert_eq!(get("PGPASSWORD"), Some("s3cret"));
        assert_eq!(get("PGSSLMODE"), Some("require"));
    }

    #[test]
    fn tls_settings_reach_pg_dump_from_either_form() {
        for conn in [
            "postgres://u:pw@db.example:5432/app?sslmode=verify-full&sslrootcert=/etc/ca.pem&sslcert=/etc/c.pem&sslkey=/etc/c.key",
            "host=db.example port=5432 user=u password=pw dbname=app sslmode=verify-full sslrootcert=/etc/ca.pem sslcert=/etc/c.pem sslkey=/etc/c.key",
        ] {
            let env = pg_env(conn).unwrap();
            let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
            assert_eq!(get("PGHOST"), Some("db.example"), "{conn}");
            assert_eq!(get("PGSSLMODE"), Some("verify-full"), "{conn}");
            assert_eq!(get("PGSSLROOTCERT"), Some("/etc/ca.pem"), "{conn}");
            assert_eq!(get("PGSSLCERT"), Some("/etc/c.pem"), "{conn}");
            assert_eq!(get("PGSSLKEY"), Some("/etc/c.key"), "{conn}");
            let mounts = super::docker_env_args(&super::tls_files(conn).unwrap()).join(" ");
            assert!(
                mounts.contains("-v /etc/ca.pem:/rollsafe-tls/pgsslrootcert:ro")
                    && mounts.contains("-v /etc/c.key:/rollsafe-tls/pgsslkey:ro")
                    && !mounts.contains("pw"),
                "{mounts}"
            );
        }
        // No sslmode: libpq's default, said explicitly.
        let env = pg_env("host=db user=u").unwrap();
        assert!(env.contains(&("PGSSLMODE", "prefer".to_string())));
    }
}

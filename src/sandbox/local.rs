//! The local backend: `initdb` + `postgres` from the binaries on this
//! machine, for machines without a container engine.
//!
//! The server listens on a free loopback port only (no Unix socket), runs
//! with `fsync=off`, and lives in a temporary directory that is removed on
//! drop: in memory where it can ([`cleanup::local_dir_parents`]). PostgreSQL refuses to run as root, so as root the binaries run as
//! the `postgres` OS user.
//!
//! `postgres` is started directly as a child (not through `pg_ctl`) with a
//! parent-death signal, so that even a test process killed with SIGKILL does
//! not leave a server behind. The parent-death signal fires when the
//! *thread* that started the server exits: start sandboxes on a thread that
//! outlives them (the main thread, or the thread that also drops them).
//!
//! The server and its directory are listed in [`super::cleanup`] for as
//! long as they exist, so a SIGTERM or Ctrl-C removes them too; the
//! directory's `rollsafe.pid` names its owner, so a run killed outright
//! leaves a directory the next run removes.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Pid, User};

use super::binaries::{binaries_major, find_bindir};
use super::cleanup::{self, Held, DIR_PREFIX};
use super::{random_password, Backend, BackendKind, SandboxError};
use crate::db;

pub struct LocalBackend {
    admin_url: String,
    port: u16,
    bindir: PathBuf,
    child: Option<Child>,
    // Removed on drop, after the server has stopped.
    dir: tempfile::TempDir,
    _registration: cleanup::Registration,
}

/// The OS user to run the server as: None when not root.
fn server_user() -> Result<Option<User>, SandboxError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    match User::from_name("postgres") {
        Ok(Some(u)) => Ok(Some(u)),
        _ => Err(SandboxError::NoPostgresUser),
    }
}

fn free_loopback_port() -> Result<u16, SandboxError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| SandboxError::LocalStart {
            detail: format!("no free loopback port: {e}"),
        })
}

fn local_err(what: &str, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::LocalStart {
        detail: format!("{what}: {e}"),
    }
}

/// The last lines of a log file, for error messages.
fn log_tail(path: &Path, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut f) = fs::File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

impl LocalBackend {
    /// Initialises a cluster in a new temporary directory and starts it.
    pub fn start(bindir: Option<&Path>) -> Result<LocalBackend, SandboxError> {
        LocalBackend::start_with(bindir, &[])
    }

    /// [`LocalBackend::start`] with extra `-c name=value` server settings.
    pub fn start_with(
        bindir: Option<&Path>,
        settings: &[(String, String)],
    ) -> Result<LocalBackend, SandboxError> {
        let bindir = find_bindir(bindir)?;
        let user = server_user()?;
        let parents = cleanup::local_dir_parents();
        let dir = parents
            .iter()
            .find_map(|parent| {
                tempfile::Builder::new()
                    .prefix(DIR_PREFIX)
                    .tempdir_in(parent)
                    .ok()
            })
            .ok_or_else(|| {
                let tried: Vec<String> = parents.iter().map(|p| p.display().to_string()).collect();
                local_err(
                    &format!(
                        "creating a directory for the server in {}",
                        tried.join(" or ")
                    ),
                    "none is writable; set ROLLSAFE_LOCAL_DIR to a writable directory",
                )
            })?;
        let registration = cleanup::register(Held::LocalServer {
            dir: dir.path().to_path_buf(),
            pid: None,
        });
        cleanup::mark_owner(dir.path()).map_err(|e| local_err("marking the directory", e))?;
        let data = dir.path().join("data");
        let pwfile = dir.path().join("pwfile");
        let password = random_password();
        {
            let mut f = fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&pwfile)
                .map_err(|e| local_err("writing the password file", e))?;
            f.write_all(password.as_bytes())
                .map_err(|e| local_err("writing the password file", e))?;
        }
        let as_user = |cmd: &mut Command| {
            if let Some(u) = &user {
                cmd.uid(u.uid.as_raw()).gid(u.gid.as_raw());
            }
        };
        if let Some(u) = &user {
            for p in [dir.path(), pwfile.as_path()] {
                std::os::unix::fs::chown(p, Some(u.uid.as_raw()), Some(u.gid.as_raw()))
                    .map_err(|e| local_err("handing the directory to the postgres user", e))?;
            }
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
                .map_err(|e| local_err("setting directory permissions", e))?;
        }

        let mut initdb = Command::new(bindir.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "scram-sha-256", "-E", "UTF8"])
            .args(["--locale=C", "--no-sync"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .current_dir(dir.path())
            .env("LC_ALL", "C");
        // --no-instructions exists from 14; 13's initdb refuses it (the
        // instructions it prints instead go to a pipe nobody reads).
        if !matches!(binaries_major(&bindir), Some(m) if m < 14) {
            initdb.arg("--no-instructions");
        }
        as_user(&mut initdb);
        let out = initdb
            .stdin(Stdio::null())
            .output()
            .map_err(|e| local_err(&format!("running {}", bindir.join("initdb").display()), e))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(local_err(
                "initdb failed",
                stderr.lines().last().unwrap_or("no message").trim(),
            ));
        }
        let _ = fs::remove_file(&pwfile);

        // A port can be taken between finding and binding it; try a few.
        let log = dir.path().join("server.log");
        let mut last_err = None;
        for _ in 0..3 {
            let port = free_loopback_port()?;
            let admin_url = format!("postgres://postgres:{password}@127.0.0.1:{port}/postgres");
            let mut child = spawn_server(&bindir, &data, dir.path(), port, settings, &as_user)?;
            registration.set_server_pid(child.id() as i32);
            match wait_ready(&mut child, &admin_url, &log, Duration::from_secs(60)) {
                Ok(()) => {
                    return Ok(LocalBackend {
                        admin_url,
                        port,
                        bindir,
                        child: Some(child),
                        dir,
                        _registration: registration,
                    })
                }
                Err(e) => {
                    stop_child(child);
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| local_err("server did not start", "unknown")))
    }

    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            stop_child(child);
        }
    }
}

/// Polls until the server accepts connections, the child exits, or time is up.
fn wait_ready(
    child: &mut Child,
    url: &str,
    log: &Path,
    timeout: Duration,
) -> Result<(), SandboxError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(local_err(
                &format!("postgres exited ({status})"),
                log_tail(log, 3),
            ));
        }
        match db::connect(url) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(local_err(
                    "postgres did not accept connections in time",
                    format!("{e}; log: {}", log_tail(log, 3)),
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Fast shutdown (SIGINT), then SIGKILL if it takes too long.
fn stop_child(mut child: Child) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn spawn_server(
    bindir: &Path,
    data: &Path,
    dir: &Path,
    port: u16,
    settings: &[(String, String)],
    as_user: &dyn Fn(&mut Command),
) -> Result<Child, SandboxError> {
    let log = fs::File::create(dir.join("server.log"))
        .map_err(|e| local_err("creating the server log", e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| local_err("creating the server log", e))?;
    let mut cmd = Command::new(bindir.join("postgres"));
    cmd.arg("-D")
        .arg(data)
        .args(["-p", &port.to_string()])
        .args(["-c", "listen_addresses=127.0.0.1"])
        .args(["-c", "unix_socket_directories="])
        .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
        .args(["-c", "synchronous_commit=off", "-c", "max_connections=300"])
        .args(
            settings
                .iter()
                .flat_map(|(k, v)| ["-c".to_string(), format!("{k}={v}")]),
        )
        .current_dir(dir)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2));
    as_user(&mut cmd);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork
    // and exec here.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGQUIT).map_err(std::io::Error::from)
        });
    }
    cmd.spawn().map_err(|e| {
        local_err(
            &format!("starting {}", bindir.join("postgres").display()),
            e,
        )
    })
}

impl Backend for LocalBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Local
    }

    fn admin_url(&self) -> &str {
        &self.admin_url
    }

    fn describe(&self) -> String {
        format!(
            "local postgres ({}) on 127.0.0.1:{} in {}",
            self.bindir.display(),
            self.port,
            self.dir.path().display()
        )
    }

    fn pg_dump(&self, _tls_files: &[super::TlsFile]) -> Option<Command> {
        Some(Command::new(self.bindir.join("pg_dump")))
    }
}

impl Drop for LocalBackend {
    fn drop(&mut self) {
        if cleanup::stopping() {
            // A signal's cleanup stops the server and removes the
            // directory; reaping the server here too would race it.
            std::mem::forget(self.child.take());
            return;
        }
        self.stop();
        // TempDir's own drop removes the directory next.
    }
}

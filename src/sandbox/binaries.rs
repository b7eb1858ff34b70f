//! Finding PostgreSQL's binaries on this machine: the directory holding
//! `initdb` and `postgres` (explicit, `pg_config --bindir`, PATH, the
//! distributions' directories), the one of a given major, their major
//! (`postgres --version`), and a `pg_dump` able to dump a given major.
//!
//! Used by the local backend (it runs them) and by the dump (pg_dump on
//! the host); nothing here starts a server.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{run_with_timeout, SandboxError, ENV_BINDIR};

fn usable(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// The directory holding `initdb` and `postgres`: the explicit one, else
/// `pg_config --bindir`, else `initdb` on PATH, else the distributions'
/// usual places (newest version first).
pub fn find_bindir(explicit: Option<&Path>) -> Result<PathBuf, SandboxError> {
    if let Some(dir) = explicit {
        if usable(dir) {
            return Ok(dir.to_path_buf());
        }
        return Err(SandboxError::BinariesNotFound {
            searched: format!("{} (given explicitly)", dir.display()),
        });
    }
    if let Some(dir) = pg_config_bindir().filter(|d| usable(d)) {
        return Ok(dir);
    }
    if let Some(dir) = path_bindir() {
        return Ok(dir);
    }
    if let Some(dir) = distribution_bindirs().into_iter().find(|d| usable(d)) {
        return Ok(dir);
    }
    Err(SandboxError::BinariesNotFound {
        searched: format!(
            "pg_config --bindir, PATH, /usr/lib/postgresql*, /usr/pgsql-*, /usr/local/pgsql/bin, and {ENV_BINDIR} is not set"
        ),
    })
}

/// The directory holding PostgreSQL `major`'s `initdb` and `postgres`:
/// `preferred` (`ROLLSAFE_PG_BINDIR`) when it holds that major, else the
/// distributions' directories of that major (`/usr/lib/postgresql/M/bin`,
/// `/usr/pgsql-M/bin`), else `pg_config --bindir` or `initdb` on PATH when
/// they are that major. Each candidate's major is `postgres --version`'s.
pub fn find_bindir_for_major(
    preferred: Option<&Path>,
    major: u32,
) -> Result<PathBuf, SandboxError> {
    let mut candidates: Vec<(String, PathBuf)> = Vec::new();
    if let Some(dir) = preferred {
        candidates.push((format!("{ENV_BINDIR}={}", dir.display()), dir.to_path_buf()));
    }
    for dir in [
        PathBuf::from(format!("/usr/lib/postgresql/{major}/bin")),
        PathBuf::from(format!("/usr/pgsql-{major}/bin")),
    ] {
        candidates.push((dir.display().to_string(), dir));
    }
    if let Some(dir) = pg_config_bindir() {
        candidates.push((format!("{} (pg_config --bindir)", dir.display()), dir));
    }
    if let Some(dir) = path_bindir() {
        candidates.push((format!("{} (PATH)", dir.display()), dir));
    }

    let mut searched: Vec<String> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for (label, dir) in candidates {
        if seen.contains(&dir) {
            continue;
        }
        seen.push(dir.clone());
        if !usable(&dir) {
            searched.push(label);
            continue;
        }
        match binaries_major(&dir) {
            Some(found) if found == major => return Ok(dir),
            Some(found) => searched.push(format!("{label} (PostgreSQL {found})")),
            None => searched.push(format!("{label} (version unknown)")),
        }
    }
    Err(SandboxError::BinariesNotFound {
        searched: searched.join(", "),
    })
}

/// The major of the binaries in `bindir`, from `postgres --version`.
pub fn binaries_major(bindir: &Path) -> Option<u32> {
    let out = run_with_timeout(
        Command::new(bindir.join("postgres")).arg("--version"),
        Duration::from_secs(10),
    )?;
    if !out.status.success() {
        return None;
    }
    version_major(&String::from_utf8_lossy(&out.stdout))
}

/// `postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)` → 15;
/// `9.6.24` → 9 (as `server_version_num / 10000` counts); `18beta1` → 18.
fn version_major(version: &str) -> Option<u32> {
    let rest = version.split_once("(PostgreSQL) ")?.1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `pg_config --bindir`, when pg_config runs.
fn pg_config_bindir() -> Option<PathBuf> {
    let out = run_with_timeout(
        Command::new("pg_config").arg("--bindir"),
        Duration::from_secs(10),
    )?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && !dir.as_os_str().is_empty()).then_some(dir)
}

/// The usable directory of the first `initdb` on PATH.
fn path_bindir() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        let initdb = dir.join("initdb");
        if initdb.is_file() {
            // Distributions link initdb into PATH; `postgres` sits next
            // to the real file.
            let real = fs::canonicalize(&initdb).unwrap_or(initdb);
            if let Some(parent) = real.parent() {
                if usable(parent) {
                    return Some(parent.to_path_buf());
                }
            }
        }
    }
    None
}

/// A `pg_dump` installed here that can dump a PostgreSQL `major` server
/// (pg_dump reads servers of its own major and older ones): the
/// distributions' directories, newest first.
pub fn find_pg_dump(major: u32) -> Option<PathBuf> {
    distribution_bindirs()
        .into_iter()
        .filter(|d| d.join("pg_dump").is_file())
        .find(|d| binaries_major(d).is_some_and(|m| m >= major))
        .map(|d| d.join("pg_dump"))
}

/// `/usr/lib/postgresql/*/bin` and `/usr/pgsql-*/bin`, newest version
/// first, then `/usr/local/pgsql/bin` (not checked for usability).
fn distribution_bindirs() -> Vec<PathBuf> {
    let mut candidates: Vec<(u32, PathBuf)> = Vec::new();
    if let Ok(entries) = fs::read_dir("/usr/lib/postgresql") {
        for e in entries.flatten() {
            if let Ok(v) = e.file_name().to_string_lossy().parse::<u32>() {
                candidates.push((v, e.path().join("bin")));
            }
        }
    }
    if let Ok(entries) = fs::read_dir("/usr") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(v) = name
                .strip_prefix("pgsql-")
                .and_then(|v| v.parse::<u32>().ok())
            {
                candidates.push((v, e.path().join("bin")));
            }
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    candidates.push((0, PathBuf::from("/usr/local/pgsql/bin")));
    candidates.into_iter().map(|(_, dir)| dir).collect()
}

#[cfg(test)]
mod tests {
    use super::version_major;

    #[test]
    fn reads_the_major_of_postgres_version_output() {
        assert_eq!(
            version_major("postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)\n"),
            Some(15)
        );
        assert_eq!(version_major("postgres (PostgreSQL) 9.6.24"), Some(9));
        assert_eq!(version_major("postgres (PostgreSQL) 18beta1"), Some(18));
        assert_eq!(version_major("something else"), None);
    }
}

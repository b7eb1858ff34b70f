//! Cleanup on every exit: what this process holds, removed on demand, and
//! what a crashed run left, removed by the next one.
//!
//! RAII (`Drop`) removes a sandbox when a run ends normally or panics, but
//! not when the process is told to stop: a cancelled CI job sends SIGTERM,
//! a user presses Ctrl-C, and destructors never run. So every resource a
//! sandbox creates is also listed here, in a process-wide registry, as the
//! plain facts needed to remove it without its owner (a container id, a
//! server pid and data directory, a database on a shared server).
//! [`drop_all`] drains that registry; `main.rs` calls it from its signal
//! thread and then exits with 128 + the signal's number.
//!
//! What SIGKILL or a power cut leaves behind carries its owner's pid: a
//! container's `rollsafe.sandbox` label (with `rollsafe.host`, this host's
//! name), a local data directory's `rollsafe.pid` file. [`reap_leftovers`]
//! runs when a docker or local sandbox starts and removes the ones whose
//! owner is no longer alive on this host; a live owner's are never touched.
//!
//! Not here: catching signals (the binary's job: a library does not exit).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::run_with_timeout;

/// Label on every container rollsafe starts (its value: the owning
/// process id), so leftovers can be found (`docker ps -a --filter
/// label=rollsafe.sandbox`).
pub const LABEL: &str = "rollsafe.sandbox";

/// Prefix of every local server's data directory (in one of
/// [`local_dir_parents`]), so leftovers from a killed run can be found and
/// removed (`ci/test.sh` does).
pub const DIR_PREFIX: &str = "rollsafe-local-";

/// Where a local server's directory may go, in order of preference:
/// `$ROLLSAFE_LOCAL_DIR` when set (a run that needs more room than memory
/// offers); else `/dev/shm` when it is a memory filesystem with at least
/// [`MEMORY_DIR_MIN_FREE`] free, as the docker backend keeps its cluster
/// on tmpfs (a throwaway cluster needs no disk: on this ext4 disk
/// `CREATE DATABASE … TEMPLATE` took 480–790 ms, on /dev/shm 46–53 ms,
/// measured side by side); else the temp dir. The reaper looks in all of
/// them.
pub fn local_dir_parents() -> Vec<PathBuf> {
    let mut parents = Vec::new();
    if let Some(dir) = std::env::var_os("ROLLSAFE_LOCAL_DIR").filter(|d| !d.is_empty()) {
        parents.push(PathBuf::from(dir));
    }
    let shm = Path::new("/dev/shm");
    if memory_room(shm).is_some_and(|free| free >= MEMORY_DIR_MIN_FREE) {
        parents.push(shm.to_path_buf());
    }
    parents.push(std::env::temp_dir());
    parents.dedup();
    parents
}

/// The least free room a memory filesystem must have to hold a local
/// server: a default rehearsal's databases take tens of megabytes, a
/// `--rows` in the millions gigabytes (then set `ROLLSAFE_LOCAL_DIR`).
pub const MEMORY_DIR_MIN_FREE: u64 = 4 << 30;

/// The free bytes of `dir` when it is a writable memory filesystem
/// (tmpfs); None otherwise.
fn memory_room(dir: &Path) -> Option<u64> {
    use nix::sys::statfs::{statfs, TMPFS_MAGIC};
    let fs = statfs(dir).ok()?;
    if fs.filesystem_type() != TMPFS_MAGIC {
        return None;
    }
    let writable = nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok();
    writable.then(|| fs.blocks_available() as u64 * fs.block_size() as u64)
}

/// Label naming the host whose process owns a container: a pid only means
/// something on the host that ran it.
pub const HOST_LABEL: &str = "rollsafe.host";

/// File in a local sandbox's directory holding the owning rollsafe's pid.
pub const OWNER_FILE: &str = "rollsafe.pid";

/// One resource a sandbox created, as what it takes to remove it.
#[derive(Debug, Clone)]
pub(crate) enum Held {
    /// A docker container (removed with `docker rm -f`).
    Container { id: String },
    /// A local server and its directory: the server is stopped (immediate
    /// shutdown), then the directory removed. No pid while initdb runs.
    LocalServer { dir: PathBuf, pid: Option<i32> },
    /// A database on a server rollsafe does not own (dropped with FORCE).
    Database { admin_url: String, name: String },
    /// A project's command (its migrate, a data migration at rows) running
    /// in a process group of its own: the group is killed, so a stopped
    /// run leaves no interpreter working on behind it.
    CommandGroup { pgid: i32 },
}

static LIVE: Mutex<BTreeMap<u64, Held>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(0);
static STOPPING: AtomicBool = AtomicBool::new(false);

fn live() -> std::sync::MutexGuard<'static, BTreeMap<u64, Held>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A registry entry; dropping it (its owner removed the resource) forgets
/// the resource.
#[derive(Debug)]
pub(crate) struct Registration(u64);

impl Registration {
    /// The local server's pid, once it runs.
    pub(crate) fn set_server_pid(&self, server_pid: i32) {
        if let Some(Held::LocalServer { pid, .. }) = live().get_mut(&self.0) {
            *pid = Some(server_pid);
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        live().remove(&self.0);
    }
}

/// Lists `held` until the returned registration is dropped.
pub(crate) fn register(held: Held) -> Registration {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    live().insert(id, held);
    Registration(id)
}

/// Whether [`drop_all`] has started: the run is being stopped, and what
/// fails now fails because its sandbox is gone.
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// What [`drop_all`] removed.
#[derive(Debug, Clone, Default)]
pub struct Dropped {
    pub containers: usize,
    pub local_servers: usize,
    pub databases: usize,
    /// Project commands' process groups killed.
    pub commands: usize,
    pub took: Duration,
}

impl Dropped {
    pub fn total(&self) -> usize {
        self.containers + self.local_servers + self.databases + self.commands
    }
}

/// Removes every resource this process's sandboxes hold: databases on
/// shared servers first (their server must still answer), then local
/// servers and their directories, then containers (also those labelled
/// with this pid that a start in flight had not registered yet).
pub fn drop_all() -> Dropped {
    let started = Instant::now();
    STOPPING.store(true, Ordering::SeqCst);
    let held: Vec<Held> = std::mem::take(&mut *live()).into_values().collect();
    let mut dropped = Dropped::default();
    for h in &held {
        if let Held::CommandGroup { pgid } = h {
            let _ = nix::sys::signal::killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
            dropped.commands += 1;
        }
    }
    for h in &held {
        if let Held::Database { admin_url, name } = h {
            drop_database(admin_url, name);
            dropped.databases += 1;
        }
    }
    for h in &held {
        if let Held::LocalServer { dir, pid } = h {
            if let Some(pid) = pid {
                stop_server(Pid::from_raw(*pid), true);
            }
            let _ = std::fs::remove_dir_all(dir);
            dropped.local_servers += 1;
        }
    }
    let mut containers: Vec<String> = held
        .iter()
        .filter_map(|h| match h {
            Held::Container { id } => Some(id.clone()),
            _ => None,
        })
        .collect();
    dropped.containers = containers.len();
    if dropped.containers > 0 || docker_in_use() {
        for (id, _, _) in labelled_containers(Some(std::process::id())) {
            if !containers
                .iter()
                .any(|c| id.starts_with(c.as_str()) || c.starts_with(&id))
            {
                containers.push(id);
            }
        }
    }
    remove_containers(&containers);
    dropped.took = started.elapsed();
    dropped
}

/// Whether this process ever started a container (only then is `docker`
/// asked about labels on the way out).
static DOCKER_USED: AtomicBool = AtomicBool::new(false);

fn docker_in_use() -> bool {
    DOCKER_USED.load(Ordering::SeqCst)
}

/// Called before a container is created, so that [`drop_all`] looks for
/// it by label even if its start has not returned yet.
pub(crate) fn docker_starting() {
    DOCKER_USED.store(true, Ordering::SeqCst);
}

fn drop_database(admin_url: &str, name: &str) {
    let sql = format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        crate::pg::quote_ident(name)
    );
    if let Err(e) = crate::db::connect(admin_url)
        .map_err(|e| e.to_string())
        .and_then(|mut c| c.batch_execute(&sql).map_err(|e| e.to_string()))
    {
        log::warn!("could not drop sandbox database {name}: {e}");
    }
}

/// Stops a postgres server: SIGQUIT (immediate shutdown: the data is thrown
/// away, nothing needs flushing), SIGKILL after 5 s. `child`: it is this
/// process's child, so it is reaped here (a zombie still answers kill 0).
fn stop_server(pid: Pid, child: bool) {
    let _ = kill(pid, Signal::SIGQUIT);
    let deadline = Instant::now() + Duration::from_secs(5);
    let gone = || {
        if child {
            !matches!(
                waitpid(pid, Some(WaitPidFlag::WNOHANG)),
                Ok(WaitStatus::StillAlive)
            )
        } else {
            !alive(pid.as_raw())
        }
    };
    while Instant::now() < deadline {
        if gone() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = kill(pid, Signal::SIGKILL);
    if child {
        let _ = waitpid(pid, None);
    }
}

fn remove_containers(ids: &[String]) {
    if ids.is_empty() {
        return;
    }
    let out = run_with_timeout(
        Command::new("docker").args(["rm", "-f", "-v"]).args(ids),
        Duration::from_secs(30),
    );
    if !out.as_ref().is_some_and(|o| o.status.success()) {
        log::warn!("could not remove containers {}", ids.join(" "));
    }
}

/// Whether process `pid` exists on this host (EPERM: it exists, owned by
/// another user).
fn alive(pid: i32) -> bool {
    pid > 0
        && matches!(
            kill(Pid::from_raw(pid), None),
            Ok(()) | Err(nix::errno::Errno::EPERM)
        )
}

/// This host's name, as the kernel has it.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// (id, owner pid, owner host) of the containers labelled as rollsafe
/// sandboxes; only those of `owner` when given.
fn labelled_containers(owner: Option<u32>) -> Vec<(String, Option<u32>, String)> {
    let filter = match owner {
        Some(pid) => format!("label={}={pid}", LABEL),
        None => format!("label={}", LABEL),
    };
    let format = format!(
        "{{{{.ID}}}} {{{{.Label \"{}\"}}}} {{{{.Label \"{HOST_LABEL}\"}}}}",
        LABEL
    );
    let Some(out) = run_with_timeout(
        Command::new("docker").args(["ps", "-a", "--filter", &filter, "--format", &format]),
        Duration::from_secs(15),
    ) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let id = parts.next()?.to_string();
            let pid = parts.next().and_then(|p| p.parse().ok());
            let host = parts.next().unwrap_or("").to_string();
            Some((id, pid, host))
        })
        .collect()
}

/// Removes the containers of rollsafe runs on this host whose process is
/// gone (killed, crashed). Returns how many.
pub(crate) fn reap_containers() -> usize {
    let host = host_name();
    let dead: Vec<String> = labelled_containers(None)
        .into_iter()
        .filter(|(_, pid, h)| {
            !host.is_empty() && *h == host && pid.is_some_and(|p| !alive(p as i32))
        })
        .map(|(id, _, _)| id)
        .collect();
    if !dead.is_empty() {
        log::info!(
            "removing {} container(s) of crashed rollsafe runs",
            dead.len()
        );
        remove_containers(&dead);
    }
    dead.len()
}

/// Removes the local sandbox directories (and servers) of rollsafe runs
/// whose process is gone. Directories without an owner file (not made by
/// this version) are left alone. Returns how many.
pub(crate) fn reap_local_dirs() -> usize {
    let mut reaped = 0;
    let entries = local_dir_parents()
        .into_iter()
        .filter_map(|parent| std::fs::read_dir(parent).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()));
    for dir in entries {
        let is_sandbox = dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(DIR_PREFIX));
        if !is_sandbox || !owner_is_gone(&dir) {
            continue;
        }
        if let Some(server) = postmaster_pid(&dir).filter(|&p| alive(p) && is_postgres(p)) {
            stop_server(Pid::from_raw(server), false);
        }
        if std::fs::remove_dir_all(&dir).is_ok() {
            reaped += 1;
        }
    }
    if reaped > 0 {
        log::info!("removed {reaped} data director(ies) of crashed rollsafe runs");
    }
    reaped
}

/// Writes this process's pid into a new local sandbox directory.
pub(crate) fn mark_owner(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string())
}

fn owner_is_gone(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join(OWNER_FILE))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .is_some_and(|pid| !alive(pid))
}

/// The server pid from the data directory's `postmaster.pid` (first line).
fn postmaster_pid(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("data").join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether `pid` runs a postgres binary (a recycled pid must not be hit).
fn is_postgres(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_reaped_only_when_its_owner_is_gone() {
        let live_owner = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .unwrap();
        mark_owner(live_owner.path()).unwrap();
        let dead_owner = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .unwrap();
        // A child that has exited and been reaped: its pid is free.
        let mut child = Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        std::fs::write(dead_owner.path().join(OWNER_FILE), dead_pid.to_string()).unwrap();
        let unmarked = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .unwrap();
        reap_local_dirs();
        assert!(live_owner.path().exists());
        assert!(unmarked.path().exists());
        assert!(!dead_owner.path().exists() || alive(dead_pid as i32));
    }

    #[test]
    fn registrations_are_forgotten_when_dropped() {
        let r = register(Held::Database {
            admin_url: "postgres://x@127.0.0.1:1/postgres".into(),
            name: "gone".into(),
        });
        let id = r.0;
        assert!(live().contains_key(&id));
        drop(r);
        assert!(!live().contains_key(&id));
    }
}

//! Cleanup on every exit (issue 22): SIGTERM or SIGINT during `verify`
//! removes the sandbox (data directory and server, or container) within
//! seconds and exits 143 / 130; what a run killed outright (SIGKILL) left
//! is removed when the next sandbox starts.
//!
//! Each test runs the real binary on its own backend (not the suite's
//! shared server) and looks for its resources by the owner marks the
//! product leaves: `rollsafe.pid` in a local directory, the
//! `rollsafe.sandbox=<pid>` label on a container.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use libtest_mimic::Trial;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rollsafe::sandbox::{binaries, cleanup, BackendKind, SandboxBuilder};

use crate::common::{cli, trial, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<Trial> {
    let mut trials = signal_trials();
    trials.extend(crate::trials!(
        "cleanup",
        env,
        [
            a_killed_runs_local_directory_is_removed_by_the_next_run,
            a_killed_runs_container_is_removed_by_the_next_run,
            the_local_server_lives_where_rollsafe_local_dir_says,
            sigterm_during_a_migrate_command_kills_the_command,
        ]
    ));
    // Shown as ignored (never silently passed) where the backend is absent.
    let on_docker = env.sandbox.kind() == BackendKind::Docker;
    let has_local = binaries::find_bindir(None).is_ok();
    trials
        .into_iter()
        .map(|t| {
            let needs_docker = t.name().contains("docker") || t.name().contains("container");
            let ignored = if needs_docker { !on_docker } else { !has_local };
            t.with_ignored_flag(ignored)
        })
        .collect()
}

/// What a running `verify` holds.
#[derive(Debug)]
enum Resources {
    Local { dir: PathBuf, server: i32 },
    Docker { containers: Vec<String> },
}

/// `rollsafe verify --postgres <backend>` on the embedded migrations,
/// returned once it is rehearsing V1 (its sandbox is up and in use).
fn verify_in_progress(backend: &str) -> anyhow::Result<(Child, tempfile::NamedTempFile)> {
    verify_in_progress_with(backend, &[])
}

/// [`verify_in_progress`] with extra environment variables.
fn verify_in_progress_with(
    backend: &str,
    env: &[(&str, &std::path::Path)],
) -> anyhow::Result<(Child, tempfile::NamedTempFile)> {
    let stderr = tempfile::NamedTempFile::new()?;
    let child = cli()
        .args(["verify", "--postgres", backend, "--rows", "2000"])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr.reopen()?))
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(stderr.path())?;
        if text.contains("V1:") {
            return Ok((child, stderr));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "verify --postgres {backend} did not reach V1 in 180 s: {}",
        std::fs::read_to_string(stderr.path())?
    )
}

fn resources_of(pid: u32, backend: &str) -> anyhow::Result<Resources> {
    resources_in(pid, backend, cleanup::local_dir_parents())
}

/// [`resources_of`], a local directory looked for in `parents`.
fn resources_in(pid: u32, backend: &str, parents: Vec<PathBuf>) -> anyhow::Result<Resources> {
    if backend == "docker" {
        return Ok(Resources::Docker {
            containers: containers_of(pid)?,
        });
    }
    let dirs = parents
        .into_iter()
        .filter_map(|parent| std::fs::read_dir(parent).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()));
    for dir in dirs {
        let owner = std::fs::read_to_string(dir.join(cleanup::OWNER_FILE)).unwrap_or_default();
        if owner.trim() == pid.to_string() {
            let postmaster = std::fs::read_to_string(dir.join("data/postmaster.pid"))
                .context("the server's postmaster.pid")?;
            let server = postmaster.lines().next().unwrap_or("").trim().parse()?;
            return Ok(Resources::Local { dir, server });
        }
    }
    bail!("no local sandbox directory owned by pid {pid}")
}

fn containers_of(pid: u32) -> anyhow::Result<Vec<String>> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label={}={pid}", cleanup::LABEL))
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(String::from)
        .collect())
}

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

/// Whether anything of `r` is left.
fn left(r: &Resources, owner: u32) -> anyhow::Result<Vec<String>> {
    Ok(match r {
        Resources::Local { dir, server } => {
            let mut left = Vec::new();
            if dir.exists() {
                left.push(format!("data directory {}", dir.display()));
            }
            if alive(*server) {
                left.push(format!("server pid {server}"));
            }
            left
        }
        Resources::Docker { .. } => containers_of(owner)?
            .into_iter()
            .map(|c| format!("container {c}"))
            .collect(),
    })
}

/// Signals a verify in progress on `backend`, measures the time to its
/// exit, and checks its code and that nothing it held is left.
fn signal_during_verify(backend: &str, signal: Signal, code: i32) -> anyhow::Result<()> {
    let (mut child, stderr) = verify_in_progress(backend)?;
    let pid = child.id();
    let held = resources_of(pid, backend)?;
    if let Resources::Docker { containers } = &held {
        ensure!(!containers.is_empty(), "verify runs a container");
    }
    let sent = Instant::now();
    kill(Pid::from_raw(pid as i32), signal)?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("verify was still running 10 s after {signal}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent.elapsed();
    let log = std::fs::read_to_string(stderr.path())?;
    ensure!(
        status.code() == Some(code),
        "exit {status:?} after {signal}, expected {code}: {log}"
    );
    let left = left(&held, pid)?;
    ensure!(left.is_empty(), "left after {signal}: {left:?} ({held:?})");
    ensure!(
        log.contains(&format!("rollsafe: stopped by {signal}")) && !log.contains("error:"),
        "{log}"
    );
    eprintln!(
        "cleanup: {backend}: {signal} to clean exit {code} in {:.0} ms, nothing left",
        took.as_secs_f64() * 1000.0
    );
    Ok(())
}

/// (trial, backend, signal, the exit code verify ends with: 128 + signal).
const SIGNALS: [(&str, &str, Signal, i32); 3] = [
    (
        "sigterm_during_verify_removes_the_local_sandbox",
        "local",
        Signal::SIGTERM,
        143,
    ),
    (
        "sigint_during_verify_removes_the_local_sandbox",
        "local",
        Signal::SIGINT,
        130,
    ),
    (
        "sigterm_during_verify_removes_the_docker_container",
        "docker",
        Signal::SIGTERM,
        143,
    ),
];

fn signal_trials() -> Vec<Trial> {
    SIGNALS
        .iter()
        .map(|&(name, backend, signal, code)| {
            trial(format!("cleanup::{name}"), move || {
                signal_during_verify(backend, signal, code)
            })
        })
        .collect()
}

/// SIGKILLs a verify in progress (no cleanup can run) and waits until
/// its local server followed it; returns what it held, checked to be still
/// there (only a later start may remove it).
fn kill_verify_in_progress(
    backend: &str,
    env: &[(&str, &std::path::Path)],
    parents: Vec<PathBuf>,
) -> anyhow::Result<(u32, Resources)> {
    let (mut child, _stderr) = verify_in_progress_with(backend, env)?;
    let pid = child.id();
    let held = resources_in(pid, backend, parents)?;
    child.kill()?;
    child.wait()?;
    // The local server follows its parent (parent-death signal); its
    // directory and a container stay.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Resources::Local { server, .. } = &held {
        if !alive(*server) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((pid, held))
}

/// A killed local run's directory is removed by the next local start.
/// Both runs put their server in a directory of this test's own
/// (`ROLLSAFE_LOCAL_DIR`), where no other test's start looks: so the
/// directory is still there after the kill, and only the next run of this
/// test can have removed it.
fn a_killed_runs_local_directory_is_removed_by_the_next_run(_env: &TestEnv) -> anyhow::Result<()> {
    let own = tempfile::tempdir()?;
    // The postgres OS user (as root) must be able to enter it.
    std::fs::set_permissions(
        own.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )?;
    let env = [("ROLLSAFE_LOCAL_DIR", own.path())];
    let (pid, held) = kill_verify_in_progress("local", &env, vec![own.path().to_path_buf()])?;
    let before = left(&held, pid)?;
    ensure!(
        before.iter().any(|l| l.starts_with("data directory")),
        "a killed run leaves its data directory until the next start: {before:?}"
    );
    // The next run: once it rehearses, its start has reaped.
    let (mut next, _stderr) = verify_in_progress_with("local", &env)?;
    let after = left(&held, pid);
    kill(Pid::from_raw(next.id() as i32), Signal::SIGTERM)?;
    next.wait()?;
    let after = after?;
    ensure!(after.is_empty(), "the next start left {after:?}");
    Ok(())
}

/// A killed run's container is removed by the next docker start.
/// Containers are the engine's, seen by every test's start: when another
/// test's start removed it first, the kill is tried again (three times at
/// most), so that the start measured here is the one that removes it.
fn a_killed_runs_container_is_removed_by_the_next_run(_env: &TestEnv) -> anyhow::Result<()> {
    let builder = SandboxBuilder::from_env()?.backend(rollsafe::sandbox::BackendChoice::Docker);
    for attempt in 1..=3 {
        let (pid, held) = kill_verify_in_progress("docker", &[], Vec::new())?;
        if left(&held, pid)?.is_empty() {
            eprintln!("    docker: attempt {attempt}: a concurrent start removed the killed run's container first; again");
            continue;
        }
        let next = builder.start()?;
        let left = left(&held, pid)?;
        drop(next);
        ensure!(left.is_empty(), "the next start left {left:?}");
        return Ok(());
    }
    bail!("three killed runs' containers were each removed by another test's start before this test's own start: the claim was not observed")
}

/// The local backend's directory goes where `ROLLSAFE_LOCAL_DIR` says
/// (else in memory when /dev/shm has room: the order of
/// `cleanup::local_dir_parents`), and is removed from there on SIGTERM.
fn the_local_server_lives_where_rollsafe_local_dir_says(_env: &TestEnv) -> anyhow::Result<()> {
    let chosen = tempfile::tempdir()?;
    // The postgres OS user (as root) must be able to enter it.
    std::fs::set_permissions(
        chosen.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )?;
    let (mut child, stderr) =
        verify_in_progress_with("local", &[("ROLLSAFE_LOCAL_DIR", chosen.path())])?;
    let pid = child.id();
    let held = resources_in(pid, "local", vec![chosen.path().to_path_buf()]);
    let listed: Vec<PathBuf> = std::fs::read_dir(chosen.path())?
        .flatten()
        .map(|e| e.path())
        .collect();
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM)?;
    let status = child.wait()?;
    let held = held?;
    let Resources::Local { dir, .. } = &held else {
        bail!("a local run holds a directory: {held:?}")
    };
    ensure!(
        dir.parent() == Some(chosen.path()),
        "the server's directory {} is not in ROLLSAFE_LOCAL_DIR {} (it holds {listed:?})",
        dir.display(),
        chosen.path().display()
    );
    ensure!(
        status.code() == Some(143),
        "exit {status:?}: {}",
        std::fs::read_to_string(stderr.path())?
    );
    let left = left(&held, pid)?;
    ensure!(left.is_empty(), "left after SIGTERM: {left:?}");
    Ok(())
}

/// A run stopped while a project's migrate command runs kills the
/// command's whole process group with its sandbox: an interpreter left
/// working on (a data migration at rows can take gigabytes) would outlive
/// the cancelled CI job.
fn sigterm_during_a_migrate_command_kills_the_command(_env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let pidfile = dir.path().join("worker.pid");
    let stderr = tempfile::NamedTempFile::new()?;
    let mut child = cli()
        .current_dir(dir.path())
        .args([
            "verify",
            "--postgres",
            "local",
            "--migrate-command",
            "sleep 300 & echo $! > worker.pid; wait",
            "--history-table",
            "orchard_steps",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr.reopen()?))
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let worker: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        if Instant::now() > deadline || child.try_wait()?.is_some() {
            let _ = child.kill();
            bail!(
                "the migrate command never started: {}",
                std::fs::read_to_string(stderr.path())?
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    ensure!(alive(worker), "the command's worker runs before the signal");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM)?;
    let status = child.wait()?;
    let log = std::fs::read_to_string(stderr.path())?;
    ensure!(status.code() == Some(143), "exit {status:?}: {log}");
    // A killed process is gone once its parent (the shell, killed with it)
    // is reaped by init: a moment, not seconds.
    let gone_by = Instant::now() + Duration::from_secs(5);
    while alive(worker) && Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(50));
    }
    let zombie = std::fs::read_to_string(format!("/proc/{worker}/stat"))
        .is_ok_and(|stat| stat.split_whitespace().nth(2) == Some("Z"));
    ensure!(
        !alive(worker) || zombie,
        "the migrate command's worker {worker} outlived the stopped run: {log}"
    );
    Ok(())
}

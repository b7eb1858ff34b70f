//! What the benches that run the real binary share: the backend a run
//! uses, the floor a rehearsal is compared with, one run of `rollsafe
//! verify` and where its time went (its progress lines).
//!
//! Not a bench of its own (cargo builds `benches/*.rs` and
//! `benches/*/main.rs`, not this file): `mod common;` in `verify.rs` and
//! `real_schemas.rs`.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rollsafe::app::AppVersion;
use rollsafe::catalog::Catalog;
use rollsafe::sandbox::{BackendChoice, SandboxBuilder};
use rollsafe::seed;
use rollsafe::seed::generate::Statistics;

pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// The backend a bench run uses: `ROLLSAFE_POSTGRES` as the product reads
/// it, or the one being compared.
pub fn builder(backend: Option<&str>) -> SandboxBuilder {
    let b = SandboxBuilder::from_env().expect("ROLLSAFE_POSTGRES");
    match backend {
        Some("docker") => b.backend(BackendChoice::Docker),
        Some("local") => b.backend(BackendChoice::Local),
        _ => b,
    }
}

/// The least any rehearsal of `catalog` must do: start one throwaway
/// server (same backend), apply every migration once (a no-transaction
/// file statement by statement, as `migrate` does), with `rows` rows
/// seeded (same seeding) before the first migration that meets live rows
/// of `apps` (none: no seeding), stop it.
pub fn floor_of(
    catalog: &Catalog,
    apps: &[AppVersion],
    rows: u64,
    backend: Option<&str>,
) -> Duration {
    let t = Instant::now();
    let sandbox = builder(backend).start().expect("sandbox");
    let db = sandbox.fresh_database().expect("database");
    let mut c = db.connect().expect("connect");
    let mut prev = 0;
    let mut seeded = false;
    for m in catalog.migrations() {
        let live: Vec<_> = apps.iter().filter(|a| a.needs <= prev).collect();
        if !seeded && !live.is_empty() {
            let url = db.url().to_string();
            seed::seed(&mut c, None, &live, rows, Statistics::Refreshed, &|_| {
                rollsafe::db::connect(&url)
            })
            .expect("seed");
            seeded = true;
        }
        apply(&mut c, m);
        prev = m.version;
    }
    drop(c);
    drop(db);
    drop(sandbox);
    t.elapsed()
}

/// Applies one migration as a bench's floor does: in one transaction, or
/// statement by statement when the file runs outside one (`CREATE INDEX
/// CONCURRENTLY` refuses a transaction block, an implicit one included).
pub fn apply(c: &mut postgres::Client, m: &rollsafe::catalog::Migration) {
    if m.runs_outside_transaction() {
        for st in rollsafe::sql::split(&m.sql).statements {
            c.batch_execute(&st.text)
                .unwrap_or_else(|e| panic!("applying {}: {e}", m.file));
        }
        return;
    }
    let mut tx = c.transaction().expect("begin");
    tx.batch_execute(&m.sql)
        .unwrap_or_else(|e| panic!("applying {}: {e}", m.file));
    tx.commit().expect("commit");
}

/// One run of the real binary: its wall time, its verdict line, its
/// report (stdout) and its progress lines (stderr).
pub struct VerifyRun {
    pub took: Duration,
    pub verdict: String,
    /// verify.rs reads the verdict only.
    #[allow(dead_code)]
    pub stdout: String,
    pub progress: String,
    /// Stopped at this limit before it ended (its progress lines say how
    /// far it got).
    #[allow(dead_code)]
    pub stopped_at: Option<Duration>,
}

/// `rollsafe verify ARGS` (with `--postgres BACKEND` when one is given).
pub fn run_verify(backend: Option<&str>, args: &[&str]) -> VerifyRun {
    run_verify_within(backend, args, None)
}

/// [`run_verify`], stopped with SIGTERM once `limit` has passed (rollsafe
/// drops its throwaway server on the signal).
pub fn run_verify_within(
    backend: Option<&str>,
    args: &[&str],
    limit: Option<Duration>,
) -> VerifyRun {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rollsafe"));
    cmd.arg("verify").args(args);
    if let Some(backend) = backend {
        cmd.args(["--postgres", backend]);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let t = Instant::now();
    let mut child = cmd.spawn().expect("running rollsafe verify");
    let stdout = read_all(child.stdout.take().expect("piped stdout"));
    let stderr = read_all(child.stderr.take().expect("piped stderr"));
    let mut stopped_at = None;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for rollsafe verify") {
            break status;
        }
        if limit.is_some_and(|l| t.elapsed() >= l) {
            stopped_at = Some(t.elapsed());
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            break child.wait().expect("waiting for rollsafe verify");
        }
        // (Polled often: the wall time is the figure, and a 200 ms poll
        // added up to 200 ms to every run, which the in-process floor
        // never paid.)
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = t.elapsed();
    let stdout = stdout.join().expect("stdout reader");
    let progress = stderr.join().expect("stderr reader");
    let verdict = match stopped_at {
        Some(at) => format!("stopped at the limit, {}", secs(at)),
        None => verdict_of(&stdout).unwrap_or_else(|| {
            format!(
                "exit {:?}: {}",
                status.code(),
                progress.lines().last().unwrap_or("").trim()
            )
        }),
    };
    VerifyRun {
        took,
        verdict,
        stdout,
        progress,
        stopped_at,
    }
}

fn read_all(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = from.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// The text report's last PASSED/FAILED line, or the JSON report's
/// `passed` with its count of findings.
fn verdict_of(stdout: &str) -> Option<String> {
    if let Ok(report) = serde_json::from_str::<rollsafe::report::Report>(stdout) {
        let word = if report.passed { "PASSED" } else { "FAILED" };
        return Some(format!("{word} ({} findings)", report.findings.len()));
    }
    stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("PASSED") || l.starts_with("FAILED"))
        .map(str::to_string)
}

/// The progress lines of a run: (seconds since its start, step), as
/// `[rollsafe verify 6.2s] V3: seeding …` says them.
pub fn progress_marks(progress: &str) -> Vec<(f64, String)> {
    progress
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("[rollsafe verify ")?;
            let (at, step) = rest.split_once("s] ")?;
            Some((at.parse().ok()?, step.to_string()))
        })
        .collect()
}

/// Where one verify's time went: each progress line's step lasts until the
/// next line, summed per step kind (the words before the first `:` or
/// digit-free prefix).
pub fn stage_times(progress: &str, total: Duration) -> Vec<(String, f64)> {
    let marks = progress_marks(progress);
    let mut sums: Vec<(String, f64)> = Vec::new();
    for (i, (at, step)) in marks.iter().enumerate() {
        let end = marks
            .get(i + 1)
            .map(|(t, _)| *t)
            .unwrap_or(total.as_secs_f64());
        let kind = step_kind(step);
        match sums.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, s)) => *s += end - at,
            None => sums.push((kind, end - at)),
        }
    }
    sums
}

/// `V3: seeding 10000 rows at V2` -> `seeding`; `static: squawk's …` -> `static`.
fn step_kind(step: &str) -> String {
    let step = match step.split_once(": ") {
        Some((head, rest)) if head.starts_with('V') || head.starts_with("PG") => rest,
        _ => step,
    };
    let step = step.split(": ").next().unwrap_or(step);
    step.split_whitespace()
        .take_while(|w| !w.chars().any(|c| c.is_ascii_digit()))
        .take(4)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The environment variable `name` parsed (`1_000` allowed), else `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
}

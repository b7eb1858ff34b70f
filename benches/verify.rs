//! What a rehearsal costs compared with the least any rehearsal must do.
//!
//! First, for each backend present on the machine (docker when an engine
//! answers, local when PostgreSQL binaries are installed), three runs each,
//! interleaved so that both see the same machine:
//! - verify: wall time of the real binary, `rollsafe verify --rows N` (its
//!   own throwaway server, the embedded migrations, every check);
//! - floor: start one throwaway server (same backend), apply every
//!   migration once, with N rows seeded (same seeding) before the first
//!   migration that meets live app rows, stop it;
//!
//! the medians and their ratio, then where one verify's time went (its
//! progress lines: each step until the next one starts).
//!
//! Then, unless ROLLSAFE_BENCH_QUICK is set, on the default backend: the
//! ratio at 1 000 000 rows, and for histories of 10, 50 and 200 migrations
//! (the shipped V1..V3, trivial nullable columns up to N, plus one new
//! migration): the full verify, `verify --since N`, and the floor of each
//! (a server, every migration applied once, rows seeded), to show how each
//! grows with the history, and `verify --from-target` against a database
//! at V{N} (a throwaway server of the same backend). Prints figures;
//! asserts nothing.
//!
//! `cargo bench --bench verify` (ROLLSAFE_BENCH_BACKENDS overrides the
//! backends compared, e.g. `local`; ROLLSAFE_BENCH_ROWS the extra row
//! counts, e.g. `1000000`; ROLLSAFE_BENCH_HISTORY the history lengths,
//! e.g. `10,50`; ROLLSAFE_BENCH_FULL_MAX the longest history a full verify
//! is run on, default 50: a full verify of 200 migrations takes many
//! minutes).

use std::process::Command;
use std::time::{Duration, Instant};

use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::sandbox::{binaries, docker, BackendChoice, SandboxBuilder};
use rollsafe::verify::{seed, DEFAULT_ROWS};

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// The backend a bench run uses: `ROLLSAFE_POSTGRES` as the product reads
/// it, or the one being compared.
fn builder(backend: Option<&str>) -> SandboxBuilder {
    let b = SandboxBuilder::from_env().expect("ROLLSAFE_POSTGRES");
    match backend {
        Some("docker") => b.backend(BackendChoice::Docker),
        Some("local") => b.backend(BackendChoice::Local),
        _ => b,
    }
}

fn floor(rows: u64, backend: Option<&str>) -> Duration {
    floor_of(&Catalog::embedded().expect("catalog"), rows, backend)
}

fn floor_of(catalog: &Catalog, rows: u64, backend: Option<&str>) -> Duration {
    let t = Instant::now();
    let sandbox = builder(backend).start().expect("sandbox");
    let db = sandbox.fresh_database().expect("database");
    let mut c = db.connect().expect("connect");
    let apps = shipped::apps().expect("apps");
    let mut prev = 0;
    let mut seeded = false;
    for m in catalog.migrations() {
        let live: Vec<_> = apps.iter().filter(|a| a.needs <= prev).collect();
        if !seeded && !live.is_empty() {
            let url = db.url().to_string();
            seed::seed(&mut c, &live, rows, &|_| rollsafe::db::connect(&url)).expect("seed");
            seeded = true;
        }
        let mut tx = c.transaction().expect("begin");
        tx.batch_execute(&m.sql).expect("apply");
        tx.commit().expect("commit");
        prev = m.version;
    }
    drop(c);
    drop(db);
    drop(sandbox);
    t.elapsed()
}

/// One run of the real binary: its wall time, its verdict line, and its
/// progress lines (stderr).
struct VerifyRun {
    took: Duration,
    verdict: String,
    progress: String,
}

fn verify_with(rows: u64, extra: &[&str]) -> (Duration, String) {
    let run = verify_on(None, rows, extra);
    (run.took, run.verdict)
}

fn verify_on(backend: Option<&str>, rows: u64, extra: &[&str]) -> VerifyRun {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rollsafe"));
    cmd.args(["verify", "--rows", &rows.to_string()])
        .args(extra);
    if let Some(backend) = backend {
        cmd.args(["--postgres", backend]);
    }
    let t = Instant::now();
    let out = cmd.output().expect("running rollsafe verify");
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    let verdict = text
        .lines()
        .rev()
        .find(|l| l.starts_with("PASSED") || l.starts_with("FAILED"))
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "exit {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        });
    VerifyRun {
        took,
        verdict,
        progress: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The backends to compare: ROLLSAFE_BENCH_BACKENDS, else each one this
/// machine has.
fn backends_present() -> Vec<String> {
    if let Ok(list) = std::env::var("ROLLSAFE_BENCH_BACKENDS") {
        return list.split(',').map(|s| s.trim().to_string()).collect();
    }
    let mut found = Vec::new();
    let image = builder(Some("docker")).docker_image();
    if docker::image_present(&image) {
        found.push("docker".to_string());
    }
    if binaries::find_bindir(None).is_ok() {
        found.push("local".to_string());
    }
    found
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// Where one verify's time went: each progress line's step lasts until the
/// next line (`[rollsafe verify 6.2s] V3: seeding …`), summed per step
/// kind (the words before the first `:` or digit-free prefix).
fn stage_times(progress: &str, total: Duration) -> Vec<(String, f64)> {
    let marks: Vec<(f64, String)> = progress
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("[rollsafe verify ")?;
            let (at, step) = rest.split_once("s] ")?;
            Some((at.parse().ok()?, step.to_string()))
        })
        .collect();
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

fn main() {
    let runs = 3;
    println!(
        "verify vs floor per backend, rows {DEFAULT_ROWS}: median of {runs} runs each, interleaved"
    );
    let mut one_run: Vec<(String, VerifyRun)> = Vec::new();
    for backend in backends_present() {
        let (mut vs, mut fs) = (Vec::new(), Vec::new());
        let mut verdict = String::new();
        for i in 0..runs {
            let run = verify_on(Some(&backend), DEFAULT_ROWS, &[]);
            vs.push(run.took);
            fs.push(floor(DEFAULT_ROWS, Some(&backend)));
            verdict = run.verdict.clone();
            if i == 0 {
                one_run.push((backend.clone(), run));
            }
        }
        let (v, f) = (median(vs.clone()), median(fs.clone()));
        println!(
            "backend {backend}: rollsafe verify {} | floor {} | ratio {:.2}x | runs verify [{}] floor [{}] | {verdict}",
            secs(v),
            secs(f),
            v.as_secs_f64() / f.as_secs_f64(),
            vs.iter().map(|d| format!("{:.2}", d.as_secs_f64())).collect::<Vec<_>>().join(", "),
            fs.iter().map(|d| format!("{:.2}", d.as_secs_f64())).collect::<Vec<_>>().join(", "),
        );
    }
    for (backend, run) in &one_run {
        println!(
            "where one verify's {} went (backend {backend}; each step until the next starts, summed by kind):",
            secs(run.took)
        );
        for (kind, s) in stage_times(&run.progress, run.took) {
            println!("  {s:>6.2} s  {kind}");
        }
    }
    if std::env::var_os("ROLLSAFE_BENCH_QUICK").is_some() {
        return;
    }
    let counts: Vec<u64> = match std::env::var("ROLLSAFE_BENCH_ROWS") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => vec![1_000_000],
    };
    let backend = std::env::var("ROLLSAFE_POSTGRES").unwrap_or_else(|_| "auto".into());
    println!("verify benchmark (backend {backend}): wall time, one run each");
    for rows in counts {
        let (v, verdict) = verify_with(rows, &[]);
        let f = floor(rows, None);
        println!(
            "rows {rows:>8}: rollsafe verify {} | floor (server + all migrations once, rows seeded) {} | ratio {:.1}x | {verdict}",
            secs(v),
            secs(f),
            v.as_secs_f64() / f.as_secs_f64()
        );
    }
    let lengths: Vec<i32> = std::env::var("ROLLSAFE_BENCH_HISTORY")
        .unwrap_or_else(|_| "10,50,200".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let full_max: i32 = std::env::var("ROLLSAFE_BENCH_FULL_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    println!("history of N migrations plus one new one, {DEFAULT_ROWS} rows:");
    for n in lengths {
        let dir = history(n);
        let path = dir.path().to_str().expect("utf-8 path");
        let catalog = Catalog::from_dir(dir.path()).expect("catalog");
        let f = floor_of(&catalog, DEFAULT_ROWS, None);
        let since = n.to_string();
        let (s, s_verdict) = verify_with(DEFAULT_ROWS, &["--migrations", path, "--since", &since]);
        // A target at V{n}: a database of a throwaway server of its own,
        // migrated by the real migrator.
        let target_server = builder(None).start().expect("sandbox for the target");
        let target = target_server.fresh_database().expect("target database");
        rollsafe::migrate::migrate(
            target.url(),
            &catalog,
            &rollsafe::migrate::Options {
                target: Some(n),
                ..Default::default()
            },
        )
        .expect("migrating the target");
        let (t, t_verdict) = verify_with(
            DEFAULT_ROWS,
            &["--migrations", path, "--from-target", target.url()],
        );
        drop(target);
        drop(target_server);
        let full = if n <= full_max {
            let (v, verdict) = verify_with(DEFAULT_ROWS, &["--migrations", path]);
            format!(
                "{} ({:.1}x floor; {verdict})",
                secs(v),
                v.as_secs_f64() / f.as_secs_f64()
            )
        } else {
            "not run (ROLLSAFE_BENCH_FULL_MAX)".to_string()
        };
        println!(
            "N {n:>4}: floor {} | verify --since {n} {} ({:.1}x floor; {s_verdict}) | verify --from-target (at V{n}) {} ({:.1}x floor; {t_verdict}) | full verify {full}",
            secs(f),
            secs(s),
            s.as_secs_f64() / f.as_secs_f64(),
            secs(t),
            t.as_secs_f64() / f.as_secs_f64(),
        );
    }
}

/// The shipped migrations, trivial ones up to `n`, and one new migration.
fn history(n: i32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for m in Catalog::embedded().expect("catalog").migrations() {
        std::fs::write(dir.path().join(&m.file), &m.sql).expect("write");
    }
    for v in 4..=n {
        std::fs::write(
            dir.path().join(format!("V{v}__column_{v}.sql")),
            format!("ALTER TABLE attached_functions ADD COLUMN c{v} text;"),
        )
        .expect("write");
    }
    std::fs::write(
        dir.path().join(format!("V{}__new.sql", n + 1)),
        "ALTER TABLE attached_functions ADD COLUMN note text;",
    )
    .expect("write");
    dir
}

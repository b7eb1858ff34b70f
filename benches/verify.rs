//! What a rehearsal costs compared with the least any rehearsal must do.
//!
//! First, for each backend present on the machine (docker when an engine
//! answers, local when PostgreSQL binaries are installed), three runs each
//! (ROLLSAFE_BENCH_RUNS),
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

mod common;

use std::time::Duration;

use common::{builder, env_or, floor_of, run_verify, secs, stage_times, VerifyRun};
use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::sandbox::{binaries, docker};
use rollsafe::verify::DEFAULT_ROWS;

/// The floor of the shipped set: its migrations, its apps' rows seeded.
fn floor(rows: u64, backend: Option<&str>) -> Duration {
    shipped_floor_of(&Catalog::embedded().expect("catalog"), rows, backend)
}

fn shipped_floor_of(catalog: &Catalog, rows: u64, backend: Option<&str>) -> Duration {
    floor_of(catalog, &shipped::apps().expect("apps"), rows, backend)
}

fn verify_with(rows: u64, extra: &[&str]) -> (Duration, String) {
    let run = verify_on(None, rows, extra);
    (run.took, run.verdict)
}

fn verify_on(backend: Option<&str>, rows: u64, extra: &[&str]) -> VerifyRun {
    let rows = rows.to_string();
    let args: Vec<&str> = ["--rows", rows.as_str()]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    run_verify(backend, &args)
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
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

fn main() {
    let runs: usize = env_or("ROLLSAFE_BENCH_RUNS", 3);
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
        let f = shipped_floor_of(&catalog, DEFAULT_ROWS, None);
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

//! What a rehearsal costs compared with the least any rehearsal must do.
//!
//! For each row count (the default `--rows`, then 1 000 000):
//! - verify: wall time of the real binary, `rollsafe verify --rows N` (its
//!   own throwaway server, the embedded migrations, every check);
//! - floor: start one throwaway server (same backend), apply every
//!   migration once, with N rows seeded (same seeding) before the first
//!   migration that meets live app rows;
//!
//! and the ratio. Then, for histories of 10, 50 and 200 migrations (the
//! shipped V1..V3, trivial nullable columns up to N, plus one new
//! migration): the full verify, `verify --since N`, and the floor of each
//! (a server, every migration applied once, rows seeded), to show how each
//! grows with the history, and `verify --from-target` against a database
//! at V{N} (a throwaway server of the same backend). Prints figures;
//! asserts nothing.
//!
//! `cargo bench --bench verify` (the backend follows ROLLSAFE_POSTGRES,
//! default auto; ROLLSAFE_BENCH_ROWS overrides the row counts, e.g. `10000`;
//! ROLLSAFE_BENCH_HISTORY the history lengths, e.g. `10,50`;
//! ROLLSAFE_BENCH_FULL_MAX the longest history a full verify is run on,
//! default 50: a full verify of 200 migrations takes many minutes).

use std::process::Command;
use std::time::{Duration, Instant};

use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::sandbox::SandboxBuilder;
use rollsafe::verify::{seed, DEFAULT_ROWS};

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn floor(rows: u64) -> Duration {
    floor_of(&Catalog::embedded().expect("catalog"), rows)
}

fn floor_of(catalog: &Catalog, rows: u64) -> Duration {
    let t = Instant::now();
    let sandbox = SandboxBuilder::from_env()
        .expect("ROLLSAFE_POSTGRES")
        .start()
        .expect("sandbox");
    let db = sandbox.fresh_database().expect("database");
    let mut c = db.connect().expect("connect");
    let apps = shipped::apps().expect("apps");
    let mut prev = 0;
    let mut seeded = false;
    for m in catalog.migrations() {
        let live: Vec<_> = apps.iter().filter(|a| a.needs <= prev).collect();
        if !seeded && !live.is_empty() {
            seed::seed(&mut c, &live, rows).expect("seed");
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

fn verify(rows: u64) -> (Duration, String) {
    verify_with(rows, &[])
}

fn verify_with(rows: u64, extra: &[&str]) -> (Duration, String) {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_rollsafe"))
        .args(["verify", "--rows", &rows.to_string()])
        .args(extra)
        .output()
        .expect("running rollsafe verify");
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
    (took, verdict)
}

fn main() {
    let counts: Vec<u64> = match std::env::var("ROLLSAFE_BENCH_ROWS") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => vec![DEFAULT_ROWS, 1_000_000],
    };
    let backend = std::env::var("ROLLSAFE_POSTGRES").unwrap_or_else(|_| "auto".into());
    println!("verify benchmark (backend {backend}): wall time, one run each");
    for rows in counts {
        let (v, verdict) = verify(rows);
        let f = floor(rows);
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
        let f = floor_of(&catalog, DEFAULT_ROWS);
        let since = n.to_string();
        let (s, s_verdict) = verify_with(DEFAULT_ROWS, &["--migrations", path, "--since", &since]);
        // A target at V{n}: a database of a throwaway server of its own,
        // migrated by the real migrator.
        let target_server = SandboxBuilder::from_env()
            .expect("ROLLSAFE_POSTGRES")
            .start()
            .expect("sandbox for the target");
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

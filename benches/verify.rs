//! What a rehearsal costs compared with the least any rehearsal must do.
//!
//! For each row count (the default `--rows`, then 1 000 000):
//! - verify: wall time of the real binary, `rollsafe verify --rows N` (its
//!   own throwaway server, the embedded migrations, every check);
//! - floor: start one throwaway server (same backend), apply every
//!   migration once, with N rows seeded (same seeding) before the first
//!   migration that meets live app rows;
//!
//! and the ratio. Prints figures; asserts nothing.
//!
//! `cargo bench --bench verify` (the backend follows ROLLSAFE_POSTGRES,
//! default auto; ROLLSAFE_BENCH_ROWS overrides the row counts, e.g. `10000`).

use std::process::Command;
use std::time::{Duration, Instant};

use rollsafe::catalog::Catalog;
use rollsafe::sandbox::SandboxBuilder;
use rollsafe::verify::apps::embedded_apps;
use rollsafe::verify::{seed, DEFAULT_ROWS};

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn floor(rows: u64) -> Duration {
    let t = Instant::now();
    let sandbox = SandboxBuilder::from_env()
        .expect("ROLLSAFE_POSTGRES")
        .start()
        .expect("sandbox");
    let db = sandbox.fresh_database().expect("database");
    let mut c = db.connect().expect("connect");
    let catalog = Catalog::embedded().expect("catalog");
    let apps = embedded_apps().expect("apps");
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
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_rollsafe"))
        .args(["verify", "--rows", &rows.to_string()])
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
}

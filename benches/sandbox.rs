//! Sandbox start-up benchmark: median time to start each backend present
//! and to hand out a fresh database. Prints figures; asserts nothing.
//!
//! `cargo bench --bench sandbox` (ROLLSAFE_BENCH_RUNS sets the runs per
//! backend, default 5).

use std::time::{Duration, Instant};

use rollsafe::sandbox::{BackendChoice, Sandbox};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let runs: usize = std::env::var("ROLLSAFE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    println!("sandbox benchmark: {runs} runs per backend, medians");
    for (name, choice) in [
        ("docker", BackendChoice::Docker),
        ("local", BackendChoice::Local),
    ] {
        let mut starts = Vec::new();
        let mut fresh = Vec::new();
        let mut drops = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let sandbox = match Sandbox::builder().backend(choice.clone()).start() {
                Ok(s) => s,
                Err(e) => {
                    println!("{name:>6}: not available ({e})");
                    break;
                }
            };
            starts.push(t.elapsed());
            for _ in 0..10 {
                let t = Instant::now();
                let db = sandbox.fresh_database().expect("fresh database");
                fresh.push(t.elapsed());
                drop(db);
            }
            let t = Instant::now();
            drop(sandbox);
            drops.push(t.elapsed());
        }
        if !starts.is_empty() {
            println!(
                "{name:>6}: start to first query {} | fresh_database {} ({} samples) | teardown {}",
                ms(median(starts)),
                ms(median(fresh.clone())),
                fresh.len(),
                ms(median(drops))
            );
        }
    }
}

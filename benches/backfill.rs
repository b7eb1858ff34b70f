//! A batched backfill (`-- rollsafe:batched-update`) of 1M rows against the
//! same UPDATE in one transaction, with an app workload running. Prints
//! figures; asserts nothing.
//!
//! One table `items (id bigint PRIMARY KEY, a int, b int, pad text)` with
//! ROLLSAFE_BENCH_ROWS rows (default 1M). The app: one client doing a
//! point read and a point update of random rows (1 ms apart), each timed
//! from the client. Same run, same table:
//!
//! 1. the app alone (baseline p50 / p99 / max);
//! 2. `rollsafe migrate` of a file with
//!    `-- rollsafe:batched-update items SET b = a * 2 WHERE b IS NULL`
//!    (default batch size 1000, pause 50 ms): rows/s and the app's
//!    latencies during it;
//! 3. the same kind of UPDATE of every row in one transaction: how long it
//!    holds its row locks (its duration) and the app's latencies during it.
//!
//! `cargo bench --bench backfill` (the backend follows ROLLSAFE_POSTGRES,
//! default auto).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use rollsafe::catalog::Catalog;
use rollsafe::migrate::{self, Options};
use rollsafe::sandbox::SandboxBuilder;

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The app, timed per statement, until `stop`.
fn app(url: String, rows: i64, stop: Arc<AtomicBool>) -> Vec<(Instant, Duration)> {
    let mut c = rollsafe::db::connect(&url).expect("app connects");
    let mut rng = rand::rng();
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let id: i64 = rng.random_range(1..=rows);
        let t = Instant::now();
        c.query_opt("SELECT a, b FROM items WHERE id = $1", &[&id])
            .expect("app read");
        out.push((t, t.elapsed()));
        let t = Instant::now();
        c.execute("UPDATE items SET a = a WHERE id = $1", &[&id])
            .expect("app write");
        out.push((t, t.elapsed()));
        std::thread::sleep(Duration::from_millis(1));
    }
    out
}

fn percentiles(samples: &[(Instant, Duration)], from: Instant, to: Instant) -> String {
    let mut d: Vec<Duration> = samples
        .iter()
        .filter(|(t, _)| *t >= from && *t <= to)
        .map(|(_, d)| *d)
        .collect();
    if d.is_empty() {
        return "no app statement in the window".into();
    }
    d.sort();
    let p = |q: f64| d[((d.len() as f64 * q) as usize).min(d.len() - 1)];
    format!(
        "{} statements, p50 {}, p99 {}, max {}",
        d.len(),
        ms(p(0.50)),
        ms(p(0.99)),
        ms(*d.last().expect("not empty"))
    )
}

fn main() {
    let rows: i64 = std::env::var("ROLLSAFE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let backend = std::env::var("ROLLSAFE_POSTGRES").unwrap_or_else(|_| "auto".into());
    println!("backfill benchmark (backend {backend}), {rows} rows, one run");
    let sandbox = SandboxBuilder::from_env()
        .expect("ROLLSAFE_POSTGRES")
        .start()
        .expect("sandbox");
    let db = sandbox.fresh_database().expect("database");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("V1__items.sql"),
        "CREATE TABLE items (id bigint PRIMARY KEY, a int NOT NULL, b int, pad text);",
    )
    .expect("write V1");
    std::fs::write(
        dir.path().join("V2__items_b.sql"),
        "-- rollsafe:batched-update items SET b = a * 2 WHERE b IS NULL\n",
    )
    .expect("write V2");
    let catalog = Catalog::from_dir(dir.path()).expect("catalog");
    migrate::migrate(
        db.url(),
        &catalog,
        &Options {
            target: Some(1),
            ..Options::default()
        },
    )
    .expect("V1");
    let mut c = db.connect().expect("connect");
    let t = Instant::now();
    c.execute(
        "INSERT INTO items (id, a, pad) SELECT g, (g % 1000)::int, repeat('x', 100) \
           FROM generate_series(1::bigint, $1::bigint) g",
        &[&rows],
    )
    .expect("seed");
    c.batch_execute("VACUUM ANALYZE items").expect("vacuum");
    println!("seeded {rows} rows in {:.1?}", t.elapsed());

    let stop = Arc::new(AtomicBool::new(false));
    let workload = {
        let (url, stop) = (db.url().to_string(), Arc::clone(&stop));
        std::thread::spawn(move || app(url, rows, stop))
    };

    let base_from = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let base_to = Instant::now();

    let options = Options::default();
    let batched_from = Instant::now();
    let out = migrate::migrate(db.url(), &catalog, &options).expect("batched backfill");
    let batched_to = Instant::now();
    if out.applied.len() != 1 {
        println!("note: V2 was not applied by this run (already applied?)");
    }
    let batched = batched_to - batched_from;

    std::thread::sleep(Duration::from_secs(1));
    let one_from = Instant::now();
    let updated = c
        .execute(
            "UPDATE items SET b = a * 3 + 1 WHERE b IS DISTINCT FROM a * 3 + 1",
            &[],
        )
        .expect("one-transaction update");
    let one_to = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let samples = workload.join().expect("app thread");

    println!(
        "app alone (5 s):                     {}",
        percentiles(&samples, base_from, base_to)
    );
    println!(
        "batched backfill ({} keys/batch, {} pause): {rows} rows in {:.1?} = {:.0} rows/s",
        options.backfill.batch_size,
        ms(options.backfill.pause),
        batched,
        rows as f64 / batched.as_secs_f64()
    );
    println!(
        "app during the batched backfill:     {}",
        percentiles(&samples, batched_from, batched_to)
    );
    println!(
        "one-transaction UPDATE of {updated} rows: {:.1?} = {:.0} rows/s, every updated row locked until commit (lock hold {:.1?})",
        one_to - one_from,
        updated as f64 / (one_to - one_from).as_secs_f64(),
        one_to - one_from
    );
    println!(
        "app during the one-transaction UPDATE: {}",
        percentiles(&samples, one_from, one_to)
    );
}

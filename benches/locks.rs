//! Lock waits and lock holds, as `rollsafe verify` measures and predicts
//! them. Prints figures; asserts nothing.
//!
//! 1. Behind a long write transaction (6 s) on a table with 10k legacy
//!    rows, V3 (`ADD COLUMN … DEFAULT true`, ACCESS EXCLUSIVE) runs the
//!    lock-retry loop while the live app's statements and a plain reader
//!    run: the worst wait any app statement saw, with the old fixed policy
//!    (5 s lock_timeout) and with the default stepped policy (100 ms
//!    growing to 500 ms; with apps beside it the probe's first attempt
//!    waits the 500 ms cap, the longest any attempt waits), same run, same
//!    database state.
//! 2. `rollsafe migrate` applying V3 behind a 20 s read transaction (a
//!    session that ran a SELECT on attached_functions and stays in its
//!    transaction, ACCESS SHARE granted), 10k legacy rows: the worst wait
//!    of a separate reader client running `SELECT` on the table in a loop,
//!    with the previous stepped policy (requests at once, lock_timeout
//!    100 ms growing to 500 ms) and with the default no-queue policy
//!    (waits while a conflicting lock is granted, then 50 ms attempts),
//!    same run, same database state. ROLLSAFE_BENCH_HOLD_SECS overrides
//!    the 20 s.
//! 3. A validating CHECK (`ADD CONSTRAINT … CHECK (…)`, a full pass under
//!    ACCESS EXCLUSIVE) on attached_functions: its lock hold predicted at
//!    1M rows from a 0-row and a 10k-row apply, against the hold measured
//!    at 1M rows.
//!
//! `cargo bench --bench locks` (the backend follows ROLLSAFE_POSTGRES,
//! default auto; ROLLSAFE_BENCH_BIG_ROWS overrides the 1M).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rollsafe::app::replay;
use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::lock_policy::LockPolicy;
use rollsafe::migrate::{self, Options};
use rollsafe::pg::lock_modes::Needs;
use rollsafe::sandbox::{Database, Sandbox, SandboxBuilder};
use rollsafe::seed;
use rollsafe::seed::generate::Statistics;
use rollsafe::sessions::{Sessions, DEFAULT_STATEMENT_TIMEOUT};
use rollsafe::verify::evidence::predict::{self, Sizes};
use rollsafe::verify::measure::rehearsal::{self, End};

const CHECK: &str =
    "ALTER TABLE attached_functions ADD CONSTRAINT attempts_nonneg CHECK (current_attempts >= 0)";

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// A database at `version` with `rows` rows written like the legacy app.
fn database(sandbox: &Sandbox, version: i32, rows: u64) -> Database {
    let db = sandbox.fresh_database().expect("database");
    let catalog = Catalog::embedded().expect("catalog");
    let options = Options {
        target: Some(version),
        ..Options::default()
    };
    migrate::migrate(db.url(), &catalog, &options).expect("migrate");
    if rows > 0 {
        let apps = shipped::apps().expect("apps");
        let legacy: Vec<_> = apps.iter().filter(|a| a.name == "legacy").collect();
        let mut c = db.connect().expect("connect");
        let url = db.url().to_string();
        seed::seed(&mut c, None, &legacy, rows, Statistics::Refreshed, &|_| {
            rollsafe::db::connect(&url)
        })
        .expect("seed");
    }
    db
}

fn stall_behind_long_transaction(sandbox: &Sandbox) {
    let apps = shipped::apps().expect("apps");
    let legacy = apps.iter().find(|a| a.name == "legacy").expect("legacy");
    let v3 = Catalog::embedded()
        .expect("catalog")
        .get(3)
        .unwrap()
        .sql
        .clone();
    let template = database(sandbox, 2, 10_000);
    let outcomes = {
        let mut c = template.connect().expect("connect");
        replay::replay_all(&mut c, legacy).expect("replay")
    };
    let live = vec![(legacy, rollsafe::app::replay::writers(legacy, &outcomes))];
    let tables = rollsafe::tables::list(&mut template.connect().expect("connect")).expect("tables");
    let hold = Duration::from_secs(6);
    println!("1. V3 behind a {} write transaction, 10k legacy rows, the legacy app's statements running:", ms(hold));
    for (name, policy) in [
        (
            "old: fixed 5 s lock_timeout",
            LockPolicy::default()
                .max_timeout(Duration::from_secs(5))
                .first_timeout(Duration::from_secs(5)),
        ),
        ("stepped: at most the 500 ms cap", LockPolicy::stepped()),
    ] {
        let db = sandbox.clone_database(&template).expect("clone");
        // As today's superuser migrator: the bench measures lock waits.
        let sessions = Sessions::create(sandbox, &[], None, true, DEFAULT_STATEMENT_TIMEOUT)
            .expect("sessions");
        let p = rehearsal::probe_long_transaction(
            db.url(),
            &sessions,
            rollsafe::migrate::apply::transaction_steps(&v3),
            &tables,
            &live,
            policy,
            hold,
        )
        .expect("probe");
        println!(
            "   {name:<32} worst app wait {:>8} ({}), {} attempts, {} app statements, end {:?}",
            ms(p.app.max_stall),
            p.app.max_stall_statement,
            p.attempts,
            p.app.statements,
            p.end
        );
    }
}

/// A reader of attached_functions in a loop on its own connection: when
/// each query started and how long it took.
fn reader(url: String, stop: Arc<AtomicBool>) -> JoinHandle<Vec<(Instant, Duration)>> {
    std::thread::spawn(move || {
        let mut c = rollsafe::db::connect(&url).expect("reader connects");
        let mut reads = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            c.query_one("SELECT count(*) FROM attached_functions", &[])
                .expect("reader query");
            reads.push((t, t.elapsed()));
            std::thread::sleep(Duration::from_millis(10));
        }
        reads
    })
}

/// The longest of `reads` started in `[from, to)`.
fn worst(reads: &[(Instant, Duration)], from: Instant, to: Instant) -> Duration {
    reads
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .map(|(_, d)| *d)
        .max()
        .unwrap_or_default()
}

fn migrate_behind_long_read_transaction(sandbox: &Sandbox) {
    let hold = Duration::from_secs(
        std::env::var("ROLLSAFE_BENCH_HOLD_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20),
    );
    println!(
        "2. migrate V3 behind a {} read transaction, 10k legacy rows, a separate reader looping SELECT:",
        ms(hold)
    );
    let template = database(sandbox, 2, 10_000);
    let catalog = Catalog::embedded().expect("catalog");
    // The baseline (no migrate at all) shows what the machine's load
    // alone costs the reader.
    for (name, policy) in [
        ("baseline: no migrate running", None),
        (
            "old: stepped, 100 ms growing to 500 ms",
            Some(LockPolicy::stepped()),
        ),
        (
            "new: no-queue, then 50 ms attempts",
            Some(LockPolicy::default()),
        ),
    ] {
        let db = sandbox.clone_database(&template).expect("clone");
        let mut holder = db.connect().expect("connect");
        holder
            .batch_execute(
                "SET application_name = 'long_report'; BEGIN; SELECT count(*) FROM attached_functions",
            )
            .expect("long transaction");
        let stop = Arc::new(AtomicBool::new(false));
        let reads = reader(db.url().to_string(), Arc::clone(&stop));
        let started = Instant::now();
        let migrator = policy.map(|policy| {
            let (url, catalog) = (db.url().to_string(), catalog.clone());
            std::thread::spawn(move || {
                let options = Options {
                    lock: policy,
                    ..Options::default()
                };
                let r = migrate::migrate(&url, &catalog, &options);
                (r, Instant::now())
            })
        });
        std::thread::sleep(hold);
        holder.batch_execute("COMMIT").expect("commit");
        let released = Instant::now();
        let outcome = migrator.map(|m| m.join().expect("migrator thread"));
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        let reads = reads.join().expect("reader thread");
        let end = Instant::now();
        let how = match outcome {
            None => String::new(),
            Some((outcome, done)) => {
                let applied = outcome.expect("migrate").applied;
                let v3 = applied.first().expect("V3 applied");
                format!(
                    " | {} lock attempts, {} waited without queueing, applied {} after the release",
                    v3.attempts,
                    ms(v3.waited),
                    ms(done.saturating_duration_since(released)),
                )
            }
        };
        println!(
            "   {name:<40} worst reader wait {:>7} over {} reads (while held {:>7}, from the release on {:>7}){how}",
            ms(worst(&reads, started, end)),
            reads.len(),
            ms(worst(&reads, started, released)),
            ms(worst(&reads, released, end)),
        );
    }
}

fn check_hold_prediction(sandbox: &Sandbox) {
    let big: u64 = std::env::var("ROLLSAFE_BENCH_BIG_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    println!("3. validating CHECK on attached_functions: hold predicted from 0 and 10k rows vs measured at {big} rows:");
    let empty = database(sandbox, 3, 0);
    let small = database(sandbox, 3, 10_000);
    let at_zero = rehearsal::apply_measured(empty.url(), empty.url(), CHECK, None, End::Rollback)
        .expect("apply");
    let at_small = rehearsal::apply_measured(small.url(), small.url(), CHECK, None, End::Rollback)
        .expect("apply");
    let sizes = Sizes::from_pairs([format!("attached_functions={big}").as_str()]).expect("sizes");
    let predicted = predict::holds(&at_zero, &at_small, &Needs::unknown(), &sizes);
    let h = predicted
        .iter()
        .find(|h| h.table == "attached_functions")
        .expect("a blocking lock on attached_functions");
    drop((empty, small));
    let large = database(sandbox, 3, big);
    let at_big = rehearsal::apply_measured(large.url(), large.url(), CHECK, None, End::Rollback)
        .expect("apply");
    let err = (h.predicted.as_secs_f64() - at_big.held.as_secs_f64()) / at_big.held.as_secs_f64();
    println!(
        "   measured at 10k rows {} | predicted at {big} rows {} | measured at {big} rows {} | prediction off by {:+.0}%",
        ms(h.measured),
        ms(h.predicted),
        ms(at_big.held),
        err * 100.0
    );
}

fn main() {
    let backend = std::env::var("ROLLSAFE_POSTGRES").unwrap_or_else(|_| "auto".into());
    println!("locks benchmark (backend {backend}), one run each");
    let sandbox = SandboxBuilder::from_env()
        .expect("ROLLSAFE_POSTGRES")
        .start()
        .expect("sandbox");
    stall_behind_long_transaction(&sandbox);
    migrate_behind_long_read_transaction(&sandbox);
    check_hold_prediction(&sandbox);
}

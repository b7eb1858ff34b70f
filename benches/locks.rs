//! Lock waits and lock holds, as `rollsafe verify` measures and predicts
//! them. Prints figures; asserts nothing.
//!
//! 1. Behind a long write transaction (6 s) on a table with 10k legacy
//!    rows, V3 (`ADD COLUMN … DEFAULT true`, ACCESS EXCLUSIVE) runs the
//!    lock-retry loop while the live app's statements and a plain reader
//!    run: the worst wait any app statement saw, with the old fixed policy
//!    (5 s lock_timeout) and with the default stepped policy (100 ms
//!    growing to 500 ms), same run, same database state.
//! 2. A validating CHECK (`ADD CONSTRAINT … CHECK (…)`, a full pass under
//!    ACCESS EXCLUSIVE) on attached_functions: its lock hold predicted at
//!    1M rows from a 0-row and a 10k-row apply, against the hold measured
//!    at 1M rows.
//!
//! `cargo bench --bench locks` (the backend follows ROLLSAFE_POSTGRES,
//! default auto; ROLLSAFE_BENCH_BIG_ROWS overrides the 1M).

use std::time::Duration;

use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::lock_policy::LockPolicy;
use rollsafe::migrate::{self, Options};
use rollsafe::sandbox::{Database, Sandbox, SandboxBuilder};
use rollsafe::verify::lock_modes::Needs;
use rollsafe::verify::predict::{self, Sizes};
use rollsafe::verify::rehearsal::{self, End};
use rollsafe::verify::{replay, seed};

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
        seed::seed(&mut c, &legacy, rows).expect("seed");
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
    let live = vec![(legacy, legacy.writers(&outcomes))];
    let tables: Vec<String> = ["attached_functions", "collections", "functions"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let hold = Duration::from_secs(6);
    println!("1. V3 behind a {} write transaction, 10k legacy rows, the legacy app's statements running:", ms(hold));
    for (name, policy) in [
        (
            "old: fixed 5 s lock_timeout",
            LockPolicy::default()
                .max_timeout(Duration::from_secs(5))
                .first_timeout(Duration::from_secs(5)),
        ),
        ("new: 100 ms growing to 500 ms", LockPolicy::default()),
    ] {
        let db = sandbox.clone_database(&template).expect("clone");
        let p = rehearsal::probe_long_transaction(db.url(), &v3, &tables, &live, policy, hold)
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

fn check_hold_prediction(sandbox: &Sandbox) {
    let big: u64 = std::env::var("ROLLSAFE_BENCH_BIG_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    println!("2. validating CHECK on attached_functions: hold predicted from 0 and 10k rows vs measured at {big} rows:");
    let empty = database(sandbox, 3, 0);
    let small = database(sandbox, 3, 10_000);
    let at_zero =
        rehearsal::apply_measured(empty.url(), CHECK, None, End::Rollback).expect("apply");
    let at_small =
        rehearsal::apply_measured(small.url(), CHECK, None, End::Rollback).expect("apply");
    let sizes = Sizes::from_pairs([format!("attached_functions={big}").as_str()]).expect("sizes");
    let predicted = predict::holds(&at_zero, &at_small, &Needs::unknown(), &sizes);
    let h = predicted
        .iter()
        .find(|h| h.table == "attached_functions")
        .expect("a blocking lock on attached_functions");
    drop((empty, small));
    let large = database(sandbox, 3, big);
    let at_big = rehearsal::apply_measured(large.url(), CHECK, None, End::Rollback).expect("apply");
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
    check_hold_prediction(&sandbox);
}

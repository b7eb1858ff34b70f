//! A migration's backfills, measured on the seeded database right after
//! it: each `-- rollsafe:backfill` directive's rows still unsettled, and
//! each batched update (`-- rollsafe:batched-update`) run as `rollsafe
//! migrate` runs it (batches under the lock policy), killed once at a
//! random moment and run again, then the rows it still matches. Judged by
//! `backfill`.
//!
//! Floor `measure`: each takes a database and returns what it counted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connect_migrator;
use crate::catalog::Migration;
use crate::lock_policy::LockPolicy;
use crate::sandbox::Database;
use crate::sessions::Sessions;
use crate::verify::error::{step, VerifyError};
use crate::verify::evidence::{BatchedRun, DirectiveCount};

/// The rows each of `m`'s backfill directives still finds on `db` (as the
/// migrator).
pub fn directive_counts(
    sessions: &Sessions,
    db: &Database,
    m: &Migration,
) -> Result<Vec<DirectiveCount>, VerifyError> {
    let mut c = connect_migrator(sessions, db)?;
    Ok(m.backfills()
        .map(|(table, predicate)| {
            let count = crate::validity::backfill_violations(&mut c, table, predicate, None)
                .map_err(|e| crate::errors::one_line(&e));
            (table.to_string(), predicate.to_string(), count)
        })
        .collect())
}

/// Runs `m`'s batched updates on `db` as `migrate` does, each killed at a
/// random moment (its connection terminated, as a killed migrate's would
/// be) and run again: it must resume and settle every row. `starting`
/// is told each table before its update runs (progress).
pub fn run_batched_updates(
    sessions: &Sessions,
    db: &Database,
    m: &Migration,
    policy: &LockPolicy,
    starting: &dyn Fn(&str),
) -> Result<Vec<BatchedRun>, VerifyError> {
    use crate::migrate::backfill as batches;
    let mut out = Vec::new();
    if m.batched_updates().next().is_none() {
        return Ok(out);
    }
    let mut c = connect_migrator(sessions, db)?;
    step(
        "creating the backfill progress table",
        batches::ensure_progress_table(&mut c),
    )?;
    drop(c);
    for (i, b) in m.batched_updates().enumerate() {
        starting(&b.table.to_string());
        let started = Instant::now();
        let run = |c: &mut postgres::Client| {
            batches::run(
                c,
                m,
                i,
                b,
                &batches::BackfillOptions::default(),
                policy,
                None,
            )
            .map_err(|e| e.to_string())
        };
        let mut c = connect_migrator(sessions, db)?;
        let pid: i32 = step(
            "reading the backend pid",
            c.query_one("SELECT pg_backend_pid()", &[]),
        )?
        .get(0);
        let done = Arc::new(AtomicBool::new(false));
        let delay = Duration::from_millis(rand::random_range(0..400));
        let killer = {
            let (done, url) = (done.clone(), db.url().to_string());
            std::thread::spawn(move || -> bool {
                std::thread::sleep(delay);
                if done.load(Ordering::SeqCst) {
                    return false;
                }
                crate::db::connect(&url)
                    .ok()
                    .and_then(|mut a| a.query_one("SELECT pg_terminate_backend($1)", &[&pid]).ok())
                    .is_some_and(|r| r.get::<_, bool>(0))
            })
        };
        let first = run(&mut c);
        done.store(true, Ordering::SeqCst);
        let killed = killer.join().unwrap_or(false) && first.is_err();
        drop(c);
        let mut c = connect_migrator(sessions, db)?;
        let result = if killed { run(&mut c) } else { first };
        let remaining = c
            .query_one(
                &format!(
                    "SELECT count(*) FROM {} WHERE {}",
                    b.table.sql(),
                    b.predicate
                ),
                &[],
            )
            .map(|r| r.get::<_, i64>(0))
            .map_err(|e| crate::errors::one_line(&e));
        out.push(BatchedRun {
            directive: b.clone(),
            rows: result,
            remaining,
            killed_after: killed.then_some(delay),
            took: started.elapsed(),
        });
    }
    Ok(out)
}

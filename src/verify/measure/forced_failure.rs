//! The forced-failure scenario on the empty path: the migration with a
//! failure injected at its end runs in one plain transaction and is
//! rolled back (what a crash before the commit leaves must be nothing:
//! the trace), then the real apply, measured, on the same database.
//! Its two halves are apart so that the stages may schedule the second
//! beside the seeding ([`fail_before_commit`] also tells what the
//! migration reaches: what its transaction held at its end).
//!
//! Floor `measure`: it takes a database and the sessions and returns
//! evidence; the stages say when and on which copy.

use std::collections::BTreeSet;

use crate::catalog::Migration;
use crate::sandbox::Database;
use crate::schema::Snapshot;
use crate::sessions::Sessions;
use crate::verify::error::{step, VerifyError};
use crate::verify::evidence::Applied;
use crate::verify::measure::rehearsal;

/// What a transaction of the forced failure held at its end, read inside
/// it before the failure is raised: the relations it locked (by oid) and
/// the project's functions that may read a table (those it created
/// included).
#[derive(Default)]
pub struct AtEnd {
    reached: bool,
    pub locked: BTreeSet<u32>,
    pub functions: BTreeSet<String>,
    /// When the transaction started, and how long it ran to its last
    /// statement's end ([`Applied::forced_failure_took`]).
    started: Option<std::time::Instant>,
    pub took: std::time::Duration,
}

impl crate::migrate::apply::StepObserver for AtEnd {
    fn finishing(&mut self, c: &mut postgres::Client) -> Result<(), postgres::Error> {
        self.took = self.started.map(|s| s.elapsed()).unwrap_or_default();
        // The catalogs themselves, whatever the migration did to the
        // search path (a table of its own named pg_locks must not hide
        // its locks, nor a temporary one); the transaction is rolled back
        // right after.
        c.batch_execute("SET LOCAL search_path TO pg_catalog, pg_temp")?;
        self.locked = c
            .query(
                "SELECT DISTINCT relation::oid FROM pg_locks
                  WHERE pid = pg_backend_pid() AND locktype = 'relation' AND relation IS NOT NULL",
                &[],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        self.functions = crate::seed::generate::table_reading_functions(c)?;
        self.reached = true;
        Ok(())
    }
}

/// The forced-failure scenario, then the measured apply, on `empty`:
/// the migration with a failure injected at its end runs in one plain
/// transaction and is rolled back, so the database must look as before
/// (the trace: what differs); then the real apply on the same
/// database. Only the failure's trace matters, not its measurements.
pub fn forced_failure(
    sessions: &Sessions,
    m: &Migration,
    empty: &Database,
) -> Result<(Applied, Vec<String>), VerifyError> {
    let (before, at_end) = fail_before_commit(sessions, m, empty)?;
    trace_and_measure(empty, sessions, m, before, at_end.map(|a| a.took))
}

/// The forced failure's first half on `empty`: the schema before, then
/// the migration's statements and a failure raised before the commit
/// (what a crash there leaves: it must be nothing). Also what its
/// transaction held at its end, None when a statement failed first.
pub fn fail_before_commit(
    sessions: &Sessions,
    m: &Migration,
    empty: &Database,
) -> Result<(Snapshot, Option<AtEnd>), VerifyError> {
    use crate::migrate::apply;
    let before = super::snapshot(empty)?;
    let mut admin = step("connecting", empty.connect())?;
    let positions = step("reading the sequences", sequence_positions(&mut admin))?;
    let mut c = step(
        "connecting as the migrator",
        crate::db::connect(&sessions.migrator(empty.url())),
    )?;
    let mut at_end = AtEnd::default();
    let _own = step(
        "setting aside the roles the migration creates",
        sessions.own_roles(m.version, &m.sql, empty.name()),
    )?;
    at_end.started = Some(std::time::Instant::now());
    let ran = apply::in_transaction(
        &mut c,
        &apply::migration_steps(m),
        None,
        apply::Ending::Fail,
        &mut at_end,
    );
    // (The failure raised at the end is an error too: what matters is
    // whether the end was reached.)
    let _ = ran;
    drop(c);
    step(
        "putting the sequences back",
        restore_sequences(&mut admin, &positions),
    )?;
    Ok((before, at_end.reached.then_some(at_end)))
}

/// Every sequence's position: (name, last value given, start value).
type Positions = Vec<(String, Option<i64>, i64)>;

/// Where every sequence stands. A rollback does not undo `nextval`, so
/// the forced failure moves the sequences its inserts drew from; the
/// measured apply after it must start where a clean one would. A
/// framework's migration replayed as sent carries the ids its sequences
/// gave in the framework's own run (a data migration's row that points
/// at a row it inserted just before, by id): drawn from a moved sequence,
/// the row gets another id and the reference breaks, a false
/// `apply.fails-on-empty`.
fn sequence_positions(c: &mut postgres::Client) -> Result<Positions, postgres::Error> {
    Ok(c.query(
        "SELECT format('%I.%I', schemaname, sequencename), last_value, start_value
               FROM pg_catalog.pg_sequences",
        &[],
    )?
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect())
}

/// Puts back every sequence of `before` that moved since.
fn restore_sequences(c: &mut postgres::Client, before: &Positions) -> Result<(), postgres::Error> {
    let now = sequence_positions(c)?;
    for (name, last, start) in before {
        let moved = now.iter().any(|(n, l, _)| n == name && l != last);
        if !moved {
            continue;
        }
        match last {
            Some(v) => c.execute(
                "SELECT pg_catalog.setval($1::text::regclass, $2, true)",
                &[name, v],
            )?,
            None => c.execute(
                "SELECT pg_catalog.setval($1::text::regclass, $2, false)",
                &[name, start],
            )?,
        };
    }
    Ok(())
}

/// The forced failure's second half: what it left (the trace: what
/// differs from `before`), then the real apply on the same database,
/// measured, as the migrator. Needs nothing of the run but these, so
/// it may run beside the seeding.
pub fn trace_and_measure(
    empty: &Database,
    sessions: &Sessions,
    m: &Migration,
    before: Snapshot,
    forced_took: Option<std::time::Duration>,
) -> Result<(Applied, Vec<String>), VerifyError> {
    let trace = super::snapshot(empty)?.diff(&before);
    let _own = step(
        "setting aside the roles the migration creates",
        sessions.own_roles(m.version, &m.sql, empty.name()),
    )?;
    let migrator_url = sessions.migrator(empty.url());
    let mut at_zero = step(
        "applying on an empty database",
        rehearsal::apply_migration_measured(empty.url(), &migrator_url, m),
    )?;
    at_zero.forced_failure_took = forced_took;
    Ok((at_zero, trace))
}

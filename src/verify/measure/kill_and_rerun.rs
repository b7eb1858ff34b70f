//! The kill-and-rerun scenario of a file that runs outside a transaction:
//! its measured apply, then a copy killed after a random statement and
//! rerun, whose schema must be the clean run's.
//!
//! Floor `measure`: it takes the databases (the stages make the copy) and
//! the sessions, and returns evidence.

use crate::catalog::Migration;
use crate::sandbox::Database;
use crate::sessions::{OwnRoles, Sessions};
use crate::verify::error::{step, VerifyError};
use crate::verify::evidence::{Applied, Rerun};
use crate::verify::measure::rehearsal;

/// The measured apply of a file outside a transaction on `empty`, then
/// the kill-and-rerun scenario (None when the apply failed). Outside a
/// transaction a failure or a kill leaves the statements before it
/// applied, and migrate reruns the file: what must hold is that the rerun
/// converges. `killed`, a copy of the template at V{prev} that the stages
/// made, is killed after a random statement and rerun; its schema must be
/// the clean run's.
pub fn run(
    sessions: &Sessions,
    m: &Migration,
    empty: &Database,
    killed: &Database,
) -> Result<(Applied, Option<Rerun>), VerifyError> {
    use crate::migrate::{apply, no_transaction as nt};
    let own = own_roles(sessions, m, empty)?;
    let at_zero = step(
        "applying on an empty database",
        rehearsal::apply_migration_measured(empty.url(), &sessions.migrator(empty.url()), m),
    )?;
    drop(own);
    if !at_zero.ok() {
        return Ok((at_zero, None));
    }
    let clean = super::snapshot(empty)?;
    // The whole run (its tool's callbacks around the file, on its
    // connection) is killed after one of the file's own statements.
    let steps = apply::migration_steps(m);
    let before = steps.iter().take_while(|s| s.script.is_some()).count();
    let own: Vec<apply::Step> = steps
        .iter()
        .filter(|s| s.script.is_none())
        .cloned()
        .collect();
    // n is a rerun after a complete run. The killed run stops where a
    // failure would have stopped it.
    let Some(points) = nt::kill_points(m, &own) else {
        return Ok((at_zero, None));
    };
    let k = before + rand::random_range(points);
    // The killed run and its rerun are one production run.
    let _own = own_roles(sessions, m, killed)?;
    let mut c = step(
        "connecting as the migrator",
        crate::db::connect(&sessions.migrator(killed.url())),
    )?;
    let _ = apply::outside_transaction(
        &mut c,
        &steps[..k.min(steps.len())],
        None,
        &mut apply::Unobserved,
    );
    drop(c);
    let rerun = step(
        "rerunning after a kill",
        rehearsal::apply_migration_measured(killed.url(), &sessions.migrator(killed.url()), m),
    )?;
    let changed = super::snapshot(killed)?.diff(&clean);
    let rerun = Rerun {
        applied: rerun,
        changed,
        killed_after: k - before,
        statements: own.len(),
        line: steps.get(k - 1).map_or(0, |st| st.statement.line),
    };
    Ok((at_zero, Some(rerun)))
}

/// The roles `m` creates set aside on `db` while it runs (as the stages'
/// rehearsals do).
fn own_roles<'s>(
    sessions: &'s Sessions,
    m: &Migration,
    db: &Database,
) -> Result<OwnRoles<'s>, VerifyError> {
    step(
        "setting aside the roles the migration creates",
        sessions.own_roles(m.version, &m.sql, db.name()),
    )
}

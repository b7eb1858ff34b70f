//! Migrations production sends in one transaction (Alembic's default
//! `env.py`, Drizzle's migrate: every pending migration in one), applied
//! so: the run's statements, each migration's with its tool's callbacks
//! (`migrate::apply::migration_steps`), in one transaction on a database
//! at the version before the run. The rehearsal applies each migration in
//! a transaction of its own; what only fails when they share one is seen
//! here: an enum value one migration adds and the next one uses
//! (`unsafe use of new value`), a table one creates and the next one
//! alters with pending trigger events, a `SET LOCAL` of an earlier one
//! still in force in a later one.
//!
//! Measured on an empty database (the base's, cloned): what fails there
//! fails whatever the rows. Rows change nothing of what is measured here.

use postgres::Client;

use crate::catalog::Migration;
use crate::migrate::apply;
use crate::verify::evidence::SharedRunFailure;

/// Applies `run` (two or more migrations, in order) in one transaction on
/// `c`, committed: None when it applied, or where it failed (the
/// transaction rolled back). `path_of` names a migration's file as the
/// repository has it.
pub fn apply_as_one(
    c: &mut Client,
    run: &[&Migration],
    path_of: &dyn Fn(&Migration) -> String,
) -> Option<SharedRunFailure> {
    // Each step with the migration it belongs to.
    let mut steps = Vec::new();
    let mut owners = Vec::new();
    for m in run {
        for s in apply::migration_steps(m) {
            steps.push(s);
            owners.push(*m);
        }
    }
    let failed = apply::in_transaction(
        c,
        &steps,
        None,
        apply::Ending::Commit,
        &mut apply::Unobserved,
    )
    .err()?;
    let index = failed.index();
    // A failure at COMMIT (a deferred constraint) is the last migration's.
    let (m, step) = match (owners.get(index), steps.get(index)) {
        (Some(m), Some(step)) => (*m, Some(step)),
        _ => (*run.last()?, None),
    };
    Some(SharedRunFailure {
        version: m.version,
        file: match step.and_then(|s| s.script.clone()) {
            Some(script) => script,
            None => path_of(m),
        },
        line: step.map_or(1, |s| s.statement.line),
        column: step.map_or(1, |s| s.statement.column),
        statement: step.map_or_else(|| "COMMIT".to_string(), |s| s.statement.excerpt(60)),
        message: failed.message(),
    })
}

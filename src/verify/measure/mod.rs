//! verify's instruments (floor `measure`, above `evidence`, below
//! `checks` and `stages`): each takes a database or a connection, and
//! what it needs of the run, and returns evidence. None judges (that is
//! `checks`) or decides when it runs (that is `stages`).
//!
//! - [`rehearsal`]: a migration applied under a measured workload (and
//!   [`rehearsal::outside_transaction`] for a file that runs outside one);
//! - [`forced_failure`]: the empty path's forced failure and measured apply;
//! - [`kill_and_rerun`]: a file outside a transaction killed and rerun;
//! - [`external`]: a migration applied at rows by a command of the
//!   project's own (a framework's data migration), measured from outside;
//! - [`planning`]: the live apps' statements planned before and after;
//! - [`readers`]: what the apps' read statements return around a
//!   migration, and the rows the older apps write during the rollout;
//! - [`backfill`]: the file's backfill directives counted, and its
//!   batched updates run as `migrate` runs them (killed once, resumed);
//! - [`compat`]: the apps replayed on the schema before and after, side
//!   by side, and the rows the older apps write during the rollout;
//! - [`cross_version`]: two app versions side by side through drivers;
//! - [`seeding`]: the seeded path's rows, the apps' and the generator's;
//! - [`sizes`]: production's table sizes (`--sizes-from`);
//! - [`shared_transaction`]: the migrations production sends in one
//!   transaction, applied in one on an empty database.
//!
//! Outside verify, because more than a rehearsal uses them: who connects
//! as whom and the lock sampler ([`crate::sessions`]), and what a real
//! database holds ([`crate::target`], `--from-target`).

pub mod backfill;
pub mod compat;
pub mod cross_version;
pub mod external;
pub mod forced_failure;
pub mod kill_and_rerun;
pub mod planning;
pub mod readers;
pub mod rehearsal;
pub mod seeding;
pub mod shared_transaction;
pub mod sizes;

use postgres::Client;

use crate::app::AppVersion;
use crate::catalog::Script;
use crate::sandbox::Database;
use crate::schema::Snapshot;
use crate::sessions::Sessions;
use crate::verify::error::{step, VerifyError};
use crate::verify::evidence::VerifyScript;

/// The user tables of `db` (without migrate's bookkeeping).
pub fn user_tables(db: &Database) -> Result<Vec<crate::tables::UserTable>, VerifyError> {
    let mut c = step("connecting", db.connect())?;
    step("listing tables", crate::tables::list(&mut c))
}

/// The names (lower case) of the project's own functions on `db` that may
/// read or write a table.
pub fn table_reading_functions(
    db: &Database,
) -> Result<std::collections::BTreeSet<String>, VerifyError> {
    let mut c = step("connecting", db.connect())?;
    step(
        "listing functions",
        crate::seed::generate::table_reading_functions(&mut c),
    )
}

/// The tables of `db` that are UNLOGGED (`relpersistence = 'u'`).
pub fn unlogged_tables(db: &Database) -> Result<Vec<String>, VerifyError> {
    let mut c = step("connecting", db.connect())?;
    let rows = step(
        "reading which tables are unlogged",
        c.query(
            &format!(
                "SELECT t.name FROM ({}) t JOIN pg_class c ON c.oid = t.oid
                  WHERE c.relpersistence = 'u' ORDER BY 1",
                crate::tables::list_sql()
            ),
            &[],
        ),
    )?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A connection to `db` as the migrator.
pub fn connect_migrator(sessions: &Sessions, db: &Database) -> Result<Client, VerifyError> {
    step(
        "connecting as the migrator",
        crate::db::connect(&sessions.migrator(db.url())),
    )
}

/// A connection to `db` as `app`'s role.
pub fn connect_app(
    sessions: &Sessions,
    db: &Database,
    app: &AppVersion,
) -> Result<Client, VerifyError> {
    step(
        &format!("connecting as the {} app's role", app.name),
        crate::db::connect(&sessions.app(db.url(), &app.name)),
    )
}

/// The connection seeding runs on: as the migrator (the owner of the
/// tables, whose seeds are the project's files), through the seeder role
/// where there is one, so the generator's rows may skip the per-row
/// foreign-key checks ([`crate::seed::generate`]).
pub fn connect_seeding(sessions: &Sessions, db: &Database) -> Result<Client, VerifyError> {
    let Some((url, migrator)) = sessions.seeder(db.url()) else {
        return connect_migrator(sessions, db);
    };
    let mut c = step("connecting as the seeder", crate::db::connect(&url))?;
    step(
        "becoming the migrator",
        c.batch_execute(&format!("SET ROLE {}", crate::pg::quote_ident(&migrator))),
    )?;
    Ok(c)
}

/// The change's own verify script (Sqitch) on `db`, as the migrator, in a
/// transaction rolled back: it checks, and whatever it writes is not kept.
/// (A script of its own, not the migration's apply: no callback of a
/// tool runs around it, and Sqitch's changes have none.)
pub fn verify_script(
    sessions: &Sessions,
    db: &Database,
    script: &Script,
) -> Result<VerifyScript, VerifyError> {
    use crate::migrate::apply;
    let mut c = connect_migrator(sessions, db)?;
    let ran = apply::in_transaction(
        &mut c,
        &apply::transaction_steps(&script.sql),
        None,
        apply::Ending::Rollback,
        &mut apply::Unobserved,
    );
    Ok(VerifyScript {
        file: script.file.clone(),
        error: ran.err().map(|e| {
            e.error()
                .map_or_else(|| e.message(), crate::errors::detailed)
        }),
    })
}

/// The schema of `db`: what every scenario compares before and after.
pub fn snapshot(db: &Database) -> Result<Snapshot, VerifyError> {
    let mut c = step("connecting", db.connect())?;
    step("reading the schema", Snapshot::read(&mut c))
}

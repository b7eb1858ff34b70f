//! The apps on a migrated schema: each app's statements replayed as its
//! role, and, on a copy of the database right after the migration (it
//! writes rows), every app that may run on the schema after it replayed
//! over a few seeded rows, each still-running app side by side with each
//! newer one through their drivers ([`super::cross_version`]), and the
//! rows the older apps write during the rollout read back by the newer
//! apps' readers ([`super::readers`]). Judged by `compat` (and the
//! readers by `backfill`).
//!
//! Floor `measure`: each takes a database and the apps and returns what
//! they did.

use std::collections::BTreeMap;

use super::readers::Readers;
use super::{connect_app, connect_seeding, cross_version};
use crate::app::replay::{self, Outcome};
use crate::app::AppVersion;
use crate::sandbox::Database;
use crate::seed;
use crate::seed::generate::Statistics;
use crate::sessions::Sessions;
use crate::verify::error::{step, VerifyError};
use crate::verify::evidence::{Compat, SideBySide};

/// Rows written on the compat scenario's database, so statements that
/// need existing data find some.
pub const COMPAT_ROWS: u64 = 50;

/// Each of `apps`' statements replayed on `db` as its role, by app name.
pub fn replay_apps(
    sessions: &Sessions,
    db: &Database,
    apps: &[&AppVersion],
) -> Result<BTreeMap<String, Vec<Outcome>>, VerifyError> {
    Ok(replay_each(sessions, db, apps)?.into_iter().collect())
}

/// Each of `apps`' statements replayed on `db` as its role, in `apps`'
/// order.
fn replay_each(
    sessions: &Sessions,
    db: &Database,
    apps: &[&AppVersion],
) -> Result<Vec<(String, Vec<Outcome>)>, VerifyError> {
    let mut out = Vec::new();
    for app in apps {
        let mut c = connect_app(sessions, db, app)?;
        let mut outcomes = step("replaying statements", replay::replay_all(&mut c, app))?;
        step(
            "replaying again the statements that failed on rollsafe's values",
            again_with_values_that_hold(&mut c, app, &mut outcomes),
        )?;
        out.push((app.name.clone(), outcomes));
    }
    Ok(out)
}

/// Each write of `outcomes` that failed only on a value rollsafe made
/// (`capture::params::made_value_failure`: every column of the refused
/// constraint filled by a `-- param:` rollsafe wrote, none by the tests or
/// the migration) runs once more, in a rolled-back transaction, with a
/// value the generator makes that holds: that run is its outcome, and why
/// the first failed is kept (`Outcome::made_value`), so the failure is
/// never blamed on the migration and the statement is still measured.
fn again_with_values_that_hold(
    c: &mut postgres::Client,
    app: &AppVersion,
    outcomes: &mut [Outcome],
) -> Result<(), postgres::Error> {
    use crate::capture::params;
    for o in outcomes.iter_mut() {
        let Some((replay::Step::Execute, message)) = &o.failure else {
            continue;
        };
        let Ok(statement) = app.set.get(&o.statement) else {
            continue;
        };
        let Some(made) = params::made_value_failure(c, statement, message) else {
            continue;
        };
        let why = made.to_string();
        let again = params::with_a_value_that_holds(c, statement, &made);
        let Some(again) = again else {
            *o = Outcome {
                statement: o.statement.clone(),
                made_value: Some(format!(
                    "{why}; no value that holds could be made, so it is not measured"
                )),
                ..Outcome::default()
            };
            continue;
        };
        c.batch_execute("BEGIN")?;
        let run = replay::prepare_sql(
            c,
            &again.name,
            &again.sql,
            &replay::declared_params(again.meta_values("param")),
        )
        .and_then(|p| {
            let args = replay::arguments(c, &p)?;
            replay::execute_with(c, &p, &args)
        });
        c.batch_execute("ROLLBACK")?;
        o.made_value = Some(why);
        match run {
            Ok(rows) => {
                o.failure = None;
                o.sqlstate = None;
                o.rows = Some(rows);
            }
            Err(e) => {
                o.failure = Some((replay::Step::Execute, crate::errors::one_line(&e)));
                o.sqlstate = e.code().map(|s| s.code().to_string());
            }
        }
    }
    Ok(())
}

/// The schema after the migration on `db` (a copy of its own): `runnable`
/// (every app that may run on it) replayed over [`COMPAT_ROWS`] seeded
/// rows, each of the `live` apps beside each newer runnable one, and the
/// live apps' rollout writes read back. `before` is what the live apps'
/// replay on the schema before returned.
pub fn after_migration(
    sessions: &Sessions,
    db: &Database,
    live: &[&AppVersion],
    runnable: &[&AppVersion],
    before: BTreeMap<String, Vec<Outcome>>,
) -> Result<Compat, VerifyError> {
    let mut out = Compat {
        before,
        ..Compat::default()
    };
    if runnable.is_empty() {
        return Ok(out);
    }
    let mut c = connect_seeding(sessions, db)?;
    let url = db.url();
    let seeded_now = step(
        "seeding the compat database",
        // (A few rows: one session. Nothing reads this copy's plans.)
        seed::seed(
            &mut c,
            None,
            runnable,
            COMPAT_ROWS,
            Statistics::Unread,
            &|app| crate::db::connect(&sessions.app(url, &app.name)),
        ),
    )?;
    out.rows_not_written = seeded_now.failed;
    out.after = replay_each(sessions, db, runnable)?;
    // Cross-version (the two-phase protocol and the rollback, through
    // drivers): each app still running against each newer one that may
    // run on this schema.
    for older in live {
        for newer in runnable.iter().filter(|a| a.needs > older.needs) {
            let mut c_old = connect_app(sessions, db, older)?;
            let mut c_new = connect_app(sessions, db, newer)?;
            let seen = cross_version::run(&mut c_old, &mut c_new, older, newer)
                .map(|r| r.map_err(|e| crate::errors::one_line(e.as_ref())));
            out.cross_version.push(SideBySide {
                older: older.name.clone(),
                newer: newer.name.clone(),
                seen,
            });
        }
    }
    // Rows the older apps write while the newer ones run (their write
    // statements, their drivers' creates), read back by the statement
    // readers: one path for every app.
    out.rollout_writes = Readers { sessions }.rollout_writes(db, live, runnable)?;
    Ok(out)
}

//! A migration applied by a command of the project's own on a seeded
//! database ([`crate::catalog::ExternalApply`]: a framework's data
//! migration, whose statements depend on the rows): the database made to
//! look to the command as if every earlier migration were applied (what
//! the framework wrote to its own tables with them), the command run as
//! the migrator, the framework's tables dropped again. Measured from
//! outside: its wall time, the rows it changed per table (the cumulative
//! table statistics before and after, once its sessions ended: a backend
//! flushes its counts as it exits), and whether it failed, with its last
//! lines. Not its statements, locks or rewrites: they were sent on the
//! command's own connections.

use std::time::{Duration, Instant};

use postgres::Client;

use crate::catalog::ExternalApply;
use crate::framework::FrameworkError;
use crate::sandbox::Database;
use crate::sessions::Sessions;
use crate::verify::error::{step, VerifyError};
use crate::verify::evidence::{ExternalRun, RowsChanged};

/// How long the command's sessions may take to end after it exited
/// before their counts are read anyway (and said to be incomplete).
const SESSIONS_END: Duration = Duration::from_secs(5);

/// Applies `x` on `db`, which holds `rows` rows, and says what it did.
pub fn apply(
    sessions: &Sessions,
    db: &Database,
    x: &ExternalApply,
    rows: i64,
) -> Result<ExternalRun, VerifyError> {
    let url = sessions.migrator(db.url());
    let mut migrator = step("connecting as the migrator", crate::db::connect(&url))?;
    let mut run = ExternalRun {
        by: x.by.clone(),
        command: x.command.clone(),
        rows,
        took: Duration::ZERO,
        changed: Err("it failed".into()),
        failed: None,
        applied_beyond: None,
    };
    for statement in &x.bookkeeping {
        if let Err(e) = migrator.batch_execute(statement) {
            run.failed = Some((
                format!("{}'s history before it could not be written", x.by),
                vec![format!(
                    "`{}`: {}",
                    crate::capture::introspect::excerpt(statement),
                    crate::errors::one_line(&e)
                )],
            ));
            return Ok(run);
        }
    }
    drop(migrator);
    let mut admin = step("connecting", db.connect())?;
    let before = step("reading the table statistics", counters(&mut admin, x));
    match crate::framework::run_command(&x.command, &x.dir, &url) {
        Ok(took) => run.took = took,
        Err(FrameworkError::CommandFailed { status, output, .. }) => {
            run.failed = Some((status, output));
        }
        Err(e) => run.failed = Some(("it could not start".into(), vec![e.to_string()])),
    }
    if let Some(query) = &x.applied_beyond {
        // What the history records beyond this migration: a command that
        // applied more left rows that are not this migration's doing (and
        // a failure after that, in a later migration, is not its either).
        run.applied_beyond = beyond(&mut admin, query);
        if let (Some(_), None) = (&run.failed, &run.applied_beyond) {
            // Failed, its history rolled back with it: was the failure
            // this migration's? With it recorded as applied, the command
            // must do nothing; one that still fails, or records more,
            // runs more than this migration whenever it starts.
            run.applied_beyond = again_with_it_recorded(&url, x, query, &mut admin);
        }
    }
    if run.failed.is_none() {
        run.changed = match (before, sessions_ended(&mut admin)) {
            (Err(e), _) => Err(e.to_string()),
            (_, Err(why)) => Err(why),
            (Ok(before), Ok(())) => counters(&mut admin, x)
                .map(|after| changed(&before, &after))
                .map_err(|e| crate::errors::one_line(&e)),
        };
    }
    let own: Vec<String> = x.own_tables.iter().map(|t| qualified(t)).collect();
    step(
        "dropping the framework's own tables",
        admin.batch_execute(&format!("DROP TABLE IF EXISTS {} CASCADE", own.join(", "))),
    )?;
    Ok(run)
}

/// What the history records beyond the migration (`query`, its
/// [`ExternalApply::applied_beyond`]), None when nothing.
fn beyond(admin: &mut Client, query: &str) -> Option<String> {
    match admin.query_one(query, &[]) {
        Ok(row) => row
            .get::<_, Option<String>>(0)
            .map(|keys| format!("its history then records {keys} too")),
        Err(e) => Some(format!(
            "its history could not be read after it ({})",
            crate::errors::one_line(&e)
        )),
    }
}

/// After the command failed: the migration recorded as applied, the
/// command run again. Something when it fails again, or the history then
/// records more; None when it does nothing (the failure was this
/// migration's), or when the migration cannot be recorded.
fn again_with_it_recorded(
    url: &str,
    x: &ExternalApply,
    query: &str,
    admin: &mut Client,
) -> Option<String> {
    if x.recorded.is_empty() {
        return None;
    }
    let mut migrator = crate::db::connect(url).ok()?;
    for statement in &x.recorded {
        migrator.batch_execute(statement).ok()?;
    }
    drop(migrator);
    match crate::framework::run_command(&x.command, &x.dir, url) {
        Ok(_) => beyond(admin, query),
        Err(e) => Some(format!(
            "with this migration recorded as applied it fails again{}",
            match &e {
                FrameworkError::CommandFailed { output, .. } => output
                    .iter()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map_or_else(String::new, |l| format!("; its output ends: {}", l.trim())),
                other => format!("; {other}"),
            }
        )),
    }
}

/// Waits until no other client session is connected to the database
/// (the command's have exited, their counts flushed).
fn sessions_ended(c: &mut Client) -> Result<(), String> {
    let clock = Instant::now();
    loop {
        let others: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()
                    AND backend_type = 'client backend'",
                &[],
            )
            .map_err(|e| crate::errors::one_line(&e))?
            .get(0);
        if others == 0 {
            return Ok(());
        }
        if clock.elapsed() > SESSIONS_END {
            return Err(format!("{others} session(s) still connected {}s after the command exited: its counts would be incomplete", SESSIONS_END.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (table, inserted, updated, deleted) as the cumulative statistics hold
/// them, the framework's own tables left out.
type Counters = Vec<(String, [i64; 3])>;

fn counters(c: &mut Client, x: &ExternalApply) -> Result<Counters, postgres::Error> {
    c.batch_execute("SELECT pg_stat_clear_snapshot()")?;
    let own: Vec<String> = x
        .own_tables
        .iter()
        .map(|t| t.rsplit('.').next().unwrap_or(t).to_lowercase())
        .collect();
    let rows = c.query(
        "SELECT CASE WHEN schemaname = 'public' THEN relname ELSE schemaname || '.' || relname END,
                n_tup_ins, n_tup_upd, n_tup_del
           FROM pg_stat_user_tables
          WHERE NOT lower(relname) = ANY($1)
          ORDER BY 1",
        &[&own],
    )?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), [r.get(1), r.get(2), r.get(3)]))
        .collect())
}

/// The tables whose counts moved, by how much.
fn changed(before: &Counters, after: &Counters) -> Vec<RowsChanged> {
    after
        .iter()
        .filter_map(|(table, [i, u, d])| {
            let [i0, u0, d0] = before
                .iter()
                .find(|(t, _)| t == table)
                .map_or([0; 3], |(_, c)| *c);
            let moved = RowsChanged {
                table: table.clone(),
                inserted: i - i0,
                updated: u - u0,
                deleted: d - d0,
            };
            (moved.inserted, moved.updated, moved.deleted)
                .ne(&(0, 0, 0))
                .then_some(moved)
        })
        .collect()
}

/// `"schema"."table"` (or `"table"`) for a name the framework gives as
/// `schema.table` or `table`.
fn qualified(name: &str) -> String {
    name.split('.')
        .map(crate::pg::quote_ident)
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the tables whose counts moved, by the difference; a table
    /// the command created counts from zero.
    #[test]
    fn rows_changed_are_the_differences_of_the_tables_that_moved() {
        let before = vec![
            ("hives_hive".to_string(), [500, 0, 0]),
            ("hives_apiary".to_string(), [20, 0, 0]),
        ];
        let after = vec![
            ("hives_apiary".to_string(), [20, 0, 0]),
            ("hives_hive".to_string(), [500, 250, 0]),
            ("hives_note".to_string(), [3, 0, 0]),
        ];
        assert_eq!(
            changed(&before, &after),
            [
                RowsChanged {
                    table: "hives_hive".into(),
                    updated: 250,
                    ..RowsChanged::default()
                },
                RowsChanged {
                    table: "hives_note".into(),
                    inserted: 3,
                    ..RowsChanged::default()
                },
            ]
        );
        assert_eq!(
            qualified("drizzle.__drizzle_migrations"),
            "\"drizzle\".\"__drizzle_migrations\""
        );
    }
}

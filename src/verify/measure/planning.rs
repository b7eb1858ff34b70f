//! Planning, the measuring half of `plan` (floor `measure`: an instrument
//! that takes a database and returns evidence; the stages say when,
//! before the migration in stage 2, after it in stage 3): every statement of every app live during a
//! migration, planned on the seeded database before and after it, with
//! the indexes and foreign keys around the plans, into the migration's
//! evidence ([`crate::verify::evidence::plan`]).
//! It measures; [`checks::plan`] judges.
//!
//! Each side starts with `ANALYZE` (the seeded rows are the statistics the
//! planner sees), then plans each statement as its app runs it, on the
//! app's own connection (its role's row-level security is in the plan):
//! - PostgreSQL 16 and later: `EXPLAIN (GENERIC_PLAN)` of the statement
//!   with its `$n` placeholders, the plan a prepared statement settles on;
//! - before 16: the statement prepared with the extended protocol (as the
//!   app prepares it), its `-- param:` values evaluated as the replay does
//!   ([`replay`]), then `EXPLAIN EXECUTE` with those values: the custom
//!   plan of those values.
//!
//! Nothing is executed: `EXPLAIN` without `ANALYZE` plans only, and it runs
//! in a `READ ONLY` transaction that is rolled back (a write the planner
//! is asked about is never carried out; the text after `EXPLAIN` is one
//! statement, as the statement set's grammar guarantees).
//!
//! After the migration it also measures what judging a regression needs:
//! the plan with sequential scans disabled for a statement that now reads
//! a table sequentially (does an index still match?), the time of a full
//! sequential read of each such table at the seeded size (scaled to
//! production's size by the check), and for each foreign key the
//! migration adds, the plan of the lookup PostgreSQL runs on the
//! referencing table for each deleted or updated referenced row.
//!
//! [`checks::plan`]: crate::verify::checks::plan

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use postgres::{Client, SimpleQueryMessage};
use serde_json::Value;

use crate::app::replay;
use crate::app::AppVersion;
use crate::pg::catalogue::{self, Relation};
use crate::pg::quote_ident;
use crate::sandbox::{Database, Sandbox};
use crate::sessions::Sessions;
use crate::target::Target;
use crate::verify::evidence::plan::{
    parse, Access, ForeignKey, Mode, Path, Side, StatementPlan, TableStats,
};

/// Which side of the migration is measured.
#[derive(Clone, Copy)]
enum When<'a> {
    Before,
    /// With the side before, to tell what the migration added.
    After(&'a Side),
}

/// What planning needs of the run: the server (its major, its
/// `pg_dump`), who each app connects as, and the target whose planner
/// statistics are imported (`--from-target`).
#[derive(Clone, Copy)]
pub struct Planner<'a> {
    pub sandbox: &'a Sandbox,
    pub sessions: &'a Sessions,
    pub target: Option<&'a Target>,
}

impl Planner<'_> {
    /// The statements of `apps` planned on `db` before a migration.
    pub fn before(&self, db: &Database, apps: &[&AppVersion]) -> anyhow::Result<Side> {
        self.measure_plans(db, apps, When::Before)
    }

    /// The statements of `apps` planned on `db` after a migration, beside
    /// `before` (what it added: indexes, foreign keys, full reads).
    pub fn after(
        &self,
        db: &Database,
        apps: &[&AppVersion],
        before: &Side,
    ) -> anyhow::Result<Side> {
        self.measure_plans(db, apps, When::After(before))
    }

    fn measure_plans(
        &self,
        db: &Database,
        apps: &[&AppVersion],
        when: When,
    ) -> anyhow::Result<Side> {
        let started = Instant::now();
        let mut admin = db.connect()?;
        analyze(&mut admin)?;
        let relations = crate::tables::relations(&mut admin)?;
        let tables = tables(&mut admin, &relations)?;
        let mode = if self.sandbox.server_major() >= 16 {
            Mode::Generic
        } else {
            Mode::Custom
        };
        let mut side = Side {
            mode,
            tables,
            indexes: catalogue::indexes(&mut admin, &relations)?,
            foreign_keys: catalogue::foreign_keys(&mut admin, &relations)?,
            ..Side::default()
        };
        self.import_statistics(&mut admin, &mut side, when)?;
        let after = matches!(when, When::After(_));
        // After the migration, the apps that were not live (they roll out
        // with it) matter only to what it added: an index they may use,
        // a foreign key whose referenced rows they may delete.
        let added = match when {
            When::Before => false,
            When::After(before) => {
                side.indexes.iter().any(|i| !before.indexes.contains(i))
                    || side
                        .foreign_keys
                        .iter()
                        .any(|f| !before.foreign_keys.contains(f))
            }
        };
        let planned = |app: &&&AppVersion| match when {
            When::Before => true,
            When::After(before) => added || before.statements.iter().any(|s| s.app == app.name),
        };
        for app in apps.iter().filter(planned) {
            let mut c = crate::db::connect(&self.sessions.app(db.url(), &app.name))?;
            for st in app.set.statements() {
                let planned = plan_statement(&mut c, app, &st.name, mode, false);
                let sequential = planned
                    .as_ref()
                    .ok()
                    .and_then(|j| parse(j).ok())
                    .is_some_and(|p| p.accesses.iter().any(|a| a.path == Path::Seq));
                let forced = (after && sequential)
                    .then(|| plan_statement(&mut c, app, &st.name, mode, true));
                side.statements.push(StatementPlan {
                    app: app.name.clone(),
                    statement: st.name.clone(),
                    planned,
                    forced,
                });
            }
        }
        if let When::After(before) = when {
            side.full_reads = full_reads(&mut admin, &side, before)?;
            for fk in side.foreign_keys.iter().filter(|fk| {
                !before
                    .foreign_keys
                    .iter()
                    .any(|b| b.table == fk.table && b.name == fk.name)
            }) {
                let lookup = plan_lookup(&mut admin, fk, mode);
                side.fk_lookups
                    .push(((fk.table.clone(), fk.name.clone()), lookup));
            }
        }
        side.took = started.elapsed();
        Ok(side)
    }
}

/// VACUUM and ANALYZE of the measured tables (a database-wide ANALYZE
/// would sample the catalogue too): the planner's statistics are then the
/// seeded rows'. On both sides, whatever ran before: the cumulative
/// statistics that would tell which tables changed since their last
/// ANALYZE are flushed late (a closed connection's writes may not show
/// yet), and a stale statistic is a wrong plan. The VACUUM removes what
/// the live workload wrote and rolled back: how much that is depends on
/// how busy the machine was, and the pages it leaves behind weigh on the
/// planner's costs (a close choice between an index and a sequential scan
/// went either way from one run to the next under load).
fn analyze(c: &mut Client) -> Result<(), postgres::Error> {
    let names: Vec<String> = c
        .query(
            &format!("SELECT t.qualified FROM ({}) t", crate::tables::list_sql()),
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    c.batch_execute(&format!("VACUUM (ANALYZE) {}", names.join(", ")))
}

impl Planner<'_> {
    /// With `--from-target` on PostgreSQL 18 or later: the target's planner
    /// statistics imported over the seeded rows' (right after their
    /// ANALYZE, right before planning), and autovacuum off on those tables
    /// so that nothing samples the seeded rows again in between. Plans
    /// then follow production's value distributions; the row counts the
    /// planner uses are still the seeded table's pages times production's
    /// rows per page (see the README's limits). Otherwise, with a target,
    /// `side.not_imported` says why not.
    fn import_statistics(
        &self,
        c: &mut Client,
        side: &mut Side,
        when: When,
    ) -> Result<(), postgres::Error> {
        let Some(target) = self.target else {
            return Ok(());
        };
        let major = self.sandbox.server_major();
        if major < 18 {
            side.not_imported = Some(format!(
                "PostgreSQL {major} cannot import planner statistics (pg_restore_relation_stats and pg_restore_attribute_stats need 18; --postgres-version 18 rehearses on 18, whose pg_dump reads older servers' statistics)"
            ));
            return Ok(());
        }
        let dumped = match when {
            When::After(before) => before.dumped_statistics.clone(),
            When::Before => match self.sandbox.dump_statistics(target.url()) {
                Ok(sql) => Some(sql),
                Err(e) => {
                    side.not_imported = Some(format!(
                        "pg_dump --statistics-only of the target failed: {}",
                        crate::db::scrub(&e.to_string(), target.url())
                    ));
                    None
                }
            },
        };
        let Some(sql) = dumped else {
            if side.not_imported.is_none() {
                side.not_imported = Some("the target's statistics could not be read".into());
            }
            return Ok(());
        };
        for (schema, relname, rows) in restore_statistics(c, &sql)? {
            if let Some(t) = side
                .tables
                .iter_mut()
                .find(|t| t.schema == schema && t.relname == relname)
            {
                t.imported_rows = Some(rows);
                side.imported.push(t.name.clone());
                // A partitioned parent takes no such option: nothing
                // vacuums it anyway.
                let _ = c.batch_execute(&format!(
                    "ALTER TABLE {} SET (autovacuum_enabled = off)",
                    t.qualified
                ));
            }
        }
        if side.imported.is_empty() {
            side.not_imported = Some("the target's statistics name none of the sandbox's tables (were they ever analyzed there?)".into());
        }
        side.dumped_statistics = Some(sql);
        Ok(())
    }
}

/// Runs a statistics dump's statements one by one (a relation the
/// migration dropped is skipped, not fatal); returns the relations whose
/// statistics were imported, with their `reltuples`.
fn restore_statistics(
    c: &mut Client,
    sql: &str,
) -> Result<Vec<(String, String, f64)>, postgres::Error> {
    let mut out = Vec::new();
    for st in crate::sql::split(sql).statements {
        let Ok(messages) = c.simple_query(&st.text) else {
            continue;
        };
        let imported = messages
            .iter()
            .any(|m| matches!(m, SimpleQueryMessage::Row(r) if r.get(0) == Some("t")));
        if !imported || !st.text.contains("pg_restore_relation_stats") {
            continue;
        }
        if let (Some(schema), Some(relname), Some(rows)) = (
            literal_arg(&st.text, "schemaname"),
            literal_arg(&st.text, "relname"),
            literal_arg(&st.text, "reltuples").and_then(|r| r.parse::<f64>().ok()),
        ) {
            out.push((schema, relname, rows));
        }
    }
    // The dump empties search_path (and sets more) for its session.
    c.batch_execute("RESET ALL")?;
    Ok(out)
}

/// The string literal after `'key', ` in a pg_dump statistics call.
fn literal_arg(text: &str, key: &str) -> Option<String> {
    let pattern = format!("'{key}', '");
    let start = text.find(&pattern)? + pattern.len();
    let mut out = String::new();
    let mut chars = text[start..].chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            out.push(c);
        } else if chars.peek() == Some(&'\'') {
            chars.next();
            out.push('\'');
        } else {
            return Some(out);
        }
    }
    None
}

/// Runs `explain` (one EXPLAIN statement) in a read-only transaction that
/// is rolled back, optionally with sequential scans disabled: one round
/// trip (a simple query of the three), plus a ROLLBACK when it failed.
fn explain_read_only(c: &mut Client, explain: &str, forced: bool) -> Result<Value, String> {
    let set = if forced {
        " SET LOCAL enable_seqscan = off;"
    } else {
        ""
    };
    // The newline ends a trailing line comment of the explained SQL.
    match c.simple_query(&format!("BEGIN READ ONLY;{set} {explain}\n; ROLLBACK")) {
        Ok(messages) => {
            let text = messages.into_iter().find_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            });
            serde_json::from_str(&text.ok_or("EXPLAIN returned no row")?)
                .map_err(|e| format!("EXPLAIN output is not JSON: {e}"))
        }
        Err(e) => {
            let _ = c.batch_execute("ROLLBACK");
            Err(crate::errors::one_line(&e))
        }
    }
}

/// The plan of `app`'s `statement` as the app runs it (see the module docs).
fn plan_statement(
    c: &mut Client,
    app: &AppVersion,
    statement: &str,
    mode: Mode,
    forced: bool,
) -> Result<Value, String> {
    let st = app.set.get(statement).map_err(|e| e.to_string())?;
    match mode {
        Mode::Generic => plan_generic(c, &st.sql, forced),
        Mode::Custom => plan_custom(
            c,
            statement,
            &st.sql,
            &replay::declared_params(st.meta_values("param")),
            forced,
        ),
    }
}

/// `EXPLAIN (GENERIC_PLAN)` of `sql`: sent as a simple query (bound
/// parameters would turn the generic plan into a custom one), so it is
/// sent only when the grammar reads `sql` as exactly one statement.
fn plan_generic(c: &mut Client, sql: &str, forced: bool) -> Result<Value, String> {
    if crate::sql::split(sql).statements.len() != 1 {
        return Err("not exactly one statement".into());
    }
    explain_read_only(
        c,
        &format!("EXPLAIN (GENERIC_PLAN, VERBOSE, FORMAT JSON) {sql}"),
        forced,
    )
}

/// `sql` prepared with the extended protocol, its parameters' values
/// evaluated (in a transaction rolled back), then `EXPLAIN EXECUTE` of the
/// prepared statement with those values as literals.
fn plan_custom(
    c: &mut Client,
    name: &str,
    sql: &str,
    declared: &BTreeMap<usize, String>,
    forced: bool,
) -> Result<Value, String> {
    let one = |e: postgres::Error| crate::errors::one_line(&e);
    c.batch_execute("BEGIN").map_err(one)?;
    let prepared = replay::prepare_sql(c, name, sql, declared)
        .and_then(|p| replay::arguments(c, &p).map(|args| (p, args)));
    let _ = c.batch_execute("ROLLBACK");
    let (prepared, args) = prepared.map_err(one)?;
    // The protocol-level statement is visible to EXECUTE by its name.
    let statement = c
        .simple_query(&format!(
            "SELECT name FROM pg_prepared_statements
              WHERE NOT from_sql AND statement = {} ORDER BY prepare_time DESC LIMIT 1",
            literal(sql)
        ))
        .map_err(one)?
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .ok_or("its prepared statement is not listed in pg_prepared_statements")?;
    let literals = args
        .iter()
        .map(|a| a.as_deref().map_or("NULL".to_string(), literal))
        .collect::<Vec<_>>()
        .join(", ");
    let execute = if args.is_empty() {
        format!("EXECUTE {}", quote_ident(&statement))
    } else {
        format!("EXECUTE {}({literals})", quote_ident(&statement))
    };
    let plan = explain_read_only(
        c,
        &format!("EXPLAIN (VERBOSE, FORMAT JSON) {execute}"),
        forced,
    );
    drop(prepared);
    plan
}

/// `text` as an SQL string literal whatever `standard_conforming_strings`
/// says: an escape string (`E'…'`), its backslashes and quotes doubled.
fn literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The lookup PostgreSQL's referential-integrity trigger runs on the
/// referencing table for each deleted (or key-updated) referenced row, as
/// it writes it (`SELECT 1 FROM ONLY t x WHERE col = $1 FOR KEY SHARE OF
/// x`), planned as the table owner would: values from a referenced row.
fn plan_lookup(c: &mut Client, fk: &ForeignKey, mode: Mode) -> Result<Value, String> {
    let conds: Vec<String> = fk
        .columns
        .iter()
        .enumerate()
        .map(|(i, col)| format!("x.{} = ${}", quote_ident(col), i + 1))
        .collect();
    let sql = format!(
        "SELECT 1 FROM ONLY {} x WHERE {} FOR KEY SHARE OF x",
        fk.qualified_table,
        conds.join(" AND ")
    );
    match mode {
        Mode::Generic => plan_generic(c, &sql, false),
        Mode::Custom => {
            let declared = fk
                .referenced_columns
                .iter()
                .enumerate()
                .map(|(i, col)| {
                    (
                        i + 1,
                        format!(
                            "(SELECT p.{} FROM ONLY {} p LIMIT 1)",
                            quote_ident(col),
                            fk.qualified_referenced
                        ),
                    )
                })
                .collect();
            plan_custom(c, "foreign-key lookup", &sql, &declared, false)
        }
    }
}

/// A full sequential read of each table some statement now reads
/// sequentially where it read it through an index before (the shorter of
/// two, so a cold cache does not count).
fn full_reads(
    c: &mut Client,
    side: &Side,
    before: &Side,
) -> anyhow::Result<BTreeMap<String, Duration>> {
    let parsed = |s: &StatementPlan| s.planned.as_ref().ok().and_then(|j| parse(j).ok());
    let mut out = BTreeMap::new();
    for s in &side.statements {
        let Some(p) = parsed(s) else {
            continue;
        };
        // Only a table the statement read through an index before: a read
        // that was sequential already is no regression to size.
        let Some(earlier) = before
            .statements
            .iter()
            .find(|b| b.app == s.app && b.statement == s.statement)
            .and_then(parsed)
        else {
            continue;
        };
        let indexed_before = |a: &Access| {
            earlier
                .accesses
                .iter()
                .any(|b| b.schema == a.schema && b.relname == a.relname && b.path.indexed())
        };
        for a in p
            .accesses
            .iter()
            .filter(|a| a.path == Path::Seq && indexed_before(a))
        {
            let Some(t) = side
                .tables
                .iter()
                .find(|t| t.schema == a.schema && t.relname == a.relname)
            else {
                continue;
            };
            if out.contains_key(&t.name) {
                continue;
            }
            let mut best: Option<Duration> = None;
            for _ in 0..2 {
                let row = c.query_one(
                    &format!(
                        "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) SELECT * FROM ONLY {}",
                        t.qualified
                    ),
                    &[],
                )?;
                let json: Value = row.try_get(0)?;
                let ms = json
                    .get(0)
                    .and_then(|o| o.get("Execution Time"))
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0);
                let d = Duration::from_secs_f64(ms.max(0.0) / 1000.0);
                best = Some(best.map_or(d, |b| b.min(d)));
            }
            if let Some(d) = best {
                out.insert(t.name.clone(), d);
            }
        }
    }
    Ok(out)
}

/// The measured tables' sizes, as the planner sees them.
fn tables(c: &mut Client, relations: &[Relation]) -> Result<Vec<TableStats>, postgres::Error> {
    let qualified = |name: &str| {
        relations
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.qualified.clone())
    };
    Ok(catalogue::statistics(c, relations)?
        .into_iter()
        .map(|s| TableStats {
            schema: s.schema,
            relname: s.relname,
            qualified: qualified(&s.table).unwrap_or_default(),
            name: s.table,
            rows: s.rows,
            pages: s.pages,
            imported_rows: None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_calls_are_read_for_their_relation_and_rows() {
        let call = "SELECT * FROM pg_catalog.pg_restore_relation_stats(\n\t'version', '180006'::integer,\n\t'schemaname', 'public',\n\t'relname', 'it''s',\n\t'relpages', '541'::integer,\n\t'reltuples', '100000'::real\n);";
        assert_eq!(literal_arg(call, "relname").as_deref(), Some("it's"));
        assert_eq!(literal_arg(call, "reltuples").as_deref(), Some("100000"));
        assert_eq!(literal_arg(call, "attname"), None);
        assert_eq!(literal("a'b\\c"), "E'a''b\\\\c'");
    }
}

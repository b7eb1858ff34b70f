//! `rewrite`: does the migration do work that grows with a table while it
//! holds a lock that blocks the app?
//!
//! Measured statement by statement inside the migration's transaction, on
//! a database at the previous version seeded with the live apps' rows
//! (and once with 0 rows): per existing table, tuples read by sequential
//! passes, tuples fetched through indexes, rows updated and deleted, heap
//! and index blocks requested, and whether it got a new file
//! (`relfilenode`: every row rewritten). Work *grows with the table* when it
//! is a pass over its rows (a validating CHECK or FOREIGN KEY, SET NOT
//! NULL, a volatile default), rows written one by one (an `UPDATE`
//! backfill keeps the relfilenode, so rows updated is what catches it), or
//! a rewrite (a type change). That is an **error at any seeded size** when,
//! while the statement runs, the migration holds a lock that blocks some
//! live app statement on some table — a transaction keeps every lock until
//! it commits, so a lock taken by an earlier statement counts. What blocks
//! follows from the apps' own statements ([`Needs`]): reads need ACCESS
//! SHARE, writes ROW EXCLUSIVE. A `VALIDATE CONSTRAINT` in a migration of
//! its own scans under SHARE UPDATE EXCLUSIVE, which blocks neither: not an
//! error. No fractional thresholds: one row updated under a blocking lock
//! counts.
//!
//! Index builds under a blocking lock are `locks.blocking-index-build`.

use crate::pg::lock_modes::{self, Needs};
use crate::report::{Finding, Severity};
use crate::verify::evidence::predict::{self, Hold};
use crate::verify::evidence::{
    Applied, Context, Labels, MigrationEvidence, StatementRun, TableWork,
};

use super::phrases::{blocking_locks, human, locks_phrase, ms};
use super::Check;

pub const CHECK: &str = "rewrite";

pub const ENTRY: Check = Check {
    name: CHECK,
    description: DESCRIPTION,
    ran: |e| e.applied_on_seeded().is_some() || e.applied_by_framework().is_some(),
    evaluate,
    evaluate_run: None,
};

/// rewrite's judgement of one migration: the tables the generator could
/// not fill before it, then the work both applies measured, with the lock
/// holds predicted at production's sizes.
pub fn evaluate(e: &MigrationEvidence, cx: &Context) -> Vec<Finding> {
    if let Some(by) = e.applied_by_framework() {
        return vec![not_measured_by_framework(e.version, by)];
    }
    let mut out = Vec::new();
    if let Some(g) = e.seeding.as_ref().and_then(|s| s.generated.as_ref()) {
        let left_empty = e.seeding.as_ref().map_or(&[][..], |s| &s.left_empty[..]);
        out.extend(tables_not_seeded(
            e.version, e.prev, g, &cx.labels, left_empty,
        ));
    }
    if let Some(s) = e.seeding.as_ref().filter(|s| !s.left_empty.is_empty()) {
        out.push(left_empty_in_deploy(
            e.version,
            e.prev,
            &s.left_empty,
            &cx.labels,
        ));
    }
    if let (Some(at_zero), Some(s)) = (&e.at_zero, e.applied_on_seeded()) {
        let holds = predict::holds(at_zero, &s.applied, &e.needs, cx.sizes);
        let left_empty = e.seeding.as_ref().map_or(&[][..], |s| &s.left_empty[..]);
        out.extend(measured(
            e.version, at_zero, &s.applied, &e.needs, &holds, left_empty,
        ));
    }
    out
}

/// Tables the row generator could not fill before migration `v` (at
/// `prev`): work on their rows cannot be measured, so each is a warning
/// naming what stood in the way, and the measurements on it are of an
/// empty table.
pub fn tables_not_seeded(
    v: i32,
    prev: i32,
    generated: &crate::verify::evidence::Generated,
    labels: &Labels,
    left_empty: &[String],
) -> Vec<Finding> {
    let prev_label = labels.of(prev);
    let mut out: Vec<Finding> = generated
        .unseeded
        .iter()
        .map(|t| {
            let what = match &t.constraint {
                Some(c) => format!("constraint {c}: {}", t.reason),
                None => t.reason.clone(),
            };
            Finding::new(
                CHECK,
                "table-not-seeded",
                Severity::Warn,
                Some(v),
                format!(
                    "{} could not be seeded at {prev_label} ({what}); the rewrite and lock checks measured it empty",
                    t.table
                ),
            )
            .evidence("table", t.table.clone())
            .evidence("constraint", t.constraint.clone().unwrap_or_default())
            .advice("give the app a seed file (<app>.seed.sql next to its statement set) that writes rows the way it does")
        })
        .collect();
    out.extend(generated.seeded.iter().filter_map(|t| {
        let why = t.past_triggers.as_ref()?;
        Some(
            Finding::new(
                CHECK,
                "seeded-past-triggers",
                Severity::Info,
                Some(v),
                format!("{} was seeded at {prev_label} past its triggers: {why}", t.table),
            )
            .evidence("table", t.table.clone())
            .advice("its rows did not all go through its INSERT triggers: a migration that enforces a trigger's rule may meet rows production could not hold; give the app a seed file (<app>.seed.sql) that writes rows the way it does"),
        )
    }));
    if let Some(r) = &generated.reach {
        let others = r.of.saturating_sub(r.tables.len());
        // Tables a migration of the same deploy created are reached but
        // left empty (rewrite.empty-in-deploy says so): not seeded here.
        let seeded: Vec<String> = r
            .tables
            .iter()
            .filter(|t| !left_empty.contains(t))
            .cloned()
            .collect();
        let kept_empty = r.tables.len() - seeded.len();
        let kept_empty = if kept_empty == 0 {
            String::new()
        } else {
            format!(" ({kept_empty} more reached, left empty: deployed together with it)")
        };
        out.push(
            Finding::new(
                CHECK,
                "seeded-reach",
                Severity::Info,
                Some(v),
                format!(
                    "it changes definitions only: rows were seeded at {prev_label} in the {} of {} tables it reaches ({}: the ones it names or locked on the empty database, and the tables their keys reference){kept_empty}; the {others} others take no part in its work and were left as they were",
                    seeded.len(),
                    r.of,
                    excerpt_list(&seeded, 8)
                ),
            )
            .evidence("tables", r.tables.join(", "))
            .evidence("tables_in_schema", r.of)
            .advice("nothing to do; a migration that changes rows (UPDATE, DELETE, INSERT, DO, a function call) is rehearsed on every table seeded"),
        );
    }
    out.extend(generated.warnings.iter().map(|w| {
        Finding::new(CHECK, "seeding-warning", Severity::Warn, Some(v), w.clone())
            .advice("give the app a seed file (<app>.seed.sql next to its statement set)")
    }));
    out
}
/// Tables left without generated rows before migration `v` because an
/// earlier migration of its deploy created them: its work on them is
/// measured on the rows production has there, none (or those the earlier
/// migrations wrote).
fn left_empty_in_deploy(v: i32, prev: i32, tables: &[String], labels: &Labels) -> Finding {
    Finding::new(
        CHECK,
        "empty-in-deploy",
        Severity::Info,
        Some(v),
        format!(
            "{} {} created by a migration deployed together with this one (up to {}), so no app writes rows there before it runs: left without generated rows, measured as production has them",
            excerpt_list(tables, 8),
            if tables.len() == 1 { "was" } else { "were" },
            labels.of(prev)
        ),
    )
    .evidence("tables", tables.join(", "))
    .advice("nothing to do; if these migrations reach production in separate deploys (apps writing rows in between), rehearse the later one on its own with --since the earlier one")
}

/// Up to `max` names joined, with how many more.
fn excerpt_list(names: &[String], max: usize) -> String {
    match names.len() {
        0 => "none".into(),
        n if n <= max => names.join(", "),
        n => format!("{}, and {} more", names[..max].join(", "), n - max),
    }
}

pub const DESCRIPTION: &str =
    "no work that grows with a table (rewrite, rows written, a full pass) under a lock that blocks the live apps, measured per statement at 0 and N rows";

/// The work of migration `v` measured at 0 rows (`at_zero`) and at N
/// (`at_n`), judged against the locks the live apps need.
pub fn measured(
    v: i32,
    at_zero: &Applied,
    at_n: &Applied,
    needs: &Needs,
    holds: &[Hold],
    left_empty: &[String],
) -> Vec<Finding> {
    let mut out = Vec::new();
    // A partition's rows are counted in its partitioned table already.
    let rows_total: i64 = at_n
        .tables
        .values()
        .filter(|t| t.partition_of.is_none())
        .map(|t| t.rows_before)
        .sum();
    out.extend(grown_under_blocking_locks(v, at_zero, at_n, needs, holds));
    out.extend(locks_not_observed(v, at_n));
    if let Some(why) = &at_n.work_unmeasured {
        out.push(
            Finding::new(
                CHECK,
                "work-not-measured",
                Severity::Skipped,
                Some(v),
                format!("{why}; rewrites (relfilenode) and index builds were measured"),
            )
            .advice("rehearse on PostgreSQL 15 or later (--postgres-major) to measure the rows each statement reads and writes"),
        );
    }
    // Whether it locked or worked on any existing table at all: one that
    // reaches none has nothing that could grow with a table, rows or not.
    // A table an earlier migration of the same deploy created is empty in
    // production when this one runs: its emptiness here is production's.
    let works_on = |t: &&TableWork| {
        !t.locks.is_empty()
            || t.rewritten
            || !t.new_indexes.is_empty()
            || t.work != Default::default()
    };
    let reached = at_n
        .tables
        .iter()
        .filter(|(name, _)| !left_empty.contains(name))
        .map(|(_, t)| t)
        .any(|t| works_on(&t));
    let reached_deployed_with = at_n
        .tables
        .iter()
        .any(|(name, t)| left_empty.contains(name) && works_on(&t));
    if out.iter().all(|f| f.severity != Severity::Error) {
        if rows_total == 0 && reached {
            out.push(
                Finding::new(
                    CHECK,
                    "no-rows-to-measure",
                    Severity::Skipped,
                    Some(v),
                    "the existing tables it locks or works on hold no rows here (no app wrote any, and rollsafe's generator filled none: see rewrite.table-not-seeded where it could not), so work that grows with a table could not show",
                )
                .advice("declare the apps that write these tables (with seeds) so the rehearsal has rows, or raise --rows"),
            );
        } else {
            let updated: i64 = at_n.tables.values().map(|w| w.work.updated).sum();
            let read: i64 = at_n.tables.values().map(|w| w.work.tuples_read).sum();
            out.push(
                Finding::new(
                    CHECK,
                    "measured",
                    Severity::Info,
                    Some(v),
                    if at_n.tables.is_empty() {
                        "no table existed before it: nothing to rewrite".to_string()
                    } else if !reached && reached_deployed_with {
                        "the tables it works on were created by migrations deployed together with it, so production holds no rows there when it runs (rewrite.empty-in-deploy): nothing grows with a table".to_string()
                    } else if !reached {
                        "it takes no lock on and does no work in any table that existed before it: nothing grows with a table".to_string()
                    } else if at_n.outside_transaction {
                        "each statement measured while it ran (outside a transaction): no rewrite, no row-by-row work or full pass on existing rows under a lock seen blocking the apps".to_string()
                    } else {
                        "no rewrite, no row-by-row work or full pass on existing rows under a blocking lock".to_string()
                    },
                )
                .evidence("rows_in_existing_tables", rows_total)
                .evidence("rows_updated", updated)
                .evidence("tuples_read", read)
                .evidence(
                    "tables_rewritten",
                    at_n.tables.values().filter(|w| w.rewritten).count(),
                )
                .evidence("statements", at_n.statements.len())
                .evidence("wal_bytes_at_0_rows", at_zero.wal_bytes)
                .evidence("wal_bytes_at_n_rows", at_n.wal_bytes)
                .evidence("ms_at_0_rows", ms(at_zero.duration))
                .evidence("ms_at_n_rows", ms(at_n.duration)),
            );
        }
    }
    out
}

/// Per statement, its work that grows with a table under a lock that
/// blocks a live app ([`judge`]), about its largest such table.
fn grown_under_blocking_locks(
    v: i32,
    at_zero: &Applied,
    at_n: &Applied,
    needs: &Needs,
    holds: &[Hold],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, st) in at_n.statements.iter().enumerate() {
        let blocking = blocking_locks(st, needs);
        // One finding per statement: about its largest table whose work
        // grows (an index build alone is locks.blocking-index-build).
        let grown: Vec<&TableWork> = at_n
            .tables
            .values()
            .filter(|t| st.grows_on(t))
            .filter(|t| {
                st.rewrote.contains(&t.table)
                    || st.work.get(&t.table).is_some_and(|w| w.rows_written() > 0)
                    || !st.built_indexes.iter().any(|(x, _)| *x == t.table)
            })
            .collect();
        // The table the statement rewrote, wrote or scanned comes first
        // (a foreign key's check after a type change scans the tables that
        // reference it, and reads the referenced one one lookup at a
        // time): the others are named beside it.
        // A rewrite comes before rows written, rows written before a scan.
        let rank = |t: &&&TableWork| {
            let w = st.work.get(&t.table).copied().unwrap_or_default();
            (
                st.rewrote.contains(&t.table),
                w.rows_written() > 0,
                w.tuples_read > 0,
                t.rows_before,
            )
        };
        if let Some(t) = grown.iter().max_by_key(rank) {
            let others: Vec<String> = grown
                .iter()
                .filter(|o| o.table != t.table)
                .map(|o| format!("{} ({} rows)", o.table, o.rows_before))
                .collect();
            if let Some(f) = judge(v, i, st, t, &blocking, at_zero, at_n, holds) {
                out.push(if others.is_empty() {
                    f
                } else {
                    f.evidence("also_grows_on", others.join(", "))
                });
            }
        }
    }
    out
}

/// `lock-not-observed`: outside a transaction a lock is known only if
/// sampling saw it: work that grows under an unseen lock is not judged
/// either way.
fn locks_not_observed(v: i32, at_n: &Applied) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, st) in at_n.statements.iter().enumerate() {
        let Some(why) = st.locks_unobserved() else {
            continue;
        };
        if let Some(t) = at_n.tables.values().find(|t| st.grows_on(t)) {
            out.push(
                Finding::new(
                    CHECK,
                    "lock-not-observed",
                    Severity::Skipped,
                    Some(v),
                    format!(
                        "{}: its work grows with {} ({} rows) but {why}: whether it blocked the apps meanwhile was not measured",
                        at_n.where_(i),
                        t.table,
                        t.rows_before
                    ),
                )
                .at(at_n.location(i))
                .evidence("table", t.table.clone())
                .evidence("statement_ms_at_n_rows", ms(st.duration))
                .advice("run verify with more rows (--rows) so the statement runs long enough to be sampled"),
            );
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn judge(
    v: i32,
    i: usize,
    st: &StatementRun,
    t: &TableWork,
    blocking: &[(String, String, String)],
    at_zero: &Applied,
    at_n: &Applied,
    holds: &[Hold],
) -> Option<Finding> {
    let w = st.work.get(&t.table).copied().unwrap_or_default();
    let rewrote = st.rewrote.contains(&t.table);
    let at = at_n.where_(i);
    let observed = super::phrases::while_running(at_zero, at_n, i);
    let zero_ms = at_zero
        .statements
        .get(i)
        .map(|s| ms(s.duration))
        .unwrap_or(0.0);
    // The lock held during this statement that stalls the app longest,
    // preferring the one on the table the work is on.
    // Outside a transaction a lock is held only by its own statement.
    let worst_hold = holds
        .iter()
        .filter(|h| h.statement == i || (h.statement < i && !at_n.outside_transaction))
        .max_by_key(|h| (h.predicted, h.table == t.table));
    let grown = Grown {
        v,
        i,
        st,
        t,
        w,
        rewrote,
        blocking,
        at_n,
        zero_ms,
        observed: observed.as_deref(),
        worst_hold,
    };
    let base = |name: &str, sev: Severity, msg: String| grown.finding(name, sev, msg);
    let prediction = worst_hold
        .map(|h| {
            format!(
                "; {} this would hold {} on {} for ~{}",
                h.size_phrase(),
                lock_modes::sql_name(&h.mode),
                h.table,
                human(h.predicted)
            )
        })
        .unwrap_or_default();
    if blocking.is_empty() {
        // Not blocking: row writes still keep the rows locked against the
        // app's updates until the commit.
        return (w.rows_written() > 0).then(|| {
            base(
                "rows-updated",
                Severity::Warn,
                format!(
                    "{at}: writes {} of {} rows of {} in one transaction: every row stays locked against the app's updates until it commits",
                    w.rows_written(),
                    t.rows_before,
                    t.table
                ),
            )
            .advice("backfill in small batches, each its own short transaction, outside the migration")
        });
    }
    let under = locks_phrase(blocking);
    let prediction = match &observed {
        Some(o) => format!("{prediction} ({o})"),
        None => prediction,
    };
    Some(if rewrote {
        base(
            "table-rewritten",
            Severity::Error,
            format!(
                "{at}: rewrites {} ({} rows, new relfilenode) while holding {under}: the app stalls for as long as the table takes{prediction}",
                t.table, t.rows_before
            ),
        )
        .advice("a column type change or a volatile default (random(), clock_timestamp(), gen_random_uuid()) rewrites every row; add a new column (constant default, catalog-only since PostgreSQL 11), fill it in batches outside the migration, and switch the app over")
    } else if w.rows_written() > 0 {
        base(
            "rows-updated-under-lock",
            Severity::Error,
            format!(
                "{at}: writes {} of {} rows of {} one by one while holding {under}: the app stalls for as long as the update takes{prediction}",
                w.rows_written(),
                t.rows_before,
                t.table
            ),
        )
        .advice("make the new column's default the backfilled value (ADD COLUMN ... NOT NULL DEFAULT <constant> touches no row), or backfill in small batches outside the migration, with no lock beyond the rows")
    } else {
        base(
            "full-scan-under-lock",
            Severity::Error,
            format!(
                "{at}: {} while holding {under}: a scan under that lock stalls the app for as long as it takes, which grows with the table{prediction}",
                read_phrase(&w, t)
            ),
        )
        .advice(scan_advice(&st.excerpt))
    })
}

/// The way out of a scan under a blocking lock, by what the statement is:
/// DDL that validates (a constraint, NOT NULL) can validate without that
/// lock; data work (an UPDATE, an INSERT … SELECT, a DELETE) reads under a
/// lock an earlier statement of the same transaction took, so it belongs
/// in a transaction of its own.
fn scan_advice(excerpt: &str) -> &'static str {
    let first = excerpt
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase();
    match first.as_str() {
        "UPDATE" | "INSERT" | "DELETE" | "WITH" | "SELECT" | "MERGE" => {
            "this is data work reading the table while the migration's transaction holds the lock an earlier statement took: move it to a migration of its own (after the DDL's, or before it), in small batches each committed on its own, so it runs under row locks only"
        }
        _ => {
            "add the constraint NOT VALID (no scan), then VALIDATE CONSTRAINT in a later migration: its scan takes only SHARE UPDATE EXCLUSIVE, which blocks neither reads nor writes; for NOT NULL, validate a CHECK (col IS NOT NULL) first (PostgreSQL 12+ then skips the SET NOT NULL scan); rebuild indexes with REINDEX … CONCURRENTLY in a `-- rollsafe:no-transaction` migration"
        }
    }
}

/// What one finding of [`judge`] says about a statement's work on a table
/// besides its message: the measurements every such finding carries.
struct Grown<'a> {
    v: i32,
    i: usize,
    st: &'a StatementRun,
    t: &'a TableWork,
    w: crate::verify::evidence::Work,
    rewrote: bool,
    blocking: &'a [(String, String, String)],
    at_n: &'a Applied,
    zero_ms: f64,
    observed: Option<&'a str>,
    worst_hold: Option<&'a Hold>,
}

impl Grown<'_> {
    fn finding(&self, name: &str, sev: Severity, msg: String) -> Finding {
        let mut f = Finding::new(CHECK, name, sev, Some(self.v), msg)
            .at(self.at_n.location(self.i))
            .evidence("table", self.t.table.clone())
            .evidence("rows", self.t.rows_before)
            .evidence("pages", self.t.pages_before)
            .evidence("statement_line", self.st.line)
            .evidence("statement", self.st.excerpt.clone())
            .evidence("tuples_read", self.w.tuples_read)
            .evidence("tuples_fetched", self.w.tuples_fetched)
            .evidence("rows_updated", self.w.updated)
            .evidence("rows_deleted", self.w.deleted)
            .evidence("heap_blocks", self.w.heap_blocks)
            .evidence("index_blocks", self.w.index_blocks)
            .evidence("relfilenode_changed", self.rewrote)
            .evidence("blocking_locks", locks_phrase(self.blocking))
            .evidence("wal_bytes_at_n_rows", self.at_n.wal_bytes)
            .evidence("statement_ms_at_0_rows", self.zero_ms)
            .evidence("statement_ms_at_n_rows", ms(self.st.duration));
        if let Some(o) = self.observed {
            f = f.evidence("locks_while_running", o);
        }
        if let Some(h) = self.worst_hold {
            f = f
                .evidence("predicted_hold_ms", ms(h.predicted))
                .evidence(
                    "predicted_rows",
                    h.drivers.iter().map(|d| d.2).fold(0.0, f64::max),
                )
                .evidence(
                    "predicted_lock",
                    format!("{} on {}", lock_modes::sql_name(&h.mode), h.table),
                );
        }
        f
    }
}

/// What statement work `w` read of table `t`, as measured: a sequential
/// pass over its tuples, or its heap pages requested one lookup at a time
/// (through an index: a foreign key's check of each row of another
/// table). Requests count every visit, so they may exceed its pages.
fn read_phrase(w: &crate::verify::evidence::Work, t: &TableWork) -> String {
    let pages = if w.heap_blocks <= t.pages_before {
        format!(
            "{} of its {} heap pages requested",
            w.heap_blocks, t.pages_before
        )
    } else {
        format!(
            "{} requests of its {} heap pages, some pages more than once",
            w.heap_blocks, t.pages_before
        )
    };
    if w.tuples_read > 0 {
        format!(
            "reads {} tuples of {} by sequential scan ({} rows, {pages})",
            w.tuples_read, t.table, t.rows_before
        )
    } else {
        format!(
            "reads {} ({} rows) one lookup at a time, {} tuples fetched through its indexes ({pages})",
            t.table, t.rows_before, w.tuples_fetched
        )
    }
}

/// A data migration its framework applied at rows (`by`): nothing of
/// this check could be measured there. Said, never passed as ok.
fn not_measured_by_framework(v: i32, by: &str) -> Finding {
    Finding::new(
        CHECK,
        "applied-by-framework",
        Severity::Skipped,
        Some(v),
        format!("a data migration, applied at rows by {by}: its table rewrites, WAL and per-statement work were not measured: its statements ran on the framework's own connections, which rollsafe does not see one by one (the rows it changed are apply.applied-by-framework's)"),
    )
    .advice("review what it does to the rows by hand; a data migration that updates a large table belongs in batches outside the deploy's transaction")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::verify::evidence::Work;

    fn applied(mode: &str, work: Work, rewrote: bool) -> Applied {
        let table = TableWork {
            table: "jobs".into(),
            rows_before: 2000,
            pages_before: 40,
            locks: vec![mode.into()],
            ..TableWork::default()
        };
        let locks: BTreeMap<String, Vec<String>> =
            [("jobs".to_string(), vec![mode.to_string()])].into();
        Applied {
            tables: [("jobs".to_string(), table)].into(),
            statements: vec![StatementRun {
                line: 3,
                excerpt: "ALTER TABLE jobs …".into(),
                locks_after: locks,
                work: [("jobs".to_string(), work)].into(),
                rewrote: if rewrote { vec!["jobs".into()] } else { vec![] },
                ..StatementRun::default()
            }],
            split_exact: true,
            ..Applied::default()
        }
    }

    fn reader_writer() -> Needs {
        let mut n = Needs::default();
        n.add("jobs", "AccessShareLock");
        n.add("jobs", "RowExclusiveLock");
        n
    }

    fn first(v: &[Finding]) -> (&str, Severity) {
        (v[0].id.as_str(), v[0].severity)
    }

    #[test]
    fn any_row_written_under_a_blocking_lock_is_an_error() {
        let w = Work {
            updated: 3,
            ..Work::default()
        };
        let a = applied("AccessExclusiveLock", w, false);
        let f = measured(4, &Applied::default(), &a, &reader_writer(), &[], &[]);
        assert_eq!(
            first(&f),
            ("rewrite.rows-updated-under-lock", Severity::Error)
        );
        assert_eq!(f[0].evidence["rows_updated"], 3);
        assert!(f[0].message.starts_with("line 3:"), "{}", f[0].message);
        // The same update under ROW EXCLUSIVE only (a plain UPDATE): warn.
        let a = applied("RowExclusiveLock", w, false);
        let f = measured(4, &Applied::default(), &a, &reader_writer(), &[], &[]);
        assert_eq!(first(&f), ("rewrite.rows-updated", Severity::Warn));
    }

    #[test]
    fn the_scanned_table_is_named_and_page_requests_add_up() {
        // A foreign key's validation: a pass over `jobs`, and the referenced
        // table `owners` read one lookup per row (more requests than it
        // has pages).
        let mut a = applied(
            "ShareRowExclusiveLock",
            Work {
                tuples_read: 2000,
                heap_blocks: 40,
                ..Work::default()
            },
            false,
        );
        let owners = TableWork {
            table: "owners".into(),
            rows_before: 2000,
            pages_before: 40,
            locks: vec!["ShareRowExclusiveLock".into()],
            ..TableWork::default()
        };
        a.tables.insert("owners".into(), owners.clone());
        let lookups = Work {
            tuples_fetched: 2000,
            heap_blocks: 2010,
            ..Work::default()
        };
        a.statements[0].work.insert("owners".into(), lookups);
        a.statements[0]
            .locks_after
            .insert("owners".into(), vec!["ShareRowExclusiveLock".into()]);
        let f = measured(4, &Applied::default(), &a, &reader_writer(), &[], &[]);
        assert_eq!(f[0].evidence["table"], "jobs", "{}", f[0].message);
        assert!(
            f[0].message
                .contains("reads 2000 tuples of jobs by sequential scan (2000 rows, 40 of its 40 heap pages requested)"),
            "{}",
            f[0].message
        );
        let phrase = read_phrase(&lookups, &owners);
        assert_eq!(
            phrase,
            "reads owners (2000 rows) one lookup at a time, 2000 tuples fetched through its indexes (2010 requests of its 40 heap pages, some pages more than once)"
        );
    }

    #[test]
    fn a_scans_advice_fits_the_statement() {
        for ddl in [
            "ALTER TABLE jobs ADD CONSTRAINT jobs_owner_fk FOREIGN KEY …",
            "alter table jobs alter column owner set not null",
        ] {
            assert!(
                scan_advice(ddl).starts_with("add the constraint NOT VALID"),
                "{ddl}"
            );
        }
        for data in [
            "UPDATE jobs SET owner = o.id FROM owners o …",
            "WITH latest AS (SELECT …) UPDATE jobs …",
            "insert into job_archive select * from jobs …",
        ] {
            assert!(scan_advice(data).starts_with("this is data work"), "{data}");
        }
    }

    #[test]
    fn scans_and_rewrites_are_errors_only_under_blocking_locks() {
        let scan = Work {
            tuples_read: 2000,
            heap_blocks: 40,
            ..Work::default()
        };
        // A validating FOREIGN KEY: SHARE ROW EXCLUSIVE blocks writes.
        let a = applied("ShareRowExclusiveLock", scan, false);
        let f = measured(4, &Applied::default(), &a, &reader_writer(), &[], &[]);
        assert_eq!(first(&f), ("rewrite.full-scan-under-lock", Severity::Error));
        // It says what was measured: one tuple read is not "all rows".
        let one = Work {
            tuples_read: 1,
            heap_blocks: 1,
            ..Work::default()
        };
        let a = applied("ShareRowExclusiveLock", one, false);
        let f = measured(4, &Applied::default(), &a, &reader_writer(), &[], &[]);
        assert!(
            f[0].message
                .contains("reads 1 tuples of jobs by sequential scan (2000 rows, 1 of its 40 heap pages requested)"),
            "{}",
            f[0].message
        );
        assert!(!f[0].message.contains("reads all"), "{}", f[0].message);
        // VALIDATE CONSTRAINT: SHARE UPDATE EXCLUSIVE blocks neither.
        let a = applied("ShareUpdateExclusiveLock", scan, false);
        let f = measured(4, &Applied::default(), &a, &reader_writer(), &[], &[]);
        assert_eq!(first(&f), ("rewrite.measured", Severity::Info));
        // A table no app touches is nobody's stall.
        let a = applied("AccessExclusiveLock", scan, true);
        let f = measured(4, &Applied::default(), &a, &Needs::default(), &[], &[]);
        assert_eq!(first(&f), ("rewrite.measured", Severity::Info));
        let f = measured(4, &Applied::default(), &a, &reader_writer(), &[], &[]);
        assert_eq!(first(&f), ("rewrite.table-rewritten", Severity::Error));
        // Catalog-only: no work at all.
        let a = applied("AccessExclusiveLock", Work::default(), false);
        let f = measured(4, &Applied::default(), &a, &reader_writer(), &[], &[]);
        assert_eq!(first(&f), ("rewrite.measured", Severity::Info));
    }
}

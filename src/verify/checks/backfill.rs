//! `backfill`: every row that existed before the migration satisfies the
//! migration's `-- rollsafe:backfill <table> <predicate>` promises, and no
//! app's readers lose rows.
//!
//! The second half is the bug that started rollsafe: a readiness column
//! added with `DEFAULT false` made every existing row invisible to the
//! readers that filter on it. Measured by running every live app's read
//! statements (a driver's app too: its readers are its statement set's)
//! with bindings sampled from the seeded rows, before and after the
//! migration ([`crate::verify::stages`]): every reader that ran before
//! must return the same rows after, and a reader of an app that becomes
//! deployable with this migration must return the rows the older app's
//! reader of the same name (else of the same table keyed alike) returned.
//! Rows a newer reader returns that the older one, run on the same
//! bindings after the migration, does not are a warning: a filter the
//! older app hides rows with (soft-deleted ones) was dropped.

use std::collections::BTreeSet;

use crate::app::AppVersion;
use crate::report::{Finding, Severity};
use crate::verify::evidence::{
    BatchedRun, BoundRows, Context, DirectiveCount, Labels, MigrationEvidence, NotCompared,
    StatementReader, Visible,
};

use super::phrases::excluding_filter;
use super::Check;

pub const CHECK: &str = "backfill";
pub const DESCRIPTION: &str =
    "existing rows satisfy the migration's backfill rules, and the apps' readers see the same rows after it as before";

pub const ENTRY: Check = Check {
    name: CHECK,
    description: DESCRIPTION,
    ran: |e| e.backfill.is_some(),
    evaluate,
    evaluate_run: None,
};

/// backfill's judgement of one migration: its batched updates, its
/// `-- rollsafe:backfill` promises, and the readers before and after.
pub fn evaluate(e: &MigrationEvidence, cx: &Context) -> Vec<Finding> {
    let v = e.version;
    let mut out = Vec::new();
    if let Some(s) = e.applied_on_seeded() {
        out.extend(batched_updates(v, &s.batched));
    }
    let Some(b) = &e.backfill else {
        return out;
    };
    if let Some(counted) = &b.directives {
        out.extend(directives(v, counted));
    }
    out.extend(statement_readers(
        v,
        &b.readers_before,
        &b.readers_after,
        &cx.labels,
        cx.apps,
    ));
    // Never silently absent: live apps whose sets hold no reader.
    if !e.live.is_empty() && b.readers_before.statements.is_empty() {
        out.push(
            Finding::new(
                CHECK,
                "readers-not-compared",
                Severity::Skipped,
                Some(v),
                format!(
                    "the apps' readers were not compared before and after {}: no live app ({}) has a read statement",
                    cx.labels.of(v),
                    e.live.join(", ")
                ),
            )
            .advice("rows lost to a new filter column would not show here; add the apps' reads to their statement sets, or declare a backfill directive (-- rollsafe:backfill <table> <predicate>) to check the rows themselves"),
        );
    }
    out
}

/// The apps' readers before and after migration `v`: every row a reader
/// returned before must be returned after by the same reader and by the
/// newer apps' counterparts ([`StatementReader::reference`]); a reader
/// that could not be compared says why.
pub fn statement_readers(
    v: i32,
    before_all: &Visible,
    after_all: &Visible,
    labels: &Labels,
    apps: &[AppVersion],
) -> Vec<Finding> {
    let (before, after) = (&before_all.statements, &after_all.statements);
    let rls = |missing| rls_note(missing, &before_all.row_security, &after_all.row_security);
    let label = labels.of(v);
    let mut out = Vec::new();
    for b in before {
        if let Err(why) = &b.rows {
            out.push(reader_not_compared(v, b, why, &label, apps));
        }
    }
    let mut agreeing: Vec<String> = Vec::new();
    let mut compared_rows = 0;
    for a in after {
        let Some((ref_app, ref_st)) = &a.reference else {
            continue;
        };
        let Some((b, Ok(was))) = before
            .iter()
            .find(|b| &b.app == ref_app && &b.statement == ref_st)
            .map(|b| (b, &b.rows))
        else {
            continue;
        };
        let now = match &a.rows {
            Ok(now) => now,
            Err(why) => {
                out.push(reader_not_compared(v, a, why, &label, apps));
                continue;
            }
        };
        let expected = now.reference_seen.as_ref().unwrap_or(&was.seen);
        let total: usize = expected.iter().map(BTreeSet::len).sum();
        let missing: usize = expected
            .iter()
            .zip(&now.seen)
            .map(|(w, n)| w.difference(n).count())
            .sum();
        compared_rows += total;
        out.extend(hidden_rows_returned(v, a, b, now, after, &label));
        if missing == 0 {
            let who = format!("{}'s `{}`", a.app, a.statement);
            if !agreeing.contains(&who) {
                agreeing.push(who);
            }
            continue;
        }
        out.push(rows_missing(
            v,
            a,
            b,
            was,
            now,
            missing,
            total,
            &label,
            &rls(missing),
        ));
    }
    if !agreeing.is_empty() && !out.iter().any(|f| f.severity == Severity::Error) {
        out.push(
            Finding::new(
                CHECK,
                "readers-agree",
                Severity::Info,
                Some(v),
                format!(
                    "after {label} every statement reader returns the rows it (or the older app's reader of the same rows) returned before: {}",
                    agreeing.join(", ")
                ),
            )
            .evidence("rows_compared", compared_rows)
            .evidence("readers", agreeing.len()),
        );
    }
    out
}

/// A reader (before or after `v`) that was not compared, and what would
/// make it comparable.
fn reader_not_compared(
    v: i32,
    r: &StatementReader,
    why: &NotCompared,
    label: &str,
    apps: &[AppVersion],
) -> Finding {
    let source = apps.iter().find(|a| a.name == r.app).map_or_else(
        || format!("the {} app's statement set", r.app),
        |a| a.set.source.clone(),
    );
    let (why, advice) = match why {
        NotCompared::CannotBind(why) => (
            format!("its parameters cannot be bound to existing rows: {why}"),
            format!("add a `-- sample: SELECT …` line under `-- name: {}` in {source}: a read-only query whose rows are the values to bind, one column per parameter in order ($1, $2, …)", r.statement),
        ),
        NotCompared::NoRows => (
            format!("there are no rows to sample it with{}", if r.table.is_empty() { String::new() } else { format!(" ({} holds none)", r.table) }),
            format!("seed rows the way the {} app writes them (a {}.seed.sql next to its set), or give it a `-- sample:` line", r.app, r.app),
        ),
        NotCompared::Failed(e) => (
            format!("running it on sampled rows failed: {e}"),
            format!("check its `-- sample:` line or its SQL in {source}; the compat findings say whether the statement itself fails"),
        ),
    };
    Finding::new(
        CHECK,
        "reader-not-compared",
        Severity::Skipped,
        Some(v),
        format!(
            "the {} app's `{}` was not compared before and after {label}: {why}",
            r.app, r.statement
        ),
    )
    .evidence("app", r.app.clone())
    .evidence("statement", r.statement.clone())
    .advice(advice)
}

/// Rows a newer app's reader `a` returns after `v` that the older app's
/// reader it is compared with (`b`, run after `v` on the same bindings)
/// does not: rows the older app hides that the newer one shows (a
/// soft-delete filter dropped), a warning naming the filters `a` lacks.
/// Judged only where it is sound: both readers identify rows by the
/// table's key and neither cuts its result (`LIMIT`).
fn hidden_rows_returned(
    v: i32,
    a: &StatementReader,
    b: &StatementReader,
    now: &BoundRows,
    after: &[StatementReader],
    label: &str,
) -> Option<Finding> {
    if a.app == b.app || a.limited || b.limited || a.identity.is_empty() {
        return None;
    }
    let reference = Some((b.app.clone(), b.statement.clone()));
    let old_now = after
        .iter()
        .find(|o| o.app == b.app && o.statement == b.statement && o.reference == reference)?;
    let old_rows = old_now.rows.as_ref().ok()?;
    if old_now.identity != a.identity || old_rows.seen.len() != now.seen.len() {
        return None;
    }
    let extra: Vec<&String> = now
        .seen
        .iter()
        .zip(&old_rows.seen)
        .flat_map(|(n, o)| n.difference(o))
        .collect();
    let example = extra.first()?;
    let dropped: Vec<String> = b
        .filters
        .iter()
        .filter(|(text, _)| !a.filters.iter().any(|(t, _)| t == text))
        .map(|(text, _)| format!("`{text}`"))
        .collect();
    let why = if dropped.is_empty() {
        "its filters differ from the older reader's".to_string()
    } else {
        format!(
            "it lacks the older reader's filter {}",
            dropped.join(" and ")
        )
    };
    Some(
        Finding::new(
            CHECK,
            "new-readers-return-hidden-rows",
            Severity::Warn,
            Some(v),
            format!(
                "after {label} the {} app's `{}` returns {} rows that the {} app's `{}` does not return on the same bindings: {why}; e.g. the row {example}",
                a.app,
                a.statement,
                extra.len(),
                b.app,
                b.statement
            ),
        )
        .evidence("app", a.app.clone())
        .evidence("statement", a.statement.clone())
        .evidence("reference_app", b.app.clone())
        .evidence("reference_statement", b.statement.clone())
        .evidence("extra", extra.len())
        .evidence("example_extra", example.to_string())
        .advice("rows the older app hides (soft-deleted, not yet complete) surface in the newer app: keep the filter in the newer reader, unless showing them is the point of the change"),
    )
}

/// Rows a reader returned before `v` that `a` does not return after.
#[allow(clippy::too_many_arguments)]
fn rows_missing(
    v: i32,
    a: &StatementReader,
    b: &StatementReader,
    was: &BoundRows,
    now: &BoundRows,
    missing: usize,
    total: usize,
    label: &str,
    rls: &str,
) -> Finding {
    let same_app = a.app == b.app;
    let (id, whose) = if same_app {
        ("rows-lost-for-app", format!("it returned before {label}"))
    } else {
        (
            "new-readers-miss-rows",
            format!(
                "the {} app's `{}` returned before {label}",
                b.app, b.statement
            ),
        )
    };
    let keyed = if b.keys.is_empty() {
        String::new()
    } else {
        format!(" of ({})", b.keys.join(", "))
    };
    let (key, row) = now.example_missing.clone().unwrap_or_default();
    let filter = excluding_filter(&a.filters, &b.filters, &was.table_columns, &row);
    let why = match &filter {
        Some((text, col, value)) => format!(
            "its filter `{text}` excludes them ({col} is {value} on them{})",
            if was.table_columns.is_empty() || was.table_columns.contains(col) {
                String::new()
            } else {
                format!(", a column {label} added")
            }
        ),
        None => "a filter or a change of the table now excludes them".to_string(),
    };
    let mut f = Finding::new(
        CHECK,
        id,
        Severity::Error,
        Some(v),
        format!(
            "the {} app's `{}` no longer returns {missing} of the {total} rows {whose} ({} bindings{keyed}): {why}; e.g. the row {key}{rls}",
            a.app,
            a.statement,
            was.bindings.len(),
        ),
    )
    .evidence("app", a.app.clone())
    .evidence("statement", a.statement.clone())
    .evidence("reference_app", b.app.clone())
    .evidence("reference_statement", b.statement.clone())
    .evidence("expected_rows", total)
    .evidence("missing", missing)
    .evidence("example_missing", key);
    if let Some((text, col, value)) = filter {
        f = f
            .evidence("filter", text)
            .evidence("column", col)
            .evidence("value", value);
    }
    f.advice("existing rows must read the same after the migration: give a new filter column a default that makes existing rows pass the filter (a readiness flag: DEFAULT true), or backfill them in the same migration")
}

/// Judges the `-- rollsafe:backfill` promises of migration `v` on their
/// counts.
pub fn directives(v: i32, counted: &[DirectiveCount]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (table, predicate, count) in counted {
        match count {
            Err(e) => out.push(
                Finding::new(
                    CHECK,
                    "directive-invalid",
                    Severity::Error,
                    Some(v),
                    format!("cannot evaluate `-- rollsafe:backfill {table} {predicate}`: {e}"),
                )
                .advice("the directive is `-- rollsafe:backfill <table> <SQL predicate over its columns>`"),
            ),
            Ok(count) => {
                let (rows, bad) = (count.rows, count.violating);
                let f = if bad > 0 {
                    Finding::new(
                        CHECK,
                        "rows-not-backfilled",
                        Severity::Error,
                        Some(v),
                        format!("{bad} of {rows} existing rows of {table} do not satisfy `{predicate}`"),
                    )
                    .advice("set the value for existing rows: a constant column default does it without touching rows (ADD COLUMN ... DEFAULT <value>)")
                } else {
                    Finding::new(
                        CHECK,
                        "rows-backfilled",
                        Severity::Info,
                        Some(v),
                        format!("all {rows} existing rows of {table} satisfy `{predicate}`"),
                    )
                };
                out.push(
                    f.evidence("table", table.clone())
                        .evidence("predicate", predicate.clone())
                        .evidence("rows", rows)
                        .evidence("violating", bad),
                );
            }
        }
    }
    out
}

/// Why rows went missing, when row-level security was enabled on a table
/// by the migration: for a role that does not own it (or under FORCE), no
/// policy means no rows.
fn rls_note(missing: usize, before: &[String], after: &[String]) -> String {
    let enabled: Vec<&str> = after
        .iter()
        .filter(|t| !before.contains(t))
        .map(String::as_str)
        .collect();
    if missing == 0 || enabled.is_empty() {
        return String::new();
    }
    format!(
        " (row-level security was enabled on {}: without a policy for the app's role its readers see no rows; add one with CREATE POLICY in the same migration)",
        enabled.join(", ")
    )
}

/// Each batched update must finish with no row left matching its
/// predicate (the runner would not record the migration otherwise).
pub fn batched_updates(v: i32, runs: &[BatchedRun]) -> Vec<Finding> {
    runs.iter()
        .map(|r| {
            let d = &r.directive;
            let what = format!("batched update of {} (line {})", d.table, d.line);
            let f = match (&r.rows, &r.remaining) {
                (Err(e), _) => Finding::new(CHECK, "batched-update-fails", Severity::Error, Some(v), format!("{what} fails on the seeded database: {e}"))
                    .advice("run the directive's UPDATE on a copy to see why; each batch is its own transaction, so a rerun resumes after the last batch that committed"),
                (Ok(_), Err(e)) => Finding::new(CHECK, "batched-update-unchecked", Severity::Skipped, Some(v), format!("{what} ran, but its predicate could not be counted afterwards: {e}"))
                    .advice("the predicate must be a condition over the table's columns"),
                (Ok(p), Ok(n)) if *n > 0 => Finding::new(CHECK, "batched-update-incomplete", Severity::Error, Some(v), format!("{what} leaves {n} rows still matching its predicate ({})", d.predicate))
                    .evidence("rows_done", p.rows_done)
                    .evidence("rows_left", *n)
                    .advice("the SET must make each row stop matching the WHERE, or the backfill never ends"),
                (Ok(p), Ok(_)) => Finding::new(CHECK, "batched-update-complete", Severity::Info, Some(v), format!(
                    "{what}: {} rows in {} batches under the live apps' workload{}; no row matches its predicate afterwards",
                    p.rows_done,
                    p.batches,
                    r.killed_after.map_or(String::new(), |d| format!(", killed {} ms in and resumed", d.as_millis()))
                ))
                    .evidence("rows_done", p.rows_done)
                    .evidence("batches", p.batches)
                    .evidence("killed", r.killed_after.is_some())
                    .evidence("ms", super::phrases::ms(r.took)),
            };
            // Which directive: two in one file are two findings.
            f.evidence("table", d.table.to_string()).evidence("line", d.line)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backfill_promises_are_judged_on_their_counts() {
        use crate::validity::BackfillCount;
        let count = |rows, violating| {
            Ok(BackfillCount {
                rows,
                violating,
                ..BackfillCount::default()
            })
        };
        let counted: Vec<DirectiveCount> = vec![
            ("t".into(), "ready".into(), count(10, 0)),
            ("u".into(), "ready".into(), count(10, 3)),
            ("w".into(), "nope(".into(), Err("syntax error".into())),
        ];
        let f = directives(3, &counted);
        let ids: Vec<(&str, Severity)> = f.iter().map(|f| (f.id.as_str(), f.severity)).collect();
        assert_eq!(
            ids,
            [
                ("backfill.rows-backfilled", Severity::Info),
                ("backfill.rows-not-backfilled", Severity::Error),
                ("backfill.directive-invalid", Severity::Error),
            ]
        );
        assert!(
            f[1].message.contains("3 of 10 existing rows of u"),
            "{}",
            f[1].message
        );
        assert!(f[2].message.contains("syntax error"), "{}", f[2].message);
    }

    fn reader(app: &str, statement: &str, rows: Result<BoundRows, NotCompared>) -> StatementReader {
        StatementReader {
            app: app.into(),
            statement: statement.into(),
            table: "tickets".into(),
            keys: vec!["event_id".into()],
            filters: vec![
                ("event_id = $1::bigint".into(), vec!["event_id".into()]),
                ("confirmed".into(), vec!["confirmed".into()]),
            ],
            identity: vec!["id".into()],
            bound_by: crate::verify::evidence::BoundBy::Keys,
            limited: false,
            reference: None,
            rows,
        }
    }

    fn seen(keys: &[&str]) -> BoundRows {
        BoundRows {
            bindings: vec![vec![Some("1".into())]],
            seen: vec![keys.iter().map(|k| k.to_string()).collect()],
            table_columns: vec!["id".into(), "event_id".into()],
            ..BoundRows::default()
        }
    }

    #[test]
    fn statement_readers_name_the_filter_the_new_column_and_a_row() {
        let before = vec![
            reader("v1", "list_by_event", Ok(seen(&["id=1", "id=2"]))),
            reader(
                "v1",
                "search",
                Err(NotCompared::CannotBind("rollsafe cannot tell".into())),
            ),
        ];
        let mut lost = seen(&[]);
        lost.example_missing = Some((
            "id=1".into(),
            [
                ("id".to_string(), Some("1".to_string())),
                ("confirmed".to_string(), Some("false".to_string())),
            ]
            .into(),
        ));
        let mut after = reader("v2", "list_by_event", Ok(lost));
        after.reference = Some(("v1".into(), "list_by_event".into()));
        let mut same = reader("v1", "list_by_event", Ok(seen(&["id=1", "id=2"])));
        same.reference = Some(("v1".into(), "list_by_event".into()));
        let f = statement_readers(
            3,
            &visible(before.clone()),
            &visible(vec![same, after]),
            &Labels::ORDINALS,
            &[],
        );
        let ids: Vec<(&str, Severity)> = f.iter().map(|f| (f.id.as_str(), f.severity)).collect();
        assert_eq!(
            ids,
            [
                ("backfill.reader-not-compared", Severity::Skipped),
                ("backfill.new-readers-miss-rows", Severity::Error)
            ]
        );
        assert!(f[0].message.contains("`search`"), "{}", f[0].message);
        assert!(f[0].advice.contains("-- sample:"), "{}", f[0].advice);
        assert_eq!(
            f[1].message,
            "the v2 app's `list_by_event` no longer returns 2 of the 2 rows the v1 app's `list_by_event` returned before V3 (1 bindings of (event_id)): its filter `confirmed` excludes them (confirmed is false on them, a column V3 added); e.g. the row id=1"
        );
        // Every row still returned: the readers agree.
        let mut kept = reader("v2", "list_by_event", Ok(seen(&["id=1", "id=2"])));
        kept.reference = Some(("v1".into(), "list_by_event".into()));
        let f = statement_readers(
            3,
            &visible(before[..1].to_vec()),
            &visible(vec![kept]),
            &Labels::ORDINALS,
            &[],
        );
        assert_eq!(f[0].id, "backfill.readers-agree");
    }

    fn visible(statements: Vec<StatementReader>) -> Visible {
        Visible {
            statements,
            ..Visible::default()
        }
    }

    #[test]
    fn a_newer_reader_returning_rows_the_older_hides_is_a_warning_naming_the_dropped_filter() {
        let mut old = reader("v1", "list_by_event", Ok(seen(&["id=1"])));
        old.filters
            .push(("NOT is_deleted".into(), vec!["is_deleted".into()]));
        let before = vec![old.clone()];
        let mut old_after = old.clone();
        old_after.reference = Some(("v1".into(), "list_by_event".into()));
        // The newer reader keeps every row and shows a soft-deleted one.
        let mut new = reader("v2", "list_by_event", Ok(seen(&["id=1", "id=9"])));
        new.reference = old_after.reference.clone();
        let f = statement_readers(
            3,
            &visible(before.clone()),
            &visible(vec![old_after.clone(), new.clone()]),
            &Labels::ORDINALS,
            &[],
        );
        let ids: Vec<(&str, Severity)> = f.iter().map(|f| (f.id.as_str(), f.severity)).collect();
        assert_eq!(
            ids,
            [
                ("backfill.new-readers-return-hidden-rows", Severity::Warn),
                ("backfill.readers-agree", Severity::Info)
            ]
        );
        assert!(
            f[0].message
                .contains("returns 1 rows that the v1 app's `list_by_event` does not")
                && f[0]
                    .message
                    .contains("lacks the older reader's filter `NOT is_deleted`")
                && f[0].message.ends_with("e.g. the row id=9"),
            "{}",
            f[0].message
        );
        // A reader that cuts its result (LIMIT) proves nothing by it.
        new.limited = true;
        let f = statement_readers(
            3,
            &visible(before),
            &visible(vec![old_after, new]),
            &Labels::ORDINALS,
            &[],
        );
        assert!(f.iter().all(|f| f.severity != Severity::Warn), "{f:?}");
    }
}

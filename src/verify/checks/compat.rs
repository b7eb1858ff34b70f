//! `compat`: the rolling-deploy matrix.
//!
//! While migration k rolls out, every app version still running (needs ≤
//! k−1) must work on k−1 and on k, and every app version that needs ≤ k
//! must work on k. "Work" is measured two ways:
//! - every named statement of the app is prepared and executed (inside a
//!   rolled-back transaction) on a database at that version with rows in it
//!   ([`crate::app::replay`]);
//! - rows the older app writes on k while the newer apps run (each of its
//!   write statements, and its driver's create when it has one) are
//!   returned by the newer apps' statement readers bound to them
//!   ([`rollout_write`]): one judgement for drivers and statement files;
//! - the two-phase protocol, through the apps' drivers, on one database at
//!   k: the newer app's not-ready rows are invisible to its own readers
//!   and (a warning) visible to the older app's; after rolling the app
//!   back, the older app still reads the newer app's rows and still
//!   writes.
//!
//! It also derives the safe deploy order from the windows.

use crate::app::replay::{Outcome, Step};
use crate::app::AppVersion;
use crate::report::{Finding, Severity};
use crate::verify::evidence::{Context, Labels, MigrationEvidence, RolloutWrite, RowRead, Writer};
use crate::verify::measure::cross_version::CrossVersion;

use super::Check;

pub const CHECK: &str = "compat";
pub const DESCRIPTION: &str =
    "every live app version's statements run on the schema before and after, and old and new apps read each other's rows correctly";

pub const ENTRY: Check = Check {
    name: CHECK,
    description: DESCRIPTION,
    ran: |e| e.compat.is_some(),
    evaluate,
    evaluate_run: None,
};

/// compat's judgement of one migration: a live app that could not write
/// its rows before it (the rehearsal stopped there), the live apps'
/// statements on the schema before, every app that may run after on the
/// schema after (and the types the live ones read and bind), then each
/// older app beside each newer one.
pub fn evaluate(e: &MigrationEvidence, cx: &Context) -> Vec<Finding> {
    let (v, prev) = (e.version, e.prev);
    let mut out = Vec::new();
    if let Some((app, err)) = e.seeding.as_ref().and_then(|s| s.cannot_write.as_ref()) {
        out.push(live_app_cannot_write(prev, v, app, err, &cx.labels));
    }
    let Some(c) = &e.compat else {
        return out;
    };
    let mut failed_before: Vec<(&str, &str)> = Vec::new();
    for app in e.live.iter().filter_map(|a| cx.app(a)) {
        if let Some(outcomes) = c.before.get(&app.name) {
            let after = c
                .after
                .iter()
                .find(|(a, _)| *a == app.name)
                .map(|(_, o)| o.as_slice());
            out.extend(before_findings(v, app, prev, outcomes, after, &cx.labels));
            failed_before.extend(
                outcomes
                    .iter()
                    .filter(|o| o.failure.is_some())
                    .map(|o| (app.name.as_str(), o.statement.as_str())),
            );
        }
    }
    for (app, err) in &c.rows_not_written {
        out.push(rows_cannot_be_written(v, app, err, &cx.labels));
    }
    for (app, outcomes) in &c.after {
        let Some(app) = cx.app(app) else { continue };
        // What failed before as well is judged once, above: its outcome
        // does not change across the migration.
        let changed: Vec<Outcome> = outcomes
            .iter()
            .filter(|o| {
                o.failure.is_none()
                    || !failed_before.contains(&(app.name.as_str(), o.statement.as_str()))
            })
            .cloned()
            .collect();
        let mut found = replay_findings(v, app, v, &changed, &cx.labels);
        let apart: Vec<String> = outcomes
            .iter()
            .filter(|o| !changed.iter().any(|c| c.statement == o.statement))
            .map(|o| format!("`{}`", o.statement))
            .collect();
        for f in found.iter_mut().filter(|f| f.id == "compat.statements-run") {
            if !apart.is_empty() {
                f.message = format!(
                    "{}, apart from {}, which fail(s) before it as well (skipped)",
                    f.message,
                    apart.join(", ")
                );
            }
        }
        out.extend(found);
        if let Some(before) = c.before.get(&app.name) {
            out.extend(type_changes(v, app, prev, before, outcomes, &cx.labels));
        }
    }
    for pair in &c.cross_version {
        // Without drivers there is no protocol to exercise; the rows the
        // older app wrote during the rollout were read back by statement
        // (below), which is what matters, so the skip is not said.
        let by_statement = c
            .rollout_writes
            .iter()
            .any(|w| w.older == pair.older && w.reads.iter().any(|r| r.app == pair.newer));
        if pair.seen.is_none() && by_statement {
            continue;
        }
        if let (Some(older), Some(newer)) = (cx.app(&pair.older), cx.app(&pair.newer)) {
            out.extend(cross_version(
                v,
                older,
                newer,
                pair.seen.as_ref(),
                &cx.labels,
            ));
        }
    }
    let known = |table: &str| -> Vec<String> {
        e.backfill
            .iter()
            .flat_map(|b| &b.readers_before.statements)
            .filter(|r| r.table == table)
            .find_map(|r| r.rows.as_ref().ok().map(|rows| rows.table_columns.clone()))
            .unwrap_or_default()
    };
    // A write that touched several rows is judged on each; one finding
    // per writer, reader app and outcome says it.
    let mut said: Vec<(String, String, String)> = Vec::new();
    for w in &c.rollout_writes {
        for f in rollout_write(v, w, &known(&w.table), &cx.labels) {
            let text = |k: &str| f.evidence.get(k).map(|e| e.to_string()).unwrap_or_default();
            let who = (
                f.id.clone(),
                text("statement"),
                text("newer") + &text("app"),
            );
            if !said.contains(&who) {
                said.push(who);
                out.push(f);
            }
        }
    }
    out
}

/// Judges a row the older app wrote on `v`'s schema while the newer apps
/// run ([`RolloutWrite`]): a newer app none of whose readers return it,
/// while the writer's own readers do, lost it. Rows the newer apps write
/// are never judged here: hiding its own rows until a later step (a
/// two-phase create) is the newer app's design, and this row is the older
/// app's. `known`: the table's columns before the migration (empty:
/// unknown).
pub fn rollout_write(v: i32, w: &RolloutWrite, known: &[String], labels: &Labels) -> Vec<Finding> {
    let v_label = labels.of(v);
    let o = &w.older;
    let with = w.writer.phrase();
    let statement = w.writer.evidence();
    let (key, row) = match written_row(v, w, labels) {
        Ok(written) => written,
        Err(failed) => return vec![*failed],
    };
    let mut out = Vec::new();
    let own: Vec<&RowRead> = w.reads.iter().filter(|r| &r.app == o).collect();
    let own_filters: Vec<(String, Vec<String>)> =
        own.iter().flat_map(|r| r.filters.clone()).collect();
    let mut newer: Vec<&str> = Vec::new();
    for r in w.reads.iter().filter(|r| &r.app != o) {
        if !newer.contains(&r.app.as_str()) {
            newer.push(&r.app);
        }
    }
    let mut visible_to = Vec::new();
    for n in newer {
        let reads: Vec<&RowRead> = w.reads.iter().filter(|r| r.app == n).collect();
        let names = |reads: &[&RowRead]| {
            reads
                .iter()
                .map(|r| format!("`{}`", r.statement))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (lost, though) = lost_reads(&own, &reads);
        let returned: Vec<&RowRead> = reads
            .iter()
            .filter(|r| r.returned == Ok(true))
            .copied()
            .collect();
        if lost.is_empty() {
            if !returned.is_empty() {
                visible_to.push(format!("the {n} app's {}", names(&returned)));
            }
            continue;
        }
        let lost_reads = lost;
        let filters: Vec<(String, Vec<String>)> =
            lost_reads.iter().flat_map(|r| r.filters.clone()).collect();
        let filter = super::phrases::excluding_filter(&filters, &own_filters, known, row);
        let why = filter.as_ref().map_or(String::new(), |(text, col, value)| {
            format!(": its filter `{text}` excludes it ({col} is {value} on the row)")
        });
        let though = though.map_or(String::new(), |r| {
            format!(", though the {o} app's `{}` returns it", r.statement)
        });
        let mut f = fail(
            v,
            "old-writes-invisible-to-new",
            Severity::Error,
            format!(
                "a row the {o} app wrote during the rollout with {with} (the row {key} of {}) is not returned by the {n} app's {}{why}{though}",
                w.table,
                names(&lost_reads)
            ),
            "rows the older app writes during the rollout are complete: a new filter column's default must make them pass the newer app's filter (DEFAULT true); a backfill alone does not reach rows written after it",
        )
        .evidence("older", o.clone())
        .evidence("newer", n.to_string())
        .evidence("statement", statement.clone())
        .evidence("row", key.clone());
        if let Some((text, col, value)) = filter {
            f = f
                .evidence("filter", text)
                .evidence("column", col)
                .evidence("value", value);
        }
        out.push(f);
    }
    for (app, why) in &w.unbound {
        out.push(
            Finding::new(
                CHECK,
                "rollout-write-not-compared",
                Severity::Skipped,
                Some(v),
                format!(
                    "the row the {o} app wrote with {with} during the rollout on {v_label} was not read back by the {app} app: {why}"
                ),
            )
            .evidence("app", app.clone())
            .evidence("statement", statement.clone())
            .advice(format!("give the {app} app's reader of {} a predicate `column = $N` on a column the row holds (its key), so rollsafe can point it at the row", w.table)),
        );
    }
    if !visible_to.is_empty() {
        out.push(
            Finding::new(
                CHECK,
                "old-writes-visible-to-new",
                Severity::Info,
                Some(v),
                format!(
                    "a row the {o} app writes with {with} during the rollout on {v_label} is returned by {}",
                    visible_to.join(" and ")
                ),
            )
            .evidence("older", o.clone())
            .evidence("statement", statement),
        );
    }
    out
}

/// The row the older app wrote during the rollout, or the finding that
/// says why there is none to read back: its driver failed to create (the
/// older app cannot write on this schema), or a write statement failed
/// with rollsafe's values (not compared).
fn written_row<'w>(
    v: i32,
    w: &'w RolloutWrite,
    labels: &Labels,
) -> Result<&'w (String, crate::verify::evidence::Row), Box<Finding>> {
    let v_label = labels.of(v);
    let o = &w.older;
    let with = w.writer.phrase();
    let statement = w.writer.evidence();
    match (&w.written, &w.writer) {
        // The app's own code failed to create: the older app cannot
        // write on this schema.
        (Err(e), Writer::Driver) => {
            Err(Box::new(fail(
                v,
                "old-app-cannot-write",
                Severity::Error,
                format!("the {o} app cannot create on {v_label} with {with}: {e}"),
                "the older app keeps running during the rollout; its writes must still succeed",
            )
            .evidence("app", o.clone())
            .evidence("statement", statement)))
        }
        // A statement run with rollsafe's values: they, not the schema,
        // may be what failed.
        (Err(e), Writer::Statement(_)) => {
            Err(Box::new(Finding::new(
                CHECK,
                "rollout-write-not-compared",
                Severity::Skipped,
                Some(v),
                format!(
                    "the {o} app's {with} could not write a row on {v_label} to read back with the newer apps' readers: {e}"
                ),
            )
            .evidence("app", o.clone())
            .evidence("statement", statement)
            .advice("the statement's own findings (statement-fails) say whether the schema is to blame; declare `-- param:` values that name existing rows for its foreign keys (an UPDATE's WHERE must match a row)")))
        }
        (Ok(written), _) => Ok(written),
    }
}

/// The newer app's `reads` that lost the row, and the older app's reader
/// that returns it (None when the older app has none). Each newer reader
/// is held to the older app's reader of the same name (else of the same
/// table keyed alike); with nothing to hold them to, the row is lost when
/// no reader of the newer app returns it while the older app's do (or it
/// has none): a reader the older app has no counterpart of (one that
/// also lists rows not ready, say) sets no expectation.
fn lost_reads<'r>(
    own: &[&'r RowRead],
    reads: &[&'r RowRead],
) -> (Vec<&'r RowRead>, Option<&'r RowRead>) {
    let counterpart = |r: &RowRead| {
        own.iter()
            .find(|o| o.statement == r.statement)
            .or_else(|| {
                own.iter().find(|o| {
                    !o.keys.is_empty()
                        && o.keys.iter().collect::<std::collections::BTreeSet<_>>()
                            == r.keys.iter().collect()
                })
            })
            .copied()
    };
    let held: Vec<(&RowRead, &RowRead)> = reads
        .iter()
        .filter_map(|r| counterpart(r).map(|o| (*r, o)))
        .collect();
    if held.is_empty() {
        let none = !reads.iter().any(|r| r.returned == Ok(true));
        match own.iter().find(|r| r.returned == Ok(true)) {
            Some(o) if none => (reads.to_vec(), Some(*o)),
            None if none && own.is_empty() => (reads.to_vec(), None),
            _ => (Vec::new(), None),
        }
    } else {
        let lost: Vec<(&RowRead, &RowRead)> = held
            .iter()
            .filter(|(r, o)| o.returned == Ok(true) && r.returned == Ok(false))
            .copied()
            .collect();
        (
            lost.iter().map(|(r, _)| *r).collect(),
            lost.first().map(|(_, o)| *o),
        )
    }
}

/// Findings for a live app's replay on `prev`, the schema before `v`. A
/// statement that fails there is not `v`'s doing (an app statement is a
/// migration's problem only when its outcome changes across it): it is
/// skipped when it fails after `v` too, or is not replayed after it, and
/// a statement `v` mends is said as such.
pub fn before_findings(
    v: i32,
    app: &AppVersion,
    prev: i32,
    before: &[Outcome],
    after: Option<&[Outcome]>,
    labels: &Labels,
) -> Vec<Finding> {
    let failing: Vec<&Outcome> = before.iter().filter(|o| o.failure.is_some()).collect();
    if failing.is_empty() {
        return replay_findings(v, app, prev, before, labels);
    }
    failing
        .into_iter()
        .map(|o| {
            let later = after.and_then(|a| a.iter().find(|x| x.statement == o.statement));
            failed_before(v, app, prev, o, later, labels)
        })
        .collect()
}

/// A live app's statement `o` that failed on `prev`, the schema before
/// `v`, and its outcome on `v` (None: not replayed there).
fn failed_before(
    v: i32,
    app: &AppVersion,
    prev: i32,
    o: &Outcome,
    after: Option<&Outcome>,
    labels: &Labels,
) -> Finding {
    let (prev_label, v_label) = (labels.of(prev), labels.of(v));
    let (step, msg) = o.failure.clone().unwrap_or((Step::Execute, String::new()));
    let name = &app.name;
    let statement = &o.statement;
    let finding = |id: &str, severity: Severity, message: String| {
        Finding::new(CHECK, id, severity, Some(v), message)
            .evidence("app", name.clone())
            .evidence("statement", statement.clone())
            .evidence("schema_version", prev)
            .evidence("step", step.to_string())
            .evidence("error", msg.clone())
    };
    if after.is_some_and(|a| a.failure.is_none()) {
        return finding(
            "statement-mended",
            Severity::Info,
            format!("the {name} app's `{statement}` fails on {prev_label} at {step} ({msg}) and runs on {v_label}"),
        );
    }
    if unbound_phrase(o).is_some() {
        return not_bound(v, app, prev, o, labels);
    }
    let message = match after {
        Some(_) => format!(
            "the {name} app's `{statement}` fails on {prev_label} as it does on {v_label} (at {step}: {msg}): its outcome does not change across {v_label}, so it says nothing about it"
        ),
        None => format!(
            "the {name} app's `{statement}` fails on {prev_label} (at {step}: {msg}), and the app does not run after {v_label}: nothing to compare"
        ),
    };
    finding("statement-already-fails", Severity::Skipped, message).advice(
        "it fails before this migration: the migration that changed its outcome has the finding; while it fails, no later migration's effect on it can be measured",
    )
}

/// `o`, which failed on `schema` because its parameters could not be
/// bound: it did not run as the app runs it, so it is skipped, saying why.
fn not_bound(v: i32, app: &AppVersion, schema: i32, o: &Outcome, labels: &Labels) -> Finding {
    let (step, msg) = o.failure.clone().unwrap_or((Step::Execute, String::new()));
    let why = unbound_phrase(o).unwrap_or_default();
    Finding::new(
        CHECK,
        "statement-not-bound",
        Severity::Skipped,
        Some(v),
        format!(
            "the {} app's `{}` could not be run as the app runs it on {}: {why} (at {step}: {msg})",
            app.name,
            o.statement,
            labels.of(schema)
        ),
    )
    .evidence("app", app.name.clone())
    .evidence("statement", o.statement.clone())
    .evidence("schema_version", schema)
    .evidence("step", step.to_string())
    .evidence("error", msg)
    .evidence(
        "null_params",
        o.null_params
            .iter()
            .map(|n| format!("${n}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
    .advice(format!(
        "declare `-- param: $N = <SQL expression>` values for the {} app's `{}` that find a value on the seeded database (an expression naming a row that exists), so it runs as the app runs it",
        app.name, o.statement
    ))
}

/// SQLSTATE 23502 not_null_violation.
const NOT_NULL_VIOLATION: &str = "23502";

/// Why `o` could not run as the app runs it, when its parameters are to
/// blame: their `-- param:` expressions failed, or some were bound NULL
/// and it failed on a NOT NULL column.
fn unbound_phrase(o: &Outcome) -> Option<String> {
    if matches!(o.failure, Some((Step::Params, _))) {
        return Some("its parameters could not be bound".to_string());
    }
    // A NULL is a value the app may bind (a nullable column); it is to
    // blame only when the statement failed on a NOT NULL column.
    if o.null_params.is_empty() || o.sqlstate.as_deref() != Some(NOT_NULL_VIOLATION) {
        return None;
    }
    let list = o
        .null_params
        .iter()
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "its parameter(s) {list} were bound NULL (a `-- param:` expression that found no value, or a type rollsafe has no value for)"
    ))
}

/// A statement that first failed only on a value rollsafe made for it:
/// skipped, naming the value and the constraint, never
/// `statement-fails` (the app never wrote that value, the migration did
/// not refuse it). Its run with a value that holds is judged as usual.
fn made_value(
    v: i32,
    app: &AppVersion,
    schema: i32,
    o: &Outcome,
    why: &str,
    labels: &Labels,
) -> Finding {
    let schema_label = labels.of(schema);
    Finding::new(
        CHECK,
        "made-value-refused",
        Severity::Skipped,
        Some(v),
        format!(
            "the {} app's `{}` on {schema_label} failed first on a value rollsafe supplied, not on the app's: {why}; it was run again with a value that holds",
            app.name, o.statement
        ),
    )
    .evidence("app", app.name.clone())
    .evidence("statement", o.statement.clone())
    .evidence("schema_version", schema)
    .advice("declare the value in the statement's `-- param:` line (a value your CHECKs and keys accept), or capture it again: rollsafe's values come from the generator and meet the constraints it can read")
}

/// Findings for one replay of `app` on schema version `schema` during the
/// rollout of migration `v`.
pub fn replay_findings(
    v: i32,
    app: &AppVersion,
    schema: i32,
    outcomes: &[Outcome],
    labels: &Labels,
) -> Vec<Finding> {
    let schema_label = labels.of(schema);
    let mut out = Vec::new();
    for o in outcomes {
        if let Some(why) = &o.made_value {
            out.push(made_value(v, app, schema, o, why, labels));
        }
        if let (Some(denied), Some((_, msg))) = (&o.denied, &o.failure) {
            out.push(permission_denied(
                v,
                app,
                schema,
                &o.statement,
                denied,
                msg,
                labels,
            ));
            continue;
        }
        if o.failure.is_some() && unbound_phrase(o).is_some() {
            out.push(not_bound(v, app, schema, o, labels));
            continue;
        }
        if let Some((step, msg)) = &o.failure {
            out.push(
                Finding::new(
                    CHECK,
                    "statement-fails",
                    Severity::Error,
                    Some(v),
                    format!(
                        "the {} app's `{}` fails on {schema_label} at {step}: {msg}",
                        app.name, o.statement
                    ),
                )
                .evidence("app", app.name.clone())
                .evidence("statement", o.statement.clone())
                .evidence("schema_version", schema)
                .evidence("step", step.to_string())
                .evidence("error", msg.clone())
                .advice(format!(
                    "the {} app runs on {schema_label} during the rollout: keep what it uses (columns, tables, types) and give new NOT NULL columns defaults; drop or rename only after no running version uses it (expand, migrate, contract)",
                    app.name
                )),
            );
        }
    }
    if out.is_empty() {
        out.push(
            Finding::new(
                CHECK,
                "statements-run",
                Severity::Info,
                Some(v),
                format!(
                    "all {} statements of the {} app prepare and execute on {schema_label}",
                    outcomes.len(),
                    app.name
                ),
            )
            .evidence("app", app.name.clone())
            .evidence("schema_version", schema)
            .evidence("statements", outcomes.len()),
        );
    }
    out
}

/// An app's statement refused for want of a privilege (SQLSTATE 42501), as
/// its own role ran it: a GRANT the migrations do not give, or row-level
/// security refusing the row. Production's app would fail the same way.
pub fn permission_denied(
    v: i32,
    app: &AppVersion,
    schema: i32,
    statement: &str,
    denied: &crate::app::replay::Denied,
    message: &str,
    labels: &Labels,
) -> Finding {
    let schema_label = labels.of(schema);
    let table = if denied.table.is_empty() {
        "a table".to_string()
    } else {
        denied.table.clone()
    };
    let lacking = if denied.privileges.is_empty() {
        "a privilege it needs".to_string()
    } else {
        denied.privileges.join(", ")
    };
    let (what, advice) = if denied.row_security && denied.privileges.is_empty() {
        (
            format!(
                "row-level security on {table} refuses its rows to role {} ({message}): RLS is enabled and no policy lets this role do what the statement does",
                denied.role
            ),
            format!(
                "add a policy for the app's role in the migration that enables row-level security (CREATE POLICY … ON {table} TO {} USING (…) WITH CHECK (…)), or enable it only once the policies exist",
                denied.role
            ),
        )
    } else {
        (
            format!("role {} lacks {lacking} on {table} ({message})", denied.role),
            format!(
                "grant it in the migration that creates or changes {table} (GRANT {lacking} ON {table} TO {}); the app connects as that role in production",
                denied.role
            ),
        )
    };
    Finding::new(
        CHECK,
        "permission-denied",
        Severity::Error,
        Some(v),
        format!(
            "the {} app's `{statement}` is refused on {schema_label}: {what}",
            app.name
        ),
    )
    .evidence("app", app.name.clone())
    .evidence("statement", statement.to_string())
    .evidence("role", denied.role.clone())
    .evidence("table", denied.table.clone())
    .evidence("privileges", denied.privileges.join(", "))
    .evidence("row_security", denied.row_security)
    .evidence("schema_version", schema)
    .advice(advice)
}

/// Findings for the types a live app's statements return and bind: what
/// they were on the schema before migration `v` (`before`) against what
/// they are after it. The app's code decodes the old types; a changed one
/// breaks it even though every statement still prepares and runs.
pub fn type_changes(
    v: i32,
    app: &AppVersion,
    prev: i32,
    before: &[Outcome],
    after: &[Outcome],
    labels: &Labels,
) -> Vec<Finding> {
    let prev_label = labels.of(prev);
    let v_label = labels.of(v);
    let mut out = Vec::new();
    for b in before.iter().filter(|o| o.failure.is_none()) {
        let Some(a) = after
            .iter()
            .find(|a| a.statement == b.statement && a.failure.is_none())
        else {
            continue;
        };
        for (i, (name, old)) in b.columns.iter().enumerate() {
            let now = a
                .columns
                .iter()
                .find(|(n, _)| n == name)
                .or(a.columns.get(i));
            let Some((_, new)) = now.filter(|(_, t)| t != old) else {
                continue;
            };
            if without_modifiers(new) == without_modifiers(old) {
                // Same type, other length or precision: the app still
                // decodes it, but what it writes may no longer fit.
                out.push(
                    Finding::new(
                        CHECK,
                        "result-type-modifier-changed",
                        Severity::Warn,
                        Some(v),
                        format!(
                            "the {} app's `{}` returns column {name} as {new} on {v_label} but as {old} on {prev_label}: values the app writes there may no longer fit",
                            app.name, b.statement
                        ),
                    )
                    .evidence("app", app.name.clone())
                    .evidence("statement", b.statement.clone())
                    .evidence("column", name.clone())
                    .evidence("type_before", old.clone())
                    .evidence("type_after", new.clone())
                    .advice("narrow a column only once no running app version writes longer or more precise values (a CHECK added NOT VALID, then validated, proves the existing rows fit)"),
                );
            } else {
                out.push(
                    Finding::new(
                        CHECK,
                        "result-type-changed",
                        Severity::Error,
                        Some(v),
                        format!(
                            "the {} app's `{}` returns column {name} as {new} on {v_label} but as {old} on {prev_label}: the app's code decodes {old} and breaks",
                            app.name, b.statement
                        ),
                    )
                    .evidence("app", app.name.clone())
                    .evidence("statement", b.statement.clone())
                    .evidence("column", name.clone())
                    .evidence("type_before", old.clone())
                    .evidence("type_after", new.clone())
                    .advice(format!("the {} app runs on {v_label} during the rollout: add a column of the new type, fill it in batches, move the apps over, and drop the old column once no running version reads it", app.name)),
                );
            }
        }
        for (i, old) in b.params.iter().enumerate() {
            if let Some(new) = a.params.get(i).filter(|t| *t != old) {
                out.push(
                    Finding::new(
                        CHECK,
                        "param-type-changed",
                        Severity::Error,
                        Some(v),
                        format!(
                            "the {} app's `{}` binds ${} as {new} on {v_label} but as {old} on {prev_label}: the app sends {old}",
                            app.name,
                            b.statement,
                            i + 1
                        ),
                    )
                    .evidence("app", app.name.clone())
                    .evidence("statement", b.statement.clone())
                    .evidence("param", i + 1)
                    .evidence("type_before", old.clone())
                    .evidence("type_after", new.clone())
                    .advice("keep the types the running app versions bind until none of them runs"),
                );
            }
        }
    }
    out
}

/// `character varying(20)` → `character varying`, `timestamp(3) with time
/// zone` → `timestamp with time zone`: the type without its modifiers.
fn without_modifiers(t: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for ch in t.chars() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => out.push(ch),
            _ => {}
        }
    }
    out
}

/// A live app cannot write its rows on the schema the rehearsal reached:
/// an earlier migration broke it, and nothing later can be rehearsed.
pub fn live_app_cannot_write(prev: i32, v: i32, app: &str, e: &str, labels: &Labels) -> Finding {
    let prev_label = labels.of(prev);
    let v_label = labels.of(v);
    Finding::new(
        CHECK,
        "live-app-cannot-write",
        Severity::Error,
        Some(prev),
        format!("the {app} app cannot write its rows on {prev_label} ({e}); {v_label} and later were not rehearsed"),
    )
    .evidence("app", app.to_string())
    .advice("keep every column a live app version writes insertable (nullable or with a default) until no running version writes it")
}

/// Rows shaped like an app's cannot be written on the compat database.
/// That database already holds the rows seeded before the migration (for
/// an app live then, by its own seed), so the seed runs there again: one
/// that writes fixed values into a UNIQUE column fails on its own earlier
/// rows, not on the schema, and the advice says so (the statements' own
/// findings say whether the schema is to blame).
pub fn rows_cannot_be_written(v: i32, app: &str, e: &str, labels: &Labels) -> Finding {
    let v_label = labels.of(v);
    Finding::new(
        CHECK,
        "rows-cannot-be-written",
        Severity::Warn,
        Some(v),
        format!("rows shaped like the {app} app's cannot be written on {v_label}: {e}"),
    )
    .evidence("app", app.to_string())
    .advice(format!(
        "the {app} app's seed runs here on top of the rows seeded before {v_label}, often its own: if the error names a UNIQUE constraint, give those values a per-run part (gen_random_uuid(), random()) so the seed can run more than once; otherwise see this app's statement failures on {v_label}"
    ))
}

fn fail(v: i32, name: &str, sev: Severity, msg: String, advice: &str) -> Finding {
    Finding::new(CHECK, name, sev, Some(v), msg).advice(advice)
}

/// Judges what the cross-version scenario saw of `older` and `newer` on
/// migration `v`'s schema ([`crate::verify::measure::cross_version`]): None when
/// either has no driver (skipped); an app operation that failed outright
/// is an error finding too.
pub fn cross_version(
    v: i32,
    older: &AppVersion,
    newer: &AppVersion,
    seen: Option<&Result<CrossVersion, String>>,
    labels: &Labels,
) -> Vec<Finding> {
    let v_label = labels.of(v);
    let (o, n) = (&older.name, &newer.name);
    let seen = match seen {
        None => {
            return vec![Finding::new(
                CHECK,
                "cross-version-skipped",
                Severity::Skipped,
                Some(v),
                format!("no driver for {o} or {n}: cross-version behaviour not exercised"),
            )]
        }
        Some(Err(e)) => {
            return vec![Finding::new(
                CHECK,
                "cross-version-fails",
                Severity::Error,
                Some(v),
                format!("the {o} and {n} apps cannot run side by side on {v_label}: {e}"),
            )
            .evidence("older", o.clone())
            .evidence("newer", n.clone())
            .advice(
                "both app versions run during the rollout: keep everything either of them uses",
            )]
        }
        Some(Ok(seen)) => seen,
    };
    let mut out = Vec::new();
    let mut ok = Vec::new();

    // The newer app's creations in flight: its own rows, hidden by
    // design (the older app's rows written during the rollout are judged
    // by `rollout_write`).
    if let Some((id, to_new, to_old)) = seen.in_flight {
        if to_new {
            out.push(
                fail(
                    v,
                    "not-ready-visible-to-new",
                    Severity::Error,
                    format!("a not-ready row of the {n} app is visible to its own readers"),
                    "readers must filter on readiness so half-built rows stay hidden",
                )
                .evidence("row", id.to_string()),
            );
        } else {
            ok.push(format!("not-ready rows are invisible to the {n} app"));
        }
        if to_old {
            out.push(
                fail(
                    v,
                    "not-ready-visible-to-old",
                    Severity::Warn,
                    format!("a not-ready row of the {n} app is visible to the {o} app's readers while both run"),
                    "expected while the older app runs (it does not know readiness); keep the rollout short and make the older app tolerate rows that are not complete yet",
                )
                .evidence("row", id.to_string()),
            );
        }
    }

    // Rolling the app back: the older app reads the newer app's rows and
    // still writes.
    if !seen.rollback_reads || seen.rollback_write.is_err() {
        out.push(fail(
            v,
            "rollback-breaks-old-app",
            Severity::Error,
            format!(
                "after rolling back to the {o} app: {}{}",
                if seen.rollback_reads { "" } else { "it does not see rows the newer app created; " },
                seen.rollback_write
                    .as_ref()
                    .err()
                    .map(|e| format!("its create fails: {e}"))
                    .unwrap_or_default()
            ),
            "an app rollback must keep working on the new schema: do not make the old app's rows or writes invalid",
        ));
    } else {
        ok.push(format!("rolling back to the {o} app keeps working"));
    }

    if !ok.is_empty() {
        out.push(
            Finding::new(
                CHECK,
                "cross-version",
                Severity::Info,
                Some(v),
                format!("{o} and {n} on {v_label}: {}", ok.join("; ")),
            )
            .evidence("older", o.clone())
            .evidence("newer", n.clone()),
        );
    }
    out
}

/// The deploy order the windows imply, one step per migration: which app
/// versions may roll out after it, and which keep working throughout.
pub fn safe_order(versions: &[i32], apps: &[AppVersion], labels: &Labels) -> Vec<String> {
    let mut steps = Vec::new();
    let mut prev = 0;
    for &v in versions {
        let v_label = labels.of(v);
        let newly: Vec<&str> = apps
            .iter()
            .filter(|a| a.may_run_on(v) && !a.may_run_on(prev))
            .map(|a| a.name.as_str())
            .collect();
        let running: Vec<&str> = apps
            .iter()
            .filter(|a| a.live_during(v))
            .map(|a| a.name.as_str())
            .collect();
        // Retired at v: it must be stopped before v is applied.
        let retiring: Vec<&str> = apps
            .iter()
            .filter(|a| a.may_run_on(prev) && !a.may_run_on(v) && prev > 0)
            .map(|a| a.name.as_str())
            .collect();
        let mut s = if retiring.is_empty() {
            format!("apply {v_label}")
        } else {
            format!(
                "stop the {} app, then apply {v_label}",
                retiring.join(" and ")
            )
        };
        if !newly.is_empty() {
            s.push_str(&format!(", then roll out the {} app", newly.join(" and ")));
        }
        if !running.is_empty() {
            s.push_str(&format!(
                "; the {} app keeps working throughout",
                running.join(" and ")
            ));
        }
        steps.push(s);
        prev = v;
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_version_is_judged_on_what_the_scenario_saw() {
        let apps = apps();
        let (old, new) = (&apps[0], &apps[1]);
        let id = uuid::Uuid::nil();
        let ids = |f: Vec<Finding>| -> Vec<(String, Severity)> {
            f.into_iter().map(|f| (f.id, f.severity)).collect()
        };
        let good = CrossVersion {
            in_flight: Some((id, false, true)),
            rollback_reads: true,
            rollback_write: Ok(()),
        };
        assert_eq!(
            ids(cross_version(
                3,
                old,
                new,
                Some(&Ok(good.clone())),
                &Labels::ORDINALS
            )),
            [
                (
                    "compat.not-ready-visible-to-old".to_string(),
                    Severity::Warn
                ),
                ("compat.cross-version".to_string(), Severity::Info),
            ]
        );
        let bad = CrossVersion {
            rollback_write: Err("null value in column \"is_ready\"".into()),
            ..good
        };
        let f = cross_version(3, old, new, Some(&Ok(bad)), &Labels::ORDINALS);
        let rollback = f
            .iter()
            .find(|f| f.id == "compat.rollback-breaks-old-app")
            .unwrap();
        assert!(
            rollback.message.contains("its create fails: null value"),
            "{}",
            rollback.message
        );
        assert_eq!(
            ids(cross_version(3, old, new, None, &Labels::ORDINALS)),
            [(
                "compat.cross-version-skipped".to_string(),
                Severity::Skipped
            )]
        );
        let failed = cross_version(
            3,
            old,
            new,
            Some(&Err("connection lost".to_string())),
            &Labels::ORDINALS,
        );
        assert_eq!(failed[0].id, "compat.cross-version-fails");
    }

    /// Two app versions: `old` from V2, `new` from V3.
    fn apps() -> Vec<AppVersion> {
        let set = |name: &str, needs: i32| {
            AppVersion::parse(
                &format!("{name}.sql"),
                &format!(
                    "-- app: {name}\n-- needs: {needs}\n\
                     -- name: get_by_id\nSELECT id FROM t WHERE id = $1;\n\
                     -- name: insert\nINSERT INTO t (id) VALUES ($1::uuid);\n"
                ),
            )
            .unwrap()
        };
        vec![set("old", 2), set("new", 3)]
    }

    #[test]
    fn a_changed_result_or_parameter_type_is_an_error() {
        let apps = apps();
        let outcome = |col: &str, param: &str| Outcome {
            statement: "get_by_id".into(),
            columns: vec![
                ("id".into(), "uuid".into()),
                ("current_attempts".into(), col.into()),
            ],
            params: vec![param.into()],
            ..Outcome::default()
        };
        let f = type_changes(
            4,
            &apps[0],
            3,
            &[outcome("int4", "uuid")],
            &[outcome("int8", "uuid")],
            &Labels::ORDINALS,
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].id, "compat.result-type-changed");
        assert!(
            f[0].message
                .contains("current_attempts as int8 on V4 but as int4 on V3"),
            "{}",
            f[0].message
        );
        // Only the modifier changed: visible, a warning (the app still
        // decodes it).
        let f = type_changes(
            4,
            &apps[0],
            3,
            &[outcome("character varying(100)", "uuid")],
            &[outcome("character varying(20)", "uuid")],
            &Labels::ORDINALS,
        );
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("compat.result-type-modifier-changed", Severity::Warn)
        );
        assert!(
            f[0].message
                .contains("as character varying(20) on V4 but as character varying(100) on V3"),
            "{}",
            f[0].message
        );
        let f = type_changes(
            4,
            &apps[0],
            3,
            &[outcome("int4", "uuid")],
            &[outcome("int4", "text")],
            &Labels::ORDINALS,
        );
        assert_eq!(f[0].id, "compat.param-type-changed");
        assert!(type_changes(
            4,
            &apps[0],
            3,
            &[outcome("int4", "uuid")],
            &[outcome("int4", "uuid")],
            &Labels::ORDINALS
        )
        .is_empty());
    }

    #[test]
    fn a_row_the_older_app_wrote_must_reach_the_newer_apps_readers() {
        let read = |app: &str, returned: bool| RowRead {
            app: app.into(),
            statement: "list_by_event".into(),
            keys: vec!["event_id".into()],
            filters: if app == "new" {
                vec![("confirmed".into(), vec!["confirmed".into()])]
            } else {
                Vec::new()
            },
            returned: Ok(returned),
        };
        let row: crate::verify::evidence::Row = [
            ("id".to_string(), Some("7".to_string())),
            ("confirmed".to_string(), Some("false".to_string())),
        ]
        .into();
        let write = |reads: Vec<RowRead>| RolloutWrite {
            older: "old".into(),
            writer: Writer::Statement("sell".into()),
            table: "tickets".into(),
            written: Ok(("id=7".into(), row.clone())),
            reads,
            unbound: Vec::new(),
        };
        let known = ["id".to_string()];
        let f = rollout_write(
            3,
            &write(vec![read("old", true), read("new", false)]),
            &known,
            &Labels::ORDINALS,
        );
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].message,
            "a row the old app wrote during the rollout with `sell` (the row id=7 of tickets) is not returned by the new app's `list_by_event`: its filter `confirmed` excludes it (confirmed is false on the row), though the old app's `list_by_event` returns it"
        );
        let f = rollout_write(
            3,
            &write(vec![read("old", true), read("new", true)]),
            &known,
            &Labels::ORDINALS,
        );
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("compat.old-writes-visible-to-new", Severity::Info)
        );
        // Not returned to its own writer either: nothing lost between
        // the versions.
        let f = rollout_write(
            3,
            &write(vec![read("old", false), read("new", false)]),
            &known,
            &Labels::ORDINALS,
        );
        assert!(f.is_empty(), "{f:?}");
        // The driver's create is judged the same way, and a create that
        // fails is the older app failing to write (its own code), not a
        // row left uncompared.
        let mut by_driver = write(vec![read("old", true), read("new", false)]);
        by_driver.writer = Writer::Driver;
        let f = rollout_write(3, &by_driver, &known, &Labels::ORDINALS);
        assert!(
            f[0].id == "compat.old-writes-invisible-to-new"
                && f[0]
                    .message
                    .contains("with its driver's create (the row id=7"),
            "{}",
            f[0].message
        );
        by_driver.written = Err("null value in column \"x\"".into());
        let f = rollout_write(3, &by_driver, &known, &Labels::ORDINALS);
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("compat.old-app-cannot-write", Severity::Error)
        );
        let mut by_statement = by_driver.clone();
        by_statement.writer = Writer::Statement("sell".into());
        let f = rollout_write(3, &by_statement, &known, &Labels::ORDINALS);
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("compat.rollout-write-not-compared", Severity::Skipped)
        );
    }

    #[test]
    fn safe_order_follows_the_windows() {
        let apps = apps();
        assert_eq!(
            safe_order(&[1, 2, 3], &apps, &Labels::ORDINALS),
            [
                "apply V1",
                "apply V2, then roll out the old app",
                "apply V3, then roll out the new app; the old app keeps working throughout",
            ]
        );
    }

    #[test]
    fn failing_statement_is_an_error_naming_app_statement_and_version() {
        let apps = apps();
        let o = Outcome {
            statement: "insert".into(),
            failure: Some((
                crate::app::replay::Step::Execute,
                "null value in column \"x\"".into(),
            )),
            ..Outcome::default()
        };
        let f = replay_findings(3, &apps[0], 3, &[o], &Labels::ORDINALS);
        assert_eq!(f[0].id, "compat.statement-fails");
        assert!(f[0]
            .message
            .contains("old app's `insert` fails on V3 at EXECUTE"));
    }
}

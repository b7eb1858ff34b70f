//! `static`: squawk's lint rules on each migration's text, before any
//! database is used, then each warning confirmed or refuted by what the
//! rehearsal measured for its statement.
//!
//! The warnings come from [`crate::lint`] (read while the databases are
//! prepared: how squawk is told the file runs, lines, statements, tables).
//!
//! `judge` then holds each warning against the measured apply of its
//! migration (at N rows, under the live apps' workload). Only rules whose
//! claim the rehearsal measures are judged (`MEASURED`); the others, and
//! warnings the rehearsal could not test (statement not reached, table
//! empty), stay warnings. Confirmed is an error: the same measurement is
//! what `rewrite`, `locks` or `apply` fail a run on, and this finding puts
//! squawk's fix at the line. Refuted is info.
//!
//! What it is not: a replacement for the measured checks. A migration
//! squawk is silent about is still rehearsed in full.

use std::collections::BTreeMap;

use crate::pg::lock_modes::{self, Needs};
use crate::report::{Finding, Severity};
use crate::verify::evidence::{
    Applied, Context, MigrationEvidence, RunEvidence, StatementRun, TableWork,
};

use crate::lint::{Warning, NOT_LINTED, SYNTAX_ERROR};

use super::phrases::blocking_locks;
use super::Check;

pub const CHECK: &str = "static";
pub const DESCRIPTION: &str =
    "squawk's lint rules on the migration's text, before any database; each warning confirmed or refuted by what its statement measured";

pub const ENTRY: Check = Check {
    name: CHECK,
    description: DESCRIPTION,
    ran: |_| true,
    evaluate,
    evaluate_run: Some(evaluate_run),
};

/// static's judgement of the run: a precheck that died is said, never
/// dropped silently.
pub fn evaluate_run(
    run: &RunEvidence,
    _: &BTreeMap<i32, MigrationEvidence>,
    _: &Context,
) -> Vec<Finding> {
    if run.lint_died {
        vec![not_run()]
    } else {
        Vec::new()
    }
}

/// static's judgement of one migration: its warnings held against the
/// apply that decided its fate (the seeded one, or the empty one that
/// failed), or unjudged when the rehearsal stopped before it (or, under
/// `--static-only`, never ran).
pub fn evaluate(e: &MigrationEvidence, cx: &Context) -> Vec<Finding> {
    if let Some(why) = &e.not_runnable {
        return vec![not_read(e, why, cx)];
    }
    if let Some(by) = &e.applied_by {
        return vec![applied_by_framework(e, by, cx)];
    }
    let Some(warnings) = &e.lint else {
        return Vec::new();
    };
    let judged = if e.failed_on_empty() {
        e.at_zero.as_ref()
    } else {
        e.seeded.as_ref().map(|s| &s.applied)
    };
    match judged {
        Some(applied) => {
            let left_empty = e.seeding.as_ref().map_or(&[][..], |s| &s.left_empty[..]);
            judge(e.version, warnings, applied, &e.needs, left_empty)
        }
        None => unjudged(
            e.version,
            warnings,
            cx.rehearsed
                .then_some("not reached: the rehearsal stopped before this migration"),
        ),
    }
}

/// What the rehearsal measures that speaks to a rule's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measured {
    /// Work that grows with the table (a rewrite, an index build, a full
    /// pass, rows written) while a lock that blocks the live apps is held
    /// on it: confirmed when both were measured, refuted when the table
    /// had rows and the work did not grow or the lock blocked no app.
    WorkUnderLock,
    /// PostgreSQL refuses the statement: confirmed when it failed there,
    /// refuted when it applied.
    Rejected,
    /// PostgreSQL refuses the statement on a table with rows: confirmed
    /// when it failed there, refuted when it applied on rows.
    RejectedWithRows,
}

/// The squawk rules the rehearsal can confirm or refute, and with what
/// measurement. Every other rule stays a warning: renames, drops and type
/// choices are about what clients expect, which `compat` replays, or
/// about the future, which nothing measures.
const MEASURED: &[(&str, Measured)] = &[
    // CREATE INDEX without CONCURRENTLY builds under SHARE: writes wait for
    // the whole build.
    ("require-concurrent-index-creation", Measured::WorkUnderLock),
    // ADD UNIQUE builds its index under ACCESS EXCLUSIVE.
    ("disallowed-unique-constraint", Measured::WorkUnderLock),
    // ADD PRIMARY KEY builds its index (and checks NOT NULL) under ACCESS
    // EXCLUSIVE.
    ("adding-serial-primary-key-field", Measured::WorkUnderLock),
    // A CHECK or FOREIGN KEY without NOT VALID reads every row under the
    // ADD's lock; a VALIDATE in the same transaction still holds it.
    ("constraint-missing-not-valid", Measured::WorkUnderLock),
    // A FOREIGN KEY checks every row under SHARE ROW EXCLUSIVE.
    ("adding-foreign-key-constraint", Measured::WorkUnderLock),
    // SET NOT NULL reads every row under ACCESS EXCLUSIVE, unless a
    // validated CHECK (IS NOT NULL) already proves it.
    ("adding-not-nullable-field", Measured::WorkUnderLock),
    // ALTER COLUMN TYPE rewrites every row under ACCESS EXCLUSIVE unless
    // the types are binary-compatible (what clients then read is compat's).
    ("changing-column-type", Measured::WorkUnderLock),
    // A volatile default or a stored generated column is computed for
    // every row: a rewrite under ACCESS EXCLUSIVE. (A constant default, as
    // in the shipped V3, is catalog-only since PostgreSQL 11 and squawk
    // does not flag it.)
    ("adding-field-with-default", Measured::WorkUnderLock),
    // NOT NULL without a default cannot be added to a table with rows.
    ("adding-required-field", Measured::RejectedWithRows),
    // CONCURRENTLY cannot run inside the transaction each migration runs in.
    (
        "ban-concurrent-index-creation-in-transaction",
        Measured::Rejected,
    ),
    // squawk's grammar could not parse it; the server has the last word.
    (SYNTAX_ERROR, Measured::Rejected),
];

fn measured(rule: &str) -> Option<Measured> {
    MEASURED.iter().find(|(r, _)| *r == rule).map(|(_, m)| *m)
}

/// The precheck's thread died: the rehearsal goes on without its warnings.
pub fn not_run() -> Finding {
    Finding::new(
        CHECK,
        "not-run",
        Severity::Skipped,
        None,
        "the static precheck could not run (its thread panicked: a bug in rollsafe); the rehearsal's measurements stand on their own",
    )
    .advice("report it with the migration files")
}

/// What the rehearsal established about one warning.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    /// Not judged: the static finding as squawk gives it.
    Static,
    Confirmed(String),
    Refuted(String),
    /// The rule is about something measured, but this rehearsal could not
    /// test it (why).
    Untested(String),
}

/// The findings of migration `v` from its warnings alone (`--static-only`,
/// or a migration the rehearsal did not reach: `not_reached` says why).
pub fn unjudged(v: i32, warnings: &[Warning], not_reached: Option<&str>) -> Vec<Finding> {
    if warnings.is_empty() {
        return vec![clean(v)];
    }
    warnings
        .iter()
        .map(|w| match not_reached {
            Some(why) if measured(&w.rule).is_some() => {
                finding(v, w, Verdict::Untested(why.to_string()))
            }
            _ => finding(v, w, Verdict::Static),
        })
        .collect()
}

/// The findings of migration `v`: each warning held against `applied`, the
/// migration's measured apply (failed or not), with `needs` saying which
/// locks block the live apps.
pub fn judge(
    v: i32,
    warnings: &[Warning],
    applied: &Applied,
    needs: &Needs,
    left_empty: &[String],
) -> Vec<Finding> {
    if warnings.is_empty() {
        return vec![clean(v)];
    }
    warnings
        .iter()
        .map(|w| {
            let (verdict, evidence) = verdict(w, applied, needs, left_empty);
            evidence
                .into_iter()
                .fold(finding(v, w, verdict), |f, (k, val)| f.evidence(k, val))
        })
        .collect()
}

/// A migration squawk read no SQL of (a goose Go migration): skipped,
/// naming the file and why, in every mode: `static.clean` is only ever
/// said of SQL squawk read.
fn not_read(e: &MigrationEvidence, why: &str, cx: &Context) -> Finding {
    Finding::new(
        CHECK,
        "not-read",
        Severity::Skipped,
        Some(e.version),
        format!(
            "{} ({}) {why}: squawk read no SQL in it, so nothing in it was checked",
            cx.labels.of(e.version),
            e.file
        ),
    )
    .evidence("file", e.file.clone())
    .advice("review it by hand; rehearse what it does from a database your tool migrated (--from-target <url>)")
}

/// A data migration its framework applies at rows (`by`): the SQL
/// squawk could read is what it sent to an empty database, not what it
/// runs on rows, so no verdict comes from it.
fn applied_by_framework(e: &MigrationEvidence, by: &str, cx: &Context) -> Finding {
    Finding::new(
        CHECK,
        "applied-by-framework",
        Severity::Skipped,
        Some(e.version),
        format!(
            "{} ({}) is a data migration applied at rows by {by}: what it sent to an empty database is not what it runs on rows, so squawk's reading of it is no verdict",
            cx.labels.of(e.version),
            e.file
        ),
    )
    .evidence("file", e.file.clone())
    .advice("review its code by hand; apply.applied-by-framework says what it did to the seeded rows")
}

fn clean(v: i32) -> Finding {
    Finding::new(
        CHECK,
        "clean",
        Severity::Info,
        Some(v),
        "squawk's default rules flag nothing in this migration",
    )
}

type Measurements = Vec<(&'static str, serde_json::Value)>;

/// `name` with its last part (the table, after any schema) in double
/// quotes, as `regclass` prints a name that needs them.
fn quoted_last_part(name: &str) -> String {
    match name.rsplit_once('.') {
        Some((schema, table)) => format!("{schema}.\"{table}\""),
        None => format!("\"{name}\""),
    }
}

fn verdict(
    w: &Warning,
    applied: &Applied,
    needs: &Needs,
    left_empty: &[String],
) -> (Verdict, Measurements) {
    let Some(kind) = measured(&w.rule) else {
        return (Verdict::Static, Vec::new());
    };
    let untested = |why: String| (Verdict::Untested(why), Vec::new());
    let Some(i) = w.statement else {
        return untested(
            "the file could not be split into statements, so this is not tied to one measurement"
                .into(),
        );
    };
    match applied.failed_statement {
        Some(k) if k < i => {
            return untested(format!(
                "not reached: the migration failed before it, at {}",
                applied.where_(k)
            ))
        }
        Some(k) if k == i => {
            let error = applied.error.clone().unwrap_or_default();
            return match kind {
                Measured::Rejected | Measured::RejectedWithRows => (
                    Verdict::Confirmed(format!("PostgreSQL rejected it: {error}")),
                    vec![(
                        "sqlstate",
                        applied.sqlstate.clone().unwrap_or_default().into(),
                    )],
                ),
                Measured::WorkUnderLock => {
                    untested(format!("it failed here ({error}): nothing to measure"))
                }
            };
        }
        _ => {}
    }
    let Some(st) = applied.statements.get(i) else {
        return untested("not reached by the rehearsal".into());
    };
    if kind == Measured::Rejected {
        return (Verdict::Refuted("PostgreSQL applied it".into()), Vec::new());
    }
    let Some(name) = &w.table else {
        return untested("its statement names no table rollsafe measures".into());
    };
    // The rehearsal keys a table as the server prints it (`"user"`, a
    // reserved word; `"Orders"`, mixed case), squawk names it unquoted.
    let Some(t) = applied
        .tables
        .get(name)
        .or_else(|| applied.tables.get(&quoted_last_part(name)))
    else {
        return (
            Verdict::Refuted(format!(
                "{name} is created in this migration: nothing to lock, no rows"
            )),
            vec![("table", name.clone().into())],
        );
    };
    if t.rows_before == 0 && left_empty.contains(name) {
        return (
            Verdict::Refuted(format!(
                "{name} was created by a migration deployed together with this one: it holds no rows in production when this one runs (rewrite.empty-in-deploy)"
            )),
            vec![("table", name.clone().into())],
        );
    }
    if t.rows_before == 0 {
        return untested(format!(
            "{name} held no rows in the rehearsal (neither the live apps nor the generator could write any: see rewrite.table-not-seeded), so work that grows with it could not show"
        ));
    }
    if kind == Measured::RejectedWithRows {
        return (
            Verdict::Refuted(format!("applied on {} rows of {name}", t.rows_before)),
            vec![
                ("table", name.clone().into()),
                ("rows", t.rows_before.into()),
            ],
        );
    }
    work_under_lock(st, t, needs)
}

/// A `WorkUnderLock` rule on statement `st` and its (existing, non-empty)
/// table `t`.
fn work_under_lock(st: &StatementRun, t: &TableWork, needs: &Needs) -> (Verdict, Measurements) {
    let name = &t.table;
    if let Some(why) = st.locks_unobserved() {
        // Outside a transaction: no sample saw its locks.
        return (
            Verdict::Untested(format!("it ran outside a transaction and {why}")),
            Vec::new(),
        );
    }
    let w = st.work.get(name).copied().unwrap_or_default();
    let rewrote = st.rewrote.contains(name);
    let indexes: Vec<&str> = st
        .built_indexes
        .iter()
        .filter(|(table, _)| table == name)
        .map(|(_, index)| index.as_str())
        .collect();
    let held = st
        .locks_after
        .get(name)
        .and_then(|m| lock_modes::strongest(m.iter().map(String::as_str)))
        .map(str::to_string);
    let blocking = blocking_locks(st, needs)
        .into_iter()
        .find(|(table, _, _)| table == name);
    let evidence: Measurements = vec![
        ("table", name.clone().into()),
        ("rows", t.rows_before.into()),
        ("pages", t.pages_before.into()),
        ("relfilenode_changed", rewrote.into()),
        ("indexes_built", indexes.join(", ").into()),
        ("tuples_read", w.tuples_read.into()),
        ("rows_written", w.rows_written().into()),
        ("heap_blocks", w.heap_blocks.into()),
        (
            "lock",
            held.as_deref()
                .map(lock_modes::sql_name)
                .unwrap_or_default()
                .into(),
        ),
    ];
    let rows = t.rows_before;
    let what = if rewrote {
        format!("{rows} rows of {name} rewritten")
    } else if !indexes.is_empty() {
        format!(
            "index {} built over {rows} rows of {name}",
            indexes.join(", ")
        )
    } else if w.rows_written() > 0 {
        format!("{} rows of {name} written one by one", w.rows_written())
    } else if w.tuples_read > 0 {
        format!("{} rows of {name} scanned", w.tuples_read)
    } else if st.grows_on(t) {
        format!("all {} pages of {name} read", t.pages_before)
    } else {
        return (
            Verdict::Refuted(format!(
                "nothing grew with the {rows} rows of {name}: no rewrite, no index build, no full pass, no row written"
            )),
            evidence,
        );
    };
    let verdict = match (blocking, held) {
        (Some((_, mode, blocks)), _) => Verdict::Confirmed(format!(
            "{what} under {} (blocks its {blocks})",
            lock_modes::sql_name(&mode)
        )),
        (None, Some(mode)) => Verdict::Refuted(format!(
            "{what} under {}, which blocks none of the live apps' statements on {name}",
            lock_modes::sql_name(&mode)
        )),
        (None, None) => Verdict::Refuted(format!("{what} with no lock held on {name}")),
    };
    (verdict, evidence)
}

fn finding(v: i32, w: &Warning, verdict: Verdict) -> Finding {
    let (severity, message, label) = match &verdict {
        Verdict::Static => (Severity::Warn, w.message.clone(), "static"),
        Verdict::Confirmed(m) => (Severity::Error, format!("confirmed: {m}"), "confirmed"),
        Verdict::Refuted(m) => (Severity::Info, format!("refuted: {m}"), "refuted"),
        Verdict::Untested(why) => (
            Severity::Warn,
            format!("{} (untested: {why})", w.message),
            "untested",
        ),
    };
    let mut f = Finding::new(CHECK, &w.rule, severity, Some(v), message)
        .at(Some(w.location.clone()))
        .evidence("rule", w.rule.clone())
        .evidence("verdict", label)
        .evidence("flagged", w.flagged.clone());
    if !matches!(verdict, Verdict::Static | Verdict::Untested(_)) {
        f = f.evidence("squawk", w.message.clone());
    }
    if !matches!(verdict, Verdict::Refuted(_)) {
        let docs = format!("https://squawkhq.com/docs/{}", w.rule);
        f = f.advice(match (&w.help, w.rule.as_str()) {
            (Some(h), SYNTAX_ERROR | NOT_LINTED) => h.clone(),
            (Some(h), _) => format!("{h} ({docs})"),
            (None, _) => format!("see {docs}"),
        });
    }
    f
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    #[test]
    fn a_name_is_quoted_as_regclass_prints_it() {
        assert_eq!(super::quoted_last_part("user"), "\"user\"");
        assert_eq!(super::quoted_last_part("crm.Orders"), "crm.\"Orders\"");
    }

    use super::*;
    use crate::lint::lint;
    use crate::lint::tests::{rules, FILE};
    use crate::verify::evidence::Work;

    #[test]
    fn violations_point_at_their_line_statement_and_table() {
        let sql = "\
-- V4: three statements
CREATE INDEX customer_addresses_name ON customer_addresses (name);

ALTER TABLE customer_addresses
    ALTER COLUMN name SET NOT NULL;
ALTER TABLE public.collections ADD CONSTRAINT c CHECK (name <> '');
";
        let ws = lint(FILE, sql, true);
        assert_eq!(
            rules(&ws),
            [
                "require-concurrent-index-creation",
                "adding-not-nullable-field",
                "constraint-missing-not-valid"
            ],
            "{ws:#?}"
        );
        let at: Vec<_> = ws
            .iter()
            .map(|w| {
                (
                    w.location.line,
                    w.location.column,
                    w.statement,
                    w.table.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            at,
            [
                (2, 1, Some(0), Some("customer_addresses")),
                // The construct, not the statement's first line.
                (5, 23, Some(1), Some("customer_addresses")),
                (6, 32, Some(2), Some("collections")),
            ]
        );
        assert_eq!(ws[1].flagged, "SET NOT NULL");
        assert_eq!(
            ws[1].location.excerpt,
            "ALTER TABLE customer_addresses ALTER COLUMN name SET NOT NU…"
        );
        assert_eq!(ws[0].location.file, FILE);
        assert!(ws[0].help.as_deref().unwrap().contains("concurrently"));

        let findings = unjudged(4, &ws, None);
        assert!(findings
            .iter()
            .all(|f| f.severity == Severity::Warn && f.check == CHECK && f.location.is_some()));
        assert_eq!(findings[0].id, "static.require-concurrent-index-creation");
        assert!(findings[0]
            .advice
            .contains("squawkhq.com/docs/require-concurrent-index-creation"));
    }

    #[test]
    fn a_file_squawk_cannot_take_is_at_most_a_warning() {
        for sql in [
            "",
            ";",
            "\u{feff}",
            "é;ü",
            "/*",
            "$$",
            "BEGIN ATOMIC",
            "\\x",
        ] {
            let f = unjudged(1, &lint(FILE, sql, true), None);
            assert!(f.iter().all(|f| f.severity <= Severity::Warn), "{sql:?}");
        }
    }

    fn table(name: &str, rows: i64) -> (String, TableWork) {
        (
            name.to_string(),
            TableWork {
                table: name.to_string(),
                rows_before: rows,
                pages_before: rows / 100,
                ..TableWork::default()
            },
        )
    }

    fn locks(table: &str, mode: &str) -> BTreeMap<String, Vec<String>> {
        BTreeMap::from([(table.to_string(), vec![mode.to_string()])])
    }

    /// A measured apply of the three-statement file of the first test, at
    /// 10 000 rows: an index build, a full pass for SET NOT NULL, and a
    /// CHECK on a table whose work did not grow.
    fn applied() -> Applied {
        let af = "customer_addresses";
        Applied {
            tables: BTreeMap::from([table(af, 10_000), table("collections", 500)]),
            statements: vec![
                StatementRun {
                    locks_after: locks(af, "ShareLock"),
                    built_indexes: vec![(af.into(), "customer_addresses_name".into())],
                    ..StatementRun::default()
                },
                StatementRun {
                    locks_after: locks(af, "AccessExclusiveLock"),
                    work: BTreeMap::from([(
                        af.to_string(),
                        Work {
                            tuples_read: 10_000,
                            heap_blocks: 100,
                            ..Work::default()
                        },
                    )]),
                    ..StatementRun::default()
                },
                StatementRun {
                    locks_after: locks("collections", "AccessExclusiveLock"),
                    ..StatementRun::default()
                },
            ],
            split_exact: true,
            file: FILE.into(),
            ..Applied::default()
        }
    }

    fn three() -> Vec<Warning> {
        lint(
            FILE,
            "CREATE INDEX customer_addresses_name ON customer_addresses (name);\n\
             ALTER TABLE customer_addresses ALTER COLUMN name SET NOT NULL;\n\
             ALTER TABLE collections ADD CONSTRAINT c CHECK (name <> '');",
            true,
        )
    }

    #[test]
    fn measured_work_under_a_blocking_lock_confirms_and_its_absence_refutes() {
        let f = judge(4, &three(), &applied(), &Needs::unknown(), &[]);
        let got: Vec<_> = f
            .iter()
            .map(|f| (f.id.as_str(), f.severity, f.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "static.require-concurrent-index-creation",
                    Severity::Error,
                    "confirmed: index customer_addresses_name built over 10000 rows of customer_addresses under SHARE (blocks its writes)"
                ),
                (
                    "static.adding-not-nullable-field",
                    Severity::Error,
                    "confirmed: 10000 rows of customer_addresses scanned under ACCESS EXCLUSIVE (blocks its reads and writes)"
                ),
                (
                    "static.constraint-missing-not-valid",
                    Severity::Info,
                    "refuted: nothing grew with the 500 rows of collections: no rewrite, no index build, no full pass, no row written"
                ),
            ]
        );
        assert_eq!(f[1].evidence["tuples_read"], 10_000);
        assert_eq!(f[1].evidence["lock"], "ACCESS EXCLUSIVE");
        assert_eq!(f[1].evidence["verdict"], "confirmed");
        assert_eq!(f[1].location.as_ref().unwrap().line, 2);
        assert!(f[1].evidence["squawk"]
            .as_str()
            .unwrap()
            .contains("blocks reads"));
        assert!(f[2].advice.is_empty());

        // No live app writes customer_addresses: SHARE blocks nobody.
        let mut readers = Needs::default();
        readers.add("customer_addresses", "AccessShareLock");
        let f = judge(4, &three(), &applied(), &readers, &[]);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].message.ends_with(
                "under SHARE, which blocks none of the live apps' statements on customer_addresses"
            ),
            "{}",
            f[0].message
        );
        assert_eq!(f[1].severity, Severity::Error);
    }

    #[test]
    fn new_or_empty_tables_and_unreached_statements_are_judged_apart() {
        // Created in this migration: not among the tables that existed.
        let mut a = applied();
        a.tables.remove("customer_addresses");
        let f = judge(4, &three(), &a, &Needs::unknown(), &[]);
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(
            f[0].message,
            "refuted: customer_addresses is created in this migration: nothing to lock, no rows"
        );

        // Existing but empty in the rehearsal: untested, still a warning.
        let mut a = applied();
        a.tables.insert(
            "customer_addresses".into(),
            table("customer_addresses", 0).1,
        );
        let f = judge(4, &three(), &a, &Needs::unknown(), &[]);
        assert_eq!(f[0].severity, Severity::Warn);
        assert!(f[0]
            .message
            .contains("(untested: customer_addresses held no rows"));
        assert_eq!(f[0].evidence["verdict"], "untested");

        // The migration failed at its second statement: the third was not
        // reached, the second could not be measured.
        let mut a = applied();
        a.error = Some("line 2: boom".into());
        a.failed_statement = Some(1);
        a.statements.truncate(2);
        a.statements[1].line = 2;
        a.statements[1].excerpt = "ALTER TABLE customer_addresses".into();
        let f = judge(4, &three(), &a, &Needs::unknown(), &[]);
        assert_eq!(
            f.iter().map(|f| f.severity).collect::<Vec<_>>(),
            [Severity::Error, Severity::Warn, Severity::Warn]
        );
        assert!(f[1].message.contains("untested: it failed here"));
        assert!(f[2]
            .message
            .contains("untested: not reached: the migration failed before it, at line 2"));

        // Rules the rehearsal does not measure stay plain warnings.
        let ws = lint(
            FILE,
            "ALTER TABLE customer_addresses DROP COLUMN name;",
            true,
        );
        assert_eq!(rules(&ws), ["ban-drop-column"]);
        let f = judge(4, &ws, &applied(), &Needs::unknown(), &[]);
        assert_eq!(
            (f[0].severity, f[0].message.as_str()),
            (Severity::Warn, ws[0].message.as_str())
        );
        assert_eq!(f[0].evidence["verdict"], "static");
    }

    #[test]
    fn rejections_are_confirmed_by_a_failure_and_refuted_by_an_apply() {
        let ws = lint(
            FILE,
            "SELECT 1;\nCREATE INDEX CONCURRENTLY i ON customer_addresses (name);",
            true,
        );
        // In file order: the statement, then its CONCURRENTLY.
        assert_eq!(
            rules(&ws),
            [
                "prefer-robust-stmts",
                "ban-concurrent-index-creation-in-transaction"
            ]
        );
        let failed = Applied {
            error: Some(
                "line 2: CREATE INDEX CONCURRENTLY cannot run inside a transaction block".into(),
            ),
            sqlstate: Some("25001".into()),
            failed_statement: Some(1),
            statements: vec![StatementRun::default(), StatementRun::default()],
            split_exact: true,
            ..Applied::default()
        };
        let f = judge(4, &ws, &failed, &Needs::unknown(), &[]);
        assert_eq!(f[1].severity, Severity::Error);
        assert!(f[1]
            .message
            .starts_with("confirmed: PostgreSQL rejected it: line 2: CREATE INDEX CONCURRENTLY"));
        assert_eq!(f[1].evidence["sqlstate"], "25001");
        assert_eq!(f[0].severity, Severity::Warn);

        let ws = lint(
            FILE,
            "ALTER TABLE customer_addresses ADD COLUMN n bigint NOT NULL;",
            true,
        );
        assert_eq!(rules(&ws), ["adding-required-field"]);
        let f = judge(4, &ws, &applied(), &Needs::unknown(), &[]);
        assert_eq!(
            (f[0].severity, f[0].message.as_str()),
            (
                Severity::Info,
                "refuted: applied on 10000 rows of customer_addresses"
            )
        );
    }

    #[test]
    fn every_measured_rule_is_a_squawk_rule() {
        for (rule, _) in MEASURED {
            if *rule != SYNTAX_ERROR {
                assert!(
                    squawk_linter::Rule::try_from(*rule).is_ok(),
                    "{rule} is not a squawk 2.68 rule"
                );
            }
        }
        assert!(unjudged(3, &[], None)[0].id == "static.clean");
    }
}

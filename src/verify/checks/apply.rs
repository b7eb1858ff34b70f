//! `apply`: the migration applies cleanly on an empty database and on one
//! seeded with the live apps' rows, and a failure leaves no trace.
//!
//! A migration that only works on an empty database (a NOT NULL column
//! without a default, a unique index the data violates) passes every test
//! that builds tables from scratch and fails in production; the seeded run
//! is what catches it. "No trace" is proven by failing the migration on
//! purpose at its very end and comparing the schema with the one before.
//! "A second run is a no-op" runs `rollsafe migrate` up to the migration
//! twice: the second run applies nothing and changes nothing.

use std::time::Duration;

use crate::report::{Finding, Severity};
use crate::verify::evidence::{
    Applied, Context, ExternalRun, Labels, MigrationEvidence, RunEvidence, SecondRun, Unreached,
};

use super::phrases::ms;
use super::Check;
use crate::migrate::way_out;

/// SQLSTATE of a deadlock the server broke.
const DEADLOCK: &str = "40P01";

pub const CHECK: &str = "apply";
pub const DESCRIPTION: &str =
    "applies cleanly on an empty and on a seeded database; a second run is a no-op; a failure leaves no trace";

pub const ENTRY: Check = Check {
    name: CHECK,
    description: DESCRIPTION,
    ran: |e| e.at_zero.is_some(),
    evaluate,
    evaluate_run: Some(evaluate_run),
};

/// apply's judgement of the run: `--since` that left nothing to rehearse.
pub fn evaluate_run(
    run: &RunEvidence,
    evidence: &std::collections::BTreeMap<i32, MigrationEvidence>,
    cx: &Context,
) -> Vec<Finding> {
    let mut out = match (cx.rehearsed, run.reached, run.stopped_at, run.since) {
        (true, 0, None, Some(since)) => vec![nothing_rehearsed(since, &cx.labels)],
        _ => Vec::new(),
    };
    for (versions, failed) in &run.shared_runs {
        out.extend(
            failed
                .as_ref()
                .and_then(|f| fails_in_shared_transaction(versions, f, evidence, cx)),
        );
    }
    out
}

/// `fails-in-shared-transaction`: a run of migrations production sends in
/// one transaction failed as one, at a migration that applied in a
/// transaction of its own on the empty path (one that fails alone is
/// `fails-on-empty`'s). Only what an earlier migration of the same
/// transaction left uncommitted explains it.
fn fails_in_shared_transaction(
    versions: &[i32],
    f: &crate::verify::evidence::SharedRunFailure,
    evidence: &std::collections::BTreeMap<i32, MigrationEvidence>,
    cx: &Context,
) -> Option<Finding> {
    let e = evidence.get(&f.version)?;
    if e.failed_on_empty() || e.at_zero.is_none() {
        return None;
    }
    let earlier: Vec<String> = versions
        .iter()
        .take_while(|v| **v != f.version)
        .map(|v| cx.labels.of(*v))
        .collect();
    if earlier.is_empty() {
        return None;
    }
    let how = versions
        .iter()
        .filter_map(|v| evidence.get(v)?.shares_transaction.clone())
        .next()
        .unwrap_or_default();
    Some(
        Finding::new(
            CHECK,
            "fails-in-shared-transaction",
            Severity::Error,
            Some(f.version),
            format!(
                "line {}: {}: fails when sent in one transaction after {} ({how}): {}; in a transaction of its own it applies, so it is what the earlier migration left uncommitted that fails it",
                f.line,
                f.statement,
                earlier.join(", "),
                f.message
            ),
        )
        .at(Some(crate::report::Location {
            file: f.file.clone(),
            line: f.line,
            column: f.column,
            excerpt: f.statement.clone(),
        }))
        .evidence("sent_with", earlier.join(", "))
        .evidence("error", f.message.clone())
        .advice("let the earlier migration commit first: deploy it on its own, have the tool commit each migration (Alembic: `transaction_per_migration=True` in env.py's `context.configure`), or fold what the later one needs into a later deploy (an enum value added in a transaction cannot be used before it commits)"),
    )
}

/// apply's judgement of one migration: the kill-and-rerun of a file
/// outside a transaction, the applies (the empty path's failure alone, or
/// both paths once the seeded one ran), and the migrator's second run
/// (nothing after a failure on an empty database speaks for it).
pub fn evaluate(e: &MigrationEvidence, cx: &Context) -> Vec<Finding> {
    let unreached = e
        .unreached
        .map(|(failed, what)| not_rehearsed(e.version, failed, what, &cx.labels));
    let Some(at_zero) = &e.at_zero else {
        return unreached.into_iter().collect();
    };
    let v = e.version;
    let mut out = Vec::new();
    if let Some(r) = &e.rerun {
        out.extend(evaluate_rerun(
            v,
            &r.applied,
            &r.changed,
            (r.killed_after, r.statements, r.line),
        ));
    }
    // Stage 2 judges both paths; a failure on the empty path is judged
    // alone (the seeded one is never reached).
    let seeded = e.seeded.as_ref().map(|s| (&s.applied, s.rows));
    let first = out.len();
    if e.failed_on_empty() || seeded.is_some() {
        out.extend(on_both_paths(
            v,
            at_zero,
            seeded
                .filter(|_| !e.failed_on_empty())
                .map(|(a, rows)| (a, rows, RowsBy::of(e))),
            &e.failure_trace,
            cx.statement_timeout,
        ));
    }
    // Rows seeded past a table's triggers may hold values production's
    // triggers refuse: a failure on them says so.
    let past: Vec<&str> = e
        .seeding
        .iter()
        .filter_map(|s| s.generated.as_ref())
        .flat_map(|g| &g.seeded)
        .filter(|t| t.past_triggers.is_some())
        .map(|t| t.table.as_str())
        .collect();
    if !past.is_empty() {
        for f in out[first..]
            .iter_mut()
            .filter(|f| f.id == "apply.fails-on-seeded")
        {
            f.message.push_str(&format!(
                " (the rows of {} were seeded past their INSERT triggers, see rewrite.seeded-past-triggers: they may hold values the triggers refuse in production)",
                past.join(", ")
            ));
        }
    }
    if let (false, Some(x)) = (e.failed_on_empty(), &e.external) {
        out.push(applied_by_framework(v, x, RowsBy::of(e)));
    }
    if let (false, Some(r)) = (e.failed_on_empty(), &e.second_run) {
        out.push(evaluate_second_run(Some(v), r));
    }
    if let Some(s) = &e.verify_script {
        out.push(evaluate_verify_script(v, s));
    }
    out.extend(unreached);
    out
}

/// How many of a failing command's last lines a finding's message
/// quotes (all of them are its evidence).
const QUOTED_LINES: usize = 5;

/// A data migration its framework applied on the seeded database (`x`):
/// the command, the rows it changed and its time; or, when it failed
/// there, an error with the command's last lines.
pub fn applied_by_framework(v: i32, x: &ExternalRun, rows_by: RowsBy) -> Finding {
    if let Some(beyond) = &x.applied_beyond {
        let failed = match &x.failed {
            Some((status, _)) => format!(", then failed ({status})"),
            None => String::new(),
        };
        // Not this migration's doing past its own: the rows after it are
        // not judged as its (the next migration starts from rows seeded
        // anew).
        return Finding::new(
            CHECK,
            "applied-by-framework",
            Severity::Skipped,
            Some(v),
            format!(
                "a data migration: {} itself (`{}`) did more than apply it on the database with {} rows{failed}: {beyond} (a project whose code migrates to its newest version whenever it starts does this), so what it did at rows is not this migration's alone and is not judged; the next migration is rehearsed on rows seeded anew",
                x.by, x.command, x.rows
            ),
        )
        .evidence("command", x.command.clone())
        .evidence("rows", x.rows)
        .evidence("applied_beyond", beyond.clone())
        .advice("review the data migration by hand; to rehearse it at rows, make the project's start-up leave migrating to the migrate command (a setting that turns its own upgrade off), and pass that with --migrate-command");
    }
    let Some((status, output)) = &x.failed else {
        let changed = match (&x.changed, x.changed_phrase()) {
            (_, Some(phrase)) => format!("it changed {phrase}"),
            (Err(why), None) => format!("the rows it changed were not measured ({why})"),
            (Ok(_), None) => String::new(),
        };
        let total: i64 = x
            .changed
            .iter()
            .flatten()
            .map(|c| c.inserted + c.updated + c.deleted)
            .sum();
        return Finding::new(
            CHECK,
            "applied-by-framework",
            Severity::Info,
            Some(v),
            format!(
                "a data migration, applied on a database with {} rows by {} itself (`{}`) in {:.0} ms: {changed}",
                x.rows,
                x.by,
                x.command,
                ms(x.took)
            ),
        )
        .evidence("command", x.command.clone())
        .evidence("rows", x.rows)
        .evidence("command_ms", ms(x.took))
        .evidence("rows_changed", total);
    };
    let shown: Vec<&str> = output
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    let tail = &shown[shown.len().saturating_sub(QUOTED_LINES)..];
    let ends = match tail.is_empty() {
        true => String::new(),
        false => format!("; its output ends: {}", tail.join(" | ")),
    };
    Finding::new(
        CHECK,
        "fails-on-seeded",
        Severity::Error,
        Some(v),
        format!(
            "a data migration: applied by {} itself (`{}`) on a database with {} rows {}, it failed ({status}){ends}",
            x.by,
            x.command,
            x.rows,
            rows_by.phrase()
        ),
    )
    .evidence("command", x.command.clone())
    .evidence("rows", x.rows)
    .evidence("output", output.clone())
    .advice(match rows_by {
        // Values the schema allows that an app's own rules keep out of
        // production (a validator, not a CHECK) can fail it here.
        RowsBy::Generator | RowsBy::AppsAndGenerator => "the rows hold values the schema allows, not production's: production's rows can hold them too unless something the schema does not state keeps them out (an app's validator). Make the data migration handle every value its columns allow, or state the rule in the schema (a CHECK constraint: the generator honours it); and run it the same way against a copy of production before the deploy",
        RowsBy::Apps => "a data migration meets every row production holds: make it handle each one (a row its query leaves out, a value it does not expect), and run it the same way against a copy of production before the deploy",
    })
}

/// The project's verify script (Sqitch) after the change: its failure
/// means the change did not do what the project itself checks for.
pub fn evaluate_verify_script(v: i32, s: &crate::verify::evidence::VerifyScript) -> Finding {
    match &s.error {
        None => Finding::new(
            CHECK,
            "verify-script-passes",
            Severity::Info,
            Some(v),
            format!("{} passes after the change", s.file),
        ),
        Some(e) => Finding::new(
            CHECK,
            "verify-script-fails",
            Severity::Error,
            Some(v),
            format!("{} fails after the change: {e}", s.file),
        )
        .advice("the change does not do what its verify script checks: fix the deploy script (or the verify script, if its check is what is wrong)"),
    }
}

/// A migration rollsafe cannot run (`why`: a goose Go migration) at
/// `label` (`file`): it and the `later` migrations after it, whose schema
/// depends on it, are not rehearsed.
pub fn not_runnable(v: i32, label: &str, file: &str, why: &str, later: usize) -> Finding {
    Finding::new(
        CHECK,
        "not-runnable",
        Severity::Skipped,
        Some(v),
        format!(
            "{label} ({file}) {why}: it and the {later} migration(s) after it were not rehearsed (their schema builds on it)"
        ),
    )
    .evidence("file", file.to_string())
    .evidence("later_migrations", later)
    .advice(format!(
        "rehearse from a database that already holds {label}: --from-target <url of a database migrated by your tool>, or --since {label} (or later) when nothing after it needs what it creates"
    ))
}

/// A migration rollsafe cannot run inside the `--since` base: left out of
/// it, so what the rehearsed migrations find is the base without it.
pub fn not_in_base(v: i32, label: &str, file: &str, why: &str) -> Finding {
    Finding::new(
        CHECK,
        "not-runnable-in-base",
        Severity::Warn,
        Some(v),
        format!("{label} ({file}) {why}: the base the rehearsal starts from (--since) does not hold what it does; a later failure on an object it creates comes from its absence"),
    )
    .evidence("file", file.to_string())
    .advice("rehearse from a database that already holds it: --from-target <url of a database migrated by your tool>")
}

/// The tool's history table refused the rows that say what the `--since`
/// base holds (`why`: a guard of the project's own, such as a trigger
/// that lets only its runner write): the base is not recorded there, and
/// the migrator's second run, which reads those rows, is not rehearsed.
pub fn base_history_refused(table: &str, why: &str) -> Finding {
    Finding::new(
        CHECK,
        "base-history-refused",
        Severity::Skipped,
        None,
        format!(
            "{table} refused the rows of the migrations in the base ({why}): they were not written, so `rollsafe migrate`'s second run, which reads them, was not rehearsed; every other check ran on the base as its migrations leave it"
        ),
    )
    .evidence("history_table", table.to_string())
    .advice("nothing to fix for the rehearsal: the history table is bookkeeping; a guard that lets only your runner write it also keeps `rollsafe migrate` out, so apply with your runner")
}

/// A framework's project: `rollsafe migrate`'s runs (a second run is a
/// no-op, the migrator's own refusals) were not rehearsed, since the
/// project deploys with its framework's migrate. Info, not skipped: the
/// check does not apply to such a project, nothing was left unmeasured.
pub fn migrator_not_rehearsed() -> Finding {
    Finding::new(
        CHECK,
        "migrator-not-rehearsed",
        Severity::Info,
        None,
        "`rollsafe migrate` was not rehearsed: the project deploys with its framework's migrate, which keeps its own history and applies each migration once; `rollsafe migrate` reads SQL folders, not a framework's project",
    )
    .advice("nothing to fix: deploy with the framework's migrate; every other check ran on the migrations as it sends them")
}

/// With a migration rollsafe cannot run left out of the `--since` base
/// (`not-runnable-in-base`), a later migration failing on the empty
/// database may fail on what that one creates: the failure is `skipped`,
/// naming it, not an error it cannot be told apart from.
pub fn without_what_the_base_left_out(findings: &mut [Finding]) {
    let Some(left_out) = findings
        .iter()
        .find(|f| f.id == "apply.not-runnable-in-base")
        .and_then(|f| f.evidence.get("file"))
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
    else {
        return;
    };
    for f in findings
        .iter_mut()
        .filter(|f| FAILS_ON_EMPTY.contains(&f.id.as_str()) && f.severity == Severity::Error)
    {
        f.severity = Severity::Skipped;
        f.message = format!(
            "not judged: {} (the base the rehearsal starts from lacks {left_out}, which rollsafe cannot run, and this may fail on what it creates)",
            f.message
        );
        f.advice = format!("rehearse from a database that already holds {left_out}: --from-target <url of a database migrated by your tool>");
    }
}

/// `--since` left nothing to rehearse.
pub fn nothing_rehearsed(since: i32, labels: &Labels) -> Finding {
    let since_label = labels.of(since);
    Finding::new(
        CHECK,
        "nothing-rehearsed",
        Severity::Skipped,
        None,
        format!("every migration is at or before --since {since_label}: none was rehearsed"),
    )
    .advice("pass the version before the first migration you want judged")
}

/// Migration `v` was not rehearsed (or not on rows, `unreached`) because
/// migration `failed` before it stopped the rehearsal: skipped, saying so.
pub fn not_rehearsed(v: i32, failed: i32, unreached: Unreached, labels: &Labels) -> Finding {
    let failed_label = labels.of(failed);
    let (message, advice) = match unreached {
        Unreached::Everything => (
            format!(
                "not rehearsed: the rehearsal stopped at {failed_label}, before it (see {failed_label}'s errors)"
            ),
            format!(
                "fix {failed_label} and run again: a migration after a failing one cannot be reached as production would reach it"
            ),
        ),
        Unreached::AfterNotRunnable => (
            format!(
                "not rehearsed: rollsafe cannot run {failed_label}, before it, and its schema builds on that one (see {failed_label}'s apply.not-runnable)"
            ),
            format!(
                "rehearse from a database that already holds {failed_label}: --from-target <url of a database migrated by your tool>"
            ),
        ),
    };
    Finding::new(CHECK, "not-rehearsed", Severity::Skipped, Some(v), message)
        .evidence("stopped_at", failed)
        .evidence("unreached", crate::report::UNREACHED)
        .advice(advice)
}

/// The findings that say a migration did not apply on an empty database
/// (its later measurements are then moot).
pub const FAILS_ON_EMPTY: [&str; 3] = [
    "apply.fails-on-empty",
    "apply.needs-superuser",
    "apply.statement-timeout",
];

/// SQLSTATE 42501 insufficient_privilege.
const INSUFFICIENT_PRIVILEGE: &str = "42501";
/// SQLSTATE 57014 query_canceled: the statement timeout, or rollsafe's
/// watchdog when the migration turned the timeout off.
const QUERY_CANCELED: &str = "57014";

/// What a statement refused for want of privilege needed, from the
/// server's message: the predefined role or superuser power a migrator
/// that is not a superuser lacks.
fn what_it_needed(message: &str) -> &'static str {
    let m = message.to_lowercase();
    if m.contains("program") {
        "pg_execute_server_program (COPY … PROGRAM runs a command on the database server's machine)"
    } else if m.contains("to a file") || m.contains("pg_write_server_files") {
        "pg_write_server_files (COPY … TO a file writes on the database server's machine)"
    } else if m.contains("from a file")
        || m.contains("pg_read_server_files")
        || m.contains("pg_read_file")
        || m.contains("pg_read_binary_file")
        || m.contains("pg_ls_dir")
        || m.contains("pg_stat_file")
    {
        "pg_read_server_files (reads files on the database server's machine)"
    } else if m.contains("alter system") {
        "superuser (ALTER SYSTEM changes the server's configuration)"
    } else if m.contains("language") {
        "superuser (functions in an untrusted language run code in the server's process)"
    } else if m.contains("for schema") {
        "USAGE and CREATE on a schema another role owns (one made outside the history belongs to whoever made it)"
    } else if m.contains("create role") {
        "CREATEROLE (a role is the server's, not the database's)"
    } else if m.contains("extension") {
        "superuser (an untrusted extension)"
    } else {
        "a privilege the database's owner role does not have (superuser, or a grant)"
    }
}

/// SQLSTATE 2BP01 dependent_objects_still_exist.
const DEPENDENT_OBJECTS: &str = "2BP01";

/// The role a refused `DROP ROLE` names: `role "x" cannot be dropped
/// because some objects depend on it`.
fn role_still_depended_on(message: &str) -> Option<&str> {
    let rest = message.split("role \"").nth(1)?;
    let (role, tail) = rest.split_once('"')?;
    tail.starts_with(" cannot be dropped because some objects depend on it")
        .then_some(role)
}

/// A migration's failure that is not the SQL's fault but the rehearsal's
/// rules: it needed more than the owner role has (`apply.needs-superuser`),
/// ran past the statement timeout (`apply.statement-timeout`), or dropped
/// a role the rehearsal's other copies of the database still grant to
/// (`apply.role-shared-by-copies`, skipped), or created an extension the
/// sandbox's server does not have installed (`apply.extension-not-in-sandbox`,
/// skipped). None for any other failure.
fn refused(v: i32, applied: &Applied, error: &str, statement_timeout: Duration) -> Option<Finding> {
    let at = applied.failed_statement.and_then(|i| applied.location(i));
    let statement = applied
        .failed_statement
        .map_or("the migration".to_string(), |i| applied.where_(i));
    match applied.sqlstate.as_deref() {
        Some(INSUFFICIENT_PRIVILEGE) => {
            let needed = what_it_needed(error);
            Some(
                Finding::new(
                    CHECK,
                    "needs-superuser",
                    Severity::Error,
                    Some(v),
                    format!(
                        "{statement} needs {needed}, which the migrator role (the databases' owner, not a superuser) does not have: {error}"
                    ),
                )
                .at(at)
                .evidence("sqlstate", INSUFFICIENT_PRIVILEGE)
                .evidence("needed", needed)
                .advice(
                    crate::migrate::way_out::advice(Some(INSUFFICIENT_PRIVILEGE), error, None)
                        .filter(|_| error.contains("for schema"))
                        .unwrap_or_else(|| "a managed database's owner role cannot run it either: have a DBA run it by hand, outside the migrations, or, if your production migrator really is a superuser, rehearse with --migrator-superuser".into()),
                ),
            )
        }
        // A role is the server's: every copy of the database the
        // rehearsal made after the role's migration (the paths it
        // compares) holds that migration's grants to it, and PostgreSQL
        // refuses the drop while any database does. Production has one
        // database: whether this one alone would let the role go is not
        // something the rehearsal can show, so it is not judged.
        Some(DEPENDENT_OBJECTS) if role_still_depended_on(error).is_some() => {
            let role = role_still_depended_on(error).unwrap_or_default();
            Some(
                Finding::new(
                    CHECK,
                    "role-shared-by-copies",
                    Severity::Skipped,
                    Some(v),
                    format!(
                        "{statement} could not be rehearsed: role {role} is the server's, and the rehearsal's other copies of the database still hold grants to it, so PostgreSQL refused the drop here ({error}); later migrations are not rehearsed"
                    ),
                )
                .at(at)
                .evidence("sqlstate", DEPENDENT_OBJECTS)
                .evidence("role", role)
                .advice(format!("make sure the migration revokes everything {role} holds in this database first (REVOKE …, or DROP OWNED BY {role} before DROP ROLE), as production's single database needs; to rehearse what follows, use --since past this migration")),
            )
        }
        // The extension's files are the server's, not the migration's: a
        // sandbox built from a plain image lacks what production installed
        // (timescaledb, postgis). Whether production has it is not
        // something the rehearsal can show, so it is not judged.
        _ if way_out::missing_extension(applied.sqlstate.as_deref(), error).is_some() => {
            let name = way_out::missing_extension(applied.sqlstate.as_deref(), error).unwrap_or_default();
            Some(
                Finding::new(
                    CHECK,
                    "extension-not-in-sandbox",
                    Severity::Skipped,
                    Some(v),
                    format!(
                        "{statement} could not be rehearsed: the sandbox's PostgreSQL has no extension {name} installed ({error}); it applies only where the server has it, and later migrations are not rehearsed"
                    ),
                )
                .at(at)
                .evidence("sqlstate", applied.sqlstate.clone().unwrap_or_default())
                .evidence("extension", name.clone())
                .advice(
                    // A type or function of it missing (its CREATE
                    // EXTENSION swallowed by a DO block) says why too.
                    way_out::advice(applied.sqlstate.as_deref(), error, None)
                        .unwrap_or_else(|| way_out::extension_way_out(&name, None)),
                ),
            )
        }
        Some(QUERY_CANCELED) => Some(
            Finding::new(
                CHECK,
                "statement-timeout",
                Severity::Error,
                Some(v),
                format!(
                    "{statement} ran longer than the rehearsal's statement timeout ({}) and was cancelled: {error}",
                    humantime::format_duration(statement_timeout)
                ),
            )
            .at(at)
            .evidence("sqlstate", QUERY_CANCELED)
            .evidence("statement_timeout_ms", statement_timeout.as_millis() as u64)
            .advice("a statement this slow on the rehearsal's rows holds its locks for longer in production: batch the work (-- rollsafe:batched-update), or raise --statement-timeout if it is expected"),
        ),
        _ => None,
    }
}

/// Who wrote the rows of a seeded database: a failure there means
/// different things (production's apps write such rows; the generator's
/// are only what the schema allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsBy {
    /// The apps live at the previous version.
    Apps,
    /// The apps, and the generator for the tables they do not write.
    AppsAndGenerator,
    /// The generator alone: no app is live there (a project of migrations
    /// alone).
    Generator,
}

impl RowsBy {
    /// Who wrote migration `e`'s seeded rows.
    pub fn of(e: &MigrationEvidence) -> RowsBy {
        let generated = e
            .seeding
            .as_ref()
            .and_then(|s| s.generated.as_ref())
            .is_some_and(|g| g.seeded.iter().any(|t| t.written > 0));
        match (e.live.is_empty(), generated) {
            (true, _) => RowsBy::Generator,
            (false, true) => RowsBy::AppsAndGenerator,
            (false, false) => RowsBy::Apps,
        }
    }

    fn phrase(self) -> &'static str {
        match self {
            RowsBy::Apps => "written by the live apps",
            RowsBy::AppsAndGenerator => {
                "written by the live apps, and generated by rollsafe for the tables they do not write"
            }
            RowsBy::Generator => {
                "generated by rollsafe from the schema (no app is live before it to write them)"
            }
        }
    }
}

/// Judges the applies of migration `v`: on an empty database, on a seeded
/// one (None when not reached: its apply, its rows and who wrote them), and
/// the schema differences a forced failure left behind.
pub fn on_both_paths(
    v: i32,
    on_empty: &Applied,
    on_seeded: Option<(&Applied, i64, RowsBy)>,
    failure_trace: &[String],
    statement_timeout: Duration,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(f) = on_empty
        .error
        .as_deref()
        .and_then(|e| refused(v, on_empty, e, statement_timeout))
    {
        return vec![f];
    }
    if let Some(f) = on_seeded.and_then(|(seeded, _, _)| {
        seeded
            .error
            .as_deref()
            .and_then(|e| refused(v, seeded, e, statement_timeout))
    }) {
        return vec![f];
    }
    if let Some(e) = &on_empty.error {
        out.push(
            Finding::new(CHECK, "fails-on-empty", Severity::Error, Some(v), format!("fails on an empty database: {e}"))
                .at(on_empty.failed_statement.and_then(|i| on_empty.location(i)))
                .evidence("sqlstate", on_empty.sqlstate.clone().unwrap_or_default())
                .advice(if on_empty.sqlstate.as_deref() == Some("25001") {
                    // active_sql_transaction: CREATE INDEX CONCURRENTLY & co.
                    "this statement cannot run inside a transaction: put it in a migration of its own that starts with `-- rollsafe:no-transaction` (its statements then run one by one and must be re-runnable, e.g. CREATE INDEX CONCURRENTLY IF NOT EXISTS)".to_string()
                } else {
                    crate::migrate::way_out::advice(on_empty.sqlstate.as_deref(), e, None)
                        .unwrap_or_else(|| "fix the SQL; it must apply on a database at the previous version".into())
                }),
        );
        return out;
    }
    if let Some((seeded, rows, by)) = on_seeded {
        if let Some(e) = &seeded.error {
            out.push(
                Finding::new(
                    CHECK,
                    "fails-on-seeded",
                    Severity::Error,
                    Some(v),
                    format!(
                        "applies on an empty database but fails on one with {rows} rows {}: {e}",
                        by.phrase()
                    ),
                )
                .at(seeded.failed_statement.and_then(|i| seeded.location(i)))
                .evidence("rows", rows)
                .evidence("sqlstate", seeded.sqlstate.clone().unwrap_or_default())
                .advice(if seeded.sqlstate.as_deref() == Some(DEADLOCK) {
                    // Measured under the live workload: the migration and
                    // the apps took their locks in opposite orders.
                    "it deadlocked with the live apps' statements, as it can in production (one side is cancelled): it takes locks in an order the apps' statements cross, e.g. REINDEX locking one index after another while queries hold the table's others; use REINDEX … CONCURRENTLY or CREATE INDEX CONCURRENTLY, or lock the table first with LOCK TABLE under a short lock_timeout"
                } else if by == RowsBy::Generator {
                    "the rows hold values the schema allows, not production's: production's rows can hold them too unless something the schema does not state keeps them out. Make the migration handle every value its columns allow (a data fix first, a USING expression that accepts them, a default for a new NOT NULL column), or state the rule in the schema (a CHECK constraint: the generator honours it)"
                } else {
                    "a migration meets the data live apps wrote: give a new NOT NULL column a constant default, or add it nullable, backfill in batches, and constrain it in a later migration"
                }),
            );
        } else {
            out.push(
                Finding::new(
                    CHECK,
                    "applies",
                    Severity::Info,
                    Some(v),
                    format!("applies on an empty database and on one with {rows} rows"),
                )
                .evidence("empty_ms", ms(on_empty.duration))
                .evidence("seeded_ms", ms(seeded.duration))
                .evidence("rows", rows),
            );
        }
    }
    if !failure_trace.is_empty() {
        out.push(
            Finding::new(
                CHECK,
                "failure-leaves-trace",
                Severity::Error,
                Some(v),
                format!(
                    "a failure at its end leaves changes behind: {}",
                    failure_trace.join("; ")
                ),
            )
            .evidence("differences", failure_trace.len())
            .advice(
                "keep every statement transactional so a failed migration rolls back completely",
            ),
        );
    }
    out
}

/// Judges the migrator's two runs up to `v` (None: the migrator could
/// not even say which migration it was on).
pub fn evaluate_second_run(v: Option<i32>, result: &Result<SecondRun, String>) -> Finding {
    let r = match result {
        Ok(r) => r,
        Err(e) => return Finding::new(
            CHECK,
            "migrator-fails",
            Severity::Error,
            v,
            format!("rollsafe migrate fails on it: {e}"),
        )
        .advice(
            "the migration must apply through the migrator (one transaction with its history row)",
        ),
    };
    let v = v.unwrap_or_default();
    if let Some(why) = &r.history_refused {
        return Finding::new(
            CHECK,
            "second-run-skipped",
            Severity::Skipped,
            Some(v),
            format!("the migrator's two runs could not be rehearsed: {why}"),
        )
        .advice("nothing to fix for the rehearsal: the history table is bookkeeping, and every other check ran");
    }
    if r.second_applied == 0 && r.changes.is_empty() {
        return Finding::new(
            CHECK,
            "second-run-noop",
            Severity::Info,
            Some(v),
            "running the migrator again applies nothing and changes nothing",
        )
        .evidence("first_run_applied", r.first_applied)
        .evidence("second_run_applied", 0);
    }
    Finding::new(
        CHECK,
        "second-run-not-noop",
        Severity::Error,
        Some(v),
        format!(
            "running the migrator again applied {} migration(s) and changed the schema: {}",
            r.second_applied,
            r.changes.join("; ")
        ),
    )
    .evidence("first_run_applied", r.first_applied)
    .evidence("second_run_applied", r.second_applied)
    .advice("a migration must be recorded in the history in the same transaction that applies it")
}

/// A `-- rollsafe:no-transaction` file killed after statement `k` of `n`
/// (at `line`), then run again, as `migrate` reruns it: the rerun must
/// succeed and leave the schema one clean run leaves (`changed` is the
/// difference).
pub fn evaluate_rerun(
    v: i32,
    rerun: &Applied,
    changed: &[String],
    (k, n, line): (usize, usize, usize),
) -> Vec<Finding> {
    let when = if k >= n {
        "run again after it completed".to_string()
    } else {
        format!("killed after statement {k} of {n} (line {line}) and run again")
    };
    if let Some(e) = &rerun.error {
        return vec![Finding::new(
            CHECK,
            "rerun-fails",
            Severity::Error,
            Some(v),
            format!("runs outside a transaction; {when}, it fails: {e}"),
        )
        .at(rerun.failed_statement.and_then(|i| rerun.location(i)))
        .evidence("killed_after_statement", k)
        .advice("a failed or killed run leaves the statements before the failure applied and migrate reruns the file: make every statement re-runnable (IF NOT EXISTS, IF EXISTS, OR REPLACE)")];
    }
    if !changed.is_empty() {
        return vec![Finding::new(
            CHECK,
            "rerun-diverges",
            Severity::Error,
            Some(v),
            format!(
                "runs outside a transaction; {when}, its schema differs from a clean run's: {}",
                changed.join("; ")
            ),
        )
        .evidence("killed_after_statement", k)
        .evidence("differences", changed.len())
        .advice("each statement must converge: a rerun after a kill must leave the schema one clean run leaves")];
    }
    vec![Finding::new(
        CHECK,
        "rerun-converges",
        Severity::Info,
        Some(v),
        format!("runs outside a transaction; {when}, it converges to the clean run's schema"),
    )
    .evidence("killed_after_statement", k)
    .evidence("statements", n)
    .evidence("rerun_ms", ms(rerun.duration))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_failure_is_an_error_that_names_the_rows() {
        let ok = Applied::default();
        let failed = Applied {
            error: Some("column \"x\" of relation \"t\" contains null values".into()),
            sqlstate: Some("23502".into()),
            ..Applied::default()
        };
        let f = on_both_paths(
            3,
            &ok,
            Some((&failed, 2000, RowsBy::Apps)),
            &[],
            Duration::from_secs(60),
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].id, "apply.fails-on-seeded");
        assert_eq!(f[0].severity, Severity::Error);
        assert!(f[0].message.contains("2000 rows"));
        assert!(f[0].message.contains("written by the live apps"));
        // Rows the generator wrote are what the schema allows, and the
        // finding says so (a project of migrations alone has no app).
        let f = on_both_paths(
            3,
            &ok,
            Some((&failed, 2000, RowsBy::Generator)),
            &[],
            Duration::from_secs(60),
        );
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("apply.fails-on-seeded", Severity::Error)
        );
        assert!(
            f[0].message.contains("generated by rollsafe"),
            "{}",
            f[0].message
        );
        assert!(!f[0].message.contains("live apps"), "{}", f[0].message);
        assert!(f[0].advice.contains("CHECK constraint"), "{}", f[0].advice);
        let f = on_both_paths(
            3,
            &ok,
            Some((&ok, 2000, RowsBy::Apps)),
            &[],
            Duration::from_secs(60),
        );
        assert_eq!(f[0].severity, Severity::Info);
    }

    #[test]
    fn an_extension_the_sandbox_lacks_is_not_judged_on_its_sql() {
        for (sqlstate, error) in [
            ("0A000", r#"line 1: extension "tsdbx" is not available"#),
            (
                "58P01",
                r#"line 1: could not open extension control file "/usr/share/postgresql/13/extension/tsdbx.control": No such file or directory"#,
            ),
        ] {
            let missing = Applied {
                error: Some(error.into()),
                sqlstate: Some(sqlstate.into()),
                ..Applied::default()
            };
            let f = on_both_paths(4, &missing, None, &[], Duration::from_secs(60));
            assert_eq!(
                (f.len(), f[0].id.as_str(), f[0].severity),
                (1, "apply.extension-not-in-sandbox", Severity::Skipped),
                "{sqlstate}"
            );
            assert_eq!(f[0].evidence["extension"], "tsdbx");
            assert!(f[0].advice.contains("--image"), "{}", f[0].advice);
        }
        // Another unsupported feature is the migration's own error.
        let other = Applied {
            error: Some("line 1: cannot use a deferrable unique constraint here".into()),
            sqlstate: Some("0A000".into()),
            ..Applied::default()
        };
        let f = on_both_paths(4, &other, None, &[], Duration::from_secs(60));
        assert_eq!(f[0].id, "apply.fails-on-empty");
    }

    #[test]
    fn a_role_the_copies_share_is_not_judged_on_its_drop() {
        let drop = Applied {
            error: Some(r#"line 2: role "crate_auditor" cannot be dropped because some objects depend on it"#.into()),
            sqlstate: Some("2BP01".into()),
            ..Applied::default()
        };
        let f = on_both_paths(3, &drop, None, &[], Duration::from_secs(60));
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("apply.role-shared-by-copies", Severity::Skipped)
        );
        assert!(
            f[0].advice.contains("DROP OWNED BY crate_auditor"),
            "{}",
            f[0].advice
        );
        // Another object still depended on is the migration's own error.
        let table = Applied {
            error: Some(
                "line 1: cannot drop table crates because other objects depend on it".into(),
            ),
            sqlstate: Some("2BP01".into()),
            ..Applied::default()
        };
        let f = on_both_paths(3, &table, None, &[], Duration::from_secs(60));
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("apply.fails-on-empty", Severity::Error)
        );
    }

    #[test]
    fn privilege_and_timeout_failures_name_what_they_needed() {
        let copy = Applied {
            error: Some("line 2: permission denied to COPY to or from an external program".into()),
            sqlstate: Some("42501".into()),
            ..Applied::default()
        };
        let f = on_both_paths(4, &copy, None, &[], Duration::from_secs(60));
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("apply.needs-superuser", Severity::Error)
        );
        assert!(
            f[0].message.contains("pg_execute_server_program"),
            "{}",
            f[0].message
        );
        assert!(f[0].advice.contains("--migrator-superuser"));
        let slow = Applied {
            error: Some("canceling statement due to statement timeout".into()),
            sqlstate: Some("57014".into()),
            ..Applied::default()
        };
        let f = on_both_paths(
            4,
            &Applied::default(),
            Some((&slow, 10, RowsBy::Apps)),
            &[],
            Duration::from_secs(3),
        );
        assert_eq!(f[0].id, "apply.statement-timeout");
        assert!(
            f[0].message.contains("statement timeout (3s)"),
            "{}",
            f[0].message
        );
    }

    /// A data migration its framework applied at rows: info naming the
    /// command, the rows and the rows it changed; when the command failed,
    /// an error quoting its last lines (all of them in the evidence).
    #[test]
    fn a_data_migration_applied_by_its_framework_names_its_command_and_rows() {
        use crate::verify::evidence::RowsChanged;
        let ran = ExternalRun {
            by: "Django".into(),
            command: "python3 manage.py migrate hives 0003_fill".into(),
            rows: 1000,
            took: Duration::from_millis(420),
            changed: Ok(vec![RowsChanged {
                table: "hives_hive".into(),
                updated: 500,
                ..RowsChanged::default()
            }]),
            failed: None,
            applied_beyond: None,
        };
        let f = applied_by_framework(3, &ran, RowsBy::Apps);
        assert_eq!(
            (f.id.as_str(), f.severity),
            ("apply.applied-by-framework", Severity::Info)
        );
        assert_eq!(
            f.message,
            "a data migration, applied on a database with 1000 rows by Django itself (`python3 manage.py migrate hives 0003_fill`) in 420 ms: it changed hives_hive: 500 updated"
        );
        assert_eq!(f.evidence["rows_changed"], 500);

        // A command that applied more (the project migrates itself when
        // it starts): skipped, naming what it applied beyond.
        let beyond = ExternalRun {
            applied_beyond: Some("its history then records hives.0004_not_null too".into()),
            ..ran.clone()
        };
        let f = applied_by_framework(3, &beyond, RowsBy::Apps);
        assert_eq!(
            (f.id.as_str(), f.severity),
            ("apply.applied-by-framework", Severity::Skipped)
        );
        assert!(
            f.message.contains("did more than apply it on the database with 1000 rows: its history then records hives.0004_not_null too"),
            "{}",
            f.message
        );

        let output: Vec<String> = (1..=7).map(|i| format!("line {i}")).collect();
        let failed = ExternalRun {
            changed: Err("it failed".into()),
            failed: Some(("exit status: 1".into(), output)),
            ..ran
        };
        let f = applied_by_framework(3, &failed, RowsBy::Generator);
        assert_eq!(
            (f.id.as_str(), f.severity),
            ("apply.fails-on-seeded", Severity::Error)
        );
        assert!(
            f.message.ends_with("it failed (exit status: 1); its output ends: line 3 | line 4 | line 5 | line 6 | line 7"),
            "{}",
            f.message
        );
        assert_eq!(f.evidence["output"].as_array().map(Vec::len), Some(7));
    }

    #[test]
    fn a_second_run_that_applies_is_an_error() {
        let noop = SecondRun {
            first_applied: 1,
            ..SecondRun::default()
        };
        assert_eq!(
            evaluate_second_run(Some(3), &Ok(noop)).severity,
            Severity::Info
        );
        let again = SecondRun {
            first_applied: 1,
            second_applied: 1,
            changes: vec!["t: column x is not expected".into()],
            history_refused: None,
        };
        let f = evaluate_second_run(Some(3), &Ok(again));
        assert_eq!(
            (f.id.as_str(), f.severity),
            ("apply.second-run-not-noop", Severity::Error)
        );
    }
}

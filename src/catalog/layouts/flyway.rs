//! Flyway: `V{version}__{description}.sql` with dotted versions (`V1.1__`,
//! `V1_1__` is the same version), ordered by their numeric parts (`1` <
//! `1.1` < `2`; `1.0` = `1`); `R__{description}.sql` repeatables run after
//! every versioned one, by description (a rehearsal from empty runs each
//! once); `U{version}__` undo files are never read (rollsafe never goes
//! down); a baseline `B{version}__` is what Flyway runs on an empty
//! database: the newest baseline first (at or below the target, which
//! for a rehearsal is the newest version), in place of every versioned
//! file at or below its version, then the versioned files after it.
//! `{file}.conf` with `executeInTransaction=false` runs the file outside a
//! transaction, and so does, without any setting, a file with a statement
//! PostgreSQL refuses in one: Flyway's PostgreSQL parser
//! (`detectCanExecuteInTransaction`) runs such a script outside a
//! transaction by itself (`CREATE|DROP [UNIQUE] INDEX CONCURRENTLY`,
//! `VACUUM`, `REINDEX SCHEMA|DATABASE|SYSTEM`, …; `ALTER TYPE … ADD
//! VALUE` only before PostgreSQL 12, below what rollsafe rehearses). `${name}` placeholders are replaced with the values given
//! by `--placeholder name=value`; one without a value is refused by name.
//!
//! SQL callbacks (`<event>.sql`, `<event>__<description>.sql`) are read
//! where Flyway's migrate runs them (see [`Place`]): the ones it runs once
//! per migrate (`beforeMigrate`, `afterVersioned`, `beforeRepeatables`,
//! `afterMigrateApplied`, `afterMigrate`) are steps of their own, each in
//! a transaction of its own as Flyway's `DefaultCallbackExecutor` runs
//! them, never recorded in `flyway_schema_history`.
//!
//! Those Flyway fires around every migration (`beforeEachMigrate`,
//! `afterEachMigrate`) go with each versioned, baseline and repeatable
//! migration ([`Step::before_each`], [`Step::after_each`]), one event's in
//! the order of their names: `DbMigrate.doMigrateGroup` fires
//! `BEFORE_EACH_MIGRATE` right before the migration's executor runs and
//! `AFTER_EACH_MIGRATE` right after it succeeded, and
//! `DefaultCallbackExecutor.onEachMigrateOrUndoEvent` runs each callback
//! on the migration's own connection with no transaction of its own
//! (unlike `onMigrateOrUndoEvent`, whose callbacks each get a
//! `TransactionTemplate`). So for a migration in a transaction
//! (`applyMigrations` wraps `doMigrateGroup` in its `ExecutionTemplate`)
//! they run inside it, their `SET LOCAL` and their locks the
//! migration's, its history row written after them; for one outside a
//! transaction (`executeInTransaction=false`, or a statement PostgreSQL
//! refuses in one) they run on its connection in autocommit, each
//! statement committing on its own (a `SET LOCAL` there does nothing; a
//! `SET ROLE` lasts for the migration). Whether a migration runs in a
//! transaction is its own file's to say, whatever its callbacks hold.
//! rollsafe's apply runs them the same way everywhere it applies the
//! migration (`migrate::apply::migration_steps`); their statements keep
//! their own file and lines in every finding. Not run: the `*Statement`
//! events (fired between a migration's statements by
//! `DefaultSqlScriptExecutor`, a Flyway Teams feature) and the `*Error`
//! ones (fired after a failure: on PostgreSQL the migration's
//! transaction is aborted by then, and the failure is the rehearsal's
//! finding already); the run's header names them as not run.

use std::collections::BTreeMap;

use super::{Folder, HistoryRules, LayoutReader, ReadOptions, Script, Step};
use crate::catalog::CatalogError;
use crate::catalog::Execution;

pub struct Flyway;

/// `flyway_schema_history`, read only: successful runs, not the baseline
/// marker nor the schema-creation row (version `0`); a repeatable has a
/// row per run and its latest counts, keyed `R__<description>`. Versions
/// read as [`history_version`] writes them (`1.1.0` is `1.1`); the
/// checksum is [`checksum`]'s.
static HISTORY: HistoryRules = HistoryRules {
    key: |key| match key.starts_with("R__") {
        true => key,
        false => history_version(&key).unwrap_or(key),
    },
    ..HistoryRules::new(
        "flyway_schema_history",
        "SELECT DISTINCT ON (k) k, installed_on::text, checksum::text FROM (
           SELECT coalesce(version, 'R__' || replace(description, ' ', '_')) AS k,
                  installed_on, checksum, installed_rank
             FROM flyway_schema_history
            WHERE success AND type <> 'BASELINE' AND version IS DISTINCT FROM '0') runs
          ORDER BY k, installed_rank DESC",
    )
};

/// What a Flyway file name is.
#[derive(Debug, PartialEq, Eq)]
enum Kind<'a> {
    Versioned {
        parts: Vec<u64>,
        written: &'a str,
        description: &'a str,
    },
    Repeatable {
        description: &'a str,
    },
    Undo,
    /// An SQL callback (`afterMigrate__grants.sql`): run by Flyway, not a
    /// migration.
    Callback {
        event: &'a str,
        description: &'a str,
    },
    Baseline {
        parts: Vec<u64>,
        written: &'a str,
        description: &'a str,
    },
}

/// Flyway's callback events (`org.flywaydb.core.api.callback.Event`): a
/// file named `<event>.sql` or `<event>__<description>.sql` is an SQL
/// callback, run by Flyway around its commands, never a migration.
pub(crate) const CALLBACK_EVENTS: &[&str] = &[
    "beforeMigrate",
    "beforeEachMigrate",
    "beforeEachMigrateStatement",
    "afterEachMigrateStatement",
    "afterEachMigrateStatementError",
    "afterEachMigrate",
    "afterEachMigrateError",
    "beforeRepeatables",
    "afterVersioned",
    "afterMigrateApplied",
    "afterMigrate",
    "afterMigrateError",
    "afterMigrateOperationFinish",
    "beforeClean",
    "afterClean",
    "afterCleanError",
    "beforeUndo",
    "beforeEachUndo",
    "beforeEachUndoStatement",
    "afterEachUndoStatement",
    "afterEachUndoStatementError",
    "afterEachUndo",
    "afterEachUndoError",
    "afterUndo",
    "afterUndoError",
    "beforeValidate",
    "afterValidate",
    "afterValidateError",
    "beforeBaseline",
    "afterBaseline",
    "afterBaselineError",
    "beforeRepair",
    "afterRepair",
    "afterRepairError",
    "beforeInfo",
    "afterInfo",
    "afterInfoError",
    "afterInfoOperationFinish",
    "createSchema",
    "beforeCreateSchema",
    "beforeConnect",
    "afterConnect",
];

/// Where Flyway's migrate fires an event it fires once per run, read in
/// `DbMigrate`: `migrate()` fires `beforeMigrate` before anything, then
/// (`migrateAll`, `doMigrateGroup`) `afterVersioned` once the versioned
/// migrations are done (before the first repeatable, or at the end) and
/// `beforeRepeatables` before the first repeatable, then
/// `afterMigrateApplied` when at least one migration was applied, then
/// `afterMigrate` always, even when nothing was pending. Each fires on its
/// own connection (`onMigrateOrUndoEvent`), each callback in a transaction
/// of its own unless its script cannot run in one
/// (`DefaultCallbackExecutor.execute`, `canHandleInTransaction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    First,
    AfterVersioned,
    BeforeRepeatables,
    AfterApplied,
    Last,
}

/// Where `event` runs in a migrate; None for the events a successful
/// migrate fires inside each migration (not run) or never.
fn place(event: &str) -> Option<Place> {
    Some(match event {
        "beforeMigrate" => Place::First,
        "afterVersioned" => Place::AfterVersioned,
        "beforeRepeatables" => Place::BeforeRepeatables,
        "afterMigrateApplied" => Place::AfterApplied,
        "afterMigrate" => Place::Last,
        _ => return None,
    })
}

/// Whether a callback of `event` runs only when the migrate applies a
/// migration (`afterMigrateApplied`) or a repeatable
/// (`beforeRepeatables`): `migrate` asks, the others run every time.
pub(crate) fn runs_only_when_applying(event: &str) -> Option<OnlyWhen> {
    match event {
        "afterMigrateApplied" => Some(OnlyWhen::AnyApplied),
        "beforeRepeatables" => Some(OnlyWhen::RepeatableApplied),
        _ => None,
    }
}

/// What a conditional callback waits for in a migrate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnlyWhen {
    AnyApplied,
    RepeatableApplied,
}

/// Where Flyway runs a callback it fires around each migration
/// (`DbMigrate.doMigrateGroup`, `onEachMigrateOrUndoEvent`): on the
/// migration's connection, before its statements or after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Around {
    Before,
    After,
}

/// Where `event` runs around each migration; None for the events not
/// fired around every migration of a successful migrate, and for those
/// rollsafe does not run ([`NOT_RUN_EACH_MIGRATE`]).
fn around(event: &str) -> Option<Around> {
    match event {
        "beforeEachMigrate" => Some(Around::Before),
        "afterEachMigrate" => Some(Around::After),
        _ => None,
    }
}

/// The callbacks Flyway fires inside a migration that rollsafe does not
/// run: around each statement (a Flyway Teams feature, fired by
/// `DefaultSqlScriptExecutor` between the statements), and after a
/// statement or a migration failed (on PostgreSQL the transaction is
/// aborted then, and a rehearsal's failure is its finding already).
const NOT_RUN_EACH_MIGRATE: &[&str] = &[
    "beforeEachMigrateStatement",
    "afterEachMigrateStatement",
    "afterEachMigrateStatementError",
    "afterEachMigrateError",
];

/// The kind of a Flyway file name, parsed as Flyway's `ResourceNameParser`
/// parses it: the longest prefix that matches (a callback event before
/// `V`, `R`, `U`, `B`), then the text up to the first `__` is the version
/// and the rest the description; without `__` the whole text is the
/// version and the description is empty (`V6.1.0.6.sql`). A callback or
/// repeatable has no version (`afterMigrate.sql`, `R__views.sql`).
fn kind(file: &str) -> Option<Kind<'_>> {
    let stem = file.strip_suffix(".sql")?;
    let split = |name| match name {
        "" => ("", ""),
        _ => {
            let name: &str = name;
            name.split_once("__").unwrap_or((name, ""))
        }
    };
    let mut events: Vec<&str> = CALLBACK_EVENTS
        .iter()
        .copied()
        .filter(|e| stem.starts_with(e))
        .collect();
    events.sort_by_key(|e| std::cmp::Reverse(e.len()));
    if let Some(event) = events.first() {
        let rest = &stem[event.len()..];
        let (version, description) = split(rest);
        return match (version, rest.is_empty() || rest.starts_with("__")) {
            ("", true) => Some(Kind::Callback { event, description }),
            _ => None,
        };
    }
    if let Some(description) = stem.strip_prefix("R__") {
        return (!description.is_empty()).then_some(Kind::Repeatable { description });
    }
    let prefix = stem.chars().next()?;
    let (written, description) = split(&stem[prefix.len_utf8()..]);
    let parts: Vec<u64> = written
        .split(['.', '_'])
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match prefix {
        'V' => Some(Kind::Versioned {
            parts,
            written,
            description,
        }),
        'U' => Some(Kind::Undo),
        'B' => Some(Kind::Baseline {
            parts,
            written,
            description,
        }),
        _ => None,
    }
}

/// Versions compare by parts, trailing zeros ignored (`1.0` = `1`).
fn normalized(parts: &[u64]) -> Vec<u64> {
    let mut parts = parts.to_vec();
    while parts.len() > 1 && parts.last() == Some(&0) {
        parts.pop();
    }
    parts
}

/// What only Flyway has: a repeatable, an undo or baseline file, a dotted
/// version, a `.sql.conf`, a description refinery would refuse.
fn flyway_only(folder: &Folder, file: &str) -> bool {
    match kind(file) {
        Some(Kind::Versioned {
            written,
            description,
            ..
        }) => {
            !written.bytes().all(|b| b.is_ascii_digit())
                || folder.has(&format!("{file}.conf"))
                || description.is_empty()
                || !description.chars().all(|c| c.is_alphanumeric() || c == '_')
        }
        Some(_) => true,
        None => false,
    }
}

/// `flyway_schema_history` as Flyway creates it on PostgreSQL (its
/// `createMetaDataTable.sql`), readable and writable by every role: the
/// rehearsal's migrator is not the superuser that runs the setup.
const HISTORY_TABLE_DDL: &str = r#"CREATE TABLE IF NOT EXISTS "flyway_schema_history" (
    "installed_rank" INT NOT NULL,
    "version" VARCHAR(50),
    "description" VARCHAR(200) NOT NULL,
    "type" VARCHAR(20) NOT NULL,
    "script" VARCHAR(1000) NOT NULL,
    "checksum" INTEGER,
    "installed_by" VARCHAR(100) NOT NULL,
    "installed_on" TIMESTAMP NOT NULL DEFAULT now(),
    "execution_time" INTEGER NOT NULL,
    "success" BOOLEAN NOT NULL,
    CONSTRAINT "flyway_schema_history_pk" PRIMARY KEY ("installed_rank")
);
CREATE INDEX IF NOT EXISTS "flyway_schema_history_s_idx" ON "flyway_schema_history" ("success");
GRANT ALL ON "flyway_schema_history" TO PUBLIC;
"#;

/// The first file (a migration, or a callback run with one) whose SQL
/// names Flyway's history table.
fn reads_history_table(migrations: &[crate::catalog::Migration]) -> Option<String> {
    let names = |sql: &str| sql.to_ascii_lowercase().contains("flyway_schema_history");
    migrations.iter().find_map(|m| {
        if names(&m.sql) {
            return Some(m.file.clone());
        }
        m.before_each
            .iter()
            .chain(&m.after_each)
            .find(|s| names(&s.sql))
            .map(|s| s.file.clone())
    })
}

impl LayoutReader for Flyway {
    /// Flyway creates `flyway_schema_history` before it runs anything of
    /// a migrate; rollsafe rehearses with its own history, so a callback
    /// or migration that reads Flyway's (the version just applied, a
    /// guard against running twice) would fail on a table production
    /// always has. It is created, empty, before the first migration.
    fn tool_tables(&self, migrations: &[crate::catalog::Migration]) -> Option<(String, String)> {
        let file = reads_history_table(migrations)?;
        Some((
            HISTORY_TABLE_DDL.to_string(),
            format!("flyway_schema_history is created before the first migration, as Flyway creates it, because {file} reads it; it holds no rows (rollsafe records its rehearsal apart)"),
        ))
    }

    /// Flyway also runs Java migrations (`V…__….java` classes on its
    /// classpath, often in another source folder), interleaved by version
    /// with the SQL files; rollsafe sees only the folder's SQL.
    fn caveat(&self) -> Option<&'static str> {
        Some("Flyway also runs the project's Java migrations (classes named V<version>__<description> on its classpath), which this folder does not hold and rollsafe does not run: a history that has them fails where their work is missing")
    }

    fn companion(&self, file: &str) -> Option<&'static str> {
        if file.ends_with(".sql.conf") {
            return Some("Flyway script configuration file(s) (read)");
        }
        match kind(file) {
            Some(Kind::Callback { event, .. }) if place(event).is_some() => Some("Flyway SQL callback(s), rehearsed where Flyway's migrate runs them, each in a transaction of its own and never recorded as applied (beforeMigrate before the first migration, afterVersioned after the last versioned one, beforeRepeatables before the first repeatable when there is one, afterMigrateApplied and afterMigrate after the last)"),
            Some(Kind::Callback { event, .. }) if around(event).is_some() => Some("Flyway SQL callback(s) run around every migration as Flyway runs them, never recorded as applied: inside its transaction (beforeEachMigrate before its statements, afterEachMigrate after them), on its connection one statement at a time when it runs outside a transaction"),
            Some(Kind::Callback { event, .. }) if NOT_RUN_EACH_MIGRATE.contains(&event) => Some("Flyway SQL callback(s) that Flyway runs around each statement of a migration or after one failed, which rollsafe does not run (what they do is missing from the rehearsal)"),
            Some(Kind::Callback { .. }) => Some("Flyway SQL callback(s) of events a successful migrate does not fire (errors, undo, clean, validate, info, baseline, repair, connect), not run"),
            Some(Kind::Undo) => Some("Flyway undo script(s), never run going up"),
            None if file.ends_with(".sql") && !file.contains('/') => Some("file(s) Flyway skips, their names matching none of its patterns (V<version>__<description>.sql, R__…, callbacks; its validateMigrationNaming is false by default)"),
            _ => None,
        }
    }

    fn pattern(&self) -> &'static str {
        "V<version>__<description>.sql, R__<description>.sql"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        let top: Vec<&str> = folder.top_level_sql().map(|(f, _)| f).collect();
        if !top.iter().any(|f| flyway_only(folder, f)) {
            return Vec::new();
        }
        top.into_iter()
            .filter(|f| kind(f).is_some())
            .map(str::to_string)
            .collect()
    }

    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let mut versioned = Vec::new();
        let mut baselines = Vec::new();
        let mut repeatable = Vec::new();
        let mut callbacks = Vec::new();
        let mut each = Vec::new();
        for (file, bytes) in folder.top_level_sql() {
            // A name Flyway cannot parse it skips (its
            // `validateMigrationNaming` is false by default): named as
            // ignored in the run's header, not refused.
            let Some(kind) = kind(file) else {
                continue;
            };
            match kind {
                Kind::Undo => continue,
                Kind::Callback { event, .. }
                    if place(event).is_none() && around(event).is_none() =>
                {
                    continue
                }
                _ => {}
            }
            let text = super::utf8(file, bytes.to_vec())?;
            let sql = replace_placeholders(file, &text, &options.placeholders)?;
            // Outside a transaction Flyway still executes the statements
            // its parser splits one by one, each committing on its own.
            let execution =
                if execute_outside_transaction(folder, file)? || cannot_run_in_transaction(&sql) {
                    Execution::Autocommit
                } else {
                    Execution::Transaction
                };
            // What a baseline and a versioned file share: the file, how it
            // runs, and Flyway's checksum of its text.
            let file_step = |sql| Step {
                file: file.to_string(),
                sql,
                execution,
                checksum: Some(checksum(&text).to_string()),
                ..Step::default()
            };
            match kind {
                Kind::Undo => unreachable!("skipped above"),
                Kind::Callback { event, description } if around(event).is_some() => each.push((
                    around(event),
                    description.replace('_', " "),
                    Script {
                        file: file.to_string(),
                        sql,
                    },
                )),
                Kind::Callback { event, description } => callbacks.push((
                    place(event).unwrap_or(Place::Last),
                    // Flyway's callback name: its description with `_`
                    // read as a space, by which it orders one event's
                    // callbacks (`DefaultCallbackExecutor`; none first).
                    description.replace('_', " "),
                    Step {
                        key: stem(file).to_string(),
                        label: stem(file).to_string(),
                        name: stem(file).to_string(),
                        file: file.to_string(),
                        sql,
                        execution,
                        callback: Some(event.to_string()),
                        ..Step::default()
                    },
                )),
                Kind::Baseline {
                    parts,
                    written,
                    description,
                } => baselines.push((
                    normalized(&parts),
                    Step {
                        key: version_key(&parts),
                        label: format!("B{written}"),
                        name: description.to_string(),
                        ..file_step(sql)
                    },
                )),
                Kind::Versioned {
                    parts,
                    written,
                    description,
                } => versioned.push((
                    normalized(&parts),
                    Step {
                        key: version_key(&parts),
                        label: format!("V{written}"),
                        name: description.to_string(),
                        ..file_step(sql)
                    },
                )),
                Kind::Repeatable { description } => repeatable.push(Step {
                    key: format!("R__{description}"),
                    label: format!("R__{description}"),
                    name: description.to_string(),
                    file: file.to_string(),
                    sql,
                    execution,
                    checksum: Some(checksum(&text).to_string()),
                    repeatable: true,
                    ..Step::default()
                }),
            }
        }
        versioned.sort_by(|a, b| a.0.cmp(&b.0));
        repeatable.sort_by(|a, b| a.name.cmp(&b.name));
        // On an empty database Flyway runs the newest baseline in place of
        // the versioned files at or below it.
        baselines.sort_by(|a, b| a.0.cmp(&b.0));
        let baseline = baselines.pop();
        if let Some((at, _)) = &baseline {
            versioned.retain(|(v, _)| v > at);
        }
        callbacks.sort_by(|a, b| (a.0, &a.1, &a.2.file).cmp(&(b.0, &b.1, &b.2.file)));
        // Flyway fires beforeRepeatables only before a repeatable it runs.
        if repeatable.is_empty() {
            callbacks.retain(|(at, _, _)| *at != Place::BeforeRepeatables);
        }
        // Flyway runs one event's callbacks in the order of their names,
        // as it does the once-per-migrate ones.
        each.sort_by(|a, b| (&a.1, &a.2.file).cmp(&(&b.1, &b.2.file)));
        let scripts = |at: Around| -> Vec<Script> {
            each.iter()
                .filter(|(a, _, _)| *a == Some(at))
                .map(|(_, _, s)| s.clone())
                .collect()
        };
        let (before_each, after_each) = (scripts(Around::Before), scripts(Around::After));
        let around_each = |step: Step| Step {
            before_each: before_each.clone(),
            after_each: after_each.clone(),
            ..step
        };
        let baseline = baseline.map(|(at, step)| (at, around_each(step)));
        let versioned: Vec<_> = versioned
            .into_iter()
            .map(|(at, step)| (at, around_each(step)))
            .collect();
        let repeatable: Vec<Step> = repeatable.into_iter().map(around_each).collect();
        let at = |place: Place| {
            callbacks
                .iter()
                .filter(move |(p, _, _)| *p == place)
                .map(|(_, _, s)| s.clone())
        };
        Ok(at(Place::First)
            .chain(baseline.into_iter().chain(versioned).map(|(_, s)| s))
            .chain(at(Place::AfterVersioned))
            .chain(at(Place::BeforeRepeatables))
            .chain(repeatable)
            .chain(at(Place::AfterApplied))
            .chain(at(Place::Last))
            .collect())
    }
}

/// `afterMigrate__grants` of `afterMigrate__grants.sql`.
fn stem(file: &str) -> &str {
    file.strip_suffix(".sql").unwrap_or(file)
}

/// The version as rollsafe keys it: its numeric parts, trailing zeros
/// dropped, joined by `.` (`1_1` and `1.1.0` are `1.1`).
fn version_key(parts: &[u64]) -> String {
    normalized(parts)
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// A version from `flyway_schema_history.version` (`1.1`, `2.0`) as
/// [`version_key`] writes it; None for what is not a version.
pub fn history_version(version: &str) -> Option<String> {
    let parts: Vec<u64> = version
        .split(['.', '_'])
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    Some(version_key(&parts))
}

/// Flyway's checksum of a file, as `flyway_schema_history.checksum` keeps
/// it (`ChecksumCalculator`): the CRC-32 of the file's lines, each without
/// its line break (Java's `BufferedReader.readLine`: `\n`, `\r\n` or
/// `\r`), a byte-order mark removed from the first; as a signed 32-bit
/// integer. The text is the file's, before placeholders are replaced.
pub fn checksum(text: &str) -> i32 {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // crc32fast's CRC-32 is java.util.zip.CRC32's (IEEE 802.3, reflected).
    let mut crc = crc32fast::Hasher::new();
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.find(['\n', '\r']).unwrap_or(rest.len());
        crc.update(&rest.as_bytes()[..end]);
        rest = &rest[end..];
        rest = rest
            .strip_prefix("\r\n")
            .or_else(|| rest.strip_prefix('\n'))
            .or_else(|| rest.strip_prefix('\r'))
            .unwrap_or(rest);
    }
    crc.finalize() as i32
}

/// Whether Flyway runs `sql` outside a transaction by itself: one of its
/// statements matches what Flyway's PostgreSQL parser knows PostgreSQL
/// refuses inside one (its patterns, over the statement's words).
fn cannot_run_in_transaction(sql: &str) -> bool {
    const OUTSIDE: &[&str] = &[
        "CREATE INDEX CONCURRENTLY",
        "CREATE UNIQUE INDEX CONCURRENTLY",
        "DROP INDEX CONCURRENTLY",
        "DROP UNIQUE INDEX CONCURRENTLY",
        "CREATE DATABASE",
        "DROP DATABASE",
        "CREATE TABLESPACE",
        "DROP TABLESPACE",
        "CREATE SUBSCRIPTION",
        "DROP SUBSCRIPTION",
        "ALTER SYSTEM",
        "REINDEX SCHEMA",
        "REINDEX DATABASE",
        "REINDEX SYSTEM",
        "REINDEX VERBOSE SCHEMA",
        "REINDEX VERBOSE DATABASE",
        "REINDEX VERBOSE SYSTEM",
        "VACUUM",
        "DISCARD ALL",
    ];
    crate::sql::split(sql).statements.iter().any(|s| {
        let words = s
            .text
            .split_whitespace()
            .take(5)
            .collect::<Vec<_>>()
            .join(" ")
            .to_ascii_uppercase();
        OUTSIDE
            .iter()
            .any(|p| words == *p || words.starts_with(&format!("{p} ")))
    })
}

/// `{file}.conf` says `executeInTransaction=false`.
fn execute_outside_transaction(folder: &Folder, file: &str) -> Result<bool, CatalogError> {
    let conf = format!("{file}.conf");
    Ok(folder.text(&conf)?.is_some_and(|text| {
        text.lines().any(|l| {
            l.split_once('=').is_some_and(|(k, v)| {
                k.trim() == "executeInTransaction" && v.trim().eq_ignore_ascii_case("false")
            })
        })
    }))
}

/// `${name}` replaced with its given value; one without a value is refused.
fn replace_placeholders(
    file: &str,
    text: &str,
    values: &BTreeMap<String, String>,
) -> Result<String, CatalogError> {
    super::fill_placeholders(text, |name, line| {
        values.get(name).cloned().ok_or_else(|| CatalogError::Unreadable {
            file: file.to_string(),
            why: format!(
                "line {line}: Flyway placeholder `${{{name}}}` has no value; pass --placeholder {name}=<value> (the value Flyway's configuration gives it)"
            ),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the header says a set-aside file of `f` is (empty: nothing).
    fn set_aside_as(f: &Folder, steps: &[Step], file: &str) -> &'static str {
        super::super::set_aside(crate::catalog::Layout::Flyway, f, steps)
            .into_iter()
            .find(|a| a.file == file)
            .and_then(|a| a.what)
            .unwrap_or_default()
    }

    fn folder(files: &[&str]) -> Folder {
        Folder {
            files: files
                .iter()
                .map(|f| (f.to_string(), b"SELECT 1;\n".to_vec()))
                .collect(),
            ..Folder::default()
        }
    }

    /// The callbacks Flyway's migrate runs once are steps where it runs
    /// them, one event's in the order of their descriptions (`_` read as
    /// a space, none first); the per-migration and failure ones are not,
    /// and the header says which is which.
    #[test]
    fn callbacks_are_steps_where_flyway_runs_them() {
        let f = folder(&[
            "V1__bikes.sql",
            "V2__tickets.sql",
            "R__open_tickets.sql",
            "afterMigrate.sql",
            "afterMigrate__grants.sql",
            "afterMigrate__b_x.sql",
            "afterMigrate__b-x.sql",
            "beforeMigrate.sql",
            "afterVersioned.sql",
            "beforeRepeatables.sql",
            "afterMigrateApplied__refresh.sql",
            "beforeEachMigrate.sql",
            "afterMigrateError.sql",
        ]);
        let steps = Flyway.read(&f, &ReadOptions::default()).unwrap();
        let labels: Vec<(&str, Option<&str>)> = steps
            .iter()
            .map(|s| (s.label.as_str(), s.callback.as_deref()))
            .collect();
        assert_eq!(
            labels,
            [
                ("beforeMigrate", Some("beforeMigrate")),
                ("V1", None),
                ("V2", None),
                ("afterVersioned", Some("afterVersioned")),
                ("beforeRepeatables", Some("beforeRepeatables")),
                ("R__open_tickets", None),
                ("afterMigrateApplied__refresh", Some("afterMigrateApplied")),
                ("afterMigrate", Some("afterMigrate")),
                ("afterMigrate__b_x", Some("afterMigrate")),
                ("afterMigrate__b-x", Some("afterMigrate")),
                ("afterMigrate__grants", Some("afterMigrate")),
            ]
        );
        assert!(steps
            .iter()
            .filter(|s| s.callback.is_some())
            .all(|s| s.checksum.is_none() && s.execution == Execution::Transaction));
        let what = |file: &str| set_aside_as(&f, &steps, file);
        assert!(what("afterMigrate__grants.sql")
            .starts_with("Flyway SQL callback(s), rehearsed where Flyway's migrate runs them"));
        assert!(what("beforeEachMigrate.sql")
            .starts_with("Flyway SQL callback(s) run around every migration as Flyway runs them"));
        assert!(what("afterMigrateError.sql").contains("does not fire"));
        // A callback runs outside a transaction as a migration does
        // (Flyway's `SqlScript.executeInTransaction` serves both).
        let mut f = folder(&[
            "V1__bikes.sql",
            "afterMigrate__vacuum.sql",
            "afterMigrate__z.sql",
        ]);
        f.files.insert(
            "afterMigrate__vacuum.sql".into(),
            b"VACUUM ANALYZE bikes;\n".to_vec(),
        );
        f.files.insert(
            "afterMigrate__z.sql.conf".into(),
            b"executeInTransaction=false\n".to_vec(),
        );
        let outside: Vec<(String, Execution)> = Flyway
            .read(&f, &ReadOptions::default())
            .unwrap()
            .into_iter()
            .map(|s| (s.label, s.execution))
            .collect();
        assert_eq!(
            outside,
            [
                ("V1".to_string(), Execution::Transaction),
                ("afterMigrate__vacuum".to_string(), Execution::Autocommit),
                ("afterMigrate__z".to_string(), Execution::Autocommit),
            ]
        );
        // Without a repeatable, Flyway never fires beforeRepeatables.
        let f = folder(&["V1__bikes.sql", "beforeRepeatables.sql", "afterMigrate.sql"]);
        let labels: Vec<String> = Flyway
            .read(&f, &ReadOptions::default())
            .unwrap()
            .into_iter()
            .map(|s| s.label)
            .collect();
        assert_eq!(labels, ["V1", "afterMigrate"]);
    }

    /// The callbacks Flyway runs around each migration go with every
    /// versioned, baseline and repeatable one (not with a callback step),
    /// one event's in the order of their names, their placeholders
    /// replaced; the statement and error events are named as not run.
    #[test]
    fn each_migrate_callbacks_go_with_every_migration_in_flyways_order() {
        let mut f = folder(&[
            "B1__start.sql",
            "V1__bikes.sql",
            "V2__tickets.sql",
            "R__open_tickets.sql",
            "afterMigrate.sql",
            "beforeEachMigrate__b_x.sql",
            "beforeEachMigrate__b-x.sql",
            "beforeEachMigrate__a.sql",
            "beforeEachMigrate.sql",
            "afterEachMigrate__grants.sql",
            "beforeEachMigrateStatement.sql",
            "afterEachMigrateError.sql",
        ]);
        f.files.insert(
            "afterEachMigrate__grants.sql".into(),
            b"-- the counter reads\nGRANT SELECT ON bikes TO ${counter};\n".to_vec(),
        );
        let options = ReadOptions {
            placeholders: [("counter".to_string(), "front_desk".to_string())].into(),
            ..ReadOptions::default()
        };
        let steps = Flyway.read(&f, &options).unwrap();
        let files = |scripts: &[Script]| -> Vec<String> {
            scripts.iter().map(|s| s.file.clone()).collect()
        };
        let around: Vec<(&str, Vec<String>, Vec<String>)> = steps
            .iter()
            .map(|s| {
                (
                    s.label.as_str(),
                    files(&s.before_each),
                    files(&s.after_each),
                )
            })
            .collect();
        let before = [
            "beforeEachMigrate.sql",
            "beforeEachMigrate__a.sql",
            "beforeEachMigrate__b_x.sql",
            "beforeEachMigrate__b-x.sql",
        ]
        .map(String::from)
        .to_vec();
        let after = vec!["afterEachMigrate__grants.sql".to_string()];
        assert_eq!(
            around,
            [
                ("B1", before.clone(), after.clone()),
                ("V2", before.clone(), after.clone()),
                ("R__open_tickets", before.clone(), after.clone()),
                ("afterMigrate", vec![], vec![]),
            ]
        );
        assert_eq!(
            steps[0].after_each[0].sql,
            "-- the counter reads\nGRANT SELECT ON bikes TO front_desk;\n"
        );
        // Never a step of their own, never a migration's file.
        assert!(!steps.iter().any(|s| s.file.contains("EachMigrate")));
        let what = |file: &str| set_aside_as(&f, &steps, file);
        for run in ["beforeEachMigrate__a.sql", "afterEachMigrate__grants.sql"] {
            assert!(
                what(run).contains("inside its transaction (beforeEachMigrate before its statements, afterEachMigrate after them)"),
                "{run}: {}",
                what(run)
            );
        }
        for not_run in [
            "beforeEachMigrateStatement.sql",
            "afterEachMigrateError.sql",
        ] {
            assert!(
                what(not_run).contains("which rollsafe does not run"),
                "{not_run}: {}",
                what(not_run)
            );
        }
    }

    #[test]
    fn names_versions_and_placeholders() {
        assert!(
            matches!(kind("V1_1__x.sql"), Some(Kind::Versioned { ref parts, .. }) if parts == &[1, 1])
        );
        assert_eq!(
            kind("R__views.sql"),
            Some(Kind::Repeatable {
                description: "views"
            })
        );
        assert_eq!(kind("U2__x.sql"), Some(Kind::Undo));
        assert_eq!(kind("V1.x__x.sql"), None);
        // java.util.zip.CRC32 of "123456789" is 0xCBF43926.
        assert_eq!(checksum("123456789"), 0xCBF4_3926_u32 as i32);
        // Line breaks of any kind, and a BOM, change nothing.
        assert_eq!(
            checksum("SELECT 1;\nSELECT 2;\n"),
            checksum("\u{feff}SELECT 1;\r\nSELECT 2;")
        );
        assert_ne!(checksum("SELECT 1;"), checksum("SELECT 2;"));
        // What the JVM computes with Flyway's algorithm (BufferedReader
        // lines, BOM dropped, java.util.zip.CRC32 over each line's UTF-8,
        // cast to int): a positive and a negative value, one with a
        // multi-byte character.
        assert_eq!(
            checksum("CREATE TABLE hives (id int);\nCREATE INDEX ON hives (id);\n"),
            1_780_937_679
        );
        assert_eq!(
            checksum("\u{feff}CREATE TABLE hives (id int);\r\nCREATE INDEX ON hives (id);"),
            1_780_937_679
        );
        assert_eq!(
            checksum("ALTER TABLE hives ADD COLUMN note text; -- \u{e9}\n"),
            -1_012_046_475
        );
        assert_eq!(history_version("1.1.0").as_deref(), Some("1.1"));
        assert!(cannot_run_in_transaction(
            "CREATE TABLE t (a int);\n-- built online\ndrop index\n  concurrently if exists i;"
        ));
        assert!(cannot_run_in_transaction("VACUUM;"));
        assert!(!cannot_run_in_transaction(
            "CREATE INDEX i ON t (a); ALTER TYPE e ADD VALUE 'x';"
        ));
        assert_eq!(normalized(&[1, 0]), [1]);
        let values = BTreeMap::from([("schema".to_string(), "app".to_string())]);
        assert_eq!(
            replace_placeholders("V1__a.sql", "CREATE TABLE ${schema}.t ();", &values).unwrap(),
            "CREATE TABLE app.t ();"
        );
        let err = replace_placeholders("V1__a.sql", "\nGRANT SELECT ON t TO ${reader};", &values)
            .unwrap_err();
        assert!(err.to_string().contains("line 2: Flyway placeholder `${reader}` has no value; pass --placeholder reader=<value>"), "{err}");
    }
}

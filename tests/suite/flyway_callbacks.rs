//! Flyway's SQL callbacks run where Flyway runs them: a bike-repair shop's
//! `afterMigrate__grants.sql` grants the front counter's role SELECT on
//! the parts table V3 creates and refreshes the queue V3 creates empty
//! (`WITH NO DATA`). The rehearsal runs it after the last migration and
//! judges it like one; the front counter, which needs V3 (and so the
//! callbacks the same migrate runs right after V3), reads both (a
//! role without the grant is refused, an unrefreshed materialized view
//! "has not been populated"). Flyway records no callback in its history,
//! so `status` and `check` never list it; rollsafe's migrate runs it
//! after applying, as Flyway does, and again with nothing pending.
//!
//! The callbacks Flyway runs inside every migration's transaction run
//! there too: a tool library's `beforeEachMigrate__lock_timeout.sql` sets
//! the lock timeout its V2 refuses to run without, and its
//! `afterEachMigrate__grants.sql` grants the lending desk, which needs V2,
//! SELECT on the tables each migration just created. Each statement of
//! theirs is measured and located at its own file and line, in `verify`
//! as in `migrate`, which records none of them.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context};
use libtest_mimic::Trial;
use rollsafe::catalog::{Catalog, ReadOptions};
use rollsafe::migrate;

use crate::common::{cli, output, repo_root, TestEnv};

pub fn tests(env: &std::sync::Arc<TestEnv>) -> Vec<Trial> {
    crate::trials!(
        "flyway_callbacks",
        env,
        [
            after_migrate_runs_after_the_last_migration_and_the_app_reads_what_it_gives,
            status_and_check_never_list_a_callback_and_migrate_runs_it_after_applying,
            each_migrate_callbacks_run_in_every_migrations_transaction_and_the_app_reads_what_they_grant,
            a_failing_callback_statement_is_reported_at_its_own_file_and_line,
            migrate_runs_each_migrate_callbacks_inside_the_migration_and_records_none,
            outside_a_transaction_the_callbacks_run_one_statement_at_a_time_and_the_precheck_reads_them,
            a_callback_that_reads_flyway_schema_history_finds_it_as_flyway_made_it,
        ]
    )
}

/// The shop's project: `migrations/` (Flyway's folder) and `apps/`.
fn shop() -> PathBuf {
    repo_root().join("tests/fixtures/projects/bike-repair")
}

/// A role name no other test uses: roles are the server's.
fn unique_role() -> String {
    format!(
        "front_counter_{}_{:06x}",
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}

/// `rollsafe verify` of the project at `dir`, the front counter's role and
/// the callback's `${counter_role}` both `role`: (exit, stdout, stderr).
fn verify(env: &TestEnv, dir: &Path, role: &str) -> anyhow::Result<(i32, String, String)> {
    verify_as(env, dir, "counter_role", role, &[])
}

/// `rollsafe verify` of the project at `dir`, its app's role and the
/// placeholder `placeholder` both `role`, with `more` arguments.
fn verify_as(
    env: &TestEnv,
    dir: &Path,
    placeholder: &str,
    role: &str,
    more: &[&str],
) -> anyhow::Result<(i32, String, String)> {
    output(
        cli()
            .args([
                "verify",
                "--postgres",
                env.sandbox.admin_url(),
                "--rows",
                "200",
            ])
            .arg("--migrations")
            .arg(dir.join("migrations"))
            .arg("--apps")
            .arg(dir.join("apps"))
            .args(["--app-role", role, "--placeholder"])
            .arg(format!("{placeholder}={role}"))
            .args(more),
    )
}

/// The rehearsal runs `afterMigrate__grants` as a step after V3, labelled
/// as Flyway names it, and judges it (its locks: the refresh takes ACCESS
/// EXCLUSIVE on the queue); the header says where callbacks run, and that
/// `beforeEachMigrate` is not run. The front counter's statements pass
/// there. Without the callback, the same app on V3 is refused: what it
/// reads is the callback's doing.
fn after_migrate_runs_after_the_last_migration_and_the_app_reads_what_it_gives(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let role = unique_role();
    let (code, out, err) = verify(env, &shop(), &role)?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let header = err
        .lines()
        .find(|l| l.contains("read as flyway's"))
        .unwrap_or_default();
    eprintln!("    header: {header}");
    for part in [
        "3 migration(s) from",
        "1 Flyway SQL callback(s), rehearsed where Flyway's migrate runs them, each in a transaction of its own and never recorded as applied (beforeMigrate before the first migration, afterVersioned after the last versioned one, beforeRepeatables before the first repeatable when there is one, afterMigrateApplied and afterMigrate after the last): afterMigrate__grants.sql",
        "1 Flyway SQL callback(s) run around every migration as Flyway runs them, never recorded as applied: inside its transaction (beforeEachMigrate before its statements, afterEachMigrate after them), on its connection one statement at a time when it runs outside a transaction: beforeEachMigrate.sql",
    ] {
        ensure!(header.contains(part), "{part:?} not in: {header}");
    }
    // Its section comes after V3's, and its findings are its own.
    let section = out
        .split("\n\n")
        .find(|s| s.starts_with("afterMigrate__grants afterMigrate__grants.sql"))
        .with_context(|| format!("no section for the callback: {out}"))?;
    ensure!(
        out.find("\nV3 V3__spare_parts_and_queue.sql") < out.find("\nafterMigrate__grants "),
        "the callback is not rehearsed after V3: {out}"
    );
    for line in section.lines() {
        eprintln!("    {line}");
    }
    for part in [
        "ok    apply.applies",
        "locks open_tickets_per_bike: ",
        "ACCESS EXCLUSIVE on open_tickets_per_bike held",
        "ok    compat.statements-run                all 2 statements of the front_counter app prepare and execute on afterMigrate__grants",
    ] {
        ensure!(section.contains(part), "{part:?} not in:\n{section}");
    }
    ensure!(
        out.contains("line 6    REFRESH MATERIALIZED VIEW open_tickets_per_…"),
        "the refresh is not measured at its line: {out}"
    );

    // The control: no callback, the app on V3 lacks its rights.
    let control = tempfile::tempdir()?;
    for sub in ["migrations", "apps"] {
        std::fs::create_dir(control.path().join(sub))?;
        for entry in std::fs::read_dir(shop().join(sub))? {
            let entry = entry?;
            if entry.file_name() != "afterMigrate__grants.sql" {
                std::fs::copy(
                    entry.path(),
                    control.path().join(sub).join(entry.file_name()),
                )?;
            }
        }
    }
    let (code, out, err) = verify(env, control.path(), &unique_role())?;
    ensure!(
        code == 1
            && out.contains("compat.permission-denied")
            && out.contains("permission denied for table spare_parts")
            && out.contains("permission denied for materialized view open_tickets_per_bike"),
        "exit {code}: {out}{err}"
    );
    Ok(())
}

/// A database the shop's files were applied to by rollsafe's migrate, and
/// whose `flyway_schema_history` holds what Flyway records (V1, V2, V3;
/// no callback). `status` lists V1..V3 applied and no callback; `check`
/// finds no history problem. The migrate ran the callback after applying
/// (the grant is there, the queue populated), recorded nothing for it,
/// and runs it again with nothing pending, as Flyway does.
fn status_and_check_never_list_a_callback_and_migrate_runs_it_after_applying(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let migrations = shop().join("migrations");
    let public = ReadOptions {
        placeholders: [("counter_role".to_string(), "PUBLIC".to_string())].into(),
        ..Default::default()
    };
    let catalog = Catalog::from_dir_in(&migrations, &public)?;
    let db = env.fresh_database();
    let mut c = db.connect()?;
    let granted_and_filled = |c: &mut postgres::Client| -> anyhow::Result<(bool, bool)> {
        let row = c.query_one(
            "SELECT has_table_privilege('public', 'spare_parts', 'SELECT'),
                    (SELECT ispopulated FROM pg_matviews WHERE matviewname = 'open_tickets_per_bike')",
            &[],
        )?;
        Ok((row.get(0), row.get(1)))
    };

    let first = migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    ensure!(
        first.applied.len() == 3,
        "applied {:?}",
        first.applied.iter().map(|a| &a.file).collect::<Vec<_>>()
    );
    ensure!(
        granted_and_filled(&mut c)? == (true, true),
        "after migrate: (granted, populated) = {:?}",
        granted_and_filled(&mut c)?
    );
    // Nothing pending: Flyway still runs afterMigrate (it refreshes again).
    c.batch_execute("REVOKE SELECT ON spare_parts FROM PUBLIC")?;
    let again = migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    ensure!(
        again.applied.is_empty() && granted_and_filled(&mut c)? == (true, true),
        "second migrate: applied {}, (granted, populated) = {:?}",
        again.applied.len(),
        granted_and_filled(&mut c)?
    );
    let recorded: Vec<String> = c
        .query(
            "SELECT name FROM refinery_schema_history ORDER BY version",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    ensure!(
        recorded == ["bikes", "repair_tickets", "spare_parts_and_queue"],
        "rollsafe's own history records {recorded:?}"
    );

    // What Flyway records for the same run: the versioned files only.
    c.batch_execute(
        "CREATE TABLE flyway_schema_history (installed_rank int PRIMARY KEY, version varchar(50),
            description varchar(200) NOT NULL, type varchar(20) NOT NULL, script varchar(1000) NOT NULL,
            checksum int, installed_by varchar(100) NOT NULL, installed_on timestamp NOT NULL DEFAULT now(),
            execution_time int NOT NULL, success boolean NOT NULL)",
    )?;
    // (A callback has no checksum: Flyway records none.)
    let versioned = catalog
        .migrations()
        .iter()
        .filter(|m| m.tool_checksum.is_some());
    for (rank, m) in versioned.enumerate() {
        let checksum: i32 = m.tool_checksum.as_deref().context("a checksum")?.parse()?;
        c.execute(
            "INSERT INTO flyway_schema_history VALUES ($1, $2, $3, 'SQL', $4, $5, 'flyway', now(), 1, true)",
            &[&(rank as i32 + 1), &m.key, &m.name.replace('_', " "), &m.file, &checksum],
        )?;
    }
    let status = migrate::status(db.url(), &catalog)?;
    let states: Vec<(&str, migrate::State)> = status
        .versions
        .iter()
        .map(|v| (v.label.as_str(), v.state))
        .collect();
    ensure!(
        states
            == [
                ("V1", migrate::State::Applied),
                ("V2", migrate::State::Applied),
                ("V3", migrate::State::Applied)
            ]
            && status.pending().next().is_none(),
        "{states:?}"
    );

    let placeholder = ["--placeholder", "counter_role=PUBLIC"];
    let (code, out, err) = output(
        cli()
            .args(["status", "--database-url", db.url()])
            .arg("--migrations")
            .arg(&migrations)
            .args(placeholder),
    )?;
    for line in out.lines() {
        eprintln!("    status: {line}");
    }
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(
        !out.contains("afterMigrate") && !out.contains("pending"),
        "status lists a callback or a pending migration: {out}"
    );
    ensure!(
        out.contains("(flyway, latest V3)") && out.contains("flyway_schema_history: at V3"),
        "{out}"
    );

    let (code, out, err) = output(
        cli()
            .args(["check", "--database-url", db.url()])
            .args(["--postgres", env.sandbox.admin_url()])
            .arg("--migrations")
            .arg(&migrations)
            .args(placeholder),
    )?;
    for line in out
        .lines()
        .filter(|l| l.contains("history") || l.contains("schema"))
    {
        eprintln!("    check: {line}");
    }
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(
        !out.contains("afterMigrate") && !out.contains("history.pending"),
        "check lists a callback: {out}"
    );
    Ok(())
}

/// The tool library's project: `migrations/` and `apps/`.
fn library() -> PathBuf {
    repo_root().join("tests/fixtures/projects/tool-library")
}

/// A copy of the library's project without `left_out` (a file of
/// `migrations/`), and with `appended` added to the end of the file it
/// names: (file, text).
fn library_copy(
    left_out: Option<&str>,
    appended: Option<(&str, &str)>,
) -> anyhow::Result<tempfile::TempDir> {
    let copy = tempfile::tempdir()?;
    for sub in ["migrations", "apps"] {
        std::fs::create_dir(copy.path().join(sub))?;
        for entry in std::fs::read_dir(library().join(sub))? {
            let entry = entry?;
            if Some(entry.file_name().to_string_lossy().as_ref()) != left_out {
                std::fs::copy(entry.path(), copy.path().join(sub).join(entry.file_name()))?;
            }
        }
    }
    if let Some((file, text)) = appended {
        let path = copy.path().join("migrations").join(file);
        let mut sql = std::fs::read_to_string(&path)?;
        sql.push_str(text);
        std::fs::write(path, sql)?;
    }
    Ok(copy)
}

/// A copy of the library's project with `file` added to `migrations/`.
fn library_with(file: &str, sql: &str) -> anyhow::Result<tempfile::TempDir> {
    let copy = library_copy(None, None)?;
    std::fs::write(copy.path().join("migrations").join(file), sql)?;
    Ok(copy)
}

/// `rollsafe verify` of the library at `dir`, the lending desk as `role`.
fn verify_library(
    env: &TestEnv,
    dir: &Path,
    role: &str,
    more: &[&str],
) -> anyhow::Result<(i32, String, String)> {
    verify_as(env, dir, "lender_role", role, more)
}

/// Each migration's apply runs `beforeEachMigrate__lock_timeout.sql`
/// before its statements and `afterEachMigrate__grants.sql` after them,
/// in its transaction: V2, which refuses to run without a lock timeout,
/// applies, and the lending desk reads the loans V2 creates. Their
/// statements are measured in the migration's table at their own files
/// and lines (the migration's keep theirs). The controls: without the
/// grants the desk is refused; without the timeout V2 fails at its guard.
fn each_migrate_callbacks_run_in_every_migrations_transaction_and_the_app_reads_what_they_grant(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let role = unique_role();
    let (code, out, err) = verify_library(env, &library(), &role, &[])?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let header = err
        .lines()
        .find(|l| l.contains("read as flyway's"))
        .unwrap_or_default();
    ensure!(
        header.contains("2 Flyway SQL callback(s) run around every migration as Flyway runs them, never recorded as applied: inside its transaction (beforeEachMigrate before its statements, afterEachMigrate after them), on its connection one statement at a time when it runs outside a transaction: afterEachMigrate__grants.sql, beforeEachMigrate__lock_timeout.sql"),
        "{header}"
    );
    ensure!(
        out.contains("ok    compat.statements-run                all 1 statements of the lending_desk app prepare and execute on V2"),
        "{out}"
    );
    let table = out
        .split("\n\n")
        .find(|s| s.starts_with("per statement"))
        .with_context(|| format!("no per-statement table: {out}"))?;
    let v2: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.contains("V2__loans.sql"))
        .skip(1)
        .map(str::trim_start)
        .collect();
    for line in &v2 {
        eprintln!("    {line}");
    }
    let starts = [
        "beforeEachMigrate__lock_timeout.sql line 4    SET LOCAL lock_timeout = '2s'",
        "line 4    DO $$ BEGIN IF current_setting('lock_timeou",
        "line 12   CREATE TABLE loans",
        "line 19   CREATE INDEX loans_tool_id",
        "afterEachMigrate__grants.sql line 4    GRANT SELECT ON ALL TABLES IN SCHEMA public",
    ];
    ensure!(
        v2.len() == starts.len() && v2.iter().zip(starts).all(|(l, s)| l.starts_with(s)),
        "V2's statements: {v2:#?}"
    );

    let no_grants = library_copy(Some("afterEachMigrate__grants.sql"), None)?;
    let (code, out, err) = verify_library(env, no_grants.path(), &unique_role(), &[])?;
    ensure!(
        code == 1
            && out.contains("compat.permission-denied")
            && out.contains("permission denied for table loans"),
        "without the grants: exit {code}: {out}{err}"
    );
    let no_timeout = library_copy(Some("beforeEachMigrate__lock_timeout.sql"), None)?;
    let (code, out, err) = verify_library(env, no_timeout.path(), &unique_role(), &[])?;
    ensure!(
        code == 1
            && out.contains("apply.fails-on-empty")
            && out.contains("fails on an empty database: line 4: ")
            && out.contains("no lock_timeout: run the library's migrations with beforeEachMigrate__lock_timeout.sql"),
        "without the timeout: exit {code}: {out}{err}"
    );
    Ok(())
}

/// A statement of `beforeEachMigrate__lock_timeout.sql` that PostgreSQL
/// refuses (its line 5): `verify` reports V1's failure at that file and
/// line, not at a line of V1; `migrate` names the callback's file and line
/// and rolls the whole migration back (V1's table is not there).
fn a_failing_callback_statement_is_reported_at_its_own_file_and_line(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let broken = library_copy(
        None,
        Some((
            "beforeEachMigrate__lock_timeout.sql",
            "SET LOCAL statement_timeout = 'soon';\n",
        )),
    )?;
    let role = unique_role();
    let (code, out, err) = verify_library(env, broken.path(), &role, &["--format", "json"])?;
    ensure!(code == 1, "exit {code}: {out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out)?;
    let failed = report["findings"]
        .as_array()
        .context("findings")?
        .iter()
        .find(|f| f["id"] == "apply.fails-on-empty")
        .with_context(|| format!("no apply.fails-on-empty: {out}"))?;
    eprintln!("    {}", failed["message"]);
    let at = &failed["location"];
    ensure!(
        failed["migration"] == 1
            && at["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("migrations/beforeEachMigrate__lock_timeout.sql"))
            && at["line"] == 5
            && at["excerpt"] == "SET LOCAL statement_timeout = 'soon'"
            && failed["message"].as_str().is_some_and(|m| m.contains(
                "its callback beforeEachMigrate__lock_timeout.sql line 5: invalid value for parameter \"statement_timeout\": \"soon\""
            )),
        "{failed:#}"
    );

    let options = ReadOptions {
        placeholders: [("lender_role".to_string(), "PUBLIC".to_string())].into(),
        ..Default::default()
    };
    let catalog = Catalog::from_dir_in(&broken.path().join("migrations"), &options)?;
    let db = env.fresh_database();
    let err = migrate::migrate(db.url(), &catalog, &migrate::Options::default())
        .err()
        .context("migrate applied a migration whose callback fails")?
        .to_string();
    eprintln!("    migrate: {err}");
    ensure!(
        err.starts_with("V1 (V1__tools.sql) in its callback beforeEachMigrate__lock_timeout.sql line 5 failed and was rolled back"),
        "{err}"
    );
    let mut c = db.connect()?;
    let tools: Option<String> = c
        .query_one("SELECT to_regclass('tools')::text", &[])?
        .get(0);
    ensure!(tools.is_none(), "V1's table is there: {tools:?}");
    Ok(())
}

/// `rollsafe migrate` on a real database runs the callbacks inside each
/// migration's transaction: the grants of `afterEachMigrate__grants.sql`
/// are there for V1's table and V2's (V2's guard finds the lock policy's
/// timeout, which the callback's gives way to for the migration's
/// statements); its history lists V1 and V2 and nothing of the callbacks.
fn migrate_runs_each_migrate_callbacks_inside_the_migration_and_records_none(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let options = ReadOptions {
        placeholders: [("lender_role".to_string(), "PUBLIC".to_string())].into(),
        ..Default::default()
    };
    let catalog = Catalog::from_dir_in(&library().join("migrations"), &options)?;
    let db = env.fresh_database();
    let applied = migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    ensure!(
        applied
            .applied
            .iter()
            .map(|a| a.file.as_str())
            .collect::<Vec<_>>()
            == ["V1__tools.sql", "V2__loans.sql"],
        "applied {:?}",
        applied.applied.iter().map(|a| &a.file).collect::<Vec<_>>()
    );
    let mut c = db.connect()?;
    let granted: (bool, bool) = {
        let row = c.query_one(
            "SELECT has_table_privilege('public', 'tools', 'SELECT'),
                    has_table_privilege('public', 'loans', 'SELECT')",
            &[],
        )?;
        (row.get(0), row.get(1))
    };
    ensure!(
        granted == (true, true),
        "(tools, loans) granted: {granted:?}"
    );
    let recorded: Vec<String> = c
        .query(
            "SELECT name FROM refinery_schema_history ORDER BY version",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    ensure!(
        recorded == ["tools", "loans"],
        "the history records {recorded:?}"
    );
    Ok(())
}

/// A V3 that Flyway runs outside a transaction by itself (`CREATE INDEX
/// CONCURRENTLY`) runs its callbacks on its connection, one statement at a
/// time, as Flyway's `onEachMigrateOrUndoEvent` does: the rehearsal passes
/// and measures them in V3's table at their own files and lines. And the
/// static precheck reads a callback's statements where they are: an index
/// built in `afterEachMigrate__grants.sql` (its line 5) is squawk's
/// warning there, for every migration it runs in, never at a line of one.
fn outside_a_transaction_the_callbacks_run_one_statement_at_a_time_and_the_precheck_reads_them(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let outside = library_with(
        "V3__tools_by_name.sql",
        "-- Members look tools up by name; built without blocking the desk.\n\
         CREATE INDEX CONCURRENTLY IF NOT EXISTS tools_name ON tools (name);\n",
    )?;
    let (code, out, err) = verify_library(env, outside.path(), &unique_role(), &[])?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let v3: Vec<&str> = out
        .split("\n\n")
        .find(|s| s.starts_with("per statement"))
        .unwrap_or_default()
        .lines()
        .skip_while(|l| !l.contains("V3__tools_by_name.sql"))
        .skip(1)
        .map(str::trim_start)
        .take_while(|l| !l.starts_with("V"))
        .collect();
    let starts = [
        "beforeEachMigrate__lock_timeout.sql line 4    SET LOCAL lock_timeout",
        "line 2    CREATE INDEX CONCURRENTLY IF NOT EXISTS",
        "afterEachMigrate__grants.sql line 4    GRANT SELECT",
    ];
    ensure!(
        v3.len() == starts.len() && v3.iter().zip(starts).all(|(l, s)| l.starts_with(s)),
        "V3's statements: {v3:#?}\n{out}"
    );

    let flagged = library_copy(
        None,
        Some((
            "afterEachMigrate__grants.sql",
            "CREATE INDEX IF NOT EXISTS tools_shelf ON tools (shelf);\n",
        )),
    )?;
    let (code, out, err) = output(
        cli()
            .args(["verify", "--static-only", "--format", "json"])
            .arg("--migrations")
            .arg(flagged.path().join("migrations"))
            .args(["--placeholder", "lender_role=PUBLIC"]),
    )?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out)?;
    let at: Vec<(i64, String, i64)> = report["findings"]
        .as_array()
        .context("findings")?
        .iter()
        .filter(|f| f["id"] == "static.require-concurrent-index-creation")
        .map(|f| {
            let file = f["location"]["file"].as_str().unwrap_or_default();
            let file = file.rsplit('/').next().unwrap_or_default().to_string();
            (
                f["migration"].as_i64().unwrap_or(0),
                file,
                f["location"]["line"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let callback = || "afterEachMigrate__grants.sql".to_string();
    ensure!(
        at == [(1, callback(), 5), (2, callback(), 5)],
        "squawk's warnings at {at:?}"
    );
    Ok(())
}

/// A callback that reads Flyway's own `flyway_schema_history` (a guard on
/// what it records, common in callbacks) runs where Flyway runs it: Flyway
/// made the table before any migration, so the rehearsal makes it too,
/// empty (never seeded with generated rows: the guard would see them), and
/// the header says why. Before, every migration failed on it with
/// `relation "flyway_schema_history" does not exist` (a false error).
fn a_callback_that_reads_flyway_schema_history_finds_it_as_flyway_made_it(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let copy = library_with(
        "afterEachMigrate__ledger.sql",
        "-- The library's ledger: Flyway's own table, read after each migration.\n\
         DO $$\n\
         BEGIN\n\
           IF EXISTS (SELECT 1 FROM flyway_schema_history WHERE NOT success) THEN\n\
             RAISE EXCEPTION 'a failed migration is recorded';\n\
           END IF;\n\
         END $$;\n",
    )?;
    let (code, out, err) = verify_library(env, copy.path(), &unique_role(), &[])?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(!out.contains("does not exist"), "{out}");
    ensure!(
        err.contains("flyway_schema_history is created before the first migration, as Flyway creates it, because afterEachMigrate__ledger.sql reads it; it holds no rows (rollsafe records its rehearsal apart)"),
        "{err}"
    );
    // The callback ran after both migrations (its statement is in each
    // one's per-statement table).
    ensure!(
        out.matches("afterEachMigrate__ledger.sql line 2").count() == 2,
        "{out}"
    );
    Ok(())
}

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
            .arg(format!("counter_role={role}")),
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
        "1 Flyway SQL callback(s) that Flyway runs inside every migration's transaction, which rollsafe does not run (what they do is missing from the rehearsal): beforeEachMigrate.sql",
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

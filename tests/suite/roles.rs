//! Who runs what in a rehearsal (issues 19 and 22): migrations as a role
//! that owns the databases and is not a superuser, apps as their own
//! roles, one statement per app entry, every statement under a timeout.
//! Each hazard is an error with its evidence; each safe counterpart passes
//! with zero errors.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use rollsafe::app::load_dir;
use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::report::{Report, Severity};

use crate::common::{cli, exists_on_server, output, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    crate::trials!(
        "roles",
        env,
        [
            copy_to_program_in_a_migration_runs_nothing_and_needs_superuser,
            a_table_the_apps_role_was_not_granted_is_permission_denied,
            the_same_table_with_its_grant_passes,
            row_level_security_without_a_policy_refuses_the_apps_rows,
            row_level_security_with_a_policy_passes,
            force_row_level_security_binds_the_owner_role_apps_run_as_by_default,
            an_app_entry_with_two_statements_is_refused_with_its_line,
            a_sleeping_migration_is_cut_at_the_statement_timeout,
            the_seeder_may_skip_foreign_key_checks_and_the_migrator_may_not,
            a_role_the_history_assumes_comes_from_the_setup_file,
            the_setup_files_database_settings_hold_in_every_rehearsal_database,
            dropping_a_role_the_copies_share_is_skipped_not_an_error,
        ]
    )
}

/// Rows seeded per rehearsal: enough to have rows, quick to write.
const ROWS: u64 = 200;

fn write(dir: &Path, files: &[(&str, &str)]) -> anyhow::Result<()> {
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
    }
    Ok(())
}

/// A role name no other test (nor a concurrent run on the same server)
/// uses: roles are cluster-wide.
fn unique_role(what: &str) -> String {
    format!(
        "{what}_{}_{:06x}",
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}

fn described(r: &Report, severity: Severity) -> Vec<String> {
    r.findings
        .iter()
        .filter(|f| f.severity == severity)
        .map(|f| format!("V{}:{}: {}", f.migration.unwrap_or(0), f.id, f.message))
        .collect()
}

fn rehearse(env: &TestEnv, dir: &Path, app_role: Option<&str>) -> anyhow::Result<Report> {
    let catalog = Catalog::from_dir(&dir.join("migrations"))?;
    let mut verify = shipped::verify(catalog.clone())?
        .rows(ROWS)
        .app_role(app_role.map(str::to_string));
    if dir.join("apps").is_dir() {
        verify = verify.apps(load_dir(&dir.join("apps"), &catalog)?);
    }
    Ok(verify.run(&env.sandbox)?)
}

fn expect_pass(r: &Report) -> anyhow::Result<()> {
    ensure!(
        r.passed && r.errors().count() == 0,
        "expected no errors, got {:#?}",
        described(r, Severity::Error)
    );
    // Measured, not vacuous: the apps' statements ran on the last version.
    ensure!(
        r.findings.iter().any(|f| f.id == "compat.statements-run"),
        "no app statement was replayed: {:#?}",
        described(r, Severity::Info)
    );
    Ok(())
}

/// The error `id` on `v`, printed for the report.
fn expect_error<'r>(
    r: &'r Report,
    v: i32,
    id: &str,
) -> anyhow::Result<&'r rollsafe::report::Finding> {
    let f = r
        .errors()
        .find(|f| f.migration == Some(v) && f.id == id)
        .with_context(|| {
            format!(
                "no error {id} on V{v}; errors: {:#?}",
                described(r, Severity::Error)
            )
        })?;
    ensure!(!r.passed, "a report with an error passed");
    eprintln!("    finding: V{v} {} {}: {}", f.severity, f.id, f.message);
    Ok(f)
}

/// The container of a docker sandbox (`docker container 015b6e8c0e2d …`).
fn container_of(env: &TestEnv) -> Option<String> {
    let described = env.sandbox.describe();
    let rest = described.strip_prefix("docker container ")?;
    rest.split_whitespace().next().map(str::to_string)
}

/// Removes `path` where the suite's server runs (a file the control's
/// superuser program made): inside its container, else on this machine.
fn remove_on_server(env: &TestEnv, path: &str) {
    match container_of(env) {
        Some(id) => {
            let _ = Command::new("docker")
                .args(["exec", &id, "rm", "-f", path])
                .output();
        }
        None => {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn run_verify(env: &TestEnv, dir: &Path, extra: &[&str]) -> anyhow::Result<(i32, String, String)> {
    output(
        cli()
            .args(["verify", "--postgres", env.sandbox.admin_url(), "--rows"])
            .arg(ROWS.to_string())
            .args(extra)
            .current_dir(dir),
    )
}

/// `COPY … TO PROGRAM` runs a command on the database server's machine
/// when its session is a superuser's. As the migrator role it is refused:
/// no file appears (on this machine for the local backend, inside the
/// container for docker), and verify exits 1 with `apply.needs-superuser`
/// naming the statement. The control, `--migrator-superuser`, does run it:
/// the check would see the file if the command ran.
fn copy_to_program_in_a_migration_runs_nothing_and_needs_superuser(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let pwned = format!(
        "/tmp/rollsafe-pwned-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    write(
        dir.path(),
        &[
            (
                "migrations/V1__notes.sql",
                "CREATE TABLE notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text NOT NULL);\n",
            ),
            (
                "migrations/V2__pwn.sql",
                &format!(
                    "ALTER TABLE notes ADD COLUMN seen boolean;\nCOPY (SELECT 1) TO PROGRAM 'touch {pwned}';\n"
                ),
            ),
        ],
    )?;
    let migrations = dir.path().join("migrations");
    let migrations = migrations.to_str().context("path")?;
    let (code, stdout, stderr) = run_verify(env, dir.path(), &["--migrations", migrations])?;
    for line in stdout.lines().filter(|l| l.contains("needs-superuser")) {
        eprintln!("    verify: {line}");
    }
    ensure!(code == 1, "exit {code}: {stderr}{stdout}");
    ensure!(
        stdout.contains("apply.needs-superuser")
            && stdout.contains("pg_execute_server_program")
            && stdout.contains("V2__pwn.sql:2"),
        "no needs-superuser finding naming the statement: {stdout}"
    );
    ensure!(
        !exists_on_server(env, &pwned)? && !Path::new(&pwned).exists(),
        "{pwned} exists: the program ran"
    );

    // The control: a superuser migrator runs the program (the rehearsal's
    // own sandbox is where it lands: a docker container, or the local
    // server's OS user on this machine).
    let (code, stdout, stderr) = run_verify(
        env,
        dir.path(),
        &["--migrations", migrations, "--migrator-superuser"],
    )?;
    let ran = exists_on_server(env, &pwned)?;
    remove_on_server(env, &pwned);
    ensure!(
        ran,
        "with --migrator-superuser the program did not run (exit {code}): the check above could not have seen it; {stderr}{stdout}"
    );
    ensure!(
        !stdout.contains("apply.needs-superuser"),
        "a superuser migrator was refused: {stdout}"
    );
    Ok(())
}

/// A project whose app (`-- role:`) reads and writes notes from V1 and,
/// from V2, tags; `tags_grant` is V2's GRANT (empty: none).
fn grants_project(dir: &Path, role: &str, tags_grant: &str) -> anyhow::Result<()> {
    write(
        dir,
        &[
            (
                "migrations/V1__notes.sql",
                &format!(
                    "CREATE TABLE notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text NOT NULL);\n\
                     GRANT SELECT, INSERT ON notes TO {role};\n"
                ),
            ),
            (
                "migrations/V2__tags.sql",
                &format!(
                    "CREATE TABLE tags (note_id bigint NOT NULL REFERENCES notes, tag text NOT NULL);\n{tags_grant}"
                ),
            ),
            (
                "apps/notes_v1.sql",
                &format!(
                    "-- app: notes_v1\n-- needs: 1\n-- role: {role}\n\n\
                     -- name: list_notes\nSELECT id, body FROM notes ORDER BY id LIMIT 10;\n\n\
                     -- name: add_note\n-- kind: write\nINSERT INTO notes (body) VALUES ($1) RETURNING id;\n"
                ),
            ),
            (
                "apps/notes_v1.seed.sql",
                "INSERT INTO notes (body) SELECT 'note ' || g FROM generate_series(1, {rows}) g;\n",
            ),
            (
                "apps/notes_v2.sql",
                &format!(
                    "-- app: notes_v2\n-- needs: 2\n-- role: {role}\n\n\
                     -- name: list_notes\nSELECT id, body FROM notes ORDER BY id LIMIT 10;\n\n\
                     -- name: tag_note\n-- kind: write\n-- param: $1 = (SELECT min(id) FROM notes)\n\
                     INSERT INTO tags (note_id, tag) VALUES ($1, $2);\n"
                ),
            ),
        ],
    )
}

/// V2 creates a table the app's role was never granted: production's app
/// fails on its first write there, so verify must too.
fn a_table_the_apps_role_was_not_granted_is_permission_denied(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let role = unique_role("notes_app");
    grants_project(dir.path(), &role, "")?;
    let r = rehearse(env, dir.path(), None)?;
    let f = expect_error(&r, 2, "compat.permission-denied")?;
    ensure!(
        f.message.contains("notes_v2")
            && f.message.contains("tag_note")
            && f.message.contains("public.tags")
            && f.message.contains("INSERT")
            && f.message.contains(&role),
        "{}",
        f.message
    );
    ensure!(f.evidence["privileges"] == "INSERT", "{:?}", f.evidence);
    Ok(())
}

fn the_same_table_with_its_grant_passes(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let role = unique_role("notes_app");
    grants_project(
        dir.path(),
        &role,
        &format!("GRANT SELECT, INSERT ON tags TO {role};\n"),
    )?;
    let r = rehearse(env, dir.path(), None)?;
    expect_pass(&r)
}

/// A project whose app writes notes as `role` (`-- role:`, or none: the
/// migrator's role); V2 is `v2`.
fn rls_project(dir: &Path, role: Option<&str>, v2: &str) -> anyhow::Result<()> {
    let grant = role.map_or(String::new(), |r| {
        format!("GRANT SELECT, INSERT ON notes TO {r};\n")
    });
    let declared = role.map_or(String::new(), |r| format!("-- role: {r}\n"));
    write(
        dir,
        &[
            (
                "migrations/V1__notes.sql",
                &format!(
                    "CREATE TABLE notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text NOT NULL);\n{grant}"
                ),
            ),
            ("migrations/V2__rls.sql", v2),
            (
                "apps/notes.sql",
                &format!(
                    "-- app: notes\n-- needs: 1\n{declared}\n\
                     -- name: list_notes\nSELECT id, body FROM notes ORDER BY id LIMIT 10;\n\n\
                     -- name: add_note\n-- kind: write\nINSERT INTO notes (body) VALUES ($1) RETURNING id;\n"
                ),
            ),
            (
                "apps/notes.seed.sql",
                "INSERT INTO notes (body) SELECT 'note ' || g FROM generate_series(1, {rows}) g;\n",
            ),
        ],
    )
}

/// ENABLE ROW LEVEL SECURITY without a policy is default deny for every
/// role but the owner: the app's writes fail, and the error names RLS.
fn row_level_security_without_a_policy_refuses_the_apps_rows(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let role = unique_role("notes_rls");
    rls_project(
        dir.path(),
        Some(&role),
        "ALTER TABLE notes ENABLE ROW LEVEL SECURITY;\n",
    )?;
    let r = rehearse(env, dir.path(), None)?;
    let f = expect_error(&r, 2, "compat.permission-denied")?;
    ensure!(
        f.message.contains("row-level security on public.notes")
            && f.message.contains("add_note")
            && f.evidence["row_security"] == true,
        "{}",
        f.message
    );
    Ok(())
}

fn row_level_security_with_a_policy_passes(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let role = unique_role("notes_rls");
    rls_project(
        dir.path(),
        Some(&role),
        &format!(
            "ALTER TABLE notes ENABLE ROW LEVEL SECURITY;\n\
             CREATE POLICY notes_app ON notes TO {role} USING (true) WITH CHECK (true);\n"
        ),
    )?;
    let r = rehearse(env, dir.path(), None)?;
    expect_pass(&r)
}

/// Without a declared role the app runs as the migrator, the owner of the
/// table: ENABLE alone does not bind an owner, FORCE does, as in a
/// one-role production. A superuser session would bypass both.
fn force_row_level_security_binds_the_owner_role_apps_run_as_by_default(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    rls_project(
        dir.path(),
        None,
        "ALTER TABLE notes ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;\n",
    )?;
    let r = rehearse(env, dir.path(), None)?;
    let f = expect_error(&r, 2, "compat.permission-denied")?;
    ensure!(f.message.contains("row-level security"), "{}", f.message);

    let dir = tempfile::tempdir()?;
    rls_project(
        dir.path(),
        None,
        "ALTER TABLE notes ENABLE ROW LEVEL SECURITY;\n",
    )?;
    let r = rehearse(env, dir.path(), None)?;
    expect_pass(&r)
}

/// An entry that holds a second statement (`SELECT 1; COPY … PROGRAM`) is
/// refused when the file is read: exit 2 naming the file and the line of
/// the second statement, before any database is touched.
fn an_app_entry_with_two_statements_is_refused_with_its_line(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let pwned = format!("/tmp/rollsafe-pwned-app-{:08x}", rand::random::<u32>());
    write(
        dir.path(),
        &[
            ("migrations/V1__notes.sql", "CREATE TABLE notes (id int);\n"),
            (
                "apps/notes.sql",
                &format!(
                    "-- app: notes\n-- needs: 1\n\n-- name: list\nSELECT id FROM notes;\n\n\
                     -- name: sneaky\nSELECT 1;\nCOPY (SELECT 1) TO PROGRAM 'touch {pwned}';\n"
                ),
            ),
        ],
    )?;
    let (code, stdout, stderr) = run_verify(
        env,
        dir.path(),
        &["--migrations", "migrations", "--apps", "apps"],
    )?;
    let line = stderr
        .lines()
        .find(|l| l.starts_with("rollsafe: error:"))
        .unwrap_or_default();
    eprintln!("    stderr: {line}");
    ensure!(code == 2, "exit {code}: {stderr}{stdout}");
    ensure!(
        line.contains("apps/notes.sql:9: statement `sneaky` holds more than one SQL statement"),
        "{stderr}"
    );
    ensure!(!exists_on_server(env, &pwned)?, "{pwned} exists");
    Ok(())
}

/// A migration that sleeps for an hour is cut at the statement timeout and
/// reported, also when it turns the timeout off for its own session (the
/// watchdog cancels it).
fn a_sleeping_migration_is_cut_at_the_statement_timeout(env: &TestEnv) -> anyhow::Result<()> {
    for (case, sleep) in [
        ("sleeps", "SELECT pg_sleep(3600);\n"),
        (
            "turns the timeout off and sleeps",
            "SET statement_timeout = 0;\nSELECT pg_sleep(3600);\n",
        ),
    ] {
        let dir = tempfile::tempdir()?;
        write(
            dir.path(),
            &[
                ("migrations/V1__notes.sql", "CREATE TABLE notes (id int);\n"),
                ("migrations/V2__sleep.sql", sleep),
            ],
        )?;
        let started = Instant::now();
        let catalog = Catalog::from_dir(&dir.path().join("migrations"))?;
        let r = shipped::verify(catalog)?
            .rows(ROWS)
            .statement_timeout(Duration::from_secs(2))
            .run(&env.sandbox)?;
        let took = started.elapsed();
        eprintln!("    {case}: run ended in {took:.1?}");
        let f = expect_error(&r, 2, "apply.statement-timeout")?;
        ensure!(
            f.message.contains("statement timeout (2s)") && f.message.contains("pg_sleep"),
            "{}",
            f.message
        );
        // The finding is the behaviour: a sleep left to run its hour would
        // end without one (and the run would not have returned yet). How
        // long the cut takes is printed above, not bounded: no wall-clock
        // limits in tests.
    }
    Ok(())
}

/// The generator's rows skip the per-row foreign-key checks through the
/// seeder role (PostgreSQL 15+): it may put its session in replica mode
/// and become the migrator; the migrator may not set that mode (a
/// migration that does fails as in production, where the migrator is no
/// superuser); both roles are gone once their handles are dropped (the
/// seeder's grant on the parameter would otherwise keep it).
fn the_seeder_may_skip_foreign_key_checks_and_the_migrator_may_not(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let sandbox = &env.sandbox;
    let db = env.fresh_database();
    let migrator = sandbox.create_login_role(&sandbox.unique_role_name("migrator"))?;
    let seeder = sandbox.create_seeder_role(&migrator)?;
    let mut names = vec![migrator.name().to_string()];
    let mut as_migrator = rollsafe::db::connect(&migrator.url(db.url(), &[]))?;
    let refused = as_migrator
        .batch_execute("SET session_replication_role = replica")
        .err()
        .context("the migrator set replica mode")?;
    ensure!(
        refused.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        "{refused}"
    );
    drop(as_migrator);
    match &seeder {
        None => ensure!(
            sandbox.server_major() < 15,
            "no seeder on PostgreSQL {}",
            sandbox.server_major()
        ),
        Some(seeder) => {
            names.push(seeder.name().to_string());
            let mut c = rollsafe::db::connect(&seeder.url(db.url(), &[]))?;
            c.batch_execute(&format!(
                "SET session_replication_role = replica; SET ROLE \"{}\"",
                migrator.name()
            ))?;
            let row = c.query_one(
                "SELECT current_user::text, current_setting('session_replication_role')",
                &[],
            )?;
            let (role, mode): (String, String) = (row.get(0), row.get(1));
            ensure!(
                role == migrator.name() && mode == "replica",
                "{role} {mode}"
            );
        }
    }
    drop(seeder);
    drop(migrator);
    let left: i64 = sandbox
        .connect_admin()?
        .query_one(
            "SELECT count(*) FROM pg_roles WHERE rolname = ANY($1)",
            &[&names],
        )?
        .get(0);
    ensure!(left == 0, "{left} of the roles {names:?} left behind");
    Ok(())
}

/// A history whose GRANTs name a role its project's init SQL creates:
/// without it, the refusal says where that role comes from (`--setup`);
/// with a setup file that creates it, the history rehearses.
fn a_role_the_history_assumes_comes_from_the_setup_file(env: &TestEnv) -> anyhow::Result<()> {
    let role = unique_role("reporting");
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            (
                "V1__invoices.sql",
                "CREATE TABLE invoices (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, total_cents bigint NOT NULL);",
            ),
            (
                "V2__reporting_grant.sql",
                &format!("GRANT SELECT ON invoices TO {role};"),
            ),
        ],
    )?;
    let run = |setup: Option<String>| -> anyhow::Result<Report> {
        Ok(shipped::verify(Catalog::from_dir(dir.path())?)?
            .rows(ROWS)
            .setup(setup)
            .run(&env.sandbox)?)
    };
    let without = run(None)?;
    let refused = without
        .errors()
        .find(|f| f.id == "apply.fails-on-empty" && f.migration == Some(2))
        .with_context(|| format!("{:?}", without.errors().map(|f| &f.id).collect::<Vec<_>>()))?;
    ensure!(
        refused.message.contains("does not exist") && refused.advice.contains("--setup FILE"),
        "{refused:?}"
    );
    let with = run(Some(format!("CREATE ROLE {role} NOLOGIN;")));
    let mut admin = env.sandbox.connect_admin()?;
    let _ = admin.batch_execute(&format!("DROP ROLE IF EXISTS {role}"));
    let with = with?;
    let errors: Vec<&str> = with.errors().map(|f| f.id.as_str()).collect();
    ensure!(errors.is_empty(), "{errors:?}");
    Ok(())
}

/// A project's init SQL that makes a schema and sets the database's
/// `search_path` to it, with migrations that name their tables
/// unqualified: `CREATE DATABASE … TEMPLATE` copies data, not `ALTER
/// DATABASE … SET`, so every rehearsal copy must get the setting too (it
/// held only on the first database: the seeded path then failed with
/// "relation … does not exist" and the two paths' schemas differed in
/// how their foreign keys were spelt). A schema the setup file makes
/// belongs to the superuser: without a grant, the refusal says which.
fn the_setup_files_database_settings_hold_in_every_rehearsal_database(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            (
                "V1__pantry.sql",
                "CREATE TABLE pantry (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, label text NOT NULL);",
            ),
            (
                "V2__jars.sql",
                "CREATE TABLE jars (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, pantry_id bigint NOT NULL REFERENCES pantry (id));",
            ),
            ("V3__jar_note.sql", "ALTER TABLE jars ADD COLUMN note text;"),
        ],
    )?;
    let run = |setup: &str, since: Option<i32>| -> anyhow::Result<Report> {
        let verify = shipped::verify(Catalog::from_dir(dir.path())?)?
            .rows(ROWS)
            .setup(Some(setup.to_string()));
        let verify = match since {
            Some(v) => verify.since(v)?,
            None => verify,
        };
        Ok(verify.run(&env.sandbox)?)
    };
    let setup = "CREATE SCHEMA larder;
        GRANT USAGE, CREATE ON SCHEMA larder TO PUBLIC;
        DO $$ BEGIN
          EXECUTE format('ALTER DATABASE %I SET search_path TO larder, public', current_database());
        END $$;";
    let report = run(setup, Some(1))?;
    let errors: Vec<String> = report
        .errors()
        .map(|f| format!("{} V{:?}: {}", f.id, f.migration, f.message))
        .collect();
    ensure!(errors.is_empty(), "{errors:#?}");
    for v in [2, 3] {
        ensure!(
            report
                .findings
                .iter()
                .any(|f| f.id == "apply.applies" && f.migration == Some(v)),
            "V{v} not applied: {:?}",
            report.findings.iter().map(|f| &f.id).collect::<Vec<_>>()
        );
    }
    // The tables are where the setting put them, on the seeded path too.
    ensure!(
        !report.findings.iter().any(|f| f.id == "post.paths-differ"),
        "the paths differ"
    );

    // The schema without a grant: the migrator may not create in it
    // (named: an unqualified name would skip a schema it may not use).
    let qualified = tempfile::tempdir()?;
    write(
        qualified.path(),
        &[(
            "V1__pantry.sql",
            "CREATE TABLE larder.pantry (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY);",
        )],
    )?;
    let refused = shipped::verify(Catalog::from_dir(qualified.path())?)?
        .rows(ROWS)
        .setup(Some("CREATE SCHEMA larder;".into()))
        .run(&env.sandbox)?;
    let denied = refused
        .errors()
        .find(|f| f.id == "apply.needs-superuser" && f.migration == Some(1))
        .with_context(|| format!("{:?}", refused.errors().map(|f| &f.id).collect::<Vec<_>>()))?;
    ensure!(
        denied
            .message
            .contains("permission denied for schema larder")
            && denied.advice.contains("GRANT USAGE, CREATE ON SCHEMA")
            && denied.advice.contains("--migrator-superuser"),
        "{denied:?}"
    );
    Ok(())
}

/// A role one migration creates and a later one drops: the rehearsal's
/// copies of the database all hold the first migration's grants to it, so
/// PostgreSQL refuses the drop in any one of them. That is the rehearsal's
/// doing, not the migration's: skipped, saying so, and no role is left on
/// the server.
fn dropping_a_role_the_copies_share_is_skipped_not_an_error(env: &TestEnv) -> anyhow::Result<()> {
    let role = unique_role("crate_auditor");
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            (
                "V1__crates.sql",
                "CREATE TABLE crates (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, label text NOT NULL);",
            ),
            (
                "V2__auditor.sql",
                &format!("CREATE ROLE {role} NOLOGIN;\nGRANT SELECT ON crates TO {role};"),
            ),
            (
                "V3__drop_auditor.sql",
                &format!("REVOKE ALL ON crates FROM {role};\nDROP ROLE {role};"),
            ),
        ],
    )?;
    let report = shipped::verify(Catalog::from_dir(dir.path())?)?
        .rows(ROWS)
        .superuser_migrator(true)
        .run(&env.sandbox)?;
    let errors: Vec<String> = report
        .errors()
        .map(|f| format!("{} {}", f.id, f.message))
        .collect();
    ensure!(errors.is_empty(), "{errors:#?}");
    let skipped = report
        .findings
        .iter()
        .find(|f| f.id == "apply.role-shared-by-copies" && f.migration == Some(3))
        .with_context(|| {
            format!(
                "{:?}",
                report.findings.iter().map(|f| &f.id).collect::<Vec<_>>()
            )
        })?;
    ensure!(
        skipped.severity == Severity::Skipped && skipped.message.contains(&role),
        "{skipped:?}"
    );
    let left: i64 = env
        .sandbox
        .connect_admin()?
        .query_one(
            "SELECT count(*) FROM pg_roles WHERE rolname LIKE $1",
            &[&format!("{role}%")],
        )?
        .get(0);
    ensure!(left == 0, "{left} role(s) named {role}… left on the server");
    Ok(())
}

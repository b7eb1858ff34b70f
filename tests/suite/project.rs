//! Any project's files: `rollsafe.toml`, `--apps DIR`, migration layouts,
//! `rollsafe capture`, and the bookshop example, through the real binary
//! and a real database of the suite's server; then `verify` on three
//! projects of different shapes (the bookshop example and the fixtures in
//! `tests/fixtures/projects/`): their correct migrations pass, and each
//! unsafe change written as their last migration is caught.

use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Context};
use rollsafe::app::replay;
use rollsafe::app::{load_dir, AppVersion, Kind};
use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::report::{Report, Severity};
use rollsafe::sandbox::BackendKind;
use rollsafe::seed::generate::{self, RowCounts};

use libtest_mimic::Trial;

use crate::common::{cli, output, password_of, repo_root, trial, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    // A server of its own, started with pg_stat_statements preloaded: an
    // existing server (the server backend) cannot be restarted with it, so
    // there the test is reported as ignored, never as passed.
    let on_server = env.sandbox.kind() == BackendKind::Server;
    let preloaded = crate::trials!(
        "project",
        env,
        [capture_writes_the_apps_statements_from_pg_stat_statements]
    )
    .into_iter()
    .map(|t| t.with_ignored_flag(on_server));
    let mut trials = crate::trials!(
        "project",
        env,
        [
            bare_verify_reads_rollsafe_toml_and_flags_override_it,
            config_errors_are_one_line_and_exit_2,
            layout_and_apps_errors_are_one_line_and_exit_2,
            migrate_records_sqlx_history_and_refuses_a_layout_it_cannot_record,
            capture_without_pg_stat_statements_says_how_to_enable_it,
            a_server_backend_refuses_start_settings_it_cannot_apply,
            capture_classifies_what_the_database_recorded,
            bookshop_example_migrates_seeds_and_runs_its_apps_in_their_windows,
            bookshop_correct_migrations_pass,
            bookshop_renamed_column_an_app_reads_is_caught,
            ledger_correct_migrations_pass_on_generated_rows,
            ledger_not_null_without_default_breaks_the_old_apps_insert,
            ledger_dropped_column_an_app_reads_is_caught,
            forum_correct_migrations_pass,
            forum_renamed_column_is_caught_for_the_live_app_only,
            dropping_the_retired_apps_column_is_caught_when_it_is_not_retired,
            a_directory_mixing_the_projects_layouts_is_refused_with_file_names,
            forum_without_seed_files_passes_on_generated_rows,
            the_generator_seeds_every_table_of_both_fixture_schemas,
            a_seed_that_cannot_run_twice_is_a_warning_that_says_why,
            an_app_statement_failing_before_and_after_is_not_the_migrations_doing,
            migrations_alone_are_seeded_by_the_generator_and_judged,
            a_failure_on_generated_rows_does_not_blind_the_later_migrations,
            a_table_made_earlier_in_the_same_deploy_is_not_seeded,
            tables_a_trigger_makes_per_row_are_not_the_migrations_doing,
            a_write_failing_on_rollsafes_value_is_skipped_and_run_again,
            a_migration_reaching_no_table_is_not_said_to_lack_rows,
            a_table_the_apps_only_read_gets_generated_rows_and_its_rewrite_is_caught,
        ]
    );
    trials.extend(unsafe_changes(env));
    trials.extend(preloaded);
    trials
}

/// Runs the binary in `dir` without the suite's backend variables (a test
/// that needs the server passes `--postgres`).
fn run_in(dir: &Path, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    output(cli().args(args).current_dir(dir))
}

/// The `rollsafe: error:` lines of a run (progress lines are not errors).
fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("rollsafe: error:"))
        .collect()
}

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

/// A tiny sqlx project: two timestamped migrations and one app.
fn sqlx_project(dir: &Path) -> anyhow::Result<()> {
    write(
        dir,
        &[
            (
                "db/20240101120000_notes.sql",
                "CREATE TABLE notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text NOT NULL);",
            ),
            (
                "db/20240201120000_notes_pinned.sql",
                "ALTER TABLE notes ADD COLUMN pinned boolean NOT NULL DEFAULT false;",
            ),
            (
                "apps/notes_v1.sql",
                "-- app: notes_v1\n-- needs: 20240101120000\n\n-- name: add\nINSERT INTO notes (body) VALUES ($1::text);\n",
            ),
        ],
    )
}

/// `--static-only` runs everything up to the rehearsal without a server,
/// so what the file chose (migrations, layout, apps, since) shows in the
/// report's header.
fn bare_verify_reads_rollsafe_toml_and_flags_override_it(_: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    sqlx_project(dir.path())?;
    write(
        dir.path(),
        &[(
            "rollsafe.toml",
            "migrations = \"db\"\napps = \"apps\"\nlayout = \"sqlx\"\nsince = \"20240101120000\"\n",
        )],
    )?;
    let (code, stdout, stderr) = run_in(dir.path(), &["verify", "--static-only"])?;
    ensure!(code == 0, "exit {code}: {stdout}{stderr}");
    let db = dir.path().join("db").display().to_string();
    ensure!(
        stdout.contains(&db) && stdout.contains("20240201120000_notes_pinned.sql"),
        "the file's migrations were not rehearsed: {stdout}"
    );
    ensure!(
        !stdout.contains("20240101120000_notes.sql"),
        "since = 20240101120000 rehearses only what comes after it: {stdout}"
    );
    // The report names migrations as the project does, not by rollsafe's
    // ordinals.
    // (The temporary directory's random name may hold "V2" itself.)
    let labels = stdout.replace(&dir.path().display().to_string(), "<dir>");
    ensure!(
        labels.contains("rehearsed:  20240201120000 (20240101120000..20240101120000")
            && !labels.contains("V2"),
        "versions are not the project's labels: {stdout}"
    );

    // A flag wins over the file: --migrations, --layout and --since from
    // the command line replace the file's.
    let other = tempfile::tempdir()?;
    write(
        other.path(),
        &[("V1__t.sql", "CREATE TABLE t (id bigint);")],
    )?;
    let other_dir = other.path().display().to_string();
    let (code, stdout, stderr) = run_in(
        dir.path(),
        &[
            "verify",
            "--static-only",
            "--migrations",
            &other_dir,
            "--layout",
            "refinery",
            "--since",
            "V1",
        ],
    )?;
    // --apps from the file still resolves its `needs` against the flag's
    // migrations: a sqlx timestamp is no version of a refinery set.
    ensure!(
        code == 2 && error_lines(&stderr).len() == 1,
        "exit {code}: {stdout}{stderr}"
    );
    ensure!(
        stderr
            .contains("notes_v1.sql: `-- needs: 20240101120000` is not a schema version number of")
            && stderr.contains(&other_dir),
        "{stderr}"
    );

    // --config names the file from anywhere; its paths follow the file.
    let elsewhere = tempfile::tempdir()?;
    let config = dir.path().join("rollsafe.toml").display().to_string();
    let (code, stdout, stderr) = run_in(
        elsewhere.path(),
        &["verify", "--static-only", "--config", &config],
    )?;
    ensure!(
        code == 0 && stdout.contains(&db),
        "exit {code}: {stdout}{stderr}"
    );
    Ok(())
}

fn config_errors_are_one_line_and_exit_2(_: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[(
            "rollsafe.toml",
            "rows = 100\nmigratons = \"db\"\npostgres = \"postgres://u:Secr3tPw@127.0.0.1:1/x\"\n",
        )],
    )?;
    let (code, stdout, stderr) = run_in(dir.path(), &["verify"])?;
    ensure!(
        code == 2 && stdout.is_empty(),
        "exit {code}: {stdout}{stderr}"
    );
    let errors = error_lines(&stderr);
    ensure!(errors.len() == 1, "{stderr}");
    ensure!(
        errors[0].contains("rollsafe.toml:2: unknown field `migratons`"),
        "{stderr}"
    );
    ensure!(!stderr.contains("Secr3tPw"), "{stderr}");

    let (code, _, stderr) = run_in(dir.path(), &["verify", "--config", "nowhere.toml"])?;
    ensure!(
        code == 2
            && error_lines(&stderr).len() == 1
            && stderr.contains("config file nowhere.toml does not exist"),
        "exit {code}: {stderr}"
    );

    // A backend URL with a password, from the file: an unreachable server
    // is one line without the password.
    write(
        dir.path(),
        &[(
            "rollsafe.toml",
            "postgres = \"postgres://u:Secr3tPw@127.0.0.1:1/x\"\n",
        )],
    )?;
    let (code, _, stderr) = run_in(dir.path(), &["verify"])?;
    ensure!(code == 2, "exit {code}: {stderr}");
    ensure!(
        !stderr.contains("Secr3tPw") && error_lines(&stderr).len() == 1,
        "{stderr}"
    );
    Ok(())
}

fn layout_and_apps_errors_are_one_line_and_exit_2(_: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            ("mixed/V1__a.sql", "SELECT 1;"),
            ("mixed/2_b.sql", "SELECT 2;"),
            ("ok/V1__a.sql", "CREATE TABLE a (id bigint);"),
            ("ok/V2__b.sql", "ALTER TABLE a ADD b text;"),
            (
                "apps/a.sql",
                "-- app: a\n-- needs: 2\n-- retired: 2\n-- name: s\nSELECT id FROM a;\n",
            ),
        ],
    )?;
    let (code, _, stderr) = run_in(
        dir.path(),
        &["verify", "--static-only", "--migrations", "mixed"],
    )?;
    ensure!(
        code == 2 && error_lines(&stderr).len() == 1,
        "exit {code}: {stderr}"
    );
    ensure!(
        stderr.contains("mixed mixes migration layouts (V1__a.sql is refinery, 2_b.sql is sqlx)"),
        "{stderr}"
    );

    let (code, _, stderr) = run_in(
        dir.path(),
        &[
            "verify",
            "--static-only",
            "--migrations",
            "ok",
            "--layout",
            "golang-migrate",
        ],
    )?;
    ensure!(
        code == 2 && stderr.contains("V1__a.sql: not a golang-migrate migration file name"),
        "exit {code}: {stderr}"
    );

    let (code, _, stderr) = run_in(dir.path(), &["verify", "--static-only", "--layout", "sqlx"])?;
    ensure!(
        code == 2
            && error_lines(&stderr).len() == 1
            && stderr
                .contains("--layout sqlx names the layout of --migrations DIR, and none was given"),
        "exit {code}: {stderr}"
    );

    let (code, _, stderr) = run_in(
        dir.path(),
        &[
            "verify",
            "--static-only",
            "--migrations",
            "ok",
            "--apps",
            "apps",
        ],
    )?;
    ensure!(
        code == 2 && error_lines(&stderr).len() == 1,
        "exit {code}: {stderr}"
    );
    ensure!(
        stderr.contains("a.sql: `-- retired: 2` is not after `-- needs: 2`"),
        "{stderr}"
    );

    let (code, _, stderr) = run_in(
        dir.path(),
        &[
            "verify",
            "--static-only",
            "--migrations",
            "ok",
            "--apps",
            "no-such-dir",
        ],
    )?;
    ensure!(
        code == 2 && stderr.contains("apps directory no-such-dir does not exist"),
        "exit {code}: {stderr}"
    );
    Ok(())
}

/// `migrate` on a sqlx project records each migration in sqlx's own
/// `_sqlx_migrations` (so sqlx sees it applied) and `status` reads it back;
/// a layout whose history rollsafe does not write (Flyway) is refused in
/// one line, changing nothing.
fn migrate_records_sqlx_history_and_refuses_a_layout_it_cannot_record(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    sqlx_project(dir.path())?;
    let db = env.fresh_database();
    let (code, stdout, stderr) = run_in(
        dir.path(),
        &["migrate", "--database-url", db.url(), "--migrations", "db"],
    )?;
    ensure!(code == 0, "migrate: exit {code}: {stdout}{stderr}");
    let mut c = db.connect()?;
    let rows: Vec<(i64, String, bool, i32)> = c
        .query(
            "SELECT version, description, success, octet_length(checksum) FROM _sqlx_migrations ORDER BY version",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    ensure!(
        rows == [
            (20240101120000, "notes".to_string(), true, 48),
            (20240201120000, "notes pinned".to_string(), true, 48)
        ],
        "_sqlx_migrations: {rows:?}"
    );
    let (code, stdout, stderr) = run_in(
        dir.path(),
        &["status", "--database-url", db.url(), "--migrations", "db"],
    )?;
    ensure!(
        code == 0 && stdout.contains("_sqlx_migrations: at 20240201120000"),
        "status: exit {code}: {stdout}{stderr}"
    );

    std::fs::create_dir_all(dir.path().join("fly"))?;
    std::fs::write(
        dir.path().join("fly/V1.1__notes.sql"),
        "CREATE TABLE fly_notes (id int);",
    )?;
    let fresh = env.fresh_database();
    let (code, stdout, stderr) = run_in(
        dir.path(),
        &[
            "migrate",
            "--database-url",
            fresh.url(),
            "--migrations",
            "fly",
        ],
    )?;
    ensure!(
        code == 2 && stdout.is_empty(),
        "migrate: exit {code}: {stdout}{stderr}"
    );
    ensure!(
        error_lines(&stderr).len() == 1
            && stderr.contains("fly holds flyway migrations, and rollsafe does not write flyway's history table (flyway_schema_history)"),
        "{stderr}"
    );
    let tables: i64 = fresh
        .connect()?
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )?
        .get(0);
    ensure!(tables == 0, "{tables} tables were created");
    Ok(())
}

/// The password in the suite's URL, if it has one (to prove it is never
/// printed).
fn capture_without_pg_stat_statements_says_how_to_enable_it(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let dir = tempfile::tempdir()?;
    let run = || {
        run_in(
            dir.path(),
            &[
                "capture",
                "--database-url",
                db.url(),
                "--app",
                "shop",
                "--needs",
                "3",
                "--out",
                "shop.sql",
            ],
        )
    };
    let (code, stdout, stderr) = run()?;
    ensure!(
        code == 2 && stdout.is_empty(),
        "exit {code}: {stdout}{stderr}"
    );
    ensure!(error_lines(&stderr).len() == 1, "{stderr}");
    ensure!(
        stderr.contains(&format!(
            "pg_stat_statements is not installed in database {}",
            db.name()
        )) && stderr.contains("shared_preload_libraries")
            && stderr.contains("CREATE EXTENSION pg_stat_statements"),
        "{stderr}"
    );
    let pw = password_of(db.url())?;
    ensure!(!stderr.contains(&pw), "the password was printed: {stderr}");
    ensure!(
        !dir.path().join("shop.sql").exists(),
        "no set is written on error"
    );

    // Installed but not loaded at server start: the view cannot be read,
    // and the message says what the administrator must do.
    let mut c = db.connect()?;
    // The suite's servers ship the extension (contrib) and never preload
    // it: the case is always there to measure.
    let preloaded: String = c.query_one("SHOW shared_preload_libraries", &[])?.get(0);
    ensure!(
        !preloaded.contains("pg_stat_statements"),
        "the suite's server preloads pg_stat_statements ({preloaded}): the not-loaded case cannot be measured"
    );
    c.batch_execute("CREATE EXTENSION pg_stat_statements")
        .context("installing pg_stat_statements (contrib) for the not-loaded case")?;
    let (code, _, stderr) = run()?;
    ensure!(
        code == 2
            && error_lines(&stderr).len() == 1
            && stderr.contains("installed in database")
            && stderr.contains("did not load it at start")
            && stderr.contains("add pg_stat_statements to shared_preload_libraries"),
        "exit {code}: {stderr}"
    );

    // Bad arguments are refused before connecting.
    let (code, _, stderr) = run_in(
        dir.path(),
        &[
            "capture",
            "--database-url",
            "postgres://u:Secr3tPw@127.0.0.1:1/x",
            "--app",
            "my app",
            "--needs",
            "3",
        ],
    )?;
    ensure!(
        code == 2 && stderr.contains("--app \"my app\" is not a statement set name"),
        "exit {code}: {stderr}"
    );
    let (code, _, stderr) = run_in(
        dir.path(),
        &[
            "capture",
            "--database-url",
            "postgres://u:Secr3tPw@127.0.0.1:1/x",
            "--app",
            "shop",
            "--needs",
            "3",
        ],
    )?;
    ensure!(
        code == 2 && error_lines(&stderr).len() == 1 && !stderr.contains("Secr3tPw"),
        "exit {code}: {stderr}"
    );
    Ok(())
}

/// An existing server cannot be restarted with `shared_preload_libraries`:
/// the sandbox says so instead of handing out a server without it.
fn a_server_backend_refuses_start_settings_it_cannot_apply(env: &TestEnv) -> anyhow::Result<()> {
    let err = match rollsafe::sandbox::SandboxBuilder::default()
        .backend(rollsafe::sandbox::BackendChoice::Server(
            env.sandbox.admin_url().to_string(),
        ))
        .server_setting("shared_preload_libraries", "pg_stat_statements")
        .start()
    {
        Ok(_) => anyhow::bail!("a server backend started with a setting it cannot apply"),
        Err(e) => e.to_string(),
    };
    ensure!(
        err.starts_with("an existing server (a --postgres URL) cannot be started with shared_preload_libraries=pg_stat_statements"),
        "{err}"
    );
    let pw = password_of(env.sandbox.admin_url())?;
    ensure!(!err.contains(&pw), "{err}");
    Ok(())
}

/// The whole path on a real server with pg_stat_statements loaded: an
/// app's statements run (extended protocol with parameters, a simple-query
/// constant, a transaction), `rollsafe capture` writes the set, and the set
/// is one `--apps` reads, with kinds from the parse and every statement
/// preparing on the schema it came from.
fn capture_writes_the_apps_statements_from_pg_stat_statements(env: &TestEnv) -> anyhow::Result<()> {
    let sandbox = env
        .builder
        .clone()
        .server_setting("shared_preload_libraries", "pg_stat_statements")
        .start()?;
    let db = sandbox.fresh_database()?;
    let mut c = db.connect()?;
    c.batch_execute(
        "CREATE EXTENSION pg_stat_statements;
         CREATE TABLE books (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, title text NOT NULL, stock bigint NOT NULL DEFAULT 0);",
    )?;
    // What the app runs.
    for i in 0..3_i64 {
        c.execute(
            "INSERT INTO books (title) VALUES ($1)",
            &[&format!("book {i}")],
        )?;
        c.query("SELECT id, title FROM books WHERE id = $1", &[&i])?;
        let mut tx = c.transaction()?;
        tx.query(
            "WITH sold AS (UPDATE books SET stock = stock - $1 WHERE id = $2 RETURNING id) SELECT count(*) FROM sold",
            &[&1_i64, &i],
        )?;
        tx.commit()?;
    }
    c.batch_execute("SELECT count(*) FROM books WHERE title = 'book 1'")?;

    let dir = tempfile::tempdir()?;
    let capture = |out: &str| {
        run_in(
            dir.path(),
            &[
                "capture",
                "--database-url",
                db.url(),
                "--app",
                "shop",
                "--needs",
                "1",
                "--out",
                out,
            ],
        )
    };
    // A file that cannot be written is one line.
    let (code, _, stderr) = capture("missing/shop.sql")?;
    ensure!(
        code == 2
            && error_lines(&stderr).len() == 1
            && stderr.contains("cannot write missing/shop.sql"),
        "exit {code}: {stderr}"
    );
    std::fs::create_dir(dir.path().join("apps"))?;
    let (code, stdout, stderr) = capture("apps/shop.sql")?;
    ensure!(
        code == 0 && stdout.is_empty(),
        "exit {code}: {stdout}{stderr}"
    );
    let pw = password_of(db.url())?;
    ensure!(!stderr.contains(&pw), "the password was printed: {stderr}");
    ensure!(stderr.contains("written to apps/shop.sql"), "{stderr}");
    let text = std::fs::read_to_string(dir.path().join("apps/shop.sql"))?;

    write(
        dir.path(),
        &[(
            "migrations/V1__books.sql",
            "CREATE TABLE books (id bigint);",
        )],
    )?;
    let catalog = Catalog::from_dir(&dir.path().join("migrations"))?;
    let apps = load_dir(&dir.path().join("apps"), &catalog)?;
    let app = &apps[0];
    ensure!(app.name == "shop" && app.needs == 1, "{text}");
    let kind = |name: &str| app.declared_kind(name);
    ensure!(kind("insert_books") == Some(Kind::Write), "{text}");
    ensure!(kind("update_books") == Some(Kind::Write), "{text}");
    ensure!(kind("select_books") == Some(Kind::Read), "{text}");
    let insert = app.set.get("insert_books")?;
    ensure!(
        insert.sql.contains("$1"),
        "normalised with parameters: {text}"
    );
    ensure!(
        insert.meta_values("calls").next() == Some("3"),
        "calls are recorded: {text}"
    );
    // The simple-query constant was normalised too.
    ensure!(
        app.set
            .statements()
            .iter()
            .any(|s| s.sql.contains("title = $1") && s.sql.contains("count(*)")),
        "{text}"
    );
    // The CREATE TABLE is kept for a person to judge; transaction control
    // and capture's own reads are not there.
    let reviewed: Vec<&str> = app
        .set
        .statements()
        .iter()
        .filter(|s| s.meta_values("review").next().is_some())
        .map(|s| s.name.as_str())
        .collect();
    ensure!(reviewed == ["create_books"], "{text}");
    ensure!(
        !text.contains("pg_stat_statements s")
            && !text.contains("pg_extension")
            && !text.contains("current_database")
            && !text.contains("\nBEGIN")
            && !text.contains("COMMIT;"),
        "{text}"
    );
    let kinded: Vec<_> = app
        .set
        .statements()
        .iter()
        .filter(|s| app.declared_kind(&s.name).is_some())
        .collect();
    ensure!(
        !kinded.is_empty(),
        "no statement with a kind to prepare: {text}"
    );
    for st in kinded {
        c.prepare(&st.sql)
            .with_context(|| format!("{} does not prepare: {}", st.name, st.sql))?;
    }
    Ok(())
}

/// The statements a database recorded, through the code path the
/// `pg_stat_statements` query feeds ([`rollsafe::capture::write_set`]):
/// the suite's server does not preload the extension, so the rows are the
/// ones `pg_stat_statements` stores (normalised, `$n` parameters), read
/// here from `pg_prepared_statements` after the app-like statements were
/// prepared on the real schema, and the written set is then replayed
/// through `rollsafe verify --apps` loading.
fn capture_classifies_what_the_database_recorded(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let mut c = db.connect()?;
    for sql in [
        "CREATE TABLE books (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, title text NOT NULL, stock bigint NOT NULL DEFAULT 0)",
        "PREPARE q1 AS SELECT id, title FROM books WHERE id = $1",
        "PREPARE q2 AS INSERT INTO books (title) VALUES ($1) RETURNING id",
        "PREPARE q3 AS WITH sold AS (UPDATE books SET stock = stock - $1 WHERE id = $2 RETURNING id) SELECT count(*) FROM sold",
        "PREPARE q4 AS DELETE FROM books WHERE id = $1",
    ] {
        c.batch_execute(sql)?;
    }
    let rows: Vec<rollsafe::capture::Captured> = c
        .query(
            "SELECT regexp_replace(statement, '^PREPARE \\w+ AS ', ''), 1::int8 FROM pg_prepared_statements WHERE name LIKE 'q_' ORDER BY name",
            &[],
        )?
        .iter()
        .map(|r| rollsafe::capture::Captured {
            query: r.get(0),
            calls: r.get(1),
        })
        .chain([rollsafe::capture::Captured {
            query: "BEGIN".into(),
            calls: 9,
        }])
        .collect();
    ensure!(rows.len() == 5, "{rows:?}");
    let header = rollsafe::capture::Header::new("shop", "1", "the test database".into())?;
    let set = rollsafe::capture::write_set(&header, &rows);
    ensure!(
        (set.reads, set.writes, set.to_review, set.skipped) == (1, 3, 0, 1),
        "{}",
        set.text
    );

    // The written file is a statement set `--apps` reads, and every
    // statement prepares on the schema it was captured from.
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            (
                "migrations/V1__books.sql",
                "CREATE TABLE books (id bigint);",
            ),
            ("apps/shop.sql", &set.text),
        ],
    )?;
    let catalog = Catalog::from_dir(&dir.path().join("migrations"))?;
    let apps = load_dir(&dir.path().join("apps"), &catalog)?;
    ensure!(apps.len() == 1 && apps[0].name == "shop" && apps[0].needs == 1);
    let writers: Vec<&str> = apps[0]
        .set
        .statements()
        .iter()
        .filter(|s| apps[0].declared_kind(&s.name) == Some(Kind::Write))
        .map(|s| s.name.as_str())
        .collect();
    ensure!(
        writers == ["insert_books", "update_books", "delete_books"],
        "{writers:?}\n{}",
        set.text
    );
    for (i, st) in apps[0].set.statements().iter().enumerate() {
        c.batch_execute(&format!("PREPARE replay{i} AS {}", st.sql))
            .with_context(|| format!("{} does not prepare", st.name))?;
    }
    Ok(())
}

/// The README's example: its migrations apply with the real migrator, each
/// app's seed writes rows at the first version of its window, and every
/// statement of each app executes (rolled back) on every version it may run
/// on — and shop_v1, retired at V4, would not.
fn bookshop_example_migrates_seeds_and_runs_its_apps_in_their_windows(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let root = repo_root().join("examples/bookshop");
    let catalog = Catalog::from_dir(&root.join("migrations"))?;
    let apps = load_dir(&root.join("apps"), &catalog)?;
    let names: Vec<(&str, i32, Option<i32>)> = apps
        .iter()
        .map(|a| (a.name.as_str(), a.needs, a.retired))
        .collect();
    ensure!(
        names == [("shop_v1", 2, Some(4)), ("shop_v2", 3, None)],
        "{names:?}"
    );
    ensure!(
        apps.iter().all(|a| a.seed_sql.is_some()),
        "both apps have seeds"
    );
    let latest = catalog.latest();
    let db = env.fresh_database();
    let mut c = db.connect()?;
    for v in catalog.migrations().iter().map(|m| m.version) {
        let options = rollsafe::migrate::Options {
            target: Some(v),
            ..Default::default()
        };
        rollsafe::migrate::migrate(db.url(), &catalog, &options)?;
        for app in apps.iter().filter(|a| a.needs == v) {
            let seed = app.seed_sql.as_deref().unwrap_or_default();
            c.batch_execute(&seed.replace("{rows}", "50"))
                .with_context(|| format!("{}'s seed on V{v}", app.name))?;
        }
        // The verifier's own replay: every statement prepared and executed
        // with its declared (or generated) parameters, rolled back.
        let running: Vec<_> = apps.iter().filter(|a| a.may_run_on(v)).collect();
        // Before shop_v1's first version no app runs; from it on, one does.
        ensure!(
            running.is_empty() == (v < 2),
            "apps running on V{v}: {:?}",
            running.iter().map(|a| &a.name).collect::<Vec<_>>()
        );
        for app in running {
            let outcomes = replay::replay_all(&mut c, app)?;
            ensure!(
                !outcomes.is_empty() && outcomes.len() == app.set.statements().len(),
                "{} replayed {} statements on V{v}",
                app.name,
                outcomes.len()
            );
            for o in outcomes {
                if let Some((step, message)) = o.failure {
                    anyhow::bail!(
                        "{}.{} fails on V{v} at {step:?}: {message}",
                        app.name,
                        o.statement
                    );
                }
            }
        }
    }
    // The retired app really could not run on the last version: that is why
    // its window ends there.
    let v1 = &apps[0];
    ensure!(!v1.may_run_on(latest) && !v1.live_during(latest));
    let failed: Vec<String> = replay::replay_all(&mut c, v1)?
        .into_iter()
        .filter(|o| o.failure.is_some())
        .map(|o| o.statement)
        .collect();
    ensure!(
        failed == ["place_order", "orders_for_book"],
        "shop_v1 names gift_note, dropped at V4: {failed:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------
// Other projects' shapes: the bookshop example and two fixture projects
// (tests/fixtures/projects/): `ledger` (refinery layout; uuid keys, a
// composite primary and foreign key, an enum, a domain, jsonb; no seed
// files, so the catalogue generator writes its rows) and `forum` (sqlx
// layout with timestamp versions; serial and identity ids, a
// self-referencing foreign key, CHECKs, text[], UNIQUE text; seed files
// and an app retired before the last migration). Each project's correct
// migrations pass with zero errors; each unsafe change, written as the
// last migration on top of them, is caught with the check's error.
// ---------------------------------------------------------------------

/// Rows per rehearsal: enough for work proportional to a table to show,
/// small because many rehearsals share two cores in CI.
const PROJECT_ROWS: u64 = 500;

/// A project's directory: the example or a fixture.
fn project_root(name: &str) -> std::path::PathBuf {
    match name {
        "bookshop" => repo_root().join("examples/bookshop"),
        _ => repo_root().join("tests/fixtures/projects").join(name),
    }
}

/// The file name a proposed migration takes in the project's layout:
/// after its last one (refinery V5, a later sqlx timestamp).
fn proposed_file(project: &str) -> &'static str {
    match project {
        "forum" => "20240401090000_proposed.sql",
        _ => "V5__proposed.sql",
    }
}

/// The project's migrations copied into a temporary directory, with
/// `last` as a proposed migration after them.
fn migrations_with(project: &str, last: Option<&str>) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for entry in std::fs::read_dir(project_root(project).join("migrations"))? {
        let path = entry?.path();
        if let Some(file) = path.file_name() {
            std::fs::copy(&path, dir.path().join(file))?;
        }
    }
    if let Some(sql) = last {
        std::fs::write(dir.path().join(proposed_file(project)), sql)?;
    }
    Ok(dir)
}

/// Another project's migrations without any app (no `--apps`): none of the
/// shipped apps is replayed on them, the generator seeds their tables, so
/// a blocking index build is measured and caught, and the correct
/// migrations before it pass.
/// A migration that touches no table that existed before it (the
/// generator, filling only what a migration reaches, seeds nothing for
/// it) has nothing that could grow with a table: that is said, not a
/// skip blaming the apps, and the seeded apply does not claim a workload.
fn a_migration_reaching_no_table_is_not_said_to_lack_rows(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            (
                "V1__parcels.sql",
                "CREATE TABLE parcels (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, weight_g int NOT NULL);",
            ),
            (
                "V2__depots.sql",
                "CREATE TABLE depots (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, city text NOT NULL);",
            ),
        ],
    )?;
    let r = shipped::verify(Catalog::from_dir(dir.path())?)?
        .rows(PROJECT_ROWS)
        .run(&env.sandbox)?;
    let v2: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.migration == Some(2) && f.check == "rewrite")
        .map(|f| format!("{} {:?}: {}", f.id, f.severity, f.message))
        .collect();
    ensure!(
        !v2.iter()
            .any(|f| f.starts_with("rewrite.no-rows-to-measure"))
            && v2.iter().any(|f| f.starts_with("rewrite.measured")
                && f.contains("no lock on and does no work in any table")),
        "{v2:#?}"
    );
    Ok(())
}

fn migrations_alone_are_seeded_by_the_generator_and_judged(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            (
                "V1__notes.sql",
                "CREATE TABLE notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text NOT NULL);",
            ),
            (
                "V2__notes_pinned.sql",
                "ALTER TABLE notes ADD COLUMN pinned boolean NOT NULL DEFAULT false;",
            ),
            ("V3__notes_body.sql", "CREATE INDEX notes_body ON notes (body);"),
            // A text column cast to JSON (a real Prisma history does this):
            // the generated bodies are text the column allows, not JSON.
            (
                "V4__notes_body_json.sql",
                "ALTER TABLE notes ALTER COLUMN body TYPE jsonb USING body::jsonb;",
            ),
        ],
    )?;
    let r = shipped::verify(Catalog::from_dir(dir.path())?)?
        .rows(PROJECT_ROWS)
        .run(&env.sandbox)?;
    ensure!(r.apps.is_empty(), "apps replayed: {:?}", r.apps);
    expect_no_error_before(&r, 3)?;
    expect_error(&r, 3, "locks.blocking-index-build")?;
    // Its failure on the generated rows says who wrote them: no app did.
    expect_error(&r, 4, "apply.fails-on-seeded")?;
    let f = r
        .errors()
        .find(|f| f.migration == Some(4) && f.id == "apply.fails-on-seeded")
        .context("no apply.fails-on-seeded on V4")?;
    ensure!(
        f.message.contains("generated by rollsafe") && !f.message.contains("live apps"),
        "{}",
        f.message
    );
    ensure!(f.advice.contains("CHECK constraint"), "{}", f.advice);
    let seeded = r
        .findings
        .iter()
        .find(|f| f.id == "apply.applies" && f.migration == Some(2))
        .and_then(|f| f.evidence.get("rows"))
        .and_then(|v| v.as_i64());
    ensure!(
        seeded == Some(PROJECT_ROWS as i64),
        "V2 was not applied on generated rows: {seeded:?}"
    );
    ensure!(
        !r.checks.iter().any(|c| c.check == "dao"),
        "the shipped project's dao check ran on another project"
    );
    Ok(())
}

/// A captured write whose `-- param:` rollsafe made (marked) breaks the
/// table's coded-key CHECK: on a correct migration that is rollsafe's
/// value, not the migration's doing. `compat.made-value-refused`
/// (skipped) names the value and the constraint; the statement is run
/// again with a value the generator makes that holds and is judged on it:
/// no `compat.statement-fails`, and the run passes. The tests' own value
/// breaking the same CHECK stays the app's failure.
fn a_write_failing_on_rollsafes_value_is_skipped_and_run_again(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let migrations = tempfile::tempdir()?;
    write(
        migrations.path(),
        &[
            (
                "V1__gadgets.sql",
                "CREATE TABLE gadgets (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, code text NOT NULL UNIQUE CHECK (code ~ '^[A-Z]{3}[0-9]{3}$'), name text NOT NULL);",
            ),
            ("V2__gadgets_colour.sql", "ALTER TABLE gadgets ADD COLUMN colour text;"),
        ],
    )?;
    let app = |value: &str| {
        format!(
            "-- app: workshop_v1\n-- needs: 1\n\n-- name: add_gadget\n-- param: $1 = {value}\n-- param: $2 = 'spanner'\nINSERT INTO gadgets (code, name) VALUES ($1::text, $2::text);\n"
        )
    };
    // A newer app reads what the older one writes during the rollout.
    let reader = "-- app: workshop_v2\n-- needs: 2\n\n-- name: gadgets_by_code\n-- param: $1 = (SELECT code FROM gadgets ORDER BY id LIMIT 1)\nSELECT code, name, colour FROM gadgets WHERE code = $1::text;\n";
    let apps = tempfile::tempdir()?;
    write(
        apps.path(),
        &[
            (
                "workshop_v1.sql",
                &app("'gadget-7' /* rollsafe: a value the tests did not bind */"),
            ),
            ("workshop_v2.sql", reader),
        ],
    )?;
    let r = rehearse_with(env, migrations.path(), apps.path())?;
    let errors: Vec<String> = r
        .errors()
        .map(|f| format!("{}: {}", f.id, f.message))
        .collect();
    ensure!(r.passed && errors.is_empty(), "{errors:?}");
    let made = r
        .findings
        .iter()
        .find(|f| f.id == "compat.made-value-refused")
        .context("the made value's failure is not named")?;
    ensure!(
        made.severity == Severity::Skipped
            && made.message.contains("$1")
            && made.message.contains("gadgets_code_check")
            && made.message.contains("run again with a value that holds"),
        "{made:?}"
    );
    // The older app's rollout write ran with a value that holds, and the
    // newer app's reader compared it.
    let not_compared: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.id == "compat.rollout-write-not-compared")
        .map(|f| f.message.as_str())
        .collect();
    ensure!(not_compared.is_empty(), "{not_compared:?}");
    // The tests' own value is the app's: the failure stands.
    write(apps.path(), &[("workshop_v1.sql", &app("'gadget-7'"))])?;
    let r = rehearse_with(env, migrations.path(), apps.path())?;
    ensure!(
        r.errors().any(|f| f.id == "compat.statement-fails"),
        "{:?}",
        described(&r, Severity::Error)
    );
    ensure!(!r
        .findings
        .iter()
        .any(|f| f.id == "compat.made-value-refused"));
    Ok(())
}

/// A trigger that creates a table per row written (a bin per shelf):
/// the seeded path then holds a thousand tables the empty one lacks, made
/// by the data, not by a migration. No `post.paths-differ`; they are named
/// (a few, and a count) as left out of the comparison, in every format
/// within the report's bounds.
fn tables_a_trigger_makes_per_row_are_not_the_migrations_doing(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            (
                "V1__shelves.sql",
                "CREATE TABLE bin_template (slot bigint, item text);
CREATE TABLE shelves (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, label text NOT NULL);
CREATE FUNCTION shelves_make_bin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('CREATE TABLE IF NOT EXISTS bins_%s () INHERITS (bin_template)', NEW.id);
  RETURN NEW;
END $$;
CREATE TRIGGER shelves_bin AFTER INSERT ON shelves FOR EACH ROW EXECUTE FUNCTION shelves_make_bin();",
            ),
            ("V2__shelves_note.sql", "ALTER TABLE shelves ADD COLUMN note text;"),
        ],
    )?;
    let r = shipped::verify(Catalog::from_dir(dir.path())?)?
        .rows(PROJECT_ROWS)
        .run(&env.sandbox)?;
    let errors: Vec<String> = r
        .errors()
        .map(|f| format!("{}: {}", f.id, f.message))
        .collect();
    ensure!(errors.is_empty(), "{errors:?}");
    let made = r
        .findings
        .iter()
        .find(|f| f.id == "post.relations-made-by-rows")
        .context("the tables the trigger made are not named")?;
    let count = made.evidence["relations"].as_u64().unwrap_or(0);
    ensure!(count > 1, "{made:?}");
    ensure!(
        made.message.contains("bins_") && made.message.contains(&format!("and {} more", count - 8)),
        "{}",
        made.message
    );
    for format in rollsafe::report::Format::ALL {
        let text = rollsafe::report::render(&r, format);
        let longest = text.lines().map(str::len).max().unwrap_or(0);
        ensure!(longest < 8_000, "{format:?}: a line of {longest} bytes");
    }
    Ok(())
}

/// A migration that fails only on the generated rows does not end the
/// seeded path: the next one is seeded afresh from the schema the failing
/// one left on the empty path, and its blocking index build is measured
/// on rows (not skipped as "not rehearsed on seeded rows").
fn a_failure_on_generated_rows_does_not_blind_the_later_migrations(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            (
                "V1__sightings.sql",
                "CREATE TABLE sightings (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, species text NOT NULL, notes text NOT NULL);",
            ),
            // Generated species names are text, not JSON: fails on rows.
            (
                "V2__sightings_species_json.sql",
                "ALTER TABLE sightings ALTER COLUMN species TYPE jsonb USING species::jsonb;",
            ),
            ("V3__sightings_notes.sql", "CREATE INDEX sightings_notes ON sightings (notes);"),
        ],
    )?;
    let r = shipped::verify(Catalog::from_dir(dir.path())?)?
        .rows(PROJECT_ROWS)
        .run(&env.sandbox)?;
    expect_error(&r, 2, "apply.fails-on-seeded")?;
    expect_error(&r, 3, "locks.blocking-index-build")?;
    let rows = r
        .findings
        .iter()
        .find(|f| f.id == "apply.applies" && f.migration == Some(3))
        .and_then(|f| f.evidence.get("rows"))
        .and_then(|v| v.as_i64());
    ensure!(
        rows.is_some_and(|n| n > 0),
        "V3 was not applied on rows after V2 failed on them: {rows:?}"
    );
    let unreached: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.id == "apply.not-rehearsed")
        .map(|f| f.message.clone())
        .collect();
    ensure!(unreached.is_empty(), "{unreached:?}");
    Ok(())
}

/// Migrations added in one commit deploy together: no app writes rows
/// between them, so a table the first creates is empty when the second
/// indexes it, and the plain index is no lock hazard there
/// (`rewrite.empty-in-deploy`). The same files added in two commits deploy
/// apart: the table has rows by the second deploy, and the plain build
/// under SHARE is the error it is. The commit that imported the history
/// gives no group.
fn a_table_made_earlier_in_the_same_deploy_is_not_seeded(env: &TestEnv) -> anyhow::Result<()> {
    let files = [
        (
            "V1__trails.sql",
            "CREATE TABLE trails (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL);",
        ),
        (
            "V2__trail_signs.sql",
            "CREATE TABLE trail_signs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, trail_id bigint NOT NULL REFERENCES trails, wording text NOT NULL);",
        ),
        ("V3__trail_signs_wording.sql", "CREATE INDEX trail_signs_wording ON trail_signs (wording);"),
    ];
    // (together, the commits that add V2 and V3)
    for together in [true, false] {
        let dir = tempfile::tempdir()?;
        git(dir.path(), &["init", "-q"])?;
        write(dir.path(), &files[..1])?;
        git(dir.path(), &["add", "."])?;
        git(dir.path(), &["commit", "-q", "-m", "the trails"])?;
        write(dir.path(), &files[1..2])?;
        if !together {
            git(dir.path(), &["add", "."])?;
            git(dir.path(), &["commit", "-q", "-m", "signs"])?;
        }
        write(dir.path(), &files[2..])?;
        git(dir.path(), &["add", "."])?;
        git(dir.path(), &["commit", "-q", "-m", "signs' wording"])?;
        let catalog = Catalog::from_dir(dir.path())?;
        ensure!(
            catalog.deployed_with_previous(2) == together && !catalog.deployed_with_previous(1),
            "deploy groups read from git: {:?}",
            catalog
                .migrations()
                .iter()
                .map(|m| &m.deploy_group)
                .collect::<Vec<_>>()
        );
        let r = shipped::verify(catalog)?
            .rows(PROJECT_ROWS)
            .run(&env.sandbox)?;
        let ids: Vec<String> = r
            .findings
            .iter()
            .filter(|f| f.migration == Some(3))
            .map(|f| format!("{:?} {}", f.severity, f.id))
            .collect();
        let blocking = ids
            .iter()
            .any(|i| i.ends_with("locks.blocking-index-build"));
        let empty = r
            .findings
            .iter()
            .find(|f| f.id == "rewrite.empty-in-deploy" && f.migration == Some(3));
        if together {
            ensure!(
                !blocking,
                "V3 on a table V2 made in the same deploy: {ids:?}"
            );
            let empty = empty.context("no rewrite.empty-in-deploy on V3")?;
            ensure!(empty.message.contains("trail_signs"), "{}", empty.message);
            ensure!(r.errors().count() == 0, "{ids:?}");
            // Its emptiness is production's: measured, not "no rows to
            // measure".
            ensure!(
                !ids.iter()
                    .any(|i| i.ends_with("rewrite.no-rows-to-measure")),
                "{ids:?}"
            );
        } else {
            expect_error(&r, 3, "locks.blocking-index-build")?;
            ensure!(empty.is_none(), "{ids:?}");
        }
    }
    Ok(())
}

/// `git ARGS` in `dir`, as a fixed author.
fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=rollsafe",
            "-c",
            "user.email=rollsafe@localhost",
        ])
        .args(args)
        .output()?;
    ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A table no live app writes (`plans`: the app only reads it) still has
/// rows in production: the generator gives it rows in the rehearsal, so
/// its rewrite is measured at N rows and judged as one, not waved through
/// as "untested" on an empty table.
fn a_table_the_apps_only_read_gets_generated_rows_and_its_rewrite_is_caught(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            (
                "migrations/V1__accounts_and_plans.sql",
                "CREATE TABLE accounts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text NOT NULL);\n\
                 CREATE TABLE plans (id integer PRIMARY KEY, name text NOT NULL);",
            ),
            ("migrations/V2__plans_id_bigint.sql", "ALTER TABLE plans ALTER COLUMN id TYPE bigint;"),
            (
                "apps/web.sql",
                "-- app: web\n-- needs: 1\n\n\
                 -- name: sign_up\n\
                 INSERT INTO accounts (email) VALUES ($1::text);\n\n\
                 -- name: plan_name\n\
                 -- param: $1 = (SELECT id FROM plans ORDER BY id LIMIT 1)\n\
                 SELECT name FROM plans WHERE id = $1::integer;\n",
            ),
            (
                "apps/web.seed.sql",
                "INSERT INTO accounts (email) SELECT 'user' || g || '@example.com' FROM generate_series(1, {rows}) g;",
            ),
        ],
    )?;
    let r = rehearse_with(
        env,
        &dir.path().join("migrations"),
        &dir.path().join("apps"),
    )?;
    expect_error(&r, 2, "rewrite.table-rewritten")?;
    let rewrite = r
        .errors()
        .find(|f| f.id == "rewrite.table-rewritten")
        .context("no rewrite finding")?;
    ensure!(
        rewrite
            .message
            .contains(&format!("plans ({PROJECT_ROWS} rows")),
        "the rewrite was not measured on generated rows of plans: {}",
        rewrite.message
    );
    ensure!(
        !r.findings
            .iter()
            .any(|f| f.message.contains("held no rows")),
        "a table was judged empty: {:#?}",
        described(&r, Severity::Warn)
    );
    Ok(())
}

/// Rehearses `migrations` with the apps of `apps_dir`, through the library
/// (what `rollsafe verify --migrations DIR --apps DIR` runs).
fn rehearse_with(env: &TestEnv, migrations: &Path, apps_dir: &Path) -> anyhow::Result<Report> {
    let catalog = Catalog::from_dir(migrations)?;
    let apps = load_dir(apps_dir, &catalog)?;
    Ok(shipped::verify(catalog)?
        .apps(apps)
        .rows(PROJECT_ROWS)
        .run(&env.sandbox)?)
}

/// The project's migrations plus `last`, rehearsed with its own apps; also
/// returns the proposed migration's version (rollsafe's ordinal).
fn rehearse_project(
    env: &TestEnv,
    project: &str,
    last: Option<&str>,
) -> anyhow::Result<(Report, i32)> {
    let dir = migrations_with(project, last)?;
    let latest = Catalog::from_dir(dir.path())?.latest();
    let report = rehearse_with(env, dir.path(), &project_root(project).join("apps"))?;
    Ok((report, latest))
}

fn described(r: &Report, severity: Severity) -> Vec<String> {
    r.findings
        .iter()
        .filter(|f| f.severity == severity)
        .map(|f| format!("V{}:{}: {}", f.migration.unwrap_or(0), f.id, f.message))
        .collect()
}

fn expect_pass(r: &Report) -> anyhow::Result<()> {
    ensure!(
        r.passed && r.errors().count() == 0,
        "expected no errors, got {:#?}",
        described(r, Severity::Error)
    );
    Ok(())
}

/// A correct project passes with no warning of its own either: the only
/// warnings left are squawk's static rules (judged or not), so rows that
/// cannot be written, tables the generator could not seed or a seed that
/// does not rerun would show here.
fn expect_clean(r: &Report) -> anyhow::Result<()> {
    expect_pass(r)?;
    let warnings: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warn && f.check != "static")
        .map(|f| format!("V{}:{}: {}", f.migration.unwrap_or(0), f.id, f.message))
        .collect();
    ensure!(warnings.is_empty(), "warnings: {warnings:#?}");
    // The shipped project's own check runs for it alone.
    ensure!(
        !r.checks.iter().any(|c| c.check == "dao"),
        "the shipped project's dao check ran on another project"
    );
    // The last migration was applied on rows the apps (or the generator)
    // wrote: the pass is measured, not vacuous.
    let latest = r.findings.iter().filter_map(|f| f.migration).max();
    let rows = r
        .findings
        .iter()
        .find(|f| f.id == "apply.applies" && f.migration == latest)
        .and_then(|f| f.evidence.get("rows"))
        .and_then(|v| v.as_i64());
    ensure!(
        rows.is_some_and(|n| n > 0),
        "the last migration was not applied on seeded rows: {rows:?}"
    );
    Ok(())
}

/// The report failed with error `id` on migration `v`.
fn expect_error(r: &Report, v: i32, id: &str) -> anyhow::Result<()> {
    ensure!(
        !r.passed && r.errors().any(|f| f.migration == Some(v) && f.id == id),
        "no error {id} on V{v}; errors: {:#?}",
        described(r, Severity::Error)
    );
    Ok(())
}

/// Errors on migrations before `v`: a proposed last migration must not
/// make the correct ones fail.
fn expect_no_error_before(r: &Report, v: i32) -> anyhow::Result<()> {
    let earlier: Vec<String> = r
        .errors()
        .filter(|f| f.migration.is_some_and(|m| m < v))
        .map(|f| format!("V{}:{}: {}", f.migration.unwrap_or(0), f.id, f.message))
        .collect();
    ensure!(earlier.is_empty(), "errors before V{v}: {earlier:#?}");
    Ok(())
}

/// The apps a report's compat findings name for migration `v`.
fn compat_apps(r: &Report, v: i32) -> Vec<String> {
    r.findings
        .iter()
        .filter(|f| f.check == "compat" && f.migration == Some(v))
        .filter_map(|f| f.evidence.get("app").and_then(|a| a.as_str()))
        .map(str::to_string)
        .collect()
}

/// A breaking last migration: caught with error `id` on the proposed
/// version, nothing earlier blamed.
fn caught(env: &TestEnv, project: &str, sql: &str, id: &str) -> anyhow::Result<Report> {
    let (r, v) = rehearse_project(env, project, Some(sql))?;
    expect_error(&r, v, id)?;
    expect_no_error_before(&r, v)?;
    Ok(r)
}

/// A NOT NULL column without a default on a table with rows cannot even
/// be added: the seeded apply fails (the empty one succeeds, so only data
/// written the way the apps write it shows it).
const NOT_NULL_FAILS_ON_SEEDED: &str = "apply.fails-on-seeded";

/// An unsafe change written as a project's last migration, and the error
/// it is caught with ([`caught`]); one trial each, named after the row.
struct Unsafe {
    name: &'static str,
    project: &'static str,
    sql: &'static str,
    id: &'static str,
}

const UNSAFE: &[Unsafe] = &[
    Unsafe {
        name: "bookshop_not_null_without_default_is_caught",
        project: "bookshop",
        sql: "ALTER TABLE orders ADD COLUMN channel text NOT NULL;",
        id: NOT_NULL_FAILS_ON_SEEDED,
    },
    Unsafe {
        name: "bookshop_blocking_index_build_is_caught",
        project: "bookshop",
        sql: "CREATE INDEX books_title_idx ON books (title);",
        id: "locks.blocking-index-build",
    },
    Unsafe {
        name: "bookshop_rewriting_type_change_is_caught",
        project: "bookshop",
        sql: "ALTER TABLE books ALTER COLUMN price_cents TYPE numeric(12, 2);",
        id: "rewrite.table-rewritten",
    },
    Unsafe {
        name: "ledger_blocking_index_build_is_caught",
        project: "ledger",
        sql: "CREATE INDEX journal_entries_booked_at_idx ON journal_entries (booked_at);",
        id: "locks.blocking-index-build",
    },
    Unsafe {
        name: "ledger_rewriting_type_change_is_caught",
        project: "ledger",
        sql: "ALTER TABLE journal_entries ALTER COLUMN amount TYPE numeric(14, 2);",
        id: "rewrite.table-rewritten",
    },
    Unsafe {
        name: "forum_not_null_without_default_is_caught",
        project: "forum",
        sql: "ALTER TABLE threads ADD COLUMN locked boolean NOT NULL;",
        id: NOT_NULL_FAILS_ON_SEEDED,
    },
    Unsafe {
        name: "forum_blocking_index_build_is_caught",
        project: "forum",
        sql: "CREATE UNIQUE INDEX users_lower_email_idx ON users (lower(email));",
        id: "locks.blocking-index-build",
    },
    Unsafe {
        name: "forum_rewriting_type_change_is_caught",
        project: "forum",
        sql: "ALTER TABLE comments ALTER COLUMN score TYPE bigint;",
        id: "rewrite.table-rewritten",
    },
];

fn unsafe_changes(env: &Arc<TestEnv>) -> Vec<Trial> {
    UNSAFE
        .iter()
        .map(|row| {
            let env = Arc::clone(env);
            trial(format!("project::{}", row.name), move || {
                caught(&env, row.project, row.sql, row.id).map(drop)
            })
        })
        .collect()
}

fn bookshop_correct_migrations_pass(env: &TestEnv) -> anyhow::Result<()> {
    let (r, _) = rehearse_project(env, "bookshop", None)?;
    expect_clean(&r)?;
    // shop_v1 is retired at V4 (which drops the gift_note it writes): it
    // is never replayed against V4.
    ensure!(
        !compat_apps(&r, 4).iter().any(|a| a == "shop_v1"),
        "{:#?}",
        described(&r, Severity::Warn)
    );
    Ok(())
}

fn bookshop_renamed_column_an_app_reads_is_caught(env: &TestEnv) -> anyhow::Result<()> {
    let r = caught(
        env,
        "bookshop",
        "ALTER TABLE books RENAME COLUMN title TO name;",
        "compat.statement-fails",
    )?;
    ensure!(
        compat_apps(&r, 5).iter().any(|a| a == "shop_v2"),
        "{:#?}",
        described(&r, Severity::Error)
    );
    Ok(())
}

/// ledger ships no seed files: every row of every rehearsal is the
/// generator's. What it could not seed is a warning naming the
/// constraint, never an error, and none is expected on this schema.
fn ledger_correct_migrations_pass_on_generated_rows(env: &TestEnv) -> anyhow::Result<()> {
    let root = project_root("ledger");
    let catalog = Catalog::from_dir(&root.join("migrations"))?;
    let apps = load_dir(&root.join("apps"), &catalog)?;
    ensure!(
        apps.iter().all(|a| a.seed_sql.is_none()),
        "ledger has no seed files"
    );
    let (r, _) = rehearse_project(env, "ledger", None)?;
    expect_clean(&r)?;
    let unseeded: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.id == "rewrite.table-not-seeded" || f.id == "rewrite.seeding-warning")
        .map(|f| format!("V{}: {}", f.migration.unwrap_or(0), f.message))
        .collect();
    ensure!(
        unseeded.is_empty(),
        "the generator could not seed: {unseeded:#?}"
    );
    Ok(())
}

/// A NOT NULL column added in two steps (a default to get it in, then the
/// default dropped) applies on any table, but ledger_v1's `open_account`,
/// which does not know the column, can no longer insert.
fn ledger_not_null_without_default_breaks_the_old_apps_insert(env: &TestEnv) -> anyhow::Result<()> {
    let r = caught(
        env,
        "ledger",
        "ALTER TABLE accounts ADD COLUMN owner text NOT NULL DEFAULT 'unknown';\n\
         ALTER TABLE accounts ALTER COLUMN owner DROP DEFAULT;",
        "compat.statement-fails",
    )?;
    ensure!(
        compat_apps(&r, 5).iter().any(|a| a == "ledger_v1"),
        "{:#?}",
        described(&r, Severity::Error)
    );
    // And added in one step, the seeded apply fails.
    caught(
        env,
        "ledger",
        "ALTER TABLE journal_entries ADD COLUMN currency char(3) NOT NULL;",
        NOT_NULL_FAILS_ON_SEEDED,
    )
    .map(drop)
}

fn ledger_dropped_column_an_app_reads_is_caught(env: &TestEnv) -> anyhow::Result<()> {
    let r = caught(
        env,
        "ledger",
        "ALTER TABLE journal_entries DROP COLUMN details;",
        "compat.statement-fails",
    )?;
    ensure!(
        compat_apps(&r, 5).iter().any(|a| a == "ledger_v1"),
        "ledger_v1 reads details: {:#?}",
        described(&r, Severity::Error)
    );
    Ok(())
}

/// forum's V4 drops `users.signature`, which only forum_v1 used, and
/// forum_v1 is retired at V4: the drop passes, and forum_v1 is not
/// replayed against V4.
fn forum_correct_migrations_pass(env: &TestEnv) -> anyhow::Result<()> {
    let root = project_root("forum");
    let catalog = Catalog::from_dir(&root.join("migrations"))?;
    ensure!(
        catalog.migrations().len() == 4 && catalog.latest() == 4,
        "sqlx timestamps are ordered as 1..4"
    );
    let apps = load_dir(&root.join("apps"), &catalog)?;
    let windows: Vec<(&str, i32, Option<i32>)> = apps
        .iter()
        .map(|a| (a.name.as_str(), a.needs, a.retired))
        .collect();
    ensure!(
        windows == [("forum_v1", 2, Some(4)), ("forum_v2", 3, None)],
        "{windows:?}"
    );
    let (r, _) = rehearse_project(env, "forum", None)?;
    expect_clean(&r)?;
    ensure!(
        !compat_apps(&r, 4).iter().any(|a| a == "forum_v1"),
        "forum_v1 is retired at V4: {:#?}",
        described(&r, Severity::Warn)
    );
    Ok(())
}

/// forum_v1 also reads `comments.body`, but it was retired before: the
/// compat errors name forum_v2 only.
fn forum_renamed_column_is_caught_for_the_live_app_only(env: &TestEnv) -> anyhow::Result<()> {
    let r = caught(
        env,
        "forum",
        "ALTER TABLE comments RENAME COLUMN body TO content;",
        "compat.statement-fails",
    )?;
    let named = compat_apps(&r, 5);
    ensure!(
        named.iter().any(|a| a == "forum_v2") && !named.iter().any(|a| a == "forum_v1"),
        "{named:?}: {:#?}",
        described(&r, Severity::Error)
    );
    Ok(())
}

/// The control for the retired window: the same forum with forum_v1 still
/// live (its `-- retired:` line removed) cannot drop `signature` — the
/// drop passes above only because the app that reads it is gone.
fn dropping_the_retired_apps_column_is_caught_when_it_is_not_retired(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let apps_dir = tempfile::tempdir()?;
    for entry in std::fs::read_dir(project_root("forum").join("apps"))? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        let kept: String = text
            .lines()
            .filter(|l| !l.starts_with("-- retired:"))
            .map(|l| format!("{l}\n"))
            .collect();
        if let Some(file) = path.file_name() {
            std::fs::write(apps_dir.path().join(file), kept)?;
        }
    }
    let migrations = migrations_with("forum", None)?;
    let r = rehearse_with(env, migrations.path(), apps_dir.path())?;
    expect_error(&r, 4, "compat.statement-fails")?;
    ensure!(
        compat_apps(&r, 4).iter().any(|a| a == "forum_v1"),
        "{:#?}",
        described(&r, Severity::Error)
    );
    Ok(())
}

/// ledger's refinery files and forum's sqlx files in one directory: the
/// catalogue refuses it in one line naming a file of each layout.
fn a_directory_mixing_the_projects_layouts_is_refused_with_file_names(
    _: &TestEnv,
) -> anyhow::Result<()> {
    let dir = migrations_with("ledger", None)?;
    let forum_first = "20240110090000_users.sql";
    std::fs::copy(
        project_root("forum").join("migrations").join(forum_first),
        dir.path().join(forum_first),
    )?;
    let err = match Catalog::from_dir(dir.path()) {
        Ok(_) => anyhow::bail!("a directory mixing layouts was accepted"),
        Err(e) => e.to_string(),
    };
    ensure!(
        err.contains("mixes migration layouts")
            && err.contains(forum_first)
            && err.contains("is sqlx")
            && err.contains("is refinery")
            && err.contains("V1__accounts.sql")
            && !err.contains('\n'),
        "{err}"
    );
    Ok(())
}

/// forum's apps without their seed files: the catalogue generator writes
/// every row (regex CHECK on handles, the self-referencing key, text[]),
/// and the project still passes without a warning of its own.
fn forum_without_seed_files_passes_on_generated_rows(env: &TestEnv) -> anyhow::Result<()> {
    let apps_dir = tempfile::tempdir()?;
    for entry in std::fs::read_dir(project_root("forum").join("apps"))? {
        let path = entry?.path();
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        if !file.ends_with(".seed.sql") {
            std::fs::copy(&path, apps_dir.path().join(file.as_ref()))?;
        }
    }
    let migrations = migrations_with("forum", None)?;
    let catalog = Catalog::from_dir(migrations.path())?;
    ensure!(load_dir(apps_dir.path(), &catalog)?
        .iter()
        .all(|a| a.seed_sql.is_none()));
    let r = rehearse_with(env, migrations.path(), apps_dir.path())?;
    expect_clean(&r)
}

/// What the generator could and could not satisfy on the fixture schemas,
/// directly: every table of ledger and forum at their last version gets
/// the rows asked for (composite keys, the composite foreign key, the
/// domain, the enum, the regex CHECK, the self-referencing key), nothing
/// is reported unseeded, and every write statement of the apps that may
/// run there succeeds on the generated rows.
fn the_generator_seeds_every_table_of_both_fixture_schemas(env: &TestEnv) -> anyhow::Result<()> {
    for project in ["ledger", "forum"] {
        let root = project_root(project);
        let catalog = Catalog::from_dir(&root.join("migrations"))?;
        let all = load_dir(&root.join("apps"), &catalog)?;
        let live: Vec<&AppVersion> = all
            .iter()
            .filter(|a| a.may_run_on(catalog.latest()))
            .collect();
        let db = env.fresh_database();
        let mut c = db.connect()?;
        // The schema from the project's own files (forum's are sqlx, which
        // rollsafe's migrator does not run; the statements are the same).
        for m in catalog.migrations() {
            c.batch_execute(&m.sql)
                .with_context(|| format!("{project} {}", m.file))?;
        }
        let g = generate::seed(&mut c, None, &RowCounts::new(PROJECT_ROWS), &live)?;
        ensure!(
            g.unseeded.is_empty() && g.warnings.is_empty(),
            "{project}: unseeded {:?}, warnings {:?}",
            g.unseeded,
            g.warnings
        );
        let tables: Vec<String> = c
            .query(
                "SELECT relname::text FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' ORDER BY 1",
                &[],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        ensure!(!tables.is_empty(), "{project} has tables");
        for t in &tables {
            let written = g
                .written(t)
                .with_context(|| format!("{project}.{t} was not seeded: {g:?}"))?;
            let there: i64 = c
                .query_one(&format!("SELECT count(*) FROM {t}"), &[])?
                .get(0);
            ensure!(
                written == PROJECT_ROWS && there >= written as i64,
                "{project}.{t}: asked {PROJECT_ROWS}, written {written}, {there} there"
            );
        }
        let failed: Vec<String> = g
            .app_writes
            .iter()
            .filter(|w| w.succeeded < w.runs)
            .map(|w| format!("{}.{}: {:?}", w.app, w.statement, w.failures))
            .collect();
        ensure!(
            !g.app_writes.is_empty() && failed.is_empty(),
            "{project}: {failed:#?}"
        );
        if project == "forum" {
            let replies: i64 = c
                .query_one(
                    "SELECT count(*) FROM comments WHERE parent_id IS NOT NULL",
                    &[],
                )?
                .get(0);
            ensure!(replies > 0, "the self-referencing key is used");
        }
    }
    Ok(())
}

/// The first version of forum_v1's seed wrote fixed handles
/// (`'v1_user_' || g`). The compat database holds the rows seeded before
/// the migration and the seed runs again on top of them: the duplicate
/// handle is a warning (not an error: the schema is not to blame) whose
/// advice says the seed must be able to run more than once.
/// An app statement is a migration's problem only when its outcome
/// changes across it. `add_untitled_label` is refused by a CHECK on every
/// schema: an error where its app starts (V1), skipped after; and
/// `file_under_archive` binds NULL (its `-- param:` lookup finds no row):
/// skipped everywhere, saying why. Neither is a workload failure.
fn an_app_statement_failing_before_and_after_is_not_the_migrations_doing(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let migrations = tempfile::tempdir()?;
    let apps = tempfile::tempdir()?;
    for (file, sql) in [
        (
            "V1__notes.sql",
            "CREATE TABLE labels (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, title text NOT NULL UNIQUE CHECK (title <> ''));
CREATE TABLE notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text NOT NULL, label_id bigint NOT NULL REFERENCES labels (id));",
        ),
        (
            "V2__notes_pinned.sql",
            "ALTER TABLE notes ADD COLUMN pinned boolean NOT NULL DEFAULT false;",
        ),
        (
            "V3__notes_archived.sql",
            "ALTER TABLE notes ADD COLUMN archived boolean NOT NULL DEFAULT false;",
        ),
    ] {
        std::fs::write(migrations.path().join(file), sql)?;
    }
    std::fs::write(
        apps.path().join("notes_v1.sql"),
        "-- app: notes_v1
-- needs: 1

-- name: add_label
-- param: $1 = 'label_' || substr(md5(random()::text), 1, 10)
INSERT INTO labels (title) VALUES ($1::text) RETURNING id;

-- name: add_note
-- param: $2 = (SELECT id FROM labels ORDER BY id LIMIT 1)
INSERT INTO notes (body, label_id) VALUES ($1::text, $2::bigint) RETURNING id;

-- name: file_under_archive
-- param: $2 = (SELECT id FROM labels WHERE title = 'archive')
INSERT INTO notes (body, label_id) VALUES ($1::text, $2::bigint) RETURNING id;

-- name: add_untitled_label
-- param: $1 = ''
INSERT INTO labels (title) VALUES ($1::text) RETURNING id;
",
    )?;
    let r = rehearse_with(env, migrations.path(), apps.path())?;
    let errors: Vec<String> = r
        .errors()
        .map(|f| {
            format!(
                "V{} {} {}",
                f.migration.unwrap_or(0),
                f.id,
                f.evidence
                    .get("statement")
                    .and_then(|s| s.as_str())
                    .unwrap_or("")
            )
        })
        .collect();
    ensure!(
        errors == ["V1 compat.statement-fails add_untitled_label"],
        "{errors:#?}"
    );
    let skipped = |v: i32, id: &str, statement: &str| {
        r.findings.iter().find(|f| {
            f.migration == Some(v)
                && f.severity == Severity::Skipped
                && f.id == id
                && f.evidence.get("statement").and_then(|s| s.as_str()) == Some(statement)
        })
    };
    for v in [2, 3] {
        let f = skipped(v, "compat.statement-already-fails", "add_untitled_label")
            .with_context(|| format!("V{v}: {:#?}", described(&r, Severity::Skipped)))?;
        ensure!(
            f.message.contains("does not change across"),
            "{}",
            f.message
        );
    }
    for v in [1, 2, 3] {
        let f = skipped(v, "compat.statement-not-bound", "file_under_archive")
            .with_context(|| format!("V{v}: {:#?}", described(&r, Severity::Skipped)))?;
        ensure!(
            f.evidence["null_params"] == "$2" && f.message.contains("bound NULL"),
            "{f:?}"
        );
    }
    Ok(())
}

fn a_seed_that_cannot_run_twice_is_a_warning_that_says_why(env: &TestEnv) -> anyhow::Result<()> {
    let apps_dir = tempfile::tempdir()?;
    for entry in std::fs::read_dir(project_root("forum").join("apps"))? {
        let path = entry?.path();
        if let Some(file) = path.file_name() {
            std::fs::copy(&path, apps_dir.path().join(file))?;
        }
    }
    std::fs::write(
        apps_dir.path().join("forum_v1.seed.sql"),
        "INSERT INTO users (handle, email) \
         SELECT 'v1_user_' || g, 'v1_' || g || '@example.org' FROM generate_series(1, {rows}) g;",
    )?;
    // forum_v1's `reply` answers with an empty body here, which the CHECK
    // on comments refuses: it fails wherever it runs. Failing, it takes no
    // lock, yet it is still a write: the live workload names it as one.
    let statements = apps_dir.path().join("forum_v1.sql");
    let text = std::fs::read_to_string(&statements)?;
    ensure!(
        text.contains("$4 = 'me too'"),
        "forum_v1.sql changed: {text}"
    );
    std::fs::write(&statements, text.replace("$4 = 'me too'", "$4 = ''"))?;
    let migrations = migrations_with("forum", None)?;
    let r = rehearse_with(env, migrations.path(), apps_dir.path())?;
    // On V2, which creates comments, no comment exists for its thread and
    // parent to name: bound NULL, it cannot run as the app runs it; on V3
    // the CHECK refuses it before and after alike. Neither is an error.
    let skipped = |v: i32, id: &str| {
        r.findings.iter().any(|f| {
            f.migration == Some(v)
                && f.id == id
                && f.severity == Severity::Skipped
                && f.evidence.get("statement").and_then(|s| s.as_str()) == Some("reply")
        })
    };
    ensure!(
        skipped(2, "compat.statement-not-bound") && skipped(3, "compat.statement-already-fails"),
        "{:#?}",
        described(&r, Severity::Skipped)
    );
    // It fails on the schema before each later migration too: the
    // workload leaves it out (its failures would not be the migration's)
    // and names it, as a write.
    let left_out: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.id == "locks.measured")
        .filter_map(|f| f.evidence.get("workload_left_out")?.as_str())
        .collect();
    ensure!(
        left_out
            .iter()
            .any(|m| m.contains("forum_v1.reply (write)"))
            && !left_out.iter().any(|m| m.contains("forum_v1.reply (read)")),
        "{left_out:#?}"
    );
    ensure!(
        !r.findings.iter().any(|f| f.id == "locks.workload-failed"),
        "{:#?}",
        described(&r, Severity::Error)
    );
    let warning = r
        .findings
        .iter()
        .find(|f| {
            f.id == "compat.rows-cannot-be-written"
                && f.evidence.get("app").and_then(|a| a.as_str()) == Some("forum_v1")
        })
        .with_context(|| format!("{:#?}", described(&r, Severity::Warn)))?;
    ensure!(
        warning.severity == Severity::Warn
            && warning.message.contains("users_handle_key")
            && warning.advice.contains("more than once"),
        "{warning:?}"
    );
    Ok(())
}

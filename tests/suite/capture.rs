//! `rollsafe capture -- CMD`: apps of our own (`examples/recipe-box`, in
//! Python with psycopg 3 and in Java with JDBC), each version captured
//! from its own test script against a throwaway server the real binary
//! starts, then `verify` with both captured versions: the correct
//! migration passes, the one whose default hides the old rows fails on
//! exactly that. No statement file is written by hand.
//!
//! Capture starts a server of its own (it needs the statement log, which
//! only a start can turn on), on the suite's backend; on a server URL the
//! tests are reported as ignored, never as passed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{ensure, Context};
use rollsafe::sandbox::BackendKind;

use crate::common::{cli, output, repo_root, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    let on_server = env.sandbox.kind() == BackendKind::Server;
    crate::trials!(
        "capture",
        env,
        [
            python_app_versions_captured_from_their_tests_catch_the_hidden_default,
            java_app_versions_captured_from_their_tests_catch_the_hidden_default,
            a_coded_unique_key_gets_values_its_pattern_allows_and_no_row_holds,
            a_coded_unique_key_captured_from_java_passes_and_the_hidden_default_fails,
            a_failing_test_command_is_exit_2_and_nothing_is_written,
            the_tests_connect_as_the_app_role_with_libpq_variables,
            base_rehearses_what_the_tree_adds_and_refuses_edited_history,
        ]
    )
    .into_iter()
    .map(|t| t.with_ignored_flag(on_server))
    .collect()
}

fn recipe_box() -> PathBuf {
    repo_root().join("examples/recipe-box")
}

fn ferry() -> PathBuf {
    repo_root().join("tests/fixtures/projects/ferry")
}

/// The suite's backend as `--postgres` names it.
fn backend(env: &TestEnv) -> &'static str {
    match env.sandbox.kind() {
        BackendKind::Docker => "docker",
        _ => "local",
    }
}

/// An app of our own captured in two versions: its folder, its V1 and
/// V2 migrations (in `migrations/`) and the variant of V2 whose default
/// hides the old rows (in `variants/`, written in place of V2).
struct Example {
    root: fn() -> PathBuf,
    v1: &'static str,
    v2: &'static str,
    hidden: &'static str,
    /// The errors verify gives on the hidden variant, in order.
    hidden_errors: &'static [&'static str],
}

const RECIPES: Example = Example {
    root: recipe_box,
    v1: "V1__cooks_and_recipes.sql",
    v2: "V2__published.sql",
    hidden: "V2__published_hidden.sql",
    hidden_errors: &[
        "backfill.new-readers-miss-rows",
        "compat.old-writes-invisible-to-new",
    ],
};

/// The ferry office (`tests/fixtures/projects/ferry`): a booking code
/// UNIQUE and held to a regular expression.
const FERRY: Example = Example {
    root: ferry,
    v1: "V1__vessels_and_bookings.sql",
    v2: "V2__booking_state.sql",
    hidden: "V2__booking_state_hidden.sql",
    // The manifest compares the state to a literal, not a parameter: the
    // readers' comparison catches it.
    hidden_errors: &["compat.old-writes-invisible-to-new"],
};

impl Example {
    /// Its migrations with V2 correct or the variant that hides the old
    /// rows.
    fn migrations(&self, hidden: bool) -> anyhow::Result<tempfile::TempDir> {
        let dir = tempfile::tempdir()?;
        let src = (self.root)();
        std::fs::copy(
            src.join("migrations").join(self.v1),
            dir.path().join(self.v1),
        )?;
        let v2 = if hidden {
            src.join("variants").join(self.hidden)
        } else {
            src.join("migrations").join(self.v2)
        };
        std::fs::copy(v2, dir.path().join(self.v2))?;
        Ok(dir)
    }
}

/// The recipe box's migrations with V2 correct (`DEFAULT true`) or the
/// variant that hides the old rows (`DEFAULT false`).
fn migrations(hidden: bool) -> anyhow::Result<tempfile::TempDir> {
    RECIPES.migrations(hidden)
}

/// `rollsafe capture` of `app` at `at` into `out`, running `command`.
fn capture(
    env: &TestEnv,
    migrations: &Path,
    at: &str,
    app: &str,
    out: &Path,
    command: &[&str],
) -> anyhow::Result<(i32, String, String)> {
    let mut cmd = cli();
    cmd.current_dir(repo_root()).args([
        "capture",
        "--postgres",
        backend(env),
        "--migrations",
        &migrations.display().to_string(),
        "--at",
        at,
        "--app",
        app,
        "--out",
        &out.display().to_string(),
        "--",
    ]);
    cmd.args(command);
    output(&mut cmd)
}

/// Captures both versions of an app into `apps` (`<app>_v1.sql`,
/// `<app>_v2.sql`) from `command_of(version)`.
fn capture_both(
    env: &TestEnv,
    example: &Example,
    apps: &Path,
    app: &str,
    command_of: impl Fn(u8) -> Vec<String>,
) -> anyhow::Result<[String; 2]> {
    let correct = example.migrations(false)?;
    let mut texts = Vec::new();
    for v in [1u8, 2] {
        let out = apps.join(format!("{app}_v{v}.sql"));
        let command = command_of(v);
        let words: Vec<&str> = command.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = capture(
            env,
            correct.path(),
            &format!("V{v}"),
            &format!("{app}_v{v}"),
            &out,
            &words,
        )?;
        ensure!(code == 0, "capture v{v}: exit {code}: {stdout}{stderr}");
        ensure!(
            stdout.contains("all tests passed"),
            "the command's output passes through: {stdout}"
        );
        texts.push(std::fs::read_to_string(&out).context("the captured set")?);
    }
    Ok([texts.remove(0), texts.remove(0)])
}

/// `verify` of an example's migrations (correct or hidden) with the
/// captured apps: (exit code, error ids in order).
fn verify(
    env: &TestEnv,
    example: &Example,
    apps: &Path,
    hidden: bool,
) -> anyhow::Result<(i32, Vec<String>)> {
    let dir = example.migrations(hidden)?;
    let (code, stdout, stderr) = output(cli().args([
        "verify",
        "--postgres",
        backend(env),
        "--migrations",
        &dir.path().display().to_string(),
        "--since",
        "V1",
        "--apps",
        &apps.display().to_string(),
        "--rows",
        "500",
    ]))?;
    ensure!(code == 0 || code == 1, "verify: exit {code}: {stderr}");
    let errors = stdout
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("ERROR"))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    Ok((code, errors))
}

/// The correct migration passes with both captured versions; the one
/// that hides the old rows fails on that and on nothing else (a write
/// that failed on generated values would be an error here too).
fn verdicts_on_both_migrations(
    env: &TestEnv,
    example: &Example,
    apps: &Path,
) -> anyhow::Result<()> {
    let (code, errors) = verify(env, example, apps, false)?;
    ensure!(
        code == 0 && errors.is_empty(),
        "the correct migration (DEFAULT true): exit {code}, errors {errors:?}"
    );
    let (code, errors) = verify(env, example, apps, true)?;
    ensure!(
        code == 1,
        "the hidden default: exit {code}, errors {errors:?}"
    );
    ensure!(
        errors == example.hidden_errors,
        "the hidden default is caught by the readers, and only by them: {errors:?}"
    );
    Ok(())
}

/// The statement under `-- name: NAME` with its metadata, up to its `;`.
fn entry<'t>(text: &'t str, name: &str) -> anyhow::Result<&'t str> {
    let start = text
        .find(&format!("-- name: {name}\n"))
        .with_context(|| format!("no statement {name} in:\n{text}"))?;
    let rest = &text[start..];
    Ok(&rest[..rest.find(";\n").map_or(rest.len(), |e| e + 1)])
}

fn python_app_versions_captured_from_their_tests_catch_the_hidden_default(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let apps = tempfile::tempdir()?;
    let script = |v: u8| {
        vec![
            "python3".to_string(),
            recipe_box()
                .join(format!("python/v{v}/test_recipes.py"))
                .display()
                .to_string(),
        ]
    };
    let [v1, v2] = capture_both(env, &RECIPES, apps.path(), "recipes", script)?;

    // What the server saw, with the values bound: text, bigint, uuid,
    // text[], timestamptz and NULL parameters of an insert in a
    // transaction; a named prepared statement (psycopg's prepare=True);
    // a simple query whose literal every call wrote the same.
    ensure!(v1.starts_with("-- app: recipes_v1\n-- needs: V1\n"), "{v1}");
    let insert = entry(&v1, "insert_recipes")?;
    for expected in [
        "-- kind: write",
        "-- calls: 3",
        "$2 = '1', $3 = 'Leek soup', $4 = '{soup,winter}', $5 = '4', $6 = NULL, $7 = '2026-03-01 12:00:00+00'",
        "$1 = '027fed22-e83f-5959-bba8-4823e91bee17'",
        "-- param: $2 = (SELECT \"id\" FROM public.cooks ORDER BY \"id\" LIMIT 1)",
    ] {
        ensure!(insert.contains(expected), "{expected}: {insert}");
    }
    let by_id = entry(&v1, "select_recipes_by_id")?;
    ensure!(
        by_id.ends_with("SELECT id, title, servings FROM recipes WHERE id = $1;"),
        "{by_id}"
    );
    ensure!(
        entry(&v1, "select_recipes")?
            .ends_with("SELECT count(*) FROM recipes WHERE servings >= 6;"),
        "{v1}"
    );
    // The tests' fixtures and scratch table are left out and counted.
    ensure!(
        !v1.contains("scratch_totals") && !v1.contains("TRUNCATE") && !v1.contains("BEGIN"),
        "{v1}"
    );
    ensure!(
        v1.contains("left out: 4 transaction/session control, 2 DDL and maintenance (test fixtures), 2 on tables the migrations do not create (scratch tables), 0 on the migration tool's history table, 0 that failed in every call"),
        "{v1}"
    );
    // The ORM-style flag, bound `true` in every call, is written so.
    let listed = entry(&v2, "select_recipes_by_cook_id_published")?;
    ensure!(listed.contains("-- bound: $2 = 't'"), "{listed}");
    let publish = entry(&v2, "update_recipes")?;
    ensure!(
        publish.contains("-- param: $2 = (SELECT \"id\" FROM \"recipes\" ORDER BY \"id\" LIMIT 1)"),
        "an UPDATE's key names a row that exists: {publish}"
    );

    // Same tests, same file.
    let again = apps.path().join("again.sql");
    let correct = migrations(false)?;
    let words = script(1);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let (code, _, stderr) = capture(env, correct.path(), "V1", "recipes_v1", &again, &words)?;
    ensure!(code == 0, "{stderr}");
    ensure!(
        std::fs::read_to_string(&again)? == v1,
        "a second capture of the same tests differs"
    );
    std::fs::remove_file(&again)?;

    verdicts_on_both_migrations(env, &RECIPES, apps.path())
}

fn java_app_versions_captured_from_their_tests_catch_the_hidden_default(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let jar = "/usr/share/java/postgresql.jar";
    ensure!(
        Path::new(jar).exists(),
        "{jar} is missing: apt-get install libpostgresql-jdbc-java (ci/test.sh does)"
    );
    let apps = tempfile::tempdir()?;
    let [v1, v2] = capture_both(env, &RECIPES, apps.path(), "recipes_java", |v| {
        vec![
            "java".to_string(),
            "-cp".to_string(),
            jar.to_string(),
            recipe_box()
                .join(format!("java/v{v}/RecipesTest.java"))
                .display()
                .to_string(),
        ]
    })?;
    // JDBC runs the read unnamed five times, then as a named server-side
    // statement: one statement, six calls.
    let by_id = entry(&v1, "select_recipes_by_id")?;
    ensure!(by_id.contains("-- calls: 6"), "{by_id}");
    let insert = entry(&v2, "insert_recipes")?;
    ensure!(
        insert.contains("-- bound: $8 = 't'") && insert.contains("$6 = NULL"),
        "{insert}"
    );
    verdicts_on_both_migrations(env, &RECIPES, apps.path())
}

/// The ferry office's booking code is UNIQUE and held to
/// `^[A-Z]{3}[0-9]{4}$`: its captured `-- param:` keeps the tests' code
/// while no row holds it, else takes the generator's value of the
/// pattern that no row holds (never a random prefix the pattern
/// refuses), marked as rollsafe's; the tests' own values stay as they
/// bound them. Replayed, the correct migration passes with both versions
/// and the hiding default fails on the readers.
fn a_coded_unique_key_gets_values_its_pattern_allows_and_no_row_holds(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let apps = tempfile::tempdir()?;
    let [v1, v2] = capture_both(env, &FERRY, apps.path(), "bookings", |v| {
        vec![
            "python3".to_string(),
            ferry()
                .join(format!("python/v{v}/test_bookings.py"))
                .display()
                .to_string(),
        ]
    })?;
    for (text, code) in [(&v1, "SKU1001"), (&v2, "SKU2001")] {
        let insert = entry(text, "insert_bookings")?;
        let param = |n: usize| {
            insert
                .lines()
                .find_map(|l| l.strip_prefix(&format!("-- param: ${n} = ")))
                .with_context(|| format!("no -- param: ${n}: {insert}"))
        };
        let code_param = param(1)?;
        ensure!(
            code_param.starts_with(&format!("coalesce((SELECT '{code}'::text WHERE NOT EXISTS"))
                && code_param.ends_with(
                    "/* rollsafe: the tests' value unless a row holds it, else one no row holds (UNIQUE column code) */"
                )
                && !code_param.contains("random()"),
            "{insert}"
        );
        ensure!(
            param(3)? == "'Ines'::text",
            "the tests' own value: {insert}"
        );
        ensure!(
            param(2)?.ends_with(
                "/* rollsafe: a row of vessels (foreign key bookings_vessel_id_fkey) */"
            ),
            "{insert}"
        );
    }

    // Each value the code's parameter takes holds the CHECK and no row
    // holds it, on a database seeded as verify seeds one.
    let db = env.fresh_database();
    let catalog = rollsafe::catalog::Catalog::from_dir(FERRY.migrations(false)?.path())?;
    rollsafe::migrate::migrate(db.url(), &catalog, &Default::default())?;
    let mut c = db.connect()?;
    rollsafe::seed::generate::seed(
        &mut c,
        None,
        &rollsafe::seed::generate::RowCounts::new(300),
        &[],
    )?;
    let set = rollsafe::app::statements::StatementSet::parse("bookings_v2.sql", &v2)?;
    let insert = set
        .statements()
        .iter()
        .find(|s| s.name == "insert_bookings")
        .context("insert_bookings")?;
    let params = rollsafe::app::replay::declared_params(insert.meta_values("param"));
    let made = rollsafe::capture::params::made_params(insert);
    ensure!(
        made.keys().copied().collect::<Vec<_>>() == [1, 2],
        "the code and the vessel are rollsafe's, the rest the tests': {made:?}"
    );
    let mut codes = Vec::new();
    for _ in 0..3 {
        let code: String = c
            .query_one(&format!("SELECT ({})::text", params[&1]), &[])?
            .get(0);
        let vessel: i64 = c
            .query_one(&format!("SELECT ({})::bigint", params[&2]), &[])?
            .get(0);
        c.execute(
            "INSERT INTO bookings (code, vessel_id, passenger, seats, state) VALUES ($1, $2, 'Ines', 2, 'active')",
            &[&code, &vessel],
        )?;
        codes.push(code);
    }
    ensure!(
        codes[0] == "SKU2001",
        "the tests' code while it is free: {codes:?}"
    );
    // A failure only on a value rollsafe made is said to be rollsafe's;
    // on a value the tests bound, it is not.
    let vessel: i64 = c.query_one("SELECT min(id) FROM vessels", &[])?.get(0);
    let failed = c
        .execute(
            "INSERT INTO bookings (code, vessel_id, passenger, seats) VALUES ('bad', $1, 'Ines', 2)",
            &[&vessel],
        )
        .expect_err("a code the pattern refuses");
    let message = rollsafe::errors::one_line(&failed);
    let blamed = rollsafe::capture::params::made_value_failure(&mut c, insert, &message)
        .with_context(|| format!("not said to be rollsafe's: {message}"))?;
    ensure!(
        blamed.param == 1 && blamed.column == "code" && blamed.constraint == "bookings_code_check",
        "{blamed:?}"
    );
    // Measured again with a value that holds: the generator's, for the
    // column that failed.
    let mut broken = insert.clone();
    for (k, v) in broken.meta.iter_mut() {
        if k == "param" && v.starts_with("$1 ") {
            *v = "$1 = 'bad' /* rollsafe: a value the pattern refuses */".into();
        }
    }
    let again = rollsafe::capture::params::with_a_value_that_holds(&mut c, &broken, &blamed)
        .context("a value that holds")?;
    let again_params = rollsafe::app::replay::declared_params(again.meta_values("param"));
    let code: String = c
        .query_one(&format!("SELECT ({})::text", again_params[&1]), &[])?
        .get(0);
    c.execute(
        "INSERT INTO bookings (code, vessel_id, passenger, seats) VALUES ($1, $2, 'Ines', 2)",
        &[&code, &vessel],
    )?;
    let mut own = insert.clone();
    own.meta
        .retain(|(k, v)| k != "param" || !v.starts_with("$1 "));
    own.meta.push(("param".into(), "$1 = 'bad'".into()));
    ensure!(
        rollsafe::capture::params::made_value_failure(&mut c, &own, &message).is_none(),
        "the tests' own value is never rollsafe's"
    );
    ensure!(
        codes
            .iter()
            .all(|c| c.len() == 7 && c[..3].chars().all(|x| x.is_ascii_uppercase()))
            && codes[1] != codes[2],
        "{codes:?}"
    );
    verdicts_on_both_migrations(env, &FERRY, apps.path())
}

/// The ferry office in Java over JDBC: the booking code's captured
/// `-- param:` is the generator's (the tests' code while free, a value of
/// the pattern no row holds else), never a random prefix; the correct
/// migration passes with both versions and the hiding default fails on
/// the readers.
fn a_coded_unique_key_captured_from_java_passes_and_the_hidden_default_fails(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let jar = "/usr/share/java/postgresql.jar";
    ensure!(
        Path::new(jar).exists(),
        "{jar} is missing: apt-get install libpostgresql-jdbc-java (ci/test.sh does)"
    );
    let apps = tempfile::tempdir()?;
    let [v1, _] = capture_both(env, &FERRY, apps.path(), "bookings_java", |v| {
        vec![
            "java".to_string(),
            "-cp".to_string(),
            jar.to_string(),
            ferry()
                .join(format!("java/v{v}/BookingsTest.java"))
                .display()
                .to_string(),
        ]
    })?;
    let insert = entry(&v1, "insert_bookings")?;
    ensure!(
        insert.contains("-- param: $1 = coalesce((SELECT 'SKU1001'::text WHERE NOT EXISTS")
            && insert.contains("(UNIQUE column code) */")
            && !insert.contains("random()"),
        "{insert}"
    );
    verdicts_on_both_migrations(env, &FERRY, apps.path())
}

fn a_failing_test_command_is_exit_2_and_nothing_is_written(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("app.sql");
    let migrations = migrations(false)?;
    let (code, stdout, stderr) = capture(
        env,
        migrations.path(),
        "V1",
        "recipes_v1",
        &out,
        &["sh", "-c", "echo the tests ran; exit 3"],
    )?;
    ensure!(
        code == 2 && stdout.contains("the tests ran"),
        "exit {code}: {stdout}{stderr}"
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("rollsafe: error:"))
        .collect();
    ensure!(
        errors.len() == 1
            && errors[0].contains("the test command `sh -c 'echo the tests ran; exit 3'` failed (exit status: 3); nothing was written"),
        "{stderr}"
    );
    ensure!(!out.exists(), "a set was written after a failed run");

    let (code, _, stderr) = capture(
        env,
        migrations.path(),
        "V1",
        "recipes_v1",
        &out,
        &["rollsafe-no-such-test-runner"],
    )?;
    ensure!(
        code == 2
            && stderr.contains("could not start the test command `rollsafe-no-such-test-runner`")
            && !out.exists(),
        "exit {code}: {stderr}"
    );
    // A server URL whose log capture cannot read (the suite's server
    // runs no logging collector): exit 2 saying what it needs.
    if env.sandbox.kind() != BackendKind::Server {
        let (code, _, stderr) = output(cli().args([
            "capture",
            "--postgres",
            env.sandbox.admin_url(),
            "--migrations",
            &migrations.path().display().to_string(),
            "--app",
            "recipes_v1",
            "--out",
            &out.display().to_string(),
            "--",
            "true",
        ]))?;
        ensure!(
            code == 2
                && stderr.contains("the server does not write a JSON log capture can read (logging_collector is off)")
                && stderr.contains("or use --postgres local or docker")
                && !out.exists(),
            "exit {code}: {stderr}"
        );
        let password = crate::common::password_of(env.sandbox.admin_url())?;
        ensure!(
            !stderr.contains(&password),
            "the password was printed: {stderr}"
        );
    }
    let (code, _, stderr) = output(cli().args(["capture", "--app", "x"]))?;
    ensure!(
        code == 2 && stderr.contains("capture needs a test command after `--`"),
        "exit {code}: {stderr}"
    );
    Ok(())
}

/// The command connects as the app's role (`--app-role`, created before
/// the migrations, which grant it what it may do), not as a superuser,
/// through `DATABASE_URL` and libpq's variables alike.
fn the_tests_connect_as_the_app_role_with_libpq_variables(env: &TestEnv) -> anyhow::Result<()> {
    let migrations = tempfile::tempdir()?;
    std::fs::write(
        migrations.path().join("V1__memos.sql"),
        "CREATE TABLE memos (id bigint PRIMARY KEY, body text NOT NULL);
         GRANT SELECT, INSERT ON memos TO memo_app;",
    )?;
    let script = r#"
import os, psycopg
with psycopg.connect(os.environ["DATABASE_URL"]) as a, psycopg.connect("") as b:
    for c in (a, b):
        who, superuser = c.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        assert (who, superuser) == ("memo_app", False), (who, superuser)
    a.execute("INSERT INTO memos (id, body) VALUES (%s, %s)", (7, "buy leeks"))
    assert b.execute("SELECT body FROM memos WHERE id = %s", (7,)).fetchone() is None
    a.commit()
    assert b.execute("SELECT body FROM memos WHERE id = %s", (7,)).fetchone()[0] == "buy leeks"
print("memo tests passed")
"#;
    let out = migrations.path().join("memo_app.sql");
    let mut cmd = cli();
    cmd.args([
        "capture",
        "--postgres",
        backend(env),
        "--migrations",
        &migrations.path().display().to_string(),
        "--app",
        "memos",
        "--app-role",
        "memo_app",
        "--out",
        &out.display().to_string(),
        "--",
        "python3",
        "-c",
        script,
    ]);
    let (code, stdout, stderr) = output(&mut cmd)?;
    ensure!(code == 0, "exit {code}: {stdout}{stderr}");
    let text = std::fs::read_to_string(&out)?;
    let read = entry(&text, "select_memos_by_id")?;
    ensure!(
        read.contains("-- calls: 2") && read.contains("-- example: $1 = '7'"),
        "{text}"
    );
    ensure!(text.contains("-- needs: V1"), "{text}");
    Ok(())
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.email=tests@example.org",
            "-c",
            "user.name=tests",
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

/// A repository the test makes: V1 and the first app version committed
/// on `main`, the working tree adding V2 (the hidden default) and the
/// second version. `--base main --capture` captures both versions and
/// rehearses V2 only; an edited V1 is refused, and no worktree is left.
fn base_rehearses_what_the_tree_adds_and_refuses_edited_history(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let repo = tempfile::tempdir()?;
    let root = repo.path();
    let src = recipe_box();
    std::fs::create_dir_all(root.join("db/migrations"))?;
    std::fs::create_dir_all(root.join("app"))?;
    let v1_file = root.join("db/migrations/V1__cooks_and_recipes.sql");
    std::fs::copy(src.join("migrations/V1__cooks_and_recipes.sql"), &v1_file)?;
    std::fs::copy(
        src.join("python/v1/test_recipes.py"),
        root.join("app/test.py"),
    )?;
    git(root, &["init", "-q", "-b", "main"])?;
    git(root, &["add", "-A"])?;
    git(root, &["commit", "-q", "-m", "v1"])?;
    std::fs::copy(
        src.join("variants/V2__published_hidden.sql"),
        root.join("db/migrations/V2__published.sql"),
    )?;
    std::fs::copy(
        src.join("python/v2/test_recipes.py"),
        root.join("app/test.py"),
    )?;

    let verify = |extra: &[&str]| {
        let mut cmd = cli();
        cmd.current_dir(root).args([
            "verify",
            "--postgres",
            backend(env),
            "--migrations",
            "db/migrations",
            "--base",
            "main",
            "--rows",
            "500",
        ]);
        cmd.args(extra);
        output(&mut cmd)
    };
    let summary = root.join("summary.md");
    let (code, stdout, stderr) = verify(&[
        "--capture",
        "python3 app/test.py",
        "--output",
        &format!("markdown={}", summary.display()),
    ])?;
    ensure!(code == 1, "exit {code}: {stdout}{stderr}");
    for expected in [
        "--base main: 1 migration(s) there, 1 added here",
        "the base app at V1: 5 statements",
        "the head app at V2: 6 statements",
        "applying V1..V1 once (up to --since, not rehearsed)",
    ] {
        ensure!(stderr.contains(expected), "{expected}: {stderr}");
    }
    ensure!(
        stdout.contains("ERROR backfill.new-readers-miss-rows")
            && stdout
                .contains("the head app's `select_recipes_by_cook_id_published` no longer returns"),
        "{stdout}"
    );

    // The pull request comment: what each captured version contributed
    // and which readers were compared.
    let md = std::fs::read_to_string(&summary)?;
    for expected in [
        "| `base` | V1 | 5 |\n| `head` | V2 | 6 |",
        "- V2: **rows lost**: head's `select_recipes_by_cook_id_published` misses ",
        " rows base's `select_recipes_by_cook_id` returned\n",
    ] {
        ensure!(md.contains(expected), "{expected}: {md}");
    }

    // Applied history edited: refused before anything starts.
    let mut v1 = std::fs::read_to_string(&v1_file)?;
    v1.push_str("\nCREATE INDEX recipes_title ON recipes (title);\n");
    std::fs::write(&v1_file, v1)?;
    let (code, _, stderr) = verify(&[])?;
    ensure!(
        code == 2
            && stderr.contains("applied history edited: db/migrations/V1__cooks_and_recipes.sql differs from main's (its SQL changed)")
            && stderr.contains("git checkout main -- db/migrations/V1__cooks_and_recipes.sql"),
        "exit {code}: {stderr}"
    );
    let worktrees = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["worktree", "list"])
        .output()?;
    ensure!(
        String::from_utf8_lossy(&worktrees.stdout).lines().count() == 1,
        "REF's worktree is removed after the run"
    );
    Ok(())
}

//! Projects whose migrations are code: a seed library in Django, a ferry
//! timetable in SQLAlchemy/Alembic, a tool-lending shed in ActiveRecord
//! (`tests/fixtures/frameworks/`), each with a history holding a foreign
//! key, a unique constraint and a data migration that fills a column
//! from the rows, and a newest migration in variants. `rollsafe verify
//! --migrations <its migrations folder>` runs the framework's own migrate
//! on a throwaway server, reads back what it sent, and rehearses that:
//! a plain index built inside the framework's transaction fails on its
//! locks, the framework's concurrent index outside one passes, a column
//! type change that rewrites fails. A generic `--migrate-command` with a
//! history table of its own, and a migrate command that fails.
//!
//! The frameworks run in the environment the suite is given (ci/test.sh
//! installs Django, psycopg, SQLAlchemy, Alembic, ActiveRecord): a
//! missing one fails its tests, never skips them. Like capture, each run
//! starts servers of its own (the statement log needs a start): on a
//! server URL the tests are ignored.

use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Context};
use rollsafe::sandbox::BackendKind;

use crate::common::{cli, output, repo_root, trial, TestEnv};

/// (framework, variant, expected error ids, in order).
const CASES: &[(&str, &str, &[&str])] = &[
    ("django", "plain_index", &["locks.blocking-index-build"]),
    ("django", "concurrent_index", &[]),
    ("django", "widen_weight", &["rewrite.table-rewritten"]),
    ("alembic", "plain_index", &["locks.blocking-index-build"]),
    ("alembic", "concurrent_index", &[]),
    ("alembic", "widen_capacity", &["rewrite.table-rewritten"]),
    (
        "activerecord",
        "plain_index",
        &["locks.blocking-index-build"],
    ),
    ("activerecord", "concurrent_index", &[]),
    ("activerecord", "widen_cents", &["rewrite.table-rewritten"]),
];

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    let on_server = env.sandbox.kind() == BackendKind::Server;
    let backend = backend(env);
    let mut trials: Vec<libtest_mimic::Trial> = CASES
        .iter()
        .map(|&(framework, variant, errors)| {
            trial(format!("frameworks::{framework}_{variant}"), move || {
                newest_variant_is_judged(backend, framework, variant, errors)
            })
        })
        .collect();
    trials.extend(crate::trials!(
        "frameworks",
        env,
        [
            a_state_only_migration_is_listed_as_sending_no_sql,
            a_migrate_command_of_its_own_with_its_history_table,
            a_failing_migrate_command_is_exit_2_with_its_last_lines,
            a_data_migration_is_skipped_naming_it,
            django_apps_captured_from_their_test_databases_catch_the_dropped_default,
        ]
    ));
    trials
        .into_iter()
        .map(|t| t.with_ignored_flag(on_server))
        .collect()
}

fn backend(env: &TestEnv) -> &'static str {
    match env.sandbox.kind() {
        BackendKind::Docker => "docker",
        _ => "local",
    }
}

/// Where each framework keeps its migrations, the newest migration's
/// file name there, and the label of the one before it (`--since`).
fn layout_of(framework: &str) -> (&'static str, &'static str, &'static str, &'static str) {
    match framework {
        "django" => (
            "packets/migrations",
            "0004_newest.py",
            "py",
            "packets.0003_fill_label",
        ),
        "alembic" => (
            "migrations/versions",
            "c7d1e2f3a4b5_newest.py",
            "py",
            "8b2e4d6f1a3c",
        ),
        _ => (
            "db/migrate",
            "20240315090000_add_tool_retired.rb",
            "rb",
            "20240308090000",
        ),
    }
}

/// A copy of `framework`'s fixture project with `variant` as its newest
/// migration (none: the history alone).
fn project(framework: &str, variant: Option<&str>) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let src = repo_root()
        .join("tests/fixtures/frameworks")
        .join(framework);
    copy_tree(&src, dir.path())?;
    if let Some(variant) = variant {
        let (folder, newest, ext, _) = layout_of(framework);
        std::fs::copy(
            src.join("variants").join(format!("{variant}.{ext}")),
            dir.path().join(folder).join(newest),
        )
        .with_context(|| format!("variant {variant} of {framework}"))?;
    }
    Ok(dir)
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// `rollsafe verify --migrations <folder> [args]` in `project`: (exit
/// code, stdout, stderr).
fn verify(
    backend: &str,
    project: &Path,
    folder: &str,
    args: &[&str],
) -> anyhow::Result<(i32, String, String)> {
    output(
        cli()
            .current_dir(project)
            .args([
                "verify",
                "--postgres",
                backend,
                "--migrations",
                folder,
                "--rows",
                "500",
            ])
            .args(args),
    )
}

/// The error ids of a report, in order.
fn errors(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("ERROR"))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn newest_variant_is_judged(
    backend: &str,
    framework: &str,
    variant: &str,
    expected: &[&str],
) -> anyhow::Result<()> {
    let dir = project(framework, Some(variant))?;
    let (folder, _, _, since) = layout_of(framework);
    let (code, stdout, stderr) = verify(backend, dir.path(), folder, &["--since", since])?;
    let found = errors(&stdout);
    ensure!(
        found == expected && code == if expected.is_empty() { 0 } else { 1 },
        "{framework} {variant}: exit {code}, errors {found:?}, expected {expected:?}\n{stdout}\n{stderr}"
    );
    // How the project was read comes first: the framework, its command,
    // the migrations by the framework's labels, the data migration.
    let (count, first, newest, data) = match framework {
        "django" => (
            4,
            "packets.0001_initial",
            "packets.0004_newest",
            "packets.0003_fill_label",
        ),
        "alembic" => (3, "3f1a9c2b7d10", "c7d1e2f3a4b5", "8b2e4d6f1a3c"),
        _ => (3, "20240301090000", "20240315090000", "20240308090000"),
    };
    let header = stderr
        .lines()
        .find(|l| l.contains("migration(s) (") && l.contains("sent (project"))
        .with_context(|| format!("no header in:\n{stderr}"))?;
    ensure!(
        header.contains(&format!("{count} migration(s) ({first}..{newest})"))
            && header.contains(&format!(
                "not judged from what they sent to an empty database: {data}"
            )),
        "{framework}: the header says how the project was read: {header}"
    );
    // Alembic's default env.py sends every pending revision in one
    // transaction; the concurrent index commits it early.
    let shared = match (framework, variant) {
        ("alembic", "concurrent_index") => {
            Some("3f1a9c2b7d10..8b2e4d6f1a3c were sent in one transaction")
        }
        ("alembic", _) => Some("3f1a9c2b7d10..c7d1e2f3a4b5 were sent in one transaction"),
        _ => None,
    };
    ensure!(
        shared.map_or(true, |s| header.contains(s))
            && (shared.is_some() || !header.contains("one transaction")),
        "{framework} {variant}: the transactions as sent: {header}"
    );
    Ok(())
}

/// A Django migration that changes only Django's state sends nothing:
/// it is listed as such, and the rehearsal has nothing to judge in it.
fn a_state_only_migration_is_listed_as_sending_no_sql(env: &TestEnv) -> anyhow::Result<()> {
    let dir = project("django", Some("state_only"))?;
    let (code, stdout, stderr) = verify(
        backend(env),
        dir.path(),
        "packets/migrations",
        &["--since", "packets.0003_fill_label"],
    )?;
    ensure!(code == 0, "exit {code}\n{stdout}\n{stderr}");
    ensure!(
        stderr.contains("sent no SQL (state only): packets.0004_newest"),
        "the state-only migration is named: {stderr}"
    );
    Ok(())
}

/// Any other runner (`--migrate-command`) with a history table of its
/// own (`--history-table`): each file it applies is one migration,
/// labelled as its table records it, judged as the framework's are.
fn a_migrate_command_of_its_own_with_its_history_table(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    copy_tree(
        &repo_root().join("tests/fixtures/frameworks/runner"),
        dir.path(),
    )?;
    let (code, stdout, stderr) = output(cli().current_dir(dir.path()).args([
        "verify",
        "--postgres",
        backend(env),
        "--migrate-command",
        "sh apply.sh",
        "--history-table",
        "greenhouse_steps",
        "--since",
        "002_trays",
        "--rows",
        "500",
    ]))?;
    let found = errors(&stdout);
    ensure!(
        code == 1 && found == ["locks.blocking-index-build"],
        "exit {code}, errors {found:?}\n{stdout}\n{stderr}"
    );
    ensure!(
        stderr.contains("3 migration(s) (001_beds..003_tray_index) from the migrations the migrate command sent"),
        "the runner's labels are its table's: {stderr}"
    );
    Ok(())
}

/// A migrate command that fails is exit 2 with its status and its last
/// lines (the database's password masked), and nothing is rehearsed.
fn a_failing_migrate_command_is_exit_2_with_its_last_lines(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (code, stdout, stderr) = output(cli().current_dir(dir.path()).args([
        "verify",
        "--postgres",
        backend(env),
        "--migrate-command",
        "echo 'applying 0002_potting_mix'; echo \"connecting with $PGPASSWORD\"; echo 'relation \"soil\" does not exist' >&2; exit 3",
        "--history-table",
        "greenhouse_steps",
    ]))?;
    ensure!(code == 2, "exit {code}\n{stdout}\n{stderr}");
    ensure!(
        stderr.contains("failed (exit status: 3)")
            && stderr.contains("relation \"soil\" does not exist")
            && stderr.contains("nothing was rehearsed"),
        "the failure says its status and its last lines: {stderr}"
    );
    ensure!(
        stderr.contains("connecting with ***"),
        "a password the command prints is never shown: {stderr}"
    );
    ensure!(!stdout.contains("PASSED"), "no verdict: {stdout}");
    Ok(())
}

/// Without `--since`, the data migration is where the rehearsal stops:
/// skipped, naming it and why, never judged from what it sent to an
/// empty database.
fn a_data_migration_is_skipped_naming_it(env: &TestEnv) -> anyhow::Result<()> {
    let dir = project("alembic", None)?;
    let (code, stdout, stderr) = verify(backend(env), dir.path(), "migrations/versions", &[])?;
    ensure!(code == 0, "exit {code}\n{stdout}\n{stderr}");
    let skipped = stdout
        .lines()
        .find(|l| l.contains("apply.not-runnable"))
        .with_context(|| format!("no skip in:\n{stdout}"))?;
    ensure!(
        skipped.trim_start().starts_with("SKIP")
            && stdout.contains("8b2e4d6f1a3c_route_code.py) is a data migration: it read the project's rows (`SELECT sailing.id, port.name FROM sailing JOIN port"),
        "the data migration is skipped, named, with why: {stdout}"
    );
    Ok(())
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let (code, _, stderr) = output(
        std::process::Command::new("git")
            .current_dir(dir)
            .args([
                "-c",
                "user.name=rollsafe",
                "-c",
                "user.email=rollsafe@localhost",
            ])
            .args(args),
    )?;
    ensure!(code == 0, "git {args:?}: {stderr}");
    Ok(())
}

/// The seed library at `main` (its app and its tests), and the working
/// tree adding `is_heirloom` to the app and the newest migration in
/// `variant`. `verify --base main --capture "python manage.py test"`
/// captures each version from the database Django's test runner creates
/// (`test_<name>`, its migrations there left out): Django's plain
/// `BooleanField(default=False)` drops the default, so the old app's
/// inserts fail during the rollout; `db_default` keeps it and passes.
fn django_apps_captured_from_their_test_databases_catch_the_dropped_default(
    env: &TestEnv,
) -> anyhow::Result<()> {
    for (variant, expected) in [
        (
            "hidden_default",
            &["locks.workload-failed", "compat.statement-fails"][..],
        ),
        ("kept_default", &[][..]),
    ] {
        let dir = project("django", None)?;
        let root = dir.path();
        git(root, &["init", "-q", "-b", "main"])?;
        git(root, &["add", "-A"])?;
        git(root, &["commit", "-qm", "the seed library"])?;
        for file in ["models.py", "tests.py"] {
            std::fs::copy(
                root.join("app_heirloom").join(file),
                root.join("packets").join(file),
            )?;
        }
        std::fs::copy(
            root.join("variants").join(format!("{variant}.py")),
            root.join("packets/migrations/0004_newest.py"),
        )?;
        let (code, stdout, stderr) = verify(
            backend(env),
            root,
            "packets/migrations",
            &[
                "--base",
                "main",
                "--capture",
                "python3 manage.py test packets",
            ],
        )?;
        let found = errors(&stdout);
        ensure!(
            found == expected && code == if expected.is_empty() { 0 } else { 1 },
            "{variant}: exit {code}, errors {found:?}, expected {expected:?}\n{stdout}\n{stderr}"
        );
        ensure!(
            stderr.contains("the base app at packets.0003_fill_label: 4 statements (2 reads, 2 writes")
                && stderr.contains("the head app at packets.0004_newest: 4 statements (2 reads, 2 writes"),
            "{variant}: each app is what its tests ran in Django's test database, its migrations left out: {stderr}"
        );
        if !expected.is_empty() {
            ensure!(
                stdout.contains("the base app's `insert__packets_packet` fails on packets.0004_newest at EXECUTE: null value in column \"is_heirloom\""),
                "the old app's insert is what fails: {stdout}"
            );
        }
    }
    Ok(())
}

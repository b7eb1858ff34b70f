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
//! The data migrations are applied at rows by the framework itself (its
//! one-migration command), and the migrations after them judged on the
//! rows they left: a bee yard's Django history (`apiary`) fills a
//! nullable column before making it NOT NULL, once for every row and once
//! missing some.
//!
//! Each project also holds two versions of an app with the tests its
//! framework's runner runs (Django's `manage.py test`, `python -m
//! unittest` on SQLAlchemy, `rake test` with minitest on ActiveRecord):
//! `verify --base main --capture <tests>` in a git repository the test
//! makes captures the old app at `main` and the new one in the working
//! tree, and the newest migration's boolean default decides the verdict.
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
            a_squashed_django_migration_is_labelled_as_its_file_is_named,
            a_django_project_without_a_settings_module_is_told_its_own,
            a_failed_migrate_names_the_first_statement_the_server_refused,
            a_migrate_command_of_its_own_with_its_history_table,
            a_failing_migrate_command_is_exit_2_with_its_last_lines,
            django_since_is_a_point_in_the_projects_git_history,
            django_migrations_one_commit_added_are_deployed_together,
            django_base_rehearses_what_ref_lacks_wherever_django_sends_it,
            a_project_that_migrates_its_own_sqlite_file_is_told_so,
            an_alembic_data_migration_is_applied_at_rows_by_alembic,
            alembic_pending_revisions_hold_their_locks_to_the_last_commit,
            an_activerecord_data_migration_is_applied_at_rows_by_rake,
            a_django_data_migration_fills_the_rows_the_not_null_migration_after_it_needs,
            a_django_data_migration_that_misses_rows_fails_the_not_null_migration_after_it,
            a_project_that_migrates_itself_when_it_starts_is_not_judged_as_its_data_migration,
            a_data_migration_under_a_migrate_command_of_its_own_is_skipped_naming_it,
            django_apps_captured_from_their_test_databases_catch_the_dropped_default,
            alembic_apps_captured_from_their_tests_catch_the_dropped_server_default,
            activerecord_apps_captured_from_their_test_env_catch_the_default_that_hides_rows,
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
    // The project deploys with its framework's migrate, not rollsafe's:
    // `rollsafe migrate`'s runs are not rehearsed, and it says so.
    ensure!(
        stdout.contains("apply.migrator-not-rehearsed")
            && !stdout.contains("apply.second-run-noop"),
        "{framework} {variant}: rollsafe migrate's runs judged a framework's project:\n{stdout}"
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

/// A squashed migration is applied in place of the migrations it
/// replaces and recorded as each of them: its statements are labelled
/// as its file is named, not as the first migration it replaces, and
/// the others are not listed as sending nothing.
fn a_squashed_django_migration_is_labelled_as_its_file_is_named(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = project("django", None)?;
    std::fs::copy(
        repo_root().join("tests/fixtures/frameworks/django/squashed/0001_squashed_0002.py"),
        dir.path().join("packets/migrations/0001_squashed_0002.py"),
    )?;
    let (code, stdout, stderr) = verify(backend(env), dir.path(), "packets/migrations", &[])?;
    ensure!(code != 2, "exit {code}\n{stdout}\n{stderr}");
    ensure!(
        stderr.contains("squashed migration(s) applied in place of those they replace, as Django does on a fresh database: packets.0001_squashed_0002 (2 replaced)"),
        "the squash is named in the header: {stderr}"
    );
    ensure!(
        stdout.lines().any(|l| l
            .starts_with("packets.0001_squashed_0002 packets/migrations/0001_squashed_0002.py")),
        "its findings are under its own name and file:\n{stdout}"
    );
    ensure!(
        !stdout
            .lines()
            .any(|l| l.starts_with("packets.0001_initial")
                || l.starts_with("packets.0002_packet_label")),
        "the migrations it replaced are not rehearsed apart:\n{stdout}"
    );
    ensure!(
        !stderr.contains("packets.0002_packet_label, ")
            && !stderr.contains("state only): packets.0002"),
        "a replaced migration is not listed as sending nothing: {stderr}"
    );
    Ok(())
}

/// A Django project whose manage.py leaves the settings module to the
/// environment (as many document) fails before it connects: exit 2,
/// naming the project's settings modules and the two ways to pass one,
/// and the way it names works.
fn a_django_project_without_a_settings_module_is_told_its_own(env: &TestEnv) -> anyhow::Result<()> {
    let dir = project("django", None)?;
    let manage = dir.path().join("manage.py");
    let text = std::fs::read_to_string(&manage)?;
    std::fs::write(
        &manage,
        text.replace(
            "os.environ.setdefault(\"DJANGO_SETTINGS_MODULE\", \"seedlib.settings\")",
            "pass",
        ),
    )?;
    let unset = || {
        let mut command = cli();
        command.env_remove("DJANGO_SETTINGS_MODULE");
        command
    };
    let (code, stdout, stderr) = output(unset().current_dir(dir.path()).args([
        "verify",
        "--postgres",
        backend(env),
        "--migrations",
        "packets/migrations",
    ]))?;
    ensure!(code == 2, "exit {code}\n{stdout}\n{stderr}");
    ensure!(
        stderr.contains("Django was not told which settings module to use, and this project's manage.py does not choose one: set DJANGO_SETTINGS_MODULE for rollsafe (e.g. DJANGO_SETTINGS_MODULE=seedlib.settings rollsafe verify …; the project has seedlib.settings, seedlib.settings_apps, seedlib.settings_sqlite) or name it in --migrate-command 'python manage.py migrate --settings=seedlib.settings'"),
        "the advice names the project's settings module: {stderr}"
    );
    let (code, stdout, stderr) = output(unset().current_dir(dir.path()).args([
        "verify",
        "--postgres",
        backend(env),
        "--migrations",
        "packets/migrations",
        "--since",
        "packets.0003_fill_label",
        "--migrate-command",
        "python manage.py migrate --settings=seedlib.settings",
    ]))?;
    ensure!(
        code == 0,
        "the advice works: exit {code}\n{stdout}\n{stderr}"
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

/// A migrate command that fails is exit 2 with its status on one line,
/// then its last lines as lines (the database's password masked), and
/// nothing is rehearsed.
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
    let lines: Vec<&str> = stderr.lines().collect();
    let summary = lines
        .iter()
        .position(|l| l.starts_with("rollsafe: error: the migrate command"))
        .with_context(|| format!("no error line in:\n{stderr}"))?;
    ensure!(
        lines[summary]
            .ends_with("nothing was rehearsed; its output ends: relation \"soil\" does not exist")
            && lines[summary + 1..]
                == [
                    "  | applying 0002_potting_mix",
                    "  | connecting with ***",
                    "  | relation \"soil\" does not exist",
                ],
        "the one-line summary first, then the command's last lines as it printed them:\n{stderr}"
    );
    ensure!(!stdout.contains("PASSED"), "no verdict: {stdout}");
    Ok(())
}

/// A history that does not build from an empty database (its first
/// step alters a table another tool creates) fails wherever its command
/// prints its traceback: the error names the first statement the server
/// refused and why, read from the server, not the command's last line.
fn a_failed_migrate_names_the_first_statement_the_server_refused(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    copy_tree(
        &repo_root().join("tests/fixtures/frameworks/runner"),
        dir.path(),
    )?;
    std::fs::write(
        dir.path().join("steps/000_benches.sql"),
        "ALTER TABLE potting_benches ADD COLUMN shaded boolean;\n",
    )?;
    let (code, stdout, stderr) = output(cli().current_dir(dir.path()).args([
        "verify",
        "--postgres",
        backend(env),
        "--migrate-command",
        "sh apply.sh; echo '(see the log for details)' >&2; exit 1",
        "--history-table",
        "greenhouse_steps",
    ]))?;
    ensure!(code == 2, "exit {code}\n{stdout}\n{stderr}");
    ensure!(
        stderr.contains("its output ends: (see the log for details); the first statement the server refused: `ALTER TABLE potting_benches ADD COLUMN shaded boolean` (relation \"potting_benches\" does not exist)"),
        "the refused statement and the server's error are named: {stderr}"
    );
    Ok(())
}

/// The findings of `label`'s section of a text report (its heading
/// line up to the next heading), each line trimmed.
fn section<'a>(stdout: &'a str, label: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{label} ")))
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .map(str::trim)
        .collect()
}

/// The first line of `lines` that starts with `severity` and names `id`.
fn finding<'a>(lines: &[&'a str], severity: &str, id: &str) -> Option<&'a str> {
    lines
        .iter()
        .find(|l| l.starts_with(severity) && l.split_whitespace().nth(1) == Some(id))
        .copied()
}

/// A data migration's framework applies it at rows (`data`, by
/// `command`): it is never marked not runnable, its apply names the
/// command and the rows it changed (`changed`), and rewrite, locks and
/// static say they could not measure it, skipped, never ok.
fn applied_at_rows(
    stdout: &str,
    stderr: &str,
    data: &str,
    command: &str,
    changed: &str,
) -> anyhow::Result<()> {
    ensure!(
        !stdout.contains("apply.not-runnable") && !stdout.contains("apply.not-rehearsed"),
        "nothing is left unrehearsed: {stdout}"
    );
    let lines = section(stdout, data);
    let applied = finding(&lines, "ok", "apply.applied-by-framework")
        .with_context(|| format!("no apply.applied-by-framework at {data}:\n{stdout}"))?;
    ensure!(
        applied.contains(command) && applied.contains(changed),
        "the apply names the command and the rows it changed ({changed}): {applied}"
    );
    for id in [
        "rewrite.applied-by-framework",
        "locks.applied-by-framework",
        "static.applied-by-framework",
    ] {
        ensure!(
            finding(&lines, "SKIP", id).is_some_and(|l| l.contains(command)),
            "{id} is skipped naming the command:\n{}",
            lines.join("\n")
        );
    }
    ensure!(
        !lines.iter().any(|l| l.starts_with("ok    rewrite.")
            || l.starts_with("ok    locks.")
            || l.starts_with("ok    static.")),
        "no ok for what was not measured:\n{}",
        lines.join("\n")
    );
    ensure!(
        stderr
            .lines()
            .any(|l| l.contains("data migration(s) applied at rows by")
                && l.contains(&format!("{data} (`"))
                && l.contains(&format!("{command}`)"))),
        "the header names the data migration and its command: {stderr}"
    );
    Ok(())
}

/// Alembic's default env.py sends every pending revision in one
/// transaction: with production at the data migration (`--since`), the
/// note column's brief ACCESS EXCLUSIVE on sailing is held until the next
/// revision's slow pass over every port commits. That is an error on the
/// note revision, though each alone is within the budget; with
/// `transaction_per_migration=True` each commits on its own and the same
/// revisions pass.
fn alembic_pending_revisions_hold_their_locks_to_the_last_commit(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = project("alembic", None)?;
    let versions = dir.path().join("migrations/versions");
    let variants = repo_root().join("tests/fixtures/frameworks/alembic/variants");
    std::fs::copy(
        variants.join("shared_note.py"),
        versions.join("c7d1e2f3a4b5_note.py"),
    )?;
    std::fs::copy(
        variants.join("shared_trim.py"),
        versions.join("d9e8f7a6b5c4_trim.py"),
    )?;
    let args = ["--since", "8b2e4d6f1a3c"];
    let (code, stdout, stderr) = verify(backend(env), dir.path(), "migrations/versions", &args)?;
    ensure!(
        code == 1 && errors(&stdout) == ["locks.held-to-shared-commit"],
        "exit {code}, errors {:?}\n{stdout}\n{stderr}",
        errors(&stdout)
    );
    let note = section(&stdout, "c7d1e2f3a4b5");
    let error = finding(&note, "ERROR", "locks.held-to-shared-commit")
        .with_context(|| format!("not on the note revision:\n{stdout}"))?;
    ensure!(
        error.contains("ACCESS EXCLUSIVE on sailing")
            && error.contains("d9e8f7a6b5c4 (~")
            && error.contains("transaction_per_migration=True")
            && error.contains("rows of port"),
        "{error}"
    );

    // Each revision in its own transaction: nothing held past its commit.
    let env_py = dir.path().join("migrations/env.py");
    let text = std::fs::read_to_string(&env_py)?;
    let per_migration = text.replace(
        "target_metadata=None)",
        "target_metadata=None, transaction_per_migration=True)",
    );
    ensure!(per_migration != text, "env.py's context.configure moved");
    std::fs::write(&env_py, per_migration)?;
    let (code, stdout, stderr) = verify(backend(env), dir.path(), "migrations/versions", &args)?;
    ensure!(
        code == 0 && errors(&stdout).is_empty() && !stdout.contains("shared-transaction"),
        "exit {code}\n{stdout}\n{stderr}"
    );
    Ok(())
}

/// Without `--since`, Alembic's data migration (reading sailings through
/// `op.get_bind()`) is applied at rows by `alembic upgrade <its
/// revision>` on the seeded database, with its history before it.
fn an_alembic_data_migration_is_applied_at_rows_by_alembic(env: &TestEnv) -> anyhow::Result<()> {
    let dir = project("alembic", None)?;
    let (code, stdout, stderr) = verify(backend(env), dir.path(), "migrations/versions", &[])?;
    ensure!(code == 0, "exit {code}\n{stdout}\n{stderr}");
    applied_at_rows(
        &stdout,
        &stderr,
        "8b2e4d6f1a3c",
        "alembic upgrade 8b2e4d6f1a3c",
        "sailing: 500 updated",
    )
}

/// ActiveRecord's data migration (Ruby in `up` filling `shelf` from the
/// rows) is applied at rows by `rake db:migrate:up VERSION=…`.
fn an_activerecord_data_migration_is_applied_at_rows_by_rake(env: &TestEnv) -> anyhow::Result<()> {
    let dir = project("activerecord", None)?;
    let (code, stdout, stderr) = verify(backend(env), dir.path(), "db/migrate", &[])?;
    ensure!(code == 0, "exit {code}\n{stdout}\n{stderr}");
    applied_at_rows(
        &stdout,
        &stderr,
        "20240308090000",
        "rake db:migrate:up VERSION=20240308090000",
        "tools: 500 updated",
    )
}

/// A bee yard (`tests/fixtures/frameworks/apiary`): 0002 adds
/// `honey_kg` nullable, 0003 (`RunPython`) fills it from each hive's
/// frames, 0004 sets it NOT NULL. Sent to an empty database, 0003 sends
/// nothing at rows, so 0004 would fail there; applied by Django at rows,
/// every hive has its value and 0004 is judged on rows like any
/// migration: it applies, and its one error is a true one (SET NOT NULL
/// scans the table under ACCESS EXCLUSIVE).
fn a_django_data_migration_fills_the_rows_the_not_null_migration_after_it_needs(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    copy_tree(
        &repo_root().join("tests/fixtures/frameworks/apiary"),
        dir.path(),
    )?;
    let (code, stdout, stderr) = verify(backend(env), dir.path(), "hives/migrations", &[])?;
    let found = errors(&stdout);
    ensure!(
        code == 1 && found == ["rewrite.full-scan-under-lock"],
        "exit {code}, errors {found:?}\n{stdout}\n{stderr}"
    );
    applied_at_rows(
        &stdout,
        &stderr,
        "hives.0003_fill_honey_kg",
        "manage.py migrate hives 0003_fill_honey_kg",
        "hives_hive: 500 updated",
    )?;
    let later = section(&stdout, "hives.0004_honey_kg_not_null");
    ensure!(
        finding(&later, "ok", "apply.applies").is_some_and(|l| l.contains("rows"))
            && finding(&later, "ERROR", "rewrite.full-scan-under-lock").is_some()
            && finding(&later, "ok", "locks.measured").is_some(),
        "the NOT NULL migration is judged on rows:\n{}",
        later.join("\n")
    );
    Ok(())
}

/// A project whose start-up brings the database to its newest version
/// (its manage.py migrates to the end after any command, as apps that
/// upgrade in their factory do): the one-migration command applies more
/// than the data migration. Its history then records the NOT NULL
/// migration too: that is said and skipped, never judged as the data
/// migration's doing, and the NOT NULL migration is still rehearsed, on
/// rows seeded anew.
fn a_project_that_migrates_itself_when_it_starts_is_not_judged_as_its_data_migration(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    copy_tree(
        &repo_root().join("tests/fixtures/frameworks/apiary"),
        dir.path(),
    )?;
    let manage = dir.path().join("manage.py");
    let text = std::fs::read_to_string(&manage)?.replace(
        "    execute_from_command_line(sys.argv)\n",
        "    execute_from_command_line(sys.argv)\n    # The yard's start-up: the database at its newest version.\n    from django.core.management import call_command\n\n    call_command(\"migrate\", verbosity=0)\n",
    );
    ensure!(
        text.contains("call_command(\"migrate\""),
        "manage.py not changed: {text}"
    );
    std::fs::write(&manage, text)?;
    let (code, stdout, stderr) = verify(backend(env), dir.path(), "hives/migrations", &[])?;
    let data = section(&stdout, "hives.0003_fill_honey_kg");
    ensure!(
        finding(&data, "SKIP", "apply.applied-by-framework").is_some_and(|l| l
            .contains("did more than apply it on the database with")
            && l.contains("its history then records hives.0004_honey_kg_not_null too")),
        "the overshoot is said and skipped (exit {code}):\n{}\n{stderr}",
        data.join("\n")
    );
    ensure!(
        finding(&data, "ERROR", "apply.fails-on-seeded").is_none(),
        "{}",
        data.join("\n")
    );
    let later = section(&stdout, "hives.0004_honey_kg_not_null");
    ensure!(
        finding(&later, "ok", "apply.applies").is_some_and(|l| l.contains("rows")),
        "the NOT NULL migration is still rehearsed on rows:\n{}",
        later.join("\n")
    );
    Ok(())
}

/// The bee yard's data migration filling only the hives of even id: at
/// rows the NOT NULL migration after it fails, a true error at that
/// migration, and the data migration's apply says how many rows it
/// changed.
fn a_django_data_migration_that_misses_rows_fails_the_not_null_migration_after_it(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let src = repo_root().join("tests/fixtures/frameworks/apiary");
    copy_tree(&src, dir.path())?;
    std::fs::copy(
        src.join("variants/fills_some.py"),
        dir.path().join("hives/migrations/0003_fill_honey_kg.py"),
    )?;
    let (code, stdout, stderr) = verify(backend(env), dir.path(), "hives/migrations", &[])?;
    let found = errors(&stdout);
    ensure!(
        code == 1 && found == ["apply.fails-on-seeded"],
        "exit {code}, errors {found:?}\n{stdout}\n{stderr}"
    );
    let later = section(&stdout, "hives.0004_honey_kg_not_null");
    ensure!(
        finding(&later, "ERROR", "apply.fails-on-seeded")
            .is_some_and(|l| l
                .contains("column \"honey_kg\" of relation \"hives_hive\" contains null values")),
        "the NOT NULL migration fails at rows:\n{}",
        later.join("\n")
    );
    let data = section(&stdout, "hives.0003_fill_honey_kg");
    ensure!(
        finding(&data, "ok", "apply.applied-by-framework")
            .is_some_and(|l| l.contains("manage.py migrate hives 0003_fill_honey_kg")
                && l.contains("hives_hive: ")
                && !l.contains("hives_hive: 500 updated")),
        "the data migration applied, changing some of the rows:\n{}",
        data.join("\n")
    );
    Ok(())
}

/// The seed library with its exchange evenings and members' wishes
/// (`seedlib.settings_apps`: apps `exchanges`, `packets`, `swaps`), in a
/// git repository the test makes: the library (`packets` 0001–0002),
/// then `exchanges.0001` and `swaps.0001`, then `packets.0003`; the
/// working tree adds `exchanges.0002` and the newest `packets.0004` (a
/// plain index). Django sends `exchanges`, then `packets`, then `swaps`.
/// `--since 0003_fill_label.py` is that point in the history: `swaps`,
/// sent after it but written before it, is applied with the base;
/// `exchanges.0002`, sent before it but written after it, is rehearsed
/// with `packets.0004`, and the header says which moved.
fn django_since_is_a_point_in_the_projects_git_history(env: &TestEnv) -> anyhow::Result<()> {
    let dir = project("django", Some("plain_index"))?;
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"])?;
    git(root, &["add", "-A"])?;
    git(
        root,
        &[
            "reset",
            "-q",
            "--",
            "exchanges",
            "swaps",
            "packets/migrations/0003_fill_label.py",
            "packets/migrations/0004_newest.py",
        ],
    )?;
    git(root, &["commit", "-qm", "the seed library"])?;
    git(root, &["add", "exchanges", "swaps"])?;
    git(
        root,
        &[
            "reset",
            "-q",
            "--",
            "exchanges/migrations/0002_exchange_note.py",
        ],
    )?;
    git(root, &["commit", "-qm", "exchange evenings and wishes"])?;
    git(root, &["add", "packets/migrations/0003_fill_label.py"])?;
    git(root, &["commit", "-qm", "packet labels"])?;
    let (code, stdout, stderr) = output(
        cli()
            .current_dir(root)
            .env("DJANGO_SETTINGS_MODULE", "seedlib.settings_apps")
            .args(["verify", "--postgres", backend(env), "--rows", "500"])
            .args(["--migrations", "packets/migrations"])
            .args(["--since", "0003_fill_label.py"]),
    )?;
    let found = errors(&stdout);
    ensure!(
        code == 1 && found == ["locks.blocking-index-build"],
        "exit {code}, errors {found:?}\n{stdout}\n{stderr}"
    );
    ensure!(
        stdout.contains("rehearsed:  exchanges.0002_exchange_note, packets.0004_newest ("),
        "what git added after --since is rehearsed, whichever app: {stdout}"
    );
    ensure!(
        stderr.contains("1 of the project's migration(s) (swaps.0001_initial) were sent after the --since migration but their files were added to git before its file: applied with the base")
            && stderr.contains("1 of the project's migration(s) (exchanges.0002_exchange_note) were sent before the --since migration but their files were added to git after its file: rehearsed"),
        "the header says what moved: {stderr}"
    );
    Ok(())
}

/// The wishes app's table and an index on it, added by one commit: one
/// deploy runs both, so the table is empty when the index is built (no
/// generated rows there) and the plain index passes; added by two
/// commits, the index is built on the rows the apps wrote in between, a
/// locks error.
fn django_migrations_one_commit_added_are_deployed_together(env: &TestEnv) -> anyhow::Result<()> {
    const INDEX: &str = "from django.db import migrations, models\n\n\nclass Migration(migrations.Migration):\n    dependencies = [(\"swaps\", \"0001_initial\")]\n\n    operations = [\n        migrations.AddIndex(\n            model_name=\"wish\",\n            index=models.Index(fields=[\"species\"], name=\"wish_species_idx\"),\n        ),\n    ]\n";
    for one_commit in [true, false] {
        let dir = project("django", None)?;
        let root = dir.path();
        std::fs::write(
            root.join("swaps/migrations/0002_wish_species_idx.py"),
            INDEX,
        )?;
        git(root, &["init", "-q", "-b", "main"])?;
        git(root, &["add", "-A"])?;
        git(root, &["reset", "-q", "--", "swaps/migrations"])?;
        git(root, &["commit", "-qm", "packets and exchanges"])?;
        if one_commit {
            git(root, &["add", "swaps/migrations"])?;
        } else {
            git(
                root,
                &[
                    "add",
                    "swaps/migrations/0001_initial.py",
                    "swaps/migrations/__init__.py",
                ],
            )?;
            git(root, &["commit", "-qm", "wishes"])?;
            git(root, &["add", "swaps/migrations"])?;
        }
        git(root, &["commit", "-qm", "wishes by species"])?;
        let (code, stdout, stderr) = output(
            cli()
                .current_dir(root)
                .env("DJANGO_SETTINGS_MODULE", "seedlib.settings_apps")
                .args(["verify", "--postgres", backend(env), "--rows", "500"])
                .args(["--migrations", "swaps/migrations"])
                .args(["--since", "0003_fill_label.py"]),
        )?;
        let found = errors(&stdout);
        let together = stderr.contains("deployed together")
            && stderr.contains("swaps.0001_initial..swaps.0002_wish_species_idx (commit ");
        match one_commit {
            true => ensure!(
                code == 0 && found.is_empty() && together,
                "one commit: exit {code}, errors {found:?}\n{stdout}\n{stderr}"
            ),
            false => ensure!(
                code == 1 && found == ["locks.blocking-index-build"] && !together,
                "two commits: exit {code}, errors {found:?}\n{stdout}\n{stderr}"
            ),
        }
    }
    Ok(())
}

/// The seed library's three apps at `main`, and a working tree adding
/// `exchanges.0002` and the newest `packets.0004` (a plain index).
/// Django sends both among `main`'s (`exchanges` first, `swaps` last):
/// `--base main` is not refused as a migration added before `main`'s
/// newest (`swaps.0001`); both are rehearsed after all of `main`'s. Nor
/// is `exchanges.0001`, unchanged, refused as edited history because
/// the SQL Django sends for it differs at `main` and here (a uuid4 drawn
/// on each run).
fn django_base_rehearses_what_ref_lacks_wherever_django_sends_it(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = project("django", Some("plain_index"))?;
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"])?;
    git(root, &["add", "-A"])?;
    git(
        root,
        &[
            "reset",
            "-q",
            "--",
            "exchanges/migrations/0002_exchange_note.py",
            "packets/migrations/0004_newest.py",
        ],
    )?;
    git(
        root,
        &["commit", "-qm", "the seed library and its exchanges"],
    )?;
    let (code, stdout, stderr) = output(
        cli()
            .current_dir(root)
            .env("DJANGO_SETTINGS_MODULE", "seedlib.settings_apps")
            .args(["verify", "--postgres", backend(env), "--rows", "500"])
            .args(["--migrations", "packets/migrations", "--base", "main"]),
    )?;
    let found = errors(&stdout);
    ensure!(
        code == 1 && found == ["locks.blocking-index-build"],
        "exit {code}, errors {found:?}\n{stdout}\n{stderr}"
    );
    ensure!(
        stdout.contains("rehearsed:  exchanges.0002_exchange_note, packets.0004_newest ("),
        "what main lacks is rehearsed, after all of main's: {stdout}"
    );
    ensure!(
        stderr.contains("2 new migration(s) (exchanges.0002_exchange_note, packets.0004_newest) were sent among the base's"),
        "the header says they were sent among main's: {stderr}"
    );
    // An applied migration's file edited is refused, named from the
    // repository's top.
    let label = root.join("packets/migrations/0002_packet_label.py");
    let edited = std::fs::read_to_string(&label)?.replace("max_length=200", "max_length=250");
    std::fs::write(&label, edited)?;
    let (code, stdout, stderr) = output(
        cli()
            .current_dir(root)
            .env("DJANGO_SETTINGS_MODULE", "seedlib.settings_apps")
            .args(["verify", "--postgres", backend(env), "--rows", "500"])
            .args(["--migrations", "packets/migrations", "--base", "main"]),
    )?;
    ensure!(
        code == 2
            && stderr.contains("0002_packet_label.py differs from main's (its file changed)")
            && stderr.contains("git checkout main -- packets/migrations/0002_packet_label.py"),
        "an edited applied migration is refused: exit {code}\n{stdout}\n{stderr}"
    );
    Ok(())
}

/// Settings that pick a database of their own (a SQLite file, as many
/// projects default to): the command succeeds, the throwaway server sees
/// no migration, and the refusal says the output shows another database
/// migrated, and how to pass rollsafe's on.
fn a_project_that_migrates_its_own_sqlite_file_is_told_so(env: &TestEnv) -> anyhow::Result<()> {
    let dir = project("django", None)?;
    let (code, stdout, stderr) = output(
        cli()
            .current_dir(dir.path())
            .env("DJANGO_SETTINGS_MODULE", "seedlib.settings_sqlite")
            .args(["verify", "--postgres", backend(env)])
            .args(["--migrations", "packets/migrations"]),
    )?;
    ensure!(code == 2, "exit {code}\n{stdout}\n{stderr}");
    ensure!(
        stderr.contains("the server saw no write to django_migrations, so no migration was applied; yet its output says it migrated a database (`Applying packets.0001_initial... OK`): another one")
            && stderr.contains("--migrate-command 'DB_NAME=$PGDATABASE"),
        "the refusal says where the migrations went and the way out: {stderr}"
    );
    Ok(())
}

/// A `--migrate-command` of the user's that ends as Django's does (the
/// environment a project's settings need first, as many projects' docs
/// ask) is aimed at the one data migration (`… migrate packets
/// 0003_fill_label`) and applied at rows; one that ends otherwise (a
/// wrapper) cannot be: its data migration is where the rehearsal stops,
/// skipped, naming it and why, never judged from what it sent to an empty
/// database.
fn a_data_migration_under_a_migrate_command_of_its_own_is_skipped_naming_it(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = project("django", None)?;
    let run = |command: &str| {
        verify(
            backend(env),
            dir.path(),
            "packets/migrations",
            &[
                "--migrate-command",
                command,
                "--history-table",
                "django_migrations",
            ],
        )
    };
    let (code, stdout, stderr) = run("PACKETS_ENV=ci python3 -W ignore manage.py migrate")?;
    ensure!(code == 0, "exit {code}\n{stdout}\n{stderr}");
    ensure!(
        stdout.contains("by Django itself (`PACKETS_ENV=ci python3 -W ignore manage.py migrate packets 0003_fill_label`)")
            && !stdout.contains("apply.not-runnable"),
        "a command ending as Django's is aimed at the data migration: {stdout}"
    );
    let (code, stdout, stderr) = run("sh -c 'exec python3 -W ignore manage.py migrate'")?;
    ensure!(code == 0, "exit {code}\n{stdout}\n{stderr}");
    let skipped = stdout
        .lines()
        .find(|l| l.contains("apply.not-runnable"))
        .with_context(|| format!("no skip in:\n{stdout}"))?;
    ensure!(
        skipped.trim_start().starts_with("SKIP")
            && stdout
                .contains("0003_fill_label.py) is a data migration: it read the project's rows")
            && stdout.contains("this migrate command does not end as the framework's does")
            && !stdout.contains("applied-by-framework"),
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

/// `framework`'s fixture project in a git repository the test makes:
/// `main` holds the app before the newest migration, with its tests;
/// the working tree adds `variant` as the newest migration (`newest`,
/// in the framework's migrations folder) and the next app version
/// (each of `next_app` copied from the fixture onto the app's file).
fn pull_request(
    framework: &str,
    next_app: &[(&str, &str)],
    variant: &str,
    newest: &str,
) -> anyhow::Result<tempfile::TempDir> {
    let dir = project(framework, None)?;
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"])?;
    git(root, &["add", "-A"])?;
    git(
        root,
        &["commit", "-qm", "the app before the newest migration"],
    )?;
    for (from, to) in next_app {
        std::fs::copy(root.join(from), root.join(to))?;
    }
    let (folder, _, ext, _) = layout_of(framework);
    std::fs::copy(
        root.join("variants").join(format!("{variant}.{ext}")),
        root.join(folder).join(newest),
    )?;
    Ok(dir)
}

/// `verify --base main --capture <tests>` in `framework`'s
/// [`pull_request`] `dir` (with `variant`): its error ids are `expected`
/// (exit 1, else none and exit 0), and each app is the statements its
/// own tests ran (`apps`: the lines verify prints for the base app and
/// for the head app). Returns stdout.
fn verify_pull_request(
    env: &TestEnv,
    (framework, variant): (&str, &str),
    dir: &Path,
    tests: &str,
    expected: &[&str],
    apps: [&str; 2],
) -> anyhow::Result<String> {
    let (folder, _, _, _) = layout_of(framework);
    let (code, stdout, stderr) = verify(
        backend(env),
        dir,
        folder,
        &["--base", "main", "--capture", tests],
    )?;
    let found = errors(&stdout);
    ensure!(
        found == expected && code == if expected.is_empty() { 0 } else { 1 },
        "{framework} {variant}: exit {code}, errors {found:?}, expected {expected:?}\n{stdout}\n{stderr}"
    );
    for app in apps {
        ensure!(
            stderr.contains(app),
            "{framework} {variant}: each app is what its own tests ran, the framework's set-up and the drivers' introspection left out: no `{app}` in\n{stderr}"
        );
    }
    Ok(stdout)
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
    const FRAMEWORK: &str = "django";
    for (variant, expected) in [
        (
            "hidden_default",
            &["locks.workload-failed", "compat.statement-fails"][..],
        ),
        ("kept_default", &[][..]),
    ] {
        let dir = pull_request(
            FRAMEWORK,
            &[
                ("app_heirloom/models.py", "packets/models.py"),
                ("app_heirloom/tests.py", "packets/tests.py"),
            ],
            variant,
            "0004_newest.py",
        )?;
        let stdout = verify_pull_request(
            env,
            (FRAMEWORK, variant),
            dir.path(),
            "python3 manage.py test packets",
            expected,
            [
                "the base app at packets.0003_fill_label: 3 statements (1 reads, 2 writes",
                "the head app at packets.0004_newest: 3 statements (1 reads, 2 writes",
            ],
        )?;
        if !expected.is_empty() {
            ensure!(
                stdout.contains("the base app's `insert__packets_packet` fails on packets.0004_newest at EXECUTE: null value in column \"is_heirloom\""),
                "the old app's insert is what fails: {stdout}"
            );
        }
    }
    Ok(())
}

/// The ferry timetable at `main` (SQLAlchemy models, `unittest` tests
/// that bring DATABASE_URL's database to Alembic's head first), and the
/// working tree cancelling sailings: `is_cancelled`, a Python-side
/// default in the new model, filtered on by the new board. Alembic sends
/// no default for `default=`; the migration that adds the column with a
/// `server_default` and then drops it (to match the model) leaves the old
/// app's inserts failing during the rollout; a kept `server_default`
/// passes. The tests' `alembic upgrade head` finds the capture's
/// database at head (Alembic's own table as its migrate wrote it), and
/// the drivers' introspection is left out of each app.
fn alembic_apps_captured_from_their_tests_catch_the_dropped_server_default(
    env: &TestEnv,
) -> anyhow::Result<()> {
    const FRAMEWORK: &str = "alembic";
    for (variant, expected) in [
        (
            "hidden_default",
            &["locks.workload-failed", "compat.statement-fails"][..],
        ),
        ("kept_default", &[][..]),
    ] {
        let dir = pull_request(
            FRAMEWORK,
            &[
                ("app_cancellations/models.py", "ferry/models.py"),
                ("app_cancellations/timetable.py", "ferry/timetable.py"),
                (
                    "app_cancellations/test_timetable.py",
                    "tests/test_timetable.py",
                ),
            ],
            variant,
            "c7d1e2f3a4b5_newest.py",
        )?;
        let stdout = verify_pull_request(
            env,
            (FRAMEWORK, variant),
            dir.path(),
            "python3 -m unittest -q",
            expected,
            [
                "the base app at 8b2e4d6f1a3c: 4 statements (2 reads, 2 writes",
                "the head app at c7d1e2f3a4b5: 5 statements (2 reads, 3 writes",
            ],
        )?;
        if !expected.is_empty() {
            ensure!(
                stdout.contains("the base app's `insert_sailing` fails on c7d1e2f3a4b5 at EXECUTE: null value in column \"is_cancelled\""),
                "the old app's insert is what fails: {stdout}"
            );
        }
    }
    Ok(())
}

/// The tool shed at `main` (ActiveRecord 6.1 models without Rails,
/// minitest run by `rake test` in the test environment, whose helper
/// refuses a database with pending migrations as Rails' does), and the
/// working tree taking tools out of service: the new shelf lists only
/// tools `in_service`. `add_column … default: false, null: false` keeps
/// its default, and that default hides every tool the old app stocks
/// during the rollout, and the shed's existing tools, from the new
/// shelf; `default: true` shows them.
///
/// ActiveRecord reads a model with `SELECT "tools".*` as a prepared
/// statement; after a column is added, a statement prepared before it
/// fails once with `cached plan must not change result type` (ActiveRecord
/// prepares again outside a transaction, raises
/// `PreparedStatementCacheExpired` inside one). The live apps' workload
/// keeps its statements prepared across the migration and prepares such a
/// statement again, as the driver does: both variants warn
/// `locks.workload-re-prepared`, neither fails the workload; what tells
/// them apart is the readers' findings.
fn activerecord_apps_captured_from_their_test_env_catch_the_default_that_hides_rows(
    env: &TestEnv,
) -> anyhow::Result<()> {
    const FRAMEWORK: &str = "activerecord";
    for (variant, expected) in [
        (
            "hides_new_tools",
            &[
                "backfill.new-readers-miss-rows",
                "compat.old-writes-invisible-to-new",
            ][..],
        ),
        ("shows_new_tools", &[][..]),
    ] {
        let dir = pull_request(
            FRAMEWORK,
            &[
                ("app_in_service/shed.rb", "app/shed.rb"),
                ("app_in_service/shed_test.rb", "test/shed_test.rb"),
            ],
            variant,
            "20240315090000_add_tool_in_service.rb",
        )?;
        let stdout = verify_pull_request(
            env,
            (FRAMEWORK, variant),
            dir.path(),
            "rake test",
            expected,
            [
                "the base app at 20240308090000: 5 statements (2 reads, 3 writes",
                "the head app at 20240315090000: 6 statements (2 reads, 4 writes",
            ],
        )?;
        ensure!(
            stdout.contains("warn  locks.workload-re-prepared")
                && stdout.contains("`base.select__tools__by_shelf (read)`")
                && stdout.contains("cached plan must not change result type"),
            "the prepared `SELECT \"tools\".*` outliving the new column is prepared again and named: {stdout}"
        );
        if variant == "hides_new_tools" {
            ensure!(
                stdout.contains("a row the base app wrote during the rollout with `insert__tools`")
                    && stdout.contains("is not returned by the head app's `select__tools__by_in_service_shelf`: its filter `\"tools\".\"in_service\" = $2` excludes it"),
                "the old app's new tools are hidden from the new shelf: {stdout}"
            );
        }
    }
    Ok(())
}

//! First contact with a history rollsafe has never seen: every name its
//! tool runs is read (sqlx descriptions with brackets, a diesel folder
//! with no `_`, a dbmate name with a space or no name at all, Flyway files
//! with no description), a migration is named however the folder shows it
//! (`--since` with the file, its stem, its folder), what is not a
//! migration is named in the run's header (Flyway callbacks and undo
//! files, a README), and a reworked Sqitch change is found under the tag
//! Sqitch finds it under. The fixtures are a pottery studio's.

use anyhow::ensure;
use libtest_mimic::Trial;
use rollsafe::catalog::{Catalog, Layout, ReadOptions};

use crate::common::TestEnv;
use crate::layouts::{copy_fixture, expect_read, fixture, rehearse_clean, rollsafe_cli};

pub fn tests(env: &std::sync::Arc<TestEnv>) -> Vec<Trial> {
    crate::trials!(
        "first_contact",
        env,
        [
            names_each_tool_runs_are_read_in_its_order_and_rehearsed,
            since_takes_the_migration_as_the_folder_shows_it,
            the_header_names_callbacks_undo_files_and_ignored_files,
            a_reworked_sqitch_change_is_deployed_from_the_tag_that_has_its_script,
            an_extension_swallowed_by_a_do_block_is_named_with_an_image_that_has_it,
            dbmate_sections_are_cut_as_the_projects_dbmate_cuts_them,
            a_sqitch_dependency_on_a_sibling_project_deploys_it_first,
            a_sqitch_script_reading_a_file_into_a_psql_variable_is_rehearsed,
            the_migrator_starts_from_what_the_setup_made,
        ]
    )
}

fn read_as(dir: &str, layout: Option<Layout>) -> anyhow::Result<Catalog> {
    Ok(Catalog::from_dir_in(
        &fixture(dir),
        &ReadOptions {
            layout,
            ..Default::default()
        },
    )?)
}

/// sqlx's `<version>_<anything>.sql`, diesel's folder without `_` (its
/// version is the whole name, dashes removed, ordered as a string),
/// dbmate's `^(\d+).*\.sql$` and Flyway's `V<version>.sql`: each read as
/// its tool reads it, in its tool's order, and rehearsed with no error.
fn names_each_tool_runs_are_read_in_its_order_and_rehearsed(env: &TestEnv) -> anyhow::Result<()> {
    let sqlx = read_as("sqlx-bracketed", Some(Layout::Sqlx))?;
    expect_read(
        &sqlx,
        Layout::Sqlx,
        &[
            ("20250101090000", "20250101090000_[1.0.0]_kilns.sql", false),
            ("20250102090000", "20250102090000_glazes.sql", false),
            (
                "20250103090000",
                "20250103090000_[1.1.0]_kiln_notes.sql",
                false,
            ),
        ],
    )?;
    // Detected too: the bracketed names are sqlx's plain files.
    ensure!(read_as("sqlx-bracketed", None)?.layout == Layout::Sqlx);
    rehearse_clean(env, sqlx)?;

    let diesel = read_as("diesel-dashed", None)?;
    expect_read(
        &diesel,
        Layout::Diesel,
        &[
            (
                "2024-01-05-090000_create_kilns",
                "2024-01-05-090000_create_kilns/up.sql",
                false,
            ),
            (
                "2024-01-05-1200-add-kiln-notes",
                "2024-01-05-1200-add-kiln-notes/up.sql",
                false,
            ),
            (
                "2024-02-01-080000_firings",
                "2024-02-01-080000_firings/up.sql",
                false,
            ),
        ],
    )?;
    // The version diesel has recorded for it, which a rename would change.
    ensure!(
        diesel.migrations()[1].key == "202401051200addkilnnotes",
        "{}",
        diesel.migrations()[1].key
    );
    rehearse_clean(env, diesel)?;

    let dbmate = read_as("dbmate-spaced", None)?;
    expect_read(
        &dbmate,
        Layout::Dbmate,
        &[
            ("20240301090000", "20240301090000_create_kilns.sql", false),
            (
                "20240305101500",
                "20240305101500_kiln firing copy.sql",
                false,
            ),
            ("20240312080000", "20240312080000.sql", false),
        ],
    )?;
    rehearse_clean(env, dbmate)?;

    let flyway = read_as("flyway-callbacks", None)?;
    expect_read(
        &flyway,
        Layout::Flyway,
        &[
            ("beforeMigrate", "beforeMigrate.sql", false),
            ("V1", "V1__create_kilns.sql", false),
            ("V1.1", "V1.1.sql", false),
            ("V2.0.1", "V2.0.1.sql", false),
            ("afterMigrate__grants", "afterMigrate__grants.sql", false),
        ],
    )?;
    // The callbacks run where Flyway runs them: the grant after the
    // last migration, on the tables it names.
    rehearse_clean(env, flyway)?;
    Ok(())
}

/// `--since` takes the migration as a user sees it in the folder: the
/// file, its stem, the folder of a folder-per-migration layout, a path
/// ending in one of those; on every layout. Before, each of these was
/// refused as naming no migration.
fn since_takes_the_migration_as_the_folder_shows_it(_env: &TestEnv) -> anyhow::Result<()> {
    let cases: &[(&str, Option<&str>, &[&str])] = &[
        (
            "sqlx-bracketed",
            Some("sqlx"),
            &[
                "20250102090000_glazes.sql",
                "20250102090000_glazes",
                "migrations/20250102090000_glazes.sql",
            ],
        ),
        (
            "sqlx",
            Some("sqlx"),
            &[
                "20240312080000_orders_customer_index.up.sql",
                "20240312080000_orders_customer_index",
            ],
        ),
        (
            "golang-migrate",
            None,
            &[
                "10_orders_customer_index.up.sql",
                "10_orders_customer_index",
            ],
        ),
        (
            "goose",
            None,
            &["10_orders_customer_index.sql", "10_orders_customer_index"],
        ),
        (
            "dbmate-spaced",
            None,
            &[
                "20240305101500_kiln firing copy.sql",
                "20240305101500_kiln firing copy",
            ],
        ),
        (
            "atlas",
            None,
            &[
                "20240312080000_orders_customer_index.sql",
                "20240312080000_orders_customer_index",
            ],
        ),
        ("flyway-callbacks", None, &["V1.1.sql", "V1.1", "1.1"]),
        (
            "diesel-dashed",
            None,
            &[
                "2024-01-05-1200-add-kiln-notes",
                "2024-01-05-1200-add-kiln-notes/up.sql",
                "migrations/2024-01-05-1200-add-kiln-notes/",
                "202401051200addkilnnotes",
            ],
        ),
        (
            "prisma",
            None,
            &[
                "20240305101500_orders",
                "20240305101500_orders/migration.sql",
            ],
        ),
        (
            "sqitch",
            None,
            &["orders_customer_index", "deploy/orders_customer_index.sql"],
        ),
        // A Liquibase changeset as its file writes it, and its lone id.
        ("liquibase-workshop", None, &["bo:parts-2", "parts-2"]),
    ];
    for (dir, layout, spellings) in cases {
        for since in *spellings {
            let mut args = vec!["verify", "--static-only", "--since", since];
            if let Some(l) = layout {
                args.extend(["--layout", l]);
            }
            let (code, out, err) = rollsafe_cli(&args, &fixture(dir))?;
            ensure!(code == 0, "{dir}: --since {since}: exit {code}: {out}{err}");
        }
    }
    // A spelling of no migration is still refused, naming the ways.
    let (code, _, err) = rollsafe_cli(
        &["verify", "--static-only", "--since", "V9.sql"],
        &fixture("flyway-callbacks"),
    )?;
    ensure!(
        code == 2 && err.contains("or a migration's file or folder name"),
        "exit {code}: {err}"
    );
    Ok(())
}

/// The header of a run says what in the folder is not a migration: the
/// Flyway callbacks (rehearsed where Flyway runs them), the undo file, a
/// file whose name Flyway skips, and the README as ignored; the run
/// itself passes (none of the others ran).
fn the_header_names_callbacks_undo_files_and_ignored_files(env: &TestEnv) -> anyhow::Result<()> {
    let (code, out, err) = rollsafe_cli(
        &[
            "verify",
            "--postgres",
            env.sandbox.admin_url(),
            "--rows",
            "200",
            "--since",
            "V1__create_kilns.sql",
        ],
        &fixture("flyway-callbacks"),
    )?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let header = err
        .lines()
        .find(|l| l.contains("read as flyway's"))
        .unwrap_or_default();
    for part in [
        "3 migration(s)",
        "2 Flyway SQL callback(s), rehearsed where Flyway's migrate runs them, each in a transaction of its own and never recorded as applied (beforeMigrate before the first migration, afterVersioned after the last versioned one, beforeRepeatables before the first repeatable when there is one, afterMigrateApplied and afterMigrate after the last): afterMigrate__grants.sql, beforeMigrate.sql",
        "1 Flyway undo script(s), never run going up: U1.1.sql",
        "1 file(s) Flyway skips, their names matching none of its patterns (V<version>__<description>.sql, R__…, callbacks; its validateMigrationNaming is false by default): seed-kilns.sql",
        "1 file(s) ignored, not migrations its tool runs: README.md",
    ] {
        ensure!(header.contains(part), "{part} not in: {header}");
    }
    Ok(())
}

/// A change reworked after two tags whose script exists only under the
/// later one: Sqitch tries the tags in plan order and deploys the first
/// script that exists; rollsafe reads and rehearses the same.
fn a_reworked_sqitch_change_is_deployed_from_the_tag_that_has_its_script(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let sqitch = read_as("sqitch-rework-tags", None)?;
    expect_read(
        &sqitch,
        Layout::Sqitch,
        &[
            ("kilns@v2", "deploy/kilns@v2.sql", false),
            ("glazes", "deploy/glazes.sql", false),
            ("kilns", "deploy/kilns.sql", false),
        ],
    )?;
    rehearse_clean(env, sqitch)
}

/// pgvector, which no server of the suite has, created in a `DO` block
/// that swallows the failure: the next migration's `type "vector" does
/// not exist` names the extension and an image that has it (and
/// `--postgres` of a server that has it), not "fix the SQL".
fn an_extension_swallowed_by_a_do_block_is_named_with_an_image_that_has_it(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let catalog = read_as("sqlx-extension-swallowed", Some(Layout::Sqlx))?;
    let report = rollsafe::verify::Verify::new(catalog)?
        .rows(100)
        .run(&env.sandbox)?;
    let failed = report
        .findings
        .iter()
        .find(|f| f.migration == Some(2) && f.message.contains("type \"vector\" does not exist"))
        .ok_or_else(|| {
            anyhow::anyhow!("no finding names the missing type: {:#?}", report.findings)
        })?;
    // The sandbox lacks the extension: skipped with the way out, never an
    // error the SQL is blamed for; the later migrations are not reached.
    ensure!(
        failed.id == "apply.extension-not-in-sandbox"
            && failed.severity == rollsafe::report::Severity::Skipped
            && failed.evidence["extension"] == "vector",
        "{failed:?}"
    );
    ensure!(
        report.errors().next().is_none(),
        "{:?}",
        report.errors().collect::<Vec<_>>()
    );
    let advice = &failed.advice;
    for part in [
        "type vector is extension vector's",
        "DO block",
        "--image pgvector/pgvector:pg15",
        "--postgres <url of a server that has vector>",
    ] {
        ensure!(advice.contains(part), "{part} not in: {advice}");
    }
    ensure!(
        !advice.contains("fix the SQL"),
        "the way out is the server, not the SQL: {advice}"
    );
    Ok(())
}

/// A dbmate file with a second `-- migrate:up`: dbmate before 2.29 runs
/// the text between the first up and the first down only (the rest is
/// its down); 2.29 and later run each up section, and refuse a section
/// without its down. Without a pinned dbmate, a file 2.29 would refuse is
/// read as the older dbmate reads it; a project pinning 2.26 (its
/// Dockerfile) gets that reading for every file, one pinning 2.29 the
/// sections.
fn dbmate_sections_are_cut_as_the_projects_dbmate_cuts_them(env: &TestEnv) -> anyhow::Result<()> {
    let unpinned = read_as("dbmate-two-ups", None)?;
    expect_read(
        &unpinned,
        Layout::Dbmate,
        &[
            ("20240301090000", "20240301090000_create_kilns.sql", false),
            ("20240305101500", "20240305101500_kiln_glazes.sql", false),
        ],
    )?;
    let sql = &unpinned.migrations()[1].sql;
    ensure!(
        sql.contains("ADD COLUMN glaze") && !sql.contains("kiln_shelves"),
        "{sql}"
    );
    rehearse_clean(env, unpinned)?;

    let project = copy_fixture("dbmate-pinned")?;
    let migrations = project.path().join("db/migrations");
    let pinned = Catalog::from_dir(&migrations)?;
    ensure!(
        pinned.migrations().len() == 2 && !pinned.migrations()[1].sql.contains("kiln_shelves"),
        "{:#?}",
        pinned.migrations()
    );
    rehearse_clean(env, pinned)?;
    std::fs::write(
        project.path().join("Dockerfile"),
        "FROM ghcr.io/amacneil/dbmate:2.29\nCOPY db /db\n",
    )?;
    let labels: Vec<String> = Catalog::from_dir(&migrations)?
        .migrations()
        .iter()
        .map(|m| m.label.clone())
        .collect();
    ensure!(
        labels == ["20240301090000", "20240305101500#1", "20240305101500#2"],
        "{labels:?}"
    );
    Ok(())
}

/// `firings [pots kilnroles:kiln_operators]`: Sqitch requires the other
/// project's change deployed first. The repository holds project
/// kilnroles beside pottery, so its changes up to kiln_operators (not
/// the later kiln_audit) are deployed just before firings, and the run
/// passes. A dependency on a project the repository lacks is named in the
/// header with --setup.
fn a_sqitch_dependency_on_a_sibling_project_deploys_it_first(env: &TestEnv) -> anyhow::Result<()> {
    let pottery = read_as("sqitch-two-projects/pottery", None)?;
    expect_read(
        &pottery,
        Layout::Sqitch,
        &[
            ("pots", "deploy/pots.sql", false),
            (
                "kilnroles:kiln_schema",
                "../kilnroles/deploy/kiln_schema.sql",
                false,
            ),
            (
                "kilnroles:kiln_operators",
                "../kilnroles/deploy/kiln_operators.sql",
                false,
            ),
            ("firings", "deploy/firings.sql", false),
        ],
    )?;
    rehearse_clean(env, pottery)?;
    let (code, out, err) = rollsafe_cli(
        &[
            "verify",
            "--postgres",
            env.sandbox.admin_url(),
            "--rows",
            "100",
        ],
        &fixture("sqitch-two-projects/glazing"),
    )?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(
        err.contains("glaze_recipes needs glazevendor:catalogue, of Sqitch project glazevendor, which this repository does not hold: put what it makes in a SQL file and pass --setup FILE"),
        "{err}"
    );
    Ok(())
}

/// `\set label `cat templates/kiln_label.txt``, a file of the project
/// beside its `top_dir`: read as psql reads it (no command run), the
/// variable's text inserted as a literal, the change rehearsed.
fn a_sqitch_script_reading_a_file_into_a_psql_variable_is_rehearsed(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let catalog = read_as("sqitch-psql-file", None)?;
    let sql = &catalog.migrations()[0].sql;
    ensure!(
        sql.contains("VALUES (1, 'Cone 6 — don''t open above 200°C')") && !sql.contains("\\set"),
        "{sql}"
    );
    rehearse_clean(env, catalog)
}

/// `--setup` is the way out for an extension a history assumes (its
/// `CREATE EXTENSION` lives in an init script): what it makes in the
/// database (the extension's types) is there for every check, the
/// migrator's run of the history included. That run started from a bare
/// database: `type "hstore" does not exist`, a false
/// `apply.migrator-fails` on the first migration.
fn the_migrator_starts_from_what_the_setup_made(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("V1__seed_packets.sql"),
        "CREATE TABLE seed_packets (\n  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n  variety text NOT NULL,\n  traits hstore NOT NULL DEFAULT ''\n);\n",
    )?;
    std::fs::write(
        dir.path().join("V2__packet_traits.sql"),
        "ALTER TABLE seed_packets ADD COLUMN sown_on date;\n",
    )?;
    let run = |setup: Option<&str>| -> anyhow::Result<rollsafe::report::Report> {
        Ok(
            rollsafe::verify::Verify::new(Catalog::from_dir(dir.path())?)?
                .setup(setup.map(String::from))
                .rows(100)
                .run(&env.sandbox)?,
        )
    };
    let report = run(Some("CREATE EXTENSION IF NOT EXISTS hstore;"))?;
    let errors: Vec<String> = report
        .errors()
        .map(|f| format!("{}: {}", f.id, f.message))
        .collect();
    ensure!(errors.is_empty(), "{errors:#?}");
    ensure!(
        report
            .findings
            .iter()
            .any(|f| f.migration == Some(1) && f.id == "apply.applies"),
        "{:#?}",
        report.findings
    );
    // The control: without the setup the history cannot apply at all.
    let bare = run(None)?;
    ensure!(
        bare.errors()
            .any(|f| f.migration == Some(1) && f.message.contains("type \"hstore\" does not exist")),
        "{:#?}",
        bare.findings
    );
    Ok(())
}

//! Every tool's migration folder, read the way its tool reads it and
//! rehearsed end to end: one fixture per layout under
//! `tests/fixtures/layouts/` (a small shop: customers, orders, an index
//! built concurrently, a column added), each with a down/undo/revert part
//! that would break the run if it were executed, a step the tool runs
//! outside a transaction, and an ordering trap (diesel's two version
//! spellings, goose's 2 before 10, Flyway's V1.1 and its repeatable after
//! V10, Sqitch's plan order and rework, sqlx's longer version). The
//! maragudk/migrate fixture is a greenhouse's, in a Go module whose go.mod
//! names the tool: repeated numeric prefixes, an `_up.sql` its regexp
//! takes, down files and a `notes.sql` that are never run.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context};
use libtest_mimic::Trial;
use rollsafe::catalog::{Catalog, Layout, ReadOptions};
use rollsafe::migrate;
use rollsafe::verify::Verify;

use crate::common::{cli, repo_root, TestEnv};

pub fn tests(env: &std::sync::Arc<TestEnv>) -> Vec<Trial> {
    crate::trials!(
        "layouts",
        env,
        [
            diesel_folders_in_version_order,
            goose_up_sections_only,
            dbmate_up_sections_only,
            sqlx_reversible_pairs_with_no_transaction,
            golang_migrate_up_files,
            atlas_with_its_sum_and_txmode,
            flyway_dotted_versions_repeatables_and_placeholders,
            prisma_folders,
            sqitch_plan_order_and_rework,
            a_folder_mixing_layouts_is_refused,
            an_edited_atlas_file_is_refused_as_atlas_refuses_it,
            flyway_placeholder_without_a_value_is_refused_by_the_cli,
            diesel_migrate_records_diesel_rows_and_status_reads_them,
            an_applied_unrerunnable_file_does_not_block_pending_ones,
            a_300_migration_diesel_history_reads_applies_and_rehearses_its_newest,
            migrate_target_takes_the_layouts_own_label,
            since_takes_a_unique_start_of_a_label_and_says_which_when_not,
            an_edited_sqlx_file_is_divergent_and_migrate_refuses_naming_it,
            flyway_prisma_and_atlas_checksums_are_compared_with_the_files,
            dbmate_sections_migrate_in_their_own_modes_and_record_the_version_once,
            sqitch_verify_scripts_pass_after_their_change_and_a_broken_one_fails,
            applied_versions_come_from_the_tools_own_table,
            a_failing_sqitch_verify_script_is_an_error_finding,
            since_auto_from_target_rehearses_what_the_tools_table_lacks,
            atlas_nolint_silences_the_static_precheck,
            a_lone_concurrent_build_runs_as_golang_migrate_sends_it,
            prisma_files_run_their_own_transactions_as_written,
            an_indented_dbmate_marker_is_sql_as_dbmate_reads_it,
            an_atlas_folder_in_golang_migrate_format_is_golang_migrates,
            atlas_folders_in_goose_flyway_and_dbmate_format_are_those_tools,
            a_flyway_folder_starting_at_a_baseline_runs_it_first,
            a_goose_go_migration_is_listed_and_what_builds_on_it_skipped,
            a_goose_folder_of_go_migrations_only_is_listed_and_nothing_is_called_ok,
            a_guard_on_the_tools_history_table_does_not_stop_the_rehearsal,
            a_sqitch_change_creating_a_role_is_rehearsed_on_every_path,
            maragudk_migrate_files_by_name_in_a_go_module,
            maragudk_migrate_verify_reads_and_rehearses_it_as_its_own,
            maragudk_migrate_then_status_agree_on_its_one_row,
        ]
    )
}

const ROWS: u64 = 1000;

pub(crate) fn fixture(layout: &str) -> PathBuf {
    repo_root().join("tests/fixtures/layouts").join(layout)
}

/// (label, file, runs outside a transaction) of each migration, in order.
fn read(catalog: &Catalog) -> Vec<(String, String, bool)> {
    catalog
        .migrations()
        .iter()
        .map(|m| {
            (
                m.label.clone(),
                m.file.clone(),
                m.runs_outside_transaction(),
            )
        })
        .collect()
}

pub(crate) fn expect_read(
    catalog: &Catalog,
    layout: Layout,
    expected: &[(&str, &str, bool)],
) -> anyhow::Result<()> {
    ensure!(
        catalog.layout == layout,
        "read as {}, not {layout}",
        catalog.layout
    );
    let got = read(catalog);
    let want: Vec<(String, String, bool)> = expected
        .iter()
        .map(|(l, f, n)| (l.to_string(), f.to_string(), *n))
        .collect();
    ensure!(
        got == want,
        "migrations read:\n{got:#?}\nexpected:\n{want:#?}"
    );
    Ok(())
}

/// Rehearses `catalog` on the suite's server: zero errors, every
/// migration rehearsed under its label.
pub(crate) fn rehearse_clean(env: &TestEnv, catalog: Catalog) -> anyhow::Result<()> {
    let labels: Vec<String> = catalog
        .migrations()
        .iter()
        .map(|m| m.label.clone())
        .collect();
    let report = Verify::new(catalog)?.rows(ROWS).run(&env.sandbox)?;
    let errors: Vec<String> = report
        .errors()
        .map(|f| format!("{:?} {}: {}", f.migration, f.id, f.message))
        .collect();
    ensure!(report.passed && errors.is_empty(), "errors: {errors:#?}");
    // The report leaves a label out when it is `V<version>`.
    let rehearsed: Vec<String> = report
        .migrations
        .iter()
        .map(|m| match m.label.as_str() {
            "" => format!("V{}", m.version),
            l => l.to_string(),
        })
        .collect();
    ensure!(
        rehearsed == labels,
        "rehearsed {rehearsed:?}, read {labels:?}"
    );
    let applied = report
        .findings
        .iter()
        .filter(|f| f.id == "apply.applies")
        .count();
    ensure!(
        applied == labels.len(),
        "{applied} apply.applies findings for {} migrations",
        labels.len()
    );
    Ok(())
}

fn diesel_folders_in_version_order(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("diesel"))?;
    // `2024-03-05-…` sorts before `20240301…` by name ('-' < '0'); diesel
    // orders by version with the dashes removed. `.scratch/` is skipped;
    // a metadata.toml without the key means no transaction.
    expect_read(
        &catalog,
        Layout::Diesel,
        &[
            (
                "00000000000000_diesel_initial_setup",
                "00000000000000_diesel_initial_setup/up.sql",
                false,
            ),
            (
                "20240301090000_create_customers",
                "20240301090000_create_customers/up.sql",
                false,
            ),
            (
                "2024-03-05-101500_create_orders",
                "2024-03-05-101500_create_orders/up.sql",
                false,
            ),
            (
                "2024-03-12-080000_orders_customer_index",
                "2024-03-12-080000_orders_customer_index/up.sql",
                true,
            ),
            (
                "2024-03-15-093000-0000_order_notes",
                "2024-03-15-093000-0000_order_notes/up.sql",
                false,
            ),
            // Puts a trigger on diesel's own history table, which the
            // rehearsal creates before the first migration.
            (
                "2024-03-20-120000_notify_schema_changes",
                "2024-03-20-120000_notify_schema_changes/up.sql",
                false,
            ),
        ],
    )?;
    ensure!(catalog.migrations()[2].key == "20240305101500");
    ensure!(catalog.resolve_version("2024-03-12-080000_orders_customer_index") == Some(4));
    rehearse_clean(env, catalog)
}

fn goose_up_sections_only(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("goose"))?;
    expect_read(
        &catalog,
        Layout::Goose,
        &[
            ("1", "1_create_customers.sql", false),
            ("2", "2_create_orders.sql", false),
            ("10", "10_orders_customer_index.sql", true),
            ("11", "11_order_notes.sql", false),
        ],
    )?;
    let sql = &catalog.migrations()[1].sql;
    ensure!(
        !sql.contains("DROP TABLE") && sql.contains("RETURN cents >= 0;"),
        "{sql}"
    );
    // `NO TRANSACTION`: goose runs each concurrent build on its own, and
    // the static precheck lints them so.
    let banned = findings_with(
        &Verify::new(Catalog::from_dir(&fixture("goose-no-transaction"))?)?.static_only(),
        &["static.ban-concurrent-index-creation-in-transaction"],
    );
    ensure!(banned.is_empty(), "{banned:#?}");
    rehearse_clean(env, catalog)
}

fn dbmate_up_sections_only(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("dbmate"))?;
    expect_read(
        &catalog,
        Layout::Dbmate,
        &[
            (
                "20240301090000",
                "20240301090000_create_customers.sql",
                false,
            ),
            // Two up sections, each in its own mode, as dbmate runs them.
            (
                "20240305101500#1",
                "20240305101500_create_orders.sql",
                false,
            ),
            ("20240305101500#2", "20240305101500_create_orders.sql", true),
            (
                "20240312080000",
                "20240312080000_orders_customer_index.sql",
                true,
            ),
            ("20240315093000", "20240315093000_order_notes.sql", false),
        ],
    )?;
    // Each up section alone, never the down sections.
    let (first, second) = (&catalog.migrations()[1].sql, &catalog.migrations()[2].sql);
    ensure!(
        first.contains("COMMENT ON TABLE orders")
            && !first.contains("CONCURRENTLY")
            && !first.contains("DROP"),
        "{first}"
    );
    ensure!(
        second.contains("CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_total_cents")
            && !second.contains("CREATE TABLE")
            && !second.contains("DROP"),
        "{second}"
    );
    // The file's version names its last section (the whole file).
    ensure!(catalog.resolve_label("20240305101500") == Ok(3));
    rehearse_clean(env, catalog)
}

fn sqlx_reversible_pairs_with_no_transaction(env: &TestEnv) -> anyhow::Result<()> {
    let options = ReadOptions {
        layout: Some(Layout::Sqlx),
        ..Default::default()
    };
    let catalog = Catalog::from_dir_in(&fixture("sqlx"), &options)?;
    expect_read(
        &catalog,
        Layout::Sqlx,
        &[
            (
                "20240301090000",
                "20240301090000_create_customers.up.sql",
                false,
            ),
            (
                "20240305101500",
                "20240305101500_create-orders.up.sql",
                false,
            ),
            (
                "20240312080000",
                "20240312080000_orders_customer_index.up.sql",
                true,
            ),
            (
                "202403150930000",
                "202403150930000_order_notes.up.sql",
                false,
            ),
        ],
    )?;
    // Without --layout, up/down pairs read as golang-migrate's.
    ensure!(Catalog::from_dir(&fixture("sqlx"))?.layout == Layout::GolangMigrate);
    rehearse_clean(env, catalog)
}

fn golang_migrate_up_files(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("golang-migrate"))?;
    expect_read(
        &catalog,
        Layout::GolangMigrate,
        &[
            ("1", "000001_create_customers.up.sql", false),
            ("2", "000002_create_orders.up.sql", false),
            ("10", "10_orders_customer_index.up.sql", true),
            ("11", "11_order_notes.up.sql", false),
        ],
    )?;
    rehearse_clean(env, catalog)
}

fn atlas_with_its_sum_and_txmode(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("atlas"))?;
    expect_read(
        &catalog,
        Layout::Atlas,
        &[
            ("20240301090000", "20240301090000.sql", false),
            ("20240305101500", "20240305101500_create_orders.sql", false),
            (
                "20240312080000",
                "20240312080000_orders_customer_index.sql",
                true,
            ),
            ("20240315093000", "20240315093000_order_notes.sql", false),
        ],
    )?;
    rehearse_clean(env, catalog)
}

fn flyway_dotted_versions_repeatables_and_placeholders(env: &TestEnv) -> anyhow::Result<()> {
    let options = ReadOptions {
        placeholders: [("team".to_string(), "payments".to_string())].into(),
        ..Default::default()
    };
    let catalog = Catalog::from_dir_in(&fixture("flyway"), &options)?;
    // V1.1 between V1 and V2, V10 after V2, the repeatable (which reads
    // V10's column) after every versioned file; the undo file U1.1 unread.
    expect_read(
        &catalog,
        Layout::Flyway,
        &[
            ("V1", "V1__create_customers.sql", false),
            ("V1.1", "V1.1__create_orders.sql", false),
            ("V2", "V2__orders_customer_index.sql", true),
            ("V10", "V10__order_notes.sql", false),
            ("R__order_totals_view", "R__order_totals_view.sql", false),
        ],
    )?;
    ensure!(catalog.migrations()[0]
        .sql
        .contains("'owned by the payments team'"));
    let err = Catalog::from_dir(&fixture("flyway"))
        .unwrap_err()
        .to_string();
    ensure!(
        err == "V1__create_customers.sql: line 5: Flyway placeholder `${team}` has no value; pass --placeholder team=<value> (the value Flyway's configuration gives it)",
        "{err}"
    );
    rehearse_clean(env, catalog)
}

fn prisma_folders(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("prisma"))?;
    expect_read(
        &catalog,
        Layout::Prisma,
        &[
            ("01_init", "01_init/migration.sql", false),
            (
                "20240305101500_orders",
                "20240305101500_orders/migration.sql",
                false,
            ),
            (
                "20240315093000_order_notes",
                "20240315093000_order_notes/migration.sql",
                false,
            ),
        ],
    )?;
    let dir = copy_fixture("prisma")?;
    std::fs::write(
        dir.path().join("migration_lock.toml"),
        "provider = \"mysql\"\n",
    )?;
    let err = Catalog::from_dir(dir.path()).unwrap_err().to_string();
    ensure!(
        err.starts_with("migration_lock.toml: says these migrations were written for `mysql`"),
        "{err}"
    );
    rehearse_clean(env, catalog)
}

fn sqitch_plan_order_and_rework(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("sqitch"))?;
    // Plan order, not file names; `orders` reworked after @v1.0: its first
    // instance deploys orders@v1.0.sql. The index script has no BEGIN, so
    // Sqitch (and rollsafe) run it outside a transaction.
    expect_read(
        &catalog,
        Layout::Sqitch,
        &[
            ("schema", "deploy/schema.sql", false),
            ("customers", "deploy/customers.sql", false),
            ("orders@v1.0", "deploy/orders@v1.0.sql", false),
            (
                "orders_customer_index",
                "deploy/orders_customer_index.sql",
                true,
            ),
            ("orders", "deploy/orders.sql", false),
        ],
    )?;
    let sql = &catalog.migrations()[1].sql;
    ensure!(
        !sql.contains("BEGIN")
            && !sql.contains("COMMIT")
            && sql.contains("CREATE TABLE shop.customers"),
        "{sql}"
    );
    rehearse_clean(env, catalog)
}

fn a_folder_mixing_layouts_is_refused(_env: &TestEnv) -> anyhow::Result<()> {
    let dir = copy_fixture("goose")?;
    std::fs::copy(
        fixture("dbmate").join("20240315093000_order_notes.sql"),
        dir.path().join("20240315093000_order_notes.sql"),
    )?;
    let err = Catalog::from_dir(dir.path()).unwrap_err().to_string();
    ensure!(
        err.ends_with("mixes migration layouts (10_orders_customer_index.sql is goose, 20240315093000_order_notes.sql is dbmate); keep one layout per directory, rename the odd files or move them out"),
        "{err}"
    );
    Ok(())
}

fn an_edited_atlas_file_is_refused_as_atlas_refuses_it(_env: &TestEnv) -> anyhow::Result<()> {
    let dir = copy_fixture("atlas")?;
    let file = dir.path().join("20240305101500_create_orders.sql");
    let edited = std::fs::read_to_string(&file)?.replace("total_cents >= 0", "total_cents > 0");
    std::fs::write(&file, edited)?;
    let err = Catalog::from_dir(dir.path()).unwrap_err().to_string();
    ensure!(
        err.starts_with("20240305101500_create_orders.sql: disagrees with its hash in atlas.sum")
            && err.contains("Atlas itself refuses"),
        "{err}"
    );
    Ok(())
}

fn flyway_placeholder_without_a_value_is_refused_by_the_cli(_env: &TestEnv) -> anyhow::Result<()> {
    let run = |extra: &[&str]| -> anyhow::Result<std::process::Output> {
        cli()
            .args(["verify", "--static-only", "--migrations"])
            .arg(fixture("flyway"))
            .args(extra)
            .output()
            .context("running rollsafe")
    };
    let out = run(&[])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(2),
        "exit {:?}: {stderr}",
        out.status.code()
    );
    ensure!(
        stderr.contains("placeholder `${team}` has no value; pass --placeholder team=<value>"),
        "{stderr}"
    );
    let out = run(&["--placeholder", "team=payments", "--layout", "flyway"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(stdout.contains("V1.1 V1.1__create_orders.sql"), "{stdout}");
    Ok(())
}

/// A copy of a fixture to change.
pub(crate) fn copy_fixture(layout: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    copy_tree(&fixture(layout), dir.path())?;
    Ok(dir)
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// A diesel folder as `migrate` applies it: each migration recorded in
/// `__diesel_schema_migrations` (diesel's versions, checked by SQL), then
/// `status` reads that table and finds everything applied.
fn diesel_migrate_records_diesel_rows_and_status_reads_them(env: &TestEnv) -> anyhow::Result<()> {
    let dir = copy_fixture("diesel")?;
    let catalog = Catalog::from_dir(dir.path())?;
    let db = env.fresh_database();
    let outcome = migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    ensure!(
        outcome.applied.len() == 6,
        "applied {:?}",
        outcome.applied.len()
    );
    let mut c = db.connect()?;
    let rows: Vec<String> = c
        .query(
            "SELECT version FROM __diesel_schema_migrations ORDER BY version",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    ensure!(
        rows == [
            "00000000000000",
            "20240301090000",
            "20240305101500",
            "20240312080000",
            "202403150930000000",
            "20240320120000"
        ],
        "__diesel_schema_migrations: {rows:?}"
    );
    eprintln!("layouts: __diesel_schema_migrations after migrate: {rows:?}");
    ensure!(
        c.query_one("SELECT to_regclass('refinery_schema_history') IS NULL", &[])?
            .get::<_, bool>(0),
        "refinery's table was written for a diesel folder"
    );
    all_applied(db.url(), &catalog)?;
    let again = migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    ensure!(
        again.applied.is_empty(),
        "a second migrate applied {}",
        again.applied.len()
    );
    // The CLI's status names diesel's table and labels.
    let out = cli()
        .args(["status", "--database-url", db.url(), "--migrations"])
        .arg(dir.path())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("layouts: rollsafe status on the diesel folder:\n{stdout}");
    ensure!(
        out.status.code() == Some(0),
        "status exit {:?}: {stdout}",
        out.status.code()
    );
    ensure!(
        stdout.contains(
            "history:    __diesel_schema_migrations: at 2024-03-20-120000_notify_schema_changes"
        ) && stdout.contains("2024-03-05-101500_create_orders"),
        "{stdout}"
    );
    Ok(())
}

/// diesel applied a no-transaction index file that rollsafe would not
/// re-run (no IF NOT EXISTS): applied, it is no reason to refuse the
/// pending migration after it.
fn an_applied_unrerunnable_file_does_not_block_pending_ones(env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let write = |folder: &str, file: &str, text: &str| -> anyhow::Result<()> {
        std::fs::create_dir_all(dir.path().join(folder))?;
        Ok(std::fs::write(dir.path().join(folder).join(file), text)?)
    };
    write(
        "2024-01-01-000000_items",
        "up.sql",
        "CREATE TABLE items (id bigint PRIMARY KEY, a int);\n",
    )?;
    write(
        "2024-01-02-000000_items_a",
        "up.sql",
        "CREATE INDEX CONCURRENTLY items_a ON items (a);\n",
    )?;
    write(
        "2024-01-02-000000_items_a",
        "metadata.toml",
        "run_in_transaction = false\n",
    )?;
    let db = env.fresh_database();
    let mut c = db.connect()?;
    // What diesel itself did in production.
    c.batch_execute("CREATE TABLE items (id bigint PRIMARY KEY, a int)")?;
    c.batch_execute("CREATE INDEX CONCURRENTLY items_a ON items (a)")?;
    c.batch_execute(
        "CREATE TABLE __diesel_schema_migrations (version VARCHAR(50) PRIMARY KEY NOT NULL, run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP);
         INSERT INTO __diesel_schema_migrations (version) VALUES ('20240101000000'), ('20240102000000');",
    )?;
    write(
        "2024-01-03-000000_items_b",
        "up.sql",
        "ALTER TABLE items ADD COLUMN b text;\n",
    )?;
    let catalog = Catalog::from_dir(dir.path())?;
    let outcome = migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    let applied: Vec<&str> = outcome.applied.iter().map(|a| a.file.as_str()).collect();
    ensure!(
        applied == ["2024-01-03-000000_items_b/up.sql"],
        "applied {applied:?}"
    );
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM __diesel_schema_migrations WHERE version = '20240103000000'",
            &[],
        )?
        .get(0);
    ensure!(n == 1, "the pending migration was not recorded for diesel");
    Ok(())
}

/// A diesel history of 300 migrations, generated here (both version
/// spellings, a no-transaction index every 50): read, applied once by
/// `migrate`, and its newest rehearsed with `--since` the one before.
fn a_300_migration_diesel_history_reads_applies_and_rehearses_its_newest(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    for i in 0..300u32 {
        let (day, second) = (i / 100 + 1, i % 100);
        let folder = if i % 2 == 0 {
            format!("2025-03-0{day}-1200{second:02}_step_{i}")
        } else {
            format!("2025030{day}1200{second:02}_step_{i}")
        };
        let path = dir.path().join(&folder);
        std::fs::create_dir_all(&path)?;
        let sql = match i {
            0 => "CREATE TABLE accounts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text NOT NULL);\n".to_string(),
            i if i % 50 == 0 => {
                std::fs::write(path.join("metadata.toml"), "run_in_transaction = false\n")?;
                format!("CREATE INDEX CONCURRENTLY IF NOT EXISTS accounts_c{}_idx ON accounts (c{});\n", i - 1, i - 1)
            }
            i => format!("ALTER TABLE accounts ADD COLUMN c{i} integer;\n"),
        };
        std::fs::write(path.join("up.sql"), sql)?;
        std::fs::write(path.join("down.sql"), "DROP TABLE accounts;\n")?;
    }
    let started = std::time::Instant::now();
    let catalog = Catalog::from_dir(dir.path())?;
    let read = started.elapsed();
    ensure!(catalog.layout == Layout::Diesel && catalog.migrations().len() == 300);
    let names: Vec<&str> = catalog
        .migrations()
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    let in_order: Vec<String> = (0..300).map(|i| format!("step_{i}")).collect();
    ensure!(
        names == in_order,
        "diesel's order differs from the generated one"
    );

    let db = env.fresh_database();
    let started = std::time::Instant::now();
    let outcome = migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    let applied = started.elapsed();
    ensure!(
        outcome.applied.len() == 300,
        "applied {}",
        outcome.applied.len()
    );
    let recorded: i64 = db
        .connect()?
        .query_one("SELECT count(*) FROM __diesel_schema_migrations", &[])?
        .get(0);
    ensure!(
        recorded == 300,
        "{recorded} rows in __diesel_schema_migrations"
    );

    let newest = catalog.latest();
    let started = std::time::Instant::now();
    let report = Verify::new(catalog)?
        .since(newest - 1)?
        .rows(ROWS)
        .run(&env.sandbox)?;
    let rehearsed = started.elapsed();
    let errors: Vec<String> = report
        .errors()
        .map(|f| format!("{}: {}", f.id, f.message))
        .collect();
    ensure!(report.passed && errors.is_empty(), "errors: {errors:#?}");
    // The report lists every migration; those up to --since as applied only.
    let labels: Vec<&str> = report
        .migrations
        .iter()
        .filter(|m| !report.applied_only.contains(&m.version))
        .map(|m| m.label.as_str())
        .collect();
    ensure!(
        labels == ["20250303120099_step_299"],
        "rehearsed {labels:?}"
    );
    ensure!(
        report.applied_only.len() == 299,
        "applied only {}",
        report.applied_only.len()
    );
    let on_newest = report
        .findings
        .iter()
        .filter(|f| f.migration == Some(newest))
        .count();
    ensure!(on_newest > 0, "no finding on the rehearsed migration");
    eprintln!(
        "layouts: 300 diesel migrations: read in {read:.2?}, applied once by migrate in {applied:.2?}, --since {} rehearsed the newest in {rehearsed:.2?}",
        newest - 1
    );
    Ok(())
}

/// `rollsafe migrate` with `--target`, `status` and the one-line errors.
pub(crate) fn rollsafe_cli(args: &[&str], dir: &Path) -> anyhow::Result<(i32, String, String)> {
    crate::common::output(cli().args(args).arg("--migrations").arg(dir))
}

/// `migrate --target` names a diesel migration as diesel does: its folder
/// name, its version (the digits diesel records) or the start of its
/// folder name; it applies exactly up to it. An ordinal, an unknown and an
/// ambiguous start are refused in one line that lists the valid labels.
fn migrate_target_takes_the_layouts_own_label(env: &TestEnv) -> anyhow::Result<()> {
    let dir = copy_fixture("diesel")?;
    let db = env.fresh_database();
    let url = db.url();
    let mut c = db.connect()?;
    let recorded = |c: &mut postgres::Client| -> anyhow::Result<Vec<String>> {
        Ok(c.query(
            "SELECT version FROM __diesel_schema_migrations ORDER BY version",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect())
    };
    let (code, out, err) = rollsafe_cli(
        &[
            "migrate",
            "--database-url",
            url,
            "--target",
            "2024-03-05-101500_create_orders",
        ],
        dir.path(),
    )?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(
        out.contains("target:     2024-03-05-101500_create_orders"),
        "{out}"
    );
    ensure!(
        recorded(&mut c)? == ["00000000000000", "20240301090000", "20240305101500"],
        "after --target <folder name>: {:?}",
        recorded(&mut c)?
    );
    // The version diesel records, then the start of a folder name.
    for (target, newest) in [
        ("20240312080000", "20240312080000"),
        ("2024-03-15", "202403150930000000"),
    ] {
        let (code, out, err) = rollsafe_cli(
            &["migrate", "--database-url", url, "--target", target],
            dir.path(),
        )?;
        ensure!(code == 0, "--target {target}: exit {code}: {out}{err}");
        let rows = recorded(&mut c)?;
        ensure!(
            rows.last().map(String::as_str) == Some(newest)
                && !rows.iter().any(|r| r == "20240320120000"),
            "--target {target}: {rows:?}"
        );
    }
    let (code, _, err) = rollsafe_cli(
        &["migrate", "--database-url", url, "--target", "3"],
        dir.path(),
    )?;
    ensure!(
        code == 2
            && err.trim() == "rollsafe: error: --target 3: `3` names no migration of this diesel folder (the files have 00000000000000_diesel_initial_setup..2024-03-20-120000_notify_schema_changes); pass one of those labels (or the start of one), or a migration's file or folder name",
        "exit {code}: {err}"
    );
    let (code, _, err) = rollsafe_cli(
        &["migrate", "--database-url", url, "--target", "2024-03-1"],
        dir.path(),
    )?;
    ensure!(
        code == 2
            && err.trim() == "rollsafe: error: --target 2024-03-1: `2024-03-1` is the start of 2 migrations (2024-03-12-080000_orders_customer_index..2024-03-15-093000-0000_order_notes); give more of the label so that it names one",
        "exit {code}: {err}"
    );
    ensure!(err.lines().count() == 1, "{err}");
    eprintln!("layouts: --target refusals:\n{err}");
    Ok(())
}

/// `verify --since` takes a bare Prisma timestamp for its folder; an
/// ambiguous start is refused in one line, exit 2.
fn since_takes_a_unique_start_of_a_label_and_says_which_when_not(
    _env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = fixture("prisma");
    let (code, out, err) = rollsafe_cli(
        &["verify", "--static-only", "--since", "20240305101500"],
        &dir,
    )?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let (code, _, err) = rollsafe_cli(&["verify", "--static-only", "--since", "2024"], &dir)?;
    ensure!(
        code == 2
            && err.trim() == "rollsafe: error: --since 2024: `2024` is the start of 2 migrations (20240305101500_orders..20240315093000_order_notes); give more of the label so that it names one",
        "exit {code}: {err}"
    );
    let (code, _, err) = rollsafe_cli(&["verify", "--static-only", "--since", "auto"], &dir)?;
    ensure!(
        code == 2 && err.contains("--since auto") && err.contains("--from-target"),
        "exit {code}: {err}"
    );
    Ok(())
}

/// A sqlx file edited after `migrate` applied it: `_sqlx_migrations`
/// holds sqlx's SHA-384 of the file as applied, so `status` says
/// divergent with the file and both checksums, and `migrate` refuses
/// before anything runs, naming the file.
fn an_edited_sqlx_file_is_divergent_and_migrate_refuses_naming_it(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = copy_fixture("sqlx")?;
    let options = ReadOptions {
        layout: Some(Layout::Sqlx),
        ..Default::default()
    };
    let catalog = Catalog::from_dir_in(dir.path(), &options)?;
    let db = env.fresh_database();
    migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    let mut c = db.connect()?;
    // What sqlx itself computes: the SHA-384 of the file's text.
    let m = &catalog.migrations()[1];
    let stored: String = c
        .query_one(
            "SELECT encode(checksum, 'hex') FROM _sqlx_migrations WHERE version = 20240305101500",
            &[],
        )?
        .get(0);
    let text = std::fs::read_to_string(dir.path().join(&m.file))?;
    ensure!(
        stored == hex_sha384(&text) && m.tool_checksum.as_deref() == Some(stored.as_str()),
        "stored {stored}"
    );
    let file = dir.path().join("20240305101500_create-orders.up.sql");
    std::fs::write(&file, format!("{text}\n-- edited after it was applied\n"))?;
    let (code, out, err) = rollsafe_cli(
        &["status", "--layout", "sqlx", "--database-url", db.url()],
        dir.path(),
    )?;
    ensure!(code == 1, "status exit {code}: {out}{err}");
    ensure!(
        out.contains("20240305101500 divergent")
            && out.contains("problem: 20240305101500 (20240305101500_create-orders.up.sql) was edited after it was applied")
            && out.contains(&stored),
        "{out}"
    );
    eprintln!("layouts: status after a sqlx file was edited:\n{out}");
    // A pending migration after it is not applied either.
    std::fs::write(
        dir.path().join("202403200000000_more.up.sql"),
        "ALTER TABLE orders ADD COLUMN more text;\n",
    )?;
    let (code, out, err) = rollsafe_cli(
        &["migrate", "--layout", "sqlx", "--database-url", db.url()],
        dir.path(),
    )?;
    ensure!(
        code == 1
            && err.starts_with("rollsafe: error: refused, nothing applied: 20240305101500 (20240305101500_create-orders.up.sql) was edited after it was applied"),
        "migrate exit {code}: {out}{err}"
    );
    let n: i64 = c
        .query_one("SELECT count(*) FROM _sqlx_migrations", &[])?
        .get(0);
    ensure!(n == 4, "{n} rows in _sqlx_migrations");
    Ok(())
}

fn hex_sha384(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha384::digest(text.as_bytes()))
}

/// The Flyway fixture (its `${team}` placeholder filled) and a fresh
/// database holding an empty `flyway_schema_history` as Flyway creates it,
/// for a test to write a history into.
pub(crate) fn flyway_fixture_with_empty_history(
    env: &TestEnv,
) -> anyhow::Result<(Catalog, rollsafe::sandbox::Database)> {
    let options = ReadOptions {
        placeholders: [("team".to_string(), "payments".to_string())].into(),
        ..Default::default()
    };
    let flyway = Catalog::from_dir_in(&fixture("flyway"), &options)?;
    let db = env.fresh_database();
    db.connect()?.batch_execute(
        "CREATE TABLE flyway_schema_history (installed_rank int PRIMARY KEY, version varchar(50),
            description varchar(200) NOT NULL, type varchar(20) NOT NULL, script varchar(1000) NOT NULL,
            checksum int, installed_by varchar(100) NOT NULL, installed_on timestamp NOT NULL DEFAULT now(),
            execution_time int NOT NULL, success boolean NOT NULL)",
    )?;
    Ok((flyway, db))
}

/// The tools rollsafe reads but does not write keep checksums too: a
/// history written as Flyway, Prisma and Atlas write it, with one file
/// edited since, reads back as divergent; Flyway's changed repeatable is
/// due to run again (not drift); Prisma's CRLF checkout is not an edit.
fn flyway_prisma_and_atlas_checksums_are_compared_with_the_files(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use migrate::history::ToolHistory;
    use migrate::State;
    let states = |catalog: &Catalog, url: &str| -> anyhow::Result<Vec<(String, State)>> {
        Ok(migrate::status(url, catalog)?
            .versions
            .iter()
            .map(|v| (v.label.clone(), v.state))
            .collect())
    };
    // Flyway: V1.1 edited since it ran; the repeatable changed since its run.
    let (flyway, db) = flyway_fixture_with_empty_history(env)?;
    let mut c = db.connect()?;
    for (rank, m) in flyway.migrations().iter().enumerate() {
        let recorded: i32 = m
            .tool_checksum
            .as_deref()
            .context("a Flyway checksum")?
            .parse()?;
        let edited = matches!(m.label.as_str(), "V1.1" | "R__order_totals_view");
        let version = (!m.repeatable).then(|| m.key.clone());
        c.execute(
            "INSERT INTO flyway_schema_history VALUES ($1, $2, $3, 'SQL', $4, $5, 'flyway', now(), 1, true)",
            &[&(rank as i32 + 1), &version, &m.name.replace('_', " "), &m.file, &(recorded ^ i32::from(edited))],
        )?;
    }
    ensure!(
        states(&flyway, db.url())?
            == [
                ("V1".to_string(), State::Applied),
                ("V1.1".to_string(), State::Divergent),
                ("V2".to_string(), State::Applied),
                ("V10".to_string(), State::Applied),
                ("R__order_totals_view".to_string(), State::PendingRerun),
            ],
        "flyway: {:?}",
        states(&flyway, db.url())?
    );
    // What `--from-target` reads: applied up to V10 (the repeatable's
    // ordinal does not count), the repeatable due to run again.
    let (status, _) = migrate::target_status(&mut c, &flyway)?;
    let reruns: Vec<&str> = status.reruns().map(|v| v.label.as_str()).collect();
    ensure!(
        status.current == Some(4) && reruns == ["R__order_totals_view"],
        "current {:?}, reruns {reruns:?}",
        status.current
    );
    let fdir = copy_fixture("flyway")?;
    let (code, out, err) = rollsafe_cli(
        &[
            "status",
            "--database-url",
            db.url(),
            "--placeholder",
            "team=payments",
        ],
        fdir.path(),
    )?;
    ensure!(code == 1, "exit {code}: {out}{err}");
    ensure!(
        out.contains("rerun:      R__order_totals_view (R__order_totals_view.sql) changed since its last run")
            && out.contains("problem: V1.1 (V1.1__create_orders.sql) was edited after it was applied"),
        "{out}"
    );
    eprintln!("layouts: status of a Flyway history with an edited file:\n{out}");
    // Prisma: 01_init recorded from a CRLF checkout (Prisma accepts it),
    // the orders migration edited since.
    let prisma = Catalog::from_dir(&fixture("prisma"))?;
    let db = env.fresh_database();
    let mut c = db.connect()?;
    c.batch_execute(
        "CREATE TABLE _prisma_migrations (id varchar(36) PRIMARY KEY, checksum varchar(64) NOT NULL,
            finished_at timestamptz, migration_name varchar(255) NOT NULL, logs text,
            rolled_back_at timestamptz, started_at timestamptz NOT NULL DEFAULT now(),
            applied_steps_count int NOT NULL DEFAULT 0)",
    )?;
    for (i, m) in prisma.migrations().iter().enumerate() {
        let checksum = match i {
            0 => hex_sha256(&m.sql.replace('\n', "\r\n")),
            1 => hex_sha256(&format!("{}-- edited\n", m.sql)),
            _ => m.tool_checksum.clone().context("a Prisma checksum")?,
        };
        c.execute(
            "INSERT INTO _prisma_migrations (id, checksum, finished_at, migration_name, applied_steps_count) VALUES ($1, $2, now(), $3, 1)",
            &[&format!("id-{i}"), &checksum, &m.key],
        )?;
    }
    ensure!(
        states(&prisma, db.url())?
            == [
                ("01_init".to_string(), State::Applied),
                ("20240305101500_orders".to_string(), State::Divergent),
                ("20240315093000_order_notes".to_string(), State::Applied),
            ],
        "prisma: {:?}",
        states(&prisma, db.url())?
    );
    // Atlas: the revision's hash is the file's line in atlas.sum.
    let atlas = Catalog::from_dir(&fixture("atlas"))?;
    let sum = std::fs::read_to_string(fixture("atlas").join("atlas.sum"))?;
    let first = &atlas.migrations()[0];
    ensure!(
        sum.contains(&format!(
            "{} h1:{}",
            first.file,
            first.tool_checksum.as_deref().unwrap_or("?")
        )),
        "atlas.sum: {sum}"
    );
    let db = env.fresh_database();
    let mut c = db.connect()?;
    c.batch_execute(
        "CREATE SCHEMA atlas_schema_revisions;
         CREATE TABLE atlas_schema_revisions.atlas_schema_revisions (version varchar PRIMARY KEY,
            description varchar NOT NULL, type bigint NOT NULL DEFAULT 2, applied bigint NOT NULL DEFAULT 0,
            total bigint NOT NULL DEFAULT 0, executed_at timestamptz NOT NULL, execution_time bigint NOT NULL,
            error text, error_stmt text, hash varchar NOT NULL, partial_hashes jsonb, operator_version varchar NOT NULL)",
    )?;
    for (i, m) in atlas.migrations().iter().take(2).enumerate() {
        let hash = match i {
            1 => "edited".to_string(),
            _ => m.tool_checksum.clone().unwrap_or_default(),
        };
        c.execute(
            "INSERT INTO atlas_schema_revisions.atlas_schema_revisions (version, description, applied, total, executed_at, execution_time, hash, operator_version) VALUES ($1, $2, 1, 1, now(), 1, $3, 'Atlas CLI')",
            &[&m.key, &m.name, &hash],
        )?;
    }
    let got = states(&atlas, db.url())?;
    ensure!(
        got[..2]
            == [
                (atlas.migrations()[0].label.clone(), State::Applied),
                (atlas.migrations()[1].label.clone(), State::Divergent),
            ]
            && got[2..].iter().all(|(_, s)| *s == State::Pending),
        "atlas: {got:?}"
    );
    let status = migrate::status(db.url(), &atlas)?;
    let message = status
        .drift()
        .find_map(|v| v.drift_message())
        .unwrap_or_default();
    ensure!(
        message.contains("differs from what was applied")
            && message.contains("this file or an earlier one was edited"),
        "{message}"
    );
    ensure!(ToolHistory(Layout::Atlas)
        .table()
        .starts_with("atlas_schema_revisions"));
    Ok(())
}

pub(crate) fn hex_sha256(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// dbmate runs each up section of a file on its own, each in its mode:
/// `migrate` builds the second section's index concurrently (outside a
/// transaction), records the file's version once, after its last section,
/// and `status` then finds every section applied.
fn dbmate_sections_migrate_in_their_own_modes_and_record_the_version_once(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = copy_fixture("dbmate")?;
    let catalog = Catalog::from_dir(dir.path())?;
    let db = env.fresh_database();
    let outcome = migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    ensure!(
        outcome.applied.len() == 5,
        "applied {}",
        outcome.applied.len()
    );
    let mut c = db.connect()?;
    let rows: Vec<String> = c
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    ensure!(
        rows == [
            "20240301090000",
            "20240305101500",
            "20240312080000",
            "20240315093000"
        ],
        "schema_migrations: {rows:?}"
    );
    let valid: bool = c
        .query_one(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'orders_total_cents'::regclass",
            &[],
        )?
        .get(0);
    ensure!(valid, "the concurrently built index is not valid");
    let (code, out, err) = rollsafe_cli(&["status", "--database-url", db.url()], dir.path())?;
    ensure!(
        code == 0
            && out.contains("20240305101500#1 applied")
            && out.contains("20240305101500#2 applied"),
        "status exit {code}: {out}{err}"
    );
    let again = migrate::migrate(db.url(), &catalog, &migrate::Options::default())?;
    ensure!(
        again.applied.is_empty(),
        "a second migrate applied {}",
        again.applied.len()
    );
    Ok(())
}

/// Sqitch's verify scripts, as the catalog hands them over, run after
/// their change (in a transaction rolled back, their own BEGIN/ROLLBACK
/// blanked) and pass; a verify script whose check fails raises.
fn sqitch_verify_scripts_pass_after_their_change_and_a_broken_one_fails(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("sqitch"))?;
    let files: Vec<Option<&str>> = catalog
        .migrations()
        .iter()
        .map(|m| m.verify.as_ref().map(|v| v.file.as_str()))
        .collect();
    ensure!(
        files
            == [
                Some("verify/schema.sql"),
                Some("verify/customers.sql"),
                Some("verify/orders@v1.0.sql"),
                Some("verify/orders_customer_index.sql"),
                Some("verify/orders.sql"),
            ],
        "{files:?}"
    );
    let db = env.fresh_database();
    let mut c = db.connect()?;
    let verify = |c: &mut postgres::Client, sql: &str| -> Result<(), postgres::Error> {
        let mut tx = c.transaction()?;
        tx.batch_execute(sql)?;
        tx.rollback()
    };
    for m in catalog.migrations() {
        let script = m.verify.as_ref().context("a verify script")?;
        // Before its change, the check fails (orders@v1.0's would pass
        // once the table exists; the reworked `orders` needs its column).
        if m.label != "schema" {
            ensure!(
                verify(&mut c, &script.sql).is_err(),
                "{} passes before its change",
                script.file
            );
        }
        c.batch_execute(&m.sql)?;
        verify(&mut c, &script.sql)
            .with_context(|| format!("{} after {}", script.file, m.label))?;
    }
    Ok(())
}

/// What `verify --since auto --from-target` reads: the versions the
/// tool's own table says are applied, as rollsafe's versions.
fn applied_versions_come_from_the_tools_own_table(env: &TestEnv) -> anyhow::Result<()> {
    use migrate::history::ToolHistory;
    let dir = copy_fixture("diesel")?;
    let catalog = Catalog::from_dir(dir.path())?;
    let db = env.fresh_database();
    let mut c = db.connect()?;
    let tool = ToolHistory(Layout::Diesel);
    ensure!(tool.applied_versions(&mut c, &catalog)?.is_none());
    let target = catalog
        .resolve_label("2024-03-12-080000_orders_customer_index")
        .map_err(anyhow::Error::msg)?;
    migrate::migrate(
        db.url(),
        &catalog,
        &migrate::Options {
            target: Some(target),
            ..Default::default()
        },
    )?;
    let versions = tool.applied_versions(&mut c, &catalog)?;
    ensure!(versions == Some(vec![1, 2, 3, 4]), "{versions:?}");
    Ok(())
}

/// A Sqitch change whose verify script fails after it (the reworked
/// `orders` checks a column its deploy script no longer adds) is an
/// error finding naming the script; the passing ones are info.
fn a_failing_sqitch_verify_script_is_an_error_finding(env: &TestEnv) -> anyhow::Result<()> {
    let dir = copy_fixture("sqitch")?;
    let verify = dir.path().join("verify/orders.sql");
    std::fs::write(&verify, "-- Verify shop:orders on pg\n\nBEGIN;\nSELECT gift_wrap FROM shop.orders WHERE false;\nROLLBACK;\n")?;
    let catalog = Catalog::from_dir(dir.path())?;
    let report = Verify::new(catalog)?.rows(ROWS).run(&env.sandbox)?;
    let ids: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.id.starts_with("apply.verify-script"))
        .map(|f| format!("{} {}", f.id, f.message))
        .collect();
    eprintln!("layouts: verify scripts: {ids:#?}");
    ensure!(
        !report.passed,
        "passed with a failing verify script: {ids:?}"
    );
    ensure!(
        ids.iter()
            .filter(|i| i.starts_with("apply.verify-script-passes"))
            .count()
            == 4
            && ids.iter().any(|i| i
                .starts_with("apply.verify-script-fails verify/orders.sql fails after the change")
                && i.contains("gift_wrap")),
        "{ids:#?}"
    );
    Ok(())
}

/// `verify --since auto --from-target` on a sqlx database migrated up to
/// its second migration: it reads `_sqlx_migrations` and rehearses the
/// two after, on that database's schema.
fn since_auto_from_target_rehearses_what_the_tools_table_lacks(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = copy_fixture("sqlx")?;
    let options = ReadOptions {
        layout: Some(Layout::Sqlx),
        ..Default::default()
    };
    let catalog = Catalog::from_dir_in(dir.path(), &options)?;
    let db = env.fresh_database();
    migrate::migrate(
        db.url(),
        &catalog,
        &migrate::Options {
            target: Some(2),
            ..Default::default()
        },
    )?;
    let (code, out, err) = rollsafe_cli(
        &[
            "verify",
            "--layout",
            "sqlx",
            "--rows",
            "1000",
            "--from-target",
            db.url(),
            "--since",
            "auto",
            "--format",
            "json",
        ],
        dir.path(),
    )?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out)?;
    let rehearsed: Vec<i64> = report["migrations"]
        .as_array()
        .context("migrations")?
        .iter()
        .filter(|m| {
            !report["applied_only"]
                .as_array()
                .is_some_and(|a| a.contains(&m["version"]))
        })
        .filter_map(|m| m["version"].as_i64())
        .collect();
    ensure!(rehearsed == [3, 4], "rehearsed {rehearsed:?}: {out}");
    Ok(())
}

/// Atlas's `-- atlas:nolint` silences the static precheck's warning for
/// its statement, as Atlas's own lint does.
fn atlas_nolint_silences_the_static_precheck(_env: &TestEnv) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let files = [
        ("1_t.sql", "CREATE TABLE t (a int);\n"),
        (
            "2_drop.sql",
            "-- atlas:nolint DS103\nALTER TABLE t DROP COLUMN a;\nDROP TABLE t;\n",
        ),
    ];
    for (f, text) in files {
        std::fs::write(dir.path().join(f), text)?;
    }
    std::fs::write(
        dir.path().join("atlas.sum"),
        rollsafe::catalog::layouts::atlas_sum(&files),
    )?;
    let (code, out, err) = rollsafe_cli(&["verify", "--static-only"], dir.path())?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(
        !out.contains("ban-drop-column") && out.contains("ban-drop-table"),
        "{out}"
    );
    Ok(())
}

/// The findings of `report` whose id is one of `ids`, as
/// `migration id: message` lines.
pub(crate) fn findings_with(report: &rollsafe::report::Report, ids: &[&str]) -> Vec<String> {
    report
        .findings
        .iter()
        .filter(|f| ids.contains(&f.id.as_str()))
        .map(|f| format!("{:?} {}: {}", f.migration, f.id, f.message))
        .collect()
}

/// No error finding in `report`.
pub(crate) fn no_errors(report: &rollsafe::report::Report) -> anyhow::Result<()> {
    let errors: Vec<String> = report
        .errors()
        .map(|f| format!("{:?} {}: {}", f.migration, f.id, f.message))
        .collect();
    ensure!(report.passed && errors.is_empty(), "errors: {errors:#?}");
    Ok(())
}

/// golang-migrate sends a file as one string: a lone `CREATE INDEX
/// CONCURRENTLY` runs outside any transaction, in the `--since` base as in
/// the rehearsal, and the static precheck agrees.
fn a_lone_concurrent_build_runs_as_golang_migrate_sends_it(env: &TestEnv) -> anyhow::Result<()> {
    let dir = fixture("golang-migrate-lone-concurrent");
    let catalog = Catalog::from_dir(&dir)?;
    expect_read(
        &catalog,
        Layout::GolangMigrate,
        &[
            ("1", "1_create_sensor_readings.up.sql", false),
            ("2", "2_readings_taken_at_index.up.sql", true),
            ("3", "3_readings_humidity.up.sql", false),
        ],
    )?;
    // The concurrent build in the base the rehearsal starts from.
    let report = Verify::new(Catalog::from_dir(&dir)?)?
        .rows(ROWS)
        .since(2)?
        .run(&env.sandbox)?;
    no_errors(&report)?;
    // Rehearsed, and not flagged as a build inside a transaction.
    let report = Verify::new(catalog)?.rows(ROWS).run(&env.sandbox)?;
    let banned = findings_with(
        &report,
        &[
            "static.ban-concurrent-index-creation-in-transaction",
            "apply.fails-on-empty",
        ],
    );
    ensure!(banned.is_empty(), "{banned:#?}");
    no_errors(&report)
}

/// Prisma sends migration.sql as one simple query: a lone concurrent build
/// runs outside a transaction, and a file's own `BEGIN` … `COMMIT` (with
/// `SET TRANSACTION` first, or `SET LOCAL` and a new type) runs as written:
/// no false `apply.fails-on-empty`, no `transaction-nesting`.
fn prisma_files_run_their_own_transactions_as_written(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("prisma-own-transactions"))?;
    expect_read(
        &catalog,
        Layout::Prisma,
        &[
            ("01_init", "01_init/migration.sql", false),
            (
                "02_reading_taken_at_index",
                "02_reading_taken_at_index/migration.sql",
                true,
            ),
            (
                "03_snapshot_isolation",
                "03_snapshot_isolation/migration.sql",
                true,
            ),
            ("04_climate_type", "04_climate_type/migration.sql", true),
        ],
    )?;
    let report = Verify::new(catalog)?.rows(ROWS).run(&env.sandbox)?;
    let wrong = findings_with(
        &report,
        &[
            "static.transaction-nesting",
            "static.ban-concurrent-index-creation-in-transaction",
            "apply.fails-on-empty",
        ],
    );
    ensure!(wrong.is_empty(), "{wrong:#?}");
    // A kill inside a file's own block rolls it back, and the rerun
    // converges.
    let reruns = findings_with(&report, &["apply.rerun-converges"]);
    ensure!(reruns.len() == 2, "{reruns:#?}");
    no_errors(&report)
}

/// dbmate's `-- migrate:down` marks a section only at the start of a line:
/// an indented one is SQL, so the DROP TABLE after it runs with the up
/// section, and the next migration fails as it fails under dbmate.
fn an_indented_dbmate_marker_is_sql_as_dbmate_reads_it(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("dbmate-indented-marker"))?;
    ensure!(
        catalog.migrations()[0]
            .sql
            .contains("DROP TABLE seed_packets;"),
        "{}",
        catalog.migrations()[0].sql
    );
    let report = Verify::new(catalog)?.rows(ROWS).run(&env.sandbox)?;
    let failed = findings_with(&report, &["apply.fails-on-empty"]);
    ensure!(
        failed.len() == 1
            && failed[0].starts_with("Some(2) ")
            && failed[0].contains("\"seed_packets\" does not exist"),
        "{failed:#?}"
    );
    Ok(())
}

/// Atlas's `--dir-format golang-migrate`: up and down files beside
/// `atlas.sum` are golang-migrate's folder (not a mix of layouts), its sum
/// checked over the files Atlas hashed.
fn an_atlas_folder_in_golang_migrate_format_is_golang_migrates(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("atlas-golang-migrate"))?;
    expect_read(
        &catalog,
        Layout::GolangMigrate,
        &[
            (
                "20250301090000",
                "20250301090000_create_beehives.up.sql",
                false,
            ),
            (
                "20250308090000",
                "20250308090000_beehive_queen_marked.up.sql",
                false,
            ),
        ],
    )?;
    let dir = copy_fixture("atlas-golang-migrate")?;
    let edited = dir
        .path()
        .join("20250308090000_beehive_queen_marked.up.sql");
    std::fs::write(
        &edited,
        std::fs::read_to_string(&edited)? + "CREATE INDEX ON beehives (apiary);\n",
    )?;
    let err = Catalog::from_dir(dir.path()).unwrap_err().to_string();
    ensure!(
        err.starts_with("20250308090000_beehive_queen_marked.up.sql: ")
            && err.contains("disagrees with its hash in atlas.sum"),
        "{err}"
    );
    rehearse_clean(env, catalog)
}

/// Atlas's other `--dir-format`s: goose, Flyway and dbmate files beside
/// the `atlas.sum` Atlas hashed them into are that tool's folder (read,
/// applied and annotated as it does), the sum checked file by file. The
/// Flyway one has only `V1__…` files, which alone read as refinery's: it
/// was refused as "mixes migration layouts".
fn atlas_folders_in_goose_flyway_and_dbmate_format_are_those_tools(
    env: &TestEnv,
) -> anyhow::Result<()> {
    for (fixture_name, layout, files) in [
        (
            "atlas-goose",
            Layout::Goose,
            [
                "20250401090000_create_kilns.sql",
                "20250408090000_kiln_firing_notes.sql",
            ],
        ),
        (
            "atlas-flyway",
            Layout::Flyway,
            ["V1__create_looms.sql", "V2__loom_warp_length.sql"],
        ),
        (
            "atlas-dbmate",
            Layout::Dbmate,
            [
                "20250501090000_create_ferries.sql",
                "20250508090000_ferry_crossing_minutes.sql",
            ],
        ),
    ] {
        let catalog = Catalog::from_dir(&fixture(fixture_name))?;
        let read: Vec<&str> = catalog
            .migrations()
            .iter()
            .map(|m| m.file.as_str())
            .collect();
        ensure!(
            catalog.layout == layout && read == files,
            "{fixture_name}: read as {} {read:?}",
            catalog.layout
        );
        // The down sections are not applied: each file's up alone.
        ensure!(
            catalog.migrations().iter().all(|m| !m.sql.contains("DROP")),
            "{fixture_name}: a down section was read as SQL"
        );
        let dir = copy_fixture(fixture_name)?;
        let edited = dir.path().join(files[1]);
        std::fs::write(&edited, std::fs::read_to_string(&edited)? + "\n-- edited\n")?;
        let err = Catalog::from_dir(dir.path()).unwrap_err().to_string();
        ensure!(
            err.starts_with(&format!("{}: ", files[1]))
                && err.contains("disagrees with its hash in atlas.sum"),
            "{fixture_name}: {err}"
        );
        rehearse_clean(env, catalog)?;
    }
    Ok(())
}

/// A Flyway folder from a baseline: on an empty database Flyway runs the
/// newest baseline first and skips the versioned files at or below it.
fn a_flyway_folder_starting_at_a_baseline_runs_it_first(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("flyway-baseline"))?;
    expect_read(
        &catalog,
        Layout::Flyway,
        &[
            ("B1_20_0", "B1_20_0__orchard_baseline.sql", false),
            ("V1_20_1", "V1_20_1__tree_height.sql", false),
            ("V1_21", "V1_21__harvests.sql", false),
        ],
    )?;
    rehearse_clean(env, catalog)
}

/// A goose Go migration between SQL files: listed in its place (never
/// dropped), the rehearsal stops there with a skipped finding that names
/// it and the way forward; in a `--since` base it is left out, said so.
fn a_goose_go_migration_is_listed_and_what_builds_on_it_skipped(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = fixture("goose-go-migration");
    let catalog = Catalog::from_dir(&dir)?;
    let listed: Vec<(&str, bool)> = catalog
        .migrations()
        .iter()
        .map(|m| (m.file.as_str(), m.not_runnable.is_some()))
        .collect();
    ensure!(
        listed
            == [
                ("00001_create_weather_stations.sql", false),
                ("00002_station_calibrations.go", true),
                ("00003_calibration_taken_on.sql", false),
            ],
        "{listed:?}"
    );
    let report = Verify::new(catalog)?.rows(ROWS).run(&env.sandbox)?;
    no_errors(&report)?;
    let skipped = findings_with(&report, &["apply.not-runnable"]);
    ensure!(
        skipped.len() == 1
            && skipped[0].starts_with("Some(2) ")
            && skipped[0].contains("00002_station_calibrations.go")
            && skipped[0].contains("1 migration(s) after it"),
        "{skipped:#?}"
    );
    ensure!(
        report
            .findings
            .iter()
            .any(|f| f.id == "apply.not-runnable" && f.advice.contains("--from-target")),
        "no way forward said"
    );
    // Past it with --since: the base lacks it, and says so.
    let report = Verify::new(Catalog::from_dir(&dir)?)?
        .rows(ROWS)
        .since(2)?
        .run(&env.sandbox)?;
    let noted = findings_with(&report, &["apply.not-runnable-in-base"]);
    ensure!(noted.len() == 1, "{noted:#?}");
    // What fails on what the base lacks is not an error of its own.
    no_errors(&report)?;
    ensure!(
        report
            .findings
            .iter()
            .any(|f| f.id == "apply.fails-on-empty"
                && f.severity == rollsafe::report::Severity::Skipped
                && f.message.contains("00002_station_calibrations.go")),
        "the failure on what the base lacks is not skipped naming it"
    );
    // A base that fails after it: skipped naming it, not a refusal.
    let report = Verify::new(Catalog::from_dir(&dir)?)?
        .rows(ROWS)
        .since(3)?
        .run(&env.sandbox)?;
    no_errors(&report)?;
    let skipped = findings_with(&report, &["apply.not-runnable"]);
    ensure!(
        skipped.len() == 1 && skipped[0].contains("fails without it"),
        "{skipped:#?}"
    );
    Ok(())
}

/// A goose folder of Go migrations only (a bike shop's): read as goose's,
/// not refused as holding no migration files; each listed in its place as
/// one rollsafe cannot run, the header saying nothing of them is rehearsed
/// or checked; and the run calls nothing in them ok.
fn a_goose_folder_of_go_migrations_only_is_listed_and_nothing_is_called_ok(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = fixture("goose-go-only");
    let catalog = Catalog::from_dir(&dir)?;
    let listed: Vec<(&str, bool)> = catalog
        .migrations()
        .iter()
        .map(|m| (m.file.as_str(), m.not_runnable.is_some()))
        .collect();
    ensure!(
        catalog.layout == Layout::Goose
            && listed
                == [
                    ("00001_create_bikes.go", true),
                    ("00002_bikes_frame.go", true),
                ],
        "{:?}: {listed:?}",
        catalog.layout
    );
    let report = Verify::new(catalog)?.rows(ROWS).run(&env.sandbox)?;
    let called_ok: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.migration.is_some() && f.severity == rollsafe::report::Severity::Info)
        .map(|f| format!("{:?} {}: {}", f.migration, f.id, f.message))
        .collect();
    ensure!(
        called_ok.is_empty(),
        "ok about what never ran: {called_ok:#?}"
    );
    for (version, file) in [(1, "00001_create_bikes.go"), (2, "00002_bikes_frame.go")] {
        ensure!(
            report.findings.iter().any(|f| f.migration == Some(version)
                && f.severity == rollsafe::report::Severity::Skipped
                && f.message.contains(file)
                && f.message.contains("goose Go migration")),
            "{file} is not said to be a Go migration rollsafe cannot run: {:#?}",
            report.findings
        );
    }
    let (code, out, err) = rollsafe_cli(
        &[
            "verify",
            "--postgres",
            env.sandbox.admin_url(),
            "--rows",
            "200",
        ],
        &dir,
    )?;
    let header = err
        .lines()
        .find(|l| l.contains("read as goose's"))
        .unwrap_or_default();
    ensure!(
        code != 2
            && header.contains("2 migration(s)")
            && header.contains(
                "rollsafe can run none of these migrations (each is a goose Go migration"
            ),
        "exit {code}: {out}{err}"
    );
    Ok(())
}

/// A project whose own trigger on its tool's history table refuses other
/// writers: the rehearsal goes on (the history is bookkeeping), and what
/// needed those rows says it was skipped and why.
fn a_guard_on_the_tools_history_table_does_not_stop_the_rehearsal(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = fixture("diesel-guarded-history");
    // The guard in the --since base: its rows are not written.
    let report = Verify::new(Catalog::from_dir(&dir)?)?
        .rows(ROWS)
        .since(2)?
        .run(&env.sandbox)?;
    no_errors(&report)?;
    let refused = findings_with(&report, &["apply.base-history-refused"]);
    ensure!(
        refused.len() == 1 && refused[0].contains("recorded by loomctl only"),
        "{refused:#?}"
    );
    // The guard rehearsed: the migrator's runs stop there, skipped.
    let report = Verify::new(Catalog::from_dir(&dir)?)?
        .rows(ROWS)
        .run(&env.sandbox)?;
    no_errors(&report)?;
    let skipped = findings_with(&report, &["apply.second-run-skipped"]);
    ensure!(skipped.len() == 1, "{skipped:#?}");
    Ok(())
}

/// A Sqitch change creates a login role (cluster-wide), and the changes
/// after it grant to it. Every path of the rehearsal (the empty and seeded
/// paths, the probe's copy, the background migrator) runs on one server:
/// each must meet the roles its own database's history made, as
/// production's one database does. One test, run in sequence: the role's
/// name is the server's, shared with any other test running beside.
fn a_sqitch_change_creating_a_role_is_rehearsed_on_every_path(env: &TestEnv) -> anyhow::Result<()> {
    let rehearse = |dir: &Path, superuser: bool| -> anyhow::Result<rollsafe::report::Report> {
        Ok(Verify::new(Catalog::from_dir(dir)?)?
            .superuser_migrator(superuser)
            .rows(ROWS)
            .since(1)?
            .run(&env.sandbox)?)
    };
    let dir = fixture("sqitch-role");
    // The migrator of a managed database cannot create a role: said, with
    // the flag that rehearses a superuser migrator.
    let report = rehearse(&dir, false)?;
    let needs = findings_with(&report, &["apply.needs-superuser"]);
    ensure!(
        !report.passed && needs.len() == 1 && needs[0].contains("CREATE ROLE harvest_report"),
        "{needs:#?}"
    );
    ensure!(
        report
            .findings
            .iter()
            .any(|f| f.id == "apply.needs-superuser" && f.advice.contains("--migrator-superuser")),
        "the advice does not name --migrator-superuser"
    );
    // With it, every path applies the change and the ones granting to its
    // role after it; the change's verify script sees the role.
    let report = rehearse(&dir, true)?;
    no_errors(&report)?;
    let applied = findings_with(&report, &["apply.applies"]);
    ensure!(
        ["Some(2) ", "Some(3) ", "Some(4) "].iter().all(|c| applied
            .iter()
            .any(|a| a.starts_with(c) && a.contains("rows"))),
        "not every change applied on both paths: {applied:#?}"
    );
    ensure!(
        findings_with(&report, &["apply.verify-script-passes"]).len() == 1
            && findings_with(&report, &["apply.second-run-noop"]).len() == 3,
        "{:#?}",
        findings_with(
            &report,
            &["apply.verify-script-passes", "apply.second-run-noop"]
        )
    );
    // A change that creates the role again fails as it would in production:
    // the guard hides no true error.
    let again = copy_fixture("sqitch-role")?;
    let harvests = again.path().join("deploy/harvests.sql");
    let sql = std::fs::read_to_string(&harvests)?.replace(
        "CREATE INDEX harvests_bed",
        "CREATE ROLE harvest_report;\nCREATE INDEX harvests_bed",
    );
    std::fs::write(&harvests, sql)?;
    let report = rehearse(again.path(), true)?;
    let failed = findings_with(&report, &["apply.fails-on-empty"]);
    ensure!(
        failed.len() == 1
            && failed[0].starts_with("Some(3) ")
            && failed[0].contains("already exists"),
        "{failed:#?}"
    );
    // Nothing is left on the server: the role and every copy set aside
    // are dropped with their rehearsal.
    let mut admin = rollsafe::db::connect(env.sandbox.admin_url())?;
    let left: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_roles WHERE rolname = 'harvest_report' OR rolname ~ '_aside_[0-9]+$'",
            &[],
        )?
        .get(0);
    ensure!(left == 0, "{left} role(s) left behind on the server");
    Ok(())
}

/// The maragudk/migrate fixture's folder, inside its Go module.
const MARAGUDK_FOLDER: &str = "store/migrations";

/// maragudk/migrate's folder in a Go module that requires it: every name
/// its regexp takes (`0002_create_alerts_up.sql` too), in name order,
/// the whole name the version though numeric prefixes repeat; down files
/// and `notes.sql` never read; each file in one transaction.
fn maragudk_migrate_files_by_name_in_a_go_module(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("maragudk-migrate").join(MARAGUDK_FOLDER))?;
    expect_read(
        &catalog,
        Layout::MaragudkMigrate,
        &[
            ("0001_create_beds", "0001_create_beds.up.sql", false),
            ("0001_create_sensors", "0001_create_sensors.up.sql", false),
            ("0002_create_alerts", "0002_create_alerts_up.sql", false),
            ("0002_create_readings", "0002_create_readings.up.sql", false),
            ("0003_add_bed_soil", "0003_add_bed_soil.up.sql", false),
        ],
    )?;
    ensure!(catalog
        .migrations()
        .iter()
        .all(|m| m.tool_checksum.is_none()));
    rehearse_clean(env, catalog)
}

/// `rollsafe verify` on the folder, as a user runs it: the first line
/// says it is read as maragudk/migrate's (detected from go.mod) and that
/// the tool's Go callbacks are not run; the rehearsal passes.
fn maragudk_migrate_verify_reads_and_rehearses_it_as_its_own(_env: &TestEnv) -> anyhow::Result<()> {
    let dir = copy_fixture("maragudk-migrate")?;
    let (code, out, err) = rollsafe_cli(
        &["verify", "--rows", "1000"],
        &dir.path().join(MARAGUDK_FOLDER),
    )?;
    eprintln!("layouts: rollsafe verify on the maragudk/migrate folder:\n{err}{out}");
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(
        err.contains("5 migration(s) from ")
            && err.contains("read as maragudk-migrate's (detected; --layout names another tool); maragudk/migrate's Before/After callbacks are the project's Go code: rollsafe does not run them"),
        "{err}"
    );
    ensure!(out.contains("PASSED: 0 error(s)"), "{out}");
    Ok(())
}

/// `migrate` writes the tool's one `migrations` row (created as the tool
/// creates it, `''` first) in each migration's transaction; `status` reads
/// every version at or below it as applied: after `--target
/// 0001_create_sensors` the first two, after a full run all five, the row
/// then the newest version. The tool keeps no checksum: a file edited
/// after it was applied is not divergent, there is nothing to compare.
fn maragudk_migrate_then_status_agree_on_its_one_row(env: &TestEnv) -> anyhow::Result<()> {
    let project = copy_fixture("maragudk-migrate")?;
    let dir = project.path().join(MARAGUDK_FOLDER);
    let db = env.fresh_database();
    let url = db.url();
    let mut c = db.connect()?;
    let rows = |c: &mut postgres::Client| -> anyhow::Result<Vec<String>> {
        Ok(c.query("SELECT version FROM migrations", &[])?
            .iter()
            .map(|r| r.get(0))
            .collect())
    };
    let (code, out, err) = rollsafe_cli(
        &[
            "migrate",
            "--database-url",
            url,
            "--target",
            "0001_create_sensors",
        ],
        &dir,
    )?;
    ensure!(code == 0, "migrate exit {code}: {out}{err}");
    ensure!(
        out.contains("note:       maragudk/migrate's Before/After callbacks"),
        "{out}"
    );
    ensure!(
        rows(&mut c)? == ["0001_create_sensors"],
        "migrations: {:?}",
        rows(&mut c)?
    );
    let (code, out, err) = rollsafe_cli(&["status", "--database-url", url], &dir)?;
    eprintln!("layouts: status after --target 0001_create_sensors:\n{out}");
    ensure!(
        code == 0
            && out.contains("0001_create_beds applied")
            && out.contains("0001_create_sensors applied")
            && out.contains("0002_create_alerts pending")
            && out.contains("0002_create_readings pending")
            && out.contains("0003_add_bed_soil pending"),
        "status exit {code}: {out}{err}"
    );
    let (code, out, err) = rollsafe_cli(&["migrate", "--database-url", url], &dir)?;
    ensure!(code == 0, "migrate exit {code}: {out}{err}");
    ensure!(
        rows(&mut c)? == ["0003_add_bed_soil"],
        "migrations: {:?}",
        rows(&mut c)?
    );
    let soil: bool = c
        .query_one(
            "SELECT count(*) = 1 FROM information_schema.columns WHERE table_name = 'beds' AND column_name = 'soil'",
            &[],
        )?
        .get(0);
    ensure!(soil, "0003_add_bed_soil did not run");
    std::fs::write(
        dir.join("0001_create_beds.up.sql"),
        "CREATE TABLE beds (id bigint PRIMARY KEY);\n",
    )?;
    let catalog = Catalog::from_dir(&dir)?;
    all_applied(url, &catalog)?;
    let again = migrate::migrate(url, &catalog, &migrate::Options::default())?;
    ensure!(
        again.applied.is_empty(),
        "a second migrate applied {}",
        again.applied.len()
    );
    Ok(())
}

/// `status` on `url` reads the tool's history table and shows every
/// migration of `catalog` applied.
pub(crate) fn all_applied(url: &str, catalog: &Catalog) -> anyhow::Result<()> {
    let status = migrate::status(url, catalog)?;
    ensure!(
        status.history_table
            && status
                .versions
                .iter()
                .all(|v| v.state == migrate::State::Applied),
        "status: {:?}",
        status
            .versions
            .iter()
            .map(|v| (v.version, v.state))
            .collect::<Vec<_>>()
    );
    Ok(())
}

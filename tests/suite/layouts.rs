//! Every tool's migration folder, read the way its tool reads it and
//! rehearsed end to end: one fixture per layout under
//! `tests/fixtures/layouts/` (a small shop: customers, orders, an index
//! built concurrently, a column added), each with a down/undo/revert part
//! that would break the run if it were executed, a step the tool runs
//! outside a transaction, and an ordering trap (diesel's two version
//! spellings, goose's 2 before 10, Flyway's V1.1 and its repeatable after
//! V10, Sqitch's plan order and rework, sqlx's longer version).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context};
use libtest_mimic::Trial;
use rollsafe::catalog::{Catalog, Layout, ReadOptions};
use rollsafe::verify::Verify;

use crate::common::{repo_root, rollsafe_bin, TestEnv};

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
        ]
    )
}

const ROWS: u64 = 1000;

fn fixture(layout: &str) -> PathBuf {
    repo_root().join("tests/fixtures/layouts").join(layout)
}

/// (label, file, runs outside a transaction) of each migration, in order.
fn read(catalog: &Catalog) -> Vec<(String, String, bool)> {
    catalog
        .migrations()
        .iter()
        .map(|m| (m.label.clone(), m.file.clone(), m.no_transaction()))
        .collect()
}

fn expect_read(
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
fn rehearse_clean(env: &TestEnv, catalog: Catalog) -> anyhow::Result<()> {
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
            ("20240305101500", "20240305101500_create_orders.sql", false),
            (
                "20240312080000",
                "20240312080000_orders_customer_index.sql",
                true,
            ),
            ("20240315093000", "20240315093000_order_notes.sql", false),
        ],
    )?;
    // Both up sections of the second file, not the down between them.
    let sql = &catalog.migrations()[1].sql;
    ensure!(
        sql.contains("COMMENT ON TABLE orders") && !sql.contains("DROP"),
        "{sql}"
    );
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
        Command::new(rollsafe_bin())
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
fn copy_fixture(layout: &str) -> anyhow::Result<tempfile::TempDir> {
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

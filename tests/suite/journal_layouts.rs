//! The layouts whose files say how they run: Drizzle's out folder (its
//! `meta/_journal.json` lists the files in order, each split at `-->
//! statement-breakpoint`) and Liquibase formatted SQL (`--changeset
//! author:id` sections with their own transaction and split modes).
//! Fixtures are a bicycle repair workshop's, under
//! `tests/fixtures/layouts/drizzle-*` and `liquibase-*`: each with a trap a
//! wrong reading falls into (a file the journal does not list that drops a
//! table, a piece without its `;`, rollback lines that would undo the
//! change, a changeset for another database), and one plain `CREATE
//! INDEX` on a table with rows that verify must call a locks error. A
//! pottery studio's kilns (`drizzle-shared-transaction`) hold the one
//! transaction drizzle sends every pending file in: a brief lock held
//! through the slow file after it, and a fuel added to an enum that the
//! next file uses before the two commit.

use anyhow::{ensure, Context};
use libtest_mimic::Trial;
use rollsafe::catalog::{Catalog, Execution, Layout};
use rollsafe::migrate;
use rollsafe::verify::Verify;

use crate::common::TestEnv;
use crate::layouts::{
    all_applied, copy_fixture, expect_read, findings_with, fixture, hex_sha256, rehearse_clean,
    rollsafe_cli,
};

pub fn tests(env: &std::sync::Arc<TestEnv>) -> Vec<Trial> {
    crate::trials!(
        "journal_layouts",
        env,
        [
            drizzle_journal_order_and_breakpoints,
            drizzle_plain_index_on_rows_is_a_locks_error,
            drizzle_migrate_writes_its_table_and_status_reads_every_spelling,
            drizzle_pending_files_hold_their_locks_to_the_last_commit,
            drizzle_pending_files_that_fail_only_as_one_transaction,
            liquibase_changesets_in_path_order_with_their_modes,
            liquibase_plain_index_on_rows_is_a_locks_error,
            liquibase_status_reads_its_changelog_table_and_since_every_spelling,
            liquibase_master_changelog_orders_the_files,
        ]
    )
}

const ROWS: u64 = 1000;

/// The journal's entries in its order, each its `<tag>.sql`, labelled by
/// the tag, keyed by `when`, hashed as drizzle hashes it; the file the
/// journal does not list (it drops `riders`) is never read; a piece that
/// lost its `;` is still its own statement. Rehearsed: no error.
fn drizzle_journal_order_and_breakpoints(env: &TestEnv) -> anyhow::Result<()> {
    let dir = fixture("drizzle-bikeshop");
    let catalog = Catalog::from_dir(&dir)?;
    expect_read(
        &catalog,
        Layout::Drizzle,
        &[
            (
                "0000_workshop_customers",
                "0000_workshop_customers.sql",
                false,
            ),
            ("0001_repair_orders", "0001_repair_orders.sql", false),
            ("0002_bike_frame_size", "0002_bike_frame_size.sql", false),
            ("0003_spare_parts", "0003_spare_parts.sql", false),
        ],
    )?;
    let keys: Vec<&str> = catalog
        .migrations()
        .iter()
        .map(|m| m.key.as_str())
        .collect();
    ensure!(
        keys == [
            "1717000000000",
            "1717100000000",
            "1717200000000",
            "1717300000000"
        ],
        "keys {keys:?}"
    );
    for m in catalog.migrations() {
        let text = std::fs::read_to_string(dir.join(&m.file))?;
        ensure!(
            m.tool_checksum.as_deref() == Some(hex_sha256(&text).as_str()),
            "{}: {:?}",
            m.label,
            m.tool_checksum
        );
    }
    let first = &catalog.migrations()[0];
    let split = rollsafe::sql::split(&first.sql);
    ensure!(
        split.exact && split.statements.len() == 3,
        "{} statements in {}",
        split.statements.len(),
        first.file
    );
    ensure!(
        first.sql.lines().count()
            == std::fs::read_to_string(dir.join(&first.file))?
                .lines()
                .count(),
        "line numbers moved"
    );
    rehearse_clean(env, catalog)
}

/// A plain `CREATE INDEX` on a table that has rows by then: verify calls
/// it `locks.blocking-index-build` on that migration, labelled by its tag,
/// and nothing before it is an error.
fn drizzle_plain_index_on_rows_is_a_locks_error(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("drizzle-blocking-index"))?;
    let report = Verify::new(catalog)?.rows(ROWS).run(&env.sandbox)?;
    let errors: Vec<(Option<i32>, String)> = report
        .errors()
        .map(|f| (f.migration, f.id.clone()))
        .collect();
    ensure!(
        errors == [(Some(2), "locks.blocking-index-build".to_string())],
        "errors: {:#?}",
        findings_with(&report, &["locks.blocking-index-build"])
    );
    let label = &report
        .migrations
        .iter()
        .find(|m| m.version == 2)
        .context("migration 2 not in the report")?
        .label;
    ensure!(label == "0001_jobs_by_status", "labelled {label}");
    Ok(())
}

/// drizzle sends every pending file in one transaction: with production
/// at the first file (`--since`), 0001's brief ACCESS EXCLUSIVE on kilns
/// is held until 0002's slow pass over every firing commits (2 ms a row,
/// standing for work that is slow at production's size): an error on
/// 0001, though each file alone is within the budget. With production at
/// 0001 (`--since 2`), 0002 is pending alone: nothing held past it.
fn drizzle_pending_files_hold_their_locks_to_the_last_commit(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("drizzle-shared-transaction"))?;
    let report = Verify::new(catalog.clone())?
        .rows(ROWS)
        .since(1)?
        .run(&env.sandbox)?;
    let errors: Vec<(Option<i32>, String)> = report
        .errors()
        .map(|f| (f.migration, f.id.clone()))
        .collect();
    let shared = findings_with(
        &report,
        &["locks.held-to-shared-commit", "locks.shared-transaction"],
    );
    ensure!(
        errors == [(Some(2), "locks.held-to-shared-commit".to_string())],
        "errors: {errors:?}\n{shared:#?}"
    );
    let f = report
        .findings
        .iter()
        .find(|f| f.id == "locks.held-to-shared-commit")
        .context("no held-to-shared-commit")?;
    ensure!(
        f.message.contains("ACCESS EXCLUSIVE on kilns")
            && f.message.contains("0002_firing_notes_trimmed (~")
            && f.message
                .contains("drizzle's migrate sends every pending file in one transaction"),
        "{}",
        f.message
    );
    let own = f.evidence["own_predicted_hold_ms"]
        .as_f64()
        .unwrap_or(f64::MAX);
    let held = f.evidence["predicted_hold_ms"].as_f64().unwrap_or(0.0);
    ensure!(
        own < 1000.0 && held > 1000.0,
        "own {own} ms, to the last commit {held} ms"
    );
    // Neither file alone holds a blocking lock past the budget.
    ensure!(
        !report
            .findings
            .iter()
            .any(|f| f.id == "locks.long-blocking-lock"),
        "{:#?}",
        findings_with(&report, &["locks.long-blocking-lock"])
    );

    let report = Verify::new(catalog)?
        .rows(ROWS)
        .since(2)?
        .run(&env.sandbox)?;
    ensure!(
        report.errors().next().is_none()
            && !report
                .findings
                .iter()
                .any(|f| f.id.starts_with("locks.shared-transaction")),
        "{:#?}",
        findings_with(
            &report,
            &["locks.held-to-shared-commit", "locks.shared-transaction"]
        )
    );
    Ok(())
}

/// drizzle sends every pending file in one transaction: a value 0001
/// adds to an enum cannot be used by 0002 before that transaction
/// commits, though each file applies in a transaction of its own. With
/// production at 0000 (`--since`), 0002 is `apply.fails-in-shared-transaction`
/// at its statement, naming the server's error; rehearsed from 0001 on
/// (0001 already deployed), 0002 is pending alone and passes.
fn drizzle_pending_files_that_fail_only_as_one_transaction(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("drizzle-enum-value-in-one-transaction"))?;
    let report = Verify::new(catalog.clone())?
        .rows(ROWS)
        .since(1)?
        .run(&env.sandbox)?;
    let errors: Vec<(Option<i32>, String)> = report
        .errors()
        .map(|f| (f.migration, f.id.clone()))
        .collect();
    ensure!(
        errors == [(Some(3), "apply.fails-in-shared-transaction".to_string())],
        "errors: {errors:?}\n{:#?}",
        findings_with(
            &report,
            &["apply.fails-in-shared-transaction", "apply.applies"]
        )
    );
    let f = report.errors().next().context("no error")?;
    let at = f.location.as_ref().context("no location")?;
    ensure!(
        f.message.contains("unsafe use of new value")
            && f.message.contains("after 0001_electric")
            && at.file.ends_with("0002_electric_default.sql")
            && at.line == 1,
        "{} at {at:?}",
        f.message
    );
    let report = Verify::new(catalog)?
        .rows(ROWS)
        .since(2)?
        .run(&env.sandbox)?;
    ensure!(
        report.errors().next().is_none(),
        "{:#?}",
        findings_with(&report, &["apply.fails-in-shared-transaction"])
    );
    Ok(())
}

/// `migrate --target <tag>` writes drizzle's own rows (the file's SHA-256,
/// the journal's `when`) in `drizzle.__drizzle_migrations`; `status` reads
/// them; the rest applies. `--since` takes the tag, the file name, the `when` and the
/// start of a tag; the CLI says drizzle's one transaction is not
/// rollsafe's. A file edited after it ran is divergent, with the note that
/// drizzle never compares its hash. A row for the newest entry alone stands for every entry
/// before it, as drizzle reads its table.
fn drizzle_migrate_writes_its_table_and_status_reads_every_spelling(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = copy_fixture("drizzle-bikeshop")?;
    let db = env.fresh_database();
    let url = db.url();
    let mut c = db.connect()?;
    let rows = |c: &mut postgres::Client| -> anyhow::Result<Vec<(String, i64)>> {
        Ok(c.query(
            "SELECT hash, created_at FROM drizzle.__drizzle_migrations ORDER BY id",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
    };
    let (code, out, err) = rollsafe_cli(
        &[
            "migrate",
            "--database-url",
            url,
            "--target",
            "0001_repair_orders",
        ],
        dir.path(),
    )?;
    ensure!(code == 0, "migrate exit {code}: {out}{err}");
    ensure!(
        out.contains("drizzle sends every pending file in one transaction"),
        "{out}"
    );
    let hash = |file: &str| -> anyhow::Result<String> {
        Ok(hex_sha256(&std::fs::read_to_string(dir.path().join(file))?))
    };
    let want = vec![
        (hash("0000_workshop_customers.sql")?, 1717000000000),
        (hash("0001_repair_orders.sql")?, 1717100000000),
    ];
    ensure!(rows(&mut c)? == want, "rows {:?}", rows(&mut c)?);
    let (code, out, err) = rollsafe_cli(&["status", "--database-url", url], dir.path())?;
    eprintln!("journal_layouts: drizzle status after --target 0001_repair_orders:\n{out}");
    ensure!(
        code == 0
            && out.contains("0001_repair_orders applied")
            && out.contains("0002_bike_frame_size pending"),
        "status exit {code}: {out}{err}"
    );
    let (code, out, err) = rollsafe_cli(&["migrate", "--database-url", url], dir.path())?;
    ensure!(code == 0, "migrate exit {code}: {out}{err}");
    ensure!(rows(&mut c)?.len() == 4, "rows {:?}", rows(&mut c)?);
    let riders: bool = c
        .query_one("SELECT to_regclass('riders') IS NOT NULL", &[])?
        .get(0);
    ensure!(riders, "the file the journal does not list was run");
    let catalog = Catalog::from_dir(dir.path())?;
    all_applied(url, &catalog)?;
    // A file edited after it ran: its hash differs, which drizzle never
    // checks; status says so.
    std::fs::write(
        dir.path().join("0002_bike_frame_size.sql"),
        "ALTER TABLE \"bikes\" ADD COLUMN \"frame_size_mm\" integer;\n",
    )?;
    let edited = Catalog::from_dir(dir.path())?;
    let status = migrate::status(url, &edited)?;
    let message = status
        .drift()
        .find_map(|v| v.drift_message())
        .unwrap_or_default();
    ensure!(
        message.contains("0002_bike_frame_size")
            && message.contains("drizzle itself never compares this hash"),
        "{message}"
    );
    // drizzle reads only the newest created_at: one row for the last
    // entry stands for all of them.
    c.batch_execute("DELETE FROM drizzle.__drizzle_migrations WHERE created_at < 1717300000000")?;
    all_applied(url, &catalog)?;
    for since in [
        "0001_repair_orders",
        "0001_repair_orders.sql",
        "1717100000000",
        "0001",
    ] {
        let (code, out, err) =
            rollsafe_cli(&["verify", "--static-only", "--since", since], dir.path())?;
        ensure!(
            code == 0
                && out.contains("0002_bike_frame_size 0002_bike_frame_size.sql")
                && !out.contains("0001_repair_orders 0001_repair_orders.sql"),
            "--since {since}: exit {code}: {out}{err}"
        );
    }
    Ok(())
}

/// Each changeset of each formatted SQL file is a migration, files by
/// path: its label `file::id::author`, its transaction mode from
/// `runInTransaction`/`splitStatements` (both concurrent builds run
/// outside a transaction, or the rehearsal would fail), the Oracle-only
/// changeset left out, rollback lines and blocks never run, `/` lines
/// ending the function and trigger statements. Rehearsed: no error.
fn liquibase_changesets_in_path_order_with_their_modes(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("liquibase-workshop"))?;
    expect_read(
        &catalog,
        Layout::Liquibase,
        &[
            (
                "changes/001_workshop.sql::workshop-1::ana",
                "changes/001_workshop.sql",
                false,
            ),
            (
                "changes/001_workshop.sql::workshop-2::ana",
                "changes/001_workshop.sql",
                false,
            ),
            (
                "changes/002_parts.sql::parts-1::bo",
                "changes/002_parts.sql",
                false,
            ),
            (
                "changes/002_parts.sql::parts-2::bo",
                "changes/002_parts.sql",
                true,
            ),
            (
                "changes/002_parts.sql::parts-3::bo",
                "changes/002_parts.sql",
                true,
            ),
            (
                "changes/003_tickets.sql::tickets-1::cy",
                "changes/003_tickets.sql",
                false,
            ),
            (
                "changes/003_tickets.sql::tickets-2::cy",
                "changes/003_tickets.sql",
                false,
            ),
        ],
    )?;
    let executions: Vec<Execution> = catalog.migrations().iter().map(|m| m.execution).collect();
    ensure!(
        executions[3] == Execution::Autocommit && executions[4] == Execution::SimpleQuery,
        "{executions:?}"
    );
    for m in catalog.migrations() {
        ensure!(
            !m.sql.contains("DROP") && !m.sql.contains("ONLINE") && !m.sql.contains("precondition"),
            "{} runs what Liquibase does not:\n{}",
            m.label,
            m.sql
        );
    }
    let trigger = &catalog.migrations()[5];
    let split = rollsafe::sql::split(&trigger.sql);
    ensure!(
        split.exact && split.statements.len() == 2,
        "{} statements in {}",
        split.statements.len(),
        trigger.label
    );
    rehearse_clean(env, catalog)
}

/// A plain `CREATE INDEX` on a table with rows, in a changeset:
/// `locks.blocking-index-build` on that changeset, and no other error.
fn liquibase_plain_index_on_rows_is_a_locks_error(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&fixture("liquibase-blocking-index"))?;
    let report = Verify::new(catalog)?.rows(ROWS).run(&env.sandbox)?;
    let errors: Vec<(Option<i32>, String)> = report
        .errors()
        .map(|f| (f.migration, f.id.clone()))
        .collect();
    ensure!(
        errors == [(Some(2), "locks.blocking-index-build".to_string())],
        "errors: {errors:?}"
    );
    let label = &report
        .migrations
        .iter()
        .find(|m| m.version == 2)
        .context("migration 2 not in the report")?
        .label;
    ensure!(label == "changelog.sql::2::ana", "labelled {label}");
    Ok(())
}

/// Liquibase's `databasechangelog` as Liquibase creates it on PostgreSQL.
const DATABASECHANGELOG: &str = "CREATE TABLE databasechangelog (
    id varchar(255) NOT NULL, author varchar(255) NOT NULL, filename varchar(255) NOT NULL,
    dateexecuted timestamp NOT NULL, orderexecuted integer NOT NULL, exectype varchar(10) NOT NULL,
    md5sum varchar(35), description varchar(255), comments varchar(255), tag varchar(255),
    liquibase varchar(20), contexts varchar(255), labels varchar(255), deployment_id varchar(10))";

/// `status` reads `databasechangelog` rows recorded under the path the
/// master changelog included the files by (`classpath:db/changelog/…`),
/// `MARK_RAN` counting as run; `migrate` refuses to write Liquibase's
/// table. `--since` takes a changeset's label, its file (the file's last
/// changeset), the file's stem and its path.
fn liquibase_status_reads_its_changelog_table_and_since_every_spelling(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = fixture("liquibase-workshop");
    let db = env.fresh_database();
    let url = db.url();
    let mut c = db.connect()?;
    c.batch_execute(DATABASECHANGELOG)?;
    for (n, (file, id, author, exectype)) in [
        ("001_workshop.sql", "workshop-1", "ana", "EXECUTED"),
        ("001_workshop.sql", "workshop-2", "ana", "EXECUTED"),
        ("002_parts.sql", "parts-1", "bo", "MARK_RAN"),
    ]
    .into_iter()
    .enumerate()
    {
        c.execute(
            "INSERT INTO databasechangelog (id, author, filename, dateexecuted, orderexecuted, exectype, md5sum, liquibase, deployment_id)
             VALUES ($1, $2, $3, now(), $4, $5, '9:0d4c2e3f', '4.29.2', '1733470000')",
            &[&id, &author, &format!("classpath:db/changelog/changes/{file}"), &(n as i32 + 1), &exectype],
        )?;
    }
    let (code, out, err) = rollsafe_cli(&["status", "--database-url", url], &dir)?;
    eprintln!("journal_layouts: liquibase status:\n{out}");
    ensure!(
        code == 0
            && out.contains("changes/001_workshop.sql::workshop-2::ana applied")
            && out.contains("changes/002_parts.sql::parts-1::bo applied")
            && out.contains("changes/002_parts.sql::parts-2::bo pending"),
        "status exit {code}: {out}{err}"
    );
    let (code, out, err) = rollsafe_cli(&["migrate", "--database-url", url], &dir)?;
    eprintln!("journal_layouts: liquibase migrate: exit {code}: {err}");
    ensure!(
        code == 2 && err.lines().count() == 1,
        "migrate exit {code}: {out}{err}"
    );
    let runs = |since: &str| -> anyhow::Result<String> {
        let (code, out, err) = rollsafe_cli(&["verify", "--static-only", "--since", since], &dir)?;
        ensure!(code == 0, "--since {since}: exit {code}: {out}{err}");
        Ok(out)
    };
    let out = runs("changes/002_parts.sql::parts-1::bo")?;
    ensure!(
        out.contains("changes/002_parts.sql::parts-2::bo changes/002_parts.sql")
            && !out.contains("parts-1::bo changes"),
        "--since a label: {out}"
    );
    for since in ["002_parts.sql", "002_parts", "changes/002_parts.sql"] {
        let out = runs(since)?;
        ensure!(
            out.contains("changes/003_tickets.sql::tickets-1::cy changes/003_tickets.sql")
                && !out.contains("parts-3::bo changes"),
            "--since {since}: {out}"
        );
    }
    Ok(())
}

/// A YAML master changelog orders the files as Liquibase runs them, not
/// by path: `bench-1.0.sql` before `bench-1.0.1.sql` (which alters its
/// table), an `includeAll` folder by path with its plain SQL file as one
/// `raw::includeAll` changeset, then an XML changelog whose changeSet
/// Liquibase generates (listed, not run). The formatted file no changelog
/// includes (it drops the table) is not run. `rollsafe verify` passes.
fn liquibase_master_changelog_orders_the_files(_env: &TestEnv) -> anyhow::Result<()> {
    let dir = fixture("liquibase-master");
    let catalog = Catalog::from_dir(&dir)?;
    expect_read(
        &catalog,
        Layout::Liquibase,
        &[
            ("bench-1.0.sql::bench-1::ana", "bench-1.0.sql", false),
            ("bench-1.0.1.sql::bench-2::ana", "bench-1.0.1.sql", false),
            ("later/a_tools.sql::tools-1::bo", "later/a_tools.sql", false),
            (
                "later/b_tool_kinds.sql::raw::includeAll",
                "later/b_tool_kinds.sql",
                false,
            ),
            ("extras.xml::bench-notes::cy", "extras.xml", false),
        ],
    )?;
    let runnable: Vec<bool> = catalog
        .migrations()
        .iter()
        .map(|m| m.not_runnable.is_none())
        .collect();
    ensure!(runnable == [true, true, true, true, false], "{runnable:?}");
    let (code, out, err) = rollsafe_cli(&["verify", "--rows", "1000"], &dir)?;
    eprintln!("journal_layouts: verify on the master changelog's folder:\n{err}");
    ensure!(
        code == 0
            && out.contains("PASSED: 0 error(s)")
            && err.contains(
                "1 Liquibase changelog(s) (their include order read): db.changelog-master.yaml"
            )
            && err.contains("ignored, not migrations its tool runs: draft.sql"),
        "exit {code}: {err}{out}"
    );
    Ok(())
}

//! Every schema and table kind: a project whose tables live outside
//! `public`, in a partitioned table and behind a materialized view is
//! rehearsed like any other. Each hazard is an error with its evidence,
//! each safe counterpart passes with zero errors. The projects have no
//! apps, so the catalogue generator seeds every table (through the parent
//! of a partitioned one).

use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Context};
use rollsafe::app::load_dir;
use rollsafe::app::replay;
use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::report::{Finding, Report, Severity};
use rollsafe::verify::checks::compat;
use rollsafe::verify::evidence::Labels;

use crate::common::{cli, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    crate::trials!(
        "schemas",
        env,
        [
            hazards_outside_public_and_on_a_partitioned_table_are_errors,
            safe_counterparts_pass_with_zero_errors,
            table_rows_naming_no_table_is_exit_2_naming_it,
            an_apps_lock_on_a_partitioned_table_counts_on_each_partition_and_typmods_show,
            a_table_whose_name_needs_quotes_is_measured_for_squawks_warning,
        ]
    )
}

const ROWS: u64 = 1000;

/// Tables in two schemas of their own: `sales.orders` (ordinary) and
/// `audit.events` (hash-partitioned in two), and a materialized view over
/// the orders.
const BASE: &str = "CREATE SCHEMA sales;
CREATE TABLE sales.orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer text NOT NULL,
    total numeric(12,2) NOT NULL
);
CREATE SCHEMA audit;
CREATE TABLE audit.events (id bigint NOT NULL, kind text NOT NULL, PRIMARY KEY (id))
    PARTITION BY HASH (id);
CREATE TABLE audit.events_0 PARTITION OF audit.events FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE audit.events_1 PARTITION OF audit.events FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE MATERIALIZED VIEW sales.customer_totals AS
    SELECT customer, count(*) AS orders FROM sales.orders GROUP BY customer;
";

/// A project directory: `BASE` as V1, then `later` as V2, V3, …
fn project(later: &[&str]) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("V1__base.sql"), BASE)?;
    for (i, sql) in later.iter().enumerate() {
        std::fs::write(dir.path().join(format!("V{}__step.sql", i + 2)), sql)?;
    }
    Ok(dir)
}

fn rehearse(env: &TestEnv, dir: &Path) -> anyhow::Result<Report> {
    Ok(shipped::verify(Catalog::from_dir(dir)?)?
        .rows(ROWS)
        .run(&env.sandbox)?)
}

fn line(f: &Finding) -> String {
    format!(
        "V{} {} {}: {}",
        f.migration.unwrap_or(0),
        f.severity,
        f.id,
        f.message
    )
}

fn errors(r: &Report) -> Vec<String> {
    r.errors().map(line).collect()
}

fn error_of<'r>(r: &'r Report, v: i32, id: &str) -> anyhow::Result<&'r Finding> {
    r.findings
        .iter()
        .find(|f| f.id == id && f.migration == Some(v) && f.severity == Severity::Error)
        .with_context(|| format!("no error {id} on V{v}; errors: {:#?}", errors(r)))
}

fn hazards_outside_public_and_on_a_partitioned_table_are_errors(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = project(&[
        "CREATE INDEX orders_customer ON sales.orders (customer);",
        "ALTER TABLE sales.orders ALTER COLUMN total TYPE numeric(12,4);",
        "CREATE INDEX events_kind ON audit.events (kind);",
        "REFRESH MATERIALIZED VIEW sales.customer_totals;",
    ])?;
    let r = rehearse(env, dir.path())?;
    for f in r.errors() {
        eprintln!("{}", line(f));
    }
    ensure!(!r.passed);
    // No table unseeded: the generator reached every schema, and the
    // partitioned table through its parent.
    let unseeded: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.id == "rewrite.table-not-seeded")
        .map(line)
        .collect();
    ensure!(unseeded.is_empty(), "{unseeded:#?}");

    // V2: a blocking index build outside public, named with its schema.
    let f = error_of(&r, 2, "locks.blocking-index-build")?;
    ensure!(f.evidence["table"] == "sales.orders", "{:?}", f.evidence);
    ensure!(f.evidence["rows"] == ROWS as i64, "{:?}", f.evidence);
    ensure!(
        f.message.contains("on sales.orders (1000 rows)")
            && f.message.contains("SHARE on sales.orders"),
        "{}",
        f.message
    );

    // V3: a type change that rewrites the table.
    let f = error_of(&r, 3, "rewrite.table-rewritten")?;
    ensure!(f.evidence["table"] == "sales.orders", "{:?}", f.evidence);
    ensure!(
        f.evidence["relfilenode_changed"] == true,
        "{:?}",
        f.evidence
    );
    ensure!(f.message.contains("rewrites sales.orders"), "{}", f.message);

    // V4: a plain CREATE INDEX on the partitioned parent builds on every
    // partition under SHARE: one error, on the parent, naming them.
    let builds: Vec<&Finding> = r
        .errors()
        .filter(|f| f.id == "locks.blocking-index-build" && f.migration == Some(4))
        .collect();
    ensure!(
        builds.len() == 1,
        "{:#?}",
        builds.iter().map(|f| line(f)).collect::<Vec<_>>()
    );
    let f = builds[0];
    ensure!(f.evidence["table"] == "audit.events", "{:?}", f.evidence);
    ensure!(
        f.evidence["partitions"] == "audit.events_0, audit.events_1",
        "{:?}",
        f.evidence
    );
    ensure!(f.evidence["rows"] == ROWS as i64, "{:?}", f.evidence);
    ensure!(
        f.message.contains("SHARE on audit.events_0")
            && f.message.contains("SHARE on audit.events_1"),
        "{}",
        f.message
    );

    // V5: refreshing a materialized view scans its source and rewrites
    // it under ACCESS EXCLUSIVE: its readers wait. (The finding is about
    // the largest table whose work grows: the scanned source or the view.)
    let f = r
        .errors()
        .find(|f| f.migration == Some(5) && f.check == "rewrite")
        .with_context(|| format!("no rewrite error on V5: {:#?}", errors(&r)))?;
    ensure!(
        f.message
            .contains("ACCESS EXCLUSIVE on sales.customer_totals"),
        "{}",
        f.message
    );
    Ok(())
}

fn safe_counterparts_pass_with_zero_errors(env: &TestEnv) -> anyhow::Result<()> {
    let dir = project(&[
        "-- rollsafe:no-transaction\n\
         CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_customer ON sales.orders (customer);",
        // A larger precision, same scale: catalogue only.
        "ALTER TABLE sales.orders ALTER COLUMN total TYPE numeric(14,2);",
        "ALTER TABLE audit.events ADD COLUMN note text;",
        // Added for the next migration to validate: a warning, not a gate.
        "ALTER TABLE sales.orders ADD CONSTRAINT total_nonneg CHECK (total >= 0) NOT VALID;",
    ])?;
    let r = rehearse(env, dir.path())?;
    for f in r.findings.iter().filter(|f| f.severity != Severity::Info) {
        eprintln!("{}", line(f));
    }
    ensure!(
        r.passed && r.errors().count() == 0,
        "expected no errors: {:#?}",
        errors(&r)
    );
    let measured = |v: i32, id: &str| {
        r.findings
            .iter()
            .find(|f| f.id == id && f.migration == Some(v))
            .with_context(|| format!("no {id} on V{v}"))
    };
    // Widening was measured on rows, and kept the file.
    let w = measured(3, "rewrite.measured")?;
    ensure!(
        w.evidence["rows_in_existing_tables"].as_i64() >= Some(ROWS as i64)
            && w.evidence["tables_rewritten"] == 0,
        "{:?}",
        w.evidence
    );
    // The partitioned table's new column: metadata only, its partitions
    // locked with it and nothing rewritten.
    let l = measured(4, "locks.measured")?;
    ensure!(
        l.message.contains("audit.events: AccessExclusiveLock")
            && l.message.contains("audit.events_0: AccessExclusiveLock"),
        "{}",
        l.message
    );
    ensure!(
        measured(4, "rewrite.measured")?.evidence["tables_rewritten"] == 0,
        "{:?}",
        measured(4, "rewrite.measured")?.evidence
    );
    // The NOT VALID constraint left at the end: a warning with the advice.
    let nv = r
        .findings
        .iter()
        .find(|f| f.id == "post.not-valid-constraint")
        .context("no post.not-valid-constraint")?;
    ensure!(nv.severity == Severity::Warn, "{}", line(nv));
    ensure!(
        nv.evidence["constraints"] == serde_json::json!(["sales.orders.total_nonneg"]),
        "{:?}",
        nv.evidence
    );
    ensure!(
        nv.advice.contains("validate it in a later migration"),
        "{}",
        nv.advice
    );
    Ok(())
}

fn table_rows_naming_no_table_is_exit_2_naming_it(env: &TestEnv) -> anyhow::Result<()> {
    let dir = project(&["ALTER TABLE audit.events ADD COLUMN note text;"])?;
    let run = |sizes: &str| -> anyhow::Result<(i32, String)> {
        let out = cli()
            .args(["verify", "--postgres", env.sandbox.admin_url()])
            .args(["--rows", "200", "--migrations"])
            .arg(dir.path())
            .args(["--table-rows", sizes])
            .output()?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    let (code, stderr) = run("sales.ordrs=48M")?;
    ensure!(code == 2, "exit {code}: {stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("--table-rows"))
        .collect();
    ensure!(
        lines.len() == 1 && lines[0].contains("sales.ordrs") && lines[0].contains("sales.orders"),
        "{stderr}"
    );
    // The same table spelled right (public. optional) runs.
    let (code, stderr) = run("sales.orders=48M")?;
    ensure!(code == 0, "exit {code}: {stderr}");
    Ok(())
}

/// The replay (what decides which locks block an app) attributes a read
/// through a partitioned table to each partition, and reads result types
/// with their modifiers, so a narrowed or widened column shows.
fn an_apps_lock_on_a_partitioned_table_counts_on_each_partition_and_typmods_show(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let migrations = project(&[])?;
    let catalog = Catalog::from_dir(migrations.path())?;
    let apps_dir = tempfile::tempdir()?;
    std::fs::write(
        apps_dir.path().join("reports.sql"),
        "-- app: reports\n-- needs: 1\n\n\
         -- name: event_by_id\n-- param: $1 = 7\n\
         SELECT id, kind FROM audit.events WHERE id = $1::bigint;\n\n\
         -- name: order_total\n\
         SELECT customer, total FROM sales.orders ORDER BY id LIMIT 1;\n",
    )?;
    let app = load_dir(apps_dir.path(), &catalog)?
        .pop()
        .context("no app")?;
    let db = env.fresh_database();
    let mut c = db.connect()?;
    c.batch_execute(BASE)?;
    let before = replay::replay_all(&mut c, &app)?;
    let event = before
        .iter()
        .find(|o| o.statement == "event_by_id")
        .context("no event_by_id")?;
    ensure!(event.failure.is_none(), "{:?}", event.failure);
    for table in ["audit.events", "audit.events_0", "audit.events_1"] {
        ensure!(
            event
                .locks
                .contains(&(table.to_string(), "AccessShareLock".to_string())),
            "{table}: {:?}",
            event.locks
        );
    }
    let order = before
        .iter()
        .find(|o| o.statement == "order_total")
        .context("no order_total")?;
    ensure!(
        order.columns
            == [
                ("customer".to_string(), "text".to_string()),
                ("total".to_string(), "numeric(12,2)".to_string())
            ],
        "{:?}",
        order.columns
    );
    // Only the modifier changes: visible, as a warning.
    c.batch_execute("ALTER TABLE sales.orders ALTER COLUMN total TYPE numeric(14,2)")?;
    let after = replay::replay_all(&mut c, &app)?;
    let f = compat::type_changes(2, &app, 1, &before, &after, &Labels::ORDINALS);
    ensure!(f.len() == 1, "{f:?}");
    ensure!(
        f[0].id == "compat.result-type-modifier-changed" && f[0].severity == Severity::Warn,
        "{}",
        line(&f[0])
    );
    ensure!(
        f[0].evidence["type_before"] == "numeric(12,2)"
            && f[0].evidence["type_after"] == "numeric(14,2)",
        "{:?}",
        f[0].evidence
    );
    Ok(())
}

/// A table named by a reserved word (`"user"`, which PostgreSQL prints in
/// quotes) is the table squawk's warning names (`user`, unquoted): the
/// blocking index build on it is the measured error and squawk's warning
/// is confirmed by it. It was "refuted: user is created in this
/// migration", beside the error on the same line.
fn a_table_whose_name_needs_quotes_is_measured_for_squawks_warning(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("V1__members.sql"),
        "CREATE TABLE \"user\" (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, nick text NOT NULL);\n",
    )?;
    std::fs::write(
        dir.path().join("V2__member_tokens.sql"),
        "ALTER TABLE \"user\" ADD COLUMN token text;\nCREATE UNIQUE INDEX member_token ON \"user\" (token);\n",
    )?;
    let report = rollsafe::verify::Verify::new(Catalog::from_dir(dir.path())?)?
        .rows(200)
        .run(&env.sandbox)?;
    let on_v2 = |id: &str| -> Option<&Finding> {
        report
            .findings
            .iter()
            .find(|f| f.migration == Some(2) && f.id == id)
    };
    let built = on_v2("locks.blocking-index-build").context("no blocking-index-build on V2")?;
    ensure!(built.severity == Severity::Error, "{built:?}");
    let squawk = on_v2("static.require-concurrent-index-creation")
        .with_context(|| format!("no squawk finding: {:#?}", report.findings))?;
    ensure!(
        squawk
            .message
            .starts_with("confirmed by locks.blocking-index-build"),
        "{}",
        squawk.message
    );
    Ok(())
}

//! `rollsafe check` tests: a database migrated by rollsafe passes under a
//! read-only role; every kind of drift is reported; bad input is a clear
//! one-line error.

use std::sync::Arc;

use anyhow::{ensure, Context};
use postgres::Client;
use rollsafe::dao::current::CurrentDao;
use rollsafe::dao::legacy::LegacyDao;
use rollsafe::dao::AttachRequest;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common::{cli, fingerprint, ReadOnlyRole, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    crate::trials!(
        "check",
        env,
        [
            migrated_database_passes_under_a_read_only_role,
            column_changed_by_hand_is_reported_with_a_diff,
            invalid_index_is_reported,
            index_on_another_ones_leading_columns_is_info,
            not_valid_constraint_is_reported,
            stuck_not_ready_row_is_reported_with_its_id,
            legacy_row_left_not_ready_is_an_error,
            edited_migration_is_reported,
            pending_migration_is_a_warning_and_older_schema_is_derived,
            junit_report_carries_the_failures,
            unreachable_or_wrong_password_is_a_clear_error,
            a_changed_flyway_repeatable_is_a_pending_rerun_with_its_message,
        ]
    )
}

const RECORD_COUNTER: &str = "ccf2e3ba-633e-43ba-9394-46b0c54c61e3";

/// Runs `rollsafe check` on `url` (expected schemas built on the suite's
/// own server when needed); returns (exit code, JSON report or Null, stderr).
fn run_check(env: &TestEnv, url: &str, extra: &[&str]) -> anyhow::Result<(i32, Value, String)> {
    let out = cli()
        .args(["check", "--database-url", url, "--format", "json"])
        .args(["--postgres", env.sandbox.admin_url()])
        .args(extra)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    Ok((out.status.code().unwrap_or(-1), report, stderr))
}

fn findings<'a>(report: &'a Value, id: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .map(|a| a.iter().filter(|f| f["id"] == id).collect())
        .unwrap_or_default()
}

fn the_finding<'a>(report: &'a Value, id: &str) -> anyhow::Result<&'a Value> {
    findings(report, id)
        .into_iter()
        .next()
        .with_context(|| format!("no finding {id} in {report:#}"))
}

fn input_collection(c: &mut Client) -> anyhow::Result<(Uuid, Uuid)> {
    let (id, database_id) = (Uuid::new_v4(), Uuid::new_v4());
    c.execute(
        "INSERT INTO collections (id, name, tenant_id, database_id) VALUES ($1, 'input', 't', $2)",
        &[&id, &database_id],
    )?;
    Ok((id, database_id))
}

fn request(name: &str, input: (Uuid, Uuid)) -> AttachRequest {
    AttachRequest {
        name: name.to_string(),
        tenant_id: "t".into(),
        database_id: input.1,
        input_collection_id: input.0,
        output_collection_name: format!("{name}_output"),
        function_id: RECORD_COUNTER.parse().unwrap(),
        function_params: json!({}),
        min_records_for_invocation: 100,
    }
}

fn migrated_database_passes_under_a_read_only_role(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let input = input_collection(&mut c)?;
    CurrentDao::new(&mut c).attach(&request("ready_one", input))?;
    let before = fingerprint(&mut c)?;
    let role = ReadOnlyRole::create(env, &db)?;

    let (code, report, stderr) = run_check(env, &role.url, &[])?;
    ensure!(code == 0, "exit {code}: {stderr}\n{report:#}");
    ensure!(report["passed"] == true);
    ensure!(report["tool"] == "rollsafe check");
    for id in [
        "history.summary",
        "schema.as-expected",
        "invariants.backfill-holds",
        "invariants.no-stuck-rows",
        "invariants.indexes-valid",
        "invariants.constraints-validated",
    ] {
        the_finding(&report, id)?;
    }
    ensure!(
        the_finding(&report, "schema.as-expected")?["evidence"]["tables_compared"] == 3,
        "{report:#}"
    );
    ensure!(fingerprint(&mut c)? == before, "check changed the database");
    ensure!(
        !format!("{report}{stderr}").contains("ReadOnlyPw1"),
        "password printed"
    );
    Ok(())
}

fn column_changed_by_hand_is_reported_with_a_diff(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    c.batch_execute(
        "ALTER TABLE attached_functions ALTER COLUMN min_records_for_invocation SET DEFAULT 7;
         ALTER TABLE attached_functions ALTER COLUMN last_run SET NOT NULL;",
    )?;
    let (code, report, stderr) = run_check(env, db.url(), &[])?;
    ensure!(code == 1, "exit {code}: {stderr}");
    ensure!(report["passed"] == false);
    let drift = the_finding(&report, "schema.drift")?;
    ensure!(drift["severity"] == "error" && drift["migration"] == 3);
    let diffs = drift["evidence"]["differences"].to_string();
    ensure!(
        diffs.contains("min_records_for_invocation") && diffs.contains("last_run"),
        "diff does not name both columns: {diffs}"
    );
    ensure!(!drift["advice"].as_str().unwrap_or("").is_empty());
    Ok(())
}

/// The shipped V2 indexes `input_collection_id` on its own, though the
/// unique `(input_collection_id, name)` leads with it: named, as info.
fn index_on_another_ones_leading_columns_is_info(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let (code, report, stderr) = run_check(env, db.url(), &[])?;
    ensure!(code == 0, "exit {code}: {stderr}");
    let found = findings(&report, "invariants.duplicate-index");
    ensure!(found.len() == 1, "{found:#?}");
    let f = found[0];
    ensure!(f["severity"] == "info", "{f}");
    ensure!(
        f["evidence"]["index"] == "attached_functions_input_collection_id"
            && f["message"].as_str().unwrap_or_default().contains(
                "duplicates the leading columns of attached_functions_input_collection_id_name_key (input_collection_id, name)"
            ),
        "{f}"
    );
    Ok(())
}

fn invalid_index_is_reported(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    input_collection(&mut c)?;
    input_collection(&mut c)?; // same name, other database: breaks a unique index on name
    let failed = c.batch_execute(
        "CREATE UNIQUE INDEX CONCURRENTLY collections_name_unique ON collections (name)",
    );
    ensure!(
        failed.is_err(),
        "the concurrent build should fail on duplicates"
    );
    let (code, report, stderr) = run_check(env, db.url(), &[])?;
    ensure!(code == 1, "exit {code}: {stderr}");
    let f = the_finding(&report, "invariants.invalid-index")?;
    ensure!(
        f["evidence"]["indexes"] == json!(["collections.collections_name_unique"]),
        "{f:#}"
    );
    Ok(())
}

fn not_valid_constraint_is_reported(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    c.batch_execute(
        "ALTER TABLE attached_functions ADD CONSTRAINT attempts_non_negative CHECK (current_attempts >= 0) NOT VALID",
    )?;
    let (code, report, stderr) = run_check(env, db.url(), &[])?;
    ensure!(code == 1, "exit {code}: {stderr}");
    let f = the_finding(&report, "invariants.not-valid-constraint")?;
    ensure!(
        f["evidence"]["constraints"] == json!(["attached_functions.attempts_non_negative"]),
        "{f:#}"
    );
    Ok(())
}

fn stuck_not_ready_row_is_reported_with_its_id(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let input = input_collection(&mut c)?;
    let mut dao = CurrentDao::new(&mut c);
    let old = dao.insert_not_ready(&request("crashed_long_ago", input))?;
    let recent = dao.insert_not_ready(&request("in_flight", input))?;
    let ready = dao.attach(&request("done", input))?;
    drop(dao);
    // V3 went out three hours ago; the crashed create and the finished one
    // happened two hours ago, after it.
    c.batch_execute(
        "UPDATE refinery_schema_history SET applied_on = \
         to_char((now() - interval '3 hours') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"') \
         WHERE version = 3",
    )?;
    c.execute(
        "UPDATE attached_functions SET created_at = now() - interval '2 hours' WHERE id = ANY($1)",
        &[&vec![old.attached.id, ready.id]],
    )?;
    let (code, report, stderr) = run_check(env, db.url(), &["--stuck-after", "1h"])?;
    ensure!(
        code == 0,
        "a stuck row is a warning, not an error: exit {code}: {stderr}"
    );
    let f = the_finding(&report, "invariants.stuck-not-ready")?;
    ensure!(f["severity"] == "warn");
    ensure!(
        f["evidence"]["ids"] == json!([old.attached.id.to_string()]),
        "only the old not-ready row is stuck (not {} nor the ready one): {f:#}",
        recent.attached.id
    );
    // With a shorter bound nothing new is stuck: the recent row is seconds old.
    let (_, report, _) = run_check(env, db.url(), &["--stuck-after", "30m"])?;
    ensure!(the_finding(&report, "invariants.stuck-not-ready")?["evidence"]["stuck"] == 1);
    Ok(())
}

fn legacy_row_left_not_ready_is_an_error(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(2);
    let mut c = db.connect()?;
    let input = input_collection(&mut c)?;
    let legacy = LegacyDao::new(&mut c).create(&request("from_before_v3", input))?;
    let catalog = rollsafe::catalog::Catalog::embedded()?;
    rollsafe::migrate::migrate(db.url(), &catalog, &rollsafe::migrate::Options::default())?;
    let (code, report, _) = run_check(env, db.url(), &[])?;
    ensure!(
        code == 0,
        "freshly migrated legacy rows are ready: {report:#}"
    );
    // What a `DEFAULT false` migration would have left behind.
    c.execute(
        "UPDATE attached_functions SET is_ready = false WHERE id = $1",
        &[&legacy],
    )?;
    let (code, report, stderr) = run_check(env, db.url(), &[])?;
    ensure!(code == 1, "exit {code}: {stderr}");
    let f = the_finding(&report, "invariants.backfill-violated")?;
    ensure!(
        f["migration"] == 3 && f["evidence"]["ids"] == json!([legacy.to_string()]),
        "{f:#}"
    );
    ensure!(f["message"].as_str().unwrap().contains("is_ready = true"));
    Ok(())
}

fn edited_migration_is_reported(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let dir = tempfile::tempdir()?;
    let catalog = rollsafe::catalog::Catalog::embedded()?;
    for m in catalog.migrations() {
        let sql = if m.version == 2 {
            m.sql.replace("DEFAULT 100", "DEFAULT 50")
        } else {
            m.sql.clone()
        };
        std::fs::write(dir.path().join(&m.file), sql)?;
    }
    let (code, report, stderr) = run_check(
        env,
        db.url(),
        &["--migrations", dir.path().to_str().unwrap()],
    )?;
    ensure!(code == 1, "exit {code}: {stderr}");
    let f = the_finding(&report, "history.divergent")?;
    ensure!(f["migration"] == 2, "{f:#}");
    let msg = f["message"].as_str().unwrap();
    ensure!(
        msg.contains("V2__attached_functions.sql") && msg.contains("edited after it was applied"),
        "{msg}"
    );
    ensure!(the_finding(&report, "schema.not-compared")?["severity"] == "warn");
    Ok(())
}

fn pending_migration_is_a_warning_and_older_schema_is_derived(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(2);
    let (code, report, stderr) = run_check(env, db.url(), &[])?;
    ensure!(code == 0, "exit {code}: {stderr}\n{report:#}");
    let pending = the_finding(&report, "history.pending")?;
    ensure!(pending["severity"] == "warn" && pending["migration"] == 3);
    let schema = the_finding(&report, "schema.as-expected")?;
    ensure!(schema["migration"] == 2);
    ensure!(
        schema["evidence"]["reference"]
            .as_str()
            .unwrap()
            .starts_with("V1..V2 applied in"),
        "V2's schema is built from the migrations: {schema:#}"
    );
    // No readiness yet, so no readiness invariants to check.
    ensure!(findings(&report, "invariants.no-stuck-rows").is_empty());
    Ok(())
}

fn junit_report_carries_the_failures(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    db.connect()?.batch_execute(
        "ALTER TABLE attached_functions ADD CONSTRAINT name_not_empty CHECK (name <> '') NOT VALID",
    )?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("check.xml");
    let out = cli()
        .args(["check", "--database-url", db.url(), "--format", "junit"])
        .args(["--output", path.to_str().unwrap()])
        .output()?;
    ensure!(out.status.code() == Some(1));
    let xml = std::fs::read_to_string(&path)?;
    for suite in ["history", "schema", "invariants"] {
        ensure!(
            xml.contains(&format!("<testsuite name=\"{suite}\"")),
            "{suite} missing: {xml}"
        );
    }
    ensure!(
        xml.contains("<failure") && xml.contains("name_not_empty"),
        "{xml}"
    );
    // The log still shows the findings as text.
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(text.contains("not-valid-constraint"), "{text}");
    Ok(())
}

fn unreachable_or_wrong_password_is_a_clear_error(env: &TestEnv) -> anyhow::Result<()> {
    let mut wrong = url::Url::parse(env.sandbox.admin_url())?;
    wrong.set_password(Some("NotThePw9")).unwrap();
    for (url, expect) in [
        (
            "postgres://app:NotThePw9@127.0.0.1:1/app",
            "check that the server runs",
        ),
        (wrong.as_str(), "password authentication failed"),
    ] {
        let (code, report, stderr) = run_check(env, url, &[])?;
        ensure!(code == 2 && report.is_null(), "exit {code}: {stderr}");
        ensure!(stderr.contains(expect), "unclear: {stderr}");
        ensure!(stderr.trim().lines().count() == 1, "not one line: {stderr}");
        ensure!(!stderr.contains("NotThePw9"), "password leaked: {stderr}");
    }
    Ok(())
}

/// A Flyway history whose repeatable changed since it ran: `check` says
/// so in words (Flyway runs it again), a warning like any pending work.
fn a_changed_flyway_repeatable_is_a_pending_rerun_with_its_message(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = crate::common::repo_root().join("tests/fixtures/layouts/flyway");
    let (flyway, db) = crate::layouts::flyway_fixture_with_empty_history(env)?;
    let mut c = db.connect()?;
    // The history as Flyway writes it, the repeatable's checksum from an
    // earlier text of the file.
    for (rank, m) in flyway.migrations().iter().enumerate() {
        c.batch_execute(&m.sql)?;
        let recorded: i32 = m.tool_checksum.as_deref().context("a checksum")?.parse()?;
        let version = (!m.repeatable).then(|| m.key.clone());
        c.execute(
            "INSERT INTO flyway_schema_history VALUES ($1, $2, $3, 'SQL', $4, $5, 'flyway', now(), 1, true)",
            &[&(rank as i32 + 1), &version, &m.name, &m.file, &(recorded ^ i32::from(m.repeatable))],
        )?;
    }
    let migrations = dir.to_str().context("path")?;
    let (code, report, stderr) = run_check(
        env,
        db.url(),
        &["--migrations", migrations, "--placeholder", "team=payments"],
    )?;
    let f = the_finding(&report, "history.pending-rerun")
        .with_context(|| format!("exit {code}: {stderr}"))?;
    let message = f["message"].as_str().unwrap_or_default();
    ensure!(
        f["severity"] == "warn"
            && message.starts_with(
                "R__order_totals_view (R__order_totals_view.sql) changed since it last ran"
            )
            && message.contains("runs it again"),
        "{f:#}"
    );
    Ok(())
}

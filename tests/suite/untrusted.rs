//! Input from people the pipeline does not trust (issue 22): directive SQL
//! with injected statements is refused with file and line before anything
//! runs; `check` bounds the backfill predicates it runs on production;
//! durations and counts outside their documented ranges are refused.

use std::sync::Arc;

use anyhow::ensure;
use serde_json::Value;

use crate::common::{cli, output, TestEnv};
use crate::verify::with_later;

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    crate::trials!(
        "untrusted",
        env,
        [
            directives_with_injected_sql_are_refused_with_file_and_line,
            check_reports_a_slow_backfill_predicate_as_skipped,
            out_of_range_flags_are_refused_in_one_line,
        ]
    )
}

/// Runs the binary; (exit code, stdout, stderr).
fn rollsafe(args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    output(cli().args(args))
}

fn directives_with_injected_sql_are_refused_with_file_and_line(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let cases = [
        (
            "-- rollsafe:backfill attached_functions is_ready; DROP TABLE functions\nSELECT 1;",
            1,
            "`;`",
        ),
        (
            "SELECT 1;\n-- rollsafe:backfill attached_functions id IN (WITH gone AS (DELETE FROM functions RETURNING id) SELECT id FROM gone)",
            2,
            "WITH",
        ),
        (
            "-- rollsafe:backfill attached_functions true) OR (true -- \nSELECT 1;",
            1,
            // The predicate is parsed alone: its stray `)` ends nothing.
            "not valid SQL there",
        ),
        (
            "-- rollsafe:no-transaction\n\n-- rollsafe:batched-update attached_functions SET attempts = 0 WHERE attempts IS NULL; COPY (SELECT 1) TO PROGRAM 'touch pwned'\nSELECT 1;",
            3,
            "`;`",
        ),
        (
            "-- rollsafe:batched-update attached_functions SET attempts = (WITH w AS (UPDATE functions SET name = 'x' RETURNING 1) SELECT 1 FROM w) WHERE attempts IS NULL\nSELECT 1;",
            1,
            "WITH",
        ),
    ];
    for (sql, line, why) in cases {
        let dir = with_later(&[sql]);
        let (code, stdout, stderr) = rollsafe(&[
            "verify",
            "--postgres",
            env.sandbox.admin_url(),
            "--migrations",
            dir.path().to_str().unwrap(),
        ])?;
        ensure!(code == 2, "{sql}: exit {code}: {stdout}{stderr}");
        let at = format!("V4__later_0.sql:{line}: malformed directive");
        ensure!(
            stderr.trim().lines().count() == 1 && stderr.contains(&at) && stderr.contains(why),
            "{sql}: {stderr}"
        );
        ensure!(stdout.is_empty(), "nothing rehearsed: {stdout}");
    }
    Ok(())
}

fn check_reports_a_slow_backfill_predicate_as_skipped(env: &TestEnv) -> anyhow::Result<()> {
    // A project whose V2 promises a predicate that takes 2 s per row.
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("V1__items.sql"),
        "CREATE TABLE items (id int PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());\n\
         INSERT INTO items VALUES (1, now() - interval '1 day');",
    )?;
    std::fs::write(
        dir.path().join("V2__slow_promise.sql"),
        "-- rollsafe:backfill items pg_sleep(2) IS NOT NULL\nCOMMENT ON TABLE items IS 'v2';",
    )?;
    let catalog = rollsafe::catalog::Catalog::from_dir(dir.path())?;
    let db = env.fresh_database();
    rollsafe::migrate::migrate(db.url(), &catalog, &Default::default())?;
    let migrations = dir.path().to_str().unwrap();
    let check = |timeout: &str| {
        rollsafe(&[
            "check",
            "--database-url",
            db.url(),
            "--postgres",
            env.sandbox.admin_url(),
            "--migrations",
            migrations,
            "--format",
            "json",
            "--statement-timeout",
            timeout,
        ])
    };
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = check("200ms")?;
    let took = started.elapsed();
    ensure!(code == 0, "exit {code}: {stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout)?;
    let skipped: Vec<&Value> = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["id"] == "invariants.backfill-not-checked")
        .collect();
    ensure!(skipped.len() == 1, "{report:#}");
    ensure!(
        skipped[0]["severity"] == "skipped"
            && skipped[0]["migration"] == 2
            && skipped[0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("within the statement timeout (200ms)")),
        "{:#}",
        skipped[0]
    );
    ensure!(
        !stdout.contains("backfill-holds"),
        "an unmeasured promise is never ok: {stdout}"
    );
    eprintln!("check with a 200ms statement timeout took {took:.1?}");
    // With time enough, the same promise is measured and holds.
    let (code, stdout, stderr) = check("10s")?;
    ensure!(code == 0, "exit {code}: {stdout}{stderr}");
    ensure!(
        stdout.contains("invariants.backfill-holds") && !stdout.contains("backfill-not-checked"),
        "{stdout}"
    );
    Ok(())
}

fn out_of_range_flags_are_refused_in_one_line(_env: &TestEnv) -> anyhow::Result<()> {
    let url = "postgres://nobody@127.0.0.1:1/none";
    let cases: &[(&[&str], &str)] = &[
        (
            &["verify", "--static-only", "--lock-timeout", "500000000000s"],
            "pass a duration from 10ms to 1m",
        ),
        (
            &["verify", "--static-only", "--lock-timeout", "1ms"],
            "pass a duration from 10ms to 1m",
        ),
        (
            &["verify", "--static-only", "--retry-for", "2d"],
            "pass a duration from 0s to 1day",
        ),
        (
            &["verify", "--static-only", "--stall-budget", "0s"],
            "pass a duration from 10ms to 10m",
        ),
        (
            &["verify", "--static-only", "--rows", "20000000"],
            "pass a count from 0 to 10000000",
        ),
        (
            &["verify", "--static-only", "--table-rows", "t=2000G"],
            "pass a count from 0 to 1000000000000",
        ),
        (
            &["migrate", "--database-url", url, "--migrator-wait", "48h"],
            "pass a duration from 0s to 1day",
        ),
        (
            &["migrate", "--database-url", url, "--batch-pause", "2m"],
            "pass a duration from 0s to 1m",
        ),
        (
            &["check", "--database-url", url, "--statement-timeout", "2h"],
            "pass a duration from 100ms to 1h",
        ),
        (
            &["check", "--database-url", url, "--stuck-after", "0s"],
            "pass a duration from 1s to 30days",
        ),
    ];
    for (args, range) in cases {
        let (code, stdout, stderr) = rollsafe(args)?;
        ensure!(code == 2, "{args:?}: exit {code}: {stdout}{stderr}");
        // One line says what is wrong and the range; the only other line
        // is clap's pointer to --help.
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        ensure!(
            lines.len() == 2
                && lines[0].starts_with("error: invalid value")
                && lines[0].contains("is out of range")
                && lines[0].contains(range)
                && lines[1] == "For more information, try '--help'.",
            "{args:?}: {stderr}"
        );
    }
    // rollsafe.toml's `rows` has --rows's range, refused with its line.
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("rollsafe.toml");
    std::fs::write(&config, "postgres = \"local\"\nrows = 50000000\n")?;
    let (code, _, stderr) = rollsafe(&[
        "verify",
        "--static-only",
        "--config",
        config.to_str().unwrap(),
    ])?;
    ensure!(code == 2, "exit {code}: {stderr}");
    ensure!(
        stderr.trim().lines().count() == 1
            && stderr.contains("rollsafe.toml:2: rows 50000000 is out of range"),
        "{stderr}"
    );
    Ok(())
}

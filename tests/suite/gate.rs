//! The gate a team keeps: nothing is called ok that was not checked (a
//! migration rollsafe cannot read or run is `skipped`, naming its file,
//! in every mode and every format).

use std::sync::Arc;

use anyhow::ensure;
use libtest_mimic::Trial;
use rollsafe::catalog::Catalog;
use rollsafe::report::{render, Format, Report, Severity};
use rollsafe::verify::Verify;

use crate::common::{self, cli, output, repo_root, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<Trial> {
    common::trials(
        "gate",
        env,
        &[
            (
                "a_go_migration_is_skipped_in_every_format_under_static_only",
                go_migration_skipped_static_only,
            ),
            (
                "a_go_migration_is_skipped_in_every_format_under_a_rehearsal",
                go_migration_skipped_rehearsed,
            ),
        ],
    )
}

/// A goose folder of our own (a ferry timetable): SQL, a Go migration,
/// SQL.
const GOOSE: &str = "tests/fixtures/gate/goose-ferries";
const GO_FILE: &str = "00002_load_sailings.go";

/// Every format of `report`, rendered.
fn every_format(report: &Report) -> Vec<(Format, String)> {
    Format::ALL
        .into_iter()
        .map(|f| (f, render(report, f)))
        .collect()
}

/// Each format names the Go file, as skipped, and the text report never
/// says `ok` on a line about it.
fn skipped_everywhere(report: &Report, ids: &[&str]) -> anyhow::Result<()> {
    let about_go: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.migration == Some(2))
        .collect();
    ensure!(
        !about_go.is_empty()
            && about_go
                .iter()
                .all(|f| f.severity == Severity::Skipped && f.message.contains(GO_FILE)),
        "{about_go:#?}"
    );
    let got: Vec<&str> = about_go.iter().map(|f| f.id.as_str()).collect();
    ensure!(got == ids, "{got:?}");
    ensure!(
        !report
            .findings
            .iter()
            .any(|f| f.id == "static.clean" && f.migration == Some(2)),
        "static.clean said of a Go file"
    );
    ensure!(report.count(Severity::Skipped) >= 1);
    for (format, text) in every_format(report) {
        ensure!(
            text.contains(GO_FILE),
            "{format} does not name {GO_FILE}:\n{text}"
        );
        let skipped_word = match format {
            Format::Text => "SKIP  static.not-read",
            Format::Json => "\"severity\": \"skipped\"",
            Format::Junit => "<skipped message=\"[static.not-read]",
            Format::Github => "::notice file=",
            Format::Markdown => "| skipped | `static.not-read`",
            Format::Gitlab => "\"check_name\": \"static.not-read\"",
        };
        ensure!(
            text.contains(skipped_word),
            "{format} lacks `{skipped_word}`:\n{text}"
        );
    }
    let text = render(report, Format::Text);
    let block = text
        .split(&format!("\n2 {GO_FILE}\n"))
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_default();
    ensure!(
        !block.is_empty() && !block.lines().any(|l| l.trim_start().starts_with("ok ")),
        "the Go file's block says ok:\n{block}"
    );
    Ok(())
}

/// `--static-only`, run as a new user runs it: the Go file is skipped
/// (not `static.clean`), counted, and the SQL files around it are linted.
fn go_migration_skipped_static_only(_: &TestEnv) -> anyhow::Result<()> {
    let (code, stdout, stderr) = output(cli().current_dir(repo_root()).args([
        "verify",
        "--static-only",
        "--migrations",
        GOOSE,
        "--format",
        "json",
    ]))?;
    ensure!(code == 0, "exit {code}: {stderr}");
    let report: Report = serde_json::from_str(&stdout)?;
    skipped_everywhere(&report, &["static.not-read"])?;
    let clean: Vec<Option<i32>> = report
        .findings
        .iter()
        .filter(|f| f.id == "static.clean")
        .map(|f| f.migration)
        .collect();
    ensure!(clean == [Some(1), Some(3)], "{clean:?}");
    let (_, text, _) = output(cli().current_dir(repo_root()).args([
        "verify",
        "--static-only",
        "--migrations",
        GOOSE,
    ]))?;
    ensure!(
        text.contains("PASSED: 0 error(s), 0 warning(s), 1 skipped"),
        "{text}"
    );
    Ok(())
}

/// A rehearsal: the Go file is skipped by static (squawk read nothing)
/// and by apply (nothing ran), the migration after it not rehearsed.
fn go_migration_skipped_rehearsed(env: &TestEnv) -> anyhow::Result<()> {
    let catalog = Catalog::from_dir(&repo_root().join(GOOSE))?;
    let report = Verify::new(catalog)?.rows(50).run(&env.sandbox)?;
    ensure!(report.passed, "{}", render(&report, Format::Text));
    skipped_everywhere(&report, &["static.not-read", "apply.not-runnable"])?;
    ensure!(
        report
            .findings
            .iter()
            .any(|f| f.id == "apply.not-rehearsed" && f.migration == Some(3)),
        "{}",
        render(&report, Format::Text)
    );
    Ok(())
}

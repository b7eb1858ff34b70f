//! The gate a team keeps: reviewed waivers (`-- rollsafe:accept` in a
//! migration, `[[accept]]` in rollsafe.toml) that accept a measured
//! finding with a reason, visible in every format; stale, expired and
//! reasonless waivers; and nothing called ok that was not checked (a
//! migration rollsafe cannot read or run is `skipped`, naming its file,
//! in every mode and every format).

use std::sync::Arc;

use anyhow::{ensure, Context};
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
            (
                "a_blocking_index_build_accepted_by_a_comment_passes_and_says_why_everywhere",
                accepted_by_comment,
            ),
            (
                "a_blocking_index_build_accepted_in_rollsafe_toml_passes_and_says_why",
                accepted_in_toml,
            ),
            (
                "an_accept_naming_another_finding_is_stale_and_the_error_stands",
                accept_of_another_finding_is_stale,
            ),
            (
                "an_accept_past_its_date_accepts_nothing",
                accept_past_its_date,
            ),
            (
                "an_accept_without_a_reason_is_refused_naming_the_line",
                accept_without_reason,
            ),
            (
                "sarif_of_a_failing_run_with_accepted_and_stale_is_valid_sarif_2_1_0",
                sarif_of_a_failing_run,
            ),
            (
                "the_sarif_schema_check_refuses_what_is_not_sarif",
                sarif_schema_refuses_non_sarif,
            ),
        ],
    )
}

/// A goose folder of our own (a ferry timetable): SQL, a Go migration,
/// SQL on the table the Go migration creates, SQL.
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
            Format::Sarif => "\"ruleId\": \"static.not-read\"",
        };
        ensure!(
            text.contains(skipped_word),
            "{format} lacks `{skipped_word}`:\n{text}"
        );
    }
    validate_sarif(&render(report, Format::Sarif))?;
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
    ensure!(clean == [Some(1), Some(3), Some(4)], "{clean:?}");
    let (_, text, _) = output(cli().current_dir(repo_root()).args([
        "verify",
        "--static-only",
        "--migrations",
        GOOSE,
    ]))?;
    ensure!(
        text.contains("PASSED: 0 error(s), 0 warning(s), 0 accepted, 1 skipped"),
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
    ensure!(
        report.safe_order.is_empty(),
        "a deploy order proven past a migration that was not run: {:?}",
        report.safe_order
    );
    // Past it with --since 3, the base stops at it (migration 3 alters
    // the table it creates): migration 4, the one rehearsed, was not
    // reached, and says so.
    let catalog = Catalog::from_dir(&repo_root().join(GOOSE))?;
    let report = Verify::new(catalog)?.rows(50).since(3)?.run(&env.sandbox)?;
    let four: Vec<(&str, Severity)> = report
        .findings
        .iter()
        .filter(|f| f.migration == Some(4) && f.check == "apply")
        .map(|f| (f.id.as_str(), f.severity))
        .collect();
    ensure!(
        four == [("apply.not-rehearsed", Severity::Skipped)],
        "{four:?}\n{}",
        render(&report, Format::Text)
    );
    ensure!(report.safe_order.is_empty(), "{:?}", report.safe_order);
    Ok(())
}

/// A greenhouse's plants, then an index on them: built without
/// CONCURRENTLY, so a blocking index build (an error at any size).
const PLANTS: &str = "CREATE TABLE plants (\n    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n    species text NOT NULL,\n    bed text NOT NULL\n);\n";
const BY_SPECIES: &str = "CREATE INDEX plants_species ON plants (species);\n";
const REASON: &str = "the greenhouse keeps a few hundred plants; built in the Sunday window";

/// A project folder: `migrations/` with V1 (plants) and V2 (`v2`), and
/// `rollsafe.toml` when `toml` is given (after `migrations = ...`).
fn greenhouse(v2: &str, toml: Option<&str>) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let migrations = dir.path().join("migrations");
    std::fs::create_dir(&migrations)?;
    std::fs::write(migrations.join("V1__plants.sql"), PLANTS)?;
    std::fs::write(migrations.join("V2__plants_by_species.sql"), v2)?;
    if let Some(toml) = toml {
        std::fs::write(
            dir.path().join("rollsafe.toml"),
            format!("migrations = \"migrations\"\n{toml}"),
        )?;
    }
    Ok(dir)
}

/// What a run in `dir` wrote: its exit code, the text report (stdout),
/// stderr, and each other format's file.
struct Run {
    code: i32,
    text: String,
    stderr: String,
    files: Vec<(Format, String)>,
}

impl Run {
    fn file(&self, format: Format) -> &str {
        self.files
            .iter()
            .find(|(f, _)| *f == format)
            .map_or("", |(_, t)| t.as_str())
    }

    fn json(&self) -> anyhow::Result<Report> {
        serde_json::from_str(self.file(Format::Json)).context("the JSON report")
    }
}

/// `rollsafe verify` in `dir` as a user runs it there (rollsafe.toml
/// found by itself), rehearsed on the suite's server, every format
/// written to a file.
fn verify_in(env: &TestEnv, dir: &std::path::Path) -> anyhow::Result<Run> {
    let formats = [
        Format::Json,
        Format::Junit,
        Format::Markdown,
        Format::Github,
        Format::Gitlab,
        Format::Sarif,
    ];
    let mut cmd = cli();
    cmd.current_dir(dir).args([
        "verify",
        "--postgres",
        env.sandbox.admin_url(),
        "--migrations",
        "migrations",
        "--rows",
        "200",
    ]);
    for f in formats {
        cmd.args(["--output", &format!("{f}=report.{f}")]);
    }
    let (code, text, stderr) = output(&mut cmd)?;
    let files = formats
        .into_iter()
        .map(|f| {
            (
                f,
                std::fs::read_to_string(dir.join(format!("report.{f}"))).unwrap_or_default(),
            )
        })
        .collect();
    Ok(Run {
        code,
        text,
        stderr,
        files,
    })
}

/// The run passed with the blocking index build accepted for `reason`
/// (by `by`), and every format says so.
fn accepted_everywhere(run: &Run, by: &str) -> anyhow::Result<()> {
    ensure!(
        run.code == 0,
        "exit {}: {}\n{}",
        run.code,
        run.stderr,
        run.text
    );
    let report = run.json()?;
    ensure!(report.passed);
    let build = report
        .findings
        .iter()
        .find(|f| f.id == "locks.blocking-index-build")
        .context("the build is still reported")?;
    let a = build
        .accepted
        .as_ref()
        .context("the build is not accepted")?;
    ensure!(build.severity == Severity::Error, "it keeps its severity");
    ensure!(a.reason == REASON && a.by.contains(by), "{a:?}");
    ensure!(
        run.text
            .contains("ACCEPTED locks.blocking-index-build (error)")
            && run.text.contains(&format!("accepted: {REASON}")),
        "{}",
        run.text
    );
    ensure!(
        run.text
            .contains("PASSED: 0 error(s), 0 warning(s), 1 accepted"),
        "{}",
        run.text
    );
    let junit = run.file(Format::Junit);
    ensure!(
        junit.contains("accepted (the greenhouse keeps a few hundred plants")
            && junit.contains("[locks.blocking-index-build]")
            && !junit.contains("<failure"),
        "{junit}"
    );
    let md = run.file(Format::Markdown);
    ensure!(
        md.contains("| accepted (error) | `locks.blocking-index-build`")
            && md.contains("#### Accepted risks")
            && md.contains(REASON),
        "{md}"
    );
    ensure!(
        run.file(Format::Github).contains("::notice ")
            && run
                .file(Format::Github)
                .contains("title=accepted error%3A locks.blocking-index-build"),
        "{}",
        run.file(Format::Github)
    );
    ensure!(run
        .file(Format::Gitlab)
        .contains(&format!("accepted error ({REASON}")));
    let sarif: serde_json::Value = serde_json::from_str(run.file(Format::Sarif))?;
    validate_sarif(run.file(Format::Sarif))?;
    let result = sarif["runs"][0]["results"]
        .as_array()
        .and_then(|r| {
            r.iter()
                .find(|x| x["ruleId"] == "locks.blocking-index-build")
        })
        .context("no SARIF result for the build")?;
    let suppression = &result["suppressions"][0];
    ensure!(
        result["level"] == "error"
            && suppression["status"] == "accepted"
            && suppression["justification"]
                .as_str()
                .is_some_and(|j| j.starts_with(REASON)),
        "{result:#}"
    );
    Ok(())
}

fn accepted_by_comment(env: &TestEnv) -> anyhow::Result<()> {
    let v2 =
        format!("-- rollsafe:accept locks.blocking-index-build plants -- {REASON}\n{BY_SPECIES}");
    let dir = greenhouse(&v2, None)?;
    let run = verify_in(env, dir.path())?;
    accepted_everywhere(
        &run,
        "-- rollsafe:accept at migrations/V2__plants_by_species.sql:1",
    )
}

fn accepted_in_toml(env: &TestEnv) -> anyhow::Result<()> {
    let toml = format!(
        "\n[[accept]]\nmigration = \"V2\"\nid = \"locks.blocking-index-build\"\nobject = \"plants\"\nreason = \"{REASON}\"\nuntil = 2999-12-31\n"
    );
    let dir = greenhouse(BY_SPECIES, Some(&toml))?;
    let run = verify_in(env, dir.path())?;
    accepted_everywhere(&run, "[[accept]] at rollsafe.toml:")?;
    ensure!(run.text.contains("until 2999-12-31"), "{}", run.text);
    Ok(())
}

/// The run failed on the blocking build, which nothing accepted.
fn build_stands(run: &Run) -> anyhow::Result<Report> {
    ensure!(
        run.code == 1,
        "exit {}: {}\n{}",
        run.code,
        run.stderr,
        run.text
    );
    let report = run.json()?;
    let build: Vec<_> = report.errors().map(|f| f.id.as_str()).collect();
    ensure!(build == ["locks.blocking-index-build"], "{build:?}");
    ensure!(
        run.text.contains("ERROR locks.blocking-index-build"),
        "{}",
        run.text
    );
    Ok(report)
}

fn accept_of_another_finding_is_stale(env: &TestEnv) -> anyhow::Result<()> {
    let v2 = format!("-- rollsafe:accept rewrite.table-rewritten plants -- {REASON}\n{BY_SPECIES}");
    let dir = greenhouse(&v2, None)?;
    let run = verify_in(env, dir.path())?;
    let report = build_stands(&run)?;
    let stale: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.id == "accept.stale")
        .collect();
    ensure!(
        stale.len() == 1 && stale[0].severity == Severity::Warn,
        "{stale:#?}"
    );
    let at = stale[0]
        .location
        .as_ref()
        .context("the stale waiver's place")?;
    ensure!(
        at.file == "migrations/V2__plants_by_species.sql" && at.line == 1,
        "{at:?}"
    );
    ensure!(
        run.text.contains("warn  accept.stale")
            && run.text.contains("rewrite.table-rewritten on plants of V2 (migrations/V2__plants_by_species.sql:1) matches no finding"),
        "{}",
        run.text
    );
    ensure!(
        run.text
            .contains("FAILED: 1 error(s), 1 warning(s), 0 accepted"),
        "{}",
        run.text
    );
    Ok(())
}

fn accept_past_its_date(env: &TestEnv) -> anyhow::Result<()> {
    let toml = format!(
        "\n[[accept]]\nmigration = \"V2\"\nid = \"locks.blocking-index-build\"\nreason = \"{REASON}\"\nuntil = 2020-06-30\n"
    );
    let dir = greenhouse(BY_SPECIES, Some(&toml))?;
    let run = verify_in(env, dir.path())?;
    let report = build_stands(&run)?;
    let expired: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.id == "accept.expired")
        .collect();
    ensure!(
        expired.len() == 1 && expired[0].message.contains("expired on 2020-06-30"),
        "{expired:#?}"
    );
    ensure!(report.accepted() == 0);
    Ok(())
}

fn accept_without_reason(env: &TestEnv) -> anyhow::Result<()> {
    for line in [
        "-- rollsafe:accept locks.blocking-index-build plants",
        "-- rollsafe:accept locks.blocking-index-build plants --   ",
    ] {
        let dir = greenhouse(&format!("-- plants by species\n{line}\n{BY_SPECIES}"), None)?;
        let run = verify_in(env, dir.path())?;
        ensure!(run.code == 2, "exit {}: {}", run.code, run.text);
        let first = run
            .stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        ensure!(
            first.contains("V2__plants_by_species.sql:2: malformed directive")
                && first.contains("a reason is required"),
            "{}",
            run.stderr
        );
    }
    // In rollsafe.toml: refused with the file and line.
    let toml = "\n[[accept]]\nmigration = \"V2\"\nid = \"locks.blocking-index-build\"\n";
    let dir = greenhouse(BY_SPECIES, Some(toml))?;
    let run = verify_in(env, dir.path())?;
    ensure!(run.code == 2, "exit {}: {}", run.code, run.text);
    ensure!(
        run.stderr.contains("rollsafe.toml:") && run.stderr.contains("missing field `reason`"),
        "{}",
        run.stderr
    );
    Ok(())
}

/// The official SARIF 2.1.0 schema (OASIS, errata 01), vendored: see
/// `tests/fixtures/sarif/README.md` for where it comes from.
fn sarif_schema() -> anyhow::Result<jsonschema::Validator> {
    let path = repo_root().join("tests/fixtures/sarif/sarif-schema-2.1.0.json");
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    jsonschema::draft4::options()
        .should_validate_formats(true)
        .build(&schema)
        .map_err(|e| anyhow::anyhow!("{}: not a schema: {e}", path.display()))
}

/// `text` is a SARIF 2.1.0 log the official schema accepts.
fn validate_sarif(text: &str) -> anyhow::Result<()> {
    let log: serde_json::Value = serde_json::from_str(text).context("SARIF is not JSON")?;
    let schema = sarif_schema()?;
    let errors: Vec<String> = schema
        .iter_errors(&log)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    ensure!(errors.is_empty(), "not valid SARIF 2.1.0: {errors:#?}");
    ensure!(log["version"] == "2.1.0" && log["runs"].as_array().is_some_and(|r| r.len() == 1));
    Ok(())
}

/// A run with an accepted finding (V2's blocking build, by a comment), a
/// stale waiver and an error (V3 rewrites the table; its waiver names
/// another table), side by side: it fails, and its SARIF is valid.
fn sarif_of_a_failing_run(env: &TestEnv) -> anyhow::Result<()> {
    let v2 =
        format!("-- rollsafe:accept locks.blocking-index-build plants -- {REASON}\n{BY_SPECIES}");
    let dir = greenhouse(&v2, None)?;
    std::fs::write(
        dir.path().join("migrations/V3__plant_height.sql"),
        "-- rollsafe:accept rewrite.table-rewritten benches -- benches are rebuilt nightly\nALTER TABLE plants ALTER COLUMN bed TYPE varchar(40);\n",
    )?;
    let run = verify_in(env, dir.path())?;
    ensure!(
        run.code == 1,
        "exit {}: {}\n{}",
        run.code,
        run.stderr,
        run.text
    );
    let sarif = run.file(Format::Sarif);
    validate_sarif(sarif)?;
    let log: serde_json::Value = serde_json::from_str(sarif)?;
    let results = log["runs"][0]["results"].as_array().context("results")?;
    let of = |id: &str| {
        results
            .iter()
            .filter(|x| x["ruleId"] == id)
            .collect::<Vec<_>>()
    };
    let (accepted, stale, rewritten) = (
        of("locks.blocking-index-build"),
        of("accept.stale"),
        of("rewrite.table-rewritten"),
    );
    ensure!(
        accepted.len() == 1 && accepted[0]["suppressions"][0]["status"] == "accepted",
        "{accepted:#?}"
    );
    ensure!(
        stale.len() == 1 && stale[0]["level"] == "warning",
        "{stale:#?}"
    );
    ensure!(
        rewritten.len() == 1
            && rewritten[0]["level"] == "error"
            && rewritten[0].get("suppressions").is_none()
            && rewritten[0]["locations"][0]["physicalLocation"]["region"]["startLine"] == 2,
        "{rewritten:#?}"
    );
    let rules = log["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .context("rules")?;
    for id in [
        "locks.blocking-index-build",
        "accept.stale",
        "rewrite.table-rewritten",
    ] {
        let rule = rules
            .iter()
            .find(|r| r["id"] == id)
            .context(id.to_string())?;
        ensure!(
            rule["shortDescription"]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
                && rule["help"]["text"].as_str().is_some_and(|t| !t.is_empty()),
            "{rule:#}"
        );
    }
    // The warnings: the stale waiver, and squawk's prefer-text-field.
    ensure!(
        run.text
            .contains("FAILED: 1 error(s), 2 warning(s), 1 accepted"),
        "{}",
        run.text
    );
    if let Some(keep) = std::env::var_os("ROLLSAFE_GATE_KEEP") {
        let keep = std::path::Path::new(&keep);
        std::fs::write(keep.join("mixed.txt"), &run.text)?;
        std::fs::write(keep.join("mixed.sarif"), sarif)?;
    }
    Ok(())
}

/// The schema check itself: a log without its version, or with a result
/// level SARIF does not have, is refused (so a pass above means something).
fn sarif_schema_refuses_non_sarif(_: &TestEnv) -> anyhow::Result<()> {
    let schema = sarif_schema()?;
    let good = serde_json::json!({
        "version": "2.1.0",
        "runs": [{ "tool": { "driver": { "name": "rollsafe" } }, "results": [] }]
    });
    ensure!(schema.is_valid(&good));
    let mut no_version = good.clone();
    no_version
        .as_object_mut()
        .context("object")?
        .remove("version");
    ensure!(!schema.is_valid(&no_version));
    let mut bad_level = good;
    bad_level["runs"][0]["results"] = serde_json::json!([{
        "message": { "text": "x" },
        "level": "critical"
    }]);
    ensure!(!schema.is_valid(&bad_level));
    Ok(())
}

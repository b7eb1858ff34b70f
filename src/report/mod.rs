//! Findings and the reports that carry them, rendered as text, JSON, JUnit,
//! GitHub workflow commands, Markdown, GitLab Code Quality JSON or SARIF.
//!
//! A [`Finding`] is one thing a check established: a stable id (the check's
//! name is its prefix, e.g. `rewrite.table-rewritten`, so a reader finds the
//! module from the id), a severity, the migration it is about, a one-line
//! message, the numbers it measured (`evidence`) and what to do (`advice`).
//! Passing checks report too (severity `info`, with their measurements): a
//! green run shows *why* it is green. A check that could not measure says
//! so (severity `skipped`), so a green run never hides what it did not test.
//!
//! A [`Report`] is the findings plus what was rehearsed (server, migrations,
//! app versions, the safe deploy order). `passed` is "no error finding".
//! Shared by `rollsafe verify` and `rollsafe check`; nothing here knows how a
//! finding was produced.

pub mod accept;
pub mod events;
mod github;
mod gitlab;
mod json;
mod junit;
mod majors;
mod markdown;
pub mod output;
mod sarif;
mod text;
pub mod timeline;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use github::render_github;
pub use gitlab::render_gitlab;
pub use json::render_json;
pub use junit::render_junit;
pub use majors::merge_majors;
pub use markdown::{render_markdown, MARKDOWN_LIMIT};
pub use sarif::render_sarif;
pub use text::render_text;

/// How bad a finding is. Only `Error` fails a run. `Skipped` is a check
/// that could not measure what it exists to measure: never shown as ok,
/// never counted as a pass (JUnit marks its case skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Skipped,
    Info,
    Warn,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Skipped => "skipped",
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Error => "error",
        })
    }
}

/// Measured numbers and facts behind a finding (JSON object).
pub type Evidence = serde_json::Map<String, serde_json::Value>;

/// One result of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The check that produced it (`rewrite`), also the id's prefix.
    pub check: String,
    /// Stable identifier, `<check>.<what>` (`rewrite.table-rewritten`).
    pub id: String,
    pub severity: Severity,
    /// The migration version it is about; None for run-wide findings.
    pub migration: Option<i32>,
    /// One line: what was established.
    pub message: String,
    pub evidence: Evidence,
    /// What to do about it (empty for plain measurements).
    pub advice: String,
    /// The statement it is about, when one statement of a migration file
    /// is (None: the whole migration, or the whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// The PostgreSQL majors it was found on, in a run over several
    /// (`verify --postgres-version 13,15,17,18`); empty for a run on one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub majors: Vec<u32>,
    /// The reviewed waiver that accepts it ([`accept`]): it keeps its
    /// severity and place, and does not fail the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<Acceptance>,
}

/// Why a finding is accepted, and who says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acceptance {
    /// The team's reason, as the waiver gives it.
    pub reason: String,
    /// Where the waiver is written: "-- rollsafe:accept at
    /// migrations/V4__x.sql:3", "[[accept]] at rollsafe.toml:12".
    pub by: String,
    /// The last day it accepts, when it has one (`2027-03-31`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// The longest message, advice or evidence text a report shows, in
/// characters: past it the text is cut and says how much was left out.
pub const TEXT_BOUND: usize = 2_000;
/// The most items an evidence list shows; `<key>_count` then holds them all.
pub const LIST_BOUND: usize = 50;

/// `text` cut to [`TEXT_BOUND`] characters (at a character boundary),
/// saying how many were left out.
fn bounded_text(text: &str) -> String {
    match text.char_indices().nth(TEXT_BOUND) {
        None => text.to_string(),
        Some((cut, _)) => format!(
            "{} … ({} more characters)",
            &text[..cut],
            text[cut..].chars().count()
        ),
    }
}

impl Finding {
    /// The finding as every format shows it: message, advice and evidence
    /// texts within [`TEXT_BOUND`], evidence lists within [`LIST_BOUND`]
    /// items (with `<key>_count`).
    fn bounded(&self) -> Finding {
        let mut f = self.clone();
        f.message = bounded_text(&f.message);
        f.advice = bounded_text(&f.advice);
        let mut evidence = Evidence::new();
        for (key, value) in std::mem::take(&mut f.evidence) {
            match value {
                serde_json::Value::String(text) => {
                    evidence.insert(key, bounded_text(&text).into());
                }
                serde_json::Value::Array(mut items) if items.len() > LIST_BOUND => {
                    evidence.insert(format!("{key}_count"), items.len().into());
                    items.truncate(LIST_BOUND);
                    evidence.insert(key, items.into());
                }
                other => {
                    evidence.insert(key, other);
                }
            }
        }
        f.evidence = evidence;
        f
    }
}

impl Report {
    /// The report as every format shows it: each finding
    /// [`Finding::bounded`].
    pub fn bounded(&self) -> Report {
        let mut r = self.clone();
        r.findings = r.findings.iter().map(Finding::bounded).collect();
        r
    }
}

/// The first `shown` of `items` joined with `; `, then how many more there
/// are: a message names a few and counts the rest, so that a history whose
/// triggers made 2,000 tables does not print a 90 KB line.
pub fn bounded_list<T: std::fmt::Display>(items: &[T], shown: usize) -> String {
    let mut out = items
        .iter()
        .take(shown)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > shown {
        out.push_str(&format!("; … and {} more", items.len() - shown));
    }
    out
}

/// `apply.not-rehearsed`'s `unreached` evidence for a migration an
/// earlier failure left unrehearsed altogether (the text report's header
/// lists it apart from the rehearsed ones).
pub const UNREACHED: &str = "everything";

/// Where in a migration file a finding points: what a reviewer needs to
/// find the statement (annotations on a diff use file and line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The file as the repository has it (`migrations/V4__x.sql`).
    pub file: String,
    /// 1-based line and column of the statement's first character.
    pub line: usize,
    pub column: usize,
    /// The statement's beginning, whitespace folded.
    pub excerpt: String,
}

impl Finding {
    /// A finding of `check` with id `<check>.<name>`.
    pub fn new(
        check: &str,
        name: &str,
        severity: Severity,
        migration: Option<i32>,
        message: impl Into<String>,
    ) -> Finding {
        Finding {
            check: check.to_string(),
            id: format!("{check}.{name}"),
            severity,
            migration,
            message: message.into(),
            evidence: Evidence::new(),
            advice: String::new(),
            location: None,
            majors: Vec::new(),
            accepted: None,
        }
    }

    /// Points the finding at a statement (no-op for None).
    pub fn at(mut self, location: Option<Location>) -> Finding {
        if location.is_some() {
            self.location = location;
        }
        self
    }

    /// Adds one measured value.
    pub fn evidence(mut self, key: &str, value: impl Into<serde_json::Value>) -> Finding {
        self.evidence.insert(key.to_string(), value.into());
        self
    }

    /// Adds every entry of `more`.
    pub fn evidence_map(mut self, more: &Evidence) -> Finding {
        for (k, v) in more {
            self.evidence.insert(k.clone(), v.clone());
        }
        self
    }

    pub fn advice(mut self, advice: impl Into<String>) -> Finding {
        self.advice = advice.into();
        self
    }
}

/// A migration that was rehearsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RehearsedMigration {
    pub version: i32,
    pub file: String,
    /// The file as the repository has it (`migrations/V4__x.sql`), for
    /// annotations.
    #[serde(default)]
    pub path: String,
    /// What each statement did, measured (empty when it was not reached).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statements: Vec<StatementRow>,
    /// The version as the user wrote it (`V3`; `20240101120000` for sqlx and
    /// golang-migrate), when it is not `V<version>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// The live apps' longest lock waits on this migration while it
    /// applied on the seeded database, at most [`APP_WAITS_KEPT`], in
    /// order of start (the lock timeline draws them). None: no app
    /// workload ran (nothing seeded, or a report from an older rollsafe);
    /// empty: the apps ran and never waited on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_waits: Option<Vec<AppWaitRow>>,
    /// ms from its transaction's start to its commit on the seeded
    /// database: every lock it took is held that long. None outside a
    /// transaction (each statement commits on its own) or not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_ms: Option<f64>,
}

/// Most app waits a migration's report keeps: the worst ones.
pub const APP_WAITS_KEPT: usize = 8;

/// One app statement's lock wait on a migration, measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppWaitRow {
    /// "legacy.create (write)".
    pub statement: String,
    /// The table it waited for and the mode it asked for ("ROW EXCLUSIVE").
    pub table: String,
    pub mode: String,
    /// When the wait began, ms after the migration's transaction (its
    /// first statement, outside a transaction) started; and how long it
    /// lasted.
    pub start_ms: f64,
    pub ms: f64,
    /// The line of the statement whose lock it waited behind.
    pub behind_line: Option<usize>,
}

/// One statement of a rehearsed migration: the per-statement table of the
/// report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatementRow {
    pub line: usize,
    pub column: usize,
    /// The callback its tool runs around the migration that the statement
    /// is of (`beforeEachMigrate__timeouts.sql`, in which `line` is); None
    /// for the migration's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    pub excerpt: String,
    /// Locks it took that were not held before it ("ACCESS EXCLUSIVE on t").
    pub new_locks: Vec<String>,
    pub ms_at_0_rows: f64,
    pub ms_at_n_rows: f64,
    /// Rows of existing tables it read by sequential pass or wrote, at N rows.
    pub rows_touched: i64,
    /// When it started on the seeded database, ms after the migration's
    /// transaction (or, outside a transaction, its first statement)
    /// started. None when not measured (a report from an older rollsafe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<f64>,
    /// The strongest lock held while it ran ("SHARE on books"): inside a
    /// transaction, every lock taken so far is still held. None: no lock
    /// on an existing table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strongest_lock: Option<String>,
    /// Whether a lock it held conflicts with the apps' writes (SHARE or
    /// stronger): what the apps notice.
    #[serde(default)]
    pub blocks_writes: bool,
}

/// An application version whose statements were replayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RehearsedApp {
    pub name: String,
    /// First schema version it needs.
    pub needs: i32,
    pub statements: usize,
}

/// One (check, migration) pair that ran; JUnit gets one test case each,
/// including those that found nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRun {
    pub check: String,
    pub migration: Option<i32>,
    pub description: String,
}

/// Everything a run established.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// True when no finding is an error.
    pub passed: bool,
    /// The tool and command (`rollsafe verify`).
    pub tool: String,
    /// Where it ran (no password).
    pub sandbox: String,
    pub server_version: String,
    /// Where the migrations came from.
    pub source: String,
    pub migrations: Vec<RehearsedMigration>,
    pub apps: Vec<RehearsedApp>,
    /// Rows seeded per migration rehearsal.
    pub rows: u64,
    /// Versions applied without being rehearsed (`--since`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_only: Vec<i32>,
    /// The schema the rehearsals started from when it is not the files'
    /// (`--from-target`): "the schema of postgres://…:***@host/db at V60".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// With `--from-target`: the tables whose production rows were copied
    /// into the sandbox, each with why ("public.functions (filled by
    /// V1)"); every other table was seeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_rows: Option<Vec<String>>,
    /// The deploy order that the run proved safe, one step per line (empty
    /// when the run found errors).
    pub safe_order: Vec<String>,
    pub checks: Vec<CheckRun>,
    pub findings: Vec<Finding>,
    pub duration_ms: u64,
}

impl Report {
    /// An empty report for `tool`; fill in and call [`Report::finish`].
    pub fn new(tool: &str) -> Report {
        Report {
            passed: true,
            tool: tool.to_string(),
            sandbox: String::new(),
            server_version: String::new(),
            source: String::new(),
            migrations: Vec::new(),
            apps: Vec::new(),
            rows: 0,
            applied_only: Vec::new(),
            base: None,
            copied_rows: None,
            safe_order: Vec::new(),
            checks: Vec::new(),
            findings: Vec::new(),
            duration_ms: 0,
        }
    }

    /// Records which migration set the run was about (source and files).
    pub fn set_migrations(&mut self, catalog: &crate::catalog::Catalog) {
        self.source = catalog.source.to_string();
        self.migrations = catalog
            .migrations()
            .iter()
            .map(|m| RehearsedMigration {
                version: m.version,
                file: m.file.clone(),
                path: catalog.path_of(m),
                statements: Vec::new(),
                label: if m.label == format!("V{}", m.version) {
                    String::new()
                } else {
                    m.label.clone()
                },
                app_waits: None,
                committed_ms: None,
            })
            .collect();
    }

    /// How migration `v` is named to the user: its label (`20240101120000`)
    /// for layouts with their own versions, else `V<v>`.
    pub fn label(&self, v: i32) -> String {
        self.migrations
            .iter()
            .find(|m| m.version == v && !m.label.is_empty())
            .map_or_else(|| format!("V{v}"), |m| m.label.clone())
    }

    /// Recomputes `passed` and orders findings (by migration, then
    /// severity, worst first, then check order of appearance).
    pub fn finish(&mut self) {
        let failed = self.errors().next().is_some();
        self.passed = !failed;
        self.findings.sort_by(|a, b| {
            a.migration
                .unwrap_or(i32::MAX)
                .cmp(&b.migration.unwrap_or(i32::MAX))
                .then(b.severity.cmp(&a.severity))
        });
    }

    /// The error findings no waiver accepts: what fails the run.
    pub fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error && f.accepted.is_none())
    }

    /// "PASSED" or "FAILED", and the tally after it: ": 0 error(s), 1
    /// warning(s), 0 accepted, 0 skipped, 17 check(s) run, 8.0 s" (every
    /// format ends with the same verdict; an accepted finding counts as
    /// accepted, not as its severity).
    pub fn verdict(&self) -> (&'static str, String) {
        (
            if self.passed { "PASSED" } else { "FAILED" },
            format!(
                ": {} error(s), {} warning(s), {} accepted, {} skipped, {} check(s) run, {:.1} s",
                self.count(Severity::Error),
                self.count(Severity::Warn),
                self.accepted(),
                self.count(Severity::Skipped),
                self.checks.len(),
                self.duration_ms as f64 / 1000.0
            ),
        )
    }

    /// The findings of `severity` no waiver accepts.
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity && f.accepted.is_none())
            .count()
    }

    /// The findings a reviewed waiver accepts.
    pub fn accepted(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.accepted.is_some())
            .count()
    }

    /// Where a reviewer finds what `f` is about: its statement; else, for
    /// a finding about a whole migration, line 1 of that migration's file
    /// (column 1, no excerpt); None for a run-wide finding.
    pub fn location_of(&self, f: &Finding) -> Option<Location> {
        if let Some(l) = &f.location {
            return Some(l.clone());
        }
        let m = self
            .migrations
            .iter()
            .find(|m| Some(m.version) == f.migration)?;
        Some(Location {
            // Reports read back from older JSON have no path.
            file: if m.path.is_empty() {
                m.file.clone()
            } else {
                m.path.clone()
            },
            line: 1,
            column: 1,
            excerpt: String::new(),
        })
    }
}

/// One `plan.regressed` finding as the reports summarise it (text and
/// Markdown: a plan section, a hint under the deploy order, a mark on the
/// statement that dropped the index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRegression {
    pub migration: Option<i32>,
    pub severity: Severity,
    /// "shop.by_email on books: Index Scan using books_email (…) → Seq Scan (…)".
    pub summary: String,
    /// "create the replacement index before dropping books_email (…)",
    /// when the migration dropped the index.
    pub hint: Option<String>,
    /// The migration's line that dropped it, when known.
    pub line: Option<usize>,
    /// "shop.by_email".
    pub statement: String,
}

impl Report {
    /// The plan regressions, in finding order.
    pub fn plan_regressions(&self) -> Vec<PlanRegression> {
        let text = |f: &Finding, k: &str| {
            f.evidence
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        self.findings
            .iter()
            .filter(|f| f.id == "plan.regressed")
            .map(|f| {
                let statement = format!("{}.{}", text(f, "app"), text(f, "statement"));
                let index = text(f, "index_before");
                let dropped = f.evidence.get("index_dropped") == Some(&serde_json::Value::Bool(true));
                PlanRegression {
                    migration: f.migration,
                    severity: f.severity,
                    summary: format!("{statement} on {}: {}", text(f, "table"), text(f, "plan_change")),
                    hint: dropped.then(|| {
                        format!(
                            "create the replacement index before dropping {index} ({statement} reads {} through it)",
                            text(f, "table")
                        )
                    }),
                    line: f.location.as_ref().map(|l| l.line),
                    statement,
                }
            })
            .collect()
    }
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Junit,
    /// GitHub Actions workflow commands (annotations on the diff).
    Github,
    /// A bounded summary for a pull / merge request comment.
    Markdown,
    /// GitLab Code Quality JSON (findings in the merge request).
    Gitlab,
    /// SARIF 2.1.0 (GitHub code scanning).
    Sarif,
}

impl Format {
    pub const ALL: [Format; 7] = [
        Format::Text,
        Format::Json,
        Format::Junit,
        Format::Github,
        Format::Markdown,
        Format::Gitlab,
        Format::Sarif,
    ];

    /// The name `--format` and `--output FORMAT=FILE` take.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Junit => "junit",
            Format::Github => "github",
            Format::Markdown => "markdown",
            Format::Gitlab => "gitlab",
            Format::Sarif => "sarif",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown format `{s}`: use text, json, junit, github, markdown, gitlab or sarif"
                )
            })
    }
}

/// Renders `report` in `format`.
pub fn render(report: &Report, format: Format) -> String {
    let report = &report.bounded();
    match format {
        Format::Text => render_text(report),
        Format::Json => render_json(report),
        Format::Junit => render_junit(report),
        Format::Github => render_github(report),
        Format::Markdown => render_markdown(report),
        Format::Gitlab => render_gitlab(report),
        Format::Sarif => render_sarif(report),
    }
}

#[cfg(test)]
mod bounds_tests {
    use super::*;

    #[test]
    fn every_format_bounds_messages_evidence_texts_and_lists() {
        let long: Vec<String> = (0..3_000)
            .map(|i| format!("table t_{i} is not expected"))
            .collect();
        let mut r = Report::new("rollsafe verify");
        r.findings.push(
            Finding::new(
                "post",
                "paths-differ",
                Severity::Error,
                Some(2),
                long.join("; "),
            )
            .evidence("tables", long.clone())
            .evidence("detail", long.join(", ")),
        );
        let b = r.bounded();
        let f = &b.findings[0];
        assert!(
            f.message.chars().count() < TEXT_BOUND + 40,
            "{}",
            f.message.len()
        );
        assert!(
            f.message.ends_with("more characters)"),
            "{}",
            &f.message[f.message.len() - 40..]
        );
        assert_eq!(
            f.evidence["tables"].as_array().map(Vec::len),
            Some(LIST_BOUND)
        );
        assert_eq!(f.evidence["tables_count"], 3_000);
        assert!(f.evidence["detail"].as_str().unwrap().chars().count() < TEXT_BOUND + 40);
        for format in Format::ALL {
            let text = render(&r, format);
            assert!(text.len() < 40_000, "{format:?}: {} bytes", text.len());
        }
    }

    #[test]
    fn a_bounded_list_names_a_few_and_counts_the_rest() {
        assert_eq!(bounded_list(&["a", "b"], 3), "a; b");
        assert_eq!(bounded_list(&["a", "b", "c", "d"], 2), "a; b; … and 2 more");
    }
}

#[cfg(test)]
pub(crate) fn sample_report() -> Report {
    let mut r = Report::new("rollsafe verify");
    r.sandbox = "local server 127.0.0.1:5555".into();
    r.server_version = "PostgreSQL 15".into();
    r.source = "the migrations embedded in rollsafe".into();
    r.migrations = vec![
        RehearsedMigration {
            version: 2,
            file: "V2__a.sql".into(),
            path: "migrations/V2__a.sql".into(),
            statements: Vec::new(),
            label: String::new(),
            app_waits: None,
            committed_ms: None,
        },
        RehearsedMigration {
            version: 3,
            file: "V3__b.sql".into(),
            path: "migrations/V3__b.sql".into(),
            label: String::new(),
            statements: vec![StatementRow {
                line: 4,
                column: 1,
                script: None,
                excerpt: "ALTER TABLE jobs ADD COLUMN x int".into(),
                new_locks: vec!["ACCESS EXCLUSIVE on jobs".into()],
                ms_at_0_rows: 0.4,
                ms_at_n_rows: 9.5,
                rows_touched: 10,
                start_ms: Some(1.2),
                strongest_lock: Some("ACCESS EXCLUSIVE on jobs".into()),
                blocks_writes: true,
            }],
            app_waits: Some(vec![AppWaitRow {
                statement: "old.list (read)".into(),
                table: "jobs".into(),
                mode: "ACCESS SHARE".into(),
                start_ms: 3.0,
                ms: 7.5,
                behind_line: Some(4),
            }]),
            committed_ms: Some(10.7),
        },
    ];
    r.apps = vec![RehearsedApp {
        name: "old".into(),
        needs: 2,
        statements: 4,
    }];
    r.rows = 10;
    r.safe_order = vec!["apply V3, then roll out the new app".into()];
    for check in ["rewrite", "locks"] {
        for m in [2, 3] {
            r.checks.push(CheckRun {
                check: check.into(),
                migration: Some(m),
                description: format!("{check} description"),
            });
        }
    }
    r.findings = vec![
        Finding::new("rewrite", "measured", Severity::Info, Some(2), "no rewrite")
            .evidence("wal_bytes", 1234),
        Finding::new(
            "rewrite",
            "table-rewritten",
            Severity::Error,
            Some(3),
            "jobs rewritten <&>",
        )
        .evidence("rows", 10)
        .advice("use a constant default")
        .at(Some(Location {
            file: "migrations/V3__b.sql".into(),
            line: 4,
            column: 1,
            excerpt: "ALTER TABLE jobs ADD COLUMN x int".into(),
        })),
        Finding::new("locks", "lock-modes", Severity::Warn, Some(3), "scan"),
        Finding::new(
            "locks",
            "probe-skipped",
            Severity::Skipped,
            Some(2),
            "could not measure",
        )
        .advice("start it"),
    ];
    r.finish();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passed_means_no_error_and_findings_are_ordered() {
        let r = sample_report();
        assert!(!r.passed);
        // V2 first (its info before its skipped), then V3's error.
        assert_eq!(r.findings[0].migration, Some(2));
        assert_eq!(r.findings[1].severity, Severity::Skipped);
        assert_eq!(r.findings[2].severity, Severity::Error);
        // A skipped finding does not fail a run, and is not an error.
        assert_eq!(r.count(Severity::Skipped), 1);
        let mut ok = r.clone();
        ok.findings.retain(|f| f.severity != Severity::Error);
        ok.finish();
        assert!(ok.passed);
    }

    #[test]
    fn formats_parse_by_name_and_whole_file_findings_point_at_line_1() {
        for f in Format::ALL {
            assert_eq!(f.name().parse::<Format>(), Ok(f));
        }
        assert!("xml"
            .parse::<Format>()
            .unwrap_err()
            .contains("text, json, junit, github, markdown, gitlab or sarif"));
        let r = sample_report();
        let at = |id: &str| r.location_of(r.findings.iter().find(|f| f.id == id).unwrap());
        assert_eq!(at("rewrite.table-rewritten").unwrap().line, 4);
        let whole = at("locks.lock-modes").unwrap();
        assert_eq!(
            (whole.file.as_str(), whole.line),
            ("migrations/V3__b.sql", 1)
        );
        let run_wide = Finding::new("post", "x", Severity::Warn, None, "y");
        assert_eq!(r.location_of(&run_wide), None);
    }

    #[test]
    fn ids_carry_the_check_prefix() {
        let f = Finding::new("locks", "long-blocking-lock", Severity::Error, None, "x");
        assert_eq!(f.id, "locks.long-blocking-lock");
        assert_eq!(f.check, "locks");
    }
}

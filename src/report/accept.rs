//! Reviewed waivers: the findings a team accepts, and why.
//!
//! A waiver is written beside the migration (`-- rollsafe:accept
//! <finding-id> [<object>] -- <reason>`, on the statement after it, or on
//! the whole file above the first statement) or in `rollsafe.toml`
//! (`[[accept]]`: migration, id, optional object, reason, optional
//! `until`). [`apply`] holds every waiver against a finished report, once,
//! so every format sees the same thing: a finding a waiver names keeps its
//! place and severity, marked [`Acceptance`] with the reason and where the
//! waiver is written, and no longer fails the run. A waiver that matches
//! no finding is a stale waiver (`accept.stale`, a warning at the
//! waiver's line); one past its `until` accepts nothing (`accept.expired`,
//! a warning), so the finding stands.
//!
//! What it is not: a way to turn a check off. A waiver names one finding
//! id on one migration (one statement, or one object), and the report
//! lists every accepted finding with its reason.

use chrono::NaiveDate;

use super::{Acceptance, Finding, Location, Report, Severity};
use crate::catalog::Migration;
use crate::config::AcceptEntry;

/// The prefix of the waivers' own findings.
pub const CHECK: &str = "accept";

/// Evidence keys that name what a finding is about (the object a waiver
/// may name).
const OBJECT_KEYS: [&str; 6] = [
    "table",
    "index",
    "constraint",
    "column",
    "object",
    "relation",
];

/// One waiver, resolved against the run's migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiver {
    /// The migration it is about (rollsafe's version).
    pub migration: i32,
    /// The finding id it accepts.
    pub id: String,
    /// The table or object the finding must be about.
    pub object: Option<String>,
    pub reason: String,
    /// The last day it accepts (None: no end).
    pub until: Option<NaiveDate>,
    /// The lines of the migration's file it covers (a statement's first
    /// and last); None: the whole file.
    pub lines: Option<(usize, usize)>,
    /// Where it is written: the file and the line.
    pub file: String,
    pub line: usize,
    /// How it is written, for messages (`-- rollsafe:accept`,
    /// `[[accept]]`).
    pub form: &'static str,
}

impl Waiver {
    /// The `-- rollsafe:accept` waivers of migration `m`, whose file is
    /// `path`: each covers the statement after it (or whose text it sits
    /// in), the whole file when it stands above the first statement.
    pub fn in_file(m: &Migration, path: &str) -> Vec<Waiver> {
        let spans: Vec<(usize, usize)> = crate::sql::split(&m.sql)
            .statements
            .iter()
            .map(|st| (st.line, st.line + st.text.lines().count().saturating_sub(1)))
            .collect();
        m.accepts()
            .map(|a| Waiver {
                migration: m.version,
                id: a.id.clone(),
                object: a.object.clone(),
                reason: a.reason.clone(),
                until: None,
                lines: match spans.first() {
                    Some(&(first, _)) if a.line >= first => Some(
                        spans
                            .iter()
                            .copied()
                            .find(|&(_, end)| end >= a.line)
                            // After the last statement: it covers nothing.
                            .unwrap_or((a.line, a.line)),
                    ),
                    _ => None,
                },
                file: path.to_string(),
                line: a.line,
                form: "-- rollsafe:accept",
            })
            .collect()
    }

    /// A `[[accept]]` entry of the file `config` (at `line`) about
    /// migration `version`: it covers the whole migration.
    pub fn in_config(config: &str, line: usize, entry: &AcceptEntry, version: i32) -> Waiver {
        Waiver {
            migration: version,
            id: entry.id.clone(),
            object: entry.object.clone(),
            reason: entry.reason.clone(),
            until: entry.until,
            lines: None,
            file: config.to_string(),
            line,
            form: "[[accept]]",
        }
    }

    /// Where it is written, `file:line`.
    fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// Whether it accepts `f`: the same migration and id, a finding a
    /// reviewer must read (not a passing measurement), not accepted by
    /// another waiver, about its object, inside its lines.
    fn accepts(&self, f: &Finding) -> bool {
        f.migration == Some(self.migration)
            && f.id == self.id
            && f.severity != Severity::Info
            && f.accepted.is_none()
            && self.object.as_deref().map_or(true, |o| about(f, o))
            && self.lines.map_or(true, |(first, last)| {
                // (A finding at a callback run with the migration is in
                // another file: no line of this one covers it.)
                f.location
                    .as_ref()
                    .is_some_and(|l| l.file == self.file && (first..=last).contains(&l.line))
            })
    }

    /// Its own finding (`accept.<name>`), at its line.
    fn finding(&self, report: &Report, name: &str, message: String, advice: &str) -> Finding {
        Finding::new(CHECK, name, Severity::Warn, Some(self.migration), message)
            .evidence("accepts", self.id.clone())
            .evidence("object", self.object.clone().unwrap_or_default())
            .evidence("written_at", self.place())
            .advice(advice)
            .at(Some(Location {
                file: self.file.clone(),
                line: self.line,
                column: 1,
                excerpt: format!("{} {}", self.form, self.id),
            }))
            .evidence("migration_label", report.label(self.migration))
    }
}

/// A name as written, compared without quotes, case or schema.
fn bare(name: &str) -> String {
    let name = name.trim().trim_matches('"');
    name.rsplit('.')
        .next()
        .unwrap_or(name)
        .trim_matches('"')
        .to_lowercase()
}

/// Whether `f` is about `object`: an evidence value that names it, or a
/// word of its message or of its statement (squawk's findings name their
/// table only there).
fn about(f: &Finding, object: &str) -> bool {
    let want = bare(object);
    let named = OBJECT_KEYS.iter().any(|k| {
        f.evidence
            .get(*k)
            .and_then(|v| v.as_str())
            .is_some_and(|v| v.split([',', ' ']).any(|part| bare(part) == want))
    });
    let statement = f.location.as_ref().map_or("", |l| l.excerpt.as_str());
    named
        || [f.message.as_str(), statement].iter().any(|text| {
            text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == '"'))
                .any(|word| !word.is_empty() && bare(word.trim_end_matches('.')) == want)
        })
}

/// Holds every waiver against the finished `report` on `today`: marks the
/// findings they accept, adds a warning for each stale or expired one,
/// and recomputes the verdict.
pub fn apply(report: &mut Report, waivers: &[Waiver], today: NaiveDate) {
    let mut notes = Vec::new();
    for w in waivers {
        let label = report.label(w.migration);
        let about = w
            .object
            .as_ref()
            .map_or(String::new(), |o| format!(" on {o}"));
        if let Some(until) = w.until.filter(|u| *u < today) {
            notes.push(w.finding(
                report,
                "expired",
                format!(
                    "{} {}{about} of {label} ({}) expired on {until}: it accepts nothing, the finding stands",
                    w.form, w.id, w.place()
                ),
                "review the finding again: fix the migration, or renew the waiver with a new `until` and reason",
            ));
            continue;
        }
        let acceptance = Acceptance {
            reason: w.reason.clone(),
            by: format!("{} at {}", w.form, w.place()),
            until: w.until.map(|u| u.to_string()),
        };
        let mut matched = 0;
        for f in report.findings.iter_mut().filter(|f| w.accepts(f)) {
            f.accepted = Some(acceptance.clone());
            matched += 1;
        }
        // A check that did not judge the migration (`--static-only`, a
        // rehearsal that stopped before it) cannot say the waiver is stale.
        let check = w.id.split('.').next().unwrap_or_default();
        let judged = report
            .checks
            .iter()
            .any(|c| c.check == check && c.migration == Some(w.migration))
            || report
                .findings
                .iter()
                .any(|f| f.check == check && f.migration == Some(w.migration));
        if matched == 0 && judged {
            let scope = if w.lines.is_some() {
                "on the statement after it"
            } else {
                "in that migration"
            };
            notes.push(w.finding(
                report,
                "stale",
                format!(
                    "stale waiver: {} {}{about} of {label} ({}) matches no finding {scope}",
                    w.form,
                    w.id,
                    w.place()
                ),
                "remove it, or name the finding (and object) the migration has: a waiver that accepts nothing hides nothing today but would hide a new finding tomorrow",
            ));
        }
    }
    report.findings.extend(notes);
    report.finish();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn day(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    /// A waiver of V3: the file's own when it covers `lines` (a
    /// `-- rollsafe:accept` covers the lines of its file only), else
    /// `rollsafe.toml`'s.
    fn waiver(id: &str, object: Option<&str>, lines: Option<(usize, usize)>) -> Waiver {
        Waiver {
            migration: 3,
            id: id.into(),
            object: object.map(String::from),
            reason: "a 200-row table".into(),
            until: None,
            lines,
            file: match lines {
                Some(_) => "migrations/V3__b.sql".into(),
                None => "rollsafe.toml".into(),
            },
            line: 7,
            form: "[[accept]]",
        }
    }

    #[test]
    fn an_accepted_error_passes_keeps_its_place_and_is_counted() {
        let mut r = crate::report::sample_report();
        assert!(!r.passed);
        let w = waiver("rewrite.table-rewritten", Some("jobs"), Some((4, 4)));
        apply(&mut r, &[w], day("2026-01-01"));
        assert!(r.passed);
        let f = r
            .findings
            .iter()
            .find(|f| f.id == "rewrite.table-rewritten")
            .unwrap();
        assert_eq!(f.severity, Severity::Error);
        let a = f.accepted.as_ref().unwrap();
        assert_eq!(a.reason, "a 200-row table");
        assert_eq!(a.by, "[[accept]] at migrations/V3__b.sql:7");
        assert_eq!(r.count(Severity::Error), 0);
        assert_eq!(r.accepted(), 1);
        assert!(r
            .verdict()
            .1
            .contains("0 error(s), 1 warning(s), 1 accepted"));
    }

    #[test]
    fn another_id_object_or_statement_is_stale_and_the_error_stands() {
        for w in [
            waiver("locks.blocking-index-build", None, None),
            waiver("rewrite.table-rewritten", Some("books"), None),
            waiver("rewrite.table-rewritten", None, Some((9, 12))),
            // Its lines, in another file (a callback run with V3).
            Waiver {
                file: "migrations/afterEachMigrate__grants.sql".into(),
                ..waiver("rewrite.table-rewritten", Some("jobs"), Some((4, 4)))
            },
        ] {
            let mut r = crate::report::sample_report();
            apply(&mut r, std::slice::from_ref(&w), day("2026-01-01"));
            assert!(!r.passed, "{w:?}");
            let stale: Vec<_> = r
                .findings
                .iter()
                .filter(|f| f.id == "accept.stale")
                .collect();
            assert_eq!(stale.len(), 1, "{w:?}");
            assert_eq!(stale[0].severity, Severity::Warn);
            assert!(
                stale[0].message.contains(&format!("{}:7", w.file)),
                "{}",
                stale[0].message
            );
            assert_eq!(stale[0].location.as_ref().unwrap().line, 7);
        }
    }

    #[test]
    fn an_object_is_matched_in_evidence_message_or_statement() {
        let f = Finding::new(
            "static",
            "prefer-bigint-over-int",
            Severity::Warn,
            Some(3),
            "32-bit",
        )
        .evidence("flagged", "integer")
        .at(Some(Location {
            file: "V3__b.sql".into(),
            line: 1,
            column: 20,
            excerpt: "CREATE TABLE public.plants ( id integer".into(),
        }));
        assert!(about(&f, "plants") && about(&f, "\"Plants\"") && about(&f, "public.plants"));
        assert!(!about(&f, "benches"));
        let g = Finding::new("locks", "x", Severity::Error, Some(3), "builds an index")
            .evidence("table", "app.jobs");
        assert!(about(&g, "jobs") && !about(&g, "job"));
    }

    #[test]
    fn a_waiver_of_a_check_that_did_not_judge_the_migration_is_not_stale() {
        let mut r = crate::report::sample_report();
        let mut w = waiver("backfill.rows-not-ready", None, None);
        w.migration = 3;
        apply(&mut r, &[w], day("2026-01-01"));
        assert!(!r.findings.iter().any(|f| f.id == "accept.stale"));
    }

    #[test]
    fn past_its_date_a_waiver_accepts_nothing() {
        let mut w = waiver("rewrite.table-rewritten", None, None);
        w.until = Some(day("2025-12-31"));
        let mut r = crate::report::sample_report();
        apply(&mut r, std::slice::from_ref(&w), day("2025-12-31"));
        assert!(r.passed, "accepted on its last day");
        let mut r = crate::report::sample_report();
        apply(&mut r, &[w], day("2026-01-01"));
        assert!(!r.passed);
        let expired: Vec<_> = r
            .findings
            .iter()
            .filter(|f| f.id == "accept.expired")
            .collect();
        assert_eq!(expired.len(), 1);
        assert!(expired[0].message.contains("expired on 2025-12-31"));
    }

    #[test]
    fn a_comment_covers_the_statement_after_it_or_the_whole_file_above_the_first() {
        let sql = "-- rollsafe:accept rewrite.table-rewritten -- whole file\nCREATE TABLE a (n int);\n-- rollsafe:accept locks.blocking-index-build a -- small\nCREATE INDEX a_n\n  ON a (n);\n-- rollsafe:accept locks.x -- after everything\n";
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("V1__a.sql"), sql).unwrap();
        let catalog = Catalog::from_dir(dir.path()).unwrap();
        let m = &catalog.migrations()[0];
        let w = Waiver::in_file(m, "migrations/V1__a.sql");
        let lines: Vec<_> = w.iter().map(|w| (w.line, w.lines)).collect();
        assert_eq!(lines, [(1, None), (3, Some((4, 5))), (6, Some((6, 6)))]);
        assert_eq!(w[1].object.as_deref(), Some("a"));
        assert_eq!(w[1].reason, "small");
    }
}

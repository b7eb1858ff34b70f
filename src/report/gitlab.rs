//! GitLab Code Quality JSON (`artifacts: reports: codequality:`): an array
//! of issues, each with `description`, `check_name` (the finding's id),
//! `fingerprint`, `severity` and `location.path` / `location.lines.begin`,
//! which GitLab shows in the merge request widget and on the diff.
//!
//! GitLab compares the fingerprints of the source and target branches'
//! reports to say which issues are new and which are fixed, so a
//! fingerprint must not change between two runs that found the same thing:
//! it hashes (SHA-256) the id, the file, the line and the statement's
//! excerpt, never a message or evidence (they carry measured times and
//! row counts). Two findings of one id at one place (one per app, say) are
//! told apart by their order among such twins, which is stable.
//!
//! Severities: error → critical (it fails the pipeline), warn → minor,
//! skipped → info (a check that could not measure stays visible), an
//! accepted finding → info, its description starting `accepted error
//! (<reason>; <where the waiver is>)`. Passing
//! measurements (info) are not issues and are left out. A run-wide finding
//! points at the migrations' directory, line 1.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{Finding, Location, Report, Severity};

#[derive(Serialize)]
struct Issue<'a> {
    description: String,
    check_name: &'a str,
    fingerprint: String,
    severity: &'static str,
    location: IssueLocation,
}

#[derive(Serialize)]
struct IssueLocation {
    path: String,
    lines: Lines,
}

#[derive(Serialize)]
struct Lines {
    begin: usize,
}

fn severity(s: Severity) -> Option<&'static str> {
    match s {
        Severity::Error => Some("critical"),
        Severity::Warn => Some("minor"),
        Severity::Skipped => Some("info"),
        Severity::Info => None,
    }
}

/// Where a finding is, for GitLab (which needs a path for every issue).
pub(super) fn place(report: &Report, f: &Finding) -> Location {
    report.location_of(f).unwrap_or_else(|| Location {
        file: report
            .migrations
            .first()
            .and_then(|m| std::path::Path::new(&m.path).parent())
            .map(|d| d.display().to_string())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| ".".to_string()),
        line: 1,
        column: 1,
        excerpt: String::new(),
    })
}

pub(super) fn fingerprint(id: &str, at: &Location, twin: usize) -> String {
    let mut h = Sha256::new();
    // NUL-separated, so no two different keys hash the same bytes.
    for part in [
        id,
        &at.file,
        &at.line.to_string(),
        &at.excerpt,
        &twin.to_string(),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

pub fn render_gitlab(report: &Report) -> String {
    let mut seen: Vec<String> = Vec::new();
    let issues: Vec<Issue> = report
        .findings
        .iter()
        .filter_map(|f| {
            // An accepted finding stays in the merge request, as info.
            let severity = match f.accepted {
                Some(_) => "info",
                None => severity(f.severity)?,
            };
            let at = place(report, f);
            let key = format!("{}\0{}\0{}\0{}", f.id, at.file, at.line, at.excerpt);
            let twin = seen.iter().filter(|k| **k == key).count();
            seen.push(key);
            let mut description = if f.advice.is_empty() {
                f.message.clone()
            } else {
                format!("{} (advice: {})", f.message, f.advice)
            };
            if let Some(a) = &f.accepted {
                description = format!(
                    "accepted {} ({}; {}): {description}",
                    f.severity, a.reason, a.by
                );
            }
            Some(Issue {
                description,
                check_name: &f.id,
                fingerprint: fingerprint(&f.id, &at, twin),
                severity,
                location: IssueLocation {
                    path: at.file,
                    lines: Lines { begin: at.line },
                },
            })
        })
        .collect();
    let mut s = serde_json::to_string_pretty(&issues).expect("issues always serialise");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues(r: &Report) -> Vec<serde_json::Value> {
        serde_json::from_str::<serde_json::Value>(&render_gitlab(r))
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    #[test]
    fn issues_have_gitlab_fields_and_severities() {
        let r = super::super::sample_report();
        let issues = issues(&r);
        // error, warn, skipped; not the info measurement.
        assert_eq!(issues.len(), 3, "{issues:?}");
        for i in &issues {
            for key in ["description", "check_name", "fingerprint", "severity"] {
                assert!(i[key].is_string(), "{key} missing: {i}");
            }
            assert!(i["location"]["path"].is_string(), "{i}");
            assert!(
                i["location"]["lines"]["begin"].as_u64().unwrap() >= 1,
                "{i}"
            );
            assert_eq!(i["fingerprint"].as_str().unwrap().len(), 64);
        }
        let by_id = |id: &str| issues.iter().find(|i| i["check_name"] == id).unwrap();
        let err = by_id("rewrite.table-rewritten");
        assert_eq!(err["severity"], "critical");
        assert_eq!(err["location"]["path"], "migrations/V3__b.sql");
        assert_eq!(err["location"]["lines"]["begin"], 4);
        assert_eq!(
            err["description"],
            "jobs rewritten <&> (advice: use a constant default)"
        );
        assert_eq!(by_id("locks.lock-modes")["severity"], "minor");
        assert_eq!(by_id("locks.lock-modes")["location"]["lines"]["begin"], 1);
        assert_eq!(by_id("locks.probe-skipped")["severity"], "info");
    }

    #[test]
    fn fingerprints_ignore_measurements_but_not_the_place() {
        let a = super::super::sample_report();
        let mut b = a.clone();
        for f in &mut b.findings {
            f.message = format!("{} (held for 1234.5 ms at 10000 rows)", f.message);
            f.evidence.insert("rows".into(), 10_000.into());
            f.evidence.insert("ms".into(), 99.9.into());
        }
        b.duration_ms = 99_999;
        b.rows = 10_000;
        b.migrations[1].statements[0].ms_at_n_rows = 1234.5;
        let prints = |r: &Report| -> Vec<String> {
            issues(r)
                .iter()
                .map(|i| i["fingerprint"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(prints(&a), prints(&b));
        // All different within a report.
        let mut unique = prints(&a);
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 3);

        let mut moved = a.clone();
        for f in &mut moved.findings {
            if let Some(l) = &mut f.location {
                l.line = 5;
            }
        }
        let (pa, pm) = (prints(&a), prints(&moved));
        assert_ne!(pa[1], pm[1], "the error moved to line 5");
        assert_eq!(pa[0], pm[0], "the skipped finding did not move");

        // Twins (same id, same place) get different, stable fingerprints.
        let mut twins = a.clone();
        let err = twins
            .findings
            .iter()
            .find(|f| f.severity == Severity::Error)
            .unwrap()
            .clone();
        twins.findings.push(err);
        let pt = prints(&twins);
        assert_eq!(pt.len(), 4);
        assert_ne!(pt[1], pt[3]);
        assert_eq!(pt[..3], pa[..]);
    }
}

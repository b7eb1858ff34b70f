//! One report from rehearsals of the same migrations on several PostgreSQL
//! majors (`verify --postgres-version 13,15,17,18`).
//!
//! A finding seen on every major is listed once; one seen on some says
//! where ("… (on PostgreSQL 13 only)") and carries the majors. Findings are
//! the same when their id, migration, severity and statement line are; the
//! first major's message and evidence stand for all (measured numbers
//! differ from server to server). The run passed only if it passed on
//! every major.

use super::{CheckRun, Report};

/// Evidence keys that say *what* a finding is about (an error's SQLSTATE or
/// message, the app, statement, table or column), as opposed to what was
/// measured.
const IDENTITY: &[&str] = &["sqlstate", "error", "app", "statement", "table", "column"];

/// Merges `runs` (major, its report), in the order given.
pub fn merge_majors(runs: Vec<(u32, Report)>) -> Report {
    let all: Vec<u32> = runs.iter().map(|(m, _)| *m).collect();
    let mut iter = runs.into_iter();
    let Some((first_major, first)) = iter.next() else {
        return Report::new("rollsafe verify");
    };
    let mut merged = first.clone();
    merged.findings.clear();
    merged.checks.clear();
    let mut sandboxes = Vec::new();
    let mut servers = Vec::new();
    let mut proven_everywhere = true;
    for (major, r) in std::iter::once((first_major, first)).chain(iter) {
        sandboxes.push(format!("PG{major}: {}", r.sandbox));
        servers.push(short_version(&r.server_version));
        proven_everywhere &= !r.safe_order.is_empty();
        merged.duration_ms = merged.duration_ms.max(r.duration_ms);
        for c in r.checks {
            if !merged.checks.iter().any(|x: &CheckRun| x == &c) {
                merged.checks.push(c);
            }
        }
        for f in r.findings {
            // The same finding: same check result at the same place about
            // the same thing (the evidence that names what failed, never
            // measured numbers, which differ from server to server).
            let key = |x: &super::Finding| {
                (
                    x.id.clone(),
                    x.migration,
                    x.severity,
                    x.location.as_ref().map(|l| l.line),
                    IDENTITY
                        .iter()
                        .map(|k| x.evidence.get(*k).map(|v| v.to_string()))
                        .collect::<Vec<_>>(),
                )
            };
            match merged.findings.iter_mut().find(|e| key(e) == key(&f)) {
                Some(existing) => existing.majors.push(major),
                None => {
                    let mut f = f;
                    f.majors = vec![major];
                    merged.findings.push(f);
                }
            }
        }
    }
    for f in &mut merged.findings {
        if f.majors.len() < all.len() {
            let list = f
                .majors
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            f.message.push_str(&format!(" (on PostgreSQL {list} only)"));
        }
    }
    merged.sandbox = sandboxes.join("; ");
    merged.server_version = servers.join("; ");
    if !proven_everywhere {
        merged.safe_order.clear();
    }
    merged.finish();
    if !merged.passed {
        merged.safe_order.clear();
    }
    merged
}

/// "PostgreSQL 13.23 (Debian …) on x86_64…" → "PostgreSQL 13.23".
fn short_version(v: &str) -> String {
    v.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Finding, Severity};

    #[test]
    fn findings_on_some_majors_say_where() {
        let report = |major: u32, with_error: bool| {
            let mut r = Report::new("rollsafe verify");
            r.server_version = format!("PostgreSQL {major}.1 (Debian) on x86_64");
            r.safe_order = vec!["apply V3".into()];
            r.findings.push(Finding::new(
                "apply",
                "applies",
                Severity::Info,
                Some(3),
                "applies",
            ));
            if with_error {
                r.findings.push(Finding::new(
                    "compat",
                    "statement-fails",
                    Severity::Error,
                    Some(3),
                    "MERGE fails",
                ));
            }
            r.finish();
            if !r.passed {
                r.safe_order.clear();
            }
            (major, r)
        };
        let m = merge_majors(vec![report(13, true), report(15, false), report(17, false)]);
        assert!(!m.passed);
        assert_eq!(
            m.server_version,
            "PostgreSQL 13.1; PostgreSQL 15.1; PostgreSQL 17.1"
        );
        let err = m.errors().next().unwrap();
        assert_eq!(err.majors, [13]);
        assert!(
            err.message.ends_with("(on PostgreSQL 13 only)"),
            "{}",
            err.message
        );
        let ok = m.findings.iter().find(|f| f.id == "apply.applies").unwrap();
        assert_eq!(ok.majors, [13, 15, 17]);
        assert_eq!(ok.message, "applies");
        assert!(m.safe_order.is_empty());
        // Different failures under one id stay apart.
        let failing = |major: u32, sqlstate: &str| {
            let mut r = Report::new("rollsafe verify");
            r.findings.push(
                Finding::new(
                    "apply",
                    "fails-on-empty",
                    Severity::Error,
                    Some(4),
                    sqlstate,
                )
                .evidence("sqlstate", sqlstate),
            );
            r.finish();
            (major, r)
        };
        let m = merge_majors(vec![failing(13, "42601"), failing(18, "23502")]);
        assert_eq!(m.findings.len(), 2);
        assert_eq!(m.findings[1].majors, [18]);
        let m = merge_majors(vec![report(15, false), report(17, false)]);
        assert!(m.passed && m.safe_order == ["apply V3"]);
    }
}

//! One report from rehearsals of the same migrations on several PostgreSQL
//! majors (`verify --postgres-version 13,15,17,18`).
//!
//! A finding seen on every major is listed once; one seen on some says
//! where ("… (on PostgreSQL 13 only)") and carries the majors. Findings are
//! the same when their identity is: id, migration, severity, place in the
//! file, and the evidence that names what they are about (app, statement,
//! table, index, constraint, the app versions of a pair, a directive's
//! line…), never measured numbers, which differ from server to server. The
//! first major's message and evidence stand for all. A finding of one
//! major stands for at most one of another: two findings of one report
//! (two batched updates in one file) stay two, whatever their evidence.
//! The run passed only if it passed on every major.

use super::{CheckRun, Report};

/// Evidence keys that say *what* a finding is about (an error's SQLSTATE or
/// message, the app, statement, table or column), as opposed to what was
/// measured.
const IDENTITY: &[&str] = &[
    "sqlstate",
    "error",
    "app",
    "statement",
    "table",
    "column",
    "param",
    "index",
    "constraint",
    "constraints",
    "indexes",
    "predicate",
    "older",
    "newer",
    "line",
];

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
                    x.location
                        .as_ref()
                        .map(|l| (l.file.clone(), l.line, l.column)),
                    IDENTITY
                        .iter()
                        .map(|k| x.evidence.get(*k).map(|v| v.to_string()))
                        .collect::<Vec<_>>(),
                )
            };
            // The first one of the same identity this major has not
            // matched yet: a report's own findings never merge.
            match merged
                .findings
                .iter_mut()
                .find(|e| !e.majors.contains(&major) && key(e) == key(&f))
            {
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

    #[test]
    fn distinct_findings_of_one_report_are_never_merged() {
        // Two batched updates of one file (same id, no location), and two
        // cross-version pairs, on two majors.
        let report = |major: u32| {
            let mut r = Report::new("rollsafe verify");
            for line in [3, 7] {
                r.findings.push(
                    Finding::new(
                        "backfill",
                        "batched-update-complete",
                        Severity::Info,
                        Some(4),
                        format!("batched update of jobs (line {line})"),
                    )
                    .evidence("table", "jobs")
                    .evidence("line", line),
                );
            }
            for (older, newer) in [("v1", "v2"), ("v1", "v3")] {
                r.findings.push(
                    Finding::new("compat", "cross-version", Severity::Info, Some(4), "ok")
                        .evidence("older", older)
                        .evidence("newer", newer),
                );
            }
            // Same identity twice in one report (nothing tells them
            // apart): still two.
            for _ in 0..2 {
                r.findings.push(Finding::new(
                    "locks",
                    "measured",
                    Severity::Info,
                    Some(4),
                    "x",
                ));
            }
            r.finish();
            (major, r)
        };
        let m = merge_majors(vec![report(15), report(17)]);
        assert_eq!(m.findings.len(), 6, "{:#?}", m.findings);
        assert!(m.findings.iter().all(|f| f.majors == [15, 17]));
        let lines: Vec<String> = m
            .findings
            .iter()
            .filter(|f| f.id == "backfill.batched-update-complete")
            .map(|f| f.message.clone())
            .collect();
        assert_eq!(
            lines,
            [
                "batched update of jobs (line 3)",
                "batched update of jobs (line 7)"
            ]
        );
        // One major with a finding the other lacks: kept, and says where.
        let mut short = report(13);
        short.1.findings.truncate(5);
        let m = merge_majors(vec![report(15), short]);
        assert_eq!(m.findings.len(), 6);
        assert_eq!(m.findings[5].majors, [15]);
    }
}

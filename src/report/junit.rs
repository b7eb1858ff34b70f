//! JUnit XML (quick-junit): one test suite per check, one test case per
//! (check, migration) that ran. Error findings make the case a failure
//! carrying their messages; warnings and measurements go to the case's
//! system-out so CI shows them next to the case, as do accepted errors
//! (`accepted (<reason>, <where the waiver is>): error: …`), which do not
//! fail their case.

use quick_junit::{NonSuccessKind, Property, TestCase, TestCaseStatus, TestSuite};

use super::{Finding, Report, Severity};

fn case_name(report: &Report, check: &str, migration: Option<i32>) -> String {
    match migration {
        Some(v) => format!("{check} {}", report.label(v)),
        None => check.to_string(),
    }
}

pub fn render_junit(report: &Report) -> String {
    let mut junit = quick_junit::Report::new(report.tool.clone());
    junit.set_time(std::time::Duration::from_millis(report.duration_ms));
    // Checks in order of first appearance; findings of a (check, migration)
    // that has no CheckRun (e.g. run-wide) still get a case.
    let mut runs: Vec<(String, Option<i32>, String)> = report
        .checks
        .iter()
        .map(|c| (c.check.clone(), c.migration, c.description.clone()))
        .collect();
    for f in &report.findings {
        if !runs
            .iter()
            .any(|(c, m, _)| *c == f.check && *m == f.migration)
        {
            runs.push((f.check.clone(), f.migration, String::new()));
        }
    }
    let mut suite_names: Vec<String> = Vec::new();
    for (c, _, _) in &runs {
        if !suite_names.contains(c) {
            suite_names.push(c.clone());
        }
    }
    for suite_name in suite_names {
        let mut suite = TestSuite::new(suite_name.clone());
        suite.add_property(Property::new("sandbox", report.sandbox.clone()));
        for (check, migration, description) in runs.iter().filter(|(c, _, _)| *c == suite_name) {
            let findings: Vec<_> = report
                .findings
                .iter()
                .filter(|f| f.check == *check && f.migration == *migration)
                .collect();
            let status = case_status(check, &findings);
            let mut case = TestCase::new(case_name(report, check, *migration), status);
            case.set_classname(format!("rollsafe.{check}"));
            if !description.is_empty() {
                case.add_property(Property::new("description", description.clone()));
            }
            let out: Vec<String> = findings
                .iter()
                .filter(|f| f.severity != Severity::Error || f.accepted.is_some())
                .map(|f| {
                    format!(
                        "{}{}: [{}] {} {}{}",
                        f.accepted.as_ref().map_or(String::new(), |a| format!(
                            "accepted ({}, {}): ",
                            a.reason, a.by
                        )),
                        f.severity,
                        f.id,
                        f.message,
                        serde_json::Value::Object(f.evidence.clone()),
                        if f.advice.is_empty() {
                            String::new()
                        } else {
                            format!(" advice: {}", f.advice)
                        }
                    )
                })
                .collect();
            if !out.is_empty() {
                case.set_system_out(out.join("\n"));
            }
            suite.add_test_case(case);
        }
        junit.add_test_suite(suite);
    }
    junit.to_string().expect("junit serialises")
}

/// A case's status: skipped when the check judged nothing here or part of
/// it could not measure, failed with the errors' messages, else passed.
fn case_status(check: &str, findings: &[&Finding]) -> TestCaseStatus {
    // An accepted error does not fail its case (system-out says why).
    let errors: Vec<_> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error && f.accepted.is_none())
        .collect();
    let skipped: Vec<_> = findings
        .iter()
        .filter(|f| f.severity == Severity::Skipped)
        .collect();
    if findings.is_empty() {
        // It ran but had nothing to judge (compat with no app):
        // nothing was measured, so nothing passed.
        let mut s = TestCaseStatus::skipped();
        s.set_message(format!(
            "{check} ran nothing here (no finding: e.g. no app to replay)"
        ));
        s
    } else if errors.is_empty() && !skipped.is_empty() {
        // Part of the check could not measure: not a pass.
        let mut s = TestCaseStatus::skipped();
        s.set_message(
            skipped
                .iter()
                .map(|f| format!("[{}] {}", f.id, f.message))
                .collect::<Vec<_>>()
                .join("; "),
        );
        s
    } else if errors.is_empty() {
        TestCaseStatus::success()
    } else {
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
        s.set_message(
            errors
                .iter()
                .map(|f| format!("[{}] {}", f.id, f.message))
                .collect::<Vec<_>>()
                .join("; "),
        );
        s.set_type(errors[0].id.clone());
        s.set_description(
            errors
                .iter()
                .map(|f| {
                    format!(
                        "[{}] {}\nevidence: {}\nadvice: {}",
                        f.id,
                        f.message,
                        serde_json::Value::Object(f.evidence.clone()),
                        f.advice
                    )
                })
                .collect::<Vec<_>>()
                .join("\n\n"),
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_case_per_check_and_migration_failures_carry_messages() {
        let r = super::super::sample_report();
        let xml = render_junit(&r);
        let parsed = quick_junit::Report::deserialize_from_str(&xml).unwrap();
        assert_eq!(parsed.tests, 4);
        assert_eq!(parsed.failures, 1);
        let skipped_case = parsed.test_suites[1]
            .test_cases
            .iter()
            .find(|c| c.name.as_str() == "locks V2")
            .unwrap();
        assert!(
            matches!(&skipped_case.status, TestCaseStatus::Skipped { message: Some(m), .. } if m.as_str().contains("locks.probe-skipped")),
            "{:?}",
            skipped_case.status
        );
        let rewrite = &parsed.test_suites[0];
        assert_eq!(rewrite.name.as_str(), "rewrite");
        let failed = rewrite
            .test_cases
            .iter()
            .find(|c| c.name.as_str() == "rewrite V3")
            .unwrap();
        match &failed.status {
            TestCaseStatus::NonSuccess { message, .. } => {
                let m = message.as_ref().unwrap().as_str();
                assert!(
                    m.contains("rewrite.table-rewritten") && m.contains("<&>"),
                    "{m}"
                );
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        let warned = parsed.test_suites[1]
            .test_cases
            .iter()
            .find(|c| c.name.as_str() == "locks V3")
            .unwrap();
        assert!(matches!(warned.status, TestCaseStatus::Success { .. }));
        assert!(warned
            .system_out
            .as_ref()
            .unwrap()
            .as_str()
            .contains("warn: [locks.lock-modes]"));
    }

    #[test]
    fn a_check_that_ran_nothing_is_skipped_not_passed() {
        let mut r = super::super::sample_report();
        r.checks.push(crate::report::CheckRun {
            check: "compat".into(),
            migration: Some(3),
            description: "the apps' statements on each schema".into(),
        });
        let xml = render_junit(&r);
        let parsed = quick_junit::Report::deserialize_from_str(&xml).unwrap();
        let compat = parsed
            .test_suites
            .iter()
            .find(|s| s.name.as_str() == "compat")
            .unwrap();
        assert!(
            matches!(&compat.test_cases[0].status, TestCaseStatus::Skipped { message: Some(m), .. } if m.as_str().contains("ran nothing")),
            "{:?}",
            compat.test_cases[0].status
        );
    }
}

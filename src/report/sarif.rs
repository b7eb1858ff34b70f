//! SARIF 2.1.0 (OASIS Static Analysis Results Interchange Format), the
//! format GitHub's code scanning takes (`github/codeql-action/upload-sarif`).
//!
//! One run, rollsafe its tool. Every finding id in the report is a rule
//! (`reportingDescriptor`): its id and name the finding id, its short
//! description the description of the check that produced it (the
//! registry's, as the report records it), its help the check's advice.
//! Each finding a reviewer must read is a result: error → `error`, warn →
//! `warning`, skipped → `note` (its message starts `skipped:`: a check that
//! could not measure is never a pass). Each points at the migration file
//! and line as a region (a run-wide finding at the migrations' directory,
//! as GitLab's report does) and carries a partial fingerprint that hashes
//! the id, file, line and statement, never measured numbers, so a finding
//! keeps its identity from run to run. An accepted finding is a result
//! with a suppression (`accepted`, the reason as justification; `inSource`
//! for `-- rollsafe:accept`, `external` for rollsafe.toml). Passing
//! measurements (info) are left out, as in the other formats for machines.
//!
//! Checked against the official 2.1.0 JSON schema by the suite
//! (`tests/fixtures/sarif/`).

use serde_json::{json, Value};

use super::gitlab::{fingerprint, place};
use super::{Finding, Report, Severity};

/// The schema a SARIF 2.1.0 log names (the OASIS errata 01 standard).
const SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// The SARIF level of a finding shown as a result; None for a passing
/// measurement.
fn level(s: Severity) -> Option<&'static str> {
    match s {
        Severity::Error => Some("error"),
        Severity::Warn => Some("warning"),
        Severity::Skipped => Some("note"),
        Severity::Info => None,
    }
}

/// A file path as a URI reference (relative paths stay relative, so code
/// scanning resolves them against the checkout).
fn uri(path: &str) -> String {
    let mut out = String::new();
    for c in path.chars() {
        match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '-' | '.' | '_' | '~' | '/' | '+' | '@' => {
                out.push(c)
            }
            '\\' => out.push('/'),
            c => {
                let mut buf = [0; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
    out
}

/// A rule for each finding id of `shown`, in order of first appearance.
fn rules(report: &Report, shown: &[&Finding]) -> Vec<Value> {
    let mut ids: Vec<&str> = Vec::new();
    for f in shown {
        if !ids.contains(&f.id.as_str()) {
            ids.push(&f.id);
        }
    }
    ids.into_iter()
        .map(|id| {
            let first = shown.iter().find(|f| f.id == id).expect("an id of shown");
            let description = report
                .checks
                .iter()
                .find(|c| c.check == first.check && !c.description.is_empty())
                .map_or_else(
                    || format!("rollsafe's {} check", first.check),
                    |c| c.description.clone(),
                );
            let help = shown
                .iter()
                .find(|f| f.id == id && !f.advice.is_empty())
                .map_or_else(|| description.clone(), |f| f.advice.clone());
            json!({
                "id": id,
                "name": id,
                "shortDescription": { "text": description },
                "help": { "text": help },
                "properties": { "check": first.check },
            })
        })
        .collect()
}

/// One finding as a result: level, message, place, fingerprint and, when
/// accepted, its suppression.
fn result(report: &Report, f: &Finding, rule_index: usize, twin: usize) -> Value {
    let at = place(report, f);
    let mut message = match f.severity {
        Severity::Skipped => format!("skipped: {}", f.message),
        _ => f.message.clone(),
    };
    if !f.advice.is_empty() {
        message.push_str(&format!(" (advice: {})", f.advice));
    }
    let mut region = json!({ "startLine": at.line.max(1) });
    if f.location.is_some() {
        region["startColumn"] = json!(at.column.max(1));
        if !at.excerpt.is_empty() {
            region["snippet"] = json!({ "text": at.excerpt });
        }
    }
    let mut result = json!({
        "ruleId": f.id,
        "ruleIndex": rule_index,
        "level": level(f.severity).unwrap_or("none"),
        "message": { "text": message },
        "locations": [{
            "physicalLocation": {
                "artifactLocation": { "uri": uri(&at.file) },
                "region": region,
            }
        }],
        "partialFingerprints": { "rollsafe/v1": fingerprint(&f.id, &at, twin) },
        "properties": {
            "severity": f.severity.to_string(),
            "migration": f.migration.map(|v| report.label(v)),
            "evidence": Value::Object(f.evidence.clone()),
        },
    });
    if let Some(a) = &f.accepted {
        let in_source = a.by.starts_with("-- rollsafe:accept");
        result["suppressions"] = json!([{
            "kind": if in_source { "inSource" } else { "external" },
            "status": "accepted",
            "justification": format!("{} ({})", a.reason, a.by),
        }]);
    }
    result
}

pub fn render_sarif(report: &Report) -> String {
    let shown: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| level(f.severity).is_some())
        .collect();
    let rules = rules(report, &shown);
    let mut seen: Vec<String> = Vec::new();
    let results: Vec<Value> = shown
        .iter()
        .map(|f| {
            let at = place(report, f);
            let key = format!("{}\0{}\0{}\0{}", f.id, at.file, at.line, at.excerpt);
            let twin = seen.iter().filter(|k| **k == key).count();
            seen.push(key);
            let index = rules
                .iter()
                .position(|r| r["id"] == f.id.as_str())
                .expect("a rule for every shown id");
            result(report, f, index, twin)
        })
        .collect();
    let could_not_run = report
        .findings
        .iter()
        .any(|f| f.id == "verify.could-not-run");
    let (verdict, tally) = report.verdict();
    let log = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "rollsafe",
                    "version": env!("CARGO_PKG_VERSION"),
                    "rules": rules,
                }
            },
            "invocations": [{
                "executionSuccessful": !could_not_run,
                "commandLine": report.tool,
            }],
            "results": results,
            "properties": {
                "verdict": format!("{verdict}{tally}"),
                "passed": report.passed,
                "accepted": report.accepted(),
                "source": report.source,
            },
        }]
    });
    let mut s = serde_json::to_string_pretty(&log).expect("a SARIF log always serialises");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Acceptance, Finding};

    fn log(r: &Report) -> Value {
        serde_json::from_str(&render_sarif(r)).unwrap()
    }

    #[test]
    fn one_run_rules_for_every_id_and_results_at_their_lines() {
        let r = crate::report::sample_report();
        let v = log(&r);
        assert_eq!(v["version"], "2.1.0");
        let run = &v["runs"][0];
        assert_eq!(run["tool"]["driver"]["name"], "rollsafe");
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        let ids: Vec<&str> = rules.iter().map(|r| r["id"].as_str().unwrap()).collect();
        // error, warn, skipped; not the info measurement.
        assert_eq!(
            ids,
            [
                "locks.probe-skipped",
                "rewrite.table-rewritten",
                "locks.lock-modes"
            ]
        );
        let rewritten = &rules[1];
        assert_eq!(rewritten["shortDescription"]["text"], "rewrite description");
        assert_eq!(rewritten["help"]["text"], "use a constant default");
        let results = run["results"].as_array().unwrap();
        let error = results
            .iter()
            .find(|x| x["ruleId"] == "rewrite.table-rewritten")
            .unwrap();
        assert_eq!(error["level"], "error");
        assert_eq!(error["ruleIndex"], 1);
        let loc = &error["locations"][0]["physicalLocation"];
        assert_eq!(loc["artifactLocation"]["uri"], "migrations/V3__b.sql");
        assert_eq!(loc["region"]["startLine"], 4);
        let skipped = results
            .iter()
            .find(|x| x["ruleId"] == "locks.probe-skipped")
            .unwrap();
        assert_eq!(skipped["level"], "note");
        assert!(skipped["message"]["text"]
            .as_str()
            .unwrap()
            .starts_with("skipped: "));
        assert!(results.iter().all(|x| x.get("suppressions").is_none()));
    }

    #[test]
    fn an_accepted_finding_is_a_suppressed_result_with_its_reason() {
        let mut r = crate::report::sample_report();
        for f in r
            .findings
            .iter_mut()
            .filter(|f| f.id == "rewrite.table-rewritten")
        {
            f.accepted = Some(Acceptance {
                reason: "nightly rebuild".into(),
                by: "-- rollsafe:accept at migrations/V3__b.sql:3".into(),
                until: None,
            });
        }
        r.findings.push(Finding::new(
            "verify",
            "x",
            Severity::Warn,
            None,
            "run-wide",
        ));
        let v = log(&r);
        let results = v["runs"][0]["results"].as_array().unwrap();
        let accepted = results
            .iter()
            .find(|x| x["ruleId"] == "rewrite.table-rewritten")
            .unwrap();
        assert_eq!(accepted["level"], "error");
        let s = &accepted["suppressions"][0];
        assert_eq!(s["kind"], "inSource");
        assert_eq!(s["status"], "accepted");
        assert!(s["justification"]
            .as_str()
            .unwrap()
            .starts_with("nightly rebuild"));
        // A run-wide finding points at the migrations' directory.
        let wide = results.iter().find(|x| x["ruleId"] == "verify.x").unwrap();
        assert_eq!(
            wide["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            "migrations"
        );
    }

    #[test]
    fn paths_become_uri_references() {
        assert_eq!(uri("migrations/V1__a b.sql"), "migrations/V1__a%20b.sql");
        assert_eq!(uri("db\\V1.sql"), "db/V1.sql");
        assert_eq!(uri("/tmp/é.sql"), "/tmp/%C3%A9.sql");
    }
}

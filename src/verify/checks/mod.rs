//! The rehearsal's checks, one module each, and their registry [`ALL`].
//! Every check has a stable name (the prefix of its finding ids:
//! `rewrite.table-rewritten` lives in `rewrite.rs`), a one-line
//! description, and one entry point with one signature: it turns a
//! migration's [`MigrationEvidence`] into findings with evidence and
//! advice, reading nothing else (no database: the evidence module's unit
//! test holds every file here to that). The stages measure; after the last
//! one, verify judges every migration's evidence with every check of
//! [`ALL`], in order, and the report records each check that had evidence
//! to judge. A new check on existing evidence is one file and one line of
//! [`ALL`].
//!
//! A project's own checks (the shipped project's `dao`) run on a database
//! of their own in the final stage, through its apps' drivers
//! (`crate::app::ProjectRule`), and judge themselves: they are not part of
//! this registry, but what they found is run evidence
//! ([`RunEvidence::project_checks`]) and leaves through [`judge`] like
//! every other finding.

pub mod apply;
pub mod backfill;
pub mod compat;
pub mod locks;
pub mod phrases;
pub mod plan;
pub mod post;
pub mod rewrite;
/// `static` is a keyword: the module is `r#static`, its file `static.rs`.
pub mod r#static;

use std::collections::BTreeMap;

use crate::catalog::Script;
use crate::report::{CheckRun, Finding, Severity};
use crate::verify::evidence::{Context, MigrationEvidence, RunEvidence};

/// One check of the registry.
pub struct Check {
    /// The prefix of its finding ids.
    pub name: &'static str,
    pub description: &'static str,
    /// Whether a migration's evidence holds what it judges: the report
    /// lists it as run for that migration.
    pub ran: fn(&MigrationEvidence) -> bool,
    pub evaluate: fn(&MigrationEvidence, &Context) -> Vec<Finding>,
    /// Its judgement of the run as a whole (a `--since` that left nothing
    /// to rehearse, a precheck that died, migrations production sends in
    /// one transaction), when it has one: it reads the run's evidence and
    /// every migration's, in order.
    pub evaluate_run: Option<RunJudgement>,
}

/// A check's judgement of the run as a whole, beside every migration's
/// evidence (by version, in order).
pub type RunJudgement =
    fn(&RunEvidence, &BTreeMap<i32, MigrationEvidence>, &Context) -> Vec<Finding>;

/// What the registry made of a run: the checks that had evidence to
/// judge (per migration), and every finding.
#[derive(Debug, Default)]
pub struct Judged {
    pub ran: Vec<CheckRun>,
    pub findings: Vec<Finding>,
}

/// The one judgement: every migration's evidence, in order, by every
/// check of [`ALL`], then the run by each check that judges one. The
/// rehearsal and `--static-only` (whose evidence is the lint alone) both
/// come here.
pub fn judge(
    evidence: &BTreeMap<i32, MigrationEvidence>,
    run: &RunEvidence,
    cx: &Context,
) -> Judged {
    let mut out = Judged::default();
    for e in evidence.values() {
        let mut judged = Vec::new();
        for check in ALL {
            let recorded = out
                .ran
                .iter()
                .any(|r| r.check == check.name && r.migration == Some(e.version));
            if (check.ran)(e) && !recorded {
                out.ran.push(CheckRun {
                    check: check.name.to_string(),
                    migration: Some(e.version),
                    description: check.description.to_string(),
                });
            }
            judged.extend((check.evaluate)(e, cx));
        }
        one_hazard_one_error(&mut judged, &e.sql, &e.callbacks);
        out.findings.extend(judged);
    }
    for judge_run in ALL.iter().filter_map(|c| c.evaluate_run) {
        out.findings.extend(judge_run(run, evidence, cx));
    }
    // The project's own checks judged themselves (plug-ins outside the
    // registry): reported as they ran, after the registry's.
    for (ran, findings) in &run.project_checks {
        out.ran.push(ran.clone());
        out.findings.extend(findings.iter().cloned());
    }
    out
}

/// Every check, in the order it judges.
pub const ALL: &[Check] = &[
    r#static::ENTRY,
    apply::ENTRY,
    plan::ENTRY,
    rewrite::ENTRY,
    locks::ENTRY,
    backfill::ENTRY,
    compat::ENTRY,
    post::ENTRY,
    post::unlogged_table::ENTRY,
];

/// One hazard, one error. A squawk rule the rehearsal confirmed (an
/// error of `static`) on a statement where a measured check found the
/// hazard itself (an error of its own on the same statement of the same
/// migration) is that finding's confirmation, not a second error: the
/// static row becomes info, `confirmed by <id>`, and the measured finding
/// names the rule (`squawk_rules`). Every report and count then sees one
/// error for the hazard. `sql` is the migration's file, which places a
/// static row (the line of the construct squawk flagged) in its statement
/// (measured findings are at the statement's first line); a finding at
/// one of the `callbacks` run with it is placed in that file's.
pub fn one_hazard_one_error(findings: &mut [Finding], sql: &str, callbacks: &[Script]) {
    let spans = |sql: &str| -> Vec<(usize, usize)> {
        crate::sql::split(sql)
            .statements
            .iter()
            .map(|st| (st.line, st.line + st.text.lines().count().saturating_sub(1)))
            .collect()
    };
    // (The file a span list is of: None for the migration's.)
    type Spans<'a> = (Option<&'a str>, Vec<(usize, usize)>);
    let files: Vec<Spans> = std::iter::once((None, spans(sql)))
        .chain(
            callbacks
                .iter()
                .map(|s| (Some(s.file.as_str()), spans(&s.sql))),
        )
        .collect();
    let statement_of = |f: &Finding| {
        let at = f.location.as_ref()?;
        let k = (files.iter())
            .position(|(file, _)| *file == Some(at.file.as_str()))
            .unwrap_or(0);
        let i = (files[k].1.iter()).position(|(a, b)| (*a..=*b).contains(&at.line))?;
        Some((k, i))
    };
    let measured: Vec<(usize, (usize, usize))> = findings
        .iter()
        .enumerate()
        .filter(|(_, f)| f.severity == Severity::Error && f.check != r#static::CHECK)
        .filter_map(|(j, f)| Some((j, statement_of(f)?)))
        .collect();
    for i in 0..findings.len() {
        let f = &findings[i];
        let confirmed = f.check == r#static::CHECK
            && f.severity == Severity::Error
            && f.evidence.get("verdict").and_then(|v| v.as_str()) == Some("confirmed");
        let Some(statement) = confirmed.then(|| statement_of(f)).flatten() else {
            continue;
        };
        let Some(&(j, _)) = measured
            .iter()
            .find(|(j, k)| *k == statement && findings[*j].migration == findings[i].migration)
        else {
            continue;
        };
        let (by, rule) = (findings[j].id.clone(), findings[i].id.clone());
        let f = &mut findings[i];
        f.severity = Severity::Info;
        let what = f
            .message
            .strip_prefix("confirmed: ")
            .unwrap_or(&f.message)
            .to_string();
        f.message = format!("confirmed by {by} (one hazard, one error): {what}");
        f.evidence.insert("confirmed_by".into(), by.into());
        let m = &mut findings[j];
        let rules = match m.evidence.get("squawk_rules").and_then(|r| r.as_str()) {
            Some(r) if !r.is_empty() && !r.split(", ").any(|x| x == rule) => format!("{r}, {rule}"),
            Some(r) if !r.is_empty() => r.to_string(),
            _ => rule,
        };
        m.evidence.insert("squawk_rules".into(), rules.into());
    }
}

/// The description of the registered check named `name`.
pub fn description(name: &str) -> &'static str {
    ALL.iter()
        .find(|c| c.name == name)
        .map_or("", |c| c.description)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Location;

    fn at(f: Finding, line: usize) -> Finding {
        f.at(Some(Location {
            file: "V4__x.sql".into(),
            line,
            column: 1,
            excerpt: String::new(),
        }))
    }

    #[test]
    fn a_confirmed_rule_on_a_measured_hazard_is_its_confirmation() {
        let sql = "ALTER TABLE a ADD COLUMN n text;\nCREATE INDEX a_n\n  ON a (n);\n";
        let squawk = |line| {
            at(
                Finding::new(
                    "static",
                    "require-concurrent-index-creation",
                    Severity::Error,
                    Some(4),
                    "confirmed: index a_n built",
                )
                .evidence("verdict", "confirmed"),
                line,
            )
        };
        let build = at(
            Finding::new(
                "locks",
                "blocking-index-build",
                Severity::Error,
                Some(4),
                "builds a_n",
            ),
            2,
        );
        // squawk flags line 3, inside the statement that starts on line 2.
        let mut f = vec![squawk(3), build.clone()];
        one_hazard_one_error(&mut f, sql, &[]);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].message
                .starts_with("confirmed by locks.blocking-index-build"),
            "{}",
            f[0].message
        );
        assert_eq!(
            f[1].evidence["squawk_rules"],
            "static.require-concurrent-index-creation"
        );
        // On another statement, it stays an error of its own.
        let mut f = vec![squawk(1), build.clone()];
        one_hazard_one_error(&mut f, sql, &[]);
        assert_eq!(f[0].severity, Severity::Error);
        assert!(!f[1].evidence.contains_key("squawk_rules"));
        // At a callback run with it, the same line is in another file:
        // another statement, until both are in the callback's.
        let callback = Script {
            file: "beforeEachMigrate__x.sql".into(),
            sql: "SET LOCAL lock_timeout = '2s';\nCREATE INDEX a_n\n  ON a (n);\n".into(),
        };
        let in_callback = |mut f: Finding| {
            f.location.as_mut().unwrap().file = callback.file.clone();
            f
        };
        let mut f = vec![in_callback(squawk(3)), build.clone()];
        one_hazard_one_error(&mut f, sql, std::slice::from_ref(&callback));
        assert_eq!(f[0].severity, Severity::Error);
        let mut f = vec![in_callback(squawk(3)), in_callback(build)];
        one_hazard_one_error(&mut f, sql, std::slice::from_ref(&callback));
        assert_eq!(f[0].severity, Severity::Info);
    }

    /// The run-level findings and the unreached migrations come out of the
    /// registry like every other finding, and `--static-only` (nothing
    /// rehearsed) has none of them.
    #[test]
    fn run_level_and_unreached_findings_come_from_the_registry() {
        use crate::verify::evidence::predict::Sizes;
        use crate::verify::evidence::Unreached;
        let sizes = Sizes::default();
        let cx = Context::bare(&sizes);
        let ids = |j: &Judged| j.findings.iter().map(|f| f.id.clone()).collect::<Vec<_>>();
        let none = BTreeMap::new();
        let since = RunEvidence {
            since: Some(3),
            ..RunEvidence::default()
        };
        assert_eq!(ids(&judge(&none, &since, &cx)), ["apply.nothing-rehearsed"]);
        let not_rehearsed = Context {
            rehearsed: false,
            ..cx
        };
        assert!(ids(&judge(&none, &since, &not_rehearsed)).is_empty());
        let died = RunEvidence {
            lint_died: true,
            reached: 2,
            ..since
        };
        assert_eq!(ids(&judge(&none, &died, &cx)), ["static.not-run"]);

        let after = MigrationEvidence {
            version: 5,
            unreached: Some((4, Unreached::Everything)),
            ..MigrationEvidence::default()
        };
        let judged = judge(&BTreeMap::from([(5, after)]), &RunEvidence::default(), &cx);
        assert_eq!(ids(&judged), ["apply.not-rehearsed"]);
        assert_eq!(judged.findings[0].migration, Some(5));
        assert_eq!(judged.findings[0].severity, Severity::Skipped);
        // Nothing was measured for it: only static (its text) counts as run.
        let ran: Vec<&str> = judged.ran.iter().map(|r| r.check.as_str()).collect();
        assert_eq!(ran, ["static"]);
    }
}

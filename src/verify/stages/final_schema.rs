//! Stage 3, after the last migration: `post` on the final schemas (the
//! empty path's and the seeded one's), then the project's own checks of
//! the apps that may run on the final version (the shipped project:
//! `dao`).

use std::sync::Arc;

use crate::app::{AppVersion, ProjectRule};
use crate::report::CheckRun;
use crate::sandbox::Database;
use crate::verify::checks::post;
use crate::verify::{ExpectedSchema, Run, VerifyError};

impl Run<'_> {
    /// `last` is the final version; `empty_final` the empty path's
    /// database at it, `seeded_final` the last seeded database, if any.
    pub(super) fn final_schema(
        &mut self,
        empty_final: &Database,
        seeded_final: Option<&Database>,
        last: i32,
    ) -> Result<(), VerifyError> {
        self.post(empty_final, seeded_final, last)?;
        self.project_checks(empty_final, last);
        self.v.say("waiting for the long-transaction probes");
        Ok(())
    }

    fn post(
        &mut self,
        empty_final: &Database,
        seeded_final: Option<&Database>,
        last: i32,
    ) -> Result<(), VerifyError> {
        self.v.say("post: final schema");
        self.ran(post::CHECK, Some(last));
        let empty = Self::snapshot(empty_final)?;
        let seeded = match seeded_final {
            Some(db) => Self::snapshot(db)?,
            None => empty.clone(),
        };
        let expected = match &self.v.expected {
            ExpectedSchema::Snapshot(s, name) => post::Expected::Snapshot(s, name.clone()),
            ExpectedSchema::Derived => post::Expected::Derived,
        };
        self.report
            .findings
            .extend(post::evaluate(last, &seeded, &empty, expected));
        Ok(())
    }

    /// The project's own checks of the apps that may run on the final
    /// version, on the empty path's database itself (its schema was read
    /// by post; the rows they write are needed by nothing after).
    fn project_checks(&mut self, empty_final: &Database, last: i32) {
        let mut declared: Vec<(Arc<dyn ProjectRule>, &AppVersion)> = Vec::new();
        for app in self.v.apps.iter().filter(|a| a.may_run_on(last)) {
            if let Some(rule) = app.driver.as_ref().and_then(|d| d.final_check()) {
                if !declared.iter().any(|(d, _)| d.check() == rule.check()) {
                    declared.push((rule, app));
                }
            }
        }
        for (rule, app) in declared {
            self.v.say(&format!(
                "{}: {} on the final schema",
                rule.check(),
                rule.description()
            ));
            let url = self.sessions.app(empty_final.url(), &app.name);
            let Some(findings) = rule.on_final_schema(last, &url) else {
                continue;
            };
            self.report.checks.push(CheckRun {
                check: rule.check().to_string(),
                migration: Some(last),
                description: rule.description().to_string(),
            });
            self.report.findings.extend(findings);
        }
    }
}

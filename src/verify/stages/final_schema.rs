//! Stage 4, after the last migration: `post` on the final schemas (the
//! empty path's and the seeded one's), then the project's own checks of
//! the apps that may run on the final version (the shipped project:
//! `dao`).

use std::sync::Arc;

use super::Run;
use crate::app::{AppVersion, ProjectRule};
use crate::report::events::{Event, RunStep};
use crate::report::CheckRun;
use crate::sandbox::Database;
use crate::verify::error::VerifyError;
use crate::verify::evidence::FinalSchema;

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
        self.options.emit(Event::Run(RunStep::WaitingForProbes));
        Ok(())
    }

    /// The final schemas, reached on the empty path and on the seeded
    /// one, into the last migration's evidence (`post` judges them).
    fn post(
        &mut self,
        empty_final: &Database,
        seeded_final: Option<&Database>,
        last: i32,
    ) -> Result<(), VerifyError> {
        self.options.emit(Event::Run(RunStep::FinalSchema));
        let empty = crate::verify::measure::snapshot(empty_final)?;
        let seeded = match seeded_final {
            Some(db) => crate::verify::measure::snapshot(db)?,
            None => empty.clone(),
        };
        let unlogged =
            crate::verify::measure::unlogged_tables(seeded_final.unwrap_or(empty_final))?;
        let made_by_rows = self
            .evidence
            .values()
            .filter_map(|e| e.seeding.as_ref())
            .flat_map(|s| s.made_by_rows.iter().cloned())
            .collect();
        self.evidence(last).final_schema = Some(FinalSchema {
            seeded,
            empty,
            unlogged,
            made_by_rows,
        });
        Ok(())
    }

    /// The project's own checks of the apps that may run on the final
    /// version, on the empty path's database itself (its schema was read
    /// by post; the rows they write are needed by nothing after).
    fn project_checks(&mut self, empty_final: &Database, last: i32) {
        let mut declared: Vec<(Arc<dyn ProjectRule>, &AppVersion)> = Vec::new();
        for app in self.options.apps.iter().filter(|a| a.may_run_on(last)) {
            if let Some(rule) = app.driver.as_ref().and_then(|d| d.final_check()) {
                if !declared.iter().any(|(d, _)| d.check() == rule.check()) {
                    declared.push((rule, app));
                }
            }
        }
        for (rule, app) in declared {
            self.options.emit(Event::Run(RunStep::ProjectCheck {
                check: rule.check().to_string(),
                description: rule.description().to_string(),
            }));
            let url = self.sessions.app(empty_final.url(), &app.name);
            let Some(findings) = rule.on_final_schema(last, &url) else {
                continue;
            };
            let ran = CheckRun {
                check: rule.check().to_string(),
                migration: Some(last),
                description: rule.description().to_string(),
            };
            self.run_evidence.project_checks.push((ran, findings));
        }
    }
}

//! When the plans are measured (floor `stages`: ordering only): before
//! a migration in stage 2, after it in stage 3, each only with an app to
//! plan for. The instrument is [`crate::verify::measure::planning`].

use super::Run;
use crate::app::AppVersion;
use crate::catalog::Migration;
use crate::report::events::MigrationStep;
use crate::sandbox::Database;
use crate::verify::evidence::plan::Side;
use crate::verify::measure::planning::Planner;

impl Run<'_> {
    fn planner(&self) -> Planner<'_> {
        Planner {
            sandbox: self.sandbox,
            sessions: &self.sessions,
            target: self.options.target.as_ref(),
        }
    }

    /// Stage `plan`, before migration `v`: the live apps' statements
    /// planned on the seeded database still at the previous version (`db`),
    /// for `v`'s evidence. None when no app is live (nothing to compare);
    /// the error says why it could not be measured.
    pub(super) fn plans_before(
        &self,
        v: i32,
        db: &Database,
        live: &[&AppVersion],
    ) -> Option<Result<Side, String>> {
        if live.is_empty() {
            return None;
        }
        self.options.say(v, MigrationStep::PlanningBefore);
        Some(
            self.planner()
                .before(db, live)
                .map_err(|e| format!("{e:#}")),
        )
    }

    /// Stage `plan`, after migration `m` was applied on `db`: the statements
    /// of every app that may run on it planned again, for `m`'s evidence
    /// beside `before` ([`Run::plans_before`]); None without both.
    pub(super) fn plans_after(
        &self,
        m: &Migration,
        before: Option<Side>,
        db: Option<&Database>,
        runnable: &[&AppVersion],
    ) -> Option<Result<Side, String>> {
        let (Some(before), Some(db)) = (before, db) else {
            return None;
        };
        self.options.say(m.version, MigrationStep::PlanningAfter);
        Some(
            self.planner()
                .after(db, runnable, &before)
                .map_err(|e| format!("{e:#}")),
        )
    }
}

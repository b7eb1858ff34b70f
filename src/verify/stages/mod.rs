//! verify's pipeline, stage by stage: [`Run::all`] is its table of
//! contents.
//!
//! 1. [`base`]: the schema the rehearsed migrations start from (the
//!    target's, or the files up to `--since`), and the migrator that
//!    applies every migration twice, in the background.
//! 2. [`template`], per migration in order: the seeded database at
//!    V{k−1}, the live apps' statements replayed on it, the
//!    long-transaction probe started in the background, then the empty
//!    path: its scenario (a forced failure, or kill-and-rerun outside a
//!    transaction) and its measured apply. The empty template goes on as
//!    the template at V{k}.
//! 3. [`seeded`], per migration that applied on the empty path: the
//!    measured apply on the seeded database under the live apps'
//!    workload (and batched updates), the plans before and after, the
//!    backfill's counts and readers, and the compat replays and
//!    cross-version scenarios on the schema after.
//! 4. [`final_schema`]: the final schemas for post, and the project's own
//!    checks (the shipped project: `dao`).
//!
//! [`readers`] serves stages 2 and 3: the read statements of every app
//! (a driver's app too) run with sampled bindings before and after each
//! migration, and the rows the older apps write during the rollout (their
//! write statements, their drivers' creates) read back by the newer apps'
//! readers.
//!
//! Stages measure: each scenario is a function that returns what it
//! measured, and the stage stores it in its migration's evidence
//! ([`crate::verify::evidence`]); no stage writes a finding of the
//! registry's checks. The background results (the migrator's second runs,
//! the probes) are collected by [`Run::collect_background`] once every
//! stage has run; then [`Run::judge`] runs the checks' registry
//! ([`super::checks::ALL`]) over every migration's evidence.

mod base;
mod final_schema;
mod readers;
mod seeded;
mod template;

use super::events::{Event, Stage};
use super::{checks::apply, Run, VerifyError};

impl Run<'_> {
    /// Every stage, in order. A migration that cannot be applied ends the
    /// rehearsal there: later ones cannot be reached, and its findings say
    /// why.
    pub(super) fn all(&mut self) -> Result<(), VerifyError> {
        let migrations = self.options.catalog.migrations().to_vec();
        let empty_prev = self
            .sandbox
            .fresh_database_owned_by(self.sessions.owner())?;
        self.options.emit(Event::StageStarted(Stage::Base));
        self.apply_base(&empty_prev, &migrations)?;
        self.start_migrator(&empty_prev, &migrations)?;
        self.options.emit(Event::StageFinished(Stage::Base));

        self.options.emit(Event::StageStarted(Stage::Templates));
        let templates = self.templates(&empty_prev, &migrations)?;
        self.options.emit(Event::StageFinished(Stage::Templates));
        if templates.stopped.is_none() {
            self.tables_sized_exist(&templates.staged, &empty_prev)?;
        }
        if let (true, None, Some(since)) = (
            templates.staged.is_empty(),
            &templates.stopped,
            self.options.since,
        ) {
            self.report.findings.push(apply::nothing_rehearsed(
                since,
                &self.options.context().labels,
            ));
        }

        // The probes of every migration run in the background meanwhile.
        self.options.emit(Event::StageStarted(Stage::Seeded));
        let seeded = self.seeded_stages(templates.staged, &migrations)?;
        self.options.emit(Event::StageFinished(Stage::Seeded));
        if templates.stopped.is_some() {
            return Ok(());
        }
        let seeded::SeededEnd::Completed(last_seeded) = seeded else {
            return Ok(());
        };
        self.options.emit(Event::StageStarted(Stage::FinalSchema));
        self.final_schema(&empty_prev, last_seeded.as_ref(), templates.last)?;
        self.options.emit(Event::StageFinished(Stage::FinalSchema));
        Ok(())
    }
}

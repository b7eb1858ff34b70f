//! verify's pipeline, stage by stage: [`Run::all`] is its table of
//! contents.
//!
//! 1. [`base`]: the schema the rehearsed migrations start from (the
//!    target's, or the files up to `--since`), and the migrator that
//!    applies every migration twice, in the background.
//! 2. [`template`], per migration in order: the seeded database at
//!    V{k−1} (beside it, on the template, the empty path: its scenario, a
//!    forced failure or kill-and-rerun outside a transaction, and its
//!    measured apply), the live apps' statements replayed on it, the
//!    long-transaction probe started in the background, then what the
//!    live apps' readers see there and, beside them, their statements'
//!    plans. The empty template goes on as the template at V{k}.
//! 3. [`seeded`], per migration that applied on the empty path: the
//!    measured apply on the seeded database under the live apps'
//!    workload (and batched updates), the plans after, the backfill's
//!    counts and readers, and beside them, on a copy of its own (they
//!    write rows), the compat replays and cross-version scenarios on the
//!    schema after.
//!
//! Stages 2 and 3 overlap: stage 3 of a migration runs once stage 2 of
//! the next one has cloned its seeded database, so at most two seeded
//! databases exist at a time.
//!
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
mod planning;
mod readers;
mod seeded;
mod template;

use std::collections::BTreeSet;

use super::events::{Event, Stage};
use super::{checks::apply, Run, Staged, VerifyError};
use seeded::SeededEnd;
use template::Template;

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
        if let Some(sql) = &self.options.setup {
            // As the superuser, before anything of the history's own.
            let mut c = super::step("connecting to run --setup", empty_prev.connect())?;
            super::step("running the --setup file", c.batch_execute(sql))?;
        }
        if !self.apply_base(&empty_prev, &migrations)? {
            self.options.emit(Event::StageFinished(Stage::Base));
            return Ok(());
        }
        self.start_migrator(&empty_prev, &migrations)?;
        self.options.emit(Event::StageFinished(Stage::Base));

        // Stages 2 and 3 overlap: stage 3 of a migration runs as soon as
        // stage 2 of the next one has cloned its seeded database (still at
        // V{prev}: the next one's rows are carried from it), so at most two
        // seeded databases exist at a time. Run after the whole of stage
        // 2, a history held one per migration: 300 migrations at 10 000
        // rows per table filled the in-memory local server's RAM.
        self.options.emit(Event::StageStarted(Stage::Templates));
        self.options.emit(Event::StageStarted(Stage::Seeded));
        let mut staged: Vec<Staged> = Vec::new();
        let (mut stopped, mut last, mut rehearsed) = (None, 0, 0);
        let mut tables_met: BTreeSet<String> = BTreeSet::new();
        let mut seeded = SeededEnd::Completed(None);
        for (index, m) in migrations.iter().enumerate() {
            if !self.options.since.is_some_and(|s| m.version <= s) {
                // (Up to --since: in the base already.)
                if let Some(why) = &m.not_runnable {
                    let later = migrations.len() - index - 1;
                    let file = self.options.catalog.path_of(m);
                    self.report
                        .findings
                        .push(apply::not_runnable(m.version, &m.label, &file, why, later));
                    stopped = Some(m.version);
                    break;
                }
                match self.template(index, m, last, &staged, &empty_prev, &migrations)? {
                    Template::Staged(st) => {
                        rehearsed += 1;
                        tables_met.extend(st.tables.iter().map(|t| t.name.clone()));
                        staged.push(*st);
                    }
                    Template::Stopped => {
                        stopped = Some(m.version);
                        break;
                    }
                }
            }
            last = m.version;
            while staged.len() > 1 {
                let st = staged.remove(0);
                self.seeded_next(&mut seeded, st, &migrations)?;
            }
        }
        self.options.emit(Event::StageFinished(Stage::Templates));
        if stopped.is_none() {
            self.tables_sized_exist(&tables_met, &empty_prev)?;
        }
        if let (0, None, Some(since)) = (rehearsed, &stopped, self.options.since) {
            self.report.findings.push(apply::nothing_rehearsed(
                since,
                &self.options.context().labels,
            ));
        }
        for st in staged {
            self.seeded_next(&mut seeded, st, &migrations)?;
        }
        if let Some(failed) = stopped {
            let labels = self.options.context().labels;
            for m in migrations.iter().filter(|m| m.version > failed) {
                self.report.findings.push(apply::not_rehearsed(
                    m.version,
                    failed,
                    apply::Unreached::Everything,
                    &labels,
                ));
            }
        }
        self.options.emit(Event::StageFinished(Stage::Seeded));
        if stopped.is_some() {
            return Ok(());
        }
        let SeededEnd::Completed(last_seeded) = seeded else {
            return Ok(());
        };
        self.options.emit(Event::StageStarted(Stage::FinalSchema));
        self.final_schema(&empty_prev, last_seeded.as_ref(), last)?;
        self.options.emit(Event::StageFinished(Stage::FinalSchema));
        Ok(())
    }
}

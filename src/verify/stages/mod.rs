//! verify's pipeline, stage by stage: [`Run::all`] is its table of
//! contents.
//!
//! 1. [`base`]: the schema the rehearsed migrations start from (the
//!    target's, or the files up to `--since`), the migrator that applies
//!    every migration twice, in the background (not for a framework's
//!    project, which deploys with its framework's migrate), and the runs
//!    of migrations production sends in one transaction (Alembic,
//!    Drizzle), applied as one on a copy of the base.
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
//! A framework's data migration ([`crate::catalog::ExternalApply`]) is
//! applied as it was sent on the empty path (the forced failure, the
//! measured apply, the migrator's runs: what it does to an empty
//! database), and by its framework's command wherever rows are (stage
//! 3's apply, the copy carried to the next migration): no
//! long-transaction probe for it, since its statements are the command's.
//!
//! Stages 2 and 3 overlap: stage 3 of a migration runs once stage 2 of
//! the next one has cloned its seeded database, so at most two seeded
//! databases exist at a time.
//!
//! 4. [`final_schema`]: the final schemas for post, and the project's own
//!    checks (the shipped project: `dao`).
//!
//! The readers instrument ([`crate::verify::measure::readers`]) serves
//! stages 2 and 3: the read statements of every app (a driver's app too)
//! run with sampled bindings before and after each migration, and the rows the older apps write during the rollout (their
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
//!
//! Floor `stages` (see `src/verify/layers.txt`): ordering only, which
//! instrument of `measure` runs when and on which copy. [`Run`], one
//! rehearsal in progress, lives here with the helpers every stage shares;
//! the root ([`crate::verify::Verify::run`]) builds it and calls
//! [`Run::all`].

mod base;
mod final_schema;
mod planning;
mod seeded;
mod template;

use std::collections::{BTreeMap, BTreeSet};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::app::replay::{self, Outcome};
use crate::app::AppVersion;
use crate::lock_policy::LockPolicy;
use crate::pg::lock_modes::Needs;
use crate::report::Report;
use crate::sandbox::{Database, Sandbox};

use super::checks::{self, apply};
use super::error::{step, VerifyError};
use super::evidence::{
    self, LongTransactionProbe, MigrationEvidence, RunEvidence, Unreached, Visible,
};
use super::measure::readers::Readers;
use super::measure::rehearsal::{self, LiveApp};
use super::options::Verify;
use crate::lint::Warning;
use crate::report::events::{Event, Stage};
use crate::sessions::Sessions;
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
        // As the superuser, before anything of the history's own: the
        // --setup file, then the tool's own tables its SQL reads (Flyway's
        // history: the tool made it before any migration ran).
        let setups = [
            (self.options.setup.as_deref(), "the --setup file"),
            (
                self.options.catalog.tool_setup.as_deref(),
                "the tool's own tables",
            ),
        ];
        for (sql, what) in setups {
            if let Some(sql) = sql {
                let mut c = step(&format!("connecting to run {what}"), empty_prev.connect())?;
                step(&format!("running {what}"), c.batch_execute(sql))?;
            }
        }
        if !self.apply_base(&empty_prev, &migrations)? {
            self.options.emit(Event::StageFinished(Stage::Base));
            return Ok(());
        }
        self.start_migrator(&empty_prev, &migrations)?;
        self.apply_shared_runs(&empty_prev, &migrations)?;
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
        // Why the rehearsal stopped: a migration failed, or one rollsafe
        // cannot run came (nothing failed then).
        let mut unreached = Unreached::Everything;
        let mut tables_met: BTreeSet<String> = BTreeSet::new();
        let mut seeded = SeededEnd::default();
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
                    unreached = Unreached::AfterNotRunnable;
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
        self.run_evidence.since = self.options.since;
        self.run_evidence.reached = rehearsed;
        self.run_evidence.stopped_at = stopped;
        for st in staged {
            self.seeded_next(&mut seeded, st, &migrations)?;
        }
        if let Some(failed) = stopped {
            for m in migrations.iter().filter(|m| m.version > failed) {
                self.evidence(m.version).unreached = Some((failed, unreached));
            }
        }
        self.options.emit(Event::StageFinished(Stage::Seeded));
        if stopped.is_some() {
            return Ok(());
        }
        if seeded.last_failed.is_some() {
            return Ok(());
        }
        let last_seeded = seeded.last;
        self.options.emit(Event::StageStarted(Stage::FinalSchema));
        self.final_schema(&empty_prev, last_seeded.as_ref(), last)?;
        self.options.emit(Event::StageFinished(Stage::FinalSchema));
        Ok(())
    }
}

/// The longest the live workload runs before and after the migration,
/// waiting for each app thread to run a whole round of its statements
/// ([`rehearsal::Workload::settle`]; they take a millisecond or two each).
const WORKLOAD_MARGIN: Duration = Duration::from_millis(50);

/// The longest the long-transaction probe keeps its transaction open (it
/// ends it once an attempt timed out): long enough for a migration that
/// overrides its lock timeout to be seen waiting past the cap (plus
/// slack) before the transaction ends.
fn long_transaction(policy: &LockPolicy) -> Duration {
    (policy.max_timeout * 3)
        .max(policy.max_timeout + rehearsal::LOCK_WAIT_SLACK + Duration::from_millis(500))
}

type ProbeHandle = JoinHandle<anyhow::Result<LongTransactionProbe>>;

/// A migration after stage 2: its seeded databases, waiting for stage 3.
struct Staged {
    index: usize,
    /// Whether an app was live at V{prev}: without one there are no rows,
    /// so the empty path's apply is the seeded one too.
    seeded: bool,
    seeded_rows: i64,
    /// What the live apps' readers saw on the seeded database at V{prev}.
    readers_before: Visible,
    /// Their statements planned there (None without a live app; the error
    /// says why they could not be): stage 3 makes them evidence, once it
    /// runs, and plans them again after.
    plans_before: Option<Result<evidence::plan::Side, String>>,
    /// The seeded database, at V{prev} until stage 3 applies the migration
    /// on it; without seeded rows, a copy of the template at V{v} when an
    /// app may run on it.
    applied_db: Option<Database>,
    /// The live apps' statements replayed on the seeded database (V{prev}).
    live_outcomes: BTreeMap<String, Vec<Outcome>>,
    tables: Vec<crate::tables::UserTable>,
}

type MigratorHandle = JoinHandle<Vec<(i32, anyhow::Result<evidence::SecondRun>)>>;

/// One rehearsal in progress.
pub(super) struct Run<'a> {
    pub(super) options: &'a Verify,
    pub(super) sandbox: &'a Sandbox,
    /// Who runs what: the migrator and the apps' roles.
    pub(super) sessions: Sessions,
    /// Stand-ins for the target's roles its GRANTs name (`--from-target`),
    /// dropped with the run.
    pub(super) stand_ins: Vec<crate::sandbox::Role>,
    pub(super) report: Report,
    pub(super) probes: Vec<(i32, ProbeHandle)>,
    pub(super) migrator: Option<MigratorHandle>,
    /// What each rehearsed migration's scenarios measured so far, judged
    /// once they all ran ([`Run::judge`]).
    pub(super) evidence: BTreeMap<i32, MigrationEvidence>,
    /// What the run as a whole came to (how far it reached, the precheck).
    pub(super) run_evidence: RunEvidence,
    /// The tables of the empty path when the deploy of the migration being
    /// staged began (its first migration's V{prev}): those created since,
    /// by an earlier migration of the same deploy, get no generated rows
    /// ([`crate::catalog::Migration::deploy_group`]).
    pub(super) deploy_start: BTreeSet<String>,
}

/// Applies `m` as `migrate` would, unmeasured: in one transaction, or
/// statement by statement for a file that runs outside one (its batched
/// updates have no rows to settle in a base without data). A data
/// migration's SQL as sent: its caller applies it where there are no rows
/// (the `--since` base), or runs its framework's command instead
/// ([`measure::external`](super::measure::external)) where there are.
fn apply_unchecked(c: &mut postgres::Client, m: &crate::catalog::Migration) -> Result<(), String> {
    use crate::migrate::apply;
    if let Some(why) = &m.not_runnable {
        return Err(format!("it {why}"));
    }
    let steps = apply::migration_steps(m);
    if m.runs_outside_transaction() {
        return apply::outside_transaction(c, &steps, None, &mut apply::Unobserved)
            .map(|_| ())
            .map_err(|e| format!("{}: {}", steps[e.index()].line_phrase(), e.message()));
    }
    apply::in_transaction(
        c,
        &steps,
        None,
        apply::Ending::Commit,
        &mut apply::Unobserved,
    )
    .map(|_| ())
    .map_err(|e| {
        let sqlstate = e.error().and_then(|e| e.code()).map(|c| c.code());
        match steps.get(e.index()) {
            Some(
                step @ apply::Step {
                    script: Some(script),
                    ..
                },
            ) => {
                let message = format!("its callback {}: {}", step.line_phrase(), e.message());
                let sql = m
                    .before_each
                    .iter()
                    .chain(&m.after_each)
                    .find(|s| s.file == *script);
                crate::migrate::way_out::with_advice(message, sqlstate, sql.map_or("", |s| &s.sql))
            }
            _ => crate::migrate::way_out::with_advice(e.message(), sqlstate, &m.sql),
        }
    })
}

/// What blocks the live apps: the lock modes their replayed statements
/// took per table (a declared `-- kind: write` counts as ROW EXCLUSIVE on
/// the tables it touched). With no live app, every table counts as read
/// and written.
fn needs_of(live: &[&AppVersion], outcomes: &BTreeMap<String, Vec<Outcome>>) -> Needs {
    if live.is_empty() {
        return Needs::unknown();
    }
    let mut needs = Needs::default();
    for app in live {
        for o in outcomes.get(&app.name).into_iter().flatten() {
            let declared_write = app.declared_kind(&o.statement) == Some(crate::app::Kind::Write);
            for (table, mode) in &o.locks {
                needs.add(table, mode);
                if declared_write {
                    needs.add(table, "RowExclusiveLock");
                }
            }
        }
    }
    needs
}

/// The live apps with the names of their writing statements.
fn live_apps<'a>(
    live: &[&'a AppVersion],
    outcomes: &BTreeMap<String, Vec<Outcome>>,
) -> Vec<LiveApp<'a>> {
    live.iter()
        .map(|a| {
            (
                *a,
                replay::writers(a, outcomes.get(&a.name).map_or(&[][..], |o| o)),
            )
        })
        .collect()
}

impl Run<'_> {
    /// The evidence record of rehearsed migration `v`.
    fn evidence(&mut self, v: i32) -> &mut MigrationEvidence {
        self.evidence.entry(v).or_insert_with(|| MigrationEvidence {
            version: v,
            ..MigrationEvidence::default()
        })
    }

    /// Hands the static precheck's warnings to their migrations once it is
    /// done (a precheck that died is a finding: nothing is dropped
    /// silently).
    pub(super) fn collect_lint(&mut self, handle: JoinHandle<BTreeMap<i32, Vec<Warning>>>) {
        match handle.join() {
            Ok(linted) => {
                for (v, warnings) in linted {
                    self.evidence(v).lint = Some(warnings);
                }
            }
            Err(_) => self.run_evidence.lint_died = true,
        }
    }

    /// The one judgement: every migration's evidence, in order, by every
    /// check of the registry; the report lists each check that had
    /// evidence to judge, and its findings, before the project's own
    /// (which ran in the final stage).
    pub(super) fn judge(&mut self) {
        let cx = self.options.context();
        let judged = checks::judge(&self.evidence, &self.run_evidence, &cx);
        for e in self.evidence.values() {
            if let (Some(at_zero), Some(seeded)) = (&e.at_zero, &e.seeded) {
                if let Some(r) = self
                    .report
                    .migrations
                    .iter_mut()
                    .find(|r| r.version == e.version)
                {
                    r.statements = seeded.applied.statement_rows(at_zero);
                    r.app_waits = seeded
                        .workload
                        .as_ref()
                        .map(|w| seeded.applied.app_wait_rows(w));
                    r.committed_ms = seeded.applied.committed_ms();
                }
            }
        }
        self.report.checks.splice(0..0, judged.ran);
        self.report.findings.splice(0..0, judged.findings);
    }

    fn clone_db(&self, source: &Database) -> Result<Database, VerifyError> {
        let copy = self
            .sandbox
            .clone_database_owned_by(source, self.sessions.owner())?;
        // It knows the roles its source's migrations created.
        self.sessions.copied(source.name(), copy.name());
        Ok(copy)
    }

    /// The apps' readers, as this run's sessions connect them.
    fn readers(&self) -> Readers<'_> {
        Readers {
            sessions: &self.sessions,
        }
    }

    /// Joins the migrator and the long-transaction probes and hands what
    /// they measured to their migrations. A thread that died is evidence
    /// too: nothing is dropped silently.
    pub(super) fn collect_background(&mut self) {
        if let Some(handle) = self.migrator.take() {
            let results = handle.join().unwrap_or_else(|_| {
                vec![(
                    0,
                    Err(anyhow::anyhow!(
                        "the migrator's thread panicked (a bug in rollsafe)"
                    )),
                )]
            });
            for (v, r) in results {
                let r = r.map_err(|e| crate::errors::one_line(e.as_ref()));
                match self.evidence.get_mut(&v) {
                    Some(e) => e.second_run = Some(r),
                    // Not a rehearsed migration: the migrator could not
                    // even say which one it was on.
                    None if v == 0 => self
                        .report
                        .findings
                        .push(apply::evaluate_second_run(None, &r)),
                    None => {}
                }
            }
        }
        for (v, handle) in std::mem::take(&mut self.probes) {
            let probe = match handle.join() {
                Ok(r) => r.map_err(|e| format!("{e:#}")),
                Err(_) => Err("its thread panicked (a bug in rollsafe)".to_string()),
            };
            self.evidence(v).probe = Some(evidence::Probe::Ran(Box::new(probe)));
        }
    }

    /// Every table `--table-rows` names must be one the rehearsal met:
    /// before some migration (`met`) or at the end (`last`). A typo
    /// would otherwise predict nothing and say so nowhere.
    fn tables_sized_exist(
        &self,
        met: &std::collections::BTreeSet<String>,
        last: &Database,
    ) -> Result<(), VerifyError> {
        if !self.options.sizes.given_by_flag() {
            return Ok(());
        }
        let mut known: std::collections::BTreeSet<String> =
            crate::verify::measure::user_tables(last)?
                .into_iter()
                .map(|t| t.name)
                .collect();
        known.extend(met.iter().cloned());
        let unknown: Vec<&str> = self
            .options
            .sizes
            .rows
            .keys()
            .filter(|t| !known.contains(*t))
            .map(String::as_str)
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(VerifyError::UnknownTableRows {
            unknown: unknown.join(", "),
            known: known.into_iter().collect::<Vec<_>>().join(", "),
        })
    }
}

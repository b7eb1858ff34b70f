//! Stage 3, per migration that applied on the empty path: the measured
//! apply on the seeded database with the live apps' workload running
//! (and the file's batched updates, as migrate runs them), or, for a
//! framework's data migration, its framework applying it there
//! ([`measure::external`]: no workload, nothing measured per statement),
//! then apply,
//! rewrite and locks judged on both applies, the backfill checked on the
//! rows that existed before, and beside it, on a copy of the database
//! right after the migration, the compat replays and cross-version
//! scenarios on the schema after.

use super::{live_apps, step, Run, Staged, WORKLOAD_MARGIN};
use crate::app::replay;
use crate::app::AppVersion;
use crate::catalog::Migration;
use crate::report::events::MigrationStep;
use crate::sandbox::Database;
use crate::verify::error::VerifyError;
use crate::verify::evidence::{Backfill, Compat, Plans, SeededApply, Visible, WorkloadStats};
use crate::verify::measure;
use crate::verify::measure::rehearsal;

/// How stage 3 of one migration ended.
enum Seeded {
    /// It applied on its seeded database (the database, None without
    /// one).
    Applied(Option<Database>),
    /// It failed there (its evidence says how).
    Failed,
}

/// How stage 3 has gone so far.
#[derive(Default)]
pub(super) struct SeededEnd {
    /// The seeded database of the last migration that applied there
    /// (post compares its schema), None without one or once the last
    /// migration failed there.
    pub(super) last: Option<Database>,
    /// The migration that failed on its seeded database (its findings
    /// say why), when the last one did: the final schema on rows is
    /// then not reached.
    pub(super) last_failed: Option<i32>,
}

impl Run<'_> {
    /// Stage 3 for the next migration stage 2 handed over. A migration
    /// that failed on its seeded database does not end the seeded path:
    /// stage 2 of the next one already seeded it afresh from the template
    /// the failing migration left on the empty path (its rows could not be
    /// carried through it), so one failure on rows does not leave every
    /// later migration measured on an empty database alone.
    pub(super) fn seeded_next(
        &mut self,
        end: &mut SeededEnd,
        st: Staged,
        migrations: &[Migration],
    ) -> Result<(), VerifyError> {
        let v = migrations[st.index].version;
        match self.seeded(st, migrations)? {
            Seeded::Applied(db) => {
                end.last = db;
                end.last_failed = None;
            }
            Seeded::Failed => {
                end.last = None;
                end.last_failed = Some(v);
            }
        }
        Ok(())
    }

    /// Stage 3 for one migration.
    fn seeded(&mut self, st: Staged, migrations: &[Migration]) -> Result<Seeded, VerifyError> {
        let m = &migrations[st.index];
        let v = m.version;
        let live: Vec<&AppVersion> = self
            .options
            .apps
            .iter()
            .filter(|a| a.live_during(v))
            .collect();
        let runnable: Vec<&AppVersion> = self
            .options
            .apps
            .iter()
            .filter(|a| a.may_run_on(v))
            .collect();
        let Staged {
            seeded,
            seeded_rows,
            readers_before,
            plans_before,
            applied_db,
            live_outcomes,
            ..
        } = st;
        // plan (1/2): the live apps' statements planned at V{prev}, in
        // stage 2.
        let plans_before = plans_before.and_then(|before| {
            let side = before.as_ref().ok().cloned();
            self.evidence(v).plans = Some(Plans {
                before,
                after: None,
            });
            side
        });
        let ok = match (seeded, &applied_db, &m.external) {
            // A data migration: its framework applies it at rows.
            (true, Some(db), Some(x)) => {
                self.options.say(
                    v,
                    MigrationStep::ApplyingOnSeeded {
                        rows: seeded_rows,
                        workload: false,
                    },
                );
                let run = measure::external::apply(&self.sessions, db, x, seeded_rows)?;
                // A command that applied more than this migration left
                // rows that are not its doing: as a failure there, the
                // next migration is seeded anew.
                let ok = run.failed.is_none() && run.applied_beyond.is_none();
                self.evidence(v).external = Some(run);
                ok
            }
            (true, Some(db), None) => {
                let applied =
                    self.apply_under_workload(m, db, seeded_rows, &live, &live_outcomes)?;
                let ok = applied.applied.ok();
                self.evidence(v).seeded = Some(applied);
                ok
            }
            // Without seeded rows the empty path's apply is the seeded one
            // (a data migration's too: what it sent to an empty database
            // is what it does there).
            _ => {
                let applied = SeededApply {
                    applied: self.evidence(v).at_zero.clone().unwrap_or_default(),
                    rows: seeded_rows,
                    workload: None,
                    batched: Vec::new(),
                };
                let ok = applied.applied.ok();
                self.evidence(v).seeded = Some(applied);
                ok
            }
        };
        if !ok {
            return Ok(Seeded::Failed);
        }
        // Compat writes rows (its apps' seeds, the cross-version
        // scenarios): on a copy of its own, taken right after the
        // migration, it runs beside the plans and the backfill, which read
        // the rows as the migration left them (one after the other they
        // were a third of the shipped set's rehearsal).
        let compat_db = match &applied_db {
            Some(db) if !runnable.is_empty() => Some(self.clone_db(db)?),
            _ => None,
        };
        let newly = self.evidence(v).newly.clone();
        let this = &*self;
        let (plans_after, backfill, compat) = std::thread::scope(|s| {
            let compat =
                s.spawn(|| this.compat(v, compat_db.as_ref(), &live, &runnable, live_outcomes));
            // plan (2/2): planned again at V{v}.
            let plans_after = this.plans_after(m, plans_before, applied_db.as_ref(), &runnable);
            let backfill = this.backfill(m, applied_db.as_ref(), &runnable, readers_before, &newly);
            let compat = compat.join().unwrap_or_else(|_| {
                Err(VerifyError::Rehearsal {
                    step: "replaying the apps' statements".into(),
                    detail: "its thread panicked (a bug in rollsafe)".into(),
                })
            });
            (plans_after, backfill, compat)
        });
        let e = self.evidence(v);
        if let (Some(after), Some(plans)) = (plans_after, &mut e.plans) {
            plans.after = Some(after);
        }
        e.backfill = Some(backfill?);
        e.compat = Some(compat?);
        // Post compares the final schema built over rows with the empty
        // path's (compat's copy changed rows only); without seeded rows
        // the two are one.
        Ok(Seeded::Applied(applied_db))
    }

    /// The measured apply on the seeded database `db`, with the live apps'
    /// workload running against it (everything it does is rolled back;
    /// the measurements are per backend, so they stay the migration's),
    /// then the file's batched updates as migrate runs them, the workload
    /// still on.
    fn apply_under_workload(
        &mut self,
        m: &Migration,
        db: &Database,
        seeded_rows: i64,
        live: &[&AppVersion],
        live_outcomes: &std::collections::BTreeMap<String, Vec<replay::Outcome>>,
    ) -> Result<SeededApply, VerifyError> {
        let v = m.version;
        self.options.say(
            v,
            MigrationStep::ApplyingOnSeeded {
                rows: seeded_rows,
                workload: !live.is_empty(),
            },
        );
        let workload = step(
            "starting the workload",
            rehearsal::Workload::start(db.url(), &self.sessions, &live_apps(live, live_outcomes)),
        )?;
        // The apps running before the migration starts, and each of their
        // statements run again on the schema it left (a project without
        // apps has no thread to wait for).
        workload.settle(WORKLOAD_MARGIN);
        let migrator_url = self.sessions.migrator(db.url());
        let own = self.own_roles(m, db)?;
        let at_n = rehearsal::apply_migration_measured(db.url(), &migrator_url, m);
        drop(own);
        let batched = match &at_n {
            Ok(a) if a.ok() => measure::backfill::run_batched_updates(
                &self.sessions,
                db,
                m,
                &self.options.lock_policy,
                &|table| {
                    self.options.say(
                        v,
                        MigrationStep::BatchedUpdate {
                            table: table.to_string(),
                        },
                    )
                },
            )?,
            _ => Vec::new(),
        };
        workload.settle(WORKLOAD_MARGIN);
        let workload: WorkloadStats = workload.stop();
        let mut at_n = step("applying on a seeded database", at_n)?;
        let catalog = &self.options.catalog;
        at_n.set_files(|f| catalog.path_of_file(f), &m.file);
        if at_n.outside_transaction && workload.counted_in_table_stats {
            at_n.forget_work("the live apps run as the migrator's role, so their sessions could not be left out of the cumulative table statistics (SET track_counts needs a superuser): the rows read and written by statements outside a transaction were not measured apart from theirs (declare an app role, -- role: or --app-role, to measure them)");
        }
        Ok(SeededApply {
            applied: at_n,
            rows: seeded_rows,
            workload: Some(workload),
            batched,
        })
    }

    /// Backfill: right after the migration, every row existed before. The
    /// file's `-- rollsafe:backfill` directives counted on them, and what
    /// the apps' readers see (the live ones saw `readers_before`).
    fn backfill(
        &self,
        m: &Migration,
        applied_db: Option<&Database>,
        runnable: &[&AppVersion],
        readers_before: Visible,
        newly: &[String],
    ) -> Result<Backfill, VerifyError> {
        let v = m.version;
        self.options.say(v, MigrationStep::Backfill);
        let directives = match applied_db {
            Some(db) => Some(measure::backfill::directive_counts(&self.sessions, db, m)?),
            None => None,
        };
        let readers_after = match applied_db {
            Some(db) => self
                .readers()
                .after(db, runnable, &readers_before.statements, newly)?,
            None => Visible::default(),
        };
        Ok(Backfill {
            directives,
            readers_before,
            readers_after,
        })
    }

    /// Compat: the running apps on the schema before (replayed in stage
    /// 2), every app that may run on the schema after, the types the
    /// running apps read and bind, then cross-version behaviour, on `db`:
    /// a copy of the applied database of its own, since it writes rows
    /// while the plans and the backfill read the applied one.
    fn compat(
        &self,
        v: i32,
        db: Option<&Database>,
        live: &[&AppVersion],
        runnable: &[&AppVersion],
        live_outcomes: std::collections::BTreeMap<String, Vec<replay::Outcome>>,
    ) -> Result<Compat, VerifyError> {
        self.options.say(v, MigrationStep::Replaying);
        match db {
            Some(db) => {
                measure::compat::after_migration(&self.sessions, db, live, runnable, live_outcomes)
            }
            None => Ok(Compat {
                before: live_outcomes,
                ..Compat::default()
            }),
        }
    }
}

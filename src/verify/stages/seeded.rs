//! Stage 2, per migration that applied on the empty path: the measured
//! apply on the seeded database with the live apps' workload running
//! (and the file's batched updates, as migrate runs them), then apply,
//! rewrite and locks judged on both applies, the backfill checked on the
//! rows that existed before, and the compat replays and cross-version
//! scenarios on the schema after.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::app::AppVersion;
use crate::catalog::Migration;
use crate::sandbox::Database;
use crate::verify::checks::{apply, backfill, compat, locks, rewrite};
use crate::verify::cross_version;
use crate::verify::rehearsal::{self, Applied, End, WorkloadStats};
use crate::verify::{
    live_apps, needs_of, predict, replay, seed, step, Run, Staged, VerifyError, COMPAT_ROWS,
    WORKLOAD_MARGIN,
};

/// How stage 2 ended.
pub(super) enum SeededEnd {
    /// Every migration applied on its seeded database; the last seeded
    /// database (post compares its schema), if there was one.
    Completed(Option<Database>),
    /// One failed on its seeded database (its findings say why).
    Failed,
}

impl Run<'_> {
    /// Stage 2 over every migration stage 1 left.
    pub(super) fn seeded_stages(
        &mut self,
        staged: Vec<Staged>,
        migrations: &[Migration],
    ) -> Result<SeededEnd, VerifyError> {
        let mut last_seeded = None;
        for st in staged {
            match self.seeded(st, migrations)? {
                Some(db) => last_seeded = db,
                None => return Ok(SeededEnd::Failed),
            }
        }
        Ok(SeededEnd::Completed(last_seeded))
    }

    /// Stage 2 for one migration. None when it failed on its seeded
    /// database; else the database it applied on (None without one).
    fn seeded(
        &mut self,
        st: Staged,
        migrations: &[Migration],
    ) -> Result<Option<Option<Database>>, VerifyError> {
        let m = &migrations[st.index];
        let (v, prev) = (m.version, st.prev);
        let live: Vec<&AppVersion> = self.v.apps.iter().filter(|a| a.live_during(v)).collect();
        let runnable: Vec<&AppVersion> = self.v.apps.iter().filter(|a| a.may_run_on(v)).collect();
        let newly: Vec<String> = runnable
            .iter()
            .filter(|a| !a.may_run_on(prev))
            .map(|a| a.name.clone())
            .collect();
        let Staged {
            seeded,
            seeded_rows,
            readers_before,
            applied_db,
            at_zero,
            trace,
            live_outcomes,
            ..
        } = st;
        let needs = needs_of(&live, &live_outcomes);
        // plan (1/2): the live apps' statements planned at V{prev}.
        let plans_before = self.plans_before(v, applied_db.as_ref().filter(|_| seeded), &live);
        let (at_n, workload) = match (seeded, &applied_db) {
            (true, Some(db)) => {
                let (at_n, workload) =
                    self.apply_under_workload(v, m, db, seeded_rows, &live, &live_outcomes)?;
                (at_n, Some(workload))
            }
            // Without seeded rows the empty path's apply is the seeded one.
            _ => (at_zero.clone(), None),
        };
        if let Some(r) = self.report.migrations.iter_mut().find(|r| r.version == v) {
            r.statements = at_n.statement_rows(&at_zero);
            r.app_waits = workload.as_ref().map(|w| at_n.app_wait_rows(w));
            r.committed_ms = at_n.committed_ms();
        }
        self.report.findings.extend(apply::evaluate(
            v,
            &at_zero,
            Some((&at_n, seeded_rows)),
            &trace,
            self.v.statement_timeout,
        ));
        self.judge_static(v, &at_n, &needs);
        if !at_n.ok() {
            return Ok(None);
        }
        // plan (2/2): planned again at V{v}, then judged.
        self.plans_after(m, plans_before, applied_db.as_ref(), &live, &runnable);
        let holds = predict::holds(&at_zero, &at_n, &needs, &self.v.sizes);
        self.ran(rewrite::CHECK, Some(v));
        self.report
            .findings
            .extend(rewrite::evaluate(v, &at_zero, &at_n, &needs, &holds));
        self.ran(locks::CHECK, Some(v));
        self.report.findings.extend(locks::evaluate(
            v,
            &at_zero,
            &at_n,
            workload.as_ref(),
            &needs,
            &holds,
            self.v.stall_budget,
        ));
        self.backfill(
            m,
            applied_db.as_ref(),
            &live,
            &runnable,
            &readers_before,
            &newly,
        )?;
        self.compat(
            v,
            prev,
            applied_db.as_ref(),
            &live,
            &runnable,
            &live_outcomes,
        )?;
        // Post compares the final schema built over rows with the empty
        // path's; without seeded rows the two are one.
        Ok(Some(applied_db))
    }

    /// The measured apply on the seeded database `db`, with the live apps'
    /// workload running against it (everything it does is rolled back;
    /// the measurements are per backend, so they stay the migration's),
    /// then the file's batched updates as migrate runs them, the workload
    /// still on.
    fn apply_under_workload(
        &mut self,
        v: i32,
        m: &Migration,
        db: &Database,
        seeded_rows: i64,
        live: &[&AppVersion],
        live_outcomes: &std::collections::BTreeMap<String, Vec<replay::Outcome>>,
    ) -> Result<(Applied, WorkloadStats), VerifyError> {
        self.v.say(&format!(
            "V{v}: applying on {seeded_rows} seeded rows under the live apps' workload"
        ));
        let workload = step(
            "starting the workload",
            rehearsal::Workload::start(db.url(), &self.sessions, &live_apps(live, live_outcomes)),
        )?;
        std::thread::sleep(WORKLOAD_MARGIN);
        let migrator_url = self.sessions.migrator(db.url());
        let at_n = if m.runs_outside_transaction() {
            rehearsal::apply_measured_no_transaction(db.url(), &migrator_url, &m.sql, None)
        } else {
            rehearsal::apply_measured(db.url(), &migrator_url, &m.sql, None, End::Commit)
        };
        let batched = match &at_n {
            Ok(a) if a.ok() => Some(self.run_batched_updates(db, m)?),
            _ => None,
        };
        std::thread::sleep(WORKLOAD_MARGIN);
        let workload = workload.stop();
        if let Some(batched) = batched {
            self.report
                .findings
                .extend(backfill::batched_updates(v, &batched));
        }
        let mut at_n = step("applying on a seeded database", at_n)?;
        at_n.file = self.v.catalog.path_of(m);
        if at_n.outside_transaction && workload.counted_in_table_stats {
            at_n.forget_work("the live apps run as the migrator's role, so their sessions could not be left out of the cumulative table statistics (SET track_counts needs a superuser): the rows read and written by statements outside a transaction were not measured apart from theirs (declare an app role, -- role: or --app-role, to measure them)");
        }
        Ok((at_n, workload))
    }

    /// Backfill: right after the migration, every row existed before. The
    /// file's `-- rollsafe:backfill` directives hold on them, and the
    /// apps' readers see what the live ones saw before.
    fn backfill(
        &mut self,
        m: &Migration,
        applied_db: Option<&Database>,
        live: &[&AppVersion],
        runnable: &[&AppVersion],
        readers_before: &backfill::Visible,
        newly: &[String],
    ) -> Result<(), VerifyError> {
        let v = m.version;
        self.v.say(&format!("V{v}: backfill and readers"));
        self.ran(backfill::CHECK, Some(v));
        if let Some(db) = applied_db {
            let mut c = self.connect_migrator(db)?;
            let counted: Vec<backfill::DirectiveCount> = m
                .backfills()
                .map(|(table, predicate)| {
                    let count =
                        crate::validity::backfill_violations(&mut c, table, predicate, None)
                            .map_err(|e| crate::errors::one_line(&e));
                    (table.to_string(), predicate.to_string(), count)
                })
                .collect();
            self.report
                .findings
                .extend(backfill::directives(v, &counted));
        }
        let after = match applied_db {
            Some(db) => self.visible(db, runnable)?,
            None => backfill::Visible::default(),
        };
        let live_names: Vec<String> = live.iter().map(|a| a.name.clone()).collect();
        self.report.findings.extend(backfill::compare_readers(
            v,
            readers_before,
            &after,
            &live_names,
            newly,
        ));
        Ok(())
    }

    /// Compat: the running apps on the schema before (replayed in stage
    /// 1), every app that may run on the schema after, the types the
    /// running apps read and bind, then cross-version behaviour (which
    /// writes; the applied database is not needed unchanged any more:
    /// only its schema is, for post).
    fn compat(
        &mut self,
        v: i32,
        prev: i32,
        applied_db: Option<&Database>,
        live: &[&AppVersion],
        runnable: &[&AppVersion],
        live_outcomes: &std::collections::BTreeMap<String, Vec<replay::Outcome>>,
    ) -> Result<(), VerifyError> {
        self.v.say(&format!("V{v}: replaying the apps' statements"));
        self.ran(compat::CHECK, Some(v));
        for app in live {
            if let Some(outcomes) = live_outcomes.get(&app.name) {
                self.report
                    .findings
                    .extend(compat::replay_findings(v, app, prev, outcomes));
            }
        }
        let Some(db) = applied_db.filter(|_| !runnable.is_empty()) else {
            return Ok(());
        };
        let mut c = self.connect_migrator(db)?;
        let (sessions, url) = (&self.sessions, db.url());
        let seeded_now = step(
            "seeding the compat database",
            seed::seed(&mut c, runnable, COMPAT_ROWS, &|app| {
                crate::db::connect(&sessions.app(url, &app.name))
            }),
        )?;
        for (app, e) in &seeded_now.failed {
            self.report
                .findings
                .push(compat::rows_cannot_be_written(v, app, e));
        }
        for app in runnable {
            let mut c = self.connect_app(db, app)?;
            let outcomes = step("replaying statements", replay::replay_all(&mut c, app))?;
            self.report
                .findings
                .extend(compat::replay_findings(v, app, v, &outcomes));
            if let Some(before) = live_outcomes.get(&app.name) {
                self.report
                    .findings
                    .extend(compat::type_changes(v, app, prev, before, &outcomes));
            }
        }
        // Cross-version: each app still running against each newer one
        // that may run on this schema.
        for older in live {
            for newer in runnable.iter().filter(|a| a.needs > older.needs) {
                let mut c_old = self.connect_app(db, older)?;
                let mut c_new = self.connect_app(db, newer)?;
                let seen = cross_version::run(&mut c_old, &mut c_new, older, newer);
                self.report
                    .findings
                    .extend(compat::cross_version(v, older, newer, seen.as_ref()));
            }
        }
        Ok(())
    }

    /// Runs `m`'s batched updates on `db` as `migrate` does (batches under
    /// the lock policy), then counts the rows each still matches.
    fn run_batched_updates(
        &self,
        db: &Database,
        m: &crate::catalog::Migration,
    ) -> Result<Vec<backfill::BatchedRun>, VerifyError> {
        use crate::migrate::backfill as batches;
        let mut out = Vec::new();
        if m.batched_updates().next().is_none() {
            return Ok(out);
        }
        let mut c = self.connect_migrator(db)?;
        step(
            "creating the backfill progress table",
            batches::ensure_progress_table(&mut c),
        )?;
        drop(c);
        for (i, b) in m.batched_updates().enumerate() {
            self.v
                .say(&format!("V{}: batched update of {}", m.version, b.table));
            let started = Instant::now();
            let run = |c: &mut postgres::Client| {
                batches::run(
                    c,
                    m,
                    i,
                    b,
                    &batches::BackfillOptions::default(),
                    &self.v.lock_policy,
                    None,
                )
                .map_err(|e| e.to_string())
            };
            // Killed at a random moment (its connection terminated, as a
            // killed migrate's would be), then run again: it must resume
            // and settle every row.
            let mut c = self.connect_migrator(db)?;
            let pid: i32 = step(
                "reading the backend pid",
                c.query_one("SELECT pg_backend_pid()", &[]),
            )?
            .get(0);
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let delay = Duration::from_millis(rand::random_range(0..400));
            let killer = {
                let (done, url) = (done.clone(), db.url().to_string());
                std::thread::spawn(move || -> bool {
                    std::thread::sleep(delay);
                    if done.load(std::sync::atomic::Ordering::SeqCst) {
                        return false;
                    }
                    crate::db::connect(&url)
                        .ok()
                        .and_then(|mut a| {
                            a.query_one("SELECT pg_terminate_backend($1)", &[&pid]).ok()
                        })
                        .is_some_and(|r| r.get::<_, bool>(0))
                })
            };
            let first = run(&mut c);
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            let killed = killer.join().unwrap_or(false) && first.is_err();
            drop(c);
            let mut c = self.connect_migrator(db)?;
            let result = if killed { run(&mut c) } else { first };
            let remaining = c
                .query_one(
                    &format!(
                        "SELECT count(*) FROM {} WHERE {}",
                        b.table.sql(),
                        b.predicate
                    ),
                    &[],
                )
                .map(|r| r.get::<_, i64>(0))
                .map_err(|e| crate::errors::one_line(&e));
            out.push(backfill::BatchedRun {
                directive: b.clone(),
                rows: result,
                remaining,
                killed_after: killed.then_some(delay),
                took: started.elapsed(),
            });
        }
        Ok(out)
    }
}

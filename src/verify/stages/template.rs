//! Stage 2, per migration in order: the copy of the template at V{k−1}
//! that becomes the seeded database; the seeded database's rows (the live
//! apps', or the generator's), the apps' statements replayed on it, the
//! long-transaction probe started in the background on a copy of it, and
//! what the live apps' readers see there beside their statements' plans
//! (before the migration); and the empty path: a scenario
//! ([`forced_failure`], or [`Run::kill_and_rerun`] for a file outside
//! a transaction) and the measured apply on the empty template, which goes
//! on as the template at V{k}. The empty path of a migration in a
//! transaction runs beside the seeding (they share no database). For a
//! project without apps its forced failure comes before the rows: what its
//! transaction locked is the migration's reach
//! ([`crate::seed::reach`]), the tables the generator fills.

use std::collections::{BTreeMap, BTreeSet};

use super::{apply_unchecked, live_apps, long_transaction, needs_of, step, Run, Staged};
use crate::app::replay::Outcome;
use crate::app::AppVersion;
use crate::catalog::Migration;
use crate::report::events::MigrationStep;
use crate::sandbox::Database;
use crate::schema::Snapshot;
use crate::seed::reach::{self, Reach};
use crate::tables::UserTable;
use crate::verify::error::VerifyError;
use crate::verify::evidence::plan::Side;
use crate::verify::evidence::{Applied, Probe, Rerun, Visible};
use crate::verify::measure;
use measure::rehearsal::{self, LiveApp};
use measure::{forced_failure, kill_and_rerun};

/// What the empty path measured: its apply, the forced failure's trace,
/// the kill-and-rerun scenario (a file outside a transaction).
type EmptyPath = (Applied, Vec<String>, Option<Rerun>);

/// How stage 2 of one migration ended.
pub(super) enum Template {
    /// It applied on the empty path; stage 3 takes it from here.
    Staged(Box<Staged>),
    /// It ends the rehearsal: a live app could not write its rows before
    /// it, or it failed on the empty path.
    Stopped,
}

/// The seeded path's database before its rows: a copy of the template at
/// V{prev}, or of the previous migration's seeded database with that
/// migration applied.
struct SeedBase<'l> {
    db: Database,
    /// Rows it holds already.
    carried: i64,
    /// The live apps that write their rows now.
    writers: Vec<&'l AppVersion>,
    /// Tables that get no generated rows: an earlier migration of the same
    /// deploy created them ([`Run::born_in_deploy`]).
    left_empty: BTreeSet<String>,
}

/// The seeded database at V{prev}, when there is one.
enum Seeded {
    /// The database and the rows it holds.
    Rows(Database, i64),
    /// A live app could not write its rows (the rehearsal stops).
    AppCannotWrite,
}

/// How one migration's empty path and seeded path are scheduled: the four
/// ways, chosen in one place ([`Run::schedule`]).
enum Schedule<'l> {
    /// No app live at V{prev}, so no seeded path: the empty path alone,
    /// after the rest of stage 2.
    EmptyOnly,
    /// Outside a transaction: kill-and-rerun and the measured apply first
    /// (a failure there stops the rehearsal before any seeding), their
    /// locks the generator's reach; then the seeding.
    EmptyThenSeed(SeedBase<'l>),
    /// Inside one, the forced failure's transaction did not reach its end:
    /// its trace and the measured apply first (a failure stops the
    /// rehearsal there), then the seeding.
    MeasureThenSeed(SeedBase<'l>, Snapshot, Reach),
    /// Inside one, reaching its end: the seeding (one INSERT … SELECT on
    /// one core) beside the rest of the empty path on the template
    /// (another database).
    SeedBeside(SeedBase<'l>, Snapshot, Reach, std::time::Duration),
}

/// What the schedule left for the rest of stage 2: the seeded database
/// and its rows (None without a seeded path), and the empty path when it
/// ran already.
struct Scheduled {
    seeded: Option<(Database, i64)>,
    empty_path: Option<EmptyPath>,
}

/// What the live apps did and saw on the seeded database at V{prev}.
struct BeforeMigration {
    live_outcomes: BTreeMap<String, Vec<Outcome>>,
    readers_before: Visible,
    plans_before: Option<Result<Side, String>>,
}

impl<'a> Run<'a> {
    /// Stage 2 for migration `m` (at `index`), the schema being at V{prev}
    /// on `empty_prev`.
    pub(super) fn template(
        &mut self,
        index: usize,
        m: &Migration,
        prev: i32,
        staged: &[Staged],
        empty_prev: &Database,
        migrations: &[Migration],
    ) -> Result<Template, VerifyError> {
        let v = m.version;
        let live = self.who_runs(m, prev);
        let clock = std::time::Instant::now();
        // The seeded path's database before its rows (its copy is taken
        // while the template is still at V{prev}).
        let base = self.seed_base(prev, &live, staged.last(), empty_prev, migrations)?;
        let tables = measure::user_tables(empty_prev)?;
        let born = self.born_in_deploy(index, migrations, &tables);
        // A data migration applied by its framework at rows sends its
        // statements on the framework's connections: the probe's retry
        // loop cannot run them (locks says so).
        let probed = prev > 0 && !m.runs_outside_transaction() && m.external.is_none();
        if prev > 0 && m.runs_outside_transaction() && m.external.is_none() {
            self.evidence(v).probe = Some(Probe::NotApplicable);
        } else if probed && base.is_none() {
            // No seeded path: the probe's copy is of the template, taken
            // before the empty path applies the migration there.
            self.start_probe(v, m, empty_prev, &tables, &[])?;
        }
        let base = base.map(|b| SeedBase {
            left_empty: born,
            ..b
        });
        let schedule = self.schedule(m, base, empty_prev, &tables)?;
        let Some(Scheduled { seeded, empty_path }) =
            self.run_schedule(schedule, m, prev, &live, empty_prev, &tables)?
        else {
            return Ok(Template::Stopped);
        };
        let seeded_rows = seeded.as_ref().map_or(0, |(_, n)| *n);
        let before = self.before_migration(m, probed, seeded.as_ref(), &live, &tables, clock)?;
        let done = match empty_path {
            Some(done) => done,
            None => self.empty_path(m, empty_prev)?,
        };
        if !done.0.ok() {
            return Ok(self.stopped_on_empty(v, done));
        }
        let (at_zero, trace, rerun) = done;
        let e = self.evidence(v);
        (e.at_zero, e.failure_trace, e.rerun) = (Some(at_zero), trace, rerun);
        // The project's own verify script (Sqitch), on the empty path's
        // database right after the change.
        if let Some(script) = &m.verify {
            let own = self.own_roles(m, empty_prev)?;
            let ran = measure::verify_script(&self.sessions, empty_prev, script);
            drop(own);
            let ran = ran?;
            self.evidence(v).verify_script = Some(ran);
        }
        let (seeded, applied_db) = self.applied_db(m, seeded, empty_prev)?;
        Ok(Template::Staged(Box::new(Staged {
            index,
            seeded,
            seeded_rows,
            readers_before: before.readers_before,
            plans_before: before.plans_before,
            applied_db,
            live_outcomes: before.live_outcomes,
            tables,
        })))
    }

    /// The tables an earlier migration of `migrations[index]`'s deploy
    /// created (`tables`: the empty path's at V{prev}): in production they
    /// are empty when it runs, since no app writes rows between migrations
    /// of one deploy. A migration that starts a deploy (the first one
    /// rehearsed, one whose group differs from the one before it, or one
    /// without a group) records the tables it starts from instead and
    /// leaves none empty.
    fn born_in_deploy(
        &mut self,
        index: usize,
        migrations: &[Migration],
        tables: &[UserTable],
    ) -> BTreeSet<String> {
        let now: BTreeSet<String> = tables.iter().map(|t| t.name.clone()).collect();
        // (The one before it must be rehearsed too: `--since` ends a
        // deploy, production being at it.)
        let since = self.options.since;
        let with_previous = index
            .checked_sub(1)
            .is_some_and(|i| !since.is_some_and(|s| migrations[i].version <= s))
            && self.options.catalog.deployed_with_previous(index);
        if !with_previous {
            self.deploy_start = now;
            return BTreeSet::new();
        }
        now.difference(&self.deploy_start).cloned().collect()
    }

    /// The apps live during `m` (their rows, statements and readers are
    /// measured), recorded in its evidence with those that start running
    /// at its version.
    fn who_runs(&mut self, m: &Migration, prev: i32) -> Vec<&'a AppVersion> {
        let v = m.version;
        let options = self.options;
        let live: Vec<&AppVersion> = options.apps.iter().filter(|a| a.live_during(v)).collect();
        let newly = options
            .apps
            .iter()
            .filter(|a| a.may_run_on(v) && !a.may_run_on(prev))
            .map(|a| a.name.clone())
            .collect();
        let e = self.evidence(v);
        e.prev = prev;
        e.live = live.iter().map(|a| a.name.clone()).collect();
        e.newly = newly;
        live
    }

    /// Which of the four ways `m`'s two paths are scheduled. Inside a
    /// transaction, the forced failure's transaction tells whether the
    /// migration reaches its end on the empty database (one that does not
    /// is not seeded for: the rehearsal stops there) and, for the
    /// generator, what it reaches (the functions it sees there are those
    /// before it and those it creates).
    ///
    /// The generator (a project without apps) seeds only the tables the
    /// migration reaches, which the empty path tells: it runs first then.
    /// With apps, every table they may read gets rows, and the seeding
    /// goes first (the empty path beside it) so that the long-transaction
    /// probe, the longest scenario, starts as early as it can.
    fn schedule<'l>(
        &mut self,
        m: &Migration,
        base: Option<SeedBase<'l>>,
        empty_prev: &Database,
        tables: &[UserTable],
    ) -> Result<Schedule<'l>, VerifyError> {
        let Some(base) = base else {
            return Ok(Schedule::EmptyOnly);
        };
        if m.runs_outside_transaction() {
            return Ok(Schedule::EmptyThenSeed(base));
        }
        let v = m.version;
        self.options.say(v, MigrationStep::ApplyingOnEmpty);
        let (before, at_end) = forced_failure::fail_before_commit(&self.sessions, m, empty_prev)?;
        let reach = if self.generated() {
            let touched = at_end.as_ref().map(|e| {
                tables
                    .iter()
                    .filter(|t| e.locked.contains(&t.oid))
                    .map(|t| t.name.clone())
                    .collect::<BTreeSet<String>>()
            });
            let functions: BTreeSet<String> =
                at_end.iter().flat_map(|e| e.functions.clone()).collect();
            reach::of(&m.sql, touched.as_ref(), tables, &functions)
        } else {
            Reach::Everything("the live apps may read any table".into())
        };
        log::debug!("V{v}: reach {reach:?}");
        Ok(match at_end {
            None => Schedule::MeasureThenSeed(base, before, reach),
            Some(end) => Schedule::SeedBeside(base, before, reach, end.took),
        })
    }

    /// Whether the catalogue generator writes the rows (a project without
    /// apps) rather than the apps.
    fn generated(&self) -> bool {
        self.options.apps.is_empty()
    }

    /// `schedule` carried out: the seeded database at V{prev} and, when
    /// it ran first or beside, the empty path. None when the rehearsal
    /// stops here (the empty path failed, or a live app could not write
    /// its rows).
    fn run_schedule(
        &mut self,
        schedule: Schedule<'_>,
        m: &Migration,
        prev: i32,
        live: &[&AppVersion],
        empty_prev: &Database,
        tables: &[UserTable],
    ) -> Result<Option<Scheduled>, VerifyError> {
        let v = m.version;
        let (seeded, empty_path) = match schedule {
            Schedule::EmptyOnly => (None, None),
            Schedule::MeasureThenSeed(base, before, reach) => {
                let (mut at_zero, trace) =
                    forced_failure::trace_and_measure(empty_prev, &self.sessions, m, before, None)?;
                let catalog = &self.options.catalog;
                at_zero.set_files(|f| catalog.path_of_file(f), &m.file);
                if !at_zero.ok() {
                    self.stopped_on_empty(v, (at_zero, trace, None));
                    return Ok(None);
                }
                let seeded = self.seed_on(v, prev, live, base, reach)?;
                (Some(seeded), Some((at_zero, trace, None)))
            }
            Schedule::SeedBeside(base, before, reach, forced_took) => {
                // Cheap to clone; the seeding beside borrows the run.
                let sessions = self.sessions.clone();
                let seeding = |run: &mut Self| run.seed_on(v, prev, live, base, reach);
                let (seeded, done) = self.seed_beside(m, seeding, || {
                    forced_failure::trace_and_measure(
                        empty_prev,
                        &sessions,
                        m,
                        before,
                        Some(forced_took),
                    )
                })?;
                (Some(seeded?), Some(done))
            }
            Schedule::EmptyThenSeed(base) => {
                let generated = self.generated();
                let mut functions = if generated {
                    measure::table_reading_functions(empty_prev)?
                } else {
                    BTreeSet::new()
                };
                let done = self.empty_path(m, empty_prev)?;
                if !done.0.ok() {
                    self.stopped_on_empty(v, done);
                    return Ok(None);
                }
                let reach = if generated {
                    functions.extend(measure::table_reading_functions(empty_prev)?);
                    let touched = done.0.touched();
                    reach::of(&m.sql, touched.as_ref(), tables, &functions)
                } else {
                    Reach::Everything("the live apps may read any table".into())
                };
                log::debug!("V{v}: reach {reach:?}");
                let seeded = self.seed_on(v, prev, live, base, reach)?;
                (Some(seeded), Some(done))
            }
        };
        let seeded = match seeded {
            Some(Seeded::Rows(db, rows)) => Some((db, rows)),
            Some(Seeded::AppCannotWrite) => return Ok(None),
            None => None,
        };
        Ok(Some(Scheduled { seeded, empty_path }))
    }

    /// On the seeded database at V{prev} (nothing without one): the live
    /// apps' statements replayed (their kinds and locks decide what blocks
    /// them; compat reports failures), the long-transaction probe started,
    /// then what their readers see and, beside them (both only read; the
    /// probe's copy is taken), their statements planned. The seeded
    /// database is then the one the migration is measured on (no copy
    /// needed: nothing else reads its state before).
    fn before_migration(
        &mut self,
        m: &Migration,
        probed: bool,
        seeded: Option<&(Database, i64)>,
        live: &[&AppVersion],
        tables: &[UserTable],
        clock: std::time::Instant,
    ) -> Result<BeforeMigration, VerifyError> {
        let v = m.version;
        let live_outcomes = match seeded {
            Some((db, _)) => measure::compat::replay_apps(&self.sessions, db, live)?,
            None => BTreeMap::new(),
        };
        self.evidence(v).needs = needs_of(live, &live_outcomes);
        if let (true, Some((db, _))) = (probed, seeded) {
            log::debug!("V{v}: seeded and replayed in {:?}", clock.elapsed());
            self.start_probe(v, m, db, tables, &live_apps(live, &live_outcomes))?;
            log::debug!("V{v}: probe started at {:?}", clock.elapsed());
        }
        let (readers_before, plans_before) = match seeded {
            Some((db, _)) => {
                let this = &*self;
                let (readers, plans) = std::thread::scope(|s| {
                    let plans = s.spawn(|| this.plans_before(v, db, live));
                    let readers = this.readers().before(db, live);
                    let plans = plans.join().unwrap_or_else(|_| {
                        Some(Err("its thread panicked (a bug in rollsafe)".into()))
                    });
                    (readers, plans)
                });
                (readers?, plans)
            }
            None => (Visible::default(), None),
        };
        Ok(BeforeMigration {
            live_outcomes,
            readers_before,
            plans_before,
        })
    }

    /// The database the stages after measure on at V{v}, and whether it
    /// holds seeded rows. Without seeded rows, they need the schema at
    /// V{v} only when an app may run on it (compat replays, post) or its
    /// backfill directives are to be checked: a copy of the template.
    fn applied_db(
        &self,
        m: &Migration,
        seeded: Option<(Database, i64)>,
        empty_prev: &Database,
    ) -> Result<(bool, Option<Database>), VerifyError> {
        Ok(match seeded {
            Some((db, _)) => (true, Some(db)),
            None if self.options.apps.iter().any(|a| a.may_run_on(m.version))
                || !m.directives.is_empty() =>
            {
                (false, Some(self.clone_db(empty_prev)?))
            }
            None => (false, None),
        })
    }

    /// Migration `v` failed on the empty database: what its empty path
    /// measured is its evidence, and the rehearsal stops there (nothing
    /// is seeded or measured after it; later migrations cannot be
    /// reached).
    fn stopped_on_empty(&mut self, v: i32, (at_zero, trace, rerun): EmptyPath) -> Template {
        let e = self.evidence(v);
        (e.at_zero, e.failure_trace, e.rerun) = (Some(at_zero), trace, rerun);
        Template::Stopped
    }

    /// `seeding`, and beside it `empty_side`: the rest of `m`'s empty path
    /// on the template (another database), its trace and measured apply,
    /// returned as [`Run::empty_path`] returns them. Its error, or a panic
    /// of its thread, comes first; then what the seeding returned.
    fn seed_beside<T>(
        &mut self,
        m: &Migration,
        seeding: impl FnOnce(&mut Self) -> T,
        empty_side: impl FnOnce() -> Result<(Applied, Vec<String>), VerifyError> + Send,
    ) -> Result<(T, EmptyPath), VerifyError> {
        let (seeded, rest) = std::thread::scope(|s| {
            let rest = s.spawn(empty_side);
            let seeded = seeding(self);
            (seeded, rest.join())
        });
        let (mut at_zero, trace) = rest.unwrap_or_else(|_| {
            Err(VerifyError::Rehearsal {
                step: "applying on an empty database".into(),
                detail: "its thread panicked (a bug in rollsafe)".into(),
            })
        })?;
        let catalog = &self.options.catalog;
        at_zero.set_files(|f| catalog.path_of_file(f), &m.file);
        Ok((seeded, (at_zero, trace, None)))
    }

    /// The empty path: a scenario ([`forced_failure`], or
    /// [`Run::kill_and_rerun`] for a file outside a transaction), then the
    /// measured apply on the empty template (which goes on as the template
    /// at V{v}): what it measured, the failure's trace, the rerun.
    fn empty_path(
        &mut self,
        m: &Migration,
        empty_prev: &Database,
    ) -> Result<EmptyPath, VerifyError> {
        self.options.say(m.version, MigrationStep::ApplyingOnEmpty);
        let clock = std::time::Instant::now();
        let (mut at_zero, trace, rerun) = if m.runs_outside_transaction() {
            let (at_zero, rerun) = self.kill_and_rerun(m, empty_prev)?;
            (at_zero, Vec::new(), rerun)
        } else {
            let (at_zero, trace) = forced_failure::forced_failure(&self.sessions, m, empty_prev)?;
            (at_zero, trace, None)
        };
        let catalog = &self.options.catalog;
        at_zero.set_files(|f| catalog.path_of_file(f), &m.file);
        log::debug!("V{}: empty path in {:?}", m.version, clock.elapsed());
        Ok((at_zero, trace, rerun))
    }

    /// The seeded path's database at V{prev} before this migration's rows,
    /// the rows it already holds and the live apps that are to write
    /// theirs. None when no app is live at V{prev}: nothing writes rows,
    /// and the seeded database would be a copy of the empty one, so the
    /// empty path's apply stands for both (two copies fewer).
    ///
    /// The previous migration's seeded database (still at its V{prev-1})
    /// is the starting point: a copy of it with that migration applied
    /// holds the rows written before, migrated as production's are; only
    /// apps that start running now add rows. A project with no apps at all
    /// (migrations alone) is seeded by the catalogue generator, so rewrites
    /// and locks have rows: only its new or still-empty tables then get
    /// rows.
    fn seed_base<'l>(
        &mut self,
        prev: i32,
        live: &[&'l AppVersion],
        previous: Option<&Staged>,
        empty_prev: &Database,
        migrations: &[Migration],
    ) -> Result<Option<SeedBase<'l>>, VerifyError> {
        let generate_only = self.options.apps.is_empty() && prev > 0;
        if live.is_empty() && !generate_only {
            return Ok(None);
        }
        // Rows written before are carried: the previous migration's
        // seeded copy with that migration applied, as production's rows
        // are migrated.
        let reused = self.reuse_seeded(previous, migrations)?;
        Ok(Some(match reused {
            Some((db, carried, before)) => {
                let writers: Vec<&AppVersion> = live
                    .iter()
                    .filter(|a| !before.contains(&a.name))
                    .copied()
                    .collect();
                SeedBase {
                    db,
                    carried,
                    writers,
                    left_empty: BTreeSet::new(),
                }
            }
            None => SeedBase {
                db: self.clone_db(empty_prev)?,
                carried: 0,
                writers: live.to_vec(),
                left_empty: BTreeSet::new(),
            },
        }))
    }

    /// The seeded path: `base` with the rows the live apps write (a
    /// project without apps: the generator's, in the tables the
    /// migration reaches), and how many rows it holds. What the seeding
    /// did is migration `v`'s evidence.
    fn seed_on(
        &mut self,
        v: i32,
        prev: i32,
        live: &[&AppVersion],
        base: SeedBase<'_>,
        reach: Reach,
    ) -> Result<Seeded, VerifyError> {
        let generate_only = self.options.apps.is_empty() && prev > 0;
        let SeedBase {
            db: seeded,
            carried,
            writers,
            left_empty,
        } = base;
        let rows = if carried > 0 && !generate_only {
            // Only apps that start running now add rows.
            (self.options.rows * writers.len() as u64)
                .checked_div(live.len() as u64)
                .unwrap_or(0)
        } else {
            self.options.rows
        };
        self.options.say(
            v,
            MigrationStep::Seeding {
                carried,
                rows,
                at: self.options.catalog.label_of(prev),
            },
        );
        let plan = measure::seeding::Plan {
            writers: &writers,
            rows,
            fill_rows: self.options.rows,
            generate_only,
            carried: carried > 0,
            reach,
            left_empty: &left_empty,
        };
        let (seeding, written) = measure::seeding::seed(&self.sessions, &seeded, plan)?;
        self.evidence(v).seeding = Some(seeding);
        Ok(match written {
            Some(n) => Seeded::Rows(seeded, carried + n),
            None => Seeded::AppCannotWrite,
        })
    }

    /// The long-transaction probe of `m`, in the background, on a copy of
    /// `on` (the seeded database, else the template at V{prev}): an app
    /// transaction holds the tables while the migration runs the real
    /// retry loop under the live apps' workload.
    fn start_probe(
        &mut self,
        v: i32,
        m: &Migration,
        on: &Database,
        tables: &[crate::tables::UserTable],
        live: &[LiveApp],
    ) -> Result<(), VerifyError> {
        let probe_db = self.clone_db(on)?;
        let sql = m.sql.clone();
        let steps = crate::migrate::apply::migration_steps(m);
        let sessions = self.sessions.clone();
        let (tables, policy) = (tables.to_vec(), self.options.lock_policy);
        let apps: Vec<(AppVersion, BTreeSet<String>)> = live
            .iter()
            .map(|(a, w)| ((*a).clone(), w.clone()))
            .collect();
        let handle = std::thread::spawn(move || {
            let apps: Vec<LiveApp> = apps.iter().map(|(a, w)| (a, w.clone())).collect();
            let _own = sessions.own_roles(v, &sql, probe_db.name())?;
            let r = rehearsal::probe_long_transaction(
                probe_db.url(),
                &sessions,
                steps,
                &tables,
                &apps,
                policy,
                long_transaction(&policy),
            );
            drop(probe_db);
            r
        });
        self.probes.push((v, handle));
        Ok(())
    }

    /// The kill-and-rerun scenario ([`kill_and_rerun::run`]) on `empty`,
    /// its killed run on a copy of the template at V{prev}.
    fn kill_and_rerun(
        &mut self,
        m: &Migration,
        empty: &Database,
    ) -> Result<(Applied, Option<Rerun>), VerifyError> {
        let killed = self.clone_db(empty)?;
        kill_and_rerun::run(&self.sessions, m, empty, &killed)
    }

    /// Held around one apply of `m` on `db` (see [`Sessions::own_roles`]).
    pub(super) fn own_roles(
        &self,
        m: &Migration,
        db: &Database,
    ) -> Result<crate::sessions::OwnRoles<'_>, VerifyError> {
        step(
            "setting aside the roles the migration creates",
            self.sessions.own_roles(m.version, &m.sql, db.name()),
        )
    }

    /// A copy of the previous migration's seeded database (at its V{prev−1})
    /// with that migration applied: (database, rows it holds, names of the
    /// apps whose rows they are). None when there is none to reuse (no
    /// live app then, or a migration with `-- rollsafe:batched-update`
    /// directives, whose batches the plain apply would not run) or the
    /// migration fails on it (stage 3 reports that). A migration that runs
    /// outside a transaction without batches is carried like any other:
    /// the plain apply runs its statements one by one, as `migrate` does
    /// (re-seeding from scratch after it was a third of a 20-migration
    /// run on the history fixture).
    fn reuse_seeded(
        &self,
        last: Option<&Staged>,
        migrations: &[crate::catalog::Migration],
    ) -> Result<Option<(Database, i64, Vec<String>)>, VerifyError> {
        let Some(last) = last.filter(|l| l.seeded) else {
            return Ok(None);
        };
        let (Some(base), m) = (&last.applied_db, &migrations[last.index]) else {
            return Ok(None);
        };
        if m.batched_updates().next().is_some() {
            return Ok(None);
        }
        let db = self.clone_db(base)?;
        let applied = match &m.external {
            // A data migration: its framework applies it to the rows.
            Some(x) => {
                let run = measure::external::apply(&self.sessions, &db, x, last.seeded_rows)?;
                match (run.failed, run.applied_beyond) {
                    (Some((status, _)), _) => Err(status),
                    // More than this migration: these rows are not its.
                    (None, Some(beyond)) => Err(beyond),
                    (None, None) => Ok(()),
                }
            }
            None => {
                let mut c = measure::connect_migrator(&self.sessions, &db)?;
                let own = self.own_roles(m, &db)?;
                let applied = apply_unchecked(&mut c, m);
                drop(own);
                applied
            }
        };
        if applied.is_err() {
            return Ok(None);
        }
        let apps = self
            .options
            .apps
            .iter()
            .filter(|a| a.live_during(m.version))
            .map(|a| a.name.clone())
            .collect();
        Ok(Some((db, last.seeded_rows, apps)))
    }
}

//! `rollsafe verify`: rehearse every migration in throwaway Postgres and
//! prove it safe to roll out while old and new app versions run.
//!
//! One sandbox server per run. For each migration k, the scenarios start
//! from the empty template database at version k−1 and, when an app
//! version is live at k−1, a copy of it seeded with `rows` rows written by
//! those apps. Each scenario that changes a database gets one of its own,
//! so no scenario sees another's effects:
//!
//! | scenario | database | feeds |
//! |---|---|---|
//! | forced failure, then measured apply | the empty template itself (it goes on as the template at V{k}) | apply (no trace), rewrite (0 rows) |
//! | migrator run twice | one database for the run | apply (second run is a no-op) |
//! | live apps' statements and readers at V{k−1}, then the measured apply under their workload | the seeded copy | compat, backfill (before), apply, rewrite, locks |
//! | long transaction (in the background) | a copy of the seeded database (of the template without live apps) | locks (lock timeout) |
//! | directives, readers after, statement replay, cross-version | the seeded copy after the apply + a few rows | backfill, compat |
//!
//! With no app live at k−1 nothing writes rows, so the seeded path would
//! repeat the empty one: its apply stands for both, and a copy of the
//! template at V{k} serves the later scenarios when an app may run on it.
//! Copies cost ~0.2 s each (`CREATE DATABASE … TEMPLATE`), which is why
//! the plan above makes as few as the scenarios' independence allows.
//!
//! After the last migration, `post` reads the final schemas and `dao` runs
//! on the empty path's database at the final version. Before any of it,
//! `static` runs squawk's lint rules on every migration's text (no
//! database: [`Verify::static_only`] is that precheck alone).
//!
//! The stages measure; they judge nothing. What each scenario measured
//! goes into its migration's [`evidence::MigrationEvidence`]; once every
//! stage and background scenario is done, one loop hands every
//! migration's evidence to every check of the registry
//! ([`checks::ALL`]), which also says which checks ran. A migration that
//! fails to apply ends the rehearsal there (later ones cannot be
//! reached); its findings say why.
//!
//! The library never prints: progress goes to the optional callback, the
//! result is a [`Report`].

pub mod checks;
mod error;
pub mod events;
pub mod evidence;
pub mod measure;
mod stages;

pub use evidence::predict;
pub use measure::{cross_version, planning, rehearsal, roles, sampler, target};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::catalog::{Catalog, Source};
use crate::lock_policy::LockPolicy;
use crate::report::{CheckRun, RehearsedApp, Report};
use crate::sandbox::{Database, Sandbox, SandboxBuilder};
use crate::schema::Snapshot;

use crate::app::replay::{self, Outcome};
use crate::app::AppVersion;
use crate::pg::lock_modes::Needs;
use checks::{apply, compat, locks, r#static};
use events::{Event, MigrationStep, RunStep, VerifyEvent};
use evidence::LongTransactionProbe;
use evidence::{MigrationEvidence, Visible, Warning};
use predict::Sizes;
use rehearsal::LiveApp;
use roles::Sessions;

pub use crate::seed::DEFAULT_ROWS;
pub use error::VerifyError;
/// Rows written on the compat scenario's database, so statements that
/// need existing data find some.
const COMPAT_ROWS: u64 = 50;
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

type Progress = Arc<dyn Fn(&VerifyEvent) + Send + Sync>;

/// The expected final schema.
#[derive(Debug, Clone)]
pub enum ExpectedSchema {
    /// Compare with this snapshot (named for messages).
    Snapshot(Snapshot, String),
    /// Use what the migrations build on an empty database.
    Derived,
}

/// A rehearsal's options (builder).
#[derive(Clone)]
pub struct Verify {
    catalog: Catalog,
    apps: Vec<AppVersion>,
    rows: u64,
    lock_policy: LockPolicy,
    stall_budget: Duration,
    sizes: Sizes,
    since: Option<i32>,
    /// `--from-target`: the schema and history the rehearsal starts from.
    target: Option<target::Target>,
    expected: ExpectedSchema,
    progress: Option<Progress>,
    /// The PostgreSQL major its events name, when several are rehearsed.
    major: Option<u32>,
    /// The role apps connect as when their file declares none.
    app_role: Option<String>,
    /// `--migrator-superuser`: migrations run as the sandbox's superuser.
    superuser_migrator: bool,
    /// `--setup`: SQL run once as a superuser before the first migration.
    setup: Option<String>,
    /// The longest one rehearsed statement (a migration's, an app's) may
    /// run before it is cancelled.
    statement_timeout: Duration,
    /// A plan regression whose full read per call stays under this at
    /// production size is a warning (`--plan-budget`).
    plan_budget: Duration,
}

impl Verify {
    /// Rehearses `catalog` with the embedded app versions, the default row
    /// count and lock timeout. The expected schema is `migrations/schema.json`
    /// for the embedded catalog, `DIR/schema.json` for a directory that has
    /// one, else derived.
    pub fn new(catalog: Catalog) -> Result<Verify, VerifyError> {
        let expected = match &catalog.source {
            Source::Embedded => ExpectedSchema::Snapshot(
                crate::schema::expected_embedded(),
                "migrations/schema.json".into(),
            ),
            Source::Dir(d) => {
                let path = d.join("schema.json");
                if path.is_file() {
                    let text =
                        std::fs::read_to_string(&path).map_err(|e| VerifyError::BadSnapshot {
                            path: path.clone(),
                            detail: e.to_string(),
                        })?;
                    let snap =
                        Snapshot::from_json(&text).map_err(|e| VerifyError::BadSnapshot {
                            path: path.clone(),
                            detail: e.to_string(),
                        })?;
                    ExpectedSchema::Snapshot(snap, path.display().to_string())
                } else {
                    ExpectedSchema::Derived
                }
            }
        };
        // A project's apps are handed in (`apps`; the shipped project's by
        // `main.rs`, through `dao::shipped::verify`): the engine knows none.
        Ok(Verify {
            catalog,
            apps: Vec::new(),
            rows: DEFAULT_ROWS,
            lock_policy: LockPolicy::default(),
            stall_budget: locks::STALL_BUDGET,
            sizes: Sizes::default(),
            since: None,
            target: None,
            expected,
            progress: None,
            major: None,
            app_role: None,
            superuser_migrator: false,
            setup: None,
            statement_timeout: roles::DEFAULT_STATEMENT_TIMEOUT,
            plan_budget: checks::plan::PLAN_BUDGET,
        })
    }

    /// The role apps whose statement file declares none (`-- role:`)
    /// connect as; without one they connect as the migrator.
    pub fn app_role(mut self, role: Option<String>) -> Self {
        self.app_role = role;
        self
    }

    /// Run migrations as the sandbox's superuser, as a production whose
    /// migrator is one does (`--migrator-superuser`). Off by default: a
    /// migration then runs as a role that owns the databases and is not a
    /// superuser ([`roles`]).
    pub fn superuser_migrator(mut self, yes: bool) -> Self {
        self.superuser_migrator = yes;
        self
    }

    /// SQL that creates what the history assumes from outside itself
    /// (roles its GRANTs name, extensions, schemas: the project's init
    /// script), run once as a superuser on the rehearsal's first database
    /// before the first migration (`--setup`): every database the
    /// rehearsal copies from it has them, and roles are the server's.
    pub fn setup(mut self, sql: Option<String>) -> Self {
        self.setup = sql;
        self
    }

    /// The longest one rehearsed statement may run: it is then cancelled
    /// and reported (`apply.statement-timeout`).
    pub fn statement_timeout(mut self, d: Duration) -> Self {
        self.statement_timeout = d;
        self
    }

    /// A plan regression whose full read per call, at production size,
    /// stays under `d` is a warning rather than an error.
    pub fn plan_budget(mut self, d: Duration) -> Self {
        self.plan_budget = d;
        self
    }

    pub fn rows(mut self, rows: u64) -> Self {
        self.rows = rows;
        self
    }

    /// The lock policy `rollsafe migrate` will apply with (verify runs
    /// its retry loop behind a long transaction).
    pub fn lock_policy(mut self, p: LockPolicy) -> Self {
        self.lock_policy = p;
        self
    }

    /// The longest any app statement may wait because of a migration.
    pub fn stall_budget(mut self, d: Duration) -> Self {
        self.stall_budget = d;
        self
    }

    /// Rehearse only the migrations after `version`: those up to it are
    /// applied once, unchecked, into the database the rehearsals start
    /// from (a pull request's cost then follows its change, not the
    /// history). A version that is not in the catalog is refused.
    pub fn since(mut self, version: i32) -> Result<Self, VerifyError> {
        if self.catalog.get(version).is_none() {
            return Err(VerifyError::UnknownSince {
                since: version,
                available: self.catalog.label_ranges(
                    &self
                        .catalog
                        .migrations()
                        .iter()
                        .map(|m| m.version)
                        .collect::<Vec<_>>(),
                ),
            });
        }
        self.since = Some(version);
        Ok(self)
    }

    /// Rehearse exactly the migrations pending on `target`, starting from
    /// its schema (read when the rehearsal runs) instead of the files'
    /// earlier migrations. Its final schema is what the migrations make of
    /// the target's, so no snapshot is expected.
    pub fn from_target(mut self, target: target::Target) -> Self {
        self.since = target.applied;
        self.expected = ExpectedSchema::Derived;
        self.target = Some(target);
        self
    }

    /// Production table sizes to predict lock holds at.
    pub fn sizes(mut self, s: Sizes) -> Self {
        self.sizes = s;
        self
    }

    /// Replaces the app versions (ordered by `needs`).
    pub fn apps(mut self, mut apps: Vec<AppVersion>) -> Self {
        apps.sort_by_key(|a| a.needs);
        self.apps = apps;
        self
    }

    pub fn expected_schema(mut self, e: ExpectedSchema) -> Self {
        self.expected = e;
        self
    }

    /// Called with an event whenever a step starts and a stage starts or
    /// finishes.
    pub fn progress(mut self, f: impl Fn(&VerifyEvent) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    fn emit(&self, what: Event) {
        let event = VerifyEvent {
            major: self.major,
            what,
        };
        if event.shown() {
            log::info!("{event}");
        }
        if let Some(p) = &self.progress {
            p(&event);
        }
    }

    /// Migration `v`'s `step` started.
    fn say(&self, v: i32, step: MigrationStep) {
        self.emit(Event::Migration {
            version: v,
            label: self.catalog.label_of(v),
            step,
        });
    }

    /// Rehearses on each PostgreSQL major of `majors`, each on a server of
    /// its own started from `builder` (as many at once as there are
    /// cores), and merges the reports ([`crate::report::merge_majors`]).
    /// A major that cannot be started is the error (naming how to get it).
    pub fn run_on_majors(
        &self,
        builder: &SandboxBuilder,
        majors: &[u32],
    ) -> Result<Report, VerifyError> {
        let parallel = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let mut results: Vec<(u32, Result<Report, VerifyError>)> = Vec::new();
        for chunk in majors.chunks(parallel) {
            std::thread::scope(|s| {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|&major| {
                        let mut v = self.clone();
                        v.major = Some(major);
                        let builder = builder.clone().postgres_major(major);
                        (major, s.spawn(move || v.run(&builder.start()?)))
                    })
                    .collect();
                for (major, h) in handles {
                    results.push((
                        major,
                        h.join().unwrap_or_else(|_| {
                            Err(VerifyError::Rehearsal {
                                step: format!("rehearsing on PostgreSQL {major}"),
                                detail: "its thread panicked (a bug in rollsafe)".into(),
                            })
                        }),
                    ));
                }
            });
        }
        let mut reports = Vec::new();
        for (major, r) in results {
            reports.push((major, r?));
        }
        Ok(crate::report::merge_majors(reports))
    }

    /// What the checks judge with besides the evidence.
    fn context(&self) -> evidence::Context<'_> {
        evidence::Context {
            apps: &self.apps,
            lock_policy: self.lock_policy,
            stall_budget: self.stall_budget,
            statement_timeout: self.statement_timeout,
            plan_budget: self.plan_budget,
            sizes: &self.sizes,
            expected: match &self.expected {
                ExpectedSchema::Snapshot(s, name) => Some((s, name.as_str())),
                ExpectedSchema::Derived => None,
            },
            labels: evidence::Labels::of_catalog(&self.catalog),
        }
    }

    /// Versions applied unchecked before the rehearsed ones (`since`).
    fn applied_only(&self) -> Vec<i32> {
        self.catalog
            .migrations()
            .iter()
            .map(|m| m.version)
            .filter(|v| self.since.is_some_and(|s| *v <= s))
            .collect()
    }

    /// squawk's warnings on every migration the rehearsal judges.
    fn lint(&self) -> BTreeMap<i32, Vec<Warning>> {
        self.catalog
            .migrations()
            .iter()
            .filter(|m| !self.since.is_some_and(|s| m.version <= s))
            .map(|m| {
                let warnings = r#static::lint(
                    &self.catalog.path_of(m),
                    &m.sql,
                    !m.runs_outside_transaction(),
                )
                .into_iter()
                .filter(|w| !m.nolint.silences(w.statement, &w.rule))
                .collect();
                (m.version, warnings)
            })
            .collect()
    }

    /// The static precheck alone: squawk's rules on every migration that
    /// would be rehearsed, with lines, in milliseconds. No database, no
    /// sandbox, nothing measured: every finding is squawk's word (a
    /// warning), none is confirmed or refuted.
    pub fn static_only(&self) -> Report {
        let started = Instant::now();
        let mut report = Report::new("rollsafe verify --static-only");
        report.sandbox = "none (static precheck only: no database was started)".into();
        report.set_migrations(&self.catalog);
        report.applied_only = self.applied_only();
        for (v, warnings) in self.lint() {
            report.checks.push(CheckRun {
                check: r#static::CHECK.into(),
                migration: Some(v),
                description: checks::description(r#static::CHECK).into(),
            });
            report
                .findings
                .extend(r#static::unjudged(v, &warnings, None));
        }
        report.duration_ms = started.elapsed().as_millis() as u64;
        report.finish();
        report
    }

    /// Runs the rehearsal on `sandbox`.
    pub fn run(&self, sandbox: &Sandbox) -> Result<Report, VerifyError> {
        let started = Instant::now();
        // The static precheck reads the files while the databases are
        // prepared (it needs none); its warnings wait for their
        // measurements.
        self.emit(Event::Run(RunStep::Lint));
        let lint = {
            let v = self.clone();
            std::thread::spawn(move || v.lint())
        };
        // The roles exist before V1, as production's do: the migrations'
        // GRANTs apply to them.
        let sessions = Sessions::create(
            sandbox,
            &self.apps,
            self.app_role.as_deref(),
            self.superuser_migrator,
            self.statement_timeout,
        )?;
        self.emit(Event::Run(RunStep::Sessions(format!(
            "migrations run as {}{}; apps as {}",
            sessions.migrator_name(),
            if sessions.superuser_migrator() {
                " (--migrator-superuser)"
            } else {
                " (owner of the databases, not a superuser)"
            },
            if self.apps.is_empty() {
                "none".to_string()
            } else {
                self.apps
                    .iter()
                    .map(|a| format!("{} as {}", a.name, sessions.role_of(&a.name)))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ))));
        let mut run = Run {
            options: self,
            sandbox,
            sessions,
            stand_ins: Vec::new(),
            report: Report::new("rollsafe verify"),
            probes: Vec::new(),
            migrator: None,
            evidence: self
                .catalog
                .migrations()
                .iter()
                .filter(|m| !self.since.is_some_and(|s| m.version <= s))
                .map(|m| {
                    let e = MigrationEvidence {
                        version: m.version,
                        file: self.catalog.path_of(m),
                        sql: m.sql.clone(),
                        ..MigrationEvidence::default()
                    };
                    (m.version, e)
                })
                .collect(),
        };
        run.report.sandbox = sandbox.describe();
        run.report.server_version = sandbox.server_version()?;
        run.report.set_migrations(&self.catalog);
        run.report.rows = self.rows;
        run.report.applied_only = self.applied_only();
        run.report.base = self.target.as_ref().map(target::Target::phrase);
        run.report.apps = self
            .apps
            .iter()
            .map(|a| RehearsedApp {
                name: a.name.clone(),
                needs: a.needs,
                statements: a.set.statements().len(),
            })
            .collect();
        let versions: Vec<i32> = self
            .catalog
            .migrations()
            .iter()
            .map(|m| m.version)
            .collect();
        run.report.safe_order = compat::safe_order(&versions, &self.apps, &self.context().labels);
        let result = run.all();
        // Collect the background work even when the rehearsal stopped early.
        run.collect_background();
        result?;
        run.collect_lint(lint);
        run.judge();
        apply::without_what_the_base_left_out(&mut run.report.findings);
        let mut report = run.report;
        report.duration_ms = started.elapsed().as_millis() as u64;
        report.finish();
        // The order is only proven when nothing failed.
        if !report.passed {
            report.safe_order.clear();
        }
        Ok(report)
    }
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
struct Run<'a> {
    options: &'a Verify,
    sandbox: &'a Sandbox,
    /// Who runs what: the migrator and the apps' roles.
    sessions: Sessions,
    /// Stand-ins for the target's roles its GRANTs name (`--from-target`),
    /// dropped with the run.
    stand_ins: Vec<crate::sandbox::Role>,
    report: Report,
    probes: Vec<(i32, ProbeHandle)>,
    migrator: Option<MigratorHandle>,
    /// What each rehearsed migration's scenarios measured so far, judged
    /// once they all ran ([`Run::judge`]).
    evidence: BTreeMap<i32, MigrationEvidence>,
}

fn step<T, E: Into<anyhow::Error>>(what: &str, r: Result<T, E>) -> Result<T, VerifyError> {
    // The server's message and the causes, one line (a driver error's
    // Display alone is "db error").
    r.map_err(|e| VerifyError::Rehearsal {
        step: what.to_string(),
        detail: crate::errors::one_line(e.into().as_ref()),
    })
}

/// Applies `m` as `migrate` would, unmeasured: in one transaction, or
/// statement by statement for a file that runs outside one (its batched
/// updates have no rows to settle in a base without data).
fn apply_unchecked(c: &mut postgres::Client, m: &crate::catalog::Migration) -> Result<(), String> {
    use crate::migrate::{apply, no_transaction as nt};
    if let Some(why) = &m.not_runnable {
        return Err(format!("it {why}"));
    }
    if m.runs_outside_transaction() {
        let steps = nt::steps(&m.sql);
        return apply::outside_transaction(c, &steps, None, &mut apply::Unobserved)
            .map(|_| ())
            .map_err(|e| format!("line {}: {}", steps[e.index()].statement.line, e.message()));
    }
    let steps = apply::transaction_steps(&m.sql);
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
        crate::migrate::way_out::with_advice(e.message(), sqlstate, &m.sql)
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
    fn collect_lint(&mut self, handle: JoinHandle<BTreeMap<i32, Vec<Warning>>>) {
        match handle.join() {
            Ok(linted) => {
                for (v, warnings) in linted {
                    self.evidence(v).lint = Some(warnings);
                }
            }
            Err(_) => self.report.findings.push(r#static::not_run()),
        }
    }

    /// The one judgement: every migration's evidence, in order, by every
    /// check of the registry; the report lists each check that had
    /// evidence to judge, and its findings, before the project's own
    /// (which ran in the final stage).
    fn judge(&mut self) {
        let verify = self.options;
        let cx = verify.context();
        let (mut ran, mut findings) = (Vec::new(), Vec::new());
        for e in self.evidence.values() {
            let mut judged = Vec::new();
            for check in checks::ALL {
                let recorded = ran
                    .iter()
                    .any(|r: &CheckRun| r.check == check.name && r.migration == Some(e.version));
                if (check.ran)(e) && !recorded {
                    ran.push(CheckRun {
                        check: check.name.to_string(),
                        migration: Some(e.version),
                        description: check.description.to_string(),
                    });
                }
                judged.extend((check.evaluate)(e, &cx));
            }
            checks::one_hazard_one_error(&mut judged, &e.sql);
            findings.extend(judged);
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
        self.report.checks.splice(0..0, ran);
        self.report.findings.splice(0..0, findings);
    }

    fn clone_db(&self, source: &Database) -> Result<Database, VerifyError> {
        let copy = self
            .sandbox
            .clone_database_owned_by(source, self.sessions.owner())?;
        // It knows the roles its source's migrations created.
        self.sessions.copied(source.name(), copy.name());
        Ok(copy)
    }

    fn snapshot(db: &Database) -> Result<Snapshot, VerifyError> {
        let mut c = step("connecting", db.connect())?;
        step("reading the schema", Snapshot::read(&mut c))
    }

    /// A connection to `db` as the migrator.
    fn connect_migrator(&self, db: &Database) -> Result<postgres::Client, VerifyError> {
        step(
            "connecting as the migrator",
            crate::db::connect(&self.sessions.migrator(db.url())),
        )
    }

    /// The connection seeding runs on: as the migrator (the owner of the
    /// tables, whose seeds are the project's files), through the seeder
    /// role where there is one, so the generator's rows may skip the
    /// per-row foreign-key checks ([`generate`]).
    fn connect_seeding(&self, db: &Database) -> Result<postgres::Client, VerifyError> {
        let Some((url, migrator)) = self.sessions.seeder(db.url()) else {
            return self.connect_migrator(db);
        };
        let mut c = step("connecting as the seeder", crate::db::connect(&url))?;
        step(
            "becoming the migrator",
            c.batch_execute(&format!("SET ROLE {}", crate::pg::quote_ident(&migrator))),
        )?;
        Ok(c)
    }

    /// A connection to `db` as `app`'s role.
    fn connect_app(
        &self,
        db: &Database,
        app: &AppVersion,
    ) -> Result<postgres::Client, VerifyError> {
        step(
            &format!("connecting as the {} app's role", app.name),
            crate::db::connect(&self.sessions.app(db.url(), &app.name)),
        )
    }

    /// Joins the migrator and the long-transaction probes and hands what
    /// they measured to their migrations. A thread that died is evidence
    /// too: nothing is dropped silently.
    fn collect_background(&mut self) {
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
        let mut known: std::collections::BTreeSet<String> = Self::user_tables(last)?
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

    fn user_tables(db: &Database) -> Result<Vec<crate::tables::UserTable>, VerifyError> {
        let mut c = step("connecting", db.connect())?;
        step("listing tables", crate::tables::list(&mut c))
    }

    /// The names (lower case) of the project's own functions on `db` that
    /// may read or write a table.
    fn table_reading_functions(
        db: &Database,
    ) -> Result<std::collections::BTreeSet<String>, VerifyError> {
        let mut c = step("connecting", db.connect())?;
        step(
            "listing functions",
            crate::seed::generate::table_reading_functions(&mut c),
        )
    }

    fn replay_apps(
        &self,
        db: &Database,
        apps: &[&AppVersion],
    ) -> Result<BTreeMap<String, Vec<Outcome>>, VerifyError> {
        let mut out = BTreeMap::new();
        for app in apps {
            let mut c = self.connect_app(db, app)?;
            let outcomes = step("replaying statements", replay::replay_all(&mut c, app))?;
            out.insert(app.name.clone(), outcomes);
        }
        Ok(out)
    }
}

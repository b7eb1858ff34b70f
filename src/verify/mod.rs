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
//! on the empty path's database at the final version. Before any of it, `static` runs squawk's lint rules on
//! every migration's text (no database: [`Verify::static_only`] is that
//! precheck alone); each warning is then judged against the measured apply
//! of its migration. A migration that fails to apply ends the rehearsal there
//! (later ones cannot be reached); its findings say why.
//!
//! The library never prints: progress goes to the optional callback, the
//! result is a [`Report`].

pub mod apps;
pub mod checks;
pub mod generate;
pub mod lock_modes;
pub mod plans;
pub mod predict;
pub mod rehearsal;
pub mod replay;
pub mod roles;
pub mod sampler;
pub mod seed;
pub mod target;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::catalog::{Catalog, Source};
use crate::lock_policy::LockPolicy;
use crate::report::{CheckRun, Finding, RehearsedApp, Report};
use crate::sandbox::{Database, Sandbox, SandboxBuilder, SandboxError};
use crate::schema::Snapshot;

use apps::{AppError, AppVersion, ProjectCheck};
use checks::{apply, backfill, compat, locks, post, r#static, rewrite};
use lock_modes::Needs;
use predict::Sizes;
use rehearsal::{End, LiveApp, LongTransactionProbe};
use replay::Outcome;
use roles::Sessions;

/// Default rows per seeded rehearsal: enough that work proportional to the
/// table shows up in rows and files, small enough to seed in well under a
/// second.
pub const DEFAULT_ROWS: u64 = 10_000;
/// Rows written on the compat scenario's database, so statements that
/// need existing data find some.
const COMPAT_ROWS: u64 = 50;
/// How long the live workload runs before and after the migration (its
/// statements take a millisecond or two: dozens run in this time).
const WORKLOAD_MARGIN: Duration = Duration::from_millis(50);

/// How long the long-transaction probe keeps its transaction open: long
/// enough for the lock policy to step up to its cap a few times, and for a
/// migration that overrides its lock timeout to be seen waiting past the
/// cap (plus slack) before the transaction ends.
fn long_transaction(policy: &LockPolicy) -> Duration {
    (policy.max_timeout * 3)
        .max(policy.max_timeout + rehearsal::LOCK_WAIT_SLACK + Duration::from_millis(500))
}

/// Why a rehearsal could not run at all (as opposed to findings).
#[derive(Debug, Error)]
pub enum VerifyError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Apps(#[from] AppError),
    #[error("{path}: not a valid schema snapshot ({detail}); regenerate it (see src/schema.rs) or remove it")]
    BadSnapshot { path: PathBuf, detail: String },
    #[error("--since {since} is not a migration version (the files have {available}); pass one of those")]
    UnknownSince { since: i32, available: String },
    #[error("V{version} ({file}) fails to apply before the rehearsed migrations (--since): {detail}; it is applied unchecked, so it must apply cleanly on the previous version")]
    PrefixFails {
        version: i32,
        file: String,
        detail: String,
    },
    #[error("rehearsal failed while {step}: {detail}")]
    Rehearsal { step: String, detail: String },
    #[error("--from-target {target}: its history does not match the migration files ({detail}); verify with the files the target was migrated with (`rollsafe status` shows each version's state)")]
    TargetDrift { target: String, detail: String },
    #[error("--from-target: {0}")]
    Target(String),
    #[error("--table-rows names {unknown}, which no rehearsed migration's schema has (tables: {known}); name a table as the reports do (outside public with its schema, e.g. sales.orders)")]
    UnknownTableRows { unknown: String, known: String },
}

type Progress = Arc<dyn Fn(&str) + Send + Sync>;

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
    /// The role apps connect as when their file declares none.
    app_role: Option<String>,
    /// `--migrator-superuser`: migrations run as the sandbox's superuser.
    superuser_migrator: bool,
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
        // The shipped project's apps go with its migrations; another
        // project's run replays the apps it is given (`apps`), if any.
        let apps = if crate::dao::shipped::owns(&catalog) {
            crate::dao::shipped::apps()?
        } else {
            Vec::new()
        };
        Ok(Verify {
            catalog,
            apps,
            rows: DEFAULT_ROWS,
            lock_policy: LockPolicy::default(),
            stall_budget: locks::STALL_BUDGET,
            sizes: Sizes::default(),
            since: None,
            target: None,
            expected,
            progress: None,
            app_role: None,
            superuser_migrator: false,
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
                available: self
                    .catalog
                    .migrations()
                    .iter()
                    .map(|m| format!("V{}", m.version))
                    .collect::<Vec<_>>()
                    .join(", "),
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

    /// Called with a short line whenever a new step starts.
    pub fn progress(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    fn say(&self, s: &str) {
        // Progress names migrations as the project does (`V3` is
        // rollsafe's ordinal; a sqlx project knows `20240101120000`).
        let labels: BTreeMap<i32, String> = self
            .catalog
            .migrations()
            .iter()
            .filter(|m| m.label != format!("V{}", m.version))
            .map(|m| (m.version, m.label.clone()))
            .collect();
        let s = crate::report::relabel_text(s, &labels);
        log::info!("{s}");
        if let Some(p) = &self.progress {
            p(&s);
        }
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
                        if let Some(p) = self.progress.clone() {
                            v.progress =
                                Some(Arc::new(move |line: &str| p(&format!("PG{major}: {line}"))));
                        }
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
    fn lint(&self) -> BTreeMap<i32, Vec<r#static::Warning>> {
        self.catalog
            .migrations()
            .iter()
            .filter(|m| !self.since.is_some_and(|s| m.version <= s))
            .map(|m| (m.version, r#static::lint(&self.catalog.path_of(m), &m.sql)))
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
                description: r#static::DESCRIPTION.into(),
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
        self.say("static: squawk's rules on the migrations");
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
        self.say(&format!(
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
        ));
        let mut run = Run {
            v: self,
            sandbox,
            sessions,
            stand_ins: Vec::new(),
            report: Report::new("rollsafe verify"),
            probes: Vec::new(),
            migrator: None,
            linted: BTreeMap::new(),
            lint: Some(lint),
        };
        let versions: Vec<i32> = self
            .catalog
            .migrations()
            .iter()
            .map(|m| m.version)
            .filter(|v| !self.since.is_some_and(|s| *v <= s))
            .collect();
        for v in versions {
            run.ran(r#static::CHECK, Some(v));
        }
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
        run.report.safe_order = compat::safe_order(&versions, &self.apps);
        let result = run.all();
        // Collect the background work even when the rehearsal stopped early.
        run.collect_background();
        result?;
        run.wait_for_lint();
        for (v, warnings) in std::mem::take(&mut run.linted) {
            run.report.findings.extend(r#static::unjudged(
                v,
                &warnings,
                Some("not reached: the rehearsal stopped before this migration"),
            ));
        }
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

/// A migration after stage 1: its empty-path results and seeded
/// databases, waiting for stage 2.
struct Staged {
    index: usize,
    prev: i32,
    /// Whether an app was live at V{prev}: without one there are no rows,
    /// so the empty path's apply is the seeded one too.
    seeded: bool,
    seeded_rows: i64,
    /// What the live apps' readers saw on the seeded database at V{prev}.
    readers_before: backfill::Visible,
    /// The seeded database, at V{prev} until stage 2 applies the migration
    /// on it; without seeded rows, a copy of the template at V{v} when an
    /// app may run on it.
    applied_db: Option<Database>,
    at_zero: rehearsal::Applied,
    trace: Vec<String>,
    /// The live apps' statements replayed on the seeded database (V{prev}).
    live_outcomes: BTreeMap<String, Vec<Outcome>>,
    tables: Vec<crate::tables::UserTable>,
}

type MigratorHandle = JoinHandle<Vec<(i32, anyhow::Result<apply::SecondRun>)>>;

/// One rehearsal in progress.
struct Run<'a> {
    v: &'a Verify,
    sandbox: &'a Sandbox,
    /// Who runs what: the migrator and the apps' roles.
    sessions: Sessions,
    /// Stand-ins for the target's roles its GRANTs name (`--from-target`),
    /// dropped with the run.
    stand_ins: Vec<crate::sandbox::Role>,
    report: Report,
    probes: Vec<(i32, ProbeHandle)>,
    migrator: Option<MigratorHandle>,
    /// squawk's warnings of the migrations not judged yet.
    linted: BTreeMap<i32, Vec<r#static::Warning>>,
    /// The static precheck while it still runs.
    lint: Option<JoinHandle<BTreeMap<i32, Vec<r#static::Warning>>>>,
}

fn step<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, VerifyError> {
    r.map_err(|e| VerifyError::Rehearsal {
        step: what.to_string(),
        detail: format!("{e:#}"),
    })
}

/// Applies `m` as `migrate` would, unmeasured: in one transaction, or
/// statement by statement for a file that runs outside one (its batched
/// updates have no rows to settle in a base without data).
fn apply_unchecked(c: &mut postgres::Client, m: &crate::catalog::Migration) -> Result<(), String> {
    if m.runs_outside_transaction() {
        use crate::migrate::no_transaction as nt;
        let steps = nt::steps(&m.sql);
        return nt::apply_steps(c, &steps, None, &mut nt::Unobserved)
            .map(|_| ())
            .map_err(|e| format!("line {}: {}", steps[e.index()].statement.line, e.message()));
    }
    c.transaction()
        .and_then(|mut tx| tx.batch_execute(&m.sql).and_then(|_| tx.commit()))
        .map_err(|e| crate::errors::one_line(&e))
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
            let declared_write = app.declared_kind(&o.statement) == Some(apps::Kind::Write);
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
        .map(|a| (*a, a.writers(outcomes.get(&a.name).map_or(&[][..], |o| o))))
        .collect()
}

impl Run<'_> {
    fn ran(&mut self, check: &str, v: Option<i32>) {
        let description = checks::ALL
            .iter()
            .find(|(c, _)| *c == check)
            .map(|(_, d)| d.to_string())
            .unwrap_or_default();
        self.report.checks.push(CheckRun {
            check: check.to_string(),
            migration: v,
            description,
        });
    }

    /// Takes the static precheck's warnings once it is done.
    fn wait_for_lint(&mut self) {
        if let Some(handle) = self.lint.take() {
            match handle.join() {
                Ok(linted) => self.linted = linted,
                Err(_) => self.report.findings.push(r#static::not_run()),
            }
        }
    }

    /// Holds migration `v`'s static warnings against its measured apply.
    fn judge_static(&mut self, v: i32, applied: &rehearsal::Applied, needs: &Needs) {
        self.wait_for_lint();
        if let Some(warnings) = self.linted.remove(&v) {
            self.report
                .findings
                .extend(r#static::judge(v, &warnings, applied, needs));
        }
    }

    fn clone_db(&self, source: &Database) -> Result<Database, VerifyError> {
        Ok(self
            .sandbox
            .clone_database_owned_by(source, self.sessions.owner())?)
    }

    fn snapshot(db: &Database) -> Result<Snapshot, VerifyError> {
        let mut c = step("connecting", db.connect())?;
        step("reading the schema", Snapshot::read(&mut c))
    }

    /// Whether migration `v` failed to apply even on an empty database
    /// (its background results then add nothing).
    fn failed_on_empty(&self, v: i32) -> bool {
        self.report
            .findings
            .iter()
            .any(|f| f.migration == Some(v) && apply::FAILS_ON_EMPTY.contains(&f.id.as_str()))
    }

    /// A connection to `db` as the migrator.
    fn connect_migrator(&self, db: &Database) -> Result<postgres::Client, VerifyError> {
        step(
            "connecting as the migrator",
            crate::db::connect(&self.sessions.migrator(db.url())),
        )
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

    /// Joins the migrator and the long-transaction probes and turns what
    /// they measured into findings. A thread that died is a finding too:
    /// nothing is dropped silently.
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
                let reached = self
                    .report
                    .checks
                    .iter()
                    .any(|c| c.check == apply::CHECK && c.migration == Some(v));
                if self.failed_on_empty(v) || (v != 0 && !reached) {
                    continue;
                }
                let v = (v != 0).then_some(v);
                self.report.findings.push(apply::evaluate_second_run(v, r));
            }
        }
        for (v, handle) in std::mem::take(&mut self.probes) {
            let result = handle.join();
            if self.failed_on_empty(v) {
                continue;
            }
            let findings = match result {
                Ok(Ok(probe)) => {
                    locks::evaluate_probe(v, &probe, &self.v.lock_policy, self.v.stall_budget)
                }
                Ok(Err(e)) => vec![locks::probe_could_not_run(v, &format!("{e:#}"))],
                Err(_) => vec![locks::probe_could_not_run(
                    v,
                    "its thread panicked (a bug in rollsafe)",
                )],
            };
            self.report.findings.extend(findings);
        }
    }

    /// What each app's list reader returns over a sample of the groups it
    /// lists by (through the apps' drivers).
    fn visible(
        &self,
        db: &Database,
        apps: &[&AppVersion],
    ) -> Result<backfill::Visible, VerifyError> {
        let mut out = backfill::Visible::default();
        // Only an app with a driver has a list reader to compare.
        let Some(sampler) = apps.iter().find_map(|a| a.driver.clone()) else {
            if !apps.is_empty() {
                out.not_listed = Some("no live app has a reader rollsafe can drive".into());
            }
            return Ok(out);
        };
        let mut c = step("connecting", db.connect())?;
        let groups = match sampler.sample_groups(&mut c, backfill::SAMPLE_GROUPS) {
            Ok(g) => g,
            Err(e) => {
                out.not_listed = Some(format!(
                    "the rows to compare could not be sampled ({})",
                    crate::errors::one_line(&e)
                ));
                return Ok(out);
            }
        };
        out.sampled = groups.len();
        if groups.is_empty() {
            out.not_listed = Some("no rows to compare".into());
        }
        out.row_security = step(
            "reading row-level security",
            c.query(
                "SELECT format('%I.%I', relnamespace::regnamespace, relname) FROM pg_class
                  WHERE relrowsecurity AND relkind IN ('r', 'p') ORDER BY 1",
                &[],
            ),
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
        let mut driven = false;
        for app in apps {
            let Some(d) = &app.driver else { continue };
            driven = true;
            // Each app reads as its own role: row-level security and its
            // GRANTs decide what it sees.
            let mut c = self.connect_app(db, app)?;
            let mut seen = std::collections::BTreeSet::new();
            let mut failed = None;
            for group in &groups {
                match d.list(&mut c, *group) {
                    Ok(ids) => seen.extend(ids),
                    Err(e) => {
                        failed = Some(crate::errors::one_line(e.as_ref()));
                        break;
                    }
                }
            }
            match failed {
                Some(e) => out.failed.push((app.name.clone(), e)),
                None => {
                    out.seen.insert(app.name.clone(), seen);
                }
            }
        }
        if !driven {
            out.not_listed = Some("no live app has a reader rollsafe can drive".into());
        }
        Ok(out)
    }

    /// A copy of the previous migration's seeded database (at its V{prev−1})
    /// with that migration applied: (database, rows it holds, names of the
    /// apps whose rows they are). None when there is none to reuse (no
    /// live app then, or a migration that runs outside a transaction,
    /// whose batches the plain apply would not run) or the migration fails
    /// on it (stage 2 reports that).
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
        if m.runs_outside_transaction() {
            return Ok(None);
        }
        let db = self.clone_db(base)?;
        let mut c = self.connect_migrator(&db)?;
        if apply_unchecked(&mut c, m).is_err() {
            return Ok(None);
        }
        let apps = self
            .v
            .apps
            .iter()
            .filter(|a| a.live_during(m.version))
            .map(|a| a.name.clone())
            .collect();
        drop(c);
        Ok(Some((db, last.seeded_rows, apps)))
    }

    /// Restores the target's schema and the rows of the tables it may copy
    /// ([`target::Target::tables_to_copy`]) into `db`; returns those
    /// tables. First stand-ins for the roles its GRANTs name, then the
    /// schema as the migrator (so the migrator owns it, as production's
    /// owner role does; extensions and default privileges as the
    /// superuser, as a DBA installed them), then the rows as the superuser
    /// (loading them disables triggers).
    fn restore_target(
        &mut self,
        t: &target::Target,
        db: &Database,
    ) -> Result<Vec<target::CopiedTable>, VerifyError> {
        self.v
            .say("reading the target's schema (pg_dump --schema-only)");
        let scrubbed =
            |e: SandboxError| VerifyError::Target(crate::db::scrub(&e.to_string(), t.url()));
        for (name, login, inherit) in t.roles()? {
            if let Some(role) = self.sandbox.create_stand_in_role(&name, login, inherit)? {
                self.stand_ins.push(role);
            }
        }
        let schema = self.sandbox.dump_schema(t.url()).map_err(scrubbed)?;
        let copied = t.tables_to_copy()?;
        let qualified: Vec<String> = copied.iter().map(|c| c.qualified.clone()).collect();
        let rows = self
            .sandbox
            .dump_rows(t.url(), &qualified)
            .map_err(scrubbed)?;
        let mut c = step("connecting", db.connect())?;
        let as_owner = self
            .sessions
            .owner()
            .map(|r| format!("SET ROLE {}", crate::db::quote_ident(r.name())));
        let mut restore = || -> Result<(), postgres::Error> {
            for st in crate::sql::split(&schema).statements {
                let head = st
                    .text
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_uppercase();
                // Extensions as a DBA installed them; default privileges
                // name production's roles (`FOR ROLE x`), which the
                // migrator is not a member of.
                let by_dba = head.starts_with("CREATE EXTENSION")
                    || head.starts_with("COMMENT ON EXTENSION")
                    || head.starts_with("ALTER DEFAULT PRIVILEGES");
                match (&as_owner, by_dba) {
                    (Some(_), true) => c.batch_execute(&format!("RESET ROLE; {}", st.text))?,
                    (Some(set), false) => c.batch_execute(&format!("{set}; {}", st.text))?,
                    (None, _) => c.batch_execute(&st.text)?,
                }
            }
            c.batch_execute("RESET ROLE")?;
            c.batch_execute(&rows)?;
            // The dump empties search_path for its session: reset it
            // before anything else runs on this connection.
            c.batch_execute("RESET ALL")
        };
        restore().map_err(|e| {
            VerifyError::Target(format!(
                "the schema of {} does not restore on PostgreSQL {} ({}); rehearse on the target's major (the default) and make the extensions it uses available to the sandbox",
                t.described,
                self.sandbox.server_major(),
                crate::errors::one_line(&e)
            ))
        })?;
        Ok(copied)
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

    /// Every table `--table-rows` names must be one the rehearsal met:
    /// before some migration (`staged`) or at the end (`last`). A typo
    /// would otherwise predict nothing and say so nowhere.
    fn tables_sized_exist(&self, staged: &[Staged], last: &Database) -> Result<(), VerifyError> {
        if !self.v.sizes.given_by_flag() {
            return Ok(());
        }
        let mut known: std::collections::BTreeSet<String> = Self::user_tables(last)?
            .into_iter()
            .map(|t| t.name)
            .collect();
        known.extend(
            staged
                .iter()
                .flat_map(|s| s.tables.iter().map(|t| t.name.clone())),
        );
        let unknown: Vec<&str> = self
            .v
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

    fn all(&mut self) -> Result<(), VerifyError> {
        let migrations = self.v.catalog.migrations().to_vec();
        let empty_prev = self
            .sandbox
            .fresh_database_owned_by(self.sessions.owner())?;
        // The base the rehearsed migrations start from: the target's
        // schema, or the files up to --since applied once, unchecked.
        if let Some(t) = &self.v.target {
            let copied = self.restore_target(t, &empty_prev)?;
            self.report.copied_rows = Some(
                copied
                    .into_iter()
                    .map(|c| format!("{} ({})", c.qualified, c.because))
                    .collect(),
            );
        } else if let Some(s) = self.v.since {
            self.v.say(&format!(
                "applying V1..V{s} once (up to --since, not rehearsed)"
            ));
            let mut c = self.connect_migrator(&empty_prev)?;
            for m in migrations.iter().filter(|m| m.version <= s) {
                if let Err(e) = apply_unchecked(&mut c, m) {
                    return Err(VerifyError::PrefixFails {
                        version: m.version,
                        file: m.file.clone(),
                        detail: e,
                    });
                }
            }
        }
        // The migrator applies the rehearsed migrations step by step,
        // twice per step (apply: a second run is a no-op), on a database
        // of its own, in the background. With a base, it starts from a copy
        // of it whose history says what the base holds (no need to migrate
        // the whole history again: the cost follows the change).
        // Without a base its database is a fresh one, made in its own thread
        // (a copy costs ~0.25 s that nothing else has to wait for).
        let migrator_db = match (&self.v.target, self.v.since) {
            (None, None) => None,
            (target, Some(s)) => {
                let db = self.clone_db(&empty_prev)?;
                // The migrator's history table is its own, as in production.
                let mut c = self.connect_migrator(&db)?;
                let recorded = match target {
                    Some(t) => t.copy_history(&mut c),
                    None => crate::migrate::record_applied(
                        &mut c,
                        migrations.iter().filter(|m| m.version <= s),
                    ),
                };
                step("writing the base's history", recorded)?;
                Some(db)
            }
            (Some(_), None) => {
                // Nothing applied on the target yet: its schema, no history.
                Some(self.clone_db(&empty_prev)?)
            }
        };
        let (catalog, policy, since) = (self.v.catalog.clone(), self.v.lock_policy, self.v.since);
        let sandbox = self.sandbox.clone();
        let sessions = self.sessions.clone();
        self.migrator = Some(std::thread::spawn(move || {
            let mut out = Vec::new();
            let migrator_db = match migrator_db {
                Some(db) => db,
                None => match sandbox.fresh_database_owned_by(sessions.owner()) {
                    Ok(db) => db,
                    Err(e) => {
                        out.push((
                            catalog.migrations().first().map_or(0, |m| m.version),
                            Err(anyhow::Error::from(e).context("creating the migrator's database")),
                        ));
                        return out;
                    }
                },
            };
            for m in catalog
                .migrations()
                .iter()
                .filter(|m| !since.is_some_and(|s| m.version <= s))
            {
                let r = apply::second_run(
                    &sessions.migrator(migrator_db.url()),
                    &catalog,
                    m.version,
                    policy,
                );
                let failed = r.is_err();
                out.push((m.version, r));
                if failed {
                    break;
                }
            }
            out
        }));
        let mut prev = 0;
        // Stage 1: per migration, the empty path and the seeded template;
        // the long-transaction probe starts as soon as its template exists.
        let mut staged: Vec<Staged> = Vec::new();
        let mut stopped: Option<Vec<Finding>> = None;
        for (index, m) in migrations.iter().enumerate() {
            let v = m.version;
            if self.v.since.is_some_and(|s| v <= s) {
                // In the base already.
                prev = v;
                continue;
            }
            let live: Vec<&AppVersion> = self.v.apps.iter().filter(|a| a.live_during(v)).collect();

            // Seeded path. With no app live at V{prev}, nothing writes rows
            // and the seeded database would be a copy of the empty one: the
            // empty path's apply stands for both (two copies fewer).
            // Otherwise the previous migration's seeded database (still at
            // its V{prev-1}) is the starting point: a copy of it with that
            // migration applied holds the rows written before, migrated as
            // production's are; only apps that start running now add rows.
            // A project with no apps at all (migrations alone) is seeded
            // by the catalogue generator, so rewrites and locks have rows;
            // afresh each time, so tables the previous migration created
            // get rows too.
            let generate_only = self.v.apps.is_empty() && prev > 0;
            let reused = if live.is_empty() {
                None
            } else {
                self.reuse_seeded(staged.last(), &migrations)?
            };
            let seeded = if live.is_empty() && !generate_only {
                None
            } else {
                let (seeded, carried, writers): (Database, i64, Vec<&AppVersion>) = match reused {
                    Some((db, carried, before)) => {
                        let newly: Vec<&AppVersion> = live
                            .iter()
                            .filter(|a| !before.contains(&a.name))
                            .copied()
                            .collect();
                        (db, carried, newly)
                    }
                    None => (self.clone_db(&empty_prev)?, 0, live.clone()),
                };
                let rows = if carried > 0 {
                    // Only apps that start running now add rows.
                    (self.v.rows * writers.len() as u64)
                        .checked_div(live.len() as u64)
                        .unwrap_or(0)
                } else {
                    self.v.rows
                };
                self.v.say(&if carried > 0 {
                    format!("V{v}: {carried} seeded rows carried to V{prev}, {rows} more written")
                } else {
                    format!("V{v}: seeding {rows} rows at V{prev}")
                });
                // Seeds are the project's files: run as the migrator (the
                // owner of the tables), the rows each app writes as the app.
                let mut c = self.connect_migrator(&seeded)?;
                let s = if generate_only {
                    step("seeding", seed::generate_only(&mut c, rows))?
                } else {
                    let (sessions, url) = (&self.sessions, seeded.url());
                    step(
                        "seeding",
                        seed::seed(&mut c, &writers, rows, &|app| {
                            crate::db::connect(&sessions.app(url, &app.name))
                        }),
                    )?
                };
                if let Some((app, e)) = s.failed.first() {
                    stopped = Some(vec![compat::live_app_cannot_write(prev, v, app, e)]);
                    break;
                }
                let mut rows = carried
                    + s.per_app
                        .iter()
                        .map(|(_, n, k)| *n as i64 + *k as i64)
                        .sum::<i64>();
                if let Some(g) = &s.generated {
                    rows += g.seeded.iter().map(|t| t.written as i64).sum::<i64>();
                    self.report
                        .findings
                        .extend(rewrite::tables_not_seeded(v, prev, g));
                }
                Some((seeded, rows))
            };
            let seeded_rows = seeded.as_ref().map_or(0, |(_, n)| *n);
            // What the live apps' statements do on V{prev}: their kinds and
            // locks decide what blocks them; compat reports failures.
            let live_outcomes = match &seeded {
                Some((db, _)) => self.replay_apps(db, &live)?,
                None => BTreeMap::new(),
            };
            let tables = Self::user_tables(&empty_prev)?;
            if prev > 0 && m.runs_outside_transaction() {
                self.report.findings.push(locks::probe_not_applicable(v));
            } else if prev > 0 {
                let probe_db = match &seeded {
                    Some((db, _)) => self.clone_db(db)?,
                    None => self.clone_db(&empty_prev)?,
                };
                let sql = m.sql.clone();
                let sessions = self.sessions.clone();
                let (tables, policy) = (tables.clone(), self.v.lock_policy);
                let apps: Vec<(AppVersion, std::collections::BTreeSet<String>)> =
                    live_apps(&live, &live_outcomes)
                        .into_iter()
                        .map(|(a, w)| (a.clone(), w))
                        .collect();
                let handle = std::thread::spawn(move || {
                    let apps: Vec<LiveApp> = apps.iter().map(|(a, w)| (a, w.clone())).collect();
                    let r = rehearsal::probe_long_transaction(
                        probe_db.url(),
                        &sessions,
                        &sql,
                        &tables,
                        &apps,
                        policy,
                        long_transaction(&policy),
                    );
                    drop(probe_db);
                    r
                });
                self.probes.push((v, handle));
            }

            // What the live apps' readers see before the migration; the
            // seeded database is then the one the migration is measured on
            // (no copy needed: nothing else reads its state before).
            let readers_before = match &seeded {
                Some((db, _)) => self.visible(db, &live)?,
                None => backfill::Visible::default(),
            };

            // Empty path: first a forced failure at the migration's end
            // (rolled back, so the database must look as before), then the
            // real apply on the same database. It is the empty template
            // itself: its state at V{prev} was needed only for the seeded
            // clone above, and it goes on as the template at V{v}.
            self.v.say(&format!("V{v}: applying on an empty database"));
            let empty = &empty_prev;
            let before = Self::snapshot(empty)?;
            let (mut at_zero, trace) = if m.runs_outside_transaction() {
                // Outside a transaction a failure or a kill leaves the
                // statements before it applied, and migrate reruns the file:
                // what must hold is that the rerun converges. A copy of the
                // template at V{prev} is killed after a random statement
                // and rerun; its schema must be the clean run's.
                let killed = self.clone_db(empty)?;
                let at_zero = step(
                    "applying on an empty database",
                    rehearsal::apply_measured_no_transaction(
                        empty.url(),
                        &self.sessions.migrator(empty.url()),
                        &m.sql,
                        None,
                    ),
                )?;
                if at_zero.ok() {
                    let clean = Self::snapshot(empty)?;
                    use crate::migrate::no_transaction as nt;
                    let steps = nt::steps(&m.sql);
                    // 1..=n: n is a rerun after a complete run. The killed
                    // run stops where a failure would have stopped it.
                    let k = rand::random_range(1..=steps.len().max(1));
                    let mut c = self.connect_migrator(&killed)?;
                    let _ = nt::apply_steps(
                        &mut c,
                        &steps[..k.min(steps.len())],
                        None,
                        &mut nt::Unobserved,
                    );
                    drop(c);
                    let rerun = step(
                        "rerunning after a kill",
                        rehearsal::apply_measured_no_transaction(
                            killed.url(),
                            &self.sessions.migrator(killed.url()),
                            &m.sql,
                            None,
                        ),
                    )?;
                    let changed = Self::snapshot(&killed)?.diff(&clean);
                    let line = steps.get(k - 1).map_or(0, |st| st.statement.line);
                    self.report.findings.extend(apply::evaluate_rerun(
                        v,
                        &rerun,
                        &changed,
                        (k, steps.len(), line),
                    ));
                }
                drop(killed);
                (at_zero, Vec::new())
            } else {
                let injected = format!(
                    "{}\n;\nDO $rollsafe$ BEGIN RAISE EXCEPTION 'rollsafe: injected failure'; END $rollsafe$",
                    m.sql
                );
                // Only its trace matters, not its measurements: one plain
                // transaction that fails at the end.
                let mut c = self.connect_migrator(empty)?;
                let _ = c.batch_execute(&format!("BEGIN;\n{injected}"));
                step(
                    "rolling the forced failure back",
                    c.batch_execute("ROLLBACK"),
                )?;
                drop(c);
                let trace = Self::snapshot(empty)?.diff(&before);
                let at_zero = step(
                    "applying on an empty database",
                    rehearsal::apply_measured(
                        empty.url(),
                        &self.sessions.migrator(empty.url()),
                        &m.sql,
                        None,
                        End::Commit,
                    ),
                )?;
                (at_zero, trace)
            };
            at_zero.file = self.v.catalog.path_of(m);
            self.ran(apply::CHECK, Some(v));
            if !at_zero.ok() {
                stopped = Some(apply::evaluate(
                    v,
                    &at_zero,
                    None,
                    &trace,
                    self.v.statement_timeout,
                ));
                self.judge_static(v, &at_zero, &needs_of(&live, &live_outcomes));
                break;
            }

            // Without seeded rows, the stages after need the schema at V{v}
            // only when an app may run on it (compat replays, post) or its
            // backfill directives are to be checked.
            let (seeded, applied_db) = match seeded {
                Some((db, _)) => (true, Some(db)),
                None if self.v.apps.iter().any(|a| a.may_run_on(v)) || !m.directives.is_empty() => {
                    (false, Some(self.clone_db(&empty_prev)?))
                }
                None => (false, None),
            };
            staged.push(Staged {
                index,
                prev,
                seeded,
                seeded_rows,
                readers_before,
                applied_db,
                at_zero,
                trace,
                live_outcomes,
                tables,
            });
            prev = v;
        }

        if stopped.is_none() {
            self.tables_sized_exist(&staged, &empty_prev)?;
        }
        if staged.is_empty() && stopped.is_none() && self.v.since.is_some() {
            self.report
                .findings
                .push(apply::nothing_rehearsed(self.v.since.unwrap_or_default()));
        }

        // Stage 2: everything that needs the seeded databases, while the
        // long-transaction probes of all migrations run in the background.
        let mut last_seeded: Option<Database> = None;
        let mut seeded_failed = false;
        for st in staged {
            let m = &migrations[st.index];
            let (v, prev) = (m.version, st.prev);
            let live: Vec<&AppVersion> = self.v.apps.iter().filter(|a| a.live_during(v)).collect();
            let runnable: Vec<&AppVersion> =
                self.v.apps.iter().filter(|a| a.may_run_on(v)).collect();
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
            // The measured apply, with the live apps' workload running
            // against the same database (everything it does is rolled
            // back; the measurements are per backend, so they stay the
            // migration's). Without seeded rows it is the empty path's.
            let (at_n, workload) = match (seeded, &applied_db) {
                (true, Some(applied_db)) => {
                    self.v.say(&format!(
                        "V{v}: applying on {seeded_rows} seeded rows under the live apps' workload"
                    ));
                    let workload = step(
                        "starting the workload",
                        rehearsal::Workload::start(
                            applied_db.url(),
                            &self.sessions,
                            &live_apps(&live, &live_outcomes),
                        ),
                    )?;
                    std::thread::sleep(WORKLOAD_MARGIN);
                    let migrator_url = self.sessions.migrator(applied_db.url());
                    let at_n = if m.runs_outside_transaction() {
                        rehearsal::apply_measured_no_transaction(
                            applied_db.url(),
                            &migrator_url,
                            &m.sql,
                            None,
                        )
                    } else {
                        rehearsal::apply_measured(
                            applied_db.url(),
                            &migrator_url,
                            &m.sql,
                            None,
                            End::Commit,
                        )
                    };
                    // Batched updates run after the file's statements, as
                    // migrate runs them, with the workload still on.
                    let batched = match &at_n {
                        Ok(a) if a.ok() => Some(self.run_batched_updates(applied_db, m)?),
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
                    (at_n, Some(workload))
                }
                _ => (at_zero.clone(), None),
            };
            if let Some(r) = self.report.migrations.iter_mut().find(|r| r.version == v) {
                r.statements = at_n.statement_rows(&at_zero);
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
                seeded_failed = true;
                break;
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

            // Backfill: right after the migration, every row existed before.
            self.v.say(&format!("V{v}: backfill and readers"));
            self.ran(backfill::CHECK, Some(v));
            if let Some(applied_db) = &applied_db {
                let mut c = self.connect_migrator(applied_db)?;
                self.report
                    .findings
                    .extend(backfill::check_directives(&mut c, m));
            }
            let after = match &applied_db {
                Some(db) => self.visible(db, &runnable)?,
                None => backfill::Visible::default(),
            };
            let live_names: Vec<String> = live.iter().map(|a| a.name.clone()).collect();
            self.report.findings.extend(backfill::compare_readers(
                v,
                &readers_before,
                &after,
                &live_names,
                &newly,
            ));

            // Compat: the running apps on the schema before (replayed in
            // stage 1), every app that may run on the schema after, the
            // types the running apps read and bind, then cross-version
            // behaviour (which writes; the applied database is not needed
            // unchanged any more: only its schema is, for post).
            self.v.say(&format!("V{v}: replaying the apps' statements"));
            self.ran(compat::CHECK, Some(v));
            for app in &live {
                if let Some(outcomes) = live_outcomes.get(&app.name) {
                    self.report
                        .findings
                        .extend(compat::replay_findings(v, app, prev, outcomes));
                }
            }
            if let (false, Some(applied_db)) = (runnable.is_empty(), &applied_db) {
                let mut c = self.connect_migrator(applied_db)?;
                let (sessions, url) = (&self.sessions, applied_db.url());
                let seeded_now = step(
                    "seeding the compat database",
                    seed::seed(&mut c, &runnable, COMPAT_ROWS, &|app| {
                        crate::db::connect(&sessions.app(url, &app.name))
                    }),
                )?;
                for (app, e) in &seeded_now.failed {
                    self.report
                        .findings
                        .push(compat::rows_cannot_be_written(v, app, e));
                }
                for app in &runnable {
                    let mut c = self.connect_app(applied_db, app)?;
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
                // Cross-version: each app still running against each newer
                // one that may run on this schema.
                for older in &live {
                    for newer in runnable.iter().filter(|a| a.needs > older.needs) {
                        let mut c_old = self.connect_app(applied_db, older)?;
                        let mut c_new = self.connect_app(applied_db, newer)?;
                        self.report.findings.extend(compat::cross_version(
                            v, &mut c_old, &mut c_new, older, newer,
                        ));
                    }
                }
            }
            // Post compares the final schema built over rows with the empty
            // path's; without seeded rows the two are one.
            last_seeded = applied_db;
        }
        if let Some(failure) = &stopped {
            self.report.findings.extend(failure.iter().cloned());
        }
        if stopped.is_some() || seeded_failed {
            return Ok(());
        }

        // post.
        self.v.say("post: final schema");
        self.ran(post::CHECK, Some(prev));
        let empty_final = Self::snapshot(&empty_prev)?;
        let seeded_final = match &last_seeded {
            Some(db) => Self::snapshot(db)?,
            None => empty_final.clone(),
        };
        let expected = match &self.v.expected {
            ExpectedSchema::Snapshot(s, name) => post::Expected::Snapshot(s, name.clone()),
            ExpectedSchema::Derived => post::Expected::Derived,
        };
        self.report
            .findings
            .extend(post::evaluate(prev, &seeded_final, &empty_final, expected));

        // The project's own checks of the apps that may run on the final
        // version (the shipped project: `dao`), on the empty path's
        // database itself (its schema was read above; the rows they write
        // are needed by nothing after).
        let mut declared: Vec<(ProjectCheck, &AppVersion)> = Vec::new();
        for app in self.v.apps.iter().filter(|a| a.may_run_on(prev)) {
            if let Some(pc) = app.driver.as_ref().and_then(|d| d.final_check()) {
                if !declared.iter().any(|(d, _)| d.check == pc.check) {
                    declared.push((pc, app));
                }
            }
        }
        for (pc, app) in declared {
            self.v.say(&format!(
                "{}: {} on the final schema",
                pc.check, pc.description
            ));
            self.report.checks.push(CheckRun {
                check: pc.check.to_string(),
                migration: Some(prev),
                description: pc.description.to_string(),
            });
            self.report.findings.extend((pc.run)(
                prev,
                &self.sessions.app(empty_prev.url(), &app.name),
            ));
        }
        self.v.say("waiting for the long-transaction probes");
        Ok(())
    }
}

//! `rollsafe verify`: rehearse every migration in throwaway Postgres and
//! prove it safe to roll out while old and new app versions run.
//!
//! One sandbox server per run. For each migration k, the scenarios start
//! from two template databases at version k−1 — empty, and seeded with
//! `rows` rows written by the app versions live at k−1 — cloned
//! (`Sandbox::clone_database`) for every scenario that changes them, so no
//! scenario sees another's effects (the seeded template is only read):
//!
//! | scenario | database | feeds |
//! |---|---|---|
//! | forced failure, then measured apply | clone of empty | apply (no trace), rewrite (0 rows) |
//! | migrator run twice | one database for the run | apply (second run is a no-op) |
//! | measured apply under the live apps' workload | clone of seeded | apply, rewrite, locks |
//! | long transaction (in the background) | clone of seeded | locks (lock timeout) |
//! | directives, readers before / after | seeded, and the applied clone | backfill |
//! | statement replay, cross-version | seeded, and the applied clone + a few rows | compat |
//!
//! then `dao` on a fresh database at the final version and `post` on the
//! final schemas. A migration that fails to apply ends the rehearsal there
//! (later ones cannot be reached); its findings say why.
//!
//! The library never prints: progress goes to the optional callback, the
//! result is a [`Report`].

pub mod apps;
pub mod checks;
pub mod rehearsal;
pub mod replay;
pub mod seed;

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::catalog::{Catalog, Source};
use crate::report::{CheckRun, Finding, RehearsedApp, Report, Severity};
use crate::sandbox::{Database, Sandbox, SandboxError};
use crate::schema::Snapshot;

use apps::{AppError, AppVersion};
use checks::{apply, backfill, compat, dao, locks, post, rewrite};
use rehearsal::{End, LockTimeoutProbe};

/// Default rows per seeded rehearsal: enough that work proportional to the
/// table shows up in rows and files, small enough to seed in well under a
/// second.
pub const DEFAULT_ROWS: u64 = 10_000;
/// Default lock timeout (what `rollsafe migrate` uses too).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// Rows written on the compat scenario's database, so statements that
/// need existing data find some.
const COMPAT_ROWS: u64 = 50;
/// How long the live workload runs before and after the migration.
const WORKLOAD_MARGIN: Duration = Duration::from_millis(100);

/// Why a rehearsal could not run at all (as opposed to findings).
#[derive(Debug, Error)]
pub enum VerifyError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Apps(#[from] AppError),
    #[error("{path}: not a valid schema snapshot ({detail}); regenerate it (see src/schema.rs) or remove it")]
    BadSnapshot { path: PathBuf, detail: String },
    #[error("rehearsal failed while {step}: {detail}")]
    Rehearsal { step: String, detail: String },
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
    lock_timeout: Duration,
    expected: ExpectedSchema,
    progress: Option<Progress>,
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
        Ok(Verify {
            catalog,
            apps: apps::embedded_apps()?,
            rows: DEFAULT_ROWS,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            expected,
            progress: None,
        })
    }

    pub fn rows(mut self, rows: u64) -> Self {
        self.rows = rows;
        self
    }

    pub fn lock_timeout(mut self, t: Duration) -> Self {
        self.lock_timeout = t;
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
        log::info!("{s}");
        if let Some(p) = &self.progress {
            p(s);
        }
    }

    /// Runs the rehearsal on `sandbox`.
    pub fn run(&self, sandbox: &Sandbox) -> Result<Report, VerifyError> {
        let started = Instant::now();
        let mut run = Run {
            v: self,
            sandbox,
            report: Report::new("rollsafe verify"),
            probes: Vec::new(),
            migrator: None,
        };
        run.report.sandbox = sandbox.describe();
        run.report.server_version = sandbox.server_version()?;
        run.report.set_migrations(&self.catalog);
        run.report.rows = self.rows;
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
        if let Some(handle) = run.migrator.take() {
            for (v, r) in handle.join().unwrap_or_default() {
                let failed_on_empty = run
                    .report
                    .findings
                    .iter()
                    .any(|f| f.migration == Some(v) && f.id == "apply.fails-on-empty");
                let reached = run
                    .report
                    .checks
                    .iter()
                    .any(|c| c.check == apply::CHECK && c.migration == Some(v));
                if failed_on_empty || !reached {
                    continue;
                }
                run.report.findings.push(match r {
                    Ok(twice) => apply::evaluate_second_run(v, &twice),
                    Err(e) => Finding::new(apply::CHECK, "migrator-fails", Severity::Error, Some(v), format!("rollsafe migrate fails on it: {}", replay::one_line(&e)))
                        .advice("the migration must apply through the migrator (one transaction with its history row)"),
                });
            }
        }
        // Collect background probes even when the rehearsal stopped early.
        for (v, handle) in std::mem::take(&mut run.probes) {
            let result = handle.join();
            // A migration that does not even apply has its finding already.
            let failed_on_empty = run
                .report
                .findings
                .iter()
                .any(|f| f.migration == Some(v) && f.id == "apply.fails-on-empty");
            if failed_on_empty {
                continue;
            }
            match result {
                Ok(Ok(probe)) => run.locks_probe_findings(v, &probe),
                Ok(Err(e)) => run.report.findings.push(Finding::new(
                    locks::CHECK,
                    "probe-failed",
                    Severity::Warn,
                    Some(v),
                    format!("long-transaction probe could not run: {e:#}"),
                )),
                Err(_) => {}
            }
        }
        result?;
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

type ProbeHandle = JoinHandle<anyhow::Result<LockTimeoutProbe>>;

/// A migration after stage 1: its empty-path results and seeded
/// databases, waiting for stage 2.
struct Staged {
    index: usize,
    prev: i32,
    seeded: Database,
    seeded_rows: i64,
    applied_db: Database,
    at_zero: rehearsal::Applied,
    trace: Vec<String>,
}

type MigratorHandle = JoinHandle<Vec<(i32, anyhow::Result<apply::SecondRun>)>>;

/// One rehearsal in progress.
struct Run<'a> {
    v: &'a Verify,
    sandbox: &'a Sandbox,
    report: Report,
    probes: Vec<(i32, ProbeHandle)>,
    migrator: Option<MigratorHandle>,
}

fn step<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, VerifyError> {
    r.map_err(|e| VerifyError::Rehearsal {
        step: what.to_string(),
        detail: format!("{e:#}"),
    })
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

    fn clone_db(&self, source: &Database) -> Result<Database, VerifyError> {
        Ok(self.sandbox.clone_database(source)?)
    }

    fn snapshot(db: &Database) -> Result<Snapshot, VerifyError> {
        let mut c = step("connecting", db.connect())?;
        step("reading the schema", Snapshot::read(&mut c))
    }

    /// What each app's reader lists over a sample of input collections.
    fn visible(db: &Database, apps: &[&AppVersion]) -> Result<backfill::Visible, VerifyError> {
        let mut out = backfill::Visible::new();
        if apps.is_empty() {
            return Ok(out);
        }
        let mut c = step("connecting", db.connect())?;
        let collections = match backfill::sample_collections(&mut c) {
            Ok(c) => c,
            // No attached_functions table yet: nothing to compare.
            Err(_) => return Ok(out),
        };
        for app in apps {
            if let Some(d) = app.driver() {
                let mut seen = std::collections::BTreeSet::new();
                for coll in &collections {
                    match d.list(&mut c, *coll) {
                        Ok(ids) => seen.extend(ids),
                        // A reader that fails is compat's finding.
                        Err(_) => break,
                    }
                }
                out.insert(app.name.clone(), seen);
            }
        }
        Ok(out)
    }

    fn all(&mut self) -> Result<(), VerifyError> {
        let migrations = self.v.catalog.migrations().to_vec();
        let mut empty_prev = self.sandbox.fresh_database()?;
        // The migrator applies the catalog step by step, twice per step
        // (apply: a second run is a no-op), on a database of its own, in
        // the background.
        let migrator_db = self.sandbox.fresh_database()?;
        let (catalog, timeout) = (self.v.catalog.clone(), self.v.lock_timeout);
        self.migrator = Some(std::thread::spawn(move || {
            let mut out = Vec::new();
            for m in catalog.migrations() {
                let r = apply::second_run(migrator_db.url(), &catalog, m.version, timeout);
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
            let live: Vec<&AppVersion> = self.v.apps.iter().filter(|a| a.needs <= prev).collect();

            // Seeded path.
            self.v
                .say(&format!("V{v}: seeding {} rows at V{prev}", self.v.rows));
            let seeded = self.clone_db(&empty_prev)?;
            let seeded_rows = {
                let mut c = step("connecting", seeded.connect())?;
                let s = step("seeding", seed::seed(&mut c, &live, self.v.rows))?;
                if let Some((app, e)) = s.failed.first() {
                    // A live app that cannot write on V{prev}: the earlier
                    // migration broke it; nothing later can be rehearsed.
                    stopped = Some(vec![Finding::new(
                        compat::CHECK,
                        "live-app-cannot-write",
                        Severity::Error,
                        Some(prev),
                        format!("the {app} app cannot write its rows on V{prev} ({e}); V{v} and later were not rehearsed"),
                    )
                    .evidence("app", app.clone())
                    .advice("keep every column a live app version writes insertable (nullable or with a default) until no running version writes it")]);
                    break;
                }
                s.per_app
                    .iter()
                    .map(|(_, n, k)| *n as i64 + *k as i64)
                    .sum::<i64>()
            };
            let applied_db = self.clone_db(&seeded)?;
            if prev > 0 {
                let probe_db = self.clone_db(&seeded)?;
                let tables = {
                    let mut c = step("connecting", probe_db.connect())?;
                    step(
                        "listing tables",
                        c.query("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1", &[]),
                    )?
                    .iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect::<Vec<_>>()
                };
                let (sql, timeout) = (m.sql.clone(), self.v.lock_timeout);
                let handle = std::thread::spawn(move || {
                    let r = rehearsal::probe_lock_timeout(probe_db.url(), &sql, &tables, timeout);
                    drop(probe_db);
                    r
                });
                self.probes.push((v, handle));
            }

            // Empty path: first a forced failure at the migration's end
            // (rolled back, so the clone must look as before), then the
            // real apply on the same clone.
            self.v.say(&format!("V{v}: applying on an empty database"));
            let empty = self.clone_db(&empty_prev)?;
            let before = Self::snapshot(&empty)?;
            let injected = format!(
                "{}\n;\nDO $rollsafe$ BEGIN RAISE EXCEPTION 'rollsafe: injected failure'; END $rollsafe$",
                m.sql
            );
            step(
                "forcing a failure",
                rehearsal::apply_measured(empty.url(), &injected, None, End::Commit),
            )?;
            let trace = Self::snapshot(&empty)?.diff(&before);
            let at_zero = step(
                "applying on an empty database",
                rehearsal::apply_measured(empty.url(), &m.sql, None, End::Commit),
            )?;
            self.ran(apply::CHECK, Some(v));
            if !at_zero.ok() {
                stopped = Some(apply::evaluate(v, &at_zero, None, &trace));
                break;
            }

            staged.push(Staged {
                index,
                prev,
                seeded,
                seeded_rows,
                applied_db,
                at_zero,
                trace,
            });
            empty_prev = empty;
            prev = v;
        }

        // Stage 2: everything that needs the seeded databases, while the
        // long-transaction probes of all migrations run in the background.
        let mut last_seeded: Option<Database> = None;
        let mut seeded_failed = false;
        for st in staged {
            let m = &migrations[st.index];
            let (v, prev) = (m.version, st.prev);
            let live: Vec<&AppVersion> = self.v.apps.iter().filter(|a| a.needs <= prev).collect();
            let runnable: Vec<&AppVersion> = self.v.apps.iter().filter(|a| a.needs <= v).collect();
            let newly: Vec<String> = runnable
                .iter()
                .filter(|a| a.needs > prev)
                .map(|a| a.name.clone())
                .collect();
            let Staged {
                seeded,
                seeded_rows,
                applied_db,
                at_zero,
                trace,
                ..
            } = st;
            // The measured apply, with the live apps' workload running
            // against the same database (its writes are rolled back; the
            // measurements are per backend, so they stay the migration's).
            self.v.say(&format!(
                "V{v}: applying on {seeded_rows} seeded rows under the live apps' workload"
            ));
            let workload = if live.is_empty() {
                None
            } else {
                let w = step(
                    "starting the workload",
                    rehearsal::Workload::start(applied_db.url(), &live),
                )?;
                std::thread::sleep(WORKLOAD_MARGIN);
                Some(w)
            };
            let at_n = rehearsal::apply_measured(applied_db.url(), &m.sql, None, End::Commit);
            let workload = workload.map(|w| {
                std::thread::sleep(WORKLOAD_MARGIN);
                w.stop()
            });
            let at_n = step("applying on a seeded database", at_n)?;
            self.report.findings.extend(apply::evaluate(
                v,
                &at_zero,
                Some((&at_n, seeded_rows)),
                &trace,
            ));
            if !at_n.ok() {
                seeded_failed = true;
                break;
            }
            self.ran(rewrite::CHECK, Some(v));
            self.report
                .findings
                .extend(rewrite::evaluate(v, &at_zero, &at_n));
            self.ran(locks::CHECK, Some(v));
            self.report.findings.extend(locks::evaluate(
                v,
                &at_n,
                workload.as_ref(),
                None,
                self.v.lock_timeout,
            ));

            // Backfill: right after the migration, every row existed before.
            self.v.say(&format!("V{v}: backfill and readers"));
            self.ran(backfill::CHECK, Some(v));
            {
                let mut c = step("connecting", applied_db.connect())?;
                self.report
                    .findings
                    .extend(backfill::check_directives(&mut c, m));
            }
            let before = Self::visible(&seeded, &live)?;
            let after = Self::visible(&applied_db, &runnable)?;
            let live_names: Vec<String> = live.iter().map(|a| a.name.clone()).collect();
            self.report.findings.extend(backfill::compare_readers(
                v,
                &before,
                &after,
                &live_names,
                &newly,
            ));

            // Compat: the running apps on the schema before, every app
            // that may run on the schema after, then cross-version
            // behaviour (which writes; the applied database is not needed
            // unchanged any more: only its schema is, for post).
            self.v.say(&format!("V{v}: replaying the apps' statements"));
            self.ran(compat::CHECK, Some(v));
            {
                let mut c = step("connecting", seeded.connect())?;
                for app in &live {
                    let outcomes = step("replaying statements", replay::replay_all(&mut c, app))?;
                    self.report
                        .findings
                        .extend(compat::replay_findings(v, app, prev, &outcomes));
                }
            }
            if !runnable.is_empty() {
                let mut c = step("connecting", applied_db.connect())?;
                let seeded_now = step(
                    "seeding the compat database",
                    seed::seed(&mut c, &runnable, COMPAT_ROWS),
                )?;
                for (app, e) in &seeded_now.failed {
                    self.report.findings.push(
                        Finding::new(
                            compat::CHECK,
                            "rows-cannot-be-written",
                            Severity::Warn,
                            Some(v),
                            format!(
                                "rows shaped like the {app} app's cannot be written on V{v}: {e}"
                            ),
                        )
                        .evidence("app", app.clone())
                        .advice("see the statement failures of this app on this version"),
                    );
                }
                for app in &runnable {
                    let outcomes = step("replaying statements", replay::replay_all(&mut c, app))?;
                    self.report
                        .findings
                        .extend(compat::replay_findings(v, app, v, &outcomes));
                }
                // Cross-version: each app still running against each newer
                // one that may run on this schema.
                for older in &live {
                    for newer in runnable.iter().filter(|a| a.needs > older.needs) {
                        self.report
                            .findings
                            .extend(compat::cross_version(v, &mut c, older, newer));
                    }
                }
            }

            drop(seeded);
            last_seeded = Some(applied_db);
        }
        if let Some(failure) = &stopped {
            self.report.findings.extend(failure.iter().cloned());
        }
        if stopped.is_some() || seeded_failed {
            return Ok(());
        }

        // dao: the newest apps' behaviour on a fresh database at the final version.
        self.v.say("dao: two-phase behaviour on the final schema");
        let final_db = self.clone_db(&empty_prev)?;
        if self
            .v
            .apps
            .iter()
            .any(|a| a.name == "current" && a.needs <= prev)
        {
            self.ran(dao::CHECK, Some(prev));
            self.report.findings.extend(dao::run(prev, final_db.url()));
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
        self.v.say("waiting for the long-transaction probes");
        Ok(())
    }

    fn locks_probe_findings(&mut self, v: i32, probe: &LockTimeoutProbe) {
        let f = locks::evaluate(
            v,
            &rehearsal::Applied::default(),
            None,
            Some(probe),
            self.v.lock_timeout,
        );
        // Only the probe's own finding: the measured one was reported already.
        self.report
            .findings
            .extend(f.into_iter().filter(|f| f.id != "locks.measured"));
    }
}

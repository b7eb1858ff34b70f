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
//!
//! Floors, lowest first (`src/verify/layers.txt`, enforced by the unit
//! test `lib::shape`): [`evidence`] (pure data, with the
//! error), [`measure`] (the instruments), [`checks`] (judging), the
//! stages and the options, then this root: the entry points
//! ([`Verify::run`], [`Verify::run_on_majors`], [`Verify::static_only`]).

pub mod checks;
mod error;
pub mod evidence;
pub mod measure;
mod options;
mod stages;

use std::collections::BTreeMap;
use std::time::Instant;

use crate::report::accept::Waiver;
use crate::report::{RehearsedApp, Report};
use crate::sandbox::{Sandbox, SandboxBuilder};

use crate::lint::{self, Warning};
use crate::report::events::{Event, RunStep};
use crate::sessions::Sessions;
use checks::{apply, compat};
use evidence::MigrationEvidence;

pub use crate::seed::DEFAULT_ROWS;
pub use error::VerifyError;
pub use options::{ExpectedSchema, Verify};
use stages::Run;

impl Verify {
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

    /// The migrations a run judges: all of them, or those after `--since`.
    fn judged_migrations(&self) -> impl Iterator<Item = &crate::catalog::Migration> {
        self.catalog
            .migrations()
            .iter()
            .filter(|m| !self.since.is_some_and(|s| m.version <= s))
    }

    /// How production sends `m` in the transaction of the migration
    /// judged before it, when it does: its tool sends every pending
    /// migration in one transaction, and the two are pending together
    /// (both after `--since`/`--base`, where production stands, or one
    /// deploy ran them).
    fn shares_transaction(&self, m: &crate::catalog::Migration) -> Option<String> {
        let index = self
            .catalog
            .migrations()
            .iter()
            .position(|x| x.version == m.version)?;
        let prev = self.catalog.migrations().get(index.checked_sub(1)?)?;
        // The one before is not judged here: production already ran it.
        if self.since.is_some_and(|s| prev.version <= s) {
            return None;
        }
        let both_pending = self.since.is_some();
        self.catalog
            .transaction_shared_with_previous(index, both_pending)
            .map(str::to_string)
    }

    /// squawk's warnings on every migration the rehearsal judges, and on
    /// the scripts its tool runs around it (Flyway's `beforeEachMigrate`,
    /// at their own files and lines): each warning's statement is its
    /// index among the statements the apply runs
    /// (`migrate::apply::migration_steps`), as the measured apply's.
    fn lint(&self) -> BTreeMap<i32, Vec<Warning>> {
        self.judged_migrations()
            // squawk reads SQL only: what rollsafe cannot run has none.
            .filter(|m| m.not_runnable.is_none())
            .map(|m| {
                let in_transaction = !m.runs_outside_transaction();
                let own = lint::lint(&self.catalog.path_of(m), &m.sql, in_transaction)
                    .into_iter()
                    .filter(|w| !m.nolint.silences(w.statement, &w.rule))
                    .collect();
                let script = |s: &crate::catalog::Script| {
                    let path = self.catalog.path_of_file(&s.file);
                    lint::lint(&path, &s.sql, in_transaction)
                };
                let mut warnings = Vec::new();
                let mut before = 0;
                let scripts = (m.before_each.iter().map(|s| (script(s), &s.sql)))
                    .chain([(own, &m.sql)])
                    .chain(m.after_each.iter().map(|s| (script(s), &s.sql)));
                for (found, sql) in scripts {
                    warnings.extend(found.into_iter().map(|w| Warning {
                        statement: w.statement.map(|i| i + before),
                        ..w
                    }));
                    before += crate::sql::split(sql).statements.len();
                }
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
        // The registry judges, on evidence that is the lint alone: static
        // reports each warning as squawk's word (nothing measured, nothing
        // "not reached"); every other check has nothing to judge.
        let mut lint = self.lint();
        let evidence: BTreeMap<i32, MigrationEvidence> = self
            .judged_migrations()
            .map(|m| {
                let e = MigrationEvidence {
                    version: m.version,
                    file: self.catalog.path_of(m),
                    not_runnable: m.not_runnable.clone(),
                    applied_by: applied_by(m),
                    lint: lint.remove(&m.version),
                    ..MigrationEvidence::default()
                };
                (m.version, e)
            })
            .collect();
        let cx = evidence::Context {
            rehearsed: false,
            ..self.context()
        };
        let judged = checks::judge(&evidence, &evidence::RunEvidence::default(), &cx);
        report.checks = judged.ran;
        report.findings = judged.findings;
        report.duration_ms = started.elapsed().as_millis() as u64;
        report.finish();
        self.hold_waivers(&mut report);
        self.locate_in_files(&mut report);
        report
    }

    /// Points every finding at a line of the file a reviewer opens. A
    /// framework's migration is code (`0004_x.py`, `20240308_x.rb`) whose
    /// SQL the framework sent: the statement's line in that SQL is no line
    /// of the file, so an annotation there would land on the wrong line.
    /// Such findings point at the file's first line, the statement named
    /// by its excerpt.
    fn locate_in_files(&self, report: &mut Report) {
        if self.catalog.layout != crate::catalog::Layout::Framework {
            return;
        }
        for location in report
            .findings
            .iter_mut()
            .filter_map(|f| f.location.as_mut())
        {
            location.line = 1;
            location.column = 1;
        }
    }

    /// Holds every reviewed waiver of the migrations this run judged (the
    /// files' `-- rollsafe:accept`, then `rollsafe.toml`'s `[[accept]]`)
    /// against the finished report: one place, so every format sees the
    /// same accepted findings and stale waivers.
    fn hold_waivers(&self, report: &mut Report) {
        let judged: Vec<i32> = self.judged_migrations().map(|m| m.version).collect();
        let waivers: Vec<Waiver> = self
            .judged_migrations()
            .flat_map(|m| Waiver::in_file(m, &self.catalog.path_of(m)))
            .chain(
                self.waivers
                    .iter()
                    .filter(|w| judged.contains(&w.migration))
                    .cloned(),
            )
            .collect();
        if !waivers.is_empty() {
            crate::report::accept::apply(report, &waivers, chrono::Utc::now().date_naive());
        }
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
            deploy_start: std::collections::BTreeSet::new(),
            run_evidence: evidence::RunEvidence::default(),
            evidence: self
                .judged_migrations()
                .map(|m| {
                    let e = MigrationEvidence {
                        version: m.version,
                        file: self.catalog.path_of(m),
                        not_runnable: m.not_runnable.clone(),
                        applied_by: applied_by(m),
                        shares_transaction: self.shares_transaction(m),
                        sql: m.sql.clone(),
                        callbacks: (m.before_each.iter().chain(&m.after_each))
                            .map(|s| crate::catalog::Script {
                                file: self.catalog.path_of_file(&s.file),
                                sql: s.sql.clone(),
                            })
                            .collect(),
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
        run.report.base = self.target.as_ref().map(crate::target::Target::phrase);
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
        self.hold_waivers(&mut report);
        self.locate_in_files(&mut report);
        // The order is only proven when nothing failed, and only for a
        // rehearsal that reached every migration (one stopped at a
        // migration rollsafe cannot run proved nothing after it).
        let unreached = report
            .findings
            .iter()
            .any(|f| f.id == "apply.not-rehearsed" || f.id == "apply.not-runnable");
        if !report.passed || unreached {
            report.safe_order.clear();
        }
        Ok(report)
    }
}

/// `Django itself (`python3 manage.py migrate …`)` for a migration its
/// framework applies at rows ([`crate::catalog::ExternalApply`]).
fn applied_by(m: &crate::catalog::Migration) -> Option<String> {
    m.external
        .as_ref()
        .map(|x| format!("{} itself (`{}`)", x.by, x.command))
}

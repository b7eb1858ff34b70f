//! A rehearsal's options: the [`Verify`] builder, what it emits, and
//! the context the checks judge with. Floor `stages` (with the stages,
//! which read the options; above `checks`, whose defaults it starts from):
//! the entry points that run a rehearsal ([`Verify::run`] and the others)
//! are the root's, above it.

use std::sync::Arc;
use std::time::Duration;

use crate::app::AppVersion;
use crate::catalog::{Catalog, Source};
use crate::lock_policy::LockPolicy;
use crate::schema::Snapshot;

use super::checks::{self, locks};
use super::error::VerifyError;
use super::evidence;
use super::evidence::predict::Sizes;
use crate::config::AcceptEntry;
use crate::report::accept::Waiver;
use crate::report::events::{Event, MigrationStep, VerifyEvent};
use crate::seed::DEFAULT_ROWS;
use crate::sessions as roles;
use crate::target;

pub(super) type Progress = Arc<dyn Fn(&VerifyEvent) + Send + Sync>;

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
    pub(super) catalog: Catalog,
    pub(super) apps: Vec<AppVersion>,
    pub(super) rows: u64,
    pub(super) lock_policy: LockPolicy,
    pub(super) stall_budget: Duration,
    pub(super) sizes: Sizes,
    pub(super) since: Option<i32>,
    /// `--from-target`: the schema and history the rehearsal starts from.
    pub(super) target: Option<target::Target>,
    pub(super) expected: ExpectedSchema,
    pub(super) progress: Option<Progress>,
    /// The PostgreSQL major its events name, when several are rehearsed.
    pub(super) major: Option<u32>,
    /// The role apps connect as when their file declares none.
    pub(super) app_role: Option<String>,
    /// `--migrator-superuser`: migrations run as the sandbox's superuser.
    pub(super) superuser_migrator: bool,
    /// `--setup`: SQL run once as a superuser before the first migration.
    pub(super) setup: Option<String>,
    /// The longest one rehearsed statement (a migration's, an app's) may
    /// run before it is cancelled.
    pub(super) statement_timeout: Duration,
    /// A plan regression whose full read per call stays under this at
    /// production size is a warning (`--plan-budget`).
    pub(super) plan_budget: Duration,
    /// `rollsafe.toml`'s `[[accept]]` waivers, resolved against the
    /// catalogue (the files' own `-- rollsafe:accept` are read from it).
    pub(super) waivers: Vec<Waiver>,
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
            Source::Framework { .. } => ExpectedSchema::Derived,
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
            waivers: Vec::new(),
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

    /// The `[[accept]]` waivers of the settings file `config` (each with
    /// its line), held against the finished report with the files' own
    /// `-- rollsafe:accept`. A migration no file of the catalogue is
    /// called is refused, naming the entry.
    pub fn accept(
        mut self,
        config: &str,
        entries: &[(usize, AcceptEntry)],
    ) -> Result<Self, VerifyError> {
        for (line, entry) in entries {
            let label = entry.migration.to_string();
            let version =
                self.catalog
                    .resolve_label(&label)
                    .map_err(|why| VerifyError::UnknownAccept {
                        place: format!("{config}:{line}"),
                        migration: label.clone(),
                        why,
                    })?;
            self.waivers
                .push(Waiver::in_config(config, *line, entry, version));
        }
        Ok(self)
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

    pub(super) fn emit(&self, what: Event) {
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
    pub(super) fn say(&self, v: i32, step: MigrationStep) {
        self.emit(Event::Migration {
            version: v,
            label: self.catalog.label_of(v),
            step,
        });
    }

    /// What the checks judge with besides the evidence.
    pub(super) fn context(&self) -> evidence::Context<'_> {
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
            rehearsed: true,
        }
    }

    /// Versions applied unchecked before the rehearsed ones (`since`).
    pub(super) fn applied_only(&self) -> Vec<i32> {
        self.catalog
            .migrations()
            .iter()
            .map(|m| m.version)
            .filter(|v| self.since.is_some_and(|s| *v <= s))
            .collect()
    }
}

//! The evidence floor: every record that crosses from measuring to
//! judging. The stages and their scenarios (`verify::stages`, the plan
//! stage, the rehearsal's instruments) fill one [`MigrationEvidence`] per
//! migration; once every stage and background scenario has run, the
//! checks' registry ([`crate::verify::checks::ALL`]) judges each record
//! with a [`Context`], in one loop. Nothing here reads a database or
//! writes a report: the unit test below fails if a file of this module or
//! of the checks names a database client, the sandbox or the migrator.
//!
//! A field that is None was not measured: the rehearsal stopped before it,
//! or the scenario does not apply to the migration.

// `predict` (the pure half of the production-size prediction) reads
// applies through this path: the root names `predict` (the Context's
// sizes), so importing the root from it would be a circle.
pub mod applied;
mod cross_version;
mod external;
pub mod plan;
pub mod predict;
mod readers;
mod runs;
mod workload;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::app::AppVersion;
use crate::catalog::Catalog;
use crate::lock_policy::LockPolicy;
use crate::pg::lock_modes::Needs;
use crate::report::{CheckRun, Finding};
use crate::schema::Snapshot;
use predict::Sizes;

pub use crate::app::replay::{Denied, Outcome, Step};
use crate::lint::Warning;
pub use crate::seed::generated::Generated;
pub use applied::{Applied, Observed, StatementRun, TableWork, Work};
pub use cross_version::CrossVersion;
pub use external::{ExternalRun, RowsChanged};
pub use readers::{
    BoundBy, BoundRows, DirectiveCount, NotCompared, RolloutWrite, Row, RowRead, StatementReader,
    Visible, Writer,
};
pub use runs::{BatchedRun, Rerun, SecondRun, VerifyScript};
pub use workload::{AppWait, LongTransactionProbe, ProbeEnd, WorkloadStats, STALE_PLAN};

/// Everything the rehearsal measured about one migration.
#[derive(Debug, Clone, Default)]
pub struct MigrationEvidence {
    pub version: i32,
    /// The version the migration starts from (0 before the first).
    pub prev: i32,
    /// The migration's file as the repository has it, and its SQL.
    pub file: String,
    pub sql: String,
    /// The scripts its tool runs around it (Flyway's `beforeEachMigrate`,
    /// `afterEachMigrate`), each file as the repository has it: the
    /// measured findings at their statements are at their files.
    pub callbacks: Vec<crate::catalog::Script>,
    /// Why rollsafe cannot read or run it (a goose Go migration, a file of
    /// a kind it does not run), from the catalogue: squawk read nothing of
    /// it, so no check may call it clean. None for SQL.
    pub not_runnable: Option<String>,
    /// Who applies it at rows instead of its SQL, from the catalogue
    /// (`Django itself (`python3 manage.py migrate …`)`): a framework's
    /// data migration, whose SQL is only what it sent to an empty
    /// database. None for the others.
    pub applied_by: Option<String>,
    /// How production sends it in the transaction of the migration judged
    /// before it, when it does (Alembic's default, Drizzle: every pending
    /// migration in one transaction, and these two pending together), from
    /// the catalogue ([`crate::catalog::Catalog::transaction_shared_with_previous`]):
    /// each is rehearsed in its own, and `locks` judges the earlier one's
    /// holds to the later one's commit.
    pub shares_transaction: Option<String>,
    /// squawk's warnings on its text (None: the precheck did not finish).
    pub lint: Option<Vec<Warning>>,
    /// What blocks the live apps: the lock modes their statements take.
    pub needs: Needs,
    /// The live apps (names, oldest first), and the apps that may run on
    /// the schema after it but not before.
    pub live: Vec<String>,
    pub newly: Vec<String>,
    /// The seeded database before it, when one was seeded.
    pub seeding: Option<Seeding>,
    /// The empty path: its measured apply and what the forced failure left
    /// behind (schema differences).
    pub at_zero: Option<Applied>,
    pub failure_trace: Vec<String>,
    /// A file outside a transaction killed part-way and run again.
    pub rerun: Option<Rerun>,
    /// The long-transaction probe.
    pub probe: Option<Probe>,
    /// The apps' statements planned before and after it.
    pub plans: Option<Plans>,
    /// The seeded path: its measured apply, under the live apps' workload
    /// when one ran, and the file's batched updates.
    pub seeded: Option<SeededApply>,
    /// The seeded path of a migration applied by its command
    /// ([`MigrationEvidence::applied_by`]) instead of `seeded`.
    pub external: Option<ExternalRun>,
    /// Reached only when the seeded apply succeeded.
    pub backfill: Option<Backfill>,
    pub compat: Option<Compat>,
    /// The project's own verify script (Sqitch), run after the change.
    pub verify_script: Option<VerifyScript>,
    /// The migrator run twice up to this version (Err: why it failed).
    pub second_run: Option<Result<SecondRun, String>>,
    /// The final schemas, on the last migration only.
    pub final_schema: Option<FinalSchema>,
    /// What an earlier migration's failure (its version) left of it
    /// unrehearsed.
    pub unreached: Option<(i32, Unreached)>,
}

/// What of a migration an earlier failure left unrehearsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreached {
    /// All of it: the rehearsal stopped before it. (A failure on a
    /// seeded database does not stop the later seeded paths: they are
    /// seeded afresh, `stages::seeded`.)
    Everything,
    /// All of it: a migration before it that rollsafe cannot run (a goose
    /// Go migration) stopped the rehearsal, since its schema builds on
    /// that one. Nothing failed.
    AfterNotRunnable,
}

/// The run as a whole, beside each migration's evidence: what the
/// run-level judgements ([`crate::verify::checks::Check::evaluate_run`])
/// read.
#[derive(Debug, Clone, Default)]
pub struct RunEvidence {
    /// `--since`, when given.
    pub since: Option<i32>,
    /// How many migrations after `since` the rehearsal applied on an empty
    /// database.
    pub reached: usize,
    /// The migration whose failure stopped the rehearsal.
    pub stopped_at: Option<i32>,
    /// The static precheck's thread died (a bug): no migration has its
    /// warnings.
    pub lint_died: bool,
    /// The project's own checks on the final schema (a plug-in such as the
    /// shipped `dao`: `crate::app::ProjectRule`), which judge themselves:
    /// each one that ran, with its findings, reported as they are.
    pub project_checks: Vec<(CheckRun, Vec<Finding>)>,
    /// The runs of migrations production sends in one transaction
    /// ([`MigrationEvidence::shares_transaction`]), each applied so on an
    /// empty database at the version before it: their versions, in order,
    /// and where the one transaction failed. Empty when there is none (or
    /// the rehearsal stopped before them).
    pub shared_runs: Vec<(Vec<i32>, Option<SharedRunFailure>)>,
}

/// Where a run of migrations sent in one transaction failed as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRunFailure {
    /// The migration whose statement failed.
    pub version: i32,
    /// Its file (or its callback's) as the repository has it, and the
    /// statement's place and beginning there.
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub statement: String,
    /// The server's error.
    pub message: String,
}

impl MigrationEvidence {
    /// Who applied it at rows, when its framework did and succeeded there
    /// (a data migration): the checks that measure statements say they
    /// could not.
    pub fn applied_by_framework(&self) -> Option<&str> {
        self.external
            .as_ref()
            .filter(|x| x.failed.is_none())
            .and(self.applied_by.as_deref())
    }

    /// Whether it failed to apply even on an empty database: nothing
    /// measured after that speaks for it.
    pub fn failed_on_empty(&self) -> bool {
        self.at_zero.as_ref().is_some_and(|a| !a.ok())
    }

    /// The seeded apply, when it succeeded: the checks that judge what the
    /// migration did (rewrite, locks) need it.
    pub fn applied_on_seeded(&self) -> Option<&SeededApply> {
        self.seeded.as_ref().filter(|s| s.applied.ok())
    }
}

/// The seeded database at the previous version.
#[derive(Debug, Clone, Default)]
pub struct Seeding {
    /// Rows the catalogue generator wrote, when it wrote some.
    pub generated: Option<Generated>,
    /// (app, error) of a live app that could not write its rows: the
    /// rehearsal stops there.
    pub cannot_write: Option<(String, String)>,
    /// Relations that appeared while the rows were written: made by the
    /// project's own triggers or functions (a table per customer, a
    /// partition per month), not by a migration. `post` leaves them out
    /// when it compares the seeded path's schema with the empty one's.
    pub made_by_rows: Vec<String>,
    /// Tables left without generated rows because an earlier migration of
    /// the same deploy created them ([`crate::catalog::Migration::deploy_group`]):
    /// production has no rows there when this migration runs.
    pub left_empty: Vec<String>,
}

/// The long-transaction probe's outcome.
#[derive(Debug, Clone)]
pub enum Probe {
    /// A file outside a transaction has no transaction to queue behind.
    NotApplicable,
    /// It ran (Err: why it could not).
    Ran(Box<Result<LongTransactionProbe, String>>),
}

/// The live apps' statements planned on the seeded database before the
/// migration and again after it (None: the apply failed first).
#[derive(Debug, Clone)]
pub struct Plans {
    pub before: Result<plan::Side, String>,
    pub after: Option<Result<plan::Side, String>>,
}

/// The measured apply on the seeded database.
#[derive(Debug, Clone, Default)]
pub struct SeededApply {
    pub applied: Applied,
    /// Rows the seeded database held.
    pub rows: i64,
    /// What the live apps went through meanwhile (None: none ran, the
    /// empty path's apply stands for this one).
    pub workload: Option<WorkloadStats>,
    /// The file's batched updates, run as migrate runs them.
    pub batched: Vec<BatchedRun>,
}

/// Right after the migration, on rows that all existed before it.
#[derive(Debug, Clone, Default)]
pub struct Backfill {
    /// The file's `-- rollsafe:backfill` promises counted (None: no
    /// database at the new version to count them on).
    pub directives: Option<Vec<DirectiveCount>>,
    pub readers_before: Visible,
    pub readers_after: Visible,
}

/// The apps' statements replayed around the migration.
#[derive(Debug, Clone, Default)]
pub struct Compat {
    /// Each live app's statements on the schema before it.
    pub before: BTreeMap<String, Vec<Outcome>>,
    /// (app, error) of apps that could not write rows on the schema after.
    pub rows_not_written: Vec<(String, String)>,
    /// Each app that may run after it, in order, with its statements on
    /// the schema after.
    pub after: Vec<(String, Vec<Outcome>)>,
    /// Each older app beside each newer one.
    pub cross_version: Vec<SideBySide>,
    /// Rows the live apps wrote on the schema after (their write
    /// statements, their drivers' creates), read by the statement readers
    /// of the writer and of the newer apps.
    pub rollout_writes: Vec<RolloutWrite>,
}

/// The cross-version scenario of two apps.
#[derive(Debug, Clone)]
pub struct SideBySide {
    pub older: String,
    pub newer: String,
    /// What the two-phase and rollback scenarios saw; None: either app
    /// has no driver; Err: why it failed.
    pub seen: Option<Result<CrossVersion, String>>,
}

/// The final schema, reached on the seeded path and on the empty one.
#[derive(Debug, Clone, Default)]
pub struct FinalSchema {
    pub seeded: Snapshot,
    pub empty: Snapshot,
    /// Tables left UNLOGGED (on the seeded path), as messages name them.
    pub unlogged: Vec<String>,
    /// Relations the rows made on the seeded path ([`Seeding::made_by_rows`]
    /// of every migration), by name.
    pub made_by_rows: std::collections::BTreeSet<String>,
}

/// What the judgement needs besides the evidence: the run's options and
/// the project's apps and labels.
pub struct Context<'a> {
    pub apps: &'a [AppVersion],
    pub lock_policy: LockPolicy,
    pub stall_budget: Duration,
    pub statement_timeout: Duration,
    pub plan_budget: Duration,
    pub sizes: &'a Sizes,
    /// The expected final schema (None: what the migrations build).
    pub expected: Option<(&'a Snapshot, &'a str)>,
    /// How the project names its migrations in messages.
    pub labels: Labels<'a>,
    /// Whether databases were rehearsed (false under `--static-only`:
    /// only the files' text was read, so nothing is "not reached").
    pub rehearsed: bool,
}

#[cfg(test)]
impl<'a> Context<'a> {
    /// A context with nothing given: no apps, default policy and budgets,
    /// rollsafe's ordinals, a rehearsal that ran (for the checks' tests).
    pub(crate) fn bare(sizes: &'a Sizes) -> Self {
        Context {
            apps: &[],
            lock_policy: Default::default(),
            stall_budget: Default::default(),
            statement_timeout: Default::default(),
            plan_budget: Default::default(),
            sizes,
            expected: None,
            labels: Labels::ORDINALS,
            rehearsed: true,
        }
    }
}

/// How the project names its migrations in messages: rollsafe's ordinal
/// `V3` is the label of a refinery file; a sqlx project's is
/// `20240101120000`. A finding keeps the ordinal as its migration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Labels<'a>(Option<&'a Catalog>);

impl<'a> Labels<'a> {
    /// rollsafe's ordinals, `V{n}` (for a catalogue-free judgement, as in
    /// unit tests).
    pub const ORDINALS: Labels<'static> = Labels(None);

    pub fn of_catalog(catalog: &'a Catalog) -> Labels<'a> {
        Labels(Some(catalog))
    }

    /// The label of version `v`.
    pub fn of(&self, v: i32) -> String {
        match self.0 {
            Some(c) => c.label_of(v),
            None => format!("V{v}"),
        }
    }
}

impl Context<'_> {
    /// The app named `name`.
    pub fn app(&self, name: &str) -> Option<&AppVersion> {
        self.apps.iter().find(|a| a.name == name)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// What a file that judges or carries evidence must not name: a
    /// database client, the sandbox, or a function of the migrator
    /// (`crate::migrate::Options` is a type; `migrate::migrate(` and
    /// `migrate::apply_` are calls).
    const MEASURING: &[&str] = &[
        "postgres::",
        "crate::db",
        "crate::sandbox",
        "migrate::migrate(",
        "migrate::apply",
        "migrate::record_applied",
        "apply::in_transaction(",
        "apply::outside_transaction(",
        "backfill::run(",
    ];

    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("the source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn checks_and_evidence_do_no_io() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/verify");
        let mut files = Vec::new();
        sources(&root.join("checks"), &mut files);
        sources(&root.join("evidence"), &mut files);
        assert!(files.len() >= 10, "found only {files:?}");
        let mut named = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).expect("a source file");
            // This test names them itself, in its list.
            let text = match text.find("const MEASURING") {
                Some(i) => &text[..i],
                None => &text,
            };
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for needle in MEASURING {
                    if code.contains(needle) {
                        named.push(format!("{}:{}: {needle}", file.display(), n + 1));
                    }
                }
            }
        }
        assert!(
            named.is_empty(),
            "measuring from a judge:\n{}",
            named.join("\n")
        );
    }
}

//! Applying a catalog to a real database, safely; and reporting where a
//! database stands (`rollsafe migrate`, `rollsafe status`).
//!
//! Built on refinery 0.10 and its history table `refinery_schema_history`
//! (version, name, applied_on, checksum), so a database migrated by rollsafe
//! reads the same to refinery and back. What refinery alone does not give,
//! and what this module adds around it:
//!
//! - **One migration = one transaction with its history row.** refinery's
//!   default mode commits a migration's SQL and its history INSERT
//!   separately (a crash in between leaves it applied but unrecorded). Its
//!   grouped mode runs the SQL and the INSERT in one transaction (read in
//!   refinery-core's `traits::sync::migrate`: one `Transaction::execute`
//!   over the batch, `postgres::Client::transaction` + commit). rollsafe
//!   therefore runs refinery grouped with `Target::Version(v)` once per
//!   pending version `v`: each run is exactly one migration and its row, and
//!   a lock timeout can be retried migration by migration.
//! - **One migrator at a time.** A session advisory lock (key
//!   [`ADVISORY_LOCK_KEY`], the bytes of "rollsafe"; advisory locks are per
//!   database) is taken by polling `pg_try_advisory_lock` up to a bound: a
//!   blocking `pg_advisory_lock` can deadlock with concurrent index builds,
//!   which wait for every open transaction. The lock is confirmed in
//!   `pg_locks` for our own backend, and refinery runs on that same client,
//!   so the lock covers every history read and every apply.
//! - **Lock waits that queue nobody.** `ALTER TABLE` needs ACCESS
//!   EXCLUSIVE; while it waits, every later query on the table queues
//!   behind it. So before each attempt a gate ([`conflicts`]) reads the
//!   locks the migration's statements need (mode per table, from the
//!   statements; `--dry-run` prints them) and looks in `pg_locks` for a
//!   session holding a conflicting one; while there is one, migrate polls
//!   and requests nothing. When there is none, one attempt with a short
//!   `lock_timeout` (50 ms), backing off with jitter after a lost race, for
//!   `--retry-for` (5 minutes by default): a reader's worst wait behind a
//!   long transaction is about one such attempt. Statements whose waits
//!   queue no app statement (`CREATE INDEX CONCURRENTLY`), and
//!   [`LockPolicy::stepped`], keep the stepped attempts (100 ms growing to
//!   500 ms). A timed-out attempt rolls back whole. Giving up names the
//!   blocker (the gate's holder, or, for an attempt that timed out, the
//!   backends a watcher on another connection saw in `pg_blocking_pids`):
//!   pid, user, application, state, transaction age — never its SQL text,
//!   which may carry data.
//! - **Drift refused before anything runs.** Divergent (edited after
//!   apply), missing (applied, file gone), unknown-newer (database ahead of
//!   the code) and out-of-order (a file older than the newest applied
//!   version, never applied) versions stop the run with a message naming
//!   the file and the checksums.
//! - **Files that cannot run in one transaction.** A
//!   `-- rollsafe:no-transaction` file (and any file with a
//!   `-- rollsafe:batched-update`) runs statement by statement, each under
//!   the same lock policy, under the same advisory lock; its history row
//!   (same table, format and checksum refinery writes, so refinery reads it
//!   as applied) is written only after every statement and every backfill
//!   finished. Its statements must be re-runnable, judged before anything
//!   runs ([`no_transaction`]); an INVALID index left by a failed
//!   `CREATE INDEX CONCURRENTLY` is dropped and rebuilt; a backfill resumes
//!   from its progress row ([`backfill`]). `CONCURRENTLY` in a transactional
//!   file is refused before anything runs, naming the directive.
//! - **Flyway callbacks** (`beforeMigrate`, `afterMigrate`, …: catalogue
//!   steps marked [`Migration::callback`]) are never migrations to the
//!   history: `status` and drift never list them, nothing records them.
//!   A run executes them where Flyway's migrate does, each in a
//!   transaction of its own under the same lock policy, `afterMigrate`
//!   even when nothing is pending ([`Plan::callbacks`]).
//! - **Dry run** reads the history (without creating the table) and returns
//!   the plan; nothing is written.
//!
//! Exit codes of the commands (mapped in `main.rs` from [`MigrateError::exit_code`]):
//! - `migrate`: 0 applied (or nothing to do); 1 refused (drift, another
//!   migrator kept the lock) or a migration failed (SQL error, lock timeout
//!   after all retries) — the database keeps every migration that committed
//!   before it and nothing of the failed one; 2 could not run (usage,
//!   unusable migration files, unknown `--target`, connection).
//! - `status`: 0 no drift; 1 drift (divergent, missing, unknown-newer,
//!   out-of-order); 2 could not run.
//!
//! Not here: rehearsal in throwaway databases (`verify`), read-only audits
//! (`check`), printing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Client;
use serde::Serialize;
use thiserror::Error;

use crate::catalog::{Catalog, Migration};
use crate::db::{self, ConnectError};
use crate::lock_policy::LockPolicy;

pub mod apply;
pub mod backfill;
pub mod conflicts;
pub mod history;
pub mod no_transaction;
pub mod partitioned_index;
pub mod way_out;

use backfill::{BackfillError, BackfillOptions, BackfillState, ProgressSink};
use history::ToolHistory;

/// refinery's history table (its default name).
pub use crate::catalog::layouts::refinery::HISTORY_TABLE;

/// The session advisory lock every rollsafe migrator takes: the ASCII bytes
/// of "rollsafe" as a big-endian i64.
pub const ADVISORY_LOCK_KEY: i64 = i64::from_be_bytes(*b"rollsafe");

/// How a run behaves; a small builder with sensible defaults.
#[derive(Debug, Clone)]
pub struct Options {
    /// Apply up to this version (inclusive); `None` = the latest file.
    pub target: Option<i32>,
    /// How table-lock waits are stepped and bounded (shared with verify).
    pub lock: LockPolicy,
    /// How long to wait for another migrator's advisory lock.
    pub migrator_wait: Duration,
    /// Batch size and pause of `-- rollsafe:batched-update` backfills.
    pub backfill: BackfillOptions,
    /// Called after every backfill batch (the library never prints).
    pub progress: Option<ProgressSink>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            target: None,
            lock: LockPolicy::default(),
            migrator_wait: Duration::from_secs(120),
            backfill: BackfillOptions::default(),
            progress: None,
        }
    }
}

/// One row of the history table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryRow {
    pub version: i32,
    pub name: String,
    /// RFC 3339, as refinery writes it.
    pub applied_on: String,
    /// refinery's checksum, as stored (a decimal u64).
    pub checksum: String,
}

/// Where one version stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// In the history with the file's checksum.
    Applied,
    /// A file not applied yet, newer than everything applied.
    Pending,
    /// Applied, but the file changed since (checksum or name differ).
    Divergent,
    /// Applied, but no file has this version (and newer files exist).
    Missing,
    /// Applied, newer than every file: the database is ahead of the code.
    UnknownNewer,
    /// A file never applied although a newer version is.
    OutOfOrder,
    /// A Flyway repeatable changed since its last run: Flyway runs it again.
    PendingRerun,
}

impl State {
    /// Whether this state stops `migrate`.
    pub fn is_drift(self) -> bool {
        !matches!(self, State::Applied | State::Pending | State::PendingRerun)
    }
}

/// One version's line in the status.
#[derive(Debug, Clone, Serialize)]
pub struct VersionStatus {
    pub version: i32,
    /// As the migration's tool labels it (`V3`, `20240101120000`,
    /// `2024-10-25-112826_x`); a history row no file has: `V<version>`
    /// for refinery, else the version the tool recorded.
    pub label: String,
    pub name: String,
    /// The file, when one has this version.
    pub file: Option<String>,
    pub state: State,
    /// When it was applied (from the history).
    pub applied_on: Option<String>,
    pub checksum_file: Option<String>,
    pub checksum_applied: Option<String>,
    /// What a divergent checksum can and cannot tell, where the tool's
    /// checksum covers more than the file (Atlas's chains every file
    /// before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl VersionStatus {
    /// The one-line explanation of a drift, with what to do.
    pub fn drift_message(&self) -> Option<String> {
        let file = self.file.as_deref().unwrap_or("?");
        let v = &self.label;
        Some(match self.state {
            State::Applied | State::Pending | State::PendingRerun => return None,
            State::Divergent => match &self.note {
                None => format!(
                    "{v} ({file}) was edited after it was applied: the history has checksum {} (name `{}`), the file has {}; applied migrations are never edited: restore the file and put the change in a new version",
                    self.checksum_applied.as_deref().unwrap_or("?"),
                    self.name,
                    self.checksum_file.as_deref().unwrap_or("?"),
                ),
                Some(note) => format!(
                    "{v} ({file}) differs from what was applied: the history has checksum {}, the files now give {} ({note}); applied migrations are never edited: restore the file and put the change in a new version",
                    self.checksum_applied.as_deref().unwrap_or("?"),
                    self.checksum_file.as_deref().unwrap_or("?"),
                ),
            },
            State::Missing if v.starts_with('V') && v[1..].bytes().all(|b| b.is_ascii_digit()) => format!(
                "{v} (`{}`, applied {}) has no file any more; restore {v}__{}.sql from version control (applied migrations are never deleted)",
                self.name,
                self.applied_on.as_deref().unwrap_or("?"),
                self.name,
            ),
            State::Missing => format!(
                "{v} (applied {}) has no file any more; restore its file from version control (applied migrations are never deleted)",
                self.applied_on.as_deref().unwrap_or("?"),
            ),
            State::UnknownNewer => format!(
                "the database is ahead of the code: {v} (`{}`, applied {}) is newer than every migration file; run the rollsafe build (or --migrations directory) that has {v}",
                self.name,
                self.applied_on.as_deref().unwrap_or("?"),
            ),
            State::OutOfOrder => format!(
                "{v} ({file}) was never applied but a newer version was; migrations apply in order: give this change a version above the newest applied one"
            ),
        })
    }
}

/// Every version known to the files or the history, by version.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The highest applied version, if any.
    pub current: Option<i32>,
    /// The highest version of a migration file (a Flyway callback after
    /// it is no migration).
    pub latest: i32,
    /// Whether the history table exists at all.
    pub history_table: bool,
    pub versions: Vec<VersionStatus>,
    /// Backfills with progress in the database (`rollsafe_backfill_progress`),
    /// finished or not.
    pub backfills: Vec<BackfillState>,
}

impl Status {
    /// Backfills a run started and did not finish: `rollsafe migrate`
    /// resumes them.
    pub fn unfinished_backfills(&self) -> impl Iterator<Item = &BackfillState> {
        self.backfills.iter().filter(|b| !b.finished)
    }

    pub fn drift(&self) -> impl Iterator<Item = &VersionStatus> {
        self.versions.iter().filter(|v| v.state.is_drift())
    }

    /// What `migrate` would apply: pending files, and Flyway repeatables
    /// due to run again.
    pub fn pending(&self) -> impl Iterator<Item = &VersionStatus> {
        self.versions
            .iter()
            .filter(|v| matches!(v.state, State::Pending | State::PendingRerun))
    }

    /// Flyway repeatables whose file changed since their last run: a
    /// rehearsal of what the target lacks runs them again.
    pub fn reruns(&self) -> impl Iterator<Item = &VersionStatus> {
        self.versions
            .iter()
            .filter(|v| v.state == State::PendingRerun)
    }
}

/// Why a run stopped. [`MigrateError::exit_code`] maps it for the CLI.
#[derive(Debug, Error)]
pub enum MigrateError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("refused, nothing applied: {}", .0.join("; "))]
    Drift(Vec<String>),
    #[error("--target {target} is not a migration version (the files have {available}); pass one of those")]
    UnknownTarget { target: i32, available: String },
    #[error("another rollsafe migrate has held the migration lock on this database for {waited:?}{holder}; wait for it to finish (or end it) and run again")]
    MigratorBusy { waited: Duration, holder: String },
    #[error("{migration} failed and was rolled back (nothing of it is applied{earlier}): {detail}; fix the file (it was never applied, so it may still change) and run again")]
    Failed {
        migration: String,
        detail: String,
        earlier: String,
    },
    #[error("{migration} gave up after {attempts} attempts over {elapsed:.1?} (each waited at most {max_timeout:?} for a table lock, so the app never queued longer{waited}); blocked by {blocker}; end or wait for that transaction, then run again (or allow a longer --retry-for)")]
    LockTimeout {
        migration: String,
        attempts: u32,
        elapsed: Duration,
        max_timeout: Duration,
        /// ", and waited 12.3s without queueing" or empty.
        waited: String,
        blocker: String,
    },
    #[error("{file}:{line}: `{statement}` cannot run inside a transaction, and this migration runs in one; add a line `-- rollsafe:no-transaction` to the file (it then runs one statement at a time, each of which must be re-runnable); nothing was applied")]
    NeedsNoTransaction {
        file: String,
        line: usize,
        statement: String,
    },
    #[error("{file}:{line}: `{statement}` is not re-runnable: {why}; nothing was applied")]
    NotRerunnable {
        file: String,
        line: usize,
        statement: String,
        why: String,
    },
    #[error("{file} {why}, so rollsafe migrate cannot apply it; nothing was applied: apply the history with your tool up to and including it, then run `rollsafe migrate` for the rest (or `--target` a version before it)")]
    NotRunnable { file: String, why: String },
    #[error("{migration} stopped at line {line} (`{statement}`): {detail}; the statements before it stay applied and the migration is not recorded as applied; fix the cause and run `rollsafe migrate` again (it resumes: every statement is re-runnable)")]
    StatementFailed {
        migration: String,
        line: usize,
        statement: String,
        detail: String,
    },
    #[error("{migration}: the batched update of {table} cannot run: {why}; nothing of the backfill was applied")]
    BackfillRefused {
        migration: String,
        table: String,
        why: String,
    },
    #[error("{migration}: after the batched update of {table}, {remaining} row(s) still match `{predicate}`, so the migration is not recorded as applied; make the SET expression settle every matching row (or fix those rows), then run `rollsafe migrate` again")]
    BackfillIncomplete {
        migration: String,
        table: String,
        remaining: i64,
        predicate: String,
    },
    #[error("{context}: {detail}")]
    Sql { context: String, detail: String },
    /// The tool's history table refused the row (a guard of the project's
    /// own: a trigger raising, or a privilege only its runner has).
    #[error("recording {migration} in {table}: {detail}; the table refuses writers other than the project's own runner, so apply with that runner")]
    HistoryRefused {
        migration: String,
        table: String,
        detail: String,
    },
}

impl MigrateError {
    /// 1 for refusals and failed migrations, 2 for "could not run".
    pub fn exit_code(&self) -> u8 {
        match self {
            MigrateError::Drift(_)
            | MigrateError::MigratorBusy { .. }
            | MigrateError::Failed { .. }
            | MigrateError::StatementFailed { .. }
            | MigrateError::BackfillIncomplete { .. }
            | MigrateError::LockTimeout { .. } => 1,
            MigrateError::Connect(_)
            | MigrateError::UnknownTarget { .. }
            | MigrateError::NeedsNoTransaction { .. }
            | MigrateError::NotRerunnable { .. }
            | MigrateError::NotRunnable { .. }
            | MigrateError::BackfillRefused { .. }
            | MigrateError::HistoryRefused { .. }
            | MigrateError::Sql { .. } => 2,
        }
    }

    /// The lock policy gave up on `migration`: names the holder the gate
    /// was waiting for, else the blocker the watcher saw.
    fn gave_up<E>(
        migration: String,
        gave_up: crate::lock_policy::GaveUp<E>,
        watcher: &BlockerWatcher,
    ) -> MigrateError {
        let a = gave_up.attempts;
        MigrateError::LockTimeout {
            migration,
            attempts: a.count,
            elapsed: a.elapsed,
            max_timeout: a.last_timeout,
            waited: if a.waited.is_zero() {
                String::new()
            } else {
                format!(", and waited {:.1?} without queueing", a.waited)
            },
            blocker: gave_up
                .waiting_on
                .or_else(|| watcher.blocker())
                .unwrap_or_else(|| "a backend that could not be identified".into()),
        }
    }

    /// Writing `m`'s row in `table` failed: refused by a guard (an
    /// exception raised, a privilege missing) or any other error.
    fn recording(m: &Migration, table: &str, e: &postgres::Error) -> MigrateError {
        let code = e.code().map(|c| c.code());
        if matches!(code, Some("P0001" | "42501")) {
            return MigrateError::HistoryRefused {
                migration: m.to_string(),
                table: table.to_string(),
                detail: crate::errors::one_line(e),
            };
        }
        MigrateError::sql(format!("recording {m} in {table}"), e)
    }

    fn sql(context: impl Into<String>, e: &postgres::Error) -> MigrateError {
        MigrateError::Sql {
            context: context.into(),
            detail: crate::errors::detailed(e),
        }
    }
}

/// The history of `catalog`'s tool (refinery's for refinery folders, see
/// [`history`]) as refinery-shaped rows keyed by rollsafe's versions, read
/// without creating anything: empty (and `false`) when the table does not
/// exist. A row whose recorded checksum is the file's (or that records
/// none) carries the file's refinery checksum, so [`compare`] finds it
/// applied; one whose checksum differs carries the recorded one, so it is
/// divergent (a Flyway repeatable: due to run again). A version the files
/// do not have is placed after the newest file, named by its key.
pub fn read_tool_history(
    client: &mut Client,
    catalog: &Catalog,
    tool: ToolHistory,
) -> Result<(bool, Vec<HistoryRow>), MigrateError> {
    if tool.0 == crate::catalog::Layout::Refinery {
        return read_history(client);
    }
    let applied = tool
        .applied(client)
        .map_err(|e| MigrateError::sql(format!("reading {}", tool.table()), &e))?;
    let Some(applied) = applied else {
        return Ok((false, Vec::new()));
    };
    let applied = tool.expand(catalog, applied);
    let mut unknown = catalog.latest();
    let mut rows: Vec<HistoryRow> = Vec::new();
    for row in applied {
        let history_row = match catalog.migrations().iter().find(|m| m.key == row.key) {
            Some(m) => HistoryRow {
                version: m.version,
                name: m.refinery_history_name(),
                applied_on: row.applied_on,
                checksum: match tool.checksum_matches(m, row.checksum.as_deref()) {
                    true => m.checksum.to_string(),
                    false => row.checksum.unwrap_or_default(),
                },
            },
            None => {
                unknown += 1;
                HistoryRow {
                    version: unknown,
                    name: row.key,
                    applied_on: row.applied_on,
                    checksum: "?".into(),
                }
            }
        };
        rows.push(history_row);
    }
    rows.sort_by_key(|r| r.version);
    Ok((true, rows))
}

/// Reads refinery's history without creating it: empty (and `false`) when
/// the table does not exist.
pub fn read_history(client: &mut Client) -> Result<(bool, Vec<HistoryRow>), MigrateError> {
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&HISTORY_TABLE])
        .map_err(|e| MigrateError::sql("looking for the history table", &e))?
        .get(0);
    if !exists {
        return Ok((false, Vec::new()));
    }
    let rows = client
        .query(
            &format!(
                "SELECT version::int4, coalesce(name, ''), coalesce(applied_on, ''), coalesce(checksum, '') \
                 FROM {HISTORY_TABLE} ORDER BY version"
            ),
            &[],
        )
        .map_err(|e| MigrateError::sql(format!("reading {HISTORY_TABLE}"), &e))?;
    Ok((
        true,
        rows.iter()
            .map(|r| HistoryRow {
                version: r.get(0),
                name: r.get(1),
                applied_on: r.get(2),
                checksum: r.get(3),
            })
            .collect(),
    ))
}

/// Compares the files with the history (pure; no database). A Flyway
/// repeatable is never out of order and never makes another file so; one
/// whose checksum changed is due to run again, not divergent.
pub fn compare(catalog: &Catalog, history_table: bool, history: &[HistoryRow]) -> Status {
    let latest = last_migration(catalog);
    let repeatable = |v: i32| catalog.get(v).is_some_and(|m| m.repeatable);
    let current = history
        .iter()
        .map(|h| h.version)
        .filter(|v| !repeatable(*v) && !is_callback(catalog, *v))
        .max();
    let label_of = |v: i32, recorded: &str| match catalog.get(v) {
        Some(m) => m.label.clone(),
        None if catalog.layout == crate::catalog::Layout::Refinery => format!("V{v}"),
        None => recorded.to_string(),
    };
    let mut versions: Vec<VersionStatus> = Vec::new();
    // A Flyway callback is no migration: its tool records none, so it is
    // never applied, pending or missing.
    for m in catalog.migrations().iter().filter(|m| m.callback.is_none()) {
        let applied = history.iter().find(|h| h.version == m.version);
        let state = match applied {
            Some(h)
                if h.checksum == m.checksum.to_string()
                    && (h.name == m.refinery_history_name() || h.name == m.name) =>
            {
                State::Applied
            }
            Some(_) if m.repeatable => State::PendingRerun,
            Some(_) => State::Divergent,
            None if !m.repeatable && current.is_some_and(|c| c > m.version) => State::OutOfOrder,
            None => State::Pending,
        };
        versions.push(VersionStatus {
            version: m.version,
            label: m.label.clone(),
            name: m.name.clone(),
            file: Some(m.file.clone()),
            state,
            applied_on: applied.map(|h| h.applied_on.clone()),
            checksum_file: Some(m.checksum.to_string()),
            checksum_applied: applied.map(|h| h.checksum.clone()),
            note: None,
        });
    }
    for h in history {
        if catalog.get(h.version).is_none() {
            versions.push(VersionStatus {
                version: h.version,
                label: label_of(h.version, &h.name),
                name: h.name.clone(),
                file: None,
                state: if h.version > latest {
                    State::UnknownNewer
                } else {
                    State::Missing
                },
                applied_on: Some(h.applied_on.clone()),
                checksum_file: None,
                checksum_applied: Some(h.checksum.clone()),
                note: None,
            });
        }
    }
    versions.sort_by_key(|v| v.version);
    Status {
        current,
        latest,
        history_table,
        versions,
        backfills: Vec::new(),
    }
}

/// The version of the last migration of `catalog`: Flyway callbacks
/// placed after it are not migrations.
fn last_migration(catalog: &Catalog) -> i32 {
    catalog
        .migrations()
        .iter()
        .rfind(|m| m.callback.is_none())
        .map_or(0, |m| m.version)
}

/// Whether `v` is a Flyway callback of `catalog`.
fn is_callback(catalog: &Catalog, v: i32) -> bool {
    catalog.get(v).is_some_and(|m| m.callback.is_some())
}

/// [`compare`] with the history of `tool`: where the tool keeps its own
/// checksum, a divergent file is described by that checksum (sqlx's
/// SHA-384, Flyway's CRC32 …) rather than refinery's.
pub fn compare_tool(
    catalog: &Catalog,
    tool: ToolHistory,
    history_table: bool,
    history: &[HistoryRow],
) -> Status {
    let mut status = compare(catalog, history_table, history);
    if tool.0 != crate::catalog::Layout::Refinery {
        for v in &mut status.versions {
            let Some(m) = catalog.get(v.version) else {
                continue;
            };
            if m.tool_checksum.is_some() {
                v.checksum_file = m.tool_checksum.clone();
                if v.state == State::Applied {
                    v.checksum_applied = m.tool_checksum.clone();
                }
                if v.state == State::Divergent {
                    v.note = tool.divergent_note().map(str::to_string);
                }
            }
        }
    }
    status
}

/// Where a real database stands by its own migration tool's table
/// (`verify --from-target`, `--since auto`): the tool of `catalog`'s layout
/// (`flyway_schema_history` for a Flyway folder, …), compared with the
/// files as `status` compares them. Also the rows as refinery-shaped
/// [`HistoryRow`]s (refinery's own rows for a refinery folder, which a
/// rehearsal copies as they are). Read-only.
pub fn target_status(
    client: &mut Client,
    catalog: &Catalog,
) -> Result<(Status, Vec<HistoryRow>), MigrateError> {
    let tool = ToolHistory(catalog.layout);
    let (exists, history) = read_tool_history(client, catalog, tool)?;
    let status = compare_tool(catalog, tool, exists, &history);
    Ok((status, history))
}

/// Where the database at `url` stands against `catalog`. Read-only.
pub fn status(url: &str, catalog: &Catalog) -> Result<Status, MigrateError> {
    let mut client = db::connect(url)?;
    let (mut status, _) = target_status(&mut client, catalog)?;
    status.backfills = backfill::read_states(&mut client)
        .map_err(|e| MigrateError::sql("reading backfill progress", &e))?;
    Ok(status)
}

/// What a run would apply.
#[derive(Debug, Clone)]
pub struct Plan {
    pub current: Option<i32>,
    pub target: i32,
    /// The migrations to apply, in order.
    pub pending: Vec<Migration>,
    /// The Flyway callbacks the run executes around them, in order (each
    /// runs before the pending migrations with a higher version; see
    /// [`callbacks_run`]); never recorded.
    pub callbacks: Vec<Migration>,
    /// The database is already past the target (nothing is ever undone).
    pub beyond_target: bool,
}

impl Plan {
    /// What the run executes, in order: the pending migrations and the
    /// Flyway callbacks where Flyway runs them.
    pub fn run_order(&self) -> Vec<&Migration> {
        let mut run: Vec<&Migration> = self.pending.iter().chain(&self.callbacks).collect();
        run.sort_by_key(|m| m.version);
        run
    }
}

fn check_target(catalog: &Catalog, options: &Options) -> Result<i32, MigrateError> {
    match options.target {
        None => Ok(catalog.latest()),
        Some(t) if catalog.get(t).is_some() => Ok(t),
        Some(t) => Err(MigrateError::UnknownTarget {
            target: t,
            available: catalog.label_ranges(
                &catalog
                    .migrations()
                    .iter()
                    .map(|m| m.version)
                    .collect::<Vec<_>>(),
            ),
        }),
    }
}

fn plan_from(status: &Status, catalog: &Catalog, target: i32) -> Result<Plan, MigrateError> {
    let drift: Vec<String> = status.drift().filter_map(|v| v.drift_message()).collect();
    if !drift.is_empty() {
        return Err(MigrateError::Drift(drift));
    }
    let pending: Vec<Migration> = status
        .pending()
        .filter(|v| v.version <= target)
        .filter_map(|v| catalog.get(v.version).cloned())
        .collect();
    let callbacks = callbacks_run(catalog, target, &pending);
    for m in pending.iter().chain(&callbacks) {
        refuse_unrunnable(catalog, m)?;
    }
    Ok(Plan {
        current: status.current,
        target,
        pending,
        callbacks,
        beyond_target: status.current.is_some_and(|c| c > target),
    })
}

/// The Flyway callbacks of `catalog` a run up to `target` executes, around
/// `pending`, as Flyway's migrate does: every time, even with nothing
/// pending (`afterMigrate`), except `afterMigrateApplied` (only when a
/// migration is applied) and `beforeRepeatables` (only before a
/// repeatable). A run that reaches the last migration is a whole migrate
/// and runs the callbacks after it; one whose target stops before the
/// last migration runs only those placed before its target, where Flyway
/// would run them all: the callback files are today's, written for the
/// schema the whole history makes (an `afterMigrate` granting on a table
/// a later migration creates fails on an earlier one).
fn callbacks_run(catalog: &Catalog, target: i32, pending: &[Migration]) -> Vec<Migration> {
    use crate::catalog::layouts::flyway::{runs_only_when_applying, OnlyWhen};
    let reach = match target >= last_migration(catalog) {
        true => catalog.latest(),
        false => target,
    };
    catalog
        .migrations()
        .iter()
        .filter(|m| m.version <= reach)
        .filter(|m| {
            let Some(event) = &m.callback else {
                return false;
            };
            match runs_only_when_applying(event) {
                None => true,
                Some(OnlyWhen::AnyApplied) => !pending.is_empty(),
                Some(OnlyWhen::RepeatableApplied) => pending.iter().any(|p| p.repeatable),
            }
        })
        .cloned()
        .collect()
}

/// Refuses, before anything runs, a file migrate could only half apply:
/// `CONCURRENTLY` in a transactional file, a statement of a no-transaction
/// file that is not re-runnable.
fn refuse_unrunnable(catalog: &Catalog, m: &Migration) -> Result<(), MigrateError> {
    if let Some(why) = &m.not_runnable {
        return Err(MigrateError::NotRunnable {
            file: catalog.path_of(m),
            why: why.clone(),
        });
    }
    if let Some((line, statement)) = no_transaction::concurrently_in_transaction(m) {
        return Err(MigrateError::NeedsNoTransaction {
            file: catalog.path_of(m),
            line,
            statement,
        });
    }
    if m.runs_outside_transaction() {
        no_transaction::plan_steps(m).map_err(|e| MigrateError::NotRerunnable {
            file: catalog.path_of(m),
            line: e.line,
            statement: e.statement,
            why: e.why,
        })?;
    }
    Ok(())
}

/// The plan for `migrate` without changing anything (not even creating the
/// history table): `--dry-run`. Drift is refused exactly as a real run would.
pub fn plan(url: &str, catalog: &Catalog, options: &Options) -> Result<Plan, MigrateError> {
    let target = check_target(catalog, options)?;
    let status = status(url, catalog)?;
    plan_from(&status, catalog, target)
}

/// One applied migration.
#[derive(Debug, Clone)]
pub struct Applied {
    pub version: i32,
    pub file: String,
    pub elapsed: Duration,
    /// 1 when the first attempt got its locks.
    pub attempts: u32,
    /// How long it waited, without queueing, for conflicting holders.
    pub waited: Duration,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub plan: Plan,
    pub applied: Vec<Applied>,
    /// The Flyway callbacks that ran, in order (not recorded, so never
    /// counted as applied).
    pub callbacks: Vec<Applied>,
    /// How long we waited for another migrator's lock.
    pub waited_for_lock: Duration,
}

/// Applies the pending migrations of `catalog` up to the target. See the
/// module docs for the guarantees.
pub fn migrate(url: &str, catalog: &Catalog, options: &Options) -> Result<Outcome, MigrateError> {
    let target = check_target(catalog, options)?;
    let mut client = db::connect(url)?;
    let waited_for_lock = acquire_migrator_lock(&mut client, options.migrator_wait)?;
    // Everything below runs under the lock; read the history only now, as
    // the previous holder may just have applied what we would.
    let tool = ToolHistory::written_by_migrate(catalog.layout);
    let (exists, history) = read_tool_history(&mut client, catalog, tool)?;
    let status = compare_tool(catalog, tool, exists, &history);
    let plan = plan_from(&status, catalog, target)?;
    let (mut applied, mut callbacks) = (Vec::new(), Vec::new());
    let run = plan.run_order();
    if !run.is_empty() {
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .map_err(|e| MigrateError::sql("reading our backend pid", &e))?
            .get(0);
        let watcher = BlockerWatcher::start(url, pid, options.lock.attempt_timeout);
        let mut looks = Looks::open(url, pid, &options.lock);
        for m in run {
            // Flyway records no callback in its history.
            let record = m.callback.is_none().then_some(tool);
            let result = if m.runs_outside_transaction() {
                apply_outside_transaction(&mut client, record, m, options, &watcher, &mut looks)
            } else {
                apply_in_transaction(&mut client, record, m, options, &watcher, &mut looks)
            };
            match result {
                Ok(a) if m.callback.is_some() => callbacks.push(a),
                Ok(a) => applied.push(a),
                Err(mut e) => {
                    if let MigrateError::Failed { earlier, .. } = &mut e {
                        if !applied.is_empty() {
                            *earlier = format!(
                                "; applied before it: {}",
                                catalog.label_ranges(
                                    &applied.iter().map(|a| a.version).collect::<Vec<_>>()
                                )
                            );
                        }
                    }
                    return Err(e);
                }
            }
        }
        drop(watcher);
    }
    // The session ends right after, which frees the lock anyway; unlocking
    // explicitly lets the next migrator in without waiting for the close.
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&ADVISORY_LOCK_KEY]);
    Ok(Outcome {
        plan,
        applied,
        callbacks,
        waited_for_lock,
    })
}

/// Polls `pg_try_advisory_lock` until it succeeds or `wait` passes, then
/// confirms in `pg_locks` that this backend holds it.
fn acquire_migrator_lock(client: &mut Client, wait: Duration) -> Result<Duration, MigrateError> {
    let start = Instant::now();
    loop {
        let got: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&ADVISORY_LOCK_KEY])
            .map_err(|e| MigrateError::sql("taking the migration lock", &e))?
            .get(0);
        if got {
            break;
        }
        if start.elapsed() >= wait {
            return Err(MigrateError::MigratorBusy {
                waited: start.elapsed(),
                holder: lock_holder(client),
            });
        }
        // Jitter keeps a crowd of migrators from polling in lockstep.
        let pause = Duration::from_millis(50 + rand::random::<u64>() % 100);
        std::thread::sleep(
            pause
                .min(wait.saturating_sub(start.elapsed()))
                .max(Duration::from_millis(1)),
        );
    }
    let held: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_locks \
              WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() \
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                AND classid::bigint = ($1::bigint >> 32) \
                AND objid::bigint = ($1::bigint & 4294967295) AND objsubid = 1)",
            &[&ADVISORY_LOCK_KEY],
        )
        .map_err(|e| MigrateError::sql("confirming the migration lock", &e))?
        .get(0);
    if !held {
        // A pooler in transaction mode would hand our session's lock to
        // another backend; refusing is the only safe answer.
        return Err(MigrateError::Sql {
            context: "confirming the migration lock".into(),
            detail: "pg_try_advisory_lock succeeded but pg_locks does not show it held by this backend (a transaction-mode connection pooler?); connect to PostgreSQL directly".into(),
        });
    }
    Ok(start.elapsed())
}

/// ", held by pid N (app, since T)" for the busy message; empty if unknown.
fn lock_holder(client: &mut Client) -> String {
    let row = client.query_opt(
        "SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.client_addr::text, 'local'), \
                coalesce(extract(epoch FROM now() - a.backend_start)::float8, 0) \
           FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
          WHERE l.locktype = 'advisory' AND l.granted \
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
            AND l.classid::bigint = ($1::bigint >> 32) \
            AND l.objid::bigint = ($1::bigint & 4294967295) AND l.objsubid = 1 \
          LIMIT 1",
        &[&ADVISORY_LOCK_KEY],
    );
    match row {
        Ok(Some(r)) => format!(
            " (held by pid {}, application `{}`, from {}, connected {:.0}s ago)",
            r.get::<_, i32>(0),
            r.get::<_, String>(1),
            r.get::<_, String>(2),
            r.get::<_, f64>(3)
        ),
        _ => String::new(),
    }
}

/// The gate's connection, opened once per run (None: it could not be
/// opened, and attempts are stepped, as before).
struct Looks {
    client: Option<Client>,
    migrator_pid: i32,
    older_than: Duration,
}

impl Looks {
    fn open(url: &str, migrator_pid: i32, policy: &LockPolicy) -> Looks {
        let client = if policy.no_queue {
            db::connect(url)
                .map_err(|e| {
                    log::warn!("cannot open a connection to look for conflicting locks ({e}); attempts will request their locks at once, stepped");
                })
                .ok()
        } else {
            None
        };
        Looks {
            client,
            migrator_pid,
            // A holder whose transaction started within one attempt is
            // likely a short statement (see `conflicts`).
            older_than: policy.attempt_timeout,
        }
    }

    /// A gate for `needed`, when waiting without queueing applies to it:
    /// some lock it needs would queue the app's statements.
    fn gate(&mut self, needed: &conflicts::LocksNeeded) -> Option<conflicts::Gate<'_>> {
        if !needed.queue_the_app() {
            return None;
        }
        let (pid, older_than) = (self.migrator_pid, self.older_than);
        self.client
            .as_mut()
            .map(|c| conflicts::Gate::new(c, needed, pid, older_than))
    }
}

/// Applies one migration and its history row in one transaction
/// ([`apply::in_transaction`], the path every rehearsal measures), waiting
/// and retrying as the [`LockPolicy`] says: each attempt is a transaction
/// of its own, gated on the locks the whole file needs where the policy
/// waits without queueing.
fn apply_in_transaction(
    client: &mut Client,
    tool: Option<ToolHistory>,
    m: &Migration,
    options: &Options,
    watcher: &BlockerWatcher,
    looks: &mut Looks,
) -> Result<Applied, MigrateError> {
    if let Some(tool) = tool {
        tool.ensure(client)
            .map_err(|e| MigrateError::sql(format!("creating {}", tool.table()), &e))?;
    }
    let steps = apply::migration_steps(m);
    let started = Instant::now();
    let mut observer = MigrateTransaction {
        m,
        needed: conflicts::of_statements(
            &steps
                .iter()
                .map(|s| s.statement.clone())
                .collect::<Vec<_>>(),
        ),
        tool,
        watcher,
        looks,
        started,
    };
    let result = apply::in_transaction(
        client,
        &steps,
        Some(&options.lock),
        apply::Ending::Commit,
        &mut observer,
    );
    match result {
        Ok(a) => Ok(Applied {
            version: m.version,
            file: m.file.clone(),
            elapsed: started.elapsed(),
            attempts: a.attempts,
            waited: a.waited,
        }),
        Err(apply::StepError::GaveUp { gave_up, .. }) => {
            Err(MigrateError::gave_up(m.to_string(), gave_up, watcher))
        }
        Err(apply::StepError::Failed { index, error })
            if index == steps.len() && tool.is_some() =>
        {
            let table = tool.map_or("", |t| t.table());
            Err(MigrateError::recording(m, table, &error))
        }
        Err(apply::StepError::Failed { index, error }) => Err(MigrateError::Failed {
            migration: match steps.get(index) {
                Some(
                    step @ apply::Step {
                        script: Some(_), ..
                    },
                ) => format!("{m} in its callback {}", step.line_phrase()),
                _ => m.to_string(),
            },
            detail: crate::errors::detailed(&error),
            earlier: String::new(),
        }),
    }
}

/// How `migrate` watches a transactional file: every attempt logged and,
/// where the policy waits without queueing, gated on the locks the whole
/// file needs; the history row written before the commit.
struct MigrateTransaction<'a> {
    m: &'a Migration,
    /// The locks its statements need, its tool's callbacks' with them.
    needed: conflicts::LocksNeeded,
    /// Where its row goes; None for a Flyway callback (never recorded).
    tool: Option<ToolHistory>,
    watcher: &'a BlockerWatcher,
    looks: &'a mut Looks,
    started: Instant,
}

impl apply::StepObserver for MigrateTransaction<'_> {
    fn gated(&mut self, _index: usize, _step: &apply::Step) -> bool {
        self.looks.gate(&self.needed).is_some()
    }

    fn holder(&mut self, _index: usize) -> Option<String> {
        self.looks.gate(&self.needed)?.holder()
    }

    fn attempt(&mut self, _index: usize, n: u32, timeout: Duration) {
        self.watcher.reset();
        log::info!(
            "applying {} (attempt {n}, lock_timeout {timeout:?})",
            self.m
        );
    }

    fn finishing(&mut self, client: &mut Client) -> Result<(), postgres::Error> {
        match self.tool {
            Some(tool) => tool.record(client, self.m, self.started.elapsed()),
            None => Ok(()),
        }
    }
}

/// How `migrate` watches each statement of a file outside a transaction:
/// it logs every attempt, and where the policy waits without queueing, it
/// gates each attempt on the locks that statement needs.
struct MigrateSteps<'a> {
    m: &'a Migration,
    watcher: &'a BlockerWatcher,
    looks: &'a mut Looks,
    /// The locks the current statement needs (each commits on its own:
    /// its own locks only) and where it is (`line 3`, or a callback's
    /// file and line), for the log.
    needed: Option<conflicts::LocksNeeded>,
    at: String,
}

impl apply::StepObserver for MigrateSteps<'_> {
    fn gated(&mut self, _index: usize, step: &apply::Step) -> bool {
        let needed = conflicts::of_statements(std::slice::from_ref(&step.statement));
        let gated = self.looks.gate(&needed).is_some();
        (self.needed, self.at) = (Some(needed), step.line_phrase());
        gated
    }

    fn holder(&mut self, _index: usize) -> Option<String> {
        let needed = self.needed.as_ref()?;
        self.looks.gate(needed)?.holder()
    }

    fn attempt(&mut self, _index: usize, n: u32, timeout: Duration) {
        self.watcher.reset();
        log::info!(
            "{} {}: attempt {n}, lock_timeout {timeout:?}",
            self.m,
            self.at
        );
    }
}

/// Applies a file that runs outside a transaction (see
/// [`no_transaction`]): each statement under the lock policy, then its
/// backfills, then its history row — the row, exactly as refinery writes
/// it, only once everything else succeeded.
fn apply_outside_transaction(
    client: &mut Client,
    tool: Option<ToolHistory>,
    m: &Migration,
    options: &Options,
    watcher: &BlockerWatcher,
    looks: &mut Looks,
) -> Result<Applied, MigrateError> {
    let started = Instant::now();
    let steps = no_transaction::plan_steps(m).map_err(|e| MigrateError::NotRerunnable {
        file: m.file.clone(),
        line: e.line,
        statement: e.statement,
        why: e.why,
    })?;
    let mut observer = MigrateSteps {
        m,
        watcher,
        looks,
        needed: None,
        at: String::new(),
    };
    let applied = apply::outside_transaction(client, &steps, Some(&options.lock), &mut observer)
        .map_err(|e| {
            let step = &steps[e.index()];
            let stmt = &step.statement;
            match e {
                apply::StepError::GaveUp { gave_up, .. } => {
                    MigrateError::gave_up(format!("{m} {}", step.line_phrase()), gave_up, watcher)
                }
                apply::StepError::Failed { error, .. } => MigrateError::StatementFailed {
                    migration: match &step.script {
                        Some(file) => format!("{m} in its callback {file}"),
                        None => m.to_string(),
                    },
                    line: stmt.line,
                    statement: stmt.excerpt(80),
                    detail: crate::errors::detailed(&error),
                },
            }
        })?;
    let (attempts_total, waited) = (applied.attempts, applied.waited);
    let has_backfills = m.batched_updates().next().is_some();
    if has_backfills {
        backfill::ensure_progress_table(client)
            .map_err(|e| MigrateError::sql("creating the backfill progress table", &e))?;
    }
    for (i, b) in m.batched_updates().enumerate() {
        let done = backfill::run(
            client,
            m,
            i,
            b,
            &options.backfill,
            &options.lock,
            options.progress.as_ref(),
        );
        match done {
            Ok(_) => {}
            Err(BackfillError::Refused(why)) => {
                return Err(MigrateError::BackfillRefused {
                    migration: m.to_string(),
                    table: b.table.to_string(),
                    why,
                })
            }
            Err(BackfillError::Incomplete { remaining }) => {
                return Err(MigrateError::BackfillIncomplete {
                    migration: m.to_string(),
                    table: b.table.to_string(),
                    remaining,
                    predicate: b.predicate.clone(),
                })
            }
            Err(BackfillError::LockTimeout {
                attempts, elapsed, ..
            }) => {
                return Err(MigrateError::LockTimeout {
                    migration: format!("{m} (batched update of {})", b.table),
                    attempts,
                    elapsed,
                    max_timeout: options.lock.max_timeout,
                    waited: String::new(),
                    blocker: watcher
                        .blocker()
                        .unwrap_or_else(|| "a backend that could not be identified".into()),
                })
            }
            Err(BackfillError::Sql { context, error }) => {
                // Batches done so far stay committed with their progress:
                // the rerun resumes after them.
                return Err(MigrateError::StatementFailed {
                    migration: m.to_string(),
                    line: b.line,
                    statement: format!("-- rollsafe:batched-update {} …", b.table),
                    detail: format!("{context}: {}", crate::errors::detailed(&error)),
                });
            }
        }
    }
    if let Some(tool) = tool {
        let recorded = record_history(client, tool, m, started.elapsed(), has_backfills);
        recorded.map_err(|e| MigrateError::recording(m, tool.table(), &e))?;
    }
    Ok(Applied {
        version: m.version,
        file: m.file.clone(),
        elapsed: started.elapsed(),
        attempts: attempts_total.max(1),
        waited,
    })
}

/// Records `applied` in the history of `layout`'s tool as `migrate` would
/// have (creating the table if needed), for a database whose schema was
/// brought to them another way: verify's rehearsal base, so that `migrate`
/// on it applies only what comes after. Flyway callbacks among them are
/// not recorded (their tool records none).
pub fn record_applied<'a>(
    client: &mut Client,
    layout: crate::catalog::Layout,
    applied: impl IntoIterator<Item = &'a Migration>,
) -> Result<(), postgres::Error> {
    let tool = ToolHistory::written_by_migrate(layout);
    for m in applied.into_iter().filter(|m| m.callback.is_none()) {
        record_history(client, tool, m, Duration::ZERO, false)?;
    }
    Ok(())
}

/// Writes `m`'s history row as the tool does (creating the table if
/// needed; refinery's: version, name, RFC 3339 UTC time, decimal
/// checksum), and marks its backfills finished, in one transaction.
fn record_history(
    client: &mut Client,
    tool: ToolHistory,
    m: &Migration,
    elapsed: Duration,
    has_backfills: bool,
) -> Result<(), postgres::Error> {
    tool.ensure(client)?;
    let mut tx = client.transaction()?;
    tool.record(&mut tx, m, elapsed)?;
    if has_backfills {
        backfill::mark_finished(&mut tx, m.version)?;
    }
    tx.commit()
}

/// A second connection that keeps noting who blocks the migrator's backend,
/// so that a lock timeout can name the blocker (once the wait has timed out,
/// `pg_blocking_pids` no longer knows).
struct BlockerWatcher {
    seen: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BlockerWatcher {
    fn start(url: &str, migrator_pid: i32, lock_timeout: Duration) -> BlockerWatcher {
        let seen = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let poll = (lock_timeout / 10).clamp(Duration::from_millis(10), Duration::from_millis(250));
        let thread = match db::connect(url) {
            Ok(mut c) => {
                let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
                Some(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(b) = describe_blockers(&mut c, migrator_pid) {
                            *seen.lock().unwrap() = Some(b);
                        }
                        std::thread::sleep(poll);
                    }
                }))
            }
            Err(e) => {
                log::warn!("cannot watch for blocking backends ({e}); a lock timeout will not name its blocker");
                None
            }
        };
        BlockerWatcher { seen, stop, thread }
    }

    fn reset(&self) {
        *self.seen.lock().unwrap() = None;
    }

    fn blocker(&self) -> Option<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for BlockerWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// "pid 123 (user app, application `report`, idle in transaction,
/// transaction open for 12.3s)" for every backend blocking `pid`; None
/// when nothing blocks it. Never its query: another session's SQL text may
/// carry data.
fn describe_blockers(client: &mut Client, pid: i32) -> Option<String> {
    let rows = client
        .query(
            "SELECT a.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, ''), \
                    coalesce(a.state, ''), \
                    extract(epoch FROM clock_timestamp() - a.xact_start)::float8 \
               FROM pg_stat_activity a \
              WHERE a.pid = ANY (pg_blocking_pids($1)) ORDER BY a.xact_start",
            &[&pid],
        )
        .ok()?;
    if rows.is_empty() {
        return None;
    }
    Some(
        rows.iter()
            .map(|r| {
                let age = match r.get::<_, Option<f64>>(4) {
                    Some(s) => format!("transaction open for {s:.1}s"),
                    None => "transaction age not visible to this role".into(),
                };
                format!(
                    "pid {} (user {}, application `{}`, {}, {age})",
                    r.get::<_, i32>(0),
                    r.get::<_, String>(1),
                    r.get::<_, String>(2),
                    r.get::<_, String>(3),
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(version: i32, name: &str, checksum: u64) -> HistoryRow {
        HistoryRow {
            version,
            name: name.into(),
            applied_on: "2026-01-01T00:00:00Z".into(),
            checksum: checksum.to_string(),
        }
    }

    /// A Flyway folder's callbacks: never in the status (not pending, not
    /// missing, not the latest), run by every migrate that reaches them,
    /// `afterMigrate` even with nothing pending, `afterMigrateApplied`
    /// only when something is applied.
    #[test]
    fn flyway_callbacks_are_run_never_pending() {
        use crate::catalog::{layouts::Step, Layout, Source};
        let step = |label: &str, callback: Option<&str>| Step {
            key: label.trim_start_matches('V').into(),
            label: label.into(),
            name: label.into(),
            file: format!("{label}.sql"),
            sql: "SELECT 1;\n".into(),
            callback: callback.map(str::to_string),
            ..Step::default()
        };
        let c = Catalog::from_steps(
            Source::Embedded,
            Layout::Flyway,
            vec![
                step("beforeMigrate", Some("beforeMigrate")),
                step("V1", None),
                step("V2", None),
                step("V3", None),
                step("afterMigrateApplied", Some("afterMigrateApplied")),
                step("afterMigrate__grants", Some("afterMigrate")),
            ],
        )
        .unwrap();
        let applied = |m: &Migration| row(m.version, &m.refinery_history_name(), m.checksum);
        let history: Vec<HistoryRow> = c.migrations()[1..4].iter().map(applied).collect();
        let st = compare(&c, true, &history);
        let labels: Vec<(&str, State)> = st
            .versions
            .iter()
            .map(|v| (v.label.as_str(), v.state))
            .collect();
        assert_eq!(
            labels,
            [
                ("V1", State::Applied),
                ("V2", State::Applied),
                ("V3", State::Applied)
            ]
        );
        assert_eq!((st.current, st.latest), (Some(4), 4));
        let run = |st: &Status, target: i32| {
            let plan = plan_from(st, &c, target).unwrap();
            plan.run_order()
                .iter()
                .map(|m| m.label.clone())
                .collect::<Vec<_>>()
        };
        // Nothing pending: Flyway still runs beforeMigrate and afterMigrate.
        assert_eq!(
            run(&st, c.latest()),
            ["beforeMigrate", "afterMigrate__grants"]
        );
        let st = compare(&c, true, &history[..2]);
        assert_eq!(
            run(&st, 4),
            [
                "beforeMigrate",
                "V3",
                "afterMigrateApplied",
                "afterMigrate__grants"
            ]
        );
        // A target before the last migration stops before the callbacks
        // after it.
        let st = compare(&c, false, &[]);
        assert_eq!(run(&st, 2), ["beforeMigrate", "V1"]);
    }

    #[test]
    fn the_lock_key_is_rollsafe_spelled_in_bytes() {
        assert_eq!(ADVISORY_LOCK_KEY.to_be_bytes(), *b"rollsafe");
    }

    #[test]
    fn compare_classifies_every_state() {
        let c = Catalog::embedded().unwrap();
        let v1 = c.get(1).unwrap();
        let v2 = c.get(2).unwrap();
        let fresh = compare(&c, false, &[]);
        assert!(fresh.versions.iter().all(|v| v.state == State::Pending));
        assert_eq!(fresh.current, None);

        let history = [
            row(1, &v1.name, v1.checksum),
            row(2, &v2.name, v2.checksum + 1),
            row(7, "from_the_future", 42),
        ];
        let s = compare(&c, true, &history);
        let states: Vec<(i32, State)> = s.versions.iter().map(|v| (v.version, v.state)).collect();
        assert_eq!(
            states,
            [
                (1, State::Applied),
                (2, State::Divergent),
                (3, State::OutOfOrder),
                (7, State::UnknownNewer)
            ]
        );
        let msg = s.versions[1].drift_message().unwrap();
        assert!(
            msg.contains("V2__attached_functions.sql") && msg.contains("never edited"),
            "{msg}"
        );

        let s = compare(&c, true, &[row(1, &v1.name, v1.checksum), row(3, "x", 1)]);
        // V2 never applied although V3 is; V3 differs.
        assert_eq!(s.versions[1].state, State::OutOfOrder);
        assert_eq!(s.versions[2].state, State::Divergent);
    }

    #[test]
    fn a_name_refinery_rewrites_is_not_drift() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("20220421174016_larger-commands.sql"),
            "CREATE TABLE commands (id int);",
        )
        .unwrap();
        let c = Catalog::from_dir(dir.path()).unwrap();
        let m = &c.migrations()[0];
        // refinery records the name it was given: `larger_commands`.
        let s = compare(&c, true, &[row(1, "larger_commands", m.checksum)]);
        assert_eq!(s.versions[0].state, State::Applied);
        let s = compare(&c, true, &[row(1, "larger_commands", m.checksum + 1)]);
        assert_eq!(s.versions[0].state, State::Divergent);
    }
}

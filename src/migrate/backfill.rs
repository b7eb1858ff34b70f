//! Batched backfills: `-- rollsafe:batched-update <table> SET … WHERE …`,
//! run by `migrate` after the file's statements, in primary-key batches.
//!
//! An `UPDATE` of a whole table in one transaction holds its row locks and
//! any lock the migration took until it commits, and writes the table's WAL
//! in one go (design.md: 16.9 s and 508 MB for 1M rows). The anchors
//! (pgroll, reshape, GitLab's batched background migrations) walk the
//! primary key instead: batches of ~1000 keys, each its own short
//! transaction, a pause in between, progress kept in the database. So does
//! this module:
//!
//! - a batch is `UPDATE <table> SET … WHERE <pk> IN (next N keys after the
//!   last one done) AND (<predicate>)`, under the stepped lock policy (a
//!   row locked by the app makes the batch time out and retry, never queue
//!   the app behind it);
//! - the batch and its progress row in [`PROGRESS_TABLE`] commit together,
//!   so a killed run loses at most the batch in flight and the next run
//!   resumes after the last committed key;
//! - at the end the predicate is counted: rows the app wrote behind the
//!   cursor are picked up by one more pass; rows that still match after it
//!   (an expression that leaves them matching) fail the run, and the
//!   migration is not recorded as applied.
//!
//! A single-column primary key is required (keyset batches need one total
//! order); anything else is refused with what to do.
//!
//! Not here: when it runs and the history row (`migrate`), printing
//! progress (the caller's [`ProgressSink`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::Client;
use serde::Serialize;

use crate::catalog::{BatchedUpdate, Migration, TableName};
use crate::lock_policy::{is_lock_timeout, LockPolicy};
use crate::pg::quote_ident;

/// Where backfill progress lives, in the migrated database (skipped by
/// schema snapshots, like the history table).
pub const PROGRESS_TABLE: &str = "rollsafe_backfill_progress";

const PROGRESS_DDL: &str = "CREATE TABLE IF NOT EXISTS rollsafe_backfill_progress (
    version int4 NOT NULL,
    backfill int4 NOT NULL,
    table_name text NOT NULL,
    predicate text NOT NULL,
    last_key text,
    rows_done int8 NOT NULL DEFAULT 0,
    batches int8 NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (version, backfill))";

/// Batch size and pause (the anchors: 1000 keys per batch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackfillOptions {
    /// Keys per batch (each batch updates at most this many rows).
    pub batch_size: u32,
    /// Sleep between batches, so the app's own writes get the I/O and the
    /// autovacuum keeps up.
    pub pause: Duration,
}

impl Default for BackfillOptions {
    fn default() -> Self {
        BackfillOptions {
            batch_size: 1000,
            pause: Duration::from_millis(50),
        }
    }
}

/// A progress report, after every batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BackfillProgress {
    pub version: i32,
    pub table: String,
    /// Rows settled so far (updated and no longer matching the
    /// predicate), earlier (killed) runs included.
    pub rows_done: u64,
    /// Rows updated by earlier runs, when this one resumed.
    pub resumed_from: u64,
    /// `rows_done` plus the rows the predicate still matched when this run
    /// started: the denominator of a progress bar (an estimate: the app
    /// may add rows).
    pub rows_total: u64,
    pub batches: u64,
    /// This run's time in the backfill so far.
    pub elapsed: Duration,
    pub finished: bool,
}

/// The callback `migrate` reports backfill progress through (the library
/// never prints).
#[derive(Clone)]
pub struct ProgressSink(pub Arc<dyn Fn(&BackfillProgress) + Send + Sync>);

impl fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProgressSink(..)")
    }
}

/// A backfill's row in [`PROGRESS_TABLE`], for `status` and `check`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackfillState {
    pub version: i32,
    pub table: String,
    pub predicate: String,
    pub last_key: Option<String>,
    pub rows_done: i64,
    pub batches: i64,
    /// RFC 3339.
    pub updated_at: String,
    pub finished: bool,
}

/// Every backfill with progress in the database, oldest first; empty when
/// no backfill ever ran (the table does not exist). Read-only.
pub fn read_states(client: &mut Client) -> Result<Vec<BackfillState>, postgres::Error> {
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&PROGRESS_TABLE])?
        .get(0);
    if !exists {
        return Ok(Vec::new());
    }
    Ok(client
        .query(
            "SELECT version, table_name, predicate, last_key, rows_done, batches, \
                    to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
                    finished_at IS NOT NULL \
               FROM rollsafe_backfill_progress ORDER BY version, backfill",
            &[],
        )?
        .iter()
        .map(|r| BackfillState {
            version: r.get(0),
            table: r.get(1),
            predicate: r.get(2),
            last_key: r.get(3),
            rows_done: r.get(4),
            batches: r.get(5),
            updated_at: r.get(6),
            finished: r.get(7),
        })
        .collect())
}

/// Why a backfill stopped.
#[derive(Debug)]
pub enum BackfillError {
    /// The table cannot be batched (no single-column primary key, missing).
    Refused(String),
    /// Rows still match the predicate after the final pass.
    Incomplete { remaining: i64 },
    /// A batch gave up on its locks (the policy's window closed).
    LockTimeout {
        attempts: u32,
        elapsed: Duration,
        /// The last attempt's error (none if the window closed first).
        last: Option<postgres::Error>,
    },
    Sql {
        context: String,
        error: postgres::Error,
    },
}

impl std::fmt::Display for BackfillError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackfillError::Refused(why) => f.write_str(why),
            BackfillError::Incomplete { remaining } => {
                write!(
                    f,
                    "{remaining} rows still match the predicate after the final pass"
                )
            }
            BackfillError::LockTimeout {
                attempts,
                elapsed,
                last,
            } => write!(
                f,
                "a batch gave up on its locks after {attempts} attempts over {elapsed:.1?} ({})",
                last.as_ref()
                    .map_or_else(|| "no attempt made".into(), |e| crate::errors::one_line(e))
            ),
            BackfillError::Sql { context, error } => {
                write!(f, "{context}: {}", crate::errors::one_line(error))
            }
        }
    }
}

fn sql_err(context: impl Into<String>) -> impl FnOnce(postgres::Error) -> BackfillError {
    let context = context.into();
    move |error| BackfillError::Sql { context, error }
}

/// Creates the progress table if needed (called under the migrator lock,
/// before any batch).
pub fn ensure_progress_table(client: &mut Client) -> Result<(), postgres::Error> {
    client.batch_execute(PROGRESS_DDL)
}

/// The single-column primary key of `table`: (quoted column, its type).
fn primary_key(client: &mut Client, table: &TableName) -> Result<(String, String), BackfillError> {
    let oid: Option<postgres::types::Oid> = client
        .query_one("SELECT to_regclass($1)::oid", &[&table.sql()])
        .map_err(sql_err(format!("looking up table {table}")))?
        .get(0);
    let Some(oid) = oid else {
        return Err(BackfillError::Refused(format!(
            "table {table} does not exist after the file's statements ran; name an existing table"
        )));
    };
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
               FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid \
              WHERE i.indrelid = $1 AND i.indisprimary AND a.attnum = ANY (i.indkey[0:i.indnkeyatts - 1])",
            &[&oid],
        )
        .map_err(sql_err(format!("reading the primary key of {table}")))?;
    match rows.as_slice() {
        [r] => Ok((quote_ident(r.get::<_, &str>(0)), r.get(1))),
        [] => Err(BackfillError::Refused(format!(
            "table {table} has no primary key; a batched update walks a single-column primary key: add one (or backfill in a transactional migration if the table is small)"
        ))),
        many => Err(BackfillError::Refused(format!(
            "table {table} has a {}-column primary key; a batched update walks a single-column primary key: add a single-column unique key and make it the primary key, or backfill in a transactional migration if the table is small",
            many.len()
        ))),
    }
}

/// Runs backfill number `index` (0-based, file order) of `m` to the end,
/// resuming from its progress row.
pub fn run(
    client: &mut Client,
    m: &Migration,
    index: usize,
    b: &BatchedUpdate,
    options: &BackfillOptions,
    lock: &LockPolicy,
    progress: Option<&ProgressSink>,
) -> Result<BackfillProgress, BackfillError> {
    let started = Instant::now();
    let (pk, pk_type) = primary_key(client, &b.table)?;
    let table_name = b.table.to_string();
    let index = index as i32;
    let (mut last_key, resumed_from, mut batches) =
        start_progress(client, m.version, index, &table_name, &b.predicate)?;
    let count_sql = format!(
        "SELECT count(*) FROM {} WHERE {}",
        b.table.sql(),
        b.predicate
    );
    let remaining = |client: &mut Client| -> Result<i64, BackfillError> {
        Ok(client
            .query_one(&count_sql, &[])
            .map_err(sql_err("counting the rows the predicate still matches"))?
            .get(0))
    };
    let mut report = BackfillProgress {
        version: m.version,
        table: table_name,
        rows_done: resumed_from,
        resumed_from,
        rows_total: resumed_from + remaining(client)? as u64,
        batches,
        elapsed: started.elapsed(),
        finished: false,
    };
    let first_sql = batch_sql(b, &pk, &pk_type, options, false);
    let next_sql = batch_sql(b, &pk, &pk_type, options, true);
    // Pass 1 resumes where the last run stopped; pass 2 (from the start)
    // picks up rows the app wrote behind the cursor while pass 1 ran.
    let mut second_pass = false;
    loop {
        loop {
            let attempt = |_: u32,
                           timeout: Duration|
             -> Result<(Option<String>, i64), postgres::Error> {
                let mut tx = client.transaction()?;
                tx.batch_execute(&format!(
                    "SET LOCAL lock_timeout = '{}ms'",
                    timeout.as_millis().max(1)
                ))?;
                let row = match &last_key {
                    None => tx.query_one(&first_sql, &[])?,
                    Some(k) => tx.query_one(&next_sql, &[k])?,
                };
                let (key, updated): (Option<String>, i64) = (row.get(0), row.get(1));
                if key.is_some() {
                    tx.execute(
                        "UPDATE rollsafe_backfill_progress SET last_key = $3, rows_done = rows_done + $4, \
                                batches = batches + 1, updated_at = now() \
                          WHERE version = $1 AND backfill = $2",
                        &[&m.version, &index, &key, &updated],
                    )?;
                }
                tx.commit()?;
                Ok((key, updated))
            };
            let (key, updated) = match lock.run(attempt, is_lock_timeout) {
                Ok((v, _)) => v,
                Err(Ok(error)) => {
                    return Err(BackfillError::Sql {
                        context: format!("updating a batch of {} after key {last_key:?}", b.table),
                        error,
                    })
                }
                Err(Err(gave_up)) => {
                    return Err(BackfillError::LockTimeout {
                        attempts: gave_up.attempts.count,
                        elapsed: gave_up.attempts.elapsed,
                        last: gave_up.last,
                    })
                }
            };
            let Some(key) = key else { break };
            last_key = Some(key);
            batches += 1;
            report.rows_done += updated as u64;
            report.batches = batches;
            report.elapsed = started.elapsed();
            if let Some(p) = progress {
                (p.0)(&report);
            }
            if !options.pause.is_zero() {
                std::thread::sleep(options.pause);
            }
        }
        let left = remaining(client)?;
        if left == 0 {
            report.finished = true;
            report.elapsed = started.elapsed();
            if let Some(p) = progress {
                (p.0)(&report);
            }
            return Ok(report);
        }
        if second_pass {
            return Err(BackfillError::Incomplete { remaining: left });
        }
        second_pass = true;
        last_key = None;
        client
            .execute(
                "UPDATE rollsafe_backfill_progress SET last_key = NULL, updated_at = now() \
                  WHERE version = $1 AND backfill = $2",
                &[&m.version, &index],
            )
            .map_err(sql_err("restarting the backfill's key walk"))?;
    }
}

/// The backfill's row in `rollsafe_backfill_progress`, made on its first
/// run: the last key done, the rows done and the batches so far.
fn start_progress(
    client: &mut Client,
    version: i32,
    index: i32,
    table_name: &str,
    predicate: &str,
) -> Result<(Option<String>, u64, u64), BackfillError> {
    client
        .execute(
            "INSERT INTO rollsafe_backfill_progress (version, backfill, table_name, predicate) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (version, backfill) DO NOTHING",
            &[&version, &index, &table_name, &predicate],
        )
        .map_err(sql_err("recording the backfill's start"))?;
    let row = client
        .query_one(
            "SELECT last_key, rows_done, batches FROM rollsafe_backfill_progress \
              WHERE version = $1 AND backfill = $2",
            &[&version, &index],
        )
        .map_err(sql_err("reading the backfill's progress"))?;
    Ok((
        row.get(0),
        row.get::<_, i64>(1) as u64,
        row.get::<_, i64>(2) as u64,
    ))
}

/// One batch: the next `batch_size` keys (after `$1` when `bounded`),
/// updated where the predicate still holds; returns the batch's last key
/// and the rows it left still matching.
fn batch_sql(
    b: &BatchedUpdate,
    pk: &str,
    pk_type: &str,
    options: &BackfillOptions,
    bounded: bool,
) -> String {
    format!(
        "WITH batch AS (SELECT {pk} AS k FROM {t} {bound} ORDER BY {pk} LIMIT {n}), \
              done AS (UPDATE {t} SET {set} WHERE {pk} IN (SELECT k FROM batch) AND ({pred}) RETURNING ({pred}) AS still) \
         SELECT (SELECT k FROM batch ORDER BY k DESC LIMIT 1)::text, \
                (SELECT count(*) FROM done WHERE still IS NOT TRUE)",
        t = b.table.sql(),
        set = b.set,
        pred = b.predicate,
        n = options.batch_size.max(1),
        bound = if bounded {
            format!("WHERE {pk} > $1::text::{pk_type}")
        } else {
            String::new()
        },
    )
}

/// Marks every backfill of `version` finished (in the transaction that
/// writes its history row).
pub fn mark_finished(
    tx: &mut postgres::Transaction<'_>,
    version: i32,
) -> Result<(), postgres::Error> {
    tx.execute(
        "UPDATE rollsafe_backfill_progress SET finished_at = now(), updated_at = now() \
          WHERE version = $1 AND finished_at IS NULL",
        &[&version],
    )
    .map(|_| ())
}

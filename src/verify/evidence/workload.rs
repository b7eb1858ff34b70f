//! What the live apps went through while a migration ran: the workload's
//! stalls and errors during the measured apply, and the long-transaction
//! probe (the real lock-retry loop behind an open app transaction).
//! Measured by [`crate::verify::measure::rehearsal`]; judged by `locks`.

use std::time::{Duration, Instant};

/// What the server says when a statement prepared before a migration
/// would now return other columns (SQLSTATE 0A000).
pub const STALE_PLAN: &str = "cached plan must not change result type";

/// What a concurrent app workload went through.
#[derive(Debug, Clone, Default)]
pub struct WorkloadStats {
    pub statements: u64,
    /// The longest lock wait of an app statement on the migration (see
    /// [`crate::sessions::sampler`]): what the migration made an app wait, not how long
    /// its statements took on a busy machine.
    pub max_stall: Duration,
    /// "app.statement (read|write)" of that wait.
    pub max_stall_statement: String,
    /// Lock waits on the migration seen, and the sampler's samples.
    pub lock_waits: u64,
    pub wait_samples: u64,
    /// (app.statement, message) of failed executions, first few.
    pub errors: Vec<(String, String)>,
    pub error_count: u64,
    /// "app.statement (read|write)" of the statements the workload prepared
    /// before the migration whose result columns it changed (a `SELECT *`
    /// after `ADD COLUMN`): the server refused the old plan once ("cached
    /// plan must not change result type") and the statement was prepared
    /// again, as drivers that cache prepared statements do.
    pub re_prepared: Vec<String>,
    /// (app.statement (read|write), message) of the statements left out
    /// because they already fail on the schema before the migration: their
    /// failures while it applies would not be its doing (compat judges
    /// them).
    pub left_out: Vec<(String, String)>,
    /// Whether the apps' sessions count in the cumulative table statistics
    /// (they are switched off so that a statement outside a transaction is
    /// measured alone there; this says the switch failed).
    pub counted_in_table_stats: bool,
    /// Each lock wait on the migration seen (the first
    /// [`crate::sessions::sampler::MAX_WAITS_KEPT`]), for the report's lock
    /// timeline.
    pub waits: Vec<AppWait>,
}

/// One app statement's lock wait on the migration.
#[derive(Debug, Clone, PartialEq)]
pub struct AppWait {
    /// "app.statement (read|write)".
    pub statement: String,
    /// The table it waited for and the mode it asked for.
    pub table: String,
    pub mode: String,
    pub began: Instant,
    pub waited: Duration,
}

/// How the migration fared behind the long transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeEnd {
    /// It got its locks on the first attempt while the transaction was
    /// open: its locks do not conflict with an app transaction.
    NoConflict,
    /// It retried while the transaction was open and completed after it
    /// ended (`after` = from the end of the transaction to completion).
    CompletedAfterRelease { after: Duration },
    /// It waited on one lock far longer than the policy's cap (its SQL
    /// changes `lock_timeout`); rollsafe cancelled it.
    IgnoredLockTimeout,
    /// The policy's window closed before it could complete.
    GaveUp,
    /// It failed otherwise (the apply check reports that).
    Failed(String),
    /// It was still running long after the transaction ended, waiting on
    /// nothing rollsafe could see; rollsafe cancelled it.
    TimedOut,
}

/// The long-transaction probe: an app transaction holds the tables; the
/// migration runs the real retry loop ([`crate::lock_policy::LockPolicy::run`]) while the live
/// apps' workload runs; the transaction ends once an attempt timed out.
#[derive(Debug, Clone)]
pub struct LongTransactionProbe {
    /// Tables the long transaction held (ROW EXCLUSIVE, like an open write
    /// transaction).
    pub held_tables: Vec<String>,
    /// How long it held them: until the migration's first attempt timed
    /// out, or as long as asked.
    pub hold: Duration,
    /// The first attempt's `lock_timeout`: the policy's cap with apps
    /// beside it (where they queue longest), its first timeout without.
    pub first_timeout: Duration,
    pub end: ProbeEnd,
    pub attempts: u32,
    /// The longest the migration's backend waited on one lock in one go.
    pub longest_lock_wait: Duration,
    /// What the apps' statements (and a plain reader) went through.
    pub app: WorkloadStats,
}

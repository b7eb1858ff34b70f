//! The measuring instruments of a rehearsal: applying a migration inside a
//! transaction one statement at a time while reading what each statement
//! did (locks, rows and blocks touched, time), a concurrent app workload
//! that records its stalls, and the long-transaction probe that runs the
//! real lock-retry loop ([`LockPolicy`]) behind an open app transaction.
//!
//! Measurements are taken *inside* the migration's transaction, after each
//! statement and before it commits: `pg_locks` shows the locks it holds so
//! far (a transaction keeps every lock until it ends), the per-transaction
//! statistics functions (`pg_stat_get_xact_*`) the tuples read, fetched and
//! written and the heap and index blocks touched per table, and
//! `pg_class.relfilenode` at the end whether a table got a new file (a
//! rewrite). The migration runs on a fresh connection so that those
//! statistics hold nothing else (PostgreSQL 15 keeps a backend's unflushed
//! counts from earlier transactions in them).
//!
//! Statements come from the real grammar ([`crate::sql::split`]); where it
//! cannot split a file exactly, the file is measured as one statement.
//!
//! Checks turn these numbers into findings; nothing here judges.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Client;

use super::lock_modes;
use super::replay;
use super::roles::Sessions;
use super::sampler;
use crate::app::AppVersion;

mod outside_transaction;
use crate::db;
use crate::lock_policy::{is_lock_timeout, LockPolicy};
use crate::tables::UserTable;

/// Work one statement (or a whole migration) did on one table: counts from
/// the per-transaction statistics, indexes of the table included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    pub seq_scans: i64,
    /// Tuples read by sequential scans (a full pass over the table).
    pub tuples_read: i64,
    /// Tuples fetched through indexes.
    pub tuples_fetched: i64,
    pub inserted: i64,
    pub updated: i64,
    pub deleted: i64,
    /// Heap blocks requested (from shared buffers or disk).
    pub heap_blocks: i64,
    /// Index blocks requested.
    pub index_blocks: i64,
}

impl Work {
    fn plus(self, o: Work) -> Work {
        Work {
            seq_scans: self.seq_scans + o.seq_scans,
            tuples_read: self.tuples_read + o.tuples_read,
            tuples_fetched: self.tuples_fetched + o.tuples_fetched,
            inserted: self.inserted + o.inserted,
            updated: self.updated + o.updated,
            deleted: self.deleted + o.deleted,
            heap_blocks: self.heap_blocks + o.heap_blocks,
            index_blocks: self.index_blocks + o.index_blocks,
        }
    }

    fn minus(self, o: Work) -> Work {
        Work {
            seq_scans: self.seq_scans - o.seq_scans,
            tuples_read: self.tuples_read - o.tuples_read,
            tuples_fetched: self.tuples_fetched - o.tuples_fetched,
            inserted: self.inserted - o.inserted,
            updated: self.updated - o.updated,
            deleted: self.deleted - o.deleted,
            heap_blocks: self.heap_blocks - o.heap_blocks,
            index_blocks: self.index_blocks - o.index_blocks,
        }
    }

    /// Rows changed one by one.
    pub fn rows_written(&self) -> i64 {
        self.updated + self.deleted
    }

    /// Whether this work grows with the table (`pages` = its heap pages
    /// before the migration): a sequential pass over its rows, every heap
    /// page read, or rows updated or deleted. Constant work — a catalog
    /// change, a lookup by key — is none of these.
    pub fn grows_with_table(&self, pages: i64) -> bool {
        self.tuples_read > 0 || self.rows_written() > 0 || (pages > 0 && self.heap_blocks >= pages)
    }
}

/// What a migration did to one table that existed before it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableWork {
    pub table: String,
    pub rows_before: i64,
    /// Heap pages before (`relpages`, after the seed's ANALYZE).
    pub pages_before: i64,
    /// The table got a new file: every row was rewritten.
    pub rewritten: bool,
    /// The table no longer exists afterwards.
    pub dropped: bool,
    /// Everything the migration did to it.
    pub work: Work,
    /// Relation lock modes held on the table at the end of the migration.
    pub locks: Vec<String>,
    /// Indexes the migration built on this (existing) table.
    pub new_indexes: Vec<String>,
    /// The partitioned table it is a partition of: its rows are counted
    /// there too, and a lock on that table is a lock on this one.
    pub partition_of: Option<String>,
}

impl TableWork {
    /// The strongest lock held, for messages.
    pub fn strongest_lock(&self) -> Option<&str> {
        lock_modes::strongest(self.locks.iter().map(String::as_str))
    }

    /// Whether the migration did work on it that grows with its size.
    pub fn grows(&self) -> bool {
        self.rows_before > 0
            && (self.rewritten
                || !self.new_indexes.is_empty()
                || self.work.grows_with_table(self.pages_before))
    }
}

/// What the lock sampler saw while a statement outside a transaction ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Samples of its backend's locks taken while it ran.
    pub samples: u32,
    /// Per existing table, the longest a lock on it was seen held (from
    /// the first sample that saw it to the last: a lower bound).
    pub held: BTreeMap<String, Duration>,
    /// No sample saw a lock, but the statement measurably rewrote a table
    /// or built an index: its locks are the manual's for this kind of
    /// statement ([`lock_modes::documented`]), held at most as long as it
    /// ran.
    pub documented: Option<&'static str>,
}

/// One statement of a measured apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatementRun {
    /// 1-based line and column of its first character in the file.
    pub line: usize,
    pub column: usize,
    pub excerpt: String,
    pub duration: Duration,
    /// When it started (the report's lock timeline lines it up with the
    /// apps' waits).
    pub started: Option<Instant>,
    /// Relation locks held on existing tables once it finished (every lock
    /// taken so far: a transaction keeps them until it ends), by table.
    pub locks_after: BTreeMap<String, Vec<String>>,
    /// Its own work, per existing table.
    pub work: BTreeMap<String, Work>,
    /// Existing tables it gave a new file (rewrote every row of).
    pub rewrote: Vec<String>,
    /// (table, index) of indexes it built (or rebuilt) on existing tables.
    pub built_indexes: Vec<(String, String)>,
    /// Outside a transaction: what sampling saw while it ran
    /// (`locks_after` then holds the locks seen *while* it ran; none is
    /// left after it commits). None inside a transaction, where the
    /// locks are read exactly after it.
    pub observed: Option<Observed>,
}

impl StatementRun {
    /// Why its locks are unknown: it ran outside a transaction and no
    /// sample saw it hold a lock on an existing table (too fast to be
    /// seen, or it took none: sampling cannot tell which).
    pub fn locks_unobserved(&self) -> Option<String> {
        let o = self.observed.as_ref()?;
        self.locks_after.is_empty().then(|| {
            format!(
                "no lock on an existing table seen while it ran ({} samples over {:.1} ms)",
                o.samples,
                self.duration.as_secs_f64() * 1000.0
            )
        })
    }

    /// "ACCESS EXCLUSIVE on t held ≥12.3 ms while it ran (5 samples)"
    /// for a statement outside a transaction whose locks were seen.
    pub fn observed_phrase(&self) -> Option<String> {
        let o = self.observed.as_ref()?;
        if self.locks_after.is_empty() {
            return None;
        }
        let held: Vec<String> = self
            .locks_after
            .iter()
            .map(|(t, modes)| {
                let mode = lock_modes::strongest(modes.iter().map(String::as_str)).unwrap_or("");
                format!(
                    "{} on {t} held {:.1} ms while it ran",
                    lock_modes::sql_name(mode),
                    o.held.get(t).copied().unwrap_or_default().as_secs_f64() * 1000.0
                )
            })
            .collect();
        if let Some(kind) = o.documented {
            let modes: Vec<String> = self
                .locks_after
                .iter()
                .map(|(t, modes)| {
                    let mode =
                        lock_modes::strongest(modes.iter().map(String::as_str)).unwrap_or("");
                    format!("{} on {t}", lock_modes::sql_name(mode))
                })
                .collect();
            return Some(format!(
                "{} held for the {:.1} ms it ran (the lock PostgreSQL documents for {kind}: too brief for the {} samples taken to see it; its rewrite or index build was measured)",
                modes.join(", "),
                self.duration.as_secs_f64() * 1000.0,
                o.samples
            ));
        }
        Some(format!(
            "{} (seen by {} samples over {:.1} ms)",
            held.join(", "),
            o.samples,
            self.duration.as_secs_f64() * 1000.0
        ))
    }

    /// Whether its work on `t` grows with the table's size.
    pub fn grows_on(&self, t: &TableWork) -> bool {
        t.rows_before > 0
            && (self.rewrote.contains(&t.table)
                || self.built_indexes.iter().any(|(x, _)| *x == t.table)
                || self
                    .work
                    .get(&t.table)
                    .is_some_and(|w| w.grows_with_table(t.pages_before)))
    }
}

/// One measured application of a migration.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The server's error when the migration failed (it was rolled back).
    pub error: Option<String>,
    pub sqlstate: Option<String>,
    /// Index into `statements` of the statement that failed.
    pub failed_statement: Option<usize>,
    /// Time spent executing the migration's SQL.
    pub duration: Duration,
    /// From the migration's first statement to its commit: how long the
    /// locks it took were held, at most.
    pub held: Duration,
    /// When its transaction (outside one, its first statement) started:
    /// the origin of the report's lock timeline.
    pub started: Option<Instant>,
    /// WAL written while it ran (server-wide, so an upper bound on a shared
    /// server).
    pub wal_bytes: i64,
    /// Tables that existed before, by name. When a statement failed, only
    /// their sizes before (rows, pages): what the statements before it did
    /// is in `statements`.
    pub tables: BTreeMap<String, TableWork>,
    /// Per statement, in file order (one entry for the whole file when the
    /// grammar could not split it).
    pub statements: Vec<StatementRun>,
    /// Whether `statements` are the file's real statements.
    pub split_exact: bool,
    /// Each statement committed on its own (a no-transaction file): a lock
    /// is held only while its statement runs.
    pub outside_transaction: bool,
    /// Why the statements' work (`StatementRun::work`) was not measured,
    /// when it was not.
    pub work_unmeasured: Option<String>,
    /// The migration's file as a reviewer sees it (set by the caller), for
    /// locations.
    pub file: String,
}

impl Applied {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// The first statement after which `mode` was held on `table`.
    pub fn taken_at(&self, table: &str, mode: &str) -> Option<usize> {
        self.statements.iter().position(|s| {
            s.locks_after
                .get(table)
                .is_some_and(|m| m.iter().any(|x| x == mode))
        })
    }

    /// How long a lock first held after statement `i` stayed held: that
    /// statement and every later one, to the commit.
    pub fn held_from(&self, i: usize) -> Duration {
        if self.outside_transaction {
            // Committed at its end: held while it ran.
            return self
                .statements
                .get(i)
                .map(|s| s.duration)
                .unwrap_or_default();
        }
        let before: Duration = self.statements[..i.min(self.statements.len())]
            .iter()
            .map(|s| s.duration)
            .sum();
        self.held.saturating_sub(before)
    }

    /// Where statement `i` is in the file (the file's first statement when
    /// the grammar could not split it).
    pub fn location(&self, i: usize) -> Option<crate::report::Location> {
        let s = self.statements.get(i)?;
        Some(crate::report::Location {
            file: self.file.clone(),
            line: s.line,
            column: s.column,
            excerpt: s.excerpt.clone(),
        })
    }

    /// The report's per-statement table: this apply (at N rows) beside
    /// `at_zero` (the same statements on an empty database).
    pub fn statement_rows(&self, at_zero: &Applied) -> Vec<crate::report::StatementRow> {
        let mut held: BTreeSet<(String, String)> = BTreeSet::new();
        self.statements
            .iter()
            .enumerate()
            .map(|(i, st)| {
                let mut new_locks = Vec::new();
                if self.outside_transaction {
                    held.clear();
                }
                for (table, modes) in &st.locks_after {
                    for m in modes {
                        if held.insert((table.clone(), m.clone())) {
                            new_locks.push(format!("{} on {table}", lock_modes::sql_name(m)));
                        }
                    }
                }
                let strongest = held
                    .iter()
                    .max_by_key(|(_, m)| lock_modes::MODES.iter().position(|x| x == m));
                crate::report::StatementRow {
                    line: st.line,
                    column: st.column,
                    excerpt: st.excerpt.clone(),
                    new_locks,
                    ms_at_0_rows: at_zero
                        .statements
                        .get(i)
                        .filter(|_| at_zero.statements.len() == self.statements.len())
                        .map(|z| report_ms(z.duration))
                        .unwrap_or(0.0),
                    ms_at_n_rows: report_ms(st.duration),
                    rows_touched: st
                        .work
                        .values()
                        .map(|w| w.tuples_read + w.inserted + w.updated + w.deleted)
                        .sum(),
                    start_ms: self.since_start(st.started),
                    strongest_lock: strongest
                        .map(|(t, m)| format!("{} on {t}", lock_modes::sql_name(m))),
                    blocks_writes: strongest
                        .is_some_and(|(_, m)| lock_modes::conflicts(m, "RowExclusiveLock")),
                }
            })
            .collect()
    }

    /// ms from this apply's start to its commit, as the report has it,
    /// for a migration in one transaction.
    pub fn committed_ms(&self) -> Option<f64> {
        (!self.outside_transaction && self.started.is_some()).then(|| report_ms(self.held))
    }

    /// ms from this apply's start to `at`, as the report has it.
    fn since_start(&self, at: Option<Instant>) -> Option<f64> {
        Some(report_ms(at?.saturating_duration_since(self.started?)))
    }

    /// The report's app waits: the [`crate::report::APP_WAITS_KEPT`]
    /// longest of `workload`'s that began while this apply held its
    /// locks (the batched updates after it are not its statements), each
    /// with the statement it waited behind, in order of start.
    pub fn app_wait_rows(&self, workload: &WorkloadStats) -> Vec<crate::report::AppWaitRow> {
        let (Some(t0), ends) = (self.started, self.started.map(|t| t + self.held)) else {
            return Vec::new();
        };
        let mut waits: Vec<&AppWait> = workload
            .waits
            .iter()
            .filter(|w| ends.is_some_and(|end| w.began <= end))
            .collect();
        waits.sort_by_key(|w| std::cmp::Reverse(w.waited));
        waits.truncate(crate::report::APP_WAITS_KEPT);
        waits.sort_by_key(|w| w.began);
        waits
            .into_iter()
            .map(|w| crate::report::AppWaitRow {
                statement: w.statement.clone(),
                table: w.table.clone(),
                mode: lock_modes::sql_name(&w.mode),
                start_ms: report_ms(w.began.saturating_duration_since(t0)),
                ms: report_ms(w.waited),
                behind_line: self.blocker_of(w).map(|i| self.statements[i].line),
            })
            .collect()
    }

    /// The statement whose lock `w` waited behind: inside a transaction
    /// the first that took a lock on its table conflicting with the mode
    /// it asked for (held to the commit) and had started by the wait's
    /// end; else the statement running when it began (outside a
    /// transaction, or when the migration itself was still queued for
    /// the lock), else the last one started before it.
    fn blocker_of(&self, w: &AppWait) -> Option<usize> {
        let ended = w.began + w.waited;
        let started_by = |s: &StatementRun, at: Instant| s.started.is_some_and(|x| x <= at);
        let took_conflicting = |s: &StatementRun| {
            s.locks_after
                .get(&w.table)
                .is_some_and(|modes| modes.iter().any(|m| lock_modes::conflicts(m, &w.mode)))
        };
        if !self.outside_transaction {
            if let Some(i) = self
                .statements
                .iter()
                .position(|s| took_conflicting(s) && started_by(s, ended))
            {
                return Some(i);
            }
        }
        self.statements
            .iter()
            .rposition(|s| started_by(s, w.began))
            .or_else(|| self.statements.iter().position(|s| started_by(s, ended)))
    }

    /// For a statement outside a transaction: what sampling saw of its
    /// locks while it ran, or why they are unknown.
    pub fn observed_at(&self, i: usize) -> Option<String> {
        let st = self.statements.get(i)?;
        st.observed_phrase().or_else(|| st.locks_unobserved())
    }

    /// The cumulative statistics also counted someone else's work (the
    /// live apps'): every work figure of a statement outside a transaction
    /// is dropped, never judged, and `why` says so. Rewrites and index
    /// builds (files) stay measured.
    pub fn forget_work(&mut self, why: &str) {
        self.work_unmeasured.get_or_insert_with(|| why.to_string());
        for st in &mut self.statements {
            st.work.clear();
        }
        for t in self.tables.values_mut() {
            t.work = Work::default();
        }
    }

    /// "line 3: ALTER TABLE …" of statement `i`, for messages.
    pub fn where_(&self, i: usize) -> String {
        match self.statements.get(i) {
            Some(s) if self.split_exact => format!("line {}: {}", s.line, s.excerpt),
            _ => "the migration".to_string(),
        }
    }
}

/// A duration in ms to 0.1 ms, as the report writes them.
fn report_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// How a measured apply ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Commit,
    /// Roll back after measuring (a dry run).
    Rollback,
}

fn wal_lsn(c: &mut Client) -> Result<String, postgres::Error> {
    Ok(
        c.query_one("SELECT pg_current_wal_insert_lsn()::text", &[])?
            .get(0),
    )
}

/// A table that exists before the migration, as the measurement needs it.
struct Existing {
    name: String,
    oid: u32,
    filenode: u32,
    rows: i64,
    pages: i64,
    indexes: Vec<u32>,
    partition_of: Option<String>,
    /// Schema-qualified, for SQL; None when it cannot be read (a
    /// materialized view not populated yet).
    qualified: Option<String>,
}

/// Per-transaction counters of every existing table (its indexes summed
/// in), read on the migration's own connection.
fn xact_work(c: &mut Client, tables: &[Existing]) -> Result<BTreeMap<u32, Work>, postgres::Error> {
    table_counters(c, tables, "pg_stat_get_xact_")
}

/// The cumulative counters of every existing table (all backends', as
/// flushed), without block counts: autovacuum's reads count there too.
fn cumulative_work(
    c: &mut Client,
    tables: &[Existing],
) -> Result<BTreeMap<u32, Work>, postgres::Error> {
    let mut w = table_counters(c, tables, "pg_stat_get_")?;
    for work in w.values_mut() {
        work.heap_blocks = 0;
        work.index_blocks = 0;
    }
    Ok(w)
}

/// `prefix`: `pg_stat_get_xact_` (this transaction, pending) or
/// `pg_stat_get_` (cumulative).
fn table_counters(
    c: &mut Client,
    tables: &[Existing],
    prefix: &str,
) -> Result<BTreeMap<u32, Work>, postgres::Error> {
    let mut oids: Vec<u32> = Vec::new();
    for t in tables {
        oids.push(t.oid);
        oids.extend(&t.indexes);
    }
    let rows = c.query(
        &format!(
            "SELECT o, {prefix}numscans(o), {prefix}tuples_returned(o),
                    {prefix}tuples_fetched(o), {prefix}tuples_inserted(o),
                    {prefix}tuples_updated(o), {prefix}tuples_deleted(o),
                    {prefix}blocks_fetched(o)
               FROM unnest($1::oid[]) AS o"
        ),
        &[&oids],
    )?;
    let by_oid: BTreeMap<u32, [i64; 7]> = rows
        .iter()
        .map(|r| {
            (
                r.get::<_, u32>(0),
                [
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                    r.get(6),
                    r.get(7),
                ],
            )
        })
        .collect();
    let mut out = BTreeMap::new();
    for t in tables {
        let mut w = Work::default();
        if let Some(v) = by_oid.get(&t.oid) {
            w.seq_scans = v[0];
            w.tuples_read = v[1];
            w.tuples_fetched = v[2];
            w.inserted = v[3];
            w.updated = v[4];
            w.deleted = v[5];
            w.heap_blocks = v[6];
        }
        for i in &t.indexes {
            if let Some(v) = by_oid.get(i) {
                w.tuples_fetched += v[2];
                w.index_blocks += v[6];
            }
        }
        out.insert(t.oid, w);
    }
    Ok(out)
}

/// Relation locks this backend holds on the existing tables, by table
/// name. A lock on a partitioned table counts on each of its partitions:
/// an app reaching a partition through its parent waits on either.
fn held_locks(
    c: &mut Client,
    tables: &[Existing],
) -> Result<BTreeMap<String, Vec<String>>, postgres::Error> {
    let oids: Vec<u32> = tables.iter().map(|t| t.oid).collect();
    let rows = c.query(
        "SELECT relation, mode FROM pg_locks
          WHERE pid = pg_backend_pid() AND locktype = 'relation' AND granted
            AND relation = ANY($1::oid[])",
        &[&oids],
    )?;
    let tree: Vec<crate::tables::UserTable> = tables
        .iter()
        .map(|t| crate::tables::UserTable {
            oid: t.oid,
            name: t.name.clone(),
            qualified: String::new(),
            kind: crate::tables::Kind::Table,
            partition_of: t.partition_of.clone(),
            populated: true,
        })
        .collect();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in rows {
        let oid: u32 = r.get(0);
        if let Some(t) = tables.iter().find(|t| t.oid == oid) {
            let mode: String = r.get(1);
            for name in crate::tables::with_partitions(&tree, &t.name) {
                let modes = out.entry(name.to_string()).or_default();
                if !modes.contains(&mode) {
                    modes.push(mode.clone());
                }
            }
        }
    }
    Ok(out)
}

/// (table oid, index name, index oid, index file).
type IndexRow = (u32, String, u32, u32);

/// Current file of each existing table, and the indexes on them, on the
/// migration's own connection (its uncommitted catalog).
fn files_and_indexes(
    c: &mut Client,
    tables: &[Existing],
) -> Result<(BTreeMap<u32, u32>, Vec<IndexRow>), postgres::Error> {
    let oids: Vec<u32> = tables.iter().map(|t| t.oid).collect();
    let files = c
        .query(
            "SELECT oid, relfilenode FROM pg_class WHERE oid = ANY($1::oid[])",
            &[&oids],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let indexes = c
        .query(
            "SELECT x.indrelid, i.relname::text, x.indexrelid, i.relfilenode
               FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
              WHERE x.indrelid = ANY($1::oid[])",
            &[&oids],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    Ok((files, indexes))
}

/// Applies `sql` to the database at `url` in one transaction, statement by
/// statement, measuring each: the statements run connected with
/// `migrator_url` (the same database as the migrator role), rollsafe's
/// own reads before them with `url`. `lock_timeout` is set for the
/// transaction when given.
pub fn apply_measured(
    url: &str,
    migrator_url: &str,
    sql: &str,
    lock_timeout: Option<Duration>,
    end: End,
) -> anyhow::Result<Applied> {
    apply_measured_in(url, migrator_url, sql, lock_timeout, end)
}

/// Applies a `-- rollsafe:no-transaction` file's `sql` statement by
/// statement outside a transaction (each commits on its own, as `migrate`
/// runs it; `CREATE INDEX CONCURRENTLY` refuses a transaction block),
/// measuring each while it runs (see [`outside_transaction`]). A failure
/// leaves the statements before it applied. Batched updates are not run
/// here (`migrate::backfill`).
pub fn apply_measured_no_transaction(
    url: &str,
    migrator_url: &str,
    sql: &str,
    lock_timeout: Option<Duration>,
) -> anyhow::Result<Applied> {
    outside_transaction::apply(url, migrator_url, sql, lock_timeout)
}

/// The tables that exist before the migration with their sizes and
/// files, and every index's oid, read on a connection of its own: counting
/// rows would pollute the migration connection's statistics, and it does
/// not count in the cumulative ones (switched off, or flushed before it
/// closes) so that they hold the migration's work alone.
fn existing_tables(url: &str) -> anyhow::Result<(Vec<Existing>, Vec<u32>)> {
    let mut existing: Vec<Existing> = Vec::new();
    let mut c = db::connect(url)?;
    sampler::name_session(&mut c, sampler::PROBE)?;
    let _ = c.batch_execute("SET track_counts = off");
    let indexes_before = c
        .query("SELECT indexrelid FROM pg_index", &[])?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let tables = c.query(
        &format!(
            "SELECT t.name, t.oid, c.relfilenode, greatest(c.relpages, 0)::int8,
                    coalesce((SELECT array_agg(x.indexrelid) FROM pg_index x
                               WHERE x.indrelid = c.oid), '{{}}'),
                    t.qualified, t.parent, t.populated
               FROM ({}) t JOIN pg_class c ON c.oid = t.oid ORDER BY 1",
            crate::tables::list_sql()
        ),
        &[],
    )?;
    for r in tables {
        let (qualified, populated): (String, bool) = (r.get(5), r.get(7));
        // A partitioned table counts its partitions' rows; a materialized
        // view created WITH NO DATA has none to count.
        let rows: i64 = if populated {
            c.query_one(&format!("SELECT count(*) FROM {qualified}"), &[])?
                .get(0)
        } else {
            0
        };
        existing.push(Existing {
            name: r.get(0),
            oid: r.get(1),
            filenode: r.get(2),
            rows,
            pages: r.get(3),
            indexes: r.get(4),
            partition_of: r.get(6),
            qualified: populated.then_some(qualified),
        });
    }
    if sampler::version_num(&mut c)? >= 150000 {
        c.batch_execute("SELECT pg_stat_force_next_flush()")?;
    }
    Ok((existing, indexes_before))
}

fn apply_measured_in(
    url: &str,
    migrator_url: &str,
    sql: &str,
    lock_timeout: Option<Duration>,
    end: End,
) -> anyhow::Result<Applied> {
    let (existing, indexes_before) = existing_tables(url)?;
    let split = crate::sql::split(sql);
    let mut c = db::connect(migrator_url)?;
    sampler::name_session(&mut c, sampler::MIGRATION)?;
    let mut out = Applied {
        split_exact: split.exact,
        ..Applied::default()
    };
    // A fresh backend's first statement on a table loads its catalog
    // entries (relcache), which costs more on a table with indexes and
    // statistics than on an empty one: not row work, so pay it before the
    // clock starts, or it would be extrapolated with the rows.
    for q in existing.iter().filter_map(|t| t.qualified.as_ref()) {
        c.batch_execute(&format!("SELECT FROM {q} LIMIT 0"))?;
    }
    c.batch_execute("BEGIN")?;
    if let Some(t) = lock_timeout {
        c.batch_execute(&format!("SET LOCAL lock_timeout = '{}ms'", t.as_millis()))?;
    }
    let lsn0 = wal_lsn(&mut c)?;
    let t0 = Instant::now();
    out.started = Some(t0);
    // Counters of this backend not flushed yet stay in the view: start
    // from what it shows now.
    let baseline: BTreeMap<u32, Work> = xact_work(&mut c, &existing)?;
    let mut totals = baseline.clone();
    let mut last_file: BTreeMap<u32, u32> = existing.iter().map(|t| (t.oid, t.filenode)).collect();
    for (i, st) in split.statements.iter().enumerate() {
        let started = Instant::now();
        let result = c.batch_execute(&st.text);
        let mut run = StatementRun {
            line: st.line,
            column: st.column,
            excerpt: st.excerpt(60),
            duration: started.elapsed(),
            started: Some(started),
            ..StatementRun::default()
        };
        if let Err(e) = result {
            out.duration = t0.elapsed();
            out.held = out.duration;
            out.error = Some(if split.exact && split.statements.len() > 1 {
                format!("line {}: {}", st.line, crate::errors::one_line(&e))
            } else {
                crate::errors::one_line(&e)
            });
            out.sqlstate = e.code().map(|s| s.code().to_string());
            out.failed_statement = Some(i);
            out.statements.push(run);
            // The sizes still say which tables the statements before it
            // worked on, and on how many rows.
            out.tables = existing
                .iter()
                .map(|t| {
                    let sizes = TableWork {
                        table: t.name.clone(),
                        rows_before: t.rows,
                        pages_before: t.pages,
                        partition_of: t.partition_of.clone(),
                        ..TableWork::default()
                    };
                    (t.name.clone(), sizes)
                })
                .collect();
            c.batch_execute("ROLLBACK")?;
            return Ok(out);
        }
        let now = xact_work(&mut c, &existing)?;
        for t in &existing {
            let w = now[&t.oid].minus(totals[&t.oid]);
            if w != Work::default() {
                run.work.insert(t.name.clone(), w);
            }
        }
        totals = now;
        run.locks_after = held_locks(&mut c, &existing)?;
        let (files, indexes) = files_and_indexes(&mut c, &existing)?;
        for t in &existing {
            if let (Some(now), Some(last)) = (files.get(&t.oid), last_file.get_mut(&t.oid)) {
                if now != last {
                    run.rewrote.push(t.name.clone());
                    *last = *now;
                }
            }
        }
        for (table_oid, index, index_oid, _) in indexes {
            let seen = indexes_before.contains(&index_oid)
                || out
                    .statements
                    .iter()
                    .any(|s| s.built_indexes.iter().any(|(_, i)| *i == index));
            if !seen {
                if let Some(t) = existing.iter().find(|t| t.oid == table_oid) {
                    run.built_indexes.push((t.name.clone(), index));
                }
            }
        }
        out.statements.push(run);
    }
    out.duration = t0.elapsed();
    let locks = held_locks(&mut c, &existing)?;
    let after: BTreeMap<u32, u32> = c
        .query(
            "SELECT oid, relfilenode FROM pg_class WHERE oid = ANY($1::oid[])",
            &[&existing.iter().map(|t| t.oid).collect::<Vec<u32>>()],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let indexes = c.query(
        "SELECT x.indrelid, i.relname::text, x.indexrelid
           FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid",
        &[],
    )?;
    let lsn1 = wal_lsn(&mut c)?;
    out.wal_bytes = c
        .query_one(
            "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::bigint",
            &[&lsn1, &lsn0],
        )?
        .get(0);
    for t in &existing {
        let mut w = TableWork {
            table: t.name.clone(),
            rows_before: t.rows,
            pages_before: t.pages,
            work: totals[&t.oid].minus(baseline[&t.oid]),
            locks: locks.get(&t.name).cloned().unwrap_or_default(),
            partition_of: t.partition_of.clone(),
            ..TableWork::default()
        };
        match after.get(&t.oid) {
            None => w.dropped = true,
            Some(f) => w.rewritten = *f != t.filenode,
        }
        for r in indexes
            .iter()
            .filter(|r| r.get::<_, u32>(0) == t.oid && !indexes_before.contains(&r.get(2)))
        {
            w.new_indexes.push(r.get(1));
        }
        out.tables.insert(t.name.clone(), w);
    }
    match end {
        End::Commit => c.batch_execute("COMMIT")?,
        End::Rollback => c.batch_execute("ROLLBACK")?,
    }
    out.held = t0.elapsed();
    Ok(out)
}

/// What a concurrent app workload went through.
#[derive(Debug, Clone, Default)]
pub struct WorkloadStats {
    pub statements: u64,
    /// The longest lock wait of an app statement on the migration (see
    /// [`sampler`]): what the migration made an app wait, not how long
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
    /// Whether the apps' sessions count in the cumulative table statistics
    /// (they are switched off so that a statement outside a transaction is
    /// measured alone there; this says the switch failed).
    pub counted_in_table_stats: bool,
    /// Each lock wait on the migration seen (the first
    /// [`sampler::MAX_WAITS_KEPT`]), for the report's lock timeline.
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

/// Sets a flag when dropped: every loop a rehearsal starts watches one, so
/// an early return (an error part-way) stops them all.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Reader and writer threads running the live apps' statements in a loop
/// until stopped, and a sampler of their lock waits on the migration;
/// every execution is rolled back, so nothing the workload does ever
/// commits. Dropping it stops and joins every thread.
pub struct Workload {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<WorkloadStats>>,
    threads: Vec<JoinHandle<()>>,
    waits: Option<sampler::AppWaitSampler>,
    /// ("app (kind)", statement text) → "app.statement (kind)".
    labels: BTreeMap<(String, String), String>,
}

/// A live app and the names of its statements that write (declared with
/// `-- kind:` or seen taking write locks when replayed).
pub type LiveApp<'a> = (&'a AppVersion, BTreeSet<String>);

impl Workload {
    /// Starts one reader and one writer thread per live app, each
    /// connected as the app's own role. Statements that do not even
    /// prepare on the current schema are left out (compat reports them).
    /// All connections are opened before any thread starts, so a failure
    /// leaves nothing running.
    pub fn start(url: &str, sessions: &Sessions, apps: &[LiveApp]) -> anyhow::Result<Workload> {
        type Job = (Client, Vec<replay::Prepared>, String, &'static str);
        let mut jobs: Vec<Job> = Vec::new();
        let mut labels = BTreeMap::new();
        let mut counted = false;
        // Apps under a role of their own leave the cumulative table
        // statistics to the migration: a superuser-only setting, so set for
        // that role in this throwaway database only (gone with it; the role
        // itself is never changed). An app running as the migrator cannot
        // be told apart there: counted_in_table_stats says so.
        let mut admin = db::connect(url)?;
        let own: BTreeSet<&str> = apps
            .iter()
            .filter_map(|(app, _)| sessions.own_role_of(&app.name))
            .collect();
        if !own.is_empty() {
            let database: String = admin
                .query_one("SELECT current_database()::text", &[])?
                .get(0);
            for role in own {
                admin.batch_execute(&format!(
                    "ALTER ROLE {} IN DATABASE {} SET track_counts = off",
                    db::quote_ident(role),
                    db::quote_ident(&database)
                ))?;
            }
        }
        drop(admin);
        for (app, writes) in apps {
            for reads in [true, false] {
                let kind = if reads { "read" } else { "write" };
                let session = format!("{} ({kind})", app.name);
                // As the app's own role: its GRANTs and row-level security
                // decide what it may do, as in production.
                let mut c = db::connect(&sessions.app(url, &app.name))?;
                sampler::name_session(&mut c, &format!("{}{session}", sampler::APP_PREFIX))?;
                // A superuser-only setting: where it cannot be switched
                // off, the statistics say so (counted_in_table_stats).
                let off: String = c
                    .query_one("SELECT current_setting('track_counts')", &[])?
                    .get(0);
                counted |= off != "off" && c.batch_execute("SET track_counts = off").is_err();
                let mut prepared = Vec::new();
                for st in app.set.statements() {
                    if writes.contains(&st.name) == reads {
                        continue;
                    }
                    if let Ok(p) = replay::prepare(&mut c, app, &st.name) {
                        // The sampler sees the statement's text (extended
                        // protocol): name it by that.
                        labels.insert(
                            (session.clone(), st.sql.trim().to_string()),
                            format!("{}.{} ({kind})", app.name, st.name),
                        );
                        prepared.push(p);
                    }
                }
                jobs.push((c, prepared, app.name.clone(), kind));
            }
        }
        let waits = sampler::AppWaitSampler::start(url)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(WorkloadStats {
            counted_in_table_stats: counted,
            ..WorkloadStats::default()
        }));
        let mut threads = Vec::new();
        for (mut c, prepared, app_name, kind) in jobs {
            let (stop, stats) = (stop.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if prepared.is_empty() {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    for p in &prepared {
                        let result = c
                            .batch_execute("BEGIN")
                            .map_err(|e| (replay::Step::Execute, e))
                            .and_then(|_| replay::execute(&mut c, p).map(|_| ()));
                        let _ = c.batch_execute("ROLLBACK");
                        let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                        s.statements += 1;
                        if let Err((_, e)) = result {
                            s.error_count += 1;
                            if s.errors.len() < 5 {
                                s.errors.push((
                                    format!("{app_name}.{} ({kind})", p.statement),
                                    crate::errors::one_line(&e),
                                ));
                            }
                        }
                    }
                }
            }));
        }
        Ok(Workload {
            stop,
            stats,
            threads,
            waits: Some(waits),
            labels,
        })
    }

    /// Stops every thread and returns what they went through.
    pub fn stop(mut self) -> WorkloadStats {
        self.halt();
        let waits = self.waits.take().map(|w| w.stop()).unwrap_or_default();
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone();
        s.max_stall = waits.longest;
        s.lock_waits = waits.waits;
        s.wait_samples = waits.samples;
        if !waits.app.is_empty() {
            s.max_stall_statement = self.label(&waits.app, &waits.query);
        }
        s.waits = waits
            .each
            .iter()
            .map(|w| AppWait {
                statement: self.label(&w.app, &w.query),
                table: w.relation.clone(),
                mode: w.mode.clone(),
                began: w.began,
                waited: w.waited,
            })
            .collect();
        s
    }

    /// "app.statement (kind)" of a sampled wait: the sampled query is the
    /// statement's text, cut at track_activity_query_size.
    fn label(&self, app: &str, query: &str) -> String {
        let query = query.trim();
        self.labels
            .iter()
            .find(|((a, sql), _)| a == app && !query.is_empty() && sql.starts_with(query))
            .map(|(_, label)| label.clone())
            .unwrap_or_else(|| format!("{app}: {query}"))
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.halt();
    }
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
/// migration runs the real retry loop ([`LockPolicy::run`]) while the live
/// apps' workload runs; the transaction ends after `hold`.
#[derive(Debug, Clone)]
pub struct LongTransactionProbe {
    /// Tables the long transaction held (ROW EXCLUSIVE, like an open write
    /// transaction).
    pub held_tables: Vec<String>,
    pub hold: Duration,
    pub end: ProbeEnd,
    pub attempts: u32,
    /// The longest the migration's backend waited on one lock in one go.
    pub longest_lock_wait: Duration,
    /// What the apps' statements (and a plain reader) went through.
    pub app: WorkloadStats,
}

/// How much longer than the policy's cap one lock wait may last before the
/// migration is taken to ignore its lock timeout (scheduling on a loaded
/// machine). The server ends a wait at its lock_timeout; the slack covers
/// the watcher's sampling, and the watcher never merges two attempts' waits
/// into one (each attempt is a transaction of its own).
pub const LOCK_WAIT_SLACK: Duration = Duration::from_millis(500);

/// Runs the probe on the database at `url`. The database is left
/// unchanged: every attempt of the migration is rolled back. Every thread
/// and connection it starts is gone when it returns, error or not.
pub fn probe_long_transaction(
    url: &str,
    sessions: &Sessions,
    sql: &str,
    tables: &[UserTable],
    apps: &[LiveApp],
    policy: LockPolicy,
    hold: Duration,
) -> anyhow::Result<LongTransactionProbe> {
    let mut holder = db::connect(url)?;
    sampler::name_session(&mut holder, sampler::PROBE)?;
    holder.batch_execute("BEGIN")?;
    // A materialized view cannot be locked (nor written by an app).
    let held: Vec<&UserTable> = tables.iter().filter(|t| t.lockable()).collect();
    for t in &held {
        holder.batch_execute(&format!("LOCK TABLE {} IN ROW EXCLUSIVE MODE", t.qualified))?;
    }
    let workload = Workload::start(url, sessions, apps)?;
    let mut migrator = db::connect(&sessions.migrator(url))?;
    sampler::name_session(&mut migrator, sampler::MIGRATION)?;
    let pid: i32 = migrator.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    let mut admin = db::connect(url)?;
    sampler::name_session(&mut admin, sampler::PROBE)?;
    let done = Arc::new(AtomicBool::new(false));
    let _stop_watcher = StopOnDrop(done.clone());
    // The watcher samples the migrator's wait state: a single lock wait
    // longer than the cap means its SQL overrides lock_timeout; anything
    // else slow (a sleep, a big scan) is not a lock wait and is left to
    // finish, up to a generous deadline.
    let lock_limit = policy.max_timeout + LOCK_WAIT_SLACK;
    let deadline = hold + policy.max_timeout * 4 + Duration::from_secs(60);
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || -> (Duration, Option<ProbeEnd>) {
            let t0 = Instant::now();
            let (mut longest, mut since): (Duration, Option<Instant>) = (Duration::ZERO, None);
            // The transaction the current wait belongs to: a retry is a new
            // transaction, so two samples in different ones are two waits
            // (on a loaded machine a sample can miss the pause between).
            let mut waiting_in: Option<String> = None;
            while !done.load(Ordering::Relaxed) {
                let waiting: Option<String> = admin
                    .query_opt(
                        "SELECT xact_start::text FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
                        &[&pid],
                    )
                    .ok()
                    .flatten()
                    .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default());
                match (&waiting, since) {
                    (Some(x), Some(_)) if waiting_in.as_ref() != Some(x) => {
                        since = Some(Instant::now())
                    }
                    (Some(_), None) => since = Some(Instant::now()),
                    (None, Some(_)) => since = None,
                    _ => {}
                }
                waiting_in = waiting;
                if let Some(s) = since {
                    longest = longest.max(s.elapsed());
                }
                let verdict = if longest > lock_limit {
                    Some(ProbeEnd::IgnoredLockTimeout)
                } else if t0.elapsed() > deadline {
                    Some(ProbeEnd::TimedOut)
                } else {
                    None
                };
                if verdict.is_some() {
                    let _ = admin.execute("SELECT pg_cancel_backend($1)", &[&pid]);
                    return (longest, verdict);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (longest, None)
        })
    };
    // The migration's retry loop, exactly as `rollsafe migrate` runs it,
    // with a window that outlasts the long transaction.
    let runner = {
        let sql = sql.to_string();
        let policy = policy.retry_for(hold + policy.max_timeout * 4 + Duration::from_secs(30));
        std::thread::spawn(move || {
            let r = policy.run(
                |_, timeout| {
                    migrator.batch_execute(&format!(
                        "BEGIN; SET LOCAL lock_timeout = '{}ms'",
                        timeout.as_millis().max(1)
                    ))?;
                    let r = migrator.batch_execute(&sql);
                    let _ = migrator.batch_execute("ROLLBACK");
                    r
                },
                is_lock_timeout,
            );
            (r.map(|(_, a)| a), Instant::now())
        })
    };
    let started = Instant::now();
    while started.elapsed() < hold && !runner.is_finished() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let finished_while_held = runner.is_finished();
    holder.batch_execute("ROLLBACK")?;
    let release_at = Instant::now();
    let (result, finished_at) = runner
        .join()
        .map_err(|_| anyhow::anyhow!("the probe's migration thread panicked"))?;
    done.store(true, Ordering::Relaxed);
    let (longest, verdict) = watcher.join().unwrap_or_default();
    let app = workload.stop();
    let (end, attempts) = match (verdict, result) {
        (Some(v), r) => (v, r.map(|a| a.count).unwrap_or(0)),
        (None, Ok(a)) if finished_while_held && a.count == 1 => (ProbeEnd::NoConflict, 1),
        (None, Ok(a)) => (
            ProbeEnd::CompletedAfterRelease {
                after: finished_at.saturating_duration_since(release_at),
            },
            a.count,
        ),
        (None, Err(Err(gave_up))) => (ProbeEnd::GaveUp, gave_up.attempts.count),
        (None, Err(Ok(e))) => (ProbeEnd::Failed(crate::errors::one_line(&e)), 0),
    };
    Ok(LongTransactionProbe {
        held_tables: held.iter().map(|t| t.name.clone()).collect(),
        hold,
        end,
        attempts,
        longest_lock_wait: longest,
        app,
    })
}

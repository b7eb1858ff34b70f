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
//!
//! Floor `measure`: it takes a database and the live apps and returns what the apply did and what the apps saw; the stages say on which copy it runs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Client;

use crate::app::replay;
use crate::app::AppVersion;
use crate::sessions::sampler;
use crate::sessions::Sessions;
use crate::verify::evidence::{
    AppWait, Applied, LongTransactionProbe, ProbeEnd, StatementRun, TableWork, Work, WorkloadStats,
};

mod outside_transaction;
use crate::db;
use crate::lock_policy::LockPolicy;
use crate::migrate::apply;
use crate::tables::UserTable;

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

impl Existing {
    /// Its size before the migration, the start of its [`TableWork`]
    /// whichever way the migration ran.
    fn sizes(&self) -> TableWork {
        TableWork {
            table: self.name.clone(),
            rows_before: self.rows,
            pages_before: self.pages,
            partition_of: self.partition_of.clone(),
            ..TableWork::default()
        }
    }
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

/// The indexes that existed before a statement: their oids and the files
/// (relfilenodes) that hold them.
#[derive(Debug, Clone, Default)]
struct IndexesBefore {
    oids: Vec<u32>,
    files: BTreeSet<u32>,
}

impl IndexesBefore {
    /// The oids of the indexes among `indexes` that were built (see
    /// [`crate::migrate::partitioned_index::indexes_built`]), judged by
    /// storage, not by oid: a binary-coercible `ALTER COLUMN … TYPE`
    /// (varchar(n) → text, the same type again) remakes each index on the
    /// column under a new oid that keeps the old index's file, and builds
    /// nothing.
    fn built(&self, indexes: &[IndexRow]) -> Vec<u32> {
        let new_storage: Vec<IndexRow> = indexes
            .iter()
            .filter(|i| !self.files.contains(&i.3))
            .cloned()
            .collect();
        crate::migrate::partitioned_index::indexes_built(&new_storage, &self.oids)
    }

    /// Every index in `indexes` now counts as existing.
    fn extend(&mut self, indexes: &[IndexRow]) {
        for (_, _, oid, file) in indexes {
            if !self.oids.contains(oid) {
                self.oids.push(*oid);
            }
            if *file != 0 {
                self.files.insert(*file);
            }
        }
    }
}

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
/// transaction when given. `sql` alone, without a migration's callbacks:
/// a migration is applied with [`apply_migration_measured`] (this serves
/// the benches and tests that measure bare SQL).
pub fn apply_measured(
    url: &str,
    migrator_url: &str,
    sql: &str,
    lock_timeout: Option<Duration>,
    end: End,
) -> anyhow::Result<Applied> {
    let exact = crate::sql::split(sql).exact;
    let steps = apply::transaction_steps(sql);
    apply_measured_in(url, migrator_url, &steps, exact, lock_timeout, end)
}

/// Applies migration `m` to the database at `url` as its tool sends it,
/// committed and measured: in one transaction ([`apply_measured`]) or
/// statement by statement outside one ([`apply_measured_no_transaction`]),
/// with the callbacks its tool runs around it on its connection
/// ([`apply::migration_steps`]; their statements measured too, each at
/// its own file and line: their locks and time are the migration's, as in
/// production).
pub fn apply_migration_measured(
    url: &str,
    migrator_url: &str,
    m: &crate::catalog::Migration,
) -> anyhow::Result<Applied> {
    let steps = apply::migration_steps(m);
    let exact = crate::sql::split(&m.sql).exact;
    match m.runs_outside_transaction() {
        true => outside_transaction::apply(url, migrator_url, &steps, exact, None),
        false => apply_measured_in(url, migrator_url, &steps, exact, None, End::Commit),
    }
}

/// Applies a `-- rollsafe:no-transaction` file's `sql` statement by
/// statement outside a transaction (each commits on its own, as `migrate`
/// runs it; `CREATE INDEX CONCURRENTLY` refuses a transaction block),
/// measuring each while it runs (see [`outside_transaction`]). A failure
/// leaves the statements before it applied. Batched updates are not run
/// here (`migrate::backfill`). Like [`apply_measured`], bare SQL without
/// a migration's callbacks.
pub fn apply_measured_no_transaction(
    url: &str,
    migrator_url: &str,
    sql: &str,
    lock_timeout: Option<Duration>,
) -> anyhow::Result<Applied> {
    let exact = crate::sql::split(sql).exact;
    let steps = crate::migrate::no_transaction::steps(sql);
    outside_transaction::apply(url, migrator_url, &steps, exact, lock_timeout)
}

/// The tables that exist before the migration with their sizes and
/// files, and every index's oid, read on a connection of its own: counting
/// rows would pollute the migration connection's statistics, and it does
/// not count in the cumulative ones (switched off, or flushed before it
/// closes) so that they hold the migration's work alone.
/// The session a measured apply runs on, whichever way its file runs: the
/// tables and indexes of the database at `url` before the migration, and
/// the migrator's connection (`migrator_url`), named as the migration,
/// with every existing table's catalog entries already loaded. (A fresh
/// backend's first statement on a table loads its catalog entries, the
/// relcache, which costs more on a table with indexes and statistics than
/// on an empty one: not row work, so it is paid before the clock starts,
/// or it would be extrapolated with the rows.)
fn measuring_session(
    url: &str,
    migrator_url: &str,
) -> anyhow::Result<(Vec<Existing>, IndexesBefore, Client)> {
    let (existing, indexes_before) = existing_tables(url)?;
    let mut c = db::connect(migrator_url)?;
    sampler::name_session(&mut c, sampler::MIGRATION)?;
    for q in existing.iter().filter_map(|t| t.qualified.as_ref()) {
        c.batch_execute(&format!("SELECT FROM {q} LIMIT 0"))?;
    }
    Ok((existing, indexes_before, c))
}

fn existing_tables(url: &str) -> anyhow::Result<(Vec<Existing>, IndexesBefore)> {
    let mut existing: Vec<Existing> = Vec::new();
    let mut c = db::connect(url)?;
    sampler::name_session(&mut c, sampler::PROBE)?;
    let _ = c.batch_execute("SET track_counts = off");
    let mut indexes_before = IndexesBefore::default();
    for r in c.query(
        "SELECT x.indexrelid, i.relfilenode
           FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid",
        &[],
    )? {
        indexes_before.oids.push(r.get(0));
        let file: u32 = r.get(1);
        if file != 0 {
            indexes_before.files.insert(file);
        }
    }
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

/// `steps` in one transaction, measured; `split_exact`: whether the
/// grammar split the migration's file exactly.
fn apply_measured_in(
    url: &str,
    migrator_url: &str,
    steps: &[apply::Step],
    split_exact: bool,
    lock_timeout: Option<Duration>,
    end: End,
) -> anyhow::Result<Applied> {
    let (existing, indexes_before, mut c) = measuring_session(url, migrator_url)?;
    let mut measure = Measure {
        existing: &existing,
        indexes_before: indexes_before.clone(),
        lock_timeout,
        out: Applied {
            split_exact,
            ..Applied::default()
        },
        baseline: BTreeMap::new(),
        totals: BTreeMap::new(),
        last_file: existing.iter().map(|t| (t.oid, t.filenode)).collect(),
        lsn0: String::new(),
        statement_started: None,
        error: None,
    };
    let ending = match end {
        End::Commit => apply::Ending::Commit,
        End::Rollback => apply::Ending::Rollback,
    };
    let result = apply::in_transaction(&mut c, steps, None, ending, &mut measure);
    if let Some(e) = measure.error {
        return Err(e);
    }
    let mut out = measure.out;
    let t0 = out.started.unwrap_or_else(Instant::now);
    match result {
        Ok(_) => out.held = t0.elapsed(),
        Err(e) if e.index() < steps.len() => {
            out.duration = t0.elapsed();
            out.held = out.duration;
            failed(&mut out, &e, steps, &existing);
        }
        // Measuring, or the transaction's start or end, failed: not the
        // migration's doing.
        Err(e) => anyhow::bail!("measuring the migration: {}", e.message()),
    }
    Ok(out)
}

/// The observer that measures each statement of a transactional apply
/// after it ran, and the whole before the commit (see the module doc).
struct Measure<'a> {
    existing: &'a [Existing],
    /// The indexes before the next statement.
    indexes_before: IndexesBefore,
    lock_timeout: Option<Duration>,
    out: Applied,
    /// The migration backend's counters when its transaction began (its
    /// unflushed counts from before stay in the view), and after the last
    /// statement measured.
    baseline: BTreeMap<u32, Work>,
    totals: BTreeMap<u32, Work>,
    /// Each existing table's file after the last statement.
    last_file: BTreeMap<u32, u32>,
    lsn0: String,
    statement_started: Option<Instant>,
    /// The first measurement that failed (the rehearsal's error).
    error: Option<anyhow::Error>,
}

impl apply::StepObserver for Measure<'_> {
    fn begun(&mut self, c: &mut Client) -> Result<(), postgres::Error> {
        if let Some(t) = self.lock_timeout {
            c.batch_execute(&format!("SET LOCAL lock_timeout = '{}ms'", t.as_millis()))?;
        }
        self.lsn0 = wal_lsn(c)?;
        self.out.started = Some(Instant::now());
        self.baseline = xact_work(c, self.existing)?;
        self.totals = self.baseline.clone();
        Ok(())
    }

    fn before(&mut self, _c: &mut Client, _index: usize, _step: &apply::Step) {
        self.statement_started = Some(Instant::now());
    }

    fn after(
        &mut self,
        c: &mut Client,
        _index: usize,
        step: &apply::Step,
        ok: bool,
        took: Duration,
    ) {
        let st = &step.statement;
        let mut run = StatementRun {
            line: st.line,
            column: st.column,
            file: step.script.clone(),
            excerpt: st.excerpt(60),
            duration: took,
            started: self.statement_started,
            ..StatementRun::default()
        };
        if ok && self.error.is_none() {
            if let Err(e) = self.measure(c, &mut run) {
                self.error = Some(e.into());
            }
        }
        self.out.statements.push(run);
    }

    fn finishing(&mut self, c: &mut Client) -> Result<(), postgres::Error> {
        let t0 = self.out.started.unwrap_or_else(Instant::now);
        self.out.duration = t0.elapsed();
        self.out.wal_bytes = wal_since(c, &self.lsn0)?;
        self.out.tables = post_apply(c, self.existing, &self.out.statements)?;
        Ok(())
    }
}

/// Records statement `e.index()`'s failure in `out`, whichever way the
/// migration ran: its error (with its line when the file has several
/// statements), SQLSTATE and index, and the tables' sizes (they still say
/// which tables the statements before it worked on, and on how many rows).
fn failed(out: &mut Applied, e: &apply::StepError, steps: &[apply::Step], existing: &[Existing]) {
    let step = &steps[e.index()];
    out.error = Some(if step.script.is_some() {
        format!("its callback {}: {}", step.line_phrase(), e.message())
    } else if out.split_exact && steps.len() > 1 {
        format!("line {}: {}", step.statement.line, e.message())
    } else {
        e.message()
    });
    out.sqlstate = e
        .error()
        .and_then(|e| e.code())
        .map(|s| s.code().to_string());
    out.failed_statement = Some(e.index());
    out.tables = existing
        .iter()
        .map(|t| (t.name.clone(), t.sizes()))
        .collect();
}

/// WAL written on this connection's server since `lsn0`.
fn wal_since(c: &mut Client, lsn0: &str) -> Result<i64, postgres::Error> {
    let lsn1 = wal_lsn(c)?;
    Ok(c.query_one(
        "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::bigint",
        &[&lsn1, &lsn0],
    )?
    .get(0))
}

/// What a migration did to each table that existed before it, from what
/// its statements were measured doing (work, locks, new files, indexes
/// built) and whether the table is still there: the same whether the
/// migration ran in one transaction or outside one.
fn post_apply(
    c: &mut Client,
    existing: &[Existing],
    statements: &[StatementRun],
) -> Result<BTreeMap<String, TableWork>, postgres::Error> {
    let oids: Vec<u32> = existing.iter().map(|t| t.oid).collect();
    let still: Vec<u32> = c
        .query(
            "SELECT oid FROM pg_class WHERE oid = ANY($1::oid[])",
            &[&oids],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = BTreeMap::new();
    for t in existing {
        let mut w = t.sizes();
        w.dropped = !still.contains(&t.oid);
        for st in statements {
            if let Some(x) = st.work.get(&t.name) {
                w.work = w.work.plus(*x);
            }
            for m in st.locks_after.get(&t.name).into_iter().flatten() {
                if !w.locks.contains(m) {
                    w.locks.push(m.clone());
                }
            }
            w.rewritten |= st.rewrote.contains(&t.name);
            for (table, index) in &st.built_indexes {
                if *table == t.name && !w.new_indexes.contains(index) {
                    w.new_indexes.push(index.clone());
                }
            }
        }
        out.insert(t.name.clone(), w);
    }
    Ok(out)
}

impl Measure<'_> {
    /// What statement `run` did: its work per table, the locks held after
    /// it, the tables it gave a new file and the indexes it built.
    fn measure(&mut self, c: &mut Client, run: &mut StatementRun) -> Result<(), postgres::Error> {
        let now = xact_work(c, self.existing)?;
        for t in self.existing {
            let w = now[&t.oid].minus(self.totals[&t.oid]);
            if w != Work::default() {
                run.work.insert(t.name.clone(), w);
            }
        }
        self.totals = now;
        run.locks_after = held_locks(c, self.existing)?;
        let (files, indexes) = files_and_indexes(c, self.existing)?;
        for t in self.existing {
            if let (Some(now), Some(last)) = (files.get(&t.oid), self.last_file.get_mut(&t.oid)) {
                if now != last {
                    run.rewrote.push(t.name.clone());
                    *last = *now;
                }
            }
        }
        let builds = self.indexes_before.built(&indexes);
        for (table_oid, index, index_oid, _) in &indexes {
            if builds.contains(index_oid) {
                if let Some(t) = self.existing.iter().find(|t| t.oid == *table_oid) {
                    run.built_indexes.push((t.name.clone(), index.clone()));
                }
            }
        }
        self.indexes_before.extend(&indexes);
        Ok(())
    }
}

/// Sets a flag when dropped: every loop a rehearsal starts watches one, so
/// an early return (an error part-way) stops them all.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `p` once with its parameters in a transaction that is rolled
/// back: the server's message, on one line, when it fails.
fn run_rolled_back(c: &mut Client, p: &replay::Prepared) -> Result<(), String> {
    let result = c
        .batch_execute("BEGIN")
        .map_err(|e| (replay::Step::Execute, e))
        .and_then(|_| replay::execute(c, p).map(|_| ()));
    let _ = c.batch_execute("ROLLBACK");
    result.map_err(|(_, e)| crate::errors::one_line(&e))
}

/// Reader and writer threads running the live apps' statements in a loop
/// until stopped, and a sampler of their lock waits on the migration;
/// every execution is rolled back, so nothing the workload does ever
/// commits. Dropping it stops and joins every thread.
pub struct Workload {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<WorkloadStats>>,
    threads: Vec<JoinHandle<()>>,
    /// Per thread that has statements to run: its whole rounds over them.
    rounds: Vec<Arc<AtomicU64>>,
    waits: Option<sampler::AppWaitSampler>,
    /// ("app (kind)", statement text) → "app.statement (kind)".
    labels: BTreeMap<(String, String), String>,
}

/// A live app and the names of its statements that write (declared with
/// `-- kind:` or seen taking write locks when replayed).
pub type LiveApp<'a> = (&'a AppVersion, BTreeSet<String>);

impl Workload {
    /// Starts one reader and one writer thread per live app, each
    /// connected as the app's own role. Statements that do not prepare,
    /// or do not execute, on the current schema (the one before the
    /// migration) are left out: their failures while it applies would not
    /// be its doing (compat judges them on both schemas).
    /// All connections are opened before any thread starts, so a failure
    /// leaves nothing running.
    pub fn start(url: &str, sessions: &Sessions, apps: &[LiveApp]) -> anyhow::Result<Workload> {
        type Job = (Client, Vec<replay::Prepared>, AppVersion, &'static str);
        let mut jobs: Vec<Job> = Vec::new();
        let mut labels = BTreeMap::new();
        let mut counted = false;
        let mut left_out = Vec::new();
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
                    crate::pg::quote_ident(role),
                    crate::pg::quote_ident(&database)
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
                    let label = format!("{}.{} ({kind})", app.name, st.name);
                    let Ok(p) = replay::prepare(&mut c, app, &st.name) else {
                        continue;
                    };
                    if let Err(e) = run_rolled_back(&mut c, &p) {
                        left_out.push((label, e));
                        continue;
                    }
                    // The sampler sees the statement's text (extended
                    // protocol): name it by that.
                    labels.insert((session.clone(), st.sql.trim().to_string()), label);
                    prepared.push(p);
                }
                jobs.push((c, prepared, (*app).clone(), kind));
            }
        }
        let waits = sampler::AppWaitSampler::start(url)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(WorkloadStats {
            counted_in_table_stats: counted,
            left_out,
            ..WorkloadStats::default()
        }));
        let (mut threads, mut rounds) = (Vec::new(), Vec::new());
        for (mut c, mut prepared, app, kind) in jobs {
            let (stop, stats) = (stop.clone(), stats.clone());
            let done = Arc::new(AtomicU64::new(0));
            if !prepared.is_empty() {
                rounds.push(done.clone());
            }
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if prepared.is_empty() {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    for p in prepared.iter_mut() {
                        let mut result = run_rolled_back(&mut c, p);
                        let label = format!("{}.{} ({kind})", app.name, p.statement);
                        let mut again = false;
                        if result
                            .as_ref()
                            .is_err_and(|e| e.contains(crate::verify::evidence::STALE_PLAN))
                        {
                            // The migration changed the columns a statement
                            // prepared before it returns (`SELECT *` after
                            // `ADD COLUMN`): drivers that cache prepared
                            // statements prepare it again and run it once
                            // more (ActiveRecord, pgx); so does the workload.
                            if let Ok(fresh) = replay::prepare(&mut c, &app, &p.statement) {
                                *p = fresh;
                                again = true;
                                result = run_rolled_back(&mut c, p);
                            }
                        }
                        let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                        s.statements += 1;
                        if again && !s.re_prepared.contains(&label) {
                            s.re_prepared.push(label.clone());
                        }
                        if let Err(e) = result {
                            s.error_count += 1;
                            if s.errors.len() < 5 {
                                s.errors.push((label, e));
                            }
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        Ok(Workload {
            stop,
            stats,
            threads,
            rounds,
            waits: Some(waits),
            labels,
        })
    }

    /// Waits until every thread has run each of its statements once since
    /// this call (a whole round begun after it), or `limit` has passed:
    /// before a migration, the apps are running; after it, each statement
    /// has run on the schema it left. A round takes a few milliseconds, so
    /// this is rarely the limit (a fixed wait of the limit, 50 ms on each
    /// side, was 0.1 s of every migration measured under apps).
    pub fn settle(&self, limit: Duration) {
        let started = Instant::now();
        // A round in progress now may have begun before: two more.
        let wanted: Vec<u64> = self
            .rounds
            .iter()
            .map(|r| r.load(Ordering::Relaxed) + 2)
            .collect();
        while started.elapsed() < limit
            && self
                .rounds
                .iter()
                .zip(&wanted)
                .any(|(r, &w)| r.load(Ordering::Relaxed) < w)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
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

/// How much longer than the policy's cap one lock wait may last before the
/// migration is taken to ignore its lock timeout (scheduling on a loaded
/// machine). The server ends a wait at its lock_timeout; the slack covers
/// the watcher's sampling, and the watcher never merges two attempts' waits
/// into one (each attempt is a transaction of its own).
pub const LOCK_WAIT_SLACK: Duration = Duration::from_millis(500);

/// The longest a sample of the probe's watcher may miss a lock wait
/// without the wait being taken to have ended (see the watcher).
const WAIT_GAP: Duration = Duration::from_millis(100);

/// Runs the probe on the database at `url`. The database is left
/// unchanged: every attempt of the migration is rolled back. Every thread
/// and connection it starts is gone when it returns, error or not.
///
/// The migration runs through `migrate::apply` with `rollsafe migrate`'s stepped retry loop behind the
/// transaction, which ends as soon as one attempt's wait has ended at its
/// lock timeout (at `hold` at the latest): only a lock timeout starts
/// another attempt, and the next ones run the same statements, so nothing
/// more is learnt by holding on; a migration that ignores its timeout
/// never times out while held, and the watcher cancels its wait past the
/// cap. With apps, that first attempt waits the policy's cap, the longest
/// any attempt waits and so where the apps queue longest (the loop's
/// earlier, shorter steps queue them for less); without apps, the
/// policy's first timeout.
pub fn probe_long_transaction(
    url: &str,
    sessions: &Sessions,
    steps: Vec<apply::Step>,
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
    if !held.is_empty() {
        // One statement for all of them (a round trip per table adds up on
        // a real schema).
        let names: Vec<&str> = held.iter().map(|t| t.qualified.as_str()).collect();
        holder.batch_execute(&format!(
            "LOCK TABLE {} IN ROW EXCLUSIVE MODE",
            names.join(", ")
        ))?;
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
    let watcher = watch_lock_wait(admin, pid, done.clone(), lock_limit, deadline);
    // The migration's retry loop, exactly as `rollsafe migrate` runs it,
    // with a window that outlasts the long transaction.
    let first_timeout = if apps.is_empty() {
        policy.first_timeout
    } else {
        policy.max_timeout
    };
    let attempt_ended = Arc::new(AtomicBool::new(false));
    let runner = {
        let policy = policy
            .first_timeout(first_timeout)
            .retry_for(hold + policy.max_timeout * 4 + Duration::from_secs(30));
        let mut ends = AttemptEnds(attempt_ended.clone());
        std::thread::spawn(move || {
            // `migrate`'s own apply: each attempt one transaction with its
            // stepped lock_timeout, retried on a lock timeout; every
            // attempt rolled back, so the copy is left as it was.
            let r = apply::in_transaction(
                &mut migrator,
                &steps,
                Some(&policy),
                apply::Ending::Rollback,
                &mut ends,
            );
            (r, Instant::now())
        })
    };
    let started = Instant::now();
    let waited_out = || attempt_ended.load(Ordering::Relaxed);
    while started.elapsed() < hold && !runner.is_finished() && !waited_out() {
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
        (Some(v), r) => (v, r.map(|a| a.attempts).unwrap_or(0)),
        (None, Ok(a)) if finished_while_held && a.attempts == 1 => (ProbeEnd::NoConflict, 1),
        (None, Ok(a)) => (
            ProbeEnd::CompletedAfterRelease {
                after: finished_at.saturating_duration_since(release_at),
            },
            a.attempts,
        ),
        (None, Err(apply::StepError::GaveUp { gave_up, .. })) => {
            (ProbeEnd::GaveUp, gave_up.attempts.count)
        }
        (None, Err(e @ apply::StepError::Failed { .. })) => (ProbeEnd::Failed(e.message()), 0),
    };
    Ok(LongTransactionProbe {
        held_tables: held.iter().map(|t| t.name.clone()).collect(),
        // (Shorter than asked when an attempt timed out first.)
        hold: release_at.saturating_duration_since(started),
        first_timeout,
        end,
        attempts,
        longest_lock_wait: longest,
        app,
    })
}

/// Marks the end of the probe's first attempt: a statement that failed
/// (a lock timeout, which the policy retries, or an error, which ends the
/// apply) ends the attempt, and the long transaction has taught what it
/// can.
struct AttemptEnds(Arc<AtomicBool>);

impl apply::StepObserver for AttemptEnds {
    fn after(&mut self, _: &mut Client, _: usize, _: &apply::Step, ok: bool, _: Duration) {
        if !ok {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// The probe's watcher: samples the migrator's session (`pid`) until
/// `done` for the longest single lock wait; cancels it, with the verdict,
/// once a wait outlasts `lock_limit` (its SQL overrides lock_timeout) or
/// the probe outlasts `deadline`.
fn watch_lock_wait(
    mut admin: Client,
    pid: i32,
    done: Arc<AtomicBool>,
    lock_limit: Duration,
    deadline: Duration,
) -> JoinHandle<(Duration, Option<ProbeEnd>)> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let (mut longest, mut since): (Duration, Option<Instant>) = (Duration::ZERO, None);
        // The transaction the current wait belongs to: a retry is a new
        // transaction, so two samples in different ones are two waits
        // (on a loaded machine a sample can miss the pause between).
        let mut waiting_in: Option<String> = None;
        // When a sample last saw the wait.
        let mut seen_at = Instant::now();
        while !done.load(Ordering::Relaxed) {
            let waiting: Option<String> = admin
            .query_opt(
                "SELECT xact_start::text FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
                &[&pid],
            )
            .ok()
            .flatten()
            .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default());
            match waiting {
                Some(x) => {
                    // The same wait goes on across a short gap: at
                    // deadlock_timeout (1 s, the cap plus the slack)
                    // the backend wakes to look for a deadlock and is
                    // not waiting while it looks; a sample that
                    // caught it there restarted the wait, and a
                    // migration that ignored its timeout went
                    // unnoticed on a loaded machine.
                    let same = since.is_some()
                        && waiting_in.as_ref() == Some(&x)
                        && seen_at.elapsed() < WAIT_GAP;
                    if !same {
                        since = Some(Instant::now());
                    }
                    waiting_in = Some(x);
                    seen_at = Instant::now();
                    if let Some(s) = since {
                        longest = longest.max(s.elapsed());
                    }
                    // The server's own clock, where it keeps one
                    // (`pg_locks.waitstart`, PostgreSQL 14+): how long the
                    // wait it is in now has lasted, whatever the spacing
                    // of these samples on a loaded machine (samples more
                    // than WAIT_GAP apart restarted the count above, and a
                    // migration that ignored its timeout was reported as
                    // a stall instead).
                    if let Ok(Some(row)) = admin.query_opt(
                        "SELECT extract(epoch FROM clock_timestamp() - min(waitstart))::float8 \
                         FROM pg_locks WHERE pid = $1 AND NOT granted HAVING min(waitstart) IS NOT NULL",
                        &[&pid],
                    ) {
                        let secs: f64 = row.get(0);
                        if secs.is_finite() && secs > 0.0 {
                            longest = longest.max(Duration::from_secs_f64(secs));
                        }
                    }
                }
                None if seen_at.elapsed() >= WAIT_GAP => since = None,
                None => {}
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
}

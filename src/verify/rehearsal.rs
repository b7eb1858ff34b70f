//! The measuring instruments of a rehearsal: applying a migration inside a
//! transaction while reading what it does (locks, rows touched, table
//! rewrites, WAL), a concurrent app workload that records its stalls, and
//! the long-transaction probe for lock timeouts.
//!
//! Measurements are taken *inside* the migration's transaction, before it
//! commits: `pg_locks` shows the locks it holds, `pg_stat_xact_user_tables`
//! the rows it touched so far, `pg_class.relfilenode` whether a table got a
//! new file (a rewrite). The migration runs on a fresh connection so that
//! the per-transaction statistics hold nothing else (PostgreSQL 15 keeps a
//! backend's unflushed counts from earlier transactions in that view).
//!
//! Checks turn these numbers into findings; nothing here judges.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Client;

use super::apps::AppVersion;
use super::replay;
use crate::db;

/// Lock modes (pg_locks spelling) that block the app's writes (which take
/// ROW EXCLUSIVE) — and, for ACCESS EXCLUSIVE, its reads (ACCESS SHARE).
pub const BLOCKS_WRITES: &[&str] = &[
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
];
pub const BLOCKS_READS: &[&str] = &["AccessExclusiveLock"];

/// What a migration did to one table that existed before it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableWork {
    pub table: String,
    pub rows_before: i64,
    /// The table got a new file: every row was rewritten.
    pub rewritten: bool,
    /// The table no longer exists afterwards.
    pub dropped: bool,
    pub seq_scans: i64,
    pub rows_scanned: i64,
    pub rows_inserted: i64,
    pub rows_updated: i64,
    pub rows_deleted: i64,
    /// Relation lock modes held on the table at the end of the migration.
    pub locks: Vec<String>,
    /// Indexes the migration built on this (existing) table.
    pub new_indexes: Vec<String>,
}

impl TableWork {
    pub fn blocks_writes(&self) -> bool {
        self.locks
            .iter()
            .any(|l| BLOCKS_WRITES.contains(&l.as_str()))
    }
    pub fn blocks_reads(&self) -> bool {
        self.locks
            .iter()
            .any(|l| BLOCKS_READS.contains(&l.as_str()))
    }
    /// The strongest lock held, for messages.
    pub fn strongest_lock(&self) -> Option<&str> {
        const ORDER: &[&str] = &[
            "AccessShareLock",
            "RowShareLock",
            "RowExclusiveLock",
            "ShareUpdateExclusiveLock",
            "ShareLock",
            "ShareRowExclusiveLock",
            "ExclusiveLock",
            "AccessExclusiveLock",
        ];
        self.locks
            .iter()
            .max_by_key(|l| ORDER.iter().position(|o| o == l))
            .map(String::as_str)
    }
}

/// One measured application of a migration.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The server's error when the migration failed (it was rolled back).
    pub error: Option<String>,
    pub sqlstate: Option<String>,
    /// Time spent executing the migration's SQL.
    pub duration: Duration,
    /// From the migration's first statement to its commit: how long the
    /// locks it took were held, at most.
    pub held: Duration,
    /// WAL written while it ran (server-wide, so an upper bound on a shared
    /// server).
    pub wal_bytes: i64,
    /// Tables that existed before, by name.
    pub tables: BTreeMap<String, TableWork>,
}

impl Applied {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
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

/// Applies `sql` to the database at `url` in one transaction, measuring.
/// `lock_timeout` is set for the transaction when given.
pub fn apply_measured(
    url: &str,
    sql: &str,
    lock_timeout: Option<Duration>,
    end: End,
) -> anyhow::Result<Applied> {
    // Sizes and files before, on a connection of their own (counting rows
    // would pollute the migration connection's statistics).
    let mut before: BTreeMap<String, (u32, i64, u32)> = BTreeMap::new();
    let indexes_before: Vec<u32>;
    {
        let mut c = db::connect(url)?;
        indexes_before = c
            .query("SELECT indexrelid FROM pg_index", &[])?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let tables: Vec<(String, u32, u32)> = c
            .query(
                "SELECT c.relname, c.oid, c.relfilenode FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 1",
                &[],
            )?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        for (name, oid, filenode) in tables {
            let rows: i64 = c
                .query_one(
                    &format!("SELECT count(*) FROM {}", db::quote_ident(&name)),
                    &[],
                )?
                .get(0);
            before.insert(name, (oid, rows, filenode));
        }
    }
    let mut c = db::connect(url)?;
    let mut out = Applied::default();
    c.batch_execute("BEGIN")?;
    if let Some(t) = lock_timeout {
        c.batch_execute(&format!("SET LOCAL lock_timeout = '{}ms'", t.as_millis()))?;
    }
    let lsn0 = wal_lsn(&mut c)?;
    let t0 = Instant::now();
    if let Err(e) = c.batch_execute(sql) {
        out.duration = t0.elapsed();
        out.held = out.duration;
        out.error = Some(replay::message(&e));
        out.sqlstate = e.code().map(|s| s.code().to_string());
        c.batch_execute("ROLLBACK")?;
        return Ok(out);
    }
    out.duration = t0.elapsed();
    let locks = c.query(
        "SELECT l.relation, l.mode FROM pg_locks l
         WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.granted",
        &[],
    )?;
    let stats = c.query(
        "SELECT relid, seq_scan, seq_tup_read, n_tup_ins, n_tup_upd, n_tup_del
         FROM pg_stat_xact_user_tables",
        &[],
    )?;
    let after: BTreeMap<u32, u32> = c
        .query(
            "SELECT oid, relfilenode FROM pg_class WHERE relkind = 'r'",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let indexes = c.query(
        "SELECT x.indrelid, i.relname, x.indexrelid
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
    for (name, (oid, rows, filenode)) in &before {
        let mut w = TableWork {
            table: name.clone(),
            rows_before: *rows,
            ..TableWork::default()
        };
        match after.get(oid) {
            None => w.dropped = true,
            Some(f) => w.rewritten = f != filenode,
        }
        for r in stats.iter().filter(|r| r.get::<_, u32>(0) == *oid) {
            w.seq_scans += r.get::<_, i64>(1);
            w.rows_scanned += r.get::<_, i64>(2);
            w.rows_inserted += r.get::<_, i64>(3);
            w.rows_updated += r.get::<_, i64>(4);
            w.rows_deleted += r.get::<_, i64>(5);
        }
        for r in locks.iter().filter(|r| r.get::<_, u32>(0) == *oid) {
            let mode: String = r.get(1);
            if !w.locks.contains(&mode) {
                w.locks.push(mode);
            }
        }
        for r in indexes
            .iter()
            .filter(|r| r.get::<_, u32>(0) == *oid && !indexes_before.contains(&r.get(2)))
        {
            w.new_indexes.push(r.get(1));
        }
        out.tables.insert(name.clone(), w);
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
    /// The longest single statement (a stall behind a lock shows here).
    pub max_stall: Duration,
    pub max_stall_statement: String,
    /// (app.statement, message) of failed executions, first few.
    pub errors: Vec<(String, String)>,
    pub error_count: u64,
}

/// Reader and writer threads running the live apps' statements in a loop
/// (writes rolled back) until stopped.
pub struct Workload {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<WorkloadStats>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workload {
    /// Starts one reader and one writer per live app. Statements that do
    /// not even prepare on the current schema are left out (compat reports
    /// them).
    pub fn start(url: &str, apps: &[&AppVersion]) -> anyhow::Result<Workload> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(WorkloadStats::default()));
        let mut threads = Vec::new();
        let ready = Arc::new(std::sync::Barrier::new(apps.len() * 2 + 1));
        for app in apps {
            for reads in [true, false] {
                let mut c = db::connect(url)?;
                let mut prepared = Vec::new();
                for (i, st) in app.set.statements().iter().enumerate() {
                    let handle = format!("rs_load_{i}");
                    if let Ok(p) = replay::prepare(&mut c, app, &st.name, &handle) {
                        if p.is_read == reads {
                            prepared.push(p);
                        }
                    }
                }
                let (stop, stats, ready) = (stop.clone(), stats.clone(), ready.clone());
                let app_name = app.name.clone();
                threads.push(std::thread::spawn(move || {
                    ready.wait();
                    while !stop.load(Ordering::Relaxed) {
                        if prepared.is_empty() {
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                        for p in &prepared {
                            let t = Instant::now();
                            let result = if reads {
                                replay::execute(&mut c, p)
                            } else {
                                c.batch_execute("BEGIN")
                                    .map_err(|e| (replay::Step::Execute, e))
                                    .and_then(|_| replay::execute(&mut c, p))
                            };
                            if !reads {
                                let _ = c.batch_execute("ROLLBACK");
                            }
                            let took = t.elapsed();
                            let mut s = stats.lock().unwrap();
                            s.statements += 1;
                            let name = format!("{app_name}.{}", p.statement);
                            if took > s.max_stall {
                                s.max_stall = took;
                                s.max_stall_statement = name.clone();
                            }
                            if let Err((_, e)) = result {
                                s.error_count += 1;
                                if s.errors.len() < 5 {
                                    s.errors.push((name, replay::message(&e)));
                                }
                            }
                        }
                    }
                }));
            }
        }
        ready.wait();
        Ok(Workload {
            stop,
            stats,
            threads,
        })
    }

    pub fn stop(self) -> WorkloadStats {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        let s = self.stats.lock().unwrap().clone();
        s
    }
}

/// The long-transaction probe: an app transaction holds the tables the
/// migration locks; the migration, with its lock timeout, must give up.
#[derive(Debug, Clone, Default)]
pub struct LockTimeoutProbe {
    /// Tables the long transaction held (ROW EXCLUSIVE, like an open write
    /// transaction).
    pub held_tables: Vec<String>,
    /// The migration completed anyway: its locks do not conflict.
    pub completed: bool,
    /// It failed with lock_not_available (55P03).
    pub gave_up: bool,
    /// It failed otherwise (message), or was cancelled by the watchdog.
    pub other_error: Option<String>,
    pub cancelled_by_watchdog: bool,
    /// How long the migration waited before giving up (or finishing).
    pub waited: Duration,
    /// The longest a reader of those tables stalled meanwhile.
    pub reader_stall: Duration,
    pub reader_queries: u64,
}

/// Runs the probe on the database at `url` (it is left unchanged: the
/// migration is rolled back in every case).
pub fn probe_lock_timeout(
    url: &str,
    sql: &str,
    tables: &[String],
    lock_timeout: Duration,
) -> anyhow::Result<LockTimeoutProbe> {
    let mut probe = LockTimeoutProbe {
        held_tables: tables.to_vec(),
        ..LockTimeoutProbe::default()
    };
    let mut holder = db::connect(url)?;
    holder.batch_execute("BEGIN")?;
    for t in tables {
        holder.batch_execute(&format!(
            "LOCK TABLE {} IN ROW EXCLUSIVE MODE",
            db::quote_ident(t)
        ))?;
    }
    // A reader of the held tables, like the app's get_by_id.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let mut c = db::connect(url)?;
        let stop = stop.clone();
        let tables = tables.to_vec();
        std::thread::spawn(move || -> (Duration, u64) {
            let (mut worst, mut n) = (Duration::ZERO, 0);
            while !stop.load(Ordering::Relaxed) {
                for t in &tables {
                    let t0 = Instant::now();
                    let _ =
                        c.batch_execute(&format!("SELECT 1 FROM {} LIMIT 1", db::quote_ident(t)));
                    worst = worst.max(t0.elapsed());
                    n += 1;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (worst, n)
        })
    };
    let mut migrator = db::connect(url)?;
    let pid: i32 = migrator.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    // The watchdog cancels a migration that ignores its lock timeout (e.g.
    // its SQL sets lock_timeout = 0), so a rehearsal always ends.
    let deadline = lock_timeout + Duration::from_secs(5);
    let done = Arc::new(AtomicBool::new(false));
    let cancelled = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (done, cancelled) = (done.clone(), cancelled.clone());
        let mut admin = db::connect(url)?;
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !done.load(Ordering::Relaxed) {
                if t0.elapsed() > deadline {
                    cancelled.store(true, Ordering::Relaxed);
                    let _ = admin.execute("SELECT pg_cancel_backend($1)", &[&pid]);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // Let the reader get going before the migration queues.
    std::thread::sleep(Duration::from_millis(50));
    migrator.batch_execute(&format!(
        "BEGIN; SET LOCAL lock_timeout = '{}ms'",
        lock_timeout.as_millis()
    ))?;
    let t0 = Instant::now();
    let result = migrator.batch_execute(sql);
    probe.waited = t0.elapsed();
    done.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    probe.cancelled_by_watchdog = cancelled.load(Ordering::Relaxed);
    match result {
        Ok(()) => probe.completed = true,
        Err(e) if e.code().map(|c| c.code()) == Some("55P03") => probe.gave_up = true,
        Err(e) => probe.other_error = Some(replay::message(&e)),
    }
    let _ = migrator.batch_execute("ROLLBACK");
    holder.batch_execute("ROLLBACK")?;
    stop.store(true, Ordering::Relaxed);
    let (stall, n) = reader.join().unwrap_or_default();
    probe.reader_stall = stall;
    probe.reader_queries = n;
    Ok(probe)
}

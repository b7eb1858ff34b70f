//! Measuring a `-- rollsafe:no-transaction` file (or one with batched
//! updates) while it runs, as `migrate` applies it: statement by statement
//! through [`apply::outside_transaction`], each committing on its own.
//!
//! Once such a statement ends its locks are gone and its per-transaction
//! counters with them, so each is watched *while it runs*:
//! - a second connection samples `pg_locks` for the migration's backend
//!   every few milliseconds ([`sampler::LockSampler`]); a lock is known
//!   only if a sample saw it, and a statement no sample saw holding a
//!   lock is reported as not observed, never as lock-free;
//! - the relfilenodes of the existing tables and their indexes before and
//!   after (a new one: every row rewritten, or the index rebuilt);
//! - its work from the cumulative table statistics, before and after, with
//!   the migration backend's pending counts flushed first
//!   (`pg_stat_force_next_flush()`, PostgreSQL 15+; before 15 there is no
//!   way to flush on demand, and the figure is reported unavailable). The
//!   live apps' sessions do not count there (`track_counts` off), so the
//!   difference is the statement's.
//!
//! A file that writes its own `BEGIN` … `COMMIT` runs as written
//! ([`apply::Block`]): inside its block nothing is asked on the
//! migration's connection (a query there would take the snapshot its
//! `SET TRANSACTION` must precede, and fails once the block is aborted, so
//! the statement that failed first is the one named). Each statement's
//! locks are still sampled while it runs (a block keeps them to its end);
//! the block's work, new files and index builds are read once its end made
//! them visible, on the statement that ends it.
//!
//! The live apps' waits on it are the workload's ([`super::Workload`]).
//!
//! Floor `measure`: part of the rehearsal instrument, for a file that runs outside a transaction.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use postgres::Client;

use super::{
    cumulative_work, failed, files_and_indexes, measuring_session, post_apply, wal_lsn, wal_since,
    Existing, IndexesBefore,
};
use crate::db;
use crate::migrate::apply::{self, Block, Step, StepObserver};
use crate::pg::lock_modes;
use crate::sessions::sampler::{self, LockSampler};
use crate::verify::evidence::{Applied, Observed, StatementRun, Work};

/// Why work is not measured before PostgreSQL 15.
const NO_FLUSH: &str = "this PostgreSQL (before 15) cannot flush a backend's table statistics on demand (pg_stat_force_next_flush), so the rows read and written by statements outside a transaction were not measured";

/// Applies `steps` one by one outside a transaction on the database at
/// `url`, measuring each while it runs (`split_exact`: whether the grammar
/// split the migration's file exactly). A failure leaves the statements
/// before it applied. Batched updates are not run here
/// (`migrate::backfill`).
pub fn apply(
    url: &str,
    migrator_url: &str,
    steps: &[Step],
    split_exact: bool,
    lock_timeout: Option<Duration>,
) -> anyhow::Result<Applied> {
    let (existing, indexes_before, mut c) = measuring_session(url, migrator_url)?;
    if let Some(t) = lock_timeout {
        c.batch_execute(&format!("SET lock_timeout = '{}ms'", t.as_millis()))?;
    }
    let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    let flushable = sampler::version_num(&mut c)? >= 150000;
    let mut admin = db::connect(url)?;
    sampler::name_session(&mut admin, sampler::PROBE)?;
    let lsn0 = wal_lsn(&mut c)?;
    let t0 = Instant::now();
    let mut watch = Watch {
        existing: &existing,
        indexes_before,
        pid,
        flushable,
        admin: Some(admin),
        sampler: None,
        started: None,
        before: Before::default(),
        runs: Vec::new(),
        error: None,
    };
    let result = apply::outside_transaction(&mut c, steps, None, &mut watch);
    if let Some(e) = watch.error {
        return Err(e);
    }
    let mut out = Applied {
        split_exact,
        outside_transaction: true,
        work_unmeasured: (!flushable).then(|| NO_FLUSH.to_string()),
        statements: watch.runs,
        duration: t0.elapsed(),
        started: Some(t0),
        ..Applied::default()
    };
    out.held = out.duration;
    if let Err(e) = result {
        failed(&mut out, &e, steps, &existing);
        return Ok(out);
    }
    out.wal_bytes = wal_since(&mut c, &lsn0)?;
    out.tables = post_apply(&mut c, &existing, &out.statements)?;
    Ok(out)
}

/// Files, counters and index names before one statement.
#[derive(Default)]
struct Before {
    /// relfilenode of each existing table and of each index on one.
    files: BTreeMap<u32, u32>,
    work: Option<BTreeMap<u32, Work>>,
}

/// The observer that measures each statement while it runs.
struct Watch<'a> {
    existing: &'a [Existing],
    /// The indexes before the next statement.
    indexes_before: IndexesBefore,
    pid: i32,
    flushable: bool,
    /// The sampler's connection while no statement runs.
    admin: Option<Client>,
    sampler: Option<LockSampler>,
    /// When the statement being watched started (after its sampler).
    started: Option<Instant>,
    before: Before,
    runs: Vec<StatementRun>,
    /// The first measurement that failed (the rehearsal's error).
    error: Option<anyhow::Error>,
}

/// (table oid, index oid, index name, relfilenode) of every index on an
/// existing table.
type IndexFile = (u32, u32, String, u32);

impl Watch<'_> {
    /// The migration backend's counts flushed, then the cumulative ones.
    fn counters(&self, c: &mut Client) -> anyhow::Result<Option<BTreeMap<u32, Work>>> {
        if !self.flushable {
            return Ok(None);
        }
        c.batch_execute("SELECT pg_stat_force_next_flush()")?;
        Ok(Some(cumulative_work(c, self.existing)?))
    }

    fn files(&self, c: &mut Client) -> anyhow::Result<(BTreeMap<u32, u32>, Vec<IndexFile>)> {
        let (tables, indexes) = files_and_indexes(c, self.existing)?;
        let indexes = indexes
            .into_iter()
            .map(|(table, name, index, file)| (table, index, name, file))
            .collect();
        Ok((tables, indexes))
    }

    fn name_of(&self, oid: u32) -> Option<&str> {
        self.existing
            .iter()
            .find(|t| t.oid == oid)
            .map(|t| t.name.as_str())
    }

    fn start(&mut self, c: &mut Client) -> anyhow::Result<()> {
        let work = self.counters(c)?;
        let (mut files, indexes) = self.files(c)?;
        files.extend(indexes.iter().map(|(_, i, _, f)| (*i, *f)));
        self.before = Before { files, work };
        self.start_sampling()
    }

    /// Starts sampling the migration backend's locks, from the other
    /// connection (nothing is asked on the migration's own).
    fn start_sampling(&mut self) -> anyhow::Result<()> {
        let admin = self
            .admin
            .take()
            .ok_or_else(|| anyhow::anyhow!("the lock sampler's connection was lost"))?;
        self.sampler = Some(LockSampler::start(admin, self.pid)?);
        self.started = Some(Instant::now());
        Ok(())
    }

    fn finish(
        &mut self,
        c: &mut Client,
        step: &Step,
        took: Duration,
    ) -> anyhow::Result<StatementRun> {
        let (mut run, observed) = self.finish_sampling(step, took)?;
        self.read_effects(c, &mut run)?;
        Ok(Self::documented_locks(
            run,
            observed,
            &step.statement.text,
            took,
        ))
    }

    /// The statement's run as the lock samples saw it, nothing asked on
    /// the migration's connection: a statement inside the file's own
    /// transaction block.
    fn finish_sampled(&mut self, step: &Step, took: Duration) -> anyhow::Result<StatementRun> {
        let (mut run, observed) = self.finish_sampling(step, took)?;
        run.observed = Some(observed);
        Ok(run)
    }

    /// Stops the sampler: the run with the locks it saw.
    fn finish_sampling(
        &mut self,
        step: &Step,
        took: Duration,
    ) -> anyhow::Result<(StatementRun, Observed)> {
        let sampler = self
            .sampler
            .take()
            .ok_or_else(|| anyhow::anyhow!("the lock sampler was not running"))?;
        let (admin, held) = sampler.stop()?;
        self.admin = Some(admin);
        let st = &step.statement;
        let mut run = StatementRun {
            line: st.line,
            column: st.column,
            file: step.script.clone(),
            excerpt: st.excerpt(60),
            duration: took,
            started: self.started.take(),
            ..StatementRun::default()
        };
        let mut observed = Observed {
            samples: held.samples,
            ..Observed::default()
        };
        for l in &held.locks {
            if let Some(name) = self.name_of(l.relation) {
                let modes = run.locks_after.entry(name.to_string()).or_default();
                if !modes.contains(&l.mode) {
                    modes.push(l.mode.clone());
                }
                let span = observed.held.entry(name.to_string()).or_default();
                *span = (*span).max(l.span);
            }
        }
        Ok((run, observed))
    }

    /// What the statement (or the file's block it ends) did since
    /// [`Watch::start`]: its work, the tables it rewrote, the indexes it
    /// built.
    fn read_effects(&mut self, c: &mut Client, run: &mut StatementRun) -> anyhow::Result<()> {
        if let (Some(before), Some(after)) = (self.before.work.take(), self.counters(c)?) {
            for t in self.existing {
                if let (Some(a), Some(b)) = (after.get(&t.oid), before.get(&t.oid)) {
                    let w = a.minus(*b);
                    if w != Work::default() {
                        run.work.insert(t.name.clone(), w);
                    }
                }
            }
        }
        let (tables, indexes) = self.files(c)?;
        for t in self.existing {
            if let (Some(now), Some(was)) = (tables.get(&t.oid), self.before.files.get(&t.oid)) {
                if now != was {
                    run.rewrote.push(t.name.clone());
                }
            }
        }
        let rows: Vec<_> = indexes
            .iter()
            .map(|(t, i, n, f)| (*t, n.clone(), *i, *f))
            .collect();
        let builds = self.indexes_before.built(&rows);
        self.indexes_before.extend(&rows);
        for (table, index, name, file) in indexes {
            let Some(table) = self.name_of(table) else {
                continue;
            };
            // Built here (an oid never seen: CREATE INDEX, or REINDEX
            // CONCURRENTLY's replacement), or rebuilt in place (REINDEX,
            // VACUUM FULL, CLUSTER: a new file under the same oid).
            let built = match self.before.files.get(&index) {
                None => builds.contains(&index),
                Some(was) => *was != file && !run.rewrote.iter().any(|t| t == table),
            };
            if built {
                run.built_indexes.push((table.to_string(), name));
            }
        }
        Ok(())
    }

    /// Too brief for any sample, yet its rewrite or index build is
    /// measured: the manual says which lock that took, on which table.
    fn documented_locks(
        mut run: StatementRun,
        mut observed: Observed,
        text: &str,
        took: Duration,
    ) -> StatementRun {
        if run.locks_after.is_empty() {
            if let Some((mode, kind)) = lock_modes::documented(text) {
                let tables: Vec<String> = run
                    .rewrote
                    .iter()
                    .chain(run.built_indexes.iter().map(|(t, _)| t))
                    .cloned()
                    .collect();
                for t in tables {
                    run.locks_after.insert(t.clone(), vec![mode.to_string()]);
                    observed.held.insert(t, took);
                    observed.documented = Some(kind);
                }
            }
        }
        run.observed = Some(observed);
        run
    }
}

impl StepObserver for Watch<'_> {
    fn before(&mut self, client: &mut Client, _index: usize, step: &Step) {
        if self.error.is_none() {
            // A block's state before it is read before its BEGIN.
            let started = match step.block {
                Block::Outside | Block::Opens => self.start(client),
                Block::Inside | Block::Closes => self.start_sampling(),
            };
            if let Err(e) = started {
                self.error = Some(e.context("preparing to measure a statement"));
            }
        }
    }

    fn after(&mut self, client: &mut Client, _index: usize, step: &Step, ok: bool, took: Duration) {
        if self.error.is_some() {
            return;
        }
        // The block's effects are visible once its end committed them.
        let measured = match step.block {
            Block::Outside => self.finish(client, step, took),
            Block::Closes if ok => self.finish(client, step, took),
            Block::Opens | Block::Inside | Block::Closes => self.finish_sampled(step, took),
        };
        match measured {
            Ok(run) => self.runs.push(run),
            Err(e) => self.error = Some(e.context("measuring a statement")),
        }
    }
}

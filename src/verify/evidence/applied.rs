//! What one measured apply of a migration did, statement by statement:
//! the locks each statement held, the work it did per table (rows, blocks,
//! passes), whether a table got a new file, and how long it took. Measured
//! by [`crate::verify::measure::rehearsal`]; judged by the checks.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::workload::{AppWait, WorkloadStats};
use crate::pg::lock_modes;

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
    pub fn plus(self, o: Work) -> Work {
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

    pub fn minus(self, o: Work) -> Work {
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
    /// The file of a statement of a callback its tool runs around the
    /// migration (Flyway's `beforeEachMigrate`), in which `line` is; None
    /// for the migration's own file. As a reviewer sees it once
    /// [`Applied::set_files`] ran.
    pub file: Option<String>,
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

/// Whether `statement` is one that takes no lock on any relation:
/// transaction control that runs no deferred work (`COMMIT` may fire
/// deferred constraint triggers, which lock the tables they check, so it
/// is not one), and session settings (`SET CONSTRAINTS` aside, which may
/// run those checks at once).
fn locks_no_relation(statement: &str) -> bool {
    let mut words = statement
        .split_whitespace()
        .map(|w| w.trim_end_matches(';').to_ascii_uppercase());
    match words.next().as_deref() {
        Some(
            "BEGIN" | "START" | "SAVEPOINT" | "RELEASE" | "ROLLBACK" | "ABORT" | "RESET" | "SHOW",
        ) => true,
        Some("SET") => !matches!(words.next().as_deref(), Some("CONSTRAINTS")),
        _ => false,
    }
}

impl StatementRun {
    /// Why its locks are unknown: it ran outside a transaction and no
    /// sample saw it hold a lock on an existing table (too fast to be
    /// seen, or it took none: sampling cannot tell which).
    /// None too for a statement that by its nature locks no relation
    /// (opening a transaction, a savepoint, a session setting): no sample
    /// is needed to know it took none.
    pub fn locks_unobserved(&self) -> Option<String> {
        let o = self.observed.as_ref()?;
        (self.locks_after.is_empty() && !locks_no_relation(&self.excerpt)).then(|| {
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
    /// How long the same statements ran in the forced failure's
    /// transaction just before this apply, on the same database (from
    /// its start to its last statement's end): a second measurement of
    /// work that does not grow with a table, so a busy machine's stall in
    /// one of them is not taken for the migration's cost. None when the
    /// forced failure did not reach its end (or did not run).
    pub forced_failure_took: Option<Duration>,
}

impl Applied {
    /// The tables a migration's apply on the empty database touched
    /// (what the generator's reach starts from, `crate::seed::reach`): locked,
    /// rewrote, built an index on, read or wrote (None when it failed there).
    pub fn touched(&self) -> Option<BTreeSet<String>> {
        if !self.ok() {
            return None;
        }
        let mut out = BTreeSet::new();
        for (name, work) in &self.tables {
            let touched = !work.locks.is_empty()
                || work.rewritten
                || work.dropped
                || !work.new_indexes.is_empty()
                || work.work != Default::default();
            if touched {
                out.insert(name.clone());
            }
        }
        for st in &self.statements {
            let named = st
                .locks_after
                .keys()
                .chain(&st.rewrote)
                .chain(st.work.keys())
                .chain(st.built_indexes.iter().map(|(t, _)| t));
            out.extend(named.cloned());
        }
        Some(out)
    }

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

    /// Sets [`Applied::file`] to `path` of the migration's `file`, and
    /// each callback statement's file to `path` of its own.
    pub fn set_files(&mut self, path: impl Fn(&str) -> String, file: &str) {
        self.file = path(file);
        for f in self.statements.iter_mut().filter_map(|s| s.file.as_mut()) {
            *f = path(f);
        }
    }

    /// Where statement `i` is in the file (the file's first statement when
    /// the grammar could not split it), or in its callback's.
    pub fn location(&self, i: usize) -> Option<crate::report::Location> {
        let s = self.statements.get(i)?;
        Some(crate::report::Location {
            file: s.file.clone().unwrap_or_else(|| self.file.clone()),
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
                    script: st.file.as_deref().map(file_name),
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
            .map(|w| {
                let blocker = self.blocker_of(w).map(|i| &self.statements[i]);
                // A wait behind a statement began once that statement did:
                // a sample is placed at the time it was sent, early by its
                // trip to the server (milliseconds on a loaded machine).
                let began = blocker
                    .and_then(|s| s.started)
                    .map_or(w.began, |s| w.began.max(s));
                crate::report::AppWaitRow {
                    statement: w.statement.clone(),
                    table: w.table.clone(),
                    mode: lock_modes::sql_name(&w.mode),
                    start_ms: report_ms(began.saturating_duration_since(t0)),
                    // (Its end stays where it was seen.)
                    ms: report_ms((w.began + w.waited).saturating_duration_since(began)),
                    behind_line: blocker.map(|s| s.line),
                }
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
            Some(StatementRun {
                file: Some(file), ..
            }) => {
                let s = &self.statements[i];
                format!(
                    "its callback {} line {}: {}",
                    file_name(file),
                    s.line,
                    s.excerpt
                )
            }
            Some(s) if self.split_exact => format!("line {}: {}", s.line, s.excerpt),
            _ => "the migration".to_string(),
        }
    }
}

/// `beforeEachMigrate__timeouts.sql` of a callback's path, for messages
/// (its location keeps the whole path).
fn file_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .map_or(path.to_string(), |n| n.to_string_lossy().into_owned())
}

/// A duration in ms to 0.1 ms, as the report writes them.
fn report_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::evidence::workload::AppWait;

    /// Sampling that saw no lock is a skip only where a lock was possible.
    #[test]
    fn statements_that_lock_no_relation_need_no_sample() {
        for none in [
            "BEGIN",
            "begin;",
            "START TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "SET LOCAL lock_timeout = '5s'",
            "SAVEPOINT s1",
            "RESET search_path",
        ] {
            assert!(locks_no_relation(none), "{none}");
        }
        for some in [
            "COMMIT",
            "SET CONSTRAINTS ALL IMMEDIATE",
            "CREATE INDEX CONCURRENTLY i ON t (a)",
            "UPDATE t SET a = 1",
        ] {
            assert!(!locks_no_relation(some), "{some}");
        }
        let unseen = |excerpt: &str| StatementRun {
            excerpt: excerpt.into(),
            observed: Some(Observed::default()),
            ..StatementRun::default()
        };
        assert!(unseen("SET LOCAL lock_timeout = '5s'")
            .locks_unobserved()
            .is_none());
        assert!(unseen("ALTER TABLE t ADD COLUMN b int")
            .locks_unobserved()
            .is_some());
    }

    /// A wait sampled before the statement it waits behind began (the
    /// sample was sent, then the server ran it late on a loaded machine)
    /// starts with that statement; its end stays where it was seen.
    #[test]
    fn an_app_wait_does_not_begin_before_the_statement_it_waits_behind() {
        let t0 = Instant::now();
        let build = StatementRun {
            line: 2,
            started: Some(t0 + Duration::from_millis(10)),
            locks_after: BTreeMap::from([("orders".to_string(), vec!["ShareLock".to_string()])]),
            ..Default::default()
        };
        let applied = Applied {
            started: Some(t0),
            held: Duration::from_millis(80),
            statements: vec![build],
            ..Default::default()
        };
        let workload = WorkloadStats {
            waits: vec![AppWait {
                statement: "shop.add_order (write)".into(),
                table: "orders".into(),
                mode: "RowExclusiveLock".into(),
                began: t0 + Duration::from_millis(2),
                waited: Duration::from_millis(60),
            }],
            ..Default::default()
        };
        let rows = applied.app_wait_rows(&workload);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].behind_line, Some(2));
        assert!((rows[0].start_ms - 10.0).abs() < 0.01, "{:?}", rows[0]);
        assert!((rows[0].ms - 52.0).abs() < 0.01, "{:?}", rows[0]);
    }
}

//! Seeding any schema: rows generated from the catalogue of the connected
//! database, for projects that ship no seed file of their own.
//!
//! What it does, per table of every schema ([`crate::tables`]: rollsafe's
//! and refinery's own tables left out; a partitioned table through its
//! parent, so each row lands in its partition), in foreign-key order:
//!
//! - one set-based `INSERT … SELECT … FROM generate_series(1, N) AS s(g)`,
//!   so a million rows cost one statement, not a million round trips. Every
//!   generated value is a function of the row's index `i = g + offset`
//!   (the offset clears the rows already there), which makes values
//!   reproducible, injective where a UNIQUE key needs them to be, and
//!   computable for a parent row too (a self-referencing key);
//! - foreign keys point at rows that exist: the referenced table's key rows
//!   are numbered (`row_number() OVER (ORDER BY key)`) and row `g` takes
//!   number `(g - 1) % n`. A UNIQUE key made only of foreign-key columns
//!   (a junction table's primary key) walks the combinations instead, and
//!   the table gets at most as many rows as there are combinations. Keys
//!   that share a column (a tenant carried by two composite keys and a
//!   plain one) are joined together (`overlap`): one drives, the others
//!   pick among the parent rows that agree with it on the shared columns,
//!   NULL where a nullable key has none, and the driving key keeps only
//!   rows with a partner where the other key may not be NULL. Where
//!   the session may (`fk_checks`), a table without INSERT triggers or
//!   rules gets its rows past the server's per-row key checks, every key
//!   then checked once for all of them (2.6x faster for two keys);
//! - values are chosen per column from a few *families* of its type
//!   (`i`, `0`, `1`, `-i`, `'name_' || i`, the literals its CHECKs
//!   mention, …): the first one that the type (domain CHECKs, varchar
//!   lengths, numeric precision) accepts on a sample of indexes, then, for
//!   the table's CHECK constraints, other combinations until every CHECK
//!   holds on the sample. When none does, the table is not seeded and the
//!   result names the constraint;
//! - columns with defaults are left to them (serial, identity, `now()`),
//!   except where a UNIQUE or foreign key needs a value rollsafe computes;
//!   a sequence behind a column rollsafe filled is moved past the rows.
//!
//! Then the write statements of each app version run a few times with
//! generated parameters (`-- param:` expressions where declared, as the
//! replay evaluates them), so rows also look like the app's own.
//!
//! Every table is its own transaction: a table that fails leaves nothing
//! behind and is reported, the others are seeded. What it is not: a
//! faithful data distribution. Values are plausible and valid, not
//! production-like.
//!
//! A UNIQUE key holds as many rows as its values allow: a regular
//! expression's capacity is the product of its parts (`pattern`), a short
//! `varchar`'s, an enum's, a small integer range's likewise; a table asked
//! for more gets what its key holds, said in its note, not a failure.
//!
//! The parts, in the order a seeding runs them: `catalogue` (what each
//! table holds, through the one catalogue reader), `order` (parents
//! first), `plan` (what each column gets in the INSERT), `table` (seeding
//! one table: the plan's steps), `overlap` (foreign keys sharing columns:
//! the order they are joined in, the rows that agree), `rules` (columns
//! of which exactly one is set take turns), `families` (the values of
//! each kind of type, a table), `pattern` (values of a regular
//! expression), `json` (documents carrying what their readers read),
//! `partition` (values some partition takes), `fit` (the values its types
//! and CHECKs accept), `search` (a CHECK of any form met by search, the
//! server judging the candidates), `insert` (the rows), `fk_checks` (past the per-row
//! foreign-key checks, then checked set-wise), `app_writes` (the apps'
//! own), `statistics` (which relations to ANALYZE afterwards: those whose
//! statistics the seeding or the migration before it made stale);
//! `param_values` (the same families for one column outside a bulk
//! INSERT: a captured write's `-- param:` values).

mod app_writes;
mod catalogue;
mod families;
mod family;
mod fit;
mod fk_checks;
mod insert;
mod json;
mod order;
mod overlap;
mod param_values;
mod partition;
mod pattern;
mod plan;
mod probe;
mod rules;
mod schedule;
mod search;
mod statistics;
mod table;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use postgres::{Client, GenericClient};
use thiserror::Error;

use crate::app::replay;
use crate::app::AppVersion;
use app_writes::run_app_writes;
use catalogue::{read_tables, ForeignKey, Table, TypeCache};
use insert::fill_broken_reference;
use order::{seeding_order, Edge};
use plan::TableResult;
use table::{seed_table, Cut};

/// How many times each app write statement runs after the bulk rows.
const APP_WRITE_RUNS: usize = 3;
/// Indexes tried per candidate: the first few, and the last two (the
/// widest values: digits, overflow).
const SAMPLE_HEAD: u64 = 12;
/// Combinations tried for one CHECK constraint before giving up on it.
const MAX_COMBINATIONS: usize = 400;
/// Families kept per column (the search cost grows with their product).
const MAX_FAMILIES: usize = 14;
/// Stand-in for the row index in a value template (a byte no SQL text of
/// ours contains), replaced by the index expression when rendered.
const I: &str = "\u{1}i\u{1}";

/// Rows per table: a default and per-table overrides (`--rows N`,
/// `--rows TABLE=N`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowCounts {
    pub default: u64,
    pub per_table: BTreeMap<String, u64>,
    /// Only tables that hold no rows yet get any (rows written before, by
    /// the apps' own seeds, are left as they are).
    pub only_empty: bool,
    /// Only these tables get rows (by [`crate::tables::UserTable::name`],
    /// a partitioned table by its root), with the tables their foreign
    /// keys reference, transitively: what a migration reaches
    /// ([`crate::seed::reach`]). None: every table. When a table of the
    /// set holds a CHECK or default that calls a project function which
    /// may read another table, every table gets rows after all.
    pub reach: Option<BTreeSet<String>>,
    /// Whether the seeding ends with `ANALYZE` of what it left stale.
    pub statistics: Statistics,
}

/// What a seeding leaves of the planner statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statistics {
    /// As a whole-database `ANALYZE` would leave them (see the `statistics`
    /// module): the plans, the scans judged against `relpages` and the
    /// size predictions read later rest on them.
    Refreshed,
    /// As they were: nothing reads this database's plans or sizes (compat's
    /// copy, which replays statements and reads rows back). Its `ANALYZE`
    /// of two 10 000-row tables after 50 more rows was 100 to 225 ms of the
    /// shipped set's critical path.
    Unread,
}

impl Default for RowCounts {
    fn default() -> Self {
        RowCounts::new(super::DEFAULT_ROWS)
    }
}

/// A `--rows` value that is neither a count nor `TABLE=COUNT`.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("`--rows {0}` is not a row count; give a number (`--rows 10000`) or a table and a number (`--rows orders=500000`)")]
pub struct RowCountsError(pub String);

impl RowCounts {
    pub fn new(default: u64) -> RowCounts {
        RowCounts {
            default,
            per_table: BTreeMap::new(),
            only_empty: false,
            reach: None,
            statistics: Statistics::Refreshed,
        }
    }

    /// The same counts for the tables of `reach` and the tables they
    /// reference; the others get none.
    pub fn reaching(mut self, reach: BTreeSet<String>) -> RowCounts {
        self.reach = Some(reach);
        self
    }

    /// The same counts for the tables that hold no rows yet; the others
    /// get none.
    pub fn only_empty(mut self) -> RowCounts {
        self.only_empty = true;
        self
    }

    /// The same counts with `table` set to `rows`.
    pub fn with(mut self, table: &str, rows: u64) -> RowCounts {
        self.per_table.insert(table.to_string(), rows);
        self
    }

    /// Applies one `--rows` argument: `N` sets the default, `TABLE=N` one
    /// table.
    pub fn apply(&mut self, arg: &str) -> Result<(), RowCountsError> {
        let bad = || RowCountsError(arg.to_string());
        let count = |s: &str| s.trim().replace('_', "").parse::<u64>().map_err(|_| bad());
        match arg.split_once('=') {
            None => self.default = count(arg)?,
            Some((table, n)) if !table.trim().is_empty() => {
                self.per_table.insert(table.trim().to_string(), count(n)?);
            }
            Some(_) => return Err(bad()),
        }
        Ok(())
    }

    /// Rows to write into `table`.
    pub fn for_table(&self, table: &str) -> u64 {
        self.per_table.get(table).copied().unwrap_or(self.default)
    }
}

pub use super::generated::{AppWrites, Generated, Reached, SeededTable, UnseededTable};
pub use param_values::{Columns, ParamValue, MADE};
pub use schedule::table_reading_functions;
pub use schedule::MoreSessions;

/// Seeds every table ([`crate::tables`]) with generated rows (`rows`), then
/// runs the write statements of `apps` a few times. Only a lost connection
/// or an unreadable catalogue is an error; a table that cannot be seeded
/// is reported in [`Generated::unseeded`]. `more`: another session like
/// `c`, for tables that may be written at the same time ([`schedule`]).
pub fn seed(
    c: &mut Client,
    more: MoreSessions<'_>,
    rows: &RowCounts,
    apps: &[&AppVersion],
) -> anyhow::Result<Generated> {
    // The generator's statements join generate_series to numbered parent
    // rows on an expression the planner cannot estimate (it guesses
    // millions of rows), which buys them JIT compilation with inlining
    // and optimisation: measured on a 39-table fixture, ~0.9 s of a
    // 1.1 s INSERT of 10 000 rows was compiling it. Off for this session
    // while it seeds, as it was after; a migration's own statements are
    // measured with the server's setting.
    let jit: String = c.query_one("SELECT current_setting('jit')", &[])?.get(0);
    c.batch_execute("SET jit = off")?;
    let out = seed_tables(c, more, rows, apps);
    c.execute("SELECT set_config('jit', $1, false)", &[&jit])?;
    out
}

/// [`seed`] without its session setting.
fn seed_tables(
    c: &mut Client,
    more: MoreSessions<'_>,
    rows: &RowCounts,
    apps: &[&AppVersion],
) -> anyhow::Result<Generated> {
    let mut out = Generated::default();
    let clock = std::time::Instant::now();
    let since = seeding_starts(c)?;
    let mut types = TypeCache::default();
    let tables = read_tables(c, &mut types)?;
    let edges = foreign_key_edges(&tables);
    let names: Vec<String> = tables.iter().map(|t| t.name.clone()).collect();
    let order = seeding_order(&names, &edges);
    out.warnings.extend(order.warnings.iter().cloned());
    let wanted = match &rows.reach {
        Some(reach) => reached(c, &tables, &edges, reach)?,
        None => None,
    };
    if let Some(w) = &wanted {
        out.reach = Some(Reached {
            tables: order
                .tables
                .iter()
                .filter(|k| w.contains(k))
                .map(|&k| tables[k].name.clone())
                .collect(),
            of: tables.len(),
        });
    }
    let candidates: Vec<usize> = (0..tables.len())
        .filter(|k| wanted.as_ref().map_or(true, |w| w.contains(k)))
        .collect();
    let empty_at_start = empty_tables(c, &tables, &candidates)?;
    let seeding = Seeding {
        tables: &tables,
        parents: tables.iter().map(|t| (t.oid, t)).collect(),
        edges: &edges,
        order: &order,
        rows,
        empty_at_start,
        wanted,
        bypass: fk_checks::FkCheckBypass::detect(c)?,
        app_statements: apps
            .iter()
            .flat_map(|a| a.set.statements().iter().map(|s| s.sql.clone()))
            .collect(),
    };
    // The transaction that wrote each table's rows, to find them again.
    let mut writers: HashMap<usize, String> = HashMap::new();
    let written = schedule::seed_all(&seeding, c, more)?;
    out.sessions = 1 + usize::from(written.opened.is_some());
    for (k, result) in written.tables {
        out.record(k, result, &mut writers);
    }
    out.warnings.extend(written.warnings);
    // A key set aside to break a cycle now points at the rows its parent
    // got since.
    for &e in &order.broken {
        let edge = &edges[e];
        let child = &tables[edge.child];
        let (Some(xid), Some(fk)) = (
            writers.get(&edge.child),
            child.fks.iter().find(|f| f.name == edge.constraint),
        ) else {
            continue;
        };
        if edge.breakable {
            if let Err(message) = fill_broken_reference(c, child, fk, &tables[edge.parent], xid)? {
                out.warnings.push(format!(
                    "{}: foreign key {} was left NULL to break a cycle and could not be filled in afterwards: {message}",
                    child.name, fk.name
                ));
            }
        }
    }
    for app in apps {
        out.app_writes.extend(run_app_writes(c, app, &mut types)?);
    }
    log::debug!("generate: tables written in {:?}", clock.elapsed());
    refresh_materialized_views(c, &mut out)?;
    if rows.statistics == Statistics::Unread {
        return Ok(out);
    }
    let mut stale = statistics::stale_relations(c, &since)?;
    if let Some(w) = &seeding.wanted {
        // Statistics of the tables a migration does not reach play no
        // part in its rehearsal (it neither reads nor plans them).
        let unreached: BTreeSet<&str> = (0..tables.len())
            .filter(|k| !w.contains(k))
            .map(|k| tables[k].qualified.as_str())
            .collect();
        stale.retain(|r| !unreached.contains(r.as_str()));
    }
    analyze(c, written.opened, &stale)?;
    log::debug!(
        "generate: analyzed {} relations ({}), at {:?}",
        stale.len(),
        stale.join(", "),
        clock.elapsed()
    );
    Ok(out)
}

/// Marks where a seeding begins: every row it writes is newer than the
/// transaction this returns ([`analyze_stale`] finds them by it).
pub fn seeding_starts(c: &mut Client) -> Result<String, postgres::Error> {
    Ok(c.query_one("SELECT pg_current_xact_id()::xid::text", &[])?
        .get(0))
}

/// ANALYZE of the relations whose statistics a seeding that began at
/// `since` ([`seeding_starts`]) left stale ([`statistics`]), instead of
/// the whole database: on the shipped set a whole-database ANALYZE (the
/// system catalogs included) took 145 ms after 10 000 rows and 84 to
/// 222 ms after the compat replays' 50. The relations analysed.
pub fn analyze_stale(c: &mut Client, since: &str) -> anyhow::Result<Vec<String>> {
    let stale = statistics::stale_relations(c, since)?;
    analyze(c, None, &stale)?;
    Ok(stale)
}

/// The tables among `ks` (by index) that hold no row, in one round trip.
fn empty_tables(
    c: &mut Client,
    tables: &[Table],
    ks: &[usize],
) -> Result<BTreeSet<usize>, postgres::Error> {
    if ks.is_empty() {
        return Ok(BTreeSet::new());
    }
    let sql = ks
        .iter()
        .map(|&k| {
            format!(
                "SELECT {k} WHERE NOT EXISTS (SELECT 1 FROM {})",
                tables[k].qualified
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    Ok(c.query(&sql, &[])?
        .iter()
        .map(|r| r.get::<_, i32>(0) as usize)
        .collect())
}

/// The tables (by index) of `reach` and, transitively, the tables their
/// foreign keys reference (their rows need parent rows). None, every
/// table, when one of them holds a CHECK, default or domain that calls a
/// project function which may read another table: what its rows hold,
/// or whether a change re-checking them passes, may then depend on any
/// table's rows.
fn reached(
    c: &mut Client,
    tables: &[Table],
    edges: &[Edge],
    reach: &BTreeSet<String>,
) -> Result<Option<BTreeSet<usize>>, postgres::Error> {
    let mut wanted: BTreeSet<usize> = tables
        .iter()
        .enumerate()
        .filter(|(_, t)| reach.contains(&t.name))
        .map(|(k, _)| k)
        .collect();
    loop {
        let parents: Vec<usize> = edges
            .iter()
            .filter(|e| wanted.contains(&e.child) && !wanted.contains(&e.parent))
            .map(|e| e.parent)
            .collect();
        if parents.is_empty() {
            break;
        }
        wanted.extend(parents);
    }
    let oids: Vec<u32> = wanted.iter().map(|&k| tables[k].oid).collect();
    if !schedule::calling_table_readers(c, tables, &oids)?.is_empty() {
        return Ok(None);
    }
    Ok(Some(wanted))
}

/// ANALYZE of `relations`, split over the second session where seeding
/// opened one (each relation is sampled on its own: the halves are
/// independent).
fn analyze(c: &mut Client, second: Option<Client>, relations: &[String]) -> anyhow::Result<()> {
    if relations.is_empty() {
        return Ok(());
    }
    let run = |c: &mut Client, part: &[String]| -> Result<(), postgres::Error> {
        match part {
            [] => Ok(()),
            _ => c.batch_execute(&format!("ANALYZE {}", part.join(", "))),
        }
    };
    match second {
        Some(mut other) if relations.len() > 1 => {
            let (mine, theirs) = relations.split_at(relations.len() / 2);
            std::thread::scope(|s| {
                let t = s.spawn(|| run(&mut other, theirs));
                let here = run(c, mine);
                // (A thread that died: its half again, here.)
                let there = t.join().unwrap_or_else(|_| run(c, theirs));
                here.and(there)
            })?;
        }
        _ => run(c, relations)?,
    }
    Ok(())
}

impl Generated {
    fn record(&mut self, k: usize, result: TableResult, writers: &mut HashMap<usize, String>) {
        match result {
            Ok((s, xid)) => {
                if let Some(xid) = xid {
                    writers.insert(k, xid);
                }
                self.seeded.push(s)
            }
            Err(u) => self.unseeded.push(u),
        }
    }
}

/// What seeding each table needs to know of the others.
struct Seeding<'a> {
    tables: &'a [Table],
    parents: HashMap<u32, &'a Table>,
    edges: &'a [Edge],
    order: &'a order::Order,
    rows: &'a RowCounts,
    /// Tables that held no row when this seeding began.
    empty_at_start: BTreeSet<usize>,
    /// The only tables to get rows (a migration's reach), None: all.
    wanted: Option<BTreeSet<usize>>,
    /// How rows may skip the per-row foreign-key checks, when the session
    /// may ([`fk_checks`]).
    bypass: Option<fk_checks::FkCheckBypass>,
    /// The SQL of every app statement: what they read of a JSON column
    /// shapes its documents too ([`json`]).
    app_statements: Vec<String>,
}

impl Seeding<'_> {
    /// How table `k`'s foreign key `fk` was set aside, if it was
    /// (`deferring`: inside the transaction of a deferred cycle).
    fn cut(&self, k: usize, fk: &ForeignKey, deferring: bool) -> Cut {
        let set_aside = self
            .order
            .broken
            .iter()
            .map(|&e| &self.edges[e])
            .find(|e| e.child == k && e.constraint == fk.name);
        match set_aside {
            None => Cut::No,
            Some(e) if deferring && !e.breakable && e.deferrable => Cut::Deferred,
            Some(_) => Cut::Nullable,
        }
    }

    /// Seeds table `k`; a query the server refused (permissions, a value
    /// out of range) is this table's problem, a lost connection is not.
    fn one(
        &self,
        c: &mut impl GenericClient,
        k: usize,
        deferring: bool,
        own_transaction: bool,
    ) -> anyhow::Result<TableResult> {
        let t = &self.tables[k];
        let requested = match &self.wanted {
            Some(w) if !w.contains(&k) => 0,
            _ => self.rows.for_table(&t.name),
        };
        if requested > 0 && self.empty_at_start.contains(&k) {
            // Rows written since by the INSERT triggers of tables seeded
            // before it (a counter row per parent, a default per parent):
            // they are the rows production has, and generated ones would
            // collide with them on its keys.
            let by_triggers: i64 = c
                .query_one(&format!("SELECT count(*) FROM {}", t.qualified), &[])?
                .get(0);
            if by_triggers > 0 {
                return Ok(Ok((
                    SeededTable {
                        table: t.name.clone(),
                        requested,
                        written: by_triggers as u64,
                        note: Some(format!(
                            "its {by_triggers} rows were written by the INSERT triggers of the tables seeded before it"
                        )),
                        past_triggers: None,
                        took: std::time::Duration::ZERO,
                    },
                    None,
                )));
            }
        }
        let cut = |fk: &ForeignKey| self.cut(k, fk, deferring);
        match seed_table(c, self, t, &cut, requested, own_transaction) {
            Ok(r) => Ok(r),
            Err(e) => match e
                .downcast_ref::<postgres::Error>()
                .and_then(|pg| pg.as_db_error())
            {
                Some(db) => Ok(Err(UnseededTable {
                    table: t.name.clone(),
                    constraint: db.constraint().map(str::to_string),
                    reason: db.message().to_string(),
                })),
                None => Err(e),
            },
        }
    }

    /// The last position of the group that starts at `pos`: the table
    /// there holds a deferrable key set aside to break a cycle (no key of
    /// the cycle may be NULL), and the group ends at that key's parent.
    fn deferred_group_at(&self, pos: usize) -> Option<usize> {
        let k = self.order.tables[pos];
        self.order
            .broken
            .iter()
            .map(|&e| &self.edges[e])
            .filter(|e| e.child == k && !e.breakable && e.deferrable)
            .filter_map(|e| self.order.tables.iter().position(|&t| t == e.parent))
            .filter(|&end| end > pos)
            .max()
    }

    /// Seeds the tables at `positions` in one transaction with their
    /// deferrable keys deferred, then points those keys at their parents'
    /// rows before the commit checks them. Err: why it failed (nothing of
    /// it is kept; the caller seeds the tables one by one instead).
    fn group(
        &self,
        c: &mut Client,
        positions: std::ops::RangeInclusive<usize>,
    ) -> anyhow::Result<Result<Vec<(usize, TableResult)>, String>> {
        let ks: Vec<usize> = self.order.tables[positions].to_vec();
        let deferred: Vec<&Edge> = self
            .order
            .broken
            .iter()
            .map(|&e| &self.edges[e])
            .filter(|e| {
                ks.contains(&e.child) && ks.contains(&e.parent) && e.deferrable && !e.breakable
            })
            .collect();
        let names = deferred
            .iter()
            .map(|e| e.constraint.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let failed = |e: &dyn std::fmt::Display| {
            Ok(Err(format!(
                "the foreign-key cycle closed by {names} could not be seeded in one transaction ({e}); its tables were seeded one by one"
            )))
        };
        let mut tx = c.transaction()?;
        // Only deferrable keys are deferred, each checked at the commit.
        tx.batch_execute("SET CONSTRAINTS ALL DEFERRED")?;
        let mut done = Vec::new();
        let mut xids: HashMap<usize, String> = HashMap::new();
        for &k in &ks {
            match self.one(&mut tx, k, true, false)? {
                Ok((s, xid)) => {
                    if let Some(xid) = xid.clone() {
                        xids.insert(k, xid);
                    }
                    done.push((k, Ok((s, xid))));
                }
                Err(u) => return failed(&format!("{}: {}", u.table, u.reason)),
            }
        }
        for e in &deferred {
            let child = &self.tables[e.child];
            let (Some(xid), Some(fk)) = (
                xids.get(&e.child),
                child.fks.iter().find(|f| f.name == e.constraint),
            ) else {
                continue;
            };
            if let Err(message) =
                fill_broken_reference(&mut tx, child, fk, &self.tables[e.parent], xid)?
            {
                return failed(&message);
            }
        }
        match tx.commit() {
            Ok(()) => Ok(Ok(done)),
            Err(e) if e.as_db_error().is_some() => failed(&crate::errors::one_line(&e)),
            Err(e) => Err(e.into()),
        }
    }
}

/// The foreign keys between two different tables, by table index.
fn foreign_key_edges(tables: &[Table]) -> Vec<Edge> {
    let index: HashMap<u32, usize> = tables.iter().enumerate().map(|(k, t)| (t.oid, k)).collect();
    let mut edges = Vec::new();
    for (k, t) in tables.iter().enumerate() {
        for fk in &t.fks {
            if let Some(&parent) = index.get(&fk.ref_table) {
                if parent != k {
                    edges.push(Edge {
                        child: k,
                        parent,
                        constraint: fk.name.clone(),
                        breakable: fk.breakable(t),
                        deferrable: fk.deferrable,
                    });
                }
            }
        }
    }
    edges
}

fn refresh_materialized_views(c: &mut Client, out: &mut Generated) -> Result<(), postgres::Error> {
    // A materialized view holds what its query returned when refreshed:
    // refreshed over the rows just written, a migration that refreshes or
    // rebuilds it is measured over rows too.
    for mv in crate::tables::list(c)?
        .iter()
        .filter(|t| t.kind == crate::tables::Kind::MaterializedView && t.populated)
    {
        if let Err(e) = c.batch_execute(&format!("REFRESH MATERIALIZED VIEW {}", mv.qualified)) {
            match e.as_db_error() {
                Some(_) => out.warnings.push(format!(
                    "materialized view {} could not be refreshed over the seeded rows: {}",
                    mv.name,
                    crate::errors::one_line(&e)
                )),
                None => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_counts_read_a_default_and_per_table_overrides() {
        let mut r = RowCounts::new(10);
        r.apply("500").unwrap();
        r.apply("orders=1_000").unwrap();
        assert_eq!(r.for_table("orders"), 1000);
        assert_eq!(r.for_table("customers"), 500);
        assert_eq!(
            RowCounts::default().for_table("x"),
            super::super::DEFAULT_ROWS
        );
        for bad in ["", "many", "=5", "orders=", "orders=-1"] {
            let e = r.apply(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("`--rows {bad}`")), "{e}");
        }
    }
}

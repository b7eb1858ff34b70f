//! Seeding one table: what each column gets (a default, a referenced row,
//! its own parent row, a value to choose), which column carries each
//! UNIQUE key; then the values that fit ([`super::fit`]) and the insertion
//! ([`super::insert`]).

use std::collections::{BTreeSet, HashMap};

use postgres::GenericClient;

use super::catalogue::{ForeignKey, Table};
use super::families::{families, Literals};
use super::family::at;
use super::fit::{choose_values, satisfy_checks, walk_lists};
use super::insert::{insert_rows, max_integer_key};
use super::overlap::{agreeing_rows, falls_back, join_order};
use super::plan::{unseeded, Join, Plan, TableResult, Val};
use super::Seeding;
use super::{SeededTable, UnseededTable, I};
use crate::pg::quote_ident;

/// Plans, searches and inserts the rows of one table. The outer error is
/// a connection or catalogue failure; the inner one a table that cannot be
/// seeded. Steps: (1) where each column's value comes from (its default,
/// a foreign key, an earlier row, a value to choose: [`Draft`]), (2) which
/// column carries each UNIQUE key ([`unique_carriers`]), then
/// [`choose_values`], [`satisfy_checks`], [`insert_rows`].
pub(super) fn seed_table(
    c: &mut impl GenericClient,
    seeding: &Seeding<'_>,
    t: &Table,
    cut: &dyn Fn(&ForeignKey) -> Cut,
    requested: u64,
    own_transaction: bool,
) -> anyhow::Result<TableResult> {
    let (parents, only_if_empty) = (&seeding.parents, seeding.rows.only_empty);
    let nothing = || {
        let written = SeededTable {
            table: t.name.clone(),
            requested: 0,
            written: 0,
            note: None,
            past_triggers: None,
            took: std::time::Duration::ZERO,
        };
        Ok(Ok((written, None)))
    };
    if requested == 0 {
        return nothing();
    }
    let qt = &t.qualified;
    let existing: i64 = c
        .query_one(&format!("SELECT count(*) FROM {qt}"), &[])?
        .get(0);
    if only_if_empty && existing > 0 {
        return nothing();
    }

    // 1. What each column gets, before values are chosen.
    // A key that may be NULL, driving keys that share its columns, can
    // leave them no row to agree with: it goes last and the keys are
    // pointed again ([`super::overlap`]).
    let mut demoted = Vec::new();
    let (mut draft, self_fks) = loop {
        let mut draft = Draft::new(t);
        match draft.point_foreign_keys(c, t, parents, cut, &demoted)? {
            Ok(self_fks) => break (draft, self_fks),
            Err(u) => match draft.demote.take() {
                Some(f) if !demoted.contains(&f) => demoted.push(f),
                _ => return Ok(Err(u)),
            },
        }
    };
    draft.point_self_references(t, &self_fks);
    if let Err(u) = draft.write_a_column(t) {
        return Ok(Err(u));
    }

    // 2. UNIQUE keys: one column of each carries distinct values; a key of
    // foreign-key columns only walks the combinations of parent rows.
    let (carriers, radix) = draft.unique_carriers(t);
    let (mut rows, mut note) = draft.walk_combinations(&radix, requested);
    if let Some(index) = &t.single_row {
        let room = 1u64.saturating_sub(existing.max(0) as u64);
        if rows > room {
            rows = room;
            note = Some(format!(
                "{room} of the {requested} rows asked: its unique index {index} is on constants, so it holds one row at most"
            ));
        }
    }
    let offset = (existing.max(0) as u64).saturating_add(max_integer_key(
        c,
        t,
        qt,
        &carriers,
        &draft.forced,
    )?);
    let width = offset.saturating_add(rows);

    let Draft {
        vals,
        decided,
        forced,
        joins,
        ..
    } = draft;
    let turns = take_turns(t, &vals, &decided);
    let mut plan = Plan {
        table: t,
        vals,
        joins,
        offset,
        rows,
        turns,
    };
    let readers = &seeding.app_statements;
    let mut fitting = match choose_values(c, &mut plan, &decided, &carriers, width, readers)? {
        Ok(f) => f,
        Err(u) => return Ok(Err(u)),
    };
    if let Err(u) = satisfy_checks(c, &mut plan, &mut fitting)? {
        return Ok(Err(u));
    }
    let note = walk_lists(&mut plan, &carriers).or(note);
    let bypass = seeding.bypass.as_ref().map(|b| (b, parents));
    insert_rows(c, &plan, &forced, requested, note, own_transaction, bypass)
}

/// Whether a foreign key was set aside to break a cycle of keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// It points at its parent's rows.
    No,
    /// Its columns are NULL now and filled in after the parent's rows.
    Nullable,
    /// Deferred to the commit of the transaction that seeds the cycle:
    /// its columns take values now and the parent's rows before commit.
    Deferred,
}

/// Step 1 of [`seed_table`]: where each column's value comes from, before
/// values are chosen.
pub(super) struct Draft {
    pub(super) vals: Vec<Val>,
    /// Columns whose source is settled (a default, a key, NULL).
    pub(super) decided: Vec<bool>,
    /// Columns rollsafe fills despite a default.
    pub(super) forced: BTreeSet<usize>,
    pub(super) joins: Vec<Join>,
    /// Joins (by index) whose foreign key's columns make a UNIQUE key on
    /// their own: each parent row at most once.
    pub(super) single: Vec<usize>,
    /// The foreign key (index into the table's) each join is for.
    join_fks: Vec<usize>,
    /// A key that may be NULL and drove keys sharing its columns, none of
    /// whose rows has a partner: to be joined last ([`seed_table`]).
    demote: Option<usize>,
}

impl Draft {
    /// Generated, identity and defaulted columns left to the server; the
    /// others to decide.
    fn new(t: &Table) -> Draft {
        let vals: Vec<Val> = t
            .columns
            .iter()
            .map(|col| {
                if col.generated {
                    Val::Omitted {
                        probe: format!("NULL::{}", col.sql_type),
                    }
                } else if col.identity {
                    Val::Omitted {
                        probe: format!("({})::{}", at(I, "s.g"), col.sql_type),
                    }
                } else if let Some(d) = &col.default {
                    Val::Omitted { probe: d.clone() }
                } else {
                    Val::Null // decided below
                }
            })
            .collect();
        let decided = vals
            .iter()
            .map(|v| matches!(v, Val::Omitted { .. }))
            .collect();
        Draft {
            vals,
            decided,
            forced: BTreeSet::new(),
            joins: Vec::new(),
            single: Vec::new(),
            join_fks: Vec::new(),
            demote: None,
        }
    }

    /// A column rollsafe computes although it has a default (or was left
    /// to one).
    fn force(&mut self, k: usize) {
        self.forced.insert(k);
        self.vals[k] = Val::Null;
        self.decided[k] = false;
    }

    /// Each foreign key to another table points at its rows, or is NULL
    /// where it may be; one that can be neither leaves the table
    /// unseeded. Returns the table's references to itself, for
    /// [`Draft::point_self_references`]. The keys `demoted` are joined
    /// last.
    fn point_foreign_keys(
        &mut self,
        c: &mut impl GenericClient,
        t: &Table,
        parents: &HashMap<u32, &Table>,
        cut: &dyn Fn(&ForeignKey) -> Cut,
        demoted: &[usize],
    ) -> anyhow::Result<Result<Vec<usize>, UnseededTable>> {
        let mut self_fks = Vec::new();
        let mut order = join_order(t);
        order.sort_by_key(|f| demoted.contains(f));
        for f in order {
            let fk = &t.fks[f];
            if fk.ref_table == t.oid {
                self_fks.push(f);
                continue;
            }
            let local: Vec<usize> = fk.cols.iter().filter_map(|&n| t.column(n)).collect();
            if local.len() != fk.cols.len() {
                continue;
            }
            let parent = parents.get(&fk.ref_table);
            let cut = cut(fk);
            if let Some(p) = parent.filter(|_| cut == Cut::No) {
                match self.join_parent(c, t, f, &local, p)? {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(u) => return Ok(Err(u)),
                }
            }
            if cut == Cut::Deferred {
                // Checked at commit: its columns get values of their
                // type now and the parent's rows once it has them.
                continue;
            }
            // No rows to point at (or the key breaks a cycle): NULL where
            // the key allows it, else the table cannot be seeded.
            if !fk.breakable(t) {
                let parent_name =
                    parent.map_or("a table rollsafe does not seed".into(), |p| p.name.clone());
                return Ok(unseeded(
                    t,
                    Some(&fk.name),
                    format!(
                        "foreign key {} references {parent_name}, which has no rows to point at, and its columns may not be NULL",
                        fk.name
                    ),
                ));
            }
            for &k in &local {
                if !t.columns[k].not_null() && !matches!(self.vals[k], Val::Fk { .. }) {
                    self.vals[k] = Val::Null;
                    self.decided[k] = true;
                }
            }
        }
        Ok(Ok(self_fks))
    }

    /// The key's columns (`local`) take the numbered rows of parent `p`
    /// when it has any; false when it has none to point at. Columns an
    /// earlier key already gives a value (a key sharing them,
    /// [`super::overlap`]) keep it: this key picks among the rows that
    /// agree, and, unless it may fall back to NULL, the earlier key keeps
    /// only rows that have such a partner ([`Draft::require_agreement`]).
    fn join_parent(
        &mut self,
        c: &mut impl GenericClient,
        t: &Table,
        f: usize,
        local: &[usize],
        p: &Table,
    ) -> Result<Result<bool, UnseededTable>, postgres::Error> {
        let fk = &t.fks[f];
        let ref_cols: Vec<String> = fk
            .ref_cols
            .iter()
            .filter_map(|&n| p.column(n).map(|k| p.columns[k].name.clone()))
            .collect();
        if ref_cols.len() != local.len() {
            return Ok(Ok(false));
        }
        let mut agree = Vec::new();
        let mut free = Vec::new();
        for (&k, rc) in local.iter().zip(&ref_cols) {
            match &self.vals[k] {
                Val::Fk { fk: j, col } => agree.push((rc.clone(), *j, col.clone())),
                _ if (!self.decided[k] || matches!(self.vals[k], Val::Omitted { .. }))
                    && !t.columns[k].generated =>
                {
                    free.push((k, rc.clone()));
                }
                _ => {}
            }
        }
        let shift = self
            .joins
            .iter()
            .filter(|j| j.parent == p.qualified)
            .count() as u64;
        let mut join = Join {
            parent: p.qualified.clone(),
            ref_cols,
            n: 0,
            divisor: None,
            shift,
            apart_from: None,
            filter: Vec::new(),
            agree,
            least: 0,
        };
        let n = count_rows(c, &join)?;
        if n == 0 {
            return Ok(Ok(false));
        }
        join.n = n;
        let free_cols: Vec<usize> = free.iter().map(|(k, _)| *k).collect();
        if !join.agree.is_empty() && !falls_back(t, fk, &free_cols) {
            if let Err(u) = self.require_agreement(c, t, fk, &join)? {
                return Ok(Err(u));
            }
            if free.is_empty() {
                // All its columns shared: the filter is all it needs.
                return Ok(Ok(true));
            }
        }
        if !join.agree.is_empty() {
            join.least = least_group(c, &self.joins, &join)?;
        }
        let j = self.joins.len();
        for (k, rc) in free {
            self.vals[k] = Val::Fk { fk: j, col: rc };
            self.decided[k] = true;
        }
        self.joins.push(join);
        self.join_fks.push(f);
        Ok(Ok(true))
    }

    /// Key `fk` (its join `later`) may not be left without a parent row:
    /// the earlier join that gives its shared columns their values keeps
    /// only the rows some row of `fk`'s parent agrees with, and is counted
    /// again. None left: the table is reported. Shared columns given by
    /// two earlier joins are not narrowed ([`super::overlap`]).
    fn require_agreement(
        &mut self,
        c: &mut impl GenericClient,
        t: &Table,
        fk: &ForeignKey,
        later: &Join,
    ) -> Result<Result<(), UnseededTable>, postgres::Error> {
        let Some(&(_, d, _)) = later.agree.first() else {
            return Ok(Ok(()));
        };
        if later.agree.iter().any(|&(_, j, _)| j != d) {
            return Ok(Ok(()));
        }
        let shared: Vec<(String, String)> = later
            .agree
            .iter()
            .map(|(r, _, col)| (r.clone(), col.clone()))
            .collect();
        let filter = agreeing_rows(&later.parent, &shared, &later.ref_cols);
        self.joins[d].filter.push(filter);
        let n = count_rows(c, &self.joins[d])?;
        self.joins[d].n = n;
        if n > 0 {
            return Ok(Ok(()));
        }
        let driving = self.join_fks[d];
        if t.fks[driving].breakable(t) {
            self.demote = Some(driving);
        }
        let driver = &self.joins[d].parent;
        let cols = shared
            .iter()
            .map(|(_, col)| col.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        Ok(unseeded(
            t,
            Some(&fk.name),
            format!(
                "foreign key {} shares columns with the key to {driver}, and no row of {driver} has a row of {} with the same {cols} to point at",
                fk.name, later.parent
            ),
        ))
    }

    /// A reference to the table itself names an earlier row of the same
    /// statement; the referenced column becomes a value rollsafe computes.
    /// Columns it shares with a key to another table keep that key's
    /// value, and the earlier row is one that took the same referenced
    /// row (`along`, [`Val::SelfFk`]).
    fn point_self_references(&mut self, t: &Table, self_fks: &[usize]) {
        for &f in self_fks {
            let fk = &t.fks[f];
            let root_null = fk.breakable(t);
            let mut shared = fk
                .cols
                .iter()
                .filter_map(|&n| match self.vals[t.column(n)?] {
                    Val::Fk { fk: j, .. } => Some(j),
                    _ => None,
                })
                .collect::<Vec<_>>();
            shared.sort_unstable();
            shared.dedup();
            let along = match shared[..] {
                [j] => Some(j),
                _ => None,
            };
            for (&n, &rn) in fk.cols.iter().zip(&fk.ref_cols) {
                let (Some(k), Some(target)) = (t.column(n), t.column(rn)) else {
                    continue;
                };
                if self.decided[k] && !matches!(self.vals[k], Val::Omitted { .. }) {
                    continue;
                }
                // The referenced column must be a value we compute, so a
                // row can name its parent in the same statement.
                if matches!(self.vals[target], Val::Omitted { .. }) && !t.columns[target].generated
                {
                    self.force(target);
                }
                self.vals[k] = Val::SelfFk {
                    target,
                    root_null,
                    along,
                };
                self.decided[k] = true;
            }
        }
    }

    /// An INSERT needs one column: a table of defaults only (a lone serial
    /// id) gets its first column filled by us.
    fn write_a_column(&mut self, t: &Table) -> Result<(), UnseededTable> {
        let writes_a_column = (0..t.columns.len())
            .any(|k| !self.decided[k] || !matches!(self.vals[k], Val::Omitted { .. }));
        if writes_a_column {
            return Ok(());
        }
        match t.columns.iter().position(|col| !col.generated) {
            Some(k) => {
                self.force(k);
                Ok(())
            }
            None => unseeded(
                t,
                None,
                "the table has no column an INSERT can write".into(),
            ),
        }
    }

    /// Step 2 of [`seed_table`]: the column that carries each UNIQUE key's
    /// distinct values, and the joins (by index) of the keys made only of
    /// foreign-key columns, whose parent rows' combinations are walked.
    fn unique_carriers(&mut self, t: &Table) -> (BTreeSet<usize>, Vec<usize>) {
        let mut carriers: BTreeSet<usize> = BTreeSet::new();
        let mut radix: Vec<usize> = Vec::new();
        for key in &t.uniques {
            let cols: Vec<usize> = key.iter().filter_map(|&n| t.column(n)).collect();
            if cols.iter().any(|&k| {
                matches!(self.vals[k], Val::Omitted { .. })
                    && t.columns[k].default_is_unique()
                    && !self.forced.contains(&k)
            }) {
                continue;
            }
            if cols.iter().any(|k| carriers.contains(k)) {
                continue;
            }
            if let Some(k) = self.carrier_of(t, &cols) {
                carriers.insert(k);
                continue;
            }
            // In the key's column order: the first walks fastest (a
            // shifted second key into the same table stays apart from it).
            let mut joins: Vec<usize> = Vec::new();
            for &k in &cols {
                if let Val::Fk { fk, .. } = self.vals[k] {
                    if !joins.contains(&fk) {
                        joins.push(fk);
                    }
                }
            }
            // A key of one foreign key's columns (a one-to-one: one
            // contact per station) takes each parent row once: the plain
            // walk does, up to its rows. Several foreign keys walk their
            // combinations.
            if joins.len() == 1 {
                let j = joins[0];
                if !self.single.contains(&j) {
                    self.single.push(j);
                }
                continue;
            }
            for fk in joins {
                if !radix.contains(&fk) {
                    radix.push(fk);
                }
            }
        }
        (carriers, radix)
    }

    /// The column of a UNIQUE key (`cols`) that carries its distinct
    /// values: an undecided one whose type has distinct values to give
    /// (not a boolean or an enum), else any undecided one, else one left
    /// to a default, now computed by us. None: the key is made of
    /// foreign-key columns.
    fn carrier_of(&mut self, t: &Table, cols: &[usize]) -> Option<usize> {
        let undecided: Vec<usize> = cols.iter().copied().filter(|&k| !self.decided[k]).collect();
        let distinct = |k: &&usize| {
            let col = &t.columns[**k];
            families(&col.ty, col.typmod, &col.name, &Literals::default(), 1)
                .iter()
                .any(|f| f.injective)
        };
        if let Some(&k) = undecided.iter().find(distinct).or(undecided.first()) {
            return Some(k);
        }
        let k = *cols
            .iter()
            .find(|&&k| matches!(self.vals[k], Val::Omitted { .. }) && !t.columns[k].generated)?;
        self.force(k);
        Some(k)
    }

    /// The rows to write: `requested`, or fewer when a key of foreign-key
    /// columns only (the joins `radix`) has fewer combinations, with the
    /// note that says so.
    fn walk_combinations(&mut self, radix: &[usize], requested: u64) -> (u64, Option<String>) {
        // Each parent row once, for a key of one foreign key's columns.
        if let Some(n) = self.single.iter().map(|&j| self.joins[j].n).min() {
            if n < requested && radix.is_empty() {
                let note = format!("{n} rows: one per referenced row, as its UNIQUE key allows");
                return (n, Some(note));
            }
        }
        if radix.is_empty() {
            return (requested, None);
        }
        let mut divisor: u64 = 1;
        for (r, &j) in radix.iter().enumerate() {
            self.joins[j].divisor = Some(divisor);
            // A second key into a table the walk already takes (the
            // followed beside the follower) walks the other rows of it:
            // n - 1 choices per row of the first, never the same row.
            let earlier = radix[..r]
                .iter()
                .copied()
                .find(|&e| self.joins[e].parent == self.joins[j].parent);
            let n = self.joins[j].choices();
            let agrees = !self.joins[j].agree.is_empty();
            let choices = match earlier {
                Some(e) if n > 1 && !agrees => {
                    self.joins[j].apart_from = Some(e);
                    n - 1
                }
                _ => n,
            };
            divisor = divisor.saturating_mul(choices);
        }
        if divisor < requested {
            let agreeing = radix.iter().any(|&j| !self.joins[j].agree.is_empty());
            let note = format!(
                "{divisor} rows: every combination of the referenced rows its UNIQUE key allows{}",
                if agreeing {
                    " (of rows that agree on the columns its foreign keys share)"
                } else {
                    ""
                }
            );
            return (divisor, Some(note));
        }
        (requested, None)
    }
}

/// Each column's turn in a group of which exactly one is set
/// ([`super::rules`]): the group's columns that will hold a value take
/// turns (one left to its default, or NULL for want of rows to point at,
/// sits out).
fn take_turns(t: &Table, vals: &[Val], decided: &[bool]) -> Vec<Option<(usize, usize)>> {
    let mut turns = vec![None; t.columns.len()];
    for group in super::rules::exactly_one_groups(t) {
        let players: Vec<usize> = group
            .into_iter()
            .filter(|&k| !decided[k] || matches!(vals[k], Val::Fk { .. } | Val::SelfFk { .. }))
            .collect();
        if players.len() < 2 || players.iter().any(|&k| turns[k].is_some()) {
            continue;
        }
        for (place, &k) in players.iter().enumerate() {
            turns[k] = Some((place, players.len()));
        }
    }
    turns
}

/// How many referenced rows join `j` picks from (its key without NULLs,
/// its filter kept).
fn count_rows(c: &mut impl GenericClient, j: &Join) -> Result<u64, postgres::Error> {
    let n: i64 = c
        .query_one(&format!("SELECT count(*) FROM ({}) p", j.rows(false)), &[])?
        .get(0);
    Ok(n.max(0) as u64)
}

/// [`Join::least`] of `later`, a join agreeing with earlier `joins`: the
/// fewest of its rows that agree with a row of the earlier join giving
/// the shared values (with shared values from two joins: the smallest
/// group of all).
fn least_group(
    c: &mut impl GenericClient,
    joins: &[Join],
    later: &Join,
) -> Result<u64, postgres::Error> {
    let shared = later
        .agree
        .iter()
        .map(|(r, _, _)| quote_ident(r))
        .collect::<Vec<_>>()
        .join(", ");
    let groups = format!(
        "SELECT {shared}, count(*) AS rollsafe_n FROM ({}) p GROUP BY {shared}",
        later.rows(false)
    );
    let d = later.agree[0].1;
    let sql = if later.agree.iter().all(|&(_, j, _)| j == d) {
        let on = later
            .agree
            .iter()
            .map(|(r, _, col)| format!("f.{} = d.{}", quote_ident(r), quote_ident(col)))
            .collect::<Vec<_>>()
            .join(" AND ");
        format!(
            "SELECT coalesce(min(f.rollsafe_n), 0) FROM ({}) d JOIN ({groups}) f ON {on}",
            joins[d].rows(false)
        )
    } else {
        format!("SELECT coalesce(min(rollsafe_n), 0) FROM ({groups}) f")
    };
    let n: i64 = c.query_one(sql.as_str(), &[])?.get(0);
    Ok(n.max(0) as u64)
}

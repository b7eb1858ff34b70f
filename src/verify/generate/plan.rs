//! One table's seeding plan: what each column gets (a default, a
//! referenced row, its own parent row, a value family), which column
//! carries each UNIQUE key, the values that fit the types and CHECKs; then
//! its insertion.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use postgres::Client;

use super::catalogue::{ForeignKey, Table, TypeKind};
use super::families::{at, fam, families, max_text_len, quote_literal, Family, Literals};
use super::{SeededTable, UnseededTable, I, MAX_COMBINATIONS, SAMPLE_HEAD};
use crate::pg::quote_ident;

/// Where a column's value comes from in the INSERT.
#[derive(Debug, Clone)]
pub(super) enum Val {
    /// Left to its default (or identity, or a generated column); `probe`
    /// stands in for it when CHECKs are tested.
    Omitted {
        probe: String,
    },
    /// One of `fams`, the `chosen` one.
    Gen {
        fams: Vec<Family>,
        chosen: usize,
    },
    /// Column `col` of the numbered rows of foreign key `fk`.
    Fk {
        fk: usize,
        col: String,
    },
    /// The value of column `target` (an index into the table's columns) of
    /// an earlier row of the same table: row g points at row g / 2; row 1
    /// at nothing (NULL) or, when NULL is not allowed, at itself.
    SelfFk {
        target: usize,
        root_null: bool,
    },
    Null,
}

/// A foreign key joined in as numbered rows of the referenced table.
#[derive(Debug, Clone)]
pub(super) struct Join {
    pub(super) parent: String,
    pub(super) ref_cols: Vec<String>,
    /// Rows to pick from.
    pub(super) n: u64,
    /// Mixed-radix divisor for keys that must give distinct combinations.
    pub(super) divisor: Option<u64>,
}

pub(super) struct Plan<'a> {
    pub(super) table: &'a Table,
    pub(super) vals: Vec<Val>,
    pub(super) joins: Vec<Join>,
    pub(super) offset: u64,
    pub(super) rows: u64,
}

impl Plan<'_> {
    pub(super) fn index(&self) -> String {
        format!("s.g + {}", self.offset)
    }

    /// The SQL of column `k`, for the INSERT (`probe` false: None for an
    /// omitted column) or for a CHECK probe.
    pub(super) fn expr(&self, k: usize, probe: bool) -> Option<String> {
        let col = &self.table.columns[k];
        let cast = |v: String| format!("({v})::{}", col.sql_type);
        Some(match &self.vals[k] {
            Val::Omitted { probe: p } => {
                if !probe {
                    return None;
                }
                p.clone()
            }
            Val::Gen { fams, chosen } => cast(at(&fams[*chosen].sql, &self.index())),
            Val::Fk { fk, col: c } => format!("fk{fk}.{}", quote_ident(c)),
            Val::SelfFk { target, root_null } => {
                let parent = match &self.vals[*target] {
                    Val::Gen { fams, chosen } => {
                        at(&fams[*chosen].sql, &format!("s.g / 2 + {}", self.offset))
                    }
                    _ => "NULL".into(),
                };
                let root = if *root_null {
                    "NULL".to_string()
                } else {
                    self.expr(*target, probe).unwrap_or_else(|| "NULL".into())
                };
                format!(
                    "CASE WHEN s.g = 1 THEN {} ELSE {} END",
                    cast(root),
                    cast(parent)
                )
            }
            Val::Null => cast("NULL".into()),
        })
    }

    /// `SELECT <values> FROM <source of g> <joins>`; a probe limits each
    /// joined table to 16 of its rows (the sample's indexes are folded
    /// into them), so testing a CHECK never sorts a whole big table.
    pub(super) fn select(&self, source: &str, probe: bool) -> String {
        let values: Vec<String> = (0..self.vals.len())
            .filter_map(|k| {
                self.expr(k, probe).map(|e| {
                    if probe {
                        format!("{e} AS {}", quote_ident(&self.table.columns[k].name))
                    } else {
                        e
                    }
                })
            })
            .collect();
        let mut sql = format!("SELECT {} FROM {source}", values.join(", "));
        for (f, j) in self.joins.iter().enumerate() {
            let keys = j
                .ref_cols
                .iter()
                .map(|c| quote_ident(c))
                .collect::<Vec<_>>()
                .join(", ");
            let not_null = j
                .ref_cols
                .iter()
                .map(|c| format!("{} IS NOT NULL", quote_ident(c)))
                .collect::<Vec<_>>()
                .join(" AND ");
            let n = if probe { j.n.min(16) } else { j.n };
            // A probe (run once per candidate while CHECKs are searched)
            // needs some parent rows, not the ones the INSERT will pick:
            // any 16 are read without sorting the parent table.
            let limit = if probe { " LIMIT 16" } else { "" };
            let pick = match j.divisor {
                Some(d) => format!("((s.g - 1) / {d}) % {n}"),
                None => format!("(s.g - 1) % {n}"),
            };
            sql.push_str(&format!(
                " LEFT JOIN (SELECT {keys}, row_number() OVER (ORDER BY {keys}) - 1 AS rollsafe_rn
                     FROM (SELECT {keys} FROM {} WHERE {not_null}{limit}) p) fk{f}
                   ON fk{f}.rollsafe_rn = {pick}",
                j.parent
            ));
        }
        sql
    }

    pub(super) fn sample(&self) -> String {
        let mut g: BTreeSet<u64> = (1..=SAMPLE_HEAD.min(self.rows)).collect();
        g.insert(self.rows);
        g.insert(self.rows.saturating_sub(1).max(1));
        let list = g.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        format!("unnest('{{{list}}}'::bigint[]) AS s(g)")
    }
}

/// The rows written and the id of the transaction that wrote them, or
/// why the table could not be seeded.
pub(super) type TableResult = Result<(SeededTable, Option<String>), UnseededTable>;

pub(super) fn unseeded<T>(
    t: &Table,
    constraint: Option<&str>,
    reason: String,
) -> Result<T, UnseededTable> {
    Err(UnseededTable {
        table: t.name.clone(),
        constraint: constraint.map(str::to_string),
        reason,
    })
}

/// Plans, searches and inserts the rows of one table. The outer error is
/// a connection or catalogue failure; the inner one a table that cannot be
/// seeded. Steps: (1) where each column's value comes from (its default,
/// a foreign key, an earlier row, a value to choose), (2) which column
/// carries each UNIQUE key, then [`choose_values`], [`satisfy_checks`],
/// [`insert_rows`].
pub(super) fn seed_table(
    c: &mut Client,
    t: &Table,
    parents: &HashMap<u32, &Table>,
    is_broken: &dyn Fn(&ForeignKey) -> bool,
    requested: u64,
    only_if_empty: bool,
) -> anyhow::Result<TableResult> {
    let none = |requested| {
        Ok(Ok((
            SeededTable {
                table: t.name.clone(),
                requested,
                written: 0,
                note: None,
                took: std::time::Duration::ZERO,
            },
            None,
        )))
    };
    if requested == 0 {
        return none(0);
    }
    let qt = &t.qualified;
    let existing: i64 = c
        .query_one(&format!("SELECT count(*) FROM {qt}"), &[])?
        .get(0);
    if only_if_empty && existing > 0 {
        return none(0);
    }

    // 1. What each column gets, before values are chosen.
    let mut vals: Vec<Val> = t
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
    let mut decided = vec![false; t.columns.len()];
    for (k, v) in vals.iter().enumerate() {
        decided[k] = matches!(v, Val::Omitted { .. });
    }
    let mut joins: Vec<Join> = Vec::new();
    let mut forced: BTreeSet<usize> = BTreeSet::new(); // columns we fill despite a default
    let mut self_fks = Vec::new();
    for (f, fk) in t.fks.iter().enumerate() {
        if fk.ref_table == t.oid {
            self_fks.push(f);
            continue;
        }
        let local: Vec<usize> = fk.cols.iter().filter_map(|&n| t.column(n)).collect();
        if local.len() != fk.cols.len() {
            continue;
        }
        let nullable_ok = fk.breakable(t);
        let parent = parents.get(&fk.ref_table);
        match parent {
            Some(p) if !is_broken(fk) => {
                let ref_cols: Vec<String> = fk
                    .ref_cols
                    .iter()
                    .filter_map(|&n| p.column(n).map(|k| p.columns[k].name.clone()))
                    .collect();
                let not_null = ref_cols
                    .iter()
                    .map(|c| format!("{} IS NOT NULL", quote_ident(c)))
                    .collect::<Vec<_>>()
                    .join(" AND ");
                let n: i64 = c
                    .query_one(
                        &format!("SELECT count(*) FROM {} WHERE {not_null}", p.qualified),
                        &[],
                    )?
                    .get(0);
                if n > 0 && ref_cols.len() == local.len() {
                    let j = joins.len();
                    for (k, rc) in local.iter().zip(&ref_cols) {
                        let free = !decided[*k] || matches!(vals[*k], Val::Omitted { .. });
                        if free && !t.columns[*k].generated {
                            vals[*k] = Val::Fk {
                                fk: j,
                                col: rc.clone(),
                            };
                            decided[*k] = true;
                        }
                    }
                    joins.push(Join {
                        parent: p.qualified.clone(),
                        ref_cols,
                        n: n as u64,
                        divisor: None,
                    });
                    continue;
                }
            }
            _ => {}
        }
        // No rows to point at (or the key breaks a cycle): NULL where the
        // key allows it, else the table cannot be seeded.
        if nullable_ok {
            for &k in &local {
                if !t.columns[k].not_null() && !matches!(vals[k], Val::Fk { .. }) {
                    vals[k] = Val::Null;
                    decided[k] = true;
                }
            }
        } else {
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
    }
    for &f in &self_fks {
        let fk = &t.fks[f];
        let root_null = fk.breakable(t);
        for (&n, &rn) in fk.cols.iter().zip(&fk.ref_cols) {
            let (Some(k), Some(target)) = (t.column(n), t.column(rn)) else {
                continue;
            };
            if decided[k] && !matches!(vals[k], Val::Omitted { .. }) {
                continue;
            }
            // The referenced column must be a value we compute, so a row
            // can name its parent in the same statement.
            if matches!(vals[target], Val::Omitted { .. }) && !t.columns[target].generated {
                vals[target] = Val::Null;
                decided[target] = false;
                forced.insert(target);
            }
            vals[k] = Val::SelfFk { target, root_null };
            decided[k] = true;
        }
    }

    // An INSERT needs one column: a table of defaults only (a lone serial
    // id) gets its first column filled by us.
    let writes_a_column =
        (0..t.columns.len()).any(|k| !decided[k] || !matches!(vals[k], Val::Omitted { .. }));
    if !writes_a_column {
        match t.columns.iter().position(|col| !col.generated) {
            Some(k) => {
                forced.insert(k);
                vals[k] = Val::Null;
                decided[k] = false;
            }
            None => {
                return Ok(unseeded(
                    t,
                    None,
                    "the table has no column an INSERT can write".into(),
                ))
            }
        }
    }

    // 2. UNIQUE keys: one column of each carries distinct values; a key of
    // foreign-key columns only walks the combinations of parent rows.
    let mut carriers: BTreeSet<usize> = BTreeSet::new();
    let mut radix: Vec<usize> = Vec::new();
    for key in &t.uniques {
        let cols: Vec<usize> = key.iter().filter_map(|&n| t.column(n)).collect();
        if cols.iter().any(|&k| {
            matches!(vals[k], Val::Omitted { .. })
                && t.columns[k].default_is_unique()
                && !forced.contains(&k)
        }) {
            continue;
        }
        if cols.iter().any(|k| carriers.contains(k)) {
            continue;
        }
        // Prefer a column whose type has distinct values to give (not a
        // boolean or an enum).
        let undecided: Vec<usize> = cols.iter().copied().filter(|&k| !decided[k]).collect();
        if let Some(&k) = undecided
            .iter()
            .find(|&&k| {
                let col = &t.columns[k];
                families(&col.ty, col.typmod, &col.name, &Literals::default(), 1)
                    .iter()
                    .any(|f| f.injective)
            })
            .or(undecided.first())
        {
            carriers.insert(k);
            continue;
        }
        if let Some(&k) = cols
            .iter()
            .find(|&&k| matches!(vals[k], Val::Omitted { .. }) && !t.columns[k].generated)
        {
            forced.insert(k);
            vals[k] = Val::Null;
            decided[k] = false;
            carriers.insert(k);
            continue;
        }
        for &k in &cols {
            if let Val::Fk { fk, .. } = vals[k] {
                if !radix.contains(&fk) {
                    radix.push(fk);
                }
            }
        }
    }
    let mut rows = requested;
    let mut note = None;
    if !radix.is_empty() {
        let mut divisor: u64 = 1;
        for &j in &radix {
            joins[j].divisor = Some(divisor);
            divisor = divisor.saturating_mul(joins[j].n);
        }
        if divisor < rows {
            note = Some(format!(
                "{divisor} rows: every combination of the referenced rows its UNIQUE key allows"
            ));
            rows = divisor;
        }
    }
    let offset =
        (existing.max(0) as u64).saturating_add(max_integer_key(c, t, qt, &carriers, &forced)?);
    let width = offset.saturating_add(rows);

    let mut plan = Plan {
        table: t,
        vals,
        joins,
        offset,
        rows,
    };
    let fitting = match choose_values(c, &mut plan, &decided, &carriers, width)? {
        Ok(f) => f,
        Err(u) => return Ok(Err(u)),
    };
    if let Err(u) = satisfy_checks(c, &mut plan, &fitting)? {
        return Ok(Err(u));
    }
    insert_rows(c, &plan, &forced, requested, note)
}

/// Step 3 of [`seed_table`]: for each column still to fill, the families of its type that
/// fit it (tried on the sample), the first one chosen; injective ones
/// only for a column that carries a UNIQUE key.
pub(super) fn choose_values(
    c: &mut Client,
    plan: &mut Plan,
    decided: &[bool],
    carriers: &BTreeSet<usize>,
    width: u64,
) -> Result<Result<BTreeMap<usize, Vec<Family>>, UnseededTable>, postgres::Error> {
    let t = plan.table;
    // What the CHECKs on a column mention are candidates for it.
    let mut lits: Vec<Literals> = vec![Literals::default(); t.columns.len()];
    for check in &t.checks {
        for &n in &check.cols {
            if let Some(k) = t.column(n) {
                lits[k].scan(&check.expr);
            }
        }
    }
    let mut fitting: BTreeMap<usize, Vec<Family>> = BTreeMap::new();
    for k in 0..t.columns.len() {
        if decided[k] {
            continue;
        }
        let col = &t.columns[k];
        let mut fams = families(&col.ty, col.typmod, &col.name, &lits[k], width);
        if carriers.contains(&k) && fams.iter().any(|f| f.injective) {
            // Without an injective family the INSERT tells whether the
            // key holds (a few rows of an enum may still be distinct).
            fams.retain(|f| f.injective);
        }
        if !col.not_null() {
            fams.push(fam("NULL"));
        }
        let mut fits = Vec::new();
        let mut last_error = None;
        for f in fams {
            match fits_column(c, plan, k, &f)? {
                Ok(()) => fits.push(f),
                Err(e) => last_error = Some(e),
            }
        }
        if fits.is_empty() {
            let (constraint, message) = last_error.unwrap_or((None, "no candidate".into()));
            return Ok(unseeded(
                t,
                constraint.as_deref(),
                format!(
                    "column {} ({}): no generated value fits it ({message})",
                    col.name, col.sql_type
                ),
            ));
        }
        plan.vals[k] = Val::Gen {
            fams: fits.clone(),
            chosen: 0,
        };
        fitting.insert(k, fits);
    }
    Ok(Ok(fitting))
}

/// Step 4 of [`seed_table`]: CHECK constraints, one at a time: other combinations of the
/// fitting families of its columns until it holds without breaking one
/// that held; its columns are then kept.
pub(super) fn satisfy_checks(
    c: &mut Client,
    plan: &mut Plan,
    fitting: &BTreeMap<usize, Vec<Family>>,
) -> Result<Result<(), UnseededTable>, postgres::Error> {
    let t = plan.table;
    if !t.checks.is_empty() {
        let mut failing = failing_checks(c, plan)?;
        let mut locked: BTreeSet<usize> = BTreeSet::new();
        for ck in 0..t.checks.len() {
            if !failing[ck] {
                locked.extend(t.checks[ck].cols.iter().filter_map(|&n| t.column(n)));
                continue;
            }
            let vars: Vec<usize> = t.checks[ck]
                .cols
                .iter()
                .filter_map(|&n| t.column(n))
                .filter(|k| fitting.contains_key(k) && !locked.contains(k))
                .collect();
            let sizes: Vec<usize> = vars.iter().map(|k| fitting[k].len()).collect();
            for combo in combinations(&sizes).take(MAX_COMBINATIONS) {
                for (v, &k) in vars.iter().enumerate() {
                    plan.vals[k] = Val::Gen {
                        fams: fitting[&k].clone(),
                        chosen: combo[v],
                    };
                }
                let now = failing_checks(c, plan)?;
                let regress = (0..now.len()).any(|j| now[j] && !failing[j]);
                if !now[ck] && !regress {
                    failing = now;
                    break;
                }
            }
            if failing[ck] {
                let check = &t.checks[ck];
                return Ok(unseeded(
                    t,
                    Some(&check.name),
                    format!(
                        "CHECK {} ({}): no combination of generated values satisfies it",
                        check.name, check.expr
                    ),
                ));
            }
            locked.extend(vars);
        }
    }
    Ok(Ok(()))
}

/// Step 5 of [`seed_table`]: the rows, in one transaction with the sequences behind the
/// columns rollsafe filled moved past them.
pub(super) fn insert_rows(
    c: &mut Client,
    plan: &Plan,
    forced: &BTreeSet<usize>,
    requested: u64,
    note: Option<String>,
) -> anyhow::Result<TableResult> {
    let t = plan.table;
    let rows = plan.rows;
    let qt = &t.qualified;
    let mut names = Vec::new();
    for (k, col) in t.columns.iter().enumerate() {
        if plan.expr(k, false).is_some() {
            names.push(quote_ident(&col.name));
        }
    }
    let overriding = t
        .columns
        .iter()
        .enumerate()
        .any(|(k, col)| col.identity && forced.contains(&k));
    let insert = format!(
        "INSERT INTO {qt} ({}){} {}",
        names.join(", "),
        if overriding {
            " OVERRIDING SYSTEM VALUE"
        } else {
            ""
        },
        plan.select(&format!("generate_series(1, {rows}) AS s(g)"), false)
    );
    let started = std::time::Instant::now();
    let mut tx = c.transaction()?;
    let result = tx.execute(insert.as_str(), &[]).and_then(|written| {
        let xid: String = tx
            .query_one("SELECT pg_current_xact_id()::xid::text", &[])?
            .get(0);
        for &k in forced {
            let col = &t.columns[k];
            tx.batch_execute(&format!(
                "SELECT setval(s, m) FROM (SELECT pg_get_serial_sequence({}, {}) AS s,
                        (SELECT max({}) FROM {qt}) AS m) x WHERE s IS NOT NULL AND m IS NOT NULL",
                quote_literal(qt),
                quote_literal(&col.name),
                quote_ident(&col.name)
            ))?;
        }
        Ok((written, xid))
    });
    match result {
        Ok((written, xid)) => {
            tx.commit()?;
            Ok(Ok((
                SeededTable {
                    table: t.name.clone(),
                    requested,
                    written,
                    note,
                    took: started.elapsed(),
                },
                Some(xid),
            )))
        }
        Err(e) => {
            drop(tx);
            let constraint = e
                .as_db_error()
                .and_then(|d| d.constraint())
                .map(str::to_string);
            Ok(unseeded(
                t,
                constraint.as_deref(),
                crate::errors::one_line(&e),
            ))
        }
    }
}

/// Points the rows transaction `xid` wrote into `child` at rows of
/// `parent` through `fk` (left NULL to break a cycle). Skipped when the
/// key's columns make a UNIQUE key on their own (reusing parent rows
/// would collide). The inner error is the server's message; the update
/// is all or nothing.
pub(super) fn fill_broken_reference(
    c: &mut Client,
    child: &Table,
    fk: &ForeignKey,
    parent: &Table,
    xid: &str,
) -> Result<Result<(), String>, postgres::Error> {
    let names = |t: &Table, nums: &[i16]| -> Option<Vec<String>> {
        nums.iter()
            .map(|&n| t.column(n).map(|k| t.columns[k].name.clone()))
            .collect()
    };
    let (Some(cols), Some(refs)) = (names(child, &fk.cols), names(parent, &fk.ref_cols)) else {
        return Ok(Ok(()));
    };
    if child
        .uniques
        .iter()
        .any(|key| key.iter().all(|n| fk.cols.contains(n)))
    {
        return Ok(Ok(()));
    }
    let keys = refs
        .iter()
        .map(|r| quote_ident(r))
        .collect::<Vec<_>>()
        .join(", ");
    let not_null = refs
        .iter()
        .map(|r| format!("{} IS NOT NULL", quote_ident(r)))
        .collect::<Vec<_>>()
        .join(" AND ");
    let set = cols
        .iter()
        .zip(&refs)
        .map(|(c, r)| format!("{} = p.{}", quote_ident(c), quote_ident(r)))
        .collect::<Vec<_>>()
        .join(", ");
    let (qc, qp) = (&child.qualified, &parent.qualified);
    let n: i64 = c
        .query_one(&format!("SELECT count(*) FROM {qp} WHERE {not_null}"), &[])?
        .get(0);
    if n == 0 {
        return Ok(Err(format!("{} has no rows", parent.name)));
    }
    // A constant modulus keeps the join a hash join.
    let sql = format!(
        "UPDATE {qc} AS c SET {set}
           FROM (SELECT ctid AS rid, row_number() OVER () - 1 AS rn FROM {qc}
                  WHERE xmin::text = {}) n
           JOIN (SELECT {keys}, row_number() OVER (ORDER BY {keys}) - 1 AS rn
                   FROM {qp} WHERE {not_null}) p ON p.rn = n.rn % {n}
          WHERE c.ctid = n.rid",
        quote_literal(xid)
    );
    let mut tx = c.transaction()?;
    match tx.execute(sql.as_str(), &[]) {
        Ok(_) => {
            tx.commit()?;
            Ok(Ok(()))
        }
        Err(e) if e.as_db_error().is_some() => Ok(Err(crate::errors::one_line(&e))),
        Err(e) => Err(e),
    }
}

/// The largest value of the integer columns rollsafe fills for a UNIQUE
/// key, so new indexes (`i = g + offset`) start past them.
pub(super) fn max_integer_key(
    c: &mut Client,
    t: &Table,
    qt: &str,
    carriers: &BTreeSet<usize>,
    forced: &BTreeSet<usize>,
) -> Result<u64, postgres::Error> {
    let mut max = 0u64;
    for &k in carriers.iter().chain(forced) {
        let col = &t.columns[k];
        let int = match &col.ty.kind {
            TypeKind::Int(_) => true,
            TypeKind::Domain { base, .. } => matches!(base.kind, TypeKind::Int(_)),
            _ => false,
        };
        if int {
            // numeric: abs() of the smallest bigint would overflow; the cap
            // keeps the offset a bigint whatever the column holds.
            let m: Option<i64> = c
                .query_one(
                    &format!(
                        "SELECT least(coalesce(max(abs({}::numeric)), 0), 1e15)::bigint FROM {qt}",
                        quote_ident(&col.name)
                    ),
                    &[],
                )?
                .get(0);
            max = max.max(m.unwrap_or(0).max(0) as u64);
        }
    }
    Ok(max)
}

/// Whether family `f` gives column `k` values of its type (domain CHECKs,
/// lengths, ranges, NOT NULL) over the sample; the error says why not.
#[allow(clippy::type_complexity)]
pub(super) fn fits_column(
    c: &mut Client,
    plan: &Plan,
    k: usize,
    f: &Family,
) -> Result<Result<(), (Option<String>, String)>, postgres::Error> {
    let col = &plan.table.columns[k];
    let value = format!("({})::{}", at(&f.sql, &plan.index()), col.sql_type);
    let too_long = max_text_len(&col.ty, col.typmod)
        .map_or("false".to_string(), |n| format!("length(v::text) > {n}"));
    let null = if col.not_null() && f.sql != "NULL" {
        "v IS NULL"
    } else {
        "false"
    };
    // `count(v)` makes the server compute v: an output nothing reads is
    // never evaluated, and its cast would never be tried.
    let sql = format!(
        "SELECT count(*) FILTER (WHERE {too_long} OR {null}), count(v) FROM (SELECT {value} AS v FROM {}) x",
        plan.sample()
    );
    match c.query_one(sql.as_str(), &[]) {
        Ok(row) if row.get::<_, i64>(0) == 0 => Ok(Ok(())),
        Ok(_) => Ok(Err((None, "too long or NULL".into()))),
        Err(e) if e.as_db_error().is_some() => Ok(Err((
            e.as_db_error()
                .and_then(|d| d.constraint())
                .map(str::to_string),
            crate::errors::one_line(&e),
        ))),
        Err(e) => Err(e),
    }
}

/// Which of the table's CHECKs some sampled row violates (all of them,
/// when the probe itself fails: a value the expression cannot take).
pub(super) fn failing_checks(c: &mut Client, plan: &Plan) -> Result<Vec<bool>, postgres::Error> {
    let checks = &plan.table.checks;
    let counts = checks
        .iter()
        .map(|ck| format!("count(*) FILTER (WHERE ({}) IS FALSE)", ck.expr))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT ARRAY[{counts}]::bigint[] FROM ({}) t",
        plan.select(&plan.sample(), true)
    );
    match c.query_one(sql.as_str(), &[]) {
        Ok(row) => Ok(row.get::<_, Vec<i64>>(0).iter().map(|&n| n > 0).collect()),
        Err(e) if e.as_db_error().is_some() => Ok(vec![true; checks.len()]),
        Err(e) => Err(e),
    }
}

/// Every combination of choices (`sizes[v]` options for variable v),
/// the first choices first.
pub(super) fn combinations(sizes: &[usize]) -> impl Iterator<Item = Vec<usize>> + '_ {
    let total = sizes
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .unwrap_or(usize::MAX);
    let total = if sizes.contains(&0) { 0 } else { total };
    (0..total).map(move |mut n| {
        sizes
            .iter()
            .map(|&s| {
                let d = n % s;
                n /= s;
                d
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_enumerate_first_choices_first() {
        let all: Vec<Vec<usize>> = combinations(&[2, 3]).collect();
        assert_eq!(all.len(), 6);
        assert_eq!(all[0], [0, 0]);
        assert_eq!(all[1], [1, 0]);
        assert_eq!(combinations(&[2, 0]).count(), 0);
    }
}

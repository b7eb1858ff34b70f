//! Writing one table's rows: one `INSERT … SELECT … FROM generate_series`
//! in its own transaction with the sequences moved past them, and, after
//! every table, the foreign keys set aside to break a cycle filled in.

use std::collections::BTreeSet;

use postgres::Client;

use super::catalogue::{ForeignKey, Table, TypeInfo, TypeKind};
use super::families::quote_literal;
use super::plan::{unseeded, Plan, TableResult};
use super::SeededTable;
use crate::pg::quote_ident;

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
        // Only integer columns (or domains over one) draw from a
        // sequence; explicit casts, since a domain's max() is the domain
        // and `setval(text, <domain>)` resolves to no function.
        for &k in forced.iter().filter(|&&k| is_integer(&t.columns[k].ty)) {
            let col = &t.columns[k];
            tx.batch_execute(&format!(
                "SELECT setval(s::regclass, m) FROM (SELECT pg_get_serial_sequence({}, {}) AS s,
                        (SELECT max({}::bigint) FROM {qt}) AS m) x WHERE s IS NOT NULL AND m IS NOT NULL",
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
        if is_integer(&col.ty) {
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

/// An integer type, or a domain over one (at any depth).
fn is_integer(ty: &TypeInfo) -> bool {
    match &ty.kind {
        TypeKind::Int(_) => true,
        TypeKind::Domain { base, .. } => is_integer(base),
        _ => false,
    }
}

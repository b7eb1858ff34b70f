//! Writing one table's rows: one `INSERT … SELECT … FROM generate_series`
//! in its own transaction with the sequences moved past them, and, after
//! every table, the foreign keys set aside to break a cycle filled in.

use std::collections::{BTreeSet, HashMap};

use postgres::GenericClient;

use super::catalogue::{ForeignKey, Table, TypeInfo, TypeKind};
use super::fk_checks::{violations, FkCheckBypass};
use super::plan::{unseeded, Plan, TableResult};
use super::SeededTable;
use crate::pg::quote_ident;
use crate::pg::quote_literal;

/// Rows written through the table's INSERT triggers before their cost is
/// judged: a first batch, then a second of the same size.
const TRIGGER_PROBE_ROWS: u64 = 1000;
/// The longest the rest of a table's rows may take through its triggers
/// (projected from the second batch) before they are written past them.
/// A seeding is meant to write ~85 000 rows a second (issue 30: 170 000
/// rows in 2 s): one table's triggers may take about half of that. With
/// JIT off (see [`super::seed`]) the projection is what the rows then
/// take: 2.1-2.3 s measured for the rest of a former fixture's table
/// whose trigger updates one counter row of another table per row (its
/// versions pile up in the transaction: the cost per row grows).
const TRIGGER_BUDGET: std::time::Duration = std::time::Duration::from_secs(1);

/// Step 6 of [`seed_table`]: the rows, in one transaction with the
/// sequences behind the columns rollsafe filled moved past them; or, in
/// a group of tables seeded in one transaction (`own_transaction` false:
/// a deferred foreign-key cycle), on `c` directly.
///
/// A table with INSERT triggers gets its rows through them first, as
/// production writes them. Seeded past them (each disabled for the
/// INSERT and enabled again in the same transaction, as its owner) when
/// they refuse the generated rows, or when their cost per row grows with
/// the table (a trigger that counts the table on every insert makes
/// seeding quadratic) or would pass [`TRIGGER_BUDGET`]: the table's
/// [`SeededTable::past_triggers`] says which and why.
pub(super) fn insert_rows(
    c: &mut impl GenericClient,
    plan: &Plan,
    forced: &BTreeSet<usize>,
    requested: u64,
    note: Option<String>,
    own_transaction: bool,
    bypass: Option<(&FkCheckBypass, &HashMap<u32, &Table>)>,
) -> anyhow::Result<TableResult> {
    let t = plan.table;
    let started = std::time::Instant::now();
    let past_fk_checks = match bypass {
        Some((b, parents)) if own_transaction && FkCheckBypass::applies_to(t) => {
            write_past_fk_checks(c, plan, forced, b, parents)?
        }
        _ => None,
    };
    let outcome = if let Some(outcome) = past_fk_checks {
        outcome
    } else if !own_transaction {
        write(c, plan, forced, Through::Triggers(1, plan.rows))
    } else if t.insert_triggers.is_empty() {
        let mut tx = c.transaction()?;
        let r = write(&mut tx, plan, forced, Through::Triggers(1, plan.rows));
        commit_if_ok(tx, r)
    } else {
        write_with_triggers(c, plan, forced)?
    };
    match outcome {
        Ok(Written {
            rows,
            xid,
            past_triggers,
        }) => Ok(Ok((
            SeededTable {
                table: t.name.clone(),
                requested,
                written: rows,
                note,
                past_triggers,
                took: started.elapsed(),
            },
            Some(xid),
        ))),
        Err(e) if e.as_db_error().is_some() => {
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
        Err(e) => Err(e.into()),
    }
}

/// The rows in one transaction past the per-row foreign-key checks, every
/// key then checked once ([`super::fk_checks`]). None: the plain path
/// must write them (the session could not enter replica mode, or a row
/// refused by a key was found: nothing of it is kept).
fn write_past_fk_checks(
    c: &mut impl GenericClient,
    plan: &Plan,
    forced: &BTreeSet<usize>,
    bypass: &FkCheckBypass,
    parents: &HashMap<u32, &Table>,
) -> Result<Option<Result<Written, postgres::Error>>, postgres::Error> {
    let t = plan.table;
    let mut tx = c.transaction()?;
    match bypass.enter(&mut tx) {
        Ok(()) => {}
        Err(e) if e.as_db_error().is_some() => {
            log::debug!(
                "generate: {}: replica mode refused ({}); rows through the foreign-key checks",
                t.name,
                crate::errors::one_line(&e)
            );
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    let written = match write(&mut tx, plan, forced, Through::Triggers(1, plan.rows)) {
        Ok(w) => w,
        // The same INSERT through the checks fails the same way (a key,
        // a CHECK): the table's problem, said as the plain path says it.
        Err(e) => return Ok(Some(Err(e))),
    };
    let refused = violations(&mut tx, t, parents)?;
    if refused > 0 {
        log::debug!(
            "generate: {}: {refused} rows written past the foreign-key checks point at no parent row; written again through them",
            t.name
        );
        return Ok(None);
    }
    tx.commit()?;
    Ok(Some(Ok(written)))
}

/// What one table's writing did.
struct Written {
    rows: u64,
    /// The transaction that wrote them, to find them again.
    xid: String,
    past_triggers: Option<String>,
}

/// Rows `from..=to` of the plan, through the table's triggers or past
/// them.
#[derive(Clone, Copy)]
enum Through {
    Triggers(u64, u64),
    PastTriggers(u64, u64),
}

fn commit_if_ok(
    tx: postgres::Transaction<'_>,
    r: Result<Written, postgres::Error>,
) -> Result<Written, postgres::Error> {
    match r {
        Ok(w) => {
            tx.commit()?;
            Ok(w)
        }
        Err(e) => Err(e),
    }
}

/// The measured path of a table with INSERT triggers (see
/// [`insert_rows`]): the first two batches through them, then the rest
/// through them or past them. A refusal starts over past them, in a
/// transaction of its own.
fn write_with_triggers(
    c: &mut impl GenericClient,
    plan: &Plan,
    forced: &BTreeSet<usize>,
) -> Result<Result<Written, postgres::Error>, postgres::Error> {
    let rows = plan.rows;
    let names = plan
        .table
        .insert_triggers
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let mut tx = c.transaction()?;
    // Three batches: a warm-up (plans, caches), then two whose cost per
    // row is compared, the second twice the first's size.
    let (b1, b2) = (TRIGGER_PROBE_ROWS / 2, TRIGGER_PROBE_ROWS / 2);
    let ends = [
        b1.min(rows),
        (b1 + b2).min(rows),
        (b1 + b2 + TRIGGER_PROBE_ROWS).min(rows),
    ];
    let mut spent = Vec::new();
    let mut from = 1;
    let mut written = None;
    let per_row = |(n, d): (u64, std::time::Duration)| d.as_secs_f64() * 1000.0 / n.max(1) as f64;
    for &to in &ends {
        if to < from {
            break;
        }
        let at = std::time::Instant::now();
        match write(&mut tx, plan, forced, Through::Triggers(from, to)) {
            Ok(w) => {
                spent.push((to - from + 1, at.elapsed()));
                written.get_or_insert(w);
                // At the second batch's cost, even without growth, the
                // rest would take longer than the budget: the third
                // batch could only make it worse (a counter row updated
                // per row, ~1 ms a row: 1.1 s more through them).
                if let [_, second] = spent[..] {
                    let left = rows.saturating_sub(to) as f64;
                    if per_row(second) * left > TRIGGER_BUDGET.as_secs_f64() * 1000.0 {
                        from = to + 1;
                        break;
                    }
                }
            }
            Err(e) if e.as_db_error().is_some() => {
                drop(tx);
                let why = format!(
                    "its INSERT triggers ({names}) refuse the generated rows ({})",
                    crate::errors::one_line(&e)
                );
                let mut tx = c.transaction()?;
                let r =
                    write(&mut tx, plan, forced, Through::PastTriggers(1, rows)).map(|w| Written {
                        past_triggers: Some(format!(
                            "all {rows} rows written with its triggers disabled: {why}"
                        )),
                        ..w
                    });
                return Ok(commit_if_ok(tx, r));
            }
            Err(e) => return Err(e),
        }
        from = to + 1;
    }
    let Some(written) = written else {
        return Ok(commit_if_ok(
            tx,
            Ok(Written {
                rows: 0,
                xid: String::new(),
                past_triggers: None,
            }),
        ));
    };
    let Projection {
        rest,
        p2,
        p3,
        measured,
        grows,
        projected,
    } = project(&spent, &ends, from, rows);
    let past = rest > 0 && projected > TRIGGER_BUDGET;
    log::debug!(
        "generate: {} through its triggers: {p2:.4} ms/row after {} rows, {p3:.4} after {}, {:.1} s projected for the other {rest}",
        plan.table.name,
        ends[0],
        ends[1],
        projected.as_secs_f64()
    );
    let r = match rest {
        0 => Ok(written),
        _ if past => write(&mut tx, plan, forced, Through::PastTriggers(from, rows)),
        _ => write(&mut tx, plan, forced, Through::Triggers(from, rows)),
    }
    .map(|w| Written {
        rows,
        past_triggers: past.then(|| {
            let cost = if measured {
                format!("{p2:.3} ms each after {} rows and {p3:.3} ms after {}", ends[0], ends[1])
            } else {
                format!("{p2:.3} ms each after {} rows", ends[0])
            };
            format!(
                "{rest} of its {rows} rows written with its INSERT triggers ({names}) disabled: through them rows cost {cost} ({}; {:.1} s projected for the rest)",
                if grows { "their cost grows with the table" } else { "too slow to seed" },
                projected.as_secs_f64()
            )
        }),
        ..w
    });
    Ok(commit_if_ok(tx, r))
}

/// The rows left after the measured batches, and what writing them
/// through the triggers is projected to cost.
struct Projection {
    rest: u64,
    /// The cost per row (ms) of the second and third batches.
    p2: f64,
    p3: f64,
    /// Whether all three batches ran (else the second's cost, flat).
    measured: bool,
    grows: bool,
    projected: std::time::Duration,
}

/// The projection of [`write_with_triggers`]: `spent` the batches written
/// (rows, time) up to `ends`, `from` the first row left of `rows`.
fn project(
    spent: &[(u64, std::time::Duration)],
    ends: &[u64; 3],
    from: u64,
    rows: u64,
) -> Projection {
    let per_row = |(n, d): (u64, std::time::Duration)| d.as_secs_f64() * 1000.0 / n.max(1) as f64;
    let rest = rows.saturating_sub(from - 1);
    let (p2, p3) = match spent[..] {
        [_, second, third] => (per_row(second), per_row(third)),
        // (Cut after the second batch: its cost, flat.)
        [_, second] => (per_row(second), per_row(second)),
        _ => (0.0, 0.0),
    };
    // The cost per row as a line in the table's size m (p = a + b·m),
    // through the middles of the last two batches; the rest of the rows
    // projected along it. A trigger whose cost grows with the table
    // makes seeding quadratic, which the projection shows; a cheap one
    // stays under the budget, whatever the noise on its slope.
    let (m2, m3) = (
        (ends[0] + ends[1]) as f64 / 2.0,
        (ends[1] + ends[2]) as f64 / 2.0,
    );
    let measured = spent.len() == 3;
    let slope = if measured {
        ((p3 - p2) / (m3 - m2)).max(0.0)
    } else {
        0.0
    };
    let grows = measured && p3 > 1.3 * p2;
    let (done, all, left) = ((from - 1) as f64, rows as f64, rest as f64);
    let rest_ms = p3 * left + slope * ((all * all - done * done) / 2.0 - m3 * left);
    let projected = std::time::Duration::from_secs_f64(rest_ms.max(0.0) / 1000.0);
    Projection {
        rest,
        p2,
        p3,
        measured,
        grows,
        projected,
    }
}

/// One INSERT of rows `through` (with the table's triggers disabled
/// around it when past them), then the sequences behind the columns
/// rollsafe filled moved past the rows.
fn write(
    c: &mut impl GenericClient,
    plan: &Plan,
    forced: &BTreeSet<usize>,
    through: Through,
) -> Result<Written, postgres::Error> {
    let t = plan.table;
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
    let ((from, to), past) = match through {
        Through::Triggers(from, to) => ((from, to), false),
        Through::PastTriggers(from, to) => ((from, to), true),
    };
    let insert = format!(
        "INSERT INTO {qt} ({}){} {}",
        names.join(", "),
        if overriding {
            " OVERRIDING SYSTEM VALUE"
        } else {
            ""
        },
        plan.select(&format!("generate_series({from}, {to}) AS s(g)"), false)
    );
    if past {
        for (name, _) in &t.insert_triggers {
            c.batch_execute(&format!(
                "ALTER TABLE {qt} DISABLE TRIGGER {}",
                quote_ident(name)
            ))?;
        }
    }
    let written = c.execute(insert.as_str(), &[])?;
    if past {
        // Back as it was: ENABLE (origin), ALWAYS or REPLICA.
        for (name, mode) in &t.insert_triggers {
            let how = match mode.as_str() {
                "A" => "ENABLE ALWAYS",
                "R" => "ENABLE REPLICA",
                _ => "ENABLE",
            };
            c.batch_execute(&format!(
                "ALTER TABLE {qt} {how} TRIGGER {}",
                quote_ident(name)
            ))?;
        }
    }
    let xid: String = c
        .query_one("SELECT pg_current_xact_id()::xid::text", &[])?
        .get(0);
    // Only integer columns (or domains over one) draw from a
    // sequence; explicit casts, since a domain's max() is the domain
    // and `setval(text, <domain>)` resolves to no function.
    for &k in forced.iter().filter(|&&k| is_integer(&t.columns[k].ty)) {
        let col = &t.columns[k];
        c.batch_execute(&format!(
            "SELECT setval(s::regclass, m) FROM (SELECT pg_get_serial_sequence({}, {}) AS s,
                    (SELECT max({}::bigint) FROM {qt}) AS m) x WHERE s IS NOT NULL AND m IS NOT NULL",
            quote_literal(qt),
            quote_literal(&col.name),
            quote_ident(&col.name)
        ))?;
    }
    Ok(Written {
        rows: written,
        xid,
        past_triggers: None,
    })
}

/// Points the rows transaction `xid` wrote into `child` at rows of
/// `parent` through `fk` (left NULL to break a cycle). Skipped when the
/// key's columns make a UNIQUE key on their own (reusing parent rows
/// would collide). Its columns that other keys share are kept and
/// matched ([`fill_agreeing`]). The inner error is the server's message; the update
/// is all or nothing.
pub(super) fn fill_broken_reference(
    c: &mut impl GenericClient,
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
    let (keys, not_null) = key_columns(&refs);
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
    // Columns another key of the child shares keep their values (a
    // tenant): the parent row is one that agrees on them.
    let shared: Vec<usize> = (0..cols.len())
        .filter(|&i| {
            child
                .fks
                .iter()
                .any(|o| o.name != fk.name && o.cols.contains(&fk.cols[i]))
        })
        .collect();
    let sql = if shared.is_empty() {
        // A constant modulus keeps the join a hash join.
        format!(
            "UPDATE {qc} AS c SET {set}
               FROM (SELECT ctid AS rid, row_number() OVER () - 1 AS rn FROM {qc}
                      WHERE xmin::text = {}) n
               JOIN (SELECT {keys}, row_number() OVER (ORDER BY {keys}) - 1 AS rn
                       FROM {qp} WHERE {not_null}) p ON p.rn = n.rn % {n}
              WHERE c.ctid = n.rid",
            quote_literal(xid)
        )
    } else {
        fill_agreeing(child, parent, &cols, &refs, &shared, xid)
    };
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

/// The UPDATE of [`fill_broken_reference`] for a key whose columns
/// `shared` (positions in `cols`, the child's, and `refs`, the parent's)
/// other keys of the child share: those are matched, not set. The rows
/// written (`xid`) are numbered within each group of equal shared values,
/// the parent's rows likewise and counted per group; row `rn` of a group
/// takes the parent's row `rn % count` of the same group. A row no parent
/// row agrees with keeps its NULLs (the key is MATCH SIMPLE and was left
/// NULL). Equalities only, so the joins stay hash joins.
fn fill_agreeing(
    child: &Table,
    parent: &Table,
    cols: &[String],
    refs: &[String],
    shared: &[usize],
    xid: &str,
) -> String {
    let list = |names: &[String], alias: bool| {
        shared
            .iter()
            .enumerate()
            .map(|(s, &i)| {
                let col = quote_ident(&names[i]);
                if alias {
                    format!("{col} AS rollsafe_s{s}")
                } else {
                    col
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let on = |a: &str, b: &str| {
        (0..shared.len())
            .map(|s| format!("{a}.rollsafe_s{s} = {b}.rollsafe_s{s}"))
            .collect::<Vec<_>>()
            .join(" AND ")
    };
    let set = (0..cols.len())
        .filter(|i| !shared.contains(i))
        .map(|i| format!("{} = p.{}", quote_ident(&cols[i]), quote_ident(&refs[i])))
        .collect::<Vec<_>>()
        .join(", ");
    let (keys, not_null) = key_columns(refs);
    let (qc, qp) = (&child.qualified, &parent.qualified);
    let (child_shared, parent_shared) = (list(cols, false), list(refs, false));
    format!(
        "UPDATE {qc} AS c SET {set}
           FROM (SELECT ctid AS rid, {}, row_number() OVER (PARTITION BY {child_shared}) - 1 AS rn
                   FROM {qc} WHERE xmin::text = {}) n
           JOIN (SELECT {}, count(*) AS rollsafe_n FROM {qp} WHERE {not_null}
                  GROUP BY {parent_shared}) k ON {}
           JOIN (SELECT {keys}, {}, row_number() OVER (PARTITION BY {parent_shared} ORDER BY {keys}) - 1 AS rn
                   FROM {qp} WHERE {not_null}) p ON {} AND p.rn = n.rn % k.rollsafe_n
          WHERE c.ctid = n.rid",
        list(cols, true),
        quote_literal(xid),
        list(refs, true),
        on("k", "n"),
        list(refs, true),
        on("p", "n"),
    )
}

/// The largest value of the integer columns rollsafe fills for a UNIQUE
/// key, so new indexes (`i = g + offset`) start past them.
pub(super) fn max_integer_key(
    c: &mut impl GenericClient,
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

/// The referenced columns `refs` as a select list (`"a", "b"`) and as the
/// condition that none is NULL (`"a" IS NOT NULL AND "b" IS NOT NULL`).
fn key_columns(refs: &[String]) -> (String, String) {
    let quoted: Vec<String> = refs.iter().map(|r| quote_ident(r)).collect();
    let not_null = quoted
        .iter()
        .map(|q| format!("{q} IS NOT NULL"))
        .collect::<Vec<_>>()
        .join(" AND ");
    (quoted.join(", "), not_null)
}

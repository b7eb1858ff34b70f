//! A CHECK met by search, with the server as the judge: whatever its
//! form (a state machine of several branches, `x IS NULL OR x::text =
//! ANY (ARRAY[…])`, `num_nonnulls(…) >= 2`, an `IN` list over a cast),
//! the candidate families of the columns it names (NULL, the literals it
//! mentions, the type's values, numbers just around its bounds:
//! [`super::families`]) are tried as rows against the expression itself,
//! in one query per step ([`super::probe`]), not one round trip per
//! combination.
//!
//! The candidates are first narrowed per column: a part of the
//! expression (an `AND` term of it, or of one of its `OR` branches) that
//! names one column alone keeps only the families that hold it. The
//! product of what is left is then tried whole, within [`MAX_TRIES`]
//! combinations, every other CHECK that held still holding; the first
//! combination in the order [`super::fit::combinations`] walks them wins,
//! so a table the plain walk seeded gets the same values. The whole
//! expression is narrowed first, then each `OR` branch in turn.

use std::collections::BTreeMap;

use postgres::GenericClient;

use super::catalogue::mentioned_columns;
use super::family::Family;
use super::plan::{Plan, Val};
use super::probe::probe;

/// Combinations one search tries at most (each on every sampled row).
pub(super) const MAX_TRIES: u64 = 20_000;

/// What a search found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Searched {
    /// The plan's values now hold the CHECK.
    Found,
    /// No combination tried holds it: how many were tried.
    NotFound { tries: u64 },
    /// The server could not judge (a candidate the expression cannot
    /// take, as a cast that fails): the caller walks the combinations one
    /// by one instead.
    Unjudged,
}

/// Searches values of `vars` (columns by index, each among its
/// `fitting` families) that hold CHECK `ck` of the plan's table, while
/// the CHECKs `failing` does not mark keep holding.
pub(super) fn search_check(
    c: &mut impl GenericClient,
    plan: &mut Plan,
    fitting: &BTreeMap<usize, Vec<Family>>,
    ck: usize,
    vars: &[usize],
    failing: &[bool],
) -> Result<Searched, postgres::Error> {
    if vars.is_empty() {
        return Ok(Searched::NotFound { tries: 0 });
    }
    let expr = plan.table.checks[ck].expr.clone();
    let mut parts = vec![expr.clone()];
    let branches = split_top(&expr, "OR");
    if branches.len() > 1 {
        parts.extend(branches);
    }
    let mut tries = 0u64;
    for part in parts {
        let mut allowed = Vec::new();
        for &k in vars {
            let kept = narrow(c, plan, fitting, k, vars, &part)?;
            tries += fitting[&k].len() as u64;
            allowed.push(kept);
        }
        if allowed.iter().any(Vec::is_empty) {
            continue;
        }
        cap(&mut allowed);
        let combos = allowed.iter().map(|a| a.len() as u64).product::<u64>();
        let outcome = try_all(c, plan, fitting, ck, vars, &allowed, failing)?;
        match outcome {
            Some(Some(choice)) => {
                for (v, &k) in vars.iter().enumerate() {
                    plan.vals[k] = Val::Gen {
                        fams: fitting[&k].clone(),
                        chosen: choice[v],
                    };
                }
                return Ok(Searched::Found);
            }
            Some(None) => tries += combos,
            None => return Ok(Searched::Unjudged),
        }
    }
    Ok(Searched::NotFound { tries })
}

/// The families of column `k` that hold every `AND` term of `part` that
/// names `k` and no other of `vars` (all of them when no term does); a
/// family the server cannot evaluate there is left out.
fn narrow(
    c: &mut impl GenericClient,
    plan: &mut Plan,
    fitting: &BTreeMap<usize, Vec<Family>>,
    k: usize,
    vars: &[usize],
    part: &str,
) -> Result<Vec<usize>, postgres::Error> {
    let t = plan.table;
    let own: Vec<String> = split_top(part, "AND")
        .into_iter()
        .filter(|term| {
            let named = mentioned_columns(term, &t.columns);
            let named: Vec<usize> = named.iter().filter_map(|&n| t.column(n)).collect();
            named.contains(&k) && named.iter().all(|j| *j == k || !vars.contains(j))
        })
        .collect();
    let all: Vec<usize> = (0..fitting[&k].len()).collect();
    if own.is_empty() {
        return Ok(all);
    }
    let holds = own
        .iter()
        .map(|term| format!("bool_and(({term}) IS NOT FALSE)"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let saved = plan.vals[k].clone();
    let keep = match kept_choices(
        c,
        plan,
        fitting,
        &[k],
        std::slice::from_ref(&all),
        &holds,
        0,
    )? {
        Some(rows) => rows.into_iter().map(|r| r[0]).collect(),
        None => {
            // One family the term cannot take (a cast of a word to a
            // number) fails the whole query: each alone, then.
            let mut keep = Vec::new();
            for f in all {
                if kept_choices(c, plan, fitting, &[k], &[vec![f]], &holds, 0)?
                    .is_some_and(|rows| !rows.is_empty())
                {
                    keep.push(f);
                }
            }
            keep
        }
    };
    plan.vals[k] = saved;
    Ok(keep)
}

/// The first combination of `allowed` (in [`super::fit::combinations`]'
/// order) under which CHECK `ck` and every CHECK `failing` does not mark hold on
/// every sampled row: Some(None) when none does, None when the server
/// could not judge.
fn try_all(
    c: &mut impl GenericClient,
    plan: &mut Plan,
    fitting: &BTreeMap<usize, Vec<Family>>,
    ck: usize,
    vars: &[usize],
    allowed: &[Vec<usize>],
    failing: &[bool],
) -> Result<Option<Option<Vec<usize>>>, postgres::Error> {
    let checks = &plan.table.checks;
    let holds = checks
        .iter()
        .enumerate()
        .filter(|(j, _)| *j == ck || !failing[*j])
        .map(|(_, check)| format!("bool_and(({}) IS NOT FALSE)", check.expr))
        .collect::<Vec<_>>()
        .join(" AND ");
    let saved: Vec<Val> = vars.iter().map(|&k| plan.vals[k].clone()).collect();
    let found = kept_choices(c, plan, fitting, vars, allowed, &holds, 1)?;
    for (&k, v) in vars.iter().zip(saved) {
        plan.vals[k] = v;
    }
    Ok(found.map(|rows| rows.into_iter().next()))
}

/// The combinations of choices (`allowed[v]` for column `vars[v]`, the
/// others as the plan has them) under which `holds` (aggregates over the
/// sampled rows) is true, in [`super::fit::combinations`]' order, at
/// most `limit` of them (0: all); None when the query fails.
fn kept_choices(
    c: &mut impl GenericClient,
    plan: &mut Plan,
    fitting: &BTreeMap<usize, Vec<Family>>,
    vars: &[usize],
    allowed: &[Vec<usize>],
    holds: &str,
    limit: usize,
) -> Result<Option<Vec<Vec<usize>>>, postgres::Error> {
    let mut lists = Vec::new();
    for (v, &k) in vars.iter().enumerate() {
        let ty = &plan.table.columns[k].sql_type;
        let var = format!("rollsafe_c{v}");
        let arms: String = allowed[v]
            .iter()
            .map(|&f| format!(" WHEN {f} THEN ({})::{ty}", fitting[&k][f].sql))
            .collect();
        plan.vals[k] = Val::Gen {
            fams: vec![super::family::fam(format!("CASE {var}{arms} END"))],
            chosen: 0,
        };
        let list = allowed[v]
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",");
        lists.push(format!("unnest('{{{list}}}'::int[]) AS a{v}({var})"));
    }
    let names: Vec<String> = (0..vars.len()).map(|v| format!("rollsafe_c{v}")).collect();
    let source = format!(
        "{} CROSS JOIN (SELECT * FROM {}) AS rollsafe_k",
        plan.sample(),
        lists.join(" CROSS JOIN ")
    );
    let select = plan
        .select(&source, true)
        .replacen("SELECT ", "SELECT rollsafe_k.*, ", 1);
    let order: String = names.iter().rev().cloned().collect::<Vec<_>>().join(", ");
    let limit = if limit > 0 {
        format!(" LIMIT {limit}")
    } else {
        String::new()
    };
    let cols = names.join(", ");
    let sql = format!(
        "SELECT string_agg(concat_ws(',', {cols}), ';' ORDER BY {order})
           FROM (SELECT {cols} FROM ({select}) t GROUP BY {cols} HAVING {holds} ORDER BY {order}{limit}) x"
    );
    match probe(c, &sql)? {
        Ok(row) => Ok(Some(
            row.get::<_, Option<String>>(0)
                .unwrap_or_default()
                .split(';')
                .filter(|r| !r.is_empty())
                .map(|r| r.split(',').filter_map(|f| f.parse().ok()).collect())
                .collect(),
        )),
        Err(e) if e.as_db_error().is_some() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Fewer choices until their product is at most [`MAX_TRIES`]: the most
/// significant column of the walk's order (the last) gives up its
/// choices first, from the second to last down, so the combinations the
/// walk meets first stay, and so does each list's last choice (NULL,
/// where the column takes it).
fn cap(allowed: &mut [Vec<usize>]) {
    loop {
        let product = allowed
            .iter()
            .try_fold(1u64, |acc, a| acc.checked_mul(a.len() as u64))
            .unwrap_or(u64::MAX);
        if product <= MAX_TRIES {
            return;
        }
        let Some(list) = allowed.iter_mut().rev().find(|a| a.len() > 2) else {
            return;
        };
        let at = list.len() - 2;
        list.remove(at);
    }
}

/// The parts of `expr` joined by `op` (`AND`, `OR`) at its top level, as
/// `pg_get_constraintdef` writes it (fully parenthesised): outer
/// parentheses stripped, string literals and quoted names kept whole.
pub(super) fn split_top(expr: &str, op: &str) -> Vec<String> {
    let e = strip_parens(expr.trim());
    let sep = format!(" {op} ");
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None::<char>, 0usize);
    let bytes = e.as_bytes();
    let mut i = 0;
    while i < e.len() {
        let ch = bytes[i] as char;
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(ch),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, _) if depth == 0 && e[i..].starts_with(&sep) => {
                parts.push(strip_parens(e[start..i].trim()).to_string());
                i += sep.len();
                start = i;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(strip_parens(e[start..].trim()).to_string());
    parts
}

/// `expr` without parentheses that enclose all of it.
fn strip_parens(mut e: &str) -> &str {
    while e.starts_with('(') && e.ends_with(')') && closes_at_end(e) {
        e = e[1..e.len() - 1].trim();
    }
    e
}

/// Whether the `(` that opens `e` is closed by its last character.
fn closes_at_end(e: &str) -> bool {
    let (mut depth, mut quote) = (0i32, None::<char>);
    for (i, ch) in e.char_indices() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(ch),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    return i == e.len() - 1;
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_split_at_their_top_level_only() {
        let e = "(((mode = 'dynamic'::text) AND (a IS NULL) AND (((b IS NULL) AND (c IS NULL)) OR (b > 0))) OR ((mode = 'manual'::text) AND (a IS NOT NULL)))";
        let or = split_top(e, "OR");
        assert_eq!(or.len(), 2);
        assert_eq!(
            split_top(&or[0], "AND"),
            [
                "mode = 'dynamic'::text",
                "a IS NULL",
                "((b IS NULL) AND (c IS NULL)) OR (b > 0)"
            ]
        );
        assert_eq!(split_top("((x) = ' OR ')", "OR"), ["(x) = ' OR '"]);
        assert_eq!(split_top("(a) OR (b)", "OR"), ["a", "b"]);
        let mut allowed = vec![(0..200).collect(), (0..200).collect(), vec![0, 1, 2]];
        cap(&mut allowed);
        assert!(allowed.iter().map(|a| a.len() as u64).product::<u64>() <= MAX_TRIES);
        assert_eq!(allowed[2], [0, 2]);
        assert_eq!(allowed[0].len(), 200);
        assert_eq!(allowed[1].last(), Some(&199));
    }
}

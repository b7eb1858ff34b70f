//! Values that fit one table: for each column still to fill, the first
//! family its type accepts on a sample of row indexes, then other
//! combinations until every CHECK of the table holds on the sample (found
//! by the server, [`super::search`]).

use std::collections::{BTreeMap, BTreeSet};

use postgres::GenericClient;

use super::families::{families, Literals};
use super::family::{at, fam, Family};
use super::plan::{unseeded, Plan, Val};
use super::probe::{probe, probe_opt};
use super::search::{search_check, Searched};
use super::{UnseededTable, MAX_COMBINATIONS};

/// Step 3 of [`seed_table`]: for each column still to fill, the families of its type that
/// fit it (tried on the sample), the first one chosen; injective ones
/// only for a column that carries a UNIQUE key. A JSON column's first
/// family carries what the table and `app_statements` read of it.
pub(super) fn choose_values(
    c: &mut impl GenericClient,
    plan: &mut Plan,
    decided: &[bool],
    carriers: &BTreeSet<usize>,
    width: u64,
    app_statements: &[String],
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
    let routed = super::partition::routed_values(c, t)?;
    let mut fitting: BTreeMap<usize, Vec<Family>> = BTreeMap::new();
    for k in 0..t.columns.len() {
        if decided[k] {
            continue;
        }
        let col = &t.columns[k];
        let mut fams = families(&col.ty, col.value_typmod(), &col.name, &lits[k], width);
        if let Some(documents) = super::json::shaped_documents(c, t, k, app_statements)? {
            // What the table's generated columns, CHECKs and indexes read
            // of the documents is in them: nothing else satisfies those.
            fams.insert(0, documents);
        }
        if let Some((_, routed)) = routed.as_ref().filter(|(n, _)| *n == col.num) {
            // Only values some partition takes can be inserted at all.
            fams = vec![routed.clone()];
        }
        if carriers.contains(&k) && fams.iter().any(|f| f.injective) {
            // Without an injective family the INSERT tells whether the
            // key holds (a few rows of an enum may still be distinct). A
            // list taken in turn stays: its key walks the combinations
            // with the key's foreign keys ([`walk_lists`]).
            fams.retain(|f| f.injective || f.cycle.is_some());
        }
        if !col.not_null() {
            // A nullable `…_id` column no foreign key, key or CHECK holds
            // yet names rows of a table a later migration may point it at
            // (`ADD FOREIGN KEY`): made-up numbers there would fail that
            // migration on rows production could not have. NULL is what
            // such a column holds until the app fills it.
            let reference = col.name.ends_with("_id")
                && !carriers.contains(&k)
                && !t.uniques.iter().flatten().any(|&n| n == col.num)
                && !t.checks.iter().any(|ck| ck.cols.contains(&col.num));
            if reference {
                fams.insert(0, fam("NULL"));
            } else {
                fams.push(fam("NULL"));
            }
        }
        let mut fits = Vec::new();
        let mut last_error = None;
        let tried = fams.len();
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
                    "column {} ({}): no generated value fits it ({message}; {tried} candidates tried)",
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
/// that held; its columns are then kept. A CHECK no combination meets
/// also takes the columns it names that were left to their defaults
/// (a `kind` defaulting to the branch a default of another column
/// breaks), each with its default first ([`release_defaults`]).
pub(super) fn satisfy_checks(
    c: &mut impl GenericClient,
    plan: &mut Plan,
    fitting: &mut BTreeMap<usize, Vec<Family>>,
) -> Result<Result<(), UnseededTable>, postgres::Error> {
    let t = plan.table;
    if !t.checks.is_empty() {
        let mut failing = failing_checks(c, plan)?;
        let mut locked: BTreeSet<usize> = BTreeSet::new();
        for ck in 0..t.checks.len() {
            // A CHECK that holds keeps holding (a combination that breaks
            // it is refused below), but its columns stay free: another
            // CHECK may need them (`retired_on IS NULL OR …` holds for
            // any date, `(state = 'retired') = (retired_on IS NOT NULL)`
            // only for NULL).
            if !failing[ck] {
                continue;
            }
            let mut vars: Vec<usize> = t.checks[ck]
                .cols
                .iter()
                .filter_map(|&n| t.column(n))
                .filter(|k| fitting.contains_key(k) && !locked.contains(k))
                .collect();
            let mut tries = meet_check(c, plan, fitting, ck, &vars, &mut failing)?;
            if failing[ck] {
                let released = release_defaults(c, plan, fitting, ck)?;
                if !released.is_empty() {
                    vars.extend(released);
                    tries += meet_check(c, plan, fitting, ck, &vars, &mut failing)?;
                }
            }
            if failing[ck] {
                let check = &t.checks[ck];
                // The first values tried, on a row they break.
                for &k in &vars {
                    plan.vals[k] = Val::Gen {
                        fams: fitting[&k].clone(),
                        chosen: 0,
                    };
                }
                let example = breaking_row(c, plan, ck)?
                    .map(|row| format!("; e.g. {row}"))
                    .unwrap_or_default();
                return Ok(unseeded(
                    t,
                    Some(&check.name),
                    format!(
                        "CHECK {} ({}): no combination of generated values satisfies it ({tries} candidates tried){example}",
                        check.name, check.expr
                    ),
                ));
            }
            locked.extend(vars);
        }
    }
    Ok(Ok(()))
}

/// Values of `vars` that meet CHECK `ck`: the server judges the
/// combinations in a few queries; where it cannot (a candidate the
/// expression cannot take), they are walked one by one. `failing` is
/// updated; returns how many candidates were tried.
fn meet_check(
    c: &mut impl GenericClient,
    plan: &mut Plan,
    fitting: &BTreeMap<usize, Vec<Family>>,
    ck: usize,
    vars: &[usize],
    failing: &mut Vec<bool>,
) -> Result<u64, postgres::Error> {
    Ok(match search_check(c, plan, fitting, ck, vars, failing)? {
        Searched::Found => {
            *failing = failing_checks(c, plan)?;
            0
        }
        Searched::NotFound { tries } => tries,
        Searched::Unjudged => walk_combinations(c, plan, fitting, ck, vars, failing)?,
    })
}

/// The columns CHECK `ck` names that were left to a default (not an
/// identity, a sequence or a generated column) become values rollsafe
/// computes: the default first, then the families of the type that fit
/// it (NULL last where it may be). Returns them.
fn release_defaults(
    c: &mut impl GenericClient,
    plan: &mut Plan,
    fitting: &mut BTreeMap<usize, Vec<Family>>,
    ck: usize,
) -> Result<Vec<usize>, postgres::Error> {
    let t = plan.table;
    let mut released = Vec::new();
    for &n in &t.checks[ck].cols {
        let Some(k) = t.column(n) else { continue };
        let col = &t.columns[k];
        let Val::Omitted { probe: default } = &plan.vals[k] else {
            continue;
        };
        if col.generated || col.identity || col.default_is_unique() || fitting.contains_key(&k) {
            continue;
        }
        let mut lits = Literals::default();
        for check in t.checks.iter().filter(|ck| ck.cols.contains(&n)) {
            lits.scan(&check.expr);
        }
        let mut fams = vec![fam(default.clone())];
        fams.extend(families(
            &col.ty,
            col.value_typmod(),
            &col.name,
            &lits,
            plan.offset + plan.rows,
        ));
        if !col.not_null() {
            fams.push(fam("NULL"));
        }
        let mut fits = Vec::new();
        for f in fams {
            if fits_column(c, plan, k, &f)?.is_ok() {
                fits.push(f);
            }
        }
        if fits.is_empty() {
            continue;
        }
        plan.vals[k] = Val::Gen {
            fams: fits.clone(),
            chosen: 0,
        };
        fitting.insert(k, fits);
        released.push(k);
    }
    Ok(released)
}

/// The combinations of `vars`' fitting families one by one, first
/// choices first, until CHECK `ck` holds and no CHECK that held breaks
/// (`failing` then updated); how many were tried.
fn walk_combinations(
    c: &mut impl GenericClient,
    plan: &mut Plan,
    fitting: &BTreeMap<usize, Vec<Family>>,
    ck: usize,
    vars: &[usize],
    failing: &mut Vec<bool>,
) -> Result<u64, postgres::Error> {
    let sizes: Vec<usize> = vars.iter().map(|k| fitting[k].len()).collect();
    let mut tries = 0;
    for combo in combinations(&sizes).take(MAX_COMBINATIONS) {
        tries += 1;
        for (v, &k) in vars.iter().enumerate() {
            plan.vals[k] = Val::Gen {
                fams: fitting[&k].clone(),
                chosen: combo[v],
            };
        }
        let now = failing_checks(c, plan)?;
        let regress = (0..now.len()).any(|j| now[j] && !failing[j]);
        if !now[ck] && !regress {
            *failing = now;
            break;
        }
    }
    Ok(tries)
}

/// Whether family `f` gives column `k` values of its type (domain CHECKs,
/// lengths, ranges, NOT NULL) over the sample; the error says why not.
#[allow(clippy::type_complexity)]
pub(super) fn fits_column(
    c: &mut impl GenericClient,
    plan: &Plan,
    k: usize,
    f: &Family,
) -> Result<Result<(), (Option<String>, String)>, postgres::Error> {
    let col = &plan.table.columns[k];
    let raw = at(&f.sql, &plan.index());
    let value = format!("({raw})::{}", col.sql_type);
    // Measured before the cast: a cast to `varchar(n)` cuts a longer
    // value silently (and two values cut alike break a UNIQUE key).
    let too_long = col.max_len().map_or("false".to_string(), |n| {
        format!("length(({raw})::text) > {n}")
    });
    let null = if col.not_null() && f.sql != "NULL" {
        "v IS NULL"
    } else {
        "false"
    };
    // `count(v)` makes the server compute v: an output nothing reads is
    // never evaluated, and its cast would never be tried.
    let sql = format!(
        "SELECT count(*) FILTER (WHERE too_long OR {null}), count(v) FROM (SELECT {value} AS v, {too_long} AS too_long FROM {}) x",
        plan.sample()
    );
    match probe(c, &sql)? {
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

/// The values of CHECK `ck`'s columns on a sampled row that breaks it
/// (`age = 7, status = NULL`), for the message that says why a table is
/// left empty; None when the probe cannot tell.
fn breaking_row(
    c: &mut impl GenericClient,
    plan: &Plan,
    ck: usize,
) -> Result<Option<String>, postgres::Error> {
    let t = plan.table;
    let check = &t.checks[ck];
    let shown: Vec<String> = check
        .cols
        .iter()
        .filter_map(|&n| t.column(n))
        .map(|k| {
            let name = crate::pg::quote_ident(&t.columns[k].name);
            format!(
                "{} || ' = ' || coalesce(quote_literal({name}), 'NULL')",
                crate::pg::quote_literal(&t.columns[k].name)
            )
        })
        .collect();
    if shown.is_empty() {
        return Ok(None);
    }
    let sql = format!(
        "SELECT concat_ws(', ', {}) FROM ({}) t WHERE ({}) IS FALSE LIMIT 1",
        shown.join(", "),
        plan.select(&plan.sample(), true),
        check.expr
    );
    Ok(match probe_opt(c, &sql)? {
        Ok(row) => row.map(|r| r.get(0)),
        Err(_) => None,
    })
}

/// Which of the table's CHECKs some sampled row violates (all of them,
/// when the probe itself fails: a value the expression cannot take).
pub(super) fn failing_checks(
    c: &mut impl GenericClient,
    plan: &Plan,
) -> Result<Vec<bool>, postgres::Error> {
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
    match probe(c, &sql)? {
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

/// Step 5 of [`seed_table`]: a UNIQUE key whose carrier ended up with a
/// list taken in turn (`unit IN ('lux', 'percent', …)` on the key
/// `(station_id, unit)`) walks the combinations of the list and the
/// key's referenced rows: row g takes value `g % k` and parent row
/// `(g - 1) / k`. The table then gets at most as many rows as there are
/// combinations; the note says so.
pub(super) fn walk_lists(plan: &mut Plan, carriers: &BTreeSet<usize>) -> Option<String> {
    let t = plan.table;
    let mut note = None;
    for &k in carriers {
        let Val::Gen { fams, chosen } = &plan.vals[k] else {
            continue;
        };
        let (false, Some(cycle)) = (fams[*chosen].injective, fams[*chosen].cycle) else {
            continue;
        };
        let joins: BTreeSet<usize> = t
            .uniques
            .iter()
            .filter(|key| key.iter().any(|&n| t.column(n) == Some(k)))
            .flat_map(|key| key.iter().filter_map(|&n| t.column(n)))
            .filter_map(|c| match plan.vals[c] {
                Val::Fk { fk, .. } => Some(fk),
                _ => None,
            })
            .collect();
        let mut combinations = cycle;
        let walked = !joins.is_empty();
        for j in joins {
            if plan.joins[j].divisor.is_none() {
                plan.joins[j].divisor = Some(combinations);
                combinations = combinations.saturating_mul(plan.joins[j].choices());
            }
        }
        if combinations < plan.rows {
            let col = &t.columns[k];
            note = Some(if walked {
                format!(
                    "{combinations} of the {} rows asked: every combination of the {cycle} values column {} holds and the rows its UNIQUE key references",
                    plan.rows, col.name
                )
            } else {
                format!(
                    "{combinations} of the {} rows asked: column {} ({}) holds {cycle} distinct value{} and carries a UNIQUE key",
                    plan.rows, col.name, col.sql_type, if cycle == 1 { "" } else { "s" }
                )
            });
            plan.rows = combinations;
        }
    }
    note
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

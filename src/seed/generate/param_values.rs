//! Values for one column outside a bulk INSERT: a captured write's
//! parameter (`-- param:`, [`crate::capture::params`]). The same families
//! as a seeded row's ([`super::families`]), tried on the server against
//! the column's type, length, domain and the CHECKs that name only it,
//! so a captured statement never carries a value the generator would not
//! make.
//!
//! A column of a one-column UNIQUE key gets a value no row holds yet: the
//! family's values at a window of indexes past the table's rows, the
//! first one absent from it (the tests' own value first, when no row
//! holds it). A column of a one-column foreign key names a row that
//! exists.

use postgres::Client;

use super::catalogue::{read_tables, Table, TypeCache};
use super::families::{families, Literals};
use super::family::{at, Family};
use super::probe::probe;
use crate::pg::{quote_ident, quote_literal};

/// Marks a `-- param:` expression whose value rollsafe made (not one the
/// tests bound): a block comment after it, so the expression still
/// evaluates.
pub const MADE: &str = "/* rollsafe: ";

/// Candidate indexes a UNIQUE column's value is looked for in, per
/// parameter: the first that no row holds is taken.
const WINDOW: u64 = 64;
/// Row indexes a family is tried on: small ones, and large ones (the
/// widest values: digits, a pattern's later positions).
const TRIED: &str = "ARRAY[1, 2, 3, 7, 10, 99, 1000, 123456, 99999999, 999999999]::bigint[]";

/// What the schema holds: the generator's tables, read once.
pub struct Columns {
    tables: Vec<Table>,
}

/// A parameter's value: SQL, and why rollsafe made it (None: the tests'
/// own value, kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamValue {
    pub sql: String,
    pub made: Option<String>,
}

impl ParamValue {
    /// The `-- param:` expression: after a value rollsafe made, [`MADE`]
    /// and the reason.
    pub fn render(&self) -> String {
        match &self.made {
            Some(why) => format!("{} {MADE}{} */", self.sql, why.replace("*/", "* /")),
            None => self.sql.clone(),
        }
    }
}

impl Columns {
    pub fn read(c: &mut Client) -> Result<Columns, postgres::Error> {
        let mut types = TypeCache::default();
        Ok(Columns {
            tables: read_tables(c, &mut types)?,
        })
    }

    /// The value of parameter `n` that writes `column` of `table` (as the
    /// statement names it), `tests` the value the tests bound (None: NULL
    /// or not kept). None: no such column, or no family holds.
    pub fn value(
        &self,
        c: &mut Client,
        table: &str,
        column: &str,
        tests: Option<&str>,
        n: usize,
    ) -> Result<Option<ParamValue>, postgres::Error> {
        let oid: Option<u32> = c
            .query_one("SELECT to_regclass($1)::oid", &[&table])
            .map(|r| r.get(0))
            .unwrap_or(None);
        let Some(t) = oid.and_then(|o| self.tables.iter().find(|t| t.oid == o)) else {
            return Ok(None);
        };
        let Some(k) = t.columns.iter().position(|col| col.name == column) else {
            return Ok(None);
        };
        let num = t.columns[k].num;
        if let Some(fk) = t.fks.iter().find(|f| f.cols == [num]) {
            if let Some(p) = self.tables.iter().find(|p| p.oid == fk.ref_table) {
                if let Some(rk) = fk.ref_cols.first().and_then(|&rn| p.column(rn)) {
                    let rc = quote_ident(&p.columns[rk].name);
                    return Ok(Some(ParamValue {
                        sql: format!("(SELECT {rc} FROM {} ORDER BY {rc} LIMIT 1)", p.qualified),
                        made: Some(format!("a row of {} (foreign key {})", p.name, fk.name)),
                    }));
                }
            }
        }
        let unique = t.uniques.iter().find(|key| key.as_slice() == [num]);
        let tests = tests.map(|v| format!("{}::{}", quote_literal(v), t.columns[k].sql_type));
        if unique.is_none() {
            if let Some(v) = tests {
                return Ok(Some(ParamValue { sql: v, made: None }));
            }
        }
        let Some(f) = fitting_family(c, t, k, unique.is_some())? else {
            return Ok(tests.map(|v| ParamValue { sql: v, made: None }));
        };
        let col = &t.columns[k];
        let ty = &col.sql_type;
        if unique.is_none() {
            return Ok(Some(ParamValue {
                sql: format!("({})::{ty}", at(&f.sql, &n.to_string())),
                made: Some(format!(
                    "the tests bound no value rollsafe keeps; a value of column {}",
                    col.name
                )),
            }));
        }
        // A UNIQUE key: the first of a window of the family's values past
        // the table's rows that no row holds.
        let q = &t.qualified;
        let name = quote_ident(&col.name);
        let base = format!("(SELECT count(*) FROM {q}) + {}", WINDOW * (n as u64 - 1));
        let fresh = format!(
            "(SELECT v FROM (SELECT ({})::{ty} AS v, w FROM generate_series(1, {WINDOW}) AS w) c WHERE NOT EXISTS (SELECT 1 FROM {q} r WHERE r.{name} = c.v) ORDER BY w LIMIT 1)",
            at(&f.sql, &format!("{base} + w"))
        );
        let sql = match &tests {
            Some(v) => format!(
                "coalesce((SELECT {v} WHERE NOT EXISTS (SELECT 1 FROM {q} r WHERE r.{name} = {v})), {fresh})"
            ),
            None => fresh,
        };
        let why = match &tests {
            Some(_) => format!(
                "the tests' value unless a row holds it, else one no row holds (UNIQUE column {})",
                col.name
            ),
            None => format!("one no row holds (UNIQUE column {})", col.name),
        };
        Ok(Some(ParamValue {
            sql,
            made: Some(why),
        }))
    }
}

/// The first family of column `k` (distinct values first, for a UNIQUE
/// one) whose values the server accepts on every tried index: they cast
/// to the type (its domain's CHECKs), fit its length and hold every CHECK
/// that names only this column.
fn fitting_family(
    c: &mut Client,
    t: &Table,
    k: usize,
    distinct: bool,
) -> Result<Option<Family>, postgres::Error> {
    let col = &t.columns[k];
    let own: Vec<&str> = t
        .checks
        .iter()
        .filter(|ck| ck.cols == [col.num])
        .map(|ck| ck.expr.as_str())
        .collect();
    let mut lits = Literals::default();
    for ck in t.checks.iter().filter(|ck| ck.cols.contains(&col.num)) {
        lits.scan(&ck.expr);
    }
    let mut fams = families(&col.ty, col.value_typmod(), &col.name, &lits, 1_000_000_000);
    if distinct {
        // Distinct values first, then lists (the window may find one).
        fams.sort_by_key(|f| (!f.injective, f.cycle.is_none()));
    }
    let name = quote_ident(&col.name);
    let holds = if own.is_empty() {
        "true".to_string()
    } else {
        own.iter()
            .map(|e| format!("({e}) IS NOT FALSE"))
            .collect::<Vec<_>>()
            .join(" AND ")
    };
    for f in fams {
        let raw = at(&f.sql, "s.g");
        let too_long = col.max_len().map_or("false".to_string(), |n| {
            format!("length(({raw})::text) > {n}")
        });
        let sql = format!(
            "SELECT count(*) FILTER (WHERE too_long OR {name} IS NULL OR NOT ({holds})), count({name})
               FROM (SELECT ({raw})::{ty} AS {name}, {too_long} AS too_long FROM unnest({TRIED}) AS s(g)) x",
            ty = col.sql_type
        );
        if let Ok(row) = probe(c, &sql)? {
            if row.get::<_, i64>(0) == 0 {
                return Ok(Some(f));
            }
        }
    }
    Ok(None)
}

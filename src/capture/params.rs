//! Values for a captured write that hold in any database at its schema,
//! written as `-- param: $N = <SQL>` lines, so that replaying the write
//! in a rehearsal fails only when a migration makes it fail.
//!
//! The tests bound values that held in *their* database: a foreign key
//! to the cook they had just created, a code their UNIQUE key had not
//! seen. A rehearsal's database holds other rows. Every value rollsafe
//! puts in their place comes from the generator's families
//! ([`crate::seed::generate::Columns`]: one source of values for seeded
//! rows and captured parameters), so it holds what a seeded row holds:
//! the column's type, length, domain and CHECKs. Per parameter of an
//! `INSERT … VALUES` or an `UPDATE` ([`crate::app::bindings::infer_write`]),
//! read against the schema the tests ran on:
//! - a column with a one-column foreign key: a row that exists there
//!   (`(SELECT id FROM cooks ORDER BY id LIMIT 1)`); so is the key an
//!   `UPDATE`'s `WHERE` compares a parameter to (it must find a row);
//! - a column of a one-column UNIQUE key: the tests' value while no row
//!   holds it, else the first value of the generator's family for the
//!   column that no row holds;
//! - any other column: the value the tests bound (their first example
//!   row), which their constraints accepted; where they bound NULL, a
//!   value on more than one line or over 1000 bytes, the generator's.
//!
//! A value rollsafe made is marked at the end of its line (`/* rollsafe:
//! why */`,
//! [`MADE`]): a replayed write that fails only on such values is not the
//! migration's doing ([`made_value_failure`]).

use std::collections::BTreeMap;

use postgres::Client;

use crate::app::bindings;
use crate::app::statements::Statement;
use crate::pg::quote_ident;
pub use crate::seed::generate::MADE;
use crate::seed::generate::{Columns, ParamValue};

/// `-- param:` values for the write `sql`, from the schema `c` is
/// connected to and `example` (the first row of values the tests bound);
/// empty for a statement that is not such a write, or a table the
/// schema does not have.
pub fn write_params(
    c: &mut Client,
    sql: &str,
    example: Option<&Vec<Option<String>>>,
) -> BTreeMap<usize, String> {
    let mut out = BTreeMap::new();
    let Some(shape) = bindings::infer_write(sql) else {
        return out;
    };
    let table: String = shape
        .table
        .split('.')
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(".");
    let Ok(columns) = Columns::read(c) else {
        return out;
    };
    for (n, column) in &shape.keys {
        let name = quote_ident(column);
        let key = ParamValue {
            sql: format!("(SELECT {name} FROM {table} ORDER BY {name} LIMIT 1)"),
            made: Some(format!("a row of {} the UPDATE finds", shape.table)),
        };
        out.insert(*n, key.render());
    }
    for (n, column) in &shape.written {
        // A value on more than one line cannot be a `-- param:` line; a
        // long one (a document, a blob) is left to the generator.
        let tests = example
            .and_then(|e| e.get(n - 1))
            .and_then(Option::as_deref)
            .filter(|v| !v.contains(['\n', '\r']) && v.len() <= 1000);
        if let Ok(Some(value)) = columns.value(c, &table, column, tests, *n) {
            out.insert(*n, value.render());
        }
    }
    out
}

/// The parameters of `statement` whose `-- param:` value rollsafe made,
/// with why.
pub fn made_params(statement: &Statement) -> BTreeMap<usize, String> {
    crate::app::replay::declared_params(statement.meta_values("param"))
        .into_iter()
        .filter_map(|(n, expr)| {
            let (_, why) = expr.rsplit_once(MADE)?;
            Some((n, why.trim_end().strip_suffix("*/")?.trim().to_string()))
        })
        .collect()
}

/// A replayed write that failed on a constraint only values rollsafe made
/// are in: the parameter, its column and the constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadeValueFailure {
    pub param: usize,
    pub column: String,
    pub constraint: String,
}

impl std::fmt::Display for MadeValueFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "${} (rollsafe's value for column {}) does not hold {}: a value rollsafe made, not the app's nor the migration's",
            self.param, self.column, self.constraint
        )
    }
}

/// Whether a replayed write `statement` that failed with `message` (the
/// server's, as [`crate::app::replay::Outcome::failure`] keeps it) failed
/// on a constraint whose columns the statement fills only with values
/// rollsafe made (`-- param:` lines marked [`MADE`]): then the failure is
/// rollsafe's, not the migration's, and the statement is skipped, naming
/// the value and the constraint. `c` is connected to the database it
/// failed on. None when any column of the constraint takes a value the
/// tests bound, a literal of the statement or a default (what a
/// migration may have changed), or the message names no constraint of
/// the written table (nor a column of its NOT NULL).
pub fn made_value_failure(
    c: &mut Client,
    statement: &Statement,
    message: &str,
) -> Option<MadeValueFailure> {
    let shape = bindings::infer_write(&statement.sql)?;
    let made = made_params(statement);
    if made.is_empty() {
        return None;
    }
    let constraint = quoted_after(message, "constraint \"");
    let columns: Vec<String> = match (&constraint, quoted_after(message, "column \"")) {
        (Some(name), _) => constraint_columns(c, &shape.table, name)?,
        (None, Some(column)) => vec![column],
        _ => return None,
    };
    let mut blamed = None;
    for column in &columns {
        let writers: Vec<usize> = shape
            .written
            .iter()
            .filter(|(_, col)| *col == column)
            .map(|(n, _)| *n)
            .collect();
        if writers.is_empty() || writers.iter().any(|n| !made.contains_key(n)) {
            return None;
        }
        blamed.get_or_insert((writers[0], column.clone()));
    }
    let (param, column) = blamed?;
    Some(MadeValueFailure {
        param,
        constraint: constraint.unwrap_or_else(|| format!("NOT NULL of {column}")),
        column,
    })
}

/// The statement `failed` names with its rollsafe-made parameter given a
/// new value by the generator (the column's family, ignoring the value
/// that failed: one no row holds for a UNIQUE column), to measure it again
/// with a value that holds; None when the generator has none.
pub fn with_a_value_that_holds(
    c: &mut Client,
    statement: &Statement,
    failed: &MadeValueFailure,
) -> Option<Statement> {
    let shape = bindings::infer_write(&statement.sql)?;
    let table: String = shape
        .table
        .split('.')
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(".");
    let columns = Columns::read(c).ok()?;
    let value = columns
        .value(c, &table, &failed.column, None, failed.param)
        .ok()??;
    let mut again = statement.clone();
    let prefix = format!("${} ", failed.param);
    let line = format!("${} = {}", failed.param, value.render());
    match again.meta.iter_mut().find(|(k, v)| {
        k == "param" && (v.starts_with(&prefix) || v.starts_with(&format!("${}=", failed.param)))
    }) {
        Some((_, v)) => *v = line,
        None => again.meta.push(("param".into(), line)),
    }
    Some(again)
}

/// The double-quoted name that follows `lead` in a server message.
fn quoted_after(message: &str, lead: &str) -> Option<String> {
    let rest = &message[message.find(lead)? + lead.len()..];
    Some(rest[..rest.find('"')?].to_string())
}

/// The columns of constraint (or unique index) `name` on `table` (as the
/// statement names it), from the catalogue; None when none is found.
fn constraint_columns(c: &mut Client, table: &str, name: &str) -> Option<Vec<String>> {
    let rel: String = table
        .split('.')
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(".");
    let rows = c
        .query(
            "SELECT a.attname::text FROM pg_attribute a
              WHERE a.attrelid = to_regclass($1) AND a.attnum = ANY (
                    coalesce((SELECT k.conkey FROM pg_constraint k
                               WHERE k.conrelid = to_regclass($1) AND k.conname = $2),
                             (SELECT i.indkey::int2[] FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
                               WHERE i.indrelid = to_regclass($1) AND x.relname = $2)))
              ORDER BY a.attnum",
            &[&rel, &name],
        )
        .ok()?;
    let columns: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    (!columns.is_empty()).then_some(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_values_are_told_from_the_tests_own() {
        let st = Statement {
            name: "insert_bookings".into(),
            meta: vec![
                (
                    "param".into(),
                    "$1 = (SELECT 'x') /* rollsafe: one no row holds (UNIQUE column code) */"
                        .into(),
                ),
                ("param".into(), "$2 = 'Ines'::text".into()),
            ],
            sql: "INSERT INTO bookings (code, passenger) VALUES ($1, $2)".into(),
        };
        let made = made_params(&st);
        assert_eq!(made.len(), 1);
        assert_eq!(made[&1], "one no row holds (UNIQUE column code)");
        assert_eq!(
            quoted_after(
                "new row for relation \"bookings\" violates check constraint \"bookings_code_check\"",
                "constraint \""
            )
            .as_deref(),
            Some("bookings_code_check")
        );
    }
}

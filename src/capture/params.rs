//! Values for a captured write that hold in any database at its schema,
//! written as `-- param: $N = <SQL>` lines, so that replaying the write
//! in a rehearsal fails only when a migration makes it fail.
//!
//! The tests bound values that held in *their* database: a foreign key
//! to the cook they had just created, an e-mail their CHECK accepts. A
//! rehearsal's database holds other rows, and a value generated from
//! the type alone satisfies neither. So, per parameter of an `INSERT …
//! VALUES` or an `UPDATE` ([`crate::app::bindings::infer_write`]), read
//! against the schema the tests ran on:
//! - a column with a one-column foreign key: a row that exists there
//!   (`(SELECT id FROM cooks ORDER BY id LIMIT 1)`); so is the key an
//!   `UPDATE`'s `WHERE` compares a parameter to (it must find a row);
//! - any other column: the value the tests bound (their first example
//!   row), which their constraints accepted; in a column with a unique
//!   index and a CHECK, a text value gets a random hex prefix so that
//!   two replays do not collide (`3fa2c1ada@example.org`: a prefix keeps
//!   what such CHECKs usually test, the shape of the end of the value);
//!   a unique integer column (a key the app chooses) gets one no row
//!   has (`max + N`, distinct per parameter); any other unique column
//!   without a CHECK is left to the generator's random value;
//! - NULL examples, values on more than one line and values over 1000
//!   bytes are left out (the generator's value stands).

use std::collections::{BTreeMap, BTreeSet};

use postgres::Client;

use crate::app::bindings;
use crate::pg::quote_ident;

/// What the schema says about a table's columns.
#[derive(Debug, Default)]
struct Columns {
    /// column → (referenced table, referenced column), quoted.
    references: BTreeMap<String, (String, String)>,
    unique: BTreeSet<String>,
    checked: BTreeSet<String>,
    /// column → its type, as `format_type` writes it.
    types: BTreeMap<String, String>,
}

fn columns_of(c: &mut Client, table: &str) -> Result<Columns, postgres::Error> {
    let mut out = Columns::default();
    let rel = "to_regclass($1)";
    for r in c.query(
        &format!(
            "SELECT a.attname::text, format('%I.%I', n.nspname, t.relname), fa.attname::text
               FROM pg_constraint k
               JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
               JOIN pg_class t ON t.oid = k.confrelid
               JOIN pg_namespace n ON n.oid = t.relnamespace
               JOIN pg_attribute fa ON fa.attrelid = k.confrelid AND fa.attnum = k.confkey[1]
              WHERE k.conrelid = {rel} AND k.contype = 'f' AND cardinality(k.conkey) = 1"
        ),
        &[&table],
    )? {
        let column: String = r.get(0);
        out.references
            .insert(column, (r.get(1), quote_ident(&r.get::<_, String>(2))));
    }
    for r in c.query(
        &format!(
            "SELECT a.attname::text FROM pg_index i
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
              WHERE i.indrelid = {rel} AND i.indisunique AND i.indnkeyatts = 1"
        ),
        &[&table],
    )? {
        out.unique.insert(r.get(0));
    }
    for r in c.query(
        &format!(
            "SELECT a.attname::text FROM pg_constraint k
               JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey)
              WHERE k.conrelid = {rel} AND k.contype = 'c'"
        ),
        &[&table],
    )? {
        out.checked.insert(r.get(0));
    }
    for r in c.query(
        &format!(
            "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
              WHERE attrelid = {rel} AND attnum > 0 AND NOT attisdropped"
        ),
        &[&table],
    )? {
        out.types.insert(r.get(0), r.get(1));
    }
    Ok(out)
}

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
    let Ok(columns) = columns_of(c, &table) else {
        return out;
    };
    let existing = |table: &str, column: &str| {
        format!("(SELECT {column} FROM {table} ORDER BY {column} LIMIT 1)")
    };
    for (n, column) in &shape.keys {
        out.insert(*n, existing(&table, &quote_ident(column)));
    }
    for (n, column) in &shape.written {
        if let Some((to_table, to_column)) = columns.references.get(column) {
            out.insert(*n, existing(to_table, to_column));
            continue;
        }
        let type_name = columns.types.get(column).map_or("", String::as_str);
        let integer = matches!(type_name, "smallint" | "integer" | "bigint")
            || type_name.starts_with("numeric");
        if columns.unique.contains(column) && integer {
            // A key the statement writes itself: one no row has yet, and
            // another for each parameter (a multi-row insert's keys).
            out.insert(
                *n,
                format!(
                    "(SELECT coalesce(max({c}), 0) + {n} FROM {table})",
                    c = quote_ident(column)
                ),
            );
            continue;
        }
        let Some(Some(value)) = example.and_then(|e| e.get(n - 1)) else {
            continue;
        };
        // A value on more than one line cannot be a `-- param:` line; a
        // long one (a document, a blob) is left to the generator.
        if value.contains(['\n', '\r']) || value.len() > 1000 {
            continue;
        }
        let literal = format!("'{}'", value.replace('\'', "''"));
        let unique = columns.unique.contains(column);
        let texty = columns
            .types
            .get(column)
            .is_some_and(|t| t == "text" || t.starts_with("character varying"));
        match (unique, columns.checked.contains(column)) {
            (false, _) => {
                out.insert(*n, literal);
            }
            (true, true) if texty => {
                out.insert(
                    *n,
                    format!("(substr(md5(random()::text), 1, 6) || {literal})"),
                );
            }
            (true, _) => {}
        }
    }
    out
}

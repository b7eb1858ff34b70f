//! Schema snapshots: what a database's tables look like, as data that can be
//! compared, stored (JSON) and shown as differences.
//!
//! A snapshot covers the tables a rehearsal measures ([`crate::tables`]:
//! every non-system schema, partitioned tables and their partitions,
//! materialized views), by name (`orders`, `sales.orders`): columns (type
//! with its modifiers, `character varying(20)`; default; nullability),
//! constraints (definition, validated) and indexes (definition, valid), as
//! the catalogue reader ([`crate::pg::catalogue`]) reads them.
//! Names of databases and OIDs are left out, so two databases built from
//! the same migrations have equal snapshots. rollsafe's and refinery's
//! bookkeeping tables are not part of the schema the migrations define and
//! are skipped.
//!
//! Used by `verify` (the final schema against the expected one, invalid
//! indexes, NOT VALID constraints) and by `check` (a real database against
//! the expected one). The expected snapshot of the shipped migrations is
//! `migrations/schema.json` ([`expected_embedded`]); regenerate it with
//! `ROLLSAFE_BLESS=1 cargo test --test suite -- verify::shipped_schema_snapshot_is_current`.

use std::collections::BTreeMap;

use postgres::GenericClient;
use serde::{Deserialize, Serialize};

use crate::pg::catalogue::{self, ConstraintKind};

/// The checked-in snapshot of the embedded migrations' final schema.
const EMBEDDED_EXPECTED: &str = include_str!("../migrations/schema.json");

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    /// `format_type` spelling, e.g. `timestamp with time zone`.
    #[serde(rename = "type")]
    pub data_type: String,
    pub not_null: bool,
    pub default: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraint {
    pub name: String,
    /// `pg_get_constraintdef`, e.g. `UNIQUE (input_collection_id, name)`.
    pub definition: String,
    pub validated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    pub name: String,
    /// `pg_get_indexdef`.
    pub definition: String,
    pub valid: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    pub columns: Vec<Column>,
    pub constraints: Vec<Constraint>,
    pub indexes: Vec<Index>,
}

/// The tables of a database, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub tables: BTreeMap<String, Table>,
}

impl Snapshot {
    /// Reads the snapshot of the database `client` is connected to: the
    /// tables a rehearsal measures ([`crate::tables`]), by name.
    pub fn read(client: &mut impl GenericClient) -> Result<Snapshot, postgres::Error> {
        let relations = crate::tables::relations(client)?;
        let mut tables: BTreeMap<String, Table> = relations
            .iter()
            .map(|r| {
                let empty = Table {
                    columns: vec![],
                    constraints: vec![],
                    indexes: vec![],
                };
                (r.name.clone(), empty)
            })
            .collect();
        for col in catalogue::columns(client, &relations)? {
            if let Some(t) = tables.get_mut(&col.table) {
                t.columns.push(Column {
                    name: col.name,
                    data_type: col.sql_type,
                    not_null: col.not_null,
                    default: col.default,
                });
            }
        }
        // PostgreSQL 18 also stores NOT NULL as constraints; nullability
        // is recorded per column, on every major.
        let constraints = catalogue::constraints(client, &relations)?;
        for k in constraints
            .into_iter()
            .filter(|k| k.kind != ConstraintKind::NotNull)
        {
            if let Some(t) = tables.get_mut(&k.table) {
                t.constraints.push(Constraint {
                    name: k.name,
                    definition: k.definition,
                    validated: k.validated,
                });
            }
        }
        for i in catalogue::indexes(client, &relations)? {
            if let Some(t) = tables.get_mut(&i.table) {
                t.indexes.push(Index {
                    name: i.name,
                    definition: i.definition,
                    valid: i.valid,
                });
            }
        }
        Ok(Snapshot { tables })
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("snapshot serialises");
        s.push('\n');
        s
    }

    pub fn from_json(text: &str) -> Result<Snapshot, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Indexes that are not valid (a failed `CREATE INDEX CONCURRENTLY`
    /// leaves one behind): `table.index`.
    pub fn invalid_indexes(&self) -> Vec<String> {
        self.tables
            .iter()
            .flat_map(|(t, table)| {
                table
                    .indexes
                    .iter()
                    .filter(|i| !i.valid)
                    .map(move |i| format!("{t}.{}", i.name))
            })
            .collect()
    }

    /// Constraints added `NOT VALID` and never validated: `table.constraint`.
    pub fn unvalidated_constraints(&self) -> Vec<String> {
        self.tables
            .iter()
            .flat_map(|(t, table)| {
                table
                    .constraints
                    .iter()
                    .filter(|c| !c.validated)
                    .map(move |c| format!("{t}.{}", c.name))
            })
            .collect()
    }

    /// Human-readable differences from `expected` to `self`; empty when
    /// equal.
    pub fn diff(&self, expected: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        for name in expected.tables.keys() {
            if !self.tables.contains_key(name) {
                out.push(format!("table {name} is missing"));
            }
        }
        for (name, actual) in &self.tables {
            let Some(want) = expected.tables.get(name) else {
                out.push(format!("table {name} is not expected"));
                continue;
            };
            diff_items(
                &mut out,
                name,
                "column",
                &want.columns,
                &actual.columns,
                |c| &c.name,
                |c| {
                    format!(
                        "{} {}{}",
                        c.data_type,
                        if c.not_null { "NOT NULL" } else { "NULL" },
                        c.default
                            .as_ref()
                            .map(|d| format!(" DEFAULT {d}"))
                            .unwrap_or_default()
                    )
                },
            );
            diff_items(
                &mut out,
                name,
                "constraint",
                &want.constraints,
                &actual.constraints,
                |c| &c.name,
                |c| {
                    format!(
                        "{}{}",
                        c.definition,
                        if c.validated { "" } else { " NOT VALID" }
                    )
                },
            );
            diff_items(
                &mut out,
                name,
                "index",
                &want.indexes,
                &actual.indexes,
                |i| &i.name,
                |i| {
                    format!(
                        "{}{}",
                        i.definition,
                        if i.valid { "" } else { " (INVALID)" }
                    )
                },
            );
        }
        out
    }
}

fn diff_items<T>(
    out: &mut Vec<String>,
    table: &str,
    what: &str,
    want: &[T],
    actual: &[T],
    name: impl Fn(&T) -> &String,
    show: impl Fn(&T) -> String,
) {
    for w in want {
        match actual.iter().find(|a| name(a) == name(w)) {
            None => out.push(format!(
                "{table}: {what} {} is missing (expected {})",
                name(w),
                show(w)
            )),
            Some(a) if show(a) != show(w) => out.push(format!(
                "{table}: {what} {} is {} (expected {})",
                name(w),
                show(a),
                show(w)
            )),
            Some(_) => {}
        }
    }
    for a in actual {
        if !want.iter().any(|w| name(w) == name(a)) {
            out.push(format!(
                "{table}: {what} {} ({}) is not expected",
                name(a),
                show(a)
            ));
        }
    }
}

/// The expected final schema of the embedded migrations.
pub fn expected_embedded() -> Snapshot {
    Snapshot::from_json(EMBEDDED_EXPECTED).expect("migrations/schema.json is a valid snapshot")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(cols: &[(&str, &str, bool, Option<&str>)]) -> Table {
        Table {
            columns: cols
                .iter()
                .map(|(n, t, nn, d)| Column {
                    name: n.to_string(),
                    data_type: t.to_string(),
                    not_null: *nn,
                    default: d.map(str::to_string),
                })
                .collect(),
            constraints: vec![],
            indexes: vec![],
        }
    }

    #[test]
    fn diff_names_missing_changed_and_unexpected() {
        let mut want = Snapshot::default();
        want.tables.insert(
            "t".into(),
            table(&[
                ("id", "uuid", true, None),
                ("is_ready", "boolean", true, Some("true")),
            ]),
        );
        let mut actual = Snapshot::default();
        actual.tables.insert(
            "t".into(),
            table(&[
                ("id", "uuid", true, None),
                ("is_ready", "boolean", true, Some("false")),
                ("extra", "text", false, None),
            ]),
        );
        actual.tables.insert("u".into(), table(&[]));
        let d = actual.diff(&want);
        assert_eq!(
            d,
            [
                "t: column is_ready is boolean NOT NULL DEFAULT false (expected boolean NOT NULL DEFAULT true)",
                "t: column extra (text NULL) is not expected",
                "table u is not expected",
            ]
        );
        assert!(want.diff(&want).is_empty());
    }

    #[test]
    fn embedded_expected_snapshot_has_is_ready_default_true() {
        let s = expected_embedded();
        let af = &s.tables["attached_functions"];
        let col = af.columns.iter().find(|c| c.name == "is_ready").unwrap();
        assert!(col.not_null);
        assert_eq!(col.default.as_deref(), Some("true"));
        assert!(s.invalid_indexes().is_empty() && s.unvalidated_constraints().is_empty());
    }
}

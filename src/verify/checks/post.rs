//! `post`: the final schema is sound and is the one expected.
//!
//! No invalid index (an error), a warning for each table left UNLOGGED
//! ([`unlogged_table`]) and for each constraint left NOT
//! VALID, to validate in a later migration (the judgement `check` makes on
//! a live database: `crate::validity`), and the
//! final schema equal to the expected snapshot — both the one reached on
//! the seeded path (each migration applied onto the live apps' rows) and the
//! one reached on an empty database.

pub mod unlogged_table;

use std::collections::BTreeSet;

use crate::report::{bounded_list, Finding, Severity};
use crate::schema::Snapshot;
use crate::verify::evidence::{Context, MigrationEvidence};

use super::Check;

pub const CHECK: &str = "post";

/// How many differences a message lists before it counts the rest.
const LISTED: usize = 8;
pub const DESCRIPTION: &str =
    "no invalid indexes, constraints left NOT VALID and tables left UNLOGGED named (warnings), final schema equal to the expected snapshot";

/// Where the expected snapshot came from, for the message.
pub enum Expected<'a> {
    /// A checked-in snapshot (`migrations/schema.json`).
    Snapshot(&'a Snapshot, String),
    /// None checked in: the schema the migrations build on an empty
    /// database is the reference.
    Derived,
}

pub const ENTRY: Check = Check {
    name: CHECK,
    description: DESCRIPTION,
    ran: |e| e.final_schema.is_some(),
    evaluate,
    evaluate_run: None,
};

/// post's judgement of the last migration: its final schemas.
pub fn evaluate(e: &MigrationEvidence, cx: &Context) -> Vec<Finding> {
    let Some(f) = &e.final_schema else {
        return Vec::new();
    };
    let expected = match cx.expected {
        Some((snapshot, name)) => Expected::Snapshot(snapshot, name.to_string()),
        None => Expected::Derived,
    };
    let mut out = final_schema(
        e.version,
        &without(&f.seeded, &f.made_by_rows, &f.empty),
        &f.empty,
        expected,
    );
    out.extend(made_by_rows(e.version, &f.made_by_rows, &f.empty));
    out
}

/// `seeded` without the relations the rows made that the empty path does
/// not have: a table per row a trigger creates is the data's doing, not
/// the migrations', and differs between any two databases.
fn without(seeded: &Snapshot, made_by_rows: &BTreeSet<String>, empty: &Snapshot) -> Snapshot {
    let mut kept = seeded.clone();
    kept.tables
        .retain(|name, _| !made_by_rows.contains(name) || empty.tables.contains_key(name));
    kept
}

/// Says which relations the rows made and were left out of the
/// comparison (none: nothing to say).
fn made_by_rows(v: i32, made: &BTreeSet<String>, empty: &Snapshot) -> Option<Finding> {
    let left_out: Vec<&String> = made
        .iter()
        .filter(|n| !empty.tables.contains_key(*n))
        .collect();
    if left_out.is_empty() {
        return None;
    }
    Some(
        Finding::new(
            CHECK,
            "relations-made-by-rows",
            Severity::Info,
            Some(v),
            format!(
                "{} relation(s) appeared while rows were written (the project's own triggers or functions made them, not a migration) and are left out of the comparison of the seeded and empty paths: {}",
                left_out.len(),
                bounded_list(&left_out, LISTED)
            ),
        )
        .evidence("relations", left_out.len()),
    )
}

/// The final schemas of migration `v`, the last: built on the seeded path
/// and on the empty one, against the expected one.
pub fn final_schema(
    v: i32,
    seeded: &Snapshot,
    empty: &Snapshot,
    expected: Expected<'_>,
) -> Vec<Finding> {
    let mut out = crate::validity::findings(CHECK, seeded, Some(v), &[]);
    let paths = seeded.diff(empty);
    if !paths.is_empty() {
        out.push(
            Finding::new(
                CHECK,
                "paths-differ",
                Severity::Error,
                Some(v),
                format!("the schema built on the live apps' rows differs from the one built on an empty database: {}", bounded_list(&paths, LISTED)),
            )
            .evidence("differences", paths.len())
            .advice("a migration must not depend on the data it meets"),
        );
    }
    match expected {
        Expected::Snapshot(want, source) => {
            let d = seeded.diff(want);
            if d.is_empty() {
                out.push(
                    Finding::new(CHECK, "schema-as-expected", Severity::Info, Some(v), format!("final schema equals {source}"))
                        .evidence("tables", want.tables.len()),
                );
            } else {
                out.push(
                    Finding::new(CHECK, "schema-differs", Severity::Error, Some(v), format!("final schema differs from {source}: {}", bounded_list(&d, LISTED)))
                        .evidence("differences", d.len())
                        .advice(format!("if the change is intended, regenerate {source} (see src/schema.rs)")),
                );
            }
        }
        Expected::Derived => out.push(
            Finding::new(
                CHECK,
                "schema-derived",
                Severity::Info,
                Some(v),
                "no schema.json next to the migrations: the schema they build on an empty database is the reference",
            )
            .evidence("tables", empty.tables.len()),
        ),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Constraint, Index, Table};

    #[test]
    fn invalid_index_and_difference_are_errors() {
        let mut s = Snapshot::default();
        s.tables.insert(
            "t".into(),
            Table {
                columns: vec![],
                constraints: vec![],
                indexes: vec![Index {
                    name: "ix".into(),
                    definition: "CREATE INDEX ix ON t".into(),
                    valid: false,
                }],
            },
        );
        let empty = Snapshot::default();
        let f = final_schema(
            3,
            &s,
            &empty,
            Expected::Snapshot(&empty, "schema.json".into()),
        );
        let ids: Vec<&str> = f.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "post.invalid-index",
                "post.constraints-validated",
                "post.paths-differ",
                "post.schema-differs"
            ]
        );
    }

    #[test]
    fn a_constraint_left_not_valid_warns_an_invalid_index_fails() {
        let mut s = Snapshot::default();
        s.tables.insert(
            "sales.orders".into(),
            Table {
                columns: vec![],
                constraints: vec![Constraint {
                    name: "total_nonneg".into(),
                    definition: "CHECK (total >= 0)".into(),
                    validated: false,
                }],
                indexes: vec![],
            },
        );
        let f = final_schema(4, &s, &s, Expected::Derived);
        let nv = f
            .iter()
            .find(|f| f.id == "post.not-valid-constraint")
            .unwrap();
        assert_eq!(nv.severity, Severity::Warn);
        assert_eq!(nv.evidence["constraints"][0], "sales.orders.total_nonneg");
        assert!(nv.advice.contains("validate it in a later migration"));
        assert!(f.iter().all(|f| f.severity != Severity::Error), "{f:?}");
    }
}

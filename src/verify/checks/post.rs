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

use crate::report::{Finding, Severity};
use crate::schema::Snapshot;
use crate::verify::evidence::{Context, MigrationEvidence};

use super::Check;

pub const CHECK: &str = "post";
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
    final_schema(e.version, &f.seeded, &f.empty, expected)
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
                format!("the schema built on the live apps' rows differs from the one built on an empty database: {}", paths.join("; ")),
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
                    Finding::new(CHECK, "schema-differs", Severity::Error, Some(v), format!("final schema differs from {source}: {}", d.join("; ")))
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

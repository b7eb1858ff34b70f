//! `apply`: the migration applies cleanly on an empty database and on one
//! seeded with the live apps' rows, and a failure leaves no trace.
//!
//! A migration that only works on an empty database (a NOT NULL column
//! without a default, a unique index the data violates) passes every test
//! that builds tables from scratch and fails in production; the seeded run
//! is what catches it. "No trace" is proven by failing the migration on
//! purpose at its very end and comparing the schema with the one before.

use crate::report::{Finding, Severity};
use crate::verify::rehearsal::Applied;

use super::ms;

pub const CHECK: &str = "apply";
pub const DESCRIPTION: &str =
    "applies cleanly on an empty and on a seeded database; a failure leaves no trace";

/// Judges the applies of migration `v`: on an empty database, on a seeded
/// one (None when not reached), and the schema differences a forced failure
/// left behind.
pub fn evaluate(
    v: i32,
    on_empty: &Applied,
    on_seeded: Option<(&Applied, i64)>,
    failure_trace: &[String],
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(e) = &on_empty.error {
        out.push(
            Finding::new(CHECK, "fails-on-empty", Severity::Error, Some(v), format!("fails on an empty database: {e}"))
                .evidence("sqlstate", on_empty.sqlstate.clone().unwrap_or_default())
                .advice("fix the SQL; it must apply on a database at the previous version (each migration runs in one transaction, so CREATE INDEX CONCURRENTLY and other non-transactional statements cannot be used)"),
        );
        return out;
    }
    if let Some((seeded, rows)) = on_seeded {
        if let Some(e) = &seeded.error {
            out.push(
                Finding::new(
                    CHECK,
                    "fails-on-seeded",
                    Severity::Error,
                    Some(v),
                    format!("applies on an empty database but fails on one with {rows} rows written by the live apps: {e}"),
                )
                .evidence("rows", rows)
                .evidence("sqlstate", seeded.sqlstate.clone().unwrap_or_default())
                .advice("a migration meets the data live apps wrote: give a new NOT NULL column a constant default, or add it nullable, backfill in batches, and constrain it in a later migration"),
            );
        } else {
            out.push(
                Finding::new(
                    CHECK,
                    "applies",
                    Severity::Info,
                    Some(v),
                    format!("applies on an empty database and on one with {rows} rows"),
                )
                .evidence("empty_ms", ms(on_empty.duration))
                .evidence("seeded_ms", ms(seeded.duration))
                .evidence("rows", rows),
            );
        }
    }
    if !failure_trace.is_empty() {
        out.push(
            Finding::new(
                CHECK,
                "failure-leaves-trace",
                Severity::Error,
                Some(v),
                format!(
                    "a failure at its end leaves changes behind: {}",
                    failure_trace.join("; ")
                ),
            )
            .evidence("differences", failure_trace.len())
            .advice(
                "keep every statement transactional so a failed migration rolls back completely",
            ),
        );
    }
    // TODO(migrate): "a second run is a no-op" needs the real migrator
    // (rollsafe::migrate, history table); add it when the migrate branch
    // lands on main.
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_failure_is_an_error_that_names_the_rows() {
        let ok = Applied::default();
        let failed = Applied {
            error: Some("column \"x\" of relation \"t\" contains null values".into()),
            sqlstate: Some("23502".into()),
            ..Applied::default()
        };
        let f = evaluate(3, &ok, Some((&failed, 2000)), &[]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].id, "apply.fails-on-seeded");
        assert_eq!(f[0].severity, Severity::Error);
        assert!(f[0].message.contains("2000 rows"));
        let f = evaluate(3, &ok, Some((&ok, 2000)), &[]);
        assert_eq!(f[0].severity, Severity::Info);
    }
}

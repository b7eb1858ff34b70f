//! `rewrite`: does the migration do work that grows with the table while
//! holding a lock that blocks the app?
//!
//! Measured twice, on a database at the previous version with 0 rows and
//! with `--rows N`: per existing table, whether it got a new file
//! (`pg_class.relfilenode`: a rewrite), the rows the migration inserted,
//! updated and scanned (`pg_stat_xact_user_tables`, read inside its
//! transaction), the WAL it wrote and its duration.
//!
//! An `UPDATE` backfill keeps the relfilenode, so rows updated is what
//! catches it; a volatile default (`random()`, `clock_timestamp()`) changes
//! the relfilenode. Both, under ACCESS EXCLUSIVE, stall every query of the
//! app for as long as the table takes (measured at 1M rows: 16.9 s). A
//! constant default is catalog-only (PostgreSQL 11+): no rows touched.
//! Judgement is on behaviour (rows touched, file replaced), not on timing.

use crate::report::{Finding, Severity};
use crate::verify::rehearsal::Applied;

use super::ms;

pub const CHECK: &str = "rewrite";
pub const DESCRIPTION: &str =
    "no table rewrite or row-by-row backfill under a lock that blocks the app (relfilenode, rows touched, WAL, at 0 and N rows)";

pub fn evaluate(v: i32, at_zero: &Applied, at_n: &Applied) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut clean = true;
    for w in at_n
        .tables
        .values()
        .filter(|w| w.rows_before > 0 && !w.dropped)
    {
        let lock = w.strongest_lock().unwrap_or("no lock").to_string();
        let base = |name: &str, sev: Severity, msg: String| {
            Finding::new(CHECK, name, sev, Some(v), msg)
                .evidence("table", w.table.clone())
                .evidence("rows", w.rows_before)
                .evidence("rows_updated", w.rows_updated)
                .evidence("rows_scanned", w.rows_scanned)
                .evidence("relfilenode_changed", w.rewritten)
                .evidence("lock", lock.clone())
                .evidence("wal_bytes_at_0_rows", at_zero.wal_bytes)
                .evidence("wal_bytes_at_n_rows", at_n.wal_bytes)
                .evidence("ms_at_0_rows", ms(at_zero.duration))
                .evidence("ms_at_n_rows", ms(at_n.duration))
        };
        let blocks = w.blocks_writes();
        if w.rewritten && blocks {
            clean = false;
            out.push(
                base(
                    "table-rewritten",
                    Severity::Error,
                    format!(
                        "rewrites {} ({} rows, new relfilenode) while holding {lock}: the app stalls for as long as the table takes",
                        w.table, w.rows_before
                    ),
                )
                .advice("a volatile default (random(), clock_timestamp(), gen_random_uuid()) or a column type change rewrites every row; use a constant default (catalog-only since PostgreSQL 11) and fill real values in batches outside the migration"),
            );
        } else if w.rows_updated * 2 >= w.rows_before {
            clean = false;
            let (sev, name, why) = if blocks {
                (
                    Severity::Error,
                    "rows-updated-under-lock",
                    format!("while holding {lock}: the app stalls for as long as the update takes"),
                )
            } else {
                (
                    Severity::Warn,
                    "rows-updated",
                    "in one transaction: every row stays locked against the app's updates until it commits".to_string(),
                )
            };
            out.push(
                base(
                    name,
                    sev,
                    format!(
                        "updates {} of {} rows of {} {why}",
                        w.rows_updated, w.rows_before, w.table
                    ),
                )
                .advice("make the new column's default the backfilled value (ADD COLUMN ... NOT NULL DEFAULT <constant> touches no row), or backfill in small batches outside the migration"),
            );
        } else if w.rows_scanned >= w.rows_before && w.blocks_reads() && w.new_indexes.is_empty() {
            clean = false;
            out.push(
                base(
                    "full-scan-under-lock",
                    Severity::Warn,
                    format!(
                        "reads all {} rows of {} while holding {lock} (validating a constraint such as SET NOT NULL): the stall grows with the table",
                        w.rows_before, w.table
                    ),
                )
                .advice("declare NOT NULL in the ADD COLUMN together with a constant default (no scan), or add CHECK (col IS NOT NULL) NOT VALID, VALIDATE it in a later migration, then SET NOT NULL"),
            );
        }
    }
    if clean {
        let rows: i64 = at_n.tables.values().map(|w| w.rows_before).sum();
        let updated: i64 = at_n.tables.values().map(|w| w.rows_updated).sum();
        out.push(
            Finding::new(
                CHECK,
                "measured",
                Severity::Info,
                Some(v),
                "no rewrite, no row-by-row work on existing rows",
            )
            .evidence("rows_in_existing_tables", rows)
            .evidence("rows_updated", updated)
            .evidence(
                "tables_rewritten",
                at_n.tables.values().filter(|w| w.rewritten).count(),
            )
            .evidence("wal_bytes_at_0_rows", at_zero.wal_bytes)
            .evidence("wal_bytes_at_n_rows", at_n.wal_bytes)
            .evidence("ms_at_0_rows", ms(at_zero.duration))
            .evidence("ms_at_n_rows", ms(at_n.duration)),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::rehearsal::TableWork;

    fn applied(work: TableWork) -> Applied {
        let mut a = Applied::default();
        a.tables.insert(work.table.clone(), work);
        a
    }

    fn table(rows: i64, locks: &[&str]) -> TableWork {
        TableWork {
            table: "attached_functions".into(),
            rows_before: rows,
            locks: locks.iter().map(|s| s.to_string()).collect(),
            ..TableWork::default()
        }
    }

    #[test]
    fn update_backfill_under_access_exclusive_is_an_error() {
        let mut w = table(2000, &["AccessExclusiveLock"]);
        w.rows_updated = 2000;
        let f = evaluate(3, &Applied::default(), &applied(w));
        assert_eq!(f[0].id, "rewrite.rows-updated-under-lock");
        assert_eq!(f[0].severity, Severity::Error);
        assert_eq!(f[0].evidence["rows_updated"], 2000);
    }

    #[test]
    fn rewrite_scan_and_catalog_only_are_told_apart() {
        let mut w = table(2000, &["AccessExclusiveLock"]);
        w.rewritten = true;
        assert_eq!(
            evaluate(3, &Applied::default(), &applied(w))[0].id,
            "rewrite.table-rewritten"
        );
        let mut w = table(2000, &["AccessExclusiveLock"]);
        w.rows_scanned = 2000;
        let f = evaluate(3, &Applied::default(), &applied(w));
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("rewrite.full-scan-under-lock", Severity::Warn)
        );
        let f = evaluate(
            3,
            &Applied::default(),
            &applied(table(2000, &["AccessExclusiveLock"])),
        );
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("rewrite.measured", Severity::Info)
        );
    }
}

//! Planner statistics after a seeding: `ANALYZE` of the relations whose
//! statistics no longer describe them, instead of the whole database.
//!
//! A seeding carried from the previous migration writes a few new tables
//! into a database of dozens that were analysed when they were seeded:
//! analysing all of them again cost more than the seeding itself (1.4 s
//! for the 39 tables of a former fixture, at every migration of a
//! full rehearsal). What the rehearsal reads from statistics must stay as
//! a whole-database `ANALYZE` would leave it: `relpages` (a scan reading
//! every page of a table is judged against it, so a data fix that grew a
//! table must be seen), `reltuples`, and the columns' statistics the
//! plans use. So a relation is analysed again when any of these holds:
//!
//! - it holds a row this seeding wrote (its own rows, or those a trigger
//!   of a table seeded now wrote into it; a refreshed materialized view);
//! - its `relpages` is not its size, or its `reltuples` not its row count
//!   (the migration before grew, shrank, filled or emptied it);
//! - a column of it has no statistics while it has rows (a column added
//!   since it was analysed);
//! - the server counted writes to it since it was analysed
//!   (`n_mod_since_analyze`: the previous migration's data fix);
//! - rollsafe may not read it (the `ANALYZE` decides, as before).
//!
//! A partition stands for its partitioned table: `ANALYZE` of the root
//! analyses every partition and the statistics over all of them.

use std::collections::HashMap;

use postgres::Client;

use crate::pg::quote_literal;

/// The relations to analyse, as `ANALYZE` names them (schema-qualified
/// roots of partition trees), given the oldest transaction of this
/// seeding (`since`: `pg_current_xact_id()` before its first write).
pub(super) fn stale_relations(c: &mut Client, since: &str) -> Result<Vec<String>, postgres::Error> {
    let relations = c.query(
        "SELECT c.oid, format('%I.%I', n.nspname, c.relname), c.relkind::text,
                format('%I.%I', rn.nspname, r.relname),
                has_table_privilege(c.oid, 'SELECT'),
                c.relkind IN ('r', 'm') AND (
                    c.relpages::int8 <> pg_relation_size(c.oid) / current_setting('block_size')::int8
                    OR coalesce(s.n_mod_since_analyze, 0) > 0),
                c.reltuples::float8,
                EXISTS (SELECT 1 FROM pg_attribute a
                         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                           AND a.attstattarget <> 0
                           AND NOT EXISTS (SELECT 1 FROM pg_stats p
                                            WHERE p.schemaname = n.nspname AND p.tablename = c.relname
                                              AND p.attname = a.attname))
           FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN pg_class r ON r.oid = coalesce(pg_partition_root(c.oid), c.oid)
           JOIN pg_namespace rn ON rn.oid = r.relnamespace
           LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
          WHERE c.relkind IN ('r', 'p', 'm')
            AND n.nspname NOT IN ('pg_catalog', 'information_schema')
            AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'
            AND (c.relkind <> 'm' OR c.relispopulated)
          ORDER BY 1",
        &[],
    )?;
    let mut stale: Vec<String> = Vec::new();
    let mut scans: Vec<String> = Vec::new();
    // Root, reltuples and whether a column has no statistics, by oid.
    let mut scanned: HashMap<u32, (String, f64, bool)> = HashMap::new();
    for r in &relations {
        let (oid, qualified, kind, root): (u32, String, String, String) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        let (readable, resized): (bool, bool) = (r.get(4), r.get(5));
        if !readable || resized {
            stale.push(root);
            continue;
        }
        // A partitioned table's own rows are its partitions', each
        // checked on its own; its statistics over all of them are
        // refreshed with theirs.
        if kind == "p" {
            continue;
        }
        scans.push(format!(
            "SELECT {oid}::oid, count(*), count(*) FILTER (WHERE age(xmin) <= age({}::xid)) FROM {qualified}",
            quote_literal(since)
        ));
        scanned.insert(oid, (root, r.get(6), r.get(7)));
    }
    if !scans.is_empty() {
        // One round trip: a count per relation, and its rows this
        // seeding wrote.
        let counts = c.query(&scans.join(" UNION ALL "), &[])?;
        for row in &counts {
            let Some((root, reltuples, unanalysed_column)) = scanned.remove(&row.get(0)) else {
                continue;
            };
            let (rows, written): (i64, i64) = (row.get(1), row.get(2));
            let moved = reltuples != rows as f64;
            if written > 0 || moved || (rows > 0 && unanalysed_column) {
                stale.push(root);
            }
        }
    }
    stale.sort();
    stale.dedup();
    Ok(stale)
}

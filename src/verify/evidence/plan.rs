//! Query plans on both sides of a migration and the EXPLAIN reader: what
//! the plan stage ([`crate::verify::measure::planning`]) measured (each live app
//! statement's `EXPLAIN (FORMAT JSON)`, the tables, indexes and foreign keys
//! around it) and [`parse`], which reads a plan into per-table access paths.
//! The `plan` check judges them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

/// How statements were planned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// `EXPLAIN (GENERIC_PLAN)`, PostgreSQL 16+.
    Generic,
    /// `PREPARE` + `EXPLAIN EXECUTE` with the statement's parameter values.
    #[default]
    Custom,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Generic => "generic plans (EXPLAIN (GENERIC_PLAN))",
            Mode::Custom => {
                "custom plans of each statement's parameter values (PREPARE + EXPLAIN EXECUTE)"
            }
        })
    }
}

/// One statement's plan on one side.
#[derive(Debug, Clone)]
pub struct StatementPlan {
    pub app: String,
    pub statement: String,
    /// `EXPLAIN (VERBOSE, FORMAT JSON)` output, or why it could not be had.
    pub planned: Result<Value, String>,
    /// After the migration, when the plan reads a table sequentially: the
    /// plan with `enable_seqscan = off` (an index that still matches shows).
    pub forced: Option<Result<Value, String>>,
}

/// A table's size as the planner sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableStats {
    /// As plans name it (unquoted).
    pub schema: String,
    pub relname: String,
    /// As messages name it ([`crate::tables`]).
    pub name: String,
    /// Schema-qualified and quoted, for SQL.
    pub qualified: String,
    /// `reltuples` after the seeded rows' ANALYZE.
    pub rows: f64,
    pub pages: i64,
    /// `reltuples` imported from the target's statistics, when they were.
    pub imported_rows: Option<f64>,
}

/// Indexes and foreign keys of the measured tables, as the one catalogue
/// reader gives them.
pub use crate::pg::catalogue::{ForeignKey, IndexInfo};

/// Everything measured on one side of a migration.
#[derive(Debug, Clone, Default)]
pub struct Side {
    pub mode: Mode,
    pub statements: Vec<StatementPlan>,
    pub tables: Vec<TableStats>,
    pub indexes: Vec<IndexInfo>,
    pub foreign_keys: Vec<ForeignKey>,
    /// Tables whose planner statistics were imported from the target
    /// (empty: the seeded rows' statistics only).
    pub imported: Vec<String>,
    /// The target's statistics as pg_dump wrote them (read once, before
    /// the migration; imported again after it).
    pub dumped_statistics: Option<String>,
    /// Why no statistics were imported where a target was given.
    pub not_imported: Option<String>,
    /// (table, constraint) of each foreign key added by the migration →
    /// the plan of the lookup on its referencing table (after only).
    pub fk_lookups: Vec<((String, String), Result<Value, String>)>,
    /// A full sequential read of each table some statement reads
    /// sequentially after the migration, at the seeded size (after only).
    pub full_reads: BTreeMap<String, Duration>,
    /// How long measuring this side took.
    pub took: Duration,
}

/// How a plan node reads a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Path {
    Seq,
    Index,
    IndexOnly,
    /// A bitmap heap scan over one or more bitmap index scans.
    Bitmap,
    /// Any other scan of a relation (TID, sample, foreign, custom).
    Other(String),
}

impl Path {
    /// Whether the path reads the table through an index.
    pub fn indexed(&self) -> bool {
        matches!(self, Path::Index | Path::IndexOnly | Path::Bitmap)
    }

    pub fn node(&self) -> &str {
        match self {
            Path::Seq => "Seq Scan",
            Path::Index => "Index Scan",
            Path::IndexOnly => "Index Only Scan",
            Path::Bitmap => "Bitmap Heap Scan",
            Path::Other(s) => s,
        }
    }
}

/// One read of one table in a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Access {
    pub schema: String,
    pub relname: String,
    pub path: Path,
    /// The index (for a bitmap scan over several, joined with ` + `).
    pub index: Option<String>,
    /// The index condition as the plan prints it.
    pub cond: Option<String>,
    /// How many of the statement's conditions the index matches (the
    /// conjuncts of its index condition): the prefix it uses.
    pub conds: usize,
    /// The planner's estimate of the rows the node returns.
    pub rows: f64,
    pub cost: f64,
}

impl Access {
    /// "Index Scan using books_email (est. 1 row, cost 8.29)".
    pub fn describe(&self) -> String {
        let using = match &self.index {
            Some(i) => format!(" using {i}"),
            None => String::new(),
        };
        format!(
            "{}{using} (est. {:.0} row{}, cost {:.2})",
            self.path.node(),
            self.rows,
            if self.rows.round() == 1.0 { "" } else { "s" },
            self.cost
        )
    }

    pub fn evidence(&self, table: &str) -> Value {
        json!({
            "table": table,
            "node": self.path.node(),
            "index": self.index,
            "index_cond": self.cond,
            "rows": self.rows,
            "total_cost": self.cost,
        })
    }
}

/// A table a statement writes (a `ModifyTable` node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Modify {
    /// `Insert`, `Update`, `Delete`, `Merge`.
    pub operation: String,
    pub schema: String,
    pub relname: String,
}

/// A plan read into what judging needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Every read of a table, in plan order (depth first).
    pub accesses: Vec<Access>,
    pub modifies: Vec<Modify>,
    /// The top node's total cost.
    pub total_cost: f64,
}

/// Reads `EXPLAIN (VERBOSE, FORMAT JSON)` output (an array of one object
/// with a `Plan`).
pub fn parse(json: &Value) -> Result<Plan, String> {
    let top = json
        .as_array()
        .and_then(|a| a.first())
        .and_then(|o| o.get("Plan"))
        .ok_or("not EXPLAIN (FORMAT JSON) output: no top-level Plan")?;
    let mut plan = Plan {
        total_cost: number(top, "Total Cost"),
        ..Plan::default()
    };
    walk(top, &mut plan);
    Ok(plan)
}

fn number(node: &Value, key: &str) -> f64 {
    node.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn text<'a>(node: &'a Value, key: &str) -> Option<&'a str> {
    node.get(key).and_then(Value::as_str)
}

fn children(node: &Value) -> impl Iterator<Item = &Value> {
    node.get("Plans")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn walk(node: &Value, plan: &mut Plan) {
    let kind = text(node, "Node Type").unwrap_or_default();
    let relation = text(node, "Relation Name").map(|r| {
        (
            text(node, "Schema").unwrap_or("public").to_string(),
            r.to_string(),
        )
    });
    if kind == "ModifyTable" {
        if let Some((schema, relname)) = relation {
            plan.modifies.push(Modify {
                operation: text(node, "Operation").unwrap_or_default().to_string(),
                schema,
                relname,
            });
        }
    } else if let Some((schema, relname)) = relation {
        let path = match kind {
            "Seq Scan" => Path::Seq,
            "Index Scan" => Path::Index,
            "Index Only Scan" => Path::IndexOnly,
            "Bitmap Heap Scan" => Path::Bitmap,
            other => Path::Other(other.to_string()),
        };
        let (index, cond, conds) = if path == Path::Bitmap {
            let mut scans = Vec::new();
            bitmap_index_scans(node, &mut scans);
            let names: Vec<&str> = scans.iter().filter_map(|s| text(s, "Index Name")).collect();
            let conds: Vec<&str> = scans.iter().filter_map(|s| text(s, "Index Cond")).collect();
            (
                (!names.is_empty()).then(|| names.join(" + ")),
                (!conds.is_empty()).then(|| conds.join(" / ")),
                conds.iter().map(|c| conjuncts(c)).max().unwrap_or(0),
            )
        } else {
            let cond = text(node, "Index Cond");
            (
                text(node, "Index Name").map(str::to_string),
                cond.map(str::to_string),
                cond.map_or(0, conjuncts),
            )
        };
        plan.accesses.push(Access {
            schema,
            relname,
            path,
            index,
            cond,
            conds,
            rows: number(node, "Plan Rows"),
            cost: number(node, "Total Cost"),
        });
    }
    for child in children(node) {
        // A bitmap heap scan's index scans are part of its access.
        if kind == "Bitmap Heap Scan" && is_bitmap_part(child) {
            continue;
        }
        walk(child, plan);
    }
}

fn is_bitmap_part(node: &Value) -> bool {
    matches!(
        text(node, "Node Type"),
        Some("Bitmap Index Scan" | "BitmapAnd" | "BitmapOr")
    )
}

fn bitmap_index_scans<'a>(node: &'a Value, out: &mut Vec<&'a Value>) {
    for child in children(node).filter(|c| is_bitmap_part(c)) {
        if text(child, "Node Type") == Some("Bitmap Index Scan") {
            out.push(child);
        } else {
            bitmap_index_scans(child, out);
        }
    }
}

/// The top-level `AND`ed conditions of an index condition as EXPLAIN
/// prints it: `((t.a = $1) AND (t.b = $2))` is 2, `(t.a = $1)` is 1.
pub fn conjuncts(cond: &str) -> usize {
    let mut s = cond.trim();
    if s.is_empty() {
        return 0;
    }
    if s.starts_with('(') && closing_paren(s) == Some(s.len() - 1) {
        s = &s[1..s.len() - 1];
    }
    let bytes = s.as_bytes();
    let (mut depth, mut quote, mut count) = (0i32, None::<u8>, 1);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'\'' | b'"' => quote = Some(b),
                b'(' => depth += 1,
                b')' => depth -= 1,
                b' ' if depth == 0 && s[i..].starts_with(" AND ") => {
                    count += 1;
                    i += 4;
                }
                _ => {}
            },
        }
        i += 1;
    }
    count
}

/// Where the parenthesis opening `s` closes.
fn closing_paren(s: &str) -> Option<usize> {
    let (mut depth, mut quote) = (0i32, None::<char>);
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            },
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A plan node reading `rel` (also used by the plan check's tests).
    pub(crate) fn scan(
        kind: &str,
        rel: &str,
        index: Option<&str>,
        cond: Option<&str>,
        rows: f64,
        cost: f64,
    ) -> Value {
        let mut n = json!({
            "Node Type": kind, "Relation Name": rel, "Schema": "public", "Alias": rel,
            "Plan Rows": rows, "Total Cost": cost,
        });
        if let Some(i) = index {
            n["Index Name"] = json!(i);
        }
        if let Some(c) = cond {
            n["Index Cond"] = json!(c);
        }
        n
    }

    /// `EXPLAIN (FORMAT JSON)`'s shape around `top`.
    pub(crate) fn explain(top: Value) -> Value {
        json!([{ "Plan": top }])
    }

    #[test]
    fn conjuncts_count_top_level_ands_only() {
        assert_eq!(conjuncts("(books.email = $1)"), 1);
        assert_eq!(conjuncts("((t.a = $1) AND (t.b = $2))"), 2);
        assert_eq!(conjuncts("((t.a = ' AND ') AND (t.b = ANY ($2)))"), 2);
        assert_eq!(conjuncts("((t.a = $1) OR (t.b = $2))"), 1);
        assert_eq!(conjuncts(""), 0);
    }

    #[test]
    fn parse_reads_paths_indexes_bitmaps_and_writes() {
        let bitmap = json!({
            "Node Type": "Bitmap Heap Scan", "Relation Name": "t", "Schema": "s",
            "Plan Rows": 40.0, "Total Cost": 90.5,
            "Plans": [{ "Node Type": "Bitmap Index Scan", "Index Name": "t_a",
                        "Index Cond": "((t.a = $1) AND (t.b = $2))", "Plan Rows": 40.0, "Total Cost": 4.0 }]
        });
        let top = json!({
            "Node Type": "ModifyTable", "Operation": "Delete", "Relation Name": "parent",
            "Schema": "public", "Total Cost": 120.0, "Plan Rows": 0.0,
            "Plans": [{ "Node Type": "Nested Loop", "Total Cost": 110.0, "Plan Rows": 1.0,
                        "Plans": [scan("Seq Scan", "parent", None, None, 1.0, 20.0), bitmap] }]
        });
        let p = parse(&explain(top)).unwrap();
        assert_eq!(p.total_cost, 120.0);
        assert_eq!(
            p.modifies,
            [Modify {
                operation: "Delete".into(),
                schema: "public".into(),
                relname: "parent".into()
            }]
        );
        assert_eq!(p.accesses.len(), 2);
        assert_eq!(p.accesses[0].path, Path::Seq);
        let b = &p.accesses[1];
        assert_eq!(
            (
                b.schema.as_str(),
                b.path.clone(),
                b.index.as_deref(),
                b.conds
            ),
            ("s", Path::Bitmap, Some("t_a"), 2)
        );
        assert_eq!(
            b.describe(),
            "Bitmap Heap Scan using t_a (est. 40 rows, cost 90.50)"
        );
        assert!(parse(&json!({"x": 1})).is_err());
    }
}

//! The values a partitioned table routes: a row whose partition key falls
//! outside every partition is refused (`no partition of relation … found
//! for row`), so the key column of a table partitioned by RANGE or LIST
//! (with no DEFAULT partition) takes values from its partitions' bounds.
//!
//! RANGE over one column of a date, timestamp or number type: the span
//! from the lowest finite bound to the highest, walked in turn
//! (partitions are assumed to cover it without gaps, as yearly or monthly
//! ones do; one open to MINVALUE or MAXVALUE takes the rest). LIST: every listed value in turn. HASH routes any value.

use postgres::GenericClient;

use super::catalogue::{Column, Table, TypeKind};
use super::families::Literals;
use super::family::{each_of, Family};
use super::I;
use crate::pg::quote_literal;

/// The column (by number) a partitioned table's rows must be routed by
/// and the values that route them; None when any value is routed (not
/// partitioned, HASH, a DEFAULT partition) or the key is not one plain
/// column of a type handled here.
pub(super) fn routed_values(
    c: &mut impl GenericClient,
    t: &Table,
) -> Result<Option<(i16, Family)>, postgres::Error> {
    let Some((key, bounds)) = &t.partitioning else {
        return Ok(None);
    };
    if bounds.is_empty() || bounds.iter().any(|b| b.trim() == "DEFAULT") {
        return Ok(None);
    }
    let Some((strategy, column)) = key_column(key) else {
        return Ok(None);
    };
    let Some(col) = t.columns.iter().find(|col| col.name == column) else {
        return Ok(None);
    };
    let family = match strategy.as_str() {
        "LIST" => {
            let mut lits = Literals::default();
            for b in bounds {
                lits.scan(b);
            }
            let values: Vec<String> = if lits.strings.is_empty() {
                lits.numbers.clone()
            } else {
                lits.strings.iter().map(|s| quote_literal(s)).collect()
            };
            (!values.is_empty()).then(|| each_of(&values))
        }
        "RANGE" => range_span(c, col, bounds)?,
        _ => None,
    };
    Ok(family.map(|f| (col.num, f)))
}

/// `RANGE (date)` → ("RANGE", "date"); None for an expression or several
/// columns.
fn key_column(key: &str) -> Option<(String, String)> {
    let (strategy, rest) = key.split_once(' ')?;
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?.trim();
    if inner.contains([',', '(', ' ']) {
        return None;
    }
    let name = match inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => inner.to_string(),
    };
    Some((strategy.to_string(), name))
}

/// The text between `FROM (` and `)`, and between `TO (` and `)`, of one
/// range bound: a side that is MINVALUE or MAXVALUE (an archive of
/// everything before, a partition of everything after) stands for the
/// other side, so the span runs between finite bounds; None for several
/// columns or two open sides.
fn from_to(bound: &str) -> Option<(String, String)> {
    let after_from = bound.split_once("FROM (")?.1;
    let (from, rest) = after_from.split_once(") TO (")?;
    let to = rest.strip_suffix(')')?;
    if from.contains(',') || to.contains(',') {
        return None;
    }
    let finite = |v: &str| !v.contains("MINVALUE") && !v.contains("MAXVALUE");
    match (finite(from), finite(to)) {
        (true, true) => Some((from.to_string(), to.to_string())),
        (false, true) => Some((to.to_string(), to.to_string())),
        (true, false) => Some((from.to_string(), from.to_string())),
        (false, false) => None,
    }
}

/// The SQL of a value from the lowest bound (a literal), the key's type
/// and the span.
type Step = fn(&str, &str, i64) -> String;

/// Values from the lowest lower bound on, in turn over the span to the
/// highest upper bound, for a date, timestamp or integer key.
fn range_span(
    c: &mut impl GenericClient,
    col: &Column,
    bounds: &[String],
) -> Result<Option<Family>, postgres::Error> {
    let pairs: Option<Vec<(String, String)>> = bounds.iter().map(|b| from_to(b)).collect();
    let Some(pairs) = pairs else {
        return Ok(None);
    };
    let ty = &col.sql_type;
    // The span in the unit the family steps by (days, seconds, one).
    let (span, step): (&str, Step) = match base(&col.ty.kind) {
        TypeKind::Date => ("max(y) - min(x)", |lo, ty, span| {
            format!("({lo}::{ty} + (({I}) % {span})::int)")
        }),
        TypeKind::Timestamp => (
            "extract(epoch FROM max(y) - min(x))::bigint",
            |lo, ty, span| format!("({lo}::{ty} + (({I}) % {span}) * interval '1 second')"),
        ),
        TypeKind::Int(_) => ("max(y) - min(x)", |lo, ty, span| {
            format!("({lo}::{ty} + ({I}) % {span})")
        }),
        _ => return Ok(None),
    };
    let values = pairs
        .iter()
        .map(|(x, y)| format!("(({x})::{ty}, ({y})::{ty})"))
        .collect::<Vec<_>>()
        .join(", ");
    // In a savepoint: bounds its casts refuse must not end the transaction
    // of a deferred cycle.
    let mut sp = c.transaction()?;
    let row = sp.query_one(
        &format!("SELECT min(x)::text, ({span})::bigint FROM (VALUES {values}) v(x, y)"),
        &[],
    );
    drop(sp);
    let row = match row {
        Ok(row) => row,
        Err(e) if e.as_db_error().is_some() => return Ok(None),
        Err(e) => return Err(e),
    };
    let (Some(lo), Some(span)) = (
        row.get::<_, Option<String>>(0),
        row.get::<_, Option<i64>>(1),
    ) else {
        return Ok(None);
    };
    if span <= 0 {
        return Ok(None);
    }
    Ok(Some(Family {
        sql: step(&quote_literal(&lo), ty, span),
        injective: false,
        cycle: Some(span as u64),
    }))
}

/// A domain's base kind (at any depth).
fn base(kind: &TypeKind) -> &TypeKind {
    match kind {
        TypeKind::Domain { base, .. } => self::base(&base.kind),
        k => k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_keys_and_range_bounds_are_read() {
        assert_eq!(
            key_column("RANGE (date)"),
            Some(("RANGE".into(), "date".into()))
        );
        assert_eq!(
            key_column("LIST (\"Region\")"),
            Some(("LIST".into(), "Region".into()))
        );
        assert_eq!(key_column("RANGE (a, b)"), None);
        assert_eq!(key_column("RANGE (lower(x))"), None);
        assert_eq!(
            from_to("FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')"),
            Some(("'2024-01-01'".into(), "'2025-01-01'".into()))
        );
        assert_eq!(
            from_to("FOR VALUES FROM (MINVALUE) TO (10)"),
            Some(("10".into(), "10".into()))
        );
        assert_eq!(from_to("FOR VALUES FROM (MINVALUE) TO (MAXVALUE)"), None);
        assert_eq!(from_to("FOR VALUES FROM (1, 2) TO (3, 4)"), None);
    }
}

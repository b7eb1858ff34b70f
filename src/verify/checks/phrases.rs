//! The phrases and small readings of evidence that several checks share
//! (a duration in evidence or in words, the blocking locks a statement
//! held, what a file outside a transaction was measured doing, the filter
//! a new column decides). Floor `checks`: judging's vocabulary, kept in
//! one place so two checks say the same thing the same way; no check
//! borrows from another's module.

use crate::pg::lock_modes::{self, Needs};
use crate::verify::evidence::{Applied, Row, StatementRun};

/// Milliseconds with one decimal, for evidence.
pub fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// For statement `i` of a file that ran outside a transaction: "measured
/// while it ran: at N rows …; at 0 rows …" (its locks as sampled in both
/// applies). None inside a transaction.
pub fn while_running(at_zero: &Applied, at_n: &Applied, i: usize) -> Option<String> {
    if !at_n.outside_transaction {
        return None;
    }
    let n = at_n.observed_at(i)?;
    let st = at_n.statements.get(i)?;
    let sized: Vec<String> = st
        .locks_after
        .keys()
        .filter_map(|t| at_n.tables.get(t))
        .map(|t| format!("{} rows of {}", t.rows_before, t.table))
        .collect();
    let rows = if sized.is_empty() {
        format!(
            "{} rows",
            at_n.tables.values().map(|t| t.rows_before).sum::<i64>()
        )
    } else {
        sized.join(" and ")
    };
    let zero = at_zero
        .observed_at(i)
        .filter(|_| at_zero.statements.len() == at_n.statements.len())
        .unwrap_or_else(|| "not measured".into());
    Some(format!(
        "measured while it ran: at {rows}: {n}; at 0 rows: {zero}"
    ))
}

/// The blocking locks held once statement `st` ran, as "MODE on table"
/// (strongest per table), with what they block.
pub fn blocking_locks(st: &StatementRun, needs: &Needs) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (table, modes) in &st.locks_after {
        let blocking: Vec<&str> = modes
            .iter()
            .map(String::as_str)
            .filter(|m| needs.blocks(table, m))
            .collect();
        if let Some(m) = lock_modes::strongest(blocking) {
            out.push((table.clone(), m.to_string(), needs.describe(table, m)));
        }
    }
    out
}

pub fn locks_phrase(locks: &[(String, String, String)]) -> String {
    locks
        .iter()
        .map(|(t, m, what)| format!("{} on {t} (blocks its {what})", lock_modes::sql_name(m)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "95 s", "1.2 s", "340 ms".
pub fn human(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 {
        format!("{s:.0} s")
    } else if s >= 1.0 {
        format!("{s:.1} s")
    } else {
        format!("{:.0} ms", s * 1000.0)
    }
}

/// The filter of `filters` that a column the migration added decides,
/// with that column and its value on `row`: ("confirmed", "confirmed",
/// "false"). `known`: the table's columns before (empty: unknown, then
/// any filter on a column of the row whose text `old_filters` lacks).
pub fn excluding_filter(
    filters: &[(String, Vec<String>)],
    old_filters: &[(String, Vec<String>)],
    known: &[String],
    row: &Row,
) -> Option<(String, String, String)> {
    filters.iter().find_map(|(text, cols)| {
        let col = cols.iter().find(|c| {
            row.contains_key(*c)
                && if known.is_empty() {
                    !old_filters.iter().any(|(t, _)| t == text)
                } else {
                    !known.contains(c)
                }
        })?;
        let value = row
            .get(col)
            .cloned()
            .flatten()
            .unwrap_or_else(|| "NULL".to_string());
        Some((text.clone(), col.clone(), value))
    })
}

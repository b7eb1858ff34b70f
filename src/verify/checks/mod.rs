//! The rehearsal's checks, one module each. Every check has a stable name
//! (the prefix of its finding ids: `rewrite.table-rewritten` lives in
//! `rewrite.rs`), a one-line description, and turns measurements into
//! findings with evidence and advice. The pipeline (`verify/mod.rs`) runs
//! the scenarios; the checks judge. A project may add checks of its own
//! through its apps' drivers (`crate::app::ProjectRule`: the
//! shipped project's `dao`, in `crate::dao::check`).

pub mod apply;
pub mod backfill;
pub mod compat;
pub mod locks;
pub mod plan;
pub mod post;
pub mod rewrite;
/// `static` is a keyword: the module is `r#static`, its file `static.rs`.
pub mod r#static;

/// (name, description) of every check, in the order they run.
pub const ALL: &[(&str, &str)] = &[
    (r#static::CHECK, r#static::DESCRIPTION),
    (apply::CHECK, apply::DESCRIPTION),
    (rewrite::CHECK, rewrite::DESCRIPTION),
    (locks::CHECK, locks::DESCRIPTION),
    (backfill::CHECK, backfill::DESCRIPTION),
    (compat::CHECK, compat::DESCRIPTION),
    (plan::CHECK, plan::DESCRIPTION),
    (post::CHECK, post::DESCRIPTION),
];

/// Milliseconds with one decimal, for evidence.
pub(crate) fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// For statement `i` of a file that ran outside a transaction: "measured
/// while it ran: at N rows …; at 0 rows …" (its locks as sampled in both
/// applies). None inside a transaction.
pub(crate) fn while_running(
    at_zero: &crate::verify::rehearsal::Applied,
    at_n: &crate::verify::rehearsal::Applied,
    i: usize,
) -> Option<String> {
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

//! The rehearsal's checks, one module each, and their registry [`ALL`].
//! Every check has a stable name (the prefix of its finding ids:
//! `rewrite.table-rewritten` lives in `rewrite.rs`), a one-line
//! description, and one entry point with one signature: it turns a
//! migration's [`MigrationEvidence`] into findings with evidence and
//! advice, reading nothing else (no database: the evidence module's unit
//! test holds every file here to that). The stages measure; after the last
//! one, verify judges every migration's evidence with every check of
//! [`ALL`], in order, and the report records each check that had evidence
//! to judge. A new check on existing evidence is one file and one line of
//! [`ALL`].
//!
//! A project's own checks (the shipped project's `dao`) run on a database
//! of their own in the final stage, through its apps' drivers
//! (`crate::app::ProjectRule`): they are not part of this registry.

pub mod apply;
pub mod backfill;
pub mod compat;
pub mod locks;
pub mod plan;
pub mod post;
pub mod rewrite;
/// `static` is a keyword: the module is `r#static`, its file `static.rs`.
pub mod r#static;

use crate::report::Finding;
use crate::verify::evidence::{Context, MigrationEvidence};

/// One check of the registry.
pub struct Check {
    /// The prefix of its finding ids.
    pub name: &'static str,
    pub description: &'static str,
    /// Whether a migration's evidence holds what it judges: the report
    /// lists it as run for that migration.
    pub ran: fn(&MigrationEvidence) -> bool,
    pub evaluate: fn(&MigrationEvidence, &Context) -> Vec<Finding>,
}

/// Every check, in the order it judges.
pub const ALL: &[Check] = &[
    r#static::ENTRY,
    apply::ENTRY,
    plan::ENTRY,
    rewrite::ENTRY,
    locks::ENTRY,
    backfill::ENTRY,
    compat::ENTRY,
    post::ENTRY,
    post::unlogged_table::ENTRY,
];

/// The description of the registered check named `name`.
pub fn description(name: &str) -> &'static str {
    ALL.iter()
        .find(|c| c.name == name)
        .map_or("", |c| c.description)
}

/// Milliseconds with one decimal, for evidence.
pub(crate) fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// For statement `i` of a file that ran outside a transaction: "measured
/// while it ran: at N rows …; at 0 rows …" (its locks as sampled in both
/// applies). None inside a transaction.
pub(crate) fn while_running(
    at_zero: &crate::verify::evidence::Applied,
    at_n: &crate::verify::evidence::Applied,
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

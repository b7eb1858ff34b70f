//! Invalid indexes and NOT VALID constraints: one judgement, made by
//! `verify`'s `post` check on the rehearsed final schema and by `check`'s
//! `invariants` on a live database, so both say the same thing the same way.
//!
//! An invalid index (`pg_index.indisvalid` false) is what a failed
//! `CREATE INDEX CONCURRENTLY` leaves: it slows every write and serves no
//! read. A constraint added `NOT VALID` and never validated
//! (`pg_constraint.convalidated` false) does not vouch for existing rows.

use crate::report::{Finding, Severity};
use crate::schema::Snapshot;

/// Findings on `live` for `check` at `version`: an info line when all is
/// well, an error naming each invalid index or unvalidated constraint
/// otherwise. `pending_concurrent` (index, file) are the indexes that
/// pending `-- rollsafe:no-transaction` migrations build: an invalid one
/// among them is an interrupted build that `rollsafe migrate` redoes.
pub fn findings(
    check: &str,
    live: &Snapshot,
    version: Option<i32>,
    pending_concurrent: &[(String, String)],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let invalid = live.invalid_indexes();
    // An invalid index a pending no-transaction migration builds is its
    // interrupted build: rerunning migrate drops and rebuilds it.
    let rebuilt_by: Vec<&String> = invalid
        .iter()
        .filter_map(|qualified| {
            let name = qualified.rsplit('.').next().unwrap_or(qualified);
            pending_concurrent
                .iter()
                .find(|(i, _)| i == name)
                .map(|(_, file)| file)
        })
        .collect();
    let advice = if !invalid.is_empty() && rebuilt_by.len() == invalid.len() {
        let mut files: Vec<&str> = rebuilt_by.iter().map(|f| f.as_str()).collect();
        files.dedup();
        format!(
            "run `rollsafe migrate`: the pending no-transaction migration {} builds it, and a rerun drops the invalid index concurrently and builds it again (fix the cause first, e.g. duplicate rows for a unique index)",
            files.join(", ")
        )
    } else {
        "DROP INDEX CONCURRENTLY the invalid index, fix the cause (e.g. duplicate rows for a unique index), and build it again; if a pending `-- rollsafe:no-transaction` migration builds it, `rollsafe migrate` does both".to_string()
    };
    out.push(if invalid.is_empty() {
        Finding::new(check, "indexes-valid", Severity::Info, version, "every index is valid")
    } else {
        Finding::new(
            check,
            "invalid-index",
            Severity::Error,
            version,
            format!("invalid index(es): {} (a CREATE INDEX CONCURRENTLY that failed leaves one behind; it slows writes and serves no reads)", invalid.join(", ")),
        )
        .evidence("indexes", invalid)
        .advice(advice)
    });
    let unvalidated = live.unvalidated_constraints();
    out.push(if unvalidated.is_empty() {
        Finding::new(check, "constraints-validated", Severity::Info, version, "every constraint is validated")
    } else {
        Finding::new(
            check,
            "not-valid-constraint",
            Severity::Error,
            version,
            format!("constraint(s) added NOT VALID and never validated: {} (existing rows are not guaranteed to satisfy them)", unvalidated.join(", ")),
        )
        .evidence("constraints", unvalidated)
        .advice("run ALTER TABLE … VALIDATE CONSTRAINT … (takes only a SHARE UPDATE EXCLUSIVE lock) in a migration")
    });
    out
}

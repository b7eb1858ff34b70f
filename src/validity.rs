//! What `verify` and `check` both judge, measured once: invalid indexes
//! and NOT VALID constraints (`verify`'s `post` check on the rehearsed final
//! schema, `check`'s `invariants` on a live database, same findings), and
//! the rows that break a migration's `-- rollsafe:backfill` promise
//! ([`backfill_violations`]: `verify`'s `backfill` right after the
//! migration, `check`'s `invariants` on the rows that predate it).
//!
//! An invalid index (`pg_index.indisvalid` false) is what a failed
//! `CREATE INDEX CONCURRENTLY` leaves: it slows every write and serves no
//! read (an error). A constraint added `NOT VALID` and not validated yet
//! (`pg_constraint.convalidated` false) does not vouch for existing rows,
//! but it is the first half of the safe way to add one (a warning: validate
//! it in a later migration).

use postgres::Client;

use crate::catalog::TableName;
use crate::report::{Finding, Severity};
use crate::schema::Snapshot;

/// How many example ids a finding lists before it only counts.
pub const MAX_IDS: usize = 20;

/// The rows of a table measured against a `-- rollsafe:backfill` promise.
#[derive(Debug, Clone, Default)]
pub struct BackfillCount {
    /// Rows in scope.
    pub rows: i64,
    /// Rows in scope for which the predicate is not true (NULL counts as
    /// broken: a reader filtering on it would not see the row).
    pub violating: i64,
    /// Up to [`MAX_IDS`] violating rows' `id` values, oldest first when the
    /// table has `created_at`; empty when the table has no `id` column.
    pub examples: Vec<String>,
}

/// Counts the rows of `table` that break `predicate`: every row, or with
/// `created_before` (a timestamp; the table then needs `created_at`) only
/// the rows created before it, as on a live database where later rows are
/// the apps' own business. The predicate comes from the migration file,
/// checked by the grammar when the catalog was read (one `WHERE`
/// condition, nothing that writes: `catalog::directive_sql`).
pub fn backfill_violations(
    c: &mut Client,
    table: &TableName,
    predicate: &str,
    created_before: Option<&str>,
) -> Result<BackfillCount, postgres::Error> {
    let t = table.sql();
    let scope = if created_before.is_some() {
        "WHERE created_at < $1::text::timestamptz"
    } else {
        "WHERE true"
    };
    let params: Vec<&(dyn postgres::types::ToSql + Sync)> = match &created_before {
        Some(ts) => vec![ts],
        None => Vec::new(),
    };
    let row = c.query_one(
        &format!(
            "SELECT count(*), count(*) FILTER (WHERE NOT COALESCE(({predicate}), false)) FROM {t} {scope}"
        ),
        &params,
    )?;
    let (rows, violating): (i64, i64) = (row.get(0), row.get(1));
    let mut examples = Vec::new();
    if violating > 0 {
        // The row's `id` through jsonb: no error for a table without one.
        let order = if created_before.is_some() {
            "ORDER BY created_at"
        } else {
            ""
        };
        examples = c
            .query(
                &format!(
                    "SELECT to_jsonb({t}.*) ->> 'id' FROM {t} {scope} \
                     AND NOT COALESCE(({predicate}), false) {order} LIMIT {MAX_IDS}"
                ),
                &params,
            )?
            .iter()
            .filter_map(|r| r.get::<_, Option<String>>(0))
            .collect();
    }
    Ok(BackfillCount {
        rows,
        violating,
        examples,
    })
}

/// Findings on `live` for `check` at `version`: an info line when all is
/// well, an error naming each invalid index, a warning naming each
/// constraint left NOT VALID (validated by a later migration, the safe
/// way; `verify` and `check` alike). `pending_concurrent` (index, file) are the indexes that
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
        // Adding a constraint NOT VALID and validating it in a later
        // migration is the safe way to add one (rollsafe's own advice):
        // the state between the two is expected, new rows are already
        // checked, so it is a warning, not a failed gate.
        Finding::new(
            check,
            "not-valid-constraint",
            Severity::Warn,
            version,
            format!("constraint(s) left NOT VALID: {} (new rows are checked; existing rows are not guaranteed to satisfy them until validated)", unvalidated.join(", ")),
        )
        .evidence("constraints", unvalidated)
        .advice("validate it in a later migration: ALTER TABLE … VALIDATE CONSTRAINT … takes only SHARE UPDATE EXCLUSIVE, which blocks neither reads nor writes")
    });
    out
}

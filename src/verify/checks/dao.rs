//! `dao`: the newest two-phase app's behaviour on the final schema, on a
//! fresh database built by the real migrations: a creation in flight is
//! hidden from readers, a finished one is visible, a retried create does
//! not duplicate the row nor turn a ready row back to not ready.
//!
//! INTERIM: exercised through the app driver (the app's statements). When
//! `rollsafe::dao` lands, this runs the DAO's API (attach, finish twice,
//! getters, get_any_*) so the shipped code is what is proven.

use postgres::Client;

use crate::report::{Finding, Severity};
use crate::verify::apps::{AppVersion, NewFunction};

pub const CHECK: &str = "dao";
pub const DESCRIPTION: &str =
    "two-phase create on the final schema: in-flight rows hidden, finished rows visible, retries idempotent, never ready → not ready";

/// Runs the scenario; an app operation that fails outright is an error
/// finding.
pub fn run(v: i32, c: &mut Client, app: &AppVersion) -> Vec<Finding> {
    scenario(v, c, app).unwrap_or_else(|e| {
        vec![Finding::new(
            CHECK,
            "operation-fails",
            Severity::Error,
            Some(v),
            format!(
                "the {} app fails on V{v}: {}",
                app.name,
                crate::verify::replay::one_line(&e)
            ),
        )
        .evidence("app", app.name.clone())
        .advice("the app's statements must match the final schema")]
    })
}

fn scenario(v: i32, c: &mut Client, app: &AppVersion) -> anyhow::Result<Vec<Finding>> {
    let Some(d) = app.driver() else {
        return Ok(vec![]);
    };
    let mut problems = Vec::new();
    let req = NewFunction::with_new_collection(c, "dao_in_flight")?;
    let Some(in_flight) = d.begin_create(c, &req)? else {
        // A one-phase app: nothing two-phase to prove.
        return Ok(vec![]);
    };
    if d.sees(c, in_flight)? {
        problems.push("a creation in flight (phase 1 done) is visible to get_by_id".to_string());
    }
    let req = NewFunction::with_new_collection(c, "dao_finished")?;
    let done = d.create_complete(c, &req)?;
    if !d.sees(c, done)? {
        problems.push("a finished creation is not visible to get_by_id".to_string());
    }
    if !d.list(c, req.input_collection_id)?.contains(&done) {
        problems.push("a finished creation is missing from list_by_collection".to_string());
    }
    // A retry of phase 1 for the same request (a client retry, or recovery).
    let retry = d.begin_create(c, &req)?;
    let copies: i64 = c
        .query_one(
            "SELECT count(*) FROM attached_functions WHERE input_collection_id = $1 AND name = $2",
            &[&req.input_collection_id, &req.name],
        )?
        .get(0);
    if copies != 1 {
        problems.push(format!("a retried create left {copies} rows for one name"));
    }
    if retry.is_some_and(|id| id != done) {
        problems.push("a retried create returned another row's id".to_string());
    }
    if !d.sees(c, done)? {
        problems.push("a retried create turned a ready row back to not ready".to_string());
    }
    Ok(vec![if problems.is_empty() {
        Finding::new(
            CHECK,
            "two-phase-create",
            Severity::Info,
            Some(v),
            format!(
                "the {} app on V{v}: in-flight rows hidden, finished rows visible, retried create idempotent and never un-readies a row",
                app.name
            ),
        )
    } else {
        Finding::new(
            CHECK,
            "two-phase-create-broken",
            Severity::Error,
            Some(v),
            format!("the {} app on V{v}: {}", app.name, problems.join("; ")),
        )
        .advice("phase 1 inserts is_ready = false with INSERT … ON CONFLICT DO NOTHING RETURNING; readers filter on is_ready; finish sets output collection and is_ready together, idempotently")
    }
    .evidence("app", app.name.clone())])
}

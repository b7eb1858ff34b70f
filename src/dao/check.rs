//! `dao`: the shipped project's own check, declared by its current app's
//! driver ([`crate::dao::shipped`]) and run by verify on the final schema,
//! on a fresh database built by the real migrations, through the DAO's Rust
//! API (`rollsafe::dao::CurrentDao`, which runs `src/dao/current.sql`):
//!
//! - phase 1 (`insert_not_ready`) leaves a row that the getters
//!   (`get_by_id`, `get_by_name`, `list_by_collection`) hide and
//!   `get_any_by_id` shows, not ready;
//! - `finish` marks it ready with its output collection; a second `finish`
//!   and two concurrent ones change nothing more (one output collection);
//! - a retried attach of the same request returns the same row, and no DAO
//!   operation (retry, update_params, record_run) turns a ready row back to
//!   not ready.
//!
//! These are the review findings of the change that started rollsafe,
//! proven against the schema the migrations build.

use postgres::Client;
use uuid::Uuid;

use crate::app::ProjectRule;
use crate::dao::{request_with_new_collection, AttachRequest, CurrentDao};
use crate::db;
use crate::report::{Finding, Severity};

pub const CHECK: &str = "dao";
pub const DESCRIPTION: &str =
    "two-phase create on the final schema: in-flight rows hidden, finish idempotent (also concurrently), retries reuse the row, never ready → not ready";

/// The check as the current app's driver declares it.
pub struct TwoPhaseCreate;

impl ProjectRule for TwoPhaseCreate {
    fn check(&self) -> &'static str {
        CHECK
    }
    fn description(&self) -> &'static str {
        DESCRIPTION
    }
    fn on_final_schema(&self, v: i32, url: &str) -> Option<Vec<Finding>> {
        Some(run(v, url))
    }
}

/// Runs the scenario on the database at `url` (schema version `v`); an
/// operation that fails outright is an error finding.
pub fn run(v: i32, url: &str) -> Vec<Finding> {
    match scenario(url) {
        Ok(problems) if problems.is_empty() => vec![Finding::new(
            CHECK,
            "two-phase-create",
            Severity::Info,
            Some(v),
            format!("the current DAO on V{v}: in-flight rows hidden from getters, finish idempotent (twice and concurrently, one output collection), retried attach reuses the row, readiness never goes back"),
        )],
        Ok(problems) => vec![Finding::new(
            CHECK,
            "two-phase-create-broken",
            Severity::Error,
            Some(v),
            format!("the current DAO on V{v}: {}", problems.join("; ")),
        )
        .evidence("problems", problems.len())
        .advice("phase 1 inserts is_ready = false (INSERT … ON CONFLICT DO NOTHING RETURNING); getters filter on is_ready; finish locks the row, reuses the output collection and sets it with is_ready = true in one transaction")],
        Err(e) => vec![Finding::new(
            CHECK,
            "operation-fails",
            Severity::Error,
            Some(v),
            format!("the current DAO fails on V{v}: {}", crate::errors::one_line(e.as_ref())),
        )
        .advice("the DAO's statements must match the final schema")],
    }
}

fn outputs_named(c: &mut Client, req: &AttachRequest) -> anyhow::Result<i64> {
    Ok(c.query_one(
        "SELECT count(*) FROM collections WHERE database_id = $1 AND name = $2 AND NOT is_deleted",
        &[&req.database_id, &req.output_collection_name],
    )?
    .get(0))
}

fn scenario(url: &str) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut c = db::connect(url)?;
    let req = request_with_new_collection(&mut c, "dao_two_phase")?;
    let mut dao = CurrentDao::new(&mut c);

    // Phase 1: hidden from getters, visible to get_any_*.
    let phase1 = dao.insert_not_ready(&req)?;
    let id = phase1.attached.id;
    if dao.get_by_id(id)?.is_some() {
        problems.push("get_by_id returns a not-ready row".to_string());
    }
    if dao
        .get_by_name(req.input_collection_id, &req.name)?
        .is_some()
    {
        problems.push("get_by_name returns a not-ready row".to_string());
    }
    if dao
        .list_by_collection(req.input_collection_id)?
        .iter()
        .any(|f| f.id == id)
    {
        problems.push("list_by_collection returns a not-ready row".to_string());
    }
    match dao.get_any_by_id(id)? {
        Some(f) if f.is_ready == Some(false) => {}
        other => problems.push(format!(
            "get_any_by_id after phase 1 returns {:?} instead of the not-ready row",
            other.map(|f| f.is_ready)
        )),
    }

    // Phase 3, twice in a row: one output collection, ready.
    dao.finish(id)?;
    let first = dao.get_by_id(id)?;
    dao.finish(id)?;
    let second = dao.get_by_id(id)?;
    match (&first, &second) {
        (Some(a), Some(b)) if a.output_collection_id.is_some() => {
            if a.output_collection_id != b.output_collection_id {
                problems.push("a second finish changed the output collection".to_string());
            }
        }
        _ => problems
            .push("after finish the row is not ready or has no output collection".to_string()),
    }
    drop(dao);
    let n = outputs_named(&mut c, &req)?;
    if n != 1 {
        problems.push(format!("finish twice left {n} output collections"));
    }

    // A retried attach reuses the ready row and leaves it ready; so do the
    // other writes.
    let mut dao = CurrentDao::new(&mut c);
    let retry = dao.attach(&req)?;
    if retry.id != id || retry.created {
        problems.push("a retried attach did not reuse the row".to_string());
    }
    dao.update_params(id, &serde_json::json!({"rollsafe": true}))?;
    dao.record_run(id, 10)?;
    if dao.get_any_by_id(id)?.and_then(|f| f.is_ready) != Some(true) {
        problems.push("a DAO operation turned a ready row back to not ready".to_string());
    }
    drop(dao);

    // Two finishes at once on a fresh not-ready row: one output collection.
    let req2 = request_with_new_collection(&mut c, "dao_concurrent_finish")?;
    let id2 = CurrentDao::new(&mut c).insert_not_ready(&req2)?.attached.id;
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let url = url.to_string();
            std::thread::spawn(move || -> anyhow::Result<Option<Uuid>> {
                let mut c = db::connect(&url)?;
                let mut dao = CurrentDao::new(&mut c);
                dao.finish(id2)?;
                Ok(dao.get_by_id(id2)?.and_then(|f| f.output_collection_id))
            })
        })
        .collect();
    let outs: Vec<Option<Uuid>> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("finish thread panicked"))?
        })
        .collect::<anyhow::Result<_>>()?;
    if outs[0].is_none() || outs[0] != outs[1] {
        problems.push(format!(
            "concurrent finishes disagree on the output collection: {outs:?}"
        ));
    }
    let n = outputs_named(&mut c, &req2)?;
    if n != 1 {
        problems.push(format!("concurrent finishes left {n} output collections"));
    }
    Ok(problems)
}

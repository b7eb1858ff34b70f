//! DAO tests: the two-phase attach and the legacy one-phase create, on the
//! schema the real migrations build, including races (many connections at
//! once), crashes between the phases (a dropped connection, a killed child
//! process) and a property test of the invariants under concurrency.
//!
//! The killed-child scenario re-executes this suite binary with
//! `ROLLSAFE_TEST_DAO_CHILD` set: `main` calls [`run_child_if_requested`]
//! before anything else, so the child runs one real attach (its own process,
//! its own connection) and is SIGKILLed inside its backfill hook. That needs
//! no extra binary target and is always built with the suite.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use postgres::Client;
use rollsafe::dao::{AttachRequest, BoxError, CurrentDao, DaoError, LegacyDao, DELETED_PREFIX};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use crate::common::TestEnv;

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    crate::trials!(
        "dao",
        env,
        [
            attach_creates_a_ready_row_with_its_output_collection,
            getters_hide_not_ready_and_detached_rows,
            detach_frees_the_name_for_a_new_attach,
            reserved_and_empty_names_are_refused_and_nothing_is_written,
            mismatching_attach_names_the_differing_fields,
            missing_input_collection_or_function_is_not_found,
            no_dao_call_turns_a_ready_row_not_ready,
            updates_touch_only_ready_rows_and_offsets_never_go_back,
            backfill_completes_before_the_row_is_ready,
            failed_backfill_leaves_the_row_not_ready_and_a_retry_completes,
            output_collection_of_another_attached_function_is_refused,
            concurrent_identical_attaches_agree_on_one_row,
            concurrent_conflicting_attaches_have_one_winner,
            concurrent_finishes_create_one_output_collection,
            crash_after_phase_1_dropped_connection_then_retry_completes,
            crash_in_backfill_killed_process_then_retry_completes,
            crash_after_output_collection_created_retry_reuses_it,
            sweep_stuck_retires_only_old_not_ready_rows,
            legacy_rows_are_visible_to_current_readers,
            legacy_rows_from_before_v3_are_ready_after_v3,
            not_ready_rows_are_hidden_from_current_readers_but_seen_by_legacy,
            legacy_create_refuses_a_taken_name_and_reserved_names,
            statement_sets_execute_on_every_schema_version_in_their_window,
            property_invariants_hold_under_concurrent_random_calls,
        ]
    )
}

const RECORD_COUNTER: &str = "ccf2e3ba-633e-43ba-9394-46b0c54c61e3";
const STATISTICS: &str = "1f2f2e3b-7c55-4f36-8a0e-3d0f6a8f1b21";

/// Input collections (rows, not schema) to attach functions to.
struct Seed {
    tenant_id: String,
    database_id: Uuid,
    inputs: Vec<Uuid>,
}

fn seed(c: &mut Client, inputs: usize) -> anyhow::Result<Seed> {
    let seed = Seed {
        tenant_id: "tenant-a".to_string(),
        database_id: Uuid::new_v4(),
        inputs: (0..inputs).map(|_| Uuid::new_v4()).collect(),
    };
    for (i, id) in seed.inputs.iter().enumerate() {
        c.execute(
            "INSERT INTO collections (id, name, tenant_id, database_id) VALUES ($1, $2, $3, $4)",
            &[
                id,
                &format!("input_{i}"),
                &seed.tenant_id,
                &seed.database_id,
            ],
        )
        .context("seeding an input collection")?;
    }
    Ok(seed)
}

impl Seed {
    fn request(&self, name: &str) -> AttachRequest {
        AttachRequest {
            name: name.to_string(),
            tenant_id: self.tenant_id.clone(),
            database_id: self.database_id,
            input_collection_id: self.inputs[0],
            output_collection_name: format!("{name}_output"),
            function_id: RECORD_COUNTER.parse().unwrap(),
            function_params: json!({"window": 10}),
            min_records_for_invocation: 100,
        }
    }
}

fn live_collections_named(c: &mut Client, name: &str) -> anyhow::Result<i64> {
    Ok(c.query_one(
        "SELECT count(*) FROM collections WHERE name = $1 AND NOT is_deleted",
        &[&name],
    )?
    .get(0))
}

/// (is_ready, is_deleted) straight from the table, whatever the DAO hides.
fn raw_state(c: &mut Client, id: Uuid) -> anyhow::Result<(bool, bool)> {
    let row = c.query_one(
        "SELECT is_ready, is_deleted FROM attached_functions WHERE id = $1",
        &[&id],
    )?;
    Ok((row.get(0), row.get(1)))
}

fn connect_many(db: &rollsafe::sandbox::Database, n: usize) -> anyhow::Result<Vec<Client>> {
    (0..n)
        .map(|_| db.connect().context("connecting a worker"))
        .collect()
}

fn attach_creates_a_ready_row_with_its_output_collection(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let req = seed.request("counter");
    let first = CurrentDao::new(&mut c).attach(&req)?;
    ensure!(first.created, "the first attach creates the row");
    let row = CurrentDao::new(&mut c)
        .get_by_id(first.id)?
        .context("a finished attach is visible")?;
    ensure!(row.is_ready == Some(true), "finished row is ready: {row:?}");
    let output = row
        .output_collection_id
        .context("ready row has an output")?;
    let name: String = c
        .query_one(
            "SELECT name FROM collections WHERE id = $1 AND NOT is_deleted",
            &[&output],
        )?
        .get(0);
    ensure!(name == "counter_output", "output collection name {name}");
    let again = CurrentDao::new(&mut c).attach(&req)?;
    ensure!(
        again.id == first.id && !again.created,
        "a retry reuses the row: {again:?} vs {first:?}"
    );
    ensure!(live_collections_named(&mut c, "counter_output")? == 1);
    Ok(())
}

fn getters_hide_not_ready_and_detached_rows(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let input = seed.inputs[0];
    let mut dao = CurrentDao::new(&mut c);
    let pending = dao.insert_not_ready(&seed.request("pending"))?;
    ensure!(pending.attached.created && !pending.is_ready);
    let pid = pending.attached.id;
    ensure!(
        dao.get_by_id(pid)?.is_none(),
        "get_by_id shows a not-ready row"
    );
    ensure!(
        dao.get_by_name(input, "pending")?.is_none(),
        "get_by_name shows a not-ready row"
    );
    ensure!(
        dao.list_by_collection(input)?.is_empty(),
        "list shows a not-ready row"
    );
    let any = dao
        .get_any_by_id(pid)?
        .context("get_any_by_id hides a not-ready row")?;
    ensure!(any.is_ready == Some(false) && any.output_collection_id.is_none());
    ensure!(dao.get_any_by_name(input, "pending")?.map(|r| r.id) == Some(pid));

    let ready = dao.attach(&seed.request("ready"))?.id;
    let listed: Vec<_> = dao
        .list_by_collection(input)?
        .into_iter()
        .map(|r| r.id)
        .collect();
    ensure!(
        listed == vec![ready],
        "list shows exactly the ready row: {listed:?}"
    );
    ensure!(dao.get_by_name(input, "ready")?.map(|r| r.id) == Some(ready));

    dao.detach(ready)?;
    dao.detach(pid)?;
    for id in [ready, pid] {
        ensure!(
            dao.get_by_id(id)?.is_none() && dao.get_any_by_id(id)?.is_none(),
            "detached {id} still visible"
        );
    }
    ensure!(dao.get_any_by_name(input, "ready")?.is_none());
    ensure!(dao.list_by_collection(input)?.is_empty());
    ensure!(
        matches!(dao.detach(ready), Err(DaoError::NotFound { .. })),
        "detaching twice is NotFound"
    );
    Ok(())
}

fn detach_frees_the_name_for_a_new_attach(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let req = seed.request("reused");
    let first = CurrentDao::new(&mut c).attach(&req)?.id;
    CurrentDao::new(&mut c).detach(first)?;
    let renamed: String = c
        .query_one(
            "SELECT name FROM attached_functions WHERE id = $1 AND is_deleted",
            &[&first],
        )?
        .get(0);
    ensure!(
        renamed == format!("{DELETED_PREFIX}reused_{first}"),
        "renamed to {renamed}"
    );
    // The old output collection is the old function's; the new attach needs
    // its own output name (the legacy app's rule too).
    let mut again = req.clone();
    again.output_collection_name = "reused_output_2".into();
    let second = CurrentDao::new(&mut c).attach(&again)?;
    ensure!(
        second.created && second.id != first,
        "a freed name attaches anew: {second:?}"
    );
    let row = CurrentDao::new(&mut c)
        .get_by_name(seed.inputs[0], "reused")?
        .context("visible")?;
    ensure!(row.id == second.id);
    Ok(())
}

fn reserved_and_empty_names_are_refused_and_nothing_is_written(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    for name in ["_deleted_sneaky", ""] {
        let err = CurrentDao::new(&mut c)
            .attach(&seed.request(name))
            .unwrap_err();
        ensure!(
            matches!(err, DaoError::InvalidName { .. }),
            "{name:?}: {err}"
        );
        ensure!(
            err.to_string().contains(&format!("`{name}`")),
            "message names it: {err}"
        );
    }
    let n: i64 = c
        .query_one("SELECT count(*) FROM attached_functions", &[])?
        .get(0);
    ensure!(n == 0, "a refused attach wrote {n} rows");
    Ok(())
}

fn mismatching_attach_names_the_differing_fields(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let req = seed.request("f");
    CurrentDao::new(&mut c).attach(&req)?;
    let mut other = req.clone();
    other.function_id = STATISTICS.parse()?;
    other.function_params = json!({"window": 11});
    match CurrentDao::new(&mut c).attach(&other) {
        Err(DaoError::AlreadyExists { name, differing }) => {
            ensure!(name == "f");
            ensure!(
                differing == ["function_id", "function_params"],
                "differing {differing:?}"
            );
        }
        r => bail!("expected AlreadyExists, got {r:?}"),
    }
    // Against a not-ready row too (a half-finished attach is not reusable
    // by a different request).
    CurrentDao::new(&mut c).insert_not_ready(&seed.request("g"))?;
    let mut other = seed.request("g");
    other.output_collection_name = "elsewhere".into();
    let err = CurrentDao::new(&mut c).attach(&other).unwrap_err();
    ensure!(
        err.to_string().contains("different output_collection_name"),
        "message names the field: {err}"
    );
    Ok(())
}

fn missing_input_collection_or_function_is_not_found(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let mut req = seed.request("x");
    req.input_collection_id = Uuid::new_v4();
    let err = CurrentDao::new(&mut c).attach(&req).unwrap_err();
    ensure!(
        matches!(&err, DaoError::NotFound { what } if what.contains("input collection")),
        "{err}"
    );
    let mut req = seed.request("x");
    req.function_id = Uuid::new_v4();
    let err = CurrentDao::new(&mut c).attach(&req).unwrap_err();
    ensure!(
        matches!(&err, DaoError::NotFound { what } if what.starts_with("function")),
        "{err}"
    );
    ensure!(matches!(
        CurrentDao::new(&mut c).finish(Uuid::new_v4()),
        Err(DaoError::NotFound { .. })
    ));
    Ok(())
}

/// One DAO call, for tables of calls.
type DaoCall<'a> = dyn Fn(&mut CurrentDao) -> Result<(), DaoError> + 'a;

fn no_dao_call_turns_a_ready_row_not_ready(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let req = seed.request("stays");
    let id = CurrentDao::new(&mut c).attach(&req)?.id;
    let mut mismatching = req.clone();
    mismatching.function_params = json!({"other": true});
    let calls: Vec<(&str, Box<DaoCall>)> = vec![
        ("attach", Box::new(|d| d.attach(&req).map(drop))),
        (
            "insert_not_ready",
            Box::new(|d| {
                let p = d.insert_not_ready(&req)?;
                assert!(
                    p.is_ready && !p.attached.created,
                    "phase 1 on a ready row: {p:?}"
                );
                Ok(())
            }),
        ),
        (
            "mismatching attach",
            Box::new(|d| d.attach(&mismatching).map(drop).or(Ok(()))),
        ),
        ("finish", Box::new(move |d| d.finish(id))),
        (
            "update_params",
            Box::new(move |d| d.update_params(id, &json!({"window": 3}))),
        ),
        ("record_run", Box::new(move |d| d.record_run(id, 42))),
        (
            "sweep_stuck",
            Box::new(|d| d.sweep_stuck(Duration::ZERO).map(drop)),
        ),
        ("detach", Box::new(move |d| d.detach(id))),
    ];
    for (what, call) in calls {
        call(&mut CurrentDao::new(&mut c)).with_context(|| format!("calling {what}"))?;
        let (ready, _) = raw_state(&mut c, id)?;
        ensure!(ready, "{what} turned the ready row not ready");
    }
    ensure!(
        raw_state(&mut c, id)? == (true, true),
        "detached, still ready"
    );
    Ok(())
}

fn updates_touch_only_ready_rows_and_offsets_never_go_back(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let mut dao = CurrentDao::new(&mut c);
    let pending = dao.insert_not_ready(&seed.request("p"))?.attached.id;
    ensure!(matches!(
        dao.update_params(pending, &json!({})),
        Err(DaoError::NotFound { .. })
    ));
    ensure!(matches!(
        dao.record_run(pending, 1),
        Err(DaoError::NotFound { .. })
    ));
    let id = dao.attach(&seed.request("r"))?.id;
    dao.record_run(id, 50)?;
    dao.record_run(id, 20)?;
    dao.update_params(id, &json!({"window": 99}))?;
    let row = dao.get_by_id(id)?.context("visible")?;
    ensure!(
        row.completion_offset == 50,
        "offset went back to {}",
        row.completion_offset
    );
    ensure!(row.last_run.is_some() && row.function_params == json!({"window": 99}));
    Ok(())
}

fn backfill_completes_before_the_row_is_ready(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let observer = Mutex::new(db.connect()?);
    let seen = Mutex::new(Vec::new());
    let hook = |_: &mut Client, id: Uuid| -> Result<(), BoxError> {
        // What another client sees while the backfill runs.
        let mut o = observer.lock().unwrap();
        let visible = CurrentDao::new(&mut o).get_by_id(id)?.is_some();
        let ready = CurrentDao::new(&mut o)
            .get_any_by_id(id)?
            .and_then(|r| r.is_ready);
        seen.lock().unwrap().push((visible, ready));
        Ok(())
    };
    let attached = CurrentDao::new(&mut c).attach_with(&seed.request("b"), &hook)?;
    ensure!(
        *seen.lock().unwrap() == [(false, Some(false))],
        "during the backfill the row must be hidden and not ready: {:?}",
        seen.lock().unwrap()
    );
    ensure!(
        CurrentDao::new(&mut c).get_by_id(attached.id)?.is_some(),
        "ready after backfill"
    );
    // A retry of a finished attach does not backfill again.
    CurrentDao::new(&mut c).attach_with(&seed.request("b"), &hook)?;
    ensure!(
        seen.lock().unwrap().len() == 1,
        "backfilled a ready row again"
    );
    Ok(())
}

fn failed_backfill_leaves_the_row_not_ready_and_a_retry_completes(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let req = seed.request("flaky");
    let failing =
        |_: &mut Client, _: Uuid| -> Result<(), BoxError> { Err("input store unavailable".into()) };
    let err = CurrentDao::new(&mut c)
        .attach_with(&req, &failing)
        .unwrap_err();
    let DaoError::Backfill { id, .. } = err else {
        bail!("expected Backfill, got {err}")
    };
    ensure!(err.to_string().contains("input store unavailable"), "{err}");
    ensure!(
        raw_state(&mut c, id)? == (false, false),
        "failed backfill left the row not ready"
    );
    ensure!(
        live_collections_named(&mut c, "flaky_output")? == 0,
        "no output before ready"
    );
    let retry = CurrentDao::new(&mut c).attach(&req)?;
    ensure!(retry.id == id && !retry.created);
    ensure!(raw_state(&mut c, id)? == (true, false));
    Ok(())
}

fn output_collection_of_another_attached_function_is_refused(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 2)?;
    let a = CurrentDao::new(&mut c).attach(&seed.request("shared"))?.id;
    let mut b = seed.request("other");
    b.input_collection_id = seed.inputs[1];
    b.output_collection_name = "shared_output".into();
    match CurrentDao::new(&mut c).attach(&b) {
        Err(DaoError::OutputCollectionInUse { owner, .. }) => ensure!(owner == Some(a)),
        r => bail!("expected OutputCollectionInUse, got {r:?}"),
    }
    ensure!(live_collections_named(&mut c, "shared_output")? == 1);
    ensure!(CurrentDao::new(&mut c)
        .get_by_name(seed.inputs[1], "other")?
        .is_none());
    Ok(())
}

/// Runs `f(i, client)` on `n` threads, each with its own connection,
/// released together.
fn race<T: Send + 'static>(
    db: &rollsafe::sandbox::Database,
    n: usize,
    f: impl Fn(usize, &mut Client) -> T + Send + Sync + 'static,
) -> anyhow::Result<Vec<T>> {
    let clients = connect_many(db, n)?;
    // Every caller's result is asserted on: n callers, n results.
    ensure!(
        clients.len() == n,
        "{} connections for {n} callers",
        clients.len()
    );
    let barrier = Arc::new(Barrier::new(n));
    let f = Arc::new(f);
    let handles: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, mut client)| {
            let (barrier, f) = (Arc::clone(&barrier), Arc::clone(&f));
            thread::spawn(move || {
                barrier.wait();
                f(i, &mut client)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a racing thread panicked"))
        })
        .collect()
}

fn concurrent_identical_attaches_agree_on_one_row(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let req = seed.request("hot");
    let results = race(&db, 64, move |_, client| {
        CurrentDao::new(client).attach(&req)
    })?;
    ensure!(
        results.len() == 64,
        "{} of 64 callers returned",
        results.len()
    );
    let mut ids = BTreeSet::new();
    let mut created = 0;
    for r in results {
        let a = r.context("an identical concurrent attach failed")?;
        ids.insert(a.id);
        created += usize::from(a.created);
    }
    ensure!(ids.len() == 1, "callers got {} different ids", ids.len());
    ensure!(
        created == 1,
        "{created} callers claim to have created the row"
    );
    let rows: i64 = c
        .query_one("SELECT count(*) FROM attached_functions", &[])?
        .get(0);
    ensure!(rows == 1, "{rows} rows");
    ensure!(
        live_collections_named(&mut c, "hot_output")? == 1,
        "output collections != 1"
    );
    let id = *ids.first().unwrap();
    ensure!(raw_state(&mut c, id)? == (true, false));
    Ok(())
}

fn concurrent_conflicting_attaches_have_one_winner(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let base = seed.request("contested");
    let results = race(&db, 64, move |i, client| {
        let mut req = base.clone();
        req.function_id = if i % 2 == 0 {
            RECORD_COUNTER
        } else {
            STATISTICS
        }
        .parse()
        .unwrap();
        req.function_params = json!({ "caller": i });
        CurrentDao::new(client).attach(&req)
    })?;
    ensure!(
        results.len() == 64,
        "{} of 64 callers returned",
        results.len()
    );
    let mut winners = Vec::new();
    for r in results {
        match r {
            Ok(a) => winners.push(a),
            Err(DaoError::AlreadyExists { differing, .. }) => {
                ensure!(
                    differing.contains(&"function_params"),
                    "differing {differing:?}"
                )
            }
            Err(e) => bail!("unexpected error: {e}"),
        }
    }
    ensure!(
        winners.len() == 1 && winners[0].created,
        "winners: {winners:?}"
    );
    ensure!(live_collections_named(&mut c, "contested_output")? == 1);
    let rows: i64 = c
        .query_one("SELECT count(*) FROM attached_functions", &[])?
        .get(0);
    ensure!(rows == 1, "{rows} rows");
    Ok(())
}

fn concurrent_finishes_create_one_output_collection(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let id = CurrentDao::new(&mut c)
        .insert_not_ready(&seed.request("fin"))?
        .attached
        .id;
    let results = race(&db, 16, move |_, client| CurrentDao::new(client).finish(id))?;
    ensure!(
        results.len() == 16,
        "{} of 16 callers returned",
        results.len()
    );
    for r in results {
        r.context("a concurrent finish failed")?;
    }
    ensure!(live_collections_named(&mut c, "fin_output")? == 1);
    ensure!(raw_state(&mut c, id)? == (true, false));
    Ok(())
}

/// After a crash between the phases: hidden from readers, and a retry of
/// the same request completes it with one output collection.
fn retry_completes(c: &mut Client, req: &AttachRequest, id: Uuid) -> anyhow::Result<()> {
    let mut dao = CurrentDao::new(c);
    ensure!(
        dao.get_by_id(id)?.is_none(),
        "a half-finished attach is visible"
    );
    ensure!(dao
        .get_by_name(req.input_collection_id, &req.name)?
        .is_none());
    ensure!(dao.get_any_by_id(id)?.and_then(|r| r.is_ready) == Some(false));
    let retry = dao.attach(req)?;
    ensure!(
        retry.id == id && !retry.created,
        "retry got {retry:?}, expected {id}"
    );
    ensure!(dao.get_by_id(id)?.is_some(), "retry completed the attach");
    ensure!(live_collections_named(c, &req.output_collection_name)? == 1);
    Ok(())
}

fn crash_after_phase_1_dropped_connection_then_retry_completes(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let req = seed.request("dropped");
    let id = {
        let mut doomed = db.connect()?;
        let id = CurrentDao::new(&mut doomed)
            .insert_not_ready(&req)?
            .attached
            .id;
        drop(doomed);
        id
    };
    retry_completes(&mut c, &req, id)
}

const CHILD_ENV: &str = "ROLLSAFE_TEST_DAO_CHILD";

/// What the re-executed suite binary is asked to do.
#[derive(Serialize, Deserialize)]
struct ChildSpec {
    url: String,
    request: AttachRequest,
}

/// Called first thing in `main`: when this process is the crash child, run
/// an attach whose backfill announces the id and then hangs until killed.
pub fn run_child_if_requested() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let result = (|| -> anyhow::Result<()> {
        let spec: ChildSpec = serde_json::from_str(&spec)?;
        let mut client = rollsafe::db::connect(&spec.url)?;
        let hang = |_: &mut Client, id: Uuid| -> Result<(), BoxError> {
            let mut out = std::io::stdout().lock();
            writeln!(out, "phase1 {id}")?;
            out.flush()?;
            loop {
                thread::sleep(Duration::from_secs(3600));
            }
        };
        CurrentDao::new(&mut client).attach_with(&spec.request, &hang)?;
        Ok(())
    })();
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("dao crash child: {e:#}");
            std::process::exit(3)
        }
    }
}

fn crash_in_backfill_killed_process_then_retry_completes(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let req = seed.request("killed");
    let spec = serde_json::to_string(&ChildSpec {
        url: db.url().to_string(),
        request: req.clone(),
    })?;
    let mut child = Command::new(std::env::current_exe()?)
        .env(CHILD_ENV, spec)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("re-executing the suite binary as the crash child")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("child stdout")?).read_line(&mut line)?;
    let Some(id) = line.trim().strip_prefix("phase1 ") else {
        let _ = child.kill();
        let out = child.wait_with_output()?;
        bail!(
            "child did not reach the backfill: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let id: Uuid = id.parse()?;
    child.kill().context("SIGKILL to the child")?;
    let status = child.wait()?;
    ensure!(
        !status.success(),
        "the child was killed, yet exited {status}"
    );
    retry_completes(&mut c, &req, id)
}

fn crash_after_output_collection_created_retry_reuses_it(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let req = seed.request("half");
    let id = CurrentDao::new(&mut c).insert_not_ready(&req)?.attached.id;
    // What an earlier finish left behind when it died after creating the
    // output collection and before marking the row ready (e.g. where the
    // collection is created by another service, outside the transaction).
    let orphan = Uuid::new_v4();
    c.execute(
        "INSERT INTO collections (id, name, tenant_id, database_id) VALUES ($1, $2, $3, $4)",
        &[
            &orphan,
            &req.output_collection_name,
            &req.tenant_id,
            &req.database_id,
        ],
    )?;
    retry_completes(&mut c, &req, id)?;
    let row = CurrentDao::new(&mut c).get_by_id(id)?.context("ready")?;
    ensure!(
        row.output_collection_id == Some(orphan),
        "the retry did not reuse the collection"
    );
    Ok(())
}

fn sweep_stuck_retires_only_old_not_ready_rows(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let mut dao = CurrentDao::new(&mut c);
    let ready_old = dao.attach(&seed.request("ready_old"))?.id;
    let stuck_old = dao
        .insert_not_ready(&seed.request("stuck_old"))?
        .attached
        .id;
    let stuck_new = dao
        .insert_not_ready(&seed.request("stuck_new"))?
        .attached
        .id;
    c.execute(
        "UPDATE attached_functions SET created_at = now() - interval '1 hour' WHERE id = ANY($1)",
        &[&vec![ready_old, stuck_old]],
    )?;
    let swept = CurrentDao::new(&mut c).sweep_stuck(Duration::from_secs(600))?;
    ensure!(
        swept == vec![stuck_old],
        "swept {swept:?}, expected only {stuck_old}"
    );
    ensure!(
        raw_state(&mut c, stuck_old)? == (false, true),
        "the stuck row is retired"
    );
    ensure!(
        raw_state(&mut c, ready_old)? == (true, false),
        "an old ready row is untouched"
    );
    ensure!(
        raw_state(&mut c, stuck_new)? == (false, false),
        "a young not-ready row is untouched"
    );
    // The swept name is free again.
    let again = CurrentDao::new(&mut c).attach(&seed.request("stuck_old"))?;
    ensure!(again.created && again.id != stuck_old);
    ensure!(CurrentDao::new(&mut c)
        .sweep_stuck(Duration::from_secs(600))?
        .is_empty());
    Ok(())
}

fn legacy_rows_are_visible_to_current_readers(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let id = LegacyDao::new(&mut c).create(&seed.request("old_app"))?;
    let row = CurrentDao::new(&mut c)
        .get_by_id(id)?
        .context("current readers must see legacy rows")?;
    ensure!(row.is_ready == Some(true) && row.output_collection_id.is_some());
    ensure!(
        CurrentDao::new(&mut c)
            .list_by_collection(seed.inputs[0])?
            .len()
            == 1
    );
    // The current app reuses the legacy row for an identical request.
    let again = CurrentDao::new(&mut c).attach(&seed.request("old_app"))?;
    ensure!(again.id == id && !again.created);
    ensure!(live_collections_named(&mut c, "old_app_output")? == 1);
    Ok(())
}

fn legacy_rows_from_before_v3_are_ready_after_v3(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(2);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let id = LegacyDao::new(&mut c).create(&seed.request("before_v3"))?;
    // V3 applied the way a DBA applies it: the real migrator.
    let catalog = rollsafe::catalog::Catalog::embedded()?;
    rollsafe::migrate::migrate(db.url(), &catalog, &rollsafe::migrate::Options::default())?;
    let row = CurrentDao::new(&mut c)
        .get_by_id(id)?
        .context("a pre-V3 row is invisible after V3")?;
    ensure!(row.is_ready == Some(true));
    ensure!(
        LegacyDao::new(&mut c).get_by_id(id)?.is_some(),
        "legacy app keeps working on V3"
    );
    Ok(())
}

fn not_ready_rows_are_hidden_from_current_readers_but_seen_by_legacy(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let id = CurrentDao::new(&mut c)
        .insert_not_ready(&seed.request("half"))?
        .attached
        .id;
    ensure!(CurrentDao::new(&mut c).get_by_id(id)?.is_none());
    // The known rollout caveat (the verifier's warn): the legacy app cannot
    // tell a half-built row from a complete one.
    let seen = LegacyDao::new(&mut c)
        .get_by_id(id)?
        .context("legacy readers see not-ready rows")?;
    ensure!(seen.is_ready.is_none() && seen.output_collection_id.is_none());
    ensure!(
        LegacyDao::new(&mut c)
            .list_by_collection(seed.inputs[0])?
            .len()
            == 1
    );
    ensure!(LegacyDao::new(&mut c)
        .get_by_name(seed.inputs[0], "half")?
        .is_some());
    Ok(())
}

fn legacy_create_refuses_a_taken_name_and_reserved_names(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut c = db.connect()?;
    let seed = seed(&mut c, 1)?;
    let mut dao = LegacyDao::new(&mut c);
    let id = dao.create(&seed.request("l"))?;
    let mut other = seed.request("l");
    other.output_collection_name = "l_output_2".into();
    ensure!(matches!(
        dao.create(&other),
        Err(DaoError::AlreadyExists { .. })
    ));
    ensure!(matches!(
        dao.create(&seed.request("_deleted_l")),
        Err(DaoError::InvalidName { .. })
    ));
    dao.detach(id)?;
    ensure!(dao.get_by_id(id)?.is_none());
    dao.create(&other)?;
    // The failed create rolled back its output collection.
    ensure!(live_collections_named(&mut c, "l_output_2")? == 1);
    Ok(())
}

/// What the verifier does with the statement files, done here so that a
/// statement or a `-- param:` line that cannot run fails at home: each
/// statement prepared and executed in a rolled-back transaction on a seeded
/// database, declared parameters from their expressions, the others
/// generated from the type PREPARE reports.
fn statement_sets_execute_on_every_schema_version_in_their_window(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use rollsafe::dao::{current_statements, legacy_statements};
    for (set, schema) in [
        (legacy_statements(), 2),
        (legacy_statements(), 3),
        (current_statements(), 3),
    ] {
        let db = env.migrated_database(schema);
        let mut c = db.connect()?;
        let seed = seed(&mut c, 2)?;
        LegacyDao::new(&mut c).create(&seed.request("legacy_row"))?;
        if schema >= 3 {
            CurrentDao::new(&mut c).attach(&seed.request("ready_row"))?;
            CurrentDao::new(&mut c).insert_not_ready(&seed.request("pending_row"))?;
        }
        ensure!(
            !set.statements().is_empty(),
            "{} holds no statement to replay",
            set.source
        );
        for s in set.statements() {
            replay(&mut c, s)
                .with_context(|| format!("{} `{}` on V{schema}", set.source, s.name))?;
        }
    }
    Ok(())
}

fn replay(c: &mut Client, s: &rollsafe::app::statements::Statement) -> anyhow::Result<()> {
    let declared: std::collections::HashMap<&str, &str> = s
        .meta_values("param")
        .filter_map(|v| v.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let mut tx = c.transaction()?;
    let types = tx.prepare(&s.sql).context("PREPARE")?.params().to_vec();
    let mut args = Vec::new();
    for (i, ty) in types.iter().enumerate() {
        let arg = match declared.get(format!("${}", i + 1).as_str()) {
            // EXECUTE refuses subqueries as arguments: evaluate first.
            Some(expr) => {
                let value: Option<String> = tx
                    .query_one(&format!("SELECT ({expr})::text"), &[])
                    .with_context(|| format!("evaluating ${} = {expr}", i + 1))?
                    .get(0);
                let value = value.with_context(|| {
                    format!("${} = {expr} is NULL on the seeded database", i + 1)
                })?;
                format!("'{}'::{}", value.replace('\'', "''"), ty.name())
            }
            None => match ty.name() {
                "uuid" => "gen_random_uuid()".to_string(),
                "text" => "'replay_' || md5(random()::text)".to_string(),
                "jsonb" => "'{}'::jsonb".to_string(),
                "int8" | "int4" => "1".to_string(),
                "float8" => "3600".to_string(),
                "bool" => "true".to_string(),
                other => bail!("no generator for parameter type {other}"),
            },
        };
        args.push(arg);
    }
    tx.batch_execute(&format!("PREPARE replayed AS {}", s.sql))?;
    let execute = if args.is_empty() {
        "EXECUTE replayed".to_string()
    } else {
        format!("EXECUTE replayed({})", args.join(", "))
    };
    tx.batch_execute(&execute)
        .with_context(|| execute.clone())?;
    tx.rollback()?;
    // PREPARE is not transactional: the rollback keeps it.
    c.batch_execute("DEALLOCATE replayed")?;
    Ok(())
}

mod property {
    //! Random sequences of DAO calls over a small name space, run by several
    //! threads at once; the invariants are checked while and after they run.

    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    #[derive(Debug, Clone)]
    pub enum Op {
        Attach {
            input: usize,
            name: usize,
            function: usize,
            output: usize,
        },
        /// Phase 1 only: an attach whose process died before phase 2.
        Crash {
            input: usize,
            name: usize,
            function: usize,
            output: usize,
        },
        Finish {
            input: usize,
            name: usize,
        },
        Detach {
            input: usize,
            name: usize,
        },
        Sweep,
        RecordRun {
            input: usize,
            name: usize,
            offset: i64,
        },
        UpdateParams {
            input: usize,
            name: usize,
            v: i64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..2usize, 0..3usize, 0..2usize, 0..2usize)
                .prop_map(|(input, name, function, output)| Op::Attach { input, name, function, output }),
            1 => (0..2usize, 0..3usize, 0..2usize, 0..2usize)
                .prop_map(|(input, name, function, output)| Op::Crash { input, name, function, output }),
            2 => (0..2usize, 0..3usize).prop_map(|(input, name)| Op::Finish { input, name }),
            2 => (0..2usize, 0..3usize).prop_map(|(input, name)| Op::Detach { input, name }),
            1 => Just(Op::Sweep),
            1 => (0..2usize, 0..3usize, 0..100i64)
                .prop_map(|(input, name, offset)| Op::RecordRun { input, name, offset }),
            1 => (0..2usize, 0..3usize, 0..3i64)
                .prop_map(|(input, name, v)| Op::UpdateParams { input, name, v }),
        ]
    }

    pub const WORKERS: usize = 3;

    pub fn run(env: &TestEnv) -> anyhow::Result<()> {
        let mut runner = TestRunner::new(Config {
            cases: 16,
            failure_persistence: None,
            ..Config::default()
        });
        let strategy = prop::collection::vec(prop::collection::vec(op(), 1..10), WORKERS);
        // The invariants about ready rows hold vacuously in a case where
        // none became ready: the run must have seen some.
        let ready_seen = std::sync::atomic::AtomicUsize::new(0);
        runner
            .run(&strategy, |plans| {
                let seen =
                    one_case(env, plans).map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
                ready_seen.fetch_add(seen, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let ready_seen = ready_seen.into_inner();
        ensure!(
            ready_seen > 0,
            "no case made a row ready: the ready-row invariants were not exercised"
        );
        Ok(())
    }

    fn request(
        seed: &Seed,
        input: usize,
        name: usize,
        function: usize,
        output: usize,
    ) -> AttachRequest {
        AttachRequest {
            name: format!("n{name}"),
            tenant_id: seed.tenant_id.clone(),
            database_id: seed.database_id,
            input_collection_id: seed.inputs[input],
            output_collection_name: format!("out{name}_{output}"),
            function_id: [RECORD_COUNTER, STATISTICS][function].parse().unwrap(),
            function_params: json!({}),
            min_records_for_invocation: 100,
        }
    }

    fn apply(dao: &mut CurrentDao, seed: &Seed, op: &Op) -> Result<(), DaoError> {
        let id_of = |dao: &mut CurrentDao, input: usize, name: usize| {
            dao.get_any_by_name(seed.inputs[input], &format!("n{name}"))
        };
        match *op {
            Op::Attach {
                input,
                name,
                function,
                output,
            } => dao
                .attach(&request(seed, input, name, function, output))
                .map(drop),
            Op::Crash {
                input,
                name,
                function,
                output,
            } => dao
                .insert_not_ready(&request(seed, input, name, function, output))
                .map(drop),
            Op::Finish { input, name } => match id_of(dao, input, name)? {
                Some(row) => dao.finish(row.id),
                None => Ok(()),
            },
            Op::Detach { input, name } => match id_of(dao, input, name)? {
                Some(row) => dao.detach(row.id),
                None => Ok(()),
            },
            Op::Sweep => dao.sweep_stuck(Duration::ZERO).map(drop),
            Op::RecordRun {
                input,
                name,
                offset,
            } => match id_of(dao, input, name)? {
                Some(row) => dao.record_run(row.id, offset),
                None => Ok(()),
            },
            Op::UpdateParams { input, name, v } => match id_of(dao, input, name)? {
                Some(row) => dao.update_params(row.id, &json!({ "v": v })),
                None => Ok(()),
            },
        }
    }

    fn ready_ids(c: &mut Client) -> anyhow::Result<Vec<Uuid>> {
        Ok(
            c.query("SELECT id FROM attached_functions WHERE is_ready", &[])?
                .iter()
                .map(|r| r.get(0))
                .collect(),
        )
    }

    /// Runs one case's plans concurrently and checks the invariants;
    /// returns how many rows were ever seen ready.
    fn one_case(env: &TestEnv, plans: Vec<Vec<Op>>) -> anyhow::Result<usize> {
        let db = env.migrated_database(3);
        let mut c = db.connect()?;
        let seed = Arc::new(seed(&mut c, 2)?);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // An observer collects every id it ever sees ready.
        let observer = {
            let (done, mut oc) = (Arc::clone(&done), db.connect()?);
            thread::spawn(move || -> anyhow::Result<BTreeSet<Uuid>> {
                let mut seen = BTreeSet::new();
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    seen.extend(ready_ids(&mut oc)?);
                    // Leave the two cores to the workers most of the time.
                    thread::sleep(Duration::from_millis(2));
                }
                seen.extend(ready_ids(&mut oc)?);
                Ok(seen)
            })
        };
        let barrier = Arc::new(Barrier::new(plans.len()));
        let workers: Vec<_> = plans
            .into_iter()
            .map(|plan| {
                let (seed, barrier) = (Arc::clone(&seed), Arc::clone(&barrier));
                let mut client = db.connect()?;
                Ok(thread::spawn(move || -> anyhow::Result<()> {
                    barrier.wait();
                    for op in &plan {
                        match apply(&mut CurrentDao::new(&mut client), &seed, op) {
                            Ok(())
                            | Err(DaoError::NotFound { .. })
                            | Err(DaoError::AlreadyExists { .. })
                            | Err(DaoError::OutputCollectionInUse { .. }) => {}
                            Err(e) => bail!("{op:?}: {e}"),
                        }
                    }
                    Ok(())
                }))
            })
            .collect::<anyhow::Result<_>>()?;
        let mut failures = Vec::new();
        for w in workers {
            if let Err(e) = w.join().map_err(|_| anyhow::anyhow!("worker panicked"))? {
                failures.push(format!("{e:#}"));
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = observer
            .join()
            .map_err(|_| anyhow::anyhow!("observer panicked"))??;
        ensure!(failures.is_empty(), "unexpected DAO errors: {failures:?}");

        // A ready row never becomes not ready (detached rows keep is_ready).
        let seen: Vec<Uuid> = seen.into_iter().collect();
        let reverted: i64 = c
            .query_one(
                "SELECT count(*) FROM attached_functions WHERE id = ANY($1) AND NOT is_ready",
                &[&seen],
            )?
            .get(0);
        ensure!(
            reverted == 0,
            "{reverted} rows went from ready back to not ready"
        );
        // No two live rows share (input collection, name).
        let dup: i64 = c
            .query_one(
                "SELECT count(*) FROM (SELECT 1 FROM attached_functions WHERE NOT is_deleted
                  GROUP BY input_collection_id, name HAVING count(*) > 1) d",
                &[],
            )?
            .get(0);
        ensure!(dup == 0, "{dup} (input, name) pairs have several live rows");
        // Every ready row has its output collection; live ones a live one,
        // and no two live rows write into the same collection.
        let orphaned: i64 = c
            .query_one(
                "SELECT count(*) FROM attached_functions af
                   LEFT JOIN collections c ON c.id = af.output_collection_id
                  WHERE af.is_ready AND (c.id IS NULL OR (NOT af.is_deleted AND c.is_deleted))",
                &[],
            )?
            .get(0);
        ensure!(
            orphaned == 0,
            "{orphaned} ready rows lack their output collection"
        );
        let shared: i64 = c
            .query_one(
                "SELECT count(*) FROM (SELECT 1 FROM attached_functions WHERE NOT is_deleted
                  AND output_collection_id IS NOT NULL
                  GROUP BY output_collection_id HAVING count(*) > 1) s",
                &[],
            )?
            .get(0);
        ensure!(
            shared == 0,
            "{shared} output collections are shared by live rows"
        );
        Ok(seen.len())
    }
}

fn property_invariants_hold_under_concurrent_random_calls(env: &TestEnv) -> anyhow::Result<()> {
    property::run(env)
}

//! Migrations that do not run in one transaction, against real PostgreSQL:
//! `-- rollsafe:no-transaction` files (CREATE INDEX CONCURRENTLY while the
//! app writes, an interrupted build rebuilt, re-runnability refused up
//! front, dollar-quoted bodies, concurrent migrators) and
//! `-- rollsafe:batched-update` backfills (killed at random points and
//! resumed, incomplete ones not recorded).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use postgres::Client;
use rand::Rng;
use rollsafe::catalog::Catalog;
use rollsafe::migrate::backfill::BackfillOptions;
use rollsafe::migrate::{self, MigrateError, Options};
use rollsafe::verify::checks::locks::STALL_BUDGET;

use crate::common::{cli, history, repo_root, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    crate::trials!(
        "no_transaction",
        env,
        [
            cic_applies_on_a_populated_table_while_a_writer_runs,
            failed_cic_leaves_an_invalid_index_and_the_rerun_rebuilds_it,
            cic_killed_mid_build_is_rebuilt_by_the_rerun,
            ten_kills_during_a_200k_row_batched_backfill_converge,
            non_rerunnable_file_is_refused_before_anything_runs,
            concurrently_in_a_transactional_file_names_the_directive,
            dollar_quoted_function_body_with_semicolons_is_one_statement,
            eight_concurrent_migrators_on_a_no_transaction_migration,
            backfill_leaving_matching_rows_is_not_recorded_and_status_shows_it,
            readme_example_backfills_output_collection_id_then_validates,
            rehearsal_applies_a_no_transaction_file_statement_by_statement,
            partitioned_index_pattern_passes_and_migrates_to_a_valid_index,
            seeded_rows_are_carried_past_a_no_transaction_file,
            a_files_own_transaction_runs_as_written_and_its_failure_is_named,
        ]
    )
}

// ---------------------------------------------------------------- helpers

const ITEMS: &str = "CREATE TABLE items (id bigint PRIMARY KEY, a int NOT NULL, b int);";

fn write_dir(files: &[(&str, &str)]) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (name, sql) in files {
        std::fs::write(dir.path().join(name), sql)?;
    }
    Ok(dir)
}

fn catalog(dir: &Path) -> anyhow::Result<Catalog> {
    Catalog::from_dir(dir).context("loading the test migrations")
}

fn to(target: i32) -> Options {
    Options {
        target: Some(target),
        ..Default::default()
    }
}

fn seed_items(c: &mut Client, n: i64, a_mod: i64) -> anyhow::Result<()> {
    c.execute(
        "INSERT INTO items (id, a) SELECT g, (g % $2::bigint)::int FROM generate_series(1::bigint, $1::bigint) g",
        &[&n, &a_mod],
    )?;
    c.batch_execute("ANALYZE items")?;
    Ok(())
}

/// (exists, valid) of an index.
fn index_state(c: &mut Client, name: &str) -> anyhow::Result<(bool, bool)> {
    let row = c.query_opt(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)",
        &[&name],
    )?;
    Ok(row.map_or((false, false), |r| (true, r.get(0))))
}

/// `rollsafe check --format json` on `url` against `dir`; the finding
/// `id` (e.g. `invariants.invalid-index`), which must exist.
fn check_finding(
    env: &TestEnv,
    url: &str,
    dir: &Path,
    id: &str,
) -> anyhow::Result<serde_json::Value> {
    let out = cli()
        .args([
            "check",
            "--database-url",
            url,
            "--format",
            "json",
            "--postgres",
        ])
        .arg(env.sandbox.admin_url())
        .arg("--migrations")
        .arg(dir)
        .output()?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "check printed no JSON report: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    report["findings"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["id"] == id))
        .cloned()
        .with_context(|| format!("no finding {id} in {report:#}"))
}

// ---------------------------------------------------------------- tests

fn cic_applies_on_a_populated_table_while_a_writer_runs(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let dir = write_dir(&[
        ("V1__items.sql", ITEMS),
        (
            "V2__items_a_index.sql",
            "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS items_a ON items (a);\n",
        ),
    ])?;
    let cat = catalog(dir.path())?;
    migrate::migrate(db.url(), &cat, &to(1))?;
    let rows = 300_000;
    seed_items(&mut db.connect()?, rows, 997)?;

    // The app: one insert at a time, each timed from the writer's side.
    let stop = Arc::new(AtomicBool::new(false));
    let url = db.url().to_string();
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || -> anyhow::Result<Vec<(Instant, Duration)>> {
            let mut c = rollsafe::db::connect(&url)?;
            let mut waits = Vec::new();
            let mut id = rows + 1;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                c.execute("INSERT INTO items (id, a) VALUES ($1, 1)", &[&id])?;
                waits.push((t, t.elapsed()));
                id += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(waits)
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let out = migrate::migrate(db.url(), &cat, &Options::default())?;
    let ended = Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let waits = writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;

    ensure!(
        out.applied.iter().map(|a| a.version).collect::<Vec<_>>() == [2],
        "applied {:?}",
        out.applied.iter().map(|a| a.version).collect::<Vec<_>>()
    );
    let mut c = db.connect()?;
    ensure!(
        index_state(&mut c, "items_a")? == (true, true),
        "items_a is not a valid index"
    );
    ensure!(history(&mut c)? == [1, 2], "history {:?}", history(&mut c)?);
    let during: Vec<Duration> = waits
        .iter()
        .filter(|(t, _)| *t >= started && *t <= ended)
        .map(|(_, d)| *d)
        .collect();
    ensure!(
        !during.is_empty(),
        "the writer made no insert while the index was built ({:?})",
        ended - started
    );
    let longest = waits.iter().map(|(_, d)| *d).max().unwrap_or_default();
    ensure!(
        longest <= STALL_BUDGET,
        "the writer waited {longest:?} (> stall budget {STALL_BUDGET:?}) while CREATE INDEX CONCURRENTLY ran"
    );
    eprintln!(
        "no_transaction: CIC on {rows} rows took {:?}; the writer made {} inserts meanwhile, longest {longest:?}",
        ended - started,
        during.len()
    );
    Ok(())
}

fn failed_cic_leaves_an_invalid_index_and_the_rerun_rebuilds_it(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let dir = write_dir(&[
        ("V1__items.sql", ITEMS),
        (
            "V2__items_a_unique.sql",
            "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS items_b ON items (b);\nCREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS items_a_unique ON items (a);\n",
        ),
    ])?;
    let cat = catalog(dir.path())?;
    migrate::migrate(db.url(), &cat, &to(1))?;
    let mut c = db.connect()?;
    // Every value of `a` twice: the unique build fails at its end.
    seed_items(&mut c, 20_000, 10_000)?;

    let err = migrate::migrate(db.url(), &cat, &Options::default()).unwrap_err();
    ensure!(
        matches!(&err, MigrateError::StatementFailed { line: 3, .. }) && err.exit_code() == 1,
        "{err}"
    );
    let msg = err.to_string();
    ensure!(
        msg.contains("items_a_unique") && msg.contains("run `rollsafe migrate` again"),
        "{msg}"
    );
    ensure!(
        index_state(&mut c, "items_a_unique")? == (true, false),
        "the failed build left no invalid index"
    );
    ensure!(
        index_state(&mut c, "items_b")? == (true, true),
        "the first statement should stay applied"
    );
    ensure!(history(&mut c)? == [1], "V2 must not be recorded");
    let f = check_finding(env, db.url(), dir.path(), "invariants.invalid-index")?;
    let advice = f["advice"].as_str().unwrap_or_default();
    ensure!(
        advice.contains("run `rollsafe migrate`") && advice.contains("V2__items_a_unique.sql"),
        "{f:#}"
    );

    // The cause fixed (not the file): the rerun drops the invalid index
    // and builds it again; items_b's IF NOT EXISTS keeps it.
    c.execute("DELETE FROM items WHERE id > 10000", &[])?;
    rerun_rebuilds(&mut c, db.url(), &cat, "items_a_unique")?;
    let copies: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'items_a_unique%'",
            &[],
        )?
        .get(0);
    ensure!(copies == 1, "{copies} indexes named items_a_unique*");
    // The row reads as refinery's own: same checksum, RFC 3339 time.
    let (name, checksum, applied_on): (String, String, String) = {
        let r = c.query_one(
            "SELECT name, checksum, applied_on FROM refinery_schema_history WHERE version = 2",
            &[],
        )?;
        (r.get(0), r.get(1), r.get(2))
    };
    let m = cat.get(2).context("V2")?;
    ensure!(
        name == m.name && checksum == m.to_refinery().checksum().to_string(),
        "{name} {checksum}"
    );
    ensure!(
        chrono::DateTime::parse_from_rfc3339(&applied_on).is_ok(),
        "applied_on {applied_on}"
    );
    let status = migrate::status(db.url(), &cat)?;
    ensure!(
        status.drift().next().is_none() && status.pending().next().is_none(),
        "status after rerun: {status:?}"
    );
    Ok(())
}

fn cic_killed_mid_build_is_rebuilt_by_the_rerun(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let dir = write_dir(&[
        ("V1__items.sql", ITEMS),
        (
            "V2__items_a_b_index.sql",
            "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS items_a_b ON items (a, b, id);\n",
        ),
    ])?;
    let cat = catalog(dir.path())?;
    migrate::migrate(db.url(), &cat, &to(1))?;
    let mut c = db.connect()?;
    seed_items(&mut c, 300_000, 7919)?;
    let url = db.url().to_string();
    let cat2 = cat.clone();
    let run = std::thread::spawn(move || migrate::migrate(&url, &cat2, &Options::default()));
    // Terminate the migrator's backend while it builds the index.
    let start = Instant::now();
    let mut killed = false;
    while start.elapsed() < Duration::from_secs(20) && !run.is_finished() {
        let building: Option<i32> = c
            .query_opt(
                "SELECT pid FROM pg_stat_progress_create_index \
                  WHERE datname = current_database() AND phase LIKE 'building index%'",
                &[],
            )?
            .map(|r| r.get(0));
        if let Some(pid) = building {
            killed = c
                .query_one("SELECT pg_terminate_backend($1)", &[&pid])?
                .get(0);
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let result = run
        .join()
        .map_err(|_| anyhow::anyhow!("migrator panicked"))?;
    ensure!(
        killed,
        "the build finished before it could be killed ({result:?})"
    );
    ensure!(result.is_err(), "the killed run reported success");
    ensure!(
        index_state(&mut c, "items_a_b")? == (true, false),
        "the killed build left no invalid index"
    );
    ensure!(history(&mut c)? == [1], "V2 recorded by the killed run");

    rerun_rebuilds(&mut c, db.url(), &cat, "items_a_b")
}

/// Reruns the migrator after a failed or killed CREATE INDEX CONCURRENTLY
/// of V2: it applies V2 alone, `index` is valid, and V2 is recorded once.
fn rerun_rebuilds(c: &mut Client, url: &str, cat: &Catalog, index: &str) -> anyhow::Result<()> {
    let out = migrate::migrate(url, cat, &Options::default())?;
    ensure!(
        out.applied.len() == 1 && out.applied[0].version == 2,
        "rerun applied {}",
        out.applied.len()
    );
    ensure!(
        index_state(c, index)? == (true, true),
        "the rerun did not rebuild a valid index {index}"
    );
    let v2_rows: i64 = c
        .query_one(
            "SELECT count(*) FROM refinery_schema_history WHERE version = 2",
            &[],
        )?
        .get(0);
    ensure!(v2_rows == 1, "V2 recorded {v2_rows} times");
    Ok(())
}

/// The pid of the backend holding the migrator's advisory lock, once one
/// does (bounded wait).
fn migrator_pid(c: &mut Client, within: Duration) -> anyhow::Result<Option<i32>> {
    let start = Instant::now();
    while start.elapsed() < within {
        let row = c.query_opt(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND classid::bigint = ($1::bigint >> 32) AND objid::bigint = ($1::bigint & 4294967295)",
            &[&migrate::ADVISORY_LOCK_KEY],
        )?;
        if let Some(r) = row {
            return Ok(Some(r.get(0)));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(None)
}

/// Waits (bounded) until backend `pid` runs a backfill batch.
fn wait_for_batches(c: &mut Client, pid: i32, within: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    while start.elapsed() < within {
        let batching: bool = c
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND query LIKE 'WITH batch AS%')",
                &[&pid],
            )?
            .get(0);
        if batching {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn ten_kills_during_a_200k_row_batched_backfill_converge(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let dir = write_dir(&[
        ("V1__items.sql", ITEMS),
        (
            "V2__items_b_backfill.sql",
            "ALTER TABLE items ADD COLUMN IF NOT EXISTS c int;\n\
             -- rollsafe:batched-update items SET b = a * 2 WHERE b IS NULL\n",
        ),
    ])?;
    let cat = catalog(dir.path())?;
    migrate::migrate(db.url(), &cat, &to(1))?;
    let rows: i64 = 200_000;
    let mut c = db.connect()?;
    seed_items(&mut c, rows, 1_000_003)?;
    let options = Options {
        backfill: BackfillOptions {
            batch_size: 1000,
            pause: Duration::from_millis(2),
        },
        ..Default::default()
    };

    let mut rng = rand::rng();
    let (mut landed, mut partial_seen) = (0, 0);
    for round in 0..10 {
        let url = db.url().to_string();
        let (cat2, opts2) = (cat.clone(), options.clone());
        let run = std::thread::spawn(move || migrate::migrate(&url, &cat2, &opts2));
        // Even rounds: at a random point of the backfill itself; odd
        // rounds: at a random point from the lock on (schema part included).
        let delay = Duration::from_millis(rng.random_range(0..300));
        if let Some(pid) = migrator_pid(&mut c, Duration::from_secs(10))? {
            if round % 2 == 0 {
                wait_for_batches(&mut c, pid, Duration::from_secs(10))?;
            }
            std::thread::sleep(delay);
            c.execute("SELECT pg_terminate_backend($1)", &[&pid])?;
        }
        let result = run
            .join()
            .map_err(|_| anyhow::anyhow!("migrator panicked"))?;
        if result.is_err() {
            landed += 1;
        }
        let status = migrate::status(db.url(), &cat)?;
        let applied = history(&mut c)?.contains(&2);
        let unfinished = status.unfinished_backfills().next().cloned();
        if let Some(b) = unfinished {
            ensure!(
                !applied,
                "round {round}: V2 recorded while its backfill is unfinished"
            );
            if b.rows_done > 0 && b.rows_done < rows {
                partial_seen += 1;
                ensure!(
                    status.pending().any(|v| v.version == 2),
                    "round {round}: V2 should be pending while its backfill is unfinished"
                );
            }
        }
    }
    ensure!(landed > 0, "no kill landed while the migrator ran");
    ensure!(
        partial_seen > 0,
        "no kill left a partly done backfill to resume"
    );

    migrate::migrate(db.url(), &cat, &options)?;
    let wrong: i64 = c
        .query_one(
            "SELECT count(*) FROM items WHERE b IS DISTINCT FROM a * 2",
            &[],
        )?
        .get(0);
    ensure!(wrong == 0, "{wrong} rows do not satisfy the backfill");
    let v2_rows: i64 = c
        .query_one(
            "SELECT count(*) FROM refinery_schema_history WHERE version = 2",
            &[],
        )?
        .get(0);
    ensure!(v2_rows == 1, "V2 recorded {v2_rows} times");
    let (done, finished): (i64, bool) = {
        let r = c.query_one(
            "SELECT rows_done, finished_at IS NOT NULL FROM rollsafe_backfill_progress WHERE version = 2",
            &[],
        )?;
        (r.get(0), r.get(1))
    };
    // Each row updated exactly once across all runs: a killed batch rolled
    // back with its progress row.
    ensure!(
        done == rows && finished,
        "progress says {done} rows (finished {finished}), expected {rows}"
    );
    ensure!(
        migrate::status(db.url(), &cat)?
            .unfinished_backfills()
            .next()
            .is_none(),
        "still unfinished"
    );
    eprintln!("no_transaction: {landed} of 10 kills landed mid-run, {partial_seen} left a partial backfill; converged");
    Ok(())
}

fn non_rerunnable_file_is_refused_before_anything_runs(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let dir = write_dir(&[(
        "V1__t.sql",
        "-- rollsafe:no-transaction\n\
         CREATE TABLE IF NOT EXISTS t (id int PRIMARY KEY, a int);\n\
         ALTER TABLE t ADD CONSTRAINT t_a_positive CHECK (a > 0);\n",
    )])?;
    let cat = catalog(dir.path())?;
    let err = migrate::migrate(db.url(), &cat, &Options::default()).unwrap_err();
    ensure!(
        matches!(&err, MigrateError::NotRerunnable { line: 3, .. }),
        "{err}"
    );
    let mut c = db.connect()?;
    let t: bool = c
        .query_one("SELECT to_regclass('t') IS NOT NULL", &[])?
        .get(0);
    ensure!(!t, "table t was created although the file was refused");
    ensure!(history(&mut c)?.is_empty(), "history written");

    // The CLI: one line naming the file, line and statement, exit 2.
    let out = cli()
        .args(["migrate", "--database-url", db.url(), "--migrations"])
        .arg(dir.path())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(2),
        "exit {:?}: {stderr}",
        out.status.code()
    );
    let line = stderr
        .lines()
        .find(|l| l.starts_with("rollsafe: error:"))
        .context("no error line")?;
    ensure!(
        line.contains("V1__t.sql:3")
            && line.contains("ADD CONSTRAINT t_a_positive")
            && line.contains("not re-runnable"),
        "{line}"
    );
    let pw = crate::common::password_of(db.url())?;
    ensure!(!stderr.contains(&pw), "password in output");
    let t: bool = c
        .query_one("SELECT to_regclass('t') IS NOT NULL", &[])?
        .get(0);
    ensure!(!t, "table t was created by the CLI run");
    Ok(())
}

fn concurrently_in_a_transactional_file_names_the_directive(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let dir = write_dir(&[
        ("V1__items.sql", ITEMS),
        (
            "V2__index.sql",
            "CREATE INDEX CONCURRENTLY items_a ON items (a);",
        ),
    ])?;
    let cat = catalog(dir.path())?;
    let err = migrate::migrate(db.url(), &cat, &Options::default()).unwrap_err();
    let msg = err.to_string();
    ensure!(
        matches!(&err, MigrateError::NeedsNoTransaction { line: 1, .. })
            && msg.contains("V2__index.sql:1")
            && msg.contains("-- rollsafe:no-transaction"),
        "{msg}"
    );
    ensure!(err.exit_code() == 2, "exit code {}", err.exit_code());
    // Refused before anything ran: not even V1.
    ensure!(
        history(&mut db.connect()?)?.is_empty(),
        "V1 applied before the refusal"
    );
    let plan_err = migrate::plan(db.url(), &cat, &Options::default()).unwrap_err();
    ensure!(
        plan_err.to_string() == msg,
        "dry run says otherwise: {plan_err}"
    );
    Ok(())
}

fn dollar_quoted_function_body_with_semicolons_is_one_statement(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let sql = "-- rollsafe:no-transaction\n\
               CREATE TABLE IF NOT EXISTS items (id bigint PRIMARY KEY, a int NOT NULL, b int);\n\
               CREATE OR REPLACE FUNCTION bump(x int) RETURNS int LANGUAGE plpgsql AS $body$\n\
               BEGIN\n  x := x + 1; /* ; */\n  RETURN x; -- ;\nEND;\n$body$;\n\
               CREATE INDEX CONCURRENTLY IF NOT EXISTS items_a ON items (a);\n";
    let dir = write_dir(&[("V1__fn.sql", sql)])?;
    let cat = catalog(dir.path())?;
    let steps = migrate::no_transaction::plan_steps(cat.get(1).context("V1")?)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    ensure!(steps.len() == 3, "{} statements: {steps:#?}", steps.len());
    ensure!(
        steps[1].statement.text.contains("x := x + 1;")
            && steps[1].statement.text.ends_with("$body$"),
        "{:?}",
        steps[1].statement.text
    );
    migrate::migrate(db.url(), &cat, &Options::default())?;
    let mut c = db.connect()?;
    let two: i32 = c.query_one("SELECT bump(1)", &[])?.get(0);
    ensure!(two == 2, "bump(1) = {two}");
    ensure!(
        index_state(&mut c, "items_a")? == (true, true),
        "items_a missing or invalid"
    );
    ensure!(history(&mut c)? == [1], "history");
    Ok(())
}

fn eight_concurrent_migrators_on_a_no_transaction_migration(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let dir = write_dir(&[
        ("V1__items.sql", ITEMS),
        (
            "V2__items_a_index.sql",
            "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS items_a ON items (a);\n\
             CREATE INDEX CONCURRENTLY IF NOT EXISTS items_b ON items (b);\n",
        ),
    ])?;
    let cat = catalog(dir.path())?;
    migrate::migrate(db.url(), &cat, &to(1))?;
    seed_items(&mut db.connect()?, 50_000, 1000)?;
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (url, cat, barrier) = (db.url().to_string(), cat.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                migrate::migrate(&url, &cat, &Options::default())
            })
        })
        .collect();
    let mut applied = Vec::new();
    for h in handles {
        match h
            .join()
            .map_err(|_| anyhow::anyhow!("a migrator panicked"))?
        {
            Ok(out) => applied.extend(out.applied.iter().map(|a| a.version)),
            Err(e) => bail!("a migrator failed: {e}"),
        }
    }
    ensure!(
        applied == [2],
        "versions applied across the 8 migrators: {applied:?}"
    );
    let mut c = db.connect()?;
    ensure!(history(&mut c)? == [1, 2], "history {:?}", history(&mut c)?);
    for i in ["items_a", "items_b"] {
        ensure!(
            index_state(&mut c, i)? == (true, true),
            "{i} missing or invalid"
        );
    }
    Ok(())
}

fn backfill_leaving_matching_rows_is_not_recorded_and_status_shows_it(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let dir = write_dir(&[
        ("V1__items.sql", ITEMS),
        (
            "V2__b.sql",
            "-- rollsafe:batched-update items SET b = CASE WHEN a % 10 = 0 THEN NULL ELSE a END WHERE b IS NULL\n",
        ),
    ])?;
    let cat = catalog(dir.path())?;
    migrate::migrate(db.url(), &cat, &to(1))?;
    let mut c = db.connect()?;
    seed_items(&mut c, 5_000, 1_000_000)?;
    let still: i64 = c
        .query_one("SELECT count(*) FROM items WHERE a % 10 = 0", &[])?
        .get(0);
    let fast = Options {
        backfill: BackfillOptions {
            batch_size: 500,
            pause: Duration::ZERO,
        },
        ..Default::default()
    };
    let err = migrate::migrate(db.url(), &cat, &fast).unwrap_err();
    ensure!(
        matches!(&err, MigrateError::BackfillIncomplete { remaining, .. } if *remaining == still),
        "{err}"
    );
    ensure!(
        history(&mut c)? == [1],
        "V2 recorded although rows still match"
    );
    let status = migrate::status(db.url(), &cat)?;
    let b = status
        .unfinished_backfills()
        .next()
        .context("status shows no unfinished backfill")?;
    ensure!(
        b.version == 2 && b.table == "items" && b.rows_done == 5_000 - still,
        "{b:?}"
    );

    // The status CLI names the command that finishes it.
    let out = cli()
        .args(["status", "--database-url", db.url(), "--migrations"])
        .arg(dir.path())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        stdout.lines().any(|l| l.contains("backfill:")
            && l.contains("V2 items unfinished")
            && l.contains("rollsafe migrate")),
        "{stdout}"
    );

    let f = check_finding(env, db.url(), dir.path(), "invariants.backfill-unfinished")?;
    ensure!(
        f["severity"] == "warn"
            && f["evidence"]["rows_done"] == serde_json::json!(5_000 - still)
            && f["advice"]
                .as_str()
                .unwrap_or_default()
                .contains("rollsafe migrate --target 2"),
        "{f:#}"
    );

    // A table without a single-column primary key is refused, nothing run.
    let db2 = env.fresh_database();
    let dir2 = write_dir(&[(
        "V1__nopk.sql",
        "CREATE TABLE IF NOT EXISTS pairs (x int, y int, z int, PRIMARY KEY (x, y));\n\
         -- rollsafe:batched-update pairs SET z = x + y WHERE z IS NULL\n",
    )])?;
    let err = migrate::migrate(db2.url(), &catalog(dir2.path())?, &Options::default()).unwrap_err();
    ensure!(
        matches!(&err, MigrateError::BackfillRefused { .. })
            && err.to_string().contains("2-column primary key"),
        "{err}"
    );
    ensure!(history(&mut db2.connect()?)?.is_empty(), "V1 recorded");
    Ok(())
}

/// The README's example (examples/batched-backfill/ on top of the shipped
/// migrations) on legacy rows whose output_collection_id was never set.
fn readme_example_backfills_output_collection_id_then_validates(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    for src in [
        repo_root().join("migrations"),
        repo_root().join("examples/batched-backfill"),
    ] {
        for entry in std::fs::read_dir(&src)? {
            let p = entry?.path();
            if p.extension().is_some_and(|x| x == "sql") {
                std::fs::copy(&p, dir.path().join(p.file_name().context("file name")?))?;
            }
        }
    }
    let cat = catalog(dir.path())?;
    ensure!(cat.latest() == 5, "example set ends at V{}", cat.latest());
    let db = env.fresh_database();
    migrate::migrate(db.url(), &cat, &to(3))?;
    let mut c = db.connect()?;
    let rows: i32 = 3_000; // a multiple of the batch size below
    c.batch_execute(
        "INSERT INTO collections (id, name, tenant_id, database_id) \
         VALUES ('00000000-0000-0000-0000-0000000000aa', 'input', 't', '00000000-0000-0000-0000-0000000000db')",
    )?;
    c.execute(
        "INSERT INTO collections (id, name, tenant_id, database_id) \
         SELECT gen_random_uuid(), 'out_' || g, 't', '00000000-0000-0000-0000-0000000000db' FROM generate_series(1, $1) g",
        &[&rows],
    )?;
    c.execute(
        "INSERT INTO attached_functions (id, name, tenant_id, database_id, input_collection_id, \
             output_collection_name, output_collection_id, function_id, function_params) \
         SELECT gen_random_uuid(), 'fn_' || g, 't', '00000000-0000-0000-0000-0000000000db', \
                '00000000-0000-0000-0000-0000000000aa', 'out_' || g, NULL, \
                'ccf2e3ba-633e-43ba-9394-46b0c54c61e3', '{}'::jsonb \
           FROM generate_series(1, $1) g",
        &[&rows],
    )?;
    // Through the CLI: --batch-size / --batch-pause, progress lines on a
    // non-terminal stderr.
    let out = cli()
        .args([
            "migrate",
            "--database-url",
            db.url(),
            "--batch-size",
            "250",
            "--batch-pause",
            "0",
        ])
        .arg("--migrations")
        .arg(dir.path())
        .output()?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    ensure!(
        out.status.code() == Some(0),
        "exit {:?}: {stdout}\n{stderr}",
        out.status.code()
    );
    for file in [
        "applied V4__attached_functions_output_collection_backfill.sql",
        "applied V5__attached_functions_ready_has_output.sql",
    ] {
        ensure!(stdout.contains(file), "{stdout}");
    }
    let done = format!(
        "[rollsafe migrate] backfill V4 attached_functions: {rows} of ~{rows} rows, {} batches",
        rows / 250
    );
    ensure!(
        stderr
            .lines()
            .any(|l| l.starts_with(&done) && l.ends_with(", done")),
        "no final progress line `{done}…, done` in:\n{stderr}"
    );
    let wrong: i64 = c
        .query_one(
            "SELECT count(*) FROM attached_functions f LEFT JOIN collections c ON c.id = f.output_collection_id \
              WHERE c.name IS DISTINCT FROM f.output_collection_name",
            &[],
        )?
        .get(0);
    ensure!(
        wrong == 0,
        "{wrong} rows without their own output collection"
    );
    let validated: bool = c
        .query_one(
            "SELECT convalidated FROM pg_constraint WHERE conname = 'attached_functions_ready_has_output'",
            &[],
        )?
        .get(0);
    ensure!(validated, "the constraint is not validated");
    ensure!(
        history(&mut c)? == [1, 2, 3, 4, 5],
        "history {:?}",
        history(&mut c)?
    );
    Ok(())
}

/// verify's measured apply, for a no-transaction file: outside a
/// transaction (the transactional apply fails on CONCURRENTLY), each
/// statement measured, the index it built reported.
fn rehearsal_applies_a_no_transaction_file_statement_by_statement(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use rollsafe::verify::measure::rehearsal::{self, End};
    let db = env.fresh_database();
    let dir = write_dir(&[("V1__items.sql", ITEMS)])?;
    migrate::migrate(db.url(), &catalog(dir.path())?, &Options::default())?;
    seed_items(&mut db.connect()?, 10_000, 100)?;
    let sql = "-- rollsafe:no-transaction\n\
               CREATE INDEX CONCURRENTLY IF NOT EXISTS items_a ON items (a);\n\
               ALTER TABLE items ADD COLUMN IF NOT EXISTS c int;\n";
    let in_tx = rehearsal::apply_measured(db.url(), db.url(), sql, None, End::Commit)?;
    ensure!(
        in_tx
            .error
            .as_deref()
            .is_some_and(|e| e.contains("cannot run inside a transaction block")),
        "the transactional apply should fail: {:?}",
        in_tx.error
    );
    let applied = rehearsal::apply_measured_no_transaction(
        db.url(),
        db.url(),
        sql,
        Some(Duration::from_millis(500)),
    )?;
    ensure!(applied.ok(), "{:?}", applied.error);
    ensure!(
        applied.statements.len() == 2 && applied.statements[1].line == 3,
        "{:?}",
        applied.statements
    );
    ensure!(
        applied.statements[0].built_indexes == [("items".to_string(), "items_a".to_string())],
        "{:?}",
        applied.statements[0].built_indexes
    );
    let mut c = db.connect()?;
    ensure!(
        index_state(&mut c, "items_a")? == (true, true),
        "items_a missing or invalid"
    );
    // A second run is a no-op that succeeds (the file is re-runnable).
    let again = rehearsal::apply_measured_no_transaction(db.url(), db.url(), sql, None)?;
    ensure!(
        again.ok() && again.statements.iter().all(|s| s.built_indexes.is_empty()),
        "{:?}",
        again.error
    );
    Ok(())
}

/// PostgreSQL's pattern for indexing a partitioned table: the parent's
/// index alone (`ON ONLY`: no build), each partition's concurrently, then
/// attached (re-runnable). It rehearses with zero errors, the `ON ONLY`
/// step measured as building nothing; `migrate` applies it, the parent's
/// index ends valid, and the attach file is accepted as re-runnable.
fn partitioned_index_pattern_passes_and_migrates_to_a_valid_index(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = write_dir(&[
        (
            "V1__billing_events.sql",
            "CREATE SCHEMA billing;\n\
             CREATE TABLE billing.events (\n\
                 id bigint GENERATED ALWAYS AS IDENTITY,\n\
                 occurred_on date NOT NULL,\n\
                 amount_cents bigint NOT NULL,\n\
                 PRIMARY KEY (id, occurred_on)\n\
             ) PARTITION BY RANGE (occurred_on);\n\
             CREATE TABLE billing.events_2026 PARTITION OF billing.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');\n\
             CREATE TABLE billing.events_rest PARTITION OF billing.events DEFAULT;\n",
        ),
        (
            "V2__events_occurred_on_index.sql",
            "CREATE INDEX IF NOT EXISTS events_occurred_on_idx ON ONLY billing.events (occurred_on);\n",
        ),
        (
            "V3__events_partition_indexes.sql",
            "-- rollsafe:no-transaction\n\
             CREATE INDEX CONCURRENTLY IF NOT EXISTS events_2026_occurred_on_idx ON billing.events_2026 (occurred_on);\n\
             CREATE INDEX CONCURRENTLY IF NOT EXISTS events_rest_occurred_on_idx ON billing.events_rest (occurred_on);\n\
             ALTER INDEX billing.events_occurred_on_idx ATTACH PARTITION billing.events_2026_occurred_on_idx;\n\
             ALTER INDEX billing.events_occurred_on_idx ATTACH PARTITION billing.events_rest_occurred_on_idx;\n",
        ),
    ])?;
    let report = rollsafe::verify::Verify::new(catalog(dir.path())?)?
        .rows(2000)
        .run(&env.sandbox)?;
    let errors: Vec<String> = report
        .errors()
        .map(|f| format!("V{:?} {}: {}", f.migration, f.id, f.message))
        .collect();
    ensure!(report.passed && errors.is_empty(), "errors: {errors:#?}");
    let v2: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| f.migration == Some(2))
        .map(|f| f.id.as_str())
        .collect();
    ensure!(
        !v2.contains(&"locks.blocking-index-build") && v2.contains(&"apply.applies"),
        "V2's findings: {v2:?}"
    );

    let db = env.fresh_database();
    migrate::migrate(db.url(), &catalog(dir.path())?, &Options::default())?;
    let mut c = db.connect()?;
    ensure!(
        index_state(&mut c, "billing.events_occurred_on_idx")? == (true, true),
        "the parent's index is not valid after every partition's was attached"
    );
    ensure!(
        history(&mut c)? == [1, 2, 3],
        "history: {:?}",
        history(&mut c)?
    );
    Ok(())
}

/// A project without apps carries its seeded rows from one migration to
/// the next; a no-transaction file without batched updates is carried
/// like any other (applied statement by statement on the copy), so the
/// migration after it starts from the rows already there instead of
/// seeding afresh. A file with batched updates is not carried (the plain
/// apply would not run its batches).
fn seeded_rows_are_carried_past_a_no_transaction_file(env: &TestEnv) -> anyhow::Result<()> {
    let dir = write_dir(&[
        ("V1__items.sql", ITEMS),
        (
            "V2__items_a.sql",
            "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS items_a ON items (a);\n",
        ),
        ("V3__items_c.sql", "ALTER TABLE items ADD COLUMN c int;"),
        (
            "V4__items_b.sql",
            "-- rollsafe:no-transaction\n-- rollsafe:batched-update items SET b = a WHERE b IS NULL\n",
        ),
        ("V5__items_d.sql", "ALTER TABLE items ADD COLUMN d int;"),
    ])?;
    let migrations = dir.path().to_string_lossy().into_owned();
    let (code, _, stderr) = crate::verify::run_verify(env, &["--migrations", &migrations])?;
    let says = |v: &str| -> Option<&str> {
        stderr.lines().find(|l| {
            l.contains(&format!("] {v}: ")) && (l.contains("seeding") || l.contains("carried"))
        })
    };
    let v3 = says("V3").with_context(|| format!("no seeding step for V3: {stderr}"))?;
    ensure!(
        v3.contains("seeded rows carried to V2"),
        "V3 did not start from V2's rows: {v3}"
    );
    let v5 = says("V5").with_context(|| format!("no seeding step for V5: {stderr}"))?;
    ensure!(
        v5.contains(&format!(
            "seeding up to {} rows per table at V4",
            crate::verify::ROWS
        )),
        "V5 must be seeded afresh after a file with batched updates: {v5}"
    );
    ensure!(code == 0 || code == 1, "verify could not run: {stderr}");
    Ok(())
}

/// A file run outside rollsafe's transaction that opens and commits its
/// own: measured as it runs (its rewrite read once its COMMIT made it
/// visible), and a statement failing inside it is the one named, never
/// the "current transaction is aborted" of a measurement after it.
fn a_files_own_transaction_runs_as_written_and_its_failure_is_named(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use rollsafe::verify::measure::rehearsal;
    let db = env.fresh_database();
    let dir = write_dir(&[("V1__items.sql", ITEMS)])?;
    migrate::migrate(db.url(), &catalog(dir.path())?, &Options::default())?;
    seed_items(&mut db.connect()?, 1_000, 100)?;
    let block = "-- rollsafe:no-transaction\n\
                 BEGIN;\n\
                 SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;\n\
                 ALTER TABLE items ALTER COLUMN b TYPE bigint;\n\
                 COMMIT;\n";
    let applied = rehearsal::apply_measured_no_transaction(db.url(), db.url(), block, None)?;
    ensure!(applied.ok(), "{:?}", applied.error);
    let rewrote: Vec<(usize, &Vec<String>)> = applied
        .statements
        .iter()
        .map(|s| (s.line, &s.rewrote))
        .filter(|(_, r)| !r.is_empty())
        .collect();
    ensure!(
        rewrote == [(5, &vec!["items".to_string()])],
        "the block's rewrite, on its COMMIT: {:?}",
        applied.statements
    );

    let failing = "-- rollsafe:no-transaction\n\
                   BEGIN;\n\
                   SET LOCAL lock_timeout = '1s';\n\
                   CREATE TYPE shelf_zone AS ENUM ('cold', 'dry');\n\
                   ALTER TABLE shelves ADD COLUMN zone shelf_zone;\n\
                   COMMIT;\n";
    let dir = write_dir(&[("V1__items.sql", ITEMS), ("V2__zones.sql", failing)])?;
    let report = rollsafe::verify::Verify::new(catalog(dir.path())?)?
        .rows(100)
        .run(&env.sandbox)?;
    let failed: Vec<String> = report
        .errors()
        .map(|f| {
            format!(
                "{} line {}: {}",
                f.id,
                f.location.as_ref().map_or(0, |l| l.line),
                f.message
            )
        })
        .collect();
    ensure!(
        failed.len() == 1
            && failed[0].starts_with("apply.fails-on-empty line 5:")
            && failed[0].contains("\"shelves\" does not exist"),
        "{failed:#?}"
    );
    Ok(())
}

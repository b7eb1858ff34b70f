//! `rollsafe migrate` / `rollsafe status` against real PostgreSQL: apply,
//! target, no-op rerun, dry run, V3 on legacy rows, concurrent migrators,
//! SIGKILL mid-apply, a long transaction in the way, bad input, TLS.

use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use postgres::Client;
use rollsafe::catalog::Catalog;
use rollsafe::db;
use rollsafe::lock_policy::LockPolicy;
use rollsafe::migrate::{self, MigrateError, Options};
use rollsafe::sandbox::{BackendKind, Database};

use crate::common::{cli, history, repo_root, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    let trials = crate::trials!(
        "migrate",
        env,
        [
            applies_from_empty_and_rerun_is_a_noop,
            applies_up_to_a_target_then_the_rest,
            dry_run_prints_the_plan_and_changes_nothing,
            status_reports_applied_pending_divergent_missing_and_ahead,
            v3_on_10k_legacy_rows_is_catalog_only_and_rows_are_ready,
            eight_concurrent_migrators_apply_each_version_once,
            sigkill_mid_apply_never_splits_a_migration_from_its_history,
            long_transaction_makes_migrate_give_up_naming_the_blocker,
            behind_a_long_read_transaction_migrate_queues_no_reader_and_applies_after_it_ends,
            no_transaction_statements_wait_without_queueing_and_concurrent_builds_still_run,
            a_held_migration_lock_makes_migrate_wait_then_refuse,
            bad_inputs_give_one_line_errors_and_change_nothing,
            library_refuses_drift_before_running_anything,
            tls_sslmodes_are_honoured,
            a_diesel_history_with_a_lone_concurrent_build_migrates_from_empty,
            an_up_down_folder_sqlx_applied_is_read_as_sqlx_from_its_history,
        ]
    );
    crate::common::own_server_only(env, trials, &["tls_sslmodes_are_honoured"])
}

// ---------------------------------------------------------------- helpers

fn rollsafe(args: &[&str]) -> anyhow::Result<Output> {
    cli().args(args).output().context("running rollsafe")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn migrate_cli(url: &str, extra: &[&str]) -> anyhow::Result<Output> {
    let mut args = vec!["migrate", "--database-url", url];
    args.extend_from_slice(extra);
    rollsafe(&args)
}

fn expect_code(o: &Output, code: i32, what: &str) -> anyhow::Result<()> {
    let (out, err) = text(o);
    ensure!(
        o.status.code() == Some(code),
        "{what}: expected exit {code}, got {:?}\nstdout:\n{out}\nstderr:\n{err}",
        o.status.code()
    );
    Ok(())
}

fn table_exists(c: &mut Client, name: &str) -> anyhow::Result<bool> {
    Ok(c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])?
        .get(0))
}

fn column_exists(c: &mut Client, table: &str, column: &str) -> anyhow::Result<bool> {
    Ok(c.query_one(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns \
          WHERE table_schema = 'public' AND table_name = $1 AND column_name = $2)",
        &[&table, &column],
    )?
    .get(0))
}

/// History rows and the public schema (columns, indexes, constraints), to
/// compare before and after a run that must change nothing.
fn snapshot(db: &Database) -> anyhow::Result<String> {
    let mut c = db.connect()?;
    let mut out = String::new();
    if table_exists(&mut c, "refinery_schema_history")? {
        for r in c.query(
            "SELECT version, name, applied_on, checksum FROM refinery_schema_history ORDER BY version",
            &[],
        )? {
            let (v, n, a, s): (i32, String, String, String) = (r.get(0), r.get(1), r.get(2), r.get(3));
            out.push_str(&format!("history {v} {n} {a} {s}\n"));
        }
    }
    for r in c.query(
        "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text, \
                coalesce(column_default, '') \
           FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2",
        &[],
    )? {
        let cols: Vec<String> = (0..5).map(|i| r.get::<_, String>(i)).collect();
        out.push_str(&format!("column {}\n", cols.join(" ")));
    }
    for r in c.query(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname",
        &[],
    )? {
        out.push_str(&format!("index {}\n", r.get::<_, String>(0)));
    }
    for r in c.query(
        "SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint \
          WHERE connamespace = 'public'::regnamespace ORDER BY 1",
        &[],
    )? {
        out.push_str(&format!(
            "constraint {} {}\n",
            r.get::<_, String>(0),
            r.get::<_, String>(1)
        ));
    }
    Ok(out)
}

/// A copy of the shipped migrations in a tempdir, to edit.
fn migrations_copy() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for entry in std::fs::read_dir(repo_root().join("migrations"))? {
        let p = entry?.path();
        if p.extension().is_some_and(|x| x == "sql") {
            std::fs::copy(&p, dir.path().join(p.file_name().unwrap()))?;
        }
    }
    Ok(dir)
}

fn write_dir(files: &[(&str, &str)]) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (name, sql) in files {
        std::fs::write(dir.path().join(name), sql)?;
    }
    Ok(dir)
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn password_of(url: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .password()
        .filter(|p| !p.is_empty())
        .map(str::to_string)
}

/// `url` with its password replaced.
fn with_password(url: &str, pw: &str) -> String {
    let mut u = url::Url::parse(url).expect("sandbox URL parses");
    u.set_password(Some(pw)).unwrap();
    u.to_string()
}

/// One legacy-shaped insert (the app before is_ready: never names it).
const LEGACY_INSERT: &str = "\
    INSERT INTO attached_functions \
        (id, name, tenant_id, database_id, input_collection_id, output_collection_name, \
         output_collection_id, function_id, function_params) \
    SELECT gen_random_uuid(), 'fn_' || g, 'tenant', c.database_id, c.id, 'out_' || g, NULL, \
           'ccf2e3ba-633e-43ba-9394-46b0c54c61e3', '{}'::jsonb \
      FROM generate_series(1, $1::int) g, (SELECT id, database_id FROM collections LIMIT 1) c";

fn seed_legacy_rows(c: &mut Client, n: i32) -> anyhow::Result<()> {
    c.execute(
        "INSERT INTO collections (id, name, tenant_id, database_id) \
         VALUES (gen_random_uuid(), 'input', 'tenant', gen_random_uuid())",
        &[],
    )?;
    c.execute(LEGACY_INSERT, &[&n])?;
    Ok(())
}

// ------------------------------------------------------------------ tests

fn applies_from_empty_and_rerun_is_a_noop(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let o = migrate_cli(db.url(), &[])?;
    expect_code(&o, 0, "first run")?;
    let (out, _) = text(&o);
    for f in [
        "V1__collections_and_functions.sql",
        "V2__attached_functions.sql",
        "V3__attached_functions_is_ready.sql",
    ] {
        ensure!(
            out.contains(&format!("applied {f}")),
            "{f} not reported:\n{out}"
        );
    }
    let mut c = db.connect()?;
    ensure!(
        history(&mut c)? == [1, 2, 3],
        "history {:?}",
        history(&mut c)?
    );
    ensure!(column_exists(&mut c, "attached_functions", "is_ready")?);
    let seeded: i64 = c.query_one("SELECT count(*) FROM functions", &[])?.get(0);
    ensure!(seeded == 3, "V1 seeds 3 functions, found {seeded}");
    // The checksums are refinery's, i.e. the catalog's.
    let catalog = Catalog::embedded()?;
    for r in c.query("SELECT version, checksum FROM refinery_schema_history", &[])? {
        let (v, sum): (i32, String) = (r.get(0), r.get(1));
        ensure!(
            sum == catalog.get(v).unwrap().checksum.to_string(),
            "V{v} checksum {sum}"
        );
    }
    let before = snapshot(&db)?;
    let o = migrate_cli(db.url(), &[])?;
    expect_code(&o, 0, "rerun")?;
    ensure!(text(&o).0.contains("nothing to apply"), "{}", text(&o).0);
    ensure!(snapshot(&db)? == before, "the rerun changed the database");
    // The advisory lock is released at the end of a run.
    let held: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )?
        .get(0);
    ensure!(held == 0, "{held} advisory locks left behind");
    Ok(())
}

fn applies_up_to_a_target_then_the_rest(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    expect_code(&migrate_cli(db.url(), &["--target", "2"])?, 0, "--target 2")?;
    let mut c = db.connect()?;
    ensure!(history(&mut c)? == [1, 2], "history {:?}", history(&mut c)?);
    ensure!(table_exists(&mut c, "attached_functions")?);
    ensure!(
        !column_exists(&mut c, "attached_functions", "is_ready")?,
        "V3 applied past the target"
    );
    // A target below the current version undoes nothing.
    let o = migrate_cli(db.url(), &["--target", "1"])?;
    expect_code(&o, 0, "--target 1 on V2")?;
    ensure!(text(&o).0.contains("already past it"), "{}", text(&o).0);
    ensure!(history(&mut c)? == [1, 2]);
    expect_code(&migrate_cli(db.url(), &[])?, 0, "the rest")?;
    ensure!(history(&mut c)? == [1, 2, 3]);
    ensure!(column_exists(&mut c, "attached_functions", "is_ready")?);
    Ok(())
}

fn dry_run_prints_the_plan_and_changes_nothing(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let o = migrate_cli(db.url(), &["--dry-run"])?;
    expect_code(&o, 0, "dry run")?;
    let (out, _) = text(&o);
    ensure!(out.contains("3 migration(s) would be applied"), "{out}");
    ensure!(
        out.contains("CREATE TABLE attached_functions"),
        "V2's SQL not printed:\n{out}"
    );
    ensure!(
        out.contains("ADD COLUMN is_ready boolean NOT NULL DEFAULT true"),
        "{out}"
    );
    let mut c = db.connect()?;
    ensure!(
        !table_exists(&mut c, "refinery_schema_history")?,
        "dry run created the history table"
    );
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace",
            &[],
        )?
        .get(0);
    ensure!(n == 0, "dry run created {n} relations");
    drop(c);

    let db = env.migrated_database(2);
    let before = snapshot(&db)?;
    let o = migrate_cli(db.url(), &["--dry-run"])?;
    expect_code(&o, 0, "dry run at V2")?;
    let (out, _) = text(&o);
    ensure!(
        out.contains("1 migration(s) would be applied") && out.contains("V3 (V3__"),
        "{out}"
    );
    // The lock each migration needs per table, read from its statements:
    // what migrate looks for in pg_locks before each attempt.
    ensure!(
        out.contains(
            "-- locks (read from its statements): ACCESS EXCLUSIVE on attached_functions\n"
        ),
        "{out}"
    );
    ensure!(
        !out.contains("CREATE TABLE attached_functions"),
        "applied V2 listed again:\n{out}"
    );
    ensure!(snapshot(&db)? == before, "dry run changed the database");
    Ok(())
}

fn status_json(url: &str, dir: Option<&Path>) -> anyhow::Result<(i32, serde_json::Value)> {
    let mut args = vec!["status", "--database-url", url, "--format", "json"];
    if let Some(d) = dir {
        args.extend(["--migrations", path_str(d)]);
    }
    let o = rollsafe(&args)?;
    let (out, err) = text(&o);
    let v: serde_json::Value =
        serde_json::from_str(&out).with_context(|| format!("status JSON:\n{out}\n{err}"))?;
    Ok((o.status.code().unwrap_or(-1), v))
}

fn states(v: &serde_json::Value) -> Vec<(i64, String)> {
    v["status"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["version"].as_i64().unwrap(),
                x["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn status_reports_applied_pending_divergent_missing_and_ahead(env: &TestEnv) -> anyhow::Result<()> {
    let s = |v: &[(i64, &str)]| {
        v.iter()
            .map(|(a, b)| (*a, b.to_string()))
            .collect::<Vec<_>>()
    };
    let fresh = env.fresh_database();
    let (code, v) = status_json(fresh.url(), None)?;
    ensure!(code == 0, "status on a fresh db exits {code}");
    ensure!(
        states(&v) == s(&[(1, "pending"), (2, "pending"), (3, "pending")]),
        "{v}"
    );
    ensure!(v["status"]["history_table"] == false);
    let mut c = fresh.connect()?;
    ensure!(
        !table_exists(&mut c, "refinery_schema_history")?,
        "status created the history table"
    );

    let db = env.migrated_database(3);
    let (code, v) = status_json(db.url(), None)?;
    ensure!(code == 0);
    ensure!(
        states(&v) == s(&[(1, "applied"), (2, "applied"), (3, "applied")]),
        "{v}"
    );
    ensure!(v["status"]["versions"][0]["applied_on"]
        .as_str()
        .is_some_and(|a| a.starts_with("20")));
    ensure!(!v
        .to_string()
        .contains(&crate::common::password_of(db.url())?));

    // V2 edited, V3 deleted, V4 added: divergent, missing, pending.
    let dir = migrations_copy()?;
    let v2 = dir.path().join("V2__attached_functions.sql");
    let sql = std::fs::read_to_string(&v2)? + "\n-- an edit after apply\n";
    std::fs::write(&v2, sql)?;
    std::fs::remove_file(dir.path().join("V3__attached_functions_is_ready.sql"))?;
    std::fs::write(dir.path().join("V4__more.sql"), "SELECT 1;")?;
    let (code, v) = status_json(db.url(), Some(dir.path()))?;
    ensure!(code == 1, "drift must exit 1, got {code}");
    ensure!(
        states(&v)
            == s(&[
                (1, "applied"),
                (2, "divergent"),
                (3, "missing"),
                (4, "pending")
            ]),
        "{v}"
    );
    let d = &v["status"]["versions"][1];
    ensure!(d["checksum_file"] != d["checksum_applied"], "{d}");

    // Files V1-V2 only: the database (at V3) is ahead of the code.
    let dir = migrations_copy()?;
    std::fs::remove_file(dir.path().join("V3__attached_functions_is_ready.sql"))?;
    let (code, v) = status_json(db.url(), Some(dir.path()))?;
    ensure!(code == 1);
    ensure!(
        states(&v) == s(&[(1, "applied"), (2, "applied"), (3, "unknown-newer")]),
        "{v}"
    );

    // Text format says the same, one line per version.
    let o = rollsafe(&[
        "status",
        "--database-url",
        db.url(),
        "--migrations",
        path_str(dir.path()),
    ])?;
    let (out, _) = text(&o);
    ensure!(
        out.contains("unknown-newer") && out.contains("ahead of the code"),
        "{out}"
    );

    // The URL can come from DATABASE_URL (and is never echoed unredacted).
    let o = cli().arg("status").env("DATABASE_URL", db.url()).output()?;
    expect_code(&o, 0, "status with DATABASE_URL")?;
    let (out, _) = text(&o);
    if std::env::var_os("ROLLSAFE_TEST_SHOW").is_some() {
        eprintln!("{out}");
    }
    ensure!(out.matches(" applied ").count() == 3, "{out}");
    let pw = crate::common::password_of(db.url())?;
    ensure!(!out.contains(&pw), "password in the status output");
    Ok(())
}

/// WAL written by the transaction that applied `version`: pg_walinspect
/// filtered by the history row's xid. None when the extension is not
/// there (before PostgreSQL 15): the server's WAL position counts every
/// other test's writes on the same server too, so it is no measure of
/// this migration (`cargo bench --bench migrate` prints the volume on a
/// server of its own).
fn migration_wal_bytes(
    c: &mut Client,
    version: i32,
    start_lsn: &str,
) -> anyhow::Result<Option<i64>> {
    // The sandbox runs with synchronous_commit=off, so the flushed WAL can
    // trail what was written (pg_walinspect reads only flushed WAL and
    // refuses a start past it): one synchronous commit flushes it all.
    c.batch_execute("SET synchronous_commit = on; SELECT txid_current()")?;
    if c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .is_ok()
    {
        let row = c.query_one(
            "SELECT coalesce(sum(record_length), 0)::bigint FROM pg_get_wal_records_info($1::text::pg_lsn, pg_current_wal_flush_lsn()) \
              WHERE xid = (SELECT xmin FROM refinery_schema_history WHERE version = $2)",
            &[&start_lsn, &version],
        );
        return match row {
            Ok(row) => Ok(Some(row.get(0))),
            // The suite's other tests share the server: their checkpoints
            // may recycle the segment the migration's WAL began in before
            // it is read. Not measured then (said); the heap size and the
            // relfilenode still show no row was rewritten.
            Err(e)
                if e.as_db_error()
                    .is_some_and(|d| d.message().contains("has already been removed")) =>
            {
                eprintln!("    WAL of V{version}: skipped (its first segment was recycled by another test's checkpoint: {e})");
                Ok(None)
            }
            Err(e) => Err(e.into()),
        };
    }
    Ok(None)
}

/// The size of a table's heap (main fork) in this test's own database:
/// an UPDATE backfill writes a new version of every row into it. (Not
/// the total: autovacuum may add the visibility map and free space map
/// forks at any moment.)
fn table_bytes(c: &mut Client, table: &str) -> anyhow::Result<i64> {
    Ok(c.query_one(
        "SELECT pg_relation_size($1::text::regclass, 'main')",
        &[&table],
    )?
    .get(0))
}

fn v3_on_10k_legacy_rows_is_catalog_only_and_rows_are_ready(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(2);
    let mut c = db.connect()?;
    seed_legacy_rows(&mut c, 10_000)?;
    c.batch_execute("CHECKPOINT").ok(); // full-page images after a checkpoint would inflate WAL
                                        // The suite's other tests share the server and their checkpoints
                                        // recycle WAL segments: a temporary slot of this session keeps the
                                        // migration's WAL until it is read (dropped when the session ends).
    let slot = format!("rollsafe_wal_{}", std::process::id());
    if let Err(e) = c.query_one(
        "SELECT pg_create_physical_replication_slot($1, true, true)",
        &[&slot],
    ) {
        eprintln!("    WAL of V3: no slot to keep it ({e}); it is read if no checkpoint recycles it first");
    }
    let relfilenode: u32 = c
        .query_one(
            "SELECT relfilenode FROM pg_class WHERE relname = 'attached_functions'",
            &[],
        )?
        .get::<_, postgres::types::Oid>(0);
    let start_lsn: String = c
        .query_one("SELECT pg_current_wal_lsn()::text", &[])?
        .get(0);
    let size_before = table_bytes(&mut c, "attached_functions")?;
    let upd_before: i64 = c
        .query_one(
            "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'attached_functions'",
            &[],
        )?
        .get(0);
    expect_code(&migrate_cli(db.url(), &[])?, 0, "V3 on 10k rows")?;
    ensure!(history(&mut c)? == [1, 2, 3]);

    let not_ready: i64 = c
        .query_one(
            "SELECT count(*) FROM attached_functions WHERE is_ready IS DISTINCT FROM true",
            &[],
        )?
        .get(0);
    ensure!(
        not_ready == 0,
        "{not_ready} legacy rows are not ready after V3"
    );
    let after: u32 = c
        .query_one(
            "SELECT relfilenode FROM pg_class WHERE relname = 'attached_functions'",
            &[],
        )?
        .get::<_, postgres::types::Oid>(0);
    ensure!(
        after == relfilenode,
        "V3 rewrote the table ({relfilenode} -> {after})"
    );
    // An UPDATE backfill of 10k rows would write a second version of
    // each (~2 MB here) and as much WAL.
    let size_after = table_bytes(&mut c, "attached_functions")?;
    ensure!(
        size_after == size_before,
        "attached_functions grew from {size_before} to {size_after} bytes under V3 (an UPDATE backfill?)"
    );
    match migration_wal_bytes(&mut c, 3, &start_lsn)? {
        Some(wal) => ensure!(
            wal < 1_000_000,
            "V3 wrote {wal} bytes of WAL on 10k rows (an UPDATE backfill?)"
        ),
        None => eprintln!(
            "    WAL of V3: not measured (said above, or pg_walinspect needs PostgreSQL 15)"
        ),
    }
    // No row was touched: the default lives in the catalogue.
    std::thread::sleep(Duration::from_millis(600)); // stats are flushed at most every 500 ms
    let upd_after: i64 = c
        .query_one(
            "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'attached_functions'",
            &[],
        )?
        .get(0);
    ensure!(
        upd_after == upd_before,
        "V3 updated {} rows",
        upd_after - upd_before
    );
    let missing: bool = c
        .query_one(
            "SELECT atthasmissing FROM pg_attribute \
              WHERE attrelid = 'attached_functions'::regclass AND attname = 'is_ready'",
            &[],
        )?
        .get(0);
    ensure!(
        missing,
        "is_ready's default is not catalog-only (atthasmissing = false)"
    );

    // The legacy app keeps inserting without naming is_ready: ready rows.
    c.execute(
        &LEGACY_INSERT.replace("'fn_' || g", "'after_v3_' || g"),
        &[&1i32],
    )?;
    let ready: bool = c
        .query_one(
            "SELECT is_ready FROM attached_functions WHERE name = 'after_v3_1'",
            &[],
        )?
        .get(0);
    ensure!(ready, "a legacy insert after V3 is not ready");
    Ok(())
}

fn eight_concurrent_migrators_apply_each_version_once(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.fresh_database();
    let children: Vec<_> = (0..8)
        .map(|_| {
            cli()
                .args(["migrate", "--database-url", db.url()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output())
        .collect::<Result<_, _>>()?;
    for (i, o) in outputs.iter().enumerate() {
        expect_code(o, 0, &format!("migrator {i}"))?;
    }
    let all: String = outputs.iter().map(|o| text(o).0).collect();
    for f in ["V1__", "V2__", "V3__"] {
        let n = all.matches(&format!("applied {f}")).count();
        ensure!(n == 1, "{f} reported applied {n} times:\n{all}");
    }
    let mut c = db.connect()?;
    ensure!(
        history(&mut c)? == [1, 2, 3],
        "history {:?}",
        history(&mut c)?
    );
    ensure!(column_exists(&mut c, "attached_functions", "is_ready")?);
    let functions: i64 = c.query_one("SELECT count(*) FROM functions", &[])?.get(0);
    ensure!(
        functions == 3,
        "V1's seed ran more than once? {functions} functions"
    );
    Ok(())
}

/// Waits until a backend of `db` runs a statement containing `marker`
/// (or the child exits).
fn wait_for_query(
    env: &TestEnv,
    db: &Database,
    marker: &str,
    child: &mut std::process::Child,
) -> anyhow::Result<()> {
    let mut admin = env.sandbox.connect_admin()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let pattern = format!("%{marker}%");
    loop {
        let running: bool = admin
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
                  WHERE datname = $1 AND state = 'active' AND query LIKE $2)",
                &[&db.name(), &pattern],
            )?
            .get(0);
        if running || child.try_wait()?.is_some() {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "the migrator never ran {marker}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn sigkill_mid_apply_never_splits_a_migration_from_its_history(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = write_dir(&[
        ("V1__fast.sql", "CREATE TABLE fast_one (id int);"),
        // Each statement runs on its own (migrate::apply), so the marker
        // the test waits for is in the slow statement itself: a marker
        // only in the quick CREATE was seen too briefly to kill inside.
        (
            "V2__slow.sql",
            "SELECT 'slow_two', pg_sleep(0.3);\nCREATE TABLE slow_two (id int);",
        ),
        (
            "V3__slow_again.sql",
            "CREATE TABLE slow_three (id int);\nSELECT 'slow_three', pg_sleep(0.3);",
        ),
    ])?;
    let tables = [(1, "fast_one"), (2, "slow_two"), (3, "slow_three")];
    let consistent = |c: &mut Client, when: &str| -> anyhow::Result<Vec<i32>> {
        let h = history(c)?;
        for (v, t) in tables {
            let recorded = h.contains(&v);
            let there = table_exists(c, t)?;
            ensure!(
                recorded == there,
                "{when}: V{v} in history = {recorded} but {t} exists = {there}"
            );
        }
        Ok(h)
    };
    let mut killed_mid_way = 0;
    for i in 0..10u64 {
        let db = env.fresh_database();
        let mut child = cli()
            .args([
                "migrate",
                "--database-url",
                db.url(),
                "--migrations",
                path_str(dir.path()),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        // Spread the kills over start-up (a fixed delay), V2's and V3's
        // apply (seen running in pg_stat_activity), whatever the machine's
        // speed.
        match i % 3 {
            0 => std::thread::sleep(Duration::from_millis(20 + i * 15)),
            phase => {
                let marker = if phase == 1 { "slow_two" } else { "slow_three" };
                wait_for_query(env, &db, marker, &mut child)?;
            }
        }
        child.kill()?; // SIGKILL
        child.wait()?;
        let mut c = db.connect()?;
        let h = consistent(&mut c, &format!("after kill {i}"))?;
        if !h.is_empty() && h.len() < 3 {
            killed_mid_way += 1;
        }
        // The next run converges (waiting, if need be, for the dead run's
        // backend to notice and free the migration lock).
        let o = cli()
            .args([
                "migrate",
                "--database-url",
                db.url(),
                "--migrations",
                path_str(dir.path()),
            ])
            .output()?;
        expect_code(&o, 0, &format!("run after kill {i}"))?;
        let h = consistent(&mut c, &format!("after the run following kill {i}"))?;
        ensure!(h == [1, 2, 3], "did not converge: {h:?}");
    }
    ensure!(
        killed_mid_way > 0,
        "no kill landed between migrations; the test proves nothing"
    );
    Ok(())
}

/// A long read transaction of application `long_report`: BEGIN, a SELECT
/// on attached_functions (its ACCESS SHARE stays granted until the end),
/// then aged past one attempt so the gate waits for it from the first look.
/// The query carries a marker that must never be printed.
fn long_read_transaction(db: &Database) -> anyhow::Result<(Client, i32)> {
    let mut holder = db.connect()?;
    let pid: i32 = holder.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    holder.batch_execute(
        "SET application_name = 'long_report'; BEGIN; \
         SELECT count(*) FROM attached_functions WHERE name <> 'SECRET-CUSTOMER-DATA'",
    )?;
    std::thread::sleep(Duration::from_millis(100));
    Ok((holder, pid))
}

fn long_transaction_makes_migrate_give_up_naming_the_blocker(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(2);
    let (mut holder, holder_pid) = long_read_transaction(&db)?;
    let reader = Reader::start(db.url())?;
    let watch = QueueWatch::start(&db);
    let policy = LockPolicy::default().retry_for(Duration::from_secs(3));
    let start = Instant::now();
    let o = migrate_cli(db.url(), &["--retry-for", "3s"])?;
    let (elapsed, ended) = (start.elapsed(), Instant::now());
    let samples = watch.stop()?;
    let run = reader.stop()?;
    let (worst, wall, reads) = (run.worst_lock_wait(&samples), run.worst(), run.reads.len());
    let queued = queued_samples(&samples, None);
    let (waits_seen, read_while_waiting) = (
        run.waits_seen(&samples, None),
        run.completed_between(start, ended),
    );
    expect_code(&o, 1, "migrate behind a long transaction")?;
    let (_, err) = text(&o);
    let last = err.lines().last().unwrap_or_default();
    println!("    migrate: {last}");
    println!("    reader: {reads} reads ({read_while_waiting} while migrate waited), worst lock wait {worst:?}, worst read {wall:?}; samples with a lock request queued on attached_functions: {queued} of {}", samples.len());
    println!(
        "    migrate gave up after {elapsed:?} (its window and one last attempt: {:?}; `cargo bench --bench locks` times it)",
        policy.give_up_bound()
    );
    // The holder was there at the first look: nothing was ever requested.
    ensure!(
        last.contains("gave up after 0 attempts") && last.contains("without queueing"),
        "{last}"
    );
    ensure!(queued == 0, "{queued} samples saw a queued lock request");
    for named in [
        format!("pid {holder_pid} ("),
        "application `long_report`".to_string(),
        "transaction open for ".to_string(),
        "holds ACCESS SHARE on attached_functions".to_string(),
    ] {
        ensure!(last.contains(&named), "`{named}` not in: {last}");
    }
    ensure!(
        !err.contains("SECRET-CUSTOMER-DATA") && !err.contains("count(*)"),
        "another session's SQL text was printed: {err}"
    );
    // No reader queued: the reader kept completing reads while migrate
    // waited, and was never seen waiting for a lock on the table.
    ensure!(
        read_while_waiting > 20,
        "the reader completed only {read_while_waiting} reads while migrate waited"
    );
    ensure!(
        waits_seen == 0,
        "the reader was seen waiting for a lock on attached_functions in {waits_seen} samples (worst such read {worst:?})"
    );
    let mut c = db.connect()?;
    ensure!(history(&mut c)? == [1, 2], "a timed-out V3 left a trace");
    ensure!(!column_exists(&mut c, "attached_functions", "is_ready")?);

    // The previous stepped policy, still selectable: it requests at once,
    // so the same reader, watched the same way, is seen queued behind its
    // attempts (100 ms growing to 500 ms each): the control that the
    // watch above could have seen a queued reader. Its watcher names the
    // blocker the same way (no SQL text either).
    let catalog = Catalog::embedded()?;
    let options = Options {
        lock: LockPolicy::stepped().retry_for(Duration::from_secs(2)),
        ..Options::default()
    };
    let reader = Reader::start(db.url())?;
    let watch = QueueWatch::start(&db);
    let e = migrate::migrate(db.url(), &catalog, &options)
        .err()
        .context("the stepped policy applied V3 behind the transaction")?;
    let samples = watch.stop()?;
    let stepped = reader.stop()?;
    let (stepped_worst, stepped_waits) = (
        stepped.worst_lock_wait(&samples),
        stepped.waits_seen(&samples, None),
    );
    println!("    previous stepped policy: the reader seen waiting in {stepped_waits} samples, worst lock wait {stepped_worst:?}");
    ensure!(
        stepped_waits > 0,
        "the stepped policy's queued reads were not seen: the measurement proves nothing"
    );
    let msg = e.to_string();
    ensure!(
        matches!(e, MigrateError::LockTimeout { attempts, .. } if attempts >= 3),
        "{msg}"
    );
    ensure!(
        msg.contains(&format!("pid {holder_pid} (")) && msg.contains("application `long_report`"),
        "{msg}"
    );
    ensure!(!msg.contains("SECRET-CUSTOMER-DATA"), "{msg}");

    // Once the transaction ends, the same command goes through.
    holder.batch_execute("COMMIT")?;
    expect_code(&migrate_cli(db.url(), &[])?, 0, "after the blocker ended")?;
    ensure!(history(&mut c)? == [1, 2, 3]);
    Ok(())
}

/// Behind a long read transaction, `migrate` (default policy) waits
/// without queueing: a separate reader keeps completing reads and is never
/// seen waiting for a lock, no lock request is ever seen queued on the
/// table while the transaction runs, and V3 applies once it ends. (The
/// reader's worst wait, in milliseconds: `cargo bench --bench locks`.)
///
/// The transaction is held 6 s, not the 20 s (the bench keeps
/// 20 s): what is measured is the same from the first poll on, and 6 s is
/// already about nine attempts of the previous policy, five of them at its
/// 500 ms cap.
fn behind_a_long_read_transaction_migrate_queues_no_reader_and_applies_after_it_ends(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let hold = Duration::from_secs(6);
    let db = env.migrated_database(2);
    let (mut holder, _) = long_read_transaction(&db)?;
    let reader = Reader::start(db.url())?;
    let watch = QueueWatch::start(&db);
    let release = std::thread::spawn(move || -> anyhow::Result<Instant> {
        std::thread::sleep(hold);
        let released = Instant::now();
        holder.batch_execute("COMMIT")?;
        Ok(released)
    });
    let start = Instant::now();
    let o = migrate_cli(db.url(), &[])?;
    let ended = Instant::now();
    let released = release.join().unwrap()?;
    std::thread::sleep(Duration::from_millis(200));
    let samples = watch.stop()?;
    let run = reader.stop()?;
    let (worst, wall, reads) = (run.worst_lock_wait(&samples), run.worst(), run.reads.len());
    // From the release on, the migration's one attempt may wait a moment
    // for a reader's lock, as designed; before it, nothing may queue.
    let queued = queued_samples(&samples, Some(released));
    let (waits_seen, read_while_held) = (
        run.waits_seen(&samples, Some(released)),
        run.completed_between(start, released),
    );
    expect_code(&o, 0, "migrate behind a transaction that ends")?;
    let (out, _) = text(&o);
    let applied = out
        .lines()
        .find(|l| l.contains("applied V3__"))
        .with_context(|| format!("V3 not applied: {out}"))?;
    println!("    migrate: {applied}");
    println!("    reader: {reads} reads ({read_while_held} while the transaction was held), worst lock wait {worst:?}, worst read {wall:?}; samples with a lock request queued on attached_functions while held: {queued}");
    ensure!(applied.contains("without queueing"), "{applied}");
    ensure!(ended > released, "applied before the transaction ended");
    ensure!(queued == 0, "{queued} samples saw a queued lock request");
    ensure!(
        read_while_held > 100,
        "the reader completed only {read_while_held} reads while migrate waited"
    );
    ensure!(
        waits_seen == 0,
        "the reader was seen waiting for a lock in {waits_seen} samples while the transaction was held"
    );
    let mut c = db.connect()?;
    ensure!(history(&mut c)? == [1, 2, 3]);
    ensure!(column_exists(&mut c, "attached_functions", "is_ready")?);
    Ok(())
}

/// A `-- rollsafe:no-transaction` file behind the long read transaction:
/// its `CREATE INDEX CONCURRENTLY` (SHARE UPDATE EXCLUSIVE, which queues no
/// reader, so no gate and the stepped attempts as before) builds while the
/// transaction is open; its ALTER TABLE then waits without queueing, like
/// a transactional migration, and runs once the transaction ends.
fn no_transaction_statements_wait_without_queueing_and_concurrent_builds_still_run(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = migrations_copy()?;
    std::fs::write(
        dir.path().join("V4__note_and_index.sql"),
        "-- rollsafe:no-transaction\n\
         CREATE INDEX CONCURRENTLY IF NOT EXISTS attached_functions_name ON attached_functions (name);\n\
         ALTER TABLE attached_functions ADD COLUMN IF NOT EXISTS note text;\n",
    )?;
    let db = env.migrated_database(3);
    let (mut holder, _) = long_read_transaction(&db)?;
    let reader = Reader::start(db.url())?;
    let watch = QueueWatch::start(&db);
    let hold = Duration::from_secs(3);
    let url = db.url().to_string();
    let release = std::thread::spawn(move || -> anyhow::Result<(Instant, bool)> {
        std::thread::sleep(hold);
        let released = Instant::now();
        let built_while_held: bool = db::connect(&url)?
            .query_one(
                "SELECT coalesce((SELECT indisvalid FROM pg_index \
                   WHERE indexrelid = to_regclass('attached_functions_name')), false)",
                &[],
            )?
            .get(0);
        holder.batch_execute("COMMIT")?;
        Ok((released, built_while_held))
    });
    let start = Instant::now();
    let o = migrate_cli(db.url(), &["--migrations", path_str(dir.path())])?;
    let (released, built_while_held) = release.join().unwrap()?;
    std::thread::sleep(Duration::from_millis(200));
    let samples = watch.stop()?;
    let run = reader.stop()?;
    let (worst, wall, reads) = (run.worst_lock_wait(&samples), run.worst(), run.reads.len());
    let queued = queued_samples(&samples, Some(released));
    let (waits_seen, read_while_held) = (
        run.waits_seen(&samples, Some(released)),
        run.completed_between(start, released),
    );
    ensure!(
        built_while_held,
        "the concurrent index was held back by a read transaction it does not conflict with"
    );
    expect_code(&o, 0, "no-transaction file behind a transaction that ends")?;
    let (out, _) = text(&o);
    println!(
        "    migrate: {}",
        out.lines().find(|l| l.contains("V4__")).unwrap_or_default()
    );
    println!("    reader: {reads} reads ({read_while_held} while the transaction was held), worst lock wait {worst:?}, worst read {wall:?}; samples with a lock request queued while held: {queued}");
    ensure!(queued == 0, "{queued} samples saw a queued lock request");
    ensure!(
        read_while_held > 20,
        "the reader completed only {read_while_held} reads while migrate waited"
    );
    ensure!(
        waits_seen == 0,
        "the reader was seen waiting for a lock in {waits_seen} samples while the transaction was held"
    );
    let mut c = db.connect()?;
    ensure!(history(&mut c)? == [1, 2, 3, 4]);
    let valid: bool = c
        .query_one(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'attached_functions_name'::regclass",
            &[],
        )?
        .get(0);
    ensure!(valid, "the concurrent index is not valid");
    Ok(())
}

/// When each sample was taken and which backends it saw waiting for a
/// lock on attached_functions.
type QueueSamples = Vec<(Instant, Vec<i32>)>;

/// Samples, every 5 ms on a connection of its own, the lock requests
/// waiting (not granted) on `db`'s attached_functions, with their pids: a
/// migration that waits without queueing never makes one while a
/// conflicting holder is there, and a reader queued behind one shows up.
struct QueueWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<anyhow::Result<QueueSamples>>,
}

impl QueueWatch {
    fn start(db: &Database) -> QueueWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let url = db.url().to_string();
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || -> anyhow::Result<QueueSamples> {
                let mut c = db::connect(&url)?;
                let mut samples = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    let waiting: Vec<i32> = c
                        .query(
                            "SELECT pid FROM pg_locks WHERE NOT granted AND pid IS NOT NULL \
                              AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                              AND relation = to_regclass('attached_functions')",
                            &[],
                        )?
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    samples.push((at, waiting));
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(samples)
            })
        };
        QueueWatch { stop, thread }
    }

    fn stop(self) -> anyhow::Result<QueueSamples> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the queue watcher panicked"))?
    }
}

/// How many samples taken before `until` (all, when None) saw a lock
/// request waiting.
fn queued_samples(samples: &[(Instant, Vec<i32>)], until: Option<Instant>) -> usize {
    samples
        .iter()
        .filter(|(at, waiting)| until.map_or(true, |u| *at < u) && !waiting.is_empty())
        .count()
}

fn a_held_migration_lock_makes_migrate_wait_then_refuse(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(2);
    let mut other = db.connect()?;
    let other_pid: i32 = other.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    other.execute(
        "SELECT pg_advisory_lock($1)",
        &[&migrate::ADVISORY_LOCK_KEY],
    )?;
    let o = migrate_cli(db.url(), &["--migrator-wait", "1s"])?;
    expect_code(&o, 1, "migrate while another migrator holds the lock")?;
    let (_, err) = text(&o);
    ensure!(err.lines().count() == 1, "{err}");
    ensure!(
        err.contains("another rollsafe migrate") && err.contains(&format!("pid {other_pid}")),
        "{err}"
    );
    let mut c = db.connect()?;
    ensure!(history(&mut c)? == [1, 2], "applied without the lock");
    // Released while a second migrator polls: it goes through.
    let child = cli()
        .args([
            "migrate",
            "--database-url",
            db.url(),
            "--migrator-wait",
            "30s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    std::thread::sleep(Duration::from_millis(500));
    other.execute(
        "SELECT pg_advisory_unlock($1)",
        &[&migrate::ADVISORY_LOCK_KEY],
    )?;
    expect_code(
        &child.wait_with_output()?,
        0,
        "migrate after the lock was released",
    )?;
    ensure!(history(&mut c)? == [1, 2, 3]);
    Ok(())
}

struct BadCase {
    name: &'static str,
    args: Vec<String>,
    code: i32,
    /// Words the one-line error must contain.
    says: &'static [&'static str],
}

fn bad_inputs_give_one_line_errors_and_change_nothing(env: &TestEnv) -> anyhow::Result<()> {
    const PW: &str = "Sekret-Pw-77";
    let db = env.migrated_database(3);
    let url = db.url().to_string();
    let real_pw = password_of(&url);
    let pending_db = env.migrated_database(2);

    let edited = migrations_copy()?;
    let v3 = edited.path().join("V3__attached_functions_is_ready.sql");
    std::fs::write(
        &v3,
        std::fs::read_to_string(&v3)? + "\n-- edited after apply\n",
    )?;
    let behind = migrations_copy()?;
    std::fs::remove_file(behind.path().join("V3__attached_functions_is_ready.sql"))?;
    let gone = migrations_copy()?;
    std::fs::remove_file(gone.path().join("V2__attached_functions.sql"))?;
    let sql_error = migrations_copy()?;
    std::fs::write(
        sql_error.path().join("V4__broken.sql"),
        "CREATE TABLE v4_half (id int);\nALTER TABLE no_such_table ADD COLUMN x int;",
    )?;
    let bad_name = migrations_copy()?;
    std::fs::write(
        bad_name.path().join("V5_missing_underscore.sql"),
        "SELECT 1;",
    )?;
    let dup = migrations_copy()?;
    std::fs::write(dup.path().join("V03__again.sql"), "SELECT 1;")?;
    let not_utf8 = migrations_copy()?;
    std::fs::write(
        not_utf8.path().join("V4__latin1.sql"),
        b"-- caf\xe9\nSELECT 1;",
    )?;
    let empty = tempfile::tempdir()?;

    let s = |x: &str| x.to_string();
    let dir = |d: &tempfile::TempDir| vec![s("--migrations"), path_str(d.path()).to_string()];
    let with = |u: &str, mut extra: Vec<String>| {
        let mut v = vec![s("--database-url"), u.to_string()];
        v.append(&mut extra);
        v
    };
    let wrong_pw = with_password(&url, PW);
    let missing_db = db::with_database(
        &with_password(&url, real_pw.as_deref().unwrap_or(PW)),
        "no_such_db_rollsafe",
    );
    let unreachable = format!("postgres://app:{PW}@127.0.0.1:1/x");
    let cases = vec![
        BadCase {
            name: "bad URL",
            args: with(&format!("postgres://app:{PW}@host:notaport/x"), vec![]),
            code: 2,
            says: &["cannot connect", "URL"],
        },
        BadCase {
            name: "unknown URL option",
            args: with(&format!("{url}?nonsense=1"), vec![]),
            code: 2,
            says: &["nonsense"],
        },
        BadCase {
            name: "unknown sslmode",
            args: with(
                &format!("postgres://app:{PW}@127.0.0.1:1/x?sslmode=maybe"),
                vec![],
            ),
            code: 2,
            says: &["sslmode"],
        },
        BadCase {
            name: "unreachable host",
            args: with(&unreachable, vec![]),
            code: 2,
            says: &["cannot connect", "server runs"],
        },
        BadCase {
            name: "wrong password",
            args: with(&wrong_pw, vec![]),
            code: 2,
            says: &["password"],
        },
        BadCase {
            name: "missing database",
            args: with(&missing_db, vec![]),
            code: 2,
            says: &["no_such_db_rollsafe", "create the database"],
        },
        BadCase {
            name: "missing migrations dir",
            args: with(
                &url,
                vec![s("--migrations"), s("/nonexistent/rollsafe-migrations")],
            ),
            code: 2,
            says: &["does not exist"],
        },
        BadCase {
            name: "empty migrations dir",
            args: with(&url, dir(&empty)),
            code: 2,
            says: &["no migration files"],
        },
        BadCase {
            name: "malformed file name",
            args: with(&url, dir(&bad_name)),
            code: 2,
            says: &["V5_missing_underscore.sql", "V<version>__<name>.sql"],
        },
        BadCase {
            name: "duplicate version",
            args: with(&url, dir(&dup)),
            code: 2,
            says: &["version 3 is used twice"],
        },
        BadCase {
            name: "non-UTF-8 file",
            args: with(&url, dir(&not_utf8)),
            code: 2,
            says: &["V4__latin1.sql", "UTF-8"],
        },
        BadCase {
            name: "edited applied migration",
            args: with(&url, dir(&edited)),
            code: 1,
            says: &[
                "V3__attached_functions_is_ready.sql",
                "edited after it was applied",
                "checksum",
                "new version",
            ],
        },
        BadCase {
            name: "database ahead of the files",
            args: with(&url, dir(&behind)),
            code: 1,
            says: &["ahead of the code", "V3"],
        },
        BadCase {
            name: "applied file deleted",
            args: with(&url, dir(&gone)),
            code: 1,
            says: &["V2", "no file", "restore"],
        },
        BadCase {
            name: "SQL error inside a migration",
            args: with(&url, dir(&sql_error)),
            code: 1,
            says: &["V4 (V4__broken.sql) failed", "no_such_table", "rolled back"],
        },
        BadCase {
            name: "target that does not exist",
            args: with(&url, vec![s("--target"), s("9")]),
            code: 2,
            says: &["--target 9", "the files have V1..V3"],
        },
        BadCase {
            name: "sslmode=require on a server without TLS",
            args: with(&format!("{url}?sslmode=require"), vec![]),
            code: 2,
            says: &["does not support TLS"],
        },
        BadCase {
            name: "unreadable sslrootcert",
            args: with(
                &format!("{url}?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"),
                vec![],
            ),
            code: 2,
            says: &["sslrootcert", "/nonexistent/ca.pem"],
        },
        BadCase {
            name: "dry run of an edited migration",
            args: with(&url, {
                let mut v = dir(&edited);
                v.push(s("--dry-run"));
                v
            }),
            code: 1,
            says: &["edited after it was applied"],
        },
    ];
    ensure!(cases.len() >= 12);
    // Cases that fail on the files or the flags must also leave a database
    // with V3 pending untouched (refused before anything runs).
    const ALSO_WITH_V3_PENDING: &[&str] = &[
        "missing migrations dir",
        "empty migrations dir",
        "malformed file name",
        "duplicate version",
        "non-UTF-8 file",
        "target that does not exist",
        "sslmode=require on a server without TLS",
        "unreadable sslrootcert",
    ];
    let before = (snapshot(&db)?, snapshot(&pending_db)?);
    let mut failures = Vec::new();
    let mut runs = 0;
    for case in &cases {
        let mut variants = vec![("at V3", case.args.clone())];
        if ALSO_WITH_V3_PENDING.contains(&case.name) {
            let v2_args = case
                .args
                .iter()
                .map(|a| a.replace(db.name(), pending_db.name()))
                .collect();
            variants.push(("V3 pending", v2_args));
        }
        for (variant, args) in variants {
            runs += 1;
            let mut full = vec![s("migrate")];
            full.extend(args);
            let refs: Vec<&str> = full.iter().map(String::as_str).collect();
            let o = rollsafe(&refs)?;
            let (out, err) = text(&o);
            let all = format!("{out}{err}");
            let mut problems = Vec::new();
            if o.status.code() != Some(case.code) {
                problems.push(format!(
                    "exit {:?}, expected {}",
                    o.status.code(),
                    case.code
                ));
            }
            if err.lines().count() != 1 {
                problems.push(format!(
                    "stderr is {} lines, expected 1",
                    err.lines().count()
                ));
            }
            for w in case.says {
                if !err.contains(w) {
                    problems.push(format!("error does not say `{w}`"));
                }
            }
            for pw in [Some(PW.to_string()), real_pw.clone()]
                .into_iter()
                .flatten()
            {
                if all.contains(&pw) {
                    problems.push("a password appears in the output".into());
                }
            }
            if !problems.is_empty() {
                failures.push(format!(
                    "{} ({variant}): {}\n    stderr: {}",
                    case.name,
                    problems.join("; "),
                    err.trim()
                ));
            }
        }
    }
    ensure!(runs > cases.len());
    ensure!(
        snapshot(&db)? == before.0,
        "a bad input changed the database at V3"
    );
    ensure!(
        snapshot(&pending_db)? == before.1,
        "a bad input changed the database with V3 pending"
    );
    if !failures.is_empty() {
        bail!(
            "{} case(s) failed:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    Ok(())
}

fn library_refuses_drift_before_running_anything(env: &TestEnv) -> anyhow::Result<()> {
    // Divergent V2 with V3 pending: nothing may run, not even V3.
    let db = env.migrated_database(2);
    let dir = migrations_copy()?;
    let v2 = dir.path().join("V2__attached_functions.sql");
    std::fs::write(
        &v2,
        std::fs::read_to_string(&v2)?.replace("completion_offset", "completion_offset2"),
    )?;
    let catalog = Catalog::from_dir(dir.path())?;
    let err = migrate::migrate(db.url(), &catalog, &Options::default()).unwrap_err();
    ensure!(
        matches!(err, MigrateError::Drift(_)) && err.exit_code() == 1,
        "{err}"
    );
    let mut c = db.connect()?;
    ensure!(history(&mut c)? == [1, 2]);
    ensure!(
        !column_exists(&mut c, "attached_functions", "is_ready")?,
        "V3 ran despite drift"
    );
    let err = migrate::plan(db.url(), &catalog, &Options::default()).unwrap_err();
    ensure!(matches!(err, MigrateError::Drift(_)), "{err}");
    // Out of order: history V1, V3 (V2 missing from history, file present).
    let db = env.fresh_database();
    let mut c = db.connect()?;
    let emb = Catalog::embedded()?;
    let out_of_order = write_dir(&[
        (
            "V1__collections_and_functions.sql",
            &emb.get(1).unwrap().sql,
        ),
        ("V2__late.sql", "CREATE TABLE late (id int);"),
        ("V3__early.sql", "CREATE TABLE early (id int);"),
    ])?;
    let cat = Catalog::from_dir(out_of_order.path())?;
    // V1 and V3 applied through a catalog without V2.
    let skip = write_dir(&[
        (
            "V1__collections_and_functions.sql",
            &emb.get(1).unwrap().sql,
        ),
        ("V3__early.sql", "CREATE TABLE early (id int);"),
    ])?;
    migrate::migrate(
        db.url(),
        &Catalog::from_dir(skip.path())?,
        &Options::default(),
    )?;
    let err = migrate::migrate(db.url(), &cat, &Options::default()).unwrap_err();
    ensure!(
        err.to_string()
            .contains("V2 (V2__late.sql) was never applied but a newer version was"),
        "{err}"
    );
    ensure!(!table_exists(&mut c, "late")?);
    Ok(())
}

// -------------------------------------------------------------------- TLS

pub(crate) struct Pki {
    pub ca_pem: Vec<u8>,
    pub other_ca_pem: Vec<u8>,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

/// A CA, a second unrelated CA, and a server certificate signed by the
/// first for `other.example` and `localhost` (not for 127.0.0.1).
pub(crate) fn make_pki() -> anyhow::Result<Pki> {
    use openssl::asn1::Asn1Time;
    use openssl::bn::{BigNum, MsbOption};
    use openssl::hash::MessageDigest;
    use openssl::pkey::{PKey, Private};
    use openssl::rsa::Rsa;
    use openssl::x509::extension::{
        BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
    };
    use openssl::x509::{X509NameBuilder, X509};

    fn key() -> anyhow::Result<PKey<Private>> {
        Ok(PKey::from_rsa(Rsa::generate(2048)?)?)
    }
    fn name(cn: &str) -> anyhow::Result<openssl::x509::X509Name> {
        let mut n = X509NameBuilder::new()?;
        n.append_entry_by_text("CN", cn)?;
        Ok(n.build())
    }
    fn base(cn: &str, k: &PKey<Private>) -> anyhow::Result<openssl::x509::X509Builder> {
        let mut b = X509::builder()?;
        b.set_version(2)?;
        let mut serial = BigNum::new()?;
        serial.rand(64, MsbOption::MAYBE_ZERO, false)?;
        let serial = serial.to_asn1_integer()?;
        b.set_serial_number(&serial)?;
        let subject = name(cn)?;
        b.set_subject_name(&subject)?;
        b.set_pubkey(k)?;
        let (from, to) = (Asn1Time::days_from_now(0)?, Asn1Time::days_from_now(2)?);
        b.set_not_before(&from)?;
        b.set_not_after(&to)?;
        Ok(b)
    }
    fn ca(cn: &str) -> anyhow::Result<(X509, PKey<Private>)> {
        let k = key()?;
        let mut b = base(cn, &k)?;
        let issuer = name(cn)?;
        b.set_issuer_name(&issuer)?;
        b.append_extension(BasicConstraints::new().critical().ca().build()?)?;
        b.append_extension(
            KeyUsage::new()
                .critical()
                .key_cert_sign()
                .crl_sign()
                .build()?,
        )?;
        b.sign(&k, MessageDigest::sha256())?;
        Ok((b.build(), k))
    }
    let (ca_cert, ca_key) = ca("rollsafe test CA")?;
    let (other_ca, _) = ca("some other CA")?;
    let k = key()?;
    let mut b = base("other.example", &k)?;
    b.set_issuer_name(ca_cert.subject_name())?;
    b.append_extension(BasicConstraints::new().build()?)?;
    b.append_extension(
        KeyUsage::new()
            .critical()
            .digital_signature()
            .key_encipherment()
            .build()?,
    )?;
    b.append_extension(ExtendedKeyUsage::new().server_auth().build()?)?;
    let san = SubjectAlternativeName::new()
        .dns("other.example")
        .dns("localhost")
        .build(&b.x509v3_context(Some(&ca_cert), None))?;
    b.append_extension(san)?;
    b.sign(&ca_key, MessageDigest::sha256())?;
    Ok(Pki {
        ca_pem: ca_cert.to_pem()?,
        other_ca_pem: other_ca.to_pem()?,
        cert_pem: b.build().to_pem()?,
        key_pem: k.private_key_to_pem_pkcs8()?,
    })
}

/// Writes `pem` into the server's data directory through the server
/// itself, so that the file belongs to the server's OS user on every
/// backend (docker included); then `chmod 600` through `COPY TO PROGRAM`
/// (COPY TO creates 0644 and PostgreSQL refuses a key others can read).
/// The chmod COPY sends no rows: chmod does not read its input, and a row
/// written after it exited made the COPY fail with a broken pipe.
/// PEM has no characters COPY's text format would escape.
pub(crate) fn write_server_file(c: &mut Client, file: &str, pem: &[u8]) -> anyhow::Result<()> {
    let pem = std::str::from_utf8(pem)?;
    c.batch_execute(
        "CREATE TEMP TABLE IF NOT EXISTS pem_lines (n int, line text); TRUNCATE pem_lines",
    )?;
    for (i, line) in pem.lines().enumerate() {
        c.execute(
            "INSERT INTO pem_lines VALUES ($1, $2)",
            &[&(i as i32), &line],
        )?;
    }
    c.batch_execute(&format!(
        "DO $$ DECLARE path text := current_setting('data_directory') || '/{file}'; BEGIN \
           EXECUTE format('COPY (SELECT line FROM pem_lines ORDER BY n) TO %L', path); \
           EXECUTE format('COPY (SELECT 1 WHERE false) TO PROGRAM %L', 'chmod 600 ' || quote_literal(path)); \
         END $$"
    ))?;
    Ok(())
}

pub(crate) fn ssl_in_use(url: &str) -> anyhow::Result<bool> {
    let mut c = db::connect(url)?;
    Ok(c.query_one(
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        &[],
    )?
    .get(0))
}

fn tls_sslmodes_are_honoured(env: &TestEnv) -> anyhow::Result<()> {
    // ALTER SYSTEM on someone else's server is not ours to do: the trial is
    // shown as ignored there (common::own_server_only).
    ensure!(
        env.sandbox.kind() != BackendKind::Server,
        "needs a server of its own"
    );
    // A server of our own: turning ssl on must not touch the run's server.
    let sandbox = env.builder.start().context("a sandbox for the TLS test")?;
    let pki = make_pki()?;
    let mut admin = sandbox.connect_admin()?;
    write_server_file(&mut admin, "rollsafe_test.crt", &pki.cert_pem)?;
    write_server_file(&mut admin, "rollsafe_test.key", &pki.key_pem)?;
    admin.batch_execute("ALTER SYSTEM SET ssl_cert_file = 'rollsafe_test.crt'")?;
    admin.batch_execute("ALTER SYSTEM SET ssl_key_file = 'rollsafe_test.key'")?;
    admin.batch_execute("ALTER SYSTEM SET ssl = on")?;
    admin.batch_execute("SELECT pg_reload_conf()")?;
    let db = sandbox.fresh_database()?;
    let url = db.url().to_string();
    let sep = if url.contains('?') { '&' } else { '?' };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ssl_in_use(&format!("{url}{sep}sslmode=prefer"))? {
        if Instant::now() > deadline {
            let mut c = sandbox.connect_admin()?;
            let ssl: String = c.query_one("SHOW ssl", &[])?.get(0);
            let errors: Vec<String> = c
                .query("SELECT name || ': ' || coalesce(error, '') FROM pg_file_settings WHERE error IS NOT NULL", &[])?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let log: String = c
                .query_one(
                    "SELECT coalesce(pg_read_file(regexp_replace(current_setting('data_directory'), '/data$', '/server.log'), 0, 100000, true), '')",
                    &[],
                )?
                .get(0);
            let ssl_lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("SSL") || l.contains("key") || l.contains("certificate"))
                .collect();
            bail!("the server did not turn ssl on (ssl = {ssl}; settings errors: {errors:?}; log: {ssl_lines:?})");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let certs = tempfile::tempdir()?;
    let right_ca = certs.path().join("ca.pem");
    let wrong_ca = certs.path().join("other-ca.pem");
    std::fs::write(&right_ca, &pki.ca_pem)?;
    std::fs::write(&wrong_ca, &pki.other_ca_pem)?;
    let with = |q: &str| format!("{url}{sep}{q}");
    let host_as = |host: &str, q: &str| {
        let mut u = url::Url::parse(&url).unwrap();
        u.set_host(Some(host)).unwrap();
        let s = u.to_string();
        format!("{s}{}{q}", if s.contains('?') { '&' } else { '?' })
    };
    let pw = password_of(&url);

    ensure!(
        ssl_in_use(&with("sslmode=require"))?,
        "sslmode=require connected without TLS"
    );
    ensure!(
        !ssl_in_use(&with("sslmode=disable"))?,
        "sslmode=disable used TLS"
    );
    ensure!(
        ssl_in_use(&url)?,
        "no sslmode (prefer) did not use TLS on a TLS server"
    );
    let ca = right_ca.display();
    ensure!(
        ssl_in_use(&with(&format!("sslmode=verify-ca&sslrootcert={ca}")))?,
        "verify-ca with the right CA (host name not checked) failed"
    );
    ensure!(
        ssl_in_use(&host_as(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}")
        ))?,
        "verify-full with the right CA and a host named in the certificate failed"
    );
    let checks: [(String, &str); 2] = [
        (
            with(&format!(
                "sslmode=verify-full&sslrootcert={}",
                wrong_ca.display()
            )),
            "does not verify against sslrootcert",
        ),
        (
            host_as(
                "127.0.0.1",
                &format!("sslmode=verify-full&sslrootcert={ca}"),
            ),
            "does not name this host",
        ),
    ];
    for (bad, says) in checks {
        let err = match db::connect(&bad) {
            Ok(_) => bail!(
                "connected although the certificate must not verify: {}",
                db::redact_url(&bad)
            ),
            Err(e) => e,
        };
        let msg = err.to_string();
        ensure!(err.kind == db::ConnectErrorKind::Tls, "{msg}");
        ensure!(msg.contains(says) && !msg.contains('\n'), "{msg}");
        ensure!(
            !pw.as_deref().is_some_and(|p| msg.contains(p)),
            "password in {msg}"
        );
        // And through the CLI: exit 2, one line.
        let o = migrate_cli(&bad, &["--dry-run"])?;
        expect_code(&o, 2, "migrate with a certificate that does not verify")?;
        ensure!(
            text(&o).1.lines().count() == 1 && text(&o).1.contains(says),
            "{}",
            text(&o).1
        );
    }
    // The migrator works over verified TLS end to end.
    let o = migrate_cli(
        &host_as(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        &[],
    )?;
    expect_code(&o, 0, "migrate over verify-full")?;
    let mut c = db.connect()?;
    ensure!(history(&mut c)? == [1, 2, 3]);
    Ok(())
}

/// A reader of attached_functions, like the app's, in a thread on its own
/// connection: when each read started and how long it took.
struct Reader {
    stop: Arc<AtomicBool>,
    pid: i32,
    thread: std::thread::JoinHandle<anyhow::Result<Vec<(Instant, Duration)>>>,
}

/// What a [`Reader`] went through.
struct ReaderRun {
    pid: i32,
    reads: Vec<(Instant, Duration)>,
}

impl Reader {
    fn start(url: &str) -> anyhow::Result<Reader> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = db::connect(url)?;
        let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[])?.get(0);
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || -> anyhow::Result<Vec<(Instant, Duration)>> {
                let mut reads = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    c.query_one("SELECT count(*) FROM attached_functions", &[])?;
                    reads.push((t, t.elapsed()));
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(reads)
            })
        };
        Ok(Reader { stop, pid, thread })
    }

    fn stop(self) -> anyhow::Result<ReaderRun> {
        self.stop.store(true, Ordering::Relaxed);
        let reads = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("the reader thread panicked"))??;
        Ok(ReaderRun {
            pid: self.pid,
            reads,
        })
    }
}

impl ReaderRun {
    /// The longest read, whatever made it slow.
    fn worst(&self) -> Duration {
        self.reads.iter().map(|(_, d)| *d).max().unwrap_or_default()
    }

    /// How many samples (taken before `until`; all when None) saw this
    /// reader's backend waiting for a lock on the table.
    fn waits_seen(&self, samples: &[(Instant, Vec<i32>)], until: Option<Instant>) -> usize {
        samples
            .iter()
            .filter(|(at, waiting)| until.map_or(true, |u| *at < u) && waiting.contains(&self.pid))
            .count()
    }

    /// How many reads started at or after `from` and ended by `to`.
    fn completed_between(&self, from: Instant, to: Instant) -> usize {
        self.reads
            .iter()
            .filter(|(t, d)| *t >= from && *t + *d <= to)
            .count()
    }

    /// The longest read during which the watch saw this reader's backend
    /// waiting for a lock on the table: what a queued lock request cost
    /// it, as opposed to the machine's load.
    fn worst_lock_wait(&self, samples: &[(Instant, Vec<i32>)]) -> Duration {
        self.reads
            .iter()
            .filter(|(t, d)| {
                samples
                    .iter()
                    .any(|(at, waiting)| at >= t && *at <= *t + *d && waiting.contains(&self.pid))
            })
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    }
}

/// A diesel history whose no-transaction files are a lone `CREATE INDEX
/// CONCURRENTLY` without IF NOT EXISTS and a `DO` block committing its
/// batches: `migrate` applies it onto an empty database as diesel does
/// (was refused up front as not re-runnable), `status` shows every
/// version applied, and verify's kill-and-rerun judges the batches.
fn a_diesel_history_with_a_lone_concurrent_build_migrates_from_empty(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = crate::common::repo_root().join("tests/fixtures/layouts/diesel-lone-concurrent");
    let db = env.fresh_database();
    let o = rollsafe(&[
        "migrate",
        "--database-url",
        db.url(),
        "--migrations",
        path_str(&dir),
    ])?;
    expect_code(&o, 0, "migrate")?;
    let (code, v) = status_json(db.url(), Some(&dir))?;
    ensure!(code == 0, "status exit {code}: {v}");
    let states = states(&v);
    ensure!(
        states.len() == 4 && states.iter().all(|(_, s)| s == "applied"),
        "{states:?}"
    );
    let mut c = db.connect()?;
    let valid: bool = c
        .query_one(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'kilns_fired_at_idx'::regclass",
            &[],
        )?
        .get(0);
    ensure!(valid, "kilns_fired_at_idx is not valid");
    let report = rollsafe::verify::Verify::new(rollsafe::catalog::Catalog::from_dir(&dir)?)?
        .rows(2_000)
        .run(&env.sandbox)?;
    let errors: Vec<String> = report
        .errors()
        .map(|f| format!("{:?} {}: {}", f.migration, f.id, f.message))
        .collect();
    ensure!(errors.is_empty(), "{errors:#?}");
    ensure!(
        report
            .findings
            .iter()
            .any(|f| f.id == "apply.rerun-converges" && f.migration == Some(4)),
        "the batches were not rerun"
    );
    Ok(())
}

/// `N_name.up.sql`/`.down.sql` is sqlx's reversible folder and
/// golang-migrate's alike. Applied by sqlx (here: `migrate --layout sqlx`,
/// which writes sqlx's `_sqlx_migrations`), the folder read without
/// `--layout` used to be golang-migrate's: `status` showed every migration
/// pending and `migrate` ran the first again ("relation … already
/// exists"). The database's own history now says whose folder it is.
fn an_up_down_folder_sqlx_applied_is_read_as_sqlx_from_its_history(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    for (file, sql) in [
        ("20240301090000_create_lanterns.up.sql", "CREATE TABLE lanterns (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, wick text NOT NULL);"),
        ("20240301090000_create_lanterns.down.sql", "DROP TABLE lanterns;"),
        ("20240308090000_lantern_oil.up.sql", "ALTER TABLE lanterns ADD COLUMN oil_ml integer;"),
        ("20240308090000_lantern_oil.down.sql", "ALTER TABLE lanterns DROP COLUMN oil_ml;"),
    ] {
        std::fs::write(dir.path().join(file), sql)?;
    }
    let db = env.fresh_database();
    let folder = path_str(dir.path());
    let with_sqlx = rollsafe(&[
        "migrate",
        "--database-url",
        db.url(),
        "--migrations",
        folder,
        "--layout",
        "sqlx",
    ])?;
    expect_code(&with_sqlx, 0, "migrate --layout sqlx")?;
    let (code, v) = status_json(db.url(), Some(dir.path()))?;
    ensure!(code == 0, "status exit {code}: {v}");
    let states = states(&v);
    ensure!(
        states.len() == 2 && states.iter().all(|(_, s)| s == "applied"),
        "{states:?}"
    );
    let again = migrate_cli(db.url(), &["--migrations", folder])?;
    expect_code(&again, 0, "migrate without --layout")?;
    let (out, err) = text(&again);
    ensure!(!out.contains("applied 2024"), "applied again: {out}");
    ensure!(
        err.contains("as sqlx's") && err.contains("_sqlx_migrations"),
        "{err}"
    );
    Ok(())
}

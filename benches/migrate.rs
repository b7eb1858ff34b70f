//! V3 apply benchmark: the shipped `ADD COLUMN is_ready boolean NOT NULL
//! DEFAULT true` (through `rollsafe::migrate`) against the naive
//! `ADD COLUMN` + `UPDATE … SET is_ready = true` + `SET NOT NULL` in one
//! transaction, on a table of legacy rows. Prints time, WAL bytes, whether
//! the table was rewritten (relfilenode), rows updated (pg_stat_user_tables)
//! and its size; asserts nothing.
//!
//! `cargo bench --bench migrate` (ROLLSAFE_BENCH_ROWS = comma-separated row
//! counts, default `10000,1000000`; the sandbox comes from ROLLSAFE_POSTGRES
//! as everywhere). Throwaway servers run with fsync=off, so times are
//! lower than on a durable server; WAL volumes are what matters.

use std::time::{Duration, Instant};

use postgres::Client;
use rollsafe::catalog::Catalog;
use rollsafe::migrate::{self, Options};
use rollsafe::sandbox::{Database, Sandbox, SandboxBuilder};

/// Legacy-shaped rows (the app before is_ready never names it).
const SEED: &str = "\
    INSERT INTO collections (id, name, tenant_id, database_id) \
        VALUES (gen_random_uuid(), 'input', 'tenant', gen_random_uuid()); \
    INSERT INTO attached_functions \
        (id, name, tenant_id, database_id, input_collection_id, output_collection_name, \
         output_collection_id, function_id, function_params, last_run) \
    SELECT gen_random_uuid(), 'fn_' || g, 'tenant_' || (g % 100), c.database_id, c.id, \
           'out_' || g, NULL, 'ccf2e3ba-633e-43ba-9394-46b0c54c61e3', \
           jsonb_build_object('window', g % 60, 'label', md5(g::text)), now() \
      FROM generate_series(1, {rows}) g, (SELECT id, database_id FROM collections) c;";

const NAIVE: &str = "\
    BEGIN; \
    ALTER TABLE attached_functions ADD COLUMN is_ready boolean; \
    UPDATE attached_functions SET is_ready = true; \
    ALTER TABLE attached_functions ALTER COLUMN is_ready SET NOT NULL; \
    ALTER TABLE attached_functions ALTER COLUMN is_ready SET DEFAULT true; \
    COMMIT;";

struct Figures {
    elapsed: Duration,
    wal: i64,
    rewritten: bool,
    rows_updated: i64,
    size_before: i64,
    size_after: i64,
}

fn probe(c: &mut Client) -> (u32, String, i64, i64) {
    let row = c
        .query_one(
            "SELECT relfilenode, pg_current_wal_lsn()::text, \
                    pg_total_relation_size('attached_functions'), \
                    (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'attached_functions') \
               FROM pg_class WHERE relname = 'attached_functions'",
            &[],
        )
        .expect("probe");
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

fn measure(db: &Database, apply: impl FnOnce() -> Duration) -> Figures {
    let mut c = db.connect().expect("connect");
    c.batch_execute("CHECKPOINT").expect("checkpoint");
    std::thread::sleep(Duration::from_millis(1200)); // seeding's stats flushed
    let (node, lsn, size_before, upd_before) = probe(&mut c);
    let elapsed = apply();
    // An UPDATE backfill keeps relfilenode; the updated-row count shows it.
    // Backends flush table stats at most once a second (and at exit).
    std::thread::sleep(Duration::from_millis(1200));
    let (node_after, _, size_after, upd_after) = probe(&mut c);
    let wal: i64 = c
        .query_one(
            "SELECT (pg_current_wal_lsn() - $1::text::pg_lsn)::bigint",
            &[&lsn],
        )
        .expect("wal")
        .get(0);
    let not_ready: i64 = c
        .query_one(
            "SELECT count(*) FROM attached_functions WHERE NOT is_ready",
            &[],
        )
        .expect("check")
        .get(0);
    assert_eq!(not_ready, 0, "legacy rows left not ready");
    Figures {
        elapsed,
        wal,
        rewritten: node != node_after,
        rows_updated: upd_after - upd_before,
        size_before,
        size_after,
    }
}

fn human(bytes: i64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn seeded_v2(sandbox: &Sandbox, catalog: &Catalog, rows: u64) -> Database {
    let db = sandbox.fresh_database().expect("fresh database");
    let options = Options {
        target: Some(2),
        ..Options::default()
    };
    migrate::migrate(db.url(), catalog, &options).expect("migrate to V2");
    let mut c = db.connect().expect("connect");
    c.batch_execute(&SEED.replace("{rows}", &rows.to_string()))
        .expect("seeding legacy rows");
    // Settled like a long-lived table: hint bits set, visibility map built.
    c.batch_execute("VACUUM ANALYZE attached_functions")
        .expect("vacuum");
    drop(c);
    db
}

fn main() {
    let sizes: Vec<u64> = std::env::var("ROLLSAFE_BENCH_ROWS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 1_000_000]);
    let sandbox = SandboxBuilder::from_env()
        .expect("ROLLSAFE_POSTGRES")
        .start()
        .expect("a sandbox");
    println!("migrate benchmark on {}", sandbox.describe());
    println!("{}", sandbox.server_version().unwrap_or_default());
    let catalog = Catalog::embedded().expect("embedded migrations");
    println!(
        "{:>9}  {:<28} {:>10} {:>10} {:>9} {:>10} {:>10} {:>10}",
        "rows", "variant", "time", "WAL", "rewrite", "rows upd", "size pre", "size post"
    );
    for rows in sizes {
        let t = Instant::now();
        let template = seeded_v2(&sandbox, &catalog, rows);
        let seed_time = t.elapsed();
        let safe_db = sandbox.clone_database(&template).expect("clone");
        let naive_db = sandbox.clone_database(&template).expect("clone");
        drop(template);

        let safe = measure(&safe_db, || {
            let out = migrate::migrate(safe_db.url(), &catalog, &Options::default())
                .expect("rollsafe migrate V3");
            assert_eq!(out.applied.len(), 1);
            out.applied[0].elapsed
        });
        let naive = measure(&naive_db, || {
            // Dropping this connection ends its backend, which flushes the
            // backend's table stats.
            let mut c = naive_db.connect().expect("connect");
            let t = Instant::now();
            c.batch_execute(NAIVE).expect("naive backfill");
            t.elapsed()
        });
        for (name, f) in [
            ("V3 ADD COLUMN DEFAULT true", &safe),
            ("naive ADD+UPDATE+NOT NULL", &naive),
        ] {
            println!(
                "{:>9}  {:<28} {:>10} {:>10} {:>9} {:>10} {:>10} {:>10}",
                rows,
                name,
                format!("{:.1} ms", f.elapsed.as_secs_f64() * 1000.0),
                human(f.wal),
                if f.rewritten { "yes" } else { "no" },
                f.rows_updated,
                human(f.size_before),
                human(f.size_after),
            );
        }
        println!(
            "{:>9}  (seeding {rows} legacy rows took {:.1} s)",
            "",
            seed_time.as_secs_f64()
        );
    }
}

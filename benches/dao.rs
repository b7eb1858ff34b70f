//! DAO benchmark: what the two-phase attach costs next to the legacy
//! one-phase create, how fast the ready-only getter is, and how 64 identical
//! concurrent attaches resolve. Prints figures; asserts only that contending
//! callers agree (a disagreement is a bug, not a figure).
//!
//! `cargo bench --bench dao`. The server comes from `ROLLSAFE_POSTGRES`
//! like everything else; `ROLLSAFE_BENCH_ATTACHES` sets the attaches per
//! configuration (default 960, split across the clients).

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;
use rollsafe::catalog::Catalog;
use rollsafe::dao::{AttachRequest, CurrentDao, LegacyDao};
use rollsafe::sandbox::{Database, Sandbox, SandboxBuilder};
use uuid::Uuid;

const RECORD_COUNTER: &str = "ccf2e3ba-633e-43ba-9394-46b0c54c61e3";

#[derive(Clone, Copy, PartialEq)]
enum App {
    TwoPhase,
    Legacy,
}

impl App {
    fn label(self) -> &'static str {
        match self {
            App::TwoPhase => "two-phase",
            App::Legacy => "legacy   ",
        }
    }
}

/// A database at V3 with one input collection per client.
fn database(sandbox: &Sandbox, inputs: usize) -> (Database, Uuid, Vec<Uuid>) {
    let db = sandbox.fresh_database().expect("fresh database");
    let mut c = db.connect().expect("connect");
    let catalog = Catalog::embedded().expect("embedded migrations");
    for m in catalog.up_to(3) {
        let mut tx = c.transaction().expect("begin");
        tx.batch_execute(&m.sql).expect("migration");
        tx.commit().expect("commit");
    }
    let database_id = Uuid::new_v4();
    let ids: Vec<Uuid> = (0..inputs).map(|_| Uuid::new_v4()).collect();
    for (i, id) in ids.iter().enumerate() {
        c.execute(
            "INSERT INTO collections (id, name, tenant_id, database_id) VALUES ($1, $2, 't', $3)",
            &[id, &format!("input_{i}"), &database_id],
        )
        .expect("seed");
    }
    (db, database_id, ids)
}

fn request(database_id: Uuid, input: Uuid, name: String) -> AttachRequest {
    AttachRequest {
        output_collection_name: format!("{name}_out"),
        name,
        tenant_id: "t".into(),
        database_id,
        input_collection_id: input,
        function_id: RECORD_COUNTER.parse().unwrap(),
        function_params: serde_json::json!({"window": 10}),
        min_records_for_invocation: 100,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

struct Figures {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

/// `total` attaches split over `clients` threads, each on its own
/// connection and its own input collection, released together.
fn attach_run(sandbox: &Sandbox, app: App, clients: usize, total: usize) -> Figures {
    let (db, database_id, inputs) = database(sandbox, clients);
    let per_client = total / clients;
    let barrier = Arc::new(Barrier::new(clients + 1));
    let handles: Vec<_> = inputs
        .into_iter()
        .enumerate()
        .map(|(k, input)| {
            let mut client: Client = db.connect().expect("connect");
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let mut lat = Vec::with_capacity(per_client);
                let requests: Vec<AttachRequest> = (0..per_client)
                    .map(|i| request(database_id, input, format!("f_{k}_{i}")))
                    .collect();
                let mut run = |attach: &mut dyn FnMut(&AttachRequest)| {
                    barrier.wait();
                    for req in &requests {
                        let t = Instant::now();
                        attach(req);
                        lat.push(t.elapsed());
                    }
                };
                // One DAO per connection for the whole run, as an app holds
                // it: each statement is prepared once.
                match app {
                    App::TwoPhase => {
                        let mut dao = CurrentDao::new(&mut client);
                        run(&mut |r| {
                            dao.attach(r).expect("attach");
                        });
                    }
                    App::Legacy => {
                        let mut dao = LegacyDao::new(&mut client);
                        run(&mut |r| {
                            dao.create(r).expect("create");
                        });
                    }
                }
                lat
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut lat: Vec<Duration> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("bench thread"))
        .collect();
    let wall = start.elapsed();
    lat.sort();
    Figures {
        per_sec: lat.len() as f64 / wall.as_secs_f64(),
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
    }
}

fn get_by_name_latency(sandbox: &Sandbox, rows: usize, lookups: usize) -> (Duration, Duration) {
    let (db, database_id, inputs) = database(sandbox, 1);
    let mut c = db.connect().expect("connect");
    let mut dao = CurrentDao::new(&mut c);
    for i in 0..rows {
        dao.attach(&request(database_id, inputs[0], format!("g_{i}")))
            .expect("attach");
    }
    let mut dao = CurrentDao::new(&mut c);
    let mut lat = Vec::with_capacity(lookups);
    for i in 0..lookups {
        let name = format!("g_{}", i % rows);
        let t = Instant::now();
        let row = dao.get_by_name(inputs[0], &name).expect("get_by_name");
        lat.push(t.elapsed());
        assert!(row.is_some(), "{name} must be visible");
    }
    lat.sort();
    (percentile(&lat, 0.5), percentile(&lat, 0.99))
}

/// 64 identical attaches released together; time until the last returns.
fn contention_round(db: &Database, database_id: Uuid, input: Uuid, round: usize) -> Duration {
    let n = 64;
    let clients: Vec<Client> = (0..n).map(|_| db.connect().expect("connect")).collect();
    let barrier = Arc::new(Barrier::new(n + 1));
    let req = request(database_id, input, format!("hot_{round}"));
    let handles: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let (barrier, req) = (Arc::clone(&barrier), req.clone());
            thread::spawn(move || {
                barrier.wait();
                CurrentDao::new(&mut client).attach(&req).expect("attach")
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    let elapsed = start.elapsed();
    let first = results[0].id;
    assert!(
        results.iter().all(|a| a.id == first),
        "contending callers disagree"
    );
    assert_eq!(
        results.iter().filter(|a| a.created).count(),
        1,
        "one creator"
    );
    elapsed
}

fn main() {
    let total: usize = std::env::var("ROLLSAFE_BENCH_ATTACHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(960);
    let sandbox = SandboxBuilder::from_env()
        .and_then(|b| b.start())
        .unwrap_or_else(|e| panic!("dao benchmark: no sandbox: {e}"));
    println!(
        "dao benchmark on {} ({})",
        sandbox.describe(),
        sandbox.server_version().unwrap_or_default()
    );
    println!("attach: {total} attaches per configuration, fresh V3 database each");
    for clients in [1, 8, 32] {
        // Alternate the apps so that neither always runs on a warmer server.
        let legacy = attach_run(&sandbox, App::Legacy, clients, total);
        let two_phase = attach_run(&sandbox, App::TwoPhase, clients, total);
        for (app, f) in [(App::TwoPhase, &two_phase), (App::Legacy, &legacy)] {
            println!(
                "  {clients:>2} clients {}: {:>7.0} attaches/s  p50 {}  p99 {}",
                app.label(),
                f.per_sec,
                ms(f.p50),
                ms(f.p99)
            );
        }
        println!(
            "  {clients:>2} clients two-phase/legacy: throughput x{:.2}, p50 x{:.2}",
            two_phase.per_sec / legacy.per_sec,
            two_phase.p50.as_secs_f64() / legacy.p50.as_secs_f64()
        );
    }
    let (p50, p99) = get_by_name_latency(&sandbox, 1000, 5000);
    println!(
        "get_by_name (1000 ready rows, 5000 lookups, 1 client): p50 {}  p99 {}",
        ms(p50),
        ms(p99)
    );
    let (db, database_id, inputs) = database(&sandbox, 1);
    let mut rounds: Vec<Duration> = (0..5)
        .map(|r| contention_round(&db, database_id, inputs[0], r))
        .collect();
    rounds.sort();
    println!(
        "64 identical concurrent attaches: all 64 agree on one id and one creator in every round; \
         time until all returned: median {}  max {} (5 rounds)",
        ms(rounds[2]),
        ms(rounds[4])
    );
}

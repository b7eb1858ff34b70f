//! Schemas of our own, shaped like real ones: how much of them a
//! rehearsal fills, how fast, and what a long history costs (issue 30's
//! measuring stick, issue 43's fixtures).
//!
//! Fixtures (refinery layout, migrations only, no apps: the generator seeds
//! every table; each folder's README lists what a generator meets there):
//! - `telemetry`: `tests/fixtures/schemas/telemetry/migrations`, weather
//!   stations whose readings and documents are JSON with NOT NULL
//!   generated columns, monthly partitions, regular-expression domains on
//!   UNIQUE keys, a two-character key, rules between columns, triggers
//!   that count and that refuse;
//! - `specimens`: `tests/fixtures/schemas/specimens/migrations`, a
//!   laboratory registry of coded keys (`^[A-Z]{3}-[0-9]{4,8}$`,
//!   `^[A-Z]{3}[0-9]$`), a deferred cycle of NOT NULL keys, unique keys
//!   over foreign keys, partitions open to MINVALUE and split again;
//! - `history`: the specimens fixture followed by generated migrations up
//!   to V300 (ROLLSAFE_BENCH_HISTORY_LEN), built into a temp dir: tables
//!   added, columns added and dropped, indexes (every tenth built
//!   CONCURRENTLY in a no-transaction file), triggers and their functions,
//!   SQL functions, data fixes.
//!
//! For each fixture, ROLLSAFE_BENCH_RUNS times (default 2), on the default
//! backend (`ROLLSAFE_POSTGRES`):
//! - floor: one throwaway server, the whole history applied once, stopped
//!   ([`common::floor_of`]; nothing seeded: the fixtures have no apps);
//! - `rollsafe verify --migrations DIR --since V{newest-1} --format json`
//!   (the real binary): its wall time against the floor; the tables it
//!   seeded, those the newest migration reaches (`rewrite.seeded-reach`;
//!   all of them when it works on rows), each one left out with its
//!   reason, the generator's warnings (`rewrite.seeding-warning`); and the
//!   seeding rate: the rows verify
//!   says it seeded (`applying on N seeded rows`) over the time from its
//!   `seeding N rows` line to the next progress line (the value search,
//!   the INSERTs, ANALYZE and the copy for the long-transaction probe);
//! - the generator alone ([`rollsafe::seed::generate::seed`], what verify
//!   runs) on a database at V{newest-1} of a throwaway server, connected as
//!   the sandbox's superuser (verify seeds as its migrator), every table:
//!   tables seeded / tables at V{newest-1} with the reason for each one
//!   left out, rows and INSERT time per table, so the tables that make
//!   seeding slow are named.
//!
//! Then, per run, the full-history cost: `rollsafe verify` (every migration
//! rehearsed) on the history's first ROLLSAFE_BENCH_FULL_MAX migrations
//! (default 10; a full verify of 300 takes hours today), stopped after
//! ROLLSAFE_BENCH_FULL_LIMIT seconds (default 600): its cost per
//! migration, its error findings, each migration's seeding time, and what
//! was not measured.
//!
//! `cargo bench --bench real_schemas` (ROLLSAFE_BENCH_ROWS: rows per table,
//! default verify's; ROLLSAFE_BENCH_FIXTURES: `telemetry,specimens,history`;
//! ROLLSAFE_BENCH_KEEP_HISTORY=DIR: a copy of the generated history there).
//! Prints figures; asserts nothing.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    apply, builder, env_or, floor_of, progress_marks, run_verify, run_verify_within, secs,
    stage_times, VerifyRun,
};
use rollsafe::catalog::Catalog;
use rollsafe::report::Report;
use rollsafe::seed::generate::{self, RowCounts};
use rollsafe::tables::{self, Kind};
use rollsafe::verify::DEFAULT_ROWS;

/// The migrations of fixture `domain` (`tests/fixtures/schemas/<domain>`).
fn fixture_dir(domain: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/schemas")
        .join(domain)
        .join("migrations")
}

/// The fixtures measured one by one, and the one the history grows on.
const FIXTURES: [&str; 2] = ["telemetry", "specimens"];
const HISTORY_BASE: &str = "specimens";

fn main() {
    let rows: u64 = env_or("ROLLSAFE_BENCH_ROWS", DEFAULT_ROWS);
    let runs: usize = env_or("ROLLSAFE_BENCH_RUNS", 2);
    let full_max: usize = env_or("ROLLSAFE_BENCH_FULL_MAX", 10);
    let full_limit = Duration::from_secs(env_or("ROLLSAFE_BENCH_FULL_LIMIT", 600));
    let length: i32 = env_or("ROLLSAFE_BENCH_HISTORY_LEN", 300);
    let wanted = std::env::var("ROLLSAFE_BENCH_FIXTURES")
        .unwrap_or_else(|_| format!("{},history", FIXTURES.join(",")));
    let history_dir = history(&fixture_dir(HISTORY_BASE), length);
    // A copy of the generated history, to rehearse it outside the bench.
    if let Ok(keep) = std::env::var("ROLLSAFE_BENCH_KEEP_HISTORY") {
        std::fs::create_dir_all(&keep).expect("ROLLSAFE_BENCH_KEEP_HISTORY");
        for f in std::fs::read_dir(history_dir.path())
            .expect("history")
            .flatten()
        {
            std::fs::copy(f.path(), Path::new(&keep).join(f.file_name())).expect("copy");
        }
        println!("history kept in {keep}");
    }
    let mut fixtures: Vec<(&str, PathBuf)> = FIXTURES
        .iter()
        .filter(|f| wanted.contains(*f))
        .map(|f| (*f, fixture_dir(f)))
        .collect();
    if wanted.contains("history") {
        fixtures.push(("history", history_dir.path().to_path_buf()));
    }
    let backend = std::env::var("ROLLSAFE_POSTGRES").unwrap_or_else(|_| "auto".into());
    println!("schemas of our own, backend {backend}, {rows} rows per table, {runs} runs");
    for run in 1..=runs {
        for (name, dir) in &fixtures {
            println!("== run {run}, fixture {name} ({})", dir.display());
            fixture(dir, rows);
        }
        println!("== run {run}, full history");
        full_history(history_dir.path(), full_max, full_limit, rows);
    }
}

/// One fixture's figures: floor, `--since` the newest, the generator alone.
fn fixture(dir: &Path, rows: u64) {
    let catalog = Catalog::from_dir(dir).expect("catalog");
    let newest = catalog.migrations().last().expect("a migration").version;
    let before = catalog.migrations()[catalog.migrations().len() - 2].version;
    let floor = floor_of(&catalog, &[], rows, None);
    let path = dir.to_str().expect("utf-8 path");
    let since = before.to_string();
    let rows_arg = rows.to_string();
    let run = run_verify(
        None,
        &[
            "--migrations",
            path,
            "--since",
            &since,
            "--rows",
            &rows_arg,
            "--format",
            "json",
        ],
    );
    println!(
        "floor (server + {} migrations once) {} | verify --since {before} {} ({:.1}x floor; {})",
        catalog.migrations().len(),
        secs(floor),
        secs(run.took),
        run.took.as_secs_f64() / floor.as_secs_f64(),
        run.verdict
    );
    let went: Vec<String> = stage_times(&run.progress, run.took)
        .iter()
        .map(|(kind, s)| format!("{kind} {s:.1} s"))
        .collect();
    println!("  where it went: {}", went.join(", "));
    seeded_tables(&run, newest, before);
    seeding_rate(&run, newest);
    generator_alone(&catalog, before, rows, 1).print();
    generator_alone(&catalog, before, rows, 2).print();
}

/// What verify seeded before the newest migration: the tables it reaches
/// (`rewrite.seeded-reach`; every table when the finding is absent), the
/// ones among them it could not seed and the generator's warnings.
fn seeded_tables(run: &VerifyRun, newest: i32, before: i32) {
    let Ok(report) = serde_json::from_str::<Report>(&run.stdout) else {
        println!("  no JSON report: {}", run.verdict);
        return;
    };
    let mine = |id: &'static str| {
        report
            .findings
            .iter()
            .filter(move |f| f.id == id && f.migration == Some(newest))
    };
    match mine("rewrite.seeded-reach").next() {
        Some(f) => println!(
            "  verify seeded at V{before} the tables V{newest} reaches: {} of {} ({})",
            f.evidence["tables"]
                .as_str()
                .map_or(0, |t| t.split(", ").count()),
            f.evidence["tables_in_schema"],
            f.evidence["tables"].as_str().unwrap_or_default()
        ),
        None => println!("  verify seeded at V{before} every table (V{newest} works on rows)"),
    }
    for f in mine("rewrite.table-not-seeded") {
        println!("    left out: {}", f.message);
    }
    for f in mine("rewrite.seeding-warning") {
        println!("    generator warning: {}", f.message);
    }
}

/// Rows per second of verify's seeding step of migration `v`, from its
/// progress lines.
fn seeding_rate(run: &VerifyRun, v: i32) {
    let marks = progress_marks(&run.progress);
    let start = format!("V{v}: seeding ");
    let Some(i) = marks.iter().position(|(_, s)| s.starts_with(&start)) else {
        println!("  seeding rate: not derivable (no `{start}…` progress line)");
        return;
    };
    let end = marks.get(i + 1).map_or(run.took.as_secs_f64(), |(t, _)| *t);
    let took = end - marks[i].0;
    let seeded: Option<i64> = marks.iter().find_map(|(_, s)| {
        let rest = s.strip_prefix(&format!("V{v}: applying on "))?;
        rest.split_whitespace().next()?.parse().ok()
    });
    match seeded {
        Some(n) => println!(
            "  seeding at V{v}: {n} rows in {took:.1} s ({:.0} rows/s; `{}` to the next step)",
            n as f64 / took.max(0.05),
            marks[i].1
        ),
        None => println!(
            "  seeding at V{v}: {took:.1} s; rows not derivable (no `V{v}: applying on N seeded rows` line)"
        ),
    }
}

/// What the generator did on its own at V{before}.
struct Alone {
    sessions: usize,
    before: i32,
    /// The tables at V{before} (partitions counted in their parent).
    tables: BTreeSet<String>,
    generated: generate::Generated,
    took: Duration,
}

/// The generator on a database at V{before}, on `sessions` sessions (1 or
/// 2: verify's).
fn generator_alone(catalog: &Catalog, before: i32, rows: u64, sessions: usize) -> Alone {
    let sandbox = builder(None).start().expect("sandbox");
    let db = sandbox.fresh_database().expect("database");
    let mut c = db.connect().expect("connect");
    for m in catalog.migrations().iter().filter(|m| m.version <= before) {
        apply(&mut c, m);
    }
    let tables = tables::list(&mut c)
        .expect("tables")
        .into_iter()
        .filter(|t| t.kind != Kind::MaterializedView && t.partition_of.is_none())
        .map(|t| t.name)
        .collect();
    let t = Instant::now();
    let another = || Ok(db.connect()?);
    let more: generate::MoreSessions<'_> = (sessions > 1).then_some(&another);
    let generated = generate::seed(&mut c, more, &RowCounts::new(rows), &[]).expect("generator");
    Alone {
        sessions,
        before,
        tables,
        generated,
        took: t.elapsed(),
    }
}

impl Alone {
    fn print(&self) {
        let g = &self.generated;
        let written: u64 = g.seeded.iter().map(|t| t.written).sum();
        let inserting: Duration = g.seeded.iter().map(|t| t.took).sum();
        println!(
            "  generator alone, {} session(s): {written} rows into {} tables in {} ({:.0} rows/s; INSERTs {}, {:.0} rows/s), {} tables not seeded",
            self.sessions,
            g.seeded.len(),
            secs(self.took),
            written as f64 / self.took.as_secs_f64(),
            secs(inserting),
            written as f64 / inserting.as_secs_f64().max(1e-3),
            g.unseeded.len()
        );
        let seeded = self
            .tables
            .iter()
            .filter(|t| g.written(t).is_some_and(|w| w > 0))
            .count();
        println!(
            "  tables seeded at V{}: {seeded} / {} ({:.0}%)",
            self.before,
            self.tables.len(),
            100.0 * seeded as f64 / self.tables.len().max(1) as f64
        );
        for u in &g.unseeded {
            println!("    left out: {}: {}", u.table, u.reason);
        }
        let mut slow: Vec<_> = g.seeded.iter().collect();
        slow.sort_by_key(|t| std::cmp::Reverse(t.took));
        for t in slow.iter().take(5) {
            println!(
                "    slowest INSERT: {} {} rows in {}{}",
                t.table,
                t.written,
                secs(t.took),
                t.note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
        }
        for t in g.seeded.iter().filter(|t| t.written < t.requested) {
            println!(
                "    fewer rows: {} {} of {}{}",
                t.table,
                t.written,
                t.requested,
                t.note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
        }
    }
}

/// A full verify of the history's first `n` migrations, stopped at
/// `limit`: its cost per migration and each migration's seeding step.
fn full_history(dir: &Path, n: usize, limit: Duration, rows: u64) {
    let catalog = Catalog::from_dir(dir).expect("catalog");
    let all = catalog.migrations().len();
    let n = n.min(all);
    if n == 0 {
        println!("full verify: not run (ROLLSAFE_BENCH_FULL_MAX=0)");
        return;
    }
    let prefix = tempfile::tempdir().expect("temp dir");
    for m in &catalog.migrations()[..n] {
        std::fs::write(prefix.path().join(&m.file), &m.sql).expect("write");
    }
    let path = prefix.path().to_str().expect("utf-8 path");
    let rows_arg = rows.to_string();
    let run = run_verify_within(
        None,
        &[
            "--migrations",
            path,
            "--rows",
            &rows_arg,
            "--format",
            "json",
        ],
        Some(limit),
    );
    match run.stopped_at {
        None => println!(
            "full verify of V1..V{n}: {} ({:.1} s per migration; {}); V{}..V{all} not measured (ROLLSAFE_BENCH_FULL_MAX={n})",
            secs(run.took),
            run.took.as_secs_f64() / n as f64,
            run.verdict,
            n + 1
        ),
        Some(at) => println!(
            "full verify of V1..V{n}: not finished, stopped after {} (ROLLSAFE_BENCH_FULL_LIMIT); its last step: `{}`; no cost per migration (the rehearsal had not ended)",
            secs(at),
            progress_marks(&run.progress)
                .last()
                .map_or("none", |(_, s)| s.as_str())
        ),
    }
    if let Ok(report) = serde_json::from_str::<Report>(&run.stdout) {
        let mut errors: std::collections::BTreeMap<&str, usize> = Default::default();
        for f in &report.findings {
            if f.severity == rollsafe::report::Severity::Error {
                *errors.entry(f.id.as_str()).or_default() += 1;
            }
        }
        let list: Vec<String> = errors.iter().map(|(id, n)| format!("{id} ×{n}")).collect();
        println!("  error findings: {}", list.join(", "));
    }
    let marks = progress_marks(&run.progress);
    let steps: Vec<String> = marks
        .iter()
        .enumerate()
        .filter(|(_, (_, s))| s.contains(": seeding "))
        .map(|(i, (at, s))| {
            let end = marks.get(i + 1).map_or(run.took.as_secs_f64(), |(t, _)| *t);
            format!("{} {:.1} s", s.split(':').next().unwrap_or(s), end - at)
        })
        .collect();
    println!("  seeding per migration: {}", steps.join(", "));
}

/// The base fixture's migrations, then generated ones up to `length`.
fn history(base: &Path, length: i32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = Catalog::from_dir(base).expect("base fixture");
    for m in base.migrations() {
        std::fs::write(dir.path().join(&m.file), &m.sql).expect("write");
    }
    let mut grown = Grown::default();
    let first = base.migrations().last().expect("a migration").version + 1;
    for v in first..=length {
        let (name, sql) = grown.migration(v, v - first);
        std::fs::write(dir.path().join(format!("V{v}__{name}.sql")), sql).expect("write");
    }
    dir
}

/// The state a generated history has reached: the tables it added and the
/// columns it added and has not dropped yet.
#[derive(Default)]
struct Grown {
    tables: Vec<String>,
    columns: std::collections::VecDeque<(String, String)>,
}

/// Base fixture tables the generated history also changes.
const BASE_TABLES: [&str; 6] = [
    "studies",
    "specimens",
    "labs",
    "subjects",
    "aliquots",
    "results",
];

impl Grown {
    /// The newest table added, else a base one.
    fn latest(&self) -> String {
        self.tables
            .last()
            .cloned()
            .unwrap_or_else(|| "studies".into())
    }

    /// A table to change at `v`: the added ones and the base's in turn.
    fn some_table(&self, v: i32) -> String {
        let pool: Vec<String> = BASE_TABLES
            .iter()
            .map(|s| s.to_string())
            .chain(self.tables.iter().cloned())
            .collect();
        pool[v as usize % pool.len()].clone()
    }

    /// Migration `v`, the `nth` generated: (name, SQL), its kind chosen
    /// in a cycle of ten that starts with a new table.
    fn migration(&mut self, v: i32, nth: i32) -> (String, String) {
        match nth % 10 {
            0 => self.new_table(v),
            1 | 5 => self.add_column(v),
            2 => {
                let t = self.latest();
                (
                    format!("index_{t}_created"),
                    format!("CREATE INDEX {t}_created_{v} ON {t} (created_at);\n"),
                )
            }
            3 => self.touch_trigger(),
            4 => self.data_fix(v),
            6 => {
                let t = self.latest();
                (
                    format!("index_{t}_label_concurrently"),
                    format!(
                        "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS {t}_label_{v} ON {t} (label);\n"
                    ),
                )
            }
            7 => self.drop_column(v),
            8 => {
                let t = self.latest();
                (
                    format!("function_{t}_count"),
                    format!(
                        "CREATE OR REPLACE FUNCTION {t}_per_lab_{v}(l integer) RETURNS bigint\nLANGUAGE sql STABLE AS $$ SELECT count(*) FROM {t} WHERE lab_id = l $$;\n"
                    ),
                )
            }
            _ => {
                let t = self.latest();
                (
                    format!("check_{t}_label"),
                    format!(
                        "ALTER TABLE {t} ADD CONSTRAINT {t}_label_{v} CHECK (char_length(label) <= 200) NOT VALID;\nALTER TABLE {t} VALIDATE CONSTRAINT {t}_label_{v};\n"
                    ),
                )
            }
        }
    }

    /// A feature table: an identity key, a key to labs or studies, a
    /// label, a score with a CHECK; every third with a composite UNIQUE.
    fn new_table(&mut self, v: i32) -> (String, String) {
        let t = format!("feature_{v}");
        let (owner, owner_type) = if v % 20 == 0 {
            (
                "lab_id",
                "integer NOT NULL REFERENCES labs (id) ON DELETE CASCADE",
            )
        } else {
            (
                "study_id",
                "bigint NOT NULL REFERENCES studies (id) ON DELETE CASCADE",
            )
        };
        // Every table gets lab_id: the generated functions count by it.
        let lab_col = if owner == "lab_id" {
            String::new()
        } else {
            "    lab_id integer REFERENCES labs (id),\n".to_string()
        };
        let unique = if v % 30 == 0 {
            format!(",\n    UNIQUE ({owner}, label)")
        } else {
            String::new()
        };
        let sql = format!(
            "CREATE TABLE {t} (\n    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n    {owner} {owner_type},\n{lab_col}    label text NOT NULL,\n    score integer NOT NULL DEFAULT 0,\n    created_at timestamptz NOT NULL DEFAULT now(),\n    CONSTRAINT {t}_score CHECK (score >= 0){unique}\n);\n"
        );
        self.tables.push(t.clone());
        (format!("create_{t}"), sql)
    }

    fn add_column(&mut self, v: i32) -> (String, String) {
        let t = self.some_table(v);
        let c = format!("note_{v}");
        let sql = if v % 2 == 0 {
            format!("ALTER TABLE {t} ADD COLUMN {c} integer NOT NULL DEFAULT 0;\n")
        } else {
            format!("ALTER TABLE {t} ADD COLUMN {c} text;\n")
        };
        self.columns.push_back((t.clone(), c.clone()));
        (format!("add_{t}_{c}"), sql)
    }

    /// Drops the oldest column the history added, if one is left.
    fn drop_column(&mut self, v: i32) -> (String, String) {
        match self.columns.pop_front() {
            Some((t, c)) => (
                format!("drop_{t}_{c}"),
                format!("ALTER TABLE {t} DROP COLUMN IF EXISTS {c};\n"),
            ),
            None => self.add_column(v),
        }
    }

    /// An `updated_at` kept by a trigger on the newest table.
    fn touch_trigger(&mut self) -> (String, String) {
        let t = self.latest();
        let sql = format!(
            "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS updated_at timestamptz;\n\
             CREATE OR REPLACE FUNCTION touch_{t}() RETURNS trigger LANGUAGE plpgsql AS $$\n\
             BEGIN NEW.updated_at := now(); RETURN NEW; END;\n$$;\n\
             DROP TRIGGER IF EXISTS {t}_touch ON {t};\n\
             CREATE TRIGGER {t}_touch BEFORE UPDATE ON {t} FOR EACH ROW EXECUTE FUNCTION touch_{t}();\n"
        );
        (format!("trigger_{t}_touch"), sql)
    }

    /// A data fix of the kind real histories have: normalise what old
    /// code wrote.
    fn data_fix(&mut self, v: i32) -> (String, String) {
        let sql = if v % 20 == 4 {
            "UPDATE studies SET title = btrim(title) WHERE title <> btrim(title);\n".to_string()
        } else {
            let t = self.latest();
            format!("UPDATE {t} SET label = lower(label) WHERE label <> lower(label);\n")
        };
        ("data_fix".to_string(), sql)
    }
}

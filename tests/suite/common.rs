//! The test environment: one sandbox server for the whole run, a fresh
//! database per test, and the glue that turns `fn(&TestEnv) -> Result` into
//! libtest-mimic trials.
//!
//! The backend comes from `ROLLSAFE_POSTGRES` (auto, docker, local, or a
//! URL), exactly as the product reads it; `ci/test.sh` runs the suite once
//! per backend present on the machine.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use libtest_mimic::{Failed, Trial};
use rollsafe::sandbox::{Database, Sandbox, SandboxBuilder};

pub struct TestEnv {
    pub sandbox: Sandbox,
    pub builder: SandboxBuilder,
}

impl TestEnv {
    /// Starts the run's sandbox; a suite that cannot get one fails loudly.
    pub fn start() -> TestEnv {
        let builder = SandboxBuilder::from_env().expect("ROLLSAFE_POSTGRES is invalid");
        let started = Instant::now();
        let sandbox = builder
            .start()
            .unwrap_or_else(|e| panic!("test suite: no sandbox: {e}"));
        eprintln!(
            "test suite: sandbox = {} ({}), started in {:.1}s",
            sandbox.describe(),
            sandbox.server_version().unwrap_or_default(),
            started.elapsed().as_secs_f64()
        );
        TestEnv { sandbox, builder }
    }

    /// A fresh database of the run's server, dropped with the handle.
    pub fn fresh_database(&self) -> Database {
        self.sandbox
            .fresh_database()
            .expect("creating a fresh test database")
    }
}

/// The variables that would point a run elsewhere than its test says: the
/// suite's backend (a test that needs the server passes `--postgres`), a
/// database URL, and a CI runner's job summary (a run would append to it).
const CLI_ENV_REMOVED: [&str; 4] = [
    "ROLLSAFE_POSTGRES",
    "ROLLSAFE_POSTGRES_IMAGE",
    "DATABASE_URL",
    "GITHUB_STEP_SUMMARY",
];

/// The built `rollsafe` binary, for CLI tests: without the variables of
/// [`CLI_ENV_REMOVED`], stdin closed (nothing waits for a terminal).
pub fn cli() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rollsafe"));
    for var in CLI_ENV_REMOVED {
        command.env_remove(var);
    }
    command.stdin(Stdio::null());
    command
}

/// Runs `command` to its end: (exit code, -1 for a signal; stdout; stderr).
pub fn output(command: &mut Command) -> anyhow::Result<(i32, String, String)> {
    let out = command.output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The repository root (for `migrations/`, fixtures).
#[allow(dead_code)]
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub type TestFn = fn(&TestEnv) -> anyhow::Result<()>;

/// One trial per (name, fn); the env is shared (it is behind an Arc).
pub fn trials(module: &str, env: &std::sync::Arc<TestEnv>, tests: &[(&str, TestFn)]) -> Vec<Trial> {
    tests
        .iter()
        .map(|&(name, f)| {
            let env = std::sync::Arc::clone(env);
            trial(format!("{module}::{name}"), move || f(&env))
        })
        .collect()
}

/// A trial named `name` (`module::test`) running `body`, timed; for a row
/// of a table of cases.
pub fn trial(name: String, body: impl FnOnce() -> anyhow::Result<()> + Send + 'static) -> Trial {
    Trial::test(name.clone(), move || {
        timed(&name, body).map_err(|e| Failed::from(format!("{e:#}")))
    })
}

/// The trials that need a server of their own (they turn ssl on, rewrite
/// pg_hba.conf: not ours to do on someone else's server) shown as ignored
/// on the server backend, never run and counted as passed there.
pub fn own_server_only(env: &TestEnv, trials: Vec<Trial>, names: &[&str]) -> Vec<Trial> {
    let shared = env.sandbox.kind() == rollsafe::sandbox::BackendKind::Server;
    trials
        .into_iter()
        .map(|t| {
            let needs_own = names.iter().any(|n| t.name().ends_with(&format!("::{n}")));
            if needs_own && shared {
                eprintln!(
                    "{}: ignored: it needs a server of its own, and the backend is a given server",
                    t.name()
                );
            }
            t.with_ignored_flag(needs_own && shared)
        })
        .collect()
}

/// The tests that take longest, longest first, as measured on the 2-core
/// CI machine (the run prints its slowest: keep this list in step).
/// libtest-mimic hands trials to its threads in the order given: one of
/// these started last would run alone at the end while the other threads
/// idle, so they start first and the short tests fill in around them.
const SLOWEST: &[&str] = &[
    "verify::findings_are_the_same_alone_and_under_cpu_load",
    "verify::since_rehearses_only_later_migrations_and_judges_them_as_a_full_run",
    "target::from_target_rehearses_on_the_targets_own_schema",
    "target::from_target_dumps_over_tls_verified_against_the_ca",
    "target::from_target_copies_rows_only_from_tables_the_migrations_fill",
    "target::from_target_under_a_read_only_role_leaves_the_target_unchanged",
    "verify::sizes_from_a_real_database_drive_the_prediction",
    // The captures of apps' test suites (a framework's migrate and test
    // runner, a JVM, per app version): registered last, they were the
    // run's tail, two or three of them alone on the cores for a minute.
    "frameworks::alembic_apps_captured_from_their_tests_catch_the_dropped_server_default",
    "frameworks::activerecord_apps_captured_from_their_test_env_catch_the_default_that_hides_rows",
    "frameworks::django_apps_captured_from_their_test_databases_catch_the_dropped_default",
    "capture::python_app_versions_captured_from_their_tests_catch_the_hidden_default",
    "capture::java_app_versions_captured_from_their_tests_catch_the_hidden_default",
    "capture::a_coded_unique_key_gets_values_its_pattern_allows_and_no_row_holds",
    "capture::a_coded_unique_key_captured_from_java_passes_and_the_hidden_default_fails",
    "first_contact::names_each_tool_runs_are_read_in_its_order_and_rehearsed",
    "project::ledger_not_null_without_default_breaks_the_old_apps_insert",
    "layouts::a_300_migration_diesel_history_reads_applies_and_rehearses_its_newest",
];

/// `trials` with the [`SLOWEST`] first, in that order; the rest keep
/// theirs.
pub fn slowest_first(trials: Vec<Trial>) -> Vec<Trial> {
    let rank = |t: &Trial| {
        SLOWEST
            .iter()
            .position(|n| *n == t.name())
            .unwrap_or(SLOWEST.len())
    };
    let mut ranked: Vec<(usize, usize, Trial)> = trials
        .into_iter()
        .enumerate()
        .map(|(i, t)| (rank(&t), i, t))
        .collect();
    ranked.sort_by_key(|(rank, i, _)| (*rank, *i));
    ranked.into_iter().map(|(_, _, t)| t).collect()
}

/// `trials!(module, env, [fn_a, fn_b])` names each trial after its fn.
#[macro_export]
macro_rules! trials {
    ($module:expr, $env:expr, [$($f:ident),* $(,)?]) => {
        $crate::common::trials($module, $env, &[$((stringify!($f), $f as $crate::common::TestFn)),*])
    };
}

impl TestEnv {
    /// A fresh database with the embedded migrations applied up to
    /// `target` (inclusive) by the real migrator (`rollsafe::migrate`:
    /// history table, advisory lock). The schema always comes from the real
    /// migration files, never from hand-written DDL.
    #[allow(dead_code)]
    pub fn migrated_database(&self, target: i32) -> Database {
        let catalog = rollsafe::catalog::Catalog::embedded().expect("embedded migrations");
        let db = self.fresh_database();
        let options = rollsafe::migrate::Options {
            target: Some(target),
            ..Default::default()
        };
        rollsafe::migrate::migrate(db.url(), &catalog, &options)
            .unwrap_or_else(|e| panic!("migrating {} to V{target}: {e}", db.name()));
        db
    }
}

/// A login role (`pg_read_all_data`) that may read everything and write nothing.
pub struct ReadOnlyRole {
    name: String,
    pub url: String,
    admin: String,
}

impl ReadOnlyRole {
    pub fn create(env: &TestEnv, db: &rollsafe::sandbox::Database) -> anyhow::Result<ReadOnlyRole> {
        let name = format!("ro_{}", db.name());
        let mut admin = env.sandbox.connect_admin()?;
        admin.batch_execute(&format!(
            "CREATE ROLE {name} LOGIN PASSWORD 'ReadOnlyPw1'; GRANT pg_read_all_data TO {name};"
        ))?;
        let mut url = url::Url::parse(db.url())?;
        url.set_username(&name).unwrap();
        url.set_password(Some("ReadOnlyPw1")).unwrap();
        Ok(ReadOnlyRole {
            name,
            url: url.to_string(),
            admin: env.sandbox.admin_url().to_string(),
        })
    }
}

impl Drop for ReadOnlyRole {
    fn drop(&mut self) {
        if let Ok(mut c) = rollsafe::db::connect(&self.admin) {
            let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name));
        }
    }
}

/// Whether `path` exists on the suite's server's filesystem, asked of the
/// server itself (`pg_stat_file` as superuser): inside its container on
/// the docker backend, on this machine for local, on the given server's
/// machine for server. A hostile migration's `COPY … TO PROGRAM 'touch
/// /tmp/x'` lands there, not necessarily in this process's /tmp.
///
/// Fails, rather than answering "no", when the server cannot show its own
/// `/tmp`: a look that cannot see is not evidence that nothing is there.
pub fn exists_on_server(env: &TestEnv, path: &str) -> anyhow::Result<bool> {
    let mut admin = env.sandbox.connect_admin()?;
    // `modification` is set for any file that exists (`creation` is NULL
    // on Unix, so the whole record is never NOT NULL).
    let tmp_is_dir: Option<bool> = admin
        .query_one("SELECT (pg_stat_file('/tmp', true)).isdir", &[])?
        .get(0);
    anyhow::ensure!(
        tmp_is_dir == Some(true),
        "the server cannot show its /tmp (pg_stat_file('/tmp') = {tmp_is_dir:?}): cannot tell whether {path} exists there"
    );
    let exists: bool = admin
        .query_one(
            "SELECT (pg_stat_file($1, true)).modification IS NOT NULL",
            &[&path],
        )?
        .get(0);
    Ok(exists)
}

/// The password in a sandbox URL, for tests that prove it is never
/// printed. Fails when the URL has none: such a test could not see a
/// leak, so it must not pass (every backend's URL carries one; a server
/// URL given without one cannot run these tests).
pub fn password_of(url: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    url::Url::parse(url)?
        .password()
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .with_context(|| {
            format!(
                "{} has no password: cannot check that it is never printed",
                rollsafe::db::redact_url(url)
            )
        })
}

/// What check must never change: history and schema and row counts.
pub fn fingerprint(c: &mut postgres::Client) -> anyhow::Result<String> {
    let history: Vec<String> = c
        .query(
            "SELECT version || ':' || checksum || ':' || applied_on FROM refinery_schema_history ORDER BY version",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let schema = rollsafe::schema::Snapshot::read(c)?.to_json();
    let rows: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM attached_functions) + (SELECT count(*) FROM collections)",
            &[],
        )?
        .get(0);
    Ok(format!("{history:?}\n{schema}\n{rows}"))
}

/// The versions in refinery's history table, oldest first (none when the
/// table does not exist).
pub fn history(c: &mut postgres::Client) -> anyhow::Result<Vec<i32>> {
    let exists: bool = c
        .query_one(
            "SELECT to_regclass('refinery_schema_history') IS NOT NULL",
            &[],
        )?
        .get(0);
    if !exists {
        return Ok(vec![]);
    }
    Ok(c.query(
        "SELECT version FROM refinery_schema_history ORDER BY version",
        &[],
    )?
    .iter()
    .map(|r| r.get(0))
    .collect())
}

/// How long each test that ran took, for the run's closing summary.
static DURATIONS: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

/// Runs one test's body and records how long it took (pass or fail).
pub fn timed<T>(name: &str, body: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = body();
    let took = started.elapsed();
    DURATIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((name.to_string(), took));
    result
}

/// Prints the `n` slowest tests of the run and the time all tests took
/// together (more than the wall time when they run in parallel), so every
/// run says where its time went.
pub fn print_slowest(n: usize) {
    let mut all = DURATIONS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if all.is_empty() {
        return;
    }
    all.sort_by_key(|(_, took)| std::cmp::Reverse(*took));
    let total: Duration = all.iter().map(|(_, d)| *d).sum();
    eprintln!(
        "test suite: {} tests took {:.0}s together; the {} slowest:",
        all.len(),
        total.as_secs_f64(),
        n.min(all.len())
    );
    for (name, took) in all.iter().take(n) {
        eprintln!("  {:>7.1}s  {name}", took.as_secs_f64());
    }
    // Every test's time, for finding where a run's time goes
    // (`ROLLSAFE_TEST_DURATIONS=<file>`: seconds, a tab, the name).
    if let Some(path) = std::env::var_os("ROLLSAFE_TEST_DURATIONS") {
        let lines: String = all
            .iter()
            .map(|(name, took)| format!("{:.1}\t{name}\n", took.as_secs_f64()))
            .collect();
        if let Err(e) = std::fs::write(&path, lines) {
            eprintln!(
                "could not write ROLLSAFE_TEST_DURATIONS {}: {e}",
                path.to_string_lossy()
            );
        }
    }
}

/// Which tests a run of the suite takes (`ROLLSAFE_SUITE`):
/// - `all` (the default): every test;
/// - `contract`: only the sandbox contract (start, connect, databases,
///   majors, leftovers, TLS), the part that differs between backends.
///   `ci/test.sh` runs everything once on the default backend and the
///   contract on every other backend present: the rest talks to a database
///   through the same `Database` handle whichever backend made it.
pub fn in_scope(test_name: &str) -> bool {
    match std::env::var("ROLLSAFE_SUITE").as_deref() {
        Ok("contract") => is_sandbox_contract(test_name),
        Ok("all") | Err(_) => true,
        Ok(other) => panic!("ROLLSAFE_SUITE={other}: expected `all` or `contract`"),
    }
}

fn is_sandbox_contract(test_name: &str) -> bool {
    test_name.starts_with("sandbox::") || test_name == "migrate::tls_sslmodes_are_honoured"
}

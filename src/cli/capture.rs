//! `rollsafe capture`: an app's statement set, from its test run against a
//! throwaway database or from a live database's `pg_stat_statements`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rollsafe::catalog::{Layout, ReadOptions};
use rollsafe::db;

use super::args::SandboxArgs;
use super::{could_not_run, fail};

#[derive(Args)]
pub(crate) struct CaptureArgs {
    /// postgres://USER:PASSWORD@HOST:PORT/DB of a database the app runs against, to read its pg_stat_statements (read-only; no values, only the deployed version). Ignored when a test command is given.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// The app version's name, written as `-- app:` (e.g. shop_v7).
    #[arg(long, value_name = "NAME")]
    pub(crate) app: String,
    /// With --database-url: the first migration version this app version needs, written as `-- needs:` (e.g. 3, V3, 20240101120000).
    #[arg(long, value_name = "V")]
    pub(crate) needs: Option<String>,
    /// Write the statement set to FILE (e.g. apps/shop_v7.sql) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) test_run: CaptureRunArgs,
}

/// `rollsafe capture … -- CMD`: the app's tests run against a throwaway
/// database.
#[derive(Args)]
pub(crate) struct CaptureRunArgs {
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
    /// The project's migrations (a folder, or a framework project's migrations or root: manage.py, alembic.ini, bin/rails, …): the test command runs on a database they built.
    #[arg(long, value_name = "DIR")]
    pub(crate) migrations: Option<PathBuf>,
    /// The tool whose folder --migrations is [default: detected].
    #[arg(long, value_name = "LAYOUT")]
    pub(crate) layout: Option<Layout>,
    /// The project's own command that applies its migrations, when they are code and rollsafe does not detect its framework: the schema the tests run on is what it sends.
    #[arg(long, value_name = "CMD")]
    pub(crate) migrate_command: Option<String>,
    /// The table that command records each migration in [default: the framework's].
    #[arg(long, value_name = "TABLE")]
    pub(crate) history_table: Option<String>,
    /// Apply the migrations up to this one (its label, e.g. 3, V3, 20240101120000) [default: the newest]; written as `-- needs:`.
    #[arg(long, value_name = "LABEL")]
    pub(crate) at: Option<String>,
    /// The database role the app connects as, created before the first migration so that the migrations' GRANTs give it what it gets [default: the role that owns the database and applied the migrations, not a superuser].
    #[arg(long, value_name = "NAME")]
    pub(crate) app_role: Option<String>,
    /// The test command, after `--`: it runs with DATABASE_URL, PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE set; what the server saw it run becomes the statement set.
    #[arg(last = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

pub fn run(args: CaptureArgs) -> ExitCode {
    if !args.test_run.command.is_empty() {
        return match capture_tests(&args) {
            Ok(code) => code,
            Err(e) => could_not_run(e),
        };
    }
    let (Some(url), Some(needs)) = (&args.database_url, &args.needs) else {
        return fail(2, &"capture needs a test command after `--` (rollsafe capture --migrations DIR --app NAME --out FILE -- CMD …), or --database-url URL and --needs V to read a live database's pg_stat_statements");
    };
    let set = match rollsafe::capture::capture(url, &args.app, needs) {
        Ok(set) => set,
        Err(e) => return fail(2, &db::scrub(&e.to_string(), url)),
    };
    if let Err(code) = write_captured(&args.out, &set.text) {
        return code;
    }
    eprintln!(
        "rollsafe capture: {} reads, {} writes, {} to review (-- review:), {} left out (transaction/session control, rollsafe's own queries){}",
        set.reads,
        set.writes,
        set.to_review,
        set.skipped,
        args.out
            .as_ref()
            .map_or(String::new(), |p| format!("; written to {}", p.display()))
    );
    ExitCode::SUCCESS
}

/// The set to `out`, else to stdout.
pub(crate) fn write_captured(out: &Option<PathBuf>, text: &str) -> Result<(), ExitCode> {
    match out {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| fail(2, &format!("cannot write {}: {e}", path.display()))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// `rollsafe capture … -- CMD`.
pub(crate) fn capture_tests(args: &CaptureArgs) -> anyhow::Result<ExitCode> {
    let run_args = &args.test_run;
    let (catalog, framework) = super::verify::load_project(
        &super::verify::ProjectArgs {
            migrations: run_args.migrations.as_deref(),
            migrate_command: run_args.migrate_command.as_deref(),
            history_table: run_args.history_table.as_deref(),
        },
        &ReadOptions {
            layout: run_args.layout,
            placeholders: Default::default(),
        },
        &run_args.sandbox,
    )?;
    // A framework's data migrations are applied as sent: the schema is
    // what its migrate built.
    let catalog = match &framework {
        Some(read) => read.catalog(Some(i32::MAX))?,
        None => catalog,
    };
    let at = match &run_args.at {
        Some(text) => Some(
            catalog
                .resolve_label(text)
                .map_err(|why| anyhow::anyhow!("--at {text}: {why}"))?,
        ),
        None => None,
    };
    let app_role = match &run_args.app_role {
        Some(text) => Some(rollsafe::app::role_name(text).ok_or_else(|| {
            anyhow::anyhow!("--app-role {text} is not a role name rollsafe can create; use a plain identifier (letters, digits, _) that does not start with pg_")
        })?),
        None => None,
    };
    let run = rollsafe::capture::run::TestRun {
        app: args.app.clone(),
        at,
        app_role,
        command: run_args.command.clone(),
        dir: None,
        creates_databases: framework.is_some(),
        history_table: framework.as_ref().map(|r| r.project.history.clone()),
        framework_history: framework.map(|r| r.history),
    };
    let builder = rollsafe::capture::run::log_settings(run_args.sandbox.builder()?);
    let sandbox = builder.start()?;
    let captured = rollsafe::capture::run::capture_tests(&sandbox, &catalog, &run)?;
    if let Err(code) = write_captured(&args.out, &captured.set.text) {
        return Ok(code);
    }
    let set = &captured.set;
    eprintln!(
        "rollsafe capture: {} at {}: {} reads, {} writes, {} to review (-- review:); left out: {} transaction/session control, {} DDL and maintenance, {} on scratch tables, {} on the migration tool's history table, {} that failed in every call, {} reads of the server's catalogue (introspection); the test command took {:.1}s, capture {:.1}s in all{}",
        args.app,
        captured.label,
        set.reads,
        set.writes,
        set.to_review,
        set.skipped,
        set.definitions,
        set.scratch,
        set.bookkeeping,
        set.failed,
        set.introspection,
        captured.command_time.as_secs_f64(),
        captured.total_time.as_secs_f64(),
        args.out
            .as_ref()
            .map_or(String::new(), |p| format!("; written to {}", p.display()))
    );
    Ok(ExitCode::SUCCESS)
}

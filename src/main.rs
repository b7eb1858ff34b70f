//! The `rollsafe` binary: parses arguments, calls the library, maps errors to
//! exit codes. Nothing else lives here.
//!
//! Exit codes (documented in README): 0 success / no error findings,
//! 1 error findings or a refused/failed migration, 2 could not run (usage,
//! connection, sandbox). `migrate` and `status` details: `rollsafe::migrate`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use rollsafe::catalog::Catalog;
use rollsafe::db;
use rollsafe::lock_policy::LockPolicy;
use rollsafe::report::{render, Format};
use rollsafe::sandbox::{BackendChoice, SandboxBuilder, DEFAULT_IMAGE, ENV_BACKEND, ENV_IMAGE};
use rollsafe::verify::predict::Sizes;
use rollsafe::verify::{Verify, DEFAULT_ROWS};

#[derive(Parser)]
#[command(
    name = "rollsafe",
    version,
    about = "Postgres migrations proven safe to roll out"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Rehearse every migration in throwaway Postgres and prove rolling-deploy safety.
    Verify(VerifyArgs),
    /// Apply pending migrations to a database: one migrator at a time, bounded lock waits, drift refused.
    Migrate(MigrateArgs),
    /// Show each migration version's state in a database: applied, pending, divergent, missing, unknown-newer.
    Status(StatusArgs),
    /// Read-only audit of a real database: history vs files, schema as expected, backfill and readiness invariants, invalid indexes, NOT VALID constraints.
    Check(CheckArgs),
}

/// Where throwaway Postgres comes from.
#[derive(Args, Clone)]
struct SandboxArgs {
    /// auto (docker if it works, else local binaries), docker, local, or a postgres:// URL of a server to create throwaway databases on.
    #[arg(long = "postgres", env = ENV_BACKEND, default_value = "auto", hide_env_values = true)]
    postgres: String,
    /// Container image for the docker backend.
    #[arg(long, env = ENV_IMAGE, default_value = DEFAULT_IMAGE)]
    image: String,
}

impl SandboxArgs {
    fn builder(&self) -> anyhow::Result<SandboxBuilder> {
        let choice: BackendChoice = self.postgres.parse()?;
        Ok(SandboxBuilder::from_env()?
            .backend(choice)
            .image(&self.image))
    }
}

#[derive(Args)]
struct VerifyArgs {
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// Directory of V<n>__<name>.sql files to rehearse instead of the embedded migrations (e.g. a proposed change).
    #[arg(long, value_name = "DIR")]
    migrations: Option<PathBuf>,
    /// Rehearse only the migrations after version V; those up to V are applied once, unchecked (a pull request's cost follows its change).
    #[arg(long, value_name = "V")]
    since: Option<i32>,
    /// Rows seeded per rehearsal (written like the live app versions write them).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_ROWS)]
    rows: u64,
    #[command(flatten)]
    report: ReportArgs,
    #[command(flatten)]
    lock: LockArgs,
    /// The longest any app statement may wait because of a migration (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    stall_budget: Duration,
    /// Production rows of a table, to predict lock holds at that size (repeatable: --table-rows bookings=48M).
    #[arg(long = "table-rows", value_name = "TABLE=ROWS")]
    table_rows: Vec<String>,
    /// Read production table sizes (pg_class.reltuples, read-only) from this database instead.
    #[arg(long, value_name = "URL", conflicts_with = "table_rows")]
    sizes_from: Option<String>,
    /// Only the static precheck: squawk's lint rules on the migration files, with lines. Starts no Postgres (no Docker, no binaries needed) and measures nothing: its findings are warnings.
    #[arg(long)]
    static_only: bool,
}

/// How migrations wait for table locks (`migrate` applies with it; `verify`
/// rehearses it behind a long transaction).
#[derive(Args)]
struct LockArgs {
    /// Cap of each attempt's lock_timeout: attempts start at 100ms and grow to it, so the app never queues longer behind a waiting lock (e.g. 500ms, 1s).
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    lock_timeout: Duration,
    /// How long to keep retrying a lock before giving up and naming the blocker (e.g. 5m, 30s).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    retry_for: Duration,
}

impl LockArgs {
    fn policy(&self) -> LockPolicy {
        LockPolicy::default()
            .max_timeout(self.lock_timeout)
            .retry_for(self.retry_for)
    }
}

/// `--format`, parsed by the library's [`Format`].
#[derive(Clone)]
struct FormatArg(Format);

impl std::str::FromStr for FormatArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse().map(FormatArg)
    }
}

/// An error that means "could not run" (exit 2) rather than "found problems".
fn could_not_run(e: anyhow::Error) -> ExitCode {
    eprintln!("rollsafe: error: {e:#}");
    ExitCode::from(2)
}

fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::load(args.migrations.as_deref())?;
    if args.static_only {
        let verify = match args.since {
            Some(v) => Verify::new(catalog)?.since(v)?,
            None => Verify::new(catalog)?,
        };
        return args.report.emit(&verify.static_only());
    }
    let sizes = match &args.sizes_from {
        Some(url) => Sizes::from_database(url)
            .map_err(|e| anyhow::anyhow!(db::scrub(&format!("{e:#}"), url)))?,
        None if args.table_rows.is_empty() => Sizes::default(),
        None => Sizes::from_pairs(args.table_rows.iter().map(String::as_str))
            .map_err(|e| anyhow::anyhow!("--table-rows {e}"))?,
    };
    let mut verify = Verify::new(catalog)?
        .rows(args.rows)
        .lock_policy(args.lock.policy())
        .stall_budget(args.stall_budget)
        .sizes(sizes);
    if let Some(v) = args.since {
        verify = verify.since(v)?;
    }
    // Progress only for a human watching; CI logs stay clean.
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        bar.set_message("starting throwaway Postgres");
        bar
    });
    if let Some(bar) = &bar {
        let bar = bar.clone();
        verify = verify.progress(move |s| bar.set_message(s.to_string()));
    }
    let result = args
        .sandbox
        .builder()?
        .start()
        .map_err(anyhow::Error::from)
        .and_then(|sandbox| Ok(verify.run(&sandbox)?));
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let report = result?;
    args.report.emit(&report)
}

/// The database and the migration files, shared by `migrate`, `status` and `check`.
#[derive(Args)]
struct TargetDbArgs {
    /// postgres://USER:PASSWORD@HOST:PORT/DB[?sslmode=disable|prefer|require|verify-ca|verify-full&sslrootcert=FILE]
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Directory of V<n>__<name>.sql files (default: the migrations embedded in rollsafe).
    #[arg(long)]
    migrations: Option<std::path::PathBuf>,
}

impl TargetDbArgs {
    fn catalog(&self) -> Result<Catalog, ExitCode> {
        Catalog::load(self.migrations.as_deref()).map_err(|e| fail(2, &e))
    }
}

#[derive(Args)]
struct MigrateArgs {
    #[command(flatten)]
    db: TargetDbArgs,
    /// Apply up to this version (inclusive); default: the latest.
    #[arg(long)]
    target: Option<i32>,
    /// Print the plan and the SQL of each pending migration; change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    lock: LockArgs,
    /// How long to wait for another `rollsafe migrate` on the same database.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    migrator_wait: std::time::Duration,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    db: TargetDbArgs,
    #[arg(long, value_enum, default_value = "text")]
    format: StatusFormat,
}

#[derive(Args)]
struct CheckArgs {
    #[command(flatten)]
    db: TargetDbArgs,
    /// Report not-ready attached functions older than this (e.g. 1h, 30m, 90s).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    stuck_after: Duration,
    #[command(flatten)]
    report: ReportArgs,
    /// Where to build the expected schema when no checked-in snapshot fits (only then is throwaway Postgres started).
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// How a findings report is written (`verify`, `check`).
#[derive(Args)]
struct ReportArgs {
    /// Report format: text, json or junit.
    #[arg(long, default_value = "text", value_parser = clap::value_parser!(FormatArg))]
    format: FormatArg,
    /// Write the report to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

impl ReportArgs {
    /// Writes the report; exit 0 when it passed, 1 when it has errors.
    fn emit(&self, report: &rollsafe::report::Report) -> anyhow::Result<ExitCode> {
        let text = render(report, self.format.0);
        match &self.output {
            Some(path) => {
                std::fs::write(path, &text)
                    .with_context(|| format!("cannot write the report to {}", path.display()))?;
                // The file is for machines; the log still shows the findings.
                if self.format.0 != Format::Text {
                    print!("{}", render(report, Format::Text));
                }
            }
            None => print!("{text}"),
        }
        Ok(if report.passed {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    }
}

fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::load(args.db.migrations.as_deref())?;
    let url = &args.db.database_url;
    let report = rollsafe::check::Check::new(catalog, args.sandbox.builder()?)
        .stuck_after(args.stuck_after)
        .run(url)
        .map_err(|e| anyhow::anyhow!(db::scrub(&e.to_string(), url)))?;
    args.report.emit(&report)
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum StatusFormat {
    Text,
    Json,
}

/// `5s`, `500ms`, `2m`, `1h`, `1h 30m` (humantime), or plain seconds.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration ({e}); e.g. 5s, 500ms, 2m, 1h"))
}

/// Prints a one-line error and returns `code`.
fn fail(code: u8, e: &dyn std::fmt::Display) -> ExitCode {
    let line = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("rollsafe: error: {line}");
    ExitCode::from(code)
}

fn migrate(args: MigrateArgs) -> ExitCode {
    use rollsafe::migrate::{self, Options};
    let catalog = match args.db.catalog() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let url = &args.db.database_url;
    let options = Options {
        target: args.target,
        lock: args.lock.policy(),
        migrator_wait: args.migrator_wait,
    };
    println!("database:   {}", db::redact_url(url));
    println!("migrations: {}", catalog.source);
    if args.dry_run {
        let plan = match migrate::plan(url, &catalog, &options) {
            Ok(p) => p,
            Err(e) => return fail(e.exit_code(), &db::scrub(&e.to_string(), url)),
        };
        print_position(plan.current, plan.target, plan.beyond_target);
        println!(
            "dry run: {} migration(s) would be applied, nothing changed",
            plan.pending.len()
        );
        for m in &plan.pending {
            println!("\n-- {m}\n{}", m.sql.trim_end());
        }
        return ExitCode::SUCCESS;
    }
    match migrate::migrate(url, &catalog, &options) {
        Ok(out) => {
            print_position(out.plan.current, out.plan.target, out.plan.beyond_target);
            for a in &out.applied {
                println!(
                    "applied {} in {:.1?}{}",
                    a.file,
                    a.elapsed,
                    if a.attempts > 1 {
                        format!(" ({} attempts)", a.attempts)
                    } else {
                        String::new()
                    }
                );
            }
            if out.applied.is_empty() {
                println!("nothing to apply");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code(), &db::scrub(&e.to_string(), url)),
    }
}

fn print_position(current: Option<i32>, target: i32, beyond: bool) {
    let at = current.map_or("empty (no migration applied)".to_string(), |v| {
        format!("V{v}")
    });
    println!("at:         {at}");
    println!(
        "target:     V{target}{}",
        if beyond {
            " (the database is already past it; nothing is ever undone)"
        } else {
            ""
        }
    );
}

fn status(args: StatusArgs) -> ExitCode {
    use rollsafe::migrate;
    let catalog = match args.db.catalog() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let url = &args.db.database_url;
    let st = match migrate::status(url, &catalog) {
        Ok(s) => s,
        Err(e) => return fail(e.exit_code(), &db::scrub(&e.to_string(), url)),
    };
    let drift = st.drift().count();
    match args.format {
        StatusFormat::Json => {
            let doc = serde_json::json!({
                "database": db::redact_url(url),
                "migrations": catalog.source.to_string(),
                "status": st,
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&doc).expect("status serialises")
            );
        }
        StatusFormat::Text => {
            println!("database:   {}", db::redact_url(url));
            println!("migrations: {} (latest V{})", catalog.source, st.latest);
            println!(
                "history:    {}",
                match (st.history_table, st.current) {
                    (false, _) => format!("no {} table (nothing applied)", migrate::HISTORY_TABLE),
                    (true, None) => "empty".to_string(),
                    (true, Some(v)) => format!("at V{v}"),
                }
            );
            for v in &st.versions {
                let state = serde_json::to_value(v.state).expect("state serialises");
                println!(
                    "V{:<4} {:<14} {:<25} {}",
                    v.version,
                    state.as_str().unwrap_or("?"),
                    v.applied_on.as_deref().map_or("-".to_string(), |a| {
                        chrono::DateTime::parse_from_rfc3339(a).map_or(a.to_string(), |t| {
                            t.to_utc().format("%Y-%m-%d %H:%M:%S UTC").to_string()
                        })
                    }),
                    v.file
                        .clone()
                        .unwrap_or_else(|| format!("(no file; applied as `{}`)", v.name))
                );
            }
            for v in st.drift() {
                if let Some(m) = v.drift_message() {
                    println!("problem: {m}");
                }
            }
        }
    }
    ExitCode::from(if drift > 0 { 1 } else { 0 })
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("ROLLSAFE_LOG", "warn"))
        .format_timestamp(None)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Verify(args) => verify(args),
        Command::Migrate(args) => return migrate(args),
        Command::Status(args) => return status(args),
        Command::Check(args) => check(args),
    };
    result.unwrap_or_else(could_not_run)
}

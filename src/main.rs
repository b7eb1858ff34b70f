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
use rollsafe::bounds;
use rollsafe::catalog::{Catalog, Layout, ReadOptions, TableName};
use rollsafe::config::ProjectConfig;
use rollsafe::dao::shipped;
use rollsafe::db;
use rollsafe::lock_policy::LockPolicy;
use rollsafe::report::events::VerifyEvent;
use rollsafe::report::output::{self, Destination, OutputSpec, Target};
use rollsafe::report::{render, Format};
use rollsafe::sandbox::{BackendChoice, SandboxBuilder, ENV_BACKEND};
use rollsafe::verify::evidence::predict::Sizes;
use rollsafe::verify::DEFAULT_ROWS;

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

// One value, parsed once at start: the size of its largest variant
// (verify's flags) costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
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
    /// Write an app's statement set from the database's pg_stat_statements (read-only), for `verify --apps`.
    Capture(CaptureArgs),
}

#[derive(Args)]
struct CaptureArgs {
    /// postgres://USER:PASSWORD@HOST:PORT/DB of a database the app runs against, to read its pg_stat_statements (read-only; no values, only the deployed version). Ignored when a test command is given.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The app version's name, written as `-- app:` (e.g. shop_v7).
    #[arg(long, value_name = "NAME")]
    app: String,
    /// With --database-url: the first migration version this app version needs, written as `-- needs:` (e.g. 3, V3, 20240101120000).
    #[arg(long, value_name = "V")]
    needs: Option<String>,
    /// Write the statement set to FILE (e.g. apps/shop_v7.sql) instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    #[command(flatten)]
    test_run: CaptureRunArgs,
}

/// `rollsafe capture … -- CMD`: the app's tests run against a throwaway
/// database.
#[derive(Args)]
struct CaptureRunArgs {
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// The project's migrations: the test command runs on a database they built.
    #[arg(long, value_name = "DIR")]
    migrations: Option<PathBuf>,
    /// The tool whose folder --migrations is [default: detected].
    #[arg(long, value_name = "LAYOUT")]
    layout: Option<Layout>,
    /// Apply the migrations up to this one (its label, e.g. 3, V3, 20240101120000) [default: the newest]; written as `-- needs:`.
    #[arg(long, value_name = "LABEL")]
    at: Option<String>,
    /// The database role the app connects as, created before the first migration so that the migrations' GRANTs give it what it gets [default: the role that owns the database and applied the migrations, not a superuser].
    #[arg(long, value_name = "NAME")]
    app_role: Option<String>,
    /// The test command, after `--`: it runs with DATABASE_URL, PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE set; what the server saw it run becomes the statement set.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

fn capture(args: CaptureArgs) -> ExitCode {
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
fn write_captured(out: &Option<PathBuf>, text: &str) -> Result<(), ExitCode> {
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
fn capture_tests(args: &CaptureArgs) -> anyhow::Result<ExitCode> {
    let run_args = &args.test_run;
    let catalog = Catalog::load_in(
        run_args.migrations.as_deref(),
        &ReadOptions {
            layout: run_args.layout,
            placeholders: Default::default(),
        },
    )?;
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
    };
    let builder = rollsafe::capture::run::log_settings(run_args.sandbox.builder()?);
    let sandbox = builder.start()?;
    let captured = rollsafe::capture::run::capture_tests(&sandbox, &catalog, &run)?;
    if let Err(code) = write_captured(&args.out, &captured.set.text) {
        return Ok(code);
    }
    let set = &captured.set;
    eprintln!(
        "rollsafe capture: {} at {}: {} reads, {} writes, {} to review (-- review:); left out: {} transaction/session control, {} DDL and maintenance, {} on scratch tables, {} on the migration tool's history table, {} that failed in every call; the test command took {:.1}s, capture {:.1}s in all{}",
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
        captured.command_time.as_secs_f64(),
        captured.total_time.as_secs_f64(),
        args.out
            .as_ref()
            .map_or(String::new(), |p| format!("; written to {}", p.display()))
    );
    Ok(ExitCode::SUCCESS)
}

/// Where throwaway Postgres comes from.
#[derive(Args, Clone)]
struct SandboxArgs {
    /// auto (docker if it works, else local binaries), docker, local, or a postgres:// URL of a server to create throwaway databases on [default: auto; for verify, rollsafe.toml's `postgres` when set].
    #[arg(long = "postgres", env = ENV_BACKEND, hide_env_values = true)]
    postgres: Option<String>,
    /// Container image for the docker backend [default: $ROLLSAFE_POSTGRES_IMAGE, else postgres:<major> with --postgres-version, else postgres:15].
    #[arg(long)]
    image: Option<String>,
}

impl SandboxArgs {
    fn builder(&self) -> anyhow::Result<SandboxBuilder> {
        let choice: BackendChoice = self.postgres.as_deref().unwrap_or("auto").parse()?;
        let builder = SandboxBuilder::from_env()?.backend(choice);
        Ok(match &self.image {
            Some(image) => builder.image(image),
            None => builder,
        })
    }
}

#[derive(Args)]
struct VerifyArgs {
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// Project settings file [default: ./rollsafe.toml when there is one]; flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of migration files to rehearse instead of the embedded migrations (a proposed change, another project).
    #[arg(long, value_name = "DIR")]
    migrations: Option<PathBuf>,
    /// The tool whose folder --migrations is: refinery, sqlx, golang-migrate, diesel, goose, dbmate, atlas, flyway, prisma, sqitch or maragudk-migrate [default: detected].
    #[arg(long, value_name = "LAYOUT")]
    layout: Option<Layout>,
    /// A Flyway placeholder's value, or a goose ENVSUB variable's (repeatable: --placeholder schema=app); a `${name}` without one is refused.
    #[arg(long = "placeholder", value_name = "NAME=VALUE", value_parser = placeholder_pair)]
    placeholders: Vec<(String, String)>,
    /// Directory of the apps' statement sets (*.sql with -- app:, -- needs:, optional -- retired:; <app>.seed.sql seeds) instead of the embedded apps.
    #[arg(long, value_name = "DIR")]
    apps: Option<PathBuf>,
    /// Rehearse on each of these PostgreSQL majors (e.g. 13,15,17,18), each on its own server, and merge the findings ("on PostgreSQL 13 only").
    #[arg(long, value_name = "V[,V…]", value_delimiter = ',')]
    postgres_version: Vec<u32>,
    /// Rehearse only the migrations after version V (the layout's own label, or the start of one: 20240101120000, 2024-10-25-112826, a Sqitch change); those up to V are applied once, unchecked (a pull request's cost follows its change). `auto` with --from-target: after what that database's own tool table says is applied.
    #[arg(long, value_name = "V|auto")]
    since: Option<String>,
    /// Rehearse exactly the migrations pending on this database, on its own schema (pg_dump --schema-only), table sizes and PostgreSQL major. Read-only: a role with pg_read_all_data suffices.
    #[arg(long, value_name = "URL", conflicts_with_all = ["static_only"])]
    from_target: Option<String>,
    /// With --from-target: also copy this table's production rows into the sandbox (repeatable; schema.table allowed). Otherwise only tables the applied migrations INSERT into (lookup data, at most 1000 rows) are copied; every other table is seeded.
    #[arg(long = "copy-rows", value_name = "TABLE", requires = "from_target", value_parser = TableName::parse)]
    copy_rows: Vec<TableName>,
    /// Rows seeded per rehearsal (written like the live app versions write them), 0 to 10000000 [default: 10000].
    #[arg(long, value_name = "N", value_parser = count_in(bounds::ROWS))]
    rows: Option<u64>,
    #[command(flatten)]
    report: ReportArgs,
    #[command(flatten)]
    lock: LockArgs,
    /// The longest any app statement may wait because of a migration (e.g. 1s, 500ms), 10ms to 10m.
    #[arg(long, default_value = "1s", value_parser = duration_in(bounds::STALL_BUDGET))]
    stall_budget: Duration,
    /// A plan regression (a table read through an index before the migration and sequentially after) is an error at any size; it is a warning only when production sizes (--table-rows, --sizes-from, --from-target) put its full read per call under this (e.g. 5ms, 1ms), 0s to 1s.
    #[arg(long, default_value = "5ms", value_parser = duration_in(bounds::PLAN_BUDGET))]
    plan_budget: Duration,
    /// Production rows of a table, to predict lock holds at that size, 0 to 1000000000000 (repeatable: --table-rows bookings=48M).
    #[arg(long = "table-rows", value_name = "TABLE=ROWS", value_parser = table_rows_pair)]
    table_rows: Vec<String>,
    /// Read production table sizes (pg_class.reltuples, read-only) from this database instead.
    #[arg(long, value_name = "URL", conflicts_with = "table_rows")]
    sizes_from: Option<String>,
    /// The database role apps connect as when their statement file declares none (`-- role: NAME`); created before V1, not a superuser, owning nothing: the migrations' GRANTs decide what it may do [default: rollsafe.toml's `app_role`, else the migrator's role].
    #[arg(long, value_name = "NAME")]
    app_role: Option<String>,
    /// SQL that creates what the history assumes from outside itself (roles its GRANTs name, extensions, schemas: a project's init script), run once as a superuser on the rehearsal's database before the first migration [default: rollsafe.toml's `setup`].
    #[arg(long, value_name = "FILE")]
    setup: Option<std::path::PathBuf>,
    /// Run migrations as a superuser, as a production whose migrator is one does. By default they run as a role that owns the databases and is not a superuser (no COPY … PROGRAM, no server files, no ALTER SYSTEM, no untrusted languages).
    #[arg(long)]
    migrator_superuser: bool,
    /// The longest one rehearsed statement (a migration's or an app's) may run before it is cancelled and reported, 1s to 24h (e.g. 5m, 30s).
    #[arg(long, default_value = "5m", value_parser = duration_in(bounds::VERIFY_STATEMENT_TIMEOUT))]
    statement_timeout: Duration,
    #[command(flatten)]
    base: BaseArgs,
    /// Only the static precheck: squawk's lint rules on the migration files, with lines. Starts no Postgres (no Docker, no binaries needed) and measures nothing: its findings are warnings.
    #[arg(long)]
    static_only: bool,
}

/// `verify --base REF [--capture CMD]`: a pull request's change, read
/// from git.
#[derive(Args)]
struct BaseArgs {
    /// Rehearse only the migrations the working tree adds to git REF's (e.g. origin/main); REF's are applied unchecked. A migration REF has that the tree changed or removed is refused (applied history edited).
    #[arg(long, value_name = "REF", requires = "migrations", conflicts_with_all = ["since", "from_target"])]
    base: Option<String>,
    /// With --base: the app's test command (run with `sh -c` in a checkout of REF at REF's newest migration, and here at the tree's newest); what the server saw each run becomes the old (`base`) and the new (`head`) app.
    #[arg(long, value_name = "CMD", requires = "base", conflicts_with = "apps")]
    capture: Option<String>,
}

/// What `--base` prepared: REF's checkout and the captured apps, kept
/// until the run ends.
struct BaseRun {
    _base: rollsafe::capture::base::Base,
    _apps: Option<tempfile::TempDir>,
}

/// `--base REF`: REF's newest migration becomes `--since`; with
/// `--capture`, the app captured at REF and here becomes `--apps`.
fn prepare_base(args: &mut VerifyArgs, catalog: &Catalog) -> anyhow::Result<Option<BaseRun>> {
    use rollsafe::capture::{base, run};
    let (Some(reference), Some(dir)) = (args.base.base.clone(), args.migrations.clone()) else {
        return Ok(None);
    };
    let options = ReadOptions {
        layout: args.layout,
        placeholders: args.placeholders.iter().cloned().collect(),
    };
    let checkout = base::checkout(&dir, &reference)?;
    let base_catalog = checkout.catalog(&options)?;
    let newest = checkout.check_history(&base_catalog, catalog)?;
    eprintln!(
        "rollsafe verify: --base {reference}: {} migration(s) there, {} added here",
        base_catalog.migrations().len(),
        catalog.migrations().len() - base_catalog.migrations().len()
    );
    args.since = newest.clone();
    let Some(command) = args.base.capture.clone() else {
        return Ok(Some(BaseRun {
            _base: checkout,
            _apps: None,
        }));
    };
    let apps = tempfile::Builder::new()
        .prefix("rollsafe-apps-")
        .tempdir()?;
    let sandbox = run::log_settings(args.sandbox.builder()?).start()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let app_role = args.app_role.clone();
    for (app, at_catalog, dir) in [
        ("base", &base_catalog, checkout.same_place(&cwd)),
        ("head", catalog, cwd.clone()),
    ] {
        let test_run = run::TestRun {
            app: app.to_string(),
            at: None,
            app_role: app_role.clone(),
            command: vec!["sh".into(), "-c".into(), command.clone()],
            dir: Some(dir),
        };
        eprintln!("rollsafe verify: capturing the {app} app (`{command}`)");
        let captured = run::capture_tests(&sandbox, at_catalog, &test_run)?;
        let set = &captured.set;
        eprintln!(
            "rollsafe verify: the {app} app at {}: {} statements ({} reads, {} writes, {} to review)",
            captured.label,
            set.reads + set.writes + set.to_review,
            set.reads,
            set.writes,
            set.to_review
        );
        std::fs::write(apps.path().join(format!("{app}.sql")), &set.text)?;
    }
    args.apps = Some(apps.path().to_path_buf());
    Ok(Some(BaseRun {
        _base: checkout,
        _apps: Some(apps),
    }))
}

/// How migrations wait for table locks (`migrate` applies with it; `verify`
/// rehearses it behind a long transaction).
#[derive(Args)]
struct LockArgs {
    /// Cap of each attempt's lock_timeout, so the app never queues longer behind a waiting lock (e.g. 500ms, 1s), 10ms to 1m. migrate first waits without queueing while another session holds a conflicting lock, then attempts for 50ms; attempts it cannot look ahead for (and verify's probe) start at 100ms and grow to the cap.
    #[arg(long, default_value = "500ms", value_parser = duration_in(bounds::LOCK_TIMEOUT))]
    lock_timeout: Duration,
    /// How long to keep retrying a lock before giving up and naming the blocker (e.g. 5m, 30s), 0s to 24h.
    #[arg(long, default_value = "5m", value_parser = duration_in(bounds::RETRY_FOR))]
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

/// `--placeholder NAME=VALUE`.
fn placeholder_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_string(), value.to_string()))
        }
        _ => Err(format!(
            "`{s}` is not NAME=VALUE; write e.g. --placeholder schema=app"
        )),
    }
}

/// An error that means "could not run" (exit 2) rather than "found problems".
fn could_not_run(e: anyhow::Error) -> ExitCode {
    fail(2, &rollsafe::errors::one_line(e.as_ref()))
}

/// `--since`'s version (or `since` of rollsafe.toml) as rollsafe's version
/// in `catalog`'s layout.
fn since_version(catalog: &Catalog, text: &str) -> anyhow::Result<i32> {
    if text.trim() == "auto" {
        anyhow::bail!("since = auto (rollsafe.toml) rehearses what a database lacks, read from its migration tool's history table; pass --from-target URL with it, or give a version");
    }
    catalog
        .resolve_label(text)
        .map_err(|why| anyhow::anyhow!("--since {text}: {why}"))
}

/// `--since` beside `--from-target`: only `auto` (the target's own tool
/// table says what is applied), which is what `--from-target` does anyway;
/// `auto` without a target has nothing to read.
fn check_since_with_target(args: &VerifyArgs) -> anyhow::Result<()> {
    match (args.since.as_deref().map(str::trim), &args.from_target) {
        (Some("auto"), None) => anyhow::bail!("--since auto rehearses what a database lacks, read from its migration tool's history table; pass --from-target URL with it, or give --since a version"),
        (Some(v), Some(_)) if v != "auto" => anyhow::bail!("--since {v} and --from-target both say where the rehearsal starts; drop --since (or pass --since auto): --from-target starts after what the target has applied"),
        _ => Ok(()),
    }
}

/// The flags with `rollsafe.toml` filled in under them: a flag (or the
/// environment, for the backend) always wins over the file.
fn merge_project_config(mut args: VerifyArgs) -> anyhow::Result<VerifyArgs> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let Some((_, config)) = ProjectConfig::discover(args.config.as_deref(), &cwd)? else {
        return Ok(args);
    };
    args.migrations = args.migrations.or(config.migrations);
    args.apps = args.apps.or(config.apps);
    args.layout = args.layout.or(config.layout);
    args.rows = args.rows.or(config.rows);
    args.since = args.since.or(config.since.map(|v| v.to_string()));
    args.app_role = args.app_role.or(config.app_role);
    args.migrator_superuser = args.migrator_superuser || config.migrator_superuser == Some(true);
    args.setup = args.setup.or(config.setup);
    args.sandbox.postgres = args.sandbox.postgres.or(config.postgres);
    if args.copy_rows.is_empty() {
        args.copy_rows = config
            .copy_rows
            .iter()
            .map(|t| {
                TableName::parse(t)
                    .map_err(|e| anyhow::anyhow!("rollsafe.toml: copy_rows `{t}`: {e}; name a table as table or schema.table"))
            })
            .collect::<anyhow::Result<_>>()?;
    }
    let env_image = std::env::var(rollsafe::sandbox::ENV_IMAGE).is_ok_and(|v| !v.trim().is_empty());
    if !env_image {
        args.sandbox.image = args.sandbox.image.or(config.image);
    }
    Ok(args)
}

fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    check_since_with_target(&args)?;
    let mut args = merge_project_config(args)?;
    if args.from_target.is_some() {
        // The target's history decides (rollsafe.toml's `since` too).
        args.since = None;
    }
    let targets = args.report.targets()?;
    let outcome = rehearse(&mut args, &targets);
    outcome.inspect_err(|e| write_stopped_reports(&args, &targets, e))
}

/// Exit 2 still leaves CI something to read: each report `--output` sends
/// to a file says that the run stopped, and why (the same line as on
/// standard error), as one error finding. Standard output stays the
/// error line's alone. A report that cannot be written is left out: the
/// run's own error is what the user needs.
fn write_stopped_reports(args: &VerifyArgs, targets: &[Target], e: &anyhow::Error) {
    let mut report = rollsafe::report::Report::new("rollsafe verify");
    report.source = args
        .migrations
        .as_ref()
        .map_or_else(|| "embedded".to_string(), |p| p.display().to_string());
    report.findings.push(
        rollsafe::report::Finding::new(
            "verify",
            "could-not-run",
            rollsafe::report::Severity::Error,
            None,
            format!(
                "the rehearsal stopped before it could judge the migrations: {}",
                rollsafe::errors::one_line(e.as_ref())
            ),
        )
        .advice("the message says what to do; fix that and run again (exit 2: no verdict on any migration)"),
    );
    report.finish();
    report.safe_order.clear();
    for t in targets {
        if let Destination::File(path) = &t.destination {
            let _ = std::fs::write(path, render(&report, t.format));
        }
    }
}

/// How the folder was read, said first so a user sees it before any
/// finding that depends on it (three tools write `N_name.up.sql`), with
/// what the tool runs that rollsafe does not.
fn read_as(catalog: &Catalog, given: bool) -> String {
    let caveat = rollsafe::catalog::layouts::reader(catalog.layout).caveat();
    format!(
        "{} migration(s) from {}, read as {}'s ({}){}",
        catalog.migrations().len(),
        catalog.source,
        catalog.layout,
        if given {
            "--layout"
        } else {
            "detected; --layout names another tool"
        },
        caveat.map(|c| format!("; {c}")).unwrap_or_default()
    )
}

/// The rehearsal `args` ask for, its reports written to `targets`.
fn rehearse(args: &mut VerifyArgs, targets: &[Target]) -> anyhow::Result<ExitCode> {
    if let (None, Some(layout)) = (&args.migrations, args.layout) {
        if layout != Layout::Refinery {
            anyhow::bail!("--layout {layout} names the layout of --migrations DIR, and none was given (the embedded migrations are refinery's); pass --migrations, or drop --layout");
        }
    }
    let catalog = Catalog::load_in(
        args.migrations.as_deref(),
        &ReadOptions {
            layout: args.layout,
            placeholders: args.placeholders.iter().cloned().collect(),
        },
    )?;
    let read_as = read_as(&catalog, args.layout.is_some());
    // `--base` sets `since` to the base's newest migration.
    let _base = prepare_base(args, &catalog)?;
    let since = match &args.since {
        Some(text) => Some(since_version(&catalog, text)?),
        None => None,
    };
    let apps = match &args.apps {
        Some(dir) => Some(rollsafe::app::load_dir(dir, &catalog)?),
        None => None,
    };
    if args.static_only {
        let verify = match since {
            Some(v) => shipped::verify(catalog)?.since(v)?,
            None => shipped::verify(catalog)?,
        };
        return args.report.emit(targets, &verify.static_only());
    }
    let target = match &args.from_target {
        Some(url) => {
            Some(rollsafe::target::Target::read(url, &catalog)?.copy_rows(args.copy_rows.clone()))
        }
        None => None,
    };
    // The target's own sizes, unless sizes are given another way.
    let sizes_from = match (&args.sizes_from, &args.from_target) {
        (Some(url), _) => Some(url),
        (None, Some(url)) if args.table_rows.is_empty() => Some(url),
        _ => None,
    };
    let sizes = match sizes_from {
        Some(url) => Sizes::from_database(url)
            .map_err(|e| anyhow::anyhow!(db::scrub(&format!("{e:#}"), url)))?,
        None if args.table_rows.is_empty() => Sizes::default(),
        None => Sizes::from_pairs(args.table_rows.iter().map(String::as_str))
            .map_err(|e| anyhow::anyhow!("--table-rows {e}"))?,
    };
    let app_role = match &args.app_role {
        Some(text) => Some(rollsafe::app::role_name(text).ok_or_else(|| {
            anyhow::anyhow!("--app-role {text} is not a role name rollsafe can create; use a plain identifier (letters, digits, _) that does not start with pg_")
        })?),
        None => None,
    };
    // The shipped project's apps go with its migrations (`--apps` replaces
    // them); another project's directory gets none of them.
    let setup = match &args.setup {
        Some(path) => Some(std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read the setup file {}; pass --setup with a SQL file (or fix `setup` in rollsafe.toml)",
                path.display()
            )
        })?),
        None => None,
    };
    let verify = shipped::verify(catalog)?
        .setup(setup)
        .app_role(app_role)
        .superuser_migrator(args.migrator_superuser)
        .statement_timeout(args.statement_timeout)
        .rows(args.rows.unwrap_or(DEFAULT_ROWS))
        .lock_policy(args.lock.policy())
        .stall_budget(args.stall_budget)
        .plan_budget(args.plan_budget)
        .sizes(sizes);
    let mut verify = verify;
    if let Some(apps) = apps {
        verify = verify.apps(apps);
    }
    if let Some(v) = since {
        verify = verify.since(v)?;
    }
    let mut builder = args.sandbox.builder()?;
    if let Some(t) = target {
        // The target's major, unless majors are asked for explicitly.
        if args.postgres_version.is_empty() {
            builder = builder.postgres_major(t.major);
        }
        verify = verify.from_target(t);
    }
    let progress = Progress::start();
    progress.show(&read_as);
    let verify = verify.progress(progress.reporter());
    let result = if args.postgres_version.is_empty() {
        builder
            .start()
            .map_err(anyhow::Error::from)
            .and_then(|sandbox| Ok(verify.run(&sandbox)?))
    } else {
        verify
            .run_on_majors(&builder, &args.postgres_version)
            .map_err(anyhow::Error::from)
    };
    progress.finish();
    let report = result?;
    args.report.emit(targets, &report)
}

/// Says on stderr which step a rehearsal is at (stdout is the report's):
/// on a terminal a spinner with the elapsed time, cleared before the
/// report is printed; otherwise (CI logs) one line per step with the
/// seconds since the start, so a long run is never silent.
struct Progress {
    started: std::time::Instant,
    spinner: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn start() -> Progress {
        let spinner = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new_spinner().with_style(
                indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {msg}")
                    .expect("a valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        let progress = Progress {
            started: std::time::Instant::now(),
            spinner,
        };
        progress.show("starting throwaway Postgres");
        progress
    }

    /// Shows one step: the spinner's message, or a timed line.
    fn show(&self, step: &str) {
        show_step(self.started, self.spinner.as_ref(), step);
    }

    /// The callback for [`Verify::progress`]: every event that names a
    /// step is shown.
    fn reporter(&self) -> impl Fn(&VerifyEvent) + Send + Sync + 'static {
        let (started, spinner) = (self.started, self.spinner.clone());
        move |event: &VerifyEvent| {
            if event.shown() {
                show_step(started, spinner.as_ref(), &event.to_string());
            }
        }
    }

    fn finish(self) {
        if let Some(bar) = self.spinner {
            bar.finish_and_clear();
        }
    }
}

fn show_step(started: std::time::Instant, spinner: Option<&indicatif::ProgressBar>, step: &str) {
    match spinner {
        Some(bar) => bar.set_message(step.to_string()),
        None => eprintln!(
            "[rollsafe verify {:.1}s] {step}",
            started.elapsed().as_secs_f64()
        ),
    }
}

/// The database and the migration files, shared by `migrate`, `status` and `check`.
#[derive(Args)]
struct TargetDbArgs {
    /// postgres://USER:PASSWORD@HOST:PORT/DB[?sslmode=disable|prefer|require|verify-ca|verify-full&sslrootcert=FILE]
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Migration folder (default: the migrations embedded in rollsafe); status and migrate read and write its own tool's history table (refinery_schema_history, __diesel_schema_migrations, _sqlx_migrations, …).
    #[arg(long)]
    migrations: Option<std::path::PathBuf>,
    /// The tool whose folder --migrations is [default: detected]; see `rollsafe verify --help`.
    #[arg(long, value_name = "LAYOUT")]
    layout: Option<Layout>,
    /// A Flyway placeholder's value, or a goose ENVSUB variable's (repeatable).
    #[arg(long = "placeholder", value_name = "NAME=VALUE", value_parser = placeholder_pair)]
    placeholders: Vec<(String, String)>,
}

impl TargetDbArgs {
    /// The catalog `migrate` and `status` compare with the database's
    /// history (the folder's tool's table).
    fn catalog(&self) -> Result<Catalog, ExitCode> {
        let options = ReadOptions {
            layout: self.layout,
            placeholders: self.placeholders.iter().cloned().collect(),
        };
        let catalog =
            Catalog::load_in(self.migrations.as_deref(), &options).map_err(|e| fail(2, &e))?;
        // `N_name.up.sql`/`.down.sql` is golang-migrate's and sqlx's alike
        // (the project around the folder decides when it can: a crate
        // using sqlx); where it could not, the database's own history
        // says which tool applied them.
        if self.layout.is_none() && catalog.layout == Layout::GolangMigrate {
            let kept_by = |layout| {
                let table = rollsafe::migrate::history::ToolHistory(layout).table();
                rollsafe::db::connect(&self.database_url)
                    .ok()
                    .and_then(|mut c| {
                        c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
                            .ok()
                    })
                    .is_some_and(|row| row.get::<_, bool>(0))
            };
            if kept_by(Layout::Sqlx) && !kept_by(Layout::GolangMigrate) {
                eprintln!("rollsafe: reading {} as sqlx's: this database's history is sqlx's _sqlx_migrations and it has no schema_migrations (pass --layout golang-migrate to read it as golang-migrate's)", catalog.source);
                let options = ReadOptions {
                    layout: Some(Layout::Sqlx),
                    ..options
                };
                return Catalog::load_in(self.migrations.as_deref(), &options)
                    .map_err(|e| fail(2, &e));
            }
        }
        Ok(catalog)
    }
}

#[derive(Args)]
struct MigrateArgs {
    #[command(flatten)]
    db: TargetDbArgs,
    /// Apply up to this migration (inclusive), named as its tool names it (V3, 20240101120000, 2024-10-25-112826_x, a Sqitch change, Flyway's 1.1) or by the start of its label; default: the latest.
    #[arg(long, value_name = "V")]
    target: Option<String>,
    /// Print the plan and the SQL of each pending migration; change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    lock: LockArgs,
    /// How long to wait for another `rollsafe migrate` on the same database, 0s to 24h.
    #[arg(long, default_value = "120s", value_parser = duration_in(bounds::MIGRATOR_WAIT))]
    migrator_wait: std::time::Duration,
    /// Primary keys per batch of a `-- rollsafe:batched-update` backfill (each batch is its own short transaction).
    #[arg(long, default_value = "1000", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    batch_size: u32,
    /// Pause between backfill batches, so the app's writes and autovacuum keep up (e.g. 50ms, 0), 0s to 1m.
    #[arg(long, default_value = "50ms", value_parser = duration_in(bounds::BATCH_PAUSE))]
    batch_pause: Duration,
}

/// Backfill progress for `migrate`: on a terminal an indicatif bar with
/// rows/s and ETA; otherwise (CI logs) one line every [`LINE_EVERY`]
/// batches and one at the end.
fn backfill_progress() -> rollsafe::migrate::backfill::ProgressSink {
    use rollsafe::migrate::backfill::{BackfillProgress, ProgressSink};
    use std::sync::{Arc, Mutex};
    const LINE_EVERY: u64 = 50;
    let terminal = std::io::stderr().is_terminal();
    let bar: Arc<Mutex<Option<(String, indicatif::ProgressBar)>>> = Arc::new(Mutex::new(None));
    ProgressSink(Arc::new(move |p: &BackfillProgress| {
        let key = format!("V{} {}", p.version, p.table);
        let rate = (p.rows_done - p.resumed_from) as f64 / p.elapsed.as_secs_f64().max(1e-3);
        if !terminal {
            if p.finished || p.batches % LINE_EVERY == 0 {
                eprintln!(
                    "[rollsafe migrate] backfill {key}: {} of ~{} rows, {} batches, {rate:.0} rows/s{}",
                    p.rows_done,
                    p.rows_total,
                    p.batches,
                    if p.finished { ", done" } else { "" }
                );
            }
            return;
        }
        let mut slot = bar.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().map_or(true, |(k, _)| *k != key) {
            let b = indicatif::ProgressBar::new(p.rows_total).with_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/{len} rows, {per_sec}, ETA {eta}",
                )
                .expect("a valid template"),
            );
            b.set_message(format!("backfill {key}"));
            b.set_position(p.resumed_from);
            b.reset_eta();
            *slot = Some((key, b));
        }
        if let Some((_, b)) = slot.as_ref() {
            b.set_length(p.rows_total.max(p.rows_done));
            b.set_position(p.rows_done);
            if p.finished {
                b.finish();
            }
        }
    }))
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
    /// Report not-ready attached functions older than this (e.g. 1h, 30m, 90s), 1s to 30d; the shipped project's invariant, checked when --migrations is not given.
    #[arg(long, default_value = "1h", value_parser = duration_in(bounds::STUCK_AFTER))]
    stuck_after: Duration,
    #[command(flatten)]
    report: ReportArgs,
    /// Where to build the expected schema when no checked-in snapshot fits (only then is throwaway Postgres started).
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// PostgreSQL major of that throwaway server: a number, or from-target (the audited database's major).
    #[arg(long, value_name = "V|from-target")]
    postgres_version: Option<String>,
    /// How long each backfill predicate may scan the database (its statement_timeout), 100ms to 1h; one that takes longer is reported skipped.
    #[arg(long, default_value = "30s", value_parser = duration_in(bounds::CHECK_STATEMENT_TIMEOUT))]
    statement_timeout: Duration,
}

/// How findings reports are written (`verify`, `check`).
#[derive(Args)]
struct ReportArgs {
    /// Report format: text, json, junit, github (workflow commands), markdown (a bounded PR/MR summary) or gitlab (Code Quality JSON); default text.
    #[arg(long, value_parser = clap::value_parser!(FormatArg))]
    format: Option<FormatArg>,
    /// Write the --format report to FILE, or one report per FORMAT=FILE (repeatable; - is stdout): --output junit=report.xml --output github=-. The text report goes to stdout unless another report does.
    #[arg(long, value_name = "[FORMAT=]FILE")]
    output: Vec<OutputSpec>,
}

impl ReportArgs {
    /// The reports to write; checked before a run starts.
    fn targets(&self) -> anyhow::Result<Vec<Target>> {
        output::plan(self.format.as_ref().map(|f| f.0), &self.output).map_err(anyhow::Error::msg)
    }

    /// Writes the reports; exit 0 when it passed, 1 when it has errors.
    fn emit(
        &self,
        targets: &[Target],
        report: &rollsafe::report::Report,
    ) -> anyhow::Result<ExitCode> {
        wait_if_stopping();
        for t in targets {
            let text = render(report, t.format);
            match &t.destination {
                Destination::File(path) => std::fs::write(path, &text).with_context(|| {
                    format!("cannot write the {} report to {}", t.format, path.display())
                })?,
                Destination::Stdout => print!("{text}"),
            }
        }
        // GitHub shows a step's summary file on the run's page.
        if targets.iter().any(|t| t.format == Format::Github) {
            if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .and_then(|mut f| f.write_all(render(report, Format::Markdown).as_bytes()))
                    .with_context(|| {
                        format!(
                            "cannot append the summary to GITHUB_STEP_SUMMARY ({})",
                            PathBuf::from(&path).display()
                        )
                    })?;
            }
        }
        Ok(if report.passed {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    }
}

fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    // Read as status reads it: --layout and --placeholder count here too.
    let catalog = match args.db.catalog() {
        Ok(catalog) => catalog,
        Err(code) => return Ok(code),
    };
    let url = &args.db.database_url;
    let targets = args.report.targets()?;
    let mut builder = args.sandbox.builder()?;
    match args.postgres_version.as_deref() {
        None => {}
        Some("from-target") => {
            let major = db::server_major(url)
                .map_err(|e| anyhow::anyhow!(db::scrub(&e.to_string(), url)))?;
            builder = builder.postgres_major(major);
        }
        Some(v) => {
            let major: u32 = v.trim().parse().map_err(|_| {
                anyhow::anyhow!(
                    "--postgres-version {v} is not a PostgreSQL major (e.g. 15) or from-target"
                )
            })?;
            builder = builder.postgres_major(major);
        }
    }
    // The shipped project's own invariant goes with its migrations; another
    // project's (--migrations DIR) does not have its tables.
    let shipped = shipped::owns(&catalog);
    let mut audit =
        rollsafe::check::Check::new(catalog, builder).statement_timeout(args.statement_timeout);
    if shipped {
        audit = audit.invariant(shipped::stuck_rows(args.stuck_after));
    }
    let report = audit
        .run(url)
        .map_err(|e| anyhow::anyhow!(db::scrub(&e.to_string(), url)))?;
    args.report.emit(&targets, &report)
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum StatusFormat {
    Text,
    Json,
}

/// A clap value parser for a duration flag: [`parse_duration`], then
/// `range` (a value outside it is refused in one line, exit 2).
fn duration_in(
    range: bounds::DurationRange,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| range.check(parse_duration(s)?)
}

/// A clap value parser for a count flag: a whole number within `range`.
fn count_in(
    range: bounds::CountRange,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| {
        let n = s
            .trim()
            .replace('_', "")
            .parse::<u64>()
            .map_err(|_| format!("`{s}` is not a whole number of rows (e.g. 10000)"))?;
        range.check(n)
    }
}

/// A clap value parser for `--table-rows TABLE=ROWS`: checked (form and
/// range) when the flags are read, kept as written.
fn table_rows_pair(s: &str) -> Result<String, String> {
    Sizes::from_pairs([s]).map(|_| s.to_string())
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
    wait_if_stopping();
    let line = rollsafe::errors::collapse(&e.to_string());
    eprintln!("rollsafe: error: {line}");
    ExitCode::from(code)
}

fn migrate(args: MigrateArgs) -> ExitCode {
    use rollsafe::migrate::{self, Options};
    let catalog = match args.db.catalog() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let tool = migrate::history::ToolHistory(catalog.layout);
    if !tool.writable() {
        return fail(
            2,
            &format!(
                "{} holds {} migrations, and rollsafe does not write {}'s history table ({}); apply them with {} itself, and use rollsafe status / verify on them",
                catalog.source, catalog.layout, catalog.layout, tool.table(), catalog.layout
            ),
        );
    }
    let target = match args.target.as_deref().map(|t| catalog.resolve_label(t)) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(why)) => {
            return fail(
                2,
                &format!("--target {}: {why}", args.target.unwrap_or_default()),
            )
        }
    };
    let url = &args.db.database_url;
    let options = Options {
        target,
        lock: args.lock.policy(),
        migrator_wait: args.migrator_wait,
        backfill: rollsafe::migrate::backfill::BackfillOptions {
            batch_size: args.batch_size,
            pause: args.batch_pause,
        },
        progress: Some(backfill_progress()),
    };
    println!("database:   {}", db::redact_url(url));
    println!("migrations: {}", catalog.source);
    if let Some(caveat) = rollsafe::catalog::layouts::reader(catalog.layout).caveat() {
        println!("note:       {caveat}");
    }
    if args.dry_run {
        let plan = match migrate::plan(url, &catalog, &options) {
            Ok(p) => p,
            Err(e) => return fail(e.exit_code(), &db::scrub(&e.to_string(), url)),
        };
        print_position(&catalog, plan.current, plan.target, plan.beyond_target);
        println!(
            "dry run: {} migration(s) would be applied, nothing changed",
            plan.pending.len()
        );
        for m in &plan.pending {
            print_dry_run(m, args.batch_size);
        }
        return ExitCode::SUCCESS;
    }
    match migrate::migrate(url, &catalog, &options) {
        Ok(out) => {
            print_position(
                &catalog,
                out.plan.current,
                out.plan.target,
                out.plan.beyond_target,
            );
            for a in &out.applied {
                let mut how = Vec::new();
                if a.attempts > 1 {
                    how.push(format!("{} attempts", a.attempts));
                }
                if !a.waited.is_zero() {
                    how.push(format!(
                        "waited {:.1?} without queueing for a conflicting lock to go",
                        a.waited
                    ));
                }
                println!(
                    "applied {} in {:.1?}{}",
                    a.file,
                    a.elapsed,
                    if how.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", how.join(", "))
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

/// `migrate --dry-run`: how migration `m` would be applied, the locks its
/// statements take (read from their text), and its SQL.
fn print_dry_run(m: &rollsafe::catalog::Migration, batch_size: u32) {
    let how = if m.runs_outside_transaction() {
        let backfills = m.batched_updates().count();
        format!(
            " (outside a transaction, statement by statement{})",
            if backfills > 0 {
                format!(
                    ", then {backfills} batched update(s) of {} keys per batch",
                    batch_size
                )
            } else {
                String::new()
            }
        )
    } else {
        String::new()
    };
    let locks = if m.runs_outside_transaction() {
        rollsafe::sql::split(&m.sql)
            .statements
            .iter()
            .map(|s| {
                format!(
                    "line {}: {}",
                    s.line,
                    rollsafe::migrate::conflicts::of_statements(std::slice::from_ref(s)).describe()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        rollsafe::migrate::conflicts::of_sql(&m.sql).describe()
    };
    println!(
        "\n-- {m}{how}\n-- locks (read from its statements): {locks}\n{}",
        m.sql.trim_end()
    );
}

fn print_position(catalog: &Catalog, current: Option<i32>, target: i32, beyond: bool) {
    let at = current.map_or("empty (no migration applied)".to_string(), |v| {
        catalog.label_of(v)
    });
    println!("at:         {at}");
    println!(
        "target:     {}{}",
        catalog.label_of(target),
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
            let table = migrate::history::ToolHistory(catalog.layout).table();
            println!(
                "migrations: {} ({}, latest {})",
                catalog.source,
                catalog.layout,
                catalog.label_of(st.latest)
            );
            println!(
                "history:    {}",
                match (st.history_table, st.current) {
                    (false, _) => format!("no {table} table (nothing applied)"),
                    (true, None) => format!("{table}: empty"),
                    (true, Some(v)) => format!("{table}: at {}", catalog.label_of(v)),
                }
            );
            for v in &st.versions {
                let state = serde_json::to_value(v.state).expect("state serialises");
                println!(
                    "{:<5} {:<14} {:<25} {}",
                    v.label,
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
            for b in st.unfinished_backfills() {
                println!(
                    "backfill:   V{} {} unfinished: {} rows updated in {} batches, last key {}, last progress {}; run `rollsafe migrate` to resume it",
                    b.version,
                    b.table,
                    b.rows_done,
                    b.batches,
                    b.last_key.as_deref().unwrap_or("(none)"),
                    b.updated_at
                );
            }
            for v in st.reruns() {
                println!(
                    "rerun:      {} ({}) changed since its last run (checksum {} in the history, {} in the file); Flyway runs it again on its next migrate",
                    v.label,
                    v.file.as_deref().unwrap_or("?"),
                    v.checksum_applied.as_deref().unwrap_or("?"),
                    v.checksum_file.as_deref().unwrap_or("?"),
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

/// SIGINT and SIGTERM stop the run: a thread of their own removes every
/// sandbox this process holds (`sandbox::cleanup::drop_all`) and exits
/// with 128 + the signal's number (130, 143), as a shell reports a process
/// the signal killed. A second signal exits at once, cleanup or not.
/// Meanwhile the main thread, whose sandbox is vanishing under it, neither
/// reports nor exits (see [`wait_if_stopping`]).
fn stop_on_signals() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("cannot handle SIGINT/SIGTERM ({e}); a stopped run may leave its sandbox behind for the next run to remove");
            return;
        }
    };
    std::thread::spawn(move || {
        let mut first = true;
        for signo in signals.forever() {
            if !first {
                std::process::exit(128 + signo);
            }
            first = false;
            std::thread::spawn(move || {
                let name = if signo == SIGINT { "SIGINT" } else { "SIGTERM" };
                let dropped = rollsafe::sandbox::cleanup::drop_all();
                eprintln!(
                    "rollsafe: stopped by {name}; removed {} sandbox resource(s) in {:.1?}",
                    dropped.total(),
                    dropped.took
                );
                std::process::exit(128 + signo);
            });
        }
    });
    // A thread that fails because its sandbox was just removed must not
    // end the process (a panicking main thread would exit before cleanup).
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        wait_if_stopping();
        report_panic(info)
    }));
}

/// Once a signal is being handled, blocks for good: the signal thread
/// exits the process when its cleanup is done.
fn wait_if_stopping() {
    while rollsafe::sandbox::cleanup::stopping() {
        std::thread::park();
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("ROLLSAFE_LOG", "warn"))
        .format_timestamp(None)
        .init();
    let cli = Cli::parse();
    stop_on_signals();
    let result = match cli.command {
        Command::Verify(args) => verify(args),
        Command::Migrate(args) => return migrate(args),
        Command::Status(args) => return status(args),
        Command::Check(args) => check(args),
        Command::Capture(args) => return capture(args),
    };
    wait_if_stopping();
    result.unwrap_or_else(could_not_run)
}

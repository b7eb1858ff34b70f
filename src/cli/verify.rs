//! `rollsafe verify`: its flags (with `rollsafe.toml` under them), `--base`
//! and `--capture`, and the rehearsal's progress on standard error.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rollsafe::bounds;
use rollsafe::catalog::{Catalog, CatalogError, Layout, ReadOptions, TableName};
use rollsafe::config::{AcceptEntry, ProjectConfig};
use rollsafe::dao::shipped;
use rollsafe::db;
use rollsafe::report::events::VerifyEvent;
use rollsafe::report::output::{Destination, Target};
use rollsafe::report::render;
use rollsafe::verify::evidence::predict::Sizes;
use rollsafe::verify::DEFAULT_ROWS;

use super::args::{
    count_in, duration_in, placeholder_pair, table_rows_pair, LockArgs, ReportArgs, SandboxArgs,
};

#[derive(Args)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
    /// Project settings file [default: ./rollsafe.toml when there is one]; flags override it.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Directory of migration files to rehearse instead of the embedded migrations (a proposed change, another project).
    #[arg(long, value_name = "DIR")]
    pub(crate) migrations: Option<PathBuf>,
    /// The project's own command that applies its migrations (e.g. "python manage.py migrate"), run in the project (--migrations, else here) on a throwaway database with DATABASE_URL and PG* set; what the server received becomes the migrations [default: the framework's own, detected: manage.py, alembic.ini, Flask-Migrate's migrations/ (flask db upgrade), bin/rails, a Rakefile with db/migrate, mix.exs, knexfile.*, …].
    #[arg(long, value_name = "CMD")]
    pub(crate) migrate_command: Option<String>,
    /// The table the migrate command records each migration in (its INSERT or UPDATE ends a migration) [default: the framework's: django_migrations, alembic_version, schema_migrations, …].
    #[arg(long, value_name = "TABLE")]
    pub(crate) history_table: Option<String>,
    /// The tool whose folder --migrations is: refinery, sqlx, golang-migrate, diesel, goose, dbmate, atlas, flyway, prisma, sqitch, maragudk-migrate, drizzle or liquibase [default: detected].
    #[arg(long, value_name = "LAYOUT")]
    pub(crate) layout: Option<Layout>,
    /// A Flyway placeholder's value, or a goose ENVSUB variable's (repeatable: --placeholder schema=app); a `${name}` without one is refused.
    #[arg(long = "placeholder", value_name = "NAME=VALUE", value_parser = placeholder_pair)]
    pub(crate) placeholders: Vec<(String, String)>,
    /// Directory of the apps' statement sets (*.sql with -- app:, -- needs:, optional -- retired:; <app>.seed.sql seeds) instead of the embedded apps.
    #[arg(long, value_name = "DIR")]
    pub(crate) apps: Option<PathBuf>,
    /// Rehearse on each of these PostgreSQL majors (e.g. 13,15,17,18), each on its own server, and merge the findings ("on PostgreSQL 13 only").
    #[arg(long, value_name = "V[,V…]", value_delimiter = ',')]
    pub(crate) postgres_version: Vec<u32>,
    /// Rehearse only the migrations after version V (the layout's own label, or the start of one: 20240101120000, 2024-10-25-112826, a Sqitch change); those up to V are applied once, unchecked (a pull request's cost follows its change). `auto` with --from-target: after what that database's own tool table says is applied.
    #[arg(long, value_name = "V|auto")]
    pub(crate) since: Option<String>,
    /// Rehearse exactly the migrations pending on this database, on its own schema (pg_dump --schema-only), table sizes and PostgreSQL major. Read-only: a role with pg_read_all_data suffices.
    #[arg(long, value_name = "URL", conflicts_with_all = ["static_only"])]
    pub(crate) from_target: Option<String>,
    /// With --from-target: also copy this table's production rows into the sandbox (repeatable; schema.table allowed). Otherwise only tables the applied migrations INSERT into (lookup data, at most 1000 rows) are copied; every other table is seeded.
    #[arg(long = "copy-rows", value_name = "TABLE", requires = "from_target", value_parser = TableName::parse)]
    pub(crate) copy_rows: Vec<TableName>,
    /// Rows seeded per rehearsal (written like the live app versions write them), 0 to 10000000 [default: 10000].
    #[arg(long, value_name = "N", value_parser = count_in(bounds::ROWS))]
    pub(crate) rows: Option<u64>,
    #[command(flatten)]
    pub(crate) report: ReportArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
    /// The longest any app statement may wait because of a migration (e.g. 1s, 500ms), 10ms to 10m.
    #[arg(long, default_value = "1s", value_parser = duration_in(bounds::STALL_BUDGET))]
    pub(crate) stall_budget: Duration,
    /// A plan regression (a table read through an index before the migration and sequentially after) is an error at any size; it is a warning only when production sizes (--table-rows, --sizes-from, --from-target) put its full read per call under this (e.g. 5ms, 1ms), 0s to 1s.
    #[arg(long, default_value = "5ms", value_parser = duration_in(bounds::PLAN_BUDGET))]
    pub(crate) plan_budget: Duration,
    /// Production rows of a table, to predict lock holds at that size, 0 to 1000000000000 (repeatable: --table-rows bookings=48M).
    #[arg(long = "table-rows", value_name = "TABLE=ROWS", value_parser = table_rows_pair)]
    pub(crate) table_rows: Vec<String>,
    /// Read production table sizes (pg_class.reltuples, read-only) from this database instead.
    #[arg(long, value_name = "URL", conflicts_with = "table_rows")]
    pub(crate) sizes_from: Option<String>,
    /// The database role apps connect as when their statement file declares none (`-- role: NAME`); created before V1, not a superuser, owning nothing: the migrations' GRANTs decide what it may do [default: rollsafe.toml's `app_role`, else the migrator's role].
    #[arg(long, value_name = "NAME")]
    pub(crate) app_role: Option<String>,
    /// SQL that creates what the history assumes from outside itself (roles its GRANTs name, extensions, schemas: a project's init script), run once as a superuser on the rehearsal's database before the first migration [default: rollsafe.toml's `setup`].
    #[arg(long, value_name = "FILE")]
    pub(crate) setup: Option<std::path::PathBuf>,
    /// Run migrations as a superuser, as a production whose migrator is one does. By default they run as a role that owns the databases and is not a superuser (no COPY … PROGRAM, no server files, no ALTER SYSTEM, no untrusted languages).
    #[arg(long)]
    pub(crate) migrator_superuser: bool,
    /// The longest one rehearsed statement (a migration's or an app's) may run before it is cancelled and reported, 1s to 24h (e.g. 5m, 30s).
    #[arg(long, default_value = "5m", value_parser = duration_in(bounds::VERIFY_STATEMENT_TIMEOUT))]
    pub(crate) statement_timeout: Duration,
    #[command(flatten)]
    pub(crate) base: BaseArgs,
    /// Only the static precheck: squawk's lint rules on the migration files, with lines. Starts no Postgres (no Docker, no binaries needed) and measures nothing: its findings are warnings.
    #[arg(long)]
    pub(crate) static_only: bool,
    /// `rollsafe.toml`'s `[[accept]]` waivers: the file as the user names
    /// it, and each entry with its line.
    #[arg(skip)]
    pub(crate) accept: Option<(String, Vec<(usize, AcceptEntry)>)>,
}

/// `verify --base REF [--capture CMD]`: a pull request's change, read
/// from git.
#[derive(Args)]
pub(crate) struct BaseArgs {
    /// Rehearse only the migrations the working tree adds to git REF's (e.g. origin/main); REF's are applied unchecked. A migration REF has that the tree changed or removed is refused (applied history edited).
    #[arg(long, value_name = "REF", requires = "migrations", conflicts_with_all = ["since", "from_target"])]
    pub(crate) base: Option<String>,
    /// With --base: the app's test command (run with `sh -c` in a checkout of REF at REF's newest migration, and here at the tree's newest); what the server saw each run becomes the old (`base`) and the new (`head`) app.
    #[arg(long, value_name = "CMD", requires = "base", conflicts_with = "apps")]
    pub(crate) capture: Option<String>,
}

/// What `--base` prepared: REF's checkout and the captured apps, kept
/// until the run ends.
pub(crate) struct BaseRun {
    pub(crate) _base: rollsafe::capture::base::Base,
    pub(crate) _apps: Option<tempfile::TempDir>,
    /// A framework's migrations at REF, by label: the rehearsal starts
    /// after them wherever the framework sends the new ones.
    pub(crate) applied: Option<Vec<String>>,
}

/// `--base REF`: REF's newest migration becomes `--since`; with
/// `--capture`, the app captured at REF and here becomes `--apps`.
pub(crate) fn prepare_base(
    args: &mut VerifyArgs,
    catalog: &Catalog,
    framework: Option<&rollsafe::framework::Read>,
) -> anyhow::Result<Option<BaseRun>> {
    use rollsafe::capture::{base, run};
    let (Some(reference), Some(dir)) = (args.base.base.clone(), args.migrations.clone()) else {
        return Ok(None);
    };
    let options = ReadOptions {
        layout: args.layout,
        placeholders: args.placeholders.iter().cloned().collect(),
    };
    let checkout = base::checkout(&dir, &reference)?;
    // A framework's migrations at REF are what its migrate sends there;
    // its data migrations are applied as sent where the apps are captured.
    let (base_catalog, catalog, base_history) = match framework {
        Some(read) => {
            let project = rollsafe::framework::Project {
                root: checkout.same_place(&read.project.root),
                ..read.project.clone()
            };
            let at_base = read_framework(&args.sandbox, &project)?;
            (
                at_base.catalog(Some(i32::MAX))?,
                read.catalog(Some(i32::MAX))?,
                Some(at_base.history),
            )
        }
        None => (checkout.catalog(&options)?, catalog.clone(), None),
    };
    let catalog = &catalog;
    let newest = match framework {
        Some(read) => {
            checkout.check_framework_edits(
                &base_catalog,
                catalog,
                &checkout.same_place(&read.project.root),
                &read.project.root,
            )?;
            base_catalog.migrations().last().map(|m| m.label.clone())
        }
        None => checkout.check_history(&base_catalog, catalog)?,
    };
    let applied = framework.map(|_| {
        base_catalog
            .migrations()
            .iter()
            .map(|m| m.label.clone())
            .collect::<Vec<_>>()
    });
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
            applied,
        }));
    };
    let apps = tempfile::Builder::new()
        .prefix("rollsafe-apps-")
        .tempdir()?;
    let sandbox = run::log_settings(args.sandbox.builder()?).start()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let app_role = args.app_role.clone();
    for (app, at_catalog, dir, framework_history) in [
        (
            "base",
            &base_catalog,
            checkout.same_place(&cwd),
            base_history,
        ),
        (
            "head",
            catalog,
            cwd.clone(),
            framework.map(|r| r.history.clone()),
        ),
    ] {
        let test_run = run::TestRun {
            app: app.to_string(),
            at: None,
            app_role: app_role.clone(),
            command: vec!["sh".into(), "-c".into(), command.clone()],
            dir: Some(dir),
            creates_databases: framework.is_some(),
            history_table: framework.map(|r| r.project.history.clone()),
            framework_history,
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
        applied,
    }))
}

/// `--since`'s version (or `since` of rollsafe.toml) as rollsafe's version
/// in `catalog`'s layout.
pub(crate) fn since_version(catalog: &Catalog, text: &str) -> anyhow::Result<i32> {
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
pub(crate) fn check_since_with_target(args: &VerifyArgs) -> anyhow::Result<()> {
    match (args.since.as_deref().map(str::trim), &args.from_target) {
        (Some("auto"), None) => anyhow::bail!("--since auto rehearses what a database lacks, read from its migration tool's history table; pass --from-target URL with it, or give --since a version"),
        (Some(v), Some(_)) if v != "auto" => anyhow::bail!("--since {v} and --from-target both say where the rehearsal starts; drop --since (or pass --since auto): --from-target starts after what the target has applied"),
        _ => Ok(()),
    }
}

/// The flags with `rollsafe.toml` filled in under them: a flag (or the
/// environment, for the backend) always wins over the file.
pub(crate) fn merge_project_config(mut args: VerifyArgs) -> anyhow::Result<VerifyArgs> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let Some((path, config)) = ProjectConfig::discover(args.config.as_deref(), &cwd)? else {
        return Ok(args);
    };
    if !config.accept.is_empty() {
        let shown = path
            .strip_prefix(&cwd)
            .unwrap_or(&path)
            .display()
            .to_string();
        args.accept = Some((shown, config.accept.clone()));
    }
    args.migrations = args.migrations.or(config.migrations);
    args.apps = args.apps.or(config.apps);
    args.layout = args.layout.or(config.layout);
    args.rows = args.rows.or(config.rows);
    args.since = args.since.or(config.since.map(|v| v.to_string()));
    args.app_role = args.app_role.or(config.app_role);
    args.migrator_superuser = args.migrator_superuser || config.migrator_superuser == Some(true);
    args.setup = args.setup.or(config.setup);
    args.migrate_command = args.migrate_command.or(config.migrate_command);
    args.history_table = args.history_table.or(config.history_table);
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

pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
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
pub(crate) fn write_stopped_reports(args: &VerifyArgs, targets: &[Target], e: &anyhow::Error) {
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
pub(crate) fn read_as(catalog: &Catalog, given: bool) -> String {
    let caveat = rollsafe::catalog::layouts::reader(catalog.layout).caveat();
    format!(
        "{} migration(s) from {}, read as {}'s ({}){}",
        // Flyway callbacks are named with the other companions.
        catalog
            .migrations()
            .iter()
            .filter(|m| m.callback.is_none())
            .count(),
        catalog.source,
        catalog.layout,
        if given {
            "--layout"
        } else {
            "detected; --layout names another tool"
        },
        caveat.map(|c| format!("; {c}")).unwrap_or_default()
    ) + &rollsafe::catalog::layouts::describe_set_aside(&catalog.set_aside)
        .map(|s| format!("; besides them, {s}"))
        .unwrap_or_default()
        + &catalog
            .notes
            .iter()
            .map(|n| format!("; {n}"))
            .collect::<String>()
}

/// The migrations `args` name: a folder in a layout rollsafe reads, else
/// (a folder with no migration files, or `--migrate-command`) what the
/// project's framework sends, read from a throwaway server.
pub(crate) fn load_catalog(
    args: &VerifyArgs,
) -> anyhow::Result<(Catalog, Option<rollsafe::framework::Read>)> {
    let options = ReadOptions {
        layout: args.layout,
        placeholders: args.placeholders.iter().cloned().collect(),
    };
    let project = ProjectArgs {
        migrations: args.migrations.as_deref(),
        migrate_command: args.migrate_command.as_deref(),
        history_table: args.history_table.as_deref(),
    };
    load_project(&project, &options, &args.sandbox)
}

/// Where a command finds a project's migrations.
pub(crate) struct ProjectArgs<'a> {
    pub(crate) migrations: Option<&'a std::path::Path>,
    pub(crate) migrate_command: Option<&'a str>,
    pub(crate) history_table: Option<&'a str>,
}

/// A folder read in its layout, else the framework project around it
/// (or `--migrate-command`) run on a throwaway server of `sandbox`'s kind.
pub(crate) fn load_project(
    project: &ProjectArgs,
    options: &ReadOptions,
    sandbox: &SandboxArgs,
) -> anyhow::Result<(Catalog, Option<rollsafe::framework::Read>)> {
    let folder_error = match project.migrate_command {
        Some(_) => None,
        None => match Catalog::load_in(project.migrations, options) {
            Err(e @ (CatalogError::Empty { .. } | CatalogError::BadName { .. }))
                if options.layout.is_none() =>
            {
                Some(e)
            }
            other => return Ok((other?, None)),
        },
    };
    let dir = match project.migrations {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let found =
        rollsafe::framework::Project::find(&dir, project.migrate_command, project.history_table)?;
    let found = match (found, folder_error) {
        (Some(p), _) => p,
        (None, Some(e)) => return Err(e.into()),
        (None, None) => unreachable!("a migrate command always makes a project"),
    };
    let read = read_framework(sandbox, &found)?;
    Ok((read.catalog(None)?, Some(read)))
}

/// Runs `project`'s migrate on a throwaway server of its own and reads
/// back what it sent.
pub(crate) fn read_framework(
    sandbox: &SandboxArgs,
    project: &rollsafe::framework::Project,
) -> anyhow::Result<rollsafe::framework::Read> {
    eprintln!(
        "rollsafe: {} project at {}: running `{}` on a throwaway database",
        project.framework_name(),
        project.root.display(),
        project.command
    );
    let server = rollsafe::capture::run::log_settings(sandbox.builder()?).start()?;
    Ok(rollsafe::framework::read(&server, project)?)
}

/// The rehearsal `args` ask for, its reports written to `targets`.
pub(crate) fn rehearse(args: &mut VerifyArgs, targets: &[Target]) -> anyhow::Result<ExitCode> {
    if let (None, Some(layout)) = (&args.migrations, args.layout) {
        if layout != Layout::Refinery {
            anyhow::bail!("--layout {layout} names the layout of --migrations DIR, and none was given (the embedded migrations are refinery's); pass --migrations, or drop --layout");
        }
    }
    let (catalog, framework) = load_catalog(args)?;
    let mut read_as = match &framework {
        Some(read) => read.describe(),
        None => read_as(&catalog, args.layout.is_some()),
    };
    // `--base` sets `since` to the base's newest migration.
    let base = prepare_base(args, &catalog, framework.as_ref())?;
    let since = match &args.since {
        Some(text) => Some(since_version(&catalog, text)?),
        None => None,
    };
    // A framework's data migrations up to `since` only build the base, and
    // what its installed packages sent after `since` joins it; after
    // `--base`, the base is what the framework sent at REF.
    let applied = base.as_ref().and_then(|b| b.applied.as_deref());
    let (catalog, since) = match (&framework, since, applied) {
        (Some(read), Some(_), Some(applied)) => {
            let (catalog, s) = read.catalog_after(applied)?;
            (catalog, Some(s))
        }
        (Some(read), Some(s), None) => {
            let (catalog, s) = read.catalog_since(s)?;
            (catalog, Some(s))
        }
        (Some(read), None, _) => (read.catalog(None)?, None),
        (None, since, _) => (catalog, since),
    };
    if framework.is_some() {
        // What building the run's catalogue moved (installed packages'
        // migrations into the base).
        read_as.extend(catalog.notes.iter().map(|n| format!("; {n}")));
    }
    let apps = match &args.apps {
        Some(dir) => Some(rollsafe::app::load_dir(dir, &catalog)?),
        None => None,
    };
    if args.static_only {
        let verify = match since {
            Some(v) => shipped::verify(catalog)?.since(v)?,
            None => shipped::verify(catalog)?,
        };
        let verify = accept_waivers(verify, args)?;
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
    verify = accept_waivers(verify, args)?;
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

/// `verify` with rollsafe.toml's `[[accept]]` waivers, when it has any.
fn accept_waivers(
    verify: rollsafe::verify::Verify,
    args: &VerifyArgs,
) -> anyhow::Result<rollsafe::verify::Verify> {
    Ok(match &args.accept {
        Some((file, entries)) => verify.accept(file, entries)?,
        None => verify,
    })
}

/// Says on stderr which step a rehearsal is at (stdout is the report's):
/// on a terminal a spinner with the elapsed time, cleared before the
/// report is printed; otherwise (CI logs) one line per step with the
/// seconds since the start, so a long run is never silent.
pub(crate) struct Progress {
    pub(crate) started: std::time::Instant,
    pub(crate) spinner: Option<indicatif::ProgressBar>,
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

pub(crate) fn show_step(
    started: std::time::Instant,
    spinner: Option<&indicatif::ProgressBar>,
    step: &str,
) {
    match spinner {
        Some(bar) => bar.set_message(step.to_string()),
        None => eprintln!(
            "[rollsafe verify {:.1}s] {step}",
            started.elapsed().as_secs_f64()
        ),
    }
}

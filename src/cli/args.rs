//! Flag groups and value parsers more than one command shares: where
//! throwaway Postgres comes from, the database and files `migrate`,
//! `status` and `check` read, lock waits, report formats, durations.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rollsafe::bounds;
use rollsafe::catalog::{Catalog, Layout, ReadOptions};
use rollsafe::lock_policy::LockPolicy;
use rollsafe::report::output::{self, Destination, OutputSpec, Target};
use rollsafe::report::{render, Format};
use rollsafe::sandbox::{BackendChoice, SandboxBuilder, ENV_BACKEND};
use rollsafe::verify::evidence::predict::Sizes;

use super::fail;
use super::signals::wait_if_stopping;

/// Where throwaway Postgres comes from.
#[derive(Args, Clone)]
pub(crate) struct SandboxArgs {
    /// auto (docker if it works, else local binaries), docker, local, or a postgres:// URL of a server to create throwaway databases on [default: auto; for verify, rollsafe.toml's `postgres` when set].
    #[arg(long = "postgres", env = ENV_BACKEND, hide_env_values = true)]
    pub(crate) postgres: Option<String>,
    /// Container image for the docker backend [default: $ROLLSAFE_POSTGRES_IMAGE, else postgres:<major> with --postgres-version, else postgres:15].
    #[arg(long)]
    pub(crate) image: Option<String>,
}

impl SandboxArgs {
    pub(crate) fn builder(&self) -> anyhow::Result<SandboxBuilder> {
        let choice: BackendChoice = self.postgres.as_deref().unwrap_or("auto").parse()?;
        let builder = SandboxBuilder::from_env()?.backend(choice);
        Ok(match &self.image {
            Some(image) => builder.image(image),
            None => builder,
        })
    }
}

/// How migrations wait for table locks (`migrate` applies with it; `verify`
/// rehearses it behind a long transaction).
#[derive(Args)]
pub(crate) struct LockArgs {
    /// Cap of each attempt's lock_timeout, so the app never queues longer behind a waiting lock (e.g. 500ms, 1s), 10ms to 1m. migrate first waits without queueing while another session holds a conflicting lock, then attempts for 50ms; attempts it cannot look ahead for (and verify's probe) start at 100ms and grow to the cap.
    #[arg(long, default_value = "500ms", value_parser = duration_in(bounds::LOCK_TIMEOUT))]
    pub(crate) lock_timeout: Duration,
    /// How long to keep retrying a lock before giving up and naming the blocker (e.g. 5m, 30s), 0s to 24h.
    #[arg(long, default_value = "5m", value_parser = duration_in(bounds::RETRY_FOR))]
    pub(crate) retry_for: Duration,
}

impl LockArgs {
    pub(crate) fn policy(&self) -> LockPolicy {
        LockPolicy::default()
            .max_timeout(self.lock_timeout)
            .retry_for(self.retry_for)
    }
}

/// `--format`, parsed by the library's [`Format`].
#[derive(Clone)]
pub(crate) struct FormatArg(Format);

impl std::str::FromStr for FormatArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse().map(FormatArg)
    }
}

/// `--placeholder NAME=VALUE`.
pub(crate) fn placeholder_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_string(), value.to_string()))
        }
        _ => Err(format!(
            "`{s}` is not NAME=VALUE; write e.g. --placeholder schema=app"
        )),
    }
}

/// The database and the migration files, shared by `migrate`, `status` and `check`.
#[derive(Args)]
pub(crate) struct TargetDbArgs {
    /// postgres://USER:PASSWORD@HOST:PORT/DB[?sslmode=disable|prefer|require|verify-ca|verify-full&sslrootcert=FILE]
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
    /// Migration folder (default: the migrations embedded in rollsafe); status and migrate read and write its own tool's history table (refinery_schema_history, __diesel_schema_migrations, _sqlx_migrations, …).
    #[arg(long)]
    pub(crate) migrations: Option<std::path::PathBuf>,
    /// The tool whose folder --migrations is [default: detected]; see `rollsafe verify --help`.
    #[arg(long, value_name = "LAYOUT")]
    pub(crate) layout: Option<Layout>,
    /// A Flyway placeholder's value, or a goose ENVSUB variable's (repeatable).
    #[arg(long = "placeholder", value_name = "NAME=VALUE", value_parser = placeholder_pair)]
    pub(crate) placeholders: Vec<(String, String)>,
}

impl TargetDbArgs {
    /// The catalog `migrate` and `status` compare with the database's
    /// history (the folder's tool's table).
    pub(crate) fn catalog(&self) -> Result<Catalog, ExitCode> {
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

/// How findings reports are written (`verify`, `check`).
#[derive(Args)]
pub(crate) struct ReportArgs {
    /// Report format: text, json, junit, github (workflow commands), markdown (a bounded PR/MR summary), gitlab (Code Quality JSON) or sarif (SARIF 2.1.0, for code scanning); default text.
    #[arg(long, value_parser = clap::value_parser!(FormatArg))]
    pub(crate) format: Option<FormatArg>,
    /// Write the --format report to FILE, or one report per FORMAT=FILE (repeatable; - is stdout): --output junit=report.xml --output github=-. The text report goes to stdout unless another report does.
    #[arg(long, value_name = "[FORMAT=]FILE")]
    pub(crate) output: Vec<OutputSpec>,
}

impl ReportArgs {
    /// The reports to write; checked before a run starts.
    pub(crate) fn targets(&self) -> anyhow::Result<Vec<Target>> {
        output::plan(self.format.as_ref().map(|f| f.0), &self.output).map_err(anyhow::Error::msg)
    }

    /// Writes the reports; exit 0 when it passed, 1 when it has errors.
    pub(crate) fn emit(
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

/// A clap value parser for a duration flag: [`parse_duration`], then
/// `range` (a value outside it is refused in one line, exit 2).
pub(crate) fn duration_in(
    range: bounds::DurationRange,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| range.check(parse_duration(s)?)
}

/// A clap value parser for a count flag: a whole number within `range`.
pub(crate) fn count_in(
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
pub(crate) fn table_rows_pair(s: &str) -> Result<String, String> {
    Sizes::from_pairs([s]).map(|_| s.to_string())
}

/// `5s`, `500ms`, `2m`, `1h`, `1h 30m` (humantime), or plain seconds.
pub(crate) fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration ({e}); e.g. 5s, 500ms, 2m, 1h"))
}

//! `rollsafe check`: the read-only audit of a real database.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use rollsafe::bounds;
use rollsafe::dao::shipped;
use rollsafe::db;

use super::args::{duration_in, ReportArgs, SandboxArgs, TargetDbArgs};

#[derive(Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub(crate) db: TargetDbArgs,
    /// Report not-ready attached functions older than this (e.g. 1h, 30m, 90s), 1s to 30d; the shipped project's invariant, checked when --migrations is not given.
    #[arg(long, default_value = "1h", value_parser = duration_in(bounds::STUCK_AFTER))]
    pub(crate) stuck_after: Duration,
    #[command(flatten)]
    pub(crate) report: ReportArgs,
    /// Where to build the expected schema when no checked-in snapshot fits (only then is throwaway Postgres started).
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
    /// PostgreSQL major of that throwaway server: a number, or from-target (the audited database's major).
    #[arg(long, value_name = "V|from-target")]
    pub(crate) postgres_version: Option<String>,
    /// How long each backfill predicate may scan the database (its statement_timeout), 100ms to 1h; one that takes longer is reported skipped.
    #[arg(long, default_value = "30s", value_parser = duration_in(bounds::CHECK_STATEMENT_TIMEOUT))]
    pub(crate) statement_timeout: Duration,
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
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

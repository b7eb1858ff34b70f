//! The `rollsafe` binary: parses arguments, calls the library, maps errors to
//! exit codes. Nothing else lives here.
//!
//! Exit codes (documented in README): 0 success / no error findings,
//! 1 error findings or a refused/failed migration, 2 could not run (usage,
//! connection, sandbox). `migrate` and `status` details: `rollsafe::migrate`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

use cli::{capture, check, could_not_run, migrate, signals, status, verify};

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
    Verify(verify::VerifyArgs),
    /// Apply pending migrations to a database: one migrator at a time, bounded lock waits, drift refused.
    Migrate(migrate::MigrateArgs),
    /// Show each migration version's state in a database: applied, pending, divergent, missing, unknown-newer.
    Status(status::StatusArgs),
    /// Read-only audit of a real database: history vs files, schema as expected, backfill and readiness invariants, invalid indexes, NOT VALID constraints.
    Check(check::CheckArgs),
    /// Write an app's statement set from the database's pg_stat_statements (read-only), for `verify --apps`.
    Capture(capture::CaptureArgs),
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("ROLLSAFE_LOG", "warn"))
        .format_timestamp(None)
        .init();
    let cli = Cli::parse();
    signals::stop_on_signals();
    let result = match cli.command {
        Command::Verify(args) => verify::run(args),
        Command::Migrate(args) => return migrate::run(args),
        Command::Status(args) => return status::run(args),
        Command::Check(args) => check::run(args),
        Command::Capture(args) => return capture::run(args),
    };
    signals::wait_if_stopping();
    result.unwrap_or_else(could_not_run)
}

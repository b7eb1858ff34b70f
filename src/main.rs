//! The `rollsafe` binary: parses arguments, calls the library, maps errors to
//! exit codes. Nothing else lives here.
//!
//! Exit codes (documented in README): 0 success / no error findings,
//! 1 error findings or a refused/failed migration, 2 could not run (usage,
//! connection, sandbox).

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use rollsafe::sandbox::{BackendChoice, SandboxBuilder, DEFAULT_IMAGE, ENV_BACKEND, ENV_IMAGE};

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
}

/// An error that means "could not run" (exit 2) rather than "found problems".
fn could_not_run(e: anyhow::Error) -> ExitCode {
    eprintln!("rollsafe: error: {e:#}");
    ExitCode::from(2)
}

fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let sandbox = args.sandbox.builder()?.start()?;
    println!("sandbox: {}", sandbox.describe());
    println!("server:  {}", sandbox.server_version()?);
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("ROLLSAFE_LOG", "warn"))
        .format_timestamp(None)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Verify(args) => verify(args),
    };
    result.unwrap_or_else(could_not_run)
}

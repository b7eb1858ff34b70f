//! The `rollsafe` binary: parses arguments, calls the library, maps errors to
//! exit codes. Nothing else lives here.
//!
//! Exit codes (documented in README): 0 success / no error findings,
//! 1 error findings or a refused/failed migration, 2 could not run (usage,
//! connection, sandbox).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use rollsafe::catalog::Catalog;
use rollsafe::report::{render, Format};
use rollsafe::sandbox::{BackendChoice, SandboxBuilder, DEFAULT_IMAGE, ENV_BACKEND, ENV_IMAGE};
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
    /// Rows seeded per rehearsal (written like the live app versions write them).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_ROWS)]
    rows: u64,
    /// Report format: text, json or junit.
    #[arg(long, default_value = "text", value_parser = clap::value_parser!(FormatArg))]
    format: FormatArg,
    /// Write the report to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Lock timeout a migration must give up within behind a long transaction (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    lock_timeout: Duration,
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

/// `5s`, `500ms`, `2m`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("`{s}` is not a duration; use e.g. 5s, 500ms or 1m");
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(bad()),
    };
    if secs <= 0.0 {
        return Err(format!("`{s}`: the lock timeout must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// An error that means "could not run" (exit 2) rather than "found problems".
fn could_not_run(e: anyhow::Error) -> ExitCode {
    eprintln!("rollsafe: error: {e:#}");
    ExitCode::from(2)
}

fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::load(args.migrations.as_deref())?;
    let mut verify = Verify::new(catalog)?
        .rows(args.rows)
        .lock_timeout(args.lock_timeout);
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
    let text = render(&report, args.format.0);
    match &args.output {
        Some(path) => {
            std::fs::write(path, &text)
                .with_context(|| format!("cannot write the report to {}", path.display()))?;
            // The file is for machines; the log still shows the findings.
            if args.format.0 != Format::Text {
                print!("{}", render(&report, Format::Text));
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

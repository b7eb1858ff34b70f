//! The command line, one room per command (as cargo's `commands/`): each
//! file holds its command's flags and its run. `main.rs` only parses and
//! dispatches; the library never prints or exits.

use std::process::ExitCode;

use crate::cli::signals::wait_if_stopping;

pub mod args;
pub mod capture;
pub mod check;
pub mod migrate;
pub mod signals;
pub mod status;
pub mod verify;

/// An error that means "could not run" (exit 2) rather than "found
/// problems": its line, then the last lines a failing command printed,
/// as lines (on one line they would run together).
pub(crate) fn could_not_run(e: anyhow::Error) -> ExitCode {
    let code = fail(2, &rollsafe::errors::one_line(e.as_ref()));
    let output = e
        .chain()
        .find_map(|c| c.downcast_ref::<rollsafe::framework::FrameworkError>())
        .map_or(&[][..], |f| f.output());
    for line in output {
        eprintln!("  | {line}");
    }
    code
}

/// Prints a one-line error and returns `code`.
pub(crate) fn fail(code: u8, e: &dyn std::fmt::Display) -> ExitCode {
    wait_if_stopping();
    let line = rollsafe::errors::collapse(&e.to_string());
    eprintln!("rollsafe: error: {line}");
    ExitCode::from(code)
}

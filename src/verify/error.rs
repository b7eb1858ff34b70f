//! Why a rehearsal could not run at all (as opposed to findings): the
//! error every floor of verify may return. Lowest floor (with the
//! evidence): it names only the sandbox's, the apps' and the target's
//! errors, so an instrument returns it without importing the
//! orchestrator.

use std::path::PathBuf;

use thiserror::Error;

use crate::app::AppError;
use crate::sandbox::SandboxError;
use crate::target::TargetError;

/// Why a rehearsal could not run at all (as opposed to findings).
#[derive(Debug, Error)]
pub enum VerifyError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Apps(#[from] AppError),
    #[error("{path}: not a valid schema snapshot ({detail}); regenerate it (see src/schema.rs) or remove it")]
    BadSnapshot { path: PathBuf, detail: String },
    #[error("--since {since} is not a migration version (the files have {available}); pass one of those")]
    UnknownSince { since: i32, available: String },
    #[error("{label} ({file}) fails to apply before the rehearsed migrations (--since): {detail}; it is applied unchecked, so it must apply cleanly on the previous version")]
    PrefixFails {
        label: String,
        file: String,
        detail: String,
    },
    #[error("{place}: [[accept]] migration `{migration}`: {why}; name a migration of the rehearsed folder as its tool does")]
    UnknownAccept {
        place: String,
        migration: String,
        why: String,
    },
    #[error("rehearsal failed while {step}: {detail}")]
    Rehearsal { step: String, detail: String },
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("--table-rows names {unknown}, which no rehearsed migration's schema has (tables: {known}); name a table as the reports do (outside public with its schema, e.g. sales.orders)")]
    UnknownTableRows { unknown: String, known: String },
}

/// `r`, its error a [`VerifyError::Rehearsal`] that says which step of the
/// rehearsal failed.
pub(crate) fn step<T, E: Into<anyhow::Error>>(
    what: &str,
    r: Result<T, E>,
) -> Result<T, VerifyError> {
    // The server's message and the causes, one line (a driver error's
    // Display alone is "db error").
    r.map_err(|e| VerifyError::Rehearsal {
        step: what.to_string(),
        detail: crate::errors::one_line(e.into().as_ref()),
    })
}

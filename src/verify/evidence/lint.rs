//! squawk's warnings on a migration's text, read before any database: the
//! `static` check holds each against what its statement measured.

use crate::report::Location;

/// One squawk violation in one migration file.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    /// squawk's rule name (`require-concurrent-index-creation`), or
    /// `syntax-error` / `not-linted` (`crate::verify::checks::static`).
    pub rule: String,
    /// squawk's message.
    pub message: String,
    /// squawk's fix, when the rule has one.
    pub help: Option<String>,
    /// Index of its statement in [`crate::sql::split`] of the file: the
    /// same index as the rehearsal's `Applied::statements`. None when the
    /// file could not be split exactly.
    pub statement: Option<usize>,
    /// The table the statement alters or indexes (normalised as PostgreSQL
    /// folds names), when it names one in the `public` schema.
    pub table: Option<String>,
    /// Line and column of the flagged construct itself (not of the
    /// statement's start); the excerpt is the statement's.
    pub location: Location,
    /// The flagged text, whitespace folded (`SET NOT NULL`).
    pub flagged: String,
}

//! A migration applied at rows by a command of the project's own (a
//! framework's data migration, [`crate::catalog::ExternalApply`]): what
//! can be measured from outside its connections. Its statements, their
//! locks and rewrites are the command's and are not seen one by one; the
//! checks that need them say so.

use std::time::Duration;

/// What the command did to the seeded database.
#[derive(Debug, Clone)]
pub struct ExternalRun {
    /// Who applied it and how: `Django`, `python3 manage.py migrate …`.
    pub by: String,
    pub command: String,
    /// Rows the seeded database held.
    pub rows: i64,
    /// How long the command ran (its start-up included).
    pub took: Duration,
    /// Rows it changed, per table that changed (the cumulative table
    /// statistics before and after it; the framework's own tables left
    /// out), or why they could not be read.
    pub changed: Result<Vec<RowsChanged>, String>,
    /// How it failed: what failed (its exit status) and its last lines
    /// of output, the password masked. None: it succeeded.
    pub failed: Option<(String, Vec<String>)>,
    /// What the history recorded beyond this migration after the command
    /// (keys of later migrations): the command applied more than it (a
    /// project whose code migrates itself when it starts), so the rows
    /// after it are not this migration's doing. None: exactly this one.
    pub applied_beyond: Option<String>,
}

/// Rows one table gained, had updated and lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowsChanged {
    pub table: String,
    pub inserted: i64,
    pub updated: i64,
    pub deleted: i64,
}

impl ExternalRun {
    /// `hives_hive: 500 updated; …`, or `no rows` (None: not measured).
    pub fn changed_phrase(&self) -> Option<String> {
        let changed = self.changed.as_ref().ok()?;
        if changed.is_empty() {
            return Some("no rows".into());
        }
        Some(
            changed
                .iter()
                .map(|c| {
                    let parts: Vec<String> = [
                        (c.inserted, "inserted"),
                        (c.updated, "updated"),
                        (c.deleted, "deleted"),
                    ]
                    .iter()
                    .filter(|(n, _)| *n != 0)
                    .map(|(n, what)| format!("{n} {what}"))
                    .collect();
                    format!("{}: {}", c.table, parts.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}

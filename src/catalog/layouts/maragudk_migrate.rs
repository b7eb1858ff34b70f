//! maragudk/migrate (`github.com/maragudk/migrate`, v0.4): a Go library,
//! not a CLI, so its folder is told apart by the project that uses it
//! (a go.mod that requires it, [`super::project_tools`]) or `--layout`.
//! Its names are golang-migrate's and sqlx's, read another way:
//!
//! - A migration is an entry of the folder whose name matches
//!   `^([\w-]+).up.sql$` (a Go regexp with its dots unescaped, so
//!   `x_up.sql` is one too), in the order `fs.ReadDir` gives: by name,
//!   byte-wise. Its **version is the whole name before the last seven
//!   characters** (`0001_create_users`), a string, so numeric prefixes may
//!   repeat. Down files (`^([\w-]+).down.sql`) and any other name are not
//!   run.
//! - The history is one table (`migrations` by default; a project may pass
//!   another name in `Options.Table`, which rollsafe does not read) holding
//!   one `version text` row, `''` at first. The tool skips every file whose
//!   version is `<=` that row (Go's byte-wise string comparison), so every
//!   such file is applied; a file whose version does not grow with its name
//!   is never run by the tool, and rollsafe refuses it by name.
//! - Each file runs in its own transaction: `update <table> set version =
//!   '<version>'`, then the whole file in one `Exec` (a simple-query string
//!   inside the transaction: rollsafe's [`Execution::Transaction`]), then
//!   commit. rollsafe writes the row after the file's statements, in the
//!   same transaction: the same row at commit.
//! - No checksum is kept: an edited applied file is not noticed by the
//!   tool, and there is nothing for `status` to compare.
//! - The optional `Before`/`After` callbacks are the project's Go code,
//!   run in each migration's transaction: rollsafe cannot run them, and
//!   says so beside how it read the folder ([`CALLBACKS`]).

use std::time::Duration;

use super::{
    digits_and_name, unreadable, AppliedRow, Folder, HistoryRules, HistoryWrite, LayoutReader,
    ReadOptions, RowWrite, Step, Value,
};
use crate::catalog::{CatalogError, Execution, Layout, Migration};

pub struct MaragudkMigrate;

/// What rollsafe does not run of this tool: said with the layout, since
/// the callbacks live in the project's Go code, not in the folder.
pub const CALLBACKS: &str = "maragudk/migrate's Before/After callbacks are the project's Go code: rollsafe does not run them, so what they change is neither rehearsed nor applied";

/// `migrations(version text not null)`: one row, the newest version
/// applied (`''` for none), created as the tool creates it.
static HISTORY: HistoryRules = HistoryRules {
    write: Some(HistoryWrite {
        create: "create table if not exists migrations (version text not null);
             insert into migrations select '' where not exists (select * from migrations)",
        record,
    }),
    expand: every_version_up_to_the_current,
    ..HistoryRules::new(
        "migrations",
        "SELECT version, '', NULL::text FROM migrations",
    )
};

/// The row stands for every file whose version is at or below it, as the
/// tool compares them (byte-wise, not by the database's collation).
fn every_version_up_to_the_current(
    migrations: &[Migration],
    rows: Vec<AppliedRow>,
) -> Vec<AppliedRow> {
    let Some(current) = rows.into_iter().map(|r| r.key).max() else {
        return Vec::new();
    };
    migrations
        .iter()
        .filter(|m| m.key.as_bytes() <= current.as_bytes())
        .map(|m| AppliedRow::version_only(&m.key))
        .collect()
}

fn record(m: &Migration, _: Duration) -> Vec<RowWrite> {
    vec![RowWrite::new(
        "update migrations set version = $1",
        vec![Value::Text(m.key.clone())],
    )]
}

/// `[\w-]` in Go's regexp: ASCII letters, digits, `_` and `-`.
fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-')
}

/// `s` without its last character, Go's `.` (any but a newline).
fn drop_last(s: &str) -> Option<&str> {
    let c = s.chars().next_back()?;
    (c != '\n').then(|| &s[..s.len() - c.len_utf8()])
}

/// `s` without its first character, Go's `.` (any but a newline).
fn drop_first(s: &str) -> Option<&str> {
    let c = s.chars().next()?;
    (c != '\n').then(|| &s[c.len_utf8()..])
}

/// The version of an up file (`^([\w-]+).up.sql$`): the name without
/// `<any>up<any>sql`; None for any other name.
pub fn up_version(name: &str) -> Option<&str> {
    let stem = drop_last(drop_last(name.strip_suffix("sql")?)?.strip_suffix("up")?)?;
    (!stem.is_empty() && stem.chars().all(is_word)).then_some(stem)
}

/// Whether `name` is a down file (`^([\w-]+).down.sql`, unanchored at
/// the end): never run, but the tool's own.
fn is_down(name: &str) -> bool {
    let words = name.find(|c| !is_word(c)).unwrap_or(name.len());
    (1..=words).any(|i| {
        drop_first(&name[i..])
            .and_then(|r| r.strip_prefix("down"))
            .and_then(drop_first)
            .is_some_and(|r| r.starts_with("sql"))
    })
}

/// Every one of `files` is one of the tool's names (an up or a down
/// file): a folder another layout's detection calls mixed may be this
/// tool's.
pub fn names_all<'a>(mut files: impl Iterator<Item = &'a str>) -> bool {
    files.all(|f| up_version(f).is_some() || is_down(f))
}

impl LayoutReader for MaragudkMigrate {
    fn companion(&self, file: &str) -> Option<&'static str> {
        super::is_down_file(file).then_some(super::DOWN_FILES)
    }

    fn pattern(&self) -> &'static str {
        "<version>.up.sql (the version the whole name, e.g. 0001_create_users)"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    /// Only inside a Go module that requires the tool: its names are
    /// golang-migrate's and sqlx's too.
    fn claims(&self, folder: &Folder) -> Vec<String> {
        if !folder.project.contains(&Layout::MaragudkMigrate) {
            return Vec::new();
        }
        folder
            .top_level_sql()
            .filter(|(f, _)| up_version(f).is_some() || is_down(f))
            .map(|(f, _)| f.to_string())
            .collect()
    }

    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let mut steps: Vec<Step> = Vec::new();
        for (file, bytes) in folder.top_level_sql() {
            let Some(version) = up_version(file) else {
                continue;
            };
            if let Some(before) = steps.last().filter(|s| s.key.as_str() >= version) {
                return Err(never_run(file, version, before));
            }
            steps.push(Step {
                key: version.to_string(),
                label: version.to_string(),
                name: digits_and_name(version)
                    .map_or(version, |(_, n)| n)
                    .to_string(),
                file: file.to_string(),
                sql: super::utf8(file, bytes.to_vec())?,
                execution: Execution::Transaction,
                ..Step::default()
            });
        }
        if steps.is_empty() {
            if let Some((file, _)) = folder.top_level_sql().next() {
                return Err(unreadable(file, Layout::MaragudkMigrate, options));
            }
        }
        Ok(steps)
    }

    fn caveat(&self) -> Option<&'static str> {
        Some(CALLBACKS)
    }
}

/// A file the tool reads after `before` (by name) whose version is not
/// greater: it skips it on every database that ran `before`.
fn never_run(file: &str, version: &str, before: &Step) -> CatalogError {
    CatalogError::Unreadable {
        file: file.to_string(),
        why: format!(
            "maragudk/migrate never runs it: it reads files by name, and its version `{version}` is not after `{}` ({}, read before it), so the tool skips it as applied; rename it so that versions grow with the file names",
            before.key, before.file
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's regexp with its unescaped dots: `x_up.sql` is an up file of
    /// version `x`; a dot inside the version is not `[\w-]`.
    #[test]
    fn names_match_as_the_tools_regexp_does() {
        assert_eq!(up_version("0001_users.up.sql"), Some("0001_users"));
        assert_eq!(up_version("0021_hooks_up.sql"), Some("0021_hooks"));
        assert_eq!(up_version("a-b.up.sql"), Some("a-b"));
        assert_eq!(up_version("1.1.up.sql"), None);
        assert_eq!(up_version(".up.sql"), None);
        assert_eq!(up_version("0001_users.down.sql"), None);
        assert_eq!(up_version("0001_users.sql"), None);
        assert_eq!(up_version("été.up.sql"), None);
        assert!(is_down("0001_users.down.sql"));
        assert!(is_down("0021_hooks_down.sql"));
        assert!(!is_down("0001_users.up.sql"));
        assert!(!is_down("notes.sql"));
    }
}

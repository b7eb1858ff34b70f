//! diesel: a folder per migration, `{version}_{name}/up.sql` (+ `down.sql`,
//! never read, and an optional `metadata.toml`). The version is the folder
//! name before its first `_` with every `-` removed (diesel's
//! `version_from_string`), so `2024-10-25-112826_x`, `20140924113530_x` and
//! `2026-07-30-140000-0000_x` are all versions, compared as strings, which is
//! how diesel orders them. `metadata.toml` sets `run_in_transaction`; in
//! diesel's code a file that exists without the key reads as `false`
//! (`#[serde(default)] run_in_transaction: bool`; only a missing file
//! defaults to `true`), and rollsafe follows it. Folders starting with `.`
//! are skipped, as diesel skips them. `00000000000000_diesel_initial_setup`
//! is an ordinary migration (the helper functions diesel's setup writes).

use std::time::Duration;

use serde::Deserialize;

use super::{Folder, HistoryRules, HistoryWrite, LayoutReader, ReadOptions, RowWrite, Step, Value};
use crate::catalog::CatalogError;
use crate::catalog::{Execution, Migration};

pub struct Diesel;

/// `__diesel_schema_migrations(version, run_on)`: a row per applied
/// migration, its version (the folder prefix without `-`).
static HISTORY: HistoryRules = HistoryRules {
    write: Some(HistoryWrite {
        create: "CREATE TABLE IF NOT EXISTS __diesel_schema_migrations (
                 version VARCHAR(50) PRIMARY KEY NOT NULL,
                 run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)",
        record,
    }),
    ..HistoryRules::new(
        "__diesel_schema_migrations",
        "SELECT version::text, run_on::text, NULL::text FROM __diesel_schema_migrations",
    )
};

fn record(m: &Migration, _: Duration) -> Vec<RowWrite> {
    vec![RowWrite::new(
        "INSERT INTO __diesel_schema_migrations (version) VALUES ($1)",
        vec![Value::Text(m.key.clone())],
    )]
}

const UP: &str = "up.sql";

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    run_in_transaction: bool,
}

/// diesel's version of a migration folder name (`version_from_string` in
/// its `migrations_internals`): the text before the first `_`, every `-`
/// removed, whatever it holds. `2024-01-05-1200-oar-racks` (no `_`) is the
/// version `202401051200oarracks`, and it is what diesel has recorded in
/// every database that ran it: renaming the folder would run it again.
fn version(dir: &str) -> String {
    dir.split('_').next().unwrap_or(dir).replace('-', "")
}

/// A folder diesel runs that reads as a migration of diesel's for
/// detection: its version starts with a digit (a date or a timestamp).
fn looks_versioned(dir: &str) -> bool {
    version(dir).starts_with(|c: char| c.is_ascii_digit())
}

impl LayoutReader for Diesel {
    fn companion(&self, file: &str) -> Option<&'static str> {
        match file.rsplit('/').next() {
            Some("down.sql") => Some(super::DOWN_FILES),
            Some("metadata.toml") => Some("diesel metadata file(s) (read for run_in_transaction)"),
            _ => None,
        }
    }

    fn pattern(&self) -> &'static str {
        "<version>_<name>/up.sql"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        folder
            .dirs_with(UP)
            .into_iter()
            .filter(|d| looks_versioned(d))
            .map(|d| format!("{d}/{UP}"))
            .collect()
    }

    fn read(&self, folder: &Folder, _options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let mut steps = Vec::new();
        for dir in folder.dirs_with(UP) {
            let file = format!("{dir}/{UP}");
            let key = version(dir);
            let sql = folder.text(&file)?.unwrap_or_default();
            let metadata = format!("{dir}/metadata.toml");
            let run_in_transaction = match folder.text(&metadata)? {
                None => true,
                Some(text) => {
                    toml::from_str::<Metadata>(&text)
                        .map_err(|e| CatalogError::Unreadable {
                            file: metadata.clone(),
                            why: format!(
                                "is not the metadata diesel reads ({}); write `run_in_transaction = true` or `false`",
                                e.message()
                            ),
                        })?
                        .run_in_transaction
                }
            };
            steps.push(Step {
                key,
                label: dir.to_string(),
                name: dir.split_once('_').map_or(dir, |(_, n)| n).to_string(),
                file,
                sql,
                // Without a transaction diesel sends the file with
                // `batch_execute`: one simple-query string.
                execution: if run_in_transaction {
                    Execution::Transaction
                } else {
                    Execution::SimpleQuery
                },
                ..Step::default()
            });
        }
        steps.sort_by(|a, b| a.key.cmp(&b.key).then(a.file.cmp(&b.file)));
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_drop_dashes_and_metadata_without_the_key_is_false() {
        assert_eq!(version("2024-10-25-112826_x"), "20241025112826");
        assert_eq!(version("2026-07-30-140000-0000_x"), "202607301400000000");
        assert_eq!(
            version("00000000000000_diesel_initial_setup"),
            "00000000000000"
        );
        // No `_`: the whole name, dashes removed, as diesel records it.
        assert_eq!(version("2024-01-05-1200-oar-racks"), "202401051200oarracks");
        assert!(looks_versioned("2024-01-05-1200-oar-racks"));
        assert!(!looks_versioned("init"));
        let m: Metadata = toml::from_str("# nothing set\n").unwrap();
        assert!(!m.run_in_transaction);
    }
}

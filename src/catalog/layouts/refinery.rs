//! refinery: `V{version}__{name}.sql`, whole versions, names of letters,
//! digits and `_` (refinery refuses others); every file in a transaction.
//! The embedded set is in this layout. refinery's `U` prefix means
//! *unversioned*, Flyway's means *undo*: a folder with `U` files is read
//! as Flyway's.

use std::time::Duration;

use super::{
    sort_numeric, unreadable, Folder, HistoryRules, HistoryWrite, LayoutReader, ReadOptions,
    RowWrite, Step, Value,
};
use crate::catalog::Execution;
use crate::catalog::{CatalogError, Layout, Migration};

pub struct Refinery;

/// refinery's history table (its default name): rollsafe's own migrator
/// keeps it, for refinery folders and for rehearsals of the tools whose
/// tables rollsafe only reads.
pub const HISTORY_TABLE: &str = "refinery_schema_history";

/// `refinery_schema_history(version, name, applied_on, checksum)`: the
/// version, the name, an RFC 3339 UTC time and refinery's decimal
/// checksum of (name, version, sql), as refinery writes them.
static HISTORY: HistoryRules = HistoryRules {
    write: Some(HistoryWrite {
        // As refinery creates it (for a first migration that runs
        // outside a transaction).
        create: "CREATE TABLE IF NOT EXISTS refinery_schema_history(
             version int4 PRIMARY KEY,
             name VARCHAR(255),
             applied_on VARCHAR(255),
             checksum VARCHAR(255))",
        record,
    }),
    ..HistoryRules::new(
        HISTORY_TABLE,
        "SELECT version::text, coalesce(applied_on, ''), NULL::text FROM refinery_schema_history",
    )
};

fn record(m: &Migration, _: Duration) -> Vec<RowWrite> {
    let applied_on = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    vec![RowWrite::new(
        "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) VALUES ($1, $2, $3, $4)",
        vec![
            Value::Int(m.version),
            Value::Text(m.refinery_history_name()),
            Value::Text(applied_on),
            Value::Text(m.checksum.to_string()),
        ],
    )]
}

/// Parses `V3__name.sql` into ("3", "name"); None for anything else.
pub fn parse_name(file: &str) -> Option<(&str, &str)> {
    let stem = file.strip_suffix(".sql")?;
    let (version, name) = stem.strip_prefix('V')?.split_once("__")?;
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    // refinery's versions are i32.
    version.parse::<i32>().ok()?;
    Some((version, name))
}

impl LayoutReader for Refinery {
    fn pattern(&self) -> &'static str {
        "V<version>__<name>.sql"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        if !super::flyway::Flyway.claims(folder).is_empty() {
            return Vec::new();
        }
        folder
            .top_level_sql()
            .filter(|(f, _)| parse_name(f).is_some())
            .map(|(f, _)| f.to_string())
            .collect()
    }

    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let mut steps = Vec::new();
        for (file, bytes) in folder.top_level_sql() {
            let (version, name) =
                parse_name(file).ok_or_else(|| unreadable(file, Layout::Refinery, options))?;
            let number: i32 = version.parse().expect("parse_name checked it");
            steps.push(Step {
                key: number.to_string(),
                label: format!("V{number}"),
                name: name.to_string(),
                file: file.to_string(),
                sql: super::utf8(file, bytes.to_vec())?,
                execution: Execution::Transaction,
                ..Step::default()
            });
        }
        sort_numeric(&mut steps);
        Ok(steps)
    }
}

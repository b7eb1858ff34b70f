//! refinery: `V{version}__{name}.sql`, whole versions, names of letters,
//! digits and `_` (refinery refuses others); every file in a transaction.
//! The embedded set is in this layout. refinery's `U` prefix means
//! *unversioned*, Flyway's means *undo*: a folder with `U` files is read
//! as Flyway's.

use super::{sort_numeric, unreadable, Folder, LayoutReader, ReadOptions, Step};
use crate::catalog::Execution;
use crate::catalog::{CatalogError, Layout};

pub struct Refinery;

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

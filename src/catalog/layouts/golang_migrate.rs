//! golang-migrate: `{version}_{title}.up.sql` (version a `uint`), its
//! `.down.sql` never read. Every file runs as it is, without a
//! transaction around it: a file that wants one writes its own
//! `BEGIN`/`COMMIT`. rollsafe runs each up file in one transaction, as
//! refinery-layout files, unless it says `-- rollsafe:no-transaction`.

use super::{digits_and_name, sort_numeric, unreadable, Folder, LayoutReader, ReadOptions, Step};
use crate::catalog::Execution;
use crate::catalog::{CatalogError, Layout};

pub struct GolangMigrate;

fn up_stem(file: &str) -> Option<&str> {
    file.strip_suffix(".sql")?.strip_suffix(".up")
}

fn down_stem(file: &str) -> Option<&str> {
    file.strip_suffix(".sql")?.strip_suffix(".down")
}

impl LayoutReader for GolangMigrate {
    fn pattern(&self) -> &'static str {
        "<version>_<name>.up.sql"
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        folder
            .top_level_sql()
            .filter(|(f, _)| {
                up_stem(f)
                    .or_else(|| down_stem(f))
                    .and_then(digits_and_name)
                    .is_some()
            })
            .map(|(f, _)| f.to_string())
            .collect()
    }

    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let mut steps = Vec::new();
        for (file, bytes) in folder.top_level_sql() {
            if down_stem(file).and_then(digits_and_name).is_some() {
                continue;
            }
            let (version, name) = up_stem(file)
                .and_then(digits_and_name)
                .filter(|(v, _)| v.parse::<u64>().is_ok())
                .ok_or_else(|| unreadable(file, Layout::GolangMigrate, options))?;
            steps.push(Step {
                key: version.parse::<u64>().unwrap_or_default().to_string(),
                label: version.parse::<u64>().unwrap_or_default().to_string(),
                name: name.to_string(),
                file: file.to_string(),
                sql: super::utf8(file, bytes.to_vec())?,
                execution: Execution::SimpleQuery,
                ..Step::default()
            });
        }
        sort_numeric(&mut steps);
        Ok(steps)
    }
}

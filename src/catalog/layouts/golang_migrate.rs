//! golang-migrate: `{version}_{title}.up.sql` (version a `uint`), its
//! `.down.sql` never read. Every file runs as it is, without a
//! transaction around it: a file that wants one writes its own
//! `BEGIN`/`COMMIT`. rollsafe runs each up file in one transaction, as
//! refinery-layout files, unless it says `-- rollsafe:no-transaction`.
//! A detected folder whose numeric versions repeat is refused naming
//! maragudk/migrate, whose names these are too.

use std::time::Duration;

use super::{
    digits_and_name, sort_numeric, unreadable, AppliedRow, Folder, HistoryRules, HistoryWrite,
    LayoutReader, ReadOptions, RowWrite, Step, Value,
};
use crate::catalog::Execution;
use crate::catalog::{CatalogError, Layout, Migration};

pub struct GolangMigrate;

/// `schema_migrations(version, dirty)`: one row, the newest version
/// applied; a dirty one (a run that failed half-way) counts as none.
static HISTORY: HistoryRules = HistoryRules {
    write: Some(HistoryWrite {
        create: "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version bigint NOT NULL PRIMARY KEY,
                 dirty boolean NOT NULL)",
        record,
    }),
    expand: every_file_up_to_the_newest,
    ..HistoryRules::new(
        "schema_migrations",
        "SELECT version::text, '', NULL::text FROM schema_migrations WHERE NOT dirty",
    )
};

/// The table's one row stands for every file up to its version.
fn every_file_up_to_the_newest(migrations: &[Migration], rows: Vec<AppliedRow>) -> Vec<AppliedRow> {
    let newest: Option<u64> = rows.iter().filter_map(|r| r.key.parse().ok()).max();
    migrations
        .iter()
        .filter(|m| newest.is_some() && m.key.parse::<u64>().ok() <= newest)
        .map(|m| AppliedRow::version_only(&m.key))
        .collect()
}

fn record(m: &Migration, _: Duration) -> Vec<RowWrite> {
    let version: i64 = m.key.parse().unwrap_or_default();
    vec![
        RowWrite::new("DELETE FROM schema_migrations", Vec::new()),
        RowWrite::new(
            "INSERT INTO schema_migrations (version, dirty) VALUES ($1, false)",
            vec![Value::BigInt(version)],
        ),
    ]
}

fn up_stem(file: &str) -> Option<&str> {
    file.strip_suffix(".sql")?.strip_suffix(".up")
}

fn down_stem(file: &str) -> Option<&str> {
    file.strip_suffix(".sql")?.strip_suffix(".down")
}

impl LayoutReader for GolangMigrate {
    fn companion(&self, file: &str) -> Option<&'static str> {
        super::is_down_file(file).then_some(super::DOWN_FILES)
    }

    fn pattern(&self) -> &'static str {
        "<version>_<name>.up.sql"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
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
        match options.layout {
            None => refuse_repeated_versions(&steps).map(|()| steps),
            Some(_) => Ok(steps),
        }
    }
}

/// A detected folder whose versions repeat is not golang-migrate's (it
/// refuses a second file of a version): name the tool it could be, whose
/// versions are whole names. Given `--layout golang-migrate`, the
/// catalog's own duplicate-version refusal stands.
fn refuse_repeated_versions(steps: &[Step]) -> Result<(), CatalogError> {
    match steps.windows(2).find(|w| w[0].key == w[1].key) {
        Some([first, second]) => Err(CatalogError::Unreadable {
            file: second.file.clone(),
            why: format!(
                "shares version {} with {}, which golang-migrate refuses, so the folder is not golang-migrate's; maragudk/migrate (github.com/maragudk/migrate) keys each file by its whole name, so numeric prefixes may repeat: if the project runs it, pass --layout {} (a go.mod that requires it is detected)",
                first.key, first.file, Layout::MaragudkMigrate
            ),
        }),
        _ => Ok(()),
    }
}

//! What a layout says about its tool's history table: which table, how
//! its rows read as applied migrations, how their checksums compare with
//! the files, and, for the tools whose format is public and simple, how
//! to create the table and write a row as the tool does. Each layout's
//! file holds its own [`HistoryRules`] (a `static HISTORY`, handed out by
//! [`super::LayoutReader::history`]), so a new layout is one file.
//!
//! These are data: table names, SQL text and row values. Running them
//! against a database (`status`, `migrate`, a rehearsal's base) is
//! [`crate::migrate::history`]'s job.

use std::time::Duration;

use crate::catalog::Migration;

/// One row of a tool's history table, as the layout's
/// [`HistoryRules::applied`] query reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedRow {
    /// The version as the catalog keys it ([`Migration::key`]).
    pub key: String,
    pub applied_on: String,
    /// The checksum the tool recorded, as text (hex, or Flyway's decimal);
    /// None for tools that record none.
    pub checksum: Option<String>,
}

impl AppliedRow {
    /// Version `key` applied, as a tool that keeps only versions records
    /// it (no time, no checksum): a one-row history's expansion.
    pub fn version_only(key: &str) -> AppliedRow {
        AppliedRow {
            key: key.to_string(),
            applied_on: String::new(),
            checksum: None,
        }
    }
}

/// A layout's answers about its tool's history table.
#[derive(Debug)]
pub struct HistoryRules {
    /// The table, as `to_regclass` reads it.
    pub table: &'static str,
    /// The rows the tool counts as applied, as three text columns: the
    /// version as the tool writes it, when it was applied (`''` when the
    /// tool keeps no time), the checksum it keeps (NULL for none).
    pub applied: &'static str,
    /// How rollsafe creates the table and writes rows as the tool does;
    /// None for a table rollsafe only reads (its rows carry more than
    /// rollsafe can vouch for).
    pub write: Option<HistoryWrite>,
    /// A version as the table writes it, as the catalog keys it.
    pub key: fn(String) -> String,
    /// Whether `recorded`, the checksum the tool keeps for a migration, is
    /// the one its file has now (`file`, [`Migration::tool_checksum`]).
    pub checksum_matches: fn(m: &Migration, recorded: &str, file: &str) -> bool,
    /// What the rows say is applied, one row per migration of the folder
    /// (`migrations`, in order): for a tool whose row stands for more than
    /// one file.
    pub expand: fn(migrations: &[Migration], rows: Vec<AppliedRow>) -> Vec<AppliedRow>,
    /// Said beside a divergent file, when the tool's checksum reaches
    /// beyond the file itself.
    pub divergent_note: Option<&'static str>,
}

impl HistoryRules {
    /// A table rollsafe reads only: versions as the table writes them,
    /// checksums compared as text, one row per migration. Layouts change
    /// what differs with struct-update syntax.
    pub const fn new(table: &'static str, applied: &'static str) -> HistoryRules {
        HistoryRules {
            table,
            applied,
            write: None,
            key: key_as_written,
            checksum_matches: same_text,
            expand: row_per_migration,
            divergent_note: None,
        }
    }
}

fn key_as_written(key: String) -> String {
    key
}

fn same_text(_: &Migration, recorded: &str, file: &str) -> bool {
    recorded.trim() == file
}

fn row_per_migration(_: &[Migration], rows: Vec<AppliedRow>) -> Vec<AppliedRow> {
    rows
}

/// How rollsafe writes a tool's history as the tool does.
#[derive(Debug)]
pub struct HistoryWrite {
    /// The tool's `CREATE TABLE … IF NOT EXISTS` (and any row the tool
    /// writes when it creates the table), run as one batch.
    pub create: &'static str,
    /// The statements that record a migration (applied in `elapsed`), run
    /// in the migration's transaction (after its last statement for a
    /// file outside one).
    pub record: fn(m: &Migration, elapsed: Duration) -> Vec<RowWrite>,
}

/// One statement of a history write and its parameters (`$1` …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowWrite {
    pub sql: &'static str,
    pub params: Vec<Value>,
}

impl RowWrite {
    pub fn new(sql: &'static str, params: Vec<Value>) -> RowWrite {
        RowWrite { sql, params }
    }
}

/// A parameter of a [`RowWrite`], typed as the tool's column is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `int4`
    Int(i32),
    /// `bigint`
    BigInt(i64),
    /// `text`, `varchar`
    Text(String),
    /// `bytea`
    Bytes(Vec<u8>),
}

#[cfg(test)]
mod tests {
    use crate::catalog::{Catalog, Layout};

    /// Every layout's rules speak of its own table, and every write binds
    /// as many values as its statement has placeholders: what a new
    /// layout's file must get right before a database is involved.
    #[test]
    fn each_layouts_rules_name_its_table_and_bind_every_placeholder() {
        let embedded = Catalog::embedded().unwrap();
        let m = &embedded.migrations()[0];
        for layout in Layout::ALL {
            let rules = super::super::reader(layout).history();
            let bare = rules.table.rsplit('.').next().unwrap();
            assert!(rules.applied.contains(bare), "{layout}: {}", rules.applied);
            let Some(write) = &rules.write else {
                continue;
            };
            assert!(write.create.contains(bare), "{layout}: {}", write.create);
            let writes = (write.record)(m, std::time::Duration::ZERO);
            assert!(!writes.is_empty(), "{layout} records nothing");
            for w in writes {
                assert!(w.sql.contains(bare), "{layout}: {}", w.sql);
                let placeholders = (1..=9).filter(|n| w.sql.contains(&format!("${n}"))).count();
                assert_eq!(placeholders, w.params.len(), "{layout}: {}", w.sql);
            }
        }
    }

    /// The keys `layout`'s rules read `rows` as, over a folder of `files`
    /// (its layout detected).
    fn expanded(layout: Layout, files: &[(&str, &str)], rows: &[&str]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        for (f, sql) in files {
            std::fs::write(dir.path().join(f), sql).unwrap();
        }
        let catalog = Catalog::from_dir(dir.path()).unwrap();
        assert_eq!(catalog.layout, layout);
        expand(layout, &catalog, rows)
    }

    /// [`expanded`] over a folder read as `layout` (`--layout`).
    fn expanded_in(layout: Layout, files: &[(&str, &str)], rows: &[&str]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        for (f, sql) in files {
            std::fs::write(dir.path().join(f), sql).unwrap();
        }
        let options = crate::catalog::ReadOptions {
            layout: Some(layout),
            ..Default::default()
        };
        let catalog = Catalog::from_dir_in(dir.path(), &options).unwrap();
        expand(layout, &catalog, rows)
    }

    fn expand(layout: Layout, catalog: &Catalog, rows: &[&str]) -> Vec<String> {
        let rows = rows
            .iter()
            .map(|k| super::AppliedRow::version_only(k))
            .collect();
        let rules = super::super::reader(layout).history();
        (rules.expand)(catalog.migrations(), rows)
            .into_iter()
            .map(|r| r.key)
            .collect()
    }

    /// golang-migrate's one row stands for every file up to its version;
    /// a dbmate version for each earlier section of its file; other
    /// tools' rows are one per migration.
    #[test]
    fn one_row_for_several_migrations_expands_to_each() {
        let golang = [
            ("1_a.up.sql", "SELECT 1;"),
            ("2_b.up.sql", "SELECT 2;"),
            ("3_c.up.sql", "SELECT 3;"),
        ];
        assert_eq!(expanded(Layout::GolangMigrate, &golang, &["2"]), ["1", "2"]);
        let dbmate = [
            ("1_a.sql", "-- migrate:up\nSELECT 1;\n-- migrate:down\n"),
            (
                "2_b.sql",
                "-- migrate:up\nSELECT 2;\n-- migrate:down\n-- migrate:up\nSELECT 3;\n-- migrate:down\n",
            ),
        ];
        assert_eq!(expanded(Layout::Dbmate, &dbmate, &["2"]), ["2#1", "2"]);
        let sqlx = [("1_a.sql", "SELECT 1;"), ("2_b.sql", "SELECT 2;")];
        assert_eq!(expanded(Layout::Sqlx, &sqlx, &["2"]), ["2"]);
    }

    /// maragudk/migrate's one row stands for every file whose version is
    /// at or below it, compared byte-wise as Go compares strings; its
    /// first row, `''`, for none.
    #[test]
    fn maragudks_row_is_every_version_up_to_it() {
        let files = [
            ("0001_a.up.sql", "SELECT 1;"),
            ("0001_b.up.sql", "SELECT 2;"),
            ("0002_A.up.sql", "SELECT 3;"),
        ];
        let go = |rows: &[&str]| expanded_in(Layout::MaragudkMigrate, &files, rows);
        assert_eq!(go(&["0001_b"]), ["0001_a", "0001_b"]);
        assert_eq!(go(&["0001_c"]), ["0001_a", "0001_b"]);
        assert_eq!(go(&["0002_A"]), ["0001_a", "0001_b", "0002_A"]);
        assert!(go(&[""]).is_empty());
        assert!(go(&[]).is_empty());
    }
}

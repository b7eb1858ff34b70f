//! dbmate: `{version}_{name}.sql`, ordered by file name, with
//! `-- migrate:up` and `-- migrate:down` sections; only the up sections
//! run. Since dbmate 2.29 (July 2025) a file may hold several up/down pairs, and
//! dbmate's `Migrate` runs each up section on its own, in its own
//! transaction unless that section's `-- migrate:up transaction:false`
//! says otherwise. rollsafe does the same: a file with several up sections
//! is read as one migration per section, labelled `<version>#<n>`, each
//! with its own transaction mode. dbmate records the file's version once
//! (its 2.35 inserts it after every section and fails on the second on
//! PostgreSQL, dbmate issue #820; the fix it takes records it after the
//! last): the last section carries the version as its key, the sections
//! before it `<version>#<n>`. `rollsafe migrate` records such a section as
//! `<version>#<n>` (so a run stopped between sections resumes after it)
//! and the last section replaces those rows with the version; a recorded
//! version stands for all its sections. Before 2.29 dbmate ran the text
//! between the first up marker and the first down marker only, the rest
//! of the file being its down: a project that pins an older dbmate (its
//! Dockerfile, compose file, CI workflow, package.json, go.mod:
//! [`super::pinned_versions`]) is read that way, and so is, when nothing
//! pins it, a file 2.29 would refuse (an up section without its down).

use std::time::Duration;

use super::{
    keep_lines, unreadable, AppliedRow, Folder, HistoryRules, HistoryWrite, LayoutReader,
    ReadOptions, RowWrite, Step, Value,
};
use crate::catalog::Execution;
use crate::catalog::{CatalogError, Layout, Migration};

pub struct Dbmate;

/// `schema_migrations(version)`: a row per applied file, its version; a
/// file's earlier up sections as `<version>#<n>` until its last applies.
static HISTORY: HistoryRules = HistoryRules {
    write: Some(HistoryWrite {
        create: "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version varchar(128) PRIMARY KEY)",
        record,
    }),
    expand: every_section_of_a_version,
    ..HistoryRules::new(
        "schema_migrations",
        "SELECT version::text, '', NULL::text FROM schema_migrations",
    )
};

/// A recorded version stands for every section of its file.
fn every_section_of_a_version(migrations: &[Migration], rows: Vec<AppliedRow>) -> Vec<AppliedRow> {
    let mut out = Vec::new();
    for r in rows {
        let earlier = format!("{}#", r.key);
        out.extend(
            migrations
                .iter()
                .filter(|m| m.key.starts_with(&earlier))
                .map(|m| AppliedRow {
                    key: m.key.clone(),
                    applied_on: r.applied_on.clone(),
                    checksum: None,
                }),
        );
        out.push(r);
    }
    out
}

/// A section before a file's last is kept as `<version>#<n>` until the
/// last section replaces those rows with the version, in its own
/// transaction: a run that stops between sections resumes after the last
/// one applied.
fn record(m: &Migration, _: Duration) -> Vec<RowWrite> {
    let mut writes = Vec::new();
    if !is_earlier_section(&m.key) {
        writes.push(RowWrite::new(
            "DELETE FROM schema_migrations WHERE version LIKE $1",
            vec![Value::Text(format!("{}#%", m.key))],
        ));
    }
    writes.push(RowWrite::new(
        "INSERT INTO schema_migrations (version) VALUES ($1)",
        vec![Value::Text(m.key.clone())],
    ));
    writes
}

/// `-- migrate:up …` / `-- migrate:down …`: (true for up, its options),
/// matched as dbmate's own patterns match a line
/// (`(?m)^--\s*migrate:up(\s*$|\s+\S+)`, the same for `down`, in its
/// `pkg/dbmate/migration.go`): `--` at the very start of the line
/// (an indented marker is SQL text to dbmate, run with its section),
/// case-sensitive, and the word ends there (`migrate:upgrade` is none).
fn section(line: &str) -> Option<(bool, &str)> {
    let rest = line
        .strip_prefix("--")?
        .trim_start_matches(|c: char| c.is_ascii_whitespace())
        .strip_prefix("migrate:")?;
    let (up, options) = match (rest.strip_prefix("up"), rest.strip_prefix("down")) {
        (Some(options), _) => (true, options),
        (None, Some(options)) => (false, options),
        (None, None) => return None,
    };
    let ends = options.trim().is_empty() || options.starts_with(|c: char| c.is_ascii_whitespace());
    ends.then_some((up, options))
}

pub fn is_dbmate(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes)
        .lines()
        .any(|l| section(l).is_some_and(|(up, _)| up))
}

impl LayoutReader for Dbmate {
    fn pattern(&self) -> &'static str {
        "<version>_<name>.sql with -- migrate:up"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        folder
            .top_level_sql()
            .filter(|(f, b)| is_dbmate(b) && version_and_name(f).is_some())
            .map(|(f, _)| f.to_string())
            .collect()
    }

    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        // top_level_sql is by file name: dbmate's order.
        let mut steps = Vec::new();
        for (file, bytes) in folder.top_level_sql() {
            let (version, name) =
                version_and_name(file).ok_or_else(|| unreadable(file, Layout::Dbmate, options))?;
            let text = super::utf8(file, bytes.to_vec())?;
            let sections = match cuts_sections(folder, &text) {
                true => up_sections(file, &text)?,
                false => first_up_section(file, &text)?,
            };
            let count = sections.len();
            for (i, (sql, no_transaction)) in sections.into_iter().enumerate() {
                let (key, label) = match (count, i + 1 == count) {
                    (1, _) => (version.to_string(), version.to_string()),
                    (_, true) => (version.to_string(), format!("{version}#{}", i + 1)),
                    (_, false) => {
                        let part = format!("{version}#{}", i + 1);
                        (part.clone(), part)
                    }
                };
                steps.push(Step {
                    key,
                    label,
                    name: name.to_string(),
                    file: file.to_string(),
                    sql,
                    // dbmate `transaction:false`: the section as one string.
                    execution: if no_transaction {
                        Execution::SimpleQuery
                    } else {
                        Execution::Transaction
                    },
                    ..Step::default()
                });
            }
        }
        Ok(steps)
    }
}

/// A dbmate migration file name, by dbmate's own pattern
/// (`^(\d+).*\.sql$` in its `FindMigrations`): the leading digits are the
/// version, whatever follows them the name (`20240101_grants copy.sql`,
/// `20240101.sql`).
fn version_and_name(file: &str) -> Option<(&str, &str)> {
    let stem = file.strip_suffix(".sql")?;
    let digits = stem.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0).then(|| {
        let (version, rest) = stem.split_at(digits);
        (version, rest.strip_prefix('_').unwrap_or(rest))
    })
}

/// Whether `key` is a section of a dbmate file before its last
/// (`<version>#<n>`): the file's version is recorded with the last.
/// Digits never hold `#`, so a file's version never looks like one.
fn is_earlier_section(key: &str) -> bool {
    key.contains('#')
}

/// The first dbmate that runs every up section of a file (2.29, its
/// `getMigrationSectionSubstrings`); before it, dbmate ran the text
/// between the first `-- migrate:up` and the first `-- migrate:down` and
/// took everything after that as the down.
pub const SECTIONS_SINCE: (u32, u32) = (2, 29);

/// Whether `text` is cut into one migration per up section, as dbmate
/// 2.29 and later cut it: where the project pins its dbmate
/// ([`Folder::pinned`]), by that version; else where every up section
/// has its own down (2.29 refuses a section without one, so a file with
/// one missing is an older dbmate's, which runs the first section only).
fn cuts_sections(folder: &Folder, text: &str) -> bool {
    if let Some(pin) = folder.pinned_version(Layout::Dbmate) {
        return pin >= SECTIONS_SINCE;
    }
    let mut markers = text
        .split_inclusive('\n')
        .filter_map(|l| section(l).map(|(up, _)| up))
        .peekable();
    let mut every_up_has_its_down = true;
    while let Some(up) = markers.next() {
        if up && markers.peek() != Some(&false) {
            every_up_has_its_down = false;
        }
    }
    every_up_has_its_down
}

/// The up migration as dbmate before 2.29 cut it: the lines after the
/// first `-- migrate:up` up to the first `-- migrate:down` (a later
/// `-- migrate:up` line among them is a comment to PostgreSQL), as one
/// section with the first marker's transaction mode.
fn first_up_section(file: &str, text: &str) -> Result<Vec<(String, bool)>, CatalogError> {
    let mut sections = up_sections(file, text)?;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let start = lines
        .iter()
        .position(|l| matches!(section(l), Some((true, _))))
        .unwrap_or(0);
    let end = lines
        .iter()
        .position(|l| matches!(section(l), Some((false, _))))
        .filter(|&e| e > start)
        .unwrap_or(lines.len());
    let no_transaction = sections.first().is_some_and(|(_, n)| *n);
    sections.truncate(0);
    sections.push((
        keep_lines(text, |i, _| i > start && i < end),
        no_transaction,
    ));
    Ok(sections)
}

/// Each up section (every other line blanked, so each keeps the file's
/// line numbers) and whether it runs outside a transaction.
fn up_sections(file: &str, text: &str) -> Result<Vec<(String, bool)>, CatalogError> {
    let mut starts: Vec<(usize, bool)> = Vec::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if let Some((true, options)) = section(line) {
            let no_transaction = options.split_whitespace().any(|o| o == "transaction:false");
            starts.push((i, no_transaction));
        }
    }
    if starts.is_empty() {
        return Err(CatalogError::Unreadable {
            file: file.to_string(),
            why: "has no `-- migrate:up` section, so dbmate would run nothing of it; mark where the up migration starts".into(),
        });
    }
    let sections = starts
        .iter()
        .enumerate()
        .map(|(n, &(start, no_transaction))| {
            let end = starts.get(n + 1).map_or(usize::MAX, |s| s.0);
            let mut in_up = false;
            let sql = keep_lines(text, |i, line| {
                if i == start {
                    in_up = true;
                    return false;
                }
                if i >= end || section(line).is_some() {
                    in_up = false;
                }
                in_up && i > start && i < end
            });
            (sql, no_transaction)
        })
        .collect();
    Ok(sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_matched_as_dbmate_matches_them() {
        assert_eq!(section("-- migrate:up\n"), Some((true, "\n")));
        assert_eq!(section("--migrate:down"), Some((false, "")));
        assert_eq!(
            section("-- migrate:up transaction:false"),
            Some((true, " transaction:false"))
        );
        for not_a_marker in [
            "  -- migrate:down",
            "\t-- migrate:down\n",
            "-- Migrate:down",
            "-- migrate:downgrade",
            "SELECT 1; -- migrate:down",
        ] {
            assert_eq!(section(not_a_marker), None, "{not_a_marker:?}");
        }
        // An indented down marker: dbmate runs what follows it with the up
        // section.
        let text = "-- migrate:up\nCREATE TABLE t (a int);\n  -- migrate:down\nDROP TABLE t;\n";
        let sections = up_sections("1_t.sql", text).unwrap();
        assert_eq!(sections.len(), 1);
        assert!(sections[0].0.contains("DROP TABLE t;"));
    }

    #[test]
    fn each_up_section_keeps_its_own_transaction_mode() {
        let text = "-- migrate:up transaction:false\nCREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (a);\n-- migrate:down\nDROP INDEX i;\n-- migrate:up\nSELECT 2;\n-- migrate:down\nSELECT 0;\n";
        let sections = up_sections("1_i.sql", text).unwrap();
        assert_eq!(sections.len(), 2);
        let (first, no_tx) = &sections[0];
        assert!(no_tx);
        assert!(
            first.contains("CONCURRENTLY")
                && !first.contains("SELECT 2")
                && !first.contains("DROP")
        );
        let (second, no_tx) = &sections[1];
        assert!(!no_tx);
        assert!(second.contains("SELECT 2") && !second.contains("CONCURRENTLY"));
        assert!(sections
            .iter()
            .all(|(s, _)| s.lines().count() == text.lines().count()));
        let mut folder = Folder::default();
        folder
            .files
            .insert("20240101000000_i.sql".into(), text.as_bytes().to_vec());
        let steps = Dbmate.read(&folder, &ReadOptions::default()).unwrap();
        let keys: Vec<(&str, &str)> = steps
            .iter()
            .map(|s| (s.key.as_str(), s.label.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("20240101000000#1", "20240101000000#1"),
                ("20240101000000", "20240101000000#2")
            ]
        );
    }
}

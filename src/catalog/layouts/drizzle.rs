//! Drizzle (drizzle-kit's `migrate`, drizzle-orm's `migrate()`): the
//! out folder holds `meta/_journal.json` and one `<tag>.sql` per entry of
//! it. Read as drizzle-orm's `readMigrationFiles` reads it:
//!
//! - The journal's `entries`, **in the order the array lists them** (not
//!   by `idx`, not by file name), are the migrations; each runs
//!   `<tag>.sql`. A `.sql` file the journal does not list is never run; an
//!   entry whose file is missing stops the tool, and rollsafe refuses it
//!   by name.
//! - A migration is labelled by its tag (the file's stem,
//!   `0003_brave_spanner`); the history keys it by the entry's `when`
//!   (milliseconds), which is what drizzle records.
//! - The file is split at every `--> statement-breakpoint` and each piece
//!   sent on its own (the `breakpoints` flag of the entry changes
//!   nothing). rollsafe keeps the file's text and line numbers; a piece
//!   whose last statement has no `;` gets one before the marker, so the
//!   pieces stay the statements drizzle sends.
//! - **drizzle sends every pending file in one transaction**
//!   (`session.transaction(…)` around the loop in the pg dialect's
//!   `migrate`): a failure in any file rolls back all of them, and the
//!   locks each file takes are held until the last one commits. rollsafe
//!   rehearses, reports and applies each file in a transaction of its own
//!   ([`CAVEAT`]); each file after the first is marked as sharing the
//!   transaction of the one before ([`Step::shared_transaction`]), and
//!   verify's `locks` judges the holds of the files pending together
//!   (after `--since`/`--base`, or added by one commit) to the last
//!   one's commit.
//! - History: `drizzle.__drizzle_migrations(id serial, hash text,
//!   created_at bigint)`, a row per file: the SHA-256 of the file (hex)
//!   and the journal's `when`. drizzle reads only the newest `created_at`
//!   and runs every entry whose `when` is greater, so every entry at or
//!   below it counts as applied. drizzle never compares the hash; rollsafe
//!   does, to say a file was edited after it ran. A project that passes
//!   its own `migrationsTable`/`migrationsSchema` is not read.

use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{
    AppliedRow, Folder, HistoryRules, HistoryWrite, LayoutReader, ReadOptions, RowWrite, Step,
    Value,
};
use crate::catalog::{CatalogError, Execution, Migration};

pub struct Drizzle;

pub const JOURNAL: &str = "meta/_journal.json";

const BREAKPOINT: &str = "--> statement-breakpoint";

/// Said wherever a folder is read as Drizzle's.
pub const CAVEAT: &str = "drizzle sends every pending file in one transaction (a failure in any rolls back all of them); rollsafe rehearses and applies each file in a transaction of its own, and judges the locks of files pending together as held until the last one commits";

/// How drizzle sends a file in the transaction of the one before it
/// ([`Step::shared_transaction`]).
const SHARED: &str = "drizzle's migrate sends every pending file in one transaction";

/// `drizzle.__drizzle_migrations`, written as drizzle-orm's pg dialect
/// writes it; every entry at or below the newest `created_at` is applied.
static HISTORY: HistoryRules = HistoryRules {
    write: Some(HistoryWrite {
        create: "CREATE SCHEMA IF NOT EXISTS drizzle;
                 CREATE TABLE IF NOT EXISTS drizzle.__drizzle_migrations (
                 id SERIAL PRIMARY KEY,
                 hash text NOT NULL,
                 created_at bigint)",
        record,
    }),
    expand: every_entry_up_to_the_newest,
    divergent_note: Some("drizzle itself never compares this hash: it does not run an applied file again, so the database keeps what the file said when it ran"),
    ..HistoryRules::new(
        "drizzle.__drizzle_migrations",
        "SELECT coalesce(created_at::text, ''), '', hash FROM drizzle.__drizzle_migrations",
    )
};

fn record(m: &Migration, _: Duration) -> Vec<RowWrite> {
    vec![RowWrite::new(
        "INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES ($1, $2)",
        vec![
            Value::Text(m.tool_checksum.clone().unwrap_or_default()),
            Value::BigInt(m.key.parse().unwrap_or_default()),
        ],
    )]
}

/// drizzle runs an entry only when its `when` is above the newest
/// `created_at`: every entry at or below it is applied, with its own row
/// (and hash) where there is one. Rows no entry has are kept, for
/// `status` to name.
fn every_entry_up_to_the_newest(
    migrations: &[Migration],
    rows: Vec<AppliedRow>,
) -> Vec<AppliedRow> {
    let Some(newest) = rows.iter().filter_map(|r| r.key.parse::<i64>().ok()).max() else {
        return rows;
    };
    let mut out: Vec<AppliedRow> = migrations
        .iter()
        .filter(|m| m.key.parse::<i64>().is_ok_and(|when| when <= newest))
        .map(|m| {
            rows.iter()
                .find(|r| r.key == m.key)
                .cloned()
                .unwrap_or_else(|| AppliedRow::version_only(&m.key))
        })
        .collect();
    out.extend(
        rows.into_iter()
            .filter(|r| !migrations.iter().any(|m| m.key == r.key)),
    );
    out
}

#[derive(Deserialize)]
struct Journal {
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    when: i64,
    tag: String,
}

fn journal(folder: &Folder) -> Result<Option<Journal>, CatalogError> {
    let Some(text) = folder.text(JOURNAL)? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| CatalogError::Unreadable {
            file: JOURNAL.into(),
            why: format!(
                "is not a drizzle journal ({e}); drizzle-kit writes it with `drizzle-kit generate`"
            ),
        })
}

/// SHA-256 of the file as drizzle hashes it (the whole text), lower-case
/// hex: `__drizzle_migrations.hash`.
pub fn checksum(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The file's text with a `;` before each breakpoint whose piece does
/// not end in one: drizzle sends each piece on its own, so its last
/// statement ends there.
fn pieces_terminated(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(BREAKPOINT) {
        let piece = &rest[..at];
        out.push_str(piece);
        if !ends_statement(&out) {
            out.push(';');
        }
        out.push_str(BREAKPOINT);
        rest = &rest[at + BREAKPOINT.len()..];
    }
    out.push_str(rest);
    out
}

/// Whether `sql` so far is blank or ends with `;` (its trailing `--`
/// comment lines aside).
fn ends_statement(sql: &str) -> bool {
    let mut lines = sql.trim_end().lines().rev();
    loop {
        match lines.next().map(str::trim) {
            None => return true,
            Some(l) if l.is_empty() || l.starts_with("--") => continue,
            Some(l) => return l.ends_with(';'),
        }
    }
}

impl LayoutReader for Drizzle {
    fn pattern(&self) -> &'static str {
        "<tag>.sql listed in meta/_journal.json"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn caveat(&self) -> Option<&'static str> {
        Some(CAVEAT)
    }

    /// The journal and the `.sql` files beside it: drizzle-kit's out
    /// folder is its own, whatever other layouts read into the names
    /// (`0000_x.sql` looks like sqlx's); a file the journal does not list
    /// is not run, as drizzle runs none.
    fn claims(&self, folder: &Folder) -> Vec<String> {
        if !folder.has(JOURNAL) {
            return Vec::new();
        }
        let mut claimed = vec![JOURNAL.to_string()];
        claimed.extend(folder.top_level_sql().map(|(f, _)| f.to_string()));
        claimed
    }

    fn read(&self, folder: &Folder, _: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let Some(journal) = journal(folder)? else {
            return Err(CatalogError::Unreadable {
                file: JOURNAL.into(),
                why: "is missing, and drizzle reads no migration without it; pass drizzle-kit's out folder (the one holding meta/)".into(),
            });
        };
        let mut steps: Vec<Step> = Vec::new();
        for entry in journal.entries {
            let file = format!("{}.sql", entry.tag);
            let Some(text) = folder.text(&file)? else {
                return Err(CatalogError::Unreadable {
                    file: JOURNAL.into(),
                    why: format!("lists `{}` but there is no {file}, and drizzle stops there; restore the file or run `drizzle-kit drop` for the entry", entry.tag),
                });
            };
            let name = super::digits_and_name(&entry.tag).map_or(entry.tag.as_str(), |(_, n)| n);
            steps.push(Step {
                key: entry.when.to_string(),
                label: entry.tag.clone(),
                name: name.to_string(),
                checksum: Some(checksum(&text)),
                sql: pieces_terminated(&text),
                file,
                // One transaction for every pending file ([`CAVEAT`]).
                execution: Execution::Transaction,
                shared_transaction: (!steps.is_empty()).then(|| SHARED.to_string()),
                ..Step::default()
            });
        }
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &str)]) -> Folder {
        let mut f = Folder::default();
        for (name, text) in files {
            f.files.insert(name.to_string(), text.as_bytes().to_vec());
        }
        f
    }

    const JOURNAL_TEXT: &str = r#"{"version":"7","dialect":"postgresql","entries":[
        {"idx":0,"version":"7","when":1700000000000,"tag":"0000_first","breakpoints":true},
        {"idx":2,"version":"7","when":1700000300000,"tag":"0002_third","breakpoints":true},
        {"idx":1,"version":"7","when":1700000200000,"tag":"0001_second","breakpoints":false}]}"#;

    /// The journal's array order, not `idx` nor the file names; a file it
    /// does not list is not read.
    #[test]
    fn the_journal_orders_the_files_and_keys_them_by_when() {
        let f = folder(&[
            (JOURNAL, JOURNAL_TEXT),
            ("0000_first.sql", "CREATE TABLE a (x int);"),
            ("0001_second.sql", "SELECT 2;"),
            ("0002_third.sql", "SELECT 3;"),
            ("0003_unlisted.sql", "DROP TABLE a;"),
        ]);
        let steps = Drizzle.read(&f, &ReadOptions::default()).unwrap();
        let read: Vec<(&str, &str, &str)> = steps
            .iter()
            .map(|s| (s.label.as_str(), s.key.as_str(), s.name.as_str()))
            .collect();
        assert_eq!(
            read,
            [
                ("0000_first", "1700000000000", "first"),
                ("0002_third", "1700000300000", "third"),
                ("0001_second", "1700000200000", "second"),
            ]
        );
        assert_eq!(
            steps[0].checksum.as_deref(),
            Some(checksum("CREATE TABLE a (x int);").as_str())
        );
        assert!(!steps.iter().any(|s| s.file == "0003_unlisted.sql"));
        // One transaction for every pending file: each after the first
        // shares the one before's.
        let shared: Vec<bool> = steps
            .iter()
            .map(|s| s.shared_transaction.is_some())
            .collect();
        assert_eq!(shared, [false, true, true]);
    }

    #[test]
    fn a_listed_file_that_is_missing_is_refused_by_its_tag() {
        let f = folder(&[(JOURNAL, JOURNAL_TEXT), ("0000_first.sql", "SELECT 1;")]);
        let err = Drizzle.read(&f, &ReadOptions::default()).unwrap_err();
        assert!(err.to_string().contains("`0002_third`"), "{err}");
        let bad = folder(&[(JOURNAL, "{\"entries\": 3}")]);
        let err = Drizzle.read(&bad, &ReadOptions::default()).unwrap_err();
        assert!(err.to_string().contains("not a drizzle journal"), "{err}");
    }

    /// Each piece between breakpoints is a statement drizzle sends on its
    /// own: one without its `;` gets it, lines and other pieces unchanged.
    #[test]
    fn a_piece_without_its_semicolon_ends_at_the_breakpoint() {
        let text = "CREATE TABLE a (x int)\n--> statement-breakpoint\nCREATE INDEX i ON a (x);\n-- why\n--> statement-breakpoint\nSELECT 1;";
        let sql = pieces_terminated(text);
        assert_eq!(
            sql,
            "CREATE TABLE a (x int)\n;--> statement-breakpoint\nCREATE INDEX i ON a (x);\n-- why\n--> statement-breakpoint\nSELECT 1;"
        );
        let split = crate::sql::split(&sql);
        assert!(split.exact);
        assert_eq!(split.statements.len(), 3);
    }
}

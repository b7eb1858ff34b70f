//! sqlx: `{version}_{description}.sql` (version an `i64`), or the
//! reversible `.up.sql`/`.down.sql` pair (the down file is never read).
//! A file whose first bytes are `-- no-transaction` runs outside a
//! transaction (sqlx's own rule: the prefix, nothing before it).

use std::time::Duration;

use sha2::Digest;

use super::{
    digits_and_name, sort_numeric, unreadable, Folder, HistoryRules, HistoryWrite, LayoutReader,
    ReadOptions, RowWrite, Step, Value,
};
use crate::catalog::Execution;
use crate::catalog::{CatalogError, Layout, Migration};

pub struct Sqlx;

/// `_sqlx_migrations(version, description, installed_on, success,
/// checksum, execution_time)`: a row per migration, its description (`_`
/// → space) and the SHA-384 of the file ([`checksum`]), compared with the
/// file's as hex in either case; only successful rows count.
static HISTORY: HistoryRules = HistoryRules {
    write: Some(HistoryWrite {
        create: "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
                 version BIGINT PRIMARY KEY,
                 description TEXT NOT NULL,
                 installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
                 success BOOLEAN NOT NULL,
                 checksum BYTEA NOT NULL,
                 execution_time BIGINT NOT NULL)",
        record,
    }),
    checksum_matches: |_, recorded, file| recorded.eq_ignore_ascii_case(file),
    ..HistoryRules::new(
        "_sqlx_migrations",
        "SELECT version::text, installed_on::text, encode(checksum, 'hex') FROM _sqlx_migrations WHERE success",
    )
};

fn record(m: &Migration, elapsed: Duration) -> Vec<RowWrite> {
    let version: i64 = m.key.parse().unwrap_or_default();
    let nanos = i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX);
    vec![RowWrite::new(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ($1, $2, true, $3, $4)",
        vec![
            Value::BigInt(version),
            Value::Text(m.name.replace('_', " ")),
            Value::Bytes(sha2::Sha384::digest(m.sql.as_bytes()).to_vec()),
            Value::BigInt(nanos),
        ],
    )]
}

/// sqlx's checksum of a migration file: the SHA-384 of its whole text
/// (`sqlx_core::migrate::Migration::new`), lower-case hex, as
/// `encode(_sqlx_migrations.checksum, 'hex')` reads it.
pub fn checksum(sql: &str) -> String {
    hex::encode(sha2::Sha384::digest(sql.as_bytes()))
}

/// `{digits}_{name}.sql` that no other flat layout marks as its own
/// (goose and dbmate annotations, golang-migrate's `.up`/`.down`, an
/// `atlas.sum` beside it).
fn is_plain(folder: &Folder, file: &str, bytes: &[u8]) -> bool {
    let Some(stem) = file.strip_suffix(".sql") else {
        return false;
    };
    !stem.ends_with(".up")
        && !stem.ends_with(".down")
        && !folder.has(super::atlas::SUM_FILE)
        && !super::goose::is_goose(bytes)
        && !super::dbmate::is_dbmate(bytes)
        && digits_and_name(stem).is_some()
}

impl LayoutReader for Sqlx {
    fn companion(&self, file: &str) -> Option<&'static str> {
        super::is_down_file(file).then_some(super::DOWN_FILES)
    }

    fn pattern(&self) -> &'static str {
        "<version>_<name>.sql"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    /// Plain files; and, in a crate that depends on sqlx, its reversible
    /// `.up.sql`/`.down.sql` pairs (golang-migrate's names elsewhere).
    fn claims(&self, folder: &Folder) -> Vec<String> {
        let reversible = |f: &str| {
            folder.project.contains(&Layout::Sqlx)
                && f.strip_suffix(".sql")
                    .and_then(|s| s.strip_suffix(".up").or_else(|| s.strip_suffix(".down")))
                    .and_then(digits_and_name)
                    .is_some()
        };
        folder
            .top_level_sql()
            .filter(|(f, b)| is_plain(folder, f, b) || reversible(f))
            .map(|(f, _)| f.to_string())
            .collect()
    }

    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let mut steps = Vec::new();
        for (file, bytes) in folder.top_level_sql() {
            let stem = file.strip_suffix(".sql").unwrap_or(file);
            if stem.ends_with(".down") {
                continue;
            }
            let stem = stem.strip_suffix(".up").unwrap_or(stem);
            let (version, name) =
                digits_and_name(stem).ok_or_else(|| unreadable(file, Layout::Sqlx, options))?;
            let version: i64 = version
                .parse()
                .map_err(|_| unreadable(file, Layout::Sqlx, options))?;
            let sql = super::utf8(file, bytes.to_vec())?;
            steps.push(Step {
                key: version.to_string(),
                label: version.to_string(),
                name: name.to_string(),
                file: file.to_string(),
                // sqlx's `-- no-transaction`: the file sent as one
                // simple-query string.
                execution: if sql.starts_with("-- no-transaction") {
                    Execution::SimpleQuery
                } else {
                    Execution::Transaction
                },
                checksum: Some(checksum(&sql)),
                sql,
                ..Step::default()
            });
        }
        sort_numeric(&mut steps);
        Ok(steps)
    }
}

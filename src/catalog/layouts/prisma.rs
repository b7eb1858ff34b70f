//! Prisma Migrate (up to 7): `migrations/{name}/migration.sql`, one folder
//! per migration, applied in folder-name order (`20240101120000_init`, but
//! also `01_init` in practice). Prisma sends each file as one script, which
//! PostgreSQL runs as one implicit transaction; there is no way to opt out.
//! `migration_lock.toml` names the provider the history was written for: a
//! history for another database is refused.

use sha2::{Digest, Sha256};

use super::{Folder, HistoryRules, LayoutReader, ReadOptions, Step};
use crate::catalog::CatalogError;
use crate::catalog::Execution;

pub struct Prisma;

/// `_prisma_migrations`, read only: finished, not rolled-back migrations
/// by folder name, their checksum compared as [`checksum_matches`] does.
static HISTORY: HistoryRules = HistoryRules {
    checksum_matches: |m, recorded, _| checksum_matches(&m.sql, recorded),
    ..HistoryRules::new(
        "_prisma_migrations",
        "SELECT migration_name, finished_at::text, checksum FROM _prisma_migrations
          WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL",
    )
};

/// Prisma's checksum of a migration script: the lower-case hex SHA-256
/// of its text, as `_prisma_migrations.checksum` keeps it.
pub fn checksum(script: &str) -> String {
    hex::encode(Sha256::digest(script.as_bytes()))
}

/// Whether `recorded` is Prisma's checksum of `script` as Prisma's
/// `script_matches_checksum` accepts it: the text as it is, with CRLF made
/// LF, or LF made CRLF (git changes line endings), and a checksum an old
/// schema engine wrote without zero-padding its bytes.
pub fn checksum_matches(script: &str, recorded: &str) -> bool {
    let variants = [
        script.to_string(),
        script.replace("\r\n", "\n"),
        script.replace('\n', "\r\n"),
    ];
    variants.iter().any(|v| {
        let digest = Sha256::digest(v.as_bytes());
        let padded = hex::encode(digest);
        match recorded.len() == padded.len() {
            true => padded == recorded,
            false => digest.iter().map(|b| format!("{b:x}")).collect::<String>() == recorded,
        }
    })
}

const MIGRATION: &str = "migration.sql";
const LOCK: &str = "migration_lock.toml";

#[derive(serde::Deserialize)]
struct Lock {
    provider: String,
}

impl LayoutReader for Prisma {
    fn companion(&self, file: &str) -> Option<&'static str> {
        (file == LOCK).then_some("Prisma's provider lock (read)")
    }

    fn pattern(&self) -> &'static str {
        "<name>/migration.sql (+ migration_lock.toml)"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        let mut claims: Vec<String> = folder
            .dirs_with(MIGRATION)
            .into_iter()
            .map(|d| format!("{d}/{MIGRATION}"))
            .collect();
        if folder.has(LOCK) {
            claims.push(LOCK.to_string());
        }
        claims
    }

    fn read(&self, folder: &Folder, _options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        if let Some(text) = folder.text(LOCK)? {
            let lock: Lock = toml::from_str(&text).map_err(|e| CatalogError::Unreadable {
                file: LOCK.into(),
                why: format!("is not Prisma's lock file ({})", e.message()),
            })?;
            if !matches!(lock.provider.as_str(), "postgresql" | "postgres") {
                return Err(CatalogError::Unreadable {
                    file: LOCK.into(),
                    why: format!(
                        "says these migrations were written for `{}`, not PostgreSQL; rehearse a PostgreSQL history",
                        lock.provider
                    ),
                });
            }
        }
        let mut steps = Vec::new();
        for dir in folder.dirs_with(MIGRATION) {
            let file = format!("{dir}/{MIGRATION}");
            let sql = folder.text(&file)?.unwrap_or_default();
            steps.push(Step {
                key: dir.to_string(),
                label: dir.to_string(),
                name: dir.split_once('_').map_or(dir, |(_, n)| n).to_string(),
                checksum: Some(checksum(&sql)),
                sql,
                file,
                execution: Execution::SimpleQuery,
                ..Step::default()
            });
        }
        // dirs_with lists by name: Prisma's order.
        Ok(steps)
    }
}

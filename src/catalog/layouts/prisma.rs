//! Prisma Migrate (up to 7): `migrations/{name}/migration.sql`, one folder
//! per migration, applied in folder-name order (`20240101120000_init`, but
//! also `01_init` in practice). Prisma sends each file as one script, which
//! PostgreSQL runs as one implicit transaction; there is no way to opt out.
//! `migration_lock.toml` names the provider the history was written for: a
//! history for another database is refused.

use super::{Folder, LayoutReader, ReadOptions, Step};
use crate::catalog::CatalogError;

pub struct Prisma;

const MIGRATION: &str = "migration.sql";
const LOCK: &str = "migration_lock.toml";

#[derive(serde::Deserialize)]
struct Lock {
    provider: String,
}

impl LayoutReader for Prisma {
    fn pattern(&self) -> &'static str {
        "<name>/migration.sql (+ migration_lock.toml)"
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
            steps.push(Step {
                key: dir.to_string(),
                label: dir.to_string(),
                name: dir.split_once('_').map_or(dir, |(_, n)| n).to_string(),
                sql: folder.text(&file)?.unwrap_or_default(),
                file,
                no_transaction: false,
            });
        }
        // dirs_with lists by name: Prisma's order.
        Ok(steps)
    }
}

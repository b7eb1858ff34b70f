//! The application versions a rehearsal replays: each is a named statement
//! set (the queries the app runs) that declares the first schema version it
//! needs, plus a driver for the app's behaviours the cross-version checks
//! exercise (create a complete row, start a two-phase create, read).
//!
//! The rollout window follows from `needs`: while migration k rolls out,
//! every app with `needs ≤ k−1` is still running (it must work on k−1 and
//! k), and every app with `needs ≤ k` may run on k.
//!
//! The embedded sets are the DAO's own files (`src/dao/legacy.sql`,
//! `src/dao/current.sql`) and the drivers call the DAO's Rust API
//! (`rollsafe::dao`), which executes those very files: the verifier proves
//! the code that ships.

use std::collections::BTreeSet;

use postgres::Client;
use uuid::Uuid;

use crate::dao::statements::{StatementSet, StatementSetError};
use crate::dao::{AttachRequest, CurrentDao, LegacyDao};

const EMBEDDED_SETS: &[(&str, &str)] = &[
    ("src/dao/legacy.sql", crate::dao::LEGACY_SQL),
    ("src/dao/current.sql", crate::dao::CURRENT_SQL),
];

/// Why a statement set cannot be used as an app version.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Parse(#[from] StatementSetError),
    #[error("{source_name}: the header needs `-- app: <name>` and `-- needs: <schema version>` lines before the first statement")]
    MissingHeader { source_name: String },
    #[error("{source_name}: `-- needs: {value}` is not a schema version number")]
    BadNeeds { source_name: String, value: String },
    #[error("{source_name}: statement `{statement}` has `-- kind: {value}`; use `-- kind: read` or `-- kind: write`")]
    BadKind {
        source_name: String,
        statement: String,
        value: String,
    },
}

/// What a statement does to the tables it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

/// One app version: its statements and its rollout window's start.
#[derive(Debug, Clone)]
pub struct AppVersion {
    pub name: String,
    /// First schema version the app needs.
    pub needs: i32,
    pub set: StatementSet,
}

impl AppVersion {
    pub fn from_set(set: StatementSet) -> Result<AppVersion, AppError> {
        let missing = || AppError::MissingHeader {
            source_name: set.source.clone(),
        };
        let name = set.header("app").ok_or_else(missing)?.to_string();
        let needs_text = set.header("needs").ok_or_else(missing)?;
        let needs = needs_text
            .trim()
            .trim_start_matches('V')
            .parse()
            .map_err(|_| AppError::BadNeeds {
                source_name: set.source.clone(),
                value: needs_text.to_string(),
            })?;
        for st in set.statements() {
            for value in st.meta_values("kind") {
                if !matches!(value.trim(), "read" | "write") {
                    return Err(AppError::BadKind {
                        source_name: set.source.clone(),
                        statement: st.name.clone(),
                        value: value.to_string(),
                    });
                }
            }
        }
        Ok(AppVersion { name, needs, set })
    }

    /// The statement's `-- kind:` declaration, if it has one.
    pub fn declared_kind(&self, statement: &str) -> Option<Kind> {
        let st = self.set.get(statement).ok()?;
        let value = st.meta_values("kind").last()?;
        Some(if value.trim() == "write" {
            Kind::Write
        } else {
            Kind::Read
        })
    }

    /// The names of the statements that write: declared with `-- kind:`,
    /// else seen taking a writer's lock when replayed (`outcomes`, from
    /// [`crate::verify::replay::replay_all`]). Never guessed from the first
    /// keyword: `WITH … UPDATE` writes.
    pub fn writers(&self, outcomes: &[crate::verify::replay::Outcome]) -> BTreeSet<String> {
        self.set
            .statements()
            .iter()
            .filter(|st| match self.declared_kind(&st.name) {
                Some(k) => k == Kind::Write,
                None => outcomes
                    .iter()
                    .any(|o| o.statement == st.name && o.writes()),
            })
            .map(|st| st.name.clone())
            .collect()
    }

    pub fn parse(source: &str, text: &str) -> Result<AppVersion, AppError> {
        AppVersion::from_set(StatementSet::parse(source, text)?)
    }

    /// The driver for this app's behaviours, when rollsafe knows the app
    /// (its DAO).
    pub fn driver(&self) -> Option<Box<dyn AppDriver>> {
        match self.name.as_str() {
            "legacy" => Some(Box::new(LegacyDriver)),
            "current" => Some(Box::new(CurrentDriver)),
            _ => None,
        }
    }
}

/// The app versions embedded in rollsafe, ordered by `needs`.
pub fn embedded_apps() -> Result<Vec<AppVersion>, AppError> {
    let mut apps = EMBEDDED_SETS
        .iter()
        .map(|(src, text)| AppVersion::parse(src, text))
        .collect::<Result<Vec<_>, _>>()?;
    apps.sort_by_key(|a| a.needs);
    Ok(apps)
}

/// A request against a fresh input collection of its own (created here,
/// as the collections side would), so scenarios never collide.
pub fn request_with_new_collection(c: &mut Client, label: &str) -> anyhow::Result<AttachRequest> {
    let collection = Uuid::new_v4();
    let database = Uuid::new_v4();
    c.execute(
        "INSERT INTO collections (id, name, tenant_id, database_id) VALUES ($1, $2, 'rollsafe', $3)",
        &[&collection, &format!("rollsafe_input_{label}_{collection}"), &database],
    )?;
    let function_id: Uuid = c
        .query_one("SELECT id FROM functions ORDER BY name LIMIT 1", &[])?
        .get(0);
    Ok(AttachRequest {
        name: format!("rollsafe_{label}"),
        tenant_id: "rollsafe".into(),
        database_id: database,
        input_collection_id: collection,
        output_collection_name: format!("rollsafe_{label}_output_{collection}"),
        function_id,
        function_params: serde_json::json!({}),
        min_records_for_invocation: 100,
    })
}

/// The app behaviours the cross-version checks and the seeding exercise,
/// each through the app's DAO.
pub trait AppDriver: Send {
    /// Creates a complete (ready) attached function the way this app does.
    fn create_complete(&self, c: &mut Client, req: &AttachRequest) -> anyhow::Result<Uuid>;
    /// Phase 1 of a two-phase create (a not-ready row); None for apps that
    /// create in one phase.
    fn begin_create(&self, c: &mut Client, req: &AttachRequest) -> anyhow::Result<Option<Uuid>>;
    /// Whether this app's ordinary reader (`get_by_id`) returns the row.
    fn sees(&self, c: &mut Client, id: Uuid) -> anyhow::Result<bool>;
    /// What this app's list reader returns for a collection.
    fn list(&self, c: &mut Client, collection: Uuid) -> anyhow::Result<Vec<Uuid>>;
}

/// The legacy app: `rollsafe::dao::LegacyDao` (one-phase create).
pub struct LegacyDriver;

impl AppDriver for LegacyDriver {
    fn create_complete(&self, c: &mut Client, req: &AttachRequest) -> anyhow::Result<Uuid> {
        Ok(LegacyDao::new(c).create(req)?)
    }
    fn begin_create(&self, _: &mut Client, _: &AttachRequest) -> anyhow::Result<Option<Uuid>> {
        Ok(None)
    }
    fn sees(&self, c: &mut Client, id: Uuid) -> anyhow::Result<bool> {
        Ok(LegacyDao::new(c).get_by_id(id)?.is_some())
    }
    fn list(&self, c: &mut Client, collection: Uuid) -> anyhow::Result<Vec<Uuid>> {
        Ok(LegacyDao::new(c)
            .list_by_collection(collection)?
            .into_iter()
            .map(|f| f.id)
            .collect())
    }
}

/// The current app: `rollsafe::dao::CurrentDao` (two-phase attach).
pub struct CurrentDriver;

impl AppDriver for CurrentDriver {
    fn create_complete(&self, c: &mut Client, req: &AttachRequest) -> anyhow::Result<Uuid> {
        Ok(CurrentDao::new(c).attach(req)?.id)
    }
    fn begin_create(&self, c: &mut Client, req: &AttachRequest) -> anyhow::Result<Option<Uuid>> {
        Ok(Some(CurrentDao::new(c).insert_not_ready(req)?.attached.id))
    }
    fn sees(&self, c: &mut Client, id: Uuid) -> anyhow::Result<bool> {
        Ok(CurrentDao::new(c).get_by_id(id)?.is_some())
    }
    fn list(&self, c: &mut Client, collection: Uuid) -> anyhow::Result<Vec<Uuid>> {
        Ok(CurrentDao::new(c)
            .list_by_collection(collection)?
            .into_iter()
            .map(|f| f.id)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_apps_declare_their_windows() {
        let apps = embedded_apps().unwrap();
        let windows: Vec<(&str, i32)> = apps.iter().map(|a| (a.name.as_str(), a.needs)).collect();
        assert_eq!(windows, [("legacy", 2), ("current", 3)]);
        assert!(apps.iter().all(|a| a.driver().is_some()));
    }

    #[test]
    fn header_is_required() {
        let err = AppVersion::parse("x.sql", "-- name: a\nSELECT 1").unwrap_err();
        assert!(err.to_string().contains("-- app: <name>"), "{err}");
        let err = AppVersion::parse("x.sql", "-- app: a\n-- needs: two\n-- name: a\nSELECT 1")
            .unwrap_err();
        assert!(err.to_string().contains("`-- needs: two`"), "{err}");
        let err = AppVersion::parse(
            "x.sql",
            "-- app: a\n-- needs: 2\n-- name: s\n-- kind: wirte\nSELECT 1",
        )
        .unwrap_err();
        assert!(err.to_string().contains("`-- kind: wirte`"), "{err}");
        let app = AppVersion::parse(
            "x.sql",
            "-- app: a\n-- needs: 2\n-- name: s\n-- kind: write\nSELECT 1",
        )
        .unwrap();
        assert_eq!(app.declared_kind("s"), Some(Kind::Write));
        assert!(app.writers(&[]).contains("s"));
    }
}

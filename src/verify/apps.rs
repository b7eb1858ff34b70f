//! The application versions a rehearsal replays: each is a named statement
//! set (the queries the app runs) that declares the first schema version it
//! needs, plus a driver for the app's behaviours the cross-version checks
//! exercise (create a complete row, start a two-phase create, read).
//!
//! The rollout window follows from `needs`: while migration k rolls out,
//! every app with `needs ≤ k−1` is still running (it must work on k−1 and
//! k), and every app with `needs ≤ k` may run on k.
//!
//! INTERIM: until the DAO lands on main, the embedded sets are
//! `src/verify/apps/{legacy,current}.sql` and the drivers execute their
//! statements by name ([`StatementDriver`]). Once `rollsafe::dao` lands, the
//! embedded sets become `src/dao/{legacy,current}.sql` and the drivers call
//! the DAO's Rust API (which executes those very files), so the verifier
//! proves the code that ships.

use postgres::Client;
use uuid::Uuid;

use crate::dao::statements::{StatementSet, StatementSetError};

const EMBEDDED_SETS: &[(&str, &str)] = &[
    (
        "src/verify/apps/legacy.sql",
        include_str!("apps/legacy.sql"),
    ),
    (
        "src/verify/apps/current.sql",
        include_str!("apps/current.sql"),
    ),
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
        Ok(AppVersion { name, needs, set })
    }

    pub fn parse(source: &str, text: &str) -> Result<AppVersion, AppError> {
        AppVersion::from_set(StatementSet::parse(source, text)?)
    }

    /// The driver for this app's behaviours, when rollsafe knows the app.
    pub fn driver(&self) -> Option<Box<dyn AppDriver>> {
        match self.name.as_str() {
            "legacy" => Some(Box::new(StatementDriver {
                set: self.set.clone(),
                two_phase: false,
            })),
            "current" => Some(Box::new(StatementDriver {
                set: self.set.clone(),
                two_phase: true,
            })),
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

/// What an app is asked to create.
#[derive(Debug, Clone)]
pub struct NewFunction {
    pub name: String,
    pub tenant_id: String,
    pub database_id: Uuid,
    pub input_collection_id: Uuid,
    pub function_id: Uuid,
}

impl NewFunction {
    /// A request against a fresh collection of its own (created here, as
    /// the collections side would), so scenarios never collide.
    pub fn with_new_collection(c: &mut Client, label: &str) -> anyhow::Result<NewFunction> {
        let collection = Uuid::new_v4();
        let database = Uuid::new_v4();
        c.execute(
            "INSERT INTO collections (id, name, tenant_id, database_id) VALUES ($1, $2, 'rollsafe', $3)",
            &[&collection, &format!("rollsafe_input_{label}_{collection}"), &database],
        )?;
        let function_id: Uuid = c
            .query_one("SELECT id FROM functions ORDER BY name LIMIT 1", &[])?
            .get(0);
        Ok(NewFunction {
            name: format!("rollsafe_{label}"),
            tenant_id: "rollsafe".into(),
            database_id: database,
            input_collection_id: collection,
            function_id,
        })
    }
}

/// The app behaviours the cross-version and dao checks exercise.
pub trait AppDriver: Send {
    /// Creates a complete (ready) attached function the way this app does.
    fn create_complete(&self, c: &mut Client, req: &NewFunction) -> anyhow::Result<Uuid>;
    /// Phase 1 of a two-phase create (a not-ready row); None for apps that
    /// create in one phase.
    fn begin_create(&self, c: &mut Client, req: &NewFunction) -> anyhow::Result<Option<Uuid>>;
    /// Whether this app's ordinary reader (`get_by_id`) returns the row.
    fn sees(&self, c: &mut Client, id: Uuid) -> anyhow::Result<bool>;
    /// What this app's list reader returns for a collection.
    fn list(&self, c: &mut Client, collection: Uuid) -> anyhow::Result<Vec<Uuid>>;
}

/// INTERIM driver: runs the app's statements by name with concrete values.
pub struct StatementDriver {
    set: StatementSet,
    two_phase: bool,
}

impl StatementDriver {
    fn create_output_collection(
        &self,
        tx: &mut postgres::Transaction<'_>,
        req: &NewFunction,
        af: Uuid,
    ) -> anyhow::Result<Uuid> {
        let id = Uuid::new_v4();
        tx.execute(
            self.set.sql("create_output_collection"),
            &[&id, &format!("{}_output_{af}", req.name), &req.database_id],
        )?;
        Ok(id)
    }
}

impl AppDriver for StatementDriver {
    fn create_complete(&self, c: &mut Client, req: &NewFunction) -> anyhow::Result<Uuid> {
        if self.two_phase {
            let id = self
                .begin_create(c, req)?
                .ok_or_else(|| anyhow::anyhow!("phase 1 created no row"))?;
            let mut tx = c.transaction()?;
            let out = self.create_output_collection(&mut tx, req, id)?;
            tx.execute(self.set.sql("finish"), &[&id, &out])?;
            tx.commit()?;
            return Ok(id);
        }
        let id = Uuid::new_v4();
        let mut tx = c.transaction()?;
        let out = self.create_output_collection(&mut tx, req, id)?;
        tx.execute(
            self.set.sql("insert"),
            &[
                &id,
                &req.name,
                &req.tenant_id,
                &req.database_id,
                &req.input_collection_id,
                &format!("{}_output", req.name),
                &out,
                &req.function_id,
                &serde_json::json!({}),
            ],
        )?;
        tx.commit()?;
        Ok(id)
    }

    fn begin_create(&self, c: &mut Client, req: &NewFunction) -> anyhow::Result<Option<Uuid>> {
        if !self.two_phase {
            return Ok(None);
        }
        let id = Uuid::new_v4();
        let rows = c.query(
            self.set.sql("insert_not_ready"),
            &[
                &id,
                &req.name,
                &req.tenant_id,
                &req.database_id,
                &req.input_collection_id,
                &format!("{}_output", req.name),
                &req.function_id,
                &serde_json::json!({}),
            ],
        )?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    fn sees(&self, c: &mut Client, id: Uuid) -> anyhow::Result<bool> {
        Ok(!c.query(self.set.sql("get_by_id"), &[&id])?.is_empty())
    }

    fn list(&self, c: &mut Client, collection: Uuid) -> anyhow::Result<Vec<Uuid>> {
        Ok(c.query(self.set.sql("list_by_collection"), &[&collection])?
            .iter()
            .map(|r| r.get(0))
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
    }
}

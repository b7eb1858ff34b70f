//! The attached-functions DAO: the application code whose behaviour rollsafe
//! verifies, and the named statement sets each app version runs.
//!
//! - [`current`]: the two-phase create (insert not ready → backfill → create
//!   the output collection and mark ready), readers that see only ready rows.
//! - [`legacy`]: the one-phase app from before `is_ready`, kept so that
//!   mixed-version behaviour can be tested and verified.
//!
//! Each DAO runs only the statements of its `.sql` file ([`current.sql`],
//! [`legacy.sql`]), by name; the verifier replays the same files. A unit test
//! below pins that every name the code asks for exists and that no statement
//! in a file is dead.
//!
//! - [`shipped`]: the shipped project as data for `verify` and `check`: these
//!   apps with their seeds and drivers, and its own checks ([`check`], the
//!   stuck-rows invariant).
//!
//! Not here: connection handling (`db`), schema changes (`migrations/`).
//!
//! [`current.sql`]: CURRENT_SQL
//! [`legacy.sql`]: LEGACY_SQL

pub mod check;
pub mod current;
pub mod legacy;
pub mod shipped;

use std::collections::HashMap;
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use postgres::{Client, Row, Statement};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use uuid::Uuid;

use crate::app::statements::StatementSet;
pub use current::{Backfill, BoxError, CurrentDao, NoBackfill, Phase1};
pub use legacy::LegacyDao;

/// The current app's statement set (`src/dao/current.sql`).
pub const CURRENT_SQL: &str = include_str!("current.sql");
/// The legacy app's statement set (`src/dao/legacy.sql`).
pub const LEGACY_SQL: &str = include_str!("legacy.sql");

/// The parsed current statement set.
pub fn current_statements() -> &'static StatementSet {
    static SET: OnceLock<StatementSet> = OnceLock::new();
    SET.get_or_init(|| {
        StatementSet::parse("src/dao/current.sql", CURRENT_SQL)
            .unwrap_or_else(|e| panic!("embedded statement set: {e}"))
    })
}

/// The parsed legacy statement set.
pub fn legacy_statements() -> &'static StatementSet {
    static SET: OnceLock<StatementSet> = OnceLock::new();
    SET.get_or_init(|| {
        StatementSet::parse("src/dao/legacy.sql", LEGACY_SQL)
            .unwrap_or_else(|e| panic!("embedded statement set: {e}"))
    })
}

/// The statements of one set, prepared on one connection on first use and
/// kept for the DAO's lifetime: a DAO runs its statements over and over, and
/// a prepared one skips a round trip and a parse/plan per call. (Keep a DAO
/// across a schema change and PostgreSQL re-plans or refuses the cached
/// statements; make a new DAO after migrating.)
pub(crate) struct PreparedSet {
    set: &'static StatementSet,
    prepared: HashMap<&'static str, Statement>,
}

impl PreparedSet {
    pub(crate) fn new(set: &'static StatementSet) -> PreparedSet {
        PreparedSet {
            set,
            prepared: HashMap::new(),
        }
    }

    /// Statement `name` of the set, prepared on `client`.
    pub(crate) fn get(
        &mut self,
        client: &mut Client,
        name: &'static str,
    ) -> Result<Statement, DaoError> {
        if let Some(s) = self.prepared.get(name) {
            return Ok(s.clone());
        }
        let statement = client
            .prepare(self.set.sql(name))
            .map_err(DaoError::db(format!(
                "preparing statement `{name}` of {}",
                self.set.source
            )))?;
        self.prepared.insert(name, statement.clone());
        Ok(statement)
    }
}

/// Names may not start with this: detach renames rows to
/// `_deleted_<name>_<id>` to free their name, so a live row with such a name
/// could collide with a retired one.
pub const DELETED_PREFIX: &str = "_deleted_";

/// What a caller asks for when attaching a function to a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachRequest {
    /// Unique among the live attached functions of the input collection.
    pub name: String,
    pub tenant_id: String,
    pub database_id: Uuid,
    pub input_collection_id: Uuid,
    /// Created (or reused after a crash) in `database_id` by `finish`.
    pub output_collection_name: String,
    pub function_id: Uuid,
    pub function_params: serde_json::Value,
    pub min_records_for_invocation: i64,
}

impl AttachRequest {
    /// The request's fields that differ from an existing row, by column name.
    /// Empty means the row is this request's (a retry or a recovery).
    pub fn differing_fields(&self, row: &AttachedFunction) -> Vec<&'static str> {
        let mut differing = Vec::new();
        if self.tenant_id != row.tenant_id {
            differing.push("tenant_id");
        }
        if self.database_id != row.database_id {
            differing.push("database_id");
        }
        if self.output_collection_name != row.output_collection_name {
            differing.push("output_collection_name");
        }
        if self.function_id != row.function_id {
            differing.push("function_id");
        }
        if self.function_params != row.function_params {
            differing.push("function_params");
        }
        if self.min_records_for_invocation != row.min_records_for_invocation {
            differing.push("min_records_for_invocation");
        }
        differing
    }

    /// Refuses names the DAO could not keep apart from retired rows.
    pub fn validate(&self) -> Result<(), DaoError> {
        validate_name(&self.name)
    }
}

/// Refuses empty names and names with the reserved `_deleted_` prefix.
pub fn validate_name(name: &str) -> Result<(), DaoError> {
    if name.trim().is_empty() {
        return Err(DaoError::InvalidName {
            name: name.to_string(),
            reason: "the name is empty; give the attached function a name",
        });
    }
    if name.starts_with(DELETED_PREFIX) {
        return Err(DaoError::InvalidName {
            name: name.to_string(),
            reason: "names starting with `_deleted_` are reserved for detached functions; choose another name",
        });
    }
    Ok(())
}

/// One attached function as a reader sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttachedFunction {
    pub id: Uuid,
    pub name: String,
    pub tenant_id: String,
    pub database_id: Uuid,
    pub input_collection_id: Uuid,
    pub output_collection_name: String,
    pub output_collection_id: Option<Uuid>,
    pub function_id: Uuid,
    pub function_params: serde_json::Value,
    pub completion_offset: i64,
    pub last_run: Option<DateTime<Utc>>,
    pub min_records_for_invocation: i64,
    pub current_attempts: i32,
    pub is_alive: bool,
    /// `None` when read by the legacy app, which does not know the column.
    pub is_ready: Option<bool>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl AttachedFunction {
    /// Maps a row of the statement sets' getters (same column names in both
    /// sets; the legacy ones lack `is_ready`). A column whose type no longer
    /// matches the field (a migration changed it) is an error naming the
    /// column and both types, never a panic: the verifier reports it as the
    /// compatibility break it is.
    pub(crate) fn from_row(row: &Row) -> Result<AttachedFunction, DaoError> {
        fn col<'a, T: postgres::types::FromSql<'a>>(
            row: &'a Row,
            name: &str,
        ) -> Result<T, DaoError> {
            row.try_get(name).map_err(|source| DaoError::ColumnType {
                column: name.to_string(),
                actual: row
                    .columns()
                    .iter()
                    .find(|c| c.name() == name)
                    .map(|c| c.type_().name().to_string())
                    .unwrap_or_else(|| "missing".to_string()),
                expected: std::any::type_name::<T>(),
                source,
            })
        }
        let has_ready = row.columns().iter().any(|c| c.name() == "is_ready");
        Ok(AttachedFunction {
            id: col(row, "id")?,
            name: col(row, "name")?,
            tenant_id: col(row, "tenant_id")?,
            database_id: col(row, "database_id")?,
            input_collection_id: col(row, "input_collection_id")?,
            output_collection_name: col(row, "output_collection_name")?,
            output_collection_id: col(row, "output_collection_id")?,
            function_id: col(row, "function_id")?,
            function_params: col(row, "function_params")?,
            completion_offset: col(row, "completion_offset")?,
            last_run: col(row, "last_run")?,
            min_records_for_invocation: col(row, "min_records_for_invocation")?,
            current_attempts: col(row, "current_attempts")?,
            is_alive: col(row, "is_alive")?,
            is_ready: if has_ready {
                Some(col(row, "is_ready")?)
            } else {
                None
            },
            created_at: col(row, "created_at")?,
            updated_at: col(row, "updated_at")?,
        })
    }
}

/// The result of an attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attached {
    pub id: Uuid,
    /// True when this call inserted the row; false when it reused the row of
    /// an identical earlier or concurrent attach.
    pub created: bool,
}

/// What went wrong, for callers that branch on it.
#[derive(Debug, Error)]
pub enum DaoError {
    /// `what` names the thing, e.g. `attached function <id>`.
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("{}", already_exists_message(name, differing))]
    AlreadyExists {
        name: String,
        /// The request's fields that differ from the existing row (empty
        /// when the legacy app, which does not compare, reports it).
        differing: Vec<&'static str>,
    },
    #[error("invalid attached function name `{name}`: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("output collection `{name}` is already the output of {}; choose another output collection name", match owner { Some(id) => format!("attached function {id}"), None => "another attached function or collection".to_string() })]
    OutputCollectionInUse { name: String, owner: Option<Uuid> },
    #[error("attached function `{name}` kept being created and detached concurrently ({attempts} attempts); retry")]
    Contended { name: String, attempts: u32 },
    #[error("backfill of attached function {id} failed: {source}; the row stays not ready, retry the attach")]
    Backfill {
        id: Uuid,
        #[source]
        source: BoxError,
    },
    /// A column's SQL type does not decode into the DAO's Rust type: the
    /// schema changed under the app.
    #[error("column `{column}` is {actual} in the database, but the app reads it as {expected}: {source}")]
    ColumnType {
        column: String,
        actual: String,
        expected: &'static str,
        #[source]
        source: postgres::Error,
    },
    #[error("{context}: {source}")]
    Database {
        context: String,
        #[source]
        source: postgres::Error,
    },
}

fn already_exists_message(name: &str, differing: &[&str]) -> String {
    if differing.is_empty() {
        format!("attached function `{name}` already exists; detach it first or use another name")
    } else {
        format!(
            "attached function `{name}` already exists with a different {}; detach it first or use another name",
            differing.join(", ")
        )
    }
}

impl DaoError {
    /// Wraps a driver error with what the DAO was doing.
    pub(crate) fn db(context: impl Into<String>) -> impl FnOnce(postgres::Error) -> DaoError {
        let context = context.into();
        move |source| DaoError::Database { context, source }
    }

    /// The violated constraint's name, if this is a unique violation.
    pub(crate) fn unique_violation(e: &postgres::Error) -> Option<&str> {
        let db = e.as_db_error()?;
        (db.code() == &postgres::error::SqlState::UNIQUE_VIOLATION)
            .then(|| db.constraint())
            .flatten()
    }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every `stmt("…")` literal in a DAO source file.
    fn used_names(source: &str) -> BTreeSet<String> {
        source
            .split("stmt(\"")
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap_or_default().to_string())
            .collect()
    }

    fn defined_names(set: &StatementSet) -> BTreeSet<String> {
        set.statements().iter().map(|s| s.name.clone()).collect()
    }

    #[test]
    fn every_used_statement_exists_and_none_is_dead() {
        for (file, source, set) in [
            (
                "current.rs",
                include_str!("current.rs"),
                current_statements(),
            ),
            ("legacy.rs", include_str!("legacy.rs"), legacy_statements()),
        ] {
            let used = used_names(source);
            let defined = defined_names(set);
            let missing: Vec<_> = used.difference(&defined).collect();
            let dead: Vec<_> = defined.difference(&used).collect();
            assert!(
                missing.is_empty(),
                "{file} uses undefined statements {missing:?}"
            );
            assert!(
                dead.is_empty(),
                "{} has dead statements {dead:?}",
                set.source
            );
        }
    }

    #[test]
    fn headers_name_the_app_and_its_first_schema_version() {
        assert_eq!(current_statements().header("app"), Some("current"));
        assert_eq!(current_statements().header("needs"), Some("3"));
        assert_eq!(legacy_statements().header("app"), Some("legacy"));
        assert_eq!(legacy_statements().header("needs"), Some("2"));
    }

    #[test]
    fn the_legacy_app_never_names_is_ready() {
        for s in legacy_statements().statements() {
            assert!(
                !s.sql.contains("is_ready"),
                "legacy `{}` names is_ready",
                s.name
            );
        }
    }

    /// Readiness only moves forward: the phase-1 insert is the only
    /// statement that may write false, and every assignment is `= true`.
    #[test]
    fn only_the_phase_1_insert_writes_not_ready() {
        for s in current_statements().statements() {
            let sql: String = s
                .sql
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
                .to_lowercase();
            if s.name == "insert_not_ready" {
                assert!(
                    sql.contains("false)"),
                    "phase 1 must write is_ready = false explicitly"
                );
                assert!(sql.contains("on conflict (input_collection_id, name) do nothing"));
                continue;
            }
            let mut rest = sql.as_str();
            while let Some(at) = rest.find("is_ready") {
                let after = rest[at + "is_ready".len()..].trim_start();
                if let Some(value) = after.strip_prefix('=') {
                    assert!(
                        value.trim_start().starts_with("true"),
                        "`{}` assigns is_ready something other than true",
                        s.name
                    );
                }
                rest = &rest[at + "is_ready".len()..];
            }
        }
    }

    #[test]
    fn verifier_params_are_declared_for_foreign_keys() {
        // The verifier executes every statement; statements that reference
        // existing rows must say which (a generated uuid would violate the FK
        // or match nothing).
        let needs_param = |set: &StatementSet, name: &str, n: &str| {
            let s = set.get(name).unwrap();
            assert!(
                s.meta_values("param")
                    .any(|v| v.starts_with(&format!("{n} ="))),
                "{}: `{name}` lacks `-- param: {n} = …`",
                set.source
            );
        };
        needs_param(current_statements(), "insert_not_ready", "$5");
        needs_param(current_statements(), "insert_not_ready", "$7");
        needs_param(current_statements(), "mark_ready", "$2");
        needs_param(legacy_statements(), "insert_attached_function", "$5");
        needs_param(legacy_statements(), "insert_attached_function", "$7");
        needs_param(legacy_statements(), "insert_attached_function", "$8");
    }

    #[test]
    fn reserved_and_empty_names_are_refused() {
        assert!(matches!(
            validate_name("_deleted_x"),
            Err(DaoError::InvalidName { .. })
        ));
        assert!(matches!(
            validate_name(" "),
            Err(DaoError::InvalidName { .. })
        ));
        assert!(validate_name("deleted_x").is_ok());
        let msg = validate_name("_deleted_x").unwrap_err().to_string();
        assert!(
            msg.contains("_deleted_x") && msg.contains("choose another name"),
            "{msg}"
        );
    }
}

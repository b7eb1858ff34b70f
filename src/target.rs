//! `verify --from-target URL`: rehearse the migrations pending on a real
//! database, on that database's own schema.
//!
//! What is read from the target, read-only (a role with `pg_read_all_data`
//! suffices; nothing is written, not even the history table): its applied
//! versions (refinery's history, compared with the files exactly as
//! `rollsafe migrate` compares them, so an edited, missing or unknown-newer
//! version is refused before anything runs), its PostgreSQL major (the
//! sandbox runs the same one), and, once the sandbox runs, its schema
//! (`pg_dump --schema-only` from the sandbox's own PostgreSQL; see
//! [`crate::sandbox::Sandbox::dump_schema`]). Table sizes for the
//! production-size prediction come from the same URL
//! ([`crate::verify::evidence::predict::Sizes::from_database`]).
//!
//! Production data stays in production: rows are copied only from tables
//! the applied migrations themselves fill (an `INSERT` in a migration,
//! read by the grammar: lookup data such as `functions`) and that hold at
//! most [`REFERENCE_ROWS`] rows, plus the tables the user names
//! (`--copy-rows`, `copy_rows` in rollsafe.toml: any size, their choice).
//! Every other table is seeded as usual. The report lists what was copied.
//!
//! The rehearsal then starts from that schema instead of the files' first
//! migrations: hand-made indexes, an extension, a column added in an
//! incident are all there, as they are in production.
//!
//! Floor `check`, beside the audit: both read a real database and change
//! nothing there. `verify` (the floor above) starts a rehearsal from what
//! this reads; a target that cannot be read is a [`TargetError`].

use postgres::Client;

use crate::catalog::{Catalog, TableName};
use crate::db;
use crate::migrate::{self, HistoryRow, MigrateError};

use thiserror::Error;

/// Why the target cannot be the rehearsal's starting point.
#[derive(Debug, Error)]
pub enum TargetError {
    #[error("--from-target {target}: its history does not match the migration files ({detail}); verify with the files the target was migrated with (`rollsafe status` shows each version's state)")]
    Drift { target: String, detail: String },
    #[error("--from-target: {0}")]
    Read(String),
}

/// Tables with at most this many rows are copied with their rows.
pub const REFERENCE_ROWS: u64 = 1000;

/// What was read from the target before the rehearsal.
#[derive(Clone)]
pub struct Target {
    /// Holds the password: never printed (see `described`).
    url: String,
    /// The URL with its password redacted.
    pub described: String,
    /// The newest applied version, None when nothing is applied.
    pub applied: Option<i32>,
    /// The history rows, copied into the migrator's database so that
    /// `rollsafe migrate` sees what the target's migrator would.
    pub history: Vec<HistoryRow>,
    /// The target's PostgreSQL major.
    pub major: u32,
    /// Tables the applied migrations `INSERT` into, with the first
    /// migration that does (its label).
    filled: Vec<(TableName, String)>,
    /// Tables whose rows the user asked to copy (`--copy-rows`).
    copy_rows: Vec<TableName>,
}

/// A table whose production rows a rehearsal copies, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopiedTable {
    /// `schema.table`, quoted as needed (for pg_dump's `--table`).
    pub qualified: String,
    /// Why: "filled by V1" or "--copy-rows".
    pub because: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Target({} at {:?})", self.described, self.applied)
    }
}

impl Target {
    /// Reads the target's history and major; refuses a history that
    /// diverges from `catalog` as `migrate` would.
    pub fn read(url: &str, catalog: &Catalog) -> Result<Target, TargetError> {
        let fail = |e: MigrateError| TargetError::Read(db::scrub(&e.to_string(), url));
        let mut c: Client = db::connect(url).map_err(|e| fail(e.into()))?;
        // The project's own tool's table, compared as `migrate` compares it.
        let (status, history) = migrate::target_status(&mut c, catalog).map_err(fail)?;
        let drift: Vec<String> = status.drift().filter_map(|v| v.drift_message()).collect();
        if !drift.is_empty() {
            return Err(TargetError::Drift {
                target: db::redact_url(url),
                detail: drift.join("; "),
            });
        }
        let version: String = c
            .query_one("SHOW server_version_num", &[])
            .map_err(|e| {
                TargetError::Read(format!(
                    "reading the server's version: {}",
                    crate::errors::one_line(&e)
                ))
            })?
            .get(0);
        let mut filled: Vec<(TableName, String)> = Vec::new();
        for m in catalog.up_to(status.current.unwrap_or(i32::MIN)) {
            for t in m.inserted_tables() {
                if !filled.iter().any(|(f, _)| *f == t) {
                    filled.push((t, m.label.clone()));
                }
            }
        }
        Ok(Target {
            url: url.to_string(),
            described: db::redact_url(url),
            applied: status.current,
            history,
            major: version.trim().parse::<u32>().unwrap_or(0) / 10_000,
            filled,
            copy_rows: Vec::new(),
        })
    }

    /// Also copy the rows of `tables` (`--copy-rows`), whatever their size.
    pub fn copy_rows(mut self, tables: Vec<TableName>) -> Self {
        self.copy_rows = tables;
        self
    }

    /// The URL to connect with (holds the password).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// "the schema of postgres://…:***@host/db at V60", for the report.
    pub fn phrase(&self) -> String {
        match self.applied {
            Some(v) => format!("the schema of {} at V{v}", self.described),
            None => format!(
                "the schema of {} (no migration applied yet)",
                self.described
            ),
        }
    }

    /// A read-only session on the target.
    fn connect(&self) -> Result<Client, TargetError> {
        db::connect(&self.url).map_err(|e| TargetError::Read(db::scrub(&e.to_string(), &self.url)))
    }

    /// Reading `what` from the target failed with `e` (its password kept
    /// out of the message).
    fn failed(&self, what: &str, e: &postgres::Error) -> TargetError {
        TargetError::Read(db::scrub(
            &format!("{what}: {}", crate::errors::one_line(e)),
            &self.url,
        ))
    }

    /// The target's tables whose rows the rehearsal copies (see the module
    /// docs): lookup tables an applied migration filled, such as
    /// `functions` — a schema-only copy would leave them empty and the
    /// apps' rows could not be written — when they hold at most
    /// [`REFERENCE_ROWS`] rows, and the tables named with `--copy-rows`.
    pub(crate) fn tables_to_copy(&self) -> Result<Vec<CopiedTable>, TargetError> {
        let fail = |e: postgres::Error| self.failed("listing the target's small tables", &e);
        let mut c = self.connect()?;
        // Rows live in ordinary tables (partitions included): a
        // partitioned parent holds none and a materialized view is filled
        // by its refresh.
        let tables = c
            .query(
                &format!(
                    "SELECT t.qualified, c.reltuples::float8, n.nspname::text, c.relname::text
                       FROM ({}) t JOIN pg_class c ON c.oid = t.oid
                       JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE t.kind = 'r'
                      ORDER BY 1",
                    crate::tables::list_sql()
                ),
                &[],
            )
            .map_err(fail)?;
        let mut out = Vec::new();
        for row in tables {
            let (name, estimate): (String, f64) = (row.get(0), row.get(1));
            let (schema, table): (String, String) = (row.get(2), row.get(3));
            if self.copy_rows.iter().any(|t| t.names(&schema, &table)) {
                out.push(CopiedTable {
                    qualified: name,
                    because: "--copy-rows".into(),
                });
                continue;
            }
            let Some((_, filled_by)) = self.filled.iter().find(|(t, _)| t.names(&schema, &table))
            else {
                continue;
            };
            if estimate > (REFERENCE_ROWS * 10) as f64 {
                continue;
            }
            // The estimate is -1 (or stale) before the first ANALYZE: count,
            // but never more than one row past the bound.
            let n: i64 = c
                .query_one(
                    &format!(
                        "SELECT count(*) FROM (SELECT 1 FROM {name} LIMIT {}) s",
                        REFERENCE_ROWS + 1
                    ),
                    &[],
                )
                .map_err(fail)?
                .get(0);
            if n as u64 <= REFERENCE_ROWS {
                out.push(CopiedTable {
                    qualified: name,
                    because: format!("filled by {filled_by}"),
                });
            }
        }
        Ok(out)
    }

    /// The roles the target's schema grants to, names in a policy or in its
    /// default privileges (never PUBLIC), with the attributes the sandbox copies: (name, can log in,
    /// inherits). Nothing else of a role is read: not its password, and
    /// not SUPERUSER, BYPASSRLS or REPLICATION, which a stand-in never gets.
    pub(crate) fn roles(&self) -> Result<Vec<(String, bool, bool)>, TargetError> {
        let fail =
            |e: postgres::Error| self.failed("listing the roles the target's GRANTs name", &e);
        let mut c = self.connect()?;
        let rows = c
            .query(
                "WITH user_ns AS (
                   SELECT oid FROM pg_namespace
                    WHERE nspname NOT IN ('pg_catalog', 'information_schema')
                      AND nspname NOT LIKE 'pg_toast%' AND nspname NOT LIKE 'pg_temp%'
                 ), grantees AS (
                   SELECT (aclexplode(relacl)).grantee AS g FROM pg_class
                    WHERE relnamespace IN (SELECT oid FROM user_ns) AND relacl IS NOT NULL
                   UNION SELECT (aclexplode(nspacl)).grantee FROM pg_namespace
                    WHERE oid IN (SELECT oid FROM user_ns) AND nspacl IS NOT NULL
                   UNION SELECT (aclexplode(proacl)).grantee FROM pg_proc
                    WHERE pronamespace IN (SELECT oid FROM user_ns) AND proacl IS NOT NULL
                   UNION SELECT (aclexplode(typacl)).grantee FROM pg_type
                    WHERE typnamespace IN (SELECT oid FROM user_ns) AND typacl IS NOT NULL
                   UNION SELECT unnest(polroles) FROM pg_policy
                   UNION SELECT defaclrole FROM pg_default_acl
                   UNION SELECT (aclexplode(defaclacl)).grantee FROM pg_default_acl
                 )
                 SELECT r.rolname::text, r.rolcanlogin, r.rolinherit
                   FROM pg_roles r JOIN grantees ON grantees.g = r.oid
                  ORDER BY 1",
                &[],
            )
            .map_err(fail)?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    /// Writes the target's history rows into the database `c` is on (its
    /// history table came with the schema).
    pub(crate) fn copy_history(&self, c: &mut Client) -> Result<(), postgres::Error> {
        for h in &self.history {
            c.execute(
                &format!(
                    "INSERT INTO {} (version, name, applied_on, checksum) VALUES ($1, $2, $3, $4)",
                    migrate::HISTORY_TABLE
                ),
                &[&h.version, &h.name, &h.applied_on, &h.checksum],
            )?;
        }
        Ok(())
    }
}

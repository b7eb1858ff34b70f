//! The history table each migration tool keeps, so that `status`,
//! `migrate` and a rehearsal see what the project's own tool sees.
//!
//! rollsafe's own apply path records refinery's `refinery_schema_history`
//! for refinery folders. For a folder of another tool whose history format
//! is public and simple, `migrate` records each migration the way that tool
//! does, in the same transaction as the migration (outside one for
//! no-transaction files: after its last statement), so the tool itself
//! sees it applied afterwards:
//!
//! | tool | table | what a row says |
//! |---|---|---|
//! | diesel | `__diesel_schema_migrations(version, run_on)` | the version (folder prefix without `-`) |
//! | sqlx | `_sqlx_migrations(version, description, installed_on, success, checksum, execution_time)` | version, description (`_` → space), SHA-384 of the file |
//! | golang-migrate | `schema_migrations(version, dirty)` | one row: the newest version, not dirty |
//! | goose | `goose_db_version(id, version_id, is_applied, tstamp)` | one row per version (and goose's row 0) |
//! | dbmate | `schema_migrations(version)` | the version (a file's earlier up sections `<version>#<n>` until its last applies) |
//!
//! Atlas (`atlas_schema_revisions`), Flyway (`flyway_schema_history`),
//! Prisma (`_prisma_migrations`) and Sqitch (`sqitch.changes`) histories
//! are read (for `status` and `--since`), never written: their rows carry
//! more than rollsafe can vouch for (Atlas's and Flyway's checksums,
//! Prisma's step counts, Sqitch's change ids).
//!
//! Where the tool keeps a checksum of each file, it is read back and
//! compared with the file's, computed as that tool computes it
//! ([`crate::catalog::Migration::tool_checksum`]): sqlx's SHA-384 of the
//! file (`_sqlx_migrations.checksum`), Flyway's CRC32 of its lines
//! (`flyway_schema_history.checksum`; for a repeatable, its latest run's),
//! Prisma's SHA-256 (`_prisma_migrations.checksum`, with the line-ending
//! variants Prisma accepts) and Atlas's `atlas.sum` hash
//! (`atlas_schema_revisions.hash`). A file edited after it was applied is
//! then divergent, as an edited refinery file is; an edited Flyway
//! repeatable is due to run again. diesel, golang-migrate, goose, dbmate
//! and Sqitch's `sqitch.changes` keep no checksum rollsafe compares.

use postgres::{Client, GenericClient};
use sha2::{Digest, Sha384};

use crate::catalog::{Layout, Migration};

/// One row of a tool's history table, as [`ToolHistory::applied`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedRow {
    /// The version as the catalog keys it ([`Migration::key`]).
    pub key: String,
    pub applied_on: String,
    /// The checksum the tool recorded, as text (hex, or Flyway's decimal);
    /// None for tools that record none.
    pub checksum: Option<String>,
}

/// The history table of a layout's tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolHistory(pub Layout);

impl ToolHistory {
    /// The table, as `to_regclass` reads it.
    pub fn table(self) -> &'static str {
        match self.0 {
            Layout::Refinery => super::HISTORY_TABLE,
            Layout::Diesel => "__diesel_schema_migrations",
            Layout::Sqlx => "_sqlx_migrations",
            Layout::GolangMigrate | Layout::Dbmate => "schema_migrations",
            Layout::Goose => "goose_db_version",
            Layout::Atlas => "atlas_schema_revisions.atlas_schema_revisions",
            Layout::Flyway => "flyway_schema_history",
            Layout::Prisma => "_prisma_migrations",
            Layout::Sqitch => "sqitch.changes",
        }
    }

    /// The tool's `CREATE TABLE`, for the tools whose rows rollsafe
    /// writes; None for the others (read only).
    pub fn ddl(self) -> Option<&'static str> {
        Some(match self.0 {
            Layout::Refinery => super::HISTORY_DDL,
            Layout::Diesel => {
                "CREATE TABLE IF NOT EXISTS __diesel_schema_migrations (
                 version VARCHAR(50) PRIMARY KEY NOT NULL,
                 run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            }
            Layout::Sqlx => {
                "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
                 version BIGINT PRIMARY KEY,
                 description TEXT NOT NULL,
                 installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
                 success BOOLEAN NOT NULL,
                 checksum BYTEA NOT NULL,
                 execution_time BIGINT NOT NULL)"
            }
            Layout::GolangMigrate => {
                "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version bigint NOT NULL PRIMARY KEY,
                 dirty boolean NOT NULL)"
            }
            Layout::Goose => {
                "CREATE TABLE IF NOT EXISTS goose_db_version (
                 id serial NOT NULL PRIMARY KEY,
                 version_id bigint NOT NULL,
                 is_applied boolean NOT NULL,
                 tstamp timestamp NULL DEFAULT now());
             INSERT INTO goose_db_version (version_id, is_applied)
                 SELECT 0, true WHERE NOT EXISTS (SELECT 1 FROM goose_db_version)"
            }
            Layout::Dbmate => {
                "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version varchar(128) PRIMARY KEY)"
            }
            Layout::Atlas | Layout::Flyway | Layout::Prisma | Layout::Sqitch => return None,
        })
    }

    /// Whether `migrate` can record migrations in this tool's table.
    pub fn writable(self) -> bool {
        self.ddl().is_some()
    }

    /// The table `migrate` keeps for `layout`: its tool's when rollsafe
    /// writes that format, else refinery's (a rehearsal's migrator; the
    /// CLI refuses to `migrate` such a folder on a real database).
    pub fn written_by_migrate(layout: Layout) -> ToolHistory {
        match ToolHistory(layout) {
            tool if tool.writable() => tool,
            _ => ToolHistory(Layout::Refinery),
        }
    }

    /// The tool's applied versions (its keys, [`Migration::key`]) with when
    /// each was applied and the checksum the tool recorded (None for tools
    /// that record none); None when the table does not exist.
    pub fn applied(self, client: &mut Client) -> Result<Option<Vec<AppliedRow>>, postgres::Error> {
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&self.table()])?
            .get(0);
        if !exists {
            return Ok(None);
        }
        let sql = match self.0 {
            Layout::Refinery => "SELECT version::text, coalesce(applied_on, ''), NULL::text FROM refinery_schema_history",
            Layout::Diesel => "SELECT version::text, run_on::text, NULL::text FROM __diesel_schema_migrations",
            Layout::Sqlx => "SELECT version::text, installed_on::text, encode(checksum, 'hex') FROM _sqlx_migrations WHERE success",
            // golang-migrate keeps only the newest version: every file up to it is applied.
            Layout::GolangMigrate => "SELECT version::text, '', NULL::text FROM schema_migrations WHERE NOT dirty",
            // goose's latest row per version says whether it is applied.
            Layout::Goose => "SELECT v, t, NULL::text FROM (SELECT DISTINCT ON (version_id) version_id::text AS v,
                                     tstamp::text AS t, is_applied AS a FROM goose_db_version
                               WHERE version_id > 0 ORDER BY version_id, id DESC) latest WHERE a",
            Layout::Dbmate => "SELECT version::text, '', NULL::text FROM schema_migrations",
            Layout::Atlas => "SELECT version::text, executed_at::text, hash FROM atlas_schema_revisions.atlas_schema_revisions
                               WHERE applied = total",
            // A repeatable has a row per run: its latest counts.
            Layout::Flyway => "SELECT DISTINCT ON (k) k, installed_on::text, checksum::text FROM (
                                 SELECT coalesce(version, 'R__' || replace(description, ' ', '_')) AS k,
                                        installed_on, checksum, installed_rank
                                   FROM flyway_schema_history
                                  WHERE success AND type <> 'BASELINE' AND version IS DISTINCT FROM '0') runs
                                ORDER BY k, installed_rank DESC",
            Layout::Prisma => "SELECT migration_name, finished_at::text, checksum FROM _prisma_migrations
                                WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL",
            Layout::Sqitch => "SELECT change, committed_at::text, NULL::text FROM sqitch.changes",
        };
        let rows = client.query(sql, &[])?;
        Ok(Some(
            rows.iter()
                .map(|r| AppliedRow {
                    key: self.normalized_key(r.get::<_, String>(0)),
                    applied_on: r.get::<_, Option<String>>(1).unwrap_or_default(),
                    checksum: r.get(2),
                })
                .collect(),
        ))
    }

    /// A key as the history writes it, as the catalog keys it: Flyway's
    /// `1.1.0` is `1.1`.
    fn normalized_key(self, key: String) -> String {
        match self.0 {
            Layout::Flyway if !key.starts_with("R__") => {
                crate::catalog::layouts::flyway::history_version(&key).unwrap_or(key)
            }
            _ => key,
        }
    }

    /// Whether `recorded`, the checksum this tool keeps for `m`, is the
    /// file's ([`Migration::tool_checksum`]; Prisma also accepts the
    /// file with its line endings changed). True when either side has none.
    pub fn checksum_matches(self, m: &Migration, recorded: Option<&str>) -> bool {
        let (Some(recorded), Some(file)) = (recorded, m.tool_checksum.as_deref()) else {
            return true;
        };
        match self.0 {
            Layout::Prisma => crate::catalog::layouts::prisma::checksum_matches(&m.sql, recorded),
            Layout::Sqlx => recorded.eq_ignore_ascii_case(file),
            _ => recorded.trim() == file,
        }
    }

    /// The tool's applied versions as rollsafe's versions in `catalog`
    /// (ordinals for layouts other than refinery), ascending: what a
    /// rehearsal of the same database takes as applied (`verify --since
    /// auto --from-target`). Versions no file has are left out; None when
    /// the table does not exist.
    pub fn applied_versions(
        self,
        client: &mut Client,
        catalog: &crate::catalog::Catalog,
    ) -> Result<Option<Vec<i32>>, crate::migrate::MigrateError> {
        let (exists, rows) = crate::migrate::read_tool_history(client, catalog, self)?;
        if !exists {
            return Ok(None);
        }
        let mut versions: Vec<i32> = rows
            .iter()
            .map(|r| r.version)
            .filter(|v| catalog.get(*v).is_some())
            .collect();
        versions.sort_unstable();
        Ok(Some(versions))
    }

    /// Creates the table if missing (tools rollsafe writes only).
    pub fn ensure(self, client: &mut impl GenericClient) -> Result<(), postgres::Error> {
        match self.ddl() {
            Some(ddl) => client.batch_execute(ddl),
            None => Ok(()),
        }
    }

    /// Records `m` as the tool does (the table must exist: [`Self::ensure`]).
    pub fn record(
        self,
        client: &mut impl GenericClient,
        m: &Migration,
        elapsed: std::time::Duration,
    ) -> Result<(), postgres::Error> {
        match self.0 {
            Layout::Diesel => client
                .execute(
                    "INSERT INTO __diesel_schema_migrations (version) VALUES ($1)",
                    &[&m.key],
                )
                .map(drop),
            Layout::Sqlx => {
                let version: i64 = m.key.parse().unwrap_or_default();
                let checksum = Sha384::digest(m.sql.as_bytes()).to_vec();
                let nanos = i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX);
                client
                    .execute(
                        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                         VALUES ($1, $2, true, $3, $4)",
                        &[&version, &m.name.replace('_', " "), &checksum, &nanos],
                    )
                    .map(drop)
            }
            Layout::GolangMigrate => {
                let version: i64 = m.key.parse().unwrap_or_default();
                client.batch_execute("DELETE FROM schema_migrations")?;
                client
                    .execute(
                        "INSERT INTO schema_migrations (version, dirty) VALUES ($1, false)",
                        &[&version],
                    )
                    .map(drop)
            }
            Layout::Goose => {
                let version: i64 = m.key.parse().unwrap_or_default();
                client
                    .execute(
                        "INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)",
                        &[&version],
                    )
                    .map(drop)
            }
            // A section of a dbmate file before its last is kept as
            // `<version>#<n>` until the last section replaces those rows
            // with the version, in its own transaction: a run that stops
            // between sections resumes after the last one applied.
            Layout::Dbmate => {
                if !crate::catalog::layouts::dbmate::is_earlier_section(&m.key) {
                    client.execute(
                        "DELETE FROM schema_migrations WHERE version LIKE $1",
                        &[&format!("{}#%", m.key)],
                    )?;
                }
                client
                    .execute(
                        "INSERT INTO schema_migrations (version) VALUES ($1)",
                        &[&m.key],
                    )
                    .map(drop)
            }
            Layout::Refinery | Layout::Atlas | Layout::Flyway | Layout::Prisma | Layout::Sqitch => {
                unreachable!("{} history is written by refinery or not at all", self.0)
            }
        }
    }
}

/// Before a rehearsal's first migration: the history table the project's
/// tool would have created by then, because migrations may reference it (a
/// trigger on `__diesel_schema_migrations`, a backfill reading
/// `_sqlx_migrations`). Refinery's is rollsafe's own (its migrator creates
/// it); read-only tools' tables are not made up.
pub fn prepare_rehearsal(url: &str, layout: Layout) -> anyhow::Result<()> {
    use anyhow::Context;
    let tool = ToolHistory(layout);
    if layout == Layout::Refinery || !tool.writable() {
        return Ok(());
    }
    let mut client = crate::db::connect(url)?;
    tool.ensure(&mut client)
        .with_context(|| format!("creating {layout}'s history table {}", tool.table()))
}

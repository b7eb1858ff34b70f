//! rollsafe: Postgres schema migrations that are proven safe to roll out.
//!
//! The library does the work; `main.rs` only parses arguments, calls in here
//! and maps errors to exit codes. The library never prints or exits.
//!
//! - [`catalog`]: the migration files, embedded or from a directory.
//! - [`config`]: `rollsafe.toml`, a project's settings.
//! - [`capture`]: statement sets from a running app's `pg_stat_statements`.
//! - [`sandbox`]: throwaway PostgreSQL (docker, local binaries, existing server).
//! - [`db`]: connecting, URL redaction.
//! - [`errors`]: one line for any error.
//! - [`dao`]: the attached-functions DAO and its named statement sets.
//! - [`schema`]: schema snapshots (introspection, comparison).
//! - [`verify`]: the rehearsal pipeline and its checks.
//! - [`report`]: findings and their text / JSON / JUnit renderings.
//! - [`migrate`]: safe apply to a real database, and its status.
//! - [`check`]: read-only audit of a real database.
//! - [`sql`]: splitting SQL files into statements.
//! - [`validity`]: invalid indexes and NOT VALID constraints (verify and check).

pub mod capture;
pub mod catalog;
pub mod check;
pub mod config;
pub mod dao;
pub mod db;
pub mod errors;
pub mod lock_policy;
pub mod migrate;
pub mod report;
pub mod sandbox;
pub mod schema;
pub mod sql;
pub mod validity;
pub mod verify;

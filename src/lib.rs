//! rollsafe: Postgres schema migrations that are proven safe to roll out.
//!
//! The library does the work; `main.rs` only parses arguments, calls in here
//! and maps errors to exit codes. The library never prints or exits.
//!
//! # Embedding it
//!
//! What the `rollsafe verify` command does, from Rust: load the migrations
//! ([`catalog::Catalog`]), start throwaway PostgreSQL
//! ([`sandbox::SandboxBuilder`]), rehearse them ([`verify::Verify`]) and
//! render the [`report::Report`] ([`report::render`]); `report.passed` is
//! the verdict (the binary exits 1 when it is false).
//!
//! ```no_run
//! use std::path::Path;
//! use rollsafe::catalog::Catalog;
//! use rollsafe::report::{render, Format};
//! use rollsafe::sandbox::SandboxBuilder;
//! use rollsafe::verify::Verify;
//!
//! # fn main() -> anyhow::Result<()> {
//! // A project's migrations (layout detected); `None` means the embedded ones.
//! let catalog = Catalog::load_in(Some(Path::new("db/migrations")), &Default::default())?;
//! // Docker when an engine answers, else local binaries; ROLLSAFE_POSTGRES
//! // and friends override, `.postgres_major(17)` picks a major.
//! let sandbox = SandboxBuilder::from_env()?.start()?;
//! let report = Verify::new(catalog)?.rows(2_000).run(&sandbox)?;
//! print!("{}", render(&report, Format::Text));
//! assert!(report.passed, "error findings");
//! # Ok(())
//! # }
//! ```
//!
//! A real database: [`migrate::migrate`] applies a catalog safely,
//! [`migrate::status`] compares it with the history, [`check::Check`] audits
//! it read-only. [`verify::Verify::static_only`] is the precheck that needs
//! no database.
//!
//! # Modules
//!
//! - [`bounds`]: the ranges of every duration, count and size a user gives.
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
//! - [`tables`]: the tables a rehearsal measures, and how messages name them.
//! - [`validity`]: invalid indexes and NOT VALID constraints (verify and check).

pub mod app;
pub mod bounds;
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
pub mod tables;
pub mod validity;
pub mod verify;

//! `rollsafe check`: a read-only audit of a real database, after a deploy or
//! on a schedule.
//!
//! Three checks, reported in the same findings model, formats and exit codes
//! as `verify` (`crate::report`):
//!
//! - `history` — the history table against the migration files: applied,
//!   pending (warn), divergent / missing / unknown-newer / out-of-order
//!   (error), with the message `rollsafe status` gives.
//! - `schema` — the live tables rollsafe owns against the schema the applied
//!   migrations define: columns (type, default, nullability), constraints
//!   and indexes, with a readable diff. The reference is the checked-in
//!   snapshot (`schema.json`) when the database is at the latest version and
//!   one exists, else what the migrations build in throwaway Postgres.
//! - `invariants` — every `-- rollsafe:backfill <table> <predicate>` of an
//!   applied migration holds for the rows created before it was applied (for
//!   V3: no legacy row left not ready); not-ready attached functions older
//!   than `--stuck-after` (abandoned two-phase creates) with their ids; no
//!   invalid index; no NOT VALID constraint; no unfinished
//!   `-- rollsafe:batched-update` backfill. An unfinished backfill, and an
//!   invalid index that a pending `-- rollsafe:no-transaction` migration
//!   builds, name the command that finishes them (`rollsafe migrate`).
//!
//! Read-only by construction: the session runs with
//! `default_transaction_read_only = on`, so a role with only read rights
//! (`pg_read_all_data`) suffices and nothing can be written by accident.
//!
//! Not here: applying anything (`migrate`), rehearsals (`verify`).

use std::time::{Duration, Instant};

use postgres::Client;
use thiserror::Error;

use crate::catalog::{Catalog, Source};
use crate::db::{self, ConnectError};
use crate::migrate::{self, State};
use crate::report::{CheckRun, Finding, Report, Severity};
use crate::sandbox::{SandboxBuilder, SandboxError};
use crate::schema::Snapshot;

/// Not-ready rows older than this are reported as stuck by default.
pub const DEFAULT_STUCK_AFTER: Duration = Duration::from_secs(3600);

/// How many ids a finding lists before it only counts.
const MAX_IDS: usize = 20;

/// Why the audit could not run (exit 2). Problems it *finds* are findings.
#[derive(Debug, Error)]
pub enum CheckError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("{context}: {detail}")]
    Sql { context: String, detail: String },
    #[error(transparent)]
    Migrate(#[from] migrate::MigrateError),
    #[error("cannot build the expected schema of V{version} in throwaway Postgres: {source}")]
    Sandbox {
        version: i32,
        #[source]
        source: SandboxError,
    },
}

impl CheckError {
    fn sql(context: impl Into<String>, e: &postgres::Error) -> CheckError {
        CheckError::Sql {
            context: context.into(),
            detail: e
                .as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_string()),
        }
    }
}

/// An audit's options (builder).
#[derive(Clone)]
pub struct Check {
    catalog: Catalog,
    stuck_after: Duration,
    sandbox: SandboxBuilder,
}

impl Check {
    /// Audits against `catalog`; throwaway Postgres (only needed when no
    /// checked-in snapshot fits) from `sandbox`.
    pub fn new(catalog: Catalog, sandbox: SandboxBuilder) -> Check {
        Check {
            catalog,
            stuck_after: DEFAULT_STUCK_AFTER,
            sandbox,
        }
    }

    pub fn stuck_after(mut self, d: Duration) -> Self {
        self.stuck_after = d;
        self
    }

    /// Runs the audit on the database at `url`. Never writes to it.
    pub fn run(&self, url: &str) -> Result<Report, CheckError> {
        let started = Instant::now();
        let mut client = db::connect(url)?;
        client
            .batch_execute("SET default_transaction_read_only = on")
            .map_err(|e| CheckError::sql("making the session read-only", &e))?;

        let mut report = Report::new("rollsafe check");
        report.sandbox = db::redact_url(url);
        report.server_version = client
            .query_one("SELECT version()", &[])
            .map_err(|e| CheckError::sql("reading the server version", &e))?
            .get(0);
        report.set_migrations(&self.catalog);

        let (table_exists, history) = migrate::read_history(&mut client)?;
        let status = migrate::compare(&self.catalog, table_exists, &history);
        report.checks.push(CheckRun {
            check: "history".into(),
            migration: None,
            description: "the history table matches the migration files".into(),
        });
        report.findings.extend(history_findings(&status));

        let drifted = status.drift().next().is_some();
        let live = Snapshot::read(&mut client)
            .map_err(|e| CheckError::sql("reading the live schema", &e))?;
        report.checks.push(CheckRun {
            check: "schema".into(),
            migration: status.current,
            description: "the live schema is the one the applied migrations define".into(),
        });
        match (status.current, drifted) {
            (_, true) => report.findings.push(
                Finding::new(
                    "schema",
                    "not-compared",
                    Severity::Warn,
                    status.current,
                    "the schema was not compared: the history does not match the files (see history findings)",
                )
                .advice("resolve the history findings first, then run check again"),
            ),
            (None, false) => report.findings.push(Finding::new(
                "schema",
                "nothing-applied",
                Severity::Info,
                None,
                "no migration is applied yet: there is no schema to compare",
            )),
            (Some(version), false) => {
                let (expected, reference) = self.expected_snapshot(version)?;
                report.sandbox = format!("{} (expected schema: {reference})", report.sandbox);
                report
                    .findings
                    .extend(schema_findings(version, &live, &expected, &reference));
            }
        }

        report.checks.push(CheckRun {
            check: "invariants".into(),
            migration: status.current,
            description: "backfills hold, no stuck not-ready rows, no invalid indexes or NOT VALID constraints".into(),
        });
        if !drifted {
            report
                .findings
                .extend(self.backfill_findings(&mut client, &status)?);
        }
        report
            .findings
            .extend(stuck_findings(&mut client, &live, self.stuck_after)?);
        report.findings.extend(validity_findings(
            &live,
            status.current,
            &self.pending_concurrent_indexes(&status),
        ));
        let backfills = crate::migrate::backfill::read_states(&mut client)
            .map_err(|e| CheckError::sql("reading backfill progress", &e))?;
        report
            .findings
            .extend(backfill_progress_findings(&backfills));

        report.duration_ms = started.elapsed().as_millis() as u64;
        report.finish();
        Ok(report)
    }

    /// The indexes (names as the catalogue writes them) that pending
    /// no-transaction migrations build concurrently, each with the file.
    fn pending_concurrent_indexes(&self, status: &migrate::Status) -> Vec<(String, String)> {
        status
            .pending()
            .filter_map(|v| self.catalog.get(v.version))
            .filter_map(|m| {
                crate::migrate::no_transaction::plan_steps(m)
                    .ok()
                    .map(|steps| (m, steps))
            })
            .flat_map(|(m, steps)| {
                steps
                    .into_iter()
                    .filter_map(|s| s.concurrent_index)
                    .map(|i| (i.trim_matches('"').to_string(), m.file.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The schema the migrations up to `version` define, and where it came
    /// from. The checked-in snapshot serves when it describes `version`
    /// (the latest); otherwise the migrations are applied to a throwaway
    /// database and read back.
    fn expected_snapshot(&self, version: i32) -> Result<(Snapshot, String), CheckError> {
        if version == self.catalog.latest() {
            match &self.catalog.source {
                Source::Embedded => {
                    return Ok((
                        crate::schema::expected_embedded(),
                        "migrations/schema.json embedded in rollsafe".into(),
                    ))
                }
                Source::Dir(dir) => {
                    let path = dir.join("schema.json");
                    if let Some(snap) = std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|t| Snapshot::from_json(&t).ok())
                    {
                        return Ok((snap, path.display().to_string()));
                    }
                }
            }
        }
        let sandbox_err = |source| CheckError::Sandbox { version, source };
        let sandbox = self.sandbox.start().map_err(sandbox_err)?;
        let scratch = sandbox.fresh_database().map_err(sandbox_err)?;
        let options = migrate::Options {
            target: Some(version),
            ..migrate::Options::default()
        };
        migrate::migrate(scratch.url(), &self.catalog, &options)?;
        let mut c = scratch.connect()?;
        let snap = Snapshot::read(&mut c)
            .map_err(|e| CheckError::sql("reading the expected schema", &e))?;
        Ok((
            snap,
            format!("V1..V{version} applied in {}", sandbox.describe()),
        ))
    }

    /// Each applied migration's backfill directives, for the rows created
    /// before it was applied.
    fn backfill_findings(
        &self,
        client: &mut Client,
        status: &migrate::Status,
    ) -> Result<Vec<Finding>, CheckError> {
        let mut out = Vec::new();
        for v in status.versions.iter().filter(|v| v.state == State::Applied) {
            let Some(m) = self.catalog.get(v.version) else {
                continue;
            };
            let applied_on = v.applied_on.clone().unwrap_or_default();
            for (table, predicate) in m.backfills() {
                let has_created_at: bool = client
                    .query_one(
                        "SELECT EXISTS (SELECT 1 FROM information_schema.columns \
                         WHERE table_schema = 'public' AND table_name = $1 AND column_name = 'created_at')",
                        &[&table],
                    )
                    .map_err(|e| CheckError::sql(format!("inspecting {table}"), &e))?
                    .get(0);
                if !has_created_at {
                    out.push(Finding::new(
                        "invariants",
                        "backfill-not-checkable",
                        Severity::Warn,
                        Some(m.version),
                        format!("{table} has no created_at column: cannot tell which rows predate {m}, so `{predicate}` was not checked"),
                    ));
                    continue;
                }
                // The predicate comes from the migration file (trusted, like
                // the migration's own SQL); the session is read-only anyway.
                let sql = format!(
                    "SELECT id::text FROM {} WHERE created_at < $1::text::timestamptz \
                     AND NOT coalesce(({predicate}), false) ORDER BY created_at",
                    db::quote_ident(table)
                );
                let rows = client.query(&sql, &[&applied_on]).map_err(|e| {
                    CheckError::sql(format!("checking `{predicate}` on {table}"), &e)
                })?;
                let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                out.push(if ids.is_empty() {
                    Finding::new(
                        "invariants",
                        "backfill-holds",
                        Severity::Info,
                        Some(m.version),
                        format!("every {table} row created before {m} was applied satisfies `{predicate}`"),
                    )
                    .evidence("applied_on", applied_on.clone())
                } else {
                    Finding::new(
                        "invariants",
                        "backfill-violated",
                        Severity::Error,
                        Some(m.version),
                        format!("{} {table} row(s) created before {m} was applied violate `{predicate}` (e.g. {})", ids.len(), ids[0]),
                    )
                    .evidence("violating", ids.len())
                    .evidence("ids", ids.iter().take(MAX_IDS).cloned().collect::<Vec<_>>())
                    .evidence("applied_on", applied_on.clone())
                    .advice("these rows are invisible to readers that rely on the backfill; find what changed them (a manual UPDATE, an app writing the wrong value) and correct them")
                });
            }
        }
        Ok(out)
    }
}

fn history_findings(status: &migrate::Status) -> Vec<Finding> {
    let mut out = Vec::new();
    for v in &status.versions {
        match v.state {
            State::Applied => {}
            State::Pending => out.push(
                Finding::new(
                    "history",
                    "pending",
                    Severity::Warn,
                    Some(v.version),
                    format!(
                        "V{} ({}) is not applied yet",
                        v.version,
                        v.file.as_deref().unwrap_or("?")
                    ),
                )
                .advice("apply it with `rollsafe migrate` (after `rollsafe verify`) before rolling out an app that needs it"),
            ),
            _ => {
                let message = v.drift_message().unwrap_or_default();
                let id = serde_json::to_value(v.state)
                    .ok()
                    .and_then(|s| s.as_str().map(str::to_string))
                    .unwrap_or_else(|| "drift".into());
                out.push(
                    Finding::new("history", &id, Severity::Error, Some(v.version), message)
                        .evidence("checksum_file", v.checksum_file.clone())
                        .evidence("checksum_applied", v.checksum_applied.clone()),
                );
            }
        }
    }
    let applied = status
        .versions
        .iter()
        .filter(|v| v.state == State::Applied)
        .count();
    out.push(
        Finding::new(
            "history",
            "summary",
            Severity::Info,
            None,
            match status.current {
                Some(c) => format!(
                    "{applied} migration(s) applied, at V{c}; the files go to V{}",
                    status.latest
                ),
                None => "no migration applied".to_string(),
            },
        )
        .evidence("applied", applied)
        .evidence("latest_file", status.latest),
    );
    out
}

/// The owned tables (those the expected schema defines) compared; other
/// tables in the database are not rollsafe's and are only counted.
fn schema_findings(
    version: i32,
    live: &Snapshot,
    expected: &Snapshot,
    reference: &str,
) -> Vec<Finding> {
    let mut owned = live.clone();
    owned
        .tables
        .retain(|name, _| expected.tables.contains_key(name));
    let foreign = live.tables.len() - owned.tables.len();
    let diff = owned.diff(expected);
    let finding = if diff.is_empty() {
        Finding::new(
            "schema",
            "as-expected",
            Severity::Info,
            Some(version),
            format!(
                "the {} tables rollsafe owns match the schema of V{version}",
                expected.tables.len()
            ),
        )
    } else {
        Finding::new(
            "schema",
            "drift",
            Severity::Error,
            Some(version),
            format!(
                "the live schema differs from V{version}'s in {} place(s): {}",
                diff.len(),
                diff.join("; ")
            ),
        )
        .evidence("differences", diff.clone())
        .advice("someone changed the schema outside the migrations: put the change in a new migration (and verify it), or undo it by hand")
    };
    vec![finding
        .evidence("reference", reference.to_string())
        .evidence("tables_compared", expected.tables.len())
        .evidence("other_tables", foreign)]
}

/// Not-ready attached functions older than `stuck_after`: two-phase creates
/// that crashed and were never retried or swept.
fn stuck_findings(
    client: &mut Client,
    live: &Snapshot,
    stuck_after: Duration,
) -> Result<Vec<Finding>, CheckError> {
    let has_readiness = live
        .tables
        .get("attached_functions")
        .is_some_and(|t| t.columns.iter().any(|c| c.name == "is_ready"));
    if !has_readiness {
        return Ok(Vec::new());
    }
    let rows = client
        .query(
            "SELECT id::text, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') \
             FROM attached_functions \
             WHERE NOT is_ready AND NOT is_deleted \
               AND created_at < now() - make_interval(secs => $1) \
             ORDER BY created_at",
            &[&stuck_after.as_secs_f64()],
        )
        .map_err(|e| CheckError::sql("looking for stuck not-ready rows", &e))?;
    let bound = format!("{}s", stuck_after.as_secs());
    Ok(vec![if rows.is_empty() {
        Finding::new(
            "invariants",
            "no-stuck-rows",
            Severity::Info,
            None,
            format!("no attached function has been not ready for longer than {bound}"),
        )
        .evidence("stuck_after_s", stuck_after.as_secs())
    } else {
        let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let oldest: String = rows[0].get(1);
        Finding::new(
            "invariants",
            "stuck-not-ready",
            Severity::Warn,
            None,
            format!(
                "{} attached function(s) not ready for longer than {bound} (oldest created {oldest} UTC): {}",
                ids.len(),
                ids.iter().take(MAX_IDS).cloned().collect::<Vec<_>>().join(", ")
            ),
        )
        .evidence("stuck", ids.len())
        .evidence("ids", ids.into_iter().take(MAX_IDS).collect::<Vec<_>>())
        .evidence("stuck_after_s", stuck_after.as_secs())
        .advice("these creates crashed between phases: retry the attach (it resumes) or retire them with the DAO's sweep_stuck")
    }])
}

/// One warning per backfill a `rollsafe migrate` started and did not
/// finish (killed, interrupted, or stopped on rows that still match).
fn backfill_progress_findings(states: &[crate::migrate::backfill::BackfillState]) -> Vec<Finding> {
    states
        .iter()
        .filter(|b| !b.finished)
        .map(|b| {
            Finding::new(
                "invariants",
                "backfill-unfinished",
                Severity::Warn,
                Some(b.version),
                format!(
                    "the batched update of {} (V{}) is unfinished: {} rows updated in {} batches, last key {}, last progress {}; V{} is not applied until it finishes",
                    b.table,
                    b.version,
                    b.rows_done,
                    b.batches,
                    b.last_key.as_deref().unwrap_or("(none)"),
                    b.updated_at,
                    b.version
                ),
            )
            .evidence("table", b.table.clone())
            .evidence("rows_done", b.rows_done)
            .evidence("last_key", b.last_key.clone())
            .advice(format!(
                "run `rollsafe migrate --target {}` (or `rollsafe migrate`): it resumes the backfill after the last key done and records V{} once every row is updated",
                b.version, b.version
            ))
        })
        .collect()
}

fn validity_findings(
    live: &Snapshot,
    version: Option<i32>,
    pending_concurrent: &[(String, String)],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let invalid = live.invalid_indexes();
    // An invalid index a pending no-transaction migration builds is its
    // interrupted build: rerunning migrate drops and rebuilds it.
    let rebuilt_by: Vec<&String> = invalid
        .iter()
        .filter_map(|qualified| {
            let name = qualified.rsplit('.').next().unwrap_or(qualified);
            pending_concurrent
                .iter()
                .find(|(i, _)| i == name)
                .map(|(_, file)| file)
        })
        .collect();
    let advice = if !invalid.is_empty() && rebuilt_by.len() == invalid.len() {
        let mut files: Vec<&str> = rebuilt_by.iter().map(|f| f.as_str()).collect();
        files.dedup();
        format!(
            "run `rollsafe migrate`: the pending no-transaction migration {} builds it, and a rerun drops the invalid index concurrently and builds it again (fix the cause first, e.g. duplicate rows for a unique index)",
            files.join(", ")
        )
    } else {
        "DROP INDEX CONCURRENTLY the invalid index, fix the cause (e.g. duplicate rows for a unique index), and build it again; if a pending `-- rollsafe:no-transaction` migration builds it, `rollsafe migrate` does both".to_string()
    };
    out.push(if invalid.is_empty() {
        Finding::new("invariants", "indexes-valid", Severity::Info, version, "every index is valid")
    } else {
        Finding::new(
            "invariants",
            "invalid-index",
            Severity::Error,
            version,
            format!("invalid index(es): {} (a CREATE INDEX CONCURRENTLY that failed leaves one behind; it slows writes and serves no reads)", invalid.join(", ")),
        )
        .evidence("indexes", invalid)
        .advice(advice)
    });
    let unvalidated = live.unvalidated_constraints();
    out.push(if unvalidated.is_empty() {
        Finding::new("invariants", "constraints-validated", Severity::Info, version, "every constraint is validated")
    } else {
        Finding::new(
            "invariants",
            "not-valid-constraint",
            Severity::Error,
            version,
            format!("constraint(s) added NOT VALID and never validated: {} (existing rows are not guaranteed to satisfy them)", unvalidated.join(", ")),
        )
        .evidence("constraints", unvalidated)
        .advice("run ALTER TABLE … VALIDATE CONSTRAINT … (takes only a SHARE UPDATE EXCLUSIVE lock) in a migration")
    });
    out
}

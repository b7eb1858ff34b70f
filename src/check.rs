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
//!   applied migration holds for the rows created before it was applied;
//!   the project's own rules ([`ProjectRule::on_live`]: the shipped project adds
//!   its stuck two-phase creates, `crate::dao::shipped::stuck_rows`); no
//!   invalid index; no NOT VALID constraint (`crate::validity`); no unfinished
//!   `-- rollsafe:batched-update` backfill. An unfinished backfill, and an
//!   invalid index that a pending `-- rollsafe:no-transaction` migration
//!   builds, name the command that finishes them (`rollsafe migrate`).
//!
//! Read-only by construction: the session runs with
//! `default_transaction_read_only = on`, so a role with only read rights
//! (`pg_read_all_data`) suffices and nothing can be written by accident.
//! Backfill predicates come from migration files (parsed, never pasted:
//! `catalog::directive_sql`) and scan production tables, so each runs under
//! a `statement_timeout` ([`Check::statement_timeout`]); one that does not
//! finish in time is reported `skipped` with that reason, never `ok`.
//!
//! Not here: applying anything (`migrate`), rehearsals (`verify`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::Client;
use thiserror::Error;

use crate::app::ProjectRule;
use crate::catalog::{Catalog, Source};
use crate::db::{self, ConnectError};
use crate::migrate::{self, State};
use crate::pg::catalogue::{self, IndexInfo};
use crate::report::{CheckRun, Finding, Report, Severity};
use crate::sandbox::{SandboxBuilder, SandboxError};
use crate::schema::Snapshot;
use crate::validity::{self, MAX_IDS};

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
            detail: crate::errors::one_line(e),
        }
    }
}

/// An audit's options (builder).
#[derive(Clone)]
pub struct Check {
    catalog: Catalog,
    invariants: Vec<Arc<dyn ProjectRule>>,
    sandbox: SandboxBuilder,
    statement_timeout: Duration,
}

/// How long one backfill predicate may scan production by default.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// SQLSTATE 57014 query_canceled: `statement_timeout` expired.
const QUERY_CANCELED: &str = "57014";

impl Check {
    /// Audits against `catalog`; throwaway Postgres (only needed when no
    /// checked-in snapshot fits) from `sandbox`.
    pub fn new(catalog: Catalog, sandbox: SandboxBuilder) -> Check {
        Check {
            catalog,
            invariants: Vec::new(),
            sandbox,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        }
    }

    /// The `statement_timeout` of each backfill predicate's scan
    /// (`--statement-timeout`; default [`DEFAULT_STATEMENT_TIMEOUT`]).
    pub fn statement_timeout(mut self, t: Duration) -> Self {
        self.statement_timeout = t;
        self
    }

    /// Adds a project's own invariant (the shipped project's:
    /// `crate::dao::shipped::stuck_rows`).
    pub fn invariant(mut self, invariant: Arc<dyn ProjectRule>) -> Self {
        self.invariants.push(invariant);
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

        // The project's own tool's history table, as `status` reads it.
        let (status, _) = migrate::target_status(&mut client, &self.catalog)?;
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
            description: std::iter::once("backfills hold")
                .chain(self.invariants.iter().map(|i| i.description()))
                .chain([
                    "no invalid indexes or NOT VALID constraints, no unfinished batched updates, indexes that duplicate another's leading columns named",
                ])
                .collect::<Vec<_>>()
                .join(", "),
        });
        if !drifted {
            report
                .findings
                .extend(self.backfill_findings(&mut client, &status)?);
        }
        for invariant in &self.invariants {
            let Some(found) = invariant.on_live(&mut client, &live) else {
                continue;
            };
            let found = found.map_err(|e| {
                CheckError::sql(
                    format!("checking that there are {}", invariant.description()),
                    &e,
                )
            })?;
            report.findings.extend(found);
        }
        report.findings.extend(validity::findings(
            "invariants",
            &live,
            status.current,
            &self.pending_concurrent_indexes(&status),
        ));
        let indexes = crate::tables::relations(&mut client)
            .and_then(|relations| catalogue::indexes(&mut client, &relations))
            .map_err(|e| CheckError::sql("reading the indexes", &e))?;
        report
            .findings
            .extend(duplicate_indexes(&indexes, status.current));
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
                Source::Framework { .. } => {}
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

    /// `scan` under the session's `statement_timeout`, reset afterwards
    /// (the other queries of the audit are catalogue reads).
    fn timed_predicate<T>(
        &self,
        client: &mut Client,
        scan: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        client.batch_execute(&format!(
            "SET statement_timeout = {}",
            self.statement_timeout.as_millis().max(1)
        ))?;
        let result = scan(client);
        client.batch_execute("RESET statement_timeout")?;
        result
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
                         WHERE table_schema = $1 AND table_name = $2 AND column_name = 'created_at')",
                        &[&table.schema_or_public(), &table.name],
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
                let count = match self.timed_predicate(client, |c| {
                    validity::backfill_violations(c, table, predicate, Some(&applied_on))
                }) {
                    Ok(count) => count,
                    Err(e) if e.code().map(|c| c.code()) == Some(QUERY_CANCELED) => {
                        out.push(Finding::new(
                            "invariants",
                            "backfill-not-checked",
                            Severity::Skipped,
                            Some(m.version),
                            format!(
                                "`{predicate}` on {table} did not finish within the statement timeout ({}), so it was not checked; raise --statement-timeout or run check when the database is quieter",
                                humantime::format_duration(self.statement_timeout)
                            ),
                        ));
                        continue;
                    }
                    Err(e) => {
                        return Err(CheckError::sql(
                            format!("checking `{predicate}` on {table}"),
                            &e,
                        ))
                    }
                };
                let ids = count.examples;
                out.push(if count.violating == 0 {
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
                        format!(
                            "{} {table} row(s) created before {m} was applied violate `{predicate}`{}",
                            count.violating,
                            ids.first().map(|id| format!(" (e.g. {id})")).unwrap_or_default()
                        ),
                    )
                    .evidence("violating", count.violating)
                    .evidence("ids", ids.iter().take(MAX_IDS).cloned().collect::<Vec<_>>())
                    .evidence("applied_on", applied_on.clone())
                    .advice("these rows are invisible to readers that rely on the backfill; find what changed them (a manual UPDATE, an app writing the wrong value) and correct them")
                });
            }
        }
        Ok(out)
    }
}

/// Indexes whose key columns are the leading key columns of another index
/// of the same table and method (or the same columns): every read they
/// serve the wider one serves too, and every write pays for both. Not
/// reported: unique indexes (they enforce a rule), partial ones and ones
/// on expressions (they may serve what the other cannot), and an index
/// duplicated only by an invalid or partial one.
fn duplicate_indexes(indexes: &[IndexInfo], v: Option<i32>) -> Vec<Finding> {
    let plain = |i: &IndexInfo| i.valid && !i.partial && i.columns.iter().all(Option::is_some);
    let mut out = Vec::new();
    for a in indexes.iter().filter(|a| plain(a) && !a.unique) {
        let wider = indexes.iter().find(|b| {
            b.name != a.name
                && b.table == a.table
                && b.method == a.method
                && plain(b)
                && b.columns.len() >= a.columns.len()
                && b.columns[..a.columns.len()] == a.columns[..]
                // Two with the same columns: the other one is named (once),
                // a unique one kept over a plain one.
                && (b.columns.len() > a.columns.len() || b.unique || b.name < a.name)
        });
        let Some(b) = wider else { continue };
        let cols = |i: &IndexInfo| {
            i.columns
                .iter()
                .flatten()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push(
            Finding::new(
                "invariants",
                "duplicate-index",
                Severity::Info,
                v,
                format!(
                    "index {} on {} ({}) duplicates the leading columns of {} ({}): every read it serves, {} serves too, and every write to {} updates both",
                    a.name,
                    a.table,
                    cols(a),
                    b.name,
                    cols(b),
                    b.name,
                    a.table
                ),
            )
            .evidence("index", a.name.clone())
            .evidence("table", a.table.clone())
            .evidence("definition", a.definition.clone())
            .evidence("duplicated_by", b.definition.clone())
            .advice(format!(
                "drop it in a migration (DROP INDEX CONCURRENTLY {}) once `rollsafe verify` shows no statement's plan needs it",
                a.name
            )),
        );
    }
    out
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
                        "{} ({}) is not applied yet",
                        v.label,
                        v.file.as_deref().unwrap_or("?")
                    ),
                )
                .advice("apply it with `rollsafe migrate` (after `rollsafe verify`) before rolling out an app that needs it"),
            ),
            // Not drift: Flyway runs a changed repeatable again, as
            // `migrate` does.
            State::PendingRerun => out.push(
                Finding::new(
                    "history",
                    "pending-rerun",
                    Severity::Warn,
                    Some(v.version),
                    format!(
                        "{} ({}) changed since it last ran (checksum {} applied, {} in the file): the next migrate runs it again",
                        v.label,
                        v.file.as_deref().unwrap_or("?"),
                        v.checksum_applied.as_deref().unwrap_or("?"),
                        v.checksum_file.as_deref().unwrap_or("?"),
                    ),
                )
                .evidence("checksum_file", v.checksum_file.clone())
                .evidence("checksum_applied", v.checksum_applied.clone())
                .advice("run it again with `rollsafe migrate` (after `rollsafe verify`), before an app that needs its new definition rolls out"),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn index(name: &str, columns: &[&str], unique: bool) -> IndexInfo {
        IndexInfo {
            table: "books".into(),
            name: name.into(),
            definition: format!(
                "CREATE INDEX {name} ON public.books ({})",
                columns.join(", ")
            ),
            columns: columns.iter().map(|c| Some(c.to_string())).collect(),
            unique,
            valid: true,
            partial: false,
            method: "btree".into(),
            ..IndexInfo::default()
        }
    }

    #[test]
    fn an_index_on_another_ones_leading_columns_is_named_once() {
        let found = duplicate_indexes(
            &[
                index("books_pkey", &["id"], true),
                index("books_id", &["id"], false),
                index("books_email", &["email"], false),
                index("books_email_title", &["email", "title"], false),
                index("books_title", &["title"], false),
                index("books_a", &["author_id"], false),
                index("books_a2", &["author_id"], false),
            ],
            Some(3),
        );
        let names: Vec<&str> = found
            .iter()
            .map(|f| f.evidence["index"].as_str().unwrap())
            .collect();
        // Not the unique pkey, not title (not a leading column), one of
        // the two identical ones.
        assert_eq!(names, ["books_id", "books_email", "books_a2"]);
        assert!(found.iter().all(|f| f.severity == Severity::Info));
        assert!(
            found[1].message.starts_with(
                "index books_email on books (email) duplicates the leading columns of books_email_title (email, title)"
            ),
            "{}",
            found[1].message
        );
        let mut other = index("books_email_gin", &["email", "title"], false);
        other.method = "gin".into();
        assert!(
            duplicate_indexes(&[index("books_email", &["email"], false), other], None).is_empty()
        );
    }
}

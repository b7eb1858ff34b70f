//! The verdict table: one row per kind of migration, what verify must
//! conclude (zero errors, or an error of a named check), run through the
//! real binary against the suite's server. A verdict that changes is a
//! regression, whatever else the change was for: this table is read before
//! every stop.
//!
//! Rows on the shipped project are the shipped V1..V3 plus the row's
//! migrations, rehearsed from V4 on (`--since 3`; its apps are replayed:
//! they run through every version).
//! Rows on a project of their own have no apps: the generator seeds every
//! table, in every schema, so locks and rewrites are measured on rows.

use std::sync::Arc;

use anyhow::{ensure, Context};
use libtest_mimic::{Completion, Trial};

use crate::common::{cli, exists_on_server, timed, TestEnv};

/// What verify must conclude for a row.
#[derive(Clone, Copy)]
enum Verdict {
    /// Exit 0, no error finding, and each of these checks measured the
    /// row's last migration (ran, nothing skipped): a run whose checks
    /// could not measure proves nothing passes.
    Passes(&'static [&'static str]),
    /// Exit 0, no error finding, and a warning whose id starts with one of
    /// these on the row's last migration.
    Warns(&'static [&'static str]),
    /// Exit 1 with an error finding whose id starts with one of these, on
    /// the row's last migration (`"id: words"`: that id, its message
    /// containing the words).
    Error(&'static [&'static str]),
}

/// Where the row's migrations go.
#[derive(Clone, Copy)]
enum Project {
    /// After the shipped V1..V3, as V4, V5, …
    Shipped,
    /// A project of their own (V1, V2, …), no apps.
    Alone,
}

struct Row {
    name: &'static str,
    project: Project,
    migrations: &'static [&'static str],
    verdict: Verdict,
}

const ROWS: &[Row] = &[
    Row {
        name: "nullable_column_passes",
        project: Project::Shipped,
        migrations: &["ALTER TABLE attached_functions ADD COLUMN note text;"],
        verdict: Verdict::Passes(&["apply", "rewrite", "locks", "backfill", "compat", "post"]),
    },
    Row {
        name: "renamed_table_breaks_the_apps",
        project: Project::Shipped,
        migrations: &["ALTER TABLE collections RENAME TO collection_entries;"],
        verdict: Verdict::Error(&["compat."]),
    },
    Row {
        name: "blocking_index_build_is_an_error",
        project: Project::Shipped,
        migrations: &["CREATE INDEX af_name ON attached_functions (name);"],
        verdict: Verdict::Error(&["locks.blocking-index-build"]),
    },
    Row {
        name: "concurrent_index_in_a_no_transaction_file_passes",
        project: Project::Shipped,
        // Not `rewrite`: outside a transaction it measures rows read and
        // written apart from the apps' only when they run as a role of
        // their own, and the shipped apps run as the migrator (it says so,
        // skipped). Rewrites and index builds it does measure.
        migrations: &[
            "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS af_name ON attached_functions (name);",
        ],
        verdict: Verdict::Passes(&["apply", "locks", "compat"]),
    },
    Row {
        name: "vacuum_full_in_a_no_transaction_file_is_an_error",
        project: Project::Shipped,
        migrations: &["-- rollsafe:no-transaction\nVACUUM FULL attached_functions;"],
        verdict: Verdict::Error(&["rewrite.", "locks."]),
    },
    Row {
        name: "plain_reindex_in_a_no_transaction_file_is_an_error",
        project: Project::Shipped,
        migrations: &["-- rollsafe:no-transaction\nREINDEX TABLE attached_functions;"],
        // REINDEX locks the indexes one after another while the live
        // apps' queries hold the others: the server may break a deadlock
        // by cancelling it, as it can in production. An error either way.
        verdict: Verdict::Error(&["rewrite.", "locks.", "apply.fails-on-seeded: deadlock"]),
    },
    Row {
        name: "dropping_the_index_a_live_read_uses_is_an_error",
        project: Project::Shipped,
        // The apps read attached functions by id: without the primary key
        // every such call reads the whole table.
        migrations: &["ALTER TABLE attached_functions DROP CONSTRAINT attached_functions_pkey;"],
        verdict: Verdict::Error(&["plan.regressed"]),
    },
    Row {
        name: "dropping_an_index_another_index_covers_passes",
        project: Project::Shipped,
        // The unique (input_collection_id, name) leads with the same column.
        migrations: &["DROP INDEX attached_functions_input_collection_id;"],
        verdict: Verdict::Passes(&["apply", "plan", "compat"]),
    },
    Row {
        name: "reindex_concurrently_passes",
        project: Project::Shipped,
        // Not `rewrite`: as for the concurrent index above.
        migrations: &["-- rollsafe:no-transaction\nREINDEX TABLE CONCURRENTLY attached_functions;"],
        verdict: Verdict::Passes(&["apply", "locks"]),
    },
    Row {
        name: "copy_to_program_is_contained_and_an_error",
        project: Project::Shipped,
        // The program would touch PWNED on the server's machine.
        migrations: &["COPY (SELECT 1) TO PROGRAM 'touch /tmp/rollsafe-verdicts-pwned';"],
        verdict: Verdict::Error(&["apply.needs-superuser"]),
    },
    Row {
        name: "forced_row_level_security_without_a_policy_is_an_error",
        project: Project::Shipped,
        migrations: &[
            "ALTER TABLE attached_functions ENABLE ROW LEVEL SECURITY;\nALTER TABLE attached_functions FORCE ROW LEVEL SECURITY;",
        ],
        verdict: Verdict::Error(&["compat.", "backfill."]),
    },
    Row {
        name: "forced_row_level_security_with_a_policy_passes",
        project: Project::Shipped,
        migrations: &[
            "ALTER TABLE attached_functions ENABLE ROW LEVEL SECURITY;\nALTER TABLE attached_functions FORCE ROW LEVEL SECURITY;\nCREATE POLICY everyone ON attached_functions USING (true) WITH CHECK (true);",
        ],
        verdict: Verdict::Passes(&["apply", "backfill", "compat"]),
    },
    Row {
        name: "not_valid_constraint_left_for_the_next_migration_passes",
        project: Project::Shipped,
        migrations: &[
            "ALTER TABLE attached_functions ADD CONSTRAINT af_name_short CHECK (length(name) < 1000) NOT VALID;",
        ],
        verdict: Verdict::Passes(&["apply", "locks", "post"]),
    },
    Row {
        name: "blocking_index_build_in_another_schema_is_an_error",
        project: Project::Alone,
        migrations: &[
            "CREATE SCHEMA sales;\nCREATE TABLE sales.orders (id bigint PRIMARY KEY, customer text NOT NULL, total numeric(12,2) NOT NULL);",
            "CREATE INDEX orders_customer ON sales.orders (customer);",
        ],
        verdict: Verdict::Error(&["locks.blocking-index-build"]),
    },
    Row {
        name: "widening_a_numeric_in_another_schema_passes",
        project: Project::Alone,
        migrations: &[
            "CREATE SCHEMA sales;\nCREATE TABLE sales.orders (id bigint PRIMARY KEY, customer text NOT NULL, total numeric(12,2) NOT NULL);",
            "ALTER TABLE sales.orders ALTER COLUMN total TYPE numeric(14,2);",
        ],
        verdict: Verdict::Passes(&["apply", "rewrite", "locks"]),
    },
    Row {
        name: "rewriting_a_table_in_another_schema_is_an_error",
        project: Project::Alone,
        migrations: &[
            "CREATE SCHEMA sales;\nCREATE TABLE sales.orders (id bigint PRIMARY KEY, customer text NOT NULL, total numeric(12,2) NOT NULL);",
            "ALTER TABLE sales.orders ALTER COLUMN total TYPE numeric(12,4);",
        ],
        verdict: Verdict::Error(&["rewrite."]),
    },
    Row {
        name: "plain_index_on_a_partitioned_parent_is_an_error",
        project: Project::Alone,
        migrations: &[
            "CREATE TABLE events (id bigint NOT NULL, at date NOT NULL, kind text NOT NULL) PARTITION BY RANGE (at);\nCREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');\nCREATE TABLE events_other PARTITION OF events DEFAULT;",
            "CREATE INDEX events_kind ON events (kind);",
        ],
        verdict: Verdict::Error(&["locks.blocking-index-build"]),
    },
    Row {
        name: "nullable_column_on_a_partitioned_table_passes",
        project: Project::Alone,
        migrations: &[
            "CREATE TABLE events (id bigint NOT NULL, at date NOT NULL, kind text NOT NULL) PARTITION BY RANGE (at);\nCREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');\nCREATE TABLE events_other PARTITION OF events DEFAULT;",
            "ALTER TABLE events ADD COLUMN note text;",
        ],
        verdict: Verdict::Passes(&["apply", "rewrite", "locks"]),
    },
    Row {
        name: "trusted_extension_and_own_schema_pass_as_the_owner_role",
        project: Project::Alone,
        migrations: &[
            "CREATE TABLE notes (id bigint NOT NULL, body text);",
            "CREATE SCHEMA audit;\nCREATE TABLE audit.events (id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());\nCREATE EXTENSION IF NOT EXISTS pgcrypto;",
        ],
        verdict: Verdict::Passes(&["apply", "post"]),
    },
    Row {
        name: "table_left_unlogged_warns",
        project: Project::Alone,
        migrations: &[
            "CREATE TABLE events (id bigint PRIMARY KEY, body text);",
            "CREATE UNLOGGED TABLE event_staging (id bigint PRIMARY KEY, body text);",
        ],
        verdict: Verdict::Warns(&["post.unlogged-table: event_staging is UNLOGGED"]),
    },
];

/// The file `copy_to_program_is_contained_and_an_error`'s program would
/// create; every row looks for it on the server.
const PWNED: &str = "/tmp/rollsafe-verdicts-pwned";

/// Rows whose right verdict is not on main yet, with why: shown as
/// ignored with the reason (never as passed) until the fix lands.
const KNOWN_GAPS: &[(&str, &str)] = &[];

pub fn tests(env: &Arc<TestEnv>) -> Vec<Trial> {
    ROWS.iter()
        .map(|row| {
            let env = Arc::clone(env);
            let name = format!("verdicts::{}", row.name);
            let gap = KNOWN_GAPS
                .iter()
                .find(|(n, _)| *n == row.name)
                .map(|(_, why)| *why);
            Trial::ignorable_test(name.clone(), move || {
                if let Some(why) = gap {
                    return Ok(Completion::ignored_with(why));
                }
                timed(&name, || judge(&env, row))
                    .map(|()| Completion::Completed)
                    .map_err(|e| format!("{e:#}").into())
            })
        })
        .collect()
}

fn judge(env: &TestEnv, row: &Row) -> anyhow::Result<()> {
    let dir = project_dir(row)?;
    // A row on the shipped project is judged on its own migrations: the
    // shipped V1..V3 are applied once, not rehearsed (`--since 3`; their
    // verdict is the shipped tests'), and the row's are judged as in a
    // full run.
    let since: &[&str] = match row.project {
        Project::Shipped => &["--since", "3"],
        Project::Alone => &[],
    };
    let out = cli()
        .args(["verify", "--postgres", env.sandbox.admin_url()])
        .args(["--rows", "2000", "--format", "json"])
        .args(since)
        .arg("--migrations")
        .arg(dir.path())
        .output()?;
    let code = out.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("exit {code}, no JSON report: {}", stderr.trim()))?;
    let of_severity = |severity: &str| -> anyhow::Result<Vec<(i64, String, String)>> {
        Ok(report["findings"]
            .as_array()
            .context("findings")?
            .iter()
            .filter(|f| f["severity"] == severity)
            .map(|f| {
                (
                    f["migration"].as_i64().unwrap_or(0),
                    f["id"].as_str().unwrap_or_default().to_string(),
                    f["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect())
    };
    let errors = of_severity("error")?;
    let last = last_version(row);
    // Every pattern must match a finding of the last migration.
    let all_on_last = |found: &[(i64, String, String)], patterns: &[&str]| {
        patterns.iter().all(|p| {
            found.iter().any(|(v, id, message)| {
                *v == last
                    && match p.split_once(": ") {
                        Some((exact, words)) => id == exact && message.contains(words),
                        None => id.starts_with(p),
                    }
            })
        })
    };
    match row.verdict {
        Verdict::Passes(checks) => {
            ensure!(
                code == 0 && errors.is_empty(),
                "expected zero errors, got exit {code}: {errors:?}"
            );
            measured(&report, last, checks)?;
        }
        Verdict::Warns(patterns) => {
            ensure!(
                code == 0 && errors.is_empty(),
                "expected zero errors, got exit {code}: {errors:?}"
            );
            let warnings = of_severity("warn")?;
            ensure!(
                all_on_last(&warnings, patterns),
                "expected warnings {patterns:?} on V{last}, got {warnings:?}"
            );
        }
        Verdict::Error(prefixes) => {
            ensure!(code == 1, "expected exit 1, got {code}: {errors:?}");
            ensure!(
                prefixes.iter().any(|p| all_on_last(&errors, &[p])),
                "expected an error {prefixes:?} on V{last}, got {errors:?}"
            );
        }
    }
    // Where the server runs (its container on docker), not this process's /tmp.
    ensure!(
        !exists_on_server(env, PWNED)?,
        "a migration reached outside the sandbox: {PWNED} exists on the server"
    );
    Ok(())
}

/// Each of `checks` ran on migration `last` (the report lists it) and
/// measured there: at least one finding of its own that is not skipped (a
/// check may measure one thing and skip another that does not apply, as
/// locks skips the long-transaction probe outside a transaction; a check
/// whose every finding is skipped measured nothing).
fn measured(report: &serde_json::Value, last: i64, checks: &[&str]) -> anyhow::Result<()> {
    let ran = report["checks"].as_array().context("checks")?;
    let findings = report["findings"].as_array().context("findings")?;
    for check in checks {
        ensure!(
            ran.iter()
                .any(|c| c["check"] == *check && c["migration"].as_i64() == Some(last)),
            "check {check} did not run on V{last}: a pass needs it to have measured"
        );
        let own: Vec<(&str, &str)> = findings
            .iter()
            .filter(|f| f["check"] == *check && f["migration"].as_i64() == Some(last))
            .map(|f| {
                (
                    f["severity"].as_str().unwrap_or_default(),
                    f["message"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        ensure!(
            own.iter().any(|(severity, _)| *severity != "skipped"),
            "check {check} did not measure V{last} (a pass needs it to have): {own:?}"
        );
    }
    Ok(())
}

fn last_version(row: &Row) -> i64 {
    let first = match row.project {
        Project::Shipped => 4,
        Project::Alone => 1,
    };
    first + row.migrations.len() as i64 - 1
}

fn project_dir(row: &Row) -> anyhow::Result<tempfile::TempDir> {
    let dir = match row.project {
        Project::Shipped => crate::verify::with_later(row.migrations),
        Project::Alone => {
            let dir = tempfile::tempdir()?;
            for (i, sql) in row.migrations.iter().enumerate() {
                std::fs::write(dir.path().join(format!("V{}__step_{i}.sql", i + 1)), sql)?;
            }
            dir
        }
    };
    Ok(dir)
}

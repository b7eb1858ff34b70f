//! Readers compared for every app through one path (issue 31): the
//! seed's bug (a filter column whose default hides rows) caught in any
//! project, with or without a driver. Two projects of their own,
//! `tickets` (a box office whose new app lists `AND confirmed`, whose
//! old app also re-sells tickets with an UPDATE) and `docs` (documents
//! whose new app lists `AND approved`), and the shipped project both
//! with its drivers and as plain statement files, each with its third
//! migration varied: one row per variant, what verify must conclude on
//! it, run through the real binary against the suite's server.

use std::sync::Arc;

use anyhow::{ensure, Context};
use libtest_mimic::Trial;

use crate::common::{cli, repo_root, trial, TestEnv};

/// What verify must conclude on the variant's V3.
#[derive(Clone, Copy)]
enum Verdict {
    /// Exit 0, no error finding.
    Passes,
    /// Exit 1; each `"id: words"` an error on V3 whose message holds the
    /// words.
    Errors(&'static [&'static str]),
}

struct Variant {
    name: &'static str,
    project: &'static str,
    /// The project's V3.
    v3: &'static str,
    /// The newer app's statement set instead of the fixture's, if given.
    newer_app: Option<&'static str>,
    /// The older app's statement set instead of the fixture's, if given.
    older_app: Option<&'static str>,
    verdict: Verdict,
    /// Findings that must not be on V3 (ids).
    absent: &'static [&'static str],
    /// Findings of any severity that must be on V3 (`"id: words"`).
    present: &'static [&'static str],
}

/// A V3 that keeps `DEFAULT true` (old sales and inserts stay visible)
/// but re-confirms a ticket whose holder changes, by a trigger: the old
/// app's `resell` UPDATE, which knows nothing of `confirmed`, now hides
/// the ticket it re-sold from the new app.
const TICKETS_RECONFIRM_TRIGGER: &str = "\
ALTER TABLE tickets ADD COLUMN confirmed boolean NOT NULL DEFAULT true;
CREATE FUNCTION tickets_reconfirm() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.confirmed := false;
    RETURN NEW;
END $$;
CREATE TRIGGER tickets_reconfirm BEFORE UPDATE OF holder ON tickets
    FOR EACH ROW WHEN (NEW.holder IS DISTINCT FROM OLD.holder)
    EXECUTE FUNCTION tickets_reconfirm();
";

/// A tickets_v1 whose list hides the press row (seats `R1-…`, never for
/// sale), which the fixture's tickets_v2 lists again.
const TICKETS_PRESS_ROW: &str = "\
-- app: tickets_v1
-- needs: 2

-- name: sell
-- param: $1 = (SELECT id FROM events ORDER BY id LIMIT 1)
-- param: $2 = 'S-' || substr(md5(random()::text), 1, 10)
-- param: $3 = 'walk-in'
INSERT INTO tickets (event_id, seat, holder) VALUES ($1::bigint, $2::text, $3::text) RETURNING id;

-- name: list_by_event
-- param: $1 = (SELECT id FROM events ORDER BY id LIMIT 1)
SELECT id, seat, holder FROM tickets WHERE event_id = $1::bigint AND seat NOT LIKE 'R1-%' ORDER BY seat;
";

/// The tickets_v2 app of the "own rows only" variant: a hold hides a seat
/// it reserved until confirmed; rows without a hold (all rows before, and
/// tickets_v1's) are listed.
const TICKETS_HOLDS: &str = "\
-- app: tickets_v2
-- needs: 3

-- name: reserve
-- param: $1 = (SELECT id FROM events ORDER BY id LIMIT 1)
-- param: $2 = 'S-' || substr(md5(random()::text), 1, 10)
INSERT INTO tickets (event_id, seat, holder, held_until)
VALUES ($1::bigint, $2::text, 'online', now() + interval '15 minutes') RETURNING id;

-- name: confirm
-- param: $1 = (SELECT id FROM tickets ORDER BY id LIMIT 1)
UPDATE tickets SET held_until = NULL WHERE id = $1::bigint;

-- name: list_by_event
-- param: $1 = (SELECT id FROM events ORDER BY id LIMIT 1)
SELECT id, seat, holder FROM tickets WHERE event_id = $1::bigint AND held_until IS NULL ORDER BY seat;
";

/// The docs_v2 app of the "own rows only" variant: its drafts are hidden
/// (`draft IS NOT TRUE`); rows nobody marked are listed.
const DOCS_DRAFTS: &str = "\
-- app: docs_v2
-- needs: 3

-- name: draft
-- param: $1 = (SELECT id FROM folders ORDER BY id LIMIT 1)
-- param: $2 = 'Doc ' || substr(md5(random()::text), 1, 10)
INSERT INTO documents (folder_id, title, body, draft)
VALUES ($1::integer, $2::text, '', true) RETURNING id;

-- name: publish
-- param: $1 = (SELECT id FROM documents ORDER BY id LIMIT 1)
UPDATE documents SET draft = false WHERE id = $1::uuid;

-- name: folder_listing
-- param: $1 = (SELECT id FROM folders ORDER BY id LIMIT 1)
SELECT id, title FROM documents WHERE folder_id = $1::integer AND draft IS NOT TRUE ORDER BY title;
";

const VARIANTS: &[Variant] = &[
    // The seed's own bug: the shipped migrations with the upstream V3,
    // and the shipped DAO's statement sets given as files (no driver).
    Variant {
        name: "seed_dao_as_files_default_false_is_caught",
        project: SEED_AS_FILES,
        v3: "ALTER TABLE attached_functions ADD COLUMN is_ready boolean NOT NULL DEFAULT false;",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Errors(&[
            "backfill.new-readers-miss-rows: the current app's `get_by_name` no longer returns",
            "backfill.new-readers-miss-rows: bindings of (input_collection_id, name)): its filter `is_ready` excludes them (is_ready is false on them",
            "compat.old-writes-invisible-to-new: with `insert_attached_function`",
        ]),
        absent: &["backfill.readers-not-compared", "compat.cross-version-skipped"],
        present: &[],
    },
    Variant {
        name: "seed_dao_as_files_default_true_passes",
        project: SEED_AS_FILES,
        v3: "ALTER TABLE attached_functions ADD COLUMN is_ready boolean NOT NULL DEFAULT true;",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Passes,
        absent: &[],
        // The current app's not-ready rows are its own: never judged;
        // its `get_any_*` readers are held to nothing of the legacy app's.
        present: &["compat.old-writes-visible-to-new: the current app's `get_by_id`"],
    },
    // The shipped project as `rollsafe verify` runs it: its drivers are
    // one more source of writes, its readers the DAO's statement files.
    Variant {
        name: "shipped_with_drivers_default_false_is_caught_by_the_same_path",
        project: SHIPPED,
        v3: "-- rollsafe:backfill attached_functions is_ready = true\nALTER TABLE attached_functions ADD COLUMN is_ready boolean NOT NULL DEFAULT false;",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Errors(&[
            "backfill.rows-not-backfilled: of attached_functions do not satisfy `is_ready = true`",
            "backfill.new-readers-miss-rows: the current app's `list_by_collection` no longer returns",
            "backfill.new-readers-miss-rows: its filter `is_ready` excludes them (is_ready is false on them, a column V3 added)",
            "compat.old-writes-invisible-to-new: with its driver's create (the row id=",
            "compat.old-writes-invisible-to-new: with `insert_attached_function`",
        ]),
        absent: &[
            "backfill.readers-not-compared",
            "backfill.reader-not-compared",
            "compat.cross-version-skipped",
        ],
        present: &[],
    },
    Variant {
        name: "tickets_default_false_hides_every_ticket",
        project: "tickets",
        v3: "ALTER TABLE tickets ADD COLUMN confirmed boolean NOT NULL DEFAULT false;",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Errors(&[
            "backfill.new-readers-miss-rows: the tickets_v2 app's `list_by_event` no longer returns",
            "backfill.new-readers-miss-rows: its filter `confirmed` excludes them (confirmed is false on them, a column V3 added); e.g. the row id=",
            "compat.old-writes-invisible-to-new: with `sell`",
        ]),
        absent: &["backfill.readers-not-compared", "compat.cross-version-skipped"],
        present: &[],
    },
    Variant {
        name: "tickets_default_true_passes",
        project: "tickets",
        v3: "ALTER TABLE tickets ADD COLUMN confirmed boolean NOT NULL DEFAULT true;",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Passes,
        absent: &["backfill.readers-not-compared", "compat.cross-version-skipped"],
        present: &[
            "backfill.readers-agree: tickets_v2's `list_by_event`",
            "compat.old-writes-visible-to-new: tickets_v2 app's `list_by_event`",
            // Bound to the row as a one-element array (`= ANY($1)`).
            "compat.old-writes-visible-to-new: with `resell` during the rollout on V3 is returned by the tickets_v2 app's `list_by_event`, `get_ticket`, `get_tickets`",
        ],
    },
    Variant {
        name: "tickets_newer_reader_without_the_older_filter_shows_hidden_rows",
        project: "tickets",
        v3: "ALTER TABLE tickets ADD COLUMN confirmed boolean NOT NULL DEFAULT true;",
        newer_app: None,
        older_app: Some(TICKETS_PRESS_ROW),
        verdict: Verdict::Passes,
        absent: &[],
        present: &[
            "backfill.new-readers-return-hidden-rows: the tickets_v2 app's `list_by_event` returns 20 rows that the tickets_v1 app's `list_by_event` does not return on the same bindings: it lacks the older reader's filter `seat NOT LIKE 'R1-%'`",
        ],
    },
    Variant {
        name: "tickets_old_update_reset_by_a_trigger_hides_the_resold_ticket",
        project: "tickets",
        v3: TICKETS_RECONFIRM_TRIGGER,
        newer_app: None,
        older_app: None,
        verdict: Verdict::Errors(&[
            "compat.old-writes-invisible-to-new: with `resell` (the row id=",
            "compat.old-writes-invisible-to-new: `get_tickets`: its filter `confirmed` excludes it (confirmed is false on the row), though the tickets_v1 app's",
        ]),
        // Rows written before, and inserts during the rollout, are fine.
        absent: &["backfill.new-readers-miss-rows"],
        present: &["compat.old-writes-visible-to-new: with `sell`"],
    },
    Variant {
        name: "tickets_nullable_filter_column_hides_every_ticket",
        project: "tickets",
        v3: "ALTER TABLE tickets ADD COLUMN confirmed boolean;",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Errors(&[
            "backfill.new-readers-miss-rows: (confirmed is NULL on them",
            "compat.old-writes-invisible-to-new: (confirmed is NULL on the row)",
        ]),
        absent: &[],
        present: &[],
    },
    Variant {
        name: "tickets_batched_backfill_misses_rows_written_during_the_rollout",
        project: "tickets",
        v3: "ALTER TABLE tickets ADD COLUMN IF NOT EXISTS confirmed boolean NOT NULL DEFAULT false;\n-- rollsafe:batched-update tickets SET confirmed = true WHERE NOT confirmed\n",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Errors(&[
            "compat.old-writes-invisible-to-new: its filter `confirmed` excludes it (confirmed is false on the row)",
        ]),
        // The backfill fixed every row written before it.
        absent: &["backfill.new-readers-miss-rows"],
        present: &["backfill.readers-agree: "],
    },
    Variant {
        name: "tickets_filter_on_the_new_apps_own_rows_passes",
        project: "tickets",
        v3: "ALTER TABLE tickets ADD COLUMN held_until timestamptz;",
        newer_app: Some(TICKETS_HOLDS),
        older_app: None,
        verdict: Verdict::Passes,
        absent: &[],
        present: &["compat.old-writes-visible-to-new: "],
    },
    Variant {
        name: "docs_default_false_hides_every_document",
        project: "docs",
        v3: "ALTER TABLE documents ADD COLUMN approved boolean NOT NULL DEFAULT false;",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Errors(&[
            // A reader of another name, keyed the same way.
            "backfill.new-readers-miss-rows: the docs_v2 app's `folder_listing` no longer returns",
            // Two parameters bound from sampled (folder_id, title) pairs.
            "backfill.new-readers-miss-rows: bindings of (folder_id, title)): its filter `approved` excludes them",
            "compat.old-writes-invisible-to-new: with `add_document`",
        ]),
        absent: &[],
        present: &[],
    },
    Variant {
        name: "docs_default_true_passes",
        project: "docs",
        v3: "ALTER TABLE documents ADD COLUMN approved boolean NOT NULL DEFAULT true;",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Passes,
        absent: &["backfill.rows-lost-for-app"],
        present: &[
            "backfill.readers-agree: docs_v1's `titles_from`",
            // Bound to the row through `id IN ($1, $2)`.
            "compat.old-writes-visible-to-new: `pair`",
            // Its bindings cannot be inferred and it declares none: said.
            "backfill.reader-not-compared: the docs_v1 app's `search` was not compared before and after V3: its parameters cannot be bound",
        ],
    },
    Variant {
        name: "docs_nullable_filter_column_hides_every_document",
        project: "docs",
        v3: "ALTER TABLE documents ADD COLUMN approved boolean;",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Errors(&[
            "backfill.new-readers-miss-rows: (approved is NULL on them",
            "compat.old-writes-invisible-to-new: (approved is NULL on the row)",
        ]),
        absent: &[],
        present: &[],
    },
    Variant {
        name: "docs_batched_backfill_misses_rows_written_during_the_rollout",
        project: "docs",
        v3: "ALTER TABLE documents ADD COLUMN IF NOT EXISTS approved boolean NOT NULL DEFAULT false;\n-- rollsafe:batched-update documents SET approved = true WHERE NOT approved\n",
        newer_app: None,
        older_app: None,
        verdict: Verdict::Errors(&["compat.old-writes-invisible-to-new: `approved`"]),
        absent: &["backfill.new-readers-miss-rows"],
        present: &[],
    },
    Variant {
        name: "docs_filter_on_the_new_apps_own_rows_passes",
        project: "docs",
        v3: "ALTER TABLE documents ADD COLUMN draft boolean;",
        newer_app: Some(DOCS_DRAFTS),
        older_app: None,
        verdict: Verdict::Passes,
        absent: &[],
        present: &["compat.old-writes-visible-to-new: "],
    },
];

pub fn tests(env: &Arc<TestEnv>) -> Vec<Trial> {
    let mut trials: Vec<Trial> = VARIANTS
        .iter()
        .map(|variant| {
            let env = Arc::clone(env);
            trial(format!("readers::{}", variant.name), move || {
                judge(&env, variant)
            })
        })
        .collect();
    let shipped = Arc::clone(env);
    trials.push(trial(
        "readers::the_shipped_apps_are_compared_by_their_statement_readers".into(),
        move || the_shipped_apps_are_compared_by_their_statement_readers(&shipped),
    ));
    trials
}

/// The shipped apps have drivers, and their readers are compared by
/// statement like any app's: the DAO's files' readers before and after,
/// the legacy DAO's own create read back by the current app's readers;
/// the drivers keep only the two-phase and rollback scenarios.
fn the_shipped_apps_are_compared_by_their_statement_readers(env: &TestEnv) -> anyhow::Result<()> {
    let out = cli()
        .args(["verify", "--postgres", env.sandbox.admin_url()])
        .args(["--rows", "2000", "--format", "json"])
        .output()?;
    let code = out.status.code().unwrap_or(-1);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("exit {code}, no JSON report"))?;
    let found = findings_on_v3(&report)?;
    ensure!(code == 0, "the shipped set must pass: {found:#?}");
    for p in [
        "backfill.readers-agree: legacy's `list_by_collection`",
        "backfill.readers-agree: current's `list_by_collection`",
        "compat.old-writes-visible-to-new: with its driver's create during the rollout on V3 is returned by the current app's `get_by_id`, `get_by_name`, `list_by_collection`",
        "compat.cross-version: not-ready rows are invisible to the current app; rolling back to the legacy app keeps working",
    ] {
        ensure!(matches(&found, p, None), "expected `{p}` on V3: {found:#?}");
    }
    for id in [
        "backfill.reader-not-compared",
        "backfill.readers-not-compared",
        "compat.rollout-write-not-compared",
        "compat.cross-version-skipped",
    ] {
        ensure!(
            !found.iter().any(|(_, i, _)| i == id),
            "`{id}` must not be on V3: every reader and write is compared: {found:#?}"
        );
    }
    Ok(())
}

/// The shipped project as `rollsafe verify` sees it: its migrations, no
/// `--apps` (the embedded apps with their drivers).
const SHIPPED: &str = "shipped";

/// The project made of the shipped migrations and the shipped DAO's
/// statement sets, as a project without a driver would give them.
const SEED_AS_FILES: &str = "seed_as_files";

/// A copy of the project with the variant's V3 and newer app.
fn project(variant: &Variant) -> anyhow::Result<tempfile::TempDir> {
    let root = repo_root();
    let from = root.join("tests/fixtures/projects").join(variant.project);
    let dir = tempfile::tempdir()?;
    for sub in ["migrations", "apps"] {
        std::fs::create_dir(dir.path().join(sub))?;
        let files: Vec<std::path::PathBuf> = match (variant.project, sub) {
            (SEED_AS_FILES | SHIPPED, "migrations") => std::fs::read_dir(root.join("migrations"))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sql"))
                .collect(),
            (SEED_AS_FILES, _) => vec![
                root.join("src/dao/legacy.sql"),
                root.join("src/dao/current.sql"),
            ],
            (SHIPPED, _) => Vec::new(),
            _ => std::fs::read_dir(from.join(sub))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect(),
        };
        for path in files {
            let name = path.file_name().context("a file name")?;
            std::fs::copy(&path, dir.path().join(sub).join(name))?;
        }
    }
    let migrations = dir.path().join("migrations");
    let v3 = std::fs::read_dir(&migrations)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("V3__"))
        })
        .context("the fixture's V3")?;
    std::fs::write(v3, variant.v3)?;
    for (app, text) in [("v2", variant.newer_app), ("v1", variant.older_app)] {
        if let Some(text) = text {
            let name = format!("{}_{app}.sql", variant.project);
            std::fs::write(dir.path().join("apps").join(name), text)?;
        }
    }
    Ok(dir)
}

/// (severity, id, message) of each finding of V3 in verify's JSON report.
fn findings_on_v3(report: &serde_json::Value) -> anyhow::Result<Vec<(String, String, String)>> {
    Ok(report["findings"]
        .as_array()
        .context("findings")?
        .iter()
        .filter(|f| f["migration"].as_i64() == Some(3))
        .map(|f| {
            let text = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (text("severity"), text("id"), text("message"))
        })
        .collect())
}

fn matches(found: &[(String, String, String)], pattern: &str, severity: Option<&str>) -> bool {
    let (id, words) = pattern.split_once(": ").unwrap_or((pattern, ""));
    found
        .iter()
        .any(|(s, i, m)| i == id && m.contains(words) && severity.map_or(true, |want| s == want))
}

fn judge(env: &TestEnv, variant: &Variant) -> anyhow::Result<()> {
    let dir = project(variant)?;
    let mut verify = cli();
    verify
        .args(["verify", "--postgres", env.sandbox.admin_url()])
        .args(["--rows", "2000", "--format", "json", "--migrations"])
        .arg(dir.path().join("migrations"));
    if variant.project != SHIPPED {
        verify.arg("--apps").arg(dir.path().join("apps"));
    }
    let out = verify.output()?;
    let code = out.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("exit {code}, no JSON report: {}", stderr.trim()))?;
    let found = findings_on_v3(&report)?;
    let errors: Vec<_> = found.iter().filter(|(s, _, _)| s == "error").collect();
    match variant.verdict {
        Verdict::Passes => ensure!(
            code == 0 && errors.is_empty(),
            "expected zero errors, got exit {code}: {errors:#?}"
        ),
        Verdict::Errors(patterns) => {
            ensure!(code == 1, "expected exit 1, got {code}: {found:#?}");
            // No other error: the variant differs from its safe
            // counterpart only in what the readers see.
            let expected: Vec<&str> = patterns
                .iter()
                .map(|p| p.split_once(": ").map_or(*p, |(id, _)| id))
                .collect();
            ensure!(
                errors
                    .iter()
                    .all(|(_, id, _)| expected.contains(&id.as_str())),
                "unexpected errors on V3: {errors:#?}"
            );
            for p in patterns {
                ensure!(
                    matches(&found, p, Some("error")),
                    "expected the error `{p}` on V3, got {found:#?}"
                );
            }
        }
    }
    for p in variant.present {
        ensure!(
            matches(&found, p, None),
            "expected `{p}` on V3, got {found:#?}"
        );
    }
    for id in variant.absent {
        ensure!(
            !found.iter().any(|(_, i, _)| i == id),
            "`{id}` must not be on V3: {found:#?}"
        );
    }
    Ok(())
}

//! The seeded path's rows: the live apps' rows written as each app (their
//! seed files, their statements), then the tables no live app writes
//! filled by the generator; or, for a project without apps, the
//! generator's rows alone, in the tables the migration reaches. What was
//! written is evidence (`Seeding`): the rows per table, and the app that
//! could not write its rows, when one could not.
//!
//! Floor `measure`: it takes a database and the writers and returns what
//! was seeded; the stages say on which copy, and how many rows to ask.

use super::connect_seeding;
use crate::app::AppVersion;
use crate::sandbox::Database;
use crate::seed;
use crate::seed::generate::{MoreSessions, Statistics};
use crate::seed::reach::Reach;
use crate::sessions::Sessions;
use crate::verify::error::{step, VerifyError};
use crate::verify::evidence::Seeding;

/// What to seed.
pub struct Plan<'a> {
    /// The apps that write their rows now.
    pub writers: &'a [&'a AppVersion],
    /// Rows to ask of each writer (or of the generator).
    pub rows: u64,
    /// Rows asked of the generator for each table no live app writes.
    pub fill_rows: u64,
    /// No apps: the generator's rows alone, in the tables `reach` names.
    pub generate_only: bool,
    /// The database holds rows already (carried from the previous
    /// migration's seeded copy).
    pub carried: bool,
    pub reach: Reach,
    /// Tables that get no generated rows: an earlier migration of the same
    /// deploy created them, so production has none there yet.
    pub left_empty: &'a std::collections::BTreeSet<String>,
}

/// Seeds `db` as `plan` says: the evidence, and the rows written (None
/// when a live app could not write its rows: the evidence says which and
/// why).
pub fn seed(
    sessions: &Sessions,
    db: &Database,
    plan: Plan<'_>,
) -> Result<(Seeding, Option<i64>), VerifyError> {
    // Seeds are the project's files: run as the migrator (the owner of the
    // tables), the rows each app writes as the app.
    let mut c = connect_seeding(sessions, db)?;
    let before = relation_names(&mut c)?;
    // Tables that may be written at once are, on a second session.
    let another = || Ok(connect_seeding(sessions, db)?);
    let more: MoreSessions<'_> = Some(&another);
    let mut s = if plan.generate_only {
        step(
            "seeding",
            seed::generate_only(
                &mut c,
                more,
                plan.rows,
                plan.carried,
                plan.reach,
                plan.left_empty,
            ),
        )?
    } else {
        let url = db.url();
        step(
            "seeding",
            seed::seed(
                &mut c,
                more,
                plan.writers,
                plan.rows,
                Statistics::Refreshed,
                &|app| crate::db::connect(&sessions.app(url, &app.name)),
            ),
        )?
    };
    if let Some((app, e)) = s.failed.first() {
        let seeding = Seeding {
            generated: None,
            cannot_write: Some((app.clone(), e.clone())),
            made_by_rows: Vec::new(),
            left_empty: Vec::new(),
        };
        return Ok((seeding, None));
    }
    if !plan.generate_only {
        let filled = step(
            "seeding the tables no live app writes",
            seed::fill_empty_tables(&mut c, more, plan.fill_rows, plan.left_empty),
        )?;
        if let Some(f) = filled {
            match &mut s.generated {
                Some(g) => g.absorb(f),
                None => s.generated = Some(f),
            }
        }
    }
    let mut rows = s
        .per_app
        .iter()
        .map(|(_, n, k)| *n as i64 + *k as i64)
        .sum::<i64>();
    if let Some(g) = &s.generated {
        rows += g.seeded.iter().map(|t| t.written as i64).sum::<i64>();
    }
    let made_by_rows = relation_names(&mut c)?
        .into_iter()
        .filter(|name| !before.contains(name))
        .collect();
    let seeding = Seeding {
        generated: s.generated,
        cannot_write: None,
        made_by_rows,
        left_empty: plan.left_empty.iter().cloned().collect(),
    };
    Ok((seeding, Some(rows)))
}

/// The relations of the database `c` is on, as snapshots name them.
fn relation_names(
    c: &mut postgres::Client,
) -> Result<std::collections::BTreeSet<String>, VerifyError> {
    let tables = step(
        "listing the tables around the seeding",
        crate::tables::list(c),
    )?;
    Ok(tables.into_iter().map(|t| t.name).collect())
}

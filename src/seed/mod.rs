//! Seeding a rehearsal database with rows written by the app versions live
//! at its schema version.
//!
//! Its own top-level module (`src/layers.txt`: above `app`, below
//! `verify`): verify's stages seed every rehearsal with it, and benches
//! and tests fill databases through the same path. The parts:
//! [`generate`] (rows from the catalogue of any schema), [`reach`] (the
//! tables a migration needs rows in), [`generated`] (what a generation
//! wrote, which verify keeps as evidence).
//!
//! Per live app, the first that applies:
//! - its bulk seed (`seed_sql`: `<app>.seed.sql` next to its statement set,
//!   or the embedded apps' `seed/<app>.sql`), `INSERT … SELECT
//!   generate_series` with a `{rows}` placeholder, shaped like that app's
//!   rows. Set-based so that `--rows 1000000` seeds in seconds rather than
//!   the minutes a million single-row round trips take; the table size is
//!   what makes rewrites and lock stalls measurable;
//! - otherwise rows generated from the catalogue ([`generate`]),
//!   once for every such app, followed by those apps' own writes.
//!
//! Then a few rows through each app's driver where it has one (its real
//! statements), so that the rows the app itself writes are in the picture
//! too. The rows are split evenly between the live app versions.

use std::collections::BTreeSet;

use postgres::Client;

pub mod generate;
pub mod generated;
pub mod reach;

use crate::app::AppVersion;
use generate::{MoreSessions, RowCounts, Statistics};
use reach::Reach;

/// Default rows per seeded rehearsal: enough that work proportional to the
/// table shows up in rows and files, small enough to seed in well under a
/// second.
pub const DEFAULT_ROWS: u64 = 10_000;

/// Rows each live app writes through its own statements on top of the bulk.
const ROWS_THROUGH_APP: usize = 3;

/// What a seeding wrote, for evidence.
#[derive(Debug, Clone, Default)]
pub struct Seeded {
    /// (app, bulk rows, rows through the app).
    pub per_app: Vec<(String, u64, usize)>,
    /// Live apps without a seed of their own (their rows were generated).
    pub unseeded: Vec<String>,
    /// What the catalogue-driven generator did for them, if it ran.
    pub generated: Option<generate::Generated>,
    /// (app, message) of apps whose rows could not be written (the schema
    /// no longer fits them); the database is as if they had not tried.
    pub failed: Vec<(String, String)>,
}

/// A project without apps: `rows` rows per table generated from the
/// catalogue (none when `rows` is 0); `carried`: the database holds the
/// rows seeded for the previous migration, migrated, so only the tables
/// still empty (new ones, emptied ones) get rows; `reach`: only the tables
/// the migration about to be rehearsed reaches (and those they reference)
/// do ([`reach`]); `left_empty`: tables that get none (an earlier
/// migration of the same deploy created them, so production has no rows
/// there yet). `more`: another session like `c` ([`generate::seed`]).
pub fn generate_only(
    c: &mut Client,
    more: MoreSessions<'_>,
    rows: u64,
    carried: bool,
    reach: Reach,
    left_empty: &BTreeSet<String>,
) -> anyhow::Result<Seeded> {
    let mut out = Seeded::default();
    if rows > 0 {
        let mut counts = leaving_empty(RowCounts::new(rows), left_empty);
        if carried {
            counts = counts.only_empty();
        }
        if let Reach::Tables(reached) = reach {
            counts = counts.reaching(reached);
        }
        let clock = std::time::Instant::now();
        // (It ends with ANALYZE.)
        let mut generated = generate::seed(c, more, &counts, &[])?;
        log::debug!("generated rows in {:?}", clock.elapsed());
        // The tables that held rows already are the earlier seeding's.
        generated.seeded.retain(|t| t.requested > 0);
        out.generated = Some(generated);
    }
    Ok(out)
}

/// Rows generated from the catalogue for every table that still holds none
/// once the live apps have written theirs: a table no live app writes (a
/// table only read, or one the apps have stopped using) still has rows in
/// production, and a rewrite or a lock on it must be measured at N rows,
/// not judged on an empty table. None when every table holds rows (or
/// `rows` is 0); the tables that held rows are left as the apps wrote them,
/// and those of `left_empty` (created by an earlier migration of the same
/// deploy) stay empty.
pub fn fill_empty_tables(
    c: &mut Client,
    more: MoreSessions<'_>,
    rows: u64,
    left_empty: &BTreeSet<String>,
) -> anyhow::Result<Option<generate::Generated>> {
    if rows == 0 || !generator_has_work(c)? {
        return Ok(None);
    }
    let counts = leaving_empty(RowCounts::new(rows).only_empty(), left_empty);
    // (It ends with ANALYZE.)
    let mut generated = generate::seed(c, more, &counts, &[])?;
    // Only the tables that were empty are this seeding's.
    generated.seeded.retain(|t| t.requested > 0);
    if generated.seeded.is_empty() && generated.unseeded.is_empty() {
        return Ok(None);
    }
    Ok(Some(generated))
}

/// `counts` with no rows for the tables of `left_empty`.
fn leaving_empty(counts: RowCounts, left_empty: &BTreeSet<String>) -> RowCounts {
    left_empty
        .iter()
        .fold(counts, |counts, table| counts.with(table, 0))
}

/// Whether [`fill_empty_tables`] has anything to do: a table without a row
/// (or one that cannot be read), or a materialized view (the generator
/// refreshes those over the rows written). Reading the catalogue for the
/// generator, to find every table holding rows already, was 35 to 90 ms of
/// every seeding by the shipped apps; this is one query on the table list.
fn generator_has_work(c: &mut Client) -> Result<bool, postgres::Error> {
    use crate::tables::Kind;
    let tables = crate::tables::list(c)?;
    if tables
        .iter()
        .any(|t| t.kind == Kind::MaterializedView || !t.readable())
    {
        return Ok(true);
    }
    let empty = tables
        .iter()
        .map(|t| format!("SELECT WHERE NOT EXISTS (SELECT 1 FROM {})", t.qualified))
        .collect::<Vec<_>>();
    if empty.is_empty() {
        return Ok(false);
    }
    match c.query(&empty.join(" UNION ALL "), &[]) {
        Ok(found) => Ok(!found.is_empty()),
        // (A table this session may not read: the generator says why.)
        Err(e) if e.as_db_error().is_some() => Ok(true),
        Err(e) => Err(e),
    }
}

/// Seeds `rows` rows split between `live` apps: the bulk seeds on `c`, the
/// rows each app writes through its driver on a connection of that app's
/// own (`connect_as`: its role's GRANTs and row-level security apply);
/// `more`: another session like `c`, for the generated rows
/// ([`generate::seed`]); `statistics`: what it leaves of the planner
/// statistics.
pub fn seed(
    c: &mut Client,
    more: MoreSessions<'_>,
    live: &[&AppVersion],
    rows: u64,
    statistics: Statistics,
    connect_as: &dyn Fn(&AppVersion) -> Result<Client, crate::db::ConnectError>,
) -> anyhow::Result<Seeded> {
    let mut out = Seeded::default();
    if live.is_empty() {
        return Ok(out);
    }
    let share = rows / live.len() as u64;
    let since = generate::seeding_starts(c)?;
    for (i, app) in live.iter().enumerate() {
        let Some(sql) = app.seed_sql.as_deref() else {
            out.unseeded.push(app.name.clone());
            continue;
        };
        let n = if i == 0 {
            rows - share * (live.len() as u64 - 1)
        } else {
            share
        };
        let clock = std::time::Instant::now();
        // One transaction per app: a schema the app's rows no longer fit
        // leaves nothing half-written.
        let mut tx = c.transaction()?;
        if n > 0 {
            if let Err(e) = tx.batch_execute(&sql.replace("{rows}", &n.to_string())) {
                drop(tx);
                out.failed
                    .push((app.name.clone(), crate::errors::one_line(&e)));
                continue;
            }
        }
        tx.commit()?;
        let mut through_app = 0;
        if let Some(driver) = &app.driver {
            let mut own = connect_as(app)?;
            for k in 0..ROWS_THROUGH_APP {
                if let Err(e) = driver.create_complete(&mut own, &format!("seed_{}_{k}", app.name))
                {
                    out.failed
                        .push((app.name.clone(), crate::errors::one_line(e.as_ref())));
                    break;
                }
                through_app += 1;
            }
        }
        log::debug!(
            "seed: {}: {n} rows and {through_app} through its driver in {:?}",
            app.name,
            clock.elapsed()
        );
        out.per_app.push((app.name.clone(), n, through_app));
    }
    if !out.unseeded.is_empty() {
        let apps: Vec<&AppVersion> = live
            .iter()
            .filter(|a| out.unseeded.contains(&a.name))
            .copied()
            .collect();
        let per_table = share * apps.len() as u64 + (rows - share * live.len() as u64);
        // (It ends with ANALYZE, after the bulk seeds above.)
        let mut counts = RowCounts::new(per_table);
        counts.statistics = statistics;
        out.generated = Some(generate::seed(c, more, &counts, &apps)?);
    } else if statistics == Statistics::Refreshed {
        // The tables the apps wrote (and any whose statistics are stale),
        // not the whole database.
        let clock = std::time::Instant::now();
        let analyzed = generate::analyze_stale(c, &since)?;
        log::debug!(
            "seed: analyzed {} in {:?}",
            analyzed.join(", "),
            clock.elapsed()
        );
    }
    Ok(out)
}

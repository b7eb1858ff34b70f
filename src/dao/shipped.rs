//! The shipped project as data: rollsafe's own migrations (`migrations/`,
//! embedded by [`crate::catalog`]) and the attached-functions app versions,
//! handed to `verify` and `check` by `main.rs` through the mechanisms any
//! project uses ([`verify`]: the apps, when [`owns`] the catalog;
//! [`stuck_rows`] to `Check::invariant`).
//!
//! - [`apps`]: the two app versions, `legacy` (one-phase create, needs V2)
//!   and `current` (two-phase attach, needs V3): their statement sets are
//!   the DAO's own files (`src/dao/legacy.sql`, `src/dao/current.sql`) and
//!   their seeds `src/dao/seed/*.sql`, read like an `--apps DIR`. Their
//!   readers are those files' read statements, compared like any app's
//!   (the DAO runs exactly those, by name). Each carries a driver that
//!   calls the DAO's Rust API: its create is one more write the older
//!   app makes during the rollout (read back by the newer app's
//!   statement readers), and the two-phase and rollback scenarios run
//!   through it, so the code that ships is what is exercised.
//! - The `dao` check ([`crate::dao::check`]), a [`ProjectRule`] declared by
//!   the current app's driver: verify runs it only when an app declaring it
//!   may run on the final schema.
//! - [`stuck_rows`]: `check`'s rule that no two-phase create was
//!   abandoned half-way (not-ready rows older than `--stuck-after`).
//!
//! Nothing in `src/verify` or `src/check.rs` names these apps or tables:
//! another project brings its own statement sets and, if it wants, drivers
//! and invariants of its own.

use std::sync::Arc;
use std::time::Duration;

use postgres::Client;
use uuid::Uuid;

use crate::app::{AppDriver, AppError, AppVersion, Created, ProjectRule};
use crate::catalog::{Catalog, Source};
use crate::dao::{request_with_new_collection, CurrentDao, LegacyDao};
use crate::report::{Finding, Severity};
use crate::schema::Snapshot;
use crate::validity::MAX_IDS;
use crate::verify::{Verify, VerifyError};

/// (statement set's source, its text, its bulk seed, its driver).
fn embedded() -> [(&'static str, &'static str, &'static str, Arc<dyn AppDriver>); 2] {
    [
        (
            "src/dao/legacy.sql",
            crate::dao::LEGACY_SQL,
            include_str!("seed/legacy.sql"),
            Arc::new(LegacyDriver),
        ),
        (
            "src/dao/current.sql",
            crate::dao::CURRENT_SQL,
            include_str!("seed/current.sql"),
            Arc::new(CurrentDriver),
        ),
    ]
}

/// Whether `catalog` is the shipped project: its embedded migrations, or a
/// directory that starts with the same first migration (a proposed change
/// to it, rehearsed with `--migrations DIR`). Another project's directory
/// gets none of the shipped apps or invariants.
pub fn owns(catalog: &Catalog) -> bool {
    if matches!(catalog.source, Source::Embedded) {
        return true;
    }
    let Ok(embedded) = Catalog::embedded() else {
        return false;
    };
    match (catalog.migrations().first(), embedded.migrations().first()) {
        (Some(a), Some(b)) => a.file == b.file && a.checksum == b.checksum,
        _ => false,
    }
}

/// A rehearsal of `catalog` as `rollsafe verify` runs it: with the shipped
/// project's apps when the catalog is the shipped one ([`owns`]), else
/// with none (another project's are given with [`Verify::apps`]).
pub fn verify(catalog: Catalog) -> Result<Verify, VerifyError> {
    let shipped = owns(&catalog);
    let verify = Verify::new(catalog)?;
    Ok(if shipped {
        verify.apps(apps()?)
    } else {
        verify
    })
}

/// The shipped project's app versions, ordered by `needs`.
pub fn apps() -> Result<Vec<AppVersion>, AppError> {
    let mut apps = embedded()
        .into_iter()
        .map(|(src, text, seed, driver)| {
            AppVersion::parse(src, text).map(|mut a| {
                a.seed_sql = Some(seed.to_string());
                a.driver = Some(driver);
                a
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    apps.sort_by_key(|a| a.needs);
    Ok(apps)
}

/// The table both apps' creates write.
const ATTACHED_FUNCTIONS: &str = "attached_functions";

fn created(id: Uuid) -> Created {
    Created {
        table: ATTACHED_FUNCTIONS.to_string(),
        id,
    }
}

/// The legacy app: `rollsafe::dao::LegacyDao` (one-phase create).
struct LegacyDriver;

impl AppDriver for LegacyDriver {
    fn create_complete(&self, c: &mut Client, label: &str) -> anyhow::Result<Created> {
        let req = request_with_new_collection(c, label)?;
        Ok(created(LegacyDao::new(c).create(&req)?))
    }
    fn begin_create(&self, _: &mut Client, _: &str) -> anyhow::Result<Option<Uuid>> {
        Ok(None)
    }
    fn sees(&self, c: &mut Client, id: Uuid) -> anyhow::Result<bool> {
        Ok(LegacyDao::new(c).get_by_id(id)?.is_some())
    }
}

/// The current app: `rollsafe::dao::CurrentDao` (two-phase attach); it
/// declares the `dao` check.
struct CurrentDriver;

impl AppDriver for CurrentDriver {
    fn create_complete(&self, c: &mut Client, label: &str) -> anyhow::Result<Created> {
        let req = request_with_new_collection(c, label)?;
        Ok(created(CurrentDao::new(c).attach(&req)?.id))
    }
    fn begin_create(&self, c: &mut Client, label: &str) -> anyhow::Result<Option<Uuid>> {
        let req = request_with_new_collection(c, label)?;
        Ok(Some(CurrentDao::new(c).insert_not_ready(&req)?.attached.id))
    }
    fn sees(&self, c: &mut Client, id: Uuid) -> anyhow::Result<bool> {
        Ok(CurrentDao::new(c).get_by_id(id)?.is_some())
    }
    fn final_check(&self) -> Option<Arc<dyn ProjectRule>> {
        Some(Arc::new(crate::dao::check::TwoPhaseCreate))
    }
}

/// `check`'s invariant for the shipped project: not-ready attached
/// functions older than `stuck_after` are two-phase creates that crashed
/// and were never retried or swept.
pub fn stuck_rows(stuck_after: Duration) -> Arc<dyn ProjectRule> {
    Arc::new(StuckRows { stuck_after })
}

struct StuckRows {
    stuck_after: Duration,
}

impl ProjectRule for StuckRows {
    fn check(&self) -> &'static str {
        "invariants"
    }
    fn description(&self) -> &'static str {
        "no stuck not-ready attached functions"
    }
    fn on_live(
        &self,
        c: &mut Client,
        live: &Snapshot,
    ) -> Option<Result<Vec<Finding>, postgres::Error>> {
        Some(stuck_findings(c, live, self.stuck_after))
    }
}

fn stuck_findings(
    client: &mut Client,
    live: &Snapshot,
    stuck_after: Duration,
) -> Result<Vec<Finding>, postgres::Error> {
    let has_readiness = live
        .tables
        .get("attached_functions")
        .is_some_and(|t| t.columns.iter().any(|c| c.name == "is_ready"));
    if !has_readiness {
        return Ok(Vec::new());
    }
    let rows = client.query(
        "SELECT id::text, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') \
         FROM attached_functions \
         WHERE NOT is_ready AND NOT is_deleted \
           AND created_at < now() - make_interval(secs => $1) \
         ORDER BY created_at",
        &[&stuck_after.as_secs_f64()],
    )?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_declare_their_windows_and_drivers() {
        let apps = apps().unwrap();
        let windows: Vec<(&str, i32)> = apps.iter().map(|a| (a.name.as_str(), a.needs)).collect();
        assert_eq!(windows, [("legacy", 2), ("current", 3)]);
        assert!(apps.iter().all(|a| a.driver.is_some()));
        let declaring: Vec<&str> = apps
            .iter()
            .filter(|a| a.driver.as_ref().is_some_and(|d| d.final_check().is_some()))
            .map(|a| a.name.as_str())
            .collect();
        assert_eq!(declaring, ["current"]);
    }
}

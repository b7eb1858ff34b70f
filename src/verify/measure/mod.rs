//! verify's instruments (floor `measure`, above `evidence`, below
//! `checks` and `stages`): each takes a database or a connection, and
//! what it needs of the run, and returns evidence. None judges (that is
//! `checks`) or decides when it runs (that is `stages`).
//!
//! - [`rehearsal`]: a migration applied under a measured workload (and
//!   [`rehearsal::outside_transaction`] for a file that runs outside one);
//! - [`forced_failure`]: the empty path's forced failure and measured apply;
//! - [`kill_and_rerun`]: a file outside a transaction killed and rerun;
//! - [`planning`]: the live apps' statements planned before and after;
//! - [`readers`]: what the apps' read statements return around a
//!   migration, and the rows the older apps write during the rollout;
//! - [`cross_version`]: two app versions side by side through drivers;
//! - [`sizes`]: production's table sizes (`--sizes-from`).
//!
//! Outside verify, because more than a rehearsal uses them: who connects
//! as whom and the lock sampler ([`crate::sessions`]), and what a real
//! database holds ([`crate::target`], `--from-target`).

pub mod cross_version;
pub mod forced_failure;
pub mod kill_and_rerun;
pub mod planning;
pub mod readers;
pub mod rehearsal;
pub mod sizes;

use crate::sandbox::Database;
use crate::schema::Snapshot;
use crate::verify::error::{step, VerifyError};

/// The schema of `db`: what every scenario compares before and after.
pub fn snapshot(db: &Database) -> Result<Snapshot, VerifyError> {
    let mut c = step("connecting", db.connect())?;
    step("reading the schema", Snapshot::read(&mut c))
}

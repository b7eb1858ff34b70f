//! What the cross-version scenario saw (two app versions side by side
//! through their drivers, [`crate::verify::measure::cross_version`]); judged by
//! `compat`.

use uuid::Uuid;

/// What the scenario saw.
#[derive(Debug, Clone, PartialEq)]
pub struct CrossVersion {
    /// The newer app's in-flight row (None: its driver has no two-phase
    /// create): (row, seen by the newer app, seen by the older app).
    pub in_flight: Option<(Uuid, bool, bool)>,
    /// After a rollback: whether the older app sees a row the newer one
    /// completed, and its own create (Err: why it failed).
    pub rollback_reads: bool,
    pub rollback_write: Result<(), String>,
}

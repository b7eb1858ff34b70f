//! The cross-version scenario: two app versions acting side by side on one
//! database at a migration's schema, each on its own connection as its
//! own role, through their drivers. It measures; `compat::cross_version`
//! judges what it saw.
//!
//! Only the protocol's behaviour is here, what no statement stands for:
//!
//! 1. The newer app starts a two-phase create (a row not ready yet); do
//!    its own readers and the older app's see it? Hiding it is the newer
//!    app's design: it wrote the row.
//! 2. Rolling the app back: does the older app see a row the newer one
//!    completed, and can it still create?
//!
//! Whether a row the older app writes during the rollout reaches the
//! newer app is not asked here: the driver's create is one more rollout
//! write, read back by the newer app's statement readers like every
//! other (`measure::readers`), so drivers and statement files are judged
//! by one path.
//!
//! Floor `measure`: it takes a database and two app versions and returns what they saw of each other.

use postgres::Client;

use crate::app::AppVersion;
use crate::errors::one_line;

pub use crate::verify::evidence::CrossVersion;

/// Runs the scenario; None when either app has no driver (nothing to
/// exercise). An app operation other than the older app's create after
/// the rollback that fails outright ends it (Err: the error).
pub fn run(
    co: &mut Client,
    cn: &mut Client,
    older: &AppVersion,
    newer: &AppVersion,
) -> Option<anyhow::Result<CrossVersion>> {
    let (Some(old), Some(new)) = (&older.driver, &newer.driver) else {
        return None;
    };
    let (o, n) = (&older.name, &newer.name);
    Some((|| {
        let in_flight = match new.begin_create(cn, &format!("{n}_in_flight"))? {
            Some(id) => Some((id, new.sees(cn, id)?, old.sees(co, id)?)),
            None => None,
        };
        let id = new.create_complete(cn, &format!("{n}_before_rollback"))?.id;
        let rollback_reads = old.sees(co, id)?;
        let rollback_write = old
            .create_complete(co, &format!("{o}_after_rollback"))
            .map(|_| ())
            .map_err(|e| one_line(e.as_ref()));
        Ok(CrossVersion {
            in_flight,
            rollback_reads,
            rollback_write,
        })
    })())
}

//! What the apps' readers saw and what the migration's backfill promises
//! counted, on the seeded database before and right after the migration.
//! Measured by the seeded stage; judged by `backfill`.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// A `-- rollsafe:backfill <table> <predicate>` promise and what counting
/// it found on the seeded database right after the migration (so every
/// row there existed before it): the rows, or why it could not be
/// evaluated.
pub type DirectiveCount = (
    String,
    String,
    Result<crate::validity::BackfillCount, String>,
);

/// What each app's list reader returned over the sampled groups.
#[derive(Debug, Clone, Default)]
pub struct Visible {
    /// Rows each app's reader returned, by app name.
    pub seen: BTreeMap<String, BTreeSet<Uuid>>,
    /// (app, message) of readers that failed (the app can no longer read).
    pub failed: Vec<(String, String)>,
    /// How many groups were sampled.
    pub sampled: usize,
    /// Why nothing could be listed, when nothing was.
    pub not_listed: Option<String>,
    /// Tables with row-level security enabled when the readers read
    /// (qualified names): an app role without a policy sees none of their
    /// rows.
    pub row_security: Vec<String>,
}

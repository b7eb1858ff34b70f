//! The migrator's own runs in a rehearsal: its batched updates (killed
//! once and resumed), running it twice, and a file outside a transaction
//! killed part-way and run again. Measured by the stages; judged by
//! `apply` and `backfill`.

/// One `-- rollsafe:batched-update` as the rehearsal ran it on the seeded
/// database, with the live apps' workload on.
#[derive(Debug, Clone)]
pub struct BatchedRun {
    pub directive: crate::catalog::BatchedUpdate,
    /// The runner's last progress, or why it stopped.
    pub rows: Result<crate::migrate::backfill::BackfillProgress, String>,
    /// Rows its predicate still matches afterwards.
    pub remaining: Result<i64, String>,
    /// When its first run was killed (then resumed by a second), how long
    /// after it started.
    pub killed_after: Option<std::time::Duration>,
    pub took: std::time::Duration,
}

/// A Sqitch verify script run right after its change, in a transaction
/// rolled back: Sqitch's own proof that the change did what it promised.
#[derive(Debug, Clone, Default)]
pub struct VerifyScript {
    /// As the repository has it: `verify/orders.sql`.
    pub file: String,
    /// The error it raised; None when it passed.
    pub error: Option<String>,
}

/// What running the migrator up to a version twice did.
#[derive(Debug, Clone, Default)]
pub struct SecondRun {
    pub first_applied: usize,
    pub second_applied: usize,
    /// Schema differences the second run made.
    pub changes: Vec<String>,
    /// The tool's history table refused the migrator's row (a guard of
    /// the project's own): the runs could not be made; why.
    pub history_refused: Option<String>,
}

/// A file outside a transaction killed after one of its statements, then
/// run again from the start (as migrate reruns it).
#[derive(Debug, Clone, Default)]
pub struct Rerun {
    /// The measured rerun.
    pub applied: super::Applied,
    /// How its schema differs from a clean run's.
    pub changed: Vec<String>,
    /// Statements the killed run got through, of how many, and the line
    /// of the last one.
    pub killed_after: usize,
    pub statements: usize,
    pub line: usize,
}

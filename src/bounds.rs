//! The documented ranges of every duration, row count and size a user
//! gives rollsafe (flags and `rollsafe.toml`), and the one check each value
//! goes through before a run starts.
//!
//! Why bounds at all: a value that no run could mean (`--lock-timeout
//! 500000000000s`, a billion seeded rows) is a typo or an attack on a CI
//! runner, and accepting it turns into an overflow or a wait that outlives
//! the pipeline. Each range is wide enough for any real use and is printed
//! in the refusal, so the fix is on the same line. README's flag tables
//! list the same ranges.
//!
//! What it is not: the parsing of durations and counts (`main.rs` reads
//! `5s` / `48M`; `verify::evidence::predict` reads `TABLE=ROWS`).

use std::fmt;
use std::time::Duration;

/// The range a duration flag accepts, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationRange {
    pub min: Duration,
    pub max: Duration,
}

/// The range a count flag accepts, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountRange {
    pub min: u64,
    pub max: u64,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Cap of each lock attempt's `lock_timeout`: below 10 ms an attempt
/// cannot get even an uncontended lock on a loaded server; above a minute
/// it stops being a short attempt (every reader queues that long).
pub const LOCK_TIMEOUT: DurationRange = DurationRange {
    min: ms(10),
    max: secs(60),
};

/// How long lock attempts are retried: up to a day (a maintenance window).
pub const RETRY_FOR: DurationRange = DurationRange {
    min: secs(0),
    max: secs(24 * 3600),
};

/// The longest any app statement may wait because of a migration.
pub const STALL_BUDGET: DurationRange = DurationRange {
    min: ms(10),
    max: secs(600),
};

/// The longest full read per call a plan regression may predict and be a
/// warning rather than an error (`verify --plan-budget`): from 0 (every
/// regression an error) to a second (beyond it no app statement on a
/// request path can afford the read).
pub const PLAN_BUDGET: DurationRange = DurationRange {
    min: ms(0),
    max: secs(1),
};

/// How long `migrate` waits for another migrator.
pub const MIGRATOR_WAIT: DurationRange = DurationRange {
    min: secs(0),
    max: secs(24 * 3600),
};

/// Pause between batches of a batched update.
pub const BATCH_PAUSE: DurationRange = DurationRange {
    min: secs(0),
    max: secs(60),
};

/// Age after which `check` calls a not-ready row stuck: a second to 30 days.
pub const STUCK_AFTER: DurationRange = DurationRange {
    min: secs(1),
    max: secs(30 * 24 * 3600),
};

/// `statement_timeout` of `check`'s queries over a live table (backfill
/// predicates): long enough for a full scan of a large table, short enough
/// that an audit never holds production for an hour.
pub const CHECK_STATEMENT_TIMEOUT: DurationRange = DurationRange {
    min: ms(100),
    max: secs(3600),
};

/// `statement_timeout` of every statement `verify` rehearses (a
/// migration's, an app's): 0 would turn PostgreSQL's timeout off, and a day
/// is past any CI job.
pub const VERIFY_STATEMENT_TIMEOUT: DurationRange = DurationRange {
    min: secs(1),
    max: secs(24 * 3600),
};

/// Rows seeded per rehearsal: ten million is already hours of seeding on a
/// CI runner; larger sizes are predicted (`--table-rows`), not seeded.
pub const ROWS: CountRange = CountRange {
    min: 0,
    max: 10_000_000,
};

/// Production rows of a table for predictions: up to a trillion.
pub const TABLE_ROWS: CountRange = CountRange {
    min: 0,
    max: 1_000_000_000_000,
};

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

impl DurationRange {
    /// `d` itself when inside the range, else the one-line refusal.
    pub fn check(&self, d: Duration) -> Result<Duration, String> {
        if d < self.min || d > self.max {
            return Err(format!(
                "{} is out of range; pass a duration from {} to {}",
                show(d),
                show(self.min),
                show(self.max)
            ));
        }
        Ok(d)
    }
}

impl CountRange {
    /// `n` itself when inside the range, else the one-line refusal.
    pub fn check(&self, n: u64) -> Result<u64, String> {
        if n < self.min || n > self.max {
            return Err(format!(
                "{n} is out of range; pass a count from {} to {}",
                self.min, self.max
            ));
        }
        Ok(n)
    }

    /// The same check for a count read as a float (`48M`, `2.5k`).
    pub fn check_f64(&self, n: f64) -> Result<f64, String> {
        if !(n >= self.min as f64 && n <= self.max as f64) {
            return Err(format!(
                "{n} is out of range; pass a count from {} to {}",
                self.min, self.max
            ));
        }
        Ok(n)
    }
}

impl fmt::Display for DurationRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", show(self.min), show(self.max))
    }
}

impl fmt::Display for CountRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.min, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_outside_a_range_are_refused_with_the_range() {
        assert_eq!(LOCK_TIMEOUT.check(ms(500)), Ok(ms(500)));
        assert_eq!(LOCK_TIMEOUT.check(ms(10)), Ok(ms(10)));
        assert_eq!(LOCK_TIMEOUT.check(secs(60)), Ok(secs(60)));
        assert_eq!(
            LOCK_TIMEOUT.check(secs(500_000_000_000)).unwrap_err(),
            format!(
                "{} is out of range; pass a duration from 10ms to 1m",
                show(secs(500_000_000_000))
            )
        );
        assert!(LOCK_TIMEOUT.check(ms(1)).is_err());
        assert_eq!(ROWS.check(10_000), Ok(10_000));
        assert_eq!(
            ROWS.check(10_000_001).unwrap_err(),
            "10000001 is out of range; pass a count from 0 to 10000000"
        );
        assert!(TABLE_ROWS.check_f64(48e6).is_ok());
        assert!(TABLE_ROWS.check_f64(1e13).is_err());
        assert!(TABLE_ROWS.check_f64(f64::NAN).is_err());
    }
}

//! How rollsafe waits for table locks: short attempts, many of them, over a
//! bounded window. One policy object serves `rollsafe migrate` (applying to
//! a real database) and `rollsafe verify` (rehearsing behind a long
//! transaction), so what verify proves is what migrate does.
//!
//! Why stepped: a DDL statement that waits for ACCESS EXCLUSIVE queues
//! every later query of the table behind it, readers included, for as long
//! as it waits. `lock_timeout` bounds each wait, so it bounds how long the
//! app stalls; between attempts the queued queries run. The anchors:
//! GitLab's `with_lock_retries` starts at 100 ms per attempt with 50 ms
//! sleeps and grows to about 1 s, retrying for minutes; pgroll 500 ms with
//! exponential backoff; reshape 1 s, 10 tries. rollsafe's default starts at
//! 100 ms, grows by half each attempt to a 500 ms cap — below the default
//! 1 s stall budget with room for a loaded machine — sleeps in between, and
//! keeps trying for 5 minutes before giving up.
//!
//! Not here: naming the blocker (the caller watches `pg_blocking_pids`),
//! what an attempt does.

use std::time::{Duration, Instant};

/// SQLSTATE 55P03 lock_not_available: `lock_timeout` expired.
pub const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The stepped lock-wait policy (a small builder over its defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LockPolicy {
    /// `lock_timeout` of the first attempt.
    pub first_timeout: Duration,
    /// The cap `lock_timeout` grows to: the longest one attempt makes the
    /// app's queries queue behind a waiting lock request.
    pub max_timeout: Duration,
    /// How long to keep retrying before giving up.
    pub retry_for: Duration,
}

impl Default for LockPolicy {
    fn default() -> Self {
        LockPolicy {
            first_timeout: Duration::from_millis(100),
            max_timeout: Duration::from_millis(500),
            retry_for: Duration::from_secs(300),
        }
    }
}

/// What a run of attempts went through.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Attempts {
    /// Attempts made (1 when the first one got its locks).
    pub count: u32,
    /// From the first attempt to the end of the last.
    pub elapsed: Duration,
    /// The `lock_timeout` of the last attempt.
    pub last_timeout: Duration,
}

/// The attempts ran out of window, every one of them timed out on a lock.
#[derive(Debug)]
pub struct GaveUp<E> {
    pub attempts: Attempts,
    /// The last attempt's error.
    pub last: E,
}

impl LockPolicy {
    /// A policy with `max_timeout` as its cap (the first attempt's timeout
    /// is never above it).
    pub fn max_timeout(mut self, t: Duration) -> Self {
        self.max_timeout = t.max(Duration::from_millis(1));
        self.first_timeout = self.first_timeout.min(self.max_timeout);
        self
    }

    pub fn retry_for(mut self, t: Duration) -> Self {
        self.retry_for = t;
        self
    }

    pub fn first_timeout(mut self, t: Duration) -> Self {
        self.first_timeout = t.max(Duration::from_millis(1)).min(self.max_timeout);
        self
    }

    /// `lock_timeout` for attempt `n` (1-based): the first timeout grown by
    /// half per attempt, capped.
    pub fn timeout_for(&self, n: u32) -> Duration {
        let grown = self
            .first_timeout
            .mul_f64(1.5f64.powi(n.saturating_sub(1).min(30) as i32));
        grown.min(self.max_timeout)
    }

    /// The pause after failed attempt `n`: half its timeout (50 ms at the
    /// start, 250 ms at the default cap), at most 1 s, with up to 25 %
    /// jitter so that two migrators do not stay in step. Long enough for
    /// the queries queued behind the attempt to run.
    pub fn pause_after(&self, n: u32) -> Duration {
        let base = (self.timeout_for(n) / 2).min(Duration::from_secs(1));
        base.mul_f64(1.0 + rand::random::<f64>() * 0.25)
    }

    /// The longest a run can take before giving up: the window plus one
    /// last attempt started just before it closed.
    pub fn give_up_bound(&self) -> Duration {
        self.retry_for + self.max_timeout + Duration::from_secs(1)
    }

    /// Runs `attempt(n, lock_timeout)` until it succeeds, fails otherwise,
    /// or the window closes. `timed_out` says whether an error is a lock
    /// timeout (retried) or anything else (returned at once as
    /// `Err(Ok(e))`); a closed window returns `Err(Err(GaveUp))`.
    pub fn run<T, E>(
        &self,
        mut attempt: impl FnMut(u32, Duration) -> Result<T, E>,
        timed_out: impl Fn(&E) -> bool,
    ) -> Result<(T, Attempts), Result<E, GaveUp<E>>> {
        let start = Instant::now();
        let mut n = 0;
        loop {
            n += 1;
            let timeout = self.timeout_for(n);
            let result = attempt(n, timeout);
            let attempts = Attempts {
                count: n,
                elapsed: start.elapsed(),
                last_timeout: timeout,
            };
            match result {
                Ok(v) => return Ok((v, attempts)),
                Err(e) if !timed_out(&e) => return Err(Ok(e)),
                Err(e) => {
                    let pause = self.pause_after(n);
                    if start.elapsed() + pause >= self.retry_for {
                        return Err(Err(GaveUp { attempts, last: e }));
                    }
                    log::info!(
                        "attempt {n}: lock_timeout {timeout:?} expired; retrying in {pause:.0?}"
                    );
                    std::thread::sleep(pause);
                }
            }
        }
    }
}

/// Whether a driver error is a lock timeout.
pub fn is_lock_timeout(e: &postgres::Error) -> bool {
    e.code().map(|c| c.code()) == Some(LOCK_NOT_AVAILABLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_grow_from_100ms_to_the_cap() {
        let p = LockPolicy::default();
        assert_eq!(p.timeout_for(1), Duration::from_millis(100));
        assert_eq!(p.timeout_for(2), Duration::from_millis(150));
        assert_eq!(p.timeout_for(5), Duration::from_millis(500));
        assert_eq!(p.timeout_for(500), Duration::from_millis(500));
        let pause = p.pause_after(1);
        assert!(pause >= Duration::from_millis(50) && pause <= Duration::from_micros(62_500));
        let low = p.max_timeout(Duration::from_millis(40));
        assert_eq!(low.timeout_for(1), Duration::from_millis(40));
    }

    #[test]
    fn retries_lock_timeouts_until_the_window_closes() {
        let p = LockPolicy::default().retry_for(Duration::from_millis(400));
        let mut calls = Vec::new();
        let r: Result<((), Attempts), _> = p.run(
            |n, t| {
                calls.push((n, t));
                Err("timeout")
            },
            |_| true,
        );
        let gave_up = r.unwrap_err().unwrap_err();
        assert!(gave_up.attempts.count >= 3, "{:?}", gave_up.attempts);
        assert_eq!(calls[0], (1, Duration::from_millis(100)));
        assert!(gave_up.attempts.elapsed < Duration::from_millis(400));

        let r = p.run(|n, _| if n < 3 { Err("t") } else { Ok(n) }, |_| true);
        let (v, a) = r.unwrap();
        assert_eq!((v, a.count), (3, 3));

        let r: Result<((), Attempts), _> = p.run(|_, _| Err("syntax"), |e| *e == "t");
        assert_eq!(r.unwrap_err().unwrap(), "syntax");
    }
}

//! How rollsafe waits for table locks. One policy object serves `rollsafe
//! migrate` (applying to a real database) and `rollsafe verify` (rehearsing
//! behind a long transaction).
//!
//! Why it matters: a DDL statement that waits for ACCESS EXCLUSIVE queues
//! every later query of the table behind it, readers included, for as long
//! as it waits. Two ways of waiting, one loop ([`LockPolicy::run_gated`]):
//!
//! - **Without queueing** (the default where the caller can see what it
//!   would wait for: `migrate` knows each statement's tables and lock mode,
//!   see `migrate::conflicts`). Before each attempt the caller's *gate*
//!   looks in `pg_locks` for a conflicting lock granted to another session;
//!   while there is one, the loop polls every [`LockPolicy::poll`] and
//!   requests nothing, so nobody queues behind us. When there is none, one
//!   attempt with a short `lock_timeout` ([`LockPolicy::attempt_timeout`],
//!   50 ms): the only remaining window is the race between the look and
//!   the request, so a reader's worst wait behind a long transaction is
//!   about one such attempt. A timed-out attempt backs off (doubling from
//!   the attempt timeout to 1 s, with jitter) before looking again.
//! - **Stepped** (the previous behaviour; what runs where there is nothing
//!   to look at: row locks of a backfill batch, `CREATE INDEX CONCURRENTLY`'s
//!   waits for older transactions, which count against `lock_timeout` and
//!   queue no app statement; and everywhere with [`LockPolicy::stepped`]).
//!   Each attempt requests at once; its `lock_timeout` bounds how long the
//!   app stalls, starting at 100 ms and growing by half per attempt to a
//!   500 ms cap, with pauses in between so the queued queries run. The
//!   anchors: GitLab's `with_lock_retries` 100 ms growing to ~1 s; pgroll
//!   500 ms with exponential backoff; reshape 1 s, 10 tries.
//!
//! Both keep trying for [`LockPolicy::retry_for`] (5 minutes by default)
//! before giving up.
//!
//! Not here: what the gate queries (`migrate::conflicts`), naming the
//! blocker, what an attempt does.

use std::time::{Duration, Instant};

/// SQLSTATE 55P03 lock_not_available: `lock_timeout` expired.
pub const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The lock-wait policy (a small builder over its defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LockPolicy {
    /// `lock_timeout` of the first stepped attempt.
    pub first_timeout: Duration,
    /// The cap stepped `lock_timeout`s grow to: the longest one attempt
    /// makes the app's queries queue behind a waiting lock request. No
    /// attempt of either kind waits longer.
    pub max_timeout: Duration,
    /// How long to keep trying before giving up.
    pub retry_for: Duration,
    /// Wait without queueing where the caller has a gate (the default);
    /// `false`: always stepped (the previous behaviour).
    pub no_queue: bool,
    /// `lock_timeout` of an attempt made once the gate saw no conflicting
    /// holder (never above `max_timeout`).
    pub attempt_timeout: Duration,
    /// How often the gate looks again while a conflicting holder is there.
    pub poll: Duration,
}

impl Default for LockPolicy {
    fn default() -> Self {
        LockPolicy {
            first_timeout: Duration::from_millis(100),
            max_timeout: Duration::from_millis(500),
            retry_for: Duration::from_secs(300),
            no_queue: true,
            attempt_timeout: Duration::from_millis(50),
            poll: Duration::from_millis(20),
        }
    }
}

/// What a run of attempts went through.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Attempts {
    /// Lock requests made (1 when the first one got its locks; 0 when the
    /// window closed while a holder was still there).
    pub count: u32,
    /// From the start to the end of the last attempt (or of the wait).
    pub elapsed: Duration,
    /// The `lock_timeout` of the last attempt.
    pub last_timeout: Duration,
    /// Time spent waiting without queueing for a conflicting holder to go.
    pub waited: Duration,
}

/// The window closed: every attempt timed out on a lock, or a conflicting
/// holder was still there.
#[derive(Debug)]
pub struct GaveUp<E> {
    pub attempts: Attempts,
    /// The last attempt's error (none when no attempt was made).
    pub last: Option<E>,
    /// The conflicting holder the gate saw last, when the window closed
    /// while waiting for it (as the gate describes it).
    pub waiting_on: Option<String>,
}

/// The outcome of [`LockPolicy::run`] and [`LockPolicy::run_gated`]:
/// `Err(Ok(e))` an error that is not a lock timeout (returned at once),
/// `Err(Err(GaveUp))` the window closed.
pub type RunResult<T, E> = Result<(T, Attempts), Result<E, GaveUp<E>>>;

impl LockPolicy {
    /// The previous behaviour: every attempt requests its locks at once,
    /// stepped from 100 ms to the cap, whatever the caller can see.
    pub fn stepped() -> Self {
        LockPolicy::default().no_queue(false)
    }

    /// A policy with `max_timeout` as its cap (no attempt's timeout is
    /// ever above it).
    pub fn max_timeout(mut self, t: Duration) -> Self {
        self.max_timeout = t.max(Duration::from_millis(1));
        self.first_timeout = self.first_timeout.min(self.max_timeout);
        self.attempt_timeout = self.attempt_timeout.min(self.max_timeout);
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

    pub fn no_queue(mut self, on: bool) -> Self {
        self.no_queue = on;
        self
    }

    /// `lock_timeout` for stepped attempt `n` (1-based): the first timeout
    /// grown by half per attempt, capped.
    pub fn timeout_for(&self, n: u32) -> Duration {
        let grown = self
            .first_timeout
            .mul_f64(1.5f64.powi(n.saturating_sub(1).min(30) as i32));
        grown.min(self.max_timeout)
    }

    /// The pause after failed stepped attempt `n`: half its timeout (50 ms
    /// at the start, 250 ms at the default cap), at most 1 s, with up to
    /// 25 % jitter so that two migrators do not stay in step. Long enough
    /// for the queries queued behind the attempt to run.
    pub fn pause_after(&self, n: u32) -> Duration {
        let base = (self.timeout_for(n) / 2).min(Duration::from_secs(1));
        base.mul_f64(1.0 + rand::random::<f64>() * 0.25)
    }

    /// The back-off after the `n`th gated attempt in a row that timed out
    /// (it lost the race to a session that took a conflicting lock between
    /// the look and the request): the attempt timeout doubled per failure,
    /// at most 1 s, with up to 50 % jitter.
    pub fn backoff_after(&self, n: u32) -> Duration {
        let base = self
            .attempt_timeout
            .max(Duration::from_millis(1))
            .saturating_mul(1 << n.saturating_sub(1).min(10))
            .min(Duration::from_secs(1));
        base.mul_f64(1.0 + rand::random::<f64>() * 0.5)
    }

    /// The longest a run can take before giving up: the window plus one
    /// last attempt started just before it closed.
    pub fn give_up_bound(&self) -> Duration {
        self.retry_for + self.max_timeout + Duration::from_secs(1)
    }

    /// Runs `attempt(n, lock_timeout)`, stepped, until it succeeds, fails
    /// otherwise, or the window closes. `timed_out` says whether an error
    /// is a lock timeout (retried) or anything else. For attempts whose
    /// waits the caller cannot look at beforehand.
    pub fn run<T, E>(
        &self,
        attempt: impl FnMut(u32, Duration) -> Result<T, E>,
        timed_out: impl Fn(&E) -> bool,
    ) -> RunResult<T, E> {
        self.run_gated(None::<fn() -> Option<String>>, attempt, timed_out)
    }

    /// As [`LockPolicy::run`], and with a `gate` (and [`LockPolicy::no_queue`])
    /// without queueing: before each attempt `gate()` says which session,
    /// if any, holds a lock the attempt would wait for (a description for
    /// the give-up message); while one does, nothing is requested.
    pub fn run_gated<T, E>(
        &self,
        mut gate: Option<impl FnMut() -> Option<String>>,
        mut attempt: impl FnMut(u32, Duration) -> Result<T, E>,
        timed_out: impl Fn(&E) -> bool,
    ) -> RunResult<T, E> {
        if !self.no_queue {
            gate = None;
        }
        let start = Instant::now();
        let mut waited = Duration::ZERO;
        let mut n = 0;
        // Gated attempts that timed out since the gate last had to wait.
        let mut lost_races = 0;
        loop {
            if let Some(gate) = gate.as_mut() {
                let wait_start = Instant::now();
                // Only time spent while a holder was there is waiting: the
                // gate's own look at the lock table, when it finds nobody,
                // is not (a migrate on an idle database reported its
                // lookups as "waited 9 ms").
                let mut held = false;
                while let Some(holder) = gate() {
                    held = true;
                    lost_races = 0;
                    if start.elapsed() + self.poll >= self.retry_for {
                        waited += wait_start.elapsed();
                        return Err(Err(GaveUp {
                            attempts: Attempts {
                                count: n,
                                elapsed: start.elapsed(),
                                last_timeout: self.attempt_timeout,
                                waited,
                            },
                            last: None,
                            waiting_on: Some(holder),
                        }));
                    }
                    std::thread::sleep(self.poll);
                }
                if held {
                    waited += wait_start.elapsed();
                }
            }
            n += 1;
            let timeout = if gate.is_some() {
                self.attempt_timeout
            } else {
                self.timeout_for(n)
            };
            let result = attempt(n, timeout);
            let attempts = Attempts {
                count: n,
                elapsed: start.elapsed(),
                last_timeout: timeout,
                waited,
            };
            match result {
                Ok(v) => return Ok((v, attempts)),
                Err(e) if !timed_out(&e) => return Err(Ok(e)),
                Err(e) => {
                    let pause = if gate.is_some() {
                        lost_races += 1;
                        self.backoff_after(lost_races)
                    } else {
                        self.pause_after(n)
                    };
                    if start.elapsed() + pause >= self.retry_for {
                        return Err(Err(GaveUp {
                            attempts,
                            last: Some(e),
                            waiting_on: None,
                        }));
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

    #[test]
    fn a_gate_holds_attempts_back_while_a_holder_is_there() {
        let p = LockPolicy::default().retry_for(Duration::from_secs(5));
        let looks = std::cell::Cell::new(0);
        let mut requested_while_held = false;
        let r: RunResult<u32, &str> = p.run_gated(
            Some(|| {
                looks.set(looks.get() + 1);
                (looks.get() <= 3).then(|| "pid 1".to_string())
            }),
            |n, t| {
                requested_while_held |= looks.get() <= 3;
                assert_eq!(t, Duration::from_millis(50));
                if n < 2 {
                    Err("timeout")
                } else {
                    Ok(n)
                }
            },
            |e| *e == "timeout",
        );
        let (v, a) = r.unwrap();
        assert_eq!((v, a.count), (2, 2));
        assert!(!requested_while_held);
        assert!(a.waited >= p.poll * 3, "{a:?}");

        // A gate that finds nobody is no wait, however long it looks
        // (a migrate on an idle database reported its lookups as waits).
        let r: RunResult<u32, &str> = p.run_gated(
            Some(|| {
                std::thread::sleep(Duration::from_millis(5));
                None
            }),
            |n, _| Ok(n),
            |_| true,
        );
        let (_, idle) = r.unwrap();
        assert_eq!(idle.waited, Duration::ZERO, "{idle:?}");

        // The window closes while the holder stays: named, nothing requested.
        let p = p.retry_for(Duration::from_millis(200));
        let r: RunResult<(), &str> = p.run_gated(
            Some(|| Some("pid 7 (idle in transaction)".to_string())),
            |_, _| panic!("no request while a holder is there"),
            |_| true,
        );
        let gave_up = r.unwrap_err().unwrap_err();
        assert_eq!(gave_up.attempts.count, 0);
        assert!(gave_up.last.is_none());
        assert_eq!(
            gave_up.waiting_on.as_deref(),
            Some("pid 7 (idle in transaction)")
        );

        // The previous behaviour ignores the gate and steps.
        let r: RunResult<Duration, &str> =
            LockPolicy::stepped().run_gated(Some(|| Some("x".to_string())), |_, t| Ok(t), |_| true);
        assert_eq!(r.unwrap().0, Duration::from_millis(100));
    }

    #[test]
    fn gated_back_off_doubles_with_jitter_up_to_a_second() {
        let p = LockPolicy::default();
        let b1 = p.backoff_after(1);
        assert!(b1 >= Duration::from_millis(50) && b1 <= Duration::from_millis(75));
        let b3 = p.backoff_after(3);
        assert!(b3 >= Duration::from_millis(200) && b3 <= Duration::from_millis(300));
        let b9 = p.backoff_after(9);
        assert!(b9 >= Duration::from_secs(1) && b9 <= Duration::from_millis(1500));
        assert_eq!(
            p.max_timeout(Duration::from_millis(20)).attempt_timeout,
            Duration::from_millis(20)
        );
    }
}

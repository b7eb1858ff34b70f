//! Watching backends from a second connection while they run: the locks a
//! migration statement holds (for a statement that commits on its own,
//! `pg_locks` shows them only while it runs), and the live apps' waits
//! on the migration's locks.
//!
//! Who is who comes from `application_name`: the migration's connection is
//! [`MIGRATION`], the apps' connections start with [`APP_PREFIX`], and
//! every connection rollsafe opens for itself (samplers, the long
//! transaction, counting rows) is [`PROBE`]. A stall is the migration's only
//! on lock-wait evidence: an app backend waiting on a lock
//! (`wait_event_type = 'Lock'`) with a [`MIGRATION`] backend among its
//! `pg_blocking_pids`; how long it waited is that lock wait's duration
//! (`pg_locks.waitstart` from PostgreSQL 14, the span it was seen waiting
//! before), never a statement's wall time, which a loaded machine
//! stretches. rollsafe's own connections never count as an app.
//!
//! Nothing here judges.
//!
//! Floor `sessions`, beside the sessions it watches: it returns the lock
//! waits it saw.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Client;

/// `application_name` of the connection a migration runs on. It and the
/// apps' names start with the watchdog's mark of untrusted sessions
/// ([`super::UNTRUSTED_APPLICATION`]), so naming a session never
/// takes it out of the watchdog's reach.
pub const MIGRATION: &str = "rollsafe-rehearsed migration";
/// `application_name` of rollsafe's own connections (never an app).
pub const PROBE: &str = "rollsafe-probe";
/// `application_name` prefix of a live app's connection (`rollsafe-rehearsed
/// app legacy (read)`).
pub const APP_PREFIX: &str = "rollsafe-rehearsed app ";

/// The pause between a lock sampler's samples (each is a round trip
/// too): well under a millisecond, so that a statement of a few
/// milliseconds is seen at least once; a shorter one may not be, and is
/// then reported as not observed.
const INTERVAL: Duration = Duration::from_micros(500);

/// Names the session of `c` (`application_name`).
pub fn name_session(c: &mut Client, name: &str) -> Result<(), postgres::Error> {
    c.execute("SELECT set_config('application_name', $1, false)", &[&name])
        .map(|_| ())
}

/// `server_version_num` of the server `c` is connected to.
pub fn version_num(c: &mut Client) -> Result<i32, postgres::Error> {
    Ok(
        c.query_one("SELECT current_setting('server_version_num')::int", &[])?
            .get(0),
    )
}

/// One relation lock seen held by the sampled backend.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenLock {
    pub relation: u32,
    pub mode: String,
    /// Samples that saw it.
    pub seen: u32,
    /// From the first sample that saw it to the last: a lower bound of
    /// how long it was held.
    pub span: Duration,
}

/// What the lock sampler saw while one statement ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeldLocks {
    /// Samples taken while it ran.
    pub samples: u32,
    pub locks: Vec<SeenLock>,
}

/// Samples the relation locks backend `pid` holds, every few
/// milliseconds, on a connection of its own, until stopped.
pub struct LockSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(Client, HeldLocks)>,
}

impl LockSampler {
    /// Starts sampling `pid` on `admin` (handed back by [`Self::stop`]).
    /// Returns once the sampler is ready to take its first sample, so
    /// that a statement started after it is watched from its start
    /// (on a loaded machine a thread can take long to get going).
    pub fn start(mut admin: Client, pid: i32) -> anyhow::Result<LockSampler> {
        let query = admin.prepare(
            "SELECT relation, mode FROM pg_locks
              WHERE pid = $1 AND locktype = 'relation' AND granted",
        )?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ready, started) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut held = HeldLocks::default();
            let mut first: BTreeMap<(u32, String), Instant> = BTreeMap::new();
            let _ = ready.send(());
            // One more sample after the stop flag would see the statement
            // ended: stop before sampling.
            while !flag.load(Ordering::Relaxed) {
                let rows = admin.query(&query, &[&pid]);
                let at = Instant::now();
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(rows) = rows {
                    held.samples += 1;
                    for r in rows {
                        let key: (u32, String) = (r.get(0), r.get(1));
                        let since = *first.entry(key.clone()).or_insert(at);
                        match held
                            .locks
                            .iter_mut()
                            .find(|l| l.relation == key.0 && l.mode == key.1)
                        {
                            Some(l) => {
                                l.seen += 1;
                                l.span = at - since;
                            }
                            None => held.locks.push(SeenLock {
                                relation: key.0,
                                mode: key.1,
                                seen: 1,
                                span: Duration::ZERO,
                            }),
                        }
                    }
                }
                std::thread::sleep(INTERVAL);
            }
            (admin, held)
        });
        started
            .recv()
            .map_err(|_| anyhow::anyhow!("the lock sampler's thread did not start"))?;
        Ok(LockSampler { stop, thread })
    }

    /// Stops sampling; the connection back and what was seen.
    pub fn stop(self) -> anyhow::Result<(Client, HeldLocks)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the lock sampler's thread panicked"))
    }
}

/// The live apps' waits on the migration's locks, as sampled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppWaits {
    /// The longest single lock wait of an app backend on the migration.
    pub longest: Duration,
    /// The app (its `application_name` after [`APP_PREFIX`]) and the
    /// statement (`EXECUTE …`) of that wait.
    pub app: String,
    pub query: String,
    /// Distinct lock waits attributed to the migration.
    pub waits: u64,
    pub samples: u64,
    /// Each distinct wait (the first [`MAX_WAITS_KEPT`]), for the
    /// report's lock timeline.
    pub each: Vec<SampledWait>,
}

/// Most waits [`AppWaits::each`] keeps: a long rehearsal under a blocking
/// lock queues the apps over and over; the timeline shows the worst few.
pub const MAX_WAITS_KEPT: usize = 2000;

/// One app backend's lock wait on the migration, as sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledWait {
    /// The app's session (`legacy (write)`) and its statement's text.
    pub app: String,
    pub query: String,
    /// The relation it waited for (named as [`crate::tables`] names it:
    /// the server's `regclass` spelling) and the mode it asked for.
    pub relation: String,
    pub mode: String,
    /// When the wait began (the server's `waitstart`, else the first
    /// sample that saw it; placed from the sample's send time) and how
    /// long it was seen to last.
    pub began: Instant,
    pub waited: Duration,
}

/// Samples, until stopped, every app backend of the database waiting on
/// a lock that the migration holds or is queued ahead for. The migration
/// is any backend that is neither an app nor rollsafe's own (a migration
/// may rename its session: `SET application_name` must not hide it; app
/// sessions blocking each other on rows never count).
pub struct AppWaitSampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<AppWaits>>,
}

impl AppWaitSampler {
    pub fn start(url: &str) -> anyhow::Result<AppWaitSampler> {
        let mut admin = crate::db::connect(url)?;
        name_session(&mut admin, PROBE)?;
        // pg_locks.waitstart exists from 14: the server's own start of
        // the wait. Before, the first sample that saw it waiting.
        let waitstart = if version_num(&mut admin)? >= 140000 {
            "extract(epoch FROM clock_timestamp() - l.waitstart)::float8"
        } else {
            "NULL::float8"
        };
        let sql = format!(
            "SELECT a.pid, a.application_name, coalesce(a.query, ''),
                    coalesce(a.query_start::text, ''), {waitstart},
                    coalesce(l.relation::regclass::text, ''), l.mode
               FROM pg_stat_activity a
               JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted
              WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'
                AND starts_with(a.application_name, '{APP_PREFIX}')
                AND EXISTS (SELECT 1 FROM pg_stat_activity m
                             WHERE m.pid = ANY (pg_blocking_pids(a.pid))
                               AND NOT starts_with(m.application_name, '{APP_PREFIX}')
                               AND NOT (m.application_name = '{PROBE}'
                                        AND m.usename = current_user))"
        );
        let query = admin.prepare(&sql)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = AppWaits::default();
            // (pid, query_start) of a wait → when it was first seen.
            // (pid, query_start) of a wait → when it was first seen and
            // its entry in `out.each`, if kept.
            let mut first: BTreeMap<(i32, String), (Instant, Option<usize>)> = BTreeMap::new();
            while !flag.load(Ordering::Relaxed) {
                // The server reads its clock after the query is sent: a
                // wait placed from the send time is never late (the
                // timeline never shows it past the lock's release), early
                // by at most the query's trip to the server.
                let now = Instant::now();
                if let Ok(rows) = admin.query(&query, &[]) {
                    out.samples += 1;
                    for r in rows {
                        let key: (i32, String) = (r.get(0), r.get(3));
                        let new = !first.contains_key(&key);
                        let (seen_since, kept) = *first.entry(key).or_insert_with(|| {
                            out.waits += 1;
                            (
                                now,
                                (out.each.len() < MAX_WAITS_KEPT).then_some(out.each.len()),
                            )
                        });
                        let waited = r
                            .get::<_, Option<f64>>(4)
                            .filter(|s| s.is_finite() && *s >= 0.0)
                            .map(Duration::from_secs_f64)
                            .unwrap_or(now - seen_since);
                        match kept {
                            Some(_) if new => out.each.push(SampledWait {
                                app: r
                                    .get::<_, String>(1)
                                    .trim_start_matches(APP_PREFIX)
                                    .to_string(),
                                query: r.get(2),
                                relation: r.get(5),
                                mode: r.get(6),
                                began: now.checked_sub(waited).unwrap_or(now),
                                waited,
                            }),
                            Some(i) => out.each[i].waited = waited,
                            None => {}
                        }
                        if waited > out.longest {
                            out.longest = waited;
                            let app: String = r.get(1);
                            out.app = app.trim_start_matches(APP_PREFIX).to_string();
                            out.query = r.get(2);
                        }
                    }
                }
                std::thread::sleep(INTERVAL * 4);
            }
            out
        });
        Ok(AppWaitSampler {
            stop,
            thread: Some(thread),
        })
    }

    pub fn stop(mut self) -> AppWaits {
        self.halt()
    }

    fn halt(&mut self) -> AppWaits {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for AppWaitSampler {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::UNTRUSTED_APPLICATION;

    #[test]
    fn migration_and_app_sessions_stay_in_the_watchdogs_reach() {
        // The watchdog cancels sessions whose name starts with its mark;
        // naming a session for the samplers must not take it out.
        assert!(MIGRATION.starts_with(UNTRUSTED_APPLICATION));
        assert!(APP_PREFIX.starts_with(UNTRUSTED_APPLICATION));
        assert!(!PROBE.starts_with(UNTRUSTED_APPLICATION));
    }
}

//! `locks`: which locks the migration takes and what they cost the live app.
//!
//! Three measurements:
//! - the relation lock modes it holds at the end of its transaction
//!   (`pg_locks`), per existing table;
//! - the longest stall of a concurrent workload (reader and writer threads
//!   running the live apps' statements) while it applies, and whether the
//!   workload failed;
//! - with a long transaction holding the tables, whether the migration gives
//!   up within its lock timeout — a waiting ACCESS EXCLUSIVE request queues
//!   every later query of the table behind it, so waiting forever takes the
//!   app down; the readers' stall behind it is reported.
//!
//! Errors: an index built without CONCURRENTLY on a table with rows (SHARE
//! lock: writes blocked for the whole build, which grows with the table); a
//! lock that blocks the app held for [`STALL_BUDGET`] or more; ignoring the
//! lock timeout; the live app failing during the migration.

use std::time::Duration;

use crate::report::{Finding, Severity};
use crate::verify::rehearsal::{Applied, LockTimeoutProbe, WorkloadStats};

use super::ms;

pub const CHECK: &str = "locks";
pub const DESCRIPTION: &str =
    "locks taken, the live app's longest stall while it applies, and giving up within the lock timeout behind a long transaction";

/// How long a lock that blocks the app may be held. Catalog-only DDL holds
/// it for milliseconds; anything near a second is doing real work (or
/// sleeping) under it. Far above scheduler noise on a loaded machine.
pub const STALL_BUDGET: Duration = Duration::from_secs(1);

/// Slack on top of the lock timeout before "gave up in time" turns into
/// "ignored it" (connection and scheduling overhead on a busy machine).
pub const TIMEOUT_SLACK: Duration = Duration::from_secs(2);

pub fn evaluate(
    v: i32,
    at_n: &Applied,
    workload: Option<&WorkloadStats>,
    probe: Option<&LockTimeoutProbe>,
    lock_timeout: Duration,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let stall = workload.map(|w| w.max_stall).unwrap_or_default();
    let lock_list: Vec<String> = at_n
        .tables
        .values()
        .filter(|w| !w.locks.is_empty())
        .map(|w| format!("{}: {}", w.table, w.locks.join("+")))
        .collect();

    for w in at_n.tables.values() {
        if w.rows_before > 0 && !w.new_indexes.is_empty() && w.blocks_writes() {
            out.push(
                Finding::new(
                    CHECK,
                    "blocking-index-build",
                    Severity::Error,
                    Some(v),
                    format!(
                        "builds index {} on {} ({} rows) while holding {}: the app's writes wait for the whole build, which grows with the table",
                        w.new_indexes.join(", "),
                        w.table,
                        w.rows_before,
                        w.strongest_lock().unwrap_or("")
                    ),
                )
                .evidence("table", w.table.clone())
                .evidence("rows", w.rows_before)
                .evidence("rows_scanned", w.rows_scanned)
                .evidence("ms_at_n_rows", ms(at_n.duration))
                .evidence("workload_max_stall_ms", ms(stall))
                .advice("build the index with CREATE INDEX CONCURRENTLY as its own step outside a transaction (it takes SHARE UPDATE EXCLUSIVE, which does not block reads or writes), and check it is valid afterwards"),
            );
        }
    }

    let blocking: Vec<&str> = at_n
        .tables
        .values()
        .filter(|w| w.rows_before > 0 && w.blocks_writes())
        .map(|w| w.table.as_str())
        .collect();
    if !blocking.is_empty() && at_n.held >= STALL_BUDGET {
        out.push(
            Finding::new(
                CHECK,
                "long-blocking-lock",
                Severity::Error,
                Some(v),
                format!(
                    "holds a lock that blocks the app on {} for {:.1} s (budget {:.1} s); the live workload stalled {:.1} s",
                    blocking.join(", "),
                    at_n.held.as_secs_f64(),
                    STALL_BUDGET.as_secs_f64(),
                    stall.as_secs_f64()
                ),
            )
            .evidence("held_ms", ms(at_n.held))
            .evidence("workload_max_stall_ms", ms(stall))
            .evidence("locks", lock_list.join("; "))
            .advice("do only catalog-only changes under ACCESS EXCLUSIVE / SHARE locks; move slow work (sleeps, backfills, scans) out of the locking transaction"),
        );
    }

    if let Some(w) = workload {
        if w.error_count > 0 {
            let first = w
                .errors
                .first()
                .map(|(s, m)| format!("{s}: {m}"))
                .unwrap_or_default();
            out.push(
                Finding::new(
                    CHECK,
                    "workload-failed",
                    Severity::Error,
                    Some(v),
                    format!(
                        "the live apps' statements failed {} time(s) while it applied (first: {first})",
                        w.error_count
                    ),
                )
                .evidence("statements", w.statements)
                .evidence("errors", w.error_count)
                .evidence("first_error", first)
                .advice("keep every column and table a live app version uses until no running version uses it; change shapes in expand/contract steps"),
            );
        }
    }

    if let Some(p) = probe {
        let limit = lock_timeout + TIMEOUT_SLACK;
        let ev = |f: Finding| {
            f.evidence("lock_timeout_ms", ms(lock_timeout))
                .evidence("waited_ms", ms(p.waited))
                .evidence("reader_stall_ms", ms(p.reader_stall))
                .evidence("long_transaction_holds", p.held_tables.join(", "))
        };
        if p.cancelled_by_watchdog || (p.waited > limit && !p.completed) {
            out.push(
                ev(Finding::new(
                    CHECK,
                    "ignores-lock-timeout",
                    Severity::Error,
                    Some(v),
                    format!(
                        "behind a long transaction it waited {:.1} s instead of giving up after its {:.1} s lock timeout; readers queued behind it for {:.1} s",
                        p.waited.as_secs_f64(),
                        lock_timeout.as_secs_f64(),
                        p.reader_stall.as_secs_f64()
                    ),
                ))
                .advice("do not change lock_timeout inside a migration; rollsafe migrate sets it and retries"),
            );
        } else if p.gave_up {
            out.push(ev(Finding::new(
                CHECK,
                "gives-up-within-lock-timeout",
                Severity::Info,
                Some(v),
                format!(
                    "behind a long transaction it gave up after {:.1} s (lock timeout {:.1} s); readers stalled at most {:.1} s meanwhile",
                    p.waited.as_secs_f64(),
                    lock_timeout.as_secs_f64(),
                    p.reader_stall.as_secs_f64()
                ),
            )));
        } else if p.completed {
            out.push(ev(Finding::new(
                CHECK,
                "no-conflict-with-long-transaction",
                Severity::Info,
                Some(v),
                "its locks do not conflict with a long app transaction: it applied without waiting",
            )));
        } else if let Some(e) = &p.other_error {
            out.push(ev(Finding::new(
                CHECK,
                "probe-failed",
                Severity::Warn,
                Some(v),
                format!("the long-transaction probe failed otherwise: {e}"),
            )));
        }
    }

    out.push(
        Finding::new(
            CHECK,
            "measured",
            Severity::Info,
            Some(v),
            if lock_list.is_empty() {
                "takes no lock on existing tables".to_string()
            } else {
                format!("locks {}", lock_list.join("; "))
            },
        )
        .evidence("held_ms", ms(at_n.held))
        .evidence("workload_max_stall_ms", ms(stall))
        .evidence(
            "workload_statements",
            workload.map(|w| w.statements).unwrap_or(0),
        ),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::rehearsal::TableWork;

    fn applied(locks: &[&str], new_index: bool, held: Duration) -> Applied {
        let mut a = Applied {
            held,
            ..Applied::default()
        };
        a.tables.insert(
            "attached_functions".into(),
            TableWork {
                table: "attached_functions".into(),
                rows_before: 2000,
                locks: locks.iter().map(|s| s.to_string()).collect(),
                new_indexes: if new_index { vec!["ix".into()] } else { vec![] },
                ..TableWork::default()
            },
        );
        a
    }

    fn ids(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.id.as_str()).collect()
    }

    #[test]
    fn blocking_index_build_and_long_lock_are_errors() {
        let t = Duration::from_secs(5);
        let f = evaluate(
            4,
            &applied(&["ShareLock"], true, Duration::from_millis(30)),
            None,
            None,
            t,
        );
        assert_eq!(ids(&f), ["locks.blocking-index-build", "locks.measured"]);
        let f = evaluate(
            4,
            &applied(&["AccessExclusiveLock"], false, Duration::from_secs(3)),
            None,
            None,
            t,
        );
        assert_eq!(ids(&f), ["locks.long-blocking-lock", "locks.measured"]);
        let f = evaluate(
            4,
            &applied(&["AccessExclusiveLock"], false, Duration::from_millis(3)),
            None,
            None,
            t,
        );
        assert_eq!(ids(&f), ["locks.measured"]);
    }

    #[test]
    fn waiting_past_the_lock_timeout_is_an_error() {
        let t = Duration::from_secs(1);
        let a = applied(&["AccessExclusiveLock"], false, Duration::from_millis(3));
        let gave_up = LockTimeoutProbe {
            gave_up: true,
            waited: Duration::from_millis(1010),
            ..LockTimeoutProbe::default()
        };
        assert_eq!(
            ids(&evaluate(3, &a, None, Some(&gave_up), t))[0],
            "locks.gives-up-within-lock-timeout"
        );
        let stuck = LockTimeoutProbe {
            cancelled_by_watchdog: true,
            waited: Duration::from_secs(6),
            ..LockTimeoutProbe::default()
        };
        let f = evaluate(3, &a, None, Some(&stuck), t);
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("locks.ignores-lock-timeout", Severity::Error)
        );
    }
}

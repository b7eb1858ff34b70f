//! `locks`: which locks the migration takes, how long the ones that block
//! the live apps are held (measured, and predicted at production size),
//! and what the apps go through while the migration waits behind a long
//! transaction.
//!
//! Measurements:
//! - the relation lock modes held after each statement (`pg_locks`), per
//!   existing table; outside a transaction, the modes sampled while each
//!   statement ran (a statement no sample saw holding a lock is
//!   `locks.not-observed`, skipped); which of them block an app follows
//!   from the live apps' own statements ([`Needs`]);
//! - the longest lock wait of the live apps' statements on the
//!   migration's backend while it applies (lock-wait evidence only, see
//!   [`crate::sessions::sampler`]: a statement slowed by a busy machine or
//!   by another app's row lock is not the migration's), and whether the
//!   workload failed;
//! - the long-transaction probe: an app transaction holds the tables, the
//!   migration runs the real retry loop of `rollsafe migrate`
//!   ([`LockPolicy`]) while the apps' workload runs, the transaction ends.
//!   A waiting ACCESS EXCLUSIVE request queues every later query of the
//!   table behind it, so the worst wait any app statement saw meanwhile is
//!   what production would see.
//!
//! Errors: an index built without CONCURRENTLY on a table with rows under
//! a blocking lock (not by a statement that rewrote the table: that is
//! `rewrite.table-rewritten`, indexes included); a blocking lock held (predicted at production size)
//! longer than the stall budget; any app statement waiting longer than the
//! stall budget behind the long transaction; a single lock wait far beyond
//! the policy's cap (the migration overrides `lock_timeout`); a migration
//! that does not complete once the transaction ends; the live apps failing
//! while it applies. A slow migration that waits on no lock is none of
//! these (its lock hold is judged on its own).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::lock_policy::LockPolicy;
use crate::pg::lock_modes::{self, Needs};
use crate::report::{Finding, Severity};
use crate::verify::evidence::predict::{self, Hold};
use crate::verify::evidence::{
    Applied, Context, LongTransactionProbe, MigrationEvidence, Probe, ProbeEnd, RunEvidence,
    WorkloadStats,
};

use super::phrases::ms;
use super::phrases::{blocking_locks, human, locks_phrase};
use super::Check;

pub const CHECK: &str = "locks";
pub const DESCRIPTION: &str =
    "locks taken and how long those that block the apps are held (measured and predicted), and the apps' worst wait while it retries behind a long transaction";

/// The default stall budget: the longest any app statement may wait
/// because of the migration. Catalog-only DDL holds its locks for
/// milliseconds; the lock policy's attempts wait at most its cap.
pub const STALL_BUDGET: Duration = Duration::from_secs(1);

pub const ENTRY: Check = Check {
    name: CHECK,
    description: DESCRIPTION,
    ran: |e| e.applied_on_seeded().is_some() || e.applied_by_framework().is_some(),
    evaluate,
    evaluate_run: Some(evaluate_run),
};

/// locks' judgement of one migration: whether the long-transaction probe
/// applies, the locks both applies took (with the workload running), and
/// the probe's outcome (nothing after a failure on an empty database
/// speaks for it).
pub fn evaluate(e: &MigrationEvidence, cx: &Context) -> Vec<Finding> {
    if let Some(by) = e.applied_by_framework() {
        return vec![not_measured_by_framework(e.version, by)];
    }
    let v = e.version;
    let mut out = Vec::new();
    if let Some(Probe::NotApplicable) = &e.probe {
        out.push(probe_not_applicable(v));
    }
    if let (Some(at_zero), Some(s)) = (&e.at_zero, e.applied_on_seeded()) {
        let holds = predict::holds(at_zero, &s.applied, &e.needs, cx.sizes);
        out.extend(measured(
            v,
            at_zero,
            &s.applied,
            s.workload.as_ref(),
            &e.needs,
            &holds,
            cx.stall_budget,
        ));
    }
    if let (false, Some(Probe::Ran(probe))) = (e.failed_on_empty(), &e.probe) {
        out.extend(match probe.as_ref() {
            Ok(p) => evaluate_probe(v, p, &cx.lock_policy, cx.stall_budget),
            Err(why) => vec![probe_could_not_run(v, why)],
        });
    }
    out
}

/// locks' judgement of the run: the migrations production sends in one
/// transaction ([`MigrationEvidence::shares_transaction`]: Alembic's
/// default, Drizzle) are each rehearsed in a transaction of their own, so
/// each one's measured holds end at its own commit. In production every
/// lock of the run is held until the last of them commits: a lock an
/// earlier one takes waits on all the work after it. Each earlier
/// migration's longest blocking hold is judged with the time every later
/// one of the run took (measured at the seeded size, predicted at
/// production's).
pub fn evaluate_run(
    _: &RunEvidence,
    evidence: &BTreeMap<i32, MigrationEvidence>,
    cx: &Context,
) -> Vec<Finding> {
    let list: Vec<&MigrationEvidence> = evidence.values().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < list.len() {
        let mut j = i;
        while list
            .get(j + 1)
            .is_some_and(|e| e.shares_transaction.is_some())
        {
            j += 1;
        }
        for k in i..j {
            out.extend(held_to_shared_commit(list[k], &list[k + 1..=j], cx));
        }
        i = j + 1;
    }
    out
}

/// What a later migration of a shared transaction adds to the holds
/// before it: its time, or why it was not measured.
enum Later {
    Took {
        measured: Duration,
        predicted: Duration,
        drivers: Vec<predict::Driver>,
    },
    NotMeasured(String),
}

fn later_time(e: &MigrationEvidence, cx: &Context) -> Later {
    if let Some(by) = e.applied_by_framework() {
        return Later::NotMeasured(format!(
            "applied at rows by {by}, whose time is the command's, not the transaction's"
        ));
    }
    match (&e.at_zero, e.applied_on_seeded()) {
        (Some(at_zero), Some(s)) => {
            let (measured, predicted, drivers) = predict::took(at_zero, &s.applied, cx.sizes);
            Later::Took {
                measured,
                predicted,
                drivers,
            }
        }
        _ if e.seeded.is_some() => Later::NotMeasured("failed at rows".into()),
        _ => Later::NotMeasured("not applied at rows".into()),
    }
}

/// `held-to-shared-commit`: `e`'s longest blocking hold, within the stall
/// budget in its own transaction, held past it until every migration of
/// `later` has run, because production sends them in one transaction.
/// Info when the whole stays within the budget; skipped when a later one
/// was not measured and what was measured stays within it.
fn held_to_shared_commit(
    e: &MigrationEvidence,
    later: &[&MigrationEvidence],
    cx: &Context,
) -> Option<Finding> {
    if e.applied_by_framework().is_some() {
        return None;
    }
    let (at_zero, s) = (e.at_zero.as_ref()?, e.applied_on_seeded()?);
    let holds = predict::holds(at_zero, &s.applied, &e.needs, cx.sizes);
    let h = holds.iter().max_by_key(|h| h.predicted)?;
    // Over the budget in its own transaction: long-blocking-lock says so
    // already (one hazard, one error).
    if h.predicted > cx.stall_budget {
        return None;
    }
    let v = e.version;
    let how = later
        .first()?
        .shares_transaction
        .clone()
        .unwrap_or_default();
    let mut measured = h.measured;
    let mut predicted = h.predicted;
    let mut drivers = h.drivers.clone();
    let mut took = Vec::new();
    let mut unmeasured = Vec::new();
    for l in later {
        let name = cx.labels.of(l.version);
        match later_time(l, cx) {
            Later::Took {
                measured: m,
                predicted: p,
                drivers: d,
            } => {
                measured += m;
                predicted += p;
                predict::merge_drivers(&mut drivers, d);
                took.push(format!("{name} (~{})", human(p)));
            }
            Later::NotMeasured(why) => unmeasured.push(format!("{name} ({why})")),
        }
    }
    let from_sizes = drivers.iter().any(|d| cx.sizes.rows.contains_key(&d.0));
    let combined = predict::Hold {
        measured,
        predicted,
        drivers,
        from_sizes,
        ..h.clone()
    };
    let lock = format!(
        "takes {} on {}, held ~{} in its own transaction",
        lock_modes::sql_name(&h.mode),
        h.table,
        human(h.predicted)
    );
    let pending = later
        .iter()
        .map(|l| cx.labels.of(l.version))
        .collect::<Vec<_>>()
        .join(", ");
    let base = |f: Finding| {
        f.at(s.applied.location(h.statement))
            .evidence("table", h.table.clone())
            .evidence("lock", lock_modes::sql_name(&h.mode))
            .evidence("own_hold_ms", ms(h.measured))
            .evidence("own_predicted_hold_ms", ms(h.predicted))
            .evidence("held_ms", ms(combined.measured))
            .evidence("predicted_hold_ms", ms(combined.predicted))
            .evidence("stall_budget_ms", ms(cx.stall_budget))
            .evidence("shared_with", pending.clone())
            .evidence("later_migrations", took.join(", "))
            .evidence("not_measured", unmeasured.join("; "))
    };
    let finding = if combined.predicted > cx.stall_budget {
        Finding::new(
            CHECK,
            "held-to-shared-commit",
            Severity::Error,
            Some(v),
            format!(
                "{}: {lock}; {how}, and {} {} pending with it, so production holds the lock until the last commits: ~{} {} (stall budget {}), blocking its {}",
                s.applied.where_(h.statement),
                took.iter().chain(&unmeasured).cloned().collect::<Vec<_>>().join(", "),
                if later.len() == 1 { "is" } else { "are" },
                human(combined.predicted),
                combined.size_phrase(),
                human(cx.stall_budget),
                e.needs.describe(&h.table, &h.mode),
            ),
        )
        .advice("let the locking migration commit before the slow work starts: deploy it on its own, have the tool commit each migration (Alembic: `transaction_per_migration=True` in env.py's `context.configure`), or move the slow work out of the migrations")
    } else if !unmeasured.is_empty() {
        Finding::new(
            CHECK,
            "shared-transaction-not-measured",
            Severity::Skipped,
            Some(v),
            format!(
                "{}: {lock}; {how}, and {pending} {} pending with it, so production holds the lock until the last commits; the time of {} was not measured: that hold is at least ~{}, not judged",
                s.applied.where_(h.statement),
                if later.len() == 1 { "is" } else { "are" },
                unmeasured.join(", "),
                human(combined.predicted),
            ),
        )
        .advice("rehearse the later migrations on their own (--since) to measure them, or have the tool commit each migration on its own")
    } else {
        Finding::new(
            CHECK,
            "shared-transaction",
            Severity::Info,
            Some(v),
            format!(
                "{}: {lock}; {how}, and {} {} pending with it, so production holds the lock until the last commits: ~{} {}, within the stall budget ({})",
                s.applied.where_(h.statement),
                took.join(", "),
                if later.len() == 1 { "is" } else { "are" },
                human(combined.predicted),
                combined.size_phrase(),
                human(cx.stall_budget),
            ),
        )
    };
    Some(base(finding))
}

/// Judges the measured apply (with the workload running).
pub fn measured(
    v: i32,
    at_zero: &Applied,
    at_n: &Applied,
    workload: Option<&WorkloadStats>,
    needs: &Needs,
    holds: &[Hold],
    stall_budget: Duration,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let stall = workload.map(|w| w.max_stall).unwrap_or_default();
    let lock_list: Vec<String> = at_n
        .tables
        .values()
        .filter(|w| !w.locks.is_empty())
        .map(|w| format!("{}: {}", w.table, w.locks.join("+")))
        .collect();

    out.extend(blocking_index_builds(v, at_zero, at_n, needs, stall));
    out.extend(long_blocking_lock(
        v,
        at_n,
        holds,
        needs,
        stall_budget,
        stall,
        &lock_list,
    ));
    out.extend(workload_failed(v, workload));
    out.extend(workload_re_prepared(v, workload));

    let holds_text: Vec<String> = holds
        .iter()
        .map(|h| {
            let at_size = if h.drivers.is_empty() {
                "whatever the table's size".to_string()
            } else {
                format!("{} ~{}", h.size_phrase(), human(h.predicted))
            };
            format!(
                "{} on {} held {} ({at_size})",
                lock_modes::sql_name(&h.mode),
                h.table,
                human(h.measured),
            )
        })
        .collect();
    if at_n.outside_transaction {
        return outside_transaction(v, at_zero, at_n, out, &holds_text, stall, workload);
    }
    let mut measured = Finding::new(
        CHECK,
        "measured",
        Severity::Info,
        Some(v),
        if lock_list.is_empty() {
            "takes no lock on existing tables".to_string()
        } else if holds_text.is_empty() {
            format!("locks {} (none blocks a live app)", lock_list.join("; "))
        } else {
            format!("locks {}; {}", lock_list.join("; "), holds_text.join("; "))
        },
    )
    .evidence("held_ms", ms(at_n.held))
    .evidence("workload_max_stall_ms", ms(stall))
    .evidence(
        "workload_statements",
        workload.map(|w| w.statements).unwrap_or(0),
    );
    if let Some(h) = holds.iter().max_by_key(|h| h.predicted) {
        measured = measured.evidence("predicted_hold_ms", ms(h.predicted));
    }
    if let Some(w) = workload.filter(|w| !w.left_out.is_empty()) {
        measured = measured.evidence("workload_left_out", left_out(w));
    }
    out.push(measured);
    out
}

/// `blocking-index-build`: an index built on a table with rows while the
/// statement holds a lock that blocks a live app.
fn blocking_index_builds(
    v: i32,
    at_zero: &Applied,
    at_n: &Applied,
    needs: &Needs,
    stall: Duration,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, st) in at_n.statements.iter().enumerate() {
        let blocking = blocking_locks(st, needs);
        if blocking.is_empty() {
            continue;
        }
        for (table, index) in &st.built_indexes {
            let Some(t) = at_n.tables.get(table).filter(|t| t.rows_before > 0) else {
                continue;
            };
            // A statement that rewrote the table rebuilt its indexes with
            // it: one hazard, rewrite.table-rewritten's.
            if st.rewrote.contains(table) {
                continue;
            }
            // An index on a partitioned table is built on each partition
            // under the parent's lock: one finding, on the parent, naming
            // them.
            let parent_built = |p: &String| st.built_indexes.iter().any(|(x, _)| x == p);
            if t.partition_of.as_ref().is_some_and(parent_built) {
                continue;
            }
            let partitions: Vec<&str> = st
                .built_indexes
                .iter()
                .filter(|(x, _)| {
                    at_n.tables
                        .get(x)
                        .is_some_and(|p| p.partition_of.as_ref() == Some(table))
                })
                .map(|(x, _)| x.as_str())
                .collect();
            let on_partitions = if partitions.is_empty() {
                String::new()
            } else {
                format!(", and on each of its partitions: {}", partitions.join(", "))
            };
            let w = st.work.get(table).copied().unwrap_or_default();
            let observed = super::phrases::while_running(at_zero, at_n, i);
            let mut f = Finding::new(
                    CHECK,
                    "blocking-index-build",
                    Severity::Error,
                    Some(v),
                    format!(
                        "{}: builds index {index} on {table} ({} rows{on_partitions}) while holding {}: the app waits for the whole build, which grows with the table{}",
                        at_n.where_(i),
                        t.rows_before,
                        locks_phrase(&blocking),
                        observed.as_ref().map(|o| format!(" ({o})")).unwrap_or_default()
                    ),
                );
            if let Some(o) = observed {
                f = f.evidence("locks_while_running", o);
            }
            out.push(
                f
                .at(at_n.location(i))
                .evidence("table", table.clone())
                .evidence("partitions", partitions.join(", "))
                .evidence("index", index.clone())
                .evidence("rows", t.rows_before)
                .evidence("tuples_read", w.tuples_read)
                .evidence("statement_line", st.line)
                .evidence("statement_ms_at_n_rows", ms(st.duration))
                .evidence("workload_max_stall_ms", ms(stall))
                .advice("build the index with CREATE INDEX CONCURRENTLY as its own step outside a transaction (it takes SHARE UPDATE EXCLUSIVE, which blocks neither reads nor writes), and check it is valid afterwards"),
            );
        }
    }
    out
}

/// `long-blocking-lock`: the longest predicted hold of a lock that blocks
/// a live app, when it exceeds the stall budget.
fn long_blocking_lock(
    v: i32,
    at_n: &Applied,
    holds: &[Hold],
    needs: &Needs,
    stall_budget: Duration,
    stall: Duration,
    lock_list: &[String],
) -> Option<Finding> {
    let h = holds.iter().max_by_key(|h| h.predicted)?;
    (h.predicted > stall_budget).then(|| {
        Finding::new(
            CHECK,
            "long-blocking-lock",
            Severity::Error,
            Some(v),
            format!(
                "{}: holds {} on {} for {} (stall budget {}), blocking its {}; {} it would hold it ~{}; the live workload stalled {}",
                at_n.where_(h.statement),
                lock_modes::sql_name(&h.mode),
                h.table,
                human(h.measured),
                human(stall_budget),
                needs.describe(&h.table, &h.mode),
                h.size_phrase(),
                human(h.predicted),
                human(stall)
            ),
        )
        .at(at_n.location(h.statement))
        .evidence("held_ms", ms(h.measured))
        .evidence("predicted_hold_ms", ms(h.predicted))
        .evidence("predicted_rows", h.drivers.iter().map(|d| d.2).fold(0.0, f64::max))
        .evidence("stall_budget_ms", ms(stall_budget))
        .evidence("workload_max_stall_ms", ms(stall))
        .evidence("locks", lock_list.join("; "))
        .advice("do only catalog-only changes under ACCESS EXCLUSIVE / SHARE locks; move slow work (sleeps, backfills, scans) out of the locking transaction")
    })
}

/// `workload-failed`: the live apps' statements failed while it applied.
fn workload_failed(v: i32, workload: Option<&WorkloadStats>) -> Option<Finding> {
    let w = workload.filter(|w| w.error_count > 0)?;
    let first = w
        .errors
        .first()
        .map(|(s, m)| format!("{s}: {m}"))
        .unwrap_or_default();
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
    .advice("keep every column and table a live app version uses until no running version uses it; change shapes in expand/contract steps")
    .into()
}

/// `workload-re-prepared`: statements the live apps prepared before the
/// migration return other columns after it (`SELECT *` after `ADD
/// COLUMN`): the server refuses their old plans once. Drivers that prepare
/// again and retry (ActiveRecord outside a transaction, pgx) carry on; a
/// call inside the app's own transaction fails (ActiveRecord's
/// `PreparedStatementCacheExpired`). A warning: the workload prepared them
/// again and measured them.
fn workload_re_prepared(v: i32, workload: Option<&WorkloadStats>) -> Option<Finding> {
    let w = workload.filter(|w| !w.re_prepared.is_empty())?;
    use crate::verify::evidence::STALE_PLAN;
    Finding::new(
        CHECK,
        "workload-re-prepared",
        Severity::Warn,
        Some(v),
        format!(
            "the live apps' {} {}, prepared before it, return{} other columns after it: the server refuses the old plan once (\"{STALE_PLAN}\"); a driver that prepares it again carries on, a call inside the app's own transaction fails",
            if w.re_prepared.len() == 1 { "statement" } else { "statements" },
            excerpt(&w.re_prepared),
            if w.re_prepared.len() == 1 { "s" } else { "" }
        ),
    )
    .evidence("statements", w.re_prepared.join(", "))
    .advice("have the apps name their columns instead of `SELECT *`, or make sure their driver retries a statement whose cached plan expired (ActiveRecord does outside a transaction)")
    .into()
}

/// The first few of `names`, with how many more.
fn excerpt(names: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut shown = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        shown.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    shown
}

/// The statements the workload left out, as evidence: they failed on the
/// schema before the migration, so their failures are not its doing.
fn left_out(w: &WorkloadStats) -> String {
    w.left_out
        .iter()
        .map(|(statement, error)| format!("{statement}: fails before it ({error})"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `locks.measured` of a file that ran outside a transaction: each
/// statement's locks as sampled while it ran (at N and 0 rows), and a
/// `locks.not-observed` (skipped) for each statement no sample saw hold a
/// lock: that it took none is not measured.
fn outside_transaction(
    v: i32,
    at_zero: &Applied,
    at_n: &Applied,
    mut out: Vec<Finding>,
    holds_text: &[String],
    stall: Duration,
    workload: Option<&WorkloadStats>,
) -> Vec<Finding> {
    let mut seen = Vec::new();
    for (i, st) in at_n.statements.iter().enumerate() {
        if let Some(why) = st.locks_unobserved() {
            out.push(
                Finding::new(
                    CHECK,
                    "not-observed",
                    Severity::Skipped,
                    Some(v),
                    format!("{}: {why}; its locks were not measured", at_n.where_(i)),
                )
                .at(at_n.location(i))
                .evidence("samples", st.observed.as_ref().map_or(0, |o| o.samples))
                .evidence("statement_ms_at_n_rows", ms(st.duration))
                .advice("a statement this fast holds its locks for about as long as it runs; run verify with more rows (--rows) to see them"),
            );
        } else if let Some(o) = super::phrases::while_running(at_zero, at_n, i) {
            seen.push(format!("{}: {o}", at_n.where_(i)));
        }
    }
    if !seen.is_empty() {
        let mut measured = Finding::new(
            CHECK,
            "measured",
            Severity::Info,
            Some(v),
            if holds_text.is_empty() {
                format!("{} (none blocks a live app)", seen.join("; "))
            } else {
                format!("{}; {}", seen.join("; "), holds_text.join("; "))
            },
        )
        .evidence("held_ms", ms(at_n.held))
        .evidence("workload_max_stall_ms", ms(stall))
        .evidence(
            "workload_statements",
            workload.map(|w| w.statements).unwrap_or(0),
        );
        if let Some(w) = workload {
            measured = measured.evidence("app_lock_waits", w.lock_waits);
            if !w.left_out.is_empty() {
                measured = measured.evidence("workload_left_out", left_out(w));
            }
        }
        out.push(measured);
    }
    out
}

/// The probe could not run at all (a connection or a thread failed).
pub fn probe_could_not_run(v: i32, why: &str) -> Finding {
    Finding::new(
        CHECK,
        "long-transaction-skipped",
        Severity::Skipped,
        Some(v),
        format!("the long-transaction probe could not run ({why}); the apps' waits behind a long transaction were not measured"),
    )
    .advice("run verify again; if it persists, report it with this line")
}

/// Judges the long-transaction probe.
pub fn evaluate_probe(
    v: i32,
    p: &LongTransactionProbe,
    policy: &LockPolicy,
    stall_budget: Duration,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let ev = |f: Finding| {
        f.evidence("attempts", p.attempts)
            .evidence("first_lock_timeout_ms", ms(p.first_timeout))
            .evidence("max_lock_timeout_ms", ms(policy.max_timeout))
            .evidence("long_transaction_ms", ms(p.hold))
            .evidence("longest_lock_wait_ms", ms(p.longest_lock_wait))
            .evidence("worst_app_wait_ms", ms(p.app.max_stall))
            .evidence("worst_app_statement", p.app.max_stall_statement.clone())
            .evidence("app_statements", p.app.statements)
            .evidence("stall_budget_ms", ms(stall_budget))
            .evidence("long_transaction_holds", p.held_tables.join(", "))
    };
    match &p.end {
        ProbeEnd::Failed(e) => {
            out.push(ev(Finding::new(
                CHECK,
                "long-transaction-skipped",
                Severity::Skipped,
                Some(v),
                format!("the long-transaction probe could not apply it ({e}); its lock waits were not measured"),
            ))
            .advice("see the apply findings of this migration"));
            return out;
        }
        ProbeEnd::IgnoredLockTimeout => out.push(
            ev(Finding::new(
                CHECK,
                "ignores-lock-timeout",
                Severity::Error,
                Some(v),
                format!(
                    "behind a long transaction it waited {} for one lock, past the policy's {} lock_timeout (rollsafe cancelled it); the apps' statements queued behind it for up to {}",
                    human(p.longest_lock_wait),
                    human(policy.max_timeout),
                    human(p.app.max_stall)
                ),
            ))
            .advice("do not change lock_timeout inside a migration; rollsafe migrate sets it per attempt and retries"),
        ),
        ProbeEnd::GaveUp | ProbeEnd::TimedOut => out.push(
            ev(Finding::new(
                CHECK,
                "does-not-complete",
                Severity::Error,
                Some(v),
                format!(
                    "it did not complete after the long transaction ended ({} attempts)",
                    p.attempts
                ),
            ))
            .advice("a migration must get its locks once app transactions end; look for a lock it waits on that no app releases"),
        ),
        ProbeEnd::NoConflict | ProbeEnd::CompletedAfterRelease { .. } => {}
    }
    if p.app.max_stall > stall_budget {
        out.push(
            ev(Finding::new(
                CHECK,
                "app-stalled-behind-long-transaction",
                Severity::Error,
                Some(v),
                format!(
                    "behind a long transaction, while it retried its locks ({} attempts), an app statement ({}) waited {} — over the {} stall budget",
                    p.attempts,
                    p.app.max_stall_statement,
                    human(p.app.max_stall),
                    human(stall_budget)
                ),
            ))
            .advice("every lock attempt queues the app behind it: keep the lock timeout's cap (--lock-timeout) below the stall budget, and do not take a lock the app needs while waiting for another"),
        );
    }
    if out.is_empty() {
        out.push(ev(match &p.end {
            ProbeEnd::NoConflict => Finding::new(
                CHECK,
                "no-conflict-with-long-transaction",
                Severity::Info,
                Some(v),
                format!(
                    "its locks do not conflict with a long app transaction: it applied on the first attempt; the apps waited at most {}",
                    human(p.app.max_stall)
                ),
            ),
            ProbeEnd::CompletedAfterRelease { after } => Finding::new(
                CHECK,
                "waits-within-stall-budget",
                Severity::Info,
                Some(v),
                format!(
                    "behind a {} long transaction it made {} attempts, the first waiting until its lock_timeout ({}{}) ended it, and completed {} after the transaction ended; the apps waited at most {} (budget {})",
                    human(p.hold),
                    p.attempts,
                    human(p.first_timeout),
                    if p.first_timeout >= policy.max_timeout {
                        ", the policy's cap, where the apps queue longest"
                    } else {
                        ", the policy's first"
                    },
                    human(*after),
                    human(p.app.max_stall),
                    human(stall_budget)
                ),
            )
            .evidence("completed_after_release_ms", ms(*after)),
            _ => unreachable!("every other end produced a finding above"),
        }));
    }
    out
}

/// The long-transaction probe replays a migration inside one transaction;
/// a `-- rollsafe:no-transaction` file cannot run in one, and `migrate`
/// runs each of its statements under the lock policy instead. Said, never
/// passed as ok.
pub fn probe_not_applicable(v: i32) -> Finding {
    Finding::new(
        CHECK,
        "probe-skipped",
        Severity::Skipped,
        Some(v),
        "runs outside a transaction: the long-transaction probe (one transaction per attempt) does not apply; migrate runs each statement under the lock policy (waiting without queueing where it can see the conflicting holder)",
    )
    .advice("the seeded apply under the live apps' workload measured its stalls")
}

/// A data migration its framework applied at rows (`by`): nothing of
/// this check could be measured there. Said, never passed as ok.
fn not_measured_by_framework(v: i32, by: &str) -> Finding {
    Finding::new(
        CHECK,
        "applied-by-framework",
        Severity::Skipped,
        Some(v),
        format!("a data migration, applied at rows by {by}: the locks it took, how long it held them and the live apps' waits were not measured, and the long-transaction probe did not run: its statements ran on the framework's own connections, which rollsafe neither sees one by one nor runs under its lock policy"),
    )
    .advice("review what it does to the rows by hand; a data migration that updates a large table belongs in batches outside the deploy's transaction")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::evidence::{StatementRun, TableWork};

    fn applied(mode: &str, index: bool, held: Duration) -> Applied {
        let table = TableWork {
            table: "jobs".into(),
            rows_before: 2000,
            locks: vec![mode.into()],
            ..TableWork::default()
        };
        Applied {
            held,
            duration: held,
            tables: [("jobs".to_string(), table)].into(),
            statements: vec![StatementRun {
                duration: held,
                locks_after: [("jobs".to_string(), vec![mode.to_string()])].into(),
                built_indexes: if index {
                    vec![("jobs".into(), "ix".into())]
                } else {
                    vec![]
                },
                ..StatementRun::default()
            }],
            ..Applied::default()
        }
    }

    fn ids(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.id.as_str()).collect()
    }

    fn holds(a: &Applied) -> Vec<Hold> {
        crate::verify::evidence::predict::holds(a, a, &Needs::unknown(), &Default::default())
    }

    #[test]
    fn blocking_index_build_and_long_lock_are_errors() {
        let a = applied("ShareLock", true, Duration::from_millis(30));
        let f = measured(4, &a, &a, None, &Needs::unknown(), &holds(&a), STALL_BUDGET);
        assert_eq!(ids(&f), ["locks.blocking-index-build", "locks.measured"]);
        let a = applied("AccessExclusiveLock", false, Duration::from_secs(3));
        let f = measured(4, &a, &a, None, &Needs::unknown(), &holds(&a), STALL_BUDGET);
        assert_eq!(ids(&f), ["locks.long-blocking-lock", "locks.measured"]);
        let a = applied("AccessExclusiveLock", false, Duration::from_millis(3));
        let f = measured(4, &a, &a, None, &Needs::unknown(), &holds(&a), STALL_BUDGET);
        assert_eq!(ids(&f), ["locks.measured"]);
    }

    /// Migrations production sends in one transaction: the first one's
    /// brief ACCESS EXCLUSIVE is held through the slow one after it.
    #[test]
    fn a_lock_is_judged_held_to_the_commit_of_the_transaction_it_shares() {
        use crate::verify::evidence::{predict::Sizes, SeededApply};
        let evidence = |v: i32, a: Applied, shares: bool| MigrationEvidence {
            version: v,
            file: format!("m{v}.sql"),
            needs: Needs::unknown(),
            at_zero: Some(a.clone()),
            seeded: Some(SeededApply {
                applied: a,
                ..SeededApply::default()
            }),
            shares_transaction: shares
                .then(|| "the tool sends every pending file in one transaction".into()),
            ..MigrationEvidence::default()
        };
        let quick = applied("AccessExclusiveLock", false, Duration::from_millis(4));
        let slow = Applied {
            held: Duration::from_millis(1500),
            duration: Duration::from_millis(1500),
            statements: vec![StatementRun {
                duration: Duration::from_millis(1500),
                ..StatementRun::default()
            }],
            ..Applied::default()
        };
        let sizes = Sizes::default();
        let cx = Context {
            stall_budget: STALL_BUDGET,
            ..Context::bare(&sizes)
        };
        let run = |list: Vec<MigrationEvidence>| {
            let map: BTreeMap<i32, MigrationEvidence> =
                list.into_iter().map(|e| (e.version, e)).collect();
            evaluate_run(&RunEvidence::default(), &map, &cx)
        };
        let f = run(vec![
            evidence(4, quick.clone(), false),
            evidence(5, slow.clone(), true),
        ]);
        assert_eq!(ids(&f), ["locks.held-to-shared-commit"]);
        assert_eq!(f[0].migration, Some(4));
        assert!(
            f[0].message.contains("ACCESS EXCLUSIVE on jobs"),
            "{}",
            f[0].message
        );
        assert!(f[0].message.contains("and V5 (~"), "{}", f[0].message);
        assert_eq!(
            f[0].evidence["predicted_hold_ms"]
                .as_f64()
                .map(|x| x >= 1500.0),
            Some(true)
        );
        // Each in its own transaction: nothing to judge beyond each one's.
        assert!(run(vec![
            evidence(4, quick.clone(), false),
            evidence(5, slow.clone(), false)
        ])
        .is_empty());
        // The slow one first: its own transaction holds nothing blocking
        // for long; the quick one after it is the last to commit.
        assert!(run(vec![
            evidence(4, slow.clone(), false),
            evidence(5, quick.clone(), true)
        ])
        .is_empty());
        // Quick after quick: said, within the budget.
        let f = run(vec![
            evidence(4, quick.clone(), false),
            evidence(5, quick.clone(), true),
        ]);
        assert_eq!(ids(&f), ["locks.shared-transaction"]);
        // A later one that failed at rows: not measured, so not judged.
        let mut failed = evidence(5, quick.clone(), true);
        failed.seeded.as_mut().unwrap().applied.error = Some("boom".into());
        let f = run(vec![evidence(4, quick.clone(), false), failed]);
        assert_eq!(ids(&f), ["locks.shared-transaction-not-measured"]);
        // Over the budget on its own: long-blocking-lock's, not this.
        let long = applied("AccessExclusiveLock", false, Duration::from_secs(2));
        assert!(run(vec![evidence(4, long, false), evidence(5, slow, true)]).is_empty());
    }

    fn probe(end: ProbeEnd, worst: Duration) -> LongTransactionProbe {
        LongTransactionProbe {
            held_tables: vec!["jobs".into()],
            hold: Duration::from_millis(520),
            first_timeout: Duration::from_millis(500),
            end,
            attempts: 2,
            longest_lock_wait: Duration::from_millis(500),
            app: WorkloadStats {
                max_stall: worst,
                max_stall_statement: "old.get_by_id (read)".into(),
                ..WorkloadStats::default()
            },
        }
    }

    #[test]
    fn the_apps_worst_wait_is_judged_against_the_budget() {
        let p = LockPolicy::default();
        let ok = probe(
            ProbeEnd::CompletedAfterRelease {
                after: Duration::from_millis(20),
            },
            Duration::from_millis(510),
        );
        let f = evaluate_probe(3, &ok, &p, STALL_BUDGET);
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("locks.waits-within-stall-budget", Severity::Info)
        );
        let frozen = probe(
            ProbeEnd::CompletedAfterRelease {
                after: Duration::from_millis(20),
            },
            Duration::from_secs(5),
        );
        let f = evaluate_probe(3, &frozen, &p, STALL_BUDGET);
        assert_eq!(ids(&f), ["locks.app-stalled-behind-long-transaction"]);
        let f = evaluate_probe(
            3,
            &probe(ProbeEnd::IgnoredLockTimeout, Duration::from_secs(3)),
            &p,
            STALL_BUDGET,
        );
        assert_eq!(
            ids(&f),
            [
                "locks.ignores-lock-timeout",
                "locks.app-stalled-behind-long-transaction"
            ]
        );
        let f = evaluate_probe(
            3,
            &probe(ProbeEnd::Failed("boom".into()), Duration::ZERO),
            &p,
            STALL_BUDGET,
        );
        assert_eq!(f[0].severity, Severity::Skipped);
    }
}

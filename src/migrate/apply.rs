//! The one way a migration file is applied: `migrate` on a real database,
//! and every apply of a rehearsal (measured on an empty and a seeded
//! database, the forced failure, kill-and-rerun, the `--since` base, the
//! migrator run twice), so the verifier measures the code path production
//! runs.
//!
//! A file runs statement by statement on the caller's connection, with
//! the scripts its tool runs around it on that connection (Flyway's
//! `beforeEachMigrate` and `afterEachMigrate`: [`migration_steps`], each
//! of their statements naming its own file and line):
//! - [`in_transaction`]: one transaction around all of them, ended by
//!   COMMIT, ROLLBACK, or a failure raised at the end (the forced failure
//!   that shows what a crash before the commit would leave). Under a
//!   [`LockPolicy`] each attempt is a whole transaction with its own
//!   `lock_timeout` (set again after the callbacks run before the file:
//!   one that sets its own, as Flyway's `beforeEachMigrate` often does,
//!   gives way to the policy for the file's statements); a lock timeout
//!   rolls it back and the next attempt starts over;
//! - [`outside_transaction`]: a file its tool does not wrap in a
//!   transaction ([`crate::catalog::Execution`]), each statement committing
//!   on its own (re-runnable, see [`super::no_transaction`]), the invalid
//!   leftover of a concurrent index build dropped before each attempt;
//!   under a policy, each statement's attempts are stepped on their own.
//!   The file's own `BEGIN` … `COMMIT` are run as written ([`Block`]): the
//!   statements between them commit together, and a failure there rolls
//!   the file's transaction back, as the session of its tool would.
//!
//! A [`StepObserver`] sees each statement start and end on the same
//! connection, and, inside the transaction, its start and its end before
//! the commit: `migrate` gates and logs attempts and writes the history
//! row there (one transaction with the migration); the rehearsal reads
//! locks, counters and files after each statement and the migration's
//! whole work before the commit.
//!
//! Not here: the advisory lock and which migrations are pending
//! (`migrate`), batched updates (`migrate::backfill`).

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use postgres::Client;

use crate::catalog::{Migration, Script};
use crate::lock_policy::{is_lock_timeout, GaveUp, LockPolicy};
use crate::sql::{self, Statement};

/// One statement of a migration file.
#[derive(Debug, Clone)]
pub struct Step {
    pub statement: Statement,
    /// For `CREATE INDEX CONCURRENTLY IF NOT EXISTS <name>`: the index name
    /// as written, whose INVALID leftover is dropped before each attempt.
    pub concurrent_index: Option<String>,
    /// Where it stands towards the file's own transaction blocks.
    pub block: Block,
    /// The callback script it is a statement of (Flyway's
    /// `beforeEachMigrate__timeouts.sql`, relative to the migrations'
    /// folder), run on the migration's connection around its statements;
    /// None for a statement of the migration's own file. Its line is its
    /// script's.
    pub script: Option<String>,
}

impl Step {
    /// `beforeEachMigrate__timeouts.sql line 2` for a callback's
    /// statement, `line 4` for the migration's own, for messages.
    pub fn line_phrase(&self) -> String {
        match &self.script {
            Some(file) => format!("{file} line {}", self.statement.line),
            None => format!("line {}", self.statement.line),
        }
    }
}

/// Where a statement of a file run outside rollsafe's transaction stands
/// towards the file's own `BEGIN` … `COMMIT`: an observer must not query
/// the migration's connection inside such a block (a query takes the
/// snapshot a `SET TRANSACTION` must come before, and fails once the block
/// is aborted), and a lock timeout there cannot be retried alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Block {
    /// Runs on its own (autocommit).
    #[default]
    Outside,
    /// The file's `BEGIN`.
    Opens,
    /// Between the file's `BEGIN` and the statement that ends it.
    Inside,
    /// The file's `COMMIT` (or `ROLLBACK`) that ends its block.
    Closes,
}

/// Marks each step's place in the file's own transaction blocks.
pub fn mark_blocks(steps: &mut [Step]) {
    use crate::sql::{transaction_control, TransactionControl};
    let mut open = false;
    for step in steps {
        step.block = match (transaction_control(&step.statement), open) {
            (Some(TransactionControl::Begin), false) => {
                open = true;
                Block::Opens
            }
            (Some(TransactionControl::End), true) => {
                open = false;
                Block::Closes
            }
            (_, true) => Block::Inside,
            (_, false) => Block::Outside,
        };
    }
}

/// The statements of a transactional file's `sql`, in order (the whole
/// file as one statement where the grammar cannot read its boundaries
/// exactly: the server then splits it, as a single query).
pub fn transaction_steps(sql: &str) -> Vec<Step> {
    sql::split(sql)
        .statements
        .into_iter()
        .map(|statement| Step {
            statement,
            concurrent_index: None,
            block: Block::Outside,
            script: None,
        })
        .collect()
}

/// Every statement migration `m`'s apply runs on its connection, in order,
/// as its tool runs them: the scripts its tool runs before the file
/// ([`Migration::before_each`]: Flyway's `beforeEachMigrate`), the file's
/// own statements, the scripts after it; inside its transaction when the
/// file runs in one ([`transaction_steps`]), else one statement at a
/// time like the file's own ([`super::no_transaction::steps`]). The one
/// list `migrate` and every rehearsal apply: a step's index is the same
/// in each, and in the measured apply's statements.
pub fn migration_steps(m: &Migration) -> Vec<Step> {
    let own = match m.runs_outside_transaction() {
        true => super::no_transaction::steps(&m.sql),
        false => transaction_steps(&m.sql),
    };
    around(m, own)
}

/// `own` (the steps of `m`'s file, as [`migration_steps`] or `migrate`'s
/// judged plan has them) with the scripts its tool runs around it.
pub fn around(m: &Migration, own: Vec<Step>) -> Vec<Step> {
    if m.before_each.is_empty() && m.after_each.is_empty() {
        return own;
    }
    let split = |sql: &str| match m.runs_outside_transaction() {
        true => super::no_transaction::steps(sql),
        false => transaction_steps(sql),
    };
    let of_script = |script: &Script| -> Vec<Step> {
        split(&script.sql)
            .into_iter()
            .map(|step| Step {
                script: Some(script.file.clone()),
                ..step
            })
            .collect()
    };
    let mut steps: Vec<Step> = m
        .before_each
        .iter()
        .flat_map(of_script)
        .chain(own)
        .chain(m.after_each.iter().flat_map(of_script))
        .collect();
    if m.runs_outside_transaction() {
        // A script's own BEGIN … COMMIT stands where it is in the whole
        // run.
        mark_blocks(&mut steps);
    }
    steps
}

/// How a transaction ends once its statements ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Commit,
    Rollback,
    /// A failure raised after the last statement, then ROLLBACK: what a
    /// crash just before the commit leaves behind.
    Fail,
}

/// Sees each statement of an apply run. Every method has a default that
/// does nothing.
pub trait StepObserver {
    /// Inside the transaction, before its first statement (each attempt
    /// under a policy).
    fn begun(&mut self, _client: &mut Client) -> Result<(), postgres::Error> {
        Ok(())
    }
    /// Before statement `index` (its first attempt), on the connection
    /// that runs it.
    fn before(&mut self, _client: &mut Client, _index: usize, _step: &Step) {}
    /// Before each attempt under a lock policy (`n` from 1).
    fn attempt(&mut self, _index: usize, _n: u32, _timeout: Duration) {}
    /// Whether statement `index` waits without queueing (the policy's
    /// `no_queue`, [`LockPolicy::run_gated`]): asked once, before its first
    /// attempt (for a transaction: once, with its first statement, for the
    /// whole transaction). When it does, [`StepObserver::holder`] is asked
    /// before each attempt. By default a statement requests its locks at
    /// once, stepped.
    fn gated(&mut self, _index: usize, _step: &Step) -> bool {
        false
    }
    /// The session holding a lock statement `index` would queue behind,
    /// described for a give-up message; None while nothing does.
    fn holder(&mut self, _index: usize) -> Option<String> {
        None
    }
    /// After statement `index` ended (`ok`: it succeeded), with how long
    /// its last attempt ran; on the same connection.
    fn after(
        &mut self,
        _client: &mut Client,
        _index: usize,
        _step: &Step,
        _ok: bool,
        _took: Duration,
    ) {
    }
    /// Inside the transaction, after its last statement and before it
    /// ends: the history row, the measurements that need the locks still
    /// held. An error rolls the transaction back.
    fn finishing(&mut self, _client: &mut Client) -> Result<(), postgres::Error> {
        Ok(())
    }
}

/// The observer that watches nothing.
pub struct Unobserved;

impl StepObserver for Unobserved {}

/// Why an apply stopped.
#[derive(Debug)]
pub enum StepError {
    /// Statement `index` failed (`index` = the number of statements: the
    /// transaction's start or end, or the observer's work there).
    Failed {
        index: usize,
        error: postgres::Error,
    },
    /// Statement `index` timed out on its locks until the policy's window
    /// closed.
    GaveUp {
        index: usize,
        gave_up: GaveUp<postgres::Error>,
    },
}

impl StepError {
    pub fn index(&self) -> usize {
        match self {
            StepError::Failed { index, .. } | StepError::GaveUp { index, .. } => *index,
        }
    }

    /// The server's error (the last attempt's, for a lock timeout).
    pub fn error(&self) -> Option<&postgres::Error> {
        match self {
            StepError::Failed { error, .. } => Some(error),
            StepError::GaveUp { gave_up, .. } => gave_up.last.as_ref(),
        }
    }

    /// The error on one line, for messages.
    pub fn message(&self) -> String {
        match (self, self.error()) {
            (_, Some(e)) => crate::errors::one_line(e),
            (StepError::GaveUp { gave_up, .. }, None) => format!(
                "gave up on its locks after {} attempts",
                gave_up.attempts.count
            ),
            (StepError::Failed { .. }, None) => "failed".into(),
        }
    }
}

/// What an apply went through: attempts in all, and how long gated
/// attempts waited for a conflicting holder to finish.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Applied {
    pub attempts: u32,
    pub waited: Duration,
}

/// Runs `steps` in one transaction on `client`, ended as `ending` says,
/// stopping at the first statement that fails (the transaction rolled
/// back). Under `lock`, each attempt is a transaction of its own with
/// `lock_timeout` stepped by the policy, retried on a lock timeout
/// (waiting without queueing where the observer gates it); without, the
/// session's settings stand.
pub fn in_transaction(
    client: &mut Client,
    steps: &[Step],
    lock: Option<&LockPolicy>,
    ending: Ending,
    observer: &mut dyn StepObserver,
) -> Result<Applied, StepError> {
    let end = steps.len();
    let failed_at = Cell::new(end);
    let observer = RefCell::new(observer);
    let attempt = |client: &mut Client, timeout: Option<Duration>| {
        failed_at.set(end);
        let r = run_transaction(client, steps, timeout, ending, &observer, &failed_at);
        if r.is_err() {
            // Ends an aborted transaction (a no-op warning when the
            // failure came from COMMIT itself).
            let _ = client.batch_execute("ROLLBACK");
        }
        r
    };
    match lock {
        None => attempt(client, None)
            .map(|_| Applied {
                attempts: 1,
                waited: Duration::ZERO,
            })
            .map_err(|error| StepError::Failed {
                index: failed_at.get(),
                error,
            }),
        Some(policy) => {
            let gated = match steps.first() {
                Some(first) => observer.borrow_mut().gated(0, first),
                None => false,
            };
            let r = policy.run_gated(
                gated.then_some(|| observer.borrow_mut().holder(0)),
                |n, timeout| {
                    observer.borrow_mut().attempt(0, n, timeout);
                    attempt(client, Some(timeout))
                },
                is_lock_timeout,
            );
            match r {
                Ok(((), a)) => Ok(Applied {
                    attempts: a.count,
                    waited: a.waited,
                }),
                Err(Ok(error)) => Err(StepError::Failed {
                    index: failed_at.get(),
                    error,
                }),
                Err(Err(gave_up)) => Err(StepError::GaveUp {
                    index: failed_at.get(),
                    gave_up,
                }),
            }
        }
    }
}

/// One attempt of [`in_transaction`]: BEGIN, the statements, the
/// observer's finishing, the ending. `failed_at` is set to the statement
/// that failed.
fn run_transaction(
    client: &mut Client,
    steps: &[Step],
    timeout: Option<Duration>,
    ending: Ending,
    observer: &RefCell<&mut dyn StepObserver>,
    failed_at: &Cell<usize>,
) -> Result<(), postgres::Error> {
    client.batch_execute("BEGIN")?;
    if let Some(t) = timeout {
        client.batch_execute(&format!(
            "SET LOCAL lock_timeout = '{}ms'",
            t.as_millis().max(1)
        ))?;
    }
    observer.borrow_mut().begun(client)?;
    for (index, step) in steps.iter().enumerate() {
        let follows_callbacks =
            index > 0 && step.script.is_none() && steps[index - 1].script.is_some();
        if let Some(t) = timeout.filter(|_| follows_callbacks) {
            // The policy bounds the file's lock waits: a callback run
            // before it (Flyway's usual `SET LOCAL lock_timeout`) gives
            // way to it here.
            client.batch_execute(&format!(
                "SET LOCAL lock_timeout = '{}ms'",
                t.as_millis().max(1)
            ))?;
        }
        observer.borrow_mut().before(client, index, step);
        let started = Instant::now();
        let r = client.batch_execute(&step.statement.text);
        let took = started.elapsed();
        observer
            .borrow_mut()
            .after(client, index, step, r.is_ok(), took);
        if let Err(e) = r {
            failed_at.set(index);
            return Err(e);
        }
    }
    observer.borrow_mut().finishing(client)?;
    match ending {
        Ending::Commit => client.batch_execute("COMMIT"),
        Ending::Rollback => client.batch_execute("ROLLBACK"),
        Ending::Fail => {
            let raised = client.batch_execute(
                "DO $rollsafe$ BEGIN RAISE EXCEPTION 'rollsafe: injected failure'; END $rollsafe$",
            );
            let _ = client.batch_execute("ROLLBACK");
            raised
        }
    }
}

/// Runs `steps` in order on `client`, each statement committing on its own,
/// stopping at the first that fails. Under `lock`, each statement's
/// attempts set `lock_timeout` as the policy steps it and retry lock
/// timeouts (waiting without queueing where the observer gates them);
/// without, the session's settings stand.
pub fn outside_transaction(
    client: &mut Client,
    steps: &[Step],
    lock: Option<&LockPolicy>,
    observer: &mut dyn StepObserver,
) -> Result<Applied, StepError> {
    let (mut attempts_total, mut waited) = (0, Duration::ZERO);
    for (index, step) in steps.iter().enumerate() {
        observer.before(client, index, step);
        let mut took = Duration::ZERO;
        let mut run_once = |client: &mut Client| -> Result<(), postgres::Error> {
            if let Some(name) = &step.concurrent_index {
                drop_invalid_index(client, name)?;
            }
            let started = Instant::now();
            let r = client.batch_execute(&step.statement.text);
            took = started.elapsed();
            r
        };
        // Inside the file's own transaction a retried statement would run
        // in an aborted block: it runs once, under the session's settings.
        let lock = lock.filter(|_| step.block == Block::Outside);
        let result: Result<u32, StepError> = match lock {
            None => run_once(client)
                .map(|_| 1)
                .map_err(|error| StepError::Failed { index, error }),
            Some(policy) => {
                let gated = observer.gated(index, step);
                // The gate and the attempts take turns with the observer.
                let observer = RefCell::new(&mut *observer);
                let r = policy.run_gated(
                    gated.then_some(|| observer.borrow_mut().holder(index)),
                    |n, timeout| {
                        observer.borrow_mut().attempt(index, n, timeout);
                        client.batch_execute(&format!(
                            "SET lock_timeout = '{}ms'",
                            timeout.as_millis().max(1)
                        ))?;
                        run_once(client)
                    },
                    is_lock_timeout,
                );
                let _ = client.batch_execute("RESET lock_timeout");
                match r {
                    Ok(((), a)) => {
                        waited += a.waited;
                        Ok(a.count)
                    }
                    Err(Ok(error)) => Err(StepError::Failed { index, error }),
                    Err(Err(gave_up)) => Err(StepError::GaveUp { index, gave_up }),
                }
            }
        };
        observer.after(client, index, step, result.is_ok(), took);
        if result.is_err() && step.block != Block::Outside {
            // The file's own transaction is aborted: its tool's session
            // would end there, rolling it back.
            let _ = client.batch_execute("ROLLBACK");
        }
        attempts_total += result?;
    }
    Ok(Applied {
        attempts: attempts_total,
        waited,
    })
}

/// Drops `index` when it exists and is INVALID (a failed or killed
/// `CREATE INDEX CONCURRENTLY`), so that the statement's IF NOT EXISTS
/// does not keep the broken index. Concurrently: a plain DROP INDEX would
/// take ACCESS EXCLUSIVE on the table.
fn drop_invalid_index(client: &mut Client, index: &str) -> Result<(), postgres::Error> {
    let invalid: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid)",
            &[&index],
        )?
        .get(0);
    if invalid {
        log::info!("dropping the invalid index {index} left by an earlier run");
        client.batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {index}"))?;
    }
    Ok(())
}

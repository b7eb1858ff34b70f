//! The current attached-functions DAO: two-phase create.
//!
//! 1. [`CurrentDao::insert_not_ready`] inserts the row with `is_ready =
//!    false` race-free (`INSERT … ON CONFLICT DO NOTHING RETURNING`); when
//!    the name is taken it reads the existing row, reuses it if it is this
//!    request's (a retry, a concurrent identical call, or the recovery of a
//!    half-finished attach) and refuses it otherwise.
//! 2. The caller's [`Backfill`] runs, outside any transaction, and must have
//!    completed before step 3 (marking ready while a backfill still runs
//!    would show readers a half-built function).
//! 3. [`CurrentDao::finish`] locks the row, creates the output collection
//!    unless it is already there, and sets `output_collection_id` and
//!    `is_ready = true` in one transaction. It is idempotent: a retry or a
//!    concurrent call finds the row ready, or finds the collection an earlier
//!    interrupted attempt created and reuses it.
//!
//! Readers ([`get_by_id`](CurrentDao::get_by_id),
//! [`get_by_name`](CurrentDao::get_by_name),
//! [`list_by_collection`](CurrentDao::list_by_collection)) see only ready,
//! live rows; the `get_any_*` ones see not-ready rows too. Readiness only
//! moves forward: no statement but the phase-1 insert writes false.
//!
//! Crash recovery: a crash between the phases leaves a not-ready row that no
//! reader sees. Retrying the same attach completes it; otherwise
//! [`CurrentDao::sweep_stuck`] retires it after a bound.

use std::time::Duration;

use postgres::types::ToSql;
use postgres::{Client, GenericClient, Statement};
use uuid::Uuid;

use super::{current_statements, AttachRequest, Attached, AttachedFunction, DaoError, PreparedSet};

/// The error a backfill hook reports.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Phase 2 of an attach: the work that must be complete before the attached
/// function becomes visible (e.g. processing the input collection's existing
/// records).
///
/// It runs again when an attach is retried or when identical attaches race
/// (each caller backfills before it finishes), so it must be idempotent. An
/// error leaves the row not ready; the attach fails and can be retried.
pub trait Backfill {
    fn backfill(&self, client: &mut Client, id: Uuid) -> Result<(), BoxError>;
}

/// The default hook: nothing to backfill.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoBackfill;

impl Backfill for NoBackfill {
    fn backfill(&self, _client: &mut Client, _id: Uuid) -> Result<(), BoxError> {
        Ok(())
    }
}

impl<F> Backfill for F
where
    F: Fn(&mut Client, Uuid) -> Result<(), BoxError>,
{
    fn backfill(&self, client: &mut Client, id: Uuid) -> Result<(), BoxError> {
        self(client, id)
    }
}

/// The outcome of phase 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase1 {
    pub attached: Attached,
    /// The reused row is already ready: phases 2 and 3 are done.
    pub is_ready: bool,
}

/// How often phase 1 retries when the row it conflicted with was detached
/// before it could be read (each retry means someone else made progress).
const PHASE1_ATTEMPTS: u32 = 16;

/// The current DAO over one connection. Keep it for many calls: it
/// prepares each statement of `current.sql` once.
pub struct CurrentDao<'c> {
    client: &'c mut Client,
    prepared: PreparedSet,
}

impl<'c> CurrentDao<'c> {
    pub fn new(client: &'c mut Client) -> CurrentDao<'c> {
        CurrentDao {
            client,
            prepared: PreparedSet::new(current_statements()),
        }
    }

    /// Statement `name` of `current.sql`, prepared on this connection.
    fn stmt(&mut self, name: &'static str) -> Result<Statement, DaoError> {
        self.prepared.get(self.client, name)
    }

    /// Attaches with no backfill: phase 1, then `finish` if not ready.
    pub fn attach(&mut self, request: &AttachRequest) -> Result<Attached, DaoError> {
        self.attach_with(request, &NoBackfill)
    }

    /// The whole two-phase attach. Returns the same id to every identical
    /// caller; `created` is true for the one whose insert won.
    pub fn attach_with(
        &mut self,
        request: &AttachRequest,
        backfill: &dyn Backfill,
    ) -> Result<Attached, DaoError> {
        let phase1 = self.insert_not_ready(request)?;
        let id = phase1.attached.id;
        if !phase1.is_ready {
            backfill
                .backfill(self.client, id)
                .map_err(|source| DaoError::Backfill { id, source })?;
            self.finish(id)?;
        }
        Ok(phase1.attached)
    }

    /// Phase 1 alone: the not-ready row of this request, inserted or reused.
    pub fn insert_not_ready(&mut self, request: &AttachRequest) -> Result<Phase1, DaoError> {
        request.validate()?;
        let insert = self.stmt("insert_not_ready")?;
        for _ in 0..PHASE1_ATTEMPTS {
            let inserted = self
                .client
                .query_opt(
                    &insert,
                    &[
                        &Uuid::new_v4(),
                        &request.name,
                        &request.tenant_id,
                        &request.database_id,
                        &request.input_collection_id,
                        &request.output_collection_name,
                        &request.function_id,
                        &request.function_params,
                        &request.min_records_for_invocation,
                    ],
                )
                .map_err(|e| insert_error(e, request))?;
            if let Some(row) = inserted {
                return Ok(Phase1 {
                    attached: Attached {
                        id: row.get("id"),
                        created: true,
                    },
                    is_ready: false,
                });
            }
            // The name is taken by a committed live row (ON CONFLICT waited
            // for any in-flight insert of it), unless that row was detached
            // in between: then the insert is worth another try.
            let Some(existing) =
                self.get_any_by_name(request.input_collection_id, &request.name)?
            else {
                continue;
            };
            let differing = request.differing_fields(&existing);
            if !differing.is_empty() {
                return Err(DaoError::AlreadyExists {
                    name: request.name.clone(),
                    differing,
                });
            }
            return Ok(Phase1 {
                attached: Attached {
                    id: existing.id,
                    created: false,
                },
                is_ready: existing.is_ready == Some(true),
            });
        }
        Err(DaoError::Contended {
            name: request.name.clone(),
            attempts: PHASE1_ATTEMPTS,
        })
    }

    /// Phase 3: creates (or reuses) the output collection and marks the row
    /// ready, in one transaction. Idempotent; concurrent calls on one id
    /// serialise on the row lock and only the first does the work.
    pub fn finish(&mut self, id: Uuid) -> Result<(), DaoError> {
        let context = |what: &str| format!("finishing attached function {id}: {what}");
        // Prepared before the transaction, which borrows the connection.
        let lock = self.stmt("lock_for_finish")?;
        let mark_ready = self.stmt("mark_ready")?;
        let output = OutputStatements {
            find: self.stmt("find_output_collection")?,
            insert: self.stmt("insert_collection")?,
        };
        let mut tx = self
            .client
            .transaction()
            .map_err(DaoError::db(context("begin")))?;
        let row = tx
            .query_opt(&lock, &[&id])
            .map_err(DaoError::db(context("locking the row")))?
            .ok_or_else(|| not_found(id))?;
        if row.get::<_, bool>("is_ready") {
            return Ok(());
        }
        let output = match row.get::<_, Option<Uuid>>("output_collection_id") {
            Some(existing) => existing,
            None => output.find_or_create(
                &mut tx,
                id,
                row.get("database_id"),
                row.get("output_collection_name"),
                row.get("tenant_id"),
            )?,
        };
        tx.query_one(&mark_ready, &[&id, &output])
            .map_err(DaoError::db(context("marking it ready")))?;
        tx.commit().map_err(DaoError::db(context("commit")))
    }

    /// A ready, live attached function.
    pub fn get_by_id(&mut self, id: Uuid) -> Result<Option<AttachedFunction>, DaoError> {
        let statement = self.stmt("get_by_id")?;
        self.one(&statement, &[&id], || {
            format!("reading attached function {id}")
        })
    }

    /// A ready, live attached function by input collection and name.
    pub fn get_by_name(
        &mut self,
        input_collection_id: Uuid,
        name: &str,
    ) -> Result<Option<AttachedFunction>, DaoError> {
        let statement = self.stmt("get_by_name")?;
        self.one(&statement, &[&input_collection_id, &name], || {
            format!("reading attached function `{name}` of collection {input_collection_id}")
        })
    }

    /// The ready, live attached functions of a collection, by name.
    pub fn list_by_collection(
        &mut self,
        input_collection_id: Uuid,
    ) -> Result<Vec<AttachedFunction>, DaoError> {
        let statement = self.stmt("list_by_collection")?;
        let rows = self
            .client
            .query(&statement, &[&input_collection_id])
            .map_err(DaoError::db(format!(
                "listing attached functions of collection {input_collection_id}"
            )))?;
        rows.iter().map(AttachedFunction::from_row).collect()
    }

    /// A live attached function, ready or not.
    pub fn get_any_by_id(&mut self, id: Uuid) -> Result<Option<AttachedFunction>, DaoError> {
        let statement = self.stmt("get_any_by_id")?;
        self.one(&statement, &[&id], || {
            format!("reading attached function {id}")
        })
    }

    /// A live attached function by input collection and name, ready or not.
    pub fn get_any_by_name(
        &mut self,
        input_collection_id: Uuid,
        name: &str,
    ) -> Result<Option<AttachedFunction>, DaoError> {
        let statement = self.stmt("get_any_by_name")?;
        self.one(&statement, &[&input_collection_id, &name], || {
            format!("reading attached function `{name}` of collection {input_collection_id}")
        })
    }

    /// Replaces the function parameters of a ready, live attached function.
    pub fn update_params(
        &mut self,
        id: Uuid,
        function_params: &serde_json::Value,
    ) -> Result<(), DaoError> {
        let statement = self.stmt("update_params")?;
        self.one_row_changed(
            &statement,
            &[&id, function_params],
            id,
            "updating parameters",
        )
    }

    /// Records a completed run; the offset never moves backwards.
    pub fn record_run(&mut self, id: Uuid, completion_offset: i64) -> Result<(), DaoError> {
        let statement = self.stmt("record_run")?;
        self.one_row_changed(
            &statement,
            &[&id, &completion_offset],
            id,
            "recording a run",
        )
    }

    /// Soft-deletes a live attached function (ready or not) and renames it
    /// to `_deleted_<name>_<id>`, which frees its name.
    pub fn detach(&mut self, id: Uuid) -> Result<(), DaoError> {
        let statement = self.stmt("detach")?;
        self.one_row_changed(&statement, &[&id], id, "detaching")
    }

    /// Retires (detaches) not-ready rows created more than `older_than` ago:
    /// attaches that crashed between the phases and were never retried.
    /// Rows whose `finish` holds the lock right now are skipped. Pick a bound
    /// well above the longest backfill: a swept attach fails with NotFound.
    pub fn sweep_stuck(&mut self, older_than: Duration) -> Result<Vec<Uuid>, DaoError> {
        let statement = self.stmt("sweep_stuck")?;
        let rows = self
            .client
            .query(&statement, &[&older_than.as_secs_f64()])
            .map_err(DaoError::db("sweeping stuck not-ready attached functions"))?;
        Ok(rows.iter().map(|r| r.get("id")).collect())
    }

    fn one(
        &mut self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
        context: impl FnOnce() -> String,
    ) -> Result<Option<AttachedFunction>, DaoError> {
        let row = self
            .client
            .query_opt(statement, params)
            .map_err(|e| DaoError::db(context())(e))?;
        row.as_ref().map(AttachedFunction::from_row).transpose()
    }

    fn one_row_changed(
        &mut self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
        id: Uuid,
        doing: &str,
    ) -> Result<(), DaoError> {
        self.client
            .query_opt(statement, params)
            .map_err(DaoError::db(format!("{doing} attached function {id}")))?
            .map(|_| ())
            .ok_or_else(|| not_found(id))
    }
}

fn not_found(id: Uuid) -> DaoError {
    DaoError::NotFound {
        what: format!("attached function {id} (live and, for this operation, ready)"),
    }
}

/// The phase-1 insert's errors: a missing input collection or function is
/// the caller's mistake, named as such.
fn insert_error(e: postgres::Error, request: &AttachRequest) -> DaoError {
    let fk = e
        .as_db_error()
        .filter(|d| d.code() == &postgres::error::SqlState::FOREIGN_KEY_VIOLATION)
        .and_then(|d| d.constraint().map(str::to_string));
    match fk {
        Some(c) if c.contains("input_collection") => DaoError::NotFound {
            what: format!("input collection {}", request.input_collection_id),
        },
        Some(c) if c.contains("function_id") => DaoError::NotFound {
            what: format!("function {}", request.function_id),
        },
        _ => DaoError::db(format!("inserting attached function `{}`", request.name))(e),
    }
}

/// The statements `finish` uses to find or create the output collection.
struct OutputStatements {
    find: Statement,
    insert: Statement,
}

impl OutputStatements {
    /// The output collection for `finish`: the one an interrupted earlier
    /// attempt created (same database and name, and no other live attached
    /// function writes into it), else a new one.
    fn find_or_create(
        &self,
        tx: &mut impl GenericClient,
        id: Uuid,
        database_id: Uuid,
        name: String,
        tenant_id: String,
    ) -> Result<Uuid, DaoError> {
        let context = || format!("finishing attached function {id}: output collection `{name}`");
        // Two rounds: if a concurrent finish (of another attached function with
        // the same output name) wins the insert, the second find sees its row.
        for _ in 0..2 {
            let found = tx
                .query_opt(&self.find, &[&database_id, &name, &id])
                .map_err(DaoError::db(context()))?;
            if let Some(row) = found {
                return match row.get::<_, Option<Uuid>>("owner") {
                    Some(owner) => Err(DaoError::OutputCollectionInUse {
                        name,
                        owner: Some(owner),
                    }),
                    None => Ok(row.get("id")),
                };
            }
            let inserted = tx
                .query_opt(
                    &self.insert,
                    &[&Uuid::new_v4(), &name, &tenant_id, &database_id],
                )
                .map_err(DaoError::db(context()))?;
            if let Some(row) = inserted {
                return Ok(row.get("id"));
            }
        }
        Err(DaoError::OutputCollectionInUse { name, owner: None })
    }
}

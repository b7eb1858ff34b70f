//! The legacy attached-functions DAO: the app before readiness existed.
//!
//! Its create is one-phase (output collection and attached function in one
//! transaction) and it never names `is_ready`. It is kept so that the
//! rolling deploy can be tested: legacy rows must be visible to current
//! readers on V3, and current not-ready rows are (knowingly) visible to
//! legacy readers. Not for new code.

use postgres::{Client, Statement};
use uuid::Uuid;

use super::{legacy_statements, AttachRequest, AttachedFunction, DaoError, PreparedSet};

/// The legacy DAO over one connection (prepares each statement once, as
/// the current one does, so that benchmarks compare like with like).
pub struct LegacyDao<'c> {
    client: &'c mut Client,
    prepared: PreparedSet,
}

impl<'c> LegacyDao<'c> {
    pub fn new(client: &'c mut Client) -> LegacyDao<'c> {
        LegacyDao {
            client,
            prepared: PreparedSet::new(legacy_statements()),
        }
    }

    /// Statement `name` of `legacy.sql`, prepared on this connection.
    fn stmt(&mut self, name: &'static str) -> Result<Statement, DaoError> {
        self.prepared.get(self.client, name)
    }

    /// One-phase create: output collection and attached function in one
    /// transaction. A taken name is an error (the legacy app does not
    /// reuse).
    pub fn create(&mut self, request: &AttachRequest) -> Result<Uuid, DaoError> {
        request.validate()?;
        let context = || format!("creating attached function `{}`", request.name);
        let map = |e: postgres::Error| match DaoError::unique_violation(&e) {
            Some("attached_functions_input_collection_id_name_key") => DaoError::AlreadyExists {
                name: request.name.clone(),
                differing: Vec::new(),
            },
            Some("collections_database_id_name_live") => DaoError::OutputCollectionInUse {
                name: request.output_collection_name.clone(),
                owner: None,
            },
            _ => DaoError::db(context())(e),
        };
        let insert_collection = self.stmt("insert_collection")?;
        let insert_attached_function = self.stmt("insert_attached_function")?;
        let mut tx = self.client.transaction().map_err(DaoError::db(context()))?;
        let collection_id = Uuid::new_v4();
        tx.execute(
            &insert_collection,
            &[
                &collection_id,
                &request.output_collection_name,
                &request.tenant_id,
                &request.database_id,
            ],
        )
        .map_err(map)?;
        let id = Uuid::new_v4();
        tx.execute(
            &insert_attached_function,
            &[
                &id,
                &request.name,
                &request.tenant_id,
                &request.database_id,
                &request.input_collection_id,
                &request.output_collection_name,
                &collection_id,
                &request.function_id,
                &request.function_params,
                &request.min_records_for_invocation,
            ],
        )
        .map_err(map)?;
        tx.commit().map_err(DaoError::db(context()))?;
        Ok(id)
    }

    /// A live attached function (the legacy app has no notion of ready).
    pub fn get_by_id(&mut self, id: Uuid) -> Result<Option<AttachedFunction>, DaoError> {
        let statement = self.stmt("get_by_id")?;
        let row = self
            .client
            .query_opt(&statement, &[&id])
            .map_err(DaoError::db(format!("reading attached function {id}")))?;
        row.as_ref().map(AttachedFunction::from_row).transpose()
    }

    pub fn get_by_name(
        &mut self,
        input_collection_id: Uuid,
        name: &str,
    ) -> Result<Option<AttachedFunction>, DaoError> {
        let statement = self.stmt("get_by_name")?;
        let row = self
            .client
            .query_opt(&statement, &[&input_collection_id, &name])
            .map_err(DaoError::db(format!(
                "reading attached function `{name}` of collection {input_collection_id}"
            )))?;
        row.as_ref().map(AttachedFunction::from_row).transpose()
    }

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

    /// Soft delete + rename, exactly as the current app does it.
    pub fn detach(&mut self, id: Uuid) -> Result<(), DaoError> {
        let statement = self.stmt("detach")?;
        self.client
            .query_opt(&statement, &[&id])
            .map_err(DaoError::db(format!("detaching attached function {id}")))?
            .map(|_| ())
            .ok_or_else(|| DaoError::NotFound {
                what: format!("attached function {id}"),
            })
    }
}

//! The server backend: an existing PostgreSQL server given by URL (a CI
//! service container, a shared development server).
//!
//! rollsafe does not own that server: it only creates uniquely named
//! databases (from `template0`) and drops them after use. The URL's user
//! needs the CREATEDB privilege.

use super::{Backend, BackendKind, SandboxError};
use crate::db;

pub struct ServerBackend {
    admin_url: String,
}

impl ServerBackend {
    /// Checks that the server answers and that the user may create
    /// databases.
    pub fn attach(url: &str) -> Result<ServerBackend, SandboxError> {
        let mut client = db::connect(url)?;
        let can_create: bool = client
            .query_one(
                "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user",
                &[],
            )
            .map_err(|e| SandboxError::sql("reading the user's privileges", e))?
            .get(0);
        if !can_create {
            return Err(SandboxError::Sql {
                context: format!("server {}", db::redact_url(url)),
                detail: "the user may not create databases; grant CREATEDB or use another user"
                    .into(),
            });
        }
        Ok(ServerBackend {
            admin_url: url.to_string(),
        })
    }
}

impl Backend for ServerBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Server
    }

    fn admin_url(&self) -> &str {
        &self.admin_url
    }

    fn describe(&self) -> String {
        format!("existing server {}", db::redact_url(&self.admin_url))
    }
}

//! Login roles a sandbox creates for a rehearsal: the migrator that owns
//! the rehearsal's databases and the roles apps connect as, each with a
//! password of its own, never printed.
//!
//! Roles are cluster-wide. A role is created only when absent and dropped
//! when its handle is (after the databases it owns or holds privileges
//! in); an existing role is never changed: on a server rollsafe does not
//! own (the `server` backend) it belongs to someone else, and on ours the
//! only roles present are the bootstrap superuser and PostgreSQL's own
//! `pg_*` roles, which no app may run as. So a name that exists is refused
//! ([`SandboxError::RoleExists`]).
//!
//! Attributes, as a managed database's owner and app roles have them:
//! `LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS`,
//! and membership in no role: in particular not `pg_execute_server_program`,
//! `pg_read_server_files` or `pg_write_server_files`, so `COPY … PROGRAM`,
//! server-side file access, `ALTER SYSTEM` and untrusted languages fail.
//! No `CREATEROLE` on purpose: up to PostgreSQL 15 a CREATEROLE role may
//! grant itself membership in any non-superuser role, those three
//! included, which would let a migration reach the server's machine.

use std::fmt;
use std::sync::Arc;

use super::{random_password, Sandbox, SandboxError, Shared};
use crate::db;
use crate::pg::quote_ident;

/// A login role this sandbox created; dropped with the handle's last clone.
#[derive(Clone)]
pub struct Role {
    inner: Arc<RoleInner>,
}

struct RoleInner {
    name: String,
    /// Never printed (see the `Debug` impl).
    password: String,
    shared: Arc<Shared>,
    /// Run before the role is dropped: the grants on server parameters,
    /// which would otherwise keep `DROP ROLE` from succeeding. Set once
    /// they are granted.
    revoke: std::sync::OnceLock<String>,
}

impl fmt::Debug for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Role({})", self.inner.name)
    }
}

impl Role {
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// `url` (a database of this sandbox) connecting as this role, with
    /// `settings` set for each of its sessions. Contains a password.
    pub fn url(&self, url: &str, settings: &[(&str, String)]) -> String {
        db::as_role(url, &self.inner.name, &self.inner.password, settings)
    }
}

impl Drop for RoleInner {
    fn drop(&mut self) {
        let sql = format!(
            "{}DROP ROLE IF EXISTS {}",
            self.revoke.get().map_or("", String::as_str),
            quote_ident(&self.name)
        );
        let result = db::connect(self.shared.backend.admin_url())
            .map_err(|e| e.to_string())
            .and_then(|mut c| c.batch_execute(&sql).map_err(|e| e.to_string()));
        if let Err(e) = result {
            log::warn!("could not drop sandbox role {}: {e}", self.name);
        }
    }
}

impl Sandbox {
    /// Creates login role `name` (attributes in the module docs) with a
    /// password of its own. Refused when a role of that name exists: it is
    /// never changed, nor taken over.
    pub fn create_login_role(&self, name: &str) -> Result<Role, SandboxError> {
        let mut admin = self.connect_admin()?;
        let exists = admin
            .query_opt("SELECT 1 FROM pg_roles WHERE rolname = $1", &[&name])
            .map_err(|e| SandboxError::sql(format!("looking up role {name}"), e))?
            .is_some();
        if exists {
            return Err(SandboxError::RoleExists {
                role: name.to_string(),
                server: self.describe(),
            });
        }
        let password = random_password();
        // The password is alphanumeric: safe as a literal.
        let sql = format!(
            "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT PASSWORD '{password}'",
            quote_ident(name)
        );
        admin.batch_execute(&sql).map_err(|e| SandboxError::Sql {
            context: format!("creating role {name}"),
            detail: crate::errors::one_line(&e).replace(&password, "***"),
        })?;
        Ok(Role {
            inner: Arc::new(RoleInner {
                name: name.to_string(),
                password,
                shared: Arc::clone(&self.shared),
                revoke: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Creates the seeder of `migrator`'s rehearsal: a login role with the
    /// migrator's attributes, a member of the migrator (it `SET ROLE`s to
    /// it for all it runs), that may also set `session_replication_role`
    /// (`GRANT SET ON PARAMETER`), so the generator's rows can skip the
    /// per-row foreign-key checks ([`crate::seed::generate`]). The
    /// migrator itself never gets that grant: a migration that sets the
    /// parameter fails as in production. None before PostgreSQL 15, which
    /// has no such grant, and where the admin may not grant it.
    pub fn create_seeder_role(&self, migrator: &Role) -> Result<Option<Role>, SandboxError> {
        if self.server_major() < 15 {
            return Ok(None);
        }
        let seeder = self.create_login_role(&self.unique_role_name("seeder"))?;
        let name = quote_ident(seeder.name());
        let sql = format!(
            "GRANT {} TO {name}; GRANT SET ON PARAMETER session_replication_role TO {name}",
            quote_ident(migrator.name())
        );
        match self.connect_admin()?.batch_execute(&sql) {
            Ok(()) => {
                let revoke =
                    format!("REVOKE ALL ON PARAMETER session_replication_role FROM {name}; ");
                let _ = seeder.inner.revoke.set(revoke);
                Ok(Some(seeder))
            }
            // A server rollsafe does not own may not let its admin grant
            // that (no superuser): seeding then runs as the migrator, its
            // rows through the checks (the seeder is dropped here).
            Err(e) if e.as_db_error().is_some() => {
                log::info!(
                    "the generator's rows go through the per-row foreign-key checks: {}",
                    crate::errors::one_line(&e)
                );
                Ok(None)
            }
            Err(e) => Err(SandboxError::sql(
                format!("granting the seeder {}", seeder.name()),
                e,
            )),
        }
    }

    /// Creates role `name` as a stand-in for a production role the target's
    /// GRANTs name: `LOGIN` and `INHERIT` as there, no password, and never
    /// SUPERUSER, CREATEDB, CREATEROLE, REPLICATION or BYPASSRLS whatever it
    /// has there. None when a role of that name exists already (it is used
    /// as it is, never changed).
    pub fn create_stand_in_role(
        &self,
        name: &str,
        login: bool,
        inherit: bool,
    ) -> Result<Option<Role>, SandboxError> {
        let mut admin = self.connect_admin()?;
        let exists = admin
            .query_opt("SELECT 1 FROM pg_roles WHERE rolname = $1", &[&name])
            .map_err(|e| SandboxError::sql(format!("looking up role {name}"), e))?
            .is_some();
        if exists {
            return Ok(None);
        }
        let sql = format!(
            "CREATE ROLE {} {} {} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS",
            quote_ident(name),
            if login { "LOGIN" } else { "NOLOGIN" },
            if inherit { "INHERIT" } else { "NOINHERIT" },
        );
        admin
            .batch_execute(&sql)
            .map_err(|e| SandboxError::sql(format!("creating role {name}"), e))?;
        Ok(Some(Role {
            inner: Arc::new(RoleInner {
                name: name.to_string(),
                password: String::new(),
                shared: Arc::clone(&self.shared),
                revoke: std::sync::OnceLock::new(),
            }),
        }))
    }

    /// A name no other role of this sandbox, or of another sandbox on the
    /// same server, has (`rs_<pid>_<rand>_<what>_<n>`): rehearsals sharing
    /// a server never meet.
    pub fn unique_role_name(&self, what: &str) -> String {
        let n = self
            .shared
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}_{what}_{n}", self.shared.prefix)
    }
}

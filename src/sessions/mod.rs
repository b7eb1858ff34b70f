//! Who runs what in a rehearsal, as production runs it.
//!
//! - **The migrator** is a login role that is not a superuser (no
//!   BYPASSRLS, no CREATEROLE, member of no role: see
//!   [`crate::sandbox::Role`]) and owns every rehearsal database, like a
//!   managed database's owner role: it may create schemas and trusted
//!   extensions, and owns what its migrations create. Migrations are
//!   applied connected as it, with a password of its own, never through a
//!   superuser session that `SET ROLE`s (a migration could `RESET ROLE`).
//!   `--migrator-superuser` restores a superuser migrator for a production
//!   whose migrator is one.
//! - **Each app** connects as the role its statement file declares
//!   (`-- role: NAME`), else the project's default (`app_role`,
//!   `--app-role`), else as the migrator (the common one-role deployment:
//!   the owner of the migrated objects, which `FORCE ROW LEVEL SECURITY`
//!   still binds). Declared roles are created before V1 with the migrator's
//!   attributes and own nothing: the migrations' GRANTs give them what they
//!   get.
//! - **Seeding** (the project's seed files, the generator's rows) runs as
//!   the migrator, the tables' owner, through a *seeder* login role
//!   (PostgreSQL 15+) that is a member of the migrator and `SET ROLE`s to
//!   it at once: the seeder alone may also set `session_replication_role`,
//!   which lets the generator's rows skip the per-row foreign-key checks
//!   (checked set-wise instead: [`crate::seed::generate`]). The migrator never
//!   holds that grant, so a migration that sets the mode fails as in
//!   production.
//! - **rollsafe itself** (introspection, copies, the target's restore)
//!   connects as the sandbox's superuser.
//!
//! - **Roles the migrations create** are the server's, not a database's,
//!   while a rehearsal applies each migration on several databases of one
//!   server (the empty path, the seeded path, the probe's copy, the
//!   background migrator). Each of those applies is one production run, so
//!   each must find the server as production would: a role the same
//!   migration made on another path is renamed aside first
//!   (`ALTER ROLE … RENAME` keeps every grant and owned object with it), and
//!   every role a migration made is dropped with the rehearsal
//!   ([`Sessions::own_roles`]).
//!
//! Every session of the migrator and of the apps runs under
//! `statement_timeout` (set at connection start), and a watchdog
//! ([`Watchdog`]) cancels, then terminates, any of their statements that
//! outlive it: a migration that sets its own `statement_timeout = 0` and
//! sleeps still ends, so the pipeline never hangs.
//!
//! Its own floor (`sessions`, above `app`, whose statement files declare
//! the apps' roles, and below `seed` and `verify`, which connect through
//! it): it makes the sessions every instrument of a rehearsal connects
//! with, hands them out, and ([`sampler`]) watches what they wait on.

pub mod sampler;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sandbox::{Role, Sandbox, SandboxError};

use crate::app::AppVersion;

/// The statement timeout of a rehearsal when none is given: long enough
/// for a migration over `--rows` seeded rows, short enough that a CI job
/// is never held for long.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(300);

/// How long past the statement timeout the watchdog waits before it
/// cancels a statement (the server's own timeout normally fires first),
/// and again before it terminates a backend a cancel did not stop (a
/// PL/pgSQL loop that catches `query_canceled`).
const WATCHDOG_GRACE: Duration = Duration::from_secs(2);

/// The application name of every untrusted session, for the watchdog (a
/// superuser migrator has no role of its own to be recognised by).
pub const UNTRUSTED_APPLICATION: &str = "rollsafe-rehearsed";

/// The roles of one rehearsal and the URLs that connect as them. Cheap to
/// clone; the roles are dropped with the last clone (after the databases).
#[derive(Clone)]
pub struct Sessions {
    /// None: `--migrator-superuser` (the sandbox's superuser migrates).
    migrator: Option<Role>,
    /// The role seeding connects as before it becomes the migrator (`SET
    /// ROLE`), which may also skip the per-row foreign-key checks of the
    /// generator's rows ([`Sandbox::create_seeder_role`]). None with a
    /// superuser migrator (which may) and before PostgreSQL 15 (where no
    /// other role may).
    seeder: Option<Role>,
    /// Declared app roles, by role name.
    roles: BTreeMap<String, Role>,
    /// App name → role name, for apps that declare one (or the default).
    app_roles: BTreeMap<String, String>,
    statement_timeout: Duration,
    /// The roles the rehearsed migrations create, per migration.
    migration_roles: Arc<MigrationRoles>,
    _watchdog: Option<Arc<Watchdog>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sessions(migrator {}, apps {:?})",
            self.migrator_name(),
            self.app_roles
        )
    }
}

impl Sessions {
    /// Creates the migrator role (unless `superuser_migrator`) and every
    /// app's declared role (else `default_role`) on `sandbox`, and starts
    /// the watchdog.
    pub fn create(
        sandbox: &Sandbox,
        apps: &[AppVersion],
        default_role: Option<&str>,
        superuser_migrator: bool,
        statement_timeout: Duration,
    ) -> Result<Sessions, SandboxError> {
        let migrator = if superuser_migrator {
            None
        } else {
            Some(sandbox.create_login_role(&sandbox.unique_role_name("migrator"))?)
        };
        let seeder = match &migrator {
            Some(m) => sandbox.create_seeder_role(m)?,
            None => None,
        };
        let mut roles: BTreeMap<String, Role> = BTreeMap::new();
        let mut app_roles = BTreeMap::new();
        for app in apps {
            let Some(name) = app.role.as_deref().or(default_role) else {
                continue;
            };
            if !roles.contains_key(name) {
                roles.insert(name.to_string(), sandbox.create_login_role(name)?);
            }
            app_roles.insert(app.name.clone(), name.to_string());
        }
        let watched: Vec<String> = migrator
            .iter()
            .chain(&seeder)
            .chain(roles.values())
            .map(|r| r.name().to_string())
            .collect();
        let watchdog = Watchdog::start(sandbox.admin_url(), watched, statement_timeout);
        let migration_roles = Arc::new(MigrationRoles {
            admin_url: sandbox.admin_url().to_string(),
            aside_prefix: sandbox.unique_role_name("aside"),
            ledger: Mutex::new(Ledger::default()),
        });
        Ok(Sessions {
            migrator,
            seeder,
            roles,
            app_roles,
            statement_timeout,
            migration_roles,
            _watchdog: Some(Arc::new(watchdog)),
        })
    }

    /// The per-session settings of every untrusted session.
    fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "statement_timeout",
                format!("{}ms", self.statement_timeout.as_millis().max(1)),
            ),
            ("application_name", UNTRUSTED_APPLICATION.to_string()),
        ]
    }

    pub fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }

    /// The role that owns the rehearsal's databases (None: the superuser).
    pub fn owner(&self) -> Option<&Role> {
        self.migrator.as_ref()
    }

    /// The migrator's role name, for messages.
    pub fn migrator_name(&self) -> String {
        self.migrator
            .as_ref()
            .map_or("the sandbox's superuser".to_string(), |r| {
                r.name().to_string()
            })
    }

    /// Whether migrations run as a superuser (`--migrator-superuser`).
    pub fn superuser_migrator(&self) -> bool {
        self.migrator.is_none()
    }

    /// `url` (a sandbox database's superuser URL) connecting as the
    /// migrator. Contains a password.
    pub fn migrator(&self, url: &str) -> String {
        let settings = self.settings();
        match &self.migrator {
            Some(r) => r.url(url, &settings),
            None => crate::db::with_settings(url, &settings),
        }
    }

    /// `url` connecting as the seeder, and the migrator it must become
    /// (`SET ROLE`) before it runs anything; None: seed as the migrator
    /// ([`Sessions::migrator`]). Contains a password.
    pub fn seeder(&self, url: &str) -> Option<(String, String)> {
        let (seeder, migrator) = (self.seeder.as_ref()?, self.migrator.as_ref()?);
        let settings = self.settings();
        Some((seeder.url(url, &settings), migrator.name().to_string()))
    }

    /// The declared role `app` runs as, when it is not the migrator's.
    pub fn own_role_of(&self, app: &str) -> Option<&str> {
        self.app_roles
            .get(app)
            .filter(|r| self.roles.contains_key(*r))
            .map(String::as_str)
    }

    /// The role `app` runs as, for messages.
    pub fn role_of(&self, app: &str) -> String {
        self.app_roles
            .get(app)
            .cloned()
            .unwrap_or_else(|| self.migrator_name())
    }

    /// `url` connecting as `app`'s role (the migrator's when it declares
    /// none). Contains a password.
    pub fn app(&self, url: &str, app: &str) -> String {
        match self.app_roles.get(app).and_then(|r| self.roles.get(r)) {
            Some(role) => {
                let settings = self.settings();
                role.url(url, &settings)
            }
            None => self.migrator(url),
        }
    }
}

impl Sessions {
    /// Held around one apply of migration `version` (`sql`) on database
    /// `db` (its name), by every path that runs it (the base, the forced
    /// failure, the empty and seeded paths, the kill-and-rerun, the probe,
    /// the background migrator), and around what reads that database's
    /// roles right after (the change's verify script).
    ///
    /// Roles are the server's, and one server holds every path's
    /// databases: each apply must meet the roles its own database's
    /// history created, as production's one database does. So once a
    /// migration's text creates, alters or drops a role, applies are taken
    /// one at a time (they may run in parallel threads otherwise), and
    /// before each, every role name a migration created is handed to the
    /// role `db`'s own lineage created (the database it was copied from,
    /// and so on: [`Sessions::copied`]); a role of that name created on
    /// another path is renamed aside (`ALTER ROLE … RENAME` keeps its
    /// grants and owned objects with it). `CREATE ROLE` then does not meet
    /// another path's role, and `GRANT … TO` a role made earlier names the
    /// one this database knows. The roles this apply creates are recorded
    /// when the guard is dropped, and dropped with the rehearsal. A history
    /// whose migrations never name a role gets guards that do nothing.
    pub fn own_roles(&self, version: i32, sql: &str, db: &str) -> anyhow::Result<OwnRoles<'_>> {
        let roles = &*self.migration_roles;
        let mut ledger = roles.ledger.lock().unwrap_or_else(|p| p.into_inner());
        if !mentions_role_ddl(sql) && ledger.made.is_empty() {
            return Ok(OwnRoles { held: None });
        }
        let mut admin = crate::db::connect(&roles.admin_url)
            .map_err(|e| anyhow::anyhow!("connecting as the sandbox's superuser: {e}"))?;
        ledger.hand_names_to(&mut admin, db, &roles.aside_prefix)?;
        let before = role_names(&mut admin).map_err(anyhow::Error::msg)?;
        Ok(OwnRoles {
            held: Some(Held {
                ledger,
                admin,
                version,
                db: db.to_string(),
                sql: sql.to_lowercase(),
                before,
            }),
        })
    }

    /// Database `copy` was copied from `source`: it knows the roles
    /// `source`'s history created ([`Sessions::own_roles`]).
    pub fn copied(&self, source: &str, copy: &str) {
        let mut ledger = self
            .migration_roles
            .ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        ledger.seq += 1;
        let at = ledger.seq;
        ledger
            .parent
            .insert(copy.to_string(), (source.to_string(), at));
    }
}

impl Ledger {
    /// `db` and the databases it descends from, each with the moment
    /// (the ledger's sequence) up to which `db` holds its history: a copy
    /// knows what its source's migrations created before it was taken.
    fn lineage(&self, db: &str) -> BTreeMap<String, u64> {
        let mut line = BTreeMap::new();
        let (mut at, mut upto) = (Some(db.to_string()), u64::MAX);
        while let Some(d) = at {
            if line.insert(d.clone(), upto).is_some() {
                break;
            }
            at = self.parent.get(&d).map(|(source, copied)| {
                upto = upto.min(*copied);
                source.clone()
            });
        }
        line
    }

    /// Every role name a migration created goes to the newest role of
    /// that name `db`'s lineage created; one it never created is set aside
    /// (the name is free, as on production's server before the migration).
    fn hand_names_to(
        &mut self,
        admin: &mut postgres::Client,
        db: &str,
        aside_prefix: &str,
    ) -> anyhow::Result<()> {
        let line = self.lineage(db);
        let names: BTreeSet<String> = self.made.iter().map(|m| m.name.clone()).collect();
        for name in names {
            let holder = self.made.iter().position(|m| m.current == name);
            let wanted = self
                .made
                .iter()
                .enumerate()
                .filter(|(_, m)| {
                    m.name == name && line.get(&m.db).is_some_and(|upto| m.seq < *upto)
                })
                .max_by_key(|(_, m)| m.seq)
                .map(|(i, _)| i);
            if holder == wanted {
                continue;
            }
            if let Some(h) = holder {
                self.renamed += 1;
                let aside = format!("{aside_prefix}_{}", self.renamed);
                self.rename(admin, h, aside)?;
            }
            if let Some(w) = wanted {
                self.rename(admin, w, name)?;
            }
        }
        Ok(())
    }

    fn rename(&mut self, admin: &mut postgres::Client, i: usize, to: String) -> anyhow::Result<()> {
        let m = &mut self.made[i];
        let renamed = admin.batch_execute(&format!(
            "ALTER ROLE {} RENAME TO {}",
            crate::pg::quote_ident(&m.current),
            crate::pg::quote_ident(&to)
        ));
        match renamed {
            Ok(()) => {
                m.current = to;
                Ok(())
            }
            // Dropped by a later migration: nothing to hand over, the
            // apply meets the server as it is.
            Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_OBJECT) => Ok(()),
            Err(e) => anyhow::bail!(
                "renaming role {} (a rehearsed migration created it on another of the rehearsal's databases) to {to}: {}",
                m.current,
                crate::errors::one_line(&e)
            ),
        }
    }
}

/// Whether `sql` creates, alters or drops a role (`CREATE|ALTER|DROP`
/// followed by `ROLE|USER|GROUP`, anywhere: also inside a `DO` block's
/// dynamic SQL text). Erring towards yes costs only serialised applies.
fn mentions_role_ddl(sql: &str) -> bool {
    let lower = sql.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words.windows(2).any(|w| {
        matches!(w[0], "create" | "alter" | "drop") && matches!(w[1], "role" | "user" | "group")
    })
}

fn role_names(admin: &mut postgres::Client) -> Result<BTreeSet<String>, String> {
    Ok(admin
        .query("SELECT rolname::text FROM pg_roles", &[])
        .map_err(|e| {
            format!(
                "listing the server's roles: {}",
                crate::errors::one_line(&e)
            )
        })?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// The roles the rehearsed migrations created: under their own names
/// (per migration, the last path's) and renamed aside (the earlier
/// paths'). Dropped with the rehearsal's last session handle.
struct MigrationRoles {
    /// Contains a password; never printed.
    admin_url: String,
    aside_prefix: String,
    ledger: Mutex<Ledger>,
}

#[derive(Default)]
struct Ledger {
    made: Vec<Made>,
    /// Each copy's source database, by name, and when it was copied.
    parent: BTreeMap<String, (String, u64)>,
    /// Orders role creations and copies.
    seq: u64,
    renamed: u32,
}

/// A role one apply of a migration created.
struct Made {
    /// When (the ledger's sequence).
    seq: u64,
    /// The database it was applied on.
    db: String,
    /// Its name as the migration spelled it.
    name: String,
    /// Its name now (another while set aside).
    current: String,
}

impl Drop for MigrationRoles {
    fn drop(&mut self) {
        let ledger = self.ledger.get_mut().unwrap_or_else(|p| p.into_inner());
        let names: Vec<&String> = ledger.made.iter().map(|m| &m.current).collect();
        if names.is_empty() {
            return;
        }
        let Ok(mut admin) = crate::db::connect(&self.admin_url) else {
            log::warn!("could not drop the roles the migrations created: no superuser session");
            return;
        };
        for name in names {
            let sql = format!("DROP ROLE IF EXISTS {}", crate::pg::quote_ident(name));
            if let Err(e) = admin.batch_execute(&sql) {
                log::warn!(
                    "could not drop role {name}, which a rehearsed migration created: {}",
                    crate::errors::one_line(&e)
                );
            }
        }
    }
}

/// See [`Sessions::own_roles`]: records the roles its apply created when
/// dropped.
pub struct OwnRoles<'s> {
    held: Option<Held<'s>>,
}

struct Held<'s> {
    ledger: MutexGuard<'s, Ledger>,
    admin: postgres::Client,
    version: i32,
    db: String,
    /// The migration's text, lower case: a new role it does not name is
    /// another rehearsal's on a shared server, never recorded.
    sql: String,
    before: BTreeSet<String>,
}

impl Drop for OwnRoles<'_> {
    fn drop(&mut self) {
        let Some(h) = self.held.as_mut() else {
            return;
        };
        match role_names(&mut h.admin) {
            Ok(after) => {
                for name in after.difference(&h.before) {
                    if !h.sql.contains(&name.to_lowercase()) {
                        continue;
                    }
                    log::debug!("V{}: created role {name} on {}", h.version, h.db);
                    h.ledger.seq += 1;
                    let seq = h.ledger.seq;
                    h.ledger.made.push(Made {
                        seq,
                        db: h.db.clone(),
                        name: name.clone(),
                        current: name.clone(),
                    });
                }
            }
            Err(e) => log::warn!("V{}: {e}", h.version),
        }
    }
}

/// Cancels, then terminates, the statements of the rehearsal's untrusted
/// sessions that run past the statement timeout, from a superuser
/// connection of its own. Stops when dropped, at once: it sleeps on a
/// channel the drop closes (a plain sleep between sweeps held every
/// rehearsal's end for up to 250 ms, 125 on average).
pub struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    fn start(admin_url: &str, roles: Vec<String>, timeout: Duration) -> Watchdog {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = {
            let url = admin_url.to_string();
            let cancel_after = (timeout + WATCHDOG_GRACE).as_millis() as f64 / 1000.0;
            let terminate_after = cancel_after + WATCHDOG_GRACE.as_secs_f64() * 2.0;
            std::thread::spawn(move || {
                let mut admin = None;
                loop {
                    if admin.is_none() {
                        admin = crate::db::connect(&url).ok();
                    }
                    if let Some(c) = admin.as_mut() {
                        let swept = c.execute(
                            "SELECT CASE WHEN now() - query_start > make_interval(secs => $4)
                                         THEN pg_terminate_backend(pid)
                                         ELSE pg_cancel_backend(pid) END
                               FROM pg_stat_activity
                              WHERE state = 'active' AND pid <> pg_backend_pid()
                                AND (usename = ANY($1) OR starts_with(application_name, $2))
                                AND now() - query_start > make_interval(secs => $3)",
                            &[
                                &roles,
                                &UNTRUSTED_APPLICATION,
                                &cancel_after,
                                &terminate_after,
                            ],
                        );
                        if swept.is_err() {
                            admin = None;
                        }
                    }
                    match stopped.recv_timeout(Duration::from_millis(250)) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        // Dropped (or told to stop).
                        _ => break,
                    }
                }
            })
        };
        Watchdog {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Closing the channel wakes the thread.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mentions_role_ddl;

    #[test]
    fn role_ddl_is_found_wherever_the_text_names_it() {
        for sql in [
            "CREATE ROLE reader WITH LOGIN;",
            "create user reader;",
            "ALTER\n  ROLE reader SET search_path = app;",
            "DO $$ BEGIN EXECUTE 'DROP GROUP old_readers'; END $$;",
        ] {
            assert!(mentions_role_ddl(sql), "{sql}");
        }
        for sql in [
            "CREATE TABLE roles (id int);",
            "GRANT SELECT ON t TO reader;",
            "ALTER TABLE users ADD COLUMN role text;",
            "CREATE INDEX user_group ON t (g);",
        ] {
            assert!(!mentions_role_ddl(sql), "{sql}");
        }
    }
}

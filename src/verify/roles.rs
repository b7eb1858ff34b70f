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
//!   (checked set-wise instead: [`super::generate`]). The migrator never
//!   holds that grant, so a migration that sets the mode fails as in
//!   production.
//! - **rollsafe itself** (introspection, copies, the target's restore)
//!   connects as the sandbox's superuser.
//!
//! Every session of the migrator and of the apps runs under
//! `statement_timeout` (set at connection start), and a watchdog
//! ([`Watchdog`]) cancels, then terminates, any of their statements that
//! outlive it: a migration that sets its own `statement_timeout = 0` and
//! sleeps still ends, so the pipeline never hangs.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;
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
        Ok(Sessions {
            migrator,
            seeder,
            roles,
            app_roles,
            statement_timeout,
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

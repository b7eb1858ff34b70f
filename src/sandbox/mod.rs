//! Throwaway PostgreSQL: one API over three backends.
//!
//! Everything rollsafe proves happens here. A [`Sandbox`] is a running
//! server that rollsafe may do anything to; it hands out isolated databases
//! ([`Sandbox::fresh_database`]) quickly, so that many tests or rehearsal
//! scenarios share one server instead of starting one each.
//!
//! Backends, one file each, behind the [`Backend`] trait:
//! - [`docker`]: a container through testcontainers (image `postgres:15` by
//!   default, `postgres:<major>` for a requested major; the official image's
//!   contract).
//! - [`local`]: `initdb` + `postgres` from the binaries on this machine, on a
//!   free loopback port (as the `postgres` OS user when run as root).
//! - [`server`]: an existing server given by URL; only databases are created
//!   and dropped there.
//!
//! A sandbox can be asked for a PostgreSQL major
//! ([`SandboxBuilder::postgres_major`]), so that a rehearsal runs on the
//! majors production runs; [`Sandbox::server_major`] says what it got.
//!
//! Cleanup is RAII: dropping a [`Database`] drops it; dropping the last
//! handle to a sandbox (the [`Sandbox`] and every [`Database`] it handed out
//! share the server) removes the container, or stops the server and deletes
//! its data directory. That also happens when a test panics.
//!
//! Not here: migrations, verification, anything that prints.

pub mod binaries;
pub mod cleanup;
pub mod docker;
mod dump;
pub mod local;
mod role;
pub mod server;

pub use role::Role;

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use postgres::Client;
use thiserror::Error;

use crate::db::{self, ConnectError};
use crate::pg::quote_ident;

/// Environment variable choosing the backend: `auto`, `docker`, `local`, or
/// a `postgres://` URL (the server backend).
pub const ENV_BACKEND: &str = "ROLLSAFE_POSTGRES";
/// Environment variable naming the container image (`postgres:15`). With a
/// requested major it is used only when its tag names that major.
pub const ENV_IMAGE: &str = "ROLLSAFE_POSTGRES_IMAGE";
/// Environment variable naming the directory of the PostgreSQL binaries.
/// With a requested major it is used only when it holds that major.
pub const ENV_BINDIR: &str = "ROLLSAFE_PG_BINDIR";
/// The image used when none is configured.
pub const DEFAULT_IMAGE: &str = "postgres:15";
/// The PostgreSQL majors production runs, which rehearsals should cover
/// (`ci/build-postgres-image.sh --all` builds their images).
pub const PRODUCTION_MAJORS: [u32; 4] = [13, 15, 17, 18];

/// A file pg_dump reads (a CA bundle, a client certificate or key): the
/// libpq variable naming it and its absolute path on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFile {
    pub var: &'static str,
    pub host_path: std::path::PathBuf,
}

impl TlsFile {
    /// Where a container sees it (mounted read-only there).
    pub fn container_path(&self) -> String {
        format!("/rollsafe-tls/{}", self.var.to_ascii_lowercase())
    }
}

/// A running throwaway server, as the sandbox sees it.
///
/// Implementations clean up in their own `Drop`.
pub trait Backend: Send + Sync {
    /// `docker`, `local` or `server`.
    fn kind(&self) -> BackendKind;
    /// A superuser URL to the maintenance database (`postgres`).
    fn admin_url(&self) -> &str;
    /// One line for humans: what runs where (no password).
    fn describe(&self) -> String;
    /// Whether rollsafe owns the whole server (docker, local) or only the
    /// databases it creates (server). Owned servers may be tuned freely.
    fn owns_server(&self) -> bool {
        self.kind() != BackendKind::Server
    }
    /// A `pg_dump` of the server's own major that reaches the host's
    /// network, with its connection taken from libpq's environment
    /// (`PGHOST`…); None when the backend has none.
    /// `tls_files` are the CA bundle and client certificate the
    /// connection names, for a pg_dump that cannot see this host's files
    /// (a container) to mount.
    fn pg_dump(&self, tls_files: &[TlsFile]) -> Option<std::process::Command> {
        let _ = tls_files;
        None
    }
}

/// Which backend a sandbox runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Docker,
    Local,
    Server,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Docker => "docker",
            BackendKind::Local => "local",
            BackendKind::Server => "server",
        })
    }
}

/// What the user asked for: `auto` picks docker when it works, else local.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum BackendChoice {
    #[default]
    Auto,
    Docker,
    Local,
    Server(String),
}

impl std::str::FromStr for BackendChoice {
    type Err = SandboxError;
    fn from_str(s: &str) -> Result<Self, SandboxError> {
        match s.trim() {
            "" | "auto" => Ok(BackendChoice::Auto),
            "docker" => Ok(BackendChoice::Docker),
            "local" => Ok(BackendChoice::Local),
            url if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(BackendChoice::Server(url.to_string()))
            }
            other => Err(SandboxError::InvalidChoice(db::redact_url(other))),
        }
    }
}

/// Why no sandbox could be had. Every message says what to do next.
#[derive(Debug, Error)]
pub enum SandboxError {
    #[error("unknown Postgres backend `{0}`: use auto, docker, local, or a postgres:// URL")]
    InvalidChoice(String),
    #[error("the docker backend needs a Docker engine, but none answers ({0}); start Docker, or use --postgres local")]
    DockerUnavailable(String),
    #[error("image {image} is not present and could not be pulled ({detail}); build it with `ci/build-postgres-image.sh {image}`, pull it with `docker pull {image}`, or use --postgres local")]
    ImageUnavailable { image: String, detail: String },
    #[error("container from image {image} did not start: {detail}")]
    DockerStart { image: String, detail: String },
    #[error("PostgreSQL {major} is not available here ({}); build its image with `ci/build-postgres-image.sh postgres:{major}` (no registry needed), pull it with `docker pull postgres:{major}`, or install its binaries with `apt-get install postgresql-{major}`", .tried.join("; "))]
    MajorUnavailable { major: u32, tried: Vec<String> },
    #[error("{what} is PostgreSQL {found}, but PostgreSQL {requested} was requested; {fix}")]
    MajorMismatch {
        what: String,
        found: u32,
        requested: u32,
        fix: String,
    },
    #[error("PostgreSQL binaries not found (looked in: {searched}); install PostgreSQL (e.g. apt-get install postgresql) or set {ENV_BINDIR} to the directory holding initdb and postgres")]
    BinariesNotFound { searched: String },
    #[error("initdb and postgres refuse to run as root and there is no `postgres` OS user to run them as; create one (useradd --system postgres) or run rollsafe as a non-root user")]
    NoPostgresUser,
    #[error("local PostgreSQL did not start: {detail}")]
    LocalStart { detail: String },
    #[error("no throwaway Postgres available; tried:\n{}", .tried.iter().map(|t| format!("  - {t}")).collect::<Vec<_>>().join("\n"))]
    NoBackend { tried: Vec<String> },
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("{context}: {detail}")]
    Sql { context: String, detail: String },
    #[error("cannot read the target's schema with pg_dump: {detail}")]
    Dump { detail: String },
    #[error("role `{role}` already exists on {server}; rollsafe creates the roles it rehearses with and never changes an existing one: drop it there, name another role (`-- role:` or --app-role), or rehearse with --postgres docker or local")]
    RoleExists { role: String, server: String },
    #[error("an existing server (a --postgres URL) cannot be started with {settings}; set it in that server's postgresql.conf, or use --postgres docker or local")]
    SettingsOnServer { settings: String },
}

impl SandboxError {
    fn sql(context: impl Into<String>, e: postgres::Error) -> SandboxError {
        SandboxError::Sql {
            context: context.into(),
            detail: crate::errors::one_line(&e),
        }
    }
}

/// Options for starting a sandbox: a small builder (refinery's `Runner`
/// style), filled from flags or from the environment.
///
/// # Which PostgreSQL runs
///
/// Without a requested major: the image set by [`image`](Self::image), else
/// `ROLLSAFE_POSTGRES_IMAGE`, else `postgres:15`; the binaries in
/// [`bindir`](Self::bindir), else `ROLLSAFE_PG_BINDIR`, else the first found
/// (see [`binaries::find_bindir`]).
///
/// With [`postgres_major`](Self::postgres_major)`(M)`, a choice made in code
/// is never silently replaced, the environment's is when it names another
/// major:
///
/// | | docker backend | local backend |
/// |---|---|---|
/// | set in code (`image`, `bindir`; the CLI's `--image`) | used; the server must be M, else [`SandboxError::MajorMismatch`] | used when `postgres --version` is M, else `MajorMismatch` (before starting) |
/// | environment (`ROLLSAFE_POSTGRES_IMAGE`, `ROLLSAFE_PG_BINDIR`) | used when its tag starts with M (`postgres:17`, `registry/pg:17.2`) | used when `postgres --version` is M |
/// | otherwise | `postgres:M` | `/usr/lib/postgresql/M/bin`, `/usr/pgsql-M/bin`, `pg_config --bindir` or PATH when they are M |
///
/// Whatever served it, a sandbox started for major M runs M (checked with
/// `server_version_num`, also on the server backend, which cannot choose).
/// When M can be had from no backend tried, the error is
/// [`SandboxError::MajorUnavailable`], naming the ways to get it.
#[derive(Debug, Clone, Default)]
pub struct SandboxBuilder {
    choice: BackendChoice,
    /// Set in code (or by the CLI's `--image`): wins over a major's image.
    image: Option<String>,
    /// From `ROLLSAFE_POSTGRES_IMAGE`.
    env_image: Option<String>,
    /// Set in code: must hold the requested major.
    bindir: Option<PathBuf>,
    /// From `ROLLSAFE_PG_BINDIR`.
    env_bindir: Option<PathBuf>,
    major: Option<u32>,
    /// `-c name=value` settings a docker or local server starts with.
    settings: Vec<(String, String)>,
}

impl SandboxBuilder {
    /// Defaults overridden by `ROLLSAFE_POSTGRES`, `ROLLSAFE_POSTGRES_IMAGE`
    /// and `ROLLSAFE_PG_BINDIR` when set.
    pub fn from_env() -> Result<SandboxBuilder, SandboxError> {
        let mut b = SandboxBuilder::default();
        if let Ok(v) = std::env::var(ENV_BACKEND) {
            b.choice = v.parse()?;
        }
        if let Ok(v) = std::env::var(ENV_IMAGE) {
            if !v.trim().is_empty() {
                b.env_image = Some(v.trim().to_string());
            }
        }
        if let Ok(v) = std::env::var(ENV_BINDIR) {
            if !v.trim().is_empty() {
                b.env_bindir = Some(PathBuf::from(v.trim()));
            }
        }
        Ok(b)
    }

    pub fn backend(mut self, choice: BackendChoice) -> Self {
        self.choice = choice;
        self
    }

    /// The container image, used as is (see the type's docs for how it
    /// combines with a requested major).
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = Some(image.into());
        self
    }

    /// The directory holding `initdb` and `postgres`, used as is (see the
    /// type's docs for how it combines with a requested major).
    pub fn bindir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bindir = Some(dir.into());
        self
    }

    /// Run PostgreSQL `major` (13, 15, 17, ...): image `postgres:<major>`
    /// for docker, `/usr/lib/postgresql/<major>/bin` for local. See the
    /// type's docs for the precedence of images and directories.
    pub fn postgres_major(mut self, major: u32) -> Self {
        self.major = Some(major);
        self
    }

    /// A setting the server starts with (`-c name=value`), for what only a
    /// start can set, e.g. `shared_preload_libraries` (capture's tests load
    /// `pg_stat_statements`). The server backend cannot honour it and
    /// refuses to start rather than run without it.
    pub fn server_setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    pub fn choice(&self) -> &BackendChoice {
        &self.choice
    }

    /// The requested major, if any.
    pub fn major(&self) -> Option<u32> {
        self.major
    }

    /// The image the docker backend starts.
    pub fn docker_image(&self) -> String {
        if let Some(image) = &self.image {
            return image.clone();
        }
        match (self.major, &self.env_image) {
            (None, Some(env)) => env.clone(),
            (None, None) => DEFAULT_IMAGE.to_string(),
            (Some(m), Some(env)) if docker::image_major(env) == Some(m) => env.clone(),
            (Some(m), _) => format!("postgres:{m}"),
        }
    }

    /// Starts (or, for `server`, attaches to) the server. A docker or
    /// local start first removes what crashed runs left on this host
    /// ([`cleanup`]).
    pub fn start(&self) -> Result<Sandbox, SandboxError> {
        match &self.choice {
            BackendChoice::Server(_) => {}
            BackendChoice::Local => {
                cleanup::reap_local_dirs();
            }
            BackendChoice::Docker | BackendChoice::Auto => {
                cleanup::reap_local_dirs();
                cleanup::reap_containers();
            }
        }
        let backend: Box<dyn Backend> = match &self.choice {
            BackendChoice::Docker => Box::new(
                self.start_docker()
                    .map_err(|e| self.no_way_to_start(vec![(BackendKind::Docker, e)]))?,
            ),
            BackendChoice::Local => Box::new(
                self.start_local()
                    .map_err(|e| self.no_way_to_start(vec![(BackendKind::Local, e)]))?,
            ),
            BackendChoice::Server(_) if !self.settings.is_empty() => {
                return Err(SandboxError::SettingsOnServer {
                    settings: self
                        .settings
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            }
            BackendChoice::Server(url) => Box::new(server::ServerBackend::attach(url)?),
            BackendChoice::Auto => self.start_auto()?,
        };
        let sandbox = Sandbox::new(backend)?;
        match self.major {
            Some(requested) if sandbox.server_major() != requested => {
                Err(SandboxError::MajorMismatch {
                    what: sandbox.describe(),
                    found: sandbox.server_major(),
                    requested,
                    fix: match sandbox.kind() {
                        BackendKind::Docker => format!(
                            "name an image of PostgreSQL {requested}, or none so that postgres:{requested} is used"
                        ),
                        BackendKind::Local => format!(
                            "point the binary directory at PostgreSQL {requested} (e.g. /usr/lib/postgresql/{requested}/bin)"
                        ),
                        BackendKind::Server => format!(
                            "give the URL of a PostgreSQL {requested} server, or use --postgres docker or local"
                        ),
                    },
                })
            }
            _ => Ok(sandbox),
        }
    }

    fn start_docker(&self) -> Result<docker::DockerBackend, SandboxError> {
        docker::DockerBackend::start_with(&self.docker_image(), &self.settings)
    }

    fn start_local(&self) -> Result<local::LocalBackend, SandboxError> {
        let bindir = match (self.major, &self.bindir) {
            (None, explicit) => explicit.clone().or_else(|| self.env_bindir.clone()),
            (Some(requested), Some(explicit)) => {
                // Checked before starting: initdb of the wrong major would
                // cost seconds only to be refused afterwards.
                let dir = binaries::find_bindir(Some(explicit))?;
                match binaries::binaries_major(&dir) {
                    Some(found) if found != requested => {
                        return Err(SandboxError::MajorMismatch {
                            what: format!("binary directory {}", dir.display()),
                            found,
                            requested,
                            fix: format!(
                                "point the binary directory at PostgreSQL {requested} (e.g. /usr/lib/postgresql/{requested}/bin), or give none"
                            ),
                        })
                    }
                    _ => Some(dir),
                }
            }
            (Some(requested), None) => Some(binaries::find_bindir_for_major(
                self.env_bindir.as_deref(),
                requested,
            )?),
        };
        local::LocalBackend::start_with(bindir.as_deref(), &self.settings)
    }

    /// Docker when an engine answers and the image can be had, else local
    /// binaries; one error listing both attempts when neither works.
    fn start_auto(&self) -> Result<Box<dyn Backend>, SandboxError> {
        let docker_err = match self.start_docker() {
            Ok(b) => return Ok(Box::new(b)),
            Err(e) => {
                log::info!("docker backend unavailable, trying local binaries: {e}");
                e
            }
        };
        match self.start_local() {
            Ok(b) => Ok(Box::new(b)),
            Err(local_err) => Err(self.no_way_to_start(vec![
                (BackendKind::Docker, docker_err),
                (BackendKind::Local, local_err),
            ])),
        }
    }

    /// The error for backends that all failed to start. With a requested
    /// major, when every backend failed only because that major is not
    /// there (no image, no binaries, or, among several, no engine), one
    /// line says so and how to get it; otherwise each failure as it was.
    fn no_way_to_start(&self, mut attempts: Vec<(BackendKind, SandboxError)>) -> SandboxError {
        let several = attempts.len() > 1;
        let missing = |e: &SandboxError| match e {
            SandboxError::ImageUnavailable { .. } | SandboxError::BinariesNotFound { .. } => true,
            // With docker as the only choice, a silent engine is the
            // problem to report, not the major.
            SandboxError::DockerUnavailable(_) => several,
            _ => false,
        };
        if let Some(major) = self.major {
            if attempts.iter().all(|(_, e)| missing(e)) {
                let tried = attempts
                    .iter()
                    .map(|(kind, e)| match e {
                        SandboxError::ImageUnavailable { image, detail } => {
                            format!("{kind}: image {image} is not present and could not be pulled: {detail}")
                        }
                        SandboxError::BinariesNotFound { searched } => {
                            format!("{kind}: no PostgreSQL {major} binaries in {searched}")
                        }
                        SandboxError::DockerUnavailable(detail) => {
                            format!("{kind}: no Docker engine answers: {detail}")
                        }
                        other => format!("{kind}: {other}"),
                    })
                    .collect();
                return SandboxError::MajorUnavailable { major, tried };
            }
        }
        if several {
            SandboxError::NoBackend {
                tried: attempts
                    .iter()
                    .map(|(kind, e)| format!("{kind}: {e}"))
                    .collect(),
            }
        } else {
            attempts.remove(0).1
        }
    }
}

/// The shared state behind a sandbox and every database it handed out: the
/// server lives until the last of them is dropped.
struct Shared {
    backend: Box<dyn Backend>,
    /// Unique prefix of this sandbox's database names (pid + random), so
    /// that two sandboxes on one server never collide.
    prefix: String,
    counter: AtomicU64,
    /// `server_version_num` (150004 for 15.4), read once at start.
    version_num: u32,
    /// `STRATEGY = FILE_COPY` on servers we own (PostgreSQL 15+): copying
    /// the template's files beats WAL-logging every block of it.
    file_copy: bool,
}

/// A running throwaway PostgreSQL server. See the module docs.
#[derive(Clone)]
pub struct Sandbox {
    shared: Arc<Shared>,
}

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Sandbox {
    /// A builder with defaults (auto backend, `postgres:15`, any major).
    pub fn builder() -> SandboxBuilder {
        SandboxBuilder::default()
    }

    fn new(backend: Box<dyn Backend>) -> Result<Sandbox, SandboxError> {
        let mut client = db::connect(backend.admin_url())?;
        let version_num: i32 = client
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .map_err(|e| SandboxError::sql("reading the server version", e))?
            .get(0);
        let prefix = format!("rs_{}_{:04x}", std::process::id(), rand::random::<u16>());
        Ok(Sandbox {
            shared: Arc::new(Shared {
                file_copy: backend.owns_server() && version_num >= 150000,
                version_num: u32::try_from(version_num).unwrap_or(0),
                backend,
                prefix,
                counter: AtomicU64::new(0),
            }),
        })
    }

    pub fn kind(&self) -> BackendKind {
        self.shared.backend.kind()
    }

    /// One line: backend, where it runs (no password).
    pub fn describe(&self) -> String {
        self.shared.backend.describe()
    }

    /// Superuser URL to the maintenance database. Contains a password.
    pub fn admin_url(&self) -> &str {
        self.shared.backend.admin_url()
    }

    /// A superuser connection to the maintenance database.
    pub fn connect_admin(&self) -> Result<Client, SandboxError> {
        Ok(db::connect(self.admin_url())?)
    }

    /// The server's major version (`server_version_num / 10000`: 15 for
    /// 15.4, 9 for 9.6), as read when the sandbox started.
    pub fn server_major(&self) -> u32 {
        self.shared.version_num / 10000
    }

    /// `SELECT version()`.
    pub fn server_version(&self) -> Result<String, SandboxError> {
        let mut c = self.connect_admin()?;
        let row = c
            .query_one("SELECT version()", &[])
            .map_err(|e| SandboxError::sql("reading the server version", e))?;
        Ok(row.get(0))
    }

    fn next_name(&self) -> String {
        let n = self.shared.counter.fetch_add(1, Ordering::Relaxed);
        format!("{}_{n}", self.shared.prefix)
    }

    /// A new, empty database of its own, dropped when the handle is.
    pub fn fresh_database(&self) -> Result<Database, SandboxError> {
        self.fresh_database_owned_by(None)
    }

    /// A new, empty database owned by `owner` (a role of this sandbox) when
    /// given: it may create schemas and trusted extensions there, as a
    /// managed database's owner role may.
    pub fn fresh_database_owned_by(&self, owner: Option<&Role>) -> Result<Database, SandboxError> {
        // template0 on shared servers: template1 there may carry whatever
        // its owners added. On our own servers template1 is pristine.
        let template = if self.shared.backend.owns_server() {
            "template1"
        } else {
            "template0"
        };
        self.create_from(template, owner)
    }

    /// A copy of `source` (schema and rows), dropped when the handle is.
    /// `source` must have no open connections (a PostgreSQL rule for
    /// templates): close clients on it first.
    pub fn clone_database(&self, source: &Database) -> Result<Database, SandboxError> {
        self.create_from(&source.name, None)
    }

    /// [`clone_database`](Self::clone_database), the copy owned by `owner`
    /// when given (the objects in it keep their owners).
    pub fn clone_database_owned_by(
        &self,
        source: &Database,
        owner: Option<&Role>,
    ) -> Result<Database, SandboxError> {
        self.create_from(&source.name, owner)
    }

    fn create_from(&self, template: &str, owner: Option<&Role>) -> Result<Database, SandboxError> {
        let name = self.next_name();
        let strategy = if self.shared.file_copy {
            " STRATEGY = FILE_COPY"
        } else {
            ""
        };
        let owner = owner.map_or(String::new(), |r| {
            format!(" OWNER {}", quote_ident(r.name()))
        });
        let sql = format!(
            "CREATE DATABASE {} TEMPLATE {}{strategy}{owner}",
            quote_ident(&name),
            quote_ident(template)
        );
        let started = std::time::Instant::now();
        let mut admin = self.connect_admin()?;
        let connected = started.elapsed();
        // A template must have no other sessions while it is copied; an
        // autovacuum worker or a closing client can hold it for a moment
        // (SQLSTATE 55006, object_in_use), so a few short retries make the
        // copy dependable under load instead of failing a whole run.
        let mut attempt = 0;
        loop {
            match admin.batch_execute(&sql) {
                Ok(()) => {
                    log::debug!(
                        "clone {template} -> {name}: {attempt} retries, {:?} (connect {:?})",
                        started.elapsed(),
                        connected
                    );
                    break;
                }
                Err(e)
                    if attempt < 5
                        && e.code() == Some(&postgres::error::SqlState::OBJECT_IN_USE) =>
                {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(200 * attempt));
                }
                Err(e) => {
                    return Err(SandboxError::sql(
                        format!("creating database {name} from {template}"),
                        e,
                    ))
                }
            }
        }
        copy_settings(&mut admin, template, &name)?;
        // Our own servers go whole; on a shared one each database is
        // listed, so a stopped run drops it.
        let registration = (!self.shared.backend.owns_server()).then(|| {
            cleanup::register(cleanup::Held::Database {
                admin_url: self.admin_url().to_string(),
                name: name.clone(),
            })
        });
        Ok(Database {
            url: db::with_database(self.admin_url(), &name),
            name,
            shared: Arc::clone(&self.shared),
            _registration: registration,
        })
    }
}

/// Gives `copy` the settings `ALTER DATABASE template SET …` and `ALTER
/// ROLE … IN DATABASE template SET …` gave its template: `CREATE DATABASE
/// … TEMPLATE` copies the data, not those, and a history often relies on
/// them (a project's init script sets the database's `search_path`, and
/// its migrations then name tables unqualified). Each value goes through
/// `set_config` and `SET … FROM CURRENT`, so it is stored as the server
/// spells it (a list such as `search_path` stays a list).
fn copy_settings(
    admin: &mut postgres::Client,
    template: &str,
    copy: &str,
) -> Result<(), SandboxError> {
    let rows = admin
        .query(
            "SELECT r.rolname, s.setconfig FROM pg_db_role_setting s \
             JOIN pg_database d ON d.oid = s.setdatabase \
             LEFT JOIN pg_roles r ON r.oid = s.setrole \
             WHERE d.datname = $1 ORDER BY 1 NULLS FIRST",
            &[&template],
        )
        .map_err(|e| {
            SandboxError::sql(format!("reading the settings of database {template}"), e)
        })?;
    for row in rows {
        let role: Option<String> = row.get(0);
        let target = match &role {
            Some(r) => format!("ROLE {} IN DATABASE {}", quote_ident(r), quote_ident(copy)),
            None => format!("DATABASE {}", quote_ident(copy)),
        };
        for setting in row.get::<_, Vec<String>>(1) {
            let Some((name, value)) = setting.split_once('=') else {
                continue;
            };
            let guc = name
                .split('.')
                .map(quote_ident)
                .collect::<Vec<_>>()
                .join(".");
            let copied = admin
                .execute("SELECT set_config($1, $2, false)", &[&name, &value])
                .and_then(|_| {
                    admin.batch_execute(&format!(
                        "ALTER {target} SET {guc} FROM CURRENT; RESET {guc}"
                    ))
                });
            copied.map_err(|e| {
                SandboxError::sql(
                    format!("copying the setting {name} of database {template} to {copy}"),
                    e,
                )
            })?;
        }
    }
    Ok(())
}

/// A database of a sandbox, dropped (with `FORCE`) when this is dropped.
pub struct Database {
    name: String,
    url: String,
    shared: Arc<Shared>,
    _registration: Option<cleanup::Registration>,
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Database({} on {})",
            self.name,
            self.shared.backend.describe()
        )
    }
}

impl Database {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Superuser URL of this database. Contains a password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A new superuser connection to this database.
    pub fn connect(&self) -> Result<Client, ConnectError> {
        db::connect(&self.url)
    }

    /// Which backend serves it.
    pub fn kind(&self) -> BackendKind {
        self.shared.backend.kind()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if cleanup::stopping() {
            // The run is being stopped: `cleanup::drop_all` removes it, and
            // its server may already be gone.
            return;
        }
        let sql = format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            quote_ident(&self.name)
        );
        let result = db::connect(self.shared.backend.admin_url())
            .map_err(|e| e.to_string())
            .and_then(|mut c| c.batch_execute(&sql).map_err(|e| e.to_string()));
        if let Err(e) = result {
            log::warn!("could not drop sandbox database {}: {e}", self.name);
        }
    }
}

/// Runs `cmd` with a deadline; None when it did not finish in time (it is
/// killed) or could not be started. Used to probe `docker` and `pg_config`.
pub(crate) fn run_with_timeout(
    cmd: &mut std::process::Command,
    timeout: std::time::Duration,
) -> Option<std::process::Output> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().ok(),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// A random password for servers we start; never printed.
pub(crate) fn random_password() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    Alphanumeric.sample_string(&mut rand::rng(), 24)
}

#[cfg(test)]
mod tests {
    use super::SandboxBuilder;

    fn with_env_image(image: &str) -> SandboxBuilder {
        SandboxBuilder {
            env_image: Some(image.to_string()),
            ..SandboxBuilder::default()
        }
    }

    #[test]
    fn image_without_a_major_is_explicit_then_environment_then_default() {
        assert_eq!(SandboxBuilder::default().docker_image(), "postgres:15");
        assert_eq!(with_env_image("pg:custom").docker_image(), "pg:custom");
        assert_eq!(
            with_env_image("pg:custom").image("mine:1").docker_image(),
            "mine:1"
        );
    }

    #[test]
    fn a_major_names_the_image_unless_the_environment_names_that_major() {
        assert_eq!(
            SandboxBuilder::default().postgres_major(17).docker_image(),
            "postgres:17"
        );
        // ci/test.sh exports ROLLSAFE_POSTGRES_IMAGE=postgres:15: asking for
        // 13 must not get 15.
        assert_eq!(
            with_env_image("postgres:15")
                .postgres_major(13)
                .docker_image(),
            "postgres:13"
        );
        assert_eq!(
            with_env_image("registry:5000/pg:17.2-bookworm")
                .postgres_major(17)
                .docker_image(),
            "registry:5000/pg:17.2-bookworm"
        );
        assert_eq!(
            with_env_image("pg:latest")
                .postgres_major(18)
                .docker_image(),
            "postgres:18"
        );
    }

    #[test]
    fn an_image_set_in_code_wins_over_the_major() {
        // Used as is; start() then refuses it if it is not that major.
        assert_eq!(
            SandboxBuilder::default()
                .image("postgres:15")
                .postgres_major(13)
                .docker_image(),
            "postgres:15"
        );
    }
}

//! `rollsafe capture -- CMD`: the project's own test command run against
//! a throwaway database at a migration version, and what the server saw
//! it run written as a statement set.
//!
//! The database is built as production's is: the migrations applied up
//! to the version by a login role that owns the database and is not a
//! superuser, each with its tool's history row ([`crate::migrate`]), so
//! an app that checks or runs its migrations at start finds them
//! applied. A framework's history rollsafe does not write: what its own
//! migrate sent to its own tables is written after the migrations
//! ([`FrameworkHistory`]), so Rails' `check_pending!` and a test set-up
//! running `alembic upgrade head` find the database at its head. The command connects as the app's role (`--app-role`,
//! created before the first migration so the migrations' GRANTs give it
//! what it gets), else as that owner; `DATABASE_URL` and libpq's `PG*`
//! variables say where. It is the project's own code, run with the
//! project's permissions, against the sandbox only.
//!
//! What it ran comes from the server's statement log, read back through
//! SQL as the sandbox's superuser (`pg_ls_logdir`, `pg_read_file`), so
//! every backend works the same: the server logs as JSON lines
//! (`log_destination = 'jsonlog'`, PostgreSQL 15+, with the logging
//! collector), and `log_statement = 'all'` is set on the capture's
//! database only (`ALTER DATABASE`), after the migrations, so neither
//! they nor other databases of the server are in it. Docker and local
//! servers are started that way; an existing server (`--postgres URL`)
//! must already run the collector with `jsonlog` and be reached as a
//! superuser, else capture stops and says so. The collector writes
//! asynchronously: a marker statement run after the command, found in
//! the log, says the log is complete.
//!
//! Reads that only ask about the server (a driver's type lookup at
//! connect, `select pg_catalog.version()`, a framework's check that its
//! table exists, `SELECT 1`) are the drivers' and frameworks', not the
//! app's: left out and counted.
//!
//! A statement that names a table the migrations do not create (a
//! scratch table of the tests) is found by preparing it on a copy of the
//! database taken before the command ran: PostgreSQL's own name
//! resolution says `undefined_table`, so no table list is guessed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::log;
use super::{write_observed, CapturedSet, Excluded, Header, Observed, Source};
use crate::catalog::Catalog;
use crate::pg::quote_ident;
use crate::sandbox::{Sandbox, SandboxBuilder, SandboxError};

/// What to capture: the command, the database it runs against, the
/// app it is.
#[derive(Debug, Clone)]
pub struct TestRun {
    /// The app version's name (`-- app:`).
    pub app: String,
    /// Apply the migrations up to this version (rollsafe's version); None:
    /// all of them.
    pub at: Option<i32>,
    /// The role the app connects as, created before the first migration;
    /// None: the database's owner.
    pub app_role: Option<String>,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Where it runs; None: the current directory.
    pub dir: Option<PathBuf>,
    /// A framework's test run (Django's `test_<name>`, a Rails test
    /// database, a database per test from a template): the role it runs
    /// as may create databases, and every database it creates on the
    /// server is captured, each from after its own schema set-up (its
    /// last write to `history_table`).
    pub creates_databases: bool,
    /// The table the migration tool records migrations in, when the
    /// catalogue's layout does not say it (a framework's).
    pub history_table: Option<String>,
    /// A framework's own tables as its migrate wrote them, written on the
    /// database after the migrations (rollsafe records none of a
    /// framework's): tests that check for pending migrations (Rails'
    /// `check_pending!`) or apply them first (`alembic upgrade head`) find
    /// them applied, as on production's database.
    pub framework_history: Option<FrameworkHistory>,
}

/// What a framework's migrate sent to its own tables (its history table,
/// Rails' `ar_internal_metadata`: their creation and their rows, values
/// written in), by the label of the migration it came with, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameworkHistory {
    pub by_label: Vec<(String, Vec<String>)>,
}

/// A finished capture.
#[derive(Debug, Clone)]
pub struct TestCapture {
    pub set: CapturedSet,
    /// The schema version the command ran at (its label).
    pub label: String,
    /// How long the command itself ran.
    pub command_time: Duration,
    /// How long the whole capture took (server, migrations, command, log).
    pub total_time: Duration,
}

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Header(#[from] super::CaptureError),
    #[error("{0}")]
    Sandbox(#[from] SandboxError),
    #[error("no command to capture: put the test command after `--` (e.g. rollsafe capture … -- pytest -q)")]
    NoCommand,
    #[error("{catalog} holds no migration to capture at; point --migrations at the project's migrations")]
    NoMigrations { catalog: String },
    #[error("capture reads the server's JSON log, which PostgreSQL {major} does not write (jsonlog is 15+); use a PostgreSQL 15 or later server (--image postgres:15, or local binaries of 15+)")]
    OldServer { major: u32 },
    #[error("the server does not write a JSON log capture can read ({why}); on a server of your own set logging_collector = on and log_destination to include 'jsonlog' in postgresql.conf, restart it, and pass a superuser URL, or use --postgres local or docker, which rollsafe starts that way")]
    NoLog { why: String },
    #[error("applying the migrations up to {label} failed: {detail}; fix the migration, or capture at an earlier version with --at")]
    Migrate { label: String, detail: String },
    #[error("writing the framework's {table} as its migrate wrote it with {label} failed: {detail}; the tests would find migrations pending: please report this to rollsafe with the statement")]
    FrameworkHistory {
        table: String,
        label: String,
        detail: String,
    },
    #[error("could not start the test command `{command}`: {detail}; check that it is installed and on PATH")]
    Spawn { command: String, detail: String },
    #[error("the test command `{command}` failed ({status}); nothing was written: fix the tests (their output is above), then capture again")]
    CommandFailed { command: String, status: String },
    #[error("reading the server's log failed: {0}")]
    Log(String),
}

/// The server settings a capture's own server starts with: the JSON
/// log, in one file for the whole run.
pub fn log_settings(builder: SandboxBuilder) -> SandboxBuilder {
    if matches!(builder.choice(), crate::sandbox::BackendChoice::Server(_)) {
        return builder;
    }
    builder
        .server_setting("logging_collector", "on")
        .server_setting("log_destination", "jsonlog")
        .server_setting("log_rotation_size", "0")
        .server_setting("log_rotation_age", "0")
}

/// Runs `run.command` against a database of `sandbox` at the wanted
/// version of `catalog`, and writes what it ran.
pub fn capture_tests(
    sandbox: &Sandbox,
    catalog: &Catalog,
    run: &TestRun,
) -> Result<TestCapture, RunError> {
    let started = Instant::now();
    let program = run.command.first().ok_or(RunError::NoCommand)?;
    let at = match run.at {
        Some(v) => v,
        None => {
            catalog
                .migrations()
                .last()
                .ok_or_else(|| RunError::NoMigrations {
                    catalog: catalog.source.to_string(),
                })?
                .version
        }
    };
    let label = catalog
        .get(at)
        .map_or_else(|| at.to_string(), |m| m.label.clone());
    let shown = shell_words(&run.command);
    let header = Header::at_label(
        &run.app,
        &label,
        format!("the test command `{shown}` at {label}"),
    )?;
    check_log(sandbox)?;

    // The app's role first: the migrations' GRANTs give it what it gets.
    let app_role = match &run.app_role {
        Some(name) => Some(sandbox.create_login_role(name)?),
        None => None,
    };
    let owner = sandbox.create_login_role(&sandbox.unique_role_name("migrator"))?;
    let db = sandbox.fresh_database_owned_by(Some(&owner))?;
    let options = crate::migrate::Options {
        target: Some(at),
        ..Default::default()
    };
    crate::migrate::migrate(&owner.url(db.url(), &[]), catalog, &options).map_err(|e| {
        RunError::Migrate {
            label: label.clone(),
            detail: crate::db::scrub(&crate::errors::one_line(&e), db.url()),
        }
    })?;
    if let Some(history) = &run.framework_history {
        write_framework_history(&owner.url(db.url(), &[]), catalog, at, history, run)?;
    }
    let pristine = sandbox.clone_database_owned_by(&db, Some(&owner))?;
    log_statements_of(sandbox, db.name())?;

    let app_url = match &app_role {
        Some(role) => role.url(db.url(), &[]),
        None => owner.url(db.url(), &[]),
    };
    let history = run
        .history_table
        .as_deref()
        .map(|t| t.rsplit('.').next().unwrap_or(t).to_lowercase())
        .unwrap_or_else(|| history_table(catalog));
    let existing = match run.creates_databases {
        true => Some(let_create_databases(
            sandbox,
            app_role.as_ref().unwrap_or(&owner).name(),
        )?),
        false => None,
    };
    // The server's log holds earlier runs too (a base's capture, whose
    // test database is gone): this run's lines start at its mark.
    let start = mark_log(&app_url, "starts")?;
    let clock = Instant::now();
    run_command(run, program, &shown, &app_url)?;
    let command_time = clock.elapsed();

    let created = existing.as_deref().map(|e| (e, start.as_str()));
    let executed = read_log(sandbox, &app_url, db.name(), created, &history)?;
    let groups = log::group(&executed);
    let mut excluded = Excluded {
        failed: log::failed_only(&executed),
        ..Excluded::default()
    };
    let mut pristine_client = pristine
        .connect()
        .map_err(|e| RunError::Log(e.to_string()))?;
    let mut observed = Vec::new();
    for g in &groups {
        if g.text.to_lowercase().contains(&history) {
            excluded.bookkeeping += 1;
        } else if crate::capture::introspect::introspects(&g.text) {
            excluded.introspection += 1;
        } else if names_a_scratch_table(&mut pristine_client, &g.text) {
            excluded.scratch += 1;
        } else {
            let mut o = Observed::from_group(g);
            if crate::sql::classify::classify(&o.query) == crate::sql::classify::Class::Write {
                o.params =
                    super::params::write_params(&mut pristine_client, &o.query, o.examples.first());
            }
            observed.push(o);
        }
    }
    let set = write_observed(&header, &observed, Source::TestRun, excluded);
    Ok(TestCapture {
        set,
        label,
        command_time,
        total_time: started.elapsed(),
    })
}

/// Writes what the framework's migrate sent to its own tables with the
/// migrations of `catalog` up to `at`, as the role that applied them.
fn write_framework_history(
    url: &str,
    catalog: &Catalog,
    at: i32,
    history: &FrameworkHistory,
    run: &TestRun,
) -> Result<(), RunError> {
    let failed = |label: &str, detail: String| RunError::FrameworkHistory {
        table: run.history_table.clone().unwrap_or_default(),
        label: label.to_string(),
        detail: crate::db::scrub(&detail, url),
    };
    let first = catalog
        .migrations()
        .first()
        .map_or("", |m| m.label.as_str());
    let mut client = crate::db::connect(url).map_err(|e| failed(first, e.to_string()))?;
    let applied = catalog.migrations().iter().filter(|m| m.version <= at);
    for m in applied {
        let sent = history
            .by_label
            .iter()
            .filter(|(label, _)| *label == m.label)
            .flat_map(|(_, sent)| sent);
        for statement in sent {
            client.batch_execute(statement).map_err(|e| {
                let excerpt = crate::capture::introspect::excerpt(statement);
                failed(
                    &m.label,
                    format!("`{excerpt}`: {}", crate::errors::one_line(&e)),
                )
            })?;
        }
    }
    Ok(())
}

/// Turns on the statement log (with every bound value whole) for the
/// sessions that connect to database `dbname` from now on.
pub fn log_statements_of(sandbox: &Sandbox, dbname: &str) -> Result<(), SandboxError> {
    let mut admin = sandbox.connect_admin()?;
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {0} SET log_statement = 'all'; ALTER DATABASE {0} SET log_parameter_max_length = -1",
            quote_ident(dbname)
        ))
        .map_err(|e| SandboxError::Sql {
            context: "turning on the statement log".into(),
            detail: crate::errors::one_line(&e),
        })
}

/// The command line as a person would type it (for messages and the
/// set's header).
fn shell_words(command: &[String]) -> String {
    command
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the server writes a JSON log capture can read.
pub fn check_log(sandbox: &Sandbox) -> Result<(), RunError> {
    let major = sandbox.server_major();
    if major < 15 {
        return Err(RunError::OldServer { major });
    }
    let mut admin = sandbox.connect_admin()?;
    let row = admin
        .query_one(
            "SELECT current_setting('logging_collector'), current_setting('log_destination'),
                    (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)",
            &[],
        )
        .map_err(|e| RunError::NoLog {
            why: crate::errors::one_line(&e),
        })?;
    let (collector, destination, superuser): (String, String, bool) =
        (row.get(0), row.get(1), row.get(2));
    let why = if collector != "on" {
        format!("logging_collector is {collector}")
    } else if !destination.split(',').any(|d| d.trim() == "jsonlog") {
        format!("log_destination is {destination}")
    } else if !superuser {
        "the URL's role is not a superuser, which reading the log needs".to_string()
    } else {
        return Ok(());
    };
    Err(RunError::NoLog { why })
}

/// Runs the command with the database's connection in its environment;
/// its output goes where rollsafe's goes.
fn run_command(run: &TestRun, program: &str, shown: &str, url: &str) -> Result<(), RunError> {
    let mut cmd = Command::new(program);
    cmd.args(&run.command[1..]);
    if let Some(dir) = &run.dir {
        cmd.current_dir(dir);
    }
    database_env(&mut cmd, url);
    let status = cmd.status().map_err(|e| RunError::Spawn {
        command: shown.to_string(),
        detail: e.to_string(),
    })?;
    if status.success() {
        return Ok(());
    }
    Err(RunError::CommandFailed {
        command: shown.to_string(),
        status: status.to_string(),
    })
}

/// Points `cmd` at database `url` the ways projects read it:
/// `DATABASE_URL` (without rollsafe's query settings) and libpq's `PG*`
/// variables. `DATABASE_URL`'s scheme is the one the project's clients
/// take: `postgresql://` in a SQLAlchemy project (an `alembic.ini` in the
/// command's folder or its `migrations/`, Flask-Migrate's), since
/// SQLAlchemy 1.4 and later refuse `postgres://` ("Can't load plugin:
/// sqlalchemy.dialects:postgres"); `postgres://` everywhere else, the
/// Heroku convention some settings test for (a Django settings file that
/// adds `django.contrib.postgres` only when the URL starts with
/// `postgres://`). libpq, psycopg, dj-database-url, ActiveRecord,
/// node-postgres, pgx, Ecto and Prisma read both.
pub fn database_env(cmd: &mut Command, url: &str) {
    if let Ok(u) = url::Url::parse(url) {
        let decode = |s: &str| {
            url::form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map_or(s.to_string(), |(_, v)| v.into_owned())
        };
        cmd.env("PGHOST", u.host_str().unwrap_or("localhost"))
            .env("PGPORT", u.port().unwrap_or(5432).to_string())
            .env("PGUSER", decode(u.username()))
            .env("PGPASSWORD", decode(u.password().unwrap_or("")))
            .env("PGDATABASE", u.path().trim_start_matches('/'));
        let mut plain = u.clone();
        plain.set_query(None);
        let dir = cmd
            .get_current_dir()
            .map(Path::to_path_buf)
            .or_else(|| std::env::current_dir().ok());
        let scheme = match dir.as_deref().is_some_and(sqlalchemy_project) {
            true => "postgresql",
            false => "postgres",
        };
        // (Refused only between special and other schemes: never here.)
        let _ = plain.set_scheme(scheme);
        cmd.env("DATABASE_URL", plain.as_str());
    }
}

/// Whether `dir` is the root of a SQLAlchemy project whose migrations
/// Alembic runs (`alembic.ini`, or Flask-Migrate's `migrations/alembic.ini`).
fn sqlalchemy_project(dir: &Path) -> bool {
    dir.join("alembic.ini").is_file() || dir.join("migrations/alembic.ini").is_file()
}

/// How long the log may take to show the marker: the collector writes
/// what it is sent at once, so this is only a bound for a stuck server.
const LOG_WAIT: Duration = Duration::from_secs(20);

/// What the log says ran on database `dbname`, once a marker statement
/// run after the command shows up in it (the marker left out).
fn read_log(
    sandbox: &Sandbox,
    app_url: &str,
    dbname: &str,
    created_after: Option<(&[String], &str)>,
    history: &str,
) -> Result<Vec<log::Executed>, RunError> {
    let (text, marker) = read_log_text(sandbox, app_url)?;
    let (existing, text) = match created_after {
        Some((existing, start)) => (
            Some(existing),
            text.find(start).map_or(&text[..], |at| &text[at..]),
        ),
        None => (None, &text[..]),
    };
    let created = |db: &str| existing.is_some_and(|e| !e.iter().any(|x| x == db));
    let mut sent = log::read_sent_in(text, |db| db == dbname || created(db));
    sent.retain(|s| !s.text.contains(&marker) && !s.text.contains("rollsafe_capture_starts_"));
    // A database the run created is set up by the tests' framework first
    // (its migrations, its history rows): only what follows is the app's.
    let set_up_until: std::collections::BTreeMap<&str, usize> = sent
        .iter()
        .enumerate()
        .filter(|(_, s)| s.database != dbname && s.text.to_lowercase().contains(history))
        .map(|(i, s)| (s.database.as_str(), i))
        .collect();
    Ok(sent
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            set_up_until
                .get(s.database.as_str())
                .map_or(true, |end| i > end)
        })
        .map(|(_, s)| log::executed(s.clone()))
        .collect())
}

/// Lets `role` create databases and logs every statement of its sessions,
/// in whichever database (a test database is created after the capture's
/// own, without its settings); the databases the server has now, so
/// that the ones the run creates can be told apart.
fn let_create_databases(sandbox: &Sandbox, role: &str) -> Result<Vec<String>, SandboxError> {
    let mut admin = sandbox.connect_admin()?;
    let sql_error = |e: postgres::Error| SandboxError::Sql {
        context: "letting the test role create databases".into(),
        detail: crate::errors::one_line(&e),
    };
    admin
        .batch_execute(&format!(
            "ALTER ROLE {0} CREATEDB; ALTER ROLE {0} SET log_statement = 'all'; ALTER ROLE {0} SET log_parameter_max_length = -1",
            quote_ident(role)
        ))
        .map_err(sql_error)?;
    Ok(admin
        .query("SELECT datname FROM pg_database", &[])
        .map_err(sql_error)?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Runs a statement as `url` that the log shows (`url`'s database logs
/// every statement), and returns the name it holds: where in the log a
/// run starts or ends.
pub fn mark_log(url: &str, what: &str) -> Result<String, RunError> {
    // An alias, not a literal: literals become parameters in the log's
    // reading, an identifier stays in the text.
    let marker = format!("rollsafe_capture_{what}_{}", uuid::Uuid::new_v4().simple());
    let mut app = crate::db::connect(url).map_err(|e| RunError::Log(e.to_string()))?;
    app.batch_execute(&format!("SELECT 1 AS {marker}"))
        .map_err(|e| RunError::Log(crate::errors::one_line(&e)))?;
    Ok(marker)
}

/// The server's whole JSON log, once a marker statement run as `url`
/// after the command shows up in it, and the marker (a statement of
/// `url`'s database holding it is the marker's own).
pub fn read_log_text(sandbox: &Sandbox, url: &str) -> Result<(String, String), RunError> {
    // An alias, not a literal: literals become parameters in the log's
    // reading, an identifier stays in the text.
    let marker = mark_log(url, "ends")?;
    let mut admin = sandbox.connect_admin()?;
    let deadline = Instant::now() + LOG_WAIT;
    loop {
        // Every JSON log file, oldest first: an existing server may
        // rotate its log during the run.
        let text: String = admin
            .query_one(
                "SELECT coalesce(string_agg(pg_read_file(current_setting('log_directory') || '/' || name), '' ORDER BY modification, name), '')
                   FROM pg_ls_logdir() WHERE name LIKE '%.json'",
                &[],
            )
            .map_err(|e| RunError::Log(crate::errors::one_line(&e)))?
            .get(0);
        if text.contains(&marker) {
            return Ok((text, marker));
        }
        if Instant::now() >= deadline {
            return Err(RunError::Log(format!(
                "the server's log did not show the end of the run within {}s",
                LOG_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The migration tool's history table (its last name part, lower case):
/// an app that checks or runs its migrations at start reads and writes
/// it, which is the tool's bookkeeping, not the app's.
fn history_table(catalog: &Catalog) -> String {
    let table = crate::migrate::history::ToolHistory(catalog.layout).table();
    table.rsplit('.').next().unwrap_or(table).to_lowercase()
}

/// Whether `sql` names a relation the migrated database (before the
/// tests ran) does not have: PostgreSQL's parse analysis says so.
fn names_a_scratch_table(c: &mut postgres::Client, sql: &str) -> bool {
    match c.prepare(sql) {
        Ok(_) => false,
        Err(e) => matches!(e.code().map(|c| c.code()), Some("42P01") | Some("3F000")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project's command gets the database as `DATABASE_URL` (the
    /// scheme its clients take: `postgresql://` for SQLAlchemy, which
    /// refuses `postgres://`; `postgres://` for the others) and as libpq's
    /// variables, the password decoded, rollsafe's query settings left out.
    #[test]
    fn the_command_gets_its_url_and_libpq_variables() {
        let url =
            "postgres://rs_migrator:p%40ss@127.0.0.1:5433/rs_db_1?options=-c%20lock_timeout%3D1s";
        let env_in = |dir: &Path| {
            let mut cmd = Command::new("true");
            cmd.current_dir(dir);
            database_env(&mut cmd, url);
            cmd.get_envs()
                .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
                .collect::<std::collections::BTreeMap<String, String>>()
        };
        let project = tempfile::tempdir().unwrap();
        let env = env_in(project.path());
        assert_eq!(
            env["DATABASE_URL"],
            "postgres://rs_migrator:p%40ss@127.0.0.1:5433/rs_db_1"
        );
        assert_eq!(env["PGPASSWORD"], "p@ss");
        assert_eq!(env["PGPORT"], "5433");
        assert_eq!(env["PGDATABASE"], "rs_db_1");
        std::fs::create_dir(project.path().join("migrations")).unwrap();
        std::fs::write(project.path().join("migrations/alembic.ini"), "[alembic]\n").unwrap();
        assert_eq!(
            env_in(project.path())["DATABASE_URL"],
            "postgresql://rs_migrator:p%40ss@127.0.0.1:5433/rs_db_1"
        );
    }
}

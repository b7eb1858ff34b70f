//! A project whose migrations are code (Django, Alembic, Rails/ActiveRecord,
//! Ecto, Knex, …): its framework's own migrate command run against a fresh
//! database of a throwaway server, and what the server received read back
//! as the project's [`Catalog`] — the same migration set a SQL folder
//! yields, so the rehearsal, checks and reports learn nothing about
//! frameworks (design.md, "Frameworks").
//!
//! The command runs in the project's root with `DATABASE_URL` and libpq's
//! `PG*` variables set, as a login role that owns the database and is not
//! a superuser (a migrator's rights in production). It is the project's
//! own code in the environment rollsafe was given: nothing of the
//! project's runtime is installed here. The server's statement log (the
//! JSON log capture reads, [`crate::capture::run`]) says what it sent;
//! [`sent`] splits that at the history-table writes, leaves out the
//! framework's bookkeeping, and keeps each migration's transactions.
//!
//! A migration that reads the project's rows (Django `RunPython`, Ruby in
//! `up`, Alembic through `op.get_bind()`) sent what it sent because the
//! database was empty: it carries how its framework applies it alone on
//! a database with rows ([`crate::catalog::ExternalApply`]: the
//! one-migration command, the history rows before it, the framework's
//! tables), which a rehearsal runs on its seeded path; its SQL as sent is
//! what it does to an empty database. A command rollsafe cannot aim at
//! one migration (a `--migrate-command` of the user's) leaves it marked
//! not runnable where it would be judged, naming it and why, and kept as
//! sent where it only builds the schema under `--since` ([`Read::catalog`]).
//!
//! Not here: detection of the framework ([`detect`]), reading the log
//! lines ([`crate::capture::log`]), the rehearsal (`verify`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::capture::log::read_sent;
use crate::capture::run::{
    check_log, database_env, log_statements_of, read_log_text, FrameworkHistory, RunError,
};
use crate::catalog::layouts::Step;
use crate::catalog::{Added, Catalog, CatalogError, Execution, Layout, Source};
use crate::sandbox::{Sandbox, SandboxError};

pub mod detect;
pub mod sent;
mod settings_names;

pub use detect::{detect, Framework};

/// A project and how to run its migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// Where the command runs.
    pub root: PathBuf,
    /// The framework, when one was detected.
    pub framework: Option<Framework>,
    /// The shell command that applies every pending migration.
    pub command: String,
    /// The table whose writes end a migration.
    pub history: String,
}

impl Project {
    /// The framework project around `dir` (a migrations folder or the
    /// root), with `command` and `history` overriding what the framework
    /// runs and records (`--migrate-command`, `--history-table`). None
    /// when no framework is detected and no command is given.
    pub fn find(
        dir: &Path,
        command: Option<&str>,
        history: Option<&str>,
    ) -> Result<Option<Project>, FrameworkError> {
        let detected = detect(dir);
        let (root, framework) = match detected {
            Some((root, f)) => (root, Some(f)),
            None if command.is_some() => (dir.to_path_buf(), None),
            None => return Ok(None),
        };
        let command = match (command, framework) {
            (Some(c), _) => c.to_string(),
            (None, Some(f)) => f.command_at(&root),
            (None, None) => unreachable!("no framework and no command returned above"),
        };
        let history = match (history, framework) {
            (Some(h), _) => h.to_string(),
            (None, Some(f)) => f.history().to_string(),
            (None, None) => {
                return Err(FrameworkError::NoHistoryTable { command });
            }
        };
        Ok(Some(Project {
            root,
            framework,
            command,
            history,
        }))
    }

    /// `Django`, …, or `a migrate command` for a command of the user's
    /// where no framework was detected. A `--migrate-command` in a
    /// detected project still runs its framework (its settings' variables
    /// set, a wrapper script): the framework is named, the command shown.
    pub fn framework_name(&self) -> String {
        match self.framework {
            Some(f) => f.name().to_string(),
            None => "a migrate command".to_string(),
        }
    }
}

#[derive(Debug, Error)]
pub enum FrameworkError {
    #[error("{0}")]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Capture(#[from] RunError),
    #[error("--migrate-command `{command}`: rollsafe does not know which table it records migrations in; pass --history-table TABLE (the table whose INSERT or UPDATE marks a migration applied)")]
    NoHistoryTable { command: String },
    #[error("could not start the migrate command `{command}`: {detail}; run rollsafe where the project's tools are installed (its own CI job)")]
    Spawn { command: String, detail: String },
    /// One line (its output's last line in it, for a report); the last
    /// lines themselves in `output`, for a terminal ([`FrameworkError::output`]).
    #[error("the migrate command `{command}` failed ({status}); nothing was rehearsed{}{}{}{}", ends_with(.output), .refused.as_deref().map_or_else(String::new, |r| format!("; the first statement the server refused: {r}")), .elsewhere.as_deref().map_or_else(String::new, |e| elsewhere_advice(e, command, pass_on)), .advice.as_deref().unwrap_or_default())]
    CommandFailed {
        command: String,
        status: String,
        /// The first statement the throwaway server refused while the
        /// command ran, with the server's error (`ALTER TABLE dashboards
        /// …: relation "dashboards" does not exist`): the cause a
        /// traceback's last line may not show.
        refused: Option<String>,
        /// What to do, when the output says what the project lacks (a
        /// Django project not told its settings module): `. …`.
        advice: Option<String>,
        /// Where its output says it connected instead of rollsafe's
        /// database (`as postgres`, `to database hc`), when it says so.
        elsewhere: Option<String>,
        /// Its last lines of output (stdout, then stderr), the
        /// database's password masked, each cut to a bounded length.
        output: Vec<String>,
        /// How to pass rollsafe's database on under the names the
        /// project's settings read, for the advice.
        pass_on: Box<settings_names::PassOn>,
    },
    #[error("the migrate command `{command}` ran, but the server saw no write to {history}, so no migration was applied; {}", no_migrations_advice(.applied_elsewhere.as_deref(), command, pass_on))]
    NoMigrations {
        command: String,
        history: String,
        /// A line of its output saying it migrated a database
        /// (`Applying shop.0001_initial... OK`): another one.
        applied_elsewhere: Option<String>,
        /// How to pass rollsafe's database on under the names the
        /// project's settings read, for the advice.
        pass_on: Box<settings_names::PassOn>,
    },
    #[error("{0}")]
    Catalog(#[from] CatalogError),
}

impl FrameworkError {
    /// The last lines a failing command printed, to show as lines under
    /// the error's own (empty for the other errors).
    pub fn output(&self) -> &[String] {
        match self {
            FrameworkError::CommandFailed { output, .. } => output,
            _ => &[],
        }
    }
}

/// What to check when the command applied nothing on the throwaway
/// database: where its output says it applied migrations, it did so on a
/// database of its settings' own choosing.
fn no_migrations_advice(
    applied_elsewhere: Option<&str>,
    command: &str,
    pass_on: &settings_names::PassOn,
) -> String {
    match applied_elsewhere {
        Some(line) => format!(
            "yet its output says it migrated a database (`{line}`): another one, the one the project's settings choose (a SQLite file, variables of their own such as DB_NAME), not rollsafe's throwaway one. Make them take DATABASE_URL or PG* (rollsafe sets both), e.g. --migrate-command '{} {command}' {} and the setting that selects PostgreSQL",
            pass_on.assignments,
            match pass_on.from {
                Some(_) => pass_on.whose(),
                None => "with the names they read".into(),
            }
        ),
        None => "check that the command reads DATABASE_URL or PG* (rollsafe sets both), or pass --history-table with the table it records migrations in".to_string(),
    }
}

/// A line of a migrate command's output saying it applied a migration
/// (Django's `Applying …`, Alembic's `Running upgrade …`, Rails' and
/// Ecto's `== … migrating`) or found them all applied (Django's `No
/// migrations to apply.`: never so on a fresh database).
fn applied_line(stdout: &[u8], stderr: &[u8]) -> Option<String> {
    let (stdout, stderr) = (
        String::from_utf8_lossy(stdout),
        String::from_utf8_lossy(stderr),
    );
    stdout
        .lines()
        .chain(stderr.lines())
        .map(str::trim)
        .find(|l| {
            l.starts_with("Applying ")
                || l.starts_with("No migrations to apply")
                || l.contains("Running upgrade ")
                || (l.starts_with("== ") && l.contains("migrating"))
        })
        .map(|l| l.chars().take(LINE_CHARS).collect())
}

/// A Django project whose `manage.py` does not choose a settings module
/// (it expects `DJANGO_SETTINGS_MODULE` from its environment, as its
/// docs say) fails before it connects: named, with the project's own
/// settings modules and the two ways to pass one.
fn settings_module_advice(dir: &Path, output: &[String], command: &str) -> Option<String> {
    let unset = output
        .iter()
        .any(|l| l.contains("DJANGO_SETTINGS_MODULE") && l.contains("settings are not configured"));
    if !unset {
        return None;
    }
    let modules = detect::django_settings_modules(dir);
    // The one a CI job most likely means, for the example.
    let example = ["ci", "development", "dev", "local", "base", "settings"]
        .iter()
        .find_map(|want| {
            modules.iter().find(|m| {
                let last = m.rsplit('.').next().unwrap_or_default();
                last == *want || last.strip_prefix("settings_") == Some(want)
            })
        })
        .or(modules.first())?;
    Some(format!(
        ". Django was not told which settings module to use, and this project's manage.py does not choose one: set DJANGO_SETTINGS_MODULE for rollsafe (e.g. DJANGO_SETTINGS_MODULE={example} rollsafe verify …; the project has {}) or name it in --migrate-command '{command} --settings={example}'",
        listed(modules.iter().cloned())
    ))
}

/// How to pass rollsafe's database on, for a command that connected
/// `elsewhere` (`to database netbox, as app`): the project's dotenv
/// names, or else where its settings write that database or role.
fn pass_on_where_connected(dir: &Path, elsewhere: Option<&str>) -> settings_names::PassOn {
    let mut pass_on = settings_names::pass_on(dir);
    if pass_on.from.is_none() {
        let values: Vec<String> = elsewhere
            .unwrap_or_default()
            .split(", ")
            .filter_map(|part| {
                part.strip_prefix("to database ")
                    .or_else(|| part.strip_prefix("as "))
            })
            .map(str::to_string)
            .collect();
        pass_on.written_at = settings_names::written_at(dir, &values);
    }
    pass_on
}

/// What to do when the command connected elsewhere than the throwaway
/// database: its settings read variables of their own, or write the
/// database in a file.
fn elsewhere_advice(elsewhere: &str, command: &str, pass_on: &settings_names::PassOn) -> String {
    if let Some(written) = &pass_on.written_at {
        return format!(
            ". It connected {elsewhere}, not to rollsafe's throwaway database: the project's settings write it ({written}) instead of reading DATABASE_URL or PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE (rollsafe sets them all for the command). Make that setting read them (in Python, e.g. os.environ.get(\"PGDATABASE\", …) for the name and the same for the others), or read variables of the project's own and pass them on, e.g. --migrate-command '{} {command}'",
            pass_on.assignments
        );
    }
    format!(
        ". It connected {elsewhere}, not to rollsafe's throwaway database: the project's settings do not take the database from DATABASE_URL or PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE (rollsafe sets them all for the command). Pass them on {}, e.g. --migrate-command '{} {command}'",
        pass_on.whose(),
        pass_on.assignments
    )
}

/// Where a failing command's `output` says it connected instead of the
/// database of `url`: the role, database or port a PostgreSQL client's
/// connection error names (libpq, psycopg, asyncpg, node-postgres, JDBC
/// word them alike), when it is not `url`'s.
fn connected_elsewhere(output: &[String], url: &str) -> Option<String> {
    let ours = url::Url::parse(url).ok()?;
    let quoted_after = |line: &str, marker: &str| -> Option<String> {
        let rest = &line[line.find(marker)? + marker.len()..];
        let rest = rest.strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_string())
    };
    let mut found = Vec::new();
    for line in output {
        let role = quoted_after(line, "authentication failed for user ")
            .or_else(|| quoted_after(line, "role "))
            .filter(|_| line.contains("does not exist") || line.contains("authentication failed"));
        if let Some(role) = role.filter(|r| *r != ours.username()) {
            found.push(format!("as {role}"));
        }
        let database = quoted_after(line, "database ").filter(|_| line.contains("does not exist"));
        if let Some(db) = database.filter(|d| *d != ours.path().trim_start_matches('/')) {
            found.push(format!("to database {db}"));
        }
        let port = line
            .split_once(", port ")
            .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|_| line.contains("failed") || line.contains("refused"));
        if let Some(port) = port.filter(|p| Some(*p) != ours.port()) {
            found.push(format!("to port {port}"));
        }
    }
    found.dedup();
    found.sort();
    found.dedup();
    (!found.is_empty()).then(|| found.join(", "))
}

/// `; its output ends: <its last line that is not blank>`, or nothing.
fn ends_with(output: &[String]) -> String {
    output
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        // Its full stop left to the advice that may follow (`. Django …`).
        .map_or_else(String::new, |l| {
            format!("; its output ends: {}", l.trim().trim_end_matches('.'))
        })
}

/// What a project's migrate sent, as migrations.
#[derive(Debug, Clone)]
pub struct Read {
    pub project: Project,
    /// Each migration as a step, data migrations runnable (their
    /// schema as sent, and how their framework applies them at rows
    /// where it can); [`Read::catalog`] marks the others.
    steps: Vec<Step>,
    /// Per step: why it cannot be judged from what it sent (a data
    /// migration its framework cannot be asked to apply alone), None for
    /// the others.
    data: Vec<Option<String>>,
    /// How long the migrate command ran.
    pub command_time: Duration,
    /// Runs of migrations the framework sent in one transaction, by
    /// label (`first..last`).
    pub shared_transactions: Vec<String>,
    /// Labels of the migrations that sent no SQL (state-only).
    pub state_only: Vec<String>,
    /// Django's squashed migrations, each applied in place of the
    /// migrations it replaces (their number), labelled as its file is.
    pub squashed: Vec<(String, usize)>,
    /// Statements sent after the last migration, on the project's tables.
    pub unattributed: Vec<String>,
    /// Statements the server refused while the command still succeeded.
    pub refused: Vec<String>,
    /// What it sent to its own tables (its history table's creation and
    /// rows), by migration: a capture's database is left as it left it.
    pub history: FrameworkHistory,
}

impl Read {
    /// The catalogue: every data migration after rollsafe's version
    /// `since` (all, without one) marked not runnable; those up to it,
    /// which only build the base's schema, kept as sent.
    pub fn catalog(&self, since: Option<i32>) -> Result<Catalog, CatalogError> {
        let steps = self
            .steps
            .iter()
            .zip(&self.data)
            .enumerate()
            .map(|(i, (step, data))| {
                let version = i32::try_from(i + 1).unwrap_or(i32::MAX);
                let mut step = step.clone();
                if !since.is_some_and(|s| version <= s) {
                    step.not_runnable = data.clone();
                }
                step
            })
            .collect();
        with_deploy_groups(Catalog::from_steps(
            self.source(),
            Layout::Framework,
            steps,
        )?)
    }

    /// The catalogue of a run that rehearses what comes after rollsafe's
    /// version `since`, and the version the rehearsal then starts after.
    ///
    /// Django sends the apps' migrations by app, not by age: a `--since`
    /// naming the project's `people.0002` is a point in the project's
    /// history, and what production applied by then is what git's history
    /// added before its file, whichever app it belongs to. So the base is
    /// what Django sent up to `since`, less the project's migrations git
    /// added after `since`'s file; then what Django sent after it from
    /// installed apps (its contrib apps, a CMS's apps: migrations outside
    /// the project's files, which production runs with the package
    /// versions it has, whatever this project's migrations are at); then
    /// the project's migrations sent after it that git added before
    /// `since`'s file. The rest is rehearsed, in the order sent, data
    /// migrations marked as [`Read::catalog`] marks them; files added in
    /// the same commit as `since`'s keep the order sent. Where git cannot
    /// say (no repository, `since` names a package's migration), the
    /// project's migrations sent after `since` are rehearsed. The run's
    /// header says what moved.
    pub fn catalog_since(&self, since: i32) -> Result<(Catalog, i32), CatalogError> {
        let origins = self.origins();
        let (order, starts_after) = since_order(&origins, since);
        let mut catalog = self.reordered(&order, starts_after)?;
        catalog
            .notes
            .extend(self.since_notes(&origins, &order, starts_after, since));
        Ok((catalog, i32::try_from(starts_after).unwrap_or(i32::MAX)))
    }

    /// The catalogue of a run after `--base REF` (`applied`: the labels
    /// of what the framework sent at REF), and the version the rehearsal
    /// starts after: REF's migrations first, in the order sent, then
    /// every one REF lacks, wherever the framework sends it (Django sends
    /// a new migration of one app before older ones of the apps after
    /// it), its data migrations marked as [`Read::catalog`] marks them.
    pub fn catalog_after(&self, applied: &[String]) -> Result<(Catalog, i32), CatalogError> {
        let in_base: Vec<bool> = self
            .steps
            .iter()
            .map(|s| applied.contains(&s.label))
            .collect();
        let (order, starts_after) = base_first(&in_base);
        let mut catalog = self.reordered(&order, starts_after)?;
        let last_of_base = order[..starts_after].iter().max().copied().unwrap_or(0);
        let sent_among: Vec<&str> = order[starts_after..]
            .iter()
            .filter(|&&i| i < last_of_base)
            .map(|&i| self.steps[i].label.as_str())
            .collect();
        if !sent_among.is_empty() {
            catalog.notes.push(format!(
                "{} new migration(s) ({}) were sent among the base's (Django migrates app by app): rehearsed after all of the base's",
                sent_among.len(),
                by_app(&sent_among)
            ));
        }
        Ok((catalog, i32::try_from(starts_after).unwrap_or(i32::MAX)))
    }

    /// The steps in `order`, those from `starts_after` on rehearsed (their
    /// data migrations marked).
    fn reordered(&self, order: &[usize], starts_after: usize) -> Result<Catalog, CatalogError> {
        let steps = order
            .iter()
            .enumerate()
            .map(|(position, &i)| {
                let mut step = self.steps[i].clone();
                if position >= starts_after {
                    step.not_runnable = self.data[i].clone();
                }
                step
            })
            .collect();
        with_deploy_groups(Catalog::from_steps(
            self.source(),
            Layout::Framework,
            steps,
        )?)
    }

    /// Where each migration comes from: an installed package, or the
    /// project's file and when git added it. Only Django's migrations are
    /// found in the project's files or in an installed app's, and only
    /// its order is not the history's; another command's steps are all
    /// the project's, in the order sent.
    fn origins(&self) -> Vec<Origin> {
        if self.project.framework != Some(detect::Framework::Django) {
            return vec![Origin::Own(None); self.steps.len()];
        }
        let files: Vec<&str> = self
            .steps
            .iter()
            .map(|s| s.file.as_str())
            .filter(|f| !f.is_empty())
            .collect();
        let added = crate::catalog::when_added(&self.project.root, &files).unwrap_or_default();
        self.steps
            .iter()
            .map(|s| match s.file.as_str() {
                "" => Origin::Package,
                file => Origin::Own(added.get(file).copied()),
            })
            .collect()
    }

    /// The header's lines on what `--since` moved: packages' and older
    /// migrations sent after it into the base, newer ones sent before it
    /// out of it; and that git could not say, when it could not.
    fn since_notes(
        &self,
        origins: &[Origin],
        order: &[usize],
        starts_after: usize,
        since: i32,
    ) -> Vec<String> {
        let at = usize::try_from(since).unwrap_or(0).min(self.steps.len());
        let label = |i: &usize| self.steps[*i].label.as_str();
        let (base, rehearsed) = order.split_at(starts_after);
        let packages: Vec<&str> = base
            .iter()
            .filter(|&&i| i >= at && origins[i] == Origin::Package)
            .map(label)
            .collect();
        let older: Vec<&str> = base
            .iter()
            .filter(|&&i| i >= at && origins[i] != Origin::Package)
            .map(label)
            .collect();
        let newer: Vec<&str> = rehearsed.iter().filter(|&&i| i < at).map(label).collect();
        let mut notes = Vec::new();
        if !packages.is_empty() {
            notes.push(format!(
                "{} migration(s) of installed packages ({}), sent after the --since migration, are applied with the base and not rehearsed: production runs them with the package versions it has, apart from this project's migrations",
                packages.len(),
                by_app(&packages)
            ));
        }
        if !older.is_empty() {
            notes.push(format!(
                "{} of the project's migration(s) ({}) were sent after the --since migration but their files were added to git before its file: applied with the base, not rehearsed (Django sends the apps one after another, not in the order they were written)",
                older.len(),
                by_app(&older)
            ));
        }
        if !newer.is_empty() {
            notes.push(format!(
                "{} of the project's migration(s) ({}) were sent before the --since migration but their files were added to git after its file: rehearsed after the base",
                newer.len(),
                by_app(&newer)
            ));
        }
        let since_file = at.checked_sub(1).map(|i| origins[i]);
        let unknown = matches!(since_file, Some(Origin::Own(None)))
            && self.project.framework == Some(detect::Framework::Django);
        if unknown && rehearsed.len() > 1 {
            notes.push(format!(
                "git's history does not say when {}'s file was added (no repository, or not committed): every migration of the project Django sent after it is rehearsed, other apps' too",
                self.steps[at - 1].label
            ));
        }
        notes
    }

    fn source(&self) -> Source {
        Source::Framework {
            project: self.project.root.clone(),
            framework: self.project.framework_name(),
        }
    }

    /// How the project was read, for the run's header: the framework, the
    /// command and its time, the migrations' labels, and what was left
    /// apart.
    pub fn describe(&self) -> String {
        let labels = match (self.steps.first(), self.steps.last()) {
            (Some(a), Some(b)) if a.label != b.label => format!("{}..{}", a.label, b.label),
            (Some(a), _) => a.label.clone(),
            _ => String::new(),
        };
        let mut out = format!(
            "{} migration(s) ({labels}) from {}: `{}` ran in {:.1}s, history table {}",
            self.steps.len(),
            self.source(),
            self.project.command,
            self.command_time.as_secs_f64(),
            self.project.history
        );
        let data: Vec<&str> = self
            .steps
            .iter()
            .zip(&self.data)
            .filter(|(_, d)| d.is_some())
            .map(|(s, _)| s.label.as_str())
            .collect();
        let by_framework: Vec<String> = self
            .steps
            .iter()
            .filter_map(|s| Some((s, s.external.as_ref()?)))
            .map(|(s, e)| format!("{} (`{}`)", s.label, e.command))
            .collect();
        let mut say = |what: String| {
            out.push_str("; ");
            out.push_str(&what);
        };
        if !by_framework.is_empty() {
            say(format!(
                "data migration(s) applied at rows by {} itself, not judged from what they sent to an empty database: {}",
                self.project.framework_name(),
                by_framework.join(", ")
            ));
        }
        if !data.is_empty() {
            say(format!(
                "data migration(s), not judged from what they sent to an empty database: {}",
                data.join(", ")
            ));
        }
        if !self.squashed.is_empty() {
            say(format!(
                "squashed migration(s) applied in place of those they replace, as Django does on a fresh database: {}",
                listed(
                    self.squashed
                        .iter()
                        .map(|(squash, n)| format!("{squash} ({n} replaced)"))
                )
            ));
        }
        if !self.state_only.is_empty() {
            say(format!(
                "sent no SQL (state only): {}",
                listed(self.state_only.iter().cloned())
            ));
        }
        for run in &self.shared_transactions {
            say(format!("{run} were sent in one transaction: each is rehearsed in its own, and where production runs several of them in one deploy (after --since or --base, or added by one commit) the locks of each are judged held until the last commits"));
        }
        if !self.unattributed.is_empty() {
            // Django's `post_migrate` signal runs after the last migration:
            // content types, permissions, and the project's own handlers.
            let whose = match self.project.framework {
                Some(detect::Framework::Django) => {
                    " (Django's post_migrate handlers: content types, permissions, the project's own), not rehearsed"
                }
                _ => ", attributed to none",
            };
            say(format!(
                "{} statement(s) sent after the last migration{whose}: {}",
                self.unattributed.len(),
                self.unattributed
                    .iter()
                    .take(3)
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !self.refused.is_empty() {
            say(format!(
                "{} statement(s) the server refused while the command went on, left out: {}",
                self.refused.len(),
                self.refused
                    .iter()
                    .take(3)
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out
    }
}

/// A header's list: the first dozen names, then how many more (a long
/// history's state-only migrations run to hundreds).
fn listed(names: impl Iterator<Item = String>) -> String {
    const SHOWN: usize = 12;
    let names: Vec<String> = names.collect();
    let mut out = names
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        out.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    out
}

/// Runs `project`'s migrate command on a fresh database of `sandbox`
/// (started with [`crate::capture::run::log_settings`]) and reads back
/// its migrations.
pub fn read(sandbox: &Sandbox, project: &Project) -> Result<Read, FrameworkError> {
    check_log(sandbox)?;
    let migrator = sandbox.create_login_role(&sandbox.unique_role_name("migrator"))?;
    let db = sandbox.fresh_database_owned_by(Some(&migrator))?;
    log_statements_of(sandbox, db.name())?;
    let url = migrator.url(db.url(), &[]);
    let ran = match run_migrate(project, &url) {
        Ok(ran) => ran,
        Err(FrameworkError::CommandFailed {
            command,
            status,
            elsewhere,
            output,
            pass_on,
            advice,
            ..
        }) => {
            return Err(FrameworkError::CommandFailed {
                refused: first_refused(sandbox, &url, db.name()),
                command,
                status,
                elsewhere,
                output,
                pass_on,
                advice,
            })
        }
        Err(other) => return Err(other),
    };
    let (text, marker) = read_log_text(sandbox, &url)?;
    let mut statements = read_sent(&text, db.name());
    statements.retain(|s| !s.text.contains(&marker));
    let own = project.framework.map_or(&[][..], Framework::own_tables);
    let mut split = sent::split(&statements, &project.history, own);
    let squashed = match project.framework {
        Some(Framework::Django) => fold_squashes(
            &mut split.migrations,
            &detect::django_squashes(&project.root),
        ),
        _ => Vec::new(),
    };
    if split.migrations.is_empty() {
        return Err(FrameworkError::NoMigrations {
            command: project.command.clone(),
            history: project.history.clone(),
            applied_elsewhere: ran.applied_line,
            pass_on: Box::new(settings_names::pass_on(&project.root)),
        });
    }
    let mut read = into_read(project.clone(), split, ran.took);
    read.squashed = squashed;
    Ok(read)
}

/// The first statement the server refused on database `dbname` while a
/// migrate command ran, with its error, the password of `url` masked:
/// `` `ALTER TABLE …` (relation "x" does not exist) ``. A statement
/// refused only because an earlier one aborted its transaction is not
/// the cause and is passed over. None when the log cannot be read or
/// nothing was refused.
fn first_refused(sandbox: &Sandbox, url: &str, dbname: &str) -> Option<String> {
    let (text, marker) = read_log_text(sandbox, url).ok()?;
    read_sent(&text, dbname)
        .into_iter()
        .filter(|s| s.failed && !s.text.contains(&marker))
        .find(|s| {
            !s.error
                .as_deref()
                .is_some_and(|e| e.starts_with("current transaction is aborted"))
        })
        .map(|s| {
            let error = s.error.as_deref().unwrap_or("an error");
            let statement = masked_password_literals(&s.text);
            crate::db::scrub(
                &format!(
                    "`{}` ({error})",
                    crate::capture::introspect::excerpt(&statement)
                ),
                url,
            )
        })
}

/// `text` with the literal after every `PASSWORD` masked (`CREATE ROLE
/// app LOGIN PASSWORD '***'`): a project's statement shown in a message
/// never shows a password it sets.
fn masked_password_literals(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::new();
    let mut rest = 0;
    while let Some(found) = lower[rest..].find("password") {
        let after = rest + found + "password".len();
        let gap = text[after..].len() - text[after..].trim_start().len();
        let open = after + gap;
        out.push_str(&text[rest..open]);
        rest = open;
        if !text[open..].starts_with('\'') {
            continue;
        }
        // The literal ends at the first quote that is not doubled.
        let mut end = text.len();
        let mut chars = text[open + 1..].char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c == '\'' {
                if chars.peek().map(|(_, c)| *c) == Some('\'') {
                    chars.next();
                    continue;
                }
                end = open + 1 + i + 1;
                break;
            }
        }
        out.push_str("'***'");
        rest = end;
    }
    out.push_str(&text[rest..]);
    out
}

/// Django applies a squashed migration in place of those it replaces on
/// a fresh database, and records it as each of them, one history row
/// after the other with nothing sent between (Django 6 then records the
/// squash itself; earlier versions record it after the last migration of
/// the run). Split at those rows, the squash's statements would be
/// labelled with the first migration it replaces, whose file is gone,
/// and the others listed as sending nothing. Each such run becomes the
/// squash, labelled as its file is named, its history rows all its own.
/// Returns each squash folded, with how many migrations it replaced.
fn fold_squashes(
    migrations: &mut Vec<sent::SentMigration>,
    squashes: &[detect::Squash],
) -> Vec<(String, usize)> {
    let mut folded: Vec<(String, usize)> = Vec::new();
    let mut out: Vec<sent::SentMigration> = Vec::new();
    let mut rest = std::mem::take(migrations).into_iter().peekable();
    while let Some(mut m) = rest.next() {
        // A squash recorded again after the run (before Django 6): its
        // row joins the squash's.
        if m.statements.is_empty() {
            if let Some(squash) = out.iter_mut().find(|o| o.key == m.key) {
                squash.records.append(&mut m.records);
                continue;
            }
        }
        let Some(squash) = squashes.iter().find(|s| s.replaces.first() == Some(&m.key)) else {
            out.push(m);
            continue;
        };
        let mut replaced = 1;
        while let Some(next) = rest.next_if(|n| {
            n.statements.is_empty() && (squash.replaces.contains(&n.key) || n.key == squash.key)
        }) {
            replaced += usize::from(next.key != squash.key);
            m.records.extend(next.records);
        }
        m.key = squash.key.clone();
        folded.push((squash.key.clone(), replaced));
        out.push(m);
    }
    *migrations = out;
    folded
}

/// The migrations of `split` as steps, labelled as the framework labels
/// them.
fn into_read(project: Project, split: sent::Split, command_time: Duration) -> Read {
    let mut steps = Vec::new();
    let mut data = Vec::new();
    let mut state_only = Vec::new();
    let mut history = FrameworkHistory::default();
    let mut previous_transaction = None;
    for (i, m) in split.migrations.iter().enumerate() {
        history.by_label.push((m.key.clone(), m.records.clone()));
        // Sent in the transaction of the migration before it (Alembic's
        // default): pending together in production, the two commit as one.
        let shared_transaction = (m.transaction.is_some() && m.transaction == previous_transaction)
            .then(|| shared_transaction_phrase(&project));
        previous_transaction = m.transaction;
        let (name, file) = match project.framework {
            Some(f) => f.locate(&project.root, &m.key),
            None => (m.key.clone(), String::new()),
        };
        if m.statements.is_empty() {
            state_only.push(m.key.clone());
        }
        let external = m
            .reads_rows
            .as_ref()
            .and_then(|_| external_apply(&project, &m.key, &history, &split.migrations[i + 1..]));
        data.push(match (&m.reads_rows, &external) {
            (Some(read), None) => Some(format!("is a data migration: it read the project's rows (`{read}`) and sends what it sends because of them, so what it sent to rollsafe's empty database is not what production runs; rollsafe applies a data migration at rows through the framework itself (Django, Alembic, Rails/ActiveRecord), and this migrate command does not end as the framework's does (`manage.py migrate`, `upgrade head`, `db upgrade`, `db:migrate`), so it cannot be aimed at this one migration")),
            _ => None,
        });
        steps.push(Step {
            key: m.key.clone(),
            label: m.key.clone(),
            name,
            file,
            sql: m.statements.iter().map(|s| format!("{s};\n")).collect(),
            execution: match m.outside_transaction {
                true => Execution::Autocommit,
                false => Execution::Transaction,
            },
            external,
            shared_transaction,
            ..Step::default()
        });
    }
    let shared_transactions = shared_transactions(&split.migrations);
    // The migrations one commit added reach production in one deploy.
    crate::catalog::fill_deploy_groups(&project.root, &mut steps);
    Read {
        project,
        steps,
        data,
        command_time,
        shared_transactions,
        state_only,
        squashed: Vec::new(),
        unattributed: split.unattributed,
        refused: split.refused,
        history,
    }
}

/// How the framework applies the data migration `key` alone at rows:
/// its one-migration command, what it wrote to its own tables with every
/// migration before (`history`, filled up to this one), and its tables.
/// None for a command rollsafe does not know how to aim at one migration.
fn external_apply(
    project: &Project,
    key: &str,
    history: &FrameworkHistory,
    later: &[sent::SentMigration],
) -> Option<crate::catalog::ExternalApply> {
    let framework = project.framework?;
    // Django records a squashed migration as every migration it replaces,
    // one row after the other with nothing sent between them, the squash's
    // statements all before the first row; `migrate APP <first>` on a
    // database with none of them applies the replaced first one alone,
    // not the squash. Aimed at the last of those rows, Django applies
    // every replaced migration up to it: the squash's schema. (A
    // migration that only changes Django's state after it is applied with
    // it too, which changes nothing.)
    let with: Vec<&sent::SentMigration> = match framework {
        detect::Framework::Django => {
            let app = key.split_once('.').map(|(app, _)| app);
            later
                .iter()
                .take_while(|l| {
                    l.statements.is_empty() && l.key.split_once('.').map(|(app, _)| app) == app
                })
                .collect()
        }
        _ => Vec::new(),
    };
    let aimed = with.last().map_or(key, |l| l.key.as_str());
    let command = framework.aim(&project.command, &project.root, aimed)?;
    let earlier = history
        .by_label
        .iter()
        .take_while(|(label, _)| label != key);
    let bookkeeping = earlier.flat_map(|(_, sent)| sent.iter().cloned()).collect();
    let recorded = history
        .by_label
        .iter()
        .find(|(label, _)| label == key)
        .map(|(_, sent)| sent.clone())
        .unwrap_or_default()
        .into_iter()
        .chain(with.iter().flat_map(|l| l.records.iter().cloned()))
        .collect();
    let own_tables = std::iter::once(project.history.as_str())
        .chain(framework.own_tables().iter().copied())
        .map(str::to_string)
        .collect();
    // The keys the history may hold after the command: every migration
    // up to this one, as the framework keys them.
    let up_to: Vec<String> = history
        .by_label
        .iter()
        .map(|(label, _)| label.as_str())
        .take_while(|label| *label != key)
        .chain(std::iter::once(key))
        .chain(with.iter().map(|l| l.key.as_str()))
        .map(|label| format!("'{}'", label.replace('\'', "''")))
        .collect();
    let applied_beyond = framework.history_key().map(|expr| {
        format!(
            "SELECT string_agg(k, ', ' ORDER BY k) FROM (SELECT {expr} AS k FROM {}) keys WHERE k <> ALL (ARRAY[{}]::text[])",
            crate::pg::quote_ident(&project.history),
            up_to.join(", ")
        )
    });
    Some(crate::catalog::ExternalApply {
        by: framework.name().to_string(),
        command,
        dir: project.root.clone(),
        bookkeeping,
        recorded,
        own_tables,
        applied_beyond,
    })
}

/// `catalog` with its header's line on the migrations deployed together.
fn with_deploy_groups(mut catalog: Catalog) -> Result<Catalog, CatalogError> {
    catalog.notes.extend(catalog.deploy_groups_note());
    Ok(catalog)
}

/// How `project`'s migrate sends a migration in the transaction of the
/// one before it, for messages ([`Step::shared_transaction`]).
fn shared_transaction_phrase(project: &Project) -> String {
    match project.framework {
        Some(detect::Framework::Alembic | detect::Framework::FlaskMigrate) => "Alembic sends every pending revision in one transaction (env.py's `context.begin_transaction()`; `transaction_per_migration=True` in `context.configure` sends each in its own)".to_string(),
        Some(f) => format!("{} sent it in the transaction of the migration before it", f.name()),
        None => format!("`{}` sent it in the transaction of the migration before it", project.command),
    }
}

/// Runs of two or more neighbouring migrations sent in one transaction.
fn shared_transactions(migrations: &[sent::SentMigration]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < migrations.len() {
        let mut j = i;
        while let Some(t) = migrations[i].transaction {
            match migrations.get(j + 1) {
                Some(next) if next.transaction == Some(t) => j += 1,
                _ => break,
            }
        }
        if j > i {
            out.push(format!("{}..{}", migrations[i].key, migrations[j].key));
        }
        i = j + 1;
    }
    out
}

/// How many of the command's last output lines a failure shows.
const TAIL_LINES: usize = 20;

/// How many characters of one output line a failure shows (a minified
/// stack frame, a progress bar redrawn on one line).
const LINE_CHARS: usize = 300;

/// A migrate command that succeeded.
#[derive(Debug)]
struct Ran {
    took: Duration,
    /// A line of its output saying it migrated a database.
    applied_line: Option<String>,
}

/// Runs the migrate command in the project's root against `url`; its
/// output is kept, and shown (the last lines) only when it fails.
fn run_migrate(project: &Project, url: &str) -> Result<Ran, FrameworkError> {
    run_shell(&project.command, &project.root, url)
}

/// Runs the project's shell `command` in `dir` against the database at
/// `url` (`DATABASE_URL` and libpq's `PG*` set, no input), as the migrate
/// command runs: how long it took, or [`FrameworkError::CommandFailed`]
/// with its last lines (the password masked) or [`FrameworkError::Spawn`].
/// How a data migration is applied at rows
/// ([`crate::catalog::ExternalApply`]).
pub fn run_command(command: &str, dir: &Path, url: &str) -> Result<Duration, FrameworkError> {
    run_shell(command, dir, url).map(|ran| ran.took)
}

/// The longest a project's command (its migrate, a data migration applied
/// at rows) may run before it is stopped: a command that waits for input,
/// a lock or a host that never answers would otherwise hold a CI job until
/// the job's own limit. A migrate on an empty database takes seconds to
/// minutes; a data migration at rollsafe's rows, minutes.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(15 * 60);

/// [`run_command`], with what its output said it applied.
fn run_shell(command: &str, dir: &Path, url: &str) -> Result<Ran, FrameworkError> {
    run_shell_within(command, dir, url, COMMAND_LIMIT)
}

/// [`run_shell`] stopped after `limit`: the command runs in a process
/// group of its own, killed whole (the shell and what it started) when
/// the limit passes, and reported as failed with its last lines.
fn run_shell_within(
    command: &str,
    dir: &Path,
    url: &str,
    limit: Duration,
) -> Result<Ran, FrameworkError> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    database_env(&mut cmd, url);
    let clock = Instant::now();
    let spawn_failed = |e: std::io::Error| FrameworkError::Spawn {
        command: command.to_string(),
        detail: e.to_string(),
    };
    let mut child = cmd.spawn().map_err(spawn_failed)?;
    // Killed with the sandboxes when the run is stopped (SIGTERM, Ctrl-C);
    // forgotten once it has ended.
    let _running = i32::try_from(child.id())
        .ok()
        .filter(|pgid| *pgid > 0)
        .map(|pgid| {
            crate::sandbox::cleanup::register(crate::sandbox::cleanup::Held::CommandGroup { pgid })
        });
    let stdout = read_in_thread(child.stdout.take());
    let stderr = read_in_thread(child.stderr.take());
    let mut stopped = false;
    let status = loop {
        match child.try_wait().map_err(spawn_failed)? {
            Some(status) => break status,
            None if clock.elapsed() >= limit => {
                // The whole group: `sh -c` and the interpreter it started.
                let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
                stopped = true;
                break child.wait().map_err(spawn_failed)?;
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let took = clock.elapsed();
    let (stdout, stderr) = (
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default(),
    );
    if status.success() && !stopped {
        return Ok(Ran {
            took,
            applied_line: applied_line(&stdout, &stderr),
        });
    }
    let lines = last_lines(&stdout, &stderr, url);
    Err(FrameworkError::CommandFailed {
        command: command.to_string(),
        status: match stopped {
            true => format!(
                "it had not finished after {} and was stopped: it may wait for input, a lock or a host that does not answer",
                match limit.as_secs() {
                    s if s >= 60 => format!("{} minutes", s / 60),
                    _ => format!("{:.1} s", limit.as_secs_f64()),
                }
            ),
            false => status.to_string(),
        },
        refused: None,
        pass_on: Box::new(pass_on_where_connected(dir, connected_elsewhere(&lines, url).as_deref())),
        advice: settings_module_advice(dir, &lines, command),
        elsewhere: connected_elsewhere(&lines, url),
        output: lines,
    })
}

/// All of `pipe`, read on a thread of its own (a command's stdout and
/// stderr at once, so neither fills while the other is waited on).
fn read_in_thread<R: std::io::Read + Send + 'static>(
    pipe: Option<R>,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut out);
        }
        out
    })
}

/// The last [`TAIL_LINES`] lines of a command's output (stdout, then
/// stderr; trailing blank lines dropped), `url`'s password masked, each
/// line as a terminal left it (what follows its last carriage return, no
/// control characters) and cut to [`LINE_CHARS`].
fn last_lines(stdout: &[u8], stderr: &[u8], url: &str) -> Vec<String> {
    let (stdout, stderr) = (
        String::from_utf8_lossy(stdout),
        String::from_utf8_lossy(stderr),
    );
    let mut lines: Vec<&str> = stdout.lines().chain(stderr.lines()).collect();
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    lines[lines.len().saturating_sub(TAIL_LINES)..]
        .iter()
        .map(|line| {
            let shown = line.rsplit('\r').next().unwrap_or(line);
            let shown: String = crate::db::scrub(shown, url)
                .chars()
                .filter(|c| *c == '\t' || !c.is_control())
                .collect();
            match shown.char_indices().nth(LINE_CHARS) {
                Some((cut, _)) => {
                    format!("{}… ({} characters)", &shown[..cut], shown.chars().count())
                }
                None => shown,
            }
        })
        .collect()
}

/// Where a framework's migration comes from, for `--since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// An installed package's: no file of the project's holds it.
    Package,
    /// The project's own; when git's history added its file, None when
    /// it cannot say.
    Own(Option<Added>),
}

/// The order of a framework's migrations (each one's [`Origin`], in the
/// order sent) for a run after rollsafe's version `since`, and how many
/// of them then form the base: those sent up to `since` but the project's
/// git added after `since`'s file, the packages' sent after it, and the
/// project's sent after it that git added before `since`'s file; the
/// rest is rehearsed ([`base_first`]).
fn since_order(origins: &[Origin], since: i32) -> (Vec<usize>, usize) {
    let at = usize::try_from(since).unwrap_or(0).min(origins.len());
    let since_added = match at.checked_sub(1).map(|i| origins[i]) {
        Some(Origin::Own(Some(added))) => Some(added),
        _ => None,
    };
    // `Added` orders newest first; a tie (one commit) keeps the order sent.
    let added = |i: usize| match (origins[i], since_added) {
        (Origin::Own(Some(a)), Some(s)) => Some(a.cmp(&s)),
        _ => None,
    };
    let in_base = |i: usize| match i < at {
        true => added(i) != Some(std::cmp::Ordering::Less),
        false => origins[i] == Origin::Package || added(i) == Some(std::cmp::Ordering::Greater),
    };
    let in_base: Vec<bool> = (0..origins.len()).map(in_base).collect();
    base_first(&in_base)
}

/// The base (each `in_base`), then the rest, each in the order sent (a
/// framework's order respects its dependencies, and so does any part of
/// it), and the base's length.
fn base_first(in_base: &[bool]) -> (Vec<usize>, usize) {
    let base: Vec<usize> = (0..in_base.len()).filter(|&i| in_base[i]).collect();
    let starts_after = base.len();
    let rest = (0..in_base.len()).filter(|&i| !in_base[i]);
    (base.into_iter().chain(rest).collect(), starts_after)
}

/// Labels as `app.first..app.last` per app (`people.0001..people.0004 (4),
/// shop.0002`), apps in the order first met: Django's labels.
fn by_app(labels: &[&str]) -> String {
    let mut apps: Vec<(&str, Vec<&str>)> = Vec::new();
    for label in labels {
        let app = label.split_once('.').map_or("", |(a, _)| a);
        match apps.iter_mut().find(|(a, _)| *a == app) {
            Some((_, of_app)) => of_app.push(label),
            None => apps.push((app, vec![label])),
        }
    }
    apps.iter()
        .map(|(_, of_app)| match of_app.as_slice() {
            [one] => one.to_string(),
            [first, .., last] => format!("{first}..{last} ({})", of_app.len()),
            [] => String::new(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command that never finishes (here a sleep started by the shell)
    /// is stopped with everything it started, and reported as failed with
    /// its last lines; one that finishes in time is not touched.
    #[test]
    fn a_command_past_its_limit_is_stopped_with_what_it_started() {
        let dir = std::env::temp_dir();
        let clock = Instant::now();
        let err = run_shell_within(
            "echo applying 0001_initial; sleep 30; echo never",
            &dir,
            "postgres://u:secret@localhost/db",
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(
            clock.elapsed() < Duration::from_secs(10),
            "{:?}",
            clock.elapsed()
        );
        let shown = err.to_string();
        assert!(
            shown.contains("it had not finished after 0.3 s and was stopped")
                && shown.contains("its output ends: applying 0001_initial"),
            "{shown}"
        );
        let ran = run_shell_within(
            "echo done",
            &dir,
            "postgres://u@localhost/db",
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(ran.took < Duration::from_secs(10));
    }

    const PACKAGE: Origin = Origin::Package;
    const UNKNOWN: Origin = Origin::Own(None);
    const fn commit(index: usize) -> Origin {
        Origin::Own(Some(Added::Commit(index)))
    }

    /// After `--since` (the second), the installed packages' migrations
    /// sent later join the base; the project's own follow, in order,
    /// when git cannot say when they were written.
    #[test]
    fn installed_packages_sent_after_since_join_the_base() {
        let origins = [UNKNOWN, PACKAGE, UNKNOWN, PACKAGE, UNKNOWN, PACKAGE];
        assert_eq!(since_order(&origins, 2), (vec![0, 1, 3, 5, 2, 4], 4));
        // Nothing after it from a package: the order as sent.
        assert_eq!(since_order(&origins[..3], 2), (vec![0, 1, 2], 2));
        // Past the end: all of it is the base.
        assert_eq!(since_order(&origins, 99), ((0..6).collect(), 6));
    }

    /// Django sends app by app: after `--since` (the third, commit 2),
    /// another app's migrations added before it (commits 3, 4) join the
    /// base, one added in its commit keeps the order sent, and one sent
    /// before it but written later (the working tree) is rehearsed.
    #[test]
    fn the_projects_migrations_are_after_since_by_when_git_added_them() {
        let working_tree = Origin::Own(Some(Added::WorkingTree));
        // exchanges.0001, exchanges.0002, packets.0001, packets.0002,
        // packets.0003 (new), swaps.0001, swaps.0002, contrib.
        let origins = [
            commit(3),
            working_tree,
            commit(4),
            commit(2),
            commit(0),
            commit(3),
            commit(2),
            PACKAGE,
        ];
        assert_eq!(since_order(&origins, 4), (vec![0, 2, 3, 5, 7, 1, 4, 6], 5));
        // The since migration's file unknown: the order sent decides.
        let mut unknown = origins;
        unknown[3] = UNKNOWN;
        assert_eq!(since_order(&unknown, 4), (vec![0, 1, 2, 3, 7, 4, 5, 6], 5));
    }

    /// A project whose settings read variables of their own connects as
    /// its default role, to its default database or port: named, with
    /// the way out; rollsafe's own role, database and port are not.
    #[test]
    fn a_command_that_connected_elsewhere_is_told_how_to_pass_the_database_on() {
        let url = "postgres://rs_migrator:pw@127.0.0.1:32875/rs_db_7";
        let lines = |text: &str| text.lines().map(str::to_string).collect::<Vec<_>>();
        let psycopg = lines("  File \"base.py\", line 279\ndjango.db.utils.OperationalError: connection failed: connection to server at \"127.0.0.1\", port 32875 failed: FATAL:  password authentication failed for user \"postgres\"");
        assert_eq!(
            connected_elsewhere(&psycopg, url).as_deref(),
            Some("as postgres")
        );
        let libpq = lines("psql: error: connection to server at \"127.0.0.1\", port 5432 failed: Connection refused\nFATAL:  database \"hc\" does not exist");
        assert_eq!(
            connected_elsewhere(&libpq, url).as_deref(),
            Some("to database hc, to port 5432")
        );
        let ours = lines("FATAL:  role \"rs_migrator\" does not exist\nFATAL:  database \"rs_db_7\" does not exist\nrelation \"soil\" does not exist");
        assert_eq!(connected_elsewhere(&ours, url), None);
        let failed = FrameworkError::CommandFailed {
            command: "python manage.py migrate".into(),
            status: "exit status: 1".into(),
            elsewhere: connected_elsewhere(&psycopg, url),
            output: psycopg,
            pass_on: Box::new(settings_names::pass_on(Path::new("/nonexistent"))),
            advice: None,
            refused: None,
        };
        assert!(failed.to_string().ends_with("It connected as postgres, not to rollsafe's throwaway database: the project's settings do not take the database from DATABASE_URL or PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE (rollsafe sets them all for the command). Pass them on under the names its settings read, e.g. --migrate-command 'DB_NAME=$PGDATABASE DB_USER=$PGUSER DB_PASSWORD=$PGPASSWORD DB_HOST=$PGHOST DB_PORT=$PGPORT python manage.py migrate'"), "{failed}");
    }

    /// A command that applied nothing on the throwaway database but says
    /// it applied migrations did so elsewhere (a project defaulting to
    /// SQLite): the message says so, and how to pass the database on.
    #[test]
    fn a_command_that_applied_migrations_elsewhere_says_so() {
        let django = b"Operations to perform:\n  Apply all migrations: kiln\nRunning migrations:\n  Applying kiln.0001_initial... OK\n";
        let alembic = b"INFO  [alembic.runtime.migration] Running upgrade  -> 1a2b, glazes\n";
        assert_eq!(
            applied_line(django, b"").as_deref(),
            Some("Applying kiln.0001_initial... OK")
        );
        assert_eq!(
            applied_line(b"", alembic).as_deref(),
            Some("INFO  [alembic.runtime.migration] Running upgrade  -> 1a2b, glazes")
        );
        assert_eq!(
            applied_line(b"Running migrations:\n  No migrations to apply.\n", b"").as_deref(),
            Some("No migrations to apply.")
        );
        assert_eq!(applied_line(b"Operations to perform:\n", b""), None);
        let nothing = FrameworkError::NoMigrations {
            command: "python manage.py migrate".into(),
            history: "django_migrations".into(),
            applied_elsewhere: applied_line(django, b""),
            pass_on: Box::new(settings_names::pass_on(Path::new("/nonexistent"))),
        };
        assert!(nothing.to_string().contains("yet its output says it migrated a database (`Applying kiln.0001_initial... OK`): another one, the one the project's settings choose"), "{nothing}");
    }

    /// A refused statement shown in a message never shows a password it
    /// sets: every `PASSWORD '…'` literal is masked, doubled quotes and
    /// all; the rest of the statement is kept.
    #[test]
    fn a_password_literal_in_a_shown_statement_is_masked() {
        assert_eq!(
            masked_password_literals(
                "CREATE ROLE orchard LOGIN PASSWORD 'it''s s3cret' VALID UNTIL 'infinity'"
            ),
            "CREATE ROLE orchard LOGIN PASSWORD '***' VALID UNTIL 'infinity'"
        );
        assert_eq!(
            masked_password_literals(
                "alter role picker password  'x'; ALTER TABLE t ADD password_hash text"
            ),
            "alter role picker password  '***'; ALTER TABLE t ADD password_hash text"
        );
        assert_eq!(
            masked_password_literals("ALTER ROLE picker PASSWORD 'unterminated"),
            "ALTER ROLE picker PASSWORD '***'"
        );
    }

    /// A squash's statements are labelled as its file is named, not as
    /// the first migration it replaces (whose file is gone), with every
    /// history row of its run its own: the rows of what it replaces, its
    /// own row after them (Django 6) or after the last migration (Django
    /// 5); the migrations after it keep theirs, and a migration that
    /// only looks like a replaced one is not folded.
    #[test]
    fn a_squashed_django_migration_is_labelled_as_its_file_is_named() {
        let sent = |key: &str, statements: &[&str]| sent::SentMigration {
            key: key.into(),
            statements: statements.iter().map(|s| s.to_string()).collect(),
            records: vec![format!("INSERT INTO django_migrations VALUES ('{key}')")],
            ..sent::SentMigration::default()
        };
        let squash = detect::Squash {
            key: "kiln.0001_squashed_0003".into(),
            replaces: vec![
                "kiln.0001_initial".into(),
                "kiln.0002_cone".into(),
                "kiln.0003_glaze".into(),
            ],
        };
        let keys =
            |ms: &[sent::SentMigration]| ms.iter().map(|m| m.key.clone()).collect::<Vec<_>>();
        // Django 6: the squash's own row closes the run.
        let mut six = vec![
            sent(
                "kiln.0001_initial",
                &["CREATE TABLE kiln_firing (id bigint)"],
            ),
            sent("kiln.0002_cone", &[]),
            sent("kiln.0003_glaze", &[]),
            sent("kiln.0001_squashed_0003", &[]),
            sent("pots.0001_initial", &["CREATE TABLE pots_pot (id bigint)"]),
        ];
        let folded = fold_squashes(&mut six, std::slice::from_ref(&squash));
        assert_eq!(folded, [("kiln.0001_squashed_0003".to_string(), 3)]);
        assert_eq!(keys(&six), ["kiln.0001_squashed_0003", "pots.0001_initial"]);
        assert_eq!(six[0].statements, ["CREATE TABLE kiln_firing (id bigint)"]);
        assert_eq!(six[0].records.len(), 4, "{:?}", six[0].records);
        // Django 5: the squash's row comes after the last migration.
        let mut five = vec![
            sent(
                "kiln.0001_initial",
                &["CREATE TABLE kiln_firing (id bigint)"],
            ),
            sent("kiln.0002_cone", &[]),
            sent("kiln.0003_glaze", &[]),
            sent(
                "kiln.0004_notes",
                &["ALTER TABLE kiln_firing ADD notes text"],
            ),
            sent("kiln.0001_squashed_0003", &[]),
        ];
        fold_squashes(&mut five, std::slice::from_ref(&squash));
        assert_eq!(keys(&five), ["kiln.0001_squashed_0003", "kiln.0004_notes"]);
        assert_eq!(five[0].records.len(), 4, "{:?}", five[0].records);
        assert_eq!(five[1].records.len(), 1, "{:?}", five[1].records);
        // Without the squash's file, nothing is folded.
        let mut unknown = vec![
            sent(
                "kiln.0001_initial",
                &["CREATE TABLE kiln_firing (id bigint)"],
            ),
            sent("kiln.0002_cone", &[]),
        ];
        assert!(fold_squashes(&mut unknown, &[]).is_empty());
        assert_eq!(keys(&unknown), ["kiln.0001_initial", "kiln.0002_cone"]);
    }

    /// Django records a squashed migration as each migration it replaces,
    /// back to back after the squash's statements: a data migration among
    /// them is applied at rows aimed at the last of those rows (aimed at
    /// the first, Django applies the replaced first one alone and the
    /// squash's later columns never reach the seeded database), and the
    /// history it then holds is not more than this migration.
    #[test]
    fn a_squashed_django_data_migration_is_aimed_at_the_last_migration_it_replaces() {
        let sent = |key: &str, statements: &[&str]| sent::SentMigration {
            key: key.into(),
            statements: statements.iter().map(|s| s.to_string()).collect(),
            reads_rows: statements
                .iter()
                .find(|s| s.starts_with("SELECT"))
                .map(|s| s.to_string()),
            records: vec![format!("INSERT INTO django_migrations VALUES ('{key}')")],
            ..sent::SentMigration::default()
        };
        let split = sent::Split {
            migrations: vec![
                sent(
                    "kiln.0001_initial",
                    &[
                        "CREATE TABLE kiln_firing (id bigint)",
                        "SELECT id FROM kiln_firing",
                    ],
                ),
                sent("kiln.0002_cone", &[]),
                sent("kiln.0003_glaze", &[]),
                sent("pots.0001_initial", &[]),
                sent(
                    "kiln.0004_notes",
                    &["ALTER TABLE kiln_firing ADD notes text"],
                ),
            ],
            ..sent::Split::default()
        };
        let read = into_read(
            Project {
                root: PathBuf::from("pottery"),
                framework: Some(Framework::Django),
                command: "python manage.py migrate".into(),
                history: "django_migrations".into(),
            },
            split,
            Duration::ZERO,
        );
        let x = read.steps[0].external.as_ref().expect("a data migration");
        assert!(
            x.command.ends_with("migrate kiln 0003_glaze"),
            "{}",
            x.command
        );
        assert_eq!(x.recorded.len(), 3, "{:?}", x.recorded);
        let beyond = x.applied_beyond.as_deref().unwrap_or_default();
        assert!(
            beyond.contains("'kiln.0003_glaze'") && !beyond.contains("'pots.0001_initial'"),
            "{beyond}"
        );
    }

    /// What Django sends after its last migration is its `post_migrate`
    /// handlers' work, named as such in the header.
    #[test]
    fn djangos_post_migrate_statements_are_named_in_the_header() {
        let split = sent::Split {
            migrations: vec![sent::SentMigration {
                key: "kiln.0001_initial".into(),
                statements: vec!["CREATE TABLE kiln_firing (id bigint)".into()],
                ..sent::SentMigration::default()
            }],
            unattributed: vec![
                "INSERT INTO \"django_content_type\" (\"app_label\", \"model\") VALUES ('kiln', 'firing')".into(),
            ],
            refused: Vec::new(),
        };
        let project = |framework| Project {
            root: PathBuf::from("pottery"),
            framework,
            command: "python manage.py migrate".into(),
            history: "django_migrations".into(),
        };
        let django = into_read(
            project(Some(Framework::Django)),
            split.clone(),
            Duration::ZERO,
        );
        assert!(django.describe().contains("1 statement(s) sent after the last migration (Django's post_migrate handlers: content types, permissions, the project's own), not rehearsed: `INSERT INTO \"django_content_type\""), "{}", django.describe());
        let other = into_read(project(None), split, Duration::ZERO);
        assert!(
            other.describe().contains(
                "1 statement(s) sent after the last migration, attributed to none: `INSERT"
            ),
            "{}",
            other.describe()
        );
    }

    #[test]
    fn labels_are_named_by_app() {
        assert_eq!(
            by_app(&["api.0001_a", "api.0002_b", "auth.0012_c", "api.0003_d"]),
            "api.0001_a..api.0003_d (3), auth.0012_c"
        );
    }

    /// A failing command's output is shown as lines: the last ones,
    /// the password masked, a redrawn line as it ended, a long one cut.
    #[test]
    fn a_failing_commands_last_lines_are_bounded_and_masked() {
        let url = "postgres://migrator:S3cret-pw@127.0.0.1:5432/shed";
        let mut stdout: String = (1..=30).map(|i| format!("applying step {i}\n")).collect();
        stdout.push_str("connecting as postgres://migrator:S3cret-pw@127.0.0.1\n");
        stdout.push_str("progress 10%\rprogress 100%\n");
        let stderr = format!(
            "{}\n\nrelation \"soil\" does not exist\n\n",
            "x".repeat(500)
        );
        let lines = last_lines(stdout.as_bytes(), stderr.as_bytes(), url);
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "applying step 16");
        assert_eq!(
            lines[15..],
            [
                "connecting as postgres://migrator:***@127.0.0.1".to_string(),
                "progress 100%".to_string(),
                format!("{}… (500 characters)", "x".repeat(LINE_CHARS)),
                String::new(),
                "relation \"soil\" does not exist".to_string(),
            ]
        );
        let failed = FrameworkError::CommandFailed {
            command: "sh apply.sh".into(),
            status: "exit status: 3".into(),
            elsewhere: None,
            output: lines,
            pass_on: Box::new(settings_names::pass_on(Path::new("/nonexistent"))),
            advice: None,
            refused: None,
        };
        assert_eq!(
            failed.to_string(),
            "the migrate command `sh apply.sh` failed (exit status: 3); nothing was rehearsed; its output ends: relation \"soil\" does not exist"
        );
        assert_eq!(failed.output().len(), TAIL_LINES);
    }
}

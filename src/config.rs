//! `rollsafe.toml`: a project's settings, so a pipeline runs a bare
//! `rollsafe verify`.
//!
//! The file sits at the repository root (the directory rollsafe runs in) or
//! is named with `--config FILE`. It holds what the `verify` flags hold —
//! where the migrations and the apps' statement sets are, the migration
//! layout, the rows to seed, the PostgreSQL backend and image, and `since` —
//! and nothing else: an unknown key is refused (a misspelt `migratons` must
//! not silently rehearse the embedded set). Flags and the environment
//! (`ROLLSAFE_POSTGRES`, `ROLLSAFE_POSTGRES_IMAGE`) override the file.
//!
//! Relative paths are relative to the file's directory, so
//! `rollsafe verify --config project/rollsafe.toml` means the same as a bare
//! `rollsafe verify` inside `project/`.
//!
//! ```toml
//! migrations = "migrations"      # directory of migration files
//! apps = "apps"                  # directory of statement sets (*.sql)
//! layout = "refinery"            # refinery, sqlx, golang-migrate, diesel, goose, dbmate, atlas, flyway, prisma, sqitch, maragudk-migrate, drizzle, liquibase (default: detected)
//! rows = 2000                    # rows seeded per rehearsal
//! postgres = "auto"              # auto | docker | local | postgres://… of a server
//! image = "postgres:15"          # docker backend's image
//! since = 2                      # rehearse only the migrations after this version
//! copy_rows = ["countries"]      # --from-target: also copy these tables' rows
//! app_role = "app_rw"            # the role apps connect as unless their file says `-- role:`
//! migrator_superuser = false     # true: migrations run as a superuser (production's migrator is one)
//! setup = "db/init.sql"          # what the history assumes from outside itself (roles, extensions), run once as a superuser
//! migrate_command = "python manage.py migrate"  # a project whose migrations are code: its own migrate, run on a throwaway database (default: its framework's, detected)
//! history_table = "django_migrations"          # the table that command records migrations in (default: its framework's)
//!
//! [[accept]]                     # a reviewed waiver (repeatable)
//! migration = "V4"               # the migration, as its tool names it
//! id = "locks.blocking-index-build"
//! object = "tags"                # optional: the table or object the finding is about
//! reason = "200 rows; built in the Sunday window"  # required
//! until = 2027-03-31             # optional: it accepts nothing after this date
//! ```
//!
//! Values have the flags' ranges (`rows` is `--rows`'s, see
//! [`crate::bounds`]); one outside is refused with the file and line.
//!
//! What it is not: a place for secrets. A `postgres` URL with a password is
//! read, never echoed (errors name the file and the key, not the value).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::bounds;
use crate::catalog::Layout;

/// The file a bare `rollsafe verify` looks for in the directory it runs in.
pub const FILE_NAME: &str = "rollsafe.toml";

/// The settings of a `rollsafe.toml`, paths already resolved against the
/// file's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    pub migrations: Option<PathBuf>,
    pub apps: Option<PathBuf>,
    pub layout: Option<Layout>,
    #[serde(default, deserialize_with = "rows_in_range")]
    pub rows: Option<u64>,
    pub postgres: Option<String>,
    pub image: Option<String>,
    /// The version as the user writes it (`2`, `V2`, `20240101120000`),
    /// resolved against the migrations' layout by the caller.
    pub since: Option<VersionText>,
    /// Tables whose production rows `--from-target` copies besides the
    /// ones the migrations fill (`--copy-rows`).
    #[serde(default)]
    pub copy_rows: Vec<String>,
    /// The role apps connect as when their statement file declares none.
    pub app_role: Option<String>,
    /// Migrations run as a superuser (`--migrator-superuser`).
    pub migrator_superuser: Option<bool>,
    /// SQL run once as a superuser before the first migration (`--setup`).
    pub setup: Option<PathBuf>,
    /// The project's own command that applies its migrations, run on a
    /// throwaway database (`--migrate-command`).
    pub migrate_command: Option<String>,
    /// The table that command records migrations in (`--history-table`).
    pub history_table: Option<String>,
    /// Reviewed waivers (`[[accept]]`) as read, with their places in the
    /// text ([`ProjectConfig::parse`] turns them into [`Self::accept`]).
    #[serde(default, rename = "accept")]
    accept_read: Vec<toml::Spanned<AcceptEntry>>,
    /// Reviewed waivers (`[[accept]]`), each with the line it starts on.
    #[serde(skip)]
    pub accept: Vec<(usize, AcceptEntry)>,
}

/// One `[[accept]]` of `rollsafe.toml`: a finding the team accepts on one
/// migration, and why. It accepts nothing after `until`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptEntry {
    /// The migration as its tool names it (`V4`, `20240101120000`).
    pub migration: VersionText,
    /// The finding id (`locks.blocking-index-build`).
    pub id: String,
    /// The table or object the finding must be about.
    pub object: Option<String>,
    #[serde(deserialize_with = "reason_given")]
    pub reason: String,
    #[serde(default, deserialize_with = "date")]
    pub until: Option<chrono::NaiveDate>,
}

/// A waiver's reason: required, and not blank.
fn reason_given<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let reason = String::deserialize(d)?;
    if reason.trim().is_empty() {
        return Err(serde::de::Error::custom(
            "[[accept]] reason is empty; say why the team accepts this finding",
        ));
    }
    Ok(reason.trim().to_string())
}

/// `until = 2027-03-31` (a TOML date) or `until = "2027-03-31"`.
fn date<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<chrono::NaiveDate>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum DateText {
        Date(toml::value::Datetime),
        Text(String),
    }
    let text = match DateText::deserialize(d)? {
        DateText::Date(d) => d.to_string(),
        DateText::Text(t) => t,
    };
    chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d")
        .map(Some)
        .map_err(|_| {
            serde::de::Error::custom(format!(
                "[[accept]] until `{text}` is not a date; write it as 2027-03-31"
            ))
        })
}

/// The 1-based line of byte `at` of `text`.
fn line_at(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// `rows` within [`bounds::ROWS`]: the error carries the value's span, so
/// the refusal names its line.
fn rows_in_range<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let n = u64::deserialize(d)?;
    bounds::ROWS
        .check(n)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("rows {e}")))
}

/// A version written as a TOML integer or string.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum VersionText {
    Number(u64),
    Text(String),
}

impl std::fmt::Display for VersionText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionText::Number(n) => write!(f, "{n}"),
            VersionText::Text(t) => f.write_str(t),
        }
    }
}

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("config file {0} does not exist; pass --config with the path of a rollsafe.toml, or drop --config")]
    Missing(PathBuf),
    #[error("cannot read {path}: {detail}")]
    Io { path: PathBuf, detail: String },
    #[error("{path}:{line}: {message}; fix it (the keys are migrations, apps, layout, rows, postgres, image, since, copy_rows, app_role, migrator_superuser, setup, migrate_command, history_table and [[accept]] (migration, id, object, reason, until); see the README's rollsafe.toml section)")]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

impl ProjectConfig {
    /// `--config FILE` when given (it must exist), else `rollsafe.toml` in
    /// `dir` when there is one, else None (the embedded defaults).
    pub fn discover(
        explicit: Option<&Path>,
        dir: &Path,
    ) -> Result<Option<(PathBuf, ProjectConfig)>, ConfigError> {
        let path = match explicit {
            Some(p) if !p.is_file() => return Err(ConfigError::Missing(p.to_path_buf())),
            Some(p) => p.to_path_buf(),
            None => {
                let p = dir.join(FILE_NAME);
                if !p.is_file() {
                    return Ok(None);
                }
                p
            }
        };
        let config = ProjectConfig::load(&path)?;
        Ok(Some((path, config)))
    }

    /// Reads and checks one file.
    pub fn load(path: &Path) -> Result<ProjectConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Io {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new(""));
        ProjectConfig::parse(path, &text).map(|c| c.relative_to(base))
    }

    /// Parses a file's text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<ProjectConfig, ConfigError> {
        let mut config: ProjectConfig = toml::from_str(text).map_err(|e: toml::de::Error| {
            let line = e.span().map_or(1, |s| line_at(text, s.start));
            // toml's message may run over lines (and its snippet would echo
            // a value, perhaps a URL with a password): its first line only.
            let message = e.message().lines().next().unwrap_or("invalid").trim();
            ConfigError::Invalid {
                path: path.to_path_buf(),
                line,
                message: message.trim_end_matches('.').to_string(),
            }
        })?;
        config.accept = std::mem::take(&mut config.accept_read)
            .into_iter()
            .map(|entry| (line_at(text, entry.span().start), entry.into_inner()))
            .collect();
        Ok(config)
    }

    fn relative_to(mut self, base: &Path) -> ProjectConfig {
        for p in [&mut self.migrations, &mut self.apps, &mut self.setup]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_is_read_and_paths_follow_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(
            &path,
            "migrations = \"db/migrations\"\napps = \"/abs/apps\"\nlayout = \"golang-migrate\"\nrows = 500\npostgres = \"local\"\nimage = \"postgres:17\"\nsince = \"20240101120000\"\napp_role = \"shop_rw\"\nmigrator_superuser = true\nsetup = \"db/init.sql\"\nmigrate_command = \"python manage.py migrate\"\nhistory_table = \"django_migrations\"\n",
        )
        .unwrap();
        let (found, c) = ProjectConfig::discover(None, dir.path()).unwrap().unwrap();
        assert_eq!(found, path);
        assert_eq!(
            c,
            ProjectConfig {
                migrations: Some(dir.path().join("db/migrations")),
                apps: Some(PathBuf::from("/abs/apps")),
                layout: Some(Layout::GolangMigrate),
                rows: Some(500),
                postgres: Some("local".into()),
                image: Some("postgres:17".into()),
                since: Some(VersionText::Text("20240101120000".into())),
                copy_rows: Vec::new(),
                app_role: Some("shop_rw".into()),
                migrator_superuser: Some(true),
                setup: Some(dir.path().join("db/init.sql")),
                accept_read: Vec::new(),
                accept: Vec::new(),
                migrate_command: Some("python manage.py migrate".into()),
                history_table: Some("django_migrations".into()),
            }
        );
        let c = ProjectConfig::parse(&path, "since = 2").unwrap();
        assert_eq!(c.since.unwrap().to_string(), "2");
    }

    #[test]
    fn accept_entries_are_read_with_their_lines_and_a_reason_is_required() {
        let path = Path::new("rollsafe.toml");
        let text = "rows = 5\n\n[[accept]]\nmigration = \"V4\"\nid = \"locks.blocking-index-build\"\nobject = \"tags\"\nreason = \"200 rows\"\nuntil = 2027-03-31\n\n[[accept]]\nmigration = 20240101120000\nid = \"rewrite.table-rewritten\"\nreason = \"window\"\nuntil = \"2026-01-02\"\n";
        let c = ProjectConfig::parse(path, text).unwrap();
        assert_eq!(c.accept.len(), 2);
        let (line, first) = &c.accept[0];
        assert!((3..=4).contains(line), "{line}");
        assert_eq!(first.migration.to_string(), "V4");
        assert_eq!(first.object.as_deref(), Some("tags"));
        assert_eq!(first.until, chrono::NaiveDate::from_ymd_opt(2027, 3, 31));
        assert_eq!(c.accept[1].1.migration.to_string(), "20240101120000");
        assert_eq!(
            c.accept[1].1.until,
            chrono::NaiveDate::from_ymd_opt(2026, 1, 2)
        );
        let no_reason = "[[accept]]\nmigration = \"V4\"\nid = \"locks.blocking-index-build\"\n";
        let err = ProjectConfig::parse(path, no_reason)
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing field `reason`"), "{err}");
        assert!(err.starts_with("rollsafe.toml:"), "{err}");
        let blank = "[[accept]]\nmigration = \"V4\"\nid = \"x.y\"\nreason = \" \"\n";
        let err = ProjectConfig::parse(path, blank).unwrap_err().to_string();
        assert!(
            err.starts_with("rollsafe.toml:4: [[accept]] reason is empty"),
            "{err}"
        );
        let bad_date =
            "[[accept]]\nmigration = \"V4\"\nid = \"x.y\"\nreason = \"r\"\nuntil = \"soon\"\n";
        let err = ProjectConfig::parse(path, bad_date)
            .unwrap_err()
            .to_string();
        assert!(err.contains("until `soon` is not a date"), "{err}");
    }

    #[test]
    fn no_file_means_the_defaults_and_a_named_file_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ProjectConfig::discover(None, dir.path()).unwrap().is_none());
        let missing = dir.path().join("nope.toml");
        let err = ProjectConfig::discover(Some(&missing), dir.path()).unwrap_err();
        assert!(matches!(err, ConfigError::Missing(_)), "{err}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_one_line_with_the_line_number() {
        let path = Path::new("rollsafe.toml");
        let err = ProjectConfig::parse(path, "rows = 5\nmigratons = \"m\"\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("rollsafe.toml:2: unknown field `migratons`"),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
        let err = ProjectConfig::parse(path, "layout = \"knex\"").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("rollsafe.toml:1: unknown variant `knex`"),
            "{err}"
        );
        let err = ProjectConfig::parse(path, "since = 1\nrows = 20000000\n").unwrap_err();
        assert_eq!(
            err.to_string().split(';').next().unwrap(),
            "rollsafe.toml:2: rows 20000000 is out of range"
        );
        let err = ProjectConfig::parse(path, "rows = \"many\"").unwrap_err();
        assert!(err.to_string().contains("rollsafe.toml:1:"), "{err}");
        let err = ProjectConfig::parse(path, "postgres = 'postgres://u:hunter2@h/db\nrows = 1")
            .unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

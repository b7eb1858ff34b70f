//! The application versions a rehearsal replays: each is a named statement
//! set (the queries the app runs) that declares the first schema version it
//! needs and, when its project brings one, a driver for the app's
//! behaviours the cross-version checks exercise (create a complete row,
//! start a two-phase create, read) and the project's own checks.
//!
//! The rollout window follows from `needs` and `retired` (issue 11): an app
//! runs on the schema versions `needs ≤ version < retired` (no `retired`:
//! still live, no upper end). While migration k rolls out, the schema is at
//! k−1 and then at k with the app fleet unchanged, so an app is live during
//! k ([`AppVersion::live_during`]) when it runs on both: `needs ≤ k−1` and
//! `k < retired`. An app retired at k (`retired = k`) was stopped before k
//! was applied and is not replayed against k; one that needs k may run on k
//! ([`AppVersion::may_run_on`]) but only rolls out after k.
//!
//! Besides the embedded sets, a project's apps are read from a directory
//! (`--apps DIR`, [`load_dir`]): every `*.sql` there is a statement set,
//! and `<app>.seed.sql` next to it, if any, seeds rows the way that app
//! writes them (`{rows}` is the row count, as in `src/dao/seed/*.sql`).
//!
//! A project may bring more than statement sets: drivers for its apps'
//! behaviours ([`AppDriver`]: writes as the app's code makes them, and
//! the two-phase protocol; its readers stay the set's read statements)
//! and rules about its own tables ([`ProjectRule`]). The shipped project (`crate::dao::shipped`) brings
//! both: statement sets, seeds, drivers that call the DAO's Rust API
//! (which executes those very statement sets, so the verifier proves the
//! code that ships) and its rules; `main.rs` hands them to `verify` and
//! `check`. Nothing here knows an app by name.
//!
//! The statement-set format is [`statements`]; how a set's statements are
//! run against a database (prepared, executed with values, rolled back) is
//! [`replay`], used by verify and the generator. This module sits below
//! `verify` and `check` (which replay the sets and run the rules) and
//! below `dao` (which implements them): it imports none of them.

pub mod bindings;
pub mod replay;
pub mod statements;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use postgres::Client;
use uuid::Uuid;

use crate::catalog::Catalog;
use crate::report::Finding;
use crate::schema::Snapshot;
use statements::{StatementSet, StatementSetError};

/// Why a statement set cannot be used as an app version.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Parse(#[from] StatementSetError),
    #[error("{source_name}: the header needs `-- app: <name>` and `-- needs: <schema version>` lines before the first statement")]
    MissingHeader { source_name: String },
    #[error("{source_name}: `-- needs: {value}` is not a schema version number{hint}")]
    BadNeeds {
        source_name: String,
        value: String,
        hint: String,
    },
    #[error("{source_name}: `-- retired: {value}` is not a schema version number{hint}; write the first version at which the app no longer runs, or drop the line while it is live")]
    BadRetired {
        source_name: String,
        value: String,
        hint: String,
    },
    #[error("{source_name}: `-- retired: {retired}` is not after `-- needs: {needs}`; an app runs on needs ≤ version < retired, so retired must be a later version")]
    RetiredBeforeNeeds {
        source_name: String,
        needs: String,
        retired: String,
    },
    #[error("app `{app}` is declared twice ({first} and {second}); give each app version its own `-- app:` name")]
    DuplicateApp {
        app: String,
        first: String,
        second: String,
    },
    #[error("{file}: seeds app `{app}` but no statement set in {dir} declares `-- app: {app}`; rename it to <app>.seed.sql of an app there, or remove it")]
    OrphanSeed {
        file: String,
        app: String,
        dir: String,
    },
    #[error("apps directory {0} does not exist or is not a directory; pass --apps with the directory holding the apps' statement sets (*.sql)")]
    MissingDir(PathBuf),
    #[error("{0} holds no statement set (*.sql with `-- app:` and `-- needs:` headers); add one per app version, or drop --apps to use the embedded apps")]
    NoApps(PathBuf),
    #[error("cannot read {path}: {detail}")]
    Io { path: PathBuf, detail: String },
    #[error("{path}: is not valid UTF-8; save the file as UTF-8")]
    NotUtf8 { path: PathBuf },
    #[error("{source_name}: `-- role: {value}` is not a role name rollsafe can create; use a plain identifier (letters, digits, _) that does not start with pg_")]
    BadRole { source_name: String, value: String },
    #[error("{source_name}: statement `{statement}` has `-- kind: {value}`; use `-- kind: read` or `-- kind: write`")]
    BadKind {
        source_name: String,
        statement: String,
        value: String,
    },
}

/// A role name as an app or `app_role` gives it: a plain identifier
/// (letters, digits, `_`, not starting with a digit, at most 63 bytes),
/// not one of PostgreSQL's reserved `pg_` names; None otherwise.
pub fn role_name(text: &str) -> Option<String> {
    let t = text.trim();
    let plain = !t.is_empty()
        && t.len() <= 63
        && !t.starts_with(|c: char| c.is_ascii_digit())
        && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !t.to_ascii_lowercase().starts_with("pg_");
    plain.then(|| t.to_string())
}

/// What a statement does to the tables it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

/// One app version: its statements and its rollout window's start.
#[derive(Clone)]
pub struct AppVersion {
    pub name: String,
    /// First schema version the app needs (rollsafe's version: see
    /// [`crate::catalog::Migration::version`]).
    pub needs: i32,
    /// First schema version at which the app no longer runs (`-- retired:`);
    /// None while it is live.
    pub retired: Option<i32>,
    /// `<app>.seed.sql` next to the set: rows the way this app writes them,
    /// `{rows}` standing for the row count. None: no seed file.
    pub seed_sql: Option<String>,
    pub set: StatementSet,
    /// The app's behaviours, when its project brings a driver (the shipped
    /// project does; `--apps DIR` apps have none): one more source of
    /// rollout writes, and the two-phase and rollback scenarios. Its
    /// readers are the set's, like any app's.
    pub driver: Option<Arc<dyn AppDriver>>,
    /// The database role the app connects as (`-- role:`); None: the
    /// project's default (`app_role`), else the migrator's
    /// ([`crate::sessions`]).
    pub role: Option<String>,
}

impl std::fmt::Debug for AppVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppVersion")
            .field("name", &self.name)
            .field("needs", &self.needs)
            .field("retired", &self.retired)
            .field("seed_sql", &self.seed_sql.is_some())
            .field("set", &self.set.source)
            .field("driver", &self.driver.is_some())
            .field("role", &self.role)
            .finish()
    }
}

impl AppVersion {
    /// An app version from a statement set whose `-- needs:`/`-- retired:`
    /// are refinery versions (`3` or `V3`), as the embedded sets' are.
    pub fn from_set(set: StatementSet) -> Result<AppVersion, AppError> {
        let refinery = |text: &str| {
            let t = text.trim();
            t.strip_prefix('V').unwrap_or(t).parse().ok()
        };
        AppVersion::from_set_with(set, &refinery, &refinery, "")
    }

    /// An app version whose versions are read in `catalog`'s layout (a
    /// timestamp names the migration with that version).
    pub fn from_set_in(set: StatementSet, catalog: &Catalog) -> Result<AppVersion, AppError> {
        let hint = format!(
            " of {} (its versions run from {} to {})",
            catalog.source,
            catalog
                .migrations()
                .first()
                .map_or(String::new(), |m| m.label.clone()),
            catalog
                .migrations()
                .last()
                .map_or(String::new(), |m| m.label.clone()),
        );
        // `needs` names a migration of the directory; `retired` may also be
        // a version after the last one (an app whose end is planned), which
        // the rehearsal never reaches.
        // An app that needs a migration needs what the same migrate runs
        // right after it too: Flyway's afterMigrate callbacks (grants,
        // refreshed views) reach production before the app does.
        let needs = |text: &str| {
            catalog
                .resolve_version(text)
                .filter(|v| catalog.get(*v).is_some())
                .map(|v| catalog.through_callbacks(v))
        };
        let retired = |text: &str| {
            if catalog.layout == crate::catalog::Layout::Refinery {
                return catalog.resolve_version(text);
            }
            // Other layouts number their migrations 1, 2, 3 …: a later
            // version is the one after the last.
            needs(text).or_else(|| {
                let t = text.trim();
                let n: u64 = t.strip_prefix('V').unwrap_or(t).parse().ok()?;
                let last = catalog.migrations().last()?;
                let last_label = last.label.trim_start_matches('V').parse::<u64>().ok()?;
                (n > last_label).then_some(last.version.saturating_add(1))
            })
        };
        AppVersion::from_set_with(set, &needs, &retired, &hint)
    }

    fn from_set_with(
        set: StatementSet,
        resolve_needs: &dyn Fn(&str) -> Option<i32>,
        resolve_retired: &dyn Fn(&str) -> Option<i32>,
        hint: &str,
    ) -> Result<AppVersion, AppError> {
        let missing = || AppError::MissingHeader {
            source_name: set.source.clone(),
        };
        let name = set.header("app").ok_or_else(missing)?.to_string();
        let needs_text = set.header("needs").ok_or_else(missing)?;
        let needs = resolve_needs(needs_text).ok_or_else(|| AppError::BadNeeds {
            source_name: set.source.clone(),
            value: needs_text.to_string(),
            hint: hint.to_string(),
        })?;
        let retired = match set.header("retired") {
            None => None,
            Some(text) => {
                let retired = resolve_retired(text).ok_or_else(|| AppError::BadRetired {
                    source_name: set.source.clone(),
                    value: text.to_string(),
                    hint: hint.to_string(),
                })?;
                if retired <= needs {
                    return Err(AppError::RetiredBeforeNeeds {
                        source_name: set.source.clone(),
                        needs: needs_text.to_string(),
                        retired: text.to_string(),
                    });
                }
                Some(retired)
            }
        };
        for st in set.statements() {
            for value in st.meta_values("kind") {
                if !matches!(value.trim(), "read" | "write") {
                    return Err(AppError::BadKind {
                        source_name: set.source.clone(),
                        statement: st.name.clone(),
                        value: value.to_string(),
                    });
                }
            }
        }
        let role = match set.header("role") {
            None => None,
            Some(text) => Some(role_name(text).ok_or_else(|| AppError::BadRole {
                source_name: set.source.clone(),
                value: text.to_string(),
            })?),
        };
        Ok(AppVersion {
            name,
            needs,
            retired,
            seed_sql: None,
            set,
            driver: None,
            role,
        })
    }

    /// Whether the app may run on schema version `v`: `needs ≤ v < retired`.
    pub fn may_run_on(&self, v: i32) -> bool {
        self.needs <= v && self.retired.map_or(true, |r| v < r)
    }

    /// Whether the app is running while migration `k` rolls out: it runs on
    /// the schema before (k−1) and keeps running on k, so it must work on
    /// both. Written `needs ≤ k−1 ∧ k < retired`; with gaps between
    /// versions (V2, V5) it is the same test against the previous
    /// migration as long as `needs` and `retired` name migrations.
    pub fn live_during(&self, k: i32) -> bool {
        self.may_run_on(k - 1) && self.may_run_on(k)
    }

    /// The statement's `-- kind:` declaration, if it has one.
    pub fn declared_kind(&self, statement: &str) -> Option<Kind> {
        let st = self.set.get(statement).ok()?;
        let value = st.meta_values("kind").last()?;
        Some(if value.trim() == "write" {
            Kind::Write
        } else {
            Kind::Read
        })
    }

    pub fn parse(source: &str, text: &str) -> Result<AppVersion, AppError> {
        AppVersion::from_set(StatementSet::parse(source, text)?)
    }
}

/// The app versions of a project directory (`--apps DIR`), their versions
/// read in `catalog`'s layout, ordered by `needs` then name: every `*.sql`
/// is a statement set, except `<app>.seed.sql`, the seed of app `<app>`.
pub fn load_dir(dir: &Path, catalog: &Catalog) -> Result<Vec<AppVersion>, AppError> {
    if !dir.is_dir() {
        return Err(AppError::MissingDir(dir.to_path_buf()));
    }
    let io = |path: &Path, e: std::io::Error| AppError::Io {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let read = |path: &Path| -> Result<String, AppError> {
        let bytes = std::fs::read(path).map_err(|e| io(path, e))?;
        String::from_utf8(bytes).map_err(|_| AppError::NotUtf8 {
            path: path.to_path_buf(),
        })
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        if path.extension().is_some_and(|x| x == "sql") && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let mut apps: Vec<AppVersion> = Vec::new();
    let mut seeds: BTreeMap<String, PathBuf> = BTreeMap::new();
    for path in paths {
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        if let Some(app) = file.strip_suffix(".seed.sql") {
            seeds.insert(app.to_string(), path.clone());
            continue;
        }
        let source = path.display().to_string();
        let app = AppVersion::from_set_in(StatementSet::parse(&source, &read(&path)?)?, catalog)?;
        if let Some(first) = apps.iter().find(|a| a.name == app.name) {
            return Err(AppError::DuplicateApp {
                app: app.name,
                first: first.set.source.clone(),
                second: source,
            });
        }
        apps.push(app);
    }
    for (app, path) in seeds {
        let Some(target) = apps.iter_mut().find(|a| a.name == app) else {
            return Err(AppError::OrphanSeed {
                file: path.display().to_string(),
                app,
                dir: dir.display().to_string(),
            });
        };
        target.seed_sql = Some(read(&path)?);
    }
    if apps.is_empty() {
        return Err(AppError::NoApps(dir.to_path_buf()));
    }
    apps.sort_by(|a, b| a.needs.cmp(&b.needs).then(a.name.cmp(&b.name)));
    Ok(apps)
}

/// A row an app's own code wrote: its table and the value of its primary
/// key (one uuid column), so the rehearsal can find it and run every
/// app's readers on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub table: String,
    pub id: Uuid,
}

/// An app's behaviours, driven through the app's own code (the shipped
/// project's DAO). A driver is one more source of writes beside the
/// app's statement set, never a second way of reading: the readers the
/// rehearsal compares are the set's read statements, which the DAO runs
/// by name (so the SQL exists once). What a driver adds is what has no
/// statement equivalent: a create as the app's code makes it (values
/// that satisfy its foreign keys and its own rules), the two-phase
/// protocol's in-flight row, and the rollback scenario
/// ([`crate::verify::measure::cross_version`]). Each create makes what it needs (a
/// parent group of its own, named after `label`) so scenarios never
/// collide.
pub trait AppDriver: Send + Sync {
    /// Creates a complete row the way this app does.
    fn create_complete(&self, c: &mut Client, label: &str) -> anyhow::Result<Created>;
    /// Phase 1 of a two-phase create (a row not yet complete); None for an
    /// app that creates in one phase.
    fn begin_create(&self, c: &mut Client, label: &str) -> anyhow::Result<Option<Uuid>>;
    /// Whether this app's ordinary reader returns the row (the two-phase
    /// and rollback scenarios).
    fn sees(&self, c: &mut Client, id: Uuid) -> anyhow::Result<bool>;
    /// The project's own rule about this app's behaviour, run by verify on
    /// the final schema (the shipped project: the two-phase create's retry
    /// and race rules); None: the project declares none.
    fn final_check(&self) -> Option<Arc<dyn ProjectRule>> {
        None
    }
}

/// A rule a project brings about its own tables and apps, beside the
/// engine's checks: verify runs it on a database at the final schema that
/// the real migrations built, `rollsafe check` on the live database. A
/// rule answers where it applies and says None elsewhere. Its findings are
/// made in the project's module, with [`ProjectRule::check`] as their
/// check.
pub trait ProjectRule: Send + Sync {
    /// The check its findings belong to (`dao`, `invariants`).
    fn check(&self) -> &'static str;
    /// What holds when it passes, one line.
    fn description(&self) -> &'static str;
    /// verify: on the database at `url`, at the final schema version `v`,
    /// connected as the declaring app's role.
    fn on_final_schema(&self, _v: i32, _url: &str) -> Option<Vec<Finding>> {
        None
    }
    /// `rollsafe check`: on the live database (a read-only session) and
    /// its schema.
    fn on_live(
        &self,
        _c: &mut Client,
        _live: &Snapshot,
    ) -> Option<Result<Vec<Finding>, postgres::Error>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_required() {
        let err = AppVersion::parse("x.sql", "-- name: a\nSELECT 1").unwrap_err();
        assert!(err.to_string().contains("-- app: <name>"), "{err}");
        let err = AppVersion::parse("x.sql", "-- app: a\n-- needs: two\n-- name: a\nSELECT 1")
            .unwrap_err();
        assert!(err.to_string().contains("`-- needs: two`"), "{err}");
        let err = AppVersion::parse(
            "x.sql",
            "-- app: a\n-- needs: 2\n-- name: s\n-- kind: wirte\nSELECT 1",
        )
        .unwrap_err();
        assert!(err.to_string().contains("`-- kind: wirte`"), "{err}");
        let app = AppVersion::parse(
            "x.sql",
            "-- app: a\n-- needs: 2\n-- name: s\n-- kind: write\nSELECT 1",
        )
        .unwrap();
        assert_eq!(app.declared_kind("s"), Some(Kind::Write));
        assert_eq!(app.role, None);
        let app = AppVersion::parse(
            "x.sql",
            "-- app: a\n-- needs: 2\n-- role: shop_rw\n-- name: s\nSELECT 1",
        )
        .unwrap();
        assert_eq!(app.role.as_deref(), Some("shop_rw"));
        for bad in ["pg_read_server_files", "x; DROP ROLE y", "", "1abc"] {
            let err = AppVersion::parse(
                "x.sql",
                &format!("-- app: a\n-- needs: 2\n-- role: {bad}\n-- name: s\nSELECT 1"),
            )
            .unwrap_err();
            assert!(
                err.to_string().contains("is not a role name"),
                "{bad}: {err}"
            );
        }
    }

    fn app(needs: i32, retired: Option<i32>) -> AppVersion {
        let retired = retired.map_or(String::new(), |r| format!("-- retired: V{r}\n"));
        AppVersion::parse(
            "x.sql",
            &format!("-- app: a\n-- needs: {needs}\n{retired}-- name: s\nSELECT 1"),
        )
        .unwrap()
    }

    #[test]
    fn windows_are_needs_up_to_retired_and_a_rollout_needs_both_sides() {
        let live = app(2, None);
        assert_eq!(live.retired, None);
        assert!(!live.may_run_on(1) && live.may_run_on(2) && live.may_run_on(9));
        // Live during k: it ran on k−1 and keeps running on k.
        assert!(
            !live.live_during(2),
            "needs 2: rolls out after V2, not during it"
        );
        assert!(live.live_during(3) && live.live_during(9));

        let retired = app(2, Some(4));
        assert_eq!(retired.retired, Some(4));
        assert!(retired.may_run_on(3) && !retired.may_run_on(4));
        assert!(retired.live_during(3));
        assert!(
            !retired.live_during(4),
            "retired at V4: stopped before V4 is applied, never replayed against it"
        );
    }

    #[test]
    fn retired_must_be_a_version_after_needs() {
        let err = AppVersion::parse(
            "x.sql",
            "-- app: a\n-- needs: 3\n-- retired: soon\n-- name: s\nSELECT 1",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("x.sql: `-- retired: soon` is not a schema version number"),
            "{err}"
        );
        let err = AppVersion::parse(
            "x.sql",
            "-- app: a\n-- needs: 3\n-- retired: V3\n-- name: s\nSELECT 1",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "x.sql: `-- retired: V3` is not after `-- needs: 3`; an app runs on needs ≤ version < retired, so retired must be a later version"
        );
    }

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (f, text) in files {
            std::fs::write(dir.join(f), text).unwrap();
        }
    }

    fn sqlx_catalog() -> (tempfile::TempDir, Catalog) {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                ("20240101120000_books.sql", "CREATE TABLE books (id int)"),
                (
                    "20240201120000_title.sql",
                    "ALTER TABLE books ADD title text",
                ),
                ("20240301120000_drop.sql", "SELECT 1"),
            ],
        );
        let catalog = Catalog::from_dir(dir.path()).unwrap();
        (dir, catalog)
    }

    #[test]
    fn a_directory_of_sets_with_seeds_and_timestamp_versions() {
        let (_m, catalog) = sqlx_catalog();
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                (
                    "shop_v2.sql",
                    "-- app: shop_v2\n-- needs: 20240201120000\n-- name: titles\nSELECT title FROM books",
                ),
                (
                    "shop_v1.sql",
                    "-- app: shop_v1\n-- needs: 20240101120000\n-- retired: 20240301120000\n-- name: ids\nSELECT id FROM books",
                ),
                ("shop_v1.seed.sql", "INSERT INTO books SELECT generate_series(1, {rows})"),
                ("notes.txt", "not a set"),
            ],
        );
        let apps = load_dir(dir.path(), &catalog).unwrap();
        let shape: Vec<_> = apps
            .iter()
            .map(|a| (a.name.as_str(), a.needs, a.retired, a.seed_sql.is_some()))
            .collect();
        assert_eq!(
            shape,
            [("shop_v1", 1, Some(3), true), ("shop_v2", 2, None, false)]
        );
        assert!(apps[0].seed_sql.as_deref().unwrap().contains("{rows}"));
    }

    #[test]
    fn directory_errors_name_the_file_and_the_fix() {
        let (_m, catalog) = sqlx_catalog();
        let dir = tempfile::tempdir().unwrap();
        let err = load_dir(dir.path(), &catalog).unwrap_err();
        assert!(matches!(err, AppError::NoApps(_)), "{err}");

        write(
            dir.path(),
            &[("a.sql", "-- app: a\n-- needs: 7\n-- name: s\nSELECT 1")],
        );
        let err = load_dir(dir.path(), &catalog).unwrap_err().to_string();
        assert!(
            err.contains("a.sql: `-- needs: 7` is not a schema version number of")
                && err.contains("from 20240101120000 to 20240301120000"),
            "{err}"
        );

        write(
            dir.path(),
            &[
                (
                    "a.sql",
                    "-- app: shop\n-- needs: 20240101120000\n-- name: s\nSELECT 1",
                ),
                (
                    "b.sql",
                    "-- app: shop\n-- needs: 20240201120000\n-- name: s\nSELECT 1",
                ),
            ],
        );
        let err = load_dir(dir.path(), &catalog).unwrap_err();
        assert!(
            matches!(&err, AppError::DuplicateApp { app, .. } if app == "shop"),
            "{err}"
        );

        std::fs::remove_file(dir.path().join("b.sql")).unwrap();
        write(dir.path(), &[("ghost.seed.sql", "SELECT 1")]);
        let err = load_dir(dir.path(), &catalog).unwrap_err().to_string();
        assert!(err.contains("ghost.seed.sql: seeds app `ghost`"), "{err}");

        std::fs::remove_file(dir.path().join("ghost.seed.sql")).unwrap();
        write(dir.path(), &[("c.sql", "-- name: s\nSELECT 1")]);
        let err = load_dir(dir.path(), &catalog).unwrap_err().to_string();
        assert!(
            err.contains("c.sql: the header needs `-- app: <name>`"),
            "{err}"
        );

        let err = load_dir(Path::new("/nonexistent/apps"), &catalog).unwrap_err();
        assert!(matches!(err, AppError::MissingDir(_)), "{err}");
    }

    #[test]
    fn needs_names_a_migration_and_retired_may_lie_beyond_the_last() {
        let (_m, catalog) = sqlx_catalog();
        let set = |header: &str| {
            StatementSet::parse("x.sql", &format!("{header}-- name: s\nSELECT 1")).unwrap()
        };
        let app = AppVersion::from_set_in(
            set("-- app: a\n-- needs: 20240201120000\n-- retired: 20250101000000\n"),
            &catalog,
        )
        .unwrap();
        assert_eq!((app.needs, app.retired), (2, Some(4)));
        assert!(
            app.live_during(3),
            "a planned retirement never cuts the rehearsal short"
        );
        let err = AppVersion::from_set_in(
            set("-- app: a\n-- needs: 20240201120000\n-- retired: 20240215000000\n"),
            &catalog,
        )
        .unwrap_err();
        assert!(matches!(err, AppError::BadRetired { .. }), "{err}");

        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[("V1__a.sql", "SELECT 1"), ("V2__b.sql", "SELECT 2")],
        );
        let refinery = Catalog::from_dir(dir.path()).unwrap();
        let err = AppVersion::from_set_in(set("-- app: a\n-- needs: 7\n"), &refinery).unwrap_err();
        assert!(
            err.to_string()
                .contains("`-- needs: 7` is not a schema version number of")
                && err.to_string().contains("from V1 to V2"),
            "{err}"
        );
        let app =
            AppVersion::from_set_in(set("-- app: a\n-- needs: V1\n-- retired: 9\n"), &refinery)
                .unwrap();
        assert_eq!((app.needs, app.retired), (1, Some(9)));
    }
}

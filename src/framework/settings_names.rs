//! The names a project's settings read its database from, when they are
//! not `DATABASE_URL` or libpq's `PG*` (which rollsafe sets for every
//! command): a project whose migrate reached another database is told to
//! pass rollsafe's values on under those names, and the advice is only
//! worth following if the names are the project's own.
//!
//! Read from the dotenv files a project keeps beside its code (`.env`,
//! `.env.example`, `.env.sample`, `.env.template`, `.env.dist`), then its
//! Compose files (`docker-compose.yml`, `compose.yml`, in the folder or
//! its `docker/`), in the command's folder and the folders above it up
//! to the repository's top (a `backend/` of a monorepo reads `../.env`):
//! each `NAME=value` or `NAME: value` line
//! whose name speaks of a database (`POSTGRES_`, `DB_`, `DATABASE_`,
//! `PG_`…) and ends as a part of a connection does (`_HOST`/`_SERVER`,
//! `_PORT`, `_USER`, `_PASSWORD`, `_DB`/`_NAME`/`_DATABASE`, or `_URL`/
//! `_URI`/`_DSN` for a whole URL). Only names are read: a value (a
//! password) never leaves the file. Nothing of the project runs.
//!
//! Without such names the advice falls back to the common `DB_NAME`,
//! `DB_USER`, … and says they are an example.

use std::path::Path;

/// What to prefix a project's command with so that its settings reach
/// rollsafe's database, and where the names came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassOn {
    /// `POSTGRES_SERVER=$PGHOST POSTGRES_PORT=$PGPORT …`.
    pub assignments: String,
    /// The file the names were read in (relative to the command's
    /// folder: `../.env`); None for the generic example.
    pub from: Option<String>,
    /// Where the project's settings write the database or role the
    /// command connected with as a literal (`netbox/configuration.py
    /// line 19 writes netbox`), when no dotenv file names a database:
    /// the setting to change.
    pub written_at: Option<String>,
}

impl PassOn {
    /// The example when the project's files name nothing.
    fn generic() -> PassOn {
        PassOn {
            assignments: "DB_NAME=$PGDATABASE DB_USER=$PGUSER DB_PASSWORD=$PGPASSWORD DB_HOST=$PGHOST DB_PORT=$PGPORT".into(),
            from: None,
            written_at: None,
        }
    }

    /// `the names ../.env sets` or `with the names its settings read`,
    /// for the advice.
    pub fn whose(&self) -> String {
        match &self.from {
            Some(file) => format!("under the names {file} sets"),
            None => "under the names its settings read".into(),
        }
    }
}

/// The files read, in the order they are preferred: dotenv files, then
/// Compose files (the `environment:` of the app's service, `NAME: value`
/// or `- NAME=value`), in a folder or its `docker/`.
const FILES: [&str; 15] = [
    ".env",
    ".env.example",
    ".env.sample",
    ".env.template",
    ".env.dist",
    "docker-compose.yml",
    "docker-compose.yaml",
    "compose.yml",
    "compose.yaml",
    "docker/docker-compose.yml",
    "docker/docker-compose.yaml",
    "docker/compose.yml",
    "docker/compose.yaml",
    "docker-compose.dev.yml",
    "docker/docker-compose.dev.yml",
];

/// How many folders above the command's are read at most (a repository's
/// top is usually one or two up).
const LEVELS: usize = 3;

/// The largest dotenv file read.
const MAX_BYTES: u64 = 256 * 1024;

/// The prefix that passes rollsafe's database on under the names the
/// project's dotenv files use, read in `dir` and up to [`LEVELS`]
/// folders above it (stopping at a repository's top); the generic
/// example when none names a database.
pub fn pass_on(dir: &Path) -> PassOn {
    let mut here = Some(dir);
    let mut up = String::new();
    for _ in 0..=LEVELS {
        let Some(folder) = here else { break };
        for file in FILES {
            let path = folder.join(file);
            let text = match std::fs::metadata(&path) {
                Ok(m) if m.is_file() && m.len() <= MAX_BYTES => {
                    std::fs::read_to_string(&path).unwrap_or_default()
                }
                _ => continue,
            };
            if let Some(assignments) = assignments(&text) {
                return PassOn {
                    assignments,
                    from: Some(format!("{up}{file}")),
                    written_at: None,
                };
            }
        }
        if folder.join(".git").exists() {
            break;
        }
        here = folder.parent();
        up.push_str("../");
    }
    PassOn::generic()
}

/// How deep below the command's folder a settings file is looked for.
const SETTINGS_DEPTH: usize = 4;

/// Where a settings file below `dir` writes one of `values` (the
/// database or role a command connected with instead of rollsafe's) as
/// a quoted literal on a line that speaks of a database, first found:
/// `netbox/configuration.py line 19 writes netbox`. A settings file is a
/// `*.py` whose name speaks of settings or configuration, an `*.ini`, a
/// `database.yml`. Only the file, line and value (already in the
/// message) are told, never the line: it may hold a password.
pub fn written_at(dir: &Path, values: &[String]) -> Option<String> {
    let is_settings = |name: &str| {
        (name.ends_with(".py") && ["settings", "config"].iter().any(|w| name.contains(w)))
            || name.ends_with(".ini")
            || name == "database.yml"
    };
    let speaks_of_a_database = |line: &str| {
        let lower = line.to_lowercase();
        ["name", "database", "db", "user", "role"]
            .iter()
            .any(|w| lower.contains(w))
    };
    let files = super::detect::project_files(dir, SETTINGS_DEPTH, is_settings);
    files.into_iter().find_map(|path| {
        let small = std::fs::metadata(&path).is_ok_and(|m| m.len() <= MAX_BYTES);
        let text = small
            .then(|| std::fs::read_to_string(&path).ok())
            .flatten()?;
        text.lines().enumerate().find_map(|(i, line)| {
            let code = line.split('#').next().unwrap_or_default();
            // Quoted, or the path of a URL (`…@db:5432/netbox`).
            let value = values.iter().find(|v| {
                !v.is_empty()
                    && (["'", "\"", "/"].iter().any(|open| {
                        ["'", "\"", "?"]
                            .iter()
                            .any(|close| code.contains(&format!("{open}{v}{close}")))
                    }) || code.trim_end().ends_with(&format!("/{v}")))
            })?;
            speaks_of_a_database(code).then(|| {
                let shown = path.strip_prefix(dir).unwrap_or(&path).display();
                format!("{shown} line {} writes {value}", i + 1)
            })
        })
    })
}

/// The libpq variable a setting's name stands for, by how it ends.
fn libpq_of(name: &str) -> Option<&'static str> {
    let speaks_of_a_database = [
        "POSTGRES", "PG_", "PGSQL", "DB_", "DATABASE", "PSQL", "SQL_",
    ]
    .iter()
    .any(|p| name.contains(p));
    // rollsafe's own names reach the command already.
    if !speaks_of_a_database
        || name == "DATABASE_URL"
        || name.starts_with("PG") && !name.starts_with("PG_")
    {
        return None;
    }
    let ends = |suffixes: &[&str]| suffixes.iter().any(|s| name.ends_with(s));
    Some(if ends(&["_URL", "_URI", "_DSN"]) {
        "$DATABASE_URL"
    } else if ends(&["_HOST", "_SERVER", "_HOSTNAME"]) {
        "$PGHOST"
    } else if ends(&["_PORT"]) {
        "$PGPORT"
    } else if ends(&["_USER", "_USERNAME"]) {
        "$PGUSER"
    } else if ends(&["_PASSWORD", "_PASS", "_PASSWD"]) {
        "$PGPASSWORD"
    } else if ends(&["_DB", "_NAME", "_DATABASE", "_DBNAME"]) {
        "$PGDATABASE"
    } else {
        return None;
    })
}

/// `NAME=$PG…` for each database setting `text` (a dotenv file) names,
/// the first name per variable, in the file's order; None when it names
/// no host and no URL (a lone `DB_NAME` does not move a connection).
fn assignments(text: &str) -> Option<String> {
    let mut taken: Vec<&'static str> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let line = line.strip_prefix("- ").unwrap_or(line).trim_start();
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        // `NAME=value` (dotenv, a Compose list) or `NAME: value` (a
        // Compose map): whichever comes first ends the name.
        let Some(end) = line.find(['=', ':']) else {
            continue;
        };
        let name = &line[..end];
        let name = name.trim();
        let is_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        let Some(libpq) = libpq_of(name).filter(|_| is_name) else {
            continue;
        };
        if taken.contains(&libpq) {
            continue;
        }
        taken.push(libpq);
        out.push(format!("{name}={libpq}"));
    }
    let moves_it = taken.contains(&"$PGHOST") || taken.contains(&"$DATABASE_URL");
    moves_it.then(|| out.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dotenv_files_database_names_become_the_prefix_values_never_read() {
        let text = "# local\nDOMAIN=localhost\nexport POSTGRES_SERVER=localhost\nPOSTGRES_PORT=5432\nPOSTGRES_DB=app\nPOSTGRES_USER=postgres\nPOSTGRES_PASSWORD=s3cret\nSENTRY_DSN=\nDATABASE_URL=postgres://x\nPGHOST=db\n";
        let got = assignments(text).unwrap();
        assert_eq!(
            got,
            "POSTGRES_SERVER=$PGHOST POSTGRES_PORT=$PGPORT POSTGRES_DB=$PGDATABASE POSTGRES_USER=$PGUSER POSTGRES_PASSWORD=$PGPASSWORD"
        );
        assert!(!got.contains("s3cret") && !got.contains("SENTRY"));
        // A URL of the project's own name.
        assert_eq!(
            assignments("SQLALCHEMY_DATABASE_URI=postgresql://u@h/d\n").as_deref(),
            Some("SQLALCHEMY_DATABASE_URI=$DATABASE_URL")
        );
        // Nothing that moves a connection: no advice from it.
        assert_eq!(assignments("DB_NAME=app\nSECRET_KEY=x\n"), None);
    }

    #[test]
    fn the_files_above_the_command_are_read_up_to_the_repository() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(repo.path().join(".git")).unwrap();
        let backend = repo.path().join("backend");
        std::fs::create_dir_all(&backend).unwrap();
        assert_eq!(pass_on(&backend), PassOn::generic());
        std::fs::write(
            repo.path().join(".env.example"),
            "APP_DB_HOST=localhost\nAPP_DB_USER=me\n",
        )
        .unwrap();
        let found = pass_on(&backend);
        assert_eq!(found.assignments, "APP_DB_HOST=$PGHOST APP_DB_USER=$PGUSER");
        assert_eq!(found.from.as_deref(), Some("../.env.example"));
        assert_eq!(found.whose(), "under the names ../.env.example sets");
    }

    /// A Compose file's `environment:`, as a map or a list, in the
    /// project's `docker/`: its names, never its values; a dotenv file is
    /// preferred to it, and a Compose file that names no host is passed
    /// over for one that does.
    #[test]
    fn a_compose_files_environment_names_become_the_prefix() {
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(project.path().join(".git")).unwrap();
        std::fs::create_dir_all(project.path().join("docker")).unwrap();
        std::fs::write(
            project.path().join("docker").join("docker-compose.yml"),
            "services:\n  pantry:\n    image: pantry\n    environment:\n      STORE_ENGINE: sqlite # or postgres\n      PANTRY_PG_USER: pantry\n      PANTRY_PG_PASSWORD: s3cret\n      PANTRY_PG_SERVER: db\n      PANTRY_PG_PORT: 5432\n      PANTRY_PG_DB: pantry\n",
        )
        .unwrap();
        std::fs::write(
            project.path().join("docker-compose.dev.yml"),
            "services:\n  db:\n    environment:\n      - POSTGRES_PASSWORD=dev\n",
        )
        .unwrap();
        let found = pass_on(project.path());
        assert_eq!(
            found.assignments,
            "PANTRY_PG_USER=$PGUSER PANTRY_PG_PASSWORD=$PGPASSWORD PANTRY_PG_SERVER=$PGHOST PANTRY_PG_PORT=$PGPORT PANTRY_PG_DB=$PGDATABASE"
        );
        assert_eq!(found.from.as_deref(), Some("docker/docker-compose.yml"));
        assert!(!found.assignments.contains("s3cret"));
        std::fs::write(
            project.path().join(".env.example"),
            "- APP_DB_HOST=localhost\n",
        )
        .unwrap();
        assert_eq!(pass_on(project.path()).assignments, "APP_DB_HOST=$PGHOST");
    }

    /// A settings file that writes the database the command connected
    /// to is named with its line, never the line itself (it may hold a
    /// password); a comment, a file that is not settings, and a word
    /// that only contains the name are not it.
    #[test]
    fn the_settings_line_that_writes_the_database_is_named() {
        let project = tempfile::tempdir().unwrap();
        let conf = project.path().join("greenhouse");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(
            conf.join("views.py"),
            "DATABASES = {'default': {'NAME': 'seedbank'}}\n",
        )
        .unwrap();
        std::fs::write(
            conf.join("configuration.py"),
            "# 'NAME': 'seedbank' is the default\nMEDIA = 'seedbanks'\nDATABASES = {\n    'default': {\n        'NAME': 'seedbank',\n        'PASSWORD': 'hunter2',\n    }\n}\n",
        )
        .unwrap();
        let values = ["seedbank".to_string()];
        assert_eq!(
            written_at(project.path(), &values).as_deref(),
            Some("greenhouse/configuration.py line 5 writes seedbank")
        );
        std::fs::write(
            project.path().join("alembic.ini"),
            "[alembic]\nsqlalchemy.url = postgresql://grower:pw@db:5432/seedbank\n",
        )
        .unwrap();
        assert_eq!(
            written_at(project.path(), &values).as_deref(),
            Some("alembic.ini line 2 writes seedbank")
        );
        assert_eq!(written_at(project.path(), &["compost".to_string()]), None);
    }
}

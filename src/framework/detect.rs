//! Which framework writes a project's migrations, from the project's own
//! files, and what it runs and records: its migrate command, its history
//! table, and how it names a migration and the file it comes from.
//! The table of frameworks is design.md's "Frameworks" section.

use std::path::{Path, PathBuf};

/// A framework rollsafe knows how to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    Django,
    Alembic,
    /// Alembic run by Flask-Migrate (`flask db upgrade`): its `env.py`
    /// takes the database from the Flask app, so plain `alembic` fails.
    FlaskMigrate,
    /// Rails, through `bin/rails`.
    Rails,
    /// ActiveRecord without `bin/rails`, through `rake`.
    ActiveRecord,
    Ecto,
    Knex,
    Sequelize,
    TypeOrm,
    Kysely,
    Liquibase,
    EfCore,
}

impl Framework {
    const ALL: [Framework; 12] = [
        Framework::Django,
        Framework::Alembic,
        Framework::FlaskMigrate,
        Framework::Rails,
        Framework::ActiveRecord,
        Framework::Ecto,
        Framework::Knex,
        Framework::Sequelize,
        Framework::TypeOrm,
        Framework::Kysely,
        Framework::Liquibase,
        Framework::EfCore,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Framework::Django => "Django",
            Framework::Alembic => "Alembic",
            Framework::FlaskMigrate => "Flask-Migrate",
            Framework::Rails => "Rails",
            Framework::ActiveRecord => "ActiveRecord",
            Framework::Ecto => "Ecto",
            Framework::Knex => "Knex",
            Framework::Sequelize => "Sequelize",
            Framework::TypeOrm => "TypeORM",
            Framework::Kysely => "Kysely",
            Framework::Liquibase => "Liquibase",
            Framework::EfCore => "EF Core",
        }
    }

    /// Whether `dir` is the root of a project of this framework.
    fn is_root(self, dir: &Path) -> bool {
        let has = |p: &str| dir.join(p).exists();
        let any = |ps: &[&str]| ps.iter().any(|p| has(p));
        match self {
            // A Flask app's `manage.py` (Flask-Script, a FlaskGroup) is
            // not Django's.
            Framework::Django => std::fs::read_to_string(dir.join("manage.py"))
                .is_ok_and(|t| t.contains("django") || t.contains("DJANGO_")),
            Framework::Alembic => has("alembic.ini") && !is_flask_migrate_folder(dir),
            Framework::FlaskMigrate => flask_migrate_folder(dir).is_some(),
            Framework::Rails => has("bin/rails") && has("db/migrate"),
            Framework::ActiveRecord => has("Rakefile") && has("db/migrate"),
            Framework::Ecto => has("mix.exs") && has("priv/repo/migrations"),
            Framework::Knex => any(&["knexfile.js", "knexfile.ts", "knexfile.cjs", "knexfile.mjs"]),
            Framework::Sequelize => has(".sequelizerc"),
            Framework::TypeOrm => any(&["ormconfig.json", "ormconfig.js", "ormconfig.ts"]),
            Framework::Kysely => any(&[
                "kysely.config.ts",
                "kysely.config.js",
                ".config/kysely.config.ts",
            ]),
            Framework::Liquibase => has("liquibase.properties"),
            Framework::EfCore => {
                has("Migrations")
                    && std::fs::read_dir(dir).is_ok_and(|entries| {
                        entries
                            .flatten()
                            .any(|e| e.path().extension().is_some_and(|x| x == "csproj"))
                    })
            }
        }
    }

    /// The command that applies every pending migration, run in the
    /// project's root.
    pub fn command(self) -> String {
        match self {
            Framework::Django => format!("{} manage.py migrate", python()),
            Framework::Alembic => "alembic upgrade head".into(),
            Framework::FlaskMigrate => "flask db upgrade".into(),
            Framework::Rails => "bin/rails db:migrate".into(),
            Framework::ActiveRecord => "rake db:migrate".into(),
            Framework::Ecto => "mix ecto.migrate".into(),
            Framework::Knex => "npx knex migrate:latest".into(),
            Framework::Sequelize => "npx sequelize-cli db:migrate".into(),
            Framework::TypeOrm => "npx typeorm migration:run".into(),
            Framework::Kysely => "npx kysely migrate:latest".into(),
            Framework::Liquibase => "liquibase update".into(),
            Framework::EfCore => "dotnet ef database update".into(),
        }
    }

    /// The command run in the project's `root`: [`Framework::command`],
    /// and for Flask-Migrate the folder when it is not its default
    /// `migrations`.
    pub fn command_at(self, root: &Path) -> String {
        match self {
            Framework::FlaskMigrate => match flask_migrate_folder(root) {
                Some(folder) if folder != "migrations" => {
                    format!("{} db upgrade --directory {folder}", flask_cli(root))
                }
                _ => format!("{} db upgrade", flask_cli(root)),
            },
            Framework::Alembic => match ini_database_driver(root) {
                Some(driver) => alembic_upgrade_on_database_url(&driver, "head"),
                None => self.command(),
            },
            _ => self.command(),
        }
    }

    /// The command that applies the one migration its history keys
    /// `key` on a database where every earlier one is recorded (a data
    /// migration rehearsed at rows), run in the project's root; None for
    /// a framework rollsafe has not run one migration of.
    pub fn apply_one(self, root: &Path, key: &str) -> Option<String> {
        let quoted = shell_quote(key);
        match self {
            Framework::FlaskMigrate => Some(match flask_migrate_folder(root) {
                Some(folder) if folder != "migrations" => {
                    format!(
                        "{} db upgrade --directory {} {quoted}",
                        flask_cli(root),
                        shell_quote(&folder)
                    )
                }
                _ => format!("{} db upgrade {quoted}", flask_cli(root)),
            }),
            Framework::Alembic => Some(match ini_database_driver(root) {
                Some(driver) => alembic_upgrade_on_database_url(&driver, key),
                None => format!("alembic upgrade {quoted}"),
            }),
            Framework::Django => {
                let (app, name) = key.split_once('.')?;
                Some(format!(
                    "{} manage.py migrate {} {}",
                    python(),
                    shell_quote(app),
                    shell_quote(name)
                ))
            }
            Framework::Rails => Some(format!("bin/rails db:migrate:up VERSION={quoted}")),
            Framework::ActiveRecord => Some(format!("rake db:migrate:up VERSION={quoted}")),
            _ => None,
        }
    }

    /// `command` (the project's migrate command: the framework's own, or a
    /// `--migrate-command` that ends as the framework's does, after the
    /// environment a project's settings need) aimed at the one migration
    /// `key`: [`Framework::apply_one`] for the framework's own command;
    /// `… manage.py migrate` + ` APP NAME`, `… upgrade head` with the
    /// revision for `head`, `… db upgrade` + ` REV`, `… db:migrate` as
    /// `db:migrate:up VERSION=…`. None when `command` ends otherwise.
    pub fn aim(self, command: &str, root: &Path, key: &str) -> Option<String> {
        if command == self.command_at(root) {
            return self.apply_one(root, key);
        }
        let command = command.trim_end();
        let quoted = shell_quote(key);
        match self {
            // Options may follow (`migrate --noinput`): Django takes the
            // app and the name after them.
            Framework::Django
                if command
                    .split_once("manage.py migrate")
                    .is_some_and(|(_, rest)| {
                        rest.split_whitespace().all(|w| w.starts_with('-'))
                    }) =>
            {
                let (app, name) = key.split_once('.')?;
                Some(format!(
                    "{command} {} {}",
                    shell_quote(app),
                    shell_quote(name)
                ))
            }
            Framework::Alembic | Framework::FlaskMigrate if command.ends_with("upgrade head") => {
                Some(format!(
                    "{} {quoted}",
                    command.strip_suffix("head")?.trim_end()
                ))
            }
            Framework::FlaskMigrate if command.ends_with("db upgrade") => {
                Some(format!("{command} {quoted}"))
            }
            Framework::Rails | Framework::ActiveRecord if command.ends_with("db:migrate") => {
                Some(format!("{}:up VERSION={quoted}", command))
            }
            _ => None,
        }
    }

    /// How a row of its history table names a migration, as SQL over
    /// that row (the key rollsafe labels it with); None where rollsafe
    /// does not apply one migration alone.
    pub fn history_key(self) -> Option<&'static str> {
        match self {
            Framework::Django => Some("app || '.' || name"),
            Framework::Alembic | Framework::FlaskMigrate => Some("version_num::text"),
            Framework::Rails | Framework::ActiveRecord => Some("version::text"),
            _ => None,
        }
    }

    /// The table whose writes end a migration.
    pub fn history(self) -> &'static str {
        match self {
            Framework::Django => "django_migrations",
            Framework::Alembic | Framework::FlaskMigrate => "alembic_version",
            Framework::Rails | Framework::ActiveRecord | Framework::Ecto => "schema_migrations",
            Framework::Knex => "knex_migrations",
            Framework::Sequelize => "SequelizeMeta",
            Framework::TypeOrm => "migrations",
            Framework::Kysely => "kysely_migration",
            Framework::Liquibase => "databasechangelog",
            Framework::EfCore => "__EFMigrationsHistory",
        }
    }

    /// Its other tables of its own (locks, metadata): bookkeeping.
    pub fn own_tables(self) -> &'static [&'static str] {
        match self {
            Framework::Rails | Framework::ActiveRecord => &["ar_internal_metadata"],
            Framework::Knex => &["knex_migrations_lock"],
            Framework::Kysely => &["kysely_migration_lock"],
            Framework::Liquibase => &["databasechangeloglock"],
            _ => &[],
        }
    }

    /// The migration's name and its source file (relative to `root`,
    /// empty when not found) for the history key `key`.
    pub fn locate(self, root: &Path, key: &str) -> (String, String) {
        let files = || source_files(root);
        let relative = |p: &Path| {
            p.strip_prefix(root)
                .unwrap_or(p)
                .to_string_lossy()
                .to_string()
        };
        match self {
            Framework::Django => {
                let (app, name) = key.split_once('.').unwrap_or(("", key));
                let wanted = format!("{name}.py");
                let found = files()
                    .into_iter()
                    .filter(|p| p.file_name().is_some_and(|f| f.to_string_lossy() == wanted))
                    .filter(|p| p.parent().is_some_and(|d| d.ends_with("migrations")))
                    // The app's own folder (its label is its folder's name
                    // unless its AppConfig says otherwise): a migration of
                    // the same name in another app (an installed package's
                    // `0001_initial`) is not this one.
                    .find(|p| {
                        p.parent()
                            .and_then(Path::parent)
                            .is_some_and(|d| d.ends_with(app))
                    });
                (
                    name.to_string(),
                    found.map(|p| relative(&p)).unwrap_or_default(),
                )
            }
            Framework::Alembic | Framework::FlaskMigrate => {
                let found = files().into_iter().find(|p| {
                    p.extension().is_some_and(|x| x == "py")
                        && std::fs::read_to_string(p).is_ok_and(|t| declares_revision(&t, key))
                });
                let name = found
                    .as_ref()
                    .and_then(|p| p.file_stem())
                    .map(|s| s.to_string_lossy().to_string())
                    .map(|s| s.strip_prefix(&format!("{key}_")).unwrap_or(&s).to_string())
                    .unwrap_or_else(|| key.to_string());
                (name, found.map(|p| relative(&p)).unwrap_or_default())
            }
            Framework::Rails | Framework::ActiveRecord | Framework::Ecto => {
                let prefix = format!("{key}_");
                let found = files().into_iter().find(|p| {
                    p.file_name()
                        .is_some_and(|f| f.to_string_lossy().starts_with(&prefix))
                        && p.parent()
                            .is_some_and(|d| d.ends_with("migrate") || d.ends_with("migrations"))
                });
                let name = found
                    .as_ref()
                    .and_then(|p| p.file_stem())
                    .map(|s| s.to_string_lossy().trim_start_matches(&prefix).to_string())
                    .unwrap_or_else(|| key.to_string());
                (name, found.map(|p| relative(&p)).unwrap_or_default())
            }
            _ => (key.to_string(), String::new()),
        }
    }
}

/// `python` where there is one on PATH, else `python3` (Debian has only
/// the latter).
fn python() -> &'static str {
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(name).is_file()))
    };
    if on_path("python") {
        "python"
    } else {
        "python3"
    }
}

/// The driver of the PostgreSQL URL `alembic.ini` in `root` names as
/// `sqlalchemy.url` (`postgresql+asyncpg`), when it names a database (a
/// host, not the template's `driver://…`, no interpolation). The default
/// `env.py` connects to that URL as written: a compose file's `db:5432`,
/// a developer's localhost, never rollsafe's throwaway database.
fn ini_database_driver(root: &Path) -> Option<String> {
    let ini = std::fs::read_to_string(root.join("alembic.ini")).ok()?;
    let url = ini.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "sqlalchemy.url").then(|| value.trim().to_string())
    })?;
    let (driver, rest) = url.split_once("://")?;
    let named = driver == "postgres" || driver.starts_with("postgresql");
    let plain = driver
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '_');
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    (named && plain && !url.contains("%(") && !host.starts_with('/') && !host.is_empty())
        .then(|| driver.replace("postgres+", "postgresql+"))
        .map(|d| {
            if d == "postgres" {
                "postgresql".into()
            } else {
                d
            }
        })
}

/// Alembic's `upgrade head` through its Python API, `alembic.ini`'s
/// `sqlalchemy.url` set to `DATABASE_URL` with the project's `driver`
/// (its `%(here)s` and everything else as the ini has them): what
/// `alembic upgrade head` does, on rollsafe's database.
fn alembic_upgrade_on_database_url(driver: &str, revision: &str) -> String {
    // A revision is hex digits (or `head`); anything else is left to
    // Alembic to refuse, never to the shell or Python.
    let revision: String = revision
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    format!(
        "{} -c 'import os; from alembic import command; from alembic.config import Config; c = Config(\"alembic.ini\"); c.set_main_option(\"sqlalchemy.url\", \"{driver}://\" + os.environ[\"DATABASE_URL\"].split(\"://\", 1)[1].replace(\"%\", \"%%\")); command.upgrade(c, \"{revision}\")'",
        python()
    )
}

/// Whether `dir` is a Flask-Migrate folder: Alembic's, its `env.py`
/// taking the database from the Flask app (`from flask import
/// current_app`, as Flask-Migrate's templates write it).
fn is_flask_migrate_folder(dir: &Path) -> bool {
    dir.join("alembic.ini").is_file()
        && std::fs::read_to_string(dir.join("env.py")).is_ok_and(|t| {
            t.lines().any(|l| {
                let l = l.trim();
                (l.starts_with("from flask import") && l.contains("current_app"))
                    || l.starts_with("import flask_migrate")
                    || l.starts_with("from flask_migrate")
            })
        })
}

/// How the Flask project at `root` runs its commands: `flask` where it
/// finds the app (`FLASK_APP`, a `wsgi.py` or `app.py`, as Flask looks);
/// else the project's own `manage.py` when it keeps one that is not
/// Django's (a Flask CLI group that builds the app itself, where `flask`
/// alone says `Could not locate a Flask application`).
fn flask_cli(root: &Path) -> String {
    let finds_the_app = std::env::var_os("FLASK_APP").is_some()
        || ["wsgi.py", "app.py"].iter().any(|f| root.join(f).is_file());
    if finds_the_app {
        return "flask".into();
    }
    let manage = root.join("manage.py");
    let own = std::fs::metadata(&manage).is_ok_and(|m| m.is_file() && m.len() <= 64 * 1024)
        && std::fs::read_to_string(&manage).is_ok_and(|text| {
            !text.contains("django") && (text.contains("flask") || text.contains("manager"))
        });
    match own {
        true => format!("{} manage.py", python()),
        false => "flask".into(),
    }
}

/// The Flask-Migrate folder in the Flask project `root` (`migrations`
/// first, else the first other folder that is one), by name.
fn flask_migrate_folder(root: &Path) -> Option<String> {
    if is_flask_migrate_folder(&root.join("migrations")) {
        return Some("migrations".into());
    }
    let mut folders: Vec<PathBuf> = std::fs::read_dir(root)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    folders
        .into_iter()
        .find(|p| is_flask_migrate_folder(p))
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
}

/// `word` as one shell word: as it is when it holds nothing a shell
/// reads, else in single quotes.
fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// An Alembic revision file declaring `revision` (`revision = "…"`,
/// `revision: str = '…'`).
fn declares_revision(text: &str, revision: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        line.starts_with("revision")
            && line.contains('=')
            && (line.contains(&format!("\"{revision}\""))
                || line.contains(&format!("'{revision}'")))
    })
}

/// The Django settings modules of the project at `root`, as dotted
/// names from it: every `settings.py` and `settings_*.py`, and every
/// module of a `settings/` package (`shop.settings.ci`), sorted.
pub fn django_settings_modules(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = source_files(root)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .filter_map(|p| {
            let relative = p.strip_prefix(root).ok()?.with_extension("");
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().to_string())
                .collect();
            let module = match parts.as_slice() {
                [.., last] if last == "settings" || last.starts_with("settings_") => {
                    parts.join(".")
                }
                [.., package, last] if package == "settings" && last != "__init__" => {
                    parts.join(".")
                }
                _ => return None,
            };
            // A dotted name Python can import.
            let importable = parts.iter().all(|part| {
                part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !part.starts_with(|c: char| c.is_ascii_digit())
            });
            importable.then_some(module)
        })
        .collect();
    out.sort();
    out
}

/// A Django squashed migration, as its file declares it: its key
/// (`app.name`) and the keys of the migrations it `replaces`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Squash {
    pub key: String,
    pub replaces: Vec<String>,
}

/// The squashed migrations of the Django project at `root`: every
/// `migrations/*.py` that declares `replaces = [(app, name), …]`. The
/// squash's app is the one its replaced migrations name (an app's label
/// need not be its folder's name).
pub fn django_squashes(root: &Path) -> Vec<Squash> {
    source_files(root)
        .into_iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("migrations")))
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            let replaces = declared_replaces(&text);
            let app = replaces.first()?.split_once('.')?.0.to_string();
            let name = p.file_stem()?.to_string_lossy().to_string();
            Some(Squash {
                key: format!("{app}.{name}"),
                replaces,
            })
        })
        .collect()
}

/// The keys a migration's `replaces = [("app", "name"), …]` lists, in
/// order; empty without one. Read, never run: the quoted strings of the
/// list, taken two by two.
fn declared_replaces(text: &str) -> Vec<String> {
    let Some(at) = text.lines().find_map(|line| {
        let trimmed = line.trim_start();
        let rest = trimmed.strip_prefix("replaces")?.trim_start();
        rest.starts_with('=').then_some(())?;
        let offset = line.as_ptr() as usize - text.as_ptr() as usize;
        Some(offset + line.find('[')?)
    }) else {
        return Vec::new();
    };
    let mut depth = 0;
    let mut quoted: Vec<String> = Vec::new();
    let mut open: Option<(char, String)> = None;
    for c in text[at..].chars() {
        match (&mut open, c) {
            (Some((q, s)), c) if c == *q => {
                quoted.push(std::mem::take(s));
                open = None;
            }
            (Some((_, s)), c) => s.push(c),
            (None, '\'' | '"') => open = Some((c, String::new())),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
    }
    quoted
        .chunks_exact(2)
        .map(|pair| format!("{}.{}", pair[0], pair[1]))
        .collect()
}

/// The project's source files a migration may live in, a few levels
/// deep, without dependencies, virtual environments and build output.
fn source_files(root: &Path) -> Vec<PathBuf> {
    project_files(root, 6, |name| {
        [".py", ".rb", ".exs"].iter().any(|x| name.ends_with(x))
    })
}

/// The files below `root` whose name `keep` takes, at most `depth`
/// folders down, never in dependencies, virtual environments or build
/// output; sorted.
pub(super) fn project_files(
    root: &Path,
    depth: usize,
    keep: impl Fn(&str) -> bool,
) -> Vec<PathBuf> {
    const SKIP: &[&str] = &[
        ".git",
        "node_modules",
        "venv",
        ".venv",
        "env",
        "site-packages",
        "__pycache__",
        "target",
        "vendor",
        "_build",
        "deps",
    ];
    let mut out = Vec::new();
    let mut pending = vec![(root.to_path_buf(), 0)];
    while let Some((dir, below)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if below < depth && !SKIP.contains(&name.as_str()) {
                    pending.push((path, below + 1));
                }
            } else if keep(&name) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The project around `dir` (a migrations folder or the root itself):
/// the first of `dir` and its parents, up to four levels up, that is a
/// framework's root, and the framework.
pub fn detect(dir: &Path) -> Option<(PathBuf, Framework)> {
    let start = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    start.ancestors().take(5).find_map(|d| {
        Framework::ALL
            .into_iter()
            .find(|f| f.is_root(d))
            .map(|f| (d.to_path_buf(), f))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings modules a Django project keeps, as Python imports
    /// them: a `settings.py`, each module of a `settings/` package; not
    /// its `__init__`, not a file Python cannot import by name.
    #[test]
    fn a_django_projects_settings_modules_are_found() {
        let root = tempfile::tempdir().unwrap();
        let package = root.path().join("aviary").join("settings");
        std::fs::create_dir_all(&package).unwrap();
        for file in [
            "__init__.py",
            "base.py",
            "ci.py",
            "staging-eu.py",
            "prod.example.py",
        ] {
            std::fs::write(package.join(file), "").unwrap();
        }
        std::fs::create_dir_all(root.path().join("legacy")).unwrap();
        std::fs::write(root.path().join("legacy").join("settings.py"), "").unwrap();
        assert_eq!(
            django_settings_modules(root.path()),
            [
                "aviary.settings.base",
                "aviary.settings.ci",
                "legacy.settings"
            ]
        );
    }

    /// A squash's `replaces` is read as its file writes it, tuples or
    /// lists, either quote, over several lines; a migration without one
    /// replaces nothing.
    #[test]
    fn a_squashed_migration_names_the_migrations_it_replaces() {
        let squash = "class Migration(migrations.Migration):\n    replaces = [\n        ('orchard', '0001_initial'),\n        (\"orchard\", \"0002_tree_height\"),\n        ['orchard', '0003_fill_height'],\n    ]\n    dependencies = [('auth', '0012_x')]\n";
        assert_eq!(
            declared_replaces(squash),
            [
                "orchard.0001_initial",
                "orchard.0002_tree_height",
                "orchard.0003_fill_height"
            ]
        );
        let plain = "class Migration(migrations.Migration):\n    dependencies = [('orchard', '0003_fill_height')]\n    # replaces = [('x', 'y')] is not read in a comment's place\n";
        assert_eq!(declared_replaces(plain), Vec::<String>::new());
    }

    #[test]
    fn a_migrate_command_of_the_users_is_aimed_at_one_migration_when_it_ends_as_the_frameworks() {
        let root = Path::new("/nonexistent");
        let env = "DB_NAME=$PGDATABASE python manage.py migrate";
        assert_eq!(
            Framework::Django
                .aim(env, root, "accounts.0018_fill_names")
                .as_deref(),
            Some("DB_NAME=$PGDATABASE python manage.py migrate accounts 0018_fill_names")
        );
        assert_eq!(
            Framework::Alembic
                .aim("env X=1 alembic upgrade head", root, "8b2e4d6f1a3c")
                .as_deref(),
            Some("env X=1 alembic upgrade 8b2e4d6f1a3c")
        );
        assert_eq!(
            Framework::ActiveRecord
                .aim(
                    "RAILS_ENV=ci bundle exec rake db:migrate",
                    root,
                    "20240308090000"
                )
                .as_deref(),
            Some("RAILS_ENV=ci bundle exec rake db:migrate:up VERSION=20240308090000")
        );
        assert_eq!(
            Framework::Django
                .aim("python manage.py migrate --noinput", root, "a.0001_x")
                .as_deref(),
            Some("python manage.py migrate --noinput a 0001_x")
        );
        assert_eq!(
            Framework::Django.aim("make migrate", root, "a.0001_x"),
            None
        );
        assert_eq!(
            Framework::Django.aim("sh -c 'python manage.py migrate'", root, "a.0001_x"),
            None
        );
    }

    /// A Django migration is its own app's file: an installed package's
    /// `auth.0001_initial` is not the project's `shelf/migrations/0001_initial.py`.
    #[test]
    fn a_django_migration_is_found_in_its_apps_folder() {
        let root = tempfile::tempdir().unwrap();
        let folder = root.path().join("shelf/migrations");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("0001_initial.py"), "").unwrap();
        let locate = |key| Framework::Django.locate(root.path(), key);
        assert_eq!(
            locate("shelf.0001_initial"),
            (
                "0001_initial".to_string(),
                "shelf/migrations/0001_initial.py".to_string()
            )
        );
        assert_eq!(
            locate("auth.0001_initial"),
            ("0001_initial".to_string(), String::new())
        );
    }

    /// Flask-Migrate's `migrations` folder is Alembic's with an `env.py`
    /// that asks the Flask app for the database: its project is the
    /// folder's parent, run with `flask db upgrade` (the folder named
    /// when it is not `migrations`), or through the project's own
    /// manage.py where Flask cannot find the app; a plain Alembic folder
    /// stays Alembic.
    #[test]
    fn a_flask_migrate_folder_is_run_by_flask_from_its_parent() {
        let root = tempfile::tempdir().unwrap();
        let write = |path: &str, text: &str| {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        let flask_env =
            "import logging\nfrom flask import current_app\nfrom alembic import context\n";
        write("kiln/migrations/alembic.ini", "[alembic]\n");
        write("kiln/migrations/env.py", flask_env);
        write(
            "kiln/migrations/versions/1a2b_glazes.py",
            "revision = '1a2b'\n",
        );
        let kiln = std::fs::canonicalize(root.path().join("kiln")).unwrap();
        let found = detect(&root.path().join("kiln/migrations/versions")).unwrap();
        assert_eq!(found, (kiln.clone(), Framework::FlaskMigrate));
        assert_eq!(
            Framework::FlaskMigrate.command_at(&kiln),
            "flask db upgrade"
        );
        assert_eq!(
            Framework::FlaskMigrate.locate(&kiln, "1a2b"),
            (
                "glazes".to_string(),
                "migrations/versions/1a2b_glazes.py".to_string()
            )
        );
        write("pots/db/alembic.ini", "[alembic]\n");
        write("pots/db/env.py", flask_env);
        let pots = std::fs::canonicalize(root.path().join("pots")).unwrap();
        assert_eq!(
            detect(&root.path().join("pots/db")).unwrap().1,
            Framework::FlaskMigrate
        );
        assert_eq!(
            Framework::FlaskMigrate.command_at(&pots),
            "flask db upgrade --directory db"
        );
        // A project whose own manage.py builds the app (a Flask CLI
        // group) runs through it, for every migration and for one; a
        // Django manage.py beside Flask-Migrate's folder is not it.
        write(
            "kiln/manage.py",
            "from kiln.cli import manager

if __name__ == \"__main__\":\n    manager()\n",
        );
        let own = Framework::FlaskMigrate.command_at(&kiln);
        assert!(own.ends_with(" manage.py db upgrade"), "{own}");
        let one = Framework::FlaskMigrate.apply_one(&kiln, "1a2b").unwrap();
        assert!(one.ends_with(" manage.py db upgrade 1a2b"), "{one}");
        // Where Flask finds the app itself (a wsgi.py), `flask` it is.
        write(
            "kiln/wsgi.py",
            "from kiln import create_app\napp = create_app()\n",
        );
        assert_eq!(
            Framework::FlaskMigrate.command_at(&kiln),
            "flask db upgrade"
        );
        std::fs::remove_file(root.path().join("kiln/wsgi.py")).unwrap();
        write(
            "kiln/manage.py",
            "import os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'kiln.settings')\n",
        );
        assert_eq!(
            Framework::FlaskMigrate.command_at(&kiln),
            "flask db upgrade"
        );
        write(
            "plain/alembic.ini",
            "[alembic]\nscript_location = migrations\n",
        );
        write("plain/migrations/env.py", "from alembic import context\n");
        assert_eq!(
            detect(&root.path().join("plain/migrations")).unwrap().1,
            Framework::Alembic
        );
    }

    /// An `alembic.ini` naming a PostgreSQL database (a compose file's
    /// `db:5432`) is run with that URL set to rollsafe's, the driver
    /// kept; the template's placeholder, an interpolated URL or none
    /// leave `alembic upgrade head` as it is.
    #[test]
    fn an_alembic_ini_naming_a_database_is_pointed_at_rollsafes() {
        let root = tempfile::tempdir().unwrap();
        let ini = |url: &str| {
            std::fs::write(
                root.path().join("alembic.ini"),
                format!("[alembic]\nscript_location = %(here)s/migrations\n{url}\n"),
            )
            .unwrap();
            Framework::Alembic.command_at(root.path())
        };
        let asyncpg = ini("sqlalchemy.url = postgresql+asyncpg://postgres:postgres@db:5432/foo");
        assert!(
            asyncpg.contains("c.set_main_option(\"sqlalchemy.url\", \"postgresql+asyncpg://\" + os.environ[\"DATABASE_URL\"].split(\"://\", 1)[1]")
                && asyncpg.ends_with("command.upgrade(c, \"head\")'"),
            "{asyncpg}"
        );
        assert!(
            ini("sqlalchemy.url = postgres://u@localhost/ferries").contains("\"postgresql://\" + ")
        );
        for kept in [
            "sqlalchemy.url = driver://user:pass@localhost/dbname",
            "sqlalchemy.url = postgresql://%(DB_USER)s@localhost/x",
            "sqlalchemy.url = sqlite:///ferries.db",
            "# no url",
        ] {
            assert_eq!(ini(kept), "alembic upgrade head", "{kept}");
        }
    }

    #[test]
    fn an_alembic_revision_is_found_by_its_declaration() {
        assert!(declares_revision(
            "revision = \"3f1a9c2b7d10\"\n",
            "3f1a9c2b7d10"
        ));
        assert!(declares_revision("revision: str = '3f1a'\n", "3f1a"));
        assert!(!declares_revision("down_revision = '3f1a'\n", "3f1a"));
    }
}

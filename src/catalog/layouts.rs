//! The migration folders rollsafe reads: one file per tool's layout.
//!
//! Each layout (diesel, sqlx, golang-migrate, refinery, Flyway, goose,
//! dbmate, Atlas, Prisma, Sqitch, maragudk/migrate, Drizzle, Liquibase) is a [`LayoutReader`] in its own file:
//! it says which files of a folder are its own (detection), and reads the
//! folder the way its tool does — which files are migrations, in which
//! order, the up SQL only (down, undo and revert sections are never read),
//! whether the tool runs each one in a transaction, and the version and
//! label the tool itself shows. The catalog turns those [`Step`]s into
//! [`super::Migration`]s; nothing here touches a database.
//!
//! A step's SQL keeps the file's line numbers: the lines a tool does not run
//! (a goose Down section, a dbmate annotation, a Sqitch script's own
//! `BEGIN`/`COMMIT`) are blanked, not removed, so `file:line` in a finding
//! points at the line in the user's file.
//!
//! Each layout also owns the rules of its tool's history table
//! ([`HistoryRules`]: the table, how its rows read, how checksums compare,
//! how a row is written); running them against a database is
//! `migrate::history`'s.
//!
//! Not here: directives (`-- rollsafe:`, read by the catalog for every
//! layout alike), anything that touches a database.

use std::collections::BTreeMap;

use super::{CatalogError, Execution, Layout};

pub(crate) mod atlas;
pub(crate) mod dbmate;
mod diesel;
pub(crate) mod drizzle;
pub(crate) mod flyway;
mod framework;
mod golang_migrate;
mod goose;
pub mod history;
pub(crate) mod liquibase;
mod maragudk_migrate;
pub use history::{AppliedRow, HistoryRules, HistoryWrite, RowWrite, Value};
pub(crate) mod prisma;
pub(crate) mod refinery;
pub use atlas::sum_file as atlas_sum;
pub(crate) mod sqitch;
mod sqlx;

/// A migration folder as read from disk (or the embedded set): every file
/// a layout may need, by path relative to the folder, `/`-separated.
#[derive(Debug, Default, Clone)]
pub struct Folder {
    pub files: BTreeMap<String, Vec<u8>>,
    /// The migration tools the project around the folder depends on
    /// ([`project_tools`]); empty when unknown (the embedded set, no
    /// manifest, a manifest naming none).
    pub project: Vec<Layout>,
    /// The migration tools' versions the project pins (its Dockerfile,
    /// compose file, CI workflow, package.json, go.mod, .tool-versions:
    /// [`pinned_versions`]), for the tools whose reading changed between
    /// versions (dbmate's sections).
    pub pinned: Vec<(Layout, (u32, u32))>,
    /// Where the folder is on disk (None for the embedded set), for the
    /// files a script reads from beside it ([`Folder::read_beside`]).
    pub dir: Option<std::path::PathBuf>,
    /// The folder's other files (of kinds no layout reads: `README.md`,
    /// `seed.txt`), by path; hidden files (`.gitkeep`) are not listed.
    pub others: Vec<String>,
}

/// A file of a migration folder that is not one of its migrations: a
/// companion its tool knows (`what` says which), or, with `what` None, a
/// file its tool does not run at all. Every one is named in the run's
/// header ([`describe_set_aside`]), so nothing in the folder is dropped
/// without a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    pub file: String,
    pub what: Option<&'static str>,
}

/// The files of `folder` that are not migrations of `steps` (those it does
/// not run, and the callbacks it runs around them), each with what it is
/// to `layout`'s tool.
pub fn set_aside(layout: Layout, folder: &Folder, steps: &[Step]) -> Vec<SetAside> {
    // A callback runs as a step and is named with what it is to its tool.
    let used: std::collections::HashSet<&str> = steps
        .iter()
        .filter(|s| s.callback.is_none())
        .flat_map(|s| {
            std::iter::once(s.file.as_str()).chain(s.verify.iter().map(|v| v.file.as_str()))
        })
        .collect();
    let reader = reader(layout);
    folder
        .files
        .keys()
        .chain(folder.others.iter())
        .filter(|f| !used.contains(f.as_str()))
        .map(|f| SetAside {
            file: f.clone(),
            what: reader.companion(f).or_else(|| common_companion(layout, f)),
        })
        .collect()
}

/// What any layout's folder may hold beside its migrations: the
/// `atlas.sum` of Atlas's `--dir-format` (checked when read), Go code
/// (goose's migrations are steps; any other tool runs SQL only).
fn common_companion(layout: Layout, file: &str) -> Option<&'static str> {
    if file == atlas::SUM_FILE {
        return Some("Atlas's sum of the files (checked, not run)");
    }
    if layout == Layout::Drizzle && file.starts_with("meta/") && file.ends_with(".json") {
        return Some("drizzle-kit journal and snapshot file(s) (the journal read)");
    }
    if file.ends_with(".go") && layout != Layout::Goose {
        return Some("Go code, which this tool does not run (it runs the folder's SQL files)");
    }
    None
}

/// How a down file is described in the run's header.
pub const DOWN_FILES: &str = "down file(s), never run going up";

/// `x.down.sql`, `x_down.sql`, `x/down.sql`: a migration's way back.
pub fn is_down_file(file: &str) -> bool {
    file.ends_with(".down.sql") || file.ends_with("_down.sql") || file.ends_with("/down.sql")
}

/// `list` for the run's header, bounded: each kind of companion with its
/// count and first files, then the ignored files. None when the folder
/// holds nothing but migrations.
pub fn describe_set_aside(list: &[SetAside]) -> Option<String> {
    const SHOWN: usize = 3;
    let mut kinds: Vec<(Option<&str>, Vec<&str>)> = Vec::new();
    for s in list {
        match kinds.iter_mut().find(|(w, _)| *w == s.what) {
            Some((_, files)) => files.push(&s.file),
            None => kinds.push((s.what, vec![&s.file])),
        }
    }
    // Ignored files last: the ones a user most needs to see.
    kinds.sort_by_key(|(w, _)| w.is_none());
    let parts: Vec<String> = kinds
        .iter()
        .map(|(what, files)| {
            let mut names = files
                .iter()
                .take(SHOWN)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            if files.len() > SHOWN {
                names.push_str(&format!(" and {} more", files.len() - SHOWN));
            }
            match what {
                Some(what) => format!("{} {what}: {names}", files.len()),
                None => format!(
                    "{} file(s) ignored, not migrations its tool runs: {names}",
                    files.len()
                ),
            }
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

impl Folder {
    /// The `.sql` files directly in the folder, by name.
    pub fn top_level_sql(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.files
            .iter()
            .filter(|(p, _)| !p.contains('/') && p.ends_with(".sql"))
            .map(|(p, b)| (p.as_str(), b.as_slice()))
    }

    /// The top-level `<digits>_<name>.sql` files whose text `marked` says
    /// are a tool's (goose's `-- +goose Up`, dbmate's `-- migrate:up`): what
    /// a layout that shares sqlx's file names but not its text claims.
    pub fn numbered_sql_marked(&self, marked: fn(&[u8]) -> bool) -> Vec<String> {
        self.top_level_sql()
            .filter(|(f, b)| {
                marked(b) && f.strip_suffix(".sql").and_then(digits_and_name).is_some()
            })
            .map(|(f, _)| f.to_string())
            .collect()
    }

    /// The sub-folders (one level) holding a file named `file`, by name;
    /// folders whose name starts with `.` are skipped, as the tools do.
    pub fn dirs_with(&self, file: &str) -> Vec<&str> {
        self.files
            .keys()
            .filter_map(|p| p.strip_suffix(file)?.strip_suffix('/'))
            .filter(|d| !d.contains('/') && !d.starts_with('.'))
            .collect()
    }

    /// The text of `path` as a tool run from the project finds it: relative
    /// to the folder or one of its parents, up to the repository's root
    /// (the nearest with `.git`), and never outside it. None when no such
    /// file is there.
    pub fn read_beside(&self, path: &str) -> Option<String> {
        let dir = self.dir.as_ref()?.canonicalize().ok()?;
        let root = dir
            .ancestors()
            .find(|a| a.join(".git").exists())
            .unwrap_or(&dir)
            .to_path_buf();
        dir.ancestors()
            .take_while(|a| a.starts_with(&root))
            .filter_map(|a| a.join(path).canonicalize().ok())
            .find(|p| p.starts_with(&root) && p.is_file())
            .and_then(|p| std::fs::read_to_string(p).ok())
    }

    /// The (major, minor) of `tool` the project pins, when it does.
    pub fn pinned_version(&self, tool: Layout) -> Option<(u32, u32)> {
        self.pinned
            .iter()
            .find(|(l, _)| *l == tool)
            .map(|(_, v)| *v)
    }

    pub fn has(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }

    /// The file at `path` as text; None when there is no such file.
    pub fn text(&self, path: &str) -> Result<Option<String>, CatalogError> {
        self.files
            .get(path)
            .map(|b| utf8(path, b.clone()))
            .transpose()
    }
}

/// `bytes` as UTF-8, or the error that names the file and the byte.
pub fn utf8(file: &str, bytes: Vec<u8>) -> Result<String, CatalogError> {
    String::from_utf8(bytes).map_err(|e| CatalogError::NotUtf8 {
        file: file.to_string(),
        offset: e.utf8_error().valid_up_to(),
    })
}

/// What a caller may add to what the folder says (`--placeholder`).
#[derive(Debug, Default, Clone)]
pub struct ReadOptions {
    /// The layout to read the folder in (`--layout`, `rollsafe.toml`);
    /// None: detected.
    pub layout: Option<Layout>,
    /// Flyway placeholder and goose ENVSUB values (`--placeholder key=value`).
    pub placeholders: BTreeMap<String, String>,
}

/// One migration as its layout reads it, before the catalog numbers it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    /// The version the tool keeps in its history table: `20241025112826`
    /// (diesel), `1.1` (Flyway), the change name (Sqitch), the folder name
    /// (Prisma). Two steps with the same key are refused.
    pub key: String,
    /// What the tool shows and every message quotes: `V3`,
    /// `2024-10-25-112826_make-unique`, `users@v1.0`.
    pub label: String,
    /// The name part, e.g. `make-unique`.
    pub name: String,
    /// The file run, relative to the folder: `2024-10-25-112826_x/up.sql`.
    pub file: String,
    /// The SQL the tool runs, with the file's line numbers.
    pub sql: String,
    /// How the tool sends this file to the server.
    pub execution: Execution,
    /// Why rollsafe cannot run it (a goose Go migration); None for SQL.
    pub not_runnable: Option<String>,
    /// The checksum the tool keeps for this file in its history table, as
    /// [`crate::migrate::history`] reads it back: sqlx's SHA-384 and
    /// Prisma's SHA-256 (lower-case hex), Flyway's CRC32 (a signed decimal),
    /// Atlas's `atlas.sum` hash. None for tools that keep none.
    pub checksum: Option<String>,
    /// Flyway `R__`: applied after every versioned file, and again
    /// whenever its checksum changes.
    pub repeatable: bool,
    /// A Flyway SQL callback's event (`afterMigrate` for
    /// `afterMigrate__grants.sql`): run where Flyway runs it, in its own
    /// transaction, and never recorded in a history table (not a
    /// migration: `status`, `migrate` and `check` never list it). None for
    /// a migration.
    pub callback: Option<String>,
    /// Sqitch: the change's `verify/<change>.sql`, blanked as the deploy
    /// script is; None when there is none.
    pub verify: Option<Script>,
    /// Flyway: the `beforeEachMigrate` callbacks, run on the migration's
    /// connection before its statements, inside its transaction when it
    /// runs in one (in the order Flyway runs them); empty for every other
    /// tool, and for a callback.
    pub before_each: Vec<Script>,
    /// Flyway: the `afterEachMigrate` callbacks, run after its statements
    /// the same way.
    pub after_each: Vec<Script>,
    /// Atlas: the `-- atlas:nolint` directives of the file.
    pub nolint: Nolint,
    /// Sqitch: the changes of other projects it requires
    /// (`other_project:change`), deployed before it.
    pub requires: Vec<String>,
    /// What deploys this migration together with its neighbours: the same
    /// value on consecutive migrations means one deploy ran them one after
    /// the other, with no app writing rows in between (the commit that
    /// added their files, the working tree for files not committed yet, a
    /// tool's own group). None: deployed on its own as far as rollsafe can
    /// tell. The seeded path gives no generated rows to a table an earlier
    /// migration of the same group created: in production it is empty
    /// there. Filled by [`crate::catalog`] after the layout read the
    /// folder, or by the framework that sent it.
    pub deploy_group: Option<String>,
    /// How its tool sends it in the transaction of the migration before it
    /// when both are pending (Alembic's default `env.py`, Drizzle's
    /// migrate: every pending migration in one transaction), for messages;
    /// None: in a transaction of its own, or none. The locks of every
    /// migration of such a run are held until the last one commits: see
    /// [`crate::catalog::Catalog::transaction_shared_with_previous`].
    pub shared_transaction: Option<String>,
    /// Who applies it on a database with rows, when rollsafe cannot run it
    /// from its SQL there (a framework's data migration); None: its SQL.
    pub external: Option<ExternalApply>,
}

/// A migration applied by a command of the project's own on a database
/// with rows (a framework's data migration: its statements depend on the
/// rows, so what it sent to an empty database is not what it does there).
/// Whoever runs it needs nothing of the framework: make the database look
/// as the framework left it before this migration (`bookkeeping`), run
/// `command` in `dir` against it, then drop the framework's own tables
/// again (`own_tables`), so that a schema compared with one built from
/// SQL does not hold them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExternalApply {
    /// Who runs it, for messages: `Django`.
    pub by: String,
    /// The shell command that applies this migration alone:
    /// `python3 manage.py migrate packets 0006_fill_weight`.
    pub command: String,
    /// Where it runs (the project's root).
    pub dir: std::path::PathBuf,
    /// What the framework wrote to its own tables with every migration
    /// before this one (its history table's creation and rows), in order.
    pub bookkeeping: Vec<String>,
    /// What the framework writes to its own tables with this migration
    /// (its history row): after a failure, the command is run again with
    /// this migration recorded, and must then do nothing, or the failure
    /// was not this migration's (a project that migrates further when it
    /// starts).
    pub recorded: Vec<String>,
    /// The framework's own tables (its history table first), dropped
    /// after the command.
    pub own_tables: Vec<String>,
    /// A query of one row and one column that says what the history table
    /// records beyond the migrations up to this one, after the command
    /// (NULL when nothing): a command that applied more (a project whose
    /// code migrates to its newest version whenever it starts) left rows
    /// that are not this migration's. None when it cannot be asked.
    pub applied_beyond: Option<String>,
}

/// A script that goes with a migration (Sqitch's verify script, a Flyway
/// callback run around it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Script {
    /// Relative to the folder: `verify/orders.sql`.
    pub file: String,
    /// The SQL to run, with the file's line numbers.
    pub sql: String,
}

/// Atlas's `-- atlas:nolint [rules]` directives (Atlas's `nolintRules`):
/// in the file's header (comment lines followed by a blank line) they
/// cover every statement, above a statement that statement. No rules: all
/// of them; else analyzer names (`destructive`), codes (`DS103`) or
/// squawk's rule names, which [`Nolint::silences`] maps onto each other.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Nolint {
    /// The header's rules: `Some(empty)` silences the whole file.
    pub file: Option<Vec<String>>,
    /// (statement index in [`crate::sql::split`] of the SQL, its rules;
    /// empty = all).
    pub statements: Vec<(usize, Vec<String>)>,
}

/// How one tool lays out its migrations.
pub trait LayoutReader: Sync {
    /// The file-name pattern, for messages.
    fn pattern(&self) -> &'static str;
    /// The files of `folder` that only this layout has (one is enough to
    /// detect it); empty when the folder is not this layout's.
    fn claims(&self, folder: &Folder) -> Vec<String>;
    /// The migrations in the tool's order, up SQL only. A file the layout
    /// cannot read is refused ([`unreadable`]).
    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError>;
    /// The rules of the tool's history table.
    fn history(&self) -> &'static HistoryRules;
    /// What the tool runs besides the folder's files that rollsafe cannot
    /// (maragudk/migrate's Go callbacks), said wherever the folder is read
    /// as this layout's; None when rollsafe runs all of it.
    fn caveat(&self) -> Option<&'static str> {
        None
    }
    /// What a file of the folder that is not a migration is to this tool
    /// (a down file, an undo script, a callback, the plan), for the run's
    /// header; None for a file the tool does not run at all.
    fn companion(&self, _file: &str) -> Option<&'static str> {
        None
    }
    /// The tables the tool itself keeps that the folder's SQL reads (a
    /// callback that reads its history table), as the SQL that creates
    /// them as the tool does and the header's note; None when no
    /// migration or script reads one.
    fn tool_tables(&self, _migrations: &[crate::catalog::Migration]) -> Option<(String, String)> {
        None
    }
}

/// The reader of `layout`.
pub fn reader(layout: Layout) -> &'static dyn LayoutReader {
    match layout {
        Layout::Refinery => &refinery::Refinery,
        Layout::Sqlx => &sqlx::Sqlx,
        Layout::GolangMigrate => &golang_migrate::GolangMigrate,
        Layout::Diesel => &diesel::Diesel,
        Layout::Goose => &goose::Goose,
        Layout::Dbmate => &dbmate::Dbmate,
        Layout::Atlas => &atlas::Atlas,
        Layout::Flyway => &flyway::Flyway,
        Layout::Prisma => &prisma::Prisma,
        Layout::Sqitch => &sqitch::Sqitch,
        Layout::MaragudkMigrate => &maragudk_migrate::MaragudkMigrate,
        Layout::Framework => &framework::Framework,
        Layout::Drizzle => &drizzle::Drizzle,
        Layout::Liquibase => &liquibase::Liquibase,
    }
}

/// The layout of `folder`: the one every migration file belongs to.
/// Files two layouts claim are refused, since the order would be a guess,
/// except:
/// - the project's own tool ([`Folder::project`]) where the other layouts
///   claim only files it claims too: the same names, read its way (an
///   up/down folder in a crate using sqlx, in a Go module using
///   maragudk/migrate). Where the project requires two such tools, the
///   one that reads the folder is it ([`projects_own`]);
/// - `atlas.sum` beside another tool's files: Atlas's `--dir-format`
///   (golang-migrate, goose, Flyway, dbmate) writes that tool's files and
///   hashes them, and that tool runs them ([`atlas::check_format_sum`]).
pub fn detect(source: &str, folder: &Folder) -> Result<Option<Layout>, CatalogError> {
    let claimed: Vec<(Layout, Vec<String>)> = Layout::ALL
        .into_iter()
        .map(|l| {
            let mut claims = reader(l).claims(folder);
            claims.sort();
            (l, claims)
        })
        .filter(|(_, claims)| !claims.is_empty())
        .collect();
    if let Some(own) = projects_own(source, folder, &claimed)? {
        return Ok(Some(own));
    }
    if let Some(own) = self_named(&claimed) {
        return Ok(Some(own));
    }
    let found: Vec<(Layout, &String)> = claimed.iter().map(|(l, c)| (*l, &c[0])).collect();
    match found.as_slice() {
        [] => Ok(None),
        [(layout, _)] => Ok(Some(*layout)),
        [(Layout::Atlas, sum), (layout, _)] | [(layout, _), (Layout::Atlas, sum)]
            if *sum == atlas::SUM_FILE && atlas::FORMATS.contains(layout) =>
        {
            Ok(Some(*layout))
        }
        // `V1__name.sql` alone reads as refinery's (Flyway's own marks are
        // dotted versions, `R__` and `B` files), but Atlas writes no
        // refinery folder: beside `atlas.sum` they are `--dir-format
        // flyway`'s.
        [(Layout::Atlas, sum), (Layout::Refinery, _)]
        | [(Layout::Refinery, _), (Layout::Atlas, sum)]
            if *sum == atlas::SUM_FILE =>
        {
            Ok(Some(Layout::Flyway))
        }
        _ => Err(CatalogError::MixedLayouts {
            dir: source.to_string(),
            found: found
                .iter()
                .map(|(l, f)| format!("{f} is {l}"))
                .collect::<Vec<_>>()
                .join(", "),
            could_be: could_be(&claimed),
        }),
    }
}

/// The project's tool whose claims cover every claimed file (the others
/// are its names read another way); where two do, the one that reads the
/// folder as detected (golang-migrate refuses a repeated version). None
/// when no project tool covers them all, an error when two still do.
fn projects_own(
    source: &str,
    folder: &Folder,
    claimed: &[(Layout, Vec<String>)],
) -> Result<Option<Layout>, CatalogError> {
    let mut covering: Vec<Layout> = claimed
        .iter()
        .filter(|(l, own)| {
            folder.project.contains(l)
                && claimed
                    .iter()
                    .all(|(_, files)| files.iter().all(|f| own.contains(f)))
        })
        .map(|(l, _)| *l)
        .collect();
    if covering.len() > 1 {
        covering.retain(|l| reader(*l).read(folder, &ReadOptions::default()).is_ok());
    }
    match covering.as_slice() {
        [] => Ok(None),
        [own] => Ok(Some(*own)),
        several => Err(CatalogError::AmbiguousProject {
            dir: source.to_string(),
            tools: several
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(" and "),
        }),
    }
}

/// The layouts whose files say they are theirs (Drizzle's journal lists
/// its files, a Liquibase file's first line says it is formatted SQL): where such a layout claims every file any layout claims,
/// the folder is its, whatever other layouts read into the names
/// (`0000_x.sql` is sqlx's name too).
const SELF_NAMED: [Layout; 2] = [Layout::Drizzle, Layout::Liquibase];

fn self_named(claimed: &[(Layout, Vec<String>)]) -> Option<Layout> {
    claimed
        .iter()
        .find(|(l, own)| {
            SELF_NAMED.contains(l)
                && claimed
                    .iter()
                    .all(|(_, files)| files.iter().all(|f| own.contains(f)))
        })
        .map(|(l, _)| *l)
}

/// For a folder refused as mixed (`claimed`: each layout's files): the
/// tool whose names they all are, said after the refusal.
fn could_be(claimed: &[(Layout, Vec<String>)]) -> String {
    let files = claimed
        .iter()
        .flat_map(|(_, files)| files.iter().map(String::as_str));
    match maragudk_migrate::names_all(files) {
        true => format!("; every one of those names is maragudk/migrate's (github.com/maragudk/migrate, whose version is the whole name before `.up.sql`): if the project runs it, pass --layout {}", Layout::MaragudkMigrate),
        false => String::new(),
    }
}

/// The migration tools the project that holds `dir` depends on, read from its
/// manifest (the nearest `Cargo.toml` or `go.mod` at or above `dir`,
/// within the repository): a Rust crate that depends on sqlx, whose
/// `N_name.up.sql`/`.down.sql` files are sqlx's reversible migrations
/// (`sqlx migrate add -r`, run in a transaction and recorded in
/// `_sqlx_migrations`), not golang-migrate's; a Go module that requires
/// `github.com/maragudk/migrate`, whose `.up.sql` files that tool reads
/// its own way (and golang-migrate, when the module requires it too).
/// Empty for any other project.
pub fn project_tools(dir: &std::path::Path) -> Vec<Layout> {
    let Ok(dir) = dir.canonicalize() else {
        return Vec::new();
    };
    for at in dir.ancestors() {
        if let Ok(module) = std::fs::read_to_string(at.join("go.mod")) {
            return go_module_tools(&module);
        }
        if let Ok(manifest) = std::fs::read_to_string(at.join("Cargo.toml")) {
            let uses_sqlx = manifest.lines().any(|l| {
                let key = l.trim_start();
                key.starts_with("sqlx") && key[4..].trim_start().starts_with(['=', '.'])
                    || key.starts_with("[dependencies.sqlx]")
                    || key.starts_with("[workspace.dependencies.sqlx]")
            });
            return uses_sqlx.then_some(Layout::Sqlx).into_iter().collect();
        }
        if at.join(".git").exists() {
            return Vec::new();
        }
    }
    Vec::new()
}

/// The versions of migration tools the project that holds `dir` pins:
/// the first `dbmate` followed closely by a version (`amacneil/dbmate:2.26`,
/// `dbmate@v2.28.0`, `"dbmate": "^2.19.0"`, `dbmate/v2 v2.31.0`,
/// `releases/download/v2.22.0/dbmate-linux-amd64`) in the files a
/// project installs it from, at or above `dir` within the repository.
pub fn pinned_versions(dir: &std::path::Path) -> Vec<(Layout, (u32, u32))> {
    const FILES: &[&str] = &[
        "Dockerfile",
        "docker-compose.yml",
        "docker-compose.yaml",
        "compose.yml",
        "compose.yaml",
        "package.json",
        "go.mod",
        ".tool-versions",
        "Makefile",
        "mise.toml",
    ];
    let Ok(dir) = dir.canonicalize() else {
        return Vec::new();
    };
    for at in dir.ancestors() {
        let workflows = std::fs::read_dir(at.join(".github/workflows"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path());
        let texts = FILES
            .iter()
            .map(|f| at.join(f))
            .chain(workflows)
            .filter_map(|p| std::fs::read_to_string(p).ok());
        for text in texts {
            if let Some(version) = version_after(&text, "dbmate") {
                return vec![(Layout::Dbmate, version)];
            }
        }
        if at.join(".git").exists() {
            break;
        }
    }
    Vec::new()
}

/// The first `major.minor` within a few characters after a mention of
/// `tool` in `text` (a `v`, `:`, `@`, quotes, `^`, `~`, `/`, `-` and
/// spaces between them).
fn version_after(text: &str, tool: &str) -> Option<(u32, u32)> {
    text.match_indices(tool).find_map(|(at, _)| {
        let rest = &text[at + tool.len()..];
        let start = rest.find(|c: char| c.is_ascii_digit())?;
        let gap = &rest[..start];
        if start > 40
            || gap.contains('\n')
            || !gap
                .chars()
                .all(|c| " \t:@\"'^~=v/-".contains(c) || c.is_ascii_alphabetic())
        {
            return None;
        }
        let digits = &rest[start..];
        let mut numbers = digits.split('.').map(|n| {
            let end = n.find(|c: char| !c.is_ascii_digit()).unwrap_or(n.len());
            n[..end].parse::<u32>().ok()
        });
        let major = numbers.next()??;
        // `/v2 v2.31.0`: the module path's major, then the version.
        if digits.starts_with(&format!("{major} ")) {
            return version_after(digits, &major.to_string());
        }
        let minor = numbers.next()??;
        Some((major, minor))
    })
}

/// A go.mod's migration tools: those it requires directly (not
/// `// indirect`).
fn go_module_tools(module: &str) -> Vec<Layout> {
    let required = |path: &str| {
        module.lines().any(|l| {
            let line = l.trim();
            let line = line.strip_prefix("require").unwrap_or(line).trim_start();
            line.split_whitespace().next() == Some(path) && !line.contains("// indirect")
        })
    };
    [
        ("github.com/maragudk/migrate", Layout::MaragudkMigrate),
        (
            "github.com/golang-migrate/migrate/v4",
            Layout::GolangMigrate,
        ),
        ("github.com/golang-migrate/migrate", Layout::GolangMigrate),
    ]
    .into_iter()
    .filter(|(path, _)| required(path))
    .map(|(_, layout)| layout)
    .collect()
}

/// The migrations of `folder` read in `layout`, and, for another tool's
/// files beside `atlas.sum` (Atlas's `--dir-format`), the sum checked as
/// Atlas checks it.
pub fn read(
    layout: Layout,
    folder: &Folder,
    options: &ReadOptions,
) -> Result<Vec<Step>, CatalogError> {
    let steps = reader(layout).read(folder, options)?;
    if layout != Layout::Atlas && folder.has(atlas::SUM_FILE) {
        atlas::check_format_sum(folder, &steps)?;
    }
    Ok(steps)
}

/// `{digits}_{name}`: the version (digits, as written) and the name. The
/// tools that name files so split at the first `_` and take any name after
/// it (sqlx's `resolve_blocking`, goose's `NumericComponent`,
/// golang-migrate's `^([0-9]+)_(.*)\.(down|up)\.(.*)$`): brackets, spaces
/// and dots are a name like any other.
pub fn digits_and_name(stem: &str) -> Option<(&str, &str)> {
    let (version, name) = stem.split_once('_')?;
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if name.is_empty() || name.contains('/') {
        return None;
    }
    Some((version, name))
}

/// The error for a file `layout` cannot read: refused by name, saying
/// whether the layout was given or detected.
pub fn unreadable(file: &str, layout: Layout, options: &ReadOptions) -> CatalogError {
    let pattern = reader(layout).pattern();
    match options.layout {
        Some(_) => CatalogError::NotInLayout {
            file: file.to_string(),
            layout,
            pattern,
        },
        None => CatalogError::BadName {
            file: file.to_string(),
            expected: format!("a {layout} name like the folder's other files: {pattern}"),
        },
    }
}

/// Sorts by a numeric version (as written: `0002` is 2) and refuses none:
/// duplicates are the catalog's to report.
pub fn sort_numeric(steps: &mut [Step]) {
    steps.sort_by(|a, b| {
        numeric_key(&a.key)
            .cmp(&numeric_key(&b.key))
            .then(a.file.cmp(&b.file))
    });
}

/// `0002` → (1, "2"): orders digit strings of any length numerically.
fn numeric_key(key: &str) -> (usize, &str) {
    let trimmed = key.trim_start_matches('0');
    (trimmed.len(), trimmed)
}

/// The lines of `sql` kept where `keep(line_index)` holds; the others are
/// blanked (their newline kept), so line numbers stay the file's.
pub fn keep_lines(sql: &str, mut keep: impl FnMut(usize, &str) -> bool) -> String {
    let mut out = String::with_capacity(sql.len());
    for (i, line) in sql.split_inclusive('\n').enumerate() {
        if keep(i, line) {
            out.push_str(line);
        } else if line.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// `-- <word>…` annotation lines: the text after `--`, trimmed; None for
/// any other line.
pub fn comment_body(line: &str) -> Option<&str> {
    line.trim().strip_prefix("--").map(str::trim)
}

/// Atlas's analyzer codes and names against squawk's rules that flag the
/// same change (the names from Atlas's `sqlcheck` analyzers; the `PG1xx`
/// codes from its concurrent-index analyzer's documentation).
const ATLAS_LINT: &[(&str, &str, &[&str])] = &[
    ("DS102", "destructive", &["ban-drop-table"]),
    ("DS103", "destructive", &["ban-drop-column"]),
    ("MF101", "data_depend", &["disallowed-unique-constraint"]),
    ("MF102", "data_depend", &["disallowed-unique-constraint"]),
    (
        "MF103",
        "data_depend",
        &["adding-required-field", "adding-not-nullable-field"],
    ),
    ("MF104", "data_depend", &["adding-not-nullable-field"]),
    ("BC101", "incompatible", &["renaming-table"]),
    ("BC102", "incompatible", &["renaming-column"]),
    (
        "PG101",
        "concurrent_index",
        &["require-concurrent-index-creation"],
    ),
    (
        "PG102",
        "concurrent_index",
        &["require-concurrent-index-deletion"],
    ),
    (
        "PG103",
        "concurrent_index",
        &["ban-concurrent-index-creation-in-transaction"],
    ),
];

impl Nolint {
    /// Whether a lint warning of squawk rule `rule` on statement
    /// `statement` (its index in [`crate::sql::split`], None when unknown)
    /// is silenced, as Atlas silences its own diagnostics.
    pub fn silences(&self, statement: Option<usize>, rule: &str) -> bool {
        let covers = |rules: &[String]| {
            rules.is_empty()
                || rules.iter().any(|r| {
                    r == rule
                        || ATLAS_LINT.iter().any(|(code, analyzer, squawk)| {
                            (r == code || r == analyzer) && squawk.contains(&rule)
                        })
                })
        };
        self.file.as_deref().is_some_and(covers)
            || statement.is_some_and(|i| {
                self.statements
                    .iter()
                    .any(|(s, rules)| *s == i && covers(rules))
            })
    }

    pub fn is_empty(&self) -> bool {
        self.file.is_none() && self.statements.is_empty()
    }
}

/// `text` with each `${inner}` replaced by what `value` gives for it (the
/// text between the braces, and the 1-based line of `text` it starts on):
/// Flyway's placeholders and goose's ENVSUB variables. An unclosed `${`
/// is left as it is.
pub(super) fn fill_placeholders(
    text: &str,
    mut value: impl FnMut(&str, usize) -> Result<String, CatalogError>,
) -> Result<String, CatalogError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        let line = text[..text.len() - rest.len() + start]
            .lines()
            .count()
            .max(1);
        out.push_str(&rest[..start]);
        out.push_str(&value(&rest[start + 2..start + 2 + len], line)?);
        rest = &rest[start + 2 + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{go_module_tools, version_after, Layout};

    /// The dbmate a project pins, as its install lines spell it.
    #[test]
    fn a_pinned_dbmate_version_is_read_where_projects_install_it() {
        for (text, version) in [
            ("FROM ghcr.io/amacneil/dbmate:2.26 AS migrate\n", Some((2, 26))),
            ("    image: amacneil/dbmate:v2.28.0\n", Some((2, 28))),
            ("  \"devDependencies\": {\"dbmate\": \"^2.19.0\"}", Some((2, 19))),
            ("require github.com/amacneil/dbmate/v2 v2.31.0\n", Some((2, 31))),
            ("curl -fsSL -o /usr/local/bin/dbmate https://github.com/amacneil/dbmate/releases/download/v2.22.0/dbmate-linux-amd64", Some((2, 22))),
            ("dbmate 2.30.1\n", Some((2, 30))),
            ("dbmate --wait-timeout 60s up\n", None),
            ("run: dbmate up\nversion: 3.8\n", None),
        ] {
            assert_eq!(version_after(text, "dbmate"), version, "{text}");
        }
    }

    /// A go.mod names a tool in a `require` line or block; an indirect
    /// requirement is a dependency's, not the project's.
    #[test]
    fn a_go_mod_names_the_tools_it_requires_directly() {
        let one = "module example.com/a\n\nrequire github.com/maragudk/migrate v0.4.3\n";
        assert_eq!(go_module_tools(one), [Layout::MaragudkMigrate]);
        let both = "module example.com/a\n\nrequire (\n\tgithub.com/golang-migrate/migrate/v4 v4.17.1\n\tgithub.com/maragudk/migrate v0.4.3\n)\n";
        assert_eq!(
            go_module_tools(both),
            [Layout::MaragudkMigrate, Layout::GolangMigrate]
        );
        let indirect = "require (\n\tgithub.com/maragudk/migrate v0.4.3 // indirect\n)\n";
        assert!(go_module_tools(indirect).is_empty());
        let other = "module github.com/maragudk/migrate\n\nrequire github.com/lib/pq v1.10.9\n";
        assert!(go_module_tools(other).is_empty());
    }
}

//! The migration set: loading, naming, checksums and directives.
//!
//! A catalog is the ordered list of migration files, either embedded in the
//! binary at build time or read from a directory (`--migrations DIR`, a
//! proposed change, or another project's migrations). Every consumer —
//! `migrate`, `verify`, `check` — starts from a [`Catalog`], so a bad file is
//! refused with the same message everywhere, before anything touches a
//! database.
//!
//! A folder is read in the layout of the tool that wrote it ([`Layout`],
//! one [`layouts::LayoutReader`] per tool in `catalog/layouts/`): refinery
//! `V{n}__{name}.sql` (the embedded set), sqlx, golang-migrate, diesel,
//! goose, dbmate, Atlas, Flyway, Prisma, Sqitch, maragudk/migrate, Drizzle and Liquibase formatted SQL. The layout reads what
//! its tool runs (up SQL only: down, undo and revert parts never), in the
//! tool's order, with how the tool sends each file to the server
//! ([`Execution`]: one transaction, statement by statement, or one
//! simple-query string), the one answer the static precheck, the
//! rehearsal and `migrate` follow ([`Migration::runs_outside_transaction`]).
//! What a layout lists but rollsafe cannot run (a goose Go migration) is
//! kept in its place, marked [`Migration::not_runnable`]. It is detected from the folder or given
//! (`--layout`, `rollsafe.toml`); a folder mixing layouts is refused, since
//! its order would be a guess.
//!
//! Versions of other layouts are timestamps (`20240101120000`), dotted
//! (`1.1`) or names (Sqitch). Every migration therefore has three kinds of
//! identity: [`Migration::version`] orders and keys it inside rollsafe
//! (refinery: the file's version; other layouts: its ordinal, 1, 2, 3 … in
//! the tool's order), [`Migration::label`] is what the tool shows (`V3`,
//! `20240101120000`, `2024-10-25-112826_make-unique`), the only one
//! messages should show, and [`Migration::key`] is what the tool's history
//! table keeps.
//!
//! Checksums are refinery's (SipHash-1-3 over name, version and SQL), so a
//! history table written by rollsafe can be compared with the files, and an
//! edited applied migration shows up as divergent.
//!
//! A folder in a git work tree also says which migrations one deploy ran
//! together ([`Migration::deploy_group`]: the commit that added their
//! files, read by `deploy_groups`), named in the run's header.
//!
//! Directives are SQL comments of the form `-- rollsafe:<key> <value>` that
//! tell the verifier what a migration promises and `migrate` how to apply
//! it; see [`Directive`].

use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

mod deploy_groups;
mod directive_sql;
pub mod layouts;
pub use deploy_groups::{when_added, Added};

/// Gives each of `steps` (a framework's migrations, their files relative
/// to the project's root `dir`) the commit that added its file: the
/// migrations one commit added reach production in one deploy, as a
/// folder's do ([`Migration::deploy_group`]). A migration without a file
/// of the project's (an installed package's) gets none.
pub fn fill_deploy_groups(dir: &std::path::Path, steps: &mut [layouts::Step]) {
    deploy_groups::fill(dir, Layout::Framework, steps);
}
pub use directive_sql::TableName;
pub use layouts::{ExternalApply, Nolint, ReadOptions, Script};
use layouts::{Folder, Step};

/// The files embedded at build time (see `build.rs`).
const EMBEDDED: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/embedded_migrations.rs"));

/// What a migration promises the verifier, from `-- rollsafe:` comments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Directive {
    /// `-- rollsafe:backfill <table> <predicate>`: after the migration, every
    /// row that existed before it satisfies `<predicate>` (SQL over the
    /// table's columns), e.g. `attached_functions is_ready = true`.
    Backfill { table: TableName, predicate: String },
    /// `-- rollsafe:no-transaction`: the file runs outside a transaction,
    /// one statement at a time (for `CREATE INDEX CONCURRENTLY` and other
    /// statements PostgreSQL refuses inside one). Its statements must be
    /// re-runnable, since a failed or killed run is run again from the top
    /// (`migrate::no_transaction`).
    NoTransaction,
    /// `-- rollsafe:batched-update <table> SET <col> = <expr> WHERE
    /// <predicate>`: after the file's statements, `migrate` updates the rows
    /// matching `<predicate>` in primary-key batches, each its own short
    /// transaction, resumable (`migrate::backfill`).
    BatchedUpdate(BatchedUpdate),
    /// `-- rollsafe:accept <finding-id> [<table or object>] -- <reason>`:
    /// a reviewed waiver. The finding it names, on the statement after it
    /// (on the whole file when it stands above the first statement), is
    /// reported accepted with its reason and does not fail the run.
    Accept(Accept),
}

/// One `-- rollsafe:accept` directive, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accept {
    /// The finding id it accepts (`locks.blocking-index-build`).
    pub id: String,
    /// The table or object the finding must be about, when given.
    pub object: Option<String>,
    /// Why the team accepts it: required, shown wherever the finding is.
    pub reason: String,
    /// 1-based line of the directive in its file.
    pub line: usize,
}

/// What `-- rollsafe:accept` must look like.
const ACCEPT_FORM: &str =
    "`-- rollsafe:accept <finding-id> [<table or object>] -- <reason>` on one line";

/// `<finding-id> [<object>] -- <reason>` of an accept directive at `line`.
fn parse_accept(value: &str, line: usize) -> Result<Accept, String> {
    let (what, reason) = value
        .split_once("--")
        .ok_or("a reason is required after ` -- ` (why the team accepts this finding)")?;
    let reason = reason.trim();
    if reason.is_empty() {
        return Err("a reason is required after ` -- ` (why the team accepts this finding)".into());
    }
    let mut words = what.split_whitespace();
    let id = words.next().ok_or("the finding id it accepts is missing")?;
    let is_id = id.split_once('.').is_some_and(|(check, name)| {
        !check.is_empty()
            && !name.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    });
    if !is_id {
        return Err(format!(
            "`{id}` is not a finding id (ids read `<check>.<what>`, e.g. locks.blocking-index-build)"
        ));
    }
    let object = words.next().map(str::to_string);
    if let Some(extra) = words.next() {
        return Err(format!(
            "`{extra}`: one finding id and at most one table or object come before ` -- `"
        ));
    }
    Ok(Accept {
        id: id.to_string(),
        object,
        reason: reason.to_string(),
        line,
    })
}

/// One `-- rollsafe:batched-update` directive, checked by squawk's grammar
/// as the `UPDATE <table> SET … WHERE …` it stands for
/// ([`directive_sql`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchedUpdate {
    /// The table (may be schema-qualified); `.sql()` quotes it.
    pub table: TableName,
    /// The assignments after `SET`, as written: `b = a * 2, c = 1`.
    pub set: String,
    /// The `WHERE` condition: the rows still to update. A row the update
    /// has handled must no longer match it (the run checks this at the end).
    pub predicate: String,
    /// 1-based line of the directive in its file.
    pub line: usize,
}

/// The directive keys rollsafe knows; any other `-- rollsafe:` key is
/// refused with its file and line (a typo must never be silently ignored).
pub const DIRECTIVES: &[&str] = &["backfill", "no-transaction", "batched-update", "accept"];

/// How a migration's tool sends its file to the server: what the
/// rehearsal and `migrate` reproduce, and what the static precheck assumes.
/// Each layout states it for each file ([`layouts::Step::execution`]); each
/// rule below was read in the tool's own source.
///
/// PostgreSQL's part (the protocol's "multiple statements in a simple
/// query"): a simple-query string of one statement runs outside any
/// transaction block, so a lone `CREATE INDEX CONCURRENTLY` works there;
/// several statements share an implicit transaction (CONCURRENTLY fails);
/// a `BEGIN`/`COMMIT` inside the string is obeyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Execution {
    /// One explicit transaction around the file's statements: refinery,
    /// sqlx, diesel, dbmate, Atlas, Flyway; goose (`db.BeginTx`, then each
    /// statement `tx.ExecContext`, in goose's `runSQLMigration`); a Sqitch
    /// script that carries its own `BEGIN`/`COMMIT` (rollsafe's
    /// transaction stands for the script's).
    #[default]
    Transaction,
    /// Statement by statement, each committing on its own: goose's
    /// `NO TRANSACTION` (each statement `db.ExecContext`), Atlas's
    /// `txmode none`, a Flyway file run outside a transaction, a Sqitch
    /// script without `BEGIN` (psql's autocommit), and rollsafe's own
    /// `-- rollsafe:no-transaction`.
    Autocommit,
    /// The whole file as one simple-query string: golang-migrate (its
    /// postgres driver's `Run` reads the file and `runStatement` sends it
    /// with one `ExecContext`), Prisma (the schema engine's
    /// `apply_migration_script` is one `client.simple_query(script)`),
    /// sqlx `-- no-transaction`, diesel `run_in_transaction = false`
    /// (`batch_execute`), dbmate `transaction:false`. One statement runs
    /// outside a transaction, several share an implicit one, and the
    /// file's own `BEGIN`/`COMMIT`/`SET TRANSACTION` are obeyed.
    SimpleQuery,
}

impl Execution {
    /// For messages: how the tool runs the file.
    pub fn describe(self) -> &'static str {
        match self {
            Execution::Transaction => "in one transaction",
            Execution::Autocommit => "statement by statement, each committing on its own",
            Execution::SimpleQuery => "as one simple-query string",
        }
    }
}

/// How a project lays out its migration folder: the tool that writes it.
/// Each is read by its own [`layouts::LayoutReader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// refinery: `V{version}__{name}.sql` (the embedded set).
    Refinery,
    /// sqlx: `{version}_{name}.sql` (or `.up.sql`/`.down.sql` pairs).
    Sqlx,
    /// golang-migrate: `{version}_{name}.up.sql`, `.down.sql` ignored.
    GolangMigrate,
    /// diesel: `{version}_{name}/up.sql`.
    Diesel,
    /// goose: `{version}_{name}.sql` with `-- +goose Up`.
    Goose,
    /// dbmate: `{version}_{name}.sql` with `-- migrate:up`.
    Dbmate,
    /// Atlas: `{version}[_{name}].sql` with `atlas.sum`.
    Atlas,
    /// Flyway: `V{dotted version}__{description}.sql`, `R__` repeatables.
    Flyway,
    /// Prisma Migrate: `{name}/migration.sql`.
    Prisma,
    /// Sqitch: `sqitch.plan` and `deploy/{change}.sql`.
    Sqitch,
    /// maragudk/migrate: `{version}.up.sql`, the whole name before
    /// `.up.sql` the version; read as its tool's where the project's
    /// go.mod requires it.
    MaragudkMigrate,
    /// What a framework's own migrate command sent to a throwaway server
    /// (Django, Alembic, ActiveRecord, a `--migrate-command`): not a
    /// folder layout, so not in [`Layout::ALL`] and never detected from
    /// files; the catalogue is built by `crate::framework`.
    Framework,
    /// Drizzle: `meta/_journal.json` listing `{tag}.sql` files.
    Drizzle,
    /// Liquibase formatted SQL: `--liquibase formatted sql` files, one
    /// migration per `--changeset author:id`.
    Liquibase,
}

impl Layout {
    pub const ALL: [Layout; 13] = [
        Layout::Refinery,
        Layout::Sqlx,
        Layout::GolangMigrate,
        Layout::Diesel,
        Layout::Goose,
        Layout::Dbmate,
        Layout::Atlas,
        Layout::Flyway,
        Layout::Prisma,
        Layout::Sqitch,
        Layout::MaragudkMigrate,
        Layout::Drizzle,
        Layout::Liquibase,
    ];

    /// The name `--layout` and `rollsafe.toml` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Refinery => "refinery",
            Layout::Sqlx => "sqlx",
            Layout::GolangMigrate => "golang-migrate",
            Layout::Diesel => "diesel",
            Layout::Goose => "goose",
            Layout::Dbmate => "dbmate",
            Layout::Atlas => "atlas",
            Layout::Flyway => "flyway",
            Layout::Prisma => "prisma",
            Layout::Sqitch => "sqitch",
            Layout::MaragudkMigrate => "maragudk-migrate",
            Layout::Framework => "framework",
            Layout::Drizzle => "drizzle",
            Layout::Liquibase => "liquibase",
        }
    }

    /// The file-name pattern, for messages.
    pub fn pattern(self) -> &'static str {
        layouts::reader(self).pattern()
    }

    /// Every layout's name, for messages: `refinery, sqlx, …`.
    pub fn names() -> String {
        Layout::ALL.map(Layout::as_str).join(", ")
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Layout, String> {
        Layout::ALL
            .into_iter()
            .find(|l| l.as_str() == s.trim())
            .ok_or_else(|| format!("unknown layout `{s}`; use one of {}", Layout::names()))
    }
}

/// One migration file.
#[derive(Debug, Clone)]
pub struct Migration {
    /// rollsafe's key and order: the file's version for refinery files, the
    /// ordinal (1, 2, 3 … in version order) for the other layouts, whose
    /// versions may be timestamps too large for refinery's `i32`.
    pub version: i32,
    /// The migration as its tool labels it, for every message: `V3`
    /// (refinery), `20240101120000` (sqlx, golang-migrate),
    /// `2024-10-25-112826_make-unique` (diesel), the change (Sqitch).
    pub label: String,
    /// The version the tool keeps in its history table:
    /// `20241025112826` (diesel), `1.1` (Flyway), the change (Sqitch).
    pub key: String,
    /// The name part, e.g. `attached_functions_is_ready`.
    pub name: String,
    /// The file run, relative to the folder, e.g.
    /// `V3__attached_functions_is_ready.sql`, `2024-10-25-112826_x/up.sql`.
    pub file: String,
    pub sql: String,
    /// refinery's checksum of (name, version, sql).
    pub checksum: u64,
    /// The checksum the migration's own tool keeps in its history table
    /// (sqlx's SHA-384, Flyway's CRC32, Prisma's SHA-256, Atlas's sum
    /// hash; see [`layouts::Step::checksum`]), which `status` compares
    /// with that table; None for refinery and the tools that keep none.
    pub tool_checksum: Option<String>,
    /// A Flyway repeatable (`R__`): applied after every versioned
    /// migration, and again whenever its checksum changes.
    pub repeatable: bool,
    /// A Flyway SQL callback's event ([`layouts::Step::callback`]): rehearsed
    /// in its place like a migration, never a migration to a history.
    pub callback: Option<String>,
    /// Sqitch's verify script for this change, run after it (its failure
    /// means the change did not do what it promised).
    pub verify: Option<Script>,
    /// The scripts its tool runs on the migration's connection before its
    /// statements and after them, inside its transaction when it runs in
    /// one (Flyway's `beforeEachMigrate`, `afterEachMigrate`:
    /// [`layouts::Step::before_each`]). Every apply of the migration runs
    /// them (`migrate::apply::migration_steps`); their statements are
    /// attributed to their own files and lines, never the migration's.
    pub before_each: Vec<Script>,
    pub after_each: Vec<Script>,
    /// Atlas's `-- atlas:nolint` directives: the static precheck's
    /// warnings they silence ([`Nolint::silences`]).
    pub nolint: Nolint,
    pub directives: Vec<Directive>,
    /// Why rollsafe cannot run this migration (a goose Go migration):
    /// listed in its place, never dropped; what depends on it is
    /// `skipped` naming it. None for SQL.
    pub not_runnable: Option<String>,
    /// How its tool sends the file ([`Execution`]); `-- rollsafe:no-transaction`
    /// makes it [`Execution::Autocommit`].
    pub execution: Execution,
    /// What deploys it together with its neighbours
    /// ([`layouts::Step::deploy_group`]); see [`Catalog::deployed_with_previous`].
    pub deploy_group: Option<String>,
    /// How its tool sends it in the transaction of the migration before
    /// it when both are pending ([`layouts::Step::shared_transaction`]);
    /// see [`Catalog::transaction_shared_with_previous`].
    pub shared_transaction: Option<String>,
    /// Who applies it on a database with rows instead of its SQL
    /// ([`layouts::Step::external`]: a framework's data migration); its
    /// SQL is what it does to an empty database.
    pub external: Option<ExternalApply>,
    /// Whether the file, sent as its tool sends it, runs outside one
    /// transaction of rollsafe's (decided once: [`Migration::runs_outside_transaction`]).
    outside_transaction: bool,
}

impl Migration {
    /// The migration a layout read, numbered `version`: its directives
    /// parsed, the layout's transaction mode one of them, its checksum.
    fn from_step(version: i32, step: Step) -> Result<Migration, CatalogError> {
        let directives = parse_directives(&step.file, &step.sql)?;
        let execution = if directives.contains(&Directive::NoTransaction) {
            Execution::Autocommit
        } else {
            step.execution
        };
        let outside_transaction = directives
            .iter()
            .any(|d| matches!(d, Directive::BatchedUpdate(_)))
            || runs_outside_transaction(execution, &step.sql);
        let checksum =
            refinery::Migration::unapplied(&refinery_name(version, &step.name), &step.sql)
                .map_err(|e| CatalogError::Unreadable {
                    file: step.file.clone(),
                    why: format!("refinery refuses its name ({e})"),
                })?
                .checksum();
        Ok(Migration {
            version,
            label: step.label,
            key: step.key,
            name: step.name,
            file: step.file,
            sql: step.sql,
            checksum,
            tool_checksum: step.checksum,
            repeatable: step.repeatable,
            callback: step.callback,
            verify: step.verify,
            before_each: step.before_each,
            after_each: step.after_each,
            nolint: step.nolint,
            directives,
            execution,
            outside_transaction,
            not_runnable: step.not_runnable,
            deploy_group: step.deploy_group,
            shared_transaction: step.shared_transaction,
            external: step.external,
        })
    }

    /// `V3__attached_functions_is_ready`, refinery's name for it (for other
    /// layouts: the ordinal, and the name with anything refinery refuses
    /// replaced by `_`).
    pub fn refinery_name(&self) -> String {
        refinery_name(self.version, &self.name)
    }

    /// The name refinery keeps in its history table for this file:
    /// [`Migration::name`] with what refinery refuses replaced by `_`
    /// (`create-orders` is recorded as `create_orders`).
    pub fn refinery_history_name(&self) -> String {
        refinery_safe(&self.name)
    }

    /// The refinery migration for this file.
    pub fn to_refinery(&self) -> refinery::Migration {
        refinery::Migration::unapplied(&self.refinery_name(), &self.sql)
            .expect("catalog validated the name")
    }

    /// The file's `-- rollsafe:backfill` promises: (table, predicate).
    pub fn backfills(&self) -> impl Iterator<Item = (&TableName, &str)> {
        self.directives.iter().filter_map(|d| match d {
            Directive::Backfill { table, predicate } => Some((table, predicate.as_str())),
            _ => None,
        })
    }

    /// The tables the file's statements `INSERT` into (data-modifying CTEs
    /// included), read by the grammar: the lookup data a migration fills.
    /// Dynamic SQL (`EXECUTE` in a `DO` block) is not seen.
    pub fn inserted_tables(&self) -> Vec<TableName> {
        use squawk_syntax::ast::{self, AstNode};
        let mut tables: Vec<TableName> = crate::sql::with_parse(&self.sql, |parse| {
            parse
                .syntax_node()
                .descendants()
                .filter_map(ast::Insert::cast)
                .filter_map(|insert| insert.relation_name_ref())
                .filter_map(|r| TableName::parse(&r.syntax().text().to_string()).ok())
                .collect()
        })
        .unwrap_or_default();
        tables.sort();
        tables.dedup();
        tables
    }

    /// How a user may name this migration besides its label and key, as
    /// they see it in the folder: the file (`V24__add_tokens.sql`,
    /// `deploy/orders.sql`), its stem (`V24__add_tokens`,
    /// `000115_timestamps` for `000115_timestamps.up.sql`) and, for a
    /// migration that is a folder (`2024-10-25-112826_x/up.sql`, Prisma's
    /// `…/migration.sql`), the folder's name.
    pub fn file_spellings(&self) -> Vec<&str> {
        let file = self.file.as_str();
        // diesel's `<folder>/up.sql`, Prisma's `<folder>/migration.sql`:
        // the file's own name is every migration's, the folder names it.
        if let Some(dir) = ["/up.sql", "/migration.sql"]
            .iter()
            .find_map(|fixed| file.strip_suffix(fixed))
        {
            return vec![file, dir];
        }
        let base = file.rsplit('/').next().unwrap_or(file);
        let mut out = vec![file, base];
        let mut stem = base;
        for suffix in [".sql", ".go", ".up", "_up"] {
            if let Some(s) = stem.strip_suffix(suffix).filter(|s| !s.is_empty()) {
                stem = s;
                out.push(stem);
            }
        }
        out
    }

    /// Its tool does not wrap the file in a transaction of its own (or the
    /// file says `-- rollsafe:no-transaction`).
    pub fn no_transaction(&self) -> bool {
        self.execution != Execution::Transaction
    }

    /// The file's `-- rollsafe:accept` waivers, in file order.
    pub fn accepts(&self) -> impl Iterator<Item = &Accept> {
        self.directives.iter().filter_map(|d| match d {
            Directive::Accept(a) => Some(a),
            _ => None,
        })
    }

    /// The file's `-- rollsafe:batched-update` directives, in file order.
    pub fn batched_updates(&self) -> impl Iterator<Item = &BatchedUpdate> {
        self.directives.iter().filter_map(|d| match d {
            Directive::BatchedUpdate(b) => Some(b),
            _ => None,
        })
    }

    /// Whether the file runs statement by statement rather than in one
    /// transaction of rollsafe's (with `migrate`'s history row): sent as
    /// its tool sends it ([`Execution`]), and any file with a batched
    /// update (its batches commit one by one, so the file as a whole
    /// cannot be one transaction). `migrate`, the rehearsal and the static
    /// precheck all follow this one answer.
    pub fn runs_outside_transaction(&self) -> bool {
        self.outside_transaction
    }

    /// The file opens and ends transactions of its own (`BEGIN` …
    /// `COMMIT`) and runs outside one of rollsafe's: it cannot be forced to
    /// fail before a commit that is its own.
    pub fn manages_own_transaction(&self) -> bool {
        self.outside_transaction
            && crate::sql::split(&self.sql)
                .statements
                .iter()
                .any(|s| crate::sql::transaction_control(s).is_some())
    }
}

/// Whether `sql`, sent the way `execution` says, runs outside one
/// transaction: statement by statement; or as a simple-query string that
/// holds its own `BEGIN`/`COMMIT` (obeyed, so rollsafe's transaction around
/// it would change what it does), or one statement PostgreSQL refuses in a
/// transaction block (a lone one runs outside any). Any other lone
/// statement is atomic either way, and several statements of one string
/// share an implicit transaction: rollsafe's, with `migrate`'s history row
/// in it and the forced failure before its commit, changes nothing there.
fn runs_outside_transaction(execution: Execution, sql: &str) -> bool {
    match execution {
        Execution::Transaction => false,
        Execution::Autocommit => true,
        Execution::SimpleQuery => {
            let split = crate::sql::split(sql);
            let statements = &split.statements;
            split.exact
                && (matches!(statements.as_slice(), [lone] if crate::sql::refuses_transaction_block(lone))
                    || statements
                        .iter()
                        .any(|s| crate::sql::transaction_control(s).is_some()))
        }
    }
}

impl fmt::Display for Migration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.label, self.file)
    }
}

/// Where a catalog came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Embedded,
    Dir(PathBuf),
    /// What a framework's migrate command sent to the server, run in
    /// `project`: `framework` is `Django`, `Alembic`, `ActiveRecord` or
    /// `a migrate command`.
    Framework {
        project: PathBuf,
        framework: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Embedded => f.write_str("the migrations embedded in rollsafe"),
            Source::Dir(p) => write!(f, "{}", p.display()),
            Source::Framework { project, framework } => {
                let owner = match framework.strip_prefix("a ") {
                    Some(generic) => format!("the {generic}"),
                    None => format!("{framework}'s migrate"),
                };
                write!(
                    f,
                    "the migrations {owner} sent (project {})",
                    project.display()
                )
            }
        }
    }
}

#[derive(Debug, Error)]
pub enum CatalogError {
    #[error("migrations directory {0} does not exist or is not a directory; pass --migrations with the directory holding the migration files")]
    MissingDir(PathBuf),
    #[error("cannot read {path}: {detail}")]
    Io { path: PathBuf, detail: String },
    #[error("{file}: not a migration file name; expected {expected}")]
    BadName { file: String, expected: String },
    #[error("{file}: {why}")]
    Unreadable { file: String, why: String },
    #[error("{file}: not a {layout} migration file name; expected {pattern} (or drop --layout / `layout` to detect it)")]
    NotInLayout {
        file: String,
        layout: Layout,
        pattern: &'static str,
    },
    #[error("{dir} mixes migration layouts ({found}); keep one layout per directory, rename the odd files or move them out{could_be}")]
    MixedLayouts {
        dir: String,
        found: String,
        /// The one tool that may have written every file, said after the
        /// refusal (`; … pass --layout …`); empty when none.
        could_be: String,
    },
    #[error("{dir}: its project requires {tools}, and each reads every file of the folder; pass --layout with the one that runs this folder")]
    AmbiguousProject { dir: String, tools: String },
    #[error("{file}: is not valid UTF-8 (byte {offset}); save the file as UTF-8")]
    NotUtf8 { file: String, offset: usize },
    #[error("version {version} is used twice ({first} and {second}); give each migration its own version")]
    DuplicateVersion {
        version: String,
        first: String,
        second: String,
    },
    #[error("{file}:{line}: malformed directive `{text}`; expected {expected}")]
    BadDirective {
        file: String,
        line: usize,
        text: String,
        expected: String,
    },
    #[error("{file}:{line}: unknown directive `-- rollsafe:{key}`; rollsafe knows {known} (fix the spelling, or make it a plain comment by removing `rollsafe:`)")]
    UnknownDirective {
        file: String,
        line: usize,
        key: String,
        known: String,
    },
    #[error("{source_name} holds no migration files of a layout rollsafe reads ({}); pass the folder your migration tool writes to, or --layout", Layout::names())]
    Empty { source_name: String },
}

/// An ordered, validated set of migrations.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub source: Source,
    pub layout: Layout,
    migrations: Vec<Migration>,
    /// The folder's files that are not migrations: companions its tool
    /// knows and files it ignores, named in the run's header.
    pub set_aside: Vec<layouts::SetAside>,
    /// What the run's header says about reading the folder besides its
    /// files (a Sqitch dependency on a project the repository lacks).
    pub notes: Vec<String>,
    /// SQL that creates, before the first migration, a table the tool
    /// itself keeps and the folder's SQL reads (a Flyway callback that
    /// reads `flyway_schema_history`): in production the tool made it
    /// before any of them ran. Run as the rehearsal's setup (with
    /// `--setup`'s); None when no SQL of the folder reads one.
    pub tool_setup: Option<String>,
}

fn refinery_name(version: i32, name: &str) -> String {
    format!("V{version}__{}", refinery_safe(name))
}

/// `name` with anything refinery refuses in a name replaced by `_`; an
/// Atlas file named by its version alone is `migration` to refinery.
fn refinery_safe(name: &str) -> String {
    if name.is_empty() {
        return "migration".into();
    }
    name.chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn parse_directives(file: &str, sql: &str) -> Result<Vec<Directive>, CatalogError> {
    let mut out = Vec::new();
    for (i, line) in sql.lines().enumerate() {
        let Some(rest) = line.trim().strip_prefix("--") else {
            continue;
        };
        let Some(body) = rest.trim().strip_prefix("rollsafe:") else {
            continue;
        };
        let (key, value) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
        let value = value.trim();
        let bad_because = |expected: &str| CatalogError::BadDirective {
            file: file.to_string(),
            line: i + 1,
            text: line.trim().to_string(),
            expected: expected.to_string(),
        };
        match key {
            "no-transaction" => {
                if !value.is_empty() {
                    return Err(bad_because(
                        "`-- rollsafe:no-transaction` alone on its line (it takes no value)",
                    ));
                }
                if !out.contains(&Directive::NoTransaction) {
                    out.push(Directive::NoTransaction);
                }
            }
            "batched-update" => {
                let (table, set, predicate) =
                    directive_sql::parse_batched_update(value).map_err(|why| {
                        bad_because(&format!(
                            "`-- rollsafe:batched-update <table> SET <column> = <expression> WHERE <predicate>` on one line ({why})"
                        ))
                    })?;
                out.push(Directive::BatchedUpdate(BatchedUpdate {
                    table,
                    set,
                    predicate,
                    line: i + 1,
                }));
            }
            "backfill" => {
                let (table, predicate) = directive_sql::parse_backfill(value).map_err(|why| {
                    bad_because(&format!(
                        "`-- rollsafe:backfill <table> <predicate over its columns>` on one line ({why})"
                    ))
                })?;
                out.push(Directive::Backfill { table, predicate });
            }
            "accept" => {
                let accept = parse_accept(value, i + 1)
                    .map_err(|why| bad_because(&format!("{ACCEPT_FORM} ({why})")))?;
                out.push(Directive::Accept(accept));
            }
            _ => {
                return Err(CatalogError::UnknownDirective {
                    file: file.to_string(),
                    line: i + 1,
                    key: key.to_string(),
                    known: DIRECTIVES
                        .iter()
                        .map(|d| format!("`-- rollsafe:{d}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            }
        }
    }
    Ok(out)
}

/// What a migration file name may look like, for a folder no layout claims.
const EXPECTED_NAMES: &str = "V<version>__<name>.sql (refinery, Flyway), <version>_<name>.sql (sqlx, goose, dbmate), <version>_<name>.up.sql (golang-migrate, maragudk/migrate), <version>.sql with atlas.sum (Atlas), <version>_<name>/up.sql (diesel), <name>/migration.sql (Prisma), a sqlx.plan with deploy/ (Sqitch) meta/_journal.json listing <tag>.sql (Drizzle) or .sql files starting --liquibase formatted sql (Liquibase); or pass --layout";

/// The files of a migration folder a layout may read: up to three levels
/// deep (`deploy/schema/x.sql` in Sqitch), folders starting with `.`
/// skipped, only the kinds of files layouts name.
fn read_folder(dir: &Path) -> Result<Folder, CatalogError> {
    const DEPTH: usize = 3;
    // And `.go` beside them: goose's Go migrations, listed, never run.
    const KINDS: [&str; 5] = ["sql", "toml", "conf", "sum", "plan"];
    let io = |path: &Path, e: std::io::Error| CatalogError::Io {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let mut folder = Folder::default();
    let mut pending = vec![(dir.to_path_buf(), String::new(), 0)];
    while let Some((path, prefix, depth)) = pending.pop() {
        for entry in std::fs::read_dir(&path).map_err(|e| io(&path, e))? {
            let entry = entry.map_err(|e| io(&path, e))?;
            let name = entry.file_name().to_string_lossy().to_string();
            let child = entry.path();
            let relative = format!("{prefix}{name}");
            if child.is_dir() {
                if depth + 1 < DEPTH && !name.starts_with('.') {
                    pending.push((child, format!("{relative}/"), depth + 1));
                }
            } else if child
                .extension()
                .is_some_and(|x| KINDS.iter().any(|k| x == *k) || (depth == 0 && x == "go"))
                || relative == layouts::drizzle::JOURNAL
            {
                let bytes = std::fs::read(&child).map_err(|e| io(&child, e))?;
                folder.files.insert(relative, bytes);
            } else if [".xml", ".yaml", ".yml"].iter().any(|x| name.ends_with(x)) {
                // Liquibase's changelogs order its SQL files; any other
                // XML or YAML is not a migration file.
                let bytes = std::fs::read(&child).map_err(|e| io(&child, e))?;
                match layouts::liquibase::is_changelog(&relative, &bytes) {
                    true => drop(folder.files.insert(relative, bytes)),
                    false => folder.others.push(relative),
                }
            } else if !name.starts_with('.') {
                folder.others.push(relative);
            }
        }
    }
    folder.others.sort();
    Ok(folder)
}

/// Two migrations with the same tool version: which runs first is a guess.
fn refuse_duplicate_keys(steps: &[Step]) -> Result<(), CatalogError> {
    let mut seen: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for step in steps {
        if let Some(first) = seen.insert(&step.key, &step.file) {
            return Err(CatalogError::DuplicateVersion {
                version: step.key.clone(),
                first: first.to_string(),
                second: step.file.clone(),
            });
        }
    }
    Ok(())
}

impl Catalog {
    /// The migrations embedded in this binary.
    pub fn embedded() -> Result<Catalog, CatalogError> {
        Catalog::from_files(
            Source::Embedded,
            EMBEDDED.iter().map(|(f, b)| (f.to_string(), b.to_vec())),
        )
    }

    /// A migration folder, layout detected.
    pub fn from_dir(dir: &Path) -> Result<Catalog, CatalogError> {
        Catalog::from_dir_in(dir, &ReadOptions::default())
    }

    /// A migration folder read as `options` say (layout: given or
    /// detected; Flyway placeholders).
    pub fn from_dir_in(dir: &Path, options: &ReadOptions) -> Result<Catalog, CatalogError> {
        if !dir.is_dir() {
            return Err(CatalogError::MissingDir(dir.to_path_buf()));
        }
        let mut folder = read_folder(dir)?;
        // `N_name.up.sql` is golang-migrate's, sqlx's reversible and
        // maragudk/migrate's alike: the project around it says whose.
        folder.project = layouts::project_tools(dir);
        folder.pinned = layouts::pinned_versions(dir);
        folder.dir = Some(dir.to_path_buf());
        Catalog::from_folder(Source::Dir(dir.to_path_buf()), options, folder)
    }

    /// `--migrations DIR` when given, else the embedded set.
    pub fn load(dir: Option<&Path>) -> Result<Catalog, CatalogError> {
        Catalog::load_in(dir, &ReadOptions::default())
    }

    /// [`Catalog::load`] read as `options` say. The embedded set is
    /// refinery's, whatever is asked.
    pub fn load_in(dir: Option<&Path>, options: &ReadOptions) -> Result<Catalog, CatalogError> {
        match dir {
            Some(d) => Catalog::from_dir_in(d, options),
            None => Catalog::embedded(),
        }
    }

    fn from_files(
        source: Source,
        files: impl Iterator<Item = (String, Vec<u8>)>,
    ) -> Result<Catalog, CatalogError> {
        Catalog::from_files_in(source, &ReadOptions::default(), files)
    }

    fn from_files_in(
        source: Source,
        options: &ReadOptions,
        files: impl Iterator<Item = (String, Vec<u8>)>,
    ) -> Result<Catalog, CatalogError> {
        let folder = Folder {
            files: files.collect(),
            ..Folder::default()
        };
        Catalog::from_folder(source, options, folder)
    }

    fn from_folder(
        source: Source,
        options: &ReadOptions,
        folder: Folder,
    ) -> Result<Catalog, CatalogError> {
        let layout = match options.layout {
            Some(layout) => layout,
            None => match layouts::detect(&source.to_string(), &folder)? {
                Some(layout) => layout,
                None => {
                    return Err(match folder.top_level_sql().next() {
                        Some((file, _)) => CatalogError::BadName {
                            file: file.to_string(),
                            expected: EXPECTED_NAMES.to_string(),
                        },
                        None => CatalogError::Empty {
                            source_name: source.to_string(),
                        },
                    })
                }
            },
        };
        let steps = layouts::read(layout, &folder, options)?;
        let set_aside = layouts::set_aside(layout, &folder, &steps);
        let (mut steps, mut notes) = match (&source, layout) {
            (Source::Dir(dir), Layout::Sqitch) => {
                layouts::sqitch::with_sibling_projects(dir, steps, |sibling| {
                    layouts::read(Layout::Sqitch, &read_folder(sibling)?, options)
                })?
            }
            _ => (steps, Vec::new()),
        };
        if let Some(dir) = &folder.dir {
            deploy_groups::fill(dir, layout, &mut steps);
        }
        let catalog = Catalog::from_steps(source, layout, steps)?;
        notes.extend(catalog.none_runnable());
        notes.extend(deploy_groups::note(&catalog));
        let tool_setup = layouts::reader(layout).tool_tables(&catalog.migrations);
        if let Some((_, note)) = &tool_setup {
            notes.push(note.clone());
        }
        Ok(Catalog {
            set_aside,
            notes,
            tool_setup: tool_setup.map(|(sql, _)| sql),
            ..catalog
        })
    }

    /// The catalogue of `steps` in their order, whoever read them (a
    /// folder's layout, or a framework's migrate read back from the
    /// server): duplicate keys refused, ordinals as versions (refinery:
    /// its own), and none at all is [`CatalogError::Empty`].
    pub fn from_steps(
        source: Source,
        layout: Layout,
        steps: Vec<Step>,
    ) -> Result<Catalog, CatalogError> {
        refuse_duplicate_keys(&steps)?;
        let mut migrations: Vec<Migration> = Vec::new();
        for (ordinal, step) in steps.into_iter().enumerate() {
            let version = match layout {
                Layout::Refinery => step.key.parse().expect("refinery keys are i32s"),
                // More than i32::MAX files is not a directory anyone has.
                _ => i32::try_from(ordinal + 1).unwrap_or(i32::MAX),
            };
            migrations.push(Migration::from_step(version, step)?);
        }
        if migrations.is_empty() {
            return Err(CatalogError::Empty {
                source_name: source.to_string(),
            });
        }
        Ok(Catalog {
            source,
            layout,
            migrations,
            set_aside: Vec::new(),
            notes: Vec::new(),
            tool_setup: None,
        })
    }

    /// For the run's header, when rollsafe can run none of the migrations
    /// (a goose folder of Go migrations only): that nothing of them is
    /// rehearsed or checked, and why.
    fn none_runnable(&self) -> Option<String> {
        let mut why = self.migrations.iter().map(|m| m.not_runnable.as_deref());
        let first = why.next()??;
        let each = match why.clone().all(|w| w == Some(first)) {
            true => format!("each {first}"),
            false => "each says why".to_string(),
        };
        why.all(|w| w.is_some()).then(|| {
            format!("rollsafe can run none of these migrations ({each}), so this run rehearses and checks nothing of them")
        })
    }

    /// Whether the migration at `index` is deployed together with the one
    /// before it (the same [`Migration::deploy_group`]): no app writes rows
    /// between the two, so a table the earlier one created is still empty
    /// when the later one runs.
    pub fn deployed_with_previous(&self, index: usize) -> bool {
        let Some(prev) = index.checked_sub(1).and_then(|i| self.migrations.get(i)) else {
            return false;
        };
        match (
            &prev.deploy_group,
            self.migrations
                .get(index)
                .and_then(|m| m.deploy_group.as_ref()),
        ) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// The header's line naming the migrations deployed together
    /// ([`Migration::deploy_group`]), when some are.
    pub fn deploy_groups_note(&self) -> Option<String> {
        deploy_groups::note(self)
    }

    /// How the migration at `index` reaches production in the transaction
    /// of the one before it, when it does: its tool sends every pending
    /// migration in one transaction ([`Migration::shared_transaction`]),
    /// both run in one transaction here (neither outside one), and the
    /// two are pending together: the same deploy ran them
    /// ([`Catalog::deployed_with_previous`]), or `both_pending` (the caller
    /// knows production stands before both: `--since`, `--base`). The
    /// earlier one's locks are then held until the later one commits.
    pub fn transaction_shared_with_previous(
        &self,
        index: usize,
        both_pending: bool,
    ) -> Option<&str> {
        let prev = self.migrations.get(index.checked_sub(1)?)?;
        let m = self.migrations.get(index)?;
        let in_transactions = !prev.runs_outside_transaction() && !m.runs_outside_transaction();
        let pending = both_pending || self.deployed_with_previous(index);
        (in_transactions && pending && prev.callback.is_none() && m.callback.is_none())
            .then_some(m.shared_transaction.as_deref())
            .flatten()
    }

    /// `v`, or the last of the callbacks right after it (Flyway's
    /// afterVersioned, afterMigrateApplied, afterMigrate): the migrate that
    /// applies `v` runs them before anything else reaches the database.
    pub fn through_callbacks(&self, v: i32) -> i32 {
        let Some(at) = self.migrations.iter().position(|m| m.version == v) else {
            return v;
        };
        if self.migrations[at].callback.is_some() {
            return v;
        }
        self.migrations[at + 1..]
            .iter()
            .take_while(|m| m.callback.is_some())
            .last()
            .map_or(v, |m| m.version)
    }

    /// rollsafe's version for a migration as the user names it (`3`,
    /// `V3`, `20240101120000`, `2024-10-25-112826_x`, a Sqitch change, a
    /// Liquibase changeset's `author:id` or lone id), e.g.
    /// in an app's `-- needs:` or `--since`: for refinery the number itself,
    /// for the other layouts the ordinal of the migration with that label or
    /// tool version. None when it names no migration of a non-refinery
    /// layout, or is not a version at all.
    pub fn resolve_version(&self, text: &str) -> Option<i32> {
        let text = text.trim();
        if let Some(v) = self.resolve_file_spelling(text) {
            return Some(v);
        }
        let digits = text.strip_prefix('V').unwrap_or(text);
        let is_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
        if self.layout == Layout::Refinery {
            return is_digits.then(|| digits.parse().ok()).flatten();
        }
        if let Some(m) = self
            .migrations
            .iter()
            .find(|m| m.label == text || m.key == text)
        {
            return Some(m.version);
        }
        if let Ok(Some(v)) = self.resolve_changeset(text) {
            return Some(v);
        }
        // `000002` names golang-migrate's 2.
        let wanted: u64 = is_digits.then(|| digits.parse().ok()).flatten()?;
        self.migrations
            .iter()
            .find(|m| m.key.parse::<u64>().ok() == Some(wanted))
            .map(|m| m.version)
    }

    /// The migration `text` names as the folder shows it: its file, the
    /// file's stem, its folder (also as a path ending in one of those,
    /// `db/migrations/V24__add_tokens.sql`). A label or key of another
    /// migration wins (a Sqitch change named like another's script stem is
    /// the change). A file cut into several migrations (dbmate's up
    /// sections) is named by its last: the whole file.
    fn resolve_file_spelling(&self, text: &str) -> Option<i32> {
        if text.is_empty()
            || self
                .migrations
                .iter()
                .any(|m| m.label == text || m.key == text)
        {
            return None;
        }
        let text = text.trim_end_matches('/');
        let names = |m: &&Migration| {
            m.file_spellings()
                .iter()
                .any(|s| text == *s || text.strip_suffix(s).is_some_and(|head| head.ends_with('/')))
        };
        self.migrations.iter().rfind(names).map(|m| m.version)
    }

    /// A Liquibase changeset as its file writes it, `author:id` (either
    /// quoted or not), or by its bare `id` when no other changeset has
    /// that id. Err, one phrase for the caller to put after the flag:
    /// the spelling names several changesets, and the spellings that name
    /// one each.
    fn resolve_changeset(&self, text: &str) -> Result<Option<i32>, String> {
        if self.layout != Layout::Liquibase || text.is_empty() {
            return Ok(None);
        }
        // (migration, author, id); Liquibase's one changeset for a plain
        // SQL file (`raw`) is written nowhere.
        let written: Vec<(&Migration, &str, &str)> = self
            .migrations
            .iter()
            .filter(|m| m.key != format!("{}::raw::includeAll", m.file))
            .filter_map(|m| {
                Some((
                    m,
                    layouts::liquibase::author_of(&m.key, &m.name)?,
                    m.name.as_str(),
                ))
            })
            .collect();
        let unquote = |s: &str| {
            s.strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .unwrap_or(s)
                .to_string()
        };
        // `"a b":id` or `a:id`: the author ends at the first `:` outside quotes.
        let split = match text.strip_prefix('"') {
            Some(quoted) => quoted
                .split_once("\":")
                .map(|(a, id)| (a.to_string(), unquote(id))),
            None => text
                .split_once(':')
                .map(|(a, id)| (a.to_string(), unquote(id))),
        };
        let by_author: Vec<&(&Migration, &str, &str)> = match &split {
            Some((author, id)) => written
                .iter()
                .filter(|(_, a, i)| a == author && i == id)
                .collect(),
            None => Vec::new(),
        };
        match by_author.as_slice() {
            [(m, _, _)] => return Ok(Some(m.version)),
            [] => {}
            several => {
                return Err(format!(
                    "`{text}` is written in {} files; pass the one you mean by its label: {}",
                    several.len(),
                    several
                        .iter()
                        .map(|(m, _, _)| m.label.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
        let id = unquote(text);
        let same_id: Vec<&(&Migration, &str, &str)> =
            written.iter().filter(|(_, _, i)| *i == id).collect();
        match same_id.as_slice() {
            [(m, _, _)] => Ok(Some(m.version)),
            [] => Ok(None),
            several => {
                let spelling = |m: &Migration, a: &str, i: &str| {
                    let twice = several.iter().filter(|(_, a2, _)| *a2 == a).count() > 1;
                    match twice {
                        // One author wrote the id in two files: the label.
                        true => m.label.clone(),
                        false => format!("{a}:{i}"),
                    }
                };
                Err(format!(
                    "`{text}` is the id of {} changesets; pass the one you mean as {}",
                    several.len(),
                    several
                        .iter()
                        .map(|(m, a, i)| spelling(m, a, i))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ))
            }
        }
    }

    /// rollsafe's version for a migration named on the command line
    /// (`--target`, `--since`): what [`Catalog::resolve_version`] resolves,
    /// or, for layouts other than refinery, the one migration whose label or
    /// tool version starts with `text` (a bare Prisma timestamp
    /// `20260616120000` for `20260616120000_add_x`, diesel's
    /// `2024-10-25-112826` without its name). The error is one phrase for
    /// the caller to put after the flag: none or several migrations match,
    /// with the valid ones as ranges.
    pub fn resolve_label(&self, text: &str) -> Result<i32, String> {
        let all = || {
            self.label_ranges(
                &self
                    .migrations
                    .iter()
                    .map(|m| m.version)
                    .collect::<Vec<_>>(),
            )
        };
        if let Some(v) = self.resolve_version(text) {
            return Ok(v);
        }
        self.resolve_changeset(text.trim())?;
        let wanted = text.trim();
        let matching: Vec<i32> = match (self.layout, wanted.is_empty()) {
            (Layout::Refinery, _) | (_, true) => Vec::new(),
            _ => self
                .migrations
                .iter()
                .filter(|m| m.label.starts_with(wanted) || m.key.starts_with(wanted))
                .map(|m| m.version)
                .collect(),
        };
        match matching.as_slice() {
            [v] => Ok(*v),
            [] => Err(format!(
                "`{wanted}` names no migration of this {} folder (the files have {}); pass one of those labels (or the start of one), or a migration's file or folder name{}",
                self.layout,
                all(),
                match self.layout {
                    Layout::Liquibase => ", or a changeset as its file writes it (author:id)",
                    _ => "",
                }
            )),
            several => Err(format!(
                "`{wanted}` is the start of {} migrations ({}); give more of the label so that it names one",
                several.len(),
                self.label_ranges(several)
            )),
        }
    }

    /// The label of rollsafe's version `v` (`V3` for refinery; the file's
    /// version for the others), for messages; `V{v}` when no migration has it.
    pub fn label_of(&self, v: i32) -> String {
        self.get(v)
            .map_or_else(|| format!("V{v}"), |m| m.label.clone())
    }

    /// `versions` as runs of neighbouring migrations, for messages:
    /// `V1..V247`, `V1..V3, V5`, `20240101120000..20240301090000`. A
    /// version no migration has is shown as `V<v>` on its own.
    pub fn label_ranges(&self, versions: &[i32]) -> String {
        let position = |v: i32| self.migrations.iter().position(|m| m.version == v);
        let mut sorted: Vec<i32> = versions.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut runs: Vec<(i32, i32)> = Vec::new();
        for v in sorted {
            match runs.last_mut() {
                Some((_, last)) if position(*last).is_some_and(|p| position(v) == Some(p + 1)) => {
                    *last = v
                }
                _ => runs.push((v, v)),
            }
        }
        runs.iter()
            .map(|&(first, last)| match first == last {
                true => self.label_of(first),
                false => format!("{}..{}", self.label_of(first), self.label_of(last)),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// All migrations, by ascending version.
    pub fn migrations(&self) -> &[Migration] {
        &self.migrations
    }

    pub fn get(&self, version: i32) -> Option<&Migration> {
        self.migrations.iter().find(|m| m.version == version)
    }

    /// Where `m` lives as a reviewer sees it: `migrations/<file>` for the
    /// embedded set (the repository's directory), `DIR/<file>` otherwise;
    /// a framework's migration from an installed package (Django's
    /// `auth.0001_initial`), which has no file in the project, by its
    /// label.
    pub fn path_of(&self, m: &Migration) -> String {
        match &self.source {
            Source::Framework { .. } if m.file.is_empty() => {
                format!("{} (an installed package's)", m.label)
            }
            _ => self.path_of_file(&m.file),
        }
    }

    /// Where `file` (relative to the folder: a migration's, or a script
    /// run with one, [`Migration::before_each`]) lives as a reviewer sees
    /// it, as [`Catalog::path_of`] says.
    pub fn path_of_file(&self, file: &str) -> String {
        match &self.source {
            Source::Embedded => format!("migrations/{file}"),
            Source::Dir(d) => d.join(file).display().to_string(),
            Source::Framework { project, .. } => project.join(file).display().to_string(),
        }
    }

    /// The highest version.
    pub fn latest(&self) -> i32 {
        self.migrations.last().map(|m| m.version).unwrap_or(0)
    }

    /// Migrations with version ≤ `target`.
    pub fn up_to(&self, target: i32) -> impl Iterator<Item = &Migration> {
        self.migrations.iter().filter(move |m| m.version <= target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A framework's migrations are steps like a folder's: numbered in
    /// order, named by their keys and labels, a repeated key refused, and
    /// the source says what ran. No folder is ever read as one.
    #[test]
    fn a_framework_catalogue_is_built_from_its_steps() {
        let step = |key: &str, sql: &str| Step {
            key: key.into(),
            label: key.into(),
            name: key.rsplit('.').next().unwrap().into(),
            file: format!("seeds/migrations/{}.py", key.rsplit('.').next().unwrap()),
            sql: sql.into(),
            ..Step::default()
        };
        let source = Source::Framework {
            project: PathBuf::from("shop"),
            framework: "Django".into(),
        };
        let catalog = Catalog::from_steps(
            source.clone(),
            Layout::Framework,
            vec![
                step("seeds.0001_initial", "CREATE TABLE seed (id int);\n"),
                step(
                    "seeds.0002_batch",
                    "ALTER TABLE seed ADD COLUMN batch int;\n",
                ),
            ],
        )
        .unwrap();
        assert_eq!(catalog.latest(), 2);
        assert_eq!(catalog.resolve_label("seeds.0002_batch"), Ok(2));
        assert_eq!(
            catalog.source.to_string(),
            "the migrations Django's migrate sent (project shop)"
        );
        assert_eq!(
            catalog.path_of(&catalog.migrations()[0]),
            "shop/seeds/migrations/0001_initial.py"
        );
        let package = Catalog::from_steps(
            source.clone(),
            Layout::Framework,
            vec![Step {
                file: String::new(),
                ..step("auth.0001_initial", "CREATE TABLE auth_user (id int);\n")
            }],
        )
        .unwrap();
        assert_eq!(
            package.path_of(&package.migrations()[0]),
            "auth.0001_initial (an installed package's)"
        );
        let twice = Catalog::from_steps(
            source,
            Layout::Framework,
            vec![
                step("seeds.0001_initial", ""),
                step("seeds.0001_initial", ""),
            ],
        );
        assert!(matches!(twice, Err(CatalogError::DuplicateVersion { .. })));
        assert!(!Layout::ALL.contains(&Layout::Framework));
        assert!(layouts::reader(Layout::Framework)
            .read(&Folder::default(), &ReadOptions::default())
            .is_err());
    }

    /// `N_name.up.sql`/`.down.sql` is sqlx's reversible folder inside a
    /// crate that depends on sqlx, and golang-migrate's anywhere else.
    #[test]
    fn an_up_down_folder_is_the_tool_its_project_uses() {
        let layout_in = |manifest: Option<(&str, &str)>| {
            let project = tempfile::tempdir().unwrap();
            std::fs::create_dir(project.path().join(".git")).unwrap();
            if let Some((file, text)) = manifest {
                std::fs::write(project.path().join(file), text).unwrap();
            }
            let dir = project.path().join("migrations");
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(
                dir.join("20240101000000_kettles.up.sql"),
                "CREATE TABLE kettles (id int);",
            )
            .unwrap();
            std::fs::write(
                dir.join("20240101000000_kettles.down.sql"),
                "DROP TABLE kettles;",
            )
            .unwrap();
            Catalog::from_dir(&dir).unwrap().layout
        };
        let crate_with = |deps: &str| {
            Some((
                "Cargo.toml",
                format!("[package]\nname = \"teapot\"\n\n{deps}"),
            ))
        };
        for deps in [
            "[dependencies]\nsqlx = { version = \"0.8\", features = [\"postgres\"] }\n",
            "[dependencies]\nsqlx.workspace = true\n",
            "[dependencies.sqlx]\nversion = \"0.8\"\n",
        ] {
            let manifest = crate_with(deps).unwrap();
            assert_eq!(
                layout_in(Some((manifest.0, &manifest.1))),
                Layout::Sqlx,
                "{deps}"
            );
        }
        let other = crate_with("[dependencies]\nsqlx-core-ish = \"1\"\ntokio-postgres = \"0.7\"\n")
            .unwrap();
        assert_eq!(layout_in(Some((other.0, &other.1))), Layout::GolangMigrate);
        assert_eq!(
            layout_in(Some(("go.mod", "module example.com/teapot\n"))),
            Layout::GolangMigrate
        );
        assert_eq!(layout_in(None), Layout::GolangMigrate);
    }

    /// A Go module's folder of `.up.sql` files whose numeric prefixes
    /// repeat (and an `x_up.sql` the tool's regexp takes): maragudk/migrate's
    /// where go.mod requires it, also beside golang-migrate (which refuses a
    /// repeated version); without the go.mod, the refusal names it.
    #[test]
    fn a_go_module_requiring_maragudk_migrate_reads_its_folder_its_way() {
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir(project.path().join(".git")).unwrap();
        let dir = project.path().join("db/migrations");
        std::fs::create_dir_all(&dir).unwrap();
        for (f, sql) in [
            ("0001_kettles.up.sql", "CREATE TABLE kettles (id int);"),
            ("0001_kettles.down.sql", "DROP TABLE kettles;"),
            ("0001_lids.up.sql", "CREATE TABLE lids (id int);"),
            ("0002_spouts_up.sql", "CREATE TABLE spouts (id int);"),
            ("0002_spouts_down.sql", "DROP TABLE spouts;"),
            ("notes.sql", "-- not a migration"),
        ] {
            std::fs::write(dir.join(f), sql).unwrap();
        }
        let without = Catalog::from_dir(&dir).unwrap_err().to_string();
        assert!(
            without.contains("pass --layout maragudk-migrate"),
            "{without}"
        );
        let go_mod = |requires: &str| {
            std::fs::write(
                project.path().join("go.mod"),
                format!("module example.com/teapot\n\ngo 1.22\n\nrequire (\n{requires})\n"),
            )
            .unwrap();
            Catalog::from_dir(&dir)
        };
        for requires in [
            "\tgithub.com/maragudk/migrate v0.4.3\n",
            "\tgithub.com/golang-migrate/migrate/v4 v4.17.1\n\tgithub.com/maragudk/migrate v0.4.3\n",
        ] {
            let c = go_mod(requires).unwrap();
            assert_eq!(c.layout, Layout::MaragudkMigrate, "{requires}");
            let read: Vec<(&str, &str)> = c
                .migrations()
                .iter()
                .map(|m| (m.key.as_str(), m.file.as_str()))
                .collect();
            assert_eq!(
                read,
                [
                    ("0001_kettles", "0001_kettles.up.sql"),
                    ("0001_lids", "0001_lids.up.sql"),
                    ("0002_spouts", "0002_spouts_up.sql"),
                ]
            );
        }
        // Indirect: some dependency's tool, not the project's.
        let indirect = go_mod("\tgithub.com/maragudk/migrate v0.4.3 // indirect\n");
        assert!(indirect.is_err());
        // golang-migrate's readable folder in a module requiring both:
        // either tool's, so the user says which.
        for f in [
            "0001_lids.up.sql",
            "0002_spouts_up.sql",
            "0002_spouts_down.sql",
            "notes.sql",
        ] {
            std::fs::remove_file(dir.join(f)).unwrap();
        }
        let both = go_mod(
            "\tgithub.com/golang-migrate/migrate/v4 v4.17.1\n\tgithub.com/maragudk/migrate v0.4.3\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            both.contains("requires golang-migrate and maragudk-migrate")
                && both.contains("--layout"),
            "{both}"
        );
    }

    /// maragudk/migrate reads files by name and skips a version at or
    /// below the current one: a file whose version does not grow with its
    /// name never runs, and is refused naming both files.
    #[test]
    fn a_maragudk_version_that_does_not_grow_with_its_name_is_refused() {
        let options = ReadOptions {
            layout: Some(Layout::MaragudkMigrate),
            ..Default::default()
        };
        let err = Catalog::from_files_in(
            Source::Embedded,
            &options,
            files(&[("a-b.up.sql", "SELECT 1;"), ("a.up.sql", "SELECT 2;")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("a.up.sql: maragudk/migrate never runs it")
                && err.contains("`a-b` (a-b.up.sql"),
            "{err}"
        );
    }

    fn files(list: &[(&str, &str)]) -> impl Iterator<Item = (String, Vec<u8>)> {
        list.iter()
            .map(|(f, s)| (f.to_string(), s.as_bytes().to_vec()))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn embedded_set_is_v1_to_v3_with_the_is_ready_backfill() {
        let c = Catalog::embedded().unwrap();
        let versions: Vec<i32> = c.migrations().iter().map(|m| m.version).collect();
        assert_eq!(versions, [1, 2, 3]);
        let v3 = c.get(3).unwrap();
        assert_eq!(v3.name, "attached_functions_is_ready");
        assert_eq!(
            v3.backfills().collect::<Vec<_>>(),
            [(
                &TableName::unqualified("attached_functions"),
                "is_ready = true"
            )]
        );
        assert_eq!(v3.checksum, v3.to_refinery().checksum());
        // V1 fills the functions catalogue; V2 and V3 insert nothing.
        let inserted: Vec<Vec<String>> = c
            .migrations()
            .iter()
            .map(|m| m.inserted_tables().iter().map(|t| t.to_string()).collect())
            .collect();
        assert_eq!(inserted, [vec!["functions".to_string()], vec![], vec![]]);
    }

    #[test]
    fn names_are_validated() {
        assert_eq!(
            layouts::refinery::parse_name("V12__add_x.sql"),
            Some(("12", "add_x"))
        );
        for bad in [
            "V1_x.sql",
            "v1__x.sql",
            "V__x.sql",
            "V1__.sql",
            "V1.5__x.sql",
            "V1__a-b.sql",
            "V1__x.txt",
        ] {
            assert_eq!(layouts::refinery::parse_name(bad), None, "{bad}");
        }
        let err = Catalog::from_files(Source::Embedded, files(&[("V1_x.sql", "")])).unwrap_err();
        assert!(
            err.to_string()
                .contains("V1_x.sql: not a migration file name"),
            "{err}"
        );
    }

    #[test]
    fn duplicate_versions_non_utf8_and_bad_directives_are_refused() {
        let err = Catalog::from_files(
            Source::Embedded,
            files(&[("V1__a.sql", "select 1"), ("V01__b.sql", "select 2")]),
        )
        .unwrap_err();
        assert!(
            matches!(err, CatalogError::DuplicateVersion { ref version, .. } if version == "1"),
            "{err}"
        );
        let err = Catalog::from_files(
            Source::Embedded,
            vec![("V1__a.sql".to_string(), vec![b's', 0xff, 0xfe])].into_iter(),
        )
        .unwrap_err();
        assert!(
            matches!(err, CatalogError::NotUtf8 { offset: 1, .. }),
            "{err}"
        );
        let err = Catalog::from_files(
            Source::Embedded,
            files(&[("V1__a.sql", "-- rollsafe:backfill only_a_table\nselect 1")]),
        )
        .unwrap_err();
        assert!(
            matches!(err, CatalogError::BadDirective { line: 1, .. }),
            "{err}"
        );
        let err = Catalog::from_files(
            Source::Embedded,
            files(&[(
                "V1__a.sql",
                "select 1;\n  -- rollsafe:backfil t x = 1\nselect 2",
            )]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "V1__a.sql:2: unknown directive `-- rollsafe:backfil`; rollsafe knows `-- rollsafe:backfill`, `-- rollsafe:no-transaction`, `-- rollsafe:batched-update`, `-- rollsafe:accept` (fix the spelling, or make it a plain comment by removing `rollsafe:`)"
        );
    }

    #[test]
    fn accept_directives_need_an_id_and_a_reason() {
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[(
                "V1__a.sql",
                "-- rollsafe:accept locks.blocking-index-build tags -- 200 rows -- in the window\n\
                 -- rollsafe:accept rewrite.table-rewritten -- nightly rebuild\n\
                 CREATE INDEX i ON tags (a);",
            )]),
        )
        .unwrap();
        let a: Vec<&Accept> = c.migrations()[0].accepts().collect();
        assert_eq!(
            a,
            [
                &Accept {
                    id: "locks.blocking-index-build".into(),
                    object: Some("tags".into()),
                    reason: "200 rows -- in the window".into(),
                    line: 1,
                },
                &Accept {
                    id: "rewrite.table-rewritten".into(),
                    object: None,
                    reason: "nightly rebuild".into(),
                    line: 2,
                }
            ]
        );
        for (bad, why) in [
            (
                "-- rollsafe:accept locks.blocking-index-build",
                "a reason is required",
            ),
            (
                "-- rollsafe:accept locks.blocking-index-build --  ",
                "a reason is required",
            ),
            (
                "-- rollsafe:accept -- because",
                "the finding id it accepts is missing",
            ),
            (
                "-- rollsafe:accept blocking -- because",
                "is not a finding id",
            ),
            (
                "-- rollsafe:accept locks.x a b -- because",
                "at most one table or object",
            ),
        ] {
            let err = Catalog::from_files(
                Source::Embedded,
                files(&[("V1__a.sql", &format!("select 1;\n{bad}\nselect 2;"))]),
            )
            .unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with("V1__a.sql:2: malformed directive") && text.contains(why),
                "{bad}: {text}"
            );
        }
    }

    #[test]
    fn no_transaction_and_batched_update_directives_are_read() {
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[(
                "V1__a.sql",
                "-- rollsafe:no-transaction\n\
                 -- rollsafe:batched-update items SET b = (SELECT max(x) FROM y WHERE y.id = items.a), c = 1 WHERE b IS NULL AND a > 0\n\
                 CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON items (a);",
            )]),
        )
        .unwrap();
        let m = &c.migrations()[0];
        assert!(m.no_transaction() && m.runs_outside_transaction());
        let b: Vec<&BatchedUpdate> = m.batched_updates().collect();
        assert_eq!(
            b,
            [&BatchedUpdate {
                table: TableName::unqualified("items"),
                set: "b = (SELECT max(x) FROM y WHERE y.id = items.a), c = 1".into(),
                predicate: "b IS NULL AND a > 0".into(),
                line: 2,
            }]
        );
        for bad in [
            "-- rollsafe:batched-update items SET b = 1",
            "-- rollsafe:batched-update items b = 1 WHERE b IS NULL",
            "-- rollsafe:batched-update items SET b = 1 FROM y WHERE b IS NULL",
            "-- rollsafe:no-transaction please",
        ] {
            let err =
                Catalog::from_files(Source::Embedded, files(&[("V1__a.sql", bad)])).unwrap_err();
            assert!(
                matches!(err, CatalogError::BadDirective { line: 1, .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn missing_dir_and_empty_dir_are_refused() {
        let err = Catalog::from_dir(Path::new("/nonexistent/migrations")).unwrap_err();
        assert!(matches!(err, CatalogError::MissingDir(_)));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("README.md"), "not a migration").unwrap();
        let err = Catalog::from_dir(dir.path()).unwrap_err();
        assert!(matches!(err, CatalogError::Empty { .. }), "{err}");
    }

    fn summary(c: &Catalog) -> Vec<(i32, String, String)> {
        c.migrations()
            .iter()
            .map(|m| (m.version, m.label.clone(), m.file.clone()))
            .collect()
    }

    #[test]
    fn refinery_layout_is_detected_and_keeps_its_versions() {
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[("V2__b.sql", "select 2"), ("V10__c.sql", "select 3")]),
        )
        .unwrap();
        assert_eq!(c.layout, Layout::Refinery);
        assert_eq!(
            summary(&c),
            [
                (2, "V2".into(), "V2__b.sql".into()),
                (10, "V10".into(), "V10__c.sql".into())
            ]
        );
        assert_eq!(c.resolve_version("V10"), Some(10));
        assert_eq!(c.resolve_version("2"), Some(2));
        assert_eq!(c.get(2).unwrap().to_string(), "V2 (V2__b.sql)");
    }

    #[test]
    fn sqlx_layout_orders_timestamps_as_ordinals_and_keeps_their_labels() {
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[
                ("20240301090000_add-books_index.sql", "select 2"),
                ("20240101120000_create_books.sql", "select 1"),
            ]),
        )
        .unwrap();
        assert_eq!(c.layout, Layout::Sqlx);
        assert_eq!(
            summary(&c),
            [
                (
                    1,
                    "20240101120000".into(),
                    "20240101120000_create_books.sql".into()
                ),
                (
                    2,
                    "20240301090000".into(),
                    "20240301090000_add-books_index.sql".into()
                )
            ]
        );
        assert_eq!(c.resolve_version("20240301090000"), Some(2));
        assert_eq!(
            c.resolve_version("2"),
            None,
            "an ordinal is not a sqlx version"
        );
        assert_eq!(c.label_of(1), "20240101120000");
        let m = c.get(2).unwrap();
        assert_eq!(m.refinery_name(), "V2__add_books_index");
        assert_eq!(m.checksum, m.to_refinery().checksum());
    }

    #[test]
    fn golang_migrate_layout_reads_up_files_and_ignores_down_files() {
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[
                ("000001_create_books.up.sql", "create table b (id int)"),
                ("000001_create_books.down.sql", "drop table b"),
                ("000002_add_title.up.sql", "alter table b add t text"),
                ("000002_add_title.down.sql", "alter table b drop t"),
            ]),
        )
        .unwrap();
        assert_eq!(c.layout, Layout::GolangMigrate);
        assert_eq!(
            summary(&c),
            [
                (1, "1".into(), "000001_create_books.up.sql".into()),
                (2, "2".into(), "000002_add_title.up.sql".into())
            ]
        );
        assert_eq!(c.get(2).unwrap().sql, "alter table b add t text");
        assert_eq!(c.resolve_version("000002"), Some(2));
    }

    #[test]
    fn a_directory_mixing_layouts_is_refused_with_the_file_names() {
        let err = Catalog::from_files(
            Source::Dir(PathBuf::from("theirs/migrations")),
            files(&[
                ("V1__a.sql", "select 1"),
                ("2_b.sql", "select 2"),
                ("3_c.up.sql", "select 3"),
            ]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "theirs/migrations mixes migration layouts (V1__a.sql is refinery, 2_b.sql is sqlx, 3_c.up.sql is golang-migrate); keep one layout per directory, rename the odd files or move them out"
        );
    }

    #[test]
    fn a_given_layout_refuses_files_of_another() {
        let err = Catalog::from_files_in(
            Source::Embedded,
            &ReadOptions {
                layout: Some(Layout::Refinery),
                ..Default::default()
            },
            files(&[("V1__a.sql", "select 1"), ("2_b.sql", "select 2")]),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with(
                "2_b.sql: not a refinery migration file name; expected V<version>__<name>.sql"
            ),
            "{err}"
        );
        // Up/down pairs are sqlx's reversible form too.
        let c = Catalog::from_files_in(
            Source::Embedded,
            &ReadOptions {
                layout: Some(Layout::Sqlx),
                ..Default::default()
            },
            files(&[("1_a.up.sql", "select 1"), ("1_a.down.sql", "select 0")]),
        )
        .unwrap();
        assert_eq!((c.layout, c.migrations().len()), (Layout::Sqlx, 1));
        assert_eq!(
            "golang-migrate".parse::<Layout>(),
            Ok(Layout::GolangMigrate)
        );
        assert!("knex"
            .parse::<Layout>()
            .unwrap_err()
            .contains("use one of refinery, sqlx, golang-migrate, diesel"));
        let err = Catalog::from_files(
            Source::Embedded,
            files(&[("1_a.sql", "select 1"), ("01_b.sql", "select 2")]),
        )
        .unwrap_err();
        assert!(
            matches!(err, CatalogError::DuplicateVersion { ref version, .. } if version == "1"),
            "{err}"
        );
    }

    /// `--since`, `--at`, `--target` and `-- needs:` take a migration as
    /// the user sees it in the folder: the label, the version, the file,
    /// its stem, its folder (also as a path), for every layout; a file
    /// cut into dbmate sections is named by its last.
    #[test]
    fn a_migration_is_named_by_its_label_version_file_stem_or_folder() {
        type Case<'a> = (Layout, &'a [(&'a str, &'a str)], &'a [&'a str]);
        let cases: &[Case] = &[
            (
                Layout::Refinery,
                &[("V1__a.sql", "select 1"), ("V24__add_oars.sql", "select 2")],
                &[
                    "V24",
                    "24",
                    "V24__add_oars.sql",
                    "V24__add_oars",
                    "db/V24__add_oars.sql",
                ],
            ),
            (
                Layout::Sqlx,
                &[
                    ("20240101120000_a.sql", "select 1"),
                    ("20240301090000_oars.sql", "select 2"),
                ],
                &[
                    "20240301090000",
                    "20240301090000_oars.sql",
                    "20240301090000_oars",
                ],
            ),
            (
                Layout::GolangMigrate,
                &[
                    ("000114_a.up.sql", "select 1"),
                    ("000115_oars.up.sql", "select 2"),
                    ("000115_oars.down.sql", "select 0"),
                ],
                &[
                    "115",
                    "000115",
                    "000115_oars",
                    "000115_oars.up.sql",
                    "000115_oars.up",
                ],
            ),
            (
                Layout::Goose,
                &[
                    ("00001_a.sql", "-- +goose Up\nselect 1;"),
                    ("00002_oars.sql", "-- +goose Up\nselect 2;"),
                ],
                &["2", "00002", "00002_oars", "00002_oars.sql"],
            ),
            (
                Layout::Dbmate,
                &[
                    ("20250101000000_a.sql", "-- migrate:up\nselect 1;"),
                    (
                        "20250123210944_oars.sql",
                        "-- migrate:up\nselect 2;\n-- migrate:down\n",
                    ),
                ],
                &[
                    "20250123210944",
                    "20250123210944_oars",
                    "20250123210944_oars.sql",
                ],
            ),
            (
                Layout::Flyway,
                &[
                    ("V1__a.sql", "select 1"),
                    ("V1.1__add_oars.sql", "select 2"),
                ],
                &["V1.1", "1.1", "V1.1__add_oars", "V1.1__add_oars.sql"],
            ),
            (
                Layout::Diesel,
                &[
                    ("2024-01-01-000000_a/up.sql", "select 1"),
                    ("2024-10-25-112826_oars/up.sql", "select 2"),
                ],
                &[
                    "2024-10-25-112826_oars",
                    "20241025112826",
                    "2024-10-25-112826_oars/up.sql",
                    "migrations/2024-10-25-112826_oars/",
                ],
            ),
            (
                Layout::Prisma,
                &[
                    ("20240101000000_a/migration.sql", "select 1"),
                    ("20240301000000_oars/migration.sql", "select 2"),
                ],
                &["20240301000000_oars", "20240301000000_oars/migration.sql"],
            ),
        ];
        for (layout, list, spellings) in cases {
            let c = Catalog::from_files_in(
                Source::Embedded,
                &ReadOptions {
                    layout: Some(*layout),
                    ..Default::default()
                },
                files(list),
            )
            .unwrap();
            let newest = c.latest();
            for spelling in *spellings {
                assert_eq!(
                    c.resolve_label(spelling),
                    Ok(newest),
                    "{layout}: {spelling}"
                );
            }
            // The fixed name of a folder's file names no one migration.
            for nothing in ["up", "up.sql", "migration", "migration.sql", "sql"] {
                assert!(c.resolve_label(nothing).is_err(), "{layout}: {nothing}");
            }
        }
    }

    /// A Liquibase changeset is also named as its file writes it,
    /// `author:id` (quoted or not), and by its bare id when no other
    /// changeset has it; an id of several is refused naming each one's
    /// spelling.
    #[test]
    fn a_liquibase_changeset_is_named_as_written_or_by_a_lone_id() {
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[
                (
                    "wheels.sql",
                    "--liquibase formatted sql\n--changeset ana:wheels-1\nSELECT 1;\n--changeset \"bo\":truing\nSELECT 2;\n--changeset ana:release:2\nSELECT 3;\n",
                ),
                (
                    "spokes.sql",
                    "--liquibase formatted sql\n--changeset cy:truing\nSELECT 4;\n--changeset ana:gauge\nSELECT 5;\n--changeset ana:gauge-check\nSELECT 6;\n",
                ),
                (
                    "tubes.sql",
                    "--liquibase formatted sql\n--changeset ana:gauge-check\nSELECT 7;\n",
                ),
            ]),
        )
        .unwrap();
        assert_eq!(c.layout, Layout::Liquibase);
        let version_of = |key: &str| {
            c.migrations()
                .iter()
                .find(|m| m.key == key)
                .unwrap()
                .version
        };
        for (spelling, key) in [
            ("ana:wheels-1", "wheels.sql::wheels-1::ana"),
            ("wheels-1", "wheels.sql::wheels-1::ana"),
            ("bo:truing", "wheels.sql::truing::bo"),
            ("\"bo\":truing", "wheels.sql::truing::bo"),
            ("cy:truing", "spokes.sql::truing::cy"),
            ("ana:release:2", "wheels.sql::release:2::ana"),
            ("release:2", "wheels.sql::release:2::ana"),
            ("gauge", "spokes.sql::gauge::ana"),
            ("spokes.sql::gauge::ana", "spokes.sql::gauge::ana"),
        ] {
            assert_eq!(c.resolve_label(spelling), Ok(version_of(key)), "{spelling}");
            assert_eq!(
                c.resolve_version(spelling),
                Some(version_of(key)),
                "{spelling}"
            );
        }
        assert_eq!(
            c.resolve_label("truing"),
            Err("`truing` is the id of 2 changesets; pass the one you mean as cy:truing or bo:truing".into())
        );
        assert_eq!(c.resolve_version("truing"), None);
        assert_eq!(
            c.resolve_label("ana:gauge-check"),
            Err("`ana:gauge-check` is written in 2 files; pass the one you mean by its label: spokes.sql::gauge-check::ana, tubes.sql::gauge-check::ana".into())
        );
        assert_eq!(
            c.resolve_label("gauge-check"),
            Err("`gauge-check` is the id of 2 changesets; pass the one you mean as spokes.sql::gauge-check::ana or tubes.sql::gauge-check::ana".into())
        );
        assert!(c
            .resolve_label("ana:nothing")
            .unwrap_err()
            .ends_with("or a changeset as its file writes it (author:id)"));
    }

    /// A goose folder of Go migrations only is goose's: each listed in its
    /// place, not runnable, and the header says nothing of them runs. A Go
    /// file that registers no goose migration claims no folder.
    #[test]
    fn a_goose_folder_of_go_migrations_only_is_gooses() {
        let go = |table: &str| {
            format!("package migrations\n\nimport (\n\t\"context\"\n\t\"database/sql\"\n\n\t\"github.com/pressly/goose/v3\"\n)\n\nfunc init() {{\n\tgoose.AddMigrationContext(up, down)\n}}\n\nfunc up(ctx context.Context, tx *sql.Tx) error {{\n\t_, err := tx.ExecContext(ctx, `CREATE TABLE {table} (id bigint)`)\n\treturn err\n}}\n")
        };
        let (pumps, valves) = (go("pumps"), go("valves"));
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[
                ("00001_create_pumps.go", &pumps),
                ("00002_create_valves.go", &valves),
                ("00002_create_valves_test.go", "package migrations\n"),
            ]),
        )
        .unwrap();
        assert_eq!(c.layout, Layout::Goose);
        let listed: Vec<(&str, bool)> = c
            .migrations()
            .iter()
            .map(|m| (m.file.as_str(), m.not_runnable.is_some()))
            .collect();
        assert_eq!(
            listed,
            [
                ("00001_create_pumps.go", true),
                ("00002_create_valves.go", true)
            ]
        );
        assert_eq!(
            c.none_runnable().unwrap(),
            "rollsafe can run none of these migrations (each is a goose Go migration: its code runs inside the project's own goose binary, and rollsafe runs SQL only), so this run rehearses and checks nothing of them"
        );
        // Go code of another tool's folder is not goose's.
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[
                ("00001_pumps.sql", "CREATE TABLE pumps (id bigint);"),
                ("00002_embed.go", "package migrations\n\nimport \"embed\"\n"),
            ]),
        )
        .unwrap();
        assert_eq!((c.layout, c.migrations().len()), (Layout::Sqlx, 1));
        assert_eq!(c.none_runnable(), None);
    }

    #[test]
    fn label_ranges_fold_neighbours() {
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[
                ("V1__a.sql", "select 1"),
                ("V2__b.sql", "select 1"),
                ("V3__c.sql", "select 1"),
                ("V5__d.sql", "select 1"),
                ("V7__e.sql", "select 1"),
            ]),
        )
        .unwrap();
        // Every migration from V1 to V7 (there is no V4 or V6).
        assert_eq!(c.label_ranges(&[1, 2, 3, 5, 7]), "V1..V7");
        assert_eq!(c.label_ranges(&[1, 2, 5]), "V1..V2, V5");
        assert_eq!(c.label_ranges(&[1, 3, 7]), "V1, V3, V7");
        assert_eq!(c.label_ranges(&[]), "");
    }
}

//! What the apps' readers saw and what the migration's backfill promises
//! counted, on the seeded database before and right after the migration.
//! Measured by the seeded stage; judged by `backfill`.

use std::collections::{BTreeMap, BTreeSet};

/// A `-- rollsafe:backfill <table> <predicate>` promise and what counting
/// it found on the seeded database right after the migration (so every
/// row there existed before it): the rows, or why it could not be
/// evaluated.
pub type DirectiveCount = (
    String,
    String,
    Result<crate::validity::BackfillCount, String>,
);

/// What the apps' readers returned, before or right after a migration.
#[derive(Debug, Clone, Default)]
pub struct Visible {
    /// Tables with row-level security enabled when the readers read
    /// (qualified names): an app role without a policy sees none of their
    /// rows.
    pub row_security: Vec<String>,
    /// The read statements of every app (a driver's app included: its
    /// readers are its statement set's), each with its bindings and rows.
    pub statements: Vec<StatementReader>,
}

/// A row as the database returned it: column → value in text form (None:
/// NULL).
pub type Row = BTreeMap<String, Option<String>>;

/// How a statement reader's parameters got their values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BoundBy {
    /// It has no parameters.
    #[default]
    Nothing,
    /// Distinct values of the columns its predicates compare them to.
    Keys,
    /// Its `-- sample:` line.
    Sample,
    /// Its `-- param:` lines (one binding).
    Params,
}

/// One read statement of an app, run on the seeded
/// database with sampled bindings: before the migration (bindings sampled
/// there), or after it with the bindings of the reader it is compared
/// with ([`StatementReader::reference`]).
#[derive(Debug, Clone)]
pub struct StatementReader {
    pub app: String,
    pub statement: String,
    /// The table it reads, as it names it ("" when not inferred).
    pub table: String,
    /// The column each parameter is compared to, in parameter order
    /// (empty when not every parameter is).
    pub keys: Vec<String>,
    /// Its `WHERE`'s conjuncts: (text, columns named).
    pub filters: Vec<(String, Vec<String>)>,
    /// The columns that identify a returned row (the table's primary key,
    /// when the statement returns it); empty: the whole row.
    pub identity: Vec<String>,
    pub bound_by: BoundBy,
    /// Whether it cuts its result (`LIMIT`, `OFFSET`, `FETCH`): the rows
    /// it leaves out are not told apart from rows its filters exclude.
    pub limited: bool,
    /// After the migration: the (app, statement) whose bindings it ran
    /// with.
    pub reference: Option<(String, String)>,
    /// What it returned, per binding; Err: why it was not compared.
    pub rows: Result<BoundRows, NotCompared>,
}

/// A reader's bindings and what it returned for each (row identities).
#[derive(Debug, Clone, Default)]
pub struct BoundRows {
    pub bindings: Vec<Vec<Option<String>>>,
    pub seen: Vec<BTreeSet<String>>,
    /// The columns its table had when it ran (before the migration: the
    /// ones that existed then).
    pub table_columns: Vec<String>,
    /// The reader's result columns.
    pub columns: Vec<String>,
    /// After the migration, when rows are identified whole and this
    /// reader returns other columns than the reference: the reference's
    /// rows cut to the columns both return (what is compared instead of
    /// the reference's `seen`).
    pub reference_seen: Option<Vec<BTreeSet<String>>>,
    /// After the migration: one row the reference returned that this
    /// reader does not, as the table holds it now (its identity, the row).
    pub example_missing: Option<(String, Row)>,
}

/// Why a reader was not compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCompared {
    /// No values for its parameters: why, in words.
    CannotBind(String),
    /// Its table holds no rows to sample.
    NoRows,
    /// It (or its sample) failed: the server's message.
    Failed(String),
}

/// A row the older app wrote on the schema after a migration while the
/// newer apps run (one of the rows a write touched), and whether each
/// app's readers that can be pointed at it return it.
#[derive(Debug, Clone)]
pub struct RolloutWrite {
    pub older: String,
    /// What wrote it: a write statement of the older app, or its driver.
    pub writer: Writer,
    pub table: String,
    /// The row as the table holds it after the write, with its identity
    /// (`id=17`); Err: why the write or its reading failed.
    pub written: Result<(String, Row), String>,
    /// What each reader of the table bound to the row returned.
    pub reads: Vec<RowRead>,
    /// Newer apps none of whose readers could be bound to the row: (app,
    /// why).
    pub unbound: Vec<(String, String)>,
}

/// What wrote a rollout row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writer {
    /// A write statement of the app's set (INSERT, upsert or UPDATE), run
    /// with its `-- param:` values.
    Statement(String),
    /// The app's driver: a create as the app's own code makes it.
    Driver,
}

impl Writer {
    /// How a message names it: "`sell`", "its driver's create".
    pub fn phrase(&self) -> String {
        match self {
            Writer::Statement(name) => format!("`{name}`"),
            Writer::Driver => "its driver's create".to_string(),
        }
    }

    /// How the evidence names it: the statement, or `driver:create`.
    pub fn evidence(&self) -> String {
        match self {
            Writer::Statement(name) => name.clone(),
            Writer::Driver => "driver:create".to_string(),
        }
    }
}

/// One reader run on a written row.
#[derive(Debug, Clone)]
pub struct RowRead {
    pub app: String,
    pub statement: String,
    /// The columns its parameters were bound from (the row's values).
    pub keys: Vec<String>,
    pub filters: Vec<(String, Vec<String>)>,
    /// Whether it returned the row; Err: the server's message.
    pub returned: Result<bool, String>,
}

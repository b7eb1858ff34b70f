//! Seeding any schema: rows generated from the catalogue of the connected
//! database, for projects that ship no seed file of their own.
//!
//! What it does, per table of every schema ([`crate::tables`]: rollsafe's
//! and refinery's own tables left out; a partitioned table through its
//! parent, so each row lands in its partition), in foreign-key order:
//!
//! - one set-based `INSERT … SELECT … FROM generate_series(1, N) AS s(g)`,
//!   so a million rows cost one statement, not a million round trips. Every
//!   generated value is a function of the row's index `i = g + offset`
//!   (the offset clears the rows already there), which makes values
//!   reproducible, injective where a UNIQUE key needs them to be, and
//!   computable for a parent row too (a self-referencing key);
//! - foreign keys point at rows that exist: the referenced table's key rows
//!   are numbered (`row_number() OVER (ORDER BY key)`) and row `g` takes
//!   number `(g - 1) % n`. A UNIQUE key made only of foreign-key columns
//!   (a junction table's primary key) walks the combinations instead, and
//!   the table gets at most as many rows as there are combinations;
//! - values are chosen per column from a few *families* of its type
//!   (`i`, `0`, `1`, `-i`, `'name_' || i`, the literals its CHECKs
//!   mention, …): the first one that the type (domain CHECKs, varchar
//!   lengths, numeric precision) accepts on a sample of indexes, then, for
//!   the table's CHECK constraints, other combinations until every CHECK
//!   holds on the sample. When none does, the table is not seeded and the
//!   result names the constraint;
//! - columns with defaults are left to them (serial, identity, `now()`),
//!   except where a UNIQUE or foreign key needs a value rollsafe computes;
//!   a sequence behind a column rollsafe filled is moved past the rows.
//!
//! Then the write statements of each app version run a few times with
//! generated parameters (`-- param:` expressions where declared, as the
//! replay evaluates them), so rows also look like the app's own.
//!
//! Every table is its own transaction: a table that fails leaves nothing
//! behind and is reported, the others are seeded. What it is not: a
//! faithful data distribution. Values are plausible and valid, not
//! production-like.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use postgres::Client;
use thiserror::Error;

use super::replay;
use crate::app::AppVersion;
use crate::pg::catalogue::{self, ConstraintKind, Relation};
use crate::pg::quote_ident;
use crate::tables::UserTable;

/// How many times each app write statement runs after the bulk rows.
const APP_WRITE_RUNS: usize = 3;
/// Indexes tried per candidate: the first few, and the last two (the
/// widest values: digits, overflow).
const SAMPLE_HEAD: u64 = 12;
/// Combinations tried for one CHECK constraint before giving up on it.
const MAX_COMBINATIONS: usize = 400;
/// Families kept per column (the search cost grows with their product).
const MAX_FAMILIES: usize = 14;
/// Stand-in for the row index in a value template (a byte no SQL text of
/// ours contains), replaced by the index expression when rendered.
const I: &str = "\u{1}i\u{1}";

/// Rows per table: a default and per-table overrides (`--rows N`,
/// `--rows TABLE=N`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowCounts {
    pub default: u64,
    pub per_table: BTreeMap<String, u64>,
    /// Only tables that hold no rows yet get any (rows written before, by
    /// the apps' own seeds, are left as they are).
    pub only_empty: bool,
}

impl Default for RowCounts {
    fn default() -> Self {
        RowCounts::new(super::DEFAULT_ROWS)
    }
}

/// A `--rows` value that is neither a count nor `TABLE=COUNT`.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("`--rows {0}` is not a row count; give a number (`--rows 10000`) or a table and a number (`--rows orders=500000`)")]
pub struct RowCountsError(pub String);

impl RowCounts {
    pub fn new(default: u64) -> RowCounts {
        RowCounts {
            default,
            per_table: BTreeMap::new(),
            only_empty: false,
        }
    }

    /// The same counts for the tables that hold no rows yet; the others
    /// get none.
    pub fn only_empty(mut self) -> RowCounts {
        self.only_empty = true;
        self
    }

    /// The same counts with `table` set to `rows`.
    pub fn with(mut self, table: &str, rows: u64) -> RowCounts {
        self.per_table.insert(table.to_string(), rows);
        self
    }

    /// Applies one `--rows` argument: `N` sets the default, `TABLE=N` one
    /// table.
    pub fn apply(&mut self, arg: &str) -> Result<(), RowCountsError> {
        let bad = || RowCountsError(arg.to_string());
        let count = |s: &str| s.trim().replace('_', "").parse::<u64>().map_err(|_| bad());
        match arg.split_once('=') {
            None => self.default = count(arg)?,
            Some((table, n)) if !table.trim().is_empty() => {
                self.per_table.insert(table.trim().to_string(), count(n)?);
            }
            Some(_) => return Err(bad()),
        }
        Ok(())
    }

    /// Rows to write into `table`.
    pub fn for_table(&self, table: &str) -> u64 {
        self.per_table.get(table).copied().unwrap_or(self.default)
    }
}

/// What a generation wrote, for evidence and for the checks that need rows.
#[derive(Debug, Clone, Default)]
pub struct Generated {
    /// Tables that got their rows, in the order they were seeded.
    pub seeded: Vec<SeededTable>,
    /// Tables that could not be seeded (nothing was written to them).
    pub unseeded: Vec<UnseededTable>,
    /// Things that did not stop seeding but that a reader should know (a
    /// foreign-key cycle no nullable column breaks).
    pub warnings: Vec<String>,
    /// The app write statements run on top of the bulk rows.
    pub app_writes: Vec<AppWrites>,
}

impl Generated {
    /// Rows written into `table`, None when it was not seeded.
    pub fn written(&self, table: &str) -> Option<u64> {
        self.seeded
            .iter()
            .find(|t| t.table == table)
            .map(|t| t.written)
    }

    /// Adds what a later generation on the same database did.
    pub fn absorb(&mut self, later: Generated) {
        self.seeded.extend(later.seeded);
        self.unseeded.extend(later.unseeded);
        self.warnings.extend(later.warnings);
        self.app_writes.extend(later.app_writes);
    }

    /// Why `table` was not seeded, if it was not.
    pub fn unseeded(&self, table: &str) -> Option<&UnseededTable> {
        self.unseeded.iter().find(|t| t.table == table)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeededTable {
    pub table: String,
    pub requested: u64,
    pub written: u64,
    /// Why fewer rows than requested were written, if so.
    pub note: Option<String>,
    /// How long its INSERT took (the search for values excluded).
    pub took: std::time::Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnseededTable {
    pub table: String,
    /// The constraint that could not be satisfied, when one is to blame.
    pub constraint: Option<String>,
    /// One line: what stood in the way.
    pub reason: String,
}

/// One app write statement run with generated parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppWrites {
    pub app: String,
    pub statement: String,
    pub runs: usize,
    pub succeeded: usize,
    /// The server's message of each failed run (not fatal: the schema may
    /// no longer fit the app, which the compat check judges).
    pub failures: Vec<String>,
}

/// Seeds every table ([`crate::tables`]) with generated rows (`rows`), then
/// runs the write statements of `apps` a few times. Only a lost connection
/// or an unreadable catalogue is an error; a table that cannot be seeded
/// is reported in [`Generated::unseeded`].
pub fn seed(c: &mut Client, rows: &RowCounts, apps: &[&AppVersion]) -> anyhow::Result<Generated> {
    let mut out = Generated::default();
    let mut types = TypeCache::default();
    let tables = read_tables(c, &mut types)?;
    let index: HashMap<u32, usize> = tables.iter().enumerate().map(|(k, t)| (t.oid, k)).collect();
    let mut edges = Vec::new();
    for (k, t) in tables.iter().enumerate() {
        for fk in &t.fks {
            if let Some(&parent) = index.get(&fk.ref_table) {
                if parent != k {
                    edges.push(Edge {
                        child: k,
                        parent,
                        constraint: fk.name.clone(),
                        breakable: fk.breakable(t),
                    });
                }
            }
        }
    }
    let names: Vec<String> = tables.iter().map(|t| t.name.clone()).collect();
    let order = seeding_order(&names, &edges);
    out.warnings.extend(order.warnings);
    let broken: BTreeSet<(usize, String)> = order
        .broken
        .iter()
        .map(|&e| (edges[e].child, edges[e].constraint.clone()))
        .collect();
    let parents: HashMap<u32, &Table> = tables.iter().map(|t| (t.oid, t)).collect();
    // The transaction that wrote each table's rows, to find them again.
    let mut writers: HashMap<usize, String> = HashMap::new();
    for k in order.tables {
        let t = &tables[k];
        let requested = rows.for_table(&t.name);
        let is_broken = |fk: &ForeignKey| broken.contains(&(k, fk.name.clone()));
        let result = match seed_table(c, t, &parents, &is_broken, requested, rows.only_empty) {
            Ok(r) => r,
            // A query the server refused (permissions, a value out of
            // range) is this table's problem; a lost connection is not.
            Err(e) => match e
                .downcast_ref::<postgres::Error>()
                .and_then(|pg| pg.as_db_error())
            {
                Some(db) => Err(UnseededTable {
                    table: t.name.clone(),
                    constraint: db.constraint().map(str::to_string),
                    reason: db.message().to_string(),
                }),
                None => return Err(e),
            },
        };
        match result {
            Ok((s, xid)) => {
                if let Some(xid) = xid {
                    writers.insert(k, xid);
                }
                out.seeded.push(s)
            }
            Err(u) => out.unseeded.push(u),
        }
    }
    // A key set aside to break a cycle now points at the rows its parent
    // got since.
    for &e in &order.broken {
        let edge = &edges[e];
        let child = &tables[edge.child];
        let (Some(xid), Some(fk)) = (
            writers.get(&edge.child),
            child.fks.iter().find(|f| f.name == edge.constraint),
        ) else {
            continue;
        };
        if edge.breakable {
            if let Err(message) = fill_broken_reference(c, child, fk, &tables[edge.parent], xid)? {
                out.warnings.push(format!(
                    "{}: foreign key {} was left NULL to break a cycle and could not be filled in afterwards: {message}",
                    child.name, fk.name
                ));
            }
        }
    }
    for app in apps {
        out.app_writes.extend(run_app_writes(c, app, &mut types)?);
    }
    // A materialized view holds what its query returned when refreshed:
    // refreshed over the rows just written, a migration that refreshes or
    // rebuilds it is measured over rows too.
    for mv in crate::tables::list(c)?
        .iter()
        .filter(|t| t.kind == crate::tables::Kind::MaterializedView && t.populated)
    {
        if let Err(e) = c.batch_execute(&format!("REFRESH MATERIALIZED VIEW {}", mv.qualified)) {
            match e.as_db_error() {
                Some(_) => out.warnings.push(format!(
                    "materialized view {} could not be refreshed over the seeded rows: {}",
                    mv.name,
                    crate::errors::one_line(&e)
                )),
                None => return Err(e.into()),
            }
        }
    }
    c.batch_execute("ANALYZE")?;
    Ok(out)
}

// ---------------------------------------------------------------------
// The catalogue

#[derive(Debug, Clone)]
struct Table {
    oid: u32,
    /// As messages spell it ([`crate::tables`]).
    name: String,
    /// Schema-qualified, for SQL.
    qualified: String,
    columns: Vec<Column>,
    /// Column numbers of each UNIQUE / PRIMARY KEY constraint or unique
    /// index (with the columns an expression index mentions).
    uniques: Vec<Vec<i16>>,
    fks: Vec<ForeignKey>,
    checks: Vec<Check>,
}

impl Table {
    fn column(&self, num: i16) -> Option<usize> {
        self.columns.iter().position(|c| c.num == num)
    }
}

#[derive(Debug, Clone)]
struct Column {
    num: i16,
    name: String,
    ty: TypeInfo,
    typmod: i32,
    /// `format_type` of the column: the cast every value gets.
    sql_type: String,
    not_null: bool,
    default: Option<String>,
    identity: bool,
    generated: bool,
}

impl Column {
    fn not_null(&self) -> bool {
        self.not_null || self.ty.not_null()
    }

    /// A default that yields a new value per row (a UNIQUE key holding
    /// such a column needs nothing from us).
    fn default_is_unique(&self) -> bool {
        self.identity
            || self.default.as_deref().is_some_and(|d| {
                d.contains("nextval(")
                    || d.contains("gen_random_uuid(")
                    || d.contains("uuid_generate_v")
            })
    }
}

#[derive(Debug, Clone)]
struct ForeignKey {
    name: String,
    cols: Vec<i16>,
    ref_table: u32,
    ref_cols: Vec<i16>,
    match_full: bool,
}

impl ForeignKey {
    /// Whether NULLs can satisfy it (MATCH SIMPLE: one NULL column is
    /// enough; MATCH FULL: all of them).
    fn breakable(&self, t: &Table) -> bool {
        let nullable = |n: &i16| {
            t.column(*n)
                .map(|k| !t.columns[k].not_null())
                .unwrap_or(false)
        };
        if self.match_full {
            self.cols.iter().all(nullable)
        } else {
            self.cols.iter().any(nullable)
        }
    }
}

#[derive(Debug, Clone)]
struct Check {
    name: String,
    expr: String,
    cols: Vec<i16>,
}

#[derive(Debug, Clone)]
struct TypeInfo {
    kind: TypeKind,
    /// `format_type(oid, NULL)`.
    sql: String,
}

#[derive(Debug, Clone)]
enum TypeKind {
    /// Byte width.
    Int(u8),
    Numeric,
    Float,
    /// text, varchar, char, name.
    Text,
    Bool,
    Uuid,
    Timestamp,
    Date,
    Time,
    Interval,
    Json,
    Bytea,
    Inet,
    Money,
    Enum(Vec<String>),
    Domain {
        base: Box<TypeInfo>,
        base_typmod: i32,
        not_null: bool,
        checks: Vec<String>,
    },
    Array(Box<TypeInfo>),
    /// A range type, of its subtype.
    Range(Box<TypeInfo>),
    Other,
}

impl TypeInfo {
    fn not_null(&self) -> bool {
        match &self.kind {
            TypeKind::Domain { not_null, base, .. } => *not_null || base.not_null(),
            _ => false,
        }
    }
}

#[derive(Default)]
struct TypeCache(HashMap<u32, TypeInfo>);

impl TypeCache {
    fn get(&mut self, c: &mut Client, oid: u32) -> Result<TypeInfo, postgres::Error> {
        self.get_depth(c, oid, 0)
    }

    fn get_depth(
        &mut self,
        c: &mut Client,
        oid: u32,
        depth: u32,
    ) -> Result<TypeInfo, postgres::Error> {
        if let Some(t) = self.0.get(&oid) {
            return Ok(t.clone());
        }
        let Some(row) = c.query_opt(
            "SELECT t.typtype::text, t.typcategory::text, t.typelem, t.typbasetype, t.typtypmod,
                    t.typnotnull, format_type(t.oid, NULL), t.typname::text,
                    ARRAY(SELECT e.enumlabel::text FROM pg_enum e
                           WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder),
                    ARRAY(SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k
                           WHERE k.contypid = t.oid AND k.contype = 'c' ORDER BY k.conname),
                    (SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid)
               FROM pg_type t WHERE t.oid = $1",
            &[&oid],
        )?
        else {
            return Ok(TypeInfo {
                kind: TypeKind::Other,
                sql: "text".into(),
            });
        };
        let typtype: String = row.get(0);
        let category: String = row.get(1);
        let elem: u32 = row.get(2);
        let base: u32 = row.get(3);
        let base_typmod: i32 = row.get(4);
        let not_null: bool = row.get(5);
        let sql: String = row.get(6);
        let name: String = row.get(7);
        // Nested domains and arrays are shallow in practice; the bound
        // keeps a pathological catalogue from recursing forever.
        let deeper = depth < 8;
        let kind = match (typtype.as_str(), category.as_str()) {
            ("d", _) if deeper => TypeKind::Domain {
                base: Box::new(self.get_depth(c, base, depth + 1)?),
                base_typmod,
                not_null,
                checks: row.get(9),
            },
            ("e", _) => TypeKind::Enum(row.get(8)),
            ("r", _) if deeper => match row.get::<_, Option<u32>>(10) {
                Some(sub) => TypeKind::Range(Box::new(self.get_depth(c, sub, depth + 1)?)),
                None => TypeKind::Other,
            },
            (_, "A") if elem != 0 && deeper => {
                TypeKind::Array(Box::new(self.get_depth(c, elem, depth + 1)?))
            }
            _ => base_kind(&name),
        };
        let info = TypeInfo { kind, sql };
        self.0.insert(oid, info.clone());
        Ok(info)
    }
}

fn base_kind(typname: &str) -> TypeKind {
    match typname {
        "int2" => TypeKind::Int(2),
        "int4" => TypeKind::Int(4),
        "int8" => TypeKind::Int(8),
        "numeric" => TypeKind::Numeric,
        "float4" | "float8" => TypeKind::Float,
        "text" | "varchar" | "bpchar" | "name" | "citext" => TypeKind::Text,
        "bool" => TypeKind::Bool,
        "uuid" => TypeKind::Uuid,
        "timestamp" | "timestamptz" => TypeKind::Timestamp,
        "date" => TypeKind::Date,
        "time" | "timetz" => TypeKind::Time,
        "interval" => TypeKind::Interval,
        "json" | "jsonb" => TypeKind::Json,
        "bytea" => TypeKind::Bytea,
        "inet" | "cidr" => TypeKind::Inet,
        "money" => TypeKind::Money,
        _ => TypeKind::Other,
    }
}

fn read_tables(c: &mut Client, types: &mut TypeCache) -> Result<Vec<Table>, postgres::Error> {
    let all = crate::tables::list(c)?;
    // Partitions get their rows through their parent (PostgreSQL routes
    // each row); a materialized view gets its rows from its refresh.
    let seedable: Vec<Relation> = all
        .iter()
        .filter(|t| t.partition_of.is_none() && t.kind != crate::tables::Kind::MaterializedView)
        .map(UserTable::relation)
        .collect();
    let columns = catalogue::columns(c, &seedable)?;
    let indexes = catalogue::indexes(c, &seedable)?;
    // A unique index a constraint is enforced by (or a foreign key relies
    // on) is that constraint's rule, read once from the constraint.
    let all: Vec<Relation> = all.iter().map(UserTable::relation).collect();
    let constraints = catalogue::constraints(c, &all)?;
    let owned: BTreeSet<&str> = constraints
        .iter()
        .filter_map(|k| k.index.as_deref())
        .collect();
    let mut tables = Vec::new();
    for rel in seedable {
        let name = rel.name.clone();
        let mut t = Table {
            oid: rel.oid,
            columns: Vec::new(),
            uniques: Vec::new(),
            fks: Vec::new(),
            checks: Vec::new(),
            name: rel.name,
            qualified: rel.qualified,
        };
        for col in columns.iter().filter(|col| col.table == name) {
            t.columns.push(Column {
                num: col.num,
                name: col.name.clone(),
                ty: types.get(c, col.type_oid)?,
                typmod: col.typmod,
                sql_type: col.sql_type.clone(),
                not_null: col.not_null,
                default: col.default.clone(),
                identity: col.identity,
                generated: col.generated,
            });
        }
        for k in constraints.iter().filter(|k| k.table == name) {
            add_constraint(&mut t, k);
        }
        for i in indexes.iter().filter(|i| i.table == name) {
            if i.unique && !owned.contains(i.regclass.as_str()) {
                add_unique_index(&mut t, i);
            }
        }
        tables.push(t);
    }
    Ok(tables)
}

/// A PRIMARY KEY or UNIQUE constraint, a foreign key or a CHECK, as the
/// rule the seeded rows must keep.
fn add_constraint(t: &mut Table, k: &catalogue::Constraint) {
    match k.kind {
        ConstraintKind::PrimaryKey | ConstraintKind::Unique => t.uniques.push(k.columns.clone()),
        ConstraintKind::ForeignKey => t.fks.push(ForeignKey {
            name: k.name.clone(),
            cols: k.columns.clone(),
            ref_table: k.referenced_oid,
            ref_cols: k.referenced_columns.clone(),
            match_full: k.match_full,
        }),
        ConstraintKind::Check => {
            if let Some(expr) = &k.expression {
                t.checks.push(Check {
                    name: k.name.clone(),
                    expr: expr.clone(),
                    cols: k.columns.clone(),
                });
            }
        }
        _ => {}
    }
}

/// A unique index no constraint owns: its columns, and the ones its
/// expressions mention.
fn add_unique_index(t: &mut Table, i: &catalogue::IndexInfo) {
    let mut cols: Vec<i16> = i
        .column_numbers
        .iter()
        .copied()
        .filter(|&n| n > 0)
        .collect();
    if let Some(exprs) = &i.expressions {
        cols.extend(mentioned_columns(exprs, &t.columns));
    }
    if !cols.is_empty() {
        t.uniques.push(cols);
    }
}

/// Numbers of the columns an expression names (identifiers outside string
/// literals, quoted or not).
fn mentioned_columns(expr: &str, columns: &[Column]) -> Vec<i16> {
    let mut names = BTreeSet::new();
    let mut chars = expr.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\'' => {
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                }
            }
            '"' => {
                let mut name = String::new();
                while let Some(c) = chars.next() {
                    if c == '"' {
                        if chars.peek() == Some(&'"') {
                            chars.next();
                            name.push('"');
                        } else {
                            break;
                        }
                    } else {
                        name.push(c);
                    }
                }
                names.insert(name);
            }
            c if c.is_alphabetic() || c == '_' => {
                let mut name = c.to_string();
                while let Some(&c) = chars.peek() {
                    if c.is_alphanumeric() || c == '_' || c == '$' {
                        name.push(c);
                        chars.next();
                    } else {
                        break;
                    }
                }
                names.insert(name);
            }
            _ => {}
        }
    }
    columns
        .iter()
        .filter(|c| names.contains(&c.name))
        .map(|c| c.num)
        .collect()
}

// ---------------------------------------------------------------------
// Foreign-key order

/// A foreign key between two different tables (by index).
#[derive(Debug, Clone)]
struct Edge {
    child: usize,
    parent: usize,
    constraint: String,
    /// NULLs can satisfy it, so a cycle can be broken here.
    breakable: bool,
}

#[derive(Debug, Default)]
struct Order {
    /// Table indexes, parents before children.
    tables: Vec<usize>,
    /// Edges set aside to break cycles (their columns get NULL, or, when
    /// no column may be NULL, the child is seeded first and fails on it).
    broken: Vec<usize>,
    warnings: Vec<String>,
}

/// Parents before children (Kahn's algorithm, ties by name order). A cycle
/// is broken at a foreign key NULLs satisfy; one with no such key is a
/// warning naming a constraint of the cycle, and is broken there anyway so
/// the rest of the schema is still seeded.
fn seeding_order(tables: &[String], edges: &[Edge]) -> Order {
    let mut out = Order::default();
    let mut done = vec![false; tables.len()];
    let mut removed = vec![false; edges.len()];
    while out.tables.len() < tables.len() {
        let ready = (0..tables.len()).find(|&t| {
            !done[t]
                && !edges
                    .iter()
                    .enumerate()
                    .any(|(e, edge)| !removed[e] && edge.child == t && !done[edge.parent])
        });
        if let Some(t) = ready {
            done[t] = true;
            out.tables.push(t);
            continue;
        }
        let pending: Vec<usize> = (0..edges.len())
            .filter(|&e| !removed[e] && !done[edges[e].child] && !done[edges[e].parent])
            .collect();
        let Some(&pick) = pending
            .iter()
            .find(|&&e| edges[e].breakable)
            .or_else(|| pending.first())
        else {
            break; // unreachable: a stuck order always has a pending edge
        };
        let e = &edges[pick];
        if !e.breakable {
            out.warnings.push(format!(
                "foreign-key cycle: constraint {} ({} → {}) has no nullable column to break it; {} is seeded before {} and its rows cannot reference it",
                e.constraint, tables[e.child], tables[e.parent], tables[e.child], tables[e.parent]
            ));
        }
        removed[pick] = true;
        out.broken.push(pick);
    }
    out
}

// ---------------------------------------------------------------------
// Value families

#[derive(Debug, Clone, PartialEq, Eq)]
struct Family {
    /// SQL with [`I`] standing for the row index (a bigint).
    sql: String,
    /// Distinct indexes give distinct values.
    injective: bool,
}

fn fam(sql: impl Into<String>) -> Family {
    Family {
        sql: sql.into(),
        injective: false,
    }
}

fn inj(sql: impl Into<String>) -> Family {
    Family {
        sql: sql.into(),
        injective: true,
    }
}

/// `template` with the index replaced by `index` (an SQL expression).
fn at(template: &str, index: &str) -> String {
    template.replace(I, &format!("({index})"))
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The literals of a CHECK expression: strings (`'a'`, `'-5'`) and bare
/// numbers, as candidate values (`status IN ('a', 'b')`, `qty > 100`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Literals {
    strings: Vec<String>,
    numbers: Vec<String>,
}

impl Literals {
    fn scan(&mut self, expr: &str) {
        let mut chars = expr.chars().peekable();
        let mut prev_ident = false;
        while let Some(ch) = chars.next() {
            match ch {
                '\'' => {
                    let mut s = String::new();
                    while let Some(c) = chars.next() {
                        if c == '\'' {
                            if chars.peek() == Some(&'\'') {
                                chars.next();
                                s.push('\'');
                            } else {
                                break;
                            }
                        } else {
                            s.push(c);
                        }
                    }
                    if s.parse::<f64>().is_ok() && !self.numbers.contains(&s) {
                        self.numbers.push(s.clone());
                    }
                    if !self.strings.contains(&s) {
                        self.strings.push(s);
                    }
                    prev_ident = false;
                }
                c if c.is_ascii_digit() && !prev_ident => {
                    let mut n = c.to_string();
                    while let Some(&c) = chars.peek() {
                        if c.is_ascii_digit() || c == '.' {
                            n.push(c);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    if n.parse::<f64>().is_ok() && !self.numbers.contains(&n) {
                        self.numbers.push(n);
                    }
                }
                c => prev_ident = c.is_alphanumeric() || c == '_' || c == '"',
            }
        }
    }
}

/// Candidate values of a column, best first: realistic and injective
/// first, then constants and what the CHECKs mention, NULL last (when the
/// column allows it). `width` is the largest index, for sizing text to a
/// `varchar(n)`.
fn families(ty: &TypeInfo, typmod: i32, name: &str, lits: &Literals, width: u64) -> Vec<Family> {
    let i = I;
    let nums = || lits.numbers.iter().take(6);
    let mut v = match &ty.kind {
        TypeKind::Int(bytes) => {
            let mut v = vec![inj(i), fam(format!("{i} % 100 + 1"))];
            if *bytes == 2 {
                v.push(fam(format!("{i} % 30000")));
            }
            v.extend([fam("0"), fam("1"), inj(format!("-{i}"))]);
            for n in nums() {
                v.push(inj(format!("{n} + {i}")));
                v.push(inj(format!("{n} - {i}")));
                v.push(fam(n.clone()));
            }
            v
        }
        TypeKind::Numeric | TypeKind::Float | TypeKind::Money => {
            let mut v = vec![inj(i), fam(format!("{i} % 100 + 1")), fam("0"), fam("1")];
            if typmod >= 4 {
                // numeric(p, s): at most p - s digits before the point.
                let p = ((typmod - 4) >> 16) & 0xffff;
                let s = (typmod - 4) & 0xffff;
                let digits = (p - s).clamp(0, 18) as u32;
                if digits > 0 {
                    v.push(fam(format!("{i} % {}", 10u64.pow(digits) - 1)));
                }
            }
            v.push(inj(format!("-{i}")));
            v.push(inj(format!("{i} / 100.0")));
            for n in nums() {
                v.push(inj(format!("{n} + {i}")));
                v.push(inj(format!("{n} - {i}")));
                v.push(fam(n.clone()));
            }
            if matches!(ty.kind, TypeKind::Money) {
                v = v
                    .into_iter()
                    .map(|f| Family {
                        sql: format!("({})::numeric", f.sql),
                        ..f
                    })
                    .collect();
            }
            v
        }
        TypeKind::Text => {
            let max_len = (typmod >= 5).then(|| (typmod - 4) as usize);
            let digits = width.max(1).to_string().len() + 1; // a minus sign
            let room = max_len.map_or(24, |n| n.saturating_sub(digits).min(24));
            let prefix: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_lowercase()
                    } else {
                        '_'
                    }
                })
                .take(room.saturating_sub(1))
                .collect();
            let mut v = Vec::new();
            if room >= 2 {
                v.push(inj(format!(
                    "{} || {i}",
                    quote_literal(&format!("{prefix}_"))
                )));
            }
            v.push(inj(format!("{i}::text")));
            if !lits.strings.is_empty() {
                let all = lits
                    .strings
                    .iter()
                    .map(|s| quote_literal(s))
                    .collect::<Vec<_>>()
                    .join(", ");
                v.push(fam(format!(
                    "(ARRAY[{all}])[1 + {i} % {}]",
                    lits.strings.len()
                )));
                for s in lits.strings.iter().take(6) {
                    v.push(inj(format!("{} || {i}", quote_literal(s))));
                    v.push(fam(quote_literal(s)));
                }
            }
            v.extend([
                inj(format!("md5({i}::text)")),
                inj(format!(
                    "upper({}) || {i}",
                    quote_literal(&format!("{prefix}_"))
                )),
                fam("'x'"),
                fam("''"),
            ]);
            v
        }
        TypeKind::Bool => vec![fam(format!("{i} % 2 = 0")), fam("true"), fam("false")],
        TypeKind::Uuid => vec![
            inj(format!("md5({} || {i})::uuid", quote_literal(name))),
            fam("'00000000-0000-0000-0000-000000000000'"),
        ],
        TypeKind::Timestamp => vec![
            inj(format!(
                "timestamptz '2020-01-01 00:00:00+00' + {i} * interval '1 minute'"
            )),
            inj(format!("now() - {i} * interval '1 minute'")),
            inj(format!("now() + {i} * interval '1 minute'")),
            fam("now()"),
            fam("timestamptz '2000-01-01 00:00:00+00'"),
        ],
        TypeKind::Date => vec![
            fam(format!("date '2020-01-01' + ({i} % 3650)::int")),
            inj(format!("date '2000-01-01' + ({i})::int")),
            fam(format!("current_date - ({i} % 3650)::int")),
            fam(format!("current_date + 1 + ({i} % 3650)::int")),
            fam("current_date"),
        ],
        TypeKind::Time => vec![
            fam(format!(
                "time '00:00' + ({i} % 86400) * interval '1 second'"
            )),
            fam("time '12:00'"),
            fam("time '00:00'"),
        ],
        TypeKind::Interval => vec![
            inj(format!("{i} * interval '1 second'")),
            fam("interval '1 hour'"),
            fam("interval '0'"),
            inj(format!("-{i} * interval '1 second'")),
        ],
        TypeKind::Json => vec![
            inj(format!("jsonb_build_object({}, {i})", quote_literal(name))),
            fam("'{}'"),
            fam("'[]'"),
            inj(format!("jsonb_build_array({i})")),
        ],
        TypeKind::Bytea => vec![
            inj(format!("decode(md5({i}::text), 'hex')")),
            fam("'\\x00'::bytea"),
        ],
        TypeKind::Inet => vec![
            inj(format!("'10.0.0.0'::inet + {i}")),
            fam("'127.0.0.1'::inet"),
        ],
        TypeKind::Enum(labels) => {
            let mut v = Vec::new();
            if !labels.is_empty() {
                v.push(fam(format!(
                    "(enum_range(NULL::{}))[1 + {i} % {}]",
                    ty.sql,
                    labels.len()
                )));
            }
            v.extend(labels.iter().take(8).map(|l| fam(quote_literal(l))));
            v
        }
        TypeKind::Domain {
            base,
            base_typmod,
            checks,
            ..
        } => {
            let mut lits = lits.clone();
            for c in checks {
                lits.scan(c);
            }
            let typmod = if typmod >= 0 { typmod } else { *base_typmod };
            families(base, typmod, name, &lits, width)
        }
        TypeKind::Array(elem) => {
            let elems = families(elem, typmod, name, lits, width.saturating_add(1));
            let mut v = Vec::new();
            if let Some(e) = elems.first() {
                v.push(Family {
                    sql: format!("ARRAY[{}, {}]", e.sql, at(&e.sql, &format!("{i} + 1"))),
                    injective: e.injective,
                });
                v.push(Family {
                    sql: format!("ARRAY[{}]", e.sql),
                    injective: e.injective,
                });
            }
            v.push(fam("'{}'"));
            v
        }
        TypeKind::Range(sub) => {
            // [v(i), v(i + 1)): increasing for the subtype's first
            // families (numbers, times); the fit probe drops the others.
            let mut v: Vec<Family> =
                families(sub, -1, name, &Literals::default(), width.saturating_add(1))
                    .iter()
                    .take(3)
                    .map(|e| {
                        inj(format!(
                            "'[' || ({})::text || ',' || ({})::text || ')'",
                            e.sql,
                            at(&e.sql, &format!("{i} + 1"))
                        ))
                    })
                    .collect();
            v.push(fam("'empty'"));
            v
        }
        // A type rollsafe does not know: text shapes its input function
        // may accept (a number, a word, a range, a point, an empty value);
        // the fit probe keeps the ones it does.
        TypeKind::Other => vec![
            inj(format!("({i})::text")),
            inj(format!("'w' || {i}")),
            inj(format!("'[' || {i} || ',' || ({i} + 1) || ')'")),
            inj(format!("'(' || {i} || ',' || {i} || ')'")),
            fam("''"),
            fam("'0'"),
            fam("'{}'"),
        ],
    };
    v.truncate(MAX_FAMILIES);
    v
}

/// The `varchar(n)` / `char(n)` length a value must fit, if any: an
/// explicit cast would silently cut it (and break a UNIQUE key), so
/// candidates are measured instead.
fn max_text_len(ty: &TypeInfo, typmod: i32) -> Option<i32> {
    match &ty.kind {
        TypeKind::Text if typmod >= 5 => Some(typmod - 4),
        TypeKind::Domain {
            base, base_typmod, ..
        } => max_text_len(base, if typmod >= 0 { typmod } else { *base_typmod }),
        _ => None,
    }
}

// ---------------------------------------------------------------------
// One table

/// Where a column's value comes from in the INSERT.
#[derive(Debug, Clone)]
enum Val {
    /// Left to its default (or identity, or a generated column); `probe`
    /// stands in for it when CHECKs are tested.
    Omitted {
        probe: String,
    },
    /// One of `fams`, the `chosen` one.
    Gen {
        fams: Vec<Family>,
        chosen: usize,
    },
    /// Column `col` of the numbered rows of foreign key `fk`.
    Fk {
        fk: usize,
        col: String,
    },
    /// The value of column `target` (an index into the table's columns) of
    /// an earlier row of the same table: row g points at row g / 2; row 1
    /// at nothing (NULL) or, when NULL is not allowed, at itself.
    SelfFk {
        target: usize,
        root_null: bool,
    },
    Null,
}

/// A foreign key joined in as numbered rows of the referenced table.
#[derive(Debug, Clone)]
struct Join {
    parent: String,
    ref_cols: Vec<String>,
    /// Rows to pick from.
    n: u64,
    /// Mixed-radix divisor for keys that must give distinct combinations.
    divisor: Option<u64>,
}

struct Plan<'a> {
    table: &'a Table,
    vals: Vec<Val>,
    joins: Vec<Join>,
    offset: u64,
    rows: u64,
}

impl Plan<'_> {
    fn index(&self) -> String {
        format!("s.g + {}", self.offset)
    }

    /// The SQL of column `k`, for the INSERT (`probe` false: None for an
    /// omitted column) or for a CHECK probe.
    fn expr(&self, k: usize, probe: bool) -> Option<String> {
        let col = &self.table.columns[k];
        let cast = |v: String| format!("({v})::{}", col.sql_type);
        Some(match &self.vals[k] {
            Val::Omitted { probe: p } => {
                if !probe {
                    return None;
                }
                p.clone()
            }
            Val::Gen { fams, chosen } => cast(at(&fams[*chosen].sql, &self.index())),
            Val::Fk { fk, col: c } => format!("fk{fk}.{}", quote_ident(c)),
            Val::SelfFk { target, root_null } => {
                let parent = match &self.vals[*target] {
                    Val::Gen { fams, chosen } => {
                        at(&fams[*chosen].sql, &format!("s.g / 2 + {}", self.offset))
                    }
                    _ => "NULL".into(),
                };
                let root = if *root_null {
                    "NULL".to_string()
                } else {
                    self.expr(*target, probe).unwrap_or_else(|| "NULL".into())
                };
                format!(
                    "CASE WHEN s.g = 1 THEN {} ELSE {} END",
                    cast(root),
                    cast(parent)
                )
            }
            Val::Null => cast("NULL".into()),
        })
    }

    /// `SELECT <values> FROM <source of g> <joins>`; a probe limits each
    /// joined table to 16 of its rows (the sample's indexes are folded
    /// into them), so testing a CHECK never sorts a whole big table.
    fn select(&self, source: &str, probe: bool) -> String {
        let values: Vec<String> = (0..self.vals.len())
            .filter_map(|k| {
                self.expr(k, probe).map(|e| {
                    if probe {
                        format!("{e} AS {}", quote_ident(&self.table.columns[k].name))
                    } else {
                        e
                    }
                })
            })
            .collect();
        let mut sql = format!("SELECT {} FROM {source}", values.join(", "));
        for (f, j) in self.joins.iter().enumerate() {
            let keys = j
                .ref_cols
                .iter()
                .map(|c| quote_ident(c))
                .collect::<Vec<_>>()
                .join(", ");
            let not_null = j
                .ref_cols
                .iter()
                .map(|c| format!("{} IS NOT NULL", quote_ident(c)))
                .collect::<Vec<_>>()
                .join(" AND ");
            let n = if probe { j.n.min(16) } else { j.n };
            // A probe (run once per candidate while CHECKs are searched)
            // needs some parent rows, not the ones the INSERT will pick:
            // any 16 are read without sorting the parent table.
            let limit = if probe { " LIMIT 16" } else { "" };
            let pick = match j.divisor {
                Some(d) => format!("((s.g - 1) / {d}) % {n}"),
                None => format!("(s.g - 1) % {n}"),
            };
            sql.push_str(&format!(
                " LEFT JOIN (SELECT {keys}, row_number() OVER (ORDER BY {keys}) - 1 AS rollsafe_rn
                     FROM (SELECT {keys} FROM {} WHERE {not_null}{limit}) p) fk{f}
                   ON fk{f}.rollsafe_rn = {pick}",
                j.parent
            ));
        }
        sql
    }

    fn sample(&self) -> String {
        let mut g: BTreeSet<u64> = (1..=SAMPLE_HEAD.min(self.rows)).collect();
        g.insert(self.rows);
        g.insert(self.rows.saturating_sub(1).max(1));
        let list = g.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        format!("unnest('{{{list}}}'::bigint[]) AS s(g)")
    }
}

/// The rows written and the id of the transaction that wrote them, or
/// why the table could not be seeded.
type TableResult = Result<(SeededTable, Option<String>), UnseededTable>;

fn unseeded<T>(t: &Table, constraint: Option<&str>, reason: String) -> Result<T, UnseededTable> {
    Err(UnseededTable {
        table: t.name.clone(),
        constraint: constraint.map(str::to_string),
        reason,
    })
}

/// Plans, searches and inserts the rows of one table. The outer error is
/// a connection or catalogue failure; the inner one a table that cannot be
/// seeded. Steps: (1) where each column's value comes from (its default,
/// a foreign key, an earlier row, a value to choose), (2) which column
/// carries each UNIQUE key, then [`choose_values`], [`satisfy_checks`],
/// [`insert_rows`].
fn seed_table(
    c: &mut Client,
    t: &Table,
    parents: &HashMap<u32, &Table>,
    is_broken: &dyn Fn(&ForeignKey) -> bool,
    requested: u64,
    only_if_empty: bool,
) -> anyhow::Result<TableResult> {
    let none = |requested| {
        Ok(Ok((
            SeededTable {
                table: t.name.clone(),
                requested,
                written: 0,
                note: None,
                took: std::time::Duration::ZERO,
            },
            None,
        )))
    };
    if requested == 0 {
        return none(0);
    }
    let qt = &t.qualified;
    let existing: i64 = c
        .query_one(&format!("SELECT count(*) FROM {qt}"), &[])?
        .get(0);
    if only_if_empty && existing > 0 {
        return none(0);
    }

    // 1. What each column gets, before values are chosen.
    let mut vals: Vec<Val> = t
        .columns
        .iter()
        .map(|col| {
            if col.generated {
                Val::Omitted {
                    probe: format!("NULL::{}", col.sql_type),
                }
            } else if col.identity {
                Val::Omitted {
                    probe: format!("({})::{}", at(I, "s.g"), col.sql_type),
                }
            } else if let Some(d) = &col.default {
                Val::Omitted { probe: d.clone() }
            } else {
                Val::Null // decided below
            }
        })
        .collect();
    let mut decided = vec![false; t.columns.len()];
    for (k, v) in vals.iter().enumerate() {
        decided[k] = matches!(v, Val::Omitted { .. });
    }
    let mut joins: Vec<Join> = Vec::new();
    let mut forced: BTreeSet<usize> = BTreeSet::new(); // columns we fill despite a default
    let mut self_fks = Vec::new();
    for (f, fk) in t.fks.iter().enumerate() {
        if fk.ref_table == t.oid {
            self_fks.push(f);
            continue;
        }
        let local: Vec<usize> = fk.cols.iter().filter_map(|&n| t.column(n)).collect();
        if local.len() != fk.cols.len() {
            continue;
        }
        let nullable_ok = fk.breakable(t);
        let parent = parents.get(&fk.ref_table);
        match parent {
            Some(p) if !is_broken(fk) => {
                let ref_cols: Vec<String> = fk
                    .ref_cols
                    .iter()
                    .filter_map(|&n| p.column(n).map(|k| p.columns[k].name.clone()))
                    .collect();
                let not_null = ref_cols
                    .iter()
                    .map(|c| format!("{} IS NOT NULL", quote_ident(c)))
                    .collect::<Vec<_>>()
                    .join(" AND ");
                let n: i64 = c
                    .query_one(
                        &format!("SELECT count(*) FROM {} WHERE {not_null}", p.qualified),
                        &[],
                    )?
                    .get(0);
                if n > 0 && ref_cols.len() == local.len() {
                    let j = joins.len();
                    for (k, rc) in local.iter().zip(&ref_cols) {
                        let free = !decided[*k] || matches!(vals[*k], Val::Omitted { .. });
                        if free && !t.columns[*k].generated {
                            vals[*k] = Val::Fk {
                                fk: j,
                                col: rc.clone(),
                            };
                            decided[*k] = true;
                        }
                    }
                    joins.push(Join {
                        parent: p.qualified.clone(),
                        ref_cols,
                        n: n as u64,
                        divisor: None,
                    });
                    continue;
                }
            }
            _ => {}
        }
        // No rows to point at (or the key breaks a cycle): NULL where the
        // key allows it, else the table cannot be seeded.
        if nullable_ok {
            for &k in &local {
                if !t.columns[k].not_null() && !matches!(vals[k], Val::Fk { .. }) {
                    vals[k] = Val::Null;
                    decided[k] = true;
                }
            }
        } else {
            let parent_name =
                parent.map_or("a table rollsafe does not seed".into(), |p| p.name.clone());
            return Ok(unseeded(
                t,
                Some(&fk.name),
                format!(
                    "foreign key {} references {parent_name}, which has no rows to point at, and its columns may not be NULL",
                    fk.name
                ),
            ));
        }
    }
    for &f in &self_fks {
        let fk = &t.fks[f];
        let root_null = fk.breakable(t);
        for (&n, &rn) in fk.cols.iter().zip(&fk.ref_cols) {
            let (Some(k), Some(target)) = (t.column(n), t.column(rn)) else {
                continue;
            };
            if decided[k] && !matches!(vals[k], Val::Omitted { .. }) {
                continue;
            }
            // The referenced column must be a value we compute, so a row
            // can name its parent in the same statement.
            if matches!(vals[target], Val::Omitted { .. }) && !t.columns[target].generated {
                vals[target] = Val::Null;
                decided[target] = false;
                forced.insert(target);
            }
            vals[k] = Val::SelfFk { target, root_null };
            decided[k] = true;
        }
    }

    // An INSERT needs one column: a table of defaults only (a lone serial
    // id) gets its first column filled by us.
    let writes_a_column =
        (0..t.columns.len()).any(|k| !decided[k] || !matches!(vals[k], Val::Omitted { .. }));
    if !writes_a_column {
        match t.columns.iter().position(|col| !col.generated) {
            Some(k) => {
                forced.insert(k);
                vals[k] = Val::Null;
                decided[k] = false;
            }
            None => {
                return Ok(unseeded(
                    t,
                    None,
                    "the table has no column an INSERT can write".into(),
                ))
            }
        }
    }

    // 2. UNIQUE keys: one column of each carries distinct values; a key of
    // foreign-key columns only walks the combinations of parent rows.
    let mut carriers: BTreeSet<usize> = BTreeSet::new();
    let mut radix: Vec<usize> = Vec::new();
    for key in &t.uniques {
        let cols: Vec<usize> = key.iter().filter_map(|&n| t.column(n)).collect();
        if cols.iter().any(|&k| {
            matches!(vals[k], Val::Omitted { .. })
                && t.columns[k].default_is_unique()
                && !forced.contains(&k)
        }) {
            continue;
        }
        if cols.iter().any(|k| carriers.contains(k)) {
            continue;
        }
        // Prefer a column whose type has distinct values to give (not a
        // boolean or an enum).
        let undecided: Vec<usize> = cols.iter().copied().filter(|&k| !decided[k]).collect();
        if let Some(&k) = undecided
            .iter()
            .find(|&&k| {
                let col = &t.columns[k];
                families(&col.ty, col.typmod, &col.name, &Literals::default(), 1)
                    .iter()
                    .any(|f| f.injective)
            })
            .or(undecided.first())
        {
            carriers.insert(k);
            continue;
        }
        if let Some(&k) = cols
            .iter()
            .find(|&&k| matches!(vals[k], Val::Omitted { .. }) && !t.columns[k].generated)
        {
            forced.insert(k);
            vals[k] = Val::Null;
            decided[k] = false;
            carriers.insert(k);
            continue;
        }
        for &k in &cols {
            if let Val::Fk { fk, .. } = vals[k] {
                if !radix.contains(&fk) {
                    radix.push(fk);
                }
            }
        }
    }
    let mut rows = requested;
    let mut note = None;
    if !radix.is_empty() {
        let mut divisor: u64 = 1;
        for &j in &radix {
            joins[j].divisor = Some(divisor);
            divisor = divisor.saturating_mul(joins[j].n);
        }
        if divisor < rows {
            note = Some(format!(
                "{divisor} rows: every combination of the referenced rows its UNIQUE key allows"
            ));
            rows = divisor;
        }
    }
    let offset =
        (existing.max(0) as u64).saturating_add(max_integer_key(c, t, qt, &carriers, &forced)?);
    let width = offset.saturating_add(rows);

    let mut plan = Plan {
        table: t,
        vals,
        joins,
        offset,
        rows,
    };
    let fitting = match choose_values(c, &mut plan, &decided, &carriers, width)? {
        Ok(f) => f,
        Err(u) => return Ok(Err(u)),
    };
    if let Err(u) = satisfy_checks(c, &mut plan, &fitting)? {
        return Ok(Err(u));
    }
    insert_rows(c, &plan, &forced, requested, note)
}

/// Step 3 of [`seed_table`]: for each column still to fill, the families of its type that
/// fit it (tried on the sample), the first one chosen; injective ones
/// only for a column that carries a UNIQUE key.
fn choose_values(
    c: &mut Client,
    plan: &mut Plan,
    decided: &[bool],
    carriers: &BTreeSet<usize>,
    width: u64,
) -> Result<Result<BTreeMap<usize, Vec<Family>>, UnseededTable>, postgres::Error> {
    let t = plan.table;
    // What the CHECKs on a column mention are candidates for it.
    let mut lits: Vec<Literals> = vec![Literals::default(); t.columns.len()];
    for check in &t.checks {
        for &n in &check.cols {
            if let Some(k) = t.column(n) {
                lits[k].scan(&check.expr);
            }
        }
    }
    let mut fitting: BTreeMap<usize, Vec<Family>> = BTreeMap::new();
    for k in 0..t.columns.len() {
        if decided[k] {
            continue;
        }
        let col = &t.columns[k];
        let mut fams = families(&col.ty, col.typmod, &col.name, &lits[k], width);
        if carriers.contains(&k) && fams.iter().any(|f| f.injective) {
            // Without an injective family the INSERT tells whether the
            // key holds (a few rows of an enum may still be distinct).
            fams.retain(|f| f.injective);
        }
        if !col.not_null() {
            fams.push(fam("NULL"));
        }
        let mut fits = Vec::new();
        let mut last_error = None;
        for f in fams {
            match fits_column(c, plan, k, &f)? {
                Ok(()) => fits.push(f),
                Err(e) => last_error = Some(e),
            }
        }
        if fits.is_empty() {
            let (constraint, message) = last_error.unwrap_or((None, "no candidate".into()));
            return Ok(unseeded(
                t,
                constraint.as_deref(),
                format!(
                    "column {} ({}): no generated value fits it ({message})",
                    col.name, col.sql_type
                ),
            ));
        }
        plan.vals[k] = Val::Gen {
            fams: fits.clone(),
            chosen: 0,
        };
        fitting.insert(k, fits);
    }
    Ok(Ok(fitting))
}

/// Step 4 of [`seed_table`]: CHECK constraints, one at a time: other combinations of the
/// fitting families of its columns until it holds without breaking one
/// that held; its columns are then kept.
fn satisfy_checks(
    c: &mut Client,
    plan: &mut Plan,
    fitting: &BTreeMap<usize, Vec<Family>>,
) -> Result<Result<(), UnseededTable>, postgres::Error> {
    let t = plan.table;
    if !t.checks.is_empty() {
        let mut failing = failing_checks(c, plan)?;
        let mut locked: BTreeSet<usize> = BTreeSet::new();
        for ck in 0..t.checks.len() {
            if !failing[ck] {
                locked.extend(t.checks[ck].cols.iter().filter_map(|&n| t.column(n)));
                continue;
            }
            let vars: Vec<usize> = t.checks[ck]
                .cols
                .iter()
                .filter_map(|&n| t.column(n))
                .filter(|k| fitting.contains_key(k) && !locked.contains(k))
                .collect();
            let sizes: Vec<usize> = vars.iter().map(|k| fitting[k].len()).collect();
            for combo in combinations(&sizes).take(MAX_COMBINATIONS) {
                for (v, &k) in vars.iter().enumerate() {
                    plan.vals[k] = Val::Gen {
                        fams: fitting[&k].clone(),
                        chosen: combo[v],
                    };
                }
                let now = failing_checks(c, plan)?;
                let regress = (0..now.len()).any(|j| now[j] && !failing[j]);
                if !now[ck] && !regress {
                    failing = now;
                    break;
                }
            }
            if failing[ck] {
                let check = &t.checks[ck];
                return Ok(unseeded(
                    t,
                    Some(&check.name),
                    format!(
                        "CHECK {} ({}): no combination of generated values satisfies it",
                        check.name, check.expr
                    ),
                ));
            }
            locked.extend(vars);
        }
    }
    Ok(Ok(()))
}

/// Step 5 of [`seed_table`]: the rows, in one transaction with the sequences behind the
/// columns rollsafe filled moved past them.
fn insert_rows(
    c: &mut Client,
    plan: &Plan,
    forced: &BTreeSet<usize>,
    requested: u64,
    note: Option<String>,
) -> anyhow::Result<TableResult> {
    let t = plan.table;
    let rows = plan.rows;
    let qt = &t.qualified;
    let mut names = Vec::new();
    for (k, col) in t.columns.iter().enumerate() {
        if plan.expr(k, false).is_some() {
            names.push(quote_ident(&col.name));
        }
    }
    let overriding = t
        .columns
        .iter()
        .enumerate()
        .any(|(k, col)| col.identity && forced.contains(&k));
    let insert = format!(
        "INSERT INTO {qt} ({}){} {}",
        names.join(", "),
        if overriding {
            " OVERRIDING SYSTEM VALUE"
        } else {
            ""
        },
        plan.select(&format!("generate_series(1, {rows}) AS s(g)"), false)
    );
    let started = std::time::Instant::now();
    let mut tx = c.transaction()?;
    let result = tx.execute(insert.as_str(), &[]).and_then(|written| {
        let xid: String = tx
            .query_one("SELECT pg_current_xact_id()::xid::text", &[])?
            .get(0);
        for &k in forced {
            let col = &t.columns[k];
            tx.batch_execute(&format!(
                "SELECT setval(s, m) FROM (SELECT pg_get_serial_sequence({}, {}) AS s,
                        (SELECT max({}) FROM {qt}) AS m) x WHERE s IS NOT NULL AND m IS NOT NULL",
                quote_literal(qt),
                quote_literal(&col.name),
                quote_ident(&col.name)
            ))?;
        }
        Ok((written, xid))
    });
    match result {
        Ok((written, xid)) => {
            tx.commit()?;
            Ok(Ok((
                SeededTable {
                    table: t.name.clone(),
                    requested,
                    written,
                    note,
                    took: started.elapsed(),
                },
                Some(xid),
            )))
        }
        Err(e) => {
            drop(tx);
            let constraint = e
                .as_db_error()
                .and_then(|d| d.constraint())
                .map(str::to_string);
            Ok(unseeded(
                t,
                constraint.as_deref(),
                crate::errors::one_line(&e),
            ))
        }
    }
}

/// Points the rows transaction `xid` wrote into `child` at rows of
/// `parent` through `fk` (left NULL to break a cycle). Skipped when the
/// key's columns make a UNIQUE key on their own (reusing parent rows
/// would collide). The inner error is the server's message; the update
/// is all or nothing.
fn fill_broken_reference(
    c: &mut Client,
    child: &Table,
    fk: &ForeignKey,
    parent: &Table,
    xid: &str,
) -> Result<Result<(), String>, postgres::Error> {
    let names = |t: &Table, nums: &[i16]| -> Option<Vec<String>> {
        nums.iter()
            .map(|&n| t.column(n).map(|k| t.columns[k].name.clone()))
            .collect()
    };
    let (Some(cols), Some(refs)) = (names(child, &fk.cols), names(parent, &fk.ref_cols)) else {
        return Ok(Ok(()));
    };
    if child
        .uniques
        .iter()
        .any(|key| key.iter().all(|n| fk.cols.contains(n)))
    {
        return Ok(Ok(()));
    }
    let keys = refs
        .iter()
        .map(|r| quote_ident(r))
        .collect::<Vec<_>>()
        .join(", ");
    let not_null = refs
        .iter()
        .map(|r| format!("{} IS NOT NULL", quote_ident(r)))
        .collect::<Vec<_>>()
        .join(" AND ");
    let set = cols
        .iter()
        .zip(&refs)
        .map(|(c, r)| format!("{} = p.{}", quote_ident(c), quote_ident(r)))
        .collect::<Vec<_>>()
        .join(", ");
    let (qc, qp) = (&child.qualified, &parent.qualified);
    let n: i64 = c
        .query_one(&format!("SELECT count(*) FROM {qp} WHERE {not_null}"), &[])?
        .get(0);
    if n == 0 {
        return Ok(Err(format!("{} has no rows", parent.name)));
    }
    // A constant modulus keeps the join a hash join.
    let sql = format!(
        "UPDATE {qc} AS c SET {set}
           FROM (SELECT ctid AS rid, row_number() OVER () - 1 AS rn FROM {qc}
                  WHERE xmin::text = {}) n
           JOIN (SELECT {keys}, row_number() OVER (ORDER BY {keys}) - 1 AS rn
                   FROM {qp} WHERE {not_null}) p ON p.rn = n.rn % {n}
          WHERE c.ctid = n.rid",
        quote_literal(xid)
    );
    let mut tx = c.transaction()?;
    match tx.execute(sql.as_str(), &[]) {
        Ok(_) => {
            tx.commit()?;
            Ok(Ok(()))
        }
        Err(e) if e.as_db_error().is_some() => Ok(Err(crate::errors::one_line(&e))),
        Err(e) => Err(e),
    }
}

/// The largest value of the integer columns rollsafe fills for a UNIQUE
/// key, so new indexes (`i = g + offset`) start past them.
fn max_integer_key(
    c: &mut Client,
    t: &Table,
    qt: &str,
    carriers: &BTreeSet<usize>,
    forced: &BTreeSet<usize>,
) -> Result<u64, postgres::Error> {
    let mut max = 0u64;
    for &k in carriers.iter().chain(forced) {
        let col = &t.columns[k];
        let int = match &col.ty.kind {
            TypeKind::Int(_) => true,
            TypeKind::Domain { base, .. } => matches!(base.kind, TypeKind::Int(_)),
            _ => false,
        };
        if int {
            // numeric: abs() of the smallest bigint would overflow; the cap
            // keeps the offset a bigint whatever the column holds.
            let m: Option<i64> = c
                .query_one(
                    &format!(
                        "SELECT least(coalesce(max(abs({}::numeric)), 0), 1e15)::bigint FROM {qt}",
                        quote_ident(&col.name)
                    ),
                    &[],
                )?
                .get(0);
            max = max.max(m.unwrap_or(0).max(0) as u64);
        }
    }
    Ok(max)
}

/// Whether family `f` gives column `k` values of its type (domain CHECKs,
/// lengths, ranges, NOT NULL) over the sample; the error says why not.
#[allow(clippy::type_complexity)]
fn fits_column(
    c: &mut Client,
    plan: &Plan,
    k: usize,
    f: &Family,
) -> Result<Result<(), (Option<String>, String)>, postgres::Error> {
    let col = &plan.table.columns[k];
    let value = format!("({})::{}", at(&f.sql, &plan.index()), col.sql_type);
    let too_long = max_text_len(&col.ty, col.typmod)
        .map_or("false".to_string(), |n| format!("length(v::text) > {n}"));
    let null = if col.not_null() && f.sql != "NULL" {
        "v IS NULL"
    } else {
        "false"
    };
    // `count(v)` makes the server compute v: an output nothing reads is
    // never evaluated, and its cast would never be tried.
    let sql = format!(
        "SELECT count(*) FILTER (WHERE {too_long} OR {null}), count(v) FROM (SELECT {value} AS v FROM {}) x",
        plan.sample()
    );
    match c.query_one(sql.as_str(), &[]) {
        Ok(row) if row.get::<_, i64>(0) == 0 => Ok(Ok(())),
        Ok(_) => Ok(Err((None, "too long or NULL".into()))),
        Err(e) if e.as_db_error().is_some() => Ok(Err((
            e.as_db_error()
                .and_then(|d| d.constraint())
                .map(str::to_string),
            crate::errors::one_line(&e),
        ))),
        Err(e) => Err(e),
    }
}

/// Which of the table's CHECKs some sampled row violates (all of them,
/// when the probe itself fails: a value the expression cannot take).
fn failing_checks(c: &mut Client, plan: &Plan) -> Result<Vec<bool>, postgres::Error> {
    let checks = &plan.table.checks;
    let counts = checks
        .iter()
        .map(|ck| format!("count(*) FILTER (WHERE ({}) IS FALSE)", ck.expr))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT ARRAY[{counts}]::bigint[] FROM ({}) t",
        plan.select(&plan.sample(), true)
    );
    match c.query_one(sql.as_str(), &[]) {
        Ok(row) => Ok(row.get::<_, Vec<i64>>(0).iter().map(|&n| n > 0).collect()),
        Err(e) if e.as_db_error().is_some() => Ok(vec![true; checks.len()]),
        Err(e) => Err(e),
    }
}

/// Every combination of choices (`sizes[v]` options for variable v),
/// the first choices first.
fn combinations(sizes: &[usize]) -> impl Iterator<Item = Vec<usize>> + '_ {
    let total = sizes
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .unwrap_or(usize::MAX);
    let total = if sizes.contains(&0) { 0 } else { total };
    (0..total).map(move |mut n| {
        sizes
            .iter()
            .map(|&s| {
                let d = n % s;
                n /= s;
                d
            })
            .collect()
    })
}

// ---------------------------------------------------------------------
// App writes

/// Runs each write statement of `app` [`APP_WRITE_RUNS`] times, committed,
/// with its declared parameters or values generated from the parameter
/// types the server reports.
fn run_app_writes(
    c: &mut Client,
    app: &AppVersion,
    types: &mut TypeCache,
) -> anyhow::Result<Vec<AppWrites>> {
    let outcomes = replay::replay_all(c, app)?;
    let writers = super::replay::writers(app, &outcomes);
    let mut out = Vec::new();
    for st in app.set.statements() {
        if !writers.contains(&st.name) {
            continue;
        }
        let declared = replay::declared_params(st.meta_values("param"));
        let mut w = AppWrites {
            app: app.name.clone(),
            statement: st.name.clone(),
            runs: 0,
            succeeded: 0,
            failures: Vec::new(),
        };
        let mut p = match replay::prepare(c, app, &st.name) {
            Ok(p) => p,
            Err(e) => {
                w.failures
                    .push(format!("PREPARE: {}", crate::errors::one_line(&e)));
                out.push(w);
                continue;
            }
        };
        for run in 0..APP_WRITE_RUNS {
            w.runs += 1;
            for (n, (ty, expr)) in p.params.iter_mut().enumerate() {
                if !declared.contains_key(&(n + 1)) {
                    *expr = param_value(c, types, ty, run)?;
                }
            }
            match replay::execute(c, &p) {
                Ok(_) => w.succeeded += 1,
                Err((step, e)) => w
                    .failures
                    .push(format!("{step}: {}", crate::errors::one_line(&e))),
            }
        }
        out.push(w);
    }
    Ok(out)
}

/// An SQL expression for a parameter of type `ty` (as `regtype` spells
/// it): the first non-NULL family of the type that casts, at an index
/// far from the bulk rows' (a random one, so repeated runs do not collide
/// on UNIQUE keys).
fn param_value(
    c: &mut Client,
    types: &mut TypeCache,
    ty: &str,
    run: usize,
) -> Result<String, postgres::Error> {
    let oid: Option<u32> = c.query_one("SELECT to_regtype($1)::oid", &[&ty])?.get(0);
    let Some(oid) = oid else {
        return Ok("NULL".into());
    };
    let info = types.get(c, oid)?;
    let index = format!("{} + floor(random() * 1000000000)::bigint", run + 1);
    for f in families(&info, -1, "param", &Literals::default(), 2_000_000_000) {
        let expr = format!("({})::{ty}", at(&f.sql, &index));
        match c.query_one(&format!("SELECT ({expr}) IS NOT NULL"), &[]) {
            Ok(row) if row.get::<_, Option<bool>>(0) == Some(true) => return Ok(expr),
            Ok(_) => {}
            Err(e) if e.as_db_error().is_some() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(replay::generated_value(ty).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_counts_read_a_default_and_per_table_overrides() {
        let mut r = RowCounts::new(10);
        r.apply("500").unwrap();
        r.apply("orders=1_000").unwrap();
        assert_eq!(r.for_table("orders"), 1000);
        assert_eq!(r.for_table("customers"), 500);
        assert_eq!(
            RowCounts::default().for_table("x"),
            super::super::DEFAULT_ROWS
        );
        for bad in ["", "many", "=5", "orders=", "orders=-1"] {
            let e = r.apply(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("`--rows {bad}`")), "{e}");
        }
    }

    fn edge(child: usize, parent: usize, name: &str, breakable: bool) -> Edge {
        Edge {
            child,
            parent,
            constraint: name.into(),
            breakable,
        }
    }

    #[test]
    fn parents_come_before_children() {
        let names = ["a", "b", "c"].map(String::from);
        // a → b → c (a references b, b references c)
        let o = seeding_order(
            &names,
            &[edge(0, 1, "a_b", false), edge(1, 2, "b_c", false)],
        );
        assert_eq!(o.tables, [2, 1, 0]);
        assert!(o.broken.is_empty() && o.warnings.is_empty());
    }

    #[test]
    fn a_cycle_breaks_at_a_nullable_key_else_warns_with_its_name() {
        let names = ["a", "b", "c"].map(String::from);
        let edges = [
            edge(0, 1, "a_b", false),
            edge(1, 0, "b_a", true),
            edge(2, 0, "c_a", false),
        ];
        let o = seeding_order(&names, &edges);
        assert_eq!(o.broken, [1]);
        assert!(o.warnings.is_empty());
        let pos = |t| o.tables.iter().position(|&x| x == t).unwrap();
        assert!(pos(1) < pos(0) && pos(0) < pos(2), "{:?}", o.tables);

        let o = seeding_order(
            &names[..2],
            &[edge(0, 1, "a_b", false), edge(1, 0, "b_a", false)],
        );
        assert_eq!(o.tables.len(), 2);
        assert_eq!(o.warnings.len(), 1);
        assert!(o.warnings[0].contains("a_b"), "{}", o.warnings[0]);
    }

    #[test]
    fn check_literals_become_candidates() {
        let mut l = Literals::default();
        l.scan("((status = ANY (ARRAY['new'::text, 'it''s'::text])) AND (qty > 100) AND (col2 < '-5'::integer))");
        assert_eq!(l.strings, ["new", "it's", "-5"]);
        assert_eq!(l.numbers, ["100", "-5"]);
    }

    fn column(num: i16, name: &str) -> Column {
        Column {
            num,
            name: name.into(),
            ty: TypeInfo {
                kind: TypeKind::Text,
                sql: "text".into(),
            },
            typmod: -1,
            sql_type: "text".into(),
            not_null: false,
            default: None,
            identity: false,
            generated: false,
        }
    }

    #[test]
    fn expression_indexes_name_their_columns() {
        let cols = [column(1, "email"), column(2, "Tenant"), column(3, "x")];
        assert_eq!(
            mentioned_columns("lower(email), \"Tenant\", 'x'", &cols),
            [1, 2]
        );
    }

    #[test]
    fn text_values_fit_their_varchar_and_stay_distinct() {
        let ty = TypeInfo {
            kind: TypeKind::Text,
            sql: "character varying".into(),
        };
        let f = families(
            &ty,
            4 + 10,
            "customer_name",
            &Literals::default(),
            1_000_000,
        );
        assert!(f[0].injective);
        // 8 digits for the index and its sign leave 2 characters: "c_".
        assert_eq!(at(&f[0].sql, "7"), "'c_' || (7)");
        let ints = families(
            &TypeInfo {
                kind: TypeKind::Int(4),
                sql: "integer".into(),
            },
            -1,
            "n",
            &Literals {
                strings: vec![],
                numbers: vec!["100".into()],
            },
            10,
        );
        assert!(ints.iter().any(|f| at(&f.sql, "g") == "100 + (g)"));
    }

    #[test]
    fn combinations_enumerate_first_choices_first() {
        let all: Vec<Vec<usize>> = combinations(&[2, 3]).collect();
        assert_eq!(all.len(), 6);
        assert_eq!(all[0], [0, 0]);
        assert_eq!(all[1], [1, 0]);
        assert_eq!(combinations(&[2, 0]).count(), 0);
    }
}

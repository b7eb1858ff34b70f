//! Statement sets from a running app, so a team does not hand-write what
//! its app runs. Two sources, one writer ([`write_set`], the format of
//! `src/dao/*.sql`, read by [`crate::app`]):
//! - a test run ([`run`]): the project's own test command runs against a
//!   throwaway database at a migration version, and the server's
//!   statement log says what it ran and with which values ([`log`]);
//! - a live database's `pg_stat_statements` ([`capture`]): the normalised
//!   statements production ran (constants already `$n`), never the
//!   values, and only of the version already deployed.
//!
//! Each statement is classified by parsing it (squawk's grammar through
//! [`crate::sql`]), never by its first keyword: a `SELECT` without a
//! data-modifying CTE reads; `INSERT`, `UPDATE`, `DELETE`, `MERGE`, or any
//! statement holding one (`WITH … AS (UPDATE …) SELECT …`) writes. What the
//! verifier's workload does with a statement depends on that kind (a
//! writer is blocked by SHARE locks, a reader only by ACCESS EXCLUSIVE).
//! Transaction and session control (`BEGIN`, `COMMIT`, `SET`, `SHOW`, …) is
//! left out: it touches no table and replaying it proves nothing. Anything
//! else (a `CALL`, DDL, `COPY`, a statement the grammar does not know) is
//! written without a kind and with a `-- review:` line, for a person to
//! keep, declare or delete.
//!
//! From a test run, DDL and maintenance the tests ran (fixtures creating
//! and truncating tables), statements on tables the migrations do not
//! create (the tests' scratch tables) and reads of only the system
//! catalogue or of no table (drivers' and frameworks' introspection) are
//! left out and counted too; each statement carries the values its calls
//! bound (`-- bound:` for a
//! parameter every call bound to one boolean, compared with it by the
//! readers comparison; `-- example:` rows).
//!
//! What `capture --database-url` is not: a recorder. It reads the view once, in a read-only
//! transaction, and changes nothing; the statistics are whatever the server
//! kept since its last reset. It needs the extension loaded at server start
//! (`shared_preload_libraries`), which only the server's administrator can
//! do; without it the error says how. The URL's password never appears in
//! output or errors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use squawk_syntax::ast::{AstNode, Stmt};
use squawk_syntax::SyntaxKind;
use thiserror::Error;

use crate::db;
use crate::sql::classify::{classify, Class};

pub mod base;
pub mod introspect;
pub mod log;
pub mod params;
pub mod run;

/// One row of `pg_stat_statements`: a normalised statement and how often
/// it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub query: String,
    pub calls: i64,
}

/// A distinct statement as a source saw it: its text, how often it ran,
/// and the values it was bound to (none from `pg_stat_statements`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    pub query: String,
    pub calls: i64,
    /// `$N` → the boolean every call bound it to (`t` or `f`).
    pub bound: BTreeMap<usize, String>,
    /// A few distinct rows of bound values, in order.
    pub examples: Vec<Vec<Option<String>>>,
    /// `$N` → a SQL expression for a value that holds in a rehearsal's
    /// database (`-- param:`, [`params`]).
    pub params: BTreeMap<usize, String>,
}

/// How many distinct rows of bound values a statement shows.
const EXAMPLES: usize = 3;

impl Observed {
    /// A statement of a test run, from its calls' bound rows.
    pub fn from_group(g: &log::Group) -> Observed {
        let width = g.rows.iter().map(Vec::len).max().unwrap_or(0);
        let bound = (0..width)
            .filter_map(|i| {
                let mut values = g.rows.iter().map(|r| r.get(i).cloned().flatten());
                let first = values.next()??;
                let boolean = first == "t" || first == "f";
                (boolean && values.all(|v| v.as_ref() == Some(&first))).then_some((i + 1, first))
            })
            .collect();
        Observed {
            query: g.text.clone(),
            calls: g.calls,
            bound,
            examples: g.rows.iter().take(EXAMPLES).cloned().collect(),
            params: BTreeMap::new(),
        }
    }
}

/// Where a set's statements came from: what is left out differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `pg_stat_statements`: DDL is kept for a person to review.
    Statistics,
    /// A test run's log: DDL and maintenance were the tests' fixtures.
    TestRun,
}

#[derive(Debug, Error)]
pub enum CaptureError {
    #[error("{0}")]
    Connect(String),
    #[error("pg_stat_statements is not installed in database {database}: as its administrator add pg_stat_statements to shared_preload_libraries in postgresql.conf, restart the server, run CREATE EXTENSION pg_stat_statements in {database}, let the app run, then capture again")]
    NotInstalled { database: String },
    #[error("pg_stat_statements is installed in database {database} but the server did not load it at start: as its administrator add pg_stat_statements to shared_preload_libraries in postgresql.conf and restart the server, let the app run, then capture again")]
    NotLoaded { database: String },
    #[error("reading pg_stat_statements failed: {0}")]
    Query(String),
    #[error("--app {0:?} is not a statement set name; use letters, digits, `_` or `-`")]
    BadApp(String),
    #[error("--needs {0:?} is not a schema version; pass the first migration version the app needs (e.g. 3, V3 or 20240101120000)")]
    BadNeeds(String),
}

/// What to write in the set's header.
#[derive(Debug, Clone)]
pub struct Header {
    pub app: String,
    /// As the user wrote it (`3`, `V3`, `20240101120000`).
    pub needs: String,
    /// Where the statements came from, already free of passwords.
    pub origin: String,
}

impl Header {
    /// Checks the app name and version before anything connects.
    pub fn new(app: &str, needs: &str, origin: String) -> Result<Header, CaptureError> {
        let app_ok = !app.is_empty()
            && app
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !app_ok {
            return Err(CaptureError::BadApp(app.to_string()));
        }
        let digits = needs.trim().strip_prefix('V').unwrap_or(needs.trim());
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CaptureError::BadNeeds(needs.to_string()));
        }
        Ok(Header {
            app: app.to_string(),
            needs: needs.trim().to_string(),
            origin,
        })
    }
}

impl Header {
    /// A test run's header: the app name checked, `needs` the label of
    /// the migration the tests ran at, as its layout writes it.
    pub fn at_label(app: &str, label: &str, origin: String) -> Result<Header, CaptureError> {
        let mut header = Header::new(app, "1", origin)?;
        header.needs = label.to_string();
        Ok(header)
    }
}

/// A written set and what went into it.
#[derive(Debug, Clone)]
pub struct CapturedSet {
    /// The statement set's text.
    pub text: String,
    pub reads: usize,
    pub writes: usize,
    pub to_review: usize,
    /// Transaction/session control and rollsafe's own queries, left out.
    pub skipped: usize,
    /// DDL and maintenance a test run ran (its fixtures), left out.
    pub definitions: usize,
    /// Statements of a test run on tables the migrations do not create
    /// (the tests' scratch tables), left out.
    pub scratch: usize,
    /// Statements of a test run on the migration tool's history table (an
    /// app that checks or runs its migrations at start), left out.
    pub bookkeeping: usize,
    /// Statements of a test run that failed in every call (a test that
    /// bad input is refused), left out.
    pub failed: usize,
    /// Reads of a test run that only ask about the server or its
    /// catalogue (a driver's type lookup, a framework's check that its
    /// table exists), left out.
    pub introspection: usize,
}

/// What a test run left out before the set is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Excluded {
    pub scratch: usize,
    pub bookkeeping: usize,
    pub failed: usize,
    pub introspection: usize,
}

/// Reads `pg_stat_statements` of the database `url` names (read-only) and
/// writes it as a statement set.
pub fn capture(url: &str, app: &str, needs: &str) -> Result<CapturedSet, CaptureError> {
    let header = Header::new(
        app,
        needs,
        format!("pg_stat_statements of {}", db::redact_url(url)),
    )?;
    let rows = read_statements(url)?;
    Ok(write_set(&header, &rows))
}

/// Marks capture's own queries, which pg_stat_statements records too (it
/// keeps comments in the text it shows), so they are left out of the set.
const OWN: &str = "/* rollsafe capture */";

/// The database's statements by calls, most frequent first.
pub fn read_statements(url: &str) -> Result<Vec<Captured>, CaptureError> {
    let scrub = |e: &dyn std::fmt::Display| db::scrub(&e.to_string(), url);
    let mut client = db::connect(url).map_err(|e| CaptureError::Connect(scrub(&e)))?;
    let mut tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .map_err(|e| CaptureError::Query(scrub(&e)))?;
    let database: String = tx
        .query_one(&format!("SELECT current_database() {OWN}"), &[])
        .map_err(|e| CaptureError::Query(scrub(&e)))?
        .get(0);
    let schema: Option<String> = tx
        .query_opt(
            &format!(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace \
                 WHERE e.extname = 'pg_stat_statements' {OWN}"
            ),
            &[],
        )
        .map_err(|e| CaptureError::Query(scrub(&e)))?
        .map(|r| r.get(0));
    let Some(schema) = schema else {
        return Err(CaptureError::NotInstalled { database });
    };
    let sql = format!(
        "SELECT s.query, s.calls {OWN} FROM {}.pg_stat_statements s \
         WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         ORDER BY s.calls DESC, s.query",
        crate::pg::quote_ident(&schema)
    );
    let rows = tx.query(&sql, &[]).map_err(|e| {
        let text = crate::errors::one_line(&e);
        if text.contains("shared_preload_libraries") {
            CaptureError::NotLoaded {
                database: database.clone(),
            }
        } else {
            CaptureError::Query(scrub(&text))
        }
    })?;
    Ok(rows
        .iter()
        .map(|r| Captured {
            query: r.get(0),
            calls: r.get(1),
        })
        .collect())
}

/// The statement without its comments (a captured comment could hold a
/// line the statement-set format reads as `-- name:`), and a name made of
/// its verb and first table: `select_books`, `update_orders`.
fn text_and_name(query: &str) -> (String, String) {
    let parsed = crate::sql::with_parse(query, |parse| {
        let stmt = parse.tree().stmts().next()?;
        let node = stmt.syntax();
        let text: String = node
            .descendants_with_tokens()
            .filter_map(|e| e.into_token())
            .filter(|t| t.kind() != SyntaxKind::COMMENT)
            .map(|t| t.text().to_string())
            .collect();
        let verb = node
            .descendants_with_tokens()
            .filter_map(|e| e.into_token())
            .find(|t| t.kind() != SyntaxKind::WHITESPACE && t.kind() != SyntaxKind::COMMENT)
            .map(|t| t.text().to_lowercase())
            .unwrap_or_default();
        let verb = match &stmt {
            Stmt::Insert(_) => "insert".to_string(),
            Stmt::Update(_) => "update".to_string(),
            Stmt::Delete(_) => "delete".to_string(),
            Stmt::Merge(_) => "merge".to_string(),
            Stmt::Select(_) | Stmt::CompoundSelect(_) | Stmt::ParenSelect(_) => {
                "select".to_string()
            }
            _ => verb,
        };
        // The target of a write (a data-modifying CTE's included), or the
        // first table a read reads.
        let write = node.descendants().find(|n| {
            matches!(
                n.kind(),
                SyntaxKind::INSERT | SyntaxKind::UPDATE | SyntaxKind::DELETE | SyntaxKind::MERGE
            )
        });
        let (verb, scope) = match write {
            Some(w) => {
                let verb = match w.kind() {
                    SyntaxKind::INSERT => "insert",
                    SyntaxKind::UPDATE => "update",
                    SyntaxKind::DELETE => "delete",
                    _ => "merge",
                };
                (verb.to_string(), w)
            }
            None => {
                let from = node
                    .descendants()
                    .find(|n| n.kind() == SyntaxKind::FROM_CLAUSE)
                    .filter(|_| verb == "select");
                (verb, from.unwrap_or_else(|| node.clone()))
            }
        };
        let table = scope
            .descendants()
            .find(|n| n.kind() == SyntaxKind::RELATION_NAME_REF)
            // What DDL defines (CREATE TABLE t), or the procedure a CALL
            // names: not a relation either way.
            .or_else(|| {
                scope.descendants().find(|n| {
                    n.kind() == SyntaxKind::PATH
                        || (verb == "call" && n.kind() == SyntaxKind::PATH_REF)
                })
            })
            .map(|p| {
                let full = p.text().to_string();
                full.rsplit('.').next().unwrap_or("").to_string()
            })
            .unwrap_or_default();
        Some((text.trim().to_string(), format!("{verb}_{table}")))
    });
    match parsed {
        Ok(Some((text, name))) if !text.is_empty() => (text, name),
        _ => (query.trim().to_string(), "statement".to_string()),
    }
}

/// `_by_owner_id_published`: the columns a reader's parameters are
/// compared to, so that the same read in two versions of an app has a
/// name of its own (`select_notes_by_owner_id` is not `select_notes_by_id`,
/// whatever else either version runs); empty when it compares none.
fn keyed_by(sql: &str) -> String {
    match crate::app::bindings::infer_read(sql) {
        Ok(shape) if !shape.keys.is_empty() => {
            let columns: BTreeSet<String> = shape.keys.values().cloned().collect();
            format!("_by_{}", columns.into_iter().collect::<Vec<_>>().join("_"))
        }
        _ => String::new(),
    }
}

/// `-- name:` values are identifiers of the set: lower-case letters,
/// digits and `_`, unique (a repeat gets `_2`, `_3`, …).
fn unique_name(raw: &str, taken: &mut BTreeSet<String>) -> String {
    let mut base: String = raw
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    base = base.trim_matches('_').to_string();
    if base.is_empty() {
        base = "statement".into();
    }
    let mut name = base.clone();
    let mut n = 1;
    while taken.contains(&name) {
        n += 1;
        name = format!("{base}_{n}");
    }
    taken.insert(name.clone());
    name
}

/// Writes the statement set for `rows` of `pg_stat_statements` (in the
/// order given; the query orders them by calls).
pub fn write_set(header: &Header, rows: &[Captured]) -> CapturedSet {
    let observed: Vec<Observed> = rows
        .iter()
        .map(|r| Observed {
            query: r.query.clone(),
            calls: r.calls,
            ..Observed::default()
        })
        .collect();
    write_observed(header, &observed, Source::Statistics, Excluded::default())
}

/// Writes the statement set for `rows` from `source`; `excluded` counts
/// the statements a test run already left out.
pub fn write_observed(
    header: &Header,
    rows: &[Observed],
    source: Source,
    excluded: Excluded,
) -> CapturedSet {
    let mut out = CapturedSet {
        text: String::new(),
        reads: 0,
        writes: 0,
        to_review: 0,
        skipped: 0,
        definitions: 0,
        scratch: excluded.scratch,
        bookkeeping: excluded.bookkeeping,
        failed: excluded.failed,
        introspection: excluded.introspection,
    };
    let mut body = String::new();
    let mut taken = BTreeSet::new();
    for row in rows {
        // rollsafe's own queries (the view, the extension lookup) and the
        // extension's setup are not the app's.
        if row.query.contains(OWN) || row.query.contains("pg_stat_statements") {
            out.skipped += 1;
            continue;
        }
        let (kind, review) = match (classify(&row.query), source) {
            (Class::Session, _) => {
                out.skipped += 1;
                continue;
            }
            (Class::Definition(_), Source::TestRun) => {
                out.definitions += 1;
                continue;
            }
            (Class::Read, _) => {
                out.reads += 1;
                (Some("read"), None)
            }
            (Class::Write, _) => {
                out.writes += 1;
                (Some("write"), None)
            }
            (Class::Review(why) | Class::Definition(why), _) => {
                out.to_review += 1;
                (None, Some(why))
            }
        };
        let (text, mut raw_name) = text_and_name(&row.query);
        if source == Source::TestRun && kind == Some("read") {
            raw_name.push_str(&keyed_by(&text));
        }
        let name = unique_name(&raw_name, &mut taken);
        let _ = writeln!(body, "\n-- name: {name}");
        if let Some(kind) = kind {
            let _ = writeln!(body, "-- kind: {kind}");
        }
        if let Some(why) = review {
            let _ = writeln!(
                body,
                "-- review: {why}; keep it (add -- kind: read|write), or delete it"
            );
        }
        let _ = writeln!(body, "-- calls: {}", row.calls);
        for (n, expr) in &row.params {
            let _ = writeln!(body, "-- param: ${n} = {expr}");
        }
        for (n, value) in &row.bound {
            let _ = writeln!(
                body,
                "-- bound: ${n} = {}",
                quoted_value(&Some(value.clone()))
            );
        }
        for example in &row.examples {
            if example.is_empty() {
                continue;
            }
            let values: Vec<String> = example
                .iter()
                .enumerate()
                .map(|(i, v)| format!("${} = {}", i + 1, quoted_value(v)))
                .collect();
            let _ = writeln!(body, "-- example: {}", values.join(", "));
        }
        let _ = writeln!(body, "{text};");
    }
    let _ = writeln!(out.text, "-- app: {}", header.app);
    let _ = writeln!(out.text, "-- needs: {}", header.needs);
    match source {
        Source::Statistics => {
            let _ = writeln!(
                out.text,
                "--\n-- Captured by `rollsafe capture` from {}: {} reads, {} writes, {} to review, {} left out (transaction/session control, rollsafe's own queries).",
                header.origin, out.reads, out.writes, out.to_review, out.skipped
            );
            out.text.push_str(
                "-- Constants were replaced by $n parameters; rollsafe verify generates values per type,\n\
                 -- or declare one under a statement's name: -- param: $1 = (SQL).\n",
            );
        }
        Source::TestRun => {
            let _ = writeln!(
                out.text,
                "--\n-- Captured by `rollsafe capture` from {}: {} reads, {} writes, {} to review; left out: {} transaction/session control, {} DDL and maintenance (test fixtures), {} on tables the migrations do not create (scratch tables), {} on the migration tool's history table, {} that failed in every call (the tests' expected errors), {} reads of the server's catalogue or of no table (drivers' and frameworks' introspection).",
                header.origin, out.reads, out.writes, out.to_review, out.skipped, out.definitions, out.scratch, out.bookkeeping, out.failed, out.introspection
            );
            out.text.push_str(
                "-- `-- bound: $N = v`: every call bound $N to v (the readers comparison binds it so);\n\
                 -- `-- example:` rows are values the tests bound; `-- param:` values of writes hold in any\n\
                 -- database at this schema (an existing row for a foreign key, else the tests' value).\n\
                 -- Capture again when the app changes.\n",
            );
        }
    }
    out.text.push_str(&body);
    out
}

/// How much of a long bound value an `-- example:` shows.
const EXAMPLE_CHARS: usize = 200;

/// A bound value as the server's log writes it: `'text'` with quotes
/// doubled, or `NULL`; a long one cut, with its length after it.
fn quoted_value(v: &Option<String>) -> String {
    match v {
        None => "NULL".to_string(),
        Some(v) if v.chars().count() > EXAMPLE_CHARS => {
            let cut: String = v.chars().take(EXAMPLE_CHARS).collect();
            format!(
                "{}… ({} chars)",
                quoted_value(&Some(cut)),
                v.chars().count()
            )
        }
        // A value on one line: the set's metadata is line-based.
        Some(v) => format!(
            "'{}'",
            v.replace('\'', "''")
                .replace('\n', "\\n")
                .replace('\r', "\\r")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{AppVersion, Kind};

    #[test]
    fn a_written_set_is_a_statement_set_verify_reads() {
        let header = Header::new(
            "shop",
            "V2",
            "pg_stat_statements of postgres://u@h/db".into(),
        )
        .unwrap();
        let rows = [
            ("SELECT id, title FROM public.books WHERE id = $1", 90),
            ("BEGIN", 80),
            ("INSERT INTO books (title) VALUES ($1)", 40),
            (
                "SELECT title FROM books WHERE shelf = $1 /* -- name: x */",
                30,
            ),
            ("SELECT n.nspname FROM pg_stat_statements", 2),
            ("CALL restock($1)", 1),
        ]
        .map(|(q, calls)| Captured {
            query: q.into(),
            calls,
        });
        let set = write_set(&header, &rows);
        assert_eq!(
            (set.reads, set.writes, set.to_review, set.skipped),
            (2, 1, 1, 2)
        );
        let app = AppVersion::parse("captured.sql", &set.text).unwrap();
        assert_eq!(
            (app.name.as_str(), app.needs, app.retired),
            ("shop", 2, None)
        );
        let names: Vec<_> = app
            .set
            .statements()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "select_books",
                "insert_books",
                "select_books_2",
                "call_restock"
            ]
        );
        assert_eq!(app.declared_kind("select_books"), Some(Kind::Read));
        assert_eq!(app.declared_kind("insert_books"), Some(Kind::Write));
        assert_eq!(app.declared_kind("call_restock"), None);
        let review = app.set.get("call_restock").unwrap();
        assert_eq!(review.meta_values("review").count(), 1);
        assert_eq!(
            app.set.sql("select_books_2"),
            "SELECT title FROM books WHERE shelf = $1",
            "comments are dropped"
        );
    }

    #[test]
    fn a_test_run_s_set_shows_bound_values_and_leaves_fixtures_out() {
        let header = Header::at_label("shop", "V2", "the test command `t`".into()).unwrap();
        let group = |text: &str, rows: &[&[Option<&str>]]| log::Group {
            text: text.into(),
            calls: rows.len() as i64,
            rows: rows
                .iter()
                .map(|r| r.iter().map(|v| v.map(String::from)).collect())
                .collect(),
        };
        let long = "x".repeat(300);
        let rows: Vec<Observed> = [
            group(
                "SELECT id FROM books WHERE shelf = $1 AND listed = $2",
                &[&[Some("3"), Some("t")], &[Some("4"), Some("t")]],
            ),
            group(
                "INSERT INTO notes (body) VALUES ($1)",
                &[&[Some(long.as_str())], &[None]],
            ),
            group("CREATE TEMP TABLE scratch (a int)", &[&[]]),
            group("BEGIN", &[&[], &[]]),
        ]
        .iter()
        .map(Observed::from_group)
        .collect();
        let set = write_observed(
            &header,
            &rows,
            Source::TestRun,
            Excluded {
                scratch: 1,
                ..Excluded::default()
            },
        );
        assert_eq!(
            (
                set.reads,
                set.writes,
                set.skipped,
                set.definitions,
                set.scratch
            ),
            (1, 1, 1, 1, 1)
        );
        assert!(set.text.contains("-- name: select_books_by_listed_shelf\n-- kind: read\n-- calls: 2\n-- bound: $2 = 't'\n-- example: $1 = '3', $2 = 't'\n-- example: $1 = '4', $2 = 't'\n"), "{}", set.text);
        assert!(set.text.contains("-- example: $1 = NULL\n"), "{}", set.text);
        assert!(
            set.text
                .contains(&format!("'{}'… (300 chars)", "x".repeat(EXAMPLE_CHARS))),
            "{}",
            set.text
        );
        let app = AppVersion::parse("captured.sql", &set.text).unwrap();
        assert_eq!(app.set.statements().len(), 2);
    }

    #[test]
    fn app_and_needs_are_checked_before_connecting() {
        assert!(matches!(
            Header::new("my app", "2", String::new()),
            Err(CaptureError::BadApp(_))
        ));
        assert!(matches!(
            Header::new("shop", "latest", String::new()),
            Err(CaptureError::BadNeeds(_))
        ));
        assert_eq!(
            Header::new("shop", "20240101120000", String::new())
                .unwrap()
                .needs,
            "20240101120000"
        );
    }
}

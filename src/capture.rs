//! Statement sets from a running app: `rollsafe capture` reads the
//! normalised statements `pg_stat_statements` collected in a database (the
//! app's real queries, constants already replaced by `$n` parameters) and
//! writes them as a statement set (the format of `src/dao/*.sql`, read by
//! [`crate::app`]), so a team does not hand-write what its app runs.
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
//! What it is not: a recorder. It reads the view once, in a read-only
//! transaction, and changes nothing; the statistics are whatever the server
//! kept since its last reset. It needs the extension loaded at server start
//! (`shared_preload_libraries`), which only the server's administrator can
//! do; without it the error says how. The URL's password never appears in
//! output or errors.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use squawk_syntax::ast::{AstNode, Stmt};
use squawk_syntax::{SyntaxKind, SyntaxNode};
use thiserror::Error;

use crate::db;

/// One row of `pg_stat_statements`: a normalised statement and how often
/// it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub query: String,
    pub calls: i64,
}

/// What the parse says a statement does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Read,
    Write,
    /// Transaction or session control: left out of the set.
    Session,
    /// Kept with a `-- review:` line (why, in the string).
    Review(&'static str),
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

/// Classifies one statement by its syntax tree.
pub fn classify(query: &str) -> Class {
    let split = crate::sql::split(query);
    let clean = split.exact && split.statements.len() == 1 && split.statements[0].parsed;
    crate::sql::with_parse(query, |parse| {
        let Some(stmt) = parse.tree().stmts().next() else {
            return Class::Review("no statement found");
        };
        // Session control is recognised even when its value did not parse:
        // PostgreSQL 16+ normalises `SET x = 5` to `SET x = $1`, which is
        // not SQL the grammar accepts.
        if is_session_control(&stmt) {
            return Class::Session;
        }
        if !clean {
            return Class::Review("rollsafe's SQL grammar could not read it as one statement");
        }
        let writes_inside = holds_a_write(stmt.syntax());
        match stmt {
            Stmt::Insert(_) | Stmt::Update(_) | Stmt::Delete(_) | Stmt::Merge(_) => Class::Write,
            Stmt::Select(_)
            | Stmt::CompoundSelect(_)
            | Stmt::ParenSelect(_)
            | Stmt::Values(_)
            | Stmt::Table(_) => {
                if writes_inside {
                    Class::Write
                } else {
                    Class::Read
                }
            }
            Stmt::SelectInto(_) => Class::Review("SELECT INTO creates a table"),
            Stmt::Call(_) | Stmt::Do(_) | Stmt::Execute(_) => Class::Review(
                "a procedure or prepared statement: whether it writes is not visible here",
            ),
            _ => Class::Review(
                "not a query an app runs against its tables (DDL, COPY, maintenance, …)",
            ),
        }
    })
    .unwrap_or(Class::Review("rollsafe's SQL grammar could not read it"))
}

fn is_session_control(stmt: &Stmt) -> bool {
    matches!(
        stmt,
        Stmt::Begin(_)
            | Stmt::Commit(_)
            | Stmt::Rollback(_)
            | Stmt::SavepointCreate(_)
            | Stmt::ReleaseSavepoint(_)
            | Stmt::PrepareTransaction(_)
            | Stmt::Set(_)
            | Stmt::SetTransaction(_)
            | Stmt::SetConstraints(_)
            | Stmt::SetRole(_)
            | Stmt::SetSessionAuth(_)
            | Stmt::Reset(_)
            | Stmt::ResetRole(_)
            | Stmt::ResetSessionAuth(_)
            | Stmt::Show(_)
            | Stmt::Discard(_)
            | Stmt::Deallocate(_)
            | Stmt::Listen(_)
            | Stmt::Unlisten(_)
    )
}

/// A data-modifying statement anywhere inside (a CTE, a subquery).
fn holds_a_write(node: &SyntaxNode) -> bool {
    node.descendants().any(|n| {
        matches!(
            n.kind(),
            SyntaxKind::INSERT | SyntaxKind::UPDATE | SyntaxKind::DELETE | SyntaxKind::MERGE
        )
    })
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

/// Writes the statement set for `rows` (in the order given; the query
/// orders them by calls).
pub fn write_set(header: &Header, rows: &[Captured]) -> CapturedSet {
    let mut out = CapturedSet {
        text: String::new(),
        reads: 0,
        writes: 0,
        to_review: 0,
        skipped: 0,
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
        let class = classify(&row.query);
        let (kind, review) = match class {
            Class::Session => {
                out.skipped += 1;
                continue;
            }
            Class::Read => {
                out.reads += 1;
                (Some("read"), None)
            }
            Class::Write => {
                out.writes += 1;
                (Some("write"), None)
            }
            Class::Review(why) => {
                out.to_review += 1;
                (None, Some(why))
            }
        };
        let (text, raw_name) = text_and_name(&row.query);
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
        let _ = writeln!(body, "{text};");
    }
    let _ = writeln!(out.text, "-- app: {}", header.app);
    let _ = writeln!(out.text, "-- needs: {}", header.needs);
    let _ = writeln!(
        out.text,
        "--\n-- Captured by `rollsafe capture` from {}: {} reads, {} writes, {} to review, {} left out (transaction/session control, rollsafe's own queries).",
        header.origin, out.reads, out.writes, out.to_review, out.skipped
    );
    out.text.push_str(
        "-- Constants were replaced by $n parameters; rollsafe verify generates values per type,\n\
         -- or declare one under a statement's name: -- param: $1 = (SQL).\n",
    );
    out.text.push_str(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{AppVersion, Kind};

    #[test]
    fn classification_reads_the_tree_not_the_first_keyword() {
        for (sql, class) in [
            ("SELECT id FROM books WHERE id = $1", Class::Read),
            ("SELECT id FROM books WHERE id = $1 FOR UPDATE", Class::Read),
            ("(SELECT 1) UNION SELECT 2", Class::Read),
            ("VALUES ($1, $2)", Class::Read),
            ("INSERT INTO books (title) VALUES ($1) RETURNING id", Class::Write),
            ("UPDATE books SET title = $1 WHERE id = $2", Class::Write),
            ("DELETE FROM books WHERE id = $1", Class::Write),
            (
                "MERGE INTO books b USING (SELECT $1::int AS id) s ON b.id = s.id WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)",
                Class::Write,
            ),
            (
                "WITH moved AS (UPDATE books SET shelf = $1 RETURNING id) SELECT count(*) FROM moved",
                Class::Write,
            ),
            (
                "WITH recent AS (SELECT id FROM books) UPDATE books SET seen = true WHERE id IN (SELECT id FROM recent)",
                Class::Write,
            ),
            ("BEGIN", Class::Session),
            ("SET statement_timeout = $1", Class::Session),
            ("SHOW server_version", Class::Session),
            ("COMMIT", Class::Session),
        ] {
            assert_eq!(classify(sql), class, "{sql}");
        }
        for sql in [
            "CALL restock($1)",
            "CREATE INDEX ON books (title)",
            "SELECT * INTO copy FROM books",
            "SELEKT 1",
        ] {
            assert!(matches!(classify(sql), Class::Review(_)), "{sql}");
        }
    }

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

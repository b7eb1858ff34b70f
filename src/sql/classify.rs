//! What a statement does, read from its syntax tree rather than its first
//! keyword: a read, a write (a `WITH … INSERT`, a `SELECT` calling a
//! data-modifying CTE), session control, or a definition. `capture` sorts
//! what a test run executed by it; an app's statement set, its replay and
//! verify's readers ask it too, so it sits on the ground floor.

use squawk_syntax::ast::{AstNode, Stmt};
use squawk_syntax::{SyntaxKind, SyntaxNode};

/// What the parse says a statement does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Read,
    Write,
    /// Transaction or session control: left out of the set.
    Session,
    /// DDL, maintenance, `COPY`, `SELECT INTO`: a test fixture's from a
    /// test run, for review from `pg_stat_statements` (why, in the
    /// string).
    Definition(&'static str),
    /// Kept with a `-- review:` line (why, in the string).
    Review(&'static str),
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
            Stmt::SelectInto(_) => Class::Definition("SELECT INTO creates a table"),
            Stmt::Call(_) | Stmt::Do(_) | Stmt::Execute(_) => Class::Review(
                "a procedure or prepared statement: whether it writes is not visible here",
            ),
            _ => Class::Definition(
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

#[cfg(test)]
mod tests {
    use super::*;

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
        for sql in ["CALL restock($1)", "SELEKT 1"] {
            assert!(matches!(classify(sql), Class::Review(_)), "{sql}");
        }
        for sql in [
            "CREATE INDEX ON books (title)",
            "SELECT * INTO copy FROM books",
            "TRUNCATE books",
        ] {
            assert!(matches!(classify(sql), Class::Definition(_)), "{sql}");
        }
    }
}

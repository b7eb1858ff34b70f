//! The SQL inside `-- rollsafe:backfill` and `-- rollsafe:batched-update`
//! directives, read by the grammar before anything runs it.
//!
//! Directive text ends up inside statements rollsafe composes (`SELECT
//! count(*) FROM <table> WHERE NOT (<predicate>)`, a batch `UPDATE`) and
//! `check` runs the backfill predicate against production. Migration files
//! come from pull requests, so the text is never pasted: the table is read
//! as an identifier (optionally schema-qualified) and always quoted, and the
//! `SET` and `WHERE` parts must parse, with squawk's grammar, as exactly
//! the clause they stand for in one statement of the expected shape. A `;`,
//! a comment (it would swallow the rest of a composed statement), a clause
//! after the predicate, a `WITH`, a subquery that writes
//! (`INSERT`/`UPDATE`/`DELETE`/`MERGE`) or locks rows (`FOR UPDATE`) is
//! refused.
//!
//! What it is not: a sandbox for function calls. A predicate may call any
//! function the database has; `check` runs it in a read-only session under
//! a `statement_timeout`, `migrate` as the migration's own role.

use std::fmt;

use squawk_syntax::ast::{self, AstNode};
use squawk_syntax::{SyntaxKind, SyntaxNode};

use crate::pg::quote_ident;

/// A table named by a directive, as PostgreSQL reads the identifier:
/// unquoted parts folded to lower case, quoted parts kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    /// The schema when the directive qualifies the table.
    pub schema: Option<String>,
    pub name: String,
}

impl TableName {
    /// A table in the search path (unqualified).
    pub fn unqualified(name: &str) -> TableName {
        TableName {
            schema: None,
            name: name.to_string(),
        }
    }

    /// A table name as a user writes it (`--copy-rows`, rollsafe.toml):
    /// `name`, `schema.name`, quoted parts kept as written.
    pub fn parse(text: &str) -> Result<TableName, String> {
        match TableName::leading(text.trim())? {
            (table, "") => Ok(table),
            (_, rest) => Err(format!("`{rest}` follows the table name")),
        }
    }

    /// Whether this names the table `schema`.`name` (an unqualified name
    /// means `public`, the search path the migrations run with).
    pub fn names(&self, schema: &str, name: &str) -> bool {
        self.schema_or_public() == schema && self.name == name
    }

    /// The table for SQL text: every part quoted.
    pub fn sql(&self) -> String {
        match &self.schema {
            Some(s) => format!("{}.{}", quote_ident(s), quote_ident(&self.name)),
            None => quote_ident(&self.name),
        }
    }

    /// The schema to look the table up in: its own, else `public`.
    pub fn schema_or_public(&self) -> &str {
        self.schema.as_deref().unwrap_or("public")
    }

    /// Reads the identifier (or `schema.identifier`) that starts `text`,
    /// returning it and the rest of `text`.
    fn leading(text: &str) -> Result<(TableName, &str), String> {
        let (first, mut rest) = leading_identifier(text)?;
        let mut parts = vec![first];
        while let Some(after_dot) = rest.strip_prefix('.') {
            let (part, after) = leading_identifier(after_dot)?;
            parts.push(part);
            rest = after;
        }
        if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
            return Err(format!(
                "the table name ends at `{}`; a table is <table> or <schema>.<table> (quote unusual names: \"My Table\")",
                rest.chars().next().unwrap_or(' ')
            ));
        }
        let table = match parts.as_slice() {
            [name] => TableName::unqualified(name),
            [schema, name] => TableName {
                schema: Some(schema.clone()),
                name: name.clone(),
            },
            _ => return Err("a table is <table> or <schema>.<table>".into()),
        };
        Ok((table, rest.trim_start()))
    }
}

impl fmt::Display for TableName {
    /// As a user would write it: plain when the identifier needs no
    /// quotes, quoted otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |part: &str| {
            let plain = part.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
            if plain {
                part.to_string()
            } else {
                quote_ident(part)
            }
        };
        match &self.schema {
            Some(s) => write!(f, "{}.{}", show(s), show(&self.name)),
            None => f.write_str(&show(&self.name)),
        }
    }
}

/// One identifier at the start of `text`: `"quoted ""like"" this"` (kept
/// as written) or a plain name (letters, digits, `_`, `$`; folded to lower
/// case, as PostgreSQL folds it).
fn leading_identifier(text: &str) -> Result<(String, &str), String> {
    if let Some(body) = text.strip_prefix('"') {
        let mut name = String::new();
        let mut chars = body.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c != '"' {
                name.push(c);
                continue;
            }
            if chars.peek().is_some_and(|&(_, n)| n == '"') {
                chars.next();
                name.push('"');
                continue;
            }
            if name.is_empty() {
                return Err("an empty quoted table name".into());
            }
            return Ok((name, &body[i + 1..]));
        }
        return Err("a quoted table name never closes".into());
    }
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .unwrap_or(text.len());
    let name = &text[..end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit() || c == '$') {
        return Err("no table name".into());
    }
    Ok((name.to_lowercase(), &text[end..]))
}

/// `<table> <predicate>` of a `-- rollsafe:backfill` directive, the
/// predicate checked as the `WHERE` of `SELECT 1 FROM <table> WHERE …`.
pub(super) fn parse_backfill(value: &str) -> Result<(TableName, String), String> {
    let (table, predicate) = TableName::leading(value)?;
    if predicate.is_empty() {
        return Err("no predicate after the table".into());
    }
    let sql = format!("SELECT 1 FROM {} WHERE {predicate}", table.sql());
    with_one_statement(&sql, |stmt| {
        let ast::Stmt::Select(select) = stmt else {
            return Err("the predicate does not end where it should (a UNION or another statement follows it)".into());
        };
        only_clauses(
            select.syntax(),
            &[
                (SyntaxKind::SELECT_CLAUSE, ""),
                (SyntaxKind::FROM_CLAUSE, ""),
                (SyntaxKind::WHERE_CLAUSE, ""),
            ],
        )?;
        where_predicate(select.syntax()).map(|_| ())
    })?;
    Ok((table, predicate.to_string()))
}

/// `<table> SET … WHERE …` of a `-- rollsafe:batched-update` directive:
/// (table, assignments, predicate), checked as the `UPDATE` it stands for.
pub(super) fn parse_batched_update(value: &str) -> Result<(TableName, String, String), String> {
    let (table, rest) = TableName::leading(value)?;
    let sql = format!("UPDATE {} {rest}", table.sql());
    let (set, predicate) = with_one_statement(&sql, |stmt| {
        let ast::Stmt::Update(update) = stmt else {
            return Err("not one UPDATE statement".into());
        };
        let node = update.syntax();
        only_clauses(
            node,
            &[
                (SyntaxKind::RELATION_NAME, ""),
                (SyntaxKind::SET_CLAUSE, ""),
                (SyntaxKind::WHERE_CLAUSE, ""),
                (SyntaxKind::FROM_CLAUSE, "FROM is not supported"),
                (SyntaxKind::RETURNING_CLAUSE, "RETURNING is not supported"),
            ],
        )?;
        let set = update
            .set_clause()
            .and_then(|s| s.set_column_list())
            .map(|l| l.syntax().text().to_string())
            .ok_or("no SET")?;
        Ok((set, where_predicate(node)?))
    })?;
    Ok((table, set.trim().to_string(), predicate.trim().to_string()))
}

/// Parses `sql` and hands its only statement to `check`, after refusing
/// what no directive may hold anywhere: syntax errors, a second statement
/// or a `;`, comments, `WITH`, and subqueries that write or lock rows.
fn with_one_statement<T: Send>(
    sql: &str,
    check: impl FnOnce(&ast::Stmt) -> Result<T, String> + Send,
) -> Result<T, String> {
    crate::sql::with_parse(sql, |parse| {
        if let Some(e) = parse.errors().first() {
            return Err(format!("not valid SQL there: {e}"));
        }
        for token in parse
            .syntax_node()
            .descendants_with_tokens()
            .filter_map(|e| e.into_token())
        {
            match token.kind() {
                SyntaxKind::SEMICOLON => return Err("a `;` ends the statement early".into()),
                SyntaxKind::COMMENT => {
                    return Err("a comment inside a directive would swallow what follows it".into())
                }
                _ => {}
            }
        }
        let stmts: Vec<ast::Stmt> = parse.tree().stmts().collect();
        let [stmt] = stmts.as_slice() else {
            return Err("it holds more than one statement".into());
        };
        let root = stmt.syntax();
        if let Some(why) = root.descendants().skip(1).find_map(|n| refused_inside(&n)) {
            return Err(why.into());
        }
        check(stmt)
    })
    .map_err(|e| e.to_string())?
}

/// Why a node may not appear inside a directive's SQL, if it may not.
fn refused_inside(node: &SyntaxNode) -> Option<&'static str> {
    Some(match node.kind() {
        SyntaxKind::INSERT | SyntaxKind::UPDATE | SyntaxKind::DELETE | SyntaxKind::MERGE => {
            "a subquery that writes (INSERT, UPDATE, DELETE or MERGE) is not allowed"
        }
        SyntaxKind::WITH_CLAUSE => "WITH is not allowed (a data-modifying CTE would write)",
        SyntaxKind::LOCKING_CLAUSE => {
            "a subquery that locks rows (FOR UPDATE/SHARE) is not allowed"
        }
        _ => return None,
    })
}

/// Refuses any clause of `stmt` not in `allowed` (kind, message when it
/// is refused on purpose: an empty message means the clause is allowed).
fn only_clauses(stmt: &SyntaxNode, allowed: &[(SyntaxKind, &str)]) -> Result<(), String> {
    for child in stmt.children() {
        match allowed.iter().find(|(k, _)| *k == child.kind()) {
            Some((_, "")) => {}
            Some((_, why)) => return Err(why.to_string()),
            None => {
                return Err(format!(
                    "`{}` follows the predicate; a directive ends with its WHERE condition",
                    child.text().to_string().trim()
                ))
            }
        }
    }
    Ok(())
}

/// The condition of `stmt`'s `WHERE`, as written.
fn where_predicate(stmt: &SyntaxNode) -> Result<String, String> {
    stmt.children()
        .find(|n| n.kind() == SyntaxKind::WHERE_CLAUSE)
        .and_then(|w| w.children().next())
        .map(|e| e.text().to_string().trim().to_string())
        .ok_or_else(|| "no WHERE predicate".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_identifiers_folded_and_quoted_like_postgres_reads_them() {
        let (t, rest) = TableName::leading("Items x = 1").unwrap();
        assert_eq!(
            (t.sql(), t.to_string(), rest),
            ("\"items\"".into(), "items".into(), "x = 1")
        );
        let (t, rest) = TableName::leading("app.\"Order \"\"Lines\"\" x\" a > 0").unwrap();
        assert_eq!(t.schema.as_deref(), Some("app"));
        assert_eq!(t.name, "Order \"Lines\" x");
        assert_eq!(t.sql(), "\"app\".\"Order \"\"Lines\"\" x\"");
        assert_eq!(rest, "a > 0");
        for bad in [
            "a.b.c x",
            "\"unclosed x",
            "t;drop x",
            "(select 1) x",
            "\"\" x",
            "1t x",
        ] {
            assert!(TableName::leading(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn backfill_predicates_are_one_where_condition() {
        assert_eq!(
            parse_backfill("attached_functions is_ready = true").unwrap(),
            (
                TableName::unqualified("attached_functions"),
                "is_ready = true".into()
            )
        );
        assert!(parse_backfill("t a IN (SELECT id FROM u WHERE u.ok)").is_ok());
        for (bad, why) in [
            ("t x; DROP TABLE y", "`;`"),
            ("t x = 1;", "`;`"),
            ("t x = 1 -- )", "comment"),
            ("t x = 1 /* c */", "comment"),
            ("t x = 1 UNION SELECT 1", "UNION"),
            ("t x = 1 GROUP BY x", "follows the predicate"),
            ("t x = 1 ORDER BY x", "follows the predicate"),
            (
                "t x IN (WITH d AS (DELETE FROM y RETURNING id) SELECT id FROM d)",
                "WITH",
            ),
            ("t x IN (SELECT id FROM y FOR UPDATE)", "locks rows"),
            ("t x = (", "not valid SQL"),
            ("t", "no predicate"),
        ] {
            let err = parse_backfill(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn batched_updates_are_one_update_with_set_and_where() {
        let (t, set, pred) =
            parse_batched_update("s.items SET b = (SELECT max(x) FROM y), c = 1 WHERE b IS NULL")
                .unwrap();
        assert_eq!(t.sql(), "\"s\".\"items\"");
        assert_eq!(set, "b = (SELECT max(x) FROM y), c = 1");
        assert_eq!(pred, "b IS NULL");
        for (bad, why) in [
            ("items SET b = 1", "no WHERE"),
            ("items SET b = 1 WHERE b IS NULL; DROP TABLE y", "`;`"),
            ("items SET b = 1 FROM y WHERE b IS NULL", "FROM"),
            ("items SET b = 1 WHERE b IS NULL RETURNING b", "RETURNING"),
            ("items SET b = (WITH d AS (INSERT INTO y VALUES (1) RETURNING 1) SELECT 1 FROM d) WHERE b IS NULL", "WITH"),
            // The grammar itself refuses a writing subquery outside WITH.
            ("items SET b = (UPDATE y SET z = 1 RETURNING z) WHERE b IS NULL", "not valid SQL"),
            ("items b = 1 WHERE b IS NULL", "not valid SQL"),
        ] {
            let err = parse_batched_update(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}

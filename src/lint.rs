//! squawk's lint rules on a migration's text, before any database: what
//! `verify` reads first (its `static` check then holds each warning
//! against what its statement measured) and what `verify --static-only`
//! reports alone.
//!
//! [`lint`] runs squawk 2.68's default rules (`squawk-linter`) on the file
//! through [`crate::sql::with_parse`] (the splitter's guards: nothing nests
//! deep enough to overflow the parser's stack, a panic is caught). squawk is
//! told how the file runs, the one answer the rehearsal and `migrate` follow
//! ([`crate::catalog::Migration::runs_outside_transaction`], from how its
//! tool sends it): a file run in one transaction (`assume_in_transaction`)
//! has no "existing" table it created itself, and its `CREATE INDEX
//! CONCURRENTLY` is the failure it is; a file run outside one (goose's `NO
//! TRANSACTION`, a lone statement sent by golang-migrate or Prisma, a file
//! with its own `BEGIN` … `COMMIT`) is linted as it runs, so neither
//! `transaction-nesting` nor the concurrent-index ban fires for a
//! transaction that is not there. A violation becomes a [`Warning`] at its
//! own line and column, tied to its statement of [`crate::sql::split`] (the
//! statements the rehearsal measures one by one) and to the table that
//! statement alters or indexes. `-- squawk-ignore rule` comments work as in
//! squawk. A file squawk's grammar cannot parse is a [`SYNTAX_ERROR`]
//! warning, never an error by itself: PostgreSQL is the judge.
//!
//! Its own floor (`lint`, above `schema`: it names tables as
//! [`crate::tables`] does), below everything that judges.

use squawk_linter::{Linter, Rule};
use squawk_syntax::ast::{self, AstNode};
use squawk_syntax::{Parse, SourceFile};

use crate::report::Location;
use crate::sql::LineIndex;

/// The pseudo-rule of a statement squawk's grammar could not parse
/// (squawk's own name for it).
pub const SYNTAX_ERROR: &str = "syntax-error";
/// The pseudo-rule of a file the parser was not run on.
pub const NOT_LINTED: &str = "not-linted";

/// How many characters of a statement or of the flagged text a finding
/// quotes.
pub const EXCERPT_CHARS: usize = 60;

/// One squawk violation in one migration file.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    /// squawk's rule name (`require-concurrent-index-creation`), or
    /// [`SYNTAX_ERROR`] / [`NOT_LINTED`].
    pub rule: String,
    /// squawk's message.
    pub message: String,
    /// squawk's fix, when the rule has one.
    pub help: Option<String>,
    /// Index of its statement in [`crate::sql::split`] of the file: the
    /// same index as the rehearsal's `Applied::statements` once verify
    /// counts the statements of the callbacks run before the file (see
    /// `migrate::apply::migration_steps`). None when the file could not be
    /// split exactly.
    pub statement: Option<usize>,
    /// The table the statement alters or indexes (normalised as PostgreSQL
    /// folds names), when it names one in the `public` schema.
    pub table: Option<String>,
    /// Line and column of the flagged construct itself (not of the
    /// statement's start); the excerpt is the statement's.
    pub location: Location,
    /// The flagged text, whitespace folded (`SET NOT NULL`).
    pub flagged: String,
}

/// A violation before it is placed in the file.
struct Raw {
    rule: String,
    message: String,
    help: Option<String>,
    start: usize,
    end: usize,
    table: Option<String>,
}

/// squawk's default rules on migration `sql` (`file` as the repository has
/// it, for locations), in file order. Never panics: a file the parser
/// cannot take is one [`NOT_LINTED`] warning, each statement it could not
/// parse a [`SYNTAX_ERROR`] warning.
pub fn lint(file: &str, sql: &str, in_transaction: bool) -> Vec<Warning> {
    let split = crate::sql::split(sql);
    let lines = LineIndex::new(sql);
    let raw = match crate::sql::with_parse(sql, |parse| violations(parse, sql, in_transaction)) {
        Ok(raw) => raw,
        Err(why) => {
            let at = split.statements.first().map_or(0, |s| s.start);
            vec![Raw {
                rule: NOT_LINTED.into(),
                message: format!("squawk's rules did not run on this file: {why}"),
                help: Some("PostgreSQL still judges it when the migration is rehearsed".into()),
                start: at,
                end: at,
                table: None,
            }]
        }
    };
    let mut out: Vec<Warning> = Vec::new();
    for r in raw {
        // The statement holding the construct's first byte (statements are
        // ordered and disjoint; comments between them belong to none).
        let statement = split
            .exact
            .then(|| split.statements.partition_point(|s| s.start <= r.start))
            .and_then(|after| after.checked_sub(1))
            .filter(|&i| r.start <= split.statements[i].end);
        if r.rule == SYNTAX_ERROR
            && out
                .iter()
                .any(|w| w.rule == SYNTAX_ERROR && w.statement == statement)
        {
            // One syntax warning per statement: later errors in it follow
            // from the first.
            continue;
        }
        let (line, column) = lines.position(sql, r.start);
        let excerpt = statement
            .or(split.statements.first().map(|_| 0))
            .and_then(|i| split.statements.get(i))
            .map(|s| s.excerpt(EXCERPT_CHARS))
            .unwrap_or_default();
        out.push(Warning {
            rule: r.rule,
            message: r.message,
            help: r.help,
            statement,
            table: r.table,
            location: Location {
                file: file.to_string(),
                line,
                column,
                excerpt,
            },
            flagged: fold(sql.get(r.start..r.end).unwrap_or_default()),
        });
    }
    out
}

/// Runs on the parser's thread: nothing of the tree leaves it.
fn violations(parse: &Parse<SourceFile>, sql: &str, in_transaction: bool) -> Vec<Raw> {
    // `rollsafe migrate` sets lock_timeout itself on every attempt and
    // retries (`LockPolicy`), and the rehearsal measures how long each
    // statement runs under its locks: squawk's require-lock-timeout and
    // require-statement-timeout would flag every migration for what the
    // runner and the measurement already do.
    let mut linter = Linter::with_rules(&[], &[Rule::RequireTimeoutSettings]);
    // A transactional migration runs in one transaction (with its history
    // row). squawk's default (15) stands for the server version: every
    // version-dependent rule changes at 11 or 12, below every supported
    // major.
    linter.settings.assume_in_transaction = in_transaction;
    let stmts: Vec<ast::Stmt> = parse.tree().stmts().collect();
    let table_at = |offset: usize| {
        stmts
            .iter()
            .find(|s| {
                let r = s.syntax().text_range();
                usize::from(r.start()) <= offset && offset < usize::from(r.end())
            })
            .and_then(target_table)
    };
    let mut out: Vec<Raw> = linter
        .lint(parse, sql)
        .into_iter()
        .map(|v| {
            let (start, end) = (
                usize::from(v.text_range.start()),
                usize::from(v.text_range.end()),
            );
            Raw {
                rule: v.code.to_string(),
                message: v.message,
                help: v.help,
                start,
                end,
                table: table_at(start),
            }
        })
        .collect();
    for e in parse.errors() {
        let start = usize::from(e.range().start());
        out.push(Raw {
            rule: SYNTAX_ERROR.into(),
            message: format!("squawk's grammar could not parse this: {}", e.message()),
            help: Some(
                "PostgreSQL decides when the migration is rehearsed; squawk's other rules may have missed this statement"
                    .into(),
            ),
            start,
            end: usize::from(e.range().end()),
            table: None,
        });
    }
    out.sort_by_key(|r| r.start);
    out
}

/// The table an `ALTER TABLE` or `CREATE INDEX` names, spelled as the
/// rehearsal names it ([`crate::tables`]: `orders`, `sales.orders`).
fn target_table(stmt: &ast::Stmt) -> Option<String> {
    let relation = match stmt {
        ast::Stmt::AlterTable(s) => s.table_relation_name(),
        ast::Stmt::CreateIndex(s) => s.table_relation_name(),
        _ => None,
    }?;
    let path = relation.table_name_ref()?.path_ref()?;
    // An unquoted identifier is folded to lower case; a quoted one is
    // kept as written (and printed quoted).
    let ident = |s: String| {
        if s.starts_with('"') {
            s
        } else {
            s.to_lowercase()
        }
    };
    let table = ident(path.segment()?.text());
    Some(match path.qualifier() {
        Some(schema) => {
            crate::tables::display(&format!("{}.{table}", ident(schema.segment()?.text())))
        }
        None => table,
    })
}

/// `s` with its whitespace folded, cut to [`EXCERPT_CHARS`].
fn fold(s: &str) -> String {
    let folded = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= EXCERPT_CHARS {
        return folded;
    }
    folded.chars().take(EXCERPT_CHARS - 1).collect::<String>() + "…"
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The file name the lint tests (here and `static`'s) give.
    pub(crate) const FILE: &str = "migrations/V4__bad.sql";

    /// The rules of `ws`, in order.
    pub(crate) fn rules(ws: &[Warning]) -> Vec<&str> {
        ws.iter().map(|w| w.rule.as_str()).collect()
    }

    #[test]
    fn what_rollsafe_does_is_what_squawk_assumes() {
        // One transaction per migration: a table created in the file is
        // new (no index warning), CONCURRENTLY cannot work.
        let ws = lint(
            FILE,
            "CREATE TABLE t (id bigint PRIMARY KEY, x bigint);\nCREATE INDEX t_x ON t (x);",
            true,
        );
        assert_eq!(rules(&ws), Vec::<&str>::new(), "{ws:#?}");
        let ws = lint(
            FILE,
            "SELECT 1;\nCREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (x);",
            true,
        );
        assert_eq!(rules(&ws), ["ban-concurrent-index-creation-in-transaction"]);
        assert_eq!((ws[0].location.line, ws[0].statement), (2, Some(1)));
        // A readiness column NOT NULL with a constant default is not
        // flagged at all (no rewrite since PostgreSQL 11).
        let ready =
            "ALTER TABLE customer_addresses ADD COLUMN is_ready boolean NOT NULL DEFAULT true;";
        assert_eq!(rules(&lint(FILE, ready, true)), Vec::<&str>::new());
        // Ignore comments work as in squawk.
        let ws = lint(
            FILE,
            "-- squawk-ignore require-concurrent-index-creation\nCREATE INDEX i ON t (x);",
            true,
        );
        assert!(ws.is_empty(), "{ws:#?}");
    }

    #[test]
    fn a_file_squawk_cannot_parse_is_a_warning_never_a_panic() {
        let ws = lint(
            FILE,
            "SELECT 1;\nCREATE TABLE t (a text,);\nSELECT 2;",
            true,
        );
        assert_eq!(rules(&ws), [SYNTAX_ERROR]);
        assert_eq!((ws[0].location.line, ws[0].statement), (2, Some(1)));
        let ws = lint(FILE, "SELECT 1;\nSELECT 'never closed;", true);
        assert_eq!(rules(&ws), [NOT_LINTED]);
        assert!(ws[0].message.contains("never closes"), "{}", ws[0].message);
        assert_eq!(ws[0].statement, None);
        let deep = format!("SELECT {}1{};", "(".repeat(20_000), ")".repeat(20_000));
        assert_eq!(rules(&lint(FILE, &deep, true)), [NOT_LINTED]);
    }
}

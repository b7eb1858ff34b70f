//! Applying a file that runs outside a transaction (`-- rollsafe:no-transaction`,
//! or a file its tool does not wrap: [`crate::catalog::Execution`]):
//! statement by statement, converging when it is run again after a failure
//! or a kill.
//!
//! Such a file cannot be rolled back as a whole: a run that stops half-way
//! leaves its first statements applied and no history row. The next run
//! starts again from the first statement, so every statement must be
//! *re-runnable*: applying it to a database where it already took effect
//! must succeed and change nothing. [`plan_steps`] judges that before
//! anything runs, with squawk's grammar, conservatively (an allow-list;
//! anything it does not recognise is refused with its line and the way to
//! write it). The rule:
//!
//! - `CREATE … IF NOT EXISTS` and `CREATE OR REPLACE …`;
//! - `DROP … IF EXISTS`;
//! - `ALTER TABLE` whose every action is `ADD [COLUMN] IF NOT EXISTS`,
//!   `DROP [COLUMN|CONSTRAINT] IF EXISTS`, `VALIDATE CONSTRAINT`,
//!   `ADD CONSTRAINT c …` after `DROP CONSTRAINT IF EXISTS c` in the same
//!   statement (one statement is atomic, so the pair converges),
//!   `ALTER [COLUMN] … SET|DROP DEFAULT`, `… SET|DROP NOT NULL`,
//!   `… SET STATISTICS`, `SET (…)`, `RESET (…)`, `ENABLE|DISABLE TRIGGER`
//!   (each leaves the same state however often it runs);
//! - `ALTER TYPE … ADD VALUE IF NOT EXISTS`;
//! - `ALTER INDEX parent_idx ATTACH PARTITION part_idx` (attaching an
//!   attached index does nothing: the partitioned-index pattern's last step);
//! - `COMMENT ON`, `GRANT`, `REVOKE`, `ANALYZE`, `VACUUM`, `REINDEX`,
//!   `CLUSTER`, `REFRESH MATERIALIZED VIEW`, `SET`, `RESET`;
//! - a plain `SELECT` (it reads only: no `INTO`, no `FOR UPDATE`/`SHARE`,
//!   no data-modifying `WITH`; a function it calls is taken to read only);
//! - a file of one `CREATE INDEX CONCURRENTLY name …` without IF NOT
//!   EXISTS: a failed build leaves at most an INVALID index, dropped
//!   before the next attempt (below);
//! - a `DO` block: what a kill and a rerun leave of it is measured by
//!   verify's kill-and-rerun rehearsal, not read from its text;
//! - the statements inside the file's own `BEGIN` … `COMMIT` (they commit
//!   together or not at all);
//! - everything else (`ADD CONSTRAINT`, `RENAME`, `INSERT`, `UPDATE`,
//!   a statement squawk cannot parse, …) is refused: put it in a
//!   transactional file, or in a `-- rollsafe:batched-update` directive.
//!
//! The one thing `IF NOT EXISTS` gets wrong is an INVALID index left by a
//! failed `CREATE INDEX CONCURRENTLY`: it exists, so a rerun would skip it.
//! Before each attempt of such a statement, an invalid index of that name
//! is dropped with `DROP INDEX CONCURRENTLY` (what GitLab's
//! `add_concurrent_index` does), so the attempt rebuilds it.
//!
//! The statements run through [`super::apply::outside_transaction`], the
//! one way any migration is applied ([`super::apply`]).
//!
//! Not here: the advisory lock and the history row (`migrate`), batched
//! updates (`migrate::backfill`).

pub use super::apply::Step;
use super::apply::{mark_blocks, Block};
use crate::catalog::Migration;
use crate::sql::{self, Statement};

/// Why a no-transaction file is refused before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRerunnable {
    pub line: usize,
    /// The statement on one line, shortened.
    pub statement: String,
    /// What makes it unsafe to run twice, and how to write it instead.
    pub why: String,
}

/// The statements of `m` (a file that runs outside a transaction), each
/// judged re-runnable; the first that is not refuses the whole file.
pub fn plan_steps(m: &Migration) -> Result<Vec<Step>, NotRerunnable> {
    let split = sql::split(&m.sql);
    if !split.exact {
        let first = split.statements.first();
        return Err(NotRerunnable {
            line: first.map_or(1, |s| s.line),
            statement: first.map_or_else(String::new, |s| s.excerpt(80)),
            why: "its statement boundaries cannot be read safely (an unterminated quote or comment, psql commands, or COPY data), so it cannot run one statement at a time".into(),
        });
    }
    let mut steps = steps(&m.sql);
    let alone = steps.len() == 1;
    // The statements inside the file's own BEGIN … COMMIT commit together
    // or not at all: a failure there leaves nothing of them to rerun.
    for step in steps.iter_mut().filter(|s| s.block == Block::Outside) {
        step.concurrent_index = judge(&step.statement, alone).map_err(|why| NotRerunnable {
            line: step.statement.line,
            statement: step.statement.excerpt(80),
            why,
        })?;
    }
    // Its tool's callbacks around it run again on every run, as they do
    // on every run of the tool's own.
    Ok(super::apply::around(m, steps))
}

/// Every statement of a no-transaction file's `sql`, unjudged (verify
/// runs what the file says, re-runnable or not; `migrate` refuses the
/// file first with [`plan_steps`]).
pub fn steps(sql: &str) -> Vec<Step> {
    let mut steps = sql::split(sql)
        .statements
        .into_iter()
        .map(|statement| Step {
            concurrent_index: None,
            statement,
            block: Block::Outside,
            script: None,
        })
        .collect::<Vec<_>>();
    let alone = steps.len() == 1;
    for step in &mut steps {
        step.concurrent_index = judge(&step.statement, alone).ok().flatten();
    }
    mark_blocks(&mut steps);
    steps
}

/// After how many of `steps` (the statements of `m`, outside a
/// transaction) a rehearsal may kill a run to prove that the rerun
/// converges; None when no kill leaves anything partial.
///
/// A file rollsafe's `migrate` applies by its own directive
/// (`-- rollsafe:no-transaction`, batched updates) is rerun from the top
/// after any stop, even one after its last statement and before its
/// history row: 1..=n. A file its own tool sends without a transaction is
/// killed between its statements only (1..n): a tool marks a run that
/// stopped (golang-migrate's dirty flag, Prisma's failed row) instead of
/// rerunning a finished file, and a kill inside the file's own
/// `BEGIN` … `COMMIT` rolls that block back; a file of one statement has
/// nothing partial to leave, unless it commits batches itself (a `DO`
/// block with `COMMIT`): it is run again after it completed.
pub fn kill_points(m: &Migration, steps: &[Step]) -> Option<std::ops::RangeInclusive<usize>> {
    let n = steps.len();
    let by_directive = m.directives.iter().any(|d| {
        matches!(
            d,
            crate::catalog::Directive::NoTransaction | crate::catalog::Directive::BatchedUpdate(_)
        )
    });
    match (by_directive, steps) {
        (true, _) => Some(1..=n.max(1)),
        // A lone block that commits its batches: run again after it
        // completed, it must converge (what a rerun after a kill between
        // two of its batches meets, the rest of them done).
        (false, [lone]) if sql::commits_itself(&lone.statement) => Some(1..=1),
        (false, [] | [_]) => None,
        (false, _) => Some(1..=n - 1),
    }
}

/// The first statement of a transactional file that PostgreSQL refuses
/// inside a transaction because of `CONCURRENTLY`: (line, excerpt).
pub fn concurrently_in_transaction(m: &Migration) -> Option<(usize, String)> {
    if m.runs_outside_transaction() {
        return None;
    }
    sql::split(&m.sql).statements.into_iter().find_map(|s| {
        let has = sql::with_parse(&s.text, |p| {
            use squawk_syntax::ast::AstNode;
            p.tree()
                .syntax()
                .descendants_with_tokens()
                .any(|e| e.kind() == squawk_syntax::SyntaxKind::CONCURRENTLY_KW)
        })
        .unwrap_or(false);
        has.then(|| (s.line, s.excerpt(80)))
    })
}

/// Upper-case words of `text`, whitespace folded (for keyword checks on a
/// piece squawk already delimited; string contents never reach the
/// positions looked at, which are the leading keywords).
fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(|w| w.to_uppercase()).collect()
}

fn starts_with(words: &[String], prefix: &[&str]) -> bool {
    words.len() >= prefix.len() && words.iter().zip(prefix).all(|(w, p)| w == p)
}

const REWRITE_HINT: &str = "a no-transaction file runs again from its first statement after a failure, so each statement must succeed and change nothing when it already took effect: use IF NOT EXISTS / IF EXISTS / OR REPLACE, or move the statement to a transactional migration (a data change: a `-- rollsafe:batched-update` directive)";

/// Ok(Some(index)) for a re-runnable CREATE INDEX CONCURRENTLY, Ok(None)
/// for any other re-runnable statement, Err(why) otherwise. `alone`: the
/// statement is its file's only one.
fn judge(s: &Statement, alone: bool) -> Result<Option<String>, String> {
    use squawk_syntax::ast::{self, AstNode};
    use squawk_syntax::SyntaxKind;
    if !s.parsed {
        return Err(format!(
            "rollsafe's PostgreSQL grammar cannot read it, so it cannot tell whether it is re-runnable; {REWRITE_HINT}"
        ));
    }
    let w = words(&s.text);
    let judged = sql::with_parse(&s.text, |parse| -> Result<Option<String>, String> {
        let Some(stmt) = parse.tree().stmts().next() else {
            return Ok(None);
        };
        let node = stmt.syntax().clone();
        let has_child = |kind: SyntaxKind| node.children().any(|n| n.kind() == kind);
        match &stmt {
            ast::Stmt::Select(_) => {
                // Reads only, unless it writes through a WITH, locks rows
                // or creates a table.
                let writes = node.descendants_with_tokens().any(|e| {
                    matches!(
                        e.kind(),
                        SyntaxKind::INSERT_KW
                            | SyntaxKind::UPDATE_KW
                            | SyntaxKind::DELETE_KW
                            | SyntaxKind::MERGE_KW
                            | SyntaxKind::INTO_KW
                            | SyntaxKind::FOR_KW
                    )
                });
                if writes {
                    Err(format!("this SELECT writes or locks rows (INTO, FOR UPDATE/SHARE, or a data-modifying WITH); {REWRITE_HINT}"))
                } else {
                    Ok(None)
                }
            }
            ast::Stmt::CreateIndex(ci) => create_index(ci, &node, alone),
            ast::Stmt::AlterTable(at) => alter_table(at),
            // A DO block's effect is its body's: what a kill and a rerun
            // leave is measured by verify's kill-and-rerun rehearsal
            // (`apply.rerun-fails`, `apply.rerun-diverges`), not read here.
            _ if starts_with(&w, &["DO"]) => Ok(None),
            _ if starts_with(&w, &["CREATE"]) => {
                if has_child(SyntaxKind::IF_NOT_EXISTS)
                    || has_child(SyntaxKind::OR_REPLACE)
                    || starts_with(&w, &["CREATE", "OR", "REPLACE"])
                {
                    Ok(None)
                } else {
                    Err(format!("CREATE without IF NOT EXISTS or OR REPLACE fails when the object exists; {REWRITE_HINT}"))
                }
            }
            _ if starts_with(&w, &["DROP"]) => {
                if has_child(SyntaxKind::IF_EXISTS) {
                    Ok(None)
                } else {
                    Err(format!("DROP without IF EXISTS fails when the object is already gone; {REWRITE_HINT}"))
                }
            }
            _ => {
                const IDEMPOTENT: &[&[&str]] = &[
                    &["COMMENT", "ON"],
                    &["GRANT"],
                    &["REVOKE"],
                    &["ANALYZE"],
                    &["ANALYSE"],
                    &["VACUUM"],
                    &["REINDEX"],
                    &["CLUSTER"],
                    &["REFRESH", "MATERIALIZED", "VIEW"],
                    &["SET"],
                    &["RESET"],
                ];
                let adds_enum_value_if_missing = starts_with(&w, &["ALTER", "TYPE"])
                    && w.windows(5)
                        .any(|x| x == ["ADD", "VALUE", "IF", "NOT", "EXISTS"]);
                if adds_enum_value_if_missing
                    || super::partitioned_index::attaches_an_index_partition(&w)
                    || IDEMPOTENT.iter().any(|p| starts_with(&w, p))
                {
                    Ok(None)
                } else {
                    Err(format!(
                        "rollsafe cannot tell that `{}` is re-runnable; {REWRITE_HINT}",
                        w.iter().take(2).cloned().collect::<Vec<_>>().join(" ")
                    ))
                }
            }
        }
    });
    judged.map_err(|e| format!("{e}; {REWRITE_HINT}"))?
}

/// [`judge`] of a CREATE INDEX: Ok(Some(name)) built concurrently.
fn create_index(
    ci: &squawk_syntax::ast::CreateIndex,
    node: &squawk_syntax::SyntaxNode,
    alone: bool,
) -> Result<Option<String>, String> {
    use squawk_syntax::SyntaxKind;
    let concurrent = ci.concurrently_token().is_some();
    // A file of this one statement, built concurrently, fails
    // leaving at most an INVALID index, which the next run
    // drops before it builds again: it converges without IF
    // NOT EXISTS.
    if ci.if_not_exists().is_none() && !(alone && concurrent) {
        return Err(format!(
            "CREATE INDEX without IF NOT EXISTS fails when the index exists; {REWRITE_HINT}"
        ));
    }
    if !concurrent {
        return Ok(None);
    }
    // The index name: the first element after INDEX,
    // CONCURRENTLY and IF NOT EXISTS.
    let name = node
        .children_with_tokens()
        .skip_while(|e| e.kind() != SyntaxKind::INDEX_KW)
        .skip(1)
        .find(|e| {
            !e.kind().is_trivia()
                && !matches!(
                    e.kind(),
                    SyntaxKind::CONCURRENTLY_KW | SyntaxKind::IF_NOT_EXISTS
                )
        })
        .filter(|e| e.kind() != SyntaxKind::ON_KW)
        .map(|e| e.to_string().trim().to_string());
    match name {
        Some(n) if !n.is_empty() => Ok(Some(n)),
        _ => Err("CREATE INDEX CONCURRENTLY needs an index name here (a rerun must find the index it built)".into()),
    }
}

/// [`judge`] of an ALTER TABLE: every action re-runnable.
fn alter_table(at: &squawk_syntax::ast::AlterTable) -> Result<Option<String>, String> {
    use squawk_syntax::ast::AstNode;
    // Constraints this statement drops IF EXISTS before it adds
    // them again: the pair is re-runnable as one statement.
    let mut dropped: Vec<String> = Vec::new();
    for action in at.actions() {
        let a = words(&action.syntax().text().to_string());
        if starts_with(&a, &["DROP", "CONSTRAINT", "IF", "EXISTS"]) {
            if let Some(name) = a.get(4) {
                dropped.push(name.clone());
            }
        }
        let re_added = starts_with(&a, &["ADD", "CONSTRAINT"])
            && a.get(2).is_some_and(|n| dropped.contains(n));
        if !re_added && !action_is_rerunnable(&a) {
            return Err(format!(
                "ALTER TABLE action `{}` is not re-runnable; {REWRITE_HINT}",
                a.join(" ")
            ));
        }
    }
    Ok(None)
}

/// One `ALTER TABLE` action (upper-case words) leaves the same state
/// however often it runs.
fn action_is_rerunnable(a: &[String]) -> bool {
    const PREFIXES: &[&[&str]] = &[
        &["ADD", "COLUMN", "IF", "NOT", "EXISTS"],
        &["ADD", "IF", "NOT", "EXISTS"],
        &["DROP", "COLUMN", "IF", "EXISTS"],
        &["DROP", "CONSTRAINT", "IF", "EXISTS"],
        &["DROP", "IF", "EXISTS"],
        &["VALIDATE", "CONSTRAINT"],
        &["SET", "("],
        &["RESET", "("],
        &["ENABLE", "TRIGGER"],
        &["DISABLE", "TRIGGER"],
    ];
    if PREFIXES.iter().any(|p| starts_with(a, p)) {
        return true;
    }
    // SET (…) may be written without a space before the parenthesis.
    if a.first()
        .is_some_and(|w| w.starts_with("SET(") || w.starts_with("RESET("))
    {
        return true;
    }
    // ALTER [COLUMN] <col> SET|DROP DEFAULT | SET|DROP NOT NULL | SET STATISTICS
    if starts_with(a, &["ALTER"]) {
        let rest = if a.get(1).is_some_and(|w| w == "COLUMN") {
            &a[3.min(a.len())..]
        } else {
            &a[2.min(a.len())..]
        };
        return [
            &["SET", "DEFAULT"][..],
            &["DROP", "DEFAULT"],
            &["SET", "NOT", "NULL"],
            &["DROP", "NOT", "NULL"],
            &["SET", "STATISTICS"],
        ]
        .iter()
        .any(|p| starts_with(rest, p));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn migration(sql: &str) -> Migration {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("V1__x.sql"), sql).unwrap();
        Catalog::from_dir(dir.path()).unwrap().migrations()[0].clone()
    }

    #[test]
    fn rerunnable_statements_pass_and_name_concurrent_indexes() {
        let m = migration(
            "-- rollsafe:no-transaction\n\
             CREATE INDEX CONCURRENTLY IF NOT EXISTS items_a ON items (a);\n\
             CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS \"Items_B\" ON items (b) WHERE b > 0;\n\
             CREATE TABLE IF NOT EXISTS t (id int);\n\
             CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; SELECT 2 $$;\n\
             ALTER TABLE items ADD COLUMN IF NOT EXISTS c int, ALTER COLUMN c SET DEFAULT 0;\n\
             ALTER TABLE items VALIDATE CONSTRAINT items_c_check;\n\
             ALTER TABLE items DROP CONSTRAINT IF EXISTS c_pos, ADD CONSTRAINT c_pos CHECK (c > 0) NOT VALID;\n\
             DROP INDEX CONCURRENTLY IF EXISTS old_idx;\n\
             COMMENT ON TABLE items IS 'x';\n\
             ALTER TYPE mood ADD VALUE IF NOT EXISTS 'ok';\n\
             SELECT count(*) FROM items WHERE a > 0;\n\
             CLUSTER items USING items_a;\n\
             ALTER INDEX billing.events_day_idx ATTACH PARTITION billing.events_2026_day_idx;\n",
        );
        let steps = plan_steps(&m).unwrap();
        assert_eq!(steps.len(), 13);
        assert_eq!(steps[0].concurrent_index.as_deref(), Some("items_a"));
        assert_eq!(steps[1].concurrent_index.as_deref(), Some("\"Items_B\""));
        assert!(steps[2..].iter().all(|s| s.concurrent_index.is_none()));
        assert_eq!(steps[3].statement.line, 5);
    }

    #[test]
    fn non_rerunnable_statements_are_refused_with_their_line() {
        for (sql, line, needle) in [
            (
                "COMMENT ON TABLE t IS 'x';\nCREATE INDEX CONCURRENTLY i ON t (a);",
                3,
                "IF NOT EXISTS",
            ),
            ("COMMENT ON TABLE t IS 'x';\nALTER TABLE t ADD CONSTRAINT c CHECK (a > 0) NOT VALID;", 3, "ADD CONSTRAINT"),
            ("UPDATE t SET a = 1;", 2, "batched-update"),
            ("DROP TABLE t;", 2, "IF EXISTS"),
            (
                "ALTER TABLE t DROP CONSTRAINT IF EXISTS other, ADD CONSTRAINT c CHECK (a > 0);",
                2,
                "ADD CONSTRAINT",
            ),
            ("ALTER TABLE t RENAME COLUMN a TO b;", 2, "RENAME"),
            ("SELECT * INTO t2 FROM t;", 2, "cannot tell"),
            ("SELECT * FROM t FOR UPDATE;", 2, "SELECT writes"),
            (
                "WITH gone AS (DELETE FROM t RETURNING 1) SELECT count(*) FROM gone;",
                2,
                "SELECT writes",
            ),
        ] {
            let m = migration(&format!("-- rollsafe:no-transaction\n{sql}"));
            let err = plan_steps(&m).unwrap_err();
            assert_eq!(err.line, line, "{sql}: {err:?}");
            assert!(err.why.contains(needle), "{sql}: {err:?}");
        }
    }

    #[test]
    fn what_converges_without_its_text_saying_so_is_accepted() {
        // A lone concurrent build: a failure leaves an INVALID index,
        // dropped before the next attempt.
        let m = migration(
            "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY \"Orders_Day\" ON orders (day);",
        );
        let steps = plan_steps(&m).unwrap();
        assert_eq!(steps[0].concurrent_index.as_deref(), Some("\"Orders_Day\""));
        // A DO block is measured by the kill-and-rerun rehearsal; the
        // statements inside the file's own BEGIN … COMMIT commit together.
        let m = migration(
            "-- rollsafe:no-transaction\n\
             DO $$ BEGIN PERFORM 1; COMMIT; END $$;\n\
             BEGIN;\n\
             SET LOCAL lock_timeout = '1s';\n\
             CREATE TYPE tier AS ENUM ('a');\n\
             COMMIT;\n",
        );
        let steps = plan_steps(&m).unwrap();
        let blocks: Vec<Block> = steps.iter().map(|s| s.block).collect();
        assert_eq!(
            blocks,
            [
                Block::Outside,
                Block::Opens,
                Block::Inside,
                Block::Inside,
                Block::Closes
            ]
        );
        // rollsafe's own directive is rerun after a complete run; a lone
        // statement its tool sends has nothing partial to leave.
        assert_eq!(kill_points(&m, &steps), Some(1..=5));
    }

    #[test]
    fn concurrently_in_a_transactional_file_is_found() {
        let m = migration("SELECT 1;\nCREATE INDEX CONCURRENTLY i ON t (a);");
        assert_eq!(concurrently_in_transaction(&m).map(|(l, _)| l), Some(2));
        let m = migration(
            "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (a);",
        );
        assert_eq!(concurrently_in_transaction(&m), None);
        let m = migration("CREATE INDEX i ON t (a);");
        assert_eq!(concurrently_in_transaction(&m), None);
    }
}

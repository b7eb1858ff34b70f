//! Which table locks a migration's statements need, and who holds a lock
//! that would make them wait: what lets `rollsafe migrate` wait for a long
//! transaction *without queueing* the app behind it.
//!
//! A lock request that waits queues every later conflicting request on the
//! table, so an `ALTER TABLE` waiting behind a long read transaction stalls
//! every reader for as long as it waits. Looking first avoids that: if a
//! session already holds a conflicting lock (`pg_locks`, `granted`, same
//! relation, a mode PostgreSQL's conflict table says conflicts), requesting
//! now would only queue; [`Gate::holder`] names it, and the lock policy
//! polls instead of requesting (`lock_policy`).
//!
//! - [`of_sql`] reads the modes from the statements with squawk's grammar
//!   (the splitter's, [`crate::sql`]), as PostgreSQL's manual gives them per
//!   command: most `ALTER TABLE` actions ACCESS EXCLUSIVE; `VALIDATE
//!   CONSTRAINT`, `SET STATISTICS`, storage parameters SHARE UPDATE
//!   EXCLUSIVE; a foreign key and `ENABLE|DISABLE TRIGGER` SHARE ROW
//!   EXCLUSIVE (the referenced table too); `CREATE INDEX` SHARE,
//!   `CONCURRENTLY` SHARE UPDATE EXCLUSIVE; `DROP`, `TRUNCATE`, `VACUUM
//!   FULL`, `CLUSTER`, `REINDEX`, policies and rules ACCESS EXCLUSIVE;
//!   `LOCK TABLE` its mode; DML ROW EXCLUSIVE on its target. A statement
//!   it cannot place (a `DO` block, a function call, a statement the grammar
//!   does not read) is listed as unknown: its locks are still bounded by
//!   each attempt's `lock_timeout`, only not looked at beforehand.
//! - [`Gate`] looks on its own connection. The relations looked at are the
//!   named ones, their partitions and inheritance children (a lock on a
//!   parent is taken on each), and an index's table. A holder whose
//!   transaction is younger than one attempt is not waited for: it is most
//!   likely a short statement that ends within the attempt, and on a busy
//!   table there is always one (waiting for none would never end); if it
//!   does not end, the attempt times out and backs off, which costs the app
//!   at most that one attempt.
//!
//! Never printed: another session's SQL text (it may carry data). A holder
//! is named by pid, user, application, state and transaction age.
//!
//! Not here: the retry loop (`lock_policy`), applying (`migrate`).

use std::collections::BTreeMap;
use std::time::Duration;

use postgres::Client;
use squawk_syntax::ast::{self, AstNode};
use squawk_syntax::{SyntaxKind, SyntaxNode};

use crate::pg::lock_modes;
use crate::sql::{self, Statement};

const ACCESS_SHARE: &str = "AccessShareLock";
const ROW_EXCLUSIVE: &str = "RowExclusiveLock";
const SHARE_UPDATE_EXCLUSIVE: &str = "ShareUpdateExclusiveLock";
const SHARE: &str = "ShareLock";
const SHARE_ROW_EXCLUSIVE: &str = "ShareRowExclusiveLock";
const EXCLUSIVE: &str = "ExclusiveLock";
const ACCESS_EXCLUSIVE: &str = "AccessExclusiveLock";

/// One lock a statement takes on a named relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLock {
    /// The relation as written (qualified and quoted as in the file):
    /// PostgreSQL resolves it (`to_regclass`) exactly as the statement will.
    pub relation: String,
    /// pg_locks spelling (`AccessExclusiveLock`).
    pub mode: &'static str,
    /// 1-based line of the statement in the file.
    pub line: usize,
}

/// The table locks a migration's statements take, as far as they can be
/// read from the text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocksNeeded {
    pub locks: Vec<TableLock>,
    /// Lines of statements whose locks are not known.
    pub unknown: Vec<usize>,
}

impl LocksNeeded {
    /// Whether a waiting request for one of these locks would queue an
    /// app's reads (ACCESS SHARE) or writes (ROW EXCLUSIVE): then waiting
    /// without queueing matters. Locks that queue neither (SHARE UPDATE
    /// EXCLUSIVE: `CREATE INDEX CONCURRENTLY`, `VALIDATE CONSTRAINT`) keep
    /// the stepped attempts, which also leave room for what they wait on
    /// besides table locks (older transactions, counted against
    /// `lock_timeout`).
    pub fn queue_the_app(&self) -> bool {
        let app = lock_modes::Needs::unknown();
        self.locks.iter().any(|l| app.blocks(&l.relation, l.mode))
    }

    /// The strongest mode per relation, in the order first named.
    pub fn per_relation(&self) -> Vec<(String, &'static str)> {
        let mut order: Vec<String> = Vec::new();
        let mut strongest: BTreeMap<String, &'static str> = BTreeMap::new();
        for l in &self.locks {
            match strongest.get(&l.relation) {
                None => {
                    order.push(l.relation.clone());
                    strongest.insert(l.relation.clone(), l.mode);
                }
                Some(m) if lock_modes::strongest([*m, l.mode]) == Some(l.mode) => {
                    strongest.insert(l.relation.clone(), l.mode);
                }
                Some(_) => {}
            }
        }
        order
            .into_iter()
            .map(|r| {
                let m = strongest[&r];
                (r, m)
            })
            .collect()
    }

    /// "ACCESS EXCLUSIVE on attached_functions; statements at lines 4, 9
    /// not read (their locks are bounded by lock_timeout only)", for the
    /// plan.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .per_relation()
            .into_iter()
            .map(|(r, m)| format!("{} on {r}", lock_modes::sql_name(m)))
            .collect();
        if parts.is_empty() {
            parts.push("no lock on an existing table".into());
        }
        let mut out = parts.join(", ");
        if !self.unknown.is_empty() {
            out.push_str(&format!(
                "; line(s) {} not read (their locks are bounded by lock_timeout, not looked at first)",
                self.unknown
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out
    }
}

/// The locks of every statement of a migration file.
pub fn of_sql(sql_text: &str) -> LocksNeeded {
    of_statements(&sql::split(sql_text).statements)
}

/// The locks of `statements` (one no-transaction step, or a whole file).
pub fn of_statements(statements: &[Statement]) -> LocksNeeded {
    let mut needed = LocksNeeded::default();
    for s in statements {
        match of_statement(s) {
            Some(locks) => needed.locks.extend(locks),
            None => needed.unknown.push(s.line),
        }
    }
    needed
}

/// The locks one statement takes on named relations; None when they
/// cannot be read from its text.
pub fn of_statement(s: &Statement) -> Option<Vec<TableLock>> {
    if !s.parsed {
        return None;
    }
    let named = sql::with_parse(&s.text, |p| {
        let stmt = p.tree().stmts().next()?;
        classify(&stmt)
    })
    .ok()??;
    Some(
        named
            .into_iter()
            .map(|(relation, mode)| TableLock {
                relation,
                mode,
                line: s.line,
            })
            .collect(),
    )
}

/// The text of each descendant of `node` of kind `kind` (a name reference),
/// trimmed.
fn names(node: &SyntaxNode, kinds: &[SyntaxKind]) -> Vec<String> {
    node.descendants()
        .filter(|n| kinds.contains(&n.kind()))
        .map(|n| n.text().to_string().trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Direct name children (not those inside a nested clause).
fn child_names(node: &SyntaxNode, kinds: &[SyntaxKind]) -> Vec<String> {
    node.children()
        .filter(|n| kinds.contains(&n.kind()))
        .map(|n| n.text().to_string().trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn has_token(node: &SyntaxNode, kind: SyntaxKind) -> bool {
    node.descendants_with_tokens().any(|e| e.kind() == kind)
}

/// Upper-case words, whitespace folded.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(|w| w.to_uppercase()).collect()
}

/// Tables a foreign key in `node` references: SHARE ROW EXCLUSIVE on each.
fn referenced(node: &SyntaxNode) -> Vec<(String, &'static str)> {
    node.descendants()
        .filter(|n| {
            matches!(
                n.kind(),
                SyntaxKind::FOREIGN_KEY_CONSTRAINT | SyntaxKind::REFERENCES_CONSTRAINT
            )
        })
        .flat_map(|n| child_names(&n, &[SyntaxKind::TABLE_NAME_REF]))
        .map(|t| (t, SHARE_ROW_EXCLUSIVE))
        .collect()
}

/// The relation a statement names, as `to_regclass` reads it: without
/// `ONLY` before it or `*` after it (`ON ONLY billing.events` locks
/// `billing.events`, and the lock it needs is the parent's).
fn relation(written: &str) -> String {
    let text = written.trim();
    let text = match text.get(..5) {
        Some(kw) if kw.eq_ignore_ascii_case("ONLY ") => text[5..].trim_start(),
        _ => text,
    };
    text.trim_end_matches('*').trim_end().to_string()
}

fn each(names: Vec<String>, mode: &'static str) -> Vec<(String, &'static str)> {
    names.into_iter().map(|n| (n, mode)).collect()
}

/// (relation, mode) pairs of one statement; None when unknown.
fn classify(stmt: &ast::Stmt) -> Option<Vec<(String, &'static str)>> {
    use SyntaxKind as K;
    let node = stmt.syntax();
    let table_refs = [K::TABLE_NAME_REF, K::RELATION_NAME_REF];
    Some(
        match stmt {
            ast::Stmt::AlterTable(at) => {
                let table = relation(&at.table_relation_name()?.syntax().text().to_string());
                let mode = at
                    .actions()
                    .map(|a| alter_table_action_mode(&words(&a.syntax().text().to_string())))
                    .max_by_key(|m| lock_modes::MODES.iter().position(|x| x == m))
                    .unwrap_or(ACCESS_EXCLUSIVE);
                let mut out = vec![(table.trim().to_string(), mode)];
                out.extend(referenced(node));
                out
            }
            ast::Stmt::CreateIndex(ci) => {
                let table = relation(&ci.table_relation_name()?.syntax().text().to_string());
                let mode = if ci.concurrently_token().is_some() {
                    SHARE_UPDATE_EXCLUSIVE
                } else {
                    SHARE
                };
                vec![(table.trim().to_string(), mode)]
            }
            ast::Stmt::CreateTable(_) => {
                let mut out = referenced(node);
                for p in node.children().filter(|n| n.kind() == K::PARTITION_OF) {
                    out.extend(each(
                        child_names(&p, &[K::TABLE_NAME_REF]),
                        ACCESS_EXCLUSIVE,
                    ));
                }
                out
            }
            ast::Stmt::DropIndex(di) => {
                let mode = if di.concurrently_token().is_some() {
                    SHARE_UPDATE_EXCLUSIVE
                } else {
                    ACCESS_EXCLUSIVE
                };
                each(child_names(node, &[K::INDEX_REF]), mode)
            }
            ast::Stmt::DropTable(_)
            | ast::Stmt::Truncate(_)
            | ast::Stmt::Cluster(_)
            | ast::Stmt::DropTrigger(_)
            | ast::Stmt::CreatePolicy(_)
            | ast::Stmt::AlterPolicy(_)
            | ast::Stmt::DropPolicy(_)
            | ast::Stmt::CreateRule(_) => {
                let tables = names(node, &table_refs);
                if tables.is_empty() {
                    return None;
                }
                each(tables, ACCESS_EXCLUSIVE)
            }
            ast::Stmt::CreateTrigger(_) => each(names(node, &table_refs), SHARE_ROW_EXCLUSIVE),
            ast::Stmt::Refresh(r) => {
                let mode = if r.concurrently_token().is_some() {
                    EXCLUSIVE
                } else {
                    ACCESS_EXCLUSIVE
                };
                each(names(node, &[K::VIEW_REF]), mode)
            }
            ast::Stmt::Reindex(_) => reindex(node)?,
            ast::Stmt::Vacuum(_) | ast::Stmt::Analyze(_) => vacuum(node)?,
            ast::Stmt::Lock(l) => {
                let mode = match l.lock_mode_clause() {
                    Some(c) => lock_clause_mode(&words(&c.syntax().text().to_string()))?,
                    None => ACCESS_EXCLUSIVE,
                };
                each(names(node, &[K::RELATION_NAME_REF]), mode)
            }
            ast::Stmt::Insert(i) => each(
                vec![i.relation_name_ref()?.syntax().text().to_string()],
                ROW_EXCLUSIVE,
            ),
            ast::Stmt::Update(u) => each(
                vec![u.relation_name()?.syntax().text().to_string()],
                ROW_EXCLUSIVE,
            ),
            ast::Stmt::Delete(d) => each(
                vec![d.relation_name()?.syntax().text().to_string()],
                ROW_EXCLUSIVE,
            ),
            // Objects of their own, or catalogue rows: no lock an app's
            // statement on an existing table would wait for (a view's or a
            // comment's locks on tables queue no reader or writer).
            ast::Stmt::CreateFunction(_)
            | ast::Stmt::CreateProcedure(_)
            | ast::Stmt::CreateType(_)
            | ast::Stmt::CreateDomain(_)
            | ast::Stmt::CreateSchema(_)
            | ast::Stmt::CreateSequence(_)
            | ast::Stmt::CreateExtension(_)
            | ast::Stmt::CreateView(_)
            | ast::Stmt::CommentOn(_)
            | ast::Stmt::Grant(_)
            | ast::Stmt::Revoke(_)
            | ast::Stmt::Set(_)
            | ast::Stmt::Reset(_)
            | ast::Stmt::AlterType(_)
            | ast::Stmt::AlterSequence(_)
            | ast::Stmt::AlterFunction(_) => Vec::new(),
            _ => return None,
        }
        .into_iter()
        .map(|(r, m)| (r.trim().to_string(), m))
        .collect(),
    )
}

/// REINDEX: its tables and indexes; None for a SCHEMA, DATABASE or SYSTEM.
fn reindex(node: &SyntaxNode) -> Option<Vec<(String, &'static str)>> {
    use SyntaxKind as K;
    let mode = if has_token(node, K::CONCURRENTLY_KW) {
        SHARE_UPDATE_EXCLUSIVE
    } else {
        // SHARE on the table and ACCESS EXCLUSIVE on each index
        // rebuilt, which every reader of the table also locks.
        ACCESS_EXCLUSIVE
    };
    let rels = names(node, &[K::TABLE_NAME_REF, K::INDEX_REF]);
    if rels.is_empty() {
        return None; // SCHEMA, DATABASE, SYSTEM
    }
    Some(each(rels, mode))
}

/// VACUUM (FULL) and ANALYZE: their tables; None for the whole database.
fn vacuum(node: &SyntaxNode) -> Option<Vec<(String, &'static str)>> {
    use SyntaxKind as K;
    let full = has_token(node, K::FULL_KW)
        || node
            .descendants()
            .filter(|n| n.kind() == K::VACUUM_OPTION_NAME)
            .any(|n| n.text().to_string().trim().eq_ignore_ascii_case("full"));
    let tables = names(node, &[K::TABLE_NAME_REF]);
    if tables.is_empty() {
        return None; // every table of the database
    }
    Some(each(
        tables,
        if full {
            ACCESS_EXCLUSIVE
        } else {
            SHARE_UPDATE_EXCLUSIVE
        },
    ))
}

/// The mode of one `ALTER TABLE` action (upper-case words), per the
/// manual's ALTER TABLE page; ACCESS EXCLUSIVE unless known weaker.
fn alter_table_action_mode(a: &[String]) -> &'static str {
    let starts = |p: &[&str]| a.len() >= p.len() && a.iter().zip(p).all(|(w, p)| w == p);
    let has = |p: &[&str]| {
        a.windows(p.len())
            .any(|w| w.iter().zip(p).all(|(w, p)| w == p))
    };
    let first = a.first().map(String::as_str).unwrap_or("");
    if starts(&["VALIDATE", "CONSTRAINT"])
        || starts(&["CLUSTER", "ON"])
        || starts(&["SET", "WITHOUT", "CLUSTER"])
        || first.starts_with("SET(")
        || first.starts_with("RESET(")
        || starts(&["SET", "("])
        || starts(&["RESET", "("])
        || (starts(&["ALTER"]) && has(&["SET", "STATISTICS"]))
        || (starts(&["DETACH", "PARTITION"]) && has(&["CONCURRENTLY"]))
    {
        SHARE_UPDATE_EXCLUSIVE
    } else if ((starts(&["ENABLE"]) || starts(&["DISABLE"])) && has(&["TRIGGER"]))
        || (starts(&["ADD"]) && has(&["FOREIGN", "KEY"]))
    {
        SHARE_ROW_EXCLUSIVE
    } else {
        ACCESS_EXCLUSIVE
    }
}

/// `IN SHARE ROW EXCLUSIVE MODE` → `ShareRowExclusiveLock`.
fn lock_clause_mode(w: &[String]) -> Option<&'static str> {
    let inner: Vec<&str> = w
        .iter()
        .map(String::as_str)
        .filter(|w| *w != "IN" && *w != "MODE")
        .collect();
    Some(match inner.as_slice() {
        ["ACCESS", "SHARE"] => ACCESS_SHARE,
        ["ROW", "SHARE"] => "RowShareLock",
        ["ROW", "EXCLUSIVE"] => ROW_EXCLUSIVE,
        ["SHARE", "UPDATE", "EXCLUSIVE"] => SHARE_UPDATE_EXCLUSIVE,
        ["SHARE"] => SHARE,
        ["SHARE", "ROW", "EXCLUSIVE"] => SHARE_ROW_EXCLUSIVE,
        ["EXCLUSIVE"] => EXCLUSIVE,
        ["ACCESS", "EXCLUSIVE"] => ACCESS_EXCLUSIVE,
        _ => return None,
    })
}

/// A session holding a lock that conflicts with one we need.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    /// None for a prepared transaction (it has no backend).
    pub pid: Option<i32>,
    pub user: String,
    pub application: String,
    /// `idle in transaction`, `active`, … (empty when not visible).
    pub state: String,
    pub backend_type: String,
    /// How long its transaction has been open; None when not visible to
    /// our role (another user's session without pg_read_all_stats).
    pub transaction_age: Option<Duration>,
    /// What it holds, and on what (pg_locks spelling, relation name).
    pub mode: String,
    pub relation: String,
}

impl std::fmt::Display for Holder {
    /// "pid 123 (user app, application `report`, idle in transaction,
    /// transaction open for 12.3s, holds ACCESS SHARE on attached_functions)".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "pid {pid} (")?,
            None => write!(f, "a prepared transaction (")?,
        }
        if !self.user.is_empty() {
            write!(f, "user {}, ", self.user)?;
        }
        write!(f, "application `{}`, ", self.application)?;
        if !self.backend_type.is_empty() && self.backend_type != "client backend" {
            write!(f, "{}, ", self.backend_type)?;
        }
        if !self.state.is_empty() {
            write!(f, "{}, ", self.state)?;
        }
        match self.transaction_age {
            Some(age) => write!(f, "transaction open for {:.1}s, ", age.as_secs_f64())?,
            None => write!(f, "transaction age not visible to this role, ")?,
        }
        write!(
            f,
            "holds {} on {})",
            lock_modes::sql_name(&self.mode),
            self.relation
        )
    }
}

/// Granted relation locks of other sessions on the relations asked for
/// (by name and wanted mode), their partitions and inheritance children,
/// and the table of an index asked for. `$3`: pids not to count (ours).
const HOLDERS_SQL: &str = "
WITH RECURSIVE asked(rel, wanted) AS (
    SELECT to_regclass(a.name)::oid, a.wanted
      FROM unnest($1::text[], $2::text[]) AS a(name, wanted)
     WHERE to_regclass(a.name) IS NOT NULL
), tree(rel, wanted) AS (
    SELECT rel, wanted FROM asked
    UNION
    SELECT x.indrelid, a.wanted FROM asked a JOIN pg_index x ON x.indexrelid = a.rel
    UNION
    SELECT i.inhrelid, t.wanted FROM tree t JOIN pg_inherits i ON i.inhparent = t.rel
)
SELECT l.pid, l.mode, t.wanted, l.relation::regclass::text,
       coalesce(s.usename::text, ''), coalesce(s.application_name, ''),
       coalesce(s.state, ''), coalesce(s.backend_type, ''),
       extract(epoch FROM clock_timestamp() - s.xact_start)::float8
  FROM pg_locks l
  JOIN tree t ON t.rel = l.relation
  LEFT JOIN pg_stat_activity s ON s.pid = l.pid
 WHERE l.locktype = 'relation' AND l.granted
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND (l.pid IS NULL OR NOT l.pid = ANY ($3::int4[]))
 ORDER BY s.xact_start NULLS FIRST";

/// Looks, on a connection of its own, for a session that holds a lock the
/// next attempt would wait for.
pub struct Gate<'a> {
    client: &'a mut Client,
    names: Vec<String>,
    modes: Vec<String>,
    /// Backends not to count: the migrator's (and the gate's own).
    ours: Vec<i32>,
    /// A holder whose transaction is younger is not waited for.
    older_than: Duration,
}

impl<'a> Gate<'a> {
    /// A gate for `needed` on `client`, ignoring `migrator_pid`'s locks;
    /// holders younger than `older_than` are not waited for (see the
    /// module docs).
    pub fn new(
        client: &'a mut Client,
        needed: &LocksNeeded,
        migrator_pid: i32,
        older_than: Duration,
    ) -> Gate<'a> {
        let own: Option<i32> = client
            .query_one("SELECT pg_backend_pid()", &[])
            .ok()
            .map(|r| r.get(0));
        Gate {
            client,
            names: needed.locks.iter().map(|l| l.relation.clone()).collect(),
            modes: needed.locks.iter().map(|l| l.mode.to_string()).collect(),
            ours: std::iter::once(migrator_pid).chain(own).collect(),
            older_than,
        }
    }

    /// Every session holding a lock that conflicts with one we need, the
    /// oldest transaction first.
    pub fn holders(&mut self) -> Result<Vec<Holder>, postgres::Error> {
        if self.names.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .client
            .query(HOLDERS_SQL, &[&self.names, &self.modes, &self.ours])?;
        Ok(rows
            .iter()
            .filter(|r| lock_modes::conflicts(r.get::<_, &str>(1), r.get::<_, &str>(2)))
            // pg_locks and pg_stat_activity are not read as one snapshot: a
            // session shown `idle` (outside any transaction) holds no lock
            // any more; its row is a statement that ended between the two
            // reads (a short read of a live app), not a holder to name.
            .filter(|r| r.get::<_, &str>(6) != "idle")
            .map(|r| Holder {
                pid: r.get(0),
                mode: r.get(1),
                relation: r.get(3),
                user: r.get(4),
                application: r.get(5),
                state: r.get(6),
                backend_type: r.get(7),
                transaction_age: r
                    .get::<_, Option<f64>>(8)
                    .map(|s| Duration::from_secs_f64(s.max(0.0))),
            })
            .collect())
    }

    /// The holder to wait for now, described: the oldest conflicting one
    /// whose transaction is not younger than `older_than` (or whose age
    /// cannot be seen). A failed look is logged and counts as none (the
    /// attempt is still bounded by its lock_timeout).
    pub fn holder(&mut self) -> Option<String> {
        match self.holders() {
            Ok(hs) => hs
                .into_iter()
                .find(|h| h.transaction_age.map_or(true, |a| a >= self.older_than))
                .map(|h| h.to_string()),
            Err(e) => {
                log::warn!(
                    "cannot look for conflicting locks ({}); attempting anyway",
                    crate::errors::one_line(&e)
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modes(sql_text: &str) -> Vec<(String, &'static str)> {
        of_sql(sql_text)
            .per_relation()
            .into_iter()
            .collect::<Vec<_>>()
    }

    #[test]
    fn modes_follow_the_manual_per_command() {
        let af = "attached_functions".to_string();
        // The partitioned-index pattern: the parent's SHARE only, named as
        // to_regclass reads it.
        assert_eq!(
            modes("CREATE INDEX IF NOT EXISTS e_idx ON ONLY billing.events (occurred_on)"),
            [("billing.events".to_string(), SHARE)]
        );
        assert_eq!(
            modes("ALTER TABLE ONLY billing.events ADD CONSTRAINT c CHECK (a > 0) NOT VALID"),
            [("billing.events".to_string(), ACCESS_EXCLUSIVE)]
        );
        assert_eq!(
            modes(
                "ALTER TABLE attached_functions ADD COLUMN is_ready boolean NOT NULL DEFAULT true"
            ),
            [(af.clone(), ACCESS_EXCLUSIVE)]
        );
        assert_eq!(
            modes("ALTER TABLE attached_functions VALIDATE CONSTRAINT c"),
            [(af.clone(), SHARE_UPDATE_EXCLUSIVE)]
        );
        assert_eq!(
            modes(
                "ALTER TABLE a ADD CONSTRAINT f FOREIGN KEY (x) REFERENCES \"B\".c (id) NOT VALID"
            ),
            [
                ("a".to_string(), SHARE_ROW_EXCLUSIVE),
                ("\"B\".c".to_string(), SHARE_ROW_EXCLUSIVE)
            ]
        );
        // The strongest action wins.
        assert_eq!(
            modes("ALTER TABLE a VALIDATE CONSTRAINT c, ALTER COLUMN x SET DEFAULT 0"),
            [("a".to_string(), ACCESS_EXCLUSIVE)]
        );
        assert_eq!(
            modes("CREATE INDEX i ON s.t (a)"),
            [("s.t".to_string(), SHARE)]
        );
        assert_eq!(
            modes("CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (a)"),
            [("t".to_string(), SHARE_UPDATE_EXCLUSIVE)]
        );
        assert_eq!(
            modes("LOCK TABLE a, b IN SHARE ROW EXCLUSIVE MODE"),
            [
                ("a".to_string(), SHARE_ROW_EXCLUSIVE),
                ("b".to_string(), SHARE_ROW_EXCLUSIVE)
            ]
        );
        assert_eq!(
            modes("VACUUM (FULL) t"),
            [("t".to_string(), ACCESS_EXCLUSIVE)]
        );
        assert_eq!(
            modes("VACUUM t"),
            [("t".to_string(), SHARE_UPDATE_EXCLUSIVE)]
        );
        assert_eq!(
            modes("CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1)"),
            [("p".to_string(), ACCESS_EXCLUSIVE)]
        );
        assert_eq!(
            modes("CREATE TABLE x (id int REFERENCES b)"),
            [("b".to_string(), SHARE_ROW_EXCLUSIVE)]
        );
        assert_eq!(
            modes("UPDATE t SET a = 1 FROM u"),
            [("t".to_string(), ROW_EXCLUSIVE)]
        );
        assert_eq!(
            modes("DROP INDEX CONCURRENTLY IF EXISTS i"),
            [("i".to_string(), SHARE_UPDATE_EXCLUSIVE)]
        );
        assert_eq!(
            modes("CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'"),
            []
        );
    }

    #[test]
    fn what_cannot_be_read_is_unknown_and_only_app_blocking_modes_queue_it() {
        let n = of_sql("CREATE TABLE t (id int);\nDO $$ BEGIN PERFORM 1; END $$;\nSELECT f();");
        assert_eq!(n.unknown, [2, 3]);
        assert!(!n.queue_the_app());
        assert!(
            n.describe().contains("line(s) 2, 3 not read"),
            "{}",
            n.describe()
        );
        let v3 = of_sql(
            &crate::catalog::Catalog::embedded()
                .unwrap()
                .get(3)
                .unwrap()
                .sql,
        );
        assert!(v3.queue_the_app());
        assert_eq!(v3.describe(), "ACCESS EXCLUSIVE on attached_functions");
        assert!(!of_sql("CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (a)").queue_the_app());
        assert!(of_sql("CREATE INDEX i ON t (a)").queue_the_app());
    }

    #[test]
    fn a_holder_is_named_without_its_sql() {
        let h = Holder {
            pid: Some(42),
            user: "app".into(),
            application: "report".into(),
            state: "idle in transaction".into(),
            backend_type: "client backend".into(),
            transaction_age: Some(Duration::from_millis(12_340)),
            mode: ACCESS_SHARE.into(),
            relation: "attached_functions".into(),
        };
        assert_eq!(
            h.to_string(),
            "pid 42 (user app, application `report`, idle in transaction, transaction open for 12.3s, holds ACCESS SHARE on attached_functions)"
        );
        // "Without its SQL": a Holder has no field for it, so the claim
        // rests on what the gate reads. pg_stat_activity's `query` column
        // (the holder's SQL text, which may carry literals) must not be
        // among the columns HOLDERS_SQL selects.
        let identifiers: Vec<String> = HOLDERS_SQL
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map(str::to_ascii_lowercase)
            .collect();
        assert!(
            identifiers.iter().any(|i| i == "pg_stat_activity"),
            "the holders query no longer reads pg_stat_activity: this check looks at the wrong query"
        );
        assert!(
            !identifiers.iter().any(|i| i == "query"),
            "the holders query reads pg_stat_activity.query (another session's SQL text): {HOLDERS_SQL}"
        );
    }
}

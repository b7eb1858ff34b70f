//! What a framework's migrate sent, split into its migrations: the
//! statements of the server's log ([`crate::capture::log::Sent`]) in
//! order, each migration ending where the framework records it in its
//! history table, the framework's own bookkeeping left out.
//!
//! Bookkeeping is what touches no table of the project: transaction and
//! session control (`BEGIN`, `SET`, `SHOW`), reads of the system
//! catalogue (introspection) or of nothing (`SELECT 1`, advisory locks,
//! `set_config`), and every statement on the history table or the
//! framework's other tables of its own (Rails' `ar_internal_metadata`).
//! What the framework sent to its own tables that changes them (their
//! `CREATE TABLE`, the history row) is kept apart, per migration
//! ([`SentMigration::records`]), so a database can be left as the
//! framework leaves it. Everything else between two history writes is the
//! second one's migration, as the server received it (an extended-protocol
//! execution's values written in as literals), with the transaction it
//! ran in. A migration that reads rows of the project's tables is a data
//! migration: what it sends depends on the rows, so what it sent to an
//! empty database is kept apart ([`SentMigration::reads_rows`]).
//!
//! Nothing here reads a database or runs a command.

use std::collections::BTreeMap;

use squawk_lexer::TokenKind;

pub use crate::capture::introspect::introspects;
use crate::capture::introspect::{excerpt, is_catalog, mentions, read_relations, words};
use crate::capture::log::{normalise, Sent};
use crate::sql::TransactionControl;

/// What a history write records: its columns and their values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recorded {
    /// Lower case, unquoted.
    pub columns: Vec<String>,
    pub values: Vec<Option<String>>,
}

impl Recorded {
    fn value(&self, column: &str) -> Option<&str> {
        self.columns
            .iter()
            .position(|c| c == column)
            .and_then(|i| self.values.get(i))
            .and_then(|v| v.as_deref())
    }

    /// The migration as the history table keys it: Django's `app.name`,
    /// else the first column a framework keys by (`version_num`,
    /// `version`, `MigrationId`, `name`, `id`), else the first value.
    pub fn key(&self) -> Option<String> {
        if let (Some(app), Some(name)) = (self.value("app"), self.value("name")) {
            return Some(format!("{app}.{name}"));
        }
        [
            "version_num",
            "version",
            "migrationid",
            "name",
            "id",
            "migration",
        ]
        .iter()
        .find_map(|c| self.value(c))
        .or_else(|| self.values.iter().flatten().next().map(String::as_str))
        .map(str::to_string)
    }
}

/// One migration as the server received it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SentMigration {
    /// What the history write recorded ([`Recorded::key`]).
    pub key: String,
    /// Its statements, in order, as sent.
    pub statements: Vec<String>,
    /// Some statement of it ran outside a transaction block.
    pub outside_transaction: bool,
    /// The transaction its statements ran in (a number of this split's),
    /// when all ran in one: consecutive migrations with the same one were
    /// sent in one transaction (Alembic's default).
    pub transaction: Option<usize>,
    /// The first statement that read rows of the project's tables: a
    /// data migration.
    pub reads_rows: Option<String>,
    /// What it sent to the framework's own tables, values written in:
    /// their creation before it, its history write (for the last
    /// migration, what the framework recorded after it too: Rails'
    /// environment row).
    pub records: Vec<String>,
}

/// A migrate run split into migrations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Split {
    pub migrations: Vec<SentMigration>,
    /// Statements of the project's tables sent after the last history
    /// write (no migration to attribute them to).
    pub unattributed: Vec<String>,
    /// Statements the server refused while the command still succeeded
    /// (a framework probing and recovering), left out of every migration.
    pub refused: Vec<String>,
}

/// What one statement is to the split.
enum Role {
    Begin,
    End,
    Bookkeeping,
    /// A statement that creates or writes one of the framework's own
    /// tables, other than a history write.
    OwnTables,
    HistoryWrite(Recorded),
    Work {
        reads_rows: bool,
    },
}

/// Splits `sent` at the writes to `history` (a table name, any schema),
/// with `own_tables` the framework's other tables.
pub fn split(sent: &[Sent], history: &str, own_tables: &[&str]) -> Split {
    let history = history.rsplit('.').next().unwrap_or(history).to_lowercase();
    let mut out = Split::default();
    let mut in_transaction: BTreeMap<&str, usize> = BTreeMap::new();
    let mut transactions = 0;
    let mut pending = SentMigration::default();
    let mut pending_transactions: Vec<Option<usize>> = Vec::new();
    for s in sent {
        let role = role_of(s, &history, own_tables);
        let transaction = in_transaction.get(s.session.as_str()).copied();
        match role {
            Role::Begin => {
                transactions += 1;
                in_transaction.insert(&s.session, transactions);
            }
            Role::End => {
                in_transaction.remove(s.session.as_str());
            }
            Role::Bookkeeping => {}
            Role::OwnTables if s.failed => {}
            Role::OwnTables => pending.records.push(inline_params(s)),
            Role::Work { .. } if s.failed => out.refused.push(excerpt(&s.text)),
            Role::Work { reads_rows } => {
                let text = inline_params(s);
                if reads_rows && pending.reads_rows.is_none() {
                    pending.reads_rows = Some(excerpt(&text));
                }
                pending.outside_transaction |= transaction.is_none();
                pending_transactions.push(transaction);
                pending.statements.push(text);
            }
            Role::HistoryWrite(recorded) => {
                let mut done = std::mem::take(&mut pending);
                done.key = recorded.key().unwrap_or_default();
                if !s.failed {
                    done.records.push(inline_params(s));
                }
                pending_transactions.push(transaction);
                pending_transactions.dedup();
                done.transaction = match pending_transactions.as_slice() {
                    [Some(one)] => Some(*one),
                    _ => None,
                };
                pending_transactions.clear();
                out.migrations.push(done);
            }
        }
    }
    out.unattributed = pending.statements.iter().map(|s| excerpt(s)).collect();
    if let Some(last) = out.migrations.last_mut() {
        last.records.append(&mut pending.records);
    }
    out
}

fn role_of(s: &Sent, history: &str, own_tables: &[&str]) -> Role {
    let statement = crate::sql::Statement {
        text: s.text.clone(),
        start: 0,
        end: s.text.len(),
        line: 1,
        column: 1,
        parsed: true,
    };
    match crate::sql::transaction_control(&statement) {
        Some(TransactionControl::Begin) => return Role::Begin,
        Some(TransactionControl::End) => return Role::End,
        None => {}
    }
    let words = words(&s.text);
    let first = words.first().map(String::as_str).unwrap_or("");
    if matches!(
        first,
        "set"
            | "show"
            | "reset"
            | "discard"
            | "savepoint"
            | "release"
            | "listen"
            | "unlisten"
            | "deallocate"
            | "prepare"
    ) || (first == "rollback" && words.get(1).is_some_and(|w| w == "to"))
    {
        return Role::Bookkeeping;
    }
    let changes = matches!(first, "create" | "alter" | "insert" | "update" | "delete");
    if mentions(&s.text, history) {
        return match first {
            "insert" | "update" => Role::HistoryWrite(recorded(s)),
            _ if changes => Role::OwnTables,
            _ => Role::Bookkeeping,
        };
    }
    if own_tables
        .iter()
        .any(|t| mentions(&s.text, &t.to_lowercase()))
    {
        return match changes {
            true => Role::OwnTables,
            false => Role::Bookkeeping,
        };
    }
    let reads = matches!(first, "select" | "with" | "table" | "values")
        && crate::sql::classify::classify(&s.text) == crate::sql::classify::Class::Read;
    if reads {
        return match read_relations(&s.text).iter().any(|n| !is_catalog(n)) {
            true => Role::Work { reads_rows: true },
            false => Role::Bookkeeping,
        };
    }
    Role::Work { reads_rows: false }
}

/// The columns and values of a history `INSERT` (its first row) or
/// `UPDATE … SET`, literals and bound values alike.
fn recorded(s: &Sent) -> Recorded {
    let (text, params) = match s.simple {
        true => {
            let n = normalise(&s.text);
            (n.text, n.params)
        }
        false => (s.text.clone(), s.params.clone()),
    };
    let value = |expr: &str| -> Option<String> {
        let expr = expr.trim();
        let digits = expr.strip_prefix('$')?;
        let end = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        let n: usize = digits[..end].parse().ok()?;
        params.get(n.checked_sub(1)?).cloned().flatten()
    };
    let lower = text.to_ascii_lowercase();
    if lower.trim_start().starts_with("update") {
        let Some(set) = lower.find(" set ") else {
            return Recorded::default();
        };
        let rest = &text[set + 5..];
        let end = rest
            .to_ascii_lowercase()
            .find(" where ")
            .or_else(|| rest.to_ascii_lowercase().find(" returning "))
            .unwrap_or(rest.len());
        let mut r = Recorded::default();
        for pair in top_level(&rest[..end]) {
            if let Some((column, expr)) = pair.split_once('=') {
                r.columns.push(unquote(column));
                r.values.push(value(expr));
            }
        }
        return r;
    }
    let Some(values_at) = lower.find("values") else {
        return Recorded::default();
    };
    let columns = text[..values_at]
        .find('(')
        .and_then(|open| parenthesised(&text[open..]))
        .map(|inside| top_level(inside).iter().map(|c| unquote(c)).collect())
        .unwrap_or_default();
    let values = text[values_at..]
        .find('(')
        .and_then(|open| parenthesised(&text[values_at + open..]))
        .map(|inside| top_level(inside).iter().map(|e| value(e)).collect())
        .unwrap_or_default();
    Recorded { columns, values }
}

/// The text inside the parentheses `text` starts with.
fn parenthesised(text: &str) -> Option<&str> {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[1..i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` split at its commas outside parentheses.
fn top_level(text: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

fn unquote(column: &str) -> String {
    let c = column.trim();
    let c = c.rsplit('.').next().unwrap_or(c);
    c.trim_matches('"').to_lowercase()
}

/// The statement with its bound values written in as literals, as a SQL
/// file would hold it (a simple query is already that).
fn inline_params(s: &Sent) -> String {
    if s.params.is_empty() {
        return s.text.clone();
    }
    let mut out = String::new();
    let mut offset = 0;
    for t in squawk_lexer::tokenize(&s.text) {
        let token = &s.text[offset..offset + t.len as usize];
        offset += t.len as usize;
        let bound = matches!(t.kind, TokenKind::PositionalParam { .. })
            .then(|| token[1..].parse::<usize>().ok())
            .flatten()
            .and_then(|n| s.params.get(n.checked_sub(1)?));
        match bound {
            Some(Some(v)) => out.push_str(&crate::pg::quote_literal(v)),
            Some(None) => out.push_str("NULL"),
            None => out.push_str(token),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simple(session: &str, text: &str) -> Sent {
        Sent {
            database: "shelf".into(),
            session: session.into(),
            text: text.into(),
            params: Vec::new(),
            failed: false,
            error: None,
            simple: true,
        }
    }

    fn bound(session: &str, text: &str, params: &[&str]) -> Sent {
        Sent {
            simple: false,
            params: params.iter().map(|p| Some(p.to_string())).collect(),
            ..simple(session, text)
        }
    }

    /// Django's shape: introspection, its history table created, each
    /// migration in a transaction ended by its history INSERT (literals
    /// in the text); a `RunPython` that reads rows is a data migration.
    #[test]
    fn django_migrations_end_at_their_history_rows() {
        let log = [
            simple("a", "SELECT set_config('TimeZone', 'UTC', false)"),
            simple("a", "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"),
            simple("a", "BEGIN"),
            simple("a", "CREATE TABLE \"django_migrations\" (\"id\" bigint)"),
            simple("a", "COMMIT"),
            simple("a", "BEGIN"),
            simple("a", "CREATE TABLE \"shelf_seed\" (\"id\" bigint)"),
            simple("a", "INSERT INTO \"django_migrations\" (\"app\", \"name\", \"applied\") VALUES ('shelf', '0001_initial', '2026-01-01'::timestamptz) RETURNING \"django_migrations\".\"id\""),
            simple("a", "COMMIT"),
            simple("a", "BEGIN"),
            simple("a", "SELECT \"shelf_seed\".\"id\" FROM \"shelf_seed\""),
            simple("a", "INSERT INTO \"django_migrations\" (\"app\", \"name\", \"applied\") VALUES ('shelf', '0002_fill', '2026-01-01'::timestamptz) RETURNING \"django_migrations\".\"id\""),
            simple("a", "COMMIT"),
            simple("a", "CREATE INDEX CONCURRENTLY \"seed_idx\" ON \"shelf_seed\" (\"id\")"),
            simple("a", "INSERT INTO \"django_migrations\" (\"app\", \"name\", \"applied\") VALUES ('shelf', '0003_idx', '2026-01-01'::timestamptz) RETURNING \"django_migrations\".\"id\""),
            simple("a", "INSERT INTO \"shelf_seed\" (\"id\") VALUES (1)"),
        ];
        let split = split(&log, "django_migrations", &[]);
        let keys: Vec<&str> = split.migrations.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(
            keys,
            ["shelf.0001_initial", "shelf.0002_fill", "shelf.0003_idx"]
        );
        let [first, fill, index] = &split.migrations[..] else {
            panic!("three migrations")
        };
        assert_eq!(
            first.statements,
            ["CREATE TABLE \"shelf_seed\" (\"id\" bigint)"]
        );
        assert!(!first.outside_transaction && first.reads_rows.is_none());
        assert_eq!(
            fill.reads_rows.as_deref(),
            Some("SELECT \"shelf_seed\".\"id\" FROM \"shelf_seed\"")
        );
        assert!(index.outside_transaction);
        assert_ne!(first.transaction, fill.transaction);
        assert_eq!(
            split.unattributed,
            ["INSERT INTO \"shelf_seed\" (\"id\") VALUES (1)"]
        );
    }

    /// Alembic's shape: every revision in one transaction, the version
    /// row inserted then updated; Rails': the version bound as `$1`, a
    /// named prepared statement's values written in, its metadata table
    /// and `DEALLOCATE` bookkeeping.
    #[test]
    fn alembic_and_rails_histories_are_read_from_their_writes() {
        let log = [
            simple("b", "BEGIN"),
            simple("b", "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"),
            simple("b", "CREATE TABLE ferry (id serial)"),
            simple("b", "INSERT INTO alembic_version (version_num) VALUES ('3f1a') RETURNING alembic_version.version_num"),
            simple("b", "ALTER TABLE ferry ADD COLUMN name text"),
            bound("b", "UPDATE alembic_version SET version_num=$1 WHERE alembic_version.version_num = $2", &["9c0d", "3f1a"]),
            simple("b", "COMMIT"),
        ];
        let split = split(&log, "alembic_version", &[]);
        let keys: Vec<&str> = split.migrations.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(keys, ["3f1a", "9c0d"]);
        // Its own table as it wrote it: created with the first revision,
        // the row updated by the second, bound values written in.
        assert_eq!(
            split.migrations[0].records,
            [
                "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
                "INSERT INTO alembic_version (version_num) VALUES ('3f1a') RETURNING alembic_version.version_num"
            ]
        );
        assert_eq!(
            split.migrations[1].records,
            ["UPDATE alembic_version SET version_num='9c0d' WHERE alembic_version.version_num = '3f1a'"]
        );
        assert!(split.migrations[0].transaction.is_some());
        assert_eq!(
            split.migrations[0].transaction,
            split.migrations[1].transaction
        );

        let log = [
            simple("lock", "SELECT pg_try_advisory_lock(42)"),
            simple("c", "BEGIN"),
            bound(
                "c",
                "ALTER TABLE \"tools\" ADD \"note\" text DEFAULT $1",
                &["it's"],
            ),
            simple("c", "DEALLOCATE a1"),
            bound(
                "c",
                "INSERT INTO \"ar_internal_metadata\" (\"key\", \"value\") VALUES ($1, $2)",
                &["environment", "test"],
            ),
            bound(
                "c",
                "INSERT INTO \"schema_migrations\" (\"version\") VALUES ($1) RETURNING \"version\"",
                &["20240301090000"],
            ),
            simple("c", "COMMIT"),
            bound(
                "c",
                "SELECT \"ar_internal_metadata\".* FROM \"ar_internal_metadata\" WHERE \"ar_internal_metadata\".\"key\" = $1",
                &["environment"],
            ),
            bound(
                "c",
                "UPDATE \"ar_internal_metadata\" SET \"value\" = $1 WHERE \"key\" = $2",
                &["test", "environment"],
            ),
        ];
        let rails = super::split(&log, "schema_migrations", &["ar_internal_metadata"]);
        assert_eq!(rails.migrations.len(), 1);
        assert_eq!(rails.migrations[0].key, "20240301090000");
        assert_eq!(
            rails.migrations[0].statements,
            ["ALTER TABLE \"tools\" ADD \"note\" text DEFAULT 'it''s'"]
        );
        // Its metadata's writes are records too, those after the last
        // history write with the last migration; its reads are not.
        assert_eq!(
            rails.migrations[0].records,
            [
                "INSERT INTO \"ar_internal_metadata\" (\"key\", \"value\") VALUES ('environment', 'test')",
                "INSERT INTO \"schema_migrations\" (\"version\") VALUES ('20240301090000') RETURNING \"version\"",
                "UPDATE \"ar_internal_metadata\" SET \"value\" = 'test' WHERE \"key\" = 'environment'"
            ]
        );
        assert!(rails.unattributed.is_empty());
    }

    /// What drivers and frameworks ask at connect and before migrating
    /// is introspection; an app's call of its own function is not.
    #[test]
    fn introspection_is_told_from_the_apps_reads() {
        for asked in [
            "select pg_catalog.version()",
            "select current_schema()",
            "SELECT 1",
            "SELECT t.oid, t.typname FROM pg_type as t WHERE t.typname IN ('int2', 'int4')",
            "SELECT pg_catalog.pg_class.relname FROM pg_catalog.pg_class JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace WHERE pg_catalog.pg_class.relname IN ($1::VARCHAR)",
            "SELECT typname AS name, oid FROM pg_type t WHERE t.oid = to_regtype($1) ORDER BY t.oid",
        ] {
            assert!(introspects(asked), "{asked}");
        }
        for apps in [
            "SELECT place_order($1, $2)",
            "SELECT pg_advisory_lock(42)",
            "SELECT id FROM tools WHERE shelf = $1",
            "SELECT t.id FROM tools t JOIN pg_class c ON c.relname = t.name",
            "INSERT INTO tools (name) VALUES ('saw')",
        ] {
            assert!(!introspects(apps), "{apps}");
        }
    }

    #[test]
    fn a_query_of_the_catalogue_or_of_nothing_reads_no_rows() {
        assert_eq!(
            read_relations("SELECT a.attname FROM (SELECT indrelid FROM pg_index) i JOIN pg_attribute a ON a.attrelid = i.indrelid"),
            ["pg_index", "pg_attribute"]
        );
        assert!(read_relations("SELECT 'integer'::regtype::oid").is_empty());
        assert_eq!(
            read_relations("SELECT x FROM generate_series(1, 3) x JOIN public.\"Tools\" t ON true"),
            ["tools"]
        );
    }
}

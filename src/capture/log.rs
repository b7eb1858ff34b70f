//! What a server's statement log says an app ran, with the values it
//! bound: the lines of a `log_destination = 'jsonlog'` file (PostgreSQL
//! 15+) for one database, with `log_statement = 'all'` set there.
//!
//! PostgreSQL logs an extended-protocol execution as `execute <name>:
//! <statement>` (`<unnamed>` for the unnamed statement, `S_1`, `_pg3_0`
//! … for a driver's named one) with `parameters: $1 = '…', $2 = NULL` in
//! its detail (13+; every value in its type's text form, whatever format
//! the driver sent, quotes doubled); a simple-query string as
//! `statement: <string>`, literals in its text. A string may hold
//! several statements (each is one execution here), and its literals are
//! turned into parameters ([`normalise`]) so that one statement run with
//! other values is the same statement; a literal every call wrote the
//! same is put back afterwards ([`group`]), so `status = 'open'` stays
//! readable and `id = 42` does not become 40 statements.
//!
//! Groups are ordered by their text, and each keeps its distinct bound
//! rows in order: the same run gives the same groups (the written set is
//! meant to be committed and diffed). Nothing here reads a database.

use std::collections::{BTreeMap, BTreeSet};

use squawk_lexer::{LiteralKind, TokenKind};

/// One execution the server logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    /// The statement, its literals as `$n` when it came as a simple query.
    pub text: String,
    /// The bound value of each `$n`, in order (None: NULL).
    pub params: Vec<Option<String>>,
    /// For a simple query: each parameter's literal as written, to be
    /// put back when every call wrote the same one.
    pub literals: Option<Vec<String>>,
    /// Whether the server answered it with an error (a test checking
    /// that bad input is refused, or a statement in a transaction an
    /// earlier error aborted).
    pub failed: bool,
}

/// The executions logged for database `dbname` in a jsonlog file's text,
/// in log order. Lines that are not JSON, of another database, or not a
/// statement are skipped; so are fetches from an open portal (the
/// statement was logged when it started).
pub fn read_jsonlog(text: &str, dbname: &str) -> Vec<Executed> {
    read_sent(text, dbname).into_iter().map(executed).collect()
}

/// A sent statement as an execution of the app's: a simple query's
/// literals turned into parameters ([`normalise`]).
pub fn executed(sent: Sent) -> Executed {
    let mut executed = match sent.simple {
        true => normalise(&sent.text),
        false => Executed {
            text: sent.text,
            params: sent.params,
            literals: None,
            failed: false,
        },
    };
    executed.failed = sent.failed;
    executed
}

/// One statement as a session sent it, for a reader that needs the
/// order and the transactions (a framework's migrate): its text as sent
/// (a simple query's literals in place), the values bound to an
/// extended-protocol execution, and which session sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The database it was sent to.
    pub database: String,
    /// The server's session id (`session_id` of the log line).
    pub session: String,
    /// The statement as the server received it.
    pub text: String,
    /// `$n` → its value, for an extended-protocol execution; empty for a
    /// simple query.
    pub params: Vec<Option<String>>,
    /// Whether the server answered it with an error.
    pub failed: bool,
    /// The error the server answered it with (`relation "x" does not
    /// exist`), when it failed.
    pub error: Option<String>,
    /// Sent as a simple query (literals in its text), not an
    /// extended-protocol execution.
    pub simple: bool,
}

/// The statements sent to database `dbname`, in log order, each
/// simple-query string split into its statements, none normalised.
pub fn read_sent(text: &str, dbname: &str) -> Vec<Sent> {
    read_sent_in(text, |db| db == dbname)
}

/// [`read_sent`] for every database `wanted` says yes to.
pub fn read_sent_in(text: &str, wanted: impl Fn(&str) -> bool) -> Vec<Sent> {
    let mut out: Vec<Sent> = Vec::new();
    let mut last_of: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let Ok(serde_json::Value::Object(entry)) = serde_json::from_str(line) else {
            continue;
        };
        let field = |k: &str| entry.get(k).and_then(|v| v.as_str()).unwrap_or("");
        let database = field("dbname");
        if !wanted(database) {
            continue;
        }
        let session = entry
            .get("session_id")
            .or_else(|| entry.get("pid"))
            .map(|v| v.to_string())
            .unwrap_or_default();
        match field("error_severity") {
            "ERROR" => {
                if let Some(e) = last_of.remove(&session).and_then(|i| out.get_mut(i)) {
                    e.failed = true;
                    e.error = Some(field("message").to_string());
                }
                continue;
            }
            "LOG" => {}
            _ => continue,
        }
        let message = field("message");
        let mut push = |text: String, params: Vec<Option<String>>, simple: bool| {
            out.push(Sent {
                database: database.to_string(),
                session: session.clone(),
                text,
                params,
                failed: false,
                error: None,
                simple,
            });
            last_of.insert(session.clone(), out.len() - 1);
        };
        if let Some(string) = message.strip_prefix("statement: ") {
            for statement in crate::sql::split(string).statements {
                push(statement.text, Vec::new(), true);
            }
        } else if let Some(rest) = message.strip_prefix("execute ") {
            if rest.starts_with("fetch from ") {
                continue;
            }
            let Some((_, statement)) = rest.split_once(": ") else {
                continue;
            };
            let params = field("detail")
                .strip_prefix("parameters: ")
                .map(parameters)
                .unwrap_or_default();
            push(statement.trim().to_string(), params, false);
        }
    }
    out
}

/// The values of a `parameters:` detail: `$1 = 'a''b', $2 = NULL`.
fn parameters(detail: &str) -> Vec<Option<String>> {
    let mut values = BTreeMap::new();
    let mut rest = detail;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        let Some(after) = rest.strip_prefix('$') else {
            break;
        };
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let Ok(n) = after[..digits].parse::<usize>() else {
            break;
        };
        let Some(value) = after[digits..].trim_start().strip_prefix("= ") else {
            break;
        };
        if let Some(tail) = value.strip_prefix("NULL") {
            values.insert(n, None);
            rest = tail;
            continue;
        }
        let Some(quoted) = value.strip_prefix('\'') else {
            break;
        };
        // The value ends at the first quote that is not doubled.
        let mut text = String::new();
        let mut chars = quoted.char_indices().peekable();
        let mut end = quoted.len();
        while let Some((i, c)) = chars.next() {
            if c == '\'' {
                if chars.peek().map(|(_, c)| *c) == Some('\'') {
                    chars.next();
                    text.push('\'');
                    continue;
                }
                end = i + 1;
                break;
            }
            text.push(c);
        }
        values.insert(n, Some(text));
        rest = &quoted[end..];
    }
    let count = values.keys().max().copied().unwrap_or(0);
    (1..=count)
        .map(|n| values.get(&n).cloned().flatten())
        .collect()
}

/// Keywords after which a string literal is a value (`SELECT 'a'`, `THEN
/// 'b'`, `LIKE 'c%'`); after any other word it is a typed constant
/// (`interval '1 day'`, `date '2024-01-01'`), where no parameter may
/// stand, and stays.
const VALUE_AFTER: &[&str] = &[
    "select",
    "then",
    "else",
    "and",
    "or",
    "like",
    "ilike",
    "when",
    "not",
    "is",
    "from",
    "between",
    "in",
    "values",
    "set",
    "returning",
    "limit",
    "offset",
    "any",
    "all",
    "similar",
    "to",
];

/// A simple-query statement with its string and number literals as
/// parameters `$1`, `$2`, … (after any it already has). A number after
/// `BY` (`ORDER BY 1`, a column position) and a string after a type
/// name stay as written.
pub fn normalise(sql: &str) -> Executed {
    let tokens: Vec<(TokenKind, &str)> = {
        let mut offset = 0;
        squawk_lexer::tokenize(sql)
            .map(|t| {
                let text = sql.get(offset..offset + t.len as usize).unwrap_or("");
                offset += t.len as usize;
                (t.kind, text)
            })
            .collect()
    };
    let mut next = tokens
        .iter()
        .filter(|(k, _)| matches!(k, TokenKind::PositionalParam { .. }))
        .filter_map(|(_, t)| t.trim_start_matches('$').parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    let first = next;
    let mut text = String::new();
    let mut params = Vec::new();
    let mut literals = Vec::new();
    let mut previous: Option<(TokenKind, &str)> = None;
    for &(kind, token) in &tokens {
        let word_before = previous
            .filter(|(k, _)| *k == TokenKind::Ident)
            .map(|(_, t)| t.to_ascii_lowercase());
        let value = match kind {
            TokenKind::Literal {
                kind: LiteralKind::Str { terminated: true },
            } if word_before
                .as_deref()
                .map_or(true, |w| VALUE_AFTER.contains(&w)) =>
            {
                Some(token[1..token.len() - 1].replace("''", "'"))
            }
            TokenKind::Literal {
                kind: LiteralKind::Int { .. } | LiteralKind::Numeric { .. },
            } if word_before.as_deref() != Some("by") => Some(token.to_string()),
            _ => None,
        };
        match value {
            Some(v) => {
                next += 1;
                text.push_str(&format!("${next}"));
                params.push(Some(v));
                literals.push(token.to_string());
            }
            None => text.push_str(token),
        }
        if !matches!(
            kind,
            TokenKind::Whitespace | TokenKind::LineComment | TokenKind::BlockComment { .. }
        ) {
            previous = Some((kind, token));
        }
    }
    // A statement that already had parameters (rare in a simple query):
    // its own stay unbound.
    let mut all = vec![None; first];
    all.extend(params);
    let mut lits = vec![String::new(); first];
    lits.extend(literals);
    Executed {
        text: text.trim().to_string(),
        params: all,
        literals: (next > first).then_some(lits),
        failed: false,
    }
}

/// One distinct statement of a run: its text, how often it ran, and the
/// distinct rows of values bound to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub text: String,
    pub calls: i64,
    pub rows: BTreeSet<Vec<Option<String>>>,
}

/// How many distinct statements failed in every call: the tests'
/// expected errors, left out of the set ([`group`] skips failed calls).
pub fn failed_only(executed: &[Executed]) -> usize {
    let ok: BTreeSet<&str> = executed
        .iter()
        .filter(|e| !e.failed)
        .map(|e| e.text.as_str())
        .collect();
    executed
        .iter()
        .filter(|e| e.failed && !ok.contains(e.text.as_str()))
        .map(|e| e.text.as_str())
        .collect::<BTreeSet<_>>()
        .len()
}

/// The executions that succeeded, grouped by statement, ordered by text;
/// a literal every call of a simple-query statement wrote the same is
/// put back in its text (and its parameter dropped, the others
/// renumbered).
pub fn group(executed: &[Executed]) -> Vec<Group> {
    let mut by_text: BTreeMap<&str, Vec<&Executed>> = BTreeMap::new();
    for e in executed.iter().filter(|e| !e.failed) {
        by_text.entry(&e.text).or_default().push(e);
    }
    let mut out: BTreeMap<String, Group> = BTreeMap::new();
    for (text, calls) in by_text {
        let (text, keep) = put_back_constants(text, &calls);
        let g = out.entry(text.clone()).or_insert_with(|| Group {
            text,
            calls: 0,
            rows: BTreeSet::new(),
        });
        g.calls += calls.len() as i64;
        for e in calls {
            g.rows.insert(
                keep.iter()
                    .map(|&i| e.params.get(i).cloned().flatten())
                    .collect(),
            );
        }
    }
    out.into_values().collect()
}

/// `text` with the literals every call wrote the same put back, and the
/// indexes of the parameters that stay.
fn put_back_constants(text: &str, calls: &[&Executed]) -> (String, Vec<usize>) {
    let count = calls.iter().map(|e| e.params.len()).max().unwrap_or(0);
    let constant: BTreeMap<usize, String> = (0..count)
        .filter_map(|i| {
            let mut seen = calls
                .iter()
                .map(|e| e.literals.as_ref().and_then(|l| l.get(i)).cloned());
            let first = seen.next()??;
            (!first.is_empty() && seen.all(|l| l.as_ref() == Some(&first))).then_some((i, first))
        })
        .collect();
    if constant.is_empty() {
        return (text.to_string(), (0..count).collect());
    }
    let mut renumbered = BTreeMap::new();
    let keep: Vec<usize> = (0..count).filter(|i| !constant.contains_key(i)).collect();
    for (new, old) in keep.iter().enumerate() {
        renumbered.insert(*old, new + 1);
    }
    let mut out = String::new();
    let mut offset = 0;
    for t in squawk_lexer::tokenize(text) {
        let token = &text[offset..offset + t.len as usize];
        offset += t.len as usize;
        let n = matches!(t.kind, TokenKind::PositionalParam { .. })
            .then(|| token.trim_start_matches('$').parse::<usize>().ok())
            .flatten()
            .filter(|n| *n >= 1);
        match n {
            Some(n) if constant.contains_key(&(n - 1)) => out.push_str(&constant[&(n - 1)]),
            Some(n) if renumbered.contains_key(&(n - 1)) => {
                out.push_str(&format!("${}", renumbered[&(n - 1)]))
            }
            _ => out.push_str(token),
        }
    }
    (out, keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(db: &str, message: &str, detail: Option<&str>) -> String {
        let mut v = serde_json::json!({
            "timestamp": "2026-12-03 14:00:00.000 UTC", "user": "app", "dbname": db,
            "error_severity": "LOG", "message": message,
        });
        if let Some(d) = detail {
            v["detail"] = serde_json::json!(d);
        }
        v.to_string()
    }

    #[test]
    fn extended_executions_carry_their_parameters() {
        let log = [
            line(
                "shop",
                "execute <unnamed>: SELECT id FROM books WHERE title = $1 AND shelf = $2",
                Some("parameters: $1 = 'it''s, $2 = x', $2 = NULL"),
            ),
            line("other", "execute S_1: SELECT 1", None),
            line("shop", "execute fetch from S_2/C_3: SELECT 2", None),
            line("shop", "connection authorized: user=app", None),
            "not json".to_string(),
            line(
                "shop",
                "execute S_1: UPDATE books SET seen = $1 WHERE id = $2",
                Some("parameters: $1 = 't', $2 = '7'"),
            ),
        ]
        .join("\n");
        let got = read_jsonlog(&log, "shop");
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0].params,
            [Some("it's, $2 = x".to_string()), None],
            "a quote inside a value is doubled, a comma is text"
        );
        assert_eq!(
            got[1].text, "UPDATE books SET seen = $1 WHERE id = $2",
            "a named statement's name is not part of it"
        );
        assert_eq!(got[1].params, [Some("t".into()), Some("7".into())]);
    }

    #[test]
    fn a_statement_that_only_failed_is_left_out() {
        let entry = |session: &str, severity: &str, message: &str| {
            serde_json::json!({
                "dbname": "shop", "session_id": session, "error_severity": severity, "message": message,
            })
            .to_string()
        };
        let log = [
            entry(
                "a",
                "LOG",
                "statement: INSERT INTO books (title) VALUES (NULL)",
            ),
            entry("b", "LOG", "statement: SELECT 1 FROM books"),
            entry("a", "ERROR", "null value in column \"title\""),
            entry(
                "a",
                "LOG",
                "statement: INSERT INTO books (title) VALUES ('x')",
            ),
            entry(
                "a",
                "LOG",
                "statement: INSERT INTO books (title) VALUES ('y')",
            ),
            entry("a", "ERROR", "duplicate key value"),
        ]
        .join("\n");
        let executed = read_jsonlog(&log, "shop");
        let failed: Vec<bool> = executed.iter().map(|e| e.failed).collect();
        assert_eq!(
            failed,
            [true, false, false, true],
            "an error is its session's"
        );
        assert_eq!(failed_only(&executed), 1, "the NULL insert only failed");
        let texts: Vec<String> = group(&executed).into_iter().map(|g| g.text).collect();
        assert_eq!(
            texts,
            [
                "INSERT INTO books (title) VALUES ('x')",
                "SELECT 1 FROM books"
            ]
        );
    }

    #[test]
    fn simple_queries_become_parameters_and_constants_come_back() {
        let log = [
            line("shop", "statement: BEGIN; SELECT title FROM books WHERE id = 42 AND status = 'open' ORDER BY 1", None),
            line("shop", "statement: SELECT title FROM books WHERE id = 43 AND status = 'open' ORDER BY 1", None),
            line("shop", "statement: SELECT now() - interval '1 day'", None),
        ]
        .join("\n");
        let executed = read_jsonlog(&log, "shop");
        assert_eq!(executed.len(), 4, "a string of two statements is two");
        assert_eq!(
            executed[1].text,
            "SELECT title FROM books WHERE id = $1 AND status = $2 ORDER BY 1"
        );
        let groups = group(&executed);
        let texts: Vec<&str> = groups.iter().map(|g| g.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "BEGIN",
                "SELECT now() - interval '1 day'",
                "SELECT title FROM books WHERE id = $1 AND status = 'open' ORDER BY 1",
            ]
        );
        let books = &groups[2];
        assert_eq!(books.calls, 2);
        assert_eq!(
            books.rows.iter().cloned().collect::<Vec<_>>(),
            [vec![Some("42".to_string())], vec![Some("43".to_string())]]
        );
    }
}

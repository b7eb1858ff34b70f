//! Named SQL statement sets: the queries one application version runs.
//!
//! A statement set is a `.sql` file that an app's code executes statement
//! by statement *by name* (the shipped project's DAO, `crate::dao`, does),
//! and that the verifier replays against every schema version in the app
//! version's rollout window. Keeping both on one file is the point: the
//! verifier proves the queries the code really runs. The format is any
//! project's (`--apps DIR`); nothing here knows an app.
//!
//! Format (comments are the metadata; everything else is SQL):
//!
//! ```sql
//! -- app: legacy             header: which app version this set is
//! -- needs: 2                header: first schema version the app needs
//!
//! -- name: get_by_id         starts a statement, ends the previous one
//! -- param: $1 = seed.attached_function_id    per-statement metadata
//! SELECT ... WHERE id = $1;
//! ```
//!
//! Header lines are the `-- key: value` comments before the first
//! `-- name:`. Per-statement metadata are the `-- key: value` comments
//! directly after `-- name:`. Other comments are kept in the SQL. A trailing
//! `;` is stripped so the text can be prepared as is.
//!
//! Each entry is exactly one statement, as the app prepares it (the
//! extended protocol runs one statement): an entry the SQL grammar
//! ([`crate::sql::split`]) splits into more is refused with the line where
//! the second one starts, so text after a `;` is never run.

use std::collections::BTreeMap;

use thiserror::Error;

/// One named statement of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub name: String,
    /// `-- key: value` lines directly after `-- name:`, in file order.
    pub meta: Vec<(String, String)>,
    /// The SQL text, without the trailing `;`.
    pub sql: String,
}

impl Statement {
    /// All values of one metadata key, in file order.
    pub fn meta_values<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.meta
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A parsed statement set (one app version's queries).
#[derive(Debug, Clone)]
pub struct StatementSet {
    /// Where it came from, for error messages (`src/dao/current.sql`).
    pub source: String,
    pub header: BTreeMap<String, String>,
    statements: Vec<Statement>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum StatementSetError {
    #[error("{source_name}:{line}: statement `{name}` is defined twice; statement names must be unique within a set")]
    Duplicate {
        source_name: String,
        line: usize,
        name: String,
    },
    #[error("{source_name}:{line}: statement `{name}` has no SQL")]
    Empty {
        source_name: String,
        line: usize,
        name: String,
    },
    #[error(
        "{source_name}:{line}: SQL before the first `-- name:` line; every statement needs a name"
    )]
    Unnamed { source_name: String, line: usize },
    #[error("{source_name}:{line}: statement `{name}` holds more than one SQL statement (the next starts here); an app runs one statement per entry: give each its own `-- name:`")]
    MultipleStatements {
        source_name: String,
        line: usize,
        name: String,
    },
    #[error("{source_name}: no statement named `{name}` (known: {known})")]
    Unknown {
        source_name: String,
        name: String,
        known: String,
    },
}

/// A statement being read: (name, first line, meta, SQL lines, still
/// reading meta lines).
type Pending<'t> = (String, usize, Vec<(String, String)>, Vec<&'t str>, bool);

/// Splits `-- key: value` into (key, value); None for any other line.
fn meta_line(line: &str) -> Option<(String, String)> {
    let rest = line.trim().strip_prefix("--")?.trim();
    let (key, value) = rest.split_once(':')?;
    let key = key.trim();
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return None;
    }
    Some((key.to_string(), value.trim().to_string()))
}

impl StatementSet {
    /// Parses a statement set; `source` names it in errors.
    pub fn parse(source: &str, text: &str) -> Result<StatementSet, StatementSetError> {
        let mut header = BTreeMap::new();
        let mut statements: Vec<Statement> = Vec::new();
        let mut current: Option<Pending> = None;

        let finish = |cur: Option<Pending>,
                      statements: &mut Vec<Statement>|
         -> Result<(), StatementSetError> {
            let Some((name, line, meta, body, _)) = cur else {
                return Ok(());
            };
            let joined = body.join("\n");
            let split = crate::sql::split(&joined);
            if let Some(second) = split.statements.get(1) {
                // The body starts on the line after `-- name:` and its
                // metadata lines.
                return Err(StatementSetError::MultipleStatements {
                    source_name: source.to_string(),
                    line: line + meta.len() + second.line,
                    name,
                });
            }
            let sql = joined.trim().trim_end_matches(';').trim_end().to_string();
            let only_comments = sql
                .lines()
                .all(|l| l.trim().is_empty() || l.trim().starts_with("--"));
            if only_comments {
                return Err(StatementSetError::Empty {
                    source_name: source.to_string(),
                    line,
                    name,
                });
            }
            if statements.iter().any(|s| s.name == name) {
                return Err(StatementSetError::Duplicate {
                    source_name: source.to_string(),
                    line,
                    name,
                });
            }
            statements.push(Statement { name, meta, sql });
            Ok(())
        };

        for (idx, line) in text.lines().enumerate() {
            let lineno = idx + 1;
            match (meta_line(line), current.as_mut()) {
                (Some((key, value)), _) if key == "name" => {
                    finish(current.take(), &mut statements)?;
                    current = Some((value, lineno, Vec::new(), Vec::new(), true));
                }
                (Some((key, value)), Some(cur)) if cur.4 => cur.2.push((key, value)),
                (Some((key, value)), None) => {
                    header.insert(key, value);
                }
                (_, Some(cur)) => {
                    if !line.trim().is_empty() {
                        cur.4 = false;
                    }
                    cur.3.push(line);
                }
                (None, None) => {
                    let t = line.trim();
                    if !t.is_empty() && !t.starts_with("--") {
                        return Err(StatementSetError::Unnamed {
                            source_name: source.to_string(),
                            line: lineno,
                        });
                    }
                }
            }
        }
        finish(current.take(), &mut statements)?;
        Ok(StatementSet {
            source: source.to_string(),
            header,
            statements,
        })
    }

    /// The statement called `name`, or an error naming the known ones.
    pub fn get(&self, name: &str) -> Result<&Statement, StatementSetError> {
        self.statements
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| StatementSetError::Unknown {
                source_name: self.source.clone(),
                name: name.to_string(),
                known: self
                    .statements
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The SQL of statement `name`. Panics on an unknown name: the DAO only
    /// asks for names its own file defines, and a unit test pins that.
    pub fn sql(&self, name: &str) -> &str {
        match self.get(name) {
            Ok(s) => &s.sql,
            Err(e) => panic!("{e}"),
        }
    }

    pub fn statements(&self) -> &[Statement] {
        &self.statements
    }

    /// A header value, e.g. `app` or `needs`.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.header.get(key).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: &str = "\
-- app: legacy
-- needs: 2

-- name: get_by_id
-- param: $1 = seed.id
SELECT id
  -- a comment kept in the SQL
  FROM t WHERE id = $1;

-- name: count
SELECT count(*) FROM t;
";

    #[test]
    fn parses_header_names_meta_and_sql() {
        let set = StatementSet::parse("legacy.sql", SET).unwrap();
        assert_eq!(set.header("app"), Some("legacy"));
        assert_eq!(set.header("needs"), Some("2"));
        let names: Vec<_> = set.statements().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["get_by_id", "count"]);
        let get = set.get("get_by_id").unwrap();
        assert_eq!(
            get.meta_values("param").collect::<Vec<_>>(),
            ["$1 = seed.id"]
        );
        assert_eq!(
            get.sql,
            "SELECT id\n  -- a comment kept in the SQL\n  FROM t WHERE id = $1"
        );
        assert_eq!(set.sql("count"), "SELECT count(*) FROM t");
    }

    #[test]
    fn an_entry_with_two_statements_is_refused_at_its_second() {
        let text = "-- app: a\n-- needs: 2\n\n-- name: ok\nSELECT 1;\n\n-- name: sneaky\n-- param: $1 = 1\nSELECT $1::int;\nCOPY (SELECT 1) TO PROGRAM 'touch /tmp/x';\n";
        let err = StatementSet::parse("apps/a.sql", text).unwrap_err();
        assert_eq!(
            err,
            StatementSetError::MultipleStatements {
                source_name: "apps/a.sql".into(),
                line: 10,
                name: "sneaky".into()
            }
        );
        assert!(err
            .to_string()
            .starts_with("apps/a.sql:10: statement `sneaky` holds more than one SQL statement"));
        // A `;` inside a string or a dollar quote is no boundary.
        let one = "-- name: a\nSELECT 'a;b', $$c;d$$;\n";
        assert!(StatementSet::parse("x.sql", one).is_ok());
    }

    #[test]
    fn rejects_duplicates_empty_unnamed_and_unknown() {
        let dup = "-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n";
        assert!(matches!(
            StatementSet::parse("x.sql", dup),
            Err(StatementSetError::Duplicate { line: 3, .. })
        ));
        let empty = "-- name: a\n-- just a comment\n-- name: b\nSELECT 1;";
        assert!(matches!(
            StatementSet::parse("x.sql", empty),
            Err(StatementSetError::Empty { .. })
        ));
        assert!(matches!(
            StatementSet::parse("x.sql", "SELECT 1;"),
            Err(StatementSetError::Unnamed { line: 1, .. })
        ));
        let set = StatementSet::parse("x.sql", "-- name: a\nSELECT 1;").unwrap();
        let err = set.get("b").unwrap_err().to_string();
        assert!(
            err.contains("no statement named `b`") && err.contains("known: a"),
            "{err}"
        );
    }
}

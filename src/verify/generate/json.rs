//! JSON documents shaped by what reads them: the keys that a table's
//! generated columns, CHECKs and expression indexes read from a `json` or
//! `jsonb` column (`doc ->> 'kind'`, `(doc -> 'meta') ->> 'rev'`,
//! `doc #>> '{origin,gateway}'`, `doc ? 'taken_at'`) are written into the
//! generated documents, each with a value of the type its reader casts it
//! to (`(doc ->> 'taken_at')::timestamptz` a timestamp, `::boolean` a
//! boolean, `::numeric` a number), or one of the texts a CHECK on the
//! generated column reading it lists. A NOT NULL generated column then
//! finds its key; a table whose rows are documents gets rows at all.
//!
//! What it is not: a reading of the apps' statements (their JSON reads
//! are not looked at yet), nor of expressions beyond these operators.

use std::collections::BTreeMap;

use super::catalogue::{Table, TypeKind};
use super::families::{each_of, Family, Literals};
use super::I;
use crate::pg::quote_literal;

/// What a read leaves at the end of its path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Leaf {
    /// Only its presence is read (`?`).
    Present,
    Text,
    /// One of these texts (a CHECK on the column that reads it).
    OneOf(Vec<String>),
    Number,
    Bool,
    Date,
    Timestamp,
    Uuid,
}

/// The keys read from a document, as a tree.
#[derive(Debug, Default)]
struct Shape(BTreeMap<String, Node>);

#[derive(Debug)]
enum Node {
    Leaf(Leaf),
    Object(Shape),
}

/// A family of documents carrying every key the table's readers read from
/// column `k`, when they read any and `k` holds JSON.
pub(super) fn shaped_documents(t: &Table, k: usize) -> Option<Family> {
    let col = &t.columns[k];
    if !is_json(&col.ty.kind) {
        return None;
    }
    let mut shape = Shape::default();
    for (expr, generated) in readers(t) {
        let reads = reads_of(expr, &col.name);
        // A generated column that is one read: its CHECKs say more.
        let listed = match (&reads[..], generated) {
            ([(_, Leaf::Text)], Some(g)) => listed_texts(t, g),
            _ => None,
        };
        for (path, leaf) in reads {
            let leaf = match (&leaf, &listed) {
                (Leaf::Text, Some(texts)) => Leaf::OneOf(texts.clone()),
                _ => leaf,
            };
            shape.add(&path, leaf);
        }
    }
    if shape.0.is_empty() {
        return None;
    }
    Some(Family {
        sql: shape.sql(),
        injective: true,
        cycle: None,
    })
}

fn is_json(kind: &TypeKind) -> bool {
    match kind {
        TypeKind::Json => true,
        TypeKind::Domain { base, .. } => is_json(&base.kind),
        _ => false,
    }
}

/// The expressions that read the table's columns, each with the generated
/// column it computes (by index), if it is one.
fn readers(t: &Table) -> Vec<(&str, Option<usize>)> {
    let generated = t
        .columns
        .iter()
        .enumerate()
        .filter(|(_, c)| c.generated)
        .filter_map(|(g, c)| c.default.as_deref().map(|d| (d, Some(g))));
    let checks = t.checks.iter().map(|c| (c.expr.as_str(), None));
    let indexes = t.index_expressions.iter().map(|e| (e.as_str(), None));
    generated.chain(checks).chain(indexes).collect()
}

/// The texts a CHECK on generated column `g` lists (`kind IN ('a', 'b')`).
fn listed_texts(t: &Table, g: usize) -> Option<Vec<String>> {
    let num = t.columns[g].num;
    let mut lits = Literals::default();
    for c in t.checks.iter().filter(|c| c.cols.contains(&num)) {
        lits.scan(&c.expr);
    }
    (!lits.strings.is_empty()).then_some(lits.strings)
}

/// Every read of column `column` in `expr` (as `pg_get_expr` spells it):
/// its path of keys and what is read at its end.
fn reads_of(expr: &str, column: &str) -> Vec<(Vec<String>, Leaf)> {
    let mut out = Vec::new();
    let quoted = format!("\"{}\"", column.replace('"', "\"\""));
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let mut from = 0;
    while let Some(found) = find_column(expr, column, &quoted, from, ident) {
        let (start, len) = found;
        from = start + len;
        if let Some(read) = chain(&expr[from..]) {
            out.push(read);
        }
    }
    out
}

/// The next occurrence of the column's name as a whole identifier (or
/// quoted) at or after `from`, outside string literals.
fn find_column(
    expr: &str,
    column: &str,
    quoted: &str,
    from: usize,
    ident: impl Fn(u8) -> bool,
) -> Option<(usize, usize)> {
    let b = expr.as_bytes();
    let mut i = from;
    let mut in_literal = false;
    while i < b.len() {
        if b[i] == b'\'' {
            in_literal = !in_literal;
            i += 1;
            continue;
        }
        if !in_literal {
            if expr[i..].starts_with(quoted) {
                return Some((i, quoted.len()));
            }
            let before_ok = i == 0 || !ident(b[i - 1]);
            if before_ok && expr[i..].starts_with(column) {
                let end = i + column.len();
                if end >= b.len() || !ident(b[end]) {
                    return Some((i, column.len()));
                }
            }
        }
        i += 1;
    }
    None
}

/// The chain of JSON operators after a column's name: `->`, `->>`, `#>`,
/// `#>>` with a literal key or path, or `?` with a key; then a cast, if
/// one follows the closing parentheses.
fn chain(rest: &str) -> Option<(Vec<String>, Leaf)> {
    let mut s = rest;
    let mut path: Vec<String> = Vec::new();
    let mut leaf = None;
    loop {
        s = s.trim_start_matches(|c: char| c == ')' || c.is_whitespace());
        let (op, after) = ["->>", "->", "#>>", "#>", "?"]
            .iter()
            .find_map(|op| s.strip_prefix(op).map(|a| (*op, a)))?;
        if op == "?" && after.starts_with(['|', '&']) {
            break;
        }
        let (literal, after) = literal(after.trim_start())?;
        s = after
            .strip_prefix("::text[]")
            .or_else(|| after.strip_prefix("::text"))
            .unwrap_or(after);
        if op.starts_with('#') {
            path.extend(
                literal
                    .trim_matches(|c| c == '{' || c == '}')
                    .split(',')
                    .map(|k| k.trim().trim_matches('"').to_string()),
            );
        } else {
            path.push(literal);
        }
        match op {
            "?" => {
                leaf = Some(Leaf::Present);
                break;
            }
            "->>" | "#>>" => {
                leaf = Some(Leaf::Text);
                break;
            }
            _ => {}
        }
    }
    if path.is_empty() {
        return None;
    }
    let mut leaf = leaf.unwrap_or(Leaf::Text);
    if leaf == Leaf::Text {
        let after = s.trim_start_matches(|c: char| c == ')' || c.is_whitespace());
        if let Some(ty) = after.strip_prefix("::") {
            leaf = cast_leaf(ty);
        }
    }
    Some((path, leaf))
}

/// A string literal at the start of `s` and what follows it.
fn literal(s: &str) -> Option<(String, &str)> {
    let mut chars = s.strip_prefix('\'')?.char_indices().peekable();
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().map(|&(_, c)| c) == Some('\'') {
                chars.next();
                out.push('\'');
            } else {
                return Some((out, &s[i + 2..]));
            }
        } else {
            out.push(c);
        }
    }
    None
}

/// What a cast to the type `ty` starts with needs.
fn cast_leaf(ty: &str) -> Leaf {
    const CASTS: [(&str, Leaf); 12] = [
        ("timestamp", Leaf::Timestamp),
        ("date", Leaf::Date),
        ("boolean", Leaf::Bool),
        ("bool", Leaf::Bool),
        ("numeric", Leaf::Number),
        ("integer", Leaf::Number),
        ("bigint", Leaf::Number),
        ("smallint", Leaf::Number),
        ("double precision", Leaf::Number),
        ("real", Leaf::Number),
        ("int", Leaf::Number),
        ("uuid", Leaf::Uuid),
    ];
    CASTS
        .into_iter()
        .find(|(name, _)| ty.starts_with(name))
        .map_or(Leaf::Text, |(_, leaf)| leaf)
}

impl Shape {
    /// Adds a read: the stronger of two reads of one key wins (a cast
    /// over a text, a text over a presence); a key read as an object
    /// stays one.
    fn add(&mut self, path: &[String], leaf: Leaf) {
        let Some((key, rest)) = path.split_first() else {
            return;
        };
        let node = self
            .0
            .entry(key.clone())
            .or_insert(Node::Leaf(Leaf::Present));
        if rest.is_empty() {
            if let Node::Leaf(old) = node {
                if leaf > *old {
                    *old = leaf;
                }
            }
            return;
        }
        if let Node::Leaf(_) = node {
            *node = Node::Object(Shape::default());
        }
        if let Node::Object(inner) = node {
            inner.add(rest, leaf);
        }
    }

    /// `jsonb_build_object(…)` of every key, the index in each value.
    fn sql(&self) -> String {
        let pairs: Vec<String> = self
            .0
            .iter()
            .map(|(key, node)| {
                let value = match node {
                    Node::Object(inner) => inner.sql(),
                    Node::Leaf(leaf) => format!("to_jsonb({})", leaf_sql(key, leaf)),
                };
                format!("{}, {value}", quote_literal(key))
            })
            .collect();
        format!("jsonb_build_object({})", pairs.join(", "))
    }
}

/// A value of `leaf`'s kind at index [`I`]: times in the past (a CHECK
/// that a document is not from the future is common, one that it is
/// rare).
fn leaf_sql(key: &str, leaf: &Leaf) -> String {
    match leaf {
        Leaf::Present | Leaf::Text => {
            let prefix: String = key
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .take(16)
                .collect();
            format!("{} || {I}", quote_literal(&format!("{prefix}_")))
        }
        Leaf::OneOf(texts) => {
            let list: Vec<String> = texts.iter().map(|t| quote_literal(t)).collect();
            each_of(&list).sql
        }
        Leaf::Number => format!("({I})"),
        Leaf::Bool => format!("({I}) % 2 = 0"),
        Leaf::Date => format!("date '2020-01-01' + (({I}) % 1800)::int"),
        Leaf::Timestamp => {
            format!("timestamptz '2020-01-01 00:00:00+00' + ({I}) * interval '1 minute'")
        }
        Leaf::Uuid => format!("md5({} || {I})::uuid", quote_literal(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_found_with_their_paths_and_casts() {
        assert_eq!(
            reads_of("(body ->> 'kind'::text)", "body"),
            [(vec!["kind".to_string()], Leaf::Text)]
        );
        assert_eq!(
            reads_of(
                "(((body -> 'meta'::text) ->> 'revision'::text))::integer",
                "body"
            ),
            [(
                vec!["meta".to_string(), "revision".to_string()],
                Leaf::Number
            )]
        );
        assert_eq!(
            reads_of("(doc #>> '{origin,gateway}'::text[])", "doc"),
            [(
                vec!["origin".to_string(), "gateway".to_string()],
                Leaf::Text
            )]
        );
        assert_eq!(
            reads_of(
                "((doc ? 'taken_at'::text) AND (((doc ->> 'taken_at'::text))::timestamp with time zone IS NOT NULL))",
                "doc"
            ),
            [
                (vec!["taken_at".to_string()], Leaf::Present),
                (vec!["taken_at".to_string()], Leaf::Timestamp)
            ]
        );
        // Another column, or the name inside a literal: no read.
        assert!(reads_of("(docs ->> 'a'::text) = 'doc'", "doc").is_empty());
    }

    #[test]
    fn a_shape_builds_nested_objects_and_keeps_the_strongest_read() {
        let mut s = Shape::default();
        s.add(&["taken_at".into()], Leaf::Present);
        s.add(&["taken_at".into()], Leaf::Timestamp);
        s.add(&["origin".into(), "gateway".into()], Leaf::Text);
        let sql = s.sql();
        assert!(sql.starts_with("jsonb_build_object('origin', jsonb_build_object('gateway', to_jsonb('gateway_' || "), "{sql}");
        assert!(sql.contains("'taken_at', to_jsonb(timestamptz"), "{sql}");
    }
}

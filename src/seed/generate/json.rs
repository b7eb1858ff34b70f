//! JSON documents shaped by what reads them: the keys that a table's
//! generated columns, CHECKs and expression indexes read from a `json` or
//! `jsonb` column (`doc ->> 'kind'`, `(doc -> 'meta') ->> 'rev'`,
//! `doc #>> '{origin,gateway}'`, `doc ? 'taken_at'`) are written into the
//! generated documents, each with a value of the type its reader casts it
//! to (`(doc ->> 'taken_at')::timestamptz` a timestamp, `::boolean` a
//! boolean, `::numeric` a number), or one of the texts a CHECK on the
//! generated column reading it lists. A text read handed to a function
//! (`parse_time(doc ->> 'at')`) or cast to a type of the project's (an
//! enum) gets the first kind of value the server accepts there: an enum's
//! label, a timestamp, a date, a number, a boolean, an ISO 8601 duration,
//! a word. A NOT NULL generated column then finds its key; a table whose
//! rows are documents gets rows at all.
//!
//! The apps' statements are read the same way (`doc->>'kind' = $1`), by
//! the column's name: a statement reading a like-named column of another
//! table adds a key no reader needs, which does no harm. What it is not:
//! a reading of expressions beyond these operators (`jsonb_path_query`,
//! `@>` containment, keys given as parameters).

use std::collections::BTreeMap;

use postgres::GenericClient;

use super::catalogue::{Table, TypeKind};
use super::families::Literals;
use super::family::{each_of, Family};
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
    /// An ISO 8601 duration (`PT5M`).
    Duration,
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
/// column `k` (and what `app_statements` read of a column of its name),
/// when they read any and `k` holds JSON. The outer error is a lost
/// connection.
pub(super) fn shaped_documents(
    c: &mut impl GenericClient,
    t: &Table,
    k: usize,
    app_statements: &[String],
) -> Result<Option<Family>, postgres::Error> {
    let col = &t.columns[k];
    if !is_json(&col.ty.kind) {
        return Ok(None);
    }
    let mut shape = Shape::default();
    let apps = app_statements.iter().map(|s| (s.as_str(), None));
    for (expr, generated) in readers(t).into_iter().chain(apps) {
        let reads = reads_of(expr, &col.name);
        // A generated column that is one read: its CHECKs say more.
        let listed = match (&reads[..], generated) {
            ([read], Some(g)) if read.leaf == Leaf::Text && read.taker.is_none() => {
                listed_texts(t, g)
            }
            _ => None,
        };
        for read in reads {
            let leaf = match (&read.leaf, &listed, &read.taker) {
                (Leaf::Text, Some(texts), _) => Leaf::OneOf(texts.clone()),
                (Leaf::Text, None, Some(taker)) => accepted(c, taker)?,
                _ => read.leaf,
            };
            shape.add(&read.path, leaf);
        }
    }
    if shape.0.is_empty() {
        return Ok(None);
    }
    Ok(Some(Family {
        sql: shape.sql(),
        injective: true,
        cycle: None,
    }))
}

/// What a text read is handed to: a function of the project's, or a
/// cast to a type [`cast_leaf`] does not know (an enum).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Taker {
    Function(String),
    Cast(String),
}

/// The first kind of value `taker` accepts as text, tried on the server
/// (each in a savepoint): an enum's labels, a timestamp, a date, a
/// number, a boolean, a duration; a word when none is.
fn accepted(c: &mut impl GenericClient, taker: &Taker) -> Result<Leaf, postgres::Error> {
    let apply = |v: &str| match taker {
        Taker::Function(f) => format!("SELECT ({f}({}))::text", quote_literal(v)),
        Taker::Cast(ty) => format!("SELECT ({}::{ty})::text", quote_literal(v)),
    };
    if let Taker::Cast(ty) = taker {
        let labels = format!("SELECT enum_range(NULL::{ty})::text[]");
        if let Ok(Some(row)) = super::probe::probe_opt(c, &labels)? {
            let labels: Vec<String> = row.get(0);
            if !labels.is_empty() {
                return Ok(Leaf::OneOf(labels));
            }
        }
    }
    let tries = [
        ("2020-01-01 00:00:00+00", Leaf::Timestamp),
        ("2020-01-01", Leaf::Date),
        ("1", Leaf::Number),
        ("true", Leaf::Bool),
        ("PT1M", Leaf::Duration),
    ];
    for (value, leaf) in tries {
        if let Ok(Some(_)) = super::probe::probe_opt(c, &apply(value))? {
            return Ok(leaf);
        }
    }
    // A function of an enum's text: the labels of the type it returns.
    if let Taker::Function(f) = taker {
        if let Some(ty) = returned_enum(c, f)? {
            let labels = format!("SELECT enum_range(NULL::{ty})::text[]");
            if let Ok(Some(row)) = super::probe::probe_opt(c, &labels)? {
                let labels: Vec<String> = row.get(0);
                if !labels.is_empty() {
                    return Ok(Leaf::OneOf(labels));
                }
            }
        }
    }
    Ok(Leaf::Text)
}

/// The enum type function `f` (of one argument) returns, if it does.
fn returned_enum(c: &mut impl GenericClient, f: &str) -> Result<Option<String>, postgres::Error> {
    let name = f.rsplit('.').next().unwrap_or(f);
    let sql = format!(
        "SELECT format_type(p.prorettype, NULL) FROM pg_proc p JOIN pg_type t ON t.oid = p.prorettype
          WHERE p.proname = {} AND p.pronargs = 1 AND t.typtype = 'e' LIMIT 1",
        quote_literal(name)
    );
    Ok(match super::probe::probe_opt(c, &sql)? {
        Ok(Some(row)) => Some(row.get(0)),
        _ => None,
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

/// One read of a JSON column: its path of keys, what is read at its
/// end, and what a text read is handed to, if [`accepted`] must find out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Read {
    path: Vec<String>,
    leaf: Leaf,
    taker: Option<Taker>,
}

/// Every read of column `column` in `expr` (as `pg_get_expr` spells it).
fn reads_of(expr: &str, column: &str) -> Vec<Read> {
    let mut out = Vec::new();
    let quoted = format!("\"{}\"", column.replace('"', "\"\""));
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let mut from = 0;
    while let Some(found) = find_column(expr, column, &quoted, from, ident) {
        let (start, len) = found;
        from = start + len;
        if let Some((path, leaf, cast)) = chain(&expr[from..]) {
            let taker = match (&leaf, cast) {
                (Leaf::Text, Some(ty)) => Some(Taker::Cast(ty)),
                (Leaf::Text, None) => calling(&expr[..start]).map(Taker::Function),
                _ => None,
            };
            out.push(Read { path, leaf, taker });
        }
    }
    out
}

/// The function whose call's first argument starts where `before` ends
/// (`parse_time((`), if any: a plain or schema-qualified name, not a
/// keyword.
fn calling(before: &str) -> Option<String> {
    let t = before.trim_end_matches(|c: char| c == '(' || c.is_whitespace());
    if t.len() == before.len() || !before.trim_end().ends_with('(') {
        return None;
    }
    let name: String = t
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect::<Vec<char>>()
        .into_iter()
        .rev()
        .collect();
    const NOT_FUNCTIONS: [&str; 5] = ["and", "or", "not", "in", "coalesce"];
    let known = NOT_FUNCTIONS.contains(&name.to_ascii_lowercase().as_str());
    (!name.is_empty() && !known && !name.starts_with(|c: char| c.is_ascii_digit())).then_some(name)
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
        // Bytes, not `&str` slices: `i` may sit inside a multi-byte
        // character of an identifier or literal.
        if !in_literal {
            if b[i..].starts_with(quoted.as_bytes()) {
                return Some((i, quoted.len()));
            }
            let before_ok = i == 0 || !ident(b[i - 1]);
            if before_ok && b[i..].starts_with(column.as_bytes()) {
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
/// one follows the closing parentheses: its leaf, and the type's name when
/// [`cast_leaf`] does not know it.
fn chain(rest: &str) -> Option<(Vec<String>, Leaf, Option<String>)> {
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
    let mut unknown = None;
    if leaf == Leaf::Text {
        let after = s.trim_start_matches(|c: char| c == ')' || c.is_whitespace());
        if let Some(ty) = after.strip_prefix("::") {
            leaf = cast_leaf(ty);
            if leaf == Leaf::Text && !ty.starts_with("text") && !ty.starts_with("character") {
                let name: String = ty
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '"'))
                    .collect();
                unknown = (!name.is_empty()).then_some(name);
            }
        }
    }
    Some((path, leaf, unknown))
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
        Leaf::Duration => format!("'PT' || ({I}) % 1000 || 'S'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &[&str], leaf: Leaf, taker: Option<Taker>) -> Read {
        Read {
            path: path.iter().map(|s| s.to_string()).collect(),
            leaf,
            taker,
        }
    }

    #[test]
    fn reads_are_found_with_their_paths_and_casts() {
        assert_eq!(
            reads_of("(body ->> 'kind'::text)", "body"),
            [read(&["kind"], Leaf::Text, None)]
        );
        assert_eq!(
            reads_of(
                "(((body -> 'meta'::text) ->> 'revision'::text))::integer",
                "body"
            ),
            [read(&["meta", "revision"], Leaf::Number, None)]
        );
        assert_eq!(
            reads_of("(doc #>> '{origin,gateway}'::text[])", "doc"),
            [read(&["origin", "gateway"], Leaf::Text, None)]
        );
        assert_eq!(
            reads_of(
                "((doc ? 'taken_at'::text) AND (((doc ->> 'taken_at'::text))::timestamp with time zone IS NOT NULL))",
                "doc"
            ),
            [
                read(&["taken_at"], Leaf::Present, None),
                read(&["taken_at"], Leaf::Timestamp, None)
            ]
        );
        // Another column, or the name inside a literal: no read.
        assert!(reads_of("(docs ->> 'a'::text) = 'doc'", "doc").is_empty());
        // Characters of several bytes around it are walked over.
        assert_eq!(
            reads_of("(\"größe\" > 0) AND (doc ->> 'é'::text) = 'ü'", "doc"),
            [read(&["é"], Leaf::Text, None)]
        );
    }

    #[test]
    fn a_text_handed_to_a_function_or_an_unknown_type_says_to_which() {
        assert_eq!(
            reads_of("parse_time((doc ->> 'at'::text))", "doc"),
            [read(
                &["at"],
                Leaf::Text,
                Some(Taker::Function("parse_time".into()))
            )]
        );
        assert_eq!(
            reads_of("((doc #>> '{state,now}'::text[]))::run_state", "doc"),
            [read(
                &["state", "now"],
                Leaf::Text,
                Some(Taker::Cast("run_state".into()))
            )]
        );
        assert_eq!(
            reads_of("COALESCE((doc ->> 'a'::text), ''::text)", "doc"),
            [read(&["a"], Leaf::Text, None)]
        );
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

//! What an app's statement reads or writes, from its syntax tree: the
//! shape the reader comparison needs to run it on real rows.
//!
//! A reader (`SELECT … FROM t WHERE input_collection_id = $1 AND name =
//! $2`) is run with values that name existing rows: each parameter is
//! bound to the column of `t` its predicate compares it to with `=`
//! (`column = $N`, `$N = column`, `column = ANY($N)`, `column IN ($N,
//! $M)`: [`ReadShape::keys`]), so sampling distinct `(input_collection_id,
//! name)` pairs of `t` gives bindings that return rows. Its `WHERE`'s
//! top-level conjuncts ([`ReadShape::filters`]) name the predicate that
//! excludes a row when one goes missing. A parameter compared any other
//! way (`LIKE`, a range `>= $1`, inside a function call) cannot be
//! inferred soundly (a range's bound decides how many rows come back):
//! the statement's `-- sample: SELECT …` line says what to bind instead.
//!
//! A writer's target table ([`write_target`]: an `INSERT`, upsert
//! included, or an `UPDATE`) tells which readers can be run on the rows
//! it wrote. Parsed with the grammar that splits files
//! ([`crate::sql`]); nothing here reads a database.

use std::collections::{BTreeMap, BTreeSet};

use squawk_syntax::ast::{AstNode, Stmt};
use squawk_syntax::{SyntaxKind, SyntaxNode};

/// How a read statement can be bound to existing rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadShape {
    /// The table it reads, as the statement names it (`tickets`,
    /// `sales.orders`), lower-cased unless quoted.
    pub table: String,
    /// `$N` → the column of [`ReadShape::table`] it is compared to with
    /// `=` (either side), `= ANY($N)` or `IN (…, $N, …)`.
    pub keys: BTreeMap<usize, String>,
    /// The keyed parameters that take an array (`column = ANY($N)`): a
    /// column's value is bound as the one-element array holding it.
    pub arrays: BTreeSet<usize>,
    /// Whether it cuts its result (`LIMIT`, `OFFSET`, `FETCH`): which
    /// rows it returns then depends on the others, so a row it leaves out
    /// is not one its filters exclude.
    pub limited: bool,
    /// How many parameters it has (the highest `$N`).
    pub params: usize,
    /// Its `WHERE`'s top-level conjuncts, in order.
    pub filters: Vec<Filter>,
    /// `$N` → the value the app binds it to in every call (`-- bound:`
    /// lines, [`bound_values`]): compared with that value, never keyed
    /// to a column (`is_ready = $2`, always bound `true`, is not run
    /// with every value `is_ready` holds).
    pub bound: BTreeMap<usize, String>,
}

impl ReadShape {
    /// Whether every parameter is bound to a column or to the app's one
    /// value.
    pub fn fully_keyed(&self) -> bool {
        (1..=self.params).all(|n| self.keys.contains_key(&n) || self.bound.contains_key(&n))
    }

    /// The key columns, in parameter order.
    pub fn key_columns(&self) -> Vec<String> {
        self.keys.values().cloned().collect()
    }

    /// The shape with `bound` (from the statement's `-- bound:` lines)
    /// taking those parameters out of the keys.
    pub fn with_bound(mut self, bound: BTreeMap<usize, String>) -> ReadShape {
        for n in bound.keys() {
            self.keys.remove(n);
            self.arrays.remove(n);
        }
        self.bound = bound;
        self
    }

    /// Parameter values from one value per key column (in parameter
    /// order) and the bound values: an `= ANY($N)` parameter takes its
    /// column's value as a one-element array.
    pub fn params_of(&self, keyed: &[Option<String>]) -> Vec<Option<String>> {
        let mut keyed = keyed.iter();
        (1..=self.params.max(keyed.len()))
            .map(|n| match self.bound.get(&n) {
                Some(v) => Some(v.clone()),
                None => match keyed.next().cloned().flatten() {
                    Some(v) if self.arrays.contains(&n) => Some(one_element_array(&v)),
                    v => v,
                },
            })
            .collect()
    }
}

/// `value` as the text of a one-element array (`{"a b"}`), quoted so
/// that commas, braces and quotes stay inside the element.
pub fn one_element_array(value: &str) -> String {
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    format!("{{\"{escaped}\"}}")
}

/// The values a statement's `-- bound: $N = 'value'` lines give (what
/// the app binds `$N` to in every call, as `rollsafe capture` writes
/// them from the server's log); lines it cannot read are ignored (the
/// parameter is then keyed or sampled as without them).
pub fn bound_values<'a>(lines: impl Iterator<Item = &'a str>) -> BTreeMap<usize, String> {
    lines
        .filter_map(|line| {
            let (param, value) = line.split_once('=')?;
            let n: usize = param.trim().strip_prefix('$')?.parse().ok()?;
            let value = value.trim();
            let inner = value.strip_prefix('\'')?.strip_suffix('\'')?;
            (n > 0).then(|| (n, inner.replace("''", "'")))
        })
        .collect()
}

/// One conjunct of a `WHERE`: its text and the column names in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub text: String,
    pub columns: Vec<String>,
}

/// Runs `f` on the only statement of `sql`; Err says why there is not one.
fn with_statement<T: Send>(
    sql: &str,
    f: impl FnOnce(&Stmt) -> Result<T, String> + Send,
) -> Result<T, String> {
    crate::sql::with_parse(sql, |parse| {
        if let Some(e) = parse.errors().first() {
            return Err(format!("rollsafe's SQL grammar cannot read it ({e})"));
        }
        let stmts: Vec<Stmt> = parse.tree().stmts().collect();
        let [stmt] = stmts.as_slice() else {
            return Err("it is not one statement".into());
        };
        f(stmt)
    })
    .map_err(|e| e.to_string())?
}

/// An identifier as PostgreSQL folds it: `"Name"` keeps its case, `Name`
/// is `name`.
fn folded(ident: &str) -> String {
    let t = ident.trim();
    match t.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => t.to_lowercase(),
    }
}

/// The highest `$N` in `node`.
fn param_count(node: &SyntaxNode) -> usize {
    node.descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .filter(|t| t.kind() == SyntaxKind::POSITIONAL_PARAM)
        .filter_map(|t| t.text().trim_start_matches('$').parse::<usize>().ok())
        .max()
        .unwrap_or(0)
}

/// The parameter number when `node` is `$N`, `$N::type`, `($N)` or
/// `CAST($N AS type)`.
fn as_param(node: &SyntaxNode) -> Option<usize> {
    match node.kind() {
        SyntaxKind::LITERAL => {
            let t = node.first_token()?;
            (t.kind() == SyntaxKind::POSITIONAL_PARAM)
                .then(|| t.text().trim_start_matches('$').parse().ok())
                .flatten()
        }
        SyntaxKind::CAST_EXPR | SyntaxKind::PAREN_EXPR => {
            node.children().find_map(|c| as_param(&c))
        }
        _ => None,
    }
}

/// The parameter number when `node` is `ANY($N)` or `SOME($N)` (an
/// array parameter compared element-wise).
fn as_any_param(node: &SyntaxNode) -> Option<usize> {
    if node.kind() != SyntaxKind::CALL_EXPR {
        return None;
    }
    let call = node.children().next()?;
    if !matches!(call.kind(), SyntaxKind::ANY_FN | SyntaxKind::SOME_FN) {
        return None;
    }
    let args: Vec<SyntaxNode> = call.children().collect();
    match args.as_slice() {
        [one] => as_param(one),
        _ => None,
    }
}

/// The parameters of `(…, $N, …)` when every item is one.
fn as_param_list(node: &SyntaxNode) -> Option<Vec<usize>> {
    if !matches!(node.kind(), SyntaxKind::TUPLE_EXPR | SyntaxKind::PAREN_EXPR) {
        return None;
    }
    node.children().map(|c| as_param(&c)).collect()
}

/// Parameters a conjunct compares to one column.
struct Keyed {
    params: Vec<usize>,
    /// Whether they take an array (`= ANY($N)`).
    array: bool,
    /// The column, with its qualifier if it has one.
    column: (Option<String>, String),
}

/// The parameters a conjunct compares to one column: `col = $N`, `$N =
/// col`, `col = ANY($N)`, `col IN ($N, …)`. None for any other shape.
fn keyed_comparison(part: &SyntaxNode) -> Option<Keyed> {
    if part.kind() != SyntaxKind::BIN_EXPR {
        return None;
    }
    let sides = operands(part);
    let [l, r] = sides.as_slice() else {
        return None;
    };
    let keyed = |params, array, column| {
        Some(Keyed {
            params,
            array,
            column,
        })
    };
    match operator(part).as_deref()? {
        "=" => match (as_param(l), as_param(r)) {
            (Some(n), None) => keyed(vec![n], false, as_column(r)?),
            (None, Some(n)) => keyed(vec![n], false, as_column(l)?),
            _ => keyed(vec![as_any_param(r)?], true, as_column(l)?),
        },
        "in" => keyed(as_param_list(r)?, false, as_column(l)?),
        _ => None,
    }
}

/// The column when `node` is `col` or `qualifier.col` (the qualifier
/// folded, if any).
fn as_column(node: &SyntaxNode) -> Option<(Option<String>, String)> {
    match node.kind() {
        SyntaxKind::NAME_REF => Some((None, folded(&node.text().to_string()))),
        SyntaxKind::FIELD_EXPR => {
            let parts: Vec<SyntaxNode> = node.children().collect();
            let [base, field] = parts.as_slice() else {
                return None;
            };
            let (None, qualifier) = as_column(base)? else {
                return None;
            };
            (field.kind() == SyntaxKind::NAME_REF)
                .then(|| (Some(qualifier), folded(&field.text().to_string())))
        }
        SyntaxKind::PAREN_EXPR => {
            let inner: Vec<SyntaxNode> = node.children().collect();
            match inner.as_slice() {
                [one] => as_column(one),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The operator of a binary expression, lower-cased (`=`, `and`).
fn operator(bin: &SyntaxNode) -> Option<String> {
    bin.children_with_tokens()
        .find(|c| match c {
            squawk_syntax::SyntaxElement::Token(t) => {
                !matches!(t.kind(), SyntaxKind::WHITESPACE | SyntaxKind::COMMENT)
            }
            squawk_syntax::SyntaxElement::Node(n) => n.kind() == SyntaxKind::OP,
        })
        .map(|op| op.to_string().trim().to_lowercase())
}

/// The operands of a binary expression (the nodes that are not its
/// operator).
fn operands(bin: &SyntaxNode) -> Vec<SyntaxNode> {
    bin.children()
        .filter(|c| c.kind() != SyntaxKind::OP)
        .collect()
}

/// The top-level conjuncts of `expr` (split on `AND`).
/// The parts a statement's WHERE clause ANDs together; none without one.
fn where_conjuncts(statement: &SyntaxNode) -> Vec<SyntaxNode> {
    let mut parts = Vec::new();
    if let Some(expr) = statement
        .children()
        .find(|c| c.kind() == SyntaxKind::WHERE_CLAUSE)
        .and_then(|w| w.children().next())
    {
        conjuncts(&expr, &mut parts);
    }
    parts
}

fn conjuncts(expr: &SyntaxNode, out: &mut Vec<SyntaxNode>) {
    // `WHERE (a = $1 AND b)`, as Django writes every WHERE of two or more
    // conditions: the parentheses group nothing else, so their conjuncts
    // are the clause's (one reader of two conditions was never keyed, so
    // never compared with the older app's reader of the same rows).
    let mut inner = expr.children();
    if expr.kind() == SyntaxKind::PAREN_EXPR {
        if let (Some(only), None) = (inner.next(), inner.next()) {
            return conjuncts(&only, out);
        }
    }
    if expr.kind() == SyntaxKind::BIN_EXPR && operator(expr).as_deref() == Some("and") {
        for side in operands(expr) {
            conjuncts(&side, out);
        }
    } else {
        out.push(expr.clone());
    }
}

/// The column names a conjunct mentions.
fn columns_in(node: &SyntaxNode) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in node.descendants_with_tokens() {
        let Some(n) = n.into_node() else { continue };
        let name = match n.kind() {
            // `t.col` names col (its qualifier is a table).
            SyntaxKind::FIELD_EXPR => as_column(&n).map(|(_, col)| col),
            SyntaxKind::NAME_REF
                if n.parent().map(|p| p.kind()) != Some(SyntaxKind::FIELD_EXPR)
                    && n.parent().map(|p| p.kind()) != Some(SyntaxKind::CALL_EXPR) =>
            {
                Some(folded(&n.text().to_string()))
            }
            _ => None,
        };
        if let Some(name) = name.filter(|n| !out.contains(n)) {
            out.push(name);
        }
    }
    out
}

/// The tables a `FROM` clause reads: (name as written, folded; alias).
fn from_tables(from: &SyntaxNode) -> Vec<(String, Option<String>)> {
    from.descendants()
        .filter(|n| n.kind() == SyntaxKind::RELATION_FROM_ITEM)
        .filter_map(|item| {
            let name = item
                .children()
                .find(|c| {
                    c.kind() == SyntaxKind::RELATION_NAME_REF || c.kind() == SyntaxKind::PATH_REF
                })
                .or_else(|| {
                    item.descendants()
                        .find(|c| c.kind() == SyntaxKind::PATH_REF)
                })?;
            let name = name
                .text()
                .to_string()
                .split('.')
                .map(folded)
                .collect::<Vec<_>>()
                .join(".");
            let alias = item
                .children()
                .find(|c| c.kind() == SyntaxKind::FROM_ALIAS)
                .and_then(|a| {
                    a.descendants()
                        .find(|n| n.kind() == SyntaxKind::TABLE_ALIAS)
                        .map(|n| folded(&n.text().to_string()))
                });
            Some((name, alias))
        })
        .collect()
}

/// What a reader compares its parameters to; Err says why it cannot be
/// read that way (it is then compared only with a `-- sample:` line).
pub fn infer_read(sql: &str) -> Result<ReadShape, String> {
    with_statement(sql, |stmt| {
        let Stmt::Select(select) = stmt else {
            return Err("it is not a plain SELECT (a UNION, VALUES or another statement)".into());
        };
        let node = select.syntax();
        let from = node
            .children()
            .find(|c| c.kind() == SyntaxKind::FROM_CLAUSE)
            .ok_or("it reads no table (no FROM)")?;
        let tables = from_tables(&from);
        let Some((table, alias)) = tables.first().cloned() else {
            return Err("its FROM names no table".into());
        };
        let unqualified_is_main = tables.len() == 1;
        let mut shape = ReadShape {
            table: table.clone(),
            params: param_count(node),
            limited: node.children().any(|c| {
                matches!(
                    c.kind(),
                    SyntaxKind::LIMIT_CLAUSE | SyntaxKind::OFFSET_CLAUSE | SyntaxKind::FETCH_CLAUSE
                )
            }),
            ..ReadShape::default()
        };
        let last = table.rsplit('.').next().unwrap_or(&table).to_string();
        let of_main = |qualifier: &Option<String>| match qualifier {
            None => unqualified_is_main,
            Some(q) => alias.as_deref().map_or(*q == last, |a| a == q),
        };
        for part in &where_conjuncts(node) {
            shape.filters.push(Filter {
                text: part
                    .text()
                    .to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
                columns: columns_in(part),
            });
            let Some(Keyed {
                params,
                array,
                column: (qualifier, column),
            }) = keyed_comparison(part)
            else {
                continue;
            };
            if !of_main(&qualifier) {
                continue;
            }
            for n in params {
                // The first comparison of a parameter binds it.
                if let std::collections::btree_map::Entry::Vacant(e) = shape.keys.entry(n) {
                    e.insert(column.clone());
                    if array {
                        shape.arrays.insert(n);
                    }
                }
            }
        }
        Ok(shape)
    })
}

/// Whether a statement locks the rows it reads (`FOR UPDATE`/`SHARE`):
/// part of a write, not a reader to compare.
pub fn locks_rows(sql: &str) -> bool {
    with_statement(sql, |stmt| {
        Ok(stmt
            .syntax()
            .descendants()
            .any(|n| n.kind() == SyntaxKind::LOCKING_CLAUSE))
    })
    .unwrap_or(false)
}

/// The table a statement writes rows into, folded as named: an `INSERT`
/// (an upsert too) or an `UPDATE`; None for any other statement (a
/// `DELETE` leaves no row to read back).
pub fn write_target(sql: &str) -> Option<String> {
    with_statement(sql, |stmt| {
        let name = match stmt {
            Stmt::Insert(insert) => insert.syntax().children().find(|c| {
                c.kind() == SyntaxKind::RELATION_NAME_REF || c.kind() == SyntaxKind::PATH_REF
            }),
            Stmt::Update(update) => update
                .syntax()
                .children()
                .find(|c| c.kind() == SyntaxKind::RELATION_NAME)
                .and_then(|n| n.descendants().find(|c| c.kind() == SyntaxKind::PATH_REF)),
            _ => None,
        }
        .ok_or_else(String::new)?;
        Ok(name
            .text()
            .to_string()
            .split('.')
            .map(folded)
            .collect::<Vec<_>>()
            .join("."))
    })
    .ok()
}

/// What a write statement puts where: its table, the column each
/// parameter is written to (`INSERT … (col) VALUES ($N)`, `UPDATE … SET
/// col = $N`), and the column each parameter of an `UPDATE`'s `WHERE`
/// is compared to (the row it must find).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteShape {
    pub table: String,
    pub written: BTreeMap<usize, String>,
    pub keys: BTreeMap<usize, String>,
}

/// The write shape of an `INSERT … VALUES` with a column list, or an
/// `UPDATE`; None for any other statement.
pub fn infer_write(sql: &str) -> Option<WriteShape> {
    let table = write_target(sql)?;
    with_statement(sql, |stmt| {
        let node = stmt.syntax();
        let mut shape = WriteShape {
            table: table.clone(),
            ..WriteShape::default()
        };
        let target_name = |n: &SyntaxNode| {
            n.descendants()
                .find(|c| c.kind() == SyntaxKind::COLUMN_NAME_REF)
                .map(|c| folded(&c.text().to_string()))
        };
        match stmt {
            Stmt::Insert(_) => {
                let columns: Vec<Option<String>> = node
                    .children()
                    .find(|c| c.kind() == SyntaxKind::COLUMN_TARGET_LIST)
                    .ok_or_else(String::new)?
                    .children()
                    .filter(|c| c.kind() == SyntaxKind::COLUMN_TARGET)
                    .map(|c| target_name(&c))
                    .collect();
                let rows = node
                    .children()
                    .find(|c| c.kind() == SyntaxKind::VALUES)
                    .into_iter()
                    .flat_map(|v| v.descendants().filter(|c| c.kind() == SyntaxKind::ROW));
                for row in rows {
                    for (item, column) in row.children().zip(&columns) {
                        if let (Some(n), Some(column)) = (as_param(&item), column) {
                            shape.written.entry(n).or_insert_with(|| column.clone());
                        }
                    }
                }
            }
            Stmt::Update(_) => {
                for set in node
                    .descendants()
                    .filter(|c| c.kind() == SyntaxKind::SET_SINGLE_COLUMN)
                {
                    let column = set
                        .children()
                        .find(|c| c.kind() == SyntaxKind::COLUMN_TARGET)
                        .and_then(|c| target_name(&c));
                    let param = set
                        .children()
                        .find(|c| c.kind() == SyntaxKind::SET_EXPR)
                        .and_then(|e| e.children().next())
                        .and_then(|e| as_param(&e));
                    if let (Some(n), Some(column)) = (param, column) {
                        shape.written.insert(n, column);
                    }
                }
                for part in &where_conjuncts(node) {
                    if let Some(k) = keyed_comparison(part).filter(|k| !k.array) {
                        for n in k.params {
                            shape.keys.entry(n).or_insert_with(|| k.column.1.clone());
                        }
                    }
                }
            }
            _ => return Err(String::new()),
        }
        Ok(shape)
    })
    .ok()
}

/// A `-- sample:` query must be one statement that only reads.
pub fn check_sample(sql: &str) -> Result<(), String> {
    match crate::sql::classify::classify(sql) {
        crate::sql::classify::Class::Read if !locks_rows(sql) => Ok(()),
        _ => Err("a `-- sample:` line must be one SELECT that only reads".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(shape: &ReadShape) -> Vec<(usize, &str)> {
        shape.keys.iter().map(|(n, c)| (*n, c.as_str())).collect()
    }

    #[test]
    fn a_bound_parameter_is_compared_with_its_value_not_keyed() {
        let bound =
            bound_values(["$2 = 't'", "$3 = 'it''s'", "$x = 'no'", "$4 = NULL"].into_iter());
        assert_eq!(
            bound,
            BTreeMap::from([(2, "t".to_string()), (3, "it's".to_string())])
        );
        let s = infer_read("SELECT id FROM recipes WHERE cook_id = $1 AND published = $2")
            .unwrap()
            .with_bound(BTreeMap::from([(2, "t".to_string())]));
        assert!(s.fully_keyed());
        assert_eq!(s.key_columns(), ["cook_id"]);
        assert_eq!(
            s.params_of(&[Some("7".into())]),
            [Some("7".to_string()), Some("t".to_string())]
        );
    }

    #[test]
    fn a_write_says_which_column_each_parameter_goes_to() {
        let w =
            infer_write("INSERT INTO cooks (email, name) VALUES ($1, $2) RETURNING id").unwrap();
        assert_eq!(w.table, "cooks");
        assert_eq!(
            w.written,
            BTreeMap::from([(1, "email".to_string()), (2, "name".to_string())])
        );
        let w = infer_write("UPDATE recipes SET published = $1, title = $3 WHERE id = $2").unwrap();
        assert_eq!(
            w.written,
            BTreeMap::from([(1, "published".to_string()), (3, "title".to_string())])
        );
        assert_eq!(w.keys, BTreeMap::from([(2, "id".to_string())]));
        assert!(infer_write("SELECT 1").is_none());
        assert!(infer_write("INSERT INTO t SELECT * FROM u").is_none());
    }

    #[test]
    fn parameters_compared_with_equals_bind_to_their_columns() {
        let s = infer_read(
            "SELECT id, name FROM attached_functions\n WHERE input_collection_id = $1::uuid AND name = $2::text AND NOT is_deleted",
        )
        .unwrap();
        assert_eq!(s.table, "attached_functions");
        assert_eq!(s.params, 2);
        assert_eq!(keys(&s), [(1, "input_collection_id"), (2, "name")]);
        assert!(s.fully_keyed());
        let texts: Vec<&str> = s.filters.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "input_collection_id = $1::uuid",
                "name = $2::text",
                "NOT is_deleted"
            ]
        );
        assert_eq!(s.filters[2].columns, ["is_deleted"]);
    }

    #[test]
    fn a_parenthesized_where_of_several_conditions_is_keyed() {
        let shape = infer_read(
            r#"SELECT "p"."id" FROM "packets" "p" WHERE ("p"."grower_id" = $1 AND "p"."is_listed")"#,
        )
        .unwrap();
        assert_eq!(keys(&shape), vec![(1, "grower_id")]);
        assert!(shape.fully_keyed());
        let nested = infer_read(
            "SELECT id FROM packets WHERE ((grower_id = $1) AND (species = $2 AND NOT is_listed))",
        )
        .unwrap();
        assert_eq!(keys(&nested), vec![(1, "grower_id"), (2, "species")]);
        // An OR inside the parentheses is one condition, not keyed.
        let either =
            infer_read("SELECT id FROM packets WHERE (grower_id = $1 OR species = $2)").unwrap();
        assert!(keys(&either).is_empty());
    }

    #[test]
    fn qualified_reversed_and_aliased_comparisons_are_read() {
        let s = infer_read(
            "SELECT t.id FROM Tickets AS t JOIN events e ON e.id = t.event_id WHERE $1 = t.event_id AND e.name = $2 AND t.confirmed ORDER BY t.seat",
        )
        .unwrap();
        assert_eq!(s.table, "tickets");
        // $2 compares a column of another table: not a key of tickets.
        assert_eq!(keys(&s), [(1, "event_id")]);
        assert!(!s.fully_keyed());
        assert_eq!(s.filters[2].text, "t.confirmed");
        assert_eq!(s.filters[2].columns, ["confirmed"]);
    }

    #[test]
    fn what_cannot_be_inferred_says_so() {
        let s = infer_read("SELECT id FROM docs WHERE title LIKE $1").unwrap();
        assert_eq!((s.params, s.fully_keyed()), (1, false));
        assert!(infer_read("SELECT 1 UNION SELECT 2").is_err());
        assert!(infer_read("SELECT now()").is_err());
        let none = infer_read("SELECT id FROM docs ORDER BY id LIMIT 5").unwrap();
        assert!(none.fully_keyed() && none.filters.is_empty());
    }

    #[test]
    fn any_in_and_reversed_comparisons_bind_too_ranges_do_not() {
        let s = infer_read(
            "SELECT id FROM t WHERE id = ANY($1::uuid[]) AND a IN ($2, $3) AND $4 = b AND c >= $5 LIMIT 3",
        )
        .unwrap();
        assert_eq!(keys(&s), [(1, "id"), (2, "a"), (3, "a"), (4, "b")]);
        assert_eq!(s.arrays, BTreeSet::from([1]));
        assert!(!s.fully_keyed() && s.limited);
        let s = infer_read("SELECT id FROM t WHERE a IN ($1, 2)").unwrap();
        assert!(s.keys.is_empty(), "a list that is not all parameters");
        assert!(!infer_read("SELECT id FROM t WHERE a = $1").unwrap().limited);
    }

    #[test]
    fn writers_and_samples() {
        assert_eq!(
            write_target("INSERT INTO s.Orders (a) VALUES ($1) RETURNING id").as_deref(),
            Some("s.orders")
        );
        assert_eq!(
            write_target("INSERT INTO t (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = 2")
                .as_deref(),
            Some("t")
        );
        assert_eq!(
            write_target("UPDATE S.Tickets AS x SET holder = $2 WHERE id = $1").as_deref(),
            Some("s.tickets")
        );
        assert_eq!(write_target("DELETE FROM t WHERE id = $1"), None);
        assert_eq!(write_target("SELECT 1"), None);
        assert!(locks_rows("SELECT id FROM t WHERE id = $1 FOR UPDATE"));
        assert!(check_sample("SELECT event_id FROM tickets LIMIT 3").is_ok());
        assert!(check_sample("DELETE FROM tickets RETURNING id").is_err());
        assert!(check_sample("WITH x AS (DELETE FROM t RETURNING id) SELECT id FROM x").is_err());
    }
}

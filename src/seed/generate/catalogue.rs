//! What the generator knows of each table: its columns with their types
//! (domains, enums, arrays and ranges resolved to what values they take),
//! its UNIQUE keys, foreign keys and CHECKs, read through the one
//! catalogue reader ([`crate::pg::catalogue`]).

use std::collections::{BTreeSet, HashMap};

use postgres::Client;

use crate::pg::catalogue::{self, ConstraintKind, Relation};
use crate::tables::UserTable;

#[derive(Debug, Clone)]
pub(super) struct Table {
    pub(super) oid: u32,
    /// As messages spell it ([`crate::tables`]).
    pub(super) name: String,
    /// Schema-qualified, for SQL.
    pub(super) qualified: String,
    pub(super) columns: Vec<Column>,
    /// Column numbers of each UNIQUE / PRIMARY KEY constraint or unique
    /// index (with the columns an expression index mentions).
    pub(super) uniques: Vec<Vec<i16>>,
    pub(super) fks: Vec<ForeignKey>,
    pub(super) checks: Vec<Check>,
    /// A partitioned table's key (`pg_get_partkeydef`: `RANGE (day)`) and
    /// its partitions' bounds (`FOR VALUES FROM (…) TO (…)`), from which
    /// [`super::partition`] knows the values its rows may take.
    pub(super) partitioning: Option<(String, Vec<String>)>,
    /// Its enabled user triggers that fire on INSERT, with their mode
    /// (`pg_trigger.tgenabled`: O, A or R), to disable and restore.
    pub(super) insert_triggers: Vec<(String, String)>,
    /// It has a rule on INSERT (`CREATE RULE … ON INSERT`), which a
    /// session in replica mode would not run.
    pub(super) insert_rules: bool,
    /// The expressions of its indexes (`pg_get_expr(indexprs)`): what
    /// they read of a JSON column shapes its documents ([`super::json`]).
    pub(super) index_expressions: Vec<String>,
    /// A unique index on constants only (`CREATE UNIQUE INDEX … ((true))`,
    /// a one-row settings or aggregates table): the table holds at most
    /// one row. Its name.
    pub(super) single_row: Option<String>,
}

impl Table {
    pub(super) fn column(&self, num: i16) -> Option<usize> {
        self.columns.iter().position(|c| c.num == num)
    }
}

#[derive(Debug, Clone)]
pub(super) struct Column {
    pub(super) num: i16,
    pub(super) name: String,
    pub(super) ty: TypeInfo,
    pub(super) typmod: i32,
    /// `format_type` of the column: the cast every value gets.
    pub(super) sql_type: String,
    pub(super) not_null: bool,
    pub(super) default: Option<String>,
    pub(super) identity: bool,
    pub(super) generated: bool,
    /// The shortest `varchar(n)` of the columns whose foreign keys point
    /// at this one: its values land there too, so they must fit it.
    pub(super) referenced_len: Option<i32>,
}

impl Column {
    pub(super) fn not_null(&self) -> bool {
        self.not_null || self.ty.not_null()
    }

    /// The length a value must fit: its type's, or a shorter column's that
    /// references it.
    pub(super) fn max_len(&self) -> Option<i32> {
        match (max_text_len(&self.ty, self.typmod), self.referenced_len) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The type modifier its values are sized by ([`Column::max_len`] as a
    /// `varchar(n)`'s when that is shorter than its own).
    pub(super) fn value_typmod(&self) -> i32 {
        match self.max_len() {
            Some(n) if max_text_len(&self.ty, self.typmod) != Some(n) => n + 4,
            _ => self.typmod,
        }
    }

    /// A default that yields a new value per row (a UNIQUE key holding
    /// such a column needs nothing from us).
    pub(super) fn default_is_unique(&self) -> bool {
        self.identity
            || self.default.as_deref().is_some_and(|d| {
                d.contains("nextval(")
                    || d.contains("gen_random_uuid(")
                    || d.contains("uuid_generate_v")
            })
    }
}

#[derive(Debug, Clone)]
pub(super) struct ForeignKey {
    pub(super) name: String,
    pub(super) cols: Vec<i16>,
    pub(super) ref_table: u32,
    pub(super) ref_cols: Vec<i16>,
    pub(super) match_full: bool,
    /// `DEFERRABLE`: checked at commit when deferred.
    pub(super) deferrable: bool,
}

impl ForeignKey {
    /// Whether NULLs can satisfy it (MATCH SIMPLE: one NULL column is
    /// enough; MATCH FULL: all of them).
    pub(super) fn breakable(&self, t: &Table) -> bool {
        let nullable = |n: &i16| {
            t.column(*n)
                .map(|k| !t.columns[k].not_null())
                .unwrap_or(false)
        };
        if self.match_full {
            self.cols.iter().all(nullable)
        } else {
            self.cols.iter().any(nullable)
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Check {
    pub(super) name: String,
    pub(super) expr: String,
    pub(super) cols: Vec<i16>,
}

#[derive(Debug, Clone)]
pub(super) struct TypeInfo {
    pub(super) kind: TypeKind,
    /// `format_type(oid, NULL)`.
    pub(super) sql: String,
}

#[derive(Debug, Clone)]
pub(super) enum TypeKind {
    /// Byte width.
    Int(u8),
    Numeric,
    Float,
    /// text, varchar, char, name.
    Text,
    Bool,
    Uuid,
    Timestamp,
    Date,
    Time,
    Interval,
    Json,
    Bytea,
    Inet,
    /// macaddr, macaddr8.
    MacAddr,
    Money,
    Enum(Vec<String>),
    Domain {
        base: Box<TypeInfo>,
        base_typmod: i32,
        not_null: bool,
        checks: Vec<String>,
    },
    Array(Box<TypeInfo>),
    /// A range type, of its subtype.
    Range(Box<TypeInfo>),
    Other,
}

impl TypeInfo {
    pub(super) fn not_null(&self) -> bool {
        match &self.kind {
            TypeKind::Domain { not_null, base, .. } => *not_null || base.not_null(),
            _ => false,
        }
    }
}

#[derive(Default)]
pub(super) struct TypeCache(HashMap<u32, TypeInfo>);

impl TypeCache {
    pub(super) fn get(&mut self, c: &mut Client, oid: u32) -> Result<TypeInfo, postgres::Error> {
        self.get_depth(c, oid, 0)
    }

    pub(super) fn get_depth(
        &mut self,
        c: &mut Client,
        oid: u32,
        depth: u32,
    ) -> Result<TypeInfo, postgres::Error> {
        if let Some(t) = self.0.get(&oid) {
            return Ok(t.clone());
        }
        let Some(row) = c.query_opt(
            "SELECT t.typtype::text, t.typcategory::text, t.typelem, t.typbasetype, t.typtypmod,
                    t.typnotnull, format_type(t.oid, NULL), t.typname::text,
                    ARRAY(SELECT e.enumlabel::text FROM pg_enum e
                           WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder),
                    ARRAY(SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k
                           WHERE k.contypid = t.oid AND k.contype = 'c' ORDER BY k.conname),
                    (SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid)
               FROM pg_type t WHERE t.oid = $1",
            &[&oid],
        )?
        else {
            return Ok(TypeInfo {
                kind: TypeKind::Other,
                sql: "text".into(),
            });
        };
        let typtype: String = row.get(0);
        let category: String = row.get(1);
        let elem: u32 = row.get(2);
        let base: u32 = row.get(3);
        let base_typmod: i32 = row.get(4);
        let not_null: bool = row.get(5);
        let sql: String = row.get(6);
        let name: String = row.get(7);
        // Nested domains and arrays are shallow in practice; the bound
        // keeps a pathological catalogue from recursing forever.
        let deeper = depth < 8;
        let kind = match (typtype.as_str(), category.as_str()) {
            ("d", _) if deeper => TypeKind::Domain {
                base: Box::new(self.get_depth(c, base, depth + 1)?),
                base_typmod,
                not_null,
                checks: row.get(9),
            },
            ("e", _) => TypeKind::Enum(row.get(8)),
            ("r", _) if deeper => match row.get::<_, Option<u32>>(10) {
                Some(sub) => TypeKind::Range(Box::new(self.get_depth(c, sub, depth + 1)?)),
                None => TypeKind::Other,
            },
            (_, "A") if elem != 0 && deeper => {
                TypeKind::Array(Box::new(self.get_depth(c, elem, depth + 1)?))
            }
            _ => base_kind(&name),
        };
        let info = TypeInfo { kind, sql };
        self.0.insert(oid, info.clone());
        Ok(info)
    }
}

pub(super) fn base_kind(typname: &str) -> TypeKind {
    match typname {
        "int2" => TypeKind::Int(2),
        "int4" => TypeKind::Int(4),
        "int8" => TypeKind::Int(8),
        "numeric" => TypeKind::Numeric,
        "float4" | "float8" => TypeKind::Float,
        "text" | "varchar" | "bpchar" | "name" | "citext" => TypeKind::Text,
        "bool" => TypeKind::Bool,
        "uuid" => TypeKind::Uuid,
        "timestamp" | "timestamptz" => TypeKind::Timestamp,
        "date" => TypeKind::Date,
        "time" | "timetz" => TypeKind::Time,
        "interval" => TypeKind::Interval,
        "json" | "jsonb" => TypeKind::Json,
        "bytea" => TypeKind::Bytea,
        "inet" | "cidr" => TypeKind::Inet,
        "macaddr" | "macaddr8" => TypeKind::MacAddr,
        "money" => TypeKind::Money,
        _ => TypeKind::Other,
    }
}

pub(super) fn read_tables(
    c: &mut Client,
    types: &mut TypeCache,
) -> Result<Vec<Table>, postgres::Error> {
    let all = crate::tables::list(c)?;
    // Partitions get their rows through their parent (PostgreSQL routes
    // each row); a materialized view gets its rows from its refresh.
    let seedable: Vec<Relation> = all
        .iter()
        .filter(|t| t.partition_of.is_none() && t.kind != crate::tables::Kind::MaterializedView)
        .map(UserTable::relation)
        .collect();
    let columns = catalogue::columns(c, &seedable)?;
    let indexes = catalogue::indexes(c, &seedable)?;
    // A unique index a constraint is enforced by (or a foreign key relies
    // on) is that constraint's rule, read once from the constraint.
    let all: Vec<Relation> = all.iter().map(UserTable::relation).collect();
    let constraints = catalogue::constraints(c, &all)?;
    let owned: BTreeSet<&str> = constraints
        .iter()
        .filter_map(|k| k.index.as_deref())
        .collect();
    // What fires on INSERT and how each is partitioned, for all of them
    // at once (a round trip per table costs tens of milliseconds on a
    // real schema).
    let oids: Vec<u32> = seedable.iter().map(|r| r.oid).collect();
    let mut partitioning: HashMap<u32, (String, Vec<String>)> = c
        .query(
            "SELECT r.oid, pg_get_partkeydef(r.oid),
                    ARRAY(SELECT pg_get_expr(k.relpartbound, k.oid)
                            FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid
                           WHERE i.inhparent = r.oid)
               FROM unnest($1::oid[]) AS r(oid)",
            &[&oids],
        )?
        .iter()
        .filter_map(|r| Some((r.get(0), (r.get::<_, Option<String>>(1)?, r.get(2)))))
        .collect();
    // tgtype bit 4: fires on INSERT (row or statement level).
    let mut insert_triggers: HashMap<u32, Vec<(String, String)>> = HashMap::new();
    for r in c.query(
        "SELECT tgrelid, tgname::text, tgenabled::text FROM pg_trigger
          WHERE tgrelid = ANY($1::oid[]) AND NOT tgisinternal AND tgenabled <> 'D'
            AND tgtype::int & 4 <> 0 ORDER BY tgrelid, tgname",
        &[&oids],
    )? {
        insert_triggers
            .entry(r.get(0))
            .or_default()
            .push((r.get(1), r.get(2)));
    }
    // ev_type 3: ON INSERT.
    let insert_rules: BTreeSet<u32> = c
        .query(
            "SELECT DISTINCT ev_class FROM pg_rewrite WHERE ev_class = ANY($1::oid[]) AND ev_type = '3'",
            &[&oids],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut tables = Vec::new();
    for rel in seedable {
        let name = rel.name.clone();
        let mut t = Table {
            oid: rel.oid,
            columns: Vec::new(),
            uniques: Vec::new(),
            fks: Vec::new(),
            checks: Vec::new(),
            partitioning: None,
            insert_triggers: Vec::new(),
            insert_rules: false,
            single_row: None,
            index_expressions: Vec::new(),
            name: rel.name,
            qualified: rel.qualified,
        };
        for col in columns.iter().filter(|col| col.table == name) {
            t.columns.push(Column {
                num: col.num,
                name: col.name.clone(),
                ty: types.get(c, col.type_oid)?,
                typmod: col.typmod,
                sql_type: col.sql_type.clone(),
                not_null: col.not_null,
                default: col.default.clone(),
                identity: col.identity,
                generated: col.generated,
                referenced_len: None,
            });
        }
        if let Some((key, bounds)) = partitioning.remove(&t.oid) {
            t.partitioning = Some((key, bounds));
        }
        t.insert_triggers = insert_triggers.remove(&t.oid).unwrap_or_default();
        t.insert_rules = insert_rules.contains(&t.oid);
        for k in constraints.iter().filter(|k| k.table == name) {
            add_constraint(&mut t, k);
        }
        for i in indexes.iter().filter(|i| i.table == name) {
            t.index_expressions.extend(i.expressions.iter().cloned());
            if i.unique && !owned.contains(i.regclass.as_str()) {
                add_unique_index(&mut t, i);
            }
        }
        tables.push(t);
    }
    limit_by_references(&mut tables);
    Ok(tables)
}

/// [`Column::referenced_len`] of every column a foreign key points at
/// from a `varchar(n)` column: a parent's `text` code must fit its
/// children's `varchar(10)` (else their INSERT fails on `value too long`).
fn limit_by_references(tables: &mut [Table]) {
    let mut limits: Vec<(u32, i16, i32)> = Vec::new();
    for t in tables.iter() {
        for fk in &t.fks {
            for (&n, &rn) in fk.cols.iter().zip(&fk.ref_cols) {
                let Some(col) = t.column(n).map(|k| &t.columns[k]) else {
                    continue;
                };
                if let Some(len) = max_text_len(&col.ty, col.typmod) {
                    limits.push((fk.ref_table, rn, len));
                }
            }
        }
    }
    for (oid, rn, len) in limits {
        let Some(p) = tables.iter_mut().find(|p| p.oid == oid) else {
            continue;
        };
        if let Some(k) = p.column(rn) {
            let col = &mut p.columns[k];
            col.referenced_len = Some(col.referenced_len.map_or(len, |l| l.min(len)));
        }
    }
}

/// The `varchar(n)` / `char(n)` length a value must fit, if any: an
/// explicit cast would silently cut it (and break a UNIQUE key), so
/// candidates are measured instead.
pub(super) fn max_text_len(ty: &TypeInfo, typmod: i32) -> Option<i32> {
    match &ty.kind {
        TypeKind::Text if typmod >= 5 => Some(typmod - 4),
        TypeKind::Domain {
            base, base_typmod, ..
        } => max_text_len(base, if typmod >= 0 { typmod } else { *base_typmod }),
        _ => None,
    }
}

/// A PRIMARY KEY or UNIQUE constraint, a foreign key or a CHECK, as the
/// rule the seeded rows must keep.
pub(super) fn add_constraint(t: &mut Table, k: &catalogue::Constraint) {
    match k.kind {
        ConstraintKind::PrimaryKey | ConstraintKind::Unique => t.uniques.push(k.columns.clone()),
        // The clones PostgreSQL makes of a key into a partitioned table
        // (one per partition) are kept by the key itself.
        ConstraintKind::ForeignKey if k.inherited => {}
        ConstraintKind::ForeignKey => t.fks.push(ForeignKey {
            name: k.name.clone(),
            cols: k.columns.clone(),
            ref_table: k.referenced_oid,
            ref_cols: k.referenced_columns.clone(),
            match_full: k.match_full,
            deferrable: k.definition.contains(" DEFERRABLE")
                && !k.definition.contains("NOT DEFERRABLE"),
        }),
        ConstraintKind::Check => {
            if let Some(expr) = &k.expression {
                t.checks.push(Check {
                    name: k.name.clone(),
                    expr: expr.clone(),
                    cols: k.columns.clone(),
                });
            }
        }
        _ => {}
    }
}

/// A unique index no constraint owns: its columns, and the ones its
/// expressions mention.
pub(super) fn add_unique_index(t: &mut Table, i: &catalogue::IndexInfo) {
    let mut cols: Vec<i16> = i
        .column_numbers
        .iter()
        .copied()
        .filter(|&n| n > 0)
        .collect();
    if let Some(exprs) = &i.expressions {
        cols.extend(mentioned_columns(exprs, &t.columns));
    }
    if !cols.is_empty() {
        t.uniques.push(cols);
    } else if !i.partial && i.expressions.is_some() {
        // Every row has the same key: one row fits.
        t.single_row = Some(i.name.clone());
    }
}

/// Numbers of the columns an expression names (identifiers outside string
/// literals, quoted or not).
pub(super) fn mentioned_columns(expr: &str, columns: &[Column]) -> Vec<i16> {
    let mut names = BTreeSet::new();
    let mut chars = expr.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\'' => {
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                }
            }
            '"' => {
                let mut name = String::new();
                while let Some(c) = chars.next() {
                    if c == '"' {
                        if chars.peek() == Some(&'"') {
                            chars.next();
                            name.push('"');
                        } else {
                            break;
                        }
                    } else {
                        name.push(c);
                    }
                }
                names.insert(name);
            }
            c if c.is_alphabetic() || c == '_' => {
                let mut name = c.to_string();
                while let Some(&c) = chars.peek() {
                    if c.is_alphanumeric() || c == '_' || c == '$' {
                        name.push(c);
                        chars.next();
                    } else {
                        break;
                    }
                }
                names.insert(name);
            }
            _ => {}
        }
    }
    columns
        .iter()
        .filter(|c| names.contains(&c.name))
        .map(|c| c.num)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(num: i16, name: &str) -> Column {
        Column {
            num,
            name: name.into(),
            ty: TypeInfo {
                kind: TypeKind::Text,
                sql: "text".into(),
            },
            typmod: -1,
            sql_type: "text".into(),
            not_null: false,
            default: None,
            identity: false,
            generated: false,
            referenced_len: None,
        }
    }

    #[test]
    fn expression_indexes_name_their_columns() {
        let cols = [column(1, "email"), column(2, "Tenant"), column(3, "x")];
        assert_eq!(
            mentioned_columns("lower(email), \"Tenant\", 'x'", &cols),
            [1, 2]
        );
    }
}

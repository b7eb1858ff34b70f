//! The one reader of PostgreSQL's catalogue: the columns, constraints
//! (foreign keys among them), indexes and planner statistics of the
//! relations a caller names.
//!
//! A caller says which relations it means ([`Relation`]: oid, the name
//! its messages use, the quoted name for SQL), usually the measured
//! tables of [`crate::tables::relations`]; each reader answers with one
//! query for all of them, ordered by that name and then by the object's
//! own name or number, and labels every row with the caller's name. What
//! the readers return is what the catalogue holds, nothing judged: schema
//! snapshots, the plan stage, the generator and `rollsafe check` each
//! take what they need from it.

use postgres::types::ToSql;
use postgres::GenericClient;

/// A relation to read, as the caller names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub oid: u32,
    /// As messages spell it (`orders`, `sales.orders`).
    pub name: String,
    /// Schema-qualified and quoted, for SQL.
    pub qualified: String,
}

/// The relations as a row source `t(oid, name, qualified)` over the
/// query's first three parameters.
const RELATIONS: &str = "unnest($1::oid[], $2::text[], $3::text[]) AS t(oid, name, qualified)";

struct Params {
    oids: Vec<u32>,
    names: Vec<String>,
    qualified: Vec<String>,
}

impl Params {
    fn of(relations: &[Relation]) -> Params {
        Params {
            oids: relations.iter().map(|r| r.oid).collect(),
            names: relations.iter().map(|r| r.name.clone()).collect(),
            qualified: relations.iter().map(|r| r.qualified.clone()).collect(),
        }
    }

    fn sql(&self) -> [&(dyn ToSql + Sync); 3] {
        [&self.oids, &self.names, &self.qualified]
    }
}

/// A column (`pg_attribute`, dropped ones left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its relation, as the caller names it.
    pub table: String,
    pub num: i16,
    pub name: String,
    pub type_oid: u32,
    pub typmod: i32,
    /// `format_type(atttypid, atttypmod)`: `character varying(40)`.
    pub sql_type: String,
    pub not_null: bool,
    /// `pg_get_expr` of its default.
    pub default: Option<String>,
    /// `GENERATED … AS IDENTITY`.
    pub identity: bool,
    /// `GENERATED ALWAYS AS (…) STORED`.
    pub generated: bool,
}

/// Every column of `relations`, by relation and then column number.
pub fn columns(
    c: &mut impl GenericClient,
    relations: &[Relation],
) -> Result<Vec<Column>, postgres::Error> {
    let params = Params::of(relations);
    let rows = c.query(
        &format!(
            "SELECT t.name, a.attnum, a.attname::text, a.atttypid, a.atttypmod,
                    format_type(a.atttypid, a.atttypmod), a.attnotnull,
                    pg_get_expr(d.adbin, d.adrelid), a.attidentity::text, a.attgenerated::text
               FROM {RELATIONS}
               JOIN pg_attribute a ON a.attrelid = t.oid
               LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              WHERE a.attnum > 0 AND NOT a.attisdropped
              ORDER BY t.name, a.attnum"
        ),
        &params.sql(),
    )?;
    Ok(rows
        .iter()
        .map(|r| Column {
            table: r.get(0),
            num: r.get(1),
            name: r.get(2),
            type_oid: r.get(3),
            typmod: r.get(4),
            sql_type: r.get(5),
            not_null: r.get(6),
            default: r.get(7),
            identity: !r.get::<_, &str>(8).is_empty(),
            generated: !r.get::<_, &str>(9).is_empty(),
        })
        .collect())
}

/// What a constraint is (`pg_constraint.contype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConstraintKind {
    PrimaryKey,
    Unique,
    ForeignKey,
    Check,
    Exclusion,
    /// A constraint trigger.
    Trigger,
    /// PostgreSQL 18 stores NOT NULL as a constraint too; nullability is
    /// also [`Column::not_null`], on every major.
    NotNull,
}

impl ConstraintKind {
    fn of(contype: &str) -> Option<ConstraintKind> {
        Some(match contype {
            "p" => ConstraintKind::PrimaryKey,
            "u" => ConstraintKind::Unique,
            "f" => ConstraintKind::ForeignKey,
            "c" => ConstraintKind::Check,
            "x" => ConstraintKind::Exclusion,
            "t" => ConstraintKind::Trigger,
            "n" => ConstraintKind::NotNull,
            _ => return None,
        })
    }
}

/// A constraint (`pg_constraint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    /// Its relation, as the caller names it.
    pub table: String,
    pub name: String,
    pub kind: ConstraintKind,
    /// `pg_get_constraintdef`.
    pub definition: String,
    /// False while NOT VALID.
    pub validated: bool,
    /// `conkey`: the constrained columns' numbers (empty when none).
    pub columns: Vec<i16>,
    /// A CHECK's expression (`pg_get_expr(conbin)`).
    pub expression: Option<String>,
    /// A foreign key's referenced relation (`confrelid`, 0 otherwise).
    pub referenced_oid: u32,
    /// `confkey`: the referenced columns' numbers.
    pub referenced_columns: Vec<i16>,
    /// `MATCH FULL` (else MATCH SIMPLE: one NULL column satisfies it).
    pub match_full: bool,
    /// Made by PostgreSQL for a partition or a referenced partition
    /// (`conparentid <> 0`), not written in a migration.
    pub inherited: bool,
    /// The index it is enforced by or, for a foreign key, the referenced
    /// table's index it relies on ([`IndexInfo::regclass`]).
    pub index: Option<String>,
}

/// Every constraint of `relations`, by relation and then name.
pub fn constraints(
    c: &mut impl GenericClient,
    relations: &[Relation],
) -> Result<Vec<Constraint>, postgres::Error> {
    let params = Params::of(relations);
    let rows = c.query(
        &format!(
            "SELECT t.name, k.conname::text, k.contype::text, pg_get_constraintdef(k.oid),
                    k.convalidated, k.conkey, pg_get_expr(k.conbin, k.conrelid),
                    k.confrelid, k.confkey, k.confmatchtype::text, k.conparentid <> 0,
                    NULLIF(k.conindid, 0)::regclass::text
               FROM {RELATIONS}
               JOIN pg_constraint k ON k.conrelid = t.oid
              ORDER BY t.name, k.conname"
        ),
        &params.sql(),
    )?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(Constraint {
                table: r.get(0),
                name: r.get(1),
                kind: ConstraintKind::of(r.get(2))?,
                definition: r.get(3),
                validated: r.get(4),
                columns: r.get::<_, Option<Vec<i16>>>(5).unwrap_or_default(),
                expression: r.get(6),
                referenced_oid: r.get(7),
                referenced_columns: r.get::<_, Option<Vec<i16>>>(8).unwrap_or_default(),
                match_full: r.get::<_, &str>(9) == "f",
                inherited: r.get(10),
                index: r.get(11),
            })
        })
        .collect())
}

/// A foreign key between two of the relations, by column name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ForeignKey {
    /// The referencing table, as messages name it.
    pub table: String,
    pub name: String,
    /// `pg_get_constraintdef`.
    pub definition: String,
    pub columns: Vec<String>,
    /// The referenced table, as messages name it.
    pub referenced: String,
    pub referenced_columns: Vec<String>,
    /// Both tables schema-qualified and quoted, for the lookup's SQL.
    pub qualified_table: String,
    pub qualified_referenced: String,
}

/// The foreign keys written in migrations (not the copies PostgreSQL makes
/// for partitions) whose both ends are among `relations`.
pub fn foreign_keys(
    c: &mut impl GenericClient,
    relations: &[Relation],
) -> Result<Vec<ForeignKey>, postgres::Error> {
    let names = |oid: u32, nums: &[i16], columns: &[Column]| -> Vec<String> {
        let table = relations.iter().find(|r| r.oid == oid).map(|r| &r.name);
        nums.iter()
            .filter_map(|n| {
                columns
                    .iter()
                    .find(|col| Some(&col.table) == table && col.num == *n)
                    .map(|col| col.name.clone())
            })
            .collect()
    };
    let columns = columns(c, relations)?;
    let mut out = Vec::new();
    for k in constraints(c, relations)? {
        if k.kind != ConstraintKind::ForeignKey || k.inherited {
            continue;
        }
        let (Some(from), Some(to)) = (
            relations.iter().find(|r| r.name == k.table),
            relations.iter().find(|r| r.oid == k.referenced_oid),
        ) else {
            continue;
        };
        out.push(ForeignKey {
            columns: names(from.oid, &k.columns, &columns),
            referenced_columns: names(to.oid, &k.referenced_columns, &columns),
            table: k.table,
            name: k.name,
            definition: k.definition,
            referenced: to.name.clone(),
            qualified_table: from.qualified.clone(),
            qualified_referenced: to.qualified.clone(),
        });
    }
    Ok(out)
}

/// An index (`pg_index`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexInfo {
    /// Its table, as messages name it.
    pub table: String,
    pub name: String,
    /// `pg_get_indexdef`.
    pub definition: String,
    /// Key columns in order; None for an expression.
    pub columns: Vec<Option<String>>,
    pub unique: bool,
    pub valid: bool,
    pub partial: bool,
    /// Its access method (`btree`, `gin`, …).
    pub method: String,
    /// `indkey`: every column's number, INCLUDE ones too (0 for an
    /// expression).
    pub column_numbers: Vec<i16>,
    /// Its expressions (`pg_get_expr(indexprs)`), when it has any.
    pub expressions: Option<String>,
    /// As a `regclass` spells it (schema-qualified outside the search
    /// path): what [`Constraint::index`] names.
    pub regclass: String,
}

/// Every index of `relations`, by relation and then name.
pub fn indexes(
    c: &mut impl GenericClient,
    relations: &[Relation],
) -> Result<Vec<IndexInfo>, postgres::Error> {
    let params = Params::of(relations);
    let rows = c.query(
        &format!(
            "SELECT t.name, i.relname::text, pg_get_indexdef(x.indexrelid),
                    x.indisunique, x.indisvalid, x.indpred IS NOT NULL,
                    (SELECT amname::text FROM pg_am WHERE oid = i.relam),
                    ARRAY(SELECT a.attname::text
                            FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                            LEFT JOIN pg_attribute a
                              ON a.attrelid = x.indrelid AND a.attnum = k.attnum AND k.attnum > 0
                           WHERE k.ord <= x.indnkeyatts
                           ORDER BY k.ord),
                    x.indkey::int2[], pg_get_expr(x.indexprs, x.indrelid),
                    x.indexrelid::regclass::text
               FROM {RELATIONS}
               JOIN pg_index x ON x.indrelid = t.oid
               JOIN pg_class i ON i.oid = x.indexrelid
              ORDER BY t.name, i.relname"
        ),
        &params.sql(),
    )?;
    Ok(rows
        .iter()
        .map(|r| IndexInfo {
            table: r.get(0),
            name: r.get(1),
            definition: r.get(2),
            unique: r.get(3),
            valid: r.get(4),
            partial: r.get(5),
            method: r.get(6),
            columns: r.get(7),
            column_numbers: r.get(8),
            expressions: r.get(9),
            regclass: r.get(10),
        })
        .collect())
}

/// A relation's size as the planner sees it (`pg_class`).
#[derive(Debug, Clone, PartialEq)]
pub struct Statistics {
    /// As the caller names it.
    pub table: String,
    /// As plans name it (unquoted).
    pub schema: String,
    pub relname: String,
    /// `reltuples` (-1 before the first ANALYZE on PostgreSQL 14+).
    pub rows: f64,
    pub pages: i64,
}

/// The planner statistics of `relations`, by name.
pub fn statistics(
    c: &mut impl GenericClient,
    relations: &[Relation],
) -> Result<Vec<Statistics>, postgres::Error> {
    let params = Params::of(relations);
    let rows = c.query(
        &format!(
            "SELECT t.name, n.nspname::text, c.relname::text, c.reltuples::float8, c.relpages::int8
               FROM {RELATIONS}
               JOIN pg_class c ON c.oid = t.oid
               JOIN pg_namespace n ON n.oid = c.relnamespace
              ORDER BY t.name"
        ),
        &params.sql(),
    )?;
    Ok(rows
        .iter()
        .map(|r| Statistics {
            table: r.get(0),
            schema: r.get(1),
            relname: r.get(2),
            rows: r.get(3),
            pages: r.get(4),
        })
        .collect())
}

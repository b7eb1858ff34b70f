//! The tables a rehearsal measures, and how every message names them.
//!
//! One list, one relkind filter, used by every module that asks "which
//! tables are there" (the rehearsal's measurements, the generator, the
//! app replay's locks, schema snapshots, production sizes, the target's
//! reference data): ordinary tables, partitioned tables and their
//! partitions, and materialized views, in every schema but the system's
//! (`pg_catalog`, `information_schema`, `pg_toast*`, `pg_temp*`). Left
//! out: rollsafe's and the migration tools' bookkeeping
//! (`refinery_schema_history`, `_sqlx_migrations`, … of every layout,
//! `rollsafe_*`) and tables an extension owns (they come with `CREATE
//! EXTENSION`, not with the migrations).
//!
//! Names: `sales.orders` outside `public`, `orders` inside it (as
//! PostgreSQL itself prints a `regclass` with the default search path),
//! each part quoted only where SQL needs it (`format('%I')`). The same
//! spelling in messages, evidence, schema snapshots and `--table-rows`.
//!
//! A partitioned table holds no rows itself: its partitions do, and a lock
//! on it is a lock on each of them ([`UserTable::partition_of`],
//! [`with_partitions`]).

use postgres::GenericClient;

use crate::pg::catalogue::Relation;

/// The name messages use for relation `c` in namespace `n`.
const NAME: &str = "CASE WHEN n.nspname = 'public' THEN format('%I', c.relname)
                        ELSE format('%I.%I', n.nspname, c.relname) END";

/// The tables a rehearsal measures, one row each: `oid`, `name` (as
/// messages spell it), `qualified` (schema-qualified, quoted, for SQL),
/// `kind` (`r`, `p`, `m`), `parent` (the partitioned table it is a
/// partition of). Other queries join it by `oid`.
pub fn list_sql() -> String {
    format!(
        "SELECT c.oid, {NAME} AS name, format('%I.%I', n.nspname, c.relname) AS qualified,
                c.relkind::text AS kind,
                (SELECT {parent} FROM pg_inherits i
                   JOIN pg_class p ON p.oid = i.inhparent
                   JOIN pg_namespace pn ON pn.oid = p.relnamespace
                  WHERE i.inhrelid = c.oid AND c.relispartition) AS parent,
                c.relispopulated AS populated
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relkind IN ('r', 'p', 'm')
            AND n.nspname NOT IN ('pg_catalog', 'information_schema')
            AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'
            AND {not_history} AND c.relname NOT LIKE 'rollsafe\\_%'
            AND NOT EXISTS (SELECT 1 FROM pg_depend d
                             WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                               AND d.deptype = 'e')",
        parent = NAME
            .replace("n.nspname", "pn.nspname")
            .replace("c.relname", "p.relname"),
        not_history = not_a_history_table(),
    )
}

/// SQL true for a relation (`n`, `c`) that is no migration tool's history
/// table: refinery's, and each layout's tool's (`_sqlx_migrations`,
/// `__diesel_schema_migrations`, `atlas_schema_revisions.atlas_schema_revisions`,
/// …), which `migrate` and a `--since` base write. Bookkeeping, never a
/// table the app has: not measured, not seeded (10 000 generated rows went
/// into a sqlx project's `_sqlx_migrations`).
fn not_a_history_table() -> String {
    let mut bare = Vec::new();
    let mut qualified = Vec::new();
    for layout in crate::catalog::Layout::ALL {
        let table = crate::migrate::history::ToolHistory(layout).table();
        match table.split_once('.') {
            Some((schema, name)) => qualified.push(format!(
                "NOT (n.nspname = {} AND c.relname = {})",
                crate::pg::quote_literal(schema),
                crate::pg::quote_literal(name)
            )),
            None => bare.push(crate::pg::quote_literal(table)),
        }
    }
    bare.sort();
    bare.dedup();
    let mut all = vec![format!("c.relname NOT IN ({})", bare.join(", "))];
    all.extend(qualified);
    all.join(" AND ")
}

/// What kind of table it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An ordinary table (a partition is one too).
    Table,
    /// A partitioned table: no rows of its own.
    Partitioned,
    MaterializedView,
}

/// One table of [`list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserTable {
    pub oid: u32,
    /// As messages spell it: `orders`, `sales.orders`.
    pub name: String,
    /// Schema-qualified and quoted, for SQL: `public.orders`.
    pub qualified: String,
    pub kind: Kind,
    /// The partitioned table this is a partition of (its name).
    pub partition_of: Option<String>,
    /// False for a materialized view created `WITH NO DATA` (reading it
    /// fails until it is refreshed).
    pub populated: bool,
}

impl UserTable {
    /// A table of `public` (a partition of `parent`), for unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(name: &str, parent: Option<&str>) -> UserTable {
        UserTable {
            oid: 0,
            name: name.into(),
            qualified: format!("public.{name}"),
            kind: Kind::Table,
            partition_of: parent.map(str::to_string),
            populated: true,
        }
    }

    /// Whether a plain `SELECT` from it works.
    pub fn readable(&self) -> bool {
        self.populated
    }

    /// Whether `LOCK TABLE` accepts it (not a materialized view).
    pub fn lockable(&self) -> bool {
        self.kind != Kind::MaterializedView
    }

    /// It, as the catalogue reader ([`crate::pg::catalogue`]) is asked for.
    pub fn relation(&self) -> Relation {
        Relation {
            oid: self.oid,
            name: self.name.clone(),
            qualified: self.qualified.clone(),
        }
    }
}

/// The tables of [`list`] as the catalogue reader is asked for them.
pub fn relations(c: &mut impl GenericClient) -> Result<Vec<Relation>, postgres::Error> {
    Ok(list(c)?.iter().map(UserTable::relation).collect())
}

/// The tables of the database `c` is on, by name.
pub fn list(c: &mut impl GenericClient) -> Result<Vec<UserTable>, postgres::Error> {
    Ok(c.query(&format!("{} ORDER BY 2", list_sql()), &[])?
        .iter()
        .map(|r| UserTable {
            oid: r.get(0),
            name: r.get(1),
            qualified: r.get(2),
            kind: match r.get::<_, &str>(3) {
                "p" => Kind::Partitioned,
                "m" => Kind::MaterializedView,
                _ => Kind::Table,
            },
            partition_of: r.get(4),
            populated: r.get(5),
        })
        .collect())
}

/// `table` and every partition under it (partitions of partitions too):
/// what a lock on `table` locks.
pub fn with_partitions<'a>(tables: &'a [UserTable], table: &'a str) -> Vec<&'a str> {
    let mut out = vec![table];
    let mut k = 0;
    while k < out.len() {
        let parent = out[k];
        out.extend(
            tables
                .iter()
                .filter(|t| t.partition_of.as_deref() == Some(parent))
                .map(|t| t.name.as_str()),
        );
        k += 1;
    }
    out
}

/// A table name as a user typed it (`--table-rows public.orders=…`), as
/// messages spell it: `public.` dropped, the rest as given.
pub fn display(user: &str) -> String {
    let user = user.trim();
    user.strip_prefix("public.").unwrap_or(user).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, parent: Option<&str>) -> UserTable {
        UserTable::for_tests(name, parent)
    }

    #[test]
    fn a_lock_on_a_parent_is_a_lock_on_each_partition() {
        let tables = [
            t("orders", None),
            t("orders_2025", Some("orders")),
            t("orders_2026", Some("orders")),
            t("orders_2026_q1", Some("orders_2026")),
            t("other", None),
        ];
        assert_eq!(
            with_partitions(&tables, "orders"),
            ["orders", "orders_2025", "orders_2026", "orders_2026_q1"]
        );
        assert_eq!(with_partitions(&tables, "other"), ["other"]);
        assert_eq!(display("public.orders"), "orders");
        assert_eq!(display("sales.orders"), "sales.orders");
    }
}

//! Replaying an app version's named statements against a database: each is
//! prepared with the extended protocol (the server reports its parameter
//! types), then executed with values, inside a transaction that is rolled
//! back.
//!
//! The extended protocol is the point: a prepared statement is exactly one
//! statement, so an entry such as `SELECT 1; COPY … TO PROGRAM …` is
//! refused by the server (and, before that, when its file is read:
//! [`crate::app::statements`]); nothing after a `;` ever runs. Values are
//! bound as parameters in text format, never pasted into SQL.
//!
//! Executing matters: preparing alone accepts an `INSERT` that leaves out a
//! new NOT NULL column, or a value a CHECK refuses; only running it shows.
//! Values come from the statement's `-- param: $N = <SQL expression>` lines
//! (data that must exist, e.g. a live collection's id), evaluated on the
//! same connection first as `SELECT (<expr>)::<type>`, or are generated
//! from the parameter's type ([`generated_value`]).
//!
//! A statement refused for want of a privilege (SQLSTATE 42501: a missing
//! GRANT, or row-level security refusing a row) says which table and which
//! privilege ([`Denied`]), read as the app's role.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error as StdError;

use postgres::types::{Format, IsNull, ToSql, Type};
use postgres::Client;

use crate::app::{AppVersion, Kind};

/// SQLSTATE 42501 insufficient_privilege.
pub const INSUFFICIENT_PRIVILEGE: &str = "42501";

mod outcome;
pub use outcome::{Denied, Outcome, Step};

/// `-- param: $N = expr` lines of a statement, by N.
pub fn declared_params<'a>(meta: impl Iterator<Item = &'a str>) -> BTreeMap<usize, String> {
    let mut out = BTreeMap::new();
    for value in meta {
        if let Some((lhs, rhs)) = value.split_once('=') {
            if let Some(n) = lhs.trim().strip_prefix('$').and_then(|n| n.parse().ok()) {
                out.insert(n, rhs.trim().to_string());
            }
        }
    }
    out
}

/// A SQL expression producing a plausible value of `type_name` (as
/// `format_type`/regtype spells it); `NULL` for types rollsafe does not
/// know (declare those with `-- param:`).
pub fn generated_value(type_name: &str) -> &'static str {
    match type_name {
        "uuid" => "gen_random_uuid()",
        "text" | "character varying" | "name" | "character" => {
            "'rollsafe_' || substr(md5(random()::text), 1, 12)"
        }
        "boolean" => "true",
        "smallint" | "integer" | "bigint" | "numeric" | "real" | "double precision" => "1",
        "jsonb" | "json" => "'{}'",
        "timestamp with time zone" | "timestamp without time zone" | "date" => "now()",
        "bytea" => "'\\x00'::bytea",
        _ => "NULL",
    }
}

/// A statement prepared on one connection, with the expressions for its
/// parameters and what the server says it returns.
#[derive(Clone)]
pub struct Prepared {
    pub statement: String,
    /// The server-side statement (one statement: the extended protocol).
    prepared: postgres::Statement,
    /// (type, SQL expression) per parameter; the type as `format_type`
    /// spells it.
    pub params: Vec<(String, String)>,
    /// (name, type) of each result column.
    pub columns: Vec<(String, String)>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prepared({})", self.statement)
    }
}

/// Prepares `statement` of `app` on `c` (extended protocol: exactly one
/// statement) and reads its parameter types.
pub fn prepare(
    c: &mut Client,
    app: &AppVersion,
    statement: &str,
) -> Result<Prepared, postgres::Error> {
    let st = app.set.get(statement).expect("statement of this app");
    prepare_sql(
        c,
        statement,
        &st.sql,
        &declared_params(st.meta_values("param")),
    )
}

/// Prepares `sql` (named `statement` for messages) on `c`, its parameters'
/// values from `declared` (`$N` → SQL expression) or generated from their
/// types.
pub fn prepare_sql(
    c: &mut Client,
    statement: &str,
    sql: &str,
    declared: &BTreeMap<usize, String>,
) -> Result<Prepared, postgres::Error> {
    let prepared = c.prepare(sql)?;
    let oids: Vec<u32> = prepared.params().iter().map(Type::oid).collect();
    // format_type names them as casts and `generated_value` spell them
    // (`integer`, `character varying`, `s.mood` outside the search path).
    let types: Vec<String> = if oids.is_empty() {
        Vec::new()
    } else {
        c.query_one(
            "SELECT coalesce(array_agg(format_type(o, NULL) ORDER BY n), '{}')
               FROM unnest($1::oid[]) WITH ORDINALITY AS u(o, n)",
            &[&oids],
        )?
        .get(0)
    };
    let params = types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let expr = declared
                .get(&(i + 1))
                .cloned()
                .unwrap_or_else(|| generated_value(t).to_string());
            (t.clone(), expr)
        })
        .collect();
    // The protocol's Describe gives the result columns' types on every
    // major (pg_prepared_statements.result_types exists only from 16),
    // with their modifiers: spelled by format_type, a varchar(100) that
    // became varchar(20) shows.
    let (oids, mods): (Vec<u32>, Vec<i32>) = prepared
        .columns()
        .iter()
        .map(|col| (col.type_().oid(), col.type_modifier()))
        .unzip();
    let spelled: Vec<String> = c
        .query(
            "SELECT format_type(t, nullif(m, -1)) FROM unnest($1::oid[], $2::int4[])
                    WITH ORDINALITY AS x(t, m, k) ORDER BY k",
            &[&oids, &mods],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let columns = prepared
        .columns()
        .iter()
        .zip(spelled)
        .map(|(col, t)| (col.name().to_string(), t))
        .collect();
    Ok(Prepared {
        statement: statement.to_string(),
        prepared,
        params,
        columns,
    })
}

/// A parameter value in PostgreSQL's text format, bound as is: the server
/// parses it as the parameter's type, whatever that type is.
#[derive(Debug)]
struct TextValue<'a>(Option<&'a str>);

impl ToSql for TextValue<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self.0 {
            Some(v) => {
                out.extend_from_slice(v.as_bytes());
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    fn encode_format(&self, _: &Type) -> Format {
        Format::Text
    }

    postgres::types::to_sql_checked!();
}

/// Evaluates the parameter expressions on `c` (one `SELECT` of them, cast
/// to the parameters' types) into values in text format.
pub fn arguments(c: &mut Client, p: &Prepared) -> Result<Vec<Option<String>>, postgres::Error> {
    if p.params.is_empty() {
        return Ok(Vec::new());
    }
    let select = p
        .params
        .iter()
        .map(|(t, e)| format!("(({e})::{t})::text"))
        .collect::<Vec<_>>()
        .join(", ");
    let row = c.query_one(&format!("SELECT {select}"), &[])?;
    (0..p.params.len()).map(|i| row.try_get(i)).collect()
}

/// Executes `p` with `args` (from [`arguments`]): rows returned or changed.
pub fn execute_with(
    c: &mut Client,
    p: &Prepared,
    args: &[Option<String>],
) -> Result<u64, postgres::Error> {
    let values: Vec<TextValue> = args.iter().map(|a| TextValue(a.as_deref())).collect();
    let params: Vec<&(dyn ToSql + Sync)> =
        values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
    c.execute(&p.prepared, &params)
}

/// Runs `statement` with `args` bound in text format (values as
/// [`arguments`] or a sampled row gives them): its rows.
pub fn query_text(
    c: &mut Client,
    statement: &postgres::Statement,
    args: &[Option<String>],
) -> Result<Vec<postgres::Row>, postgres::Error> {
    let values: Vec<TextValue> = args.iter().map(|a| TextValue(a.as_deref())).collect();
    let params: Vec<&(dyn ToSql + Sync)> =
        values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
    c.query(statement, &params)
}

/// Evaluates the parameters and executes.
pub fn execute(c: &mut Client, p: &Prepared) -> Result<u64, (Step, postgres::Error)> {
    let args = arguments(c, p).map_err(|e| (Step::Params, e))?;
    execute_with(c, p, &args).map_err(|e| (Step::Execute, e))
}

/// The object a 42501 message names (`permission denied for table t`,
/// `new row violates row-level security policy for table "t"`).
fn denied_object(message: &str) -> Option<(String, String)> {
    for kind in [
        "table", "relation", "view", "sequence", "schema", "function",
    ] {
        if let Some(pos) = message.rfind(&format!(" for {kind} ")) {
            let rest = &message[pos + kind.len() + 6..];
            let name = rest.trim().trim_matches('"').to_string();
            if !name.is_empty() {
                return Some((kind.to_string(), name));
            }
        }
    }
    None
}

/// The table privileges statement `sql` needs: its verb's, and SELECT when
/// it reads columns (a WHERE, a RETURNING, a SELECT).
fn privileges_needed(sql: &str) -> Vec<&'static str> {
    let upper = sql.to_uppercase();
    let words: Vec<&str> = upper
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .collect();
    let mut out = Vec::new();
    for verb in ["INSERT", "UPDATE", "DELETE"] {
        if words.contains(&verb) {
            out.push(verb);
        }
    }
    if out.is_empty()
        || words
            .iter()
            .any(|w| ["SELECT", "WHERE", "RETURNING"].contains(w))
    {
        out.insert(0, "SELECT");
    }
    out
}

/// Reads, as the role `c` runs as, what it lacked for `sql` (outside any
/// aborted transaction: the caller rolls back first).
fn explain_denial(c: &mut Client, sql: &str, message: &str) -> Denied {
    let role: String = c
        .query_one("SELECT current_user::text", &[])
        .map(|r| r.get(0))
        .unwrap_or_default();
    let Some((kind, name)) = denied_object(message) else {
        return Denied {
            role,
            ..Denied::default()
        };
    };
    let mut denied = Denied {
        table: name.clone(),
        role,
        ..Denied::default()
    };
    match kind.as_str() {
        "table" | "relation" | "view" => {
            // The message names the table as the statement did; to_regclass
            // resolves it the same way (search_path included).
            let oid: Option<u32> = c
                .query_one("SELECT to_regclass($1)::oid", &[&name])
                .ok()
                .and_then(|r| r.get(0))
                .or_else(|| {
                    c.query_one("SELECT to_regclass(quote_ident($1))::oid", &[&name])
                        .ok()
                        .and_then(|r| r.get(0))
                });
            if let Some(oid) = oid {
                if let Ok(r) = c.query_one(
                    "SELECT relrowsecurity, format('%I.%I', relnamespace::regnamespace, relname)
                       FROM pg_class WHERE oid = $1",
                    &[&oid],
                ) {
                    denied.row_security = r.get(0);
                    denied.table = r.get(1);
                }
                for p in privileges_needed(sql) {
                    let has: bool = c
                        .query_one("SELECT has_table_privilege($1::oid, $2)", &[&oid, &p])
                        .map(|r| r.get(0))
                        .unwrap_or(true);
                    if !has {
                        denied.privileges.push(p.to_string());
                    }
                }
            }
        }
        "sequence" => denied.privileges.push("USAGE".into()),
        "schema" => denied.privileges.push("USAGE".into()),
        "function" => denied.privileges.push("EXECUTE".into()),
        _ => {}
    }
    denied
}

/// Every statement of `app` prepared and executed on `c`, each inside a
/// savepoint of one transaction that is rolled back: the database is left
/// as it was. The locks each execution took are read before its savepoint
/// is rolled back; the parameter expressions are evaluated in a savepoint
/// of their own (rolled back first, which releases their locks), so only
/// the statement's own locks count.
pub fn replay_all(c: &mut Client, app: &AppVersion) -> Result<Vec<Outcome>, postgres::Error> {
    let mut out = Vec::new();
    c.batch_execute("BEGIN")?;
    for st in app.set.statements() {
        let mut o = Outcome {
            statement: st.name.clone(),
            ..Outcome::default()
        };
        c.batch_execute("SAVEPOINT rollsafe_replay")?;
        let fail = |o: &mut Outcome, step: Step, e: &postgres::Error| {
            o.failure = Some((step, crate::errors::one_line(e)));
            o.sqlstate = e.code().map(|s| s.code().to_string());
        };
        match prepare(c, app, &st.name) {
            Err(e) => fail(&mut o, Step::Prepare, &e),
            Ok(p) => {
                o.columns = p.columns.clone();
                o.params = p.params.iter().map(|(t, _)| t.clone()).collect();
                c.batch_execute("SAVEPOINT rollsafe_params")?;
                match arguments(c, &p) {
                    Err(e) => fail(&mut o, Step::Params, &e),
                    Ok(args) => {
                        o.null_params =
                            (1..=args.len()).filter(|n| args[n - 1].is_none()).collect();
                        c.batch_execute("ROLLBACK TO SAVEPOINT rollsafe_params")?;
                        match execute_with(c, &p, &args) {
                            Err(e) => fail(&mut o, Step::Execute, &e),
                            Ok(n) => {
                                o.rows = Some(n);
                                o.locks = own_table_locks(c)?;
                            }
                        }
                    }
                }
            }
        }
        c.batch_execute("ROLLBACK TO SAVEPOINT rollsafe_replay")?;
        if o.sqlstate.as_deref() == Some(INSUFFICIENT_PRIVILEGE) {
            let message = o
                .failure
                .as_ref()
                .map_or("", |(_, m)| m.as_str())
                .to_string();
            o.denied = Some(explain_denial(c, &st.sql, &message));
        }
        out.push(o);
    }
    c.batch_execute("ROLLBACK")?;
    Ok(out)
}

/// (table, mode) of the locks this backend holds on the tables a
/// rehearsal measures ([`crate::tables`]). A lock on a partitioned table
/// counts on each of its partitions (a migration's lock on any of them
/// makes the statement wait).
fn own_table_locks(c: &mut Client) -> Result<Vec<(String, String)>, postgres::Error> {
    Ok(c.query(
        &format!(
            "SELECT DISTINCT t.name, l.mode FROM pg_locks l
               CROSS JOIN LATERAL (SELECT l.relation AS oid
                                   UNION SELECT relid FROM pg_partition_tree(l.relation::regclass)) p
               JOIN ({}) t ON t.oid = p.oid
              WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.granted
              ORDER BY 1, 2",
            crate::tables::list_sql()
        ),
        &[],
    )?
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect())
}

/// The names of the statements that write: declared with `-- kind:`,
/// else seen taking a writer's lock when replayed (`outcomes`, from
/// [`replay_all`]). A statement never seen to
/// execute took no lock to see (an INSERT failing on a NOT NULL column
/// the app does not know): its syntax tree says, as `rollsafe capture`
/// classifies it, so it is not run and labelled as a reader. Never
/// guessed from the first keyword: `WITH … UPDATE` writes.
pub fn writers(app: &AppVersion, outcomes: &[Outcome]) -> BTreeSet<String> {
    app.set
        .statements()
        .iter()
        .filter(|st| match app.declared_kind(&st.name) {
            Some(k) => k == Kind::Write,
            None => {
                let mut own = outcomes.iter().filter(|o| o.statement == st.name);
                let executed = own.clone().any(|o| o.failure.is_none());
                own.any(|o| o.writes())
                    || (!executed
                        && crate::sql::classify::classify(&st.sql)
                            == crate::sql::classify::Class::Write)
            }
        })
        .map(|st| st.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::AppVersion;

    #[test]
    fn declared_params_are_read_by_number() {
        let p = declared_params(
            ["$1 = (SELECT id FROM t LIMIT 1)", "$12= 'x'", "nonsense"].into_iter(),
        );
        assert_eq!(p[&1], "(SELECT id FROM t LIMIT 1)");
        assert_eq!(p[&12], "'x'");
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn generated_values_cover_the_schema_types() {
        for t in [
            "uuid",
            "text",
            "boolean",
            "bigint",
            "jsonb",
            "timestamp with time zone",
        ] {
            assert_ne!(generated_value(t), "NULL", "{t}");
        }
        assert_eq!(generated_value("tsvector"), "NULL");
    }

    #[test]
    fn a_denial_names_the_object_and_the_privileges_a_statement_needs() {
        assert_eq!(
            denied_object("permission denied for table orders"),
            Some(("table".into(), "orders".into()))
        );
        assert_eq!(
            denied_object("new row violates row-level security policy for table \"notes\""),
            Some(("table".into(), "notes".into()))
        );
        assert_eq!(denied_object("must be owner of relation"), None);
        assert_eq!(
            privileges_needed("INSERT INTO t (a) VALUES ($1)"),
            ["INSERT"]
        );
        assert_eq!(
            privileges_needed("UPDATE t SET a = 1 WHERE id = $1"),
            ["SELECT", "UPDATE"]
        );
        assert_eq!(privileges_needed("SELECT a FROM t"), ["SELECT"]);
    }

    /// A write that failed when replayed took no lock: its syntax tree
    /// still makes it a writer (a data-modifying CTE too); a read stays a
    /// read.
    #[test]
    fn writes_that_never_executed_are_writers_by_their_syntax() {
        let declared = AppVersion::parse(
            "x.sql",
            "-- app: a\n-- needs: 2\n-- name: s\n-- kind: write\nSELECT 1",
        )
        .unwrap();
        assert!(writers(&declared, &[]).contains("s"));
        let app = AppVersion::parse(
            "x.sql",
            "-- app: a\n-- needs: 2\n\
             -- name: add\nINSERT INTO t (a) VALUES ($1::text);\n\
             -- name: take\nWITH x AS (UPDATE t SET a = 'b' RETURNING a) SELECT count(*) FROM x;\n\
             -- name: get\nSELECT a FROM t;\n",
        )
        .unwrap();
        let failed = |name: &str| Outcome {
            statement: name.into(),
            failure: Some((Step::Execute, "null value in column \"b\"".into())),
            columns: Vec::new(),
            params: Vec::new(),
            locks: Vec::new(),
            ..Default::default()
        };
        let outcomes = [failed("add"), failed("take"), failed("get")];
        let writers: Vec<String> = writers(&app, &outcomes).into_iter().collect();
        assert_eq!(writers, ["add", "take"]);
    }
}

//! Replaying an app version's named statements against a database: each is
//! `PREPARE`d (the server reports its parameter types), then `EXECUTE`d
//! with values, inside a transaction that is rolled back.
//!
//! Executing matters: `PREPARE` alone accepts an `INSERT` that leaves out a
//! new NOT NULL column, or a value a CHECK refuses; only running it shows.
//! Values come from the statement's `-- param: $N = <SQL expression>` lines
//! (data that must exist, e.g. a live collection's id) or are generated from
//! the parameter's type ([`generated_value`]).

use std::collections::BTreeMap;

use postgres::Client;

use super::apps::AppVersion;

/// How one statement fared, and what it is: its result columns and
/// parameter types as the server describes them, and the table locks its
/// execution took (its real effect: ROW EXCLUSIVE for a write, ROW SHARE
/// for `FOR UPDATE`, ACCESS SHARE for a read).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub statement: String,
    /// None when it prepared and executed; else the step and the server's
    /// message.
    pub failure: Option<(Step, String)>,
    /// (name, type) of each result column, when it prepared.
    pub columns: Vec<(String, String)>,
    /// Parameter types, when it prepared.
    pub params: Vec<String>,
    /// (table, mode) of the relation locks its execution took.
    pub locks: Vec<(String, String)>,
}

impl Outcome {
    /// Whether executing it took a lock that only writers take.
    pub fn writes(&self) -> bool {
        self.locks.iter().any(|(_, m)| m != "AccessShareLock")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Prepare,
    Params,
    Execute,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::Prepare => "PREPARE",
            Step::Params => "evaluating its declared parameters",
            Step::Execute => "EXECUTE",
        })
    }
}

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
#[derive(Debug, Clone)]
pub struct Prepared {
    pub statement: String,
    /// The server-side name (`rs_<n>`).
    pub handle: String,
    /// (type, SQL expression) per parameter.
    pub params: Vec<(String, String)>,
    /// (name, type) of each result column.
    pub columns: Vec<(String, String)>,
}

/// `PREPARE`s `sql` as `handle` on `c` and reads its parameter types.
pub fn prepare(
    c: &mut Client,
    app: &AppVersion,
    statement: &str,
    handle: &str,
) -> Result<Prepared, postgres::Error> {
    let st = app.set.get(statement).expect("statement of this app");
    c.batch_execute(&format!("PREPARE {handle} AS {}", st.sql))?;
    let types: Vec<String> = c
        .query_one(
            "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = $1",
            &[&handle],
        )?
        .get(0);
    let declared = declared_params(st.meta_values("param"));
    let params = types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t = t.clone();
            let expr = declared
                .get(&(i + 1))
                .cloned()
                .unwrap_or_else(|| generated_value(&t).to_string());
            (t, expr)
        })
        .collect();
    // The protocol's Describe gives the result columns' types on every
    // major (pg_prepared_statements.result_types exists only from 16),
    // with their modifiers: spelled by format_type, a varchar(100) that
    // became varchar(20) shows.
    let described = c.prepare(&st.sql)?;
    let (oids, mods): (Vec<u32>, Vec<i32>) = described
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
    let columns = described
        .columns()
        .iter()
        .zip(spelled)
        .map(|(col, t)| (col.name().to_string(), t))
        .collect();
    Ok(Prepared {
        statement: statement.to_string(),
        handle: handle.to_string(),
        params,
        columns,
    })
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Evaluates the parameter expressions (subqueries are not allowed in
/// `EXECUTE`'s arguments, so they are computed first) into typed literals.
pub fn arguments(c: &mut Client, p: &Prepared) -> Result<Vec<String>, postgres::Error> {
    let mut args = Vec::new();
    if !p.params.is_empty() {
        let select = p
            .params
            .iter()
            .map(|(t, e)| format!("(({e})::{t})::text"))
            .collect::<Vec<_>>()
            .join(", ");
        let row = c.query_one(&format!("SELECT {select}"), &[])?;
        for (i, (t, _)) in p.params.iter().enumerate() {
            let v: Option<String> = row.try_get(i)?;
            args.push(match v {
                Some(v) => format!("{}::{t}", quote_literal(&v)),
                None => format!("NULL::{t}"),
            });
        }
    }
    Ok(args)
}

/// Executes `p` with `args` (from [`arguments`]).
pub fn execute_with(c: &mut Client, p: &Prepared, args: &[String]) -> Result<(), postgres::Error> {
    let call = if args.is_empty() {
        format!("EXECUTE {}", p.handle)
    } else {
        format!("EXECUTE {}({})", p.handle, args.join(", "))
    };
    c.batch_execute(&call)
}

/// Evaluates the parameters and executes.
pub fn execute(c: &mut Client, p: &Prepared) -> Result<(), (Step, postgres::Error)> {
    let args = arguments(c, p).map_err(|e| (Step::Params, e))?;
    execute_with(c, p, &args).map_err(|e| (Step::Execute, e))
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
    for (i, st) in app.set.statements().iter().enumerate() {
        let handle = format!("rs_replay_{i}");
        let mut o = Outcome {
            statement: st.name.clone(),
            ..Outcome::default()
        };
        c.batch_execute("SAVEPOINT rollsafe_replay")?;
        match prepare(c, app, &st.name, &handle) {
            Err(e) => o.failure = Some((Step::Prepare, crate::errors::one_line(&e))),
            Ok(p) => {
                o.columns = p.columns.clone();
                o.params = p.params.iter().map(|(t, _)| t.clone()).collect();
                c.batch_execute("SAVEPOINT rollsafe_params")?;
                match arguments(c, &p) {
                    Err(e) => o.failure = Some((Step::Params, crate::errors::one_line(&e))),
                    Ok(args) => {
                        c.batch_execute("ROLLBACK TO SAVEPOINT rollsafe_params")?;
                        match execute_with(c, &p, &args) {
                            Err(e) => {
                                o.failure = Some((Step::Execute, crate::errors::one_line(&e)))
                            }
                            Ok(()) => o.locks = own_table_locks(c)?,
                        }
                    }
                }
            }
        }
        c.batch_execute("ROLLBACK TO SAVEPOINT rollsafe_replay")?;
        out.push(o);
    }
    c.batch_execute("ROLLBACK; DEALLOCATE ALL")?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

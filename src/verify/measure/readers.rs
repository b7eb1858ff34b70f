//! The apps' read statements run on real rows around a migration, for
//! every app (a driver's app too: its readers are its statement set's,
//! the statements its code runs by name): what their readers returned
//! before it, what the same readers and the newer apps' return after it
//! with the same bindings, and whether the rows the older app writes
//! during the rollout are returned to the newer app. Measured here;
//! judged by `backfill` and `compat`.
//!
//! Bindings (values for a reader's parameters) name existing rows: a
//! `-- sample: SELECT …` line of the statement when it has one, else
//! distinct values of the columns its predicates compare the parameters
//! to ([`crate::app::bindings`]; `= ANY($N)` takes the value as a
//! one-element array), else its `-- param:` lines (one binding).
//! Everything runs as the app's role, in a READ ONLY transaction that is
//! rolled back; a `-- sample:` query is one statement that only reads.
//! Rows are told apart by the table's primary key when the reader
//! returns it, else by the whole row.
//!
//! Rollout writes: each write statement of the older app (INSERT, upsert,
//! UPDATE) runs once, committed, with its `-- param:` values, and the
//! rows it touched are found by their xmin (its transaction); an older
//! app with a driver also creates a row through it (found by its primary
//! key). Every reader of the written table whose parameters the row's
//! columns can bind (the rest declared by `-- param:`) is then run on
//! each row, the writer's own and the newer apps'. The newer apps' own
//! writes are never read back here: a row the newer app hides until a
//! later step of its own (a two-phase create) is its design, and who
//! wrote a row is what tells the two apart.
//!
//! Floor `measure`: [`Readers`] takes a database and the apps and returns
//! what their readers saw; the stages say when (before the migration in
//! stage 2, after it and during the rollout in stage 3).

use std::collections::BTreeSet;

use postgres::Client;

use super::{connect_app, connect_migrator};
use crate::app::bindings::{self, ReadShape};
use crate::app::replay;
use crate::app::statements::Statement;
use crate::app::{AppVersion, Created, Kind};
use crate::errors::one_line;
use crate::sandbox::Database;
use crate::sessions::Sessions;
use crate::verify::error::{step, VerifyError};
use crate::verify::evidence::{
    BoundBy, BoundRows, NotCompared, RolloutWrite, Row, RowRead, StatementReader, Visible, Writer,
};

/// How many bindings a reader is run with: enough groups to catch rows
/// that went missing, few enough for a million seeded rows.
pub const SAMPLE_BINDINGS: i64 = 20;

/// How many of the rows one rollout write touched are read back: an
/// UPDATE by key touches one; one that touches more is judged on a few.
const ROLLOUT_ROWS: i64 = 5;

/// A read statement of an app and what its syntax says.
struct Reader<'a> {
    app: &'a AppVersion,
    statement: &'a Statement,
    shape: Result<ReadShape, String>,
}

impl Reader<'_> {
    fn filters(&self) -> Vec<(String, Vec<String>)> {
        self.shape
            .as_ref()
            .map(|s| {
                s.filters
                    .iter()
                    .map(|f| (f.text.clone(), f.columns.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn table(&self) -> String {
        self.shape
            .as_ref()
            .map(|s| s.table.clone())
            .unwrap_or_default()
    }

    /// The key columns, when every parameter has one.
    fn keys(&self) -> Vec<String> {
        match &self.shape {
            Ok(s) if s.fully_keyed() => s.key_columns(),
            _ => Vec::new(),
        }
    }

    /// The columns its parameters are compared to, in parameter order
    /// (not every parameter need have one).
    fn keyed_columns(&self) -> Vec<String> {
        self.shape
            .as_ref()
            .map(|s| s.key_columns())
            .unwrap_or_default()
    }

    /// A binding of column values (one per key, in parameter order) as
    /// parameter values, with the values the app always binds
    /// ([`ReadShape::params_of`]).
    fn params_of(&self, values: &[Option<String>]) -> Vec<Option<String>> {
        match &self.shape {
            Ok(s) => s.params_of(values),
            Err(_) => values.to_vec(),
        }
    }

    fn limited(&self) -> bool {
        self.shape.as_ref().is_ok_and(|s| s.limited)
    }

    fn measured(&self, bound_by: BoundBy, rows: Result<BoundRows, NotCompared>) -> StatementReader {
        StatementReader {
            app: self.app.name.clone(),
            statement: self.statement.name.clone(),
            table: self.table(),
            keys: self.keys(),
            filters: self.filters(),
            identity: Vec::new(),
            bound_by,
            limited: self.limited(),
            reference: None,
            rows,
        }
    }
}

/// The statements of `app` that only read: not declared writes, a read by
/// their syntax, and not locking rows (`FOR UPDATE` belongs to a write).
fn readers_of(app: &AppVersion) -> Vec<Reader<'_>> {
    app.set
        .statements()
        .iter()
        .filter(|st| app.declared_kind(&st.name) != Some(Kind::Write))
        .filter(|st| crate::sql::classify::classify(&st.sql) == crate::sql::classify::Class::Read)
        .filter(|st| !bindings::locks_rows(&st.sql))
        .map(|st| Reader {
            app,
            statement: st,
            // A parameter the app binds to one value (`-- bound:`, from
            // `rollsafe capture`) is compared with it, not keyed.
            shape: bindings::infer_read(&st.sql)
                .map(|s| s.with_bound(bindings::bound_values(st.meta_values("bound")))),
        })
        .collect()
}

/// The statements of `app` that write rows of a table (INSERT, upsert,
/// UPDATE): (statement, table).
fn writes_of(app: &AppVersion) -> Vec<(&Statement, String)> {
    app.set
        .statements()
        .iter()
        .filter_map(|st| bindings::write_target(&st.sql).map(|t| (st, t)))
        .collect()
}

/// `schema.table` quoted for SQL.
fn quoted_table(table: &str) -> String {
    table
        .split('.')
        .map(crate::pg::quote_ident)
        .collect::<Vec<_>>()
        .join(".")
}

/// A JSON object as a [`Row`].
fn row_of(json: &str) -> Row {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(json) else {
        return Row::new();
    };
    map.into_iter()
        .map(|(k, v)| {
            let text = match v {
                serde_json::Value::Null => None,
                serde_json::Value::String(s) => Some(s),
                other => Some(other.to_string()),
            };
            (k, text)
        })
        .collect()
}

/// A row's identity: `id=17` (the identity columns it holds), else the
/// whole row.
fn identity_of(row: &Row, identity: &[String]) -> String {
    if !identity.is_empty() && identity.iter().all(|c| row.contains_key(c)) {
        return identity
            .iter()
            .map(|c| format!("{c}={}", row[c].as_deref().unwrap_or("NULL")))
            .collect::<Vec<_>>()
            .join(", ");
    }
    serde_json::to_string(row).unwrap_or_default()
}

/// The primary-key columns of `table` (empty without one) and its columns.
fn table_facts(c: &mut Client, table: &str) -> Result<(Vec<String>, Vec<String>), postgres::Error> {
    let quoted = quoted_table(table);
    let pk = c
        .query(
            "SELECT a.attname::text FROM pg_index i
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
              WHERE i.indrelid = to_regclass($1) AND i.indisprimary
              ORDER BY array_position(i.indkey::int2[], a.attnum)",
            &[&quoted],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let columns = c
        .query(
            "SELECT attname::text FROM pg_attribute
              WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[&quoted],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok((pk, columns))
}

/// Runs `f` inside a READ ONLY transaction that is rolled back.
fn read_only<T>(
    c: &mut Client,
    f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
) -> Result<T, postgres::Error> {
    c.batch_execute("BEGIN READ ONLY")?;
    let out = f(c);
    c.batch_execute("ROLLBACK")?;
    out
}

/// Bindings from the reader's `-- sample:` query: its rows, each column a
/// parameter in order.
fn sampled(c: &mut Client, sample: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let sample = sample.trim().trim_end_matches(';').trim_end();
    bindings::check_sample(sample)?;
    let sql = format!(
        "SELECT (SELECT coalesce(array_agg(x.value ORDER BY x.n), '{{}}')
                   FROM json_each_text(row_to_json(rollsafe_sample)) WITH ORDINALITY AS x(key, value, n))
           FROM (\n{sample}\n) AS rollsafe_sample LIMIT {SAMPLE_BINDINGS}"
    );
    read_only(c, |c| c.query(&sql, &[]))
        .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        .map_err(|e| one_line(&e))
}

/// Bindings from the key columns: their distinct values in the table.
fn keyed(c: &mut Client, table: &str, keys: &[String]) -> Result<Vec<Vec<Option<String>>>, String> {
    let cols: Vec<String> = keys.iter().map(|k| crate::pg::quote_ident(k)).collect();
    let join = |f: &dyn Fn(usize, &String) -> String, sep: &str| {
        cols.iter()
            .enumerate()
            .map(|(i, c)| f(i, c))
            .collect::<Vec<_>>()
            .join(sep)
    };
    let list = join(&|_, c| c.clone(), ", ");
    let not_null = join(&|_, c| format!("{c} IS NOT NULL"), " AND ");
    let aliases = join(&|i, _| format!("k{i}"), ", ");
    let texts = join(&|i, _| format!("k{i}::text"), ", ");
    let table = quoted_table(table);
    // Ordered by the columns themselves, an index on them answers it
    // without reading the table; a type without ordering is sampled in
    // text order instead.
    let native = format!(
        "SELECT {texts} FROM (SELECT DISTINCT {list} FROM {table} WHERE {not_null}
                             ORDER BY {list} LIMIT {SAMPLE_BINDINGS}) AS k({aliases})"
    );
    let as_text = format!(
        "SELECT DISTINCT {} FROM {table} WHERE {not_null} ORDER BY {} LIMIT {SAMPLE_BINDINGS}",
        join(&|_, c| format!("{c}::text"), ", "),
        join(&|i, _| (i + 1).to_string(), ", "),
    );
    read_only(c, |c| c.query(&native, &[]))
        .or_else(|_| read_only(c, |c| c.query(&as_text, &[])))
        .map(|rows| {
            rows.iter()
                .map(|r| (0..cols.len()).map(|i| r.get(i)).collect())
                .collect()
        })
        .map_err(|e| one_line(&e))
}

/// Bindings from the statement's `-- param:` lines, all of its parameters
/// declared: one binding.
fn declared(c: &mut Client, reader: &Reader) -> Result<Vec<Vec<Option<String>>>, String> {
    let r = read_only(c, |c| {
        let p = replay::prepare(c, reader.app, &reader.statement.name)?;
        replay::arguments(c, &p)
    });
    r.map(|args| vec![args]).map_err(|e| one_line(&e))
}

/// What `reader` returns for each binding, as rows.
fn run_reader(c: &mut Client, sql: &str, bindings: &[Vec<Option<String>>]) -> Result<Ran, String> {
    let wrapped = format!("SELECT to_jsonb(rollsafe_row)::text FROM (\n{sql}\n) AS rollsafe_row");
    read_only(c, |c| {
        let columns = c
            .prepare(sql)?
            .columns()
            .iter()
            .map(|col| col.name().to_string())
            .collect();
        let prepared = c.prepare(&wrapped)?;
        let mut rows = Vec::new();
        for b in bindings {
            let got = replay::query_text(c, &prepared, b)?;
            rows.push(got.iter().map(|r| row_of(&r.get::<_, String>(0))).collect());
        }
        Ok(Ran { columns, rows })
    })
    .map_err(|e| one_line(&e))
}

/// What a reader returned: its result columns and, per binding, its rows.
struct Ran {
    columns: Vec<String>,
    rows: Vec<Vec<Row>>,
}

/// Rows identified whole (as [`identity_of`] writes them) cut to
/// `columns`.
fn cut(seen: &[BTreeSet<String>], columns: &[String]) -> Vec<BTreeSet<String>> {
    seen.iter()
        .map(|set| {
            set.iter()
                .map(|whole| {
                    let mut row = row_of(whole);
                    row.retain(|k, _| columns.contains(k));
                    identity_of(&row, &[])
                })
                .collect()
        })
        .collect()
}

/// The identity columns a reader's rows carry: the table's primary key
/// when every row holds it.
fn identity_for(pk: &[String], rows: &[Vec<Row>]) -> Vec<String> {
    let all_hold = rows
        .iter()
        .flatten()
        .all(|r| pk.iter().all(|c| r.contains_key(c)));
    if all_hold {
        pk.to_vec()
    } else {
        Vec::new()
    }
}

/// Tables with row-level security enabled (qualified names).
fn row_security(c: &mut Client) -> Result<Vec<String>, postgres::Error> {
    Ok(c.query(
        "SELECT format('%I.%I', relnamespace::regnamespace, relname) FROM pg_class
              WHERE relrowsecurity AND relkind IN ('r', 'p') ORDER BY 1",
        &[],
    )?
    .iter()
    .map(|r| r.get(0))
    .collect())
}

/// The apps' readers as an instrument: it needs only who each app
/// connects as.
#[derive(Clone, Copy)]
pub struct Readers<'a> {
    pub sessions: &'a Sessions,
}

impl Readers<'_> {
    /// Before a migration, on the seeded database: each read statement of
    /// each live app, with bindings sampled from its rows.
    pub fn before(&self, db: &Database, live: &[&AppVersion]) -> Result<Visible, VerifyError> {
        let clock = std::time::Instant::now();
        let mut migrator = connect_migrator(self.sessions, db)?;
        let mut out = Visible {
            row_security: step("reading row-level security", row_security(&mut migrator))?,
            statements: Vec::new(),
        };
        for app in live {
            let mut c = connect_app(self.sessions, db, app)?;
            for reader in readers_of(app) {
                out.statements
                    .push(self.before_one(&mut c, &mut migrator, &reader));
            }
        }
        log::debug!(
            "readers before: {} statement readers in {:?}",
            out.statements.len(),
            clock.elapsed()
        );
        Ok(out)
    }

    fn before_one(
        &self,
        c: &mut Client,
        migrator: &mut Client,
        reader: &Reader,
    ) -> StatementReader {
        let sample = reader.statement.meta_values("sample").last();
        let declared_all = {
            let params = replay::declared_params(reader.statement.meta_values("param"));
            let n = reader.shape.as_ref().map_or(0, |s| s.params);
            n > 0 && (1..=n).all(|i| params.contains_key(&i))
        };
        let (bound_by, bindings) = match (sample, &reader.shape) {
            (Some(sql), _) => (BoundBy::Sample, sampled(c, sql)),
            (None, Ok(s)) if s.params == 0 => (BoundBy::Nothing, Ok(vec![Vec::new()])),
            // Every parameter bound to the app's one value: one binding.
            (None, Ok(s)) if s.fully_keyed() && s.keys.is_empty() => {
                (BoundBy::Keys, Ok(vec![Vec::new()]))
            }
            (None, Ok(s)) if s.fully_keyed() => {
                (BoundBy::Keys, keyed(c, &s.table, &s.key_columns()))
            }
            (None, _) if declared_all => (BoundBy::Params, declared(c, reader)),
            (None, Ok(s)) => {
                let unkeyed: Vec<String> = (1..=s.params)
                    .filter(|n| !s.keys.contains_key(n))
                    .map(|n| format!("${n}"))
                    .collect();
                return reader.measured(
                    BoundBy::Nothing,
                    Err(NotCompared::CannotBind(format!(
                        "rollsafe cannot tell which column of {} its {} {} compared to (it reads `column = $N`, `$N = column`, `column = ANY($N)` and `column IN ($N, …)` in its WHERE)",
                        s.table,
                        unkeyed.join(", "),
                        if unkeyed.len() == 1 { "is" } else { "are" }
                    ))),
                );
            }
            (None, Err(why)) => {
                return reader.measured(BoundBy::Nothing, Err(NotCompared::CannotBind(why.clone())))
            }
        };
        let bindings = match bindings {
            Err(e) => return reader.measured(bound_by, Err(NotCompared::Failed(e))),
            Ok(b) if b.is_empty() => return reader.measured(bound_by, Err(NotCompared::NoRows)),
            Ok(b) => b,
        };
        let (pk, table_columns) = match &reader.shape {
            Ok(s) => table_facts(migrator, &s.table).unwrap_or_default(),
            Err(_) => Default::default(),
        };
        let params = as_params(reader, bound_by, &bindings);
        let Ran { columns, rows } = match run_reader(c, &reader.statement.sql, &params) {
            Err(e) => return reader.measured(bound_by, Err(NotCompared::Failed(e))),
            Ok(ran) => ran,
        };
        let identity = identity_for(&pk, &rows);
        let seen = rows
            .iter()
            .map(|rs| rs.iter().map(|r| identity_of(r, &identity)).collect())
            .collect();
        let mut m = reader.measured(
            bound_by,
            Ok(BoundRows {
                bindings,
                seen,
                table_columns,
                columns,
                reference_seen: None,
                example_missing: None,
            }),
        );
        m.identity = identity;
        m
    }

    /// After the migration, on the same database: each reader measured
    /// before, run again by its own app (if it still runs) and by the
    /// apps that become deployable with it (their reader of the same
    /// name, else one of the same table keyed the same way), with the
    /// bindings sampled before.
    pub fn after(
        &self,
        db: &Database,
        runnable: &[&AppVersion],
        before: &[StatementReader],
        newly: &[String],
    ) -> Result<Visible, VerifyError> {
        // Nothing ran before (no app was live): nothing to compare with.
        if before.is_empty() {
            return Ok(Visible::default());
        }
        let clock = std::time::Instant::now();
        let mut migrator = connect_migrator(self.sessions, db)?;
        let mut out = Visible {
            row_security: step("reading row-level security", row_security(&mut migrator))?,
            statements: Vec::new(),
        };
        for app in runnable {
            let readers = readers_of(app);
            let mut c = connect_app(self.sessions, db, app)?;
            for b in before {
                let Ok(reference) = &b.rows else { continue };
                let same_app = b.app == app.name;
                if !same_app && !newly.contains(&app.name) {
                    continue;
                }
                let Some((reader, bindings)) = counterpart(&readers, b, reference, same_app) else {
                    continue;
                };
                out.statements.push(after_one(
                    &mut c,
                    &mut migrator,
                    reader,
                    b,
                    reference,
                    bindings,
                ));
            }
        }
        log::debug!(
            "readers after: {} statement readers in {:?}",
            out.statements.len(),
            clock.elapsed()
        );
        Ok(out)
    }

    /// While both versions run on the schema after the migration: each
    /// write statement of each live app that has a newer app beside it is
    /// run and committed as that app's role, and its driver's create when
    /// it has one; then every reader of the written table that can be
    /// bound to a written row is run on it, the writer's own and the
    /// newer apps'.
    pub fn rollout_writes(
        &self,
        db: &Database,
        live: &[&AppVersion],
        runnable: &[&AppVersion],
    ) -> Result<Vec<RolloutWrite>, VerifyError> {
        let mut out = Vec::new();
        if live.is_empty() {
            return Ok(out);
        }
        let clock = std::time::Instant::now();
        let mut migrator = connect_migrator(self.sessions, db)?;
        for older in live {
            let newer: Vec<&AppVersion> = runnable
                .iter()
                .filter(|n| n.needs > older.needs)
                .copied()
                .collect();
            if newer.is_empty() {
                continue;
            }
            let mut c_old = connect_app(self.sessions, db, older)?;
            // The writer and the newer apps, each on its connection with
            // its readers, read back every row written below.
            let mut reading = Vec::new();
            for app in std::iter::once(*older).chain(newer.iter().copied()) {
                reading.push((app, connect_app(self.sessions, db, app)?, readers_of(app)));
            }
            // Each write is read back before the next one runs, so a later
            // write (an UPDATE of the same table) cannot change its rows
            // first.
            let writes = writes_of(older);
            let mut writers: Vec<Writer> = writes
                .iter()
                .map(|(st, _)| Writer::Statement(st.name.clone()))
                .collect();
            if older.driver.is_some() {
                writers.push(Writer::Driver);
            }
            for writer in writers {
                let (table, rows) = match &writer {
                    Writer::Statement(name) => {
                        let table = writes
                            .iter()
                            .find(|(st, _)| &st.name == name)
                            .map(|(_, t)| t.clone())
                            .unwrap_or_default();
                        let rows = write_committed(&mut c_old, &mut migrator, older, name, &table);
                        (table, rows)
                    }
                    Writer::Driver => driver_create(&mut c_old, &mut migrator, older),
                };
                let pk = table_facts(&mut migrator, &table)
                    .map(|(pk, _)| pk)
                    .unwrap_or_default();
                let rows = match rows {
                    Ok(rows) => rows,
                    Err(e) => {
                        out.push(RolloutWrite {
                            older: older.name.clone(),
                            writer,
                            table,
                            written: Err(e),
                            reads: Vec::new(),
                            unbound: Vec::new(),
                        });
                        continue;
                    }
                };
                for row in rows {
                    let mut w = RolloutWrite {
                        older: older.name.clone(),
                        writer: writer.clone(),
                        table: table.clone(),
                        written: Ok((identity_of(&row, &pk), row.clone())),
                        reads: Vec::new(),
                        unbound: Vec::new(),
                    };
                    for (app, c, readers) in &mut reading {
                        read_back(c, app, readers, older, &table, &row, &pk, &mut w);
                    }
                    out.push(w);
                }
            }
        }
        log::debug!(
            "rollout writes: {} rows read back in {:?}",
            out.len(),
            clock.elapsed()
        );
        Ok(out)
    }
}

/// A row created by `app`'s driver as its code creates (its table, the
/// row read as the migrator by its primary key).
fn driver_create(
    c: &mut Client,
    migrator: &mut Client,
    app: &AppVersion,
) -> (String, Result<Vec<Row>, String>) {
    let Some(driver) = &app.driver else {
        return (String::new(), Ok(Vec::new()));
    };
    match driver.create_complete(c, &format!("{}_during_rollout", app.name)) {
        Ok(created) => {
            let row = created_row(migrator, &created);
            (created.table, row.map(|r| vec![r]))
        }
        Err(e) => (String::new(), Err(one_line(e.as_ref()))),
    }
}

/// Runs each of `readers` (of `app`) over `table` that the written `row`
/// can bind on it, into `w`; a newer app with readers of the table none
/// of which can be bound is noted (an app that reads nothing of the table
/// cannot lose the row).
#[allow(clippy::too_many_arguments)]
fn read_back(
    c: &mut Client,
    app: &AppVersion,
    readers: &[Reader],
    older: &AppVersion,
    table: &str,
    row: &Row,
    pk: &[String],
    w: &mut RolloutWrite,
) {
    let of_table: Vec<&Reader> = readers.iter().filter(|r| r.table() == table).collect();
    let mut bound = 0;
    for r in of_table.iter().copied() {
        let Some(binding) = bind_to_row(c, r, row) else {
            continue;
        };
        bound += 1;
        let returned = run_reader(c, &r.statement.sql, &[binding])
            .map(|ran| ran.rows.iter().flatten().any(|got| same_row(got, row, pk)));
        w.reads.push(RowRead {
            app: app.name.clone(),
            statement: r.statement.name.clone(),
            keys: r.keyed_columns(),
            filters: r.filters(),
            returned,
        });
    }
    if bound == 0 && !of_table.is_empty() && app.name != older.name {
        w.unbound.push((
            app.name.clone(),
            format!("no reader of {table} compares its parameters to columns of the row (`column = $N`, `column = ANY($N)`, `column IN ($N)`) with the rest declared by `-- param:`"),
        ));
    }
}

/// Parameter values that point `reader` at `row`: each keyed parameter
/// the row's value of its column, every other one its `-- param:` value.
/// None when a keyed column is not in the row, or a parameter is neither.
fn bind_to_row(c: &mut Client, reader: &Reader, row: &Row) -> Option<Vec<Option<String>>> {
    let shape = reader.shape.as_ref().ok()?;
    if shape.keys.is_empty() || !shape.keys.values().all(|k| row.contains_key(k)) {
        return None;
    }
    let mut values: Vec<Option<String>> = vec![None; shape.params];
    if !shape.fully_keyed() {
        let declared = replay::declared_params(reader.statement.meta_values("param"));
        if !(1..=shape.params).all(|n| shape.keys.contains_key(&n) || declared.contains_key(&n)) {
            return None;
        }
        values = read_only(c, |c| {
            let p = replay::prepare(c, reader.app, &reader.statement.name)?;
            replay::arguments(c, &p)
        })
        .ok()?;
    }
    for (n, column) in &shape.keys {
        let value = row[column].clone();
        *values.get_mut(n - 1)? = match value {
            Some(v) if shape.arrays.contains(n) => Some(bindings::one_element_array(&v)),
            v => v,
        };
    }
    for (n, v) in &shape.bound {
        *values.get_mut(n - 1)? = Some(v.clone());
    }
    Some(values)
}

/// The row a driver created, read as the migrator by its primary key.
fn created_row(migrator: &mut Client, created: &Created) -> Result<Row, String> {
    let pk = table_facts(migrator, &created.table)
        .map(|(pk, _)| pk)
        .map_err(|e| one_line(&e))?;
    let [column] = pk.as_slice() else {
        return Err(format!(
            "{} has no one-column primary key to find the created row {} by",
            created.table, created.id
        ));
    };
    table_row(
        migrator,
        &created.table,
        &pk,
        &format!("{column}={}", created.id),
    )
    .ok_or_else(|| {
        format!(
            "the row it created ({column}={}) is not in {}",
            created.id, created.table
        )
    })
}

/// A reader's bindings as its parameter values: column values (bound by
/// keys) go through [`Reader::params_of`]; a `-- sample:` line's or
/// `-- param:` values are parameter values already.
fn as_params(
    reader: &Reader,
    bound_by: BoundBy,
    bindings: &[Vec<Option<String>>],
) -> Vec<Vec<Option<String>>> {
    match bound_by {
        BoundBy::Keys => bindings.iter().map(|b| reader.params_of(b)).collect(),
        _ => bindings.to_vec(),
    }
}

/// The reader of `readers` to compare with `b` and the bindings to run it
/// with: the same statement of the same app; for another app, its
/// statement of the same name, else one of the same table keyed by the
/// same columns (bindings mapped by column).
fn counterpart<'r, 'a>(
    readers: &'r [Reader<'a>],
    b: &StatementReader,
    reference: &BoundRows,
    same_app: bool,
) -> Option<(&'r Reader<'a>, Vec<Vec<Option<String>>>)> {
    let by_name = readers.iter().find(|r| r.statement.name == b.statement);
    let keyed_alike = |r: &&Reader| {
        !b.keys.is_empty()
            && r.table() == b.table
            && r.keys().iter().collect::<BTreeSet<_>>() == b.keys.iter().collect::<BTreeSet<_>>()
    };
    let reader = match by_name {
        Some(r) => r,
        None if same_app => return None,
        None => readers.iter().find(keyed_alike)?,
    };
    let keys = reader.keys();
    let bindings = if !keys.is_empty() && !b.keys.is_empty() {
        let index: Option<Vec<usize>> = keys
            .iter()
            .map(|k| b.keys.iter().position(|bk| bk == k))
            .collect();
        let index = index?;
        reference
            .bindings
            .iter()
            .map(|binding| {
                index
                    .iter()
                    .map(|&i| binding.get(i).cloned().flatten())
                    .collect()
            })
            .collect()
    } else {
        reference.bindings.clone()
    };
    Some((reader, bindings))
}

/// One reader after the migration, with `bindings` (those of `b`).
fn after_one(
    c: &mut Client,
    migrator: &mut Client,
    reader: &Reader,
    b: &StatementReader,
    reference: &BoundRows,
    bindings: Vec<Vec<Option<String>>>,
) -> StatementReader {
    let mut m = reader.measured(b.bound_by, Err(NotCompared::NoRows));
    m.reference = Some((b.app.clone(), b.statement.clone()));
    let params = as_params(reader, b.bound_by, &bindings);
    let Ran { columns, rows } = match run_reader(c, &reader.statement.sql, &params) {
        Err(e) => {
            m.rows = Err(NotCompared::Failed(e));
            return m;
        }
        Ok(ran) => ran,
    };
    m.identity = b.identity.clone();
    // Rows identified whole, by a reader that returns other columns than
    // the reference: both are compared on the columns they share.
    let common: Vec<String> = reference
        .columns
        .iter()
        .filter(|col| columns.contains(col))
        .cloned()
        .collect();
    if m.identity.is_empty() && common.is_empty() {
        m.rows = Err(NotCompared::CannotBind(format!(
            "it returns none of the columns the {} app's `{}` returns, nor the primary key of its table, so their rows cannot be matched",
            b.app, b.statement
        )));
        return m;
    }
    let reference_seen = (m.identity.is_empty() && common != reference.columns)
        .then(|| cut(&reference.seen, &common));
    let seen: Vec<BTreeSet<String>> = rows
        .iter()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    let mut r = r.clone();
                    if reference_seen.is_some() {
                        r.retain(|k, _| common.contains(k));
                    }
                    identity_of(&r, &m.identity)
                })
                .collect()
        })
        .collect();
    // One row the reference returned that this reader does not, as the
    // table holds it now: the judge names the filter that excludes it.
    let missing = reference_seen
        .as_ref()
        .unwrap_or(&reference.seen)
        .iter()
        .zip(&seen)
        .find_map(|(was, now)| was.difference(now).next().cloned());
    let example_missing = missing.map(|key| {
        let row = if m.identity.is_empty() || b.table.is_empty() {
            Row::new()
        } else {
            table_row(migrator, &b.table, &m.identity, &key).unwrap_or_default()
        };
        (key, row)
    });
    m.rows = Ok(BoundRows {
        bindings,
        seen,
        table_columns: Vec::new(),
        columns,
        reference_seen,
        example_missing,
    });
    m
}

/// The row of `table` whose identity columns hold the values of `key`
/// (`id=17, seat=A4`), read as the migrator.
fn table_row(c: &mut Client, table: &str, identity: &[String], key: &str) -> Option<Row> {
    let values: Vec<Option<String>> = key
        .split(", ")
        .map(|part| part.split_once('=').map(|(_, v)| v.to_string()))
        .collect();
    if values.len() != identity.len() {
        return None;
    }
    let predicate = identity
        .iter()
        .enumerate()
        .map(|(i, col)| format!("t.{}::text = ${}", crate::pg::quote_ident(col), i + 1))
        .collect::<Vec<_>>()
        .join(" AND ");
    let sql = format!(
        "SELECT to_jsonb(t)::text FROM {} t WHERE {predicate} LIMIT 1",
        quoted_table(table)
    );
    let params: Vec<&(dyn postgres::types::ToSql + Sync)> = values
        .iter()
        .map(|v| v as &(dyn postgres::types::ToSql + Sync))
        .collect();
    let row = read_only(c, |c| c.query_opt(&sql, &params)).ok()??;
    Some(row_of(&row.get::<_, String>(0)))
}

/// Runs `written` with its parameter values and commits it: the
/// transaction's id, or the server's message (rolled back).
fn commit_write(c: &mut Client, written: &Statement) -> Result<i64, String> {
    let mut run = || -> Result<i64, postgres::Error> {
        c.batch_execute("BEGIN")?;
        let xid: i64 = c.query_one("SELECT txid_current()", &[])?.get(0);
        let declared = replay::declared_params(written.meta_values("param"));
        let p = replay::prepare_sql(c, &written.name, &written.sql, &declared)?;
        let args = replay::arguments(c, &p)?;
        replay::execute_with(c, &p, &args)?;
        c.batch_execute("COMMIT")?;
        Ok(xid)
    };
    run().map_err(|e| {
        let _ = c.batch_execute("ROLLBACK");
        one_line(&e)
    })
}

/// Runs `statement` of `app` with its parameter values and commits it
/// (once more with a value that holds when it failed only on a value
/// rollsafe made, `capture::params::made_value_failure`); then reads the rows it wrote into `table` (inserted or updated: the
/// rows whose xmin is its transaction, a few at most) as the migrator.
fn write_committed(
    c: &mut Client,
    migrator: &mut Client,
    app: &AppVersion,
    statement: &str,
    table: &str,
) -> Result<Vec<Row>, String> {
    let Ok(written) = app.set.get(statement) else {
        return Err(format!("{statement} is not a statement of {}", app.name));
    };
    let xid = match commit_write(c, written) {
        Ok(xid) => xid,
        Err(first) => {
            // A value rollsafe made that the schema refuses is not the
            // rollout's doing: the write runs again with one that holds.
            let made = crate::capture::params::made_value_failure(c, written, &first);
            let again =
                made.and_then(|m| crate::capture::params::with_a_value_that_holds(c, written, &m));
            match again {
                Some(again) => commit_write(c, &again)?,
                None => return Err(first),
            }
        }
    };
    let sql = format!(
        "SELECT to_jsonb(t)::text FROM {} t WHERE t.xmin::text = ($1::bigint % 4294967296)::text LIMIT {ROLLOUT_ROWS}",
        quoted_table(table)
    );
    let rows = migrator.query(&sql, &[&xid]).map_err(|e| one_line(&e))?;
    if rows.is_empty() {
        return Err(format!(
            "it wrote no row into {table} (with its `-- param:` values its WHERE matched none, or its conflict clause did nothing)"
        ));
    }
    Ok(rows
        .iter()
        .map(|r| row_of(&r.get::<_, String>(0)))
        .collect())
}

/// Whether a reader's result row `got` is the table row `row`: same
/// primary key when it returns it, else the same values in every column
/// both have.
fn same_row(got: &Row, row: &Row, pk: &[String]) -> bool {
    if !pk.is_empty() && pk.iter().all(|c| got.contains_key(c)) {
        return pk.iter().all(|c| got.get(c) == row.get(c));
    }
    let shared: Vec<&String> = got.keys().filter(|k| row.contains_key(*k)).collect();
    !shared.is_empty() && shared.iter().all(|k| got.get(*k) == row.get(*k))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pairs: &[(&str, Option<&str>)]) -> Row {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    #[test]
    fn rows_are_identified_by_their_primary_key_else_whole() {
        let r = row(&[("id", Some("17")), ("seat", Some("A4")), ("note", None)]);
        assert_eq!(identity_of(&r, &["id".into()]), "id=17");
        assert_eq!(
            identity_of(&r, &["id".into(), "seat".into()]),
            "id=17, seat=A4"
        );
        assert_eq!(
            identity_of(&r, &[]),
            r#"{"id":"17","note":null,"seat":"A4"}"#
        );
        assert_eq!(
            row_of(r#"{"id": 17, "ok": true, "n": null}"#),
            row(&[("id", Some("17")), ("ok", Some("true")), ("n", None)])
        );
    }

    #[test]
    fn a_written_row_is_recognised_in_a_result() {
        let written = row(&[
            ("id", Some("5")),
            ("seat", Some("B1")),
            ("confirmed", Some("false")),
        ]);
        let pk = vec!["id".to_string()];
        assert!(same_row(&row(&[("id", Some("5"))]), &written, &pk));
        assert!(!same_row(&row(&[("id", Some("6"))]), &written, &pk));
        // Without the key: the shared columns decide.
        assert!(same_row(&row(&[("seat", Some("B1"))]), &written, &pk));
        assert!(!same_row(&row(&[("other", Some("B1"))]), &written, &pk));
    }
}

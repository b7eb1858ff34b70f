//! Which tables may be seeded at the same time, and seeding them so on
//! more than one session.
//!
//! Seeding is the server's work (one `INSERT … SELECT` per table): on
//! a 40-table fixture, 40 tables of 10 000 rows took 3.4 s on one
//! session while the second core of the machine idled. Tables that do not
//! touch each other are written in parallel, on a second session opened
//! only when two tables are ready at once (a carried seeding that fills
//! one new table never opens it).
//!
//! The result must be the one the single session gives, table by table,
//! whatever the timing: two tables are written one after the other, in
//! [`super::order`]'s order, when either could see the other's rows. That
//! is when
//! - one holds a foreign key to the other (also one set aside to break a
//!   cycle);
//! - either fires something on INSERT (a user trigger, on it or on one of
//!   its partitions; a rule): what a trigger reads or writes is in its
//!   body, so such a table is a barrier: everything before it is written
//!   first, everything after it waits. So is a cycle seeded in one
//!   transaction (a deferred key), and a table whose CHECKs, defaults or
//!   domains call a function of the project's that is not IMMUTABLE and
//!   may read a table (its body names one, runs dynamic SQL or calls
//!   another function of the project's: a random-token or UUIDv7 default
//!   does not);
//! - they draw from one sequence (a shared `nextval` default: the values
//!   each gets would depend on who ran first);
//! - one inherits from the other (the parent's reads include the child's
//!   rows).
//!
//! The per-table timings the trigger path measures ([`super::insert`])
//! are taken while nothing else seeds: a trigger table is a barrier.

use std::collections::{BTreeSet, HashSet};
use std::sync::mpsc;

use postgres::Client;

use super::plan::TableResult;
use super::Seeding;

/// Sessions one seeding writes on at most: the server's work splits well
/// in two on a 2-core machine (a 40-table fixture: 3.4 s on
/// one session, 1.7 s on two); more would contend for the same cores and
/// the WAL, and a rehearsal already runs its other work beside seeding.
const MAX_SESSIONS: usize = 2;

/// Another session like the one seeding (same database, same role and
/// rights), for tables written at the same time. None: one session.
pub type MoreSessions<'a> = Option<&'a dyn Fn() -> anyhow::Result<Client>>;

/// What the seeding writes as one piece: a table, or a cycle closed by a
/// deferrable key (one transaction), as positions in the seeding order.
struct Unit {
    positions: std::ops::RangeInclusive<usize>,
    group: bool,
}

/// What a unit wrote: each table's result in order, and warnings.
type UnitDone = (Vec<(usize, TableResult)>, Vec<String>);

/// What [`seed_all`] wrote, as one session writing every table in the
/// seeding order would have.
pub(super) struct Written {
    /// Each table's result, in the seeding order.
    pub(super) tables: Vec<(usize, TableResult)>,
    pub(super) warnings: Vec<String>,
    /// The second session, if one was opened (the caller's ANALYZE
    /// splits over it too).
    pub(super) opened: Option<Client>,
}

/// Seeds every table, on `c` and, where tables may be written at once,
/// on a session `more` opens.
pub(super) fn seed_all(
    seeding: &Seeding<'_>,
    c: &mut Client,
    more: MoreSessions<'_>,
) -> anyhow::Result<Written> {
    let units = units(seeding);
    let after = if more.is_some() && units.len() > 1 {
        waits_for(seeding, c, &units)?
    } else {
        // One session: each unit after the one before.
        (0..units.len()).map(|u| (0..u).collect()).collect()
    };
    let (done, opened) = run(seeding, c, more, &units, &after)?;
    let mut out = Written {
        tables: Vec::new(),
        warnings: Vec::new(),
        opened: opened.into_iter().next(),
    };
    for (t, w) in done {
        out.tables.extend(t);
        out.warnings.extend(w);
    }
    Ok(out)
}

fn units(seeding: &Seeding<'_>) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut pos = 0;
    while pos < seeding.order.tables.len() {
        let end = seeding.deferred_group_at(pos);
        units.push(Unit {
            positions: pos..=end.unwrap_or(pos),
            group: end.is_some(),
        });
        pos = end.unwrap_or(pos) + 1;
    }
    units
}

/// For each unit, the earlier units it must wait for (see the module's
/// rules).
fn waits_for(
    seeding: &Seeding<'_>,
    c: &mut Client,
    units: &[Unit],
) -> Result<Vec<Vec<usize>>, postgres::Error> {
    let tables = seeding.tables;
    let oids: Vec<u32> = tables.iter().map(|t| t.oid).collect();
    let mut barrier_oids: HashSet<u32> = c
        .query(BARRIERS, &[&oids])?
        .iter()
        .map(|r| r.get(0))
        .collect();
    barrier_oids.extend(calling_table_readers(c, tables, &oids)?);
    // Pairs of tables (by index) that must not be written at once.
    let index: std::collections::HashMap<u32, usize> =
        oids.iter().enumerate().map(|(k, &o)| (o, k)).collect();
    let mut pairs: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut pair = |a: usize, b: usize| {
        pairs.insert((a.min(b), a.max(b)));
    };
    for e in seeding.edges {
        pair(e.child, e.parent);
    }
    for r in c.query(SHARED, &[&oids])? {
        let (a, b): (u32, u32) = (r.get(0), r.get(1));
        if let (Some(&a), Some(&b)) = (index.get(&a), index.get(&b)) {
            pair(a, b);
        }
    }
    let tables_of = |u: &Unit| -> Vec<usize> { seeding.order.tables[u.positions.clone()].to_vec() };
    let barrier: Vec<bool> = units
        .iter()
        .map(|u| {
            u.group
                || tables_of(u)
                    .iter()
                    .any(|&k| barrier_oids.contains(&tables[k].oid))
        })
        .collect();
    log::debug!(
        "generate: {} of {} tables written alone (triggers, rules, a function that may read tables): {}",
        barrier_oids.len(),
        tables.len(),
        tables
            .iter()
            .filter(|t| barrier_oids.contains(&t.oid))
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut after = Vec::with_capacity(units.len());
    for (j, uj) in units.iter().enumerate() {
        let tj = tables_of(uj);
        let waits: Vec<usize> = (0..j)
            .filter(|&i| {
                barrier[i]
                    || barrier[j]
                    || tables_of(&units[i])
                        .iter()
                        .any(|&a| tj.iter().any(|&b| pairs.contains(&(a.min(b), a.max(b)))))
            })
            .collect();
        after.push(waits);
    }
    Ok(after)
}

/// Tables (of `$1`) that fire something on INSERT, on themselves or a
/// partition: an enabled user trigger, a rule.
const BARRIERS: &str = "
WITH rel AS (SELECT unnest($1::oid[]) AS oid),
-- (pg_partition_tree lists nothing for a table that is not partitioned.)
tree AS (SELECT oid AS rel, oid AS relid FROM rel
         UNION SELECT r.oid, p.relid FROM rel r, pg_partition_tree(r.oid) p)
SELECT t.rel FROM tree t JOIN pg_trigger g ON g.tgrelid = t.relid
 WHERE NOT g.tgisinternal AND g.tgenabled <> 'D' AND g.tgtype::int & 4 <> 0
UNION
SELECT t.rel FROM tree t JOIN pg_rewrite w ON w.ev_class = t.relid AND w.ev_type = '3'";

/// The project's functions (not the catalog's, not an extension's) that
/// are not IMMUTABLE and that the CHECKs, column defaults or column
/// domains' CHECKs of the tables of `$1` call: (table, function, its
/// language, its source).
const CALLS: &str = "
WITH rel AS (SELECT unnest($1::oid[]) AS oid),
calls AS (
    SELECT r.oid AS rel, 'pg_constraint'::regclass AS classid, k.oid AS objid
      FROM rel r JOIN pg_constraint k ON k.conrelid = r.oid
    UNION ALL
    SELECT r.oid, 'pg_attrdef'::regclass, d.oid
      FROM rel r JOIN pg_attrdef d ON d.adrelid = r.oid
    UNION ALL
    SELECT r.oid, 'pg_constraint'::regclass, k.oid
      FROM rel r
      JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      JOIN pg_constraint k ON k.contypid = a.atttypid)
SELECT DISTINCT o.rel, p.proname::text, l.lanname::text, coalesce(p.prosrc, '')
  FROM calls o
  JOIN pg_depend d ON d.classid = o.classid AND d.objid = o.objid
                  AND d.refclassid = 'pg_proc'::regclass
  JOIN pg_proc p ON p.oid = d.refobjid
  JOIN pg_language l ON l.oid = p.prolang
 WHERE p.provolatile <> 'i'
   AND p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
   AND NOT EXISTS (SELECT 1 FROM pg_depend x
                    WHERE x.classid = 'pg_proc'::regclass AND x.objid = p.oid AND x.deptype = 'e')";

/// The names of the project's own functions (as [`CALLS`] picks them).
const PROJECT_FUNCTIONS: &str = "
SELECT DISTINCT p.proname::text FROM pg_proc p
 WHERE p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
   AND NOT EXISTS (SELECT 1 FROM pg_depend x
                    WHERE x.classid = 'pg_proc'::regclass AND x.objid = p.oid AND x.deptype = 'e')";

/// Whether a function (`name`, in `language`, with body `source`) may
/// read or write a table: its body names one of `tables`, runs dynamic
/// SQL (`EXECUTE`), or calls another of the project's `functions` (which
/// might); a body rollsafe cannot read (C) may do anything. A UUIDv7 or
/// random-token default in PL/pgSQL names none of them: its table need
/// not wait.
fn may_touch_tables(
    name: &str,
    language: &str,
    source: &str,
    tables: &HashSet<String>,
    functions: &HashSet<String>,
) -> bool {
    if !matches!(language, "sql" | "plpgsql") {
        return true;
    }
    let name = name.to_lowercase();
    crate::seed::reach::identifiers(source)
        .any(|w| w == "execute" || tables.contains(&w) || (w != name && functions.contains(&w)))
}

/// The tables of `oids` (among `tables`) whose CHECKs, column defaults or
/// column domains call a function of the project's that is not IMMUTABLE
/// and may read a table ([`may_touch_tables`]): what a row of theirs
/// holds may depend on another table's rows.
pub(super) fn calling_table_readers(
    c: &mut Client,
    tables: &[super::Table],
    oids: &[u32],
) -> Result<HashSet<u32>, postgres::Error> {
    // (Unqualified and lower case: how a function body names them.)
    let table_words: HashSet<String> = tables
        .iter()
        .map(|t| t.name.rsplit('.').next().unwrap_or(&t.name).to_lowercase())
        .collect();
    let functions: HashSet<String> = project_functions(c)?.into_iter().collect();
    let mut out = HashSet::new();
    for r in c.query(CALLS, &[&oids])? {
        let (rel, name, language, source): (u32, String, String, String) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        if may_touch_tables(&name, &language, &source, &table_words, &functions) {
            out.insert(rel);
        }
    }
    Ok(out)
}

/// The names of the project's own functions, in lower case.
fn project_functions(c: &mut Client) -> Result<Vec<String>, postgres::Error> {
    Ok(c.query(PROJECT_FUNCTIONS, &[])?
        .iter()
        .map(|r| r.get::<_, String>(0).to_lowercase())
        .collect())
}

/// The names (lower case) of the project's own functions that may read
/// or write a table ([`may_touch_tables`], whatever their volatility: an
/// index expression's function is IMMUTABLE by declaration only).
pub fn table_reading_functions(c: &mut Client) -> Result<BTreeSet<String>, postgres::Error> {
    let table_words: HashSet<String> = crate::tables::list(c)?
        .iter()
        .map(|t| t.name.rsplit('.').next().unwrap_or(&t.name).to_lowercase())
        .collect();
    let functions: HashSet<String> = project_functions(c)?.into_iter().collect();
    let mut out = BTreeSet::new();
    for r in c.query(PROJECT_FUNCTION_BODIES, &[])? {
        let (name, language, source): (String, String, String) = (r.get(0), r.get(1), r.get(2));
        if may_touch_tables(&name, &language, &source, &table_words, &functions) {
            out.insert(name.to_lowercase());
        }
    }
    Ok(out)
}

/// The project's own functions with their language and body.
const PROJECT_FUNCTION_BODIES: &str = "
SELECT p.proname::text, l.lanname::text, coalesce(p.prosrc, '') FROM pg_proc p
  JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
   AND NOT EXISTS (SELECT 1 FROM pg_depend x
                    WHERE x.classid = 'pg_proc'::regclass AND x.objid = p.oid AND x.deptype = 'e')";

/// Pairs of tables (of `$1`) that draw from one sequence through their
/// column defaults, or of which one inherits from the other.
const SHARED: &str = "
WITH rel AS (SELECT unnest($1::oid[]) AS oid),
draws AS (
    SELECT DISTINCT r.oid AS rel, d.refobjid AS seq
      FROM rel r JOIN pg_attrdef a ON a.adrelid = r.oid
      JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = a.oid
                      AND d.refclassid = 'pg_class'::regclass
      JOIN pg_class s ON s.oid = d.refobjid AND s.relkind = 'S')
SELECT a.rel, b.rel FROM draws a JOIN draws b ON a.seq = b.seq AND a.rel < b.rel
UNION
SELECT i.inhrelid, i.inhparent FROM pg_inherits i
 WHERE i.inhrelid IN (SELECT oid FROM rel) AND i.inhparent IN (SELECT oid FROM rel)";

/// Writes every unit, each once the units it waits for are written, on
/// `c` and, while two units are ready at once, on a second session. The
/// results in the units' order.
fn run(
    seeding: &Seeding<'_>,
    c: &mut Client,
    more: MoreSessions<'_>,
    units: &[Unit],
    after: &[Vec<usize>],
) -> anyhow::Result<(Vec<UnitDone>, Vec<Client>)> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Waiting,
        Running,
        Written,
    }
    let mut state = vec![State::Waiting; units.len()];
    let mut done: Vec<Option<UnitDone>> = (0..units.len()).map(|_| None).collect();
    let opened = std::thread::scope(|s| {
        let (finished_tx, finished) = mpsc::channel::<Finished>();
        let mut sessions: Vec<mpsc::Sender<usize>> = Vec::new();
        let mut threads = Vec::new();
        let (jobs, thread) = spawn_session(
            s,
            0,
            SessionClient::Borrowed(c),
            seeding,
            units,
            finished_tx.clone(),
        );
        sessions.push(jobs);
        threads.push(thread);
        let mut idle = vec![0usize];
        let mut may_open = more.is_some();
        let mut failure = None;
        loop {
            let ready = |state: &[State]| -> Vec<usize> {
                (0..units.len())
                    .filter(|&u| {
                        state[u] == State::Waiting
                            && after[u].iter().all(|&i| state[i] == State::Written)
                    })
                    .collect()
            };
            let mut waiting = ready(&state);
            if failure.is_none() {
                if waiting.len() > idle.len() && may_open && sessions.len() < MAX_SESSIONS {
                    match open_more(more) {
                        Some(client) => {
                            let id = sessions.len();
                            let (jobs, thread) = spawn_session(
                                s,
                                id,
                                SessionClient::Owned(Box::new(client)),
                                seeding,
                                units,
                                finished_tx.clone(),
                            );
                            sessions.push(jobs);
                            threads.push(thread);
                            idle.push(id);
                        }
                        None => may_open = false,
                    }
                }
                while let (Some(&id), false) = (idle.last(), waiting.is_empty()) {
                    let u = waiting.remove(0);
                    if sessions[id].send(u).is_err() {
                        break;
                    }
                    idle.pop();
                    state[u] = State::Running;
                }
            }
            if !state.contains(&State::Running) {
                break;
            }
            let Ok((id, u, r)) = finished.recv() else {
                break;
            };
            idle.push(id);
            match r {
                Ok(d) => {
                    done[u] = Some(d);
                    state[u] = State::Written;
                }
                // A lost connection: the units running finish, no other
                // starts.
                Err(e) => {
                    state[u] = State::Written;
                    failure.get_or_insert(e);
                }
            }
        }
        // Closing the job channels ends the sessions' threads.
        drop(sessions);
        let opened: Vec<Client> = threads
            .into_iter()
            .filter_map(|t| t.join().ok().flatten())
            .collect();
        match failure {
            Some(e) => Err(e),
            None => Ok(opened),
        }
    })?;
    let done = done
        .into_iter()
        .map(|d| {
            d.ok_or_else(|| {
                anyhow::anyhow!("a table was never seeded (a bug in rollsafe's seeding schedule)")
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((done, opened))
}

/// One more session for the seeding, `jit` off as `super::seed` set the
/// first; None when there is no way to open one or opening it failed (one
/// session then writes every table).
fn open_more(more: MoreSessions<'_>) -> Option<Client> {
    let connect = more?;
    match connect().and_then(|mut client| {
        client.batch_execute("SET jit = off")?;
        Ok(client)
    }) {
        Ok(client) => {
            log::debug!("generate: a second session writes the tables that may be written at once");
            Some(client)
        }
        Err(e) => {
            log::debug!("generate: no second session ({e:#}); one session writes every table");
            None
        }
    }
}

/// A session's report: its number, the unit it wrote, what that gave.
type Finished = (usize, usize, anyhow::Result<UnitDone>);

/// A thread writing, on `client`, each unit sent to it; its reports go to
/// `finished`. It ends when its job channel closes, handing back the
/// session it opened.
fn spawn_session<'scope, 'env>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    id: usize,
    mut client: SessionClient<'env>,
    seeding: &'env Seeding<'env>,
    units: &'env [Unit],
    finished: mpsc::Sender<Finished>,
) -> (
    mpsc::Sender<usize>,
    std::thread::ScopedJoinHandle<'scope, Option<Client>>,
) {
    let (jobs_tx, jobs) = mpsc::channel::<usize>();
    let thread = s.spawn(move || {
        for u in jobs {
            // A panic is a bug in rollsafe; reported as this unit's
            // failure, it ends the seeding instead of leaving the
            // scheduler waiting for a report that never comes.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                write_unit(seeding, client.get(), &units[u])
            }))
            .unwrap_or_else(|_| {
                Err(anyhow::anyhow!(
                    "seeding a table panicked (a bug in rollsafe; please report it)"
                ))
            });
            if finished.send((id, u, r)).is_err() {
                break;
            }
        }
        match client {
            SessionClient::Owned(c) => Some(*c),
            SessionClient::Borrowed(_) => None,
        }
    });
    (jobs_tx, thread)
}

/// The session a thread writes on: the caller's, or one it opened.
enum SessionClient<'a> {
    Borrowed(&'a mut Client),
    Owned(Box<Client>),
}

impl SessionClient<'_> {
    fn get(&mut self) -> &mut Client {
        match self {
            SessionClient::Borrowed(c) => c,
            SessionClient::Owned(c) => c,
        }
    }
}

/// Writes one unit on `c`: a table in its own transaction, or a cycle in
/// one (a cycle that fails so is written table by table, as the single
/// session always did).
fn write_unit(seeding: &Seeding<'_>, c: &mut Client, unit: &Unit) -> anyhow::Result<UnitDone> {
    let ks: Vec<usize> = seeding.order.tables[unit.positions.clone()].to_vec();
    let mut warnings = Vec::new();
    let mut done = None;
    if unit.group {
        match seeding.group(c, unit.positions.clone())? {
            Ok(d) => done = Some(d),
            Err(why) => warnings.push(why),
        }
    }
    let done = match done {
        Some(d) => d,
        None => ks
            .into_iter()
            .map(|k| Ok((k, seeding.one(c, k, false, true)?)))
            .collect::<anyhow::Result<Vec<_>>>()?,
    };
    for (_, result) in &done {
        if let Ok((s, _)) = result {
            log::debug!(
                "generate: {}: {} rows in {:.0?}",
                s.table,
                s.written,
                s.took
            );
        }
    }
    Ok((done, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_that_names_no_table_nor_other_function_touches_none() {
        let tables: HashSet<String> = ["users", "parcels"].iter().map(|s| s.to_string()).collect();
        let functions: HashSet<String> = ["random_string", "next_id", "uuid_v7"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let touches =
            |name, language, source| may_touch_tables(name, language, source, &tables, &functions);
        // A random token, a UUIDv7: no table, no other function.
        assert!(!touches(
            "random_string",
            "sql",
            "SELECT array_to_string(array(SELECT substr('abc', (random()*3)::int + 1, 1) FROM generate_series(1, $1)), '')"
        ));
        assert!(!touches(
            "uuid_v7",
            "plpgsql",
            "BEGIN RETURN encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint) from 3) from 1 for 6), 52, 1), 53, 1), 'hex')::uuid; END"
        ));
        // A table named, dynamic SQL, another function of the project's,
        // a body in C.
        assert!(touches(
            "next_id",
            "plpgsql",
            "BEGIN RETURN (SELECT max(id) + 1 FROM Users); END"
        ));
        assert!(touches(
            "f",
            "plpgsql",
            "BEGIN EXECUTE format('SELECT 1 FROM %I', t); END"
        ));
        assert!(touches("g", "sql", "SELECT next_id()"));
        assert!(touches("h", "c", "h_impl"));
    }
}

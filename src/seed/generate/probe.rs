//! Queries that try a value on the server and may fail, each in a
//! savepoint of its own: what the fitting of values ([`super::fit`]) and
//! the shaping of JSON documents ([`super::json`]) both ask.

use postgres::GenericClient;

/// A probe that may fail (a value its type refuses), in a savepoint of
/// its own: inside the transaction of a deferred cycle
/// ([`super::Seeding::group`]) a failed query would end the whole
/// transaction. The outer error is a lost connection.
pub(super) fn probe(
    c: &mut impl GenericClient,
    sql: &str,
) -> Result<Result<postgres::Row, postgres::Error>, postgres::Error> {
    let mut sp = c.transaction()?;
    let r = sp.query_one(sql, &[]);
    drop(sp);
    Ok(r)
}

/// [`probe`] of a query that may return no row.
pub(super) fn probe_opt(
    c: &mut impl GenericClient,
    sql: &str,
) -> Result<Result<Option<postgres::Row>, postgres::Error>, postgres::Error> {
    let mut sp = c.transaction()?;
    let r = sp.query_opt(sql, &[]);
    drop(sp);
    match r {
        Err(e) if e.as_db_error().is_none() => Err(e),
        r => Ok(r),
    }
}

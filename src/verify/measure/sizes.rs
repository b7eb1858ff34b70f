//! Production's table sizes read from a real database (`--sizes-from
//! URL`, or the target's): the database half of the production-size
//! prediction, whose arithmetic is [`crate::verify::evidence::predict`].
//!
//! Floor `measure`: it takes a database URL and returns evidence
//! ([`Sizes`]).

use crate::verify::evidence::predict::Sizes;

impl Sizes {
    /// `reltuples` of every table a rehearsal measures ([`crate::tables`])
    /// in the database at `url` (read-only: one catalogue query). Tables
    /// never analysed (reltuples < 0) are left out.
    pub fn from_database(url: &str) -> anyhow::Result<Sizes> {
        let mut c = crate::db::connect(url)?;
        let rows = c
            .query(
                &format!(
                    "SELECT t.name, c.reltuples::float8 FROM ({}) t JOIN pg_class c ON c.oid = t.oid
                      WHERE c.reltuples >= 0",
                    crate::tables::list_sql()
                ),
                &[],
            )
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot read table sizes (pg_class.reltuples) from {}: {}",
                    crate::db::redact_url(url),
                    crate::errors::one_line(&e)
                )
            })?
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, f64>(1)))
            .collect();
        Ok(Sizes {
            rows,
            source: format!("reltuples of {}", crate::db::redact_url(url)),
        })
    }
}

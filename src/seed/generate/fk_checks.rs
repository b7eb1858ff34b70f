//! Writing a table's generated rows past the server's per-row
//! foreign-key checks, then checking every key once, set-wise.
//!
//! Each row inserted into a table with foreign keys fires one check per
//! key: a query of the parent, which also locks the parent row (`FOR KEY
//! SHARE`, a write to the parent's page). Measured on PostgreSQL 15, 10 000
//! rows with two keys: 180 ms with the checks, 70 ms without, and 9 ms to
//! check both keys for all of them with one anti-join. The generator's
//! keys point at rows it numbered from the parent, so the checks only
//! confirm what the plan built; the anti-join confirms it too, and a row
//! it finds sends the table back to the plain path (its rows through the
//! checks), so no row the server would refuse is ever kept.
//!
//! The checks are triggers, skipped by a session in replica mode
//! (`session_replication_role = replica`), a setting only a superuser or
//! a role granted `SET` on it (PostgreSQL 15 and later) may change. The
//! rehearsal seeds through a *seeder* role that holds that grant and is a
//! member of the migrator ([`crate::sessions`]): the session switches
//! to the migrator (`SET ROLE`) for everything it runs, and back to the
//! seeder only to set the mode for one table's transaction. The migrator
//! itself never holds the grant, so a migration that sets the mode fails
//! as it would in production. Replica mode also skips user triggers and
//! rules, so only tables with neither take this path: a table with
//! INSERT triggers keeps its measured path ([`super::insert`]).

use postgres::GenericClient;

use super::catalogue::Table;
use crate::pg::quote_ident;

/// How this session may enter replica mode, when it may.
#[derive(Debug, Clone)]
pub(super) struct FkCheckBypass {
    /// The role the session runs as (`SET ROLE`), to return to once the
    /// session user has set the mode; None when they are the same.
    role: Option<String>,
}

impl FkCheckBypass {
    /// Whether the session user may set `session_replication_role`: a
    /// superuser, or (PostgreSQL 15+) a role granted `SET` on it.
    pub(super) fn detect(c: &mut impl GenericClient) -> Result<Option<Self>, postgres::Error> {
        let row = c.query_one(
            "SELECT current_user::text, session_user::text,
                    (SELECT rolsuper FROM pg_roles WHERE rolname = session_user),
                    current_setting('server_version_num')::int",
            &[],
        )?;
        let (current, session): (String, String) = (row.get(0), row.get(1));
        let superuser: bool = row.get::<_, Option<bool>>(2).unwrap_or(false);
        let version: i32 = row.get(3);
        // has_parameter_privilege exists from 15 on only.
        let granted = !superuser
            && version >= 150_000
            && c.query_one(
                "SELECT has_parameter_privilege(session_user, 'session_replication_role', 'SET')",
                &[],
            )?
            .get::<_, bool>(0);
        if !superuser && !granted {
            log::debug!("generate: rows go through the per-row foreign-key checks ({session} may not set replica mode)");
            return Ok(None);
        }
        log::debug!("generate: rows skip the per-row foreign-key checks, checked set-wise ({session} may set replica mode)");
        Ok(Some(FkCheckBypass {
            role: (current != session).then_some(current),
        }))
    }

    /// Whether table `t`'s rows may take this path: it has foreign keys
    /// (else there is nothing to skip), all MATCH SIMPLE (what the
    /// anti-join checks), and no INSERT trigger or rule (replica mode
    /// would skip them, or run a trigger enabled for replicas only).
    pub(super) fn applies_to(t: &Table) -> bool {
        !t.fks.is_empty()
            && t.fks.iter().all(|fk| !fk.match_full)
            && t.insert_triggers.is_empty()
            && !t.insert_rules
    }

    /// Puts the transaction `tx` in replica mode until it ends (`SET
    /// LOCAL`), the session back in its role.
    pub(super) fn enter(&self, tx: &mut impl GenericClient) -> Result<(), postgres::Error> {
        match &self.role {
            Some(role) => tx.batch_execute(&format!(
                "RESET ROLE; SET LOCAL session_replication_role = replica; SET ROLE {}",
                quote_ident(role)
            )),
            None => tx.batch_execute("SET LOCAL session_replication_role = replica"),
        }
    }
}

/// Rows this transaction wrote into `t` that one of its foreign keys
/// refuses (all key columns set, no parent row with those values): what
/// the skipped per-row checks would have found, for every key at once.
pub(super) fn violations(
    c: &mut impl GenericClient,
    t: &Table,
    parents: &std::collections::HashMap<u32, &Table>,
) -> Result<i64, postgres::Error> {
    let mut refused = Vec::new();
    for fk in &t.fks {
        let names = |tbl: &Table, nums: &[i16]| -> Option<Vec<String>> {
            nums.iter()
                .map(|&n| tbl.column(n).map(|k| quote_ident(&tbl.columns[k].name)))
                .collect()
        };
        let parent = if fk.ref_table == t.oid {
            Some(t)
        } else {
            parents.get(&fk.ref_table).copied()
        };
        let (Some(parent), Some(cols)) = (parent, names(t, &fk.cols)) else {
            // A key whose columns or parent the catalogue does not know:
            // nothing to check it with, so the plain path.
            return Ok(i64::MAX);
        };
        let Some(refs) = names(parent, &fk.ref_cols) else {
            return Ok(i64::MAX);
        };
        let set = cols
            .iter()
            .map(|c| format!("c.{c} IS NOT NULL"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let matches = cols
            .iter()
            .zip(&refs)
            .map(|(c, r)| format!("p.{r} = c.{c}"))
            .collect::<Vec<_>>()
            .join(" AND ");
        refused.push(format!(
            "({set} AND NOT EXISTS (SELECT 1 FROM {} p WHERE {matches}))",
            parent.qualified
        ));
    }
    if refused.is_empty() {
        return Ok(0);
    }
    c.query_one(
        &format!(
            "SELECT count(*) FROM {} c WHERE c.xmin = pg_current_xact_id()::xid AND ({})",
            t.qualified,
            refused.join(" OR ")
        ),
        &[],
    )
    .map(|r| r.get(0))
}

//! Foreign keys that share columns: a multi-tenant table whose keys to
//! an account and to a batch both carry the tenant, `(account_id,
//! tenant_id)` and `(batch_id, tenant_id)`, beside a plain key to the
//! tenant. Each key picking its parent row on its own would give the
//! shared column two values; the row must take one that every key's
//! parent has.
//!
//! So keys that share columns are joined together, one after the other
//! ([`join_order`]): first the one that *drives* (a key whose columns are
//! UNIQUE on their own, then a key that may not be NULL before one that
//! may, the most columns first), whose parent row
//! gives the shared columns their values; each later key then picks among
//! its parent's rows that agree with those values ([`super::plan::Join`]'s
//! `agree`), in SQL, as every other join. When no row agrees:
//!
//! - a key whose own (unshared) columns may all be NULL ([`falls_back`])
//!   takes NULL there, and MATCH SIMPLE holds (a batch is optional);
//! - any other key may not be left without a row: the driving key keeps
//!   only its parent's rows for which one agrees ([`agreeing_rows`]), a
//!   semi-join, so every row it picks has a partner. A key whose columns
//!   are all shared (the plain key to the tenant) is only that filter.
//!   When no row of the driving parent has one, a driving key that may be
//!   NULL goes last and the keys are joined again (`table::seed_table`):
//!   it then falls back to NULL where the others leave it no row. Any
//!   other driving key: the table is reported, naming both keys, rather
//!   than written with rows the server refuses.
//!
//! A UNIQUE key walked over the combinations of its keys' parent rows (a
//! junction of two keys that share the tenant) counts, for a key that
//! agrees with an earlier one, only the fewest rows that agree with any
//! of the earlier key's (`Join::least`): each row of the earlier key gets
//! that many distinct partners, and the table as many rows as that
//! allows, said in its note.
//!
//! A reference to the table itself that shares columns with a key to
//! another table (a tree of accounts kept within a tenant) points at an
//! earlier row that took the same row of that key's parent
//! (`Val::SelfFk`'s `along`): one tree per tenant.
//!
//! A key left NULL to break a cycle and filled in afterwards keeps the
//! columns it shares with the table's other keys and takes a parent row
//! that agrees on them (`insert::fill_agreeing`): setting them would move
//! a row out of its tenant, breaking the keys that point at it.
//!
//! What it does not do: a key that must agree with the values of two
//! different earlier keys is joined without a filter (its parent is not
//! narrowed further): rows with no partner are refused by the INSERT and
//! the table reported with the server's message.

use super::catalogue::{ForeignKey, Table};
use crate::pg::quote_ident;

/// The order the table's foreign keys are joined in (indexes into
/// `t.fks`): as the catalogue lists them, except that keys sharing a
/// column (directly or through another) are taken together where the
/// first of them is listed, the driving one first: a key whose columns
/// make a UNIQUE key on their own ([`unique_alone`]), then a key that may
/// not be NULL before one that may, then the most columns first. A
/// reference to the table itself shares with nothing here (it is pointed
/// at the table's own rows afterwards).
pub(super) fn join_order(t: &Table) -> Vec<usize> {
    let n = t.fks.len();
    let own = |f: usize| t.fks[f].ref_table == t.oid;
    let shares = |a: usize, b: usize| t.fks[a].cols.iter().any(|c| t.fks[b].cols.contains(c));
    let mut taken = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for f in 0..n {
        if taken[f] {
            continue;
        }
        taken[f] = true;
        let mut group = vec![f];
        let mut i = 0;
        while i < group.len() && !own(f) {
            let a = group[i];
            let joining: Vec<usize> = (0..n)
                .filter(|&b| !taken[b] && !own(b) && shares(a, b))
                .collect();
            for b in joining {
                taken[b] = true;
                group.push(b);
            }
            i += 1;
        }
        group.sort_by_key(|&g| {
            (
                !unique_alone(t, &t.fks[g]),
                t.fks[g].breakable(t),
                std::cmp::Reverse(t.fks[g].cols.len()),
                g,
            )
        });
        order.extend(group);
    }
    order
}

/// Whether a UNIQUE key of `t` is made of `fk`'s columns only (one seat
/// per desk): each of its parent rows at most once, which only the
/// driving key can promise (it walks its rows; a later key picks within
/// groups the driving one chose).
fn unique_alone(t: &Table, fk: &ForeignKey) -> bool {
    t.uniques
        .iter()
        .any(|key| !key.is_empty() && key.iter().all(|n| fk.cols.contains(n)))
}

/// Whether key `fk`, whose columns `free` (indexes into the table's
/// columns) no earlier key gives a value, may take NULL there when no
/// row of its parent agrees with the shared ones: MATCH SIMPLE, and every
/// free column nullable (a NOT NULL one would need a value no parent row
/// gives).
pub(super) fn falls_back(t: &Table, fk: &ForeignKey, free: &[usize]) -> bool {
    !fk.match_full && !free.is_empty() && free.iter().all(|&k| !t.columns[k].not_null())
}

/// The condition, on a row `q` of the driving key's parent, that some row
/// of `parent` (the later key's) agrees with it: `shared` pairs the later
/// key's referenced column with the driving parent's column that gives
/// its value; `ref_cols`, the later key's referenced columns, all set.
pub(super) fn agreeing_rows(
    parent: &str,
    shared: &[(String, String)],
    ref_cols: &[String],
) -> String {
    let mut on: Vec<String> = shared
        .iter()
        .map(|(r, d)| format!("r.{} = q.{}", quote_ident(r), quote_ident(d)))
        .collect();
    on.extend(
        ref_cols
            .iter()
            .map(|r| format!("r.{} IS NOT NULL", quote_ident(r))),
    );
    format!(
        "EXISTS (SELECT 1 FROM {parent} r WHERE {})",
        on.join(" AND ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::generate::catalogue::{Column, TypeInfo, TypeKind};

    fn column(num: i16, name: &str, not_null: bool) -> Column {
        Column {
            num,
            name: name.into(),
            ty: TypeInfo {
                kind: TypeKind::Int(8),
                sql: "bigint".into(),
            },
            typmod: -1,
            sql_type: "bigint".into(),
            not_null,
            default: None,
            identity: false,
            generated: false,
            referenced_len: None,
        }
    }

    fn fk(name: &str, cols: &[i16], ref_table: u32) -> ForeignKey {
        ForeignKey {
            name: name.into(),
            cols: cols.to_vec(),
            ref_table,
            ref_cols: (1..=cols.len() as i16).collect(),
            match_full: false,
            deferrable: false,
        }
    }

    /// id, tenant (NOT NULL), account (NOT NULL), batch (nullable), parent.
    fn entries(fks: Vec<ForeignKey>) -> Table {
        Table {
            oid: 1,
            name: "entry".into(),
            qualified: "entry".into(),
            columns: vec![
                column(1, "id", true),
                column(2, "tenant_id", true),
                column(3, "account_id", true),
                column(4, "batch_id", false),
                column(5, "parent_id", false),
            ],
            uniques: Vec::new(),
            fks,
            checks: Vec::new(),
            partitioning: None,
            insert_triggers: Vec::new(),
            insert_rules: false,
            single_row: None,
            index_expressions: Vec::new(),
        }
    }

    #[test]
    fn keys_sharing_a_column_are_joined_together_the_driving_one_first() {
        let t = entries(vec![
            fk("batch", &[4, 2], 10),
            fk("other", &[5], 1),
            fk("tenant", &[2], 11),
            fk("account", &[3, 2], 12),
        ]);
        // The NOT NULL composite drives, the plain NOT NULL key next, the
        // nullable one last; the self-reference keeps its place.
        assert_eq!(join_order(&t), [3, 2, 0, 1]);
    }

    #[test]
    fn a_key_unique_on_its_own_drives() {
        let mut t = entries(vec![fk("account", &[3, 2], 12), fk("batch", &[4, 2], 10)]);
        t.uniques.push(vec![4, 2]);
        assert_eq!(join_order(&t), [1, 0]);
    }

    #[test]
    fn keys_sharing_nothing_keep_their_order() {
        let t = entries(vec![
            fk("b", &[4], 10),
            fk("a", &[3], 12),
            fk("t", &[2], 11),
        ]);
        assert_eq!(join_order(&t), [0, 1, 2]);
    }

    #[test]
    fn only_a_match_simple_key_with_nullable_free_columns_falls_back() {
        let t = entries(Vec::new());
        let batch = fk("batch", &[4, 2], 10);
        assert!(falls_back(&t, &batch, &[3]));
        assert!(!falls_back(&t, &batch, &[]));
        assert!(!falls_back(&t, &fk("account", &[3, 2], 12), &[2]));
        let full = ForeignKey {
            match_full: true,
            ..batch
        };
        assert!(!falls_back(&t, &full, &[3]));
    }
}

//! One table's seeding plan: where each column's value comes from in the
//! INSERT (left to its default, a referenced row, its own parent row, a
//! value family), the joins to the referenced tables, and the SQL it
//! renders: the SELECT that inserts, the probes that sample it.

use std::collections::BTreeSet;

use super::catalogue::Table;
use super::family::{at, Family};
use super::{SeededTable, UnseededTable, SAMPLE_HEAD};
use crate::pg::quote_ident;

/// Where a column's value comes from in the INSERT.
#[derive(Debug, Clone)]
pub(super) enum Val {
    /// Left to its default (or identity, or a generated column); `probe`
    /// stands in for it when CHECKs are tested.
    Omitted {
        probe: String,
    },
    /// One of `fams`, the `chosen` one.
    Gen {
        fams: Vec<Family>,
        chosen: usize,
    },
    /// Column `col` of the numbered rows of foreign key `fk`.
    Fk {
        fk: usize,
        col: String,
    },
    /// The value of column `target` (an index into the table's columns) of
    /// an earlier row of the same table: row g points at row g / 2; row 1
    /// at nothing (NULL) or, when NULL is not allowed, at itself.
    ///
    /// `along`: the key shares columns with join `along` (a tree kept
    /// within a tenant, `(parent_id, tenant_id)`), so the parent must be
    /// a row that took the same referenced row. That join's pick repeats
    /// every `stride` rows ([`Plan::stride`]): the rows taking one of its
    /// rows are numbered k = (g - 1) / stride, and row k points at row
    /// k / 2 of the same ones; the first `stride` rows are the roots.
    SelfFk {
        target: usize,
        root_null: bool,
        along: Option<usize>,
    },
    Null,
}

/// A foreign key joined in as numbered rows of the referenced table.
#[derive(Debug, Clone)]
pub(super) struct Join {
    pub(super) parent: String,
    pub(super) ref_cols: Vec<String>,
    /// Rows to pick from.
    pub(super) n: u64,
    /// Mixed-radix divisor for keys that must give distinct combinations.
    pub(super) divisor: Option<u64>,
    /// Earlier joins to the same table: this one starts that many rows
    /// further, so two keys into one table (an inviter and an invitee,
    /// `CHECK (a <> b)`) point at different rows.
    pub(super) shift: u64,
    /// An earlier join to the same table that walks the same UNIQUE key
    /// (a follower and the followed, both in the primary key): this one
    /// takes, per row of the earlier one, each of the *other* rows in turn,
    /// so the pairs are distinct and never a row paired with itself.
    pub(super) apart_from: Option<usize>,
    /// Conditions the referenced rows must meet besides a key without
    /// NULLs, on the parent's row as `q`: a key whose columns another
    /// key shares keeps only the rows some row of that key's parent
    /// agrees with ([`super::overlap`]).
    pub(super) filter: Vec<String>,
    /// The columns of this key that earlier joins already give a value
    /// (its referenced column, the earlier join, that join's column):
    /// this one takes, among the rows that agree on them, row number
    /// `pick` of that group; no row agrees: NULL ([`super::overlap`]).
    pub(super) agree: Vec<(String, usize, String)>,
    /// For a join that agrees with earlier ones: the fewest rows a group
    /// the earlier rows name holds, the choices a walk of a UNIQUE key
    /// may count on for every row of theirs (1 at least: a key NULL for
    /// want of a partner collides with nothing).
    pub(super) least: u64,
}

impl Join {
    /// The referenced rows to pick from, as `SELECT <key> …`: those whose
    /// key has no NULL and that pass the join's filter. A probe (run once
    /// per candidate while CHECKs are searched) needs some parent rows,
    /// not all: the first 16 by the key, read from the unique index
    /// every referenced key has (no sort of a big table). The same 16 for
    /// every join to one parent, so the shift between two such joins
    /// holds in the probe as in the INSERT (an inviter is not the
    /// invitee).
    pub(super) fn rows(&self, probe: bool) -> String {
        let keys = self.keys();
        let mut conditions: Vec<String> = self
            .ref_cols
            .iter()
            .map(|c| format!("q.{} IS NOT NULL", quote_ident(c)))
            .collect();
        conditions.extend(self.filter.iter().map(|f| format!("({f})")));
        let limit = if probe {
            format!(" ORDER BY {keys} LIMIT 16")
        } else {
            String::new()
        };
        format!(
            "SELECT {keys} FROM {} q WHERE {}{limit}",
            self.parent,
            conditions.join(" AND ")
        )
    }

    /// How many referenced rows each row can choose among: all of them,
    /// or, for a join that agrees with earlier ones, its smallest group.
    pub(super) fn choices(&self) -> u64 {
        if self.agree.is_empty() {
            self.n
        } else {
            self.least.max(1)
        }
    }

    /// The referenced columns, quoted, comma-separated.
    fn keys(&self) -> String {
        self.ref_cols
            .iter()
            .map(|c| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

pub(super) struct Plan<'a> {
    pub(super) table: &'a Table,
    pub(super) vals: Vec<Val>,
    pub(super) joins: Vec<Join>,
    pub(super) offset: u64,
    pub(super) rows: u64,
    /// Per column, its turn in a group of which exactly one is set
    /// ([`super::rules`]): (its place, the group's size). NULL off turn.
    pub(super) turns: Vec<Option<(usize, usize)>>,
}

impl Plan<'_> {
    pub(super) fn index(&self) -> String {
        format!("s.g + {}", self.offset)
    }

    /// The SQL of column `k`, for the INSERT (`probe` false: None for an
    /// omitted column) or for a CHECK probe.
    pub(super) fn expr(&self, k: usize, probe: bool) -> Option<String> {
        let value = self.value(k, probe)?;
        Some(match self.turns.get(k).copied().flatten() {
            Some((place, size)) => format!("CASE WHEN s.g % {size} = {place} THEN {value} END"),
            None => value,
        })
    }

    /// [`Plan::expr`] on every row (its turn aside).
    fn value(&self, k: usize, probe: bool) -> Option<String> {
        let col = &self.table.columns[k];
        let cast = |v: String| format!("({v})::{}", col.sql_type);
        Some(match &self.vals[k] {
            Val::Omitted { probe: p } => {
                if !probe {
                    return None;
                }
                p.clone()
            }
            Val::Gen { fams, chosen } => cast(at(&fams[*chosen].sql, &self.index())),
            Val::Fk { fk, col: c } => format!("fk{fk}.{}", quote_ident(c)),
            Val::SelfFk {
                target,
                root_null,
                along,
            } => {
                let (is_root, parent_g) = match along.and_then(|j| self.stride(j, probe)) {
                    Some(s) => (
                        format!("s.g <= {s}"),
                        format!("((s.g - 1) / {s} / 2) * {s} + (s.g - 1) % {s} + 1"),
                    ),
                    None => ("s.g = 1".to_string(), "s.g / 2".to_string()),
                };
                let parent = match &self.vals[*target] {
                    Val::Gen { fams, chosen } => {
                        at(&fams[*chosen].sql, &format!("{parent_g} + {}", self.offset))
                    }
                    _ => "NULL".into(),
                };
                let root = if *root_null {
                    "NULL".to_string()
                } else {
                    self.expr(*target, probe).unwrap_or_else(|| "NULL".into())
                };
                format!(
                    "CASE WHEN {is_root} THEN {} ELSE {} END",
                    cast(root),
                    cast(parent)
                )
            }
            Val::Null => cast("NULL".into()),
        })
    }

    /// Every how many rows join `j` takes the same referenced row again
    /// (see [`Plan::pick`]); None when that depends on another join (one
    /// that agrees with earlier ones, or stays apart from one).
    fn stride(&self, j: usize, probe: bool) -> Option<u64> {
        let j = &self.joins[j];
        if !j.agree.is_empty() || j.apart_from.is_some() {
            return None;
        }
        let n = if probe { j.n.min(16) } else { j.n };
        Some(j.divisor.unwrap_or(1).saturating_mul(n).max(1))
    }

    /// `SELECT <values> FROM <source of g> <joins>`; a probe limits each
    /// joined table to 16 of its rows (the sample's indexes are folded
    /// into them), so testing a CHECK never sorts a whole big table.
    pub(super) fn select(&self, source: &str, probe: bool) -> String {
        let values: Vec<String> = (0..self.vals.len())
            .filter_map(|k| {
                self.expr(k, probe).map(|e| {
                    if probe {
                        format!("{e} AS {}", quote_ident(&self.table.columns[k].name))
                    } else {
                        e
                    }
                })
            })
            .collect();
        let mut sql = format!("SELECT {} FROM {source}", values.join(", "));
        for (f, j) in self.joins.iter().enumerate() {
            sql.push_str(&self.join_sql(f, j, probe));
        }
        sql
    }

    /// ` LEFT JOIN … fk<f>`: join `f`'s referenced rows, numbered from 0,
    /// the one [`Plan::pick`] names. A join that must agree with earlier
    /// ones on shared columns numbers the rows within each group of equal
    /// shared values, and counts each group (`fk<f>n`) to pick from it:
    /// equalities only, so both stay hash joins.
    fn join_sql(&self, f: usize, j: &Join, probe: bool) -> String {
        let (keys, rows, pick) = (j.keys(), j.rows(probe), self.pick(f, probe));
        if j.agree.is_empty() {
            return format!(
                " LEFT JOIN (SELECT {keys}, row_number() OVER (ORDER BY {keys}) - 1 AS rollsafe_rn
                     FROM ({rows}) p) fk{f}
                   ON fk{f}.rollsafe_rn = {pick}"
            );
        }
        let shared = j
            .agree
            .iter()
            .map(|(r, _, _)| quote_ident(r))
            .collect::<Vec<_>>()
            .join(", ");
        let on = |alias: &str| {
            j.agree
                .iter()
                .map(|(r, other, c)| {
                    format!("{alias}.{} = fk{other}.{}", quote_ident(r), quote_ident(c))
                })
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        format!(
            " LEFT JOIN (SELECT {shared}, count(*) AS rollsafe_n FROM ({rows}) p GROUP BY {shared}) fk{f}n
                ON {}
              LEFT JOIN (SELECT {keys}, row_number() OVER (PARTITION BY {shared} ORDER BY {keys}) - 1 AS rollsafe_rn
                     FROM ({rows}) p) fk{f}
                ON {} AND fk{f}.rollsafe_rn = {pick}",
            on(&format!("fk{f}n")),
            on(&format!("fk{f}"))
        )
    }

    /// The number (from 0) of the referenced row join `f` takes for row
    /// `s.g`: among all its rows, or, for a join that agrees with earlier
    /// ones, among the rows of its group (`fk<f>n` of them).
    fn pick(&self, f: usize, probe: bool) -> String {
        let j = &self.joins[f];
        let shift = j.shift;
        if !j.agree.is_empty() {
            let n = format!("fk{f}n.rollsafe_n");
            return match j.divisor {
                Some(d) => format!("((s.g - 1) / {d} + {shift}) % {n}"),
                None => format!("(s.g - 1 + {shift}) % {n}"),
            };
        }
        let n = if probe { j.n.min(16) } else { j.n };
        match (j.divisor, j.apart_from) {
            (Some(d), Some(earlier)) if n > 1 => format!(
                "(({}) + 1 + ((s.g - 1) / {d}) % {}) % {n}",
                self.pick(earlier, probe),
                n - 1
            ),
            (Some(d), _) => format!("((s.g - 1) / {d} + {shift}) % {n}"),
            (None, _) => format!("(s.g - 1 + {shift}) % {n}"),
        }
    }

    pub(super) fn sample(&self) -> String {
        let mut g: BTreeSet<u64> = (1..=SAMPLE_HEAD.min(self.rows)).collect();
        g.insert(self.rows);
        g.insert(self.rows.saturating_sub(1).max(1));
        let list = g.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        format!("unnest('{{{list}}}'::bigint[]) AS s(g)")
    }
}

/// The rows written and the id of the transaction that wrote them, or
/// why the table could not be seeded.
pub(super) type TableResult = Result<(SeededTable, Option<String>), UnseededTable>;

pub(super) fn unseeded<T>(
    t: &Table,
    constraint: Option<&str>,
    reason: String,
) -> Result<T, UnseededTable> {
    Err(UnseededTable {
        table: t.name.clone(),
        constraint: constraint.map(str::to_string),
        reason,
    })
}

//! How long each lock that blocks the app would be held on production's
//! tables, extrapolated from the two measured applies (0 rows and the
//! seeded size).
//!
//! Per statement, time at 0 rows is the fixed part; what it took more at
//! the seeded size grows with the tables it did row-proportional work on
//! (a pass over the rows, rows written, a rewrite, an index build), so it
//! is scaled by production rows / seeded rows of the largest such table.
//! Statements that did no such work keep their measured time. A lock taken
//! by statement *s* is held from *s* to the commit, so its hold is the sum
//! of the predicted times from *s* on. Linear in rows: an index build
//! (n log n) is predicted a little short, a table that fits in memory here
//! but not there a little short too; the figure is an order of magnitude
//! to act on, not a promise.
//!
//! Sizes come from `--table-rows TABLE=N` or from `reltuples` of a real
//! database (`--sizes-from URL`, read-only: that reading is an instrument,
//! [`crate::verify::measure::sizes`]); without either the seeded size is
//! used, and the message says so.
//!
//! Floor `evidence`: pure arithmetic over measured applies, no database;
//! the checks (`locks`, `rewrite`, `plan`) read it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::applied::Applied;
use crate::pg::lock_modes::Needs;

/// Production row counts per table, and where they came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sizes {
    pub rows: BTreeMap<String, f64>,
    /// "--table-rows", "reltuples of postgres://…" (redacted); empty when
    /// none was given.
    pub source: String,
}

impl Sizes {
    /// `TABLE=N` pairs (N may use `_` separators or a k/M/G suffix; a
    /// table outside `public` is named with its schema, `sales.orders`).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = &'a str>) -> Result<Sizes, String> {
        let mut rows = BTreeMap::new();
        for p in pairs {
            let (table, n) = p
                .split_once('=')
                .ok_or_else(|| format!("`{p}` is not TABLE=ROWS (e.g. bookings=48000000)"))?;
            let n = parse_count(n.trim())
                .ok_or_else(|| format!("`{p}`: `{n}` is not a row count (e.g. 48000000, 48M)"))?;
            let n = crate::bounds::TABLE_ROWS
                .check_f64(n)
                .map_err(|e| format!("rows {e}"))?;
            rows.insert(crate::tables::display(table), n);
        }
        Ok(Sizes {
            rows,
            source: "--table-rows".into(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Whether the user named these tables (`--table-rows`), as opposed to
    /// reading them from a database: each must then exist.
    pub fn given_by_flag(&self) -> bool {
        self.source == "--table-rows"
    }
}

fn parse_count(s: &str) -> Option<f64> {
    let s = s.replace('_', "");
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1e3),
        'm' | 'M' => (&s[..s.len() - 1], 1e6),
        'g' | 'G' | 'b' | 'B' => (&s[..s.len() - 1], 1e9),
        _ => (&s[..], 1.0),
    };
    let n: f64 = num.parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some(n * mult)
}

/// (table, seeded rows, predicted rows) of a table whose size drives a
/// prediction.
pub type Driver = (String, i64, f64);

/// Adds to `drivers` each of `more` whose table it does not name yet
/// (the first driver of a table stands for it).
pub fn merge_drivers(drivers: &mut Vec<Driver>, more: impl IntoIterator<Item = Driver>) {
    for d in more {
        if !drivers.iter().any(|x| x.0 == d.0) {
            drivers.push(d);
        }
    }
}

/// One lock that blocks the app, measured and predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    pub table: String,
    pub mode: String,
    /// The statement that took it.
    pub statement: usize,
    /// Measured at the seeded size.
    pub measured: Duration,
    pub predicted: Duration,
    /// Whether the prediction used production sizes (else the seeded ones).
    pub from_sizes: bool,
    /// (table, seeded rows, predicted rows) of the tables whose size
    /// drives the prediction.
    pub drivers: Vec<Driver>,
}

impl Hold {
    /// "at 48000000 rows of bookings", or "at the seeded size (10000 rows of bookings)".
    pub fn size_phrase(&self) -> String {
        let rows = |v: &[Driver], pick: fn(&Driver) -> f64| {
            v.iter()
                .map(|d| format!("{:.0} rows of {}", pick(d), d.0))
                .collect::<Vec<_>>()
                .join(" and ")
        };
        if self.drivers.is_empty() {
            "at any size (nothing under it grows with a table)".to_string()
        } else if self.from_sizes {
            format!("at {}", rows(&self.drivers, |d| d.2))
        } else {
            format!(
                "at the seeded size ({}; give --table-rows TABLE=N or --sizes-from URL for production's)",
                rows(&self.drivers, |d| d.1 as f64)
            )
        }
    }
}

/// Every lock held at the end of `at_n` that blocks some app statement
/// (per `needs`), with its measured and predicted hold.
pub fn holds(at_zero: &Applied, at_n: &Applied, needs: &Needs, sizes: &Sizes) -> Vec<Hold> {
    let commit = at_n.held.saturating_sub(at_n.duration);
    let n = at_n.statements.len();
    let (per_statement, any_sized) = per_statement(at_zero, at_n, sizes);
    let mut out = Vec::new();
    if at_n.outside_transaction {
        // Each statement committed on its own: a lock is held while its
        // statement runs, and only then.
        for (s, st) in at_n.statements.iter().enumerate() {
            for (table, modes) in &st.locks_after {
                // The strongest blocking mode stands for the others: they
                // are held for the same statement.
                let blocking = modes
                    .iter()
                    .map(String::as_str)
                    .filter(|m| needs.blocks(table, m));
                if let Some(mode) = crate::pg::lock_modes::strongest(blocking) {
                    let (predicted, drivers) = per_statement[s].clone();
                    out.push(Hold {
                        table: table.clone(),
                        mode: mode.to_string(),
                        statement: s,
                        measured: st.duration,
                        predicted,
                        from_sizes: any_sized,
                        drivers,
                    });
                }
            }
        }
        return out;
    }
    for t in at_n.tables.values() {
        for mode in &t.locks {
            if !needs.blocks(&t.table, mode) {
                continue;
            }
            let Some(s) = at_n.taken_at(&t.table, mode) else {
                continue;
            };
            let mut drivers: Vec<Driver> = Vec::new();
            for (_, ds) in &per_statement[s..] {
                merge_drivers(&mut drivers, ds.iter().cloned());
            }
            // Nothing under it grows with a table: its hold is what was
            // measured, at any size. The empty database's apply measured
            // the same work, and so did the forced failure's transaction
            // before it (all of its statements: a bound on any hold), so
            // the shortest is its cost: a busy machine only ever adds
            // time, and a hold that is really long (a sleep, a slow
            // function) is long in all three.
            let predicted = if drivers.is_empty() {
                let at_n_hold = at_n.held_from(s);
                if at_zero.statements.len() == n && at_zero.held > Duration::ZERO {
                    let shortest = at_n_hold.min(at_zero.held_from(s));
                    match at_zero.forced_failure_took.filter(|t| *t > Duration::ZERO) {
                        Some(forced) => shortest.min(forced),
                        None => shortest,
                    }
                } else {
                    at_n_hold
                }
            } else {
                per_statement[s..].iter().map(|(d, _)| *d).sum::<Duration>() + commit
            };
            out.push(Hold {
                table: t.table.clone(),
                mode: mode.clone(),
                statement: s,
                measured: at_n.held_from(s),
                predicted,
                from_sizes: any_sized,
                drivers,
            });
        }
    }
    out
}

/// Per statement of `at_n`: its predicted duration at production size
/// (what it took at 0 rows, plus what it took more at the seeded size
/// scaled by the largest table it did row-proportional work on) and the
/// tables that drove it; and whether any size came from production's.
fn per_statement(
    at_zero: &Applied,
    at_n: &Applied,
    sizes: &Sizes,
) -> (Vec<(Duration, Vec<Driver>)>, bool) {
    let n = at_n.statements.len();
    let mut per_statement: Vec<(Duration, Vec<Driver>)> = Vec::with_capacity(n);
    let mut any_sized = false;
    for (i, st) in at_n.statements.iter().enumerate() {
        let zero = at_zero
            .statements
            .get(i)
            .filter(|_| at_zero.statements.len() == n)
            .map(|s| s.duration)
            .unwrap_or_default()
            .min(st.duration);
        let mut drivers = Vec::new();
        let mut scale: f64 = 1.0;
        for t in at_n.tables.values().filter(|t| st.grows_on(t)) {
            let target = sizes.rows.get(&t.table).copied();
            any_sized |= target.is_some();
            let target = target.unwrap_or(t.rows_before as f64);
            scale = scale.max(target / t.rows_before.max(1) as f64);
            drivers.push((t.table.clone(), t.rows_before, target));
        }
        let predicted = if drivers.is_empty() {
            st.duration
        } else {
            zero + (st.duration - zero).mul_f64(scale)
        };
        per_statement.push((predicted, drivers));
    }
    (per_statement, any_sized)
}

/// How long the migration's statements run, measured at the seeded size
/// and predicted at production size, with the tables that drive the
/// prediction: what a lock taken before it in the same transaction waits
/// on (a run of migrations sent in one transaction holds every lock to
/// the last commit). The statements' own time only: the reads rollsafe
/// takes between them (in `held`) are not production's, and summed over
/// many migrations they would add up to a hold no deploy has.
pub fn took(at_zero: &Applied, at_n: &Applied, sizes: &Sizes) -> (Duration, Duration, Vec<Driver>) {
    let (per_statement, _) = per_statement(at_zero, at_n, sizes);
    let mut drivers: Vec<Driver> = Vec::new();
    for (_, ds) in &per_statement {
        merge_drivers(&mut drivers, ds.iter().cloned());
    }
    let measured: Duration = at_n.statements.iter().map(|s| s.duration).sum();
    let predicted = if drivers.is_empty() {
        // Nothing grows with a table: the shorter of the two measurements,
        // as for a hold (a busy machine only ever adds time).
        let at_zero_took: Duration = at_zero.statements.iter().map(|s| s.duration).sum();
        if at_zero.statements.len() == at_n.statements.len() && at_zero.ok() {
            measured.min(at_zero_took)
        } else {
            measured
        }
    } else {
        per_statement.iter().map(|(d, _)| *d).sum::<Duration>()
    };
    (measured, predicted, drivers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::evidence::{StatementRun, TableWork, Work};

    #[test]
    fn sizes_parse_with_suffixes() {
        let s = Sizes::from_pairs(["bookings=48M", "users=1_000", "x=2.5k"]).unwrap();
        assert_eq!(s.rows["bookings"], 48e6);
        assert_eq!(s.rows["users"], 1000.0);
        assert_eq!(s.rows["x"], 2500.0);
        assert!(Sizes::from_pairs(["bookings"]).is_err());
        assert!(Sizes::from_pairs(["bookings=lots"]).is_err());
        // Named as reports name tables: public. dropped, other schemas kept.
        let s = Sizes::from_pairs(["public.bookings=1", "sales.orders=2"]).unwrap();
        assert_eq!(s.rows["bookings"], 1.0);
        assert_eq!(s.rows["sales.orders"], 2.0);
        assert!(s.given_by_flag());
    }

    #[test]
    fn hold_scales_the_row_proportional_part_only() {
        let table = TableWork {
            table: "t".into(),
            rows_before: 10_000,
            pages_before: 100,
            locks: vec!["AccessExclusiveLock".into()],
            ..TableWork::default()
        };
        let mut locks = BTreeMap::new();
        locks.insert("t".to_string(), vec!["AccessExclusiveLock".to_string()]);
        let scan = Work {
            tuples_read: 10_000,
            ..Work::default()
        };
        let at_n = Applied {
            duration: Duration::from_millis(101),
            held: Duration::from_millis(102),
            tables: [("t".to_string(), table)].into(),
            statements: vec![
                StatementRun {
                    duration: Duration::from_millis(1),
                    locks_after: locks.clone(),
                    ..StatementRun::default()
                },
                StatementRun {
                    duration: Duration::from_millis(100),
                    locks_after: locks,
                    work: [("t".to_string(), scan)].into(),
                    ..StatementRun::default()
                },
            ],
            ..Applied::default()
        };
        let at_zero = Applied {
            statements: vec![
                StatementRun {
                    duration: Duration::from_millis(1),
                    ..StatementRun::default()
                },
                StatementRun {
                    duration: Duration::from_millis(10),
                    ..StatementRun::default()
                },
            ],
            ..Applied::default()
        };
        let sizes = Sizes::from_pairs(["t=1000000"]).unwrap();
        let h = holds(&at_zero, &at_n, &Needs::unknown(), &sizes);
        assert_eq!(h.len(), 1);
        // 1 ms + (10 ms + 90 ms × 100) + 1 ms commit
        assert_eq!(h[0].predicted, Duration::from_millis(9012));
        assert_eq!(h[0].measured, Duration::from_millis(102));
        assert!(h[0].size_phrase().starts_with("at 1000000 rows of t"));
        let at_seeded = holds(&at_zero, &at_n, &Needs::unknown(), &Sizes::default());
        assert_eq!(at_seeded[0].predicted, Duration::from_millis(102));
        assert!(at_seeded[0].size_phrase().contains("seeded size"));
    }

    /// A hold nothing under which grows with a table is the shortest of
    /// its three measurements: a stall of the machine in the seeded and
    /// empty applies (1.3 s and 1.2 s) is not its cost when the forced
    /// failure's transaction ran the same statements in 0.3 s; a hold
    /// that is long in all three (a sleep) stays long.
    #[test]
    fn a_constant_hold_is_the_shortest_of_its_three_measurements() {
        let table = TableWork {
            table: "t".into(),
            rows_before: 10,
            locks: vec!["AccessExclusiveLock".into()],
            ..TableWork::default()
        };
        let locks: BTreeMap<String, Vec<String>> =
            [("t".to_string(), vec!["AccessExclusiveLock".to_string()])].into();
        let applied = |held_ms: u64, forced_ms: Option<u64>| Applied {
            duration: Duration::from_millis(held_ms),
            held: Duration::from_millis(held_ms),
            tables: [("t".to_string(), table.clone())].into(),
            statements: vec![StatementRun {
                duration: Duration::from_millis(held_ms),
                locks_after: locks.clone(),
                ..StatementRun::default()
            }],
            forced_failure_took: forced_ms.map(Duration::from_millis),
            ..Applied::default()
        };
        let hold = |at_zero: &Applied, at_n: &Applied| {
            holds(at_zero, at_n, &Needs::unknown(), &Sizes::default())[0].predicted
        };
        assert_eq!(
            hold(&applied(1200, Some(300)), &applied(1300, None)),
            Duration::from_millis(300)
        );
        assert_eq!(
            hold(&applied(1200, None), &applied(1300, None)),
            Duration::from_millis(1200)
        );
        assert_eq!(
            hold(&applied(1500, Some(1510)), &applied(1520, None)),
            Duration::from_millis(1500)
        );
    }
}

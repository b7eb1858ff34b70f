//! Rules between columns that no single column's values can keep: a
//! CHECK that exactly one of several columns is set
//! (`num_nonnulls(a, b, c) = 1`, `(a IS NULL) <> (b IS NULL)`). The
//! columns of such a group take turns: row `g` sets column `g % n` of the
//! group and leaves the others NULL, so every row keeps the rule and each
//! column is set on some rows (a migration that reads one of them meets
//! rows with it set).
//!
//! Rules that one choice of values per column keeps (`a IS NULL OR b IS
//! NOT NULL`, `(a IS NULL) = (b IS NULL)`) are left to the search of
//! [`super::fit::satisfy_checks`].

use super::catalogue::Table;

/// The groups of columns (by index) of which exactly one is set, from
/// the table's CHECKs; only nullable columns (a NOT NULL one is always
/// the one set, and the others never).
pub(super) fn exactly_one_groups(t: &Table) -> Vec<Vec<usize>> {
    let mut groups = Vec::new();
    for check in &t.checks {
        let Some(names) = exactly_one_of(&check.expr) else {
            continue;
        };
        let cols: Option<Vec<usize>> = names
            .iter()
            .map(|n| t.columns.iter().position(|c| c.name == *n))
            .collect();
        let Some(cols) = cols else {
            continue;
        };
        if cols.len() >= 2 && cols.iter().all(|&k| !t.columns[k].not_null()) {
            groups.push(cols);
        }
    }
    groups
}

/// The columns of a CHECK of the forms `(num_nonnulls(a, b, …) = 1)`,
/// `(num_nulls(a, b) = 1)` and `((a IS NULL) <> (b IS NULL))` (`IS NOT
/// NULL` on both sides alike), as `pg_get_constraintdef` spells them.
fn exactly_one_of(expr: &str) -> Option<Vec<String>> {
    let e = expr.trim();
    let e = e
        .strip_prefix('(')
        .and_then(|e| e.strip_suffix(')'))
        .unwrap_or(e);
    if let Some(args) = e
        .strip_prefix("num_nonnulls(")
        .and_then(|r| r.strip_suffix(") = 1"))
    {
        return names(args);
    }
    if let Some(args) = e
        .strip_prefix("num_nulls(")
        .and_then(|r| r.strip_suffix(") = 1"))
    {
        let n = names(args)?;
        return (n.len() == 2).then_some(n);
    }
    let (left, right) = e.split_once(" <> ")?;
    let side = |s: &str, test: &str| -> Option<String> {
        let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
        let name = inner.strip_suffix(test)?;
        plain(name)
    };
    for test in [" IS NULL", " IS NOT NULL"] {
        if let (Some(a), Some(b)) = (side(left, test), side(right, test)) {
            return Some(vec![a, b]);
        }
    }
    None
}

/// Column names separated by commas, each a plain or quoted identifier.
fn names(args: &str) -> Option<Vec<String>> {
    args.split(", ").map(plain).collect()
}

fn plain(s: &str) -> Option<String> {
    let s = s.trim();
    if let Some(q) = s.strip_prefix('"').and_then(|q| q.strip_suffix('"')) {
        return Some(q.replace("\"\"", "\""));
    }
    s.chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        .then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_rules_are_read_as_postgres_spells_them() {
        let v = |s: &[&str]| Some(s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            exactly_one_of("(num_nonnulls(station_id, region, sensor_id) = 1)"),
            v(&["station_id", "region", "sensor_id"])
        );
        assert_eq!(
            exactly_one_of("((below IS NULL) <> (above IS NULL))"),
            v(&["below", "above"])
        );
        assert_eq!(
            exactly_one_of("((\"Currency\" IS NOT NULL) <> (custom_id IS NOT NULL))"),
            v(&["Currency", "custom_id"])
        );
        assert_eq!(exactly_one_of("((a IS NULL) = (b IS NULL))"), None);
        assert_eq!(exactly_one_of("(num_nonnulls(a, (b + 1)) = 1)"), None);
        assert_eq!(exactly_one_of("((a IS NULL) OR (b IS NOT NULL))"), None);
    }
}

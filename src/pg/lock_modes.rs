//! PostgreSQL's table-level lock modes and which of them conflict, as the
//! manual's "Conflicting Lock Modes" table states them (pg_locks spelling).
//!
//! What blocks an app follows from what its statements need: a read takes
//! ACCESS SHARE (blocked only by ACCESS EXCLUSIVE), a `SELECT … FOR
//! UPDATE` ROW SHARE (blocked by EXCLUSIVE and ACCESS EXCLUSIVE), a write
//! ROW EXCLUSIVE (blocked by SHARE, SHARE ROW EXCLUSIVE, EXCLUSIVE and
//! ACCESS EXCLUSIVE). [`Needs`] records the modes each table is used with;
//! [`Needs::blocks`] says whether a migration's lock stands in the way.

use std::collections::{BTreeMap, BTreeSet};

/// The eight modes, weakest first.
pub const MODES: [&str; 8] = [
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
];

fn rank(mode: &str) -> Option<usize> {
    MODES.iter().position(|m| *m == mode)
}

/// Whether two modes conflict (symmetric).
pub fn conflicts(a: &str, b: &str) -> bool {
    // Row i lists, by rank, the modes mode i conflicts with.
    const TABLE: [[bool; 8]; 8] = {
        const F: bool = false;
        const T: bool = true;
        [
            [F, F, F, F, F, F, F, T],
            [F, F, F, F, F, F, T, T],
            [F, F, F, F, T, T, T, T],
            [F, F, F, T, T, T, T, T],
            [F, F, T, T, F, T, T, T],
            [F, F, T, T, T, T, T, T],
            [F, T, T, T, T, T, T, T],
            [T, T, T, T, T, T, T, T],
        ]
    };
    match (rank(a), rank(b)) {
        (Some(i), Some(j)) => TABLE[i][j],
        _ => false,
    }
}

/// The strongest of `modes`, for messages.
pub fn strongest<'a>(modes: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    modes.into_iter().max_by_key(|m| rank(m))
}

/// `AccessExclusiveLock` → `ACCESS EXCLUSIVE`, as DBAs read it.
pub fn sql_name(mode: &str) -> String {
    let bare = mode.strip_suffix("Lock").unwrap_or(mode);
    let mut out = String::new();
    for (i, ch) in bare.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push(' ');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

/// The table-level lock PostgreSQL's manual documents for a statement
/// that rewrites a table or builds an index, and what the statement is:
/// `("AccessExclusiveLock", "VACUUM FULL")`. For a statement outside a
/// transaction too brief for the lock sampler to see, once its rewrite or
/// index build has been measured (a new relfilenode): the lock it held is
/// then known from the manual, not guessed. None for anything else.
pub fn documented(sql: &str) -> Option<(&'static str, &'static str)> {
    // Words of the statement, comments and punctuation aside: enough to
    // tell the kinds apart (options in parentheses included).
    let code: String = sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    let words: Vec<String> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .take(12)
        .map(str::to_ascii_uppercase)
        .collect();
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let concurrently = w.contains(&"CONCURRENTLY");
    match w.as_slice() {
        ["VACUUM", rest @ ..] if rest.contains(&"FULL") => {
            Some(("AccessExclusiveLock", "VACUUM FULL"))
        }
        ["CLUSTER", ..] => Some(("AccessExclusiveLock", "CLUSTER")),
        ["REINDEX", ..] if concurrently => {
            Some(("ShareUpdateExclusiveLock", "REINDEX CONCURRENTLY"))
        }
        // Writes wait; the index itself is held ACCESS EXCLUSIVE.
        ["REINDEX", ..] => Some(("ShareLock", "REINDEX")),
        ["CREATE", "INDEX", ..] | ["CREATE", "UNIQUE", "INDEX", ..] if concurrently => {
            Some(("ShareUpdateExclusiveLock", "CREATE INDEX CONCURRENTLY"))
        }
        ["CREATE", "INDEX", ..] | ["CREATE", "UNIQUE", "INDEX", ..] => {
            Some(("ShareLock", "CREATE INDEX"))
        }
        ["REFRESH", "MATERIALIZED", "VIEW", ..] if concurrently => {
            Some(("ExclusiveLock", "REFRESH MATERIALIZED VIEW CONCURRENTLY"))
        }
        ["REFRESH", "MATERIALIZED", "VIEW", ..] => {
            Some(("AccessExclusiveLock", "REFRESH MATERIALIZED VIEW"))
        }
        // Every form of ALTER TABLE that rewrites a table or builds an
        // index for a constraint takes ACCESS EXCLUSIVE.
        ["ALTER", "TABLE", ..] => Some(("AccessExclusiveLock", "ALTER TABLE")),
        _ => None,
    }
}

/// The lock modes the running apps take per table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Needs {
    per_table: BTreeMap<String, BTreeSet<String>>,
    /// No app information: every table is assumed read and written.
    assume_all: bool,
}

impl Needs {
    /// Nothing is known of the apps: assume each table is read and written
    /// (the conservative answer).
    pub fn unknown() -> Needs {
        Needs {
            per_table: BTreeMap::new(),
            assume_all: true,
        }
    }

    pub fn add(&mut self, table: &str, mode: &str) {
        self.per_table
            .entry(table.to_string())
            .or_default()
            .insert(mode.to_string());
    }

    /// The app modes on `table` that `held` blocks.
    pub fn blocked_by(&self, table: &str, held: &str) -> Vec<String> {
        if self.assume_all {
            return ["AccessShareLock", "RowExclusiveLock"]
                .iter()
                .filter(|n| conflicts(held, n))
                .map(|n| n.to_string())
                .collect();
        }
        self.per_table
            .get(table)
            .map(|modes| {
                modes
                    .iter()
                    .filter(|n| conflicts(held, n))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether holding `held` on `table` makes some app statement wait.
    pub fn blocks(&self, table: &str, held: &str) -> bool {
        !self.blocked_by(table, held).is_empty()
    }

    /// "reads and writes", "reads", "writes" of `table`, for messages.
    pub fn describe(&self, table: &str, held: &str) -> String {
        let blocked = self.blocked_by(table, held);
        let reads = blocked.iter().any(|m| m == "AccessShareLock");
        let writes = blocked
            .iter()
            .any(|m| m == "RowExclusiveLock" || m == "RowShareLock");
        match (reads, writes) {
            (true, true) => "reads and writes".into(),
            (true, false) => "reads".into(),
            (false, true) => "writes".into(),
            _ => "statements".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manuals_conflict_table() {
        assert!(conflicts("AccessShareLock", "AccessExclusiveLock"));
        assert!(!conflicts("AccessShareLock", "ExclusiveLock"));
        assert!(conflicts("RowExclusiveLock", "ShareLock"));
        assert!(!conflicts("RowExclusiveLock", "RowExclusiveLock"));
        assert!(!conflicts("ShareUpdateExclusiveLock", "RowExclusiveLock"));
        assert!(conflicts(
            "ShareUpdateExclusiveLock",
            "ShareUpdateExclusiveLock"
        ));
        assert!(!conflicts("ShareLock", "ShareLock"));
        assert!(conflicts("ShareRowExclusiveLock", "ShareRowExclusiveLock"));
        for a in MODES {
            for b in MODES {
                assert_eq!(conflicts(a, b), conflicts(b, a), "{a} {b}");
            }
        }
    }

    #[test]
    fn what_blocks_follows_from_what_the_apps_take() {
        let mut n = Needs::default();
        n.add("t", "AccessShareLock");
        assert!(n.blocks("t", "AccessExclusiveLock"));
        assert!(!n.blocks("t", "ShareRowExclusiveLock"));
        assert!(!n.blocks("other", "AccessExclusiveLock"));
        n.add("t", "RowExclusiveLock");
        assert!(n.blocks("t", "ShareLock"));
        assert!(!n.blocks("t", "ShareUpdateExclusiveLock"));
        assert_eq!(n.describe("t", "AccessExclusiveLock"), "reads and writes");
        assert!(Needs::unknown().blocks("any", "ShareLock"));
        assert_eq!(sql_name("ShareRowExclusiveLock"), "SHARE ROW EXCLUSIVE");
    }

    #[test]
    fn documented_locks_of_rewriting_and_index_building_statements() {
        assert_eq!(
            documented("VACUUM FULL t"),
            Some(("AccessExclusiveLock", "VACUUM FULL"))
        );
        assert_eq!(
            documented("vacuum (full, analyze) s.t"),
            Some(("AccessExclusiveLock", "VACUUM FULL"))
        );
        assert_eq!(documented("VACUUM t"), None);
        assert_eq!(
            documented("-- why\nREINDEX TABLE t"),
            Some(("ShareLock", "REINDEX"))
        );
        assert_eq!(
            documented("REINDEX TABLE CONCURRENTLY t"),
            Some(("ShareUpdateExclusiveLock", "REINDEX CONCURRENTLY"))
        );
        assert_eq!(
            documented("create unique index if not exists i on t (a)"),
            Some(("ShareLock", "CREATE INDEX"))
        );
        assert_eq!(
            documented("CREATE INDEX CONCURRENTLY i ON t (a)"),
            Some(("ShareUpdateExclusiveLock", "CREATE INDEX CONCURRENTLY"))
        );
        assert_eq!(
            documented("CLUSTER t USING i"),
            Some(("AccessExclusiveLock", "CLUSTER"))
        );
        assert_eq!(documented("UPDATE t SET a = 1"), None);
    }
}

//! What a migration reaches: the tables whose rows its seeded rehearsal
//! needs.
//!
//! A project without apps is seeded by the catalogue generator, and
//! seeding every table of a real schema costs seconds (the catalogue
//! fixture's 40 tables of 10 000 rows: about 2.5 s on two sessions) while
//! a migration usually changes one or two. The empty path runs first and
//! says which tables the migration locked (its forced failure's
//! transaction, read before the failure is raised; outside a transaction
//! the measured apply's samples); with the tables its text names, those
//! are the tables whose rows its work depends on — as long as it only
//! changes definitions.
//! The generator adds the tables their foreign keys reference.
//!
//! Some work only rows set off, and an empty database cannot show it:
//! triggers, cascades and row-level checks fired by a statement that
//! changes or reads rows (`UPDATE`, `DELETE`, `INSERT`, `DO`, a
//! `SELECT` of a function…), and a project function a definition calls
//! on every row (a CHECK, a default, an index expression) whose body may
//! read other tables (it names one, runs dynamic SQL, calls another of
//! the project's functions, or is not SQL or PL/pgSQL). A migration with any of these reaches every table: all
//! of them are seeded, as they were before reach was measured. So is one
//! that failed on the empty database or whose statements could not be
//! told apart.

use std::collections::BTreeSet;

use crate::tables::UserTable;

/// The tables a migration's seeded rehearsal needs rows in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Every table, and why (one line).
    Everything(String),
    /// Only these (by [`UserTable::name`]; a partition by its root), and
    /// the tables they reference.
    Tables(BTreeSet<String>),
}

/// Statements that change definitions only: what they do to rows depends
/// on the rows of the tables they lock, which the empty path measures.
const DEFINITIONS: &[&str] = &[
    "CREATE",
    "ALTER",
    "DROP",
    "COMMENT",
    "GRANT",
    "REVOKE",
    "SET",
    "RESET",
    "BEGIN",
    "START",
    "COMMIT",
    "END",
    "SAVEPOINT",
    "RELEASE",
    "SECURITY",
    "REINDEX",
    "CLUSTER",
    "VACUUM",
    "ANALYZE",
    "REFRESH",
    "LOCK",
    "DISCARD",
    "NOTIFY",
    "LISTEN",
    "UNLISTEN",
];

/// Definitions that name a function without calling it: creating,
/// changing or dropping it, a trigger or a view that will call it later.
const NAMES_WITHOUT_CALLING: &[&str] = &[
    "FUNCTION",
    "PROCEDURE",
    "ROUTINE",
    "TRIGGER",
    "VIEW",
    "RULE",
    "POLICY",
    "AGGREGATE",
    "OPERATOR",
    "CAST",
];

/// The reach of a migration (`sql`) from the tables its apply on the empty
/// database at V{prev} touched (`touched`, by [`UserTable::name`]: verify
/// reads them from its evidence, `Applied::touched`; None
/// when it failed there), the tables at V{prev} and the names (lower case)
/// of the project's functions that may read a table (those at V{prev} and
/// after it).
pub fn of(
    sql: &str,
    touched: Option<&BTreeSet<String>>,
    tables: &[UserTable],
    functions: &BTreeSet<String>,
) -> Reach {
    let Some(touched) = touched else {
        return Reach::Everything("it failed on the empty database".into());
    };
    let split = crate::sql::split(sql);
    if !split.exact {
        return Reach::Everything("its statements could not be told apart".into());
    }
    for st in &split.statements {
        let words = leading_words(&st.text, 4);
        let first = words.first().map(String::as_str).unwrap_or_default();
        if !DEFINITIONS.contains(&first) {
            return Reach::Everything(format!(
                "its {first} statement (line {}) works on rows: what it sets off (triggers, cascades, functions) depends on every table's rows",
                st.line
            ));
        }
        if words
            .iter()
            .any(|w| NAMES_WITHOUT_CALLING.contains(&w.as_str()))
        {
            continue;
        }
        if let Some(f) = identifiers(&st.text).find(|w| functions.contains(w)) {
            return Reach::Everything(format!(
                "its statement at line {} calls {f}, a function of the project's that may read other tables, on every row",
                st.line
            ));
        }
    }
    let words: BTreeSet<String> = identifiers(sql).collect();
    let root = |name: &str| -> String {
        let mut name = name.to_string();
        // (A partition's parent is listed too; a cycle cannot happen, the
        // bound guards against a catalogue that says otherwise.)
        for _ in 0..tables.len() {
            match tables
                .iter()
                .find(|t| t.name == name)
                .and_then(|t| t.partition_of.clone())
            {
                Some(parent) => name = parent,
                None => break,
            }
        }
        name
    };
    let mut reached: BTreeSet<String> = touched.iter().map(|t| root(t)).collect();
    for t in tables {
        let relname = t.name.rsplit('.').next().unwrap_or(&t.name).to_lowercase();
        if words.contains(&relname) {
            reached.insert(root(&t.name));
        }
    }
    Reach::Tables(reached)
}

/// The first `n` words of a statement, upper case (`CREATE OR REPLACE
/// FUNCTION …` → CREATE, OR, REPLACE, FUNCTION).
fn leading_words(text: &str, n: usize) -> Vec<String> {
    text.trim_start_matches(|c: char| c == '(' || c.is_whitespace())
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .take(n)
        .map(str::to_uppercase)
        .collect()
}

/// The words of SQL text that could name a table or a function, lower
/// case (a superset: words in strings and comments count too).
pub(crate) fn identifiers(sql: &str) -> impl Iterator<Item = String> + '_ {
    sql.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::evidence::{Applied, TableWork};

    fn table(name: &str, partition_of: Option<&str>) -> UserTable {
        UserTable::for_tests(name, partition_of)
    }

    fn applied(locked: &[&str]) -> Applied {
        let mut a = Applied::default();
        for t in locked {
            a.tables.insert(
                t.to_string(),
                TableWork {
                    table: t.to_string(),
                    locks: vec!["AccessExclusiveLock".into()],
                    ..Default::default()
                },
            );
        }
        a.tables.insert("untouched".into(), TableWork::default());
        a
    }

    fn tables() -> Vec<UserTable> {
        vec![
            table("parcels", None),
            table("users", None),
            table("downloads", None),
            table("downloads_2026", Some("downloads")),
            table("untouched", None),
        ]
    }

    fn reach(sql: &str, locked: &[&str], functions: &[&str]) -> Reach {
        let functions = functions.iter().map(|f| f.to_string()).collect();
        of(
            sql,
            applied(locked).touched().as_ref(),
            &tables(),
            &functions,
        )
    }

    fn only(names: &[&str]) -> Reach {
        Reach::Tables(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn a_definition_reaches_the_tables_it_locks_or_names() {
        assert_eq!(
            reach(
                "ALTER TABLE parcels ADD COLUMN note text;",
                &["parcels"],
                &[]
            ),
            only(&["parcels"])
        );
        // Named but not locked (an index built outside a transaction that
        // no lock sample saw): still reached.
        assert_eq!(
            reach(
                "CREATE INDEX CONCURRENTLY u_name ON users (name);",
                &[],
                &[]
            ),
            only(&["users"])
        );
        // A partition stands for its partitioned table.
        assert_eq!(
            reach(
                "ALTER TABLE downloads_2026 ADD CHECK (n >= 0);",
                &["downloads_2026"],
                &[]
            ),
            only(&["downloads"])
        );
        // A new table that references nothing reaches nothing.
        assert_eq!(reach("CREATE TABLE jobs (id int);", &[], &[]), only(&[]));
    }

    #[test]
    fn a_statement_on_rows_reaches_every_table() {
        for sql in [
            "UPDATE parcels SET name = lower(name);",
            "DELETE FROM users WHERE id < 0;",
            "INSERT INTO parcels SELECT 1;",
            "WITH x AS (SELECT 1) UPDATE parcels SET id = id;",
            "DO $$ BEGIN PERFORM 1; END $$;",
            "SELECT backfill();",
            "ALTER TABLE parcels ADD COLUMN n int; UPDATE parcels SET n = 0;",
        ] {
            assert!(
                matches!(reach(sql, &["parcels"], &[]), Reach::Everything(_)),
                "{sql}"
            );
        }
    }

    #[test]
    fn a_definition_calling_a_project_function_reaches_every_table() {
        let sql = "ALTER TABLE parcels ADD CONSTRAINT known CHECK (owner_exists(owner_id));";
        assert!(matches!(
            reach(sql, &["parcels"], &["owner_exists"]),
            Reach::Everything(why) if why.contains("owner_exists")
        ));
        // Creating the function, or a trigger that calls it later, calls
        // nothing now.
        let sql = "CREATE OR REPLACE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;\n\
                   CREATE TRIGGER parcels_touch BEFORE UPDATE ON parcels FOR EACH ROW EXECUTE FUNCTION touch();";
        assert_eq!(reach(sql, &["parcels"], &["touch"]), only(&["parcels"]));
    }

    #[test]
    fn a_failed_or_unsplittable_migration_reaches_every_table() {
        let mut failed = applied(&["parcels"]);
        failed.error = Some("boom".into());
        assert!(matches!(
            of(
                "ALTER TABLE parcels ADD COLUMN n int;",
                failed.touched().as_ref(),
                &tables(),
                &BTreeSet::new()
            ),
            Reach::Everything(_)
        ));
        // A file the grammar cannot split is one unit: every table.
        let touched = BTreeSet::from(["parcels".to_string()]);
        assert!(matches!(
            of(
                "ALTER TABLE parcels ADD COLUMN n int; $$ unterminated",
                Some(&touched),
                &tables(),
                &BTreeSet::new()
            ),
            Reach::Everything(_)
        ));
    }
}

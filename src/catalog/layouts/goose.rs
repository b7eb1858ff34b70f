//! goose: `{version}_{name}.sql` with annotations: only the
//! `-- +goose Up` section runs (the `-- +goose Down` one never does);
//! `-- +goose StatementBegin` / `StatementEnd` wrap bodies holding `;`
//! (rollsafe's splitter keeps them whole anyway: the markers are comments);
//! `-- +goose NO TRANSACTION` anywhere in the file runs it outside a
//! transaction. goose refuses a file without an Up annotation; so does
//! rollsafe. Between `-- +goose ENVSUB ON` and `OFF`, goose replaces
//! `${NAME}` (and `${NAME:-default}`, `${NAME-default}`) with the
//! environment's value; rollsafe takes the values from `--placeholder
//! NAME=value` (a rehearsal's environment is not production's) and refuses
//! one without a value or default by name.
//!
//! Go migrations (`<version>_<name>.go` calling goose's `AddMigration…`)
//! are listed in their place, never run ([`Step::not_runnable`]); a
//! folder holding only those is goose's as well.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{
    comment_body, digits_and_name, keep_lines, sort_numeric, unreadable, Folder, HistoryRules,
    HistoryWrite, LayoutReader, ReadOptions, RowWrite, Step, Value,
};
use crate::catalog::Execution;
use crate::catalog::{CatalogError, Layout, Migration};

pub struct Goose;

/// `goose_db_version(id, version_id, is_applied, tstamp)`: a row per
/// apply (and per rollback, `is_applied` false), and the row 0 goose
/// writes when it creates the table; a version's latest row says whether
/// it is applied.
static HISTORY: HistoryRules = HistoryRules {
    write: Some(HistoryWrite {
        create: "CREATE TABLE IF NOT EXISTS goose_db_version (
                 id serial NOT NULL PRIMARY KEY,
                 version_id bigint NOT NULL,
                 is_applied boolean NOT NULL,
                 tstamp timestamp NULL DEFAULT now());
             INSERT INTO goose_db_version (version_id, is_applied)
                 SELECT 0, true WHERE NOT EXISTS (SELECT 1 FROM goose_db_version)",
        record,
    }),
    ..HistoryRules::new(
        "goose_db_version",
        "SELECT v, t, NULL::text FROM (SELECT DISTINCT ON (version_id) version_id::text AS v,
                tstamp::text AS t, is_applied AS a FROM goose_db_version
          WHERE version_id > 0 ORDER BY version_id, id DESC) latest WHERE a",
    )
};

fn record(m: &Migration, _: Duration) -> Vec<RowWrite> {
    let version: i64 = m.key.parse().unwrap_or_default();
    vec![RowWrite::new(
        "INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)",
        vec![Value::BigInt(version)],
    )]
}

/// The annotation of a `-- +goose …` line, upper-cased: `UP`, `DOWN`,
/// `NO TRANSACTION`, `STATEMENTBEGIN` …
fn annotation(line: &str) -> Option<String> {
    let rest = comment_body(line)?.strip_prefix("+goose")?;
    Some(
        rest.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_uppercase(),
    )
}

/// The file carries goose's annotations.
pub fn is_goose(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes)
        .lines()
        .any(|l| annotation(l).as_deref() == Some("UP"))
}

impl LayoutReader for Goose {
    fn companion(&self, file: &str) -> Option<&'static str> {
        match file.ends_with(".go") {
            true if file.ends_with("_test.go") => Some("Go test file(s)"),
            true => Some("Go file(s) that are no goose migration (not <version>_<name>.go)"),
            false => None,
        }
    }

    fn pattern(&self) -> &'static str {
        "<version>_<name>.sql with -- +goose Up"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        let mut claimed = folder.numbered_sql_marked(is_goose);
        claimed.extend(
            go_migrations(folder)
                .into_iter()
                .map(|s| s.file)
                .filter(|f| folder.files.get(f).is_some_and(|b| registers_with_goose(b))),
        );
        claimed
    }

    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let mut steps = Vec::new();
        for (file, bytes) in folder.top_level_sql() {
            let (version, name) = file
                .strip_suffix(".sql")
                .and_then(digits_and_name)
                .filter(|(v, _)| v.parse::<i64>().is_ok())
                .ok_or_else(|| unreadable(file, Layout::Goose, options))?;
            let text = super::utf8(file, bytes.to_vec())?;
            let up = up_section(file, &text)?;
            let (sql, no_transaction) = (
                substitute_env(file, &up.sql, &up.envsub, &options.placeholders)?,
                up.no_transaction,
            );
            let version: i64 = version.parse().expect("filtered above");
            steps.push(Step {
                key: version.to_string(),
                label: version.to_string(),
                name: name.to_string(),
                file: file.to_string(),
                sql,
                execution: if no_transaction {
                    Execution::Autocommit
                } else {
                    Execution::Transaction
                },
                ..Step::default()
            });
        }
        steps.extend(go_migrations(folder));
        sort_numeric(&mut steps);
        Ok(steps)
    }
}

/// A Go file that registers a goose migration: it imports goose and
/// calls one of its `AddMigration…`/`AddNamedMigration…` functions (goose
/// takes the version from the file's name). One is enough to say a folder
/// of Go migrations only is goose's; another tool's folder holds Go code
/// of its own (an `embed.go`), never these.
fn registers_with_goose(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.contains("github.com/pressly/goose")
        && (text.contains(".AddMigration") || text.contains(".AddNamedMigration"))
}

/// goose's Go migrations (`<version>_<name>.go`, registered with
/// `goose.AddMigration…`): listed in their place, with why rollsafe cannot
/// run them.
fn go_migrations(folder: &Folder) -> Vec<Step> {
    folder
        .files
        .keys()
        .filter(|p| !p.contains('/') && !p.ends_with("_test.go"))
        .filter_map(|file| {
            let (version, name) = file.strip_suffix(".go").and_then(digits_and_name)?;
            let version: i64 = version.parse().ok()?;
            Some(Step {
                key: version.to_string(),
                label: version.to_string(),
                name: name.to_string(),
                file: file.clone(),
                not_runnable: Some(
                    "is a goose Go migration: its code runs inside the project's own goose binary, and rollsafe runs SQL only".into(),
                ),
                ..Step::default()
            })
        })
        .collect()
}

/// A goose file's Up section as rollsafe runs it.
struct UpSection {
    /// The Up section, other lines blanked.
    sql: String,
    /// The file says `NO TRANSACTION`.
    no_transaction: bool,
    /// Indexes of the lines inside `ENVSUB ON` … `ENVSUB OFF`.
    envsub: BTreeSet<usize>,
}

fn up_section(file: &str, text: &str) -> Result<UpSection, CatalogError> {
    let mut in_up = false;
    let mut seen_up = false;
    let mut no_transaction = false;
    let mut envsub_on = false;
    let mut envsub = BTreeSet::new();
    let sql = keep_lines(text, |i, line| match annotation(line).as_deref() {
        Some("UP") => {
            (in_up, seen_up) = (true, true);
            false
        }
        Some("DOWN") => {
            in_up = false;
            false
        }
        Some("NO TRANSACTION") => {
            no_transaction = true;
            false
        }
        Some("ENVSUB ON") => {
            envsub_on = true;
            false
        }
        Some("ENVSUB OFF") => {
            envsub_on = false;
            false
        }
        Some(_) => false,
        None => {
            if in_up && envsub_on {
                envsub.insert(i);
            }
            in_up
        }
    });
    if !seen_up {
        return Err(CatalogError::Unreadable {
            file: file.to_string(),
            why: "has no `-- +goose Up` annotation, and goose refuses such a file; mark where the up migration starts".into(),
        });
    }
    Ok(UpSection {
        sql,
        no_transaction,
        envsub,
    })
}

/// `sql` with the `${NAME}`, `${NAME:-default}` and `${NAME-default}` on
/// its ENVSUB lines replaced from `values` (`--placeholder`), else by the
/// default; one with neither is refused by name and line.
fn substitute_env(
    file: &str,
    sql: &str,
    envsub: &BTreeSet<usize>,
    values: &BTreeMap<String, String>,
) -> Result<String, CatalogError> {
    if envsub.is_empty() || !sql.contains("${") {
        return Ok(sql.to_string());
    }
    let mut out = String::with_capacity(sql.len());
    for (i, line) in sql.split_inclusive('\n').enumerate() {
        if !envsub.contains(&i) {
            out.push_str(line);
            continue;
        }
        out.push_str(&super::fill_placeholders(line, |inner, _| {
            let (name, default) = match inner.split_once(":-").or_else(|| inner.split_once('-')) {
                Some((n, d)) => (n, Some(d)),
                None => (inner, None),
            };
            values
                .get(name)
                .map(String::as_str)
                .or(default)
                .map(str::to_string)
                .ok_or_else(|| CatalogError::Unreadable {
                    file: file.to_string(),
                    why: format!(
                        "line {}: `${{{name}}}` is read from the environment by goose (ENVSUB ON) and has no value here; pass --placeholder {name}=<value> (the value production's environment gives it)",
                        i + 1
                    ),
                })
        })?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_up_section_runs_and_no_transaction_is_read() {
        let text = "-- +goose NO TRANSACTION\n-- +goose Up\n-- +goose StatementBegin\nCREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql;\n-- +goose StatementEnd\n-- +goose Down\nDROP FUNCTION f;\n";
        let UpSection {
            sql,
            no_transaction: no_tx,
            ..
        } = up_section("1_f.sql", text).unwrap();
        assert!(no_tx);
        assert_eq!(sql.lines().count(), text.lines().count());
        assert!(sql.contains("CREATE FUNCTION") && !sql.contains("DROP"));
        assert_eq!(sql.lines().nth(3).unwrap(), text.lines().nth(3).unwrap());
        assert!(up_section("1_f.sql", "SELECT 1;").is_err());
    }

    #[test]
    fn envsub_regions_take_placeholders_and_refuse_a_missing_one() {
        let text = "-- +goose Up\n-- +goose ENVSUB ON\nGRANT SELECT ON t TO ${READER};\nCOMMENT ON TABLE t IS '${NOTE:-none}';\n-- +goose ENVSUB OFF\nSELECT '${LITERAL}';\n";
        let up = up_section("1_g.sql", text).unwrap();
        let values = BTreeMap::from([("READER".to_string(), "app_ro".to_string())]);
        let sql = substitute_env("1_g.sql", &up.sql, &up.envsub, &values).unwrap();
        assert!(
            sql.contains("TO app_ro;")
                && sql.contains("IS 'none';")
                && sql.contains("'${LITERAL}'"),
            "{sql}"
        );
        let err = substitute_env("1_g.sql", &up.sql, &up.envsub, &BTreeMap::new()).unwrap_err();
        assert_eq!(err.to_string(), "1_g.sql: line 3: `${READER}` is read from the environment by goose (ENVSUB ON) and has no value here; pass --placeholder READER=<value> (the value production's environment gives it)");
    }
}

//! goose: `{version}_{name}.sql` with annotations: only the
//! `-- +goose Up` section runs (the `-- +goose Down` one never does);
//! `-- +goose StatementBegin` / `StatementEnd` wrap bodies holding `;`
//! (rollsafe's splitter keeps them whole anyway: the markers are comments);
//! `-- +goose NO TRANSACTION` anywhere in the file runs it outside a
//! transaction. goose refuses a file without an Up annotation; so does
//! rollsafe.

use super::{
    comment_body, digits_and_name, keep_lines, sort_numeric, unreadable, Folder, LayoutReader,
    ReadOptions, Step,
};
use crate::catalog::{CatalogError, Layout};

pub struct Goose;

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
    fn pattern(&self) -> &'static str {
        "<version>_<name>.sql with -- +goose Up"
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        folder.numbered_sql_marked(is_goose)
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
            let (sql, no_transaction) = up_section(file, &text)?;
            let version: i64 = version.parse().expect("filtered above");
            steps.push(Step {
                key: version.to_string(),
                label: version.to_string(),
                name: name.to_string(),
                file: file.to_string(),
                sql,
                no_transaction,
                ..Step::default()
            });
        }
        sort_numeric(&mut steps);
        Ok(steps)
    }
}

/// The Up section (other lines blanked) and whether the file says
/// `NO TRANSACTION`.
fn up_section(file: &str, text: &str) -> Result<(String, bool), CatalogError> {
    let mut in_up = false;
    let mut seen_up = false;
    let mut no_transaction = false;
    let sql = keep_lines(text, |_, line| match annotation(line).as_deref() {
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
        Some(_) => false,
        None => in_up,
    });
    if !seen_up {
        return Err(CatalogError::Unreadable {
            file: file.to_string(),
            why: "has no `-- +goose Up` annotation, and goose refuses such a file; mark where the up migration starts".into(),
        });
    }
    Ok((sql, no_transaction))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_up_section_runs_and_no_transaction_is_read() {
        let text = "-- +goose NO TRANSACTION\n-- +goose Up\n-- +goose StatementBegin\nCREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql;\n-- +goose StatementEnd\n-- +goose Down\nDROP FUNCTION f;\n";
        let (sql, no_tx) = up_section("1_f.sql", text).unwrap();
        assert!(no_tx);
        assert_eq!(sql.lines().count(), text.lines().count());
        assert!(sql.contains("CREATE FUNCTION") && !sql.contains("DROP"));
        assert_eq!(sql.lines().nth(3).unwrap(), text.lines().nth(3).unwrap());
        assert!(up_section("1_f.sql", "SELECT 1;").is_err());
    }
}

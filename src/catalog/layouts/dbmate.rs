//! dbmate: `{version}_{name}.sql`, ordered by file name, with
//! `-- migrate:up` and `-- migrate:down` sections; only the up sections
//! run (a file may hold several since 2025). `-- migrate:up
//! transaction:false` runs the file outside a transaction (rollsafe keeps
//! one mode per file: any up section without a transaction makes the whole
//! file run without one).

use super::{
    comment_body, digits_and_name, keep_lines, unreadable, Folder, LayoutReader, ReadOptions, Step,
};
use crate::catalog::{CatalogError, Layout};

pub struct Dbmate;

/// `-- migrate:up …` / `-- migrate:down …`: (true for up, its options).
fn section(line: &str) -> Option<(bool, &str)> {
    let rest = comment_body(line)?.strip_prefix("migrate:")?;
    if let Some(options) = rest.strip_prefix("up") {
        return Some((true, options));
    }
    rest.strip_prefix("down").map(|o| (false, o))
}

pub fn is_dbmate(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes)
        .lines()
        .any(|l| section(l).is_some_and(|(up, _)| up))
}

impl LayoutReader for Dbmate {
    fn pattern(&self) -> &'static str {
        "<version>_<name>.sql with -- migrate:up"
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        folder.numbered_sql_marked(is_dbmate)
    }

    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        // top_level_sql is by file name: dbmate's order.
        let mut steps = Vec::new();
        for (file, bytes) in folder.top_level_sql() {
            let (version, name) = file
                .strip_suffix(".sql")
                .and_then(digits_and_name)
                .ok_or_else(|| unreadable(file, Layout::Dbmate, options))?;
            let text = super::utf8(file, bytes.to_vec())?;
            let (sql, no_transaction) = up_sections(file, &text)?;
            steps.push(Step {
                key: version.to_string(),
                label: version.to_string(),
                name: name.to_string(),
                file: file.to_string(),
                sql,
                no_transaction,
            });
        }
        Ok(steps)
    }
}

fn up_sections(file: &str, text: &str) -> Result<(String, bool), CatalogError> {
    let mut in_up = false;
    let mut seen_up = false;
    let mut no_transaction = false;
    let sql = keep_lines(text, |_, line| match section(line) {
        Some((true, options)) => {
            (in_up, seen_up) = (true, true);
            no_transaction |= options.split_whitespace().any(|o| o == "transaction:false");
            false
        }
        Some((false, _)) => {
            in_up = false;
            false
        }
        None => in_up,
    });
    if !seen_up {
        return Err(CatalogError::Unreadable {
            file: file.to_string(),
            why: "has no `-- migrate:up` section, so dbmate would run nothing of it; mark where the up migration starts".into(),
        });
    }
    Ok((sql, no_transaction))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_sections_only_and_transaction_false() {
        let text = "-- migrate:up transaction:false\nCREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (a);\n-- migrate:down\nDROP INDEX i;\n-- migrate:up\nSELECT 2;\n";
        let (sql, no_tx) = up_sections("1_i.sql", text).unwrap();
        assert!(no_tx);
        assert!(sql.contains("CONCURRENTLY") && sql.contains("SELECT 2") && !sql.contains("DROP"));
        assert_eq!(sql.lines().count(), text.lines().count());
    }
}

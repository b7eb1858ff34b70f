//! Atlas: `{version}.sql` or `{version}_{name}.sql` beside `atlas.sum`,
//! ordered by file name. `atlas.sum` is Atlas's integrity file: its first
//! line `h1:<sum>` covers the lines after it, one per file, `<file>
//! h1:<hash>`, where each hash is the base64 SHA-256 of every file name and
//! content up to and including that file (Atlas's `NewHashFile`). A folder
//! whose files disagree with it is one Atlas itself refuses to run, and so
//! does rollsafe, naming the file. Directives sit in the file's header and
//! count only when a blank line separates the header from the statements:
//! `-- atlas:txmode none` runs the file outside a transaction;
//! `-- atlas:sum ignore` keeps the file's content out of the sum.

use base64::Engine;
use sha2::{Digest, Sha256};

use super::{
    comment_body, unreadable, Folder, HistoryRules, LayoutReader, Nolint, ReadOptions, Step,
};
use crate::catalog::Execution;
use crate::catalog::{CatalogError, Layout};

pub struct Atlas;

/// `atlas_schema_revisions.atlas_schema_revisions`, read only: a revision
/// counts once all its statements applied; its `hash` is the file's
/// `atlas.sum` hash, which covers every file before it too.
static HISTORY: HistoryRules = HistoryRules {
    divergent_note: Some("Atlas's hash in atlas.sum covers this file and every file before it, so this file or an earlier one was edited"),
    ..HistoryRules::new(
        "atlas_schema_revisions.atlas_schema_revisions",
        "SELECT version::text, executed_at::text, hash FROM atlas_schema_revisions.atlas_schema_revisions
          WHERE applied = total",
    )
};

pub const SUM_FILE: &str = "atlas.sum";

/// The other tools' layouts Atlas writes (`--dir-format`): their files
/// beside `atlas.sum` are that tool's folder.
pub const FORMATS: [Layout; 4] = [
    Layout::GolangMigrate,
    Layout::Goose,
    Layout::Flyway,
    Layout::Dbmate,
];

/// `{version}[_{name}]` of an Atlas file name: the version is everything
/// before the first `_`.
fn version_and_name(file: &str) -> Option<(&str, &str)> {
    let stem = file.strip_suffix(".sql")?;
    let (version, name) = stem.split_once('_').unwrap_or((stem, ""));
    (!version.is_empty() && version.bytes().all(|b| b.is_ascii_digit())).then_some((version, name))
}

/// The `atlas:` directives of the file's header (comment lines before the
/// first blank line; none when no blank line follows them).
fn header_directives(text: &str) -> Vec<String> {
    let Some((header, _)) = text.split_once("\n\n") else {
        return Vec::new();
    };
    let lines: Vec<&str> = header.lines().collect();
    if !lines.iter().all(|l| l.trim_start().starts_with("--")) {
        return Vec::new();
    }
    lines
        .iter()
        .filter_map(|l| comment_body(l)?.strip_prefix("atlas:"))
        .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

impl LayoutReader for Atlas {
    fn pattern(&self) -> &'static str {
        "<version>[_<name>].sql with atlas.sum"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        if folder.has(SUM_FILE) {
            return vec![SUM_FILE.to_string()];
        }
        // `20240313233558.sql`: no other layout names a file by its version
        // alone, but dbmate takes it (`^(\d+).*\.sql$`) and says so with its
        // `-- migrate:up`, goose with `-- +goose Up`.
        folder
            .top_level_sql()
            .filter(|(f, b)| {
                version_and_name(f).is_some_and(|(_, n)| n.is_empty())
                    && !super::dbmate::is_dbmate(b)
                    && !super::goose::is_goose(b)
            })
            .map(|(f, _)| f.to_string())
            .collect()
    }

    fn read(&self, folder: &Folder, options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let mut steps = Vec::new();
        for (file, bytes) in folder.top_level_sql() {
            let (version, name) =
                version_and_name(file).ok_or_else(|| unreadable(file, Layout::Atlas, options))?;
            let sql = super::utf8(file, bytes.to_vec())?;
            steps.push(Step {
                key: version.to_string(),
                label: version.to_string(),
                name: name.to_string(),
                file: file.to_string(),
                // Atlas's `txmode none`: its executor runs the statements one by
                // one without a transaction.
                execution: if header_directives(&sql).iter().any(|d| d == "txmode none") {
                    Execution::Autocommit
                } else {
                    Execution::Transaction
                },
                nolint: nolint(&sql),
                sql,
                ..Step::default()
            });
        }
        check_sum(folder, &mut steps)?;
        Ok(steps)
    }
}

/// The words after `atlas:nolint` on a comment line (`-- atlas:nolint
/// DS103 destructive` → [DS103, destructive]; bare: empty); None for
/// any other line.
fn nolint_rules(line: &str) -> Option<Vec<String>> {
    let rest = comment_body(line)?.strip_prefix("atlas:nolint")?;
    if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
        return None;
    }
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// The file's `atlas:nolint` directives, as Atlas's `nolintRules` reads
/// them: the header's cover every statement; a comment line between two
/// statements covers the statement after it.
fn nolint(sql: &str) -> Nolint {
    let mut file: Option<Vec<String>> = None;
    for d in header_directives(sql) {
        if let Some(rules) = nolint_rules(&format!("-- atlas:{d}")) {
            match (&mut file, rules.is_empty()) {
                (_, true) => file = Some(Vec::new()),
                (Some(all), false) if all.is_empty() => {}
                (Some(some), false) => some.extend(rules),
                (None, false) => file = Some(rules),
            }
        }
    }
    let split = crate::sql::split(sql);
    let mut statements = Vec::new();
    // The header's lines are the file's, not the first statement's.
    let mut previous_end = match file {
        Some(_) => sql.find("\n\n").map_or(0, |i| i + 2),
        None => 0,
    };
    for (i, st) in split.statements.iter().enumerate() {
        let before = sql.get(previous_end..st.start).unwrap_or_default();
        for rules in before.lines().filter_map(nolint_rules) {
            statements.push((i, rules));
        }
        previous_end = st.end;
    }
    Nolint { file, statements }
}

/// Compares the files with `atlas.sum` as `atlas migrate apply` does, and
/// keeps each file's hash as its checksum: the hash Atlas records for it in
/// `atlas_schema_revisions` (`SumByName`).
fn check_sum(folder: &Folder, steps: &mut [Step]) -> Result<(), CatalogError> {
    let refused = |file: &str, why: String| CatalogError::Unreadable {
        file: file.to_string(),
        why,
    };
    let Some(sum) = folder.text(SUM_FILE)? else {
        return Err(refused(
            SUM_FILE,
            "is missing, and Atlas refuses a migration folder without it; run `atlas migrate hash` and commit the file".into(),
        ));
    };
    let (header, recorded) = parse_sum(&sum);
    let mut running = Sha256::new();
    let mut computed = Vec::new();
    for step in steps.iter_mut() {
        running.update(step.file.as_bytes());
        if !header_directives(&step.sql)
            .iter()
            .any(|d| d == "sum ignore")
        {
            running.update(step.sql.as_bytes());
        }
        let hash = base64::engine::general_purpose::STANDARD.encode(running.clone().finalize());
        step.checksum = Some(hash.clone());
        computed.push((step.file.clone(), hash));
    }
    for (file, hash) in &computed {
        match recorded.iter().find(|(n, _)| n == file) {
            None => return Err(refused(file, "is not in atlas.sum, so Atlas refuses the folder (checksum mismatch); run `atlas migrate hash` after reviewing it".into())),
            Some((_, h)) if h != hash => return Err(refused(file, "disagrees with its hash in atlas.sum (the file, or one before it, was edited after `atlas migrate hash`), so Atlas itself refuses to run this folder; restore the file, or run `atlas migrate hash` if the edit is meant".into())),
            Some(_) => {}
        }
    }
    if let Some((gone, _)) = recorded
        .iter()
        .find(|(n, _)| !computed.iter().any(|(f, _)| f == n))
    {
        return Err(refused(SUM_FILE, format!("lists {gone}, which is not in the folder, so Atlas refuses it; restore the file or run `atlas migrate hash`")));
    }
    check_total(&header, &recorded)
}

/// `atlas.sum` beside another tool's files (Atlas's `--dir-format`): the
/// files it lists, in its order, are the ones the format's directory
/// hashed (Atlas's `NewHashFile` over the format's `Files()`: for
/// golang-migrate its `*.up.sql` in file-name order, with or without the
/// down files depending on Atlas's version), so each must be there and
/// hash as recorded, and every migration the tool runs must be listed.
/// A folder that fails this is one `atlas migrate validate` refuses.
pub fn check_format_sum(folder: &Folder, steps: &[Step]) -> Result<(), CatalogError> {
    let refused = |file: &str, why: String| CatalogError::Unreadable {
        file: file.to_string(),
        why,
    };
    let sum = folder.text(SUM_FILE)?.unwrap_or_default();
    let (header, recorded) = parse_sum(&sum);
    check_total(&header, &recorded)?;
    let mut running = Sha256::new();
    for (file, hash) in &recorded {
        let Some(text) = folder.text(file)? else {
            return Err(refused(SUM_FILE, format!("lists {file}, which is not in the folder, so Atlas refuses it; restore the file or run `atlas migrate hash`")));
        };
        running.update(file.as_bytes());
        if !header_directives(&text).iter().any(|d| d == "sum ignore") {
            running.update(text.as_bytes());
        }
        let computed = base64::engine::general_purpose::STANDARD.encode(running.clone().finalize());
        if &computed != hash {
            return Err(refused(file, "disagrees with its hash in atlas.sum (the file, or one before it, was edited after `atlas migrate hash`), so Atlas refuses this folder; restore the file, or run `atlas migrate hash` if the edit is meant".into()));
        }
    }
    if let Some(step) = steps
        .iter()
        .find(|s| !recorded.iter().any(|(f, _)| f == &s.file))
    {
        return Err(refused(&step.file, "is not in atlas.sum, so `atlas migrate validate` refuses the folder; run `atlas migrate hash` after reviewing it".into()));
    }
    Ok(())
}

/// `atlas.sum`'s first line and its (file, hash) lines.
fn parse_sum(sum: &str) -> (String, Vec<(String, String)>) {
    let mut lines = sum.lines();
    let header = lines.next().unwrap_or("").trim().to_string();
    let recorded = lines
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let (name, hash) = l.split_once("h1:")?;
            Some((name.trim().to_string(), hash.trim().to_string()))
        })
        .collect();
    (header, recorded)
}

/// The first line sums the others, as Atlas checks it.
fn check_total(header: &str, recorded: &[(String, String)]) -> Result<(), CatalogError> {
    let mut total = Sha256::new();
    for (n, h) in recorded {
        total.update(n.as_bytes());
        total.update(h.as_bytes());
    }
    let total = base64::engine::general_purpose::STANDARD.encode(total.finalize());
    if header.strip_prefix("h1:") != Some(total.as_str()) {
        return Err(CatalogError::Unreadable {
            file: SUM_FILE.to_string(),
            why: "has a first line that does not sum its other lines (edited by hand?), so Atlas refuses it; run `atlas migrate hash`".into(),
        });
    }
    Ok(())
}

/// `atlas.sum` for `files` (name, content) in Atlas's order: what
/// `atlas migrate hash` writes (for tests and fixtures).
pub fn sum_file(files: &[(&str, &str)]) -> String {
    let mut running = Sha256::new();
    let mut lines = Vec::new();
    let mut total = Sha256::new();
    for (name, content) in files {
        running.update(name.as_bytes());
        running.update(content.as_bytes());
        let hash = base64::engine::general_purpose::STANDARD.encode(running.clone().finalize());
        total.update(name.as_bytes());
        total.update(hash.as_bytes());
        lines.push(format!("{name} h1:{hash}\n"));
    }
    format!(
        "h1:{}\n{}",
        base64::engine::general_purpose::STANDARD.encode(total.finalize()),
        lines.concat()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txmode_needs_its_blank_line() {
        assert_eq!(
            header_directives("-- atlas:txmode none\n\nCREATE INDEX CONCURRENTLY i ON t (a);"),
            ["txmode none"]
        );
        assert!(
            header_directives("-- atlas:txmode none\nCREATE INDEX CONCURRENTLY i ON t (a);")
                .is_empty()
        );
        assert!(
            header_directives("CREATE TABLE t ();\n-- atlas:txmode none\n\nSELECT 1;").is_empty()
        );
    }

    #[test]
    fn nolint_in_the_header_and_above_a_statement() {
        let n = nolint("-- atlas:nolint destructive\n\nDROP TABLE a;\n-- keep it\n-- atlas:nolint PG101\nCREATE INDEX i ON t (a);\nDROP TABLE b;\n");
        assert_eq!(n.file, Some(vec!["destructive".to_string()]));
        assert_eq!(n.statements, [(1, vec!["PG101".to_string()])]);
        assert!(n.silences(Some(2), "ban-drop-table"));
        assert!(n.silences(Some(1), "require-concurrent-index-creation"));
        assert!(!n.silences(Some(2), "require-concurrent-index-creation"));
        let n = nolint("-- atlas:nolint\n\nDROP TABLE a;\n");
        assert!(n.silences(None, "anything"));
        let n = nolint("CREATE TABLE t (a int);\n-- atlas:nolint\nALTER TABLE t DROP COLUMN a;\n-- atlas:nolintx\nDROP TABLE t;\n");
        assert!(n.file.is_none() && n.silences(Some(1), "ban-drop-column"));
        assert!(!n.silences(Some(2), "ban-drop-table") && !n.silences(Some(0), "x"));
    }

    #[test]
    fn the_sum_is_checked_file_by_file() {
        let files = [
            ("1_a.sql", "CREATE TABLE a ();\n"),
            ("2_b.sql", "CREATE TABLE b ();\n"),
        ];
        let mut folder = Folder::default();
        for (n, c) in files {
            folder.files.insert(n.into(), c.as_bytes().to_vec());
        }
        folder
            .files
            .insert(SUM_FILE.into(), sum_file(&files).into_bytes());
        assert_eq!(
            Atlas.read(&folder, &ReadOptions::default()).unwrap().len(),
            2
        );
        folder
            .files
            .insert("2_b.sql".into(), b"CREATE TABLE b (x int);\n".to_vec());
        let err = Atlas
            .read(&folder, &ReadOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("2_b.sql: disagrees with its hash in atlas.sum"),
            "{err}"
        );
    }
}

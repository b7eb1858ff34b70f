//! Liquibase formatted SQL: `.sql` files whose first non-blank line is
//! `--liquibase formatted sql`, each cut into changesets by `--changeset
//! author:id [attributes]` lines, read as Liquibase's
//! `AbstractFormattedChangeLogParser` reads them (its regular expressions,
//! case-insensitive, matched against whole lines):
//!
//! - A **changeset is a migration**: labelled and keyed as Liquibase shows
//!   and records it, `<file>::<id>::<author>` (`<file>` the path in the
//!   folder, or the changeset's or header's `logicalFilePath`). Its SQL is
//!   every line up to the next `--changeset` line, except the lines the
//!   parser takes for itself, which are blanked so line numbers stay the
//!   file's: `--rollback …` and `/* liquibase rollback … */` blocks (never
//!   run on update), `--comment:`, `--validCheckSum`, `--preconditions` and
//!   `--precondition-…`, `--property`, and `--ignoreLines:start…end` or
//!   `--ignoreLines:<n>`. Lines before the first changeset are not run. A
//!   changeset with no SQL is refused, as Liquibase refuses it.
//! - How it is sent: in a transaction unless `runInTransaction:false`;
//!   outside one, statement by statement as Liquibase splits it
//!   ([`Execution::Autocommit`]), or, with `splitStatements:false`, as one
//!   string ([`Execution::SimpleQuery`]). A line that is only the
//!   changeset's `endDelimiter` (or `/` or `GO`, Liquibase's own) ends a
//!   statement: it reads as `;`.
//! - Skipped as Liquibase skips them on PostgreSQL: `dbms:` lists that
//!   exclude `postgresql`, `ignore:true`.
//! - Order: a master changelog's, where the folder holds XML or YAML
//!   changelogs ([`changelog`]): from each changelog no other one includes,
//!   its `include`s (formatted SQL, a plain SQL file as Liquibase's one
//!   `raw::includeAll` changeset, or another changelog) and `includeAll`
//!   folders (their files by path) in document order; an included path is
//!   found in the folder by its longest tail that names a file there
//!   (`db/changelog/x.sql` is `x.sql` in `--migrations db/changelog`).
//!   A formatted file no changelog includes is not run, as Liquibase runs
//!   none. A changeSet written in XML or YAML is listed in its place and
//!   not run (Liquibase generates its SQL). Without a changelog: the
//!   formatted files by path (`includeAll`'s order). The changesets of a
//!   file run in file order.
//! - Not modelled ([`CAVEAT`]): `context`/`labels` filters (every
//!   changeset is read, as a run without `--contexts`/`--labels` runs
//!   them), preconditions (taken as passing), `runAlways`/`runOnChange`
//!   reruns, `${property}` substitution.
//! - History: `databasechangelog`, read only: a row per changeset run
//!   (`EXECUTED`, `RERAN` or `MARK_RAN`), matched by id, author and a
//!   file path that ends the same way (Liquibase records the path as the
//!   changelog was included, `db/changelog/sql/001.sql` or
//!   `classpath:…`). Its `MD5SUM` is Liquibase's own normalised checksum,
//!   not compared; its rows carry a deployment id and order rollsafe
//!   cannot vouch for, so `migrate` does not write them.

use super::{keep_lines, AppliedRow, Folder, HistoryRules, LayoutReader, ReadOptions, Step};
use crate::catalog::{CatalogError, Execution, Migration};

mod changelog;
pub use changelog::is_changelog;
use changelog::Entry;

pub struct Liquibase;

/// Said wherever a folder is read as Liquibase's.
pub const CAVEAT: &str = "Liquibase's changesets are read whatever their context or labels, preconditions taken as passing, runAlways/runOnChange not rerun; a changeSet written in XML or YAML is listed, not run";

/// `databasechangelog`, read only: what ran, keyed as the changesets are.
static HISTORY: HistoryRules = HistoryRules {
    expand: rows_of_the_folders_changesets,
    ..HistoryRules::new(
        "databasechangelog",
        "SELECT filename || '::' || id || '::' || author, dateexecuted::text, NULL::text
           FROM databasechangelog WHERE exectype IN ('EXECUTED', 'RERAN', 'MARK_RAN')",
    )
};

/// A row names its changeset by the path the changelog was included by:
/// it is the folder's changeset with the same id and author whose file
/// ends the same way. Rows no changeset has are kept, for `status` to
/// name.
fn rows_of_the_folders_changesets(
    migrations: &[Migration],
    rows: Vec<AppliedRow>,
) -> Vec<AppliedRow> {
    rows.into_iter()
        .map(|row| {
            let found = migrations.iter().find(|m| same_changeset(&m.key, &row.key));
            match found {
                Some(m) => AppliedRow {
                    key: m.key.clone(),
                    ..row
                },
                None => row,
            }
        })
        .collect()
}

/// `path::id::author` → (path, id, author).
fn changeset_parts(key: &str) -> Option<(&str, &str, &str)> {
    let (path, rest) = key.split_once("::")?;
    let (id, author) = rest.rsplit_once("::")?;
    Some((path, id, author))
}

/// The author of the changeset whose key is `key` (`path::id::author`)
/// and id `id` (its step's name).
pub(crate) fn author_of<'a>(key: &'a str, id: &str) -> Option<&'a str> {
    key.rsplit_once(format!("::{id}::").as_str())
        .map(|(_, author)| author)
        .filter(|a| !a.is_empty())
}

/// Whether two `path::id::author` keys are one changeset: the same id and
/// author, and paths equal once `classpath:` and leading `/`/`./` are
/// dropped, or one ending in `/` and the other.
fn same_changeset(a: &str, b: &str) -> bool {
    let (Some((pa, ia, aa)), Some((pb, ib, ab))) = (changeset_parts(a), changeset_parts(b)) else {
        return false;
    };
    let normal = |p: &str| {
        p.trim_start_matches("classpath:")
            .trim_start_matches("./")
            .trim_start_matches('/')
            .replace('\\', "/")
    };
    let (pa, pb) = (normal(pa), normal(pb));
    ia == ib
        && aa == ab
        && (pa == pb || pa.ends_with(&format!("/{pb}")) || pb.ends_with(&format!("/{pa}")))
}

/// `^\s*--\s*liquibase\s*formatted.*` on the first non-blank line.
pub fn is_formatted_sql(text: &str) -> bool {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| l.trim_start().strip_prefix("--"))
        .is_some_and(|rest| {
            let rest = rest.trim_start().to_ascii_lowercase();
            rest.strip_prefix("liquibase")
                .is_some_and(|r| r.trim_start().starts_with("formatted"))
        })
}

/// The text after `--` and the whitespace after it, when `line` is an
/// annotation (`leading`: whitespace before `--` allowed, as the
/// patterns that start with `\s*` allow it).
fn annotation(line: &str, leading: bool) -> Option<&str> {
    let line = line.trim_end_matches(['\r', '\n']);
    let line = if leading { line.trim_start() } else { line };
    Some(line.strip_prefix("--")?.trim_start())
}

/// `word` at the start of `text`, case-insensitive; the rest.
fn word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let head = text.get(..word.len())?;
    head.eq_ignore_ascii_case(word).then(|| &text[word.len()..])
}

/// `--changeset author:id …`: (author, id). `Err` for a changeset line
/// Liquibase refuses.
pub(crate) fn changeset_line(line: &str) -> Option<Result<(String, String), String>> {
    let rest = word(annotation(line, true)?, "changeset")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim_start();
    let refused =
        || Err("expected `--changeset <author>:<id>` (no space around the `:`)".to_string());
    let (author, after) = match rest.strip_prefix('"') {
        Some(quoted) => {
            let (author, after) = quoted.split_once('"')?;
            (format!("\"{author}\""), after.strip_prefix(':'))
        }
        None => match rest.split_once(':') {
            Some((author, after)) => (author.to_string(), Some(after)),
            None => (String::new(), None),
        },
    };
    let Some(after) = after else {
        return Some(refused());
    };
    if after.starts_with(char::is_whitespace) || author.ends_with(char::is_whitespace) {
        return Some(refused());
    }
    let id = match after.strip_prefix('"') {
        Some(quoted) => quoted.split_once('"').map(|(id, _)| id.to_string()),
        None => after.split_whitespace().next().map(str::to_string),
    };
    let Some(id) = id.filter(|i| !i.is_empty()) else {
        return Some(refused());
    };
    Some(Ok((author.trim_matches('"').to_string(), id)))
}

/// `name:value` among a changeset line's words (`runInTransaction:false`),
/// as `.*name:(\S*).*` finds it: the value up to the next space.
fn attribute<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let lower = line.to_ascii_lowercase();
    let key = format!("{}:", name.to_ascii_lowercase());
    let at = lower
        .match_indices(&key)
        .map(|(i, _)| i)
        .find(|&i| i == 0 || !line.as_bytes()[i - 1].is_ascii_alphanumeric())?;
    let value = &line[at + key.len()..];
    let end = value.find(char::is_whitespace).unwrap_or(value.len());
    Some(value[..end].trim_matches('"'))
}

fn is_false(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.eq_ignore_ascii_case("false"))
}

/// Whether a `dbms:` list lets the changeset run on PostgreSQL, as
/// Liquibase's `DatabaseList.definitionMatches` reads it.
fn runs_on_postgres(dbms: Option<&str>) -> bool {
    let Some(list) = dbms.filter(|d| !d.is_empty()) else {
        return true;
    };
    let names: Vec<String> = list
        .split(',')
        .map(|d| d.trim().to_ascii_lowercase())
        .collect();
    if names.iter().any(|d| d == "none") {
        return false;
    }
    if names.iter().any(|d| d == "!postgresql") {
        return false;
    }
    names
        .iter()
        .any(|d| d == "all" || d == "postgresql" || d.starts_with('!'))
}

/// What a line inside a changeset is to the parser.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// SQL (and plain comments): run.
    Sql,
    /// The parser's own (rollback, comment, precondition, property,
    /// validCheckSum): blanked.
    Own,
    /// `/* liquibase rollback`: blanked up to the line ending `*/`.
    RollbackBlockStart,
    /// `--ignoreLines:start`: blanked up to `--ignoreLines:end`.
    IgnoreStart,
    /// `--ignoreLines:<n>`: this line and the next n blanked.
    IgnoreCount(usize),
}

fn classify(line: &str) -> Line {
    let trimmed = line.trim();
    if let Some(rest) = trimmed.strip_prefix("/*") {
        let rest = rest.trim_start();
        if word(rest, "liquibase").is_some_and(|r| {
            word(r.trim_start(), "rollback").is_some_and(|end| end.trim().is_empty())
        }) {
            return Line::RollbackBlockStart;
        }
    }
    // `--ignoreLines:`, `--comment`, `--validCheckSum` have no leading `\s*`.
    if let Some(body) = annotation(line, false) {
        if let Some(value) = word(body, "ignoreLines:") {
            return match value.trim() {
                v if v.eq_ignore_ascii_case("start") => Line::IgnoreStart,
                v => v.parse().map_or(Line::Sql, Line::IgnoreCount),
            };
        }
        for own in ["comment ", "comment: ", "validCheckSum ", "validCheckSum: "] {
            if word(body, own).is_some() {
                return Line::Own;
            }
        }
    }
    if let Some(body) = annotation(line, true) {
        if word(body, "rollback ").is_some()
            || word(body, "preconditions").is_some()
            || word(body, "precondition-").is_some()
            || word(body, "property").is_some_and(|r| r.starts_with(char::is_whitespace))
        {
            return Line::Own;
        }
    }
    Line::Sql
}

/// One `--changeset` of a file: where it starts, its line, its ends.
struct Changeset {
    author: String,
    id: String,
    line: usize,
    header: String,
}

/// The changesets of one formatted SQL file, in file order, as steps.
fn read_file(file: &str, text: &str) -> Result<Vec<Step>, CatalogError> {
    let refused = |line: usize, why: String| CatalogError::Unreadable {
        file: file.to_string(),
        why: format!("line {line}: {why}"),
    };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let logical = lines
        .iter()
        .find(|l| !l.trim().is_empty())
        .and_then(|h| attribute(h, "logicalFilePath"))
        .map(str::to_string);
    // Per line: Some(changeset index) when it is SQL of that changeset.
    let mut owner: Vec<Option<usize>> = vec![None; lines.len()];
    let mut changesets: Vec<Changeset> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(parsed) = changeset_line(line) {
            let (author, id) = parsed.map_err(|why| refused(i + 1, why))?;
            changesets.push(Changeset {
                author,
                id,
                line: i,
                header: line.trim_end().to_string(),
            });
            i += 1;
            continue;
        }
        match classify(line) {
            Line::IgnoreStart => {
                while i < lines.len() && !is_ignore_end(lines[i]) {
                    i += 1;
                }
            }
            Line::IgnoreCount(n) => i += n,
            Line::RollbackBlockStart => {
                while i < lines.len() && !lines[i].trim_end().ends_with("*/") {
                    i += 1;
                }
            }
            Line::Own => {}
            Line::Sql => owner[i] = changesets.len().checked_sub(1),
        }
        i += 1;
    }
    let mut steps = Vec::new();
    for (n, c) in changesets.iter().enumerate() {
        let ignored =
            attribute(&c.header, "ignore").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if ignored || !runs_on_postgres(attribute(&c.header, "dbms")) {
            continue;
        }
        let delimiter = attribute(&c.header, "endDelimiter").map(str::to_string);
        let sql = keep_lines(text, |at, _| owner[at] == Some(n));
        let sql = delimiters_as_semicolons(&sql, delimiter.as_deref());
        // Comments alone are SQL to the parser (they run as nothing).
        if sql.trim().is_empty() {
            return Err(refused(
                c.line + 1,
                format!("changeset {}:{} has no SQL, which Liquibase refuses (`No SQL for changeset`); give it its statements or remove it", c.author, c.id),
            ));
        }
        let path = attribute(&c.header, "logicalFilePath")
            .map(str::to_string)
            .or_else(|| logical.clone())
            .unwrap_or_else(|| file.to_string());
        let key = format!("{path}::{}::{}", c.id, c.author);
        let outside = is_false(attribute(&c.header, "runInTransaction"));
        let one_string = is_false(attribute(&c.header, "splitStatements"));
        steps.push(Step {
            label: key.clone(),
            key,
            name: c.id.clone(),
            file: file.to_string(),
            sql,
            execution: match (outside, one_string) {
                (false, _) => Execution::Transaction,
                (true, false) => Execution::Autocommit,
                (true, true) => Execution::SimpleQuery,
            },
            ..Step::default()
        });
    }
    Ok(steps)
}

fn is_ignore_end(line: &str) -> bool {
    annotation(line, false)
        .and_then(|b| word(b, "ignoreLines:"))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("end"))
}

/// A line that is only a statement delimiter Liquibase splits at (the
/// changeset's `endDelimiter`, else `/` or `GO`) reads as `;`, so the
/// statements rollsafe splits are the ones Liquibase sends.
fn delimiters_as_semicolons(sql: &str, delimiter: Option<&str>) -> String {
    let ends = |line: &str| {
        let t = line.trim();
        match delimiter {
            Some(d) if d != ";" => {
                !d.is_empty() && t.eq_ignore_ascii_case(d.trim_start_matches("\\n"))
            }
            _ => t == "/" || t.eq_ignore_ascii_case("go"),
        }
    };
    sql.split_inclusive('\n')
        .map(|line| match ends(line) {
            true => match line.ends_with('\n') {
                true => ";\n".to_string(),
                false => ";".to_string(),
            },
            false => line.to_string(),
        })
        .collect()
}

impl LayoutReader for Liquibase {
    fn pattern(&self) -> &'static str {
        "<name>.sql starting with --liquibase formatted sql"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn caveat(&self) -> Option<&'static str> {
        Some(CAVEAT)
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        let mut claimed: Vec<String> = formatted_files(folder)
            .into_iter()
            .map(|(f, _)| f.to_string())
            .collect();
        claimed.extend(changelogs(folder).into_iter().map(str::to_string));
        claimed
    }

    fn companion(&self, file: &str) -> Option<&'static str> {
        let changelog = folder_free_is_changelog(file);
        changelog.then_some("Liquibase changelog(s) (their include order read)")
    }

    fn read(&self, folder: &Folder, _: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let roots = root_changelogs(folder)?;
        if roots.is_empty() {
            let mut steps = Vec::new();
            for (file, bytes) in formatted_files(folder) {
                let text = super::utf8(file, bytes.to_vec())?;
                steps.extend(read_file(file, &text)?);
            }
            return Ok(steps);
        }
        let mut walk = Walk {
            folder,
            steps: Vec::new(),
            seen: std::collections::HashSet::new(),
        };
        for root in roots {
            walk.take(&root)?;
        }
        Ok(walk.steps)
    }
}

/// A changelog's file name, without its folder: what [`LayoutReader::companion`]
/// sees (the folder read only keeps changelogs among XML and YAML files).
fn folder_free_is_changelog(file: &str) -> bool {
    [".xml", ".yaml", ".yml"].iter().any(|x| file.ends_with(x))
}

/// The folder's formatted SQL files at any depth, by path (`includeAll`'s
/// order).
fn formatted_files(folder: &Folder) -> Vec<(&str, &[u8])> {
    folder
        .files
        .iter()
        .filter(|(p, b)| p.ends_with(".sql") && is_formatted_sql(&String::from_utf8_lossy(b)))
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect()
}

/// The folder's XML and YAML changelogs, by path.
fn changelogs(folder: &Folder) -> Vec<&str> {
    folder
        .files
        .iter()
        .filter(|(p, b)| is_changelog(p, b))
        .map(|(p, _)| p.as_str())
        .collect()
}

/// The changelogs no other changelog includes: the masters Liquibase is
/// pointed at.
fn root_changelogs(folder: &Folder) -> Result<Vec<String>, CatalogError> {
    let all = changelogs(folder);
    let mut included = std::collections::HashSet::new();
    for c in &all {
        let text = folder.text(c)?.unwrap_or_default();
        for entry in changelog::entries(c, &text) {
            match entry {
                Entry::Include { file, relative } => {
                    included.extend(locate(folder, c, &file, relative, false));
                }
                Entry::IncludeAll { path, relative } => {
                    if let Some(dir) = locate(folder, c, &path, relative, true) {
                        included.extend(under(folder, &dir).into_iter().map(str::to_string));
                    }
                }
                Entry::ChangeSet { .. } => {}
            }
        }
    }
    Ok(all
        .into_iter()
        .filter(|c| !included.contains(*c))
        .map(str::to_string)
        .collect())
}

/// `written` (an include's path) as a path of the folder: relative to
/// the changelog `from` when `relative`, else its longest tail that
/// names a file (or, for a folder, holds one) of the folder.
fn locate(folder: &Folder, from: &str, written: &str, relative: bool, dir: bool) -> Option<String> {
    let written = written
        .trim_start_matches("classpath:")
        .trim_start_matches("classpath*:")
        .trim_start_matches("./")
        .trim_start_matches('/')
        .trim_end_matches('/');
    let exists = |p: &str| match dir {
        false => folder.has(p),
        true => !p.is_empty() && folder.files.keys().any(|f| f.starts_with(&format!("{p}/"))),
    };
    if relative {
        let base = from.rsplit_once('/').map_or("", |(d, _)| d);
        let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
        for part in written.split('/') {
            match part {
                "." | "" => {}
                ".." => {
                    parts.pop();
                }
                p => parts.push(p),
            }
        }
        let joined = parts.join("/");
        return exists(&joined).then_some(joined);
    }
    let parts: Vec<&str> = written.split('/').collect();
    (0..parts.len())
        .map(|k| parts[k..].join("/"))
        .find(|p| exists(p))
}

/// The files `includeAll` takes from `dir` (at any depth), by path: SQL
/// files and changelogs.
fn under<'a>(folder: &'a Folder, dir: &str) -> Vec<&'a str> {
    let prefix = format!("{dir}/");
    folder
        .files
        .iter()
        .filter(|(p, b)| p.starts_with(&prefix) && (p.ends_with(".sql") || is_changelog(p, b)))
        .map(|(p, _)| p.as_str())
        .collect()
}

/// A walk of the changelogs from their roots: the steps in Liquibase's
/// order, each file taken once.
struct Walk<'a> {
    folder: &'a Folder,
    steps: Vec<Step>,
    seen: std::collections::HashSet<String>,
}

impl Walk<'_> {
    fn take(&mut self, file: &str) -> Result<(), CatalogError> {
        if !self.seen.insert(file.to_string()) {
            return Ok(());
        }
        let text = self.folder.text(file)?.unwrap_or_default();
        if is_changelog(file, text.as_bytes()) {
            return self.changelog(file, &text);
        }
        if is_formatted_sql(&text) {
            self.steps.extend(read_file(file, &text)?);
        } else {
            // Liquibase's SqlChangeLogParser: a plain SQL file is one
            // changeset, `raw` by `includeAll`, its statements split.
            self.steps.push(Step {
                key: format!("{file}::raw::includeAll"),
                label: format!("{file}::raw::includeAll"),
                name: "raw".into(),
                file: file.to_string(),
                sql: text,
                ..Step::default()
            });
        }
        Ok(())
    }

    fn changelog(&mut self, file: &str, text: &str) -> Result<(), CatalogError> {
        let missing = |what: &str, written: &str| {
            CatalogError::Unreadable {
            file: file.to_string(),
            why: format!("{what} `{written}`, which is not in the folder rollsafe reads; pass the folder that holds every file the changelog includes (its classpath root)"),
        }
        };
        for entry in changelog::entries(file, text) {
            match entry {
                Entry::Include {
                    file: written,
                    relative,
                } => {
                    let found = locate(self.folder, file, &written, relative, false)
                        .ok_or_else(|| missing("includes", &written))?;
                    self.take(&found)?;
                }
                Entry::IncludeAll { path, relative } => {
                    let dir = locate(self.folder, file, &path, relative, true)
                        .ok_or_else(|| missing("includes all of", &path))?;
                    let files: Vec<String> = under(self.folder, &dir)
                        .into_iter()
                        .map(str::to_string)
                        .collect();
                    for f in files {
                        self.take(&f)?;
                    }
                }
                Entry::ChangeSet { id, author, line } => {
                    let key = format!("{file}::{id}::{author}");
                    self.steps.push(Step {
                        label: key.clone(),
                        key,
                        name: id,
                        file: file.to_string(),
                        not_runnable: Some(format!("a changeSet written in the changelog itself (line {line}): Liquibase generates its SQL from the change types, which rollsafe does not; it reads formatted SQL")),
                        ..Step::default()
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "--liquibase formatted sql\n\
        SELECT 'before any changeset';\n\
        --changeset ana:1\n\
        --comment: workshop benches\n\
        CREATE TABLE benches (id int);\n\
        --rollback DROP TABLE benches;\n\
        --changeset ana:2 runInTransaction:false\n\
        CREATE INDEX CONCURRENTLY benches_id ON benches (id);\n\
        /* liquibase rollback\n\
        DROP INDEX benches_id;\n\
        */\n\
        --changeset \"bo\":3 runInTransaction:false splitStatements:false\n\
        --precondition-sql-check expectedResult:0 SELECT count(*) FROM benches\n\
        SELECT 3;\n\
        --changeset ana:4 dbms:oracle,h2\n\
        SELECT 'oracle only';\n\
        --changeset ana:5 dbms:!oracle endDelimiter:GO\n\
        --ignoreLines:start\n\
        DROP TABLE benches;\n\
        --ignoreLines:end\n\
        SELECT 5\n\
        GO\n";

    #[test]
    fn changesets_are_read_as_liquibases_parser_reads_them() {
        assert!(is_formatted_sql(FILE));
        let steps = read_file("db/bench.sql", FILE).unwrap();
        let got: Vec<(&str, Execution)> = steps
            .iter()
            .map(|s| (s.key.as_str(), s.execution))
            .collect();
        assert_eq!(
            got,
            [
                ("db/bench.sql::1::ana", Execution::Transaction),
                ("db/bench.sql::2::ana", Execution::Autocommit),
                ("db/bench.sql::3::bo", Execution::SimpleQuery),
                ("db/bench.sql::5::ana", Execution::Transaction),
            ]
        );
        for s in &steps {
            assert_eq!(s.sql.lines().count(), FILE.lines().count(), "{}", s.key);
            assert!(
                !s.sql.contains("DROP") && !s.sql.contains("before any"),
                "{}",
                s.sql
            );
            assert!(!s.sql.contains("comment:") && !s.sql.contains("precondition"));
        }
        assert_eq!(steps[0].sql.trim(), "CREATE TABLE benches (id int);");
        assert_eq!(steps[3].sql.trim(), "SELECT 5\n;");
    }

    #[test]
    fn a_changeset_line_liquibase_refuses_is_refused_with_its_line() {
        let spaced = "--liquibase formatted sql\n--changeset ana: 1\nSELECT 1;\n";
        let err = read_file("a.sql", spaced).unwrap_err().to_string();
        assert!(
            err.contains("line 2") && err.contains("<author>:<id>"),
            "{err}"
        );
        let empty = "--liquibase formatted sql\n--changeset ana:1\n--rollback SELECT 1;\n--changeset ana:2\nSELECT 2;\n";
        let err = read_file("a.sql", empty).unwrap_err().to_string();
        assert!(err.contains("ana:1 has no SQL"), "{err}");
        // A commented-out statement is SQL to the parser: it runs as nothing.
        let commented =
            "--liquibase formatted sql\n--changeset ana:1\n-- ALTER TABLE t ADD COLUMN c int;\n";
        assert_eq!(read_file("a.sql", commented).unwrap().len(), 1);
    }

    #[test]
    fn dbms_lists_are_read_as_liquibase_reads_them() {
        assert!(runs_on_postgres(None));
        assert!(runs_on_postgres(Some("postgresql,h2")));
        assert!(runs_on_postgres(Some("!oracle")));
        assert!(runs_on_postgres(Some("all")));
        assert!(!runs_on_postgres(Some("oracle")));
        assert!(!runs_on_postgres(Some("!postgresql")));
        assert!(!runs_on_postgres(Some("none")));
    }

    #[test]
    fn rows_name_changesets_by_the_path_they_were_included_by() {
        assert!(same_changeset(
            "sql/001.sql::1::ana",
            "classpath:db/changelog/sql/001.sql::1::ana"
        ));
        assert!(same_changeset("sql/001.sql::1::ana", "sql/001.sql::1::ana"));
        assert!(!same_changeset("sql/001.sql::1::ana", "sql/001.sql::1::bo"));
        assert!(!same_changeset(
            "sql/001.sql::1::ana",
            "other/x001.sql::1::ana"
        ));
    }
}

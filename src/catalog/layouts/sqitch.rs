//! Sqitch: `sqitch.plan` orders the changes (not the file names); each
//! change `name` deploys `deploy/name.sql`, is checked by `verify/name.sql`
//! and undone by `revert/name.sql` (never read). A change reworked after a
//! tag appears in the plan twice: its earlier instance deploys
//! `deploy/name@tag.sql` (`tag` = the first tag after it), its latest
//! `deploy/name.sql`; the earlier one is labelled `name@tag`. Tags
//! (`@v1.0 …` lines) order nothing themselves.
//!
//! `sqitch.conf`'s `[core] top_dir` (e.g. `./sql`) moves the plan and the
//! script folders under it, as Sqitch reads them.
//!
//! Sqitch runs a script through `psql` as it is: the script's own
//! `BEGIN … COMMIT` is its transaction. rollsafe runs the statements
//! between them in its own transaction (the one it measures), so those two
//! statements are blanked; a script without them runs outside a
//! transaction, as Sqitch runs it.

use super::{Folder, HistoryRules, LayoutReader, ReadOptions, Step};
use crate::catalog::CatalogError;
use crate::catalog::Execution;

pub struct Sqitch;

/// `sqitch.changes`, read only: a row per deployed change, by name; no
/// checksum rollsafe compares (Sqitch's change ids hash more than the
/// script).
static HISTORY: HistoryRules = HistoryRules::new(
    "sqitch.changes",
    "SELECT change, committed_at::text, NULL::text FROM sqitch.changes",
);

pub const PLAN: &str = "sqitch.plan";
const CONF: &str = "sqitch.conf";

/// `[core] top_dir` of `sqitch.conf`, as a path prefix (`sql/`; empty
/// when unset).
fn top_dir(folder: &Folder) -> Result<String, CatalogError> {
    let Some(conf) = folder.text(CONF)? else {
        return Ok(String::new());
    };
    let mut in_core = false;
    for line in conf.lines().map(str::trim) {
        if line.starts_with('[') {
            in_core = line == "[core]";
        } else if let Some((key, value)) = line.split_once('=') {
            if in_core && key.trim() == "top_dir" {
                let dir = value
                    .trim()
                    .trim_matches('"')
                    .trim_start_matches("./")
                    .trim_end_matches('/');
                return Ok(if dir.is_empty() || dir == "." {
                    String::new()
                } else {
                    format!("{dir}/")
                });
            }
        }
    }
    Ok(String::new())
}

/// One line of the plan that deploys a change.
#[derive(Debug, PartialEq, Eq)]
struct Change {
    name: String,
    line: usize,
    /// Its dependencies on changes of other Sqitch projects
    /// (`[other_project:change]`), as written.
    requires: Vec<String>,
}

/// The plan's entries in order: changes, and the tags between them.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Change(Change),
    Tag(String),
}

/// The plan's `%project=` name; empty when it has none.
fn plan_project(text: &str) -> &str {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("%project="))
        .map_or("", str::trim)
}

/// A plan line's dependencies on another project's changes: the
/// `project:change` entries of its `[…]` that are not conflicts (`!`) and
/// name a project other than `own`.
fn cross_project_requires(line: &str, own: &str) -> Vec<String> {
    let Some(deps) = line
        .split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(deps, _)| deps)
    else {
        return Vec::new();
    };
    deps.split_whitespace()
        .filter(|d| !d.starts_with('!'))
        .filter(|d| {
            d.split_once(':')
                .is_some_and(|(p, c)| p != own && !c.is_empty())
        })
        .map(str::to_string)
        .collect()
}

fn parse_plan(text: &str) -> Result<Vec<Entry>, CatalogError> {
    let project = plan_project(text);
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('%') {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some(tag) = first.strip_prefix('@') {
            entries.push(Entry::Tag(tag.to_string()));
            continue;
        }
        if first.starts_with('-') {
            return Err(CatalogError::Unreadable {
                file: PLAN.into(),
                why: format!("line {}: `{first}` is a revert entry in the plan; rollsafe rehearses deploys only: rehearse the plan without it", i + 1),
            });
        }
        let name = first.trim_start_matches('+');
        if name.is_empty() {
            return Err(CatalogError::Unreadable {
                file: PLAN.into(),
                why: format!("line {}: a change line without a name", i + 1),
            });
        }
        entries.push(Entry::Change(Change {
            name: name.to_string(),
            line: i + 1,
            requires: cross_project_requires(line, project),
        }));
    }
    Ok(entries)
}

/// (label, name, deploy script) of each change, in plan order. A change
/// reworked later deploys, in its earlier instance, the script of the
/// first tag between it and its rework whose `deploy/<name>@<tag>.sql`
/// exists (`exists`, given the script's path under the top dir), or of the
/// first tag when none does: Sqitch's own lookup (`_path_segments` in
/// `App::Sqitch::Plan::Change`, over its `rework_tags`).
#[allow(clippy::type_complexity)]
fn scripts(
    entries: &[Entry],
    exists: impl Fn(&str) -> bool,
) -> Result<Vec<(String, String, String, Vec<String>)>, CatalogError> {
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let Entry::Change(change) = entry else {
            continue;
        };
        let later = &entries[i + 1..];
        let Some(rework) = later
            .iter()
            .position(|e| matches!(e, Entry::Change(c) if c.name == change.name))
        else {
            out.push((
                change.name.clone(),
                change.name.clone(),
                format!("deploy/{}.sql", change.name),
                change.requires.clone(),
            ));
            continue;
        };
        let tags: Vec<&String> = later[..rework]
            .iter()
            .filter_map(|e| match e {
                Entry::Tag(t) => Some(t),
                _ => None,
            })
            .collect();
        let Some(first) = tags.first() else {
            return Err(CatalogError::Unreadable {
                file: PLAN.into(),
                why: format!("line {}: `{}` appears again later without a tag between (Sqitch reworks a change only after a tag)", change.line, change.name),
            });
        };
        let tag = tags
            .iter()
            .find(|t| exists(&format!("deploy/{}@{t}.sql", change.name)))
            .unwrap_or(first);
        let label = format!("{}@{tag}", change.name);
        out.push((
            label.clone(),
            change.name.clone(),
            format!("deploy/{label}.sql"),
            change.requires.clone(),
        ));
    }
    Ok(out)
}

/// psql's `\set name `cat path`` (a file's text in a variable, e.g. a
/// template kept beside the scripts), the one psql command followed: the
/// file is read, never a command run (`read` gives the text of `path` as
/// psql's working directory, the project, holds it; None when the
/// repository has no such file), its line blanked, and `:'name'` replaced
/// with the text as a literal (psql's `PQescapeLiteral`: quotes doubled;
/// with a backslash, ` E'…'` and backslashes doubled), `:"name"` as an
/// identifier. psql drops one trailing newline of a backquoted command's
/// output, and so does this. Any other psql command is left for
/// [`refuse_psql_commands`].
fn expand_psql_variables(
    file: &str,
    text: &str,
    read: impl Fn(&str) -> Option<String>,
) -> Result<String, CatalogError> {
    let mut values: Vec<(String, String)> = Vec::new();
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let set = line
            .trim()
            .strip_prefix("\\set ")
            .and_then(|rest| rest.trim().split_once(char::is_whitespace))
            .and_then(|(name, value)| {
                let path = value.trim().strip_prefix("`cat ")?.strip_suffix('`')?;
                Some((name, path.trim()))
            });
        let Some((name, path)) = set else {
            out.push_str(line);
            continue;
        };
        let value = read(path).ok_or_else(|| CatalogError::Unreadable {
            file: file.to_string(),
            why: format!(
                "line {}: `\\set {name} `cat {path}`` reads a file the repository does not hold (looked for {path} from the project's folders up to the repository's root); add it, or put the value in the SQL itself",
                i + 1
            ),
        })?;
        let value = value.strip_suffix('\n').unwrap_or(&value).to_string();
        values.push((name.to_string(), value));
        if line.ends_with('\n') {
            out.push('\n');
        }
    }
    for (name, value) in &values {
        let literal = match value.contains('\\') {
            true => format!(" E'{}'", value.replace('\\', "\\\\").replace('\'', "''")),
            false => format!("'{}'", value.replace('\'', "''")),
        };
        out = out.replace(&format!(":'{name}'"), &literal).replace(
            &format!(":\"{name}\""),
            &format!("\"{}\"", value.replace('"', "\"\"")),
        );
    }
    Ok(out)
}

/// Sqitch runs scripts through psql, so a script may hold psql's own
/// commands (`\set x `cat file``, `\i`, `\copy`): they read files and run
/// shell commands, which nothing from a pull request may do in rollsafe's
/// sandbox, and the server cannot run them. Refused with the line.
fn refuse_psql_commands(file: &str, text: &str) -> Result<(), CatalogError> {
    match text
        .lines()
        .enumerate()
        .find(|(_, l)| l.trim_start().starts_with('\\'))
    {
        Some((i, line)) => Err(CatalogError::Unreadable {
            file: file.to_string(),
            why: format!(
                "line {}: `{}` is a psql command (Sqitch runs scripts through psql); rollsafe runs SQL only and never runs a script's shell or file commands: put the value in the SQL itself to rehearse this history",
                i + 1,
                line.split_whitespace().next().unwrap_or("\\")
            ),
        }),
        None => Ok(()),
    }
}

/// The script with its own top-level `BEGIN` and `COMMIT` blanked, and
/// whether it had them (else it runs outside a transaction).
fn strip_own_transaction(sql: &str) -> (String, bool) {
    strip_control(sql, &["BEGIN", "COMMIT", "START"])
}

/// A verify script as rollsafe runs it: Sqitch's template wraps it in
/// `BEGIN … ROLLBACK`, and rollsafe runs it in a transaction it rolls
/// back itself, so those are blanked too.
fn strip_verify_transaction(sql: &str) -> String {
    strip_control(sql, &["BEGIN", "COMMIT", "START", "ROLLBACK"]).0
}

/// `sql` with its top-level transaction-control statements (`words`)
/// blanked, and whether it had any.
fn strip_control(sql: &str, words: &[&str]) -> (String, bool) {
    let split = crate::sql::split(sql);
    let control: Vec<&crate::sql::Statement> = split
        .statements
        .iter()
        .filter(|s| {
            let word = s
                .text
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_ascii_uppercase();
            words.contains(&word.as_str()) && s.text.split_whitespace().count() <= 2
        })
        .collect();
    if !split.exact || control.is_empty() {
        return (sql.to_string(), false);
    }
    let mut out = sql.to_string();
    for s in control {
        // Blank the statement and its `;`, keeping newlines and offsets.
        let end = sql[s.end..].find(';').map_or(s.end, |i| s.end + i + 1);
        out.replace_range(s.start..end, &" ".repeat(end - s.start));
    }
    (out, true)
}

/// The change's `verify/<label>.sql` (a reworked change's earlier
/// instance: `verify/<change>@<tag>.sql`), read with the deploy scripts'
/// rules; None when the project has none for it (Sqitch then verifies
/// nothing for it either).
fn verify_script(
    folder: &Folder,
    top: &str,
    label: &str,
) -> Result<Option<super::Script>, CatalogError> {
    let file = format!("{top}verify/{label}.sql");
    let Some(text) = folder.text(&file)? else {
        return Ok(None);
    };
    let text = expand_psql_variables(&file, &text, |p| folder.read_beside(p))?;
    refuse_psql_commands(&file, &text)?;
    Ok(Some(super::Script {
        sql: strip_verify_transaction(&text),
        file,
    }))
}

impl LayoutReader for Sqitch {
    fn companion(&self, file: &str) -> Option<&'static str> {
        let base = file.rsplit('/').next().unwrap_or(file);
        if base == PLAN || base == CONF {
            return Some("Sqitch plan and configuration (read)");
        }
        let dirs: Vec<&str> = file.split('/').collect();
        match dirs.iter().rev().nth(1) {
            Some(&"revert") => Some("Sqitch revert script(s), never run going up"),
            Some(&"verify") => Some("Sqitch verify script(s) of no change in the plan"),
            _ => None,
        }
    }

    fn pattern(&self) -> &'static str {
        "sqitch.plan with deploy/<change>.sql"
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }

    fn claims(&self, folder: &Folder) -> Vec<String> {
        [PLAN, CONF]
            .into_iter()
            .filter(|f| folder.has(f))
            .map(str::to_string)
            .collect()
    }

    fn read(&self, folder: &Folder, _options: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        let top = top_dir(folder)?;
        let plan_file = format!("{top}{PLAN}");
        let plan = folder.text(&plan_file)?.ok_or_else(|| CatalogError::Unreadable {
            file: plan_file.clone(),
            why: "is missing: a Sqitch project orders its changes in it; pass the folder that holds sqitch.plan".into(),
        })?;
        let mut steps = Vec::new();
        for (label, name, file, requires) in
            scripts(&parse_plan(&plan)?, |f| folder.has(&format!("{top}{f}")))?
        {
            let file = format!("{top}{file}");
            let text = folder.text(&file)?.ok_or_else(|| CatalogError::Unreadable {
                file: file.clone(),
                why: format!("is missing, and sqitch.plan deploys `{label}` from it; add the script or remove the change from the plan"),
            })?;
            let text = expand_psql_variables(&file, &text, |p| folder.read_beside(p))?;
            refuse_psql_commands(&file, &text)?;
            let (sql, own_transaction) = strip_own_transaction(&text);
            let verify = verify_script(folder, &top, &label)?;
            steps.push(Step {
                key: label.clone(),
                label,
                name,
                file,
                sql,
                // psql runs a script without BEGIN in autocommit, one
                // statement at a time; with its own BEGIN/COMMIT (blanked),
                // rollsafe's transaction stands for the script's.
                execution: if own_transaction {
                    Execution::Transaction
                } else {
                    Execution::Autocommit
                },
                verify,
                requires,
                ..Step::default()
            });
        }
        Ok(steps)
    }
}

/// The Sqitch projects beside `dir` (in the same repository) by their
/// `%project=` name: each folder, up to two levels below `dir`'s
/// ancestors within the repository, that holds a `sqitch.plan`.
fn sibling_projects(dir: &std::path::Path) -> Vec<(String, std::path::PathBuf)> {
    let mut found: Vec<(String, std::path::PathBuf)> = Vec::new();
    let Ok(dir) = dir.canonicalize() else {
        return found;
    };
    let children = |at: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(at)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect()
    };
    for at in dir.ancestors().skip(1) {
        for child in children(at) {
            for candidate in std::iter::once(child.clone()).chain(children(&child)) {
                if candidate == dir || found.iter().any(|(_, p)| *p == candidate) {
                    continue;
                }
                if let Ok(plan) = std::fs::read_to_string(candidate.join(PLAN)) {
                    found.push((plan_project(&plan).to_string(), candidate));
                }
            }
        }
        if at.join(".git").exists() {
            break;
        }
    }
    found
}

/// `to` as a path relative to `from` (both absolute), `/`-separated.
fn relative(from: &std::path::Path, to: &std::path::Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    std::iter::repeat("..".to_string())
        .take(from.len() - common)
        .chain(
            to[common..]
                .iter()
                .map(|c| c.as_os_str().to_string_lossy().to_string()),
        )
        .collect::<Vec<_>>()
        .join("/")
}

/// `steps` of the Sqitch project in `dir` with what they need from other
/// Sqitch projects deployed first, as Sqitch requires: where a change
/// names `other:change` and the repository holds project `other`
/// (`read_sibling` reads its folder), its changes up to that one (in its
/// plan's order, each once) are deployed just before it, keyed and
/// labelled `other:<change>`. A dependency on a project the repository
/// does not hold is returned as a note for the run's header, naming
/// `--setup`.
pub fn with_sibling_projects(
    dir: &std::path::Path,
    steps: Vec<Step>,
    read_sibling: impl Fn(&std::path::Path) -> Result<Vec<Step>, CatalogError>,
) -> Result<(Vec<Step>, Vec<String>), CatalogError> {
    if steps.iter().all(|s| s.requires.is_empty()) {
        return Ok((steps, Vec::new()));
    }
    let siblings = sibling_projects(dir);
    let here = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    // Each sibling read: its steps, and how many of them are deployed.
    let mut read: Vec<(String, Vec<Step>, usize)> = Vec::new();
    let mut notes = Vec::new();
    let mut out = Vec::new();
    for step in steps {
        for needed in &step.requires {
            let (project, change) = needed.split_once(':').unwrap_or((needed, ""));
            if !read.iter().any(|(p, _, _)| p == project) {
                let Some((_, path)) = siblings.iter().find(|(p, _)| p == project) else {
                    notes.push(format!("{} needs {needed}, of Sqitch project {project}, which this repository does not hold: put what it makes in a SQL file and pass --setup FILE", step.label));
                    continue;
                };
                let prefix = relative(&here, path);
                let sibling = read_sibling(path)?
                    .into_iter()
                    .map(|s| Step {
                        key: format!("{project}:{}", s.key),
                        label: format!("{project}:{}", s.label),
                        file: format!("{prefix}/{}", s.file),
                        verify: s.verify.map(|v| super::Script {
                            file: format!("{prefix}/{}", v.file),
                            sql: v.sql,
                        }),
                        requires: Vec::new(),
                        ..s
                    })
                    .collect();
                read.push((project.to_string(), sibling, 0));
            }
            let Some((_, sibling, deployed)) = read.iter_mut().find(|(p, _, _)| p == project)
            else {
                continue;
            };
            let wanted = format!("{project}:{change}");
            let Some(at) = sibling.iter().position(|s| s.label == wanted) else {
                return Err(CatalogError::Unreadable {
                    file: PLAN.into(),
                    why: format!("{} needs {needed}, and Sqitch project {project} (beside it in the repository) has no change {change}", step.label),
                });
            };
            if at >= *deployed {
                out.extend(sibling[*deployed..=at].iter().cloned());
                *deployed = at + 1;
            }
        }
        out.push(step);
    }
    Ok((out, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_order_tags_and_rework() {
        let plan = "%syntax-version=1.0.0\n%project=shop\n\nschema 2024-01-01T00:00:00Z A <a@x> # schema\nusers [schema] 2024-01-02T00:00:00Z A <a@x> # users\n@v1.0 2024-01-03T00:00:00Z A <a@x> # tag\nusers [users@v1.0] 2024-02-01T00:00:00Z A <a@x> # reworked\n";
        let s = scripts(&parse_plan(plan).unwrap(), |_| false).unwrap();
        let files: Vec<&str> = s.iter().map(|(_, _, f, _)| f.as_str()).collect();
        assert_eq!(
            files,
            [
                "deploy/schema.sql",
                "deploy/users@v1.0.sql",
                "deploy/users.sql"
            ]
        );
        assert_eq!(s[1].0, "users@v1.0");
    }

    /// Several tags between a change and its rework: Sqitch takes the
    /// first tag whose script exists, the first tag when none does.
    #[test]
    fn a_rework_script_is_found_under_the_first_tag_that_has_one() {
        let plan = "%project=kiln\n\nkilns 2024-01-02T00:00:00Z A <a@x> # kilns\n@v1 2024-01-03T00:00:00Z A <a@x> # tag\nglazes 2024-01-04T00:00:00Z A <a@x> # glazes\n@v2 2024-01-05T00:00:00Z A <a@x> # tag\n@v2.1 2024-01-05T00:00:00Z A <a@x> # tag\nkilns [kilns@v1] 2024-02-01T00:00:00Z A <a@x> # reworked\n";
        let entries = parse_plan(plan).unwrap();
        let found = scripts(&entries, |f| f == "deploy/kilns@v2.sql").unwrap();
        assert_eq!(found[0].0, "kilns@v2");
        assert_eq!(found[0].2, "deploy/kilns@v2.sql");
        let none = scripts(&entries, |_| false).unwrap();
        assert_eq!(none[0].2, "deploy/kilns@v1.sql");
    }

    /// Only another project's changes are cross-project dependencies;
    /// conflicts (`!`) and the plan's own project are not.
    #[test]
    fn cross_project_dependencies_are_read_from_the_brackets() {
        let line = "firings [pots kilnroles:kiln_operators !kilnroles:old pottery:pots] 2024-02-02T00:00:00Z A <a@x> # note [not:this]";
        assert_eq!(
            cross_project_requires(line, "pottery"),
            ["kilnroles:kiln_operators"]
        );
        assert!(
            cross_project_requires("pots 2024-02-01T00:00:00Z A <a@x> # x", "pottery").is_empty()
        );
        assert_eq!(
            plan_project("%syntax-version=1.0.0\n%project=pottery\n"),
            "pottery"
        );
        assert_eq!(
            relative(
                std::path::Path::new("/r/db/pottery"),
                std::path::Path::new("/r/db/kilnroles")
            ),
            "../kilnroles"
        );
    }

    /// `\set name `cat path`` reads the file (never runs a command): its
    /// line blanked, `:'name'` the text as psql quotes it; a file the
    /// repository lacks is refused naming it; other psql commands stay.
    #[test]
    fn a_psql_variable_from_a_file_is_read_as_psql_reads_it() {
        let script = "BEGIN;\n\\set page `cat templates/page.html`\nINSERT INTO pages (body) VALUES (:'page');\nCOMMIT;\n";
        let read = |p: &str| (p == "templates/page.html").then(|| "<p>it's</p>\n".to_string());
        let sql = expand_psql_variables("deploy/pages.sql", script, read).unwrap();
        assert_eq!(
            sql,
            "BEGIN;\n\nINSERT INTO pages (body) VALUES ('<p>it''s</p>');\nCOMMIT;\n"
        );
        let slash = expand_psql_variables("d.sql", "\\set v `cat a`\nSELECT :'v';", |_| {
            Some("a\\b".into())
        })
        .unwrap();
        assert_eq!(slash, "\nSELECT  E'a\\\\b';");
        let missing = expand_psql_variables("d.sql", script, |_| None).unwrap_err();
        assert!(
            missing.to_string().contains("line 2: `\\set page `cat templates/page.html`` reads a file the repository does not hold"),
            "{missing}"
        );
        let other = "\\i other.sql\n";
        assert_eq!(
            expand_psql_variables("d.sql", other, |_| None).unwrap(),
            other
        );
    }

    #[test]
    fn own_begin_commit_is_blanked() {
        let (sql, own) =
            strip_own_transaction("-- Deploy x\nBEGIN;\nCREATE TABLE t (a int);\nCOMMIT;\n");
        assert!(own);
        assert_eq!(sql.lines().nth(2), Some("CREATE TABLE t (a int);"));
        assert!(!sql.contains("BEGIN") && !sql.contains("COMMIT"));
        assert!(!strip_own_transaction("CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (a);").1);
        let verify = strip_verify_transaction(
            "-- Verify x\nBEGIN;\nSELECT a FROM t WHERE false;\nROLLBACK;\n",
        );
        assert_eq!(verify.lines().nth(2), Some("SELECT a FROM t WHERE false;"));
        assert!(!verify.contains("BEGIN") && !verify.contains("ROLLBACK"));
        let err =
            refuse_psql_commands("deploy/t.sql", "-- x\n\\set v `cat f`\nSELECT 1;").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("deploy/t.sql: line 2: `\\set` is a psql command"),
            "{err}"
        );
    }
}

//! Which migrations of a folder one deploy ran together, read from the
//! folder's git history ([`Step::deploy_group`]): the migrations one commit
//! added were first run by one deploy, one after the other, with no app
//! writing rows in between (a table the first one created is still empty
//! when the next one runs).
//!
//! - A migration's group is the commit that added its file, `commit
//!   1a2b3c4` (renames followed back, into the folder a moved folder came
//!   from), or `the working tree` for a file not committed yet (untracked
//!   or only staged).
//! - A Liquibase formatted SQL file holds several changesets: each one's
//!   group is the commit that added its `--changeset` line, as `git blame`
//!   of HEAD attributes it (a changeset HEAD lacks is the working tree's).
//! - No group (deployed on its own, as far as rollsafe can tell): the files
//!   of the first commit that brought migrations into the folder (the
//!   import of a history: databases created before it ran those migrations
//!   one deploy at a time, which rollsafe cannot know), and so every file
//!   when none is committed; a file whose add the history does not reach
//!   (moved in from a folder too many moves away); a script outside the
//!   folder (another Sqitch project's); a changeSet of an XML or YAML
//!   changelog holding several.
//! - Git is asked a fixed number of times per folder (`git log` once, again
//!   only to follow a move; `git blame` once per Liquibase file of several
//!   changesets), hardened for a repository that may come from a pull
//!   request (no hooks, pager, fsmonitor, external diff, textconv or lazy
//!   fetch; repository variables of the environment dropped; one deadline
//!   for the folder). Any failure of git (no binary, not a work tree,
//!   dubious ownership, a timeout) means no groups: never an error.
//!
//! A framework's catalogue gets the same groups from its migrations'
//! files ([`super::fill_deploy_groups`], the project's whole history
//! read): its order is the framework's (Django's by app), so only the
//! neighbours it sends one after the other count as deployed together;
//! an installed package's migrations have no file and no group.
//! [`when_added`] tells it when each file was added, for `--since`.
//!
//! Not here: what a group changes (the seeded path asks
//! [`super::Catalog::deployed_with_previous`]).

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::layouts::{liquibase, Step};
use super::{Catalog, Layout};

/// The group of the migrations not committed yet.
pub const WORKING_TREE: &str = "the working tree";

/// How long git may take for one folder, every invocation together.
const BUDGET: Duration = Duration::from_secs(10);

/// How many times the history is read again to follow files moved into
/// the folder from elsewhere in the repository.
const MOVES_FOLLOWED: usize = 3;

/// How many groups the header names before it counts the rest.
const GROUPS_SHOWN: usize = 3;

/// Gives each of `steps` (read from the folder `dir` in `layout`) the
/// group git's history says deployed it; leaves them None when git cannot
/// say.
pub(super) fn fill(dir: &Path, layout: Layout, steps: &mut [Step]) {
    let deadline = Instant::now() + BUDGET;
    let Some(prefix) = prefix_in_work_tree(dir, deadline) else {
        return;
    };
    let mut files: Vec<&str> = steps
        .iter()
        .map(|s| s.file.as_str())
        .filter(|f| !f.is_empty() && !f.split('/').any(|part| part == ".."))
        .collect();
    files.sort_unstable();
    files.dedup();
    let folder = vec![prefix.trim_end_matches('/').to_string()];
    let Some(origins) = Origins::read(dir, &prefix, folder, &files, deadline) else {
        return;
    };
    // No migration committed: the working tree is the import.
    let Some(import) = origins.import() else {
        return;
    };
    let groups = FileGroups {
        origins: &origins,
        import,
    };
    // A Liquibase file of several changesets: each one's own line.
    let changesets = match layout {
        Layout::Liquibase => liquibase_changesets(dir, steps, &groups, deadline),
        _ => HashMap::new(),
    };
    let filled: Vec<Option<String>> = steps
        .iter()
        .map(|step| match changesets.get(&step.key) {
            Some(group) => group.clone(),
            // No file of the project's (a framework's installed package's
            // migration): no group.
            None if step.file.is_empty() => None,
            None => groups.of_file(&step.file),
        })
        .collect();
    for (step, group) in steps.iter_mut().zip(filled) {
        step.deploy_group = group;
    }
}

/// When git's history added a migration's file, ordered newest first: a
/// file not committed yet, then the commits from the newest back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Added {
    WorkingTree,
    /// The commit at this index of the history read, newest first.
    Commit(usize),
}

/// When git's history added each of `files` (relative to `dir`), for a
/// catalogue whose order is not its files' (a framework's, in the order
/// it sends: `--since` asks which of its migrations came after another).
/// Only the history of the files' own folders is read, as [`fill`] reads
/// it; a file whose add it does not reach is left out. None when git
/// cannot say (no git, not a work tree, a timeout).
pub fn when_added(dir: &Path, files: &[&str]) -> Option<HashMap<String, Added>> {
    let deadline = Instant::now() + BUDGET;
    let prefix = prefix_in_work_tree(dir, deadline)?;
    let mut folders: Vec<String> = files
        .iter()
        .filter(|f| !f.split('/').any(|part| part == ".."))
        .map(|f| format!("{prefix}{}", f.rsplit_once('/').map_or("", |(d, _)| d)))
        .map(|f| f.trim_end_matches('/').to_string())
        .collect();
    folders.sort();
    folders.dedup();
    let origins = Origins::read(dir, &prefix, folders, files, deadline)?;
    Some(
        origins
            .of
            .into_iter()
            .filter_map(|(file, origin)| match origin {
                Origin::Commit(index) => Some((file, Added::Commit(index))),
                Origin::WorkingTree => Some((file, Added::WorkingTree)),
                Origin::Unknown => None,
            })
            .collect(),
    )
}

/// The files that hold more than one of `steps`.
fn shared_files(steps: &[Step]) -> HashSet<&str> {
    let mut seen = HashSet::new();
    steps
        .iter()
        .filter(|s| !seen.insert(s.file.as_str()))
        .map(|s| s.file.as_str())
        .collect()
}

/// The header's line naming the groups of more than one migration, in the
/// catalogue's order: each run of neighbours of one group, the first few,
/// then how many more.
pub(super) fn note(catalog: &Catalog) -> Option<String> {
    let mut runs: Vec<(Vec<i32>, &str)> = Vec::new();
    for (index, m) in catalog.migrations().iter().enumerate() {
        let Some(group) = m.deploy_group.as_deref() else {
            continue;
        };
        match runs.last_mut() {
            Some((versions, _)) if catalog.deployed_with_previous(index) => {
                versions.push(m.version)
            }
            _ => runs.push((vec![m.version], group)),
        }
    }
    runs.retain(|(versions, _)| versions.len() > 1);
    if runs.is_empty() {
        return None;
    }
    let mut shown: Vec<String> = runs
        .iter()
        .take(GROUPS_SHOWN)
        .map(|(versions, group)| format!("{} ({group})", catalog.label_ranges(versions)))
        .collect();
    if runs.len() > GROUPS_SHOWN {
        shown.push(format!("and {} more", runs.len() - GROUPS_SHOWN));
    }
    Some(format!(
        "deployed together (their files added in one commit, or not committed yet: no app writes rows between them): {}",
        shown.join("; ")
    ))
}

/// Where a file's migration came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Added by the commit at this index of [`Origins::commits`].
    Commit(usize),
    /// Not in HEAD: untracked, or only staged.
    WorkingTree,
    /// Committed, but the history read does not reach its add.
    Unknown,
}

/// The commits that brought the folder's files in, and each file's.
struct Origins {
    /// Full hashes, newest first (parents after their children).
    commits: Vec<String>,
    of: HashMap<String, Origin>,
}

/// One commit of `git log --name-status`: its hash and what it added or
/// renamed.
#[derive(Debug, Default)]
struct LogCommit {
    hash: String,
    changes: Vec<Change>,
}

#[derive(Debug, PartialEq, Eq)]
enum Change {
    Added(String),
    /// Only read where renames are not detected ([`Renames::Undetected`]).
    Deleted(String),
    Renamed {
        from: String,
        to: String,
    },
}

/// Where following a file back through the history ends.
#[derive(Debug, PartialEq, Eq)]
enum Trace {
    Added(usize),
    /// Renamed from this path, whose add the history read lacks.
    MovedFrom(String),
    /// No commit added it.
    Never,
}

impl Origins {
    /// The origin of each of `files` (relative to `dir`, which is `prefix`
    /// in its work tree): one `git log` over `pathspecs` (the folders
    /// holding them, from the work tree's top), and again over the
    /// folders its files were moved from, when any were.
    fn read(
        dir: &Path,
        prefix: &str,
        mut pathspecs: Vec<String>,
        files: &[&str],
        deadline: Instant,
    ) -> Option<Origins> {
        let mut rounds = 0;
        loop {
            rounds += 1;
            let args = log_args(&pathspecs, Renames::Detected);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let Some(out) = git(dir, &args, deadline) else {
                // Rename detection reads the blobs the commits touched; a
                // partial clone (`--filter=blob:none`) or a copy missing
                // large blobs has not all of them, and git fails. Adds
                // and deletes need only trees: a file added where a file of
                // its name was deleted in the same commit was moved, and
                // gets no group.
                if rounds > 1 {
                    return None;
                }
                let args = log_args(&pathspecs, Renames::Undetected);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let commits = parse_log(&git(dir, &args, deadline)?);
                let traces: Vec<(&str, Trace)> = files
                    .iter()
                    .map(|f| (*f, trace_without_renames(&commits, &format!("{prefix}{f}"))))
                    .collect();
                return Origins::from_traces(dir, prefix, commits, traces, deadline);
            };
            let commits = parse_log(&out);
            let traces: Vec<(&str, Trace)> = files
                .iter()
                .map(|f| (*f, trace(&commits, &format!("{prefix}{f}"))))
                .collect();
            let mut elsewhere: Vec<String> = traces
                .iter()
                .filter_map(|(_, t)| match t {
                    Trace::MovedFrom(path) if !covered(&pathspecs, path) => {
                        Some(path.rsplit_once('/').map_or("", |(d, _)| d).to_string())
                    }
                    _ => None,
                })
                .collect();
            elsewhere.sort();
            elsewhere.dedup();
            if elsewhere.is_empty() || rounds == MOVES_FOLLOWED {
                return Origins::from_traces(dir, prefix, commits, traces, deadline);
            }
            pathspecs.extend(elsewhere);
        }
    }

    fn from_traces(
        dir: &Path,
        prefix: &str,
        commits: Vec<LogCommit>,
        traces: Vec<(&str, Trace)>,
        deadline: Instant,
    ) -> Option<Origins> {
        // A file no commit added may still be in HEAD (added by a merge,
        // which the log shows no changes of): only what HEAD lacks is the
        // working tree's.
        let in_head = match traces.iter().any(|(_, t)| *t == Trace::Never) {
            true => committed_files(dir, deadline)?,
            false => HashSet::new(),
        };
        let of = traces
            .into_iter()
            .map(|(file, t)| {
                let origin = match t {
                    Trace::Added(index) => Origin::Commit(index),
                    Trace::Never if !in_head.contains(&format!("{prefix}{file}")) => {
                        Origin::WorkingTree
                    }
                    Trace::Never | Trace::MovedFrom(_) => Origin::Unknown,
                };
                (file.to_string(), origin)
            })
            .collect();
        Some(Origins {
            commits: commits.into_iter().map(|c| c.hash).collect(),
            of,
        })
    }

    /// The first commit that brought migrations into the folder: the
    /// oldest that added one of them. None when none is committed.
    fn import(&self) -> Option<usize> {
        self.of
            .values()
            .filter_map(|o| match o {
                Origin::Commit(index) => Some(*index),
                _ => None,
            })
            .max()
    }
}

/// The groups of whole files, the import's left out.
struct FileGroups<'a> {
    origins: &'a Origins,
    import: usize,
}

impl FileGroups<'_> {
    fn of_file(&self, file: &str) -> Option<String> {
        match self.origins.of.get(file)? {
            Origin::Commit(index) if *index == self.import => None,
            Origin::Commit(index) => Some(commit_group(&self.origins.commits[*index])),
            Origin::WorkingTree => Some(WORKING_TREE.to_string()),
            Origin::Unknown => None,
        }
    }

    fn is_import(&self, hash: &str) -> bool {
        self.origins.commits[self.import] == hash
    }
}

/// `commit 1a2b3c4`: a group as messages name it.
fn commit_group(hash: &str) -> String {
    format!("commit {}", &hash[..hash.len().min(7)])
}

/// The group of each changeset (by key) of the Liquibase files holding
/// several: the commit that added its `--changeset` line; the working
/// tree for one HEAD lacks. A file of XML or YAML changeSets, or one git
/// cannot blame, gives its changesets none.
fn liquibase_changesets(
    dir: &Path,
    steps: &[Step],
    groups: &FileGroups,
    deadline: Instant,
) -> HashMap<String, Option<String>> {
    let mut out = HashMap::new();
    for file in shared_files(steps) {
        let of_file: Vec<&Step> = steps.iter().filter(|s| s.file == file).collect();
        let whole = groups.origins.of.get(file).copied();
        let blamed = match whole {
            Some(Origin::Commit(_)) if file.ends_with(".sql") => {
                blame_changesets(dir, file, deadline)
            }
            _ => None,
        };
        for step in of_file {
            let group = match (whole, &blamed) {
                (Some(Origin::WorkingTree), _) => Some(WORKING_TREE.to_string()),
                (_, Some(lines)) => {
                    let written = liquibase::author_of(&step.key, &step.name)
                        .map(|author| (author.to_string(), step.name.clone()));
                    match written.and_then(|w| lines.get(&w)) {
                        Some(hash) if groups.is_import(hash) => None,
                        Some(hash) => Some(commit_group(hash)),
                        None => Some(WORKING_TREE.to_string()),
                    }
                }
                _ => None,
            };
            out.insert(step.key.clone(), group);
        }
    }
    out
}

/// The commit HEAD's `git blame` gives each `--changeset author:id` line
/// of `file`, by (author, id).
fn blame_changesets(
    dir: &Path,
    file: &str,
    deadline: Instant,
) -> Option<HashMap<(String, String), String>> {
    let out = git(
        dir,
        &[
            "-c",
            "blame.ignoreRevsFile=",
            "blame",
            "--porcelain",
            "--no-textconv",
            "HEAD",
            "--",
            file,
        ],
        deadline,
    )?;
    let text = String::from_utf8_lossy(&out);
    let mut hash = "";
    let mut lines = HashMap::new();
    for line in text.lines() {
        if let Some(content) = line.strip_prefix('\t') {
            if let Some(Ok(written)) = liquibase::changeset_line(content) {
                lines.entry(written).or_insert_with(|| hash.to_string());
            }
            continue;
        }
        let first = line.split(' ').next().unwrap_or_default();
        if first.len() == 40 && first.bytes().all(|b| b.is_ascii_hexdigit()) {
            hash = first;
        }
    }
    Some(lines)
}

/// Whether `path` is under one of `pathspecs` (folders relative to the
/// work tree's top; the empty one is all of it).
fn covered(pathspecs: &[String], path: &str) -> bool {
    pathspecs.iter().any(|p| {
        p.is_empty()
            || path
                .strip_prefix(p.as_str())
                .is_some_and(|r| r.starts_with('/'))
    })
}

/// `path` followed back through `commits` (newest first): the commit that
/// added it, across the renames that brought it to `path`.
fn trace(commits: &[LogCommit], path: &str) -> Trace {
    let mut name = path.to_string();
    let mut renamed = false;
    for (index, commit) in commits.iter().enumerate() {
        for change in &commit.changes {
            match change {
                Change::Added(added) if *added == name => return Trace::Added(index),
                Change::Renamed { from, to } if *to == name => {
                    name = from.clone();
                    renamed = true;
                    break;
                }
                _ => {}
            }
        }
    }
    match renamed {
        true => Trace::MovedFrom(name),
        false => Trace::Never,
    }
}

/// `path` followed back through `commits` read without rename detection:
/// the commit that added it, unless that commit deleted a file of the same
/// name elsewhere (a move: its add is further back, under the old name).
fn trace_without_renames(commits: &[LogCommit], path: &str) -> Trace {
    // `…/up.sql`, `…/migration.sql`: the folder names the migration.
    let name_of = |p: &str| -> String {
        let mut parts = p.rsplit('/');
        let file = parts.next().unwrap_or_default();
        match file {
            "up.sql" | "down.sql" | "migration.sql" => {
                format!("{}/{file}", parts.next().unwrap_or_default())
            }
            _ => file.to_string(),
        }
    };
    let name = name_of(path);
    for (index, commit) in commits.iter().enumerate() {
        if !commit.changes.contains(&Change::Added(path.to_string())) {
            continue;
        }
        let moved = commit.changes.iter().find_map(|c| match c {
            Change::Deleted(gone) if name_of(gone) == name => Some(gone.clone()),
            _ => None,
        });
        return match moved {
            Some(from) => Trace::MovedFrom(from),
            None => Trace::Added(index),
        };
    }
    Trace::Never
}

/// Whether `git log` is asked to detect renames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renames {
    /// `-M`: a moved file is followed back to its first add.
    Detected,
    /// `--no-renames`, adds and deletes only: what a clone lacking blobs
    /// can answer.
    Undetected,
}

/// `git log` of what each commit touching `pathspecs` added or renamed
/// anywhere (`--full-diff`: a file moved in from outside them is a rename,
/// not an add), NUL-separated, parents after children.
fn log_args(pathspecs: &[String], renames: Renames) -> Vec<String> {
    let (detect, filter) = match renames {
        Renames::Detected => ("-M", "--diff-filter=AR"),
        Renames::Undetected => ("--no-renames", "--diff-filter=AD"),
    };
    let options = [
        "log",
        "-z",
        "--topo-order",
        "--no-show-signature",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        detect,
        "--full-diff",
        filter,
        "--name-status",
        "--format=%x01%H",
        "--",
    ];
    // Paths from the work tree's top, never read as wildcards.
    let paths = pathspecs.iter().map(|p| format!(":(top,literal){p}"));
    options.iter().map(|o| o.to_string()).chain(paths).collect()
}

/// `log_args`'s output: `\x01<hash>\0` then, per change, `\n`-led status
/// and its paths, each `\0`-ended (`A\0path\0`, `R100\0from\0to\0`).
fn parse_log(out: &[u8]) -> Vec<LogCommit> {
    let text = String::from_utf8_lossy(out);
    let mut commits: Vec<LogCommit> = Vec::new();
    let mut fields = text.split('\0');
    while let Some(field) = fields.next() {
        if let Some(hash) = field.strip_prefix('\u{1}') {
            commits.push(LogCommit {
                hash: hash.to_string(),
                changes: Vec::new(),
            });
            continue;
        }
        let status = field.strip_prefix('\n').unwrap_or(field);
        let Some(commit) = commits.last_mut() else {
            continue;
        };
        match status.chars().next() {
            Some('A') => {
                if let Some(path) = fields.next() {
                    commit.changes.push(Change::Added(path.to_string()));
                }
            }
            Some('D') => {
                if let Some(path) = fields.next() {
                    commit.changes.push(Change::Deleted(path.to_string()));
                }
            }
            Some('R') => {
                if let (Some(from), Some(to)) = (fields.next(), fields.next()) {
                    commit.changes.push(Change::Renamed {
                        from: from.to_string(),
                        to: to.to_string(),
                    });
                }
            }
            _ => {}
        }
    }
    commits
}

/// Where `dir` is in its git work tree (`db/migrations/`, empty at the
/// top); None when it is in none, or git cannot say.
fn prefix_in_work_tree(dir: &Path, deadline: Instant) -> Option<String> {
    let out = git(
        dir,
        &["rev-parse", "--is-inside-work-tree", "--show-prefix"],
        deadline,
    )?;
    let text = String::from_utf8(out).ok()?;
    let mut lines = text.lines();
    (lines.next()? == "true").then(|| lines.next().unwrap_or_default().to_string())
}

/// The files HEAD holds, relative to the work tree's top.
fn committed_files(dir: &Path, deadline: Instant) -> Option<HashSet<String>> {
    let out = git(
        dir,
        &["ls-tree", "-r", "-z", "--name-only", "--full-tree", "HEAD"],
        deadline,
    )?;
    Some(
        String::from_utf8_lossy(&out)
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

/// What a repository's own configuration could make git run, turned off:
/// the checkout may come from a pull request. `safe.directory=*`: a CI
/// checkout is often owned by another user than the job's.
const HARDENING: &[&str] = &[
    "--no-pager",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "safe.directory=*",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "diff.external=",
    "-c",
    "log.follow=false",
    "-c",
    "log.showSignature=false",
];

/// The variables that would point git at another repository than `dir`'s
/// (set when rollsafe runs inside a git hook).
const REPOSITORY_VARIABLES: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
];

/// git's stdout for `args` run in `dir`; None when git cannot be started,
/// fails, or is not done by `deadline` (it is killed then).
fn git(dir: &Path, args: &[&str], deadline: Instant) -> Option<Vec<u8>> {
    let mut command = Command::new("git");
    command.args(HARDENING).arg("-C").arg(dir).args(args);
    for var in REPOSITORY_VARIABLES {
        command.env_remove(var);
    }
    command
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| log::debug!("deploy groups: git cannot be started: {e}"))
        .ok()?;
    // Read while it runs: a history larger than the pipe would block it.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                log::debug!(
                    "deploy groups: git {} did not finish in time",
                    args.join(" ")
                );
                return None;
            }
        }
    };
    let out = stdout.join().unwrap_or_default();
    if !status.success() {
        let err = stderr.join().unwrap_or_default();
        log::debug!(
            "deploy groups: git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&err).trim()
        );
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Source;
    use std::path::PathBuf;

    /// Read without rename detection (a clone lacking blobs), a file added
    /// where a file of its name was deleted in the same commit was moved:
    /// no group from that commit; one added alone is that commit's.
    #[test]
    fn without_renames_a_move_is_an_add_beside_a_delete_of_its_name() {
        let commit = |hash: &str, changes: Vec<Change>| LogCommit {
            hash: hash.into(),
            changes,
        };
        let commits = vec![
            commit(
                "c2",
                vec![
                    Change::Added("db/migrations/V2__spokes.sql".into()),
                    Change::Added("db/migrations/V1__wheels.sql".into()),
                    Change::Deleted("sql/V1__wheels.sql".into()),
                    Change::Added("prisma/migrations/20240101_rims/migration.sql".into()),
                    Change::Deleted("old/20240101_rims/migration.sql".into()),
                    Change::Added("prisma/migrations/20240102_hubs/migration.sql".into()),
                ],
            ),
            commit("c1", vec![Change::Added("sql/V1__wheels.sql".into())]),
        ];
        let trace = |p: &str| trace_without_renames(&commits, p);
        assert_eq!(trace("db/migrations/V2__spokes.sql"), Trace::Added(0));
        assert_eq!(
            trace("db/migrations/V1__wheels.sql"),
            Trace::MovedFrom("sql/V1__wheels.sql".into())
        );
        assert_eq!(
            trace("prisma/migrations/20240101_rims/migration.sql"),
            Trace::MovedFrom("old/20240101_rims/migration.sql".into())
        );
        assert_eq!(
            trace("prisma/migrations/20240102_hubs/migration.sql"),
            Trace::Added(0)
        );
        assert_eq!(trace("db/migrations/V3__tyres.sql"), Trace::Never);
    }

    /// A bike-repair shop's repository in a temporary directory, its
    /// migrations in `db/migrations`; git without the machine's config.
    struct Shop {
        _dir: tempfile::TempDir,
        root: PathBuf,
    }

    impl Shop {
        fn new() -> Shop {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_path_buf();
            let shop = Shop { _dir: dir, root };
            shop.git(&["init", "--quiet"]);
            shop
        }

        fn migrations(&self) -> PathBuf {
            self.root.join("db/migrations")
        }

        fn write(&self, path: &str, text: &str) {
            let path = self.root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }

        fn git(&self, args: &[&str]) -> String {
            let out = Command::new("git")
                .arg("-C")
                .arg(&self.root)
                .args(["-c", "user.name=Spoke Wright", "-c"])
                .args([
                    "user.email=spokes@shop.invalid",
                    "-c",
                    "commit.gpgsign=false",
                ])
                .args(["-c", "init.defaultBranch=main"])
                .args(args)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        }

        /// Commits everything written so far; its group.
        fn commit(&self, message: &str) -> String {
            self.git(&["add", "--all"]);
            self.git(&["commit", "--quiet", "-m", message]);
            format!("commit {}", self.git(&["rev-parse", "--short=7", "HEAD"]))
        }
    }

    fn groups(catalog: &Catalog) -> Vec<(&str, Option<&str>)> {
        catalog
            .migrations()
            .iter()
            .map(|m| (m.label.as_str(), m.deploy_group.as_deref()))
            .collect()
    }

    const WHEELS: &str = "CREATE TABLE wheels (id bigint PRIMARY KEY, rim_mm int);";
    const WHEELS_INDEX: &str = "CREATE INDEX wheels_rim ON wheels (rim_mm);";

    /// The import gives no group; the next commit's two files are one
    /// group; an untracked and a staged file are the working tree's.
    #[test]
    fn a_commit_after_the_import_is_one_group_and_files_not_committed_the_working_tree() {
        let shop = Shop::new();
        shop.write("db/migrations/20240101000000_wheels.sql", WHEELS);
        shop.write("db/migrations/20240102000000_wheels_rim.sql", WHEELS_INDEX);
        shop.write("README.md", "Spoke & Chain repairs\n");
        shop.commit("import the shop's history");
        shop.write(
            "db/migrations/20240201000000_tickets.sql",
            "CREATE TABLE repair_tickets (id bigint PRIMARY KEY, wheel_id bigint);",
        );
        shop.write(
            "db/migrations/20240202000000_tickets_wheel.sql",
            "CREATE INDEX tickets_wheel ON repair_tickets (wheel_id);",
        );
        let tickets = shop.commit("repair tickets");
        shop.write(
            "db/migrations/20240301000000_tubes.sql",
            "CREATE TABLE inner_tubes (id bigint PRIMARY KEY, valve text);",
        );
        shop.write(
            "db/migrations/20240302000000_tubes_valve.sql",
            "CREATE INDEX tubes_valve ON inner_tubes (valve);",
        );
        shop.git(&["add", "db/migrations/20240302000000_tubes_valve.sql"]);
        let catalog = Catalog::from_dir(&shop.migrations()).unwrap();
        assert_eq!(
            groups(&catalog),
            [
                ("20240101000000", None),
                ("20240102000000", None),
                ("20240201000000", Some(tickets.as_str())),
                ("20240202000000", Some(tickets.as_str())),
                ("20240301000000", Some(WORKING_TREE)),
                ("20240302000000", Some(WORKING_TREE)),
            ]
        );
        let with_previous: Vec<bool> = (0..6).map(|i| catalog.deployed_with_previous(i)).collect();
        assert_eq!(with_previous, [false, false, false, true, false, true]);
        assert_eq!(
            catalog.notes,
            [format!("deployed together (their files added in one commit, or not committed yet: no app writes rows between them): 20240201000000..20240202000000 ({tickets}); 20240301000000..20240302000000 (the working tree)")]
        );
    }

    /// A folder moved (and a file renamed in it) keeps the commits that
    /// added its files where they were first.
    #[test]
    fn a_moved_folder_keeps_the_commits_that_added_its_files() {
        let shop = Shop::new();
        shop.write("sql/1_wheels.sql", WHEELS);
        shop.write("sql/2_wheels_rim.sql", WHEELS_INDEX);
        shop.commit("import");
        shop.write(
            "sql/3_spokes.sql",
            "CREATE TABLE spokes (id bigint, gauge int);",
        );
        shop.write(
            "sql/4_spokes_gauge.sql",
            "CREATE INDEX spokes_gauge ON spokes (gauge);",
        );
        let spokes = shop.commit("spokes");
        std::fs::create_dir_all(shop.root.join("db")).unwrap();
        shop.git(&["mv", "sql", "db/migrations"]);
        shop.git(&[
            "mv",
            "db/migrations/4_spokes_gauge.sql",
            "db/migrations/4_spoke_gauges.sql",
        ]);
        shop.commit("the migrations move under db/");
        let catalog = Catalog::from_dir(&shop.migrations()).unwrap();
        assert_eq!(
            groups(&catalog),
            [
                ("1", None),
                ("2", None),
                ("3", Some(spokes.as_str())),
                ("4", Some(spokes.as_str())),
            ]
        );
    }

    /// A Liquibase file's changesets: each one's group is the commit that
    /// added its line; one HEAD lacks is the working tree's.
    #[test]
    fn a_liquibase_changeset_is_grouped_by_the_commit_that_added_its_line() {
        let shop = Shop::new();
        let head = "--liquibase formatted sql\n";
        let wheels = format!(
            "--changeset ana:wheels\n{WHEELS}\n--changeset ana:wheels-rim\n{WHEELS_INDEX}\n"
        );
        shop.write("db/migrations/001_wheels.sql", &format!("{head}{wheels}"));
        shop.commit("import");
        let chains = "--changeset bo:chains\nCREATE TABLE chains (id bigint, links int);\n--changeset bo:chains-links\nCREATE INDEX chains_links ON chains (links);\n";
        shop.write(
            "db/migrations/001_wheels.sql",
            &format!("{head}{wheels}{chains}"),
        );
        let saddles = "--changeset cy:saddles\nCREATE TABLE saddles (id bigint, width_mm int);\n";
        shop.write("db/migrations/002_saddles.sql", &format!("{head}{saddles}"));
        let second = shop.commit("chains and saddles");
        shop.write(
            "db/migrations/002_saddles.sql",
            &format!("{head}{saddles}--changeset cy:saddles-width\nCREATE INDEX saddles_width ON saddles (width_mm);\n"),
        );
        let catalog = Catalog::from_dir(&shop.migrations()).unwrap();
        assert_eq!(catalog.layout, Layout::Liquibase);
        let got: Vec<(&str, Option<&str>)> = catalog
            .migrations()
            .iter()
            .map(|m| (m.name.as_str(), m.deploy_group.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("wheels", None),
                ("wheels-rim", None),
                ("chains", Some(second.as_str())),
                ("chains-links", Some(second.as_str())),
                ("saddles", Some(second.as_str())),
                ("saddles-width", Some(WORKING_TREE)),
            ]
        );
    }

    /// Outside a work tree, with git failing, or with nothing committed:
    /// no groups, and the folder is read as ever.
    #[test]
    fn without_a_history_to_read_no_migration_has_a_group() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("1_wheels.sql"), WHEELS).unwrap();
        std::fs::write(outside.path().join("2_wheels_rim.sql"), WHEELS_INDEX).unwrap();
        let none = |dir: &Path| {
            let c = Catalog::from_dir(dir).unwrap();
            assert!(
                c.migrations().iter().all(|m| m.deploy_group.is_none()),
                "{dir:?}"
            );
            assert!(c.notes.is_empty(), "{:?}", c.notes);
        };
        none(outside.path());
        // A `.git` that points nowhere: git fails.
        std::fs::write(
            outside.path().join(".git"),
            "gitdir: /nonexistent/shop.git\n",
        )
        .unwrap();
        none(outside.path());
        // Nothing committed: the working tree is the import.
        let shop = Shop::new();
        shop.write("db/migrations/1_wheels.sql", WHEELS);
        shop.write("db/migrations/2_wheels_rim.sql", WHEELS_INDEX);
        none(&shop.migrations());
    }

    /// A migration its tool sends in the transaction of the one before
    /// shares it when the two are pending together: one deploy ran them,
    /// or the caller knows production stands before both; never with a
    /// file that runs outside a transaction.
    #[test]
    fn a_shared_transaction_needs_both_pending_and_both_in_one() {
        let step = |n: u32, group: Option<&str>, sql: &str| Step {
            key: n.to_string(),
            label: n.to_string(),
            name: format!("m{n}"),
            file: format!("{n}_m{n}.sql"),
            sql: sql.into(),
            deploy_group: group.map(str::to_string),
            shared_transaction: (n > 1).then(|| "one transaction".to_string()),
            ..Step::default()
        };
        let steps = vec![
            step(1, None, "SELECT 1;"),
            step(2, Some("commit a"), "SELECT 2;"),
            step(3, Some("commit a"), "SELECT 3;"),
            step(
                4,
                Some("commit a"),
                "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY i ON t (x);\n",
            ),
        ];
        let catalog = Catalog::from_steps(Source::Embedded, Layout::Sqlx, steps).unwrap();
        let shared = |pending: bool| -> Vec<bool> {
            (0..4)
                .map(|i| {
                    catalog
                        .transaction_shared_with_previous(i, pending)
                        .is_some()
                })
                .collect()
        };
        assert_eq!(shared(false), [false, false, true, false]);
        assert_eq!(shared(true), [false, true, true, false]);
    }

    /// The header names the first groups and counts the others.
    #[test]
    fn the_note_names_the_first_groups_then_counts_the_rest() {
        let steps: Vec<Step> = (1..=11)
            .map(|n| Step {
                key: n.to_string(),
                label: n.to_string(),
                name: format!("m{n}"),
                file: format!("{n}_m{n}.sql"),
                sql: "SELECT 1;".into(),
                // 1 alone, then pairs: 2-3, 4-5, … 10-11.
                deploy_group: (n > 1).then(|| format!("commit {}", n / 2)),
                ..Step::default()
            })
            .collect();
        let catalog = Catalog::from_steps(Source::Embedded, Layout::Sqlx, steps).unwrap();
        assert_eq!(
            note(&catalog).unwrap(),
            "deployed together (their files added in one commit, or not committed yet: no app writes rows between them): 2..3 (commit 1); 4..5 (commit 2); 6..7 (commit 3); and 2 more"
        );
    }
}

//! `verify --base REF`: what a pull request changes, read from git.
//!
//! The base is REF's tree, checked out as a detached git worktree in a
//! temporary directory (removed on drop): its migrations are the ones
//! production has applied, its app is the one running there. The working
//! tree may only add migrations after REF's newest: a file REF has that
//! the tree changed or removed is applied history edited
//! ([`BaseError::Edited`]), and a migration the tree adds before REF's
//! newest would be skipped where REF's are applied
//! ([`BaseError::AddedBefore`]); both stop the run.
//!
//! Git runs as the `git` binary (its own rules for refs, worktrees and
//! sparse checkouts apply, and nothing is reimplemented here).

use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

use crate::catalog::{Catalog, CatalogError, ReadOptions};

#[derive(Debug, Error)]
pub enum BaseError {
    #[error("--base {reference}: {detail}")]
    Git { reference: String, detail: String },
    #[error("--base {reference}: {dir} is not inside a git repository; run verify from the project's clone, or drop --base")]
    NotARepository { reference: String, dir: String },
    #[error("--base {reference}: {path} does not exist there; pass the ref that holds the project's migrations (e.g. origin/main)")]
    NoMigrationsAtBase { reference: String, path: String },
    #[error("--base {reference}: reading its migrations: {0}", reference = .1)]
    Catalog(CatalogError, String),
    #[error("applied history edited: {file} differs from {reference}'s ({what}); an applied migration is never changed: restore it (git checkout {reference} -- {path}) and put the change in a new migration")]
    Edited {
        reference: String,
        file: String,
        path: String,
        what: &'static str,
    },
    #[error("{file} is added before {reference}'s newest migration ({newest}): a database at {reference} would never run it; give it a version after {newest}")]
    AddedBefore {
        reference: String,
        file: String,
        newest: String,
    },
}

/// REF's tree, checked out; removed when dropped.
#[derive(Debug)]
pub struct Base {
    pub reference: String,
    /// The worktree's root (where REF's app runs).
    pub root: PathBuf,
    /// REF's migrations directory (the tree's, at REF).
    pub migrations: PathBuf,
    repo: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Base {
    fn drop(&mut self) {
        let _ = git(&self.repo)
            .args(["worktree", "remove", "--force"])
            .arg(&self.root)
            .output();
    }
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C").arg(dir);
    c
}

/// Runs git; its stdout, or its stderr's last line as the error.
fn run(c: &mut Command, reference: &str) -> Result<String, BaseError> {
    let out = c.output().map_err(|e| BaseError::Git {
        reference: reference.to_string(),
        detail: format!("cannot run git ({e}); install git"),
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(BaseError::Git {
            reference: reference.to_string(),
            detail: stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("git failed")
                .trim()
                .to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Checks out `reference` of the repository holding `migrations`.
pub fn checkout(migrations: &Path, reference: &str) -> Result<Base, BaseError> {
    let migrations = migrations
        .canonicalize()
        .unwrap_or_else(|_| migrations.to_path_buf());
    let root = run(
        git(&migrations).args(["rev-parse", "--show-toplevel"]),
        reference,
    )
    .map_err(|_| BaseError::NotARepository {
        reference: reference.to_string(),
        dir: migrations.display().to_string(),
    })?;
    let repo = PathBuf::from(root);
    let relative = migrations
        .strip_prefix(repo.canonicalize().unwrap_or_else(|_| repo.clone()))
        .map(Path::to_path_buf)
        .unwrap_or_default();
    run(
        git(&repo).args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{reference}^{{commit}}"),
        ]),
        reference,
    )
    .map_err(|_| BaseError::Git {
        reference: reference.to_string(),
        detail: "no such commit, branch or tag here; fetch it first (git fetch origin <branch>)"
            .into(),
    })?;
    let dir = tempfile::Builder::new()
        .prefix("rollsafe-base-")
        .tempdir()
        .map_err(|e| BaseError::Git {
            reference: reference.to_string(),
            detail: format!("cannot create a temporary directory: {e}"),
        })?;
    let root = dir.path().join("tree");
    run(
        git(&repo)
            .args(["worktree", "add", "--detach", "--quiet"])
            .arg(&root)
            .arg(reference),
        reference,
    )?;
    let base = Base {
        reference: reference.to_string(),
        migrations: root.join(&relative),
        root,
        repo,
        _dir: dir,
    };
    if !base.migrations.is_dir() {
        return Err(BaseError::NoMigrationsAtBase {
            reference: reference.to_string(),
            path: relative.display().to_string(),
        });
    }
    Ok(base)
}

impl Base {
    /// Where in REF's tree `dir` of the working tree is (where REF's app
    /// runs when the command runs in `dir`); its root when `dir` is
    /// outside the repository.
    pub fn same_place(&self, dir: &Path) -> PathBuf {
        let repo = self
            .repo
            .canonicalize()
            .unwrap_or_else(|_| self.repo.clone());
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        match dir.strip_prefix(&repo) {
            Ok(rel) => self.root.join(rel),
            Err(_) => self.root.clone(),
        }
    }

    /// REF's migrations, read like the tree's.
    pub fn catalog(&self, options: &ReadOptions) -> Result<Catalog, BaseError> {
        Catalog::from_dir_in(&self.migrations, options)
            .map_err(|e| BaseError::Catalog(e, self.reference.clone()))
    }

    /// The tree's migrations only add to REF's, after its newest; the
    /// label of REF's newest (None: REF has none, everything is new).
    pub fn check_history(
        &self,
        base: &Catalog,
        tree: &Catalog,
    ) -> Result<Option<String>, BaseError> {
        self.check_edits(base, tree)?;
        let Some(newest) = base.migrations().last() else {
            return Ok(None);
        };
        let newest_at = tree
            .migrations()
            .iter()
            .position(|t| t.label == newest.label)
            .unwrap_or(0);
        if let Some(early) = tree.migrations()[..newest_at]
            .iter()
            .find(|t| !base.migrations().iter().any(|b| b.label == t.label))
        {
            return Err(BaseError::AddedBefore {
                reference: self.reference.clone(),
                file: tree.path_of(early),
                newest: newest.label.clone(),
            });
        }
        Ok(Some(newest.label.clone()))
    }

    /// No migration of REF's was changed, renamed or removed in the tree.
    pub fn check_edits(&self, base: &Catalog, tree: &Catalog) -> Result<(), BaseError> {
        let folder = self
            .migrations
            .strip_prefix(&self.root)
            .unwrap_or(Path::new(""));
        for m in base.migrations() {
            let t = tree.migrations().iter().find(|t| t.label == m.label);
            let what = match t {
                None => "removed from the working tree",
                Some(t) if t.sql != m.sql => "its SQL changed",
                Some(t) if t.file != m.file => "renamed",
                Some(_) => continue,
            };
            return Err(self.edited(tree, m, t, &folder.join(&m.file), what));
        }
        Ok(())
    }

    /// A framework's migrations at REF (`base`, its project at
    /// `base_root` in REF's tree) are all in the tree (`tree`, the project
    /// at `tree_root`), each from the same file, unchanged. Their SQL is
    /// not compared: the framework sends it anew on each run, and some of
    /// it differs from run to run (Django's AlterField to NOT NULL with
    /// `default=uuid.uuid4` fills the rows with a fresh uuid literal). An
    /// installed package's migration has no file: it is only looked for.
    /// Django sends a new migration of one app among REF's of the others
    /// (app by app), so where it is sent is not checked either.
    pub fn check_framework_edits(
        &self,
        base: &Catalog,
        tree: &Catalog,
        base_root: &Path,
        tree_root: &Path,
    ) -> Result<(), BaseError> {
        let project = base_root.strip_prefix(&self.root).unwrap_or(Path::new(""));
        for m in base.migrations() {
            let t = tree.migrations().iter().find(|t| t.label == m.label);
            let what = match t {
                None => "removed from the working tree",
                Some(t) if t.file != m.file => "renamed",
                Some(_) if m.file.is_empty() => continue,
                Some(t)
                    if std::fs::read(base_root.join(&m.file)).ok()
                        != std::fs::read(tree_root.join(&t.file)).ok() =>
                {
                    "its file changed"
                }
                Some(_) => continue,
            };
            return Err(self.edited(tree, m, t, &project.join(&m.file), what));
        }
        Ok(())
    }

    /// [`BaseError::Edited`] for REF's `m` (`t`, the tree's, when it has
    /// it; `path`: its file from the repository's top, for `git checkout`).
    fn edited(
        &self,
        tree: &Catalog,
        m: &crate::catalog::Migration,
        t: Option<&crate::catalog::Migration>,
        path: &Path,
        what: &'static str,
    ) -> BaseError {
        BaseError::Edited {
            reference: self.reference.clone(),
            file: t.map_or_else(|| m.file.clone(), |t| tree.path_of(t)),
            path: path.display().to_string(),
            what,
        }
    }
}

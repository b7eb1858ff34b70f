//! rollsafe: Postgres schema migrations that are proven safe to roll out.
//!
//! The library does the work; `main.rs` only parses arguments, calls in here
//! and maps errors to exit codes. The library never prints or exits.
//!
//! # Embedding it
//!
//! What the `rollsafe verify` command does, from Rust: load the migrations
//! ([`catalog::Catalog`]), start throwaway PostgreSQL
//! ([`sandbox::SandboxBuilder`]), rehearse them ([`verify::Verify`]) and
//! render the [`report::Report`] ([`report::render`]); `report.passed` is
//! the verdict (the binary exits 1 when it is false).
//!
//! ```no_run
//! use std::path::Path;
//! use rollsafe::catalog::Catalog;
//! use rollsafe::report::{render, Format};
//! use rollsafe::sandbox::SandboxBuilder;
//! use rollsafe::verify::Verify;
//!
//! # fn main() -> anyhow::Result<()> {
//! // A project's migrations (layout detected); `None` means the embedded ones.
//! let catalog = Catalog::load_in(Some(Path::new("db/migrations")), &Default::default())?;
//! // Docker when an engine answers, else local binaries; ROLLSAFE_POSTGRES
//! // and friends override, `.postgres_major(17)` picks a major.
//! let sandbox = SandboxBuilder::from_env()?.start()?;
//! let report = Verify::new(catalog)?.rows(2_000).run(&sandbox)?;
//! print!("{}", render(&report, Format::Text));
//! assert!(report.passed, "error findings");
//! # Ok(())
//! # }
//! ```
//!
//! A real database: [`migrate::migrate`] applies a catalog safely,
//! [`migrate::status`] compares it with the history, [`check::Check`] audits
//! it read-only. [`verify::Verify::static_only`] is the precheck that needs
//! no database.
//!
//! # Modules
//!
//! - [`bounds`]: the ranges of every duration, count and size a user gives.
//! - [`catalog`]: the migration files, embedded or from a directory.
//! - [`config`]: `rollsafe.toml`, a project's settings.
//! - [`capture`]: statement sets from a running app's `pg_stat_statements`.
//! - [`sandbox`]: throwaway PostgreSQL (docker, local binaries, existing server).
//! - [`pg`]: PostgreSQL knowledge below everything: lock modes, the
//!   catalogue reader, quoting.
//! - [`db`]: connecting, URL redaction.
//! - [`errors`]: one line for any error.
//! - [`app`]: the app versions a rehearsal replays (statement sets, their
//!   format) and what a project plugs in (app drivers, its own rules).
//! - [`dao`]: the shipped project: the attached-functions DAO, its
//!   statement sets and rules.
//! - [`schema`]: schema snapshots (introspection, comparison).
//! - [`seed`]: rows in any schema: the apps' seeds, else generated from
//!   the catalogue (verify, benches and tests fill databases with it).
//! - [`verify`]: the rehearsal pipeline and its checks.
//! - [`report`]: findings and their text / JSON / JUnit renderings.
//! - [`migrate`]: safe apply to a real database, and its status.
//! - [`check`]: read-only audit of a real database.
//! - [`sql`]: splitting SQL files into statements.
//! - [`tables`]: the tables a rehearsal measures, and how messages name them.
//! - [`validity`]: invalid indexes and NOT VALID constraints (verify and check).

pub mod app;
pub mod bounds;
pub mod capture;
pub mod catalog;
pub mod check;
pub mod config;
pub mod dao;
pub mod db;
pub mod errors;
pub mod framework;
pub mod lint;
pub mod lock_policy;
pub mod migrate;
pub mod pg;
pub mod report;
pub mod sandbox;
pub mod schema;
pub mod seed;
pub mod sessions;
pub mod sql;
pub mod tables;
pub mod target;
pub mod validity;
pub mod verify;

#[cfg(test)]
mod docs_match;

/// The shape of the imports stays: no module imports one of a higher
/// layer (`src/layers.txt`; `ci/import-graph.py` reports the whole graph,
/// circles of files included), and inside verify no file imports a higher
/// floor (`src/verify/layers.txt`).
#[cfg(test)]
mod shape {
    use std::path::Path;

    const LAYERS: &str = include_str!("layers.txt");
    /// verify's own floors, in the same format.
    const VERIFY_LAYERS: &str = include_str!("verify/layers.txt");

    /// Each top-level module's layer (its line in `src/layers.txt`).
    fn layer_of(module: &str) -> Option<usize> {
        line_of(LAYERS, module)
    }

    /// The line of `layers` (comments aside) that lists `module`.
    fn line_of(layers: &str, module: &str) -> Option<usize> {
        layers
            .lines()
            .map(|l| l.split('#').next().unwrap_or_default())
            .filter(|l| l.contains(':'))
            .position(|l| {
                l.split_once(':')
                    .unwrap()
                    .1
                    .split_whitespace()
                    .any(|m| m == module)
            })
    }

    /// The top-level modules `code` names through `crate::`, comments,
    /// string literals and `#[cfg(test)]` modules aside (a test may reach
    /// anywhere).
    fn imported(code: &str) -> Vec<String> {
        let code = match code.find("#[cfg(test)]\nmod ") {
            Some(at) => &code[..at],
            None => code,
        };
        let mut out = Vec::new();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or_default();
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                let before = rest[..at].chars().last();
                rest = &rest[at + "crate::".len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '"') {
                    continue;
                }
                if let Some(group) = rest.strip_prefix('{') {
                    let inner = group.split('}').next().unwrap_or_default();
                    out.extend(inner.split(',').map(|p| top(p.trim())));
                } else {
                    out.push(top(rest));
                }
            }
        }
        out.retain(|m| !m.is_empty());
        out
    }

    /// The modules of verify that `code` names, the file being verify's
    /// module `at` (its path below `src/verify`: `["measure", "planning"]`;
    /// empty for the root): through `crate::verify::` or a chain of
    /// `super::`. An item of the root (`Run`, a re-export) is `mod`.
    fn verify_imported(code: &str, at: &[String]) -> Vec<String> {
        let code = match code.find("#[cfg(test)]\nmod ") {
            Some(i) => &code[..i],
            None => code,
        };
        let mut out = Vec::new();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or_default();
            let mut rest = line;
            loop {
                let found = ["crate::verify::", "super::"]
                    .iter()
                    .filter_map(|p| rest.find(p).map(|i| (i, *p)))
                    .min();
                let Some((i, prefix)) = found else { break };
                let before = rest[..i].chars().last();
                rest = &rest[i + prefix.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '"') {
                    continue;
                }
                let mut path: Vec<String> = if prefix == "super::" {
                    let mut p = at.to_vec();
                    if p.pop().is_none() {
                        continue; // the root's `super` is the crate
                    }
                    while let Some(r) = rest.strip_prefix("super::") {
                        rest = r;
                        if p.pop().is_none() {
                            break;
                        }
                    }
                    p
                } else {
                    Vec::new()
                };
                if let Some(first) = path.first_mut() {
                    out.push(std::mem::take(first));
                    continue;
                }
                let names: Vec<String> = match rest.strip_prefix('{') {
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .map(|p| top(p.trim()))
                        .collect(),
                    None => vec![top(rest)],
                };
                for n in names.into_iter().filter(|n| !n.is_empty() && n != "self") {
                    let own = line_of(VERIFY_LAYERS, &n).is_some();
                    out.push(if own { n } else { "mod".to_string() });
                }
            }
        }
        out
    }

    /// A file's module path below `src/verify` (`mod.rs` names its folder).
    fn verify_module(rel: &Path) -> Vec<String> {
        let mut parts: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        parts
    }

    #[test]
    fn no_file_of_verify_imports_a_higher_floor() {
        let verify = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/verify");
        let mut all = Vec::new();
        files(&verify, &mut all);
        let mut upward = Vec::new();
        for path in all {
            let rel = path.strip_prefix(&verify).unwrap();
            let at = verify_module(rel);
            let module = at.first().map_or("mod", String::as_str);
            let Some(own) = line_of(VERIFY_LAYERS, module) else {
                panic!(
                    "src/verify/{}: module {module} is on no floor of src/verify/layers.txt",
                    rel.display()
                );
            };
            let code = std::fs::read_to_string(&path).unwrap();
            for m in verify_imported(&code, &at) {
                if line_of(VERIFY_LAYERS, &m).is_some_and(|l| l > own) {
                    upward.push(format!("src/verify/{} -> verify::{m}", rel.display()));
                }
            }
        }
        upward.sort();
        upward.dedup();
        assert!(
            upward.is_empty(),
            "imports from a lower floor of verify up: {upward:#?}"
        );
    }

    #[test]
    fn verify_imports_resolve_super_chains_and_root_items() {
        let at = ["measure".to_string(), "planning".to_string()];
        let code = "use super::roles::Sessions;\nuse super::super::checks::plan;\nuse crate::verify::{evidence, Run};\n/// crate::verify::stages\nlet x = crate::verify::stages::y();";
        assert_eq!(
            verify_imported(code, &at),
            ["measure", "checks", "evidence", "mod", "stages"]
        );
        assert_eq!(
            verify_imported("use super::Run;", &["options".to_string()]),
            ["mod"]
        );
        assert!(line_of(VERIFY_LAYERS, "evidence") < line_of(VERIFY_LAYERS, "measure"));
        assert!(line_of(VERIFY_LAYERS, "stages") < line_of(VERIFY_LAYERS, "mod"));
    }

    fn top(path: &str) -> String {
        path.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    }

    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn no_module_imports_a_higher_layer() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut all = Vec::new();
        files(&src, &mut all);
        let mut upward = Vec::new();
        for path in all {
            let rel = path.strip_prefix(&src).unwrap();
            let module = top(&rel.to_string_lossy());
            let Some(own) = layer_of(&module) else {
                panic!(
                    "{}: module {module} is in no layer of src/layers.txt",
                    rel.display()
                );
            };
            let code = std::fs::read_to_string(&path).unwrap();
            for m in imported(&code) {
                if layer_of(&m).is_some_and(|l| l > own) {
                    upward.push(format!("{} -> crate::{m}", rel.display()));
                }
            }
        }
        upward.sort();
        upward.dedup();
        assert!(
            upward.is_empty(),
            "imports from a lower layer up: {upward:#?}"
        );
    }

    #[test]
    fn imports_are_read_from_use_trees_and_paths_not_comments() {
        let code = "use crate::db::{self, x};\nuse crate::{app, sql::split};\n// crate::verify\nlet a = crate::tables::list(c);\n#[cfg(test)]\nmod tests { use crate::dao; }";
        assert_eq!(imported(code), ["db", "app", "sql", "tables"]);
        assert_eq!(layer_of("pg"), Some(0));
        assert!(layer_of("verify") < layer_of("dao"));
    }
}

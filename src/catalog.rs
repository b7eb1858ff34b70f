//! The migration set: loading, naming, checksums and directives.
//!
//! A catalog is the ordered list of `V{n}__{name}.sql` files (refinery
//! naming), either embedded in the binary at build time or read from a
//! directory (`--migrations DIR`, a proposed change). Every consumer —
//! `migrate`, `verify`, `check` — starts from a [`Catalog`], so a bad file is
//! refused with the same message everywhere, before anything touches a
//! database.
//!
//! Checksums are refinery's (SipHash-1-3 over name, version and SQL), so a
//! history table written by rollsafe can be compared with the files, and an
//! edited applied migration shows up as divergent.
//!
//! Directives are SQL comments of the form `-- rollsafe:<key> <value>` that
//! tell the verifier what a migration promises and `migrate` how to apply
//! it; see [`Directive`].

use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The files embedded at build time (see `build.rs`).
const EMBEDDED: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/embedded_migrations.rs"));

/// What a migration promises the verifier, from `-- rollsafe:` comments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Directive {
    /// `-- rollsafe:backfill <table> <predicate>`: after the migration, every
    /// row that existed before it satisfies `<predicate>` (SQL over the
    /// table's columns), e.g. `attached_functions is_ready = true`.
    Backfill { table: String, predicate: String },
    /// `-- rollsafe:no-transaction`: the file runs outside a transaction,
    /// one statement at a time (for `CREATE INDEX CONCURRENTLY` and other
    /// statements PostgreSQL refuses inside one). Its statements must be
    /// re-runnable, since a failed or killed run is run again from the top
    /// (`migrate::no_transaction`).
    NoTransaction,
    /// `-- rollsafe:batched-update <table> SET <col> = <expr> WHERE
    /// <predicate>`: after the file's statements, `migrate` updates the rows
    /// matching `<predicate>` in primary-key batches, each its own short
    /// transaction, resumable (`migrate::backfill`).
    BatchedUpdate(BatchedUpdate),
}

/// One `-- rollsafe:batched-update` directive, checked by squawk's grammar
/// as the `UPDATE <table> SET … WHERE …` it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchedUpdate {
    /// The table as written (may be schema-qualified).
    pub table: String,
    /// The assignments after `SET`, as written: `b = a * 2, c = 1`.
    pub set: String,
    /// The `WHERE` condition: the rows still to update. A row the update
    /// has handled must no longer match it (the run checks this at the end).
    pub predicate: String,
    /// 1-based line of the directive in its file.
    pub line: usize,
}

/// The directive keys rollsafe knows; any other `-- rollsafe:` key is
/// refused with its file and line (a typo must never be silently ignored).
pub const DIRECTIVES: &[&str] = &["backfill", "no-transaction", "batched-update"];

/// One migration file.
#[derive(Debug, Clone)]
pub struct Migration {
    pub version: i32,
    /// The part after `__`, e.g. `attached_functions_is_ready`.
    pub name: String,
    /// The file name, e.g. `V3__attached_functions_is_ready.sql`.
    pub file: String,
    pub sql: String,
    /// refinery's checksum of (name, version, sql).
    pub checksum: u64,
    pub directives: Vec<Directive>,
}

impl Migration {
    /// `V3__attached_functions_is_ready`, refinery's name for it.
    pub fn refinery_name(&self) -> String {
        format!("V{}__{}", self.version, self.name)
    }

    /// The refinery migration for this file.
    pub fn to_refinery(&self) -> refinery::Migration {
        refinery::Migration::unapplied(&self.refinery_name(), &self.sql)
            .expect("catalog validated the name")
    }

    pub fn backfills(&self) -> impl Iterator<Item = (&str, &str)> {
        self.directives.iter().filter_map(|d| match d {
            Directive::Backfill { table, predicate } => Some((table.as_str(), predicate.as_str())),
            _ => None,
        })
    }

    /// The file says `-- rollsafe:no-transaction`.
    pub fn no_transaction(&self) -> bool {
        self.directives.contains(&Directive::NoTransaction)
    }

    /// The file's `-- rollsafe:batched-update` directives, in file order.
    pub fn batched_updates(&self) -> impl Iterator<Item = &BatchedUpdate> {
        self.directives.iter().filter_map(|d| match d {
            Directive::BatchedUpdate(b) => Some(b),
            _ => None,
        })
    }

    /// Whether `migrate` applies this file statement by statement rather
    /// than in one transaction with its history row: `no-transaction`, and
    /// any file with a batched update (its batches commit one by one, so
    /// the file as a whole cannot be one transaction).
    pub fn runs_outside_transaction(&self) -> bool {
        self.no_transaction() || self.batched_updates().next().is_some()
    }
}

impl fmt::Display for Migration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "V{} ({})", self.version, self.file)
    }
}

/// Where a catalog came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Embedded,
    Dir(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Embedded => f.write_str("the migrations embedded in rollsafe"),
            Source::Dir(p) => write!(f, "{}", p.display()),
        }
    }
}

#[derive(Debug, Error)]
pub enum CatalogError {
    #[error("migrations directory {0} does not exist or is not a directory; pass --migrations with the directory holding the V<n>__<name>.sql files")]
    MissingDir(PathBuf),
    #[error("cannot read {path}: {detail}")]
    Io { path: PathBuf, detail: String },
    #[error("{file}: not a migration file name; expected V<version>__<name>.sql (e.g. V4__add_index.sql: whole version, two underscores, letters/digits/underscores)")]
    BadName { file: String },
    #[error("{file}: is not valid UTF-8 (byte {offset}); save the file as UTF-8")]
    NotUtf8 { file: String, offset: usize },
    #[error("version {version} is used twice ({first} and {second}); give each migration its own version")]
    DuplicateVersion {
        version: i32,
        first: String,
        second: String,
    },
    #[error("{file}:{line}: malformed directive `{text}`; expected {expected}")]
    BadDirective {
        file: String,
        line: usize,
        text: String,
        expected: String,
    },
    #[error("{file}:{line}: unknown directive `-- rollsafe:{key}`; rollsafe knows {known} (fix the spelling, or make it a plain comment by removing `rollsafe:`)")]
    UnknownDirective {
        file: String,
        line: usize,
        key: String,
        known: String,
    },
    #[error("{source_name} holds no migration files (V<n>__<name>.sql)")]
    Empty { source_name: String },
}

/// An ordered, validated set of migrations.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub source: Source,
    migrations: Vec<Migration>,
}

/// Parses `V3__name.sql` into (3, "name"); None for anything else.
fn parse_file_name(file: &str) -> Option<(i32, String)> {
    let stem = file.strip_suffix(".sql")?;
    let rest = stem.strip_prefix('V')?;
    let (version, name) = rest.split_once("__")?;
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    Some((version.parse().ok()?, name.to_string()))
}

fn parse_directives(file: &str, sql: &str) -> Result<Vec<Directive>, CatalogError> {
    let mut out = Vec::new();
    for (i, line) in sql.lines().enumerate() {
        let Some(rest) = line.trim().strip_prefix("--") else {
            continue;
        };
        let Some(body) = rest.trim().strip_prefix("rollsafe:") else {
            continue;
        };
        let (key, value) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
        let value = value.trim();
        let bad_because = |expected: &str| CatalogError::BadDirective {
            file: file.to_string(),
            line: i + 1,
            text: line.trim().to_string(),
            expected: expected.to_string(),
        };
        let bad = || bad_because("`-- rollsafe:backfill <table> <predicate>`");
        match key {
            "no-transaction" => {
                if !value.is_empty() {
                    return Err(bad_because(
                        "`-- rollsafe:no-transaction` alone on its line (it takes no value)",
                    ));
                }
                if !out.contains(&Directive::NoTransaction) {
                    out.push(Directive::NoTransaction);
                }
            }
            "batched-update" => {
                let parsed = parse_batched_update(value, i + 1).map_err(|why| {
                    bad_because(&format!(
                        "`-- rollsafe:batched-update <table> SET <column> = <expression> WHERE <predicate>` on one line ({why})"
                    ))
                })?;
                out.push(Directive::BatchedUpdate(parsed));
            }
            "backfill" => {
                let (table, predicate) = value.split_once(char::is_whitespace).ok_or_else(bad)?;
                if predicate.trim().is_empty() {
                    return Err(bad());
                }
                out.push(Directive::Backfill {
                    table: table.to_string(),
                    predicate: predicate.trim().to_string(),
                });
            }
            _ => {
                return Err(CatalogError::UnknownDirective {
                    file: file.to_string(),
                    line: i + 1,
                    key: key.to_string(),
                    known: DIRECTIVES
                        .iter()
                        .map(|d| format!("`-- rollsafe:{d}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            }
        }
    }
    Ok(out)
}

/// Reads `<table> SET … WHERE …` as the `UPDATE` statement it stands for,
/// with squawk's grammar (a `WHERE` inside a subquery of the expression is
/// not the predicate's). Refuses what a batched update cannot do: no
/// `WHERE` (a predicate is what says which rows are left), `FROM`,
/// `RETURNING`, `WITH`, or more than one statement.
fn parse_batched_update(value: &str, line: usize) -> Result<BatchedUpdate, String> {
    use squawk_syntax::ast::{self, AstNode};
    use squawk_syntax::SyntaxKind;
    let update_sql = format!("UPDATE {value}");
    let found = crate::sql::with_parse(&update_sql, |parse| {
        if let Some(e) = parse.errors().first() {
            return Err(format!("not a valid UPDATE: {e}"));
        }
        let stmts: Vec<ast::Stmt> = parse.tree().stmts().collect();
        let [ast::Stmt::Update(update)] = stmts.as_slice() else {
            return Err("not one UPDATE statement".into());
        };
        let node = update.syntax();
        let child = |kind: SyntaxKind| node.children().find(|n| n.kind() == kind);
        for (kind, what) in [
            (SyntaxKind::FROM_CLAUSE, "FROM"),
            (SyntaxKind::RETURNING_CLAUSE, "RETURNING"),
            (SyntaxKind::WITH_CLAUSE, "WITH"),
        ] {
            if child(kind).is_some() {
                return Err(format!("{what} is not supported"));
            }
        }
        let table = update
            .relation_name()
            .map(|r| r.syntax().text().to_string())
            .ok_or("no table")?;
        let set = update
            .set_clause()
            .and_then(|s| s.set_column_list())
            .map(|l| l.syntax().text().to_string())
            .ok_or("no SET")?;
        let predicate = child(SyntaxKind::WHERE_CLAUSE)
            .and_then(|w| w.children().next())
            .map(|e| e.text().to_string())
            .ok_or("no WHERE predicate")?;
        Ok((table, set, predicate))
    })
    .map_err(|e| e.to_string())??;
    let (table, set, predicate) = found;
    Ok(BatchedUpdate {
        table: table.trim().to_string(),
        set: set.trim().to_string(),
        predicate: predicate.trim().to_string(),
        line,
    })
}

impl Catalog {
    /// The migrations embedded in this binary.
    pub fn embedded() -> Result<Catalog, CatalogError> {
        Catalog::from_files(
            Source::Embedded,
            EMBEDDED.iter().map(|(f, b)| (f.to_string(), b.to_vec())),
        )
    }

    /// The `.sql` files of a directory (other files are ignored).
    pub fn from_dir(dir: &Path) -> Result<Catalog, CatalogError> {
        if !dir.is_dir() {
            return Err(CatalogError::MissingDir(dir.to_path_buf()));
        }
        let io = |path: &Path, e: std::io::Error| CatalogError::Io {
            path: path.to_path_buf(),
            detail: e.to_string(),
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let path = entry.map_err(|e| io(dir, e))?.path();
            if path.extension().is_some_and(|x| x == "sql") && path.is_file() {
                let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                files.push((name, bytes));
            }
        }
        Catalog::from_files(Source::Dir(dir.to_path_buf()), files.into_iter())
    }

    /// `--migrations DIR` when given, else the embedded set.
    pub fn load(dir: Option<&Path>) -> Result<Catalog, CatalogError> {
        match dir {
            Some(d) => Catalog::from_dir(d),
            None => Catalog::embedded(),
        }
    }

    fn from_files(
        source: Source,
        files: impl Iterator<Item = (String, Vec<u8>)>,
    ) -> Result<Catalog, CatalogError> {
        let mut migrations: Vec<Migration> = Vec::new();
        for (file, bytes) in files {
            let (version, name) = parse_file_name(&file)
                .ok_or_else(|| CatalogError::BadName { file: file.clone() })?;
            let sql = String::from_utf8(bytes).map_err(|e| CatalogError::NotUtf8 {
                file: file.clone(),
                offset: e.utf8_error().valid_up_to(),
            })?;
            let directives = parse_directives(&file, &sql)?;
            let checksum = refinery::Migration::unapplied(&format!("V{version}__{name}"), &sql)
                .map_err(|_| CatalogError::BadName { file: file.clone() })?
                .checksum();
            migrations.push(Migration {
                version,
                name,
                file,
                sql,
                checksum,
                directives,
            });
        }
        migrations.sort_by(|a, b| a.version.cmp(&b.version).then(a.file.cmp(&b.file)));
        for pair in migrations.windows(2) {
            if pair[0].version == pair[1].version {
                return Err(CatalogError::DuplicateVersion {
                    version: pair[0].version,
                    first: pair[0].file.clone(),
                    second: pair[1].file.clone(),
                });
            }
        }
        if migrations.is_empty() {
            return Err(CatalogError::Empty {
                source_name: source.to_string(),
            });
        }
        Ok(Catalog { source, migrations })
    }

    /// All migrations, by ascending version.
    pub fn migrations(&self) -> &[Migration] {
        &self.migrations
    }

    pub fn get(&self, version: i32) -> Option<&Migration> {
        self.migrations.iter().find(|m| m.version == version)
    }

    /// Where `m` lives as a reviewer sees it: `migrations/<file>` for the
    /// embedded set (the repository's directory), `DIR/<file>` otherwise.
    pub fn path_of(&self, m: &Migration) -> String {
        match &self.source {
            Source::Embedded => format!("migrations/{}", m.file),
            Source::Dir(d) => d.join(&m.file).display().to_string(),
        }
    }

    /// The highest version.
    pub fn latest(&self) -> i32 {
        self.migrations.last().map(|m| m.version).unwrap_or(0)
    }

    /// Migrations with version ≤ `target`.
    pub fn up_to(&self, target: i32) -> impl Iterator<Item = &Migration> {
        self.migrations.iter().filter(move |m| m.version <= target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> impl Iterator<Item = (String, Vec<u8>)> {
        list.iter()
            .map(|(f, s)| (f.to_string(), s.as_bytes().to_vec()))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn embedded_set_is_v1_to_v3_with_the_is_ready_backfill() {
        let c = Catalog::embedded().unwrap();
        let versions: Vec<i32> = c.migrations().iter().map(|m| m.version).collect();
        assert_eq!(versions, [1, 2, 3]);
        let v3 = c.get(3).unwrap();
        assert_eq!(v3.name, "attached_functions_is_ready");
        assert_eq!(
            v3.backfills().collect::<Vec<_>>(),
            [("attached_functions", "is_ready = true")]
        );
        assert_eq!(v3.checksum, v3.to_refinery().checksum());
    }

    #[test]
    fn names_are_validated() {
        assert_eq!(
            parse_file_name("V12__add_x.sql"),
            Some((12, "add_x".into()))
        );
        for bad in [
            "V1_x.sql",
            "v1__x.sql",
            "V__x.sql",
            "V1__.sql",
            "V1.5__x.sql",
            "V1__a-b.sql",
            "V1__x.txt",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
        let err = Catalog::from_files(Source::Embedded, files(&[("V1_x.sql", "")])).unwrap_err();
        assert!(
            err.to_string()
                .contains("V1_x.sql: not a migration file name"),
            "{err}"
        );
    }

    #[test]
    fn duplicate_versions_non_utf8_and_bad_directives_are_refused() {
        let err = Catalog::from_files(
            Source::Embedded,
            files(&[("V1__a.sql", "select 1"), ("V01__b.sql", "select 2")]),
        )
        .unwrap_err();
        assert!(
            matches!(err, CatalogError::DuplicateVersion { version: 1, .. }),
            "{err}"
        );
        let err = Catalog::from_files(
            Source::Embedded,
            vec![("V1__a.sql".to_string(), vec![b's', 0xff, 0xfe])].into_iter(),
        )
        .unwrap_err();
        assert!(
            matches!(err, CatalogError::NotUtf8 { offset: 1, .. }),
            "{err}"
        );
        let err = Catalog::from_files(
            Source::Embedded,
            files(&[("V1__a.sql", "-- rollsafe:backfill only_a_table\nselect 1")]),
        )
        .unwrap_err();
        assert!(
            matches!(err, CatalogError::BadDirective { line: 1, .. }),
            "{err}"
        );
        let err = Catalog::from_files(
            Source::Embedded,
            files(&[(
                "V1__a.sql",
                "select 1;\n  -- rollsafe:backfil t x = 1\nselect 2",
            )]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "V1__a.sql:2: unknown directive `-- rollsafe:backfil`; rollsafe knows `-- rollsafe:backfill`, `-- rollsafe:no-transaction`, `-- rollsafe:batched-update` (fix the spelling, or make it a plain comment by removing `rollsafe:`)"
        );
    }

    #[test]
    fn no_transaction_and_batched_update_directives_are_read() {
        let c = Catalog::from_files(
            Source::Embedded,
            files(&[(
                "V1__a.sql",
                "-- rollsafe:no-transaction\n\
                 -- rollsafe:batched-update items SET b = (SELECT max(x) FROM y WHERE y.id = items.a), c = 1 WHERE b IS NULL AND a > 0\n\
                 CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON items (a);",
            )]),
        )
        .unwrap();
        let m = &c.migrations()[0];
        assert!(m.no_transaction() && m.runs_outside_transaction());
        let b: Vec<&BatchedUpdate> = m.batched_updates().collect();
        assert_eq!(
            b,
            [&BatchedUpdate {
                table: "items".into(),
                set: "b = (SELECT max(x) FROM y WHERE y.id = items.a), c = 1".into(),
                predicate: "b IS NULL AND a > 0".into(),
                line: 2,
            }]
        );
        for bad in [
            "-- rollsafe:batched-update items SET b = 1",
            "-- rollsafe:batched-update items b = 1 WHERE b IS NULL",
            "-- rollsafe:batched-update items SET b = 1 FROM y WHERE b IS NULL",
            "-- rollsafe:no-transaction please",
        ] {
            let err =
                Catalog::from_files(Source::Embedded, files(&[("V1__a.sql", bad)])).unwrap_err();
            assert!(
                matches!(err, CatalogError::BadDirective { line: 1, .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn missing_dir_and_empty_dir_are_refused() {
        let err = Catalog::from_dir(Path::new("/nonexistent/migrations")).unwrap_err();
        assert!(matches!(err, CatalogError::MissingDir(_)));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("README.md"), "not a migration").unwrap();
        let err = Catalog::from_dir(dir.path()).unwrap_err();
        assert!(matches!(err, CatalogError::Empty { .. }), "{err}");
    }
}

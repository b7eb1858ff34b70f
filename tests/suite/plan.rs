//! The `plan` check on real Postgres: a small shop project whose app reads
//! `books` by an indexed column and deletes `authors`, with one proposed
//! migration per test. Dropping the index the app's read uses is an error
//! naming it; replacing it first passes; an unrelated new index is
//! reported unused; a foreign key added without an index while the app
//! deletes parents is a warning with the lookup's plan; a statement on a
//! table that holds no rows is skipped, and says so.

use std::sync::Arc;

use anyhow::{ensure, Context};
use libtest_mimic::Completion;
use rollsafe::app::load_dir;
use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::report::{Finding, Report, Severity};
use rollsafe::sandbox::{docker, BackendChoice, BackendKind, Sandbox, SandboxBuilder};
use rollsafe::target::Target;

use crate::common::{cli, TestEnv};

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    let mut trials = crate::trials!(
        "plan",
        env,
        [
            dropping_the_index_an_apps_read_uses_is_an_error_naming_it,
            creating_the_replacement_first_passes,
            an_unrelated_new_index_passes_as_unused,
            a_foreign_key_without_index_while_the_app_deletes_parents_warns,
            a_statement_on_tables_without_rows_is_skipped_and_says_so,
        ]
    );
    let name = "plan::on_18_plans_follow_the_targets_imported_statistics";
    let env = Arc::clone(env);
    trials.push(libtest_mimic::Trial::ignorable_test(name, move || {
        let sandbox = match sandbox_of_18(&env) {
            Ok(Some(s)) => s,
            Ok(None) => return Ok(Completion::ignored_with(
                "needs PostgreSQL 18: the docker backend with image postgres:18 (ci/build-postgres-image.sh postgres:18 builds it)",
            )),
            Err(e) => return Err(format!("{e:#}").into()),
        };
        crate::common::timed(name, || {
            on_18_plans_follow_the_targets_imported_statistics(&sandbox)
        })
        .map(|()| Completion::Completed)
        .map_err(|e| format!("{e:#}").into())
    }));
    trials
}

const ROWS: u64 = 2000;

/// `books` with an index on `email`; `authors` it may reference; `notes`,
/// which nothing seeds: no app writes it, and the catalogue generator
/// cannot either (its CHECK refuses every new row: it stands for a table
/// whose rows come from somewhere the rehearsal does not know).
const BASE: &str = "CREATE TABLE authors (id bigint PRIMARY KEY, name text NOT NULL);
CREATE TABLE books (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL,
    title text NOT NULL,
    author_id bigint
);
CREATE INDEX books_email ON books (email);
CREATE TABLE notes (id bigint PRIMARY KEY, body text NOT NULL, CONSTRAINT notes_written_elsewhere CHECK (false));
";

const APP: &str = "-- app: shop\n-- needs: 1\n\n\
-- name: by_email\n\
-- param: $1 = (SELECT email FROM books ORDER BY id LIMIT 1)\n\
SELECT id, title FROM books WHERE email = $1;\n\n\
-- name: delete_author\n\
-- param: $1 = (SELECT a.id FROM authors a WHERE NOT EXISTS (SELECT 1 FROM books b WHERE b.author_id = a.id) ORDER BY a.id LIMIT 1)\n\
DELETE FROM authors WHERE id = $1;\n\n\
-- name: note_by_id\n\
-- param: $1 = 1\n\
SELECT body FROM notes WHERE id = $1;\n";

/// Half of the authors are referenced by books, the other half by none.
/// Runs again on a database that has rows (compat seeds a few more).
const SEED: &str = "INSERT INTO authors
SELECT (SELECT coalesce(max(id), 0) FROM authors) + i, 'author ' || i FROM generate_series(1, {rows}) i;
INSERT INTO books (email, title, author_id)
SELECT 'reader' || i || '.' || md5(random()::text) || '@example.com', 'title ' || i,
       (SELECT max(id) FROM authors) - {rows} + 1 + i % greatest({rows} / 2, 1)
  FROM generate_series(1, {rows}) i;";

/// The project with `proposed` as V2, rehearsed through the library.
fn rehearse(env: &TestEnv, proposed: &str) -> anyhow::Result<Report> {
    let (migrations, app_dir) = project(proposed)?;
    let catalog = Catalog::from_dir(migrations.path())?;
    let apps = load_dir(app_dir.path(), &catalog)?;
    let r = shipped::verify(catalog)?
        .apps(apps)
        .rows(ROWS)
        .run(&env.sandbox)?;
    for f in r
        .findings
        .iter()
        .filter(|f| f.check == "plan" || f.severity >= Severity::Warn)
    {
        eprintln!("{}", line(f));
    }
    Ok(r)
}

fn project(proposed: &str) -> anyhow::Result<(tempfile::TempDir, tempfile::TempDir)> {
    let migrations = tempfile::tempdir()?;
    std::fs::write(migrations.path().join("V1__base.sql"), BASE)?;
    std::fs::write(migrations.path().join("V2__proposed.sql"), proposed)?;
    let app_dir = tempfile::tempdir()?;
    std::fs::write(app_dir.path().join("shop.sql"), APP)?;
    std::fs::write(app_dir.path().join("shop.seed.sql"), SEED)?;
    Ok((migrations, app_dir))
}

fn line(f: &Finding) -> String {
    format!(
        "V{} {} {}: {}",
        f.migration.unwrap_or(0),
        f.severity,
        f.id,
        f.message
    )
}

fn errors(r: &Report) -> Vec<String> {
    r.errors().map(line).collect()
}

fn find<'r>(r: &'r Report, id: &str) -> anyhow::Result<&'r Finding> {
    r.findings
        .iter()
        .find(|f| f.id == id && f.migration == Some(2))
        .with_context(|| {
            format!(
                "no {id} on V2; plan findings: {:#?}",
                r.findings
                    .iter()
                    .filter(|f| f.check == "plan")
                    .map(line)
                    .collect::<Vec<_>>()
            )
        })
}

fn dropping_the_index_an_apps_read_uses_is_an_error_naming_it(env: &TestEnv) -> anyhow::Result<()> {
    let r = rehearse(
        env,
        "-- rollsafe:no-transaction\nDROP INDEX CONCURRENTLY IF EXISTS books_email;\n",
    )?;
    let f = find(&r, "plan.regressed")?;
    ensure!(f.severity == Severity::Error, "{}", line(f));
    ensure!(
        f.message.contains("the shop app's `by_email` read books through index books_email before V2 and through a sequential scan after it (V2 drops books_email)"),
        "{}",
        f.message
    );
    ensure!(
        f.message.contains(&format!("all {ROWS} rows of books"))
            && f.message.contains("at the seeded size"),
        "{}",
        f.message
    );
    ensure!(
        f.evidence["index_before"] == "books_email" && f.evidence["size"] == "seeded",
        "{:?}",
        f.evidence
    );
    ensure!(
        f.evidence["before"][0]["node"] == "Index Scan"
            && f.evidence["after"][0]["node"] == "Seq Scan",
        "{:?}",
        f.evidence
    );
    ensure!(
        f.advice
            .starts_with("create the replacement index before dropping the old one"),
        "{}",
        f.advice
    );
    ensure!(
        f.location.as_ref().is_some_and(|l| l.line == 2),
        "{:?}",
        f.location
    );
    eprintln!("plan change: {}", f.evidence["plan_change"]);
    ensure!(
        errors(&r).len() == 1,
        "only the plan regression fails: {:#?}",
        errors(&r)
    );

    // The CLI's text report summarises it, and production sizes under the
    // budget make it a warning.
    let (migrations, app_dir) =
        project("-- rollsafe:no-transaction\nDROP INDEX CONCURRENTLY IF EXISTS books_email;\n")?;
    let run = |extra: &[&str]| -> anyhow::Result<(i32, String)> {
        let out = cli()
            .args([
                "verify",
                "--postgres",
                env.sandbox.admin_url(),
                "--rows",
                "2000",
            ])
            .arg("--migrations")
            .arg(migrations.path())
            .arg("--apps")
            .arg(app_dir.path())
            .args(extra)
            .output()?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    };
    let (code, text) = run(&["--table-rows", "books=2000", "--plan-budget", "1s"])?;
    ensure!(code == 0, "exit {code}: {text}");
    ensure!(text.contains("warn  plan.regressed"), "{text}");
    let (code, text) = run(&[])?;
    ensure!(code == 1, "exit {code}: {text}");
    let summary = text
        .lines()
        .skip_while(|l| !l.starts_with("plans (before → after)"))
        .take(3)
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("{summary}");
    ensure!(
        summary.contains("shop.by_email on books: Index Scan using books_email"),
        "{text}"
    );
    ensure!(
        text.contains("create the replacement index before dropping books_email"),
        "{text}"
    );
    Ok(())
}

fn creating_the_replacement_first_passes(env: &TestEnv) -> anyhow::Result<()> {
    let r = rehearse(
        env,
        "-- rollsafe:no-transaction\n\
         CREATE INDEX CONCURRENTLY IF NOT EXISTS books_email_title ON books (email, title);\n\
         DROP INDEX CONCURRENTLY IF EXISTS books_email;\n",
    )?;
    ensure!(r.passed, "expected no errors: {:#?}", errors(&r));
    let m = find(&r, "plan.measured")?;
    ensure!(
        m.message.contains("books_email → books_email_title"),
        "{}",
        m.message
    );
    ensure!(
        !r.findings.iter().any(|f| f.id == "plan.unused-index"),
        "the replacement is used"
    );
    Ok(())
}

fn an_unrelated_new_index_passes_as_unused(env: &TestEnv) -> anyhow::Result<()> {
    let r = rehearse(
        env,
        "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS books_title ON books (title);\n",
    )?;
    ensure!(r.passed, "expected no errors: {:#?}", errors(&r));
    let f = find(&r, "plan.unused-index")?;
    ensure!(f.severity == Severity::Info, "{}", line(f));
    ensure!(
        f.message
            .contains("V2 builds index books_title on books, which no statement of the apps running after it (shop) reads through"),
        "{}",
        f.message
    );
    Ok(())
}

fn a_foreign_key_without_index_while_the_app_deletes_parents_warns(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let r = rehearse(
        env,
        "ALTER TABLE books ADD CONSTRAINT books_author_fk FOREIGN KEY (author_id) REFERENCES authors (id) NOT VALID;\n",
    )?;
    let f = find(&r, "plan.fk-without-index")?;
    ensure!(f.severity == Severity::Warn, "{}", line(f));
    ensure!(
        f.message.contains("adds foreign key books_author_fk on books (author_id) with no index on those columns, and shop.delete_author delete or update rows of authors"),
        "{}",
        f.message
    );
    ensure!(
        f.message.contains("plans as Seq Scan"),
        "the lookup was measured: {}",
        f.message
    );
    ensure!(!r.errors().any(|e| e.check == "plan"), "{:#?}", errors(&r));
    Ok(())
}

fn a_statement_on_tables_without_rows_is_skipped_and_says_so(env: &TestEnv) -> anyhow::Result<()> {
    let r = rehearse(env, "ALTER TABLE notes ADD COLUMN tag text;\n")?;
    ensure!(r.passed, "expected no errors: {:#?}", errors(&r));
    let f = find(&r, "plan.skipped")?;
    ensure!(f.severity == Severity::Skipped, "{}", line(f));
    ensure!(
        f.message.contains("the shop app's `note_by_id` was not compared before and after V2: notes holds no rows before or after V2"),
        "{}",
        f.message
    );
    // The others were compared and kept their paths.
    let m = find(&r, "plan.measured")?;
    ensure!(
        m.evidence["regressed"] == 0 && m.evidence["skipped"] == 1,
        "{:?}",
        m.evidence
    );
    Ok(())
}

/// A PostgreSQL 18 sandbox: the suite's own when it runs 18, else one of
/// its own on docker; None where neither can be had.
fn sandbox_of_18(env: &TestEnv) -> anyhow::Result<Option<SandboxOr<'_>>> {
    if env.sandbox.server_major() >= 18 {
        return Ok(Some(SandboxOr::Shared(&env.sandbox)));
    }
    if env.sandbox.kind() != BackendKind::Docker || !docker::image_present("postgres:18") {
        return Ok(None);
    }
    let own = SandboxBuilder::from_env()?
        .backend(BackendChoice::Docker)
        .postgres_major(18)
        .start()
        .context("starting a PostgreSQL 18 sandbox")?;
    Ok(Some(SandboxOr::Own(Box::new(own))))
}

enum SandboxOr<'a> {
    Shared(&'a Sandbox),
    Own(Box<Sandbox>),
}

impl std::ops::Deref for SandboxOr<'_> {
    type Target = Sandbox;
    fn deref(&self) -> &Sandbox {
        match self {
            SandboxOr::Shared(s) => s,
            SandboxOr::Own(s) => s,
        }
    }
}

/// Orders whose status is skewed in production (1% pending), even in the
/// seeded rows (half pending).
const ORDERS: &str = "CREATE TABLE orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status text NOT NULL
);
CREATE INDEX orders_status ON orders (status);
";

const DESK: &str = "-- app: desk\n-- needs: 1\n\n\
-- name: pending\n\
SELECT id FROM orders WHERE status = 'pending';\n";

const DESK_SEED: &str = "INSERT INTO orders (status)
SELECT CASE WHEN i % 2 = 0 THEN 'pending' ELSE 'done' END FROM generate_series(1, {rows}) i;";

/// The estimated rows of the `pending` read before the migration, from
/// the plan summary's evidence ("orders: Seq Scan (est. 1000 rows, …)").
fn estimated_pending(r: &Report) -> anyhow::Result<(String, f64)> {
    let m = r
        .findings
        .iter()
        .find(|f| f.id == "plan.measured")
        .context("no plan.measured")?;
    let line = m.evidence["plans"]["desk.pending"]["before"]
        .as_str()
        .context("no plan of desk.pending")?
        .to_string();
    let rows: f64 = line
        .split("(est. ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no estimate in `{line}`"))?;
    Ok((line, rows))
}

fn on_18_plans_follow_the_targets_imported_statistics(sandbox: &Sandbox) -> anyhow::Result<()> {
    let migrations = tempfile::tempdir()?;
    std::fs::write(migrations.path().join("V1__orders.sql"), ORDERS)?;
    std::fs::write(
        migrations.path().join("V2__note.sql"),
        "ALTER TABLE orders ADD COLUMN note text;\n",
    )?;
    let app_dir = tempfile::tempdir()?;
    std::fs::write(app_dir.path().join("desk.sql"), DESK)?;
    std::fs::write(app_dir.path().join("desk.seed.sql"), DESK_SEED)?;
    let catalog = Catalog::from_dir(migrations.path())?;
    let apps = load_dir(app_dir.path(), &catalog)?;

    // "Production": at V1, 100000 orders of which 1% are pending, analyzed.
    let production = sandbox.fresh_database()?;
    rollsafe::migrate::migrate(
        production.url(),
        &catalog,
        &rollsafe::migrate::Options {
            target: Some(1),
            ..Default::default()
        },
    )?;
    production.connect()?.batch_execute(
        "INSERT INTO orders (status)
         SELECT CASE WHEN i % 100 = 0 THEN 'pending' ELSE 'done' END FROM generate_series(1, 100000) i;
         ANALYZE orders;",
    )?;

    let seeded = shipped::verify(catalog.clone())?
        .apps(apps.clone())
        .rows(ROWS)
        .run(sandbox)?;
    let imported = shipped::verify(catalog.clone())?
        .apps(apps)
        .rows(ROWS)
        .from_target(Target::read(production.url(), &catalog)?)
        .run(sandbox)?;
    let (seeded_plan, seeded_rows) = estimated_pending(&seeded)?;
    let (imported_plan, imported_rows) = estimated_pending(&imported)?;
    eprintln!("seeded statistics:   desk.pending {seeded_plan}");
    eprintln!("imported statistics: desk.pending {imported_plan}");
    let statistics = |r: &Report| {
        r.findings
            .iter()
            .find(|f| f.id == "plan.measured")
            .map(|f| f.evidence["statistics"].to_string())
            .unwrap_or_default()
    };
    ensure!(
        statistics(&imported).contains("imported from the target for orders"),
        "{}",
        statistics(&imported)
    );
    ensure!(
        statistics(&seeded).contains("seeded"),
        "{}",
        statistics(&seeded)
    );
    // Half the seeded orders are pending; production's statistics say 1%
    // (of the rows the planner scales to the seeded table's pages).
    ensure!(
        seeded_rows > ROWS as f64 * 0.3,
        "seeded estimate {seeded_rows}: {seeded_plan}"
    );
    ensure!(
        imported_rows < ROWS as f64 * 0.05,
        "imported estimate {imported_rows}: {imported_plan}"
    );
    ensure!(
        seeded_plan.contains("Seq Scan") && !imported_plan.contains("Seq Scan"),
        "the plan follows the statistics: seeded `{seeded_plan}`, imported `{imported_plan}`"
    );
    ensure!(imported.passed, "{:#?}", errors(&imported));
    Ok(())
}

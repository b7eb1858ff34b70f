//! `verify --from-target` on a long history: the rehearsal's cost follows
//! the change, and it rehearses the pending migrations on the target's own
//! schema. (`--since` judging as a full run does is
//! `verify::since_rehearses_only_later_migrations_and_judges_them_as_a_full_run`:
//! the same property on five versions instead of sixty-one.)

use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Context};
use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::report::{Report, Severity};
use rollsafe::sandbox::Database;
use rollsafe::target::{Target, TargetError};
use rollsafe::verify::VerifyError;

use crate::common::{cli, fingerprint, ReadOnlyRole, TestEnv};
use crate::verify::with_later;

pub fn tests(env: &Arc<TestEnv>) -> Vec<libtest_mimic::Trial> {
    let trials = crate::trials!(
        "target",
        env,
        [
            from_target_rehearses_on_the_targets_own_schema,
            from_target_refuses_an_edited_applied_migration,
            from_target_under_a_read_only_role_leaves_the_target_unchanged,
            from_target_with_a_wrong_password_is_one_line_without_it,
            from_target_dumps_over_tls_verified_against_the_ca,
            from_target_copies_rows_only_from_tables_the_migrations_fill,
        ]
    );
    crate::common::own_server_only(
        env,
        trials,
        &["from_target_dumps_over_tls_verified_against_the_ca"],
    )
}

/// Rows per seeded database: the checks here are about which migrations are
/// rehearsed and on what schema, not about size.
const ROWS: u64 = 200;

/// The shipped V1..V3, V4..V60 each adding a nullable column, then `v61`.
fn history_60(v61: &str) -> tempfile::TempDir {
    history(60, v61)
}

/// The shipped V1..V3, trivial nullable columns up to V`n`, then `last`.
fn history(n: i32, last: &str) -> tempfile::TempDir {
    let mut later: Vec<String> = (4..=n)
        .map(|v| format!("ALTER TABLE attached_functions ADD COLUMN c{v} text;"))
        .collect();
    later.push(last.to_string());
    let refs: Vec<&str> = later.iter().map(String::as_str).collect();
    with_later(&refs)
}

/// A database at V60 of `dir`, migrated by the real migrator.
fn target_at_60(env: &TestEnv, dir: &Path) -> anyhow::Result<Database> {
    let db = env.fresh_database();
    let options = rollsafe::migrate::Options {
        target: Some(60),
        ..Default::default()
    };
    rollsafe::migrate::migrate(db.url(), &Catalog::from_dir(dir)?, &options)?;
    Ok(db)
}

fn from_target(env: &TestEnv, dir: &Path, url: &str) -> Result<Report, VerifyError> {
    let catalog = Catalog::from_dir(dir).expect("catalog");
    let target = Target::read(url, &catalog)?;
    shipped::verify(catalog)?
        .rows(ROWS)
        .from_target(target)
        .run(&env.sandbox)
}

/// (id, severity) of the warnings and errors about `v`, sorted.
fn verdicts(r: &Report, v: i32) -> Vec<(String, Severity)> {
    let mut out: Vec<(String, Severity)> = r
        .findings
        .iter()
        .filter(|f| f.migration == Some(v) && f.severity >= Severity::Warn)
        .map(|f| (f.id.clone(), f.severity))
        .collect();
    out.sort();
    out
}

fn from_target_rehearses_on_the_targets_own_schema(env: &TestEnv) -> anyhow::Result<()> {
    // V61 creates a table named like the index added by hand on the target:
    // harmless on the files' schema, a failure on production's.
    let conflicting = history_60("CREATE TABLE af_by_hand (id bigint PRIMARY KEY);");
    let target = target_at_60(env, conflicting.path())?;
    target.connect()?.batch_execute(
        "CREATE INDEX af_by_hand ON attached_functions (name);
         ALTER TABLE attached_functions ADD COLUMN incident_note text;",
    )?;
    let files_only = shipped::verify(Catalog::from_dir(conflicting.path())?)?
        .rows(ROWS)
        .since(60)?
        .run(&env.sandbox)?;
    ensure!(
        files_only.passed,
        "files-only run: {:?}",
        verdicts(&files_only, 61)
    );
    let on_target = from_target(env, conflicting.path(), target.url())?;
    ensure!(
        !on_target.passed,
        "the conflict with the hand-made index was not found"
    );
    ensure!(
        on_target
            .errors()
            .any(|f| f.migration == Some(61) && f.message.contains("af_by_hand")),
        "{:?}",
        verdicts(&on_target, 61)
    );
    let base = on_target.base.clone().unwrap_or_default();
    ensure!(
        base.contains("the schema of") && base.contains("at V60"),
        "{base}"
    );
    let password = crate::common::password_of(target.url())?;
    ensure!(!base.contains(&password), "password in the report: {base}");
    ensure!(on_target.applied_only == (1..=60).collect::<Vec<i32>>());

    // The column added in an incident is there too: a V61 that relies on
    // it passes on the target and fails on the files alone.
    let relying =
        history_60("ALTER TABLE attached_functions ALTER COLUMN incident_note SET DEFAULT 'none';");
    let target2 = target_at_60(env, relying.path())?;
    target2
        .connect()?
        .batch_execute("ALTER TABLE attached_functions ADD COLUMN incident_note text;")?;
    let on_target = from_target(env, relying.path(), target2.url())?;
    ensure!(
        on_target.passed,
        "{:?}",
        on_target.errors().map(|f| &f.message).collect::<Vec<_>>()
    );
    let files_only = shipped::verify(Catalog::from_dir(relying.path())?)?
        .rows(ROWS)
        .since(60)?
        .run(&env.sandbox)?;
    ensure!(
        files_only
            .errors()
            .any(|f| f.migration == Some(61) && f.id == "apply.fails-on-empty"),
        "{:?}",
        verdicts(&files_only, 61)
    );
    Ok(())
}

fn from_target_refuses_an_edited_applied_migration(env: &TestEnv) -> anyhow::Result<()> {
    let dir = history_60("ALTER TABLE attached_functions ADD COLUMN c61 text;");
    let target = target_at_60(env, dir.path())?;
    // V42 edited after the target applied it.
    let file = dir.path().join("V42__later_38.sql");
    ensure!(file.is_file(), "fixture layout changed");
    std::fs::write(
        &file,
        "ALTER TABLE attached_functions ADD COLUMN c42 varchar(10);",
    )?;
    match from_target(env, dir.path(), target.url()) {
        Err(VerifyError::Target(e @ TargetError::Drift { .. })) => {
            let msg = e.to_string();
            ensure!(msg.contains("V42") || msg.contains("42"), "{msg}");
            ensure!(!msg.contains('\n'), "{msg}");
            Ok(())
        }
        Err(e) => anyhow::bail!("refused for another reason: {e}"),
        Ok(r) => anyhow::bail!(
            "an edited applied migration was rehearsed: passed={}",
            r.passed
        ),
    }
}

fn from_target_under_a_read_only_role_leaves_the_target_unchanged(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let dir = history_60("ALTER TABLE attached_functions ADD COLUMN c61 text;");
    let target = target_at_60(env, dir.path())?;
    let mut c = target.connect()?;
    let before = fingerprint(&mut c)?;
    let role = ReadOnlyRole::create(env, &target)?;
    let report = from_target(env, dir.path(), &role.url).context("read-only role")?;
    ensure!(
        report.passed,
        "{:?}",
        report.errors().map(|f| &f.message).collect::<Vec<_>>()
    );
    ensure!(
        report.migrations.iter().any(|m| m.version == 61) && report.applied_only.len() == 60,
        "{:?}",
        report.applied_only
    );
    ensure!(fingerprint(&mut c)? == before, "verify changed the target");
    let printed = serde_json::to_string(&report)?;
    ensure!(!printed.contains("ReadOnlyPw1"), "password in the report");
    ensure!(
        printed.contains("***"),
        "the report does not name the target"
    );
    Ok(())
}

fn from_target_with_a_wrong_password_is_one_line_without_it(env: &TestEnv) -> anyhow::Result<()> {
    let db = env.migrated_database(3);
    let mut url = url::Url::parse(db.url())?;
    url.set_password(Some("Wr0ngTargetPw")).unwrap();
    let out = cli()
        .args([
            "verify",
            "--postgres",
            env.sandbox.admin_url(),
            "--from-target",
            url.as_str(),
        ])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("[rollsafe verify"))
        .collect();
    ensure!(
        out.status.code() == Some(2),
        "exit {:?}: {stderr}",
        out.status.code()
    );
    ensure!(lines.len() == 1, "{stderr}");
    ensure!(
        lines[0].contains("password") || lines[0].contains("authentication"),
        "{stderr}"
    );
    ensure!(
        !stderr.contains("Wr0ngTargetPw") && !stdout.contains("Wr0ngTargetPw"),
        "{stderr}"
    );
    Ok(())
}

/// A server of its own that accepts TLS connections only (pg_hba
/// `hostnossl … reject`), with a certificate for `localhost` signed by the
/// test CA; returns it and the PKI.
fn tls_only_sandbox(
    env: &TestEnv,
) -> anyhow::Result<(rollsafe::sandbox::Sandbox, crate::migrate::Pki)> {
    use crate::migrate::{make_pki, ssl_in_use, write_server_file};
    let sandbox = env.builder.start().context("a sandbox for the TLS test")?;
    let pki = make_pki()?;
    let mut admin = sandbox.connect_admin()?;
    write_server_file(&mut admin, "rollsafe_test.crt", &pki.cert_pem)?;
    write_server_file(&mut admin, "rollsafe_test.key", &pki.key_pem)?;
    for sql in [
        "ALTER SYSTEM SET ssl_cert_file = 'rollsafe_test.crt'",
        "ALTER SYSTEM SET ssl_key_file = 'rollsafe_test.key'",
        "ALTER SYSTEM SET ssl = on",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql)?;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ssl_in_use(sandbox.admin_url())? {
        ensure!(
            std::time::Instant::now() < deadline,
            "the server did not turn ssl on"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let hba: String = admin.query_one("SHOW hba_file", &[])?.get(0);
    let data: String = admin.query_one("SHOW data_directory", &[])?.get(0);
    ensure!(hba == format!("{data}/pg_hba.conf"), "hba_file {hba}");
    write_server_file(
        &mut admin,
        "pg_hba.conf",
        b"local all all trust\nhostnossl all all all reject\nhostssl all all all scram-sha-256\n",
    )?;
    admin.batch_execute("SELECT pg_reload_conf()")?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    Ok((sandbox, pki))
}

fn from_target_dumps_over_tls_verified_against_the_ca(env: &TestEnv) -> anyhow::Result<()> {
    // ALTER SYSTEM and pg_hba.conf on someone else's server are not ours: the
    // trial is shown as ignored there (common::own_server_only).
    anyhow::ensure!(
        env.sandbox.kind() != rollsafe::sandbox::BackendKind::Server,
        "needs a server of its own"
    );
    let (tls_server, pki) = tls_only_sandbox(env)?;
    let prod = tls_server.fresh_database()?;
    let certs = tempfile::tempdir()?;
    let (right_ca, wrong_ca) = (certs.path().join("ca.pem"), certs.path().join("other.pem"));
    std::fs::write(&right_ca, &pki.ca_pem)?;
    std::fs::write(&wrong_ca, &pki.other_ca_pem)?;
    let u = url::Url::parse(prod.url())?;
    let password = u.password().unwrap_or_default().to_string();
    // The key=value form, which pg_dump used to get no TLS settings from.
    let conn = |sslmode: &str, ca: &Path| {
        format!(
            "host=localhost port={} user={} password={password} dbname={} sslmode={sslmode} sslrootcert={}",
            u.port().unwrap_or(5432),
            u.username(),
            prod.name(),
            ca.display()
        )
    };
    let verified = conn("verify-full", &right_ca);
    let catalog = Catalog::embedded()?;
    rollsafe::migrate::migrate(&verified, &catalog, &Default::default())?;

    // pg_dump from the run's own sandbox (a `docker run` with the CA
    // mounted, or the local binaries): over TLS, verified, or not at all.
    let schema = env.sandbox.dump_schema(&verified)?;
    ensure!(
        schema.contains("CREATE TABLE public.attached_functions"),
        "{schema}"
    );
    let plain = env
        .sandbox
        .dump_schema(&conn("disable", &right_ca))
        .err()
        .context("the server refuses connections without TLS")?
        .to_string();
    ensure!(plain.contains("no encryption"), "{plain}");
    let wrong = env
        .sandbox
        .dump_schema(&conn("verify-full", &wrong_ca))
        .err()
        .context("a certificate the given CA did not sign is refused")?
        .to_string();
    ensure!(
        wrong.contains("certificate verify failed") && !wrong.contains(&password),
        "{wrong}"
    );

    // The CLI end to end: rehearsed on the target's schema, dumped over TLS.
    let later = with_later(&["ALTER TABLE attached_functions ADD COLUMN note text;"]);
    let out = cli()
        .args([
            "verify",
            "--postgres",
            env.sandbox.admin_url(),
            "--rows",
            "200",
        ])
        .args(["--migrations", later.path().to_str().unwrap()])
        .args(["--from-target", &verified, "--format", "json"])
        .output()?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    ensure!(out.status.code() == Some(0), "{stdout}{stderr}");
    ensure!(!stdout.contains(&password) && !stderr.contains(&password));
    let out = cli()
        .args([
            "verify",
            "--postgres",
            env.sandbox.admin_url(),
            "--rows",
            "200",
        ])
        .args(["--migrations", later.path().to_str().unwrap()])
        .args(["--from-target", &conn("verify-full", &wrong_ca)])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(2)
            && stderr.trim().lines().count() == 1
            && stderr.contains("does not verify against sslrootcert")
            && !stderr.contains(&password),
        "{stderr}"
    );
    drop(prod);
    drop(tls_server);
    Ok(())
}

fn from_target_copies_rows_only_from_tables_the_migrations_fill(
    env: &TestEnv,
) -> anyhow::Result<()> {
    // Production: the shipped V3 plus a small table no migration fills.
    let prod = env.migrated_database(3);
    prod.connect()?.batch_execute(
        "CREATE TABLE customer_emails (id int PRIMARY KEY, email text NOT NULL);
         INSERT INTO customer_emails VALUES (1, 'alice@prod.example'), (2, 'bob@prod.example');
         ANALYZE customer_emails;",
    )?;
    // V4 fails wherever a production row reached the sandbox.
    let later = with_later(&["DO $$ BEGIN
           IF EXISTS (SELECT 1 FROM customer_emails WHERE email LIKE '%@prod.example') THEN
             RAISE EXCEPTION 'production rows of customer_emails reached the sandbox';
           END IF;
         END $$;"]);
    let run = |extra: &[&str]| -> anyhow::Result<(i32, serde_json::Value, String)> {
        let out = cli()
            .args([
                "verify",
                "--postgres",
                env.sandbox.admin_url(),
                "--rows",
                "200",
            ])
            .args(["--migrations", later.path().to_str().unwrap()])
            .args(["--from-target", prod.url(), "--format", "json"])
            .args(extra)
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let report = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
        Ok((
            out.status.code().unwrap_or(-1),
            report,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    let (code, report, stderr) = run(&[])?;
    ensure!(code == 0, "exit {code}: {report:#} {stderr}");
    ensure!(
        report["copied_rows"] == serde_json::json!(["public.functions (filled by V1)"]),
        "{:#}",
        report["copied_rows"]
    );
    // The opt-in copies them: V4 then sees them and fails.
    let (code, report, stderr) = run(&["--copy-rows", "customer_emails"])?;
    ensure!(code == 1, "exit {code}: {report:#} {stderr}");
    ensure!(
        report["copied_rows"]
            .as_array()
            .is_some_and(|a| a.contains(&serde_json::json!("public.customer_emails (--copy-rows)"))),
        "{:#}",
        report["copied_rows"]
    );
    ensure!(
        report
            .to_string()
            .contains("production rows of customer_emails reached the sandbox"),
        "{report:#}"
    );
    Ok(())
}

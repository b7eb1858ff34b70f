//! Stage 1: the base the rehearsed migrations start from, the migrator
//! that applies each of them twice in the background, and the runs of
//! migrations production sends in one transaction applied as one.

use super::{apply_unchecked, step, Run};
use crate::catalog::Migration;
use crate::report::events::{Event, RunStep};
use crate::sandbox::{Database, SandboxError};
use crate::target::{self, TargetError};
use crate::verify::error::VerifyError;
use crate::verify::evidence::{SecondRun, Unreached};
use crate::verify::measure;

impl Run<'_> {
    /// The runs of migrations production sends in one transaction
    /// ([`crate::verify::evidence::MigrationEvidence::shares_transaction`]),
    /// applied so on a copy of the base: every judged migration in order,
    /// a run as one transaction, the others each in its own (unmeasured,
    /// as `migrate` applies them). Stops at the first that fails: what
    /// comes after it is not reached here, and the rehearsal judges a
    /// migration failing on its own. Nothing to do without such a run.
    pub(super) fn apply_shared_runs(
        &mut self,
        empty_prev: &Database,
        migrations: &[Migration],
    ) -> Result<(), VerifyError> {
        let judged: Vec<&Migration> = migrations
            .iter()
            .filter(|m| !self.options.since.is_some_and(|s| m.version <= s))
            .collect();
        // Consecutive judged migrations, a run continuing while the next
        // one shares the transaction of the one before.
        let mut groups: Vec<Vec<&Migration>> = Vec::new();
        for m in judged {
            let shares = self
                .evidence
                .get(&m.version)
                .is_some_and(|e| e.shares_transaction.is_some());
            match groups.last_mut() {
                Some(g) if shares => g.push(m),
                _ => groups.push(vec![m]),
            }
        }
        if groups.iter().all(|g| g.len() < 2) {
            return Ok(());
        }
        let db = self.clone_db(empty_prev)?;
        let mut c = measure::connect_migrator(&self.sessions, &db)?;
        let catalog = &self.options.catalog;
        let path_of = |m: &Migration| catalog.path_of(m);
        for group in groups {
            // Nothing of it can be applied past a migration rollsafe
            // cannot run (the rehearsal stops there too).
            if group.iter().any(|m| m.not_runnable.is_some()) {
                break;
            }
            if group.len() == 1 {
                if apply_unchecked(&mut c, group[0]).is_err() {
                    break;
                }
                continue;
            }
            let failed = measure::shared_transaction::apply_as_one(&mut c, &group, &path_of);
            let stop = failed.is_some();
            self.run_evidence
                .shared_runs
                .push((group.iter().map(|m| m.version).collect(), failed));
            if stop {
                break;
            }
        }
        Ok(())
    }

    /// The base the rehearsed migrations start from, on `empty_prev`: the
    /// target's schema (`--from-target`), or the files up to `--since`
    /// applied once, unchecked. Nothing without either.
    /// The base the rehearsal starts from; false when it could not be
    /// built past a migration rollsafe cannot run (said as a finding): the
    /// rehearsal stops there.
    pub(super) fn apply_base(
        &mut self,
        empty_prev: &Database,
        migrations: &[Migration],
    ) -> Result<bool, VerifyError> {
        if self.options.target.is_none() {
            // A target's schema has its own; files alone start with the tool's.
            let url = self.sessions.migrator(empty_prev.url());
            let layout = self.options.catalog.layout;
            step(
                "creating the tool's history table",
                crate::migrate::history::prepare_rehearsal(&url, layout),
            )?;
        }
        if let Some(t) = &self.options.target {
            let copied = self.restore_target(t, empty_prev)?;
            self.report.copied_rows = Some(
                copied
                    .into_iter()
                    .map(|c| format!("{} ({})", c.qualified, c.because))
                    .collect(),
            );
        } else if let Some(s) = self.options.since {
            self.options.emit(Event::Run(RunStep::ApplyingUpTo {
                first: self
                    .options
                    .catalog
                    .label_of(migrations.first().map_or(1, |m| m.version)),
                since: self.options.catalog.label_of(s),
            }));
            let mut c = measure::connect_migrator(&self.sessions, empty_prev)?;
            let mut left_out: Option<&Migration> = None;
            for m in migrations.iter().filter(|m| m.version <= s) {
                if let Some(why) = &m.not_runnable {
                    let file = self.options.catalog.path_of(m);
                    self.report
                        .findings
                        .push(crate::verify::checks::apply::not_in_base(
                            m.version, &m.label, &file, why,
                        ));
                    left_out = Some(m);
                    continue;
                }
                let own = step(
                    "setting aside the roles the migration creates",
                    self.sessions
                        .own_roles(m.version, &m.sql, empty_prev.name()),
                )?;
                let applied = apply_unchecked(&mut c, m);
                drop(own);
                if let Err(e) = applied {
                    if let Some(go) = left_out {
                        // What builds on a migration rollsafe cannot run
                        // is skipped naming it, not a refusal.
                        self.not_runnable_under(go, m, &e, migrations);
                        return Ok(false);
                    }
                    return Err(VerifyError::PrefixFails {
                        label: m.label.clone(),
                        file: m.file.clone(),
                        detail: e,
                    });
                }
            }
        }
        Ok(true)
    }

    /// `go`, a migration rollsafe cannot run, left out of the base, and
    /// `failed`, after it, failing there (`error`): what builds on it is
    /// skipped, naming it.
    fn not_runnable_under(
        &mut self,
        go: &Migration,
        failed: &Migration,
        error: &str,
        migrations: &[Migration],
    ) {
        let later = migrations.iter().filter(|l| l.version > go.version).count();
        let why = format!(
            "{}; {} ({}), after it in the base, fails without it ({error})",
            go.not_runnable.as_deref().unwrap_or_default(),
            failed.label,
            failed.file
        );
        let file = self.options.catalog.path_of(go);
        self.report
            .findings
            .push(crate::verify::checks::apply::not_runnable(
                go.version, &go.label, &file, &why, later,
            ));
        // Nothing after it was rehearsed: each migration the run judges
        // says so (skipped), never a silent pass.
        for e in self.evidence.values_mut() {
            e.unreached = Some((go.version, Unreached::AfterNotRunnable));
        }
    }

    /// Starts the migrator: it applies the rehearsed migrations step by
    /// step, twice per step (apply: a second run is a no-op), on a
    /// database of its own, in the background. With a base, it starts
    /// from a copy of it whose history says what the base holds (no need
    /// to migrate the whole history again: the cost follows the change).
    /// Without a base its database is a fresh one, made in its own thread
    /// (a copy costs ~0.25 s that nothing else has to wait for).
    pub(super) fn start_migrator(
        &mut self,
        empty_prev: &Database,
        migrations: &[Migration],
    ) -> Result<(), VerifyError> {
        // A framework's project deploys with its framework's migrate,
        // which keeps its own history: `rollsafe migrate` reads SQL
        // folders and cannot apply it, so its runs would judge a tool the
        // project does not use (its refusal of a statement outside a
        // transaction was an error of a Django migration).
        if self.options.catalog.layout == crate::catalog::Layout::Framework {
            self.report
                .findings
                .push(crate::verify::checks::apply::migrator_not_rehearsed());
            return Ok(());
        }
        let migrator_db = match (&self.options.target, self.options.since) {
            // What --setup and the tool's own tables made on the base
            // (extensions, schemas, Flyway's history: per database) is
            // what production has before the first migration: the
            // migrator starts from it, not from a bare database (where an
            // extension's type was "does not exist", a false error).
            (None, None)
                if self.options.setup.is_some() || self.options.catalog.tool_setup.is_some() =>
            {
                let db = self.clone_db(empty_prev)?;
                let url = self.sessions.migrator(db.url());
                let _ =
                    crate::migrate::history::prepare_rehearsal(&url, self.options.catalog.layout);
                Some(db)
            }
            (None, None) => None,
            (target, Some(s)) => {
                let db = self.clone_db(empty_prev)?;
                // The migrator's history table is its own, as in production.
                let mut c = measure::connect_migrator(&self.sessions, &db)?;
                let recorded = match target {
                    Some(t) if self.options.catalog.layout == crate::catalog::Layout::Refinery => {
                        t.copy_history(&mut c)
                    }
                    _ => crate::migrate::record_applied(
                        &mut c,
                        self.options.catalog.layout,
                        migrations.iter().filter(|m| m.version <= s),
                    ),
                };
                if let Err(e) = recorded {
                    // The history is bookkeeping: a project's own guard on
                    // its tool's table (a trigger refusing other writers)
                    // must not stop the rehearsal, only the run that needs
                    // those rows.
                    let why = crate::errors::one_line(&e);
                    self.report
                        .findings
                        .push(crate::verify::checks::apply::base_history_refused(
                            crate::migrate::history::ToolHistory::written_by_migrate(
                                self.options.catalog.layout,
                            )
                            .table(),
                            &why,
                        ));
                    return Ok(());
                }
                Some(db)
            }
            (Some(_), None) => {
                // Nothing applied on the target yet: its schema, no history.
                Some(self.clone_db(empty_prev)?)
            }
        };
        let (catalog, policy, since) = (
            self.options.catalog.clone(),
            self.options.lock_policy,
            self.options.since,
        );
        let sandbox = self.sandbox.clone();
        let sessions = self.sessions.clone();
        self.migrator = Some(std::thread::spawn(move || {
            let mut out = Vec::new();
            let migrator_db = match migrator_db {
                Some(db) => db,
                None => match sandbox.fresh_database_owned_by(sessions.owner()) {
                    Ok(db) => {
                        // As on the base; a failure shows as the migrator's.
                        let url = sessions.migrator(db.url());
                        let _ = crate::migrate::history::prepare_rehearsal(&url, catalog.layout);
                        db
                    }
                    Err(e) => {
                        out.push((
                            catalog.migrations().first().map_or(0, |m| m.version),
                            Err(anyhow::Error::from(e).context("creating the migrator's database")),
                        ));
                        return out;
                    }
                },
            };
            for m in catalog
                .migrations()
                .iter()
                .filter(|m| !since.is_some_and(|s| m.version <= s))
            {
                let r = sessions
                    .own_roles(m.version, &m.sql, migrator_db.name())
                    .and_then(|_own| {
                        migrator_twice(
                            &sessions.migrator(migrator_db.url()),
                            &catalog,
                            m.version,
                            policy,
                        )
                    });
                // A refused history row stops the later runs as a failure does.
                let failed = r.as_ref().map_or(true, |s| s.history_refused.is_some());
                out.push((m.version, r));
                if failed {
                    break;
                }
            }
            out
        }));
        Ok(())
    }

    /// Restores the target's schema and the rows of the tables it may copy
    /// ([`target::Target::tables_to_copy`]) into `db`; returns those
    /// tables. First stand-ins for the roles its GRANTs name, then the
    /// schema as the migrator (so the migrator owns it, as production's
    /// owner role does; extensions and default privileges as the
    /// superuser, as a DBA installed them), then the rows as the superuser
    /// (loading them disables triggers).
    fn restore_target(
        &mut self,
        t: &target::Target,
        db: &Database,
    ) -> Result<Vec<target::CopiedTable>, VerifyError> {
        self.options.emit(Event::Run(RunStep::ReadingTarget));
        let scrubbed = |e: SandboxError| {
            VerifyError::Target(TargetError::Read(crate::db::scrub(&e.to_string(), t.url())))
        };
        for (name, login, inherit) in t.roles()? {
            if let Some(role) = self.sandbox.create_stand_in_role(&name, login, inherit)? {
                self.stand_ins.push(role);
            }
        }
        let schema = self.sandbox.dump_schema(t.url()).map_err(scrubbed)?;
        let copied = t.tables_to_copy()?;
        let qualified: Vec<String> = copied.iter().map(|c| c.qualified.clone()).collect();
        let rows = self
            .sandbox
            .dump_rows(t.url(), &qualified)
            .map_err(scrubbed)?;
        let mut c = step("connecting", db.connect())?;
        let as_owner = self
            .sessions
            .owner()
            .map(|r| format!("SET ROLE {}", crate::pg::quote_ident(r.name())));
        let mut restore = || -> Result<(), postgres::Error> {
            for st in crate::sql::split(&schema).statements {
                let head = st
                    .text
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_uppercase();
                // Extensions as a DBA installed them; default privileges
                // name production's roles (`FOR ROLE x`), which the
                // migrator is not a member of.
                let by_dba = head.starts_with("CREATE EXTENSION")
                    || head.starts_with("COMMENT ON EXTENSION")
                    || head.starts_with("ALTER DEFAULT PRIVILEGES");
                match (&as_owner, by_dba) {
                    (Some(_), true) => c.batch_execute(&format!("RESET ROLE; {}", st.text))?,
                    (Some(set), false) => c.batch_execute(&format!("{set}; {}", st.text))?,
                    (None, _) => c.batch_execute(&st.text)?,
                }
            }
            c.batch_execute("RESET ROLE")?;
            c.batch_execute(&rows)?;
            // The dump empties search_path for its session: reset it
            // before anything else runs on this connection.
            c.batch_execute("RESET ALL")
        };
        restore().map_err(|e| {
            VerifyError::Target(TargetError::Read(format!(
                "the schema of {} does not restore on PostgreSQL {} ({}); rehearse on the target's major (the default) and make the extensions it uses available to the sandbox",
                t.described,
                self.sandbox.server_major(),
                crate::errors::one_line(&e)
            )))
        })?;
        Ok(copied)
    }
}

/// Runs the migrator (`rollsafe::migrate`: advisory lock, lock_timeout,
/// each migration with its history row in one transaction) up to `v` twice
/// on the database at `url`, which holds the migrations before `v` applied
/// by the same migrator.
fn migrator_twice(
    url: &str,
    catalog: &crate::catalog::Catalog,
    v: i32,
    lock: crate::lock_policy::LockPolicy,
) -> anyhow::Result<SecondRun> {
    let options = crate::migrate::Options {
        target: Some(v),
        lock,
        ..crate::migrate::Options::default()
    };
    let first = match crate::migrate::migrate(url, catalog, &options) {
        Ok(run) => run.applied.len(),
        // The history is bookkeeping: a guard on it is the project's own.
        Err(e @ crate::migrate::MigrateError::HistoryRefused { .. }) => {
            return Ok(SecondRun {
                history_refused: Some(e.to_string()),
                ..SecondRun::default()
            })
        }
        Err(e) => return Err(e.into()),
    };
    let before = {
        let mut c = crate::db::connect(url)?;
        crate::schema::Snapshot::read(&mut c)?
    };
    let second = crate::migrate::migrate(url, catalog, &options)?
        .applied
        .len();
    let after = {
        let mut c = crate::db::connect(url)?;
        crate::schema::Snapshot::read(&mut c)?
    };
    Ok(SecondRun {
        first_applied: first,
        second_applied: second,
        changes: after.diff(&before),
        history_refused: None,
    })
}

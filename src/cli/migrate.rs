//! `rollsafe migrate`: apply pending migrations safely, or show how
//! (`--dry-run`).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use rollsafe::bounds;
use rollsafe::catalog::Catalog;
use rollsafe::db;

use super::args::{duration_in, LockArgs, TargetDbArgs};
use super::fail;

#[derive(Args)]
pub(crate) struct MigrateArgs {
    #[command(flatten)]
    pub(crate) db: TargetDbArgs,
    /// Apply up to this migration (inclusive), named as its tool names it (V3, 20240101120000, 2024-10-25-112826_x, a Sqitch change, Flyway's 1.1) or by the start of its label; default: the latest.
    #[arg(long, value_name = "V")]
    pub(crate) target: Option<String>,
    /// Print the plan and the SQL of each pending migration; change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
    /// How long to wait for another `rollsafe migrate` on the same database, 0s to 24h.
    #[arg(long, default_value = "120s", value_parser = duration_in(bounds::MIGRATOR_WAIT))]
    pub(crate) migrator_wait: std::time::Duration,
    /// Primary keys per batch of a `-- rollsafe:batched-update` backfill (each batch is its own short transaction).
    #[arg(long, default_value = "1000", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) batch_size: u32,
    /// Pause between backfill batches, so the app's writes and autovacuum keep up (e.g. 50ms, 0), 0s to 1m.
    #[arg(long, default_value = "50ms", value_parser = duration_in(bounds::BATCH_PAUSE))]
    pub(crate) batch_pause: Duration,
}

/// Backfill progress for `migrate`: on a terminal an indicatif bar with
/// rows/s and ETA; otherwise (CI logs) one line every [`LINE_EVERY`]
/// batches and one at the end.
pub(crate) fn backfill_progress() -> rollsafe::migrate::backfill::ProgressSink {
    use rollsafe::migrate::backfill::{BackfillProgress, ProgressSink};
    use std::sync::{Arc, Mutex};
    const LINE_EVERY: u64 = 50;
    let terminal = std::io::stderr().is_terminal();
    let bar: Arc<Mutex<Option<(String, indicatif::ProgressBar)>>> = Arc::new(Mutex::new(None));
    ProgressSink(Arc::new(move |p: &BackfillProgress| {
        let key = format!("V{} {}", p.version, p.table);
        let rate = (p.rows_done - p.resumed_from) as f64 / p.elapsed.as_secs_f64().max(1e-3);
        if !terminal {
            if p.finished || p.batches % LINE_EVERY == 0 {
                eprintln!(
                    "[rollsafe migrate] backfill {key}: {} of ~{} rows, {} batches, {rate:.0} rows/s{}",
                    p.rows_done,
                    p.rows_total,
                    p.batches,
                    if p.finished { ", done" } else { "" }
                );
            }
            return;
        }
        let mut slot = bar.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().map_or(true, |(k, _)| *k != key) {
            let b = indicatif::ProgressBar::new(p.rows_total).with_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/{len} rows, {per_sec}, ETA {eta}",
                )
                .expect("a valid template"),
            );
            b.set_message(format!("backfill {key}"));
            b.set_position(p.resumed_from);
            b.reset_eta();
            *slot = Some((key, b));
        }
        if let Some((_, b)) = slot.as_ref() {
            b.set_length(p.rows_total.max(p.rows_done));
            b.set_position(p.rows_done);
            if p.finished {
                b.finish();
            }
        }
    }))
}

pub fn run(args: MigrateArgs) -> ExitCode {
    use rollsafe::migrate::{self, Options};
    let catalog = match args.db.catalog() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let tool = migrate::history::ToolHistory(catalog.layout);
    if !tool.writable() {
        return fail(
            2,
            &format!(
                "{} holds {} migrations, and rollsafe does not write {}'s history table ({}); apply them with {} itself, and use rollsafe status / verify on them",
                catalog.source, catalog.layout, catalog.layout, tool.table(), catalog.layout
            ),
        );
    }
    let target = match args.target.as_deref().map(|t| catalog.resolve_label(t)) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(why)) => {
            return fail(
                2,
                &format!("--target {}: {why}", args.target.unwrap_or_default()),
            )
        }
    };
    let url = &args.db.database_url;
    let options = Options {
        target,
        lock: args.lock.policy(),
        migrator_wait: args.migrator_wait,
        backfill: rollsafe::migrate::backfill::BackfillOptions {
            batch_size: args.batch_size,
            pause: args.batch_pause,
        },
        progress: Some(backfill_progress()),
    };
    println!("database:   {}", db::redact_url(url));
    println!("migrations: {}", catalog.source);
    if let Some(caveat) = rollsafe::catalog::layouts::reader(catalog.layout).caveat() {
        println!("note:       {caveat}");
    }
    if args.dry_run {
        let plan = match migrate::plan(url, &catalog, &options) {
            Ok(p) => p,
            Err(e) => return fail(e.exit_code(), &db::scrub(&e.to_string(), url)),
        };
        print_position(&catalog, plan.current, plan.target, plan.beyond_target);
        println!(
            "dry run: {} migration(s) would be applied, nothing changed",
            plan.pending.len()
        );
        for m in &plan.pending {
            print_dry_run(m, args.batch_size);
        }
        return ExitCode::SUCCESS;
    }
    match migrate::migrate(url, &catalog, &options) {
        Ok(out) => {
            print_position(
                &catalog,
                out.plan.current,
                out.plan.target,
                out.plan.beyond_target,
            );
            for a in &out.applied {
                let mut how = Vec::new();
                if a.attempts > 1 {
                    how.push(format!("{} attempts", a.attempts));
                }
                if !a.waited.is_zero() {
                    how.push(format!(
                        "waited {:.1?} without queueing for a conflicting lock to go",
                        a.waited
                    ));
                }
                println!(
                    "applied {} in {:.1?}{}",
                    a.file,
                    a.elapsed,
                    if how.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", how.join(", "))
                    }
                );
            }
            if out.applied.is_empty() {
                println!("nothing to apply");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code(), &db::scrub(&e.to_string(), url)),
    }
}

/// `migrate --dry-run`: how migration `m` would be applied, the locks its
/// statements take (read from their text), and its SQL.
pub(crate) fn print_dry_run(m: &rollsafe::catalog::Migration, batch_size: u32) {
    let how = if m.runs_outside_transaction() {
        let backfills = m.batched_updates().count();
        format!(
            " (outside a transaction, statement by statement{})",
            if backfills > 0 {
                format!(
                    ", then {backfills} batched update(s) of {} keys per batch",
                    batch_size
                )
            } else {
                String::new()
            }
        )
    } else {
        String::new()
    };
    let locks = if m.runs_outside_transaction() {
        rollsafe::sql::split(&m.sql)
            .statements
            .iter()
            .map(|s| {
                format!(
                    "line {}: {}",
                    s.line,
                    rollsafe::migrate::conflicts::of_statements(std::slice::from_ref(s)).describe()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        rollsafe::migrate::conflicts::of_sql(&m.sql).describe()
    };
    // Flyway's beforeEachMigrate / afterEachMigrate, run with it.
    let callbacks: Vec<String> = (m
        .before_each
        .iter()
        .map(|s| format!("{} before it", s.file)))
    .chain(m.after_each.iter().map(|s| format!("{} after it", s.file)))
    .collect();
    let callbacks = match callbacks.is_empty() {
        true => String::new(),
        false => format!(
            "\n-- with its callbacks, on its connection: {}",
            callbacks.join(", ")
        ),
    };
    println!(
        "\n-- {m}{how}{callbacks}\n-- locks (read from its statements): {locks}\n{}",
        m.sql.trim_end()
    );
}

pub(crate) fn print_position(catalog: &Catalog, current: Option<i32>, target: i32, beyond: bool) {
    let at = current.map_or("empty (no migration applied)".to_string(), |v| {
        catalog.label_of(v)
    });
    println!("at:         {at}");
    println!(
        "target:     {}{}",
        catalog.label_of(target),
        if beyond {
            " (the database is already past it; nothing is ever undone)"
        } else {
            ""
        }
    );
}

//! `rollsafe status`: each migration's state in a database.

use std::process::ExitCode;

use clap::Args;
use rollsafe::db;

use super::args::TargetDbArgs;
use super::fail;

#[derive(Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) db: TargetDbArgs,
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) format: StatusFormat,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum StatusFormat {
    Text,
    Json,
}

pub fn run(args: StatusArgs) -> ExitCode {
    use rollsafe::migrate;
    let catalog = match args.db.catalog() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let url = &args.db.database_url;
    let st = match migrate::status(url, &catalog) {
        Ok(s) => s,
        Err(e) => return fail(e.exit_code(), &db::scrub(&e.to_string(), url)),
    };
    let drift = st.drift().count();
    match args.format {
        StatusFormat::Json => {
            let doc = serde_json::json!({
                "database": db::redact_url(url),
                "migrations": catalog.source.to_string(),
                "status": st,
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&doc).expect("status serialises")
            );
        }
        StatusFormat::Text => {
            println!("database:   {}", db::redact_url(url));
            let table = migrate::history::ToolHistory(catalog.layout).table();
            println!(
                "migrations: {} ({}, latest {})",
                catalog.source,
                catalog.layout,
                catalog.label_of(st.latest)
            );
            println!(
                "history:    {}",
                match (st.history_table, st.current) {
                    (false, _) => format!("no {table} table (nothing applied)"),
                    (true, None) => format!("{table}: empty"),
                    (true, Some(v)) => format!("{table}: at {}", catalog.label_of(v)),
                }
            );
            for v in &st.versions {
                let state = serde_json::to_value(v.state).expect("state serialises");
                println!(
                    "{:<5} {:<14} {:<25} {}",
                    v.label,
                    state.as_str().unwrap_or("?"),
                    v.applied_on.as_deref().map_or("-".to_string(), |a| {
                        chrono::DateTime::parse_from_rfc3339(a).map_or(a.to_string(), |t| {
                            t.to_utc().format("%Y-%m-%d %H:%M:%S UTC").to_string()
                        })
                    }),
                    v.file
                        .clone()
                        .unwrap_or_else(|| format!("(no file; applied as `{}`)", v.name))
                );
            }
            for b in st.unfinished_backfills() {
                println!(
                    "backfill:   V{} {} unfinished: {} rows updated in {} batches, last key {}, last progress {}; run `rollsafe migrate` to resume it",
                    b.version,
                    b.table,
                    b.rows_done,
                    b.batches,
                    b.last_key.as_deref().unwrap_or("(none)"),
                    b.updated_at
                );
            }
            for v in st.reruns() {
                println!(
                    "rerun:      {} ({}) changed since its last run (checksum {} in the history, {} in the file); Flyway runs it again on its next migrate",
                    v.label,
                    v.file.as_deref().unwrap_or("?"),
                    v.checksum_applied.as_deref().unwrap_or("?"),
                    v.checksum_file.as_deref().unwrap_or("?"),
                );
            }
            for v in st.drift() {
                if let Some(m) = v.drift_message() {
                    println!("problem: {m}");
                }
            }
        }
    }
    ExitCode::from(if drift > 0 { 1 } else { 0 })
}

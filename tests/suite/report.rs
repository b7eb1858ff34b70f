//! The reviewer's view of real rehearsals: the lock timeline a report
//! draws for a harmful migration (a blocking index build under the live
//! apps' workload) and for a harmless one (the same index built
//! concurrently), from what the rehearsal measured.
//!
//! With `ROLLSAFE_RENDER_DIR` set, each test also writes its Markdown
//! report there (`<test>.md`): `ci/test-render.sh` renders those in
//! headless Chromium with Mermaid, as GitHub would.

use std::sync::Arc;

use anyhow::{ensure, Context};
use libtest_mimic::Trial;
use rollsafe::catalog::Catalog;
use rollsafe::dao::shipped;
use rollsafe::report::{render_markdown, render_text, RehearsedMigration, Report};

use crate::common::{self, TestEnv};

/// Rows seeded: enough that building the index takes long enough for
/// the apps' writes to queue behind it and be sampled there.
const ROWS: u64 = 20_000;

pub fn tests(env: &Arc<TestEnv>) -> Vec<Trial> {
    common::trials(
        "report",
        env,
        &[
            (
                "timeline_marks_a_blocking_index_build_and_the_writes_it_held_up",
                blocking_index_build,
            ),
            (
                "timeline_of_a_concurrent_index_build_shows_no_wait",
                concurrent_index_build,
            ),
        ],
    )
}

/// The shipped V1..V3 and their apps, then `v4`, rehearsing V4 only.
fn rehearse_v4(env: &TestEnv, v4: &str) -> anyhow::Result<Report> {
    let dir = crate::verify::with_later(&[v4]);
    let catalog = Catalog::from_dir(dir.path())?;
    Ok(shipped::verify(catalog)?
        .rows(ROWS)
        .since(3)?
        .run(&env.sandbox)?)
}

fn v4(report: &Report) -> anyhow::Result<&RehearsedMigration> {
    report
        .migrations
        .iter()
        .find(|m| m.version == 4)
        .context("V4 is not in the report")
}

/// Writes the reports to `ROLLSAFE_RENDER_DIR` when it is set: `<name>.md`
/// (rendered by ci/test-render.sh) and `<name>.txt`.
fn keep_for_rendering(name: &str, report: &Report) -> anyhow::Result<()> {
    if let Some(dir) = std::env::var_os("ROLLSAFE_RENDER_DIR") {
        let dir = std::path::Path::new(&dir);
        std::fs::write(dir.join(format!("{name}.md")), render_markdown(report))?;
        std::fs::write(dir.join(format!("{name}.txt")), render_text(report))?;
    }
    Ok(())
}

fn blocking_index_build(env: &TestEnv) -> anyhow::Result<()> {
    let report = rehearse_v4(env, "CREATE INDEX af_name ON attached_functions (name);")?;
    let m = v4(&report)?;
    ensure!(m.statements.len() == 1, "{:?}", m.statements);
    let build = &m.statements[0];
    ensure!(
        build.strongest_lock.as_deref() == Some("SHARE on attached_functions")
            && build.blocks_writes,
        "the build holds SHARE, which blocks writes: {build:?}"
    );
    let start = build
        .start_ms
        .context("the build's start was not measured")?;
    let end = start + build.ms_at_n_rows;
    let waits = m.app_waits.as_ref().context("no app workload ran")?;
    ensure!(
        !waits.is_empty(),
        "no app waited behind the build of {ROWS} rows"
    );
    for w in waits {
        ensure!(
            w.behind_line == Some(build.line) && w.table == "attached_functions",
            "{w:?}"
        );
        ensure!(
            w.mode == "ROW EXCLUSIVE",
            "only the writes wait on SHARE: {w:?}"
        );
        // Sampled from another connection: placed from the sample's send
        // time, early by at most its trip to the server.
        ensure!(
            w.start_ms >= start - 5.0 && w.start_ms <= end && w.ms > 0.0,
            "the wait {w:?} did not begin within the build's transaction ({start:.1}..{end:.1} ms)"
        );
    }
    let md = render_markdown(&report);
    keep_for_rendering("blocking_index_build", &report)?;
    let chart = &md[md.find("**V4**").context("no V4 timeline")?..];
    let statement_bar = chart
        .lines()
        .find(|l| l.starts_with("    L1 CREATE INDEX af_name"))
        .with_context(|| format!("no bar for the build: {md}"))?;
    ensure!(
        statement_bar.contains(":crit, "),
        "the build is critical: {statement_bar}"
    );
    ensure!(
        chart.contains("    section apps waiting\n")
            && chart.contains("waits for ROW EXCLUSIVE on attached_functions behind L1"),
        "{md}"
    );
    let text = render_text(&report);
    let lanes = &text[text.find("\nlock timeline (").context("no ASCII lane")?..];
    ensure!(
        lanes
            .lines()
            .any(|l| l.contains('#') && l.contains("| L1 CREATE INDEX af_name"))
            && lanes
                .lines()
                .any(|l| l.contains('~') && l.contains("| legacy.")),
        "{text}"
    );
    Ok(())
}

fn concurrent_index_build(env: &TestEnv) -> anyhow::Result<()> {
    let report = rehearse_v4(
        env,
        "-- rollsafe:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS af_name ON attached_functions (name);",
    )?;
    let m = v4(&report)?;
    ensure!(m.statements.len() == 1, "{:?}", m.statements);
    let build = &m.statements[0];
    ensure!(
        !build.blocks_writes && build.start_ms.is_some(),
        "{build:?}"
    );
    ensure!(
        m.app_waits.as_deref() == Some(&[][..]),
        "the apps ran and never waited: {:?}",
        m.app_waits
    );
    let md = render_markdown(&report);
    keep_for_rendering("concurrent_index_build", &report)?;
    let chart = &md[md.find("**V4**").context("no V4 timeline")?..];
    ensure!(chart.contains("```mermaid\ngantt\n"), "{md}");
    ensure!(
        !chart.contains(":crit, ") && !chart.contains("section apps waiting"),
        "{md}"
    );
    ensure!(
        chart.contains("The live apps never waited on its locks."),
        "{md}"
    );
    let text = render_text(&report);
    ensure!(
        !text.contains("\nlock timeline ("),
        "nothing to draw: {text}"
    );
    Ok(())
}

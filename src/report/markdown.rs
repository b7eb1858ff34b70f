//! A Markdown summary for a pull / merge request comment or a GitHub step
//! summary: the verdict, a table of the findings a reviewer must read
//! (errors, then warnings, then skipped checks; each with its file and
//! line), the safe deploy order, the apps replayed (statements per
//! version) and which of their readers were compared, per migration its
//! lock timeline (a
//! Mermaid gantt chart, [`super::timeline`]) and its per-statement table
//! (locks newly taken, time at 0 and N rows, rows touched).
//!
//! Bounded: never more than [`MARKDOWN_LIMIT`] bytes. The verdict and the
//! deploy order always fit; findings fill what is left in order of
//! severity, then timelines, then statement rows; what does not fit is
//! counted ("… and 12 more findings (see the full report)"). Passing
//! measurements are only counted: the text and JSON reports have them.

use std::fmt::Write;

use super::{timeline, Finding, RehearsedMigration, Report, Severity};

/// Most bytes a summary takes, so also most characters: under GitHub's
/// 65,536 characters of a pull request comment (and far under the 1 MiB of
/// a step summary), with room left for a bot's own header around it.
pub const MARKDOWN_LIMIT: usize = 60_000;

/// Bytes kept for the lines that say what was left out.
const RESERVE: usize = 400;
/// Longest text of one table cell (characters): one long message must not
/// push every other finding out.
const CELL_CHARS: usize = 600;
const EXCERPT_CHARS: usize = 80;

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        s.chars().take(max - 1).collect::<String>() + "…"
    } else {
        s.to_string()
    }
}

/// Plain text as one table cell: no raw HTML, `|` escaped, line breaks as
/// `<br>`.
fn cell(s: &str) -> String {
    shorten(s, CELL_CHARS)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('|', "\\|")
        .replace("\r\n", "<br>")
        .replace(['\n', '\r'], "<br>")
}

/// Inline code in a table cell (GFM unescapes `\|` inside code spans).
fn code(s: &str) -> String {
    let s = shorten(&s.replace(['\n', '\r'], " "), CELL_CHARS).replace('|', "\\|");
    if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

/// What is left of the limit; lines are appended only when they fit.
struct Budget(usize);

impl Budget {
    fn push(&mut self, out: &mut String, s: &str) -> bool {
        if s.len() > self.0 {
            return false;
        }
        self.0 -= s.len();
        out.push_str(s);
        true
    }
}

fn tag(s: Severity) -> &'static str {
    match s {
        Severity::Error => "**error**",
        Severity::Warn => "warn",
        Severity::Skipped => "skipped",
        Severity::Info => "ok",
    }
}

fn head(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### {}\n", cell(&report.tool));
    let (verdict, tally) = report.verdict();
    let _ = writeln!(out, "**{verdict}**{tally}\n");
    if !report.server_version.is_empty() {
        let _ = writeln!(
            out,
            "Rehearsed on {} with {} rows per seeded database; migrations: {}.\n",
            // "PostgreSQL 15.4 (Debian …)", without the build details.
            cell(&shorten(
                report
                    .server_version
                    .split(" on ")
                    .next()
                    .unwrap_or_default(),
                EXCERPT_CHARS
            )),
            report.rows,
            cell(&shorten(&report.source, EXCERPT_CHARS))
        );
    }
    if let Some(base) = &report.base {
        let _ = writeln!(out, "Rehearsed on {}.\n", cell(base));
    }
    if let Some(copied) = &report.copied_rows {
        let _ = writeln!(
            out,
            "Production rows copied: {}.\n",
            cell(&super::text::copied_rows_phrase(copied))
        );
    }
    out
}

/// A finding's severity cell: an accepted one says so beside what its
/// check found.
fn severity_cell(f: &Finding) -> String {
    match &f.accepted {
        Some(_) => format!("accepted ({})", f.severity),
        None => tag(f.severity).to_string(),
    }
}

fn findings_row(report: &Report, f: &Finding) -> String {
    let place = match report.location_of(f) {
        Some(l) => code(&format!("{}:{}", l.file, l.line)),
        None => "whole run".to_string(),
    };
    let mut message = cell(&f.message);
    if let Some(a) = &f.accepted {
        message = format!(
            "accepted: {} ({})<br>{message}",
            cell(&a.reason),
            cell(&a.by)
        );
    }
    if !f.advice.is_empty() {
        message.push_str("<br>advice: ");
        message.push_str(&cell(&f.advice));
    }
    format!(
        "| {} | {} | {place} | {message} |\n",
        severity_cell(f),
        code(&f.id)
    )
}

fn findings_section(report: &Report, budget: &mut Budget) -> String {
    let mut shown: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .collect();
    // Errors a waiver does not accept first, the accepted after them.
    shown.sort_by_key(|f| std::cmp::Reverse((f.accepted.is_none(), f.severity)));
    let passing = report.count(Severity::Info);
    let mut out = String::new();
    if shown.is_empty() {
        budget.push(
            &mut out,
            &format!(
                "No errors, warnings or skipped checks; {passing} passing measurement(s) in the full report.\n"
            ),
        );
        return out;
    }
    let mut left_out = shown.len();
    if budget.push(
        &mut out,
        "#### Findings\n\n| severity | id | where | message |\n|---|---|---|---|\n",
    ) {
        for f in &shown {
            if !budget.push(&mut out, &findings_row(report, f)) {
                break;
            }
            left_out -= 1;
        }
    }
    if left_out > 0 {
        // From the reserve.
        let _ = writeln!(
            out,
            "\n… and {left_out} more findings (see the full report)"
        );
    }
    if passing > 0 {
        budget.push(
            &mut out,
            &format!("\n{passing} passing measurement(s) in the full report.\n"),
        );
    }
    out
}

fn order_section(report: &Report, budget: &mut Budget) -> String {
    let mut out = String::new();
    let hints: Vec<String> = report
        .plan_regressions()
        .iter()
        .filter_map(|r| {
            let v = r.migration.map_or(String::new(), |v| report.label(v));
            r.hint.as_ref().map(|h| format!("- {v}: {}\n", cell(h)))
        })
        .collect();
    if !report.safe_order.is_empty() {
        budget.push(&mut out, "\n#### Safe deploy order\n\n");
        for (i, step) in report.safe_order.iter().enumerate() {
            budget.push(&mut out, &format!("{}. {}\n", i + 1, cell(step)));
        }
    } else if !report.passed && !report.apps.is_empty() {
        // Only a rehearsal (apps replayed) can prove a deploy order.
        budget.push(
            &mut out,
            "\nNo safe deploy order: fix the errors above and run again.\n",
        );
    }
    if !hints.is_empty() && (!report.safe_order.is_empty() || !report.apps.is_empty()) {
        budget.push(&mut out, "\n");
        for h in &hints {
            budget.push(&mut out, h);
        }
    }
    out
}

/// One line per plan regression: the statement, the table, the plan
/// before → after.
fn plans_section(report: &Report, budget: &mut Budget) -> String {
    let regressions = report.plan_regressions();
    let mut out = String::new();
    if regressions.is_empty() || !budget.push(&mut out, "\n#### Plans (before → after)\n\n") {
        return out;
    }
    for r in &regressions {
        let v = r.migration.map_or(String::new(), |v| report.label(v));
        if !budget.push(
            &mut out,
            &format!("- {} {v}: {}\n", tag(r.severity), cell(&r.summary)),
        ) {
            break;
        }
    }
    out
}

/// Per migration its lock timeline, or why it has none.
fn timelines_section(report: &Report, budget: &mut Budget) -> String {
    let mut out = String::new();
    if report.migrations.iter().all(|m| m.statements.is_empty()) {
        // `rollsafe check` seeds nothing; a rehearsal that measured no
        // statement (static checks only, or none applied) says so once.
        if report.rows > 0 && !report.migrations.is_empty() {
            budget.push(
                &mut out,
                "\nNo statement was measured on a seeded database: no lock timeline.\n",
            );
        }
        return out;
    }
    if !budget.push(
        &mut out,
        &format!(
            "\n#### Lock timeline\n\nEach migration applied on {} seeded rows while the live apps ran: a bar per statement at its measured start and duration (to the millisecond; labels give the measured figures) with the strongest lock it held; a migration in one transaction also gets a BEGIN to COMMIT bar, its locks being held to the commit (in a rehearsal that includes the reads rollsafe takes after each statement); critical (red) bars are statements an app waited behind; the apps' longest waits are bars of their own.\n",
            report.rows
        ),
    ) {
        return out;
    }
    let mut left_out = 0;
    for m in &report.migrations {
        if report.applied_only.contains(&m.version) {
            continue;
        }
        if left_out > 0 || !budget.push(&mut out, &migration_timeline(report, m)) {
            left_out += 1;
        }
    }
    // From the reserve.
    if left_out > 0 {
        let _ = writeln!(
            out,
            "\n… and {left_out} more timelines (see the full report)"
        );
    }
    out
}

fn migration_timeline(report: &Report, m: &RehearsedMigration) -> String {
    let v = report.label(m.version);
    let t = match timeline::build(m) {
        Ok(t) => t,
        Err(why) => return format!("\n**{v}** {}: no timeline, {why}.\n", code(&m.path)),
    };
    let mut out = format!("\n**{v}** {}\n\n", code(&m.path));
    out.push_str(&timeline::mermaid(
        &t,
        &format!("{v}: locks and app waits, ms from its start"),
        &format!("{v} statements"),
    ));
    let mut notes = Vec::new();
    if t.statements.len() < t.measured {
        notes.push(format!(
            "{} statements drawn as {} bars (consecutive statements holding no lock the apps notice, and past {} bars the shortest neighbours, are merged)",
            t.measured,
            t.statements.len(),
            timeline::MAX_STATEMENT_BARS
        ));
    }
    if !t.apps_ran {
        notes.push("no app workload ran on it, so no waits could be seen".to_string());
    } else if t.waits.is_empty() {
        notes.push("the live apps never waited on its locks".to_string());
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\n{}.", cell(&capitalised(&notes.join("; "))));
    }
    out
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
}

fn statements_section(report: &Report, budget: &mut Budget) -> String {
    let migrations: Vec<_> = report
        .migrations
        .iter()
        .filter(|m| !m.statements.is_empty())
        .collect();
    let total: usize = migrations.iter().map(|m| m.statements.len()).sum();
    if total == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut left_out = total;
    let opened = budget.push(
        &mut out,
        &format!(
            "\n<details><summary>Per statement: locks newly taken, time at 0 and {} rows, rows touched</summary>\n",
            report.rows
        ),
    );
    if opened {
        'migrations: for m in migrations {
            let header = format!(
                "\n**{}** {}\n\n| line | statement | new locks | at 0 rows | at {} rows | rows touched |\n|---:|---|---|---:|---:|---:|\n",
                report.label(m.version),
                code(&m.path),
                report.rows
            );
            if !budget.push(&mut out, &header) {
                break;
            }
            for s in &m.statements {
                let locks = if s.new_locks.is_empty() {
                    "-".to_string()
                } else {
                    cell(&s.new_locks.join(", "))
                };
                let row = format!(
                    "| {}{} | {} | {locks} | {:.1} ms | {:.1} ms | {} |\n",
                    s.script
                        .as_ref()
                        .map(|f| format!("{} ", code(f)))
                        .unwrap_or_default(),
                    s.line,
                    code(&shorten(&s.excerpt, EXCERPT_CHARS)),
                    s.ms_at_0_rows,
                    s.ms_at_n_rows,
                    s.rows_touched
                );
                if !budget.push(&mut out, &row) {
                    break 'migrations;
                }
                left_out -= 1;
            }
        }
    }
    // From the reserve.
    if left_out > 0 {
        let _ = writeln!(
            out,
            "\n… and {left_out} more statement rows (see the full report)"
        );
    }
    if opened {
        out.push_str("\n</details>\n");
    }
    out
}

/// The apps replayed and which of their readers were compared: a table of
/// how many statements each app version contributed (a captured app's
/// count is what its tests ran), then per rehearsed migration the readers
/// the backfill check compared before and after it, read from its
/// findings (`backfill.*`), so a reviewer sees what the verdict rests on.
fn apps_section(report: &Report, budget: &mut Budget) -> String {
    let mut out = String::new();
    if report.apps.is_empty()
        || !budget.push(
            &mut out,
            "\n#### Apps\n\n| app | needs | statements |\n|---|---|---:|\n",
        )
    {
        return out;
    }
    for app in &report.apps {
        let row = format!(
            "| {} | {} | {} |\n",
            code(&app.name),
            report.label(app.needs),
            app.statements
        );
        if !budget.push(&mut out, &row) {
            return out;
        }
    }
    let lines: Vec<String> = report
        .findings
        .iter()
        .filter_map(|f| reader_line(report, f))
        .collect();
    if lines.is_empty() {
        budget.push(
            &mut out,
            "\nNo app reader was compared before and after a migration.\n",
        );
        return out;
    }
    if !budget.push(
        &mut out,
        "\nReaders compared before and after each migration:\n\n",
    ) {
        return out;
    }
    let mut left_out = lines.len();
    for line in &lines {
        if !budget.push(&mut out, line) {
            break;
        }
        left_out -= 1;
    }
    // From the reserve.
    if left_out > 0 {
        let _ = writeln!(out, "- … and {left_out} more (see the full report)");
    }
    out
}

/// One bullet of the readers list for a backfill finding about readers
/// (None for any other finding).
fn reader_line(report: &Report, f: &Finding) -> Option<String> {
    if f.check != "backfill" {
        return None;
    }
    let text = |key: &str| {
        f.evidence
            .get(key)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .unwrap_or_default()
    };
    let reader = |app: &str, statement: &str| format!("{}'s {}", cell(app), code(statement));
    let what = match f.id.as_str() {
        "backfill.readers-agree" => {
            // The message ends with the agreeing readers ("…: a's `x`, b's `y`").
            let readers = f
                .message
                .split_once("returned before: ")
                .map_or("", |(_, list)| list);
            format!(
                "same rows: {} ({} rows compared)",
                cell(readers),
                text("rows_compared")
            )
        }
        "backfill.rows-lost-for-app" => format!(
            "**rows lost**: {} misses {} of the {} rows it returned before",
            reader(&text("app"), &text("statement")),
            text("missing"),
            text("expected_rows")
        ),
        "backfill.new-readers-miss-rows" => format!(
            "**rows lost**: {} misses {} of the {} rows {} returned",
            reader(&text("app"), &text("statement")),
            text("missing"),
            text("expected_rows"),
            reader(&text("reference_app"), &text("reference_statement"))
        ),
        "backfill.new-readers-return-hidden-rows" => format!(
            "more rows: {} returns {} rows {} hides",
            reader(&text("app"), &text("statement")),
            text("extra"),
            reader(&text("reference_app"), &text("reference_statement"))
        ),
        "backfill.reader-not-compared" => format!(
            "not compared: {} (why: the findings above)",
            reader(&text("app"), &text("statement"))
        ),
        "backfill.readers-not-compared" => {
            "not compared: no live app has a read statement".to_string()
        }
        _ => return None,
    };
    let v = f.migration.map_or(String::new(), |v| report.label(v));
    Some(format!("- {v}: {what}\n"))
}

/// Every accepted finding, one line each with its reason and where the
/// waiver is: the risks the team took, in front of the reviewer.
fn accepted_section(report: &Report, budget: &mut Budget) -> String {
    let mut out = String::new();
    let accepted: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.accepted.is_some())
        .collect();
    if accepted.is_empty() || !budget.push(&mut out, "\n#### Accepted risks\n\n") {
        return out;
    }
    for (i, f) in accepted.iter().enumerate() {
        let a = f.accepted.as_ref().expect("filtered above");
        let place = report.location_of(f).map_or("whole run".to_string(), |l| {
            code(&format!("{}:{}", l.file, l.line))
        });
        let line = format!(
            "- {} {} at {place}: {} (by {}{})\n",
            f.severity,
            code(&f.id),
            cell(&a.reason),
            cell(&a.by),
            a.until
                .as_ref()
                .map_or(String::new(), |u| format!(", until {u}"))
        );
        if !budget.push(&mut out, &line) {
            let _ = writeln!(
                out,
                "- … and {} more (see the full report)",
                accepted.len() - i
            );
            break;
        }
    }
    out
}

pub fn render_markdown(report: &Report) -> String {
    let head = head(report);
    let mut budget = Budget(MARKDOWN_LIMIT.saturating_sub(head.len() + RESERVE));
    // The order is short and what a deployer needs: it gets its room first;
    // then the risks the team accepted, each of which a reviewer must see.
    let order = order_section(report, &mut budget);
    let accepted = accepted_section(report, &mut budget);
    let findings = findings_section(report, &mut budget);
    let plans = plans_section(report, &mut budget);
    let apps = apps_section(report, &mut budget);
    let timelines = timelines_section(report, &mut budget);
    let statements = statements_section(report, &mut budget);
    let out = head + &findings + &accepted + &plans + &order + &apps + &timelines + &statements;
    debug_assert!(out.len() <= MARKDOWN_LIMIT, "{} bytes", out.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_findings_table_order_and_statement_table() {
        let md = render_markdown(&super::super::sample_report());
        assert!(md.starts_with("### rollsafe verify\n"), "{md}");
        assert!(
            md.contains("**FAILED**: 1 error(s), 1 warning(s), 0 accepted, 1 skipped"),
            "{md}"
        );
        let err = md
            .find("| **error** | `rewrite.table-rewritten` | `migrations/V3__b.sql:4` | jobs rewritten &lt;&amp;><br>advice: use a constant default |")
            .unwrap_or_else(|| panic!("{md}"));
        let warn = md
            .find("| warn | `locks.lock-modes` | `migrations/V3__b.sql:1` | scan |")
            .unwrap_or_else(|| panic!("{md}"));
        let skipped = md
            .find("| skipped | `locks.probe-skipped` | `migrations/V2__a.sql:1` |")
            .unwrap_or_else(|| panic!("{md}"));
        assert!(err < warn && warn < skipped, "errors first: {md}");
        assert!(!md.contains("no rewrite"), "info is only counted: {md}");
        assert!(md.contains("1 passing measurement(s)"), "{md}");
        assert!(
            md.contains("1. apply V3, then roll out the new app"),
            "{md}"
        );
        assert!(md.contains(
            "| 4 | `ALTER TABLE jobs ADD COLUMN x int` | ACCESS EXCLUSIVE on jobs | 0.4 ms | 9.5 ms | 10 |"
        ), "{md}");
        assert!(!md.contains("more findings"), "{md}");
    }

    #[test]
    fn each_rehearsed_migration_has_its_timeline_or_says_why_not() {
        let md = render_markdown(&super::super::sample_report());
        let chart = md
            .find("```mermaid\ngantt\n")
            .unwrap_or_else(|| panic!("{md}"));
        // Labels in Mermaid's entity codes (`·` is,), bars to the ms.
        assert!(md[chart..].contains(
            "    section V3 statements\n    BEGIN to COMMIT, its locks held to the end, ACCESS EXCLUSIVE on jobs, 10.7 ms :crit, 0, 11\n    L4 ALTER TABLE jobs ADD COLUMN x int, ACCESS EXCLUSIVE on jobs, 9.5 ms :crit, 1, 11\n"
        ), "{md}");
        assert!(md[chart..].contains(
            "    section apps waiting\n    old.list (read) waits for ACCESS SHARE on jobs behind L4, 7.5 ms :active, 3, 11\n"
        ), "{md}");
        assert!(md.contains("**V2** `migrations/V2__a.sql`: no timeline, no statement was measured on the seeded database."), "{md}");
        assert!(md.find("#### Lock timeline").unwrap() < md.find("<details>").unwrap());
    }

    #[test]
    fn a_run_that_measured_no_statement_says_so_once() {
        let mut r = super::super::sample_report();
        for m in &mut r.migrations {
            m.statements.clear();
        }
        let md = render_markdown(&r);
        assert_eq!(md.matches("no lock timeline").count(), 1, "{md}");
        assert!(
            !md.contains("```mermaid") && !md.contains("#### Lock timeline"),
            "{md}"
        );
        r.rows = 0;
        assert!(
            !render_markdown(&r).contains("timeline"),
            "nothing seeded: nothing said"
        );
    }

    #[test]
    fn cells_escape_pipes_newlines_and_html() {
        assert_eq!(cell("a|b\nc\r\nd <b>"), "a\\|b<br>c<br>d &lt;b>");
        assert_eq!(code("x || y"), "`x \\|\\| y`");
        assert_eq!(code("a`b"), "`` a`b ``");
    }

    #[test]
    fn lists_each_apps_statements_and_the_readers_compared() {
        use super::super::RehearsedApp;
        let mut r = super::super::sample_report();
        r.apps = vec![
            RehearsedApp {
                name: "base".into(),
                needs: 2,
                statements: 5,
            },
            RehearsedApp {
                name: "head".into(),
                needs: 3,
                statements: 6,
            },
        ];
        r.findings.extend([
            Finding::new(
                "backfill",
                "readers-agree",
                Severity::Info,
                Some(2),
                "after V2 every statement reader returns the rows it (or the older app's reader of the same rows) returned before: base's `select_jobs_by_id`",
            )
            .evidence("rows_compared", 24)
            .evidence("readers", 1),
            Finding::new("backfill", "new-readers-miss-rows", Severity::Error, Some(3), "lost")
                .evidence("app", "head")
                .evidence("statement", "select_jobs_by_owner_id_ready")
                .evidence("reference_app", "base")
                .evidence("reference_statement", "select_jobs_by_owner_id")
                .evidence("expected_rows", 10)
                .evidence("missing", 10),
            Finding::new("backfill", "reader-not-compared", Severity::Skipped, Some(3), "no rows")
                .evidence("app", "base")
                .evidence("statement", "select_tags"),
        ]);
        r.finish();
        let md = render_markdown(&r);
        assert!(
            md.contains("#### Apps\n\n| app | needs | statements |\n|---|---|---:|\n| `base` | V2 | 5 |\n| `head` | V3 | 6 |\n"),
            "{md}"
        );
        for line in [
            "- V2: same rows: base's `select_jobs_by_id` (24 rows compared)\n",
            "- V3: **rows lost**: head's `select_jobs_by_owner_id_ready` misses 10 of the 10 rows base's `select_jobs_by_owner_id` returned\n",
            "- V3: not compared: base's `select_tags` (why: the findings above)\n",
        ] {
            assert!(md.contains(line), "expected {line:?}: {md}");
        }
        // No reader finding: said, not left blank.
        r.findings.retain(|f| f.check != "backfill");
        let md = render_markdown(&r);
        assert!(
            md.contains("No app reader was compared before and after a migration."),
            "{md}"
        );
        // No apps: no section.
        r.apps.clear();
        assert!(!render_markdown(&r).contains("#### Apps"));
    }

    #[test]
    fn stays_within_its_limit_and_counts_what_was_left_out() {
        let mut r = super::super::sample_report();
        let template = r.findings[0].clone();
        for i in 0..500 {
            let mut f = template.clone();
            f.severity = if i % 5 == 0 {
                Severity::Error
            } else {
                Severity::Warn
            };
            f.id = format!("locks.finding-{i}");
            f.message = format!("finding {i}: {}", "a long | message\n".repeat(12));
            f.advice = "do the thing".repeat(10);
            r.findings.push(f);
        }
        r.migrations[1].statements = (0..2000)
            .map(|i| {
                let mut s = r.migrations[1].statements[0].clone();
                s.line = i + 1;
                s
            })
            .collect();
        r.finish();
        let md = render_markdown(&r);
        assert!(md.len() <= MARKDOWN_LIMIT, "{} bytes", md.len());
        let shown = md
            .lines()
            .filter(|l| {
                ["| **error** | `", "| warn | `", "| skipped | `"]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .count();
        assert!(shown > 10, "{shown} rows shown");
        let total = r.findings.len() - r.count(Severity::Info);
        let more = format!(
            "… and {} more findings (see the full report)",
            total - shown
        );
        assert!(md.contains(&more), "expected `{more}`");
        // Errors first: 101 errors (100 and the sample's), then warnings.
        let first_warn = md.find("| warn |").unwrap_or(md.len());
        let errors_shown = md[..first_warn].matches("| **error** |").count();
        assert_eq!(errors_shown, 101.min(shown), "{shown} rows");
        assert!(md.contains("more statement rows (see the full report)"));
        // The verdict and the deploy order are always there.
        assert!(md.contains("**FAILED**") && md.contains("1. apply V3"));
    }
}

//! Human-readable rendering: what was rehearsed, then the findings grouped
//! per migration (errors first), the per-statement tables, the lock
//! timelines of the migrations that blocked the apps' writes or kept an
//! app waiting (ASCII lanes, [`super::timeline`]), then the safe deploy
//! order and a verdict.

use std::fmt::Write;

use super::{timeline, Finding, Report, Severity};

/// Columns of an ASCII lane.
const LANE_WIDTH: usize = 50;

fn evidence_line(f: &Finding) -> String {
    f.evidence
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn tag(s: Severity) -> &'static str {
    match s {
        Severity::Error => "ERROR",
        Severity::Warn => "warn ",
        Severity::Info => "ok   ",
        Severity::Skipped => "SKIP ",
    }
}

/// Per migration, what each statement did: where it is, the locks it newly
/// took, its time on an empty and on the seeded database, the rows it
/// touched. Only for migrations of more than one statement or with locks.
fn render_statement_tables(out: &mut String, report: &Report) {
    let with_rows: Vec<_> = report
        .migrations
        .iter()
        .filter(|m| !m.statements.is_empty())
        .collect();
    if with_rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nper statement (locks newly taken; time at 0 and {} rows; rows touched)",
        report.rows
    );
    let regressions = report.plan_regressions();
    for m in with_rows {
        let _ = writeln!(out, "  {} {}", report.label(m.version), m.path);
        for s in &m.statements {
            let excerpt: String = if s.excerpt.chars().count() > 44 {
                s.excerpt.chars().take(43).collect::<String>() + "…"
            } else {
                s.excerpt.clone()
            };
            let regresses: Vec<String> = regressions
                .iter()
                .filter(|r| {
                    r.migration == Some(m.version) && r.line == Some(s.line) && s.script.is_none()
                })
                .map(|r| r.statement.clone())
                .collect();
            let _ = writeln!(
                out,
                "    {}line {:<4} {:<44} {:>8.1} ms {:>8.1} ms {:>8} rows  {}{}",
                s.script
                    .as_ref()
                    .map(|f| format!("{f} "))
                    .unwrap_or_default(),
                s.line,
                excerpt,
                s.ms_at_0_rows,
                s.ms_at_n_rows,
                s.rows_touched,
                if s.new_locks.is_empty() {
                    "-".to_string()
                } else {
                    s.new_locks.join(", ")
                },
                if regresses.is_empty() {
                    String::new()
                } else {
                    format!("  (plan regressed: {})", regresses.join(", "))
                }
            );
        }
    }
}

/// The lock timelines where they tell something a table does not: a
/// migration that held a lock blocking the apps' writes, or that an app
/// waited on.
fn render_timelines(out: &mut String, report: &Report) {
    let mut header = false;
    for m in &report.migrations {
        let Ok(t) = timeline::build(m) else {
            continue;
        };
        if t.waits.is_empty() && !t.statements.iter().any(|b| b.blocks_writes) {
            continue;
        }
        if !header {
            let _ = writeln!(
                out,
                "\nlock timeline (# holds a lock that blocks writes, = holds none the apps notice, ~ an app waiting)"
            );
            header = true;
        }
        let _ = writeln!(
            out,
            "  {} {}: 0 to {:.1} ms from its start, {:.1} ms a column{}",
            report.label(m.version),
            m.path,
            t.end_ms,
            t.end_ms / LANE_WIDTH as f64,
            if t.statements.len() < t.measured {
                format!("; {} statements in {} bars", t.measured, t.statements.len())
            } else {
                String::new()
            }
        );
        for line in timeline::ascii(&t, LANE_WIDTH) {
            let _ = writeln!(out, "    {line}");
        }
    }
}

/// `--from-target`'s copied tables as one phrase: production rows stay in
/// production unless a migration filled the table or the user asked.
pub(crate) fn copied_rows_phrase(copied: &[String]) -> String {
    if copied.is_empty() {
        "no production rows (every table seeded)".to_string()
    } else {
        format!(
            "production rows of {}; every other table seeded",
            copied.join(", ")
        )
    }
}

pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    render_header(&mut out, report);
    render_findings(&mut out, report);

    let regressions = report.plan_regressions();
    if !regressions.is_empty() {
        let _ = writeln!(out, "\nplans (before → after)");
        for r in &regressions {
            let v = r.migration.map_or(String::new(), |v| report.label(v));
            let _ = writeln!(out, "  {} {v} {}", tag(r.severity), r.summary);
        }
    }

    render_statement_tables(&mut out, report);
    render_timelines(&mut out, report);

    let hints: Vec<String> = regressions
        .iter()
        .filter_map(|r| {
            let v = r.migration.map_or(String::new(), |v| report.label(v));
            r.hint.as_ref().map(|h| format!("{v}: {h}"))
        })
        .collect();
    if !report.safe_order.is_empty() {
        let _ = writeln!(out, "\nsafe deploy order");
        for (i, step) in report.safe_order.iter().enumerate() {
            let _ = writeln!(out, "  {}. {step}", i + 1);
        }
        for h in &hints {
            let _ = writeln!(out, "  note: {h}");
        }
    } else if !report.passed && !report.apps.is_empty() {
        // Only a rehearsal (apps replayed) can prove a deploy order.
        let _ = writeln!(
            out,
            "\nno safe deploy order: fix the errors above and run again"
        );
        for h in &hints {
            let _ = writeln!(out, "  {h}");
        }
    }
    let (verdict, tally) = report.verdict();
    let _ = writeln!(out, "\n{verdict}{tally}");
    out
}

/// The run's header: the sandbox, the server, the migrations (those
/// rehearsed, those applied only), the base, copied rows, apps and rows.
fn render_header(out: &mut String, report: &Report) {
    let _ = writeln!(out, "{}", report.tool);
    let _ = writeln!(out, "  sandbox:    {}", report.sandbox);
    if !report.server_version.is_empty() {
        let _ = writeln!(out, "  server:     {}", report.server_version);
    }
    let _ = writeln!(out, "  migrations: {}", report.source);
    if let (Some(first), Some(last)) = (report.applied_only.first(), report.applied_only.last()) {
        // Not reached: an earlier migration stopped the rehearsal.
        let unreached: Vec<i32> = report
            .findings
            .iter()
            .filter(|f| {
                f.id == "apply.not-rehearsed"
                    && f.evidence.get("unreached").and_then(|u| u.as_str())
                        == Some(super::UNREACHED)
            })
            .filter_map(|f| f.migration)
            .collect();
        let rehearsed: Vec<String> = report
            .migrations
            .iter()
            .filter(|m| !report.applied_only.contains(&m.version))
            .filter(|m| !unreached.contains(&m.version))
            .map(|m| report.label(m.version))
            .collect();
        let how = match &report.base {
            Some(_) => "already applied on the target",
            None => "applied only, unchecked: --since",
        };
        let not_reached = match unreached.as_slice() {
            [] => String::new(),
            [one] => format!("{} not reached; ", report.label(*one)),
            [first, .., last] => format!(
                "{}..{} not reached; ",
                report.label(*first),
                report.label(*last)
            ),
        };
        let _ = writeln!(
            out,
            "  rehearsed:  {} ({not_reached}{}..{} {how})",
            if rehearsed.is_empty() {
                "nothing".to_string()
            } else {
                rehearsed.join(", ")
            },
            report.label(*first),
            report.label(*last)
        );
    }
    if let Some(base) = &report.base {
        let _ = writeln!(out, "  base:       rehearsed on {base}");
    }
    if let Some(copied) = &report.copied_rows {
        let _ = writeln!(out, "  copied:     {}", copied_rows_phrase(copied));
    }
    if !report.apps.is_empty() {
        let apps: Vec<String> = report
            .apps
            .iter()
            .map(|a| {
                format!(
                    "{} (needs {}, {} statements)",
                    a.name,
                    report.label(a.needs),
                    a.statements
                )
            })
            .collect();
        let _ = writeln!(out, "  apps:       {}", apps.join(", "));
    }
    if report.rows > 0 {
        let _ = writeln!(out, "  rows:       {} per seeded rehearsal", report.rows);
    }
}

/// The findings, grouped by migration (then the whole run's), the most
/// severe first.
fn render_findings(out: &mut String, report: &Report) {
    let mut groups: Vec<Option<i32>> = report.migrations.iter().map(|m| Some(m.version)).collect();
    groups.push(None);
    for group in groups {
        let findings: Vec<&Finding> = report
            .findings
            .iter()
            .filter(|f| f.migration == group)
            .collect();
        if findings.is_empty() {
            continue;
        }
        let title = match group {
            Some(v) => report
                .migrations
                .iter()
                .find(|m| m.version == v)
                .map(|m| format!("{} {}", report.label(v), m.file))
                .unwrap_or_else(|| report.label(v)),
            None => "whole run".to_string(),
        };
        let _ = writeln!(out, "\n{title}");
        let mut sorted = findings;
        sorted.sort_by_key(|f| std::cmp::Reverse(f.severity));
        for f in sorted {
            match &f.accepted {
                // Never an ERROR line a reader counts, never ok: accepted,
                // with the severity the check gave and why it is accepted.
                Some(a) => {
                    let _ = writeln!(out, "  ACCEPTED {} ({}) {}", f.id, f.severity, f.message);
                    let _ = writeln!(
                        out,
                        "        accepted: {} ({}{})",
                        a.reason,
                        a.by,
                        a.until
                            .as_ref()
                            .map_or(String::new(), |u| format!(", until {u}"))
                    );
                }
                None => {
                    let _ = writeln!(out, "  {} {:<36} {}", tag(f.severity), f.id, f.message);
                }
            }
            if let Some(l) = &f.location {
                let _ = writeln!(
                    out,
                    "        at:       {}:{}:{}  {}",
                    l.file, l.line, l.column, l.excerpt
                );
            }
            let ev = evidence_line(f);
            let plain = matches!(f.severity, Severity::Info);
            if !ev.is_empty() && !plain {
                let _ = writeln!(out, "        evidence: {ev}");
            } else if !ev.is_empty() {
                let _ = writeln!(out, "        {ev}");
            }
            if !f.advice.is_empty() && !plain {
                let _ = writeln!(out, "        advice:   {}", f.advice);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan regression: summarised before → after, the statement that
    /// dropped the index marked, the replacement named under the order.
    #[test]
    fn plan_regressions_are_summarised_marked_and_advised() {
        let mut r = super::super::sample_report();
        r.findings.push(
            Finding::new("plan", "regressed", Severity::Error, Some(3), "by_email regressed")
                .evidence("app", "shop")
                .evidence("statement", "by_email")
                .evidence("table", "books")
                .evidence("index_before", "books_email")
                .evidence("index_dropped", true)
                .evidence(
                    "plan_change",
                    "Index Scan using books_email (est. 1 row, cost 8.29) → Seq Scan (est. 1 row, cost 189.00)",
                )
                .at(Some(super::super::Location {
                    file: "migrations/V3__b.sql".into(),
                    line: 4,
                    column: 1,
                    excerpt: String::new(),
                })),
        );
        r.finish();
        // A failed run proves no order (verify clears it).
        r.safe_order.clear();
        let text = render_text(&r);
        assert!(
            text.contains("plans (before → after)\n  ERROR V3 shop.by_email on books: Index Scan using books_email (est. 1 row, cost 8.29) → Seq Scan (est. 1 row, cost 189.00)"),
            "{text}"
        );
        assert!(text.contains("(plan regressed: shop.by_email)"), "{text}");
        assert!(
            text.contains("no safe deploy order: fix the errors above and run again\n  V3: create the replacement index before dropping books_email (shop.by_email reads books through it)"),
            "{text}"
        );
        let md = crate::report::render_markdown(&r);
        assert!(
            md.contains("#### Plans (before → after)\n\n- **error** V3: shop.by_email on books: Index Scan using books_email"),
            "{md}"
        );
        assert!(
            md.contains("- V3: create the replacement index before dropping books_email"),
            "{md}"
        );
    }

    #[test]
    fn groups_per_migration_and_states_order_and_verdict() {
        let text = render_text(&super::super::sample_report());
        let v2 = text.find("\nV2 V2__a.sql").unwrap();
        let v3 = text.find("\nV3 V3__b.sql").unwrap();
        let err = text.find("ERROR rewrite.table-rewritten").unwrap();
        assert!(v2 < v3 && v3 < err, "{text}");
        assert!(text.contains("advice:   use a constant default"), "{text}");
        assert!(
            text.contains("at:       migrations/V3__b.sql:4:1  ALTER TABLE jobs ADD COLUMN x int"),
            "{text}"
        );
        assert!(
            text.contains("line 4    ALTER TABLE jobs ADD COLUMN x")
                && text.contains("ACCESS EXCLUSIVE on jobs"),
            "{text}"
        );
        assert!(
            text.contains("1. apply V3, then roll out the new app"),
            "{text}"
        );
        assert!(
            text.contains("FAILED: 1 error(s), 1 warning(s), 0 accepted, 1 skipped"),
            "{text}"
        );
        assert!(
            text.contains("SKIP  locks.probe-skipped") && text.contains("advice:   start it"),
            "{text}"
        );
    }

    #[test]
    fn a_lane_for_the_migration_that_kept_an_app_waiting() {
        let text = render_text(&super::super::sample_report());
        let lanes = text
            .find("\nlock timeline (# holds")
            .unwrap_or_else(|| panic!("{text}"));
        let lanes = &text[lanes..];
        // V3: statement from 1.2 ms for 9.5 ms, the wait from 3.0 ms for
        // 7.5 ms, over 10.7 ms in 50 columns.
        assert!(
            lanes.contains("  V3 migrations/V3__b.sql: 0 to 10.7 ms from its start"),
            "{text}"
        );
        let (statement, wait) = (
            format!("|     {}|", "#".repeat(45)),
            format!("|{}{}|", " ".repeat(14), "~".repeat(36)),
        );
        assert!(
            lanes.contains(&format!("    {statement} L4 ALTER TABLE")),
            "{text}"
        );
        assert!(
            lanes.contains(&format!("    {wait} old.list (read) waits")),
            "{text}"
        );
        assert!(!lanes.contains("V2 "), "V2 measured nothing: {text}");
    }
}

//! The lock timeline of one rehearsed migration, as the reports draw it:
//! a Mermaid `gantt` chart in the Markdown report (GitHub and GitLab
//! render it in comments and summaries) and a compact ASCII lane in the
//! text report.
//!
//! One bar per statement at its measured start and duration on the seeded
//! database, labelled with the strongest lock it held, and one bar per
//! app wait (the longest the report kept) at its measured start and
//! duration. A statement an app waited behind is critical. Nothing is
//! made up: a migration whose statements have no measured start gets no
//! chart, and says why ([`build`] returns the reason).
//!
//! Long migrations stay readable: consecutive statements that hold no
//! lock the apps notice (nothing that blocks a write) and that no app
//! waited behind become one bar; past [`MAX_STATEMENT_BARS`] the
//! neighbouring bars of shortest span are merged (never a critical one
//! while another pair is left), and the chart says how many statements
//! its bars stand for.

use std::fmt::Write;

use super::{AppWaitRow, RehearsedMigration, StatementRow};

/// Most statement bars a chart draws.
pub const MAX_STATEMENT_BARS: usize = 16;

/// One bar: a statement, several merged, or an app's wait.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub start_ms: f64,
    pub end_ms: f64,
    /// A statement an app waited behind, or (for a wait) always.
    pub critical: bool,
    /// Holds a lock that blocks the apps' writes (statements only).
    pub blocks_writes: bool,
    /// How many statements it stands for (0 for a wait).
    pub statements: usize,
}

/// A migration's timeline, ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// The migration's transaction, from its start to its commit: every
    /// lock a statement took stays held to the end of it, so the apps
    /// may wait past the statement that took it (None outside a
    /// transaction).
    pub transaction: Option<Bar>,
    pub statements: Vec<Bar>,
    pub waits: Vec<Bar>,
    /// Statements measured (what the statement bars stand for together).
    pub measured: usize,
    /// Whether an app workload ran while it applied (else no wait could
    /// be seen).
    pub apps_ran: bool,
    pub end_ms: f64,
}

/// The timeline of `m`, or why it has none.
pub fn build(m: &RehearsedMigration) -> Result<Timeline, String> {
    if m.statements.is_empty() {
        return Err("no statement was measured on the seeded database".to_string());
    }
    if m.statements.iter().any(|s| s.start_ms.is_none()) {
        return Err("its statements' start times were not measured".to_string());
    }
    let waits = m.app_waits.as_deref().unwrap_or_default();
    let mut bars: Vec<Group> = Vec::new();
    for s in &m.statements {
        let g = Group::of(s, waits);
        match bars.last_mut() {
            // (A callback's statements are a bar apart from the file's.)
            Some(last) if last.quiet() && g.quiet() && last.last_script == g.first_script => {
                last.absorb(g)
            }
            _ => bars.push(g),
        }
    }
    while bars.len() > MAX_STATEMENT_BARS {
        let pair = |critical_ok: bool| {
            (0..bars.len() - 1)
                .filter(|&i| critical_ok || !(bars[i].critical || bars[i + 1].critical))
                .min_by(|&i, &j| {
                    let span = |k: usize| bars[k + 1].end - bars[k].start;
                    span(i).total_cmp(&span(j))
                })
        };
        let Some(i) = pair(false).or_else(|| pair(true)) else {
            break;
        };
        let next = bars.remove(i + 1);
        bars[i].absorb(next);
    }
    let transaction = m.committed_ms.map(|committed| {
        let strongest = bars
            .iter()
            .filter_map(|g| g.lock.clone())
            .max_by_key(|l| l.0)
            .map_or("no lock on an existing table".to_string(), |l| l.1);
        Bar {
            label: format!(
                "BEGIN to COMMIT, its locks held to the end, {strongest}, {committed:.1} ms"
            ),
            start_ms: 0.0,
            end_ms: committed,
            critical: !waits.is_empty(),
            blocks_writes: bars.iter().any(|g| g.blocks_writes),
            statements: 0,
        }
    });
    let statements: Vec<Bar> = bars.into_iter().map(Group::bar).collect();
    let waits: Vec<Bar> = waits.iter().map(wait_bar).collect();
    let end_ms = statements
        .iter()
        .chain(&transaction)
        .chain(&waits)
        .map(|b| b.end_ms)
        .fold(0.0, f64::max);
    Ok(Timeline {
        transaction,
        statements,
        waits,
        measured: m.statements.len(),
        apps_ran: m.app_waits.is_some(),
        end_ms,
    })
}

/// Consecutive statements drawn as one bar.
struct Group {
    first_line: usize,
    last_line: usize,
    /// The callback the first and the last statement are of (None: the
    /// migration's own file).
    first_script: Option<String>,
    last_script: Option<String>,
    count: usize,
    start: f64,
    end: f64,
    excerpt: String,
    /// The strongest lock held, with its rank (for merging).
    lock: Option<(usize, String)>,
    blocks_writes: bool,
    critical: bool,
}

impl Group {
    fn of(s: &StatementRow, waits: &[AppWaitRow]) -> Group {
        let start = s.start_ms.unwrap_or_default();
        Group {
            first_line: s.line,
            last_line: s.line,
            first_script: s.script.clone(),
            last_script: s.script.clone(),
            count: 1,
            start,
            end: start + s.ms_at_n_rows,
            excerpt: s.excerpt.clone(),
            lock: s.strongest_lock.as_ref().map(|l| (rank(l), l.clone())),
            blocks_writes: s.blocks_writes,
            critical: s.script.is_none() && waits.iter().any(|w| w.behind_line == Some(s.line)),
        }
    }

    /// Holds nothing the apps notice and kept no app waiting.
    fn quiet(&self) -> bool {
        !self.blocks_writes && !self.critical
    }

    fn absorb(&mut self, o: Group) {
        self.last_line = o.last_line;
        self.last_script = o.last_script;
        self.count += o.count;
        self.end = self.end.max(o.end);
        if o.lock.as_ref().map(|l| l.0) > self.lock.as_ref().map(|l| l.0) {
            self.lock = o.lock;
        }
        self.blocks_writes |= o.blocks_writes;
        self.critical |= o.critical;
    }

    fn bar(self) -> Bar {
        let lock = match &self.lock {
            Some((_, l)) => l.clone(),
            None => "no lock on an existing table".to_string(),
        };
        let label = if self.count == 1 {
            format!(
                "{} {}, {lock}, {:.1} ms",
                at(&self.first_script, self.first_line),
                shorten(&self.excerpt, 40),
                self.end - self.start
            )
        } else {
            format!(
                "{}–{} {} statements, {}{lock}, {:.1} ms",
                at(&self.first_script, self.first_line),
                at(&self.last_script, self.last_line),
                self.count,
                if self.lock.is_some() { "up to " } else { "" },
                self.end - self.start
            )
        };
        Bar {
            label,
            start_ms: self.start,
            end_ms: self.end,
            critical: self.critical,
            blocks_writes: self.blocks_writes,
            statements: self.count,
        }
    }
}

/// `L4`, or `beforeEachMigrate__timeouts.sql L4` for a callback's line.
fn at(script: &Option<String>, line: usize) -> String {
    match script {
        Some(file) => format!("{file} L{line}"),
        None => format!("L{line}"),
    }
}

fn wait_bar(w: &AppWaitRow) -> Bar {
    let behind = w
        .behind_line
        .map_or(String::new(), |l| format!(" behind L{l}"));
    Bar {
        label: format!(
            "{} waits for {} on {}{behind}, {:.1} ms",
            w.statement, w.mode, w.table, w.ms
        ),
        start_ms: w.start_ms,
        end_ms: w.start_ms + w.ms,
        critical: true,
        blocks_writes: false,
        statements: 0,
    }
}

/// Rank of "SHARE on books"'s mode, weakest first (unknown: 0).
fn rank(lock: &str) -> usize {
    let mode = lock.split(" on ").next().unwrap_or_default();
    crate::pg::lock_modes::MODES
        .iter()
        .position(|m| crate::pg::lock_modes::sql_name(m) == mode)
        .map_or(0, |r| r + 1)
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        s.chars().take(max - 1).collect::<String>() + "…"
    } else {
        s.to_string()
    }
}

/// Text as Mermaid reads it in a gantt title, section or task name: `:`
/// ends a task name, `#` starts an entity, `;` ends a statement, `%%` a
/// comment; every character but letters, digits and plain punctuation is
/// written as Mermaid's entity code (`#58;`), which it draws as the
/// character.
pub fn mermaid_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || " _.,()-+=/".contains(c) {
            out.push(c);
        } else if c.is_control() {
            out.push(' ');
        } else {
            let _ = write!(out, "#{};", c as u32);
        }
    }
    out
}

/// The chart as a Markdown `mermaid` block: `title` above it.
pub fn mermaid(t: &Timeline, title: &str, statements_section: &str) -> String {
    let mut out = String::from("```mermaid\ngantt\n");
    let _ = writeln!(out, "    title {}", mermaid_text(title));
    out.push_str("    dateFormat x\n");
    // Milliseconds from the start, at epoch 0: the axis shows seconds.
    if t.end_ms < 60_000.0 {
        out.push_str("    axisFormat %S.%L s\n");
    } else {
        out.push_str("    axisFormat %M:%S\n");
    }
    let _ = writeln!(out, "    section {}", mermaid_text(statements_section));
    for b in t.transaction.iter().chain(&t.statements) {
        task(&mut out, b, if b.critical { "crit, " } else { "" });
    }
    if !t.waits.is_empty() {
        out.push_str("    section apps waiting\n");
        for b in &t.waits {
            task(&mut out, b, "active, ");
        }
    }
    out.push_str("```\n");
    out
}

/// One task line. Bars are drawn to the millisecond (the chart's
/// resolution); the label carries the measured figure.
fn task(out: &mut String, b: &Bar, tags: &str) {
    let start = b.start_ms.floor() as u64;
    let end = (b.end_ms.ceil() as u64).max(start + 1);
    let _ = writeln!(out, "    {} :{tags}{start}, {end}", mermaid_text(&b.label));
}

/// The chart as ASCII lanes, `width` columns for the whole span: `#`
/// where a statement holds a lock that blocks writes, `=` where it holds
/// none the apps notice, `~` where an app waits.
pub fn ascii(t: &Timeline, width: usize) -> Vec<String> {
    let span = t.end_ms.max(0.1);
    let cells = |ms: f64| ms / span * width as f64;
    let lane = |b: &Bar, mark: char| {
        let a = (cells(b.start_ms).floor() as usize).min(width - 1);
        let z = ((cells(b.end_ms).ceil() as usize).saturating_sub(1)).clamp(a, width - 1);
        let mut s: String = (0..width)
            .map(|i| if i >= a && i <= z { mark } else { ' ' })
            .collect();
        s.insert(0, '|');
        s.push('|');
        s
    };
    let mut lines = Vec::new();
    for b in t.transaction.iter().chain(&t.statements) {
        let mark = if b.blocks_writes { '#' } else { '=' };
        lines.push(format!(
            "{} {}{}",
            lane(b, mark),
            b.label,
            if b.critical { "  (an app waited)" } else { "" }
        ));
    }
    for b in &t.waits {
        lines.push(format!("{} {}", lane(b, '~'), b.label));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(line: usize, start: f64, ms: f64, lock: Option<&str>, blocks: bool) -> StatementRow {
        StatementRow {
            line,
            column: 1,
            script: None,
            excerpt: format!("statement at line {line}"),
            new_locks: Vec::new(),
            ms_at_0_rows: 0.1,
            ms_at_n_rows: ms,
            rows_touched: 0,
            start_ms: Some(start),
            strongest_lock: lock.map(str::to_string),
            blocks_writes: blocks,
        }
    }

    fn migration(
        statements: Vec<StatementRow>,
        waits: Option<Vec<AppWaitRow>>,
    ) -> RehearsedMigration {
        RehearsedMigration {
            version: 4,
            file: "V4__x.sql".into(),
            path: "migrations/V4__x.sql".into(),
            statements,
            label: String::new(),
            app_waits: waits,
            committed_ms: None,
        }
    }

    fn wait(start: f64, ms: f64, behind: usize) -> AppWaitRow {
        AppWaitRow {
            statement: "legacy.create (write)".into(),
            table: "books".into(),
            mode: "ROW EXCLUSIVE".into(),
            start_ms: start,
            ms,
            behind_line: Some(behind),
        }
    }

    #[test]
    fn bars_sit_at_the_measured_starts_and_the_blocker_is_critical() {
        let m = migration(
            vec![
                row(1, 0.5, 0.2, Some("ACCESS SHARE on books"), false),
                row(3, 1.0, 812.4, Some("SHARE on books"), true),
            ],
            Some(vec![wait(25.0, 790.1, 3)]),
        );
        let t = build(&m).unwrap();
        assert_eq!(t.statements.len(), 2);
        let blocker = &t.statements[1];
        assert!(blocker.critical && blocker.blocks_writes);
        assert_eq!((blocker.start_ms, blocker.end_ms), (1.0, 813.4));
        assert!(
            blocker.label.contains("SHARE on books, 812.4 ms"),
            "{}",
            blocker.label
        );
        assert!(!t.statements[0].critical);
        assert_eq!(
            t.waits[0].label,
            "legacy.create (write) waits for ROW EXCLUSIVE on books behind L3, 790.1 ms"
        );
        assert_eq!(t.end_ms, 815.1);
        let chart = mermaid(&t, "V4: lock timeline", "V4 statements");
        assert!(
            chart.contains("    title V4#58; lock timeline\n"),
            "{chart}"
        );
        assert!(chart.contains(" :crit, 1, 814\n"), "{chart}");
        assert!(chart.contains("    section apps waiting\n"), "{chart}");
        assert!(chart.contains(" :active, 25, 816\n"), "{chart}");
        // A bar under a millisecond is still drawn one wide.
        assert!(chart.contains(" :0, 1\n"), "{chart}");
    }

    #[test]
    fn quiet_statements_merge_and_long_migrations_are_capped() {
        let mut rows: Vec<StatementRow> = (0..10)
            .map(|i| row(i + 1, i as f64, 1.0, Some("ROW EXCLUSIVE on t"), false))
            .collect();
        rows.push(row(11, 10.0, 50.0, Some("ACCESS EXCLUSIVE on t"), true));
        let t = build(&migration(rows, None)).unwrap();
        assert_eq!(t.statements.len(), 2, "{:?}", t.statements);
        assert_eq!(t.statements[0].statements, 10);
        assert!(t.statements[0]
            .label
            .starts_with("L1–L10 10 statements, up to ROW EXCLUSIVE on t"));
        assert!(!t.apps_ran);

        // Forty statements that each block writes: capped, critical kept.
        let rows: Vec<StatementRow> = (0..40)
            .map(|i| {
                row(
                    i + 1,
                    i as f64 * 2.0,
                    1.0,
                    Some("ACCESS EXCLUSIVE on t"),
                    true,
                )
            })
            .collect();
        let t = build(&migration(rows, Some(vec![wait(60.0, 5.0, 31)]))).unwrap();
        assert_eq!(t.statements.len(), MAX_STATEMENT_BARS);
        assert_eq!(t.statements.iter().map(|b| b.statements).sum::<usize>(), 40);
        let critical: Vec<&Bar> = t.statements.iter().filter(|b| b.critical).collect();
        assert_eq!(critical.len(), 1);
        assert_eq!(
            critical[0].statements, 1,
            "the blocker stays a bar of its own"
        );
        assert!(critical[0].label.starts_with("L31 "));
    }

    #[test]
    fn no_measured_statement_is_said_not_drawn() {
        let none = build(&migration(Vec::new(), Some(Vec::new()))).unwrap_err();
        assert!(none.contains("no statement was measured"));
        let mut old = row(1, 0.0, 1.0, None, false);
        old.start_ms = None;
        assert!(build(&migration(vec![old], None)).is_err());
    }

    #[test]
    fn mermaid_text_escapes_what_gantt_would_read() {
        assert_eq!(mermaid_text("a: b # c; 50%"), "a#58; b #35; c#59; 50#37;");
        assert_eq!(mermaid_text("L3–L4 <x>\n"), "L3#8211;L4 #60;x#62; ");
    }

    #[test]
    fn ascii_lanes_mark_blocking_quiet_and_waiting() {
        let m = migration(
            vec![
                row(1, 0.0, 10.0, None, false),
                row(3, 10.0, 90.0, Some("SHARE on books"), true),
            ],
            Some(vec![wait(50.0, 50.0, 3)]),
        );
        let lines = ascii(&build(&m).unwrap(), 10);
        assert!(lines[0].starts_with("|=         | L1 "), "{lines:?}");
        assert!(lines[1].starts_with("| #########| L3 "), "{lines:?}");
        assert!(lines[1].ends_with("(an app waited)"));
        assert!(
            lines[2].starts_with("|     ~~~~~| legacy.create"),
            "{lines:?}"
        );
    }
}

//! GitHub Actions workflow commands: one `::error` / `::warning` /
//! `::notice` line per finding a reviewer must see (error, warn, skipped),
//! which the runner turns into annotations on the pull request's diff at
//! the statement's file and line.
//!
//! Syntax and escaping follow `@actions/core` (`command.ts`):
//! `::error file=F,line=L,col=C,title=T::MESSAGE`; in property values `%`,
//! CR, LF, `:` and `,` are percent-encoded, in the message only `%`, CR
//! and LF. GitHub shows at most 10 error and 10 warning annotations per
//! step (50 per job), so errors come first; the rest stay in the log.
//! Passing measurements (info) are not annotations; an accepted finding is
//! a notice titled `accepted error: <id>`, its reason first. Not here: the step
//! summary (`GITHUB_STEP_SUMMARY`, written by the binary as Markdown).

use std::fmt::Write;

use super::{Report, Severity};

/// Escapes a command's message.
fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a property value (also `:` and `,`, which separate properties).
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

fn command(severity: Severity) -> Option<&'static str> {
    match severity {
        Severity::Error => Some("error"),
        Severity::Warn => Some("warning"),
        // A check that could not measure: visible, but not a problem found.
        Severity::Skipped => Some("notice"),
        Severity::Info => None,
    }
}

/// The command of `f`: an accepted finding is a notice (seen on the diff,
/// not a problem the run fails on).
fn command_of(f: &super::Finding) -> Option<&'static str> {
    match &f.accepted {
        Some(_) => Some("notice"),
        None => command(f.severity),
    }
}

pub fn render_github(report: &Report) -> String {
    let mut findings: Vec<_> = report
        .findings
        .iter()
        .filter(|f| command_of(f).is_some())
        .collect();
    findings.sort_by_key(|f| (f.accepted.is_none(), f.severity));
    findings.reverse();
    let mut out = String::new();
    for f in findings {
        let mut properties = Vec::new();
        if let Some(l) = report.location_of(f) {
            properties.push(format!("file={}", escape_property(&l.file)));
            properties.push(format!("line={}", l.line));
            if f.location.is_some() {
                properties.push(format!("col={}", l.column));
            }
        }
        let mut message = f.message.clone();
        match &f.accepted {
            Some(a) => {
                properties.push(format!(
                    "title={}",
                    escape_property(&format!("accepted {}: {}", f.severity, f.id))
                ));
                message = format!("accepted: {} ({})\n{message}", a.reason, a.by);
            }
            None => properties.push(format!("title={}", escape_property(&f.id))),
        }
        if !f.advice.is_empty() {
            message.push_str("\nadvice: ");
            message.push_str(&f.advice);
        }
        let _ = writeln!(
            out,
            "::{} {}::{}",
            command_of(f).expect("filtered above"),
            properties.join(","),
            escape_data(&message)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits `::cmd props::message` the way the runner does.
    fn parse(line: &str) -> (&str, Vec<(&str, &str)>, &str) {
        let rest = line.strip_prefix("::").expect("starts with ::");
        let (head, message) = rest.split_once("::").expect(":: before the message");
        let (cmd, props) = head.split_once(' ').unwrap_or((head, ""));
        let props = props
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').expect("key=value"))
            .collect();
        (cmd, props, message)
    }

    #[test]
    fn one_command_per_finding_to_see_errors_first_with_file_and_line() {
        let r = super::super::sample_report();
        let text = render_github(&r);
        let lines: Vec<&str> = text.lines().collect();
        // error, warn, skipped; the info measurement is not an annotation.
        assert_eq!(lines.len(), 3, "{text}");
        let (cmd, props, message) = parse(lines[0]);
        assert_eq!(cmd, "error");
        assert_eq!(
            props,
            vec![
                ("file", "migrations/V3__b.sql"),
                ("line", "4"),
                ("col", "1"),
                ("title", "rewrite.table-rewritten"),
            ]
        );
        assert_eq!(
            message,
            "jobs rewritten <&>%0Aadvice: use a constant default"
        );
        // A finding about the whole migration points at its first line.
        let (cmd, props, message) = parse(lines[1]);
        assert_eq!(cmd, "warning");
        assert_eq!(
            props,
            vec![
                ("file", "migrations/V3__b.sql"),
                ("line", "1"),
                ("title", "locks.lock-modes"),
            ]
        );
        assert_eq!(message, "scan");
        let (cmd, props, _) = parse(lines[2]);
        assert_eq!(cmd, "notice");
        assert_eq!(props[0], ("file", "migrations/V2__a.sql"));
    }

    #[test]
    fn messages_and_properties_are_escaped() {
        let mut r = super::super::sample_report();
        let f = r
            .findings
            .iter_mut()
            .find(|f| f.severity == Severity::Error)
            .unwrap();
        f.message = "100% of rows: a, b\r\nthen c".into();
        f.advice = String::new();
        f.location.as_mut().unwrap().file = "dir,with:odd%name/V3.sql".into();
        let text = render_github(&r);
        let line = text.lines().next().unwrap();
        assert_eq!(
            line,
            "::error file=dir%2Cwith%3Aodd%25name/V3.sql,line=4,col=1,title=rewrite.table-rewritten\
             ::100%25 of rows: a, b%0D%0Athen c"
        );
        // Run-wide findings carry no file.
        r.findings[0].migration = None;
        r.findings[0].severity = Severity::Warn;
        r.findings[0].location = None;
        let id = r.findings[0].id.clone();
        let text = render_github(&r);
        assert!(
            text.lines()
                .any(|l| l == format!("::warning title={id}::no rewrite")),
            "{text}"
        );
    }
}

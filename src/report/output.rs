//! Where reports go: `--format F` with at most one `--output FILE`, and
//! `--output FORMAT=FILE`, repeatable, so one run writes several reports
//! (`--output junit=report.xml --output github=- --output markdown=summary.md`).
//! Planned before a run starts, so a typo costs a second, not a rehearsal.
//! Only parsing and planning: the binary writes.
//!
//! Standard output carries one report. When nothing else claims it, it
//! carries the text report (the log still shows the findings), unless the
//! text report was sent to a file. The GitHub report is the exception: its
//! workflow commands are lines the runner picks out of any log, so
//! `github=-` shares standard output with the text report, after it.

use std::path::PathBuf;
use std::str::FromStr;

use super::Format;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Stdout,
    File(PathBuf),
}

impl Destination {
    fn parse(s: &str) -> Destination {
        if s == "-" {
            Destination::Stdout
        } else {
            Destination::File(PathBuf::from(s))
        }
    }
}

/// One `--output` value: `FILE`, or `FORMAT=FILE` (`-` is standard output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSpec {
    /// None for a bare FILE: it takes `--format`.
    pub format: Option<Format>,
    pub destination: Destination,
}

impl FromStr for OutputSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<OutputSpec, String> {
        if s.is_empty() {
            return Err("empty; give FILE or FORMAT=FILE (e.g. junit=report.xml)".into());
        }
        match s.split_once('=') {
            // `FORMAT=FILE`, unless what precedes `=` is plainly a path
            // (`./a=b.txt`, `out/x=1.json`).
            Some((name, file)) if !name.contains(['/', '\\', '.']) => {
                if name.is_empty() {
                    return Err(format!("`{s}`: no format before `=`; e.g. junit={file}"));
                }
                let format: Format = name.parse().map_err(|e| format!("`{s}`: {e}"))?;
                if file.is_empty() {
                    return Err(format!(
                        "`{s}`: no file after `=`; e.g. {name}=report (or {name}=- for standard output)"
                    ));
                }
                Ok(OutputSpec {
                    format: Some(format),
                    destination: Destination::parse(file),
                })
            }
            _ => Ok(OutputSpec {
                format: None,
                destination: Destination::parse(s),
            }),
        }
    }
}

/// One report to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub format: Format,
    pub destination: Destination,
}

/// The reports to write for `--format` (None: not given) and the
/// `--output` values, standard output last (its text report before its
/// GitHub commands). Errors are one line, naming the flags at fault.
pub fn plan(format: Option<Format>, outputs: &[OutputSpec]) -> Result<Vec<Target>, String> {
    let bare: Vec<&OutputSpec> = outputs.iter().filter(|o| o.format.is_none()).collect();
    if bare.len() > 1 {
        return Err(
            "--output FILE is given more than once; name each report's format: --output junit=report.xml --output json=report.json"
                .into(),
        );
    }
    let mut targets: Vec<Target> = outputs
        .iter()
        .filter_map(|o| {
            o.format.map(|format| Target {
                format,
                destination: o.destination.clone(),
            })
        })
        .collect();
    match (bare.first(), format) {
        (Some(o), f) => targets.push(Target {
            format: f.unwrap_or(Format::Text),
            destination: o.destination.clone(),
        }),
        // `--format F` alone, or next to FORMAT=FILE outputs: F to stdout.
        (None, Some(f)) => targets.push(Target {
            format: f,
            destination: Destination::Stdout,
        }),
        (None, None) => {}
    }
    let on_stdout = |t: &Target| t.destination == Destination::Stdout;
    let claiming: Vec<Format> = targets
        .iter()
        .filter(|t| on_stdout(t) && t.format != Format::Github)
        .map(|t| t.format)
        .collect();
    if claiming.len() > 1 {
        let names: Vec<&str> = claiming.iter().map(|f| f.name()).collect();
        return Err(format!(
            "{} reports would go to standard output ({}); send all but one to files, e.g. --output {}=report",
            claiming.len(),
            names.join(", "),
            names[1]
        ));
    }
    if claiming.is_empty() && !targets.iter().any(|t| t.format == Format::Text) {
        targets.push(Target {
            format: Format::Text,
            destination: Destination::Stdout,
        });
    }
    for (i, t) in targets.iter().enumerate() {
        if let Destination::File(path) = &t.destination {
            if let Some(other) = targets[..i].iter().find(|o| o.destination == t.destination) {
                return Err(format!(
                    "the {} and the {} report would both overwrite {}; give each its own file",
                    other.format,
                    t.format,
                    path.display()
                ));
            }
        }
    }
    // Files first; on stdout, the text report before the GitHub commands.
    targets.sort_by_key(|t| (on_stdout(t), t.format == Format::Github));
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(values: &[&str]) -> Vec<OutputSpec> {
        values.iter().map(|v| v.parse().unwrap()).collect()
    }

    fn file(f: Format, path: &str) -> Target {
        Target {
            format: f,
            destination: Destination::File(path.into()),
        }
    }

    fn stdout(f: Format) -> Target {
        Target {
            format: f,
            destination: Destination::Stdout,
        }
    }

    #[test]
    fn the_single_format_and_output_work_as_before() {
        assert_eq!(plan(None, &[]), Ok(vec![stdout(Format::Text)]));
        assert_eq!(
            plan(Some(Format::Json), &[]),
            Ok(vec![stdout(Format::Json)])
        );
        // A file for machines: the log still shows the text report.
        assert_eq!(
            plan(Some(Format::Junit), &specs(&["r.xml"])),
            Ok(vec![file(Format::Junit, "r.xml"), stdout(Format::Text)])
        );
        assert_eq!(
            plan(Some(Format::Text), &specs(&["r.txt"])),
            Ok(vec![file(Format::Text, "r.txt")])
        );
        assert_eq!(
            plan(None, &specs(&["r.txt"])),
            Ok(vec![file(Format::Text, "r.txt")])
        );
        // A path with `=` in a directory name is still a path.
        assert_eq!(
            plan(Some(Format::Json), &specs(&["out/a=b.json"])),
            Ok(vec![
                file(Format::Json, "out/a=b.json"),
                stdout(Format::Text)
            ])
        );
    }

    #[test]
    fn repeated_outputs_write_one_report_each() {
        assert_eq!(
            plan(
                None,
                &specs(&["junit=report.xml", "github=-", "markdown=summary.md"])
            ),
            Ok(vec![
                file(Format::Junit, "report.xml"),
                file(Format::Markdown, "summary.md"),
                stdout(Format::Text),
                stdout(Format::Github),
            ])
        );
        assert_eq!(
            plan(None, &specs(&["markdown=-", "gitlab=gl.json"])),
            Ok(vec![
                file(Format::Gitlab, "gl.json"),
                stdout(Format::Markdown)
            ])
        );
        assert_eq!(
            plan(Some(Format::Json), &specs(&["junit=r.xml"])),
            Ok(vec![file(Format::Junit, "r.xml"), stdout(Format::Json)])
        );
    }

    #[test]
    fn bad_values_and_conflicts_are_one_line_errors() {
        let err = |s: &str| s.parse::<OutputSpec>().unwrap_err();
        assert!(
            err("xml=r.xml").contains("unknown format `xml`"),
            "{}",
            err("xml=r.xml")
        );
        assert!(err("junit=").contains("no file after `=`"));
        assert!(err("=r.xml").contains("no format before `=`"));
        assert!(err("").contains("FORMAT=FILE"));
        let conflict = |f: Option<Format>, v: &[&str]| plan(f, &specs(v)).unwrap_err();
        assert!(conflict(None, &["a.txt", "b.txt"]).contains("more than once"));
        assert!(conflict(None, &["json=-", "markdown=-"]).contains("standard output"));
        assert!(conflict(Some(Format::Json), &["junit=-"]).contains("standard output"));
        assert!(conflict(None, &["json=r", "junit=r"]).contains("both overwrite r"));
        for e in [err("xml=r.xml"), conflict(None, &["json=-", "markdown=-"])] {
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}

//! Liquibase's XML and YAML changelogs (`db.changelog-master.yaml`): the
//! order in which they `include` formatted SQL files, `includeAll` folders
//! and other changelogs, and the changeSets they write themselves (whose
//! SQL Liquibase generates: listed, never run by rollsafe).
//!
//! Read for their entries only, in document order, by scanning tags (XML)
//! or list items (YAML); anything else in them (properties, preconditions,
//! contexts) is not read.

/// One entry of a changelog, in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `include file:`: a path as written, and whether it is relative to
    /// the changelog (`relativeToChangelogFile`).
    Include { file: String, relative: bool },
    /// `includeAll path:`: a folder, its files in path order.
    IncludeAll { path: String, relative: bool },
    /// A changeSet written in the changelog itself (1-based line).
    ChangeSet {
        id: String,
        author: String,
        line: usize,
    },
}

/// Whether `path`'s text is a Liquibase changelog rollsafe reads entries of.
pub fn is_changelog(path: &str, bytes: &[u8]) -> bool {
    let kind = [".xml", ".yaml", ".yml"].iter().any(|x| path.ends_with(x));
    kind && String::from_utf8_lossy(bytes).contains("databaseChangeLog")
}

pub fn entries(path: &str, text: &str) -> Vec<Entry> {
    match path.ends_with(".xml") {
        true => xml_entries(text),
        false => yaml_entries(text),
    }
}

/// `name="value"` (or single-quoted) inside one tag's text.
fn xml_attribute(tag: &str, name: &str) -> Option<String> {
    let mut rest = tag;
    while let Some(at) = rest.find(name) {
        let before = rest[..at].chars().last();
        let after = rest[at + name.len()..].trim_start();
        rest = &rest[at + name.len()..];
        if !before.is_some_and(char::is_whitespace) {
            continue;
        }
        let Some(value) = after.strip_prefix('=').map(str::trim_start) else {
            continue;
        };
        let quote = value.chars().next()?;
        if quote != '"' && quote != '\'' {
            continue;
        }
        return value[1..].split(quote).next().map(str::to_string);
    }
    None
}

fn xml_entries(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    while let Some(at) = rest.find('<') {
        let tail = &rest[at..];
        if tail.starts_with("<!--") {
            let skip = tail.find("-->").map_or(tail.len(), |e| e + 3);
            offset += at + skip;
            rest = &tail[skip..];
            continue;
        }
        let end = tail.find('>').map_or(tail.len(), |e| e + 1);
        let tag = &tail[..end];
        let name: String = tag[1..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == ':')
            .collect();
        let local = name.rsplit(':').next().unwrap_or_default();
        let relative = xml_attribute(tag, "relativeToChangelogFile")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        match local {
            "include" => {
                out.extend(xml_attribute(tag, "file").map(|file| Entry::Include { file, relative }))
            }
            "includeAll" => out.extend(
                xml_attribute(tag, "path").map(|path| Entry::IncludeAll { path, relative }),
            ),
            "changeSet" => out.push(Entry::ChangeSet {
                id: xml_attribute(tag, "id").unwrap_or_default(),
                author: xml_attribute(tag, "author").unwrap_or_default(),
                line: text[..offset + at].matches('\n').count() + 1,
            }),
            _ => {}
        }
        offset += at + end;
        rest = &tail[end..];
    }
    out
}

/// A YAML `key: value` line's value for `key` (quotes and a trailing
/// comment dropped); the line may open a list item (`- key: value`).
fn yaml_value(line: &str, key: &str) -> Option<String> {
    let line = line.trim_start().trim_start_matches("- ").trim_start();
    let value = line.strip_prefix(key)?.strip_prefix(':')?;
    let value = value.split(" #").next().unwrap_or_default().trim();
    Some(value.trim_matches(['"', '\'']).to_string())
}

fn yaml_entries(text: &str) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let item = line.trim_start().strip_prefix("- ").map(str::trim_start);
        match item {
            Some(l) if l.starts_with("include:") => out.push(Entry::Include {
                file: String::new(),
                relative: false,
            }),
            Some(l) if l.starts_with("includeAll:") => out.push(Entry::IncludeAll {
                path: String::new(),
                relative: false,
            }),
            Some(l) if l.starts_with("changeSet:") => out.push(Entry::ChangeSet {
                id: String::new(),
                author: String::new(),
                line: i + 1,
            }),
            _ => {}
        }
        let relative_here = yaml_value(line, "relativeToChangelogFile")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        match out.last_mut() {
            Some(Entry::Include { file, relative }) => {
                if let Some(v) = yaml_value(line, "file").filter(|_| file.is_empty()) {
                    *file = v;
                }
                *relative |= relative_here;
            }
            Some(Entry::IncludeAll { path, relative }) => {
                if let Some(v) = yaml_value(line, "path").filter(|_| path.is_empty()) {
                    *path = v;
                }
                *relative |= relative_here;
            }
            Some(Entry::ChangeSet { id, author, .. }) => {
                if let Some(v) = yaml_value(line, "id").filter(|_| id.is_empty()) {
                    *id = v;
                }
                if let Some(v) = yaml_value(line, "author").filter(|_| author.is_empty()) {
                    *author = v;
                }
            }
            None => {}
        }
    }
    out.retain(|e| match e {
        Entry::Include { file, .. } => !file.is_empty(),
        Entry::IncludeAll { path, .. } => !path.is_empty(),
        Entry::ChangeSet { .. } => true,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_xml_entries_in_document_order() {
        let yaml = "databaseChangeLog:\n  - include:\n      file: db/changelog/bench-1.0.sql\n  - include:\n      file: 'bench-1.0.1.sql'\n      relativeToChangelogFile: true\n  - changeSet:\n      id: seed\n      author: ana\n      changes:\n        - sqlFile:\n            path: x.sql\n  - includeAll:\n      path: db/changelog/later/\n";
        assert_eq!(
            entries("m.yaml", yaml),
            [
                Entry::Include {
                    file: "db/changelog/bench-1.0.sql".into(),
                    relative: false
                },
                Entry::Include {
                    file: "bench-1.0.1.sql".into(),
                    relative: true
                },
                Entry::ChangeSet {
                    id: "seed".into(),
                    author: "ana".into(),
                    line: 7
                },
                Entry::IncludeAll {
                    path: "db/changelog/later/".into(),
                    relative: false
                },
            ]
        );
        let xml = "<?xml version=\"1.0\"?>\n<databaseChangeLog>\n  <!-- <include file=\"old.sql\"/> -->\n  <include file=\"a.sql\" relativeToChangelogFile=\"true\"/>\n  <changeSet id=\"2\" author=\"bo\">\n    <createTable tableName=\"t\"/>\n  </changeSet>\n  <includeAll path=\"more/\"/>\n</databaseChangeLog>\n";
        assert_eq!(
            entries("m.xml", xml),
            [
                Entry::Include {
                    file: "a.sql".into(),
                    relative: true
                },
                Entry::ChangeSet {
                    id: "2".into(),
                    author: "bo".into(),
                    line: 5
                },
                Entry::IncludeAll {
                    path: "more/".into(),
                    relative: false
                },
            ]
        );
    }
}

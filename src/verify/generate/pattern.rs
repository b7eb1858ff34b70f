//! Values for a column held to a regular expression (`CHECK (name ~
//! '^[a-z][a-z0-9_-]*$')`, a domain's `VALUE ~ …`): the pattern's syntax
//! tree walked to its shortest match, with the row index written into one
//! repetition that has room for it, so the values stay distinct.
//!
//! PostgreSQL's advanced regular expressions and the `regex` crate's
//! syntax agree on what real CHECKs use (classes, POSIX bracket classes,
//! `\d`, anchors, counted repetitions, groups, alternatives); a pattern it
//! cannot read gives no family, and the table falls back to the others.

use regex_syntax::hir::{Class, Hir, HirKind};

use super::I;
use crate::pg::quote_literal;

/// One piece of a value: fixed text, or the row index spelled in an
/// alphabet of ten characters (digits when the class takes them).
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Index(Option<[char; 10]>),
}

/// The SQL of values matching `pattern` (the row index as
/// [`super::I`]), and whether they are distinct: when the index found a
/// place (a repetition wide enough for `digits` characters, or an
/// unanchored end); else one constant match.
pub(super) fn matching(pattern: &str, digits: usize) -> Option<(String, bool)> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .ok()?;
    let mut walk = Walk {
        digits,
        placed: false,
    };
    let mut pieces = walk.shortest(&hir)?;
    if !walk.placed {
        // An unanchored end takes anything after the match.
        let suffix = hir.properties().look_set_suffix_any();
        let anchored_end = suffix.contains_anchor_haystack() || suffix.contains_anchor_line();
        if !anchored_end {
            pieces.push(Piece::Index(None));
        }
    }
    // Adjacent texts read as one literal.
    pieces.dedup_by(|next, prev| match (prev, next) {
        (Piece::Text(a), Piece::Text(b)) => {
            a.push_str(b);
            true
        }
        _ => false,
    });
    let injective = pieces.iter().any(|p| matches!(p, Piece::Index(_)));
    let sql = pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => quote_literal(t),
            Piece::Index(None) => format!("({I})::text"),
            Piece::Index(Some(alphabet)) => format!(
                "translate(({I})::text, '0123456789', {})",
                quote_literal(&alphabet.iter().collect::<String>())
            ),
        })
        .collect::<Vec<_>>();
    let sql = match sql.len() {
        0 => "''".to_string(),
        _ => sql.join(" || "),
    };
    Some((sql, injective))
}

struct Walk {
    /// Characters the largest row index takes.
    digits: usize,
    /// Whether the index has a place yet.
    placed: bool,
}

/// Repetitions longer than this are not spelled out (no real CHECK needs
/// them, and a value must stay small).
const MAX_REPEAT: u32 = 256;

impl Walk {
    fn shortest(&mut self, hir: &Hir) -> Option<Vec<Piece>> {
        Some(match hir.kind() {
            HirKind::Empty | HirKind::Look(_) => Vec::new(),
            HirKind::Literal(l) => vec![Piece::Text(String::from_utf8(l.0.to_vec()).ok()?)],
            HirKind::Class(c) => vec![Piece::Text(representative(c)?.to_string())],
            HirKind::Capture(c) => self.shortest(&c.sub)?,
            HirKind::Concat(subs) => {
                let mut out = Vec::new();
                for s in subs {
                    out.extend(self.shortest(s)?);
                }
                out
            }
            HirKind::Alternation(subs) => subs.iter().find_map(|s| self.shortest(s))?,
            HirKind::Repetition(r) => {
                if r.min > MAX_REPEAT {
                    return None;
                }
                let room = r.max.map_or(usize::MAX, |m| (m - r.min) as usize);
                let mut out = Vec::new();
                if !self.placed && room >= self.digits {
                    if let HirKind::Class(c) = r.sub.kind() {
                        if let Some(alphabet) = index_alphabet(c) {
                            self.placed = true;
                            for _ in 0..r.min {
                                out.push(Piece::Text(representative(c)?.to_string()));
                            }
                            out.push(Piece::Index(alphabet));
                            return Some(out);
                        }
                    }
                }
                let one = self.shortest(&r.sub)?;
                for _ in 0..r.min {
                    out.extend(one.iter().cloned());
                }
                out
            }
        })
    }
}

/// The characters a class matches, in ASCII order, printable ones only
/// (a value made of control characters would match but mislead a reader).
fn printable(c: &Class) -> Vec<char> {
    let mut out = Vec::new();
    if let Class::Unicode(u) = c {
        for r in u.iter() {
            for ch in r.start()..=r.end().min('~') {
                if ch.is_ascii_graphic() {
                    out.push(ch);
                }
            }
            if out.len() > 200 {
                break;
            }
        }
    }
    out
}

/// The character a class stands for in a value: a lower-case letter when
/// it has one, then an upper-case letter, a digit, then any printable one.
fn representative(c: &Class) -> Option<char> {
    let chars = printable(c);
    [
        |ch: &char| ch.is_ascii_lowercase(),
        |ch: &char| ch.is_ascii_uppercase(),
        |ch: &char| ch.is_ascii_digit(),
    ]
    .iter()
    .find_map(|f| chars.iter().copied().find(f))
    .or_else(|| chars.first().copied())
}

/// How the row index is spelled in a class: its own digits (None), ten of
/// its letters, or not at all (fewer than ten characters).
fn index_alphabet(c: &Class) -> Option<Option<[char; 10]>> {
    let chars = printable(c);
    if ('0'..='9').all(|d| chars.contains(&d)) {
        return Some(None);
    }
    let letters: Vec<char> = chars
        .iter()
        .copied()
        .filter(|ch| ch.is_ascii_alphanumeric())
        .chain(
            chars
                .iter()
                .copied()
                .filter(|ch| !ch.is_ascii_alphanumeric()),
        )
        .take(10)
        .collect();
    let alphabet: [char; 10] = letters.try_into().ok()?;
    Some(Some(alphabet))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::generate::families::at;

    /// The SQL of the family at index 42, for reading.
    fn value(pattern: &str) -> (String, bool) {
        let (sql, injective) = matching(pattern, 7).expect(pattern);
        (at(&sql, "42"), injective)
    }

    #[test]
    fn the_index_goes_into_the_first_repetition_with_room() {
        assert_eq!(
            value("^[A-Za-z][A-Za-z0-9_-]{0,63}$"),
            ("'a' || ((42))::text".into(), true)
        );
        assert_eq!(
            value(r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"),
            ("'0' || ((42))::text || '.0.0'".into(), true)
        );
        assert!(value("^[^@[:space:]]+@[^@[:space:]]+\\.[a-z]{2,}$").1);
    }

    #[test]
    fn letters_only_spell_the_index_in_letters_and_unanchored_ends_take_it() {
        assert_eq!(
            value("^[a-z]+$"),
            (
                "'a' || translate(((42))::text, '0123456789', 'abcdefghij')".into(),
                true
            )
        );
        assert_eq!(value("^/"), ("'/' || ((42))::text".into(), true));
        assert_eq!(
            value("^https?://"),
            ("'http://' || ((42))::text".into(), true)
        );
        // No room for the index: one constant value.
        assert_eq!(value("^(ci|docs)$"), ("'ci'".into(), false));
        assert!(matching("(?<=x)y", 7).is_none() || matching("[", 7).is_none());
        assert!(matching("[", 7).is_none());
    }
}

//! Values for a column held to a regular expression (`CHECK (name ~
//! '^[a-z][a-z0-9_-]*$')`, a domain's `VALUE ~ …`): the pattern's syntax
//! tree read as a row of *positions* (a class, an alternation of fixed
//! texts, each character of a repetition), the row index spread over all
//! of them in mixed radix, so the values stay distinct as long as the
//! pattern holds that many.
//!
//! A pattern's capacity is the product of its positions' sizes: a class
//! of 26 letters three times and four digits hold 26³·10⁴ values. A
//! repetition whose length may vary (`{4,8}`, `*`, `+`) grows, one
//! character at a time, until the pattern holds the rows asked for or it
//! can grow no further (its bound, the column's length); a pattern that
//! still holds fewer gives values that repeat every `capacity` indexes,
//! which the table's UNIQUE key then walks ([`super::fit::walk_lists`]).
//!
//! PostgreSQL's advanced regular expressions and the `regex` crate's
//! syntax agree on what real CHECKs use (classes, POSIX bracket classes,
//! `\d`, anchors, counted repetitions, groups, alternatives); a pattern it
//! cannot read gives no family, and the table falls back to the others.

use regex_syntax::hir::{Class, Hir, HirKind};

use super::family::Family;
use super::I;
use crate::pg::quote_literal;

/// What a part of a pattern takes, before repetition lengths are chosen.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    /// Fixed text.
    Text(String),
    /// One of these (a class's characters, an alternation's texts).
    Choice(Vec<String>),
    /// `min` to `max` (None: unbounded) of one of `unit`'s texts.
    Repeat {
        unit: Vec<String>,
        min: u32,
        max: Option<u32>,
    },
}

/// How much longer than its minimum an unbounded repetition may grow.
const MAX_GROWTH: u32 = 24;
/// Repetitions longer than this are not spelled out (no real CHECK needs
/// them, and a value must stay small).
const MAX_REPEAT: u32 = 256;

/// The family of values matching `pattern` for row indexes 1..=`width`,
/// no longer than `max_len` characters when given: distinct
/// (injective) when the pattern holds more than `width` values, else
/// repeating every `capacity` indexes (its [`Family::cycle`]). An
/// unanchored end takes the index as digits after the shortest match.
pub(super) fn matching(pattern: &str, width: u64, max_len: Option<usize>) -> Option<Family> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .ok()?;
    let mut items = items(&hir)?;
    let suffix = hir.properties().look_set_suffix_any();
    let anchored_end = suffix.contains_anchor_haystack() || suffix.contains_anchor_line();
    if !anchored_end {
        // Anything may follow a match: the shortest match, then the index.
        let text: String = positions(&items, &[])
            .iter()
            .map(|p| p[0].clone())
            .collect();
        let sql = format!("{} || ({I})::text", quote_literal(&text));
        return Some(Family {
            sql,
            injective: true,
            cycle: None,
        });
    }
    let lengths = grow(&mut items, width.saturating_add(1), max_len);
    let positions = positions(&items, &lengths);
    let capacity = positions
        .iter()
        .try_fold(1u64, |acc, p| acc.checked_mul(p.len() as u64));
    let sql = spread(&positions, width);
    Some(match capacity {
        Some(c) if c <= width => Family {
            sql,
            injective: c <= 1,
            cycle: Some(c),
        },
        _ => Family {
            sql,
            injective: true,
            cycle: None,
        },
    })
}

/// The SQL spelling index `I` in mixed radix over `positions`, the last
/// position the fastest; a position the largest index never moves stays
/// its first text.
fn spread(positions: &[Vec<String>], width: u64) -> String {
    let mut pieces: Vec<String> = Vec::new();
    let mut divisor: Option<u64> = Some(1);
    for p in positions.iter().rev() {
        let radix = p.len() as u64;
        let moves = radix > 1 && divisor.is_some_and(|d| d <= width);
        pieces.push(match (moves, divisor) {
            (true, Some(d)) => {
                let digit = format!("(({I}) / {d}) % {radix}");
                if p.iter().all(|s| s.chars().count() == 1) {
                    format!(
                        "substr({}, 1 + ({digit})::int, 1)",
                        quote_literal(&p.concat())
                    )
                } else {
                    let list: Vec<String> = p.iter().map(|s| quote_literal(s)).collect();
                    format!("(ARRAY[{}])[1 + {digit}]", list.join(", "))
                }
            }
            _ => quote_literal(&p[0]),
        });
        divisor = divisor.and_then(|d| d.checked_mul(radix));
    }
    pieces.reverse();
    // Adjacent literals read as one.
    let mut out: Vec<String> = Vec::new();
    for piece in pieces {
        match out.last_mut() {
            Some(last) if last.starts_with('\'') && piece.starts_with('\'') => {
                let joined = format!("{}{}", &last[..last.len() - 1], &piece[1..]);
                *last = joined;
            }
            _ => out.push(piece),
        }
    }
    out.retain(|p| p != "''");
    match out.len() {
        0 => "''".to_string(),
        _ => out.join(" || "),
    }
}

/// The items of a pattern; None for what it cannot spell (a class with
/// no printable character, a repetition too long).
fn items(hir: &Hir) -> Option<Vec<Item>> {
    Some(match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Vec::new(),
        HirKind::Literal(l) => vec![Item::Text(String::from_utf8(l.0.to_vec()).ok()?)],
        HirKind::Class(c) => {
            let chars = ordered(c);
            if chars.is_empty() {
                return None;
            }
            vec![Item::Choice(chars.iter().map(|c| c.to_string()).collect())]
        }
        HirKind::Capture(c) => items(&c.sub)?,
        HirKind::Concat(subs) => {
            let mut out = Vec::new();
            for s in subs {
                out.extend(items(s)?);
            }
            out
        }
        HirKind::Alternation(subs) => {
            let alternatives: Vec<Vec<Item>> = subs.iter().filter_map(items).collect();
            // Fixed texts only are a choice; else the first that spells.
            let texts: Option<Vec<String>> = alternatives.iter().map(|a| fixed(a)).collect();
            match texts {
                Some(mut t) if !t.is_empty() => {
                    t.dedup();
                    vec![Item::Choice(t)]
                }
                _ => alternatives.into_iter().next()?,
            }
        }
        HirKind::Repetition(r) => {
            if r.min > MAX_REPEAT {
                return None;
            }
            let sub = items(&r.sub)?;
            let unit = match sub.as_slice() {
                [Item::Choice(c)] => Some(c.clone()),
                [Item::Text(t)] => Some(vec![t.clone()]),
                _ => None,
            };
            match unit {
                Some(unit) => vec![Item::Repeat {
                    unit,
                    min: r.min,
                    max: r.max,
                }],
                // A group repeated: its shortest, as often as it must be.
                None => {
                    let mut out = Vec::new();
                    for _ in 0..r.min {
                        out.extend(sub.iter().cloned());
                    }
                    out
                }
            }
        }
    })
}

/// The text of items that take one value only.
fn fixed(items: &[Item]) -> Option<String> {
    items
        .iter()
        .map(|i| match i {
            Item::Text(t) => Some(t.clone()),
            Item::Repeat { unit, min, max } if unit.len() == 1 && Some(*min) == *max => {
                Some(unit[0].repeat(*min as usize))
            }
            _ => None,
        })
        .collect()
}

/// Chooses each repetition's length (returned in item order, for the
/// repeats only): its minimum, then one more character at a time on the
/// repetition with the most choices per character, until the pattern
/// holds `need` values, none can grow, or the value would pass `max_len`.
fn grow(items: &mut [Item], need: u64, max_len: Option<usize>) -> Vec<u32> {
    let mut lengths: Vec<u32> = items
        .iter()
        .filter_map(|i| match i {
            Item::Repeat { min, .. } => Some(*min),
            _ => None,
        })
        .collect();
    loop {
        let p = positions(items, &lengths);
        let capacity = p
            .iter()
            .try_fold(1u64, |acc, p| acc.checked_mul(p.len() as u64));
        if capacity.map_or(true, |c| c >= need) {
            return lengths;
        }
        let len: usize = p.iter().map(|p| p[0].chars().count()).sum();
        // The repeats that may take one more, the widest first (the last
        // of equals: values grow at their end).
        let mut best: Option<(usize, usize)> = None;
        let mut r = 0;
        for i in items.iter() {
            if let Item::Repeat { unit, min, max } = i {
                let room = max.unwrap_or(min.saturating_add(MAX_GROWTH));
                let step = unit.iter().map(|u| u.chars().count()).min().unwrap_or(1);
                let fits = max_len.map_or(true, |m| len + step <= m);
                let widest = best.map_or(true, |(_, size)| unit.len() >= size);
                if lengths[r] < room.min(MAX_REPEAT) && unit.len() > 1 && fits && widest {
                    best = Some((r, unit.len()));
                }
                r += 1;
            }
        }
        match best {
            Some((r, _)) => lengths[r] += 1,
            None => return lengths,
        }
    }
}

/// The positions of `items` with repetitions at `lengths` (their
/// minimum when `lengths` is empty): each the texts it may take.
fn positions(items: &[Item], lengths: &[u32]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut r = 0;
    for i in items {
        match i {
            Item::Text(t) => out.push(vec![t.clone()]),
            Item::Choice(c) => out.push(c.clone()),
            Item::Repeat { unit, min, .. } => {
                let n = lengths.get(r).copied().unwrap_or(*min);
                r += 1;
                for _ in 0..n {
                    out.push(unit.clone());
                }
            }
        }
    }
    out
}

/// The printable characters a class matches (a value made of control
/// characters would match but mislead a reader), letters and digits
/// first, each group in ASCII order: the first is what a position
/// holds when the index does not move it.
fn ordered(c: &Class) -> Vec<char> {
    let mut chars = Vec::new();
    if let Class::Unicode(u) = c {
        for r in u.iter() {
            for ch in r.start()..=r.end().min('~') {
                if ch.is_ascii_graphic() {
                    chars.push(ch);
                }
            }
            if chars.len() > 200 {
                break;
            }
        }
    }
    let (mut words, others): (Vec<char>, Vec<char>) =
        chars.into_iter().partition(|c| c.is_ascii_alphanumeric());
    words.extend(others);
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::generate::family::at;

    /// The family's value at index `i`, as PostgreSQL would compute it
    /// (the SQL evaluated here by hand for the shapes it uses).
    fn family(pattern: &str, width: u64) -> Family {
        matching(pattern, width, None).expect(pattern)
    }

    #[test]
    fn capacity_is_the_product_of_every_part() {
        // 26³ · 10⁴ at the shortest: room for 10 000 rows, distinct.
        let f = family("^[A-Z]{3}-[0-9]{4,8}$", 10_000);
        assert!(f.injective && f.cycle.is_none(), "{f:?}");
        // 26³ · 10 = 175 760 values: 10 000 distinct ones.
        let f = family("^[A-Z]{3}[0-9]$", 10_000);
        assert!(f.injective, "{f:?}");
        // Two letters hold 676: they repeat every 676 indexes.
        let f = family("^[A-Z]{2}$", 10_000);
        assert_eq!((f.injective, f.cycle), (false, Some(676)));
        // An alternation of texts is one position of that many values.
        let f = family("^(ci|docs)-[0-9]$", 100);
        assert_eq!(f.cycle, Some(20));
        assert_eq!(family("^(ci|docs)$", 100).cycle, Some(2));
    }

    #[test]
    fn the_index_is_spread_over_every_part_that_moves() {
        let f = family("^[A-Z]{3}-[0-9]{4,8}$", 100_000);
        // The digits move fastest, then the third letter; the first two
        // letters never move below 26 · 10⁴ rows.
        let digit = |d: u64| format!("substr('0123456789', 1 + ((((i)) / {d}) % 10)::int, 1)");
        let expected = format!(
            "'AA' || substr('ABCDEFGHIJKLMNOPQRSTUVWXYZ', 1 + ((((i)) / 10000) % 26)::int, 1) || '-' || {} || {} || {} || {}",
            digit(1000),
            digit(100),
            digit(10),
            digit(1)
        );
        assert_eq!(at(&f.sql, "i"), expected);
    }

    #[test]
    fn repetitions_grow_until_the_rows_fit_or_their_bound() {
        // Three digits at least: 10⁵ rows need five of them.
        let f = family("^[A-Z]{2}-[0-9]{3,6}$", 10_000_000);
        assert!(f.injective, "{f:?}");
        // `{2}` cannot grow: 676 values whatever is asked.
        assert_eq!(family("^[a-z]{2}$", 1_000_000).cycle, Some(676));
        // A column's length bounds the growth.
        let f = matching("^[a-z]+$", 1_000_000, Some(2)).unwrap();
        assert_eq!(f.cycle, Some(676));
        assert!(matching("^[a-z]+$", 1_000_000, None).unwrap().injective);
    }

    #[test]
    fn unanchored_ends_take_the_index_and_unreadable_patterns_none() {
        assert_eq!(at(&family("^/", 10).sql, "42"), "'/' || ((42))::text");
        assert_eq!(
            at(&family("^https?://", 10).sql, "42"),
            "'http://' || ((42))::text"
        );
        assert!(matching("[", 7, None).is_none());
    }
}

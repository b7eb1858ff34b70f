//! Value families: per kind of type, the SQL expressions of the row index
//! a column's values may come from (`i`, `0`, `'name_' || i`, the literals
//! a CHECK mentions, …), injective ones marked.

use super::catalogue::{TypeInfo, TypeKind};
use super::family::{at, each_of, fam, inj, Family};
use super::{I, MAX_FAMILIES};
use crate::pg::quote_literal;

/// The literals of a CHECK expression: strings (`'a'`, `'-5'`) and bare
/// numbers, as candidate values (`status IN ('a', 'b')`, `qty > 100`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Literals {
    pub(super) strings: Vec<String>,
    pub(super) numbers: Vec<String>,
    /// Regular expressions the value must match (`~ '…'`, `~* '…'`).
    pub(super) patterns: Vec<String>,
}

impl Literals {
    pub(super) fn scan(&mut self, expr: &str) {
        let mut chars = expr.chars().peekable();
        let mut prev_ident = false;
        // What came before the current literal, to tell a pattern (`~`,
        // `~*`, not `!~`) from a value.
        let mut before = String::new();
        while let Some(ch) = chars.next() {
            before.push(ch);
            match ch {
                '\'' => {
                    let op = before[..before.len() - 1].trim_end();
                    let op = op.strip_suffix('*').unwrap_or(op);
                    let is_pattern = op.ends_with('~') && !op.ends_with("!~");
                    let mut s = String::new();
                    while let Some(c) = chars.next() {
                        if c == '\'' {
                            if chars.peek() == Some(&'\'') {
                                chars.next();
                                s.push('\'');
                            } else {
                                break;
                            }
                        } else {
                            s.push(c);
                        }
                    }
                    before.push_str(&s);
                    before.push('\'');
                    if is_pattern {
                        if !self.patterns.contains(&s) {
                            self.patterns.push(s);
                        }
                        prev_ident = false;
                        continue;
                    }
                    if s.parse::<f64>().is_ok() && !self.numbers.contains(&s) {
                        self.numbers.push(s.clone());
                    }
                    if !self.strings.contains(&s) {
                        self.strings.push(s);
                    }
                    prev_ident = false;
                }
                c if c.is_ascii_digit() && !prev_ident => {
                    let mut n = c.to_string();
                    while let Some(&c) = chars.peek() {
                        if c.is_ascii_digit() || c == '.' {
                            n.push(c);
                            before.push(c);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    if n.parse::<f64>().is_ok() && !self.numbers.contains(&n) {
                        self.numbers.push(n);
                    }
                }
                c => prev_ident = c.is_alphanumeric() || c == '_' || c == '"',
            }
        }
    }
}

/// Candidate values of a column, best first: realistic and injective
/// first, then constants and what the CHECKs mention, NULL last (when the
/// column allows it). `width` is the largest index, for sizing text to a
/// `varchar(n)`.
pub(super) fn families(
    ty: &TypeInfo,
    typmod: i32,
    name: &str,
    lits: &Literals,
    width: u64,
) -> Vec<Family> {
    let mut v = match &ty.kind {
        TypeKind::Int(bytes) => integers(*bytes, lits),
        TypeKind::Numeric | TypeKind::Float | TypeKind::Money => numbers(ty, typmod, lits),
        TypeKind::Text => texts(typmod, name, lits, width),
        TypeKind::Enum(labels) => enum_labels(ty, labels),
        TypeKind::Domain {
            base,
            base_typmod,
            checks,
            ..
        } => {
            let mut lits = lits.clone();
            for c in checks {
                lits.scan(c);
            }
            let typmod = if typmod >= 0 { typmod } else { *base_typmod };
            families(base, typmod, name, &lits, width)
        }
        TypeKind::Array(elem) => arrays(elem, typmod, name, lits, width),
        TypeKind::Range(sub) => ranges(sub, name, width),
        TypeKind::Bool => booleans(),
        TypeKind::Bytea => bytes(lits),
        kind => FIXED
            .iter()
            .find(|(k, _)| std::mem::discriminant(k) == std::mem::discriminant(kind))
            .map_or(&OTHER[..], |(_, templates)| templates)
            .iter()
            .map(|&(sql, injective)| Family {
                sql: sql
                    .replace("{i}", I)
                    .replace("{name}", &quote_literal(name)),
                injective,
                cycle: None,
            })
            .collect(),
    };
    v.truncate(MAX_FAMILIES);
    v
}

/// Both values in turn, then each alone. Each repeats (a cycle of 2, or
/// of 1), so a UNIQUE key on a boolean (a one-row table's `singleton
/// boolean PRIMARY KEY CHECK (singleton)`) gets the rows it can hold
/// ([`super::fit::walk_lists`]) instead of a duplicate key.
fn booleans() -> Vec<Family> {
    [("{i} % 2 = 0", 2), ("true", 1), ("false", 1)]
        .into_iter()
        .map(|(sql, k)| Family {
            sql: sql.replace("{i}", I),
            injective: false,
            cycle: Some(k),
        })
        .collect()
}

/// A family template: SQL with `{i}` for the row index and `{name}` for
/// the column's name as a literal; whether distinct indexes give distinct
/// values.
type Template = (&'static str, bool);

/// The families of the kinds whose values need nothing but the row index
/// and the column's name.
const FIXED: &[(TypeKind, &[Template])] = &[
    (
        TypeKind::Uuid,
        &[
            ("md5({name} || {i})::uuid", true),
            ("'00000000-0000-0000-0000-000000000000'", false),
        ],
    ),
    (
        TypeKind::Timestamp,
        &[
            (
                "timestamptz '2020-01-01 00:00:00+00' + {i} * interval '1 minute'",
                true,
            ),
            ("now() - {i} * interval '1 minute'", true),
            ("now() + {i} * interval '1 minute'", true),
            ("now()", false),
            ("timestamptz '2000-01-01 00:00:00+00'", false),
        ],
    ),
    (
        TypeKind::Date,
        &[
            ("date '2020-01-01' + ({i} % 3650)::int", false),
            ("date '2000-01-01' + ({i})::int", true),
            ("current_date - ({i} % 3650)::int", false),
            ("current_date + 1 + ({i} % 3650)::int", false),
            ("current_date", false),
        ],
    ),
    (
        TypeKind::Time,
        &[
            ("time '00:00' + ({i} % 86400) * interval '1 second'", false),
            ("time '12:00'", false),
            ("time '00:00'", false),
        ],
    ),
    (
        TypeKind::Interval,
        &[
            ("{i} * interval '1 second'", true),
            ("interval '1 hour'", false),
            ("interval '0'", false),
            ("-{i} * interval '1 second'", true),
        ],
    ),
    (
        TypeKind::Json,
        &[
            ("jsonb_build_object({name}, {i})", true),
            ("'{}'", false),
            ("'[]'", false),
            ("jsonb_build_array({i})", true),
        ],
    ),
    (
        TypeKind::Inet,
        &[
            ("'10.0.0.0'::inet + {i}", true),
            ("'127.0.0.1'::inet", false),
        ],
    ),
    (
        // Twelve hex digits, the index's (macaddr8 takes a 6-byte
        // address too): no text shape of the unknown types' fits it.
        TypeKind::MacAddr,
        &[
            ("lpad(to_hex({i}), 12, '0')::macaddr", true),
            ("'02:00:00:00:00:01'::macaddr", false),
        ],
    ),
];

/// A type rollsafe does not know: text shapes its input function may
/// accept (a number, a word, a range, a point, an empty value); the fit
/// probe keeps the ones it does.
const OTHER: [Template; 7] = [
    ("({i})::text", true),
    ("'w' || {i}", true),
    ("'[' || {i} || ',' || ({i} + 1) || ')'", true),
    ("'(' || {i} || ',' || {i} || ')'", true),
    ("''", false),
    ("'0'", false),
    ("'{}'", false),
];

fn integers(bytes: u8, lits: &Literals) -> Vec<Family> {
    let i = I;
    let mut v = vec![inj(i), fam(format!("{i} % 100 + 1"))];
    if bytes == 2 {
        v.push(fam(format!("{i} % 30000")));
    }
    v.extend([fam("0"), fam("1"), inj(format!("-{i}"))]);
    v.extend(number_list(lits));
    v.extend(small_range(lits));
    v.extend(around_literals(lits));
    v
}

/// Every whole number strictly between the smallest a CHECK mentions and
/// the largest (`screening_no BETWEEN 1 AND 9999`, `age >= 18 AND age <
/// 130`: whether a bound is itself allowed is not read), in turn: a key
/// held to a small range holds that many values, walked with its foreign
/// keys. (The probe samples the first indexes, not the whole cycle: the
/// bounds are left out rather than tested.)
fn small_range(lits: &Literals) -> Option<Family> {
    let whole: Vec<i64> = lits
        .numbers
        .iter()
        .filter_map(|n| n.parse::<i64>().ok())
        .collect();
    let (lo, hi) = (*whole.iter().min()?, *whole.iter().max()?);
    let span = hi.checked_sub(lo)?.checked_sub(1)?;
    (2..=100_000_000).contains(&span).then(|| Family {
        sql: format!("{} + {I} % {span}", lo + 1),
        injective: false,
        cycle: Some(span as u64),
    })
}

/// The whole numbers a CHECK mentions in turn (`action IN (0, 1, 2, 3)`).
fn number_list(lits: &Literals) -> Option<Family> {
    let whole: Vec<String> = lits
        .numbers
        .iter()
        .filter(|n| n.parse::<i64>().is_ok())
        .cloned()
        .collect();
    (!whole.is_empty()).then(|| each_of(&whole))
}

/// Each number a CHECK mentions: just above, just below, and itself.
fn around_literals(lits: &Literals) -> Vec<Family> {
    let i = I;
    lits.numbers
        .iter()
        .take(6)
        .flat_map(|n| {
            [
                inj(format!("{n} + {i}")),
                inj(format!("{n} - {i}")),
                fam(n.clone()),
            ]
        })
        .collect()
}

fn numbers(ty: &TypeInfo, typmod: i32, lits: &Literals) -> Vec<Family> {
    let i = I;
    let mut v = vec![inj(i), fam(format!("{i} % 100 + 1")), fam("0"), fam("1")];
    if typmod >= 4 {
        // numeric(p, s): at most p - s digits before the point.
        let p = ((typmod - 4) >> 16) & 0xffff;
        let s = (typmod - 4) & 0xffff;
        let digits = (p - s).clamp(0, 18) as u32;
        if digits > 0 {
            v.push(fam(format!("{i} % {}", 10u64.pow(digits) - 1)));
        }
    }
    v.push(inj(format!("-{i}")));
    v.push(inj(format!("{i} / 100.0")));
    v.extend(around_literals(lits));
    if matches!(ty.kind, TypeKind::Money) {
        v = v
            .into_iter()
            .map(|f| Family {
                sql: format!("({})::numeric", f.sql),
                ..f
            })
            .collect();
    }
    v
}

fn texts(typmod: i32, name: &str, lits: &Literals, width: u64) -> Vec<Family> {
    let i = I;
    let max_len = (typmod >= 5).then(|| (typmod - 4) as usize);
    let digits = width.max(1).to_string().len() + 1; // a minus sign
    let room = max_len.map_or(24, |n| n.saturating_sub(digits).min(24));
    let prefix: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(room.saturating_sub(1))
        .collect();
    // A pattern the value must match comes first: nothing else would.
    let mut v: Vec<Family> = lits
        .patterns
        .iter()
        .filter_map(|p| super::pattern::matching(p, width, max_len))
        .collect();
    // A column its name says holds a time zone: the app reads it as one
    // (Python's zoneinfo, Ruby's TZInfo) and fails on any other text
    // (`Invalid timezone 'time_zone_1'`), which production never holds.
    if names_a_time_zone(name) {
        let zones: Vec<String> = TIME_ZONES
            .iter()
            .filter(|z| max_len.map_or(true, |n| z.len() <= n))
            .map(|z| quote_literal(z))
            .collect();
        if !zones.is_empty() {
            v.push(each_of(&zones));
        }
    }
    if room >= 2 {
        v.push(inj(format!(
            "{} || {i}",
            quote_literal(&format!("{prefix}_"))
        )));
    }
    v.push(inj(format!("{i}::text")));
    if let Some(n) = max_len.filter(|&n| n < digits) {
        // Too short for the index's digits (`varchar(2)`): letters and
        // digits in every place, as many values as the length holds.
        v.extend(super::pattern::matching(
            &format!("^[0-9A-Za-z]{{1,{n}}}$"),
            width,
            Some(n),
        ));
    }
    if !lits.strings.is_empty() {
        let all: Vec<String> = lits.strings.iter().map(|s| quote_literal(s)).collect();
        v.push(each_of(&all));
        for s in lits.strings.iter().take(6) {
            v.push(inj(format!("{} || {i}", quote_literal(s))));
            v.push(fam(quote_literal(s)));
        }
    }
    // A length a CHECK names (`char_length(code) = 8`): the index padded.
    for n in lits
        .numbers
        .iter()
        .filter_map(|n| n.parse::<usize>().ok())
        .filter(|&n| (1..=256).contains(&n) && max_len.map_or(true, |m| n <= m))
        .take(3)
    {
        let sql = format!("lpad(({i})::text, {n}, 'x')");
        v.push(if n >= digits { inj(sql) } else { fam(sql) });
    }
    v.extend([
        inj(format!("md5({i}::text)")),
        inj(format!(
            "upper({}) || {i}",
            quote_literal(&format!("{prefix}_"))
        )),
        fam("'x'"),
        fam("''"),
    ]);
    v
}

/// IANA time zones of several offsets, the first short enough for any
/// column that holds one.
const TIME_ZONES: [&str; 8] = [
    "UTC",
    "Asia/Tokyo",
    "Europe/Berlin",
    "Europe/London",
    "America/Chicago",
    "Australia/Sydney",
    "America/New_York",
    "America/Sao_Paulo",
];

/// `time_zone`, `timezone`, `tz`, `site_tz`, `TimeZone`: a column its
/// name says holds a time zone.
fn names_a_time_zone(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "tz" || name.ends_with("_tz") || name.contains("timezone") || name.contains("time_zone")
}

/// Byte strings: a digest of the index (16 bytes, 32 for the usual
/// `octet_length(hash) = 32`), and one of each length a CHECK mentions.
fn bytes(lits: &Literals) -> Vec<Family> {
    let i = I;
    let mut v = vec![
        inj(format!("decode(md5({i}::text), 'hex')")),
        inj(format!("sha256(({i})::text::bytea)")),
    ];
    for n in lits
        .numbers
        .iter()
        .filter_map(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=4096).contains(n) && *n != 16 && *n != 32)
        .take(4)
    {
        let hex = format!("decode(repeat(md5({i}::text), {}), 'hex')", n.div_ceil(16));
        let sql = format!("substring({hex} from 1 for {n})");
        // Six bytes of a digest are as good as distinct for seeding.
        v.push(if n >= 6 { inj(sql) } else { fam(sql) });
    }
    v.push(fam(r"'\x00'::bytea"));
    v
}

fn enum_labels(ty: &TypeInfo, labels: &[String]) -> Vec<Family> {
    let mut v = Vec::new();
    if !labels.is_empty() {
        v.push(Family {
            cycle: Some(labels.len() as u64),
            ..fam(format!(
                "(enum_range(NULL::{}))[1 + {I} % {}]",
                ty.sql,
                labels.len()
            ))
        });
    }
    v.extend(labels.iter().take(8).map(|l| fam(quote_literal(l))));
    v
}

fn arrays(elem: &TypeInfo, typmod: i32, name: &str, lits: &Literals, width: u64) -> Vec<Family> {
    let elems = families(elem, typmod, name, lits, width.saturating_add(1));
    let mut v = Vec::new();
    if let Some(e) = elems.first() {
        v.push(Family {
            sql: format!("ARRAY[{}, {}]", e.sql, at(&e.sql, &format!("{I} + 1"))),
            injective: e.injective,
            cycle: None,
        });
        v.push(Family {
            sql: format!("ARRAY[{}]", e.sql),
            injective: e.injective,
            cycle: e.cycle,
        });
    }
    v.push(fam("'{}'"));
    v
}

/// `[v(i), v(i + 1))`: increasing for the subtype's first families
/// (numbers, times); the fit probe drops the others.
fn ranges(sub: &TypeInfo, name: &str, width: u64) -> Vec<Family> {
    // Only injective subtype values: a family that wraps (a date modulo
    // ten years) would give a lower bound above the upper one.
    let mut v: Vec<Family> = families(sub, -1, name, &Literals::default(), width.saturating_add(1))
        .iter()
        .filter(|e| e.injective)
        .take(3)
        .map(|e| {
            inj(format!(
                "'[' || ({})::text || ',' || ({})::text || ')'",
                e.sql,
                at(&e.sql, &format!("{I} + 1"))
            ))
        })
        .collect();
    v.push(fam("'empty'"));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::generate::catalogue::{TypeInfo, TypeKind};

    #[test]
    fn check_literals_become_candidates() {
        let mut l = Literals::default();
        l.scan("((status = ANY (ARRAY['new'::text, 'it''s'::text])) AND (qty > 100) AND (col2 < '-5'::integer))");
        assert_eq!(l.strings, ["new", "it's", "-5"]);
        assert_eq!(l.numbers, ["100", "-5"]);
    }

    #[test]
    fn text_values_fit_their_varchar_and_stay_distinct() {
        let ty = TypeInfo {
            kind: TypeKind::Text,
            sql: "character varying".into(),
        };
        let f = families(
            &ty,
            4 + 10,
            "customer_name",
            &Literals::default(),
            1_000_000,
        );
        assert!(f[0].injective);
        // 8 digits for the index and its sign leave 2 characters: "c_".
        assert_eq!(at(&f[0].sql, "7"), "'c_' || (7)");
        let ints = families(
            &TypeInfo {
                kind: TypeKind::Int(4),
                sql: "integer".into(),
            },
            -1,
            "n",
            &Literals {
                numbers: vec!["100".into()],
                ..Literals::default()
            },
            10,
        );
        assert!(ints.iter().any(|f| at(&f.sql, "g") == "100 + (g)"));
    }

    /// A column named for a time zone is offered IANA names first (an
    /// app that reads it as a zone fails on other text), short enough
    /// for its varchar; a unique one still has injective values after
    /// them, and other columns are not offered zones.
    #[test]
    fn a_time_zone_column_holds_time_zones() {
        let text = TypeInfo {
            kind: TypeKind::Text,
            sql: "character varying".into(),
        };
        let none = Literals::default();
        let zone = families(&text, 4 + 63, "time_zone", &none, 1000);
        assert_eq!(zone[0].cycle, Some(8), "{:?}", zone[0]);
        assert_eq!(at(&zone[0].sql, "0").matches('/').count(), 7);
        assert!(zone[1..].iter().any(|f| f.injective));
        let short = families(&text, 4 + 12, "site_tz", &none, 1000);
        assert!(
            short[0].sql.contains("'Asia/Tokyo'") && !short[0].sql.contains("'Europe/Berlin'"),
            "{:?}",
            short[0]
        );
        let other = families(&text, -1, "zone_label", &none, 1000);
        assert!(other.iter().all(|f| !f.sql.contains("UTC")), "{other:?}");
    }
}

//! One family of values: an SQL expression of the row index, and what it
//! promises (distinct values, or values that repeat every `k` indexes).
//! Its own file below [`super::families`] (which families a type has)
//! and [`super::pattern`] (a family matching a regular expression), which
//! both make them.

use super::I;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Family {
    /// SQL with [`I`] standing for the row index (a bigint).
    pub(super) sql: String,
    /// Distinct indexes give distinct values.
    pub(super) injective: bool,
    /// The values repeat every `k` indexes (`list[1 + i % k]`: an IN
    /// list, an enum's labels): k consecutive indexes give k distinct
    /// values, so a UNIQUE key of this column and foreign keys can still
    /// walk their combinations.
    pub(super) cycle: Option<u64>,
}

pub(super) fn fam(sql: impl Into<String>) -> Family {
    Family {
        sql: sql.into(),
        injective: false,
        cycle: None,
    }
}

pub(super) fn inj(sql: impl Into<String>) -> Family {
    Family {
        sql: sql.into(),
        injective: true,
        cycle: None,
    }
}

/// `list[1 + i % k]`: each of the `k` SQL values in turn.
pub(super) fn each_of(values: &[String]) -> Family {
    let k = values.len();
    Family {
        sql: format!("(ARRAY[{}])[1 + {I} % {k}]", values.join(", ")),
        injective: false,
        cycle: Some(k as u64),
    }
}

/// `template` with the index replaced by `index` (an SQL expression).
pub(super) fn at(template: &str, index: &str) -> String {
    template.replace(I, &format!("({index})"))
}

//! PostgreSQL knowledge that every layer shares, below all of them: which
//! table-level lock modes conflict ([`lock_modes`]), how to read the
//! catalogue ([`catalogue`]: columns, constraints and foreign keys,
//! indexes, table statistics) and how to quote an identifier or a literal.
//!
//! Nothing here knows rollsafe's own modules: no migration set, no
//! sandbox, no finding. Callers say which relations they mean (by oid);
//! the readers say what the catalogue holds about them.

pub mod catalogue;
pub mod lock_modes;

/// Quotes a string as an SQL literal (`'it''s'`; standard-conforming
/// strings, so a backslash is an ordinary character).
pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Quotes an identifier for SQL (`"name"`, doubling embedded quotes).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn identifiers_are_quoted_with_their_quotes_doubled() {
        assert_eq!(super::quote_ident("orders"), "\"orders\"");
        assert_eq!(super::quote_ident("a\"b"), "\"a\"\"b\"");
    }
}

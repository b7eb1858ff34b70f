//! What a statement the server received asks about the server itself, not
//! the project's rows: a driver's catalogue lookups and a framework's
//! check that its tables exist. Read by capture (a test run's statements:
//! the drivers' introspection is left out of the app) and by the framework
//! split (what a migrate command sent besides its migrations).

use squawk_lexer::TokenKind;

/// Whether a statement only asks about the server or its catalogue: a
/// read of the system catalogue (a driver's type lookup, a framework's
/// check that its table exists), or of no table calling only
/// PostgreSQL's information functions (`SELECT pg_catalog.version()`,
/// `select current_schema()`, `SELECT 1`). A read of no table calling
/// any other function (`SELECT place_order($1)`) is the app's.
pub fn introspects(text: &str) -> bool {
    if crate::sql::classify::classify(text) != crate::sql::classify::Class::Read {
        return false;
    }
    let relations = read_relations(text);
    if !relations.is_empty() {
        return relations.iter().all(|n| is_catalog(n));
    }
    let tokens = tokens(text);
    tokens.iter().enumerate().all(|(i, (kind, word))| {
        let called = *kind == TokenKind::Ident
            && matches!(tokens.get(i + 1), Some((TokenKind::OpenParen, _)));
        let qualified_by_catalog = i >= 2
            && matches!(tokens[i - 1].0, TokenKind::Dot)
            && tokens[i - 2].1.eq_ignore_ascii_case("pg_catalog");
        let word = word.to_ascii_lowercase();
        !called
            || qualified_by_catalog
            || is_information_function(&word)
            || is_keyword_before_paren(&word)
    })
}

/// PostgreSQL's functions that tell about the session and the server.
fn is_information_function(name: &str) -> bool {
    matches!(
        name,
        "version"
            | "current_schema"
            | "current_schemas"
            | "current_database"
            | "current_catalog"
            | "current_user"
            | "session_user"
            | "current_setting"
            | "set_config"
            | "pg_backend_pid"
            | "pg_is_in_recovery"
            | "pg_postmaster_start_time"
            | "inet_server_addr"
            | "inet_server_port"
            | "to_regclass"
            | "to_regtype"
            | "to_regproc"
            | "format_type"
    ) || name.starts_with("pg_get_")
}

/// The keywords a read writes before `(` (a subquery, a list, a cast):
/// no function is called there.
fn is_keyword_before_paren(word: &str) -> bool {
    matches!(
        word,
        "select"
            | "in"
            | "any"
            | "all"
            | "exists"
            | "cast"
            | "coalesce"
            | "values"
            | "array"
            | "row"
            | "and"
            | "or"
            | "not"
            | "as"
    )
}

/// PostgreSQL's own relations: the system catalogue and the
/// information schema.
pub(crate) fn is_catalog(name: &str) -> bool {
    name.starts_with("pg_") || name.starts_with("information_schema")
}

/// The statement's words, lower case, without comments.
pub(crate) fn words(text: &str) -> Vec<String> {
    tokens(text)
        .into_iter()
        .filter(|(k, _)| *k == TokenKind::Ident)
        .map(|(_, t)| t.to_ascii_lowercase())
        .collect()
}

/// The tokens of `text` that are not whitespace or comments.
pub(crate) fn tokens(text: &str) -> Vec<(TokenKind, &str)> {
    let mut offset = 0;
    squawk_lexer::tokenize(text)
        .filter_map(|t| {
            let token = text.get(offset..offset + t.len as usize).unwrap_or("");
            offset += t.len as usize;
            (!matches!(
                t.kind,
                TokenKind::Whitespace | TokenKind::LineComment | TokenKind::BlockComment { .. }
            ))
            .then_some((t.kind, token))
        })
        .collect()
}

/// Whether `text` names `table` (an identifier, quoted or not, any
/// schema; `table` in lower case).
pub(crate) fn mentions(text: &str, table: &str) -> bool {
    tokens(text).iter().any(|(k, t)| {
        matches!(k, TokenKind::Ident | TokenKind::QuotedIdent { .. })
            && t.trim_matches('"').eq_ignore_ascii_case(table)
    })
}

/// The relations a query reads: the names after `FROM` and `JOIN` (the
/// last part of each, unquoted, lower case); a name followed by `(` is a
/// function, not a relation.
pub fn read_relations(text: &str) -> Vec<String> {
    let tokens = tokens(text);
    let mut out = Vec::new();
    for (i, (kind, word)) in tokens.iter().enumerate() {
        if *kind != TokenKind::Ident
            || !(word.eq_ignore_ascii_case("from") || word.eq_ignore_ascii_case("join"))
        {
            continue;
        }
        let (mut j, mut last) = (i + 1, None);
        while let Some((TokenKind::Ident | TokenKind::QuotedIdent { .. }, t)) = tokens.get(j) {
            last = Some(t.trim_matches('"').to_lowercase());
            j += 1;
            match tokens.get(j) {
                Some((TokenKind::Dot, _)) => j += 1,
                _ => break,
            }
        }
        let function = matches!(tokens.get(j), Some((TokenKind::OpenParen, _)));
        if let Some(name) = last.filter(|n| !function && !matches!(n.as_str(), "only" | "lateral"))
        {
            out.push(name);
        }
    }
    out
}

/// One statement on one line, for messages.
pub fn excerpt(text: &str) -> String {
    let folded: Vec<&str> = text.split_whitespace().collect();
    let line = folded.join(" ");
    match line.char_indices().nth(100) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line,
    }
}

//! Splitting a SQL file into its top-level statements.
//!
//! This is the one statement splitter in rollsafe: whatever needs "the
//! statements of this migration" (to run them one at a time, to point at one
//! by line and column, to quote it in a finding) calls [`split`]. It is built
//! on squawk's pure-Rust PostgreSQL grammar, so dollar-quoted bodies, strings
//! (`E'\''` included), quoted identifiers, nested block comments,
//! `BEGIN ATOMIC … END` bodies and PostgreSQL 18 syntax never split in the
//! wrong place.
//!
//! What it is not: a validator. A statement squawk cannot parse is still
//! returned when its end is unambiguous (`;` outside parentheses, the way psql
//! delimits it), marked [`Statement::parsed`]` == false`; the server is the
//! judge of whether it is valid. When the boundaries themselves are in doubt
//! (an unterminated quote or comment, unbalanced parentheses, a `BEGIN ATOMIC`
//! squawk could not follow, psql backslash commands or `COPY … FROM stdin`
//! data), [`split`] does not guess: it returns the whole file as one statement
//! with [`Split::exact`]` == false`, so the caller can run it as one unit and
//! let PostgreSQL report the error.

pub mod classify;

use squawk_lexer::{LiteralKind, TokenKind};
use squawk_syntax::{Parse, SourceFile, SyntaxElement, SyntaxKind, SyntaxNode, SyntaxToken};

/// One top-level statement of a SQL file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The statement's SQL exactly as in the file, from its first keyword to
    /// its last token: without comments before it and without the
    /// terminating `;`. Always `&file[start..end]`.
    pub text: String,
    /// Byte offset in the file of the statement's first character.
    pub start: usize,
    /// Byte offset in the file just past the statement's last token.
    pub end: usize,
    /// 1-based line of the statement's first character.
    pub line: usize,
    /// 1-based column of the statement's first character, in characters.
    pub column: usize,
    /// squawk's grammar parsed this statement without error. `false` for a
    /// statement it does not know (or that is invalid), delimited the way
    /// psql delimits it, and for the whole-file statement of an inexact split.
    pub parsed: bool,
}

impl Statement {
    /// The statement on one line for messages: runs of whitespace (newlines
    /// included) folded into one space, cut to at most `max_chars` characters
    /// with a trailing `…` when it was longer.
    pub fn excerpt(&self, max_chars: usize) -> String {
        let folded = self
            .text
            .split_whitespace()
            .flat_map(|word| std::iter::once(' ').chain(word.chars()))
            .skip(1);
        let mut chars: Vec<char> = folded.take(max_chars.saturating_add(1)).collect();
        if chars.len() <= max_chars {
            return chars.into_iter().collect();
        }
        chars.truncate(max_chars.saturating_sub(1));
        while chars.last() == Some(&' ') {
            chars.pop();
        }
        if max_chars > 0 {
            chars.push('…');
        }
        chars.into_iter().collect()
    }
}

/// The statements of a SQL file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// In file order; empty when the file holds no statement.
    pub statements: Vec<Statement>,
    /// `true`: the statements, whitespace, comments and `;` account for the
    /// whole file, and each boundary is one squawk's grammar drew or (for a
    /// statement it could not parse, see [`Statement::parsed`]) the `;` psql
    /// would end it at. `false`: the boundaries could not be trusted and
    /// `statements` is the whole file (trimmed, starting at its first token
    /// that is not a comment) as one statement, to run as one unit.
    pub exact: bool,
}

/// Splits a SQL file into its top-level statements. Never panics; see
/// [`Split::exact`] for what happens when the file cannot be split safely.
pub fn split(sql: &str) -> Split {
    match prescan(sql) {
        Prescan::Blank => Split {
            statements: Vec::new(),
            exact: true,
        },
        Prescan::Parse => match parse_on_own_stack(sql) {
            Some(statements) => Split {
                statements,
                exact: true,
            },
            None => whole_file(sql),
        },
        Prescan::WholeFile(_) => whole_file(sql),
    }
}

/// The file holds nothing to run: only whitespace, comments and empty
/// statements (stray `;`).
pub fn is_blank(sql: &str) -> bool {
    split(sql).statements.is_empty()
}

/// A statement that opens or ends a transaction block, written in a file
/// that manages its own transactions (sent as a simple-query string or
/// statement by statement, where PostgreSQL obeys it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionControl {
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`, `END`, `ROLLBACK`, `ABORT`, `PREPARE TRANSACTION`: the
    /// block is over (a savepoint's `ROLLBACK TO` and the `… PREPARED`
    /// commands are not).
    End,
}

/// Whether `statement` opens or ends a transaction block (its leading
/// keywords: the splitter starts a statement at its first keyword).
pub fn transaction_control(statement: &Statement) -> Option<TransactionControl> {
    let words: Vec<String> = statement
        .text
        .split_whitespace()
        .take(2)
        .map(str::to_ascii_uppercase)
        .collect();
    let first = words.first()?.as_str();
    let second = words.get(1).map(String::as_str);
    match (first, second) {
        ("BEGIN", _) | ("START", Some("TRANSACTION")) => Some(TransactionControl::Begin),
        ("COMMIT" | "ROLLBACK", Some("PREPARED")) | ("ROLLBACK", Some("TO")) => None,
        ("COMMIT" | "END" | "ROLLBACK" | "ABORT", _) | ("PREPARE", Some("TRANSACTION")) => {
            Some(TransactionControl::End)
        }
        _ => None,
    }
}

/// A `DO` block or a procedure `CALL` that ends transactions of its own
/// (`COMMIT`/`ROLLBACK` in a `DO` body; a `CALL`, whose body is not in the
/// file, may): PostgreSQL allows that only outside a transaction block
/// ("invalid transaction termination" inside one).
pub fn commits_itself(statement: &Statement) -> bool {
    let words: Vec<String> = statement
        .text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .collect();
    match words.first().map(String::as_str) {
        Some("CALL") => true,
        Some("DO") => words.iter().any(|w| w == "COMMIT" || w == "ROLLBACK"),
        _ => false,
    }
}

/// Whether PostgreSQL refuses `statement` inside a transaction block
/// (`PreventInTransactionBlock` in its source): a concurrent index build,
/// drop or reindex, `DETACH PARTITION … CONCURRENTLY`, `VACUUM`, a
/// database-wide `REINDEX`, databases, tablespaces, subscriptions,
/// `ALTER SYSTEM`; and a block that commits itself ([`commits_itself`]).
pub fn refuses_transaction_block(statement: &Statement) -> bool {
    const HEADS: &[&[&str]] = &[
        &["VACUUM"],
        &["CREATE", "DATABASE"],
        &["DROP", "DATABASE"],
        &["CREATE", "TABLESPACE"],
        &["DROP", "TABLESPACE"],
        &["CREATE", "SUBSCRIPTION"],
        &["DROP", "SUBSCRIPTION"],
        &["ALTER", "SYSTEM"],
        &["REINDEX", "SCHEMA"],
        &["REINDEX", "DATABASE"],
        &["REINDEX", "SYSTEM"],
    ];
    let words: Vec<String> = statement
        .text
        .split_whitespace()
        .map(str::to_ascii_uppercase)
        .collect();
    let starts =
        |head: &[&str]| words.len() >= head.len() && words.iter().zip(head).all(|(w, h)| w == h);
    let concurrently = matches!(
        words.first().map(String::as_str),
        Some("CREATE" | "DROP" | "REINDEX" | "ALTER")
    ) && words
        .iter()
        .any(|w| w == "CONCURRENTLY" || w.starts_with("CONCURRENTLY"));
    concurrently || HEADS.iter().any(|h| starts(h)) || commits_itself(statement)
}

/// Runs `f` on squawk's parse of `sql` (syntax errors included: the tree is
/// lossless) with the same guards as [`split`]: the pre-scan first, then
/// the parse, `f` and the tree's drop on a thread with
/// `PARSER_STACK_BYTES` of stack. For whoever needs more of the tree than
/// the statements (the lint rules of `verify::checks::static`). Never
/// panics: a file the pre-scan refuses, or a parse or `f` that panics, is
/// an `Err` saying why.
pub fn with_parse<T: Send>(
    sql: &str,
    f: impl FnOnce(&Parse<SourceFile>) -> T + Send,
) -> Result<T, NotSplittable> {
    if let Prescan::WholeFile(why) = prescan(sql) {
        return Err(why);
    }
    on_parser_stack(|| f(&SourceFile::parse(sql))).ok_or(NotSplittable::ParserFailed)
}

/// squawk's parser is recursive descent: its stack use grows with how deeply
/// the input nests (parentheses, subqueries, `NOT NOT …`, operator chains) and
/// an overflow aborts the process, which no `catch_unwind` can stop. Measured
/// on a debug build, 2 MiB of stack (the default for spawned and test
/// threads) holds only about 1 100 nested `NOT`s or 400 nested subqueries. So
/// the parse runs on a thread of its own with this much stack, and
/// [`MAX_NESTING_PRESSURE`] keeps input well inside it.
const PARSER_STACK_BYTES: usize = 128 << 20;

/// The most tokens the pre-scan lets sit on one path of open parentheses and
/// brackets, counting at each level only the tokens since that level's last
/// `,` or `;` (list items are parsed in a loop, so a comma ends a recursion).
/// The worst constructs measured cost about 2 KiB of parser stack per such
/// token in a debug build, so this stays far below [`PARSER_STACK_BYTES`]; it
/// also bounds time, since squawk takes quadratic time in nesting depth
/// (about 0.7 s in release, 11 s in debug, for the worst input at this
/// limit). Ordinary statements stay far below it, since long `VALUES`, column
/// and `IN` lists reset at every comma; a file with a comma-free run that long
/// (a `CASE` of thousands of branches) is run as one unit instead.
const MAX_NESTING_PRESSURE: usize = 10_000;

/// Why a file is not parsed: the pre-scan sends it to the server as one
/// unit, or the parser did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotSplittable {
    /// A quote, dollar quote, quoted identifier or block comment never
    /// closes: everything after its start is inside it.
    #[error("a quote, dollar quote, quoted identifier or block comment never closes")]
    Unterminated,
    /// A backslash outside any literal: psql meta-commands or inline
    /// `COPY … FROM stdin` data, which are not SQL the server can run.
    #[error("it holds psql backslash commands or COPY … FROM stdin data")]
    Backslash,
    /// Nested or chained beyond `MAX_NESTING_PRESSURE`.
    #[error("it nests deeper than the parser can safely follow")]
    TooDeep,
    /// Larger than the 4 GiB squawk's 32-bit offsets can address.
    #[error("it is larger than the 4 GiB the parser can address")]
    TooLarge,
    /// The parser's thread could not start or panicked (a squawk bug; the
    /// panic message reaches stderr through the panic hook).
    #[error("the parser did not finish (a bug in squawk's parser)")]
    ParserFailed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prescan {
    /// Whitespace and (terminated) comments only.
    Blank,
    /// Safe to hand to the parser.
    Parse,
    WholeFile(NotSplittable),
}

/// One linear pass over squawk's tokens that decides, before the parser runs,
/// whether it may run at all (see [`NotSplittable`]).
fn prescan(sql: &str) -> Prescan {
    if u32::try_from(sql.len()).is_err() {
        return Prescan::WholeFile(NotSplittable::TooLarge);
    }
    let mut blank = true;
    // Tokens since the last `,` or `;` at each open nesting level.
    let mut runs: Vec<usize> = vec![0];
    let mut pressure = 0usize;
    let mut offset = 0usize;
    for token in squawk_lexer::tokenize(sql) {
        let len = token.len as usize;
        let text = sql.get(offset..offset + len).unwrap_or("");
        offset += len;
        match token.kind {
            TokenKind::Whitespace | TokenKind::LineComment => continue,
            TokenKind::BlockComment { terminated } => {
                if terminated {
                    continue;
                }
                return Prescan::WholeFile(NotSplittable::Unterminated);
            }
            TokenKind::QuotedIdent {
                terminated: false, ..
            } => return Prescan::WholeFile(NotSplittable::Unterminated),
            TokenKind::Literal { kind } if !literal_terminated(kind) => {
                return Prescan::WholeFile(NotSplittable::Unterminated)
            }
            TokenKind::Unknown if text.starts_with('\\') => {
                return Prescan::WholeFile(NotSplittable::Backslash)
            }
            _ => {}
        }
        blank = false;
        let level = runs.len() - 1;
        match token.kind {
            TokenKind::Comma | TokenKind::Semi => {
                pressure -= runs[level];
                runs[level] = 0;
            }
            TokenKind::OpenParen | TokenKind::OpenBracket => {
                runs[level] += 1;
                pressure += 1;
                runs.push(0);
            }
            TokenKind::CloseParen | TokenKind::CloseBracket if level > 0 => {
                pressure -= runs.pop().unwrap_or(0);
                runs[level - 1] += 1;
                pressure += 1;
            }
            _ => {
                runs[level] += 1;
                pressure += 1;
            }
        }
        if pressure > MAX_NESTING_PRESSURE {
            return Prescan::WholeFile(NotSplittable::TooDeep);
        }
    }
    if blank {
        Prescan::Blank
    } else {
        Prescan::Parse
    }
}

fn literal_terminated(kind: LiteralKind) -> bool {
    match kind {
        LiteralKind::Str { terminated }
        | LiteralKind::NationalStr { terminated }
        | LiteralKind::ByteStr { terminated }
        | LiteralKind::BitStr { terminated }
        | LiteralKind::DollarQuotedString { terminated }
        | LiteralKind::UnicodeEscStr { terminated }
        | LiteralKind::EscStr { terminated } => terminated,
        LiteralKind::Int { .. } | LiteralKind::Numeric { .. } => true,
    }
}

/// Parses, walks and drops the tree on a thread with [`PARSER_STACK_BYTES`]
/// of stack (dropping a deep rowan tree recurses too). `None` when the split
/// is not exact, or when the thread could not start or panicked (a squawk
/// bug; the panic message still reaches stderr through the panic hook).
fn parse_on_own_stack(sql: &str) -> Option<Vec<Statement>> {
    on_parser_stack(|| split_parsed(sql)).flatten()
}

/// `f` on a thread with [`PARSER_STACK_BYTES`] of stack; `None` when the
/// thread could not start or `f` panicked.
fn on_parser_stack<T: Send>(f: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("rollsafe-sql-parse".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(scope, f)
            .ok()?
            .join()
            .ok()
    })
}

/// The split from squawk's tree, or `None` when it is not exact.
///
/// squawk keeps every byte of the file in its tree (it is lossless). Its top
/// level holds one node per statement, the statement's `;` included, with
/// comments and whitespace between them. Text it cannot parse shows up as an
/// `ERROR` node per token (an unknown command `FOO BAR (1;2);` becomes
/// `FOO`, `BAR`, `(`, `1`, an empty statement `;`, `2`, `)`, `;`), or as a
/// statement node that stops early, with the rest in `ERROR` nodes. So a
/// statement node is trusted as it stands only when no error falls inside it;
/// the rest is delimited again the way psql does it.
fn split_parsed(sql: &str) -> Option<Vec<Statement>> {
    let parse = SourceFile::parse(sql);
    let errors = parse.errors();
    let root = parse.syntax_node();
    let elements: Vec<SyntaxElement> = root
        .children_with_tokens()
        .filter(|element| !element.kind().is_trivia())
        .collect();
    let lines = LineIndex::new(sql);
    let mut statements = Vec::new();
    let Some(last) = elements.len().checked_sub(1) else {
        return errors.is_empty().then_some(statements);
    };

    // Two statements with no `;` between them are one statement to psql and
    // to the server, so a node that does not end in `;` is trusted only at
    // the end of the file.
    let mut trusted: Vec<bool> = elements
        .iter()
        .enumerate()
        .map(|(i, element)| {
            element.as_node().is_some_and(|node| {
                node.kind() != SyntaxKind::ERROR && (i == last || ends_with_semicolon(node))
            })
        })
        .collect();
    // Errors sit at a token's start or at the end of the token before, so an
    // error is charged to the last element starting at or before it.
    for error in &errors {
        let at = usize::from(error.range().start());
        let after = elements.partition_point(|element| element_start(element) <= at);
        trusted[after.saturating_sub(1)] = false;
    }

    let mut pending = PsqlStatement::default();
    for (element, trusted) in elements.iter().zip(trusted) {
        match element {
            SyntaxElement::Node(node) if trusted && pending.is_empty() => {
                if let Some((start, end)) = code_span(node) {
                    statements.push(lines.statement(sql, start, end, true));
                }
            }
            SyntaxElement::Node(node) => {
                for token in tokens(node) {
                    pending.feed(&token, sql, &lines, &mut statements)?;
                }
            }
            SyntaxElement::Token(token) => {
                pending.feed(token, sql, &lines, &mut statements)?;
            }
        }
    }
    pending.finish(sql, &lines, &mut statements)?;
    Some(statements)
}

/// A statement squawk could not parse, being delimited the way psql does:
/// it ends at a `;` outside parentheses (or at the end of the file).
#[derive(Default)]
struct PsqlStatement {
    /// Byte range of its tokens so far (comments and whitespace excluded).
    span: Option<(usize, usize)>,
    parens: usize,
}

impl PsqlStatement {
    fn is_empty(&self) -> bool {
        self.span.is_none() && self.parens == 0
    }

    /// `None` when the boundaries cannot be trusted.
    fn feed(
        &mut self,
        token: &SyntaxToken,
        sql: &str,
        lines: &LineIndex,
        out: &mut Vec<Statement>,
    ) -> Option<()> {
        let kind = token.kind();
        if kind.is_trivia() {
            return Some(());
        }
        match kind {
            SyntaxKind::SEMICOLON if self.parens == 0 => {
                if let Some((start, end)) = self.span.take() {
                    out.push(lines.statement(sql, start, end, false));
                }
                return Some(());
            }
            SyntaxKind::L_PAREN => self.parens += 1,
            SyntaxKind::R_PAREN => self.parens = self.parens.checked_sub(1)?,
            // psql does not end a statement at a `;` inside a
            // `BEGIN ATOMIC … END` body; following it without the grammar is
            // guesswork, so don't.
            SyntaxKind::ATOMIC_KW => return None,
            _ => {}
        }
        let range = token.text_range();
        let (start, end) = (usize::from(range.start()), usize::from(range.end()));
        self.span = Some(match self.span {
            Some((first, _)) => (first, end),
            None => (start, end),
        });
        Some(())
    }

    /// The last statement may end at the end of the file, without `;`.
    fn finish(self, sql: &str, lines: &LineIndex, out: &mut Vec<Statement>) -> Option<()> {
        if self.parens != 0 {
            return None;
        }
        if let Some((start, end)) = self.span {
            out.push(lines.statement(sql, start, end, false));
        }
        Some(())
    }
}

fn element_start(element: &SyntaxElement) -> usize {
    usize::from(element.text_range().start())
}

fn tokens(node: &SyntaxNode) -> impl Iterator<Item = SyntaxToken> {
    node.descendants_with_tokens()
        .filter_map(|element| element.into_token())
}

fn code_tokens(node: &SyntaxNode) -> Vec<SyntaxToken> {
    tokens(node)
        .filter(|token| !token.kind().is_trivia())
        .collect()
}

fn ends_with_semicolon(node: &SyntaxNode) -> bool {
    code_tokens(node).last().map(|token| token.kind()) == Some(SyntaxKind::SEMICOLON)
}

/// The byte range of a statement node without the comments around it and
/// without its own `;`; `None` for an empty statement.
fn code_span(node: &SyntaxNode) -> Option<(usize, usize)> {
    let mut code = code_tokens(node);
    if code.last().map(|token| token.kind()) == Some(SyntaxKind::SEMICOLON) {
        code.pop();
    }
    let (first, last) = (code.first()?, code.last()?);
    Some((
        usize::from(first.text_range().start()),
        usize::from(last.text_range().end()),
    ))
}

/// The whole file as one statement: from its first token that is not
/// whitespace or a comment (or, when there is none because a comment never
/// closes, its first non-whitespace character) to its trimmed end.
fn whole_file(sql: &str) -> Split {
    // PostgreSQL's whitespace is ASCII only.
    let ascii_space = |c: char| c.is_ascii_whitespace();
    let end = sql.trim_end_matches(ascii_space).len();
    let start = first_code_offset(sql)
        .unwrap_or_else(|| sql.len() - sql.trim_start_matches(ascii_space).len());
    let statements = if start < end {
        vec![LineIndex::new(sql).statement(sql, start, end, false)]
    } else {
        Vec::new()
    };
    Split {
        statements,
        exact: false,
    }
}

fn first_code_offset(sql: &str) -> Option<usize> {
    if u32::try_from(sql.len()).is_err() {
        return None;
    }
    let mut offset = 0usize;
    for token in squawk_lexer::tokenize(sql) {
        match token.kind {
            TokenKind::Whitespace
            | TokenKind::LineComment
            | TokenKind::BlockComment { terminated: true } => offset += token.len as usize,
            TokenKind::BlockComment { terminated: false } => return None,
            _ => return Some(offset),
        }
    }
    None
}

/// Byte offsets of line starts, to turn a byte offset of a file into the
/// line and column an editor shows (the one place rollsafe does that).
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(sql: &str) -> Self {
        let starts = std::iter::once(0)
            .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex { starts }
    }

    /// 1-based (line, column) of byte `offset` of `sql` (the file this index
    /// was built from); the column counts characters. An offset past the
    /// end, or inside a character, counts as the nearest character boundary
    /// before it.
    pub fn position(&self, sql: &str, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(sql.len());
        while !sql.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset);
        let line_start = self.starts[line - 1];
        // An editor does not count a byte-order mark as a column.
        let before = sql[line_start..offset].trim_start_matches(squawk_lexer::BOM);
        (line, before.chars().count() + 1)
    }

    fn statement(&self, sql: &str, start: usize, end: usize, parsed: bool) -> Statement {
        let (line, column) = self.position(sql, start);
        Statement {
            text: sql[start..end].to_string(),
            start,
            end,
            line,
            column,
            parsed,
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn statements_postgres_runs_only_outside_a_transaction_are_known() {
        let sql = "CREATE INDEX CONCURRENTLY i ON t (a);\nCREATE UNIQUE INDEX i ON t (a);\nALTER TABLE p DETACH PARTITION c CONCURRENTLY;\nvacuum analyze t;\nREINDEX DATABASE d;\nREINDEX TABLE t;\nCREATE TABLE t2 (a int);\nDO $$ BEGIN UPDATE t SET a = 1; COMMIT; END $$;\nDO $$ BEGIN PERFORM 1; END $$;\nCALL archive_batches();";
        let found: Vec<bool> = split(sql)
            .statements
            .iter()
            .map(refuses_transaction_block)
            .collect();
        assert_eq!(
            found,
            [true, false, true, true, true, false, false, true, false, true]
        );
    }

    #[test]
    fn transaction_control_is_read_from_the_leading_keywords() {
        use TransactionControl::{Begin, End};
        let sql = "BEGIN;\nSTART TRANSACTION ISOLATION LEVEL SERIALIZABLE;\nSAVEPOINT a;\nROLLBACK TO SAVEPOINT a;\ncommit;\nEND;\nABORT;\nCOMMIT PREPARED 'x';\nPREPARE TRANSACTION 'x';\nSET TRANSACTION ISOLATION LEVEL REPEATABLE READ;\nDO $$ BEGIN COMMIT; END $$;";
        let found: Vec<Option<TransactionControl>> = split(sql)
            .statements
            .iter()
            .map(transaction_control)
            .collect();
        assert_eq!(
            found,
            [
                Some(Begin),
                Some(Begin),
                None,
                None,
                Some(End),
                Some(End),
                Some(End),
                None,
                Some(End),
                None,
                None
            ]
        );
    }

    use super::*;
    use proptest::prelude::*;

    fn texts(split: &Split) -> Vec<&str> {
        split.statements.iter().map(|s| s.text.as_str()).collect()
    }

    /// Every statement is `&sql[start..end]`, trimmed, in order and disjoint,
    /// and (for an exact split) every token that is not whitespace, a comment
    /// or `;` lies in a statement.
    #[test]
    fn only_ascii_whitespace_is_whitespace() {
        // U+2000 is an identifier character to PostgreSQL, not a space.
        let split = split("\u{2000}");
        assert_consistent("\u{2000}", &split);
        assert_eq!(split.statements.len(), 1);
        assert!(is_blank(" \t\n"));
    }

    fn assert_consistent(sql: &str, split: &Split) {
        let mut previous_end = 0;
        for s in &split.statements {
            assert_eq!(&sql[s.start..s.end], s.text, "{sql:?}");
            assert!(s.start >= previous_end && s.start < s.end, "{sql:?}");
            // PostgreSQL's whitespace is ASCII only: U+2000 is part of a
            // token to it (and to squawk's lexer), so trim what it trims.
            assert_eq!(
                s.text.trim_matches(|c: char| c.is_ascii_whitespace()),
                s.text,
                "{sql:?}"
            );
            previous_end = s.end;
        }
        if !split.exact {
            assert!(split.statements.len() <= 1, "{sql:?}");
            if let Some(s) = split.statements.first() {
                assert_eq!(
                    s.end,
                    sql.trim_end_matches(|c: char| c.is_ascii_whitespace())
                        .len(),
                    "{sql:?}"
                );
                assert!(!s.parsed);
            }
            return;
        }
        let mut offset = 0;
        for token in squawk_lexer::tokenize(sql) {
            let (start, end) = (offset, offset + token.len as usize);
            offset = end;
            let trivia = matches!(
                token.kind,
                TokenKind::Whitespace
                    | TokenKind::LineComment
                    | TokenKind::BlockComment { .. }
                    | TokenKind::Semi
            );
            // Statements are ordered and disjoint: only the last one
            // starting at or before the token can hold it.
            let before = split.statements.partition_point(|s| s.start <= start);
            let inside = before > 0 && end <= split.statements[before - 1].end;
            if !trivia {
                assert!(inside, "token {:?} of {sql:?}", &sql[start..end]);
            }
        }
    }

    #[test]
    fn splits_a_function_body_a_block_comment_and_pg18_syntax() {
        let sql = "\
-- V9: three statements
CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    NEW.updated_at := now(); -- a ; inside the body
    RETURN NEW;
END;
$body$;

/* a block /* nested; */ comment; */ ALTER TABLE t
    ADD CONSTRAINT t_c_not_null NOT NULL c NOT VALID;
  CREATE INDEX CONCURRENTLY t_c ON t (c)
";
        let split = split(sql);
        assert!(split.exact);
        assert_consistent(sql, &split);
        let function = "CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $body$\n\
BEGIN\n    NEW.updated_at := now(); -- a ; inside the body\n    RETURN NEW;\nEND;\n$body$";
        let alter = "ALTER TABLE t\n    ADD CONSTRAINT t_c_not_null NOT NULL c NOT VALID";
        let index = "CREATE INDEX CONCURRENTLY t_c ON t (c)";
        assert_eq!(texts(&split), [function, alter, index]);

        let positions: Vec<_> = split
            .statements
            .iter()
            .map(|s| (s.start, s.end, s.line, s.column, s.parsed))
            .collect();
        let alter_start = sql.find("ALTER").unwrap();
        let index_start = sql.find("CREATE INDEX").unwrap();
        assert_eq!(
            positions,
            [
                (24, 24 + function.len(), 2, 1, true),
                (alter_start, alter_start + alter.len(), 9, 38, true),
                (index_start, index_start + index.len(), 11, 3, true),
            ]
        );
    }

    #[test]
    fn splits_statements_that_cannot_run_in_a_transaction_and_others() {
        let sql = "\
CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (a) WHERE a IS NOT NULL;
ALTER TYPE mood ADD VALUE IF NOT EXISTS 'meh' AFTER 'ok';
VACUUM (ANALYZE) t;
DO $$ BEGIN PERFORM 1; RAISE NOTICE 'a;b'; END $$;
COPY t (a, b) FROM '/tmp/t.csv' WITH (FORMAT csv);
COPY (SELECT 1) TO STDOUT;
CREATE FUNCTION add(a int, b int) RETURNS int LANGUAGE sql
    BEGIN ATOMIC SELECT a + b; SELECT a; END;
CREATE RULE r AS ON INSERT TO t DO ALSO (NOTIFY t; NOTIFY u);
SELECT 'it''s;', E'\\';', \"odd;name\", $tag$ $$;$$ $tag$ FROM t;
";
        let split = split(sql);
        assert!(split.exact);
        assert_consistent(sql, &split);
        assert_eq!(
            texts(&split),
            [
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (a) WHERE a IS NOT NULL",
                "ALTER TYPE mood ADD VALUE IF NOT EXISTS 'meh' AFTER 'ok'",
                "VACUUM (ANALYZE) t",
                "DO $$ BEGIN PERFORM 1; RAISE NOTICE 'a;b'; END $$",
                "COPY t (a, b) FROM '/tmp/t.csv' WITH (FORMAT csv)",
                "COPY (SELECT 1) TO STDOUT",
                "CREATE FUNCTION add(a int, b int) RETURNS int LANGUAGE sql\n    \
                 BEGIN ATOMIC SELECT a + b; SELECT a; END",
                "CREATE RULE r AS ON INSERT TO t DO ALSO (NOTIFY t; NOTIFY u)",
                "SELECT 'it''s;', E'\\';', \"odd;name\", $tag$ $$;$$ $tag$ FROM t",
            ]
        );
        let lines: Vec<usize> = split.statements.iter().map(|s| s.line).collect();
        assert_eq!(lines, [1, 2, 3, 4, 5, 6, 7, 9, 10]);
        for s in &split.statements {
            assert!(s.parsed, "squawk should parse {:?}", s.text);
        }
    }

    #[test]
    fn splits_the_repository_migrations_into_statements_that_split_back_to_themselves() {
        let migrations = [
            (
                include_str!("../migrations/V1__collections_and_functions.sql"),
                4,
            ),
            (include_str!("../migrations/V2__attached_functions.sql"), 2),
            (
                include_str!("../migrations/V3__attached_functions_is_ready.sql"),
                1,
            ),
        ];
        for (sql, count) in migrations {
            let split = split(sql);
            assert!(split.exact);
            assert_consistent(sql, &split);
            assert_eq!(split.statements.len(), count, "{sql}");
            for statement in &split.statements {
                assert!(statement.parsed, "{}", statement.text);
                let again = super::split(&statement.text);
                assert!(again.exact);
                assert_eq!(again.statements.len(), 1);
                assert_eq!(again.statements[0].text, statement.text);
                assert!(again.statements[0].parsed);
            }
        }
        let v3 = super::split(include_str!(
            "../migrations/V3__attached_functions_is_ready.sql"
        ));
        // After the comment block, which is not part of the statement.
        assert_eq!((v3.statements[0].line, v3.statements[0].column), (27, 1));
    }

    #[test]
    fn leading_comments_are_not_part_of_a_statement() {
        let sql = "-- one\n  /* two */ -- three\n\t/* é */ SELECT 1; -- four\n";
        let split = split(sql);
        assert_eq!(texts(&split), ["SELECT 1"]);
        let s = &split.statements[0];
        // Column counts characters: `é` is two bytes, one column.
        assert_eq!((s.line, s.column), (3, 10));
        assert_eq!(s.start, sql.find("SELECT").unwrap());
    }

    #[test]
    fn blank_files_and_empty_statements_hold_no_statement() {
        for sql in [
            "",
            "  \n\t",
            "-- only a comment",
            "/* block /* nested */ */",
            ";",
            ";;\n;",
            " ; -- x\n; /* y */ ;",
            "\u{feff}-- a byte-order mark\n",
        ] {
            let split = split(sql);
            assert_eq!(split.statements, [], "{sql:?}");
            assert!(split.exact, "{sql:?}");
            assert!(is_blank(sql), "{sql:?}");
        }
        assert!(!is_blank("SELECT 1"));
        assert!(!is_blank("/* never closed"));

        let split = split(";; SELECT 1;;; SELECT 2 ;;");
        assert!(split.exact);
        assert_eq!(texts(&split), ["SELECT 1", "SELECT 2"]);
    }

    #[test]
    fn a_statement_squawk_does_not_know_is_delimited_like_psql_does() {
        // squawk turns every token of an unknown command into an ERROR node
        // and a `;` inside its parentheses into an empty statement; psql
        // sends `FOO BAR (1;2)` as one statement.
        let sql = "SELECT 1;\nFOO BAR (1;2);\nCREATE TABLE t (a int) WEIRD x;\nSELECT 2";
        let split = split(sql);
        assert!(split.exact);
        assert_consistent(sql, &split);
        let found: Vec<_> = split
            .statements
            .iter()
            .map(|s| (s.text.as_str(), s.line, s.parsed))
            .collect();
        assert_eq!(
            found,
            [
                ("SELECT 1", 1, true),
                ("FOO BAR (1;2)", 2, false),
                ("CREATE TABLE t (a int) WEIRD x", 3, false),
                ("SELECT 2", 4, true),
            ]
        );

        // Invalid but delimited: squawk reports an error inside the node.
        let split = super::split("CREATE TABLE t (a int,); SELECT 1 FROM WHERE;");
        assert!(split.exact);
        let found: Vec<_> = split
            .statements
            .iter()
            .map(|s| (s.text.as_str(), s.parsed))
            .collect();
        assert_eq!(
            found,
            [
                ("CREATE TABLE t (a int,)", false),
                ("SELECT 1 FROM WHERE", false)
            ]
        );

        // A last statement without `;`, unknown to squawk.
        let split = super::split("SELECT 1; FOO BAR");
        assert!(split.exact);
        assert_eq!(texts(&split), ["SELECT 1", "FOO BAR"]);
    }

    #[test]
    fn doubtful_boundaries_fall_back_to_the_whole_file() {
        for sql in [
            "SELECT 1; SELECT 'abc; SELECT 2;",
            "SELECT 1; SELECT E'abc\\'; SELECT 2;",
            "SELECT 1; DO $$ BEGIN PERFORM 1; END; SELECT 2;",
            "SELECT 1; DO $a$ BEGIN PERFORM 1; END $b$; SELECT 2;",
            "SELECT 1; SELECT \"never closed; SELECT 2;",
            "SELECT 1; /* never /* closed */ SELECT 2;",
            "SELECT 1; FOO (1; SELECT 2;",
            "SELECT 1; FOO 1); SELECT 2;",
            "SELECT 1; SELECT 2 SELECT 3;\nFOO (",
            "COPY t FROM stdin;\n1\t2\n\\.\nSELECT 1;",
            "\\set ON_ERROR_STOP on\nSELECT 1;",
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql\n\
             BEGIN ATOMIC SELECT FROM WHERE; SELECT 2; END; SELECT 3;",
        ] {
            let split = split(sql);
            assert!(!split.exact, "{sql:?}");
            assert_consistent(sql, &split);
            assert_eq!(texts(&split), [sql.trim()], "{sql:?}");
        }

        let sql = "\n-- header\n  SELECT 'never closed;\n\n";
        let split = split(sql);
        assert!(!split.exact);
        let s = &split.statements[0];
        assert_eq!(s.text, "SELECT 'never closed;");
        assert_eq!((s.line, s.column, s.parsed), (3, 3, false));

        // Nothing but a comment that never closes is still sent, for the
        // server to reject.
        let split = super::split("  /* never closed\n");
        assert!(!split.exact);
        assert_eq!(texts(&split), ["/* never closed"]);
    }

    #[test]
    fn deep_nesting_is_parsed_on_a_big_stack_and_beyond_the_budget_not_at_all() {
        // 1 500 levels overflow a 2 MiB test thread if parsed in place.
        let deep = format!(
            "SELECT {}1{};\nSELECT 2;",
            "(".repeat(1500),
            ")".repeat(1500)
        );
        let split = split(&deep);
        assert!(split.exact);
        assert_eq!(split.statements.len(), 2);
        assert!(split.statements[0].parsed);

        let too_deep = format!(
            "SELECT 1; SELECT {}1{};",
            "(".repeat(20_000),
            ")".repeat(20_000)
        );
        assert_eq!(
            prescan(&too_deep),
            Prescan::WholeFile(NotSplittable::TooDeep)
        );
        let split = super::split(&too_deep);
        assert!(!split.exact);
        assert_eq!(split.statements.len(), 1);

        let chain = format!("SELECT {};", vec!["NOT"; 20_000].join(" "));
        assert!(!super::split(&chain).exact);
    }

    #[test]
    fn long_realistic_files_split_exactly() {
        let rows: Vec<String> = (0..20_000)
            .map(|i| format!("({i}, 'name; {i}', -{i})"))
            .collect();
        let mut sql = format!(
            "INSERT INTO t (id, name, n) VALUES\n{};\n",
            rows.join(",\n")
        );
        for i in 0..2_000 {
            sql.push_str(&format!("CREATE INDEX i{i} ON t (c{i}) WHERE c{i} > 0;\n"));
        }
        let split = split(&sql);
        assert!(split.exact);
        assert_eq!(split.statements.len(), 2_001);
        assert_eq!(split.statements[1].line, 20_002);
        assert!(split.statements.iter().all(|s| s.parsed));
    }

    #[test]
    fn excerpt_folds_whitespace_and_cuts_with_an_ellipsis() {
        let s = split("ALTER TABLE attached_functions\n    ADD COLUMN   is_ready boolean;")
            .statements
            .remove(0);
        assert_eq!(
            s.excerpt(100),
            "ALTER TABLE attached_functions ADD COLUMN is_ready boolean"
        );
        assert_eq!(s.excerpt(58), s.excerpt(100));
        assert_eq!(
            s.excerpt(57),
            "ALTER TABLE attached_functions ADD COLUMN is_ready boole…"
        );
        // No space before the ellipsis.
        assert_eq!(s.excerpt(13), "ALTER TABLE…");
        assert_eq!(s.excerpt(1), "…");
        assert_eq!(s.excerpt(0), "");
        let s = split("SELECT 'é…é'").statements.remove(0);
        assert_eq!(s.excerpt(11), "SELECT 'é……");
    }

    #[test]
    fn odd_inputs_never_panic() {
        let long = "SELECT 1;\n".repeat(50_000);
        let inputs = [
            "",
            "'",
            "\"",
            "$$",
            "$a$",
            "$1",
            "E'\\",
            "/*",
            "*/",
            "--",
            ")",
            "(",
            ";",
            "\\",
            "BEGIN ATOMIC",
            "END;",
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC",
            "\u{feff}",
            "\u{0}\u{1}\u{7f}",
            "SELECT 1 /* */ -- \r\n;\r\n",
            "é;ü;",
            long.as_str(),
        ];
        for sql in inputs {
            let split = split(sql);
            assert_consistent(sql, &split);
        }
        assert_eq!(split(&long).statements.len(), 50_000);
    }

    fn sqlish() -> impl Strategy<Value = String> {
        let fragment = prop::sample::select(vec![
            "SELECT 1",
            "FOO",
            " ",
            "\n",
            ";",
            "(",
            ")",
            "[",
            "]",
            ",",
            "'",
            "'a;'",
            "E'\\''",
            "$$",
            "$$;$$",
            "$t$",
            "\"",
            "\"x;\"",
            "--",
            "/*",
            "*/",
            "\\",
            "é",
            "BEGIN ATOMIC",
            "END",
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql",
            "NOT",
            "CASE",
            "ALTER TABLE t",
        ]);
        prop::collection::vec(fragment, 0..40).prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn any_sqlish_input_splits_consistently(sql in sqlish()) {
            let split = split(&sql);
            assert_consistent(&sql, &split);
        }

        #[test]
        fn any_string_splits_consistently(sql in any::<String>()) {
            let split = split(&sql);
            assert_consistent(&sql, &split);
        }
    }
}

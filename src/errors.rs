//! One line for any error: the text a finding, a progress line or an
//! exit-2 message shows.
//!
//! Every place that turns an error into text calls [`one_line`], so the
//! same failure reads the same in verify's findings, check's audit and
//! migrate's refusals. The driver's rendering of a server error
//! (`db error: ERROR: column "x" does not exist\nDETAIL: …`) is replaced by
//! the server's message alone, the context each layer adds is kept once
//! (thiserror's `"{context}: {source}"` already holds its source), and the
//! result is a single line, so a CI log or a JUnit attribute never breaks.
//! [`detailed`] adds the SQLSTATE, detail and hint, for a DBA deciding what
//! to do next.

use std::error::Error;

/// One line for `e` and its causes, with the server's message in place of
/// the driver's rendering of it. Works for anyhow errors too:
/// `one_line(err.as_ref())`.
pub fn one_line(e: &(dyn Error + 'static)) -> String {
    let mut text = String::new();
    let mut layer = Some(e);
    while let Some(l) = layer {
        let pg = l.downcast_ref::<postgres::Error>();
        let raw = l.to_string();
        let shown = pg.map_or_else(|| raw.clone(), server_message);
        if !raw.is_empty() && text.contains(&raw) {
            // The layer above already shows this one: only swap the
            // driver's rendering for the server's message.
            text = text.replace(&raw, &shown);
        } else if !text.contains(&shown) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&shown);
        }
        // A server error's source is the server's error, already shown; a
        // driver error (TLS, I/O) keeps its causes, which say why.
        layer = if pg.is_some_and(|p| p.as_db_error().is_some()) {
            None
        } else {
            l.source()
        };
    }
    collapse(&text)
}

/// The server's message with its SQLSTATE, detail, hint and context, or
/// the driver's own text for an error that did not come from the server;
/// one line.
pub fn detailed(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(d) = db.detail() {
                s.push_str(&format!("; {d}"));
            }
            if let Some(h) = db.hint() {
                s.push_str(&format!("; hint: {h}"));
            }
            if let Some(w) = db.where_() {
                s.push_str(&format!("; where: {w}"));
            }
            collapse(&s)
        }
        None => one_line(e),
    }
}

/// The server's message of a server error, else the driver's text.
fn server_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

/// Runs of whitespace (newlines included) become one space: any text on
/// one line.
pub fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading the rows: {source}")]
    struct WithSource {
        source: std::io::Error,
    }

    #[test]
    fn context_is_kept_once_and_lines_are_joined() {
        let e = WithSource {
            source: std::io::Error::other("broken\npipe"),
        };
        assert_eq!(one_line(&e), "reading the rows: broken pipe");
        let any = anyhow::Error::new(std::io::Error::other("refused")).context("connecting");
        assert_eq!(one_line(any.as_ref()), "connecting: refused");
    }
}

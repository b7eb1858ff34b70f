//! Connections to PostgreSQL: the one place that turns a URL into a client.
//!
//! Everything in rollsafe connects through [`connect`] so that every
//! connection error reads the same way (what, where, what to do) and no
//! password ever reaches a message: URLs are shown through [`redact_url`].
//!
//! Not here: pooling (rollsafe's jobs are short), sandbox lifecycles
//! (`sandbox`), migration logic (`migrate`).

use std::time::Duration;

use postgres::{Client, Config, NoTls};
use thiserror::Error;

/// A connection that could not be made. The URL inside is already redacted.
#[derive(Debug, Error)]
#[error("cannot connect to {url}: {cause}; {hint}")]
pub struct ConnectError {
    pub url: String,
    pub cause: String,
    pub hint: &'static str,
    pub kind: ConnectErrorKind,
}

/// What went wrong, for callers (and tests) that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectErrorKind {
    /// The URL itself does not parse.
    InvalidUrl,
    /// Nothing answered (refused, unreachable host, DNS, timeout).
    Unreachable,
    /// The server answered and refused the credentials.
    Authentication,
    /// The database named in the URL does not exist.
    MissingDatabase,
    /// Anything else the server said.
    Other,
}

/// The URL with its password (if any) replaced by `***`, safe to print.
/// A string that is not a URL is reduced to `<unparseable URL>` because it
/// may be a key=value connection string with a password in it.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            // `password=` can also ride in the query string.
            if parsed.query_pairs().any(|(k, _)| k == "password") {
                let pairs: Vec<(String, String)> = parsed
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if k == "password" {
                            "***".to_string()
                        } else {
                            v.into_owned()
                        };
                        (k.into_owned(), v)
                    })
                    .collect();
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
            }
            parsed.to_string()
        }
        Err(_) => "<unparseable URL>".to_string(),
    }
}

/// Removes every occurrence of the URL's password from `text` (driver
/// messages sometimes echo connection parameters).
pub fn scrub(text: &str, url: &str) -> String {
    match url::Url::parse(url)
        .ok()
        .and_then(|u| u.password().map(str::to_string))
    {
        Some(pw) if !pw.is_empty() => {
            let decoded = percent_decode(&pw);
            text.replace(&pw, "***").replace(&decoded, "***")
        }
        _ => text.to_string(),
    }
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_string())
}

/// Parses a connection URL into a driver config, with a connect timeout so
/// that an unreachable host fails in seconds rather than minutes.
pub fn config(url: &str) -> Result<Config, ConnectError> {
    let mut config: Config = url.parse().map_err(|e: postgres::Error| ConnectError {
        url: redact_url(url),
        cause: scrub(&e.to_string(), url),
        hint: "check the URL's form: postgres://USER:PASSWORD@HOST:PORT/DATABASE",
        kind: ConnectErrorKind::InvalidUrl,
    })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    if config.get_application_name().is_none() {
        config.application_name("rollsafe");
    }
    Ok(config)
}

/// Opens a connection, classifying failures into a one-line error that names
/// the (redacted) URL, the cause and the next step.
pub fn connect(url: &str) -> Result<Client, ConnectError> {
    let config = config(url)?;
    config.connect(NoTls).map_err(|e| classify(url, &e))
}

fn classify(url: &str, e: &postgres::Error) -> ConnectError {
    let (kind, hint) = match e.as_db_error().map(|d| d.code().code()) {
        Some("28P01") | Some("28000") => (
            ConnectErrorKind::Authentication,
            "check the user name and password in the URL",
        ),
        Some("3D000") => (
            ConnectErrorKind::MissingDatabase,
            "create the database first or fix its name in the URL",
        ),
        Some(_) => (ConnectErrorKind::Other, "see the server's message above"),
        None => (
            ConnectErrorKind::Unreachable,
            "check that the server runs and that host and port in the URL are right",
        ),
    };
    // The driver's Display for a db error is "db error: FATAL: ..."; the
    // server's message alone reads better.
    let cause = match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(inner) = source {
                s = format!("{s}: {inner}");
                source = inner.source();
            }
            s
        }
    };
    ConnectError {
        url: redact_url(url),
        cause: scrub(&cause, url),
        hint,
        kind,
    }
}

/// Quotes an identifier for SQL (`"name"`, doubling embedded quotes).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `url` with its database name replaced by `dbname`.
pub fn with_database(url: &str, dbname: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.set_path(&format!("/{dbname}"));
            u.to_string()
        }
        Err(_) => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_in_userinfo_and_query() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        let q = redact_url("postgres://db/x?user=app&password=s3cret&sslmode=require");
        assert!(
            !q.contains("s3cret") && q.contains("sslmode=require"),
            "{q}"
        );
        assert_eq!(redact_url("host=db password=s3cret"), "<unparseable URL>");
    }

    #[test]
    fn scrub_removes_raw_and_decoded_password() {
        let url = "postgres://u:p%40ss@h/d";
        assert_eq!(scrub("bad p@ss and p%40ss", url), "bad *** and ***");
    }

    #[test]
    fn with_database_swaps_the_path() {
        assert_eq!(
            with_database("postgres://u:p@h:1/postgres?sslmode=disable", "t1"),
            "postgres://u:p@h:1/t1?sslmode=disable"
        );
    }
}

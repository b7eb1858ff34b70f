//! Connections to PostgreSQL: the one place that turns a URL into a client.
//!
//! Everything in rollsafe connects through [`connect`] so that every
//! connection error reads the same way (what, where, what to do) and no
//! password ever reaches a message: URLs are shown through [`redact_url`].
//!
//! TLS follows libpq's `sslmode` (in the URL's query or a key=value
//! string): `disable` (plain), `prefer` (the default: TLS when the server
//! offers it, no certificate checks, plain otherwise), `require` (TLS, no
//! certificate checks; with `sslrootcert` it verifies the chain like
//! libpq), `verify-ca` (chain checked against `sslrootcert`, host name
//! not), `verify-full` (chain and host name). `sslrootcert=FILE` is the CA
//! bundle to trust (only that file); without it, or with
//! `sslrootcert=system`, the system's trust store is used. `sslcert` and
//! `sslkey` name a client certificate and its key (PEM), presented when
//! the server asks. tokio-postgres
//! only knows disable/prefer/require, so [`config`] strips the verify modes
//! and `sslrootcert` from the URL, asks the driver for TLS, and the
//! connector built here does the verification. Helper processes (pg_dump)
//! get the same options from [`tls_options`] as libpq variables
//! (`sandbox::dump`), whichever form the connection string has.
//!
//! Not here: pooling (rollsafe's jobs are short), sandbox lifecycles
//! (`sandbox`), migration logic (`migrate`).

use std::time::Duration;

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::X509;
use postgres::config::SslMode;
use postgres::{Client, Config};
use postgres_openssl::MakeTlsConnector;
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
    /// TLS could not be set up as `sslmode` asks (no TLS on the server, a
    /// certificate that does not verify, an unreadable `sslrootcert`).
    Tls,
    /// Anything else the server said.
    Other,
}

/// The PostgreSQL major of the server at `url` (`server_version_num` /
/// 10000), read-only.
pub fn server_major(url: &str) -> Result<u32, ConnectError> {
    let mut c = connect(url)?;
    let num: String = c
        .query_one("SHOW server_version_num", &[])
        .map_err(|e| ConnectError {
            url: redact_url(url),
            cause: e.to_string(),
            hint: "the server answered but would not tell its version; check the role's rights",
            kind: ConnectErrorKind::Other,
        })?
        .get(0);
    Ok(num.trim().parse::<u32>().unwrap_or(0) / 10_000)
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

/// The password of a `key=value` string (its `password=` token; None
/// for a quoted one, which may hold spaces this split cannot follow).
fn key_value_password(conn: &str) -> Option<String> {
    conn.split_whitespace()
        .find_map(|t| t.strip_prefix("password="))
        .filter(|p| !p.starts_with('\''))
        .map(str::to_string)
}

/// Removes every occurrence of the URL's password from `text` (driver
/// messages sometimes echo connection parameters).
pub fn scrub(text: &str, url: &str) -> String {
    let password = match url::Url::parse(url) {
        Ok(u) => u.password().map(str::to_string),
        Err(_) => key_value_password(url),
    };
    match password {
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

/// How to check the server's certificate, from `sslmode` / `sslrootcert`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// `sslmode` as written (`prefer` when absent).
    pub mode: String,
    /// Verify the certificate chain.
    pub verify_chain: bool,
    /// Verify that the certificate names the host connected to.
    pub verify_host: bool,
    /// CA bundle to trust instead of the system's store.
    pub root_cert: Option<std::path::PathBuf>,
    /// `sslrootcert` as written when it is not a file (`system`).
    pub root_cert_keyword: Option<String>,
    /// Client certificate (`sslcert`), PEM.
    pub client_cert: Option<std::path::PathBuf>,
    /// Its private key (`sslkey`), PEM.
    pub client_key: Option<std::path::PathBuf>,
}

/// Splits libpq TLS options that tokio-postgres does not understand out of
/// `url`: returns the URL the driver can parse and the TLS options.
fn split_tls(url: &str) -> Result<(String, TlsOptions), ConnectError> {
    let invalid = |cause: String| ConnectError {
        url: redact_url(url),
        cause,
        hint: "sslmode is one of disable, prefer, require, verify-ca, verify-full",
        kind: ConnectErrorKind::InvalidUrl,
    };
    let mut mode = None;
    let mut root = None;
    let mut cert = None;
    let mut key = None;
    let rest: String;
    if let Ok(mut parsed) = url::Url::parse(url) {
        let mut kept = Vec::new();
        let mut stripped = false;
        for (k, v) in parsed.query_pairs() {
            let slot = match k.as_ref() {
                "sslmode" => &mut mode,
                "sslrootcert" => &mut root,
                "sslcert" => &mut cert,
                "sslkey" => &mut key,
                _ => {
                    kept.push((k.into_owned(), v.into_owned()));
                    continue;
                }
            };
            *slot = Some(v.into_owned());
            stripped = true;
        }
        if stripped {
            if kept.is_empty() {
                parsed.set_query(None);
            } else {
                parsed.query_pairs_mut().clear().extend_pairs(kept);
                spaces_as_percent(&mut parsed);
            }
        }
        rest = parsed.to_string();
    } else {
        // key=value form; values with spaces would be quoted, and those two
        // options never need spaces.
        let mut kept = Vec::new();
        for token in url.split_whitespace() {
            if let Some(v) = token.strip_prefix("sslmode=") {
                mode = Some(v.trim_matches('\'').to_string());
            } else if let Some(v) = token.strip_prefix("sslrootcert=") {
                root = Some(v.trim_matches('\'').to_string());
            } else if let Some(v) = token.strip_prefix("sslcert=") {
                cert = Some(v.trim_matches('\'').to_string());
            } else if let Some(v) = token.strip_prefix("sslkey=") {
                key = Some(v.trim_matches('\'').to_string());
            } else {
                kept.push(token);
            }
        }
        rest = kept.join(" ");
    }
    let mode = mode.unwrap_or_else(|| "prefer".to_string());
    let root_cert_keyword = root.clone().filter(|r| r == "system");
    let root_cert = root
        .filter(|r| r != "system" && !r.is_empty())
        .map(std::path::PathBuf::from);
    let path = |v: Option<String>| v.filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    let (client_cert, client_key) = (path(cert), path(key));
    let (driver_mode, verify_chain, verify_host) = match mode.as_str() {
        "disable" => ("disable", false, false),
        "prefer" => ("prefer", false, false),
        // libpq: require with a root certificate behaves like verify-ca.
        "require" => ("require", root_cert.is_some(), false),
        "verify-ca" => ("require", true, false),
        "verify-full" => ("require", true, true),
        other => return Err(invalid(format!("unknown sslmode `{other}`"))),
    };
    let rest = append_param(&rest, "sslmode", driver_mode);
    Ok((
        rest,
        TlsOptions {
            mode,
            verify_chain,
            verify_host,
            root_cert,
            root_cert_keyword,
            client_cert,
            client_key,
        },
    ))
}

/// Form-urlencoding (`query_pairs_mut`) writes a space as `+`, which the
/// driver's URL parser does not decode (`options=-c name=value` needs its
/// space): `%20` instead. A literal `+` is `%2B` by then.
fn spaces_as_percent(u: &mut url::Url) {
    let query = u.query().map(|q| q.replace('+', "%20"));
    u.set_query(query.as_deref());
}

fn append_param(url: &str, key: &str, value: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.query_pairs_mut().append_pair(key, value);
            spaces_as_percent(&mut u);
            u.to_string()
        }
        Err(_) => format!("{url} {key}={value}"),
    }
}

/// Parses a connection URL into a driver config, with a connect timeout so
/// that an unreachable host fails in seconds rather than minutes. libpq's
/// verify modes become `require` here; see [`tls_options`] for the rest.
pub fn config(url: &str) -> Result<Config, ConnectError> {
    let (driver_url, _) = split_tls(url)?;
    let mut config: Config = driver_url
        .parse()
        .map_err(|e: postgres::Error| ConnectError {
            url: redact_url(url),
            cause: scrub(&crate::errors::one_line(&e), url),
            hint: "check the URL's form: postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=...]",
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

/// The TLS options of `url` (`sslmode`, `sslrootcert`).
pub fn tls_options(url: &str) -> Result<TlsOptions, ConnectError> {
    Ok(split_tls(url)?.1)
}

/// The TLS connector for `options`, shared by every connection of the
/// process that names no file (the sandbox's, an app session's, a
/// `prefer`/`require` URL): building one reads and decodes the system's
/// whole CA store, which cost more CPU than everything else a rehearsal's
/// client does (a rehearsal opens hundreds of connections). A connector
/// that names files (sslrootcert, sslcert, sslkey) is built each time, so
/// a file replaced on disk is read again, as libpq does.
fn tls_connector(url: &str, options: &TlsOptions) -> Result<MakeTlsConnector, ConnectError> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static SHARED: OnceLock<Mutex<HashMap<(bool, bool), MakeTlsConnector>>> = OnceLock::new();
    let names_files = options.root_cert.is_some()
        || options.client_cert.is_some()
        || options.client_key.is_some();
    if names_files {
        return build_tls_connector(url, options);
    }
    let key = (options.verify_chain, options.verify_host);
    let mut shared = SHARED
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(c) = shared.get(&key) {
        return Ok(c.clone());
    }
    let built = build_tls_connector(url, options)?;
    shared.insert(key, built.clone());
    Ok(built)
}

/// A new TLS connector for `options`: certificate checks as libpq does them.
fn build_tls_connector(url: &str, options: &TlsOptions) -> Result<MakeTlsConnector, ConnectError> {
    let tls_err = |cause: String| ConnectError {
        url: redact_url(url),
        cause,
        hint: "check sslrootcert: it must name a readable PEM file of CA certificates",
        kind: ConnectErrorKind::Tls,
    };
    let ssl = |e: openssl::error::ErrorStack| tls_err(format!("TLS setup failed: {e}"));
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(ssl)?;
    if options.verify_chain {
        builder.set_verify(SslVerifyMode::PEER);
        if let Some(path) = &options.root_cert {
            let pem = std::fs::read(path)
                .map_err(|e| tls_err(format!("cannot read sslrootcert {}: {e}", path.display())))?;
            let certs = X509::stack_from_pem(&pem).map_err(|e| {
                tls_err(format!(
                    "sslrootcert {} holds no PEM certificate: {e}",
                    path.display()
                ))
            })?;
            if certs.is_empty() {
                return Err(tls_err(format!(
                    "sslrootcert {} holds no PEM certificate",
                    path.display()
                )));
            }
            // Only the given CAs, as libpq: the system store must not make
            // a certificate the operator did not name acceptable.
            let mut store = X509StoreBuilder::new().map_err(ssl)?;
            for cert in certs {
                store.add_cert(cert).map_err(ssl)?;
            }
            builder.set_cert_store(store.build());
        }
    } else {
        // libpq's prefer/require: encrypt, do not authenticate the server.
        builder.set_verify(SslVerifyMode::NONE);
    }
    if let Some(cert) = &options.client_cert {
        builder
            .set_certificate_chain_file(cert)
            .map_err(|e| tls_err(format!("cannot use sslcert {}: {e}", cert.display())))?;
        // libpq's default key file is ~/.postgresql/postgresql.key; rollsafe
        // asks for it to be named.
        let key = options.client_key.as_ref().ok_or_else(|| {
            tls_err(format!(
                "sslcert {} is given without sslkey; name its private key with sslkey=FILE",
                cert.display()
            ))
        })?;
        builder
            .set_private_key_file(key, openssl::ssl::SslFiletype::PEM)
            .map_err(|e| tls_err(format!("cannot use sslkey {}: {e}", key.display())))?;
    }
    let mut connector = MakeTlsConnector::new(builder.build());
    let verify_host = options.verify_host;
    connector.set_callback(move |cfg, _host| {
        cfg.set_verify_hostname(verify_host);
        Ok(())
    });
    Ok(connector)
}

/// Opens a connection, classifying failures into a one-line error that names
/// the (redacted) URL, the cause and the next step. TLS as `sslmode` asks.
pub fn connect(url: &str) -> Result<Client, ConnectError> {
    let config = config(url)?;
    let options = tls_options(url)?;
    if config.get_ssl_mode() == SslMode::Disable {
        return config
            .connect(postgres::NoTls)
            .map_err(|e| classify(url, &options, &e));
    }
    let tls = tls_connector(url, &options)?;
    config.connect(tls).map_err(|e| classify(url, &options, &e))
}

fn classify(url: &str, tls: &TlsOptions, e: &postgres::Error) -> ConnectError {
    // The whole chain: the driver's top-level message alone ("error
    // performing TLS handshake") hides the reason.
    let chain = crate::errors::one_line(e);
    let tls_failed = e.as_db_error().is_none()
        && (chain.contains("TLS") || chain.contains("SSL") || chain.contains("certificate"));
    let (kind, hint) = match e.as_db_error().map(|d| d.code().code()) {
        None if tls_failed && chain.contains("does not support TLS") => (
            ConnectErrorKind::Tls,
            "the server does not offer TLS; enable ssl on the server or use sslmode=prefer/disable",
        ),
        None if tls_failed && tls.verify_host && chain.to_lowercase().contains("mismatch") => (
            ConnectErrorKind::Tls,
            "the server's certificate does not name this host; connect with the host name in the certificate, or use sslmode=verify-ca",
        ),
        None if tls_failed && tls.verify_chain => (
            ConnectErrorKind::Tls,
            "the server's certificate does not verify against sslrootcert (or the system CAs); point sslrootcert at the CA that signed it",
        ),
        None if tls_failed => (
            ConnectErrorKind::Tls,
            "TLS with the server failed; check the server's ssl settings or use sslmode=disable",
        ),
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
    let cause = chain;
    ConnectError {
        url: redact_url(url),
        cause: scrub(&cause, url),
        hint,
        kind,
    }
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

/// `url` connecting as `user` with `password` instead of its own
/// credentials, with `settings` as [`with_settings`] sets them.
pub fn as_role(url: &str, user: &str, password: &str, settings: &[(&str, String)]) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username(user);
            let _ = u.set_password(Some(password));
            with_settings(u.as_str(), settings)
        }
        Err(_) => url.to_string(),
    }
}

/// `url` with `settings` (`name`, `value`) set for each session at
/// connection start (libpq's `options=-c name=value`; an
/// `application_name` goes in its own parameter).
pub fn with_settings(url: &str, settings: &[(&str, String)]) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        return url.to_string();
    };
    if settings.is_empty() {
        return u.to_string();
    }
    let options = settings
        .iter()
        .filter(|(k, _)| *k != "application_name")
        .map(|(k, v)| format!("-c {k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    let app = settings.iter().find(|(k, _)| *k == "application_name");
    let kept: Vec<(String, String)> = u
        .query_pairs()
        .filter(|(k, _)| k != "options" && !(app.is_some() && k == "application_name"))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    {
        let mut q = u.query_pairs_mut();
        q.clear().extend_pairs(kept);
        if !options.is_empty() {
            q.append_pair("options", &options);
        }
        if let Some((_, name)) = app {
            q.append_pair("application_name", name);
        }
    }
    spaces_as_percent(&mut u);
    u.to_string()
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
    fn verify_modes_become_require_and_sslrootcert_is_stripped() {
        let (u, t) =
            split_tls("postgres://u:p@h/d?sslmode=verify-full&sslrootcert=/ca.pem").unwrap();
        assert_eq!(u, "postgres://u:p@h/d?sslmode=require");
        assert!(t.verify_chain && t.verify_host);
        assert_eq!(
            t.root_cert.as_deref(),
            Some(std::path::Path::new("/ca.pem"))
        );
        let (u, t) = split_tls("postgres://u:p@h/d?sslmode=verify-ca&application_name=x").unwrap();
        assert_eq!(u, "postgres://u:p@h/d?application_name=x&sslmode=require");
        assert!(t.verify_chain && !t.verify_host);
        let (u, t) = split_tls("postgres://u:p@h/d").unwrap();
        assert_eq!(u, "postgres://u:p@h/d?sslmode=prefer");
        assert!(!t.verify_chain);
        let (u, t) = split_tls("host=h user=u sslmode=verify-full").unwrap();
        assert_eq!(u, "host=h user=u sslmode=require");
        assert!(t.verify_host);
        let (_, t) = split_tls("postgres://h/d?sslmode=require&sslrootcert=/ca.pem").unwrap();
        assert!(
            t.verify_chain && !t.verify_host,
            "libpq: require + root cert = verify-ca"
        );
        let err = split_tls("postgres://u:s3cret@h/d?sslmode=bogus").unwrap_err();
        assert!(err.to_string().contains("unknown sslmode `bogus`"), "{err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert_eq!(
            config("postgres://u:p@h/d?sslmode=disable")
                .unwrap()
                .get_ssl_mode(),
            SslMode::Disable
        );
    }

    #[test]
    fn as_role_swaps_credentials_and_sets_session_options() {
        let u = as_role(
            "postgres://admin:s3cret@h:1/db?sslmode=disable",
            "rs_migrator",
            "pw",
            &[("statement_timeout", "3000ms".into())],
        );
        assert!(u.starts_with("postgres://rs_migrator:pw@h:1/db?"), "{u}");
        assert!(
            !u.contains("s3cret") && u.contains("sslmode=disable"),
            "{u}"
        );
        let c = config(&u).unwrap();
        assert_eq!(c.get_user(), Some("rs_migrator"));
        assert_eq!(c.get_options(), Some("-c statement_timeout=3000ms"));
    }

    #[test]
    fn with_database_swaps_the_path() {
        assert_eq!(
            with_database("postgres://u:p@h:1/postgres?sslmode=disable", "t1"),
            "postgres://u:p@h:1/t1?sslmode=disable"
        );
    }
}

//! The way out of an apply error that is not the migration's fault but the
//! rehearsal's setting: a migration that needs a superuser migrator
//! (`ALTER TABLE … DISABLE TRIGGER ALL` touches system triggers, `CREATE
//! EXTENSION` of an untrusted one), or syntax a newer PostgreSQL major
//! accepts (16 allows a subquery in FROM without an alias). Shared by
//! `verify`'s findings and its base apply (`--since`), so the same error
//! names the same flag everywhere.

/// What to do about an apply error with `sqlstate` and `message` from a
/// file whose statement is `statement` (when known); None when the error
/// is the migration's own.
pub fn advice(sqlstate: Option<&str>, message: &str, statement: Option<&str>) -> Option<String> {
    match sqlstate? {
        // insufficient_privilege
        "42501" if needs_superuser(message) => Some(
            "this needs a superuser (rollsafe's migrator is not one by default); if production's migrator is a superuser, pass --migrator-superuser (or `migrator_superuser = true` in rollsafe.toml)".into(),
        ),
        // A schema the migrator may not create in: one made outside the
        // history (by --setup, run as the superuser, so it owns it) or by
        // a migration run by a superuser in production.
        "42501" if message.starts_with("permission denied for schema ") => Some(
            "the migrator may not use that schema: it belongs to another role (a schema the --setup file makes belongs to the superuser that ran it); grant in the setup file what production's migrator has there (e.g. GRANT USAGE, CREATE ON SCHEMA … TO PUBLIC), or pass --migrator-superuser if production migrates as a superuser".into(),
        ),
        // undefined_object: a role the history assumes from outside itself
        "42704" if message.contains("role \"") && message.ends_with("does not exist") => Some(
            "the history names a role it never creates (a project's init SQL usually makes it): put what it assumes from outside itself (CREATE ROLE …, extensions, schemas) in a SQL file and pass --setup FILE (or `setup` in rollsafe.toml): it runs once as a superuser before the first migration".into(),
        ),
        // invalid_schema_name: a schema the history never creates (an
        // init script's, or an extension's that makes it)
        "3F000" if message.contains("schema \"") && message.ends_with("does not exist") => Some(
            "no earlier migration creates that schema: if the project makes it outside its migrations (an init script, an extension), put that SQL in a file and pass --setup FILE (or `setup` in rollsafe.toml): it runs once as a superuser before the first migration; otherwise a migration that creates it is missing".into(),
        ),
        // undefined_object / undefined_function: a type or function an
        // extension the sandbox lacks would have made (its CREATE
        // EXTENSION failed where no one saw it: in a DO block that caught
        // the error).
        "42704" | "42883" if extension_of_missing_object(message).is_some() => {
            let (extension, what) = extension_of_missing_object(message)?;
            Some(format!(
                "{what} is extension {extension}'s, and this sandbox's PostgreSQL does not have {extension} (a CREATE EXTENSION {extension} that failed inside a DO block, or was never run, leaves only this error); {}",
                extension_way_out(extension, None)
            ))
        }
        // syntax_error
        "42601" if message.contains("subquery in FROM must have an alias") => Some(
            "this parses on PostgreSQL 16 and later (a subquery in FROM without an alias); if production runs 16 or later, rehearse on it: --postgres-version 16".into(),
        ),
        "42601" if statement.is_some_and(parses_with_a_newer_grammar) => Some(
            "squawk's PostgreSQL 18 grammar accepts this statement: if production runs a newer major than this sandbox, rehearse on it (--postgres-version 16, 17 or 18); otherwise fix the SQL".into(),
        ),
        _ => None,
    }
}

/// The extension a server lacks, read from an apply error: `extension
/// "vector" is not available` (0A000), `could not open extension control
/// file ".../timescaledb.control"` (58P01, before 15), or, when the
/// `CREATE EXTENSION` failed where no one saw it (a `DO` block that caught
/// it), the type or function only that extension makes (`type "vector"
/// does not exist`, `function create_hypertable(…) does not exist`). The
/// one answer `verify`'s findings and the base apply share.
pub fn missing_extension(sqlstate: Option<&str>, message: &str) -> Option<String> {
    match sqlstate? {
        "0A000" => {
            let rest = message.split("extension \"").nth(1)?;
            let (name, tail) = rest.split_once('"')?;
            tail.starts_with(" is not available")
                .then(|| name.to_string())
        }
        "58P01" => {
            let rest = message
                .split("could not open extension control file \"")
                .nth(1)?;
            let file = rest.split('"').next()?;
            Some(
                file.rsplit('/')
                    .next()?
                    .strip_suffix(".control")?
                    .to_string(),
            )
        }
        "42704" | "42883" => extension_of_missing_object(message).map(|(e, _)| e.to_string()),
        _ => None,
    }
}

/// Types and functions (by the name PostgreSQL quotes) that only an
/// extension the official `postgres` image lacks makes: pgvector's,
/// PostGIS's, TimescaleDB's.
const EXTENSION_OBJECTS: &[(&str, &[&str], &[&str])] = &[
    ("vector", &["vector", "halfvec", "sparsevec"], &[]),
    (
        "postgis",
        &["geometry", "geography", "box2d", "box3d"],
        &["st_"],
    ),
    (
        "timescaledb",
        &[],
        &[
            "create_hypertable",
            "time_bucket",
            "add_retention_policy",
            "add_compression_policy",
            "add_continuous_aggregate_policy",
            "set_chunk_time_interval",
        ],
    ),
];

/// (extension, what is missing) for `type "vector" does not exist` or
/// `function create_hypertable(…) does not exist`.
fn extension_of_missing_object(message: &str) -> Option<(&'static str, String)> {
    if let Some(rest) = message.split("type \"").nth(1) {
        let (name, tail) = rest.split_once('"')?;
        let name = name.rsplit('.').next().unwrap_or(name);
        if tail.starts_with(" does not exist") {
            return EXTENSION_OBJECTS
                .iter()
                .find(|(_, types, _)| types.contains(&name))
                .map(|(e, _, _)| (*e, format!("type {name}")));
        }
    }
    let rest = message.split("function ").nth(1)?;
    let name = rest.split('(').next()?.trim().trim_matches('"');
    let name = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    if !message.contains("does not exist") {
        return None;
    }
    EXTENSION_OBJECTS
        .iter()
        .find(|(_, _, functions)| {
            functions.iter().any(|f| {
                if f.ends_with('_') {
                    name.starts_with(f)
                } else {
                    name == *f
                }
            })
        })
        .map(|(e, _, _)| (*e, format!("function {name}")))
}

/// A public image that has `extension` for PostgreSQL `major` (the
/// official `postgres` image lacks pgvector, PostGIS and TimescaleDB);
/// None for an extension rollsafe knows no image of.
pub fn extension_image(extension: &str, major: u32) -> Option<String> {
    match extension {
        "vector" => Some(format!("pgvector/pgvector:pg{major}")),
        "postgis" | "postgis_topology" | "postgis_raster" | "postgis_tiger_geocoder" => {
            Some(format!("postgis/postgis:{major}-3.5"))
        }
        "timescaledb" | "timescaledb_toolkit" => {
            Some(format!("timescale/timescaledb:latest-pg{major}"))
        }
        _ => None,
    }
}

/// The way out of a rehearsal on a server without `extension`: an image
/// that has it for the major in use (`major`, when the caller knows it;
/// else the default sandbox's, 15, and the tag to change), or `--postgres`
/// of a server that has it.
pub fn extension_way_out(extension: &str, major: Option<u32>) -> String {
    let image = match (extension_image(extension, major.unwrap_or(15)), major) {
        (Some(image), Some(_)) => format!("--image {image} (the docker backend)"),
        (Some(image), None) => format!(
            "--image {image} (the docker backend; that tag is for PostgreSQL 15, the default sandbox: take the one for production's major)"
        ),
        (None, _) => format!(
            "--image <an image with {extension} of production's major> (the docker backend)"
        ),
    };
    format!(
        "rehearse on a PostgreSQL that has {extension}, as production does: {image}, or --postgres <url of a server that has {extension}>; if production lacks it too, this migration fails there"
    )
}

/// `message` with [`advice`] appended after `; `, for errors that are one
/// line of text.
pub fn with_advice(message: String, sqlstate: Option<&str>, sql: &str) -> String {
    match advice(sqlstate, &message, Some(sql)) {
        Some(a) => format!("{message}; {a}"),
        None => message,
    }
}

/// Privilege errors only a superuser gets past (a missing GRANT is the
/// migration's or the app role's business, not this).
fn needs_superuser(message: &str) -> bool {
    [
        "is a system trigger",
        "must be superuser",
        "permission denied to create extension",
        "permission denied to create role",
        "permission denied for language",
        "only superuser",
        "must have the SUPERUSER attribute",
    ]
    .iter()
    .any(|m| message.contains(m))
}

fn parses_with_a_newer_grammar(sql: &str) -> bool {
    let split = crate::sql::split(sql);
    split.exact && !split.statements.is_empty() && split.statements.iter().all(|s| s.parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_flag_that_gets_past_the_error() {
        let a = advice(
            Some("42501"),
            r#"permission denied: "RI_ConstraintTrigger_c_18299" is a system trigger"#,
            None,
        )
        .unwrap();
        assert!(a.contains("--migrator-superuser"), "{a}");
        assert_eq!(
            advice(Some("42501"), "permission denied for table t", None),
            None
        );
        let a = advice(Some("42501"), "permission denied for schema reports", None).unwrap();
        assert!(
            a.contains("GRANT USAGE, CREATE ON SCHEMA") && a.contains("--migrator-superuser"),
            "{a}"
        );
        let a = advice(Some("42601"), "subquery in FROM must have an alias", None).unwrap();
        assert!(
            a.starts_with("this parses on PostgreSQL 16 and later")
                && a.ends_with("--postgres-version 16"),
            "{a}"
        );
        assert!(advice(
            Some("42601"),
            "syntax error at or near \"x\"",
            Some("SELEC x")
        )
        .is_none());
        assert_eq!(
            advice(Some("42P01"), "relation \"t\" does not exist", None),
            None
        );
        let a = advice(Some("42501"), "permission denied to create role", None).unwrap();
        assert!(a.contains("--migrator-superuser"), "{a}");
        let a = advice(
            Some("42704"),
            "line 3: role \"reporting\" does not exist",
            None,
        )
        .unwrap();
        assert!(a.contains("--setup FILE"), "{a}");
        let s = advice(Some("3F000"), "schema \"auth\" does not exist", None).unwrap();
        assert!(s.contains("--setup FILE"), "{s}");
    }

    /// A missing extension is named, also when only its type or function
    /// is missing (its CREATE EXTENSION swallowed by a DO block), with an
    /// image that has it for the major in use.
    #[test]
    fn a_missing_extension_names_it_and_an_image_that_has_it() {
        for (sqlstate, message, extension) in [
            ("0A000", "extension \"vector\" is not available", "vector"),
            (
                "58P01",
                "could not open extension control file \"/usr/share/postgresql/14/extension/timescaledb.control\": No such file or directory",
                "timescaledb",
            ),
            ("42704", "type \"vector\" does not exist", "vector"),
            ("42704", "type \"public.geography\" does not exist", "postgis"),
            (
                "42883",
                "function create_hypertable(unknown, unknown) does not exist",
                "timescaledb",
            ),
            (
                "42883",
                "function st_makepoint(double precision, double precision) does not exist",
                "postgis",
            ),
        ] {
            assert_eq!(
                missing_extension(Some(sqlstate), message).as_deref(),
                Some(extension),
                "{message}"
            );
        }
        for (sqlstate, message) in [
            ("42704", "type \"mood\" does not exist"),
            ("42883", "function lower(integer) does not exist"),
            ("42P01", "relation \"vector\" does not exist"),
        ] {
            assert_eq!(
                missing_extension(Some(sqlstate), message),
                None,
                "{message}"
            );
            assert_eq!(advice(Some(sqlstate), message, None), None, "{message}");
        }
        let swallowed = advice(Some("42704"), "type \"vector\" does not exist", None).unwrap();
        assert!(
            swallowed.starts_with("type vector is extension vector's")
                && swallowed.contains("DO block")
                && swallowed.contains("--image pgvector/pgvector:pg15")
                && swallowed.contains("--postgres <url of a server that has vector>"),
            "{swallowed}"
        );
        assert_eq!(
            extension_way_out("timescaledb", Some(16)),
            "rehearse on a PostgreSQL that has timescaledb, as production does: --image timescale/timescaledb:latest-pg16 (the docker backend), or --postgres <url of a server that has timescaledb>; if production lacks it too, this migration fails there"
        );
        assert_eq!(
            extension_image("postgis", 17).as_deref(),
            Some("postgis/postgis:17-3.5")
        );
        assert!(extension_way_out("pg_partman", Some(15))
            .contains("--image <an image with pg_partman of production's major>"));
    }
}

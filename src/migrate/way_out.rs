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
}

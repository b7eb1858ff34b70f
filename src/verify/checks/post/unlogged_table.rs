//! `post.unlogged-table`: a table the migrations leave UNLOGGED. Its
//! writes skip the WAL, so a crash or an unclean shutdown empties it and
//! no replica (streaming or logical) ever has its rows: a warning, since a
//! cache or staging table may want exactly that.

use crate::report::{Finding, Severity};
use crate::verify::checks::Check;
use crate::verify::evidence::{Context, MigrationEvidence};

use super::{CHECK, DESCRIPTION};

pub const ENTRY: Check = Check {
    name: CHECK,
    description: DESCRIPTION,
    ran: |e| e.final_schema.is_some(),
    evaluate,
    evaluate_run: None,
};

/// One warning per unlogged table of the final schema built on the live
/// apps' rows.
pub fn evaluate(e: &MigrationEvidence, _: &Context) -> Vec<Finding> {
    let Some(f) = &e.final_schema else {
        return Vec::new();
    };
    f.unlogged
        .iter()
        .map(|table| {
            Finding::new(
                CHECK,
                "unlogged-table",
                Severity::Warn,
                Some(e.version),
                format!("{table} is UNLOGGED after the migrations: a crash empties it and replicas never get its rows"),
            )
            .evidence("table", table.clone())
            .advice(format!("if its rows must survive a crash or reach a replica, ALTER TABLE {table} SET LOGGED in a migration (it rewrites the table under ACCESS EXCLUSIVE: while it is small, or in a maintenance window)"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::evidence::predict::Sizes;
    use crate::verify::evidence::FinalSchema;

    fn judged(unlogged: &[&str]) -> Vec<Finding> {
        let e = MigrationEvidence {
            version: 4,
            final_schema: Some(FinalSchema {
                unlogged: unlogged.iter().map(|t| t.to_string()).collect(),
                ..FinalSchema::default()
            }),
            ..MigrationEvidence::default()
        };
        let sizes = Sizes::default();
        let cx = Context::bare(&sizes);
        evaluate(&e, &cx)
    }

    #[test]
    fn each_unlogged_table_is_a_warning_naming_it() {
        let f = judged(&["events", "audit.staging"]);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f.iter().all(|f| f.id == "post.unlogged-table"));
        assert!(f.iter().all(|f| f.severity == Severity::Warn));
        assert_eq!(f[1].evidence["table"], "audit.staging");
        assert!(f[1].advice.contains("ALTER TABLE audit.staging SET LOGGED"));
        assert!(judged(&[]).is_empty());
    }
}

//! A framework's migrations (Django, Alembic, ActiveRecord, a
//! `--migrate-command`): not files rollsafe reads but what the
//! framework's own migrate command sent to a throwaway server, read back
//! from its statement log by `crate::framework` and handed to
//! [`crate::catalog::Catalog::from_steps`]. This reader is there so that
//! [`Layout::Framework`](crate::catalog::Layout::Framework) has one like
//! every layout: it claims no file (a folder is never detected as a
//! framework's), refuses to read one, and its history rules say the
//! framework keeps its own table, which rollsafe neither creates nor
//! writes (a rehearsal records its own in refinery's table).

use super::{Folder, HistoryRules, LayoutReader, ReadOptions, Step};
use crate::catalog::CatalogError;

pub struct Framework;

/// Read only, and of no table rollsafe can name ahead of the framework
/// (`django_migrations`, `alembic_version`, `schema_migrations`, …): the
/// query reads nothing, so `status` finds no rows of its own.
static HISTORY: HistoryRules = HistoryRules::new(
    "rollsafe_framework_history",
    "SELECT NULL::text, NULL::text, NULL::text WHERE false",
);

impl LayoutReader for Framework {
    fn pattern(&self) -> &'static str {
        "the migrations a framework's migrate command sends (run by rollsafe, not read from files)"
    }

    fn claims(&self, _: &Folder) -> Vec<String> {
        Vec::new()
    }

    fn read(&self, _: &Folder, _: &ReadOptions) -> Result<Vec<Step>, CatalogError> {
        Err(CatalogError::Unreadable {
            file: "--layout framework".into(),
            why: "a framework's migrations are not read from files: point --migrations at the project (manage.py, alembic.ini, bin/rails) or pass --migrate-command, and rollsafe runs its migrate on a throwaway server".into(),
        })
    }

    fn history(&self) -> &'static HistoryRules {
        &HISTORY
    }
}

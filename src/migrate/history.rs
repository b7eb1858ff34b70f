//! The history table each migration tool keeps, so that `status`,
//! `migrate` and a rehearsal see what the project's own tool sees.
//!
//! Each layout says what its tool keeps ([`HistoryRules`], in its own file
//! under `catalog/layouts/`: the table, how its rows read, how a checksum
//! compares, how a row is written); this module runs those rules against
//! a database, the same way for every tool.
//!
//! rollsafe's own apply path records refinery's `refinery_schema_history`
//! for refinery folders. For a folder of another tool whose history format
//! is public and simple (diesel, sqlx, golang-migrate, goose, dbmate,
//! maragudk/migrate, Drizzle),
//! `migrate` records each migration the way that tool does, in the same
//! transaction as the migration (outside one for no-transaction files:
//! after its last statement), so the tool itself sees it applied
//! afterwards. Atlas, Flyway, Prisma, Sqitch and Liquibase histories are
//! read (for `status` and `--since`), never written: their rows carry more
//! than rollsafe can vouch for (Atlas's and Flyway's checksums, Prisma's
//! step counts, Sqitch's change ids, Liquibase's normalised MD5SUM and
//! deployment ids).
//!
//! Where the tool keeps a checksum of each file, it is read back and
//! compared with the file's, computed as that tool computes it
//! ([`crate::catalog::Migration::tool_checksum`]): a file edited after it
//! was applied is then divergent, as an edited refinery file is; an edited
//! Flyway repeatable is due to run again.

use postgres::types::ToSql;
use postgres::{Client, GenericClient};

use crate::catalog::layouts::{self, HistoryRules, Value};
use crate::catalog::{Layout, Migration};

pub use crate::catalog::layouts::AppliedRow;

/// The history table of a layout's tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolHistory(pub Layout);

impl ToolHistory {
    /// What the layout says about its tool's table.
    fn rules(self) -> &'static HistoryRules {
        layouts::reader(self.0).history()
    }

    /// The table, as `to_regclass` reads it.
    pub fn table(self) -> &'static str {
        self.rules().table
    }

    /// The tool's `CREATE TABLE`, for the tools whose rows rollsafe
    /// writes; None for the others (read only).
    pub fn ddl(self) -> Option<&'static str> {
        self.rules().write.as_ref().map(|w| w.create)
    }

    /// Whether `migrate` can record migrations in this tool's table.
    pub fn writable(self) -> bool {
        self.ddl().is_some()
    }

    /// The table `migrate` keeps for `layout`: its tool's when rollsafe
    /// writes that format, else refinery's (a rehearsal's migrator; the
    /// CLI refuses to `migrate` such a folder on a real database).
    pub fn written_by_migrate(layout: Layout) -> ToolHistory {
        match ToolHistory(layout) {
            tool if tool.writable() => tool,
            _ => ToolHistory(Layout::Refinery),
        }
    }

    /// The tool's applied versions (its keys, [`Migration::key`]) with when
    /// each was applied and the checksum the tool recorded (None for tools
    /// that record none); None when the table does not exist.
    pub fn applied(self, client: &mut Client) -> Result<Option<Vec<AppliedRow>>, postgres::Error> {
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&self.table()])?
            .get(0);
        if !exists {
            return Ok(None);
        }
        let rules = self.rules();
        let rows = client.query(rules.applied, &[])?;
        Ok(Some(
            rows.iter()
                .map(|r| AppliedRow {
                    key: (rules.key)(r.get::<_, String>(0)),
                    applied_on: r.get::<_, Option<String>>(1).unwrap_or_default(),
                    checksum: r.get(2),
                })
                .collect(),
        ))
    }

    /// What `applied` rows say is applied, one row per migration of
    /// `catalog` (golang-migrate's one row stands for every file up to it,
    /// a dbmate version for each section of its file).
    pub fn expand(
        self,
        catalog: &crate::catalog::Catalog,
        applied: Vec<AppliedRow>,
    ) -> Vec<AppliedRow> {
        (self.rules().expand)(catalog.migrations(), applied)
    }

    /// Whether `recorded`, the checksum this tool keeps for `m`, is the
    /// file's ([`Migration::tool_checksum`], compared as the layout says).
    /// True when either side has none.
    pub fn checksum_matches(self, m: &Migration, recorded: Option<&str>) -> bool {
        let (Some(recorded), Some(file)) = (recorded, m.tool_checksum.as_deref()) else {
            return true;
        };
        (self.rules().checksum_matches)(m, recorded, file)
    }

    /// Said beside a divergent file when the tool's checksum covers more
    /// than the file (Atlas's running hash).
    pub fn divergent_note(self) -> Option<&'static str> {
        self.rules().divergent_note
    }

    /// The tool's applied versions as rollsafe's versions in `catalog`
    /// (ordinals for layouts other than refinery), ascending: what a
    /// rehearsal of the same database takes as applied (`verify --since
    /// auto --from-target`). Versions no file has are left out; None when
    /// the table does not exist.
    pub fn applied_versions(
        self,
        client: &mut Client,
        catalog: &crate::catalog::Catalog,
    ) -> Result<Option<Vec<i32>>, crate::migrate::MigrateError> {
        let (exists, rows) = crate::migrate::read_tool_history(client, catalog, self)?;
        if !exists {
            return Ok(None);
        }
        let mut versions: Vec<i32> = rows
            .iter()
            .map(|r| r.version)
            .filter(|v| catalog.get(*v).is_some())
            .collect();
        versions.sort_unstable();
        Ok(Some(versions))
    }

    /// Creates the table if missing (tools rollsafe writes only).
    pub fn ensure(self, client: &mut impl GenericClient) -> Result<(), postgres::Error> {
        match self.ddl() {
            Some(ddl) => client.batch_execute(ddl),
            None => Ok(()),
        }
    }

    /// Records `m` as the tool does (the table must exist: [`Self::ensure`]).
    pub fn record(
        self,
        client: &mut impl GenericClient,
        m: &Migration,
        elapsed: std::time::Duration,
    ) -> Result<(), postgres::Error> {
        let Some(write) = &self.rules().write else {
            unreachable!("{} history is written by refinery or not at all", self.0)
        };
        for w in (write.record)(m, elapsed) {
            let params: Vec<&(dyn ToSql + Sync)> = w.params.iter().map(param).collect();
            client.execute(w.sql, &params)?;
        }
        Ok(())
    }
}

/// A history value as the driver sends it.
fn param(value: &Value) -> &(dyn ToSql + Sync) {
    match value {
        Value::Int(v) => v,
        Value::BigInt(v) => v,
        Value::Text(v) => v,
        Value::Bytes(v) => v,
    }
}

/// Before a rehearsal's first migration: the history table the project's
/// tool would have created by then, because migrations may reference it (a
/// trigger on `__diesel_schema_migrations`, a backfill reading
/// `_sqlx_migrations`). Refinery's is rollsafe's own (its migrator creates
/// it); read-only tools' tables are not made up.
pub fn prepare_rehearsal(url: &str, layout: Layout) -> anyhow::Result<()> {
    use anyhow::Context;
    let tool = ToolHistory(layout);
    if layout == Layout::Refinery || !tool.writable() {
        return Ok(());
    }
    let mut client = crate::db::connect(url)?;
    tool.ensure(&mut client)
        .with_context(|| format!("creating {layout}'s history table {}", tool.table()))
}

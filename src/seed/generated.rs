//! What the catalogue generator wrote before a migration: the tables it
//! seeded (and how: rows, notes, past which triggers), the ones it could
//! not, its warnings and the apps' writes on top. Measured by
//! `seed::generate`; judged by `rewrite` (tables rehearsed empty, seeded
//! past triggers) and `apply` (a failure on rows seeded past a trigger).

/// What a generation wrote, for evidence and for the checks that need rows.
#[derive(Debug, Clone, Default)]
pub struct Generated {
    /// Tables that got their rows, in the order they were seeded.
    pub seeded: Vec<SeededTable>,
    /// Tables that could not be seeded (nothing was written to them).
    pub unseeded: Vec<UnseededTable>,
    /// Things that did not stop seeding but that a reader should know (a
    /// foreign-key cycle no nullable column breaks).
    pub warnings: Vec<String>,
    /// The app write statements run on top of the bulk rows.
    pub app_writes: Vec<AppWrites>,
    /// Sessions the tables were written on (2 when some could be written
    /// at once: [`crate::seed::generate`]'s schedule).
    pub sessions: usize,
    /// Set when only the tables a migration reaches were to get rows
    /// ([`crate::seed::reach`]); None: every table was.
    pub reach: Option<Reached>,
}

/// The tables a seeding limited to a migration's reach was to fill.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reached {
    /// The tables it reaches and the ones they reference, in seeding
    /// order (tables seeded before and carried among them).
    pub tables: Vec<String>,
    /// Tables in the schema (partitions counted in their parent).
    pub of: usize,
}

impl Generated {
    /// Rows written into `table`, None when it was not seeded.
    pub fn written(&self, table: &str) -> Option<u64> {
        self.seeded
            .iter()
            .find(|t| t.table == table)
            .map(|t| t.written)
    }

    /// Adds what a later generation on the same database did.
    pub fn absorb(&mut self, later: Generated) {
        self.seeded.extend(later.seeded);
        self.unseeded.extend(later.unseeded);
        self.warnings.extend(later.warnings);
        self.app_writes.extend(later.app_writes);
        self.sessions = self.sessions.max(later.sessions);
        self.reach = later.reach.or(self.reach.take());
    }

    /// Why `table` was not seeded, if it was not.
    pub fn unseeded(&self, table: &str) -> Option<&UnseededTable> {
        self.unseeded.iter().find(|t| t.table == table)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeededTable {
    pub table: String,
    pub requested: u64,
    pub written: u64,
    /// Why fewer rows than requested were written, if so.
    pub note: Option<String>,
    /// Rows written with the table's INSERT triggers disabled, and why
    /// (they refused the generated rows, or their cost grew with the
    /// table): a later migration that enforces a trigger's rule may meet
    /// rows production could not hold.
    pub past_triggers: Option<String>,
    /// How long its INSERT took (the search for values excluded).
    pub took: std::time::Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnseededTable {
    pub table: String,
    /// The constraint that could not be satisfied, when one is to blame.
    pub constraint: Option<String>,
    /// One line: what stood in the way.
    pub reason: String,
}

/// One app write statement run with generated parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppWrites {
    pub app: String,
    pub statement: String,
    pub runs: usize,
    pub succeeded: usize,
    /// The server's message of each failed run (not fatal: the schema may
    /// no longer fit the app, which the compat check judges).
    pub failures: Vec<String>,
}

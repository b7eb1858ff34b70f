//! What a rehearsal is doing, as it goes: [`VerifyEvent`]s, handed to the
//! callback of [`crate::verify::Verify::progress`]. The pipeline emits them and
//! knows nothing about how they are shown; the CLI's text lines and
//! progress bar, and the tests, consume the same events. An event names
//! its migration by version and by the project's label, and its
//! PostgreSQL major when several are rehearsed at once.
//!
//! In `report`, beside the findings: both are what a user sees of a run
//! (this while it goes, the findings at its end), and neither knows the
//! stages that produce them.

use std::fmt;

/// One step of a rehearsal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyEvent {
    /// The major rehearsed, when [`crate::verify::Verify::run_on_majors`] runs
    /// several.
    pub major: Option<u32>,
    pub what: Event,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A stage of the pipeline (`verify::stages`) started or finished.
    StageStarted(Stage),
    StageFinished(Stage),
    /// A step of the run as a whole started.
    Run(RunStep),
    /// A step of one migration started.
    Migration {
        version: i32,
        label: String,
        step: MigrationStep,
    },
}

/// The pipeline's stages, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Base,
    Templates,
    Seeded,
    FinalSchema,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStep {
    /// squawk's rules on the migrations' text.
    Lint,
    /// Who runs what (a phrase naming the migrator's and apps' roles).
    Sessions(String),
    /// The files up to `--since` applied once (the labels of the first
    /// and of `--since`).
    ApplyingUpTo {
        first: String,
        since: String,
    },
    ReadingTarget,
    FinalSchema,
    /// A project's own check on the final schema.
    ProjectCheck {
        check: String,
        description: String,
    },
    WaitingForProbes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationStep {
    /// Rows written by the live apps at the previous version (its label);
    /// `carried` rows came from the previous migration's seeded database.
    Seeding {
        carried: i64,
        rows: u64,
        at: String,
    },
    ApplyingOnEmpty,
    PlanningBefore,
    ApplyingOnSeeded {
        rows: i64,
        /// Whether a live app's workload runs meanwhile.
        workload: bool,
    },
    BatchedUpdate {
        table: String,
    },
    PlanningAfter,
    Backfill,
    Replaying,
}

impl fmt::Display for VerifyEvent {
    /// The line the text display shows (stage boundaries show nothing of
    /// their own: the steps inside them do).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(major) = self.major {
            write!(f, "PG{major}: ")?;
        }
        match &self.what {
            Event::StageStarted(s) => write!(f, "stage {s:?} started"),
            Event::StageFinished(s) => write!(f, "stage {s:?} finished"),
            Event::Run(step) => write!(f, "{step}"),
            Event::Migration { label, step, .. } => write!(f, "{label}: {step}"),
        }
    }
}

impl VerifyEvent {
    /// Whether the displays show it: the steps, not the stage boundaries.
    pub fn shown(&self) -> bool {
        !matches!(self.what, Event::StageStarted(_) | Event::StageFinished(_))
    }
}

impl fmt::Display for RunStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunStep::Lint => f.write_str("static: squawk's rules on the migrations"),
            RunStep::Sessions(who) => f.write_str(who),
            RunStep::ApplyingUpTo { first, since } => write!(
                f,
                "applying {first}..{since} once (up to --since, not rehearsed)"
            ),
            RunStep::ReadingTarget => {
                f.write_str("reading the target's schema (pg_dump --schema-only)")
            }
            RunStep::FinalSchema => f.write_str("post: final schema"),
            RunStep::ProjectCheck { check, description } => {
                write!(f, "{check}: {description} on the final schema")
            }
            RunStep::WaitingForProbes => f.write_str("waiting for the long-transaction probes"),
        }
    }
}

impl fmt::Display for MigrationStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MigrationStep::Seeding { carried, rows, at } if *carried > 0 => {
                write!(
                    f,
                    "{carried} seeded rows carried to {at}, up to {rows} more per table written"
                )
            }
            // What it sets out to write, per table: the rows written are
            // said when the migration applies on them.
            MigrationStep::Seeding { rows, at, .. } => {
                write!(f, "seeding up to {rows} rows per table at {at}")
            }
            MigrationStep::ApplyingOnEmpty => f.write_str("applying on an empty database"),
            MigrationStep::PlanningBefore => {
                f.write_str("planning the live apps' statements before it")
            }
            MigrationStep::ApplyingOnSeeded { rows, workload } => {
                match rows {
                    0 => f.write_str(
                        "applying on the seeded database, where the seeding wrote no rows (its findings say why)",
                    )?,
                    n => write!(f, "applying on {n} seeded rows")?,
                }
                if *workload {
                    f.write_str(" under the live apps' workload")?;
                }
                Ok(())
            }
            MigrationStep::BatchedUpdate { table } => write!(f, "batched update of {table}"),
            MigrationStep::PlanningAfter => f.write_str("planning the apps' statements after it"),
            MigrationStep::Backfill => f.write_str("backfill and readers"),
            MigrationStep::Replaying => f.write_str("replaying the apps' statements"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_the_major_and_the_projects_label() {
        let e = VerifyEvent {
            major: Some(16),
            what: Event::Migration {
                version: 2,
                label: "20240201120000".into(),
                step: MigrationStep::Seeding {
                    carried: 0,
                    rows: 500,
                    at: "20240101120000".into(),
                },
            },
        };
        assert_eq!(
            e.to_string(),
            "PG16: 20240201120000: seeding up to 500 rows per table at 20240101120000"
        );
        assert!(e.shown());
        let stage = VerifyEvent {
            major: None,
            what: Event::StageFinished(Stage::Seeded),
        };
        assert!(!stage.shown());
    }
}

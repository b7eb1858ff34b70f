//! `plan`: every live app statement's query plan before and after a
//! migration.
//!
//! A migration can leave every statement running correctly and still take
//! production down: it drops or replaces an index a hot statement needs,
//! or changes a column's type so the index no longer matches, and the
//! statement then reads the whole table on every call. The measuring stage
//! ([`crate::verify::measure::planning`]) plans each statement of each app live during
//! the migration on the seeded database before and after it (`EXPLAIN
//! (FORMAT JSON)`, nothing executed) and reads the indexes and foreign
//! keys around them; this module reads those plans into per-table access
//! paths ([`parse`]) and judges them, without touching a database:
//!
//! - a table read through an index before and sequentially after, or
//!   through an index that matches fewer of the statement's conditions
//!   (a worse prefix), is `plan.regressed`: an error at any size, like
//!   O(n) work under a blocking lock (the work per call now grows with the
//!   table). It drops to a warning only when production sizes say the
//!   full read per call stays under the plan budget (`--plan-budget`);
//! - when the index the statement used still matches (the planner, forced
//!   off sequential scans, still uses it) the change is the planner's cost
//!   choice at the seeded statistics: `plan.changed`, info;
//! - a replacement index the statement now uses passes;
//! - a new index on an existing table that no statement of the apps
//!   running after the migration uses is `plan.unused-index` (info: it
//!   still costs every write);
//! - a foreign key added without an index on its referencing columns while
//!   an app deletes or updates rows of the referenced table is
//!   `plan.fk-without-index` (warning), with the plan of the lookup each of
//!   those deletes runs;
//! - a statement whose tables hold no rows before or after, at the seeded
//!   size and in any imported statistics, says nothing about production:
//!   `plan.skipped` with that reason.

use std::time::Duration;

use serde_json::{json, Value};

use crate::report::{Finding, Location, Severity};
use crate::verify::evidence::plan::{
    parse, Access, ForeignKey, IndexInfo, Plan, Side, StatementPlan,
};
use crate::verify::evidence::predict::Sizes;
use crate::verify::evidence::{Context, Labels, MigrationEvidence};

use super::Check;

pub const CHECK: &str = "plan";

pub const ENTRY: Check = Check {
    name: CHECK,
    description: DESCRIPTION,
    ran: |e| e.plans.is_some(),
    evaluate,
    evaluate_run: None,
};

/// plan's judgement of one migration: the live apps' plans before and
/// after it compared, or why a side could not be measured.
pub fn evaluate(e: &MigrationEvidence, cx: &Context) -> Vec<Finding> {
    let Some(plans) = &e.plans else {
        return Vec::new();
    };
    let v = e.version;
    let before = match &plans.before {
        Ok(before) => before,
        Err(why) => return vec![not_measured(v, "before", why, &cx.labels)],
    };
    match &plans.after {
        None => Vec::new(),
        Some(Err(why)) => vec![not_measured(v, "after", why, &cx.labels)],
        Some(Ok(after)) => {
            let inputs = PlanInputs {
                v,
                sql: &e.sql,
                file: &e.file,
                live: &e.live,
                sizes: cx.sizes,
                budget: cx.plan_budget,
                labels: &cx.labels,
            };
            compare(&inputs, before, after)
        }
    }
}

/// The default `--plan-budget`: a full read per call under it, at
/// production size, is a warning rather than an error. A few
/// milliseconds: a statement an app runs on every request cannot afford
/// more than that on top of its own work.
pub const PLAN_BUDGET: Duration = Duration::from_millis(5);
pub const DESCRIPTION: &str =
    "every live app statement's query plan before and after: no table read through an index before is read sequentially (or through a worse index prefix) after";

/// What a rehearsal of migration `v` gives the judgement besides the plans.
pub struct PlanInputs<'a> {
    pub v: i32,
    /// The migration's SQL and its file as the repository has it, to point
    /// a regression at the statement that dropped the index.
    pub sql: &'a str,
    pub file: &'a str,
    /// The apps live during `v` (their statements were planned on both
    /// sides and are compared).
    pub live: &'a [String],
    pub sizes: &'a Sizes,
    /// A regression whose full read per call at production size stays
    /// under this is a warning, not an error.
    pub budget: Duration,
    /// How the project names its migrations.
    pub labels: &'a Labels<'a>,
}

/// How one table read of one statement changed.
#[derive(Debug, Clone, PartialEq)]
enum Change {
    /// Same path, same index.
    Kept,
    /// Another index, matching at least as many conditions.
    Replaced,
    /// The planner chose otherwise by cost while the index still matches.
    CostChoice { forced: Option<Access> },
    /// The index path is gone: a sequential scan or a worse prefix.
    Regressed,
}

/// One statement of one app with both plans read.
struct Compared<'a> {
    app: &'a str,
    statement: &'a str,
    before: Plan,
    after: Plan,
    forced: Option<Plan>,
}

/// The judgement for migration `v`.
pub fn compare(cx: &PlanInputs, before: &Side, after: &Side) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut compared: Vec<Compared> = Vec::new();
    let mut skipped = 0;
    for b in before
        .statements
        .iter()
        .filter(|s| cx.live.contains(&s.app))
    {
        let Some(a) = after
            .statements
            .iter()
            .find(|a| a.app == b.app && a.statement == b.statement)
        else {
            continue;
        };
        match read_both(b, a) {
            Ok(c) => compared.push(c),
            Err(reason) => {
                skipped += 1;
                out.push(skipped_statement(
                    cx.v,
                    &b.app,
                    &b.statement,
                    &reason,
                    cx.labels,
                ));
            }
        }
    }

    let plans = plans_evidence(&compared, before, after);
    let mut kept = 0;
    let mut replaced: Vec<String> = Vec::new();
    let mut regressed = 0;
    let mut empty_only: Vec<&Compared> = Vec::new();
    for c in &compared {
        let tables = tables_read(c);
        if tables.is_empty() {
            continue;
        }
        let measurable: Vec<&(String, String)> = tables
            .iter()
            .filter(|t| has_rows(t, before) || has_rows(t, after))
            .collect();
        if measurable.is_empty() {
            empty_only.push(c);
            continue;
        }
        for t in measurable {
            let b: Vec<&Access> = on(&c.before, t);
            let a: Vec<&Access> = on(&c.after, t);
            for (x, y) in b.iter().zip(a.iter()) {
                match judge(x, y, t, c.forced.as_ref(), after) {
                    Change::Kept => kept += 1,
                    Change::Replaced => replaced.push(format!(
                        "{}.{} on {}: {} → {}",
                        c.app,
                        c.statement,
                        name_of(t, after),
                        x.index.as_deref().unwrap_or("?"),
                        y.index.as_deref().unwrap_or("?")
                    )),
                    Change::CostChoice { forced } => {
                        out.push(cost_choice(cx, c, t, x, y, forced.as_ref(), after))
                    }
                    Change::Regressed => {
                        regressed += 1;
                        out.push(regression(cx, c, t, x, y, before, after));
                    }
                }
            }
        }
    }
    for c in empty_only {
        skipped += 1;
        let tables: Vec<String> = tables_read(c).iter().map(|t| name_of(t, after)).collect();
        out.push(skipped_statement(
            cx.v,
            c.app,
            c.statement,
            &format!(
                "{} hold{} no rows before or after {} at the seeded size{}, so its plan says nothing about production",
                tables.join(" and "),
                if tables.len() == 1 { "s" } else { "" },
                cx.labels.of(cx.v),
                if before.imported.is_empty() {
                    " and no production statistics were imported"
                } else {
                    " or in the imported statistics"
                }
            ), cx.labels,
        ));
    }

    out.extend(unused_indexes(cx, before, after));
    out.extend(fks_without_index(cx, before, after));
    out.push(
        summary(
            cx,
            before,
            after,
            compared.len(),
            kept,
            &replaced,
            regressed,
            skipped,
        )
        .evidence("plans", Value::Object(plans)),
    );
    out
}

/// Each compared statement's accesses before and after, as the summary's
/// `plans` evidence.
fn plans_evidence(
    compared: &[Compared],
    before: &Side,
    after: &Side,
) -> serde_json::Map<String, Value> {
    compared
        .iter()
        .map(|c| {
            let lines = |p: &Plan, side: &Side| {
                p.accesses
                    .iter()
                    .map(|a| {
                        format!(
                            "{}: {}",
                            name_of(&(a.schema.clone(), a.relname.clone()), side),
                            a.describe()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            (
                format!("{}.{}", c.app, c.statement),
                json!({ "before": lines(&c.before, before), "after": lines(&c.after, after) }),
            )
        })
        .collect()
}

fn read_both<'a>(b: &'a StatementPlan, a: &'a StatementPlan) -> Result<Compared<'a>, String> {
    let read = |s: &StatementPlan, when: &str| -> Result<Plan, String> {
        match &s.planned {
            Ok(json) => parse(json).map_err(|e| format!("its plan {when} could not be read ({e})")),
            Err(e) => Err(format!("it could not be planned {when} ({e})")),
        }
    };
    Ok(Compared {
        app: &b.app,
        statement: &b.statement,
        before: read(b, "before")?,
        after: read(a, "after")?,
        forced: a
            .forced
            .as_ref()
            .and_then(|f| f.as_ref().ok())
            .and_then(|j| parse(j).ok()),
    })
}

/// The (schema, relname) of every table the statement reads, either side.
fn tables_read(c: &Compared) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for a in c.before.accesses.iter().chain(&c.after.accesses) {
        let t = (a.schema.clone(), a.relname.clone());
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

fn on<'p>(plan: &'p Plan, t: &(String, String)) -> Vec<&'p Access> {
    plan.accesses
        .iter()
        .filter(|a| a.schema == t.0 && a.relname == t.1)
        .collect()
}

/// The table as messages name it (`orders`, `sales.orders`).
fn name_of(t: &(String, String), side: &Side) -> String {
    side.tables
        .iter()
        .find(|s| s.schema == t.0 && s.relname == t.1)
        .map(|s| s.name.clone())
        .unwrap_or_else(|| {
            if t.0 == "public" {
                t.1.clone()
            } else {
                format!("{}.{}", t.0, t.1)
            }
        })
}

/// The seeded rows of the table (what its plan and its measured full read
/// were made on).
fn rows_of(t: &(String, String), side: &Side) -> f64 {
    side.tables
        .iter()
        .find(|s| s.schema == t.0 && s.relname == t.1)
        .map_or(0.0, |s| s.rows.max(0.0))
}

/// Whether the table holds rows on this side: seeded, or in the imported
/// statistics.
fn has_rows(t: &(String, String), side: &Side) -> bool {
    rows_of(t, side) > 0.0
        || side
            .tables
            .iter()
            .find(|s| s.schema == t.0 && s.relname == t.1)
            .and_then(|s| s.imported_rows)
            .is_some_and(|n| n > 0.0)
}

fn judge(
    before: &Access,
    after: &Access,
    t: &(String, String),
    forced: Option<&Plan>,
    after_side: &Side,
) -> Change {
    if !before.path.indexed() {
        return Change::Kept;
    }
    if after.path.indexed() && after.conds >= before.conds {
        return if after.index == before.index {
            Change::Kept
        } else {
            Change::Replaced
        };
    }
    if !after.path.indexed() {
        // Still usable? With sequential scans off, the planner takes an
        // index path that matches as much as before if one exists.
        let best = forced.and_then(|f| {
            on(f, t)
                .into_iter()
                .filter(|a| a.path.indexed())
                .max_by_key(|a| a.conds)
                .cloned()
        });
        return match best {
            Some(b) if b.conds >= before.conds => Change::CostChoice { forced: Some(b) },
            _ => Change::Regressed,
        };
    }
    // A worse prefix: by cost when the index used before is still there
    // as it was (the planner weighs the two), else lost.
    let still_there = before
        .index
        .as_deref()
        .is_some_and(|i| index_in(after_side, t, i).is_some_and(|x| x.valid));
    if still_there {
        Change::CostChoice { forced: None }
    } else {
        Change::Regressed
    }
}

fn index_in<'s>(side: &'s Side, t: &(String, String), index: &str) -> Option<&'s IndexInfo> {
    let table = name_of(t, side);
    side.indexes
        .iter()
        .find(|i| i.table == table && i.name == index)
}

/// What a full sequential read of the table costs per call: (rows, time,
/// at production size).
fn full_read(t: &(String, String), cx: &PlanInputs, after: &Side) -> (f64, Option<Duration>, bool) {
    let name = name_of(t, after);
    let seeded = rows_of(t, after);
    let (rows, production) = match cx.sizes.rows.get(&name) {
        Some(n) => (*n, true),
        None => (seeded, false),
    };
    let time = after
        .full_reads
        .get(&name)
        .filter(|_| seeded > 0.0)
        .map(|d| d.mul_f64(rows / seeded));
    (rows, time, production)
}

fn regression(
    cx: &PlanInputs,
    c: &Compared,
    t: &(String, String),
    b: &Access,
    a: &Access,
    before: &Side,
    after: &Side,
) -> Finding {
    let v_label = cx.labels.of(cx.v);
    let table = name_of(t, after);
    let old = b.index.clone().unwrap_or_default();
    let (rows, time, production) = full_read(t, cx, after);
    let time_phrase = time.map_or("its time was not measured".to_string(), |d| {
        format!("about {:.1} ms", super::phrases::ms(d))
    });
    let size_phrase = if production {
        format!("at production size ({}: {})", cx.sizes.source, rows)
    } else {
        format!(
            "at the seeded size; give --table-rows {table}=N or --sizes-from URL for production's"
        )
    };
    let under_budget = production && time.is_some_and(|d| d < cx.budget);
    let replaced_by = if a.path.indexed() {
        format!(
            "index {} matching {} of the {} conditions {old} matched",
            a.index.as_deref().unwrap_or("?"),
            a.conds,
            b.conds
        )
    } else {
        "a sequential scan".to_string()
    };
    let old_def = before
        .indexes
        .iter()
        .find(|i| i.table == name_of(t, before) && i.name == old);
    let now = index_in(after, t, &old);
    let why = match (old_def, now) {
        (_, None) => format!("{} drops {old}", cx.labels.of(cx.v)),
        (Some(o), Some(n)) if o.definition != n.definition => {
            format!("{} changes {old} ({} → {})", cx.labels.of(cx.v), o.definition, n.definition)
        }
        _ => format!(
            "{old} still exists but no longer matches the statement (a column's type or the index's expression changed)"
        ),
    };
    let read = if a.path.indexed() {
        format!(
            "each call now reads every row sharing the shorter prefix, up to all {rows:.0} rows of {table} ({time_phrase} for all of them) {size_phrase}"
        )
    } else {
        format!("each call now reads all {rows:.0} rows of {table}: {time_phrase} per call {size_phrase}")
    };
    let message = format!(
        "the {} app's `{}` read {table} through index {old} before {v_label} and through {replaced_by} after it ({why}); {read}",
        c.app,
        c.statement,
    );
    let advice = match (old_def, now) {
        (Some(o), None) => format!(
            "create the replacement index before dropping the old one: {} in an earlier migration (a -- rollsafe:no-transaction file), and drop {old} only once no running app's statement needs it",
            o.definition.replacen(
                &format!("INDEX {old} ON"),
                &format!("INDEX CONCURRENTLY IF NOT EXISTS {old}_new ON"),
                1
            )
        ),
        (None, None) => format!(
            "create the replacement index before dropping the old one: keep {old} until a matching index exists and no running app's statement needs it"
        ),
        _ => format!(
            "keep {old} usable by the {} app's `{}` (the column types and expressions it is built on) until no running app needs it, or create a matching index first",
            c.app, c.statement
        ),
    };
    let severity = if under_budget {
        Severity::Warn
    } else {
        Severity::Error
    };
    let change = format!("{} → {}", b.describe(), a.describe());
    Finding::new(CHECK, "regressed", severity, Some(cx.v), message)
        .at(dropping_statement(cx, &old))
        .evidence("app", c.app)
        .evidence("statement", c.statement)
        .evidence("table", table.clone())
        .evidence("index_before", old.clone())
        .evidence("index_dropped", now.is_none())
        .evidence(
            "replaced_by",
            a.index.clone().unwrap_or_else(|| a.path.node().to_string()),
        )
        .evidence("plan_change", change)
        .evidence("full_read_rows", rows)
        .evidence(
            "full_read_ms",
            time.map_or(Value::Null, |d| json!(super::phrases::ms(d))),
        )
        .evidence("size", if production { "production" } else { "seeded" })
        .evidence("budget_ms", super::phrases::ms(cx.budget))
        .evidence("before", plan_nodes(&c.before, before))
        .evidence("after", plan_nodes(&c.after, after))
        .evidence("statistics", statistics_phrase(before))
        .advice(advice)
}

fn cost_choice(
    cx: &PlanInputs,
    c: &Compared,
    t: &(String, String),
    b: &Access,
    a: &Access,
    forced: Option<&Access>,
    after: &Side,
) -> Finding {
    let table = name_of(t, after);
    let still = match forced {
        Some(f) => format!(
            "forced off sequential scans it still uses {} (cost {:.2} against {:.2})",
            f.index.as_deref().unwrap_or("an index"),
            f.cost,
            a.cost
        ),
        None => format!(
            "{} is still there as before",
            b.index.as_deref().unwrap_or("its index")
        ),
    };
    Finding::new(
        CHECK,
        "changed",
        Severity::Info,
        Some(cx.v),
        format!(
            "the {} app's `{}` on {table}: {} → {} by the planner's cost at the {} statistics; {still}",
            c.app,
            c.statement,
            b.describe(),
            a.describe(),
            if after.imported.is_empty() { "seeded" } else { "imported" }
        ),
    )
    .evidence("app", c.app)
    .evidence("statement", c.statement)
    .evidence("table", table)
    .evidence("plan_change", format!("{} → {}", b.describe(), a.describe()))
}

/// The key nodes of a plan for evidence: each table read.
fn plan_nodes(plan: &Plan, side: &Side) -> Value {
    Value::Array(
        plan.accesses
            .iter()
            .map(|a| a.evidence(&name_of(&(a.schema.clone(), a.relname.clone()), side)))
            .collect(),
    )
}

/// The migration statement that drops `index`, for the finding's location.
fn dropping_statement(cx: &PlanInputs, index: &str) -> Option<Location> {
    if index.is_empty() {
        return None;
    }
    let lower = index.to_lowercase();
    crate::sql::split(cx.sql)
        .statements
        .into_iter()
        .find(|st| {
            let t = st.text.to_lowercase();
            t.contains("drop") && mentions(&t, &lower)
        })
        .map(|st| Location {
            file: cx.file.to_string(),
            line: st.line,
            column: st.column,
            excerpt: st.text.split_whitespace().collect::<Vec<_>>().join(" "),
        })
}

/// Whether `word` appears in `text` as a whole identifier.
fn mentions(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// One side of migration `v` could not be measured at all.
pub fn not_measured(v: i32, when: &str, detail: &str, labels: &Labels) -> Finding {
    let v_label = labels.of(v);
    Finding::new(
        CHECK,
        "skipped",
        Severity::Skipped,
        Some(v),
        format!("the apps' statements could not be planned {when} {v_label}: {detail}"),
    )
    .evidence("side", when)
    .evidence("error", detail)
}

fn skipped_statement(v: i32, app: &str, statement: &str, reason: &str, labels: &Labels) -> Finding {
    let v_label = labels.of(v);
    Finding::new(
        CHECK,
        "skipped",
        Severity::Skipped,
        Some(v),
        format!("the {app} app's `{statement}` was not compared before and after {v_label}: {reason}"),
    )
    .evidence("app", app)
    .evidence("statement", statement)
    .advice("seed rows in the tables it reads (its app's seed file), or import production's statistics (--from-target on PostgreSQL 18), so its plan means something")
}

fn statistics_phrase(side: &Side) -> String {
    if side.imported.is_empty() {
        match &side.not_imported {
            Some(why) => format!("seeded only ({why})"),
            None => "seeded (ANALYZE of the seeded rows)".to_string(),
        }
    } else {
        format!(
            "imported from the target for {}; seeded for the rest",
            side.imported.join(", ")
        )
    }
}

/// Indexes the migration built on tables that existed before it, that no
/// statement of the apps running after it reads through, that enforce no
/// uniqueness and serve no foreign key.
fn unused_indexes(cx: &PlanInputs, before: &Side, after: &Side) -> Vec<Finding> {
    let existed = |table: &str| before.tables.iter().any(|t| t.name == table);
    let mut used: Vec<String> = Vec::new();
    let mut apps: Vec<&str> = Vec::new();
    for s in &after.statements {
        if !apps.contains(&s.app.as_str()) {
            apps.push(&s.app);
        }
        if let Some(p) = s.planned.as_ref().ok().and_then(|j| parse(j).ok()) {
            for a in p.accesses {
                if let Some(i) = a.index {
                    used.extend(i.split(" + ").map(str::to_string));
                }
            }
        }
    }
    after
        .indexes
        .iter()
        .filter(|i| !before.indexes.iter().any(|b| b.table == i.table && b.name == i.name && b.definition == i.definition))
        .filter(|i| existed(&i.table) && i.valid && !i.unique)
        .filter(|i| !used.contains(&i.name))
        .filter(|i| !after.foreign_keys.iter().any(|fk| fk.table == i.table && covers(i, fk)))
        .map(|i| {
            Finding::new(
                CHECK,
                "unused-index",
                Severity::Info,
                Some(cx.v),
                format!(
                    "{} builds index {} on {}, which no statement of the apps running after it ({}) reads through; it still costs every write to {}",
                    cx.labels.of(cx.v),
                    i.name,
                    i.table,
                    if apps.is_empty() { "none".to_string() } else { apps.join(", ") },
                    i.table
                ),
            )
            .evidence("index", i.name.clone())
            .evidence("table", i.table.clone())
            .evidence("definition", i.definition.clone())
            .evidence("statements_planned", after.statements.len())
            .advice("drop it unless a statement outside the apps' files (a report, an admin query) needs it")
        })
        .collect()
}

/// Whether the index's leading key columns are exactly the foreign key's
/// columns (in any order): the lookup on delete of a parent can use it.
pub fn covers(index: &IndexInfo, fk: &ForeignKey) -> bool {
    if index.partial || !index.valid || index.columns.len() < fk.columns.len() {
        return false;
    }
    let lead: Vec<Option<&str>> = index.columns[..fk.columns.len()]
        .iter()
        .map(|c| c.as_deref())
        .collect();
    fk.columns.iter().all(|c| lead.contains(&Some(c.as_str())))
}

fn fks_without_index(cx: &PlanInputs, before: &Side, after: &Side) -> Vec<Finding> {
    let mut out = Vec::new();
    let new = after.foreign_keys.iter().filter(|fk| {
        !before
            .foreign_keys
            .iter()
            .any(|b| b.table == fk.table && b.name == fk.name && b.definition == fk.definition)
    });
    for fk in new {
        if after
            .indexes
            .iter()
            .any(|i| i.table == fk.table && covers(i, fk))
        {
            continue;
        }
        // Statements that delete or update rows of the referenced table:
        // each such row makes PostgreSQL look the key up in fk.table.
        let mut writers: Vec<String> = Vec::new();
        for (side, statements) in [(before, &before.statements), (after, &after.statements)] {
            for s in statements {
                let Some(p) = s.planned.as_ref().ok().and_then(|j| parse(j).ok()) else {
                    continue;
                };
                let hits = p.modifies.iter().any(|m| {
                    matches!(m.operation.as_str(), "Delete" | "Update")
                        && name_of(&(m.schema.clone(), m.relname.clone()), side) == fk.referenced
                });
                let label = format!("{}.{}", s.app, s.statement);
                if hits && !writers.contains(&label) {
                    writers.push(label);
                }
            }
        }
        if writers.is_empty() {
            continue;
        }
        let lookup = after
            .fk_lookups
            .iter()
            .find(|(k, _)| k.0 == fk.table && k.1 == fk.name)
            .map(|(_, r)| r);
        let measured = match lookup {
            Some(Ok(json)) => parse(json).ok().and_then(|p| {
                p.accesses
                    .iter()
                    .find(|a| name_of(&(a.schema.clone(), a.relname.clone()), after) == fk.table)
                    .map(Access::describe)
            }),
            _ => None,
        };
        let lookup_phrase = match (&measured, lookup) {
            (Some(d), _) => format!("the lookup each of them runs on {} plans as {d}", fk.table),
            (None, Some(Err(e))) => format!("the lookup could not be planned ({e})"),
            _ => "the lookup was not planned".to_string(),
        };
        out.push(
            Finding::new(
                CHECK,
                "fk-without-index",
                Severity::Warn,
                Some(cx.v),
                format!(
                    "{} adds foreign key {} on {} ({}) with no index on those columns, and {} delete or update rows of {}: {lookup_phrase}, a read of {} that grows with it",
                    cx.labels.of(cx.v),
                    fk.name,
                    fk.table,
                    fk.columns.join(", "),
                    writers.join(", "),
                    fk.referenced,
                    fk.table
                ),
            )
            .evidence("constraint", fk.name.clone())
            .evidence("table", fk.table.clone())
            .evidence("columns", fk.columns.clone())
            .evidence("referenced", fk.referenced.clone())
            .evidence("statements", writers)
            .evidence("lookup_plan", measured.map_or(Value::Null, Value::String))
            .advice(format!(
                "create the index first: CREATE INDEX CONCURRENTLY ON {} ({}) in a migration before the one that adds the foreign key",
                fk.table,
                fk.columns.join(", ")
            )),
        );
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn summary(
    cx: &PlanInputs,
    before: &Side,
    after: &Side,
    compared: usize,
    kept: usize,
    replaced: &[String],
    regressed: usize,
    skipped: usize,
) -> Finding {
    let mut message = format!(
        "{compared} statement(s) of the {} app planned before and after {} ({}, {} statistics): {regressed} regressed, {kept} table read(s) kept their path",
        cx.live.join(" and "),
        cx.labels.of(cx.v),
        after.mode,
        if before.imported.is_empty() { "seeded" } else { "imported" },
    );
    if !replaced.is_empty() {
        message.push_str(&format!(
            ", {} now read through an equivalent replacement index ({})",
            replaced.len(),
            replaced.join("; ")
        ));
    }
    if skipped > 0 {
        message.push_str(&format!(", {skipped} skipped"));
    }
    let took: Duration = before.took + after.took;
    Finding::new(CHECK, "measured", Severity::Info, Some(cx.v), message)
        .evidence("statements_compared", compared)
        .evidence("paths_kept", kept)
        .evidence("replaced", replaced.to_vec())
        .evidence("regressed", regressed)
        .evidence("skipped", skipped)
        .evidence("planning", after.mode.to_string())
        .evidence("statistics", statistics_phrase(before))
        .evidence("took_ms", super::phrases::ms(took))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::evidence::plan::tests::{explain, scan};
    use crate::verify::evidence::plan::{Mode, TableStats};

    fn side(
        statements: Vec<(&str, &str, Value)>,
        indexes: &[(&str, &str, &str, &[&str])],
        rows: f64,
    ) -> Side {
        Side {
            mode: Mode::Generic,
            statements: statements
                .into_iter()
                .map(|(app, st, plan)| StatementPlan {
                    app: app.into(),
                    statement: st.into(),
                    planned: Ok(plan),
                    forced: None,
                })
                .collect(),
            tables: ["books", "authors"]
                .iter()
                .map(|t| TableStats {
                    schema: "public".into(),
                    relname: t.to_string(),
                    name: t.to_string(),
                    qualified: format!("public.{t}"),
                    rows,
                    pages: 10,
                    imported_rows: None,
                })
                .collect(),
            indexes: indexes
                .iter()
                .map(|(table, name, def, cols)| IndexInfo {
                    table: table.to_string(),
                    name: name.to_string(),
                    definition: def.to_string(),
                    columns: cols.iter().map(|c| Some(c.to_string())).collect(),
                    unique: false,
                    valid: true,
                    partial: false,
                    method: "btree".into(),
                    ..IndexInfo::default()
                })
                .collect(),
            ..Side::default()
        }
    }

    const EMAIL_IDX: (&str, &str, &str, &[&str]) = (
        "books",
        "books_email",
        "CREATE INDEX books_email ON public.books USING btree (email)",
        &["email"],
    );

    fn cx<'a>(live: &'a [String], sizes: &'a Sizes) -> PlanInputs<'a> {
        PlanInputs {
            v: 3,
            sql: "-- drop it\nDROP INDEX books_email;",
            file: "migrations/V3__drop.sql",
            live,
            sizes,
            budget: Duration::from_millis(5),
            labels: &Labels::ORDINALS,
        }
    }

    fn by_email(index: Option<&str>) -> Value {
        match index {
            Some(i) => explain(scan(
                "Index Scan",
                "books",
                Some(i),
                Some("(books.email = $1)"),
                1.0,
                8.29,
            )),
            None => explain(scan("Seq Scan", "books", None, None, 1.0, 189.0)),
        }
    }

    #[test]
    fn a_dropped_index_read_sequentially_after_is_an_error_naming_it() {
        let live = vec!["shop".to_string()];
        let sizes = Sizes::default();
        let before = side(
            vec![("shop", "by_email", by_email(Some("books_email")))],
            &[EMAIL_IDX],
            10_000.0,
        );
        let mut after = side(vec![("shop", "by_email", by_email(None))], &[], 10_000.0);
        after
            .full_reads
            .insert("books".into(), Duration::from_millis(2));
        let f = compare(&cx(&live, &sizes), &before, &after);
        let r = f.iter().find(|f| f.id == "plan.regressed").unwrap();
        assert_eq!(r.severity, Severity::Error);
        assert!(r.message.contains("the shop app's `by_email` read books through index books_email before V3 and through a sequential scan after it (V3 drops books_email)"), "{}", r.message);
        assert!(
            r.message
                .contains("all 10000 rows of books: about 2.0 ms per call at the seeded size"),
            "{}",
            r.message
        );
        assert!(r.advice.starts_with("create the replacement index before dropping the old one: CREATE INDEX CONCURRENTLY IF NOT EXISTS books_email_new ON public.books USING btree (email) in an earlier migration"), "{}", r.advice);
        assert_eq!(r.location.as_ref().unwrap().line, 2);
        assert_eq!(r.evidence["plan_change"], "Index Scan using books_email (est. 1 row, cost 8.29) → Seq Scan (est. 1 row, cost 189.00)");
        assert_eq!(r.evidence["before"][0]["index"], "books_email");
        assert_eq!(r.evidence["size"], "seeded");
        let m = f.iter().find(|f| f.id == "plan.measured").unwrap();
        assert_eq!(m.evidence["regressed"], 1);

        // Production sizes that keep the full read under the budget: a warning.
        let small = Sizes::from_pairs(["books=20000"]).unwrap();
        let f = compare(&cx(&live, &small), &before, &after);
        let r = f.iter().find(|f| f.id == "plan.regressed").unwrap();
        assert_eq!(r.severity, Severity::Warn, "{}", r.message);
        assert!(
            r.message
                .contains("about 4.0 ms per call at production size"),
            "{}",
            r.message
        );
        // … and over it an error.
        let big = Sizes::from_pairs(["books=48M"]).unwrap();
        let f = compare(&cx(&live, &big), &before, &after);
        assert_eq!(
            f.iter()
                .find(|f| f.id == "plan.regressed")
                .unwrap()
                .severity,
            Severity::Error
        );
    }

    #[test]
    fn an_equivalent_replacement_passes_and_a_cost_choice_is_info() {
        let live = vec!["shop".to_string()];
        let sizes = Sizes::default();
        let before = side(
            vec![("shop", "by_email", by_email(Some("books_email")))],
            &[EMAIL_IDX],
            10_000.0,
        );
        let after = side(
            vec![("shop", "by_email", by_email(Some("books_email_v2")))],
            &[(
                "books",
                "books_email_v2",
                "CREATE INDEX books_email_v2 ON public.books USING btree (email, id)",
                &["email", "id"],
            )],
            10_000.0,
        );
        let f = compare(&cx(&live, &sizes), &before, &after);
        assert!(f.iter().all(|f| f.severity != Severity::Error), "{f:?}");
        let m = f.iter().find(|f| f.id == "plan.measured").unwrap();
        assert!(
            m.message.contains("books_email → books_email_v2"),
            "{}",
            m.message
        );
        assert!(!f.iter().any(|f| f.id == "plan.unused-index"), "{f:?}");

        // Sequential after, but the index still serves it when forced.
        let mut after = side(
            vec![("shop", "by_email", by_email(None))],
            &[EMAIL_IDX],
            10_000.0,
        );
        after.statements[0].forced = Some(Ok(by_email(Some("books_email"))));
        let f = compare(&cx(&live, &sizes), &before, &after);
        let c = f.iter().find(|f| f.id == "plan.changed").unwrap();
        assert_eq!(c.severity, Severity::Info);
        assert!(!f.iter().any(|f| f.id == "plan.regressed"), "{f:?}");
    }

    #[test]
    fn a_worse_prefix_is_a_regression_when_the_wider_index_is_gone() {
        let live = vec!["shop".to_string()];
        let sizes = Sizes::default();
        let two = explain(scan(
            "Index Scan",
            "books",
            Some("books_a_b"),
            Some("((books.a = $1) AND (books.b = $2))"),
            1.0,
            8.0,
        ));
        let one = explain(scan(
            "Index Scan",
            "books",
            Some("books_a"),
            Some("(books.a = $1)"),
            1.0,
            40.0,
        ));
        let before = side(
            vec![("shop", "by_ab", two)],
            &[(
                "books",
                "books_a_b",
                "CREATE INDEX books_a_b ON public.books USING btree (a, b)",
                &["a", "b"],
            )],
            10_000.0,
        );
        let after = side(
            vec![("shop", "by_ab", one)],
            &[(
                "books",
                "books_a",
                "CREATE INDEX books_a ON public.books USING btree (a)",
                &["a"],
            )],
            10_000.0,
        );
        let f = compare(&cx(&live, &sizes), &before, &after);
        let r = f.iter().find(|f| f.id == "plan.regressed").unwrap();
        assert!(
            r.message
                .contains("through index books_a matching 1 of the 2 conditions books_a_b matched"),
            "{}",
            r.message
        );
    }

    #[test]
    fn an_unrelated_new_index_is_unused_info_and_empty_tables_are_skipped() {
        let live = vec!["shop".to_string()];
        let sizes = Sizes::default();
        let before = side(
            vec![("shop", "by_email", by_email(Some("books_email")))],
            &[EMAIL_IDX],
            10_000.0,
        );
        let after = side(
            vec![("shop", "by_email", by_email(Some("books_email")))],
            &[
                EMAIL_IDX,
                (
                    "books",
                    "books_title",
                    "CREATE INDEX books_title ON public.books USING btree (title)",
                    &["title"],
                ),
            ],
            10_000.0,
        );
        let f = compare(&cx(&live, &sizes), &before, &after);
        let u = f.iter().find(|f| f.id == "plan.unused-index").unwrap();
        assert_eq!(u.severity, Severity::Info);
        assert!(
            u.message.contains("builds index books_title on books"),
            "{}",
            u.message
        );
        assert!(f.iter().all(|f| f.severity == Severity::Info), "{f:?}");

        let before = side(
            vec![("shop", "by_email", by_email(Some("books_email")))],
            &[EMAIL_IDX],
            0.0,
        );
        let after = side(vec![("shop", "by_email", by_email(None))], &[], 0.0);
        let f = compare(&cx(&live, &sizes), &before, &after);
        let s = f.iter().find(|f| f.id == "plan.skipped").unwrap();
        assert_eq!(s.severity, Severity::Skipped);
        assert!(
            s.message.contains("books holds no rows before or after V3"),
            "{}",
            s.message
        );
        assert!(!f.iter().any(|f| f.id == "plan.regressed"));
    }

    #[test]
    fn a_new_foreign_key_without_index_warns_when_an_app_deletes_parents() {
        let live = vec!["shop".to_string()];
        let sizes = Sizes::default();
        let delete = explain(json!({
            "Node Type": "ModifyTable", "Operation": "Delete", "Relation Name": "authors", "Schema": "public",
            "Total Cost": 8.3, "Plan Rows": 0.0,
            "Plans": [scan("Index Scan", "authors", Some("authors_pkey"), Some("(authors.id = $1)"), 1.0, 8.3)]
        }));
        let before = side(vec![("shop", "delete_author", delete.clone())], &[], 1000.0);
        let mut after = side(vec![("shop", "delete_author", delete)], &[], 1000.0);
        after.foreign_keys.push(ForeignKey {
            table: "books".into(),
            name: "books_author_fk".into(),
            definition: "FOREIGN KEY (author_id) REFERENCES authors(id)".into(),
            columns: vec!["author_id".into()],
            referenced: "authors".into(),
            ..ForeignKey::default()
        });
        after.fk_lookups.push((
            ("books".into(), "books_author_fk".into()),
            Ok(explain(scan("Seq Scan", "books", None, None, 1.0, 180.0))),
        ));
        let f = compare(&cx(&live, &sizes), &before, &after);
        let w = f.iter().find(|f| f.id == "plan.fk-without-index").unwrap();
        assert_eq!(w.severity, Severity::Warn);
        assert!(
            w.message
                .contains("shop.delete_author delete or update rows of authors"),
            "{}",
            w.message
        );
        assert!(
            w.message
                .contains("plans as Seq Scan (est. 1 row, cost 180.00)"),
            "{}",
            w.message
        );
        // With an index on the referencing column: nothing to say.
        after.indexes.push(IndexInfo {
            table: "books".into(),
            name: "books_author".into(),
            definition: String::new(),
            columns: vec![Some("author_id".into())],
            unique: false,
            valid: true,
            partial: false,
            method: "btree".into(),
            ..IndexInfo::default()
        });
        let f = compare(&cx(&live, &sizes), &before, &after);
        assert!(!f.iter().any(|f| f.id == "plan.fk-without-index"), "{f:?}");
    }
}

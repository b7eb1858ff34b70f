//! The apps' own writes: each write statement of an app version run a few
//! times with generated parameters, so rows also look like the app's own.

use postgres::Client;

use super::catalogue::TypeCache;
use super::families::{families, Literals};
use super::family::at;
use super::{replay, AppWrites, APP_WRITE_RUNS};
use crate::app::AppVersion;

/// Runs each write statement of `app` [`APP_WRITE_RUNS`] times, committed,
/// with its declared parameters or values generated from the parameter
/// types the server reports.
pub(super) fn run_app_writes(
    c: &mut Client,
    app: &AppVersion,
    types: &mut TypeCache,
) -> anyhow::Result<Vec<AppWrites>> {
    let outcomes = replay::replay_all(c, app)?;
    let writers = replay::writers(app, &outcomes);
    let mut out = Vec::new();
    for st in app.set.statements() {
        if !writers.contains(&st.name) {
            continue;
        }
        let declared = replay::declared_params(st.meta_values("param"));
        let mut w = AppWrites {
            app: app.name.clone(),
            statement: st.name.clone(),
            runs: 0,
            succeeded: 0,
            failures: Vec::new(),
        };
        let mut p = match replay::prepare(c, app, &st.name) {
            Ok(p) => p,
            Err(e) => {
                w.failures
                    .push(format!("PREPARE: {}", crate::errors::one_line(&e)));
                out.push(w);
                continue;
            }
        };
        for run in 0..APP_WRITE_RUNS {
            w.runs += 1;
            for (n, (ty, expr)) in p.params.iter_mut().enumerate() {
                if !declared.contains_key(&(n + 1)) {
                    *expr = param_value(c, types, ty, run)?;
                }
            }
            match replay::execute(c, &p) {
                Ok(_) => w.succeeded += 1,
                Err((step, e)) => w
                    .failures
                    .push(format!("{step}: {}", crate::errors::one_line(&e))),
            }
        }
        out.push(w);
    }
    Ok(out)
}

/// An SQL expression for a parameter of type `ty` (as `regtype` spells
/// it): the first non-NULL family of the type that casts, at an index
/// far from the bulk rows' (a random one, so repeated runs do not collide
/// on UNIQUE keys).
pub(super) fn param_value(
    c: &mut Client,
    types: &mut TypeCache,
    ty: &str,
    run: usize,
) -> Result<String, postgres::Error> {
    let oid: Option<u32> = c.query_one("SELECT to_regtype($1)::oid", &[&ty])?.get(0);
    let Some(oid) = oid else {
        return Ok("NULL".into());
    };
    let info = types.get(c, oid)?;
    let index = format!("{} + floor(random() * 1000000000)::bigint", run + 1);
    for f in families(&info, -1, "param", &Literals::default(), 2_000_000_000) {
        let expr = format!("({})::{ty}", at(&f.sql, &index));
        match c.query_one(&format!("SELECT ({expr}) IS NOT NULL"), &[]) {
            Ok(row) if row.get::<_, Option<bool>>(0) == Some(true) => return Ok(expr),
            Ok(_) => {}
            Err(e) if e.as_db_error().is_some() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(replay::generated_value(ty).to_string())
}

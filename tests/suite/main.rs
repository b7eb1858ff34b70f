//! The integration suite: real PostgreSQL through the product's own sandbox.
//!
//! One server for the run (dropped at the end, so nothing is left behind),
//! a fresh database per test, tests in parallel. Each area registers its
//! tests in its own module.

mod capture;
mod check;
mod cleanup;
mod common;
mod dao;
mod first_contact;
mod flyway_callbacks;
mod frameworks;
mod gate;
mod generate;
mod journal_layouts;
mod layouts;
mod migrate;
mod no_transaction;
mod plan;
mod project;
mod readers;
mod report;
mod roles;
mod sandbox;
mod schemas;
mod target;
mod untrusted;
mod verdicts;
mod verify;

use std::sync::Arc;

use libtest_mimic::Arguments;

fn main() {
    // The DAO crash test re-executes this binary as its child process.
    dao::run_child_if_requested();
    let mut args = Arguments::from_args();
    // Twice as many tests as cores (unless --test-threads says): a test
    // spends much of its time waiting (on the server, on lock timeouts,
    // on a migration's pg_sleep), which another test's work fills. On the
    // 2-core CI machine: 653 s for the suite instead of 718 s.
    if args.test_threads.is_none() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        args.test_threads = Some(2 * cores);
    }
    let env = Arc::new(common::TestEnv::start());
    let mut trials = Vec::new();
    trials.extend(sandbox::tests(&env));
    trials.extend(verify::tests(&env));
    trials.extend(migrate::tests(&env));
    trials.extend(dao::tests(&env));
    trials.extend(check::tests(&env));
    trials.extend(target::tests(&env));
    trials.extend(generate::tests(&env));
    trials.extend(project::tests(&env));
    trials.extend(no_transaction::tests(&env));
    trials.extend(verdicts::tests(&env));
    trials.extend(untrusted::tests(&env));
    trials.extend(cleanup::tests(&env));
    trials.extend(schemas::tests(&env));
    trials.extend(roles::tests(&env));
    trials.extend(plan::tests(&env));
    trials.extend(layouts::tests(&env));
    trials.extend(journal_layouts::tests(&env));
    trials.extend(report::tests(&env));
    trials.extend(readers::tests(&env));
    trials.extend(capture::tests(&env));
    trials.extend(gate::tests(&env));
    trials.extend(first_contact::tests(&env));
    trials.extend(flyway_callbacks::tests(&env));
    trials.extend(frameworks::tests(&env));
    trials.retain(|t| common::in_scope(t.name()));
    let trials = common::slowest_first(trials);
    let conclusion = libtest_mimic::run(&args, trials);
    common::print_slowest(10);
    // Drop the shared server before exiting (exit skips destructors).
    drop(env);
    conclusion.exit();
}

//! SIGINT and SIGTERM: a stopped run removes its sandboxes before it exits.

/// SIGINT and SIGTERM stop the run: a thread of their own removes every
/// sandbox this process holds (`sandbox::cleanup::drop_all`) and exits
/// with 128 + the signal's number (130, 143), as a shell reports a process
/// the signal killed. A second signal exits at once, cleanup or not.
/// Meanwhile the main thread, whose sandbox is vanishing under it, neither
/// reports nor exits (see [`wait_if_stopping`]).
pub(crate) fn stop_on_signals() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("cannot handle SIGINT/SIGTERM ({e}); a stopped run may leave its sandbox behind for the next run to remove");
            return;
        }
    };
    std::thread::spawn(move || {
        let mut first = true;
        for signo in signals.forever() {
            if !first {
                std::process::exit(128 + signo);
            }
            first = false;
            std::thread::spawn(move || {
                let name = if signo == SIGINT { "SIGINT" } else { "SIGTERM" };
                let dropped = rollsafe::sandbox::cleanup::drop_all();
                eprintln!(
                    "rollsafe: stopped by {name}; removed {} sandbox resource(s) in {:.1?}",
                    dropped.total(),
                    dropped.took
                );
                std::process::exit(128 + signo);
            });
        }
    });
    // A thread that fails because its sandbox was just removed must not
    // end the process (a panicking main thread would exit before cleanup).
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        wait_if_stopping();
        report_panic(info)
    }));
}

/// Once a signal is being handled, blocks for good: the signal thread
/// exits the process when its cleanup is done.
pub(crate) fn wait_if_stopping() {
    while rollsafe::sandbox::cleanup::stopping() {
        std::thread::park();
    }
}

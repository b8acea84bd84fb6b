//! `RCB_STATS`: the process counters (`counters.rs`), printed as a short table when the library is
//! unloaded — at process exit, or at `dlclose` — so that a user can see what the library did
//! (captures, instantiations, in-place updates, fallbacks by reason) without calling
//! `rcb_counters_get`, and the update budget the command buffers got (`cmdbuf/budget.rs`).
//!
//! The report runs from the library's destructor (`.fini_array`), not from `atexit`: it then
//! runs exactly once per loaded copy, also when a program unloads the library before it exits,
//! and never after the library's code is gone. It reads only atomics and the environment, and
//! writes with plain `write` calls, so it is safe however late it runs; `_exit` and a crash skip
//! it. A forked child that exits prints its own report (the parent's counts up to the fork
//! included).

use crate::config::{self, StatsTarget};
use std::io::Write;

/// Runs [`report`] when the library is unloaded.
#[used]
#[unsafe(link_section = ".fini_array")]
static REPORT_AT_UNLOAD: extern "C" fn() = report_at_unload;

extern "C" fn report_at_unload() {
    // Nothing may unwind out of a destructor the C runtime calls; a failure to write is lost.
    let _ = std::panic::catch_unwind(report);
}

fn report() {
    let Some(target) = config::stats_target(std::env::var_os(config::STATS_VAR).as_deref()) else { return };
    let budget = crate::cmdbuf::budget_settled().map(|s| format!("  {:<28} {}\n", "update budget", s.describe())).unwrap_or_default();
    let text = format!(
        "rocm_cmdbuf {} (process {}), what the library did:\n{}{budget}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        crate::counters::totals().table()
    );
    let _ = match target {
        StatsTarget::Stderr => std::io::stderr().write_all(text.as_bytes()),
        StatsTarget::File(path) => {
            std::fs::OpenOptions::new().create(true).append(true).open(path).and_then(|mut f| f.write_all(text.as_bytes()))
        }
    };
}

//! `rcb-bench`: the performance targets of the design, each measured against its baseline in
//! the same run. `rcb-bench [--quick] [SCENARIO...]`; no scenario runs them all, except those
//! that run only when named (`soak`, minutes long; `update-loop`, a steady loop of updates to
//! profile).

mod backend;
mod budget;
mod correlator;
mod counters;
mod cublas;
mod faults;
mod flatten;
mod kernels;
mod setter_timer;
mod soak;
mod streams;
mod table;
mod trace_cache;
mod update;
mod vmm;
mod warm;

use rocm_cmdbuf::runtime::Runtime;

/// A scenario prints its own tables; `quick` shrinks sizes for smoke runs.
type Scenario = fn(&'static dyn Runtime, bool) -> Result<(), String>;

const SCENARIOS: &[(&str, Scenario)] = &[
    ("update", update::run),
    ("streams", streams::run),
    ("vmm", vmm::run),
    ("flatten", flatten::run),
    ("trace-cache", trace_cache::run),
    ("budget", budget::run),
    ("correlator", correlator::run),
];

/// Scenarios that run only when named.
const ON_REQUEST: &[(&str, Scenario)] =
    &[("soak", soak::run), ("update-loop", update::run_loop), ("update-after-writes", update::run_after_writes)];

fn main() {
    backend::probe_if_asked();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let wanted: Vec<&str> = args.iter().filter(|a| !a.starts_with("--")).map(String::as_str).collect();
    let known = || SCENARIOS.iter().chain(ON_REQUEST);
    if let Some(unknown) = wanted.iter().find(|w| !known().any(|(n, _)| n == *w)) {
        let names: Vec<&str> = known().map(|(n, _)| *n).collect();
        eprintln!("unknown scenario {unknown:?}; known: {}", names.join(", "));
        std::process::exit(2);
    }
    let rt = match backend::load() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rcb-bench: {e}");
            std::process::exit(1);
        }
    };
    let info = rt.info();
    println!("# rcb-bench on {} ({}, version {}, {} device(s))", info.backend.name(), info.library, info.version, info.device_count);
    let mut failed = false;
    let chosen: Vec<&(&str, Scenario)> =
        if wanted.is_empty() { SCENARIOS.iter().collect() } else { known().filter(|(n, _)| wanted.contains(n)).collect() };
    // A stand-in that skips the kernel-node setters leaves every graph as recorded: only the
    // loop that never launches one may run on it.
    if setter_timer::SetterTimer::find().is_some_and(|t| t.skipping)
        && let Some((name, _)) = chosen.iter().find(|(n, _)| *n != "update-loop")
    {
        eprintln!(
            "rcb-bench: the runtime's kernel-node setters are skipped (RCB_SETTER_TIMER_SKIP=1), which only update-loop can run on, not {name}"
        );
        std::process::exit(2);
    }
    for (name, run) in chosen {
        if let Err(e) = run(rt, quick) {
            eprintln!("scenario {name} failed: {e}");
            failed = true;
        }
    }
    match counters::get(std::ptr::null()) {
        Ok(c) => counters::print("\nlibrary counters, whole run", &c),
        Err(e) => eprintln!("{e}"),
    }
    std::process::exit(i32::from(failed));
}

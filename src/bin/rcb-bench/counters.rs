//! The library's counters (`rcb_counters_get`) as the command-line tools print them: what a run
//! asked of the GPU runtime, each fallback with its reason.

use rocm_cmdbuf::ffi::*;
use std::ffi::CStr;

/// The counters of `cb`, or the process totals when it is null.
pub fn get(cb: *const rcb_cmdbuf) -> Result<rcb_counters, String> {
    let mut c = rcb_counters::default();
    // SAFETY: null or a live handle, and a writable struct of that size.
    match unsafe { rcb_counters_get(cb, &mut c) } {
        RCB_OK => Ok(c),
        s => Err(format!("rcb_counters_get: status {s}")),
    }
}

/// One line per counter, then one per fallback reason that occurred.
pub fn print(title: &str, c: &rcb_counters) {
    println!(
        "{title}: {} stream captures, {} instantiations ({} re-instantiations, {} old executables retired), {} executable-node parameter pushes (about {} KiB of kernel-argument staging), {} address updates, {} trace-cache relocations, {} trace-cache hits, {} fallbacks",
        c.captures,
        c.instantiations,
        c.reinstantiations,
        c.retired_execs,
        c.exec_param_pushes,
        c.exec_param_push_bytes / 1024,
        c.address_updates,
        c.relocations,
        c.trace_hits,
        c.fallbacks_total
    );
    for (reason, &n) in c.fallbacks.iter().enumerate().filter(|(_, n)| **n > 0) {
        let name = rcb_fallback_reason_name(reason as u32);
        // SAFETY: a static NUL-terminated name, or null for a number that is no reason.
        let name = if name.is_null() { format!("reason {reason}") } else { unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned() };
        println!("  fallback {name}: {n}");
    }
}

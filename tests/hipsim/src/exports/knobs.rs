use std::ffi::c_char;

use crate::event::EVENTS;
use crate::ffi::{counted, cstr};
use crate::module::MODULES;
use crate::stream::STREAMS;
use crate::{exec, graph, kernarg, knobs, memory, user_object};

/// Calls with an unreadable name count as zero rather than failing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipsimGetCallCount(name: *const c_char) -> u64 {
    // SAFETY: the C caller's name is null (counts as zero) or NUL-terminated, as the hipsim
    // header requires.
    counted("hipsimGetCallCount", 0, || unsafe { cstr(name) }.map_or(0, |n| knobs::get().call_count(n)))
}

#[unsafe(no_mangle)]
pub extern "C" fn hipsimResetCallCounts() {
    counted("hipsimResetCallCounts", (), || knobs::get().reset_counts())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipsimLiveCount(kind: *const c_char) -> u64 {
    counted("hipsimLiveCount", u64::MAX, || {
        // SAFETY: the C caller's name is null (refused) or NUL-terminated, as the hipsim header
        // requires.
        let Ok(kind) = (unsafe { cstr(kind) }) else { return u64::MAX };
        let n = match kind {
            "alloc" => memory::lock().live_allocs(),
            "physical" => memory::lock().vmm.live_physical(),
            "reservation" => memory::lock().vmm.live_reservations(),
            "mapping" => memory::lock().vmm.live_mappings(),
            "stream" => STREAMS.len().saturating_sub(crate::stream::PER_THREAD_MADE.load(std::sync::atomic::Ordering::Relaxed)),
            "event" => EVENTS.len(),
            "graph" => graph::lock().live_visible(),
            "exec" => exec::execs().len(),
            "module" => MODULES.len(),
            "kernarg" => return kernarg::used(),
            "kernarg_peak" => return kernarg::peak(),
            "exec_destroyed_in_flight" => return exec::destroyed_in_flight(),
            "user_object" => user_object::OBJECTS.len(),
            _ => return u64::MAX,
        };
        n as u64
    })
}

/// # Safety
/// `spec` is null or a NUL-terminated string.
unsafe fn set(name: &str, spec: *const c_char, apply: fn(&knobs::Knobs, &str) -> Result<(), ()>) -> i32 {
    // SAFETY: per the contract.
    counted(name, -1, || match unsafe { cstr(spec) } {
        Ok(s) if apply(knobs::get(), s).is_ok() => 0,
        _ => -1,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipsimSetFaults(spec: *const c_char) -> i32 {
    // SAFETY: the C caller's spec is null (refused) or NUL-terminated, as the hipsim header requires.
    unsafe { set("hipsimSetFaults", spec, knobs::Knobs::set_faults) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipsimSetQuirks(spec: *const c_char) -> i32 {
    // SAFETY: the C caller's spec is null (refused) or NUL-terminated, as the hipsim header requires.
    unsafe { set("hipsimSetQuirks", spec, knobs::Knobs::set_quirks) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipsimSetLatency(spec: *const c_char) -> i32 {
    // SAFETY: the C caller's spec is null (refused) or NUL-terminated, as the hipsim header requires.
    unsafe { set("hipsimSetLatency", spec, knobs::Knobs::set_latency) }
}

/// Sets every device's kernel-argument staging pool to `bytes` (`HIPSIM_KERNARG_POOL`) and
/// restarts `hipsimLiveCount("kernarg_peak")` from the bytes in use now.
#[unsafe(no_mangle)]
pub extern "C" fn hipsimSetKernargPool(bytes: u64) {
    counted("hipsimSetKernargPool", (), || kernarg::set_limit(bytes))
}

//! Device enumeration and the per-thread current device.

use std::cell::Cell;

use crate::error::{HipResult, INVALID_DEVICE, NO_DEVICE};
use crate::knobs;

thread_local! {
    static CURRENT: Cell<i32> = const { Cell::new(0) };
}

pub fn count() -> i32 {
    knobs::get().devices
}

pub fn check(d: i32) -> HipResult<i32> {
    match count() {
        0 => Err(NO_DEVICE),
        n if (0..n).contains(&d) => Ok(d),
        _ => Err(INVALID_DEVICE),
    }
}

pub fn current() -> HipResult<i32> {
    check(CURRENT.with(Cell::get))
}

pub fn set_current(d: i32) -> HipResult {
    let d = check(d)?;
    CURRENT.with(|c| c.set(d));
    Ok(())
}

/// ROCm 6.x hipDeviceAttribute_t numbering (identical to 5.2 up to 88; 89 added in 5.3).
pub fn attribute(attr: i32) -> Option<i32> {
    Some(match attr {
        3 => 1,     // CanMapHostMemory
        8 => 1,     // ConcurrentKernels
        23 => 9,    // ComputeCapabilityMajor (gfx942 reports 9.4)
        61 => 4,    // ComputeCapabilityMinor
        56 => 1024, // MaxThreadsPerBlock
        63 => 304,  // MultiprocessorCount
        78 => 1,    // StreamPrioritiesSupported
        85 => 1,    // UnifiedAddressing
        87 => 64,   // WarpSize
        88 => 0,    // MemoryPoolsSupported
        89 => 1,    // VirtualMemoryManagementSupported
        10013 => 1, // CanUseStreamWaitValue
        _ => return None,
    })
}

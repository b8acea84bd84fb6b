//! Asking the CPU for a cache line before it is needed, where a loop knows its next addresses
//! long before it reads them and a miss to memory would otherwise stall each step.

/// Starts loading the cache line of `p` into every cache level. Never faults, so `p` may point
/// anywhere (compute it with `wrapping_add`); a no-op on targets without the instruction.
#[inline(always)]
pub fn line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch changes no state the program can observe and never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

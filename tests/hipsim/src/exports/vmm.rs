use std::ffi::c_void;

use crate::abi::{MEM_ALLOCATION_PINNED, MEM_LOCATION_DEVICE, MemAccessDesc, MemAllocationProp};
use crate::device;
use crate::error::{HipResult, INVALID_VALUE};
use crate::ffi::{hip_export, out, slice};
use crate::memory;
use crate::vmm::GRANULARITY;

/// # Safety
/// `p` is null or points at a readable `hipMemAllocationProp`.
unsafe fn check_prop(p: *const MemAllocationProp) -> HipResult {
    // SAFETY: per the contract.
    let p = unsafe { p.as_ref() }.ok_or(INVALID_VALUE)?;
    if p.kind != MEM_ALLOCATION_PINNED || p.location.kind != MEM_LOCATION_DEVICE {
        return Err(INVALID_VALUE);
    }
    device::check(p.location.id).map_err(|_| INVALID_VALUE).map(drop)
}

hip_export! {
    fn hipMemGetAllocationGranularity(g: *mut usize, p: *const MemAllocationProp, option: i32) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `check_prop`).
        unsafe { check_prop(p) }?;
        if !(0..=1).contains(&option) {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(g, GRANULARITY as usize) }
    }

    fn hipMemCreate(h: *mut usize, size: usize, p: *const MemAllocationProp, flags: u64) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `check_prop`).
        unsafe { check_prop(p) }?;
        if h.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(h, memory::lock().vmm.create(size as u64)?) }
    }

    fn hipMemRelease(h: usize) {
        memory::lock().vmm.release(h)
    }

    fn hipMemAddressReserve(ptr: *mut *mut c_void, size: usize, align: usize, _addr: *mut c_void, _flags: u64) {
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(ptr, memory::lock().vmm.reserve(size as u64, align as u64)? as *mut c_void) }
    }

    fn hipMemAddressFree(ptr: *mut c_void, size: usize) {
        memory::lock().vmm.free(ptr as u64, size as u64)
    }

    fn hipMemMap(ptr: *mut c_void, size: usize, offset: usize, h: usize, flags: u64) {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        memory::lock().vmm.map(ptr as u64, size as u64, offset as u64, h)
    }

    fn hipMemUnmap(ptr: *mut c_void, size: usize) {
        memory::lock().vmm.unmap(ptr as u64, size as u64)
    }

    fn hipMemSetAccess(ptr: *mut c_void, size: usize, desc: *const MemAccessDesc, count: usize) {
        // SAFETY: the C caller's array is null with a zero count or has that many entries, as HIP requires.
        let descs = unsafe { slice(desc, count) }?;
        if descs.is_empty() {
            return Err(INVALID_VALUE);
        }
        let mut grants = Vec::with_capacity(descs.len());
        for d in descs {
            if d.location.kind != MEM_LOCATION_DEVICE {
                return Err(INVALID_VALUE);
            }
            grants.push((device::check(d.location.id).map_err(|_| INVALID_VALUE)?, d.flags));
        }
        memory::lock().vmm.set_access(ptr as u64, size as u64, &grants)
    }
}

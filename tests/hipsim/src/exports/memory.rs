use std::ffi::c_void;

use crate::capture;
use crate::device;
use crate::error::INVALID_VALUE;
use crate::ffi::{hip_export, out};
use crate::graph::{MemsetOp, Op};
use crate::memory;
use crate::stream::{self, STREAMS, resolve};

const SIGNAL_MEMORY: u32 = 2;

/// Synchronous copies run on the legacy default stream.
fn copy_sync(dst: *mut c_void, src: *const c_void, n: usize, kind: i32) -> crate::error::HipResult {
    let dev = device::current()?;
    stream::drain_blocking(dev);
    memory::copy(dev, dst as u64, src as u64, n, kind)
}

fn copy_async(dst: *mut c_void, src: *const c_void, n: usize, kind: i32, s: usize) -> crate::error::HipResult {
    if !(0..=4).contains(&kind) {
        return Err(INVALID_VALUE);
    }
    capture::submit(&resolve(s)?, Op::Memcpy { dst: dst as u64, src: src as u64, count: n, kind })
}

fn set_sync(dst: *mut c_void, value: u32, elem: u32, count: usize) -> crate::error::HipResult {
    let dev = device::current()?;
    stream::drain_blocking(dev);
    memory::memset(dev, dst as u64, value, elem, count, 1, 0)
}

fn set_async(dst: *mut c_void, value: u32, elem: u32, count: usize, s: usize) -> crate::error::HipResult {
    let op = MemsetOp { dst: dst as u64, elem, width: count, height: 1, pitch: 0, value };
    capture::submit(&resolve(s)?, Op::Memset(op))
}

hip_export! {
    fn hipMalloc(p: *mut *mut c_void, size: usize) {
        if p.is_null() {
            return Err(INVALID_VALUE);
        }
        capture::check_unsafe_call()?;
        let dev = device::current()?;
        let addr = if size == 0 { 0 } else { memory::lock().malloc(dev, size)? };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(p, addr as *mut c_void) }
    }

    fn hipMemGetInfo(free: *mut usize, total: *mut usize) {
        let dev = device::current()?;
        let used = memory::lock().allocated(dev) + crate::kernarg::memory_on(dev);
        // SAFETY: the C caller's out-pointers are null (refused) or writable, as HIP requires.
        unsafe { out(free, memory::CAPACITY.saturating_sub(used) as usize) }?;
        // SAFETY: as above.
        unsafe { out(total, memory::CAPACITY as usize) }
    }

    fn hipExtMallocWithFlags(p: *mut *mut c_void, size: usize, flags: u32) {
        if p.is_null() {
            return Err(INVALID_VALUE);
        }
        let dev = device::current()?;
        let addr = if flags == SIGNAL_MEMORY {
            if size != 8 {
                return Err(INVALID_VALUE);
            }
            memory::lock().host_alloc(8, true)?
        } else if size == 0 {
            0
        } else {
            memory::lock().malloc(dev, size)?
        };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(p, addr as *mut c_void) }
    }

    fn hipFree(p: *mut c_void) {
        if p.is_null() {
            return Ok(());
        }
        // Like the real runtime, freeing waits for queued work that may still use the memory.
        STREAMS.values().iter().for_each(|s| s.wait_idle());
        memory::lock().free(p as u64)
    }

    fn hipHostMalloc(p: *mut *mut c_void, size: usize, _flags: u32) {
        if p.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = if size == 0 { 0 } else { memory::lock().host_alloc(size, false)? };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(p, addr as *mut c_void) }
    }

    fn hipHostFree(p: *mut c_void) {
        if p.is_null() {
            return Ok(());
        }
        STREAMS.values().iter().for_each(|s| s.wait_idle());
        memory::lock().host_free(p as u64)
    }

    fn hipHostGetDevicePointer(dev_ptr: *mut *mut c_void, host: *mut c_void, _flags: u32) {
        if !memory::lock().is_host_registered(host as u64) {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(dev_ptr, host) }
    }

    fn hipMemcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: i32) {
        copy_sync(dst, src, n, kind)
    }

    fn hipMemcpyHtoD(dst: *mut c_void, src: *mut c_void, n: usize) {
        copy_sync(dst, src, n, 1)
    }

    fn hipMemcpyDtoH(dst: *mut c_void, src: *mut c_void, n: usize) {
        copy_sync(dst, src, n, 2)
    }

    fn hipMemcpyDtoD(dst: *mut c_void, src: *mut c_void, n: usize) {
        copy_sync(dst, src, n, 3)
    }

    fn hipMemcpyAsync(dst: *mut c_void, src: *const c_void, n: usize, kind: i32, s: usize) {
        copy_async(dst, src, n, kind, s)
    }

    fn hipMemcpyHtoDAsync(dst: *mut c_void, src: *mut c_void, n: usize, s: usize) {
        copy_async(dst, src, n, 1, s)
    }

    fn hipMemcpyDtoHAsync(dst: *mut c_void, src: *mut c_void, n: usize, s: usize) {
        copy_async(dst, src, n, 2, s)
    }

    fn hipMemcpyDtoDAsync(dst: *mut c_void, src: *mut c_void, n: usize, s: usize) {
        copy_async(dst, src, n, 3, s)
    }

    fn hipMemset(dst: *mut c_void, value: i32, n: usize) {
        set_sync(dst, value as u32, 1, n)
    }

    fn hipMemsetD8(dst: *mut c_void, value: u8, count: usize) {
        set_sync(dst, u32::from(value), 1, count)
    }

    fn hipMemsetD32(dst: *mut c_void, value: i32, count: usize) {
        set_sync(dst, value as u32, 4, count)
    }

    fn hipMemsetAsync(dst: *mut c_void, value: i32, n: usize, s: usize) {
        set_async(dst, value as u32, 1, n, s)
    }

    fn hipMemsetD32Async(dst: *mut c_void, value: i32, count: usize, s: usize) {
        set_async(dst, value as u32, 4, count, s)
    }
}

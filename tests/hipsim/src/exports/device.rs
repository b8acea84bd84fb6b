use std::ffi::c_char;

use crate::device;
use crate::error::{self, INVALID_VALUE, NO_DEVICE};
use crate::ffi::{counted, hip_export, out, out_opt};
use crate::knobs;
use crate::stream;

hip_export! {
    fn hipInit(_flags: u32) {
        Ok(())
    }

    fn hipRuntimeGetVersion(v: *mut i32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(v, knobs::get().version) }
    }

    fn hipDriverGetVersion(v: *mut i32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(v, knobs::get().version) }
    }

    fn hipGetDeviceCount(count: *mut i32) {
        let n = device::count();
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(count, n) }?;
        if n == 0 { Err(NO_DEVICE) } else { Ok(()) }
    }

    fn hipSetDevice(d: i32) {
        device::set_current(d)
    }

    fn hipGetDevice(d: *mut i32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(d, device::current()?) }
    }

    fn hipDeviceGetAttribute(value: *mut i32, attr: i32, d: i32) {
        device::check(d)?;
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(value, device::attribute(attr).ok_or(INVALID_VALUE)?) }
    }

    fn hipDeviceGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) {
        // SAFETY: the C caller's out-pointer is null (skipped) or writable, as HIP requires.
        unsafe { out_opt(least, 1) };
        // SAFETY: the C caller's out-pointer is null (skipped) or writable, as HIP requires.
        unsafe { out_opt(greatest, -1) };
        Ok(())
    }

    fn hipDeviceCanAccessPeer(can: *mut i32, d: i32, peer: i32) {
        device::check(d)?;
        device::check(peer)?;
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(can, i32::from(d != peer)) }
    }

    fn hipDeviceSynchronize() {
        stream::sync_device(device::current()?)
    }

    // Models only what a reset does to streams: the current device's are destroyed.
    fn hipDeviceReset() {
        stream::reset_device(device::current()?);
        Ok(())
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorName(code: i32) -> *const c_char {
    counted("hipGetErrorName", c"hipErrorUnknown".as_ptr(), || error::name(code).as_ptr().cast())
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorString(code: i32) -> *const c_char {
    counted("hipGetErrorString", c"unknown error".as_ptr(), || error::description(code).as_ptr().cast())
}

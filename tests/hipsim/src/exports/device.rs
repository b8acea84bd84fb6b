use std::ffi::c_char;

use crate::device;
use crate::error::{self, INVALID_VALUE, NO_DEVICE};
use crate::ffi::{counted, hip_export, out, out_opt};
use crate::knobs;
use crate::stream;

/// `sizeof(hipDeviceProp_tR0600)` and the offset of `gcnArchName` in it (`name` is at 0).
const PROPS_R0600: (usize, usize) = (1472, 1160);
/// The same of the struct before ROCm 6.0, which `hipGetDeviceProperties` keeps in every version.
const PROPS_R0000: (usize, usize) = (792, 396);
/// The device and architecture name.
const ARCH: &[u8] = b"hipsim";

/// Writes properties of `size` bytes, zero but for `name` and `gcnArchName` ("hipsim").
fn device_props(prop: *mut u8, d: i32, (size, arch_offset): (usize, usize)) -> crate::error::HipResult {
    device::check(d)?;
    if prop.is_null() {
        return Err(INVALID_VALUE);
    }
    let mut bytes = vec![0u8; size];
    for offset in [0, arch_offset] {
        bytes[offset..offset + ARCH.len()].copy_from_slice(ARCH);
    }
    // SAFETY: non-null, and a writable struct of this layout per the caller's contract.
    unsafe { prop.copy_from_nonoverlapping(bytes.as_ptr(), size) };
    Ok(())
}

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

    // Only `name` and `gcnArchName` are modelled, both "hipsim", the rest is zero: the
    // architecture name tells the tests and tools to load hipsim's image rather than an AMD code
    // object. The ROCm 6.0+ call and struct (`hipDeviceProp_tR0600`)...
    fn hipGetDevicePropertiesR0600(prop: *mut u8, d: i32) {
        device_props(prop, d, PROPS_R0600)
    }

    // ... and the older one, which every runtime still exports (the library calls it on a
    // runtime reporting a version before 6.0).
    fn hipGetDeviceProperties(prop: *mut u8, d: i32) {
        device_props(prop, d, PROPS_R0000)
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

/// The thread's last error, reset to success; clr's returns it without noting its own result.
#[unsafe(no_mangle)]
pub extern "C" fn hipGetLastError() -> i32 {
    counted("hipGetLastError", error::UNKNOWN, error::take_last)
}

/// The thread's last error, left set (clr's notes it again, which changes nothing).
#[unsafe(no_mangle)]
pub extern "C" fn hipPeekAtLastError() -> i32 {
    counted("hipPeekAtLastError", error::UNKNOWN, error::peek_last)
}

use std::ffi::c_char;

use crate::device;
use crate::error::{self, INVALID_VALUE, NO_DEVICE};
use crate::ffi::{counted, hip_export, out, out_opt};
use crate::stream;

/// ROCm 6.2 (major * 10^7 + minor * 10^5 + patch).
const VERSION: i32 = 60241134;

/// `sizeof(hipDeviceProp_tR0600)` and the offsets of `name` and `gcnArchName` in it.
const PROPS_R0600_SIZE: usize = 1472;
const PROPS_NAME: usize = 0;
const PROPS_ARCH_NAME: usize = 1160;
/// The device and architecture name.
const ARCH: &[u8] = b"hipsim";

hip_export! {
    fn hipInit(_flags: u32) {
        Ok(())
    }

    fn hipRuntimeGetVersion(v: *mut i32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(v, VERSION) }
    }

    fn hipDriverGetVersion(v: *mut i32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(v, VERSION) }
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

    // The ROCm 6.x properties (`hipDeviceProp_tR0600`, 1472 bytes): only `name` (offset 0) and
    // `gcnArchName` (offset 1160) are modelled, both "hipsim", the rest is zero. The architecture
    // name tells the tests and tools to load hipsim's image rather than an AMD code object.
    fn hipGetDevicePropertiesR0600(prop: *mut u8, d: i32) {
        device::check(d)?;
        if prop.is_null() {
            return Err(INVALID_VALUE);
        }
        let mut bytes = [0u8; PROPS_R0600_SIZE];
        for offset in [PROPS_NAME, PROPS_ARCH_NAME] {
            bytes[offset..offset + ARCH.len()].copy_from_slice(ARCH);
        }
        // SAFETY: non-null, and a writable hipDeviceProp_tR0600 per the contract.
        unsafe { prop.copy_from_nonoverlapping(bytes.as_ptr(), bytes.len()) };
        Ok(())
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

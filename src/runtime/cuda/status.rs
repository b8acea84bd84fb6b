//! `CUresult` to [`Error`], with the driver's own name and description in the message.

use super::api::{Core, R};
use crate::error::{Error, ErrorKind, Result};
use std::ffi::{CStr, c_char};
use std::ptr::null;

pub const SUCCESS: R = 0;
pub const ERROR_INVALID_VALUE: R = 1;
pub const ERROR_NOT_READY: R = 600;

pub fn check(core: &Core, call: &'static str, rc: R) -> Result<()> {
    if rc == SUCCESS {
        return Ok(());
    }
    let (mut name, mut desc): (*const c_char, *const c_char) = (null(), null());
    // SAFETY: valid out-pointers; the driver returns static strings or leaves them null.
    unsafe {
        (core.cuGetErrorName)(rc, &mut name);
        (core.cuGetErrorString)(rc, &mut desc);
    }
    Err(Error::new(kind(rc), format!("{call} failed: {} ({rc}): {}", text(name), text(desc))))
}

pub fn kind(rc: R) -> ErrorKind {
    match rc {
        2 => ErrorKind::OutOfMemory,
        100 => ErrorKind::NoDevice,
        801 => ErrorKind::Unsupported,
        _ => ErrorKind::Runtime,
    }
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::from("?")
    } else {
        // SAFETY: non-null strings from cuGetErrorName/String are static and NUL-terminated.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

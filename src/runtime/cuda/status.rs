//! `CUresult` to [`Error`], with the driver's own name and description in the message.

use super::api::{Core, R};
use crate::error::{Error, Result};
use crate::runtime::common;
use std::ffi::c_char;
use std::ptr::null;

pub const SUCCESS: R = 0;
pub const ERROR_INVALID_VALUE: R = 1;
pub const ERROR_NOT_READY: R = 600;

#[inline]
pub fn check(core: &Core, call: &'static str, rc: R) -> Result<()> {
    if rc == SUCCESS { Ok(()) } else { Err(error(core, call, rc)) }
}

/// `check`'s error, kept out of line.
#[cold]
fn error(core: &Core, call: &'static str, rc: R) -> Error {
    let (mut name, mut desc): (*const c_char, *const c_char) = (null(), null());
    // SAFETY: valid out-pointers; the driver returns static strings or leaves them null, which
    // is what `text` accepts.
    let (name, desc) = unsafe {
        (core.cuGetErrorName)(rc, &mut name);
        (core.cuGetErrorString)(rc, &mut desc);
        (common::text(name), common::text(desc))
    };
    common::error(call, rc, &name, &desc)
}

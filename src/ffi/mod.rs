//! The C ABI: status codes, the panic boundary, argument checks and one module per C object.
//! Nothing outside this module deals with raw pointers from C or with status codes.

// C names (`rcb_status`, `rcb_cmdbuf`) are spelled exactly as in the header.
#![allow(non_camel_case_types)]

mod cmdbuf;
mod correlator;
mod counters;
mod handle;
mod runtime;
mod status;
mod stream;
mod trace_cache;
mod vmm_pool;

pub use cmdbuf::*;
pub use correlator::*;
pub use counters::*;
pub use runtime::*;
pub use status::*;
pub use stream::*;
pub use trace_cache::*;
pub use vmm_pool::*;

use handle::{Handle, Live, live, register, take, unlocked, unregister};

use crate::error::{Error, ErrorKind, Result};
use std::any::Any;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs the body of a fallible export: sets up logging, turns an error into its status code and
/// last-error message, and turns a panic into `RCB_STATUS_PANIC` so it never reaches the host.
pub(crate) fn boundary(f: impl FnOnce() -> Result<()>) -> rcb_status {
    crate::logging::init();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            clear_last_error();
            RCB_OK
        }
        Ok(Err(e)) => {
            log::debug!("{e}");
            set_last_error(&e.message);
            status::code(e.kind)
        }
        Err(payload) => {
            let message = format!("internal panic: {}", panic_text(payload.as_ref()));
            log::error!("{message}");
            set_last_error(&message);
            RCB_STATUS_PANIC
        }
    }
}

/// Runs the body of an export that cannot fail; a panic yields `fallback`.
pub(crate) fn boundary_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

fn panic_text(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// A required input pointer, borrowed for the call.
///
/// # Safety
/// `p` must be NULL or point to a valid `T` for the duration of the call.
pub(crate) unsafe fn arg_ref<'a, T>(p: *const T, name: &str) -> Result<&'a T> {
    // SAFETY: non-null checked; validity is the caller's promise.
    unsafe { p.as_ref() }.ok_or_else(|| null_argument(name))
}

/// An input array of `n` elements; NULL is allowed when `n` is 0. `max` rejects absurd counts
/// before anything is read.
///
/// # Safety
/// `p` must be NULL or point to `n` valid elements for the duration of the call.
pub(crate) unsafe fn arg_slice<'a, T>(p: *const T, n: usize, name: &str, max: usize) -> Result<&'a [T]> {
    if n > max {
        return Err(Error::invalid_argument(format!("{name}: count {n} exceeds the limit of {max}")));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null_argument(name));
    }
    // SAFETY: non-null, count checked; validity is the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Checks an output pointer up front, so nothing is done when it is NULL; write it with
/// [`write_out`] only once the call has succeeded.
pub(crate) fn arg_out<T>(p: *mut T, name: &str) -> Result<*mut T> {
    if p.is_null() { Err(null_argument(name)) } else { Ok(p) }
}

/// # Safety
/// `p` came from [`arg_out`] and points to writable memory for a `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, value: T) {
    // SAFETY: see above; `write` does not drop the uninitialised old value.
    unsafe { p.write(value) }
}

/// Copies `text` into the C buffer `buf` of `len` bytes as a NUL-terminated string: at most
/// `len - 1` bytes, never splitting a UTF-8 character. Nothing is written when `len` is 0.
///
/// # Safety
/// `buf` must point to at least `len` writable bytes (it may be NULL when `len` is 0).
pub(crate) unsafe fn write_c_str(text: &str, buf: *mut c_char, len: usize) {
    let Some(room) = len.checked_sub(1) else { return };
    let mut n = text.len().min(room);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller promises `len` writable bytes at `buf`, and n < len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
}

fn null_argument(name: &str) -> Error {
    Error::new(ErrorKind::NullArgument, format!("argument `{name}` is NULL"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_status_with_its_message() {
        let status = boundary(|| panic!("deliberate test panic {}", 42));
        assert_eq!(status, RCB_STATUS_PANIC);
        let mut buf = [0 as std::ffi::c_char; 128];
        // SAFETY: a writable buffer of the given length.
        unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: the export NUL-terminated the buffer.
        let msg = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert_eq!(msg, "internal panic: deliberate test panic 42");
    }

    #[test]
    fn errors_map_to_codes_and_success_clears_the_message() {
        let status = boundary(|| Err(Error::new(ErrorKind::Timeout, "slot 3 never freed")));
        assert_eq!(status, RCB_STATUS_TIMEOUT);
        // SAFETY: a null buffer with length 0 asks for the length only.
        assert_eq!(unsafe { rcb_last_error_message(std::ptr::null_mut(), 0) }, "slot 3 never freed".len());
        assert_eq!(boundary(|| Ok(())), RCB_OK);
        // SAFETY: as above.
        assert_eq!(unsafe { rcb_last_error_message(std::ptr::null_mut(), 0) }, 0);
    }

    #[test]
    fn argument_checks_name_the_argument() {
        // SAFETY: null is what is being checked; nothing is read.
        let e = unsafe { arg_ref::<u32>(std::ptr::null(), "launch") }.unwrap_err();
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::NullArgument, "argument `launch` is NULL"));
        // SAFETY: null is what is being checked; nothing is read.
        let e = unsafe { arg_slice::<u32>(std::ptr::null(), 3, "deps", 10) }.unwrap_err();
        assert!(e.message.contains("`deps`"));
        // SAFETY: null is what is being checked; nothing is read.
        let e = unsafe { arg_slice::<u32>(std::ptr::null(), 11, "deps", 10) }.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        // SAFETY: a null pointer with a zero count is never read.
        assert!(unsafe { arg_slice::<u32>(std::ptr::null(), 0, "deps", 10) }.unwrap().is_empty());
    }
}

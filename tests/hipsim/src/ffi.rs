//! The C boundary: every hip* export goes through `call`, which counts the call, applies
//! injected faults/latency, turns a Rust panic into hipErrorUnknown and notes the result in the
//! thread's last error.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::{HipResult, UNKNOWN};
use crate::knobs;

pub fn call(name: &str, f: impl FnOnce() -> HipResult) -> i32 {
    let r = guard(Err(UNKNOWN), || {
        knobs::get().enter(name, true)?;
        f()
    });
    let code = r.err().unwrap_or(0);
    crate::error::note(code);
    code
}

/// Runs `f` so that no panic escapes; `on_panic` is what C sees instead.
pub fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Writes through a C out-pointer after a NULL check.
pub unsafe fn out<T>(p: *mut T, v: T) -> HipResult {
    if p.is_null() {
        return Err(crate::error::INVALID_VALUE);
    }
    // SAFETY: non-null, and writable per the contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Writes through an optional C out-pointer; NULL means the caller does not want the value.
pub unsafe fn out_opt<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-null, and writable per the contract.
        unsafe { p.write(v) };
    }
}

/// Declares `#[no_mangle] extern "C" fn name(args) -> hipError_t` whose body returns HipResult.
macro_rules! hip_export {
    ($(fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> i32 {
            crate::ffi::call(stringify!($name), move || -> crate::error::HipResult { $body })
        }
    )*};
}
pub(crate) use hip_export;

/// For the hipsim* test exports: counted, never faulted or delayed, panic-safe.
pub fn counted<T>(name: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    guard(on_panic, || {
        let _ = knobs::get().enter(name, false);
        f()
    })
}

/// Borrows a NUL-terminated C string.
pub unsafe fn cstr<'a>(p: *const std::ffi::c_char) -> HipResult<&'a str> {
    if p.is_null() {
        return Err(crate::error::INVALID_VALUE);
    }
    // SAFETY: non-null, and NUL-terminated per the contract.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_str().map_err(|_| crate::error::INVALID_VALUE)
}

/// Borrows a C array of `n` elements; NULL is allowed only when `n` is zero.
pub unsafe fn slice<'a, T>(p: *const T, n: usize) -> HipResult<&'a [T]> {
    match (p.is_null(), n) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(crate::error::INVALID_VALUE),
        // SAFETY: non-null, with `n` readable entries per the contract.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(p, n) }),
    }
}

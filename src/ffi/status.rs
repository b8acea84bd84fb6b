//! Status codes, the thread's last error, and the two calls that read them.
//!
//! Codes are plain integers (never a C enum the caller could hand back out of range). A number,
//! once given a meaning, is never reused.
//!
//! One rule for handles of every type (`rcb_cmdbuf`, `rcb_trace_cache`, `rcb_vmm_pool`,
//! `rcb_correlator`, and the streams of `rcb_stream_release`): NULL is
//! `RCB_STATUS_NULL_ARGUMENT`, as for any required pointer, except where a function gives NULL a
//! meaning (a `_free` function: a no-op; `rcb_counters_get` and `rcb_counters_reset`: the process
//! totals); a non-NULL handle that is not live is `RCB_STATUS_INVALID_HANDLE`.

use super::{boundary_value, write_c_str};
use crate::error::ErrorKind;
use std::cell::RefCell;
use std::ffi::c_char;

// The version node of each export of this module (abi/librocm_cmdbuf.map, through build.rs).
include!(concat!(env!("OUT_DIR"), "/symbol_versions/status.rs"));

/// The result of every fallible call: `RCB_OK` or one of the `RCB_STATUS_*` codes.
pub type rcb_status = i32;

/// Success.
pub const RCB_OK: rcb_status = 0;
/// A required pointer argument was NULL, a handle included (unless the function gives NULL a
/// meaning, as each `_free` function does: a no-op); the message names the argument.
pub const RCB_STATUS_NULL_ARGUMENT: rcb_status = 1;
/// An argument is out of range or inconsistent (zero or absurd count, bad size, unknown kind).
pub const RCB_STATUS_INVALID_ARGUMENT: rcb_status = 2;
/// A non-NULL handle is not live: never created, already freed, or of another type.
pub const RCB_STATUS_INVALID_HANDLE: rcb_status = 3;
/// The object is not in a state that allows the call (e.g. add after finalize).
pub const RCB_STATUS_INVALID_STATE: rcb_status = 4;
/// A node handle belongs to another command buffer.
pub const RCB_STATUS_FOREIGN_NODE: rcb_status = 5;
/// The GPU runtime or the host ran out of memory.
pub const RCB_STATUS_OUT_OF_MEMORY: rcb_status = 6;
/// No GPU runtime library could be loaded; the message lists every library tried and why.
pub const RCB_STATUS_RUNTIME_UNAVAILABLE: rcb_status = 7;
/// A runtime loaded but sees no GPU device.
pub const RCB_STATUS_NO_DEVICE: rcb_status = 8;
/// The loaded runtime lacks the feature (missing optional symbol, too old a version).
pub const RCB_STATUS_UNSUPPORTED: rcb_status = 9;
/// A GPU runtime call failed; the message names the call and its error.
///
/// From a `_free` function (`rcb_cmdbuf_free`, `rcb_trace_cache_free`, `rcb_vmm_pool_free`) it
/// means: the object WAS released (its handle is no longer live, a second free gives
/// `RCB_STATUS_INVALID_HANDLE`), every runtime object underneath was given back that could be,
/// and the message names each destroy, free, unmap or release that failed; what those calls
/// were for is leaked. A free that cannot release its object at all says so with another status
/// and leaves the handle live (documented per function).
pub const RCB_STATUS_RUNTIME_ERROR: rcb_status = 10;
/// Waiting for the GPU took longer than the configured timeout.
pub const RCB_STATUS_TIMEOUT: rcb_status = 11;
/// An `RCB_*` environment variable is malformed; the message names it.
pub const RCB_STATUS_CONFIG: rcb_status = 12;
/// A caller-supplied callback reported failure.
pub const RCB_STATUS_CALLBACK_FAILED: rcb_status = 13;
/// A bug inside the library was caught at the C boundary; the message holds the panic text.
pub const RCB_STATUS_PANIC: rcb_status = 14;

pub(crate) fn code(kind: ErrorKind) -> rcb_status {
    match kind {
        ErrorKind::NullArgument => RCB_STATUS_NULL_ARGUMENT,
        ErrorKind::InvalidArgument => RCB_STATUS_INVALID_ARGUMENT,
        ErrorKind::InvalidHandle => RCB_STATUS_INVALID_HANDLE,
        ErrorKind::InvalidState => RCB_STATUS_INVALID_STATE,
        ErrorKind::ForeignNode => RCB_STATUS_FOREIGN_NODE,
        ErrorKind::OutOfMemory => RCB_STATUS_OUT_OF_MEMORY,
        ErrorKind::RuntimeUnavailable => RCB_STATUS_RUNTIME_UNAVAILABLE,
        ErrorKind::NoDevice => RCB_STATUS_NO_DEVICE,
        ErrorKind::Unsupported => RCB_STATUS_UNSUPPORTED,
        ErrorKind::Runtime => RCB_STATUS_RUNTIME_ERROR,
        ErrorKind::Timeout => RCB_STATUS_TIMEOUT,
        ErrorKind::Config => RCB_STATUS_CONFIG,
        ErrorKind::CallbackFailed => RCB_STATUS_CALLBACK_FAILED,
        ErrorKind::Panic => RCB_STATUS_PANIC,
    }
}

fn describe(status: rcb_status) -> &'static str {
    match status {
        RCB_OK => "RCB_OK: success\0",
        RCB_STATUS_NULL_ARGUMENT => "RCB_STATUS_NULL_ARGUMENT: a required pointer argument was NULL\0",
        RCB_STATUS_INVALID_ARGUMENT => "RCB_STATUS_INVALID_ARGUMENT: an argument is out of range or inconsistent\0",
        RCB_STATUS_INVALID_HANDLE => "RCB_STATUS_INVALID_HANDLE: the handle is not live (freed, never created, or of another type)\0",
        RCB_STATUS_INVALID_STATE => "RCB_STATUS_INVALID_STATE: the object's state does not allow this call\0",
        RCB_STATUS_FOREIGN_NODE => "RCB_STATUS_FOREIGN_NODE: the node belongs to another command buffer\0",
        RCB_STATUS_OUT_OF_MEMORY => "RCB_STATUS_OUT_OF_MEMORY: out of memory\0",
        RCB_STATUS_RUNTIME_UNAVAILABLE => "RCB_STATUS_RUNTIME_UNAVAILABLE: no GPU runtime library could be loaded\0",
        RCB_STATUS_NO_DEVICE => "RCB_STATUS_NO_DEVICE: the GPU runtime sees no device\0",
        RCB_STATUS_UNSUPPORTED => "RCB_STATUS_UNSUPPORTED: the loaded GPU runtime lacks this feature\0",
        RCB_STATUS_RUNTIME_ERROR => "RCB_STATUS_RUNTIME_ERROR: a GPU runtime call failed\0",
        RCB_STATUS_TIMEOUT => "RCB_STATUS_TIMEOUT: timed out waiting for the GPU\0",
        RCB_STATUS_CONFIG => "RCB_STATUS_CONFIG: an RCB_* environment variable is malformed\0",
        RCB_STATUS_CALLBACK_FAILED => "RCB_STATUS_CALLBACK_FAILED: a callback reported failure\0",
        RCB_STATUS_PANIC => "RCB_STATUS_PANIC: internal error caught at the C boundary\0",
        _ => "unknown rcb_status code\0",
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

// Every access goes through `try_with`: glibc's `exit()` destroys the main thread's
// thread-locals before atexit handlers and C++ static destructors run, and a thread's exit
// destroys them before its pthread key destructors, yet those may still call in. Then there is no
// message to keep: it is dropped, and the call's status still tells what happened.

pub(crate) fn set_last_error(message: &str) {
    let _ = LAST_ERROR.try_with(|m| {
        let mut m = m.borrow_mut();
        m.clear();
        m.push_str(message);
    });
}

pub(crate) fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|m| m.borrow_mut().clear());
}

/// Returns a static, NUL-terminated description of `status` ("unknown rcb_status code" for a
/// number that is not one). The string is owned by the library and valid forever.
///
/// Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn rcb_status_str(status: rcb_status) -> *const c_char {
    boundary_value(c"RCB_STATUS_PANIC".as_ptr(), || describe(status).as_ptr() as *const c_char)
}

/// Copies this thread's last error message into `buf` and returns its full length in bytes
/// (without the terminating NUL).
///
/// Every fallible call sets the message when it fails and clears it when it succeeds, so read it
/// right after the failing call, on the same thread. At most `len - 1` bytes are copied (never
/// splitting a UTF-8 character) and the copy is always NUL-terminated; a return value `>= len`
/// means it was truncated. `buf` may be NULL when `len` is 0, to ask for the length only.
/// `buf` is borrowed for the duration of the call; the caller owns it.
///
/// Thread-safety: any thread; each thread has its own message. A call made after the thread's
/// thread-local storage is destroyed (from an `atexit` handler or a C++ static destructor, which
/// glibc's `exit()` runs after destroying the main thread's thread-locals, or from a pthread key
/// destructor at a thread's exit) keeps no message: it reads as empty (length 0), and the status
/// of the failing call is all there is.
///
/// # Safety
/// `buf` must be NULL or point to at least `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_last_error_message(buf: *mut c_char, len: usize) -> usize {
    boundary_value(0, || {
        let copy = |m: &str| {
            if !buf.is_null() {
                // SAFETY: the caller promises `len` writable bytes at `buf`.
                unsafe { write_c_str(m, buf, len) };
            }
            m.len()
        };
        // Once this thread's thread-locals are gone, its message is the empty one.
        LAST_ERROR.try_with(|m| copy(&m.borrow())).unwrap_or_else(|_| copy(""))
    })
}

/// Returns the library version as a static NUL-terminated string ("MAJOR.MINOR.PATCH"), owned by
/// the library and valid forever.
///
/// Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn rcb_version() -> *const c_char {
    boundary_value(c"?".as_ptr(), || concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn every_kind_has_its_own_code_and_description() {
        use ErrorKind::*;
        let kinds = [
            NullArgument,
            InvalidArgument,
            InvalidHandle,
            InvalidState,
            ForeignNode,
            OutOfMemory,
            RuntimeUnavailable,
            NoDevice,
            Unsupported,
            Runtime,
            Timeout,
            Config,
            CallbackFailed,
            Panic,
        ];
        let mut codes: Vec<_> = kinds.iter().map(|&k| code(k)).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), kinds.len());
        assert!(!codes.contains(&RCB_OK));
        for c in codes {
            // SAFETY: rcb_status_str returns a static NUL-terminated string for every code.
            let s = unsafe { CStr::from_ptr(rcb_status_str(c)) }.to_str().unwrap();
            assert!(s.starts_with("RCB_STATUS_"), "{c}: {s}");
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(rcb_status_str(-7)) }.to_str().unwrap();
        assert_eq!(unknown, "unknown rcb_status code");
    }

    #[test]
    fn last_error_copies_truncates_and_reports_full_length() {
        set_last_error("héllo wörld");
        let full = "héllo wörld".len();
        // SAFETY: a null buffer with length 0 asks for the length only.
        assert_eq!(unsafe { rcb_last_error_message(std::ptr::null_mut(), 0) }, full);
        let mut buf = [0x55 as c_char; 64];
        // SAFETY: a writable buffer of the given length.
        assert_eq!(unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) }, full);
        // SAFETY: the export NUL-terminated the buffer.
        assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(), "héllo wörld");
        // 3 bytes fit "hé" only if é (2 bytes) is not split: "h" + "é" = 3 bytes > 2 available.
        let mut small = [0x55 as c_char; 3];
        // SAFETY: a writable buffer of the given length.
        assert_eq!(unsafe { rcb_last_error_message(small.as_mut_ptr(), small.len()) }, full);
        // SAFETY: the export NUL-terminated the buffer.
        assert_eq!(unsafe { CStr::from_ptr(small.as_ptr()) }.to_str().unwrap(), "h");
        clear_last_error();
        // SAFETY: a writable buffer of the given length.
        assert_eq!(unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) }, 0);
        assert_eq!(buf[0], 0);
    }

    #[test]
    fn version_matches_the_package() {
        // SAFETY: rcb_version returns a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(rcb_version()) }.to_str().unwrap();
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
    }
}

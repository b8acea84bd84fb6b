//! hipError_t values (from hip_runtime_api.h) and their names.

use std::cell::Cell;

pub type HipResult<T = ()> = Result<T, i32>;

pub const SUCCESS: i32 = 0;
pub const INVALID_VALUE: i32 = 1;
pub const OUT_OF_MEMORY: i32 = 2;
pub const INVALID_DEVICE_FUNCTION: i32 = 98;
pub const NO_DEVICE: i32 = 100;
pub const INVALID_DEVICE: i32 = 101;
pub const INVALID_IMAGE: i32 = 200;
pub const INVALID_CONTEXT: i32 = 201;
pub const INVALID_HANDLE: i32 = 400;
pub const ILLEGAL_STATE: i32 = 401;
pub const NOT_FOUND: i32 = 500;
pub const NOT_READY: i32 = 600;
pub const ILLEGAL_ADDRESS: i32 = 700;
pub const NOT_SUPPORTED: i32 = 801;
pub const CAPTURE_UNSUPPORTED: i32 = 900;
pub const CAPTURE_INVALIDATED: i32 = 901;
pub const CAPTURE_UNMATCHED: i32 = 903;
pub const CAPTURE_UNJOINED: i32 = 904;
pub const CAPTURE_ISOLATION: i32 = 905;
pub const CAPTURE_WRONG_THREAD: i32 = 908;
pub const GRAPH_EXEC_UPDATE_FAILURE: i32 = 910;
pub const UNKNOWN: i32 = 999;

/// (code, name, description) with NUL-terminated strings so they can be handed to C as-is.
const TABLE: &[(i32, &str, &str)] = &[
    (SUCCESS, "hipSuccess\0", "no error\0"),
    (INVALID_VALUE, "hipErrorInvalidValue\0", "invalid argument\0"),
    (OUT_OF_MEMORY, "hipErrorOutOfMemory\0", "out of memory\0"),
    (3, "hipErrorNotInitialized\0", "initialization error\0"),
    (9, "hipErrorInvalidConfiguration\0", "invalid configuration argument\0"),
    (INVALID_DEVICE_FUNCTION, "hipErrorInvalidDeviceFunction\0", "invalid device function\0"),
    (NO_DEVICE, "hipErrorNoDevice\0", "no ROCm-capable device is detected\0"),
    (INVALID_DEVICE, "hipErrorInvalidDevice\0", "invalid device ordinal\0"),
    (INVALID_IMAGE, "hipErrorInvalidImage\0", "device kernel image is invalid\0"),
    (INVALID_CONTEXT, "hipErrorInvalidContext\0", "invalid device context\0"),
    (INVALID_HANDLE, "hipErrorInvalidHandle\0", "invalid resource handle\0"),
    (ILLEGAL_STATE, "hipErrorIllegalState\0", "the operation cannot be performed in the present state\0"),
    (NOT_FOUND, "hipErrorNotFound\0", "named symbol not found\0"),
    (NOT_READY, "hipErrorNotReady\0", "device not ready\0"),
    (ILLEGAL_ADDRESS, "hipErrorIllegalAddress\0", "an illegal memory access was encountered\0"),
    (NOT_SUPPORTED, "hipErrorNotSupported\0", "operation not supported\0"),
    (CAPTURE_UNSUPPORTED, "hipErrorStreamCaptureUnsupported\0", "operation not permitted when stream is capturing\0"),
    (CAPTURE_INVALIDATED, "hipErrorStreamCaptureInvalidated\0", "operation failed due to a previous error during capture\0"),
    (CAPTURE_UNMATCHED, "hipErrorStreamCaptureUnmatched\0", "capture was not initiated in this stream\0"),
    (CAPTURE_UNJOINED, "hipErrorStreamCaptureUnjoined\0", "capturing stream has unjoined work\0"),
    (CAPTURE_ISOLATION, "hipErrorStreamCaptureIsolation\0", "dependency created on uncaptured work in another stream\0"),
    (
        CAPTURE_WRONG_THREAD,
        "hipErrorStreamCaptureWrongThread\0",
        "attempt to terminate a thread-local capture sequence from another thread\0",
    ),
    (
        GRAPH_EXEC_UPDATE_FAILURE,
        "hipErrorGraphExecUpdateFailure\0",
        "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update\0",
    ),
    (UNKNOWN, "hipErrorUnknown\0", "unknown error\0"),
];

pub fn name(code: i32) -> &'static str {
    TABLE.iter().find(|e| e.0 == code).map_or("hipErrorUnknown\0", |e| e.1)
}

pub fn description(code: i32) -> &'static str {
    TABLE.iter().find(|e| e.0 == code).map_or("unknown error\0", |e| e.2)
}

thread_local! {
    /// The calling thread's last error, as clr keeps it per thread (`hip::tls.last_error_`).
    static LAST_ERROR: Cell<i32> = const { Cell::new(SUCCESS) };
}

/// Notes what an export returned in the thread's last error, as clr's `HIP_RETURN` does. Up to
/// 6.3 every call stores its result, success included (clr 5.7 to 6.3 sources); from 6.4 only a
/// failure other than `hipErrorNotReady` does, so an error stays until `hipGetLastError` takes it
/// (Debian's 6.4.3 and 7.2.4 binaries: their return path compares the result with 600 before
/// storing it; clr's later sources name it `HIP_UPDATE_ERROR_STATE`).
pub fn note(code: i32) {
    if !crate::knobs::get().sticky_last_error() || (code != SUCCESS && code != NOT_READY) {
        LAST_ERROR.set(code);
    }
}

/// The thread's last error, reset to success (`hipGetLastError`).
pub fn take_last() -> i32 {
    LAST_ERROR.replace(SUCCESS)
}

/// The thread's last error, left as it is (`hipPeekAtLastError`).
pub fn peek_last() -> i32 {
    LAST_ERROR.get()
}

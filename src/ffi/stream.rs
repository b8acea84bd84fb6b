//! `rcb_stream_*`: the stream handle cache.
//!
//! Streams cross as `void*` (`hipStream_t` / `CUstream`). They are the runtime's handles, not
//! registry ids: the caller uses them directly with the runtime between acquire and release.

use super::{arg_out, arg_out_sized, boundary, null_argument, rcb_status, sized_struct, write_out};
use crate::error::{Error, Result};
use crate::runtime::Stream;
use crate::stream_cache::{self, Idleness};
use std::ffi::c_void;

// The version node of each export of this module (abi/librocm_cmdbuf.map, through build.rs).
include!(concat!(env!("OUT_DIR"), "/symbol_versions/stream.rs"));

/// Counters of the stream cache, filled by `rcb_stream_cache_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct rcb_stream_stats {
    /// In: `sizeof(rcb_stream_stats)`; out: the bytes written (the rule for sized structs).
    pub struct_size: u32,
    /// Acquires served by an idle cached stream.
    pub hits: u64,
    /// Acquires that found no idle stream and created one.
    pub misses: u64,
    /// Streams destroyed by a release (busy, unreadable, over `RCB_STREAM_CACHE_MAX_PER_KEY`,
    /// cache off) or by a trim.
    pub destroyed: u64,
    /// Idle streams kept in the cache now.
    pub kept: u64,
    /// Streams acquired and not yet released now.
    pub in_use: u64,
}

// The size in 0.1.0, when the struct got its size.
sized_struct!(rcb_stream_stats, 48);

/// Hands out a stream of `device` with exactly `flags` and `priority` (clamped to the device's
/// priority range, as stream creation clamps it): an idle cached one when there is one, else a
/// new one. With `RCB_STREAM_CACHE=0` every call creates a stream.
///
/// On success `*stream` receives the stream; the caller owns it until it passes it to
/// `rcb_stream_release` or `rcb_stream_release_idle` (never to `hipStreamDestroy`), and may use
/// it with the runtime meanwhile. An invalid `device` is `RCB_STATUS_INVALID_ARGUMENT`; a failed creation is
/// `RCB_STATUS_RUNTIME_ERROR` (or `RCB_STATUS_OUT_OF_MEMORY`) naming the runtime call.
///
/// Thread-safety: any thread; a stream is never handed to two callers at once. A child forked
/// from the process starts with an empty cache (also when another thread was using it at the
/// fork): streams the parent acquired or kept are not the child's, and a release of one in the
/// child is `RCB_STATUS_INVALID_HANDLE`.
///
/// # Safety
/// `stream` must be NULL or point to writable memory for a `void*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_stream_acquire(device: i32, flags: u32, priority: i32, stream: *mut *mut c_void) -> rcb_status {
    boundary(|| {
        let out = arg_out(stream, "stream")?;
        let acquired = stream_cache::acquire(device, flags, priority)?;
        // SAFETY: checked by arg_out.
        unsafe { write_out(out, acquired.0) };
        Ok(())
    })
}

/// Gives back a stream from `rcb_stream_acquire`; ownership returns to the library. The stream
/// is kept for reuse when `hipStreamQuery` reports it idle and its key has room, and destroyed
/// otherwise (work still queued on a destroyed stream completes). A caller that has just
/// synchronized the stream can skip the query with `rcb_stream_release_idle`.
///
/// A stream that is not held from the cache (never acquired, already released, being released
/// by another thread now, or acquired before `rcb_stream_cache_reset`) is
/// `RCB_STATUS_INVALID_HANDLE` and is left untouched; NULL is
/// `RCB_STATUS_NULL_ARGUMENT`. When
/// the stream had to be destroyed and that failed, the status is the runtime's error and the
/// stream counts as released.
///
/// Thread-safety: any thread, not only the one that acquired the stream. Any value of `stream`
/// is safe to pass: it is looked up, never dereferenced.
#[unsafe(no_mangle)]
pub extern "C" fn rcb_stream_release(stream: *mut c_void) -> rcb_status {
    boundary(|| give_back(stream, Idleness::Query))
}

/// Gives back a stream from `rcb_stream_acquire` that the caller knows is idle, without asking
/// the runtime (`hipStreamQuery` costs more than the rest of a cache hit); ownership returns to
/// the library. Otherwise exactly `rcb_stream_release`: the same status codes, and the stream is
/// kept when its key has room and destroyed otherwise.
///
/// The caller promises that it synchronized the stream successfully (`hipStreamSynchronize`
/// returned `hipSuccess`; `cuStreamSynchronize` on the CUDA backend) and that nothing was
/// enqueued on it since, by any thread. When the synchronize failed or was not done, call
/// `rcb_stream_release`. A stream that breaks the promise may be handed to the
/// next acquirer with work still pending; that acquirer's work then runs after it (a matter of
/// ordering, not of memory safety).
///
/// Thread-safety: any thread, not only the one that acquired the stream. Any value of `stream`
/// is safe to pass: it is looked up, never dereferenced.
#[unsafe(no_mangle)]
pub extern "C" fn rcb_stream_release_idle(stream: *mut c_void) -> rcb_status {
    boundary(|| give_back(stream, Idleness::Known))
}

/// Destroys the idle cached streams of `device`, or of every device when `device` is -1.
/// Streams currently acquired are not affected. Call it before unloading the runtime; before a
/// device reset call `rcb_stream_cache_reset` instead.
///
/// Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn rcb_stream_cache_trim(device: i32) -> rcb_status {
    boundary(|| stream_cache::trim(device_filter(device)?).map(drop))
}

/// Prepares the cache for a reset of `device` (`hipDeviceReset`, or
/// `cuDevicePrimaryCtxReset` on the CUDA backend), or of every device when `device` is -1, which
/// destroys every stream of the device. Call it right before the reset. The idle cached streams
/// of the device are destroyed, as by `rcb_stream_cache_trim`, and the ones acquired and not yet
/// released are forgotten: the reset destroys them, and the library never touches them again.
/// Their owners stop using them; a release of one afterwards is `RCB_STATUS_INVALID_HANDLE`, as
/// `hipStreamDestroy` of a stream a reset destroyed is `hipErrorInvalidHandle`, and touches
/// nothing. Streams acquired after this call are the new device's. Without this call, a stream
/// acquired before a reset and released after it would be queried (a use after free in the
/// runtime) or, released idle, kept and handed out dead. Command buffers of the device are freed
/// before the reset as `rcb_cmdbuf_free` says, so that none of their objects is left to query.
///
/// When a destroy fails, the rest are still destroyed and every handed-out stream is still
/// forgotten; the status is the first failure.
///
/// Thread-safety: any thread; acquires made on another thread during the call get streams that
/// the reset may destroy, so the caller quiesces stream use around a reset, as the runtime
/// requires anyway.
#[unsafe(no_mangle)]
pub extern "C" fn rcb_stream_cache_reset(device: i32) -> rcb_status {
    boundary(|| stream_cache::reset(device_filter(device)?).map(drop))
}

/// Copies the cache's counters for `device` (summed over every device when `device` is -1) into
/// the caller-owned `*stats`, written only on success.
///
/// Thread-safety: any thread; the counters are a snapshot.
///
/// # Safety
/// `stats` must be NULL or point to an `rcb_stream_stats` writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_stream_cache_stats(device: i32, stats: *mut rcb_stream_stats) -> rcb_status {
    boundary(|| {
        // SAFETY: the caller promises a NULL or writable sized struct.
        let out = unsafe { arg_out_sized(stats, "stats") }?;
        let s = stream_cache::stats(device_filter(device)?)?;
        let value = rcb_stream_stats {
            hits: s.hits,
            misses: s.misses,
            destroyed: s.destroyed,
            kept: s.kept,
            in_use: s.in_use,
            ..Default::default()
        };
        // SAFETY: checked by arg_out_sized.
        unsafe { out.write(value) };
        Ok(())
    })
}

fn give_back(stream: *mut c_void, idleness: Idleness) -> Result<()> {
    if stream.is_null() {
        return Err(null_argument("stream"));
    }
    stream_cache::release(Stream(stream), idleness).map(drop)
}

fn device_filter(device: i32) -> Result<Option<i32>> {
    match device {
        -1 => Ok(None),
        d if d < -1 => Err(Error::invalid_argument(format!("device {d} is invalid: use -1 for every device"))),
        d => Ok(Some(d)),
    }
}

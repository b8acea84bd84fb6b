//! `rcb_trace_cache`: graphs of one traced command keyed by the allocations it uses, so that
//! recording it again is a lookup or an in-place relocation instead of a stream capture.
//!
//! Methods: `rcb_trace_cache_new`, `rcb_trace_cache_free`, `rcb_trace_cache_get_or_trace`.

use super::cmdbuf::{as_allocations, rcb_allocation};
use super::handle::handle_type;
use super::{arg_out, arg_slice, boundary, live, null_argument, rcb_status, register, take, unlocked, write_out};
use crate::cmdbuf;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::{self, Stream};
use crate::trace_cache::{Outcome, TraceCache};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Mutex;

// The version node of each export of this module (abi/librocm_cmdbuf.map, through build.rs).
include!(concat!(env!("OUT_DIR"), "/symbol_versions/trace_cache.rs"));

/// A trace cache (opaque). Created by `rcb_trace_cache_new`, owned by the caller, freed with
/// `rcb_trace_cache_free`. It owns every graph it returns.
///
/// Use one cache per traced command (one GEMM, collective or custom call of a command buffer):
/// two allocation lists of the same shape (count and sizes) are assumed to trace to the same
/// graph up to addresses.
///
/// Thread-safety: one thread at a time per cache (calls on one cache are serialised by a lock);
/// distinct caches may be used from different threads in parallel.
pub struct rcb_trace_cache {
    _private: [u8; 0],
}

handle_type!(rcb_trace_cache => Mutex<TraceCache>);

/// Issues the traced command's work on `stream` (a `hipStream_t` / `CUstream` being captured).
/// `user_data` is the pointer given to `rcb_trace_cache_get_or_trace`. Returns 0 on success; any
/// other value fails the call with `RCB_STATUS_CALLBACK_FAILED` (the value is in the message).
/// It must not synchronize the stream or start another capture on it.
///
/// It must not use the cache that called it: `rcb_trace_cache_get_or_trace` or
/// `rcb_trace_cache_free` on that cache from inside its `trace_fn` returns
/// `RCB_STATUS_INVALID_STATE` without doing anything (the cache is busy with the outer call),
/// whatever the stream and allocations; from another thread that `trace_fn` waits for, such a
/// call would wait forever. Other caches may be used.
pub type rcb_trace_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, stream: *mut c_void) -> i32>;

/// `rcb_trace_cache_get_or_trace` outcome: an entry with exactly these allocations.
pub const RCB_TRACE_HIT: u32 = 0;
/// `rcb_trace_cache_get_or_trace` outcome: an entry with the same shape, its graph patched in
/// place to the new addresses (no capture).
pub const RCB_TRACE_RELOCATED: u32 = 1;
/// `rcb_trace_cache_get_or_trace` outcome: a new capture.
pub const RCB_TRACE_TRACED: u32 = 2;
/// `rcb_trace_cache_get_or_trace` outcome: a new capture that could not be cached; the captured
/// graph itself, held until the next call.
pub const RCB_TRACE_UNCACHED: u32 = 3;
/// Largest capacity of a trace cache.
pub const RCB_TRACE_CACHE_MAX_CAPACITY: usize = 1 << 20;
// A literal, so that cbindgen can write it into the header.
const _: () = assert!(RCB_TRACE_CACHE_MAX_CAPACITY == crate::trace_cache::MAX_CAPACITY);

/// A cache whose `trace_fn` this thread is running, and the one whose `trace_fn` that call runs
/// inside (null when none): a list through the stack frames of [`tracing`].
struct Tracing {
    id: usize,
    outer: *const Tracing,
}

thread_local! {
    /// The innermost entry of this thread's [`Tracing`] list. A call on one of its caches from
    /// inside that cache's `trace_fn` would wait forever for the lock its own caller holds, so it
    /// is refused instead. A raw pointer, without a destructor, so that the list stays readable
    /// after the thread's other thread-locals are destroyed (calls at exit, from atexit handlers
    /// or pthread key destructors).
    static TRACING: Cell<*const Tracing> = const { Cell::new(std::ptr::null()) };
}

/// Refuses a call on cache `id` made from inside that cache's `trace_fn` on this thread.
fn not_from_own_trace_fn(id: usize, call: &str) -> Result<()> {
    let mut entry = TRACING.get();
    // SAFETY: every entry of the list is a `Tracing` on this thread's stack that `tracing` keeps
    // alive, unmoved, while it is linked, and unlinks before it goes.
    while let Some(t) = unsafe { entry.as_ref() } {
        if t.id == id {
            return Err(Error::invalid_state(format!(
                "{call} was called on trace cache {id:#x} from inside its own trace_fn; the cache is busy with that call (use another cache for nested commands)"
            )));
        }
        entry = t.outer;
    }
    Ok(())
}

/// Runs `f` with cache `id` marked as running its `trace_fn` on this thread.
fn tracing<R>(id: usize, f: impl FnOnce() -> R) -> R {
    /// Puts the outer entry back, also when `f` unwinds.
    struct Unlink(*const Tracing);
    impl Drop for Unlink {
        fn drop(&mut self) {
            TRACING.set(self.0);
        }
    }
    let entry = Tracing { id, outer: TRACING.get() };
    let _unlink = Unlink(entry.outer);
    TRACING.set(&entry);
    f()
}

/// Creates a trace cache holding at most `capacity` graphs (1 to
/// `RCB_TRACE_CACHE_MAX_CAPACITY`); when full, the least recently used one is evicted. On success
/// `*out` is a new handle that the caller owns and frees with `rcb_trace_cache_free`.
///
/// Thread-safety: any thread.
///
/// # Safety
/// `out` must be NULL or point to writable memory for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_trace_cache_new(capacity: usize, out: *mut *mut rcb_trace_cache) -> rcb_status {
    boundary(|| {
        let out = arg_out(out, "out")?;
        let tc = register::<rcb_trace_cache>(Mutex::new(TraceCache::new(runtime::get()?, capacity)?))?;
        // SAFETY: checked by arg_out.
        unsafe { write_out(out, tc) };
        Ok(())
    })
}

/// Frees a trace cache and every graph it holds (graphs it returned become invalid; executable
/// graphs instantiated from them, and clones of them, stay valid). `NULL` is a no-op; a freed or
/// unknown handle gives `RCB_STATUS_INVALID_HANDLE`. Called from inside this cache's own
/// `trace_fn`: `RCB_STATUS_INVALID_STATE`, nothing freed.
///
/// Otherwise `tc` is consumed whatever the status. When destroying a graph underneath fails, the
/// rest is still destroyed and the status is `RCB_STATUS_RUNTIME_ERROR`: the cache is released
/// all the same and the message names each failed call (its object is leaked).
///
/// Thread-safety: any thread, not concurrently with other calls on `tc`.
///
/// # Safety
/// `tc` must be NULL or a handle from `rcb_trace_cache_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_trace_cache_free(tc: *mut rcb_trace_cache) -> rcb_status {
    boundary(|| match take(tc, |cache| not_from_own_trace_fn(cache.id(), "rcb_trace_cache_free"))? {
        Some(cache) => unlocked(cache).destroy().into_result("the trace cache"),
        None => Ok(()),
    })
}

/// Returns in `*graph` the graph of the command that `trace_fn` issues, for the allocations
/// `allocs` (`n` entries of (base, size); NULL allowed when `n` is 0; borrowed for the call), and
/// in `*outcome` how it was obtained:
/// - `RCB_TRACE_HIT`: a cached graph recorded for exactly these (base, size) entries (compared by
///   a hash first, then entry by entry);
/// - `RCB_TRACE_RELOCATED`: no exact entry, but one of the same shape (same `n`, same sizes, in
///   order) whose nodes could all be flattened: its graph's addresses inside the old allocations
///   are rewritten to the new bases (same offsets) in place, and its key becomes `allocs`;
///   `trace_fn` is not called. The least recently used such entry is the one relocated.
/// - `RCB_TRACE_TRACED`: `trace_fn(user_data, stream)` was called while `stream` was captured
///   (thread-local mode), and the captured graph flattened into a new entry (see
///   `rcb_cmdbuf_add_flattened_child` for what can be flattened and how pointer sites are found
///   by scanning; a capture that cannot be flattened is cached for hits but never relocated). The
///   least recently used entry is evicted when the cache is full.
/// - `RCB_TRACE_UNCACHED`: `trace_fn` was called and its capture ended, but making its entry
///   failed (a runtime call while flattening it): `*graph` is the captured graph itself, not
///   cached (the next call with these allocations captures again), and the cache is otherwise
///   unchanged. The caller uses it as any other: `trace_fn` need not, and should not, run again.
///
/// The graph (`hipGraph_t` / `CUgraph`) is owned by the cache and borrowed by the caller until the
/// next call on this cache or its free: instantiate it, or clone it into a command buffer, before
/// then. Do not destroy or modify it.
///
/// When `trace_fn` returns non-zero, the capture is ended and discarded, the cache is unchanged,
/// and the call returns `RCB_STATUS_CALLBACK_FAILED`. When the runtime fails to end the capture,
/// the cache is unchanged, the status is the runtime's error, and the library, which must not
/// leave `stream` capturing behind the caller's back, tries the end once more (discarding what
/// it returns); the message says whether `stream` is usable or still capturing (then end its
/// capture before using it). A call on this cache from inside its own `trace_fn` returns
/// `RCB_STATUS_INVALID_STATE` (see `rcb_trace_fn`). Outputs are written only on success.
///
/// Thread-safety: one thread at a time per cache; `stream` must not be used by other threads
/// during the call.
///
/// # Safety
/// `tc` NULL or a handle; `stream` a stream of the runtime; `allocs` NULL or `n` readable entries;
/// `trace_fn` NULL or a function safe to call with `user_data`; `graph` and `outcome` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_trace_cache_get_or_trace(
    tc: *mut rcb_trace_cache,
    stream: *mut c_void,
    allocs: *const rcb_allocation,
    n: usize,
    trace_fn: rcb_trace_fn,
    user_data: *mut c_void,
    graph: *mut *mut c_void,
    outcome: *mut u32,
) -> rcb_status {
    boundary(|| {
        let graph_out = arg_out(graph, "graph")?;
        let outcome_out = arg_out(outcome, "outcome")?;
        let Some(trace_fn) = trace_fn else {
            return Err(null_argument("trace_fn"));
        };
        let object = live(tc, "tc")?;
        let id = object.id();
        not_from_own_trace_fn(id, "rcb_trace_cache_get_or_trace")?;
        let mut cache = object.lock()?;
        // SAFETY: forwarded from the caller.
        let table = unsafe { arg_slice(allocs, n, "allocs", cmdbuf::MAX_ALLOCATIONS) }?;
        let trace = |s: Stream| {
            // SAFETY: the caller promises `trace_fn` may be called with `user_data`.
            match tracing(id, || unsafe { trace_fn(user_data, s.0) }) {
                0 => Ok(()),
                code => Err(Error::new(ErrorKind::CallbackFailed, format!("trace_fn returned {code}"))),
            }
        };
        let (g, how) = cache.get_or_trace(Stream(stream), as_allocations(table), trace)?;
        let how = match how {
            Outcome::Hit => RCB_TRACE_HIT,
            Outcome::Relocated => RCB_TRACE_RELOCATED,
            Outcome::Traced => RCB_TRACE_TRACED,
            Outcome::Uncached => RCB_TRACE_UNCACHED,
        };
        // SAFETY: checked by arg_out.
        unsafe {
            write_out(graph_out, g.0);
            write_out(outcome_out, how);
        }
        Ok(())
    })
}

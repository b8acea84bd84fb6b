//! `librocm_cmdbuf_preload.so`: `hipStreamCreate`, `hipStreamCreateWithFlags`,
//! `hipStreamCreateWithPriority` and `hipStreamDestroy` for `LD_PRELOAD`, so that a program that
//! creates and destroys streams over and over (an unpatched XLA re-creating PjRt clients) reuses
//! idle ones instead of paying milliseconds per creation.
//!
//! A destroyed stream goes back to a cache keyed by (current device, flags, priority) when
//! `hipStreamQuery` says it is idle; a create takes one from there when it can. Streams this
//! library did not hand out are destroyed for real. `RCB_STREAM_CACHE=0` forwards every call
//! untouched; `RCB_STREAM_CACHE_MAX_PER_KEY` bounds what is kept (default 64); a malformed value
//! turns the cache off, with a line on stderr.
//!
//! Kept apart from `librocm_cmdbuf.so` on purpose: linking that library must never interpose
//! HIP symbols. The cache logic and the parsing of those variables are the library's own, from
//! the `rocm_cmdbuf_stream_pool` crate both link.
//!
//! As a preload this code runs inside foreign processes: it allocates nothing before the real
//! functions are found, a call made from inside HIP while one of ours is running on the same
//! thread goes straight to HIP, and no panic leaves it.

mod real;

use real::{HIP_ERROR_SYMBOL_NOT_FOUND, HIP_SUCCESS, HipError, HipStream, Real};
use rocm_cmdbuf_stream_pool::{Idleness, Pool, ReleaseError, Settings};
use std::cell::Cell;
use std::ffi::{c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

const HIP_ERROR_UNKNOWN: HipError = 999;
/// hipStreamCreate and hipStreamCreateWithFlags create streams of normal priority.
const DEFAULT_PRIORITY: c_int = 0;

thread_local! {
    // Const-initialised and without a destructor: no allocation, no registration.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// `None`: caching is off, forward everything.
static POOL: OnceLock<Option<Pool<usize>>> = OnceLock::new();

/// Runs `cached` with the real functions and the pool, or `direct` when caching is off, when the
/// call comes from inside HIP during one of ours, or after a panic.
fn route(direct: impl FnOnce(&'static Real) -> HipError, cached: impl FnOnce(&'static Real, &'static Pool<usize>) -> HipError) -> HipError {
    let Some(real) = real::get() else { return HIP_ERROR_SYMBOL_NOT_FOUND };
    if INSIDE.with(|inside| inside.replace(true)) {
        return direct(real);
    }
    let rc = match POOL.get_or_init(pool_from_env) {
        None => direct(real),
        Some(pool) => catch_unwind(AssertUnwindSafe(|| cached(real, pool))).unwrap_or(HIP_ERROR_UNKNOWN),
    };
    INSIDE.with(|inside| inside.set(false));
    rc
}

fn create(stream: *mut HipStream, flags: c_uint, priority: c_int, direct: impl FnOnce(&'static Real) -> HipError) -> HipError {
    if stream.is_null() {
        return real::get().map_or(HIP_ERROR_SYMBOL_NOT_FOUND, direct);
    }
    route(direct, |real, pool| {
        let acquired = real.current_device().and_then(|device| pool.acquire(real, device, flags, priority));
        match acquired {
            Ok(s) => {
                // SAFETY: non-null, and HIP's contract makes it writable.
                unsafe { stream.write(s as HipStream) };
                HIP_SUCCESS
            }
            Err(rc) => rc,
        }
    })
}

/// # Safety
/// HIP's contract for `hipStreamCreate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreate(stream: *mut HipStream) -> HipError {
    // SAFETY: forwarded with the caller's arguments.
    create(stream, 0, DEFAULT_PRIORITY, |real| unsafe { (real.create)(stream) })
}

/// # Safety
/// HIP's contract for `hipStreamCreateWithFlags`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithFlags(stream: *mut HipStream, flags: c_uint) -> HipError {
    // SAFETY: forwarded with the caller's arguments.
    create(stream, flags, DEFAULT_PRIORITY, |real| unsafe { (real.create_with_flags)(stream, flags) })
}

/// # Safety
/// HIP's contract for `hipStreamCreateWithPriority`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithPriority(stream: *mut HipStream, flags: c_uint, priority: c_int) -> HipError {
    // SAFETY: forwarded with the caller's arguments.
    create(stream, flags, priority, |real| unsafe { (real.create_with_priority)(stream, flags, priority) })
}

/// # Safety
/// HIP's contract for `hipStreamDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamDestroy(stream: HipStream) -> HipError {
    // SAFETY: forwarded with the caller's argument.
    let direct = |real: &Real| unsafe { (real.destroy)(stream) };
    // hipStreamDestroy promises nothing about pending work: the stream is queried.
    route(direct, |real, pool| match pool.release(real, stream as usize, Idleness::Query) {
        Ok(_) => HIP_SUCCESS,
        Err(ReleaseError::NotHeld) => direct(real),
        Err(ReleaseError::Destroy(rc)) => rc,
    })
}

/// Reads the two variables once. A malformed value cannot fail a stream creation, so it turns
/// the cache off and says so on stderr.
fn pool_from_env() -> Option<Pool<usize>> {
    match Settings::from_vars(|name| std::env::var_os(name)) {
        Ok(settings) => settings.enabled.then(|| Pool::new(settings)),
        Err(message) => {
            eprintln!("librocm_cmdbuf_preload: {message}: stream cache off");
            None
        }
    }
}

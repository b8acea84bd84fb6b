//! `librocm_cmdbuf_preload.so`: `hipStreamCreate`, `hipStreamCreateWithFlags`,
//! `hipStreamCreateWithPriority`, `hipStreamDestroy` and `hipDeviceReset` for `LD_PRELOAD`, so
//! that a program that creates and destroys streams over and over (an unpatched XLA re-creating
//! PjRt clients) reuses idle ones instead of paying milliseconds per creation.
//!
//! The calls it reaches: every call the dynamic linker binds by name, from any object, whether
//! the runtime is in the global scope or was `dlopen`ed with `RTLD_LOCAL` behind the caller (an
//! object linked against `libamdhip64`, as XLA from rocm-jaxlib-v0.8.2 on is); and, on x86-64,
//! calls through the pointers a program takes with `dlsym(handle, name)` from a HIP runtime's own
//! handle (XLA up to rocm-jaxlib-v0.8.0), for which it also interposes `dlsym` (`lookup.rs`). Not
//! reached: pointers taken with `dlvsym` or `hipGetProcAddress`.
//!
//! A destroyed stream goes back to a cache keyed by (current device, requested flags,
//! priority) when `hipStreamQuery` says it is idle; a create takes one from there when it can.
//! Streams this library did not hand out are destroyed for real; a second destroy of a cached
//! one (also while the first is in progress on another thread) gets `hipErrorInvalidHandle`, as
//! from plain HIP. `hipDeviceReset` empties the device's part of the cache before the real
//! reset, and a forked child starts with an empty cache (the fork handler is registered when the
//! library is loaded). One runtime's streams are cached (the
//! first one to create through the cache), and only while it is the only one in use: once a
//! caller's real functions are another runtime's (a framework's bundled `libamdhip64` beside the
//! system's, under any name), the cache stands aside for good and every call goes to the caller's
//! real function, so the cache never has to keep two runtimes' streams apart; the streams it
//! keeps idle then stay unused (at most `RCB_STREAM_CACHE_MAX_PER_KEY` per key).
//! `RCB_STREAM_CACHE=0` forwards every call untouched; `RCB_STREAM_CACHE_MAX_PER_KEY` bounds what
//! is kept (default 64); a malformed value turns the cache off, with a line on stderr.
//!
//! Kept apart from `librocm_cmdbuf.so` on purpose: linking that library must never interpose
//! HIP symbols. The cache logic and the parsing of those variables are the library's own, from
//! the `rocm_cmdbuf_stream_pool` crate both link.
//!
//! As a preload this code runs inside foreign processes: it allocates nothing before the real
//! functions are found, a call made from inside HIP while one of ours is running on the same
//! thread goes straight to HIP, whatever the cache cannot answer gets the real call, and no
//! panic leaves it.

#[cfg(target_arch = "x86_64")]
mod lookup;
mod real;

use real::{HIP_ERROR_INVALID_HANDLE, HIP_ERROR_SYMBOL_NOT_FOUND, HIP_SUCCESS, HipError, HipStream, Real};
use rocm_cmdbuf_stream_pool::{Idleness, Pool, ReleaseError, Settings};
use std::cell::Cell;
use std::ffi::{c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// hipStreamCreate and hipStreamCreateWithFlags create streams of normal priority.
const DEFAULT_PRIORITY: c_int = 0;

thread_local! {
    // Const-initialised and without a destructor: no allocation, no registration, and usable
    // at a thread's exit too.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// The process's cache: null until the first call, and again in a forked child. `None` inside:
/// caching is off, forward everything. Published with an atomic, never a lock or a `OnceLock`,
/// which a fork could leave held in the child.
static POOL: AtomicPtr<Option<Pool<usize>>> = AtomicPtr::new(std::ptr::null_mut());
/// The runtime whose streams the cache holds ([`Real::id`]; 0: none yet). Streams of another
/// runtime in the same process are never cached: their calls go straight through.
static OWNER: AtomicUsize = AtomicUsize::new(0);
/// Set for good once a caller's real functions were not [`OWNER`]'s: two runtimes are in use.
/// Only a flag is read, never the loader's state, whose locks a fork could leave held.
static SEVERAL: AtomicBool = AtomicBool::new(false);

/// Registers [`forget_in_child`] when the library is loaded, before the program can have made a
/// stream call or a thread: registered lazily, a fork in the window between a first call and the
/// registration (or during a `Once` another thread is running, which the child would wait on for
/// ever) would leave the child the parent's cache.
#[used]
#[unsafe(link_section = ".init_array")]
static REGISTER_AT_FORK: extern "C" fn() = register_at_fork;

extern "C" fn register_at_fork() {
    // SAFETY: registers a handler that only stores to atomics.
    unsafe { pthread_atfork(None, None, Some(forget_in_child)) };
}

/// The cache, created on first use.
fn pool() -> &'static Option<Pool<usize>> {
    let current = POOL.load(Ordering::Acquire);
    // SAFETY: a non-null value is a leaked pool, never freed.
    if let Some(pool) = unsafe { current.as_ref() } {
        return pool;
    }
    let fresh = Box::into_raw(Box::new(pool_from_env()));
    match POOL.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: just leaked; never freed.
        Ok(_) => unsafe { &*fresh },
        Err(winner) => {
            // SAFETY: `fresh` was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above: a leaked pool.
            unsafe { &*winner }
        }
    }
}

unsafe extern "C" {
    fn pthread_atfork(prepare: Option<extern "C" fn()>, parent: Option<extern "C" fn()>, child: Option<extern "C" fn()>) -> c_int;
}

/// In a forked child, the parent's cache is abandoned (leaked, never touched again): its locks
/// may be held by threads that do not exist in the child, and its idle streams are the
/// parent's. The child's first stream call starts a new, empty one.
extern "C" fn forget_in_child() {
    POOL.store(std::ptr::null_mut(), Ordering::Release);
    OWNER.store(0, Ordering::Release);
}

/// Runs `cached` with the runtime's real functions and the cache, or `direct` when caching is
/// off, when the runtime is not the cache's, when the call comes from inside HIP during one of
/// ours, or after a panic. `direct` is the real call, made whenever the cache cannot answer for
/// it. `real` is the caller's runtime when it could be told (see [`real::for_caller`]), else
/// the one the cache serves or one loaded under a known name: the call never fails where plain
/// HIP would have had a runtime to call.
#[inline(never)]
fn route(
    real: Option<Real>,
    direct: impl Fn(&Real) -> HipError,
    cached: impl FnOnce(&Real, &'static Pool<usize>) -> Option<HipError>,
) -> HipError {
    let Some(real) = real.or_else(real::fallback) else { return HIP_ERROR_SYMBOL_NOT_FOUND };
    if INSIDE.replace(true) {
        return direct(&real);
    }
    let answer = catch_unwind(AssertUnwindSafe(|| match pool() {
        Some(pool) if owns(&real) => cached(&real, pool),
        _ => None,
    }));
    INSIDE.set(false);
    match answer {
        Ok(Some(rc)) => rc,
        _ => direct(&real),
    }
}

/// True when the cache may serve `real`: it serves one runtime, claimed by the first to create
/// through it, and only until a caller's real functions turn out to be another runtime's. From
/// then on the cache stands aside for every caller ([`SEVERAL`]).
fn owns(real: &Real) -> bool {
    if SEVERAL.load(Ordering::Acquire) {
        return false;
    }
    match OWNER.compare_exchange(0, real.id(), Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            real::remember_owner(*real);
            true
        }
        Err(owner) if owner == real.id() => true,
        Err(_) => {
            SEVERAL.store(true, Ordering::Release);
            false
        }
    }
}

fn create(real: Option<Real>, stream: *mut HipStream, flags: c_uint, priority: c_int, direct: impl Fn(&Real) -> HipError) -> HipError {
    if stream.is_null() {
        return route(real, direct, |_, _| None);
    }
    route(real, direct, |real, pool| {
        // A failure of the cache's own calls (the device, the priority range, the creation)
        // falls through to the real call, which gives the caller HIP's own answer.
        let s = real.current_device().and_then(|device| pool.acquire(real, device, flags, priority)).ok()?;
        // SAFETY: non-null, and HIP's contract makes it writable.
        unsafe { stream.write(s as HipStream) };
        Some(HIP_SUCCESS)
    })
}

/// `hipStreamCreate` through the cache, with `real`'s functions (`None`: the caller's runtime
/// could not be told, and [`route`] falls back).
///
/// # Safety
/// HIP's contract for `hipStreamCreate`.
unsafe fn stream_create(real: Option<Real>, stream: *mut HipStream) -> HipError {
    // SAFETY: forwarded with the caller's arguments.
    create(real, stream, 0, DEFAULT_PRIORITY, |real| unsafe { (real.create)(stream) })
}

/// # Safety
/// HIP's contract for `hipStreamCreateWithFlags`.
unsafe fn stream_create_with_flags(real: Option<Real>, stream: *mut HipStream, flags: c_uint) -> HipError {
    // SAFETY: forwarded with the caller's arguments.
    create(real, stream, flags, DEFAULT_PRIORITY, |real| unsafe { (real.create_with_flags)(stream, flags) })
}

/// # Safety
/// HIP's contract for `hipStreamCreateWithPriority`.
unsafe fn stream_create_with_priority(real: Option<Real>, stream: *mut HipStream, flags: c_uint, priority: c_int) -> HipError {
    // SAFETY: forwarded with the caller's arguments.
    create(real, stream, flags, priority, |real| unsafe { (real.create_with_priority)(stream, flags, priority) })
}

/// # Safety
/// HIP's contract for `hipStreamDestroy`.
unsafe fn stream_destroy(real: Option<Real>, stream: HipStream) -> HipError {
    // SAFETY: forwarded with the caller's argument.
    let direct = |real: &Real| unsafe { (real.destroy)(stream) };
    // hipStreamDestroy promises nothing about pending work: the stream is queried.
    route(real, direct, |real, pool| match pool.release(real, stream as usize, Idleness::Query) {
        Ok(_) => Some(HIP_SUCCESS),
        // Not the cache's (or forgotten by a device reset): HIP answers.
        Err(ReleaseError::NotHeld) => None,
        // Destroyed already as far as the caller knows, and kept alive for the next creator, or
        // being destroyed by another thread's call, which keeps or destroys it: plain HIP's
        // answer to a second destroy, and the stream is left to the first. Forwarded, the real
        // destroy would kill a stream the first call may file for the next creator.
        Err(ReleaseError::AlreadyReleased | ReleaseError::Releasing) => Some(HIP_ERROR_INVALID_HANDLE),
        Err(ReleaseError::Destroy(rc)) => Some(rc),
    })
}

/// `hipDeviceReset` destroys every stream of the current device, the cached ones included:
/// they are destroyed and the handed-out ones forgotten first, so that none is handed out or
/// queried after the reset; then the real reset runs. When the current device cannot be read,
/// the whole cache is reset so: the reset may be of any device.
///
/// # Safety
/// HIP's contract for `hipDeviceReset`.
unsafe fn device_reset(real: Option<Real>) -> HipError {
    // SAFETY: HIP's own function, no arguments.
    let direct = |real: &Real| unsafe { (real.reset)() };
    route(real, direct, |real, pool| {
        // A failed destroy leaves a stream to the reset, which destroys it anyway.
        let _ = pool.reset(real, real.current_device().ok());
        None
    })
}

/// # Safety
/// HIP's contract for `hipStreamCreate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreate(stream: *mut HipStream) -> HipError {
    // SAFETY: the caller's arguments, under HIP's contract.
    unsafe { stream_create(real::for_caller(), stream) }
}

/// # Safety
/// HIP's contract for `hipStreamCreateWithFlags`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithFlags(stream: *mut HipStream, flags: c_uint) -> HipError {
    // SAFETY: the caller's arguments, under HIP's contract.
    unsafe { stream_create_with_flags(real::for_caller(), stream, flags) }
}

/// # Safety
/// HIP's contract for `hipStreamCreateWithPriority`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithPriority(stream: *mut HipStream, flags: c_uint, priority: c_int) -> HipError {
    // SAFETY: the caller's arguments, under HIP's contract.
    unsafe { stream_create_with_priority(real::for_caller(), stream, flags, priority) }
}

/// # Safety
/// HIP's contract for `hipStreamDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamDestroy(stream: HipStream) -> HipError {
    // SAFETY: the caller's argument, under HIP's contract.
    unsafe { stream_destroy(real::for_caller(), stream) }
}

/// # Safety
/// HIP's contract for `hipDeviceReset`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceReset() -> HipError {
    // SAFETY: HIP's contract, no arguments.
    unsafe { device_reset(real::for_caller()) }
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

//! The process-wide stream handle cache (DESIGN capability 5): idle streams kept per
//! (device, flags, priority), checked idle before reuse, bounded per key.
//!
//! Creating a HIP stream costs milliseconds on MI300X and a PjRt client creates ~112 of them;
//! a released stream that is idle is as good as a new one, so it is kept and handed out again.
//! The logic lives in the `rocm_cmdbuf_stream_pool` crate (shared with the `LD_PRELOAD`
//! interposer); this module binds it to the process's [`Runtime`] and [`config`].
//!
//! A forked child starts with an empty cache: the parent's is abandoned there (leaked, never
//! touched), since its locks may be held by parent threads that do not exist in the child and its
//! idle streams are the parent's.

pub use rocm_cmdbuf_stream_pool::{Idleness, Released, Stats};

use crate::config;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::{self, Runtime, Stream};
use rocm_cmdbuf_stream_pool::{Pool, ReleaseError, StreamOps};
use std::sync::atomic::{AtomicPtr, Ordering};

struct RuntimeStreams(&'static dyn Runtime);

impl StreamOps for RuntimeStreams {
    type Stream = Stream;
    type Error = Error;

    fn priority_range(&self, device: i32) -> Result<(i32, i32)> {
        self.0.stream_priority_range(device)
    }
    fn create(&self, device: i32, flags: u32, priority: i32) -> Result<Stream> {
        self.0.stream_create(device, flags, priority)
    }
    fn destroy(&self, stream: Stream) -> Result<()> {
        self.0.stream_destroy(stream)
    }
    fn is_idle(&self, stream: Stream) -> Result<bool> {
        self.0.stream_is_idle(stream)
    }
}

/// The process's cache: null until first used, and again in a forked child. Published with an
/// atomic, never a lock or a once-cell, which a fork could leave held (or half-run) in the child.
static POOL: AtomicPtr<Pool<Stream>> = AtomicPtr::new(std::ptr::null_mut());

crate::at_fork::forget_in_forked_child!(forget_in_child);

/// In a forked child, the parent's cache is abandoned: the next call starts an empty one.
extern "C" fn forget_in_child() {
    POOL.store(std::ptr::null_mut(), Ordering::Release);
}

fn pool() -> Result<(&'static Pool<Stream>, RuntimeStreams)> {
    let current = POOL.load(Ordering::Acquire);
    // SAFETY: a non-null value is a leaked pool, never freed.
    let pool = match unsafe { current.as_ref() } {
        Some(pool) => pool,
        None => {
            let fresh = Box::into_raw(Box::new(Pool::new(config::get()?.stream_cache)));
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
    };
    Ok((pool, RuntimeStreams(runtime::get()?)))
}

/// An idle cached stream of `device` with exactly `flags` and `priority` (clamped to the
/// device's range, as stream creation clamps it), or a new one. The caller owns it until
/// [`release`].
pub fn acquire(device: i32, flags: u32, priority: i32) -> Result<Stream> {
    let (pool, rt) = pool()?;
    pool.acquire(&rt, device, flags, priority)
}

/// Gives back a stream from [`acquire`]: kept for reuse when it is idle (asked of the runtime
/// with [`Idleness::Query`], taken on the caller's word with [`Idleness::Known`]) and its key has
/// room, destroyed otherwise. A stream not handed out by the cache (never acquired, already
/// released, or being released by another thread now) is an [`ErrorKind::InvalidHandle`] error
/// and is left alone: a second release of a stream kept idle never destroys it, so the cache
/// never hands out a stream it destroyed. When
/// the stream had to be destroyed and that failed, the error is returned and the cache has
/// forgotten the stream.
pub fn release(stream: Stream, idleness: Idleness) -> Result<Released> {
    let (pool, rt) = pool()?;
    pool.release(&rt, stream, idleness).map_err(|e| match e {
        ReleaseError::NotHeld => Error::new(
            ErrorKind::InvalidHandle,
            format!(
                "stream {:p} is not held from the stream cache: never acquired, already released, or acquired before rcb_stream_cache_reset (its device reset destroyed it)",
                stream.0
            ),
        ),
        ReleaseError::AlreadyReleased => Error::new(
            ErrorKind::InvalidHandle,
            format!("stream {:p} was already released: it is idle in the stream cache, and stays there", stream.0),
        ),
        ReleaseError::Releasing => Error::new(
            ErrorKind::InvalidHandle,
            format!("stream {:p} is being released by another call, which keeps or destroys it; this one left it alone", stream.0),
        ),
        ReleaseError::Destroy(e) => e.context(format!("stream {:p} could not be reused and destroying it failed", stream.0)),
    })
}

/// Destroys the idle streams of `device` (every device when `None`); returns how many.
pub fn trim(device: Option<i32>) -> Result<usize> {
    let (pool, rt) = pool()?;
    check_device(&rt, device)?;
    pool.trim(&rt, device).map_err(|(n, e)| {
        e.context(format!("trimming the stream cache ({n} idle stream(s) taken out and each destroy attempted; first failure)"))
    })
}

/// Before a reset of `device` (every device when `None`), which destroys all of its streams:
/// destroys its idle streams and forgets the ones handed out, so that none of them is handed out,
/// queried or destroyed through the cache again (their release is an [`ErrorKind::InvalidHandle`]
/// error that touches nothing). Returns how many idle streams were destroyed.
pub fn reset(device: Option<i32>) -> Result<usize> {
    let (pool, rt) = pool()?;
    check_device(&rt, device)?;
    // Every handed-out handle is forgotten even when a destroy fails.
    pool.reset(&rt, device).map_err(|(destroyed, e)| {
        e.context(format!(
            "resetting the stream cache ({destroyed} idle stream(s) taken out and each destroy attempted, the handed-out ones forgotten; first failure)"
        ))
    })
}

/// The cache's counters for `device` (summed over every device when `None`).
pub fn stats(device: Option<i32>) -> Result<Stats> {
    let (pool, rt) = pool()?;
    check_device(&rt, device)?;
    Ok(pool.stats(device))
}

fn check_device(rt: &RuntimeStreams, device: Option<i32>) -> Result<()> {
    let count = rt.0.info().device_count;
    match device {
        Some(d) if !(0..count).contains(&d) => Err(Error::invalid_argument(format!("device {d} does not exist ({count} device(s))"))),
        _ => Ok(()),
    }
}

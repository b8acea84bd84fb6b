//! Stream capture: while a stream captures, its work becomes a chain of graph nodes in
//! issue order instead of running.

use crate::error::{CAPTURE_INVALIDATED, CAPTURE_UNSUPPORTED, HipResult};
use crate::exec::run_op;
use crate::graph::{self, Op};
use crate::stream::{STREAMS, Target};

pub const MODE_GLOBAL: i32 = 0;
pub const MODE_THREAD_LOCAL: i32 = 1;
pub const MODE_RELAXED: i32 = 2;

thread_local! {
    // Const-initialised without a destructor: usable at a thread's exit too.
    /// The calling thread's mode for unsafe calls (`hipThreadExchangeStreamCaptureMode`).
    static THREAD_MODE: std::cell::Cell<i32> = const { std::cell::Cell::new(MODE_GLOBAL) };
}

/// Sets the calling thread's mode and returns the previous one.
pub fn exchange_thread_mode(mode: i32) -> i32 {
    THREAD_MODE.with(|m| m.replace(mode))
}

pub struct Capture {
    pub mode: i32,
    /// The capturing thread (`pthread_self`, which works also at a thread's exit, after its
    /// Rust thread-locals are gone, where `std::thread::current` panics).
    pub thread: libc::pthread_t,
    pub graph: usize,
    pub last: Option<usize>,
    pub invalidated: bool,
}

/// Appends `op` to the stream's capture graph; Ok(false) if the stream is not capturing.
pub fn record(t: &Target, op: &Op) -> HipResult<bool> {
    let Target::Stream(s) = t else { return Ok(false) };
    let mut cap = s.capture.lock().unwrap();
    let Some(c) = cap.as_mut() else { return Ok(false) };
    if c.invalidated {
        return Err(CAPTURE_INVALIDATED);
    }
    let deps: Vec<usize> = c.last.into_iter().collect();
    c.last = Some(graph::lock().add(c.graph, &deps, op.clone())?);
    Ok(true)
}

/// Captures `op` or runs it in stream order.
pub fn submit(t: &Target, op: Op) -> HipResult {
    if record(t, &op)? {
        return Ok(());
    }
    let dev = t.device();
    t.submit(Box::new(move || run_op(&op, dev)))
}

/// Runs `op` in stream order even when the stream captures (clr's stream memory operations).
pub fn submit_uncaptured(t: &Target, op: Op) -> HipResult {
    let dev = t.device();
    t.submit(Box::new(move || run_op(&op, dev)))
}

/// Marks the stream's capture (if any) invalidated, e.g. after a forbidden synchronization.
pub fn invalidate(t: &Target) {
    if let Target::Stream(s) = t
        && let Some(c) = s.capture.lock().unwrap().as_mut()
    {
        c.invalidated = true;
    }
}

pub fn is_capturing(t: &Target) -> bool {
    matches!(t, Target::Stream(s) if s.capture.lock().unwrap().is_some())
}

/// Calls that are unsafe during capture (e.g. hipMalloc, hipEventQuery) fail, and invalidate
/// the captures they conflict with, as CUDA's and clr's modes say: on a thread in the global
/// mode (the default) a global capture anywhere or a non-relaxed one of this thread's; in the
/// thread-local mode only this thread's non-relaxed ones; in the relaxed mode none.
pub fn check_unsafe_call() -> HipResult {
    let me = this_thread();
    let mode = THREAD_MODE.with(std::cell::Cell::get);
    if mode == MODE_RELAXED {
        return Ok(());
    }
    let mut hit = false;
    for s in STREAMS.values() {
        if let Some(c) = s.capture.lock().unwrap().as_mut()
            && ((c.thread == me && c.mode != MODE_RELAXED) || (mode == MODE_GLOBAL && c.mode == MODE_GLOBAL))
        {
            c.invalidated = true;
            hit = true;
        }
    }
    if hit { Err(CAPTURE_UNSUPPORTED) } else { Ok(()) }
}

/// The calling thread, as [`Capture::thread`] records it.
pub fn this_thread() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() }
}

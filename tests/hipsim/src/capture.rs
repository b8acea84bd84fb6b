//! Stream capture: while a stream captures, its work becomes a chain of graph nodes in
//! issue order instead of running.

use crate::error::{CAPTURE_INVALIDATED, CAPTURE_UNSUPPORTED, HipResult};
use crate::exec::run_op;
use crate::graph::{self, Op};
use crate::stream::{STREAMS, Target};

pub const MODE_GLOBAL: i32 = 0;
pub const MODE_THREAD_LOCAL: i32 = 1;

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

/// Calls that are unsafe during capture (e.g. hipMalloc) fail while a global capture is
/// active anywhere, or a thread-local one on this thread; relaxed captures allow them.
pub fn check_unsafe_call() -> HipResult {
    let me = this_thread();
    let mut hit = false;
    for s in STREAMS.values() {
        if let Some(c) = s.capture.lock().unwrap().as_mut()
            && (c.mode == MODE_GLOBAL || (c.mode == MODE_THREAD_LOCAL && c.thread == me))
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

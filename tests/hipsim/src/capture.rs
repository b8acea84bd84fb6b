//! Stream capture: while a stream captures, its work becomes graph nodes in issue order instead
//! of running. Events fork and join captures as ROCm's clr does (`hip_event.cpp`,
//! `hip_stream.cpp`, `hip_graph.cpp` of clr 6.3): `hipEventRecord` on a capturing stream makes
//! no node but remembers the stream's last nodes in the event; `hipStreamWaitEvent` on such an
//! event makes the waiting stream's next node depend on them, and a stream that was not
//! capturing joins the capture that way; the capture ends on the stream it began on, once every
//! joined stream's work leads back to it.

use std::sync::Arc;

use crate::error::{CAPTURE_INVALIDATED, CAPTURE_ISOLATION, CAPTURE_UNSUPPORTED, HipResult, INVALID_HANDLE, INVALID_VALUE, NOT_SUPPORTED};
use crate::event::{CaptureMark, Event};
use crate::exec::run_op;
use crate::graph::{self, Op};
use crate::stream::{STREAMS, Stream, Target};

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
    /// The nodes the stream's next captured work depends on.
    pub tips: Vec<usize>,
    /// The capture began on this stream (`hipStreamBeginCapture`); otherwise the stream joined
    /// it by waiting on an event recorded in it, and the capture ends on the stream it began on.
    pub origin: bool,
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
    let node = graph::lock().add(c.graph, &c.tips, op.clone())?;
    c.tips = vec![node];
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

/// The streams taking part in capture `graph`.
fn members(graph: usize) -> Vec<Arc<Stream>> {
    STREAMS.values().into_iter().filter(|s| s.capture.lock().unwrap().as_ref().is_some_and(|c| c.graph == graph)).collect()
}

/// Marks the stream's capture (if any) invalidated, e.g. after a forbidden synchronization:
/// every stream taking part in it.
pub fn invalidate(t: &Target) {
    let Target::Stream(s) = t else { return };
    let Some(graph) = s.capture.lock().unwrap().as_ref().map(|c| c.graph) else { return };
    for m in members(graph) {
        if let Some(c) = m.capture.lock().unwrap().as_mut() {
            c.invalidated = true;
        }
    }
}

pub fn is_capturing(t: &Target) -> bool {
    matches!(t, Target::Stream(s) if s.capture.lock().unwrap().is_some())
}

/// `hipEventRecord` on `t`: on a capturing stream no node is made, the event remembers the
/// stream's last nodes (Ok(true)); otherwise Ok(false), and the caller records it in stream
/// order. Either way the event remembers the stream (for `hipStreamWaitEvent`'s isolation rule).
pub fn record_event(t: &Target, event: &Event) -> HipResult<bool> {
    let Target::Stream(s) = t else {
        event.set_capture(None, None);
        return Ok(false);
    };
    let cap = s.capture.lock().unwrap();
    let mark = match cap.as_ref() {
        Some(c) if c.invalidated => return Err(CAPTURE_INVALIDATED),
        Some(c) => Some(CaptureMark { graph: c.graph, tips: c.tips.clone(), mode: c.mode, thread: c.thread }),
        None => None,
    };
    drop(cap);
    let captured = mark.is_some();
    event.set_capture(Some(Arc::downgrade(s)), mark);
    Ok(captured)
}

/// `hipStreamWaitEvent` of `t` on `event`. An event recorded in a capture that is still going
/// on: `t`'s next captured node depends on the nodes before the record, and a stream that is not
/// capturing joins that capture (Ok(true)). Otherwise: a non-zero flag is `hipErrorInvalidValue`,
/// an event last recorded, outside the capture, on a stream that captures now is
/// `hipErrorStreamCaptureIsolation`, and else Ok(false): the caller waits in stream order (on a
/// capturing stream too, outside its capture, as clr's `streamWait` does).
pub fn wait_event(t: &Target, event: &Event, flags: u32) -> HipResult<bool> {
    let (recorded_on, mark) = event.capture();
    if let Some(mark) = mark.filter(|m| !members(m.graph).is_empty()) {
        let Target::Stream(s) = t else { return Err(INVALID_HANDLE) };
        let mut cap = s.capture.lock().unwrap();
        match cap.as_mut() {
            Some(c) if c.graph == mark.graph => {
                for tip in mark.tips {
                    if !c.tips.contains(&tip) {
                        c.tips.push(tip);
                    }
                }
            }
            // Joining two captures: clr mixes their graphs' nodes; not modelled.
            Some(_) => return Err(NOT_SUPPORTED),
            None => {
                *cap = Some(Capture {
                    mode: mark.mode,
                    thread: mark.thread,
                    graph: mark.graph,
                    tips: mark.tips,
                    origin: false,
                    invalidated: false,
                })
            }
        }
        return Ok(true);
    }
    if flags != 0 {
        return Err(INVALID_VALUE);
    }
    if recorded_on.is_some_and(|s| s.capture.lock().unwrap().is_some()) {
        return Err(CAPTURE_ISOLATION);
    }
    Ok(false)
}

/// Ends capture `graph` on every stream that joined it (not the one it began on, whose caller
/// takes its own).
pub fn end_joined(graph: usize) {
    for m in members(graph) {
        let mut cap = m.capture.lock().unwrap();
        if cap.as_ref().is_some_and(|c| !c.origin) {
            cap.take();
        }
    }
}

/// Whether every last node of capture graph `g` is one of `tips` (the last nodes of the stream
/// the capture began on): clr's check that every joined stream's work leads back to it.
pub fn joined(g: usize, tips: &[usize]) -> HipResult<bool> {
    let gs = graph::lock();
    let nodes = &gs.graph(g)?.nodes;
    let depended: std::collections::HashSet<usize> = nodes.iter().flat_map(|n| n.deps.iter().copied()).collect();
    Ok(nodes.iter().filter(|n| !depended.contains(&n.handle)).all(|n| tips.contains(&n.handle)))
}

/// A stream being destroyed in the middle of a capture: the capture it began is discarded with
/// its graph (and the streams that joined it leave it); one it joined is invalidated.
pub fn abandon(s: &Stream) {
    let Some(c) = s.capture.lock().unwrap().take() else { return };
    if c.origin {
        end_joined(c.graph);
        let _ = graph::lock().destroy(c.graph);
    } else {
        for m in members(c.graph) {
            if let Some(c) = m.capture.lock().unwrap().as_mut() {
                c.invalidated = true;
            }
        }
    }
}

/// Calls that are unsafe during capture (e.g. hipMalloc, hipEventQuery) fail, and invalidate
/// the captures they conflict with (on every stream taking part), as CUDA's and clr's modes say:
/// on a thread in the global mode (the default) a global capture anywhere or a non-relaxed one of
/// this thread's; in the thread-local mode only this thread's non-relaxed ones; in the relaxed
/// mode none.
pub fn check_unsafe_call() -> HipResult {
    let me = this_thread();
    let mode = THREAD_MODE.with(std::cell::Cell::get);
    if mode == MODE_RELAXED {
        return Ok(());
    }
    let mut hit = Vec::new();
    for s in STREAMS.values() {
        if let Some(c) = s.capture.lock().unwrap().as_ref()
            && ((c.thread == me && c.mode != MODE_RELAXED) || (mode == MODE_GLOBAL && c.mode == MODE_GLOBAL))
        {
            hit.push(c.graph);
        }
    }
    for graph in &hit {
        for m in members(*graph) {
            if let Some(c) = m.capture.lock().unwrap().as_mut() {
                c.invalidated = true;
            }
        }
    }
    if hit.is_empty() { Ok(()) } else { Err(CAPTURE_UNSUPPORTED) }
}

/// The calling thread, as [`Capture::thread`] records it.
pub fn this_thread() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() }
}

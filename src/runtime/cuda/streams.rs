//! Streams and stream capture.

use super::CudaRuntime;
use super::status::ERROR_NOT_READY;
use crate::error::{Error, Result};
use crate::runtime::{CaptureMode, Event, Graph, Stream, Streams, common};
use std::ffi::c_int;
use std::ptr::null_mut;

/// `CU_EVENT_DISABLE_TIMING`.
const EVENT_DISABLE_TIMING: u32 = 0x2;

impl Streams for CudaRuntime {
    fn stream_priority_range(&self, device: i32) -> Result<(i32, i32)> {
        self.on_device(device, || {
            let (mut least, mut greatest) = (0, 0);
            // SAFETY: valid out-pointers.
            self.check("cuCtxGetStreamPriorityRange", unsafe { (self.core.cuCtxGetStreamPriorityRange)(&mut least, &mut greatest) })?;
            Ok((least, greatest))
        })
    }

    fn stream_create(&self, device: i32, flags: u32, priority: i32) -> Result<Stream> {
        self.on_device(device, || {
            let mut s = null_mut();
            // SAFETY: valid out-pointer; the driver clamps the priority.
            self.check("cuStreamCreateWithPriority", unsafe { (self.core.cuStreamCreateWithPriority)(&mut s, flags, priority) })?;
            Ok(Stream(s))
        })
    }

    fn stream_destroy(&self, stream: Stream) -> Result<()> {
        // SAFETY: the caller owns the stream, keeps it live until here and gives it up.
        self.call("cuStreamDestroy_v2", || unsafe { (self.core.cuStreamDestroy_v2)(stream.0) })
    }

    fn stream_is_idle(&self, stream: Stream) -> Result<bool> {
        self.contexts.ensure_current(&self.core)?;
        // SAFETY: the caller keeps the stream live (the `Runtime` contract).
        match unsafe { (self.core.cuStreamQuery)(stream.0) } {
            ERROR_NOT_READY => Ok(false),
            rc => self.check("cuStreamQuery", rc).map(|()| true),
        }
    }

    fn stream_synchronize(&self, stream: Stream) -> Result<()> {
        // SAFETY: the caller keeps the stream live.
        self.call("cuStreamSynchronize", || unsafe { (self.core.cuStreamSynchronize)(stream.0) })
    }

    fn stream_flags(&self, stream: Stream) -> Result<u32> {
        let mut flags = 0;
        // SAFETY: a valid out-pointer; the caller keeps the handle live.
        self.call("cuStreamGetFlags", || unsafe { (self.core.cuStreamGetFlags)(stream.0, &mut flags) })?;
        Ok(flags)
    }

    fn stream_priority(&self, stream: Stream) -> Result<i32> {
        let mut priority = 0;
        // SAFETY: a valid out-pointer; the caller keeps the handle live.
        self.call("cuStreamGetPriority", || unsafe { (self.core.cuStreamGetPriority)(stream.0, &mut priority) })?;
        Ok(priority)
    }

    fn begin_capture(&self, stream: Stream, mode: CaptureMode) -> Result<()> {
        // SAFETY: the caller keeps the stream live; the modes have CUDA's values.
        self.call("cuStreamBeginCapture_v2", || unsafe { (self.core.cuStreamBeginCapture_v2)(stream.0, mode as c_int) })
    }

    fn end_capture(&self, stream: Stream) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the handle live.
        self.call("cuStreamEndCapture", || unsafe { (self.core.cuStreamEndCapture)(stream.0, &mut g) })?;
        Ok(Graph(g))
    }

    fn stream_is_capturing(&self, stream: Stream) -> Result<bool> {
        let query = self.capture_query.as_ref().ok_or_else(|| Error::unsupported("the CUDA driver lacks cuStreamIsCapturing"))?;
        let mut status = 0;
        // SAFETY: valid out-pointer; the caller holds the stream.
        self.call("cuStreamIsCapturing", || unsafe { (query.cuStreamIsCapturing)(stream.0, &mut status) })?;
        // CU_STREAM_CAPTURE_STATUS_NONE; active and invalidated captures both still need their end.
        Ok(status != 0)
    }

    fn stream_device(&self, stream: Stream) -> Result<i32> {
        let table = self.stream_device.as_ref().ok_or_else(|| Error::unsupported("the CUDA driver lacks cuStreamGetCtx"))?;
        let mut ctx = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the stream live (the special handles
        // answer with the calling thread's current context).
        self.call("cuStreamGetCtx", || unsafe { (table.cuStreamGetCtx)(stream.0, &mut ctx) })?;
        // SAFETY: a context the driver just reported, current only until the pop below.
        self.check("cuCtxPushCurrent_v2", unsafe { (table.cuCtxPushCurrent_v2)(ctx) })?;
        let mut handle = 0;
        // SAFETY: a valid out-pointer.
        let asked = self.check("cuCtxGetDevice", unsafe { (table.cuCtxGetDevice)(&mut handle) });
        let mut popped = null_mut();
        // SAFETY: a valid out-pointer; pops the context pushed above.
        self.check("cuCtxPopCurrent_v2", unsafe { (table.cuCtxPopCurrent_v2)(&mut popped) })?;
        asked?;
        // `CUdevice` is a handle; the ordinal is the one whose handle it is.
        (0..self.info.device_count)
            .find(|&d| self.device_handle(d).is_ok_and(|h| h == handle))
            .ok_or_else(|| Error::invalid_argument(format!("the stream's context belongs to device handle {handle}, which no ordinal has")))
    }

    fn event_create(&self, device: i32) -> Result<Event> {
        self.on_device(device, || {
            let mut e = null_mut();
            // SAFETY: a valid out-pointer; the flag is CU_EVENT_DISABLE_TIMING.
            self.check("cuEventCreate", unsafe { (self.core.cuEventCreate)(&mut e, EVENT_DISABLE_TIMING) })?;
            Ok(Event(e))
        })
    }

    fn event_destroy(&self, event: Event) -> Result<()> {
        // SAFETY: the caller owns the event and gives it up here.
        self.call("cuEventDestroy_v2", || unsafe { (self.core.cuEventDestroy_v2)(event.0) })
    }

    fn event_record(&self, event: Event, stream: Stream) -> Result<()> {
        // SAFETY: the caller keeps the event and the stream live.
        self.call("cuEventRecord", || self.relaxed(|| unsafe { (self.core.cuEventRecord)(event.0, stream.0) }))
    }

    fn event_is_complete(&self, event: Event) -> Result<bool> {
        self.contexts.ensure_current(&self.core)?;
        // SAFETY: the caller keeps the event live.
        match self.relaxed(|| unsafe { (self.core.cuEventQuery)(event.0) }) {
            ERROR_NOT_READY => Ok(false),
            rc => self.check("cuEventQuery", rc).map(|()| true),
        }
    }

    fn event_synchronize(&self, event: Event) -> Result<()> {
        // SAFETY: the caller keeps the event live.
        self.call("cuEventSynchronize", || unsafe { (self.core.cuEventSynchronize)(event.0) })
    }

    fn relaxed_capture_mode(&self, work: &mut dyn FnMut()) -> Result<()> {
        let Some(table) = &self.thread_mode else {
            return Err(Error::unsupported("this CUDA driver has no cuThreadExchangeStreamCaptureMode"));
        };
        // SAFETY: a valid in/out pointer holding a valid mode.
        let exchange = |mode| unsafe { (table.cuThreadExchangeStreamCaptureMode)(mode) };
        let set = common::only_relaxed(exchange, || {
            work();
            0
        });
        set.map(drop).or_else(|rc| self.check("cuThreadExchangeStreamCaptureMode", rc))
    }

    /// The driver API keeps no last error: its calls return theirs.
    fn keep_last_error(&self, work: &mut dyn FnMut()) -> Result<()> {
        work();
        Ok(())
    }
}

impl CudaRuntime {
    /// Runs `call` (one of the library's event calls, or `relaxed_capture_mode`'s work) with the
    /// calling thread in relaxed capture mode, then gives the thread its mode back. In the global
    /// (default) or thread-local mode an event query counts as unsafe while a capture is in
    /// progress: the runtime fails it and invalidates every global-mode capture in the process or
    /// the thread's own. Relaxed, the library's events (never recorded into a capture) leave the
    /// caller's captures alone. A driver without `cuThreadExchangeStreamCaptureMode` runs `call` as
    /// it is.
    fn relaxed(&self, call: impl FnOnce() -> c_int) -> c_int {
        let Some(table) = &self.thread_mode else { return call() };
        // SAFETY: a valid in/out pointer holding a valid mode.
        common::relaxed(|mode| unsafe { (table.cuThreadExchangeStreamCaptureMode)(mode) }, call)
    }
}

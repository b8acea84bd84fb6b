//! Streams and stream capture.

use super::{HipRuntime, SUCCESS};
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::{CaptureMode, Event, Graph, Stream, Streams, common};
use std::ffi::c_int;
use std::ptr::null_mut;

pub(super) const ERROR_NOT_READY: c_int = 600;
/// `hipStreamCaptureStatusNone`; active and invalidated captures both still need their end.
pub(super) const CAPTURE_STATUS_NONE: c_int = 0;
/// `hipEventDisableTiming`.
pub(super) const EVENT_DISABLE_TIMING: u32 = 0x2;

impl Streams for HipRuntime {
    fn stream_priority_range(&self, device: i32) -> Result<(i32, i32)> {
        self.on_device(device, || {
            let (mut least, mut greatest) = (0, 0);
            // SAFETY: valid out-pointers.
            self.check("hipDeviceGetStreamPriorityRange", unsafe {
                (self.core.hipDeviceGetStreamPriorityRange)(&mut least, &mut greatest)
            })?;
            Ok((least, greatest))
        })
    }

    fn stream_create(&self, device: i32, flags: u32, priority: i32) -> Result<Stream> {
        self.on_device(device, || {
            let mut s = null_mut();
            // SAFETY: a valid out-pointer.
            self.check("hipStreamCreateWithPriority", unsafe { (self.core.hipStreamCreateWithPriority)(&mut s, flags, priority) })?;
            Ok(Stream(s))
        })
    }

    fn stream_destroy(&self, stream: Stream) -> Result<()> {
        // SAFETY: the caller owns the stream, keeps it live until here and gives it up.
        self.check("hipStreamDestroy", unsafe { (self.core.hipStreamDestroy)(stream.0) })
    }

    fn stream_is_idle(&self, stream: Stream) -> Result<bool> {
        // SAFETY: the caller keeps the stream live (the `Runtime` contract).
        match unsafe { (self.core.hipStreamQuery)(stream.0) } {
            ERROR_NOT_READY => Ok(false),
            rc => self.check("hipStreamQuery", rc).map(|()| true),
        }
    }

    fn stream_synchronize(&self, stream: Stream) -> Result<()> {
        // SAFETY: the caller keeps the stream live.
        self.check("hipStreamSynchronize", unsafe { (self.core.hipStreamSynchronize)(stream.0) })
    }

    fn stream_flags(&self, stream: Stream) -> Result<u32> {
        let mut flags = 0;
        // SAFETY: a valid out-pointer; the caller keeps the stream live.
        self.check("hipStreamGetFlags", unsafe { (self.core.hipStreamGetFlags)(stream.0, &mut flags) })?;
        Ok(flags)
    }

    fn stream_priority(&self, stream: Stream) -> Result<i32> {
        let mut priority = 0;
        // SAFETY: a valid out-pointer; the caller keeps the stream live.
        self.check("hipStreamGetPriority", unsafe { (self.core.hipStreamGetPriority)(stream.0, &mut priority) })?;
        Ok(priority)
    }

    fn begin_capture(&self, stream: Stream, mode: CaptureMode) -> Result<()> {
        // SAFETY: the caller keeps the stream live; the modes have HIP's values.
        self.check("hipStreamBeginCapture", unsafe { (self.core.hipStreamBeginCapture)(stream.0, mode as c_int) })
    }

    fn end_capture(&self, stream: Stream) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the stream live.
        self.check("hipStreamEndCapture", unsafe { (self.core.hipStreamEndCapture)(stream.0, &mut g) })?;
        Ok(Graph(g))
    }

    fn stream_is_capturing(&self, stream: Stream) -> Result<bool> {
        let query = self.capture_query.as_ref().ok_or_else(|| Error::unsupported("the HIP runtime lacks hipStreamIsCapturing"))?;
        let mut status = 0;
        // SAFETY: a valid out-pointer; the caller keeps the stream live.
        self.check("hipStreamIsCapturing", unsafe { (query.hipStreamIsCapturing)(stream.0, &mut status) })?;
        Ok(status != CAPTURE_STATUS_NONE)
    }

    fn stream_device(&self, stream: Stream) -> Result<i32> {
        let mut device = 0;
        match &self.stream_device {
            // SAFETY: a valid out-pointer; the caller keeps the stream live (clr answers the null
            // and per-thread handles with the calling thread's current device).
            Some(table) => self.check("hipStreamGetDevice", unsafe { (table.hipStreamGetDevice)(stream.0, &mut device) })?,
            // SAFETY: a valid out-pointer.
            None if stream.is_per_thread_or_default() => self.check("hipGetDevice", unsafe { (self.core.hipGetDevice)(&mut device) })?,
            None => return Err(Error::unsupported("the HIP runtime lacks hipStreamGetDevice (ROCm 5.6+)")),
        }
        Ok(device)
    }

    fn event_create(&self, device: i32) -> Result<Event> {
        self.on_device(device, || {
            let mut e = null_mut();
            // SAFETY: a valid out-pointer; the flag is hipEventDisableTiming.
            self.check("hipEventCreateWithFlags", unsafe { (self.core.hipEventCreateWithFlags)(&mut e, EVENT_DISABLE_TIMING) })?;
            Ok(Event(e))
        })
    }

    fn event_destroy(&self, event: Event) -> Result<()> {
        // SAFETY: the caller owns the event and gives it up here.
        self.check("hipEventDestroy", unsafe { (self.core.hipEventDestroy)(event.0) })
    }

    fn event_record(&self, event: Event, stream: Stream) -> Result<()> {
        // SAFETY: the caller keeps the event and the stream live.
        self.check("hipEventRecord", self.relaxed(|| unsafe { (self.core.hipEventRecord)(event.0, stream.0) }))
    }

    fn event_is_complete(&self, event: Event) -> Result<bool> {
        // SAFETY: the caller keeps the event live.
        match self.relaxed(|| unsafe { (self.core.hipEventQuery)(event.0) }) {
            ERROR_NOT_READY => Ok(false),
            rc => self.check("hipEventQuery", rc).map(|()| true),
        }
    }

    fn event_synchronize(&self, event: Event) -> Result<()> {
        // SAFETY: the caller keeps the event live.
        self.check("hipEventSynchronize", unsafe { (self.core.hipEventSynchronize)(event.0) })
    }

    fn relaxed_capture_mode(&self, work: &mut dyn FnMut()) -> Result<()> {
        let Some(table) = &self.thread_mode else {
            return Err(Error::unsupported("this HIP runtime has no hipThreadExchangeStreamCaptureMode"));
        };
        // SAFETY: a valid in/out pointer holding a valid mode.
        let exchange = |mode| unsafe { (table.hipThreadExchangeStreamCaptureMode)(mode) };
        let set = common::only_relaxed(exchange, || {
            work();
            0
        });
        set.map(drop).or_else(|rc| self.check("hipThreadExchangeStreamCaptureMode", rc))
    }

    fn keep_last_error(&self, work: &mut dyn FnMut()) -> Result<()> {
        let Some(table) = &self.last_error else {
            work();
            return Ok(());
        };
        // SAFETY: no arguments; reads the calling thread's state.
        let peek = || unsafe { (table.hipPeekAtLastError)() };
        let pending = peek();
        if pending != SUCCESS {
            // SAFETY: takes any code and returns a static string (or null, which `text` allows).
            let name = unsafe { common::text((self.core.hipGetErrorName)(pending)) };
            return Err(Error::new(
                ErrorKind::Runtime,
                format!("the calling thread has a HIP error pending, {name} ({pending}), which hipGetLastError has not taken yet"),
            ));
        }
        work();
        if peek() != SUCCESS {
            // SAFETY: as above; returns the library's own error, which it clears.
            unsafe { (table.hipGetLastError)() };
            // Once more, now successful: from 6.4 a peek also stores what it returns as the
            // thread's last call result (`hipExtGetLastError`), which the peek above left at the
            // library's error.
            peek();
        }
        Ok(())
    }
}

impl HipRuntime {
    /// Runs `call` (one of the library's event calls, or `relaxed_capture_mode`'s work) with the
    /// calling thread in relaxed capture mode, then gives the thread its mode back. In the global
    /// (default) or thread-local mode an event query counts as unsafe while a capture is in
    /// progress: the runtime fails it and invalidates every global-mode capture in the process or
    /// the thread's own. Relaxed, the library's events (never recorded into a capture) leave the
    /// caller's captures alone. A runtime without `hipThreadExchangeStreamCaptureMode` runs `call`
    /// as it is.
    fn relaxed(&self, call: impl FnOnce() -> c_int) -> c_int {
        let Some(table) = &self.thread_mode else { return call() };
        // SAFETY: a valid in/out pointer holding a valid mode.
        common::relaxed(|mode| unsafe { (table.hipThreadExchangeStreamCaptureMode)(mode) }, call)
    }
}

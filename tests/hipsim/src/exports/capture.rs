use crate::capture::{Capture, MODE_GLOBAL, MODE_THREAD_LOCAL};
use crate::error::{
    CAPTURE_INVALIDATED, CAPTURE_UNJOINED, CAPTURE_UNMATCHED, CAPTURE_UNSUPPORTED, CAPTURE_WRONG_THREAD, ILLEGAL_STATE, INVALID_VALUE,
};
use crate::ffi::{hip_export, out, out_opt};
use crate::graph;
use crate::stream::{Target, resolve};

const STATUS_NONE: i32 = 0;
const STATUS_ACTIVE: i32 = 1;
const STATUS_INVALIDATED: i32 = 2;

fn status(t: &Target) -> (i32, u64) {
    match t {
        Target::Null(_) => (STATUS_NONE, 0),
        Target::Stream(s) => match s.capture.lock().unwrap().as_ref() {
            None => (STATUS_NONE, 0),
            Some(c) if c.invalidated => (STATUS_INVALIDATED, c.graph as u64),
            Some(c) => (STATUS_ACTIVE, c.graph as u64),
        },
    }
}

hip_export! {
    fn hipStreamBeginCapture(h: usize, mode: i32) {
        let Target::Stream(s) = resolve(h)? else { return Err(CAPTURE_UNSUPPORTED) };
        if !(0..=2).contains(&mode) {
            return Err(INVALID_VALUE);
        }
        let mut cap = s.capture.lock().unwrap();
        if cap.is_some() {
            return Err(ILLEGAL_STATE);
        }
        let g = graph::lock().create(false, false);
        *cap = Some(Capture { mode, thread: crate::capture::this_thread(), graph: g, tips: Vec::new(), origin: true, invalidated: false });
        Ok(())
    }

    fn hipStreamEndCapture(h: usize, g: *mut usize) {
        if g.is_null() {
            return Err(INVALID_VALUE);
        }
        let Target::Stream(s) = resolve(h)? else { return Err(ILLEGAL_STATE) };
        let mut cap = s.capture.lock().unwrap();
        let c = cap.as_ref().ok_or(ILLEGAL_STATE)?;
        if !c.origin {
            return Err(CAPTURE_UNMATCHED);
        }
        if (c.mode == MODE_GLOBAL || c.mode == MODE_THREAD_LOCAL) && c.thread != crate::capture::this_thread() {
            return Err(CAPTURE_WRONG_THREAD);
        }
        let c = cap.take().expect("checked");
        drop(cap);
        crate::capture::end_joined(c.graph);
        // A stream that joined and whose last work the capture's own stream never waited for
        // ends the capture with an error (clr discards nothing then; hipsim discards the graph).
        let failed = if c.invalidated {
            Some(CAPTURE_INVALIDATED)
        } else if !crate::capture::joined(c.graph, &c.tips)? {
            Some(CAPTURE_UNJOINED)
        } else {
            None
        };
        let mut gs = graph::lock();
        if let Some(code) = failed {
            gs.destroy(c.graph)?;
            // SAFETY: the C caller's out-pointer, checked for null above, is writable.
            unsafe { *g = 0 };
            return Err(code);
        }
        gs.set_visible(c.graph);
        // SAFETY: the C caller's out-pointer, checked for null above, is writable.
        unsafe { *g = c.graph };
        Ok(())
    }

    fn hipThreadExchangeStreamCaptureMode(mode: *mut i32) {
        if mode.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's pointer, checked for null above, is readable and writable.
        let asked = unsafe { *mode };
        if !(0..=2).contains(&asked) {
            return Err(INVALID_VALUE);
        }
        // SAFETY: as above.
        unsafe { *mode = crate::capture::exchange_thread_mode(asked) };
        Ok(())
    }

    fn hipStreamIsCapturing(h: usize, st: *mut i32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(st, status(&resolve(h)?).0) }
    }

    fn hipStreamGetCaptureInfo(h: usize, st: *mut i32, id: *mut u64) {
        let (s, i) = status(&resolve(h)?);
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(st, s) }?;
        // SAFETY: the C caller's out-pointer is null (skipped) or writable, as HIP requires.
        unsafe { out_opt(id, i) };
        Ok(())
    }
}

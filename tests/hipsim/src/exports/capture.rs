use crate::capture::{Capture, MODE_GLOBAL, MODE_THREAD_LOCAL};
use crate::error::{
    CAPTURE_INVALIDATED, CAPTURE_UNJOINED, CAPTURE_UNMATCHED, CAPTURE_UNSUPPORTED, CAPTURE_WRONG_THREAD, ILLEGAL_STATE, INVALID_VALUE,
};
use crate::ffi::{hip_export, out, out_opt, slice};
use crate::graph;
use crate::stream::{Target, resolve};

const STATUS_NONE: i32 = 0;
const STATUS_ACTIVE: i32 = 1;
const STATUS_INVALIDATED: i32 = 2;

/// `hipStreamUpdateCaptureDependencies`'s flags.
const ADD_CAPTURE_DEPENDENCIES: u32 = 0;
const SET_CAPTURE_DEPENDENCIES: u32 = 1;

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

    fn hipStreamGetCaptureInfo_v2(
        h: usize,
        st: *mut i32,
        id: *mut u64,
        g: *mut usize,
        deps: *mut *const usize,
        num: *mut usize,
    ) {
        // clr's hipStreamGetCaptureInfo_v2_common: the status always; the rest only while the
        // capture is active. The array is the stream's own list of last nodes, valid until the
        // stream's next captured work or dependency update changes it.
        let t = resolve(h)?;
        let (s, i) = status(&t);
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(st, s) }?;
        if s != STATUS_ACTIVE {
            return Ok(());
        }
        let Target::Stream(stream) = t else { return Ok(()) };
        let cap = stream.capture.lock().unwrap();
        let c = cap.as_ref().expect("the status says it is capturing");
        // SAFETY: each out-pointer is null (skipped) or writable, as HIP requires; the tips stay
        // in the stream's capture until it changes them.
        unsafe {
            out_opt(id, i);
            out_opt(g, c.graph);
            out_opt(deps, c.tips.as_ptr());
            out_opt(num, c.tips.len());
        }
        Ok(())
    }

    fn hipStreamUpdateCaptureDependencies(h: usize, deps: *const usize, n: usize, flags: u32) {
        // clr's ihipStreamUpdateCaptureDependencies: a stream that is not capturing is 401; a
        // flag other than add or set, a null list of some nodes, or a node outside the capture's
        // graph is 1.
        let Target::Stream(s) = resolve(h)? else { return Err(ILLEGAL_STATE) };
        let mut cap = s.capture.lock().unwrap();
        let c = cap.as_mut().ok_or(ILLEGAL_STATE)?;
        if flags != ADD_CAPTURE_DEPENDENCIES && flags != SET_CAPTURE_DEPENDENCIES {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's list holds `n` nodes, as HIP requires (null refused unless 0).
        let deps = unsafe { slice(deps, n) }?;
        let gs = graph::lock();
        if deps.iter().any(|&d| gs.owner_of(d).ok() != Some(c.graph)) {
            return Err(INVALID_VALUE);
        }
        if flags == SET_CAPTURE_DEPENDENCIES {
            c.tips.clear();
        }
        for &d in deps {
            if !c.tips.contains(&d) {
                c.tips.push(d);
            }
        }
        Ok(())
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

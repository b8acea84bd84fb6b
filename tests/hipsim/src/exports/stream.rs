use std::sync::Arc;

use crate::capture;
use crate::device;
use crate::error::{CAPTURE_UNSUPPORTED, HipResult, INVALID_HANDLE, INVALID_VALUE, NOT_READY};
use crate::event::{DISABLE_TIMING, EVENTS, Event};
use crate::ffi::{hip_export, out};
use crate::graph::{MEM_OP_WRITE_VALUE_64, Op};
use crate::knobs;
use crate::memory;
use crate::stream::{self, STREAMS, Target, resolve};

/// # Safety
/// `s` is null or writable.
unsafe fn create(s: *mut usize, flags: u32, priority: i32) -> HipResult {
    if s.is_null() || flags > stream::NON_BLOCKING {
        return Err(INVALID_VALUE);
    }
    let h = stream::create(flags, priority)?;
    // SAFETY: non-null, and writable per the contract.
    unsafe { out(s, h) }
}

/// Synchronizing a capturing stream is illegal and breaks the capture.
fn refuse_if_capturing(t: &Target) -> HipResult {
    if capture::is_capturing(t) {
        capture::invalidate(t);
        return Err(CAPTURE_UNSUPPORTED);
    }
    Ok(())
}

hip_export! {
    fn hipStreamCreate(s: *mut usize) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { create(s, 0, 0) }
    }

    fn hipStreamCreateWithFlags(s: *mut usize, flags: u32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { create(s, flags, 0) }
    }

    fn hipStreamCreateWithPriority(s: *mut usize, flags: u32, priority: i32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { create(s, flags, priority) }
    }

    fn hipStreamDestroy(h: usize) {
        let s = STREAMS.get(h)?;
        stream::destroy(&s);
        STREAMS.remove(h).map(drop)
    }

    fn hipStreamQuery(h: usize) {
        match resolve(h)? {
            Target::Null(_) => Ok(()),
            t @ Target::Stream(_) => {
                refuse_if_capturing(&t)?;
                let Target::Stream(s) = t else { unreachable!() };
                s.query()
            }
        }
    }

    fn hipStreamSynchronize(h: usize) {
        match resolve(h)? {
            Target::Null(d) => {
                stream::drain_blocking(d);
                Ok(())
            }
            t @ Target::Stream(_) => {
                refuse_if_capturing(&t)?;
                let Target::Stream(s) = t else { unreachable!() };
                s.sync()
            }
        }
    }

    fn hipStreamGetFlags(h: usize, flags: *mut u32) {
        match resolve(h)? {
            // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
            Target::Null(_) => unsafe { out(flags, 0) },
            // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
            Target::Stream(s) => unsafe { out(flags, s.flags | crate::knobs::get().stream_flag_bits()) },
        }
    }

    fn hipStreamGetPriority(h: usize, priority: *mut i32) {
        match resolve(h)? {
            // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
            Target::Null(_) => unsafe { out(priority, 0) },
            // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
            Target::Stream(s) => unsafe { out(priority, s.priority) },
        }
    }

    fn hipStreamGetDevice(h: usize, d: *mut i32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(d, resolve(h)?.device()) }
    }

    fn hipStreamWaitEvent(h: usize, e: usize, flags: u32) {
        let t = resolve(h)?;
        let ev = EVENTS.get(e)?;
        if capture::wait_event(&t, &ev, flags)? {
            return Ok(());
        }
        let generation = ev.latest();
        t.submit(Box::new(move || {
            ev.wait_for(generation);
            Ok(())
        }))
    }

    fn hipStreamWriteValue64(h: usize, ptr: *mut std::ffi::c_void, value: u64, flags: u32) {
        let t = resolve(h)?;
        let op = Op::MemOps { ctx: 0, ops: vec![[MEM_OP_WRITE_VALUE_64, ptr as u64, value, u64::from(flags), 0, 0]], flags: 0 };
        if knobs::get().clr_stream_memops() {
            return capture::submit_uncaptured(&t, op);
        }
        capture::submit(&t, op)
    }

    fn hipLaunchHostFunc(h: usize, func: Option<unsafe extern "C" fn(*mut std::ffi::c_void)>, user: *mut std::ffi::c_void) {
        let func = func.ok_or(INVALID_VALUE)?;
        capture::submit(&resolve(h)?, Op::Host { func, user: user as usize })
    }

    fn hipStreamWaitValue64(h: usize, ptr: *mut std::ffi::c_void, value: u64, flags: u32, mask: u64) {
        let t = resolve(h)?;
        if flags > 3 {
            return Err(INVALID_VALUE);
        }
        if capture::is_capturing(&t) && !knobs::get().clr_stream_memops() {
            return Err(CAPTURE_UNSUPPORTED);
        }
        let dev = t.device();
        let addr = ptr as u64;
        t.submit(Box::new(move || memory::wait_value(dev, addr, 8, value, flags, mask)))
    }

    fn hipEventCreate(e: *mut usize) {
        if e.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(e, EVENTS.insert(Event::new(0, device::current()?))) }
    }

    fn hipEventCreateWithFlags(e: *mut usize, flags: u32) {
        if e.is_null() || flags & !0x7 != 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(e, EVENTS.insert(Event::new(flags, device::current()?))) }
    }

    fn hipEventDestroy(e: usize) {
        EVENTS.remove(e).map(drop)
    }

    fn hipEventRecord(e: usize, h: usize) {
        let ev = EVENTS.get(e)?;
        let t = resolve(h)?;
        if capture::record_event(&t, &ev)? {
            return Ok(());
        }
        // clr's hipEventRecord: an event of another device than the stream's is refused.
        if ev.device != t.device() {
            return Err(INVALID_HANDLE);
        }
        let generation = ev.begin_record();
        t.submit(Box::new(move || {
            ev.complete(generation);
            Ok(())
        }))
    }

    fn hipEventSynchronize(e: usize) {
        let ev = EVENTS.get(e)?;
        ev.wait_for(ev.latest());
        Ok(())
    }

    fn hipEventQuery(e: usize) {
        let event = EVENTS.get(e)?;
        crate::capture::check_unsafe_call()?;
        if event.is_done() { Ok(()) } else { Err(NOT_READY) }
    }

    fn hipEventElapsedTime(ms: *mut f32, start: usize, stop: usize) {
        let (a, b): (Arc<Event>, Arc<Event>) = (EVENTS.get(start)?, EVENTS.get(stop)?);
        if (a.flags | b.flags) & DISABLE_TIMING != 0 {
            return Err(INVALID_HANDLE);
        }
        match (a.time(), b.time()) {
            (Some(Some(ta)), Some(Some(tb))) => {
                let d = if tb >= ta { (tb - ta).as_secs_f64() } else { -(ta - tb).as_secs_f64() };
                // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
                unsafe { out(ms, (d * 1e3) as f32) }
            }
            (Some(None), _) | (_, Some(None)) => Err(INVALID_HANDLE),
            _ => Err(NOT_READY),
        }
    }
}

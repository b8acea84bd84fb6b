//! Primary contexts: the driver API has no "current device", so the library retains each
//! device's primary context (on first use, so an eight-GPU host pays only for the devices it
//! touches) and makes one current on every thread that calls in.

use super::api::Core;
use super::status::check;
use crate::error::{Error, Result};
use once_cell::sync::OnceCell;
use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::null_mut;

type P = *mut c_void;

/// A retained primary context; never released (the runtime lives for the process).
struct Ctx(P);
// SAFETY: a CUcontext may be made current on any thread, and a retained primary context lives
// for the process.
unsafe impl Send for Ctx {}
// SAFETY: as for `Send`; the handle is only passed to the driver, never dereferenced here.
unsafe impl Sync for Ctx {}

pub struct Contexts {
    primary: Vec<OnceCell<Ctx>>,
}

thread_local! {
    /// Whether this thread is known to have a current context (ours or its own).
    static BOUND: Cell<bool> = const { Cell::new(false) };
}

impl Contexts {
    pub fn new(device_count: i32) -> Self {
        Self { primary: (0..device_count).map(|_| OnceCell::new()).collect() }
    }

    pub fn check_device(&self, device: i32) -> Result<usize> {
        usize::try_from(device)
            .ok()
            .filter(|&d| d < self.primary.len())
            .ok_or_else(|| Error::invalid_argument(format!("device {device} does not exist ({} device(s))", self.primary.len())))
    }

    /// The primary context of `device`, retained on first use.
    pub fn primary(&self, core: &Core, device: i32) -> Result<P> {
        let index = self.check_device(device)?;
        self.primary[index]
            .get_or_try_init(|| {
                let mut handle = 0;
                // SAFETY: valid out-pointer; the ordinal was range-checked.
                check(core, "cuDeviceGet", unsafe { (core.cuDeviceGet)(&mut handle, device) })?;
                let mut ctx = null_mut();
                // SAFETY: valid out-pointer and device handle.
                check(core, "cuDevicePrimaryCtxRetain", unsafe { (core.cuDevicePrimaryCtxRetain)(&mut ctx, handle) })?;
                Ok(Ctx(ctx))
            })
            .map(|c| c.0)
    }

    /// Makes sure the calling thread has a current context: the caller's own if it set one,
    /// else device 0's primary context. Checked once per thread.
    pub fn ensure_current(&self, core: &Core) -> Result<()> {
        if BOUND.get() {
            return Ok(());
        }
        let mut current = null_mut();
        // SAFETY: valid out-pointer.
        check(core, "cuCtxGetCurrent", unsafe { (core.cuCtxGetCurrent)(&mut current) })?;
        if current.is_null() {
            let ctx = self.primary(core, 0)?;
            // SAFETY: a retained primary context.
            check(core, "cuCtxSetCurrent", unsafe { (core.cuCtxSetCurrent)(ctx) })?;
        }
        BOUND.set(true);
        Ok(())
    }

    /// The context current on this thread (after `ensure_current`), for calls that take one.
    pub fn current(&self, core: &Core) -> Result<P> {
        self.ensure_current(core)?;
        let mut current = null_mut();
        // SAFETY: valid out-pointer.
        check(core, "cuCtxGetCurrent", unsafe { (core.cuCtxGetCurrent)(&mut current) })?;
        Ok(current)
    }

    /// Runs `f` with `device`'s primary context current, then gives the thread back the
    /// context it had (or leaves ours current when it had none).
    pub fn on_device<T>(&self, core: &Core, device: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let ctx = self.primary(core, device)?;
        let mut previous = null_mut();
        // SAFETY: valid out-pointer.
        check(core, "cuCtxGetCurrent", unsafe { (core.cuCtxGetCurrent)(&mut previous) })?;
        if previous == ctx {
            return f();
        }
        // SAFETY: a retained primary context.
        check(core, "cuCtxSetCurrent", unsafe { (core.cuCtxSetCurrent)(ctx) })?;
        let out = f();
        if previous.is_null() {
            BOUND.set(true);
        } else {
            // SAFETY: restores the context the driver reported as current.
            unsafe { (core.cuCtxSetCurrent)(previous) };
        }
        out
    }
}

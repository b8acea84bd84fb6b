//! What both backends do the same way around their own entry points: handle arrays, error
//! messages and module images. HIP and the CUDA driver share the shapes of these calls and the
//! error numbers the library tells apart, so each piece exists once, here.

use super::{CaptureMode, Edge, HostNode, MemOp, MemOpNode, Node, NodeType};
use crate::counters::{self, Event, Fallback};
use crate::error::{Error, ErrorKind};
use std::borrow::Cow;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::ptr::null;

pub type P = *mut c_void;

/// A dependency list as both runtimes take it: null and 0 for none, else the nodes in place
/// (`Node` is a transparent `P`).
pub fn dependencies(deps: &[Node]) -> (*const P, usize) {
    if deps.is_empty() { (null(), 0) } else { (deps.as_ptr().cast::<P>(), deps.len()) }
}

/// The `from` and `to` arrays of an edge list, as the add-dependency calls take them.
pub fn edge_ends(edges: &[Edge]) -> (Vec<P>, Vec<P>) {
    edges.iter().map(|e| (e.from.0, e.to.0)).unzip()
}

/// Runs `call` (the library's own event calls) with the calling thread in relaxed capture mode,
/// set through `exchange` (the runtime's `ThreadExchangeStreamCaptureMode`), then gives the thread
/// its mode back; when the mode cannot be set, `call` runs as it is. A failed give-back is tried once more: a thread left relaxed no
/// longer has its unsafe calls during a capture refused, so a second failure is logged at warn and
/// counted (`capture_mode_left_relaxed`, process totals).
pub fn relaxed(exchange: impl Fn(*mut c_int) -> c_int, call: impl FnOnce() -> c_int) -> c_int {
    let mut call = Some(call);
    let mut run = || call.take().map_or(0, |call| call());
    match only_relaxed(exchange, &mut run) {
        Ok(rc) => rc,
        Err(_) => run(),
    }
}

/// [`relaxed`], but where the mode cannot be set `call` is not made (the update budget's probe,
/// whose allocation would invalidate a capture in progress): `Err` holds the exchange's error.
pub fn only_relaxed(exchange: impl Fn(*mut c_int) -> c_int, call: impl FnOnce() -> c_int) -> std::result::Result<c_int, c_int> {
    let mut mode = CaptureMode::Relaxed as c_int;
    let set = exchange(&mut mode);
    if set != 0 {
        return Err(set);
    }
    // Given back when dropped: after `call`, and also where it panics (the panic is caught at the
    // C boundary, and the thread goes on calling the runtime).
    let _give_back = GiveBack { exchange: &exchange, own: mode };
    Ok(call())
}

/// Gives the calling thread its capture mode `own` back through `exchange` when dropped.
struct GiveBack<'a, F: Fn(*mut c_int) -> c_int> {
    exchange: &'a F,
    own: c_int,
}

impl<F: Fn(*mut c_int) -> c_int> Drop for GiveBack<'_, F> {
    fn drop(&mut self) {
        let mut failed = 0;
        for _ in 0..2 {
            let mut back = self.own;
            failed = (self.exchange)(&mut back);
            if failed == 0 {
                return;
            }
        }
        log::warn!(
            "giving the calling thread its stream capture mode ({}) back after the library's own calls failed twice (error {failed}): the thread stays in relaxed mode",
            self.own
        );
        counters::record_total(Event::Fallback(Fallback::CaptureModeLeftRelaxed));
    }
}

/// The error codes told apart. Both runtimes number them alike (HIP copied CUDA's codes).
pub const ERROR_OUT_OF_MEMORY: c_int = 2;
pub const ERROR_NO_DEVICE: c_int = 100;
pub const ERROR_NOT_SUPPORTED: c_int = 801;

/// The error for a failed call.
pub fn error(call: &'static str, rc: c_int, name: &str, description: &str) -> Error {
    let kind = match rc {
        ERROR_OUT_OF_MEMORY => ErrorKind::OutOfMemory,
        ERROR_NO_DEVICE => ErrorKind::NoDevice,
        ERROR_NOT_SUPPORTED => ErrorKind::Unsupported,
        _ => ErrorKind::Runtime,
    };
    Error::new(kind, format!("{call} failed: {name} ({rc}): {description}"))
}

/// A runtime's error name or description; `?` when it has none.
///
/// # Safety
/// `p` is null or a NUL-terminated string that stays valid (the runtimes return static ones).
pub unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::from("?")
    } else {
        // SAFETY: non-null, and NUL-terminated and live per the contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// A module image as both runtimes read it: a text image (PTX, the software GPU's image name) ends
/// at its NUL, so one is appended when missing; a binary image is unaffected by a trailing NUL.
pub fn nul_terminated(image: &[u8]) -> Cow<'_, [u8]> {
    if image.ends_with(&[0]) {
        Cow::Borrowed(image)
    } else {
        let mut owned = image.to_vec();
        owned.push(0);
        Cow::Owned(owned)
    }
}

/// Graph node types in the numbering CUDA uses and HIP follows from ROCm 5.3, up to the memory
/// free node (11); past it they differ (CUDA: 12 stream memory operations, 13 conditional; HIP:
/// 12 and 13 copies from and to a symbol, 14 stream memory operations), which `mem_op` and
/// `conditional` give.
pub fn node_type(raw: c_int, mem_op: c_int, conditional: Option<c_int>) -> NodeType {
    match raw {
        0 => NodeType::Kernel,
        1 => NodeType::Memcpy,
        2 => NodeType::Memset,
        3 => NodeType::Host,
        4 => NodeType::Child,
        5 => NodeType::Empty,
        6 => NodeType::EventWait,
        7 => NodeType::EventRecord,
        10 => NodeType::MemAlloc,
        11 => NodeType::MemFree,
        raw if raw == mem_op => NodeType::MemOp,
        raw if Some(raw) == conditional => NodeType::Conditional,
        other => NodeType::Other(other),
    }
}

/// `CUDA_HOST_NODE_PARAMS` and `hipHostNodeParams`, the same two fields in both.
#[repr(C)]
pub struct HostNodeParams {
    pub function: Option<unsafe extern "C" fn(*mut c_void)>,
    pub user_data: P,
}

impl HostNodeParams {
    pub fn of(h: &HostNode) -> Self {
        Self { function: Some(h.function), user_data: h.user_data }
    }

    /// The node's parameters; `None` when the runtime reported no function.
    pub fn read(&self) -> Option<HostNode> {
        self.function.map(|function| HostNode { function, user_data: self.user_data })
    }
}

/// `CUDA_BATCH_MEM_OP_NODE_PARAMS` and `hipBatchMemOpNodeParams`, the same four fields in both.
#[repr(C)]
pub struct BatchMemOpNodeParams {
    pub context: P,
    pub count: c_uint,
    pub ops: *mut MemOp,
    pub flags: c_uint,
}

impl BatchMemOpNodeParams {
    /// Parameters that point into `node`'s operations, for an add call that copies them.
    pub fn of(node: &MemOpNode) -> Self {
        Self { context: node.context as P, count: node.ops.len() as c_uint, ops: node.ops.as_ptr().cast_mut(), flags: node.flags }
    }

    pub fn zeroed() -> Self {
        Self { context: std::ptr::null_mut(), count: 0, ops: std::ptr::null_mut(), flags: 0 }
    }

    /// Copies the parameters out of a node's own array.
    ///
    /// # Safety
    /// `ops` is null or points at `count` operations the runtime keeps for the call's duration.
    pub unsafe fn read(&self) -> MemOpNode {
        let ops = if self.ops.is_null() || self.count == 0 {
            Vec::new()
        } else {
            // SAFETY: per the contract.
            unsafe { std::slice::from_raw_parts(self.ops, self.count as usize) }.to_vec()
        };
        MemOpNode { context: self.context as usize, ops, flags: self.flags }
    }
}

const _: () = {
    assert!(std::mem::size_of::<MemOp>() == 48);
    assert!(std::mem::size_of::<HostNodeParams>() == 16);
    assert!(std::mem::size_of::<BatchMemOpNodeParams>() == 32);
    assert!(std::mem::offset_of!(BatchMemOpNodeParams, ops) == 16);
};

/// The [`Runtime`](super::Runtime) impl of a backend struct with fields `info`, `vmm` and
/// `memops` (each optional feature a [`Feature`](super::symbols::Feature)) that implements every
/// sub-trait itself: an optional feature is handed out only while its table is present.
macro_rules! impl_runtime {
    ($backend:ty) => {
        impl Runtime for $backend {
            fn info(&self) -> &RuntimeInfo {
                &self.info
            }

            fn vmm(&self) -> Result<&dyn Vmm> {
                self.vmm.get()?;
                Ok(self)
            }

            fn stream_memory(&self) -> Result<&dyn StreamMemory> {
                self.memops.get()?;
                Ok(self)
            }

            fn direct(&self) -> &dyn Direct {
                self
            }
        }
    };
}

pub(crate) use impl_runtime;

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A thread's capture mode and the runtime's exchange call on it.
    fn exchange(mode: &Cell<c_int>) -> impl Fn(*mut c_int) -> c_int + '_ {
        // SAFETY: the callers pass a pointer to a local.
        move |p| unsafe {
            *p = mode.replace(*p);
            0
        }
    }

    #[test]
    fn the_mode_is_given_back_after_the_call_and_after_a_panic_in_it() {
        let mode = Cell::new(CaptureMode::Global as c_int);
        let seen = Cell::new(-1);
        assert_eq!(
            only_relaxed(exchange(&mode), || {
                seen.set(mode.get());
                7
            }),
            Ok(7)
        );
        assert_eq!((seen.get(), mode.get()), (CaptureMode::Relaxed as c_int, CaptureMode::Global as c_int));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            only_relaxed(exchange(&mode), || panic!("a bug in the library's own calls"))
        }));
        assert!(panicked.is_err());
        assert_eq!(mode.get(), CaptureMode::Global as c_int, "the thread is not left relaxed");
    }
}

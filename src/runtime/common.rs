//! What both backends do the same way around their own entry points: handle arrays, error
//! messages and module images. HIP and the CUDA driver share the shapes of these calls and the
//! error numbers the library tells apart, so each piece exists once, here.

use super::{Edge, Node, NodeType};
use crate::error::{Error, ErrorKind};
use std::borrow::Cow;
use std::ffi::{CStr, c_char, c_int, c_void};
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

/// Graph node types in the numbering CUDA uses and HIP follows from ROCm 5.3; the two differ only
/// in the number of a stream memory operation (`mem_op`).
pub fn node_type(raw: c_int, mem_op: c_int) -> NodeType {
    match raw {
        0 => NodeType::Kernel,
        1 => NodeType::Memcpy,
        2 => NodeType::Memset,
        3 => NodeType::Host,
        4 => NodeType::Child,
        5 => NodeType::Empty,
        6 => NodeType::EventWait,
        7 => NodeType::EventRecord,
        raw if raw == mem_op => NodeType::MemOp,
        other => NodeType::Other(other),
    }
}

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

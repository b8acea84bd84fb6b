//! Vendor-neutral handles and parameter structs that cross the [`Runtime`](super::Runtime)
//! interface. Handles are opaque values owned by the runtime; they are `Copy` and carry no
//! lifetime, so whoever creates one is responsible for destroying it.

use std::ffi::c_void;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(transparent)]
        pub struct $name(pub *mut c_void);
        // SAFETY: a handle is an opaque identifier that this crate never dereferences; HIP and
        // CUDA accept their handles from any thread (a stream's or graph's own thread rules are
        // the caller's, as they are in C).
        unsafe impl Send for $name {}
        // SAFETY: as for `Send`: sharing the identifier shares no memory.
        unsafe impl Sync for $name {}
        impl $name {
            pub fn is_null(self) -> bool {
                self.0.is_null()
            }
        }
    };
}

handle!(/// `hipStream_t` / `CUstream`; null is the legacy default stream.
    Stream);

impl Stream {
    /// The legacy default stream (null, and CUDA's `CU_STREAM_LEGACY` = 1) and the per-thread
    /// default stream (`hipStreamPerThread` / `CU_STREAM_PER_THREAD` = 2): one handle value
    /// that names another stream on another thread or under another current device.
    pub fn is_per_thread_or_default(self) -> bool {
        (self.0 as usize) <= 2
    }
}

handle!(/// `hipGraph_t` / `CUgraph`.
    Graph);
handle!(/// `hipGraphNode_t` / `CUgraphNode`.
    Node);
handle!(/// `hipGraphExec_t` / `CUgraphExec`.
    Exec);
handle!(/// `hipEvent_t` / `CUevent`, created without timing.
    Event);
handle!(/// `hipModule_t` / `CUmodule`.
    Module);
handle!(/// `hipFunction_t` / `CUfunction`.
    Function);
handle!(/// `hipMemGenericAllocationHandle_t` / `CUmemGenericAllocationHandle`.
    PhysicalMem);

/// A device address (`hipDeviceptr_t` / `CUdeviceptr`).
pub type DevicePtr = u64;

/// Which vendor runtime is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Hip,
    Cuda,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Hip => "hip",
            Backend::Cuda => "cuda",
        }
    }
}

/// What was loaded, for logs and for `rcb_runtime_info`.
#[derive(Clone, Debug)]
pub struct RuntimeInfo {
    pub backend: Backend,
    /// The library file or soname that was opened.
    pub library: String,
    /// `hipRuntimeGetVersion` (major*10^7 + minor*10^5 + patch) or `cuDriverGetVersion`.
    pub version: i32,
    pub device_count: i32,
    /// Optional features that are off, each with the reason (missing symbol, old runtime).
    pub disabled_features: Vec<String>,
}

/// A kernel launch or kernel node: the arguments are one packed blob (natural alignment, no tail
/// padding), passed extra-style.
#[derive(Clone, Copy, Debug)]
pub struct KernelParams<'a> {
    pub function: Function,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub args: &'a [u8],
}

/// A kernel node whose arguments are passed `kernelParams`-style: one pointer per argument, which
/// the runtime follows during the call, sizing each argument from the kernel's own metadata (the
/// caller need not know the sizes). The runtime copies the values; nothing is kept.
#[derive(Clone, Copy, Debug)]
pub struct KernelParamPointers {
    pub function: Function,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    /// One pointer per kernel argument, valid for the call; null for a kernel without arguments.
    pub params: *mut *mut c_void,
}

/// A memset node: `width` elements of `element_size` bytes (1, 2 or 4) per row, `height` rows
/// `pitch` bytes apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemsetParams {
    pub dst: DevicePtr,
    pub value: u32,
    pub element_size: u32,
    pub width: usize,
    pub height: usize,
    pub pitch: usize,
}

/// A 1-D memcpy node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemcpyParams {
    pub dst: DevicePtr,
    pub src: DevicePtr,
    pub bytes: usize,
}

/// How far a memcpy node's parameters read back from the runtime (`memcpy_node_read`) can be
/// trusted. The texts say why, naming the runtime and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemcpyReadBack {
    /// Always the node's current parameters (CUDA).
    Reliable,
    /// The parameters the node was created with: right unless the node (or the one it was
    /// cloned from) was changed since through the runtime's 1-D setter (HIP 7.2).
    AsCreated(String),
    /// Never to be trusted: the runtime may not have filled them at all (HIP before 7.2), or how
    /// it fills them has not been read (HIP after 7.2).
    Never(String),
}

/// Graph node types, normalised across runtime versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeType {
    Kernel,
    Memcpy,
    Memset,
    Host,
    Child,
    Empty,
    EventWait,
    EventRecord,
    /// Stream memory operations (a captured stream write).
    MemOp,
    /// Anything else, with the runtime's raw number.
    Other(i32),
}

/// Opaque per-edge data (CUDA's `CUgraphEdgeData`, 8 bytes); all zero for a plain edge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EdgeData(pub [u8; 8]);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: Node,
    pub to: Node,
    pub data: EdgeData,
}

/// A kernel node read back from a graph the library did not build (for flattening).
#[derive(Clone, Debug)]
pub struct KernelNodeRead {
    pub function: Function,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    /// The packed arguments, or why they cannot be known (no parameter layout, an `extra` that is
    /// not a launch-parameter list).
    pub args: Result<Vec<u8>, String>,
}

/// Stream capture modes (equal on HIP and CUDA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    Global = 0,
    ThreadLocal = 1,
    Relaxed = 2,
}

/// Eight bytes of host-visible memory that the GPU writes in stream order (HIP signal memory,
/// CUDA pinned mapped memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signal {
    /// Where the host reads the value (an acquire load).
    pub host: *mut u64,
    /// Where the GPU writes it.
    pub device: DevicePtr,
}

// SAFETY: `host` points at runtime-owned memory that lives until `signal_free` and is only read
// atomically (see `vmm_pool::timeline`); `device` is an address. Neither is tied to a thread.
unsafe impl Send for Signal {}
// SAFETY: as for `Send`.
unsafe impl Sync for Signal {}

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
    /// Stream memory operations (CUDA's batch memory-operation node, a captured stream write or
    /// wait; HIP's from 6.4, made only by `hipGraphAddBatchMemOpNode`).
    MemOp,
    /// A memory allocation node (`cuGraphAddMemAllocNode`, a captured `cuMemAllocAsync`).
    MemAlloc,
    /// A memory free node.
    MemFree,
    /// A conditional node (CUDA 12.3+: IF, WHILE, SWITCH); HIP has none.
    Conditional,
    /// Anything else, with the runtime's raw number.
    Other(i32),
}

/// A host node: the function the runtime calls on a host thread with `user_data`.
#[derive(Clone, Copy, Debug)]
pub struct HostNode {
    pub function: unsafe extern "C" fn(*mut c_void),
    pub user_data: *mut c_void,
}

impl PartialEq for HostNode {
    /// The same function (by address, which is what the runtime calls) and the same user data.
    fn eq(&self, other: &Self) -> bool {
        std::ptr::fn_addr_eq(self.function, other.function) && self.user_data == other.user_data
    }
}

impl Eq for HostNode {}

// SAFETY: the function and its user data are the caller's, who gave them to a graph that any
// thread may launch; the library only copies them into another node.
unsafe impl Send for HostNode {}
// SAFETY: as for `Send`.
unsafe impl Sync for HostNode {}

/// One stream memory operation as both runtimes lay it out (`CUstreamBatchMemOpParams`,
/// `hipStreamBatchMemOpParams`: a 48-byte union whose first word is the operation), kept as
/// the bytes the runtime reported so that a copy means exactly what the original means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct MemOp(pub [u64; 6]);

impl MemOp {
    /// `*_STREAM_MEM_OP_WAIT_VALUE_32`, `_WRITE_VALUE_32`, `_WAIT_VALUE_64`, `_WRITE_VALUE_64`:
    /// the operations with an address (at byte 8), equal in CUDA and HIP.
    const WITH_ADDRESS: [u32; 4] = [1, 2, 4, 5];
    /// `*_STREAM_MEM_OP_FLUSH_REMOTE_WRITES` and CUDA's `_BARRIER`: no address.
    const WITHOUT_ADDRESS: [u32; 2] = [3, 6];

    pub fn operation(&self) -> u32 {
        self.0[0] as u32
    }

    /// The device address the operation reads or writes; `None` for one without an address.
    /// `Err` for an operation neither runtime documents.
    pub fn address(&self) -> Result<Option<DevicePtr>, u32> {
        match self.operation() {
            op if Self::WITH_ADDRESS.contains(&op) => Ok(Some(self.0[1])),
            op if Self::WITHOUT_ADDRESS.contains(&op) => Ok(None),
            op => Err(op),
        }
    }
}

/// A stream memory-operation node (`CUDA_BATCH_MEM_OP_NODE_PARAMS`,
/// `hipBatchMemOpNodeParams`): its context, operations and flags, as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemOpNode {
    /// The context the operations run in (`CUcontext`; HIP's `hipCtx_t`), an opaque handle.
    pub context: usize,
    pub ops: Vec<MemOp>,
    pub flags: u32,
}

impl MemOpNode {
    /// The addresses the operations touch, or the first operation neither runtime documents.
    pub fn addresses(&self) -> Result<Vec<DevicePtr>, u32> {
        let mut out = Vec::new();
        for op in &self.ops {
            out.extend(op.address()?);
        }
        Ok(out)
    }
}

/// The kind of memory an address lies in, as far as an executable graph's memcpy node cares:
/// CUDA's `cuGraphExecMemcpyNodeSetParams` refuses new operands of another kind or device than
/// the node was instantiated with (see `Graphs::memory_class`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryClass {
    /// An ordinary device allocation (`cuMemAlloc`) or managed memory, on this device, allocated
    /// in this context (`CUcontext`, as an integer): the setter wants new operands "allocated
    /// from the same contexts as the original" (see `cmdbuf/memcpy_class.rs`).
    Plain { device: i32, context: u64 },
    /// Memory mapped through the virtual memory API (`cuMemCreate` + `cuMemMap`) or from a
    /// stream-ordered pool (`cuMemAllocAsync`), on this device.
    Mapped { device: i32 },
    /// Neither, or the runtime could not say.
    Other,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_operations_give_their_addresses_and_refuse_unknown_ones() {
        let op = |kind: u64, address: u64| MemOp([kind, address, 7, 0, 0, 0]);
        let node = |ops: Vec<MemOp>| MemOpNode { context: 0, ops, flags: 0 };
        // Waits and writes of 32 and 64 bits carry an address; a flush and a barrier do not.
        let ops = vec![op(1, 0x10), op(2, 0x20), op(3, 0x30), op(4, 0x40), op(5, 0x50), op(6, 0x60)];
        assert_eq!(node(ops).addresses(), Ok(vec![0x10, 0x20, 0x40, 0x50]));
        assert_eq!(node(vec![op(5, 0x50), op(9, 0x90)]).addresses(), Err(9));
        // The operation is the union's first 32 bits; the padding after it is not read.
        assert_eq!(MemOp([5 | 0xFFFF_FFFF_0000_0000, 0x50, 0, 0, 0, 0]).address(), Ok(Some(0x50)));
    }
}

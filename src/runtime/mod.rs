//! The GPU runtime underneath everything: one [`Runtime`] interface, one implementation per
//! vendor (`hip/`, `cuda/`), each a table of function pointers loaded once with `libloading`.
//!
//! Nothing above this module knows which vendor runs underneath. The process has one runtime,
//! chosen by `RCB_BACKEND` on first use and kept for the life of the process (never unloaded,
//! so function pointers stay valid).

mod cuda;
mod extra;
mod hip;
mod symbols;
mod types;

pub use types::*;

use crate::config::{self, BackendChoice};
use crate::error::{Error, ErrorKind, Result};
use once_cell::sync::OnceCell;

/// Everything the library asks of a GPU runtime. Methods that create something on a device take
/// the device and leave the calling thread's current device as they found it.
///
/// Thread-safety: every method may be called from any thread.
pub trait Runtime: Send + Sync {
    fn info(&self) -> &RuntimeInfo;

    // Devices.
    fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool>;
    /// `(least, greatest)` stream priority; numerically lower is higher priority.
    fn stream_priority_range(&self, device: i32) -> Result<(i32, i32)>;

    // Memory.
    fn malloc(&self, device: i32, bytes: usize) -> Result<DevicePtr>;
    fn free(&self, ptr: DevicePtr) -> Result<()>;
    /// Synchronous host-to-device copy.
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Synchronous device-to-host copy.
    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()>;
    fn copy_device_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream) -> Result<()>;

    // Streams.
    fn stream_create(&self, device: i32, flags: u32, priority: i32) -> Result<Stream>;
    fn stream_destroy(&self, stream: Stream) -> Result<()>;
    /// `Ok(true)` when all work on the stream has finished, `Ok(false)` while some is pending.
    fn stream_is_idle(&self, stream: Stream) -> Result<bool>;
    fn stream_synchronize(&self, stream: Stream) -> Result<()>;
    fn stream_flags(&self, stream: Stream) -> Result<u32>;
    fn stream_priority(&self, stream: Stream) -> Result<i32>;

    // Modules and kernels.
    fn module_load(&self, device: i32, image: &[u8]) -> Result<Module>;
    fn module_unload(&self, module: Module) -> Result<()>;
    fn module_function(&self, module: Module, name: &str) -> Result<Function>;
    fn launch_kernel(&self, kernel: &KernelParams<'_>, stream: Stream) -> Result<()>;

    // Graphs (templates).
    fn graph_create(&self) -> Result<Graph>;
    fn graph_destroy(&self, graph: Graph) -> Result<()>;
    fn add_kernel_node(&self, graph: Graph, deps: &[Node], kernel: &KernelParams<'_>) -> Result<Node>;
    /// Adds a kernel node whose arguments the runtime copies through `kernel.params` during the
    /// call (`kernelParams`, no `extra`).
    fn add_kernel_node_by_pointers(&self, graph: Graph, deps: &[Node], kernel: &KernelParamPointers) -> Result<Node>;
    fn add_memcpy_node(&self, graph: Graph, deps: &[Node], copy: &MemcpyParams) -> Result<Node>;
    fn add_memset_node(&self, graph: Graph, deps: &[Node], set: &MemsetParams) -> Result<Node>;
    fn add_empty_node(&self, graph: Graph, deps: &[Node]) -> Result<Node>;
    /// Adds a child node holding a clone of `child`.
    fn add_child_node(&self, graph: Graph, deps: &[Node], child: Graph) -> Result<Node>;
    fn add_edges(&self, graph: Graph, edges: &[Edge]) -> Result<()>;
    fn graph_nodes(&self, graph: Graph) -> Result<Vec<Node>>;
    fn graph_edges(&self, graph: Graph) -> Result<Vec<Edge>>;
    fn node_type(&self, node: Node) -> Result<NodeType>;
    fn kernel_node_read(&self, node: Node) -> Result<KernelNodeRead>;
    /// Copies launch attributes (clusters, priorities, ...) from `src` to `dst`; a runtime that
    /// has no node attributes has nothing to copy.
    fn copy_kernel_node_attributes(&self, dst: Node, src: Node) -> Result<()>;
    fn memcpy_node_read(&self, node: Node) -> Result<MemcpyParams>;
    fn memset_node_read(&self, node: Node) -> Result<MemsetParams>;
    /// The graph embedded in a child node (owned by the node).
    fn child_node_graph(&self, node: Node) -> Result<Graph>;
    fn kernel_node_set(&self, node: Node, kernel: &KernelParams<'_>) -> Result<()>;
    fn kernel_node_set_by_pointers(&self, node: Node, kernel: &KernelParamPointers) -> Result<()>;
    fn memcpy_node_set(&self, node: Node, copy: &MemcpyParams) -> Result<()>;
    fn memset_node_set(&self, node: Node, set: &MemsetParams) -> Result<()>;

    // Executable graphs.
    fn instantiate(&self, graph: Graph) -> Result<Exec>;
    fn exec_destroy(&self, exec: Exec) -> Result<()>;
    fn exec_kernel_node_set(&self, exec: Exec, node: Node, kernel: &KernelParams<'_>) -> Result<()>;
    fn exec_kernel_node_set_by_pointers(&self, exec: Exec, node: Node, kernel: &KernelParamPointers) -> Result<()>;
    fn exec_memcpy_node_set(&self, exec: Exec, node: Node, copy: &MemcpyParams) -> Result<()>;
    fn exec_memset_node_set(&self, exec: Exec, node: Node, set: &MemsetParams) -> Result<()>;
    fn exec_child_node_set(&self, exec: Exec, node: Node, child: Graph) -> Result<()>;
    /// Whole-graph update; fails when the topology differs.
    fn exec_update(&self, exec: Exec, graph: Graph) -> Result<()>;
    fn graph_launch(&self, exec: Exec, stream: Stream) -> Result<()>;

    // Stream capture.
    fn begin_capture(&self, stream: Stream, mode: CaptureMode) -> Result<()>;
    fn end_capture(&self, stream: Stream) -> Result<Graph>;
    /// Whether `stream` is in capture mode; an invalidated capture counts, as it still needs its
    /// end. `Unsupported` when the runtime cannot say.
    fn stream_is_capturing(&self, stream: Stream) -> Result<bool>;

    // Virtual memory management (optional feature "vmm").
    fn vmm_granularity(&self, device: i32) -> Result<usize>;
    fn vmm_create(&self, device: i32, bytes: usize) -> Result<PhysicalMem>;
    fn vmm_release(&self, handle: PhysicalMem) -> Result<()>;
    fn vmm_reserve(&self, bytes: usize, alignment: usize) -> Result<DevicePtr>;
    fn vmm_free_range(&self, ptr: DevicePtr, bytes: usize) -> Result<()>;
    fn vmm_map(&self, ptr: DevicePtr, bytes: usize, handle: PhysicalMem) -> Result<()>;
    fn vmm_unmap(&self, ptr: DevicePtr, bytes: usize) -> Result<()>;
    /// Grants read-write access to `devices` on a mapped range.
    fn vmm_set_access(&self, ptr: DevicePtr, bytes: usize, devices: &[i32]) -> Result<()>;

    // GPU-written timeline (optional feature "memops").
    fn signal_alloc(&self, device: i32) -> Result<Signal>;
    fn signal_free(&self, signal: Signal) -> Result<()>;
    /// Writes `value` to `ptr` once earlier work on `stream` has finished.
    fn stream_write_u64(&self, stream: Stream, ptr: DevicePtr, value: u64) -> Result<()>;
}

/// A module image as both runtimes read it: a text image (PTX, the software GPU's image name) ends
/// at its NUL, so one is appended when missing; a binary image is unaffected by a trailing NUL.
pub(crate) fn nul_terminated(image: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if image.ends_with(&[0]) {
        std::borrow::Cow::Borrowed(image)
    } else {
        let mut owned = image.to_vec();
        owned.push(0);
        std::borrow::Cow::Owned(owned)
    }
}

/// What a failed end of capture left the stream in. Runtimes differ: an invalidated capture is
/// ended by the failing call, a call from the wrong thread or an injected fault leaves it open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaptureAfterFailedEnd {
    /// The stream is still capturing: its capture must still be ended before it is usable.
    StillCapturing,
    /// The stream is no longer capturing and is usable; what was captured is lost.
    Ended,
    /// The runtime could not say (why).
    Unknown(String),
}

/// Asks the runtime what a failed `end_capture(stream)` left behind.
pub fn capture_after_failed_end(rt: &dyn Runtime, stream: Stream) -> CaptureAfterFailedEnd {
    match rt.stream_is_capturing(stream) {
        Ok(true) => CaptureAfterFailedEnd::StillCapturing,
        Ok(false) => CaptureAfterFailedEnd::Ended,
        Err(e) => CaptureAfterFailedEnd::Unknown(e.message),
    }
}

static RUNTIME: OnceCell<Result<Box<dyn Runtime>>> = OnceCell::new();

/// The process's runtime, loaded on first use according to `RCB_BACKEND`. A failed load is
/// remembered: every later call reports the same error.
pub fn get() -> Result<&'static dyn Runtime> {
    match RUNTIME.get_or_init(load) {
        Ok(rt) => Ok(rt.as_ref()),
        Err(e) => Err(e.clone()),
    }
}

fn load() -> Result<Box<dyn Runtime>> {
    let cfg = config::get()?;
    let rt = match cfg.backend {
        BackendChoice::Hip => hip::load(cfg)?,
        BackendChoice::Cuda => cuda::load(cfg)?,
        BackendChoice::Auto => match hip::load(cfg) {
            Ok(rt) => rt,
            Err(hip_err) => cuda::load(cfg).map_err(|cuda_err| {
                let kind = if hip_err.kind == ErrorKind::NoDevice || cuda_err.kind == ErrorKind::NoDevice {
                    ErrorKind::NoDevice
                } else {
                    ErrorKind::RuntimeUnavailable
                };
                Error::new(kind, format!("no usable GPU runtime (RCB_BACKEND=auto): hip: {hip_err}; cuda: {cuda_err}"))
            })?,
        },
    };
    let info = rt.info();
    log::info!(
        "loaded {} runtime {} (version {}, {} device(s){})",
        info.backend.name(),
        info.library,
        info.version,
        info.device_count,
        if info.disabled_features.is_empty() { String::new() } else { format!("; disabled: {}", info.disabled_features.join("; ")) }
    );
    Ok(rt)
}

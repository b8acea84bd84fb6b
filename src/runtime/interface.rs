//! What the library asks of a GPU runtime, by subject: [`Runtime`] is the whole of it, made of
//! [`Memory`], [`Streams`] and [`Graphs`]; the optional features ([`Vmm`], [`StreamMemory`]) and
//! the calls only tests, benchmarks and the demo make ([`Direct`]) are reached through accessors,
//! so the library's own code shows where it depends on them.
//!
//! Methods that create something on a device take the device and leave the calling thread's
//! current device as they found it. Thread-safety: every method may be called from any thread.
//! Handles passed in must be live (created by this runtime and not yet destroyed): neither HIP
//! nor CUDA checks a stale handle, so the caller that owns a handle keeps it live.

use super::*;
use crate::error::Result;

pub trait Runtime: Memory + Streams + Graphs + Send + Sync {
    fn info(&self) -> &RuntimeInfo;
    /// Virtual memory management, or `Unsupported` with the reason it is off.
    fn vmm(&self) -> Result<&dyn Vmm>;
    /// The GPU-written timeline, or `Unsupported` with the reason it is off.
    fn stream_memory(&self) -> Result<&dyn StreamMemory>;
    /// Calls the library itself never makes.
    fn direct(&self) -> &dyn Direct;
}

pub trait Memory {
    fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool>;
    fn malloc(&self, device: i32, bytes: usize) -> Result<DevicePtr>;
    fn free(&self, ptr: DevicePtr) -> Result<()>;
    fn copy_device_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream) -> Result<()>;
    /// `(free, total)` bytes of `device`'s memory, as the runtime reports them (the whole
    /// device's, every process's allocations counted).
    fn device_memory(&self, device: i32) -> Result<(usize, usize)>;
}

pub trait Streams {
    /// `(least, greatest)` stream priority; numerically lower is higher priority.
    fn stream_priority_range(&self, device: i32) -> Result<(i32, i32)>;
    fn stream_create(&self, device: i32, flags: u32, priority: i32) -> Result<Stream>;
    fn stream_destroy(&self, stream: Stream) -> Result<()>;
    /// `Ok(true)` when all work on the stream has finished, `Ok(false)` while some is pending.
    fn stream_is_idle(&self, stream: Stream) -> Result<bool>;
    fn stream_synchronize(&self, stream: Stream) -> Result<()>;
    fn stream_flags(&self, stream: Stream) -> Result<u32>;
    fn stream_priority(&self, stream: Stream) -> Result<i32>;
    fn begin_capture(&self, stream: Stream, mode: CaptureMode) -> Result<()>;
    fn end_capture(&self, stream: Stream) -> Result<Graph>;
    /// Whether `stream` is in capture mode; an invalidated capture counts, as it still needs its
    /// end. `Unsupported` when the runtime cannot say.
    fn stream_is_capturing(&self, stream: Stream) -> Result<bool>;
    /// The device `stream` belongs to (for the null and per-thread handles: the calling thread's
    /// current device). `Unsupported` when the runtime cannot say.
    fn stream_device(&self, stream: Stream) -> Result<i32>;
    /// An event on `device` that records no timing.
    fn event_create(&self, device: i32) -> Result<Event>;
    fn event_destroy(&self, event: Event) -> Result<()>;
    /// Marks the point after all work enqueued on `stream` so far. Made in relaxed capture mode
    /// (where the runtime has the call), as is the next one: they are the library's own events,
    /// never part of a caller's capture.
    fn event_record(&self, event: Event, stream: Stream) -> Result<()>;
    /// `Ok(true)` when the work before the event's last record has finished (or it was never
    /// recorded), `Ok(false)` while some is pending. A query in the thread's default capture mode
    /// would fail and invalidate every global-mode capture in progress, which relaxed mode avoids.
    fn event_is_complete(&self, event: Event) -> Result<bool>;
    fn event_synchronize(&self, event: Event) -> Result<()>;
    /// Runs `work` with the calling thread in relaxed capture mode, then gives the thread its
    /// mode back, as the event calls above are made: for the library's own objects, made and
    /// destroyed outside every capture, whose calls (an allocation) would otherwise fail and
    /// invalidate a global-mode capture in progress on any thread. Where the mode cannot be set
    /// (a runtime without the call, or the call failed) `work` is not run: `Unsupported` or the
    /// call's error.
    fn relaxed_capture_mode(&self, work: &mut dyn FnMut()) -> Result<()>;
    /// Runs `work` where the calling thread has no runtime error pending (HIP's
    /// `hipPeekAtLastError`), then clears the thread's last error if `work` left one
    /// (`hipGetLastError`), so that the caller's next check of it does not report the library's
    /// own failed calls. Where an error is pending, `work` is not run and `Err` names it: on ROCm
    /// 6.4+, where only failures set the last error, a failed call of `work` would replace it and
    /// nothing could put it back. Before 6.4 every HIP call sets it, success included, so an error
    /// survives no call at all: the caller's is pending here only if nothing called HIP since
    /// (the library's own earlier calls replace it too), and one `work` left is replaced by the
    /// next call anyway. A runtime without a last error (CUDA's driver API) just runs `work`.
    fn keep_last_error(&self, work: &mut dyn FnMut()) -> Result<()>;
}

/// Graph templates and executable graphs.
pub trait Graphs {
    fn graph_create(&self) -> Result<Graph>;
    fn graph_destroy(&self, graph: Graph) -> Result<()>;
    /// A new graph holding a copy of `graph`'s nodes and edges; the caller owns it.
    fn graph_clone(&self, graph: Graph) -> Result<Graph>;
    /// Removes `node` and its edges from its graph.
    fn node_destroy(&self, node: Node) -> Result<()>;
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
    /// How far [`Self::memcpy_node_read`] can be trusted.
    fn memcpy_read_back(&self) -> MemcpyReadBack;
    /// A memcpy node's parameters as the runtime reports them; refused where they are never to
    /// be trusted ([`MemcpyReadBack::Never`]).
    fn memcpy_node_read(&self, node: Node) -> Result<MemcpyParams>;
    fn memset_node_read(&self, node: Node) -> Result<MemsetParams>;
    /// The graph embedded in a child node (owned by the node).
    fn child_node_graph(&self, node: Node) -> Result<Graph>;
    /// The event an event record node records.
    fn event_record_node_event(&self, node: Node) -> Result<Event>;
    /// The event an event wait node waits for.
    fn event_wait_node_event(&self, node: Node) -> Result<Event>;
    fn host_node_read(&self, node: Node) -> Result<HostNode>;
    /// A stream memory-operation node's parameters (the operations copied out of the node).
    fn mem_op_node_read(&self, node: Node) -> Result<MemOpNode>;
    fn add_event_record_node(&self, graph: Graph, deps: &[Node], event: Event) -> Result<Node>;
    fn add_event_wait_node(&self, graph: Graph, deps: &[Node], event: Event) -> Result<Node>;
    fn add_host_node(&self, graph: Graph, deps: &[Node], host: &HostNode) -> Result<Node>;
    fn add_mem_op_node(&self, graph: Graph, deps: &[Node], ops: &MemOpNode) -> Result<Node>;
    /// Why a child node cannot hold a graph with a node of this kind (the runtime refuses it),
    /// or `None` when it can.
    fn child_graph_refuses(&self, kind: NodeType) -> Option<&'static str>;
    /// The kind of memory `ptr` lies in, where the runtime's executable memcpy setter refuses a
    /// change of it (CUDA); `None` where it does not (HIP: clr checks no such thing).
    fn memory_class(&self, ptr: DevicePtr) -> Option<MemoryClass>;
    fn kernel_node_set(&self, node: Node, kernel: &KernelParams<'_>) -> Result<()>;
    fn kernel_node_set_by_pointers(&self, node: Node, kernel: &KernelParamPointers) -> Result<()>;
    fn memcpy_node_set(&self, node: Node, copy: &MemcpyParams) -> Result<()>;
    fn memset_node_set(&self, node: Node, set: &MemsetParams) -> Result<()>;

    fn instantiate(&self, graph: Graph) -> Result<Exec>;
    fn exec_destroy(&self, exec: Exec) -> Result<()>;
    fn exec_kernel_node_set(&self, exec: Exec, node: Node, kernel: &KernelParams<'_>) -> Result<()>;
    /// Sets each node of `nodes` to its parameters, in order, on `exec` as
    /// [`Self::exec_kernel_node_set`] sets one, or without an executable graph on the template
    /// graph as [`Self::kernel_node_set`] does, and stops at the first failure, which it returns
    /// with the index of the node that failed (those before it were set). An update pushes its
    /// kernel nodes through here, so that the setters run back to back in one loop of the
    /// runtime's code instead of one call into it per node (the library's code between two
    /// setters is what a push costs beyond them).
    fn kernel_nodes_set(&self, exec: Option<Exec>, nodes: &[(Node, KernelParams<'_>)]) -> std::result::Result<(), (usize, Error)> {
        for (i, (node, kernel)) in nodes.iter().enumerate() {
            if let Some((_, next)) = nodes.get(i + 1) {
                crate::prefetch::line(next.args.as_ptr());
            }
            match exec {
                Some(exec) => self.exec_kernel_node_set(exec, *node, kernel),
                None => self.kernel_node_set(*node, kernel),
            }
            .map_err(|e| (i, e))?;
        }
        Ok(())
    }
    fn exec_kernel_node_set_by_pointers(&self, exec: Exec, node: Node, kernel: &KernelParamPointers) -> Result<()>;
    fn exec_memcpy_node_set(&self, exec: Exec, node: Node, copy: &MemcpyParams) -> Result<()>;
    fn exec_memset_node_set(&self, exec: Exec, node: Node, set: &MemsetParams) -> Result<()>;
    fn exec_child_node_set(&self, exec: Exec, node: Node, child: Graph) -> Result<()>;
    fn graph_launch(&self, exec: Exec, stream: Stream) -> Result<()>;
    /// The name the runtime has for the function of a kernel node (`hipKernelNameRef` /
    /// `cuFuncGetName`; a C++ kernel's name is mangled). `function` is what a kernel node holds:
    /// on HIP a `hipFunction_t`, or the host stub of a captured runtime launch. `Unsupported`
    /// where the runtime has no such query, another error where it has no name for `function`.
    fn function_name(&self, function: Function) -> Result<String>;
}

/// Virtual memory management (optional feature "vmm").
pub trait Vmm: Send + Sync {
    fn granularity(&self, device: i32) -> Result<usize>;
    fn create(&self, device: i32, bytes: usize) -> Result<PhysicalMem>;
    fn release(&self, handle: PhysicalMem) -> Result<()>;
    fn reserve(&self, bytes: usize, alignment: usize) -> Result<DevicePtr>;
    fn free_range(&self, ptr: DevicePtr, bytes: usize) -> Result<()>;
    fn map(&self, ptr: DevicePtr, bytes: usize, handle: PhysicalMem) -> Result<()>;
    fn unmap(&self, ptr: DevicePtr, bytes: usize) -> Result<()>;
    /// Grants read-write access to `devices` on a mapped range.
    fn set_access(&self, ptr: DevicePtr, bytes: usize, devices: &[i32]) -> Result<()>;
}

/// The GPU-written timeline (optional feature "memops").
pub trait StreamMemory: Send + Sync {
    fn signal_alloc(&self, device: i32) -> Result<Signal>;
    fn signal_free(&self, signal: Signal) -> Result<()>;
    /// Writes `value` to `ptr` once earlier work on `stream` has finished.
    fn stream_write_u64(&self, stream: Stream, ptr: DevicePtr, value: u64) -> Result<()>;
    /// Makes later work on `stream` wait until the 64-bit word at `ptr` is at least `value`.
    fn stream_wait_u64_at_least(&self, stream: Stream, ptr: DevicePtr, value: u64) -> Result<()>;
    /// Whether a write or wait enqueued on a capturing stream becomes a node of the capture, run
    /// each time the graph runs (CUDA), rather than running on the stream at once, outside the
    /// capture (HIP).
    fn memory_ops_captured(&self) -> bool;
}

/// Calls outside graphs that the library itself never makes: tests, benchmarks and the demo use
/// them to fill and read memory, load kernels and launch them directly.
pub trait Direct: Send + Sync {
    /// Synchronous host-to-device copy.
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Synchronous device-to-host copy.
    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()>;
    fn module_load(&self, device: i32, image: &[u8]) -> Result<Module>;
    fn module_unload(&self, module: Module) -> Result<()>;
    fn module_function(&self, module: Module, name: &str) -> Result<Function>;
    fn launch_kernel(&self, kernel: &KernelParams<'_>, stream: Stream) -> Result<()>;
    /// Whole-graph update; fails when the topology differs.
    fn exec_update(&self, exec: Exec, graph: Graph) -> Result<()>;
    /// The architecture name HIP reports for `device` (`gcnArchName`: `gfx942:sramecc+:xnack-`,
    /// the software GPU's `hipsim`), which picks the code object to load; `Unsupported` on CUDA.
    fn device_arch(&self, device: i32) -> Result<String>;
    /// The name the runtime gives `device` (`hipDeviceProp_t.name`, `cuDeviceGetName`).
    fn device_name(&self, device: i32) -> Result<String>;
    /// The struct layouts and numbering this backend chose for the loaded runtime, each as (what,
    /// which and why), for diagnostics (`rcb-doctor`).
    fn layouts(&self) -> Vec<(&'static str, String)>;
}

//! The `hip` backend: `libamdhip64` loaded at run time, struct layouts chosen by its version.

mod api;
mod layout;
mod library;

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::extra;
use crate::runtime::*;
use api::{CaptureQuery, Core, MemOps, NodeAttributes, Vmm};
use hip_runtime_sys::{dim3, hipKernelNodeParams, hipMemAccessDesc, hipMemLocation, hipMemsetParams};
use layout::{Layout, Memcpy3DParms};
use libloading::Library;
use std::ffi::{CStr, CString, c_int, c_void};
use std::ptr::{null, null_mut};

type P = *mut c_void;

const MEMCPY_HOST_TO_DEVICE: c_int = 1;
const MEMCPY_DEVICE_TO_HOST: c_int = 2;
const MEMCPY_DEVICE_TO_DEVICE: c_int = 3;
const MALLOC_SIGNAL_MEMORY: u32 = 2;
const ERROR_NOT_READY: c_int = 600;
/// `hipStreamCaptureStatusNone`; active and invalidated captures both still need their end.
const CAPTURE_STATUS_NONE: c_int = 0;
/// `HIP_LAUNCH_PARAM_BUFFER_POINTER`, `_BUFFER_SIZE` and `_END`.
const EXTRA_KEYS: extra::Keys = extra::Keys { buffer_pointer: 0x1, buffer_size: 0x2, end: 0x3 };

pub struct HipRuntime {
    core: Core,
    vmm: Result<Vmm, String>,
    memops: Result<MemOps, String>,
    attributes: Option<NodeAttributes>,
    capture_query: Option<CaptureQuery>,
    layout: Layout,
    info: RuntimeInfo,
    // Last: the tables above point into it, and it is never unloaded while they live.
    _library: Library,
}

/// Loads the HIP runtime and checks that it sees at least one device.
pub fn load(cfg: &Config) -> Result<Box<dyn Runtime>> {
    let (library, name) = library::open(cfg)?;
    let mut missing = Vec::new();
    // SAFETY: the signatures in `api.rs` are HIP's; the library outlives the tables (same struct).
    let Some(core) = (unsafe { Core::resolve(&library, &mut missing) }) else {
        return Err(Error::new(
            ErrorKind::RuntimeUnavailable,
            format!("{name} is not a usable HIP runtime: missing {}", missing.join(", ")),
        ));
    };
    let mut version = 0;
    // SAFETY: valid out-pointer.
    let rc = unsafe { (core.hipRuntimeGetVersion)(&mut version) };
    if rc != 0 {
        return Err(Error::new(ErrorKind::NoDevice, format!("{name}: hipRuntimeGetVersion failed with HIP error {rc}")));
    }
    let layout = Layout::for_version(version);
    let missing_in = |names: Vec<&str>| format!("{name} lacks {}", names.join(", "));
    let vmm = if layout.has_real_vmm() {
        resolve(&library, Vmm::resolve).map_err(missing_in)
    } else {
        Err(format!("HIP {} has only stubs for it", version_text(version)))
    };
    let memops = resolve(&library, MemOps::resolve).map_err(missing_in);
    let attributes = resolve(&library, NodeAttributes::resolve).ok();
    let capture_query = resolve(&library, CaptureQuery::resolve).ok();
    let disabled = [("vmm", vmm.as_ref().err()), ("memops", memops.as_ref().err())]
        .into_iter()
        .filter_map(|(feature, reason)| reason.map(|r| format!("{feature}: {r}")))
        .collect();

    let mut count = 0;
    // SAFETY: valid out-pointer.
    let rc = unsafe { (core.hipGetDeviceCount)(&mut count) };
    if rc != 0 || count <= 0 {
        return Err(Error::new(
            ErrorKind::NoDevice,
            format!("{name} (HIP {}) sees no device: hipGetDeviceCount returned {rc} with {count} device(s)", version_text(version)),
        ));
    }
    let info = RuntimeInfo { backend: Backend::Hip, library: name, version, device_count: count, disabled_features: disabled };
    Ok(Box::new(HipRuntime { core, vmm, memops, attributes, capture_query, layout, info, _library: library }))
}

fn resolve<T>(lib: &Library, f: unsafe fn(&Library, &mut Vec<&'static str>) -> Option<T>) -> Result<T, Vec<&'static str>> {
    let mut missing = Vec::new();
    // SAFETY: see `load`.
    unsafe { f(lib, &mut missing) }.ok_or(missing)
}

fn version_text(v: i32) -> String {
    format!("{}.{}.{}", v / 10_000_000, (v / 100_000) % 100, v % 100_000)
}

fn dim(d: [u32; 3]) -> dim3 {
    dim3 { x: d[0], y: d[1], z: d[2] }
}

fn ptr(p: DevicePtr) -> P {
    p as P
}

/// Calls `f(kernelParams, extra)` with the packed arguments as a HIP `extra` list in the exact
/// order ROCm 5.2 requires. A kernel without arguments gets an empty, non-null `kernelParams`
/// instead (ROCm 5.2 rejects two null pointers).
fn with_extra<R>(args: &[u8], f: impl FnOnce(*mut P, *mut P) -> R) -> R {
    let mut size = args.len();
    if args.is_empty() {
        let mut none: [P; 1] = [null_mut()];
        return f(none.as_mut_ptr(), null_mut());
    }
    let mut extra: [P; 5] = [1 as P, args.as_ptr() as P, 2 as P, &mut size as *mut usize as P, 3 as P];
    f(null_mut(), extra.as_mut_ptr())
}

impl HipRuntime {
    fn check(&self, call: &'static str, rc: c_int) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: both return static strings (or null, handled by `text`).
        let (name, desc) = unsafe { (text((self.core.hipGetErrorName)(rc)), text((self.core.hipGetErrorString)(rc))) };
        let kind = match rc {
            2 => ErrorKind::OutOfMemory,
            100 => ErrorKind::NoDevice,
            801 => ErrorKind::Unsupported,
            _ => ErrorKind::Runtime,
        };
        Err(Error::new(kind, format!("{call} failed: {name} ({rc}): {desc}")))
    }

    /// Runs `f` with `device` current on this thread, then restores the caller's device.
    fn on_device<T>(&self, device: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if device < 0 || device >= self.info.device_count {
            return Err(Error::invalid_argument(format!("device {device} does not exist ({} device(s))", self.info.device_count)));
        }
        let mut current = 0;
        // SAFETY: valid out-pointer.
        self.check("hipGetDevice", unsafe { (self.core.hipGetDevice)(&mut current) })?;
        if current == device {
            return f();
        }
        // SAFETY: device was range-checked.
        self.check("hipSetDevice", unsafe { (self.core.hipSetDevice)(device) })?;
        let out = f();
        // SAFETY: restores a device the runtime reported.
        unsafe { (self.core.hipSetDevice)(current) };
        out
    }

    fn vmm(&self) -> Result<&Vmm> {
        self.vmm.as_ref().map_err(|r| Error::unsupported(format!("virtual memory management is unavailable: {r}")))
    }

    fn memops(&self) -> Result<&MemOps> {
        self.memops.as_ref().map_err(|r| Error::unsupported(format!("stream memory operations are unavailable: {r}")))
    }

    fn kernel_node_params(&self, k: &KernelParams<'_>, kernel_params: *mut P, extra: *mut P) -> hipKernelNodeParams {
        hipKernelNodeParams {
            blockDim: dim(k.block),
            extra,
            func: k.function.0,
            gridDim: dim(k.grid),
            kernelParams: kernel_params,
            sharedMemBytes: k.shared_mem_bytes,
        }
    }

    /// The `kernelParams`-style node parameters of `k` (`extra` null). A null `params` is passed
    /// as it is: the runtime knows the kernel's parameter count and refuses it for a kernel with
    /// parameters, where a substituted empty array would be read past its end.
    fn pointer_node_params(&self, k: &KernelParamPointers) -> hipKernelNodeParams {
        hipKernelNodeParams {
            blockDim: dim(k.block),
            extra: null_mut(),
            func: k.function.0,
            gridDim: dim(k.grid),
            kernelParams: k.params,
            sharedMemBytes: k.shared_mem_bytes,
        }
    }

    fn nodes_of(&self, call: &'static str, f: impl Fn(*mut P, &mut usize) -> c_int) -> Result<Vec<Node>> {
        let mut n = 0usize;
        self.check(call, f(null_mut(), &mut n))?;
        let mut nodes = vec![null_mut(); n];
        self.check(call, f(nodes.as_mut_ptr(), &mut n))?;
        nodes.truncate(n);
        Ok(nodes.into_iter().map(Node).collect())
    }
}

unsafe fn text(p: *const std::ffi::c_char) -> String {
    if p.is_null() { String::from("?") } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() }
}

fn raw_nodes(deps: &[Node]) -> (*const P, usize) {
    if deps.is_empty() { (null(), 0) } else { (deps.as_ptr() as *const P, deps.len()) }
}

impl Runtime for HipRuntime {
    fn info(&self) -> &RuntimeInfo {
        &self.info
    }

    fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool> {
        let mut can = 0;
        // SAFETY: valid out-pointer; the runtime validates device numbers.
        self.check("hipDeviceCanAccessPeer", unsafe { (self.core.hipDeviceCanAccessPeer)(&mut can, device, peer) })?;
        Ok(can != 0)
    }

    fn stream_priority_range(&self, device: i32) -> Result<(i32, i32)> {
        self.on_device(device, || {
            let (mut least, mut greatest) = (0, 0);
            // SAFETY: valid out-pointers.
            self.check("hipDeviceGetStreamPriorityRange", unsafe {
                (self.core.hipDeviceGetStreamPriorityRange)(&mut least, &mut greatest)
            })?;
            Ok((least, greatest))
        })
    }

    fn malloc(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        self.on_device(device, || {
            let mut p = null_mut();
            // SAFETY: valid out-pointer.
            self.check("hipMalloc", unsafe { (self.core.hipMalloc)(&mut p, bytes) })?;
            Ok(p as DevicePtr)
        })
    }

    fn free(&self, p: DevicePtr) -> Result<()> {
        // SAFETY: the runtime validates the pointer.
        self.check("hipFree", unsafe { (self.core.hipFree)(ptr(p)) })
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: src is a live host slice of the given length.
        self.check("hipMemcpy", unsafe { (self.core.hipMemcpy)(ptr(dst), src.as_ptr() as *const c_void, src.len(), MEMCPY_HOST_TO_DEVICE) })
    }

    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: dst is a live host slice of the given length.
        self.check("hipMemcpy", unsafe {
            (self.core.hipMemcpy)(dst.as_mut_ptr() as P, ptr(src) as *const c_void, dst.len(), MEMCPY_DEVICE_TO_HOST)
        })
    }

    fn copy_device_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream) -> Result<()> {
        // SAFETY: the runtime validates pointers and stream.
        self.check("hipMemcpyDtoDAsync", unsafe { (self.core.hipMemcpyDtoDAsync)(ptr(dst), ptr(src), bytes, stream.0) })
    }

    fn stream_create(&self, device: i32, flags: u32, priority: i32) -> Result<Stream> {
        self.on_device(device, || {
            let mut s = null_mut();
            // SAFETY: valid out-pointer.
            self.check("hipStreamCreateWithPriority", unsafe { (self.core.hipStreamCreateWithPriority)(&mut s, flags, priority) })?;
            Ok(Stream(s))
        })
    }

    fn stream_destroy(&self, stream: Stream) -> Result<()> {
        // SAFETY: the runtime validates the handle.
        self.check("hipStreamDestroy", unsafe { (self.core.hipStreamDestroy)(stream.0) })
    }

    fn stream_is_idle(&self, stream: Stream) -> Result<bool> {
        // SAFETY: the runtime validates the handle.
        match unsafe { (self.core.hipStreamQuery)(stream.0) } {
            ERROR_NOT_READY => Ok(false),
            rc => self.check("hipStreamQuery", rc).map(|()| true),
        }
    }

    fn stream_synchronize(&self, stream: Stream) -> Result<()> {
        // SAFETY: the runtime validates the handle.
        self.check("hipStreamSynchronize", unsafe { (self.core.hipStreamSynchronize)(stream.0) })
    }

    fn stream_flags(&self, stream: Stream) -> Result<u32> {
        let mut flags = 0;
        // SAFETY: valid out-pointer.
        self.check("hipStreamGetFlags", unsafe { (self.core.hipStreamGetFlags)(stream.0, &mut flags) })?;
        Ok(flags)
    }

    fn stream_priority(&self, stream: Stream) -> Result<i32> {
        let mut priority = 0;
        // SAFETY: valid out-pointer.
        self.check("hipStreamGetPriority", unsafe { (self.core.hipStreamGetPriority)(stream.0, &mut priority) })?;
        Ok(priority)
    }

    fn module_load(&self, device: i32, image: &[u8]) -> Result<Module> {
        let owned = crate::runtime::nul_terminated(image);
        self.on_device(device, || {
            let mut m = null_mut();
            // SAFETY: the image outlives the call.
            self.check("hipModuleLoadData", unsafe { (self.core.hipModuleLoadData)(&mut m, owned.as_ptr() as *const c_void) })?;
            Ok(Module(m))
        })
    }

    fn module_unload(&self, module: Module) -> Result<()> {
        // SAFETY: the runtime validates the handle.
        self.check("hipModuleUnload", unsafe { (self.core.hipModuleUnload)(module.0) })
    }

    fn module_function(&self, module: Module, name: &str) -> Result<Function> {
        let cname = CString::new(name).map_err(|_| Error::invalid_argument("kernel name contains a NUL byte"))?;
        let mut f = null_mut();
        // SAFETY: valid out-pointer and C string.
        self.check("hipModuleGetFunction", unsafe { (self.core.hipModuleGetFunction)(&mut f, module.0, cname.as_ptr()) })
            .map_err(|e| e.context(format!("kernel {name:?}")))?;
        Ok(Function(f))
    }

    fn launch_kernel(&self, k: &KernelParams<'_>, stream: Stream) -> Result<()> {
        with_extra(k.args, |kernel_params, extra| {
            // SAFETY: the argument arrays live until the call returns; HIP copies them.
            self.check("hipModuleLaunchKernel", unsafe {
                (self.core.hipModuleLaunchKernel)(
                    k.function.0,
                    k.grid[0],
                    k.grid[1],
                    k.grid[2],
                    k.block[0],
                    k.block[1],
                    k.block[2],
                    k.shared_mem_bytes,
                    stream.0,
                    kernel_params,
                    extra,
                )
            })
        })
    }

    fn graph_create(&self) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: valid out-pointer.
        self.check("hipGraphCreate", unsafe { (self.core.hipGraphCreate)(&mut g, 0) })?;
        Ok(Graph(g))
    }

    fn graph_destroy(&self, graph: Graph) -> Result<()> {
        // SAFETY: the runtime validates the handle.
        self.check("hipGraphDestroy", unsafe { (self.core.hipGraphDestroy)(graph.0) })
    }

    fn add_kernel_node(&self, graph: Graph, deps: &[Node], k: &KernelParams<'_>) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        with_extra(k.args, |kernel_params, extra| {
            let params = self.kernel_node_params(k, kernel_params, extra);
            let mut node = null_mut();
            // SAFETY: params and its arrays live until the call returns; HIP copies them.
            self.check("hipGraphAddKernelNode", unsafe { (self.core.hipGraphAddKernelNode)(&mut node, graph.0, d, n, &params) })?;
            Ok(Node(node))
        })
    }

    fn add_kernel_node_by_pointers(&self, graph: Graph, deps: &[Node], k: &KernelParamPointers) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let params = self.pointer_node_params(k);
        let mut node = null_mut();
        // SAFETY: the caller's argument pointers are valid for the call; HIP copies the values it
        // reads through them, sized by the kernel's metadata.
        self.check("hipGraphAddKernelNode", unsafe { (self.core.hipGraphAddKernelNode)(&mut node, graph.0, d, n, &params) })?;
        Ok(Node(node))
    }

    fn add_memcpy_node(&self, graph: Graph, deps: &[Node], c: &MemcpyParams) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let mut node = null_mut();
        // SAFETY: pointers are device addresses the runtime validates.
        self.check("hipGraphAddMemcpyNode1D", unsafe {
            (self.core.hipGraphAddMemcpyNode1D)(&mut node, graph.0, d, n, ptr(c.dst), ptr(c.src), c.bytes, MEMCPY_DEVICE_TO_DEVICE)
        })?;
        Ok(Node(node))
    }

    fn add_memset_node(&self, graph: Graph, deps: &[Node], s: &MemsetParams) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let params = self.layout.memset(s);
        let mut node = null_mut();
        // SAFETY: params lives until the call returns.
        self.check("hipGraphAddMemsetNode", unsafe {
            (self.core.hipGraphAddMemsetNode)(&mut node, graph.0, d, n, &params as *const _ as *const c_void)
        })?;
        Ok(Node(node))
    }

    fn add_empty_node(&self, graph: Graph, deps: &[Node]) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let mut node = null_mut();
        // SAFETY: valid out-pointer and dependency array.
        self.check("hipGraphAddEmptyNode", unsafe { (self.core.hipGraphAddEmptyNode)(&mut node, graph.0, d, n) })?;
        Ok(Node(node))
    }

    fn add_child_node(&self, graph: Graph, deps: &[Node], child: Graph) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let mut node = null_mut();
        // SAFETY: valid out-pointer and dependency array.
        self.check("hipGraphAddChildGraphNode", unsafe { (self.core.hipGraphAddChildGraphNode)(&mut node, graph.0, d, n, child.0) })?;
        Ok(Node(node))
    }

    fn add_edges(&self, graph: Graph, edges: &[Edge]) -> Result<()> {
        if edges.iter().any(|e| e.data != EdgeData::default()) {
            return Err(Error::unsupported("HIP graphs cannot carry edge data"));
        }
        let from: Vec<P> = edges.iter().map(|e| e.from.0).collect();
        let to: Vec<P> = edges.iter().map(|e| e.to.0).collect();
        // SAFETY: both arrays hold edges.len() nodes.
        self.check("hipGraphAddDependencies", unsafe {
            (self.core.hipGraphAddDependencies)(graph.0, from.as_ptr(), to.as_ptr(), edges.len())
        })
    }

    fn graph_nodes(&self, graph: Graph) -> Result<Vec<Node>> {
        // SAFETY: the array, when given, holds `n` entries.
        self.nodes_of("hipGraphGetNodes", |out, n| unsafe { (self.core.hipGraphGetNodes)(graph.0, out, n) })
    }

    fn graph_edges(&self, graph: Graph) -> Result<Vec<Edge>> {
        let mut n = 0usize;
        // SAFETY: null arrays ask for the count.
        self.check("hipGraphGetEdges", unsafe { (self.core.hipGraphGetEdges)(graph.0, null_mut(), null_mut(), &mut n) })?;
        let (mut from, mut to) = (vec![null_mut(); n], vec![null_mut(); n]);
        // SAFETY: both arrays hold `n` entries.
        self.check("hipGraphGetEdges", unsafe { (self.core.hipGraphGetEdges)(graph.0, from.as_mut_ptr(), to.as_mut_ptr(), &mut n) })?;
        Ok(from.into_iter().zip(to).take(n).map(|(f, t)| Edge { from: Node(f), to: Node(t), data: EdgeData::default() }).collect())
    }

    fn node_type(&self, node: Node) -> Result<NodeType> {
        let mut raw = 0;
        // SAFETY: valid out-pointer.
        self.check("hipGraphNodeGetType", unsafe { (self.core.hipGraphNodeGetType)(node.0, &mut raw) })?;
        Ok(self.layout.node_type(raw))
    }

    fn kernel_node_read(&self, node: Node) -> Result<KernelNodeRead> {
        // SAFETY: an all-zero struct is a valid out-value.
        let mut p: hipKernelNodeParams = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointer; the returned arrays are owned by the node and only read here.
        self.check("hipGraphKernelNodeGetParams", unsafe { (self.core.hipGraphKernelNodeGetParams)(node.0, &mut p) })?;
        let args = if !p.extra.is_null() {
            // SAFETY: `extra` is the node's own list, valid until its parameters change: the
            // runtime ends it with END and its SIZE and buffer describe the node's arguments.
            unsafe { extra::parse(p.extra, &EXTRA_KEYS) }
        } else if !p.kernelParams.is_null() {
            Err(String::from("the kernel node passes kernelParams and HIP has no query for the parameter layout"))
        } else {
            Ok(Vec::new())
        };
        Ok(KernelNodeRead {
            function: Function(p.func),
            grid: [p.gridDim.x, p.gridDim.y, p.gridDim.z],
            block: [p.blockDim.x, p.blockDim.y, p.blockDim.z],
            shared_mem_bytes: p.sharedMemBytes,
            args,
        })
    }

    fn copy_kernel_node_attributes(&self, dst: Node, src: Node) -> Result<()> {
        match &self.attributes {
            // SAFETY: both are kernel nodes the caller holds.
            Some(a) => self.check("hipGraphKernelNodeCopyAttributes", unsafe { (a.hipGraphKernelNodeCopyAttributes)(dst.0, src.0) }),
            // Runtimes before 5.5 have no kernel-node attributes to lose.
            None => Ok(()),
        }
    }

    fn memcpy_node_read(&self, node: Node) -> Result<MemcpyParams> {
        // SAFETY: an all-zero struct is a valid out-value.
        let mut p: Memcpy3DParms = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointer.
        self.check("hipGraphMemcpyNodeGetParams", unsafe { (self.core.hipGraphMemcpyNodeGetParams)(node.0, &mut p) })?;
        self.layout.memcpy_read(&p).ok_or_else(|| Error::unsupported("the memcpy node is not a 1-D copy"))
    }

    fn memset_node_read(&self, node: Node) -> Result<MemsetParams> {
        // SAFETY: an all-zero struct is a valid out-value.
        let mut p: hipMemsetParams = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointer in the runtime's layout.
        self.check("hipGraphMemsetNodeGetParams", unsafe {
            (self.core.hipGraphMemsetNodeGetParams)(node.0, &mut p as *mut _ as *mut c_void)
        })?;
        Ok(self.layout.memset_read(&p))
    }

    fn child_node_graph(&self, node: Node) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: valid out-pointer.
        self.check("hipGraphChildGraphNodeGetGraph", unsafe { (self.core.hipGraphChildGraphNodeGetGraph)(node.0, &mut g) })?;
        Ok(Graph(g))
    }

    fn kernel_node_set(&self, node: Node, k: &KernelParams<'_>) -> Result<()> {
        with_extra(k.args, |kernel_params, extra| {
            let params = self.kernel_node_params(k, kernel_params, extra);
            // SAFETY: fresh arrays, never the node's own (ROCm/clr#138).
            self.check("hipGraphKernelNodeSetParams", unsafe { (self.core.hipGraphKernelNodeSetParams)(node.0, &params) })
        })
    }

    fn kernel_node_set_by_pointers(&self, node: Node, k: &KernelParamPointers) -> Result<()> {
        let params = self.pointer_node_params(k);
        // SAFETY: the caller's argument pointers are valid for the call; HIP copies the values.
        self.check("hipGraphKernelNodeSetParams", unsafe { (self.core.hipGraphKernelNodeSetParams)(node.0, &params) })
    }

    fn memcpy_node_set(&self, node: Node, c: &MemcpyParams) -> Result<()> {
        // SAFETY: device addresses the runtime validates.
        self.check("hipGraphMemcpyNodeSetParams1D", unsafe {
            (self.core.hipGraphMemcpyNodeSetParams1D)(node.0, ptr(c.dst), ptr(c.src), c.bytes, MEMCPY_DEVICE_TO_DEVICE)
        })
    }

    fn memset_node_set(&self, node: Node, s: &MemsetParams) -> Result<()> {
        let params = self.layout.memset(s);
        // SAFETY: params lives until the call returns.
        self.check("hipGraphMemsetNodeSetParams", unsafe {
            (self.core.hipGraphMemsetNodeSetParams)(node.0, &params as *const _ as *const c_void)
        })
    }

    fn instantiate(&self, graph: Graph) -> Result<Exec> {
        let mut e = null_mut();
        // SAFETY: valid out-pointer; no error node or log requested.
        self.check("hipGraphInstantiate", unsafe { (self.core.hipGraphInstantiate)(&mut e, graph.0, null_mut(), null_mut(), 0) })?;
        Ok(Exec(e))
    }

    fn exec_destroy(&self, exec: Exec) -> Result<()> {
        // SAFETY: the runtime validates the handle.
        self.check("hipGraphExecDestroy", unsafe { (self.core.hipGraphExecDestroy)(exec.0) })
    }

    fn exec_kernel_node_set(&self, exec: Exec, node: Node, k: &KernelParams<'_>) -> Result<()> {
        with_extra(k.args, |kernel_params, extra| {
            let params = self.kernel_node_params(k, kernel_params, extra);
            // SAFETY: fresh arrays that live until the call returns.
            self.check("hipGraphExecKernelNodeSetParams", unsafe { (self.core.hipGraphExecKernelNodeSetParams)(exec.0, node.0, &params) })
        })
    }

    fn exec_kernel_node_set_by_pointers(&self, exec: Exec, node: Node, k: &KernelParamPointers) -> Result<()> {
        let params = self.pointer_node_params(k);
        // SAFETY: the caller's argument pointers are valid for the call; HIP copies the values.
        self.check("hipGraphExecKernelNodeSetParams", unsafe { (self.core.hipGraphExecKernelNodeSetParams)(exec.0, node.0, &params) })
    }

    fn exec_memcpy_node_set(&self, exec: Exec, node: Node, c: &MemcpyParams) -> Result<()> {
        // SAFETY: device addresses the runtime validates.
        self.check("hipGraphExecMemcpyNodeSetParams1D", unsafe {
            (self.core.hipGraphExecMemcpyNodeSetParams1D)(exec.0, node.0, ptr(c.dst), ptr(c.src), c.bytes, MEMCPY_DEVICE_TO_DEVICE)
        })
    }

    fn exec_memset_node_set(&self, exec: Exec, node: Node, s: &MemsetParams) -> Result<()> {
        let params = self.layout.memset(s);
        // SAFETY: params lives until the call returns.
        self.check("hipGraphExecMemsetNodeSetParams", unsafe {
            (self.core.hipGraphExecMemsetNodeSetParams)(exec.0, node.0, &params as *const _ as *const c_void)
        })
    }

    fn exec_child_node_set(&self, exec: Exec, node: Node, child: Graph) -> Result<()> {
        // SAFETY: the runtime validates the handles.
        self.check("hipGraphExecChildGraphNodeSetParams", unsafe {
            (self.core.hipGraphExecChildGraphNodeSetParams)(exec.0, node.0, child.0)
        })
    }

    fn exec_update(&self, exec: Exec, graph: Graph) -> Result<()> {
        let (mut error_node, mut result) = (null_mut(), 0);
        // SAFETY: valid out-pointers.
        let rc = unsafe { (self.core.hipGraphExecUpdate)(exec.0, graph.0, &mut error_node, &mut result) };
        self.check("hipGraphExecUpdate", rc).map_err(|e| e.context(format!("update result {result}")))
    }

    fn graph_launch(&self, exec: Exec, stream: Stream) -> Result<()> {
        // SAFETY: the runtime validates the handles.
        self.check("hipGraphLaunch", unsafe { (self.core.hipGraphLaunch)(exec.0, stream.0) })
    }

    fn begin_capture(&self, stream: Stream, mode: CaptureMode) -> Result<()> {
        // SAFETY: the runtime validates the stream.
        self.check("hipStreamBeginCapture", unsafe { (self.core.hipStreamBeginCapture)(stream.0, mode as c_int) })
    }

    fn end_capture(&self, stream: Stream) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: valid out-pointer.
        self.check("hipStreamEndCapture", unsafe { (self.core.hipStreamEndCapture)(stream.0, &mut g) })?;
        Ok(Graph(g))
    }

    fn stream_is_capturing(&self, stream: Stream) -> Result<bool> {
        let query = self.capture_query.as_ref().ok_or_else(|| Error::unsupported("the HIP runtime lacks hipStreamIsCapturing"))?;
        let mut status = 0;
        // SAFETY: valid out-pointer; the caller holds the stream.
        self.check("hipStreamIsCapturing", unsafe { (query.hipStreamIsCapturing)(stream.0, &mut status) })?;
        Ok(status != CAPTURE_STATUS_NONE)
    }

    fn vmm_granularity(&self, device: i32) -> Result<usize> {
        let vmm = self.vmm()?;
        let prop = self.layout.alloc_prop(device);
        let mut g = 0usize;
        // SAFETY: prop is in the runtime's layout; flag 0 is "minimum".
        self.check("hipMemGetAllocationGranularity", unsafe { (vmm.hipMemGetAllocationGranularity)(&mut g, prop.as_ptr(), 0) })?;
        Ok(g)
    }

    fn vmm_create(&self, device: i32, bytes: usize) -> Result<PhysicalMem> {
        let vmm = self.vmm()?;
        let prop = self.layout.alloc_prop(device);
        let mut h = null_mut();
        // SAFETY: prop is in the runtime's layout.
        self.check("hipMemCreate", unsafe { (vmm.hipMemCreate)(&mut h, bytes, prop.as_ptr(), 0) })?;
        Ok(PhysicalMem(h))
    }

    fn vmm_release(&self, handle: PhysicalMem) -> Result<()> {
        let vmm = self.vmm()?;
        // SAFETY: the runtime validates the handle.
        self.check("hipMemRelease", unsafe { (vmm.hipMemRelease)(handle.0) })
    }

    fn vmm_reserve(&self, bytes: usize, alignment: usize) -> Result<DevicePtr> {
        let vmm = self.vmm()?;
        let mut p = null_mut();
        // SAFETY: valid out-pointer; no fixed address requested.
        self.check("hipMemAddressReserve", unsafe { (vmm.hipMemAddressReserve)(&mut p, bytes, alignment, null_mut(), 0) })?;
        Ok(p as DevicePtr)
    }

    fn vmm_free_range(&self, p: DevicePtr, bytes: usize) -> Result<()> {
        let vmm = self.vmm()?;
        // SAFETY: the runtime validates the range.
        self.check("hipMemAddressFree", unsafe { (vmm.hipMemAddressFree)(ptr(p), bytes) })
    }

    fn vmm_map(&self, p: DevicePtr, bytes: usize, handle: PhysicalMem) -> Result<()> {
        let vmm = self.vmm()?;
        // SAFETY: the runtime validates range and handle.
        self.check("hipMemMap", unsafe { (vmm.hipMemMap)(ptr(p), bytes, 0, handle.0, 0) })
    }

    fn vmm_unmap(&self, p: DevicePtr, bytes: usize) -> Result<()> {
        let vmm = self.vmm()?;
        // SAFETY: the runtime validates the range.
        self.check("hipMemUnmap", unsafe { (vmm.hipMemUnmap)(ptr(p), bytes) })
    }

    fn vmm_set_access(&self, p: DevicePtr, bytes: usize, devices: &[i32]) -> Result<()> {
        let vmm = self.vmm()?;
        let descs: Vec<hipMemAccessDesc> = devices
            .iter()
            .map(|&id| hipMemAccessDesc {
                location: hipMemLocation { type_: hip_runtime_sys::hipMemLocationType::hipMemLocationTypeDevice, id },
                flags: hip_runtime_sys::hipMemAccessFlags::hipMemAccessFlagsProtReadWrite,
            })
            .collect();
        // SAFETY: descs holds devices.len() entries.
        self.check("hipMemSetAccess", unsafe { (vmm.hipMemSetAccess)(ptr(p), bytes, descs.as_ptr(), descs.len()) })
    }

    fn signal_alloc(&self, device: i32) -> Result<Signal> {
        let memops = self.memops()?;
        self.on_device(device, || {
            let mut p = null_mut();
            // SAFETY: valid out-pointer; signal memory is exactly 8 bytes.
            self.check("hipExtMallocWithFlags", unsafe { (memops.hipExtMallocWithFlags)(&mut p, 8, MALLOC_SIGNAL_MEMORY) })?;
            Ok(Signal { host: p as *mut u64, device: p as DevicePtr })
        })
    }

    fn signal_free(&self, signal: Signal) -> Result<()> {
        self.free(signal.device)
    }

    fn stream_write_u64(&self, stream: Stream, p: DevicePtr, value: u64) -> Result<()> {
        let memops = self.memops()?;
        // SAFETY: the runtime validates stream and address.
        self.check("hipStreamWriteValue64", unsafe { (memops.hipStreamWriteValue64)(stream.0, ptr(p), value, 0) })
    }
}

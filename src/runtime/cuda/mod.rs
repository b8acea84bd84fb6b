//! The `cuda` backend (HIP-on-NVIDIA): `libcuda.so.1` with versioned symbols only, a primary
//! context per device made current on every calling thread, and the driver's structs.

mod api;
mod context;
mod layout;
mod status;

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::*;
use api::{CaptureQuery, Core, MemOps, NodeAttributes, ParamInfo, Vmm};
use context::Contexts;
use layout::{AccessDesc, AllocationProp, KernelNodeParams, Memcpy3D, MemsetNodeParams, UpdateResultInfo};
use libloading::Library;
use status::{ERROR_INVALID_VALUE, ERROR_NOT_READY, check};
use std::ffi::{CString, c_int, c_void};
use std::ptr::{null, null_mut};

type P = *mut c_void;

const DEFAULT_LIBRARY: &str = "libcuda.so.1";

pub struct CudaRuntime {
    core: Core,
    vmm: Result<Vmm, String>,
    memops: Result<MemOps, String>,
    param_info: Result<ParamInfo, String>,
    attributes: Option<NodeAttributes>,
    capture_query: Option<CaptureQuery>,
    contexts: Contexts,
    info: RuntimeInfo,
    // Last: the tables above point into it, and it is never unloaded while they live.
    _library: Library,
}

/// Loads the CUDA driver, initialises it and checks that it sees at least one device.
pub fn load(cfg: &Config) -> Result<Box<dyn Runtime>> {
    Ok(Box::new(CudaRuntime::open(cfg)?))
}

impl CudaRuntime {
    fn open(cfg: &Config) -> Result<Self> {
        let (library, name) = open_library(cfg)?;
        let mut missing = Vec::new();
        // SAFETY: the signatures in `api.rs` are the driver's; the library outlives the tables.
        let Some(core) = (unsafe { Core::resolve(&library, &mut missing) }) else {
            return Err(Error::new(
                ErrorKind::RuntimeUnavailable,
                format!("{name} is not a usable CUDA driver (CUDA 12.3 or newer is needed): missing {}", missing.join(", ")),
            ));
        };
        // SAFETY: flags must be 0.
        check(&core, "cuInit", unsafe { (core.cuInit)(0) }).map_err(|e| {
            let kind = if e.kind == ErrorKind::NoDevice { ErrorKind::NoDevice } else { ErrorKind::RuntimeUnavailable };
            Error::new(kind, format!("{name}: {e}"))
        })?;
        let mut version = 0;
        // SAFETY: valid out-pointer.
        check(&core, "cuDriverGetVersion", unsafe { (core.cuDriverGetVersion)(&mut version) })?;
        let mut count = 0;
        // SAFETY: valid out-pointer.
        let rc = unsafe { (core.cuDeviceGetCount)(&mut count) };
        if rc != 0 || count <= 0 {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!("{name} sees no device: cuDeviceGetCount returned {rc} with {count} device(s)"),
            ));
        }

        let missing_in = |names: Vec<&str>| format!("{name} lacks {}", names.join(", "));
        let vmm = resolve(&library, Vmm::resolve).map_err(missing_in).and_then(|v| {
            all_devices_have(&core, count, layout::ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED")
                .map(|()| v)
        });
        let memops = resolve(&library, MemOps::resolve).map_err(missing_in).and_then(|m| {
            all_devices_have(&core, count, layout::ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, "CAN_USE_64_BIT_STREAM_MEM_OPS").map(|()| m)
        });
        let param_info = resolve(&library, ParamInfo::resolve).map_err(missing_in);
        let attributes = resolve(&library, NodeAttributes::resolve).ok();
        let capture_query = resolve(&library, CaptureQuery::resolve).ok();
        let disabled = [("vmm", vmm.as_ref().err()), ("memops", memops.as_ref().err()), ("kernel_params_read", param_info.as_ref().err())]
            .into_iter()
            .filter_map(|(feature, reason)| reason.map(|r| format!("{feature}: {r}")))
            .collect();
        let info = RuntimeInfo { backend: Backend::Cuda, library: name, version, device_count: count, disabled_features: disabled };
        Ok(CudaRuntime {
            core,
            vmm,
            memops,
            param_info,
            attributes,
            capture_query,
            contexts: Contexts::new(count),
            info,
            _library: library,
        })
    }
}

fn open_library(cfg: &Config) -> Result<(Library, String)> {
    let (path, shown) = match &cfg.cuda_library {
        Some(p) => (p.as_os_str().to_owned(), format!("RCB_CUDA_LIBRARY={}", p.display())),
        None => (DEFAULT_LIBRARY.into(), DEFAULT_LIBRARY.to_owned()),
    };
    // SAFETY: loading the driver runs its initialisers, which it is built for.
    let library =
        unsafe { Library::new(&path) }.map_err(|e| Error::new(ErrorKind::RuntimeUnavailable, format!("{shown} cannot be loaded: {e}")))?;
    Ok((library, path.to_string_lossy().into_owned()))
}

fn resolve<T>(lib: &Library, f: unsafe fn(&Library, &mut Vec<&'static str>) -> Option<T>) -> Result<T, Vec<&'static str>> {
    let mut missing = Vec::new();
    // SAFETY: see `load`.
    unsafe { f(lib, &mut missing) }.ok_or(missing)
}

/// `Ok` when every device reports `attribute` as non-zero; else the reason, for `disabled_features`.
fn all_devices_have(core: &Core, count: i32, attribute: c_int, shown: &str) -> Result<(), String> {
    for device in 0..count {
        let (mut handle, mut value) = (0, 0);
        // SAFETY: valid out-pointers; ordinals below the device count.
        let rc = unsafe {
            match (core.cuDeviceGet)(&mut handle, device) {
                0 => (core.cuDeviceGetAttribute)(&mut value, attribute, handle),
                rc => rc,
            }
        };
        if rc != 0 {
            return Err(format!("device {device}: reading attribute {shown} ({attribute}) failed with CUDA error {rc}"));
        }
        if value == 0 {
            return Err(format!("device {device} reports {shown} ({attribute}) = 0"));
        }
    }
    Ok(())
}

/// Calls `f(extra)` with the packed arguments as a `CU_LAUNCH_PARAM` list whose size is the
/// exact parameter size (CUDA rejects a padded size). A kernel without arguments gets null.
fn with_extra<R>(args: &[u8], f: impl FnOnce(*mut P) -> R) -> R {
    if args.is_empty() {
        return f(null_mut());
    }
    let mut size = args.len();
    let mut extra: [P; 5] = [
        layout::LAUNCH_PARAM_BUFFER_POINTER as P,
        args.as_ptr() as P,
        layout::LAUNCH_PARAM_BUFFER_SIZE as P,
        &mut size as *mut usize as P,
        layout::LAUNCH_PARAM_END as P,
    ];
    f(extra.as_mut_ptr())
}

fn node_params(k: &KernelParams<'_>, extra: *mut P) -> KernelNodeParams {
    KernelNodeParams::new(k.function.0, k.grid, k.block, k.shared_mem_bytes, extra)
}

/// `kernelParams`-style node parameters (`extra` null): the driver copies the arguments through
/// the pointers during the call, sized by the kernel's parameter layout. Null is accepted for a
/// kernel without parameters.
fn pointer_node_params(k: &KernelParamPointers) -> KernelNodeParams {
    KernelNodeParams { kernel_params: k.params, ..KernelNodeParams::new(k.function.0, k.grid, k.block, k.shared_mem_bytes, null_mut()) }
}

fn raw_nodes(deps: &[Node]) -> (*const P, usize) {
    if deps.is_empty() { (null(), 0) } else { (deps.as_ptr() as *const P, deps.len()) }
}

impl CudaRuntime {
    fn check(&self, call: &'static str, rc: c_int) -> Result<()> {
        check(&self.core, call, rc)
    }

    /// Makes a context current on this thread, then runs one driver call.
    fn call(&self, name: &'static str, f: impl FnOnce() -> c_int) -> Result<()> {
        self.contexts.ensure_current(&self.core)?;
        self.check(name, f())
    }

    fn on_device<T>(&self, device: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.contexts.on_device(&self.core, device, f)
    }

    fn vmm(&self) -> Result<&Vmm> {
        self.vmm.as_ref().map_err(|r| Error::unsupported(format!("virtual memory management is unavailable: {r}")))
    }

    fn memops(&self) -> Result<&MemOps> {
        self.memops.as_ref().map_err(|r| Error::unsupported(format!("stream memory operations are unavailable: {r}")))
    }

    fn device_handle(&self, device: i32) -> Result<c_int> {
        self.contexts.check_device(device)?;
        let mut handle = 0;
        // SAFETY: valid out-pointer; ordinal range-checked.
        self.check("cuDeviceGet", unsafe { (self.core.cuDeviceGet)(&mut handle, device) })?;
        Ok(handle)
    }

    /// Reads a `kernelParams` node's arguments through the compiled kernel's parameter layout.
    fn read_kernel_params(&self, func: P, values: *mut P) -> Result<Vec<u8>, String> {
        let info = self
            .param_info
            .as_ref()
            .map_err(|r| format!("the kernel node passes kernelParams and the parameter layout is unknown: {r}"))?;
        let mut layout = Vec::new();
        loop {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: valid out-pointers; an index past the last parameter returns INVALID_VALUE.
            match unsafe { (info.cuFuncGetParamInfo)(func, layout.len(), &mut offset, &mut size) } {
                0 => layout.push((offset, size)),
                ERROR_INVALID_VALUE => break,
                rc => return Err(check(&self.core, "cuFuncGetParamInfo", rc).map_or_else(|e| e.message, |()| String::new())),
            }
        }
        // SAFETY: the node holds one pointer per parameter, each to the parameter's bytes.
        Ok(unsafe { layout::pack_params(values, &layout) })
    }
}

impl Runtime for CudaRuntime {
    fn info(&self) -> &RuntimeInfo {
        &self.info
    }

    fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool> {
        let (d, p) = (self.device_handle(device)?, self.device_handle(peer)?);
        let mut can = 0;
        // SAFETY: valid out-pointer and device handles.
        self.check("cuDeviceCanAccessPeer", unsafe { (self.core.cuDeviceCanAccessPeer)(&mut can, d, p) })?;
        Ok(can != 0)
    }

    fn stream_priority_range(&self, device: i32) -> Result<(i32, i32)> {
        self.on_device(device, || {
            let (mut least, mut greatest) = (0, 0);
            // SAFETY: valid out-pointers.
            self.check("cuCtxGetStreamPriorityRange", unsafe { (self.core.cuCtxGetStreamPriorityRange)(&mut least, &mut greatest) })?;
            Ok((least, greatest))
        })
    }

    fn malloc(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        self.on_device(device, || {
            let mut p = 0;
            // SAFETY: valid out-pointer.
            self.check("cuMemAlloc_v2", unsafe { (self.core.cuMemAlloc_v2)(&mut p, bytes) })?;
            Ok(p)
        })
    }

    fn free(&self, p: DevicePtr) -> Result<()> {
        // SAFETY: the driver validates the pointer.
        self.call("cuMemFree_v2", || unsafe { (self.core.cuMemFree_v2)(p) })
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: src is a live host slice of the given length.
        self.call("cuMemcpyHtoD_v2", || unsafe { (self.core.cuMemcpyHtoD_v2)(dst, src.as_ptr() as *const c_void, src.len()) })
    }

    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: dst is a live host slice of the given length.
        self.call("cuMemcpyDtoH_v2", || unsafe { (self.core.cuMemcpyDtoH_v2)(dst.as_mut_ptr() as P, src, dst.len()) })
    }

    fn copy_device_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream) -> Result<()> {
        // SAFETY: the driver validates pointers and stream.
        self.call("cuMemcpyDtoDAsync_v2", || unsafe { (self.core.cuMemcpyDtoDAsync_v2)(dst, src, bytes, stream.0) })
    }

    fn stream_create(&self, device: i32, flags: u32, priority: i32) -> Result<Stream> {
        self.on_device(device, || {
            let mut s = null_mut();
            // SAFETY: valid out-pointer; the driver clamps the priority.
            self.check("cuStreamCreateWithPriority", unsafe { (self.core.cuStreamCreateWithPriority)(&mut s, flags, priority) })?;
            Ok(Stream(s))
        })
    }

    fn stream_destroy(&self, stream: Stream) -> Result<()> {
        // SAFETY: the driver validates the handle.
        self.call("cuStreamDestroy_v2", || unsafe { (self.core.cuStreamDestroy_v2)(stream.0) })
    }

    fn stream_is_idle(&self, stream: Stream) -> Result<bool> {
        self.contexts.ensure_current(&self.core)?;
        // SAFETY: the driver validates the handle.
        match unsafe { (self.core.cuStreamQuery)(stream.0) } {
            ERROR_NOT_READY => Ok(false),
            rc => self.check("cuStreamQuery", rc).map(|()| true),
        }
    }

    fn stream_synchronize(&self, stream: Stream) -> Result<()> {
        // SAFETY: the driver validates the handle.
        self.call("cuStreamSynchronize", || unsafe { (self.core.cuStreamSynchronize)(stream.0) })
    }

    fn stream_flags(&self, stream: Stream) -> Result<u32> {
        let mut flags = 0;
        // SAFETY: valid out-pointer.
        self.call("cuStreamGetFlags", || unsafe { (self.core.cuStreamGetFlags)(stream.0, &mut flags) })?;
        Ok(flags)
    }

    fn stream_priority(&self, stream: Stream) -> Result<i32> {
        let mut priority = 0;
        // SAFETY: valid out-pointer.
        self.call("cuStreamGetPriority", || unsafe { (self.core.cuStreamGetPriority)(stream.0, &mut priority) })?;
        Ok(priority)
    }

    fn module_load(&self, device: i32, image: &[u8]) -> Result<Module> {
        let owned = crate::runtime::nul_terminated(image);
        self.on_device(device, || {
            let mut m = null_mut();
            // SAFETY: the image outlives the call.
            self.check("cuModuleLoadData", unsafe { (self.core.cuModuleLoadData)(&mut m, owned.as_ptr() as *const c_void) })?;
            Ok(Module(m))
        })
    }

    fn module_unload(&self, module: Module) -> Result<()> {
        // SAFETY: the driver validates the handle.
        self.call("cuModuleUnload", || unsafe { (self.core.cuModuleUnload)(module.0) })
    }

    fn module_function(&self, module: Module, name: &str) -> Result<Function> {
        let cname = CString::new(name).map_err(|_| Error::invalid_argument("kernel name contains a NUL byte"))?;
        let mut f = null_mut();
        // SAFETY: valid out-pointer and C string.
        self.call("cuModuleGetFunction", || unsafe { (self.core.cuModuleGetFunction)(&mut f, module.0, cname.as_ptr()) })
            .map_err(|e| e.context(format!("kernel {name:?}")))?;
        Ok(Function(f))
    }

    fn launch_kernel(&self, k: &KernelParams<'_>, stream: Stream) -> Result<()> {
        with_extra(k.args, |extra| {
            // SAFETY: the argument list lives until the call returns; the driver copies it.
            self.call("cuLaunchKernel", || unsafe {
                (self.core.cuLaunchKernel)(
                    k.function.0,
                    k.grid[0],
                    k.grid[1],
                    k.grid[2],
                    k.block[0],
                    k.block[1],
                    k.block[2],
                    k.shared_mem_bytes,
                    stream.0,
                    null_mut(),
                    extra,
                )
            })
        })
    }

    fn graph_create(&self) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: valid out-pointer; flags must be 0.
        self.call("cuGraphCreate", || unsafe { (self.core.cuGraphCreate)(&mut g, 0) })?;
        Ok(Graph(g))
    }

    fn graph_destroy(&self, graph: Graph) -> Result<()> {
        // SAFETY: the driver validates the handle.
        self.call("cuGraphDestroy", || unsafe { (self.core.cuGraphDestroy)(graph.0) })
    }

    fn add_kernel_node(&self, graph: Graph, deps: &[Node], k: &KernelParams<'_>) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        with_extra(k.args, |extra| {
            let params = node_params(k, extra);
            let mut node = null_mut();
            // SAFETY: params and its list live until the call returns; the driver copies them.
            self.call("cuGraphAddKernelNode_v2", || unsafe { (self.core.cuGraphAddKernelNode_v2)(&mut node, graph.0, d, n, &params) })?;
            Ok(Node(node))
        })
    }

    fn add_kernel_node_by_pointers(&self, graph: Graph, deps: &[Node], k: &KernelParamPointers) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let params = pointer_node_params(k);
        let mut node = null_mut();
        // SAFETY: the caller's argument pointers are valid for the call; the driver copies the values.
        self.call("cuGraphAddKernelNode_v2", || unsafe { (self.core.cuGraphAddKernelNode_v2)(&mut node, graph.0, d, n, &params) })?;
        Ok(Node(node))
    }

    fn add_memcpy_node(&self, graph: Graph, deps: &[Node], c: &MemcpyParams) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let ctx = self.contexts.current(&self.core)?;
        let params = Memcpy3D::device_1d(c);
        let mut node = null_mut();
        // SAFETY: params lives until the call returns.
        self.check("cuGraphAddMemcpyNode", unsafe { (self.core.cuGraphAddMemcpyNode)(&mut node, graph.0, d, n, &params, ctx) })?;
        Ok(Node(node))
    }

    fn add_memset_node(&self, graph: Graph, deps: &[Node], s: &MemsetParams) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let ctx = self.contexts.current(&self.core)?;
        let params = MemsetNodeParams::from(s);
        let mut node = null_mut();
        // SAFETY: params lives until the call returns.
        self.check("cuGraphAddMemsetNode", unsafe { (self.core.cuGraphAddMemsetNode)(&mut node, graph.0, d, n, &params, ctx) })?;
        Ok(Node(node))
    }

    fn add_empty_node(&self, graph: Graph, deps: &[Node]) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let mut node = null_mut();
        // SAFETY: valid out-pointer and dependency array.
        self.call("cuGraphAddEmptyNode", || unsafe { (self.core.cuGraphAddEmptyNode)(&mut node, graph.0, d, n) })?;
        Ok(Node(node))
    }

    fn add_child_node(&self, graph: Graph, deps: &[Node], child: Graph) -> Result<Node> {
        let (d, n) = raw_nodes(deps);
        let mut node = null_mut();
        // SAFETY: valid out-pointer and dependency array; the driver clones the child.
        self.call("cuGraphAddChildGraphNode", || unsafe { (self.core.cuGraphAddChildGraphNode)(&mut node, graph.0, d, n, child.0) })?;
        Ok(Node(node))
    }

    fn add_edges(&self, graph: Graph, edges: &[Edge]) -> Result<()> {
        let from: Vec<P> = edges.iter().map(|e| e.from.0).collect();
        let to: Vec<P> = edges.iter().map(|e| e.to.0).collect();
        let data: Vec<layout::EdgeDataRaw> = edges.iter().map(|e| e.data.0).collect();
        // SAFETY: the three arrays hold edges.len() entries.
        self.call("cuGraphAddDependencies_v2", || unsafe {
            (self.core.cuGraphAddDependencies_v2)(graph.0, from.as_ptr(), to.as_ptr(), data.as_ptr(), edges.len())
        })
    }

    fn graph_nodes(&self, graph: Graph) -> Result<Vec<Node>> {
        let mut n = 0usize;
        // SAFETY: a null array asks for the count.
        self.call("cuGraphGetNodes", || unsafe { (self.core.cuGraphGetNodes)(graph.0, null_mut(), &mut n) })?;
        // The driver rejects a non-null array with a zero count.
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut nodes = vec![null_mut(); n];
        // SAFETY: the array holds `n` entries.
        self.check("cuGraphGetNodes", unsafe { (self.core.cuGraphGetNodes)(graph.0, nodes.as_mut_ptr(), &mut n) })?;
        nodes.truncate(n);
        Ok(nodes.into_iter().map(Node).collect())
    }

    fn graph_edges(&self, graph: Graph) -> Result<Vec<Edge>> {
        let mut n = 0usize;
        // SAFETY: null arrays ask for the count.
        self.call("cuGraphGetEdges_v2", || unsafe { (self.core.cuGraphGetEdges_v2)(graph.0, null_mut(), null_mut(), null_mut(), &mut n) })?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let (mut from, mut to, mut data) = (vec![null_mut(); n], vec![null_mut(); n], vec![[0u8; 8]; n]);
        // SAFETY: the three arrays hold `n` entries.
        self.check("cuGraphGetEdges_v2", unsafe {
            (self.core.cuGraphGetEdges_v2)(graph.0, from.as_mut_ptr(), to.as_mut_ptr(), data.as_mut_ptr(), &mut n)
        })?;
        Ok((0..n.min(from.len())).map(|i| Edge { from: Node(from[i]), to: Node(to[i]), data: EdgeData(data[i]) }).collect())
    }

    fn node_type(&self, node: Node) -> Result<NodeType> {
        let mut raw = 0;
        // SAFETY: valid out-pointer.
        self.call("cuGraphNodeGetType", || unsafe { (self.core.cuGraphNodeGetType)(node.0, &mut raw) })?;
        Ok(layout::node_type(raw))
    }

    fn kernel_node_read(&self, node: Node) -> Result<KernelNodeRead> {
        let mut p = KernelNodeParams::zeroed();
        // SAFETY: valid out-pointer; the returned arrays are owned by the node and only read here.
        self.call("cuGraphKernelNodeGetParams_v2", || unsafe { (self.core.cuGraphKernelNodeGetParams_v2)(node.0, &mut p) })?;
        let mut func = p.func;
        if func.is_null() && !p.kern.is_null() {
            // A node built from a library kernel (CUkernel) names its function through it.
            let info = self.param_info.as_ref().map_err(|r| Error::unsupported(format!("the kernel node holds a CUkernel: {r}")))?;
            // SAFETY: valid out-pointer; `kern` is the node's kernel and the context is current.
            self.check("cuKernelGetFunction", unsafe { (info.cuKernelGetFunction)(&mut func, p.kern) })?;
        }
        let args = if !p.extra.is_null() {
            // SAFETY: `extra` is the node's own launch-parameter list, valid until its parameters
            // change: the driver ends it with END and its SIZE and buffer describe the arguments.
            unsafe { crate::runtime::extra::parse(p.extra, &layout::EXTRA_KEYS) }
        } else if !p.kernel_params.is_null() {
            self.read_kernel_params(func, p.kernel_params)
        } else {
            Ok(Vec::new())
        };
        Ok(KernelNodeRead { function: Function(func), grid: p.grid, block: p.block, shared_mem_bytes: p.shared_mem_bytes, args })
    }

    fn copy_kernel_node_attributes(&self, dst: Node, src: Node) -> Result<()> {
        match &self.attributes {
            // SAFETY: both are kernel nodes the caller holds.
            Some(a) => self.call("cuGraphKernelNodeCopyAttributes", || unsafe { (a.cuGraphKernelNodeCopyAttributes)(dst.0, src.0) }),
            // Drivers before CUDA 11.7 have no kernel-node attributes to lose.
            None => Ok(()),
        }
    }

    fn memcpy_node_read(&self, node: Node) -> Result<MemcpyParams> {
        let mut p = Memcpy3D::zeroed();
        // SAFETY: valid out-pointer.
        self.call("cuGraphMemcpyNodeGetParams", || unsafe { (self.core.cuGraphMemcpyNodeGetParams)(node.0, &mut p) })?;
        p.as_device_1d().ok_or_else(|| Error::unsupported("the memcpy node is not a 1-D device copy"))
    }

    fn memset_node_read(&self, node: Node) -> Result<MemsetParams> {
        let mut p = MemsetNodeParams::default();
        // SAFETY: valid out-pointer.
        self.call("cuGraphMemsetNodeGetParams", || unsafe { (self.core.cuGraphMemsetNodeGetParams)(node.0, &mut p) })?;
        Ok(MemsetParams::from(&p))
    }

    fn child_node_graph(&self, node: Node) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: valid out-pointer.
        self.call("cuGraphChildGraphNodeGetGraph", || unsafe { (self.core.cuGraphChildGraphNodeGetGraph)(node.0, &mut g) })?;
        Ok(Graph(g))
    }

    fn kernel_node_set(&self, node: Node, k: &KernelParams<'_>) -> Result<()> {
        with_extra(k.args, |extra| {
            let params = node_params(k, extra);
            // SAFETY: fresh arrays, never the node's own.
            self.call("cuGraphKernelNodeSetParams_v2", || unsafe { (self.core.cuGraphKernelNodeSetParams_v2)(node.0, &params) })
        })
    }

    fn kernel_node_set_by_pointers(&self, node: Node, k: &KernelParamPointers) -> Result<()> {
        let params = pointer_node_params(k);
        // SAFETY: the caller's argument pointers are valid for the call; the driver copies the values.
        self.call("cuGraphKernelNodeSetParams_v2", || unsafe { (self.core.cuGraphKernelNodeSetParams_v2)(node.0, &params) })
    }

    fn memcpy_node_set(&self, node: Node, c: &MemcpyParams) -> Result<()> {
        let params = Memcpy3D::device_1d(c);
        // SAFETY: params lives until the call returns.
        self.call("cuGraphMemcpyNodeSetParams", || unsafe { (self.core.cuGraphMemcpyNodeSetParams)(node.0, &params) })
    }

    fn memset_node_set(&self, node: Node, s: &MemsetParams) -> Result<()> {
        let params = MemsetNodeParams::from(s);
        // SAFETY: params lives until the call returns.
        self.call("cuGraphMemsetNodeSetParams", || unsafe { (self.core.cuGraphMemsetNodeSetParams)(node.0, &params) })
    }

    fn instantiate(&self, graph: Graph) -> Result<Exec> {
        let mut e = null_mut();
        // SAFETY: valid out-pointer; no flags.
        self.call("cuGraphInstantiateWithFlags", || unsafe { (self.core.cuGraphInstantiateWithFlags)(&mut e, graph.0, 0) })?;
        Ok(Exec(e))
    }

    fn exec_destroy(&self, exec: Exec) -> Result<()> {
        // SAFETY: the driver validates the handle.
        self.call("cuGraphExecDestroy", || unsafe { (self.core.cuGraphExecDestroy)(exec.0) })
    }

    fn exec_kernel_node_set(&self, exec: Exec, node: Node, k: &KernelParams<'_>) -> Result<()> {
        with_extra(k.args, |extra| {
            let params = node_params(k, extra);
            // SAFETY: fresh arrays that live until the call returns.
            self.call("cuGraphExecKernelNodeSetParams_v2", || unsafe {
                (self.core.cuGraphExecKernelNodeSetParams_v2)(exec.0, node.0, &params)
            })
        })
    }

    fn exec_kernel_node_set_by_pointers(&self, exec: Exec, node: Node, k: &KernelParamPointers) -> Result<()> {
        let params = pointer_node_params(k);
        // SAFETY: the caller's argument pointers are valid for the call; the driver copies the values.
        self.call("cuGraphExecKernelNodeSetParams_v2", || unsafe { (self.core.cuGraphExecKernelNodeSetParams_v2)(exec.0, node.0, &params) })
    }

    fn exec_memcpy_node_set(&self, exec: Exec, node: Node, c: &MemcpyParams) -> Result<()> {
        let ctx = self.contexts.current(&self.core)?;
        let params = Memcpy3D::device_1d(c);
        // SAFETY: params lives until the call returns.
        self.check("cuGraphExecMemcpyNodeSetParams", unsafe { (self.core.cuGraphExecMemcpyNodeSetParams)(exec.0, node.0, &params, ctx) })
    }

    fn exec_memset_node_set(&self, exec: Exec, node: Node, s: &MemsetParams) -> Result<()> {
        let ctx = self.contexts.current(&self.core)?;
        let params = MemsetNodeParams::from(s);
        // SAFETY: params lives until the call returns.
        self.check("cuGraphExecMemsetNodeSetParams", unsafe { (self.core.cuGraphExecMemsetNodeSetParams)(exec.0, node.0, &params, ctx) })
    }

    fn exec_child_node_set(&self, exec: Exec, node: Node, child: Graph) -> Result<()> {
        // SAFETY: the driver validates the handles.
        self.call("cuGraphExecChildGraphNodeSetParams", || unsafe {
            (self.core.cuGraphExecChildGraphNodeSetParams)(exec.0, node.0, child.0)
        })
    }

    fn exec_update(&self, exec: Exec, graph: Graph) -> Result<()> {
        let mut info = UpdateResultInfo { result: 0, error_node: null_mut(), error_from_node: null_mut() };
        // SAFETY: valid out-pointer.
        self.call("cuGraphExecUpdate_v2", || unsafe { (self.core.cuGraphExecUpdate_v2)(exec.0, graph.0, &mut info) })
            .map_err(|e| e.context(format!("update result {}", info.result)))
    }

    fn graph_launch(&self, exec: Exec, stream: Stream) -> Result<()> {
        // SAFETY: the driver validates the handles.
        self.call("cuGraphLaunch", || unsafe { (self.core.cuGraphLaunch)(exec.0, stream.0) })
    }

    fn begin_capture(&self, stream: Stream, mode: CaptureMode) -> Result<()> {
        // SAFETY: the driver validates the stream; the modes have CUDA's values.
        self.call("cuStreamBeginCapture_v2", || unsafe { (self.core.cuStreamBeginCapture_v2)(stream.0, mode as c_int) })
    }

    fn end_capture(&self, stream: Stream) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: valid out-pointer.
        self.call("cuStreamEndCapture", || unsafe { (self.core.cuStreamEndCapture)(stream.0, &mut g) })?;
        Ok(Graph(g))
    }

    fn stream_is_capturing(&self, stream: Stream) -> Result<bool> {
        let query = self.capture_query.as_ref().ok_or_else(|| Error::unsupported("the CUDA driver lacks cuStreamIsCapturing"))?;
        let mut status = 0;
        // SAFETY: valid out-pointer; the caller holds the stream.
        self.call("cuStreamIsCapturing", || unsafe { (query.cuStreamIsCapturing)(stream.0, &mut status) })?;
        // CU_STREAM_CAPTURE_STATUS_NONE; active and invalidated captures both still need their end.
        Ok(status != 0)
    }

    fn vmm_granularity(&self, device: i32) -> Result<usize> {
        let vmm = self.vmm()?;
        self.contexts.check_device(device)?;
        let prop = AllocationProp::device(device);
        let mut g = 0usize;
        // SAFETY: prop is a valid CUmemAllocationProp; flag 0 is "minimum".
        self.call("cuMemGetAllocationGranularity", || unsafe { (vmm.cuMemGetAllocationGranularity)(&mut g, &prop, 0) })?;
        Ok(g)
    }

    fn vmm_create(&self, device: i32, bytes: usize) -> Result<PhysicalMem> {
        let vmm = self.vmm()?;
        self.contexts.check_device(device)?;
        let prop = AllocationProp::device(device);
        let mut h = 0u64;
        // SAFETY: prop is a valid CUmemAllocationProp.
        self.call("cuMemCreate", || unsafe { (vmm.cuMemCreate)(&mut h, bytes, &prop, 0) })?;
        Ok(PhysicalMem(h as P))
    }

    fn vmm_release(&self, handle: PhysicalMem) -> Result<()> {
        let vmm = self.vmm()?;
        // SAFETY: the driver validates the handle.
        self.call("cuMemRelease", || unsafe { (vmm.cuMemRelease)(handle.0 as u64) })
    }

    fn vmm_reserve(&self, bytes: usize, alignment: usize) -> Result<DevicePtr> {
        let vmm = self.vmm()?;
        let mut p = 0;
        // SAFETY: valid out-pointer; no fixed address requested.
        self.call("cuMemAddressReserve", || unsafe { (vmm.cuMemAddressReserve)(&mut p, bytes, alignment, 0, 0) })?;
        Ok(p)
    }

    fn vmm_free_range(&self, p: DevicePtr, bytes: usize) -> Result<()> {
        let vmm = self.vmm()?;
        // SAFETY: the driver validates the range.
        self.call("cuMemAddressFree", || unsafe { (vmm.cuMemAddressFree)(p, bytes) })
    }

    fn vmm_map(&self, p: DevicePtr, bytes: usize, handle: PhysicalMem) -> Result<()> {
        let vmm = self.vmm()?;
        // SAFETY: the driver validates range and handle.
        self.call("cuMemMap", || unsafe { (vmm.cuMemMap)(p, bytes, 0, handle.0 as u64, 0) })
    }

    fn vmm_unmap(&self, p: DevicePtr, bytes: usize) -> Result<()> {
        let vmm = self.vmm()?;
        // SAFETY: the driver validates the range.
        self.call("cuMemUnmap", || unsafe { (vmm.cuMemUnmap)(p, bytes) })
    }

    fn vmm_set_access(&self, p: DevicePtr, bytes: usize, devices: &[i32]) -> Result<()> {
        let vmm = self.vmm()?;
        for &d in devices {
            self.contexts.check_device(d)?;
        }
        let descs: Vec<AccessDesc> = devices.iter().map(|&d| AccessDesc::read_write(d)).collect();
        // SAFETY: descs holds devices.len() entries.
        self.call("cuMemSetAccess", || unsafe { (vmm.cuMemSetAccess)(p, bytes, descs.as_ptr(), descs.len()) })
    }

    fn signal_alloc(&self, device: i32) -> Result<Signal> {
        let memops = self.memops()?;
        self.on_device(device, || {
            let mut host = null_mut();
            // SAFETY: valid out-pointer; pinned, mapped into every context.
            self.check("cuMemHostAlloc", unsafe { (memops.cuMemHostAlloc)(&mut host, 8, layout::HOST_ALLOC_PORTABLE_DEVICEMAP) })?;
            // SAFETY: the allocation is 8 bytes, aligned, and ours.
            unsafe { (host as *mut u64).write(0) };
            let mut device_ptr = 0;
            // SAFETY: `host` is a mapped pinned allocation; flags must be 0.
            let rc = unsafe { (memops.cuMemHostGetDevicePointer_v2)(&mut device_ptr, host, 0) };
            if let Err(e) = self.check("cuMemHostGetDevicePointer_v2", rc) {
                // SAFETY: frees the allocation made above, which nothing else has seen.
                unsafe { (memops.cuMemFreeHost)(host) };
                return Err(e);
            }
            Ok(Signal { host: host as *mut u64, device: device_ptr })
        })
    }

    fn signal_free(&self, signal: Signal) -> Result<()> {
        let memops = self.memops()?;
        // SAFETY: the driver validates the pointer.
        self.call("cuMemFreeHost", || unsafe { (memops.cuMemFreeHost)(signal.host as P) })
    }

    fn stream_write_u64(&self, stream: Stream, p: DevicePtr, value: u64) -> Result<()> {
        let memops = self.memops()?;
        // SAFETY: the driver validates stream and address; flags 0 keeps the memory barrier.
        self.call("cuStreamWriteValue64_v2", || unsafe { (memops.cuStreamWriteValue64_v2)(stream.0, p, value, 0) })
    }
}

#[cfg(test)]
mod tests {
    //! What the backend-agnostic tests cannot reach through the `Runtime` interface: kernel
    //! nodes built with `kernelParams` (as XLA builds them). Runs only with `RCB_BACKEND=cuda`.
    use super::*;

    #[test]
    fn kernel_params_nodes_read_back_through_the_parameter_layout() {
        if std::env::var("RCB_BACKEND").as_deref() != Ok("cuda") {
            eprintln!("SKIPPED: needs RCB_BACKEND=cuda and a GPU");
            return;
        }
        let rt = match CudaRuntime::open(crate::config::get().unwrap()) {
            Ok(rt) => rt,
            Err(e) if matches!(e.kind, ErrorKind::NoDevice | ErrorKind::RuntimeUnavailable) => {
                eprintln!("SKIPPED: no GPU for RCB_BACKEND=cuda: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        if rt.param_info.is_err() {
            eprintln!("SKIPPED: {:?}", rt.param_info.as_ref().err());
            return;
        }
        let path = std::env::var("RCB_TEST_PTX").unwrap_or_else(|_| String::from("tests/gpu/kernels.ptx"));
        let ptx = std::fs::read(&path).unwrap();
        let module = rt.module_load(0, &ptx).unwrap();
        let fill = rt.module_function(module, "rcb_test_fill_u32").unwrap();
        let (dst, value, n) = (0x7000_0000_1000u64, 0xabcd_0123u32, 77u64);
        let mut values: [P; 3] = [&dst as *const u64 as P, &value as *const u32 as P, &n as *const u64 as P];
        let graph = rt.graph_create().unwrap();
        let params =
            KernelNodeParams { kernel_params: values.as_mut_ptr(), ..KernelNodeParams::new(fill.0, [1; 3], [32, 1, 1], 0, null_mut()) };
        let mut node = null_mut();
        rt.call("cuGraphAddKernelNode_v2", || unsafe { (rt.core.cuGraphAddKernelNode_v2)(&mut node, graph.0, null(), 0, &params) })
            .unwrap();
        let read = rt.kernel_node_read(Node(node)).unwrap();
        let mut expected = dst.to_le_bytes().to_vec();
        expected.extend(value.to_le_bytes());
        expected.extend([0; 4]);
        expected.extend(n.to_le_bytes());
        assert_eq!(read.args.unwrap(), expected);
        assert_eq!(read.function, fill);
        rt.graph_destroy(graph).unwrap();
    }
}

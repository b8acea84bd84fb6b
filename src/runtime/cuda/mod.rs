//! The `cuda` backend (HIP-on-NVIDIA): `libcuda.so.1` with versioned symbols only, a primary
//! context per device made current on every calling thread, and the driver's structs. One file
//! per subject: `memory.rs` (with the timeline), `streams.rs`, `graphs.rs`, `vmm.rs` and
//! `direct.rs`.

mod api;
mod context;
mod direct;
mod graphs;
mod layout;
mod memory;
mod status;
mod streams;
mod vmm;

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::common::P;
use crate::runtime::extra;
use crate::runtime::symbols::{Feature, missing_in};
use crate::runtime::*;
use api::{CaptureQuery, Core, FuncName, MemOps, NodeAttributes, NodeKinds, ParamInfo, PointerClass, StreamDevice, ThreadCaptureMode};
use context::Contexts;
use layout::KernelNodeParams;
use libloading::Library;
use status::{ERROR_INVALID_VALUE, check};
use std::ffi::c_int;
use std::ptr::null_mut;

const DEFAULT_LIBRARY: &str = "libcuda.so.1";

pub struct CudaRuntime {
    core: Core,
    vmm: Feature<api::Vmm>,
    memops: Feature<MemOps>,
    param_info: Feature<ParamInfo>,
    attributes: Option<NodeAttributes>,
    capture_query: Option<CaptureQuery>,
    thread_mode: Option<ThreadCaptureMode>,
    names: Feature<FuncName>,
    node_kinds: Feature<NodeKinds>,
    pointer_class: Feature<PointerClass>,
    stream_device: Option<StreamDevice>,
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
        // SAFETY: the signatures in `api.rs` are the driver's, and the library is stored in the
        // same struct as the tables, after them, so it outlives them; likewise for every
        // `resolve` below.
        let core = unsafe { Core::resolve(&library) }.map_err(|missing| {
            Error::new(
                ErrorKind::RuntimeUnavailable,
                format!("{name} is not a usable CUDA driver (CUDA 12.3 or newer is needed): missing {}", missing.join(", ")),
            )
        })?;
        // SAFETY: flags must be 0.
        check(&core, "cuInit", unsafe { (core.cuInit)(0) }).map_err(|e| {
            let kind = if e.kind == ErrorKind::NoDevice { ErrorKind::NoDevice } else { ErrorKind::RuntimeUnavailable };
            Error::new(kind, format!("{name}: {e}"))
        })?;
        let mut version = 0;
        // SAFETY: a valid out-pointer.
        check(&core, "cuDriverGetVersion", unsafe { (core.cuDriverGetVersion)(&mut version) })?;
        let mut count = 0;
        // SAFETY: a valid out-pointer.
        let rc = unsafe { (core.cuDeviceGetCount)(&mut count) };
        if rc != 0 || count <= 0 {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!("{name} sees no device: cuDeviceGetCount returned {rc} with {count} device(s)"),
            ));
        }

        // SAFETY: as for `Core`.
        let vmm = unsafe { api::Vmm::resolve(&library) }.map_err(|m| missing_in(&name, m)).and_then(|v| {
            all_devices_have(&core, count, layout::ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED")
                .map(|()| v)
        });
        let vmm = Feature::new("vmm", "virtual memory management is unavailable", vmm);
        // SAFETY: as for `Core`.
        let memops = unsafe { MemOps::resolve(&library) }.map_err(|m| missing_in(&name, m)).and_then(|m| {
            all_devices_have(&core, count, layout::ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, "CAN_USE_64_BIT_STREAM_MEM_OPS").map(|()| m)
        });
        let memops = Feature::new("memops", "stream memory operations are unavailable", memops);
        // SAFETY: as for `Core`.
        let param_info = unsafe { ParamInfo::resolve(&library) }.map_err(|m| missing_in(&name, m));
        let param_info = Feature::new("kernel_params_read", "reading kernel parameter layouts is unavailable", param_info);
        // SAFETY: as for `Core`.
        let attributes = unsafe { NodeAttributes::resolve(&library) }.ok();
        // SAFETY: as for `Core`.
        let capture_query = unsafe { CaptureQuery::resolve(&library) }.ok();
        // SAFETY: as for `Core`.
        let thread_mode = unsafe { ThreadCaptureMode::resolve(&library) }.ok();
        // SAFETY: as for `Core`.
        let stream_device = unsafe { StreamDevice::resolve(&library) }.ok();
        // SAFETY: as for `Core`.
        let names = unsafe { FuncName::resolve(&library) }.map_err(|m| missing_in(&name, m));
        let names = Feature::new("kernel_names", "kernel names are unavailable", names);
        // SAFETY: as for `Core`.
        let node_kinds = unsafe { NodeKinds::resolve(&library) }.map_err(|m| missing_in(&name, m));
        let node_kinds = Feature::new("node_kinds", "flattening event, host and memory-operation nodes is unavailable", node_kinds);
        // SAFETY: as for `Core`.
        let pointer_class = unsafe { PointerClass::resolve(&library) }.map_err(|m| missing_in(&name, m));
        let pointer_class = Feature::new("pointer_class", "telling allocation kinds apart is unavailable", pointer_class);
        let disabled =
            [vmm.disabled(), memops.disabled(), param_info.disabled(), names.disabled(), node_kinds.disabled(), pointer_class.disabled()]
                .into_iter()
                .flatten()
                .collect();
        let info = RuntimeInfo { backend: Backend::Cuda, library: name, version, device_count: count, disabled_features: disabled };
        Ok(CudaRuntime {
            core,
            vmm,
            memops,
            param_info,
            attributes,
            capture_query,
            thread_mode,
            names,
            node_kinds,
            pointer_class,
            stream_device,
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

/// `Ok` when every device reports `attribute` as non-zero; else the reason, for `disabled_features`.
fn all_devices_have(core: &Core, count: i32, attribute: c_int, shown: &str) -> Result<(), String> {
    for device in 0..count {
        let (mut handle, mut value) = (0, 0);
        // SAFETY: valid out-pointers; ordinals below the device count; the handle is the one
        // `cuDeviceGet` just returned.
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
    extra::with_list(args, &layout::EXTRA_KEYS, f)
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

    fn device_handle(&self, device: i32) -> Result<c_int> {
        self.contexts.check_device(device)?;
        let mut handle = 0;
        // SAFETY: a valid out-pointer; the ordinal was range-checked.
        self.check("cuDeviceGet", unsafe { (self.core.cuDeviceGet)(&mut handle, device) })?;
        Ok(handle)
    }

    /// Reads a `kernelParams` node's arguments through the compiled kernel's parameter layout.
    fn read_kernel_params(&self, func: P, values: *mut P) -> Result<Vec<u8>, String> {
        let info =
            self.param_info.table().map_err(|r| format!("the kernel node passes kernelParams and the parameter layout is unknown: {r}"))?;
        let mut layout = Vec::new();
        loop {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: valid out-pointers; `func` is the live node's function; an index past the
            // last parameter returns INVALID_VALUE.
            match unsafe { (info.cuFuncGetParamInfo)(func, layout.len(), &mut offset, &mut size) } {
                0 => layout.push((offset, size)),
                ERROR_INVALID_VALUE => break,
                rc => return Err(check(&self.core, "cuFuncGetParamInfo", rc).map_or_else(|e| e.message, |()| String::new())),
            }
        }
        // SAFETY: the node holds one pointer per parameter, each to the parameter's bytes, and
        // the caller keeps the node (and so its arrays) live and unchanged during the read.
        Ok(unsafe { layout::pack_params(values, &layout) })
    }
}

common::impl_runtime!(CudaRuntime);

#[cfg(test)]
mod tests {
    //! What the backend-agnostic tests cannot reach through the `Runtime` interface: kernel
    //! nodes built with `kernelParams` (as XLA builds them). Runs only with `RCB_BACKEND=cuda`.
    use super::*;
    use std::ptr::null;

    #[test]
    fn kernel_params_nodes_read_back_through_the_parameter_layout() {
        // The SKIPPED line of tests/common/mod.rs: `<test binary>::<test>: <what> (<why>)`.
        let skip = |why: &dyn std::fmt::Display| {
            let line = format!("SKIPPED rocm_cmdbuf::{}: every check ({why})\n", std::thread::current().name().unwrap_or("?"));
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        };
        if std::env::var("RCB_BACKEND").as_deref() != Ok("cuda") {
            return skip(&"needs RCB_BACKEND=cuda and a GPU");
        }
        let rt = match CudaRuntime::open(crate::config::get().unwrap()) {
            Ok(rt) => rt,
            Err(e)
                if matches!(e.kind, ErrorKind::NoDevice | ErrorKind::RuntimeUnavailable)
                    && std::env::var("RCB_TEST_REQUIRE_GPU").as_deref() != Ok("1") =>
            {
                return skip(&format_args!("no GPU for RCB_BACKEND=cuda: {e}"));
            }
            Err(e) => panic!("{e}"),
        };
        if let Err(reason) = rt.param_info.table() {
            return skip(&reason);
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
        // SAFETY: a valid out-pointer; the graph is live, no dependencies, and `params` and `values` live until the call returns.
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

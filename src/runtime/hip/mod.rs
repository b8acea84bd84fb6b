//! The `hip` backend: `libamdhip64` loaded at run time, struct layouts chosen by its version.
//! One file per subject: `memory.rs` (with the timeline), `streams.rs`, `graphs.rs`, `vmm.rs`
//! and `direct.rs`.

#[cfg(test)]
mod abi;
mod api;
mod direct;
mod graphs;
mod layout;
mod library;
mod memory;
mod streams;
mod vmm;

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::common::{self, P};
use crate::runtime::extra;
use crate::runtime::symbols::{Feature, missing_in};
use crate::runtime::*;
use api::{
    CaptureQuery, Core, DevicePropsR0000, DevicePropsR0600, EventNodes, HostNodes, KernelNames, LastError, MemOpNodes, MemOps,
    NodeAttributes, StreamDevice, ThreadCaptureMode,
};
use hip_runtime_sys::{dim3, hipKernelNodeParams};
use layout::Layout;
use libloading::Library;
use std::ffi::c_int;
use std::ptr::null_mut;

/// `hipSuccess`.
const SUCCESS: c_int = 0;

/// `hipGetDevicePropertiesR0600` or `hipGetDeviceProperties`, whichever `Layout::device_props`
/// names (their prototypes differ only in the struct's layout).
type DevicePropsFn = unsafe extern "C" fn(*mut api::hipDeviceProp_t, c_int) -> api::hipError_t;

/// `HIP_LAUNCH_PARAM_BUFFER_POINTER`, `_BUFFER_SIZE` and `_END`.
const EXTRA_KEYS: extra::Keys = extra::Keys { buffer_pointer: 0x1, buffer_size: 0x2, end: 0x3 };

pub struct HipRuntime {
    core: Core,
    vmm: Feature<api::Vmm>,
    memops: Feature<MemOps>,
    attributes: Option<NodeAttributes>,
    capture_query: Option<CaptureQuery>,
    /// For the device's architecture name (tests and tools only).
    device_props: Option<DevicePropsFn>,
    thread_mode: Option<ThreadCaptureMode>,
    last_error: Option<LastError>,
    names: Feature<KernelNames>,
    event_nodes: Feature<EventNodes>,
    host_nodes: Feature<HostNodes>,
    mem_op_nodes: Feature<MemOpNodes>,
    stream_device: Option<StreamDevice>,
    layout: Layout,
    info: RuntimeInfo,
    // Last: the tables above point into it, and it is never unloaded while they live.
    _library: Library,
}

/// Loads the HIP runtime and checks that it sees at least one device.
pub fn load(cfg: &Config) -> Result<Box<dyn Runtime>> {
    let (library, name) = library::open(cfg)?;
    // SAFETY: the signatures in `api.rs` are HIP's, and the library is stored in the same struct
    // as the tables, after them, so it outlives them; likewise for every `resolve` below.
    let core = unsafe { Core::resolve(&library) }.map_err(|missing| {
        Error::new(ErrorKind::RuntimeUnavailable, format!("{name} is not a usable HIP runtime: missing {}", missing.join(", ")))
    })?;
    let mut version = 0;
    // SAFETY: a valid out-pointer.
    let rc = unsafe { (core.hipRuntimeGetVersion)(&mut version) };
    if rc != 0 {
        return Err(Error::new(ErrorKind::NoDevice, format!("{name}: hipRuntimeGetVersion failed with HIP error {rc}")));
    }
    let layout = Layout::for_version(version);
    let vmm = if layout.has_real_vmm() {
        // SAFETY: as for `Core`.
        unsafe { api::Vmm::resolve(&library) }.map_err(|m| missing_in(&name, m))
    } else {
        Err(format!("HIP {} has only stubs for it", version_text(version)))
    };
    let vmm = Feature::new("vmm", "virtual memory management is unavailable", vmm);
    // SAFETY: as for `Core`.
    let memops = unsafe { MemOps::resolve(&library) }.map_err(|m| missing_in(&name, m));
    let memops = Feature::new("memops", "stream memory operations are unavailable", memops);
    // SAFETY: as for `Core`.
    let attributes = unsafe { NodeAttributes::resolve(&library) }.ok();
    // SAFETY: as for `Core`.
    let capture_query = unsafe { CaptureQuery::resolve(&library) }.ok();
    let device_props = if layout.device_props().r0600 {
        // SAFETY: as for `Core`.
        unsafe { DevicePropsR0600::resolve(&library) }.ok().map(|t| t.hipGetDevicePropertiesR0600)
    } else {
        // SAFETY: as for `Core`.
        unsafe { DevicePropsR0000::resolve(&library) }.ok().map(|t| t.hipGetDeviceProperties)
    };
    // SAFETY: as for `Core`.
    let thread_mode = unsafe { ThreadCaptureMode::resolve(&library) }.ok();
    // SAFETY: as for `Core`.
    let last_error = unsafe { LastError::resolve(&library) }.ok();
    // SAFETY: as for `Core`.
    let stream_device = unsafe { StreamDevice::resolve(&library) }.ok();
    // SAFETY: as for `Core`.
    let names = unsafe { KernelNames::resolve(&library) }.map_err(|m| missing_in(&name, m));
    let names = Feature::new("kernel_names", "kernel names are unavailable", names);
    // SAFETY: as for `Core`.
    let event_nodes = unsafe { EventNodes::resolve(&library) }.map_err(|m| missing_in(&name, m));
    let event_nodes = Feature::new("event_nodes", "flattening event record and wait nodes is unavailable", event_nodes);
    // SAFETY: as for `Core`.
    let host_nodes = unsafe { HostNodes::resolve(&library) }.map_err(|m| missing_in(&name, m));
    let host_nodes = Feature::new("host_nodes", "flattening host nodes is unavailable", host_nodes);
    let mem_op_nodes = if layout.has_mem_op_nodes() {
        // SAFETY: as for `Core`.
        unsafe { MemOpNodes::resolve(&library) }.map_err(|m| missing_in(&name, m))
    } else {
        Err(format!("HIP {} has no batch memory-operation nodes (6.4+)", version_text(version)))
    };
    let mem_op_nodes = Feature::new("mem_op_nodes", "flattening stream memory-operation nodes is unavailable", mem_op_nodes);
    let disabled =
        [vmm.disabled(), memops.disabled(), names.disabled(), event_nodes.disabled(), host_nodes.disabled(), mem_op_nodes.disabled()]
            .into_iter()
            .flatten()
            .collect();

    let mut count = 0;
    // SAFETY: a valid out-pointer.
    let rc = unsafe { (core.hipGetDeviceCount)(&mut count) };
    if rc != 0 || count <= 0 {
        return Err(Error::new(
            ErrorKind::NoDevice,
            format!("{name} (HIP {}) sees no device: hipGetDeviceCount returned {rc} with {count} device(s)", version_text(version)),
        ));
    }
    let info = RuntimeInfo { backend: Backend::Hip, library: name, version, device_count: count, disabled_features: disabled };
    Ok(Box::new(HipRuntime {
        core,
        vmm,
        memops,
        attributes,
        capture_query,
        device_props,
        thread_mode,
        last_error,
        names,
        event_nodes,
        host_nodes,
        mem_op_nodes,
        stream_device,
        layout,
        info,
        _library: library,
    }))
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

/// Calls `f(kernelParams, extra)` with the packed arguments as a HIP `extra` list. A kernel
/// without arguments gets an empty, non-null `kernelParams` instead (ROCm 5.2 rejects two null
/// pointers).
fn with_extra<R>(args: &[u8], f: impl FnOnce(*mut P, *mut P) -> R) -> R {
    if args.is_empty() {
        let mut none: [P; 1] = [null_mut()];
        return f(none.as_mut_ptr(), null_mut());
    }
    extra::with_list(args, &EXTRA_KEYS, |list| f(null_mut(), list))
}

impl HipRuntime {
    /// Every call's result: inlined, the error kept out of line (a push checks one per node).
    #[inline]
    fn check(&self, call: &'static str, rc: c_int) -> Result<()> {
        if rc == SUCCESS { Ok(()) } else { Err(self.error(call, rc)) }
    }

    #[cold]
    fn error(&self, call: &'static str, rc: c_int) -> Error {
        // SAFETY: both take any code and return a static string (or null, which `text` allows).
        let (name, desc) = unsafe { (common::text((self.core.hipGetErrorName)(rc)), common::text((self.core.hipGetErrorString)(rc))) };
        common::error(call, rc, &name, &desc)
    }

    /// Runs `f` with `device` current on this thread, then restores the caller's device.
    fn on_device<T>(&self, device: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if device < 0 || device >= self.info.device_count {
            return Err(Error::invalid_argument(format!("device {device} does not exist ({} device(s))", self.info.device_count)));
        }
        let mut current = 0;
        // SAFETY: a valid out-pointer.
        self.check("hipGetDevice", unsafe { (self.core.hipGetDevice)(&mut current) })?;
        if current == device {
            return f();
        }
        // SAFETY: an ordinal checked against the device count above.
        self.check("hipSetDevice", unsafe { (self.core.hipSetDevice)(device) })?;
        let out = f();
        // SAFETY: an ordinal the runtime itself reported.
        unsafe { (self.core.hipSetDevice)(current) };
        out
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
}

common::impl_runtime!(HipRuntime);

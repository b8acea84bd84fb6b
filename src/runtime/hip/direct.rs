//! Calls outside graphs, for tests, benchmarks and the demo.

use super::{HipRuntime, ptr, with_extra};
use crate::error::{Error, Result};
use crate::runtime::common::{self, P};
use crate::runtime::{DevicePtr, Direct, Exec, Function, Graph, KernelParams, Module, Stream};
use std::ffi::{CString, c_int, c_void};
use std::ptr::null_mut;

pub(super) const MEMCPY_HOST_TO_DEVICE: c_int = 1;
pub(super) const MEMCPY_DEVICE_TO_HOST: c_int = 2;

impl Direct for HipRuntime {
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: `src` is a live host slice of the given length; the caller owns `dst`.
        self.check("hipMemcpy", unsafe { (self.core.hipMemcpy)(ptr(dst), src.as_ptr().cast::<c_void>(), src.len(), MEMCPY_HOST_TO_DEVICE) })
    }

    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: `dst` is a live, exclusive host slice of the given length; the caller owns `src`.
        self.check("hipMemcpy", unsafe {
            (self.core.hipMemcpy)(dst.as_mut_ptr().cast::<c_void>(), ptr(src).cast_const(), dst.len(), MEMCPY_DEVICE_TO_HOST)
        })
    }

    fn module_load(&self, device: i32, image: &[u8]) -> Result<Module> {
        let owned = common::nul_terminated(image);
        self.on_device(device, || {
            let mut m = null_mut();
            // SAFETY: a valid out-pointer; the image outlives the call.
            self.check("hipModuleLoadData", unsafe { (self.core.hipModuleLoadData)(&mut m, owned.as_ptr().cast::<c_void>()) })?;
            Ok(Module(m))
        })
    }

    fn module_unload(&self, module: Module) -> Result<()> {
        // SAFETY: the caller owns the module and gives it up here.
        self.check("hipModuleUnload", unsafe { (self.core.hipModuleUnload)(module.0) })
    }

    fn module_function(&self, module: Module, name: &str) -> Result<Function> {
        let cname = CString::new(name).map_err(|_| Error::invalid_argument("kernel name contains a NUL byte"))?;
        let mut f = null_mut();
        // SAFETY: a valid out-pointer and C string; the caller keeps the module live.
        self.check("hipModuleGetFunction", unsafe { (self.core.hipModuleGetFunction)(&mut f, module.0, cname.as_ptr()) })
            .map_err(|e| e.context(format!("kernel {name:?}")))?;
        Ok(Function(f))
    }

    fn launch_kernel(&self, k: &KernelParams<'_>, stream: Stream) -> Result<()> {
        with_extra(k.args, |kernel_params: *mut P, extra: *mut P| {
            // SAFETY: the argument arrays live until the call returns and HIP copies them; the
            // caller keeps the function's module and the stream live.
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

    fn exec_update(&self, exec: Exec, graph: Graph) -> Result<()> {
        let (mut error_node, mut result) = (null_mut(), 0);
        // SAFETY: valid out-pointers; the caller keeps both graphs live.
        let rc = unsafe { (self.core.hipGraphExecUpdate)(exec.0, graph.0, &mut error_node, &mut result) };
        self.check("hipGraphExecUpdate", rc).map_err(|e| e.context(format!("update result {result}")))
    }

    fn device_arch(&self, device: i32) -> Result<String> {
        let props = self.layout.device_props();
        self.device_props_text(device, props.arch_offset, props.arch_len)
    }

    fn device_name(&self, device: i32) -> Result<String> {
        // `name` opens the struct in every version.
        self.device_props_text(device, 0, self.layout.device_props().name_len)
    }

    fn layouts(&self) -> Vec<(&'static str, String)> {
        self.layout.describe()
    }
}

impl HipRuntime {
    /// The NUL-terminated text of `len` bytes at `offset` of `device`'s properties, read with the
    /// call and struct of this runtime's version.
    fn device_props_text(&self, device: i32, offset: usize, len: usize) -> Result<String> {
        let get = self.device_props.ok_or_else(|| Error::unsupported("the HIP runtime lacks the device-properties call of its version"))?;
        let layout = self.layout.device_props();
        let call = if layout.r0600 { "hipGetDevicePropertiesR0600" } else { "hipGetDeviceProperties" };
        // Words, not bytes: the struct holds 8-byte fields that the runtime writes in place.
        let mut props = vec![0u64; layout.size.div_ceil(8)];
        // SAFETY: a writable buffer at least as large as the struct of this runtime's version.
        self.check(call, unsafe { get(props.as_mut_ptr().cast::<c_void>(), device) })?;
        // SAFETY: the buffer's own bytes, `props.len() * 8` of them, all initialised.
        let bytes = unsafe { std::slice::from_raw_parts(props.as_ptr().cast::<u8>(), props.len() * 8) };
        let text = &bytes[offset..offset + len];
        let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
        Ok(String::from_utf8_lossy(&text[..end]).into_owned())
    }
}

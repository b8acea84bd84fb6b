//! Calls outside graphs, for tests, benchmarks and the demo.

use super::layout::UpdateResultInfo;
use super::{CudaRuntime, with_extra};
use crate::error::{Error, Result};
use crate::runtime::common::{self, P};
use crate::runtime::{DevicePtr, Direct, Exec, Function, Graph, KernelParams, Module, Stream};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::ptr::null_mut;

impl Direct for CudaRuntime {
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: src is a live host slice of the given length.
        self.call("cuMemcpyHtoD_v2", || unsafe { (self.core.cuMemcpyHtoD_v2)(dst, src.as_ptr() as *const c_void, src.len()) })
    }

    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: dst is a live host slice of the given length.
        self.call("cuMemcpyDtoH_v2", || unsafe { (self.core.cuMemcpyDtoH_v2)(dst.as_mut_ptr() as P, src, dst.len()) })
    }

    fn module_load(&self, device: i32, image: &[u8]) -> Result<Module> {
        let owned = common::nul_terminated(image);
        self.on_device(device, || {
            let mut m = null_mut();
            // SAFETY: the image outlives the call.
            self.check("cuModuleLoadData", unsafe { (self.core.cuModuleLoadData)(&mut m, owned.as_ptr() as *const c_void) })?;
            Ok(Module(m))
        })
    }

    fn module_unload(&self, module: Module) -> Result<()> {
        // SAFETY: the caller owns the module and gives it up here.
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

    fn exec_update(&self, exec: Exec, graph: Graph) -> Result<()> {
        let mut info = UpdateResultInfo { result: 0, error_node: null_mut(), error_from_node: null_mut() };
        // SAFETY: a valid out-pointer; the caller keeps the handle live.
        self.call("cuGraphExecUpdate_v2", || unsafe { (self.core.cuGraphExecUpdate_v2)(exec.0, graph.0, &mut info) })
            .map_err(|e| e.context(format!("update result {}", info.result)))
    }

    fn device_arch(&self, _device: i32) -> Result<String> {
        // CUDA loads PTX, which the driver compiles for whatever device runs it.
        Err(Error::unsupported("CUDA devices have no HIP architecture name"))
    }

    fn device_name(&self, device: i32) -> Result<String> {
        let handle = self.device_handle(device)?;
        let mut name = [0 as c_char; 256];
        // SAFETY: a writable buffer of the length passed; the handle was just looked up.
        self.check("cuDeviceGetName", unsafe { (self.core.cuDeviceGetName)(name.as_mut_ptr(), name.len() as c_int, handle) })?;
        // SAFETY: the driver NUL-terminates within the length it was given.
        Ok(unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned())
    }

    fn layouts(&self) -> Vec<(&'static str, String)> {
        // One layout for every driver the backend loads: CUDA 12's `_v2` entry points and
        // structs, which CUDA 13 keeps.
        vec![
            ("kernel node parameters", String::from("CUDA_KERNEL_NODE_PARAMS_v2 (cuGraphAddKernelNode_v2 and its setters)")),
            ("memcpy node parameters", String::from("CUDA_MEMCPY3D")),
            ("graph edges", String::from("cuGraphAddDependencies_v2 and cuGraphGetEdges_v2, with edge data")),
            ("node-type numbers", String::from("CUDA's")),
        ]
    }
}

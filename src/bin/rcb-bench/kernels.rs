//! The test kernels for the command-line tools: hipsim's built-in image on the software GPU,
//! the PTX of `tests/gpu/kernels.cu` (`RCB_TEST_PTX` or `tests/gpu/kernels.ptx`) on CUDA.

use rocm_cmdbuf::runtime::{Backend, Function, Runtime};

pub fn load(rt: &dyn Runtime, name: &str) -> Result<Function, String> {
    let image = match rt.info().backend {
        Backend::Hip => b"hipsim\0".to_vec(),
        Backend::Cuda => {
            let path = std::env::var("RCB_TEST_PTX").unwrap_or_else(|_| "tests/gpu/kernels.ptx".into());
            let mut ptx = std::fs::read(&path).map_err(|e| format!("read {path}: {e}"))?;
            ptx.push(0);
            ptx
        }
    };
    let module = rt.direct().module_load(0, &image).map_err(|e| e.to_string())?;
    rt.direct().module_function(module, name).map_err(|e| e.to_string())
}

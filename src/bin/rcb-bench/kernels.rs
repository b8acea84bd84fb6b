//! The test kernels for the command-line tools and the tests: on HIP, the AMD code object built
//! for the device's architecture from `tests/gpu/kernels.hip` (by build.rs), or hipsim's built-in
//! image on the software GPU; on CUDA, the PTX of `tests/gpu/kernels.cu` (`RCB_TEST_PTX` or
//! `tests/gpu/kernels.ptx`).

use rocm_cmdbuf::runtime::{Backend, Function, Runtime};

include!(concat!(env!("OUT_DIR"), "/amdgpu_kernels.rs"));

/// The architecture name the software GPU reports (`gcnArchName`).
const SOFTWARE_GPU: &str = "hipsim";

/// The module image holding the test kernels for `device`.
pub fn image(rt: &dyn Runtime, device: i32) -> Result<Vec<u8>, String> {
    match rt.info().backend {
        Backend::Hip => {
            let arch = rt.direct().device_arch(device).map_err(|e| format!("the architecture of HIP device {device}: {e}"))?;
            hip_image(&arch)
        }
        Backend::Cuda => {
            let path = std::env::var("RCB_TEST_PTX").unwrap_or_else(|_| "tests/gpu/kernels.ptx".into());
            let mut ptx = std::fs::read(&path).map_err(|e| format!("read {path}: {e}"))?;
            ptx.push(0);
            Ok(ptx)
        }
    }
}

/// The image for a HIP device whose `gcnArchName` is `arch` (`gfx942:sramecc+:xnack-`): the code
/// object built for its processor (built without feature settings, so for either setting of
/// each), the software GPU's own image, or an error naming what was built.
pub fn hip_image(arch: &str) -> Result<Vec<u8>, String> {
    if arch == SOFTWARE_GPU {
        return Ok(b"hipsim\0".to_vec());
    }
    let processor = arch.split(':').next().unwrap_or(arch);
    if let Some((_, object)) = AMDGPU_CODE_OBJECTS.iter().find(|(a, _)| *a == processor) {
        return Ok(object.to_vec());
    }
    let built: Vec<&str> = AMDGPU_CODE_OBJECTS.iter().map(|(a, _)| *a).collect();
    let why = match AMDGPU_NOT_BUILT.iter().find(|(a, _)| *a == processor) {
        Some((_, reason)) => format!("it was not built: {reason} (RCB_AMDGPU_CLANG names a clang that knows it)"),
        None => String::from("add it to AMDGPU_ARCHS in build.rs"),
    };
    Err(format!(
        "no test-kernel code object for {processor} (the device reports {arch}); built for: {}; {why}",
        if built.is_empty() { String::from("none") } else { built.join(", ") }
    ))
}

pub fn load(rt: &dyn Runtime, name: &str) -> Result<Function, String> {
    let module = rt.direct().module_load(0, &image(rt, 0)?).map_err(|e| e.to_string())?;
    rt.direct().module_function(module, name).map_err(|e| e.to_string())
}

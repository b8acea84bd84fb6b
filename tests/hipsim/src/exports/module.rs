use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use crate::abi::Dim3;
use crate::capture;
use crate::error::{INVALID_IMAGE, INVALID_VALUE, NOT_FOUND};
use crate::ffi::{cstr, guard, hip_export, out};
use crate::graph::Op;
use crate::kernels;
use crate::knobs;
use crate::module::{FUNCTIONS, Function, MODULES, Module, kernel_op};
use crate::stream::resolve;

const IMAGE: &[u8] = b"hipsim\0";

hip_export! {
    fn hipModuleLoadData(m: *mut usize, image: *const c_void) {
        if m.is_null() || image.is_null() {
            return Err(INVALID_VALUE);
        }
        let img = image as *const u8;
        // Compare byte by byte so a short foreign image is never over-read.
        for (i, &b) in IMAGE.iter().enumerate() {
            // SAFETY: HIP's contract is a complete image; one that has matched ours up to byte `i`
            // is a hipsim image, so it has byte `i` too.
            if unsafe { *img.add(i) } != b {
                return Err(INVALID_IMAGE);
            }
        }
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(m, MODULES.insert(Module { functions: Mutex::new(HashMap::new()) })) }
    }

    fn hipModuleUnload(m: usize) {
        let module = MODULES.remove(m)?;
        for (_, f) in module.functions.lock().unwrap().drain() {
            let _ = FUNCTIONS.remove(f);
        }
        Ok(())
    }

    fn hipModuleGetFunction(f: *mut usize, m: usize, name: *const c_char) {
        let module = MODULES.get(m)?;
        // SAFETY: the C caller's name is null (refused) or NUL-terminated, as HIP requires.
        let kernel = kernels::find(unsafe { cstr(name) }?).ok_or(NOT_FOUND)?;
        let mut fns = module.functions.lock().unwrap();
        let h = *fns.entry(kernel.name.to_str().unwrap_or_default()).or_insert_with(|| FUNCTIONS.insert(Function { kernel }));
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(f, h) }
    }

    fn hipModuleLaunchKernel(
        f: usize, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32,
        shmem: u32, s: usize, kernel_params: *mut *mut c_void, extra: *mut *mut c_void,
    ) {
        let t = resolve(s)?;
        // SAFETY: the C caller's pointers are valid as HIP requires (see `kernel_op`).
        let op = unsafe { kernel_op(f, Dim3 { x: gx, y: gy, z: gz }, Dim3 { x: bx, y: by, z: bz }, shmem, kernel_params, extra) }?;
        capture::submit(&t, Op::Kernel(op))
    }
}

/// The registered name of a function (a handle from `hipModuleGetFunction`), as clr's
/// `hipKernelNameRef` gives it, or null for anything else; an injected fault makes it null too.
#[unsafe(no_mangle)]
pub extern "C" fn hipKernelNameRef(f: usize) -> *const c_char {
    guard(std::ptr::null(), || match knobs::get().enter("hipKernelNameRef", true).and_then(|()| FUNCTIONS.get(f)) {
        Ok(function) => function.kernel.name.as_ptr(),
        Err(_) => std::ptr::null(),
    })
}

/// The name of a host stub registered for a runtime launch (`hipLaunchKernel`): hipsim has no
/// host stubs, so this is null for every pointer, as clr's is for one it did not register (a
/// `hipFunction_t` included). The stream is ignored, as clr ignores it.
#[unsafe(no_mangle)]
pub extern "C" fn hipKernelNameRefByPtr(_host_function: *const c_void, _stream: usize) -> *const c_char {
    guard(std::ptr::null(), || {
        let _ = knobs::get().enter("hipKernelNameRefByPtr", false);
        std::ptr::null()
    })
}

//! cuBLAS, when it loads, so that the flatten scenario can trace a real library call (an SGEMM)
//! the way XLA traces a GEMM, not only plain kernels: a library's trace costs host work
//! (argument checks, heuristics, its own launches) that a re-capture pays again on every record.

use libloading::Library;
use std::ffi::{c_int, c_void};

type Handle = *mut c_void;
type Create = unsafe extern "C" fn(*mut Handle) -> c_int;
type Destroy = unsafe extern "C" fn(Handle) -> c_int;
type SetStream = unsafe extern "C" fn(Handle, *mut c_void) -> c_int;
type SetWorkspace = unsafe extern "C" fn(Handle, u64, usize) -> c_int;
#[rustfmt::skip]
type Sgemm = unsafe extern "C" fn(Handle, c_int, c_int, c_int, c_int, c_int, *const f32, u64, c_int, u64, c_int, *const f32, u64, c_int) -> c_int;

/// Library names tried in order (the loader's search path decides where they come from).
const NAMES: &[&str] = &["libcublas.so", "libcublas.so.13", "libcublas.so.12"];
const OP_N: c_int = 0;

pub struct Cublas {
    handle: Handle,
    sgemm: Sgemm,
    destroy: Destroy,
    _library: Library,
}

impl Cublas {
    /// Loads cuBLAS and creates a handle that issues its work on `stream` within `workspace`
    /// (`bytes` of device memory the caller keeps alive); `Err` says why not (absent on the
    /// software GPU). Without a workspace of its own, cuBLAS allocates one stream-ordered while
    /// captured (measured on the H200: memory alloc and free nodes around the GEMM), and a graph
    /// holding those cannot be a child graph (CUDA error 801); XLA and PyTorch set one too.
    pub fn load(stream: *mut c_void, workspace: u64, bytes: usize) -> Result<Self, String> {
        let mut tried = Vec::new();
        for name in NAMES {
            // SAFETY: loading cuBLAS runs its initialisers, which only set up the library.
            match unsafe { Library::new(name) } {
                Ok(library) => return Self::from_library(library, stream, workspace, bytes).map_err(|e| format!("{name}: {e}")),
                Err(e) => tried.push(e.to_string()),
            }
        }
        Err(tried.join("; "))
    }

    fn from_library(library: Library, stream: *mut c_void, workspace: u64, bytes: usize) -> Result<Self, String> {
        // SAFETY: the types match cuBLAS's v2 API; the pointers are kept with the library.
        let (create, destroy, set_stream, set_workspace, sgemm) = unsafe {
            (
                *library.get::<Create>(b"cublasCreate_v2\0").map_err(|e| e.to_string())?,
                *library.get::<Destroy>(b"cublasDestroy_v2\0").map_err(|e| e.to_string())?,
                *library.get::<SetStream>(b"cublasSetStream_v2\0").map_err(|e| e.to_string())?,
                *library.get::<SetWorkspace>(b"cublasSetWorkspace_v2\0").map_err(|e| e.to_string())?,
                *library.get::<Sgemm>(b"cublasSgemm_v2\0").map_err(|e| e.to_string())?,
            )
        };
        let mut handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let status = unsafe { create(&mut handle) };
        if status != 0 {
            return Err(format!("cublasCreate_v2 returned {status}"));
        }
        let blas = Self { handle, sgemm, destroy, _library: library };
        // SAFETY: a live handle and stream; the caller keeps the workspace alive. The stream goes
        // first: setting it resets the handle to cuBLAS's own workspace pool.
        match unsafe { (set_stream(blas.handle, stream), set_workspace(blas.handle, workspace, bytes)) } {
            (0, 0) => Ok(blas),
            (s, w) => Err(format!("cublasSetStream_v2 returned {s}, cublasSetWorkspace_v2 returned {w}")),
        }
    }

    /// Issues `c = a × b` for `n × n` column-major matrices of f32 on the handle's stream.
    pub fn sgemm(&self, n: usize, a: u64, b: u64, c: u64) -> Result<(), String> {
        let (one, zero, n) = (1.0f32, 0.0f32, n as c_int);
        // SAFETY: a live handle; the device buffers hold n × n floats each.
        match unsafe { (self.sgemm)(self.handle, OP_N, OP_N, n, n, n, &one, a, n, b, n, &zero, c, n) } {
            0 => Ok(()),
            status => Err(format!("cublasSgemm_v2 returned {status}")),
        }
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: the handle is ours and destroyed once.
        unsafe { (self.destroy)(self.handle) };
    }
}

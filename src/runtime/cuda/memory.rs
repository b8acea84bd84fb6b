//! Device memory and the GPU-written timeline.

use super::{CudaRuntime, layout};
use crate::error::Result;
use crate::runtime::common::P;
use crate::runtime::{DevicePtr, Memory, MemoryClass, Signal, Stream, StreamMemory};
use std::ffi::c_int;
use std::ptr::null_mut;

/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`, `_IS_MANAGED`, `_DEVICE_ORDINAL`,
/// `_IS_LEGACY_CUDA_IPC_CAPABLE`, `_MEMPOOL_HANDLE` and `_CONTEXT`.
const POINTER_ATTRIBUTES: [c_int; 6] = [2, 8, 9, 10, 17, 1];

impl CudaRuntime {
    /// The kind of allocation `ptr` lies in, as CUDA's executable memcpy setter tells them apart.
    /// Measured on an H200 (driver 580): the setter takes new operands from `cuMemAlloc` or
    /// managed memory for a node made with either, and from the virtual memory API or a
    /// stream-ordered pool for a node made with either, and fails with
    /// `CUDA_ERROR_INVALID_VALUE` across the two. The attributes that separate them are those
    /// NCCL uses to pick its IPC path: legacy IPC for `cuMemAlloc`, a pool handle for a pool
    /// allocation, an allocation handle to retain for a mapped one. Plain memory also carries
    /// the context it was allocated in, which the setter wants unchanged too (documented; see
    /// `cmdbuf/memcpy_class.rs` for what it does otherwise).
    pub(super) fn classify(&self, ptr: DevicePtr) -> MemoryClass {
        let Ok(api) = self.pointer_class.table() else { return MemoryClass::Other };
        // Each attribute's value is written to the start of its word; zeroed words read as false,
        // 0 and null whatever width the driver writes.
        let mut words = [0u64; POINTER_ATTRIBUTES.len()];
        let mut data: [P; POINTER_ATTRIBUTES.len()] = std::array::from_fn(|i| (&raw mut words[i]).cast());
        // SAFETY: one writable 8-byte word per attribute; the driver reports an address it does
        // not know with default values, not an error.
        let read = self.call("cuPointerGetAttributes", || unsafe {
            (api.cuPointerGetAttributes)(POINTER_ATTRIBUTES.len() as u32, POINTER_ATTRIBUTES.as_ptr(), data.as_mut_ptr(), ptr)
        });
        let [memory_type, managed, ordinal, legacy_ipc, pool, context] = words;
        if read.is_err() || memory_type as u32 == 0 {
            return MemoryClass::Other;
        }
        let device = ordinal as i32;
        if managed as u32 != 0 || legacy_ipc as u32 != 0 {
            return MemoryClass::Plain { device, context };
        }
        if pool != 0 {
            return MemoryClass::Mapped { device };
        }
        let mut handle = 0u64;
        // SAFETY: a valid out-pointer; a retained handle is released at once.
        if unsafe { (api.cuMemRetainAllocationHandle)(&mut handle, ptr as P) } == 0 {
            // SAFETY: the handle retained just above.
            unsafe { (api.cuMemRelease)(handle) };
            return MemoryClass::Mapped { device };
        }
        MemoryClass::Other
    }
}

impl Memory for CudaRuntime {
    fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool> {
        let (d, p) = (self.device_handle(device)?, self.device_handle(peer)?);
        let mut can = 0;
        // SAFETY: valid out-pointer and device handles.
        self.check("cuDeviceCanAccessPeer", unsafe { (self.core.cuDeviceCanAccessPeer)(&mut can, d, p) })?;
        Ok(can != 0)
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
        // SAFETY: the caller owns the allocation and gives it up here (the `Runtime` contract); the
        // driver refuses an address it did not allocate.
        self.call("cuMemFree_v2", || unsafe { (self.core.cuMemFree_v2)(p) })
    }

    fn copy_device_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream) -> Result<()> {
        // SAFETY: the caller keeps the stream and both ranges live until the copy has run.
        self.call("cuMemcpyDtoDAsync_v2", || unsafe { (self.core.cuMemcpyDtoDAsync_v2)(dst, src, bytes, stream.0) })
    }

    fn device_memory(&self, device: i32) -> Result<(usize, usize)> {
        self.on_device(device, || {
            let (mut free, mut total) = (0, 0);
            // SAFETY: valid out-pointers.
            self.check("cuMemGetInfo_v2", unsafe { (self.core.cuMemGetInfo_v2)(&mut free, &mut total) })?;
            Ok((free, total))
        })
    }
}

impl StreamMemory for CudaRuntime {
    fn signal_alloc(&self, device: i32) -> Result<Signal> {
        let memops = self.memops.get()?;
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
        let memops = self.memops.get()?;
        // SAFETY: the signal came from `signal_alloc`, and the caller gives it up here.
        self.call("cuMemFreeHost", || unsafe { (memops.cuMemFreeHost)(signal.host as P) })
    }

    fn stream_write_u64(&self, stream: Stream, p: DevicePtr, value: u64) -> Result<()> {
        let memops = self.memops.get()?;
        // SAFETY: the caller keeps the stream and the 8 bytes at `p` live until the write has run; flags
        // 0 keeps the memory barrier.
        self.call("cuStreamWriteValue64_v2", || unsafe { (memops.cuStreamWriteValue64_v2)(stream.0, p, value, 0) })
    }

    fn stream_wait_u64_at_least(&self, stream: Stream, p: DevicePtr, value: u64) -> Result<()> {
        let memops = self.memops.get()?;
        // SAFETY: the caller keeps the stream and the 8 bytes at `p` live until the wait has run;
        // CU_STREAM_WAIT_VALUE_GEQ (0).
        self.call("cuStreamWaitValue64_v2", || unsafe { (memops.cuStreamWaitValue64_v2)(stream.0, p, value, 0) })
    }

    fn memory_ops_captured(&self) -> bool {
        // Stream memory operations are capturable: they become memory-operation nodes.
        true
    }
}

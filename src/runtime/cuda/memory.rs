//! Device memory and the GPU-written timeline.

use super::{CudaRuntime, layout};
use crate::error::Result;
use crate::runtime::common::P;
use crate::runtime::{DevicePtr, Memory, Signal, Stream, StreamMemory};
use std::ptr::null_mut;

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

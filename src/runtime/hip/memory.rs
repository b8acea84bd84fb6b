//! Device memory and the GPU-written timeline.

use super::{HipRuntime, ptr};
use crate::error::Result;
use crate::runtime::common::P;
use crate::runtime::{DevicePtr, Memory, Signal, Stream, StreamMemory};
use std::ptr::null_mut;

/// `hipMallocSignalMemory`.
pub(super) const MALLOC_SIGNAL_MEMORY: u32 = 2;
/// `hipStreamWaitValueGte`.
pub(super) const WAIT_VALUE_GTE: u32 = 0;

impl Memory for HipRuntime {
    fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool> {
        let mut can = 0;
        // SAFETY: a valid out-pointer; device ordinals are plain integers that HIP range-checks.
        self.check("hipDeviceCanAccessPeer", unsafe { (self.core.hipDeviceCanAccessPeer)(&mut can, device, peer) })?;
        Ok(can != 0)
    }

    fn malloc(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        self.on_device(device, || {
            let mut p = null_mut();
            // SAFETY: a valid out-pointer.
            self.check("hipMalloc", unsafe { (self.core.hipMalloc)(&mut p, bytes) })?;
            Ok(p as DevicePtr)
        })
    }

    fn free(&self, p: DevicePtr) -> Result<()> {
        // SAFETY: the caller owns the allocation and gives it up here (the `Runtime` contract);
        // HIP looks the address up and refuses one it did not allocate.
        self.check("hipFree", unsafe { (self.core.hipFree)(ptr(p)) })
    }

    fn copy_device_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream) -> Result<()> {
        // SAFETY: the caller keeps the stream and both ranges live until the copy has run.
        self.check("hipMemcpyDtoDAsync", unsafe { (self.core.hipMemcpyDtoDAsync)(ptr(dst), ptr(src), bytes, stream.0) })
    }

    fn device_memory(&self, device: i32) -> Result<(usize, usize)> {
        self.on_device(device, || {
            let (mut free, mut total) = (0, 0);
            // SAFETY: valid out-pointers.
            self.check("hipMemGetInfo", unsafe { (self.core.hipMemGetInfo)(&mut free, &mut total) })?;
            Ok((free, total))
        })
    }
}

impl StreamMemory for HipRuntime {
    fn signal_alloc(&self, device: i32) -> Result<Signal> {
        let memops = self.memops.get()?;
        self.on_device(device, || {
            let mut p: P = null_mut();
            // SAFETY: a valid out-pointer; signal memory is exactly 8 bytes.
            self.check("hipExtMallocWithFlags", unsafe { (memops.hipExtMallocWithFlags)(&mut p, 8, MALLOC_SIGNAL_MEMORY) })?;
            Ok(Signal { host: p.cast::<u64>(), device: p as DevicePtr })
        })
    }

    fn signal_free(&self, signal: Signal) -> Result<()> {
        self.free(signal.device)
    }

    fn stream_write_u64(&self, stream: Stream, p: DevicePtr, value: u64) -> Result<()> {
        let memops = self.memops.get()?;
        // SAFETY: the caller keeps the stream and the 8 bytes at `p` live until the write has run.
        self.check("hipStreamWriteValue64", unsafe { (memops.hipStreamWriteValue64)(stream.0, ptr(p), value, 0) })
    }

    fn stream_wait_u64_at_least(&self, stream: Stream, p: DevicePtr, value: u64) -> Result<()> {
        let memops = self.memops.get()?;
        // SAFETY: the caller keeps the stream and the 8 bytes at `p` live until the wait has run;
        // a full mask.
        self.check("hipStreamWaitValue64", unsafe { (memops.hipStreamWaitValue64)(stream.0, ptr(p), value, WAIT_VALUE_GTE, u64::MAX) })
    }

    fn memory_ops_captured(&self) -> bool {
        // clr's hipStreamWriteValue64 and hipStreamWaitValue64 enqueue on the stream with no
        // capture branch (hip_stream_ops.cpp, 5.7.1 to 7.x).
        false
    }
}

//! Virtual memory management (optional feature "vmm").

use super::CudaRuntime;
use super::layout::{AccessDesc, AllocationProp};
use crate::error::Result;
use crate::runtime::common::P;
use crate::runtime::{DevicePtr, PhysicalMem, Vmm};

impl Vmm for CudaRuntime {
    fn granularity(&self, device: i32) -> Result<usize> {
        let vmm = self.vmm.get()?;
        self.contexts.check_device(device)?;
        let prop = AllocationProp::device(device);
        let mut g = 0usize;
        // SAFETY: prop is a valid CUmemAllocationProp; flag 0 is "minimum".
        self.call("cuMemGetAllocationGranularity", || unsafe { (vmm.cuMemGetAllocationGranularity)(&mut g, &prop, 0) })?;
        Ok(g)
    }

    fn create(&self, device: i32, bytes: usize) -> Result<PhysicalMem> {
        let vmm = self.vmm.get()?;
        self.contexts.check_device(device)?;
        let prop = AllocationProp::device(device);
        let mut h = 0u64;
        // SAFETY: prop is a valid CUmemAllocationProp.
        self.call("cuMemCreate", || unsafe { (vmm.cuMemCreate)(&mut h, bytes, &prop, 0) })?;
        Ok(PhysicalMem(h as P))
    }

    fn release(&self, handle: PhysicalMem) -> Result<()> {
        let vmm = self.vmm.get()?;
        // SAFETY: the caller owns the handle and gives it up here.
        self.call("cuMemRelease", || unsafe { (vmm.cuMemRelease)(handle.0 as u64) })
    }

    fn reserve(&self, bytes: usize, alignment: usize) -> Result<DevicePtr> {
        let vmm = self.vmm.get()?;
        let mut p = 0;
        // SAFETY: valid out-pointer; no fixed address requested.
        self.call("cuMemAddressReserve", || unsafe { (vmm.cuMemAddressReserve)(&mut p, bytes, alignment, 0, 0) })?;
        Ok(p)
    }

    fn free_range(&self, p: DevicePtr, bytes: usize) -> Result<()> {
        let vmm = self.vmm.get()?;
        // SAFETY: the caller owns the reservation, unmapped, and gives it up here.
        self.call("cuMemAddressFree", || unsafe { (vmm.cuMemAddressFree)(p, bytes) })
    }

    fn map(&self, p: DevicePtr, bytes: usize, handle: PhysicalMem) -> Result<()> {
        let vmm = self.vmm.get()?;
        // SAFETY: the caller owns the reserved range and the live handle it maps there.
        self.call("cuMemMap", || unsafe { (vmm.cuMemMap)(p, bytes, 0, handle.0 as u64, 0) })
    }

    fn unmap(&self, p: DevicePtr, bytes: usize) -> Result<()> {
        let vmm = self.vmm.get()?;
        // SAFETY: the caller owns the mapped range and no queued work uses it any more.
        self.call("cuMemUnmap", || unsafe { (vmm.cuMemUnmap)(p, bytes) })
    }

    fn set_access(&self, p: DevicePtr, bytes: usize, devices: &[i32]) -> Result<()> {
        let vmm = self.vmm.get()?;
        for &d in devices {
            self.contexts.check_device(d)?;
        }
        let descs: Vec<AccessDesc> = devices.iter().map(|&d| AccessDesc::read_write(d)).collect();
        // SAFETY: descs holds devices.len() entries.
        self.call("cuMemSetAccess", || unsafe { (vmm.cuMemSetAccess)(p, bytes, descs.as_ptr(), descs.len()) })
    }
}

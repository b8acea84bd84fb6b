//! Virtual memory management (optional feature "vmm").

use super::{HipRuntime, ptr};
use crate::error::Result;
use crate::runtime::{DevicePtr, PhysicalMem, Vmm};
use hip_runtime_sys::{hipMemAccessDesc, hipMemAccessFlags, hipMemLocation, hipMemLocationType};
use std::ptr::null_mut;

/// `hipMemAllocationGranularityMinimum`.
pub(super) const GRANULARITY_MINIMUM: i32 = 0;

impl Vmm for HipRuntime {
    fn granularity(&self, device: i32) -> Result<usize> {
        let vmm = self.vmm.get()?;
        let prop = self.layout.alloc_prop(device);
        let mut g = 0usize;
        // SAFETY: `prop` is in the runtime's layout and lives until the call returns.
        self.check("hipMemGetAllocationGranularity", unsafe {
            (vmm.hipMemGetAllocationGranularity)(&mut g, prop.as_ptr(), GRANULARITY_MINIMUM)
        })?;
        Ok(g)
    }

    fn create(&self, device: i32, bytes: usize) -> Result<PhysicalMem> {
        let vmm = self.vmm.get()?;
        let prop = self.layout.alloc_prop(device);
        let mut h = null_mut();
        // SAFETY: a valid out-pointer; `prop` is in the runtime's layout.
        self.check("hipMemCreate", unsafe { (vmm.hipMemCreate)(&mut h, bytes, prop.as_ptr(), 0) })?;
        Ok(PhysicalMem(h))
    }

    fn release(&self, handle: PhysicalMem) -> Result<()> {
        let vmm = self.vmm.get()?;
        // SAFETY: the caller owns the handle and gives it up here.
        self.check("hipMemRelease", unsafe { (vmm.hipMemRelease)(handle.0) })
    }

    fn reserve(&self, bytes: usize, alignment: usize) -> Result<DevicePtr> {
        let vmm = self.vmm.get()?;
        let mut p = null_mut();
        // SAFETY: a valid out-pointer; no fixed address requested.
        self.check("hipMemAddressReserve", unsafe { (vmm.hipMemAddressReserve)(&mut p, bytes, alignment, null_mut(), 0) })?;
        Ok(p as DevicePtr)
    }

    fn free_range(&self, p: DevicePtr, bytes: usize) -> Result<()> {
        let vmm = self.vmm.get()?;
        // SAFETY: the caller owns the reservation, unmapped, and gives it up here.
        self.check("hipMemAddressFree", unsafe { (vmm.hipMemAddressFree)(ptr(p), bytes) })
    }

    fn map(&self, p: DevicePtr, bytes: usize, handle: PhysicalMem) -> Result<()> {
        let vmm = self.vmm.get()?;
        // SAFETY: the caller owns the reserved range and the live handle it maps there.
        self.check("hipMemMap", unsafe { (vmm.hipMemMap)(ptr(p), bytes, 0, handle.0, 0) })
    }

    fn unmap(&self, p: DevicePtr, bytes: usize) -> Result<()> {
        let vmm = self.vmm.get()?;
        // SAFETY: the caller owns the mapped range and no queued work uses it any more.
        self.check("hipMemUnmap", unsafe { (vmm.hipMemUnmap)(ptr(p), bytes) })
    }

    fn set_access(&self, p: DevicePtr, bytes: usize, devices: &[i32]) -> Result<()> {
        let vmm = self.vmm.get()?;
        let descs: Vec<hipMemAccessDesc> = devices
            .iter()
            .map(|&id| hipMemAccessDesc {
                location: hipMemLocation { type_: hipMemLocationType::hipMemLocationTypeDevice, id },
                flags: hipMemAccessFlags::hipMemAccessFlagsProtReadWrite,
            })
            .collect();
        // SAFETY: `descs` holds `descs.len()` entries; the caller owns the mapped range.
        self.check("hipMemSetAccess", unsafe { (vmm.hipMemSetAccess)(ptr(p), bytes, descs.as_ptr(), descs.len()) })
    }
}

//! The memory behind one slot. Every runtime object is owned by a guard that gives it back on
//! drop, so a creation step that fails undoes exactly what the earlier steps made, in reverse
//! order, and nothing is unmapped or freed twice. [`SlotMemory::close`] gives it back in the
//! same order and returns the failures instead of logging them, for a free that reports them.

use super::layout::ChunkLayout;
use crate::error::{Leaks, Result};
use crate::runtime::{DevicePtr, PhysicalMem, Runtime, Vmm};
use std::mem::ManuallyDrop;

/// What one slot holds, kept for the pool's life and given back on drop.
pub enum SlotMemory {
    /// One physical chunk mapped at its own reserved range; `None` when every buffer is empty.
    Vmm { _chunk: Option<Chunk> },
    /// One device allocation per non-empty buffer.
    Device { _allocations: Vec<DeviceAlloc> },
}

/// A physical chunk mapped into its reserved range. Fields drop in order: unmap, then release
/// the physical memory, then free the range.
pub struct Chunk {
    mapping: Mapping,
    _physical: Physical,
    _reservation: Reservation,
}

impl Chunk {
    pub fn base(&self) -> DevicePtr {
        self.mapping.base
    }
}

struct Physical {
    vmm: &'static dyn Vmm,
    handle: PhysicalMem,
}

struct Reservation {
    vmm: &'static dyn Vmm,
    base: DevicePtr,
    bytes: usize,
}

struct Mapping {
    vmm: &'static dyn Vmm,
    base: DevicePtr,
    bytes: usize,
}

pub struct DeviceAlloc {
    rt: &'static dyn Runtime,
    ptr: DevicePtr,
}

impl SlotMemory {
    /// Gives everything back (unmap, release, free the range; or free each allocation), each
    /// step attempted whatever failed before, and returns the failures.
    pub fn close(self) -> Leaks {
        let mut leaks = Leaks::default();
        match self {
            SlotMemory::Vmm { _chunk: None } => {}
            SlotMemory::Vmm { _chunk: Some(Chunk { mapping, _physical: physical, _reservation: reservation }) } => {
                leaks.note(close(mapping, Mapping::give_back));
                leaks.note(close(physical, Physical::give_back));
                leaks.note(close(reservation, Reservation::give_back));
            }
            SlotMemory::Device { _allocations: allocations } => {
                for a in allocations {
                    leaks.note(close(a, DeviceAlloc::give_back));
                }
            }
        }
        leaks
    }
}

/// Gives `guard`'s object back once, returning the result instead of logging it on drop.
fn close<T>(guard: T, give_back: fn(&T) -> Result<()>) -> Result<()> {
    let guard = ManuallyDrop::new(guard);
    give_back(&guard)
}

impl Physical {
    fn give_back(&self) -> Result<()> {
        self.vmm.release(self.handle)
    }
}

impl Reservation {
    fn give_back(&self) -> Result<()> {
        self.vmm.free_range(self.base, self.bytes)
    }
}

impl Mapping {
    fn give_back(&self) -> Result<()> {
        self.vmm.unmap(self.base, self.bytes)
    }
}

impl DeviceAlloc {
    fn give_back(&self) -> Result<()> {
        self.rt.free(self.ptr)
    }
}

impl Drop for Physical {
    fn drop(&mut self) {
        report(self.give_back());
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        report(self.give_back());
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        report(self.give_back());
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        report(self.give_back());
    }
}

/// Teardown cannot hand an error back to anyone; it is logged.
fn report(r: Result<()>) {
    if let Err(e) = r {
        log::warn!("vmm pool teardown: {e}");
    }
}

/// Creates, reserves, maps and grants access to one slot's chunk; returns `None` for a layout
/// with no bytes. `access` lists the device and every peer allowed to use the memory.
pub fn map_chunk(rt: &'static dyn Runtime, device: i32, layout: &ChunkLayout, granularity: u64, access: &[i32]) -> Result<Option<Chunk>> {
    if layout.bytes == 0 {
        return Ok(None);
    }
    // Both fit: the layout is bounded by MAX_BUFFER_BYTES and the granularity by it.
    let bytes = layout.bytes as usize;
    let vmm = rt.vmm()?;
    let physical = Physical { vmm, handle: vmm.create(device, bytes)? };
    let reservation = Reservation { vmm, base: vmm.reserve(bytes, granularity as usize)?, bytes };
    vmm.map(reservation.base, bytes, physical.handle)?;
    let mapping = Mapping { vmm, base: reservation.base, bytes };
    vmm.set_access(mapping.base, bytes, access)?;
    Ok(Some(Chunk { mapping, _physical: physical, _reservation: reservation }))
}

/// One plain device allocation per non-empty buffer; the addresses, 0 for an empty buffer.
pub fn allocate_buffers(rt: &'static dyn Runtime, device: i32, sizes: &[u64]) -> Result<(Vec<DeviceAlloc>, Vec<DevicePtr>)> {
    let mut allocations = Vec::new();
    let mut addresses = Vec::with_capacity(sizes.len());
    for &size in sizes {
        if size == 0 {
            addresses.push(0);
            continue;
        }
        let ptr = rt.malloc(device, size as usize)?;
        allocations.push(DeviceAlloc { rt, ptr });
        addresses.push(ptr);
    }
    Ok((allocations, addresses))
}

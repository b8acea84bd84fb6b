//! The memory behind one slot. Every runtime object is owned by a guard that gives it back on
//! drop, so a creation step that fails undoes exactly what the earlier steps made, in reverse
//! order, and nothing is unmapped or freed twice.

use super::layout::ChunkLayout;
use crate::error::Result;
use crate::runtime::{DevicePtr, PhysicalMem, Runtime};

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
    rt: &'static dyn Runtime,
    handle: PhysicalMem,
}

struct Reservation {
    rt: &'static dyn Runtime,
    base: DevicePtr,
    bytes: usize,
}

struct Mapping {
    rt: &'static dyn Runtime,
    base: DevicePtr,
    bytes: usize,
}

pub struct DeviceAlloc {
    rt: &'static dyn Runtime,
    ptr: DevicePtr,
}

impl Drop for Physical {
    fn drop(&mut self) {
        report(self.rt.vmm_release(self.handle));
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        report(self.rt.vmm_free_range(self.base, self.bytes));
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        report(self.rt.vmm_unmap(self.base, self.bytes));
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        report(self.rt.free(self.ptr));
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
    let physical = Physical { rt, handle: rt.vmm_create(device, bytes)? };
    let reservation = Reservation { rt, base: rt.vmm_reserve(bytes, granularity as usize)?, bytes };
    rt.vmm_map(reservation.base, bytes, physical.handle)?;
    let mapping = Mapping { rt, base: reservation.base, bytes };
    rt.vmm_set_access(mapping.base, bytes, access)?;
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

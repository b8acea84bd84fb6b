//! Virtual memory management: physical handles, reserved address ranges and mappings.
//! Bytes belong to the physical handle, so two mappings of one handle alias; a mapping
//! is inaccessible to a device until hipMemSetAccess grants it.

use std::collections::{BTreeMap, HashMap};

use crate::error::{HipResult, ILLEGAL_ADDRESS, INVALID_VALUE};
use crate::handles::next_handle;
use crate::memory::Buf;

pub const GRANULARITY: u64 = 2 << 20;
const VMM_BASE: u64 = 1 << 49;
const VMM_END: u64 = VMM_BASE + (1 << 46);

pub fn is_vmm(addr: u64) -> bool {
    (VMM_BASE..VMM_END).contains(&addr)
}

struct Physical {
    buf: Buf,
    released: bool,
    maps: usize,
}

struct Mapping {
    size: u64,
    phys: usize,
    offset: u64,
    read: u64,
    write: u64,
}

pub struct Vmm {
    physical: HashMap<usize, Physical>,
    reservations: BTreeMap<u64, u64>,
    mappings: BTreeMap<u64, Mapping>,
    next: u64,
}

impl Default for Vmm {
    fn default() -> Self {
        Vmm { physical: HashMap::new(), reservations: BTreeMap::new(), mappings: BTreeMap::new(), next: VMM_BASE }
    }
}

fn granular(v: u64) -> bool {
    v.is_multiple_of(GRANULARITY)
}

impl Vmm {
    pub fn create(&mut self, size: u64) -> HipResult<usize> {
        if size == 0 || !granular(size) {
            return Err(INVALID_VALUE);
        }
        // Physical memory is device memory: more than a device holds is refused up front, as
        // hipMalloc refuses it, instead of asking the host for it.
        if size > crate::memory::CAPACITY {
            return Err(crate::error::OUT_OF_MEMORY);
        }
        let buf = Buf::zeroed(size as usize, 4096)?;
        let h = next_handle();
        self.physical.insert(h, Physical { buf, released: false, maps: 0 });
        Ok(h)
    }

    /// Memory stays alive while mapped; it goes away with the last unmap.
    pub fn release(&mut self, h: usize) -> HipResult {
        let p = self.physical.get_mut(&h).filter(|p| !p.released).ok_or(INVALID_VALUE)?;
        if p.maps == 0 {
            self.physical.remove(&h);
        } else {
            p.released = true;
        }
        Ok(())
    }

    pub fn reserve(&mut self, size: u64, align: u64) -> HipResult<u64> {
        if size == 0 || !granular(size) || (align != 0 && !align.is_power_of_two()) {
            return Err(INVALID_VALUE);
        }
        let align = align.max(GRANULARITY);
        let base = self.next.div_ceil(align) * align;
        let end = base.checked_add(size).filter(|&e| e <= VMM_END).ok_or(crate::error::OUT_OF_MEMORY)?;
        // One granule of never-reserved space between ranges keeps them from looking contiguous.
        self.next = end + GRANULARITY;
        self.reservations.insert(base, size);
        Ok(base)
    }

    pub fn free(&mut self, ptr: u64, size: u64) -> HipResult {
        if self.reservations.get(&ptr) != Some(&size) || self.mappings.range(ptr..ptr + size).next().is_some() {
            return Err(INVALID_VALUE);
        }
        self.reservations.remove(&ptr);
        Ok(())
    }

    pub fn map(&mut self, ptr: u64, size: u64, offset: u64, h: usize) -> HipResult {
        if size == 0 || !granular(size) || !granular(offset) || !granular(ptr) {
            return Err(INVALID_VALUE);
        }
        let end = ptr.checked_add(size).ok_or(INVALID_VALUE)?;
        let (&rb, &rs) = self.reservations.range(..=ptr).next_back().ok_or(INVALID_VALUE)?;
        if end > rb + rs {
            return Err(INVALID_VALUE);
        }
        let overlaps_before = self.mappings.range(..ptr).next_back().is_some_and(|(&b, m)| b + m.size > ptr);
        if overlaps_before || self.mappings.range(ptr..end).next().is_some() {
            return Err(INVALID_VALUE);
        }
        let p = self.physical.get_mut(&h).filter(|p| !p.released).ok_or(INVALID_VALUE)?;
        if offset + size > p.buf.len() as u64 {
            return Err(INVALID_VALUE);
        }
        p.maps += 1;
        self.mappings.insert(ptr, Mapping { size, phys: h, offset, read: 0, write: 0 });
        Ok(())
    }

    pub fn unmap(&mut self, ptr: u64, size: u64) -> HipResult {
        if self.mappings.get(&ptr).map(|m| m.size) != Some(size) {
            return Err(INVALID_VALUE);
        }
        let m = self.mappings.remove(&ptr).expect("checked above");
        let p = self.physical.get_mut(&m.phys).expect("mapped handles stay alive");
        p.maps -= 1;
        if p.released && p.maps == 0 {
            self.physical.remove(&m.phys);
        }
        Ok(())
    }

    /// `grants` are (device, flags) with hipMemAccessFlags: 0 none, 1 read, 3 read-write.
    pub fn set_access(&mut self, ptr: u64, size: u64, grants: &[(i32, i32)]) -> HipResult {
        let end = ptr.checked_add(size).ok_or(INVALID_VALUE)?;
        if size == 0 || grants.iter().any(|&(_, f)| ![0, 1, 3].contains(&f)) {
            return Err(INVALID_VALUE);
        }
        // The range must be exactly covered by whole mappings.
        let mut at = ptr;
        for (&b, m) in self.mappings.range(ptr..end) {
            if b != at || b + m.size > end {
                return Err(INVALID_VALUE);
            }
            at = b + m.size;
        }
        if at != end {
            return Err(INVALID_VALUE);
        }
        for (_, m) in self.mappings.range_mut(ptr..end) {
            for &(dev, flags) in grants {
                let bit = 1u64 << dev;
                m.read = if flags & 1 != 0 { m.read | bit } else { m.read & !bit };
                m.write = if flags == 3 { m.write | bit } else { m.write & !bit };
            }
        }
        Ok(())
    }

    pub fn locate(&self, dev: i32, p: u64, write: bool) -> HipResult<(*mut u8, usize)> {
        let (&b, m) = self.mappings.range(..=p).next_back().ok_or(ILLEGAL_ADDRESS)?;
        let mask = if write { m.write } else { m.read };
        if p >= b + m.size || mask & (1 << dev) == 0 {
            return Err(ILLEGAL_ADDRESS);
        }
        let phys = &self.physical[&m.phys];
        let off = m.offset + (p - b);
        // SAFETY: offset + size was checked against the buffer when mapping.
        Ok((unsafe { phys.buf.ptr().add(off as usize) }, (m.size - (p - b)) as usize))
    }

    pub fn live_physical(&self) -> usize {
        self.physical.values().filter(|p| !p.released).count()
    }

    pub fn live_reservations(&self) -> usize {
        self.reservations.len()
    }

    pub fn live_mappings(&self) -> usize {
        self.mappings.len()
    }
}

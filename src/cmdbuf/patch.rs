//! Patch sites: every recorded address that lies inside an allocation.
//!
//! Sites live in a slab (ids stay valid until removed, removal is O(1)), and an update reads
//! them grouped by allocation from one contiguous array: moving an allocation walks exactly its
//! own sites, in memory order, instead of chasing one list and one slab entry per site (on
//! graphs of 10 000 nodes those misses were most of an update's host cost). The grouped array
//! is rebuilt, in O(sites), when the command buffer is finalized, so an update never pays for it.
//!
//! A site whose address may have come from several allocations when it was recorded (it lay in
//! several, or a kernel's pointer lay one past the end of one: see `allocations.rs`) is patched
//! through one of them and also counted in [`Overlaps`], which an update asks whether every one
//! of those allocations moved by the same delta before it writes anything.

use super::args::MAX_BLOB_BYTES;
use super::memory::Heap;
use std::collections::HashMap;

/// Where in a node's parameters an address lives: four bytes, so that a site is 16 (a kernel's
/// blob never exceeds `args::MAX_BLOB_BYTES`, so its offsets fit in 16 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Byte offset of a device-pointer argument in a kernel node's blob.
    KernelArg(u16),
    MemcpyDst,
    MemcpySrc,
    MemsetDst,
}

impl Slot {
    /// The slot of the 8-byte pointer at byte `at` of a kernel's blob. A blob never exceeds
    /// `MAX_BLOB_BYTES` (packing refuses more; flattening makes a larger node a cloned child),
    /// which fits a `u16` (checked below): the bound is the caller's to keep.
    pub fn kernel_arg(at: u32) -> Slot {
        debug_assert!(at as usize + 8 <= MAX_BLOB_BYTES, "a pointer at byte {at} lies past the {MAX_BLOB_BYTES} bytes of any blob");
        Slot::KernelArg(at as u16)
    }
}

/// A site as an update needs it: which node, where in it, and its offset in the allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub node: u32,
    pub slot: Slot,
    /// Offset of the address from the allocation's base.
    pub offset: u64,
}

/// The allocation of a removed slab entry.
const REMOVED: u32 = u32::MAX;
/// The overlap set of a site that may come from one allocation only.
const ALONE: u32 = u32::MAX;

/// The distinct sets of allocations that ambiguous sites may come from, each with its site
/// count, and the sets each allocation belongs to, so that an update looks only at the sets of
/// what moved.
#[derive(Default)]
pub struct Overlaps {
    /// Set by id: its allocations (ascending) and how many live sites may come from exactly them.
    sets: Vec<(Vec<u32>, u32)>,
    ids: HashMap<Vec<u32>, u32>,
    /// The ids of the sets each allocation is a member of.
    of_allocation: HashMap<u32, Vec<u32>>,
    /// Live ambiguous sites in all.
    live: u32,
}

impl Overlaps {
    fn add(&mut self, set: Vec<u32>) -> u32 {
        self.live += 1;
        let id = match self.ids.get(&set) {
            Some(&id) => id,
            None => {
                let id = self.sets.len() as u32;
                for &a in &set {
                    self.of_allocation.entry(a).or_default().push(id);
                }
                self.ids.insert(set.clone(), id);
                self.sets.push((set, 0));
                id
            }
        };
        self.sets[id as usize].1 += 1;
        id
    }

    fn remove(&mut self, id: u32) {
        self.live -= 1;
        self.sets[id as usize].1 -= 1;
    }

    /// Why moving `moved` (`(allocation, new base)`, sorted by allocation) from the `old` bases
    /// cannot patch every ambiguous site, if it cannot: a live site lies in allocations that do
    /// not all move by the same delta. Costs the sets the moved allocations belong to.
    pub fn refusal(&self, moved: &[(u32, u64)], old: &[super::allocations::Allocation]) -> Option<String> {
        if self.live == 0 {
            return None;
        }
        debug_assert!(moved.windows(2).all(|w| w[0].0 < w[1].0), "moves sorted by allocation");
        let delta = |a: u32| match moved.binary_search_by_key(&a, |&(m, _)| m) {
            Ok(k) => moved[k].1.wrapping_sub(old[a as usize].base),
            Err(_) => 0,
        };
        let sets = moved.iter().filter_map(|(a, _)| self.of_allocation.get(a)).flatten();
        sets.map(|&id| &self.sets[id as usize]).filter(|(_, count)| *count > 0).find_map(|(set, count)| {
            let first = delta(set[0]);
            set.iter().any(|&a| delta(a) != first).then(|| {
                format!(
                    "{count} recorded address(es) may come from any of allocations {set:?} (aliased, nested or overlapping entries, or a kernel's pointer one past the end of one of them), which do not all move by the same amount: which one each address came from is not known"
                )
            })
        })
    }
}

#[derive(Default)]
pub struct PatchTable {
    /// `(allocation, site, overlap set)` by id; removed entries hold [`REMOVED`] and are reused.
    slab: Vec<(u32, Site, u32)>,
    free: Vec<u32>,
    overlaps: Overlaps,
    allocations: usize,
    /// Live sites grouped by allocation; allocation `a` owns `grouped[starts[a]..starts[a + 1]]`.
    grouped: Vec<Site>,
    starts: Vec<u32>,
    stale: bool,
}

impl PatchTable {
    /// Forgets every site and expects allocations `0..n`.
    pub fn reset(&mut self, n: usize) {
        self.slab.clear();
        self.free.clear();
        self.overlaps = Overlaps::default();
        self.allocations = n;
        self.stale = true;
    }

    /// Adds a site patched through `alloc`; `others` are the other allocations its address may
    /// come from (empty when it is unambiguous).
    pub fn add(&mut self, node: u32, slot: Slot, alloc: u32, offset: u64, others: &[u32]) -> u32 {
        self.stale = true;
        let set = match others {
            [] => ALONE,
            others => {
                let mut set = Vec::with_capacity(others.len() + 1);
                set.push(alloc);
                set.extend_from_slice(others);
                set.sort_unstable();
                self.overlaps.add(set)
            }
        };
        let entry = (alloc, Site { node, slot, offset }, set);
        match self.free.pop() {
            Some(id) => {
                self.slab[id as usize] = entry;
                id
            }
            None => {
                self.slab.push(entry);
                (self.slab.len() - 1) as u32
            }
        }
    }

    pub fn remove(&mut self, id: u32) {
        let set = std::mem::replace(&mut self.slab[id as usize].2, ALONE);
        if set != ALONE {
            self.overlaps.remove(set);
        }
        self.slab[id as usize].0 = REMOVED;
        self.free.push(id);
        self.stale = true;
    }

    /// The sites pointing into allocation `alloc` (grouped first if recording changed them).
    pub fn of_allocation(&mut self, alloc: u32) -> &[Site] {
        self.group();
        &self.grouped[self.starts[alloc as usize] as usize..self.starts[alloc as usize + 1] as usize]
    }

    /// The ambiguous sites, for an update to check before it writes.
    pub fn overlaps(&self) -> &Overlaps {
        &self.overlaps
    }

    /// The heap the table holds (see `memory.rs`).
    pub fn heap(&self) -> Heap {
        let o = &self.overlaps;
        let sets: Heap = o.sets.iter().map(|(set, _)| Heap::vec(set)).sum();
        let keys: Heap = o.ids.keys().map(Heap::vec).sum();
        let members: Heap = o.of_allocation.values().map(Heap::vec).sum();
        [
            Heap::vec(&self.slab),
            Heap::vec(&self.free),
            Heap::vec(&self.grouped),
            Heap::vec(&self.starts),
            Heap::vec(&o.sets),
            sets,
            Heap::map(&o.ids),
            keys,
            Heap::map(&o.of_allocation),
            members,
        ]
        .into_iter()
        .sum()
    }

    /// Number of live sites.
    pub fn len(&self) -> usize {
        self.slab.len() - self.free.len()
    }

    /// Gives back the room the sites by id keep to grow, once recording is over.
    pub fn shrink(&mut self) {
        self.slab.shrink_to_fit();
        self.free.shrink_to_fit();
    }

    /// Groups the live sites by allocation (a counting sort) if they changed since the last time.
    pub fn group(&mut self) {
        if !self.stale {
            return;
        }
        self.starts.clear();
        self.starts.resize(self.allocations + 1, 0);
        for &(alloc, _, _) in self.slab.iter().filter(|(alloc, _, _)| *alloc != REMOVED) {
            self.starts[alloc as usize + 1] += 1;
        }
        for a in 0..self.allocations {
            self.starts[a + 1] += self.starts[a];
        }
        let mut next = self.starts.clone();
        self.grouped.clear();
        self.grouped.resize(self.len(), Site { node: 0, slot: Slot::MemsetDst, offset: 0 });
        for &(alloc, site, _) in self.slab.iter().filter(|(alloc, _, _)| *alloc != REMOVED) {
            self.grouped[next[alloc as usize] as usize] = site;
            next[alloc as usize] += 1;
        }
        self.stale = false;
    }
}

const _: () = assert!(std::mem::size_of::<Site>() == 16 && MAX_BLOB_BYTES <= u16::MAX as usize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_slot_holds_every_offset_a_blob_can_have() {
        assert_eq!(Slot::kernel_arg(0), Slot::KernelArg(0));
        let last = (MAX_BLOB_BYTES - 8) as u32;
        assert_eq!(Slot::kernel_arg(last), Slot::KernelArg(last as u16));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "past the")]
    fn a_kernel_slot_past_any_blob_is_caught_rather_than_truncated() {
        // 65536 + 8 would wrap to offset 8 without the check.
        Slot::kernel_arg(u32::from(u16::MAX) + 9);
    }

    fn nodes_of(t: &mut PatchTable, alloc: u32) -> Vec<u32> {
        let mut v: Vec<u32> = t.of_allocation(alloc).iter().map(|s| s.node).collect();
        v.sort();
        v
    }

    #[test]
    fn removal_and_reuse_keep_every_allocation_s_sites_right() {
        let mut t = PatchTable::default();
        t.reset(3);
        let a = t.add(0, Slot::KernelArg(0), 0, 0, &[]);
        t.add(1, Slot::MemcpyDst, 0, 8, &[]);
        let c = t.add(2, Slot::MemsetDst, 0, 16, &[]);
        t.add(3, Slot::MemcpySrc, 2, 0, &[]);
        assert_eq!(nodes_of(&mut t, 0), vec![0, 1, 2]);
        assert!(t.of_allocation(1).is_empty());
        t.remove(a);
        t.remove(c);
        assert_eq!(nodes_of(&mut t, 0), vec![1]);
        let e = t.add(4, Slot::KernelArg(8), 0, 24, &[]);
        assert!(e == a || e == c, "freed ids are reused");
        assert_eq!(nodes_of(&mut t, 0), vec![1, 4]);
        assert_eq!(t.of_allocation(0).iter().find(|s| s.node == 4).map(|s| (s.slot, s.offset)), Some((Slot::KernelArg(8), 24)));
        assert_eq!(t.of_allocation(2), &[Site { node: 3, slot: Slot::MemcpySrc, offset: 0 }]);
        assert_eq!(t.len(), 3);
        t.reset(1);
        assert_eq!(t.len(), 0);
        assert!(t.of_allocation(0).is_empty());
    }
}

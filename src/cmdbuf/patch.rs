//! Patch sites: every recorded address that lies inside an allocation.
//!
//! An update reads the sites grouped by allocation from one contiguous array: moving an
//! allocation walks exactly its own sites, in memory order, instead of chasing one list and one
//! entry per site (on graphs of 10 000 nodes those misses were most of an update's host cost).
//! That array is the only copy of the sites: recording appends to a pending list, a re-record
//! marks the node's sites removed, and the next grouping (at finalize, in O(sites)) merges both
//! into a new grouped array, so an update never pays for it and no list by node or slab by id
//! is kept for removals (they were two thirds of the sites' memory).
//!
//! A site whose address may have come from several allocations when it was recorded (it lay in
//! several, or a kernel's pointer lay one past the end of one: see `allocations.rs`) is patched
//! through one of them and also counted in [`Overlaps`], which an update asks whether every one
//! of those allocations moved by the same delta before it writes anything.

use super::args::MAX_BLOB_BYTES;
use super::memory::Heap;
use std::collections::HashMap;

/// Where in a node's parameters an address lives: four bytes, so that a site is 8 (a kernel's
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

/// A site as an update needs it: which node and where in it. Its offset in the allocation is
/// not kept: the slot itself holds the allocation's base plus that offset (recording made it so,
/// and every move of the allocation adds its delta to each of its sites), so an update adds the
/// move's delta to what the slot holds, in the cache line it writes anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub node: u32,
    pub slot: Slot,
}

/// The distinct sets of allocations that ambiguous sites may come from, each with its site
/// count, and the sets each allocation belongs to, so that an update that moves few allocations
/// looks only at their sets (one that moves many reads every set once).
///
/// What an update reads lies in flat arrays indexed by number (the sets' members one after the
/// other, the sets of each allocation grouped by allocation), made when the sites are grouped:
/// a map from allocation to a list of sets and a list per set cost two or three scattered reads
/// per moved allocation and about 130 instructions each where every allocation lies end to end
/// with the next (each base also the previous allocation's end), 40 % of the library's own work
/// per touched node of `rcb-bench update-loop`'s `end-to-end` kind.
#[derive(Default)]
pub struct Overlaps {
    /// Set `id` is `members[set_starts[id]..set_starts[id + 1]]`, ascending.
    members: Vec<u32>,
    set_starts: Vec<u32>,
    /// How many live sites may come from exactly set `id`'s allocations.
    counts: Vec<u32>,
    /// Each set's id, to find it again when another site has the same allocations: made by the
    /// first [`Self::add`] after a grouping, dropped by the grouping (an update adds no set, and
    /// where allocations lie end to end the map took about as much room as the sites).
    ids: HashMap<Vec<u32>, u32>,
    /// The ids of the sets allocation `a` is a member of: `of_allocation[allocation_starts[a]..
    /// allocation_starts[a + 1]]`. Made by [`Self::index`] after sets were added; empty without
    /// any set.
    of_allocation: Vec<u32>,
    allocation_starts: Vec<u32>,
    /// Whether `of_allocation`, `allocation_starts` and `deltas` cover every set.
    indexed: bool,
    /// Live ambiguous sites in all.
    live: u32,
    /// Each allocation's delta in the update being checked, 0 for those that do not move: written
    /// for the moved allocations and cleared again by [`Self::refusal`], so that a set's members
    /// are read by index. Looking each one up in the list of moves (a binary search) cost about
    /// 950 instructions per moved allocation where allocations lie end to end, more than the
    /// runtime's setters took. Made with the index, in command buffers with ambiguous sites only.
    deltas: Vec<u64>,
}

impl Overlaps {
    fn add(&mut self, set: Vec<u32>) -> u32 {
        self.live += 1;
        if self.ids.is_empty() {
            self.ids = (0..self.counts.len() as u32).map(|id| (self.set(id).to_vec(), id)).collect();
        }
        let id = match self.ids.get(&set) {
            Some(&id) => id,
            None => {
                let id = self.counts.len() as u32;
                if self.set_starts.is_empty() {
                    self.set_starts.push(0);
                }
                self.members.extend_from_slice(&set);
                self.set_starts.push(self.members.len() as u32);
                self.counts.push(0);
                self.ids.insert(set, id);
                self.indexed = false;
                id
            }
        };
        self.counts[id as usize] += 1;
        id
    }

    /// How many distinct sets were added since the table was made.
    #[cfg(test)]
    pub fn sets(&self) -> usize {
        self.counts.len()
    }

    fn remove(&mut self, id: u32) {
        self.live -= 1;
        self.counts[id as usize] -= 1;
    }

    fn set(&self, id: u32) -> &[u32] {
        &self.members[self.set_starts[id as usize] as usize..self.set_starts[id as usize + 1] as usize]
    }

    /// Whether set `id` has live sites and members that move by different deltas.
    fn apart(&self, id: u32) -> bool {
        self.counts[id as usize] > 0 && moves_apart(&self.deltas, self.set(id))
    }

    /// Makes the sets of each of `allocations` allocations and the delta array, if sets were
    /// added since (grouping does, so that no update pays for it): a counting sort, O(sets'
    /// members + allocations).
    fn index(&mut self, allocations: usize) {
        if self.indexed || self.counts.is_empty() {
            return;
        }
        let mut starts = vec![0u32; allocations + 1];
        for &a in &self.members {
            starts[a as usize + 1] += 1;
        }
        for a in 0..allocations {
            starts[a + 1] += starts[a];
        }
        let mut next = starts.clone();
        let mut of_allocation = vec![0u32; self.members.len()];
        for id in 0..self.counts.len() as u32 {
            for &a in self.set(id) {
                of_allocation[next[a as usize] as usize] = id;
                next[a as usize] += 1;
            }
        }
        self.of_allocation = of_allocation;
        self.allocation_starts = starts;
        // Written, not only reserved: the first update would otherwise take its page faults.
        self.deltas = Vec::with_capacity(allocations);
        self.deltas.resize(allocations, 0);
        self.indexed = true;
    }

    /// Gives back what only adding sets needs, and the room the sets' lists grew beyond them.
    fn settle(&mut self) {
        self.ids = HashMap::new();
        self.members.shrink_to_fit();
        self.set_starts.shrink_to_fit();
        self.counts.shrink_to_fit();
    }

    /// Why moving `moved` (`(allocation, new base)`, distinct allocations whose base changes)
    /// from the `old` bases cannot patch every ambiguous site, if it cannot: a live site lies in
    /// allocations that do not all move by the same delta. Costs the sets the moved allocations
    /// belong to, or every set when at least half as many allocations move as there are sets.
    pub fn refusal(&mut self, moved: &[(u32, u64)], old: &[super::allocations::Allocation]) -> Option<String> {
        if self.live == 0 {
            return None;
        }
        self.index(old.len());
        debug_assert_eq!(self.deltas.len(), old.len(), "the overlap index was made for another table");
        for &(a, base) in moved {
            self.deltas[a as usize] = base.wrapping_sub(old[a as usize].base);
        }
        // Each set is checked from its members that moved, or all sets in one pass when at
        // least half as many allocations moved as there are sets (where allocations lie end to
        // end, each is in two sets: then the pass reads each set once instead of twice, and its
        // members in order).
        let apart = if moved.len() * 2 >= self.counts.len() {
            let mut start = 0;
            let ends = self.set_starts.get(1..).unwrap_or_default();
            let id = ends.iter().zip(&self.counts).position(|(&end, &count)| {
                let set = &self.members[start..end as usize];
                start = end as usize;
                count > 0 && moves_apart(&self.deltas, set)
            });
            id.map(|id| id as u32)
        } else {
            moved.iter().find_map(|&(a, _)| {
                let ids = &self.of_allocation[self.allocation_starts[a as usize] as usize..self.allocation_starts[a as usize + 1] as usize];
                // A set whose first member moved is checked from that member only.
                ids.iter().copied().find(|&id| {
                    let first = self.set(id)[0];
                    (first == a || self.deltas[first as usize] == 0) && self.apart(id)
                })
            })
        };
        let refusal = apart.map(|id| {
            format!(
                "{} recorded address(es) may come from any of allocations {:?} (aliased, nested or overlapping entries, or a kernel's pointer one past the end of one of them), which do not all move by the same amount: which one each address came from is not known",
                self.counts[id as usize],
                self.set(id)
            )
        });
        for &(a, _) in moved {
            self.deltas[a as usize] = 0;
        }
        refusal
    }
}

/// Whether the allocations of `set` (two or more) have different `deltas`.
#[inline]
fn moves_apart(deltas: &[u64], set: &[u32]) -> bool {
    let first = deltas[set[0] as usize];
    set[1..].iter().any(|&m| deltas[m as usize] != first)
}

#[derive(Default)]
pub struct PatchTable {
    overlaps: Overlaps,
    allocations: usize,
    /// Live sites grouped by allocation as of the last grouping; allocation `a` owns
    /// `grouped[starts[a]..starts[a + 1]]`. The one copy of each site an update reads: no slab
    /// by id is kept beside it (a node's sites are removed by node, see [`Self::remove_node`]).
    grouped: Vec<Site>,
    starts: Vec<u32>,
    /// The memcpy operands among the grouped sites, with their allocation, in allocation order:
    /// the only sites the memcpy class rule looks at (`memcpy_class.rs`), few where a moved
    /// allocation's sites are mostly kernel arguments.
    copies: Vec<(u32, Site)>,
    /// Sites added since the last grouping, with their allocation.
    pending: Vec<(u32, Site)>,
    /// The nodes whose sites were removed since the last grouping, one bit each: their grouped
    /// sites are dead.
    removed: Vec<u64>,
    /// For each of those nodes, how many pending sites and `ambiguous` entries there were at its
    /// last removal: its entries before those counts are dead, those after them were added since.
    removed_before: HashMap<u32, (u32, u32)>,
    /// The node and overlap set of each ambiguous site (a flat list: where allocations lie end
    /// to end most sites are ambiguous, and a map of lists by node took 70 bytes a node). A
    /// removed node's entries leave it, and their sets' counts drop, at the next grouping.
    ambiguous: Vec<(u32, u32)>,
    /// Sites added since the table was made, for counting what one call added.
    added: u64,
}

impl PatchTable {
    /// Forgets every site and expects allocations `0..n`.
    pub fn reset(&mut self, n: usize) {
        self.overlaps = Overlaps::default();
        self.allocations = n;
        self.grouped = Vec::new();
        self.starts = vec![0; n + 1];
        self.copies = Vec::new();
        self.pending = Vec::new();
        self.removed = Vec::new();
        self.removed_before = HashMap::new();
        self.ambiguous = Vec::new();
    }

    /// Adds a site of `node` patched through `alloc` (the slot holds an address of it); `others`
    /// are the other allocations its address may come from (empty when it is unambiguous).
    pub fn add(&mut self, node: u32, slot: Slot, alloc: u32, others: &[u32]) {
        if !others.is_empty() {
            let mut set = Vec::with_capacity(others.len() + 1);
            set.push(alloc);
            set.extend_from_slice(others);
            set.sort_unstable();
            let id = self.overlaps.add(set);
            self.ambiguous.push((node, id));
        }
        self.pending.push((alloc, Site { node, slot }));
        self.added += 1;
    }

    /// Removes every site of `node` (those grouped and those added since).
    pub fn remove_node(&mut self, node: u32) {
        let (word, bit) = (node as usize / 64, node % 64);
        if self.removed.len() <= word {
            self.removed.resize(word + 1, 0);
        }
        self.removed[word] |= 1 << bit;
        self.removed_before.insert(node, (self.pending.len() as u32, self.ambiguous.len() as u32));
    }

    /// Sites added since the table was made (removals not subtracted).
    pub fn added(&self) -> u64 {
        self.added
    }

    /// The sites pointing into allocation `alloc` (grouped first if recording changed them).
    pub fn of_allocation(&mut self, alloc: u32) -> &[Site] {
        self.group();
        self.grouped_of(alloc)
    }

    /// The sites pointing into allocation `alloc` as last grouped: all of them when nothing was
    /// added or removed since [`Self::group`] (an update, which runs on a finalized table).
    #[inline]
    pub fn grouped_of(&self, alloc: u32) -> &[Site] {
        debug_assert!(self.pending.is_empty() && self.removed.is_empty(), "sites changed since the last grouping");
        &self.grouped[self.starts[alloc as usize] as usize..self.starts[alloc as usize + 1] as usize]
    }

    /// The memcpy operand sites pointing into allocation `alloc` as last grouped (as
    /// [`Self::grouped_of`]: all of them on a finalized table), each with `alloc`.
    pub fn copies_of(&self, alloc: u32) -> &[(u32, Site)] {
        debug_assert!(self.pending.is_empty() && self.removed.is_empty(), "sites changed since the last grouping");
        let first = self.copies.partition_point(|&(a, _)| a < alloc);
        let len = self.copies[first..].partition_point(|&(a, _)| a == alloc);
        &self.copies[first..first + len]
    }

    /// The ambiguous sites, for an update to check before it writes (grouped first if recording
    /// changed them).
    pub fn overlaps(&mut self) -> &mut Overlaps {
        self.group();
        &mut self.overlaps
    }

    /// The heap the table holds (see `memory.rs`).
    pub fn heap(&self) -> Heap {
        let o = &self.overlaps;
        let keys: Heap = o.ids.keys().map(Heap::vec).sum();
        [
            Heap::vec(&self.grouped),
            Heap::vec(&self.starts),
            Heap::vec(&self.copies),
            Heap::vec(&self.pending),
            Heap::vec(&self.removed),
            Heap::map(&self.removed_before),
            Heap::vec(&self.ambiguous),
            Heap::vec(&o.members),
            Heap::vec(&o.set_starts),
            Heap::vec(&o.counts),
            Heap::map(&o.ids),
            keys,
            Heap::vec(&o.of_allocation),
            Heap::vec(&o.allocation_starts),
            Heap::vec(&o.deltas),
        ]
        .into_iter()
        .sum()
    }

    /// Number of live sites (grouped first when some were removed since the last grouping).
    pub fn len(&mut self) -> usize {
        if !self.removed.is_empty() {
            self.group();
        }
        self.grouped.len() + self.pending.len()
    }

    /// Merges the sites added since the last grouping into the grouped array and drops the
    /// removed ones (a counting sort, O(sites)); the merge's buffers are given back.
    #[inline]
    pub fn group(&mut self) {
        if !self.pending.is_empty() || !self.removed.is_empty() {
            self.regroup();
        }
    }

    fn regroup(&mut self) {
        let removed = &self.removed;
        let dead = |node: u32| removed.get(node as usize / 64).is_some_and(|w| w & (1 << (node % 64)) != 0);
        let before = &self.removed_before;
        let pending_live = |i: usize, node: u32| !dead(node) || before.get(&node).is_some_and(|&(b, _)| i >= b as usize);
        let mut starts = vec![0u32; self.allocations + 1];
        for a in 0..self.allocations {
            let old = &self.grouped[self.starts[a] as usize..self.starts[a + 1] as usize];
            starts[a + 1] = old.iter().filter(|s| !dead(s.node)).count() as u32;
        }
        for (i, &(alloc, site)) in self.pending.iter().enumerate() {
            if pending_live(i, site.node) {
                starts[alloc as usize + 1] += 1;
            }
        }
        for a in 0..self.allocations {
            starts[a + 1] += starts[a];
        }
        let mut next = starts.clone();
        let mut grouped = vec![Site { node: 0, slot: Slot::MemsetDst }; starts[self.allocations] as usize];
        for a in 0..self.allocations {
            for &site in self.grouped[self.starts[a] as usize..self.starts[a + 1] as usize].iter().filter(|s| !dead(s.node)) {
                grouped[next[a] as usize] = site;
                next[a] += 1;
            }
        }
        for (i, &(alloc, site)) in self.pending.iter().enumerate() {
            if pending_live(i, site.node) {
                grouped[next[alloc as usize] as usize] = site;
                next[alloc as usize] += 1;
            }
        }
        self.copies = (0..self.allocations as u32)
            .flat_map(|a| grouped[starts[a as usize] as usize..starts[a as usize + 1] as usize].iter().map(move |&site| (a, site)))
            .filter(|(_, site)| matches!(site.slot, Slot::MemcpyDst | Slot::MemcpySrc))
            .collect();
        let overlaps = &mut self.overlaps;
        let mut i = 0;
        self.ambiguous.retain(|&(node, set)| {
            let live = !dead(node) || before.get(&node).is_some_and(|&(_, b)| i >= b as usize);
            i += 1;
            if !live {
                overlaps.remove(set);
            }
            live
        });
        self.ambiguous.shrink_to_fit();
        self.grouped = grouped;
        self.starts = starts;
        self.pending = Vec::new();
        self.removed = Vec::new();
        self.removed_before = HashMap::new();
        // Sets come only with sites, so the ones added since the last grouping are indexed here.
        self.overlaps.index(self.allocations);
        self.overlaps.settle();
    }
}

const _: () = assert!(std::mem::size_of::<Site>() == 8 && MAX_BLOB_BYTES <= u16::MAX as usize);

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
    fn removal_by_node_keeps_every_allocation_s_sites_right() {
        let mut t = PatchTable::default();
        t.reset(3);
        t.add(0, Slot::KernelArg(0), 0, &[]);
        t.add(1, Slot::MemcpyDst, 0, &[]);
        t.add(2, Slot::MemsetDst, 0, &[]);
        t.add(3, Slot::MemcpySrc, 2, &[]);
        assert_eq!(nodes_of(&mut t, 0), vec![0, 1, 2]);
        assert!(t.of_allocation(1).is_empty());
        // Removed from the grouped array, and a pending site of node 4 removed with it.
        t.add(4, Slot::KernelArg(16), 1, &[]);
        t.remove_node(0);
        t.remove_node(2);
        t.remove_node(4);
        assert_eq!(t.len(), 2);
        assert_eq!(nodes_of(&mut t, 0), vec![1]);
        assert!(t.of_allocation(1).is_empty(), "node 4's site went with it before it was grouped");
        // A node re-recorded: its old sites go, the ones added after the removal stay.
        t.add(4, Slot::KernelArg(8), 0, &[]);
        t.remove_node(1);
        t.add(1, Slot::MemcpyDst, 1, &[]);
        assert_eq!(t.len(), 3);
        assert_eq!(nodes_of(&mut t, 0), vec![4]);
        assert_eq!(t.of_allocation(0)[0], Site { node: 4, slot: Slot::KernelArg(8) });
        assert_eq!(t.of_allocation(1), &[Site { node: 1, slot: Slot::MemcpyDst }]);
        assert_eq!(t.of_allocation(2), &[Site { node: 3, slot: Slot::MemcpySrc }]);
        assert_eq!(t.added(), 7);
        t.reset(1);
        assert_eq!(t.len(), 0);
        assert!(t.of_allocation(0).is_empty());
    }

    #[test]
    fn allocations_end_to_end_are_checked_whether_few_or_most_of_them_move() {
        // Allocation i's base is also i - 1's end: seven sets {i - 1, i} over eight allocations.
        let mut t = PatchTable::default();
        t.reset(8);
        for i in 1..8 {
            t.add(i, Slot::KernelArg(0), i, &[i - 1]);
        }
        t.group();
        let old: Vec<_> = (0..8u32).map(|i| super::super::allocations::Allocation { base: 0x1000 * u64::from(i), size: 0x1000 }).collect();
        let by = |moved: &[u32], delta: &dyn Fn(u32) -> u64| -> Vec<(u32, u64)> {
            moved.iter().map(|&a| (a, old[a as usize].base + delta(a))).collect()
        };
        let o = t.overlaps();
        // Few moves: each checked from the sets of what moved.
        assert!(o.refusal(&by(&[3], &|_| 0x10_0000), &old).unwrap().contains("[2, 3]"));
        assert!(o.refusal(&by(&[0, 1, 2], &|_| 0x10_0000), &old).unwrap().contains("[2, 3]"));
        // Most of them: every set in one pass.
        let all: Vec<u32> = (0..8).collect();
        assert_eq!(o.refusal(&by(&all, &|_| 0x10_0000), &old), None);
        assert!(o.refusal(&by(&all, &|a| if a == 5 { 0x20_0000 } else { 0x10_0000 }), &old).unwrap().contains("[4, 5]"));
        assert!(o.refusal(&by(&[0, 1, 2, 3], &|_| 0x10_0000), &old).unwrap().contains("[3, 4]"));
        // The deltas are cleared after each check: the same all-equal move passes again.
        assert_eq!(o.refusal(&by(&all, &|_| 0x30_0000), &old), None);
        // A set added after the grouping is checked too (indexed by the check itself): with
        // {0, 1} and {6, 7} gone, {0, 7} is the only one 0 or 7 belongs to.
        t.remove_node(1);
        t.remove_node(7);
        t.add(9, Slot::KernelArg(8), 7, &[0]);
        let o = t.overlaps();
        assert_eq!(o.refusal(&by(&[0, 7], &|_| 0x10_0000), &old), None);
        assert!(o.refusal(&by(&[0, 7], &|a| 0x10_0000 * u64::from(a + 1)), &old).unwrap().contains("[0, 7]"));
        assert!(o.refusal(&by(&[7], &|_| 0x10_0000), &old).unwrap().contains("[0, 7]"));
    }

    #[test]
    fn a_removed_node_s_ambiguous_sites_no_longer_refuse_a_move() {
        let mut t = PatchTable::default();
        t.reset(2);
        let old = [super::super::allocations::Allocation { base: 0x1000, size: 0x100 }; 2];
        t.add(0, Slot::KernelArg(0), 0, &[1]);
        t.group();
        assert!(t.overlaps().refusal(&[(0, 0x9000)], &old).is_some(), "0 and 1 alias: moving 0 alone is refused");
        t.remove_node(0);
        assert!(t.overlaps().refusal(&[(0, 0x9000)], &old).is_none());
        assert_eq!(t.len(), 0);
    }
}

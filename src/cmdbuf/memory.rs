//! What a command buffer keeps in host memory, counted from its own data structures (inline
//! sizes and heap capacities, not the allocator's statistics), by what it holds: the figure
//! `rcb-bench` sets against the packed argument bytes themselves.
//!
//! The library keeps one copy of each node's parameters, which it pushes to the executable graph
//! and to the template alike; what the runtime keeps for either graph is the runtime's and is not
//! counted. A hash map is counted as its table: every bucket (key and value), not only the 7/8 of
//! them its capacity reports, and the control bytes.

use std::collections::HashMap;
use std::mem::size_of;

/// Host bytes one command buffer keeps, by what they hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// The packed kernel arguments themselves (their length): what the others are set against.
    pub argument_bytes: u64,
    /// The heap the argument blobs take (their capacity).
    pub argument_copies: u64,
    /// The node records, one inline record per node (a memcpy's or memset's parameters inline).
    pub node_records: u64,
    /// Each node's own lists on the heap: a kernel's pointer offsets and named arguments (after
    /// its arguments in their block), the side table of the rare fields of the nodes that have
    /// any and the allocations each pins, its known references (an opaque kernel's boxed
    /// references too).
    pub node_lists: u64,
    /// The patch table: sites grouped by allocation, those added or removed since the last
    /// grouping, the ambiguous sites' sets.
    pub site_lists: u64,
    /// The allocation table, its lookup index and the pin count of each allocation.
    pub allocation_table: u64,
    /// What updates use: a mark bit and a blob address per node (made at finalize and recording),
    /// and the buffers an update reuses, grown to what the updates so far needed.
    pub update_scratch: u64,
    /// The rest: nodes left to push or to refresh, flattened groups, kept graphs, memcpy classes,
    /// and, added at the C boundary, the command buffer's fixed cost (its struct in the shared,
    /// locked object behind the handle, its entries in the handle registry, and its tally of
    /// the process counters).
    pub other: u64,
    /// Separate heap blocks behind all of these (the allocator adds its own header to each).
    pub heap_blocks: u64,
}

impl MemoryUse {
    /// Every byte kept (the argument bytes are part of `argument_copies`).
    pub fn total(&self) -> u64 {
        self.argument_copies
            + self.node_records
            + self.node_lists
            + self.site_lists
            + self.allocation_table
            + self.update_scratch
            + self.other
    }
}

/// The control bytes a `hashbrown` table has beyond one per bucket (a group, read at once by
/// SSE2 on x86-64; 8 elsewhere, where this counts 8 bytes too many).
pub const CONTROL_GROUP: usize = 16;

/// Bytes and heap blocks, summed over the structures of one kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct Heap {
    pub bytes: u64,
    pub blocks: u64,
}

impl Heap {
    /// The heap behind `v` (its capacity), no block when it has none.
    pub fn of<T>(v: &[T], capacity: usize) -> Heap {
        debug_assert!(v.len() <= capacity);
        let bytes = (capacity * size_of::<T>()) as u64;
        Heap { bytes, blocks: u64::from(bytes > 0) }
    }

    pub fn vec<T>(v: &Vec<T>) -> Heap {
        Heap::of(v, v.capacity())
    }

    /// A hash map's table, one block, as `hashbrown` lays it out: a power-of-two count of
    /// buckets, of which `capacity()` reports 7/8 (all but one below 8 buckets), each a key and
    /// a value, then a control byte per bucket and [`CONTROL_GROUP`] more. An empty map has none.
    pub fn map<K, V, S>(m: &HashMap<K, V, S>) -> Heap {
        let capacity = m.capacity();
        if capacity == 0 {
            return Heap::default();
        }
        let buckets = if capacity < 8 { capacity + 1 } else { capacity * 8 / 7 }.next_power_of_two();
        Heap { bytes: (buckets * (size_of::<(K, V)>() + 1) + CONTROL_GROUP) as u64, blocks: 1 }
    }

    pub fn add(&mut self, other: Heap) {
        self.bytes += other.bytes;
        self.blocks += other.blocks;
    }
}

impl std::iter::Sum for Heap {
    fn sum<I: Iterator<Item = Heap>>(iter: I) -> Heap {
        iter.fold(Heap::default(), |mut a, b| {
            a.add(b);
            a
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_is_counted_as_a_power_of_two_of_buckets_with_their_control_bytes() {
        assert_eq!(Heap::map(&HashMap::<u64, u64>::new()).bytes, 0);
        for n in [1, 3, 5, 7, 8, 20, 100, 1000] {
            let m: HashMap<u64, u64> = (0..n).map(|i| (i, i)).collect();
            let heap = Heap::map(&m);
            let bytes = heap.bytes as usize - CONTROL_GROUP;
            assert_eq!(bytes % 17, 0, "{n} entries: {heap:?}");
            let buckets = bytes / 17;
            assert!(buckets.is_power_of_two() && buckets > n as usize, "{n} entries: {buckets} buckets");
            let reported = if buckets < 8 { buckets - 1 } else { buckets / 8 * 7 };
            assert_eq!(m.capacity(), reported, "{n} entries: {buckets} buckets");
        }
    }
}

//! What a command buffer keeps in host memory, counted from its own data structures (inline
//! sizes and heap capacities, not the allocator's statistics), by what it holds: the figure
//! `rcb-bench` sets against the packed argument bytes themselves.
//!
//! The library keeps one copy of each node's parameters, which it pushes to the executable graph
//! and to the template alike; what the runtime keeps for either graph is the runtime's and is not
//! counted. A hash map is counted as its buckets (key, value and one control byte each).

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
    /// Each node's own lists on the heap: a kernel's pointer offsets and named arguments, its
    /// site ids, the allocations it pins, its known references.
    pub node_lists: u64,
    /// The patch table: sites by id, sites grouped by allocation, the ambiguous sites' sets.
    pub site_lists: u64,
    /// The allocation table, its lookup index and the pin count of each allocation.
    pub allocation_table: u64,
    /// Buffers an update reuses, sized at finalize for an update that moves everything.
    pub update_scratch: u64,
    /// The rest: nodes left to push or to refresh, flattened groups, kept graphs, memcpy classes.
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

    pub fn boxed<T>(v: &[T]) -> Heap {
        Heap::of(v, v.len())
    }

    pub fn vec<T>(v: &Vec<T>) -> Heap {
        Heap::of(v, v.capacity())
    }

    /// A hash map's buckets (`hashbrown`: key, value and a control byte each, one block).
    pub fn map<K, V>(m: &HashMap<K, V>) -> Heap {
        let bytes = (m.capacity() * (size_of::<(K, V)>() + 1)) as u64;
        Heap { bytes, blocks: u64::from(bytes > 0) }
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

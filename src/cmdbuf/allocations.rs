//! The caller's allocation table (index → base, size) and the address → allocation lookup used
//! when a node is recorded.
//!
//! An address belongs to an allocation when `base <= p < base + size`, or `p == base` for a
//! size-0 allocation. When several allocations contain it (aliasing or nested ranges), the one
//! with the greatest base wins, then the lowest index: the choice is deterministic, and a
//! pointer then follows that allocation when it moves.

use crate::error::{Error, Result};

/// Most allocations one table may hold.
pub const MAX_ALLOCATIONS: usize = 1 << 24;

/// Laid out as C's `rcb_allocation` (the C ABI hands tables over without copying them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Allocation {
    pub base: u64,
    pub size: u64,
}

/// The words of `table`, base and size of each entry in turn: what a comparison of two tables
/// reads, without telling the fields apart (so that the compiler need not separate them).
pub fn words(table: &[Allocation]) -> &[u64] {
    // SAFETY: `Allocation` is `repr(C)` of two `u64`s, so a table of n entries is 2n aligned,
    // initialized `u64`s borrowed for as long as the table.
    unsafe { std::slice::from_raw_parts(table.as_ptr().cast::<u64>(), 2 * table.len()) }
}

impl Allocation {
    /// The last address that belongs to the allocation (its base when it is empty).
    fn reach(&self) -> u64 {
        self.base + self.size.saturating_sub(1)
    }
}

/// Checks a table from the caller: a count within limits and no range past the address space.
pub fn validate(allocs: &[Allocation]) -> Result<()> {
    if allocs.len() > MAX_ALLOCATIONS {
        return Err(Error::invalid_argument(format!("{} allocations exceed the limit of {MAX_ALLOCATIONS}", allocs.len())));
    }
    match allocs.iter().position(|a| a.base.checked_add(a.size).is_none()) {
        Some(i) => Err(Error::invalid_argument(format!(
            "allocation {i} (base {:#x}, size {}) runs past the end of the address space",
            allocs[i].base, allocs[i].size
        ))),
        None => Ok(()),
    }
}

/// The recorded table plus a sorted index for lookups. The index is rebuilt lazily (on the
/// next lookup after the bases changed), so moving allocations costs nothing here.
#[derive(Default)]
pub struct AllocationTable {
    entries: Vec<Allocation>,
    /// `(base, reach, index)` sorted by base ascending, then index descending.
    sorted: Vec<(u64, u64, u32)>,
    /// `max_reach[i]`: the greatest reach among `sorted[..=i]`; bounds the backward walk.
    max_reach: Vec<u64>,
    index_stale: bool,
}

impl AllocationTable {
    /// Replaces the table (already validated).
    pub fn set(&mut self, allocs: &[Allocation]) {
        self.entries.clear();
        self.entries.extend_from_slice(allocs);
        self.index_stale = true;
    }

    pub fn entries(&self) -> &[Allocation] {
        &self.entries
    }

    /// Moves allocation `i` to `base` (same size).
    pub fn rebase(&mut self, i: usize, base: u64) {
        self.entries[i].base = base;
        self.index_stale = true;
    }

    /// The allocation containing `p` and the offset of `p` inside it.
    pub fn lookup(&mut self, p: u64) -> Option<(u32, u64)> {
        if self.index_stale {
            self.rebuild();
        }
        let mut i = self.sorted.partition_point(|&(base, _, _)| base <= p);
        while i > 0 && self.max_reach[i - 1] >= p {
            i -= 1;
            let (base, reach, index) = self.sorted[i];
            if reach >= p {
                return Some((index, p - base));
            }
        }
        None
    }

    fn rebuild(&mut self) {
        self.sorted.clear();
        self.sorted.extend(self.entries.iter().enumerate().map(|(i, a)| (a.base, a.reach(), i as u32)));
        self.sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)));
        self.max_reach.clear();
        let mut reach = 0;
        for &(_, r, _) in &self.sorted {
            reach = reach.max(r);
            self.max_reach.push(reach);
        }
        self.index_stale = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(allocs: &[(u64, u64)]) -> AllocationTable {
        let allocs: Vec<Allocation> = allocs.iter().map(|&(base, size)| Allocation { base, size }).collect();
        validate(&allocs).unwrap();
        let mut t = AllocationTable::default();
        t.set(&allocs);
        t
    }

    #[test]
    fn finds_bases_and_interior_addresses_but_not_one_past_the_end() {
        let mut t = table(&[(0x3000, 0x100), (0x1000, 0x100), (0x2000, 0x10)]);
        assert_eq!(t.lookup(0x1000), Some((1, 0)));
        assert_eq!(t.lookup(0x10ff), Some((1, 0xff)));
        assert_eq!(t.lookup(0x1100), None);
        assert_eq!(t.lookup(0x2008), Some((2, 8)));
        assert_eq!(t.lookup(0x3080), Some((0, 0x80)));
        assert_eq!(t.lookup(0xfff), None);
        assert_eq!(t.lookup(u64::MAX), None);
    }

    #[test]
    fn size_zero_allocations_match_their_base_only() {
        let mut t = table(&[(0x1000, 0), (0x5000, 0x10)]);
        assert_eq!(t.lookup(0x1000), Some((0, 0)));
        assert_eq!(t.lookup(0x1001), None);
    }

    #[test]
    fn overlaps_resolve_to_the_greatest_base_then_the_lowest_index() {
        // 0 and 2 alias exactly; 1 is nested inside them.
        let mut t = table(&[(0x1000, 0x1000), (0x1800, 0x100), (0x1000, 0x1000)]);
        assert_eq!(t.lookup(0x1000), Some((0, 0)));
        assert_eq!(t.lookup(0x1810), Some((1, 0x10)));
        // Past the nested range, the walk continues to the enclosing one.
        assert_eq!(t.lookup(0x1900), Some((0, 0x900)));
    }

    #[test]
    fn rebase_is_seen_by_the_next_lookup() {
        let mut t = table(&[(0x1000, 0x100)]);
        assert_eq!(t.lookup(0x1010), Some((0, 0x10)));
        t.rebase(0, 0x9000);
        assert_eq!(t.lookup(0x1010), None);
        assert_eq!(t.lookup(0x9010), Some((0, 0x10)));
    }

    #[test]
    fn validation_rejects_wrapping_ranges() {
        let e = validate(&[Allocation { base: 1, size: 1 }, Allocation { base: u64::MAX, size: 2 }]).unwrap_err();
        assert!(e.message.contains("allocation 1"), "{}", e.message);
    }
}

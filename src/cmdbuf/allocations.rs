//! The caller's allocation table (index → base, size) and the address → allocations lookup used
//! when a node is recorded.
//!
//! An address lies in a non-empty allocation when `base <= p < base + size`. A size-0
//! allocation (an empty buffer, whose address may be anywhere) takes `p == base` only when no
//! non-empty allocation contains `p`. An address that lies in several allocations (aliased
//! parameters, nested or partly overlapping ranges, empty ones at one address) is ambiguous:
//! nothing says which of them the pointer came from, so the lookup returns them all and an
//! update moves the address only when all of them move by the same delta (see `patch.rs`).
//! A caller that knows a pointer's allocation names it (`ArgKind::Allocation`) instead.
//!
//! A kernel's pointer argument may also be an end pointer: one past the end of the buffer it
//! came from (the end of a begin/end pair, a size-0 slice at a buffer's end), an address no
//! byte of that buffer has. So for a kernel argument found by value ([`Reach::ThroughEnd`]) a
//! non-empty allocation that ends at `p` is a possible origin too, at offset `size`: where
//! another allocation contains `p` (allocators pack buffers end to end, so the next one often
//! starts there) the address is ambiguous between them, and where none does, the allocations
//! ending at `p` and the size-0 ones at `p` all are candidates, patched through the lowest
//! index ending there. Either way every candidate must move by the same delta, or the update is
//! refused. Without this, moving `A` alone patched `A`'s end pointer as the base of the
//! unmoved `B` after it (or, with nothing after `A`, left it unpatched): a stale address
//! reported as a success. A memcpy or memset operand is an address the node reads or writes,
//! which a range's end is not, so it is matched [`Reach::Inside`] only: an end there would only
//! turn copies into `B` into refusals whenever `A` moves alone.

use super::memory::Heap;
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

/// Checks a table from the caller: a count within limits and no range past the address space.
pub fn validate(allocs: &[Allocation]) -> Result<()> {
    if allocs.len() > MAX_ALLOCATIONS {
        return Err(Error::invalid_argument(format!("{} allocations exceed the limit of {MAX_ALLOCATIONS}", allocs.len())));
    }
    allocs.iter().enumerate().try_for_each(|(i, a)| in_address_space(i, a))
}

/// Checks that allocation `i`'s range ends inside the address space (an update checks each
/// entry it moves with this; `validate` checks a whole table).
#[inline]
pub fn in_address_space(i: usize, a: &Allocation) -> Result<()> {
    if a.base.checked_add(a.size).is_some() { Ok(()) } else { Err(past_the_address_space(i, a)) }
}

#[cold]
fn past_the_address_space(i: usize, a: &Allocation) -> Error {
    Error::invalid_argument(format!("allocation {i} (base {:#x}, size {}) runs past the end of the address space", a.base, a.size))
}

/// Which allocations an address may have come from, besides those it lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Only those it lies in: an address a node reads or writes (a memcpy or memset operand).
    Inside,
    /// Also every non-empty allocation that ends at it: a kernel's pointer argument, which may
    /// be the end pointer of a buffer.
    ThroughEnd,
}

/// Where an address lies: the allocation it is patched through and its offset there (the
/// allocation's size for an end pointer), and every other allocation it may have come from too
/// (empty when the address is unambiguous).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Containing {
    pub allocation: u32,
    pub offset: u64,
    /// The other allocations the address may have come from, ascending.
    pub others: Vec<u32>,
}

/// The recorded table plus sorted indexes for lookups. The indexes are rebuilt lazily (on the
/// next lookup after the bases changed), so moving allocations costs nothing here.
#[derive(Default)]
pub struct AllocationTable {
    entries: Vec<Allocation>,
    /// Non-empty entries as `(base, last address, index)`, sorted by base.
    sorted: Vec<(u64, u64, u32)>,
    /// `max_reach[i]`: the greatest last address among `sorted[..=i]`; bounds the backward walk.
    max_reach: Vec<u64>,
    /// Empty entries as `(base, index)`, sorted.
    empty: Vec<(u64, u32)>,
    index_stale: bool,
    /// The allocations a lookup found containing the address and ending at it, reused so that a
    /// lookup allocates only for an ambiguous address.
    found: Vec<u32>,
    ending: Vec<u32>,
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

    /// The heap the table and its index hold (see `memory.rs`).
    pub fn heap(&self) -> Heap {
        [
            Heap::vec(&self.entries),
            Heap::vec(&self.sorted),
            Heap::vec(&self.max_reach),
            Heap::vec(&self.empty),
            Heap::vec(&self.found),
            Heap::vec(&self.ending),
        ]
        .into_iter()
        .sum()
    }

    /// Frees the lookup index, rebuilt by the next lookup: after finalize only a re-record looks
    /// addresses up, and the first update that moves anything makes the index stale anyway.
    pub fn drop_index(&mut self) {
        self.sorted = Vec::new();
        self.max_reach = Vec::new();
        self.empty = Vec::new();
        self.index_stale = true;
    }

    /// Moves each `(allocation, base)` of `moves` to its new base (same size).
    pub fn rebase(&mut self, moves: &[(u32, u64)]) {
        for &(i, base) in moves {
            self.entries[i as usize].base = base;
        }
        self.index_stale |= !moves.is_empty();
    }

    /// The allocations `p` may have come from (see the module's rule), patched through the
    /// lowest index among those containing it, else among the non-empty ones ending at it
    /// (`reach` allowing), else among the empty ones at it; with the offset of `p` from that
    /// allocation's base.
    pub fn lookup(&mut self, p: u64, reach: Reach) -> Option<Containing> {
        if self.index_stale {
            self.rebuild();
        }
        let (found, ending) = (&mut self.found, &mut self.ending);
        found.clear();
        ending.clear();
        // A range that ends at `p` has `p - 1` as its last address; `validate` keeps every
        // non-empty range from ending at 0.
        let lowest_last = match reach {
            Reach::ThroughEnd => p.saturating_sub(1),
            Reach::Inside => p,
        };
        let mut i = self.sorted.partition_point(|&(base, _, _)| base <= p);
        while i > 0 && self.max_reach[i - 1] >= lowest_last {
            i -= 1;
            let (_, last, index) = self.sorted[i];
            if last >= p {
                found.push(index);
            } else if last == lowest_last {
                ending.push(index);
            }
        }
        found.sort_unstable();
        ending.sort_unstable();
        let empty = &self.empty;
        let empties = || empty[empty.partition_point(|&(base, _)| base < p)..].iter().take_while(|&&(base, _)| base == p).map(|&(_, i)| i);
        let (allocation, mut others): (u32, Vec<u32>) = match (found.split_first(), ending.split_first()) {
            // An empty allocation yields to one containing `p` (the first rule).
            (Some((&a, inside)), _) => (a, inside.iter().chain(ending.iter()).copied().collect()),
            (None, Some((&a, rest))) => (a, rest.iter().copied().chain(empties()).collect()),
            (None, None) => {
                found.extend(empties());
                let (&a, rest) = found.split_first()?;
                (a, rest.to_vec())
            }
        };
        others.sort_unstable();
        Some(Containing { allocation, offset: p - self.entries[allocation as usize].base, others })
    }

    fn rebuild(&mut self) {
        self.sorted.clear();
        self.empty.clear();
        for (i, a) in self.entries.iter().enumerate() {
            match a.size {
                0 => self.empty.push((a.base, i as u32)),
                size => self.sorted.push((a.base, a.base + (size - 1), i as u32)),
            }
        }
        self.sorted.sort_unstable();
        self.empty.sort_unstable();
        self.max_reach.clear();
        let mut reach = 0;
        for &(_, last, _) in &self.sorted {
            reach = reach.max(last);
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

    fn at(t: &mut AllocationTable, p: u64) -> Option<(u32, u64, Vec<u32>)> {
        t.lookup(p, Reach::Inside).map(|c| (c.allocation, c.offset, c.others))
    }

    fn arg_at(t: &mut AllocationTable, p: u64) -> Option<(u32, u64, Vec<u32>)> {
        t.lookup(p, Reach::ThroughEnd).map(|c| (c.allocation, c.offset, c.others))
    }

    #[test]
    fn an_operand_is_found_at_bases_and_interior_addresses_but_not_one_past_the_end() {
        let mut t = table(&[(0x3000, 0x100), (0x1000, 0x100), (0x2000, 0x10)]);
        assert_eq!(at(&mut t, 0x1000), Some((1, 0, vec![])));
        assert_eq!(at(&mut t, 0x10ff), Some((1, 0xff, vec![])));
        assert_eq!(at(&mut t, 0x1100), None);
        assert_eq!(at(&mut t, 0x2008), Some((2, 8, vec![])));
        assert_eq!(at(&mut t, 0x3080), Some((0, 0x80, vec![])));
        assert_eq!(at(&mut t, 0xfff), None);
        assert_eq!(at(&mut t, u64::MAX), None);
    }

    #[test]
    fn a_kernel_argument_one_past_the_end_comes_from_that_allocation() {
        let mut t = table(&[(0x3000, 0x100), (0x1000, 0x100), (0x2000, 0x10), (u64::MAX - 0x10, 0x10)]);
        assert_eq!(arg_at(&mut t, 0x1100), Some((1, 0x100, vec![])), "nothing after it");
        assert_eq!(arg_at(&mut t, 0x2010), Some((2, 0x10, vec![])));
        assert_eq!(arg_at(&mut t, u64::MAX), Some((3, 0x10, vec![])), "ending at the top of the address space");
        assert_eq!(arg_at(&mut t, 0x1080), Some((1, 0x80, vec![])), "interior addresses as before");
        assert_eq!(arg_at(&mut t, 0x1101), None);
        assert_eq!(arg_at(&mut t, 0x0fff), None);
        assert_eq!(arg_at(&mut t, 0), None);
    }

    #[test]
    fn an_end_pointer_at_the_start_of_the_next_allocation_is_ambiguous() {
        // 1 packed right after 0, 2 right after 1; 3 aliases 0 exactly.
        let mut t = table(&[(0x1000, 0x100), (0x1100, 0x80), (0x1180, 0x10), (0x1000, 0x100)]);
        assert_eq!(arg_at(&mut t, 0x1100), Some((1, 0, vec![0, 3])), "the base of 1 or the end of 0 and 3");
        assert_eq!(arg_at(&mut t, 0x1180), Some((2, 0, vec![1])));
        assert_eq!(arg_at(&mut t, 0x1190), Some((2, 0x10, vec![])));
        assert_eq!(arg_at(&mut t, 0x1108), Some((1, 8, vec![])), "only the end itself");
        // A memcpy or memset operand there is read or written: it is in 1 only.
        assert_eq!(at(&mut t, 0x1100), Some((1, 0, vec![])));
    }

    #[test]
    fn an_end_inside_another_allocation_is_ambiguous_with_it() {
        // 1 is nested at the start of 0; 2 overlaps the end of 1.
        let mut t = table(&[(0x1000, 0x1000), (0x1000, 0x100), (0x10f0, 0x20)]);
        assert_eq!(arg_at(&mut t, 0x1100), Some((0, 0x100, vec![1, 2])));
        assert_eq!(arg_at(&mut t, 0x1110), Some((0, 0x110, vec![2])));
        assert_eq!(at(&mut t, 0x1110), Some((0, 0x110, vec![])), "an operand: inside 0 only");
    }

    #[test]
    fn an_empty_allocation_takes_its_base_only_where_no_other_allocation_does() {
        let mut t = table(&[(0x1000, 0), (0x5000, 0x10), (0x5008, 0), (0x1000, 0), (0x5010, 0)]);
        assert_eq!(at(&mut t, 0x1000), Some((0, 0, vec![3])), "two empty entries at one address are ambiguous");
        assert_eq!(at(&mut t, 0x1001), None);
        assert_eq!(at(&mut t, 0x5008), Some((1, 8, vec![])), "inside a non-empty allocation");
        assert_eq!(at(&mut t, 0x5010), Some((4, 0, vec![])), "one past the end of a non-empty one");
        assert_eq!(arg_at(&mut t, 0x1000), Some((0, 0, vec![3])));
        assert_eq!(arg_at(&mut t, 0x5008), Some((1, 8, vec![])));
    }

    #[test]
    fn allocations_ending_where_an_empty_one_lies_are_all_candidates() {
        // 0 and 3 end at 0x2000, where the empty 1 and 4 lie; the empty 2 lies inside 5.
        let mut t = table(&[(0x1f00, 0x100), (0x2000, 0), (0x3010, 0), (0x1000, 0x1000), (0x2000, 0), (0x3000, 0x20)]);
        assert_eq!(arg_at(&mut t, 0x2000), Some((0, 0x100, vec![1, 3, 4])), "patched through the lowest index ending there");
        assert_eq!(at(&mut t, 0x2000), Some((1, 0, vec![4])), "an operand: the empty ones only");
        assert_eq!(arg_at(&mut t, 0x3010), Some((5, 0x10, vec![])), "an empty allocation still yields to one containing the address");
        assert_eq!(arg_at(&mut t, 0x3020), Some((5, 0x20, vec![])));
    }

    #[test]
    fn an_address_in_several_allocations_names_them_all() {
        // 0 and 2 alias exactly; 1 is nested inside them; 3 overlaps their end.
        let mut t = table(&[(0x1000, 0x1000), (0x1800, 0x100), (0x1000, 0x1000), (0x1f00, 0x200)]);
        assert_eq!(at(&mut t, 0x1000), Some((0, 0, vec![2])));
        assert_eq!(at(&mut t, 0x1810), Some((0, 0x810, vec![1, 2])));
        assert_eq!(at(&mut t, 0x1900), Some((0, 0x900, vec![2])));
        assert_eq!(at(&mut t, 0x1f80), Some((0, 0xf80, vec![2, 3])));
        assert_eq!(at(&mut t, 0x2000), Some((3, 0x100, vec![])));
    }

    #[test]
    fn rebase_is_seen_by_the_next_lookup() {
        let mut t = table(&[(0x1000, 0x100)]);
        assert_eq!(at(&mut t, 0x1010), Some((0, 0x10, vec![])));
        t.rebase(&[(0, 0x9000)]);
        assert_eq!(at(&mut t, 0x1010), None);
        assert_eq!(at(&mut t, 0x9010), Some((0, 0x10, vec![])));
    }

    #[test]
    fn validation_rejects_wrapping_ranges() {
        let e = validate(&[Allocation { base: 1, size: 1 }, Allocation { base: u64::MAX, size: 2 }]).unwrap_err();
        assert!(e.message.contains("allocation 1"), "{}", e.message);
    }
}

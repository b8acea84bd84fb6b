//! Patch sites: every recorded address that lies inside an allocation, kept in a slab with one
//! list per allocation, so that moving an allocation visits exactly its own sites.
//!
//! Removing a site is O(1): each site remembers its position in its allocation's list and is
//! swap-removed from it.

/// Where in a node's parameters an address lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Byte offset of a device-pointer argument in a kernel node's blob.
    KernelArg(u32),
    MemcpyDst,
    MemcpySrc,
    MemsetDst,
}

#[derive(Clone, Copy, Debug)]
pub struct Site {
    pub node: u32,
    pub slot: Slot,
    pub alloc: u32,
    /// Offset of the address from the allocation's base.
    pub offset: u64,
    /// Position of this site in `by_alloc[alloc]`.
    pos: u32,
}

#[derive(Default)]
pub struct PatchTable {
    sites: Vec<Site>,
    free: Vec<u32>,
    by_alloc: Vec<Vec<u32>>,
}

impl PatchTable {
    /// Forgets every site and sizes the per-allocation lists for `n` allocations.
    pub fn reset(&mut self, n: usize) {
        self.sites.clear();
        self.free.clear();
        self.by_alloc.iter_mut().for_each(Vec::clear);
        self.by_alloc.resize_with(n, Vec::new);
    }

    pub fn add(&mut self, node: u32, slot: Slot, alloc: u32, offset: u64) -> u32 {
        let list = &mut self.by_alloc[alloc as usize];
        let site = Site { node, slot, alloc, offset, pos: list.len() as u32 };
        let id = match self.free.pop() {
            Some(id) => {
                self.sites[id as usize] = site;
                id
            }
            None => {
                self.sites.push(site);
                (self.sites.len() - 1) as u32
            }
        };
        list.push(id);
        id
    }

    pub fn remove(&mut self, id: u32) {
        let Site { alloc, pos, .. } = self.sites[id as usize];
        let list = &mut self.by_alloc[alloc as usize];
        list.swap_remove(pos as usize);
        if let Some(&moved) = list.get(pos as usize) {
            self.sites[moved as usize].pos = pos;
        }
        self.free.push(id);
    }

    pub fn get(&self, id: u32) -> &Site {
        &self.sites[id as usize]
    }

    /// The sites pointing into allocation `alloc`.
    pub fn of_allocation(&self, alloc: u32) -> &[u32] {
        &self.by_alloc[alloc as usize]
    }

    /// Number of live sites.
    pub fn len(&self) -> usize {
        self.sites.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes_of(t: &PatchTable, alloc: u32) -> Vec<u32> {
        let mut v: Vec<u32> = t.of_allocation(alloc).iter().map(|&id| t.get(id).node).collect();
        v.sort();
        v
    }

    #[test]
    fn removal_keeps_the_other_lists_and_positions_right() {
        let mut t = PatchTable::default();
        t.reset(2);
        let a = t.add(0, Slot::KernelArg(0), 0, 0);
        let b = t.add(1, Slot::MemcpyDst, 0, 8);
        let c = t.add(2, Slot::MemsetDst, 0, 16);
        let d = t.add(3, Slot::MemcpySrc, 1, 0);
        t.remove(a);
        assert_eq!(nodes_of(&t, 0), vec![1, 2]);
        // `c` was swapped into `a`'s place; removing it must still find it.
        t.remove(c);
        assert_eq!(nodes_of(&t, 0), vec![1]);
        let e = t.add(4, Slot::KernelArg(8), 0, 24);
        assert!(e == a || e == c, "freed ids are reused");
        assert_eq!(nodes_of(&t, 0), vec![1, 4]);
        assert_eq!(nodes_of(&t, 1), vec![3]);
        assert_eq!(t.get(b).offset, 8);
        assert_eq!(t.get(d).slot, Slot::MemcpySrc);
        assert_eq!(t.len(), 3);
        t.reset(1);
        assert_eq!(t.len(), 0);
        assert!(t.of_allocation(0).is_empty());
    }
}

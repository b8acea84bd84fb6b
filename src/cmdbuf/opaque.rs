//! Nodes whose addresses the library cannot patch: child nodes holding a clone of a graph, a
//! graph that came from stream capture, and kernel nodes whose arguments the library never sees
//! (`kernelParams`).
//! Moving an allocation such a node points into would leave the node stale while the update
//! reported success, so each of them has a reference set instead: the addresses it holds (a
//! clone of one of this library's command buffers, whose nodes it recorded) or "unknown". An
//! address update that would move a referenced allocation, or any allocation while some
//! reference set is unknown, is refused whole: nothing changes and the caller re-records.
//!
//! The check costs one counter per moved allocation: each allocation counts the opaque nodes
//! that may reference it, kept up to date when such a node is added or replaced and recounted
//! when the table is replaced.

/// What a node the library cannot patch may point into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum References {
    /// These addresses and no others; each one inside an allocation pins that allocation.
    Known(Vec<u64>),
    /// Anything: while the node exists no allocation can move in place.
    Unknown,
}

/// Which allocations opaque nodes pin, as counts, and how many opaque nodes have unknown
/// references.
#[derive(Default)]
pub struct Pins {
    /// `counts[a]`: opaque nodes whose known references lie inside allocation `a`.
    counts: Vec<u32>,
    unknown: u32,
}

impl Pins {
    /// Forgets every pin and expects allocations `0..n`.
    pub fn reset(&mut self, n: usize) {
        self.counts.clear();
        self.counts.resize(n, 0);
        self.unknown = 0;
    }

    /// Counts one more opaque node: `allocations` (distinct) are those its known references lie
    /// in, or `None` when its references are unknown.
    pub fn add(&mut self, allocations: Option<&[u32]>) {
        match allocations {
            Some(allocations) => allocations.iter().for_each(|&a| self.counts[a as usize] += 1),
            None => self.unknown += 1,
        }
    }

    /// Undoes one [`Self::add`] with the same argument.
    pub fn remove(&mut self, allocations: Option<&[u32]>) {
        match allocations {
            Some(allocations) => allocations.iter().for_each(|&a| self.counts[a as usize] -= 1),
            None => self.unknown -= 1,
        }
    }

    /// Why moving the allocations of `moved` (`(allocation, new base)`, indices in the table)
    /// must be refused, if it must. Nothing moved is never refused.
    pub fn refusal(&self, moved: &[(u32, u64)]) -> Option<String> {
        if moved.is_empty() {
            return None;
        }
        if self.unknown > 0 {
            return Some(format!(
                "{} node(s) may point anywhere (a child node of a raw or captured graph, or a kernel node added with kernelParams), so no allocation can move in place",
                self.unknown
            ));
        }
        moved.iter().find(|&&(a, _)| self.counts[a as usize] > 0).map(|&(a, _)| {
            format!("allocation {a} is referenced by {} cloned child node(s), whose addresses are not patch sites", self.counts[a as usize])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_pinned_allocation_and_everything_while_one_reference_set_is_unknown() {
        let mut pins = Pins::default();
        pins.reset(3);
        assert_eq!(pins.refusal(&[(0, 1), (2, 2)]), None);
        pins.add(Some(&[1, 2]));
        pins.add(Some(&[2]));
        assert_eq!(pins.refusal(&[(0, 1)]), None);
        assert!(pins.refusal(&[(0, 1), (2, 2)]).is_some_and(|r| r.contains("allocation 2") && r.contains("2 cloned")));
        pins.remove(Some(&[2]));
        pins.remove(Some(&[1, 2]));
        assert_eq!(pins.refusal(&[(1, 1), (2, 2)]), None);
        pins.add(None);
        assert!(pins.refusal(&[(0, 1)]).is_some_and(|r| r.contains("1 node(s)")));
        assert_eq!(pins.refusal(&[]), None, "nothing moved is never refused");
        pins.remove(None);
        assert_eq!(pins.refusal(&[(0, 1)]), None);
        pins.add(None);
        pins.reset(1);
        assert_eq!(pins.refusal(&[(0, 1)]), None, "a reset forgets unknown references too");
    }
}

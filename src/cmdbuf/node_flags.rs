//! The flags of each node that pushes and updates change, one bit a node in arrays of their own
//! beside the node records: an update notes the nodes it pushes without writing their records,
//! and a record is 64 bytes, one cache line, where three flags and their padding made it 72.

use super::NodeId;
use super::memory::Heap;

/// One bit a node.
#[derive(Default)]
pub struct NodeBits(Vec<u64>);

#[inline]
fn bit(node: NodeId) -> u64 {
    1u64 << (node % 64)
}

impl NodeBits {
    #[inline]
    pub fn get(&self, node: NodeId) -> bool {
        self.0[node as usize / 64] & bit(node) != 0
    }

    /// Sets `node`'s bit to `on` and says what it was.
    #[inline]
    pub fn replace(&mut self, node: NodeId, on: bool) -> bool {
        let word = &mut self.0[node as usize / 64];
        let was = *word & bit(node) != 0;
        if on {
            *word |= bit(node);
        } else {
            *word &= !bit(node);
        }
        was
    }

    #[inline]
    pub fn set(&mut self, node: NodeId, on: bool) {
        self.replace(node, on);
    }

    /// Room for `nodes` nodes; the bits it adds are clear.
    pub fn cover(&mut self, nodes: usize) {
        let words = nodes.div_ceil(64);
        if self.0.len() < words {
            self.0.resize(words, 0);
        }
    }

    /// Room for exactly `nodes` nodes, its memory written (see `update::reserve_written`).
    pub fn cover_exactly(&mut self, nodes: usize) {
        super::update::reserve_written(&mut self.0, nodes.div_ceil(64), 0);
        self.cover(nodes);
    }

    pub fn clear_all(&mut self) {
        self.0.fill(0);
    }

    pub fn is_clear(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Words covered (64 nodes each).
    pub fn words(&self) -> usize {
        self.0.len()
    }

    pub fn heap(&self) -> Heap {
        Heap::vec(&self.0)
    }
}

/// A node's flags, by node.
#[derive(Default)]
pub struct NodeFlags {
    /// The runtime holds older parameters than the node's record (a push failed).
    pub unpushed: NodeBits,
    /// The template node holds older parameters than the executable graph and cannot be brought
    /// up to date (a child node updated in place: the runtime has no template setter for it).
    pub template_lags: NodeBits,
    /// The template node holds older parameters than the record, which the next template
    /// refresh pushes (a primary's updates go to its executable graph only).
    pub template_dirty: NodeBits,
}

impl NodeFlags {
    /// Flags for a new node numbered `node`, all clear (a node removed before may have left its
    /// number's bits set).
    pub fn add(&mut self, node: NodeId) {
        for bits in [&mut self.unpushed, &mut self.template_lags, &mut self.template_dirty] {
            bits.cover(node as usize + 1);
            bits.set(node, false);
        }
    }

    /// Notes that `node`'s template lags behind its parameters, which went to the executable
    /// graph only: listed once in `dirty`, which the next template refresh pushes.
    #[inline]
    pub fn template_lags_behind(&mut self, node: NodeId, dirty: &mut Vec<NodeId>) {
        if !self.template_dirty.replace(node, true) {
            dirty.push(node);
        }
    }

    pub fn heap(&self) -> Heap {
        [self.unpushed.heap(), self.template_lags.heap(), self.template_dirty.heap()].into_iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_added_again_starts_clear_and_each_bit_is_its_own() {
        let mut flags = NodeFlags::default();
        for node in 0..130 {
            flags.add(node);
        }
        flags.unpushed.set(64, true);
        flags.template_lags.set(129, true);
        let mut dirty = Vec::new();
        flags.template_lags_behind(3, &mut dirty);
        flags.template_lags_behind(3, &mut dirty);
        assert_eq!(dirty, vec![3], "listed once");
        assert!(flags.unpushed.get(64) && !flags.unpushed.get(63) && !flags.unpushed.get(65));
        assert!(flags.template_lags.get(129) && !flags.template_lags.get(128));
        assert!(flags.template_dirty.get(3) && !flags.unpushed.get(3) && !flags.template_lags.get(3));
        // Node 129 removed and a new node 129 added: its bits are clear again.
        flags.add(129);
        assert!(!flags.template_lags.get(129));
        assert!(flags.unpushed.replace(64, false) && !flags.unpushed.get(64));
        assert!(flags.unpushed.is_clear() && !flags.template_dirty.is_clear());
        flags.template_dirty.clear_all();
        assert!(flags.template_dirty.is_clear());
    }
}

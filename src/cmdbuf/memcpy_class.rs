//! Memcpy nodes whose executable copy cannot take new operands in place.
//!
//! CUDA's `cuGraphExecMemcpyNodeSetParams` documents that the new operands must come from the
//! same context and device as the original ones, keep the same memory type, stay 1-D, and that it
//! fails with `CUDA_ERROR_INVALID_VALUE` "if the memory operands' mappings changed". Measured on
//! an H200 (driver 580), the last rule means the kind of allocation: a node instantiated with
//! operands from `cuMemAlloc` or managed memory takes new ones from either, one instantiated with
//! virtual-memory mappings (`cuMemCreate` + `cuMemMap`, what XLA's platform allocator hands out)
//! or a stream-ordered pool takes new ones from either, and every crossing between the two
//! fails; so does whole-graph update (`cuGraphExecUpdate`). Only a new instantiation takes them.
//! The same setter wants operands "allocated from the same contexts as the original": of two
//! nodes given `cuMemAlloc` memory of another context of the same device, it took one and
//! refused the other (measured likewise), so a plain allocation's class holds its context too.
//! HIP's `hipGraphExecMemcpyNodeSetParams1D` checks no such thing (clr: the copy's kind, size and
//! direction), and its runtime reports no class (`Runtime::memory_class` is `None`).
//!
//! So, where the runtime tells the classes apart, each memcpy node of the executable graph
//! remembers the classes (with the device) of the operands it was instantiated with, and a push
//! whose operands differ is never sent to the setter: the template takes the new parameters and
//! the executable graph is re-instantiated from it, as the update budget does (`budget.rs`), or,
//! where re-instantiating is not possible now, the update is refused before anything changes.
//! Where a setter refuses a memcpy node's operands all the same (a rule the library does not
//! check, on any runtime), the same re-instantiation repairs the update; only when that too is
//! impossible are the nodes left unpushed, which refuses launches until a re-record.
//!
//! The memcpy nodes inside a child node's graph are not the library's: a move never reaches
//! them (their addresses pin their allocations, see `opaque.rs`), and a new graph for the child
//! node goes to the runtime's child setter whole, which on CUDA refuses one whose memcpy copies
//! between other kinds (measured on an H200): the update then fails with nothing changed, and
//! the caller records again, as XLA's own command buffer would have to. The template's child
//! node cannot take a new graph, so no re-instantiation could carry it either.

use super::budget::MAX_RETIRED;
use super::nodes::Params;
use super::patch::Slot;
use super::{CmdBuf, NodeId};
use crate::counters::{Event, Fallback};
use crate::error::{Error, Result};
use crate::runtime::{MemcpyParams, MemoryClass};

impl CmdBuf {
    /// The classes of `copy`'s destination and source, where the runtime's executable memcpy
    /// setter cares about them.
    fn memcpy_classes(&self, copy: &MemcpyParams) -> Option<[MemoryClass; 2]> {
        Some([self.rt.memory_class(copy.dst)?, self.rt.memory_class(copy.src)?])
    }

    /// Remembers the classes of every memcpy node's operands, which a new executable graph was
    /// just instantiated with.
    pub(super) fn note_exec_classes(&mut self) {
        self.exec_classes.clear();
        for (id, record) in self.nodes.iter().enumerate() {
            if let Params::Memcpy(copy) = &record.params
                && let Some(classes) = self.memcpy_classes(copy)
            {
                self.exec_classes.insert(id as NodeId, classes);
            }
        }
    }

    /// Why memcpy node `node` of the executable graph cannot take `copy` in place, if it cannot.
    pub(super) fn memcpy_blocked(&self, node: NodeId, copy: &MemcpyParams) -> Option<String> {
        let held = self.exec_classes.get(&node)?;
        let now = self.memcpy_classes(copy)?;
        (now != *held).then(|| {
            format!("memcpy node {node} would copy between {now:?} memory where it was instantiated with {held:?} (destination, source)")
        })
    }

    /// Why the moves in `scratch.moved` cannot reach a memcpy node of the executable graph in
    /// place, if they cannot; also looks at memcpy nodes an earlier failed push left behind.
    /// Costs nothing where the runtime has no class rule, and where it has one a search of the
    /// memcpy operands (few) per moved allocation and a class query per operand that moves.
    pub(super) fn memcpy_moves_blocked(&mut self) -> Option<String> {
        if self.exec.is_none() || self.exec_classes.is_empty() {
            return None;
        }
        // The update grouped the sites before it asked.
        for &(alloc, base) in &self.scratch.moved {
            // Called before the update rebases anything: the table still holds the old base.
            let delta = base.wrapping_sub(self.allocs.entries()[alloc as usize].base);
            for &(_, site) in self.patches.copies_of(alloc) {
                // 0 for the destination, 1 for the source (the list holds nothing else).
                let side = usize::from(site.slot == Slot::MemcpySrc);
                let Some(held) = self.exec_classes.get(&site.node) else { continue };
                let moved_to = self.nodes[site.node as usize].params.read(site.slot).wrapping_add(delta);
                let Some(now) = self.rt.memory_class(moved_to) else { continue };
                if now != held[side] {
                    let operand = ["destination", "source"][side];
                    return Some(format!(
                        "memcpy node {}'s {operand} moves to {now:?} memory where it was instantiated with {:?}",
                        site.node, held[side]
                    ));
                }
            }
        }
        self.unpushed.iter().find_map(|&node| match &self.nodes[node as usize].params {
            Params::Memcpy(copy) if self.nodes[node as usize].unpushed => self.memcpy_blocked(node, copy),
            _ => None,
        })
    }

    /// Why the executable graph cannot be re-instantiated now, if it cannot: a node's template
    /// lags behind it with no clone to replay, or as many replaced executable graphs as are kept
    /// still wait for their launches (the host never waits for them).
    pub(super) fn reinstantiation_blocked(&mut self) -> Option<String> {
        if let Some(node) = (0..self.nodes.len()).find(|&n| self.nodes[n].template_lags && self.rare.child_clone(n as NodeId).is_none()) {
            let kind = self.nodes[node].params.kind_name();
            return Some(format!("the template of {kind} node {node} lags behind the executable graph"));
        }
        self.launches.reap(self.rt, &mut self.counters);
        let waiting = self.launches.waiting_execs();
        (waiting >= MAX_RETIRED).then(|| format!("{waiting} old executable graph(s) still wait for their launches"))
    }

    /// Re-instantiates because a memcpy node cannot take its parameters in place (`why`): the
    /// template, brought up to date, holds them. The caller checked
    /// [`Self::reinstantiation_blocked`]. The old executable graph is destroyed once its launches
    /// finish (`launches.rs`).
    pub(super) fn reinstantiate_for_memcpy(&mut self, why: &str) -> Result<()> {
        match self.reinstantiate() {
            Ok(()) => {
                log::info!("{why}: re-instantiated the executable graph, whose memcpy setter would refuse it");
                Ok(())
            }
            Err(e) => {
                self.counters.record(Event::Fallback(Fallback::ReinstantiateFailed));
                Err(e.context(format!("{why}; re-instantiating the executable graph")))
            }
        }
    }

    /// Gives memcpy node `node` of a primary `params` by way of a new executable graph (`why`:
    /// the present one cannot take them in place): refused with nothing changed when
    /// re-instantiating is not possible now; otherwise the template node takes them first, then
    /// the record, then a new executable graph. Should the instantiation fail, the node is left
    /// unpushed (launches are refused until a re-record). An error gives the parameters back.
    pub(super) fn rerecord_memcpy_by_reinstantiating(
        &mut self,
        node: NodeId,
        params: Params,
        why: String,
    ) -> std::result::Result<(), Box<(Error, Params)>> {
        self.counters.record(Event::Fallback(Fallback::MemcpyNotInPlace));
        if let Some(blocked) = self.reinstantiation_blocked() {
            let e = Error::unsupported(format!(
                "{why}, and the executable graph cannot be re-instantiated now ({blocked}): nothing changed; re-record"
            ));
            return Err(Box::new((e, params)));
        }
        let raw = self.nodes[node as usize].raw;
        if let Err(e) = params.push(self.rt, None, raw) {
            return Err(Box::new((e, params)));
        }
        self.note_memcpy_set(true);
        self.replace_params(node, params);
        if let Err(e) = self.reinstantiate_for_memcpy(&why) {
            self.mark_unpushed(node);
            let e = e.context("the node's new parameters reached the template only: launches are refused until a re-record");
            return Err(Box::new((e, self.nodes[node as usize].params.clone())));
        }
        Ok(())
    }
}

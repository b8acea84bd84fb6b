//! The command buffer: a HIP graph whose nodes' parameters the library owns, an allocation
//! table, and the patch sites that let allocations move without re-recording.
//!
//! A primary command buffer is instantiated at its first finalize and updates go to its
//! executable graph; a nested one is never instantiated (it is cloned into a parent as a child
//! node) and updates go to its template graph. A primary's template is brought up to date
//! lazily, when someone asks for it ([`CmdBuf::graph`]), or when the executable graph is
//! re-instantiated because its update budget is about to be spent (`budget.rs`).
//!
//! Thread-safety: `&mut self` everywhere; one thread at a time per command buffer.

pub mod allocations;
pub mod args;
mod budget;
mod flatten;
mod graveyard;
mod launches;
mod leak_probe;
mod memcpy_class;
pub(crate) mod memory;
mod nodes;
mod opaque;
mod patch;
#[cfg(test)]
mod properties;
mod published;
mod state;
mod update;

pub use allocations::{Allocation, MAX_ALLOCATIONS};
pub use args::{ArgKind, KernelArg, MAX_ARGS};
pub use budget::{
    Basis as BudgetBasis, DEFAULT_BUDGET_BYTES, MAX_KEPT_EXECS, MAX_NODE_CHARGE_BYTES, NODE_OVERHEAD_BYTES, Settlement as BudgetSettlement,
    settled as budget_settled,
};
pub use leak_probe::{MAX_ROUNDS as PROBE_MAX_ROUNDS, Measurement as GrowthMeasurement, PROBE_NODES};
pub use memory::MemoryUse;

/// The process's update budget, settled now (measured on the calling thread's current device
/// unless `RCB_EXEC_UPDATE_BUDGET` is set or the runtime is CUDA) if no command buffer has
/// settled it yet, as the first command buffer does.
pub fn settle_budget(rt: &'static dyn Runtime) -> Result<&'static BudgetSettlement> {
    Ok(budget::settle(rt, crate::config::get()?.exec_update_budget))
}
pub use flatten::{FlattenReport, Source as FlattenSource};
pub use opaque::KernelList;
pub use update::{AllocationMove, LOOK_AHEAD_FROM_NODES, UpdateReport};

use crate::counters::{Counters, Counts, Event, Fallback};
use crate::error::{Error, ErrorKind, Leaks, Result};
use crate::runtime::{
    self, CaptureAfterFailedEnd, CaptureMode, Exec, Function, Graph, KernelParamPointers, MemcpyParams, MemoryClass, MemsetParams, Node,
    Runtime, Stream,
};
use allocations::{AllocationTable, Reach};
use budget::ExecBudget;
use launches::{Doomed, Launches};
use nodes::{Blob, KernelRecord, NodeRecord, Params, RareFields};
use opaque::{Pins, References};
use patch::{PatchTable, Slot};
use state::{Op, State};

/// A node's index in its command buffer.
pub type NodeId = u32;

/// Most nodes one command buffer may hold.
pub const MAX_NODES: usize = 1 << 31;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Instantiated at finalize; launchable.
    Primary,
    /// Never instantiated; embedded into other command buffers as a child.
    Nested,
}

/// A kernel launch; the argument values are borrowed for the call and copied into the node.
#[derive(Clone, Copy, Debug)]
pub struct KernelLaunch<'a> {
    pub function: Function,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub args: &'a [KernelArg<'a>],
}

/// A 1-D memset of `count` elements of `element_size` bytes (1, 2 or 4) set to `pattern`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memset {
    pub dst: u64,
    pub pattern: u32,
    pub element_size: u32,
    pub count: u64,
}

/// What `capture_end` says when it is asked for on another thread than the one that began the
/// capture. The runtimes end a thread-local capture only on its own thread, and differ on what a
/// wrong-thread end leaves: HIP keeps the capture, CUDA ends it and drops what it captured
/// (`CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`, seen on an H200), so the runtime is not asked.
const OTHER_THREADS_CAPTURE: &str = "the stream is still capturing, and only the thread that began the capture can end it (rcb_cmdbuf_capture_end, or rcb_cmdbuf_free, on that thread, before it exits); if that thread has exited, the stream captures for as long as it lives";

/// The same said by a free, which has given the handle back: the capture is the caller's to end.
const OTHER_THREADS_CAPTURE_FREED: &str = "the stream is still capturing, and only the thread that began the capture can end it: end it on that thread, before it exits, with hipStreamEndCapture (cuStreamEndCapture) and destroy the graph it returns; if that thread has exited, the stream captures for as long as it lives";

pub struct CmdBuf {
    rt: &'static dyn Runtime,
    kind: Kind,
    state: State,
    graph: Graph,
    exec: Option<Exec>,
    /// The generation (`launches.rs`) from which launches run `exec`.
    exec_since: u64,
    /// The graph came from stream capture: its nodes are the runtime's, not in `nodes`.
    captured: bool,
    nodes: Vec<NodeRecord>,
    /// The fields few nodes have, by node (see `nodes::Rare`).
    rare: RareFields,
    allocs: AllocationTable,
    patches: PatchTable,
    /// Allocations that nodes the library cannot patch may reference (see `opaque.rs`).
    pins: Pins,
    scratch: update::Scratch,
    /// Where each node's argument blob starts, for the update's writing pass.
    blob_bases: update::BlobBases,
    /// Nodes whose last push failed; pushed again by the next update or finalize.
    unpushed: Vec<NodeId>,
    /// Nodes of a primary whose template lags behind the library's parameters, each once
    /// (`NodeRecord::template_dirty`).
    template_dirty: Vec<NodeId>,
    /// The nodes each flattened child became, by the group node it returned.
    flattened: std::collections::HashMap<NodeId, std::ops::Range<NodeId>>,
    counters: Counters,
    budget: ExecBudget,
    /// Launches that may still run, and the replaced executables and graphs waiting for them.
    launches: Launches,
    /// Graphs kept for what a node may read that its parameters do not show (user objects a
    /// captured graph owns, see `flatten.rs`), by the node they are kept for: the flattened
    /// group's node or the child node. Replaced ones wait in `launches`.
    kept: std::collections::HashMap<NodeId, Vec<Graph>>,
    /// The template was handed out as a raw graph while this command buffer kept graphs, so
    /// they are published with it (see `published.rs`) for as long as they are kept.
    published: bool,
    /// A memcpy node of the template may have been changed through the runtime's 1-D setter
    /// since it was made: on HIP 7.2 it then reports the parameters it was made with, so none is
    /// read back from this graph (see `Runtime::memcpy_read_back`). Those of the graphs cloned
    /// into it as child nodes are never read back there (see `flatten.rs`). Only set, never
    /// cleared.
    memcpy_set: bool,
    /// Graphs the runtime failed to destroy (the one a capture replaced): destroyed again when
    /// the command buffer is released, which reports them if that fails too.
    orphans: Vec<Graph>,
    /// The kernels whose arguments are never patched (`RCB_OPAQUE_KERNELS`, see `opaque.rs`).
    opaque_kernels: &'static KernelList,
    /// The classes of the operands each memcpy node of the executable graph was instantiated
    /// with (destination, source), where the runtime's memcpy setter refuses a change of them;
    /// empty elsewhere (see `memcpy_class.rs`).
    exec_classes: std::collections::HashMap<NodeId, [MemoryClass; 2]>,
}

impl CmdBuf {
    pub fn new(rt: &'static dyn Runtime, device: i32, kind: Kind) -> Result<Self> {
        graveyard::reap();
        let count = rt.info().device_count;
        if !(0..count).contains(&device) {
            return Err(Error::invalid_argument(format!("device {device} does not exist ({count} device(s))")));
        }
        let config = crate::config::get()?;
        let graph = rt.graph_create()?;
        // Settled by the first command buffer the runtime could make, nested ones too: their
        // graphs' charges reach their parents.
        let settled = budget::settle(rt, config.exec_update_budget);
        let limit = match kind {
            Kind::Primary => settled.limit,
            Kind::Nested => 0,
        };
        Ok(Self {
            rt,
            kind,
            state: State::Recording,
            graph,
            exec: None,
            exec_since: 0,
            captured: false,
            nodes: Vec::new(),
            rare: RareFields::default(),
            allocs: AllocationTable::default(),
            patches: PatchTable::default(),
            pins: Pins::default(),
            scratch: update::Scratch::default(),
            blob_bases: update::BlobBases::default(),
            unpushed: Vec::new(),
            template_dirty: Vec::new(),
            flattened: std::collections::HashMap::new(),
            counters: Counters::new(),
            budget: ExecBudget::new(limit, settled.node_charge),
            launches: Launches::new(device),
            kept: std::collections::HashMap::new(),
            published: false,
            memcpy_set: false,
            orphans: Vec::new(),
            opaque_kernels: &config.opaque_kernels,
            exec_classes: std::collections::HashMap::new(),
        })
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Number of recorded addresses that lie inside an allocation.
    pub fn site_count(&mut self) -> usize {
        self.patches.len()
    }

    /// The host memory this command buffer keeps, by what it holds (see `memory.rs`).
    pub fn memory(&self) -> MemoryUse {
        use memory::Heap;
        let (mut copies, mut argument_bytes, mut lists) = (Heap::default(), 0, Heap::default());
        for record in &self.nodes {
            let (blob, len, own) = record.heap();
            copies.add(blob);
            argument_bytes += len;
            lists.add(own);
        }
        lists.add(self.rare.heap());
        let records = Heap::vec(&self.nodes);
        let sites = self.patches.heap();
        let mut table = self.allocs.heap();
        table.add(self.pins.heap());
        let mut scratch = self.scratch.heap();
        scratch.add(self.blob_bases.heap());
        let kept: Heap = self.kept.values().map(Heap::vec).sum();
        let other: Heap = [
            Heap::vec(&self.unpushed),
            Heap::vec(&self.template_dirty),
            Heap::map(&self.flattened),
            Heap::map(&self.kept),
            kept,
            Heap::map(&self.exec_classes),
            Heap::vec(&self.orphans),
        ]
        .into_iter()
        .sum();
        MemoryUse {
            argument_bytes,
            argument_copies: copies.bytes,
            node_records: records.bytes,
            node_lists: lists.bytes,
            site_lists: sites.bytes,
            allocation_table: table.bytes,
            update_scratch: scratch.bytes,
            other: other.bytes,
            heap_blocks: [copies, records, lists, sites, table, scratch, other].iter().map(|h| h.blocks).sum(),
        }
    }

    /// What this command buffer asked of the runtime since it was created or last reset.
    pub fn counts(&self) -> Counts {
        self.counters.counts()
    }

    /// Zeroes [`Self::counts`]; the process totals keep what was counted.
    pub fn reset_counts(&mut self) {
        self.counters.reset();
    }

    /// The update budget of the executable graph in bytes (0: never re-instantiated) and what
    /// its updates are estimated to have taken since it was instantiated.
    pub fn exec_update_budget(&self) -> (u64, u64) {
        (self.budget.limit(), self.budget.spent())
    }

    /// Sets the update budget (bytes; 0: never re-instantiate), replacing the default of
    /// `RCB_EXEC_UPDATE_BUDGET` or the runtime. Only before the first finalize, so that the
    /// executable graph has one budget from its instantiation on.
    pub fn set_exec_update_budget(&mut self, bytes: u64) -> Result<()> {
        if self.kind == Kind::Nested {
            return Err(Error::invalid_state("a nested command buffer has no executable graph to budget"));
        }
        if self.exec.is_some() {
            return Err(Error::invalid_state("the update budget is set before the first finalize instantiates the command buffer"));
        }
        self.budget.set_limit(bytes);
        Ok(())
    }

    /// The estimated kernel-argument staging bytes of pushing every node of this command
    /// buffer's graph once (what updating a child node holding it costs).
    fn graph_push_bytes(&self) -> u64 {
        if self.captured {
            return budget::listed_graph_bytes(self.rt, self.graph, self.budget.node_charge());
        }
        let nodes: u64 = self.nodes.iter().map(|r| budget::push_bytes(&r.params, self.budget.node_charge())).sum();
        nodes + self.rare.iter().map(|(_, r)| r.child_bytes).sum::<u64>()
    }

    /// Replaces the allocation table. Every recorded address, and every address a cloned child
    /// may reference, is attributed to the new table, so re-recording after a reported
    /// `needs_rerecord` starts with this call.
    pub fn set_allocations(&mut self, allocs: &[Allocation]) -> Result<()> {
        self.state.allow(Op::SetAllocations)?;
        allocations::validate(allocs)?;
        self.allocs.set(allocs);
        self.patches.reset(allocs.len());
        self.pins.reset(allocs.len());
        for id in 0..self.nodes.len() {
            self.rare.clear_pins(id as NodeId);
            self.attach_sites(id as NodeId);
        }
        Ok(())
    }

    pub fn add_kernel(&mut self, deps: &[NodeId], launch: &KernelLaunch<'_>) -> Result<NodeId> {
        let params = kernel_params(launch, self.allocs.entries(), self.opaque(launch.function))?;
        self.record(deps, params)
    }

    /// What a kernel node of `function` the caller adds references when its kernel is opaque.
    fn opaque(&self, function: Function) -> Option<References> {
        opaque::classify(self.rt, self.opaque_kernels, function, false)
    }

    /// A description of an opaque kernel this command buffer holds (see `opaque.rs`), if any:
    /// while it does, no allocation moves in place.
    pub fn opaque_kernel(&self) -> Option<&str> {
        self.pins.opaque_kernel()
    }

    /// Adds a kernel node whose arguments the runtime copies through `launch.params` during the
    /// call (XLA's packed argument arrays give addresses, not sizes). The library keeps no copy,
    /// so the node has no patch sites and its references are unknown (opaque for a kernel on
    /// `RCB_OPAQUE_KERNELS`): while it exists no allocation moves in place.
    pub fn add_kernel_params(&mut self, deps: &[NodeId], launch: &KernelParamPointers) -> Result<NodeId> {
        self.state.allow(Op::Add)?;
        check_dims(launch.grid, launch.block)?;
        let raw_deps = self.raw_deps(deps)?;
        let raw = self.rt.add_kernel_node_by_pointers(self.graph, &raw_deps, launch)?;
        let refs = self.by_pointers_references(launch.function);
        Ok(self.push_record(raw, Params::KernelByPointers(refs)))
    }

    /// What a kernel node added with `kernelParams` of `function` references: unknown, opaque
    /// for a kernel on the list.
    fn by_pointers_references(&self, function: Function) -> References {
        self.opaque(function).unwrap_or(References::Unknown)
    }

    pub fn add_memcpy(&mut self, deps: &[NodeId], copy: MemcpyParams) -> Result<NodeId> {
        self.record(deps, memcpy_params(copy)?)
    }

    pub fn add_memset(&mut self, deps: &[NodeId], set: Memset) -> Result<NodeId> {
        self.record(deps, memset_params(set)?)
    }

    pub fn add_empty(&mut self, deps: &[NodeId]) -> Result<NodeId> {
        self.record(deps, Params::Empty)
    }

    /// Adds a child node holding a clone of `child`'s graph (the caller keeps `child`). The
    /// clone's addresses are not patch sites: the allocations they lie in are pinned instead
    /// (see [`Self::references`]), and a move of any of them is refused. The clone carries the
    /// user objects of `child`'s graph; clones of the graphs `child` keeps for its own nodes are
    /// kept with the new node.
    pub fn add_child(&mut self, deps: &[NodeId], child: &mut CmdBuf) -> Result<NodeId> {
        self.state.allow(Op::Add)?;
        // Checked before the child's template is brought up to date, so a refusal touches nothing.
        self.raw_deps(deps)?;
        let graph = child.graph_to_embed()?;
        let keeps = self.clone_all(child.kept_graphs())?;
        self.add_child_node(deps, graph, child.references(), child.graph_push_bytes(), keeps)
    }

    /// Every graph this command buffer keeps for what its nodes may read (see `kept`), and the
    /// clones its child nodes updated in place hold (its template's own child nodes carry
    /// theirs): what a command buffer embedding this one keeps clones of.
    fn kept_graphs(&self) -> Vec<Graph> {
        self.kept.values().flatten().copied().chain(self.rare.iter().filter_map(|(_, r)| r.child_clone)).collect()
    }

    /// Clones of `graphs` (each carries its source's user objects), or none when one fails.
    fn clone_all(&self, graphs: Vec<Graph>) -> Result<Vec<Graph>> {
        let mut clones = Vec::with_capacity(graphs.len());
        for graph in graphs {
            match self.rt.graph_clone(graph) {
                Ok(clone) => clones.push(clone),
                Err(e) => {
                    self.destroy_all(clones);
                    return Err(e.context("cloning a graph kept for what a node may read"));
                }
            }
        }
        Ok(clones)
    }

    /// Destroys graphs this call made and no launch has used.
    fn destroy_all(&self, graphs: Vec<Graph>) {
        for graph in graphs {
            if let Err(e) = self.rt.graph_destroy(graph) {
                log::warn!("destroying an unused clone: {e}; it is leaked");
            }
        }
    }

    /// Keeps `graphs` for `node` (added to what it keeps already).
    fn keep(&mut self, node: NodeId, graphs: Vec<Graph>) {
        if !graphs.is_empty() {
            self.kept.entry(node).or_default().extend(graphs);
            self.republish();
        }
    }

    /// Replaces what `node` keeps with `graphs`, and its child clone with `clone` when given: the
    /// old ones wait for the launches that may use them, the new ones are in service from the
    /// generation after.
    fn replace_kept(&mut self, node: NodeId, graphs: Vec<Graph>, clone: Option<Graph>) {
        let old = if graphs.is_empty() { self.kept.remove(&node) } else { self.kept.insert(node, graphs) };
        let old_clone = clone.and_then(|c| self.rare.get_mut(node).child_clone.replace(c));
        // Published no more before they may be destroyed.
        self.republish();
        let since = self.rare.graphs_since(node);
        for graph in old.into_iter().flatten().chain(old_clone) {
            self.launches.retire_graph(self.rt, graph, since, &mut self.counters);
        }
        // The launches made so far run the old ones.
        self.launches.close_open(self.rt);
        self.rare.get_mut(node).graphs_since = self.launches.now();
    }

    /// Brings what is published with the template up to date after the kept graphs changed.
    fn republish(&mut self) {
        if self.published {
            published::publish(self.graph, self.kept_graphs(), self.memcpy_set);
        }
    }

    /// Notes that a memcpy node of the template may now report stale parameters (see
    /// `memcpy_set`); `set` false changes nothing.
    fn note_memcpy_set(&mut self, set: bool) {
        if set && !self.memcpy_set {
            self.memcpy_set = true;
            self.republish();
        }
    }

    /// Adds a child node holding a clone of a graph the library did not build (the caller keeps
    /// `graph`). Its references are unknown (opaque where it holds a kernel on
    /// `RCB_OPAQUE_KERNELS`): while the node exists no allocation moves in place.
    /// When `graph` is a template another command buffer handed out, clones of the graphs that
    /// command buffer keeps are kept with the node (see `published.rs`).
    pub fn add_child_graph(&mut self, deps: &[NodeId], graph: Graph) -> Result<NodeId> {
        self.state.allow(Op::Add)?;
        self.raw_deps(deps)?;
        let keeps = published::clone_kept(self.rt, graph)?;
        let refs = self.foreign_references(graph);
        self.add_child_node(deps, graph, refs, budget::listed_graph_bytes(self.rt, graph, self.budget.node_charge()), keeps)
    }

    /// `bytes`: the estimated staging bytes of pushing the child's graph (see `budget.rs`);
    /// `keeps`: clones this call made of graphs the child's nodes may read, kept with the node,
    /// or destroyed when it cannot be added.
    fn add_child_node(&mut self, deps: &[NodeId], graph: Graph, refs: References, bytes: u64, keeps: Vec<Graph>) -> Result<NodeId> {
        let added = self.state.allow(Op::Add).and_then(|()| self.raw_deps(deps));
        let raw = match added.and_then(|raw_deps| self.rt.add_child_node(self.graph, &raw_deps, graph)) {
            Ok(raw) => raw,
            Err(e) => {
                self.destroy_all(keeps);
                return Err(e);
            }
        };
        let id = self.push_record(raw, Params::Child(refs));
        self.rare.get_mut(id).child_bytes = bytes;
        self.keep(id, keeps);
        Ok(id)
    }

    /// What a clone of this command buffer's template may point into, for a parent that embeds
    /// it: every address its nodes hold where a pointer may be (device-pointer arguments, scanned
    /// words, memcpy and memset operands; inside an allocation or not) and its own child nodes'
    /// references. Unknown when the graph came from capture or any node's references are unknown
    /// or lag behind the template. An opaque kernel anywhere in it (a node of one, a child node
    /// holding one, a kernel on the list in the captured graph) makes it opaque whatever else it
    /// holds, so that a refusal names the kernel.
    fn references(&self) -> References {
        if self.captured {
            return self.foreign_references(self.graph);
        }
        let mut addresses = Vec::new();
        let mut unknown = false;
        for record in &self.nodes {
            // The template of such a node holds older parameters than `params` says.
            unknown |= record.unpushed || record.template_lags;
            match record.params.references() {
                Some(References::Unknown) => unknown = true,
                Some(opaque @ References::Opaque(_)) => return opaque.clone(),
                Some(References::Known(known)) => addresses.extend_from_slice(known),
                None => record.params.for_each_slot(|_, address, _| addresses.push(address)),
            }
        }
        if unknown {
            return References::Unknown;
        }
        addresses.sort_unstable();
        addresses.dedup();
        References::Known(addresses)
    }

    /// What a graph the library did not build may point into: anything, opaque where it holds a
    /// kernel on `RCB_OPAQUE_KERNELS` (see [`opaque::in_graph`]).
    fn foreign_references(&self, graph: Graph) -> References {
        match opaque::in_graph(self.rt, self.opaque_kernels, graph) {
            Some(what) => References::Opaque(what),
            None => References::Unknown,
        }
    }

    pub fn update_kernel(&mut self, node: NodeId, launch: &KernelLaunch<'_>) -> Result<()> {
        self.rerecord(node, kernel_params(launch, self.allocs.entries(), self.opaque(launch.function))?)
    }

    /// Sends a node added with [`Self::add_kernel_params`] a new launch: to the executable graph
    /// of a primary command buffer, to the template of a nested one. A primary's template gets
    /// it too, right after: the arguments are readable only during this call, so the template
    /// cannot catch up later as it does for other nodes. Should that second push fail, the
    /// executable graph keeps the update (the call succeeds), the failure is logged at warn and
    /// the node's template is marked as lagging until an update reaches it.
    pub fn update_kernel_params(&mut self, node: NodeId, launch: &KernelParamPointers) -> Result<()> {
        self.state.allow(Op::Update)?;
        check_dims(launch.grid, launch.block)?;
        let record = self.node(node)?;
        if !matches!(record.params, Params::KernelByPointers(_)) {
            return Err(Error::invalid_argument(format!(
                "node {node} is a {} node, not a kernel node added with add_kernel_params",
                record.params.kind_name()
            )));
        }
        let raw = record.raw;
        let params = Params::KernelByPointers(self.by_pointers_references(launch.function));
        if self.exec.is_none() {
            self.rt.kernel_node_set_by_pointers(raw, launch)?;
            self.replace_params(node, params);
            return Ok(());
        }
        let bytes = budget::push_bytes(&params, self.budget.node_charge());
        let exec = self.exec_for_push(bytes);
        self.rt.exec_kernel_node_set_by_pointers(exec, raw, launch)?;
        self.pushed(1, bytes);
        self.replace_params(node, params);
        let template = self.rt.kernel_node_set_by_pointers(raw, launch);
        if let Err(e) = &template {
            log::warn!("node {node}: the executable graph has the new kernelParams but its template does not: {e}");
        }
        self.nodes[node as usize].template_lags = template.is_err();
        Ok(())
    }

    pub fn update_memcpy(&mut self, node: NodeId, copy: MemcpyParams) -> Result<()> {
        self.rerecord(node, memcpy_params(copy)?)
    }

    pub fn update_memset(&mut self, node: NodeId, set: Memset) -> Result<()> {
        self.rerecord(node, memset_params(set)?)
    }

    /// Gives a child node of a primary command buffer `child`'s graph (same topology) in the
    /// executable graph; the node's references become `child`'s.
    pub fn update_child(&mut self, node: NodeId, child: &mut CmdBuf) -> Result<()> {
        self.state.allow(Op::Update)?;
        self.node_of_kind(node, "child")?;
        let graph = child.graph_to_embed()?;
        let refs = child.references();
        let bytes = child.graph_push_bytes();
        let kept = child.kept_graphs();
        self.set_child(node, graph, refs, bytes, |cb| cb.clone_all(kept))
    }

    /// Gives a child node of a primary command buffer the raw graph `graph` (same topology) in
    /// the executable graph; the node's references become unknown (or opaque), as for
    /// [`Self::add_child_graph`].
    pub fn update_child_graph(&mut self, node: NodeId, graph: Graph) -> Result<()> {
        let bytes = budget::listed_graph_bytes(self.rt, graph, self.budget.node_charge());
        let refs = self.foreign_references(graph);
        self.set_child(node, graph, refs, bytes, |cb| published::clone_kept(cb.rt, graph))
    }

    /// `bytes`: the estimated staging bytes of pushing `graph` (see `budget.rs`); `keeps`: clones
    /// of the graphs `graph`'s nodes may read from besides its own, kept with the node.
    fn set_child(
        &mut self,
        node: NodeId,
        graph: Graph,
        refs: References,
        bytes: u64,
        keeps: impl FnOnce(&Self) -> Result<Vec<Graph>>,
    ) -> Result<()> {
        self.state.allow(Op::Update)?;
        let raw = self.node_of_kind(node, "child")?.raw;
        if self.exec.is_none() {
            return Err(Error::unsupported(
                "a child node of a nested command buffer cannot be updated in place (the runtime has no template setter for child graphs); re-record the nested command buffer",
            ));
        }
        // The template cannot take the new graph; a clone of it is what a re-instantiation gives
        // the next executable graph, and it carries the graph's user objects for as long as an
        // executable graph may read them (the caller may destroy `graph` after this call).
        let clone = self.rt.graph_clone(graph).map_err(|e| e.context("cloning the child graph"))?;
        let keeps = match keeps(self) {
            Ok(keeps) => keeps,
            Err(e) => {
                self.destroy_all(vec![clone]);
                return Err(e);
            }
        };
        let exec = self.exec_for_push(bytes);
        if let Err(e) = self.rt.exec_child_node_set(exec, raw, graph) {
            self.destroy_all(keeps);
            self.destroy_all(vec![clone]);
            return Err(e);
        }
        self.pushed(1, bytes);
        self.detach_pins(node);
        // What this replaces waits for the launches that may use it.
        self.replace_kept(node, keeps, Some(clone));
        let record = &mut self.nodes[node as usize];
        record.params = Params::Child(refs);
        record.template_lags = true;
        self.rare.get_mut(node).child_bytes = bytes;
        self.attach_sites(node);
        Ok(())
    }

    /// How many patch sites fall in each allocation of the table, in table order.
    pub fn sites_per_allocation(&mut self) -> Vec<usize> {
        (0..self.allocs.entries().len() as u32).map(|a| self.patches.of_allocation(a).len()).collect()
    }

    /// Starts capturing `stream` (thread-local mode); the captured graph replaces this command
    /// buffer's graph at [`Self::capture_end`].
    pub fn capture_begin(&mut self, stream: Stream) -> Result<()> {
        self.state.allow(Op::CaptureBegin)?;
        if !self.nodes.is_empty() || self.captured {
            return Err(Error::invalid_state("capture needs a command buffer with no nodes yet"));
        }
        self.rt.begin_capture(stream, CaptureMode::ThreadLocal)?;
        self.counters.record(Event::Capture);
        self.state = State::Capturing(stream, state::this_thread());
        Ok(())
    }

    /// Ends the capture. When the runtime fails to, the capture is kept while the stream may
    /// still be capturing, so that `capture_end` again or the drop can end it; the error says
    /// which.
    pub fn capture_end(&mut self) -> Result<()> {
        self.state.allow(Op::CaptureEnd)?;
        let State::Capturing(stream, began) = self.state else { unreachable!("checked by allow") };
        if began != state::this_thread() {
            return Err(Error::invalid_state(format!(
                "capture_end on another thread than the one that began the capture: {OTHER_THREADS_CAPTURE}"
            )));
        }
        let captured = match self.rt.end_capture(stream) {
            Ok(g) => g,
            Err(e) => {
                let left = match runtime::capture_after_failed_end(self.rt, stream) {
                    CaptureAfterFailedEnd::Ended => {
                        self.state = State::Recording;
                        String::from(
                            "the runtime ended the capture anyway: the stream is usable, nothing was captured, and the command buffer is recording again",
                        )
                    }
                    CaptureAfterFailedEnd::StillCapturing => {
                        String::from("the stream is still capturing: call capture_end again, or free the command buffer, to end it")
                    }
                    CaptureAfterFailedEnd::Unknown(why) => format!(
                        "whether the stream is still capturing is unknown ({why}): the capture is kept, so capture_end again or freeing the command buffer tries to end it"
                    ),
                };
                return Err(Error::new(e.kind, format!("{e}; {left}")));
            }
        };
        self.state = State::Recording;
        if let Err(e) = self.rt.graph_destroy(self.graph) {
            log::warn!("destroying the graph replaced by a capture: {e}; trying again when the command buffer is freed");
            self.orphans.push(self.graph);
        }
        self.graph = captured;
        self.captured = true;
        Ok(())
    }

    /// Ends recording or an update. The first finalize gives an empty graph one empty node and
    /// instantiates a primary command buffer; later ones push what an earlier failed update
    /// left behind and never re-instantiate.
    pub fn finalize(&mut self) -> Result<()> {
        graveyard::reap();
        self.state.allow(Op::Finalize)?;
        if self.state == State::Recording {
            let empty = if self.captured { self.rt.graph_nodes(self.graph)?.is_empty() } else { self.nodes.is_empty() };
            if empty {
                self.record(&[], Params::Empty)?;
            }
            if self.kind == Kind::Primary {
                self.exec = Some(self.rt.instantiate(self.graph)?);
                self.exec_since = self.launches.now();
                self.counters.record(Event::Instantiation);
                self.note_exec_classes();
            }
        } else {
            self.push_unpushed()?;
        }
        // Recording is over (a first one or a re-record) and updates add no node: the records
        // and sites keep no room to grow, and the address lookup's index, which a re-record
        // rebuilt, waits for the next one. Nothing to give back costs a comparison each.
        self.nodes.shrink_to_fit();
        self.blob_bases.shrink();
        self.allocs.drop_index();
        self.patches.group();
        self.scratch.prepare(self.nodes.len(), self.allocs.entries().len());
        if self.exec.is_some() {
            // A primary's updates list each touched node's template here once (refreshed only when
            // the template is asked for), so room for all of them is made now, not by updates.
            update::reserve_written(&mut self.template_dirty, self.nodes.len(), 0);
        }
        self.state = State::Finalized;
        Ok(())
    }

    pub fn begin_update(&mut self) -> Result<()> {
        self.state.allow(Op::BeginUpdate)?;
        self.state = State::Updating;
        Ok(())
    }

    pub fn launch(&mut self, stream: Stream) -> Result<()> {
        graveyard::reap();
        self.state.allow(Op::Launch)?;
        let exec = self
            .exec
            .ok_or_else(|| Error::invalid_state("a nested command buffer cannot be launched; add it to a primary one as a child"))?;
        if !self.unpushed.is_empty() {
            return Err(Error::invalid_state(format!(
                "{} node(s) hold stale parameters after a failed address update (needs_rerecord); re-record them (begin_update, update the nodes, finalize) before launching",
                self.unpushed.len()
            )));
        }
        // CUDA refuses a launch into a capturing stream and invalidates the capture; ROCm runs the
        // executable graph's work on the stream, outside the capture, where nothing follows it.
        let capturing = self.rt.stream_is_capturing(stream);
        if let Ok(true) = capturing {
            return Err(Error::invalid_state(
                "the stream is capturing: a command buffer is launched on a stream that is not (CUDA refuses such a launch and ROCm would run it outside the capture)",
            ));
        }
        if self.launches.any_waiting() {
            self.launches.reap(self.rt, &mut self.counters);
        }
        if let Err(e) = self.rt.graph_launch(exec, stream) {
            // The runtime may have queued part of the work before it failed (clr runs a graph as
            // several commands).
            self.launches.launch_failed();
            return Err(e);
        }
        self.launches.launched(self.rt, stream, capturing.is_ok());
        Ok(())
    }

    /// The caller's promise that every launch of this command buffer so far has finished (it
    /// synchronized each stream): what waits for those launches, what is kept for one the
    /// library could not follow included, is destroyed now.
    pub fn launches_done(&mut self) {
        self.launches.all_finished(self.rt, &mut self.counters);
    }

    /// Refuses a read (graph, executable graph, counts) while a capture is in progress.
    pub fn allow_read(&self) -> Result<()> {
        self.state.allow(Op::Read)
    }

    /// The template graph (owned by the command buffer), brought up to date first. Not during a
    /// capture, whose end destroys it.
    pub fn graph(&mut self) -> Result<Graph> {
        self.allow_read()?;
        self.refresh_template()?;
        // Whoever gets the template as a raw graph may embed or flatten it: what this command
        // buffer keeps for its nodes goes with it, now and whenever that changes.
        if !self.published {
            published::publish(self.graph, self.kept_graphs(), self.memcpy_set);
            self.published = true;
        }
        Ok(self.graph)
    }

    /// Brings a primary's template up to date from the library's own parameters (the template's
    /// are never read back), when updates went to the executable graph only.
    fn refresh_template(&mut self) -> Result<()> {
        while let Some(&node) = self.template_dirty.last() {
            let record = &mut self.nodes[node as usize];
            record.params.push(self.rt, None, record.raw)?;
            record.template_dirty = false;
            let memcpy = matches!(record.params, Params::Memcpy(_));
            self.note_memcpy_set(memcpy);
            self.template_dirty.pop();
        }
        Ok(())
    }

    /// The executable graph to push `bytes` more to: a new one when the budget would pass with
    /// them and re-instantiating works, else the current one. Primary command buffers only.
    fn exec_for_push(&mut self, bytes: u64) -> Exec {
        if self.budget.exceeded_by(bytes) {
            self.reinstantiate_for_budget();
        }
        self.exec.expect("only a primary command buffer pushes to an executable graph")
    }

    /// Counts `nodes` pushes to the executable graph and charges their `bytes` to its budget.
    fn pushed(&mut self, nodes: u64, bytes: u64) {
        self.counters.record(Event::ExecPushes { nodes, bytes });
        self.budget.charge(bytes);
    }

    /// Replaces the executable graph with a new instantiation of the template, brought up to
    /// date first; the old one is retired once its launches finish. Returns whether it did: it
    /// does not when a node's template lags behind the executable with no clone to replay
    /// (counted and logged as blocked) or the runtime fails (counted and logged); updates then
    /// keep going to the old executable.
    fn reinstantiate_for_budget(&mut self) -> bool {
        // The host never waits for a launch here: with as many old executables as are kept
        // still running, or kept for launches no event follows, the update goes to the live one
        // in place.
        if let Some(why) = self.reinstantiation_blocked().or_else(|| self.kept_execs_block_budget()) {
            self.counters.record(Event::Fallback(Fallback::ReinstantiateBlocked));
            self.budget.note_blocked(&why);
            return false;
        }
        let spent = self.budget.spent();
        match self.reinstantiate() {
            Ok(()) => {
                log::info!(
                    "re-instantiated a command buffer of {} node(s) after an estimated {spent} bytes of updates (budget {}); the old executable graph is destroyed once its launches finish",
                    self.nodes.len(),
                    self.budget.limit()
                );
                true
            }
            Err(e) => {
                log::warn!("re-instantiating for the update budget failed: {e}; updates keep going to the old executable graph");
                self.counters.record(Event::Fallback(Fallback::ReinstantiateFailed));
                false
            }
        }
    }

    /// Why the budget should not re-instantiate, if it should not: as many replaced executables
    /// as are capped are kept for launches the library could not follow, and one more would be
    /// kept until `rcb_cmdbuf_launches_done` (`budget::MAX_KEPT_EXECS`). A re-instantiation
    /// that a memcpy node needs is not held back by them: without it the update is refused.
    fn kept_execs_block_budget(&self) -> Option<String> {
        let kept = self.launches.kept_execs();
        (kept >= budget::MAX_KEPT_EXECS).then(|| {
            format!("{kept} old executable graph(s) are kept for launches the library could not follow, until rcb_cmdbuf_launches_done")
        })
    }

    fn reinstantiate(&mut self) -> Result<()> {
        let old = self.exec.expect("only a primary command buffer is re-instantiated");
        self.refresh_template()?;
        let new = self.rt.instantiate(self.graph)?;
        let (mut nodes, mut bytes) = (0, 0);
        for (node, rare) in self.rare.iter() {
            if let Some(clone) = rare.child_clone {
                if let Err(e) = self.rt.exec_child_node_set(new, self.nodes[node as usize].raw, clone) {
                    if let Err(e) = self.rt.exec_destroy(new) {
                        log::warn!("destroying a half-made executable graph: {e}; it is leaked");
                    }
                    return Err(e.context("giving the new executable graph a child node's clone"));
                }
                nodes += 1;
                bytes += rare.child_bytes;
            }
        }
        self.exec = Some(new);
        self.note_exec_classes();
        self.counters.record(Event::Instantiation);
        self.counters.record(Event::Reinstantiation);
        self.budget.restart();
        self.launches.retire_exec(self.rt, old, self.exec_since, &mut self.counters);
        self.exec_since = self.launches.now();
        if nodes > 0 {
            self.pushed(nodes, bytes);
        }
        // The new executable graph holds every node's current parameters.
        self.unpushed.clear();
        self.nodes.iter_mut().for_each(|r| r.unpushed = false);
        Ok(())
    }

    /// The template to clone when this command buffer becomes a child of another.
    pub fn graph_to_embed(&mut self) -> Result<Graph> {
        self.state.allow(Op::Embed)?;
        self.graph()
    }

    /// The executable graph of a primary command buffer that has been finalized.
    pub fn exec(&self) -> Result<Exec> {
        self.allow_read()?;
        self.exec.ok_or_else(|| match self.kind {
            Kind::Nested => Error::invalid_state("a nested command buffer has no executable graph"),
            Kind::Primary => Error::invalid_state("the command buffer has not been finalized yet"),
        })
    }

    fn record(&mut self, deps: &[NodeId], params: Params) -> Result<NodeId> {
        self.state.allow(Op::Add)?;
        let raw_deps = self.raw_deps(deps)?;
        let raw = params.add_to(self.rt, self.graph, &raw_deps)?;
        Ok(self.push_record(raw, params))
    }

    fn push_record(&mut self, raw: Node, params: Params) -> NodeId {
        let id = self.nodes.len() as NodeId;
        self.nodes.push(NodeRecord::new(raw, params));
        self.attach_sites(id);
        id
    }

    /// Replaces a node's parameters: pushed first, so a failure leaves everything as it was. A
    /// memcpy node of a primary whose executable copy cannot take them in place (see
    /// `memcpy_class.rs`) gets them through a new executable graph instead.
    fn rerecord(&mut self, node: NodeId, params: Params) -> Result<()> {
        self.try_rerecord(node, params).map_err(|failed| failed.0)
    }

    /// [`Self::rerecord`], giving `params` back with the error. A memcpy node of a primary whose
    /// executable copy cannot take them in place (see `memcpy_class.rs`) gets them through a new
    /// executable graph instead.
    fn try_rerecord(&mut self, node: NodeId, params: Params) -> std::result::Result<(), Box<(Error, Params)>> {
        let raw = match self.state.allow(Op::Update).and_then(|()| self.node_of_kind(node, params.kind_name())) {
            Ok(record) => record.raw,
            Err(e) => return Err(Box::new((e, params))),
        };
        if self.exec.is_some()
            && let Params::Memcpy(copy) = &params
            && let Some(why) = self.memcpy_blocked(node, copy)
        {
            return self.rerecord_memcpy_by_reinstantiating(node, params, why);
        }
        let bytes = budget::push_bytes(&params, self.budget.node_charge());
        let exec = self.exec.map(|_| self.exec_for_push(bytes));
        if let Err(e) = params.push(self.rt, exec, raw) {
            if exec.is_some() && matches!(params, Params::Memcpy(_)) {
                let why = format!("the executable graph's memcpy setter refused node {node}'s new operands ({e})");
                return self.rerecord_memcpy_by_reinstantiating(node, params, why);
            }
            return Err(Box::new((e, params)));
        }
        if exec.is_some() {
            self.pushed(1, bytes);
            self.nodes[node as usize].template_lags_behind(node, &mut self.template_dirty);
        } else {
            self.note_memcpy_set(matches!(params, Params::Memcpy(_)));
        }
        self.replace_params(node, params);
        Ok(())
    }

    /// Gives a node's record new parameters that the runtime holds already, with their sites
    /// and pins.
    fn replace_params(&mut self, node: NodeId, params: Params) {
        self.detach_pins(node);
        let record = &mut self.nodes[node as usize];
        record.params = params;
        record.unpushed = false;
        self.patches.remove_node(node);
        self.attach_sites(node);
    }

    /// Notes that the executable graph holds older parameters of `node` than its record, so that
    /// launches are refused until they reach it. (A node listed twice is pushed once: the list
    /// is read against each record's flag.)
    fn mark_unpushed(&mut self, node: NodeId) {
        self.nodes[node as usize].unpushed = true;
        self.unpushed.push(node);
    }

    /// Gives `node` parameters the runtime does not hold yet (their push failed or was not
    /// tried): pushed by the next finalize or address update, launches refused until then.
    fn replace_unpushed(&mut self, node: NodeId, params: Params) {
        if self.exec.is_some() {
            self.nodes[node as usize].template_lags_behind(node, &mut self.template_dirty);
        }
        self.detach_pins(node);
        let record = &mut self.nodes[node as usize];
        record.params = params;
        self.patches.remove_node(node);
        if !std::mem::replace(&mut record.unpushed, true) {
            self.unpushed.push(node);
        }
        self.attach_sites(node);
    }

    /// Makes the node's addresses patch sites, or pins what an opaque node may reference. A
    /// pointer named by allocation is a site of that allocation while the table agrees with the
    /// name (the allocation exists and holds the address at that offset); any other address, a
    /// named one the table no longer agrees with included, is a site of every allocation
    /// containing it (see `allocations.rs`), and pins them all.
    fn attach_sites(&mut self, node: NodeId) {
        let record = &mut self.nodes[node as usize];
        let base = match &mut record.params {
            Params::Kernel(k) => k.blob.base(),
            _ => std::ptr::null_mut(),
        };
        self.blob_bases.set(node, base);
        let (allocs, patches) = (&mut self.allocs, &mut self.patches);
        record.params.for_each_slot(|slot, address, named| {
            let agrees = |(alloc, offset): (u32, u64)| {
                allocs.entries().get(alloc as usize).is_some_and(|a| offset <= a.size && a.base + offset == address)
            };
            match named.filter(|&n| agrees(n)) {
                Some((alloc, _)) => patches.add(node, slot, alloc, &[]),
                None => {
                    // A kernel's pointer may be an end pointer; a copy's or memset's operand is
                    // an address it reads or writes (see `allocations.rs`).
                    let reach = match slot {
                        Slot::KernelArg(_) => Reach::ThroughEnd,
                        Slot::MemcpyDst | Slot::MemcpySrc | Slot::MemsetDst => Reach::Inside,
                    };
                    if let Some(c) = allocs.lookup(address, reach) {
                        patches.add(node, slot, c.allocation, &c.others);
                    }
                }
            }
        });
        match record.params.references() {
            None => {}
            Some(References::Unknown) => self.pins.add(None),
            Some(References::Opaque(what)) => self.pins.add_opaque(what),
            Some(References::Known(addresses)) => {
                let mut pins = Vec::new();
                for &a in addresses {
                    // Which addresses were kernel arguments is not kept: each one pins the
                    // allocations ending at it too (a pin costs at most a refusal).
                    if let Some(c) = allocs.lookup(a, Reach::ThroughEnd) {
                        pins.push(c.allocation);
                        pins.extend_from_slice(&c.others);
                    }
                }
                let pins = {
                    let rare = self.rare.get_mut(node);
                    rare.pins = pins;
                    &mut rare.pins
                };
                pins.sort_unstable();
                pins.dedup();
                self.pins.add(Some(pins));
            }
        }
    }

    /// Undoes the pins of [`Self::attach_sites`] before the node's parameters are replaced.
    fn detach_pins(&mut self, node: NodeId) {
        let record = &mut self.nodes[node as usize];
        match record.params.references() {
            None => {}
            Some(References::Unknown) => self.pins.remove(None),
            Some(References::Opaque(what)) => self.pins.remove_opaque(what),
            Some(References::Known(_)) => self.pins.remove(Some(self.rare.pins(node))),
        }
        self.rare.clear_pins(node);
    }

    fn raw_deps(&self, deps: &[NodeId]) -> Result<Vec<Node>> {
        if self.nodes.len() >= MAX_NODES {
            return Err(Error::invalid_argument(format!("the command buffer already holds the maximum of {MAX_NODES} nodes")));
        }
        deps.iter().map(|&d| self.node(d).map(|r| r.raw)).collect()
    }

    fn node(&self, node: NodeId) -> Result<&NodeRecord> {
        self.nodes.get(node as usize).ok_or_else(|| {
            Error::invalid_argument(format!("node {node} does not exist in this command buffer ({} nodes)", self.nodes.len()))
        })
    }

    fn node_of_kind(&self, node: NodeId, kind: &str) -> Result<&NodeRecord> {
        let record = self.node(node)?;
        if record.params.kind_name() != kind {
            return Err(Error::invalid_argument(format!("node {node} is a {} node, not a {kind} node", record.params.kind_name())));
        }
        Ok(record)
    }

    fn push_unpushed(&mut self) -> Result<()> {
        while let Some(&node) = self.unpushed.last() {
            if self.nodes[node as usize].unpushed {
                if self.exec.is_some()
                    && let Params::Memcpy(copy) = &self.nodes[node as usize].params
                    && let Some(why) = self.memcpy_blocked(node, copy)
                {
                    // The template and a new executable graph take every node left behind.
                    self.counters.record(Event::Fallback(Fallback::MemcpyNotInPlace));
                    if let Some(blocked) = self.reinstantiation_blocked() {
                        return Err(Error::unsupported(format!(
                            "{why}, and the executable graph cannot be re-instantiated now ({blocked}): re-record"
                        )));
                    }
                    // Nodes are left unpushed by an address update, which marked their
                    // templates for the refresh, or hold their parameters in the template.
                    return self.reinstantiate_for_memcpy(&why);
                }
                let bytes = budget::push_bytes(&self.nodes[node as usize].params, self.budget.node_charge());
                // A re-instantiation empties the list: the new executable graph has them all.
                let exec = self.exec.map(|_| self.exec_for_push(bytes));
                if self.unpushed.is_empty() {
                    break;
                }
                let record = &mut self.nodes[node as usize];
                if let Err(e) = record.params.push(self.rt, exec, record.raw) {
                    // A memcpy setter that refuses the operands: a new executable graph takes them.
                    if exec.is_some() && matches!(record.params, Params::Memcpy(_)) {
                        self.counters.record(Event::Fallback(Fallback::MemcpyNotInPlace));
                        if self.reinstantiation_blocked().is_none() {
                            return self.reinstantiate_for_memcpy(&format!(
                                "the executable graph's memcpy setter refused node {node}'s operands ({e})"
                            ));
                        }
                    }
                    return Err(e);
                }
                let record = &mut self.nodes[node as usize];
                record.unpushed = false;
                let memcpy = matches!(record.params, Params::Memcpy(_));
                if exec.is_some() {
                    self.pushed(1, bytes);
                } else {
                    self.note_memcpy_set(memcpy);
                }
            }
            self.unpushed.pop();
        }
        Ok(())
    }
}

impl CmdBuf {
    /// Gives back every runtime object and returns the calls that failed (their objects are
    /// leaked); the command buffer is gone either way.
    pub fn destroy(mut self) -> Leaks {
        self.release()
    }

    /// Ends a capture in progress, then destroys the executable graph and the graph, each
    /// attempted whatever failed before, and leaves nothing for a second call.
    fn release(&mut self) -> Leaks {
        let mut leaks = Leaks::default();
        if let State::Capturing(stream, began) = self.state {
            self.state = State::Recording;
            // On another thread the runtime is not asked (see `OTHER_THREADS_CAPTURE`).
            if began != state::this_thread() {
                leaks.push(Error::new(
                    ErrorKind::Runtime,
                    format!("freed on another thread than the one that began its capture; {OTHER_THREADS_CAPTURE_FREED}"),
                ));
            } else {
                match self.rt.end_capture(stream) {
                    Ok(g) => leaks.note(self.rt.graph_destroy(g)),
                    Err(e) => match runtime::capture_after_failed_end(self.rt, stream) {
                        CaptureAfterFailedEnd::Ended => {
                            log::warn!("ending the capture of a freed command buffer: {e}; the runtime ended it anyway")
                        }
                        CaptureAfterFailedEnd::StillCapturing => {
                            leaks.push(Error::new(e.kind, format!("{e}; the stream is still capturing: end its capture before using it")))
                        }
                        CaptureAfterFailedEnd::Unknown(why) => leaks.push(Error::new(
                            e.kind,
                            format!(
                                "{e}; whether the stream is still capturing is unknown ({why}): if it is, end its capture before using it"
                            ),
                        )),
                    },
                }
            }
        }
        if std::mem::take(&mut self.published) {
            published::withdraw(self.graph);
        }
        // What a launch may still use waits for it (`launches.rs`, `graveyard.rs`): the executable
        // graph, the child clones and kept graphs, and the template (its child nodes hold clones
        // that own user objects).
        let mut owned = Vec::new();
        if let Some(exec) = self.exec.take() {
            owned.push((Doomed::Exec(exec), self.exec_since));
        }
        for (_, rare) in self.rare.iter_mut() {
            if let Some(clone) = rare.child_clone.take() {
                owned.push((Doomed::Graph(clone), rare.graphs_since));
            }
        }
        for (node, graphs) in std::mem::take(&mut self.kept) {
            let since = self.rare.graphs_since(node);
            owned.extend(graphs.into_iter().map(|g| (Doomed::Graph(g), since)));
        }
        // A null graph marks it as already destroyed: runtimes never hand out a null one.
        let graph = std::mem::replace(&mut self.graph, Graph(std::ptr::null_mut()));
        if !graph.is_null() {
            owned.push((Doomed::Graph(graph), 0));
        }
        // (The empty tracking left in its place has nothing to give back at a second release.)
        std::mem::replace(&mut self.launches, Launches::new(0)).free(self.rt, owned, &mut self.counters, &mut leaks);
        // Never launched: the graphs a capture replaced.
        for orphan in std::mem::take(&mut self.orphans) {
            leaks.note(self.rt.graph_destroy(orphan));
        }
        graveyard::reap();
        leaks
    }
}

impl Drop for CmdBuf {
    fn drop(&mut self) {
        self.release().log("dropping a command buffer");
    }
}

fn check_dims(grid: [u32; 3], block: [u32; 3]) -> Result<()> {
    for (name, dims) in [("grid", grid), ("block", block)] {
        if let Some(i) = dims.iter().position(|&d| d == 0) {
            return Err(Error::invalid_argument(format!("launch {name}[{i}] is 0")));
        }
    }
    Ok(())
}

/// The parameters of `launch`; its arguments named by allocation take their address from `table`.
/// `opaque`: the references of an opaque kernel, whose arguments are never sites.
fn kernel_params(launch: &KernelLaunch<'_>, table: &[Allocation], opaque: Option<References>) -> Result<Params> {
    check_dims(launch.grid, launch.block)?;
    let packed = args::pack(launch.args, |index, offset| {
        let Some(a) = table.get(index as usize) else {
            return Err(Error::invalid_argument(format!(
                "it names allocation {index}, outside the table of {} allocation(s) (set the table first)",
                table.len()
            )));
        };
        if offset > a.size {
            return Err(Error::invalid_argument(format!("its offset {offset} is past the end of allocation {index} ({} bytes)", a.size)));
        }
        Ok(a.base + offset)
    })?;
    let blob = match opaque {
        Some(refs) => Blob::new(&packed.blob, &[], &[], Some(Box::new(refs))),
        None => Blob::new(&packed.blob, &packed.pointers, &packed.named, None),
    };
    Ok(Params::Kernel(KernelRecord {
        function: launch.function,
        grid: launch.grid,
        block: launch.block,
        shared_mem_bytes: launch.shared_mem_bytes,
        blob,
    }))
}

fn memcpy_params(copy: MemcpyParams) -> Result<Params> {
    if copy.bytes == 0 {
        return Err(Error::invalid_argument("memcpy of 0 bytes"));
    }
    Ok(Params::Memcpy(copy))
}

fn memset_params(set: Memset) -> Result<Params> {
    if !matches!(set.element_size, 1 | 2 | 4) {
        return Err(Error::invalid_argument(format!("memset element_size is {}; it must be 1, 2 or 4", set.element_size)));
    }
    if set.element_size < 4 && set.pattern >> (8 * set.element_size) != 0 {
        return Err(Error::invalid_argument(format!("memset pattern {:#x} does not fit in {} byte(s)", set.pattern, set.element_size)));
    }
    let width = usize::try_from(set.count).ok().filter(|&w| w > 0 && w.checked_mul(set.element_size as usize).is_some());
    let Some(width) = width else {
        return Err(Error::invalid_argument(format!("memset count {} is 0 or too large", set.count)));
    };
    Ok(Params::Memset(MemsetParams {
        dst: set.dst,
        value: set.pattern,
        element_size: set.element_size,
        width,
        height: 1,
        pitch: width * set.element_size as usize,
    }))
}

//! Flattening a child (another command buffer or a raw captured graph) into a command buffer:
//! its nodes are re-created one by one, so their addresses become patch sites of the parent.
//!
//! Two phases. The plan reads the whole child (nested child graphs included) into a scratch
//! list in topological order and decides whether every node can be re-created; only then are
//! nodes added. A node that cannot be re-created makes the whole child fall back to one cloned
//! child node, so the parent never holds half a child and never loses a dependency.
//!
//! Kernel nodes of a command buffer keep their argument layout and pointer offsets. Kernel nodes
//! of a raw graph have no known layout: every 8-byte-aligned word of their packed parameters is a
//! candidate site, and the words that hold an address inside an allocation become sites (a plain
//! value equal to such an address would be patched too; that is the price of not knowing the
//! layout).
//!
//! Event record and wait nodes are re-created with the same event, host nodes with the same
//! function and user data, stream memory-operation nodes with the same operations (their
//! addresses pin the allocations they lie in): each copy orders against other streams and graphs
//! as the original does, since every edge is kept. Memory allocation and free nodes, conditional
//! nodes and kinds the library does not know are refused, each with its own reason; where the
//! runtime does not allow such a graph in a child node either (CUDA: conditional, allocation and
//! free nodes), there is no fallback and the call fails with nothing added.
//!
//! A memcpy node of a raw graph is re-created from the runtime's report of its parameters only
//! where that report can be trusted (`Runtime::memcpy_read_back`): never on HIP before 7.2, which
//! does not fill a 1-D node's, nor after 7.2, not yet read; on HIP 7.2, which reports a node's
//! parameters as they were made, only at the top level of a graph whose memcpy nodes no command
//! buffer has changed (`CmdBuf::memcpy_set`, published with a template handed out). A nested
//! child graph is a clone, and a clone keeps the reports of the graph it was made from, which may
//! be a template changed since: nothing tells, so a memcpy node in one is not read there.
//! Otherwise the child falls back, and so it does for a report that is not a plain 1-D
//! device-to-device copy, the only copy the library re-creates.
//!
//! Nodes are added only once the whole child is planned; should the runtime fail to add one,
//! those added so far are destroyed again, so the parent is left as it was.
//!
//! A flattened node may read what its source graph owns and no parameter shows: a captured
//! graph holds user objects (NCCL attaches its persistent work buffers to the graph it was
//! captured into and frees them when that graph is destroyed), and no runtime lists them. A
//! clone of a graph carries references to all of them (ROCm's `Graph::clone` retains each one;
//! CUDA's is checked by the GPU test), so each group whose source may own any keeps a clone of
//! it (`CmdBuf::kept`) until the command buffer is freed; an update that gives the group another
//! source hands the old clone to `launches.rs`, which destroys it once the launches that may use
//! it have finished. A fallback child node holds a clone of its own.

use super::args;
use super::nodes::{Blob, KernelRecord, Params};
use super::opaque::{self, KernelList, References};
use super::state::Op;
use super::{CmdBuf, NodeId};
use crate::counters::{Event, Fallback};
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::{Edge, EdgeData, Graph, MemcpyReadBack, Node, NodeType, Runtime};
use std::collections::HashMap;

/// What to flatten.
pub enum Source<'a> {
    /// A finalized command buffer; its own nodes keep their exact argument layout.
    CmdBuf(&'a mut CmdBuf),
    /// A graph the library did not build (borrowed; the caller keeps owning it).
    Graph(Graph),
}

/// What [`CmdBuf::add_flattened_child`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlattenReport {
    /// `None`: flattened. `Some(reason)`: the child became one cloned child node.
    pub fallback: Option<String>,
    /// Nodes re-created in the parent (the join node excluded), or the child's top-level node
    /// count after a fallback.
    pub nodes: u32,
    /// Patch sites the flattened nodes added.
    pub sites: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dep {
    /// A node of the parent given by the caller.
    Parent(NodeId),
    /// An earlier entry of the plan.
    Planned(usize),
}

struct Planned {
    params: Params,
    deps: Vec<(Dep, EdgeData)>,
    /// The raw kernel node whose launch attributes the new node copies.
    attributes_from: Option<Node>,
}

/// Why a child cannot be flattened (becomes the fallback reason) and how it is counted.
struct Refusal {
    reason: String,
    counted_as: Fallback,
}

struct Planner<'a> {
    rt: &'a dyn Runtime,
    /// Parameters of the nodes the library recorded itself, by raw node.
    known: HashMap<Node, &'a Params>,
    /// The graph's memcpy nodes may have been changed by the library since they were made (see
    /// `CmdBuf::memcpy_set`).
    memcpy_set: bool,
    /// How many child nodes deep the graph being planned lies in the source.
    depth: u32,
    /// The kernels whose arguments are never sites (`RCB_OPAQUE_KERNELS`).
    opaque_kernels: &'a KernelList,
    plan: Vec<Planned>,
}

impl CmdBuf {
    /// Re-creates `source`'s nodes after `deps` and returns the node later commands depend on
    /// (the child's single exit node, or an empty join node after all of them) with a report.
    /// When a node cannot be flattened the child is added as one cloned child node instead
    /// (logged at warn, reason in the report).
    ///
    /// A runtime failure while the nodes are being added destroys the nodes added so far and
    /// returns the error, the command buffer as it was; should a destroy fail too, the nodes not
    /// destroyed stay (recorded, so they are patched like any other) and the error says so.
    pub fn add_flattened_child(&mut self, deps: &[NodeId], source: Source<'_>) -> Result<(NodeId, FlattenReport)> {
        self.state.allow(Op::Add)?;
        self.raw_deps(deps)?;
        let (graph, mut planner) = Planner::of(self.rt, self.opaque_kernels, &source)?;
        let incoming: Vec<(Dep, EdgeData)> = deps.iter().map(|&d| (Dep::Parent(d), EdgeData::default())).collect();
        match planner.graph(graph, &incoming)? {
            Ok(exits) => {
                let plan = planner.plan;
                let keeps = self.keeps_for(&source)?;
                let first = self.nodes.len() as NodeId;
                let failure = match self.add_plan(deps, plan, exits) {
                    Ok((group, report)) => {
                        self.keep(group, keeps);
                        return Ok((group, report));
                    }
                    Err(e) => e,
                };
                let added = self.nodes.len() as NodeId - first;
                match self.remove_nodes_from(first) {
                    Ok(()) => {
                        self.destroy_all(keeps);
                        Err(failure.context(format!(
                            "flattening stopped after adding {added} node(s), destroyed again: the command buffer is as it was"
                        )))
                    }
                    Err(e) => {
                        // The nodes left may read the source's objects too.
                        self.keep(first, keeps);
                        let left = self.nodes.len() as NodeId - first;
                        Err(failure.context(format!(
                            "flattening stopped after adding {added} node(s), and destroying them failed ({e}): {left} stay in the command buffer, which should be re-recorded"
                        )))
                    }
                }
            }
            Err(Refusal { reason, counted_as }) => {
                if let Some((kind, why)) = unembeddable(self.rt, graph)? {
                    self.counters.record(Event::Fallback(match kind {
                        NodeType::Conditional => Fallback::ConditionalNode,
                        NodeType::MemAlloc | NodeType::MemFree => Fallback::MemoryNode,
                        _ => counted_as,
                    }));
                    return Err(Error::unsupported(format!(
                        "the child graph can be neither flattened ({reason}) nor added as one child node, because it holds a {kind:?} node and {why}; nothing was added: record it another way"
                    )));
                }
                log::warn!("child graph not flattened, added as one child node instead: {reason}");
                self.counters.record(Event::Fallback(counted_as));
                let nodes = self.rt.graph_nodes(graph)?.len() as u32;
                // The fallback node follows the rules of any child node (see `opaque.rs`).
                let group = match source {
                    Source::CmdBuf(child) => self.add_child(deps, child)?,
                    Source::Graph(g) => self.add_child_graph(deps, g)?,
                };
                Ok((group, FlattenReport { fallback: Some(reason), nodes, sites: 0 }))
            }
        }
    }

    /// Gives the nodes that `group` (from [`Self::add_flattened_child`]) stands for the
    /// parameters of `source`, a child of the same shape: the same nodes in the same order, each
    /// of the same type. Each node is pushed as [`Self::update_kernel`] would push it and its
    /// sites replaced. A group that fell back to one child node gets the child's graph instead
    /// ([`Self::update_child`] / [`Self::update_child_graph`]), and the report says so.
    ///
    /// A `source` of another shape, or one that cannot be flattened, is refused before anything
    /// changes. A runtime failure part-way leaves every node of the group with the new source's
    /// parameters, those from the failed one on unpushed (the next finalize or address update
    /// pushes them; launches are refused until then), so that the group keeps one source's
    /// clones, never two.
    pub fn update_flattened_child(&mut self, group: NodeId, source: Source<'_>) -> Result<FlattenReport> {
        self.state.allow(Op::Update)?;
        let Some(range) = self.flattened.get(&group).cloned() else {
            self.node_of_kind(group, "child")
                .map_err(|e| e.context(format!("node {group} is neither a group from add_flattened_child nor its fallback child node")))?;
            let reason = String::from("the child was added as one child node when it was flattened");
            match source {
                Source::CmdBuf(child) => self.update_child(group, child)?,
                Source::Graph(g) => self.update_child_graph(group, g)?,
            }
            return Ok(FlattenReport { fallback: Some(reason), nodes: 1, sites: 0 });
        };
        let (graph, mut planner) = Planner::of(self.rt, self.opaque_kernels, &source)?;
        if let Err(Refusal { reason, .. }) = planner.graph(graph, &[])? {
            return Err(Error::unsupported(format!(
                "the new child cannot be flattened ({reason}), the one node {group} stands for was: re-record"
            )));
        }
        let plan = planner.plan;
        if plan.len() != range.len() {
            return Err(Error::invalid_argument(format!(
                "the new child has {} node(s) to flatten, the one node {group} stands for had {}: another shape, re-record",
                plan.len(),
                range.len()
            )));
        }
        for (k, entry) in plan.iter().enumerate() {
            let had = &self.nodes[range.start as usize + k].params;
            if entry.params.kind_name() != had.kind_name() {
                return Err(Error::invalid_argument(format!(
                    "node {k} of the new child is a {} node where the flattened one had a {} node: another shape, re-record",
                    entry.params.kind_name(),
                    had.kind_name()
                )));
            }
            if fixed(&entry.params) && !same_fixed(&entry.params, had) {
                return Err(Error::unsupported(format!(
                    "node {k} of the new child is a {} node with other parameters (event, function, user data or operations) than the flattened one had, which the library does not change in place: re-record",
                    had.kind_name()
                )));
            }
        }
        let keeps = self.keeps_for(&source)?;
        let mut sites = 0;
        let mut failed = None;
        for (k, entry) in plan.into_iter().enumerate() {
            let node = range.start + k as NodeId;
            if matches!(entry.params, Params::Empty) || fixed(&entry.params) {
                continue;
            }
            let added_before = self.patches.added();
            match failed {
                // After a failed push the rest are recorded unpushed too, so that every node
                // holds the new source's parameters and nothing reads the old source again.
                Some(_) => self.replace_unpushed(node, entry.params),
                None => {
                    if let Err(failed_push) = self.try_rerecord(node, entry.params) {
                        let (e, params) = *failed_push;
                        self.replace_unpushed(node, params);
                        failed = Some((k, e));
                    }
                }
            }
            sites += (self.patches.added() - added_before) as u32;
        }
        // The old source waits for the launches made so far; no later launch reads it: the
        // executable graph holds it only in nodes still unpushed, which refuse launches.
        self.replace_kept(group, keeps, None);
        if let Some((k, e)) = failed {
            return Err(e.context(format!(
                "updating flattened node {k} of {}: it and the ones after it have the new parameters but the runtime does not; finalize pushes them again, and launches are refused until a push succeeds",
                range.len()
            )));
        }
        Ok(FlattenReport { fallback: None, nodes: range.len() as u32, sites })
    }

    fn add_plan(&mut self, deps: &[NodeId], plan: Vec<Planned>, exits: Vec<usize>) -> Result<(NodeId, FlattenReport)> {
        let sites_before = self.patches.added();
        let first = self.nodes.len() as NodeId;
        let mut data_edges = Vec::new();
        for (k, entry) in plan.into_iter().enumerate() {
            self.add_planned(first, entry, &mut data_edges).map_err(|e| e.context(format!("re-creating node {k} of the child")))?;
        }
        let count = self.nodes.len() as NodeId - first;
        if !data_edges.is_empty() {
            self.rt.add_edges(self.graph, &data_edges).map_err(|e| e.context("re-creating edges that carry edge data"))?;
        }
        let group = match exits.as_slice() {
            [single] => first + *single as NodeId,
            _ => {
                let join: Vec<NodeId> = if exits.is_empty() { deps.to_vec() } else { exits.iter().map(|&e| first + e as NodeId).collect() };
                self.add_empty(&join)?
            }
        };
        self.flattened.insert(group, first..first + count);
        Ok((group, FlattenReport { fallback: None, nodes: count, sites: (self.patches.added() - sites_before) as u32 }))
    }

    fn add_planned(&mut self, first: NodeId, entry: Planned, data_edges: &mut Vec<Edge>) -> Result<()> {
        let raw_of = |nodes: &[super::nodes::NodeRecord], dep: Dep| match dep {
            Dep::Parent(id) => nodes[id as usize].raw,
            Dep::Planned(i) => nodes[(first as usize) + i].raw,
        };
        let plain: Vec<Node> =
            entry.deps.iter().filter(|(_, data)| *data == EdgeData::default()).map(|&(d, _)| raw_of(&self.nodes, d)).collect();
        let raw = entry.params.add_to(self.rt, self.graph, &plain)?;
        for &(d, data) in entry.deps.iter().filter(|(_, data)| *data != EdgeData::default()) {
            data_edges.push(Edge { from: raw_of(&self.nodes, d), to: raw, data });
        }
        // Recorded before anything else can fail, so that a failure destroys it with the rest.
        self.push_record(raw, entry.params);
        match entry.attributes_from {
            Some(src) => self.rt.copy_kernel_node_attributes(raw, src),
            None => Ok(()),
        }
    }
}

impl Planner<'_> {
    /// Plans `graph`'s nodes after `incoming` (given to its root nodes) and returns its exit
    /// entries (those nothing inside the graph waits for). The outer `Result` is a runtime
    /// failure to list the graph, the inner one a refusal to flatten.
    fn graph(&mut self, graph: Graph, incoming: &[(Dep, EdgeData)]) -> Result<Result<Vec<usize>, Refusal>> {
        let nodes = self.rt.graph_nodes(graph).map_err(|e| e.context("listing the child graph's nodes"))?;
        let edges = self.rt.graph_edges(graph).map_err(|e| e.context("listing the child graph's edges"))?;
        let index: HashMap<Node, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let mut preds: Vec<Vec<(usize, EdgeData)>> = vec![Vec::new(); nodes.len()];
        let mut succs: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for e in &edges {
            let (Some(&from), Some(&to)) = (index.get(&e.from), index.get(&e.to)) else {
                return Err(Error::new(ErrorKind::Runtime, "the child graph lists an edge between nodes it does not hold"));
            };
            preds[to].push((from, e.data));
            succs[from].push(to);
        }
        let Some(order) = topological_order(&preds, &succs) else {
            return Err(Error::new(ErrorKind::Runtime, "the child graph has a cycle"));
        };
        // The plan entries that stand for each node: itself, or a nested graph's exits.
        let mut exits_of: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for i in order {
            let mut deps: Vec<(Dep, EdgeData)> = if preds[i].is_empty() {
                incoming.to_vec()
            } else {
                preds[i].iter().flat_map(|&(p, data)| exits_of[p].iter().map(move |&e| (Dep::Planned(e), data))).collect()
            };
            dedup(&mut deps);
            match self.node(nodes[i], deps)? {
                Ok(exits) => exits_of[i] = exits,
                Err(refusal) => return Ok(Err(refusal)),
            }
        }
        // Each plan entry stands for one node, so exits never repeat.
        Ok(Ok((0..nodes.len()).filter(|&i| succs[i].is_empty()).flat_map(|i| exits_of[i].clone()).collect()))
    }

    fn node(&mut self, node: Node, deps: Vec<(Dep, EdgeData)>) -> Result<Result<Vec<usize>, Refusal>> {
        let refuse = |reason: String| Ok(Err(Refusal { reason, counted_as: Fallback::FlattenedAsChild }));
        if let Some(&params) = self.known.get(&node) {
            if let Params::KernelByPointers(_) = params {
                return refuse(String::from("a kernel node added with kernelParams: the library never saw its arguments"));
            }
            // The child's allocation indices mean nothing in the parent's table.
            let params = match params {
                Params::Kernel(k) => Params::Kernel(k.for_another_table()),
                other => other.clone(),
            };
            return Ok(Ok(vec![self.push(params, deps, None)]));
        }
        let kind = match self.rt.node_type(node) {
            Ok(kind) => kind,
            Err(e) => return refuse(format!("reading a node's type: {e}")),
        };
        let params = match kind {
            NodeType::Kernel => match self.rt.kernel_node_read(node) {
                Ok(k) => match k.args {
                    // Larger than any runtime takes: its offsets would not fit a site (`Slot`).
                    Ok(blob) if blob.len() > args::MAX_BLOB_BYTES => {
                        return refuse(format!(
                            "a kernel node's arguments take {} bytes, more than the {} a launch can",
                            blob.len(),
                            args::MAX_BLOB_BYTES
                        ));
                    }
                    Ok(blob) => {
                        // A collective's kernel reads addresses the library cannot see: none of
                        // its words is a site, and the node pins everything (`opaque.rs`).
                        let opaque = opaque::classify(self.rt, self.opaque_kernels, k.function, true);
                        let pointers: Vec<u32> = if opaque.is_some() { Vec::new() } else { args::aligned_words(0, blob.len()).collect() };
                        let record = KernelRecord {
                            function: k.function,
                            grid: k.grid,
                            block: k.block,
                            shared_mem_bytes: k.shared_mem_bytes,
                            blob: Blob::new(&blob, &pointers, &[], opaque.map(Box::new)),
                        };
                        return Ok(Ok(vec![self.push(Params::Kernel(record), deps, Some(node))]));
                    }
                    Err(reason) => return refuse(format!("a kernel node's arguments cannot be read: {reason}")),
                },
                Err(e) => return refuse(format!("reading a kernel node: {e}")),
            },
            NodeType::Memcpy => {
                let untrusted = match self.rt.memcpy_read_back() {
                    MemcpyReadBack::Reliable => None,
                    MemcpyReadBack::AsCreated(why) if self.memcpy_set => {
                        Some(format!("{why}, and the library changed this graph's memcpy nodes"))
                    }
                    MemcpyReadBack::AsCreated(why) if self.depth > 0 => Some(format!(
                        "{why}, and this node lies in a nested child graph: a clone, which keeps the reports of the graph it was made from, changed since or not"
                    )),
                    MemcpyReadBack::AsCreated(_) => None,
                    MemcpyReadBack::Never(why) => Some(why),
                };
                if let Some(why) = untrusted {
                    let reason = format!("a memcpy node's parameters cannot be read back: {why}");
                    return Ok(Err(Refusal { reason, counted_as: Fallback::MemcpyUnreadable }));
                }
                match self.rt.memcpy_node_read(node) {
                    Ok(c) => Params::Memcpy(c),
                    Err(e) => return refuse(format!("reading a memcpy node: {e}")),
                }
            }
            NodeType::Memset => match self.rt.memset_node_read(node) {
                Ok(s) => Params::Memset(s),
                Err(e) => return refuse(format!("reading a memset node: {e}")),
            },
            NodeType::Empty => Params::Empty,
            // Copies with the same event, function and user data, or operations, and the same
            // edges: the copy orders against other streams and graphs as the original does.
            NodeType::EventRecord => match self.rt.event_record_node_event(node) {
                Ok(e) => Params::EventRecord(e),
                Err(e) => return refuse(format!("reading an event record node: {e}")),
            },
            NodeType::EventWait => match self.rt.event_wait_node_event(node) {
                Ok(e) => Params::EventWait(e),
                Err(e) => return refuse(format!("reading an event wait node: {e}")),
            },
            NodeType::Host => match self.rt.host_node_read(node) {
                Ok(h) => Params::Host(h),
                Err(e) => return refuse(format!("reading a host node: {e}")),
            },
            NodeType::MemOp => match self.rt.mem_op_node_read(node) {
                Ok(ops) => match ops.addresses() {
                    // A wait on a word is another agent synchronizing with this graph (NCCL's
                    // copy-engine collectives wait on a window their peers write, then copy into
                    // buffers the peers also write): every allocation is pinned, not only the
                    // words the operations name.
                    Ok(_) => Params::MemOp(Box::new(ops), References::Unknown),
                    Err(op) => return refuse(format!("a memory-operation node holds operation {op}, which neither runtime documents")),
                },
                Err(e) => return refuse(format!("reading a memory-operation node: {e}")),
            },
            NodeType::MemAlloc | NodeType::MemFree => {
                let reason = format!(
                    "the child graph holds a memory {} node: a copy of an allocation node allocates at another address than the one the nodes after it hold, and a free node frees what such a node allocated",
                    if kind == NodeType::MemAlloc { "allocation" } else { "free" }
                );
                return Ok(Err(Refusal { reason, counted_as: Fallback::MemoryNode }));
            }
            NodeType::Conditional => {
                let reason = String::from(
                    "the child graph holds a conditional node: its body runs on a value that kernels set through a handle made for its own graph (cudaGraphConditionalHandleCreate), which no copy in another graph can be given",
                );
                return Ok(Err(Refusal { reason, counted_as: Fallback::ConditionalNode }));
            }
            NodeType::Child => {
                let inner = match self.rt.child_node_graph(node) {
                    Ok(g) => g,
                    Err(e) => return refuse(format!("reading a nested child node: {e}")),
                };
                self.depth += 1;
                let planned = self.graph(inner, &deps);
                self.depth -= 1;
                return match planned? {
                    // An empty nested graph still orders what comes before and after it.
                    Ok(exits) if exits.is_empty() => Ok(Ok(vec![self.push(Params::Empty, deps, None)])),
                    other => Ok(other),
                };
            }
            NodeType::Other(raw) => return refuse(format!("the child graph holds a node of type {raw}, which the library does not know")),
        };
        Ok(Ok(vec![self.push(params, deps, None)]))
    }

    fn push(&mut self, params: Params, deps: Vec<(Dep, EdgeData)>, attributes_from: Option<Node>) -> usize {
        self.plan.push(Planned { params, deps, attributes_from });
        self.plan.len() - 1
    }
}

impl<'a> Planner<'a> {
    /// The graph `source` holds, and a planner that knows the parameters of the nodes a
    /// command buffer recorded itself.
    fn of(rt: &'a dyn Runtime, opaque_kernels: &'a KernelList, source: &'a Source<'_>) -> Result<(Graph, Self)> {
        let (graph, known, memcpy_set) = match source {
            Source::CmdBuf(child) => {
                child.state.allow(Op::Embed).map_err(|e| e.context("child"))?;
                (child.graph, known_params(child), child.memcpy_set)
            }
            Source::Graph(g) => (*g, HashMap::new(), super::published::memcpy_set(*g)),
        };
        Ok((graph, Planner { rt, known, memcpy_set, depth: 0, opaque_kernels, plan: Vec::new() }))
    }
}

impl CmdBuf {
    /// Destroys the nodes from `first` on, newest first, and forgets them with their sites and
    /// pins; nodes the runtime fails to destroy stay, with those before them.
    fn remove_nodes_from(&mut self, first: NodeId) -> Result<()> {
        while let Some(last) = (self.nodes.len() as NodeId).checked_sub(1).filter(|&n| n >= first) {
            self.rt.node_destroy(self.nodes[last as usize].raw).map_err(|e| e.context(format!("destroying node {last}")))?;
            self.detach_pins(last);
            self.nodes.pop();
            self.rare.remove(last);
            self.blob_bases.truncate(self.nodes.len());
            self.patches.remove_node(last);
        }
        Ok(())
    }

    /// Clones of every graph whose objects the nodes flattened from `source` may read, and of
    /// the graphs kept beside a raw graph that another command buffer handed out as its template
    /// (see `published.rs`).
    fn keeps_for(&self, source: &Source<'_>) -> Result<Vec<Graph>> {
        let mut keeps = self.clone_all(may_own(source))?;
        if let Source::Graph(g) = source {
            match super::published::clone_kept(self.rt, *g) {
                Ok(more) => keeps.extend(more),
                Err(e) => {
                    self.destroy_all(keeps);
                    return Err(e);
                }
            }
        }
        Ok(keeps)
    }
}

/// The graphs whose objects the nodes flattened from `source` may read: a raw graph; a command
/// buffer's graph when it was captured or holds child nodes (whose clones carry the objects of
/// the graphs they were made from); and every graph the command buffer keeps itself.
fn may_own(source: &Source<'_>) -> Vec<Graph> {
    match source {
        Source::Graph(g) => vec![*g],
        Source::CmdBuf(child) => {
            let own = child.captured || child.nodes.iter().any(|r| matches!(r.params, Params::Child(_)));
            own.then_some(child.graph).into_iter().chain(child.kept_graphs()).collect()
        }
    }
}

/// Parameters of the nodes `child` recorded itself, by raw node. A child node's record holds no
/// graph: its contents are read back from the runtime and flattened like a raw graph's, so it is
/// left out, and so is everything of a captured graph.
fn known_params(child: &CmdBuf) -> HashMap<Node, &Params> {
    if child.captured {
        return HashMap::new();
    }
    child.nodes.iter().filter(|r| !matches!(r.params, Params::Child(_))).map(|r| (r.raw, &r.params)).collect()
}

/// Whether a flattened node's parameters are never changed in place (they are the same in the
/// new child, checked before anything changes).
fn fixed(params: &Params) -> bool {
    matches!(params, Params::EventRecord(_) | Params::EventWait(_) | Params::Host(_) | Params::MemOp(..))
}

fn same_fixed(a: &Params, b: &Params) -> bool {
    match (a, b) {
        (Params::EventRecord(x), Params::EventRecord(y)) | (Params::EventWait(x), Params::EventWait(y)) => x == y,
        (Params::Host(x), Params::Host(y)) => x == y,
        (Params::MemOp(x, _), Params::MemOp(y, _)) => x == y,
        _ => false,
    }
}

/// The first node kind of `graph` (nested child graphs included) that the runtime does not
/// allow in a child graph, with the runtime's reason: such a graph has no whole-child fallback.
fn unembeddable(rt: &dyn Runtime, graph: Graph) -> Result<Option<(NodeType, &'static str)>> {
    for node in rt.graph_nodes(graph).map_err(|e| e.context("listing the child graph's nodes"))? {
        let kind = rt.node_type(node).map_err(|e| e.context("reading a node's type"))?;
        if let Some(why) = rt.child_graph_refuses(kind) {
            return Ok(Some((kind, why)));
        }
        if kind == NodeType::Child {
            let inner = rt.child_node_graph(node).map_err(|e| e.context("reading a nested child node"))?;
            if let Some(found) = unembeddable(rt, inner)? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

fn dedup(deps: &mut Vec<(Dep, EdgeData)>) {
    let mut seen = Vec::with_capacity(deps.len());
    deps.retain(|d| {
        let new = !seen.contains(d);
        if new {
            seen.push(*d);
        }
        new
    });
}

/// Kahn's algorithm, taking ready nodes in index order; `None` when there is a cycle.
fn topological_order(preds: &[Vec<(usize, EdgeData)>], succs: &[Vec<usize>]) -> Option<Vec<usize>> {
    let mut waiting: Vec<usize> = preds.iter().map(Vec::len).collect();
    let mut ready: Vec<usize> = (0..preds.len()).rev().filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(preds.len());
    while let Some(i) = ready.pop() {
        order.push(i);
        for &s in succs[i].iter().rev() {
            waiting[s] -= 1;
            if waiting[s] == 0 {
                ready.push(s);
            }
        }
    }
    (order.len() == preds.len()).then_some(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Adjacency = (Vec<Vec<(usize, EdgeData)>>, Vec<Vec<usize>>);

    fn graph(n: usize, edges: &[(usize, usize)]) -> Adjacency {
        let mut preds = vec![Vec::new(); n];
        let mut succs = vec![Vec::new(); n];
        for &(a, b) in edges {
            preds[b].push((a, EdgeData::default()));
            succs[a].push(b);
        }
        (preds, succs)
    }

    #[test]
    fn topological_order_puts_every_node_after_its_predecessors() {
        // 3 → 1 → 0, 3 → 2 → 0, 4 alone.
        let (preds, succs) = graph(5, &[(3, 1), (3, 2), (1, 0), (2, 0)]);
        let order = topological_order(&preds, &succs).unwrap();
        assert_eq!(order.len(), 5);
        let pos = |n| order.iter().position(|&x| x == n).unwrap();
        assert!(pos(3) < pos(1) && pos(3) < pos(2) && pos(1) < pos(0) && pos(2) < pos(0));
    }

    #[test]
    fn a_cycle_has_no_order() {
        let (preds, succs) = graph(3, &[(0, 1), (1, 2), (2, 1)]);
        assert!(topological_order(&preds, &succs).is_none());
    }

    #[test]
    fn dedup_keeps_the_first_of_equal_dependencies() {
        let data = EdgeData([1, 0, 0, 0, 0, 0, 0, 0]);
        let mut deps = vec![
            (Dep::Planned(2), EdgeData::default()),
            (Dep::Parent(0), EdgeData::default()),
            (Dep::Planned(2), EdgeData::default()),
            (Dep::Planned(2), data),
        ];
        dedup(&mut deps);
        assert_eq!(deps, vec![(Dep::Planned(2), EdgeData::default()), (Dep::Parent(0), EdgeData::default()), (Dep::Planned(2), data)]);
    }
}

//! Executable graphs: deep snapshots of a template taken at instantiate time, run in
//! topological order on a stream. Exec setters copy-on-write so in-flight launches
//! keep the parameters they were launched with.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use crate::error::{HipResult, INVALID_HANDLE};
use crate::graph::{self, Graphs, Op};
use crate::memory;

#[derive(Clone)]
pub struct ExecNode {
    /// The template node this was instantiated from; exec setters address nodes by it.
    pub handle: usize,
    pub deps: Vec<usize>,
    pub op: Op,
    pub child: Option<ExecGraph>,
}

#[derive(Clone)]
pub struct ExecGraph {
    pub nodes: Vec<ExecNode>,
    order: Vec<usize>,
    /// Index in `nodes` by template handle, so that a setter finds its node in constant time
    /// (a GPU runtime's does); nodes inside child graphs are found through `children`.
    index: HashMap<usize, usize>,
    /// Indices in `nodes` of the child-graph nodes.
    children: Vec<usize>,
}

static EXECS: LazyLock<Mutex<HashMap<usize, Arc<ExecGraph>>>> = LazyLock::new(Default::default);

pub fn execs() -> MutexGuard<'static, HashMap<usize, Arc<ExecGraph>>> {
    EXECS.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn get(h: usize) -> HipResult<Arc<ExecGraph>> {
    execs().get(&h).cloned().ok_or(INVALID_HANDLE)
}

/// Launches of each executable graph submitted and not yet finished, and how many executable
/// graphs were destroyed while some were (`hipsimLiveCount("exec_destroyed_in_flight")`): on a
/// GPU that destroy is a use after free.
static IN_FLIGHT: LazyLock<Mutex<(HashMap<usize, usize>, u64)>> = LazyLock::new(Default::default);

fn in_flight() -> MutexGuard<'static, (HashMap<usize, usize>, u64)> {
    IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner())
}

/// One launch of an executable graph, from its submission until it is dropped: after it ran, or
/// with a job that was never queued.
pub struct InFlight(usize);

impl InFlight {
    pub fn new(h: usize) -> Self {
        *in_flight().0.entry(h).or_default() += 1;
        InFlight(h)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut f = in_flight();
        if let Some(n) = f.0.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                f.0.remove(&self.0);
            }
        }
    }
}

pub fn destroyed(h: usize) {
    let mut f = in_flight();
    if f.0.contains_key(&h) {
        f.1 += 1;
    }
}

pub fn destroyed_in_flight() -> u64 {
    in_flight().1
}

/// hipGraphExecUpdateResult values for a failed comparison.
pub const UPDATE_TOPOLOGY_CHANGED: i32 = 2;
pub const UPDATE_NODE_TYPE_CHANGED: i32 = 3;

impl ExecGraph {
    pub fn snapshot(gs: &Graphs, g: usize) -> HipResult<ExecGraph> {
        let order = gs.topo_order(g)?;
        let gr = gs.graph(g)?;
        let index: HashMap<usize, usize> = gr.nodes.iter().enumerate().map(|(i, n)| (n.handle, i)).collect();
        let mut nodes = Vec::with_capacity(gr.nodes.len());
        for n in &gr.nodes {
            let child = match n.op {
                Op::Child(c) => Some(ExecGraph::snapshot(gs, c)?),
                _ => None,
            };
            nodes.push(ExecNode { handle: n.handle, deps: n.deps.iter().map(|d| index[d]).collect(), op: n.op.clone(), child });
        }
        let children = (0..nodes.len()).filter(|&i| nodes[i].child.is_some()).collect();
        Ok(ExecGraph { nodes, order, index, children })
    }

    /// Whether the nodes form one chain, each after the one before: clr's `Graph::GetRunList`
    /// then finds a single parallel list (it starts another at each further root and at each
    /// further edge of a node), and an empty graph has none.
    pub fn is_chain(&self) -> bool {
        let mut dependents = vec![0u32; self.nodes.len()];
        let mut roots = 0;
        for n in &self.nodes {
            match n.deps.as_slice() {
                [] => roots += 1,
                [d] => dependents[*d] += 1,
                _ => return false,
            }
        }
        roots == 1 && dependents.iter().all(|&d| d <= 1)
    }

    /// Builds an embedded template equal to this snapshot (for capturing a graph launch).
    pub fn to_template(&self, gs: &mut Graphs) -> HipResult<usize> {
        let g = gs.create(true, true);
        let mut handles = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let op = match &n.child {
                Some(c) => Op::Child(c.to_template(gs)?),
                None => n.op.clone(),
            };
            handles.push(0);
            let deps: Vec<usize> = n.deps.iter().map(|&i| handles[i]).collect();
            *handles.last_mut().expect("pushed") = gs.add(g, &deps, op)?;
        }
        Ok(g)
    }

    /// What a launch fixes of its event nodes when it is issued, as a stream's record and wait
    /// are fixed when they are enqueued: each wait node's generation to wait for (the event's
    /// latest record then), then a generation reserved for each record node, by node handle.
    pub fn launch_events(&self) -> HashMap<usize, u64> {
        let mut fixed = HashMap::new();
        self.each_op(&mut |handle, op| {
            if let Op::EventWait(_, e) = op {
                fixed.insert(handle, e.latest());
            }
        });
        self.each_op(&mut |handle, op| {
            if let Op::EventRecord(_, e) = op {
                fixed.insert(handle, e.begin_record());
            }
        });
        fixed
    }

    /// Completes every record a launch reserved: a launch that stopped at a failing node
    /// leaves no waiter behind (the failure is the stream's sticky error).
    pub fn complete_records(&self, events: &HashMap<usize, u64>) {
        self.each_op(&mut |handle, op| {
            if let Op::EventRecord(_, e) = op {
                e.complete(events[&handle]);
            }
        });
    }

    fn each_op(&self, f: &mut impl FnMut(usize, &Op)) {
        for n in &self.nodes {
            match &n.child {
                Some(c) => c.each_op(f),
                None => f(n.handle, &n.op),
            }
        }
    }

    /// Runs the nodes in order; `events` is what [`Self::launch_events`] fixed at the launch.
    pub fn run(&self, dev: i32, events: &HashMap<usize, u64>) -> HipResult {
        for &i in &self.order {
            let n = &self.nodes[i];
            match (&n.child, &n.op) {
                (Some(c), _) => c.run(dev, events)?,
                (None, Op::EventRecord(_, e)) => e.complete(events[&n.handle]),
                (None, Op::EventWait(_, e)) => e.wait_for(events[&n.handle]),
                (None, op) => run_op(op, dev)?,
            }
        }
        Ok(())
    }

    pub fn find(&self, handle: usize) -> Option<&ExecNode> {
        if let Some(&i) = self.index.get(&handle) {
            return Some(&self.nodes[i]);
        }
        self.children.iter().find_map(|&i| self.nodes[i].child.as_ref().and_then(|c| c.find(handle)))
    }

    pub fn find_mut(&mut self, handle: usize) -> Option<&mut ExecNode> {
        if let Some(&i) = self.index.get(&handle) {
            return Some(&mut self.nodes[i]);
        }
        let at = self.children.iter().copied().find(|&i| self.nodes[i].child.as_ref().is_some_and(|c| c.find(handle).is_some()))?;
        self.nodes[at].child.as_mut().and_then(|c| c.find_mut(handle))
    }

    /// Same node count, types and edges (recursively); Err((result, offending node)).
    pub fn same_topology(&self, other: &ExecGraph) -> Result<(), (i32, usize)> {
        if self.nodes.len() != other.nodes.len() {
            return Err((UPDATE_TOPOLOGY_CHANGED, 0));
        }
        for (a, b) in self.nodes.iter().zip(&other.nodes) {
            if a.op.type_code() != b.op.type_code() {
                return Err((UPDATE_NODE_TYPE_CHANGED, b.handle));
            }
            if a.deps != b.deps {
                return Err((UPDATE_TOPOLOGY_CHANGED, b.handle));
            }
            if let (Some(ca), Some(cb)) = (&a.child, &b.child) {
                ca.same_topology(cb)?;
            }
        }
        Ok(())
    }

    /// Whether each 1-D memcpy node of `other`, a graph of the same topology, copies between the
    /// same kinds of memory (`class`) as this one's node, child graphs included.
    pub fn same_memcpy_classes(&self, other: &ExecGraph, class: &dyn Fn(u64) -> (&'static str, i32)) -> bool {
        self.nodes.iter().zip(&other.nodes).all(|(a, b)| match (&a.child, &b.child, &a.op, &b.op) {
            (Some(ca), Some(cb), ..) => ca.same_memcpy_classes(cb, class),
            (_, _, Op::Memcpy { dst: ad, src: asrc, .. }, Op::Memcpy { dst: bd, src: bsrc, .. }) => {
                class(*ad) == class(*bd) && class(*asrc) == class(*bsrc)
            }
            _ => true,
        })
    }

    /// Takes all parameters from a graph of the same topology, keeping this exec's node identities.
    pub fn take_params(&mut self, other: &ExecGraph) {
        for (a, b) in self.nodes.iter_mut().zip(&other.nodes) {
            a.op = b.op.clone();
            if let (Some(ca), Some(cb)) = (a.child.as_mut(), &b.child) {
                ca.take_params(cb);
            }
        }
    }
}

pub fn run_op(op: &Op, dev: i32) -> HipResult {
    match op {
        Op::Kernel(k) => k.kernel.run(dev, &k.args),
        Op::Memcpy { dst, src, count, kind } => memory::copy(dev, *dst, *src, *count, *kind),
        Op::Memcpy3D(c) => c.run(dev),
        Op::Memset(m) => memory::memset(dev, m.dst, m.value, m.elem, m.width, m.height, m.pitch),
        Op::Host { func, user } => {
            // SAFETY: the program supplied the function and its user data for exactly this call.
            unsafe { func(*user as *mut std::ffi::c_void) };
            Ok(())
        }
        Op::Child(_) | Op::Empty | Op::MemAlloc | Op::MemFree => Ok(()),
        // Run alone, an event node records or waits at once (a launched graph's go through
        // `ExecGraph::run`, with what its launch fixed).
        Op::EventRecord(_, e) => {
            e.record_now();
            Ok(())
        }
        Op::EventWait(_, e) => {
            e.wait_for(e.latest());
            Ok(())
        }
        Op::MemOps { ops, .. } => ops.iter().try_for_each(|op| run_mem_op(op, dev)),
    }
}

/// One stream memory operation: `[type, address, value, flags, ..]` (checked when the node was
/// made).
fn run_mem_op(op: &crate::abi::MemOpWords, dev: i32) -> HipResult {
    let [kind, addr, value, flags, ..] = *op;
    match kind as u32 as u64 {
        graph::MEM_OP_WRITE_VALUE_32 => memory::lock().write(dev, addr, &(value as u32).to_ne_bytes()),
        graph::MEM_OP_WRITE_VALUE_64 => memory::lock().write(dev, addr, &value.to_ne_bytes()),
        graph::MEM_OP_WAIT_VALUE_32 => memory::wait_value(dev, addr, 4, value & 0xFFFF_FFFF, flags as u32, u64::MAX),
        graph::MEM_OP_WAIT_VALUE_64 => memory::wait_value(dev, addr, 8, value, flags as u32, u64::MAX),
        _ => Ok(()),
    }
}

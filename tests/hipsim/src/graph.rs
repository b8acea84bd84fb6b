//! Graph templates: nodes, edges and the per-node parameter arrays handed out by GetParams.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use crate::abi::{AccessPolicyWindow, Dim3, KernelNodeParams, MemOpWords, MemsetParams};
use crate::error::{HipResult, INVALID_HANDLE, INVALID_VALUE};
use crate::event::Event;
use crate::handles::next_handle;
use crate::kernels::Kernel;
use crate::knobs;
use crate::user_object;

#[derive(Clone)]
pub struct KernelOp {
    pub kernel: &'static Kernel,
    pub func: usize,
    pub grid: Dim3,
    pub block: Dim3,
    pub shmem: u32,
    pub args: Vec<u8>,
    /// Added with `extra` (packed buffer) rather than `kernelParams`.
    pub extra_style: bool,
}

#[derive(Clone, Copy)]
pub struct MemsetOp {
    pub dst: u64,
    pub elem: u32,
    pub width: usize,
    pub height: usize,
    pub pitch: usize,
    pub value: u32,
}

impl MemsetOp {
    /// # Safety
    /// `p` is null or points at a readable `hipMemsetParams`.
    pub unsafe fn from_c(p: *const MemsetParams) -> HipResult<Self> {
        // SAFETY: per the contract.
        let p = unsafe { p.as_ref() }.ok_or(INVALID_VALUE)?;
        if ![1, 2, 4].contains(&p.element_size) || p.height == 0 || p.width == 0 {
            return Err(INVALID_VALUE);
        }
        Ok(MemsetOp { dst: p.dst as u64, elem: p.element_size, width: p.width, height: p.height, pitch: p.pitch, value: p.value })
    }
}

/// One side of a [`Copy3D`]: where its first byte lies in a pitched 3-D layout.
#[derive(Clone, Copy)]
pub struct CopySide {
    pub ptr: u64,
    pub x: usize,
    pub y: usize,
    pub z: usize,
    /// Bytes from one row to the next.
    pub pitch: usize,
    /// Rows from one slice to the next.
    pub rows: usize,
}

impl CopySide {
    /// The address of row `y`, slice `z` of the copy.
    fn row(&self, y: usize, z: usize) -> u64 {
        self.ptr + ((self.z + z) * self.rows * self.pitch + (self.y + y) * self.pitch + self.x) as u64
    }
}

/// A 3-D copy (`hipGraphAddMemcpyNode`, `hipDrvGraphAddMemcpyNode`): `height` rows of `width`
/// bytes in each of `depth` slices.
#[derive(Clone, Copy)]
pub struct Copy3D {
    pub src: CopySide,
    pub dst: CopySide,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub kind: i32,
}

impl Copy3D {
    /// Refuses an empty copy, a null side, and a side whose rows or slices would overlap (a
    /// pitch shorter than its offset and row where it has rows apart, too few rows per slice
    /// where it has slices apart).
    pub fn checked(self) -> HipResult<Self> {
        if self.width == 0 || self.height == 0 || self.depth == 0 {
            return Err(INVALID_VALUE);
        }
        for s in [&self.src, &self.dst] {
            let slices_apart = self.depth > 1 || s.z > 0;
            let rows_apart = slices_apart || self.height > 1 || s.y > 0;
            if s.ptr == 0 || (rows_apart && s.pitch < s.x + self.width) || (slices_apart && s.rows < s.y + self.height) {
                return Err(INVALID_VALUE);
            }
        }
        Ok(self)
    }

    pub fn run(&self, dev: i32) -> HipResult {
        for z in 0..self.depth {
            for y in 0..self.height {
                crate::memory::copy(dev, self.dst.row(y, z), self.src.row(y, z), self.width, self.kind)?;
            }
        }
        Ok(())
    }
}

/// What `hipGraphMemcpyNodeGetParams` reports for a memcpy node: the 160 bytes clr copies out of
/// the node, as 20 words.
#[derive(Clone, Copy)]
pub struct MemcpyReport {
    pub words: [u64; 20],
    /// A 1-D node (clr's `GraphMemcpyNode1D`: `hipGraphAddMemcpyNode1D`, a captured copy, a copy
    /// to or from a symbol), whose parameters clr fills only from ROCm 7.2.
    pub one_d: bool,
}

impl MemcpyReport {
    /// What clr 7.2 reports for a 1-D node: zero-filled, then both pointers, extent
    /// `{count, 1, 1}` and the kind (a copy to or from a symbol has a null destination or source).
    pub fn one_d(dst: u64, src: u64, count: usize, kind: i32) -> Self {
        let mut words = [0u64; 20];
        // srcPtr.ptr, dstPtr.ptr, extent, kind (an int in the low half of the last word).
        (words[4], words[12], words[16], words[17], words[18], words[19]) = (src, dst, count as u64, 1, 1, kind as u32 as u64);
        MemcpyReport { words, one_d: true }
    }

    /// What clr reports for any other memcpy node: the first 160 bytes of what it was given.
    ///
    /// # Safety
    /// `p` points at 160 readable bytes.
    pub unsafe fn as_given<T>(p: *const T) -> Self {
        let mut words = [0u64; 20];
        // SAFETY: per the contract; the words do not overlap the caller's struct.
        unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), words.as_mut_ptr().cast::<u8>(), 160) };
        MemcpyReport { words, one_d: false }
    }
}

#[derive(Clone)]
pub enum Op {
    Kernel(KernelOp),
    Memcpy {
        dst: u64,
        src: u64,
        count: usize,
        kind: i32,
    },
    Memcpy3D(Copy3D),
    Memset(MemsetOp),
    Host {
        func: unsafe extern "C" fn(*mut c_void),
        user: usize,
    },
    /// Handle of the embedded clone (a graph owned by this node).
    Child(usize),
    Empty,
    /// The event's handle (what the node's getter reports) and the event.
    EventWait(usize, Arc<Event>),
    EventRecord(usize, Arc<Event>),
    /// Stream memory operations: `hipGraphAddBatchMemOpNode`, or a `hipStreamWriteValue64`
    /// captured into a graph (without the `clr_stream_memops` quirk).
    MemOps {
        ctx: usize,
        ops: Vec<MemOpWords>,
        flags: u32,
    },
    /// `hipGraphAddMemAllocNode`: hipsim models the node, not the allocation (see the README's
    /// differences from real HIP); running it does nothing.
    MemAlloc,
    /// `hipGraphAddMemFreeNode`: running it does nothing.
    MemFree,
}

/// hipStreamBatchMemOpType values hipsim runs (HIP's numbering, the same as CUDA's).
pub const MEM_OP_WAIT_VALUE_32: u64 = 1;
pub const MEM_OP_WRITE_VALUE_32: u64 = 2;
pub const MEM_OP_FLUSH_REMOTE_WRITES: u64 = 3;
pub const MEM_OP_WAIT_VALUE_64: u64 = 4;
pub const MEM_OP_WRITE_VALUE_64: u64 = 5;

/// Checks one memory operation: a known type whose wait flags are a comparison hipsim has.
pub fn check_mem_op(op: &MemOpWords) -> HipResult {
    match op[0] as u32 as u64 {
        MEM_OP_WAIT_VALUE_32 | MEM_OP_WAIT_VALUE_64 if (op[3] as u32) <= 3 => Ok(()),
        MEM_OP_WRITE_VALUE_32 | MEM_OP_WRITE_VALUE_64 | MEM_OP_FLUSH_REMOTE_WRITES => Ok(()),
        _ => Err(INVALID_VALUE),
    }
}

impl Op {
    /// ROCm 6.x hipGraphNodeType, with ROCm 6.4's BatchMemOp (14).
    pub fn type_code(&self) -> i32 {
        match self {
            Op::Kernel(_) => 0,
            Op::Memcpy { .. } | Op::Memcpy3D(_) => 1,
            Op::Memset(_) => 2,
            Op::Host { .. } => 3,
            Op::Child(_) => 4,
            Op::Empty => 5,
            Op::EventWait(..) => 6,
            Op::EventRecord(..) => 7,
            Op::MemAlloc => 10,
            Op::MemFree => 11,
            Op::MemOps { .. } => 14,
        }
    }
}

/// Arrays returned by hipGraphKernelNodeGetParams; they live as long as the node's parameters.
struct ParamView {
    clr138: bool,
    #[expect(dead_code, reason = "owns the argument bytes that `params`, `extra` and `blob` point into")]
    values: Box<[u8]>,
    params: Box<[*mut c_void]>,
    #[expect(dead_code, reason = "owns the size word that `extra` points to")]
    size: Box<usize>,
    extra: Box<[*mut c_void; 5]>,
}

// SAFETY: the raw pointers only point into the view's own boxes.
unsafe impl Send for ParamView {}

/// A kernel node's launch attributes as clr keeps them: one value per attribute and the one set
/// last (`kernelAttrInUse_`), the only one that Get and Copy look at. They change nothing in
/// how hipsim runs the kernel.
#[derive(Clone, Copy, Default)]
pub struct KernelAttrs {
    /// The hipKernelNodeAttrID set last; 0 before any.
    pub in_use: i32,
    pub window: AccessPolicyWindow,
    pub cooperative: i32,
    pub priority: i32,
}

pub struct Node {
    pub handle: usize,
    pub op: Op,
    pub deps: Vec<usize>,
    /// Kept by a clone of the node, like clr's copy constructor (`CopyAttr`).
    pub attrs: KernelAttrs,
    /// What `hipGraphMemcpyNodeGetParams` reports for a memcpy node: set when it is created and
    /// left by `hipGraphMemcpyNodeSetParams1D` (clr keeps a 1-D node's parameters apart from the
    /// ones it runs). A clone copies it, as clr's does.
    pub memcpy_report: Option<MemcpyReport>,
    views: Vec<ParamView>,
}

impl Node {
    pub fn set_op(&mut self, op: Op) {
        self.op = op;
        self.views.clear();
    }

    pub fn kernel_params(&mut self) -> HipResult<KernelNodeParams> {
        let Op::Kernel(k) = &self.op else { return Err(INVALID_VALUE) };
        let clr138 = knobs::get().clr138();
        if !self.views.iter().any(|v| v.clr138 == clr138) {
            self.views.push(ParamView::new(k, clr138));
        }
        let v = self.views.iter_mut().find(|v| v.clr138 == clr138).expect("just ensured");
        let (kernel_params, extra) =
            if k.extra_style { (std::ptr::null_mut(), v.extra.as_mut_ptr()) } else { (v.params.as_mut_ptr(), std::ptr::null_mut()) };
        Ok(KernelNodeParams {
            block_dim: k.block,
            extra,
            func: k.func as *mut c_void,
            grid_dim: k.grid,
            kernel_params,
            shared_mem_bytes: k.shmem,
        })
    }
}

impl ParamView {
    fn new(k: &KernelOp, clr138: bool) -> Self {
        let mut values: Box<[u8]> = k.args.clone().into_boxed_slice();
        let base = values.as_mut_ptr();
        let (offs, _) = k.kernel.layout();
        // SAFETY: offsets lie inside the packed buffer.
        let params: Box<[*mut c_void]> = offs.iter().map(|&o| unsafe { base.add(o) }.cast()).collect();
        if clr138 && !k.extra_style {
            // clr#138: the array points at argument storage the runtime has already freed.
            values.fill(0xDD);
        }
        let mut size = Box::new(values.len());
        // HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END are small integers, not addresses.
        let key = std::ptr::without_provenance_mut::<c_void>;
        let extra = Box::new([key(1), base.cast(), key(2), (&mut *size as *mut usize).cast(), key(3)]);
        ParamView { clr138, values, params, size, extra }
    }
}

pub struct Graph {
    pub nodes: Vec<Node>,
    /// Owned by a child-graph node; not destroyable or counted on its own.
    pub embedded: bool,
    /// False while a capture is still building it.
    pub visible: bool,
    /// References this graph owns, by user object.
    pub user_objects: HashMap<usize, u32>,
}

#[derive(Default)]
pub struct Graphs {
    graphs: HashMap<usize, Graph>,
    /// Each live node's graph and its index there (renumbered when a node is removed),
    /// so that a setter finds its node in constant time, as on a GPU, on graphs of 100 000 nodes.
    owner: HashMap<usize, (usize, usize)>,
}

static GRAPHS: LazyLock<Mutex<Graphs>> = LazyLock::new(Default::default);

pub fn lock() -> MutexGuard<'static, Graphs> {
    GRAPHS.lock().unwrap_or_else(|e| e.into_inner())
}

impl Graphs {
    pub fn create(&mut self, embedded: bool, visible: bool) -> usize {
        let h = next_handle();
        self.graphs.insert(h, Graph { nodes: Vec::new(), embedded, visible, user_objects: HashMap::new() });
        h
    }

    pub fn graph(&self, g: usize) -> HipResult<&Graph> {
        self.graphs.get(&g).ok_or(INVALID_HANDLE)
    }

    pub fn graph_mut(&mut self, g: usize) -> HipResult<&mut Graph> {
        self.graphs.get_mut(&g).ok_or(INVALID_HANDLE)
    }

    pub fn set_visible(&mut self, g: usize) {
        if let Some(gr) = self.graphs.get_mut(&g) {
            gr.visible = true;
        }
    }

    pub fn live_visible(&self) -> usize {
        self.graphs.values().filter(|g| g.visible && !g.embedded).count()
    }

    pub fn owner_of(&self, node: usize) -> HipResult<usize> {
        self.owner.get(&node).map(|&(g, _)| g).ok_or(INVALID_HANDLE)
    }

    pub fn node(&self, node: usize) -> HipResult<&Node> {
        let &(g, i) = self.owner.get(&node).ok_or(INVALID_HANDLE)?;
        Ok(&self.graphs[&g].nodes[i])
    }

    pub fn node_mut(&mut self, node: usize) -> HipResult<&mut Node> {
        let &(g, i) = self.owner.get(&node).ok_or(INVALID_HANDLE)?;
        Ok(&mut self.graphs.get_mut(&g).expect("owner map is exact").nodes[i])
    }

    /// Adds a node; a Child op must already hold this graph's private clone. A 1-D memcpy node
    /// reports its own parameters.
    pub fn add(&mut self, g: usize, deps: &[usize], op: Op) -> HipResult<usize> {
        let report = match op {
            Op::Memcpy { dst, src, count, kind } => Some(MemcpyReport::one_d(dst, src, count, kind)),
            _ => None,
        };
        self.add_reporting(g, deps, op, report)
    }

    /// Adds a memcpy node that reports `report` (or any node, with `None`).
    pub fn add_reporting(&mut self, g: usize, deps: &[usize], op: Op, memcpy_report: Option<MemcpyReport>) -> HipResult<usize> {
        self.graph(g)?;
        for (i, d) in deps.iter().enumerate() {
            if self.owner.get(d).map(|&(owner, _)| owner) != Some(g) || deps[..i].contains(d) {
                return Err(INVALID_VALUE);
            }
        }
        let h = next_handle();
        let nodes = &mut self.graphs.get_mut(&g).expect("checked").nodes;
        self.owner.insert(h, (g, nodes.len()));
        nodes.push(Node { handle: h, op, deps: deps.to_vec(), attrs: KernelAttrs::default(), memcpy_report, views: Vec::new() });
        Ok(h)
    }

    /// Removes `node` and its edges from its graph (`hipGraphDestroyNode`), with the graph a
    /// child node embeds.
    pub fn remove(&mut self, node: usize) -> HipResult {
        let (g, i) = self.owner.remove(&node).ok_or(INVALID_HANDLE)?;
        let nodes = &mut self.graphs.get_mut(&g).expect("owner map is exact").nodes;
        let removed = nodes.remove(i);
        for (j, n) in nodes.iter_mut().enumerate() {
            n.deps.retain(|&d| d != node);
            if j >= i {
                self.owner.insert(n.handle, (g, j));
            }
        }
        match removed.op {
            Op::Child(c) => self.destroy(c),
            _ => Ok(()),
        }
    }

    pub fn add_edge(&mut self, g: usize, from: usize, to: usize) -> HipResult {
        if self.owner_of(from)? != g || self.owner_of(to)? != g || from == to {
            return Err(INVALID_VALUE);
        }
        let n = self.node_mut(to)?;
        if n.deps.contains(&from) {
            return Err(INVALID_VALUE);
        }
        n.deps.push(from);
        Ok(())
    }

    /// Deep copy with fresh node handles; child graphs are cloned too. The copy owns one
    /// reference to each user object of the source (clr's `Graph::clone`).
    pub fn clone_graph(&mut self, src: usize, embedded: bool) -> HipResult<usize> {
        type Planned = (usize, Op, Vec<usize>, KernelAttrs, Option<MemcpyReport>);
        let plan: Vec<Planned> =
            self.graph(src)?.nodes.iter().map(|n| (n.handle, n.op.clone(), n.deps.clone(), n.attrs, n.memcpy_report)).collect();
        let objects: Vec<usize> = self.graph(src)?.user_objects.keys().copied().collect();
        let dst = self.create(embedded, true);
        for o in objects {
            if user_object::retain(o, 1).is_ok() {
                self.graphs.get_mut(&dst).expect("created").user_objects.insert(o, 1);
            }
        }
        let mut map = HashMap::new();
        for (old, op, deps, attrs, memcpy_report) in plan {
            let op = match op {
                Op::Child(c) => Op::Child(self.clone_graph(c, true)?),
                other => other,
            };
            let deps: Vec<usize> = deps.iter().map(|d| map[d]).collect();
            let h = next_handle();
            let nodes = &mut self.graphs.get_mut(&dst).expect("created").nodes;
            self.owner.insert(h, (dst, nodes.len()));
            nodes.push(Node { handle: h, op, deps, attrs, memcpy_report, views: Vec::new() });
            map.insert(old, h);
        }
        Ok(dst)
    }

    /// Destroys `g` and releases the user-object references it owns; destructors that come due
    /// run at the next [`user_object::run_pending`].
    pub fn destroy(&mut self, g: usize) -> HipResult {
        let gr = self.graphs.remove(&g).ok_or(INVALID_HANDLE)?;
        for (&o, &count) in &gr.user_objects {
            let _ = user_object::release(o, count);
        }
        for n in gr.nodes {
            self.owner.remove(&n.handle);
            if let Op::Child(c) = n.op {
                self.destroy(c)?;
            }
        }
        Ok(())
    }

    /// Node indices in dependency order (ties by insertion order); a cycle is an error.
    pub fn topo_order(&self, g: usize) -> HipResult<Vec<usize>> {
        let gr = self.graph(g)?;
        let index: HashMap<usize, usize> = gr.nodes.iter().enumerate().map(|(i, n)| (n.handle, i)).collect();
        let mut indeg: Vec<usize> = gr.nodes.iter().map(|n| n.deps.len()).collect();
        let mut out_edges = vec![Vec::new(); gr.nodes.len()];
        for (i, n) in gr.nodes.iter().enumerate() {
            for d in &n.deps {
                out_edges[index[d]].push(i);
            }
        }
        let mut ready: std::collections::BTreeSet<usize> = (0..gr.nodes.len()).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(gr.nodes.len());
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &j in &out_edges[i] {
                indeg[j] -= 1;
                if indeg[j] == 0 {
                    ready.insert(j);
                }
            }
        }
        if order.len() != gr.nodes.len() {
            return Err(INVALID_VALUE);
        }
        Ok(order)
    }
}

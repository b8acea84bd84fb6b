//! Scenario `update`: moving 10 % of the allocations of a command buffer of N kernel nodes.
//!
//! Each node is `rcb_test_add_f32(out, x, y, n)` over its own three allocations (the test
//! kernel with the most pointer parameters: 3 pointers + 1 value, so 3 sites per node, not the
//! 4 + 2 of the design's target); every tenth node's allocations move, so 10 % of the
//! allocations and 10 % of the nodes are touched. Measured in one run, medians:
//! (a) re-record + instantiate, (b) re-record + whole-graph exec update, (c) the floor: only the
//! exec SetParams calls of the touched nodes, (d) `rcb_cmdbuf_update_allocations` (the executable
//! graphs of (b)–(d) have run once, see [`crate::warm`]); then the same
//! update on a nested command buffer (template setters) and those template setters alone (given
//! prebuilt parameters in one call, as the update gives them its kernel nodes), whose
//! difference is the library's own host cost, given the whole new table
//! (`rcb_cmdbuf_update_allocations`) and given only the moved allocations
//! (`rcb_cmdbuf_move_allocations`).

use crate::setter_timer::SetterTimer;
use crate::table::{Table, median_ns, ratio, time};
use crate::{faults, kernels, warm};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::kernel_args::{ArgKind, KernelArg, pack};
use rocm_cmdbuf::runtime::{Exec, Function, Graph, KernelParams, Node, Runtime, Stream};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::time::Instant;

const ELEMENTS: u64 = 16;

type R<T> = Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Bases of the 3·N allocations in two placements; odd updates use `b` for moved ones.
pub(crate) struct Layout {
    a: Vec<u64>,
    b: Vec<u64>,
    moved: Vec<bool>,
    /// The two blocks the allocations were carved from, end to end ([`Layout::end_to_end`]);
    /// empty when each allocation is one of its own.
    blocks: Vec<u64>,
}

impl Layout {
    fn new(rt: &dyn Runtime, nodes: usize) -> R<Layout> {
        Self::moving_every(rt, nodes, 10)
    }

    /// The allocations of every `every`-th node move.
    pub(crate) fn moving_every(rt: &dyn Runtime, nodes: usize, every: usize) -> R<Layout> {
        let bytes = (ELEMENTS * 4) as usize;
        let mut a = Vec::with_capacity(3 * nodes);
        let mut b = Vec::with_capacity(3 * nodes);
        let mut moved = Vec::with_capacity(3 * nodes);
        for i in 0..3 * nodes {
            let p = rt.malloc(0, bytes).map_err(err)?;
            let m = (i / 3) % every == 0;
            a.push(p);
            b.push(if m { rt.malloc(0, bytes).map_err(err)? } else { p });
            moved.push(m);
        }
        Ok(Layout { a, b, moved, blocks: Vec::new() })
    }

    /// Every allocation moves, and they lie end to end in one block per placement (each run
    /// moved as one, by one delta): every pointer argument at an allocation's base also lies one
    /// past the end of the allocation before it, as in PyTorch's graphs (`real_graphs.py`), so
    /// each is ambiguous and every update checks the allocations' overlap sets.
    fn end_to_end(rt: &dyn Runtime, nodes: usize) -> R<Layout> {
        let bytes = ELEMENTS * 4;
        let first = rt.malloc(0, 3 * nodes * bytes as usize).map_err(err)?;
        let second = rt.malloc(0, 3 * nodes * bytes as usize).map_err(|e| {
            let _ = rt.free(first);
            err(e)
        })?;
        let blocks = vec![first, second];
        let carve = |block: u64| (0..3 * nodes as u64).map(|i| block + i * bytes).collect();
        Ok(Layout { a: carve(blocks[0]), b: carve(blocks[1]), moved: vec![true; 3 * nodes], blocks })
    }

    fn table(&self, second: bool) -> Vec<rcb_allocation> {
        let bases = if second { &self.b } else { &self.a };
        bases.iter().map(|&base| rcb_allocation { base, size: ELEMENTS * 4 }).collect()
    }

    /// `(index, base)` of the moved allocations in one placement.
    pub(crate) fn moves(&self, second: bool) -> Vec<rcb_allocation_move> {
        let bases = if second { &self.b } else { &self.a };
        (0..bases.len()).filter(|&i| self.moved[i]).map(|i| rcb_allocation_move { index: i as u64, base: bases[i] }).collect()
    }

    pub(crate) fn blob(&self, node: usize, second: bool) -> Vec<u8> {
        let bases = if second { &self.b } else { &self.a };
        let ptrs: Vec<[u8; 8]> = (0..3).map(|j| bases[3 * node + j].to_ne_bytes()).collect();
        let n = ELEMENTS.to_ne_bytes();
        let args: Vec<KernelArg<'_>> = ptrs
            .iter()
            .map(|p| KernelArg { value: p, kind: ArgKind::DevicePtr })
            .chain([KernelArg { value: &n, kind: ArgKind::Value }])
            .collect();
        // No argument is named by allocation, so the table is never asked.
        pack(&args, |_, _| unreachable!("no named arguments")).expect("four valid arguments").blob
    }

    pub(crate) fn free(&self, rt: &dyn Runtime) -> R<()> {
        if !self.blocks.is_empty() {
            return self.blocks.iter().try_for_each(|&p| rt.free(p).map_err(err));
        }
        for (i, &p) in self.a.iter().enumerate() {
            rt.free(p).map_err(err)?;
            if self.moved[i] {
                rt.free(self.b[i]).map_err(err)?;
            }
        }
        Ok(())
    }
}

fn params<'a>(f: Function, blob: &'a [u8]) -> KernelParams<'a> {
    KernelParams { function: f, grid: [1, 1, 1], block: [ELEMENTS as u32, 1, 1], shared_mem_bytes: 0, args: blob }
}

/// The floor's parameters, made before it is timed: the `touched` nodes of `nodes` with the
/// first and the second set of `blobs`, each list given to the runtime in one call (as the update
/// gives it its kernel nodes), so that the floor is the setters back to back.
fn floor_sets<'a>(f: Function, nodes: &[Node], blobs: &'a [Vec<Vec<u8>>; 2], touched: &[usize]) -> [Vec<(Node, KernelParams<'a>)>; 2] {
    [0, 1].map(|b| touched.iter().map(|&i| (nodes[i], params(f, &blobs[b][i]))).collect())
}

/// A chain of N nodes built directly on the runtime, as a re-record builds it.
pub(crate) fn build_graph(rt: &dyn Runtime, f: Function, blobs: &[Vec<u8>]) -> R<(Graph, Vec<Node>)> {
    let g = rt.graph_create().map_err(err)?;
    let mut nodes: Vec<Node> = Vec::with_capacity(blobs.len());
    for blob in blobs {
        let deps: &[Node] = nodes.last().map(std::slice::from_ref).unwrap_or(&[]);
        let node = rt.add_kernel_node(g, deps, &params(f, blob)).map_err(err)?;
        nodes.push(node);
    }
    Ok((g, nodes))
}

/// A command buffer with the same chain, recorded through the C ABI; `budget` replaces a
/// primary's default update budget.
pub(crate) fn record_cmdbuf(f: Function, layout: &Layout, nodes: usize, nested: bool, budget: Option<u64>) -> R<*mut rcb_cmdbuf> {
    let mut cb = std::ptr::null_mut();
    let check = |s: rcb_status, what: &str| if s == RCB_OK { Ok(()) } else { Err(format!("{what}: status {s}")) };
    // SAFETY: valid out-pointers and arrays that outlive each call.
    unsafe {
        check(if nested { rcb_cmdbuf_new_nested(0, &mut cb) } else { rcb_cmdbuf_new(0, &mut cb) }, "rcb_cmdbuf_new")?;
        if let Some(bytes) = budget {
            check(rcb_cmdbuf_set_exec_update_budget(cb, bytes), "rcb_cmdbuf_set_exec_update_budget")?;
        }
        let table = layout.table(false);
        check(rcb_cmdbuf_set_allocations(cb, table.as_ptr(), table.len()), "rcb_cmdbuf_set_allocations")?;
        let mut prev: Option<rcb_node> = None;
        for i in 0..nodes {
            let values = [layout.a[3 * i], layout.a[3 * i + 1], layout.a[3 * i + 2], ELEMENTS];
            let args = add_args(&values);
            let launch = add_launch(f, &args, ELEMENTS as u32);
            let mut node = 0;
            let deps: &[rcb_node] = prev.as_slice();
            check(rcb_cmdbuf_add_kernel(cb, deps.as_ptr(), deps.len(), &launch, &mut node), "rcb_cmdbuf_add_kernel")?;
            prev = Some(node);
        }
        check(rcb_cmdbuf_finalize(cb), "rcb_cmdbuf_finalize")?;
    }
    Ok(cb)
}

/// The C ABI's argument descriptors of `rcb_test_add_f32(out, x, y, n)` pointing into `values`
/// (`[out, x, y, n]`): three device pointers, then the element count as a value.
pub(crate) fn add_args(values: &[u64; 4]) -> [rcb_kernel_arg; 4] {
    std::array::from_fn(|i| rcb_kernel_arg {
        value: &values[i] as *const u64 as *const c_void,
        size: 8,
        kind: if i < 3 { RCB_ARG_DEVICE_PTR } else { RCB_ARG_VALUE },
    })
}

/// A launch of `add` in one block of `elements` threads, with the descriptors of [`add_args`].
pub(crate) fn add_launch(add: Function, args: &[rcb_kernel_arg; 4], elements: u32) -> rcb_kernel_launch {
    rcb_kernel_launch {
        function: add.0,
        grid: [1, 1, 1],
        block: [elements, 1, 1],
        shared_mem_bytes: 0,
        args: args.as_ptr(),
        num_args: args.len(),
        ..Default::default()
    }
}

/// What an update is given for each placement, built before the timing: the whole table and
/// the moves.
struct Given {
    tables: [Vec<rcb_allocation>; 2],
    moves: [Vec<rcb_allocation_move>; 2],
}

impl Given {
    fn new(layout: &Layout) -> Given {
        Given { tables: [layout.table(false), layout.table(true)], moves: [layout.moves(false), layout.moves(true)] }
    }
}

/// One address update of `cb` to placement `second`, checking its report: the whole table
/// (`rcb_cmdbuf_update_allocations`) or only what moved (`rcb_cmdbuf_move_allocations`).
fn update_once(cb: *mut rcb_cmdbuf, given: &Given, second: bool, touched: usize, only_moves: bool) -> R<()> {
    let mut report = rcb_update_report::default();
    let s = if only_moves {
        let m = &given.moves[usize::from(second)];
        // SAFETY: a live handle, m.len() moves and a writable report.
        unsafe { rcb_cmdbuf_move_allocations(cb, m.as_ptr(), m.len(), &mut report) }
    } else {
        let t = &given.tables[usize::from(second)];
        // SAFETY: a live handle, a table of t.len() entries and a writable report.
        unsafe { rcb_cmdbuf_update_allocations(cb, t.as_ptr(), t.len(), &mut report) }
    };
    if s != RCB_OK || report.needs_rerecord != 0 || report.updated_nodes as usize != touched {
        return Err(format!("address update: status {s}, report {report:?}"));
    }
    Ok(())
}

/// An update given an empty list of moves, which must change nothing.
fn move_nothing(cb: *mut rcb_cmdbuf) -> R<()> {
    let mut report = rcb_update_report::default();
    // SAFETY: a live handle, no moves and a writable report.
    let s = unsafe { rcb_cmdbuf_move_allocations(cb, std::ptr::null(), 0, &mut report) };
    if s != RCB_OK || report.needs_rerecord != 0 || report.moved_allocations != 0 || report.updated_nodes != 0 {
        return Err(format!("an empty update: status {s}, report {report:?}"));
    }
    Ok(())
}

/// The cost of an update when nothing moved (no runtime call at all): the unchanged whole
/// table, whose every entry is compared, and an empty list of moves.
fn time_still(cb: *mut rcb_cmdbuf, layout: &Layout, runs: usize) -> R<(f64, f64)> {
    let table = layout.table(false);
    let back = layout.moves(false);
    let mut report = rcb_update_report::default();
    // SAFETY: a live handle, back.len() moves and a writable report.
    let s = unsafe { rcb_cmdbuf_move_allocations(cb, back.as_ptr(), back.len(), &mut report) };
    if s != RCB_OK {
        return Err(format!("move_allocations: status {s}"));
    }
    let mut failure = None;
    let mut check = |s: rcb_status, report: &rcb_update_report| {
        if s != RCB_OK || report.moved_allocations != 0 || report.updated_nodes != 0 {
            failure = Some(format!("an update with nothing moved: status {s}, report {report:?}"));
        }
    };
    let whole = median_ns(runs, || {
        // SAFETY: a live handle, a table of table.len() entries and a writable report.
        let s = unsafe { rcb_cmdbuf_update_allocations(cb, table.as_ptr(), table.len(), &mut report) };
        check(s, &report);
    });
    let none = median_ns(runs, || {
        // SAFETY: a live handle, no moves and a writable report.
        let s = unsafe { rcb_cmdbuf_move_allocations(cb, std::ptr::null(), 0, &mut report) };
        check(s, &report);
    });
    failure.map_or(Ok((whole, none)), Err)
}

/// The template nodes of a command buffer's chain (as `record_cmdbuf` builds it), in chain
/// order, and its executable graph: what the floor pushes to, so that the floor and the update
/// time the same executable graph.
fn chain_of(rt: &dyn Runtime, cb: *mut rcb_cmdbuf, primary: bool) -> R<(Option<Exec>, Vec<Node>)> {
    let (mut graph, mut exec) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: a live, finalized handle and writable out-pointers.
    unsafe {
        if rcb_cmdbuf_graph(cb, &mut graph) != RCB_OK || (primary && rcb_cmdbuf_exec(cb, &mut exec) != RCB_OK) {
            return Err("rcb_cmdbuf_graph/rcb_cmdbuf_exec failed".into());
        }
    }
    let graph = Graph(graph);
    let next: HashMap<Node, Node> = rt.graph_edges(graph).map_err(err)?.into_iter().map(|e| (e.from, e.to)).collect();
    let nodes = rt.graph_nodes(graph).map_err(err)?;
    let has_parent: HashSet<Node> = next.values().copied().collect();
    let mut at = nodes.iter().copied().find(|n| !has_parent.contains(n));
    let mut chain = Vec::with_capacity(nodes.len());
    while let Some(n) = at {
        chain.push(n);
        at = next.get(&n).copied();
    }
    if chain.len() != nodes.len() {
        return Err(format!("the command buffer's graph is not a chain ({} of {} nodes)", chain.len(), nodes.len()));
    }
    Ok((primary.then_some(Exec(exec)), chain))
}

/// Calls `a` and `b` alternately, two samples each per round (to the other placement and back,
/// so every sample changes what the graph holds), with `settle` before each sample; returns what
/// each sample gave, but for the first round's, which warms up. Interleaving gives both the same
/// machine state (caches, clocks, the driver's own state of the executable graph).
fn alternate<T>(runs: usize, mut settle: impl FnMut(), a: &mut dyn FnMut(bool) -> T, b: &mut dyn FnMut(bool) -> T) -> (Vec<T>, Vec<T>) {
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for round in 0..=runs.div_ceil(2) {
        for which in 0..2 {
            for second in [true, false] {
                settle();
                let out = if which == 0 { a(second) } else { b(second) };
                if round > 0 {
                    if which == 0 { &mut ta } else { &mut tb }.push(out);
                }
            }
        }
    }
    (ta, tb)
}

/// Times `a` and `b` as [`alternate`] calls them (`settle` untimed) and returns their medians.
fn interleaved(runs: usize, settle: impl FnMut(), a: &mut dyn FnMut(bool), b: &mut dyn FnMut(bool)) -> (f64, f64) {
    fn timed(f: &mut dyn FnMut(bool)) -> impl FnMut(bool) -> f64 + '_ {
        move |second| {
            let t = Instant::now();
            f(second);
            t.elapsed().as_nanos() as f64
        }
    }
    let (ta, tb) = alternate(runs, settle, &mut timed(a), &mut timed(b));
    (median(ta), median(tb))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The bytes of the CPU's data (or unified) cache of `level`, as the host's sysfs gives them
/// for its first CPU, if it does.
fn cache_bytes(level: u32) -> Option<usize> {
    (0..8).find_map(|i| {
        let read = |file: &str| std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/{file}")).ok();
        let here: u32 = read("level")?.trim().parse().ok()?;
        if here != level || read("type")?.trim() == "Instruction" {
            return None;
        }
        read("size")?.trim().strip_suffix('K')?.parse::<usize>().ok().map(|k| k << 10)
    })
}

/// A buffer of the benchmark's own, written between timed calls so that other host work pushes
/// the library's data and code out of the caches: XLA updates a command buffer once per step,
/// after a whole step of other host work.
struct Evict(Vec<u8>, u8);

impl Evict {
    /// Larger than the CPU's last-level cache, for the cold table.
    fn new(quick: bool) -> Evict {
        let llc = cache_bytes(3).unwrap_or(64 << 20);
        Evict::of(if quick { llc } else { (4 * llc).max(64 << 20) })
    }

    fn of(bytes: usize) -> Evict {
        Evict(vec![0; bytes], 0)
    }

    /// Writes the whole buffer.
    fn run(&mut self) {
        self.over(self.0.len());
    }

    /// Writes the first `bytes` of the buffer, one store a 64-byte line (each line then held
    /// modified, as a full write would leave it).
    fn over(&mut self, bytes: usize) {
        self.1 = self.1.wrapping_add(1);
        let stamp = self.1;
        self.0[..bytes].chunks_mut(64).for_each(|line| line[0] = stamp);
        std::hint::black_box(&self.0[..bytes]);
    }
}

pub fn run(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let f = kernels::load(rt, "rcb_test_add_f32")?;
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let sizes: &[usize] = if quick { &[100, 1000] } else { &[100, 1000, 10_000, 100_000] };
    let mut main = Table::new(
        format!(
            "update: N kernel nodes (rcb_test_add_f32: 3 pointer + 1 value arguments = 3 sites per node), 10 % of allocations moved, on {}",
            rt.info().backend.name()
        ),
        &[
            "N",
            "touched nodes",
            "moved sites",
            "(a) re-record + instantiate",
            "(b) re-record + exec update",
            "(c) SetParams floor",
            "(d) update_allocations",
            "(a)/(d)",
            "(b)/(d)",
            "(d)/(c)",
            "(d) − (c) per touched node",
        ],
    );
    let mut cold = Table::new(
        "update: after the CPU caches are flushed (a buffer of 4× the last-level cache written before each sample), as when an update follows a step of other host work",
        &["N", "touched nodes", "(c) SetParams floor, cold", "(d) update_allocations, cold", "(d)/(c)", "(d) − (c) per touched node"],
    );
    let mut moves = Table::new(
        "update: the same given only the moves (rcb_cmdbuf_move_allocations, what the patched XLA calls), against the floor, and where the time goes per touched node",
        &[
            "N",
            "touched nodes",
            "(c) SetParams floor",
            "(d′) move_allocations",
            "(d′)/(c)",
            "per touched node: one setter",
            "the call's fixed cost",
            "comparing the whole table (not in (d′))",
            "the library's own work, the rest of (d′) − (c)",
        ],
    );
    let mut launched = Table::new(
        "update: each update given the moves right after a launch of the graph has run (XLA's loop: update, launch, the step, the next update), against the floor after a launch",
        &[
            "N",
            "touched nodes",
            "(c) SetParams floor, after a launch",
            "(d′) move_allocations, after a launch",
            "(d′)/(c)",
            "(d′) − (c) per touched node",
            "(c) after a launch / (c) between updates",
            "(d′) after a launch / (d′) between updates",
        ],
    );
    let mut host = Table::new(
        "update: host cost of the library (nested command buffer: update minus its template setters), given the whole table or only the moves",
        &[
            "N",
            "moved sites",
            "template setters alone",
            "nested update_allocations",
            "host cost",
            "per moved site",
            "nested move_allocations",
            "host cost",
            "per moved site",
        ],
    );
    let mut still = Table::new(
        "update: nothing moved (no runtime call): the whole table compared vs an empty list of moves",
        &["N", "table entries", "update_allocations", "per entry", "move_allocations"],
    );
    let mut memory = Table::new(
        "update: host memory the library keeps per command buffer (counted from its data structures after the timed updates, and again after one re-record), against the packed argument bytes",
        &[
            "N",
            "sites",
            "argument bytes per node",
            "kept per node",
            "after one re-record",
            "kept per site",
            "kept / argument bytes",
            "goal: 2× arguments + 64 B per node",
            "of which, per node: argument copies",
            "node records",
            "node lists",
            "site lists",
            "allocation table (3 allocations a node)",
            "update scratch",
            "other",
            "heap blocks per node",
        ],
    );
    let mut first = Table::new(
        "update: the first update after finalize (and one launch) against the steady one, given only the moves, on a fresh primary command buffer each time, and the same for the floor on a fresh executable graph",
        &[
            "N",
            "samples",
            "(f) first move_allocations",
            "(s) steady",
            "(f)/(s)",
            "(e) a first call moving nothing",
            "(f′) the first update after (e)",
            "(f′)/(s)",
            "floor, first pass",
            "floor, steady",
            "first/steady",
            "(g) the floor's first pass on the command buffer's own executable graph",
            "(f″) the first update after (g)",
            "(f″)/(s)",
            "page faults in (f), all samples",
            "page faults in the floor's first passes, all samples",
        ],
    );
    // Only where the library's runtime is the stand-in that times its setters.
    let timer = SetterTimer::find();
    let mut split = Table::new(
        "update: given the moves, split in the same call into the time inside the runtime's setters (timed by tests/gpu/setter_timer.c, the library's runtime) and the library's own, per touched node",
        &[
            "N",
            "(c) floor",
            "of which in the setters",
            "the rest of (c)",
            "(d′) move_allocations",
            "of which in the setters",
            "in the setters: in (d′) / in (c)",
            "the rest of (d′)",
            "the library's own: the rest of (d′) − the rest of (c)",
            "(f) first update",
            "of which in the setters",
            "the rest of (f)",
            "(s) steady",
            "of which in the setters",
            "the rest of (s)",
            "in the setters: (f) / (s)",
            "the rest: (f) / (s)",
            "the rest's share of (f) − (s)",
        ],
    );
    let mut evict = Evict::new(quick);
    for &n in sizes {
        let runs = if quick {
            5
        } else {
            match n {
                0..=1000 => 41,
                1001..=10_000 => 21,
                _ => 7,
            }
        };
        let layout = Layout::new(rt, n)?;
        let touched: Vec<usize> = (0..n).filter(|i| i % 10 == 0).collect();
        let sites = 3 * touched.len();
        let blobs = [(0..n).map(|i| layout.blob(i, false)).collect::<Vec<_>>(), (0..n).map(|i| layout.blob(i, true)).collect::<Vec<_>>()];
        let failure: RefCell<Option<String>> = RefCell::new(None);
        let note = |r: R<()>| {
            if let Err(e) = r {
                failure.borrow_mut().get_or_insert(e);
            }
        };

        // Re-recording a graph of 100 000 nodes takes a second: fewer samples there.
        let rebuilds = if n >= 100_000 { 3 } else { runs.min(21) };
        let mut flip = false;
        let a = median_ns(rebuilds, || {
            flip = !flip;
            note((|| {
                let (g, _) = build_graph(rt, f, &blobs[usize::from(flip)])?;
                let e = rt.instantiate(g).map_err(err)?;
                rt.exec_destroy(e).map_err(err)?;
                rt.graph_destroy(g).map_err(err)
            })());
        });
        let (g0, _) = build_graph(rt, f, &blobs[0])?;
        let exec: Exec = rt.instantiate(g0).map_err(err)?;
        warm::exec(rt, exec, stream)?;
        let b = median_ns(rebuilds, || {
            flip = !flip;
            note((|| {
                let (g, _) = build_graph(rt, f, &blobs[usize::from(flip)])?;
                rt.direct().exec_update(exec, g).map_err(err)?;
                rt.graph_destroy(g).map_err(err)
            })());
        });
        rt.exec_destroy(exec).map_err(err)?;
        rt.graph_destroy(g0).map_err(err)?;

        // No update budget: a re-instantiation would replace the executable graph the floor
        // pushes to (on HIP, whose default budget is on); `rcb-bench budget` measures its cost.
        let primary = record_cmdbuf(f, &layout, n, false, Some(0))?;
        let nested = record_cmdbuf(f, &layout, n, true, None)?;
        let timed = (|| {
            warm::cmdbuf(rt, primary, stream)?;
            let (exec, chain) = chain_of(rt, primary, true)?;
            let exec = exec.ok_or("a primary command buffer has an executable graph")?;
            let sets = floor_sets(f, &chain, &blobs, &touched);
            let mut floor = |second: bool| {
                note(rt.kernel_nodes_set(Some(exec), &sets[usize::from(second)]).map_err(|(_, e)| err(e)));
            };
            let given = Given::new(&layout);
            let (given, count, note) = (&given, touched.len(), &note);
            let update = |cb, only_moves| move |second: bool| note(update_once(cb, given, second, count, only_moves));
            let (c, d) = interleaved(runs, || {}, &mut floor, &mut update(primary, false));
            let (c_m, d_m) = interleaved(runs, || {}, &mut floor, &mut update(primary, true));
            // The same alternation, each call split by the stand-in (its own rounds: the clock
            // reads around each call stay out of the tables above).
            let moves_split = timer
                .as_ref()
                .map(|timer| {
                    split_alternation(
                        runs,
                        || {},
                        Some(timer),
                        count,
                        &|second| rt.kernel_nodes_set(Some(exec), &sets[usize::from(second)]).map_err(|(_, e)| err(e)),
                        &|second| update_once(primary, given, second, count, true),
                    )
                })
                .transpose()?;
            let cold_runs = if quick { 3 } else { runs.min(11) };
            let (c_cold, d_cold) = interleaved(cold_runs, || evict.run(), &mut floor, &mut update(primary, false));
            // XLA's loop: each update follows a launch of the graph it updates, which has run.
            let after_launch = || note(warm::cmdbuf(rt, primary, stream));
            let (c_l, d_l) = interleaved(cold_runs, after_launch, &mut floor, &mut update(primary, true));
            // The template's setters given prebuilt parameters in one call, as the nested
            // update hands them its kernel nodes.
            let (_, template_nodes) = chain_of(rt, nested, false)?;
            let template_sets = floor_sets(f, &template_nodes, &blobs, &touched);
            let mut template = |second: bool| {
                note(rt.kernel_nodes_set(None, &template_sets[usize::from(second)]).map_err(|(_, e)| err(e)));
            };
            let (t, e) = interleaved(runs, || {}, &mut template, &mut update(nested, false));
            let (t_m, m) = interleaved(runs, || {}, &mut template, &mut update(nested, true));
            let quiet = time_still(nested, &layout, if quick { 21 } else { 201 })?;
            let kept = memory_use(primary)?;
            let all_sites = site_count(primary)?;
            let rerecorded = kept_after_rerecord(primary, &layout)?;
            Ok::<_, String>(([c, d, c_cold, d_cold, c_m, d_m, c_l, d_l], [t, e, t_m, m], quiet, (kept, all_sites, rerecorded), moves_split))
        })();
        // SAFETY: handles from record_cmdbuf, freed once.
        unsafe {
            rcb_cmdbuf_free(primary);
            rcb_cmdbuf_free(nested);
        }
        let ([c, d, c_cold, d_cold, c_m, d_m, c_l, d_l], [t, e, t_m, m], (whole, none), (kept, all_sites, rerecorded), moves_split) =
            timed?;
        if let Some(e) = failure.into_inner() {
            return Err(e);
        }
        let samples = if quick { 2 } else { (1_000_000 / n).clamp(3, 9) };
        let fu = first_update(rt, f, &layout, &blobs, &touched, stream, samples)?;
        if let (Some(timer), Some((floor_split, update_split))) = (&timer, moves_split) {
            let fresh = |body: &mut dyn FnMut(*mut rcb_cmdbuf) -> R<()>| on_fresh(rt, f, &layout, n, stream, body);
            let (fs, ss) = first_update_split(&fresh, &layout, touched.len(), samples, timer)?;
            let per = |ns: f64| time(ns / touched.len() as f64);
            split.row(vec![
                n.to_string(),
                per(floor_split.total),
                per(floor_split.inside),
                per(floor_split.rest),
                per(update_split.total),
                per(update_split.inside),
                format!("{:.2}", update_split.inside / floor_split.inside),
                per(update_split.rest),
                per(update_split.rest - floor_split.rest),
                per(fs.total),
                per(fs.inside),
                per(fs.rest),
                per(ss.total),
                per(ss.inside),
                per(ss.rest),
                format!("{:.2}", fs.inside / ss.inside),
                format!("{:.2}", fs.rest / ss.rest),
                format!("{:.2}", (fs.rest - ss.rest) / (fs.total - ss.total)),
            ]);
        }
        first.row(vec![
            n.to_string(),
            samples.to_string(),
            time(fu.first),
            time(fu.steady),
            format!("{:.2}", fu.first / fu.steady),
            time(fu.empty_first),
            time(fu.after_empty),
            format!("{:.2}", fu.after_empty / fu.steady),
            time(fu.floor_first),
            time(fu.floor_steady),
            format!("{:.2}", fu.floor_first / fu.floor_steady),
            time(fu.driver_on_own),
            time(fu.after_driver),
            format!("{:.2}", fu.after_driver / fu.steady),
            fu.first_faults.map_or("—".into(), |n| n.to_string()),
            fu.floor_first_faults.map_or("—".into(), |n| n.to_string()),
        ]);
        let per_node = |bytes: u64| format!("{:.0} B", bytes as f64 / n as f64);
        let args = kept.argument_bytes as f64;
        memory.row(vec![
            n.to_string(),
            all_sites.to_string(),
            per_node(kept.argument_bytes),
            per_node(kept.total_bytes),
            per_node(rerecorded.total_bytes),
            format!("{:.0} B", kept.total_bytes as f64 / all_sites as f64),
            format!("{:.1}×", kept.total_bytes as f64 / args),
            format!("{:.0} B", (2.0 * args + 64.0 * n as f64) / n as f64),
            per_node(kept.argument_copies),
            per_node(kept.node_records),
            per_node(kept.node_lists),
            per_node(kept.site_lists),
            per_node(kept.allocation_table),
            per_node(kept.update_scratch),
            per_node(kept.other),
            format!("{:.1}", kept.heap_blocks as f64 / n as f64),
        ]);
        layout.free(rt)?;

        let per_touched = |lib: f64, floor: f64| time((lib - floor) / touched.len() as f64);
        main.row(vec![
            n.to_string(),
            touched.len().to_string(),
            sites.to_string(),
            time(a),
            time(b),
            time(c),
            time(d),
            ratio(a, d),
            ratio(b, d),
            format!("{:.2}", d / c),
            per_touched(d, c),
        ]);
        cold.row(vec![
            n.to_string(),
            touched.len().to_string(),
            time(c_cold),
            time(d_cold),
            format!("{:.2}", d_cold / c_cold),
            per_touched(d_cold, c_cold),
        ]);
        let per = |t: f64| time(t / touched.len() as f64);
        moves.row(vec![
            n.to_string(),
            touched.len().to_string(),
            time(c_m),
            time(d_m),
            format!("{:.2}", d_m / c_m),
            per(c_m),
            per(none),
            per((whole - none).max(0.0)),
            per((d_m - c_m - none).max(0.0)),
        ]);
        launched.row(vec![
            n.to_string(),
            touched.len().to_string(),
            time(c_l),
            time(d_l),
            format!("{:.2}", d_l / c_l),
            per_touched(d_l, c_l),
            format!("{:.2}", c_l / c_m),
            format!("{:.2}", d_l / d_m),
        ]);
        let own = |total: f64, setters: f64| (total - setters).max(0.0);
        host.row(vec![
            n.to_string(),
            sites.to_string(),
            time(t),
            time(e),
            time(own(e, t)),
            time(own(e, t) / sites as f64),
            time(m),
            time(own(m, t_m)),
            time(own(m, t_m) / sites as f64),
        ]);
        let entries = 3 * n;
        still.row(vec![n.to_string(), entries.to_string(), time(whole), format!("{:.2} ns", whole / entries as f64), time(none)]);
    }
    rt.stream_destroy(stream).map_err(err)?;
    main.print();
    println!(
        "\n(c) and (d) are timed on the same executable graph (the command buffer's), alternately, medians of the samples; (c) gives the runtime the same parameters, made before it is timed, in one call that runs its exec kernel-node setter over them back to back (as the update gives it its kernel nodes), as does the first-update table's floor."
    );
    moves.print();
    println!(
        "\nPer touched node: (c) / touched; the fixed cost is an update that moves nothing (move_allocations, no moves), the comparison the whole unchanged table minus that (both from the last table); the rest is (d′) − (c) − the fixed cost: listing and writing the sites, the pushes' own work, and what the library's memory accesses cost the driver's."
    );
    cold.print();
    launched.print();
    println!(
        "\nEach sample follows a launch of the command buffer and a wait for it (untimed); the floor and the update alternate on the same executable graph, as in the tables above, which time them one after another with no launch between."
    );
    host.print();
    still.print();
    first.print();
    println!(
        "\n(f) is each fresh command buffer's first rcb_cmdbuf_move_allocations after finalize and one launch (median over the samples), (s) the median of the 20 updates after it; (e) and (f′) are the same on other fresh command buffers whose first call after the launch is given no moves (the C boundary, the lock and the checks without a site or a push), then the first update; the floor's first pass pushes the touched nodes through the exec setter on a freshly instantiated and launched executable graph of the same chain, its steady figure the median of 20 passes after it; (g) is the floor's first pass over the touched nodes of a third fresh command buffer's own executable graph after its launch (to the moved placement; one more pass, untimed, sends back the parameters it holds; its nodes found before the launch), and (f″) that command buffer's first update right after it: what (f″) pays beyond (s) is the rest once the driver has had its first pass over the same nodes. The page faults are the minor faults the timing thread took inside those calls (read from /proc/thread-self/stat around each, untimed; — where it cannot be read): a fault where a page is mapped for the first time (a 4 KiB page, or a huge page; memory mapped in advance takes none); none: no page was mapped for the first time in those calls."
    );
    if timer.is_some() {
        split.print();
        println!(
            "\nThe library's runtime is tests/gpu/setter_timer.c, which times each of the runtime's node setters around the real one and sums what they took; each call here is timed as a whole and split by those sums, medians over the calls (the floor and the update alternating as in the table given the moves, in rounds of their own), and for (f) and (s) over fresh command buffers as in the first-update table (9 at most; (s) is the median over them of each one's medians of its 20 steady updates). Each column is its own median: the parts need not add up, and a share need not lie between 0 and 1. The rest of a call is its time less the time in the setters: for (c), the runtime's wrapper of the setter (the library's) and what the stand-in adds outside its clock (a clock read, the sums, the extra call); for (d′), the same and the library's own work, which the column after it isolates by subtracting the rest of (c) (the same setters, called as many times). In the setters: the driver's setter and one of the stand-in's clock reads, in (c) and (d′) alike. Each call checks that the setters were called once per touched node."
        );
    }
    memory.print();
    println!(
        "\nCounted by the library from its own data structures (inline sizes and heap capacities; a hash map as all its buckets and their control bytes; \"other\" holds each command buffer's fixed cost: its struct, reference counts and lock, and its entries in the handle registry), not by the allocator, which adds a header to each heap block. The library keeps one copy of each node's parameters, pushed to the template and the executable graph alike; what the runtime keeps is not counted."
    );
    Ok(())
}

/// The patch sites `cb` holds, as the library counts them.
fn site_count(cb: *mut rcb_cmdbuf) -> R<usize> {
    let mut sites = 0;
    // SAFETY: a live handle and a writable count.
    let s = unsafe { rcb_cmdbuf_site_count(cb, &mut sites) };
    if s != RCB_OK {
        return Err(format!("rcb_cmdbuf_site_count: status {s}"));
    }
    Ok(sites)
}

fn memory_use(cb: *mut rcb_cmdbuf) -> R<rcb_memory_use> {
    let mut kept = rcb_memory_use::default();
    // SAFETY: a live handle and a writable sized struct.
    let s = unsafe { rcb_cmdbuf_memory_use(cb, &mut kept) };
    if s != RCB_OK {
        return Err(format!("rcb_cmdbuf_memory_use: status {s}"));
    }
    Ok(kept)
}

/// The memory `cb` keeps after one re-record as XLA starts one: moved back to the first
/// placement, then the table set again (every recorded address looked up anew), then finalized.
fn kept_after_rerecord(cb: *mut rcb_cmdbuf, layout: &Layout) -> R<rcb_memory_use> {
    let table = layout.table(false);
    let mut report = rcb_update_report::default();
    let check = |s: rcb_status, what: &str| if s == RCB_OK { Ok(()) } else { Err(format!("{what}: status {s}")) };
    // SAFETY: a live handle, a table of table.len() entries and a writable report.
    unsafe {
        check(rcb_cmdbuf_update_allocations(cb, table.as_ptr(), table.len(), &mut report), "rcb_cmdbuf_update_allocations")?;
        if report.needs_rerecord != 0 {
            return Err(format!("moving back before the re-record: {report:?}"));
        }
        check(rcb_cmdbuf_begin_update(cb), "rcb_cmdbuf_begin_update")?;
        check(rcb_cmdbuf_set_allocations(cb, table.as_ptr(), table.len()), "rcb_cmdbuf_set_allocations")?;
        check(rcb_cmdbuf_finalize(cb), "rcb_cmdbuf_finalize")?;
    }
    memory_use(cb)
}

/// What `first_update` measured: medians over fresh command buffers and executable graphs.
struct FirstUpdate {
    /// The first update given the moves after finalize and one launch.
    first: f64,
    /// The 20 updates after it.
    steady: f64,
    /// On another fresh command buffer, the first call after the launch, given no moves.
    empty_first: f64,
    /// The first update given the moves after that call.
    after_empty: f64,
    /// The floor's first pass of setters on a fresh, launched executable graph, and the 20 after.
    floor_first: f64,
    floor_steady: f64,
    /// On a third fresh command buffer, the floor's first pass on its own executable graph after
    /// the launch (to the moved placement, then back untimed), then the library's first update.
    driver_on_own: f64,
    after_driver: f64,
    /// Minor page faults the timing thread took inside the first updates, and inside the
    /// floor's first passes, summed over the samples (`None`: not counted here).
    first_faults: Option<u64>,
    floor_first_faults: Option<u64>,
}

/// Adds the thread's minor page faults during `f` to `sum` (which stays `None` once a count
/// could not be read).
fn counting_faults<T>(sum: &mut Option<u64>, f: impl FnOnce() -> T) -> T {
    let before = faults::minor();
    let out = f();
    *sum = sum.zip(before.zip(faults::minor())).map(|(s, (b, a))| s + a.saturating_sub(b));
    out
}

/// Runs a body on a fresh command buffer (see [`on_fresh`]).
type Fresh<'a> = dyn Fn(&mut dyn FnMut(*mut rcb_cmdbuf) -> R<()>) -> R<()> + 'a;

/// A fresh primary command buffer of the chain of `n` nodes, finalized and launched once, given
/// to `body` and freed whatever it returns.
fn on_fresh(
    rt: &dyn Runtime,
    f: Function,
    layout: &Layout,
    n: usize,
    stream: Stream,
    body: &mut dyn FnMut(*mut rcb_cmdbuf) -> R<()>,
) -> R<()> {
    let cb = record_cmdbuf(f, layout, n, false, Some(0))?;
    let timed = warm::cmdbuf(rt, cb, stream).and_then(|()| body(cb));
    // SAFETY: a handle from record_cmdbuf, freed once.
    unsafe { rcb_cmdbuf_free(cb) };
    timed
}

/// An update (or a pass of the floor) split into the time inside the runtime's setters and the
/// rest, medians over the calls, in ns.
#[derive(Clone, Copy)]
struct Split {
    total: f64,
    inside: f64,
    rest: f64,
}

impl Split {
    /// Medians of `(total, inside)` pairs; the rest is each call's total less its inside.
    fn of(calls: &[(f64, f64)]) -> Split {
        Split {
            total: median(calls.iter().map(|c| c.0).collect()),
            inside: median(calls.iter().map(|c| c.1).collect()),
            rest: median(calls.iter().map(|c| c.0 - c.1).collect()),
        }
    }
}

/// The floor's pass and the update given the moves, each a call of `placement` (to the moved
/// placement or back), alternated as [`alternate`] calls them with `settle` untimed before each
/// call; each call timed and, with `timer`, split by it (`pushes` setter calls each, else nothing
/// inside): the floor's [`Split`] and the update's.
fn split_alternation(
    runs: usize,
    settle: impl FnMut(),
    timer: Option<&SetterTimer>,
    pushes: usize,
    floor: &dyn Fn(bool) -> R<()>,
    update: &dyn Fn(bool) -> R<()>,
) -> R<(Split, Split)> {
    let (floor_calls, update_calls) = alternate(runs, settle, &mut |second| timed_call(timer, pushes, || floor(second)), &mut |second| {
        timed_call(timer, pushes, || update(second))
    });
    let calls = |c: Vec<R<(f64, f64)>>| c.into_iter().collect::<R<Vec<_>>>();
    Ok((Split::of(&calls(floor_calls)?), Split::of(&calls(update_calls)?)))
}

/// Times `f`: with `timer`, split as [`split_call`] splits it, else `(its time, 0)`.
fn timed_call(timer: Option<&SetterTimer>, pushes: usize, f: impl FnOnce() -> R<()>) -> R<(f64, f64)> {
    match timer {
        Some(timer) => split_call(timer, pushes, f),
        None => {
            let t = Instant::now();
            f().map(|()| (t.elapsed().as_nanos() as f64, 0.0))
        }
    }
}

/// Times `f` and what the runtime's setters took inside it; an error if they were called other
/// than `pushes` times (each touched node pushed once).
fn split_call(timer: &SetterTimer, pushes: usize, f: impl FnOnce() -> R<()>) -> R<(f64, f64)> {
    let t = Instant::now();
    let (done, inside) = timer.during(f);
    let total = t.elapsed().as_nanos() as f64;
    done?;
    if inside.calls != pushes as u64 {
        return Err(format!("the runtime's setters were called {} times in a call that pushes {pushes} nodes", inside.calls));
    }
    Ok((total, inside.ns as f64))
}

/// On `samples` command buffers from `fresh` (see [`on_fresh`]), the first update given the moves
/// after finalize and one launch, and the 20 steady ones after it, each split by `timer`: the
/// first updates' [`Split`], and the medians of each command buffer's steady one, field by field.
fn first_update_split(fresh: &Fresh, layout: &Layout, touched: usize, samples: usize, timer: &SetterTimer) -> R<(Split, Split)> {
    let given = Given::new(layout);
    let (mut first, mut steady) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        fresh(&mut |cb| {
            let mut second = true;
            let mut once = || {
                let call = split_call(timer, touched, || update_once(cb, &given, second, touched, true));
                second = !second;
                call
            };
            first.push(once()?);
            let runs: Vec<(f64, f64)> = (0..20).map(|_| once()).collect::<R<_>>()?;
            steady.push(Split::of(&runs));
            Ok(())
        })?;
    }
    let median_of = |field: fn(&Split) -> f64| median(steady.iter().map(field).collect());
    Ok((Split::of(&first), Split { total: median_of(|s| s.total), inside: median_of(|s| s.inside), rest: median_of(|s| s.rest) }))
}

/// Medians over `samples` fresh command buffers (and fresh executable graphs for the floor) of
/// the first update given the moves after finalize and one launch and of the steady updates
/// after it, of the first call given no moves and the first update after it, and the same for
/// the floor's setters: the part of a first update's extra cost that a call moving nothing
/// already pays is the call's own (boundary, lock, checks), the rest lies in the moves' work.
/// Last, the floor's first pass on a command buffer's own executable graph (to the moved
/// placement and back, its nodes found before the launch), then that command buffer's first
/// update: what the first update still pays beyond a steady one once the driver has had its
/// first pass over the same nodes of the same executable graph.
fn first_update(
    rt: &dyn Runtime,
    f: Function,
    layout: &Layout,
    blobs: &[Vec<Vec<u8>>; 2],
    touched: &[usize],
    stream: rocm_cmdbuf::runtime::Stream,
    samples: usize,
) -> R<FirstUpdate> {
    let given = Given::new(layout);
    let (mut first, mut steady, mut floor_first, mut floor_steady) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut empty_first, mut after_empty) = (Vec::new(), Vec::new());
    let (mut driver_on_own, mut after_driver) = (Vec::new(), Vec::new());
    let (mut first_faults, mut floor_first_faults) = (Some(0), Some(0));
    let on_fresh = |body: &mut dyn FnMut(*mut rcb_cmdbuf) -> R<()>| on_fresh(rt, f, layout, blobs[0].len(), stream, body);
    for _ in 0..samples {
        on_fresh(&mut |cb| {
            let mut report = rcb_update_report::default();
            let t = Instant::now();
            // SAFETY: a live handle, no moves and a writable report.
            let s = unsafe { rcb_cmdbuf_move_allocations(cb, std::ptr::null(), 0, &mut report) };
            let empty = t.elapsed().as_nanos() as f64;
            if s != RCB_OK || report.updated_nodes != 0 {
                return Err(format!("move_allocations given no moves: status {s}, report {report:?}"));
            }
            let t = Instant::now();
            update_once(cb, &given, true, touched.len(), true)?;
            after_empty.push(t.elapsed().as_nanos() as f64);
            empty_first.push(empty);
            Ok(())
        })?;
        on_fresh(&mut |cb| {
            let mut second = true;
            let mut once = || {
                let t = Instant::now();
                let r = update_once(cb, &given, second, touched.len(), true);
                second = !second;
                r.map(|()| t.elapsed().as_nanos() as f64)
            };
            first.push(counting_faults(&mut first_faults, &mut once)?);
            let runs: Vec<f64> = (0..20).map(|_| once()).collect::<R<_>>()?;
            steady.push(median(runs));
            Ok(())
        })?;
        // Its nodes are found before the launch, so that nothing but the pass comes between the
        // launch and the update.
        let cb = record_cmdbuf(f, layout, blobs[0].len(), false, Some(0))?;
        let timed = (|| {
            let (exec, nodes) = chain_of(rt, cb, true)?;
            let sets = floor_sets(f, &nodes, blobs, touched);
            warm::cmdbuf(rt, cb, stream)?;
            // To the moved placement (timed), then back to what the command buffer holds: the
            // driver's first change of these nodes, and nothing changed that the library holds.
            let t = Instant::now();
            rt.kernel_nodes_set(exec, &sets[1]).map_err(|(_, e)| err(e))?;
            driver_on_own.push(t.elapsed().as_nanos() as f64);
            rt.kernel_nodes_set(exec, &sets[0]).map_err(|(_, e)| err(e))?;
            let t = Instant::now();
            update_once(cb, &given, true, touched.len(), true)?;
            after_driver.push(t.elapsed().as_nanos() as f64);
            Ok::<_, String>(())
        })();
        // SAFETY: a handle from record_cmdbuf, freed once.
        unsafe { rcb_cmdbuf_free(cb) };
        timed?;

        let (g, nodes) = build_graph(rt, f, &blobs[0])?;
        let exec = rt.instantiate(g).map_err(err)?;
        let timed = (|| {
            warm::exec(rt, exec, stream)?;
            let sets = floor_sets(f, &nodes, blobs, touched);
            let mut second = true;
            let mut pass = || {
                let t = Instant::now();
                rt.kernel_nodes_set(Some(exec), &sets[usize::from(second)]).map_err(|(_, e)| err(e))?;
                second = !second;
                Ok::<_, String>(t.elapsed().as_nanos() as f64)
            };
            floor_first.push(counting_faults(&mut floor_first_faults, &mut pass)?);
            let runs: Vec<f64> = (0..20).map(|_| pass()).collect::<R<_>>()?;
            floor_steady.push(median(runs));
            Ok::<_, String>(())
        })();
        rt.exec_destroy(exec).map_err(err)?;
        rt.graph_destroy(g).map_err(err)?;
        timed?;
    }
    Ok(FirstUpdate {
        first: median(first),
        steady: median(steady),
        empty_first: median(empty_first),
        after_empty: median(after_empty),
        floor_first: median(floor_first),
        floor_steady: median(floor_steady),
        driver_on_own: median(driver_on_own),
        after_driver: median(after_driver),
        first_faults,
        floor_first_faults,
    })
}

/// Scenario `update-after-writes` (run only when named): what the update given the moves and its
/// floor cost when other work writes memory between their calls, by how much it writes. On
/// `update`'s chain (10 % of the allocations moved) at 100 to 100 000 nodes, primary (the floor:
/// the executable graph's setters) and nested (the floor: the template's setters, the host cost
/// per moved site of `update`'s nested table), the two alternate as in `update`'s tables given
/// the moves, and before each call a buffer of its own is written, `W` bytes of it (one store a
/// 64-byte line, untimed), `W` from nothing to half the last-level cache, with the host's L2 size
/// among them. With the setter-timing stand-in as the library's runtime (see `setter_timer.rs`),
/// each call is split too: the library's own part, beside the setters'.
pub fn run_after_writes(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let f = kernels::load(rt, "rcb_test_add_f32")?;
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let (l2, llc) = (cache_bytes(2).unwrap_or(1 << 20), cache_bytes(3).unwrap_or(32 << 20));
    let mut written = if quick { vec![0, l2, 2 * l2] } else { vec![0, 64 << 10, l2 / 2, l2, 2 * l2, 8 << 20, 32 << 20, llc / 2] };
    written.sort_unstable();
    written.dedup();
    let mut buffer = Evict::of(written.iter().copied().max().unwrap_or(0));
    let timer = SetterTimer::find();
    let mut table = Table::new(
        format!(
            "update-after-writes: given the moves, and the floor, each call after W bytes written elsewhere (untimed), per touched node, on {} (level 2 cache {} KiB, last level {} KiB)",
            rt.info().backend.name(),
            l2 >> 10,
            llc >> 10
        ),
        &[
            "N",
            "command buffer",
            "W written between calls",
            "(c) floor",
            "(d′) move_allocations",
            "(d′)/(c)",
            "(d′) − (c) per moved site",
            "in the setters: in (d′) / in (c)",
            "the library's own: the rest of (d′) − the rest of (c)",
            "the library's own / with nothing written",
        ],
    );
    let sizes: &[usize] = if quick { &[1000] } else { &[100, 1000, 10_000, 100_000] };
    let runs = if quick { 5 } else { 21 };
    for &n in sizes {
        let layout = Layout::new(rt, n)?;
        let touched: Vec<usize> = (0..n).step_by(10).collect();
        let blobs = [(0..n).map(|i| layout.blob(i, false)).collect::<Vec<_>>(), (0..n).map(|i| layout.blob(i, true)).collect::<Vec<_>>()];
        for nested in [false, true] {
            let cb = record_cmdbuf(f, &layout, n, nested, (!nested).then_some(0))?;
            let rows = (|| {
                // A nested command buffer is not launched on its own (its parent is).
                if !nested {
                    warm::cmdbuf(rt, cb, stream)?;
                }
                // The floor pushes to what the update pushes to: the executable graph of a
                // primary, the template of a nested one.
                let (exec, chain) = chain_of(rt, cb, !nested)?;
                let sets = floor_sets(f, &chain, &blobs, &touched);
                let (given, count) = (Given::new(&layout), touched.len());
                let mut rows = Vec::new();
                for &w in &written {
                    let (floor, update) = split_alternation(
                        runs,
                        || buffer.over(w),
                        timer.as_ref(),
                        count,
                        &|second| rt.kernel_nodes_set(exec, &sets[usize::from(second)]).map_err(|(_, e)| err(e)),
                        &|second| update_once(cb, &given, second, count, true),
                    )?;
                    rows.push((w, floor, update));
                }
                Ok::<_, String>(rows)
            })();
            // SAFETY: a handle from record_cmdbuf, freed once.
            unsafe { rcb_cmdbuf_free(cb) };
            let rows = rows?;
            let per = |ns: f64| time(ns / touched.len() as f64);
            let own = |(_, c, d): &(usize, Split, Split)| d.rest - c.rest;
            let own_at_nothing = rows.first().map(own);
            for row in &rows {
                let (w, c, d) = row;
                let split = |cell: String| if timer.is_some() { cell } else { "—".into() };
                table.row(vec![
                    n.to_string(),
                    if nested { "nested" } else { "primary" }.into(),
                    if *w == 0 { "nothing".into() } else { format!("{} KiB", w >> 10) },
                    per(c.total),
                    per(d.total),
                    format!("{:.2}", d.total / c.total),
                    time((d.total - c.total) / (3 * touched.len()) as f64),
                    split(format!("{:.2}", d.inside / c.inside)),
                    split(per(own(row))),
                    split(own_at_nothing.map_or("—".into(), |o| format!("{:.2}", own(row) / o))),
                ]);
            }
        }
        layout.free(rt)?;
    }
    table.print();
    println!(
        "\nEach median is over the calls of {} rounds after one that warms up (the floor's pass to the moved placement and back, then the update's), each call after W bytes of a buffer of the benchmark's own were written, one byte a 64-byte line (untimed). A moved site: three a touched node. The split columns need the setter-timing stand-in as the library's runtime (RCB_CUDA_LIBRARY or RCB_HIP_LIBRARY naming tests/gpu/setter_timer.c built); the stand-in's own cost per setter is in the rest of both calls and so not in their difference.",
        runs.div_ceil(2)
    );
    rt.stream_destroy(stream).map_err(err)?;
    Ok(())
}

/// Scenario `update-loop` (run only when named): `rcb_cmdbuf_move_allocations` called over and
/// over on the chain of `update` (10 % of the allocations moved, given only the moves), nested
/// and primary (never launched), and primary with every allocation moved where they lie end to
/// end (`end-to-end`, see [`Layout::end_to_end`]), and primary given an empty list of moves
/// (`nothing`: the call's fixed cost), at 100, 1 000, 10 000 and 100 000 nodes, and nothing
/// else inside that call: the run to give an
/// instruction-level profiler, such as `valgrind --tool=callgrind
/// --toggle-collect=rcb_cmdbuf_move_allocations`, which then counts the library's work and the
/// runtime setters it calls (`docs/benchmarks.md` subtracts the setters' inclusive count).
/// `RCB_BENCH_LOOP_ONLY="1000 nested"` (a size and a kind) runs that one loop, so
/// that a profile holds one. It prints the median time per call, which under a profiler means
/// nothing; no target is checked. With the setter-timing stand-in as the library's runtime, each
/// call is split into the time inside the runtime's setters and the rest, and with its kernel-node
/// setters skipped (`RCB_SETTER_TIMER_SKIP=1`, see `setter_timer.rs`) the rest is the library's
/// work alone: its own, its runtime wrapper's and one empty call per touched node.
pub fn run_loop(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    const SIZES: [usize; 4] = [100, 1000, 10_000, 100_000];
    const KINDS: [&str; 4] = ["nested", "primary", "end-to-end", "nothing"];
    let loops: Vec<(usize, &str)> = SIZES.iter().flat_map(|&n| KINDS.map(|kind| (n, kind))).collect();
    let loops = match std::env::var("RCB_BENCH_LOOP_ONLY") {
        Err(_) => loops,
        Ok(only) => {
            let chosen: Vec<_> =
                loops.into_iter().filter(|&(n, kind)| only.split_whitespace().eq([n.to_string().as_str(), kind])).collect();
            if chosen.is_empty() {
                return Err(format!(
                    "RCB_BENCH_LOOP_ONLY={only:?} names no loop: give a size ({SIZES:?}) and a kind ({KINDS:?}), e.g. \"1000 nested\""
                ));
            }
            chosen
        }
    };
    let f = kernels::load(rt, "rcb_test_add_f32")?;
    let timer = SetterTimer::find();
    let mut headers = vec!["N", "command buffer", "touched nodes", "calls (one untimed first)", "median per call", "per touched node"];
    if timer.is_some() {
        headers.extend(["in the setters, per touched node", "the rest, per touched node"]);
    }
    let mut table = Table::new(
        format!(
            "update-loop: move_allocations called in a loop, 10 % of allocations moved (end-to-end: all of them, lying end to end; nothing: none), on {}{}",
            rt.info().backend.name(),
            match &timer {
                Some(t) if t.skipping =>
                    ", the kernel-node setters skipped by the setter-timing stand-in (the rest: the library's work alone)",
                Some(_) => ", split by the setter-timing stand-in",
                None => "",
            }
        ),
        &headers,
    );
    for (n, kind) in loops {
        let end_to_end = kind == "end-to-end";
        let layout = if end_to_end { Layout::end_to_end(rt, n)? } else { Layout::new(rt, n)? };
        let given = Given::new(&layout);
        let touched = match kind {
            "end-to-end" => n,
            "nothing" => 0,
            _ => n / 10,
        };
        let timed = if quick { 20 } else { (200_000 / n).max(20) };
        // The update budget off on the primary, as in `update`: every update pushes.
        let measured = record_cmdbuf(f, &layout, n, kind == "nested", (kind != "nested").then_some(0)).and_then(|cb| {
            let call = |second: bool| if kind == "nothing" { move_nothing(cb) } else { update_once(cb, &given, second, touched, true) };
            // The first call untimed, then `timed` calls, each split where the stand-in is.
            let calls: R<Vec<(f64, f64)>> = (0..=timed).map(|i| timed_call(timer.as_ref(), touched, || call(i % 2 == 0))).collect();
            // SAFETY: a live handle, freed once.
            let freed = unsafe { rcb_cmdbuf_free(cb) };
            let calls = calls?;
            if freed != RCB_OK {
                return Err(format!("rcb_cmdbuf_free: status {freed}"));
            }
            Ok(Split::of(&calls[1..]))
        });
        let freed = layout.free(rt);
        let per_call = measured?;
        freed?;
        let per_node = |ns: f64| if touched == 0 { "—".into() } else { time(ns / touched as f64) };
        let mut row =
            vec![n.to_string(), kind.into(), touched.to_string(), (timed + 1).to_string(), time(per_call.total), per_node(per_call.total)];
        if timer.is_some() {
            row.extend([per_node(per_call.inside), per_node(per_call.rest)]);
        }
        table.row(row);
    }
    table.print();
    Ok(())
}

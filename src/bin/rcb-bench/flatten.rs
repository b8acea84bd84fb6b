//! Scenario `flatten`: a traced sub-graph whose allocations all move between records.
//! Baseline, what XLA does today: re-trace the sub-graph under stream capture and push it to the
//! parent's child node (`exec_child_node_set`). Measured: the sub-graph flattened into a primary
//! command buffer once, then `rcb_cmdbuf_update_allocations` (pointer sites found by scanning
//! the captured parameters). Both executable graphs have run once (see [`crate::warm`]).
//! The floor is the exec setters alone, pushing the flattened nodes' parameters (read back from
//! the templates of two flattenings, one per placement) with no library code in between: no
//! patch that pushes every moved node can cost less, so re-trace / floor bounds the speed-up.
//!
//! Two workloads: K plain kernels (the trace is only the launches) and, when cuBLAS loads, G
//! SGEMMs traced through cuBLAS (the trace includes the library's host work, as for XLA's GEMM
//! and custom-call commands).

use crate::cublas::Cublas;
use crate::table::{Table, median_ns_settled, ratio, time};
use crate::warm;
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{
    CaptureMode, Exec, Function, Graph, KernelNodeRead, KernelParams, MemcpyParams, MemsetParams, Node, NodeType, Runtime, Stream,
};
use std::cell::RefCell;
use std::ptr::{null, null_mut};

const ELEMENTS: u64 = 16;
const GEMM_N: usize = 512;
/// cuBLAS's workspace: ample for these GEMMs.
const GEMM_WORKSPACE: usize = 32 << 20;

type R<T> = Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `out, x, y, n` for `rcb_test_add_f32`.
fn blob(bases: &[u64], node: usize) -> Vec<u8> {
    [bases[3 * node], bases[3 * node + 1], bases[3 * node + 2], ELEMENTS].iter().flat_map(|v| v.to_ne_bytes()).collect()
}

/// Captures what `trace` issues on `stream`.
fn captured(rt: &dyn Runtime, stream: Stream, trace: impl FnOnce() -> R<()>) -> R<Graph> {
    rt.begin_capture(stream, CaptureMode::ThreadLocal).map_err(err)?;
    let issued = trace();
    let g = rt.end_capture(stream).map_err(err)?;
    match issued {
        Ok(()) => Ok(g),
        Err(e) => {
            rt.graph_destroy(g).map_err(err)?;
            Err(e)
        }
    }
}

/// Captures the chain of `bases.len() / 3` kernels over `bases` (3 allocations per kernel).
pub(crate) fn capture(rt: &dyn Runtime, f: Function, stream: Stream, bases: &[u64]) -> R<Graph> {
    captured(rt, stream, || launches(rt, f, stream, bases))
}

/// The launches of [`capture`], issued into a capture already begun.
fn launches(rt: &dyn Runtime, f: Function, stream: Stream, bases: &[u64]) -> R<()> {
    (0..bases.len() / 3).try_for_each(|node| {
        let args = blob(bases, node);
        let k = KernelParams { function: f, grid: [1, 1, 1], block: [ELEMENTS as u32, 1, 1], shared_mem_bytes: 0, args: &args };
        rt.direct().launch_kernel(&k, stream).map_err(err)
    })
}

/// Issues a sub-graph's work over one placement of its allocations (into a capture begun).
type Trace<'a> = Box<dyn Fn(&[u64]) -> R<()> + 'a>;

/// A traced sub-graph: how to trace it, and its allocations' count and size.
struct Workload<'a> {
    label: String,
    bytes: u64,
    allocations: usize,
    trace: Trace<'a>,
}

fn table(bases: &[u64], bytes: u64) -> Vec<rcb_allocation> {
    bases.iter().map(|&base| rcb_allocation { base, size: bytes }).collect()
}

fn check(s: rcb_status, what: &str) -> R<()> {
    if s == RCB_OK { Ok(()) } else { Err(format!("{what}: status {s}")) }
}

/// A primary command buffer holding `g` flattened; returns it with its node and site counts.
fn flattened(g: Graph, t: &[rcb_allocation]) -> R<(*mut rcb_cmdbuf, u32, u32)> {
    let mut cb = null_mut();
    let mut group = 0;
    let mut report = rcb_flatten_report::default();
    // SAFETY: valid out-pointers and arrays that outlive each call.
    let built = unsafe {
        check(rcb_cmdbuf_new(0, &mut cb), "rcb_cmdbuf_new")
            .and_then(|()| check(rcb_cmdbuf_set_allocations(cb, t.as_ptr(), t.len()), "rcb_cmdbuf_set_allocations"))
            .and_then(|()| {
                check(rcb_cmdbuf_add_flattened_child(cb, null(), 0, null(), g.0, &mut group, &mut report), "rcb_cmdbuf_add_flattened_child")
            })
            .and_then(|()| check(rcb_cmdbuf_finalize(cb), "rcb_cmdbuf_finalize"))
    };
    if built.is_err() || report.flattened != 1 {
        // SAFETY: NULL or the handle just made, freed once.
        unsafe { rcb_cmdbuf_free(cb) };
    }
    built?;
    if report.flattened != 1 {
        let reason = report.reason.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect::<String>();
        return Err(format!("the captured sub-graph was not flattened: {reason}"));
    }
    Ok((cb, report.nodes, report.sites))
}

/// A node of a flattened template and what the library pushes for it.
enum Pushed {
    Kernel {
        function: Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        args: Vec<u8>,
    },
    Memcpy(MemcpyParams),
    Memset(MemsetParams),
    /// Holds no address (the join node).
    Nothing,
}

/// Every node of `cb`'s template with its parameters, in the template's node order.
fn template_nodes(rt: &dyn Runtime, cb: *mut rcb_cmdbuf) -> R<Vec<(Node, Pushed)>> {
    let mut g = null_mut();
    // SAFETY: a live, finalized handle and a writable out-pointer.
    check(unsafe { rcb_cmdbuf_graph(cb, &mut g) }, "rcb_cmdbuf_graph")?;
    let nodes = rt.graph_nodes(Graph(g)).map_err(err)?;
    nodes
        .into_iter()
        .map(|n| {
            let pushed = match rt.node_type(n).map_err(err)? {
                NodeType::Kernel => {
                    let KernelNodeRead { function, grid, block, shared_mem_bytes, args } = rt.kernel_node_read(n).map_err(err)?;
                    Pushed::Kernel { function, grid, block, shared_mem_bytes, args: args? }
                }
                NodeType::Memcpy => Pushed::Memcpy(rt.memcpy_node_read(n).map_err(err)?),
                NodeType::Memset => Pushed::Memset(rt.memset_node_read(n).map_err(err)?),
                NodeType::Empty => Pushed::Nothing,
                other => return Err(format!("a flattened template holds a {other:?} node")),
            };
            Ok((n, pushed))
        })
        .collect()
}

fn push(rt: &dyn Runtime, exec: Exec, node: Node, p: &Pushed) -> R<()> {
    match p {
        Pushed::Kernel { function, grid, block, shared_mem_bytes, args } => rt.exec_kernel_node_set(
            exec,
            node,
            &KernelParams { function: *function, grid: *grid, block: *block, shared_mem_bytes: *shared_mem_bytes, args },
        ),
        Pushed::Memcpy(c) => rt.exec_memcpy_node_set(exec, node, c),
        Pushed::Memset(m) => rt.exec_memset_node_set(exec, node, m),
        Pushed::Nothing => Ok(()),
    }
    .map_err(err)
}

/// What the flattened nodes are, for the note under the tables: "2 kernel(s) (arguments of 736 B), 1 empty".
fn kinds(nodes: &[(Node, Pushed)]) -> String {
    let count = |f: fn(&Pushed) -> bool| nodes.iter().filter(|(_, p)| f(p)).count();
    let mut sizes: Vec<usize> =
        nodes.iter().filter_map(|(_, p)| if let Pushed::Kernel { args, .. } = p { Some(args.len()) } else { None }).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let sizes: Vec<String> = sizes.iter().map(|b| format!("{b} B")).collect();
    let mut parts = vec![format!("{} kernel(s) (arguments of {})", count(|p| matches!(p, Pushed::Kernel { .. })), sizes.join(", "))];
    for (n, what) in [
        (count(|p| matches!(p, Pushed::Memcpy(_))), "memcpy"),
        (count(|p| matches!(p, Pushed::Memset(_))), "memset"),
        (count(|p| matches!(p, Pushed::Nothing)), "empty"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    parts.join(", ")
}

/// One row: re-capture + child update vs update_allocations, alternating two placements. Each
/// buffer is twice its allocation: a runtime packs buffers end to end, and a captured kernel's
/// pointer at one allocation's base would then be ambiguous with the end of the one before it,
/// so that moving them apart is refused (`rcb_allocation`) and there would be no patch to time.
fn measure(rt: &dyn Runtime, stream: Stream, w: &Workload<'_>, runs: usize) -> R<Row> {
    let placements: Vec<Vec<u64>> = (0..2)
        .map(|_| (0..w.allocations).map(|_| rt.malloc(0, 2 * w.bytes as usize).map_err(err)).collect::<R<Vec<u64>>>())
        .collect::<R<_>>()?;
    let row = measure_on(rt, stream, w, &placements, runs);
    for p in placements.iter().flatten() {
        rt.free(*p).map_err(err)?;
    }
    row
}

/// Medians of one workload: each alone, and each followed by the launch of its executable graph
/// (host time; the GPU is idle before each), since a driver may leave part of a parameter
/// update to the next launch.
struct Timings {
    /// Re-trace + exec child update.
    retrace: [f64; 2],
    /// The exec setters of the flattened nodes alone.
    floor: [f64; 2],
    /// `rcb_cmdbuf_update_allocations`.
    patch: [f64; 2],
}

impl Timings {
    /// (a), (c), (d), (a)/(d), (d)/(c), (a)/(c) of one table: 0 alone, 1 with the launch.
    fn cells(&self, i: usize) -> [String; 6] {
        let (a, c, d) = (self.retrace[i], self.floor[i], self.patch[i]);
        [time(a), time(c), time(d), ratio(a, d), format!("{:.2}", d / c), ratio(a, c)]
    }
}

/// A row of the tables, and what the flattened nodes are.
struct Row {
    nodes: u32,
    sites: u32,
    t: Timings,
    kinds: String,
}

/// Records the first failure of a timed closure (the closures cannot return one).
struct Failure(RefCell<Option<String>>);

impl Failure {
    fn note<T>(&self, r: R<T>) {
        if let Err(e) = r {
            self.0.borrow_mut().get_or_insert(e);
        }
    }

    fn result(self) -> R<()> {
        self.0.into_inner().map_or(Ok(()), Err)
    }
}

/// Median of `step(placement)` over alternating placements (0 and 1), the stream idle before each.
fn timed(rt: &dyn Runtime, stream: Stream, runs: usize, failure: &Failure, mut step: impl FnMut(usize) -> R<()>) -> f64 {
    let mut flip = false;
    median_ns_settled(
        runs,
        || failure.note(rt.stream_synchronize(stream).map_err(err)),
        || {
            flip = !flip;
            failure.note(step(usize::from(flip)));
        },
    )
}

fn measure_on(rt: &dyn Runtime, stream: Stream, w: &Workload<'_>, placements: &[Vec<u64>], runs: usize) -> R<Row> {
    // Baseline: a parent with the captured sub-graph as a child node.
    let first = captured(rt, stream, || (w.trace)(&placements[0]))?;
    let parent = rt.graph_create().map_err(err)?;
    let child = rt.add_child_node(parent, &[], first).map_err(err)?;
    let exec = rt.instantiate(parent).map_err(err)?;
    warm::exec(rt, exec, stream)?;
    let failure = Failure(RefCell::new(None));
    let retrace = [false, true].map(|launch| {
        timed(rt, stream, runs, &failure, |p| {
            let g = captured(rt, stream, || (w.trace)(&placements[p]))?;
            let set = rt.exec_child_node_set(exec, child, g).map_err(err);
            rt.graph_destroy(g).map_err(err).and(set)?;
            if launch { rt.graph_launch(exec, stream).map_err(err) } else { Ok(()) }
        })
    });
    rt.stream_synchronize(stream).map_err(err)?;
    rt.exec_destroy(exec).map_err(err)?;
    rt.graph_destroy(parent).map_err(err)?;
    failure.result()?;

    let tables = [table(&placements[0], w.bytes), table(&placements[1], w.bytes)];
    let built = flattened(first, &tables[0]);
    rt.graph_destroy(first).map_err(err)?;
    let (cb, nodes, sites) = built?;
    let timed = patch_and_floor(rt, stream, w, placements, &tables, cb, runs);
    // SAFETY: the handle from `flattened`, freed once.
    unsafe { rcb_cmdbuf_free(cb) };
    let (patch, floor, kinds) = timed?;
    Ok(Row { nodes, sites, t: Timings { retrace, floor, patch }, kinds })
}

/// Times `update_allocations` on `cb` (flattened from placement 0), then the floor: the same
/// nodes' exec setters fed the parameters of placement 0 and of a second flattening of the
/// sub-graph traced over placement 1, alternately.
fn patch_and_floor(
    rt: &dyn Runtime,
    stream: Stream,
    w: &Workload<'_>,
    placements: &[Vec<u64>],
    tables: &[Vec<rcb_allocation>; 2],
    cb: *mut rcb_cmdbuf,
    runs: usize,
) -> R<([f64; 2], [f64; 2], String)> {
    warm::cmdbuf(rt, cb, stream)?;
    let failure = Failure(RefCell::new(None));
    let launch_cb = || {
        // SAFETY: a live, finalized handle and a stream of the runtime.
        check(unsafe { rcb_cmdbuf_launch(cb, stream.0) }, "rcb_cmdbuf_launch")
    };
    let patch = [false, true].map(|launch| {
        timed(rt, stream, runs, &failure, |p| {
            let t = &tables[p];
            let mut report = rcb_update_report::default();
            // SAFETY: a live handle, a table of t.len() entries and a writable report.
            let s = unsafe { rcb_cmdbuf_update_allocations(cb, t.as_ptr(), t.len(), &mut report) };
            if s != RCB_OK || report.needs_rerecord != 0 || report.updated_nodes == 0 {
                return Err(format!("update_allocations: status {s}, report {report:?}"));
            }
            if launch { launch_cb() } else { Ok(()) }
        })
    });
    rt.stream_synchronize(stream).map_err(err)?;
    failure.result()?;

    let second = captured(rt, stream, || (w.trace)(&placements[1]))?;
    let built = flattened(second, &tables[1]);
    rt.graph_destroy(second).map_err(err)?;
    let (other, _, _) = built?;
    let read = template_nodes(rt, cb).and_then(|a| Ok((a, template_nodes(rt, other)?)));
    // SAFETY: the handle from `flattened`, freed once.
    unsafe { rcb_cmdbuf_free(other) };
    let read = read?;
    let same_kinds = read.0.len() == read.1.len()
        && read.0.iter().zip(&read.1).all(|((_, x), (_, y))| std::mem::discriminant(x) == std::mem::discriminant(y));
    if !same_kinds {
        return Err("the two placements flattened to different nodes".into());
    }
    let mut exec = null_mut();
    // SAFETY: a live, finalized handle and a writable out-pointer.
    check(unsafe { rcb_cmdbuf_exec(cb, &mut exec) }, "rcb_cmdbuf_exec")?;
    let exec = Exec(exec);
    let failure = Failure(RefCell::new(None));
    let floor = [false, true].map(|launch| {
        timed(rt, stream, runs, &failure, |p| {
            for ((node, pa), (_, pb)) in read.0.iter().zip(&read.1) {
                push(rt, exec, *node, if p == 1 { pb } else { pa })?;
            }
            if launch { launch_cb() } else { Ok(()) }
        })
    });
    rt.stream_synchronize(stream).map_err(err)?;
    failure.result()?;
    Ok((patch, floor, kinds(&read.0)))
}

pub fn run(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let f = crate::kernels::load(rt, "rcb_test_add_f32")?;
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let runs = if quick { 5 } else { 31 };
    let backend = rt.info().backend.name();
    let mut alone = Table::new(
        format!("flatten: patch a flattened traced sub-graph (all allocations moved) vs re-trace it, on {backend}"),
        &[
            "traced sub-graph",
            "nodes",
            "sites",
            "(a) re-trace + exec child update",
            "(c) SetParams floor",
            "(d) update_allocations",
            "(a)/(d)",
            "(d)/(c)",
            "(a)/(c): best possible",
        ],
    );
    let mut launched = Table::new(
        format!("flatten: the same, each followed by the launch of its executable graph (host time, GPU idle before), on {backend}"),
        &["traced sub-graph", "(a) + launch", "(c) + launch", "(d) + launch", "speed-up", "(d)/(c)", "best possible"],
    );
    let mut failed = Vec::new();
    let mut notes = Vec::new();
    let mut row = |w: &Workload<'_>| match measure(rt, stream, w, runs) {
        Ok(r) => {
            notes.push(format!("- {}: {}", w.label, r.kinds));
            alone.row([w.label.clone(), r.nodes.to_string(), r.sites.to_string()].into_iter().chain(r.t.cells(0)).collect());
            launched.row([w.label.clone()].into_iter().chain(r.t.cells(1)).collect());
        }
        Err(e) => {
            failed.push(format!("{}: {e}", w.label));
            alone.row([w.label.clone(), "failed".into()].into_iter().chain(std::iter::repeat_n(String::new(), 7)).collect());
            launched.row([w.label.clone(), "failed".into()].into_iter().chain(std::iter::repeat_n(String::new(), 5)).collect());
        }
    };
    for k in [10usize, 100] {
        row(&Workload {
            label: format!("{k} plain kernels"),
            bytes: ELEMENTS * 4,
            allocations: 3 * k,
            trace: Box::new(move |bases| launches(rt, f, stream, bases)),
        });
    }
    let workspace = rt.malloc(0, GEMM_WORKSPACE).map_err(err)?;
    let gemm_note = match Cublas::load(stream.0, workspace, GEMM_WORKSPACE) {
        Ok(blas) => {
            for g in [1usize, 10] {
                let blas = &blas;
                row(&Workload {
                    label: format!("{g} cuBLAS SGEMM {GEMM_N}³"),
                    bytes: (GEMM_N * GEMM_N * 4) as u64,
                    allocations: 3 * g,
                    trace: Box::new(move |bases| bases.chunks(3).try_for_each(|abc| blas.sgemm(GEMM_N, abc[0], abc[1], abc[2]))),
                });
            }
            None
        }
        Err(why) => Some(format!("cuBLAS rows skipped: cuBLAS did not load ({why})")),
    };
    rt.free(workspace).map_err(err)?;
    rt.stream_destroy(stream).map_err(err)?;
    alone.print();
    launched.print();
    println!("\nFlattened nodes:\n{}\n", notes.join("\n"));
    if let Some(note) = gemm_note {
        println!("{note}\n");
    }
    if failed.is_empty() { Ok(()) } else { Err(failed.join("; ")) }
}

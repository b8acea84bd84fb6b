//! Scenario `update`: moving 10 % of the allocations of a command buffer of N kernel nodes.
//!
//! Each node is `rcb_test_add_f32(out, x, y, n)` over its own three allocations (the test
//! kernel with the most pointer parameters: 3 pointers + 1 value, so 3 sites per node, not the
//! 4 + 2 of the design's target); every tenth node's allocations move, so 10 % of the
//! allocations and 10 % of the nodes are touched. Measured in one run, medians:
//! (a) re-record + instantiate, (b) re-record + whole-graph exec update, (c) the floor: only the
//! exec SetParams calls of the touched nodes, (d) `rcb_cmdbuf_update_allocations` (the executable
//! graphs of (b)–(d) have run once, see [`crate::warm`]); then the same
//! update on a nested command buffer (template setters) and those template setters alone, whose
//! difference is the library's own host cost, given the whole new table
//! (`rcb_cmdbuf_update_allocations`) and given only the moved allocations
//! (`rcb_cmdbuf_move_allocations`).

use crate::table::{Table, median_ns, ratio, time};
use crate::{kernels, warm};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::kernel_args::{ArgKind, KernelArg, pack};
use rocm_cmdbuf::runtime::{Exec, Function, Graph, KernelParams, Node, Runtime};
use std::ffi::c_void;

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
        Ok(Layout { a, b, moved })
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
        pack(&args).expect("four valid arguments").blob
    }

    pub(crate) fn free(&self, rt: &dyn Runtime) -> R<()> {
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
        let n = ELEMENTS;
        let mut prev: Option<rcb_node> = None;
        for i in 0..nodes {
            let ptrs = [layout.a[3 * i], layout.a[3 * i + 1], layout.a[3 * i + 2]];
            let mut args: Vec<rcb_kernel_arg> = ptrs
                .iter()
                .map(|p| rcb_kernel_arg { value: p as *const u64 as *const c_void, size: 8, kind: RCB_ARG_DEVICE_PTR })
                .collect();
            args.push(rcb_kernel_arg { value: &n as *const u64 as *const c_void, size: 8, kind: RCB_ARG_VALUE });
            let launch = rcb_kernel_launch {
                function: f.0,
                grid: [1, 1, 1],
                block: [ELEMENTS as u32, 1, 1],
                shared_mem_bytes: 0,
                args: args.as_ptr(),
                num_args: args.len(),
            };
            let mut node = 0;
            let deps: &[rcb_node] = prev.as_slice();
            check(rcb_cmdbuf_add_kernel(cb, deps.as_ptr(), deps.len(), &launch, &mut node), "rcb_cmdbuf_add_kernel")?;
            prev = Some(node);
        }
        check(rcb_cmdbuf_finalize(cb), "rcb_cmdbuf_finalize")?;
    }
    Ok(cb)
}

/// Times an address update of `cb` alternating between the two placements, checking every
/// report: the whole table (`rcb_cmdbuf_update_allocations`) or only what moved
/// (`rcb_cmdbuf_move_allocations`).
fn time_update(cb: *mut rcb_cmdbuf, layout: &Layout, runs: usize, touched: usize, only_moves: bool) -> R<f64> {
    let tables = [layout.table(false), layout.table(true)];
    let moves = [layout.moves(false), layout.moves(true)];
    let mut second = false;
    let mut failure = None;
    let ns = median_ns(runs, || {
        second = !second;
        let mut report = rcb_update_report::default();
        let s = if only_moves {
            let m = &moves[usize::from(second)];
            // SAFETY: a live handle, m.len() moves and a writable report.
            unsafe { rcb_cmdbuf_move_allocations(cb, m.as_ptr(), m.len(), &mut report) }
        } else {
            let t = &tables[usize::from(second)];
            // SAFETY: a live handle, a table of t.len() entries and a writable report.
            unsafe { rcb_cmdbuf_update_allocations(cb, t.as_ptr(), t.len(), &mut report) }
        };
        if s != RCB_OK || report.needs_rerecord != 0 || report.updated_nodes as usize != touched {
            failure = Some(format!("address update: status {s}, report {report:?}"));
        }
    });
    failure.map_or(Ok(ns), Err)
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

pub fn run(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let f = kernels::load(rt, "rcb_test_add_f32")?;
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let sizes: &[usize] = if quick { &[100, 1000] } else { &[100, 1000, 10_000] };
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
    for &n in sizes {
        let runs = if quick {
            5
        } else if n >= 10_000 {
            7
        } else {
            21
        };
        let layout = Layout::new(rt, n)?;
        let touched: Vec<usize> = (0..n).filter(|i| i % 10 == 0).collect();
        let sites = 3 * touched.len();
        let blobs = [(0..n).map(|i| layout.blob(i, false)).collect::<Vec<_>>(), (0..n).map(|i| layout.blob(i, true)).collect::<Vec<_>>()];
        let mut failure: Option<String> = None;
        let mut note = |r: R<()>| {
            if let Err(e) = r {
                failure.get_or_insert(e);
            }
        };

        let mut flip = false;
        let a = median_ns(runs, || {
            flip = !flip;
            note((|| {
                let (g, _) = build_graph(rt, f, &blobs[usize::from(flip)])?;
                let e = rt.instantiate(g).map_err(err)?;
                rt.exec_destroy(e).map_err(err)?;
                rt.graph_destroy(g).map_err(err)
            })());
        });

        let (g0, nodes) = build_graph(rt, f, &blobs[0])?;
        let exec: Exec = rt.instantiate(g0).map_err(err)?;
        warm::exec(rt, exec, stream)?;
        let b = median_ns(runs, || {
            flip = !flip;
            note((|| {
                let (g, _) = build_graph(rt, f, &blobs[usize::from(flip)])?;
                rt.direct().exec_update(exec, g).map_err(err)?;
                rt.graph_destroy(g).map_err(err)
            })());
        });
        let c = median_ns(runs, || {
            flip = !flip;
            for &i in &touched {
                note(rt.exec_kernel_node_set(exec, nodes[i], &params(f, &blobs[usize::from(flip)][i])).map_err(err));
            }
        });
        let template = median_ns(runs, || {
            flip = !flip;
            for &i in &touched {
                note(rt.kernel_node_set(nodes[i], &params(f, &blobs[usize::from(flip)][i])).map_err(err));
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        rt.exec_destroy(exec).map_err(err)?;
        rt.graph_destroy(g0).map_err(err)?;

        let primary = record_cmdbuf(f, &layout, n, false, None)?;
        let d = warm::cmdbuf(rt, primary, stream).and_then(|()| time_update(primary, &layout, runs, touched.len(), false));
        let nested = record_cmdbuf(f, &layout, n, true, None)?;
        let e = time_update(nested, &layout, runs, touched.len(), false);
        let m = time_update(nested, &layout, runs, touched.len(), true);
        let quiet = time_still(nested, &layout, if quick { 21 } else { 201 });
        // SAFETY: handles from record_cmdbuf, freed once.
        unsafe {
            rcb_cmdbuf_free(primary);
            rcb_cmdbuf_free(nested);
        }
        let (d, e, m, (whole, none)) = (d?, e?, m?, quiet?);
        layout.free(rt)?;

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
        ]);
        let own = |total: f64| (total - template).max(0.0);
        host.row(vec![
            n.to_string(),
            sites.to_string(),
            time(template),
            time(e),
            time(own(e)),
            time(own(e) / sites as f64),
            time(m),
            time(own(m)),
            time(own(m) / sites as f64),
        ]);
        let entries = 3 * n;
        still.row(vec![n.to_string(), entries.to_string(), time(whole), format!("{:.2} ns", whole / entries as f64), time(none)]);
    }
    rt.stream_destroy(stream).map_err(err)?;
    main.print();
    host.print();
    still.print();
    Ok(())
}

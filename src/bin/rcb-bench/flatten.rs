//! Scenario `flatten`: a traced sub-graph whose allocations all move between records.
//! Baseline, what XLA does today: re-trace the sub-graph under stream capture and push it to the
//! parent's child node (`exec_child_node_set`). Measured: the sub-graph flattened into a primary
//! command buffer once, then `rcb_cmdbuf_update_allocations` (pointer sites found by scanning
//! the captured parameters). Both executable graphs have run once (see [`crate::warm`]).
//!
//! Two workloads: K plain kernels (the trace is only the launches) and, when cuBLAS loads, G
//! SGEMMs traced through cuBLAS (the trace includes the library's host work, as for XLA's GEMM
//! and custom-call commands).

use crate::cublas::Cublas;
use crate::table::{Table, median_ns, ratio, time};
use crate::warm;
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{CaptureMode, Function, Graph, KernelParams, Runtime, Stream};
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
        rt.launch_kernel(&k, stream).map_err(err)
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
    let mut report = rcb_flatten_report { flattened: 0, nodes: 0, sites: 0, reason: [0; RCB_FLATTEN_REASON_LEN] };
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

/// One row: re-capture + child update vs update_allocations, alternating two placements.
fn measure(rt: &dyn Runtime, stream: Stream, w: &Workload<'_>, runs: usize) -> R<Vec<String>> {
    let placements: Vec<Vec<u64>> = (0..2)
        .map(|_| (0..w.allocations).map(|_| rt.malloc(0, w.bytes as usize).map_err(err)).collect::<R<Vec<u64>>>())
        .collect::<R<_>>()?;
    let row = measure_on(rt, stream, w, &placements, runs);
    for p in placements.iter().flatten() {
        rt.free(*p).map_err(err)?;
    }
    row
}

fn measure_on(rt: &dyn Runtime, stream: Stream, w: &Workload<'_>, placements: &[Vec<u64>], runs: usize) -> R<Vec<String>> {
    // Baseline: a parent with the captured sub-graph as a child node.
    let first = captured(rt, stream, || (w.trace)(&placements[0]))?;
    let parent = rt.graph_create().map_err(err)?;
    let child = rt.add_child_node(parent, &[], first).map_err(err)?;
    let exec = rt.instantiate(parent).map_err(err)?;
    warm::exec(rt, exec, stream)?;
    let mut failure: Option<String> = None;
    let mut flip = false;
    let recapture = median_ns(runs, || {
        flip = !flip;
        let r = captured(rt, stream, || (w.trace)(&placements[usize::from(flip)])).and_then(|g| {
            let set = rt.exec_child_node_set(exec, child, g).map_err(err);
            rt.graph_destroy(g).map_err(err).and(set)
        });
        if let Err(e) = r {
            failure.get_or_insert(e);
        }
    });
    rt.exec_destroy(exec).map_err(err)?;
    rt.graph_destroy(parent).map_err(err)?;

    let tables = [table(&placements[0], w.bytes), table(&placements[1], w.bytes)];
    let built = flattened(first, &tables[0]);
    rt.graph_destroy(first).map_err(err)?;
    let (cb, nodes, sites) = built?;
    if let Err(e) = warm::cmdbuf(rt, cb, stream) {
        // SAFETY: the handle from `flattened`, freed once.
        unsafe { rcb_cmdbuf_free(cb) };
        return Err(e);
    }
    let patch = median_ns(runs, || {
        flip = !flip;
        let t = &tables[usize::from(flip)];
        let mut report = rcb_update_report::default();
        // SAFETY: a live handle, a table of t.len() entries and a writable report.
        let s = unsafe { rcb_cmdbuf_update_allocations(cb, t.as_ptr(), t.len(), &mut report) };
        if s != RCB_OK || report.needs_rerecord != 0 || report.updated_nodes == 0 {
            failure.get_or_insert(format!("update_allocations: status {s}, report {report:?}"));
        }
    });
    // SAFETY: the handle from `flattened`, freed once.
    unsafe { rcb_cmdbuf_free(cb) };
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(vec![w.label.clone(), nodes.to_string(), sites.to_string(), time(recapture), time(patch), ratio(recapture, patch)])
}

pub fn run(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let f = crate::kernels::load(rt, "rcb_test_add_f32")?;
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let runs = if quick { 5 } else { 31 };
    let mut out = Table::new(
        format!("flatten: patch a flattened traced sub-graph (all allocations moved) vs re-trace it, on {}", rt.info().backend.name()),
        &["traced sub-graph", "nodes", "sites", "re-trace + exec child update", "update_allocations", "speed-up"],
    );
    let mut failed = Vec::new();
    let mut row = |w: &Workload<'_>| match measure(rt, stream, w, runs) {
        Ok(cells) => out.row(cells),
        Err(e) => {
            failed.push(format!("{}: {e}", w.label));
            out.row(vec![w.label.clone(), "failed".into(), "".into(), "".into(), "".into(), "".into()]);
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
    out.print();
    if let Some(note) = gemm_note {
        println!("{note}\n");
    }
    if failed.is_empty() { Ok(()) } else { Err(failed.join("; ")) }
}

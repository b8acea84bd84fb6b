//! Scenario `flatten`: a traced sub-graph of K kernels whose allocations all move between
//! records. Baseline, what XLA does today: re-capture the sub-graph on a stream and push it to
//! the parent's child node (`exec_child_node_set`). Measured: the sub-graph flattened into a
//! primary command buffer once, then `rcb_cmdbuf_update_allocations` (every kernel touched,
//! pointer sites found by scanning the captured parameters).

use crate::table::{Table, median_ns, ratio, time};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{CaptureMode, Function, Graph, KernelParams, Runtime, Stream};
use std::ptr::{null, null_mut};

const ELEMENTS: u64 = 16;
const BYTES: u64 = ELEMENTS * 4;

type R<T> = Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `out, x, y, n` for `rcb_test_add_f32`.
fn blob(bases: &[u64], node: usize) -> Vec<u8> {
    [bases[3 * node], bases[3 * node + 1], bases[3 * node + 2], ELEMENTS].iter().flat_map(|v| v.to_ne_bytes()).collect()
}

/// Captures the chain of K kernels over `bases` (3 allocations per kernel).
pub(crate) fn capture(rt: &dyn Runtime, f: Function, stream: Stream, bases: &[u64]) -> R<Graph> {
    rt.begin_capture(stream, CaptureMode::ThreadLocal).map_err(err)?;
    let mut issued = Ok(());
    for node in 0..bases.len() / 3 {
        let args = blob(bases, node);
        let k = KernelParams { function: f, grid: [1, 1, 1], block: [ELEMENTS as u32, 1, 1], shared_mem_bytes: 0, args: &args };
        issued = issued.and_then(|()| rt.launch_kernel(&k, stream));
    }
    let g = rt.end_capture(stream).map_err(err)?;
    issued.map_err(err).map(|()| g)
}

fn table(bases: &[u64]) -> Vec<rcb_allocation> {
    bases.iter().map(|&base| rcb_allocation { base, size: BYTES }).collect()
}

fn check(s: rcb_status, what: &str) -> R<()> {
    if s == RCB_OK { Ok(()) } else { Err(format!("{what}: status {s}")) }
}

/// A primary command buffer holding the flattened capture; returns it with its site count.
fn flattened(rt: &dyn Runtime, f: Function, stream: Stream, bases: &[u64]) -> R<(*mut rcb_cmdbuf, u32)> {
    let g = capture(rt, f, stream, bases)?;
    let mut cb = null_mut();
    let mut group = 0;
    let mut report = rcb_flatten_report { flattened: 0, nodes: 0, sites: 0, reason: [0; RCB_FLATTEN_REASON_LEN] };
    let t = table(bases);
    // SAFETY: valid out-pointers and arrays that outlive each call.
    let built = unsafe {
        check(rcb_cmdbuf_new(0, &mut cb), "rcb_cmdbuf_new")
            .and_then(|()| check(rcb_cmdbuf_set_allocations(cb, t.as_ptr(), t.len()), "rcb_cmdbuf_set_allocations"))
            .and_then(|()| check(rcb_cmdbuf_add_flattened_child(cb, null(), 0, null(), g.0, &mut group, &mut report), "rcb_cmdbuf_add_flattened_child"))
            .and_then(|()| check(rcb_cmdbuf_finalize(cb), "rcb_cmdbuf_finalize"))
    };
    rt.graph_destroy(g).map_err(err)?;
    built?;
    if report.flattened != 1 {
        return Err("the captured sub-graph was not flattened".into());
    }
    Ok((cb, report.sites))
}

pub fn run(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let f = crate::kernels::load(rt, "rcb_test_add_f32")?;
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let mut out = Table::new(
        format!("flatten: patch a flattened traced sub-graph of K kernels (all allocations moved) vs re-capture it, on {}", rt.info().backend.name()),
        &["K", "sites", "re-capture + exec child update", "update_allocations", "speed-up"],
    );
    for k in [10usize, 100] {
        let runs = if quick { 5 } else { 31 };
        let placements: Vec<Vec<u64>> =
            (0..2).map(|_| (0..3 * k).map(|_| rt.malloc(0, BYTES as usize).map_err(err)).collect::<R<Vec<u64>>>()).collect::<R<_>>()?;

        // Baseline: a parent with the captured sub-graph as a child node.
        let first = capture(rt, f, stream, &placements[0])?;
        let parent = rt.graph_create().map_err(err)?;
        let child = rt.add_child_node(parent, &[], first).map_err(err)?;
        let exec = rt.instantiate(parent).map_err(err)?;
        rt.graph_destroy(first).map_err(err)?;
        let mut failure: Option<String> = None;
        let mut flip = false;
        let recapture = median_ns(runs, || {
            flip = !flip;
            let r = capture(rt, f, stream, &placements[usize::from(flip)]).and_then(|g| {
                let set = rt.exec_child_node_set(exec, child, g).map_err(err);
                rt.graph_destroy(g).map_err(err).and(set)
            });
            if let Err(e) = r {
                failure.get_or_insert(e);
            }
        });
        rt.exec_destroy(exec).map_err(err)?;
        rt.graph_destroy(parent).map_err(err)?;

        let (cb, sites) = flattened(rt, f, stream, &placements[0])?;
        let tables = [table(&placements[0]), table(&placements[1])];
        let patch = median_ns(runs, || {
            flip = !flip;
            let t = &tables[usize::from(flip)];
            let mut report = rcb_update_report::default();
            // SAFETY: a live handle, a table of t.len() entries and a writable report.
            let s = unsafe { rcb_cmdbuf_update_allocations(cb, t.as_ptr(), t.len(), &mut report) };
            if s != RCB_OK || report.needs_rerecord != 0 || report.updated_nodes as usize != k {
                failure.get_or_insert(format!("update_allocations: status {s}, report {report:?}"));
            }
        });
        // SAFETY: the handle from `flattened`, freed once.
        unsafe { rcb_cmdbuf_free(cb) };
        for p in placements.iter().flatten() {
            rt.free(*p).map_err(err)?;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        out.row(vec![k.to_string(), sites.to_string(), time(recapture), time(patch), ratio(recapture, patch)]);
    }
    rt.stream_destroy(stream).map_err(err)?;
    out.print();
    Ok(())
}

//! Scenario `budget`: what the executable-graph update budget costs, and whether the runtime's
//! device memory grows with in-place updates (it does on ROCm: ROCm/rocm-systems issue 10713).
//!
//! Cost: the `update` scenario's command buffer (N `rcb_test_add_f32` nodes, 3 allocations
//! each, every tenth node's allocations moved per step). Measured in one run: (u) one step with
//! the budget off (`rcb_cmdbuf_move_allocations`, the touched nodes pushed); (r) one step that
//! re-instantiates instead (budget of 1 byte: the template brought up to date from the library's
//! parameters, instantiated, the old executable retired), with its two parts alone: (t) the
//! template refresh and (i) instantiate + destroy of the template; then, at the default budget,
//! the steps between two re-instantiations (k, from the library's estimate) and the amortised
//! step ((k - 1)·u + r) / k, next to the mean step measured with the budget off (m0) and at the
//! default budget (m), the two command buffers taking turns, each the median of 7 cycles' means
//! (a cycle: k steps, one re-instantiation); and the host cost of a launch with the budget off
//! and on (on, an event follows each launch).
//!
//! Memory: a 32-node graph (the size of the public report), every allocation moved per update,
//! free device memory read after a launch every tenth of the run: through the library with the
//! budget off (32 exec SetParams per update), with the default HIP budget, and as whole-graph
//! exec updates of alternating templates (what the report measured).

use crate::table::{Table, median_ns, median_ns_settled, time};
use crate::update::{Layout, build_graph, record_cmdbuf};
use crate::{kernels, warm};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Function, Runtime, Stream};
use rocm_cmdbuf::{DEFAULT_BUDGET_BYTES, NODE_OVERHEAD_BYTES};
use std::time::Instant;

type R<T> = Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Bytes of one node's packed arguments: 3 pointers and a 64-bit count.
const ADD_ARGS: u64 = 32;

/// A primary command buffer recorded over `layout`, freed on drop.
struct Cmdbuf(*mut rcb_cmdbuf);

impl Drop for Cmdbuf {
    fn drop(&mut self) {
        // SAFETY: a handle from record_cmdbuf, freed once.
        unsafe { rcb_cmdbuf_free(self.0) };
    }
}

impl Cmdbuf {
    fn new(rt: &dyn Runtime, f: Function, layout: &Layout, nodes: usize, budget: u64, stream: Stream) -> R<Cmdbuf> {
        let cb = Cmdbuf(record_cmdbuf(f, layout, nodes, false, Some(budget))?);
        warm::cmdbuf(rt, cb.0, stream)?;
        Ok(cb)
    }

    /// Moves the layout's moving allocations to their other placement; checks the report.
    fn step(&self, layout: &Layout, second: bool, touched: usize) -> R<u32> {
        let moves = layout.moves(second);
        let mut report = rcb_update_report::default();
        // SAFETY: a live handle, moves.len() moves and a writable report.
        let s = unsafe { rcb_cmdbuf_move_allocations(self.0, moves.as_ptr(), moves.len(), &mut report) };
        if s != RCB_OK || report.needs_rerecord != 0 || report.updated_nodes as usize != touched {
            return Err(format!("move_allocations: status {s}, report {report:?}"));
        }
        Ok(report.reinstantiated)
    }

    fn counters(&self) -> R<rcb_counters> {
        let mut c = rcb_counters::default();
        // SAFETY: a live handle and a writable struct of that size.
        match unsafe { rcb_counters_get(self.0, &mut c) } {
            RCB_OK => Ok(c),
            s => Err(format!("rcb_counters_get: status {s}")),
        }
    }

    fn launch(&self, stream: Stream) -> R<()> {
        // SAFETY: a live, finalized handle and a stream of the runtime.
        match unsafe { rcb_cmdbuf_launch(self.0, stream.0) } {
            RCB_OK => Ok(()),
            s => Err(format!("rcb_cmdbuf_launch: status {s}")),
        }
    }
}

/// Cycles of k steps (one re-instantiation each) measured at the default budget.
const CYCLES: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `f` `runs` times, alternating placements, and returns the median step; any failure
/// is returned instead.
fn median_step(runs: usize, mut f: impl FnMut(bool) -> R<()>) -> R<f64> {
    let mut second = false;
    let mut failure = None;
    let ns = median_ns(runs, || {
        second = !second;
        if let Err(e) = f(second) {
            failure.get_or_insert(e);
        }
    });
    failure.map_or(Ok(ns), Err)
}

fn cost(rt: &'static dyn Runtime, f: Function, stream: Stream, quick: bool) -> R<()> {
    let sizes: &[usize] = if quick { &[100] } else { &[100, 1000] };
    let mut table = Table::new(
        format!(
            "budget: the amortised cost of re-instantiating, per step (N rcb_test_add_f32 nodes, 10 % moved per step, default budget {} MiB), on {}",
            DEFAULT_BUDGET_BYTES >> 20,
            rt.info().backend.name()
        ),
        &[
            "N",
            "(u) step, budget off",
            "(r) step that re-instantiates",
            "(t) template refresh",
            "(i) instantiate + destroy",
            "k: steps per re-instantiation",
            "amortised step",
            "(m0) mean step, budget off",
            "(m) mean step, default budget",
            "(m)/(m0)",
            "launch, budget off",
            "launch, budget on",
        ],
    );
    for &n in sizes {
        let runs = if quick { 7 } else { 31 };
        let layout = Layout::moving_every(rt, n, 10)?;
        let touched = n.div_ceil(10);

        let off = Cmdbuf::new(rt, f, &layout, n, 0, stream)?;
        let u = median_step(runs, |second| off.step(&layout, second, touched).map(drop))?;
        let launch_off = median_ns_settled(runs, || drop(rt.stream_synchronize(stream)), || drop(off.launch(stream)));
        rt.stream_synchronize(stream).map_err(err)?;
        // The template refresh alone: an untimed update leaves the template behind, graph()
        // catches up.
        let (mut second, mut failure) = (false, None);
        let mut g = std::ptr::null_mut();
        let mut refreshed = RCB_OK;
        let t = median_ns_settled(
            runs,
            || {
                second = !second;
                if let Err(e) = off.step(&layout, second, touched) {
                    failure.get_or_insert(e);
                }
            },
            || {
                // SAFETY: a live handle and a writable pointer.
                let s = unsafe { rcb_cmdbuf_graph(off.0, &mut g) };
                if s != RCB_OK {
                    refreshed = s;
                }
            },
        );
        if let Some(e) = failure {
            return Err(e);
        }
        if refreshed != RCB_OK {
            return Err(format!("rcb_cmdbuf_graph: status {refreshed}"));
        }
        let i = median_step(runs, |_| {
            let e = rt.instantiate(rocm_cmdbuf::runtime::Graph(g)).map_err(err)?;
            rt.exec_destroy(e).map_err(err)
        })?;

        let every = Cmdbuf::new(rt, f, &layout, n, 1, stream)?;
        let r = median_step(runs, |second| match every.step(&layout, second, touched)? {
            1 => Ok(()),
            _ => Err("a 1-byte budget did not re-instantiate".into()),
        })?;
        drop(every);

        // Pushes of the touched nodes fit k - 1 times; the k-th step re-instantiates.
        let per_step = touched as u64 * (ADD_ARGS + NODE_OVERHEAD_BYTES);
        let k = DEFAULT_BUDGET_BYTES / per_step + 1;
        let amortised = ((k - 1) as f64 * u + r) / k as f64;
        let default = Cmdbuf::new(rt, f, &layout, n, DEFAULT_BUDGET_BYTES, stream)?;
        // Both command buffers take the same steps in turn, so that whatever else the machine
        // does falls on both alike; each cycle of k steps holds one re-instantiation, and the
        // median of the cycles' means leaves out a cycle that the machine interrupted.
        let (mut cycles_off, mut cycles_on) = (Vec::new(), Vec::new());
        for cycle in 0..CYCLES {
            let (mut total_off, mut total_on) = (0.0, 0.0);
            for s in cycle * k as usize..(cycle + 1) * k as usize {
                let start = Instant::now();
                off.step(&layout, s % 2 == 0, touched)?;
                total_off += start.elapsed().as_nanos() as f64;
                let start = Instant::now();
                default.step(&layout, s % 2 == 0, touched)?;
                total_on += start.elapsed().as_nanos() as f64;
            }
            cycles_off.push(total_off / k as f64);
            cycles_on.push(total_on / k as f64);
        }
        let (m_off, m) = (median(cycles_off), median(cycles_on));
        let c = default.counters()?;
        if c.reinstantiations != CYCLES as u64 {
            return Err(format!("{CYCLES} cycles at the default budget re-instantiated {} times", c.reinstantiations));
        }
        let launch_on = median_ns_settled(runs, || drop(rt.stream_synchronize(stream)), || default.launch(stream).unwrap());
        rt.stream_synchronize(stream).map_err(err)?;
        drop((default, off));
        layout.free(rt)?;
        table.row(vec![
            n.to_string(),
            time(u),
            time(r),
            time(t),
            time(i),
            k.to_string(),
            time(amortised),
            time(m_off),
            time(m),
            format!("{:.3}", m / m_off),
            time(launch_off),
            time(launch_on),
        ]);
    }
    table.print();
    Ok(())
}

fn memory(rt: &'static dyn Runtime, f: Function, stream: Stream, quick: bool) -> R<()> {
    const NODES: usize = 32;
    let updates: usize = if quick { 2_000 } else { 100_000 };
    let samples = 10;
    let layout = Layout::moving_every(rt, NODES, 1)?;
    let off = Cmdbuf::new(rt, f, &layout, NODES, 0, stream)?;
    let on = Cmdbuf::new(rt, f, &layout, NODES, DEFAULT_BUDGET_BYTES, stream)?;
    let blobs =
        [(0..NODES).map(|i| layout.blob(i, false)).collect::<Vec<_>>(), (0..NODES).map(|i| layout.blob(i, true)).collect::<Vec<_>>()];
    let (g0, _) = build_graph(rt, f, &blobs[0])?;
    let (g1, _) = build_graph(rt, f, &blobs[1])?;
    let exec = rt.instantiate(g0).map_err(err)?;
    warm::exec(rt, exec, stream)?;
    let free_now = || rt.device_memory(0).map(|(free, _)| free as i64).map_err(err);

    let mut rows: Vec<Vec<String>> = (0..=samples).map(|s| vec![(s * updates / samples).to_string()]).collect();
    // A series: its name, update number u, and a launch that waits.
    type Update<'a> = Box<dyn FnMut(usize) -> R<()> + 'a>;
    type Launch<'a> = Box<dyn Fn() -> R<()> + 'a>;
    let series: [(&str, Update<'_>, Launch<'_>); 3] = [
        ("library, budget off", Box::new(|u| off.step(&layout, u % 2 == 1, NODES).map(drop)), Box::new(|| warm::cmdbuf(rt, off.0, stream))),
        (
            "library, default budget",
            Box::new(|u| on.step(&layout, u % 2 == 1, NODES).map(drop)),
            Box::new(|| warm::cmdbuf(rt, on.0, stream)),
        ),
        (
            "whole-graph exec update",
            Box::new(|u| rt.direct().exec_update(exec, if u % 2 == 1 { g1 } else { g0 }).map_err(err)),
            Box::new(|| warm::exec(rt, exec, stream)),
        ),
    ];
    let mut header = vec!["updates".to_string()];
    let start = Instant::now();
    for (name, mut update, launch) in series {
        header.push(format!("{name}: free MiB"));
        header.push(format!("{name}: taken, KiB"));
        launch()?;
        let first = free_now()?;
        for (s, row) in rows.iter_mut().enumerate() {
            if s > 0 {
                for u in (s - 1) * updates / samples..s * updates / samples {
                    update(u + 1)?;
                }
                launch()?;
            }
            let free = free_now()?;
            row.push(format!("{:.1}", free as f64 / (1 << 20) as f64));
            row.push(format!("{:+}", (first - free) / 1024));
        }
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(
        format!(
            "budget: device memory taken over {updates} in-place updates of a {NODES}-node graph (every allocation moved each update), on {} ({:.1} s)",
            rt.info().backend.name(),
            start.elapsed().as_secs_f64()
        ),
        &header,
    );
    rows.into_iter().for_each(|r| table.row(r));
    table.print();
    rt.exec_destroy(exec).map_err(err)?;
    rt.graph_destroy(g0).map_err(err)?;
    rt.graph_destroy(g1).map_err(err)?;
    drop((off, on));
    layout.free(rt)
}

pub fn run(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let f = kernels::load(rt, "rcb_test_add_f32")?;
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let outcome = cost(rt, f, stream, quick).and_then(|()| memory(rt, f, stream, quick));
    rt.stream_destroy(stream).map_err(err)?;
    outcome
}

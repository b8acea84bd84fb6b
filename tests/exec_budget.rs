//! The executable-graph update budget through the C ABI: re-instantiation exactly when the
//! estimate says, results right across it, old executables kept until their launches finish,
//! child nodes updated in place replayed, re-record sessions that cross the budget, failures
//! that leave updates correct; and on the software GPU's model of ROCm's kernel-argument leak,
//! that without the budget updates exhaust the device while with it they never do; and a
//! randomized property (`launches_never_outlive_what_they_run_over_random_sequences`): no
//! executable graph or kept graph is destroyed while a launch of it may run, on any stream or
//! thread.
//!
//! The soak (`soak_a_million_updates_of_a_thousand_nodes`) is ignored in the default run; CI
//! runs it in a release build (`ci/test.sh`). Every test holds `common::serial()`: hipsim's
//! quirks, pool and live counts are process-wide.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod cmdbuf_helpers;
mod common;

use cmdbuf_helpers::*;
use common::rng::XorShift;
use common::{args, fails, ok};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::Runtime;
use rocm_cmdbuf::{MAX_KEPT_EXECS, NODE_OVERHEAD_BYTES};
use std::ptr::null;

/// Words each fill node writes; its allocation's size in bytes is `SLICE`.
const WORDS: u64 = 16;
const SLICE: u64 = WORDS * 4;
/// Where home `home` of allocation `i` of `n` lies in a buffer of fills, in `SLICE`s. Each home
/// is followed by a gap of its size: an address one past an allocation's end may be the end of
/// a range in it (`src/cmdbuf/allocations.rs`), so with allocations packed end to end every
/// fill's pointer could come from the allocation before it too, and these allocations move one
/// at a time.
fn slot(n: usize, i: usize, home: usize) -> usize {
    2 * (home * n + i)
}

/// Bytes of a buffer of fills for `n` allocations: two homes each, and their gaps.
fn fleet_bytes(n: usize) -> usize {
    4 * n * SLICE as usize
}

/// What the library charges a push of a fill node: 24 argument bytes plus the overhead.
const FILL_PUSH: u64 = 24 + NODE_OVERHEAD_BYTES;

fn counters(cb: &Cb) -> rcb_counters {
    let mut c = rcb_counters::default();
    ok(unsafe { rcb_counters_get(cb.0, &mut c) });
    c
}

fn budget_of(cb: &Cb) -> (u64, u64) {
    let (mut budget, mut spent) = (0, 0);
    ok(unsafe { rcb_cmdbuf_exec_update_budget(cb.0, &mut budget, &mut spent) });
    (budget, spent)
}

/// `n` independent fill nodes; node `i` fills allocation `i` with `i + 1`. Each allocation has
/// two homes in one device buffer, so a launch's whole output is one read and a stale address
/// shows as a value in the wrong home.
struct Fleet {
    rt: &'static dyn Runtime,
    cb: Cb,
    buffer: u64,
    n: usize,
    /// Which home each allocation is in now.
    home: Vec<usize>,
    nodes: Vec<rcb_node>,
}

impl Fleet {
    fn new(gpu: &Gpu, n: usize, budget: u64) -> Fleet {
        let buffer = gpu.rt.malloc(0, fleet_bytes(n)).expect("malloc");
        let cb = Cb::primary();
        ok(unsafe { rcb_cmdbuf_set_exec_update_budget(cb.0, budget) });
        let mut fleet = Fleet { rt: gpu.rt, cb, buffer, n, home: vec![0; n], nodes: Vec::with_capacity(n) };
        let allocs: Vec<(u64, u64)> = (0..n).map(|i| (fleet.at(i, 0), SLICE)).collect();
        fleet.cb.set_allocs(&allocs);
        for i in 0..n {
            let node = fleet.cb.kernel(&[], gpu.k.fill_u32, WORDS, &args::fill(fleet.at(i, 0), i as u32 + 1, WORDS));
            fleet.nodes.push(node);
        }
        fleet.cb.finalize();
        fleet
    }

    fn at(&self, i: usize, home: usize) -> u64 {
        self.buffer + slot(self.n, i, home) as u64 * SLICE
    }

    /// Moves allocation `i` to its other home.
    fn flip(&mut self, i: usize) -> rcb_update_report {
        self.home[i] ^= 1;
        let r = self.cb.move_allocs(&[(i as u64, self.at(i, self.home[i]))]);
        assert_eq!((r.moved_allocations, r.needs_rerecord), (1, 0), "move of {i}");
        r
    }

    /// Clears both homes of everything, launches, and checks that each node wrote its value to
    /// its allocation's current home and nothing to the other or to a gap.
    fn launch_and_check(&self, gpu: &Gpu) -> Result<(), String> {
        let words = fleet_bytes(self.n) / 4;
        gpu.rt.direct().copy_to_device(self.buffer, &vec![0u8; words * 4]).expect("clear");
        self.cb.launch(gpu);
        let out = common::download_u32(gpu.rt, self.buffer, words);
        for i in 0..self.n {
            for home in 0..2 {
                let want = if home == self.home[i] { i as u32 + 1 } else { 0 };
                let start = slot(self.n, i, home) * WORDS as usize;
                if let Some(w) = out[start..start + WORDS as usize].iter().find(|&&w| w != want) {
                    return Err(format!("node {i}, home {home} (current {}): {w}, want {want}", self.home[i]));
                }
            }
        }
        let gaps = (1..4 * self.n).step_by(2).flat_map(|gap| &out[gap * WORDS as usize..(gap + 1) * WORDS as usize]);
        match gaps.copied().find(|&w| w != 0) {
            Some(w) => Err(format!("a gap between homes holds {w}")),
            None => Ok(()),
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // The command buffer first, while its buffer still exists; `Cb`'s own drop then frees NULL.
        unsafe { rcb_cmdbuf_free(std::mem::replace(&mut self.cb.0, std::ptr::null_mut())) };
        let _ = self.rt.free(self.buffer);
    }
}

#[test]
fn the_budget_reinstantiates_exactly_when_the_estimate_says_and_launches_stay_right() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    // Ten pushes of a fill node fit; the eleventh update re-instantiates instead of pushing.
    let mut f = Fleet::new(&gpu, 8, 10 * FILL_PUSH);
    assert_eq!(budget_of(&f.cb), (10 * FILL_PUSH, 0));
    f.launch_and_check(&gpu).unwrap();
    for step in 1..=60usize {
        let r = f.flip(step % f.n);
        assert_eq!(r.updated_nodes, 1);
        assert_eq!(r.reinstantiated, u32::from(step % 11 == 0), "step {step}");
        let pushes_since = (step % 11) as u64;
        assert_eq!(budget_of(&f.cb).1, pushes_since * FILL_PUSH, "step {step}");
        if step % 4 == 0 {
            f.launch_and_check(&gpu).unwrap_or_else(|e| panic!("step {step}: {e}"));
        }
    }
    f.launch_and_check(&gpu).unwrap();
    let c = counters(&f.cb);
    assert_eq!((c.instantiations, c.reinstantiations), (1 + 5, 5));
    assert_eq!(c.exec_param_pushes, 60 - 5);
    assert_eq!(c.exec_param_push_bytes, 55 * FILL_PUSH);
    // Every old executable's launches finished (each launch was waited for): all destroyed.
    assert_eq!(c.retired_execs, 5);
    assert_eq!(c.fallbacks_total, 0);
}

#[test]
fn a_budget_of_zero_never_reinstantiates_and_the_budget_is_set_before_finalize_only() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let mut f = Fleet::new(&gpu, 4, 0);
    for step in 0..40 {
        assert_eq!(f.flip(step % 4).reinstantiated, 0);
    }
    f.launch_and_check(&gpu).unwrap();
    let c = counters(&f.cb);
    assert_eq!((c.instantiations, c.reinstantiations, c.exec_param_pushes), (1, 0, 40));
    assert_eq!(budget_of(&f.cb), (0, 40 * FILL_PUSH), "what was pushed is still counted");
    fails(unsafe { rcb_cmdbuf_set_exec_update_budget(f.cb.0, 1) }, RCB_STATUS_INVALID_STATE, "before the first finalize");
    let nested = Cb::nested();
    fails(unsafe { rcb_cmdbuf_set_exec_update_budget(nested.0, 1) }, RCB_STATUS_INVALID_STATE, "nested");
    fails(unsafe { rcb_cmdbuf_exec_update_budget(f.cb.0, std::ptr::null_mut(), &mut 0) }, RCB_STATUS_NULL_ARGUMENT, "budget");
}

#[test]
fn an_old_executable_is_destroyed_only_after_its_launches_finish() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let sim = common::hipsim("old and new executables alive, then the old destroyed (the runtime's live objects)");
    let x = gpu.upload(&[0.0; WORDS as usize]);
    let x2 = gpu.upload(&[0.0; WORDS as usize]);
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_set_exec_update_budget(cb.0, FILL_PUSH) });
    cb.set_allocs(&[(x, SLICE)]);
    let sleep = cb.kernel(&[], gpu.k.sleep, 1, &args::sleep(300_000));
    cb.kernel(&[sleep], gpu.k.fill_u32, WORDS, &args::fill(x, 7, WORDS));
    cb.finalize();
    let execs = sim.as_ref().map(|s| s.live_count("exec"));
    // Launched and still sleeping: the first move pushes, the second re-instantiates.
    ok(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) });
    assert_eq!(cb.move_allocs(&[(0, x2)]).reinstantiated, 0);
    assert_eq!(cb.move_allocs(&[(0, x)]).reinstantiated, 1);
    assert_eq!(counters(&cb).retired_execs, 0, "its launch is still running");
    if let (Some(sim), Some(before)) = (&sim, execs) {
        assert_eq!(sim.live_count("exec"), before + 1, "old and new executables both alive");
    }
    // Launching the new one does not wait; the old one is still running.
    ok(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) });
    assert_eq!(counters(&cb).retired_execs, 0);
    gpu.sync();
    assert_eq!(common::download_u32(gpu.rt, x, WORDS as usize), vec![7; WORDS as usize]);
    // The next launch finds the old one's launches finished and destroys it.
    ok(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) });
    assert_eq!(counters(&cb).retired_execs, 1);
    if let (Some(sim), Some(before)) = (&sim, execs) {
        assert_eq!(sim.live_count("exec"), before);
    }
    gpu.sync();
}

/// Found by the fault matrix (tests/faults): a retired executable graph whose destroy failed was
/// leaked with only a log line. The command buffer keeps it and its free destroys it again.
#[test]
fn a_retired_executable_the_runtime_failed_to_destroy_is_destroyed_by_the_free() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let execs = sim.live_count("exec");
    let mut f = Fleet::new(&gpu, 2, FILL_PUSH);
    f.launch_and_check(&gpu).unwrap();
    assert_eq!(f.flip(0).reinstantiated, 0, "one push fits");
    // The old executable's launch has finished: it is destroyed at once, and that fails.
    sim.set_faults("hipGraphExecDestroy:1");
    let r = f.flip(1);
    sim.set_faults("");
    assert_eq!(r.reinstantiated, 1);
    assert_eq!(counters(&f.cb).retired_execs, 0, "the destroy failed");
    assert_eq!(sim.live_count("exec"), execs + 2, "the new executable and the old one the runtime kept");
    f.launch_and_check(&gpu).unwrap();
    ok(unsafe { rcb_cmdbuf_free(std::mem::replace(&mut f.cb.0, std::ptr::null_mut())) });
    assert_eq!(sim.live_count("exec"), execs, "the free destroyed both");
}

/// A nested command buffer holding one fill of `x` with `value`.
fn child_fill(gpu: &Gpu, x: u64, value: u32) -> Cb {
    let child = Cb::nested();
    child.kernel(&[], gpu.k.fill_u32, WORDS, &args::fill(x, value, WORDS));
    child.finalize();
    child
}

/// A primary of `fill(y, 5)` and a child node `fill(x, 1)`, its child updated in place to
/// `fill(x, 2)`.
fn primary_with_updated_child(gpu: &Gpu, budget: u64, x: u64, y: u64) -> (Cb, Cb) {
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_set_exec_update_budget(cb.0, budget) });
    cb.set_allocs(&[(y, SLICE)]);
    cb.kernel(&[], gpu.k.fill_u32, WORDS, &args::fill(y, 5, WORDS));
    let first = child_fill(gpu, x, 1);
    let mut node = 0;
    ok(unsafe { rcb_cmdbuf_add_child(cb.0, null(), 0, first.0, &mut node) });
    cb.finalize();
    let second = child_fill(gpu, x, 2);
    cb.begin_update();
    ok(unsafe { rcb_cmdbuf_update_child(cb.0, node, second.0) });
    cb.finalize();
    (cb, second)
}

#[test]
fn a_child_updated_in_place_keeps_its_new_graph_across_a_reinstantiation() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let (x, y) = (gpu.upload(&[0.0; WORDS as usize]), gpu.upload(&[0.0; WORDS as usize]));
    let y2 = gpu.upload(&[0.0; WORDS as usize]);
    // The child's push (one fill) fits; the move that follows does not.
    let (cb, _child) = primary_with_updated_child(&gpu, FILL_PUSH + 1, x, y);
    assert_eq!(counters(&cb).exec_param_push_bytes, FILL_PUSH, "the child's graph: one fill node");
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, WORDS as usize), vec![2; WORDS as usize]);
    gpu.rt.direct().copy_to_device(x, &[0; SLICE as usize]).unwrap();
    assert_eq!(cb.move_allocs(&[(0, y2)]).reinstantiated, 1);
    cb.launch(&gpu);
    // From the template alone the child would fill 1: its clone was given to the new executable.
    assert_eq!(common::download_u32(gpu.rt, x, WORDS as usize), vec![2; WORDS as usize]);
    assert_eq!(common::download_u32(gpu.rt, y2, WORDS as usize), vec![5; WORDS as usize]);
    let c = counters(&cb);
    assert_eq!((c.reinstantiations, c.fallbacks_total), (1, 0));
    assert_eq!(budget_of(&cb).1, FILL_PUSH, "the replayed child is charged to the new executable");
}

#[test]
fn a_rerecord_that_crosses_the_budget_reinstantiates_in_the_middle() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let mut f = Fleet::new(&gpu, 12, 5 * FILL_PUSH);
    // Re-record every node at its other home (what XLA does after needs_rerecord).
    f.cb.begin_update();
    let allocs: Vec<(u64, u64)> = (0..f.n).map(|i| (f.at(i, 1), SLICE)).collect();
    f.cb.set_allocs(&allocs);
    for i in 0..f.n {
        f.home[i] = 1;
        f.cb.update_kernel(f.nodes[i], gpu.k.fill_u32, WORDS, &args::fill(f.at(i, 1), i as u32 + 1, WORDS));
    }
    f.cb.finalize();
    f.launch_and_check(&gpu).unwrap();
    // Pushes 1-5 fit, the 6th and 11th re-instantiate first: 2 re-instantiations, 12 pushes.
    let c = counters(&f.cb);
    assert_eq!((c.reinstantiations, c.exec_param_pushes), (2, 12));
    assert_eq!(budget_of(&f.cb).1, 2 * FILL_PUSH);
}

#[test]
fn a_failed_or_blocked_reinstantiation_still_updates_correctly() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let mut f = Fleet::new(&gpu, 4, FILL_PUSH);
    f.flip(0);
    sim.set_faults("hipGraphInstantiate:1");
    let r = f.flip(1);
    sim.set_faults("");
    assert_eq!((r.reinstantiated, r.updated_nodes), (0, 1), "pushed to the old executable instead");
    f.launch_and_check(&gpu).unwrap();
    let c = counters(&f.cb);
    assert_eq!((c.fallbacks[RCB_FALLBACK_REINSTANTIATE_FAILED as usize], c.reinstantiations), (1, 0));
    assert_eq!(f.flip(2).reinstantiated, 1, "the next update tries again");
    f.launch_and_check(&gpu).unwrap();

    // A child whose clone cannot be made is not updated: the clone is what keeps the objects
    // its graph owns alive while the executable graph may read them.
    let (x, y) = (gpu.upload(&[0.0; WORDS as usize]), gpu.upload(&[0.0; WORDS as usize]));
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_set_exec_update_budget(cb.0, FILL_PUSH + 1) });
    cb.set_allocs(&[(y, SLICE)]);
    cb.kernel(&[], gpu.k.fill_u32, WORDS, &args::fill(y, 5, WORDS));
    let first = child_fill(&gpu, x, 1);
    let mut node = 0;
    ok(unsafe { rcb_cmdbuf_add_child(cb.0, null(), 0, first.0, &mut node) });
    cb.finalize();
    let second = child_fill(&gpu, x, 2);
    cb.begin_update();
    sim.set_faults("hipGraphClone:1");
    fails(unsafe { rcb_cmdbuf_update_child(cb.0, node, second.0) }, RCB_STATUS_RUNTIME_ERROR, "cloning the child graph");
    sim.set_faults("");
    cb.finalize();
    assert_eq!(counters(&cb).exec_param_pushes, 0, "nothing was pushed");
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, WORDS as usize), vec![1; WORDS as usize]);
}

/// The leak model's pool for a fleet of `n` fill nodes: hipsim stages 288 bytes per fill node
/// (24 argument bytes rounded to 32, plus 256 hidden), so an executable takes `288 n` at
/// instantiation and 288 more per update under the quirk.
const HIPSIM_FILL_SLOT: u64 = 288;

/// Runs `updates` moves of a fleet of `n` nodes under the kernel-argument leak (the silent
/// response: an exhausted pool would show as wrong results, not as an error), checking a launch
/// every `check_every` updates. The budget allows `n` pushes, so an executable never stages
/// more than twice its instantiation; the pool holds three such executables (the live one, a
/// new one being instantiated, and slack for one whose launch is not yet reaped).
/// Returns the fleet and the pool size.
fn leak_run(
    gpu: &Gpu,
    sim: &common::Hipsim,
    n: usize,
    budget_on: bool,
    updates: usize,
    check_every: usize,
) -> (Fleet, u64, Result<(), String>) {
    // The process's update budget is settled by its first command buffer, measuring the
    // runtime's growth (`tests/update_budget_probe.rs`): settled here, before the leak model is
    // on, it finds none and charges every push the fixed figure these tests count with, whichever
    // test runs first.
    rocm_cmdbuf::settle_budget(gpu.rt).expect("settle the update budget");
    let pool = 3 * 2 * n as u64 * HIPSIM_FILL_SLOT;
    sim.set_kernarg_pool(pool);
    sim.set_quirks("kernarg_leak_silent");
    let budget = if budget_on { n as u64 * FILL_PUSH } else { 0 };
    let mut f = Fleet::new(gpu, n, budget);
    let mut outcome = Ok(());
    for step in 1..=updates {
        f.flip(step % n);
        if step % check_every == 0 {
            outcome = f.launch_and_check(gpu).map_err(|e| format!("after {step} updates: {e}"));
            if outcome.is_err() {
                break;
            }
        }
    }
    sim.set_quirks("");
    (f, pool, outcome)
}

#[test]
fn without_the_budget_the_leak_model_is_exhausted() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    // The pool holds 6n slots: n for the instantiation, then 5n updates; the run does 8n.
    let n = 100;
    let (f, pool, outcome) = leak_run(&gpu, &sim, n, false, 8 * n, n);
    let e = outcome.expect_err("a silently kept old address must show");
    assert!(e.contains("after 600 updates"), "the first check past 5n updates fails: {e}");
    assert_eq!(sim.live_count("kernarg_peak"), pool, "filled to the last slot");
    drop(f);
    // The error response: the push fails and the library asks for a re-record.
    sim.set_kernarg_pool(3 * 2 * 4 * HIPSIM_FILL_SLOT);
    sim.set_quirks("kernarg_leak");
    let mut f = Fleet::new(&gpu, 4, 0);
    let refused = (1..100).map(|step| f.flip_report(step % 4)).position(|r| r.needs_rerecord == 1);
    sim.set_quirks("");
    sim.set_kernarg_pool(u64::MAX);
    assert_eq!(refused, Some(20), "24 slots: 4 at instantiation, 20 updates");
    assert_eq!(counters(&f.cb).fallbacks[RCB_FALLBACK_PUSH_FAILED as usize], 1);
}

impl Fleet {
    /// Like [`Fleet::flip`], but any report is returned (the allocation counts as moved).
    fn flip_report(&mut self, i: usize) -> rcb_update_report {
        self.home[i] ^= 1;
        self.cb.move_allocs(&[(i as u64, self.at(i, self.home[i]))])
    }
}

#[test]
fn with_the_budget_the_same_updates_never_exhaust_the_leak_model() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let n = 1000;
    let (f, pool, outcome) = leak_run(&gpu, &sim, n, true, 20 * n, 250);
    outcome.unwrap();
    let peak = sim.live_count("kernarg_peak");
    sim.set_kernarg_pool(u64::MAX);
    assert!(peak <= pool, "peak {peak} within the pool {pool}");
    let c = counters(&f.cb);
    // n pushes fit a budget, the next update re-instantiates: every (n + 1)-th update.
    assert_eq!(c.reinstantiations, (20 * n / (n + 1)) as u64);
    assert_eq!(c.fallbacks_total, 0);
}

#[test]
#[ignore = "a release-mode soak: ci/test.sh runs it with cargo test --release -- --ignored"]
fn soak_a_million_updates_of_a_thousand_nodes() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let updates = std::env::var("RCB_SOAK_UPDATES").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let n = 1000;
    let started = std::time::Instant::now();
    let (f, pool, outcome) = leak_run(&gpu, &sim, n, true, updates, 1000);
    outcome.unwrap();
    let peak = sim.live_count("kernarg_peak");
    sim.set_kernarg_pool(u64::MAX);
    let c = counters(&f.cb);
    eprintln!(
        "soak: {updates} updates of {n} nodes in {:.1} s, {} re-instantiations, {} launches checked, kernel-argument peak {peak} of {pool} bytes",
        started.elapsed().as_secs_f64(),
        c.reinstantiations,
        updates / 1000
    );
    assert!(peak <= pool);
    assert_eq!(c.reinstantiations, (updates / (n + 1)) as u64);
    assert_eq!(c.fallbacks_total, 0);
}

/// A device word that held streams wait for (hipStreamWaitValue64, which the `Runtime`
/// interface does not make): a launch behind it stays in flight until the test opens the gate,
/// whatever the host's speed.
struct Gate {
    lib: libloading::Library,
    word: u64,
    rt: &'static dyn rocm_cmdbuf::runtime::Runtime,
}

impl Gate {
    fn new(gpu: &Gpu) -> Gate {
        let lib = unsafe { libloading::Library::new(std::env::var_os("RCB_HIP_LIBRARY").expect("the software GPU")) }.unwrap();
        let word = gpu.rt.malloc(0, 8).unwrap();
        write_words(gpu.rt, word, &[0]);
        Gate { lib, word, rt: gpu.rt }
    }

    /// Holds `stream`'s later work until [`Self::open`].
    fn hold(&self, stream: Stream) {
        type WaitFn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_void, u64, u32, u64) -> i32;
        let wait: WaitFn = unsafe { *self.lib.get(b"hipStreamWaitValue64\0").unwrap() };
        assert_eq!(unsafe { wait(stream.0, self.word as *mut std::ffi::c_void, 1, 0, u64::MAX) }, 0);
    }

    /// Opens from a stream of its own (see [`write_words`]).
    fn open(&self) {
        write_words(self.rt, self.word, &[1]);
    }
}

/// A gate left shut (a test that failed before opening it) opens when dropped, so that the
/// streams it holds drain and the failure is reported instead of a hang.
impl Drop for Gate {
    fn drop(&mut self) {
        if let Ok(writer) = self.rt.stream_create(0, 1, 0) {
            if let Ok(memory) = self.rt.stream_memory() {
                let _ = memory.stream_write_u64(writer, self.word, 1);
            }
            let _ = self.rt.stream_synchronize(writer);
            let _ = self.rt.stream_destroy(writer);
        }
    }
}

/// Writes `words` at `at` from a stream of its own, and waits for that stream only: a
/// synchronous copy would first wait for every blocking stream, a held per-thread stream
/// included.
fn write_words(rt: &dyn Runtime, at: u64, words: &[u64]) {
    let writer = rt.stream_create(0, 1, 0).unwrap();
    for (i, &w) in words.iter().enumerate() {
        rt.stream_memory().unwrap().stream_write_u64(writer, at + 8 * i as u64, w).unwrap();
    }
    rt.stream_synchronize(writer).unwrap();
    rt.stream_destroy(writer).unwrap();
}

use rocm_cmdbuf::runtime::Stream;

/// `hipStreamPerThread`: one handle, each thread's own stream.
const PER_THREAD: Stream = Stream(2 as *mut std::ffi::c_void);

/// Runs `f` on another thread and fails the test, rather than hang, when it does not return.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(120)).unwrap_or_else(|_| panic!("{what} did not return: the host waited on a launch"))
}

/// A value handed to one other thread at a time.
struct Sent<T>(T);
// SAFETY: the tests hand each such value to one thread at a time.
unsafe impl<T> Send for Sent<T> {}

#[derive(Clone, Copy)]
struct CbPtr(*mut rcb_cmdbuf);
// SAFETY: the tests hand a command buffer to one thread at a time.
unsafe impl Send for CbPtr {}
impl CbPtr {
    fn get(self) -> *mut rcb_cmdbuf {
        self.0
    }
}

/// Launches were followed by the stream handle's value, so
/// thread B's launch into `hipStreamPerThread` re-recorded the event of thread A's, and the old
/// executable was destroyed while A's launch still waited in A's stream.
#[test]
fn launches_into_the_per_thread_stream_from_two_threads_are_each_followed() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let destroyed_in_flight = sim.live_count("exec_destroyed_in_flight");
    let mut f = Fleet::new(&gpu, 2, FILL_PUSH);
    let cb = CbPtr(f.cb.0);
    let gate = std::sync::Arc::new(Gate::new(&gpu));
    // Thread A: its per-thread stream held at the gate, then a launch.
    let a = gate.clone();
    std::thread::spawn(move || {
        a.hold(PER_THREAD);
        ok(unsafe { rcb_cmdbuf_launch(cb.get(), PER_THREAD.0) });
    })
    .join()
    .unwrap();
    // Thread B: a launch into its own per-thread stream, finished.
    std::thread::spawn(move || {
        ok(unsafe { rcb_cmdbuf_launch(cb.get(), PER_THREAD.0) });
        common::runtime().unwrap().stream_synchronize(PER_THREAD).unwrap();
    })
    .join()
    .unwrap();
    // Re-instantiate: the old executable waits for A's launch.
    f.flip(0);
    assert_eq!(f.flip(1).reinstantiated, 1);
    // (A read-back would wait for A's stream too: a per-thread stream is blocking.)
    ok(unsafe { rcb_cmdbuf_launch(f.cb.0, gpu.stream.0) });
    assert_eq!(counters(&f.cb).retired_execs, 0, "thread A's launch has not run");
    assert_eq!(sim.live_count("exec_destroyed_in_flight"), destroyed_in_flight);
    gate.open();
    // A's stream drains on its own; a launch after that destroys the old executable.
    let mut spins = 0;
    while counters(&f.cb).retired_execs == 0 {
        f.launch_and_check(&gpu).unwrap();
        spins += 1;
        assert!(spins < 100_000, "the old executable was never destroyed after its launches finished");
    }
    assert_eq!(sim.live_count("exec_destroyed_in_flight"), destroyed_in_flight);
}

/// With as many old executables waiting as are kept, a
/// re-instantiation waited on the host for the oldest one's launches; a launch that waits on
/// work not yet submitted (here the gate the test opens after the update) hung the update
/// forever. Now the update goes to the live executable in place and says so in the counters.
#[test]
fn past_the_retired_limit_updates_push_in_place_and_never_wait_for_a_launch() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let destroyed_in_flight = sim.live_count("exec_destroyed_in_flight");
    let gate = Gate::new(&gpu);
    gate.hold(gpu.stream);
    let f = Fleet::new(&gpu, 2, FILL_PUSH);
    let cb = CbPtr(f.cb.0);
    let stream = gpu.stream.0 as usize;
    // Each executable takes one push; every second flip re-instantiates, each after a launch
    // held at the gate. The third re-instantiation would keep a third old executable.
    let f = Sent(f);
    let Sent(mut f) = bounded("the updates", move || {
        let whole = f;
        let Sent(mut f) = whole;
        let mut reinstantiated = 0;
        for round in 0..3 {
            ok(unsafe { rcb_cmdbuf_launch(cb.get(), stream as *mut std::ffi::c_void) });
            f.flip(0);
            reinstantiated += f.flip(1).reinstantiated;
            assert_eq!(reinstantiated, (round + 1).min(2), "round {round}");
        }
        Sent(f)
    });
    let c = counters(&f.cb);
    assert_eq!((c.reinstantiations, c.fallbacks[RCB_FALLBACK_REINSTANTIATE_BLOCKED as usize]), (2, 1));
    assert_eq!(c.retired_execs, 0, "every launch is still held");
    assert_eq!(sim.live_count("exec_destroyed_in_flight"), destroyed_in_flight);
    gate.open();
    gpu.sync();
    f.launch_and_check(&gpu).unwrap();
    assert_eq!(counters(&f.cb).retired_execs, 2);
    assert_eq!(sim.live_count("exec_destroyed_in_flight"), destroyed_in_flight);
    // With room again the budget re-instantiates.
    let again: u32 = (0..4).map(|i| f.flip(i % 2).reinstantiated).sum();
    assert!(again >= 1, "no re-instantiation once the old executables were destroyed");
    f.launch_and_check(&gpu).unwrap();
}

/// ROCm's clr runs a launch into a capturing stream on the
/// stream itself (its hipGraphLaunch has no capture branch) and CUDA refuses it, so such a
/// launch is refused; when the runtime cannot say whether the stream captures, the launch is
/// made (as clr runs it here) and keeps its executable alive; and the library records no event on
/// the capturing stream (on clr such a record joins the capture, forking it into the event).
#[test]
fn a_launch_into_a_capture_keeps_its_executable_and_adds_nothing_to_the_capture() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let destroyed_in_flight = sim.live_count("exec_destroyed_in_flight");
    for query_fails in [false, true] {
        sim.set_quirks("clr_graph_launch");
        let mut f = Fleet::new(&gpu, 2, FILL_PUSH);
        let gate = Gate::new(&gpu);
        let stream = gpu.rt.stream_create(0, 1, 0).unwrap();
        gate.hold(stream);
        gpu.rt.begin_capture(stream, rocm_cmdbuf::runtime::CaptureMode::ThreadLocal).unwrap();
        if query_fails {
            // The next capture query (faults count the calls made after they are set).
            sim.set_faults("hipStreamIsCapturing:1");
        }
        // Held at the gate, the launch's own work is in flight on the stream (the clr quirk).
        let records = sim.call_count("hipEventRecord");
        let launched = unsafe { rcb_cmdbuf_launch(f.cb.0, stream.0) };
        // The launch's only candidate for a record is the capturing stream. (A node in the
        // captured graph would not show it: the software GPU, as clr, makes no node for a record
        // on a capturing stream, and only remembers the stream's last nodes in the event.)
        assert_eq!(
            sim.call_count("hipEventRecord"),
            records,
            "the library recorded an event on the capturing stream (capture query failing: {query_fails})"
        );
        sim.set_faults("");
        if query_fails {
            assert_eq!(launched, RCB_OK, "{}", common::last_error());
        } else {
            fails(launched, RCB_STATUS_INVALID_STATE, "the stream is capturing");
        }
        let captured = gpu.rt.end_capture(stream).unwrap();
        gpu.rt.graph_destroy(captured).unwrap();
        // A re-instantiation replaces the executable the held launch (if made) runs.
        f.flip(0);
        assert_eq!(f.flip(1).reinstantiated, 1);
        ok(unsafe { rcb_cmdbuf_launch(f.cb.0, gpu.stream.0) });
        gpu.sync();
        let retired = if query_fails { 0 } else { 1 };
        assert_eq!(counters(&f.cb).retired_execs, retired, "the executable of the held launch was destroyed, or a refused one kept");
        assert_eq!(sim.live_count("exec_destroyed_in_flight"), destroyed_in_flight);
        gate.open();
        gpu.rt.stream_synchronize(stream).unwrap();
        f.launch_and_check(&gpu).unwrap();
        assert_eq!(sim.live_count("exec_destroyed_in_flight"), destroyed_in_flight);
        if query_fails {
            // The launch no event followed has finished: the promise lets the free destroy
            // what it used (else leaked).
            ok(unsafe { rcb_cmdbuf_launches_done(f.cb.0) });
            assert_eq!(counters(&f.cb).retired_execs, 1);
        }
        drop(f);
        gpu.rt.stream_destroy(stream).unwrap();
        sim.set_quirks("");
    }
    assert_eq!(sim.live_count("exec_destroyed_in_flight"), destroyed_in_flight);
}

/// The property over random sequences: no executable graph and no kept graph is destroyed
/// while a launch of it may run, on any stream or thread. Each case builds two command buffers
/// with a small update budget: `a` holds fill nodes whose allocations move between two homes
/// (re-instantiations) and a flattened copy of a graph owning a user object; `b` holds a child
/// node given such a graph. Every source graph's user object poisons, when destroyed, the buffer
/// the copy reads. Steps launch either command buffer on ordinary streams, on
/// `hipStreamPerThread` from two threads, on the null stream and into a capturing stream (with
/// and without the `clr_graph_launch` quirk), some behind gates that open later in random order;
/// move allocations; and replace the flattened and child sources. After each launch the same
/// stream copies the outputs aside. The oracle is the software GPU's: after every step no
/// executable graph was destroyed with a launch in flight; at the end, once the gates are open
/// and the streams drained (bounded waits), every launch's copy is exactly right (a source
/// destroyed under a pending launch shows as poison), each user object's destructor ran once
/// and every executable graph, graph, event, user object and allocation is gone.
///
/// `RCB_PROPERTY_CASES` sets the number of cases (default 64); `RCB_PROPERTY_SEED` the seed.
#[test]
fn launches_never_outlive_what_they_run_over_random_sequences() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let cases: usize = std::env::var("RCB_PROPERTY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let seed: u64 = std::env::var("RCB_PROPERTY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x2929_5eed_0bad_cafe);
    let workers = [Worker::new(), Worker::new()];
    // Each worker's own stream exists from here on (made at its first use).
    for w in &workers {
        w.run("making a per-thread stream", || common::runtime().unwrap().stream_synchronize(PER_THREAD).map_err(|e| e.to_string()));
    }
    let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut totals = [0usize; 7];
    for case in 0..cases {
        let case_seed = rng.next();
        let watchdog = Watchdog::new(format!("case {case} (seed {case_seed:#x})"));
        let tally =
            run_case(&gpu, &sim, &workers, case_seed, &watchdog).unwrap_or_else(|e| panic!("case {case} (seed {case_seed:#x}): {e}"));
        totals.iter_mut().zip(tally).for_each(|(t, n)| *t += n);
    }
    eprintln!(
        "{cases} cases: {} launches ({} held at a gate, {} per-thread, {} into a capture, refused), {} re-instantiations, {} kept graphs replaced (none refused), {} in-place pushes blocked",
        totals[0], totals[1], totals[2], totals[3], totals[4], totals[5], totals[6]
    );
    if cases >= 32 {
        // Every kind of step happened, and re-instantiations were blocked by the limit.
        assert!(totals.iter().all(|&n| n > 0), "{totals:?}");
    }
}

/// Ends the process, failing the test, when the host waits for more than two minutes between
/// two beats (a wait the host cannot leave on its own, such as a synchronous call behind a
/// held stream); dropped, it stops.
struct Watchdog(std::sync::mpsc::Sender<()>);

impl Watchdog {
    fn new(what: String) -> Watchdog {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            loop {
                match rx.recv_timeout(std::time::Duration::from_secs(120)) {
                    Ok(()) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        eprintln!("{what}: the host waited on a launch for two minutes: failing rather than hanging");
                        std::process::exit(101);
                    }
                }
            }
        });
        Watchdog(tx)
    }

    fn beat(&self) {
        let _ = self.0.send(());
    }
}

type Job = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// A thread of its own (its own `hipStreamPerThread`) that runs jobs one at a time; the caller
/// waits for each, bounded.
struct Worker {
    jobs: std::sync::mpsc::Sender<Job>,
    done: std::sync::mpsc::Receiver<Result<(), String>>,
}

impl Worker {
    fn new() -> Worker {
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for job in rx {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).unwrap_or_else(|p| {
                    Err(p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default())
                });
                if tx.send(outcome).is_err() {
                    break;
                }
            }
        });
        Worker { jobs, done }
    }

    fn run(&self, what: &str, job: impl FnOnce() -> Result<(), String> + Send + 'static) {
        self.jobs.send(Box::new(job)).expect("the worker is gone");
        match self.done.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(outcome) => outcome.unwrap_or_else(|e| panic!("{what}: {e}")),
            Err(_) => panic!("{what} did not return: the host waited on a launch"),
        }
    }
}

/// Launches of one case (each keeps a copy of the outputs).
const MAX_LAUNCHES: usize = 128;

/// Bytes of a source buffer and of what a copy node writes.
const SRC_BYTES: u64 = 64;

/// What a user object's destructor is given: how often it ran and the source buffer it poisons.
struct Source {
    runs: std::sync::atomic::AtomicU32,
    buffer: u64,
}

/// A source's contents: the same for every source, so that every correct launch writes the
/// same bytes whichever source it reads.
fn source_pattern() -> Vec<u8> {
    (0..SRC_BYTES as u8).map(|i| i.wrapping_mul(7).wrapping_add(3)).collect()
}

unsafe extern "C" fn poison_source(p: *mut std::ffi::c_void) {
    let source = unsafe { &*(p as *const Source) };
    source.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    write_words(common::runtime().unwrap(), source.buffer, &[u64::MAX; (SRC_BYTES / 8) as usize]);
}

/// A graph of `copy(out ← a new source)` owning a user object that poisons the source when it
/// is destroyed.
fn owning_source_graph(gpu: &Gpu, hip: &libloading::Library, out: u64) -> (rocm_cmdbuf::runtime::Graph, &'static Source) {
    type CreateFn = unsafe extern "C" fn(
        *mut *mut std::ffi::c_void,
        *mut std::ffi::c_void,
        unsafe extern "C" fn(*mut std::ffi::c_void),
        u32,
        u32,
    ) -> i32;
    type RetainFn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_void, u32, u32) -> i32;
    let buffer = gpu.rt.malloc(0, SRC_BYTES as usize).unwrap();
    let pattern: Vec<u64> = source_pattern().chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect();
    write_words(gpu.rt, buffer, &pattern);
    // Leaked: a destructor may still run after a failed case has unwound.
    let source: &'static Source = Box::leak(Box::new(Source { runs: 0.into(), buffer }));
    let g = gpu.rt.graph_create().unwrap();
    gpu.rt.add_kernel_node(g, &[], &common::launch(gpu.k.copy_u8, &common::pack(&args::copy(out, buffer, SRC_BYTES)))).unwrap();
    let create: CreateFn = unsafe { *hip.get(b"hipUserObjectCreate\0").unwrap() };
    let retain: RetainFn = unsafe { *hip.get(b"hipGraphRetainUserObject\0").unwrap() };
    let mut object = std::ptr::null_mut();
    let data = source as *const Source as *mut std::ffi::c_void;
    // One reference, moved to the graph.
    assert_eq!(unsafe { create(&mut object, data, poison_source, 1, 1) }, 0);
    assert_eq!(unsafe { retain(g.0, object, 1, 1) }, 0);
    (g, source)
}

/// Where a launch goes.
#[derive(Clone, Copy, Debug)]
enum Target {
    Stream(usize),
    PerThread(usize),
    Null,
    Capture { quirk: bool },
}

/// One launch: what the outputs must hold once it ran (the home of each fill allocation of `a`
/// at launch time, or `None` for `b`), and where its copy of the outputs went (none for a
/// launch whose work never ran: a capture without the quirk).
struct Launched {
    homes: Option<Vec<usize>>,
    snapshot: Option<u64>,
    target: Target,
}

/// Runs one case; returns its tally: launches, held ones, per-thread ones, capture ones
/// (refused), re-instantiations, replacements, blocked re-instantiations.
fn run_case(gpu: &Gpu, sim: &common::Hipsim, workers: &[Worker; 2], seed: u64, watchdog: &Watchdog) -> Result<[usize; 7], String> {
    let rt = gpu.rt;
    let mut rng = XorShift(seed | 1);
    let kinds = ["exec", "graph", "event", "user_object", "alloc", "stream"];
    let before: Vec<u64> = kinds.iter().map(|k| sim.live_count(k)).collect();
    let in_flight = sim.live_count("exec_destroyed_in_flight");
    let hip = unsafe { libloading::Library::new(std::env::var_os("RCB_HIP_LIBRARY").unwrap()) }.unwrap();
    let mut tally = [0usize; 7];

    // The outputs, one buffer: the fills' two homes per allocation, then `a`'s copy, then `b`'s.
    let n = 2 + rng.below(2);
    let fills = fleet_bytes(n);
    let region = fills + 2 * SRC_BYTES as usize;
    let out = rt.malloc(0, region).unwrap();
    rt.direct().copy_to_device(out, &vec![0; region]).unwrap();
    let home_at = |i: usize, home: usize| out + slot(n, i, home) as u64 * SLICE;
    let (out_a, out_b) = (out + fills as u64, out + fills as u64 + SRC_BYTES);
    let budget = (1 + rng.below(3) as u64) * FILL_PUSH;
    let mut sources: Vec<&'static Source> = Vec::new();

    let a = Cb::primary();
    ok(unsafe { rcb_cmdbuf_set_exec_update_budget(a.0, budget) });
    a.set_allocs(&(0..n).map(|i| (home_at(i, 0), SLICE)).collect::<Vec<_>>());
    for i in 0..n {
        a.kernel(&[], gpu.k.fill_u32, WORDS, &args::fill(home_at(i, 0), i as u32 + 1, WORDS));
    }
    let (g, source) = owning_source_graph(gpu, &hip, out_a);
    sources.push(source);
    let (mut group, mut report) = (0, rcb_flatten_report::default());
    ok(unsafe { rcb_cmdbuf_add_flattened_child(a.0, null(), 0, null(), g.0, &mut group, &mut report) });
    assert_eq!(report.flattened, 1);
    a.finalize();
    rt.graph_destroy(g).unwrap();
    let mut homes = vec![0usize; n];

    let b = Cb::primary();
    ok(unsafe { rcb_cmdbuf_set_exec_update_budget(b.0, budget) });
    let (g, source) = owning_source_graph(gpu, &hip, out_b);
    sources.push(source);
    let mut child = 0;
    ok(unsafe { rcb_cmdbuf_add_child_graph(b.0, null(), 0, g.0, &mut child) });
    b.finalize();
    rt.graph_destroy(g).unwrap();

    let streams: Vec<Stream> = (0..3).map(|_| rt.stream_create(0, 1, 0).unwrap()).collect();
    let capture = rt.stream_create(0, 1, 0).unwrap();
    // Gates not yet opened, with the target they hold.
    let mut gates: Vec<(std::sync::Arc<Gate>, Target)> = Vec::new();
    let held = |gates: &Vec<(std::sync::Arc<Gate>, Target)>, t: &dyn Fn(Target) -> bool| gates.iter().any(|(_, g)| t(*g));
    let mut opened: Vec<std::sync::Arc<Gate>> = Vec::new();
    let mut launches: Vec<Launched> = Vec::new();
    let snapshots = rt.malloc(0, MAX_LAUNCHES * region).unwrap();
    let reinstantiations = |cb: &Cb| counters(cb).reinstantiations;
    let blocked = |cb: &Cb| counters(cb).fallbacks[RCB_FALLBACK_REINSTANTIATE_BLOCKED as usize];

    let steps = 24 + rng.below(120);
    let gate_odds = [3, 8, 40][rng.below(3)];
    for step in 0..steps {
        // A gate opens one step in `gate_odds`: in some cases rarely.
        let what = if rng.one_in(gate_odds) { 10 } else { rng.below(10) };
        match what {
            // A launch of a or b somewhere, perhaps behind a new gate.
            0..=4 if launches.len() < MAX_LAUNCHES => {
                let on_a = rng.below(3) != 0;
                let cb = CbPtr(if on_a { a.0 } else { b.0 });
                // The null stream runs once every blocking stream (the per-thread ones) drained.
                let per_thread_held = held(&gates, &|t| matches!(t, Target::PerThread(_)));
                let target = match rng.below(9) {
                    0..=2 => Target::Stream(rng.below(streams.len())),
                    3..=5 => Target::PerThread(rng.below(2)),
                    6 if !per_thread_held => Target::Null,
                    7 | 8 => Target::Capture { quirk: rng.one_in(2) },
                    _ => Target::Stream(0),
                };
                // The first per-thread stream is held more often than the second, so that one
                // thread's launches wait while the other's run.
                let hold = match target {
                    Target::Null => false,
                    Target::PerThread(0) => !rng.one_in(3),
                    Target::PerThread(_) => rng.one_in(6),
                    _ => rng.one_in(2),
                };
                let gate = hold.then(|| std::sync::Arc::new(Gate::new(gpu)));
                let snapshot = snapshots + (launches.len() * region) as u64;
                let copy = gpu.k.copy_u8;
                let snap = move |stream: Stream| -> Result<(), String> {
                    common::run(common::runtime().unwrap(), copy, &args::copy(snapshot, out, region as u64), stream);
                    Ok(())
                };
                // A launch into a capture is refused (CUDA refuses it, ROCm would run it outside
                // the capture): nothing of it runs.
                let runs_work = !matches!(target, Target::Capture { .. });
                match target {
                    Target::Stream(s) => {
                        if let Some(g) = &gate {
                            g.hold(streams[s]);
                        }
                        ok(unsafe { rcb_cmdbuf_launch(cb.get(), streams[s].0) });
                        snap(streams[s])?;
                    }
                    Target::PerThread(_) | Target::Null => {
                        let (stream, worker) = match target {
                            Target::PerThread(w) => (PER_THREAD, w),
                            _ => (Stream(std::ptr::null_mut()), 0),
                        };
                        let g = gate.clone();
                        workers[worker].run("a launch", move || {
                            if let Some(g) = g {
                                g.hold(stream);
                            }
                            let s = unsafe { rcb_cmdbuf_launch(cb.get(), stream.0) };
                            if s != RCB_OK {
                                return Err(format!("launch: {s}: {}", common::last_error()));
                            }
                            snap(stream)
                        });
                        tally[2] += usize::from(matches!(target, Target::PerThread(_)));
                    }
                    Target::Capture { quirk } => {
                        if let Some(g) = &gate {
                            g.hold(capture);
                        }
                        sim.set_quirks(if quirk { "clr_graph_launch" } else { "" });
                        rt.begin_capture(capture, rocm_cmdbuf::runtime::CaptureMode::ThreadLocal).unwrap();
                        let s = unsafe { rcb_cmdbuf_launch(cb.get(), capture.0) };
                        let captured = rt.end_capture(capture);
                        sim.set_quirks("");
                        if s != RCB_STATUS_INVALID_STATE {
                            return Err(format!("step {step}: a launch into a capture returned {s}, not a refusal"));
                        }
                        rt.graph_destroy(captured.map_err(|e| format!("ending the capture: {e}"))?).unwrap();
                        if runs_work {
                            snap(capture)?;
                        }
                        tally[3] += 1;
                    }
                }
                if let Some(g) = gate {
                    gates.push((g, target));
                    tally[1] += 1;
                }
                tally[0] += 1;
                launches.push(Launched { homes: on_a.then(|| homes.clone()), snapshot: runs_work.then_some(snapshot), target });
            }
            // Moves of a's allocations: the budget re-instantiates.
            5 | 6 => {
                let (r0, b0) = (reinstantiations(&a), blocked(&a));
                for _ in 0..1 + rng.below(3) {
                    let i = rng.below(n);
                    homes[i] ^= 1;
                    let r = a.move_allocs(&[(i as u64, home_at(i, homes[i]))]);
                    if (r.moved_allocations, r.needs_rerecord) != (1, 0) {
                        return Err(format!("step {step}: the move of {i} was not made in place"));
                    }
                }
                tally[4] += (reinstantiations(&a) - r0) as usize;
                tally[6] += (blocked(&a) - b0) as usize;
            }
            // A new source for a's flattened group or b's child node; the caller's graph goes
            // at once.
            7..=9 => {
                let on_a = what != 9;
                let (cb, target) = if on_a { (&a, out_a) } else { (&b, out_b) };
                let (g, source) = owning_source_graph(gpu, &hip, target);
                sources.push(source);
                let r0 = reinstantiations(cb);
                cb.begin_update();
                let s = if on_a {
                    let mut r = rcb_flatten_report::default();
                    unsafe { rcb_cmdbuf_update_flattened_child(a.0, group, null(), g.0, &mut r) }
                } else {
                    unsafe { rcb_cmdbuf_update_child_graph(b.0, child, g.0) }
                };
                // A replacement is never refused, however many launches still run.
                if s != RCB_OK {
                    return Err(format!("step {step}: replacing a source: {s}: {}", common::last_error()));
                }
                tally[5] += 1;
                cb.finalize();
                tally[4] += (reinstantiations(cb) - r0) as usize;
                rt.graph_destroy(g).unwrap();
            }
            // A gate opens.
            _ if !gates.is_empty() => {
                let (g, _) = gates.swap_remove(rng.below(gates.len()));
                g.open();
                opened.push(g);
            }
            _ => {}
        }
        watchdog.beat();
        if sim.live_count("exec_destroyed_in_flight") != in_flight {
            return Err(format!("step {step}: an executable graph was destroyed while a launch of it was in flight"));
        }
    }

    // Every gate opens, in random order; every stream drains (bounded).
    while !gates.is_empty() {
        let (g, _) = gates.swap_remove(rng.below(gates.len()));
        g.open();
        opened.push(g);
    }
    for w in workers {
        w.run("draining a per-thread stream", || common::runtime().unwrap().stream_synchronize(PER_THREAD).map_err(|e| e.to_string()));
    }
    for &s in streams.iter().chain([&capture]) {
        let s = Sent(s);
        bounded("draining a stream", move || {
            let s = s;
            common::runtime().unwrap().stream_synchronize(s.0).unwrap()
        });
    }
    if sim.live_count("exec_destroyed_in_flight") != in_flight {
        return Err("an executable graph was destroyed while a launch of it was in flight".into());
    }
    // Each launch's copy of the outputs.
    let want = source_pattern();
    for (l, launch) in launches.iter().enumerate() {
        let Some(snapshot) = launch.snapshot else { continue };
        let got = gpu.read_bytes(snapshot, region);
        let copied = if launch.homes.is_some() { &got[fills..fills + SRC_BYTES as usize] } else { &got[fills + SRC_BYTES as usize..] };
        if copied != want.as_slice() {
            return Err(format!("launch {l} ({:?}) read a destroyed source: {:?}", launch.target, &copied[..8]));
        }
        let words: Vec<u32> = got[..fills].chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect();
        for i in 0..n {
            for home in 0..2 {
                let start = slot(n, i, home) * WORDS as usize;
                let at = &words[start..start + WORDS as usize];
                let wrote = launch.homes.as_ref().is_some_and(|h| h[i] == home);
                if at.iter().any(|&w| w != i as u32 + 1 && (wrote || w != 0)) {
                    return Err(format!("launch {l} ({:?}): allocation {i}, home {home}: {at:?}", launch.target));
                }
            }
        }
    }
    // One more launch of each, checked whole: the current executables run the current state.
    rt.direct().copy_to_device(out, &vec![0; region]).unwrap();
    a.launch(gpu);
    b.launch(gpu);
    let got = gpu.read_bytes(out, region);
    if got[fills..] != [want.clone(), want.clone()].concat()[..] {
        return Err("the last launches copied a destroyed source".into());
    }
    for (i, &home) in homes.iter().enumerate() {
        let word = |home: usize| common::download_u32(rt, home_at(i, home), 1)[0];
        if (word(home), word(home ^ 1)) != (i as u32 + 1, 0) {
            return Err(format!("the last launch of a wrote allocation {i} elsewhere than home {home}"));
        }
    }

    // Freed, everything goes, each user object's destructor having run once.
    drop(a);
    drop(b);
    for s in streams.into_iter().chain([capture]) {
        rt.stream_destroy(s).unwrap();
    }
    for source in &sources {
        let runs = source.runs.load(std::sync::atomic::Ordering::SeqCst);
        if runs != 1 {
            return Err(format!("a source's user object was destroyed {runs} times"));
        }
        rt.free(source.buffer).unwrap();
    }
    rt.free(out).unwrap();
    rt.free(snapshots).unwrap();
    // Freed only now: a free waits for every stream.
    for g in opened {
        rt.free(g.word).unwrap();
    }
    let after: Vec<u64> = kinds.iter().map(|k| sim.live_count(k)).collect();
    if after != before {
        return Err(format!("live {kinds:?}: {after:?} after the case, {before:?} before"));
    }
    Ok(tally)
}

/// The process totals, or a command buffer's counts, of one fallback reason.
fn fallback(cb: *mut rcb_cmdbuf, why: u32) -> u64 {
    let mut c: rcb_counters = unsafe { std::mem::zeroed() };
    c.struct_size = size_of::<rcb_counters>() as u32;
    ok(unsafe { rcb_counters_get(cb, &mut c) });
    c.fallbacks[why as usize]
}

/// A launch the library cannot follow with an event (here its
/// event record fails) may run for as long as its stream holds it, and nothing the library can
/// observe later proves it finished (a tracked launch after it does not). What it may use is kept
/// instead of destroyed; no update is refused for it (before, 64 replacements refused every
/// later one with `RCB_STATUS_INVALID_STATE`, which XLA's own path never does); what is put in
/// service after it is followed as usual, so only the source in service at the time is kept.
/// The held launch reads its source intact: had a kept clone been destroyed, its user object's
/// destructor would have poisoned the source. `rcb_cmdbuf_launches_done` gives the kept one
/// back. Both ways a kept graph is replaced: a child node's graph, a flattened group's source.
#[test]
fn a_launch_no_event_follows_keeps_what_it_may_use_and_refuses_no_update() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let hip = unsafe { libloading::Library::new(std::env::var_os("RCB_HIP_LIBRARY").unwrap()) }.unwrap();
    let rt = gpu.rt;
    let in_flight = sim.live_count("exec_destroyed_in_flight");
    let want = source_pattern();
    let ran = |s: &&Source| s.runs.load(std::sync::atomic::Ordering::SeqCst);
    for flattened in [false, true] {
        let kinds = ["graph", "exec", "event", "user_object"];
        let before: Vec<u64> = kinds.iter().map(|k| sim.live_count(k)).collect();
        let out = rt.malloc(0, SRC_BYTES as usize).unwrap();
        let snapshot = rt.malloc(0, SRC_BYTES as usize).unwrap();
        let cb = Cb::primary();
        ok(unsafe { rcb_cmdbuf_set_exec_update_budget(cb.0, 0) });
        let (g, first) = owning_source_graph(&gpu, &hip, out);
        let mut sources = vec![first];
        let mut node = 0;
        if flattened {
            let mut r = rcb_flatten_report::default();
            ok(unsafe { rcb_cmdbuf_add_flattened_child(cb.0, null(), 0, null(), g.0, &mut node, &mut r) });
            assert_eq!(r.flattened, 1);
        } else {
            ok(unsafe { rcb_cmdbuf_add_child_graph(cb.0, null(), 0, g.0, &mut node) });
        }
        cb.finalize();
        rt.graph_destroy(g).unwrap();
        let replace = |g: rocm_cmdbuf::runtime::Graph| -> (rcb_status, String) {
            cb.begin_update();
            let s = if flattened {
                let mut r = rcb_flatten_report::default();
                unsafe { rcb_cmdbuf_update_flattened_child(cb.0, node, null(), g.0, &mut r) }
            } else {
                unsafe { rcb_cmdbuf_update_child_graph(cb.0, node, g.0) }
            };
            let message = common::last_error();
            cb.finalize();
            (s, message)
        };

        // The launch no event follows, held at a gate; the same stream then copies the output
        // aside.
        let stream = rt.stream_create(0, 1, 0).unwrap();
        let gate = Gate::new(&gpu);
        gate.hold(stream);
        sim.set_faults("hipEventRecord:1");
        let launched = unsafe { rcb_cmdbuf_launch(cb.0, stream.0) };
        sim.set_faults("");
        assert_eq!(launched, RCB_OK, "{}", common::last_error());
        common::run(rt, gpu.k.copy_u8, &args::copy(snapshot, out, SRC_BYTES), stream);
        let kept_before = fallback(cb.0, RCB_FALLBACK_KEPT_UNTRACKED);

        // More replacements than the 64 that used to be allowed, each followed by a tracked
        // launch that finishes.
        for i in 0..REPLACEMENTS {
            let (g, source) = owning_source_graph(&gpu, &hip, out);
            sources.push(source);
            let (s, message) = replace(g);
            assert_eq!(s, RCB_OK, "flattened {flattened}, replacement {i}: {message}");
            rt.graph_destroy(g).unwrap();
            cb.launch(&gpu);
        }
        let runs: Vec<u32> = sources.iter().map(ran).collect();
        // Flattened: the first source's clone is kept; a child node's first graph is in the
        // template, which only the free replaces. Every later one went once its launches
        // finished, but the one in service.
        let mut expected = vec![1; REPLACEMENTS + 1];
        (expected[0], expected[REPLACEMENTS]) = (0, 0);
        assert_eq!(runs, expected, "flattened {flattened}: sources destroyed");
        let kept = fallback(cb.0, RCB_FALLBACK_KEPT_UNTRACKED) - kept_before;
        assert_eq!(kept, u64::from(flattened), "flattened {flattened}: graphs kept for the launch no event follows");
        assert_eq!(sim.live_count("exec_destroyed_in_flight"), in_flight);

        // The held launch runs now and read its source intact.
        gate.open();
        rt.stream_synchronize(stream).unwrap();
        assert_eq!(gpu.read_bytes(snapshot, SRC_BYTES as usize), want, "flattened {flattened}: the held launch read a destroyed source");
        // The library still cannot know that it finished, a launch after it notwithstanding.
        cb.launch(&gpu);
        assert_eq!(ran(&sources[0]), 0, "flattened {flattened}: kept without the promise");
        // The caller's promise gives the kept clone back (the template stays: it is in service).
        ok(unsafe { rcb_cmdbuf_launches_done(cb.0) });
        assert_eq!(ran(&sources[0]), u32::from(flattened), "flattened {flattened}: after rcb_cmdbuf_launches_done");
        drop(cb);
        let runs: Vec<u32> = sources.iter().map(ran).collect();
        assert!(runs.iter().all(|&n| n == 1), "flattened {flattened}: after the free each source goes once: {runs:?}");
        assert_eq!(sim.live_count("exec_destroyed_in_flight"), in_flight);
        rt.stream_destroy(stream).unwrap();
        for s in &sources {
            rt.free(s.buffer).unwrap();
        }
        rt.free(out).unwrap();
        rt.free(snapshot).unwrap();
        rt.free(gate.word).unwrap();
        let after: Vec<u64> = kinds.iter().map(|k| sim.live_count(k)).collect();
        assert_eq!(after, before, "flattened {flattened}: live {kinds:?}");
    }
}

/// More than the 64 replacements the library used to allow behind a launch it could not follow.
const REPLACEMENTS: usize = 70;

/// A patched XLA frees command buffers whose launches are still
/// queued (an evicted entry, a re-record after a failed update, an executable's teardown), as
/// its own path does. The free destroys nothing those launches use: here a live executable and
/// a retired one of a budgeted command buffer, and a flattened source owning a user object whose
/// destructor poisons what the launch copies, all behind a device word. Once the launches have
/// finished, later library calls find them so and destroy everything: the live objects come
/// back to where they were, each user object's destructor having run once, and the software
/// GPU's use-after-free counter never moved.
#[test]
fn a_free_while_launches_run_destroys_nothing_they_use_until_a_later_call_finds_them_finished() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let hip = unsafe { libloading::Library::new(std::env::var_os("RCB_HIP_LIBRARY").unwrap()) }.unwrap();
    let rt = gpu.rt;
    let in_flight = sim.live_count("exec_destroyed_in_flight");
    let kinds = ["graph", "exec", "event", "user_object"];
    let before: Vec<u64> = kinds.iter().map(|k| sim.live_count(k)).collect();
    // Made before the gate, so that a failed check drops the gate (which opens it) first: the
    // fleet's drop frees its buffer, which waits for every stream.
    let mut f = Fleet::new(&gpu, 2, FILL_PUSH);
    let stream = rt.stream_create(0, 1, 0).unwrap();
    let gate = Gate::new(&gpu);
    gate.hold(stream);

    // A budgeted command buffer: launched, re-instantiated, launched again, all held.
    ok(unsafe { rcb_cmdbuf_launch(f.cb.0, stream.0) });
    f.flip(0);
    assert_eq!(f.flip(1).reinstantiated, 1);
    ok(unsafe { rcb_cmdbuf_launch(f.cb.0, stream.0) });
    let fills = rt.malloc(0, fleet_bytes(2)).unwrap();
    common::run(rt, gpu.k.copy_u8, &args::copy(fills, f.buffer, fleet_bytes(2) as u64), stream);
    // A flattened source owning a user object, launched held.
    let out = rt.malloc(0, SRC_BYTES as usize).unwrap();
    let snapshot = rt.malloc(0, SRC_BYTES as usize).unwrap();
    let (g, source) = owning_source_graph(&gpu, &hip, out);
    let cb = Cb::primary();
    let (mut node, mut r) = (0, rcb_flatten_report::default());
    ok(unsafe { rcb_cmdbuf_add_flattened_child(cb.0, null(), 0, null(), g.0, &mut node, &mut r) });
    cb.finalize();
    rt.graph_destroy(g).unwrap();
    ok(unsafe { rcb_cmdbuf_launch(cb.0, stream.0) });
    common::run(rt, gpu.k.copy_u8, &args::copy(snapshot, out, SRC_BYTES), stream);

    // Both freed with their launches held: nothing they use goes.
    let execs = sim.live_count("exec");
    ok(unsafe { rcb_cmdbuf_free(std::mem::replace(&mut f.cb.0, std::ptr::null_mut())) });
    drop(cb);
    assert_eq!(sim.live_count("exec"), execs, "a free destroyed an executable graph a held launch runs");
    assert_eq!(source.runs.load(std::sync::atomic::Ordering::SeqCst), 0, "a free destroyed the source a held launch reads");
    assert_eq!(sim.live_count("exec_destroyed_in_flight"), in_flight);
    // Later calls cannot find the launches finished yet.
    drop(Cb::primary());
    assert_eq!(sim.live_count("exec"), execs);

    gate.open();
    rt.stream_synchronize(stream).unwrap();
    assert_eq!(gpu.read_bytes(snapshot, SRC_BYTES as usize), source_pattern(), "the held launch read a destroyed source");
    // The second launch of the budgeted one ran the new executable: allocation 0 in its second
    // home, 1 in its second home too; the first homes hold the first launch's values.
    let words = common::download_u32(rt, fills, fleet_bytes(2) / 4);
    let home = |i: usize, h: usize| words[slot(2, i, h) * WORDS as usize];
    assert_eq!((home(0, 0), home(1, 0), home(0, 1), home(1, 1)), (1, 2, 1, 2), "the launches' results");
    assert_eq!(sim.live_count("exec_destroyed_in_flight"), in_flight);

    // Later library calls (each a creation and a free here) find the launches finished and
    // destroy what they used, a bounded number of event queries each.
    for _ in 0..16 {
        drop(Cb::primary());
    }
    assert_eq!(source.runs.load(std::sync::atomic::Ordering::SeqCst), 1, "the source's user object went once");
    rt.stream_destroy(stream).unwrap();
    drop(f);
    for p in [fills, out, snapshot, source.buffer, gate.word] {
        rt.free(p).unwrap();
    }
    let after: Vec<u64> = kinds.iter().map(|k| sim.live_count(k)).collect();
    assert_eq!(after, before, "live {kinds:?} after the freed command buffers' launches finished");
    assert_eq!(sim.live_count("exec_destroyed_in_flight"), in_flight);
}

/// What a launch the library could not follow may use is leaked by the free, not destroyed
/// (counted in the process totals), unless the caller promised first that the launches
/// finished. The test destroys the leaked executable graph and template itself afterwards.
#[test]
fn a_free_leaks_what_a_launch_no_event_follows_may_use() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let in_flight = sim.live_count("exec_destroyed_in_flight");
    let (execs, graphs) = (sim.live_count("exec"), sim.live_count("graph"));
    let stream = rt.stream_create(0, 1, 0).unwrap();
    let gate = Gate::new(&gpu);
    for promise in [false, true] {
        let cb = Cb::primary();
        cb.finalize();
        let (mut exec, mut template) = (std::ptr::null_mut(), std::ptr::null_mut());
        ok(unsafe { rcb_cmdbuf_exec(cb.0, &mut exec) });
        ok(unsafe { rcb_cmdbuf_graph(cb.0, &mut template) });
        gate.hold(stream);
        sim.set_faults("hipEventRecord:1");
        ok(unsafe { rcb_cmdbuf_launch(cb.0, stream.0) });
        sim.set_faults("");
        let kept = fallback(std::ptr::null_mut(), RCB_FALLBACK_KEPT_UNTRACKED);
        if promise {
            gate.open();
            rt.stream_synchronize(stream).unwrap();
            ok(unsafe { rcb_cmdbuf_launches_done(cb.0) });
            drop(cb);
            assert_eq!((sim.live_count("exec"), sim.live_count("graph")), (execs, graphs), "after the promise the free destroys all");
            assert_eq!(fallback(std::ptr::null_mut(), RCB_FALLBACK_KEPT_UNTRACKED), kept);
        } else {
            drop(cb);
            assert_eq!((sim.live_count("exec"), sim.live_count("graph")), (execs + 1, graphs + 1), "the free destroyed what may run");
            assert_eq!(fallback(std::ptr::null_mut(), RCB_FALLBACK_KEPT_UNTRACKED), kept + 2, "the executable graph and the template");
            gate.open();
            rt.stream_synchronize(stream).unwrap();
            rt.exec_destroy(rocm_cmdbuf::runtime::Exec(exec)).unwrap();
            rt.graph_destroy(rocm_cmdbuf::runtime::Graph(template)).unwrap();
            write_words(rt, gate.word, &[0]);
        }
    }
    assert_eq!(sim.live_count("exec_destroyed_in_flight"), in_flight);
    rt.stream_destroy(stream).unwrap();
    rt.free(gate.word).unwrap();
}

/// The library's own event calls (after a launch, and the queries at
/// later launches and updates) run in relaxed capture mode, so that a capture in progress
/// elsewhere is not invalidated. On the software GPU an event query in the default (global)
/// mode fails and invalidates every global capture in the process, as on CUDA and clr; the test
/// shows that first, then launches and re-instantiates through the library during another
/// thread's global capture and during a thread-local capture of its own, and both captures end
/// whole.
#[test]
fn the_librarys_event_calls_leave_a_capture_in_progress_alone() {
    let _serial = common::serial();
    let Some(_sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let hip = unsafe { libloading::Library::new(std::env::var_os("RCB_HIP_LIBRARY").unwrap()) }.unwrap();
    type QueryFn = unsafe extern "C" fn(*mut std::ffi::c_void) -> i32;
    let query: QueryFn = unsafe { *hip.get(b"hipEventQuery\0").unwrap() };
    let capturer = Worker::new();
    let capture = Sent(rt.stream_create(0, 1, 0).unwrap());
    let scratch = rt.malloc(0, SLICE as usize).unwrap();
    let fill = gpu.k.fill_u32;
    let begin = move |mode: rocm_cmdbuf::runtime::CaptureMode| {
        let c = Sent(capture.0);
        move || -> Result<(), String> {
            let rt = common::runtime().unwrap();
            let c = c;
            rt.begin_capture(c.0, mode).map_err(|e| e.to_string())?;
            common::run(rt, fill, &args::fill(scratch, 1, WORDS), c.0);
            Ok(())
        }
    };
    let end = move || {
        let c = Sent(capture.0);
        move || -> Result<(), String> {
            let rt = common::runtime().unwrap();
            let c = c;
            let g = rt.end_capture(c.0).map_err(|e| e.to_string())?;
            let nodes = rt.graph_nodes(g).map_err(|e| e.to_string())?.len();
            rt.graph_destroy(g).map_err(|e| e.to_string())?;
            if nodes == 1 { Ok(()) } else { Err(format!("the capture holds {nodes} node(s), not 1")) }
        }
    };
    // The model bites: a plain query during another thread's global capture invalidates it.
    let event = rt.event_create(0).unwrap();
    capturer.run("beginning a global capture", begin(rocm_cmdbuf::runtime::CaptureMode::Global));
    assert_ne!(unsafe { query(event.0) }, 0, "a query in the global mode during a global capture must fail");
    let ended = std::sync::Arc::new(std::sync::Mutex::new(None));
    let e2 = ended.clone();
    let finish = end();
    capturer.run("ending the invalidated capture", move || {
        *e2.lock().unwrap() = Some(finish());
        Ok(())
    });
    assert!(ended.lock().unwrap().take().unwrap().is_err(), "the capture survived a plain query");
    rt.event_destroy(event).unwrap();

    // Through the library: launches, a re-instantiation, the old executable found finished.
    let mut f = Fleet::new(&gpu, 2, FILL_PUSH);
    let exercise = |f: &mut Fleet| {
        for round in 0..3 {
            ok(unsafe { rcb_cmdbuf_launch(f.cb.0, gpu.stream.0) });
            gpu.sync();
            f.flip(0);
            assert_eq!(f.flip(1).reinstantiated, 1, "round {round}");
        }
        ok(unsafe { rcb_cmdbuf_launch(f.cb.0, gpu.stream.0) });
        gpu.sync();
    };
    capturer.run("beginning a global capture", begin(rocm_cmdbuf::runtime::CaptureMode::Global));
    exercise(&mut f);
    capturer.run("ending the global capture", end());
    assert!(counters(&f.cb).retired_execs >= 2, "the library's queries found no launch finished");
    // A thread-local capture of the launching thread's own.
    let (b, e) = (begin(rocm_cmdbuf::runtime::CaptureMode::ThreadLocal), end());
    b().unwrap();
    exercise(&mut f);
    e().unwrap();
    f.launch_and_check(&gpu).unwrap();
    rt.stream_destroy(capture.0).unwrap();
    rt.free(scratch).unwrap();
}

/// A command buffer holding one flattened copy of an owning source (`owning_source_graph`), with
/// the update budget off, and what replaces that source.
struct OneSource {
    cb: Cb,
    group: rcb_node,
    out: u64,
    hip: libloading::Library,
    /// Every source given to the group so far, the first one first.
    sources: Vec<&'static Source>,
}

impl OneSource {
    fn new(gpu: &Gpu) -> OneSource {
        let hip = unsafe { libloading::Library::new(std::env::var_os("RCB_HIP_LIBRARY").unwrap()) }.unwrap();
        let out = gpu.rt.malloc(0, SRC_BYTES as usize).unwrap();
        let cb = Cb::primary();
        ok(unsafe { rcb_cmdbuf_set_exec_update_budget(cb.0, 0) });
        let (g, first) = owning_source_graph(gpu, &hip, out);
        let (mut group, mut r) = (0, rcb_flatten_report::default());
        ok(unsafe { rcb_cmdbuf_add_flattened_child(cb.0, null(), 0, null(), g.0, &mut group, &mut r) });
        assert_eq!(r.flattened, 1);
        cb.finalize();
        gpu.rt.graph_destroy(g).unwrap();
        OneSource { cb, group, out, hip, sources: vec![first] }
    }

    /// Gives the group a new source (an update; the old one waits for its launches).
    fn replace(&mut self, gpu: &Gpu) {
        let (g, source) = owning_source_graph(gpu, &self.hip, self.out);
        self.sources.push(source);
        self.cb.begin_update();
        let mut r = rcb_flatten_report::default();
        ok(unsafe { rcb_cmdbuf_update_flattened_child(self.cb.0, self.group, null(), g.0, &mut r) });
        self.cb.finalize();
        gpu.rt.graph_destroy(g).unwrap();
    }

    /// How often each source's user object was destroyed, in order.
    fn runs(&self) -> Vec<u32> {
        self.sources.iter().map(|s| s.runs.load(std::sync::atomic::Ordering::SeqCst)).collect()
    }

    /// Frees the command buffer and every source's buffer.
    fn free(self, gpu: &Gpu) {
        drop(self.cb);
        for s in &self.sources {
            gpu.rt.free(s.buffer).unwrap();
        }
        gpu.rt.free(self.out).unwrap();
    }
}

/// Past `MAX_CLOSED` (16) closed generations a replacement joins
/// the newest one. Seventeen generations of launches held behind one device word, then a launch
/// no event follows held behind another, then replacements: a source replaced in the joined
/// generation must wait for its launches (the joined generation stands for both numbers), the
/// source in service during the untracked launch must be kept even once every tracked launch has
/// finished, and one put in service after it is followed as usual (destroyed at once: no launch
/// used it).
#[test]
fn seventeen_held_generations_and_a_launch_no_event_follows_destroy_nothing_early() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let mut one = OneSource::new(&gpu);
    let (tracked, untracked) = (rt.stream_create(0, 1, 0).unwrap(), rt.stream_create(0, 1, 0).unwrap());
    let (gate, late_gate) = (Gate::new(&gpu), Gate::new(&gpu));
    gate.hold(tracked);
    late_gate.hold(untracked);
    for generation in 1..=17 {
        ok(unsafe { rcb_cmdbuf_launch(one.cb.0, tracked.0) });
        one.replace(&gpu);
        assert!(one.runs().iter().all(|&n| n == 0), "generation {generation}: a source went while its launch is held: {:?}", one.runs());
    }
    sim.set_faults("hipEventRecord:1");
    ok(unsafe { rcb_cmdbuf_launch(one.cb.0, untracked.0) });
    sim.set_faults("");
    let kept = fallback(one.cb.0, RCB_FALLBACK_KEPT_UNTRACKED);
    one.replace(&gpu);
    one.replace(&gpu);
    assert_eq!(fallback(one.cb.0, RCB_FALLBACK_KEPT_UNTRACKED), kept + 1, "the source the untracked launch may read is kept");
    let mut want = vec![0; 20];
    want[18] = 1;
    assert_eq!(one.runs(), want, "only the source no launch used went");
    // The tracked launches finish: what they used goes, not what the untracked one may use.
    gate.open();
    rt.stream_synchronize(tracked).unwrap();
    one.cb.launch(&gpu);
    let mut want = vec![1; 20];
    (want[17], want[19]) = (0, 0);
    assert_eq!(one.runs(), want, "after the tracked launches finished");
    late_gate.open();
    rt.stream_synchronize(untracked).unwrap();
    ok(unsafe { rcb_cmdbuf_launches_done(one.cb.0) });
    assert_eq!(one.runs()[17], 1, "given back by the promise");
    one.free(&gpu);
    for s in [tracked, untracked] {
        rt.stream_destroy(s).unwrap();
    }
    rt.free(gate.word).unwrap();
    rt.free(late_gate.word).unwrap();
}

/// Launches into `hipStreamPerThread` from two threads in a
/// generation that joins the newest of 16 held ones. Thread B's launch (finished) must not take
/// over the event that follows thread A's (held): each launch has an event of its own, used
/// again only once it has completed. The source both launches read is destroyed only after A's
/// launch finished.
#[test]
fn per_thread_launches_from_two_threads_across_a_join_are_each_followed() {
    let _serial = common::serial();
    let Some(_sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let mut one = OneSource::new(&gpu);
    let held = rt.stream_create(0, 1, 0).unwrap();
    let gate = Gate::new(&gpu);
    gate.hold(held);
    for _ in 0..16 {
        ok(unsafe { rcb_cmdbuf_launch(one.cb.0, held.0) });
        one.replace(&gpu);
    }
    let cb = CbPtr(one.cb.0);
    let late_gate = std::sync::Arc::new(Gate::new(&gpu));
    let a = late_gate.clone();
    std::thread::spawn(move || {
        a.hold(PER_THREAD);
        ok(unsafe { rcb_cmdbuf_launch(cb.get(), PER_THREAD.0) });
    })
    .join()
    .unwrap();
    std::thread::spawn(move || {
        ok(unsafe { rcb_cmdbuf_launch(cb.get(), PER_THREAD.0) });
        common::runtime().unwrap().stream_synchronize(PER_THREAD).unwrap();
    })
    .join()
    .unwrap();
    // Source 16, read by both, is replaced: this generation joins the newest held one.
    one.replace(&gpu);
    gate.open();
    rt.stream_synchronize(held).unwrap();
    one.cb.launch(&gpu);
    // Source 15 waits too: its generation is the one the last joined (which only delays it).
    let mut want = vec![1; 18];
    (want[15], want[16], want[17]) = (0, 0, 0);
    assert_eq!(one.runs(), want, "thread A's launch still reads source 16");
    late_gate.open();
    let mut spins = 0;
    while one.runs()[15..17] != [1, 1] {
        one.cb.launch(&gpu);
        spins += 1;
        assert!(spins < 100_000, "source 16 was never destroyed after thread A's launch finished");
    }
    one.free(&gpu);
    rt.stream_destroy(held).unwrap();
    rt.free(gate.word).unwrap();
}

/// A launch the runtime fails may have queued part of its work
/// (clr runs a graph as several commands), so it counts as a launch no event follows: what it
/// may use is kept, never destroyed by the replacement after it.
#[test]
fn a_failed_launch_keeps_what_it_may_use() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let mut one = OneSource::new(&gpu);
    sim.set_faults("hipGraphLaunch:1");
    let launched = unsafe { rcb_cmdbuf_launch(one.cb.0, gpu.stream.0) };
    sim.set_faults("");
    fails(launched, RCB_STATUS_RUNTIME_ERROR, "hipGraphLaunch");
    one.replace(&gpu);
    assert_eq!(one.runs(), [0, 0], "the source a failed launch may read was destroyed");
    assert_eq!(fallback(one.cb.0, RCB_FALLBACK_KEPT_UNTRACKED), 1);
    gpu.sync();
    ok(unsafe { rcb_cmdbuf_launches_done(one.cb.0) });
    assert_eq!(one.runs(), [1, 0]);
    one.free(&gpu);
}

/// The executables kept for launches no event follows were never
/// capped. With the library's `hipEventRecord` failing after every launch and a budget of one
/// byte (every update re-instantiates), 200 rounds of a launch and an update left 201 live
/// executable graphs. Past `MAX_KEPT_EXECS` kept ones the budget stops re-instantiating and the
/// update goes to the live executable in place (counted as `reinstantiate_blocked`); no update
/// is refused and every launch still computes the right result. The caller's promise gives the
/// kept ones back.
#[test]
fn executables_kept_for_launches_no_event_follows_are_capped() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    const ROUNDS: usize = 200;
    let execs = sim.live_count("exec");
    let mut f = Fleet::new(&gpu, 2, 1);
    let records = sim.call_count("hipEventRecord");
    let mut most = 0;
    for round in 0..ROUNDS {
        // The next hipEventRecord, the library's after this launch, fails.
        sim.set_faults("hipEventRecord:1");
        let checked = f.launch_and_check(&gpu);
        sim.set_faults("");
        checked.unwrap_or_else(|e| panic!("round {round}: {e}"));
        f.flip(round % 2);
        most = most.max(sim.live_count("exec") - execs);
    }
    assert_eq!(sim.call_count("hipEventRecord") - records, ROUNDS as u64, "one failed record per launch");
    assert!(most <= MAX_KEPT_EXECS as u64 + 1, "{most} live executable graphs, more than the {MAX_KEPT_EXECS} kept and the live one");
    let c = counters(&f.cb);
    let kept = MAX_KEPT_EXECS as u64;
    assert_eq!(c.reinstantiations, kept, "re-instantiations up to the cap");
    assert_eq!(c.fallbacks[RCB_FALLBACK_KEPT_UNTRACKED as usize], kept);
    assert_eq!(c.fallbacks[RCB_FALLBACK_REINSTANTIATE_BLOCKED as usize], ROUNDS as u64 - kept, "every later update went in place");
    assert_eq!(c.exec_param_pushes, ROUNDS as u64 - kept);
    f.launch_and_check(&gpu).unwrap();
    // Every launch was synchronized: the promise destroys the kept ones, and the budget
    // re-instantiates again.
    ok(unsafe { rcb_cmdbuf_launches_done(f.cb.0) });
    assert_eq!(sim.live_count("exec") - execs, 1);
    assert_eq!(f.flip(0).reinstantiated, 1);
    f.launch_and_check(&gpu).unwrap();
}

/// The library's event calls set the calling thread's capture mode
/// to relaxed and give it back. The thread is in the global mode again after a launch and an
/// update; a give-back that fails once is tried again; one that fails twice leaves the thread
/// relaxed, which is logged and counted (`capture_mode_left_relaxed`, process totals).
#[test]
fn the_threads_capture_mode_is_given_back_after_the_librarys_event_calls() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let hip = unsafe { libloading::Library::new(std::env::var_os("RCB_HIP_LIBRARY").unwrap()) }.unwrap();
    type ExchangeFn = unsafe extern "C" fn(*mut i32) -> i32;
    let exchange: ExchangeFn = unsafe { *hip.get(b"hipThreadExchangeStreamCaptureMode\0").unwrap() };
    const GLOBAL: i32 = 0;
    const RELAXED: i32 = 2;
    // The calling thread's mode, set to `to`; returns the mode it had.
    let set = |to: i32| {
        let mut mode = to;
        assert_eq!(unsafe { exchange(&mut mode) }, 0);
        mode
    };
    let mode = || {
        let now = set(GLOBAL);
        set(now);
        now
    };
    assert_eq!(mode(), GLOBAL, "a test thread starts in the global mode");
    let mut f = Fleet::new(&gpu, 2, FILL_PUSH);
    let left_relaxed = || fallback(std::ptr::null_mut(), RCB_FALLBACK_CAPTURE_MODE_LEFT_RELAXED);
    let before = left_relaxed();
    f.launch_and_check(&gpu).unwrap();
    f.flip(0);
    assert_eq!(f.flip(1).reinstantiated, 1);
    f.launch_and_check(&gpu).unwrap();
    assert_eq!(mode(), GLOBAL, "after launches and a re-instantiation");
    // The first give-back fails (the second exchange of the launch's first event call).
    sim.set_faults("hipThreadExchangeStreamCaptureMode:2");
    ok(unsafe { rcb_cmdbuf_launch(f.cb.0, gpu.stream.0) });
    sim.set_faults("");
    gpu.sync();
    assert_eq!((mode(), left_relaxed()), (GLOBAL, before), "one failed give-back is tried again");
    // It fails twice: left relaxed, and counted.
    sim.set_faults("hipThreadExchangeStreamCaptureMode:2,hipThreadExchangeStreamCaptureMode:3");
    ok(unsafe { rcb_cmdbuf_launch(f.cb.0, gpu.stream.0) });
    sim.set_faults("");
    gpu.sync();
    assert_eq!((mode(), left_relaxed()), (RELAXED, before + 1), "a thread left relaxed is counted");
    set(GLOBAL);
    f.launch_and_check(&gpu).unwrap();
    assert_eq!(mode(), GLOBAL);
}

/// A launch on another device's stream is followed by an event made
/// on that device (the software GPU refuses to record an event on another device's stream, as
/// clr and CUDA do), so what it may use waits for it and is destroyed once it finished, never
/// kept for good.
#[test]
fn a_launch_on_another_devices_stream_is_followed() {
    let _serial = common::serial();
    let Some(_sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    if rt.info().device_count < 2 {
        return common::skip("every check", "needs a second device");
    }
    let mut one = OneSource::new(&gpu);
    let stream = rt.stream_create(1, 1, 0).unwrap();
    let gate = Gate::new(&gpu);
    gate.hold(stream);
    ok(unsafe { rcb_cmdbuf_launch(one.cb.0, stream.0) });
    one.replace(&gpu);
    assert_eq!(fallback(one.cb.0, RCB_FALLBACK_KEPT_UNTRACKED), 0, "the launch was not followed");
    assert_eq!(one.runs(), [0, 0], "the source a held launch reads went");
    gate.open();
    rt.stream_synchronize(stream).unwrap();
    one.cb.launch(&gpu);
    assert_eq!(one.runs(), [1, 0], "the old source goes once the launch finished");
    one.free(&gpu);
    rt.stream_destroy(stream).unwrap();
    rt.free(gate.word).unwrap();
}

/// Launches on more streams than the library used to follow (64)
/// are all followed: the set of events grows instead of giving up (its completed events are
/// reused), so nothing is kept for good and nothing goes while one of them runs.
#[test]
fn launches_on_seventy_streams_are_all_followed() {
    let _serial = common::serial();
    let Some(_sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let mut one = OneSource::new(&gpu);
    let streams: Vec<Stream> = (0..70).map(|_| rt.stream_create(0, 1, 0).unwrap()).collect();
    // The first 64 launches stay held after the last 6 finish.
    let (first, last) = (Gate::new(&gpu), Gate::new(&gpu));
    for (i, &s) in streams.iter().enumerate() {
        let gate = if i < 64 { &first } else { &last };
        gate.hold(s);
        ok(unsafe { rcb_cmdbuf_launch(one.cb.0, s.0) });
    }
    one.replace(&gpu);
    assert_eq!(fallback(one.cb.0, RCB_FALLBACK_KEPT_UNTRACKED), 0, "a launch was not followed");
    last.open();
    for &s in &streams[64..] {
        rt.stream_synchronize(s).unwrap();
    }
    one.cb.launch(&gpu);
    assert_eq!(one.runs(), [0, 0], "the source 64 held launches read went");
    first.open();
    for &s in &streams[..64] {
        rt.stream_synchronize(s).unwrap();
    }
    one.cb.launch(&gpu);
    assert_eq!(one.runs(), [1, 0], "the old source goes once every launch finished");
    one.free(&gpu);
    for s in streams {
        rt.stream_destroy(s).unwrap();
    }
    rt.free(first.word).unwrap();
    rt.free(last.word).unwrap();
}

//! Sixteen threads record, update and launch their own command buffers while four other threads
//! free random ones of those buffers under them and churn command buffers of their own. Every
//! call must return a documented status (a freed buffer: `RCB_STATUS_INVALID_HANDLE`, never a
//! crash), the buffers nobody frees must compute the right results at every step, each freed
//! buffer must be freed exactly once, and on the software GPU no graph or executable graph may
//! be left behind.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI on handles they own or that another thread may free; each call's contract is the header's"
)]

mod cmdbuf_helpers;
mod common;

use cmdbuf_helpers::{BYTES, N, with_launch};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Function, Runtime, Stream};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

const WORKERS: usize = 16;
const KILLERS: usize = 4;
/// Command buffers per worker: the first two are never freed by anyone else, the others are.
const PER_WORKER: usize = 4;
const SURVIVORS: usize = 2;
const ROUNDS: usize = 100;

/// A documented status: one of `RCB_OK` ..= `RCB_STATUS_PANIC`, not the panic itself.
fn documented(s: rcb_status) -> bool {
    (RCB_OK..RCB_STATUS_PANIC).contains(&s)
}

/// One command buffer of a worker: out = x + y (a kernel), copy = out (a memcpy), over four
/// allocations with two placements.
struct Buffer {
    handle: usize,
    placements: [[u64; 4]; 2],
}

fn table(p: &[u64; 4]) -> Vec<rcb_allocation> {
    cmdbuf_helpers::table(&p.map(|base| (base, BYTES)))
}

fn write(rt: &dyn Runtime, ptr: u64, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    rt.direct().copy_to_device(ptr, &bytes).expect("write");
}

fn record(rt: &dyn Runtime, add: Function, worker: usize, index: usize) -> Buffer {
    let placements = [(); 2].map(|()| {
        let x: Vec<f32> = (0..N).map(|i| (i + worker) as f32).collect();
        let malloc = || rt.malloc(0, BYTES as usize).expect("malloc");
        [common::upload_f32(rt, 0, &x), common::upload_f32(rt, 0, &[index as f32; N]), malloc(), malloc()]
    });
    let mut cb = null_mut();
    assert_eq!(unsafe { rcb_cmdbuf_new(0, &mut cb) }, RCB_OK);
    let t = table(&placements[0]);
    assert_eq!(unsafe { rcb_cmdbuf_set_allocations(cb, t.as_ptr(), t.len()) }, RCB_OK);
    let p = placements[0];
    let (mut k, mut c) = (0, 0);
    with_launch(add, N as u64, &common::args::add(p[2], p[0], p[1], N as u64), |launch| {
        assert_eq!(unsafe { rcb_cmdbuf_add_kernel(cb, std::ptr::null(), 0, launch, &mut k) }, RCB_OK);
    });
    assert_eq!(unsafe { rcb_cmdbuf_add_memcpy_d2d(cb, &k, 1, p[3], p[2], BYTES, &mut c) }, RCB_OK);
    assert_eq!(unsafe { rcb_cmdbuf_finalize(cb) }, RCB_OK);
    Buffer { handle: cb as usize, placements }
}

/// What a worker saw; the test fails on any entry of `errors`.
#[derive(Default)]
struct Seen {
    errors: Vec<String>,
    verified: usize,
    refused: usize,
}

/// Moves `b` to placement `to` and launches it: `Ok(true)` when both succeeded, `Ok(false)` when
/// the buffer was freed under the caller (allowed only when `doomed`).
fn step(b: &Buffer, to: usize, stream: Stream, doomed: bool, seen: &mut Seen) -> bool {
    let cb = b.handle as *mut rcb_cmdbuf;
    let t = table(&b.placements[to]);
    let mut report = rcb_update_report::default();
    let s = unsafe { rcb_cmdbuf_update_allocations(cb, t.as_ptr(), t.len(), &mut report) };
    let s = if s == RCB_OK {
        if report.needs_rerecord != 0 || report.moved_allocations != 4 {
            seen.errors.push(format!("update report {report:?}"));
        }
        unsafe { rcb_cmdbuf_launch(cb, stream.0) }
    } else {
        s
    };
    match s {
        RCB_OK => true,
        RCB_STATUS_INVALID_HANDLE if doomed => {
            seen.refused += 1;
            false
        }
        s => {
            seen.errors.push(format!("status {s} on a {} command buffer", if doomed { "doomed" } else { "surviving" }));
            false
        }
    }
}

fn worker(rt: &'static dyn Runtime, worker: usize, buffers: &[Buffer], stream: Stream) -> Seen {
    let mut seen = Seen::default();
    let mut live = vec![true; buffers.len()];
    for round in 0..ROUNDS {
        let to = (round + 1) % 2;
        for (i, b) in buffers.iter().enumerate() {
            if !live[i] {
                continue;
            }
            let p = b.placements[to];
            write(rt, p[3], &[-1.0; N]);
            live[i] = step(b, to, stream, i >= SURVIVORS, &mut seen);
            rt.stream_synchronize(stream).expect("synchronize");
            if i < SURVIVORS {
                let got = common::download_f32(rt, p[3], N);
                let want: Vec<f32> = (0..N).map(|e| (e + worker) as f32 + i as f32).collect();
                if got != want {
                    seen.errors.push(format!("worker {worker}, buffer {i}, round {round}: {:?}… want {:?}…", &got[..4], &want[..4]));
                }
                seen.verified += 1;
            }
        }
    }
    seen
}

#[test]
fn sixteen_threads_use_their_command_buffers_while_others_free_some_of_them() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    let sim = common::hipsim("every graph and executable destroyed (the runtime's live objects)");
    let add = common::kernels(rt, 0).add_f32;
    let graphs = sim.as_ref().map(|s| (s.live_count("graph"), s.live_count("exec")));

    let all: Vec<Vec<Buffer>> = (0..WORKERS).map(|w| (0..PER_WORKER).map(|i| record(rt, add, w, i)).collect()).collect();
    let doomed: Arc<Vec<usize>> = Arc::new(all.iter().flat_map(|bs| bs[SURVIVORS..].iter().map(|b| b.handle)).collect());
    let frees = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(WORKERS + KILLERS));

    let killers: Vec<_> = (0..KILLERS)
        .map(|k| {
            let (doomed, frees, done, start) = (Arc::clone(&doomed), Arc::clone(&frees), Arc::clone(&done), Arc::clone(&start));
            std::thread::spawn(move || {
                let mut errors = Vec::new();
                let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ k as u64;
                let mut next = || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                start.wait();
                while !done.load(Ordering::Relaxed) {
                    // A doomed buffer, freed once by whichever killer gets there first.
                    let h = doomed[(next() % doomed.len() as u64) as usize];
                    match unsafe { rcb_cmdbuf_free(h as *mut rcb_cmdbuf) } {
                        RCB_OK => {
                            frees.fetch_add(1, Ordering::Relaxed);
                        }
                        RCB_STATUS_INVALID_HANDLE => {}
                        s => errors.push(format!("freeing a doomed buffer: status {s}")),
                    }
                    // A command buffer of its own, made and freed meanwhile.
                    let mut cb = null_mut();
                    let s = unsafe { rcb_cmdbuf_new(0, &mut cb) };
                    if s != RCB_OK || unsafe { rcb_cmdbuf_finalize(cb) } != RCB_OK || unsafe { rcb_cmdbuf_free(cb) } != RCB_OK {
                        errors.push(format!("a killer's own command buffer: status {s}"));
                    }
                    // A forged handle and NULL.
                    let forged = unsafe { rcb_cmdbuf_free(next() as usize as *mut rcb_cmdbuf) };
                    if !documented(forged) || unsafe { rcb_cmdbuf_free(null_mut()) } != RCB_OK {
                        errors.push(format!("freeing a forged handle: status {forged}"));
                    }
                    std::thread::sleep(std::time::Duration::from_micros(next() % 500));
                }
                errors
            })
        })
        .collect();

    let workers: Vec<_> = all
        .into_iter()
        .enumerate()
        .map(|(w, buffers)| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                let stream = rt.stream_create(0, 1, 0).expect("stream");
                start.wait();
                let seen = worker(rt, w, &buffers, stream);
                rt.stream_destroy(stream).expect("stream destroy");
                (seen, buffers)
            })
        })
        .collect();

    let mut errors = Vec::new();
    let (mut verified, mut refused) = (0, 0);
    let mut finished = Vec::new();
    for w in workers {
        let (seen, buffers) = w.join().expect("a worker panicked");
        errors.extend(seen.errors);
        verified += seen.verified;
        refused += seen.refused;
        finished.push(buffers);
    }
    // The killers go on until every doomed buffer is freed.
    while frees.load(Ordering::Relaxed) < doomed.len() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    done.store(true, Ordering::Relaxed);
    for k in killers {
        errors.extend(k.join().expect("a killer panicked"));
    }
    for b in finished.iter().flatten() {
        let s = unsafe { rcb_cmdbuf_free(b.handle as *mut rcb_cmdbuf) };
        let survivor = !doomed.contains(&b.handle);
        if (survivor && s != RCB_OK) || (!survivor && s != RCB_STATUS_INVALID_HANDLE) {
            errors.push(format!("the final free of a {} buffer: status {s}", if survivor { "surviving" } else { "doomed" }));
        }
        for &p in b.placements.iter().flatten() {
            rt.free(p).expect("free");
        }
    }
    assert!(errors.is_empty(), "{} problem(s), first: {:?}", errors.len(), &errors[..errors.len().min(5)]);
    assert_eq!(frees.load(Ordering::Relaxed), doomed.len(), "each doomed buffer freed exactly once");
    assert_eq!(verified, WORKERS * SURVIVORS * ROUNDS, "every step of every surviving buffer checked");
    eprintln!("{verified} results checked; {refused} calls on freed buffers refused");
    if let (Some(s), Some((g, e))) = (sim, graphs) {
        assert_eq!((s.live_count("graph"), s.live_count("exec")), (g, e), "no graph or executable graph left behind");
    }
}

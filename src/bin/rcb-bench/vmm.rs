//! `vmm`: host cost of one VMM-pool iteration (acquire + release, no copies) against what a
//! pool without stable addresses pays per iteration: unmap + map + set-access of the same
//! buffers.

use crate::table::{Table, median_ns, ratio, time};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Runtime, Stream};
use std::ptr::{null, null_mut};
use std::time::Instant;

/// The buffers of one step: activations, a workspace and a small live-out.
const SIZES: [u64; 3] = [8 << 20, 2 << 20, 64 << 10];
/// One timed batch uses each slot once, after the stream has drained (untimed), so acquire
/// never waits: the GPU is not the bottleneck of a real step loop, the host's cost is measured.
const SLOTS: u32 = 4;
const BATCH: usize = SLOTS as usize;

pub fn run(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let runs = if quick { 20 } else { 200 };
    let mut table = Table::new(
        format!(
            "vmm: per-iteration host cost, {} buffers ({} KiB), {SLOTS} slots, median of {runs} batches of one iteration per slot",
            SIZES.len(),
            SIZES.iter().sum::<u64>() >> 10
        ),
        &[
            "devices",
            "acquire + release",
            "of which the timeline write (bare stream write)",
            "unmap + map + set-access (baseline)",
            "speed-up",
        ],
    );
    let devices = if rt.info().device_count >= 2 && rt.can_access_peer(1, 0).map_err(|e| e.to_string())? { 2 } else { 1 };
    for n in 1..=devices {
        let peers: Vec<i32> = (1..n).collect();
        let (pool_ns, write_ns) = pool_iteration(rt, &peers, runs)?;
        let remap_ns = remap_iteration(rt, &peers, runs)?;
        table.row(vec![n.to_string(), time(pool_ns), time(write_ns), time(remap_ns), ratio(remap_ns, pool_ns)]);
    }
    if devices == 1 {
        println!("\n(one device only: the 2-device row needs a second device that can access device 0)");
    }
    table.print();
    Ok(())
}

fn status(what: &str, s: rcb_status) -> Result<(), String> {
    if s == RCB_OK {
        return Ok(());
    }
    let mut buf = [0 as std::ffi::c_char; 512];
    // SAFETY: a writable buffer of the given length.
    unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: the export NUL-terminated the buffer.
    Err(format!("{what}: {}", unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy()))
}

/// Per-iteration cost of acquire + release, and of the bare stream write that release enqueues.
fn pool_iteration(rt: &'static dyn Runtime, peers: &[i32], runs: usize) -> Result<(f64, f64), String> {
    let stream = rt.stream_create(0, 1, 0).map_err(|e| e.to_string())?;
    let config = rcb_vmm_pool_config {
        device: 0,
        backing: RCB_VMM_BACKING_VMM,
        num_slots: SLOTS,
        num_buffers: SIZES.len() as u32,
        buffer_sizes: SIZES.as_ptr(),
        num_peers: peers.len() as u32,
        peers: if peers.is_empty() { null() } else { peers.as_ptr() },
        timeout_ms: 0,
        ..Default::default()
    };
    let mut pool = null_mut();
    // SAFETY: `config` and its arrays (SIZES, peers) outlive the call; `pool` is a writable out-pointer.
    status("rcb_vmm_pool_new", unsafe { rcb_vmm_pool_new(&config, &mut pool) })?;
    let ns = per_iteration(rt, stream, runs, || {
        let mut slot = rcb_vmm_slot::default();
        // SAFETY: `pool` is live until `rcb_vmm_pool_free` below; `slot` is a writable local.
        status("acquire", unsafe { rcb_vmm_pool_acquire(pool, &mut slot) })?;
        // SAFETY: `pool` and `stream` are live; `slot` was filled by the acquire above.
        status("release", unsafe { rcb_vmm_pool_release(pool, &slot, stream.0) })
    })?;
    let mut slot = rcb_vmm_slot::default();
    // SAFETY: `pool` is live; `slot` is a writable local.
    status("acquire", unsafe { rcb_vmm_pool_acquire(pool, &mut slot) })?;
    // A write to the slot's own first buffer: any device address the stream may write will do.
    // SAFETY: the acquire filled `buffers` with `num_buffers` (SIZES.len() > 0) addresses, valid while the pool lives.
    let target = unsafe { *slot.buffers };
    let write_ns = per_iteration(rt, stream, runs, || {
        rt.stream_memory().and_then(|m| m.stream_write_u64(stream, target, 1)).map_err(|e| e.to_string())
    })?;
    // SAFETY: `pool` and `stream` are live; `slot` was filled by the acquire above.
    status("release", unsafe { rcb_vmm_pool_release(pool, &slot, stream.0) })?;
    rt.stream_synchronize(stream).map_err(|e| e.to_string())?;
    // SAFETY: `pool` is live and not used after this call.
    status("rcb_vmm_pool_free", unsafe { rcb_vmm_pool_free(pool) })?;
    rt.stream_destroy(stream).map_err(|e| e.to_string())?;
    Ok((ns, write_ns))
}

/// Median over `runs` batches of `BATCH` calls of `step`, per call; the stream drains (untimed)
/// before each batch and the first batch is a warm-up.
fn per_iteration(rt: &dyn Runtime, stream: Stream, runs: usize, mut step: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let mut samples = Vec::with_capacity(runs + 1);
    for _ in 0..=runs {
        rt.stream_synchronize(stream).map_err(|e| e.to_string())?;
        let start = Instant::now();
        for _ in 0..BATCH {
            step()?;
        }
        samples.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    samples.remove(0);
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

fn remap_iteration(rt: &'static dyn Runtime, peers: &[i32], runs: usize) -> Result<f64, String> {
    let e = |e: rocm_cmdbuf::error::Error| e.to_string();
    let vmm = rt.vmm().map_err(e)?;
    let granularity = vmm.granularity(0).map_err(e)? as u64;
    let bytes = SIZES.iter().map(|s| s.next_multiple_of(256)).sum::<u64>().next_multiple_of(granularity) as usize;
    let access: Vec<i32> = std::iter::once(0).chain(peers.iter().copied()).collect();
    let physical = vmm.create(0, bytes).map_err(e)?;
    let base = vmm.reserve(bytes, granularity as usize).map_err(e)?;
    vmm.map(base, bytes, physical).map_err(e)?;
    vmm.set_access(base, bytes, &access).map_err(e)?;
    let mut failure = None;
    let ns = median_ns(runs, || {
        for _ in 0..BATCH {
            let r =
                vmm.unmap(base, bytes).and_then(|()| vmm.map(base, bytes, physical)).and_then(|()| vmm.set_access(base, bytes, &access));
            if let Err(err) = r {
                failure.get_or_insert(err.to_string());
            }
        }
    }) / BATCH as f64;
    vmm.unmap(base, bytes).map_err(e)?;
    vmm.free_range(base, bytes).map_err(e)?;
    vmm.release(physical).map_err(e)?;
    failure.map_or(Ok(ns), Err)
}

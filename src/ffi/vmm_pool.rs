//! `rcb_vmm_pool_*`: the circular VMM pool behind the C ABI.

use super::handle::handle_type;
use super::{arg_out, arg_out_sized, arg_sized, arg_slice, boundary, live, rcb_status, register, sized_struct, take, write_out};
use crate::config;
use crate::runtime::Stream;
use crate::vmm_pool::{Backing, DeviceCopy, Lease, MAX_BUFFERS, MAX_PEERS, PoolConfig, VmmPool};
use std::ffi::c_void;
use std::time::Duration;

// The version node of each export of this module (abi/librocm_cmdbuf.map, through build.rs).
include!(concat!(env!("OUT_DIR"), "/symbol_versions/vmm_pool.rs"));

/// A pool: one physical chunk (or a set of device allocations) per slot at addresses that never
/// change, and a GPU-written timeline per slot. Opaque; the value is a handle id, never an
/// address, so a freed or forged handle yields `RCB_STATUS_INVALID_HANDLE`.
pub struct rcb_vmm_pool {
    _opaque: [u8; 0],
}

// The pool synchronizes its own state (acquire waits for another thread's release), so it is
// shared as it is, without a lock around it.
handle_type!(rcb_vmm_pool => VmmPool);

/// `rcb_vmm_pool_config.backing`: one physical chunk per slot (`hipMemCreate`), permanently
/// mapped at its own reserved range, with access for the device and every listed peer that can
/// reach it.
pub const RCB_VMM_BACKING_VMM: u32 = 1;
/// `rcb_vmm_pool_config.backing`: plain device allocations (`hipMalloc`) kept for the pool's
/// life. `peers` is not used: peer access follows `hipDeviceEnablePeerAccess`.
pub const RCB_VMM_BACKING_DEVICE: u32 = 2;

/// How to build a pool. Read during `rcb_vmm_pool_new` only; the caller keeps ownership of it
/// and of the arrays it points to.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcb_vmm_pool_config {
    /// `sizeof(rcb_vmm_pool_config)` (the rule for sized structs).
    pub struct_size: u32,
    /// The device that owns the memory.
    pub device: i32,
    /// `RCB_VMM_BACKING_VMM` or `RCB_VMM_BACKING_DEVICE`.
    pub backing: u32,
    /// Number of slots, at least 1. Iteration `i` uses slot `i % num_slots`.
    pub num_slots: u32,
    /// Number of buffers per slot (1 to 4096) and their sizes in bytes, each at most 2^46. A zero
    /// size gives that buffer address 0. In the VMM backing the buffers of a slot share one
    /// chunk, each starting on a 256-byte boundary, the chunk rounded up to the allocation
    /// granularity; that chunk may not pass 2^46 bytes either, so {2^46, 0, 4096} is refused
    /// there (2^46 + 256 + 4096 bytes per slot) while each size alone is accepted.
    pub num_buffers: u32,
    pub buffer_sizes: *const u64,
    /// Devices (other than `device`, no repeats, at most 64) to grant read-write access to the
    /// VMM memory; those that cannot access `device` are skipped. May be NULL when `num_peers` is 0.
    pub num_peers: u32,
    pub peers: *const i32,
    /// How long `rcb_vmm_pool_acquire` and `rcb_vmm_pool_free` wait for the GPU; 0 takes
    /// `RCB_VMM_POOL_TIMEOUT_MS` (default 10 000 ms).
    pub timeout_ms: u32,
}

/// A slot held between `rcb_vmm_pool_acquire` and `rcb_vmm_pool_release`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcb_vmm_slot {
    /// In: `sizeof(rcb_vmm_slot)`; out: the bytes written (the rule for sized structs). An
    /// acquire leaves it as the release needs it.
    pub struct_size: u32,
    /// This use's iteration number (0, 1, 2, ... across the pool's life).
    pub iteration: u64,
    /// The slot index, `iteration % num_slots`.
    pub index: u32,
    /// Number of entries in `buffers` (the config's `num_buffers`).
    pub num_buffers: u32,
    /// The slot's buffer addresses, the same every time the slot comes round. Owned by the pool
    /// and valid until `rcb_vmm_pool_free`.
    pub buffers: *const u64,
}

// The sizes in 0.1.0, when the structs got their size.
sized_struct!(rcb_vmm_pool_config, 56);
sized_struct!(rcb_vmm_slot, 32);

/// One device-to-device copy.
#[repr(C)]
pub struct rcb_vmm_copy {
    pub dst: u64,
    pub src: u64,
    pub bytes: u64,
}

/// Creates a pool: every slot's memory and timeline are made up front and kept until
/// `rcb_vmm_pool_free`. On failure everything made so far is given back and `*out` is untouched.
///
/// Returns `RCB_STATUS_INVALID_ARGUMENT` for zero or too many slots/buffers, a size over 2^46
/// bytes, in the VMM backing a slot whose buffers together pass 2^46 bytes (see
/// `rcb_vmm_pool_config.num_buffers`), an unknown backing or a bad peer (the message names the
/// field),
/// `RCB_STATUS_UNSUPPORTED` when the runtime lacks VMM or stream memory operations, and the
/// runtime's error (naming the call and the slot) when an allocation fails.
/// The caller owns the new handle in `*out` and frees it with `rcb_vmm_pool_free`.
///
/// Thread-safety: any thread.
///
/// # Safety
/// `config` must be NULL or point to a valid `rcb_vmm_pool_config` of `struct_size` readable
/// bytes whose arrays hold the counts it states; `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_vmm_pool_new(config: *const rcb_vmm_pool_config, out: *mut *mut rcb_vmm_pool) -> rcb_status {
    boundary(|| {
        // SAFETY: validity is the caller's promise.
        let c = unsafe { arg_sized(config, "config") }?;
        let out = arg_out(out, "out")?;
        // SAFETY: the counts are the caller's promise; arg_slice bounds them first.
        let sizes = unsafe { arg_slice(c.buffer_sizes, c.num_buffers as usize, "buffer_sizes", MAX_BUFFERS) }?;
        // SAFETY: as for `buffer_sizes`.
        let peers = unsafe { arg_slice(c.peers, c.num_peers as usize, "peers", MAX_PEERS) }?;
        let backing = match c.backing {
            RCB_VMM_BACKING_VMM => Backing::Vmm,
            RCB_VMM_BACKING_DEVICE => Backing::Device,
            other => {
                return Err(crate::error::Error::invalid_argument(format!(
                    "backing: {other} is neither RCB_VMM_BACKING_VMM (1) nor RCB_VMM_BACKING_DEVICE (2)"
                )));
            }
        };
        let timeout_ms = match c.timeout_ms {
            0 => config::get()?.vmm_pool_timeout_ms,
            ms => ms,
        };
        let pool = VmmPool::new(&PoolConfig {
            device: c.device,
            backing,
            slots: c.num_slots as usize,
            buffer_sizes: sizes.to_vec(),
            peers: peers.to_vec(),
            timeout: Duration::from_millis(timeout_ms.into()),
        })?;
        // SAFETY: checked by arg_out.
        unsafe { write_out(out, register::<rcb_vmm_pool>(pool)?) };
        Ok(())
    })
}

/// What an acquire writes for `lease`: its iteration, slot and the slot's buffers (borrowed from
/// the pool).
fn slot_of(pool: &VmmPool, lease: &Lease) -> crate::error::Result<rcb_vmm_slot> {
    let buffers = pool.addresses(lease.slot)?;
    Ok(rcb_vmm_slot {
        iteration: lease.iteration,
        index: lease.slot as u32,
        num_buffers: buffers.len() as u32,
        buffers: buffers.as_ptr(),
        ..Default::default()
    })
}

/// Takes the next iteration and waits until its slot's previous use has finished on the GPU
/// (spinning briefly, then yielding), then fills `*out`.
///
/// Returns `RCB_STATUS_TIMEOUT` when the slot is not free within the pool's timeout; the message
/// names the slot, the awaited and the observed timeline values. Returns
/// `RCB_STATUS_INVALID_STATE` at once, without waiting, while a release of the slot has failed
/// with the slot still held (see `rcb_vmm_pool_release`). Either way that iteration is then spent
/// (later ones do not wait for it) and `*out` is untouched. `out` is caller-owned; the addresses
/// it receives are owned by the pool.
///
/// Thread-safety: any thread; concurrent calls get distinct iterations, and a thread may wait
/// here while another releases.
///
/// # Safety
/// `out` must be NULL or a sized struct writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_vmm_pool_acquire(pool: *mut rcb_vmm_pool, out: *mut rcb_vmm_slot) -> rcb_status {
    boundary(|| {
        // SAFETY: the caller promises a NULL or writable sized struct.
        let out = unsafe { arg_out_sized(out, "out") }?;
        let pool = live(pool, "pool")?;
        let lease = pool.acquire()?;
        let value = slot_of(&pool, &lease)?;
        // SAFETY: checked by arg_out_sized.
        unsafe { out.write(value) };
        Ok(())
    })
}

/// Takes the next iteration like `rcb_vmm_pool_acquire`, but without waiting on the host for the
/// GPU: `stream` (the caller's `hipStream_t`) is made to wait, on the GPU, until the slot's
/// previous use has finished (`hipStreamWaitValue64`, greater or equal, on the slot's timeline),
/// so whatever is enqueued on `stream` afterwards (copies into the slot, the work, the release)
/// runs only then, however long that use takes. Nothing is enqueued when the slot is already
/// free. The host waits only for its turn among the slot's earlier iterations, which other
/// stream-ordered acquires give at once; a host-waiting `rcb_vmm_pool_acquire` on the same pool
/// may hold it up, so use one kind of acquire per pool. Release the slot on `stream` (or a stream
/// ordered after it) with `rcb_vmm_pool_release`.
///
/// Returns the runtime's error when the wait cannot be enqueued, `RCB_STATUS_TIMEOUT` when the
/// turn does not come within the pool's timeout (a host-waiting acquire ahead of it), and
/// `RCB_STATUS_INVALID_STATE` while a release of the slot has failed with the slot still held
/// (see `rcb_vmm_pool_release`: the timeline value the wait would be for is never written until
/// that iteration is released again); in each case that iteration is spent, nothing was enqueued
/// and `*out` is untouched.
///
/// On a capturing stream: with CUDA the wait becomes a node of the capture (the graph waits for
/// the slot each time it runs); HIP runs `hipStreamWaitValue64` on the stream at once instead
/// of capturing it, so this returns `RCB_STATUS_INVALID_STATE` there, before any iteration is
/// taken; where HIP cannot say whether `stream` is capturing (`hipStreamIsCapturing` fails, as
/// it does for the null stream while another stream captures in global mode), its error,
/// likewise before any iteration is taken.
///
/// Thread-safety: any thread; concurrent calls get distinct iterations.
///
/// # Safety
/// `stream` must be a live stream; `out` must be NULL or a sized struct writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_vmm_pool_acquire_on_stream(
    pool: *mut rcb_vmm_pool,
    stream: *mut c_void,
    out: *mut rcb_vmm_slot,
) -> rcb_status {
    boundary(|| {
        // SAFETY: the caller promises a NULL or writable sized struct.
        let out = unsafe { arg_out_sized(out, "out") }?;
        let pool = live(pool, "pool")?;
        let lease = pool.acquire_on_stream(Stream(stream))?;
        let value = slot_of(&pool, &lease)?;
        // SAFETY: checked by arg_out_sized.
        unsafe { out.write(value) };
        Ok(())
    })
}

/// Enqueues on `stream`, after the work already there, the timeline write that frees `slot` for
/// its next use. `slot` (as filled by `rcb_vmm_pool_acquire`) is borrowed for the call; `stream`
/// is the caller's `hipStream_t`.
///
/// Returns `RCB_STATUS_INVALID_STATE` when the slot is not held by that iteration (released
/// twice, or never acquired) and `RCB_STATUS_INVALID_ARGUMENT` for a slot index out of range.
/// When the write cannot be enqueued, the host synchronizes `stream` and writes the value itself
/// (logged), so the slot's next use is never left waiting; only when that synchronize fails too
/// is the runtime's error returned, with the slot still held.
///
/// Whenever this fails with the slot still held (above and below), the slot's timeline value
/// was not written: until that iteration is released again successfully, every acquire of the
/// slot (`rcb_vmm_pool_acquire`, `rcb_vmm_pool_acquire_on_stream`) returns
/// `RCB_STATUS_INVALID_STATE` at once, spending its iteration and enqueuing nothing, rather than
/// wait (on the host or on its stream) for a value no one writes. A stream-ordered acquire of the
/// slot made before the failure has already enqueued its wait, which ends only when the
/// iteration is released again.
///
/// On a capturing stream: with CUDA the write becomes a node of the capture, so the slot is
/// freed each time the graph runs and not before its first launch (an acquire of the slot waits
/// for that); HIP runs `hipStreamWriteValue64` on the stream at once instead of capturing it,
/// which would free the slot while the captured work has not run, so this returns
/// `RCB_STATUS_INVALID_STATE` there and the slot stays held: release it on a stream that is not
/// capturing, after the graph's launch. Where HIP cannot say whether `stream` is capturing
/// (`hipStreamIsCapturing` fails, as it does for the null stream while another stream captures
/// in global mode), this returns its error and the slot stays held too.
///
/// Thread-safety: any thread.
///
/// # Safety
/// `slot` must be NULL or point to a valid `rcb_vmm_slot` of `struct_size` readable bytes;
/// `stream` must be a live stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_vmm_pool_release(pool: *mut rcb_vmm_pool, slot: *const rcb_vmm_slot, stream: *mut c_void) -> rcb_status {
    boundary(|| {
        // SAFETY: validity is the caller's promise.
        let slot = unsafe { arg_sized(slot, "slot") }?;
        live(pool, "pool")?.release(Lease { slot: slot.index as usize, iteration: slot.iteration }, Stream(stream))
    })
}

/// Enqueues `n` device-to-device copies on `stream` (inputs into a slot, live-outs back to the
/// caller's addresses). Each copy must read or write inside one buffer of the pool without
/// running past its end; all are checked before any is enqueued (the message names the bad
/// `copies[i]`). Empty copies are skipped. `copies` is borrowed for the call. On a capturing
/// stream the copies become nodes of the capture on both runtimes (checked now, run each time the
/// graph runs).
///
/// Thread-safety: any thread.
///
/// # Safety
/// `copies` must be NULL (only when `n` is 0) or point to `n` valid entries; `stream` must be a
/// live stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_vmm_pool_copy(
    pool: *mut rcb_vmm_pool,
    stream: *mut c_void,
    copies: *const rcb_vmm_copy,
    n: usize,
) -> rcb_status {
    boundary(|| {
        // SAFETY: the count is the caller's promise; arg_slice bounds it first.
        let copies = unsafe { arg_slice(copies, n, "copies", 1 << 20) }?;
        let copies: Vec<DeviceCopy> = copies.iter().map(|c| DeviceCopy { dst: c.dst, src: c.src, bytes: c.bytes }).collect();
        live(pool, "pool")?.copy(Stream(stream), &copies)
    })
}

/// Writes slot `slot`'s timeline value to `*out`: `iteration + 1` of the last use the GPU has
/// finished, 0 before the first. For monitoring and tests; `acquire` does the waiting.
///
/// Thread-safety: any thread.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_vmm_pool_timeline(pool: *mut rcb_vmm_pool, slot: u32, out: *mut u64) -> rcb_status {
    boundary(|| {
        let out = arg_out(out, "out")?;
        let value = live(pool, "pool")?.timeline(slot as usize)?;
        // SAFETY: checked by arg_out.
        unsafe { write_out(out, value) };
        Ok(())
    })
}

/// Waits (bounded by the pool's timeout) until the GPU has finished every slot, then unmaps,
/// releases and frees everything the pool holds. `pool` may be NULL (nothing happens).
///
/// Returns `RCB_STATUS_INVALID_STATE` at once while a slot is acquired and not released (checked
/// before waiting for any slot), and `RCB_STATUS_TIMEOUT` when the GPU does not finish in time;
/// in both cases nothing is freed and the pool stays live, to be freed later. Otherwise `pool` is
/// consumed whatever the status: when an unmap, release or free underneath fails, the rest is
/// still given back and the status is `RCB_STATUS_RUNTIME_ERROR`; the pool is released all the
/// same and the message names each failed call (that memory is leaked). A second free returns
/// `RCB_STATUS_INVALID_HANDLE`.
///
/// Thread-safety: any thread, but no other call may use the pool concurrently or afterwards.
///
/// # Safety
/// None beyond the C types: a stale or forged handle is looked up, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_vmm_pool_free(pool: *mut rcb_vmm_pool) -> rcb_status {
    boundary(|| {
        // A call still in flight keeps the pool until it returns; its drop then gives the memory
        // back, failures only logged.
        match take(pool, |pool| pool.wait_idle())? {
            Some(pool) => pool.destroy().into_result("the vmm pool"),
            None => Ok(()),
        }
    })
}

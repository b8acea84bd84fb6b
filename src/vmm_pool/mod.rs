//! The circular VMM pool: N slots of device memory at addresses that never change, handed out
//! round-robin to the iterations of a loop, with a GPU-written timeline per slot that tells the
//! host when the GPU has finished with a slot.
//!
//! A graph recorded once over a slot's addresses stays valid for the pool's life, so it never
//! needs an update. Inputs are copied into the slot and live-outs copied back to the caller's
//! addresses (`copy`); nothing aliases another slot, so any N is correct.

mod layout;
mod memory;
mod timeline;

use crate::error::{Error, Leaks, Result};
use crate::runtime::{self, DevicePtr, Runtime, Stream};
use memory::SlotMemory;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use timeline::{Timeline, Turn};

pub const MAX_SLOTS: usize = 4096;
pub const MAX_BUFFERS: usize = 4096;
pub const MAX_PEERS: usize = 64;

/// Where the slots' memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// One physical chunk per slot, permanently mapped at its own reserved range, with access for
    /// the device and every listed peer that can reach it.
    Vmm,
    /// Plain device allocations kept for the pool's life (the cached-allocation approach). Peer
    /// access follows the runtime's peer-access setting; `peers` is not used.
    Device,
}

#[derive(Clone, Debug)]
pub struct PoolConfig {
    pub device: i32,
    pub backing: Backing,
    pub slots: usize,
    /// Bytes of each buffer; every slot holds one buffer of each size.
    pub buffer_sizes: Vec<u64>,
    pub peers: Vec<i32>,
    /// How long `acquire` (and `wait_idle`) wait for the GPU.
    pub timeout: Duration,
}

/// A slot held between `acquire` and `release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub slot: usize,
    pub iteration: u64,
}

/// One device-to-device copy of `bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCopy {
    pub dst: DevicePtr,
    pub src: DevicePtr,
    pub bytes: u64,
}

struct Slot {
    addresses: Box<[DevicePtr]>,
    timeline: Timeline,
    turn: Mutex<Turn>,
    _memory: SlotMemory,
}

impl Slot {
    fn turn(&self) -> MutexGuard<'_, Turn> {
        // Turn updates are plain field writes that cannot leave it half-changed.
        self.turn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub struct VmmPool {
    rt: &'static dyn Runtime,
    timeout: Duration,
    next: AtomicU64,
    slots: Box<[Slot]>,
    /// `(start, end, slot, buffer)` of every non-empty buffer, sorted by start, to check copies.
    ranges: Vec<(DevicePtr, DevicePtr, usize, usize)>,
}

impl VmmPool {
    /// Creates every slot; on failure everything made so far is given back.
    pub fn new(config: &PoolConfig) -> Result<Self> {
        check_counts(config)?;
        layout::check_sizes(&config.buffer_sizes)?;
        let rt = runtime::get()?;
        let device_count = rt.info().device_count;
        if !(0..device_count).contains(&config.device) {
            return Err(Error::invalid_argument(format!("device: {} does not exist ({device_count} device(s))", config.device)));
        }
        let peers_granted = match config.backing {
            Backing::Vmm => grantable_peers(rt, config.device, &config.peers, device_count)?,
            Backing::Device => Vec::new(),
        };
        let mut slots = Vec::with_capacity(config.slots);
        match config.backing {
            Backing::Vmm => {
                let granularity = rt.vmm()?.granularity(config.device)? as u64;
                let layout = layout::chunk_layout(&config.buffer_sizes, granularity)?;
                let access: Vec<i32> = std::iter::once(config.device).chain(peers_granted.iter().copied()).collect();
                for index in 0..config.slots {
                    let timeline = Timeline::new(rt, config.device).map_err(|e| e.context(format!("slot {index}")))?;
                    let chunk = memory::map_chunk(rt, config.device, &layout, granularity, &access)
                        .map_err(|e| e.context(format!("slot {index}")))?;
                    let base = chunk.as_ref().map_or(0, |c| c.base());
                    let addresses = layout.offsets.iter().map(|o| o.map_or(0, |o| base + o)).collect();
                    slots.push(slot(index, addresses, timeline, SlotMemory::Vmm { _chunk: chunk }));
                }
            }
            Backing::Device => {
                for index in 0..config.slots {
                    let timeline = Timeline::new(rt, config.device).map_err(|e| e.context(format!("slot {index}")))?;
                    let (allocations, addresses) = memory::allocate_buffers(rt, config.device, &config.buffer_sizes)
                        .map_err(|e| e.context(format!("slot {index}")))?;
                    slots.push(slot(index, addresses, timeline, SlotMemory::Device { _allocations: allocations }));
                }
            }
        }
        let mut ranges: Vec<_> = slots
            .iter()
            .enumerate()
            .flat_map(|(s, slot)| {
                slot.addresses
                    .iter()
                    .zip(&config.buffer_sizes)
                    .enumerate()
                    .filter(|(_, (a, _))| **a != 0)
                    .map(move |(b, (&a, &size))| (a, a + size, s, b))
            })
            .collect();
        ranges.sort_unstable();
        Ok(Self { rt, timeout: config.timeout, next: AtomicU64::new(0), slots: slots.into(), ranges })
    }

    /// The stable buffer addresses of `slot` (0 for an empty buffer).
    pub fn addresses(&self, slot: usize) -> Result<&[DevicePtr]> {
        Ok(&self.slot(slot)?.addresses)
    }

    /// The slot's timeline value: `iteration + 1` of the last use the GPU has finished, 0 before
    /// the first.
    pub fn timeline(&self, slot: usize) -> Result<u64> {
        Ok(self.slot(slot)?.timeline.value())
    }

    /// Takes the next iteration and waits (on the host) until the slot's earlier iterations have
    /// had their turn: the iteration, its slot, when the wait started and its deadline. On
    /// timeout the iteration is given up, so later iterations of the slot are not held up by it.
    fn wait_for_turn(&self) -> Result<(u64, usize, Instant, Instant)> {
        let iteration = self.next.fetch_add(1, Ordering::Relaxed);
        let index = (iteration % self.slots.len() as u64) as usize;
        let slot = &self.slots[index];
        let start = Instant::now();
        let deadline = start + self.timeout;
        let turn_value = || slot.turn().ready(iteration).map_or(0, |_| 1);
        if timeline::wait_at_least(turn_value, 1, deadline).is_err() {
            let mut turn = slot.turn();
            // The turn may have arrived just now; a turn never skips an iteration that is here.
            if turn.ready(iteration).is_none() {
                turn.give_up(iteration);
                let ahead = turn.next();
                return Err(timeline::timeout(index, iteration, start.elapsed(), format!("iteration {ahead} ahead of it on the slot")));
            }
        }
        Ok((iteration, index, start, deadline))
    }

    /// Takes the next iteration and waits until its slot's previous use has finished on the GPU.
    /// On timeout the iteration is spent and later iterations of the slot are not held up by it;
    /// so it is, at once, when an earlier release of the slot failed before writing its timeline.
    pub fn acquire(&self) -> Result<Lease> {
        let (iteration, index, start, deadline) = self.wait_for_turn()?;
        let count = self.slots.len() as u64;
        let slot = &self.slots[index];
        let awaited = {
            let mut turn = slot.turn();
            refuse_unwritten(&mut turn, index, iteration, count)?;
            turn.awaited()
        };
        let waited = timeline::wait_at_least(|| slot.timeline.value(), awaited, deadline);
        let mut turn = slot.turn();
        match waited {
            Ok(()) => {
                turn.take(iteration, count);
                Ok(Lease { slot: index, iteration })
            }
            Err(observed) => {
                turn.pass(iteration, count);
                Err(timeline::timeout(
                    index,
                    iteration,
                    start.elapsed(),
                    format!("timeline value {awaited} (iteration {} finished on the GPU), observed {observed}", awaited.saturating_sub(1)),
                ))
            }
        }
    }

    /// Takes the next iteration without waiting on the host for the GPU: `stream` is made to wait
    /// (on the GPU, `stream_wait_u64_at_least`) until the slot's previous use has finished, so
    /// work enqueued on `stream` afterwards runs only then. The host waits only for its turn
    /// among the slot's earlier iterations, which the other acquires give at once when they are
    /// stream-ordered too (a host-waiting `acquire` of the same pool may hold it up, so do not
    /// mix the two). When the wait cannot be enqueued, or an earlier release of the slot failed
    /// before writing its timeline value (a wait for it would never end), the iteration is spent
    /// and the error returned: nothing was enqueued on `stream`. A capturing `stream` is refused
    /// before any iteration is taken where the runtime would wait at once instead of capturing
    /// the wait.
    pub fn acquire_on_stream(&self, stream: Stream) -> Result<Lease> {
        self.refuse_uncaptured(
            stream,
            "hipStreamWaitValue64 makes the stream wait now instead of adding the wait to the capture, so the captured work would not wait for the slot when the graph runs: acquire on the host (acquire) or on a stream that is not capturing; no iteration was taken",
        )?;
        let (iteration, index, _, _) = self.wait_for_turn()?;
        let count = self.slots.len() as u64;
        let slot = &self.slots[index];
        let mut turn = slot.turn();
        refuse_unwritten(&mut turn, index, iteration, count)?;
        let awaited = turn.awaited();
        if slot.timeline.value() < awaited {
            let waited =
                self.rt.stream_memory().and_then(|memory| memory.stream_wait_u64_at_least(stream, slot.timeline.device_address(), awaited));
            if let Err(e) = waited {
                turn.pass(iteration, count);
                return Err(e.context(format!("making the stream wait for slot {index} (iteration {iteration})")));
            }
        }
        turn.take(iteration, count);
        Ok(Lease { slot: index, iteration })
    }

    /// Enqueues the timeline write for `lease` on `stream`, after the work already there. When
    /// the write cannot be enqueued, the host waits for `stream` and writes the value itself, so
    /// that the slot's next use is never left waiting for a value no one writes; when that wait
    /// fails too, the slot stays held and the error is returned. A capturing `stream` is refused,
    /// the slot still held, where the runtime would write at once instead of capturing the write.
    /// While a release has failed, later acquires of the slot are refused (`refuse_unwritten`)
    /// until that iteration is released again.
    pub fn release(&self, lease: Lease, stream: Stream) -> Result<()> {
        let slot = self.slot(lease.slot)?;
        let mut turn = slot.turn();
        turn.check_holder(lease.slot, lease.iteration)?;
        match self.write_timeline(slot, lease, stream) {
            Ok(()) => {
                turn.release(lease.iteration);
                Ok(())
            }
            Err(e) => {
                turn.release_failed(lease.iteration);
                Err(e)
            }
        }
    }

    /// `release`'s write of `lease.iteration + 1` into the slot's timeline, on `stream` or, when
    /// that cannot be enqueued, from the host after `stream` finished. An error: nothing written.
    fn write_timeline(&self, slot: &Slot, lease: Lease, stream: Stream) -> Result<()> {
        let context = || format!("releasing slot {} (iteration {})", lease.slot, lease.iteration);
        self.refuse_uncaptured(
            stream,
            "hipStreamWriteValue64 writes the timeline now instead of adding the write to the capture, so the slot would be free before the captured work has run and never freed when the graph runs: release on a stream that is not capturing, after the graph's launch; the slot is still held",
        )
        .map_err(|e| e.context(context()))?;
        let written =
            self.rt.stream_memory().and_then(|memory| memory.stream_write_u64(stream, slot.timeline.device_address(), lease.iteration + 1));
        if let Err(e) = written {
            self.rt
                .stream_synchronize(stream)
                .map_err(|s| s.context(format!("{} after the write failed ({}); the slot is still held", context(), e.message)))?;
            log::warn!("{}: {}; the stream was synchronized and the value written from the host", context(), e.message);
            slot.timeline.raise_from_host(lease.iteration + 1);
        }
        Ok(())
    }

    /// Enqueues device-to-device copies on `stream`. Each copy must read or write inside one
    /// buffer of the pool without running past its end; all are checked before any is enqueued.
    /// Empty copies are skipped.
    pub fn copy(&self, stream: Stream, copies: &[DeviceCopy]) -> Result<()> {
        for (i, c) in copies.iter().enumerate() {
            self.check_copy(c).map_err(|e| e.context(format!("copies[{i}]")))?;
        }
        for (i, c) in copies.iter().enumerate().filter(|(_, c)| c.bytes > 0) {
            self.rt.copy_device_async(c.dst, c.src, c.bytes as usize, stream).map_err(|e| e.context(format!("copies[{i}]")))?;
        }
        Ok(())
    }

    /// Waits until the GPU has finished every slot's last use. Fails at once with `InvalidState`
    /// while a slot is held (before waiting for any slot, so an earlier busy slot does not turn
    /// it into a timeout) and with `Timeout` when the GPU does not finish in time.
    pub fn wait_idle(&self) -> Result<()> {
        for (index, slot) in self.slots.iter().enumerate() {
            if let Some(h) = slot.turn().holder() {
                return Err(Error::invalid_state(format!("slot {index} is still held by iteration {h}: release it first")));
            }
        }
        let deadline = Instant::now() + self.timeout;
        for (index, slot) in self.slots.iter().enumerate() {
            let awaited = slot.turn().awaited();
            if let Err(observed) = timeline::wait_at_least(|| slot.timeline.value(), awaited, deadline) {
                return Err(timeline::timeout(
                    index,
                    awaited.saturating_sub(1),
                    self.timeout,
                    format!("its GPU work: timeline value {awaited}, observed {observed}"),
                ));
            }
        }
        Ok(())
    }

    /// Refuses a capturing `stream` when the runtime runs stream writes and waits at once instead
    /// of capturing them (HIP); `why` says what that would do. A stream whose capture state
    /// cannot be queried is refused too, with the runtime's error: clr answers
    /// hipErrorStreamCaptureImplicit for the null stream while another stream captures in global
    /// mode, and a capture in progress is what the query is there to find.
    fn refuse_uncaptured(&self, stream: Stream, why: &str) -> Result<()> {
        if self.rt.stream_memory()?.memory_ops_captured() {
            return Ok(());
        }
        match self.rt.stream_is_capturing(stream) {
            Ok(false) => Ok(()),
            Ok(true) => Err(Error::invalid_state(format!("the stream is capturing, and HIP's {why}"))),
            Err(e) => Err(Error::new(
                e.kind,
                format!("whether the stream is capturing cannot be told ({}), and if it is, HIP's {why}", e.message),
            )),
        }
    }

    fn slot(&self, index: usize) -> Result<&Slot> {
        self.slots
            .get(index)
            .ok_or_else(|| Error::invalid_argument(format!("slot {index} does not exist (the pool has {})", self.slots.len())))
    }

    fn check_copy(&self, c: &DeviceCopy) -> Result<()> {
        if c.bytes == 0 {
            return Ok(());
        }
        let inside = |addr: DevicePtr| -> Option<Result<()>> {
            let at = self.ranges.partition_point(|r| r.0 <= addr).checked_sub(1)?;
            let (start, end, slot, buffer) = self.ranges[at];
            (addr >= start && addr < end).then(|| match addr.checked_add(c.bytes) {
                Some(e) if e <= end => Ok(()),
                _ => Err(Error::invalid_argument(format!(
                    "{} bytes at {addr:#x} run past the end of slot {slot} buffer {buffer} ({start:#x}..{end:#x})",
                    c.bytes
                ))),
            })
        };
        match (inside(c.dst), inside(c.src)) {
            (None, None) => {
                Err(Error::invalid_argument(format!("neither dst {:#x} nor src {:#x} lies inside a buffer of this pool", c.dst, c.src)))
            }
            (d, s) => d.into_iter().chain(s).collect(),
        }
    }
}

impl VmmPool {
    /// Gives every slot's memory and timeline back and returns the runtime calls that failed
    /// (their objects are leaked). The caller has waited for the GPU ([`Self::wait_idle`]).
    pub fn destroy(mut self) -> Leaks {
        let mut leaks = Leaks::default();
        // Taken out, so that the drop that follows finds nothing left to wait for or free.
        for slot in std::mem::take(&mut self.slots) {
            // The order of the slot's drop: its timeline, then its memory.
            let Slot { timeline, _memory: memory, .. } = slot;
            leaks.note(timeline.close());
            leaks.append(memory.close());
        }
        leaks
    }
}

impl Drop for VmmPool {
    /// Memory the GPU may still touch is never given back: on a failed wait it is leaked.
    fn drop(&mut self) {
        if let Err(e) = self.wait_idle() {
            log::error!("vmm pool dropped while in use; leaking its memory: {e}");
            std::mem::forget(std::mem::take(&mut self.slots));
        }
    }
}

/// Refuses `iteration`, spending it, when a holder of its slot failed to release it before
/// writing its timeline value: a wait for the slot (the stream's on the GPU, or the host's) would
/// wait for a value no one writes until that holder is released again.
fn refuse_unwritten(turn: &mut Turn, index: usize, iteration: u64, slots: u64) -> Result<()> {
    let Some(unwritten) = turn.unwritten() else { return Ok(()) };
    turn.pass(iteration, slots);
    Err(Error::invalid_state(format!(
        "vmm pool slot {index}: the release of iteration {unwritten} failed before it wrote the slot's timeline, so a wait for the slot would never end: release iteration {unwritten} again; iteration {iteration} is spent and nothing was enqueued"
    )))
}

fn slot(index: usize, addresses: Vec<DevicePtr>, timeline: Timeline, memory: SlotMemory) -> Slot {
    Slot { addresses: addresses.into(), timeline, turn: Mutex::new(Turn::new(index as u64)), _memory: memory }
}

fn check_counts(c: &PoolConfig) -> Result<()> {
    let bad = |name: &str, n: usize, max: usize| {
        (n == 0 || n > max).then(|| Error::invalid_argument(format!("{name}: {n} is out of range (1 to {max})")))
    };
    if let Some(e) = bad("num_slots", c.slots, MAX_SLOTS).or_else(|| bad("num_buffers", c.buffer_sizes.len(), MAX_BUFFERS)) {
        return Err(e);
    }
    if c.peers.len() > MAX_PEERS {
        return Err(Error::invalid_argument(format!("num_peers: {} exceeds the limit of {MAX_PEERS}", c.peers.len())));
    }
    if c.timeout.is_zero() {
        return Err(Error::invalid_argument("timeout: must be positive"));
    }
    Ok(())
}

/// The listed peers that can access `device`'s memory; a bad entry is an error naming it.
fn grantable_peers(rt: &dyn Runtime, device: i32, peers: &[i32], device_count: i32) -> Result<Vec<i32>> {
    let mut granted = Vec::new();
    for (i, &peer) in peers.iter().enumerate() {
        if peer == device || !(0..device_count).contains(&peer) || peers[..i].contains(&peer) {
            return Err(Error::invalid_argument(format!(
                "peers[{i}]: {peer} is not another existing device (device {device}, {device_count} device(s), no repeats)"
            )));
        }
        if rt.can_access_peer(peer, device)? {
            granted.push(peer);
        } else {
            log::info!("vmm pool: device {peer} cannot access device {device}; not granted");
        }
    }
    Ok(granted)
}

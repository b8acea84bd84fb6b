//! The update budget's measurement of what executable-graph updates take from the runtime
//! (ROCm/rocm-systems issue 10713): a probe graph the library builds on its own, updated node by
//! node while the device's free memory is read, so that the budget follows the runtime that is
//! loaded instead of a figure from one report.
//!
//! The probe is a chain of [`PROBE_NODES`] memset nodes, each after the one before and setting one
//! word of a buffer of its own. A chain, because clr stages arguments only for a graph that is
//! one in the releases read (6.2, 6.3 and its development branch of late 2024):
//! `GraphExec::CaptureAQLPackets`, which captures every node's packet and arguments into the
//! executable's staging at instantiation, and `GraphExec::UpdateAQLPacket`, which captures them
//! again on each update, run only where `Graph::GetRunList` found one parallel list, and it
//! starts another at every further root and branch; the nodes of any other graph are spread over
//! up to four streams and dispatched at launch through each stream's own argument ring, so that
//! updating them takes nothing, and independent nodes would measure no growth where a chain of
//! kernel nodes leaks (the software GPU's `clr_chain_staging` quirk models it). Memset nodes,
//! because a library without device code can make no kernel node (a kernel needs a code object
//! built for the device's architecture, which the library does not carry), and a memset node is
//! the only node it can make that ROCm runs as a kernel. clr stages a memset node's arguments only
//! where `GraphNode::GraphCaptureEnabled` covers memset nodes, as in its development branch of
//! late 2024 (presumably 6.4 and later), whose memset setter captures the blit kernel's packet
//! and arguments into the executable's staging again, as a kernel node's does; in 6.2 and 6.3 it
//! covers kernel nodes alone and the memset setter captures nothing, so there the probe measures
//! no growth while kernel-node updates leak, and the budget keeps its fixed default
//! (`budget.rs`). Both read in clr's source, neither seen on an AMD GPU. The probe is
//! instantiated, then each round sets every node's value through the executable's memset
//! setter, and free device memory is read after each round. Nothing is launched, so no work
//! goes to a stream of the caller's (clr itself still uses streams: an instantiation makes the
//! executable's own, and captures packets through the device's null stream,
//! `hip::getNullStream`), and the calls are made in relaxed capture mode, so that a capture in
//! progress on any thread is left alone; where that mode cannot be set the probe is not run at
//! all (its `hipMalloc` would fail and invalidate a global-mode capture in progress anywhere in
//! the process). The graph and the executable are destroyed before [`measure`] returns; the
//! 128-byte buffer is kept for the life of the process, because `hipFree` waits for all work on
//! the device: freeing it would make the first command buffer (and every thread waiting for the
//! budget to settle) wait for whatever the device is running, seconds of it.
//!
//! Free memory shows staging in the blocks the runtime allocates, not slot by slot: clr
//! (`GraphExec::CaptureAQLPackets`, `GraphKernelArgManager::AllocKernArg`) gives an executable
//! one pool of its instantiation's slots plus 128 KiB, then another of that size each time one
//! is full. So the probe goes on until free memory has fallen [`ENOUGH_FALLS`] times, and the
//! growth per update is the fall up to the last of them over the node updates made by then: the
//! first pool's slack is filled before the first fall and each fall adds a pool just begun, so
//! on clr's pools this is the slot within one round of updates and the instantiation's own slots
//! over five pools (+1.5 % for 32 slots of 320 bytes). It stops after [`MAX_ROUNDS`] rounds
//! otherwise ([`PROBE_NODES`] · [`MAX_ROUNDS`] = 16 384 node updates: 5 MiB of staging at 320
//! bytes an update, over two steps even of a reading that moved only in 2 MiB steps). Its cost is
//! those updates and one free-memory reading per round, all the rounds where nothing grows.
//!
//! The reading is of the whole device: another thread or process that allocates meanwhile shows
//! as growth (the budget then re-instantiates more often than needed, never less), and one that
//! frees memory makes the measurement fail, which leaves the budget at its fixed default.

use crate::error::{Error, ErrorKind, Leaks, Result};
use crate::runtime::{DevicePtr, Exec, Graph, MemsetParams, Runtime};
use std::time::{Duration, Instant};

/// Memset nodes of the probe graph (as many as the kernel nodes of the graph in issue 10713).
pub const PROBE_NODES: usize = 32;
/// Most rounds of the probe, each setting every node once.
pub const MAX_ROUNDS: usize = 512;
/// Falls of free memory after which the probe stops.
pub const ENOUGH_FALLS: usize = 5;

/// What the probe saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measurement {
    /// Bytes of device memory one node update took (rounded up); 0 when free memory never fell.
    pub bytes_per_update: u64,
    /// Node updates the probe made.
    pub node_updates: u64,
    /// Bytes by which free device memory had fallen at its last fall.
    pub growth: u64,
    pub elapsed: Duration,
}

/// Why [`measure`] measured nothing.
#[derive(Debug)]
pub enum Unmeasured {
    /// The probe was not run: the calling thread's capture mode could not be relaxed (a runtime
    /// without `hipThreadExchangeStreamCaptureMode`, or the call failed), and in the global mode
    /// the probe's allocation would fail and invalidate every global-mode capture in progress in
    /// the process, on any thread.
    NotRun(Error),
    /// The probe ran and one of its calls failed, or what it read cannot be trusted.
    Failed(Error),
}

/// Measures the device memory one executable-node update takes on `device`, which must be the
/// calling thread's current device: the probe's graph is made and instantiated there, so its
/// staging is taken from that device's memory.
pub fn measure(rt: &dyn Runtime, device: i32) -> std::result::Result<Measurement, Unmeasured> {
    let mut outcome = None;
    rt.relaxed_capture_mode(&mut || outcome = Some(run(rt, device))).map_err(Unmeasured::NotRun)?;
    outcome.unwrap_or_else(|| Err(Error::new(ErrorKind::Runtime, "the runtime did not run the probe"))).map_err(Unmeasured::Failed)
}

/// The falls of free memory seen: how many, and at the last one the node updates made and the
/// fall since the start.
struct Falls {
    count: usize,
    last: Option<(u64, u64)>,
}

fn run(rt: &dyn Runtime, device: i32) -> Result<Measurement> {
    let start = Instant::now();
    let mut probe = Probe { rt, graph: None, exec: None };
    let outcome = probe.updates(device);
    probe.release().log("the update budget's probe");
    let (falls, node_updates) = outcome?;
    let (bytes_per_update, growth) = falls.last.map_or((0, 0), |(updates, fall)| (fall.div_ceil(updates), fall));
    Ok(Measurement { bytes_per_update, node_updates, growth, elapsed: start.elapsed() })
}

/// The probe's graph and executable, each destroyed by [`Probe::release`]; its buffer is never
/// freed (the module's comment says why).
struct Probe<'a> {
    rt: &'a dyn Runtime,
    graph: Option<Graph>,
    exec: Option<Exec>,
}

/// Node `i` sets word `i` of `buffer` to `value`.
fn word(buffer: DevicePtr, i: usize, value: u32) -> MemsetParams {
    MemsetParams { dst: buffer + 4 * i as u64, value, element_size: 4, width: 1, height: 1, pitch: 0 }
}

impl Probe<'_> {
    /// Builds the probe and updates it; returns the falls of free memory and the node updates.
    fn updates(&mut self, device: i32) -> Result<(Falls, u64)> {
        let rt = self.rt;
        let buffer = rt.malloc(device, 4 * PROBE_NODES)?;
        let graph = *self.graph.insert(rt.graph_create()?);
        // A chain, node i after node i - 1: clr stages the arguments of no other graph (the
        // module's comment says why).
        let mut nodes = Vec::with_capacity(PROBE_NODES);
        for i in 0..PROBE_NODES {
            let node = rt.add_memset_node(graph, &nodes[i.saturating_sub(1)..], &word(buffer, i, 0))?;
            nodes.push(node);
        }
        let exec = *self.exec.insert(rt.instantiate(graph)?);
        let free = || rt.device_memory(device).map(|(free, _)| free as u64);
        let before = free()?;
        let (mut lowest, mut falls, mut updates) = (before, Falls { count: 0, last: None }, 0);
        for round in 1..=MAX_ROUNDS {
            for (i, &node) in nodes.iter().enumerate() {
                rt.exec_memset_node_set(exec, node, &word(buffer, i, round as u32))?;
            }
            updates += PROBE_NODES as u64;
            let now = free()?;
            if now > lowest {
                return Err(Error::new(
                    ErrorKind::Runtime,
                    format!(
                        "free device memory rose from {lowest} to {now} bytes after {updates} node updates: memory was freed elsewhere while the probe ran, so what the updates took cannot be told"
                    ),
                ));
            }
            if now < lowest {
                lowest = now;
                falls.count += 1;
                falls.last = Some((updates, before - now));
                if falls.count == ENOUGH_FALLS {
                    break;
                }
            }
        }
        Ok((falls, updates))
    }

    /// Destroys what was made, each failed destroy tried once more (a fault may be passing).
    fn release(&mut self) -> Leaks {
        let rt = self.rt;
        let twice = |destroy: &dyn Fn() -> Result<()>| destroy().or_else(|_| destroy());
        let mut leaks = Leaks::default();
        if let Some(exec) = self.exec.take() {
            leaks.note(twice(&|| rt.exec_destroy(exec)));
        }
        if let Some(graph) = self.graph.take() {
            leaks.note(twice(&|| rt.graph_destroy(graph)));
        }
        leaks
    }
}

//! Kernel-argument staging of executable graphs, as ROCm's runtime does it
//! (`GraphKernelArgManager`, ROCm/rocm-systems issue 10713): an executable graph takes a slot
//! for each node's arguments when it is instantiated, and gives them all back when it is
//! destroyed. With the `kernarg_leak` quirks every update takes a fresh slot (a bump allocator
//! that never reuses one); without them an update reuses the node's slot, as the proposed fix
//! (pull request 11434) does.
//!
//! A slot's size is its node's explicit arguments plus the hidden ones the runtime appends
//! (`HIPSIM_KERNARG_HIDDEN`, 256 bytes by default). `hipMemGetInfo` counts the slots in use as
//! device memory: exactly, or (`HIPSIM_KERNARG_CHUNK`) in whole pools as clr allocates them:
//! at instantiation one pool of the executable's slots plus the chunk, and each time an update
//! does not fit, another of the same size.
//!
//! With the `clr_chain_staging` quirk only an executable graph that is a single chain of nodes
//! stages anything, and only the nodes clr captures, as clr 6.2 and 6.3 and its development
//! branch of late 2024 do (read in their source): `GraphExec::CaptureAQLPackets`, which
//! allocates the pool and captures each node's packet and arguments at instantiation, and
//! `GraphExec::UpdateAQLPacket`, which captures them again on update, run only where
//! `Graph::GetRunList` found one parallel list, which it finds for a chain alone (it starts a
//! list at each root and at each branch); a child graph's nodes are captured at instantiation,
//! and again by a child-graph update, only when that graph is a chain too; `hipGraphExecUpdate`
//! captures the graph's own nodes again, never a child graph's. The nodes captured are those of
//! `GraphNode::GraphCaptureEnabled`: kernel nodes in 6.2 and 6.3 (`HIPSIM_VERSION` below 6.4);
//! memset nodes and device-to-device memcpy nodes too in the development branch, which the quirk
//! takes for 6.4 and later. Every other graph's nodes, and every other node, are dispatched at
//! launch, with arguments in the launching stream's own ring, which hipsim does not count.
//! clr's later segment scheduling (a 2025 copy of rocm-systems' `projects/clr`) captures every
//! segment instead: the quirk models the releases before it.
//!
//! The slots come from a per-device pool of `HIPSIM_KERNARG_POOL` bytes (unlimited by default).
//! When an update finds the pool exhausted, `kernarg_leak` fails it with `hipErrorOutOfMemory`
//! (what a runtime with pull request 10022 reports) and `kernarg_leak_silent` returns success
//! while the executable keeps its old parameters (issue 10714). An instantiation that does not
//! fit fails with `hipErrorOutOfMemory` either way.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::error::{HipResult, OUT_OF_MEMORY};
use crate::exec::ExecGraph;
use crate::graph::Op;
use crate::knobs::{self, KernargLeak};

/// Explicit arguments of the blit kernels that run memcpy and memset nodes.
const BLIT_ARGUMENT_BYTES: u64 = 64;

/// The slot a node's arguments take: explicit arguments rounded up to 16 bytes, plus the
/// hidden ones (grid sizes, offsets, queue pointers: `HIPSIM_KERNARG_HIDDEN`); nodes that run no
/// kernel take none.
fn slot(op: &Op) -> u64 {
    let hidden = knobs::get().kernarg_hidden;
    match op {
        Op::Kernel(k) => (k.args.len() as u64).div_ceil(16) * 16 + hidden,
        Op::Memcpy { .. } | Op::Memcpy3D(_) | Op::Memset(_) => BLIT_ARGUMENT_BYTES + hidden,
        _ => 0,
    }
}

/// The slot `op` takes in an executable graph's staging: [`slot`], but under the
/// `clr_chain_staging` quirk only for a node clr captures (the module's comment says which).
fn staged_slot(op: &Op) -> u64 {
    let knobs = knobs::get();
    if !knobs.clr_chain_staging() {
        return slot(op);
    }
    let captured = match op {
        Op::Kernel(_) => true,
        Op::Memset(_) => knobs.clr_captures_blit_nodes(),
        // clr's 1-D copy node captures a copy between two device buffers (`hipCopyBuffer`), its
        // 3-D one a copy of kind hipMemcpyDeviceToDevice.
        Op::Memcpy { dst, src, .. } => {
            knobs.clr_captures_blit_nodes() && {
                let m = crate::memory::lock();
                m.class_of(*dst).0 == "device" && m.class_of(*src).0 == "device"
            }
        }
        Op::Memcpy3D(c) => knobs.clr_captures_blit_nodes() && c.kind == MEMCPY_DEVICE_TO_DEVICE,
        _ => false,
    };
    if captured { slot(op) } else { 0 }
}

/// `hipMemcpyDeviceToDevice`.
const MEMCPY_DEVICE_TO_DEVICE: i32 = 3;

/// The slots an update of `op` takes (`hipGraphExec*NodeSetParams` of one node).
pub fn node_update_bytes(op: &Op) -> u64 {
    staged_slot(op)
}

/// The slots `hipGraphExecUpdate` of an executable graph to `graph` takes: every node's, child
/// graphs included; under the `clr_chain_staging` quirk only the captured nodes of the graph
/// itself (clr's update captures no child graph's nodes again).
pub fn graph_update_bytes(graph: &ExecGraph) -> u64 {
    if knobs::get().clr_chain_staging() {
        return graph.nodes.iter().filter(|n| n.child.is_none()).map(|n| staged_slot(&n.op)).sum();
    }
    all_slots(graph)
}

/// The slots `hipGraphExecChildGraphNodeSetParams` with `child` takes: every node's of the
/// child, nested child graphs included; under the `clr_chain_staging` quirk only the child's own
/// captured nodes, and only when it is a chain (clr captures the nodes of no other child graph).
pub fn child_update_bytes(child: &ExecGraph) -> u64 {
    if knobs::get().clr_chain_staging() {
        if !child.is_chain() {
            return 0;
        }
        return child.nodes.iter().filter(|n| n.child.is_none()).map(|n| staged_slot(&n.op)).sum();
    }
    all_slots(child)
}

/// The slots of every node of `graph`, child graphs included.
fn all_slots(graph: &ExecGraph) -> u64 {
    graph.nodes.iter().map(|n| n.child.as_ref().map_or_else(|| slot(&n.op), all_slots)).sum()
}

/// Whether an executable graph of `graph` stages its nodes' arguments: always, but under the
/// `clr_chain_staging` quirk only when it is a single chain.
pub fn stages(graph: &ExecGraph) -> bool {
    !knobs::get().clr_chain_staging() || graph.is_chain()
}

/// The slots an instantiation of `graph` takes: every staged node's where [`stages`] says so, a
/// child graph's likewise.
fn instantiation_bytes(graph: &ExecGraph) -> u64 {
    if !stages(graph) {
        return 0;
    }
    graph.nodes.iter().map(|n| n.child.as_ref().map_or_else(|| staged_slot(&n.op), instantiation_bytes)).sum()
}

struct Pool {
    /// Bytes each device may stage.
    limit: u64,
    /// Bytes in use by device.
    used: HashMap<i32, u64>,
    /// Highest `used` of any device since the last [`set_limit`].
    peak: u64,
    /// Each live executable graph's device, bytes in use and bytes at instantiation.
    execs: HashMap<usize, Staging>,
}

struct Staging {
    device: i32,
    bytes: u64,
    instantiated: u64,
    /// Whether the executable stages at all ([`stages`]): one that does not has no pool, and its
    /// updates take nothing.
    pooled: bool,
}

static POOL: LazyLock<Mutex<Pool>> =
    LazyLock::new(|| Mutex::new(Pool { limit: knobs::get().kernarg_pool, used: HashMap::new(), peak: 0, execs: HashMap::new() }));

fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// Takes `bytes` for `exec`, or fails when the device's pool cannot hold them.
    fn take(&mut self, exec: usize, bytes: u64) -> HipResult {
        let Some(staging) = self.execs.get_mut(&exec).filter(|s| s.pooled) else { return Ok(()) };
        let used = self.used.entry(staging.device).or_default();
        if used.saturating_add(bytes) > self.limit {
            return Err(OUT_OF_MEMORY);
        }
        *used += bytes;
        self.peak = self.peak.max(*used);
        staging.bytes += bytes;
        Ok(())
    }
}

/// Takes the slots of a new executable graph of `graph`.
pub fn instantiated(exec: usize, device: i32, graph: &ExecGraph) -> HipResult {
    let bytes = instantiation_bytes(graph);
    let mut p = pool();
    p.execs.insert(exec, Staging { device, bytes: 0, instantiated: bytes, pooled: stages(graph) });
    let taken = p.take(exec, bytes);
    if taken.is_err() {
        p.execs.remove(&exec);
    }
    taken
}

/// Gives back everything an executable graph took.
pub fn destroyed(exec: usize) {
    let mut p = pool();
    if let Some(staging) = p.execs.remove(&exec) {
        *p.used.entry(staging.device).or_default() -= staging.bytes;
    }
}

/// What an update of an executable graph does with its new parameters.
#[derive(Debug, PartialEq, Eq)]
pub enum Update {
    Apply,
    /// The pool is exhausted and the runtime says nothing: the old parameters stay.
    KeepOld,
}

/// Stages an update that needs `bytes` of fresh slots: taken from the pool under the leak
/// quirks, reused (nothing taken) without them or where the executable stages nothing.
pub fn update(exec: usize, bytes: u64) -> HipResult<Update> {
    let mode = knobs::get().kernarg_leak();
    if mode == KernargLeak::Off {
        return Ok(Update::Apply);
    }
    match (pool().take(exec, bytes), mode) {
        (Ok(()), _) => Ok(Update::Apply),
        (Err(_), KernargLeak::Silent) => Ok(Update::KeepOld),
        (Err(e), _) => Err(e),
    }
}

/// Sets every device's pool size and restarts the peak from what is in use now.
pub fn set_limit(bytes: u64) {
    let mut p = pool();
    p.limit = bytes;
    p.peak = p.used.values().copied().max().unwrap_or(0);
}

/// The device memory staging takes on `device`: the bytes in use, or with
/// `HIPSIM_KERNARG_CHUNK` the whole pools that hold them.
pub fn memory_on(device: i32) -> u64 {
    let p = pool();
    let Some(chunk) = knobs::get().kernarg_chunk else { return p.used.get(&device).copied().unwrap_or(0) };
    p.execs
        .values()
        .filter(|s| s.device == device && s.pooled)
        .map(|s| {
            let pool = (s.instantiated + chunk).max(1);
            s.bytes.div_ceil(pool).max(1) * pool
        })
        .sum()
}

/// Bytes in use, all devices together.
pub fn used() -> u64 {
    pool().used.values().sum()
}

/// The highest use of one device since the last [`set_limit`] (or load).
pub fn peak() -> u64 {
    pool().peak
}

//! The update budget of an executable graph: what its in-place updates are estimated to have
//! taken from the runtime's kernel-argument staging since it was instantiated.
//!
//! ROCm's runtime stages the kernel arguments of an executable graph with a bump allocator
//! (`GraphKernelArgManager`): every `hipGraphExec*SetParams` and `hipGraphExecUpdate` takes a
//! fresh slot and nothing is given back until `hipGraphExecDestroy` (ROCm/rocm-systems issue
//! 10713). Once the pool cannot grow the runtime crashes (issue 10021) or reports success while
//! the executable graph keeps its old packet (issue 10714). The library therefore counts what
//! each push is likely to take and re-instantiates before the count passes the budget.

use super::nodes::Params;
use crate::counters::{Counters, Event as Counted};
use crate::error::{Leaks, Result};
use crate::runtime::{Backend, Event, Exec, Graph, NodeType, Runtime, RuntimeInfo, Stream};
use std::collections::VecDeque;

/// What one node's push is charged on top of its argument bytes. The only public measurement
/// (issue 10713, MI300X) is a 32-node graph growing about 354 MiB over 2 000 whole-graph updates,
/// about 185 KiB per update; 185 KiB / 32 nodes is 5 920 bytes a node. Those kernels' own
/// argument sizes are not given, so the whole figure counts as overhead here and a node's
/// arguments come on top: the estimate errs on the side of re-instantiating early.
pub const NODE_OVERHEAD_BYTES: u64 = 5_920;

/// The budget of a HIP runtime's executable graph when `RCB_EXEC_UPDATE_BUDGET` is not set:
/// 64 MiB, about 11 000 node pushes at the estimate above (350 whole updates of the reported
/// 32-node graph, 110 updates that move 10 % of a 1 000-node graph). A command buffer's runtime
/// memory then stays within about three times this (the live executable and at most
/// [`MAX_RETIRED`] old ones), while a re-instantiation, a few milliseconds for 1 000 nodes, is
/// spread over that many updates.
pub const DEFAULT_BUDGET_BYTES: u64 = 64 << 20;

/// Old executable graphs a command buffer keeps while their launches finish; a re-instantiation
/// that would keep one more first waits for the oldest.
pub const MAX_RETIRED: usize = 2;

/// The first `hipRuntimeGetVersion` whose executable-graph updates reuse their kernel-argument
/// slots. None is known: the fix (ROCm/rocm-systems pull request 11434) is not in a release as
/// of 2026-09. When one ships, its version goes here and the default budget turns off for it.
pub const FIRST_HIP_VERSION_WITHOUT_ARGUMENT_LEAK: Option<i32> = None;

/// Whether the runtime's executable-graph updates take memory that only destroying the
/// executable gives back. CUDA's driver is not reported to (`rcb-bench budget` measures device
/// memory over 100 000 updates on a GPU to check it); HIP does, up to
/// [`FIRST_HIP_VERSION_WITHOUT_ARGUMENT_LEAK`].
pub fn updates_leak(info: &RuntimeInfo) -> bool {
    match info.backend {
        Backend::Cuda => false,
        Backend::Hip => FIRST_HIP_VERSION_WITHOUT_ARGUMENT_LEAK.is_none_or(|fixed| info.version < fixed),
    }
}

/// The budget a new command buffer starts with: `configured` (`RCB_EXEC_UPDATE_BUDGET`, 0 for
/// never) when set, else [`DEFAULT_BUDGET_BYTES`] where updates leak and 0 where they do not.
pub fn default_limit(configured: Option<u64>, info: &RuntimeInfo) -> u64 {
    configured.unwrap_or(if updates_leak(info) { DEFAULT_BUDGET_BYTES } else { 0 })
}

/// The estimated staging bytes of pushing `params` to an executable graph once. Memcpy and
/// memset nodes run as blit kernels with their own arguments (inside the overhead); empty nodes
/// take nothing; a child node's cost is its graph's, which its record holds.
pub fn push_bytes(params: &Params) -> u64 {
    match params {
        Params::Kernel(k) => k.blob.len() as u64 + NODE_OVERHEAD_BYTES,
        Params::Memcpy(_) | Params::Memset(_) | Params::KernelByPointers => NODE_OVERHEAD_BYTES,
        Params::Empty | Params::Child(_) => 0,
    }
}

/// The estimated staging bytes of pushing every node of `graph`, a graph the library did not
/// record, listed through the runtime (node types only; no parameters are read back). A node
/// that cannot be listed counts as nothing: this is an estimate, never a reason to fail.
pub fn listed_graph_bytes(rt: &dyn Runtime, graph: Graph) -> u64 {
    let Ok(nodes) = rt.graph_nodes(graph) else { return 0 };
    nodes
        .into_iter()
        .map(|node| match rt.node_type(node) {
            Ok(NodeType::Kernel | NodeType::Memcpy | NodeType::Memset) => NODE_OVERHEAD_BYTES,
            Ok(NodeType::Child) => rt.child_node_graph(node).map_or(0, |inner| listed_graph_bytes(rt, inner)),
            _ => 0,
        })
        .sum()
}

/// An executable graph replaced by a re-instantiation, kept until the work launched from it has
/// finished: `events` were recorded after its last launch on each stream it ran on.
struct Retired {
    exec: Exec,
    events: Vec<Event>,
    /// A launch could not be followed by an event: nothing says when it finishes, so the
    /// executable is kept until the command buffer is freed.
    untracked: bool,
}

/// The budget of one command buffer's executable graph, and the old executables it retires.
///
/// Launches are followed only while the budget is on: each launch records an event on its
/// stream (one event per stream, re-recorded), so that an executable replaced later is
/// destroyed only once everything launched from it has finished, in stream order, without
/// the host waiting.
pub struct ExecBudget {
    /// Bytes of estimated staging the executable may take before it is re-instantiated; 0:
    /// never.
    limit: u64,
    spent: u64,
    device: i32,
    /// The live executable's launches: its streams and the events after its last launch there.
    launches: Vec<(Stream, Event)>,
    /// A launch of the live executable that no event follows.
    untracked: bool,
    retired: VecDeque<Retired>,
    /// Events of retired executables, for reuse.
    spare: Vec<Event>,
    /// Retired executables the runtime failed to destroy: destroyed again by [`Self::release`],
    /// which reports them if that fails too.
    orphans: Vec<Exec>,
    warned_blocked: bool,
}

impl ExecBudget {
    pub fn new(limit: u64, device: i32) -> Self {
        Self {
            limit,
            spent: 0,
            device,
            launches: Vec::new(),
            untracked: false,
            retired: VecDeque::new(),
            spare: Vec::new(),
            orphans: Vec::new(),
            warned_blocked: false,
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    pub fn spent(&self) -> u64 {
        self.spent
    }

    /// Whether pushing `bytes` more would pass the budget.
    pub fn exceeded_by(&self, bytes: u64) -> bool {
        self.limit != 0 && self.spent.saturating_add(bytes) > self.limit
    }

    pub fn charge(&mut self, bytes: u64) {
        self.spent = self.spent.saturating_add(bytes);
    }

    /// Old executables still waiting for their launches.
    pub fn retired_count(&self) -> usize {
        self.retired.len()
    }

    /// Follows a launch of the live executable on `stream`, while the budget is on. A launch
    /// into a stream capture runs nothing of the executable's own (the capture holds a copy),
    /// and an event recorded there would join the caller's graph, so it is not followed.
    pub fn launched(&mut self, rt: &dyn Runtime, stream: Stream) {
        if self.limit == 0 || rt.stream_is_capturing(stream).unwrap_or(false) {
            return;
        }
        let at = match self.launches.iter().position(|&(s, _)| s == stream) {
            Some(at) => at,
            None => match self.spare.pop().map_or_else(|| rt.event_create(self.device), Ok) {
                Ok(event) => {
                    self.launches.push((stream, event));
                    self.launches.len() - 1
                }
                Err(e) => return self.lose_track(e),
            },
        };
        if let Err(e) = rt.event_record(self.launches[at].1, stream) {
            self.lose_track(e);
        }
    }

    fn lose_track(&mut self, e: crate::error::Error) {
        log::warn!("cannot follow a launch of the executable graph ({e}); it will be destroyed only with its command buffer");
        self.untracked = true;
    }

    /// Takes `old` (the executable just replaced) out of service: destroyed now when nothing was
    /// launched from it, else once its launches finish (see [`Self::reap`]). The budget starts
    /// again for the new executable.
    pub fn retire(&mut self, rt: &dyn Runtime, old: Exec, counters: &mut Counters) {
        self.spent = 0;
        let events: Vec<Event> = self.launches.drain(..).map(|(_, e)| e).collect();
        let untracked = std::mem::take(&mut self.untracked);
        self.retired.push_back(Retired { exec: old, events, untracked });
        self.reap(rt, counters);
    }

    /// Destroys the retired executables whose launches have all finished.
    pub fn reap(&mut self, rt: &dyn Runtime, counters: &mut Counters) {
        let mut i = 0;
        while i < self.retired.len() {
            let r = &self.retired[i];
            let finished = !r.untracked && r.events.iter().all(|&e| rt.event_is_complete(e).unwrap_or(false));
            if !finished {
                i += 1;
                continue;
            }
            let r = self.retired.remove(i).expect("index checked");
            match rt.exec_destroy(r.exec) {
                Ok(()) => counters.record(Counted::Retirement),
                Err(e) => {
                    log::warn!("destroying a retired executable graph: {e}; trying again when the command buffer is freed");
                    self.orphans.push(r.exec);
                }
            }
            self.spare.extend(r.events);
        }
    }

    /// Before a re-instantiation: when [`MAX_RETIRED`] old executables are already waiting,
    /// waits for the oldest one's launches and destroys it.
    pub fn make_room(&mut self, rt: &dyn Runtime, counters: &mut Counters) -> Result<()> {
        self.reap(rt, counters);
        while self.retired.len() >= MAX_RETIRED {
            // Executables whose launches nobody follows wait for the command buffer's end.
            let Some(oldest) = self.retired.iter().position(|r| !r.untracked) else { break };
            for &e in &self.retired[oldest].events {
                rt.event_synchronize(e)?;
            }
            let before = self.retired.len();
            self.reap(rt, counters);
            if self.retired.len() == before {
                break;
            }
        }
        Ok(())
    }

    /// Logs the first time this command buffer cannot re-instantiate; later times are debug.
    pub fn note_blocked(&mut self, why: &str) {
        if std::mem::replace(&mut self.warned_blocked, true) {
            log::debug!("update budget spent but not re-instantiating: {why}");
        } else {
            log::warn!(
                "update budget spent ({} of {} bytes) but not re-instantiating: {why}; updates keep going to the old executable graph, whose runtime memory may keep growing",
                self.spent,
                self.limit
            );
        }
    }

    /// Destroys every retired executable and every event (the command buffer is going away; as
    /// for its live executable, launches still pending are the caller's to have waited for).
    pub fn release(&mut self, rt: &dyn Runtime, leaks: &mut Leaks) {
        for r in self.retired.drain(..) {
            leaks.note(rt.exec_destroy(r.exec));
            self.spare.extend(r.events);
        }
        for exec in self.orphans.drain(..) {
            leaks.note(rt.exec_destroy(exec));
        }
        self.spare.extend(self.launches.drain(..).map(|(_, e)| e));
        for e in self.spare.drain(..) {
            leaks.note(rt.event_destroy(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(backend: Backend, version: i32) -> RuntimeInfo {
        RuntimeInfo { backend, library: String::new(), version, device_count: 1, disabled_features: Vec::new() }
    }

    #[test]
    fn the_budget_is_on_by_default_for_every_hip_release_and_off_for_cuda() {
        // No fixed ROCm release is known: the newest versions still leak.
        assert_eq!(FIRST_HIP_VERSION_WITHOUT_ARGUMENT_LEAK, None);
        for version in [50_200_000, 60_241_134, 70_204_000, i32::MAX] {
            assert!(updates_leak(&info(Backend::Hip, version)), "{version}");
            assert_eq!(default_limit(None, &info(Backend::Hip, version)), DEFAULT_BUDGET_BYTES);
        }
        assert!(!updates_leak(&info(Backend::Cuda, 12_080)));
        assert_eq!(default_limit(None, &info(Backend::Cuda, 12_080)), 0);
        // The variable wins both ways.
        assert_eq!(default_limit(Some(0), &info(Backend::Hip, 60_241_134)), 0);
        assert_eq!(default_limit(Some(1 << 20), &info(Backend::Cuda, 12_080)), 1 << 20);
    }

    #[test]
    fn a_zero_limit_is_never_exceeded_and_charges_add_up() {
        let mut b = ExecBudget::new(0, 0);
        b.charge(u64::MAX);
        assert!(!b.exceeded_by(u64::MAX));
        let mut b = ExecBudget::new(100, 0);
        b.charge(60);
        assert!(!b.exceeded_by(40));
        assert!(b.exceeded_by(41));
        assert_eq!(b.spent(), 60);
    }

    #[test]
    fn push_estimates_add_arguments_to_the_per_node_overhead() {
        let kernel = Params::Kernel(super::super::nodes::KernelRecord {
            function: crate::runtime::Function(std::ptr::null_mut()),
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            blob: vec![0; 40],
            pointers: Vec::new(),
            named: Vec::new(),
        });
        assert_eq!(push_bytes(&kernel), 40 + NODE_OVERHEAD_BYTES);
        assert_eq!(push_bytes(&Params::Empty), 0);
        // The reported figure: 32 nodes at the overhead make about 185 KiB per whole update.
        assert_eq!(32 * NODE_OVERHEAD_BYTES / 1024, 185);
    }
}

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
use crate::runtime::{Backend, Graph, NodeType, Runtime, RuntimeInfo};

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
/// [`MAX_RETIRED`] old ones; five with [`MAX_KEPT_EXECS`] kept for launches the library could
/// not follow), while a re-instantiation, a few milliseconds for 1 000 nodes, is spread over
/// that many updates.
pub const DEFAULT_BUDGET_BYTES: u64 = 64 << 20;

/// Old executable graphs a command buffer keeps while their launches finish. A re-instantiation
/// that would keep one more is not made (the host never waits for a launch): updates go to the
/// live executable in place, counted as blocked, until an old one is destroyed.
pub const MAX_RETIRED: usize = 2;

/// Replaced executable graphs a command buffer keeps for launches the library could not follow
/// (`launches.rs`): those are given back only by `rcb_cmdbuf_launches_done` (else leaked by the
/// free). A re-instantiation for the budget that would keep one more is not made: updates go to
/// the live executable in place, counted as blocked. Past the cap a re-instantiation would keep
/// a whole executable (its argument memory included) to spare pushes into the live one of about
/// the same size, so more would only move the growth, never stop it; two, as [`MAX_RETIRED`],
/// bound a command buffer at five executables (the live one, two waiting, two kept) while an
/// occasional lost event still leaves the budget working.
pub const MAX_KEPT_EXECS: usize = 2;

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
/// take nothing, nor do the nodes that are never pushed (event, host, memory operations); a
/// child node's cost is its graph's, which its record holds.
pub fn push_bytes(params: &Params) -> u64 {
    match params {
        Params::Kernel(k) => k.blob.len() as u64 + NODE_OVERHEAD_BYTES,
        Params::Memcpy(_) | Params::Memset(_) | Params::KernelByPointers(_) => NODE_OVERHEAD_BYTES,
        Params::Empty | Params::Child(_) | Params::EventRecord(_) | Params::EventWait(_) | Params::Host(_) | Params::MemOp(..) => 0,
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

/// The budget of one command buffer's executable graph. The executables it replaces wait for
/// their launches in `launches.rs`.
pub struct ExecBudget {
    /// Bytes of estimated staging the executable may take before it is re-instantiated; 0:
    /// never.
    limit: u64,
    spent: u64,
    warned_blocked: bool,
}

impl ExecBudget {
    pub fn new(limit: u64) -> Self {
        Self { limit, spent: 0, warned_blocked: false }
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

    /// A new executable graph starts with nothing spent.
    pub fn restart(&mut self) {
        self.spent = 0;
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
        let mut b = ExecBudget::new(0);
        b.charge(u64::MAX);
        assert!(!b.exceeded_by(u64::MAX));
        let mut b = ExecBudget::new(100);
        b.charge(60);
        assert!(!b.exceeded_by(40));
        assert!(b.exceeded_by(41));
        assert_eq!(b.spent(), 60);
    }

    #[test]
    fn push_estimates_add_arguments_to_the_per_node_overhead() {
        let kernel = Params::Kernel(super::super::nodes::KernelRecord {
            opaque: None,
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

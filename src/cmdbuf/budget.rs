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
use crate::runtime::{Graph, NodeType, Runtime};

/// What one node's push is charged on top of its argument bytes. The only public measurement
/// (issue 10713, MI300X) is a 32-node graph growing about 354 MiB over 2 000 whole-graph updates,
/// about 185 KiB per update; 185 KiB / 32 nodes is 5 920 bytes a node. Those kernels' own
/// argument sizes are not given, so the whole figure counts as overhead here and a node's
/// arguments come on top: the estimate errs on the side of re-instantiating early.
pub const NODE_OVERHEAD_BYTES: u64 = 5_920;

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

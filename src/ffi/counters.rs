//! `rcb_counters`: what the library asked of the GPU runtime, per command buffer and for the
//! process, so that a caller can show a steady state (no captures, no instantiations, pushes
//! only for what moved) and see every fallback with its reason.
//!
//! Functions: `rcb_counters_get`, `rcb_counters_reset`, `rcb_fallback_reason_name`.

use super::cmdbuf::{rcb_cmdbuf, with as with_cmdbuf};
use super::{arg_out_sized, boundary, boundary_value, rcb_status, sized_struct};
use crate::counters::{self, Counts, FALLBACK_SLOTS, Fallback};
use std::ffi::c_char;

// The version node of each export of this module (abi/librocm_cmdbuf.map, through build.rs).
include!(concat!(env!("OUT_DIR"), "/symbol_versions/counters.rs"));

/// The layout version of `rcb_counters` this library writes into `rcb_counters.version`. A
/// later version only appends fields (the rule for sized structs).
pub const RCB_COUNTERS_VERSION: u32 = 1;
/// Size in bytes of version 1 of `rcb_counters`, the smallest `struct_size` accepted.
pub const RCB_COUNTERS_V1_SIZE: u32 = 216;
/// Entries of `rcb_counters.fallbacks`: one per `RCB_FALLBACK_*` reason, with room for reasons
/// added later (their entries read 0 until then). It never changes, as it sizes a field of
/// `rcb_counters`: reasons past the 16th would be counted in a second array appended to that
/// sized struct, with a new `RCB_COUNTERS_VERSION`.
pub const RCB_FALLBACK_REASON_SLOTS: usize = 16;

/// Fallback reason: an address update got a table with another number of entries or a changed
/// size (`needs_rerecord`).
pub const RCB_FALLBACK_SHAPE_CHANGED: u32 = 0;
/// Fallback reason: an address update was refused because a node whose addresses are not patch
/// sites (a cloned child, a captured graph, a `kernelParams` kernel) may reference a moved
/// allocation (`needs_rerecord`).
pub const RCB_FALLBACK_OPAQUE_REFERENCE: u32 = 1;
/// Fallback reason: a runtime call failed part-way through an address update (`needs_rerecord`).
pub const RCB_FALLBACK_PUSH_FAILED: u32 = 2;
/// Fallback reason: `rcb_cmdbuf_add_flattened_child` (or a trace-cache capture) could not
/// flatten a child and added it as one cloned child node (for a reason without a number of its
/// own).
pub const RCB_FALLBACK_FLATTENED_AS_CHILD: u32 = 3;
/// Fallback reason: a trace-cache relocation failed part-way; the command was captured again.
pub const RCB_FALLBACK_RELOCATION_FAILED: u32 = 4;
/// Fallback reason: the executable graph's update budget was spent but it was not
/// re-instantiated from its template (a node's template lags behind it, as many replaced
/// executable graphs as are kept still wait for their launches: the host never waits for
/// them, or two replaced ones are kept for launches the library could not follow, see
/// `RCB_FALLBACK_KEPT_UNTRACKED`), so the update went to the live executable graph in place,
/// whose runtime may keep growing its memory (see `RCB_EXEC_UPDATE_BUDGET`).
pub const RCB_FALLBACK_REINSTANTIATE_BLOCKED: u32 = 5;
/// Fallback reason: re-instantiating for the update budget failed in the runtime; the update
/// went to the old executable graph.
pub const RCB_FALLBACK_REINSTANTIATE_FAILED: u32 = 6;
/// Fallback reason: an address update was refused because a recorded address may come from
/// several allocations of the table (aliased, nested or overlapping entries, or a kernel's
/// pointer one past the end of one where another begins: see `rcb_allocation`) and they did
/// not all move by the same amount, so which one the address came from is unknown
/// (`needs_rerecord`). Naming the allocation (`RCB_ARG_ALLOCATION`) avoids it.
pub const RCB_FALLBACK_OVERLAPPING_ALLOCATIONS: u32 = 7;
/// Fallback reason: `rcb_cmdbuf_add_flattened_child` (or a trace-cache capture) added a child
/// as one cloned child node because the parameters of one of its memcpy nodes, as the runtime
/// reports them, cannot be trusted: HIP before 7.2 never fills those of a 1-D memcpy node
/// (`hipGraphAddMemcpyNode1D`, a captured `hipMemcpyAsync`); in 7.2 they are the ones the node
/// was created with, stale once a command buffer has changed it (its template handed out by
/// `rcb_cmdbuf_graph`, or a clone of it in a nested child graph); after 7.2 they have not been
/// read yet. The reason names the runtime's version.
pub const RCB_FALLBACK_MEMCPY_UNREADABLE: u32 = 8;
/// Fallback reason: an address update was refused (`needs_rerecord`), or a trace-cache entry
/// was marked never to be relocated (it serves hits; other addresses are captured again),
/// because the command buffer holds a node of an opaque kernel: one on `RCB_OPAQUE_KERNELS`
/// (by default NCCL's, RCCL's and MSCCL's collectives), which may read addresses from memory
/// the library cannot see (work descriptors in device memory, peers' registrations of this
/// rank's buffers). Such a kernel's arguments are never patched, and while it is recorded no
/// allocation of the command buffer moves in place. The reason names the kernel.
pub const RCB_FALLBACK_OPAQUE_KERNEL: u32 = 9;
/// Fallback reason: `rcb_cmdbuf_add_flattened_child` (or a trace-cache capture) got a child
/// holding a conditional node (CUDA 12.3+: a `lax.while_loop` or `lax.cond` that XLA built
/// with conditional nodes). It is not flattened (the body runs on a value that kernels set
/// through a handle made for the node's own graph, which no copy can be given) and CUDA forbids
/// conditional nodes in a child graph, so no cloned child node can hold it either: the call
/// fails with `RCB_STATUS_UNSUPPORTED` and adds nothing. Record such a graph another way (XLA
/// keeps its own command for it).
pub const RCB_FALLBACK_CONDITIONAL_NODE: u32 = 10;
/// Fallback reason: `rcb_cmdbuf_add_flattened_child` (or a trace-cache capture) got a child
/// holding a memory allocation or free node (a captured `cudaMallocAsync`/`hipMallocAsync` or
/// its free). It is not flattened (a copy of an allocation node would allocate at another
/// address than the one the nodes after it hold). On HIP the child becomes one cloned child
/// node; CUDA adds such a graph as a child node only by moving those nodes out of it, so there
/// the call fails with `RCB_STATUS_UNSUPPORTED` and adds nothing.
pub const RCB_FALLBACK_MEMORY_NODE: u32 = 11;
/// Fallback reason: a memcpy node of an executable graph could not take its new operands in
/// place. CUDA's `cuGraphExecMemcpyNodeSetParams` refuses operands in another kind of
/// allocation (`cuMemAlloc` or managed memory on one side, virtual-memory mappings and
/// stream-ordered pools on the other), on another device, or (plain memory) of another context
/// than the node was instantiated with; the library checks that before the setter, and any runtime's setter may refuse new
/// operands too. The executable graph is then re-instantiated from its brought-up-to-date
/// template (`rcb_update_report.reinstantiated` for an address update), or, where that is not
/// possible (the conditions of `RCB_FALLBACK_REINSTANTIATE_BLOCKED`, a failed instantiation),
/// the move is refused (`needs_rerecord`) with nothing changed, or the nodes are left
/// unpushed and launches refused until a re-record.
pub const RCB_FALLBACK_MEMCPY_NOT_IN_PLACE: u32 = 12;
/// Fallback reason: an executable graph or graph that a launch the library could not follow
/// with an event may still use (see `rcb_cmdbuf_launch`) was kept instead of destroyed when an
/// update replaced it or its command buffer was freed; only `rcb_cmdbuf_launches_done` gives it
/// back. Counted once per object. A command buffer keeps at most two executable graphs so:
/// with two kept, the update budget stops re-instantiating (`RCB_FALLBACK_REINSTANTIATE_BLOCKED`)
/// and updates go to the live executable graph in place, none refused.
pub const RCB_FALLBACK_KEPT_UNTRACKED: u32 = 13;
/// Fallback reason: the library could not give the calling thread its stream capture mode back
/// after one of its own event calls (made in relaxed mode, see `rcb_cmdbuf_launch`), twice; the
/// thread stays relaxed, so its calls during a capture are no longer refused as unsafe. Logged
/// at warn; counted in the process totals only.
pub const RCB_FALLBACK_CAPTURE_MODE_LEFT_RELAXED: u32 = 14;

const _: () = {
    assert!(RCB_FALLBACK_REASON_SLOTS == FALLBACK_SLOTS);
    assert!(RCB_FALLBACK_SHAPE_CHANGED == Fallback::ShapeChanged as u32);
    assert!(RCB_FALLBACK_OPAQUE_REFERENCE == Fallback::OpaqueReference as u32);
    assert!(RCB_FALLBACK_PUSH_FAILED == Fallback::PushFailed as u32);
    assert!(RCB_FALLBACK_FLATTENED_AS_CHILD == Fallback::FlattenedAsChild as u32);
    assert!(RCB_FALLBACK_RELOCATION_FAILED == Fallback::RelocationFailed as u32);
    assert!(RCB_FALLBACK_REINSTANTIATE_BLOCKED == Fallback::ReinstantiateBlocked as u32);
    assert!(RCB_FALLBACK_REINSTANTIATE_FAILED == Fallback::ReinstantiateFailed as u32);
    assert!(RCB_FALLBACK_OVERLAPPING_ALLOCATIONS == Fallback::OverlappingAllocations as u32);
    assert!(RCB_FALLBACK_MEMCPY_UNREADABLE == Fallback::MemcpyUnreadable as u32);
    assert!(RCB_FALLBACK_OPAQUE_KERNEL == Fallback::OpaqueKernel as u32);
    assert!(RCB_FALLBACK_CONDITIONAL_NODE == Fallback::ConditionalNode as u32);
    assert!(RCB_FALLBACK_MEMORY_NODE == Fallback::MemoryNode as u32);
    assert!(RCB_FALLBACK_MEMCPY_NOT_IN_PLACE == Fallback::MemcpyNotInPlace as u32);
    assert!(RCB_FALLBACK_KEPT_UNTRACKED == Fallback::KeptUntracked as u32);
    assert!(RCB_FALLBACK_CAPTURE_MODE_LEFT_RELAXED == Fallback::CaptureModeLeftRelaxed as u32);
};

sized_struct!(rcb_counters, RCB_COUNTERS_V1_SIZE);

/// Counts of what the library asked of the GPU runtime, written by `rcb_counters_get`. Owned by
/// the caller, who sets `struct_size` before the call (the rule for sized structs); every count
/// only grows until `rcb_counters_reset`.
///
/// For a command buffer the counts cover its life (or since its last reset); the process totals
/// (`cb` NULL) add up every command buffer, freed ones included, and the trace caches.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct rcb_counters {
    /// In: `sizeof(rcb_counters)` as the caller's header has it (at least
    /// `RCB_COUNTERS_V1_SIZE`); out: the bytes written.
    pub struct_size: u32,
    /// Out: the layout version written (`RCB_COUNTERS_VERSION` of the library, or lower when
    /// the caller's `struct_size` ends earlier).
    pub version: u32,
    /// Stream captures the library began (`hipStreamBeginCapture`): `rcb_cmdbuf_capture_begin`,
    /// and for the process also each trace-cache miss that had to capture.
    pub captures: u64,
    /// Executable graphs instantiated (`hipGraphInstantiate`): a primary command buffer's first
    /// `rcb_cmdbuf_finalize`, and every re-instantiation.
    pub instantiations: u64,
    /// Instantiations that replaced an executable graph: its update budget was about to be spent
    /// (see `RCB_EXEC_UPDATE_BUDGET`) or a memcpy node could not take its new operands in place
    /// (`RCB_FALLBACK_MEMCPY_NOT_IN_PLACE`); each is counted in `instantiations` too.
    pub reinstantiations: u64,
    /// Executable graphs destroyed, each once the work launched from it had finished: those a
    /// re-instantiation replaced (until then the command buffer keeps them) and those of freed
    /// command buffers (until then the library keeps them, see `rcb_cmdbuf_free`). So
    /// `instantiations - retired_execs` is how many the process holds, in service or waiting.
    pub retired_execs: u64,
    /// Node parameters pushed to an executable graph (`hipGraphExecKernelNodeSetParams`, the
    /// memcpy, memset and child-graph setters): one per node per push.
    pub exec_param_pushes: u64,
    /// What those pushes are estimated to take from the runtime's kernel-argument staging, in
    /// bytes: the same estimate the update budget charges.
    pub exec_param_push_bytes: u64,
    /// Address updates (`rcb_cmdbuf_update_allocations`, `rcb_cmdbuf_move_allocations`) that
    /// moved at least one allocation in place.
    pub address_updates: u64,
    /// Trace-cache entries relocated in place to new allocations instead of captured again
    /// (process totals only: 0 for a command buffer).
    pub relocations: u64,
    /// Trace-cache lookups answered by an entry with exactly the allocations asked for (process
    /// totals only: 0 for a command buffer).
    pub trace_hits: u64,
    /// Sum of `fallbacks`.
    pub fallbacks_total: u64,
    /// Fallbacks by reason: entry `RCB_FALLBACK_*` counts that reason
    /// (`rcb_fallback_reason_name` names it).
    pub fallbacks: [u64; RCB_FALLBACK_REASON_SLOTS],
}

impl From<Counts> for rcb_counters {
    fn from(c: Counts) -> Self {
        rcb_counters {
            struct_size: size_of::<Self>() as u32,
            version: RCB_COUNTERS_VERSION,
            captures: c.captures,
            instantiations: c.instantiations,
            reinstantiations: c.reinstantiations,
            retired_execs: c.retirements,
            exec_param_pushes: c.exec_pushes,
            exec_param_push_bytes: c.exec_push_bytes,
            address_updates: c.address_updates,
            relocations: c.relocations,
            trace_hits: c.trace_hits,
            fallbacks_total: c.fallbacks_total(),
            fallbacks: c.fallbacks,
        }
    }
}

/// Writes the counters of command buffer `cb`, or the process totals when `cb` is NULL, to
/// `*out`. The caller owns `out` and sets `out->struct_size = sizeof(rcb_counters)` first (a
/// size below `RCB_COUNTERS_V1_SIZE` gives `RCB_STATUS_INVALID_ARGUMENT`, nothing written); the
/// library writes `version` and the counts, never past `struct_size` bytes, and sets
/// `struct_size` to the bytes written. Works in every state of the command buffer, a capture
/// included.
///
/// Thread-safety: any thread. For a command buffer, not concurrently with other calls on it
/// (they are serialised by its lock); the process totals may be read while other threads work,
/// each field then being a recent value on its own.
///
/// # Safety
/// `cb` must be NULL or a handle; `out` NULL or writable for `out->struct_size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_counters_get(cb: *const rcb_cmdbuf, out: *mut rcb_counters) -> rcb_status {
    boundary(|| {
        // SAFETY: the caller promises a NULL or writable sized struct.
        let out = unsafe { arg_out_sized(out, "out") }?;
        let counts = if cb.is_null() {
            counters::totals()
        } else {
            let mut counts = counters::Counts::default();
            with_cmdbuf(cb, |_, cb| {
                counts = cb.counts();
                Ok(())
            })?;
            counts
        };
        // SAFETY: checked by arg_out_sized.
        unsafe { out.write(counts.into()) };
        Ok(())
    })
}

/// Zeroes the counters of command buffer `cb`, or the process totals when `cb` is NULL. A
/// command buffer's reset leaves the process totals alone, and a reset of the totals leaves
/// every command buffer's own counters alone. Events counted by other threads during a reset of
/// the totals may survive it.
///
/// Thread-safety: any thread; for a command buffer, not concurrently with other calls on it.
///
/// # Safety
/// `cb` must be NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_counters_reset(cb: *mut rcb_cmdbuf) -> rcb_status {
    boundary(|| {
        if cb.is_null() {
            counters::reset_totals();
            return Ok(());
        }
        with_cmdbuf(cb, |_, cb| {
            cb.reset_counts();
            Ok(())
        })
    })
}

/// The name of fallback reason `reason` (an `RCB_FALLBACK_*` value), such as
/// `"opaque_reference"`: a static NUL-terminated string the caller must not free. NULL for a
/// number that is no reason.
///
/// Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn rcb_fallback_reason_name(reason: u32) -> *const c_char {
    boundary_value(std::ptr::null(), || Fallback::from_code(reason).map_or(std::ptr::null(), |why| why.name().as_ptr()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn reason_names_match_the_feature_s_names() {
        for why in Fallback::ALL {
            let p = rcb_fallback_reason_name(why as u32);
            // SAFETY: a static NUL-terminated string for every reason.
            assert_eq!(unsafe { CStr::from_ptr(p) }, why.name());
        }
        assert!(rcb_fallback_reason_name(Fallback::ALL.len() as u32).is_null());
        assert!(rcb_fallback_reason_name(u32::MAX).is_null());
    }
}

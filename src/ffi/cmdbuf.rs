//! `rcb_cmdbuf`: a command buffer (a HIP graph whose node parameters the library owns) with an
//! allocation table, so that moved allocations are patched in place.
//!
//! Methods: `rcb_cmdbuf_new`, `rcb_cmdbuf_new_nested`, `rcb_cmdbuf_free`,
//! `rcb_cmdbuf_set_allocations`, `rcb_cmdbuf_add_kernel`, `rcb_cmdbuf_add_kernel_params`,
//! `rcb_cmdbuf_update_kernel_params`, `rcb_cmdbuf_add_memcpy_d2d`,
//! `rcb_cmdbuf_add_memset`, `rcb_cmdbuf_add_empty`, `rcb_cmdbuf_add_child`,
//! `rcb_cmdbuf_add_child_graph`, `rcb_cmdbuf_update_kernel`, `rcb_cmdbuf_update_memcpy_d2d`,
//! `rcb_cmdbuf_update_memset`, `rcb_cmdbuf_update_child`, `rcb_cmdbuf_capture_begin`,
//! `rcb_cmdbuf_capture_end`, `rcb_cmdbuf_finalize`, `rcb_cmdbuf_begin_update`,
//! `rcb_cmdbuf_launch`, `rcb_cmdbuf_launches_done`, `rcb_cmdbuf_graph`, `rcb_cmdbuf_exec`, `rcb_cmdbuf_update_allocations`,
//! `rcb_cmdbuf_move_allocations`, `rcb_cmdbuf_node_count`, `rcb_cmdbuf_site_count`, `rcb_cmdbuf_memory_use`,
//! `rcb_cmdbuf_add_flattened_child`,
//! `rcb_cmdbuf_set_exec_update_budget`, `rcb_cmdbuf_exec_update_budget`.

use super::handle::handle_type;
use super::{Handle, Place, arg_out, arg_slice, boundary, live, locked, null_argument, rcb_status, register_placed, take_placed};
use super::{arg_out_sized, arg_sized, sized_struct, write_c_str, write_out};
use crate::cmdbuf::{self, Allocation, AllocationMove, ArgKind, CmdBuf, KernelArg, KernelLaunch, Kind, Memset, NodeId};
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::{self, Function, Graph, KernelParamPointers, MemcpyParams, Stream};
use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::sync::Arc;

// The version node of each export of this module (abi/librocm_cmdbuf.map, through build.rs).
include!(concat!(env!("OUT_DIR"), "/symbol_versions/cmdbuf.rs"));

/// A command buffer (opaque). Created by `rcb_cmdbuf_new` or `rcb_cmdbuf_new_nested`, owned by
/// the caller, freed with `rcb_cmdbuf_free`.
///
/// Life cycle: recording (add nodes, optionally set the allocation table or capture a stream)
/// → `rcb_cmdbuf_finalize` → finalized (launch, `rcb_cmdbuf_update_allocations`,
/// `rcb_cmdbuf_move_allocations`) →
/// `rcb_cmdbuf_begin_update` → updating (`rcb_cmdbuf_update_*` on existing nodes) →
/// `rcb_cmdbuf_finalize` → finalized → … A call the state does not allow returns
/// `RCB_STATUS_INVALID_STATE` and changes nothing.
///
/// Thread-safety: one thread at a time per command buffer (calls on one buffer from several
/// threads are serialised by a lock, but their order is then arbitrary); distinct command
/// buffers may be used from different threads in parallel.
pub struct rcb_cmdbuf {
    _private: [u8; 0],
}

handle_type!(rcb_cmdbuf => Place<CmdBuf>);

/// A node of a command buffer. The value encodes the owning command buffer: a node of another
/// command buffer gives `RCB_STATUS_FOREIGN_NODE`, a made-up value `RCB_STATUS_INVALID_ARGUMENT`.
/// Valid as long as its command buffer lives; nothing to free.
pub type rcb_node = u64;

/// `rcb_kernel_arg.kind`: plain bytes, never patched even when they equal an address.
pub const RCB_ARG_VALUE: u32 = 0;
/// `rcb_kernel_arg.kind`: an 8-byte device address (`value` points to a `uint64_t`), patched when
/// it lies inside an allocation of the table or one past the end of one (see `rcb_allocation`).
pub const RCB_ARG_DEVICE_PTR: u32 = 1;
/// `rcb_kernel_arg.kind`: an argument of any size whose kind the caller does not know (XLA knows
/// every argument's size but not always which ones are device addresses). It is packed exactly
/// like `RCB_ARG_VALUE`; then every 8-byte word wholly inside it that sits at an 8-byte-aligned
/// offset of the node's packed arguments and holds an address inside an allocation of the table,
/// or one past the end of one, is a patch site (see `rcb_allocation`), found again whenever
/// `rcb_cmdbuf_set_allocations` replaces the table.
///
/// Trade-off: a plain value (an integer, a pair of floats) that happens to equal such an
/// address is patched as if it were a pointer; a pointer at an offset that is not a multiple of
/// 8, or kept in device memory (a pointer array), is not found. Prefer `RCB_ARG_DEVICE_PTR` and
/// `RCB_ARG_VALUE` for the arguments whose kind is known.
pub const RCB_ARG_SCAN: u32 = 2;
/// `rcb_kernel_arg.kind`: a device pointer the caller names by allocation: `value` points to an
/// `rcb_arg_allocation` and `size` is `sizeof(rcb_arg_allocation)`. The node gets the 8-byte
/// address `offset` bytes into that allocation of the table set now (`offset` may equal the
/// allocation's size: one past its end), and that address is a patch site of that allocation
/// only: it follows the allocation's moves whatever other allocations contain the same address
/// (aliased parameters, donated buffers, nested ranges), and no value is ever taken for a
/// pointer. Recording with it needs the table first (`rcb_cmdbuf_set_allocations`); a later
/// table keeps the site while it has that allocation with `offset` within its size. Prefer it
/// wherever the caller knows where a pointer came from (XLA does: each argument is a buffer
/// slice): matching addresses must refuse moves of allocations that overlap.
pub const RCB_ARG_ALLOCATION: u32 = 3;

/// Most arguments of one kernel launch.
pub const RCB_MAX_KERNEL_ARGS: usize = 4096;
/// Most entries of an allocation table.
pub const RCB_MAX_ALLOCATIONS: usize = 1 << 24;

// Literals so that cbindgen can write them; the limits themselves live in `cmdbuf`.
const _: () = assert!(RCB_MAX_KERNEL_ARGS == cmdbuf::MAX_ARGS && RCB_MAX_ALLOCATIONS == cmdbuf::MAX_ALLOCATIONS);

/// One kernel argument: `size` bytes at `value` (borrowed for the call; copied into the node).
///
/// Packing: arguments are laid out in order, each at the next multiple of its alignment, where
/// the alignment is the largest power of two dividing `size`, capped at 16; there is no tail
/// padding. This matches scalars, pointers and vector types. A struct whose alignment is smaller
/// than that rule gives (an 8-byte struct of two `uint32_t` has alignment 4 but would be placed
/// at a multiple of 8) must be passed split into its fields, or padded by the caller.
#[repr(C)]
pub struct rcb_kernel_arg {
    pub value: *const c_void,
    pub size: u32,
    /// `RCB_ARG_VALUE`, `RCB_ARG_DEVICE_PTR` (then `size` must be 8), `RCB_ARG_SCAN` or
    /// `RCB_ARG_ALLOCATION` (then `size` must be `sizeof(rcb_arg_allocation)`).
    pub kind: u32,
}

/// What an `RCB_ARG_ALLOCATION` argument points to: `offset` bytes into allocation
/// `allocation` (an index of the command buffer's table). Borrowed for the call.
#[repr(C)]
pub struct rcb_arg_allocation {
    pub allocation: u64,
    pub offset: u64,
}

/// A kernel launch. `function` is a `hipFunction_t` (or `CUfunction`); `args` points to
/// `num_args` arguments (NULL allowed when `num_args` is 0), borrowed for the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcb_kernel_launch {
    /// `sizeof(rcb_kernel_launch)` (the rule for sized structs, at the top of this header).
    pub struct_size: u32,
    pub function: *mut c_void,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub args: *const rcb_kernel_arg,
    pub num_args: usize,
}

/// A kernel launch whose argument sizes the caller does not know (XLA's `KernelArgsPackedTuple`
/// and `KernelArgsPackedVector` expose only `void **argument_addresses`). `function` is a
/// `hipFunction_t` (or `CUfunction`); `kernel_params` is the runtime's `kernelParams`: one
/// pointer per kernel argument, each to that argument's value, borrowed for the call only. The
/// runtime copies the values during the call, sizing them from the kernel's own metadata; the
/// library keeps no copy and never reads them back (ROCm/clr#138). NULL is accepted for a kernel
/// without arguments (the runtime refuses it for one with arguments; ROCm 5.2 refuses it always).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcb_kernel_params_launch {
    /// `sizeof(rcb_kernel_params_launch)` (the rule for sized structs).
    pub struct_size: u32,
    pub function: *mut c_void,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub kernel_params: *mut *mut c_void,
}

/// One allocation of the table (XLA's buffer allocation index = position in the array): device
/// address `base`, `size` bytes. An address lies in it when `base <= p < base + size`; a
/// size-0 allocation (an empty buffer, whose address may be anywhere) takes `p == base` only
/// when no allocation of non-zero size contains `p`.
///
/// One past the end (`p == base + size`, `size` > 0) is not in the allocation, but a kernel's
/// pointer argument there may have come from it (the end of a begin/end pair, a size-0 slice at
/// the buffer's end), so for an address found among a kernel node's arguments
/// (`RCB_ARG_DEVICE_PTR`, words of `RCB_ARG_SCAN`, every argument of a flattened graph) that
/// allocation is a candidate too, at offset `size`: where another allocation contains `p` (the
/// next buffer, packed right after it) the address is ambiguous between them; where none does,
/// it is patched through the allocation ending there, with every other allocation ending there
/// and every size-0 one at `p` as candidates. Memcpy and memset operands are addresses that are
/// read or written, and are matched only by the allocations they lie in.
///
/// An address that may have come from several allocations (one array passed for two
/// parameters, a donated buffer, nested or partly overlapping ranges, empty ones at one address,
/// the end of one where another begins) is ambiguous: nothing says which one it came from. An
/// update moves it only when every candidate moves by the same amount; any other move of one of
/// them reports `needs_rerecord` (fallback reason `RCB_FALLBACK_OVERLAPPING_ALLOCATIONS`). A
/// pointer argument given with `RCB_ARG_ALLOCATION` is never ambiguous: it follows the
/// allocation it names.
///
/// An allocation is a range whose contents move as one: every recorded address inside it
/// follows it. List whole allocations (XLA's buffer allocations), not a view into memory that
/// other buffers share: a tensor that a captured graph allocated from its own memory pool, for
/// example, starts where intermediates of earlier kernels lived, and moving it would move them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct rcb_allocation {
    pub base: u64,
    pub size: u64,
}

/// One allocation that moved: entry `index` of the recorded table now starts at `base`; its
/// size is unchanged. What XLA knows after comparing its allocation table with the previous
/// step's (the indices that changed, and where they are now).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct rcb_allocation_move {
    pub index: u64,
    pub base: u64,
}

/// What `rcb_cmdbuf_update_allocations` or `rcb_cmdbuf_move_allocations` did.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct rcb_update_report {
    /// In: `sizeof(rcb_update_report)`; out: the bytes written (the rule for sized structs).
    pub struct_size: u32,
    /// Allocations whose base changed.
    pub moved_allocations: u32,
    /// Recorded addresses rewritten (each: new base + the same offset).
    pub patched_sites: u64,
    /// Nodes whose new parameters reached the runtime, each counted once.
    pub updated_nodes: u64,
    /// 1 when the update could not be completed in place (the number of allocations or a size
    /// changed, a moved allocation may be referenced by a node the library cannot patch, or an
    /// address that may come from several allocations would have to follow moves that differ:
    /// nothing was changed; or a runtime call failed part-way: launches are refused until a
    /// re-record or the next finalize). Re-record: `rcb_cmdbuf_begin_update`,
    /// `rcb_cmdbuf_set_allocations` with the new table, `rcb_cmdbuf_update_*` for every node
    /// (`rcb_cmdbuf_update_child` with the child re-recorded at the new addresses),
    /// `rcb_cmdbuf_finalize`; a command buffer whose graph came from capture is captured again.
    pub needs_rerecord: u32,
    /// 1 when the executable graph was re-instantiated (from its template, brought up to date
    /// with the moved addresses) instead of being sent the touched nodes: its update budget was
    /// about to be spent (see `rcb_cmdbuf_set_exec_update_budget`), or a memcpy node could not
    /// take its new operands in place (`RCB_FALLBACK_MEMCPY_NOT_IN_PLACE`: on CUDA an operand
    /// moved to another kind of allocation or device). The old executable graph is destroyed
    /// once the work launched from it has finished. 0 otherwise.
    pub reinstantiated: u32,
}

/// The host memory a command buffer keeps, by what it holds: written by `rcb_cmdbuf_memory_use`.
/// Owned by the caller, who sets `struct_size` before the call (the rule for sized structs).
///
/// Bytes, counted by the library from its own structures: the size of each and the capacity
/// of each heap buffer it holds (a hash table as all its buckets and their control bytes). Not
/// counted: the allocator's header on each heap block (`heap_blocks` says how many), and what
/// the GPU runtime keeps for the command buffer's graphs. The parts, `argument_copies` to
/// `other` (and any part a later release appends), add up to `total_bytes`; `argument_bytes` and
/// `heap_blocks` are not parts. How a later release divides its memory among the parts may
/// differ; `total_bytes` means the same in every release.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct rcb_memory_use {
    /// In: `sizeof(rcb_memory_use)`; out: the bytes written (the rule for sized structs).
    pub struct_size: u32,
    /// Written as 0.
    pub reserved: u32,
    /// Every byte the command buffer keeps: the sum of the parts.
    pub total_bytes: u64,
    /// The packed kernel arguments themselves (their length): not a part, but what the parts
    /// are set against, since a copy of them is the least the library must keep.
    pub argument_bytes: u64,
    /// The heap the copies of the kernel arguments take (in this release exactly
    /// `argument_bytes`: each node's copy is as long as its arguments).
    pub argument_copies: u64,
    /// The node records, one a node, each holding its node's parameters (a kernel's launch shape,
    /// a memcpy's or memset's operands).
    pub node_records: u64,
    /// Each node's own lists: where a kernel's arguments hold addresses, its arguments named by
    /// allocation, the fields only some nodes have.
    pub node_lists: u64,
    /// The recorded addresses (patch sites), grouped by allocation, and the sets of those that
    /// may come from more than one allocation.
    pub site_lists: u64,
    /// The allocation table, its lookup index and what pins each allocation.
    pub allocation_table: u64,
    /// What address updates reuse: a mark and an argument address a node, the room finalize
    /// makes for a first update (a touched-node entry a node, up to 64 moved allocations), and
    /// what the updates so far have grown beyond it.
    pub update_scratch: u64,
    /// The rest: nodes left to push, flattened child graphs, graphs kept for the command buffer,
    /// and its fixed cost (its own struct, its place in the handle registry, its counters).
    pub other: u64,
    /// The separate heap blocks behind all of these.
    pub heap_blocks: u64,
}

impl From<cmdbuf::MemoryUse> for rcb_memory_use {
    fn from(m: cmdbuf::MemoryUse) -> Self {
        Self {
            total_bytes: m.total(),
            argument_bytes: m.argument_bytes,
            argument_copies: m.argument_copies,
            node_records: m.node_records,
            node_lists: m.node_lists,
            site_lists: m.site_lists,
            allocation_table: m.allocation_table,
            update_scratch: m.update_scratch,
            other: m.other,
            heap_blocks: m.heap_blocks,
            ..Self::default()
        }
    }
}

// The sizes in 0.1.0, when the structs got their size.
sized_struct!(rcb_kernel_launch, 64);
sized_struct!(rcb_kernel_params_launch, 56);
sized_struct!(rcb_update_report, 32);
sized_struct!(rcb_flatten_report, 272);
sized_struct!(rcb_memory_use, 88);

// `rcb_allocation` and `Allocation` are the same two u64 fields, so a table from C is read in
// place instead of being copied on every update.
const _: () = {
    assert!(size_of::<rcb_allocation>() == size_of::<Allocation>());
    assert!(align_of::<rcb_allocation>() == align_of::<Allocation>());
    assert!(std::mem::offset_of!(rcb_allocation, base) == std::mem::offset_of!(Allocation, base));
    assert!(std::mem::offset_of!(rcb_allocation, size) == std::mem::offset_of!(Allocation, size));
};

const _: () = {
    assert!(size_of::<rcb_allocation_move>() == size_of::<AllocationMove>());
    assert!(align_of::<rcb_allocation_move>() == align_of::<AllocationMove>());
    assert!(std::mem::offset_of!(rcb_allocation_move, index) == std::mem::offset_of!(AllocationMove, index));
    assert!(std::mem::offset_of!(rcb_allocation_move, base) == std::mem::offset_of!(AllocationMove, base));
};

fn as_moves(moves: &[rcb_allocation_move]) -> &[AllocationMove] {
    // SAFETY: identical layout (checked above), both plain old data.
    unsafe { std::slice::from_raw_parts(moves.as_ptr() as *const AllocationMove, moves.len()) }
}

impl From<cmdbuf::UpdateReport> for rcb_update_report {
    fn from(r: cmdbuf::UpdateReport) -> Self {
        rcb_update_report {
            moved_allocations: r.moved_allocations,
            patched_sites: r.patched_sites,
            updated_nodes: r.updated_nodes,
            needs_rerecord: u32::from(r.needs_rerecord),
            reinstantiated: u32::from(r.reinstantiated),
            ..Self::default()
        }
    }
}

pub(super) fn as_allocations(table: &[rcb_allocation]) -> &[Allocation] {
    // SAFETY: identical layout (checked above), both plain old data.
    unsafe { std::slice::from_raw_parts(table.as_ptr() as *const Allocation, table.len()) }
}

thread_local! {
    /// The handle of the command buffer this thread called last and its place, so that the
    /// next call on it goes straight to the place (see `Place`). No destructor: the place is
    /// never given back, so the address needs no reference count, and a thread that first calls
    /// the library from its own exit registers nothing that would never run.
    static LAST: Cell<(usize, *const Place<CmdBuf>)> = const { Cell::new((0, std::ptr::null())) };
}

/// Runs `f` on the command buffer behind `cb`, with its id (for node handles).
pub(super) fn with(cb: *const rcb_cmdbuf, f: impl FnOnce(usize, &mut CmdBuf) -> Result<()>) -> Result<()> {
    if cb.is_null() {
        return Err(null_argument("cb"));
    }
    let id = cb.addr();
    let (last, place) = LAST.with(Cell::get);
    if last == id && !place.is_null() {
        // SAFETY: a place is never dropped (`register_placed`), so its address stays valid.
        let place = unsafe { &*place };
        // The place may hold another handle's object since (this one was freed): then the
        // registry says what the handle is now.
        if let Some(mut object) = place.lock(id, rcb_cmdbuf::NAME)? {
            return f(id, &mut object);
        }
    }
    let live = live(cb, "cb")?;
    let place: &Place<CmdBuf> = live.shared();
    LAST.with(|last| last.set((id, place)));
    f(id, &mut *locked::<rcb_cmdbuf, _>(place, id)?)
}

/// The host memory the command buffer behind `cb` keeps, by what it holds, with its fixed cost.
fn memory_use(cb: *const rcb_cmdbuf) -> Result<cmdbuf::MemoryUse> {
    let mut used = cmdbuf::MemoryUse::default();
    with(cb, |_, cb| {
        used = cb.memory();
        Ok(())
    })?;
    used.other += FIXED_BYTES as u64;
    // Its place, the box of its struct and its tally.
    used.heap_blocks += 3;
    Ok(used)
}

/// What each command buffer keeps besides what `CmdBuf::memory` counts: its place (two
/// reference counts and the lock, the handle's id and the box of the command buffer's own
/// struct, which is the second heap block), one bucket with its control byte in the registry
/// and one in the set of live ids (the spare buckets of those two tables are shared by every
/// handle and not counted), and its share of the process counters (`counters::Tally`). A freed
/// command buffer's place and tally stay, spare, for the next one.
const FIXED_BYTES: usize = 2 * std::mem::size_of::<usize>()
    + crate::counters::TALLY_BYTES
    + std::mem::size_of::<Place<CmdBuf>>()
    + std::mem::size_of::<CmdBuf>()
    + std::mem::size_of::<(usize, std::sync::Arc<Place<CmdBuf>>)>()
    + 1
    + std::mem::size_of::<usize>()
    + 1;

/// Runs an address update on `cb` and writes its report to `*report` on success.
fn update_reported(
    cb: *mut rcb_cmdbuf,
    report: *mut rcb_update_report,
    update: impl FnOnce(&mut CmdBuf) -> Result<cmdbuf::UpdateReport>,
) -> Result<()> {
    // SAFETY: the caller promises a NULL or writable sized struct.
    let out = unsafe { arg_out_sized(report, "report") }?;
    with(cb, |_, cb| {
        let r = update(cb)?;
        // SAFETY: checked by arg_out_sized.
        unsafe { out.write(rcb_update_report::from(r)) };
        Ok(())
    })
}

fn node_handle(cb: usize, node: NodeId) -> rcb_node {
    ((cb as u64) << 32) | (u64::from(node) + 1)
}

fn node_id(cb: usize, node: rcb_node) -> Result<NodeId> {
    let owner = (node >> 32) as usize;
    let index = node & 0xffff_ffff;
    if owner != cb {
        if owner != 0 && index != 0 && rcb_cmdbuf::registry().contains(owner) {
            return Err(Error::new(ErrorKind::ForeignNode, format!("node {node:#x} belongs to command buffer {owner:#x}, not to {cb:#x}")));
        }
        return Err(Error::invalid_argument(format!("{node:#x} is not a node handle")));
    }
    if index == 0 {
        return Err(Error::invalid_argument(format!("{node:#x} is not a node handle")));
    }
    Ok((index - 1) as NodeId)
}

/// # Safety
/// `deps` must be NULL or point to `ndeps` node handles.
unsafe fn deps_of(id: usize, cb: &CmdBuf, deps: *const rcb_node, ndeps: usize) -> Result<Vec<NodeId>> {
    // SAFETY: forwarded from the caller.
    let deps = unsafe { arg_slice(deps, ndeps, "deps", cb.node_count()) }?;
    deps.iter().map(|&d| node_id(id, d)).collect()
}

/// The part every `rcb_cmdbuf_add_*` shares once `cb` is locked: resolves `deps`, runs `add` and
/// writes the new node's handle to `*node`.
///
/// # Safety
/// `deps` is NULL or points to `ndeps` readable handles; `node` came from [`arg_out`] and points
/// to writable memory for an `rcb_node`.
unsafe fn add_node(
    id: usize,
    cb: &mut CmdBuf,
    deps: *const rcb_node,
    ndeps: usize,
    node: *mut rcb_node,
    add: impl FnOnce(&mut CmdBuf, &[NodeId]) -> Result<NodeId>,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let deps = unsafe { deps_of(id, cb, deps, ndeps) }?;
    let n = add(cb, &deps)?;
    // SAFETY: forwarded from the caller.
    unsafe { write_out(node, node_handle(id, n)) };
    Ok(())
}

/// The body of an `rcb_cmdbuf_add_*` on one command buffer: checks `node`, locks `cb` and runs
/// [`add_node`].
///
/// # Safety
/// `deps` is NULL or points to `ndeps` readable handles; `node` is NULL or writable.
unsafe fn add_to(
    cb: *const rcb_cmdbuf,
    deps: *const rcb_node,
    ndeps: usize,
    node: *mut rcb_node,
    add: impl FnOnce(&mut CmdBuf, &[NodeId]) -> Result<NodeId>,
) -> Result<()> {
    let out = arg_out(node, "node")?;
    // SAFETY: forwarded from the caller; `out` was checked by arg_out.
    with(cb, |id, cb| unsafe { add_node(id, cb, deps, ndeps, out, add) })
}

/// The launch's arguments, still borrowed from C.
struct Launch<'a> {
    function: Function,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    args: Vec<KernelArg<'a>>,
}

/// # Safety
/// `launch` must be NULL or valid, with `num_args` valid arguments whose values are readable.
unsafe fn launch_of<'a>(launch: *const rcb_kernel_launch) -> Result<Launch<'a>> {
    // SAFETY: forwarded from the caller.
    let l = unsafe { arg_sized(launch, "launch") }?;
    if l.function.is_null() {
        return Err(null_argument("launch->function"));
    }
    // SAFETY: forwarded from the caller.
    let raw = unsafe { arg_slice(l.args, l.num_args, "launch->args", cmdbuf::MAX_ARGS) }?;
    let mut args = Vec::with_capacity(raw.len());
    for (i, a) in raw.iter().enumerate() {
        if a.value.is_null() {
            return Err(null_argument(&format!("launch->args[{i}].value")));
        }
        let kind = match a.kind {
            RCB_ARG_VALUE => ArgKind::Value,
            RCB_ARG_DEVICE_PTR => ArgKind::DevicePtr,
            RCB_ARG_SCAN => ArgKind::Scan,
            RCB_ARG_ALLOCATION => {
                if a.size as usize != size_of::<rcb_arg_allocation>() {
                    return Err(Error::invalid_argument(format!(
                        "launch->args[{i}] is an RCB_ARG_ALLOCATION of size {}; it must be sizeof(rcb_arg_allocation) = {}",
                        a.size,
                        size_of::<rcb_arg_allocation>()
                    )));
                }
                // SAFETY: non-null and `size` readable bytes, which is one `rcb_arg_allocation`;
                // read unaligned since C only promises the bytes.
                let named = unsafe { std::ptr::read_unaligned(a.value as *const rcb_arg_allocation) };
                // Within the table limit, so it fits in u32.
                let Some(index) = usize::try_from(named.allocation).ok().filter(|&i| i < cmdbuf::MAX_ALLOCATIONS) else {
                    return Err(Error::invalid_argument(format!(
                        "launch->args[{i}] names allocation {}, past the most a table holds ({})",
                        named.allocation,
                        cmdbuf::MAX_ALLOCATIONS
                    )));
                };
                ArgKind::Allocation { index: index as u32, offset: named.offset }
            }
            k => {
                return Err(Error::invalid_argument(format!(
                    "launch->args[{i}].kind is {k}; expected RCB_ARG_VALUE (0), RCB_ARG_DEVICE_PTR (1), RCB_ARG_SCAN (2) or RCB_ARG_ALLOCATION (3)"
                )));
            }
        };
        if a.size as usize > cmdbuf::args::MAX_BLOB_BYTES {
            return Err(Error::invalid_argument(format!("launch->args[{i}].size {} is too large", a.size)));
        }
        // SAFETY: non-null; the caller promises `size` readable bytes for the call.
        let value = unsafe { std::slice::from_raw_parts(a.value as *const u8, a.size as usize) };
        args.push(KernelArg { value, kind });
    }
    Ok(Launch { function: Function(l.function), grid: l.grid, block: l.block, shared_mem_bytes: l.shared_mem_bytes, args })
}

impl Launch<'_> {
    fn view(&self) -> KernelLaunch<'_> {
        KernelLaunch {
            function: self.function,
            grid: self.grid,
            block: self.block,
            shared_mem_bytes: self.shared_mem_bytes,
            args: &self.args,
        }
    }
}

/// # Safety
/// `launch` must be NULL or point to a readable `rcb_kernel_params_launch`.
unsafe fn params_launch_of(launch: *const rcb_kernel_params_launch) -> Result<KernelParamPointers> {
    // SAFETY: forwarded from the caller.
    let l = unsafe { arg_sized(launch, "launch") }?;
    if l.function.is_null() {
        return Err(null_argument("launch->function"));
    }
    Ok(KernelParamPointers {
        function: Function(l.function),
        grid: l.grid,
        block: l.block,
        shared_mem_bytes: l.shared_mem_bytes,
        params: l.kernel_params,
    })
}

fn memcpy(dst: u64, src: u64, bytes: u64) -> Result<MemcpyParams> {
    let bytes = usize::try_from(bytes).map_err(|_| Error::invalid_argument(format!("memcpy of {bytes} bytes is too large")))?;
    Ok(MemcpyParams { dst, src, bytes })
}

fn new(device: i32, kind: Kind, out: *mut *mut rcb_cmdbuf) -> Result<()> {
    let out = arg_out(out, "out")?;
    // Node handles hold the id in their upper 32 bits, where every id fits (handle.rs).
    let cb = register_placed::<rcb_cmdbuf, _>(CmdBuf::new(runtime::get()?, device, kind)?)?;
    // SAFETY: checked by arg_out.
    unsafe { write_out(out, cb) };
    Ok(())
}

/// Creates a primary command buffer for `device`: it owns a new, empty graph, is instantiated
/// at its first `rcb_cmdbuf_finalize`, can be launched, and applies updates to its executable
/// graph. On success `*out` is a new handle that the caller owns and frees with
/// `rcb_cmdbuf_free`.
///
/// The process's first command buffer (of either kind) settles the update budget (see
/// `rcb_cmdbuf_set_exec_update_budget`): on HIP, unless `RCB_EXEC_UPDATE_BUDGET` is set, it
/// measures what the runtime's executable-graph updates take on the calling thread's current
/// device, with a probe graph of its own (at most 16 384 node updates and 512 readings of free
/// memory; nothing launched), in relaxed capture mode, so that a capture in progress is left
/// alone. Where the runtime cannot relax the thread's capture mode (no
/// `hipThreadExchangeStreamCaptureMode`), nothing is measured and the fixed default applies; so
/// too where the calling thread has a HIP error pending (`hipPeekAtLastError` is not
/// `hipSuccess`), so that no probe call can replace it. A probe call that fails leaves no error
/// behind: the library takes it (`hipGetLastError`), so the caller's next check does not report
/// it. What lasts of a caller's own error depends on the ROCm version: from 6.4 only a failure
/// sets the thread's last error, so the caller's stays, through this call, until
/// `hipGetLastError` takes it; before 6.4 every HIP call sets it, success included, so this
/// call's own HIP calls (the new graph's, before the probe looks) replace it with success, as
/// any HIP call would, and the probe runs. Other threads' first command buffers wait meanwhile,
/// so that every command buffer has the same budget; a child forked during the measurement
/// takes the fixed default at once instead of waiting for ever (HIP itself remains unsupported
/// in a child forked from a parent that had initialised it). `rcb_runtime_load` reports the
/// outcome.
///
/// Thread-safety: any thread.
///
/// # Safety
/// `out` must be NULL or point to writable memory for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_new(device: i32, out: *mut *mut rcb_cmdbuf) -> rcb_status {
    boundary(|| new(device, Kind::Primary, out))
}

/// Creates a nested command buffer for `device`: never instantiated and never launched itself,
/// it is meant to be cloned into another command buffer with `rcb_cmdbuf_add_child`; updates go
/// to its template graph. On success `*out` is a new handle that the caller owns and frees with
/// `rcb_cmdbuf_free`.
///
/// Thread-safety: any thread.
///
/// # Safety
/// `out` must be NULL or point to writable memory for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_new_nested(device: i32, out: *mut *mut rcb_cmdbuf) -> rcb_status {
    boundary(|| new(device, Kind::Nested, out))
}

/// Frees a command buffer with its graph, executable graph and node handles. `cb` is consumed
/// whatever the status: do not use it or its nodes afterwards. `NULL` is a no-op; a freed or
/// unknown handle gives `RCB_STATUS_INVALID_HANDLE`. A capture still in progress is ended and
/// discarded when the free runs on the thread that began it (the runtimes end a thread-local
/// capture only there); on another thread the runtime is not asked, the handle is given back
/// all the same, the stream stays capturing, the status is `RCB_STATUS_RUNTIME_ERROR` (what a
/// free reports for whatever it could not give back) and the message says so: end the
/// capture on the thread that began it (`hipStreamEndCapture` / `cuStreamEndCapture`, then
/// destroy the graph it returns). A capture whose thread has exited can never be ended: the
/// stream captures for as long as it lives.
///
/// Launches of `cb` may still be queued or running: the free never waits on the host and
/// destroys nothing they may use (as CUDA's `cuGraphExecDestroy` of a running executable graph
/// frees it once it completes). The executable graphs, the graphs kept for what flattened and
/// child nodes may read (user objects) and the template go, with the events that follow the
/// launches (see `rcb_cmdbuf_launch`), to a list of the process's that later command-buffer calls
/// (`rcb_cmdbuf_new*`, `rcb_cmdbuf_launch`, `rcb_cmdbuf_finalize`, `rcb_cmdbuf_free`, on any
/// thread; each queries at most 8 of those events) empty as the launches finish; what no launch
/// may use is destroyed at once. What a launch the library could not follow may still use is
/// leaked instead, logged at warn (counted as `RCB_FALLBACK_KEPT_UNTRACKED` when it was kept):
/// call `rcb_cmdbuf_launches_done` before the free, once those launches are synchronized, to have
/// it destroyed. Whatever is still on the list when the process exits is leaked too.
///
/// Two things touch what is on the list after the free, and only leaving nothing there avoids
/// them. A reset of the device (`hipDeviceReset`, `cuDevicePrimaryCtxReset`) destroys its
/// executable graphs, graphs and events under the library, whose later queries and destroys of
/// them would then be calls on dead handles. And on ROCm, querying one of the events while the
/// stream it was recorded on is capturing invalidates that capture; the list's queries come from
/// calls on any command buffer, on any thread, until the library has found the launches
/// finished. So before a device reset, and in a process that begins captures on streams it
/// launched command buffers on, free each command buffer as follows: synchronize the streams it
/// was launched on, call `rcb_cmdbuf_launches_done`, then `rcb_cmdbuf_free`, which then destroys
/// everything at once and puts nothing on the list. Free every command buffer of a device so
/// before resetting it (with `rcb_stream_cache_reset` for its streams); a command buffer freed
/// earlier while its launches ran may still be on the list, whose queries the reset makes
/// unsafe.
///
/// When a runtime call underneath fails (ending the capture, destroying the executable graph or
/// the graph), the rest is still given back and the status is `RCB_STATUS_RUNTIME_ERROR`: the
/// command buffer is released all the same, the message names each failed call (its object is
/// leaked) and, when ending a capture failed, says whether the stream is still capturing (then
/// end its capture before using the stream). A destroy that fails later, on the list, is logged
/// at warn and its object leaked.
///
/// Thread-safety: any thread, not concurrently with other calls on `cb` (a free that races one
/// all the same waits for it to return, then frees); while a capture is in progress, the
/// thread that began it (see above).
///
/// Memory: the few bytes that hold a command buffer's place (its lock and the box of its
/// struct, about 48) are kept for the next command buffer, so a process keeps them for as many
/// command buffers as it ever had at once.
///
/// # Safety
/// `cb` must be NULL or a handle from `rcb_cmdbuf_new*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_free(cb: *mut rcb_cmdbuf) -> rcb_status {
    boundary(|| match take_placed(cb)? {
        Some(cb) => cb.destroy().into_result("the command buffer"),
        None => Ok(()),
    })
}

/// Sets the allocation table: `allocs[i]` is allocation `i` (`n` entries, at most
/// `RCB_MAX_ALLOCATIONS`; NULL allowed when `n` is 0), copied. Every address recorded so far and
/// from now on that lies inside an allocation, or is a kernel's pointer one past the end of one,
/// becomes a patch site of it (of all of them when it may come from several: see
/// `rcb_allocation`), and the addresses that cloned child nodes may reference are mapped to the
/// new table (see `rcb_cmdbuf_add_child`; an address one past an allocation's end pins that
/// allocation too). A pointer recorded with `RCB_ARG_ALLOCATION` stays a site of the allocation
/// it names while the new table agrees (that allocation exists and holds the pointer's address
/// at its offset); otherwise it is matched by its address like any other. A pointer named at
/// its allocation's end keeps its name only in this command buffer: a parent that clones or
/// flattens it matches the address, ambiguous with an allocation that starts there.
/// Allowed while recording or updating (re-recording starts with this call).
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `allocs` NULL or `n` readable entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_set_allocations(cb: *mut rcb_cmdbuf, allocs: *const rcb_allocation, n: usize) -> rcb_status {
    boundary(|| {
        with(cb, |_, cb| {
            // SAFETY: forwarded from the caller.
            let table = unsafe { arg_slice(allocs, n, "allocs", cmdbuf::MAX_ALLOCATIONS) }?;
            cb.set_allocations(as_allocations(table))
        })
    })
}

/// Adds a kernel node after the `ndeps` nodes in `deps` (NULL allowed when `ndeps` is 0; at most
/// the node count). The arguments are packed into one blob owned by the node (see
/// `rcb_kernel_arg`); `launch` and everything it points to is borrowed for the call only. Each
/// `RCB_ARG_DEVICE_PTR` argument inside an allocation becomes a patch site, and so does each
/// aligned 8-byte word of an `RCB_ARG_SCAN` argument that holds such an address. `*node` is
/// written on success. Recording state only.
///
/// A kernel on `RCB_OPAQUE_KERNELS` (by default NCCL's, RCCL's and MSCCL's, recognised by the
/// name the runtime gives `launch->function`) may read addresses the library cannot see: none
/// of its arguments is a patch site, whatever its kind, and while its node is in `cb` no
/// allocation of `cb` moves in place (`RCB_FALLBACK_OPAQUE_KERNEL`). Where the runtime cannot
/// name the function, the kernel is taken as not on the list.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// Pointers must be NULL or valid as described.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_add_kernel(
    cb: *mut rcb_cmdbuf,
    deps: *const rcb_node,
    ndeps: usize,
    launch: *const rcb_kernel_launch,
    node: *mut rcb_node,
) -> rcb_status {
    boundary(|| {
        let add = |cb: &mut CmdBuf, deps: &[NodeId]| {
            // SAFETY: forwarded from the caller: `launch` is null or a readable `rcb_kernel_launch` whose arrays are valid.
            let launch = unsafe { launch_of(launch) }?;
            cb.add_kernel(deps, &launch.view())
        };
        // SAFETY: forwarded from the caller.
        unsafe { add_to(cb, deps, ndeps, node, add) }
    })
}

/// Adds a kernel node whose argument sizes are unknown after `deps` (as for
/// `rcb_cmdbuf_add_kernel`): the runtime's `kernelParams` path (`hipGraphAddKernelNode` with
/// `kernelParams = launch->kernel_params` and `extra = NULL`), so the runtime copies the
/// arguments through the pointers during this call, using the kernel's metadata. `launch`, the
/// pointer array and the values it points to are borrowed for the call only; the library keeps
/// no copy and never reads them back. `*node` is written on success. Recording state only.
///
/// The library cannot see the node's addresses: it has no patch sites and its references are
/// unknown, so while it exists `rcb_cmdbuf_update_allocations` and `rcb_cmdbuf_move_allocations`
/// refuse every update that moves at least one allocation (`RCB_OK`, `needs_rerecord = 1`,
/// nothing changed), and so does a parent that clones this command buffer as a child (a kernel on
/// `RCB_OPAQUE_KERNELS` is named in the refusal, counted as `RCB_FALLBACK_OPAQUE_KERNEL`).
/// Re-record it with `rcb_cmdbuf_update_kernel_params`. Prefer `rcb_cmdbuf_add_kernel` with
/// `RCB_ARG_SCAN` arguments when the sizes are known.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// Pointers must be NULL or valid as described; `launch->kernel_params` must hold one readable
/// pointer per kernel argument, each to a value of the argument's size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_add_kernel_params(
    cb: *mut rcb_cmdbuf,
    deps: *const rcb_node,
    ndeps: usize,
    launch: *const rcb_kernel_params_launch,
    node: *mut rcb_node,
) -> rcb_status {
    boundary(|| {
        let add = |cb: &mut CmdBuf, deps: &[NodeId]| {
            // SAFETY: forwarded from the caller: `launch` is null or a readable launch whose arrays are valid.
            let launch = unsafe { params_launch_of(launch) }?;
            cb.add_kernel_params(deps, &launch)
        };
        // SAFETY: forwarded from the caller.
        unsafe { add_to(cb, deps, ndeps, node, add) }
    })
}

/// Adds a device-to-device copy of `bytes` (> 0) bytes from `src` to `dst` after `deps` (as for
/// `rcb_cmdbuf_add_kernel`). `dst` and `src` inside allocations become patch sites. `*node` is
/// written on success. Recording state only.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// Pointers must be NULL or valid as described.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_add_memcpy_d2d(
    cb: *mut rcb_cmdbuf,
    deps: *const rcb_node,
    ndeps: usize,
    dst: u64,
    src: u64,
    bytes: u64,
    node: *mut rcb_node,
) -> rcb_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        unsafe { add_to(cb, deps, ndeps, node, |cb, deps| cb.add_memcpy(deps, memcpy(dst, src, bytes)?)) }
    })
}

/// Adds a memset of `count` (> 0) elements of `element_size` bytes (1, 2 or 4) at `dst`, each
/// set to `pattern` (which must fit in `element_size` bytes), after `deps`. `dst` inside an
/// allocation becomes a patch site. `*node` is written on success. Recording state only.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// Pointers must be NULL or valid as described.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_add_memset(
    cb: *mut rcb_cmdbuf,
    deps: *const rcb_node,
    ndeps: usize,
    dst: u64,
    pattern: u32,
    element_size: u32,
    count: u64,
    node: *mut rcb_node,
) -> rcb_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        unsafe { add_to(cb, deps, ndeps, node, |cb, deps| cb.add_memset(deps, Memset { dst, pattern, element_size, count })) }
    })
}

/// Adds an empty node (a join point) after `deps`. `*node` is written on success. Recording
/// state only.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// Pointers must be NULL or valid as described.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_add_empty(cb: *mut rcb_cmdbuf, deps: *const rcb_node, ndeps: usize, node: *mut rcb_node) -> rcb_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        unsafe { add_to(cb, deps, ndeps, node, |cb, deps| cb.add_empty(deps)) }
    })
}

/// Locks two command buffers in the order of their places' addresses, which never change (so
/// two threads embedding each other's buffers cannot deadlock; a place holds different handles
/// over its life, so the handles' order would not do), and runs `f(parent, child)`.
fn with_pair(cb: *const rcb_cmdbuf, child: *const rcb_cmdbuf, f: impl FnOnce(usize, &mut CmdBuf, &mut CmdBuf) -> Result<()>) -> Result<()> {
    let parent = live(cb, "cb")?;
    let child = live(child, "child")?;
    let (id, child_id) = (parent.id(), child.id());
    if id == child_id {
        return Err(Error::invalid_argument("a command buffer cannot be its own child"));
    }
    let (parent_place, child_place) = (parent.shared(), child.shared());
    // A place holds one handle at a time: one of the two was freed since it was looked up, and
    // locking the place twice would wait forever.
    if Arc::ptr_eq(parent_place, child_place) {
        let stale = if parent_place.lock(id, rcb_cmdbuf::NAME)?.is_some() { child_id } else { id };
        return Err(super::handle::not_live::<rcb_cmdbuf>(stale));
    }
    let parent_first = Arc::as_ptr(parent_place) < Arc::as_ptr(child_place);
    let ((first, first_id), (second, second_id)) =
        if parent_first { ((parent_place, id), (child_place, child_id)) } else { ((child_place, child_id), (parent_place, id)) };
    let mut first = locked::<rcb_cmdbuf, _>(first, first_id)?;
    let mut second = locked::<rcb_cmdbuf, _>(second, second_id)?;
    let (p, c) = if parent_first { (&mut *first, &mut *second) } else { (&mut *second, &mut *first) };
    f(id, p, c)
}

/// Adds a child node holding a clone of `child`'s graph (a finalized command buffer, usually a
/// nested one) after `deps`. `child` is borrowed for the call and stays owned by the caller; later
/// changes to it do not reach the clone (use `rcb_cmdbuf_update_child`). `*node` is written on
/// success. Recording state only.
///
/// Addresses inside the clone are not patch sites of `cb`; they pin allocations instead. The
/// node's reference set is every address `child`'s nodes hold where a pointer may be
/// (`RCB_ARG_DEVICE_PTR` arguments, every aligned word of `RCB_ARG_SCAN` arguments, memcpy
/// source and destination, memset destination), whether or not `child` has an allocation table,
/// plus the reference sets of `child`'s own child nodes. `cb` maps them to its allocations now
/// and again on every `rcb_cmdbuf_set_allocations`; `rcb_cmdbuf_update_allocations` and
/// `rcb_cmdbuf_move_allocations` then refuse to move any allocation they lie in or end at
/// (which of them were kernel arguments, so maybe end pointers, is not kept): `RCB_OK`,
/// `needs_rerecord = 1`, nothing changed, instead of leaving the clone stale. The reference set
/// is unknown, so that ANY move is refused while the node exists, when `child`'s graph came from
/// capture, when `child` holds a child node with unknown references or a kernel node added with
/// `rcb_cmdbuf_add_kernel_params`, or when `child`'s template lags behind its executable graph (a
/// child node updated in place, a failed address update not yet repaired).
///
/// Thread-safety: one thread at a time per command buffer; `child` must not be used by another
/// thread during the call.
///
/// # Safety
/// Pointers must be NULL or valid as described.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_add_child(
    cb: *mut rcb_cmdbuf,
    deps: *const rcb_node,
    ndeps: usize,
    child: *const rcb_cmdbuf,
    node: *mut rcb_node,
) -> rcb_status {
    boundary(|| {
        let out = arg_out(node, "node")?;
        with_pair(cb, child, |id, cb, child| {
            // SAFETY: forwarded from the caller; `out` was checked by arg_out.
            unsafe { add_node(id, cb, deps, ndeps, out, |cb, deps| cb.add_child(deps, child)) }
        })
    })
}

/// Adds a child node holding a clone of the raw graph `graph` (a `hipGraph_t`, borrowed for the
/// call; the caller keeps owning it) after `deps`. `*node` is written on success. Recording
/// state only.
///
/// The library does not know what the clone points into: while the node exists,
/// `rcb_cmdbuf_update_allocations` and `rcb_cmdbuf_move_allocations` refuse every update that
/// moves at least one allocation (`RCB_OK`, `needs_rerecord = 1`, nothing changed). To keep
/// in-place moves, flatten the graph instead (`rcb_cmdbuf_add_flattened_child`). The graph's
/// kernel nodes (its child graphs' included) are read for their names: where one is on
/// `RCB_OPAQUE_KERNELS` the refusal is counted as `RCB_FALLBACK_OPAQUE_KERNEL` and names it.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// Pointers must be NULL or valid as described; `graph` must be a live graph.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_add_child_graph(
    cb: *mut rcb_cmdbuf,
    deps: *const rcb_node,
    ndeps: usize,
    graph: *mut c_void,
    node: *mut rcb_node,
) -> rcb_status {
    boundary(|| {
        if graph.is_null() {
            return Err(null_argument("graph"));
        }
        // SAFETY: forwarded from the caller.
        unsafe { add_to(cb, deps, ndeps, node, |cb, deps| cb.add_child_graph(deps, Graph(graph))) }
    })
}

/// Replaces the launch of kernel node `node` (function, dimensions and arguments may all
/// change) and sends it to the runtime at once; its patch sites, scanned words included, are
/// replaced by those of the new arguments. Updating state only. On failure the node keeps its
/// previous parameters.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// Pointers must be NULL or valid as described for `rcb_cmdbuf_add_kernel`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_update_kernel(cb: *mut rcb_cmdbuf, node: rcb_node, launch: *const rcb_kernel_launch) -> rcb_status {
    boundary(|| {
        with(cb, |id, cb| {
            let n = node_id(id, node)?;
            // SAFETY: forwarded from the caller.
            let launch = unsafe { launch_of(launch) }?;
            cb.update_kernel(n, &launch.view())
        })
    })
}

/// Replaces the launch of kernel node `node`, which must have been added with
/// `rcb_cmdbuf_add_kernel_params` (any other node gives `RCB_STATUS_INVALID_ARGUMENT` naming
/// it); function, dimensions and arguments may all change. The runtime copies the arguments
/// through `launch->kernel_params` during the call, into the executable graph of a primary
/// command buffer (`hipGraphExecKernelNodeSetParams`) or the template of a nested one
/// (`hipGraphKernelNodeSetParams`). A primary's template gets them too, right after (the library
/// keeps no copy to bring it up to date later); if only that second call fails, the call still
/// succeeds (the executable graph has the update) and the failure is logged at warn. Updating
/// state only. On failure the node keeps its previous parameters. The node's references stay
/// unknown.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// Pointers must be NULL or valid as described for `rcb_cmdbuf_add_kernel_params`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_update_kernel_params(
    cb: *mut rcb_cmdbuf,
    node: rcb_node,
    launch: *const rcb_kernel_params_launch,
) -> rcb_status {
    boundary(|| {
        with(cb, |id, cb| {
            let n = node_id(id, node)?;
            // SAFETY: forwarded from the caller.
            let launch = unsafe { params_launch_of(launch) }?;
            cb.update_kernel_params(n, &launch)
        })
    })
}

/// Replaces the operands of memcpy node `node` (as for `rcb_cmdbuf_add_memcpy_d2d`). Updating
/// state only. On failure the node keeps its previous parameters.
///
/// Where the executable graph's memcpy setter cannot take the new operands in place (CUDA: they
/// lie in another kind of allocation, on another device or, for `cuMemAlloc` and managed
/// memory, in another context than those the node was instantiated with; any runtime: the
/// setter refuses them), the template takes them and the executable graph
/// is re-instantiated (read `rcb_cmdbuf_exec` again). Where that is not possible now (the
/// conditions of `RCB_FALLBACK_REINSTANTIATE_BLOCKED`) the call fails with
/// `RCB_STATUS_UNSUPPORTED` and nothing changed; should the instantiation itself fail, its status
/// is returned and launches are refused until the node is re-recorded.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_update_memcpy_d2d(cb: *mut rcb_cmdbuf, node: rcb_node, dst: u64, src: u64, bytes: u64) -> rcb_status {
    boundary(|| with(cb, |id, cb| cb.update_memcpy(node_id(id, node)?, memcpy(dst, src, bytes)?)))
}

/// Replaces the parameters of memset node `node` (as for `rcb_cmdbuf_add_memset`). Updating
/// state only. On failure the node keeps its previous parameters.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_update_memset(
    cb: *mut rcb_cmdbuf,
    node: rcb_node,
    dst: u64,
    pattern: u32,
    element_size: u32,
    count: u64,
) -> rcb_status {
    boundary(|| with(cb, |id, cb| cb.update_memset(node_id(id, node)?, Memset { dst, pattern, element_size, count })))
}

/// Gives child node `node` of a primary command buffer the graph of `child` (a finalized command
/// buffer with the same topology as the one the node was added with), in the executable graph.
/// Updating state only. A child node of a nested command buffer cannot be updated in place
/// (`RCB_STATUS_UNSUPPORTED`: the runtime has no template setter for child graphs). `child` is
/// borrowed for the call. The node's reference set (see `rcb_cmdbuf_add_child`) becomes
/// `child`'s. The template of `cb` keeps the old clone, so a clone of `cb` itself (as a child of
/// another command buffer) has unknown references from then on.
///
/// What the update replaces (the node's previous clone and the graphs kept for what it reads) is
/// destroyed once every launch that may use it has finished. What a launch the library could not
/// follow with an event (see `rcb_cmdbuf_launch`) may use is kept instead, never destroyed while
/// the command buffer lives, unless `rcb_cmdbuf_launches_done` says the launches have finished;
/// no update is refused for it.
///
/// Thread-safety: one thread at a time per command buffer; `child` must not be used by another
/// thread during the call.
///
/// # Safety
/// Handles must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_update_child(cb: *mut rcb_cmdbuf, node: rcb_node, child: *const rcb_cmdbuf) -> rcb_status {
    boundary(|| {
        with_pair(cb, child, |id, cb, child| {
            let n = node_id(id, node)?;
            cb.update_child(n, child)
        })
    })
}

/// Gives child node `node` of a primary command buffer a clone of the raw graph `graph` (a
/// `hipGraph_t` / `CUgraph` with the same topology as the graph the node holds; borrowed for the
/// call, still owned by the caller), in the executable graph. The counterpart of
/// `rcb_cmdbuf_add_child_graph` for the updating state; the node's references stay unknown
/// (moves are refused while it exists). A child node of a nested command buffer cannot be
/// updated in place (`RCB_STATUS_UNSUPPORTED`). On failure the node keeps its graph.
///
/// What the update replaces (the node's previous clone and the graphs kept for what it reads) is
/// destroyed once every launch that may use it has finished; what a launch the library could not
/// follow may use is kept instead, and no update is refused for it (see
/// `rcb_cmdbuf_update_child`).
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `graph` NULL or a live graph.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_update_child_graph(cb: *mut rcb_cmdbuf, node: rcb_node, graph: *mut c_void) -> rcb_status {
    boundary(|| {
        if graph.is_null() {
            return Err(null_argument("graph"));
        }
        with(cb, |id, cb| {
            let n = node_id(id, node)?;
            cb.update_child_graph(n, Graph(graph))
        })
    })
}

/// Starts capturing `stream` (a `hipStream_t`, borrowed until `rcb_cmdbuf_capture_end`) in
/// thread-local mode. Only a recording command buffer with no nodes yet can capture. Between
/// the two calls, only `rcb_cmdbuf_capture_end` (or `rcb_cmdbuf_free`) is allowed on `cb`; every
/// other call, reads included (`rcb_cmdbuf_graph`, `rcb_cmdbuf_exec`, `rcb_cmdbuf_node_count`,
/// `rcb_cmdbuf_site_count`), returns `RCB_STATUS_INVALID_STATE`.
///
/// Thread-safety: the capture belongs to the calling thread; end it on the same thread
/// (`rcb_cmdbuf_capture_end` or `rcb_cmdbuf_free`), before that thread exits: the runtimes end a
/// thread-local capture only on the thread that began it, so one left open by a thread that has
/// exited leaves `stream` capturing for as long as it lives.
///
/// # Safety
/// `cb` must be NULL or a handle; `stream` a live stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_capture_begin(cb: *mut rcb_cmdbuf, stream: *mut c_void) -> rcb_status {
    boundary(|| with(cb, |_, cb| cb.capture_begin(Stream(stream))))
}

/// Ends the capture: the captured graph becomes the command buffer's graph (the previous, empty
/// one is destroyed) and the command buffer is recording again.
///
/// When the runtime fails to end the capture, the status is its error, the graph is unchanged,
/// and the message says what the stream was left in. While it is still capturing (or the
/// runtime cannot say), the command buffer stays capturing, so that `rcb_cmdbuf_capture_end`
/// again or `rcb_cmdbuf_free` ends it; when the runtime ended the capture anyway, the stream is
/// usable and the command buffer is recording again with nothing captured. Called on another
/// thread than the one that began the capture, it returns `RCB_STATUS_INVALID_STATE` without
/// asking the runtime (HIP would keep the capture, CUDA would end it and drop what it
/// captured): the capture is kept, and the message says that only that thread can end it.
///
/// Addresses inside a captured graph are not patch sites and the library does not know them:
/// `rcb_cmdbuf_update_allocations` and `rcb_cmdbuf_move_allocations` on this command buffer refuse
/// every update that moves at least one allocation (`RCB_OK`, `needs_rerecord = 1`, nothing
/// changed; capture again into a new command buffer), and a child cloned from it
/// (`rcb_cmdbuf_add_child`) makes its parent refuse likewise.
///
/// Thread-safety: the thread that began the capture.
///
/// # Safety
/// `cb` must be NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_capture_end(cb: *mut rcb_cmdbuf) -> rcb_status {
    boundary(|| with(cb, |_, cb| cb.capture_end()))
}

/// Finalizes recording or an update. The first finalize adds one empty node to an empty graph
/// (nothing empty is ever instantiated) and instantiates a primary command buffer; a finalize
/// after an update pushes any node a failed address update left behind, and re-instantiates only
/// when that push would pass the update budget (see `rcb_cmdbuf_set_exec_update_budget`) or a
/// memcpy node among them cannot take its operands in place (`RCB_FALLBACK_MEMCPY_NOT_IN_PLACE`;
/// `RCB_STATUS_UNSUPPORTED` when re-instantiating is not possible now: finalize again later, or
/// re-record).
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_finalize(cb: *mut rcb_cmdbuf) -> rcb_status {
    boundary(|| with(cb, |_, cb| cb.finalize()))
}

/// Moves a finalized command buffer to the updating state, where `rcb_cmdbuf_update_*` re-record
/// existing nodes (in any order) until `rcb_cmdbuf_finalize`.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_begin_update(cb: *mut rcb_cmdbuf) -> rcb_status {
    boundary(|| with(cb, |_, cb| cb.begin_update()))
}

/// Launches a finalized primary command buffer on `stream` (a `hipStream_t`, borrowed for the
/// call; NULL is the default stream). A nested or unfinalized one gives
/// `RCB_STATUS_INVALID_STATE`, as does one with nodes left stale by a failed address update, and
/// a `stream` that is capturing (CUDA refuses such a launch and invalidates the capture; ROCm
/// would run the executable graph's work on the stream, outside the capture).
///
/// An event of the library's, made on `stream`'s device (`hipStreamGetDevice` from ROCm 5.6,
/// `cuStreamGetCtx`; else the command buffer's device), is recorded on `stream` right after the
/// launch, so that what an update replaces, and what `rcb_cmdbuf_free` gives up, is destroyed
/// only once this launch has finished; those events are queried, never waited on, by later
/// launches, updates and frees. Each launch has an event of its own, used again only once it has
/// completed: a stream handle proves nothing about an earlier launch (`hipStreamPerThread` and
/// the default stream name another stream on another thread or device, and a destroyed stream's
/// address may be reused), so any number of streams and launches in flight are followed.
///
/// A launch no event can follow (the event's creation or record fails, the launch itself fails,
/// which may leave part of its work queued, or the runtime cannot say whether `stream` is
/// capturing) is made or reported all the same, and nothing is ever refused for it: what it may
/// use (the executable graph and the graphs in service at the time) is kept instead of destroyed
/// when an update replaces it, and leaked by `rcb_cmdbuf_free`, logged once at warn and counted
/// as `RCB_FALLBACK_KEPT_UNTRACKED` per object, until `rcb_cmdbuf_launches_done` says the
/// launches have finished. What is put in service after it is followed as usual. At most two
/// executable graphs are kept so: then the update budget stops re-instantiating and updates go
/// to the live executable graph in place (`RCB_FALLBACK_REINSTANTIATE_BLOCKED`), so launches
/// that are never followed (every event record failing) keep a bounded number.
///
/// The library records and queries its events with the calling thread in relaxed capture mode
/// (`hipThreadExchangeStreamCaptureMode` from ROCm 5.0, `cuThreadExchangeStreamCaptureMode`), so
/// a capture in progress on another thread, or on the calling thread on another stream, is left
/// alone; a runtime without that call would fail the query and invalidate every global-mode
/// capture in the process and the calling thread's own captures. One case remains: on ROCm a
/// query of an event whose last record was into a stream that is now capturing invalidates that
/// capture, so do not begin a capture on a stream this command buffer was launched on while
/// launching or updating it. After `rcb_cmdbuf_free` the same holds for any thread's calls on any
/// command buffer: they may query the freed one's events until they find its launches finished
/// (see `rcb_cmdbuf_free`, which says how to free so that nothing is left to query).
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `stream` NULL or a live stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_launch(cb: *mut rcb_cmdbuf, stream: *mut c_void) -> rcb_status {
    boundary(|| with(cb, |_, cb| cb.launch(Stream(stream))))
}

/// The caller's promise that every launch of `cb` so far has finished: it synchronized each
/// stream `cb` was launched on (each thread's own for `hipStreamPerThread` and the default
/// streams) after the last launch. What waits for those launches is destroyed now, what is kept
/// for a launch the library could not follow included (see `rcb_cmdbuf_launch`), and the library
/// follows the launches made afterwards as usual. A broken promise lets the runtime destroy an
/// executable graph or graph that a launch still uses. Optional: without it, what is kept stays
/// until `rcb_cmdbuf_free`, which leaks it. A failed destroy is logged at warn and tried again by
/// the free. Allowed in every state; a command buffer never launched has nothing to give up.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_launches_done(cb: *mut rcb_cmdbuf) -> rcb_status {
    boundary(|| {
        with(cb, |_, cb| {
            cb.launches_done();
            Ok(())
        })
    })
}

/// Writes the command buffer's template graph (`hipGraph_t`) to `*graph`. It is borrowed: owned
/// by the command buffer, valid until `rcb_cmdbuf_free` (a graph obtained before
/// `rcb_cmdbuf_capture_begin` only until `rcb_cmdbuf_capture_end`, which replaces and destroys
/// it); do not destroy or change it. During a capture: `RCB_STATUS_INVALID_STATE`. For a primary
/// command buffer, updates made to the executable graph are first copied to the template's
/// kernel, memcpy and memset nodes.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `graph` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_graph(cb: *mut rcb_cmdbuf, graph: *mut *mut c_void) -> rcb_status {
    boundary(|| {
        let out = arg_out(graph, "graph")?;
        with(cb, |_, cb| {
            let g = cb.graph()?;
            // SAFETY: checked by arg_out.
            unsafe { write_out(out, g.0) };
            Ok(())
        })
    })
}

/// Writes the executable graph (`hipGraphExec_t`) of a finalized primary command buffer to
/// `*exec`; borrowed, owned by the command buffer until `rcb_cmdbuf_free` or until an update
/// replaces it because of the update budget (`rcb_update_report.reinstantiated`; any update or
/// finalize may): read it again after each. Launch through `rcb_cmdbuf_launch`: a replaced
/// executable graph is kept until the launches made there have finished, not launches made
/// directly. A nested or never-finalized one gives `RCB_STATUS_INVALID_STATE`, as does a capture
/// in progress.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `exec` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_exec(cb: *mut rcb_cmdbuf, exec: *mut *mut c_void) -> rcb_status {
    boundary(|| {
        let out = arg_out(exec, "exec")?;
        with(cb, |_, cb| {
            let e = cb.exec()?;
            // SAFETY: checked by arg_out.
            unsafe { write_out(out, e.0) };
            Ok(())
        })
    })
}

/// Moves allocations of a finalized command buffer in place. `allocs` is the new table (`n`
/// entries, borrowed for the call); entry `i` is compared with the recorded entry `i`. For each
/// allocation whose base changed, every patch site gets the new base plus its offset; each
/// touched node is then sent to the runtime once (executable graph of a primary command
/// buffer, template of a nested one) and the recorded table becomes `allocs`. Cost: one
/// comparison per entry plus the sites of the moved allocations, plus, when some recorded
/// address may come from several allocations, the sets of such allocations that a moved
/// allocation belongs to; no scan of the nodes.
///
/// Returns `RCB_OK` with `report->needs_rerecord = 1` when it cannot be done in place:
/// - a different `n` or a changed size: nothing changed;
/// - a moved allocation may be referenced by a node whose addresses are not patch sites (a
///   child node cloned with `rcb_cmdbuf_add_child` whose reference set lies in it), or at least
///   one allocation moved while the command buffer holds a node whose references are unknown (a
///   raw child graph, a child cloned from a captured or otherwise opaque command buffer, a kernel
///   node added with `rcb_cmdbuf_add_kernel_params`) or its graph came from capture: nothing
///   changed, the reason is logged at debug level;
/// - an address recorded that may come from several allocations of the table (see
///   `rcb_allocation`) that do not all move by the same amount: nothing changed (fallback reason
///   `RCB_FALLBACK_OVERLAPPING_ALLOCATIONS`);
/// - a memcpy node that cannot take its new operands in place (on CUDA an operand moved to
///   another kind of allocation, `cuMemAlloc` or managed memory on one side and virtual-memory
///   mappings or pool allocations on the other, or to another device or context), when the executable graph
///   cannot be re-instantiated now either (the conditions of
///   `RCB_FALLBACK_REINSTANTIATE_BLOCKED`): nothing changed (fallback reason
///   `RCB_FALLBACK_MEMCPY_NOT_IN_PLACE`). Where it can, the update re-instantiates instead of
///   pushing (`report->reinstantiated = 1`);
/// - a runtime call failing part-way (logged at warn; the table and the library's copy of the
///   parameters are the new ones, the nodes not yet sent are kept aside and launches are refused
///   until they are re-recorded or sent by the next `rcb_cmdbuf_finalize` or update). A memcpy
///   setter that refuses its node's new operands is repaired by re-instantiating where that is
///   possible (`report->reinstantiated = 1`, no re-record).
///
/// An update in which nothing moved is never refused. `*report` is written on success.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `allocs` NULL or `n` readable entries; `report` NULL or
/// a sized struct writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_update_allocations(
    cb: *mut rcb_cmdbuf,
    allocs: *const rcb_allocation,
    n: usize,
    report: *mut rcb_update_report,
) -> rcb_status {
    boundary(|| {
        update_reported(cb, report, |cb| {
            // SAFETY: forwarded from the caller.
            let table = unsafe { arg_slice(allocs, n, "allocs", cmdbuf::MAX_ALLOCATIONS) }?;
            cb.update_allocations(as_allocations(table))
        })
    })
}

/// `rcb_cmdbuf_update_allocations` given only what moved: `moves` (`n` entries, borrowed for
/// the call) names allocations of the recorded table and their new bases, in any order; the
/// other allocations stay where they are. Cost: the moves plus the sites of the moved
/// allocations, independent of the table's and the graph's size. A size cannot change here
/// (re-record for that).
///
/// Fails with `RCB_STATUS_INVALID_ARGUMENT`, changing nothing, when an index is outside the
/// table, an allocation is named twice or a new range runs past the address space. An entry
/// that keeps its base is not counted as moved. A move that nodes the library cannot patch may
/// see, an ambiguous address whose allocations part, or a runtime call failing part-way, gives
/// `RCB_OK` with `report->needs_rerecord = 1`,
/// exactly as for `rcb_cmdbuf_update_allocations`. `*report` is written on success.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `moves` NULL or `n` readable entries; `report` NULL or
/// a sized struct writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_move_allocations(
    cb: *mut rcb_cmdbuf,
    moves: *const rcb_allocation_move,
    n: usize,
    report: *mut rcb_update_report,
) -> rcb_status {
    boundary(|| {
        update_reported(cb, report, |cb| {
            // SAFETY: forwarded from the caller.
            let moves = unsafe { arg_slice(moves, n, "moves", cmdbuf::MAX_ALLOCATIONS) }?;
            cb.move_allocations(as_moves(moves))
        })
    })
}

/// Writes the number of nodes recorded through this API (a captured graph's own nodes are not
/// counted) to `*count`. During a capture: `RCB_STATUS_INVALID_STATE`.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `count` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_node_count(cb: *mut rcb_cmdbuf, count: *mut usize) -> rcb_status {
    boundary(|| {
        let out = arg_out(count, "count")?;
        with(cb, |_, cb| {
            cb.allow_read()?;
            // SAFETY: checked by arg_out.
            unsafe { write_out(out, cb.node_count()) };
            Ok(())
        })
    })
}

/// Writes the number of patch sites (recorded addresses inside an allocation) to `*count`.
/// During a capture: `RCB_STATUS_INVALID_STATE`.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `count` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_site_count(cb: *mut rcb_cmdbuf, count: *mut usize) -> rcb_status {
    boundary(|| {
        let out = arg_out(count, "count")?;
        with(cb, |_, cb| {
            cb.allow_read()?;
            // SAFETY: checked by arg_out.
            unsafe { write_out(out, cb.site_count()) };
            Ok(())
        })
    })
}

/// Writes the host memory the command buffer keeps, by what it holds, to `*out` (see
/// `rcb_memory_use`): for a process that keeps many command buffers, what each costs it besides
/// the GPU runtime's graphs. Allowed in any state; costs a walk over the nodes.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `out` NULL or writable for `out->struct_size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_memory_use(cb: *const rcb_cmdbuf, out: *mut rcb_memory_use) -> rcb_status {
    boundary(|| {
        // SAFETY: the caller promises a NULL or writable sized struct.
        let out = unsafe { arg_out_sized(out, "out") }?;
        let used = memory_use(cb)?;
        // SAFETY: checked by arg_out_sized.
        unsafe { out.write(used.into()) };
        Ok(())
    })
}

/// Sets the update budget of a primary command buffer's executable graph, in bytes (0: never
/// re-instantiate), replacing its default (`RCB_EXEC_UPDATE_BUDGET` when set; else 64 MiB on a
/// HIP runtime from ROCm 6.2, whose executable graphs keep the kernel-argument memory of every
/// update until they are destroyed, and 0 before 6.2 and on CUDA, whose updates take none,
/// unless the first command buffer measured growth).
///
/// What is counted: each node parameter push to the executable graph (an address update's
/// touched nodes, `rcb_cmdbuf_update_*`, a child graph's nodes) is charged its kernel-argument
/// bytes plus a per-node estimate of the runtime's staging overhead (5 920 bytes, from ROCm's
/// published measurement; see docs/cmdbuf.md). Before a push would pass the budget, the library
/// brings the template graph up to date from its own copies of the parameters, instantiates it
/// (`rcb_update_report.reinstantiated` says so for an address update; `rcb_counters` counts
/// each) and destroys the old executable graph once everything launched from it has finished,
/// in stream order, without waiting on the host (an event follows each launch, see
/// `rcb_cmdbuf_launch`). At most two old executable graphs wait at a time: past that the update
/// goes to the live executable graph in place (`RCB_FALLBACK_REINSTANTIATE_BLOCKED`) until one is
/// destroyed. Old executable graphs that a launch the library could not follow may use are kept
/// and do not count towards the two.
///
/// Allowed before the first `rcb_cmdbuf_finalize` only (`RCB_STATUS_INVALID_STATE` after it, and
/// for a nested command buffer, which has no executable graph).
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_set_exec_update_budget(cb: *mut rcb_cmdbuf, bytes: u64) -> rcb_status {
    boundary(|| with(cb, |_, cb| cb.set_exec_update_budget(bytes)))
}

/// Writes the update budget of the command buffer's executable graph (bytes, 0: never
/// re-instantiated; 0 for a nested command buffer) to `*budget` and what its updates are
/// estimated to have taken since it was instantiated to `*spent`.
///
/// Thread-safety: one thread at a time per command buffer.
///
/// # Safety
/// `cb` must be NULL or a handle; `budget` and `spent` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_exec_update_budget(cb: *mut rcb_cmdbuf, budget: *mut u64, spent: *mut u64) -> rcb_status {
    boundary(|| {
        let budget_out = arg_out(budget, "budget")?;
        let spent_out = arg_out(spent, "spent")?;
        with(cb, |_, cb| {
            let (limit, used) = cb.exec_update_budget();
            // SAFETY: checked by arg_out.
            unsafe {
                write_out(budget_out, limit);
                write_out(spent_out, used);
            }
            Ok(())
        })
    })
}

/// Longest fallback reason `rcb_flatten_report.reason` holds, terminating NUL included.
pub const RCB_FLATTEN_REASON_LEN: usize = 256;

/// What `rcb_cmdbuf_add_flattened_child` did.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct rcb_flatten_report {
    /// In: `sizeof(rcb_flatten_report)`; out: the bytes written (the rule for sized structs).
    pub struct_size: u32,
    /// 1: the child's nodes were re-created in the parent. 0: the child became one cloned child
    /// node and `reason` says why; its addresses are then not patch sites and it pins
    /// allocations exactly like a node of `rcb_cmdbuf_add_child` (a command buffer child) or of
    /// `rcb_cmdbuf_add_child_graph` (a raw graph: any move is refused).
    pub flattened: u32,
    /// Nodes re-created in the parent (an added join node not counted), or after a fallback the
    /// number of top-level nodes of the child.
    pub nodes: u32,
    /// Patch sites the re-created nodes added to the parent.
    pub sites: u32,
    /// After a fallback, why (NUL-terminated, cut at a character boundary if longer); empty
    /// otherwise.
    pub reason: [c_char; RCB_FLATTEN_REASON_LEN],
}

fn flatten_report(r: &cmdbuf::FlattenReport) -> rcb_flatten_report {
    let mut reason = [0 as c_char; RCB_FLATTEN_REASON_LEN];
    if let Some(text) = &r.fallback {
        // SAFETY: the array is writable for its length.
        unsafe { write_c_str(text, reason.as_mut_ptr(), reason.len()) };
    }
    rcb_flatten_report { flattened: u32::from(r.fallback.is_none()), nodes: r.nodes, sites: r.sites, reason, ..Default::default() }
}

/// Flattens a child into `cb` after `deps`: the child's nodes are re-created in `cb` in
/// topological order with every edge (edge data included) and nested child graphs flattened
/// recursively, so their addresses become patch sites of `cb` and move with
/// `rcb_cmdbuf_update_allocations` like any other node. Recording state only.
///
/// The child is exactly one of `child` (a finalized command buffer, borrowed for the call: its
/// nodes keep their exact argument layout and sites; the graphs of its child nodes, added with
/// `rcb_cmdbuf_add_child` or `rcb_cmdbuf_add_child_graph`, are read back from the runtime and
/// flattened like a raw graph) or `graph` (a `hipGraph_t` / `CUgraph` the library did not
/// build, e.g. from stream capture; borrowed for the call, still owned by the caller); the
/// other must be NULL.
///
/// Kernel nodes of a raw graph: their packed parameters are read back (an `extra` buffer list is
/// copied; a `kernelParams` node needs the parameter layout, which CUDA can query and HIP cannot)
/// and their launch attributes copied. Their pointer sites are found by scanning every
/// 8-byte-aligned word of the packed parameters (structs included) for a value inside an
/// allocation of `cb`'s table or one past the end of one (an end pointer: see `rcb_allocation`).
/// Trade-off: a plain value (an integer, a pair of floats) that happens to equal such an
/// address is patched as if it were a pointer, and an address kept in another form (not 8-byte
/// aligned, or in device memory, such as a pointer array) is not found. List only the
/// allocations that move; a child of your own command buffer has no such risk.
///
/// Memcpy nodes of a raw graph are read back only where the runtime reports them reliably. CUDA
/// does. HIP before 7.2 never fills the parameters of a 1-D memcpy node
/// (`hipGraphAddMemcpyNode1D`, a captured `hipMemcpyAsync`), so a child holding any memcpy node
/// falls back there (`RCB_FALLBACK_MEMCPY_UNREADABLE`, the reason naming the runtime's version),
/// and so it does on HIP after 7.2, whose report has not been read yet. HIP 7.2 reports the
/// parameters a node was created with, not those that `hipGraphMemcpyNodeSetParams1D` gave it
/// since, and a clone keeps them: the library falls back for graphs whose memcpy nodes it changed
/// itself (the template of a command buffer whose memcpy nodes an update moved, handed out by
/// `rcb_cmdbuf_graph`) and for any memcpy node in a nested child graph (a clone, which may come
/// from such a template), but cannot see a change you made: do not pass a raw graph whose memcpy
/// nodes you changed with `hipGraphMemcpyNodeSetParams1D`, or a clone of one (of a template
/// `rcb_cmdbuf_graph` handed out included), on HIP. A memcpy node is re-created only as the
/// library adds one, a 1-D device-to-device copy: a report of anything else (another kind, an
/// offset, more than one row, a copy to or from a symbol) falls back.
///
/// Kernel nodes of a kernel on `RCB_OPAQUE_KERNELS` (by default NCCL's, RCCL's and MSCCL's
/// collectives, recognised by the name the runtime gives the node's function) are re-created
/// with their arguments as they are, never scanned: they may read addresses the library cannot
/// see (work descriptors in device memory, peers' registrations of this rank's buffers), so
/// while one is in `cb` no allocation of `cb` moves in place (`RCB_FALLBACK_OPAQUE_KERNEL`, the
/// reason naming the kernel). A kernel node of a raw graph whose function the runtime cannot
/// name is treated the same way unless the list is `none`: it might be on it. A copy of a
/// captured collective is the same collective as its source, sharing its communicator's state,
/// its work buffers and its proxy plan with the source and with every other copy: launch
/// command buffers holding copies of one capture as the collective library allows launches of
/// the captured graph itself (one at a time, in the same order on every rank), never
/// concurrently; the library cannot tell which communicator a kernel uses, so it cannot check.
///
/// Event record and event wait nodes are re-created with the same event, host nodes with the
/// same function and user data, and stream memory-operation nodes (CUDA's batch memory-operation
/// nodes, captured stream writes and waits; HIP's from 6.4, made by `hipGraphAddBatchMemOpNode`,
/// since ROCm runs a captured stream write outside the capture) with the same operations, each
/// with all its edges: the copy orders against other streams and graphs exactly as the original
/// does. Their parameters are never changed by an update. A memory operation's address is not a
/// patch site: the allocations it lies in or ends (one past the end, as for the references of a
/// cloned child) are pinned (their moves are refused with `needs_rerecord`). What a host
/// function reads is not the library's to see (the trade-off of scanned kernels: an address in
/// memory other than the node's parameters is not found).
///
/// Fallback: when any node cannot be re-created (a kernel with no readable layout, an `extra`
/// that is not a launch-parameter list, a memcpy node whose parameters cannot be trusted or that
/// is not a device-to-device copy, a node whose parameters the runtime cannot report, a memory
/// allocation or free node (`RCB_FALLBACK_MEMORY_NODE`), any type the library does not know)
/// nothing is flattened: the whole child becomes ONE cloned child node after `deps`, the reason
/// is logged (warn) and written to `report->reason`, and the call still succeeds. No node is
/// dropped and no dependency lost either way. The fallback node follows the rules of
/// `rcb_cmdbuf_add_child` (for `child`) or `rcb_cmdbuf_add_child_graph` (for `graph`): moves of
/// the allocations it may reference are refused with `needs_rerecord`, never applied silently.
///
/// No fallback exists where the runtime does not allow such a graph in a child node: CUDA
/// forbids conditional nodes there (XLA's `lax.cond` and `lax.while_loop` graphs hold them; they
/// are never flattened either: their bodies run on a value set through a handle made for the
/// graph they belong to), and memory allocation and free nodes unless they are moved out of the
/// graph. Such a child returns `RCB_STATUS_UNSUPPORTED` with nothing added to `cb`, the message
/// naming the node kind and the rule, counted as `RCB_FALLBACK_CONDITIONAL_NODE` or
/// `RCB_FALLBACK_MEMORY_NODE`: record that graph another way (as its own executable graph, or the
/// command another way; XLA keeps its own command for it).
///
/// `*group` is written on success: the node later commands depend on (the child's single exit
/// node, an empty join node after all its exit nodes, or the fallback child node); `*report` too.
/// A runtime failure while nodes are being added returns its status after destroying the nodes
/// added so far, `cb` as it was; only when destroying one fails too do the nodes left stay in
/// `cb` (the message says so: re-record it).
///
/// Thread-safety: one thread at a time per command buffer; `child` must not be used by another
/// thread during the call.
///
/// # Safety
/// `cb` must be NULL or a handle; `deps` NULL or `ndeps` handles; `child` NULL or a handle;
/// `graph` NULL or a live graph; `group` NULL or writable; `report` NULL or
/// a sized struct writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_add_flattened_child(
    cb: *mut rcb_cmdbuf,
    deps: *const rcb_node,
    ndeps: usize,
    child: *const rcb_cmdbuf,
    graph: *mut c_void,
    group: *mut rcb_node,
    report: *mut rcb_flatten_report,
) -> rcb_status {
    boundary(|| {
        let group_out = arg_out(group, "group")?;
        // SAFETY: the caller promises a NULL or writable sized struct.
        let report_out = unsafe { arg_out_sized(report, "report") }?;
        let done = |id: usize, (node, r): (NodeId, cmdbuf::FlattenReport)| {
            // SAFETY: checked by arg_out and arg_out_sized.
            unsafe {
                write_out(group_out, node_handle(id, node));
                report_out.write(flatten_report(&r));
            }
        };
        match (child.is_null(), graph.is_null()) {
            (true, true) => Err(Error::new(ErrorKind::NullArgument, "arguments `child` and `graph` are both NULL; give exactly one")),
            (false, false) => Err(Error::invalid_argument("arguments `child` and `graph` are both set; give exactly one")),
            (false, true) => with_pair(cb, child, |id, cb, child| {
                // SAFETY: forwarded from the caller.
                let deps = unsafe { deps_of(id, cb, deps, ndeps) }?;
                done(id, cb.add_flattened_child(&deps, cmdbuf::FlattenSource::CmdBuf(child))?);
                Ok(())
            }),
            (true, false) => with(cb, |id, cb| {
                // SAFETY: forwarded from the caller.
                let deps = unsafe { deps_of(id, cb, deps, ndeps) }?;
                done(id, cb.add_flattened_child(&deps, cmdbuf::FlattenSource::Graph(Graph(graph)))?);
                Ok(())
            }),
        }
    })
}

/// Gives the nodes that `group` stands for (a group node returned by
/// `rcb_cmdbuf_add_flattened_child` on `cb`) the parameters of a new child of the same shape:
/// exactly one of `child` (a finalized command buffer) or `graph` (a raw graph), both borrowed
/// for the call, as for `rcb_cmdbuf_add_flattened_child`. This is how a re-record updates a
/// flattened traced command whose trace changed. Updating state only.
///
/// The new child must flatten to the same nodes in the same order, each of the same type (its
/// edges are taken to be the same), with the same event, host function and user data, and
/// memory operations where it has such nodes (the library never changes those in place);
/// otherwise `RCB_STATUS_INVALID_ARGUMENT` (another shape) or `RCB_STATUS_UNSUPPORTED` (it cannot
/// be flattened, or such a node differs) names the difference and nothing changes.
/// Each node's parameters are pushed as by `rcb_cmdbuf_update_kernel` and its patch sites
/// replaced, found as when flattening (exact for `child`'s own nodes, by scanning for raw
/// kernels). When the child had fallen back to one cloned child node, that node gets the new
/// child's graph (`rcb_cmdbuf_update_child` / `rcb_cmdbuf_update_child_graph`) and
/// `report->flattened` is 0 with the reason. A runtime failure part-way returns its status; every
/// node of the group then has the new child's parameters, and the ones from the failed push on
/// are pushed again by `rcb_cmdbuf_finalize` (launches are refused until a push succeeds), so
/// the group never reads two children at once. `*report` (NULL allowed) is written on success.
///
/// What the update replaces (the clones kept for what the group's nodes read) is destroyed once
/// every launch that may use it has finished; what a launch the library could not follow may use
/// is kept instead, and no update is refused for it (see `rcb_cmdbuf_update_child`).
///
/// Thread-safety: one thread at a time per command buffer; `child` must not be used by another
/// thread during the call.
///
/// # Safety
/// `cb` must be NULL or a handle; `child` NULL or a handle; `graph` NULL or a live graph;
/// `report` NULL or a sized struct writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_cmdbuf_update_flattened_child(
    cb: *mut rcb_cmdbuf,
    group: rcb_node,
    child: *const rcb_cmdbuf,
    graph: *mut c_void,
    report: *mut rcb_flatten_report,
) -> rcb_status {
    boundary(|| {
        let report_out = if report.is_null() {
            None
        } else {
            // SAFETY: the caller promises a writable sized struct.
            Some(unsafe { arg_out_sized(report, "report") }?)
        };
        let done = |r: cmdbuf::FlattenReport| {
            if let Some(out) = &report_out {
                // SAFETY: checked by arg_out_sized.
                unsafe { out.write(flatten_report(&r)) };
            }
        };
        match (child.is_null(), graph.is_null()) {
            (true, true) => Err(Error::new(ErrorKind::NullArgument, "arguments `child` and `graph` are both NULL; give exactly one")),
            (false, false) => Err(Error::invalid_argument("arguments `child` and `graph` are both set; give exactly one")),
            (false, true) => with_pair(cb, child, |id, cb, child| {
                let g = node_id(id, group)?;
                done(cb.update_flattened_child(g, cmdbuf::FlattenSource::CmdBuf(child))?);
                Ok(())
            }),
            (true, false) => with(cb, |id, cb| {
                let g = node_id(id, group)?;
                done(cb.update_flattened_child(g, cmdbuf::FlattenSource::Graph(Graph(graph)))?);
                Ok(())
            }),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_fallback_reason_is_cut_at_a_character_boundary_and_terminated() {
        let text = format!("{}é", "x".repeat(RCB_FLATTEN_REASON_LEN - 2));
        let r = flatten_report(&cmdbuf::FlattenReport { fallback: Some(text), nodes: 3, sites: 0 });
        assert_eq!((r.flattened, r.nodes), (0, 3));
        // SAFETY: the report's reason is NUL-terminated within its array (what the test checks).
        let reason = unsafe { std::ffi::CStr::from_ptr(r.reason.as_ptr()) }.to_str().unwrap();
        assert_eq!(reason, "x".repeat(RCB_FLATTEN_REASON_LEN - 2), "the 2-byte character does not fit");
        let r = flatten_report(&cmdbuf::FlattenReport { fallback: None, nodes: 2, sites: 5 });
        assert_eq!((r.flattened, r.sites, r.reason[0]), (1, 5, 0));
    }

    #[test]
    fn node_handles_round_trip_and_reject_forgeries() {
        let h = node_handle(0x1230, 41);
        assert_eq!(node_id(0x1230, h).unwrap(), 41);
        let e = node_id(0x1230, 0x1230 << 32).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        // Owner never registered: made up, not foreign.
        let e = node_id(0x1230, node_handle(0x9990, 0)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains("not a node handle"), "{}", e.message);
    }
}

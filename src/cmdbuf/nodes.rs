//! Node records: the library's own copy of every node's parameters (the "shadow"), which is
//! what gets patched and pushed. Parameters are never read back from the runtime (ROCm/clr#138:
//! the arrays it hands out are its own and dangle).

use super::NodeId;
use super::args::{MAX_BLOB_BYTES, Named, aligned_words, read_ptr, write_ptr};
use super::memory::Heap;
use super::opaque::References;
use super::patch::Slot;
use crate::error::Result;
use crate::runtime::{Event, Exec, Function, Graph, HostNode, KernelParams, MemOpNode, MemcpyParams, MemsetParams, Node, Runtime};
use std::ptr::NonNull;

/// A kernel node's launch shape and its packed arguments.
#[derive(Clone, Debug)]
pub struct KernelRecord {
    pub function: Function,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    /// The packed arguments, with the offsets of the words that may hold device addresses, the
    /// arguments the caller named by allocation and an opaque kernel's references (see [`Blob`]).
    pub blob: Blob,
}

/// A kernel node's packed arguments and, after them in the same heap block, the lists that say
/// where its addresses are: the offsets of the words that may hold device addresses (the
/// pointer arguments, or every 8-byte-aligned word of a node flattened from a graph with no
/// known layout), as `u16`, the pointer arguments the caller named by allocation (sites of
/// that allocation whatever their address), and for a kernel on `RCB_OPAQUE_KERNELS` its boxed
/// `References::Opaque` (its lists are then empty, and the node pins everything: see
/// `opaque.rs`). Where the offsets are every 8-byte-aligned word of the arguments (as for a
/// node flattened from a graph, or a kernel whose arguments are all pointers) they are not
/// stored but made when read: a flattened node's list was a quarter of its arguments' size, more than
/// its sites. Only recording and a new allocation table read what follows the arguments;
/// an update reads the arguments. One block and a 16-byte handle, where three boxed slices and
/// an optional box took 56 bytes and up to four blocks; never resized once recorded.
///
/// The block stays where it is for as long as the blob lives (moving the record moves only
/// this handle). An address update stores a site's new address through [`Blob::base`], which
/// the command buffer lists by node, without reading the node's record (see `update.rs`). It
/// holds a raw pointer, not a `Box`, because a `Box` asserts that it alone reaches its
/// contents, which such a store through another pointer would break.
pub struct Blob {
    /// The block, aligned for [`Named`]; dangling (and so aligned) when the block is empty.
    ptr: NonNull<u8>,
    /// Argument bytes (at most `args::MAX_BLOB_BYTES`).
    len: u16,
    /// Pointer offsets after them (at most one per 8 argument bytes); 0 when `every_word`.
    pointers: u16,
    /// The offsets are those of every 8-byte-aligned word of the arguments, stored nowhere.
    every_word: bool,
    /// Named arguments after those (at most one per 8 argument bytes).
    named: u16,
    /// A `Box<References>` (as a raw pointer) after those: an opaque kernel's.
    opaque: bool,
}

// SAFETY: a `Blob` owns its block as a `Box<[u8]>` would, and moves between threads with the
// command buffer that holds it (one thread at a time uses it, through `&mut`).
unsafe impl Send for Blob {}
// SAFETY: shared access only reads the bytes, as for a `Box<[u8]>`.
unsafe impl Sync for Blob {}

impl Blob {
    /// A blob of `args` whose possible addresses are at `pointers` (ascending) and `named`, with
    /// an opaque kernel's references. `args` must not exceed `args::MAX_BLOB_BYTES`, and every
    /// offset must leave 8 bytes in it (packing and flattening check both).
    pub fn new(args: &[u8], pointers: &[u32], named: &[Named], opaque: Option<Box<References>>) -> Self {
        let every_word = !pointers.is_empty() && pointers.iter().copied().eq(aligned_words(0, args.len()));
        let pointers = if every_word { &[] } else { pointers };
        // The block is sized from these counts: one that did not fit its field would make the
        // copies below overrun it. Packing and flattening keep them far below (offsets and names
        // are 8-byte words of the arguments), so this never fails.
        let fits = |n: usize| u16::try_from(n).ok();
        let (Some(len), Some(count), Some(names)) = (fits(args.len()), fits(pointers.len()), fits(named.len())) else {
            panic!("a blob of {} bytes, {} pointers and {} named arguments", args.len(), pointers.len(), named.len());
        };
        debug_assert!(args.len() <= MAX_BLOB_BYTES, "a blob of {} bytes", args.len());
        debug_assert!(pointers.iter().chain(named.iter().map(|n| &n.at)).all(|&at| at as usize + 8 <= args.len()));
        let mut blob =
            Self { ptr: NonNull::<Named>::dangling().cast(), len, pointers: count, every_word, named: names, opaque: opaque.is_some() };
        let layout = blob.layout();
        if layout.size() == 0 {
            return blob;
        }
        // SAFETY: the layout is not zero-sized.
        let Some(ptr) = NonNull::new(unsafe { std::alloc::alloc(layout) }) else {
            // Drops nothing: the blob's drop would free its dangling block.
            std::mem::forget(blob);
            std::alloc::handle_alloc_error(layout)
        };
        blob.ptr = ptr;
        let (offsets_at, named_at, opaque_at) = blob.list_offsets();
        // SAFETY: each range lies inside the block just allocated (see `list_offsets`), aligned
        // for what is stored there (`u16` at an even offset, `Named` at a multiple of 8 of a
        // block aligned for it), and nothing else refers to the block yet.
        unsafe {
            std::ptr::copy_nonoverlapping(args.as_ptr(), ptr.as_ptr(), args.len());
            let offsets = ptr.as_ptr().add(offsets_at).cast::<u16>();
            for (k, &at) in pointers.iter().enumerate() {
                offsets.add(k).write(at as u16);
            }
            std::ptr::copy_nonoverlapping(named.as_ptr(), ptr.as_ptr().add(named_at).cast::<Named>(), named.len());
            if let Some(refs) = opaque {
                ptr.as_ptr().add(opaque_at).cast::<*mut References>().write(Box::into_raw(refs));
            }
        }
        blob
    }

    /// Where the offsets, the named arguments and the opaque references start in the block.
    fn list_offsets(&self) -> (usize, usize, usize) {
        let offsets = usize::from(self.len).next_multiple_of(std::mem::align_of::<u16>());
        let named = (offsets + 2 * usize::from(self.pointers)).next_multiple_of(std::mem::align_of::<Named>());
        let opaque = named + std::mem::size_of::<Named>() * usize::from(self.named);
        (offsets, named, opaque)
    }

    fn layout(&self) -> std::alloc::Layout {
        let (offsets, _, opaque) = self.list_offsets();
        // Padding is kept only where something aligned follows it.
        let size = if self.opaque {
            opaque + std::mem::size_of::<*mut References>()
        } else if self.named > 0 {
            opaque
        } else {
            offsets + 2 * usize::from(self.pointers)
        };
        std::alloc::Layout::from_size_align(size, std::mem::align_of::<Named>()).expect("a block of at most a few hundred KiB")
    }

    /// The heap block's size: the arguments and the lists after them.
    pub fn block_bytes(&self) -> usize {
        self.layout().size()
    }

    /// The address of byte 0 of the arguments, valid for `len` bytes until the blob is dropped.
    pub fn base(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The offsets of the words that may hold device addresses, ascending.
    pub fn pointers(&self) -> impl Iterator<Item = u32> + '_ {
        let list: &[u16] = if self.pointers == 0 {
            &[]
        } else {
            let (offsets, _, _) = self.list_offsets();
            // SAFETY: `pointers` `u16`s written by `new` at that even offset of the block, which
            // lives as long as `self`.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offsets).cast::<u16>().cast_const(), usize::from(self.pointers)) }
        };
        let words = if self.every_word { usize::from(self.len) } else { 0 };
        list.iter().map(|&at| u32::from(at)).chain(aligned_words(0, words))
    }

    /// The arguments the caller named by allocation, in their order.
    pub fn named(&self) -> &[Named] {
        if self.named == 0 {
            return &[];
        }
        let (_, named, _) = self.list_offsets();
        // SAFETY: `named` entries written by `new` at that offset, aligned for them, in a block
        // that lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(named).cast::<Named>().cast_const(), usize::from(self.named)) }
    }

    /// An opaque kernel's references (see `opaque.rs`).
    pub fn opaque(&self) -> Option<&References> {
        self.opaque.then(|| {
            let (_, _, at) = self.list_offsets();
            // SAFETY: `new` wrote a pointer from `Box::into_raw` there, aligned, which stays
            // valid until `drop` gives it back.
            unsafe { &*self.ptr.as_ptr().add(at).cast::<*mut References>().read() }
        })
    }
}

impl Drop for Blob {
    fn drop(&mut self) {
        let layout = self.layout();
        if self.opaque {
            let (_, _, at) = self.list_offsets();
            // SAFETY: a pointer from `Box::into_raw` that `new` wrote there, given back once.
            drop(unsafe { Box::from_raw(self.ptr.as_ptr().add(at).cast::<*mut References>().read()) });
        }
        if layout.size() > 0 {
            // SAFETY: allocated by `new` with this layout (its fields never change), freed once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl std::ops::Deref for Blob {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialized bytes at the start of the block, borrowed as long as the blob
        // is (dangling and empty when the block is).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), usize::from(self.len)) }
    }
}

impl std::ops::DerefMut for Blob {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`, borrowed mutably as long as the blob is.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), usize::from(self.len)) }
    }
}

impl Clone for Blob {
    fn clone(&self) -> Self {
        let pointers: Vec<u32> = self.pointers().collect();
        Blob::new(self, &pointers, self.named(), self.opaque().cloned().map(Box::new))
    }
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pointers: Vec<u32> = self.pointers().collect();
        f.debug_struct("Blob")
            .field("args", &&self[..])
            .field("pointers", &pointers)
            .field("named", &self.named())
            .field("opaque", &self.opaque())
            .finish()
    }
}

impl KernelRecord {
    /// The launch and arguments as the runtime takes them.
    pub fn params(&self) -> KernelParams<'_> {
        KernelParams {
            function: self.function,
            grid: self.grid,
            block: self.block,
            shared_mem_bytes: self.shared_mem_bytes,
            args: &self.blob,
        }
    }

    /// The record for a command buffer with another allocation table (a parent it is flattened
    /// into): the named pointers become plain ones, matched by address there.
    pub fn for_another_table(&self) -> Self {
        let mut pointers: Vec<u32> = self.blob.pointers().chain(self.blob.named().iter().map(|n| n.at)).collect();
        pointers.sort_unstable();
        Self {
            function: self.function,
            grid: self.grid,
            block: self.block,
            shared_mem_bytes: self.shared_mem_bytes,
            blob: Blob::new(&self.blob, &pointers, &[], self.blob.opaque().cloned().map(Box::new)),
        }
    }
}

#[derive(Clone, Debug)]
pub enum Params {
    Kernel(KernelRecord),
    Memcpy(MemcpyParams),
    Memset(MemsetParams),
    Empty,
    /// A clone of a graph, and what its nodes may point into (none of it is a patch site).
    Child(References),
    /// A kernel node whose arguments the runtime copied through `kernelParams` when it was added
    /// or updated; the library never saw them, keeps nothing and never reads them back
    /// (ROCm/clr#138), so the node has no slots and unknown references (`Opaque` for a kernel on
    /// `RCB_OPAQUE_KERNELS`, so that a refusal names it).
    KernelByPointers(References),
    /// Nodes flattened from a graph with the parameters read back from it, which the library
    /// never changes: an event record or wait node (the same event), a host node (the same
    /// function and user data: what the function reads is not the library's to see, as for a
    /// scanned kernel's memory beyond its arguments) and a stream memory-operation node, whose
    /// addresses are no patch sites but pin the allocations they lie in (`Known`).
    EventRecord(Event),
    EventWait(Event),
    Host(HostNode),
    /// (Its operations boxed: few nodes are memory operations, and every record would otherwise
    /// hold their room.)
    MemOp(Box<MemOpNode>, References),
}

/// The references of every node whose arguments the library never saw.
static UNKNOWN: References = References::Unknown;

impl Params {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Params::Kernel(_) => "kernel",
            Params::Memcpy(_) => "memcpy",
            Params::Memset(_) => "memset",
            Params::Empty => "empty",
            Params::Child(_) => "child",
            Params::KernelByPointers(_) => "kernelParams kernel",
            Params::EventRecord(_) => "event record",
            Params::EventWait(_) => "event wait",
            Params::Host(_) => "host",
            Params::MemOp(..) => "memory-operation",
        }
    }

    /// What the node may point into besides its slots, when the library cannot patch it.
    pub fn references(&self) -> Option<&References> {
        match self {
            Params::Child(refs) | Params::MemOp(_, refs) | Params::KernelByPointers(refs) => Some(refs),
            // A host function is code the library cannot see (its user data may point anywhere),
            // and an event node synchronizes with work outside the graph that was issued with
            // the graph's addresses: while one is in the command buffer, nothing moves in place.
            Params::EventRecord(_) | Params::EventWait(_) | Params::Host(_) => Some(&UNKNOWN),
            Params::Kernel(k) => k.blob.opaque(),
            Params::Memcpy(_) | Params::Memset(_) | Params::Empty => None,
        }
    }

    /// Calls `f` with every address slot, the address it holds now and, when the caller named
    /// its allocation, that allocation and the offset in it.
    pub fn for_each_slot(&self, mut f: impl FnMut(Slot, u64, Option<(u32, u64)>)) {
        match self {
            Params::Kernel(k) => {
                let slot = Slot::kernel_arg;
                k.blob.pointers().for_each(|at| f(slot(at), read_ptr(&k.blob, at), None));
                k.blob.named().iter().for_each(|n| f(slot(n.at), read_ptr(&k.blob, n.at), Some((n.allocation, n.offset))));
            }
            Params::Memcpy(c) => {
                f(Slot::MemcpyDst, c.dst, None);
                f(Slot::MemcpySrc, c.src, None);
            }
            Params::Memset(s) => f(Slot::MemsetDst, s.dst, None),
            Params::Empty
            | Params::Child(_)
            | Params::KernelByPointers(_)
            | Params::EventRecord(_)
            | Params::EventWait(_)
            | Params::Host(_)
            | Params::MemOp(..) => {}
        }
    }

    /// The address `slot` holds; the slot came from [`Self::for_each_slot`] of this node.
    #[inline]
    pub fn read(&self, slot: Slot) -> u64 {
        match (self, slot) {
            (Params::Kernel(k), Slot::KernelArg(at)) => read_ptr(&k.blob, u32::from(at)),
            (Params::Memcpy(c), Slot::MemcpyDst) => c.dst,
            (Params::Memcpy(c), Slot::MemcpySrc) => c.src,
            (Params::Memset(s), Slot::MemsetDst) => s.dst,
            (params, slot) => unreachable!("slot {slot:?} recorded for a {} node", params.kind_name()),
        }
    }

    /// Stores `address` in `slot`; the slot came from [`Self::for_each_slot`] of this node.
    #[inline]
    pub fn write(&mut self, slot: Slot, address: u64) {
        match (self, slot) {
            (Params::Kernel(k), Slot::KernelArg(at)) => write_ptr(&mut k.blob, u32::from(at), address),
            (Params::Memcpy(c), Slot::MemcpyDst) => c.dst = address,
            (Params::Memcpy(c), Slot::MemcpySrc) => c.src = address,
            (Params::Memset(s), Slot::MemsetDst) => s.dst = address,
            (params, slot) => unreachable!("slot {slot:?} recorded for a {} node", params.kind_name()),
        }
    }

    /// Asks for the cache lines a push of these parameters reads (a kernel node's arguments).
    #[inline]
    pub fn prefetch_push(&self) {
        if let Params::Kernel(k) = self {
            crate::prefetch::line(k.blob.as_ptr());
        }
    }

    /// Adds this node to `graph`; a child is added by [`Runtime::add_child_node`] instead.
    pub fn add_to(&self, rt: &dyn Runtime, graph: Graph, deps: &[Node]) -> Result<Node> {
        match self {
            Params::Kernel(k) => rt.add_kernel_node(graph, deps, &k.params()),
            Params::Memcpy(c) => rt.add_memcpy_node(graph, deps, c),
            Params::Memset(s) => rt.add_memset_node(graph, deps, s),
            Params::Empty => rt.add_empty_node(graph, deps),
            Params::EventRecord(e) => rt.add_event_record_node(graph, deps, *e),
            Params::EventWait(e) => rt.add_event_wait_node(graph, deps, *e),
            Params::Host(h) => rt.add_host_node(graph, deps, h),
            Params::MemOp(ops, _) => rt.add_mem_op_node(graph, deps, ops),
            Params::Child(_) => unreachable!("child nodes are added with the graph they clone"),
            Params::KernelByPointers(_) => unreachable!("kernelParams nodes are added with the caller's argument pointers"),
        }
    }

    /// Sends the parameters to the executable graph (`Some(exec)`) or to the template node.
    /// Empty, child and kernelParams nodes have nothing to send (the last are sent when updated),
    /// nor have the nodes whose parameters never change (event, host, memory operations).
    pub fn push(&self, rt: &dyn Runtime, exec: Option<Exec>, node: Node) -> Result<()> {
        match (self, exec) {
            (Params::Kernel(k), Some(e)) => rt.exec_kernel_node_set(e, node, &k.params()),
            (Params::Kernel(k), None) => rt.kernel_node_set(node, &k.params()),
            (Params::Memcpy(c), Some(e)) => rt.exec_memcpy_node_set(e, node, c),
            (Params::Memcpy(c), None) => rt.memcpy_node_set(node, c),
            (Params::Memset(s), Some(e)) => rt.exec_memset_node_set(e, node, s),
            (Params::Memset(s), None) => rt.memset_node_set(node, s),
            (
                Params::Empty
                | Params::Child(_)
                | Params::KernelByPointers(_)
                | Params::EventRecord(_)
                | Params::EventWait(_)
                | Params::Host(_)
                | Params::MemOp(..),
                _,
            ) => Ok(()),
        }
    }
}

pub struct NodeRecord {
    pub raw: Node,
    pub params: Params,
    /// The runtime holds older parameters than `params` (a push failed).
    pub unpushed: bool,
    /// The template node holds older parameters than the executable graph and cannot be brought
    /// up to date (a child node updated in place: the runtime has no template setter for it).
    pub template_lags: bool,
    /// The template node holds older parameters than `params`, which the next template refresh
    /// pushes (a primary's updates go to its executable graph only).
    pub template_dirty: bool,
}

// The record an update walks: the handle, the parameters (a kernel's launch shape and its
// blob's 16-byte handle, the largest) and the flags. Rust keeps the parameters' variant in a
// niche of the kernel's, which no larger variant may take away.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<NodeRecord>() == 72 && std::mem::size_of::<Params>() == 56);

/// The fields of a node record that only child nodes, nodes with known references and nodes
/// that keep graphs use: kept in a side table by node ([`RareFields`]), so that the records an
/// update walks are smaller (a box in each record took 8 bytes a node).
#[derive(Default)]
pub struct Rare {
    /// Allocations this node pins (its known references lie in them), distinct.
    pub pins: Vec<u32>,
    /// A child node: the estimated staging bytes of pushing its graph (see `budget.rs`).
    pub child_bytes: u64,
    /// A child node updated in place while the update budget is on: a clone of the graph it was
    /// given (owned), which a re-instantiation gives the new executable graph, since the
    /// template cannot take it.
    pub child_clone: Option<Graph>,
    /// The generation (`launches.rs`) from which launches may use the child clone and the graphs
    /// kept for this node: 0 for those it was recorded with, else the one an update gave them in.
    pub graphs_since: u64,
}

/// The [`Rare`] fields of the nodes that have any, in ascending order of node: found by a
/// binary search, and added where a node first needs them (at the end, for a node just
/// recorded).
#[derive(Default)]
pub struct RareFields(Vec<(NodeId, Rare)>);

impl RareFields {
    fn get(&self, node: NodeId) -> Option<&Rare> {
        self.0.binary_search_by_key(&node, |(n, _)| *n).ok().map(|k| &self.0[k].1)
    }

    /// Node `node`'s fields, made when first written.
    pub fn get_mut(&mut self, node: NodeId) -> &mut Rare {
        let k = match self.0.binary_search_by_key(&node, |(n, _)| *n) {
            Ok(k) => k,
            Err(k) => {
                self.0.insert(k, (node, Rare::default()));
                k
            }
        };
        &mut self.0[k].1
    }

    /// Forgets a node removed from the command buffer.
    pub fn remove(&mut self, node: NodeId) {
        if let Ok(k) = self.0.binary_search_by_key(&node, |(n, _)| *n) {
            self.0.remove(k);
        }
    }

    /// The nodes that have rare fields, with them, in ascending order of node.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &Rare)> {
        self.0.iter().map(|(n, r)| (*n, r))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (NodeId, &mut Rare)> {
        self.0.iter_mut().map(|(n, r)| (*n, r))
    }

    /// Allocations `node` pins (see [`Rare::pins`]).
    pub fn pins(&self, node: NodeId) -> &[u32] {
        self.get(node).map_or(&[], |r| &r.pins)
    }

    pub fn clear_pins(&mut self, node: NodeId) {
        if let Ok(k) = self.0.binary_search_by_key(&node, |(n, _)| *n) {
            self.0[k].1.pins.clear();
        }
    }

    /// See [`Rare::child_clone`].
    pub fn child_clone(&self, node: NodeId) -> Option<Graph> {
        self.get(node).and_then(|r| r.child_clone)
    }

    /// See [`Rare::graphs_since`].
    pub fn graphs_since(&self, node: NodeId) -> u64 {
        self.get(node).map_or(0, |r| r.graphs_since)
    }

    /// The heap the table holds, with the pin lists (see `memory.rs`).
    pub fn heap(&self) -> Heap {
        let pins: Heap = self.0.iter().map(|(_, r)| Heap::vec(&r.pins)).sum();
        [Heap::vec(&self.0), pins].into_iter().sum()
    }
}

impl NodeRecord {
    /// The heap this record holds: its argument blob (with the packed bytes' length) and its
    /// other lists (see `memory.rs`).
    pub fn heap(&self) -> (Heap, u64, Heap) {
        let mut lists = Heap::default();
        let known = |refs: &Option<&References>| match refs {
            Some(References::Known(addresses)) => Heap::vec(addresses),
            _ => Heap::default(),
        };
        lists.add(known(&self.params.references()));
        match &self.params {
            Params::Kernel(k) => {
                if k.blob.opaque().is_some() {
                    lists.add(Heap { bytes: std::mem::size_of::<References>() as u64, blocks: 1 });
                }
                // One block: the arguments are counted as their copy, the lists after them
                // (and the padding before each) as the node's lists.
                let (block, args) = (k.blob.block_bytes() as u64, k.blob.len() as u64);
                lists.add(Heap { bytes: block - args, blocks: 0 });
                (Heap { bytes: args, blocks: u64::from(block > 0) }, args, lists)
            }
            Params::MemOp(ops, _) => {
                lists.add(Heap { bytes: std::mem::size_of::<MemOpNode>() as u64, blocks: 1 });
                lists.add(Heap::vec(&ops.ops));
                (Heap::default(), 0, lists)
            }
            _ => (Heap::default(), 0, lists),
        }
    }

    /// Asks for the cache lines of the fields a push reads (the handle and the parameters),
    /// without reading the record.
    #[inline]
    pub fn prefetch(&self) {
        let params = (&self.params as *const Params).cast::<u8>();
        crate::prefetch::line(params);
        crate::prefetch::line(params.wrapping_add(64));
    }

    /// Notes that this node's (number `id`) template lags behind its parameters, which went to
    /// the executable graph only: listed once in `dirty`, which the next template refresh pushes.
    pub fn template_lags_behind(&mut self, id: u32, dirty: &mut Vec<u32>) {
        if !self.template_dirty {
            self.template_dirty = true;
            dirty.push(id);
        }
    }

    pub fn new(raw: Node, params: Params) -> Self {
        Self { raw, params, unpushed: false, template_lags: false, template_dirty: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(at: u32, allocation: u32, offset: u64) -> Named {
        Named { at, allocation, offset }
    }

    #[test]
    fn offsets_at_every_aligned_word_take_no_room_in_the_block() {
        let args: Vec<u8> = (0..44).collect();
        // 0 to 32: every word wholly inside 44 bytes.
        let every: Vec<u32> = (0..5).map(|k| k * 8).collect();
        let all = Blob::new(&args, &every, &[], None);
        assert_eq!(all.block_bytes(), 44, "nothing after the arguments");
        // One word short of every word, or one named besides: a list as before.
        let some = Blob::new(&args, &every[..4], &[], None);
        assert_eq!(some.block_bytes(), 44 + 4 * 2);
        let with_named = Blob::new(&args, &every, &[named(32, 1, 0)], None);
        assert_eq!(with_named.block_bytes(), 48 + std::mem::size_of::<Named>());
        for (b, want) in [(&all, &every[..]), (&all.clone(), &every[..]), (&some, &every[..4]), (&with_named, &every[..])] {
            assert_eq!(b.pointers().collect::<Vec<_>>(), want);
        }
        assert_eq!(with_named.named(), &[named(32, 1, 0)]);
        assert_eq!(Blob::new(&args[..7], &[], &[], None).pointers().count(), 0, "no word, no offset");
    }

    #[test]
    fn a_blob_keeps_its_arguments_and_lists_in_one_block_through_clones_and_writes() {
        let args: Vec<u8> = (0..43).collect();
        let refs = References::Opaque("the kernel `k`".into());
        for (pointers, names, opaque) in [
            (vec![], vec![], None),
            (vec![0, 24], vec![], None),
            (vec![8], vec![named(16, 2, 0x40), named(32, 0, 0)], None),
            (vec![], vec![named(0, 7, u64::MAX)], None),
            (vec![], vec![], Some(refs.clone())),
            (vec![0, 8, 16], vec![named(24, 1, 8)], Some(refs.clone())),
            // Every aligned word (at each length below): not stored, made when read.
            (vec![0, 8, 16, 24, 32], vec![], None),
        ] {
            for len in [0, 35, 40, 43] {
                let keep = |at: &u32| *at as usize + 8 <= len;
                let pointers: Vec<u32> = pointers.iter().copied().filter(keep).collect();
                let names: Vec<Named> = names.iter().copied().filter(|n| keep(&n.at)).collect();
                let mut blob = Blob::new(&args[..len], &pointers, &names, opaque.clone().map(Box::new));
                let copy = blob.clone();
                if len >= 8 {
                    write_ptr(&mut blob, 0, 0xdead_beef_0000_0001);
                    assert_eq!(read_ptr(&blob, 0), 0xdead_beef_0000_0001);
                    // SAFETY: `base` is byte 0 of the blob's 8 or more argument bytes.
                    assert_eq!(unsafe { blob.base().cast::<u64>().read_unaligned() }, 0xdead_beef_0000_0001);
                }
                for b in [&blob, &copy].into_iter() {
                    assert_eq!(b.len(), len);
                    assert_eq!(b[8.min(len)..], args[8.min(len)..len], "the arguments after the written word");
                    assert_eq!(b.pointers().collect::<Vec<_>>(), pointers);
                    assert_eq!(b.named(), &names[..]);
                    assert_eq!(b.opaque().is_some(), opaque.is_some());
                    if let Some(refs) = b.opaque() {
                        assert!(matches!(refs, References::Opaque(what) if &**what == "the kernel `k`"));
                    }
                }
                assert_eq!(&copy[..], &args[..len], "a clone is a copy, not the same block");
                let every_word = !pointers.is_empty() && pointers.iter().copied().eq(aligned_words(0, len));
                let stored = if every_word { 0 } else { pointers.len() };
                let lists = 2 * stored + 16 * names.len() + 8 * usize::from(opaque.is_some());
                assert!(blob.block_bytes() >= len + lists && blob.block_bytes() < len + lists + 16, "{} bytes", blob.block_bytes());
            }
        }
    }

    #[test]
    fn rare_fields_stay_in_node_order_whatever_order_they_are_made_in() {
        let mut rare = RareFields::default();
        for node in [5, 2, 9, 2, 0] {
            rare.get_mut(node).child_bytes += u64::from(node) + 1;
        }
        rare.get_mut(9).pins = vec![4, 1];
        rare.get_mut(5).graphs_since = 7;
        let order: Vec<(NodeId, u64)> = rare.iter().map(|(n, r)| (n, r.child_bytes)).collect();
        assert_eq!(order, vec![(0, 1), (2, 6), (5, 6), (9, 10)]);
        assert_eq!((rare.pins(9), rare.pins(3)), (&[4, 1][..], &[][..]));
        assert_eq!((rare.graphs_since(5), rare.graphs_since(4)), (7, 0));
        rare.clear_pins(9);
        rare.clear_pins(3);
        assert!(rare.pins(9).is_empty());
        rare.remove(2);
        rare.remove(3);
        assert_eq!(rare.iter().map(|(n, _)| n).collect::<Vec<_>>(), vec![0, 5, 9]);
        assert_eq!(rare.child_clone(9), None);
    }

    #[test]
    fn a_record_for_another_table_turns_named_arguments_into_pointers() {
        let args = [0u8; 40];
        let k = KernelRecord {
            function: Function(std::ptr::null_mut()),
            grid: [2, 1, 1],
            block: [64, 1, 1],
            shared_mem_bytes: 16,
            blob: Blob::new(&args, &[8, 32], &[named(16, 1, 0), named(0, 0, 8)], None),
        };
        let other = k.for_another_table();
        assert_eq!(other.blob.pointers().collect::<Vec<_>>(), vec![0, 8, 16, 32]);
        assert!(other.blob.named().is_empty());
        assert_eq!((other.grid, other.block, other.shared_mem_bytes), (k.grid, k.block, k.shared_mem_bytes));
    }
}

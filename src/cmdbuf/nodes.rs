//! Node records: the library's own copy of every node's parameters (the "shadow"), which is
//! what gets patched and pushed. Parameters are never read back from the runtime (ROCm/clr#138:
//! the arrays it hands out are its own and dangle).

use super::args::{Named, read_ptr, write_ptr};
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
    /// Never resized once recorded, so no capacity is kept beside the length (like the boxed
    /// lists after it).
    pub blob: Blob,
    /// Offsets in `blob` of the words that may hold device addresses: the pointer arguments, or
    /// every 8-byte-aligned word of a node flattened from a graph with no known layout.
    pub pointers: Box<[u32]>,
    /// The pointer arguments the caller named by allocation: sites of that allocation whatever
    /// their address.
    pub named: Box<[Named]>,
    /// `Some(References::Opaque(_))` for a kernel on `RCB_OPAQUE_KERNELS`: `pointers` and `named`
    /// are empty and the node pins everything (see `opaque.rs`). Boxed: few kernels are opaque,
    /// and every kernel node's record would otherwise hold the room of one.
    pub opaque: Option<Box<References>>,
}

/// A kernel node's packed arguments, in a heap block of their own that stays where it is for as
/// long as the blob lives (moving the record moves only this handle). An address update stores
/// a site's new address through [`Blob::base`], which the command buffer lists by node, without
/// reading the node's record (see `update.rs`). It holds a raw pointer, not a `Box`, because a
/// `Box` asserts that it alone reaches its contents, which such a store through another pointer
/// would break.
pub struct Blob {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Blob` owns its block as a `Box<[u8]>` would, and moves between threads with the
// command buffer that holds it (one thread at a time uses it, through `&mut`).
unsafe impl Send for Blob {}
// SAFETY: shared access only reads the bytes, as for a `Box<[u8]>`.
unsafe impl Sync for Blob {}

impl Blob {
    /// The address of byte 0, valid for `len` bytes until the blob is dropped.
    pub fn base(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl From<Vec<u8>> for Blob {
    fn from(bytes: Vec<u8>) -> Self {
        let boxed = bytes.into_boxed_slice();
        let len = boxed.len();
        // `Box::into_raw` never gives null, even for an empty slice (a dangling, aligned address).
        let ptr = NonNull::new(Box::into_raw(boxed).cast::<u8>()).expect("a box's address is never null");
        Self { ptr, len }
    }
}

impl Drop for Blob {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` came from `Box::into_raw` of a `Box<[u8]>` (`From<Vec<u8>>`),
        // which is given back once, here.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)) });
    }
}

impl std::ops::Deref for Blob {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialized bytes owned by this blob, borrowed as long as it is.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Blob {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`, borrowed mutably as long as the blob is.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for Blob {
    fn clone(&self) -> Self {
        Blob::from(self.to_vec())
    }
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl KernelRecord {
    /// The record for a command buffer with another allocation table (a parent it is flattened
    /// into): the named pointers become plain ones, matched by address there.
    pub fn for_another_table(&self) -> Self {
        let mut pointers: Vec<u32> = self.pointers.iter().copied().chain(self.named.iter().map(|n| n.at)).collect();
        pointers.sort_unstable();
        Self { pointers: pointers.into(), named: Box::default(), ..self.clone() }
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
    MemOp(MemOpNode, References),
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
            Params::Kernel(k) => k.opaque.as_deref(),
            Params::Memcpy(_) | Params::Memset(_) | Params::Empty => None,
        }
    }

    /// Calls `f` with every address slot, the address it holds now and, when the caller named
    /// its allocation, that allocation and the offset in it.
    pub fn for_each_slot(&self, mut f: impl FnMut(Slot, u64, Option<(u32, u64)>)) {
        match self {
            Params::Kernel(k) => {
                let slot = Slot::kernel_arg;
                k.pointers.iter().for_each(|&at| f(slot(at), read_ptr(&k.blob, at), None));
                k.named.iter().for_each(|n| f(slot(n.at), read_ptr(&k.blob, n.at), Some((n.allocation, n.offset))));
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

    fn kernel_params(k: &KernelRecord) -> KernelParams<'_> {
        KernelParams { function: k.function, grid: k.grid, block: k.block, shared_mem_bytes: k.shared_mem_bytes, args: &k.blob }
    }

    /// Adds this node to `graph`; a child is added by [`Runtime::add_child_node`] instead.
    pub fn add_to(&self, rt: &dyn Runtime, graph: Graph, deps: &[Node]) -> Result<Node> {
        match self {
            Params::Kernel(k) => rt.add_kernel_node(graph, deps, &Self::kernel_params(k)),
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
            (Params::Kernel(k), Some(e)) => rt.exec_kernel_node_set(e, node, &Self::kernel_params(k)),
            (Params::Kernel(k), None) => rt.kernel_node_set(node, &Self::kernel_params(k)),
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
    /// What few nodes have, out of line (none for most kernel, memcpy and memset nodes).
    rare: Option<Box<Rare>>,
}

/// The fields of a node record that only child nodes, nodes with known references and nodes
/// that keep graphs use: kept out of line, so that the records an update walks are smaller.
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

impl NodeRecord {
    /// The heap this record holds: its argument blob (with the packed bytes' length) and its
    /// other lists (see `memory.rs`).
    pub fn heap(&self) -> (Heap, u64, Heap) {
        let mut lists = Heap::default();
        if let Some(rare) = &self.rare {
            lists.add(Heap { bytes: std::mem::size_of::<Rare>() as u64, blocks: 1 });
            lists.add(Heap::vec(&rare.pins));
        }
        let known = |refs: &Option<&References>| match refs {
            Some(References::Known(addresses)) => Heap::vec(addresses),
            _ => Heap::default(),
        };
        lists.add(known(&self.params.references()));
        match &self.params {
            Params::Kernel(k) => {
                if k.opaque.is_some() {
                    lists.add(Heap { bytes: std::mem::size_of::<References>() as u64, blocks: 1 });
                }
                lists.add(Heap::boxed(&k.pointers));
                lists.add(Heap::boxed(&k.named));
                (Heap::boxed(&k.blob[..]), k.blob.len() as u64, lists)
            }
            Params::MemOp(ops, _) => {
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
        Self { raw, params, unpushed: false, template_lags: false, template_dirty: false, rare: None }
    }

    /// The out-of-line fields, made when first written.
    pub fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Allocations this node pins (see [`Rare::pins`]).
    pub fn pins(&self) -> &[u32] {
        self.rare.as_ref().map_or(&[], |r| &r.pins)
    }

    pub fn clear_pins(&mut self) {
        if let Some(rare) = &mut self.rare {
            rare.pins.clear();
        }
    }

    /// See [`Rare::child_bytes`].
    pub fn child_bytes(&self) -> u64 {
        self.rare.as_ref().map_or(0, |r| r.child_bytes)
    }

    /// See [`Rare::child_clone`].
    pub fn child_clone(&self) -> Option<Graph> {
        self.rare.as_ref().and_then(|r| r.child_clone)
    }

    /// Takes the child clone out of the record (see [`Rare::child_clone`]).
    pub fn take_child_clone(&mut self) -> Option<Graph> {
        self.rare.as_mut().and_then(|r| r.child_clone.take())
    }

    /// See [`Rare::graphs_since`].
    pub fn graphs_since(&self) -> u64 {
        self.rare.as_ref().map_or(0, |r| r.graphs_since)
    }
}

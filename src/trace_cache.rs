//! The trace cache: graphs of one traced command (a GEMM, a collective, a custom call) keyed by
//! the allocations it uses, so that recording it again costs a lookup or an in-place
//! relocation instead of a stream capture.
//!
//! Each entry is a nested command buffer built by flattening the captured graph, with the key as
//! its allocation table; relocating an entry to new addresses is that command buffer's own
//! address update. An entry whose capture could not be flattened (a host node, a `kernelParams`
//! kernel on HIP) still serves hits but is never relocated, and so is one that holds a kernel on
//! `RCB_OPAQUE_KERNELS` (a collective, which reads addresses the library cannot see: see
//! `cmdbuf/opaque.rs`), and one where some allocation of the key appears in no node: the command
//! reaches it another way, which relocation could not rewrite.
//!
//! The captured graph itself is kept as long as its entry: runtime resources attached to a
//! capture (user objects, such as a collective library's persistent work buffers) live as long
//! as that graph, and the flattened nodes may point into them.
//!
//! A cache belongs to one traced command: two keys of the same shape (count and sizes) are
//! assumed to trace to the same graph up to addresses.
//!
//! Thread-safety: `&mut self`; one thread at a time per cache.

use crate::cmdbuf::{Allocation, CmdBuf, FlattenSource, Kind};
use crate::counters::{self, Event, Fallback};
use crate::error::{Error, Leaks, Result};
use crate::runtime::{self, CaptureAfterFailedEnd, CaptureMode, Graph, Runtime, Stream};
use std::mem::ManuallyDrop;

/// Largest capacity a cache accepts (a larger one is certainly a caller bug).
pub const MAX_CAPACITY: usize = 1 << 20;

/// How [`TraceCache::get_or_trace`] produced its graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An entry with exactly these allocations.
    Hit,
    /// An entry of the same shape, patched in place to these allocations.
    Relocated,
    /// A new capture.
    Traced,
    /// A new capture that could not be cached (making its entry failed after the capture
    /// ended): the captured graph itself, held until the next call, so that the caller does not
    /// trace the command a second time.
    Uncached,
}

struct Entry {
    /// [`key_hash`] of `key`, compared before the key itself.
    hash: u64,
    shape: u64,
    key: Vec<Allocation>,
    /// Boxed so that reordering entries moves pointers, not command buffers.
    graph: Box<CmdBuf>,
    capture: Capture,
    relocatable: bool,
}

/// The graph a stream capture returned; destroyed when its entry goes.
struct Capture {
    rt: &'static dyn Runtime,
    graph: Graph,
}

impl Capture {
    fn destroy(self) -> Leaks {
        let this = ManuallyDrop::new(self);
        let mut leaks = Leaks::default();
        leaks.note(this.rt.graph_destroy(this.graph));
        leaks
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Err(e) = self.rt.graph_destroy(self.graph) {
            log::warn!("destroying a captured graph: {e}");
        }
    }
}

impl Entry {
    fn destroy(self) -> Leaks {
        let mut leaks = self.graph.destroy();
        leaks.append(self.capture.destroy());
        leaks
    }
}

pub struct TraceCache {
    rt: &'static dyn Runtime,
    capacity: usize,
    /// Most recently used first.
    entries: Vec<Entry>,
    /// Captured graphs the runtime failed to destroy (of a failed trace, or discarded after a
    /// failed end of capture): destroyed again by [`Self::destroy`].
    orphans: Vec<Graph>,
    /// The capture last returned as [`Outcome::Uncached`], destroyed by the next call.
    uncached: Option<Capture>,
    /// What the runtime failed to give back when entries were evicted or dropped: reported by
    /// [`Self::destroy`], so that the cache's free says what leaked.
    leaks: Leaks,
}

impl TraceCache {
    pub fn new(rt: &'static dyn Runtime, capacity: usize) -> Result<Self> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(Error::invalid_argument(format!("capacity {capacity} must be between 1 and {MAX_CAPACITY}")));
        }
        Ok(Self { rt, capacity, entries: Vec::with_capacity(capacity), orphans: Vec::new(), uncached: None, leaks: Leaks::default() })
    }

    /// Destroys every cached graph and returns the runtime calls that failed (their objects are
    /// leaked); the cache is gone either way.
    pub fn destroy(mut self) -> Leaks {
        self.release()
    }

    /// Destroys every graph the cache holds and leaves nothing for a second call.
    fn release(&mut self) -> Leaks {
        let mut leaks = std::mem::take(&mut self.leaks);
        for entry in self.entries.drain(..) {
            leaks.append(entry.destroy());
        }
        if let Some(capture) = self.uncached.take() {
            leaks.append(capture.destroy());
        }
        for orphan in self.orphans.drain(..) {
            leaks.note(self.rt.graph_destroy(orphan));
        }
        leaks
    }

    /// The graph of the command `trace` issues on `stream` with the allocations `allocs`: a
    /// cached one, a cached one relocated in place, or a new capture (thread-local mode). The
    /// graph belongs to the cache and stays valid until the next call or the cache's drop.
    ///
    /// A failing `trace` (or capture) leaves the cache as it was and returns its error. When the
    /// capture ended but its entry cannot be made, the captured graph is returned uncached
    /// ([`Outcome::Uncached`]): `trace` has run, and a caller that traced again would run its
    /// host-side work twice.
    pub fn get_or_trace(
        &mut self,
        stream: Stream,
        allocs: &[Allocation],
        trace: impl FnOnce(Stream) -> Result<()>,
    ) -> Result<(Graph, Outcome)> {
        // Borrowed by the caller until this call.
        if let Some(capture) = self.uncached.take() {
            self.leaks.append(capture.destroy());
        }
        let hash = key_hash(allocs);
        if let Some(i) = self.entries.iter().position(|e| e.hash == hash && e.key == allocs) {
            self.entries[..=i].rotate_right(1);
            counters::record_total(Event::TraceHit);
            return Ok((self.entries[0].graph.graph()?, Outcome::Hit));
        }
        // A hit equals a key that was validated when it was stored.
        crate::cmdbuf::allocations::validate(allocs)?;
        let shape = shape_hash(allocs);
        if let Some(graph) = self.relocate(shape, allocs, hash)? {
            counters::record_total(Event::Relocation);
            return Ok((graph, Outcome::Relocated));
        }
        let entry = match self.trace(stream, allocs, trace, hash, shape)? {
            Traced::Cached(entry) => entry,
            Traced::Uncached(capture) => {
                let graph = capture.graph;
                self.uncached = Some(capture);
                return Ok((graph, Outcome::Uncached));
            }
        };
        for evicted in self.entries.drain(self.entries.len().min(self.capacity - 1)..) {
            self.leaks.append(evicted.destroy());
        }
        self.entries.insert(0, entry);
        Ok((self.entries[0].graph.graph()?, Outcome::Traced))
    }

    /// Moves the least recently used relocatable entry of this shape to `allocs` and to the
    /// front. An entry whose update fails part-way is dropped (the caller then captures).
    fn relocate(&mut self, shape: u64, allocs: &[Allocation], hash: u64) -> Result<Option<Graph>> {
        let same_shape = |e: &Entry| e.relocatable && e.shape == shape && e.key.iter().map(|a| a.size).eq(allocs.iter().map(|a| a.size));
        let Some(i) = self.entries.iter().rposition(same_shape) else { return Ok(None) };
        let report = self.entries[i].graph.update_allocations(allocs)?;
        if report.needs_rerecord && report.moved_allocations == 0 {
            // Refused with nothing changed (the library counted why): the entry stays for its
            // own key, and this one is captured.
            log::debug!("a cached trace of this shape cannot follow these moves; capturing");
            return Ok(None);
        }
        if report.needs_rerecord {
            log::warn!("relocating a cached trace failed part-way; dropping it and capturing again");
            counters::record_total(Event::Fallback(Fallback::RelocationFailed));
            let dropped = self.entries.remove(i);
            self.leaks.append(dropped.destroy());
            return Ok(None);
        }
        let entry = &mut self.entries[i];
        entry.key.clear();
        entry.key.extend_from_slice(allocs);
        entry.hash = hash;
        self.entries[..=i].rotate_right(1);
        Ok(Some(self.entries[0].graph.graph()?))
    }

    fn trace(
        &mut self,
        stream: Stream,
        allocs: &[Allocation],
        trace: impl FnOnce(Stream) -> Result<()>,
        hash: u64,
        shape: u64,
    ) -> Result<Traced> {
        self.rt.begin_capture(stream, CaptureMode::ThreadLocal)?;
        counters::record_total(Event::Capture);
        let traced = trace(stream);
        let captured = self.end_capture(stream);
        let captured = match (traced, captured) {
            (Ok(()), Ok(g)) => g,
            (Ok(()), Err(e)) => return Err(e),
            (Err(e), Ok(g)) => {
                self.destroy_graph(g);
                return Err(e);
            }
            // The trace's failure is what the caller must hear about, and the stream's state too.
            (Err(e), Err(end)) => return Err(Error::new(e.kind, format!("{e}; then {end}"))),
        };
        let capture = Capture { rt: self.rt, graph: captured };
        let (graph, relocatable) = match self.flatten(captured, allocs) {
            Ok(flattened) => flattened,
            Err(e) => {
                log::warn!("caching a traced command failed: {e}; its capture is returned uncached");
                return Ok(Traced::Uncached(capture));
            }
        };
        log::debug!("traced a command with {} allocation(s); relocatable: {relocatable}", allocs.len());
        Ok(Traced::Cached(Entry { hash, shape, key: allocs.to_vec(), graph: Box::new(graph), capture, relocatable }))
    }

    /// Ends the capture of the traced command. The caller's stream must not be left capturing
    /// behind its back: when the end fails and the stream still captures, the end is tried once
    /// more (its graph discarded: the capture already failed once), and the error says what
    /// state the stream is in.
    fn end_capture(&mut self, stream: Stream) -> Result<Graph> {
        let e = match self.rt.end_capture(stream) {
            Ok(g) => return Ok(g),
            Err(e) => e,
        };
        let left = match runtime::capture_after_failed_end(self.rt, stream) {
            CaptureAfterFailedEnd::Ended => String::from("the runtime ended the capture anyway: the stream is usable"),
            CaptureAfterFailedEnd::StillCapturing => match self.rt.end_capture(stream) {
                Ok(g) => {
                    self.destroy_graph(g);
                    String::from("a second end succeeded and its graph was discarded: the stream is usable")
                }
                Err(again) => match runtime::capture_after_failed_end(self.rt, stream) {
                    CaptureAfterFailedEnd::Ended => {
                        format!("a second end failed too ({again}) but ended the capture: the stream is usable")
                    }
                    _ => format!(
                        "a second end failed too ({again}): the stream may still be capturing; end its capture (and destroy the graph that returns) before using it"
                    ),
                },
            },
            CaptureAfterFailedEnd::Unknown(why) => {
                format!("whether the stream is still capturing is unknown ({why}); if it is, end its capture before using it")
            }
        };
        Err(Error::new(e.kind, format!("ending the capture of the traced command: {e}; {left}")))
    }

    /// The captured graph as a nested command buffer, and whether it can be relocated: every
    /// node was flattened and every non-empty allocation of the key is a patch site somewhere.
    fn flatten(&self, captured: Graph, allocs: &[Allocation]) -> Result<(CmdBuf, bool)> {
        // A nested command buffer is never instantiated: device 0 is only validated.
        let mut graph = CmdBuf::new(self.rt, 0, Kind::Nested)?;
        graph.set_allocations(allocs)?;
        let (_, report) = graph.add_flattened_child(&[], FlattenSource::Graph(captured))?;
        graph.finalize()?;
        let unseen: Vec<usize> = graph
            .sites_per_allocation()
            .iter()
            .zip(allocs)
            .enumerate()
            .filter(|(_, (n, a))| **n == 0 && a.size > 0)
            .map(|(i, _)| i)
            .collect();
        let opaque = graph.opaque_kernel();
        if let Some(reason) = &report.fallback {
            log::debug!("the trace cannot be relocated, it was not flattened: {reason}");
        } else if let Some(what) = opaque {
            log::debug!("the trace is never relocated (it serves hits, other addresses are captured again): it holds {what}");
            counters::record_total(Event::Fallback(Fallback::OpaqueKernel));
        } else if !unseen.is_empty() {
            log::debug!(
                "the trace cannot be relocated: allocation(s) {unseen:?} are the allocation of none of its addresses (absent from its nodes, or only at addresses another allocation holds too)"
            );
        }
        let relocatable = report.fallback.is_none() && opaque.is_none() && unseen.is_empty();
        Ok((graph, relocatable))
    }

    fn destroy_graph(&mut self, graph: Graph) {
        if let Err(e) = self.rt.graph_destroy(graph) {
            log::warn!("destroying a captured graph: {e}; trying again when the cache is freed");
            self.orphans.push(graph);
        }
    }
}

/// What [`TraceCache::trace`] made of a capture.
enum Traced {
    Cached(Entry),
    Uncached(Capture),
}

impl Drop for TraceCache {
    fn drop(&mut self) {
        self.release().log("dropping a trace cache");
    }
}

const SEED: u64 = 0x517c_c1b7_2722_0a95;

fn mix(h: u64, x: u64) -> u64 {
    (h.rotate_left(5) ^ x).wrapping_mul(SEED)
}

/// Hash of the (base, size) list.
fn key_hash(allocs: &[Allocation]) -> u64 {
    allocs.iter().fold(allocs.len() as u64, |h, a| mix(mix(h, a.base), a.size))
}

/// Hash of the sizes only: keys that one relocation can turn into each other.
fn shape_hash(allocs: &[Allocation]) -> u64 {
    allocs.iter().fold(allocs.len() as u64, |h, a| mix(h, a.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(list: &[(u64, u64)]) -> Vec<Allocation> {
        list.iter().map(|&(base, size)| Allocation { base, size }).collect()
    }

    #[test]
    fn hashes_separate_bases_and_order_while_shapes_ignore_bases() {
        let a = key(&[(0x1000, 64), (0x2000, 128)]);
        let moved = key(&[(0x9000, 64), (0x2000, 128)]);
        let swapped = key(&[(0x2000, 128), (0x1000, 64)]);
        assert_ne!(key_hash(&a), key_hash(&moved));
        assert_ne!(key_hash(&a), key_hash(&swapped));
        assert_eq!(shape_hash(&a), shape_hash(&moved));
        assert_ne!(shape_hash(&a), shape_hash(&swapped));
        assert_ne!(shape_hash(&a), shape_hash(&a[..1]));
    }
}

//! Templates handed out as raw graphs ([`CmdBuf::graph`](super::CmdBuf::graph)), each with the
//! graphs its command buffer keeps for what its nodes may read (`CmdBuf::kept`).
//!
//! A caller may give such a template back as a raw graph: XLA flattens or clones the trace
//! cache's graphs that way. A clone of the template carries the template's own user objects, not
//! those of the graphs kept beside it (a trace-cache entry's template is rebuilt node by node from
//! a capture; the capture, which owns the collective library's work buffers, is kept beside it).
//! So whatever embeds or flattens a raw graph also keeps clones of what is published for it.
//!
//! A template whose memcpy nodes the library changed (`CmdBuf::memcpy_set`) is published as such
//! too: on HIP 7.2 such a node reports the parameters it was created with, so flattening the
//! template must not read them back. A graph that embeds a clone of it cannot be told by the
//! clone, so flattening reads back no memcpy node of a nested child graph there (`flatten.rs`).
//!
//! Each template's entry has a lock of its own, held while its graphs are cloned; a command buffer
//! replaces or withdraws its entry under that lock before it destroys or retires a kept graph, so
//! a graph is never cloned after its destruction, even by another thread embedding the template
//! while its command buffer is updated. The table of entries is locked only to find or change an
//! entry, never during a clone, so clones of different templates (every device's trace caches)
//! run at once.

use crate::error::Result;
use crate::runtime::{Graph, Runtime};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What goes with a published template.
#[derive(Default)]
struct Published {
    kept: Vec<Graph>,
    memcpy_set: bool,
}

type Entry = Arc<Mutex<Published>>;

static PUBLISHED: Mutex<Option<HashMap<Graph, Entry>>> = Mutex::new(None);

/// A panic while a lock was held left what it guards whole (every change is one insert, remove
/// or assignment).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The entry of `graph`, if it is a published template.
fn entry(graph: Graph) -> Option<Entry> {
    lock(&PUBLISHED).as_ref().and_then(|t| t.get(&graph).cloned())
}

/// Records that `template` goes with `kept` and whether a memcpy node in it was changed since it
/// was made (nothing is kept when neither says anything), replacing what it went with: once this
/// returns, no clone of the old list is in progress or will start.
pub fn publish(template: Graph, kept: Vec<Graph>, memcpy_set: bool) {
    let entry = {
        let mut table = lock(&PUBLISHED);
        let table = table.get_or_insert_with(HashMap::new);
        if kept.is_empty() && !memcpy_set { table.remove(&template) } else { Some(table.entry(template).or_default().clone()) }
    };
    if let Some(entry) = entry {
        *lock(&entry) = Published { kept, memcpy_set };
    }
}

/// Forgets `template` (its command buffer is about to destroy it or what it keeps).
pub fn withdraw(template: Graph) {
    publish(template, Vec::new(), false);
}

/// Whether `graph` is a published template a memcpy node of which was changed since it was made.
pub fn memcpy_set(graph: Graph) -> bool {
    entry(graph).is_some_and(|e| lock(&e).memcpy_set)
}

/// Clones of the graphs published with `graph` (none when it is not a published template); on a
/// failure the clones made so far are destroyed and the error returned.
pub fn clone_kept(rt: &dyn Runtime, graph: Graph) -> Result<Vec<Graph>> {
    let Some(entry) = entry(graph) else { return Ok(Vec::new()) };
    // Withdrawn since (emptied under this lock): nothing to clone.
    let published = lock(&entry);
    let mut clones = Vec::with_capacity(published.kept.len());
    for &g in published.kept.iter() {
        match rt.graph_clone(g) {
            Ok(clone) => clones.push(clone),
            Err(e) => {
                for clone in clones {
                    if let Err(e) = rt.graph_destroy(clone) {
                        log::warn!("destroying an unused clone: {e}; it is leaked");
                    }
                }
                return Err(e.context("cloning a graph kept beside a published template"));
            }
        }
    }
    Ok(clones)
}

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
//! too: on HIP from 7.2 such a node reports the parameters it was created with, so flattening the
//! template must not read them back, and a graph that embeds it inherits the mark.
//!
//! Every access is under one lock, and a command buffer withdraws or replaces what it published
//! before it destroys or retires a kept graph, so a graph is never cloned after its destruction.

use crate::error::Result;
use crate::runtime::{Graph, Runtime};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// What goes with a published template.
struct Published {
    kept: Vec<Graph>,
    memcpy_set: bool,
}

static PUBLISHED: Mutex<Option<HashMap<Graph, Published>>> = Mutex::new(None);

/// The table; a panic while it was held left it whole (every change is one insert or remove).
fn table() -> MutexGuard<'static, Option<HashMap<Graph, Published>>> {
    PUBLISHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Records that `template` goes with `kept` and whether a memcpy node in it was changed since it
/// was made (nothing is kept when neither says anything).
pub fn publish(template: Graph, kept: Vec<Graph>, memcpy_set: bool) {
    let mut table = table();
    if !kept.is_empty() || memcpy_set {
        table.get_or_insert_with(HashMap::new).insert(template, Published { kept, memcpy_set });
    } else if let Some(t) = table.as_mut() {
        t.remove(&template);
    }
}

/// Forgets `template` (its command buffer is about to destroy it or what it keeps).
pub fn withdraw(template: Graph) {
    publish(template, Vec::new(), false);
}

/// Whether `graph` is a published template a memcpy node of which was changed since it was made.
pub fn memcpy_set(graph: Graph) -> bool {
    table().as_ref().and_then(|t| t.get(&graph)).is_some_and(|p| p.memcpy_set)
}

/// Clones of the graphs published with `graph` (none when it is not a published template); on a
/// failure the clones made so far are destroyed and the error returned.
pub fn clone_kept(rt: &dyn Runtime, graph: Graph) -> Result<Vec<Graph>> {
    let table = table();
    let Some(Published { kept, .. }) = table.as_ref().and_then(|t| t.get(&graph)) else { return Ok(Vec::new()) };
    let mut clones = Vec::with_capacity(kept.len());
    for &g in kept {
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

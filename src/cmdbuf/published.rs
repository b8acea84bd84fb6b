//! Templates handed out as raw graphs ([`CmdBuf::graph`](super::CmdBuf::graph)), each with the
//! graphs its command buffer keeps for what its nodes may read (`CmdBuf::kept`).
//!
//! A caller may give such a template back as a raw graph: XLA flattens or clones the trace
//! cache's graphs that way. A clone of the template carries the template's own user objects, not
//! those of the graphs kept beside it (a trace-cache entry's template is rebuilt node by node from
//! a capture; the capture, which owns the collective library's work buffers, is kept beside it).
//! So whatever embeds or flattens a raw graph also keeps clones of what is published for it.
//!
//! Every access is under one lock, and a command buffer withdraws or replaces what it published
//! before it destroys or retires a kept graph, so a graph is never cloned after its destruction.

use crate::error::Result;
use crate::runtime::{Graph, Runtime};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

static PUBLISHED: Mutex<Option<HashMap<Graph, Vec<Graph>>>> = Mutex::new(None);

/// The table; a panic while it was held left it whole (every change is one insert or remove).
fn table() -> MutexGuard<'static, Option<HashMap<Graph, Vec<Graph>>>> {
    PUBLISHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Records that `template` goes with `kept` (nothing when `kept` is empty).
pub fn publish(template: Graph, kept: Vec<Graph>) {
    let mut table = table();
    if !kept.is_empty() {
        table.get_or_insert_with(HashMap::new).insert(template, kept);
    } else if let Some(t) = table.as_mut() {
        t.remove(&template);
    }
}

/// Forgets `template` (its command buffer is about to destroy it or what it keeps).
pub fn withdraw(template: Graph) {
    publish(template, Vec::new());
}

/// Clones of the graphs published with `graph` (none when it is not a published template); on a
/// failure the clones made so far are destroyed and the error returned.
pub fn clone_kept(rt: &dyn Runtime, graph: Graph) -> Result<Vec<Graph>> {
    let table = table();
    let Some(kept) = table.as_ref().and_then(|t| t.get(&graph)) else { return Ok(Vec::new()) };
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

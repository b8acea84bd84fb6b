//! Templates handed out as raw graphs ([`CmdBuf::graph`](super::CmdBuf::graph)), each with the
//! graphs its command buffer keeps for what its nodes may read (`CmdBuf::kept`).
//!
//! A caller may give such a template back as a raw graph: XLA flattens or clones the trace
//! cache's graphs that way. A clone of the template carries the template's own user objects, not
//! those of the graphs kept beside it (a trace-cache entry's template is rebuilt node by node from
//! a capture; the capture, which owns the collective library's work buffers, is kept beside it).
//! So whatever embeds or flattens a raw graph also keeps clones of what is published for it.
//!
//! Each template's list has a lock of its own, held while its graphs are cloned; a command buffer
//! replaces or withdraws its list under that lock before it destroys or retires a kept graph, so
//! a graph is never cloned after its destruction, even by another thread embedding the template
//! while its command buffer is updated. The table of lists is locked only to find or change a
//! list, never during a clone, so clones of different templates (every device's trace caches)
//! run at once.

use crate::error::Result;
use crate::runtime::{Graph, Runtime};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

type List = Arc<Mutex<Vec<Graph>>>;

static PUBLISHED: Mutex<Option<HashMap<Graph, List>>> = Mutex::new(None);

/// A panic while a lock was held left what it guards whole (every change is one insert, remove
/// or assignment).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Records that `template` goes with `kept` (nothing when `kept` is empty), replacing what it
/// went with: once this returns, no clone of the old list is in progress or will start.
pub fn publish(template: Graph, kept: Vec<Graph>) {
    let list = {
        let mut table = lock(&PUBLISHED);
        let table = table.get_or_insert_with(HashMap::new);
        if kept.is_empty() { table.remove(&template) } else { Some(table.entry(template).or_default().clone()) }
    };
    if let Some(list) = list {
        *lock(&list) = kept;
    }
}

/// Forgets `template` (its command buffer is about to destroy it or what it keeps).
pub fn withdraw(template: Graph) {
    publish(template, Vec::new());
}

/// Clones of the graphs published with `graph` (none when it is not a published template); on a
/// failure the clones made so far are destroyed and the error returned.
pub fn clone_kept(rt: &dyn Runtime, graph: Graph) -> Result<Vec<Graph>> {
    let Some(list) = lock(&PUBLISHED).as_ref().and_then(|t| t.get(&graph).cloned()) else { return Ok(Vec::new()) };
    // Withdrawn since (emptied under this lock): nothing to clone.
    let kept = lock(&list);
    let mut clones = Vec::with_capacity(kept.len());
    for &g in kept.iter() {
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

//! The life cycle, mirroring XLA's command buffers:
//! recording → finalized → updating → finalized → …, with capture as a detour from an empty
//! recording buffer.

use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Recording,
    /// Capturing `stream` in thread-local mode, begun by thread number `thread` (see
    /// [`this_thread`]): only that thread can end it.
    Capturing(Stream, u64),
    Finalized,
    Updating,
}

/// The calling thread's number, distinct for each thread of the process (never reused). Not
/// `std::thread::current()`, which on a thread that never asked before allocates a handle and
/// registers its destructor: asked first from a thread's pthread key destructor or an atexit
/// handler (a C caller's cleanup), the destructor never runs and both leak.
pub fn this_thread() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        // No destructor: usable at any point of a thread's exit.
        static NUMBER: Cell<u64> = const { Cell::new(0) };
    }
    NUMBER.with(|n| {
        if n.get() == 0 {
            n.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        n.get()
    })
}

/// What a call wants to do; [`State::allow`] says whether the state permits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Update,
    SetAllocations,
    CaptureBegin,
    CaptureEnd,
    Finalize,
    BeginUpdate,
    Launch,
    UpdateAllocations,
    Embed,
    /// Handing out the graph, the executable graph or counts: never during a capture, whose end
    /// replaces the graph.
    Read,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Recording => "recording",
            State::Capturing(..) => "capturing",
            State::Finalized => "finalized",
            State::Updating => "updating",
        }
    }

    pub fn allow(self, op: Op) -> Result<()> {
        use Op::*;
        use State::*;
        let (ok, hint) = match op {
            Add => (self == Recording, "nodes can only be added while recording; after finalize, update existing nodes"),
            Update => (self == Updating, "nodes are updated between begin_update and finalize"),
            SetAllocations => {
                (matches!(self, Recording | Updating), "a finalized command buffer moves allocations with update_allocations")
            }
            CaptureBegin => (self == Recording, "capture starts from a recording command buffer with no nodes"),
            CaptureEnd => (matches!(self, Capturing(..)), "no capture is in progress"),
            Finalize => (matches!(self, Recording | Updating), "only a recording or updating command buffer can be finalized"),
            BeginUpdate => (self == Finalized, "an update starts from a finalized command buffer"),
            Launch => (self == Finalized, "only a finalized command buffer can be launched"),
            UpdateAllocations => (self == Finalized, "allocations are moved on a finalized command buffer"),
            Embed => (self == Finalized, "a command buffer must be finalized before it is added as a child"),
            Read => (!matches!(self, Capturing(..)), "nothing is read while a capture is in progress; end it with capture_end first"),
        };
        if ok { Ok(()) } else { Err(Error::invalid_state(format!("the command buffer is {}: {hint}", self.name()))) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_keeps_its_own_number() {
        let here = this_thread();
        assert_eq!(this_thread(), here);
        let there: Vec<u64> = (0..4).map(|_| std::thread::spawn(this_thread).join().unwrap()).collect();
        let mut all = there.clone();
        all.push(here);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 5, "{here} and {there:?}");
    }

    #[test]
    fn each_state_allows_exactly_its_operations() {
        use Op::*;
        let all = [Add, Update, SetAllocations, CaptureBegin, CaptureEnd, Finalize, BeginUpdate, Launch, UpdateAllocations, Embed, Read];
        let capturing = State::Capturing(Stream(std::ptr::null_mut()), this_thread());
        let allowed: [(State, &[Op]); 4] = [
            (State::Recording, &[Add, SetAllocations, CaptureBegin, Finalize, Read]),
            (capturing, &[CaptureEnd]),
            (State::Finalized, &[BeginUpdate, Launch, UpdateAllocations, Embed, Read]),
            (State::Updating, &[Update, SetAllocations, Finalize, Read]),
        ];
        for (state, ops) in allowed {
            for op in all {
                let r = state.allow(op);
                assert_eq!(r.is_ok(), ops.contains(&op), "{state:?} {op:?}");
                if let Err(e) = r {
                    assert!(e.message.contains(state.name()), "{}", e.message);
                }
            }
        }
    }
}

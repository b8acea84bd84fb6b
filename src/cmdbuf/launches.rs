//! Which launches of a command buffer's executable graphs may still run, and the runtime objects
//! that wait for them: an executable graph replaced by a re-instantiation (`budget.rs`), a graph
//! kept for what a flattened or child node may read (user objects, see `flatten.rs`) once an
//! update replaced it, and at the free everything the command buffer owns (`graveyard.rs`). Each
//! is destroyed only after every launch that may have used it has finished, which the host learns
//! by querying events, never by waiting on them.
//!
//! Launches fall into generations, the launches between two replacements, numbered from 1. Each
//! launch is followed by an event of its own, recorded right after it on its stream (a mark). An
//! event is used again only once it has completed, never re-recorded while the launch it follows
//! may run: a later launch on the same stream handle may be on another stream (another thread's
//! per-thread stream, the default stream under another device, a stream made at the address of a
//! destroyed one), so that no earlier launch is ever forgotten. (It also makes the runtime calls
//! of a launch the same whatever the GPU has finished: the software GPU's fault matrix counts
//! them.) A replacement closes the open generation: each of its marks completes once the launches
//! before it on its stream have finished. An object is in service from a generation on (`since`: the one open when it
//! was made or given to the executable graph; 0 from the start) until the generation its
//! replacement closes, and waits only for the generations of that span.
//!
//! A launch that no event can follow (its record or the event's creation failed, the launch
//! itself failed part-way, a capture query that failed) leaves its generation untracked: nothing
//! the library can observe proves that it finished (a later event on the same handle does not,
//! see above). What was in service during an untracked generation is kept instead of destroyed
//! when it is replaced (counted as the fallback `kept_untracked`, logged once), for as long as
//! the command buffer lives, and leaked when it is freed, unless the caller promises that every
//! launch has finished (`rcb_cmdbuf_launches_done`). No update is ever refused for it, and what is
//! put in service after the untracked generation is followed as usual. Kept executables do not
//! count towards the budget's limit of waiting ones (`budget::MAX_RETIRED`), which one lost
//! event would fill for good; they have a cap of their own (`budget::MAX_KEPT_EXECS`), past
//! which the budget stops re-instantiating, so that launches that are never followed (every
//! event record failing) do not keep an executable per re-instantiation.
//!
//! Each generation holds any number of marks: past [`SCAN_AT`] (and then past twice what the last
//! scan left) the marks whose event completed are dropped and their events reused, so a
//! generation follows any number of streams and launches in flight at a constant cost per launch
//! on average (one event query), with about as many events as launches in flight. Past [`MAX_CLOSED`] closed generations a replacement joins the newest one instead
//! of closing another (what waited for it waits for these launches too, which only delays it),
//! so a long-running process holds a bounded number of generations.
//!
//! The events are queried at a launch, a replacement, and by the graveyard. The runtime makes
//! those calls with the thread in relaxed capture mode (`Runtime::event_is_complete`), so that
//! they break no capture in progress elsewhere; a capture begun on a stream where one of the
//! events was recorded is still broken on ROCm (clr checks the event's stream), which
//! `rcb_cmdbuf_launch` tells the caller not to do.

use crate::counters::{Counters, Event as Counted, Fallback};
use crate::error::Leaks;
use crate::runtime::{Event, Exec, Graph, Runtime, Stream};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

/// Marks a generation holds before it drops those whose event has completed.
pub const SCAN_AT: usize = 8;

/// Closed generations that may still be running. A replacement that would close one more joins
/// the newest instead.
pub const MAX_CLOSED: usize = 16;

/// A runtime object destroyed once the launches that may use it have finished.
#[derive(Clone, Copy)]
pub enum Doomed {
    Exec(Exec),
    Graph(Graph),
}

/// The event recorded right after a launch, on a stream of `device`.
#[derive(Clone, Copy)]
struct Mark {
    device: i32,
    event: Event,
}

/// A generation's marks, and how many it holds before the completed ones are dropped.
struct Marks {
    marks: Vec<Mark>,
    scan_at: usize,
}

impl Marks {
    fn new() -> Self {
        Self { marks: Vec::new(), scan_at: SCAN_AT }
    }

    /// Past the threshold, moves the marks whose event has completed to `spare`, and doubles the
    /// threshold past what is left.
    fn trim(&mut self, rt: &dyn Runtime, spare: &mut Vec<(i32, Event)>) {
        if self.marks.len() < self.scan_at {
            return;
        }
        self.marks.retain(|m| {
            !finished(rt, m.event) || {
                spare.push((m.device, m.event));
                false
            }
        });
        self.scan_at = (2 * self.marks.len()).max(SCAN_AT);
    }
}

/// A closed generation not yet known to have finished.
struct Generation {
    /// The generation numbers it stands for: more than one once later ones joined it.
    first: u64,
    last: u64,
    marks: Marks,
}

/// A replaced object and the generations it was in service in.
struct Waiting {
    since: u64,
    until: u64,
    doomed: Doomed,
}

/// A warning about a launch the library could not follow, or objects kept for one, is logged
/// once per process; later ones at debug.
static WARNED_LOST: AtomicBool = AtomicBool::new(false);
static WARNED_KEPT: AtomicBool = AtomicBool::new(false);

/// A command buffer's launches and what waits for them. Not thread-safe (the command buffer's
/// `&mut self` serialises it; the graveyard's lock once it is freed).
pub struct Launches {
    /// The command buffer's device: events for streams whose device the runtime cannot say.
    device: i32,
    open: Marks,
    /// A launch of the open generation could not be followed.
    open_untracked: bool,
    /// The open generation's number; closed ones have lower numbers.
    open_number: u64,
    /// Closed generations not yet known to have finished, oldest first.
    closed: VecDeque<Generation>,
    /// The newest generation with a launch that could not be followed.
    last_untracked: Option<u64>,
    /// Replaced objects waiting for their generations to finish.
    waiting: Vec<Waiting>,
    /// Replaced objects in service during an untracked generation.
    kept: Vec<Doomed>,
    /// Events no mark uses (completed, or of a generation that proves nothing), by device.
    spare: Vec<(i32, Event)>,
    /// Objects the runtime failed to destroy: destroyed again at the free.
    orphans: Vec<Doomed>,
}

impl Launches {
    pub fn new(device: i32) -> Self {
        Self {
            device,
            open: Marks::new(),
            open_untracked: false,
            open_number: 1,
            closed: VecDeque::new(),
            last_untracked: None,
            waiting: Vec::new(),
            kept: Vec::new(),
            spare: Vec::new(),
            orphans: Vec::new(),
        }
    }

    /// The open generation: what is put in service now is in service from it on.
    pub fn now(&self) -> u64 {
        self.open_number
    }

    /// Replaced executables still waiting for their launches (kept ones excluded).
    pub fn waiting_execs(&self) -> usize {
        self.waiting.iter().filter(|w| matches!(w.doomed, Doomed::Exec(_))).count()
    }

    /// Replaced executables kept for launches the library could not follow.
    pub fn kept_execs(&self) -> usize {
        self.kept.iter().filter(|d| matches!(d, Doomed::Exec(_))).count()
    }

    /// Whether anything waits (so that a launch first looks for what it can destroy).
    pub fn any_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Follows a launch just made on `stream`, which was not capturing (`capture_known`) or of
    /// which the runtime could not say (an event recorded there might join a capture).
    pub fn launched(&mut self, rt: &dyn Runtime, stream: Stream, capture_known: bool) {
        if !capture_known {
            return self.lose_track("whether the stream is capturing is unknown");
        }
        self.open.trim(rt, &mut self.spare);
        // An event records only on a stream of its own device.
        let device = rt.stream_device(stream).unwrap_or(self.device);
        let event = match self.spare.iter().position(|&(d, _)| d == device) {
            Some(at) => self.spare.swap_remove(at).1,
            None => match rt.event_create(device) {
                Ok(event) => event,
                Err(e) => return self.lose_track(&e.to_string()),
            },
        };
        match rt.event_record(event, stream) {
            Ok(()) => self.open.marks.push(Mark { device, event }),
            Err(e) => {
                self.spare.push((device, event));
                self.lose_track(&e.to_string());
            }
        }
    }

    /// A launch that failed: the runtime may have queued part of its work all the same.
    pub fn launch_failed(&mut self) {
        self.lose_track("the launch failed, and part of it may run");
    }

    fn lose_track(&mut self, why: &str) {
        if WARNED_LOST.swap(true, Ordering::Relaxed) {
            log::debug!("cannot follow a launch of an executable graph: {why}");
        } else {
            log::warn!(
                "cannot follow a launch of an executable graph ({why}); what it may use is kept, not destroyed, when an update replaces it (counted as kept_untracked; rcb_cmdbuf_launches_done gives it back)"
            );
        }
        self.open_untracked = true;
    }

    /// Takes `exec`, in service since generation `since`, out of service: destroyed once the
    /// launches that may use it have finished.
    pub fn retire_exec(&mut self, rt: &dyn Runtime, exec: Exec, since: u64, counters: &mut Counters) {
        self.retire(rt, Doomed::Exec(exec), since, counters);
    }

    /// Gives up `graph`, in service since generation `since`.
    pub fn retire_graph(&mut self, rt: &dyn Runtime, graph: Graph, since: u64, counters: &mut Counters) {
        self.retire(rt, Doomed::Graph(graph), since, counters);
    }

    fn retire(&mut self, rt: &dyn Runtime, doomed: Doomed, since: u64, counters: &mut Counters) {
        self.close_open(rt);
        self.wait(doomed, since, counters);
        self.reap(rt, counters);
    }

    /// Files `doomed`, in service from `since` up to the newest closed generation.
    fn wait(&mut self, doomed: Doomed, since: u64, counters: &mut Counters) {
        if self.last_untracked.is_some_and(|u| since <= u) {
            counters.record(Counted::Fallback(Fallback::KeptUntracked));
            if !WARNED_KEPT.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "keeping a replaced graph or executable graph that a launch the library could not follow may still use; it is destroyed only after rcb_cmdbuf_launches_done, and leaked when its command buffer is freed"
                );
            }
            self.kept.push(doomed);
            return;
        }
        self.waiting.push(Waiting { since, until: self.open_number - 1, doomed });
    }

    /// Closes the open generation when it has launches (something new goes in service after
    /// them): it becomes untracked history, a closed generation, or part of the newest closed one.
    pub fn close_open(&mut self, rt: &dyn Runtime) {
        if self.open.marks.is_empty() && !self.open_untracked {
            return;
        }
        let number = self.open_number;
        self.open_number += 1;
        let marks = std::mem::replace(&mut self.open, Marks::new());
        if std::mem::take(&mut self.open_untracked) {
            // Its marks prove nothing: their events are reused.
            self.last_untracked = Some(number);
            self.spare.extend(marks.marks.iter().map(|m| (m.device, m.event)));
            return;
        }
        let full = self.closed.len() >= MAX_CLOSED;
        match self.closed.back_mut().filter(|_| full) {
            Some(newest) => {
                newest.last = number;
                newest.marks.marks.extend(marks.marks);
                newest.marks.trim(rt, &mut self.spare);
            }
            None => self.closed.push_back(Generation { first: number, last: number, marks }),
        }
    }

    /// Destroys what waits for generations that have all finished.
    pub fn reap(&mut self, rt: &dyn Runtime, counters: &mut Counters) {
        self.reap_within(rt, usize::MAX, counters, None);
    }

    /// [`Self::reap`] with at most `queries` event queries; returns whether nothing waits. A
    /// failed destroy goes to `leaks` when given (the object is leaked), else it is tried again
    /// at the free.
    pub fn reap_within(&mut self, rt: &dyn Runtime, mut queries: usize, counters: &mut Counters, mut leaks: Option<&mut Leaks>) -> bool {
        let spare = &mut self.spare;
        'generations: for generation in self.closed.iter_mut() {
            while let Some(&mark) = generation.marks.marks.last() {
                if queries == 0 {
                    break 'generations;
                }
                queries -= 1;
                if !finished(rt, mark.event) {
                    break;
                }
                spare.push((mark.device, mark.event));
                generation.marks.marks.pop();
            }
        }
        self.closed.retain(|g| !g.marks.marks.is_empty());
        let closed = &self.closed;
        let running = |w: &Waiting| closed.iter().any(|g| g.first <= w.until && w.since <= g.last);
        let (still, done): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.waiting).into_iter().partition(running);
        self.waiting = still;
        for w in done {
            match leaks.as_deref_mut() {
                Some(leaks) => leaks.note(destroy_now(rt, w.doomed, counters)),
                None => self.destroy(rt, w.doomed, counters),
            }
        }
        self.waiting.is_empty()
    }

    fn destroy(&mut self, rt: &dyn Runtime, doomed: Doomed, counters: &mut Counters) {
        if let Err(e) = destroy_now(rt, doomed, counters) {
            log::warn!("destroying a replaced graph or executable graph: {e}; trying again when its command buffer is freed");
            self.orphans.push(doomed);
        }
    }

    /// The caller's promise that every launch made so far has finished: destroys what waits and
    /// what is kept, and forgets the generations (an untracked one included).
    pub fn all_finished(&mut self, rt: &dyn Runtime, counters: &mut Counters) {
        let marks =
            std::mem::replace(&mut self.open, Marks::new()).marks.into_iter().chain(self.closed.drain(..).flat_map(|g| g.marks.marks));
        self.spare.extend(marks.map(|m| (m.device, m.event)).collect::<Vec<_>>());
        self.open_untracked = false;
        self.last_untracked = None;
        let doomed: Vec<Doomed> = std::mem::take(&mut self.waiting).into_iter().map(|w| w.doomed).chain(self.kept.drain(..)).collect();
        for d in doomed {
            self.destroy(rt, d, counters);
        }
    }

    /// The command buffer is freed: `owned` (its executable graph and graphs, each with the
    /// generation it is in service since) wait like replaced objects. What no launch may still
    /// use is destroyed now (a failure goes to `leaks`); what launches may still use goes to the
    /// graveyard with the events that follow them; what a launch the library could not follow
    /// may use is leaked (counted as `kept_untracked`, logged).
    pub fn free(mut self, rt: &'static dyn Runtime, owned: Vec<(Doomed, u64)>, counters: &mut Counters, leaks: &mut Leaks) {
        self.close_open(rt);
        for (doomed, since) in owned {
            self.wait(doomed, since, counters);
        }
        for d in std::mem::take(&mut self.orphans) {
            leaks.note(destroy_now(rt, d, counters));
        }
        let done = self.reap_within(rt, usize::MAX, counters, Some(leaks));
        if !self.kept.is_empty() {
            log::warn!(
                "freeing a command buffer leaks {} graph(s) or executable graph(s) that a launch the library could not follow may still use",
                self.kept.len()
            );
            self.kept.clear();
        }
        if done {
            self.release_events(rt, counters, leaks);
        } else {
            super::graveyard::bury(rt, self);
        }
    }

    /// Destroys every event and what the runtime failed to destroy before: nothing waits any
    /// more (a freed command buffer's tracking leaving the graveyard).
    pub fn release_events(&mut self, rt: &dyn Runtime, counters: &mut Counters, leaks: &mut Leaks) {
        for d in std::mem::take(&mut self.orphans) {
            leaks.note(destroy_now(rt, d, counters));
        }
        let marks =
            std::mem::replace(&mut self.open, Marks::new()).marks.into_iter().chain(self.closed.drain(..).flat_map(|g| g.marks.marks));
        let events: Vec<Event> = marks.map(|m| m.event).chain(self.spare.drain(..).map(|(_, e)| e)).collect();
        for e in events {
            leaks.note(rt.event_destroy(e));
        }
    }
}

/// Destroys `doomed`, counting a retired executable graph.
fn destroy_now(rt: &dyn Runtime, doomed: Doomed, counters: &mut Counters) -> crate::error::Result<()> {
    match doomed {
        Doomed::Exec(exec) => rt.exec_destroy(exec).inspect(|()| counters.record(Counted::Retirement)),
        Doomed::Graph(graph) => rt.graph_destroy(graph),
    }
}

/// Whether the launches before `event`'s last record have finished. A failed query counts as
/// not yet (asked again later).
fn finished(rt: &dyn Runtime, event: Event) -> bool {
    rt.event_is_complete(event).unwrap_or(false)
}

//! Which launches of a command buffer's executable graphs may still run, and the runtime objects
//! that wait for them: an executable graph replaced by a re-instantiation (`budget.rs`), and a
//! graph kept for what a flattened or child node may read (user objects, see `flatten.rs`) once
//! an update replaced it. Each is destroyed only after every launch made before it was replaced
//! has finished, which the host learns by querying events, never by waiting on them.
//!
//! Launches fall into generations, the launches between two replacements. In the open
//! generation each stream's latest launch is followed by one event, re-recorded by its later
//! launches there. A replacement closes the generation: its events are never recorded again, so
//! each completes once everything launched before it on its stream has finished. A replaced
//! object waits for the generation closed with it and every earlier one.
//!
//! A launch that no event can follow (the runtime refused one, too many streams at once, a
//! capture query that failed, another device's stream) leaves its generation untracked: nothing
//! the library can observe ever proves that it finished (a later event on the same handle does
//! not: the caller may have destroyed that stream and made another at the same address), so what
//! waits for it is destroyed only with the command buffer. That is bounded: at most
//! `budget::MAX_RETIRED` executables wait at all (past it the budget pushes in place), and at
//! most [`MAX_STUCK_GRAPHS`] graphs wait behind an untracked generation; a replacement that would
//! make more wait there is refused before anything changes ([`Launches::room_for_graphs`]).
//! Launches into a capturing stream are refused before they are made (`CmdBuf::launch`). Past
//! [`MAX_CLOSED`] generations a replacement joins the newest one instead of closing another
//! (each stream keeps its latest event there, which completes after the earlier ones), so a
//! replacement behind tracked launches is never refused and a long-running process holds a
//! bounded number of generations and events.
//!
//! The events are queried, never waited on, at a launch and at a replacement. The runtime makes
//! those calls with the thread in relaxed capture mode (`Runtime::event_is_complete`), so that
//! they break no capture in progress elsewhere; a capture begun on a stream where one of the
//! events was recorded is still broken on ROCm (clr checks the event's stream), which
//! `rcb_cmdbuf_launch` tells the caller not to do.

use crate::counters::{Counters, Event as Counted};
use crate::error::{Error, Leaks, Result};
use crate::runtime::{Event, Exec, Graph, Runtime, Stream};
use std::collections::VecDeque;

/// Streams (or launches into a per-thread or default stream handle) one generation follows at
/// once. Past it the entries whose event has completed are dropped; if none has, the
/// generation is untracked.
pub const MAX_FOLLOWED: usize = 64;

/// Closed generations that may still be running. A replacement that would close one more joins
/// the newest instead.
pub const MAX_CLOSED: usize = 16;

/// Graphs that may wait behind an untracked generation. A replacement that would make more wait
/// there is refused: they can only go with the command buffer.
pub const MAX_STUCK_GRAPHS: usize = 64;

/// A runtime object destroyed once the launches before its replacement have finished.
enum Doomed {
    Exec(Exec),
    Graph(Graph),
}

struct Generation {
    /// The latest event of each stream followed (one per launch for per-thread and default
    /// stream handles).
    events: Vec<(Stream, Event)>,
    untracked: bool,
}

/// A command buffer's launches and what waits for them. Not thread-safe (the command buffer's
/// `&mut self` serialises it).
pub struct Launches {
    device: i32,
    /// Whether launches are followed by events: only where something may be replaced later
    /// (see [`Self::follow`]); an unfollowed launch leaves its generation untracked.
    on: bool,
    /// The open generation: each followed stream and the event after its latest launch.
    open: Vec<(Stream, Event)>,
    open_untracked: bool,
    /// Closed generations not yet known to have finished, oldest first. They are numbered
    /// consecutively; the newest has number `closed_total`, so every generation numbered below
    /// `closed_total - closed.len() + 1` has finished.
    closed: VecDeque<Generation>,
    closed_total: u64,
    /// Objects waiting, each for the generations up to its number (non-decreasing).
    waiting: VecDeque<(u64, Doomed)>,
    waiting_execs: usize,
    /// Events of finished generations, for reuse.
    spare: Vec<Event>,
    /// Objects the runtime failed to destroy: destroyed again by [`Self::release`].
    orphans: Vec<Doomed>,
    warned: bool,
}

impl Launches {
    pub fn new(device: i32) -> Self {
        Self {
            device,
            on: false,
            open: Vec::new(),
            open_untracked: false,
            closed: VecDeque::new(),
            closed_total: 0,
            waiting: VecDeque::new(),
            waiting_execs: 0,
            spare: Vec::new(),
            orphans: Vec::new(),
            warned: false,
        }
    }

    /// Follows launches from now on; set before the first launch, at the first finalize, when the
    /// command buffer may replace something a launch uses.
    pub fn follow(&mut self) {
        self.on = true;
    }

    /// Replaced executables still waiting for their launches.
    pub fn waiting_execs(&self) -> usize {
        self.waiting_execs
    }

    /// Whether anything waits (so that a launch first looks for what it can destroy).
    pub fn any_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    fn open_has_launches(&self) -> bool {
        !self.open.is_empty() || self.open_untracked
    }

    /// Follows a launch just made on `stream`, which was not capturing (`capture_known`) or of
    /// which the runtime could not say (an event recorded there might join a capture).
    pub fn launched(&mut self, rt: &dyn Runtime, stream: Stream, capture_known: bool) {
        if !self.on {
            self.open_untracked = true;
            return;
        }
        if !capture_known {
            return self.lose_track("whether the stream is capturing is unknown");
        }
        // A per-thread or default stream handle names another stream on another thread or
        // device: each launch into one gets its own event.
        let reuse = if stream.is_per_thread_or_default() { None } else { self.open.iter().position(|&(s, _)| s == stream) };
        let at = match reuse {
            Some(at) => at,
            None => {
                if self.open.len() >= MAX_FOLLOWED {
                    self.drop_finished_open(rt);
                    if self.open.len() >= MAX_FOLLOWED {
                        return self.lose_track(&format!("more than {MAX_FOLLOWED} streams run launches at once"));
                    }
                }
                match self.spare.pop().map_or_else(|| rt.event_create(self.device), Ok) {
                    Ok(event) => {
                        self.open.push((stream, event));
                        self.open.len() - 1
                    }
                    Err(e) => return self.lose_track(&e.to_string()),
                }
            }
        };
        if let Err(e) = rt.event_record(self.open[at].1, stream) {
            self.lose_track(&e.to_string());
        }
    }

    /// Drops the open generation's entries whose launches have finished.
    fn drop_finished_open(&mut self, rt: &dyn Runtime) {
        let spare = &mut self.spare;
        self.open.retain(|&(s, e)| {
            let finished = finished(rt, s, e);
            if finished {
                spare.push(e);
            }
            !finished
        });
    }

    fn lose_track(&mut self, why: &str) {
        if std::mem::replace(&mut self.warned, true) {
            log::debug!("cannot follow a launch of the executable graph: {why}");
        } else {
            log::warn!(
                "cannot follow a launch of the executable graph ({why}); what it may use is destroyed only with its command buffer, and at most {MAX_STUCK_GRAPHS} replaced graphs may wait for it"
            );
        }
        self.open_untracked = true;
    }

    /// Refuses, before anything changes, a replacement that would retire `graphs` graphs behind
    /// an untracked generation already holding [`MAX_STUCK_GRAPHS`] (or that would fill it past
    /// that). Destroys first what has finished.
    pub fn room_for_graphs(&mut self, rt: &dyn Runtime, graphs: usize, counters: &mut Counters) -> Result<()> {
        if graphs == 0 {
            return Ok(());
        }
        self.reap(rt, counters);
        // The number of the first generation nothing will ever find finished, once the
        // replacement has closed (or joined) the open one.
        let oldest = self.closed_total + 1 - self.closed.len() as u64;
        let first_untracked = match self.closed.iter().position(|g| g.untracked) {
            Some(i) => oldest + i as u64,
            None if self.open_untracked => {
                if self.closed.len() >= MAX_CLOSED {
                    self.closed_total
                } else {
                    self.closed_total + 1
                }
            }
            None => return Ok(()),
        };
        let stuck = self.waiting.iter().filter(|(n, d)| *n >= first_untracked && matches!(d, Doomed::Graph(_))).count();
        if stuck + graphs > MAX_STUCK_GRAPHS {
            return Err(Error::invalid_state(format!(
                "{stuck} replaced graph(s) already wait for a launch the library could not follow (it may still run, and only freeing the command buffer destroys them); replacing {graphs} more would pass the limit of {MAX_STUCK_GRAPHS}: synchronize the streams this command buffer was launched on, free it and record it again"
            )));
        }
        Ok(())
    }

    /// Takes `exec` out of service: destroyed once the launches made so far have finished.
    pub fn retire_exec(&mut self, rt: &dyn Runtime, exec: Exec, counters: &mut Counters) {
        self.waiting_execs += 1;
        self.retire(rt, Doomed::Exec(exec), counters);
    }

    /// Gives up `graph`, which launches made so far may still use.
    pub fn retire_graph(&mut self, rt: &dyn Runtime, graph: Graph, counters: &mut Counters) {
        self.retire(rt, Doomed::Graph(graph), counters);
    }

    fn retire(&mut self, rt: &dyn Runtime, doomed: Doomed, counters: &mut Counters) {
        if self.open_has_launches() {
            self.reap(rt, counters);
            let untracked = std::mem::take(&mut self.open_untracked);
            let full = self.closed.len() >= MAX_CLOSED;
            match self.closed.back_mut().filter(|_| full) {
                // Joined to the newest generation: what waited for it waits for these launches
                // too, which only delays it.
                Some(newest) => {
                    newest.untracked |= untracked;
                    for (s, e) in self.open.drain(..) {
                        let same = (!s.is_per_thread_or_default()).then(|| newest.events.iter_mut().find(|(n, _)| *n == s)).flatten();
                        match same {
                            // A later event on a stream completes after the earlier one.
                            Some(slot) => self.spare.push(std::mem::replace(&mut slot.1, e)),
                            None => newest.events.push((s, e)),
                        }
                    }
                    if newest.events.len() > MAX_FOLLOWED {
                        let spare = &mut self.spare;
                        newest.events.retain(|&(s, e)| {
                            !finished(rt, s, e) || {
                                spare.push(e);
                                false
                            }
                        });
                        newest.untracked |= newest.events.len() > MAX_FOLLOWED;
                    }
                }
                None => {
                    self.closed.push_back(Generation { events: self.open.drain(..).collect(), untracked });
                    self.closed_total += 1;
                }
            }
        }
        self.waiting.push_back((self.closed_total, doomed));
        self.reap(rt, counters);
    }

    /// Destroys what waits for generations that have all finished.
    pub fn reap(&mut self, rt: &dyn Runtime, counters: &mut Counters) {
        while let Some(front) = self.closed.front() {
            if front.untracked || !front.events.iter().all(|&(s, e)| finished(rt, s, e)) {
                break;
            }
            let done = self.closed.pop_front().expect("front checked");
            self.spare.extend(done.events.into_iter().map(|(_, e)| e));
        }
        let finished_through = self.closed_total - self.closed.len() as u64;
        while self.waiting.front().is_some_and(|&(n, _)| n <= finished_through) {
            let (_, doomed) = self.waiting.pop_front().expect("front checked");
            self.destroy(rt, doomed, counters);
        }
    }

    fn destroy(&mut self, rt: &dyn Runtime, doomed: Doomed, counters: &mut Counters) {
        let destroyed = match doomed {
            Doomed::Exec(exec) => {
                self.waiting_execs -= 1;
                rt.exec_destroy(exec).inspect(|()| counters.record(Counted::Retirement))
            }
            Doomed::Graph(graph) => rt.graph_destroy(graph),
        };
        if let Err(e) = destroyed {
            log::warn!("destroying a replaced graph or executable graph: {e}; trying again when the command buffer is freed");
            self.orphans.push(doomed);
        }
    }

    /// Destroys everything that waits and every event: the command buffer is going away, and
    /// the launches still pending are the caller's to have waited for (`rcb_cmdbuf_free`).
    pub fn release(&mut self, rt: &dyn Runtime, leaks: &mut Leaks) {
        let doomed = self.waiting.drain(..).map(|(_, d)| d).chain(self.orphans.drain(..));
        for d in doomed.collect::<Vec<_>>() {
            leaks.note(match d {
                Doomed::Exec(exec) => rt.exec_destroy(exec),
                Doomed::Graph(graph) => rt.graph_destroy(graph),
            });
        }
        self.waiting_execs = 0;
        let events = self
            .open
            .drain(..)
            .map(|(_, e)| e)
            .chain(self.closed.drain(..).flat_map(|g| g.events).map(|(_, e)| e))
            .chain(self.spare.drain(..));
        for e in events.collect::<Vec<_>>() {
            leaks.note(rt.event_destroy(e));
        }
    }
}

/// Whether the launch `event` follows on `_stream` has finished. (The stream itself is never
/// asked anything: the caller may have destroyed it since.)
fn finished(rt: &dyn Runtime, _stream: Stream, event: Event) -> bool {
    rt.event_is_complete(event).unwrap_or(false)
}

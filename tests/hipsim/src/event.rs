//! Events: each record gets a generation number; the event completes when the stream
//! reaches the record, and waiters wait for the generation current when they asked.

use std::sync::{Condvar, LazyLock, Mutex, Weak};
use std::time::Instant;

use crate::handles::Registry;
use crate::stream::Stream;

/// What a `hipEventRecord` on a capturing stream leaves in the event: the capture, the nodes
/// before the record, and the capture's mode and thread (which a stream joining it takes).
#[derive(Clone)]
pub struct CaptureMark {
    pub graph: usize,
    pub tips: Vec<usize>,
    pub mode: i32,
    pub thread: libc::pthread_t,
}

/// The stream an event was last recorded on and, if it was capturing then, the mark.
#[derive(Default)]
struct LastRecord {
    stream: Option<Weak<Stream>>,
    mark: Option<CaptureMark>,
}

pub const DISABLE_TIMING: u32 = 2;

#[derive(Default)]
struct State {
    recorded: u64,
    completed: u64,
    time: Option<Instant>,
}

pub struct Event {
    pub flags: u32,
    /// The device current when it was made: a record goes only on a stream of that device.
    pub device: i32,
    st: Mutex<State>,
    cv: Condvar,
    last: Mutex<LastRecord>,
}

pub static EVENTS: LazyLock<Registry<Event>> = LazyLock::new(Registry::new);

impl Event {
    pub fn new(flags: u32, device: i32) -> Self {
        Event { flags, device, st: Mutex::new(State::default()), cv: Condvar::new(), last: Mutex::new(LastRecord::default()) }
    }

    /// Notes the stream of a record (none for the NULL stream) and its capture mark, if any.
    pub fn set_capture(&self, stream: Option<Weak<Stream>>, mark: Option<CaptureMark>) {
        *self.last.lock().unwrap() = LastRecord { stream, mark };
    }

    /// The stream the event was last recorded on (while it lives) and the capture mark.
    pub fn capture(&self) -> (Option<std::sync::Arc<Stream>>, Option<CaptureMark>) {
        let last = self.last.lock().unwrap();
        (last.stream.as_ref().and_then(Weak::upgrade), last.mark.clone())
    }

    pub fn begin_record(&self) -> u64 {
        let mut s = self.st.lock().unwrap();
        s.recorded += 1;
        s.recorded
    }

    pub fn complete(&self, generation: u64) {
        let mut s = self.st.lock().unwrap();
        if generation > s.completed {
            s.completed = generation;
            s.time = Some(Instant::now());
        }
        self.cv.notify_all();
    }

    /// Record-and-complete, for records that execute inside a running graph.
    pub fn record_now(&self) {
        let g = self.begin_record();
        self.complete(g);
    }

    pub fn latest(&self) -> u64 {
        self.st.lock().unwrap().recorded
    }

    pub fn wait_for(&self, generation: u64) {
        let mut s = self.st.lock().unwrap();
        while s.completed < generation {
            s = self.cv.wait(s).unwrap();
        }
    }

    pub fn is_done(&self) -> bool {
        let s = self.st.lock().unwrap();
        s.completed >= s.recorded
    }

    /// Completion time, if the latest record has completed.
    pub fn time(&self) -> Option<Option<Instant>> {
        let s = self.st.lock().unwrap();
        (s.completed >= s.recorded).then_some(s.time)
    }
}

//! Streams: one worker thread per stream runs queued jobs in order. The NULL stream is
//! the legacy default stream: its work runs inline on the calling thread after every
//! blocking stream of the device has drained (legacy-stream implicit synchronization).

use std::os::unix::thread::JoinHandleExt;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, LazyLock, Mutex};

use crate::capture::Capture;
use crate::device;
use crate::error::{HipResult, NOT_READY};
use crate::handles::Registry;

pub type Job = Box<dyn FnOnce() -> HipResult + Send>;

pub const NON_BLOCKING: u32 = 1;

#[derive(Default)]
struct Queue {
    pending: usize,
    error: Option<i32>,
}

pub struct Stream {
    pub device: i32,
    pub flags: u32,
    pub priority: i32,
    queue: Mutex<Queue>,
    idle: Condvar,
    tx: Mutex<Option<Sender<Job>>>,
    /// The worker thread, joined by [`Stream::close`] so that a destroyed stream's thread has
    /// ended (and freed its thread-local state) when hipStreamDestroy returns.
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub capture: Mutex<Option<Capture>>,
}

pub static STREAMS: LazyLock<Registry<Stream>> = LazyLock::new(Registry::new);

pub fn create(flags: u32, priority: i32) -> HipResult<usize> {
    let device = device::current()?;
    let (tx, rx) = channel::<Job>();
    let s = Stream {
        device,
        flags,
        priority: priority.clamp(-1, 1),
        queue: Mutex::new(Queue::default()),
        idle: Condvar::new(),
        tx: Mutex::new(Some(tx)),
        worker: Mutex::new(None),
        capture: Mutex::new(None),
    };
    let h = STREAMS.insert(s);
    let stream = STREAMS.get(h)?;
    let s = Arc::clone(&stream);
    let worker = std::thread::Builder::new()
        .name(format!("hipsim-stream-{h:x}"))
        .spawn(move || {
            for job in rx {
                let r = crate::ffi::guard(Err(crate::error::UNKNOWN), job);
                let mut q = s.queue.lock().unwrap();
                q.pending -= 1;
                if let Err(e) = r {
                    // Sticky: the first failure is reported by the next sync/query.
                    q.error.get_or_insert(e);
                }
                s.idle.notify_all();
            }
        })
        .map_err(|_| crate::error::OUT_OF_MEMORY)?;
    *stream.worker.lock().unwrap() = Some(worker);
    Ok(h)
}

impl Stream {
    fn enqueue(&self, job: Job) -> HipResult {
        let tx = self.tx.lock().unwrap();
        let tx = tx.as_ref().ok_or(crate::error::INVALID_HANDLE)?;
        self.queue.lock().unwrap().pending += 1;
        tx.send(job).map_err(|_| crate::error::UNKNOWN)
    }

    pub fn wait_idle(&self) {
        let mut q = self.queue.lock().unwrap();
        while q.pending > 0 {
            q = self.idle.wait(q).unwrap();
        }
    }

    /// Waits for all queued work and returns (and clears) the sticky error.
    pub fn sync(&self) -> HipResult {
        self.wait_idle();
        self.queue.lock().unwrap().error.take().map_or(Ok(()), Err)
    }

    pub fn query(&self) -> HipResult {
        let mut q = self.queue.lock().unwrap();
        if q.pending > 0 {
            return Err(NOT_READY);
        }
        q.error.take().map_or(Ok(()), Err)
    }

    /// Lets the worker exit once the queue is drained, and waits until it has.
    pub fn close(&self) {
        self.tx.lock().unwrap().take();
        let worker = self.worker.lock().unwrap().take();
        // A stream destroyed from its own worker (a host callback) cannot wait for itself.
        // Compared by pthread_t: a stream may be destroyed at a thread's exit, after its Rust
        // thread-locals (which `std::thread::current` needs) are gone.
        if let Some(worker) = worker.filter(|w| w.as_pthread_t() != crate::capture::this_thread()) {
            let _ = worker.join();
        }
    }
}

/// A validated stream argument.
pub enum Target {
    Null(i32),
    Stream(Arc<Stream>),
}

/// `hipStreamPerThread`: one handle value that names each thread's own stream.
pub const PER_THREAD: usize = 2;

thread_local! {
    /// This thread's per-thread stream, made at its first use (it outlives the thread, as the
    /// program may still hold work queued there).
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Per-thread streams made so far: the runtime's own, left out of the live streams a program
/// is responsible for (`hipsimLiveCount("stream")`).
pub static PER_THREAD_MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub fn resolve(h: usize) -> HipResult<Target> {
    if h == 0 {
        return Ok(Target::Null(device::current()?));
    }
    if h == PER_THREAD {
        let mine = match MINE.get() {
            0 => {
                let made = create(0, 0)?;
                PER_THREAD_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                made
            }
            mine => mine,
        };
        MINE.set(mine);
        return Ok(Target::Stream(STREAMS.get(mine)?));
    }
    Ok(Target::Stream(STREAMS.get(h)?))
}

impl Target {
    pub fn device(&self) -> i32 {
        match self {
            Target::Null(d) => *d,
            Target::Stream(s) => s.device,
        }
    }

    /// Runs `job` in stream order. On the NULL stream it runs now and its error is returned directly.
    pub fn submit(&self, job: Job) -> HipResult {
        match self {
            Target::Null(d) => {
                drain_blocking(*d);
                job()
            }
            Target::Stream(s) => s.enqueue(job),
        }
    }
}

/// Ends a stream that is being destroyed: its capture discarded, its work finished, its worker
/// gone.
pub fn destroy(s: &Stream) {
    crate::capture::abandon(s);
    s.wait_idle();
    s.close();
}

/// hipDeviceReset, as far as streams go: every stream of `device` is destroyed (its handle
/// becomes invalid), as on clr.
pub fn reset_device(device: i32) {
    for s in STREAMS.remove_where(|s| s.device == device) {
        destroy(&s);
    }
}

pub fn drain_blocking(device: i32) {
    for s in STREAMS.values() {
        if s.device == device && s.flags & NON_BLOCKING == 0 {
            s.wait_idle();
        }
    }
}

/// hipDeviceSynchronize: all streams of the device; the first sticky error wins.
pub fn sync_device(device: i32) -> HipResult {
    let mut first = Ok(());
    for s in STREAMS.values().into_iter().filter(|s| s.device == device) {
        let r = s.sync();
        if first.is_ok() {
            first = r;
        }
    }
    first
}

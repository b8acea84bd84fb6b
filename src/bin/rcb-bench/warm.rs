//! Every executable graph a scenario updates has run once before the timing starts: XLA
//! updates command buffers that it launches every step, and an executable graph that has never
//! run pays for its first upload inside the first setters (measured on the H200: exec kernel-node
//! SetParams 0.30–0.35 µs per node before the first launch, 0.11–0.12 µs after it).

use rocm_cmdbuf::ffi::{RCB_OK, rcb_cmdbuf, rcb_cmdbuf_launch};
use rocm_cmdbuf::runtime::{Exec, Runtime, Stream};

/// Launches `exec` on `stream` and waits for it.
pub fn exec(rt: &dyn Runtime, exec: Exec, stream: Stream) -> Result<(), String> {
    rt.graph_launch(exec, stream).and_then(|()| rt.stream_synchronize(stream)).map_err(|e| e.to_string())
}

/// Launches the finalized command buffer `cb` on `stream` and waits for it.
pub fn cmdbuf(rt: &dyn Runtime, cb: *mut rcb_cmdbuf, stream: Stream) -> Result<(), String> {
    // SAFETY: a live, finalized handle and a stream of the runtime.
    match unsafe { rcb_cmdbuf_launch(cb, stream.0) } {
        RCB_OK => rt.stream_synchronize(stream).map_err(|e| e.to_string()),
        s => Err(format!("rcb_cmdbuf_launch: status {s}")),
    }
}

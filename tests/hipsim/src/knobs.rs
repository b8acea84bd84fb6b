//! Test knobs: call counters, fault injection, quirks and host-side latencies.
//! Everything can be preset from HIPSIM_* environment variables (read once, on the
//! first call into the library) and changed later through the hipsim* exports.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::error::{HipResult, UNKNOWN};

struct Fault {
    name: String,
    nth: u64,
    code: i32,
    seen: u64,
}

#[derive(Default)]
struct State {
    calls: BTreeMap<String, u64>,
    faults: Vec<Fault>,
    /// Injected faults that fired since load (whichever set they came from).
    fired: u64,
    latency: HashMap<String, Duration>,
}

/// Which kernel-argument leak the executable graphs have (see `kernarg.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernargLeak {
    /// Updates reuse their slots.
    Off,
    /// Updates take fresh slots; an exhausted pool fails them.
    Error,
    /// Updates take fresh slots; an exhausted pool keeps the old parameters and reports success.
    Silent,
}

/// What `hipRuntimeGetVersion` reports by default: ROCm 7.2.4 as Debian ships it
/// (`libamdhip64.so.7.2.53211`; major * 10^7 + minor * 10^5 + patch).
pub const DEFAULT_VERSION: i32 = 70_253_211;
/// The oldest version hipsim can report: it keeps the 5.3+ node-type numbers and structs.
const OLDEST_VERSION: i32 = 50_300_000;
/// The first version whose 1-D memcpy nodes report their parameters (see `rocm_7_2_memcpy`).
const ROCM_7_2: i32 = 70_200_000;
/// The first version whose last error only a failure sets (see `sticky_last_error`), and whose
/// packet capture is taken to cover blit nodes (see `clr_captures_blit_nodes`).
const ROCM_6_4: i32 = 60_400_000;

pub struct Knobs {
    state: Mutex<State>,
    pub devices: i32,
    /// `HIPSIM_VERSION`: the ROCm version reported and whose behaviour is modelled where
    /// versions differ.
    pub version: i32,
    /// `HIPSIM_KERNARG_POOL`: bytes of kernel-argument staging per device.
    pub kernarg_pool: u64,
    /// `HIPSIM_KERNARG_HIDDEN`: bytes of hidden arguments the runtime appends to each kernel's
    /// explicit ones (256 by default, as on gfx9): the larger part of each node's slot.
    pub kernarg_hidden: u64,
    /// `HIPSIM_KERNARG_CHUNK`: when set, device memory shows each executable graph's staging as
    /// clr allocates it, in whole pools of its instantiation's bytes plus this many (clr's
    /// `kKernArgChunkSize`, 128 KiB); unset, as exactly the bytes in use.
    pub kernarg_chunk: Option<u64>,
    stats: bool,
    clr138: AtomicBool,
    clr_graph_launch: AtomicBool,
    clr_stream_memops: AtomicBool,
    clr_chain_staging: AtomicBool,
    memcpy_class: AtomicBool,
    kernarg_leak: AtomicU8,
    stream_flag_bits: AtomicBool,
}

static KNOBS: OnceLock<Knobs> = OnceLock::new();

/// What the `stream_flag_bits` quirk adds to every stream's flags.
const STREAM_FLAG_BITS: u32 = 0x8000_0000;

pub fn get() -> &'static Knobs {
    let knobs = KNOBS.get_or_init(init);
    crate::fork::register();
    knobs
}

fn init() -> Knobs {
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let devices = env("HIPSIM_DEVICES").trim().parse::<i32>().map_or(2, |n| n.clamp(0, 16));
    let pool = env("HIPSIM_KERNARG_POOL");
    let kernarg_pool = match pool.trim() {
        "" => u64::MAX,
        s => s.parse().unwrap_or_else(|_| {
            eprintln!("hipsim: ignoring malformed HIPSIM_KERNARG_POOL");
            u64::MAX
        }),
    };
    let bytes = |name: &str| match env(name).trim() {
        "" => None,
        s => s.parse::<u64>().map_err(|_| eprintln!("hipsim: ignoring malformed {name}")).ok(),
    };
    let kernarg_hidden = bytes("HIPSIM_KERNARG_HIDDEN").unwrap_or(256);
    let kernarg_chunk = bytes("HIPSIM_KERNARG_CHUNK");
    let version = match env("HIPSIM_VERSION").trim() {
        "" => DEFAULT_VERSION,
        s => match s.parse::<i32>() {
            Ok(v) if v >= OLDEST_VERSION => v,
            _ => {
                eprintln!("hipsim: ignoring malformed HIPSIM_VERSION (an integer, {OLDEST_VERSION} or later)");
                DEFAULT_VERSION
            }
        },
    };
    let k = Knobs {
        state: Mutex::new(State::default()),
        devices,
        version,
        kernarg_pool,
        kernarg_hidden,
        kernarg_chunk,
        stats: env("HIPSIM_STATS") == "1",
        clr138: AtomicBool::new(false),
        clr_graph_launch: AtomicBool::new(false),
        clr_stream_memops: AtomicBool::new(false),
        clr_chain_staging: AtomicBool::new(false),
        memcpy_class: AtomicBool::new(false),
        kernarg_leak: AtomicU8::new(KernargLeak::Off as u8),
        stream_flag_bits: AtomicBool::new(false),
    };
    // A malformed variable is reported rather than silently ignored: tests rely on it.
    if k.set_faults(&env("HIPSIM_FAIL")).is_err() {
        eprintln!("hipsim: ignoring malformed HIPSIM_FAIL");
    }
    if k.set_quirks(&env("HIPSIM_QUIRKS")).is_err() {
        eprintln!("hipsim: ignoring malformed HIPSIM_QUIRKS");
    }
    if k.set_latency(&env("HIPSIM_LATENCY")).is_err() {
        eprintln!("hipsim: ignoring malformed HIPSIM_LATENCY");
    }
    k
}

fn entries(spec: &str) -> impl Iterator<Item = &str> {
    spec.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn parse_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let n: u64 = s[..split].parse().ok()?;
    match &s[split..] {
        "ns" => Some(Duration::from_nanos(n)),
        "us" => Some(Duration::from_micros(n)),
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        _ => None,
    }
}

impl Knobs {
    /// Counts the call, then applies an injected fault or latency configured for `name`.
    pub fn enter(&self, name: &str, injectable: bool) -> HipResult {
        let (fault, delay) = {
            let mut st = self.state.lock().unwrap();
            *st.calls.entry(name.to_string()).or_default() += 1;
            if !injectable {
                return Ok(());
            }
            let mut fault = None;
            for f in st.faults.iter_mut().filter(|f| f.name == name && f.seen < f.nth) {
                f.seen += 1;
                if f.seen == f.nth {
                    fault = Some(f.code);
                }
            }
            st.fired += u64::from(fault.is_some());
            (fault, st.latency.get(name).copied())
        };
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        fault.map_or(Ok(()), Err)
    }

    /// The counters' lock, held until the box is dropped (see `fork.rs`).
    pub fn hold(&'static self) -> Box<dyn std::any::Any> {
        Box::new(self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    pub fn call_count(&self, name: &str) -> u64 {
        self.state.lock().unwrap().calls.get(name).copied().unwrap_or(0)
    }

    pub fn reset_counts(&self) {
        self.state.lock().unwrap().calls.clear();
    }

    /// `name:n[:code],...`; replaces the current set and counts calls from now on.
    pub fn set_faults(&self, spec: &str) -> Result<(), ()> {
        let mut faults = Vec::new();
        for e in entries(spec) {
            let parts: Vec<&str> = e.split(':').collect();
            let (name, nth, code) = match parts.as_slice() {
                [n, k] => (*n, k.parse::<u64>().map_err(|_| ())?, UNKNOWN),
                [n, k, c] => (*n, k.parse::<u64>().map_err(|_| ())?, c.parse::<i32>().map_err(|_| ())?),
                _ => return Err(()),
            };
            if name.is_empty() || nth == 0 {
                return Err(());
            }
            faults.push(Fault { name: name.to_string(), nth, code, seen: 0 });
        }
        self.state.lock().unwrap().faults = faults;
        Ok(())
    }

    pub fn set_quirks(&self, spec: &str) -> Result<(), ()> {
        let (mut clr138, mut leak, mut flag_bits, mut clr_launch, mut clr_memops, mut clr_chain, mut memcpy_class) =
            (false, KernargLeak::Off, false, false, false, false, false);
        for e in entries(spec) {
            match e {
                "clr138" => clr138 = true,
                "clr_graph_launch" => clr_launch = true,
                "clr_stream_memops" => clr_memops = true,
                "clr_chain_staging" => clr_chain = true,
                "memcpy_class" => memcpy_class = true,
                "kernarg_leak" if leak == KernargLeak::Off => leak = KernargLeak::Error,
                "kernarg_leak" => {}
                "kernarg_leak_silent" => leak = KernargLeak::Silent,
                "stream_flag_bits" => flag_bits = true,
                _ => return Err(()),
            }
        }
        self.clr138.store(clr138, Ordering::Relaxed);
        self.clr_graph_launch.store(clr_launch, Ordering::Relaxed);
        self.clr_stream_memops.store(clr_memops, Ordering::Relaxed);
        self.clr_chain_staging.store(clr_chain, Ordering::Relaxed);
        self.memcpy_class.store(memcpy_class, Ordering::Relaxed);
        self.kernarg_leak.store(leak as u8, Ordering::Relaxed);
        self.stream_flag_bits.store(flag_bits, Ordering::Relaxed);
        Ok(())
    }

    pub fn set_latency(&self, spec: &str) -> Result<(), ()> {
        let mut map = HashMap::new();
        for e in entries(spec) {
            let (name, d) = e.split_once(':').ok_or(())?;
            map.insert(name.to_string(), parse_duration(d).ok_or(())?);
        }
        self.state.lock().unwrap().latency = map;
        Ok(())
    }

    /// Whether `hipGraphMemcpyNodeGetParams` of a 1-D memcpy node reports the parameters the node
    /// was created with (ROCm 7.2: clr fills them in the constructor and never refreshes them);
    /// before, clr never fills them and the call returns memory it never wrote.
    pub fn rocm_7_2_memcpy(&self) -> bool {
        self.version >= ROCM_7_2
    }

    /// Whether the thread's last error keeps a failure until `hipGetLastError` takes it (6.4+)
    /// instead of taking every call's result (see `error::note`).
    pub fn sticky_last_error(&self) -> bool {
        self.version >= ROCM_6_4
    }

    pub fn clr138(&self) -> bool {
        self.clr138.load(Ordering::Relaxed)
    }

    /// Bits `hipStreamGetFlags` reports beyond those the stream was created with (the
    /// `stream_flag_bits` quirk: a runtime that keeps flags of its own in the same word).
    pub fn stream_flag_bits(&self) -> u32 {
        if self.stream_flag_bits.load(Ordering::Relaxed) { STREAM_FLAG_BITS } else { 0 }
    }

    /// `clr_graph_launch`: hipGraphLaunch into a capturing stream runs the executable graph's
    /// own work on the stream instead of adding a copy of it to the capture, as ROCm's clr does
    /// (its hipGraphLaunch has no capture branch).
    pub fn clr_graph_launch(&self) -> bool {
        self.clr_graph_launch.load(Ordering::Relaxed)
    }

    /// `clr_stream_memops`: hipStreamWriteValue64 and hipStreamWaitValue64 on a capturing stream
    /// run on the stream at once instead of joining the capture, as ROCm's clr does (its
    /// ihipStreamOperation enqueues them with no capture branch).
    pub fn clr_stream_memops(&self) -> bool {
        self.clr_stream_memops.load(Ordering::Relaxed)
    }

    /// `clr_chain_staging`: an executable graph stages kernel arguments (at instantiation and on
    /// update) only when it is a single chain of nodes, and only for the nodes clr captures, as
    /// clr's packet capture does in the releases read (see `kernarg.rs`).
    pub fn clr_chain_staging(&self) -> bool {
        self.clr_chain_staging.load(Ordering::Relaxed)
    }

    /// Whether clr's packet capture covers memset and device-to-device memcpy nodes besides
    /// kernel nodes (`GraphNode::GraphCaptureEnabled`): not in 6.2 and 6.3 (tag `rocm-6.2.2`,
    /// branch `release/rocm-rel-6.3.0.1`), where it covers kernel nodes alone; in clr's
    /// `amd-staging` branch of October 2024, taken for 6.4 and later (the 6.4 source was not read).
    pub fn clr_captures_blit_nodes(&self) -> bool {
        self.version >= ROCM_6_4
    }

    /// `memcpy_class`: hipGraphExecMemcpyNodeSetParams1D refuses (hipErrorInvalidValue) new
    /// operands in another kind of memory (hipMalloc memory of a device, a VMM mapping,
    /// registered host memory) than the executable node holds, as CUDA's
    /// cuGraphExecMemcpyNodeSetParams does across its allocation classes; clr checks no such
    /// thing.
    pub fn memcpy_class(&self) -> bool {
        self.memcpy_class.load(Ordering::Relaxed)
    }

    pub fn kernarg_leak(&self) -> KernargLeak {
        match self.kernarg_leak.load(Ordering::Relaxed) {
            x if x == KernargLeak::Error as u8 => KernargLeak::Error,
            x if x == KernargLeak::Silent as u8 => KernargLeak::Silent,
            _ => KernargLeak::Off,
        }
    }
}

/// Runs at process exit (the library is linked `-z nodelete`, so never earlier).
extern "C" fn print_stats() {
    let Some(k) = KNOBS.get() else { return };
    if !k.stats {
        return;
    }
    let Ok(st) = k.state.lock() else { return };
    let mut out = String::from("hipsim call counts:\n");
    for (name, n) in st.calls.iter().filter(|(_, n)| **n > 0) {
        out.push_str(&format!("  {name} {n}\n"));
    }
    out.push_str(&format!("hipsim faults fired: {}\n", st.fired));
    // SAFETY: plain write(2) of an owned buffer; std's stderr may already be torn down.
    unsafe { libc::write(2, out.as_ptr().cast(), out.len()) };
}

#[used]
#[unsafe(link_section = ".fini_array")]
static PRINT_STATS_AT_EXIT: extern "C" fn() = print_stats;

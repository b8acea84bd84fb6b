//! The update budget of an executable graph: what its in-place updates are estimated to have
//! taken from the runtime's kernel-argument staging since it was instantiated.
//!
//! ROCm's runtime stages the kernel arguments of an executable graph with a bump allocator
//! (`GraphKernelArgManager`): every `hipGraphExec*SetParams` and `hipGraphExecUpdate` takes a
//! fresh slot and nothing is given back until `hipGraphExecDestroy` (ROCm/rocm-systems issue
//! 10713). Once the pool cannot grow the runtime crashes (issue 10021) or reports success while
//! the executable graph keeps its old packet (issue 10714). The library therefore counts what
//! each push is likely to take and re-instantiates before the count passes the budget.

//!
//! How much a push takes is measured once per process, by the first command buffer
//! (`leak_probe.rs`), unless `RCB_EXEC_UPDATE_BUDGET` sets the budget or the runtime is CUDA
//! (whose fixed default is off: a measurement there could only add noise, and a context on the
//! device): where the runtime's memory
//! grows, each push is charged its argument bytes plus the growth per node update measured, never
//! less than [`NODE_OVERHEAD_BYTES`] nor more than [`MAX_NODE_CHARGE_BYTES`], and the budget is
//! [`DEFAULT_BUDGET_BYTES`]; where nothing grows the fixed default applies, which is
//! [`DEFAULT_BUDGET_BYTES`] (off only on a ROCm known to have the fix), since the memset probe
//! cannot prove that kernel-node updates take nothing.
//!
//! The measurement may only raise the charge. It reads the whole device's free memory, so
//! another thread or process allocating meanwhile shows as growth of any size, a few bytes per
//! update included: it cannot prove a leak smaller than the fixed estimate, only catch a runtime
//! that takes more. The cap keeps such noise from making a command buffer re-instantiate every
//! few pushes for the life of the process.

use super::leak_probe::{self, Measurement, Unmeasured};
use super::nodes::Params;
use crate::runtime::{Backend, Graph, NodeType, Runtime, RuntimeInfo, Stream};
use once_cell::sync::OnceCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// What one node's push is charged on top of its argument bytes where nothing was measured (the
/// variable set the budget, the measurement failed or saw no growth). The only public
/// measurement (issue 10713, MI300X) is a 32-node graph growing about 354 MiB over 2 000
/// whole-graph updates, about 185 KiB per update; 185 KiB / 32 nodes is 5 920 bytes a node.
/// Those kernels' own argument sizes are not given, so the whole figure counts as overhead here
/// and a node's arguments come on top: the estimate errs on the side of re-instantiating early.
pub const NODE_OVERHEAD_BYTES: u64 = 5_920;

/// The most a node's push is charged on top of its argument bytes, however much growth was
/// measured: 16 times the fixed estimate, so a measurement inflated by another process's
/// allocations still leaves about 700 node pushes between re-instantiations at the default
/// budget (a runtime that really takes more than this runs past the budget by that factor).
pub const MAX_NODE_CHARGE_BYTES: u64 = 16 * NODE_OVERHEAD_BYTES;

/// The budget of an executable graph where updates take memory and `RCB_EXEC_UPDATE_BUDGET` is
/// not set: 64 MiB, about 11 000 node pushes at the estimate above (350 whole updates of the
/// reported 32-node graph, 110 updates that move 10 % of a 1 000-node graph). A command buffer's
/// runtime memory then stays within about three times this (the live executable and at most
/// `MAX_RETIRED` old ones; five with [`MAX_KEPT_EXECS`] kept for launches the library could
/// not follow), while a re-instantiation, a few milliseconds for 1 000 nodes, is spread over
/// that many updates.
pub const DEFAULT_BUDGET_BYTES: u64 = 64 << 20;

/// Old executable graphs a command buffer keeps while their launches finish. A re-instantiation
/// that would keep one more is not made (the host never waits for a launch): updates go to the
/// live executable in place, counted as blocked, until an old one is destroyed.
pub const MAX_RETIRED: usize = 2;

/// Replaced executable graphs a command buffer keeps for launches the library could not follow
/// (`launches.rs`): those are given back only by `rcb_cmdbuf_launches_done` (else leaked by the
/// free). A re-instantiation for the budget that would keep one more is not made: updates go to
/// the live executable in place, counted as blocked. Past the cap a re-instantiation would keep
/// a whole executable (its argument memory included) to spare pushes into the live one of about
/// the same size, so more would only move the growth, never stop it; two, as `MAX_RETIRED`,
/// bound a command buffer at five executables (the live one, two waiting, two kept) while an
/// occasional lost event still leaves the budget working.
pub const MAX_KEPT_EXECS: usize = 2;

/// The first `hipRuntimeGetVersion` whose executable-graph updates take kernel-argument memory:
/// ROCm 6.2, whose clr captures each node's packet and arguments at instantiation by default
/// (`DEBUG_CLR_GRAPH_PACKET_CAPTURE`) and again, into fresh staging, on every update
/// (`GraphExec::UpdateAQLPacket`). 5.6 and 5.7 capture nothing; 6.0 and 6.1 capture only at
/// instantiation, off by default, and where `DEBUG_CLR_GRAPH_PACKET_CAPTURE=1` turns it on,
/// into a pool of exactly the instantiation's arguments that no update takes from (they have no
/// `UpdateAQLPacket`, and `allocKernArg` is called only from `CaptureAQLPackets`; clr tags
/// `rocm-6.0.2` and `rocm-6.1.2`), so the variable changes nothing here.
pub const FIRST_HIP_VERSION_WITH_ARGUMENT_LEAK: i32 = 60_200_000;

/// The first `hipRuntimeGetVersion` whose executable-graph updates reuse their kernel-argument
/// slots. None is known: the fix (ROCm/rocm-systems pull request 11434) is not in a release as
/// of 2026-09. When one ships, its version goes here and the default budget turns off for it.
pub const FIRST_HIP_VERSION_WITHOUT_ARGUMENT_LEAK: Option<i32> = None;

/// Whether the runtime's executable-graph updates take memory that only destroying the
/// executable gives back. CUDA's driver is not reported to (`rcb-bench budget` measures device
/// memory over 100 000 updates on a GPU to check it); HIP does from
/// [`FIRST_HIP_VERSION_WITH_ARGUMENT_LEAK`] up to [`FIRST_HIP_VERSION_WITHOUT_ARGUMENT_LEAK`].
pub fn updates_leak(info: &RuntimeInfo) -> bool {
    match info.backend {
        Backend::Cuda => false,
        Backend::Hip => {
            info.version >= FIRST_HIP_VERSION_WITH_ARGUMENT_LEAK
                && FIRST_HIP_VERSION_WITHOUT_ARGUMENT_LEAK.is_none_or(|fixed| info.version < fixed)
        }
    }
}

/// The fixed default of a new command buffer's budget: `configured` (`RCB_EXEC_UPDATE_BUDGET`,
/// 0 for never) when set, else [`DEFAULT_BUDGET_BYTES`] where updates are known to leak and 0
/// where they are not. It applies when the growth was not measured.
pub fn default_limit(configured: Option<u64>, info: &RuntimeInfo) -> u64 {
    configured.unwrap_or(if updates_leak(info) { DEFAULT_BUDGET_BYTES } else { 0 })
}

/// What the process's update budget rests on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Basis {
    /// `RCB_EXEC_UPDATE_BUDGET` set it; nothing was measured.
    Configured,
    /// The probe measured the runtime's growth.
    Measured(Measurement),
    /// The probe failed (why): the fixed default applies.
    Failed(String),
    /// The probe was not run (why): the fixed default applies. Where the calling thread has a
    /// runtime error pending, where its capture mode cannot be relaxed, and in a child forked
    /// while its parent was measuring.
    NotMeasured(String),
    /// Nothing was measured on this runtime (CUDA, whose fixed default is off): the fixed
    /// default applies.
    Fixed,
}

/// The update budget every command buffer of the process starts with, settled by the first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    pub basis: Basis,
    /// The budget of a primary command buffer's executable graph (0: never re-instantiated).
    pub limit: u64,
    /// What each node push is charged on top of its argument bytes.
    pub node_charge: u64,
    /// The device the probe ran on (the settling thread's current device), when it ran.
    pub device: Option<i32>,
}

impl Settlement {
    /// One line: the budget and what it rests on.
    pub fn describe(&self) -> String {
        let budget = match self.limit {
            0 => String::from("off"),
            b if b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
            b => format!("{b} bytes"),
        };
        let device = self.device.unwrap_or(0);
        match &self.basis {
            Basis::Configured => format!("{budget}, set by RCB_EXEC_UPDATE_BUDGET"),
            Basis::Measured(m) if m.bytes_per_update == 0 && self.limit == 0 => {
                format!("{budget}: device {device}'s memory did not grow over {} executable-node updates", m.node_updates)
            }
            Basis::Measured(m) if m.bytes_per_update == 0 => format!(
                "{budget}, the fixed default: device {device}'s memory did not grow over {} memset-node updates, but on HIP kernel-node updates may still take memory (the probe cannot show it)",
                m.node_updates
            ),
            Basis::Measured(m) => format!(
                "{budget}: device {device}'s memory grew {} bytes per executable-node update ({} bytes over {} updates); each push charged its arguments plus {} bytes{}",
                m.bytes_per_update,
                m.growth,
                m.node_updates,
                self.node_charge,
                charge_note(m.bytes_per_update, self.node_charge)
            ),
            Basis::Failed(why) => format!("{budget}, the fixed default: the measurement failed ({why})"),
            Basis::NotMeasured(why) => format!("{budget}, the fixed default: not measured ({why})"),
            Basis::Fixed => format!("{budget}, the fixed default of this runtime (nothing measured)"),
        }
    }
}

/// Why the charge differs from the growth measured, if it does.
fn charge_note(measured: u64, charge: u64) -> &'static str {
    match measured.cmp(&charge) {
        std::cmp::Ordering::Less => " (the fixed estimate: the probe can raise the charge, never lower it)",
        std::cmp::Ordering::Greater => " (the cap: more may be another process's allocations)",
        std::cmp::Ordering::Equal => "",
    }
}

/// The process's settlement: null until the first command buffer begins settling it, then a
/// leaked cell, never freed. Published with an atomic, so that a forked child can drop a cell
/// its parent was filling at the fork (see [`forget_in_child`]).
static SETTLEMENT: AtomicPtr<OnceCell<Settlement>> = AtomicPtr::new(std::ptr::null_mut());
/// Set in a child forked while its parent was measuring: its first command buffer settles the
/// fixed default without measuring.
static FORKED_WHILE_MEASURING: AtomicBool = AtomicBool::new(false);

crate::at_fork::forget_in_forked_child!(forget_in_child);

/// In a forked child, a settlement the parent had made stands (its command buffers get the
/// parent's budget); one the parent was making is dropped: the thread measuring does not exist
/// in the child, so the cell would never be filled and the child's first command buffer would
/// wait for it for ever. This only keeps the library's own wait from hanging: ROCm does not
/// support HIP in a child forked from a parent that had initialised it (HIP's `hipInit`
/// reference: inheriting its state across `fork` may lead to undefined behaviour), so on a real
/// GPU such a child's command buffers, like any HIP call of it, remain unsupported; the software
/// GPU's fork tests check the library's side alone.
extern "C" fn forget_in_child() {
    // SAFETY: a non-null value is a leaked cell, never freed; `get` is an atomic load.
    if unsafe { SETTLEMENT.load(Ordering::Acquire).as_ref() }.is_some_and(|cell| cell.get().is_none()) {
        FORKED_WHILE_MEASURING.store(true, Ordering::Release);
        SETTLEMENT.store(std::ptr::null_mut(), Ordering::Release);
    }
}

/// The process's cell, made on first use.
fn cell() -> &'static OnceCell<Settlement> {
    let current = SETTLEMENT.load(Ordering::Acquire);
    // SAFETY: a non-null value is a leaked cell, never freed.
    if let Some(cell) = unsafe { current.as_ref() } {
        return cell;
    }
    let fresh = Box::into_raw(Box::new(OnceCell::new()));
    match SETTLEMENT.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: just leaked; never freed.
        Ok(_) => unsafe { &*fresh },
        Err(winner) => {
            // SAFETY: `fresh` was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above: a leaked cell.
            unsafe { &*winner }
        }
    }
}

/// The process's update budget, settled now if no command buffer settled it before: from
/// `configured` (`RCB_EXEC_UPDATE_BUDGET`) when set, else by measuring on the calling thread's
/// current device.
///
/// Concurrent first callers wait for the one that measures, once per process, however long the
/// probe takes (it is bounded: [`leak_probe::MAX_ROUNDS`] rounds): every command buffer then has
/// the same budget, and none is charged the fixed estimate where the runtime was measured to take
/// more, which could let its executable grow past the budget by up to the cap's factor.
pub fn settle(rt: &dyn Runtime, configured: Option<u64>) -> &'static Settlement {
    cell().get_or_init(|| {
        let measure = || {
            if FORKED_WHILE_MEASURING.load(Ordering::Acquire) {
                return Err(Basis::NotMeasured(String::from(
                    "the process was forked while its parent measured, and the runtime's locks may be held in the child by the parent's measuring thread",
                )));
            }
            // A failed call of the probe's leaves no error for the caller's next check of the
            // thread's last error, and one the caller left pending keeps the probe from running.
            let mut measured = Err(Basis::Failed(String::from("the runtime did not run the probe")));
            rt.keep_last_error(&mut || measured = probe(rt)).map_err(|e| {
                Basis::NotMeasured(format!(
                    "{}: a failed probe call would replace it on ROCm 6.4 and later, where nothing could put it back",
                    e.message
                ))
            })?;
            measured
        };
        let s = settlement(rt.info(), configured, measure);
        log_settlement(&s);
        s
    })
}

/// Runs the probe on the calling thread's current device: the probe's graph is made and
/// instantiated there (HIP has no other), so that is where its memory is read too; the null
/// stream's device is it.
fn probe(rt: &dyn Runtime) -> std::result::Result<(i32, Measurement), Basis> {
    let device = rt
        .stream_device(Stream(std::ptr::null_mut()))
        .map_err(|e| Basis::Failed(format!("the current device is unknown: {}", e.message)))?;
    leak_probe::measure(rt, device).map(|m| (device, m)).map_err(|e| match e {
        Unmeasured::NotRun(e) => Basis::NotMeasured(format!(
            "{}: the calling thread's stream capture mode cannot be relaxed, so the probe's allocation would invalidate any global-mode capture in progress",
            e.message
        )),
        Unmeasured::Failed(e) => Basis::Failed(format!("on device {device}: {}", e.message)),
    })
}

/// The process's update budget if a command buffer has settled it.
pub fn settled() -> Option<&'static Settlement> {
    // SAFETY: a non-null value is a leaked cell, never freed.
    unsafe { SETTLEMENT.load(Ordering::Acquire).as_ref() }.and_then(OnceCell::get)
}

/// The settlement for `info`'s runtime given the variable and, when it is not set, the outcome
/// of `measure`: the device measured and what was seen there, or why nothing was.
fn settlement(
    info: &RuntimeInfo,
    configured: Option<u64>,
    measure: impl FnOnce() -> std::result::Result<(i32, Measurement), Basis>,
) -> Settlement {
    if let Some(limit) = configured {
        return Settlement { basis: Basis::Configured, limit, node_charge: NODE_OVERHEAD_BYTES, device: None };
    }
    // CUDA's fixed default is off, and no measurement may lower a charge (below), so one could
    // only turn the budget on from another process's allocations, and would make a context on
    // the device besides.
    if info.backend == Backend::Cuda {
        return Settlement { basis: Basis::Fixed, limit: default_limit(None, info), node_charge: NODE_OVERHEAD_BYTES, device: None };
    }
    match measure() {
        // No growth turns the budget off only where the fixed default is off too (a ROCm known
        // to have the fix): the probe updates memset nodes, which clr 6.2 and 6.3 never stage
        // while their kernel-node updates leak (`leak_probe.rs`). Keeping the budget where it was
        // not needed costs re-instantiations; dropping it where kernel nodes still leak would
        // cost the process its memory.
        Ok((device, m)) if m.bytes_per_update == 0 => Settlement {
            basis: Basis::Measured(m),
            limit: default_limit(None, info),
            node_charge: NODE_OVERHEAD_BYTES,
            device: Some(device),
        },
        // Growth only raises the charge (the reading may be another process's allocations), up
        // to the cap.
        Ok((device, m)) => Settlement {
            node_charge: m.bytes_per_update.clamp(NODE_OVERHEAD_BYTES, MAX_NODE_CHARGE_BYTES),
            basis: Basis::Measured(m),
            limit: DEFAULT_BUDGET_BYTES,
            device: Some(device),
        },
        Err(basis) => Settlement { basis, limit: default_limit(None, info), node_charge: NODE_OVERHEAD_BYTES, device: None },
    }
}

fn log_settlement(s: &Settlement) {
    let device = s.device.unwrap_or(0);
    match &s.basis {
        Basis::Configured => log::info!("update budget: {} bytes, set by RCB_EXEC_UPDATE_BUDGET (nothing measured)", s.limit),
        Basis::Measured(m) if m.bytes_per_update == 0 && s.limit != 0 => log::info!(
            "update budget: {} bytes, the fixed default: device {device}'s free memory did not fall over {} memset-node updates of a {}-node probe graph ({:.1} ms), but on HIP kernel-node updates may still take memory, which the probe cannot show",
            s.limit,
            m.node_updates,
            leak_probe::PROBE_NODES,
            m.elapsed.as_secs_f64() * 1e3
        ),
        Basis::Measured(m) if m.bytes_per_update == 0 => log::info!(
            "update budget off: device {device}'s free memory did not fall over {} executable-node updates of a {}-node probe graph ({:.1} ms): this runtime's updates take no memory",
            m.node_updates,
            leak_probe::PROBE_NODES,
            m.elapsed.as_secs_f64() * 1e3
        ),
        Basis::Measured(m) if m.bytes_per_update > s.node_charge => log::warn!(
            "update budget: {} bytes per executable-node update measured on device {device} ({} bytes over {} updates of a {}-node probe graph), more than the cap of {} bytes: each push charged its arguments plus the cap (free memory is the whole device's, so part of it may be another process's allocations); re-instantiating when pushes reach {} MiB",
            m.bytes_per_update,
            m.growth,
            m.node_updates,
            leak_probe::PROBE_NODES,
            s.node_charge,
            s.limit >> 20
        ),
        Basis::Measured(m) => log::info!(
            "update budget: {} bytes per executable-node update measured on device {device} ({} bytes over {} updates of a {}-node probe graph, {:.1} ms): re-instantiating when pushes charged their arguments plus {} bytes{} reach {} MiB",
            m.bytes_per_update,
            m.growth,
            m.node_updates,
            leak_probe::PROBE_NODES,
            m.elapsed.as_secs_f64() * 1e3,
            s.node_charge,
            charge_note(m.bytes_per_update, s.node_charge),
            s.limit >> 20
        ),
        Basis::Fixed => log::info!("update budget: {} bytes, the fixed default of this runtime (nothing measured)", s.limit),
        Basis::Failed(why) => log::warn!(
            "update budget: measuring what executable-graph updates take failed ({why}); using the fixed default of {} bytes, each push charged its arguments plus {} bytes",
            s.limit,
            s.node_charge
        ),
        Basis::NotMeasured(why) => log::warn!(
            "update budget: not measuring what executable-graph updates take ({why}); using the fixed default of {} bytes, each push charged its arguments plus {} bytes",
            s.limit,
            s.node_charge
        ),
    }
}

/// The estimated staging bytes of pushing `params` to an executable graph once, each node
/// charged `node_charge` besides its arguments. Memcpy and memset nodes run as blit kernels with
/// their own arguments (inside the charge); empty nodes take nothing, nor do the nodes that are
/// never pushed (event, host, memory operations); a child node's cost is its graph's, which its
/// record holds.
pub fn push_bytes(params: &Params, node_charge: u64) -> u64 {
    match params {
        Params::Kernel(k) => k.blob.len() as u64 + node_charge,
        Params::Memcpy(_) | Params::Memset(_) | Params::KernelByPointers(_) => node_charge,
        Params::Empty | Params::Child(_) | Params::EventRecord(_) | Params::EventWait(_) | Params::Host(_) | Params::MemOp(..) => 0,
    }
}

/// The estimated staging bytes of pushing every node of `graph`, a graph the library did not
/// record, listed through the runtime (node types only; no parameters are read back). A node
/// that cannot be listed counts as nothing: this is an estimate, never a reason to fail.
pub fn listed_graph_bytes(rt: &dyn Runtime, graph: Graph, node_charge: u64) -> u64 {
    let Ok(nodes) = rt.graph_nodes(graph) else { return 0 };
    nodes
        .into_iter()
        .map(|node| match rt.node_type(node) {
            Ok(NodeType::Kernel | NodeType::Memcpy | NodeType::Memset) => node_charge,
            Ok(NodeType::Child) => rt.child_node_graph(node).map_or(0, |inner| listed_graph_bytes(rt, inner, node_charge)),
            _ => 0,
        })
        .sum()
}

/// The budget of one command buffer's executable graph. The executables it replaces wait for
/// their launches in `launches.rs`.
pub struct ExecBudget {
    /// Bytes of estimated staging the executable may take before it is re-instantiated; 0:
    /// never.
    limit: u64,
    spent: u64,
    /// What a node's push is charged besides its arguments ([`Settlement::node_charge`]).
    node_charge: u64,
    warned_blocked: bool,
}

impl ExecBudget {
    pub fn new(limit: u64, node_charge: u64) -> Self {
        Self { limit, spent: 0, node_charge, warned_blocked: false }
    }

    pub fn node_charge(&self) -> u64 {
        self.node_charge
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    pub fn spent(&self) -> u64 {
        self.spent
    }

    /// Whether pushing `bytes` more would pass the budget.
    pub fn exceeded_by(&self, bytes: u64) -> bool {
        self.limit != 0 && self.spent.saturating_add(bytes) > self.limit
    }

    pub fn charge(&mut self, bytes: u64) {
        self.spent = self.spent.saturating_add(bytes);
    }

    /// A new executable graph starts with nothing spent.
    pub fn restart(&mut self) {
        self.spent = 0;
    }

    /// Logs the first time this command buffer cannot re-instantiate; later times are debug.
    pub fn note_blocked(&mut self, why: &str) {
        if std::mem::replace(&mut self.warned_blocked, true) {
            log::debug!("update budget spent but not re-instantiating: {why}");
        } else {
            log::warn!(
                "update budget spent ({} of {} bytes) but not re-instantiating: {why}; updates keep going to the old executable graph, whose runtime memory may keep growing",
                self.spent,
                self.limit
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(backend: Backend, version: i32) -> RuntimeInfo {
        RuntimeInfo { backend, library: String::new(), version, device_count: 1, disabled_features: Vec::new() }
    }

    #[test]
    fn the_budget_is_on_by_default_for_hip_from_6_2_and_off_for_cuda() {
        // No fixed ROCm release is known: the newest versions still leak.
        assert_eq!(FIRST_HIP_VERSION_WITHOUT_ARGUMENT_LEAK, None);
        for version in [60_200_000, 60_241_134, 60_342_134, 70_204_000, i32::MAX] {
            assert!(updates_leak(&info(Backend::Hip, version)), "{version}");
            assert_eq!(default_limit(None, &info(Backend::Hip, version)), DEFAULT_BUDGET_BYTES);
        }
        // Before 6.2 no update captures a packet again (5.7.1, 6.0.2, 6.1.2).
        for version in [50_300_000, 50_731_921, 60_032_830, 60_132_830, 60_199_999] {
            assert!(!updates_leak(&info(Backend::Hip, version)), "{version}");
            assert_eq!(default_limit(None, &info(Backend::Hip, version)), 0);
        }
        assert!(!updates_leak(&info(Backend::Cuda, 12_080)));
        assert_eq!(default_limit(None, &info(Backend::Cuda, 12_080)), 0);
        // The variable wins both ways.
        assert_eq!(default_limit(Some(0), &info(Backend::Hip, 60_241_134)), 0);
        assert_eq!(default_limit(Some(1 << 20), &info(Backend::Cuda, 12_080)), 1 << 20);
    }

    fn measured(bytes_per_update: u64) -> Measurement {
        Measurement { bytes_per_update, node_updates: 160, growth: 160 * bytes_per_update, elapsed: std::time::Duration::ZERO }
    }

    #[test]
    fn the_measurement_sets_the_budget_unless_the_variable_does() {
        let hip = info(Backend::Hip, 70_253_211);
        // Growth above the fixed estimate: the default budget, pushes charged what was measured.
        let s = settlement(&hip, None, || Ok((1, measured(8000))));
        assert_eq!((s.limit, s.node_charge, s.device), (DEFAULT_BUDGET_BYTES, 8000, Some(1)));
        assert_eq!(s.basis, Basis::Measured(measured(8000)));
        // Growth below it (a small slot, or a few bytes of another process's allocations per
        // update) never lowers the charge.
        for small in [3, 320, NODE_OVERHEAD_BYTES - 1] {
            let s = settlement(&hip, None, || Ok((0, measured(small))));
            assert_eq!((s.limit, s.node_charge), (DEFAULT_BUDGET_BYTES, NODE_OVERHEAD_BYTES), "{small}");
            assert!(s.describe().contains("never lower it"), "{}", s.describe());
        }
        // Growth past the cap is charged the cap.
        let s = settlement(&hip, None, || Ok((0, measured(1 << 20))));
        assert_eq!((s.limit, s.node_charge), (DEFAULT_BUDGET_BYTES, MAX_NODE_CHARGE_BYTES));
        assert!(s.describe().contains("the cap"), "{}", s.describe());
        // No growth: the fixed default, which on HIP keeps the budget (the memset probe cannot
        // show kernel-node growth).
        let s = settlement(&hip, None, || Ok((0, measured(0))));
        assert_eq!((s.limit, s.node_charge), (DEFAULT_BUDGET_BYTES, NODE_OVERHEAD_BYTES));
        assert!(s.describe().contains("the fixed default"), "{}", s.describe());
        // HIP without growth does not say "off".
        assert!(!s.describe().starts_with("off"), "{}", s.describe());
        // A failed measurement: the fixed default of the runtime.
        let s = settlement(&hip, None, || Err(Basis::Failed("no".into())));
        assert_eq!((s.limit, s.node_charge, s.basis), (DEFAULT_BUDGET_BYTES, NODE_OVERHEAD_BYTES, Basis::Failed("no".into())));
        // Not measured: the same, and said so.
        let s = settlement(&hip, None, || Err(Basis::NotMeasured("why".into())));
        assert_eq!((s.limit, s.node_charge, &s.basis), (DEFAULT_BUDGET_BYTES, NODE_OVERHEAD_BYTES, &Basis::NotMeasured("why".into())));
        assert!(s.describe().starts_with("64 MiB, the fixed default: not measured (why)"), "{}", s.describe());
        // The variable: nothing measured.
        let s = settlement(&hip, Some(4096), || panic!("measured although RCB_EXEC_UPDATE_BUDGET is set"));
        assert_eq!((s.limit, s.node_charge, s.basis, s.device), (4096, NODE_OVERHEAD_BYTES, Basis::Configured, None));
    }

    #[test]
    fn cuda_measures_nothing_and_keeps_the_budget_off() {
        let cuda = info(Backend::Cuda, 13_000);
        let s = settlement(&cuda, None, || panic!("measured on CUDA"));
        assert_eq!((s.limit, s.node_charge, &s.basis, s.device), (0, NODE_OVERHEAD_BYTES, &Basis::Fixed, None));
        assert!(s.describe().starts_with("off, the fixed default"), "{}", s.describe());
        // The variable still sets it.
        let s = settlement(&cuda, Some(1 << 20), || panic!("measured on CUDA"));
        assert_eq!((s.limit, s.basis), (1 << 20, Basis::Configured));
    }

    #[test]
    fn a_zero_limit_is_never_exceeded_and_charges_add_up() {
        let mut b = ExecBudget::new(0, NODE_OVERHEAD_BYTES);
        b.charge(u64::MAX);
        assert!(!b.exceeded_by(u64::MAX));
        let mut b = ExecBudget::new(100, NODE_OVERHEAD_BYTES);
        b.charge(60);
        assert!(!b.exceeded_by(40));
        assert!(b.exceeded_by(41));
        assert_eq!(b.spent(), 60);
    }

    #[test]
    fn push_estimates_add_arguments_to_the_per_node_overhead() {
        let kernel = Params::Kernel(super::super::nodes::KernelRecord {
            function: crate::runtime::Function(std::ptr::null_mut()),
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            blob: super::super::nodes::Blob::new(&[0; 40], &[], &[], None),
        });
        assert_eq!(push_bytes(&kernel, NODE_OVERHEAD_BYTES), 40 + NODE_OVERHEAD_BYTES);
        assert_eq!(push_bytes(&kernel, 320), 360);
        assert_eq!(push_bytes(&Params::Empty, 320), 0);
        // The reported figure: 32 nodes at the overhead make about 185 KiB per whole update.
        assert_eq!(32 * NODE_OVERHEAD_BYTES / 1024, 185);
    }
}

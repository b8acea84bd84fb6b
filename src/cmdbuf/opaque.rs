//! Nodes whose addresses the library cannot patch: child nodes holding a clone of a graph, a
//! graph that came from stream capture, kernel nodes whose arguments the library never sees
//! (`kernelParams`), kernel nodes of an opaque kernel (below), and stream memory-operation nodes
//! flattened from a graph (their addresses are known but never rewritten).
//! Moving an allocation such a node points into would leave the node stale while the update
//! reported success, so each of them has a reference set instead: the addresses it holds (a
//! clone of one of this library's command buffers, whose nodes it recorded) or "unknown". An
//! address update that would move a referenced allocation, or any allocation while some
//! reference set is unknown, is refused whole: nothing changes and the caller re-records.
//!
//! An opaque kernel is one that may read addresses from memory the library cannot see: a
//! collective of NCCL, RCCL or MSCCL finds its buffers in work descriptors in device memory, in
//! peers' registrations of this rank's buffers and in proxies' operations, and its argument
//! blob's layout is private and changes between releases (`docs/flatten-and-trace-cache.md`).
//! Patching its arguments would leave the true addresses stale, so its arguments are never
//! sites (not even words of an `RCB_ARG_SCAN` argument) and its reference set is everything:
//! while it is recorded, no allocation of its command buffer moves in place (the refusal names
//! the kernel). The kernels are recognised by the name the runtime gives their function,
//! matched against [`KernelList`] (`RCB_OPAQUE_KERNELS`).
//!
//! The check costs one counter per moved allocation: each allocation counts the opaque nodes
//! that may reference it, kept up to date when such a node is added or replaced and recounted
//! when the table is replaced.

use super::memory::Heap;
use crate::counters::Fallback;
use crate::runtime::{Function, Graph, NodeType, Runtime};
use std::sync::Arc;

/// What a kernel node of `function` references when its kernel is opaque (on `list`), else
/// `None`. `foreign`: the node comes from a graph the library did not build (flattened or
/// captured), where a function the runtime cannot name counts as opaque, since it might be on
/// the list; a kernel the caller adds itself is taken as not on it then. An empty list (`none`)
/// asks the runtime nothing.
pub fn classify(rt: &dyn Runtime, list: &KernelList, function: Function, foreign: bool) -> Option<References> {
    if list.is_empty() {
        return None;
    }
    match rt.function_name(function) {
        Ok(name) => list
            .matching(&name)
            .map(|pattern| References::Opaque(format!("the kernel `{name}` (on RCB_OPAQUE_KERNELS as `{pattern}`)").into())),
        Err(e) if foreign => Some(References::Opaque(
            format!("a kernel of a captured or foreign graph whose name the runtime cannot give ({e}), which may be on RCB_OPAQUE_KERNELS")
                .into(),
        )),
        Err(e) => {
            log::debug!("a kernel added to a command buffer has no name the runtime can give ({e}): taken as not on RCB_OPAQUE_KERNELS");
            None
        }
    }
}

/// The opaque kernel a graph the library did not build holds (a captured or raw graph, its
/// child graphs included), described for a refusal as [`classify`] describes one, or `None`.
/// Such a graph pins every allocation anyway (its references are unknown); this only names the
/// kernel, so that a refusal is counted and logged as `RCB_FALLBACK_OPAQUE_KERNEL` as it is for
/// the same kernel flattened. Only a name on the list counts: a kernel the runtime cannot name,
/// or a node that cannot be read, leaves the graph's references unknown. An empty list asks the
/// runtime nothing.
pub fn in_graph(rt: &dyn Runtime, list: &KernelList, graph: Graph) -> Option<Arc<str>> {
    if list.is_empty() {
        return None;
    }
    for node in rt.graph_nodes(graph).ok()? {
        let found = match rt.node_type(node) {
            Ok(NodeType::Kernel) => rt.kernel_node_read(node).ok().and_then(|k| {
                let name = rt.function_name(k.function).ok()?;
                let pattern = list.matching(&name)?;
                Some(format!("the kernel `{name}` (on RCB_OPAQUE_KERNELS as `{pattern}`)").into())
            }),
            Ok(NodeType::Child) => rt.child_node_graph(node).ok().and_then(|child| in_graph(rt, list, child)),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// What a node the library cannot patch may point into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum References {
    /// These addresses and no others; each one inside an allocation pins that allocation.
    Known(Vec<u64>),
    /// Anything: while the node exists no allocation can move in place.
    Unknown,
    /// Anything, through memory the library cannot see: a node of an opaque kernel (or a clone
    /// of a graph holding one), described here for the refusal's reason.
    Opaque(Arc<str>),
}

/// Which allocations opaque nodes pin, as counts, how many opaque nodes have unknown
/// references, and the nodes of opaque kernels.
#[derive(Default)]
pub struct Pins {
    /// `counts[a]`: opaque nodes whose known references lie inside allocation `a`; empty until
    /// the first such node (most command buffers have none), then one per allocation.
    counts: Vec<u32>,
    allocations: usize,
    unknown: u32,
    /// Each description of [`References::Opaque`] nodes and how many there are (few distinct).
    kernels: Vec<(Arc<str>, u32)>,
}

impl Pins {
    /// The heap the pin counts hold (see `memory.rs`).
    pub fn heap(&self) -> Heap {
        let mut heap = Heap::vec(&self.counts);
        heap.add(Heap::vec(&self.kernels));
        heap
    }

    /// Forgets every pin and expects allocations `0..n`.
    pub fn reset(&mut self, n: usize) {
        self.counts = Vec::new();
        self.allocations = n;
        self.unknown = 0;
        self.kernels.clear();
    }

    /// Counts one more opaque node: `allocations` (distinct) are those its known references lie
    /// in, or `None` when its references are unknown.
    pub fn add(&mut self, allocations: Option<&[u32]>) {
        match allocations {
            Some(allocations) => {
                if !allocations.is_empty() && self.counts.is_empty() {
                    self.counts.resize(self.allocations, 0);
                }
                allocations.iter().for_each(|&a| self.counts[a as usize] += 1)
            }
            None => self.unknown += 1,
        }
    }

    /// Counts one more node of an opaque kernel (or a clone holding one), described by `what`.
    pub fn add_opaque(&mut self, what: &Arc<str>) {
        match self.kernels.iter_mut().find(|(w, _)| w == what) {
            Some((_, n)) => *n += 1,
            None => self.kernels.push((what.clone(), 1)),
        }
    }

    /// Undoes one [`Self::add_opaque`] with the same argument.
    pub fn remove_opaque(&mut self, what: &Arc<str>) {
        if let Some(i) = self.kernels.iter().position(|(w, _)| w == what) {
            self.kernels[i].1 -= 1;
            if self.kernels[i].1 == 0 {
                self.kernels.swap_remove(i);
            }
        }
    }

    /// A description of one opaque kernel recorded here, if any.
    pub fn opaque_kernel(&self) -> Option<&str> {
        self.kernels.first().map(|(w, _)| &**w)
    }

    /// Undoes one [`Self::add`] with the same argument.
    pub fn remove(&mut self, allocations: Option<&[u32]>) {
        match allocations {
            Some(allocations) => allocations.iter().for_each(|&a| self.counts[a as usize] -= 1),
            None => self.unknown -= 1,
        }
    }

    /// Why moving the allocations of `moved` (`(allocation, new base)`, indices in the table)
    /// must be refused, if it must, and how the refusal is counted. Nothing moved is never
    /// refused.
    #[inline]
    pub fn refusal(&self, moved: &[(u32, u64)]) -> Option<(Fallback, String)> {
        // What most command buffers have: nothing pinned at all, whatever moved.
        if moved.is_empty() || (self.kernels.is_empty() && self.unknown == 0 && self.counts.is_empty()) {
            return None;
        }
        self.refusal_of(moved)
    }

    fn refusal_of(&self, moved: &[(u32, u64)]) -> Option<(Fallback, String)> {
        if let Some((what, n)) = self.kernels.first() {
            return Some((
                Fallback::OpaqueKernel,
                format!(
                    "{n} node(s) of {what} may read addresses the library cannot see (work descriptors in device memory, peers' registrations), so no allocation can move in place; {} opaque kernel(s) in all",
                    self.kernels.len()
                ),
            ));
        }
        if self.unknown > 0 {
            return Some((
                Fallback::OpaqueReference,
                format!(
                    "{} node(s) may point anywhere (a child node of a raw or captured graph, or a kernel node added with kernelParams), so no allocation can move in place",
                    self.unknown
                ),
            ));
        }
        moved.iter().find(|&&(a, _)| self.counts.get(a as usize).is_some_and(|&n| n > 0)).map(|&(a, _)| {
            (
                Fallback::OpaqueReference,
                format!(
                    "allocation {a} is referenced by {} node(s) whose addresses are not patch sites (cloned child graphs, stream memory operations)",
                    self.counts[a as usize]
                ),
            )
        })
    }
}

/// The kernels whose arguments are never patched (`RCB_OPAQUE_KERNELS`): patterns matched
/// against the identifiers of a kernel's name as the runtime reports it.
///
/// A pattern ending in `*` matches an identifier that starts with the rest, any other pattern
/// an identifier equal to it (case-sensitive). The identifiers of a name are, for an Itanium
/// C++ mangled name (`_Z...`), every source name in it, its parameter and template types'
/// included: `_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE`
/// has `ncclDevKernel_AllReduce_Sum_f32_RING_LL` and `ncclDevKernelArgsStorage`. So a kernel of
/// another name that takes a collective library's types (MSCCL++'s `allgather6(void*,
/// mscclpp::DeviceHandle<...>*)`, a kernel on NCCL's device API) is on the list too: a kernel
/// taken for opaque costs a re-record, one missed a wrong result. Any other name (an
/// `extern "C"` kernel) is its own one identifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelList {
    patterns: Vec<String>,
}

impl KernelList {
    /// The default: the kernels of NCCL (`ncclDevKernel_*`, `ncclSymkDevKernel_*`, the
    /// `ncclKernel_*` of older releases), RCCL (the same, and `rccl*` for its own) and MSCCL
    /// (`mscclKernel_*`, which RCCL launches for collectives too).
    pub const DEFAULT: [&'static str; 3] = ["nccl*", "rccl*", "msccl*"];

    /// Parses `RCB_OPAQUE_KERNELS`: unset or empty is the default; `none` is no kernel at all;
    /// otherwise comma-separated patterns replacing the default, where `default` stands for the
    /// default's patterns. `Err` says what is wrong.
    pub fn parse(text: Option<&str>) -> Result<KernelList, String> {
        let text = text.map(str::trim).unwrap_or("");
        if text.is_empty() {
            return Ok(Self::default());
        }
        if text == "none" {
            return Ok(KernelList { patterns: Vec::new() });
        }
        let mut patterns = Vec::new();
        for entry in text.split(',').map(str::trim) {
            match entry {
                "default" => patterns.extend(Self::DEFAULT.iter().map(|p| p.to_string())),
                "" => return Err(String::from("has an empty entry")),
                "none" => return Err(String::from("names none with other entries (none stands alone)")),
                _ if entry.contains(char::is_whitespace) || entry.strip_suffix('*').unwrap_or(entry).contains('*') || entry == "*" => {
                    return Err(format!("has the entry {entry:?}; an entry is an identifier, or its beginning followed by one *"));
                }
                _ => patterns.push(entry.to_owned()),
            }
        }
        Ok(KernelList { patterns })
    }

    /// Whether no kernel is on the list (`none`): then no name is ever asked for.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The pattern of the list that `name` (as the runtime reports it) matches, if any.
    pub fn matching(&self, name: &str) -> Option<&str> {
        let identifiers = identifiers(name);
        self.patterns.iter().map(String::as_str).find(|p| {
            identifiers.iter().any(|id| match p.strip_suffix('*') {
                Some(prefix) => id.starts_with(prefix),
                None => id == p,
            })
        })
    }
}

impl Default for KernelList {
    fn default() -> Self {
        KernelList { patterns: Self::DEFAULT.iter().map(|p| p.to_string()).collect() }
    }
}

/// The identifiers of a kernel's name (see [`KernelList`]): in a mangled name, every
/// `<length><identifier>` source name, read left to right (a run of digits whose length does not
/// fit, or is not followed by as many identifier characters, is skipped: a template argument's
/// number, `Lm4096E`). Reading a little more than the grammar's source names can only put more
/// kernels on the list. A name that starts with `_Z` but holds no source name is taken whole.
fn identifiers(name: &str) -> Vec<&str> {
    let Some(rest) = name.strip_prefix("_Z") else { return vec![name] };
    let bytes = rest.as_bytes();
    let mut ids = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let digits = bytes[at..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            at += 1;
            continue;
        }
        let start = at + digits;
        let len = rest[at..start].parse::<usize>().ok().filter(|&n| n > 0 && start + n <= bytes.len());
        match len {
            Some(n) if bytes[start..start + n].iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') => {
                ids.push(&rest[start..start + n]);
                at = start + n;
            }
            _ => at = start,
        }
    }
    if ids.is_empty() { vec![name] } else { ids }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(r: Option<(Fallback, String)>) -> Option<String> {
        r.map(|(why, reason)| {
            assert_eq!(why, Fallback::OpaqueReference, "{reason}");
            reason
        })
    }

    #[test]
    fn refuses_a_pinned_allocation_and_everything_while_one_reference_set_is_unknown() {
        let mut pins = Pins::default();
        pins.reset(3);
        assert_eq!(pins.refusal(&[(0, 1), (2, 2)]), None);
        pins.add(Some(&[1, 2]));
        pins.add(Some(&[2]));
        assert_eq!(pins.refusal(&[(0, 1)]), None);
        assert!(reason(pins.refusal(&[(0, 1), (2, 2)])).is_some_and(|r| r.contains("allocation 2") && r.contains("by 2 node(s)")));
        pins.remove(Some(&[2]));
        pins.remove(Some(&[1, 2]));
        assert_eq!(pins.refusal(&[(1, 1), (2, 2)]), None);
        pins.add(None);
        assert!(reason(pins.refusal(&[(0, 1)])).is_some_and(|r| r.contains("1 node(s)")));
        assert_eq!(pins.refusal(&[]), None, "nothing moved is never refused");
        pins.remove(None);
        assert_eq!(pins.refusal(&[(0, 1)]), None);
        pins.add(None);
        pins.reset(1);
        assert_eq!(pins.refusal(&[(0, 1)]), None, "a reset forgets unknown references too");
    }

    #[test]
    fn an_opaque_kernel_refuses_every_move_naming_the_kernel_until_its_last_node_goes() {
        let mut pins = Pins::default();
        pins.reset(2);
        let (nccl, msccl): (Arc<str>, Arc<str>) = ("the kernel `ncclA`".into(), "the kernel `mscclB`".into());
        pins.add_opaque(&nccl);
        pins.add_opaque(&nccl);
        pins.add_opaque(&msccl);
        pins.add(None);
        let (why, reason) = pins.refusal(&[(1, 7)]).unwrap();
        assert_eq!(why, Fallback::OpaqueKernel, "an opaque kernel is named before unknown references");
        assert!(reason.contains("2 node(s) of the kernel `ncclA`") && reason.contains("2 opaque kernel(s)"), "{reason}");
        assert_eq!(pins.opaque_kernel(), Some("the kernel `ncclA`"));
        assert_eq!(pins.refusal(&[]), None);
        pins.remove_opaque(&nccl);
        pins.remove_opaque(&nccl);
        assert!(pins.refusal(&[(0, 7)]).is_some_and(|(w, r)| w == Fallback::OpaqueKernel && r.contains("mscclB")));
        pins.remove_opaque(&msccl);
        assert_eq!(pins.opaque_kernel(), None);
        assert_eq!(pins.refusal(&[(0, 7)]).map(|(w, _)| w), Some(Fallback::OpaqueReference));
        pins.add_opaque(&msccl);
        pins.reset(2);
        assert_eq!(pins.opaque_kernel(), None, "a reset forgets opaque kernels too");
    }

    #[test]
    fn identifiers_are_every_source_name_of_a_mangled_name_parameter_types_included() {
        let nccl = "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE";
        assert_eq!(identifiers(nccl), vec!["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernelArgsStorage"]);
        assert_eq!(identifiers("_ZN12_GLOBAL__N_113oneRankReduceIfEEvv"), vec!["_GLOBAL__N_1", "oneRankReduce"]);
        assert_eq!(identifiers("_ZL10staticFuncPf"), vec!["staticFunc"]);
        assert_eq!(identifiers("_ZNK3foo3barEv"), vec!["foo", "bar"]);
        assert_eq!(identifiers("_Z3fooIiEvPT_"), vec!["foo"]);
        assert_eq!(identifiers("_Z3fooILm4096EEvv"), vec!["foo"], "a template argument's number is no source name");
        assert_eq!(identifiers("rcb_test_fill_u32"), vec!["rcb_test_fill_u32"]);
        for odd in ["_Z", "_Z99short", "_ZN", "_Zx"] {
            assert_eq!(identifiers(odd), vec![odd], "a mangled name without a source name is taken whole");
        }
        // Parameter types are read too: a kernel that takes NCCL's argument type is on the list.
        assert_eq!(identifiers("_Z6mine_k24ncclDevKernelArgsStorageILm4096EE"), vec!["mine_k", "ncclDevKernelArgsStorage"]);
    }

    #[test]
    fn the_default_list_matches_the_kernels_of_nccl_rccl_and_msccl_as_runtimes_name_them() {
        let list = KernelList::default();
        let theirs = [
            "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
            "_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE",
            "_Z23ncclDevKernel_Generic_424ncclDevKernelArgsStorageILm4096EE",
            "_Z28ncclDevKernelDebug_Generic_124ncclDevKernelArgsStorageILm4096EE",
            "_Z33ncclSymkDevKernel_AllReduce_AGxLL24ncclSymkDevWorkArgs",
            "_Z38ncclKernel_AllReduce_RING_LL_Sum_floatP11ncclDevCommmP8ncclWork",
            "_Z27mscclKernel_Sum_float_LL128P11ncclDevCommP10mscclAlgoP10mscclWork",
            "ncclDevKernel_Generic",
            // MSCCL++'s kernels have names of their own; their parameters are MSCCL++'s types.
            "_Z10allgather6ILb1EEvPvPN7mscclpp12DeviceHandleINS0_13MemoryChannelEEEmmmm",
            // A kernel of another name that takes NCCL's argument type.
            "_Z6mine_k24ncclDevKernelArgsStorageILm4096EE",
        ];
        for name in theirs {
            assert!(list.matching(name).is_some(), "{name}");
        }
        let ours = ["rcb_test_fill_u32", "_Z4gemmPfS_S_", "_ZN12_GLOBAL__N_113oneRankReduceIfEEvv", "my_nccl_kernel"];
        for name in ours {
            assert_eq!(list.matching(name), None, "{name}");
        }
        assert_eq!(list.matching(theirs[0]), Some("nccl*"));
    }

    #[test]
    fn rcb_opaque_kernels_is_the_default_none_or_patterns() {
        let default = KernelList::default();
        assert_eq!(KernelList::parse(None).unwrap(), default);
        assert_eq!(KernelList::parse(Some("  ")).unwrap(), default, "empty is the default");
        let none = KernelList::parse(Some(" none ")).unwrap();
        assert!(none.is_empty() && none.matching("ncclDevKernel_Generic").is_none());
        let custom = KernelList::parse(Some("rcb_test_indirect*, gemm")).unwrap();
        assert_eq!(custom.matching("rcb_test_indirect_fill_u32"), Some("rcb_test_indirect*"));
        assert_eq!(custom.matching("_Z4gemmPfS_S_"), Some("gemm"), "an exact pattern matches the identifier");
        assert_eq!(custom.matching("_Z5gemm2Pf"), None, "and only that identifier");
        assert_eq!(custom.matching("ncclDevKernel_Generic"), None, "a list replaces the default");
        let more = KernelList::parse(Some("default,rcb_test_*")).unwrap();
        assert!(more.matching("ncclDevKernel_Generic").is_some() && more.matching("rcb_test_fill_u32").is_some());
        for bad in ["a,,b", "none,nccl*", "*", "a*b", "nc cl", "a**"] {
            assert!(KernelList::parse(Some(bad)).is_err(), "{bad:?}");
        }
    }
}

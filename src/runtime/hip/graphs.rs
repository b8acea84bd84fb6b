//! Graph templates and executable graphs.

use super::api::{DestinationNode, SourceNode};
use super::layout::Memcpy3DParms;
use super::{EXTRA_KEYS, HipRuntime, ptr, with_extra};
use crate::error::{Error, Result};
use crate::runtime::common::{self, BatchMemOpNodeParams, HostNodeParams, P};
use crate::runtime::extra;
use crate::runtime::*;
use hip_runtime_sys::{hipKernelNodeParams, hipMemsetParams};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

pub(super) const MEMCPY_DEVICE_TO_DEVICE: c_int = 3;

impl HipRuntime {
    fn nodes_of(&self, call: &'static str, f: impl Fn(*mut P, &mut usize) -> c_int) -> Result<Vec<Node>> {
        let mut n = 0usize;
        self.check(call, f(null_mut(), &mut n))?;
        let mut nodes = vec![null_mut(); n];
        self.check(call, f(nodes.as_mut_ptr(), &mut n))?;
        nodes.truncate(n);
        Ok(nodes.into_iter().map(Node).collect())
    }
}

impl Graphs for HipRuntime {
    fn graph_create(&self) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: a valid out-pointer; flags must be 0.
        self.check("hipGraphCreate", unsafe { (self.core.hipGraphCreate)(&mut g, 0) })?;
        Ok(Graph(g))
    }

    fn graph_destroy(&self, graph: Graph) -> Result<()> {
        // SAFETY: the caller owns the graph and gives it up here.
        self.check("hipGraphDestroy", unsafe { (self.core.hipGraphDestroy)(graph.0) })
    }

    fn graph_clone(&self, graph: Graph) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the graph live.
        self.check("hipGraphClone", unsafe { (self.core.hipGraphClone)(&mut g, graph.0) })?;
        Ok(Graph(g))
    }

    fn node_destroy(&self, node: Node) -> Result<()> {
        // SAFETY: the caller owns the node's graph, keeps it live and gives the node up here.
        self.check("hipGraphDestroyNode", unsafe { (self.core.hipGraphDestroyNode)(node.0) })
    }

    fn add_kernel_node(&self, graph: Graph, deps: &[Node], k: &KernelParams<'_>) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        with_extra(k.args, |kernel_params, extra| {
            let params = self.kernel_node_params(k, kernel_params, extra);
            let mut node = null_mut();
            // SAFETY: `params`, its arrays and `deps` live until the call returns and HIP copies them;
            // the caller keeps the graph, the dependencies and the function's module live.
            self.check("hipGraphAddKernelNode", unsafe { (self.core.hipGraphAddKernelNode)(&mut node, graph.0, d, n, &params) })?;
            Ok(Node(node))
        })
    }

    fn add_kernel_node_by_pointers(&self, graph: Graph, deps: &[Node], k: &KernelParamPointers) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let params = self.pointer_node_params(k);
        let mut node = null_mut();
        // SAFETY: the caller's argument pointers are valid for the call; HIP copies the values it
        // reads through them, sized by the kernel's metadata. The caller keeps the handles live.
        self.check("hipGraphAddKernelNode", unsafe { (self.core.hipGraphAddKernelNode)(&mut node, graph.0, d, n, &params) })?;
        Ok(Node(node))
    }

    fn add_memcpy_node(&self, graph: Graph, deps: &[Node], c: &MemcpyParams) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let mut node = null_mut();
        // SAFETY: `deps` lives until the call returns; the caller keeps the graph and the
        // dependencies live. The addresses are recorded, not accessed, here.
        self.check("hipGraphAddMemcpyNode1D", unsafe {
            (self.core.hipGraphAddMemcpyNode1D)(&mut node, graph.0, d, n, ptr(c.dst), ptr(c.src), c.bytes, MEMCPY_DEVICE_TO_DEVICE)
        })?;
        Ok(Node(node))
    }

    fn add_memset_node(&self, graph: Graph, deps: &[Node], s: &MemsetParams) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let params = self.layout.memset(s);
        let mut node = null_mut();
        // SAFETY: `params` and `deps` live until the call returns; the caller keeps the graph and
        // the dependencies live.
        self.check("hipGraphAddMemsetNode", unsafe {
            (self.core.hipGraphAddMemsetNode)(&mut node, graph.0, d, n, (&raw const params).cast::<c_void>())
        })?;
        Ok(Node(node))
    }

    fn add_empty_node(&self, graph: Graph, deps: &[Node]) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let mut node = null_mut();
        // SAFETY: a valid out-pointer; `deps` lives until the call returns; the caller keeps the
        // graph and the dependencies live.
        self.check("hipGraphAddEmptyNode", unsafe { (self.core.hipGraphAddEmptyNode)(&mut node, graph.0, d, n) })?;
        Ok(Node(node))
    }

    fn add_child_node(&self, graph: Graph, deps: &[Node], child: Graph) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let mut node = null_mut();
        // SAFETY: a valid out-pointer; `deps` lives until the call returns; the caller keeps both
        // graphs and the dependencies live (HIP clones the child).
        self.check("hipGraphAddChildGraphNode", unsafe { (self.core.hipGraphAddChildGraphNode)(&mut node, graph.0, d, n, child.0) })?;
        Ok(Node(node))
    }

    fn add_edges(&self, graph: Graph, edges: &[Edge]) -> Result<()> {
        if edges.iter().any(|e| e.data != EdgeData::default()) {
            return Err(Error::unsupported("HIP graphs cannot carry edge data"));
        }
        let (from, to) = common::edge_ends(edges);
        // SAFETY: both arrays hold `edges.len()` nodes; the caller keeps the graph and its nodes live.
        self.check("hipGraphAddDependencies", unsafe {
            (self.core.hipGraphAddDependencies)(graph.0, from.as_ptr(), to.as_ptr(), edges.len())
        })
    }

    fn graph_nodes(&self, graph: Graph) -> Result<Vec<Node>> {
        // SAFETY: the array, when given, holds `n` entries; the caller keeps the graph live.
        self.nodes_of("hipGraphGetNodes", |out, n| unsafe { (self.core.hipGraphGetNodes)(graph.0, out, n) })
    }

    fn graph_edges(&self, graph: Graph) -> Result<Vec<Edge>> {
        let mut n = 0usize;
        // SAFETY: null arrays ask for the count; the caller keeps the graph live.
        self.check("hipGraphGetEdges", unsafe { (self.core.hipGraphGetEdges)(graph.0, null_mut(), null_mut(), &mut n) })?;
        let (mut from, mut to) = (vec![null_mut(); n], vec![null_mut(); n]);
        // SAFETY: both arrays hold `n` entries.
        self.check("hipGraphGetEdges", unsafe { (self.core.hipGraphGetEdges)(graph.0, from.as_mut_ptr(), to.as_mut_ptr(), &mut n) })?;
        Ok(from.into_iter().zip(to).take(n).map(|(f, t)| Edge { from: Node(f), to: Node(t), data: EdgeData::default() }).collect())
    }

    fn node_type(&self, node: Node) -> Result<NodeType> {
        let mut raw = 0;
        // SAFETY: a valid out-pointer; the caller keeps the node live.
        self.check("hipGraphNodeGetType", unsafe { (self.core.hipGraphNodeGetType)(node.0, &mut raw) })?;
        Ok(self.layout.node_type(raw))
    }

    fn kernel_node_read(&self, node: Node) -> Result<KernelNodeRead> {
        // SAFETY: the struct holds only integers and raw pointers, for which all-zero is valid.
        let mut p: hipKernelNodeParams = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out-pointer; the caller keeps the node live. The returned arrays are owned
        // by the node and only read below, before anything can change them.
        self.check("hipGraphKernelNodeGetParams", unsafe { (self.core.hipGraphKernelNodeGetParams)(node.0, &mut p) })?;
        let args = if !p.extra.is_null() {
            // SAFETY: `extra` is the node's own list, valid until its parameters change: the
            // runtime ends it with END and its SIZE and buffer describe the node's arguments.
            unsafe { extra::parse(p.extra, &EXTRA_KEYS) }
        } else if !p.kernelParams.is_null() {
            Err(String::from("the kernel node passes kernelParams and HIP has no query for the parameter layout"))
        } else {
            Ok(Vec::new())
        };
        Ok(KernelNodeRead {
            function: Function(p.func),
            grid: [p.gridDim.x, p.gridDim.y, p.gridDim.z],
            block: [p.blockDim.x, p.blockDim.y, p.blockDim.z],
            shared_mem_bytes: p.sharedMemBytes,
            args,
        })
    }

    fn copy_kernel_node_attributes(&self, dst: Node, src: Node) -> Result<()> {
        match &self.attributes {
            // HIP takes the source first, the reverse of CUDA's `cuGraphKernelNodeCopyAttributes`
            // (clr runs `hDst->CopyAttr(hSrc)`); swapped, a source with an attribute set fails
            // with hipErrorInvalidContext and the new node gets nothing.
            // SAFETY: the caller keeps both kernel nodes live.
            Some(a) => self.check("hipGraphKernelNodeCopyAttributes", unsafe {
                (a.hipGraphKernelNodeCopyAttributes)(SourceNode(src.0), DestinationNode(dst.0))
            }),
            // Runtimes before 5.5 have no kernel-node attributes to lose.
            None => Ok(()),
        }
    }

    fn memcpy_read_back(&self) -> MemcpyReadBack {
        self.layout.memcpy_read_back()
    }

    fn memcpy_node_read(&self, node: Node) -> Result<MemcpyParams> {
        if let MemcpyReadBack::Never(why) = self.layout.memcpy_read_back() {
            return Err(Error::unsupported(why));
        }
        // SAFETY: the struct holds only integers and raw pointers, for which all-zero is valid.
        let mut p: Memcpy3DParms = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out-pointer; the caller keeps the node live.
        self.check("hipGraphMemcpyNodeGetParams", unsafe { (self.core.hipGraphMemcpyNodeGetParams)(node.0, &mut p) })?;
        self.layout.memcpy_read(&p).map_err(|why| Error::unsupported(format!("the memcpy node is not a 1-D device-to-device copy: {why}")))
    }

    fn memset_node_read(&self, node: Node) -> Result<MemsetParams> {
        // SAFETY: the struct holds only integers and a raw pointer, for which all-zero is valid.
        let mut p: hipMemsetParams = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out-pointer in the runtime's layout; the caller keeps the node live.
        self.check("hipGraphMemsetNodeGetParams", unsafe {
            (self.core.hipGraphMemsetNodeGetParams)(node.0, (&raw mut p).cast::<c_void>())
        })?;
        Ok(self.layout.memset_read(&p))
    }

    fn child_node_graph(&self, node: Node) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the node live.
        self.check("hipGraphChildGraphNodeGetGraph", unsafe { (self.core.hipGraphChildGraphNodeGetGraph)(node.0, &mut g) })?;
        Ok(Graph(g))
    }

    fn event_record_node_event(&self, node: Node) -> Result<Event> {
        let api = self.event_nodes.get()?;
        let mut e = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the node live and checked its type.
        self.check("hipGraphEventRecordNodeGetEvent", unsafe { (api.hipGraphEventRecordNodeGetEvent)(node.0, &mut e) })?;
        Ok(Event(e))
    }

    fn event_wait_node_event(&self, node: Node) -> Result<Event> {
        let api = self.event_nodes.get()?;
        let mut e = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the node live and checked its type.
        self.check("hipGraphEventWaitNodeGetEvent", unsafe { (api.hipGraphEventWaitNodeGetEvent)(node.0, &mut e) })?;
        Ok(Event(e))
    }

    fn host_node_read(&self, node: Node) -> Result<HostNode> {
        let api = self.host_nodes.get()?;
        let mut p = HostNodeParams { function: None, user_data: null_mut() };
        // SAFETY: a valid out-pointer; the caller keeps the node live and checked its type (clr
        // reinterprets any node as a host node here).
        self.check("hipGraphHostNodeGetParams", unsafe { (api.hipGraphHostNodeGetParams)(node.0, &mut p) })?;
        p.read().ok_or_else(|| Error::unsupported("the host node has no function"))
    }

    fn mem_op_node_read(&self, node: Node) -> Result<MemOpNode> {
        let api = self.mem_op_nodes.get()?;
        let mut p = BatchMemOpNodeParams::zeroed();
        // SAFETY: a valid out-pointer; the caller keeps the node live and checked its type.
        self.check("hipGraphBatchMemOpNodeGetParams", unsafe { (api.hipGraphBatchMemOpNodeGetParams)(node.0, &mut p) })?;
        // SAFETY: the array is the node's own, `count` long, and nothing changes it during the copy.
        Ok(unsafe { p.read() })
    }

    fn add_event_record_node(&self, graph: Graph, deps: &[Node], event: Event) -> Result<Node> {
        let api = self.event_nodes.get()?;
        let (d, n) = common::dependencies(deps);
        let mut node = null_mut();
        // SAFETY: a valid out-pointer; `deps` lives until the call returns; the caller keeps the
        // graph, the dependencies and the event live.
        self.check("hipGraphAddEventRecordNode", unsafe { (api.hipGraphAddEventRecordNode)(&mut node, graph.0, d, n, event.0) })?;
        Ok(Node(node))
    }

    fn add_event_wait_node(&self, graph: Graph, deps: &[Node], event: Event) -> Result<Node> {
        let api = self.event_nodes.get()?;
        let (d, n) = common::dependencies(deps);
        let mut node = null_mut();
        // SAFETY: as for `add_event_record_node`.
        self.check("hipGraphAddEventWaitNode", unsafe { (api.hipGraphAddEventWaitNode)(&mut node, graph.0, d, n, event.0) })?;
        Ok(Node(node))
    }

    fn add_host_node(&self, graph: Graph, deps: &[Node], host: &HostNode) -> Result<Node> {
        let api = self.host_nodes.get()?;
        let (d, n) = common::dependencies(deps);
        let params = HostNodeParams::of(host);
        let mut node = null_mut();
        // SAFETY: `params` and `deps` live until the call returns; the caller keeps the graph and
        // the dependencies live, and the function and its user data are the source node's.
        self.check("hipGraphAddHostNode", unsafe { (api.hipGraphAddHostNode)(&mut node, graph.0, d, n, &params) })?;
        Ok(Node(node))
    }

    fn add_mem_op_node(&self, graph: Graph, deps: &[Node], ops: &MemOpNode) -> Result<Node> {
        let api = self.mem_op_nodes.get()?;
        let (d, n) = common::dependencies(deps);
        let params = BatchMemOpNodeParams::of(ops);
        let mut node = null_mut();
        // SAFETY: `params` points into `ops`, which with `deps` lives until the call returns (the
        // runtime copies the operations); the caller keeps the graph and the dependencies live.
        self.check("hipGraphAddBatchMemOpNode", unsafe { (api.hipGraphAddBatchMemOpNode)(&mut node, graph.0, d, n, &params) })?;
        Ok(Node(node))
    }

    fn child_graph_refuses(&self, _kind: NodeType) -> Option<&'static str> {
        // clr's hipGraphAddChildGraphNode clones any graph.
        None
    }

    fn memory_class(&self, _ptr: DevicePtr) -> Option<MemoryClass> {
        // clr's hipGraphExecMemcpyNodeSetParams1D checks the copy's direction and size, not the
        // kind of allocation behind its operands.
        None
    }

    fn kernel_node_set(&self, node: Node, k: &KernelParams<'_>) -> Result<()> {
        with_extra(k.args, |kernel_params, extra| {
            let params = self.kernel_node_params(k, kernel_params, extra);
            // SAFETY: fresh arrays, never the node's own (ROCm/clr#138), live until the call returns;
            // the caller keeps the node live.
            self.check("hipGraphKernelNodeSetParams", unsafe { (self.core.hipGraphKernelNodeSetParams)(node.0, &params) })
        })
    }

    fn kernel_node_set_by_pointers(&self, node: Node, k: &KernelParamPointers) -> Result<()> {
        let params = self.pointer_node_params(k);
        // SAFETY: the caller's argument pointers are valid for the call and HIP copies the values;
        // the caller keeps the node live.
        self.check("hipGraphKernelNodeSetParams", unsafe { (self.core.hipGraphKernelNodeSetParams)(node.0, &params) })
    }

    fn memcpy_node_set(&self, node: Node, c: &MemcpyParams) -> Result<()> {
        // SAFETY: the caller keeps the node live; the addresses are recorded, not accessed, here.
        self.check("hipGraphMemcpyNodeSetParams1D", unsafe {
            (self.core.hipGraphMemcpyNodeSetParams1D)(node.0, ptr(c.dst), ptr(c.src), c.bytes, MEMCPY_DEVICE_TO_DEVICE)
        })
    }

    fn memset_node_set(&self, node: Node, s: &MemsetParams) -> Result<()> {
        let params = self.layout.memset(s);
        // SAFETY: `params` lives until the call returns; the caller keeps the node live.
        self.check("hipGraphMemsetNodeSetParams", unsafe {
            (self.core.hipGraphMemsetNodeSetParams)(node.0, (&raw const params).cast::<c_void>())
        })
    }

    fn instantiate(&self, graph: Graph) -> Result<Exec> {
        let mut e = null_mut();
        // SAFETY: a valid out-pointer; no error node or log requested; the caller keeps the graph live.
        self.check("hipGraphInstantiate", unsafe { (self.core.hipGraphInstantiate)(&mut e, graph.0, null_mut(), null_mut(), 0) })?;
        Ok(Exec(e))
    }

    fn exec_destroy(&self, exec: Exec) -> Result<()> {
        // SAFETY: the caller owns the executable graph, no launch of it is pending, and it gives it
        // up here.
        self.check("hipGraphExecDestroy", unsafe { (self.core.hipGraphExecDestroy)(exec.0) })
    }

    fn exec_kernel_node_set(&self, exec: Exec, node: Node, k: &KernelParams<'_>) -> Result<()> {
        with_extra(k.args, |kernel_params, extra| {
            let params = self.kernel_node_params(k, kernel_params, extra);
            // SAFETY: fresh arrays that live until the call returns; the caller keeps both handles live.
            self.check("hipGraphExecKernelNodeSetParams", unsafe { (self.core.hipGraphExecKernelNodeSetParams)(exec.0, node.0, &params) })
        })
    }

    fn exec_kernel_node_set_by_pointers(&self, exec: Exec, node: Node, k: &KernelParamPointers) -> Result<()> {
        let params = self.pointer_node_params(k);
        // SAFETY: the caller's argument pointers are valid for the call and HIP copies the values;
        // the caller keeps both handles live.
        self.check("hipGraphExecKernelNodeSetParams", unsafe { (self.core.hipGraphExecKernelNodeSetParams)(exec.0, node.0, &params) })
    }

    fn exec_memcpy_node_set(&self, exec: Exec, node: Node, c: &MemcpyParams) -> Result<()> {
        // SAFETY: the caller keeps both handles live; the addresses are recorded, not accessed, here.
        self.check("hipGraphExecMemcpyNodeSetParams1D", unsafe {
            (self.core.hipGraphExecMemcpyNodeSetParams1D)(exec.0, node.0, ptr(c.dst), ptr(c.src), c.bytes, MEMCPY_DEVICE_TO_DEVICE)
        })
    }

    fn exec_memset_node_set(&self, exec: Exec, node: Node, s: &MemsetParams) -> Result<()> {
        let params = self.layout.memset(s);
        // SAFETY: `params` lives until the call returns; the caller keeps both handles live.
        self.check("hipGraphExecMemsetNodeSetParams", unsafe {
            (self.core.hipGraphExecMemsetNodeSetParams)(exec.0, node.0, (&raw const params).cast::<c_void>())
        })
    }

    fn exec_child_node_set(&self, exec: Exec, node: Node, child: Graph) -> Result<()> {
        // SAFETY: the caller keeps the three handles live.
        self.check("hipGraphExecChildGraphNodeSetParams", unsafe {
            (self.core.hipGraphExecChildGraphNodeSetParams)(exec.0, node.0, child.0)
        })
    }

    fn graph_launch(&self, exec: Exec, stream: Stream) -> Result<()> {
        // SAFETY: the caller keeps the executable graph, the stream and every address the graph uses
        // live until the launch has run.
        self.check("hipGraphLaunch", unsafe { (self.core.hipGraphLaunch)(exec.0, stream.0) })
    }

    fn function_name(&self, function: Function) -> Result<String> {
        let names = self.names.get()?;
        // A node's `func` is a host stub (a captured runtime launch) or a `hipFunction_t` (a module
        // launch), which nothing tells apart: the registry of host stubs is asked first and answers
        // null for anything else (clr tells them apart the same way, `GraphKernelNode::getFunc`);
        // `hipKernelNameRef` takes its argument for a `hipFunction_t` unchecked. The registry
        // holds a stub's name from its registration (`__hipRegisterFunction`, when its library is
        // loaded), whether or not its code object has been loaded on a device (clr loads those
        // lazily, at the first `getStatFunc`), so a collective that never ran is named too; a
        // stub the registry has dropped (its library unloaded) leaves a node that no launch can
        // run either. A null name is an error, which the caller takes for an unnamed kernel.
        // SAFETY: a lookup of the pointer's value; the stream is ignored.
        let mut name = unsafe { (names.hipKernelNameRefByPtr)(function.0, null_mut()) };
        if name.is_null() {
            // SAFETY: not a registered host stub, so the node holds a `hipFunction_t`, which the
            // caller keeps live with its module.
            name = unsafe { (names.hipKernelNameRef)(function.0) };
        }
        if name.is_null() {
            return Err(Error::new(crate::error::ErrorKind::Runtime, "hipKernelNameRef has no name for the kernel node's function"));
        }
        // SAFETY: non-null, a NUL-terminated name the runtime keeps with the function.
        Ok(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned())
    }
}

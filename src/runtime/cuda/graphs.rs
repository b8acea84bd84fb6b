//! Graph templates and executable graphs.

use super::layout::{self, KernelNodeParams, Memcpy3D, MemsetNodeParams};
use super::{CudaRuntime, node_params, pointer_node_params, with_extra};
use crate::error::{Error, Result};
use crate::runtime::common::{self, BatchMemOpNodeParams, HostNodeParams};
use crate::runtime::extra;
use crate::runtime::*;
use std::ptr::null_mut;

impl Graphs for CudaRuntime {
    fn graph_create(&self) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: valid out-pointer; flags must be 0.
        self.call("cuGraphCreate", || unsafe { (self.core.cuGraphCreate)(&mut g, 0) })?;
        Ok(Graph(g))
    }

    fn graph_destroy(&self, graph: Graph) -> Result<()> {
        // SAFETY: the caller owns the graph and gives it up here.
        self.call("cuGraphDestroy", || unsafe { (self.core.cuGraphDestroy)(graph.0) })
    }

    fn graph_clone(&self, graph: Graph) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the graph live.
        self.call("cuGraphClone", || unsafe { (self.core.cuGraphClone)(&mut g, graph.0) })?;
        Ok(Graph(g))
    }

    fn node_destroy(&self, node: Node) -> Result<()> {
        // SAFETY: the caller owns the node's graph, keeps it live and gives the node up here.
        self.call("cuGraphDestroyNode", || unsafe { (self.core.cuGraphDestroyNode)(node.0) })
    }

    fn add_kernel_node(&self, graph: Graph, deps: &[Node], k: &KernelParams<'_>) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        with_extra(k.args, |extra| {
            let params = node_params(k, extra);
            let mut node = null_mut();
            // SAFETY: params and its list live until the call returns; the driver copies them.
            self.call("cuGraphAddKernelNode_v2", || unsafe { (self.core.cuGraphAddKernelNode_v2)(&mut node, graph.0, d, n, &params) })?;
            Ok(Node(node))
        })
    }

    fn add_kernel_node_by_pointers(&self, graph: Graph, deps: &[Node], k: &KernelParamPointers) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let params = pointer_node_params(k);
        let mut node = null_mut();
        // SAFETY: the caller's argument pointers are valid for the call; the driver copies the values.
        self.call("cuGraphAddKernelNode_v2", || unsafe { (self.core.cuGraphAddKernelNode_v2)(&mut node, graph.0, d, n, &params) })?;
        Ok(Node(node))
    }

    fn add_memcpy_node(&self, graph: Graph, deps: &[Node], c: &MemcpyParams) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let ctx = self.contexts.current(&self.core)?;
        let params = Memcpy3D::device_1d(c);
        let mut node = null_mut();
        // SAFETY: params lives until the call returns.
        self.check("cuGraphAddMemcpyNode", unsafe { (self.core.cuGraphAddMemcpyNode)(&mut node, graph.0, d, n, &params, ctx) })?;
        Ok(Node(node))
    }

    fn add_memset_node(&self, graph: Graph, deps: &[Node], s: &MemsetParams) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let ctx = self.contexts.current(&self.core)?;
        let params = MemsetNodeParams::from(s);
        let mut node = null_mut();
        // SAFETY: params lives until the call returns.
        self.check("cuGraphAddMemsetNode", unsafe { (self.core.cuGraphAddMemsetNode)(&mut node, graph.0, d, n, &params, ctx) })?;
        Ok(Node(node))
    }

    fn add_empty_node(&self, graph: Graph, deps: &[Node]) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let mut node = null_mut();
        // SAFETY: valid out-pointer and dependency array.
        self.call("cuGraphAddEmptyNode", || unsafe { (self.core.cuGraphAddEmptyNode)(&mut node, graph.0, d, n) })?;
        Ok(Node(node))
    }

    fn add_child_node(&self, graph: Graph, deps: &[Node], child: Graph) -> Result<Node> {
        let (d, n) = common::dependencies(deps);
        let mut node = null_mut();
        // SAFETY: valid out-pointer and dependency array; the driver clones the child.
        self.call("cuGraphAddChildGraphNode", || unsafe { (self.core.cuGraphAddChildGraphNode)(&mut node, graph.0, d, n, child.0) })?;
        Ok(Node(node))
    }

    fn add_edges(&self, graph: Graph, edges: &[Edge]) -> Result<()> {
        let (from, to) = common::edge_ends(edges);
        let data: Vec<layout::EdgeDataRaw> = edges.iter().map(|e| e.data.0).collect();
        // SAFETY: the three arrays hold edges.len() entries.
        self.call("cuGraphAddDependencies_v2", || unsafe {
            (self.core.cuGraphAddDependencies_v2)(graph.0, from.as_ptr(), to.as_ptr(), data.as_ptr(), edges.len())
        })
    }

    fn graph_nodes(&self, graph: Graph) -> Result<Vec<Node>> {
        let mut n = 0usize;
        // SAFETY: a null array asks for the count.
        self.call("cuGraphGetNodes", || unsafe { (self.core.cuGraphGetNodes)(graph.0, null_mut(), &mut n) })?;
        // The driver rejects a non-null array with a zero count.
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut nodes = vec![null_mut(); n];
        // SAFETY: the array holds `n` entries.
        self.check("cuGraphGetNodes", unsafe { (self.core.cuGraphGetNodes)(graph.0, nodes.as_mut_ptr(), &mut n) })?;
        nodes.truncate(n);
        Ok(nodes.into_iter().map(Node).collect())
    }

    fn graph_edges(&self, graph: Graph) -> Result<Vec<Edge>> {
        let mut n = 0usize;
        // SAFETY: null arrays ask for the count.
        self.call("cuGraphGetEdges_v2", || unsafe { (self.core.cuGraphGetEdges_v2)(graph.0, null_mut(), null_mut(), null_mut(), &mut n) })?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let (mut from, mut to, mut data) = (vec![null_mut(); n], vec![null_mut(); n], vec![[0u8; 8]; n]);
        // SAFETY: the three arrays hold `n` entries.
        self.check("cuGraphGetEdges_v2", unsafe {
            (self.core.cuGraphGetEdges_v2)(graph.0, from.as_mut_ptr(), to.as_mut_ptr(), data.as_mut_ptr(), &mut n)
        })?;
        Ok((0..n.min(from.len())).map(|i| Edge { from: Node(from[i]), to: Node(to[i]), data: EdgeData(data[i]) }).collect())
    }

    fn node_type(&self, node: Node) -> Result<NodeType> {
        let mut raw = 0;
        // SAFETY: a valid out-pointer; the caller keeps the handle live.
        self.call("cuGraphNodeGetType", || unsafe { (self.core.cuGraphNodeGetType)(node.0, &mut raw) })?;
        Ok(layout::node_type(raw))
    }

    fn kernel_node_read(&self, node: Node) -> Result<KernelNodeRead> {
        let mut p = KernelNodeParams::zeroed();
        // SAFETY: valid out-pointer; the returned arrays are owned by the node and only read here.
        self.call("cuGraphKernelNodeGetParams_v2", || unsafe { (self.core.cuGraphKernelNodeGetParams_v2)(node.0, &mut p) })?;
        let mut func = p.func;
        if func.is_null() && !p.kern.is_null() {
            // A node built from a library kernel (CUkernel) names its function through it.
            let info = self.param_info.table().map_err(|r| Error::unsupported(format!("the kernel node holds a CUkernel: {r}")))?;
            // SAFETY: valid out-pointer; `kern` is the node's kernel and the context is current.
            self.check("cuKernelGetFunction", unsafe { (info.cuKernelGetFunction)(&mut func, p.kern) })?;
        }
        let args = if !p.extra.is_null() {
            // SAFETY: `extra` is the node's own launch-parameter list, valid until its parameters
            // change: the driver ends it with END and its SIZE and buffer describe the arguments.
            unsafe { extra::parse(p.extra, &layout::EXTRA_KEYS) }
        } else if !p.kernel_params.is_null() {
            self.read_kernel_params(func, p.kernel_params)
        } else {
            Ok(Vec::new())
        };
        Ok(KernelNodeRead { function: Function(func), grid: p.grid, block: p.block, shared_mem_bytes: p.shared_mem_bytes, args })
    }

    fn copy_kernel_node_attributes(&self, dst: Node, src: Node) -> Result<()> {
        match &self.attributes {
            // SAFETY: both are kernel nodes the caller holds.
            Some(a) => self.call("cuGraphKernelNodeCopyAttributes", || unsafe { (a.cuGraphKernelNodeCopyAttributes)(dst.0, src.0) }),
            // Drivers before CUDA 11.7 have no kernel-node attributes to lose.
            None => Ok(()),
        }
    }

    fn memcpy_read_back(&self) -> MemcpyReadBack {
        // The driver keeps one set of parameters per node, the one it runs and reports.
        MemcpyReadBack::Reliable
    }

    fn memcpy_node_read(&self, node: Node) -> Result<MemcpyParams> {
        let mut p = Memcpy3D::zeroed();
        // SAFETY: a valid out-pointer; the caller keeps the handle live.
        self.call("cuGraphMemcpyNodeGetParams", || unsafe { (self.core.cuGraphMemcpyNodeGetParams)(node.0, &mut p) })?;
        p.as_device_1d().ok_or_else(|| Error::unsupported("the memcpy node is not a 1-D device copy"))
    }

    fn memset_node_read(&self, node: Node) -> Result<MemsetParams> {
        let mut p = MemsetNodeParams::default();
        // SAFETY: a valid out-pointer; the caller keeps the handle live.
        self.call("cuGraphMemsetNodeGetParams", || unsafe { (self.core.cuGraphMemsetNodeGetParams)(node.0, &mut p) })?;
        Ok(MemsetParams::from(&p))
    }

    fn child_node_graph(&self, node: Node) -> Result<Graph> {
        let mut g = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the handle live.
        self.call("cuGraphChildGraphNodeGetGraph", || unsafe { (self.core.cuGraphChildGraphNodeGetGraph)(node.0, &mut g) })?;
        Ok(Graph(g))
    }

    fn event_record_node_event(&self, node: Node) -> Result<Event> {
        let api = self.node_kinds.get()?;
        let mut e = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the node live and checked its type.
        self.call("cuGraphEventRecordNodeGetEvent", || unsafe { (api.cuGraphEventRecordNodeGetEvent)(node.0, &mut e) })?;
        Ok(Event(e))
    }

    fn event_wait_node_event(&self, node: Node) -> Result<Event> {
        let api = self.node_kinds.get()?;
        let mut e = null_mut();
        // SAFETY: a valid out-pointer; the caller keeps the node live and checked its type.
        self.call("cuGraphEventWaitNodeGetEvent", || unsafe { (api.cuGraphEventWaitNodeGetEvent)(node.0, &mut e) })?;
        Ok(Event(e))
    }

    fn host_node_read(&self, node: Node) -> Result<HostNode> {
        let api = self.node_kinds.get()?;
        let mut p = HostNodeParams { function: None, user_data: null_mut() };
        // SAFETY: a valid out-pointer; the caller keeps the node live and checked its type.
        self.call("cuGraphHostNodeGetParams", || unsafe { (api.cuGraphHostNodeGetParams)(node.0, &mut p) })?;
        p.read().ok_or_else(|| Error::unsupported("the host node has no function"))
    }

    fn mem_op_node_read(&self, node: Node) -> Result<MemOpNode> {
        let api = self.node_kinds.get()?;
        let mut p = BatchMemOpNodeParams::zeroed();
        // SAFETY: a valid out-pointer; the caller keeps the node live and checked its type.
        self.call("cuGraphBatchMemOpNodeGetParams", || unsafe { (api.cuGraphBatchMemOpNodeGetParams)(node.0, &mut p) })?;
        // SAFETY: the array is the node's own, `count` long, and nothing changes it during the copy.
        Ok(unsafe { p.read() })
    }

    fn add_event_record_node(&self, graph: Graph, deps: &[Node], event: Event) -> Result<Node> {
        let api = self.node_kinds.get()?;
        let (d, n) = common::dependencies(deps);
        let mut node = null_mut();
        // SAFETY: a valid out-pointer and dependency array; the caller keeps the event live.
        self.call("cuGraphAddEventRecordNode", || unsafe { (api.cuGraphAddEventRecordNode)(&mut node, graph.0, d, n, event.0) })?;
        Ok(Node(node))
    }

    fn add_event_wait_node(&self, graph: Graph, deps: &[Node], event: Event) -> Result<Node> {
        let api = self.node_kinds.get()?;
        let (d, n) = common::dependencies(deps);
        let mut node = null_mut();
        // SAFETY: a valid out-pointer and dependency array; the caller keeps the event live.
        self.call("cuGraphAddEventWaitNode", || unsafe { (api.cuGraphAddEventWaitNode)(&mut node, graph.0, d, n, event.0) })?;
        Ok(Node(node))
    }

    fn add_host_node(&self, graph: Graph, deps: &[Node], host: &HostNode) -> Result<Node> {
        let api = self.node_kinds.get()?;
        let (d, n) = common::dependencies(deps);
        let params = HostNodeParams::of(host);
        let mut node = null_mut();
        // SAFETY: params and the dependency array live until the call returns; the function and
        // its user data are the source node's.
        self.call("cuGraphAddHostNode", || unsafe { (api.cuGraphAddHostNode)(&mut node, graph.0, d, n, &params) })?;
        Ok(Node(node))
    }

    fn add_mem_op_node(&self, graph: Graph, deps: &[Node], ops: &MemOpNode) -> Result<Node> {
        let api = self.node_kinds.get()?;
        let (d, n) = common::dependencies(deps);
        let params = BatchMemOpNodeParams::of(ops);
        let mut node = null_mut();
        // SAFETY: params points into `ops`, which lives until the call returns (the driver copies
        // the operations); the context is the source node's.
        self.call("cuGraphAddBatchMemOpNode", || unsafe { (api.cuGraphAddBatchMemOpNode)(&mut node, graph.0, d, n, &params) })?;
        Ok(Node(node))
    }

    fn child_graph_refuses(&self, kind: NodeType) -> Option<&'static str> {
        match kind {
            NodeType::Conditional => Some("CUDA does not allow conditional nodes in a child graph (CUDA_CHILD_GRAPH_NODE_PARAMS)"),
            NodeType::MemAlloc | NodeType::MemFree => Some(
                "CUDA adds a graph holding memory allocation or free nodes as a child node only by moving those nodes out of it (cuGraphAddChildGraphNode), which would take them from the caller's graph",
            ),
            _ => None,
        }
    }

    fn memory_class(&self, ptr: DevicePtr) -> Option<MemoryClass> {
        Some(self.classify(ptr))
    }

    // Inlined into `kernel_nodes_set`'s loop, which a nested command buffer's update runs.
    #[inline]
    fn kernel_node_set(&self, node: Node, k: &KernelParams<'_>) -> Result<()> {
        with_extra(k.args, |extra| {
            let params = node_params(k, extra);
            // SAFETY: fresh arrays, never the node's own.
            self.call("cuGraphKernelNodeSetParams_v2", || unsafe { (self.core.cuGraphKernelNodeSetParams_v2)(node.0, &params) })
        })
    }

    fn kernel_node_set_by_pointers(&self, node: Node, k: &KernelParamPointers) -> Result<()> {
        let params = pointer_node_params(k);
        // SAFETY: the caller's argument pointers are valid for the call; the driver copies the values.
        self.call("cuGraphKernelNodeSetParams_v2", || unsafe { (self.core.cuGraphKernelNodeSetParams_v2)(node.0, &params) })
    }

    fn memcpy_node_set(&self, node: Node, c: &MemcpyParams) -> Result<()> {
        let params = Memcpy3D::device_1d(c);
        // SAFETY: params lives until the call returns.
        self.call("cuGraphMemcpyNodeSetParams", || unsafe { (self.core.cuGraphMemcpyNodeSetParams)(node.0, &params) })
    }

    fn memset_node_set(&self, node: Node, s: &MemsetParams) -> Result<()> {
        let params = MemsetNodeParams::from(s);
        // SAFETY: params lives until the call returns.
        self.call("cuGraphMemsetNodeSetParams", || unsafe { (self.core.cuGraphMemsetNodeSetParams)(node.0, &params) })
    }

    fn instantiate(&self, graph: Graph) -> Result<Exec> {
        let mut e = null_mut();
        // SAFETY: valid out-pointer; no flags.
        self.call("cuGraphInstantiateWithFlags", || unsafe { (self.core.cuGraphInstantiateWithFlags)(&mut e, graph.0, 0) })?;
        Ok(Exec(e))
    }

    fn exec_destroy(&self, exec: Exec) -> Result<()> {
        // SAFETY: the caller owns the executable graph, no launch of it is pending, and it gives it up here.
        self.call("cuGraphExecDestroy", || unsafe { (self.core.cuGraphExecDestroy)(exec.0) })
    }

    // Inlined into `kernel_nodes_set`'s loop, which a primary command buffer's update runs.
    #[inline]
    fn exec_kernel_node_set(&self, exec: Exec, node: Node, k: &KernelParams<'_>) -> Result<()> {
        with_extra(k.args, |extra| {
            let params = node_params(k, extra);
            // SAFETY: fresh arrays that live until the call returns.
            self.call("cuGraphExecKernelNodeSetParams_v2", || unsafe {
                (self.core.cuGraphExecKernelNodeSetParams_v2)(exec.0, node.0, &params)
            })
        })
    }

    fn exec_kernel_node_set_by_pointers(&self, exec: Exec, node: Node, k: &KernelParamPointers) -> Result<()> {
        let params = pointer_node_params(k);
        // SAFETY: the caller's argument pointers are valid for the call; the driver copies the values.
        self.call("cuGraphExecKernelNodeSetParams_v2", || unsafe { (self.core.cuGraphExecKernelNodeSetParams_v2)(exec.0, node.0, &params) })
    }

    fn exec_memcpy_node_set(&self, exec: Exec, node: Node, c: &MemcpyParams) -> Result<()> {
        let ctx = self.contexts.current(&self.core)?;
        let params = Memcpy3D::device_1d(c);
        // SAFETY: params lives until the call returns.
        self.check("cuGraphExecMemcpyNodeSetParams", unsafe { (self.core.cuGraphExecMemcpyNodeSetParams)(exec.0, node.0, &params, ctx) })
    }

    fn exec_memset_node_set(&self, exec: Exec, node: Node, s: &MemsetParams) -> Result<()> {
        let ctx = self.contexts.current(&self.core)?;
        let params = MemsetNodeParams::from(s);
        // SAFETY: params lives until the call returns.
        self.check("cuGraphExecMemsetNodeSetParams", unsafe { (self.core.cuGraphExecMemsetNodeSetParams)(exec.0, node.0, &params, ctx) })
    }

    fn exec_child_node_set(&self, exec: Exec, node: Node, child: Graph) -> Result<()> {
        // SAFETY: the caller keeps the three handles live.
        self.call("cuGraphExecChildGraphNodeSetParams", || unsafe {
            (self.core.cuGraphExecChildGraphNodeSetParams)(exec.0, node.0, child.0)
        })
    }

    fn graph_launch(&self, exec: Exec, stream: Stream) -> Result<()> {
        // SAFETY: the caller keeps the executable graph, the stream and every address the graph uses live
        // until the launch has run.
        self.call("cuGraphLaunch", || unsafe { (self.core.cuGraphLaunch)(exec.0, stream.0) })
    }

    fn function_name(&self, function: Function) -> Result<String> {
        let names = self.names.get()?;
        let mut name = std::ptr::null();
        // SAFETY: a valid out-pointer; the caller keeps the function's module live.
        self.call("cuFuncGetName", || unsafe { (names.cuFuncGetName)(&mut name, function.0) })?;
        if name.is_null() {
            return Err(Error::new(crate::error::ErrorKind::Runtime, "cuFuncGetName gave no name for the kernel node's function"));
        }
        // SAFETY: non-null, a NUL-terminated name the driver keeps with the function.
        Ok(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned())
    }
}

#!/usr/bin/env python3
"""Benchmark on real graphs: PyTorch-captured models (an MLP, TransformerEncoders of 2 and 12
layers, an attention block with scaled_dot_product_attention, ResNet-18 or a small conv net
without torchvision) flattened through the rocm_cmdbuf C ABI and relocated with
rcb_cmdbuf_update_allocations, against what the same graph costs without the library.

For each model, in one run, over an allocation table of the input, the output, every parameter
and buffer storage and the segments of the graph's memory pool:
  (a) re-capture + instantiate: what a user does without the library (capture_begin/capture_end
      on a side stream, no garbage collection), median of 5; (i) instantiation alone;
  (c) the SetParams floor: the driver's exec setter (kernel, memcpy or memset) on each node the
      update touches, fed the parameters the library's own template holds before and after the
      move, alternately, on the command buffer's executable graph;
  (d) rcb_cmdbuf_update_allocations: with one allocation moved (the input) and with all moved,
      first call after finalize and steady state (median of 200 calls, alternating tables);
  flatten + finalize (median over the command buffers built);
  (d′) given only the moves against (c) again: each right after a launch of the graph (XLA's
      loop), and call by call with no launch between (the two interleaved in C, so that both meet
      the same state of the machine).

The caching allocator packs storages end to end in its segments (and the driver packs the
segments), and to the library an address that is one allocation's end and the next one's base,
found by value among a flattened graph's kernel arguments, is ambiguous: it is moved in place
only when both allocations move by the same delta, and the update reports needs_rerecord
otherwise. So each run of allocations lying end to end moves as one block: "all" places every
run in a new buffer of its own at the same offsets, and "one" moves the input together with
whatever lies end to end with it (its label says so). Moving every allocation to a buffer of its
own is tried once per model, not measured, and its answer (followed, or refused with the
fallback reason the library counted) is reported, not failed.
Both (c) and (d) are timed in C (real_graphs_timer.c) so that no Python runs between the calls.

The first update is broken down so that the output says whose its extra cost is: the library's
first update after finalize with and without a launch before it, and the driver's own first
pass of the exec setters over the same nodes on a fresh executable graph of the same template,
with and without a launch before it; and both again in steady state with the CPU caches flushed
before each call (cold), as an update that follows a step of other host work finds them. Each
move set's first updates are timed on command buffers made just before it, so that no cache
flush of another measurement comes between their finalize and their first update. Last, the
library's first update after a launch and the driver's first pass after a launch are timed in
turn, each on a command buffer or executable graph made just before it, and then the first
update (pass) of a second one made before the first, right after the first one's, when the code
has just run (seven rounds, the library first in every other one; medians). In each round one
more command buffer is launched and its executable graph given two passes of the driver's setters
over the touched nodes (the moved placement's parameters, then those it holds) before its first
update and steady updates are timed: what that first update still pays beyond its steady ones
is the rest, once the driver has had its first pass there (the template is read before the
launch, which the other rounds do not do). Then six rounds of a matched set, one in each order
of its three kinds: a command buffer's first update, and an update of another one that is not
its first, each after the same work since its last touch (made, or updated and back, untimed):
two more command buffers made, the three launched and waited for, the updated one last; and a
first update whose command buffer, once made, is followed by that other one's update and back
(untimed), as the update that is not the first follows its own.
These rounds run before the all-moved set's own first updates, which so follow update code that
has just run.
When the library's runtime is the stand-in that times the driver's node setters
(RCB_CUDA_LIBRARY=libsetter_timer.so, tests/gpu/setter_timer.c), each of the updates of those
rounds, and as many steady updates timed one by one, is split in the same call into the time
inside the setters and the library's own (one more table); that run's other figures then include the
stand-in's cost per setter, so compare them with a run without it.
Last, the host memory each command buffer keeps (rcb_cmdbuf_memory_use), by part, per node: right
after flatten + finalize, and on the one the all-moved updates ran on.

Runs on the GPU machine only (ci/gpu-run.sh, which fails when python3 with a torch that can use CUDA
is missing unless RCB_GPU_ALLOW_MISSING names what is missing: see gpu_deps.py):
    RCB_LIBRARY=/path/librocm_cmdbuf.so RCB_TIMER=/path/libreal_graphs_timer.so python3 real_graphs.py
Prints markdown tables; asserts no timing. Exits 1 when a relocated replay differs from eager
execution, writes to a moved-away buffer, a block move is refused, or a call fails."""

import ctypes as C
import itertools
import os
import statistics
import sys
import time

os.environ.setdefault("RCB_BACKEND", "cuda")
from gpu_deps import torch_with_cuda  # noqa: E402

# torch able to use CUDA; without it the script ends here (a SKIPPED line when RCB_GPU_ALLOW_MISSING
# names what is missing, else a failure).
torch = torch_with_cuda("real_graphs")
from rcb_ctypes import FlattenReport, MemoryUse, P, UpdateReport, check, fallbacks, flattened, lib, memory_use, moves, new_fallbacks, table  # noqa: E402
from torch_graphs import warmed  # noqa: E402

# A missing torchvision fails the run unless RCB_GPU_ALLOW_MISSING names it (ResNet-18 is then
# replaced by a small conv net either way).
MISSING_TORCHVISION = False

TOL = 1e-3
SENTINEL = 12345.0
STEADY = 200
RECAPTURES = 5

cuda = C.CDLL("libcuda.so.1")
timer = C.CDLL(os.environ["RCB_TIMER"])
timer.rg_set_params.argtypes = [P, P, P, P, P, P, P, P, P, C.c_size_t, C.c_int, C.POINTER(C.c_double), P, C.c_size_t]
timer.rg_update.argtypes = [P, P, P, P, C.c_size_t, C.c_int, C.POINTER(C.c_double), P, P, C.c_size_t]
timer.rg_interleaved.argtypes = [P, P, P, P, C.c_size_t, P, P, P, P, P, P, P, P, P, P, C.c_size_t, C.c_int, C.POINTER(C.c_double),
                                 C.POINTER(C.c_double)]

KERNEL, MEMCPY, MEMSET = 0, 1, 2  # CU_GRAPH_NODE_TYPE_*
# Room for CUDA_MEMCPY3D (200 bytes on 64-bit) and CUDA_MEMSET_NODE_PARAMS (40), read and sent as bytes.
RAW_PARAMS_BYTES = 256
COLD = 30  # samples of the cold timings, each after the caches are flushed
AFTER_LAUNCH = 40  # samples of each timing after a launch, half of them to each placement
PAIRED = 100  # rounds of the update and the floor call by call, each to B and back to A
FRESH = 7  # fresh command buffers and executable graphs of the first-update comparison, alternated
# The rounds of the matched set, one in each order of its three kinds, so that each kind follows
# each other one (and the round's start) as often: what a kind leaves behind is not confounded
# with the kind after it.
MATCHED_ORDERS = list(itertools.permutations(("first", "after_other", "again")))
STEADY_HERE = 20  # updates after the first on the command buffer whose driver pass came first


def flush_buffer():
    """A buffer of four times the last-level cache (at least 64 MiB), written before each cold sample."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            llc = int(f.read().strip().rstrip("K")) << 10
    except (OSError, ValueError):
        llc = 64 << 20
    size = max(4 * llc, 64 << 20)
    return (C.c_ubyte * size)(), size


FLUSH, FLUSH_BYTES = flush_buffer()
EXTRA_END, EXTRA_BUFFER, EXTRA_SIZE = 0, 1, 2  # CU_LAUNCH_PARAM_*


class KernelNodeParams(C.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [
        ("func", P),
        ("grid", C.c_uint * 3),
        ("block", C.c_uint * 3),
        ("shared_mem_bytes", C.c_uint),
        ("kernel_params", P),
        ("extra", P),
        ("kern", P),
        ("ctx", P),
    ]


def cu(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: CUresult {status}")


SET_PARAMS = C.cast(cuda.cuGraphExecKernelNodeSetParams_v2, P)
SET_MEMCPY = C.cast(cuda.cuGraphExecMemcpyNodeSetParams, P)
SET_MEMSET = C.cast(cuda.cuGraphExecMemsetNodeSetParams, P)
UPDATE = C.cast(lib.rcb_cmdbuf_update_allocations, P)


def setter_timer():
    """The stand-in runtime that times the driver's node setters (tests/gpu/setter_timer.c), when
    the library was given it as its runtime (RCB_CUDA_LIBRARY): a function that reads the calling
    thread's nanoseconds inside the setters and their calls, else None. Opening the same file
    again gives the library's own copy of it (one object per file), whose sums are the ones the
    library's calls add to."""
    path = os.environ.get("RCB_CUDA_LIBRARY")
    if not path:
        return None
    try:
        stand_in = C.CDLL(path)
        read = stand_in.rcb_setter_timer_read
    except (OSError, AttributeError):
        return None
    # Its kernel-node setters skipped (RCB_SETTER_TIMER_SKIP=1), the library's pushes would reach
    # no graph while the floor's do: every replay stale and every table wrong.
    skipping = getattr(stand_in, "rcb_setter_timer_skipping", None)
    if skipping is not None and skipping():
        sys.exit("real_graphs: the setter-timing stand-in skips the kernel-node setters (RCB_SETTER_TIMER_SKIP=1); unset it")
    read.argtypes = [C.POINTER(C.c_uint64), C.POINTER(C.c_uint64)]

    def sums():
        ns, calls = C.c_uint64(), C.c_uint64()
        read(C.byref(ns), C.byref(calls))
        return ns.value, calls.value

    return sums


SETTERS = setter_timer()
# Same signature: (cb, entries, count, report); given only the moves, as the patched XLA calls it.
MOVE = C.cast(lib.rcb_cmdbuf_move_allocations, P)


def graph_nodes(graph):
    n = C.c_size_t()
    cu(cuda.cuGraphGetNodes(P(graph), None, C.byref(n)), "cuGraphGetNodes")
    nodes = (P * n.value)()
    cu(cuda.cuGraphGetNodes(P(graph), nodes, C.byref(n)), "cuGraphGetNodes")
    out = []
    for node in nodes:
        kind = C.c_int()
        cu(cuda.cuGraphNodeGetType(P(node), C.byref(kind)), "cuGraphNodeGetType")
        out.append((node, kind.value))
    return out


def kernel_args(node):
    """A kernel node's parameters and a copy of its argument bytes."""
    p = KernelNodeParams()
    cu(cuda.cuGraphKernelNodeGetParams_v2(P(node), C.byref(p)), "cuGraphKernelNodeGetParams_v2")
    if p.extra:
        items = C.cast(p.extra, C.POINTER(P))
        buf, size, i = None, 0, 0
        while (items[i] or EXTRA_END) != EXTRA_END:
            if items[i] == EXTRA_BUFFER:
                buf = items[i + 1]
            elif items[i] == EXTRA_SIZE:
                size = C.cast(items[i + 1], C.POINTER(C.c_size_t))[0]
            i += 2
        return p, C.string_at(buf, size) if buf else b""
    if p.kernel_params:
        values, blob, index = C.cast(p.kernel_params, C.POINTER(P)), bytearray(), 0
        while True:
            offset, size = C.c_size_t(), C.c_size_t()
            if cuda.cuFuncGetParamInfo(P(p.func), C.c_size_t(index), C.byref(offset), C.byref(size)) != 0:
                break
            blob[len(blob) :] = bytes(max(0, offset.value + size.value - len(blob)))
            blob[offset.value : offset.value + size.value] = C.string_at(values[index], size.value)
            index += 1
        return p, bytes(blob)
    return p, b""


def raw_params(node, kind):
    """A memcpy or memset node's parameters as the driver's struct, in bytes."""
    buf = C.create_string_buffer(RAW_PARAMS_BYTES)
    get = cuda.cuGraphMemcpyNodeGetParams if kind == MEMCPY else cuda.cuGraphMemsetNodeGetParams
    cu(get(P(node), buf), "cuGraphMemcpyNodeGetParams" if kind == MEMCPY else "cuGraphMemsetNodeGetParams")
    return buf.raw


def read_node(node, kind):
    """What the floor compares and sends: (kernel params, argument bytes) or the struct's bytes."""
    if kind == KERNEL:
        return kernel_args(node)
    if kind in (MEMCPY, MEMSET):
        return raw_params(node, kind)
    return None


def compared(kind, read):
    return read[1] if kind == KERNEL else read


# Where CUDA_MEMCPY3D's two reserved pointers lie (x86-64), which the driver may fill per graph.
MEMCPY_RESERVED = ((64, 72), (152, 160))


def reserved_from(read, source):
    """A memcpy struct's bytes `read` with the reserved fields of `source`."""
    read = bytearray(read)
    for start, end in MEMCPY_RESERVED:
        read[start:end] = source[start:end]
    return bytes(read)


def on_this_graph(kind, read, own):
    """`read` (another graph's node's parameters) for a node of this graph that holds `own`: a
    memcpy's reserved fields are this node's."""
    return reserved_from(read, own) if kind == MEMCPY else read


def what_it_holds(kind, read):
    """A node's parameters as a key: a kernel's function, launch shape and argument bytes, or a
    memcpy or memset node's struct (a memcpy's reserved fields left out)."""
    if kind == KERNEL:
        p, blob = read
        return kind, p.func, tuple(p.grid), tuple(p.block), p.shared_mem_bytes, blob
    return kind, reserved_from(read, bytes(len(read))) if kind == MEMCPY else read


class NodeParams:
    """Parameters for a list of (kind, read) nodes, in memory this object owns: kernel nodes in
    `extra` form, memcpy and memset nodes as the driver's structs; `array` points at each."""

    def __init__(self, reads):
        self.array = (P * len(reads))()
        self.kinds = (C.c_int * len(reads))(*[kind for kind, _ in reads])
        self.keep = []
        for i, (kind, read) in enumerate(reads):
            if kind != KERNEL:
                buf = C.create_string_buffer(read, len(read))
                self.keep.append(buf)
                self.array[i] = C.cast(buf, P)
                continue
            p, blob = read
            buf = C.create_string_buffer(blob, max(len(blob), 1))
            size = C.c_size_t(len(blob))
            extra = (P * 5)(EXTRA_BUFFER, C.cast(buf, P), EXTRA_SIZE, C.cast(C.byref(size), P), EXTRA_END)
            q = KernelNodeParams.from_buffer_copy(p)
            q.kernel_params, q.extra = None, C.cast(extra, P)
            self.keep += [buf, size, extra, q]
            self.array[i] = C.cast(C.byref(q), P)


def template(cb):
    """The command buffer's template nodes (brought up to date): (node, type, kernel read or None)."""
    g = P()
    check(lib.rcb_cmdbuf_graph(cb, C.byref(g)), "rcb_cmdbuf_graph")
    return g.value, [(n, k, read_node(n, k)) for n, k in graph_nodes(g.value)]


def exec_of(cb):
    e = P()
    check(lib.rcb_cmdbuf_exec(cb, C.byref(e)), "rcb_cmdbuf_exec")
    return e.value


def median(xs):
    return statistics.median(xs)


def flush_args(cold):
    return (C.cast(FLUSH, P), FLUSH_BYTES) if cold else (None, 0)


def update_times(cb, to_table, back_table, reps, cold=False, call=UPDATE):
    """Times `reps` updates, the first to `to_table`, then alternately back and forth (ns); with
    `cold`, the CPU caches are flushed before each. `call` MOVE takes lists of moves instead."""
    out, rep, before = (C.c_double * reps)(), UpdateReport(), fallbacks(cb)
    check(
        timer.rg_update(call, cb, C.cast(back_table, P), C.cast(to_table, P), len(to_table), reps, out, C.byref(rep), *flush_args(cold)),
        "rcb_cmdbuf_update_allocations",
    )
    if rep.needs_rerecord:
        raise RuntimeError(f"rcb_cmdbuf_update_allocations reported needs_rerecord ({new_fallbacks(cb, before)})")
    return list(out), rep


def minor_faults():
    """The calling thread's minor page faults so far (/proc/thread-self/stat, field 10), or 0
    where it cannot be read."""
    try:
        with open("/proc/thread-self/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[7])
    except (OSError, IndexError, ValueError):
        return 0


def timed_update(cb, to_table, back_table, split=None):
    """One update to `to_table` (ns); with SETTERS and a list `split`, also appends to it the
    triple (ns, ns inside the driver's setters during the update, minor page faults the thread
    took from just before the call to just after it)."""
    if SETTERS is None or split is None:
        return update_times(cb, to_table, back_table, 1)[0][0]
    faults = minor_faults()
    ns, calls = SETTERS()
    t, rep = update_times(cb, to_table, back_table, 1)
    ns_after, calls_after = SETTERS()
    faults = minor_faults() - faults
    if calls_after - calls != rep.updated_nodes:
        raise RuntimeError(f"{calls_after - calls} setter call(s) inside an update that pushed {rep.updated_nodes} node(s): no split")
    split.append((t[0], ns_after - ns, faults))
    return t[0]


def set_params_times(exec_, nodes, params_a, params_b, reps, cold=False):
    """Times `reps` passes over `nodes`, the first sending `params_b`, then alternately (ns), each
    node through the exec setter of its kind; with `cold`, the CPU caches are flushed before each."""
    if not nodes:
        return [0.0] * reps
    out, arr, ctx = (C.c_double * reps)(), (P * len(nodes))(*nodes), P()
    cu(cuda.cuCtxGetCurrent(C.byref(ctx)), "cuCtxGetCurrent")
    cu(
        timer.rg_set_params(
            SET_PARAMS, SET_MEMCPY, SET_MEMSET, ctx, P(exec_), arr, C.cast(params_a.kinds, P), C.cast(params_a.array, P),
            C.cast(params_b.array, P), len(nodes), reps, out, *flush_args(cold),
        ),
        "cuGraphExec*NodeSetParams",
    )
    return list(out)


def interleaved_times(cb, there, back, nodes, params_a, params_b, rounds):
    """The update given the moves `there` (to B) and `back` (to A) and the floor's pass over
    `nodes` (params_b, then params_a), call by call in C, `rounds` times each way (the library's
    parameters and the executable graph's on A before and after): the medians of each, and the
    median over the rounds of each round's two updates against its two floor passes."""
    upd, flo = (C.c_double * (2 * rounds))(), (C.c_double * (2 * rounds))()
    rep, before, ctx = UpdateReport(), fallbacks(cb), P()
    cu(cuda.cuCtxGetCurrent(C.byref(ctx)), "cuCtxGetCurrent")
    status = timer.rg_interleaved(
        MOVE, cb, C.cast(back, P), C.cast(there, P), len(there), C.byref(rep), SET_PARAMS, SET_MEMCPY, SET_MEMSET, ctx,
        P(exec_of(cb)), (P * len(nodes))(*nodes), C.cast(params_a.kinds, P), C.cast(params_a.array, P),
        C.cast(params_b.array, P), len(nodes), rounds, upd, flo,
    )
    if status != 0:
        raise RuntimeError(f"rg_interleaved: status {status} (the update's rcb_status or a setter's CUresult)")
    if rep.needs_rerecord:
        raise RuntimeError(f"rcb_cmdbuf_move_allocations reported needs_rerecord ({new_fallbacks(cb, before)})")
    if not nodes:  # no floor to set against (its passes timed only the clock)
        return median(list(upd)), 0.0, float("nan")
    ratios = [(upd[2 * r] + upd[2 * r + 1]) / (flo[2 * r] + flo[2 * r + 1]) for r in range(rounds)]
    return median(list(upd)), median(list(flo)), median(ratios)


def launch_and_wait(cb):
    stream = torch.cuda.current_stream()
    check(lib.rcb_cmdbuf_launch(cb, P(stream.cuda_stream)), "rcb_cmdbuf_launch")
    stream.synchronize()


def memset(base, size, byte):
    cu(cuda.cuMemsetD8_v2(C.c_uint64(base), C.c_ubyte(byte), C.c_size_t(size)), "cuMemsetD8_v2")


def memcpy(dst, src, size):
    cu(cuda.cuMemcpyDtoD_v2(C.c_uint64(dst), C.c_uint64(src), C.c_size_t(size)), "cuMemcpyDtoD_v2")


class Attention(torch.nn.Module):
    """A pre-norm transformer block: fused QKV projection, causal SDPA, MLP."""

    def __init__(self, d=512, heads=8):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def models():
    yield "mlp", lambda: torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    ), (64, 512)

    def encoder(layers):
        return lambda: torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True), num_layers=layers, enable_nested_tensor=False
        )

    yield "transformer-2", encoder(2), (8, 128, 256)
    yield "transformer-12", encoder(12), (8, 128, 256)
    yield "attention-sdpa", Attention, (8, 256, 512)
    try:
        import torchvision

        yield "resnet18", lambda: torchvision.models.resnet18(weights=None), (8, 3, 224, 224)
    except ImportError as e:
        global MISSING_TORCHVISION
        MISSING_TORCHVISION = "torchvision" not in os.environ.get("RCB_GPU_ALLOW_MISSING", "").split(",")
        print(f"SKIPPED real_graphs::resnet18: every check (torchvision unavailable: {e}; a small conv net instead)", file=sys.stderr)
        yield "convnet", lambda: torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(), torch.nn.Linear(64, 10),
        ), (8, 3, 64, 64)


def storages(model):
    seen = {}
    for t in itertools.chain(model.parameters(), model.buffers()):
        s = t.untyped_storage()
        seen.setdefault(s.data_ptr(), s.nbytes())
    return [r for r in seen.items() if r[1] > 0]


def runs(ranges):
    """The runs of `ranges` ((base, size) pairs) that lie end to end or overlap, in address order,
    each as [start, end, indices]. The caching allocator packs storages end to end in a segment,
    and an address that is one range's end and the next one's base is ambiguous to the library
    (a kernel argument found by value may be either's), so an update moves it in place only when
    both ranges move by the same delta, and reports needs_rerecord otherwise."""
    out = []
    for i in sorted(range(len(ranges)), key=lambda i: ranges[i][0]):
        base, size = ranges[i]
        if out and base <= out[-1][1]:
            out[-1][1] = max(out[-1][1], base + size)
            out[-1][2].append(i)
        else:
            out.append([base, base + size, [i]])
    return out


class Placement:
    """New places for the allocations of some runs of a table (see `runs`): each run in a new
    buffer of its own, every allocation at its offset in the run, so that a run moves as one
    block (by one delta), as an allocator that moves a whole segment would move it."""

    def __init__(self, ranges, chosen):
        self.ranges, self.at = ranges, {}  # index -> (buffer, offset)
        for start, end, indices in chosen:
            buf = torch.empty(end - start, dtype=torch.uint8, device="cuda")
            for i in indices:
                self.at[i] = (buf, ranges[i][0] - start)

    def base(self, i):
        if i not in self.at:
            return self.ranges[i][0]
        buf, offset = self.at[i]
        return buf.data_ptr() + offset

    def table(self):
        return table([(self.base(i), size) for i, (_, size) in enumerate(self.ranges)])

    def tensor(self, i, like):
        """Allocation `i` as a tensor of `like`'s type and shape: at its new place if it moves."""
        if i not in self.at:
            return like
        buf, offset = self.at[i]
        return buf[offset : offset + like.nbytes].view(like.dtype).view(like.shape)

    def fill(self, new_in, params):
        """Gives the moved allocations their contents: the input `new_in`'s values, the output
        NaN (so that an element the replay does not write shows), each parameter storage (indices
        `params`) its old bytes; a pool segment holds only what the graph writes before reading."""
        for i in self.at:
            if i == 0:
                self.tensor(0, new_in).copy_(new_in)
            elif i == 1:
                memset(self.base(1), self.ranges[1][1], 0xFF)
            elif i in params:
                memcpy(self.base(i), self.ranges[i][0], self.ranges[i][1])
        torch.cuda.synchronize()


def independent_move(cb, ranges):
    """Moves every allocation of `cb`'s table to a buffer of its own (the same sizes, new
    addresses, nothing launched): how the library answers a move that does not keep storages
    packed end to end together. The command buffer is not used again."""
    bufs = [torch.empty(size, dtype=torch.uint8, device="cuda") for _, size in ranges]
    rep, before = UpdateReport(), fallbacks(cb)
    t = table(bufs)
    check(lib.rcb_cmdbuf_update_allocations(cb, t, len(t), C.byref(rep)), "rcb_cmdbuf_update_allocations")
    if rep.needs_rerecord:
        return False, f"refused ({new_fallbacks(cb, before)})"
    return True, f"followed ({rep.patched_sites} sites, {rep.updated_nodes} nodes)"


def pool_segments(pool):
    want = tuple(pool)
    return [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot() if tuple(s.get("segment_pool_id", ())) == want]


def capture(model, x, out, pool=None, keep_graph=False):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph(keep_graph=keep_graph)
    with torch.no_grad(), torch.cuda.stream(side):
        g.capture_begin(pool=pool)
        out.copy_(model(x))
        g.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return g


class MoveSet:
    """One way of moving the table: what the library and the driver take for it."""

    def __init__(self, label, moved, table_b):
        self.label, self.moved, self.table_b = label, moved, table_b
        self.first = {}  # "finalize" / "launch" -> ns of the library's first update
        self.driver_first = {}
        self.steady = self.floor = self.driver_steady = self.cold = self.floor_cold = self.moves = None
        self.moves_launched = self.floor_launched = None
        self.moves_paired = self.floor_paired = self.paired_ratio = None
        self.floor_nodes = self.updated = 0
        self.lib_fresh = self.lib_code_run = self.driver_fresh = self.driver_code_run = None
        self.own_pass = self.own_found = self.lib_after_pass = self.lib_after_pass_steady = None
        # With SETTERS: (ns, ns inside the driver's setters) of each first update with no pass
        # before it, of each right after another's, each first update after the driver's pass,
        # the steady updates after them, and the matched set: a first update, one that is not
        # the first, each after the same work, and a first update after another's update (round
        # by round: the lists are in step).
        self.split_fresh, self.split_code_run, self.split_after_pass, self.split_steady = [], [], [], []
        self.split_matched_first, self.split_matched_again, self.split_matched_after_other = [], [], []
        self.matched_first = self.matched_again = self.matched_after_other = None


def measure(cbs, ms, table_a, fresh):
    """Fills `ms` from two fresh command buffers: cbs[0] is updated right after finalize,
    cbs[1] after a launch; the steady state and the floor are taken on cbs[1]. `fresh()` makes
    another command buffer like them, for the first updates compared with the driver's."""
    ms.first["finalize"] = update_times(cbs[0], ms.table_b, table_a, 1)[0][0]
    launch_and_wait(cbs[1])
    t, rep = update_times(cbs[1], ms.table_b, table_a, 1)
    ms.first["launch"] = t[0]
    ms.updated = rep.updated_nodes
    # cbs[1] now holds table B; steady: back to A, then alternately (ends on B: STEADY is even).
    ms.steady = median(update_times(cbs[1], table_a, ms.table_b, STEADY)[0])
    # Given only the moves, right after the whole table and as it alternates (back to A first,
    # ends on B again: STEADY is even), before anything else runs between the calls.
    ms.moves = median(update_times(cbs[1], moves(ms.table_b, table_a), moves(table_a, ms.table_b), STEADY, call=MOVE)[0])
    _, nodes_b = template(cbs[1])
    update_times(cbs[1], table_a, ms.table_b, 1)
    graph, nodes_a = template(cbs[1])
    after = {n: read for n, _, read in nodes_b}
    touched_at = [i for i, a in enumerate(nodes_a) if a[2] is not None and compared(a[1], a[2]) != compared(a[1], after[a[0]])]
    touched = [(nodes_a[i], after[nodes_a[i][0]]) for i in touched_at]
    ms.floor_nodes = len(touched)
    nodes = [a[0] for a, _ in touched]
    pa, pb = NodeParams([(a[1], a[2]) for a, _ in touched]), NodeParams([(a[1], b) for a, b in touched])
    # Each ends on A (STEADY and COLD are even), where the library's shadow parameters are.
    ms.floor = median(set_params_times(exec_of(cbs[1]), nodes, pa, pb, STEADY))
    ms.cold = median(update_times(cbs[1], ms.table_b, table_a, COLD, cold=True)[0])
    ms.floor_cold = median(set_params_times(exec_of(cbs[1]), nodes, pa, pb, COLD, cold=True))
    # XLA's loop: each update follows a launch of the graph it updates (which has run), and so
    # does each pass of the floor; to B and back to A in turn, so each ends on A again.
    there, back = moves(table_a, ms.table_b), moves(ms.table_b, table_a)
    lib_after, floor_after = [], []
    for _ in range(AFTER_LAUNCH // 2):
        for to, fro in ((there, back), (back, there)):
            launch_and_wait(cbs[1])
            lib_after.append(update_times(cbs[1], to, fro, 1, call=MOVE)[0][0])
        for fro, to in ((pa, pb), (pb, pa)):
            launch_and_wait(cbs[1])
            floor_after.append(set_params_times(exec_of(cbs[1]), nodes, fro, to, 1)[0])
    ms.moves_launched, ms.floor_launched = median(lib_after), median(floor_after)
    ms.moves_paired, ms.floor_paired, ms.paired_ratio = interleaved_times(cbs[1], there, back, nodes, pa, pb, PAIRED)
    stream = torch.cuda.current_stream()
    for how in ("finalize", "launch"):
        e = P()
        cu(cuda.cuGraphInstantiateWithFlags(C.byref(e), P(graph), C.c_ulonglong(0)), "cuGraphInstantiateWithFlags")
        try:
            if how == "launch":
                cu(cuda.cuGraphLaunch(e, P(stream.cuda_stream)), "cuGraphLaunch")
                stream.synchronize()
            ms.driver_first[how] = set_params_times(e.value, nodes, pa, pb, 1)[0]
            if how == "launch":
                ms.driver_steady = median(set_params_times(e.value, nodes, pa, pb, STEADY))
        finally:
            cuda.cuGraphExecDestroy(e)
    # The same first time for both: two command buffers, or two executable graphs of the same
    # template, made one after the other and launched once; the one made last takes its first
    # update (pass), then the other, whose code has then just run and whose own tables are older.
    # The library and the driver take turns at going first. (The columns above time the library's
    # first updates on command buffers made before the steady and cold timings, and the driver's
    # first passes on executable graphs made after them, right after many passes of the same
    # setters.)
    lib_fresh, lib_code_run, driver_fresh, driver_code_run = [], [], [], []

    def library():
        older = fresh()
        try:
            cb = fresh()
            try:
                launch_and_wait(older)
                launch_and_wait(cb)
                lib_fresh.append(timed_update(cb, ms.table_b, table_a, ms.split_fresh))
                lib_code_run.append(timed_update(older, ms.table_b, table_a, ms.split_code_run))
            finally:
                lib.rcb_cmdbuf_free(cb)
        finally:
            lib.rcb_cmdbuf_free(older)

    def driver():
        execs = []
        try:
            for _ in range(2):
                e = P()
                cu(cuda.cuGraphInstantiateWithFlags(C.byref(e), P(graph), C.c_ulonglong(0)), "cuGraphInstantiateWithFlags")
                execs.append(e.value)
            for e in execs:
                cu(cuda.cuGraphLaunch(P(e), P(stream.cuda_stream)), "cuGraphLaunch")
            stream.synchronize()
            driver_fresh.append(set_params_times(execs[1], nodes, pa, pb, 1)[0])
            driver_code_run.append(set_params_times(execs[0], nodes, pa, pb, 1)[0])
        finally:
            for e in execs:
                cuda.cuGraphExecDestroy(P(e))

    # Whose the rest is: the driver's first pass over the touched nodes of a command buffer's own
    # executable graph (to table B, then back to A), then that command buffer's first update and
    # its steady updates: what that first update pays beyond its steady ones, once the driver has
    # had its first pass there.
    own_pass, own_found, lib_after_pass, lib_after_pass_steady = [], [], [], []

    def library_after_driver():
        cb = fresh()
        try:
            # Each touched node of the first command buffer is found in this one's template by what
            # it holds on table A (its order there may differ: the first one's was updated), before
            # the launch, so that only the pass comes between the launch and the update. The pass
            # sends each found node what the first one's held on table B, then what it holds
            # itself: a first pass that changes the parameters, and the library's still hold.
            holding = {}
            for node, kind, read in template(cb)[1]:
                if read is not None:
                    holding.setdefault(what_it_holds(kind, read), []).append((node, kind, read))
            mine = []
            for k, i in enumerate(touched_at):
                same = holding.get(what_it_holds(nodes_a[i][1], nodes_a[i][2]))
                if same:
                    node, kind, read = same.pop(0)
                    mine.append((node, kind, read, on_this_graph(kind, touched[k][1], read)))
            own_found.append(len(mine))
            there, here = NodeParams([(kind, b) for _, kind, _, b in mine]), NodeParams([(kind, a) for _, kind, a, _ in mine])
            nodes_found, own_exec = [node for node, _, _, _ in mine], exec_of(cb)
            launch_and_wait(cb)
            own_pass.append(set_params_times(own_exec, nodes_found, here, there, 2)[0])
            lib_after_pass.append(timed_update(cb, ms.table_b, table_a, ms.split_after_pass))
            lib_after_pass_steady.append(median(update_times(cb, table_a, ms.table_b, STEADY_HERE)[0]))
            if SETTERS:
                # Each split alone, the setters' sums read around it (Python between the calls, as
                # before the first updates): STEADY_HERE is even, so the first goes to A.
                for i in range(STEADY_HERE):
                    to = table_a if i % 2 == 0 else ms.table_b
                    timed_update(cb, to, table_a, ms.split_steady)
        finally:
            lib.rcb_cmdbuf_free(cb)

    # A first update against one that is not the first, after the same work: the command buffer
    # last touched (made, or updated back to table A, untimed), then two others made, the three
    # launched and waited for, the updated one last, then its update to table B timed. What the
    # first pays beyond the other is what only a first update does.
    def after_two_made(cb, split):
        made = fresh()
        try:
            other = fresh()
            try:
                for c in (made, other, cb):
                    launch_and_wait(c)
                return timed_update(cb, ms.table_b, table_a, split)
            finally:
                lib.rcb_cmdbuf_free(other)
        finally:
            lib.rcb_cmdbuf_free(made)

    matched_first, matched_again, matched_after_other = [], [], []

    def matched(r):
        older = fresh()
        try:
            # Out of its first update, untimed: launched, then to table B and back to A.
            launch_and_wait(older)
            update_times(older, ms.table_b, table_a, 2)
            for kind in MATCHED_ORDERS[r]:
                if kind != "again":
                    # Made (its last touch), then the work, then its first update; for `after_other`,
                    # `older`'s update to B and back (untimed) runs between, as it does before
                    # the work of the update that is not the first.
                    cb = fresh()
                    try:
                        if kind == "after_other":
                            update_times(older, ms.table_b, table_a, 2)
                            matched_after_other.append(after_two_made(cb, ms.split_matched_after_other))
                        else:
                            matched_first.append(after_two_made(cb, ms.split_matched_first))
                    finally:
                        lib.rcb_cmdbuf_free(cb)
                else:
                    # Updated to B and back to A (its last touch, untimed), then the same work,
                    # then an update that is not its first; then back to A, untimed.
                    update_times(older, ms.table_b, table_a, 2)
                    matched_again.append(after_two_made(older, ms.split_matched_again))
                    update_times(older, table_a, ms.table_b, 1)
        finally:
            lib.rcb_cmdbuf_free(older)

    for r in range(FRESH):
        for side in (library, driver) if r % 2 == 0 else (driver, library):
            side()
        library_after_driver()
    for r in range(len(MATCHED_ORDERS)):
        matched(r)
    ms.lib_fresh, ms.lib_code_run = median(lib_fresh), median(lib_code_run)
    ms.driver_fresh, ms.driver_code_run = median(driver_fresh), median(driver_code_run)
    ms.own_pass, ms.lib_after_pass = median(own_pass), median(lib_after_pass)
    ms.own_found = f"{min(own_found)} of {len(touched_at)}" if min(own_found) == max(own_found) else f"{min(own_found)}–{max(own_found)} of {len(touched_at)}"
    ms.lib_after_pass_steady = median(lib_after_pass_steady)
    ms.matched_first, ms.matched_again, ms.matched_after_other = median(matched_first), median(matched_again), median(matched_after_other)


def run(name, make, shape):
    model, static_in, static_out = warmed(make, shape)
    g = capture(model, static_in, static_out, keep_graph=True)
    raw = g.raw_cuda_graph()
    params = storages(model)
    segments = pool_segments(g.pool())
    ranges_a = [(static_in.data_ptr(), static_in.nbytes), (static_out.data_ptr(), static_out.nbytes)] + params + segments
    table_a = table(ranges_a)

    new_in = torch.randn(shape, device="cuda")
    param_indices = set(range(2, 2 + len(params)))
    by_run = runs(ranges_a)
    packed = [r for r in by_run if len(r[2]) > 1]
    # One moved: the input, with whatever lies end to end with it (moving it alone would be refused).
    in_run = next(r for r in by_run if 0 in r[2])
    one_at = Placement(ranges_a, [in_run])
    one = MoveSet("one (input)" if len(in_run[2]) == 1 else f"input + {len(in_run[2]) - 1} end to end", len(in_run[2]), one_at.table())
    # All moved: each run of storages packed end to end as one block.
    every_at = Placement(ranges_a, by_run)
    every = MoveSet("all" if not packed else f"all ({len(by_run)} blocks)", len(ranges_a), every_at.table())
    one_at.fill(new_in, param_indices)
    every_at.fill(new_in, param_indices)

    def fresh():
        report = FlattenReport()
        cb = flattened(raw, table_a, report)
        if not report.flattened:
            lib.rcb_cmdbuf_free(cb)
            raise RuntimeError(f"not flattened: {report.reason.decode(errors='replace')}")
        return cb

    cbs, built = [], []
    try:
        for _ in range(5):
            report = FlattenReport()
            t0 = time.perf_counter_ns()
            cbs.append(flattened(raw, table_a, report))
            built.append(time.perf_counter_ns() - t0)
        if not report.flattened:
            raise RuntimeError(f"not flattened: {report.reason.decode(errors='replace')}")
        kinds = [k for _, k in graph_nodes(raw)]
        info = {"nodes": report.nodes, "kernels": kinds.count(KERNEL), "sites": report.sites, "allocations": len(ranges_a),
                "segments": len(segments), "flatten": median(built), "packed": sum(len(r[2]) for r in packed), "runs": len(packed),
                "kept_made": memory_use(cbs[0])}
        with torch.no_grad():
            want = model(new_in)

        # One moved: cbs[1] ends on table B (the new input); its replay must follow.
        measure(cbs[:2], one, table_a, fresh)
        update_times(cbs[1], one.table_b, table_a, 1)
        out_one = one_at.tensor(1, static_out)
        out_one.fill_(float("nan"))
        launch_and_wait(cbs[1])
        ok_one = (out_one - want).abs().max().item()

        # All moved: the old parameters and pool segments are overwritten with NaN before the
        # replay, and the old output with a sentinel, so a stale reference shows.
        # On two command buffers made now: the first pair's steady and cold timings above flush
        # the CPU caches, which would make these ones' first updates cold ones.
        for i in (2, 3):
            again = FlattenReport()
            made_before, cbs[i] = cbs[i], flattened(raw, table_a, again)
            lib.rcb_cmdbuf_free(made_before)
            if not again.flattened:
                raise RuntimeError(f"not flattened: {again.reason.decode(errors='replace')}")
        measure(cbs[2:4], every, table_a, fresh)
        update_times(cbs[3], every.table_b, table_a, 1)
        info["kept"] = memory_use(cbs[3])
        for base, size in params + segments:
            memset(base, size, 0xFF)
        static_out.fill_(SENTINEL)
        new_out = every_at.tensor(1, static_out)
        new_out.fill_(float("nan"))
        torch.cuda.synchronize()
        launch_and_wait(cbs[3])
        ok_all = (new_out - want).abs().max().item()
        stale = (static_out != SENTINEL).sum().item()
        for i in param_indices:
            memcpy(ranges_a[i][0], every_at.base(i), ranges_a[i][1])
        torch.cuda.synchronize()

        # Every allocation to a buffer of its own, not measured: followed, or refused where
        # storages lie end to end (reported, not a failure).
        info["independent_ok"], info["independent"] = independent_move(cbs[4], ranges_a)
    finally:
        for cb in cbs:
            lib.rcb_cmdbuf_free(cb)

    recapture, instantiate = [], []
    for _ in range(RECAPTURES):
        t0 = time.perf_counter_ns()
        g2 = capture(model, static_in, static_out, pool=g.pool())
        recapture.append(time.perf_counter_ns() - t0)
        del g2
        e = P()
        t0 = time.perf_counter_ns()
        cu(cuda.cuGraphInstantiateWithFlags(C.byref(e), P(raw), C.c_ulonglong(0)), "cuGraphInstantiateWithFlags")
        instantiate.append(time.perf_counter_ns() - t0)
        cuda.cuGraphExecDestroy(e)
    info["recapture"], info["instantiate"] = median(recapture), median(instantiate)
    del g

    ok = ok_one <= TOL and ok_all <= TOL and stale == 0
    print(
        f"{'PASS' if ok else 'FAIL'} {name}: {one.label} moved: max abs diff {ok_one:.3g}; all {len(ranges_a)} moved "
        f"({len(params)} parameter storages, {len(segments)} pool segments; {info['packed']} of them end to end in {info['runs']} runs, "
        f"each run moved as one block): max abs diff {ok_all:.3g}, old output elements written {stale}; "
        f"every allocation to its own buffer: {info['independent']}",
        file=sys.stderr,
        flush=True,
    )
    return ok, info, [one, every]


def fmt(ns):
    if ns is None:
        return "—"
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns / 1e6:.2f} ms"


def signed(ns):
    return ("−" if ns < 0 else "") + fmt(abs(ns))


def per(ns, n):
    return fmt(ns / n) if n else "—"


def ratio(a, b, digits=2, suffix=""):
    return f"{a / b:.{digits}f}{suffix}" if b else "—"


def print_table(title, columns, rows):
    """A markdown table under its `### ` title; the separator follows the columns."""
    print(f"### {title}\n")
    print("| " + " | ".join(columns) + " |")
    print("| " + " | ".join(["---"] * len(columns)) + " |")
    for cells in rows:
        print("| " + " | ".join(str(c) for c in cells) + " |")


def split_medians(split):
    """(in all, inside the setters, the library's own) of a list of timed_update's triples: the
    median of each, the library's own taken sample by sample."""
    if not split:
        return None
    return median([t for t, _, _ in split]), median([i for _, i, _ in split]), median([t - i for t, i, _ in split])


def lower_in_rounds(ms, attr):
    """In how many rounds the matched update of `attr` (not the first, or the first after
    another's update) took less than the matched first update: in all, inside the setters, the
    library's own."""
    pairs = list(zip(ms.split_matched_first, getattr(ms, attr)))
    counts = [sum(key(a) < key(f) for f, a in pairs) for key in (lambda x: x[0], lambda x: x[1], lambda x: x[0] - x[1])]
    return "; ".join(f"{c} of {len(pairs)}" for c in counts)


def print_split_table(rows):
    """The updates of the tables above split in the same call (only with SETTERS), a line each."""
    kinds = [
        ("first", "split_fresh"),
        ("first, right after another's", "split_code_run"),
        ("first, after the driver's pass", "split_after_pass"),
        ("first, made before two others (matched)", "split_matched_first"),
        ("first, another's update after it is made (matched)", "split_matched_after_other"),
        ("not the first, after the same work (matched)", "split_matched_again"),
        ("steady", "split_steady"),
    ]
    cells = []
    for name, _, sets in rows:
        for ms in sets:
            steady = split_medians(ms.split_steady)
            if steady is None:
                continue
            for label, attr in kinds:
                m = split_medians(getattr(ms, attr))
                if m is None:
                    continue
                extra = m[0] - steady[0]
                cells.append([
                    name, ms.label, ms.updated, label, *(fmt(x) for x in m), ratio(m[0], steady[0]), ratio(m[1], steady[1]),
                    ratio(m[2], steady[2]), f"{(m[2] - steady[2]) / extra:.2f}" if attr != "split_steady" and extra > 0 else "—",
                    ratio(ms.driver_fresh, ms.driver_steady) if attr == "split_fresh" else "",
                    lower_in_rounds(ms, attr) if attr in ("split_matched_again", "split_matched_after_other") else "",
                    sum(f for _, _, f in getattr(ms, attr)),
                ])
    print_table(
        "real graphs: each kind of update split in the same call into the time inside the driver's setters and the library's own"
        f" (the setter-timing stand-in as the library's runtime; medians of {FRESH} updates of each kind, {len(MATCHED_ORDERS)} of each matched one, of "
        f"{FRESH * STEADY_HERE} steady ones)",
        ["model", "moved", "touched nodes", "update", "in all", "inside the setters", "library's own", "in all / steady",
         "setters / steady", "library's own / steady", "library's share of the extra over steady",
         "driver, first pass on a fresh exec / its steady",
         "matched: rounds where it took less than the matched first (in all; setters; library's own)",
         "minor page faults around the calls, all samples"],
        cells,
    )
    print(
        "\n`first` and `first, right after another's` are the two first updates of each round of the table `the first update"
        " after a launch against the driver's first pass`; `first, after the driver's pass` is the first update of the table"
        " `whose is the rest`, whose command buffer then takes the"
        f" {STEADY_HERE} `steady` updates, each timed alone like the first ones. The matched set, in six rounds after the others,"
        " one in each order of its kinds: a"
        " command buffer made, two more made, the three launched and waited for (it last), then its first update; and a command"
        " buffer past its first update, updated to the moved placement and back (untimed), then the same two made and three"
        " launched, then its update, which is not its first; and a command buffer made, then the other's update to the moved"
        " placement and back (untimed, as the update that is not the first follows its own), then the same work and its first"
        " update. `inside the setters` is the"
        " time the stand-in counted inside the driver's exec setters during the call (one clock read in that window); `library's"
        " own` is the rest, sample by sample, which holds the stand-in's other clock read and call per setter, the same in every"
        " kind. The share is (own − own, steady) / (in all − in all, steady). The column before last is the driver's own first"
        " pass on a fresh executable graph against its steady passes, from the tables above (the stand-in is not in those calls);"
        " the next counts the rounds in which the matched update that is not the first, or the first after another's update, took"
        " less than the matched first one. The"
        " page faults are the timing thread's minor faults from just before each call to just after it (/proc/thread-self/stat,"
        " read untimed; the stand-in's reads of its sums fall inside that window).\n"
    )


def print_tables(rows):
    dev = torch.cuda.get_device_name(0)
    print_table(
        f"real graphs: PyTorch-captured models, flattened and updated through the C ABI, on cuda ({dev}, torch {torch.__version__})",
        ["model", "nodes", "kernel nodes", "allocations", "moved", "touched nodes", "of which in (c)", "(a) re-capture + instantiate",
         "(i) instantiate alone", "(c) SetParams floor", "(d) update_allocations, steady", "(c) per node", "(d) per touched node",
         "(d)/(c)", "(a)/(d)", "first update", "first/steady", "(d′) move_allocations, steady", "(d′)/(c)"],
        [[name, info["nodes"], info["kernels"], info["allocations"], ms.label, ms.updated, ms.floor_nodes,
          fmt(info["recapture"]), fmt(info["instantiate"]), fmt(ms.floor), fmt(ms.steady),
          per(ms.floor, ms.floor_nodes), per(ms.steady, ms.updated), ratio(ms.steady, ms.floor),
          ratio(info["recapture"], ms.steady, 1, "×"), fmt(ms.first["launch"]), ratio(ms.first["launch"], ms.steady, 1, "×"),
          fmt(ms.moves), ratio(ms.moves, ms.floor)]
         for name, info, sets in rows for ms in sets],
    )
    print(
        "\n(d) and (c) are timed in C around each call (median of "
        f"{STEADY}); (a) and (i) from Python (median of {RECAPTURES}). The floor pushes every touched kernel,"
        " memcpy and memset node through the driver's exec setter of its kind, on the command buffer's executable graph."
        " `first update` follows finalize and one launch. (d′) is the same update given only the moved allocations"
        " (`rcb_cmdbuf_move_allocations`, what the patched XLA calls), without the comparison of the whole table.\n"
    )
    print_table(
        "real graphs: each update given the moves right after a launch of the graph has run (XLA's loop), against the floor"
        " after a launch",
        ["model", "moved", "touched nodes", "(c) SetParams floor, after a launch", "(d′) move_allocations, after a launch", "(d′)/(c)",
         "(c) after a launch / (c) steady", "(d′) after a launch / (d′) steady"],
        [[name, ms.label, ms.updated, fmt(ms.floor_launched), fmt(ms.moves_launched), ratio(ms.moves_launched, ms.floor_launched),
          ratio(ms.floor_launched, ms.floor), ratio(ms.moves_launched, ms.moves)]
         for name, _, sets in rows for ms in sets],
    )
    print(
        f"\nMedians of {AFTER_LAUNCH} calls (or passes of the floor), each after a launch of the command buffer and a wait for it"
        " (untimed), half of them to each placement; the steady figures are those of the first table, timed with no launch between.\n"
    )
    print_table(
        "real graphs: the update given the moves and the floor call by call (no launch between), so that both meet the same"
        " state of the machine",
        ["model", "moved", "touched nodes", "(c) SetParams floor", "(d′) move_allocations", "(d′)/(c)", "median of the rounds' (d′)/(c)"],
        [[name, ms.label, ms.updated, fmt(ms.floor_paired), fmt(ms.moves_paired), ratio(ms.moves_paired, ms.floor_paired),
          f"{ms.paired_ratio:.2f}"]
         for name, _, sets in rows for ms in sets],
    )
    print(
        f"\n{PAIRED} rounds, each timing the update to the moved placement and back, then the floor's pass to it and back"
        " (rg_interleaved in C); the first table's steady figures time 200 of each in separate loops, which drift apart.\n"
    )
    print_table(
        "real graphs: flatten + finalize",
        ["model", "nodes", "sites", "pool segments", "flatten + finalize", "per node"],
        [[name, info["nodes"], info["sites"], info["segments"], fmt(info["flatten"]), per(info["flatten"], info["nodes"])]
         for name, info, _ in rows],
    )
    print()
    print_table(
        "real graphs: whose is the first update's cost (library: rcb_cmdbuf_update_allocations; driver: one pass of the exec setters"
        " over the touched nodes of a fresh executable graph of the same template; cold: median of "
        f"{COLD} calls, each after the CPU caches are flushed by writing {FLUSH_BYTES >> 20} MiB)",
        ["model", "moved", "library, first after finalize", "library, first after finalize + launch", "library, cold", "library, steady",
         "driver, first pass on a fresh exec", "driver, first pass after a launch", "driver, cold", "driver, steady", "(d) cold / (c) cold"],
        [[name, ms.label, fmt(ms.first["finalize"]), fmt(ms.first["launch"]), fmt(ms.cold), fmt(ms.steady),
          fmt(ms.driver_first["finalize"]), fmt(ms.driver_first["launch"]), fmt(ms.floor_cold), fmt(ms.driver_steady),
          ratio(ms.cold, ms.floor_cold)]
         for name, _, sets in rows for ms in sets],
    )
    print()
    print_table(
        "real graphs: the first update after a launch against the driver's first pass after a launch, each on what was made just"
        f" before it, and of a second one right after the first (medians of {FRESH})",
        ["model", "moved", "library, first", "library, first right after another's", "library, steady",
         "driver, first", "driver, first right after another's", "driver, steady",
         "library − driver, first", "library − driver, right after another's", "library − driver, steady"],
        [[name, ms.label, fmt(ms.lib_fresh), fmt(ms.lib_code_run), fmt(ms.steady), fmt(ms.driver_fresh), fmt(ms.driver_code_run),
          fmt(ms.driver_steady), signed(ms.lib_fresh - ms.driver_fresh), signed(ms.lib_code_run - ms.driver_code_run),
          signed(ms.steady - ms.driver_steady)]
         for name, _, sets in rows for ms in sets],
    )
    print(
        "\nIn each round the library makes two command buffers (flatten + finalize), launches both, waits, and times the first"
        " rcb_cmdbuf_update_allocations of the one made last, then that of the other (`right after another's`: the code has just"
        " run, the command buffer's own tables are older); the driver instantiates two executable graphs of the same template,"
        " launches both, waits, and times one pass of the exec setters over the touched nodes on the one made last, then on the"
        f" other. {FRESH} rounds, the library first in every other one; medians. The steady figures are the first table's and the"
        " driver's passes after its first, timed in separate loops.\n"
    )
    print_table(
        "real graphs: whose is the rest of the first update: the driver's first pass over the touched nodes of a command buffer's"
        f" own executable graph, then that command buffer's first update and its steady ones (medians of {FRESH})",
        ["model", "moved", "nodes the pass found", "driver, first pass on the command buffer's own executable graph (to the moved placement)", "library, first update right after it",
         "library, steady on the same command buffer", "first / steady", "library, first with no pass before it",
         "first with no pass before it / steady", "library, first, made before two others (matched)",
         "library, not the first, after the same work (matched)", "not the first / first (matched)",
         "library, first, another's update after it is made (matched)", "that / first (matched)"],
        [[name, ms.label, ms.own_found, fmt(ms.own_pass), fmt(ms.lib_after_pass), fmt(ms.lib_after_pass_steady),
          ratio(ms.lib_after_pass, ms.lib_after_pass_steady), fmt(ms.lib_fresh), ratio(ms.lib_fresh, ms.lib_after_pass_steady),
          fmt(ms.matched_first), fmt(ms.matched_again), ratio(ms.matched_again, ms.matched_first), fmt(ms.matched_after_other),
          ratio(ms.matched_after_other, ms.matched_first)]
         for name, _, sets in rows for ms in sets],
    )
    print(
        "\nIn each round, after the two above, one more command buffer is made (flatten + finalize) and launched; the driver's exec"
        " setters push to its touched nodes the parameters of the moved placement (one pass, timed; `nodes the pass found`: the"
        " touched nodes found in its template by what they hold, the rest left out of the pass) and then the parameters it holds"
        " (untimed), then its first"
        f" rcb_cmdbuf_update_allocations is timed, then {STEADY_HERE} more (to the other placement and back; their median is the"
        " steady figure). What the first update pays beyond the steady ones is the rest, once the driver has had its first pass over"
        " the same nodes of the same executable graph (its template is read before its launch, which the other rounds do not do);"
        " `first with no pass before it` is the table above's `library, first`, set against the same steady figure. Last, the"
        " matched set, in six rounds after the above, one in each order of its kinds (medians of six): a command buffer made,"
        " two more made, the three launched and waited for (it last), then its first update (`first, made before two others`); a command buffer past its first"
        " update, updated to the moved placement and back (untimed, its last touch), then the same two made and three launched,"
        " then its update (`not the first, after the same work`); and a command buffer made, then the other's update to the"
        " moved placement and back (untimed), then the same work and its first update (`first, another's update after it is"
        " made`: like the update that is not the first, it follows an update made after its command buffer's last change)."
        " What the first pays beyond the update that is not the first is what only a first update does.\n"
    )
    if SETTERS:
        print_split_table(rows)

    def bytes_per_node(info, b):
        return f"{b / info['nodes']:.0f} B"

    def largest(kept):
        part = max(MemoryUse.PARTS, key=lambda p: getattr(kept, p))
        return f"{part.replace('_', ' ')} ({getattr(kept, part) / kept.total_bytes:.0%})"

    print_table(
        "real graphs: the host memory a command buffer keeps (rcb_cmdbuf_memory_use), per node",
        ["model", "nodes", "allocations", "sites", "argument bytes", "kept after finalize", "kept after the updates",
         "kept / argument bytes", "goal: 2 × argument bytes + 64 B", "kept / goal", "largest part"]
        + [p.replace("_", " ") for p in MemoryUse.PARTS] + ["heap blocks"],
        [[name, info["nodes"], info["allocations"], info["sites"], bytes_per_node(info, k.argument_bytes),
          bytes_per_node(info, info["kept_made"].total_bytes), bytes_per_node(info, k.total_bytes),
          ratio(k.total_bytes, k.argument_bytes, 1, "×"), bytes_per_node(info, 2 * k.argument_bytes + 64 * info["nodes"]),
          ratio(k.total_bytes, 2 * k.argument_bytes + 64 * info["nodes"]), largest(k)]
         + [bytes_per_node(info, getattr(k, p)) for p in MemoryUse.PARTS] + [f"{k.heap_blocks / info['nodes']:.1f}"]
         for name, info, _ in rows for k in [info["kept"]]],
    )
    print(
        "\nCounted by the library from its own structures (rcb_cmdbuf_memory_use), divided by the graph's nodes: right after"
        " flatten + finalize, and on the command buffer the `all` rows updated (its update scratch grown to what moving every"
        " allocation needs); the parts are those of the latter. The allocator's headers and what the driver keeps for the"
        " graphs are not counted.\n"
    )
    print_table(
        "real graphs: allocations end to end, and every allocation moved to a buffer of its own (not measured)",
        ["model", "allocations", "end to end with another", "runs", "independent move of every allocation"],
        [[name, info["allocations"], info["packed"], info["runs"], info["independent"]] for name, info, _ in rows],
    )
    print(
        "\nThe caching allocator packs storages end to end, and an address that is one allocation's end and the next one's base"
        " is ambiguous when found by value (the flattened graph's kernel arguments), so the library moves it in place only when"
        " both move by the same delta and refuses otherwise (`needs_rerecord`, `overlapping_allocations`). The `all` rows above"
        " move each run of allocations lying end to end as one block; a refusal here is the library's rule, not a failure.\n"
    )

def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", file=sys.stderr, flush=True)
    failed, rows = False, []
    for name, make, shape in models():
        try:
            ok, info, sets = run(name, make, shape)
            failed |= not ok
            rows.append((name, info, sets))
        except Exception as e:  # report every model, then fail
            print(f"FAIL {name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            failed = True
    print_tables(rows)
    refused = [(name, info["independent"]) for name, info, _ in rows if not info["independent_ok"]]
    print(
        f"real_graphs: {len(refused)} of {len(rows)} models refuse an independent move of every allocation"
        + "".join(f"; {name}: {why}" for name, why in refused),
        file=sys.stderr,
        flush=True,
    )
    if MISSING_TORCHVISION:
        print("FAIL resnet18: torchvision unavailable (set RCB_GPU_ALLOW_MISSING=torchvision to skip it)", file=sys.stderr, flush=True)
    sys.exit(1 if failed or MISSING_TORCHVISION else 0)


if __name__ == "__main__":
    main()

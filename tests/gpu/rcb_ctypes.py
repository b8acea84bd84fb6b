"""ctypes bindings of the rocm_cmdbuf C ABI used by the PyTorch scripts in this directory
(torch_flatten.py, torch_collectives.py, torch_collective_cache.py, real_graphs.py): the structs
they pass and the functions they call.

The library is the one named by RCB_LIBRARY (ci/gpu-run.sh sets it to the staged copy)."""

import ctypes as C
import os

P = C.c_void_p


class Alloc(C.Structure):
    _fields_ = [("base", C.c_uint64), ("size", C.c_uint64)]


class Move(C.Structure):
    _fields_ = [("index", C.c_uint64), ("base", C.c_uint64)]


class Sized(C.Structure):
    """A sized struct (the rule at the top of rocm_cmdbuf.h): made with its struct_size set."""

    def __init__(self, *args, **kwargs):
        super().__init__(C.sizeof(self), *args, **kwargs)


class FlattenReport(Sized):
    _fields_ = [("struct_size", C.c_uint32), ("flattened", C.c_uint32), ("nodes", C.c_uint32), ("sites", C.c_uint32), ("reason", C.c_char * 256)]


class UpdateReport(Sized):
    _fields_ = [
        ("struct_size", C.c_uint32),
        ("moved_allocations", C.c_uint32),
        ("patched_sites", C.c_uint64),
        ("updated_nodes", C.c_uint64),
        ("needs_rerecord", C.c_uint32),
        ("reinstantiated", C.c_uint32),
    ]


class MemoryUse(Sized):
    """rcb_memory_use: the host memory a command buffer keeps, by what it holds."""

    PARTS = ("argument_copies", "node_records", "node_lists", "site_lists", "allocation_table", "update_scratch", "other")
    _fields_ = [("struct_size", C.c_uint32), ("reserved", C.c_uint32), ("total_bytes", C.c_uint64), ("argument_bytes", C.c_uint64)] + [
        (part, C.c_uint64) for part in PARTS
    ] + [("heap_blocks", C.c_uint64)]


class Counters(Sized):
    """rcb_counters (version 1)."""

    _fields_ = [("struct_size", C.c_uint32), ("version", C.c_uint32)] + [
        (name, C.c_uint64)
        for name in ("captures", "instantiations", "reinstantiations", "retired_execs", "exec_param_pushes", "exec_param_push_bytes",
                     "address_updates", "relocations", "trace_hits", "fallbacks_total")
    ] + [("fallbacks", C.c_uint64 * 16)]  # RCB_FALLBACK_REASON_SLOTS


class VmmPoolConfig(Sized):
    _fields_ = [
        ("struct_size", C.c_uint32),
        ("device", C.c_int32),
        ("backing", C.c_uint32),
        ("num_slots", C.c_uint32),
        ("num_buffers", C.c_uint32),
        ("buffer_sizes", C.POINTER(C.c_uint64)),
        ("num_peers", C.c_uint32),
        ("peers", C.POINTER(C.c_int32)),
        ("timeout_ms", C.c_uint32),
    ]


class VmmSlot(Sized):
    _fields_ = [("struct_size", C.c_uint32), ("iteration", C.c_uint64), ("index", C.c_uint32), ("num_buffers", C.c_uint32), ("buffers", C.POINTER(C.c_uint64))]


class VmmCopy(C.Structure):
    _fields_ = [("dst", C.c_uint64), ("src", C.c_uint64), ("bytes", C.c_uint64)]


TRACE_HIT, TRACE_RELOCATED, TRACE_TRACED, TRACE_UNCACHED = 0, 1, 2, 3
OUTCOMES = {TRACE_HIT: "hit", TRACE_RELOCATED: "relocated", TRACE_TRACED: "traced", TRACE_UNCACHED: "uncached"}
VMM_BACKING_VMM = 1
# rcb_trace_fn: int32_t (*)(void *user_data, void *stream)
TraceFn = C.CFUNCTYPE(C.c_int32, P, P)

lib = C.CDLL(os.environ["RCB_LIBRARY"])
lib.rcb_cmdbuf_new.argtypes = [C.c_int32, C.POINTER(P)]
lib.rcb_cmdbuf_free.argtypes = [P]
lib.rcb_cmdbuf_set_allocations.argtypes = [P, C.POINTER(Alloc), C.c_size_t]
lib.rcb_cmdbuf_add_flattened_child.argtypes = [P, C.POINTER(C.c_uint64), C.c_size_t, P, P, C.POINTER(C.c_uint64), C.POINTER(FlattenReport)]
lib.rcb_cmdbuf_finalize.argtypes = [P]
lib.rcb_cmdbuf_launch.argtypes = [P, P]
lib.rcb_cmdbuf_update_allocations.argtypes = [P, C.POINTER(Alloc), C.c_size_t, C.POINTER(UpdateReport)]
lib.rcb_cmdbuf_move_allocations.argtypes = [P, C.POINTER(Move), C.c_size_t, C.POINTER(UpdateReport)]
lib.rcb_cmdbuf_graph.argtypes = [P, C.POINTER(P)]
lib.rcb_cmdbuf_exec.argtypes = [P, C.POINTER(P)]
lib.rcb_counters_get.argtypes = [P, C.POINTER(Counters)]
lib.rcb_cmdbuf_memory_use.argtypes = [P, C.POINTER(MemoryUse)]
lib.rcb_fallback_reason_name.argtypes = [C.c_uint32]
lib.rcb_fallback_reason_name.restype = C.c_char_p
lib.rcb_last_error_message.argtypes = [C.c_char_p, C.c_size_t]
lib.rcb_last_error_message.restype = C.c_size_t
lib.rcb_version.argtypes = []
lib.rcb_version.restype = C.c_char_p
lib.rcb_trace_cache_new.argtypes = [C.c_size_t, C.POINTER(P)]
lib.rcb_trace_cache_free.argtypes = [P]
lib.rcb_trace_cache_get_or_trace.argtypes = [P, P, C.POINTER(Alloc), C.c_size_t, TraceFn, P, C.POINTER(P), C.POINTER(C.c_uint32)]
lib.rcb_vmm_pool_new.argtypes = [C.POINTER(VmmPoolConfig), C.POINTER(P)]
lib.rcb_vmm_pool_acquire_on_stream.argtypes = [P, P, C.POINTER(VmmSlot)]
lib.rcb_vmm_pool_release.argtypes = [P, C.POINTER(VmmSlot), P]
lib.rcb_vmm_pool_copy.argtypes = [P, P, C.POINTER(VmmCopy), C.c_size_t]
lib.rcb_vmm_pool_free.argtypes = [P]


def check(status, what):
    """Raises with the library's last error message when `status` is not RCB_OK."""
    if status != 0:
        buf = C.create_string_buffer(1024)
        lib.rcb_last_error_message(buf, 1024)
        raise RuntimeError(f"{what}: status {status}: {buf.value.decode(errors='replace')}")


def fallbacks(cb):
    """The command buffer's fallbacks so far: {reason name: count} for each reason counted."""
    c = Counters()
    check(lib.rcb_counters_get(cb, C.byref(c)), "rcb_counters_get")
    return {(lib.rcb_fallback_reason_name(i) or f"reason {i}".encode()).decode(): n for i, n in enumerate(c.fallbacks) if n}


def new_fallbacks(cb, before):
    """The reasons counted since `before` (what `fallbacks(cb)` returned then), comma-separated."""
    return ", ".join(name for name, n in fallbacks(cb).items() if n > before.get(name, 0)) or "no fallback counted"


def table(ranges):
    """An allocation table from tensors (their bytes) or `(base, size)` pairs."""
    entries = [Alloc(*r) if isinstance(r, tuple) else Alloc(r.data_ptr(), r.nbytes) for r in ranges]
    return (Alloc * len(entries))(*entries)


def moves(old, new):
    """The moves from table `old` to table `new` (same length): each entry whose base changed."""
    entries = [Move(i, n.base) for i, (o, n) in enumerate(zip(old, new)) if o.base != n.base]
    return (Move * len(entries))(*entries)


def memory_use(cb):
    """What command buffer `cb` keeps in host memory (rcb_cmdbuf_memory_use)."""
    kept = MemoryUse()
    check(lib.rcb_cmdbuf_memory_use(cb, C.byref(kept)), "rcb_cmdbuf_memory_use")
    return kept


def flattened(graph, allocs, report, device=0):
    """A new primary command buffer for `device` holding `graph` (a CUgraph) flattened over
    the allocation table `allocs`, finalized; the caller frees it with lib.rcb_cmdbuf_free."""
    cb = P()
    check(lib.rcb_cmdbuf_new(device, C.byref(cb)), "rcb_cmdbuf_new")
    try:
        check(lib.rcb_cmdbuf_set_allocations(cb, allocs, len(allocs)), "rcb_cmdbuf_set_allocations")
        group = C.c_uint64()
        check(lib.rcb_cmdbuf_add_flattened_child(cb, None, 0, None, P(graph), C.byref(group), C.byref(report)), "rcb_cmdbuf_add_flattened_child")
        check(lib.rcb_cmdbuf_finalize(cb), "rcb_cmdbuf_finalize")
    except Exception:
        lib.rcb_cmdbuf_free(cb)
        raise
    return cb

#!/usr/bin/env python3
"""NCCL collectives served by rocm_cmdbuf's trace cache and circular VMM pool on two GPUs, one
process per GPU: what a patched XLA would do with a collective if it traced it through the cache.

Runs on a machine with two GPUs only (ci/gpu-run.sh, when it sees two):
    RCB_LIBRARY=/path/librocm_cmdbuf.so RCB_BACKEND=cuda python3 torch_collective_cache.py
Each collective (an all-reduce `out = x; all_reduce(out)`, an all-gather and a reduce-scatter,
each over buffers allocated before it, so that its capture allocates nothing) is issued by PyTorch
over NCCL inside the library's capture (`rcb_trace_cache_get_or_trace`), and the graph the cache
returns is added to a library command buffer (`rcb_cmdbuf_add_flattened_child`; a collective's
kernel is copied, never patched) and launched from it. Everything runs twice, with NCCL's graph buffer registration on (its default) and off
(NCCL_GRAPH_REGISTER=0), in two fresh pairs of processes.

1. The cache's decision differs between the ranks (no vote): a step where both ranks capture, one
   where both hit, one where only rank 1's addresses change (rank 0 hits, rank 1 captures: a
   collective is never relocated), one where only rank 0's change, one where both go back to the
   first addresses (both hit graphs captured before the other rank's later captures), one where
   both change. A hit must not issue the collective (the trace function counts its calls), a
   capture must issue it once. Every launch is compared bit for bit with the same collective run eagerly (small
   integers in float32, so every sum is exact), and the buffers a rank no longer uses are poisoned
   before the launch and must keep the poison.
2. 1 000 steps through a 4-slot circular VMM pool per collective (`rcb_vmm_pool_acquire_on_stream`,
   copies in and out with `rcb_vmm_pool_copy`, `rcb_vmm_pool_release`), with no host wait between
   steps: each step's input is copied into its slot, the collective is got from the cache for the
   slot's buffers (4 captures, then hits only) and launched, and its output is copied out to a row
   of a results tensor, which must equal the eager result of every step. Each slot's buffers must
   have the same addresses every time it comes round, and every buffer the same physical memory
   (`cuMemRetainAllocationHandle`) before the first step and after the last, while the graphs that
   NCCL may have registered it for live; the pool is freed only after them.
3. Figures, per rank: a capture, a hit (through ctypes, with the cost of a bare ctypes call into
   the library beside it), and the host time of a pool step with the collective against the same
   step without it, with the hit's and the launch's share.

A hang fails: the parent gives each pair of ranks TIMEOUT seconds and kills them, and the pool's
waits are bounded. NCCL_NVLS_ENABLE=0 (no multicast objects). A missing dependency, or fewer than
two GPUs, fails the run unless RCB_GPU_ALLOW_MISSING names it (torch, cuda, gpus), which prints a
SKIPPED line. Exits 1 when any check fails."""

import ctypes as C
import os
import sys
import time

os.environ.setdefault("RCB_BACKEND", "cuda")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
TIMEOUT = 130  # per pair of ranks: both pairs within gpu-run.sh's 300 s
POISON = -12345.0
N = 1024  # elements of a rank's input; every collective's tensors are small multiples of this
STEPS = 1000
SLOTS = 4
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter"]

from gpu_deps import missing, torch_with_cuda  # noqa: E402

torch = torch_with_cuda("torch_collective_cache")


def shapes(name, world):
    """(input elements, output elements) of one rank's call of collective `name`."""
    return {"all_reduce": (N, N), "all_gather": (N, world * N), "reduce_scatter": (world * N, N)}[name]


def issue(name, x, out):
    """Collective `name` from `x` into `out` on the current stream; allocates nothing."""
    import torch.distributed as dist

    if name == "all_reduce":
        out.copy_(x)
        dist.all_reduce(out)
    elif name == "all_gather":
        dist.all_gather_into_tensor(out, x)
    else:
        dist.reduce_scatter_tensor(out, x)


def eager(name, x, out_elems):
    """The output of collective `name` over a copy of `x`, run eagerly (every rank calls it)."""
    out = torch.empty(out_elems, device="cuda")
    issue(name, x.clone(), out)
    torch.cuda.synchronize()
    return out


class Raw:
    """A float32 vector of `n` elements at device address `ptr` that torch can wrap without owning."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 2}


def wrap(ptr, n):
    return torch.as_tensor(Raw(ptr, n), device="cuda")


class Command:
    """Collective `name` over (x, out) as the cache is asked for it: its allocation table and the
    trace function the library calls while it captures, which counts its calls."""

    def __init__(self, name, x, out, stream):
        from rcb_ctypes import TraceFn, table

        self.x, self.out, self.traces = x, out, 0
        self.allocs = table([x, out])

        def trace(_user, _stream):
            self.traces += 1
            try:
                with torch.cuda.stream(stream):
                    issue(name, x, out)
                return 0
            except Exception as e:  # reported through the library's callback status
                print(f"trace of {name} raised {type(e).__name__}: {e}", flush=True)
                return 1

        self.fn = TraceFn(trace)


class Cache:
    """A trace cache whose graphs are launched from library command buffers, one per graph."""

    def __init__(self, device, stream):
        from rcb_ctypes import P, check, lib

        self.device, self.stream = device, stream
        self.tc = P()
        check(lib.rcb_trace_cache_new(8, C.byref(self.tc)), "rcb_trace_cache_new")
        self.cbs = {}  # graph address -> command buffer holding it
        self.added = set()  # how each graph went into its command buffer

    def get(self, cmd):
        """The command buffer of `cmd`, the cache's outcome and the host time of the get (ns)."""
        from rcb_ctypes import OUTCOMES, TRACE_HIT, FlattenReport, P, check, flattened, lib

        graph, outcome = P(), C.c_uint32()
        t0 = time.perf_counter_ns()
        status = lib.rcb_trace_cache_get_or_trace(self.tc, P(self.stream.cuda_stream), cmd.allocs, len(cmd.allocs), cmd.fn, None, C.byref(graph), C.byref(outcome))
        took = time.perf_counter_ns() - t0
        check(status, "rcb_trace_cache_get_or_trace")
        cb = self.cbs.get(graph.value)
        # A relocation rewrites the cached graph in place (same address): its earlier copy is stale.
        if cb is None or outcome.value != TRACE_HIT:
            if cb is not None:
                self.stream.synchronize()
                lib.rcb_cmdbuf_free(cb)
            report = FlattenReport()
            cb = flattened(graph.value, cmd.allocs, report, self.device)
            self.added.add("flattened" if report.flattened else f"a child node ({report.reason.decode(errors='replace')})")
            self.cbs[graph.value] = cb
        return cb, OUTCOMES.get(outcome.value, str(outcome.value)), took

    def launch(self, cb):
        """Launches `cb` on the cache's stream; the host time of the call (ns)."""
        from rcb_ctypes import P, check, lib

        t0 = time.perf_counter_ns()
        status = lib.rcb_cmdbuf_launch(cb, P(self.stream.cuda_stream))
        took = time.perf_counter_ns() - t0
        check(status, "rcb_cmdbuf_launch")
        return took

    def free(self):
        from rcb_ctypes import check, lib

        torch.cuda.synchronize()
        for cb in self.cbs.values():
            lib.rcb_cmdbuf_free(cb)
        self.cbs = {}
        check(lib.rcb_trace_cache_free(self.tc), "rcb_trace_cache_free")


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def integers(n, seed, low=-3, high=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (n,), generator=g).float().cuda()


def rank_main(rank, world, port, results, register):
    import torch.distributed as dist
    import two_ranks

    if register is not None:
        os.environ["NCCL_GRAPH_REGISTER"] = register
    two_ranks.join(rank, world, port)
    report = two_ranks.Report(rank)
    verdict, figure = report.verdict, report.figure

    try:
        for name in COLLECTIVES:
            divergent_decisions(name, rank, world, verdict, figure)
        for name in COLLECTIVES:
            pool_steps(name, rank, world, verdict, figure)
        bare_call(figure)
    except Exception as e:  # a failure of this rank, reported with the checks made so far
        import traceback

        verdict(False, f"raised {type(e).__name__}: {e}\n{traceback.format_exc()}")
    dist.barrier()
    dist.destroy_process_group()
    report.put(results)


def divergent_decisions(name, rank, world, verdict, figure):
    """Part 1: steps on which the ranks' cache decisions differ."""
    in_elems, out_elems = shapes(name, world)
    stream = torch.cuda.Stream()
    cache = Cache(rank, stream)
    made, commands = {}, {}

    def buffers(key):
        if key not in made:
            made[key] = (integers(in_elems, 100 * rank + len(made)), torch.empty(out_elems, device="cuda"))
            commands[key] = Command(name, *made[key], stream)
        return made[key]

    # Which buffers each rank uses on each step, and the outcome each rank must see.
    steps = [
        ("both capture", ("A", "A"), ("traced", "traced")),
        ("both hit", ("A", "A"), ("hit", "hit")),
        ("only rank 1 moves", ("A", "B"), ("hit", "traced")),
        ("only rank 0 moves", ("B", "B"), ("traced", "hit")),
        ("both back to the first buffers", ("A", "A"), ("hit", "hit")),
        ("both move", ("C", "C"), ("traced", "traced")),
    ]
    captures, hits = [], []
    for what, keys, outcomes in steps:
        x, out = buffers(keys[rank])
        expected = eager(name, x, out_elems)
        traces = commands[keys[rank]].traces
        cb, outcome, took = cache.get(commands[keys[rank]])
        traced = commands[keys[rank]].traces - traces
        (hits if outcome == "hit" else captures).append(took)
        stale = [t for k, pair in made.items() if k != keys[rank] for t in pair]
        for t in stale:
            t.fill_(POISON)
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        cache.launch(cb)
        stream.synchronize()
        exact = torch.equal(out, expected)
        untouched = all(bool((t == POISON).all().item()) for t in stale)
        want = outcomes[rank]
        calls = traced == (0 if outcome == "hit" else 1)
        verdict(exact and untouched and outcome == want and calls, f"{name}, {what}: {outcome} (expected {want}), the collective issued {traced} time(s); exact {exact}, {len(stale)} unused buffer(s) untouched {untouched}")
    # A hit's host cost, without launching: the same key over and over.
    buffers("A")
    times = [cache.get(commands["A"])[2] for _ in range(2000)]
    figure(f"{name}: capture {sum(captures) / len(captures) / 1e6:.2f} ms (mean of {len(captures)}), hit {median(times) / 1e3:.2f} us (median of {len(times)}, the ctypes call included), relocation: never (a collective's kernel is opaque, so new addresses are captured); the graph went into its command buffer {', '.join(sorted(cache.added))}")
    cache.free()


def retained_handles(addresses):
    """The physical allocation handle behind each device address (cuMemRetainAllocationHandle)."""
    cuda = C.CDLL("libcuda.so.1")
    handles = []
    for a in addresses:
        h = C.c_uint64()
        rc = cuda.cuMemRetainAllocationHandle(C.byref(h), C.c_void_p(a))
        if rc != 0:
            raise RuntimeError(f"cuMemRetainAllocationHandle({a:#x}) returned {rc}")
        handles.append(h.value)
        cuda.cuMemRelease(C.c_uint64(h.value))
    return handles


def pool_steps(name, rank, world, verdict, figure):
    """Part 2: STEPS steps through a circular VMM pool, with and without the collective."""
    from rcb_ctypes import P, VmmCopy, VmmPoolConfig, VmmSlot, VMM_BACKING_VMM, check, lib

    in_elems, out_elems = shapes(name, world)
    stream = torch.cuda.Stream()
    sizes = (C.c_uint64 * 2)(in_elems * 4, out_elems * 4)
    peers = (C.c_int32 * 1)(1 - rank)
    config = VmmPoolConfig(device=rank, backing=VMM_BACKING_VMM, num_slots=SLOTS, num_buffers=2, buffer_sizes=sizes, num_peers=1, peers=peers, timeout_ms=20000)
    pool = P()
    check(lib.rcb_vmm_pool_new(C.byref(config), C.byref(pool)), "rcb_vmm_pool_new")
    inputs = torch.randint(-3, 4, (STEPS, in_elems), generator=torch.Generator().manual_seed(7 + rank)).float().cuda()
    results = torch.full((STEPS, out_elems), float("nan"), device="cuda")
    # What every step must give, from two eager collectives over all the steps' inputs at once.
    if name == "all_reduce":
        expected = eager("all_reduce", inputs.reshape(-1), STEPS * in_elems).reshape(STEPS, out_elems)
    elif name == "all_gather":
        gathered = eager("all_gather", inputs.reshape(-1), world * STEPS * in_elems).reshape(world, STEPS, in_elems)
        expected = gathered.permute(1, 0, 2).reshape(STEPS, out_elems)
    else:
        summed = eager("all_reduce", inputs.reshape(-1), STEPS * in_elems).reshape(STEPS, in_elems)
        expected = summed[:, rank * N:(rank + 1) * N].contiguous()
    cache = Cache(rank, stream)
    addresses, outcomes, commands = {}, {}, {}
    gets, launches = [], []

    def run(with_collective):
        slot = VmmSlot()
        took = []
        for i in range(STEPS):
            start = time.perf_counter_ns()
            check(lib.rcb_vmm_pool_acquire_on_stream(pool, P(stream.cuda_stream), C.byref(slot)), "rcb_vmm_pool_acquire_on_stream")
            x, out = slot.buffers[0], slot.buffers[1]
            if addresses.setdefault(slot.index, (x, out)) != (x, out):
                raise RuntimeError(f"slot {slot.index} came round at other addresses")
            copy_in = (VmmCopy * 1)(VmmCopy(x, inputs[i].data_ptr(), in_elems * 4))
            check(lib.rcb_vmm_pool_copy(pool, P(stream.cuda_stream), copy_in, 1), "rcb_vmm_pool_copy (in)")
            if with_collective:
                if slot.index not in commands:
                    commands[slot.index] = Command(name, wrap(x, in_elems), wrap(out, out_elems), stream)
                cb, outcome, get_ns = cache.get(commands[slot.index])
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                launches.append(cache.launch(cb))
                if outcome == "hit":
                    gets.append(get_ns)
            copy_out = (VmmCopy * 1)(VmmCopy(results[i].data_ptr(), out, out_elems * 4))
            check(lib.rcb_vmm_pool_copy(pool, P(stream.cuda_stream), copy_out, 1), "rcb_vmm_pool_copy (out)")
            check(lib.rcb_vmm_pool_release(pool, C.byref(slot), P(stream.cuda_stream)), "rcb_vmm_pool_release")
            took.append(time.perf_counter_ns() - start)
        stream.synchronize()
        return sorted(took)[len(took) // 2]

    torch.cuda.synchronize()
    run(False)  # every slot touched once, so that both timed loops start alike
    before = retained_handles([a for pair in sorted(addresses.items()) for a in pair[1]])
    results.fill_(float("nan"))
    torch.cuda.synchronize()
    with_ns = run(True)
    exact = torch.equal(results, expected)
    wrong = int((results != expected).any(dim=1).sum().item())
    after = retained_handles([a for pair in sorted(addresses.items()) for a in pair[1]])
    verdict(exact, f"{name}: {STEPS} steps through {len(addresses)} VMM pool slots, outcomes {outcomes}; every step exact {exact} ({wrong} wrong)")
    traces = sum(c.traces for c in commands.values())
    verdict(outcomes.get("traced", 0) == SLOTS and outcomes.get("hit", 0) == STEPS - SLOTS and traces == SLOTS, f"{name}: one capture per slot, then hits only ({outcomes}; the collective issued {traces} time(s))")
    verdict(before == after, f"{name}: every slot buffer kept its physical memory over the {STEPS} steps ({len(before)} buffers)")
    without_ns = run(False)
    figure(f"{name}: a pool step's host time {with_ns / 1e3:.1f} us with the collective, {without_ns / 1e3:.1f} us without it (medians of {STEPS} steps each, Python included); of the collective's share, the cache hit {median(gets) / 1e3:.2f} us and the launch {median(launches) / 1e3:.2f} us (medians, the ctypes calls included)")
    cache.free()
    status = lib.rcb_vmm_pool_free(pool)
    verdict(status == 0, f"{name}: the pool freed after every graph using it (status {status})")


def bare_call(figure):
    from rcb_ctypes import lib

    times = []
    for _ in range(2000):
        t0 = time.perf_counter_ns()
        lib.rcb_version()
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    figure(f"a bare ctypes call into the library (rcb_version): {times[len(times) // 2] / 1e3:.2f} us (median of {len(times)})")


def pair(register):
    """Runs both ranks with NCCL_GRAPH_REGISTER=`register` (None: NCCL's default); True when both
    reported and passed."""
    import two_ranks

    label = f"NCCL_GRAPH_REGISTER={register}" if register is not None else "NCCL_GRAPH_REGISTER unset (registration on)"
    print(f"== {label}", flush=True)
    return two_ranks.run(rank_main, (register,), TIMEOUT, f"torch_collective_cache ({label})")


def main():
    print(f"torch {torch.__version__}, {torch.cuda.device_count()} GPU(s), NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
    if torch.cuda.device_count() < 2:
        ok = missing("torch_collective_cache", "gpus", "every collective", f"two GPUs needed, {torch.cuda.device_count()} seen")
        sys.exit(0 if ok else 1)
    passed = [pair(None), pair("0")]
    failed = not all(passed)
    print(f"torch_collective_cache: {'FAIL' if failed else 'all passed'} (registration on: {'passed' if passed[0] else 'FAILED'}, off: {'passed' if passed[1] else 'FAILED'})", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

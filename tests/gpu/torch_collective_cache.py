#!/usr/bin/env python3
"""NCCL collectives served by rocm_cmdbuf's trace cache and circular VMM pool on two GPUs, one
process per GPU: what a caller that traced collectives through the cache would get.

Runs on a machine with two GPUs only (ci/gpu-run.sh, when it sees two):
    RCB_LIBRARY=/path/librocm_cmdbuf.so RCB_BACKEND=cuda python3 torch_collective_cache.py
Each collective (an all-reduce `out = x; all_reduce(out)`, an out-of-place all-gather and a
reduce-scatter, each over buffers allocated before it) is issued by PyTorch over NCCL on the
stream the library captures (`rcb_trace_cache_get_or_trace`), and the graph the cache returns is
added to a library command buffer (`rcb_cmdbuf_add_flattened_child`; a collective's kernel is
copied, never patched) and launched from it. Everything runs twice, in fresh pairs of processes:
with NCCL's graph buffer registration on (its default) and off (NCCL_GRAPH_REGISTER=0), both with
NCCL_PROTO=Simple and NCCL_LEGACY_CUDA_REGISTER=1, without which NCCL registers none of these
buffers (PyTorch's memory comes from cudaMalloc); NCCL's registration log (NCCL_DEBUG_SUBSYS=REG)
must show the captured all-gather's buffers registered with it on, and nothing with it off.

1. The cache's decision differs between the ranks (no vote): both ranks capture; both hit; both
   hit with an eager collective still running when the graph is launched; only rank 1's
   addresses change (rank 0 hits, rank 1 captures: a collective is never relocated); only rank
   0's change; both go back to the first addresses (each hits a graph captured before the later
   captures); both change, with the eager collective running. A hit must not issue the
   collective; a capture must issue it once, allocate nothing (PyTorch's allocation count) and be
   marked never to be relocated (the library's opaque-kernel count). Every launch is compared bit
   for bit with the same collective run eagerly (small integers in float32: every sum is exact),
   and the buffers a rank no longer uses are poisoned before the launch and must keep the poison.
2. 1 000 steps through a 4-slot circular VMM pool per collective, alternating between two streams
   so that only the pool's timeline orders a slot's uses (`rcb_vmm_pool_acquire_on_stream`,
   copies in and out with `rcb_vmm_pool_copy`, `rcb_vmm_pool_release`), with no host wait between
   steps: each step's input is copied into its slot, the collective is got from the cache for the
   slot's buffers (4 captures, then hits only) and launched, and its output is copied out to a row
   of a results tensor, which must equal the eager result of every step. Each slot's buffers must
   have the same addresses, and the same physical allocation (`cuMemRetainAllocationHandle`),
   every time the slot comes round while the graphs using them live.
3. Figures, per rank: a capture, a hit (through ctypes, with the cost of a bare ctypes call into
   the library beside it), and the host time of a pool step with the collective against the same
   step without it, with the hit's and the launch's share.

A hang fails: the parent gives both pairs of ranks TIMEOUT seconds together and kills what is
left; a rank that raises reports its failure and exits at once. Waits on the host are bounded;
a stream's wait for a slot (on the GPU) is not, and is covered by that timeout. NCCL_NVLS_ENABLE=0
(no multicast objects). A missing dependency, or fewer than two GPUs, fails the run unless
RCB_GPU_ALLOW_MISSING names it (torch, cuda, gpus), which prints a SKIPPED line. Exits 1 when any
check fails."""

import ctypes as C
import os
import sys
import time

os.environ.setdefault("RCB_BACKEND", "cuda")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
TIMEOUT = 270  # both pairs of ranks together, within gpu-run.sh's 300 s
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

    def __init__(self, name, x, out):
        from rcb_ctypes import TraceFn, table

        self.x, self.out, self.traces = x, out, 0
        self.allocs = table([x, out])

        def trace(_user, stream):
            self.traces += 1
            try:
                # On the stream the library captures, as XLA's traced commands issue their work.
                with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
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

    def get(self, cmd, stream=None):
        """The command buffer of `cmd`, the cache's outcome and the host time of the get (ns); a
        capture is made on `stream` (default: the cache's)."""
        from rcb_ctypes import OUTCOMES, TRACE_HIT, FlattenReport, P, check, flattened, lib

        stream = stream or self.stream
        graph, outcome = P(), C.c_uint32()
        t0 = time.perf_counter_ns()
        status = lib.rcb_trace_cache_get_or_trace(self.tc, P(stream.cuda_stream), cmd.allocs, len(cmd.allocs), cmd.fn, None, C.byref(graph), C.byref(outcome))
        took = time.perf_counter_ns() - t0
        check(status, "rcb_trace_cache_get_or_trace")
        cb = self.cbs.get(graph.value)
        # A relocation rewrites the cached graph in place (same address): its earlier copy is stale.
        if cb is None or outcome.value != TRACE_HIT:
            if cb is not None:
                torch.cuda.synchronize()
                check(lib.rcb_cmdbuf_free(cb), "rcb_cmdbuf_free")
            report = FlattenReport()
            cb = flattened(graph.value, cmd.allocs, report, self.device)
            self.added.add("flattened" if report.flattened else f"a child node ({report.reason.decode(errors='replace')})")
            self.cbs[graph.value] = cb
        return cb, OUTCOMES.get(outcome.value, str(outcome.value)), took

    def launch(self, cb, stream=None):
        """Launches `cb` on `stream` (default: the cache's); the host time of the call (ns)."""
        from rcb_ctypes import P, check, lib

        stream = stream or self.stream
        t0 = time.perf_counter_ns()
        status = lib.rcb_cmdbuf_launch(cb, P(stream.cuda_stream))
        took = time.perf_counter_ns() - t0
        check(status, "rcb_cmdbuf_launch")
        return took

    def free(self):
        from rcb_ctypes import check, lib

        torch.cuda.synchronize()
        for cb in self.cbs.values():
            check(lib.rcb_cmdbuf_free(cb), "rcb_cmdbuf_free")
        self.cbs = {}
        check(lib.rcb_trace_cache_free(self.tc), "rcb_trace_cache_free")


def opaque_refusals():
    """How many captures the library has marked never to be relocated for an opaque kernel."""
    from rcb_ctypes import fallbacks

    return fallbacks(None).get("opaque_kernel", 0)


def allocations():
    """How many allocations PyTorch's caching allocator has made on this device so far."""
    return torch.cuda.memory_stats().get("allocation.all.allocated", 0)


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def integers(n, seed, low=-3, high=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (n,), generator=g).float().cuda()


def rank_main(rank, world, port, results, setting):
    import two_ranks

    os.environ.update(setting["env"])
    for name in setting["unset"]:
        os.environ.pop(name, None)
    os.environ["NCCL_DEBUG_FILE"] = f"{setting['logs']}/nccl.{rank}.log"
    two_ranks.serve(rank, world, port, results, lambda report: checks(rank, world, setting, report), "registration " + ("on" if setting["register"] else "off"))


def checks(rank, world, setting, report):
    registered = {}  # device address -> what it is, for reading NCCL's registration log
    for name in COLLECTIVES:
        divergent_decisions(name, rank, world, report, registered)
    for name in COLLECTIVES:
        pool_steps(name, rank, world, report, registered)
    bare_call(report)
    registrations(setting, report, registered)


def divergent_decisions(name, rank, world, report, registered):
    """Part 1: steps on which the ranks' cache decisions differ."""
    in_elems, out_elems = shapes(name, world)
    stream = torch.cuda.Stream()
    cache = Cache(rank, stream)
    made, commands = {}, {}

    def buffers(key):
        if key not in made:
            made[key] = (integers(in_elems, 100 * rank + len(made)), torch.empty(out_elems, device="cuda"))
            commands[key] = Command(name, *made[key])
            for role, t in zip(("input", "output"), made[key]):
                registered[t.data_ptr()] = f"{name} {role} {key}"
        return made[key]

    # An eager collective over buffers of their own, left running when a graph is launched.
    eager_x, eager_out = integers(in_elems, 100 * rank + 99), torch.empty(out_elems, device="cuda")
    eager_expected = eager(name, eager_x, out_elems)
    # Which buffers each rank uses on each step, the outcome each rank must see, and whether the
    # eager collective is still running when the graph is launched.
    steps = [
        ("both capture", ("A", "A"), ("traced", "traced"), False),
        ("both hit", ("A", "A"), ("hit", "hit"), False),
        ("both hit, launched while an eager collective runs", ("A", "A"), ("hit", "hit"), True),
        ("only rank 1 moves", ("A", "B"), ("hit", "traced"), False),
        ("only rank 0 moves", ("B", "B"), ("traced", "hit"), False),
        ("both back to the first buffers", ("A", "A"), ("hit", "hit"), False),
        ("both move, launched while an eager collective runs", ("C", "C"), ("traced", "traced"), True),
    ]
    captures, hits = [], []
    for what, keys, outcomes, overlap in steps:
        key = keys[rank]
        x, out = buffers(key)
        expected = eager(name, x, out_elems)
        cmd = commands[key]
        traces, opaque, allocated = cmd.traces, opaque_refusals(), allocations()
        cb, outcome, took = cache.get(cmd)
        traced, refused, allocated = cmd.traces - traces, opaque_refusals() - opaque, allocations() - allocated
        (hits if outcome == "hit" else captures).append(took)
        stale = [t for k, pair in made.items() if k != key for t in pair]
        for t in stale:
            t.fill_(POISON)
        out.fill_(float("nan"))
        eager_out.fill_(float("nan"))
        torch.cuda.synchronize()
        if overlap:
            # No host wait between the two: NCCL orders the graph's collective after the eager one.
            issue(name, eager_x, eager_out)
        cache.launch(cb)
        torch.cuda.synchronize()
        exact = torch.equal(out, expected)
        eager_exact = torch.equal(eager_out, eager_expected) if overlap else True
        untouched = all(bool((t == POISON).all().item()) for t in stale)
        want = outcomes[rank]
        # A hit issues nothing; a capture issues the collective once, allocates nothing, and is
        # marked never to be relocated (its kernel is opaque).
        right = (traced, refused, allocated) == ((0, 0, 0) if outcome == "hit" else (1, 1, 0))
        verdict = report.verdict
        verdict(
            exact and eager_exact and untouched and outcome == want and right,
            f"{name}, {what}: {outcome} (expected {want}); the collective issued {traced} time(s), {refused} opaque-kernel refusal(s), "
            f"{allocated} allocation(s) during the get; exact {exact}{f', the eager one exact {eager_exact}' if overlap else ''}, "
            f"{len(stale)} unused buffer(s) untouched {untouched}",
        )
    # A hit's host cost, without launching: the same key over and over.
    times = [cache.get(commands["A"])[2] for _ in range(2000)]
    report.figure(
        f"{name}: capture {sum(captures) / len(captures) / 1e6:.2f} ms (mean of {len(captures)}), hit {median(times) / 1e3:.2f} us "
        f"(median of {len(times)}, the ctypes call included), relocation: never (a collective's kernel is opaque, so new addresses "
        f"are captured); the graph went into its command buffer {', '.join(sorted(cache.added))}"
    )
    cache.free()


def retained_handle(address):
    """The physical allocation handle behind a device address (cuMemRetainAllocationHandle)."""
    cuda = C.CDLL("libcuda.so.1")
    h = C.c_uint64()
    rc = cuda.cuMemRetainAllocationHandle(C.byref(h), C.c_void_p(address))
    if rc != 0:
        raise RuntimeError(f"cuMemRetainAllocationHandle({address:#x}) returned {rc}")
    cuda.cuMemRelease(C.c_uint64(h.value))
    return h.value


def pool_steps(name, rank, world, report, registered):
    """Part 2: STEPS steps through a circular VMM pool, with and without the collective."""
    from rcb_ctypes import P, VmmCopy, VmmPoolConfig, VmmSlot, VMM_BACKING_VMM, check, lib

    in_elems, out_elems = shapes(name, world)
    # Steps alternate between two streams, so that only the pool's timeline keeps a slot's next
    # use after its previous one.
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    sizes = (C.c_uint64 * 2)(in_elems * 4, out_elems * 4)
    peers = (C.c_int32 * 1)(1 - rank)
    config = VmmPoolConfig(device=rank, backing=VMM_BACKING_VMM, num_slots=SLOTS, num_buffers=2, buffer_sizes=sizes, num_peers=1, peers=peers, timeout_ms=20000)
    pool = P()
    check(lib.rcb_vmm_pool_new(C.byref(config), C.byref(pool)), "rcb_vmm_pool_new")
    inputs = torch.randint(-3, 4, (STEPS, in_elems), generator=torch.Generator().manual_seed(7 + rank)).float().cuda()
    results = torch.full((STEPS, out_elems), float("nan"), device="cuda")
    # What every step must give, from eager collectives over all the steps' inputs at once.
    if name == "all_reduce":
        expected = eager("all_reduce", inputs.reshape(-1), STEPS * in_elems).reshape(STEPS, out_elems)
    elif name == "all_gather":
        gathered = eager("all_gather", inputs.reshape(-1), world * STEPS * in_elems).reshape(world, STEPS, in_elems)
        expected = gathered.permute(1, 0, 2).reshape(STEPS, out_elems)
    else:
        summed = eager("all_reduce", inputs.reshape(-1), STEPS * in_elems).reshape(STEPS, in_elems)
        expected = summed[:, rank * N:(rank + 1) * N].contiguous()
    cache = Cache(rank, streams[0])
    addresses, handles, outcomes, commands = {}, {}, {}, {}
    gets, launches = [], []
    remapped = []

    def run(with_collective):
        slot = VmmSlot()
        took = []
        for i in range(STEPS):
            stream = streams[i % 2]
            start = time.perf_counter_ns()
            check(lib.rcb_vmm_pool_acquire_on_stream(pool, P(stream.cuda_stream), C.byref(slot)), "rcb_vmm_pool_acquire_on_stream")
            x, out = slot.buffers[0], slot.buffers[1]
            if addresses.setdefault(slot.index, (x, out)) != (x, out):
                raise RuntimeError(f"slot {slot.index} came round at other addresses")
            copy_in = (VmmCopy * 1)(VmmCopy(x, inputs[i].data_ptr(), in_elems * 4))
            check(lib.rcb_vmm_pool_copy(pool, P(stream.cuda_stream), copy_in, 1), "rcb_vmm_pool_copy (in)")
            if with_collective:
                if slot.index not in commands:
                    commands[slot.index] = Command(name, wrap(x, in_elems), wrap(out, out_elems))
                cb, outcome, get_ns = cache.get(commands[slot.index], stream)
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                launches.append(cache.launch(cb, stream))
                if outcome == "hit":
                    gets.append(get_ns)
            copy_out = (VmmCopy * 1)(VmmCopy(results[i].data_ptr(), out, out_elems * 4))
            check(lib.rcb_vmm_pool_copy(pool, P(stream.cuda_stream), copy_out, 1), "rcb_vmm_pool_copy (out)")
            check(lib.rcb_vmm_pool_release(pool, C.byref(slot), P(stream.cuda_stream)), "rcb_vmm_pool_release")
            took.append(time.perf_counter_ns() - start)
            if with_collective:
                # The physical memory under each of the slot's addresses, every time it comes round.
                for a in (x, out):
                    now = retained_handle(a)
                    if handles.setdefault(a, now) != now:
                        remapped.append((i, a))
        for s in streams:
            s.synchronize()
        return median(took)

    torch.cuda.synchronize()
    run(False)  # every slot touched once, so that both timed loops start alike
    for pair in addresses.values():
        for role, a in zip(("input", "output"), pair):
            registered[a] = f"{name} pool slot {role}"
    results.fill_(float("nan"))
    torch.cuda.synchronize()
    with_ns = run(True)
    exact = torch.equal(results, expected)
    wrong = int((results != expected).any(dim=1).sum().item())
    verdict = report.verdict
    verdict(exact, f"{name}: {STEPS} steps through {len(addresses)} VMM pool slots on two alternating streams, outcomes {outcomes}; every step exact {exact} ({wrong} wrong)")
    traces = sum(c.traces for c in commands.values())
    verdict(outcomes.get("traced", 0) == SLOTS and outcomes.get("hit", 0) == STEPS - SLOTS and traces == SLOTS, f"{name}: one capture per slot, then hits only ({outcomes}; the collective issued {traces} time(s))")
    verdict(not remapped and len(handles) == 2 * SLOTS, f"{name}: each of the {len(handles)} slot buffers backed by the same physical allocation every time its slot came round, while the graphs using it lived ({len(remapped)} changes)")
    without_ns = run(False)
    report.figure(
        f"{name}: a pool step's host time {with_ns / 1e3:.1f} us with the collective, {without_ns / 1e3:.1f} us without it (medians of "
        f"{STEPS} steps each, Python included); of the collective's share, the cache hit {median(gets) / 1e3:.2f} us and the launch "
        f"{median(launches) / 1e3:.2f} us (medians, the ctypes calls included)"
    )
    cache.free()
    check(lib.rcb_vmm_pool_free(pool), "rcb_vmm_pool_free")


def bare_call(report):
    from rcb_ctypes import lib

    times = []
    for _ in range(2000):
        t0 = time.perf_counter_ns()
        lib.rcb_version()
        times.append(time.perf_counter_ns() - t0)
    report.figure(f"a bare ctypes call into the library (rcb_version): {median(times) / 1e3:.2f} us (median of {len(times)})")


def registrations(setting, report, registered):
    """What NCCL's log (NCCL_DEBUG_SUBSYS=REG) says it registered for graphs, by buffer."""
    import re

    with open(os.environ["NCCL_DEBUG_FILE"], errors="replace") as f:
        log = f.read()
    done = {int(a, 16) for a in re.findall(r"IPC register buffer (0x[0-9a-f]+)", log)}
    failed = {int(a, 16) for a in re.findall(r"failed to IPC register userbuff (0x[0-9a-f]+)", log)}
    what = lambda addresses: sorted({registered.get(a, "another buffer") for a in addresses})  # noqa: E731
    line = f"NCCL registered {len(done)} buffer(s) for graphs ({', '.join(what(done)) or 'none'}); failed for {len(failed)} ({', '.join(what(failed)) or 'none'})"
    if setting["register"]:
        # The captured out-of-place all-gather over PyTorch's memory must have been registered,
        # or this setting tested nothing about registration.
        report.verdict(any("all_gather" in w and "pool" not in w for w in what(done)), f"registration on: {line}")
    else:
        report.verdict(not done, f"registration off: {line}")


def pair(setting, deadline):
    """Runs both ranks under `setting`; True when both reported and passed."""
    import tempfile

    import two_ranks

    print(f"== {setting['label']}", flush=True)
    with tempfile.TemporaryDirectory() as logs:
        setting = dict(setting, logs=logs)
        return two_ranks.run(rank_main, (setting,), max(1, deadline - time.monotonic()), f"torch_collective_cache ({setting['label']})")


def main():
    from rcb_ctypes import lib

    cuda = C.CDLL("libcuda.so.1")
    driver = C.c_int()
    cuda.cuDriverGetVersion(C.byref(driver))
    commit = os.environ.get("RCB_COMMIT", "unknown")
    print(
        f"rocm_cmdbuf {lib.rcb_version().decode()} (commit {commit}), torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, CUDA driver API {driver.value}, "
        f"{torch.cuda.device_count()} GPU(s): {', '.join(torch.cuda.get_device_name(d) for d in range(torch.cuda.device_count()))}",
        flush=True,
    )
    if torch.cuda.device_count() < 2:
        ok = missing("torch_collective_cache", "gpus", "every collective", f"two GPUs needed, {torch.cuda.device_count()} seen")
        sys.exit(0 if ok else 1)
    # Registration needs the Simple protocol and, for memory from cudaMalloc (PyTorch's), NCCL's
    # legacy IPC path; both settings run alike but for NCCL_GRAPH_REGISTER.
    common = {"NCCL_PROTO": "Simple", "NCCL_LEGACY_CUDA_REGISTER": "1", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "REG"}
    settings = [
        {"label": "NCCL_GRAPH_REGISTER unset (registration on)", "register": True, "env": common, "unset": ["NCCL_GRAPH_REGISTER"]},
        {"label": "NCCL_GRAPH_REGISTER=0", "register": False, "env": dict(common, NCCL_GRAPH_REGISTER="0"), "unset": []},
    ]
    deadline = time.monotonic() + TIMEOUT
    passed = [pair(s, deadline) for s in settings]
    failed = not all(passed)
    print(f"torch_collective_cache: {'FAIL' if failed else 'all passed'} (registration on: {'passed' if passed[0] else 'FAILED'}, off: {'passed' if passed[1] else 'FAILED'})", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""NCCL collectives that PyTorch captured, flattened through the rocm_cmdbuf C ABI on two GPUs
(one process per GPU), then relocated: the library must follow a move exactly or refuse it, and
a refusal is answered by both ranks recording again (a collective needs every rank).

Runs on a machine with two GPUs only (ci/gpu-run.sh, when it sees two):
    RCB_LIBRARY=/path/librocm_cmdbuf.so RCB_BACKEND=cuda python3 torch_collectives.py
For each of an all-reduce (`y = x @ w; all_reduce(y); z = relu(y)`), an all-gather and a
reduce-scatter, each rank captures the collective, flattens the capture, launches it and compares
the output with the same computation run eagerly, bit for bit (the inputs are small integers in
float32 and TF32 is off, so every sum is exact). Then three moves, each checked the same way:
  both  both ranks move every buffer;
  rank0 only rank 0 moves its buffers;
  out   only the output moves, on both ranks.
A rank whose update is refused (needs_rerecord) tells the other through an eager all-reduce of a
flag; then both capture and flatten again over their current buffers. Before every launch the
buffers a rank no longer uses are poisoned, and after it they must still hold the poison. A hang
fails: the parent gives the ranks TIMEOUT seconds and kills them.
NCCL_NVLS_ENABLE=0 (no multicast objects). A missing dependency, or fewer than two GPUs, fails the
run unless RCB_GPU_ALLOW_MISSING names it (torch, cuda, gpus), which prints a SKIPPED line.
Exits 1 when any check fails."""

import ctypes as C
import os
import sys

os.environ.setdefault("RCB_BACKEND", "cuda")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
TIMEOUT = 270  # within gpu-run.sh's 300 s
POISON = -12345.0
N = 256  # rows of x; every collective's tensors are small multiples of this

from gpu_deps import missing, torch_with_cuda  # noqa: E402

torch = torch_with_cuda("torch_collectives")


def integers(shape, generator, low=-3, high=4):
    return torch.randint(low, high, shape, generator=generator, device="cpu").float().cuda()


class Collective:
    """One collective: its buffers (inputs first, output last; nothing else is read or written
    outside the capture's own memory pool), and the computation over them."""

    def __init__(self, name, rank, world):
        self.name, self.rank, self.world = name, rank, world
        g = torch.Generator().manual_seed(1000 + rank)
        if name == "all_reduce":
            self.buffers = [integers((N, 64), g), integers((64, 64), g), torch.empty((N, 64), device="cuda")]
        elif name == "all_gather":
            self.buffers = [integers((N, 64), g), torch.empty((world * N, 64), device="cuda")]
        else:  # reduce_scatter
            self.buffers = [integers((world * N, 64), g), torch.empty((N, 64), device="cuda")]

    def compute(self, buffers):
        import torch.distributed as dist

        if self.name == "all_reduce":
            x, w, z = buffers
            y = x @ w
            dist.all_reduce(y)
            z.copy_(torch.relu(y))
        elif self.name == "all_gather":
            x, out = buffers
            dist.all_gather_into_tensor(out, x * 2)
        else:
            x, out = buffers
            dist.reduce_scatter_tensor(out, x * 3)

    def eager(self, buffers):
        """The output computed eagerly over copies of `buffers`' inputs (every rank calls it)."""
        copies = [b.clone() for b in buffers]
        self.compute(copies)
        torch.cuda.synchronize()
        return copies[-1]


def capture(coll, buffers):
    """A CUDA graph of `coll` over `buffers`, after a warm-up on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            coll.compute([b.clone() for b in buffers])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        coll.compute(buffers)
    return g


class Recorded:
    """A capture of `coll` over `buffers`, flattened into a library command buffer."""

    def __init__(self, coll, buffers):
        from rcb_ctypes import FlattenReport, flattened, table

        self.buffers = list(buffers)
        self.graph = capture(coll, self.buffers)
        self.report = FlattenReport()
        self.cb = flattened(self.graph.raw_cuda_graph(), table(self.buffers), self.report)

    def describe(self):
        r = self.report
        how = "flattened" if r.flattened else f"fallback ({r.reason.decode(errors='replace')})"
        return f"{r.nodes} nodes, {how}, {r.sites} sites"

    def launch(self):
        from rcb_ctypes import P, check, lib

        stream = torch.cuda.current_stream()
        check(lib.rcb_cmdbuf_launch(self.cb, P(stream.cuda_stream)), "rcb_cmdbuf_launch")

    def free(self):
        from rcb_ctypes import lib

        torch.cuda.synchronize()
        lib.rcb_cmdbuf_free(self.cb)
        self.cb = None
        del self.graph


def flag_from_any(value):
    """1 on every rank when `value` is 1 on any rank (an eager all-reduce)."""
    import torch.distributed as dist

    t = torch.tensor([float(value)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def rank_main(rank, world, port, results):
    import two_ranks

    two_ranks.serve(rank, world, port, results, lambda report: collectives(rank, world, report))


def collectives(rank, world, report):
    """The three collectives, each flattened, launched and moved three ways."""
    from rcb_ctypes import UpdateReport, check, lib, table

    torch.backends.cuda.matmul.allow_tf32 = False
    verdict = report.verdict

    for name in ["all_reduce", "all_gather", "reduce_scatter"]:
        coll = Collective(name, rank, world)
        buffers = coll.buffers
        expected = coll.eager(buffers)
        rec = Recorded(coll, buffers)
        buffers[-1].fill_(float("nan"))
        rec.launch()
        torch.cuda.synchronize()
        verdict(torch.equal(buffers[-1], expected), f"{name}: {rec.describe()}; first launch exact")
        for case in ["both", "rank0", "out"]:
            moves = {"both": True, "rank0": rank == 0, "out": True}[case]
            old = buffers
            if moves:
                new = [b.clone() for b in old[:-1]] + [torch.empty_like(old[-1])] if case != "out" else old[:-1] + [torch.empty_like(old[-1])]
            else:
                new = old
            expected = coll.eager(new)
            upd = UpdateReport()
            check(lib.rcb_cmdbuf_update_allocations(rec.cb, table(new), len(new), C.byref(upd)), "rcb_cmdbuf_update_allocations")
            rerecord = flag_from_any(upd.needs_rerecord)
            how = "refused here" if upd.needs_rerecord else ("followed" if moves else "nothing moved here")
            if rerecord:
                rec.free()
                rec = Recorded(coll, new)
                how += f"; both ranks recorded again ({rec.describe()})"
            stale = [b for b in old if all(b.data_ptr() != n.data_ptr() for n in new)]
            for b in stale:
                b.fill_(POISON)
            new[-1].fill_(float("nan"))
            torch.cuda.synchronize()
            rec.launch()
            torch.cuda.synchronize()
            untouched = all(bool((b == POISON).all().item()) for b in stale)
            exact = torch.equal(new[-1], expected)
            verdict(exact and untouched, f"{name}, move {case}: {how}; exact {exact}, {len(stale)} old buffer(s) untouched {untouched}")
            buffers = new
        rec.free()


def main():
    import two_ranks

    print(f"torch {torch.__version__}, {torch.cuda.device_count()} GPU(s)", flush=True)
    if torch.cuda.device_count() < 2:
        ok = missing("torch_collectives", "gpus", "every collective", f"two GPUs needed, {torch.cuda.device_count()} seen")
        sys.exit(0 if ok else 1)
    passed = two_ranks.run(rank_main, (), TIMEOUT, "torch_collectives")
    print(f"torch_collectives: {'all passed' if passed else 'FAIL'}", flush=True)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()

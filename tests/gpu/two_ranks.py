"""Two ranks, one spawned process per GPU, for the collective scripts in this directory
(torch_collectives.py, torch_collective_cache.py).

In a rank: `join(rank, world, port)` sets its GPU and joins the NCCL process group; a `Report`
collects its PASS/FAIL lines and figures and puts them on the results queue.

`run(target, args, timeout, what)` spawns `target(rank, 2, port, results, *args)` for ranks 0
and 1 (`port`: a free local TCP port for `init_process_group`; `results`: a queue on which the
rank puts `(rank, ok, lines)` once), prints each rank's lines as they come, and returns True
when both ranks reported `ok` and exited 0. A rank that has not reported `timeout` seconds after
the start is a hang: a FAIL line names `what`, and both processes are killed."""

import queue
import socket
import time


def join(rank, world, port):
    """Makes GPU `rank` this process's device and joins the NCCL process group of `world` ranks at
    the local `port` (eager collectives time out after 120 s)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=120))


class Report:
    """What one rank reports: a PASS or FAIL line per check, and figures."""

    def __init__(self, rank):
        self.rank, self.ok, self.lines = rank, True, []

    def verdict(self, good, line):
        self.ok = self.ok and bool(good)
        self.lines.append(("PASS " if good else "FAIL ") + f"rank {self.rank} " + line)

    def figure(self, line):
        self.lines.append(f"figure rank {self.rank} {line}")

    def put(self, results):
        results.put((self.rank, self.ok, self.lines))


def run(target, args, timeout, what):
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(rank, 2, port, results, *args)) for rank in range(2)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.monotonic() + timeout
    try:
        for _ in procs:
            rank, ok, lines = results.get(timeout=max(1, deadline - time.monotonic()))
            got[rank] = ok
            for line in lines:
                print(line, flush=True)
    except queue.Empty:
        print(f"FAIL {what}: a rank gave no result within {timeout} s (a hang)", flush=True)
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join(timeout=10)
    return len(got) == 2 and all(got.values()) and all(p.exitcode == 0 for p in procs)

"""Two ranks, one spawned process per GPU, for the collective scripts in this directory
(torch_collectives.py, torch_collective_cache.py).

`run(target, args, timeout, what)` spawns `target(rank, 2, port, results, *args)` for ranks 0
and 1 (`port`: a free local TCP port for `init_process_group`; `results`: a queue on which the
rank puts its verdict once, with `Report.put`) and returns True when both ranks passed and exited
0. A rank that has not reported within `timeout` seconds is a hang: a FAIL line names `what`, and
both processes are killed; the call returns within `timeout` seconds and a few more.

In a rank, `serve(rank, world, port, results, body)` sets its GPU, joins the NCCL process group
and runs `body(report)`, whose `Report` (its figures tagged with `label`) prints the PASS/FAIL lines and figures as they are made
(so that a hang shows how far the rank got); the verdict goes on the results queue."""

import queue
import socket
import time


def serve(rank, world, port, results, body, label=""):
    """Makes GPU `rank` this process's device, joins the NCCL process group of `world` ranks at
    the local `port` (eager collectives time out after 120 s) and runs `body(report)`. When it
    raises, the rank reports a failure and exits at once: the other rank may be waiting in a
    collective, which a barrier or a destroy here would join."""
    import os
    import sys
    import traceback
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    report = Report(rank, label)
    try:
        body(report)
    except Exception as e:
        report.verdict(False, f"raised {type(e).__name__}: {e}\n{traceback.format_exc()}")
        report.put(results)
        sys.stdout.flush()
        os._exit(1)
    report.put(results)
    dist.barrier()
    dist.destroy_process_group()


class Report:
    """What one rank reports: a PASS or FAIL line per check, and figures (tagged with `label`, the
    run's setting), printed at once."""

    def __init__(self, rank, label=""):
        self.rank, self.ok, self.label = rank, True, label

    def verdict(self, good, line):
        self.ok = self.ok and bool(good)
        self.print(("PASS " if good else "FAIL ") + f"rank {self.rank} " + line)

    def figure(self, line):
        self.print(f"figure rank {self.rank}{f' ({self.label})' if self.label else ''} {line}")

    @staticmethod
    def print(line):
        # One write per line: both ranks print to the same pipe, and print() writes the line and
        # its newline separately, which lets the other rank's line in between.
        import sys

        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def put(self, results):
        results.put((self.rank, self.ok))


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
            rank, ok = results.get(timeout=max(0.1, deadline - time.monotonic()))
            got[rank] = ok
    except queue.Empty:
        print(f"FAIL {what}: a rank gave no result within {timeout:.0f} s (a hang)", flush=True)
    for p in procs:
        p.join(timeout=max(0.1, min(10, deadline + 10 - time.monotonic())))
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    return len(got) == 2 and all(got.values()) and all(p.exitcode == 0 for p in procs)

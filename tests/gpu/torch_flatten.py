#!/usr/bin/env python3
"""Flattens graphs that PyTorch captured (MLP, 2-layer TransformerEncoder, ResNet-18) through the
rocm_cmdbuf C ABI, replays them, relocates them to new input/output tensors with
rcb_cmdbuf_update_allocations, and compares both replays with eager execution.

Runs on the GPU machine only (ci/gpu-run.sh, when python3 with torch is present):
    RCB_LIBRARY=/path/librocm_cmdbuf.so RCB_BACKEND=cuda python3 torch_flatten.py
Exits 1 when a model's replay differs from eager execution (or fails)."""

import ctypes as C
import os
import sys

os.environ.setdefault("RCB_BACKEND", "cuda")
import torch  # noqa: E402
from rcb_ctypes import FlattenReport, P, UpdateReport, check, flattened, lib, table  # noqa: E402
from torch_graphs import warmed  # noqa: E402

TOL = 1e-3
SENTINEL = 12345.0


def models():
    yield "mlp", lambda: torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    ), (64, 512)
    yield "transformer", lambda: torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True), num_layers=2, enable_nested_tensor=False
    ), (8, 128, 256)
    try:
        import torchvision

        yield "resnet18", lambda: torchvision.models.resnet18(weights=None), (8, 3, 224, 224)
    except ImportError as e:
        print(f"resnet18: SKIPPED (torchvision unavailable: {e})")


def run(name, make, shape):
    model, static_in, static_out = warmed(make, shape)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.no_grad(), torch.cuda.graph(g):
        static_out.copy_(model(static_in))
    raw = g.raw_cuda_graph()

    report = FlattenReport()
    cb = flattened(raw, table([static_in, static_out]), report)
    try:
        stream = torch.cuda.current_stream()
        static_out.zero_()
        check(lib.rcb_cmdbuf_launch(cb, P(stream.cuda_stream)), "rcb_cmdbuf_launch")
        stream.synchronize()
        with torch.no_grad():
            eager = model(static_in)
        diff = (static_out - eager).abs().max().item()
        how = "flattened" if report.flattened else f"fallback ({report.reason.decode(errors='replace')})"
        line = f"{name}: nodes {report.nodes}, {how}, sites {report.sites}, max abs diff {diff:.3g}"
        ok = diff <= TOL
        if report.flattened:
            new_in = torch.randn(shape, device="cuda")
            new_out = torch.empty_like(static_out)
            new_out.fill_(float("nan"))
            static_out.fill_(SENTINEL)
            upd = UpdateReport()
            check(lib.rcb_cmdbuf_update_allocations(cb, table([new_in, new_out]), 2, C.byref(upd)), "rcb_cmdbuf_update_allocations")
            check(lib.rcb_cmdbuf_launch(cb, P(stream.cuda_stream)), "rcb_cmdbuf_launch")
            stream.synchronize()
            with torch.no_grad():
                eager2 = model(new_in)
            diff2 = (new_out - eager2).abs().max().item()
            # Nothing may still write to the old output.
            stale = (static_out != SENTINEL).sum().item()
            line += f"; relocated ({upd.patched_sites} sites, {upd.updated_nodes} nodes, needs_rerecord {upd.needs_rerecord}): max abs diff {diff2:.3g}, old output elements written {stale}"
            ok = ok and diff2 <= TOL and upd.needs_rerecord == 0 and stale == 0
        print(("PASS " if ok else "FAIL ") + line, flush=True)
        return ok
    finally:
        lib.rcb_cmdbuf_free(cb)
        del g


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    failed = False
    for name, make, shape in models():
        try:
            failed |= not run(name, make, shape)
        except Exception as e:  # report every model, then fail
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

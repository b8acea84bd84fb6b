#!/usr/bin/env python3
"""Flattens graphs that PyTorch captured (MLP, 2-layer TransformerEncoder, ResNet-18) through the
rocm_cmdbuf C ABI, replays them, relocates them to new input/output tensors with
rcb_cmdbuf_update_allocations, and compares both replays with eager execution.

Runs on the GPU machine only (ci/gpu-run.sh):
    RCB_LIBRARY=/path/librocm_cmdbuf.so RCB_BACKEND=cuda python3 torch_flatten.py
Every model in MUST_FLATTEN must flatten (all three did on the H200) and follow the relocation
exactly, writing nothing to its old output. A model that falls back to a cloned child is still
relocated: the library must either refuse the move (needs_rerecord, and the next launch still
writes the old output, the new one untouched) or follow it exactly. Where the input and the
output lie end to end, they move together, keeping their layout (see `relocated`).
A missing dependency fails the run unless RCB_GPU_ALLOW_MISSING names it (comma-separated), which
prints a SKIPPED line instead: torch that cannot be imported or was built without CUDA (torch), a
CUDA build of torch that sees no device (cuda; gpu_deps.py says which), torchvision (torchvision).
Exits 1 when any model fails."""

import ctypes as C
import os
import sys

os.environ.setdefault("RCB_BACKEND", "cuda")
MUST_FLATTEN = {"mlp", "transformer", "resnet18"}

from gpu_deps import missing, torch_with_cuda  # noqa: E402

torch = torch_with_cuda("torch_flatten")
from rcb_ctypes import FlattenReport, P, UpdateReport, check, fallbacks, flattened, lib, new_fallbacks, table  # noqa: E402
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
    except ImportError as e:
        yield "resnet18", e, None
        return
    yield "resnet18", lambda: torchvision.models.resnet18(weights=None), (8, 3, 224, 224)


def relocated(static_in, static_out, shape):
    """A new random input and a new output of the same shapes. Where the old two lie end to end
    (the caching allocator packs tensors so), an address at the boundary found by value among the
    graph's kernel arguments is ambiguous to the library (the end of one, the base of the other),
    and a move of the two by different deltas is refused (needs_rerecord), so they then move as one
    block: one new buffer, each at its old offset in it."""
    new_in = torch.randn(shape, device="cuda")
    (a, b) = sorted([(static_in.data_ptr(), static_in), (static_out.data_ptr(), static_out)], key=lambda r: r[0])
    if a[0] + a[1].nbytes < b[0]:
        return new_in, torch.empty_like(static_out)
    start = a[0]
    block = torch.empty(max(a[0] + a[1].nbytes, b[0] + b[1].nbytes) - start, dtype=torch.uint8, device="cuda")

    def at(t):
        offset = t.data_ptr() - start
        return block[offset : offset + t.nbytes].view(t.dtype).view(t.shape)

    placed_in = at(static_in)
    placed_in.copy_(new_in)
    return placed_in, at(static_out)


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
        if not report.flattened and name in MUST_FLATTEN:
            line += "; MUST flatten"
            ok = False
        # Relocation, flattened or not: followed exactly, or refused with nothing changed.
        new_in, new_out = relocated(static_in, static_out, shape)
        if new_in.untyped_storage().data_ptr() == new_out.untyped_storage().data_ptr():
            line += "; input and output end to end, moved as one block"
        new_out.fill_(float("nan"))
        static_out.fill_(SENTINEL)
        upd, before = UpdateReport(), fallbacks(cb)
        check(lib.rcb_cmdbuf_update_allocations(cb, table([new_in, new_out]), 2, C.byref(upd)), "rcb_cmdbuf_update_allocations")
        check(lib.rcb_cmdbuf_launch(cb, P(stream.cuda_stream)), "rcb_cmdbuf_launch")
        stream.synchronize()
        with torch.no_grad():
            eager2 = model(new_in)
        if upd.needs_rerecord:
            # Refused: the command buffer still reads the old input and writes the old output.
            old_diff = (static_out - eager).abs().max().item()
            untouched = new_out.isnan().all().item()
            line += f"; relocation refused ({new_fallbacks(cb, before)}): old output max abs diff {old_diff:.3g}, new output untouched {untouched}"
            ok = ok and not report.flattened and old_diff <= TOL and untouched
            if report.flattened:
                line += " (a flattened graph must follow the move)"
        else:
            diff2 = (new_out - eager2).abs().max().item()
            # Nothing may still write to the old output.
            stale = (static_out != SENTINEL).sum().item()
            line += f"; relocated ({upd.patched_sites} sites, {upd.updated_nodes} nodes): max abs diff {diff2:.3g}, old output elements written {stale}"
            ok = ok and diff2 <= TOL and stale == 0
        print(("PASS " if ok else "FAIL ") + line, flush=True)
        return ok
    finally:
        lib.rcb_cmdbuf_free(cb)
        del g


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    failed = False
    ran = 0
    for name, make, shape in models():
        if shape is None:  # make is the import error
            failed |= not missing("torch_flatten", "torchvision", name, f"torchvision cannot be imported: {make}")
            continue
        ran += 1
        try:
            failed |= not run(name, make, shape)
        except Exception as e:  # report every model, then fail
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            failed = True
    print(f"torch_flatten: {ran} model(s) ran, {'FAIL' if failed else 'all passed'}", flush=True)
    sys.exit(1 if failed or ran == 0 else 0)


if __name__ == "__main__":
    main()

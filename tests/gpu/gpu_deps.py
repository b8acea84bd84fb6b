"""What the PyTorch scripts in this directory (torch_flatten.py, real_graphs.py) need besides the
library: torch able to use a CUDA device. A missing dependency fails the script unless
RCB_GPU_ALLOW_MISSING (comma-separated) names it; then the script prints a SKIPPED line and
exits 0. The dependency is named for what is actually missing:
  torch  torch cannot be imported, or it was built without CUDA (torch.version.cuda is None);
  cuda   torch was built for CUDA but sees no usable device (no GPU, no driver, a driver too old).

Run as a script (ci/gpu-run.sh's probe), it prints `ok` when torch can use CUDA, else
`<dependency>: <what is missing>`, and exits 0 either way."""

import os
import sys

ALLOWED_MISSING = set(filter(None, os.environ.get("RCB_GPU_ALLOW_MISSING", "").split(",")))


def missing(script, dependency, what, reason):
    """A missing dependency of `script`'s `what`: a SKIPPED line when allowed (True), else a FAIL
    line (False)."""
    if dependency in ALLOWED_MISSING:
        print(f"SKIPPED {script}::{what}: every check ({reason}; RCB_GPU_ALLOW_MISSING={dependency})", flush=True)
        return True
    print(f"FAIL {what}: {reason} (set RCB_GPU_ALLOW_MISSING={dependency} to skip it)", flush=True)
    return False


def probe():
    """`(torch, None)` when torch imports and can use CUDA, else `(None, (dependency, reason))`."""
    try:
        import torch
    except ImportError as e:
        return None, ("torch", f"torch cannot be imported: {e}")
    if torch.version.cuda is None:
        return None, ("torch", f"torch {torch.__version__} is imported, but it was built without CUDA (torch.version.cuda is None)")
    try:
        torch.cuda.init()
        count = torch.cuda.device_count()
    except Exception as e:  # torch says why CUDA is unusable only by raising
        return None, ("cuda", f"torch {torch.__version__} (CUDA {torch.version.cuda}) is imported, but CUDA is not available to it: {type(e).__name__}: {e}")
    if count == 0:
        return None, ("cuda", f"torch {torch.__version__} (CUDA {torch.version.cuda}) is imported, but it sees no CUDA device")
    return torch, None


def torch_with_cuda(script):
    """torch, imported and able to use CUDA; otherwise `script` ends here: a SKIPPED line and exit
    0 when RCB_GPU_ALLOW_MISSING names what is missing, else a FAIL line and exit 1."""
    torch, why = probe()
    if torch is None:
        sys.exit(0 if missing(script, why[0], "all", why[1]) else 1)
    return torch


if __name__ == "__main__":
    _, why = probe()
    print("ok" if why is None else f"{why[0]}: {why[1]}")

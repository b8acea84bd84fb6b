#!/usr/bin/env bash
# Runs ON the GPU machine, from the repository root, what ci/gpu.sh staged in .gpu/:
#   1. compiles .gpu/kernels.cu to PTX with nvcc (and says whether it matches the committed PTX);
#   2. runs every staged test binary with RCB_BACKEND=cuda;
#   3. runs rcb-demo and the tests/xla_flow programs (the patched XLA's call sequences) if staged;
#   4. runs tests/gpu/torch_flatten.py when python3 with torch is present (PyTorch-captured graphs
#      flattened and relocated through the C ABI);
#   5. runs tests/gpu/real_graphs.py under the same condition (the benchmark on PyTorch-captured
#      graphs; its tables go to real_graphs.md);
#   6. runs rcb-bench if staged (with cuBLAS on the library path when the machine has it); its
#      `budget` scenario measures device memory over 100 000 in-place updates and the amortised
#      cost of the update budget.
# The device tool brings back at most 8 files from $OUT (else .gpu/out is used): summary.log,
# rcb-bench.md, real_graphs.md, before.md (when ci/gpu.sh staged a --before build), and logs.tar.gz
# with every per-binary log and the compiled PTX. Exits non-zero
# when a test binary, the demonstration, the torch check or real_graphs.py (a wrong result) fails.
set -uo pipefail

stage=.gpu
out=${OUT:-$stage/out}
logs=$(mktemp -d)/logs
mkdir -p "$out" "$logs"
exec > >(tee "$out/summary.log") 2>&1
trap 'tar -czf "$out/logs.tar.gz" -C "$(dirname "$logs")" logs' EXIT

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
ptx=$stage/kernels.ptx
if command -v nvcc >/dev/null; then
    nvcc --version | tail -1
    if nvcc -ptx -arch=sm_90 -o "$logs/kernels.ptx" "$stage/kernels.cu"; then
        if [ ! -f "$ptx" ]; then
            ptx=$logs/kernels.ptx
            echo "ptx: no committed PTX staged; using the one just compiled"
        elif cmp -s "$ptx" "$logs/kernels.ptx"; then
            echo "ptx: the committed tests/gpu/kernels.ptx matches nvcc's output"
        else
            echo "ptx: the committed tests/gpu/kernels.ptx DIFFERS from nvcc's output (see logs/kernels.ptx)"
        fi
    fi
fi
[ -f "$ptx" ] || { echo "no PTX for the test kernels"; exit 1; }

export RCB_BACKEND=cuda RCB_TEST_PTX="$(realpath "$ptx")" RUST_BACKTRACE=1
failed=0
for bin in "$stage"/tests/*; do
    name=$(basename "$bin")
    timeout 300 "$bin" --show-output > "$logs/$name.log" 2>&1
    rc=$?
    result=$(grep -h '^test result:' "$logs/$name.log" | tail -1)
    skipped=$(grep -c 'SKIPPED' "$logs/$name.log")
    echo "$name: rc=$rc ${result:-no result line} (SKIPPED messages: $skipped)"
    # Panics inside passing tests (tests of the panic boundary) are expected; show them on failure only.
    if [ $rc -ne 0 ]; then
        grep -h -E '^test .* FAILED$|panicked at' "$logs/$name.log" | sed 's/^/    /'
        failed=1
    fi
done

if [ -x "$stage/rcb-demo" ]; then
    "$stage/rcb-demo" || failed=1
fi
for flow in "$stage"/xla_flow-*; do
    [ -x "$flow" ] || continue
    name=$(basename "$flow")
    timeout 300 "$flow" > "$logs/$name.log" 2>&1
    rc=$?
    echo "$name: rc=$rc"
    sed 's/^/    /' "$logs/$name.log" | tail -12
    [ $rc -eq 0 ] || failed=1
done
if [ -f "$stage/torch_flatten.py" ] && python3 -c 'import torch' 2>/dev/null; then
    RCB_LIBRARY="$(realpath "$stage/librocm_cmdbuf.so")" timeout 300 python3 "$stage/torch_flatten.py" > "$logs/torch_flatten.log" 2>&1
    rc=$?
    echo "torch_flatten: rc=$rc"
    grep -h -E '^(PASS|FAIL|torch|resnet18: SKIPPED)' "$logs/torch_flatten.log" | sed 's/^/    /'
    [ $rc -eq 0 ] || { tail -5 "$logs/torch_flatten.log" | sed 's/^/    /'; failed=1; }
else
    echo "torch_flatten: skipped (no python3 with torch)"
fi
if [ -f "$stage/real_graphs.py" ] && python3 -c 'import torch' 2>/dev/null; then
    RCB_LIBRARY="$(realpath "$stage/librocm_cmdbuf.so")" RCB_TIMER="$(realpath "$stage/libreal_graphs_timer.so")" \
        timeout 240 python3 "$stage/real_graphs.py" > "$out/real_graphs.md" 2> "$logs/real_graphs.log"
    rc=$?
    echo "real_graphs: rc=$rc (tables in real_graphs.md)"
    sed 's/^/    /' "$logs/real_graphs.log" | tail -12
    [ $rc -eq 0 ] || failed=1
    cat "$out/real_graphs.md"
else
    echo "real_graphs: skipped (no python3 with torch)"
fi

if [ -x "$stage/rcb-bench" ]; then
    # cuBLAS for the flatten scenario's GEMM rows: the CUDA toolkit's, else PyTorch's wheel.
    cublas=$( { ls /usr/local/cuda/lib64/libcublas.so*
        python3 -c 'import glob, site; [print(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/**/libcublas.so*", recursive=True)]'
    } 2>/dev/null | head -1)
    [ -z "$cublas" ] || export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    timeout 300 "$stage/rcb-bench" > "$out/rcb-bench.md" 2>&1
    echo "rcb-bench: rc=$? (output in rcb-bench.md)"
    cat "$out/rcb-bench.md"
fi

# Before and after in the same run (ci/gpu.sh --before REV): the update and stream scenarios and
# the real graphs again with the library of REV.
if [ -d "$stage/before" ]; then
    {
        echo "# before: commit $(cat "$stage/before/commit")"
        timeout 200 "$stage/before/rcb-bench" update streams 2>&1
        if python3 -c 'import torch' 2>/dev/null; then
            RCB_LIBRARY="$(realpath "$stage/before/librocm_cmdbuf.so")" RCB_TIMER="$(realpath "$stage/libreal_graphs_timer.so")" \
                timeout 240 python3 "$stage/real_graphs.py" 2>&1
        fi
    } > "$out/before.md"
    echo "before: rc=$? (output in before.md)"
fi
exit $failed

#!/usr/bin/env bash
# Runs ON the GPU machine, from the repository root, what ci/gpu.sh staged in .gpu/:
#   1. compiles .gpu/kernels.cu to PTX with nvcc (and says whether it matches the committed PTX);
#   2. runs every staged test binary with RCB_BACKEND=cuda;
#   3. runs rcb-bench if staged.
# Logs go to $OUT (the device tool brings that folder back), else .gpu/out. Exits non-zero when
# a test binary fails.
set -uo pipefail

stage=.gpu
out=${OUT:-$stage/out}
mkdir -p "$out"
exec > >(tee "$out/summary.log") 2>&1

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
ptx=$stage/kernels.ptx
if command -v nvcc >/dev/null; then
    nvcc --version | tail -1
    if nvcc -ptx -arch=sm_90 -o "$out/kernels.ptx" "$stage/kernels.cu"; then
        if [ ! -f "$ptx" ]; then
            ptx=$out/kernels.ptx
            echo "ptx: no committed PTX staged; using the one just compiled"
        elif cmp -s "$ptx" "$out/kernels.ptx"; then
            echo "ptx: the committed tests/gpu/kernels.ptx matches nvcc's output"
        else
            echo "ptx: the committed tests/gpu/kernels.ptx DIFFERS from nvcc's output (see $out/kernels.ptx)"
        fi
    fi
fi
[ -f "$ptx" ] || { echo "no PTX for the test kernels"; exit 1; }

export RCB_BACKEND=cuda RCB_TEST_PTX="$(realpath "$ptx")" RUST_BACKTRACE=1
failed=0
for bin in "$stage"/tests/*; do
    name=$(basename "$bin")
    timeout 300 "$bin" --show-output > "$out/$name.log" 2>&1
    rc=$?
    result=$(grep -h '^test result:' "$out/$name.log" | tail -1)
    skipped=$(grep -c 'SKIPPED' "$out/$name.log")
    echo "$name: rc=$rc ${result:-no result line} (SKIPPED messages: $skipped)"
    # Panics inside passing tests (tests of the panic boundary) are expected; show them on failure only.
    if [ $rc -ne 0 ]; then
        grep -h -E '^test .* FAILED$|panicked at' "$out/$name.log" | sed 's/^/    /'
        failed=1
    fi
done

if [ -x "$stage/rcb-bench" ]; then
    timeout 300 "$stage/rcb-bench" > "$out/rcb-bench.md" 2>&1
    echo "rcb-bench: rc=$? (output in rcb-bench.md)"
    cat "$out/rcb-bench.md"
fi
exit $failed

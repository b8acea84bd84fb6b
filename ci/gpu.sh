#!/usr/bin/env bash
# Prepares a GPU run: builds the release test binaries of this crate, rcb-bench and the library HERE (the GPU
# machine has no Rust toolchain), stages them with the test kernels and ci/gpu-run.sh into
# .gpu/ of the repository root that the device tool sends, and prints the one command to run.
#
#   ci/gpu.sh [REPO_ROOT]     REPO_ROOT: the checkout the device tool carries (default: this one)
#
# Every test binary Cargo builds for this crate is staged, so later features' tests run too.
set -euo pipefail

here=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
dest_root=$(cd "${1:-$here}" && pwd)
stage="$dest_root/.gpu"

cd "$here"
cargo build --release --bin rcb-bench --bin rcb-demo --lib
mapfile -t tests < <(
    cargo test --release -p rocm_cmdbuf --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        t = m["target"]
        name = t["name"] if t["kind"] == ["test"] else "unit-" + t["name"]
        print(name + "\t" + m["executable"])
')
[ ${#tests[@]} -gt 0 ] || { echo "ci/gpu.sh: cargo built no test binaries" >&2; exit 1; }

rm -rf "$stage"
mkdir -p "$stage/tests"
for entry in "${tests[@]}"; do
    name=${entry%%$'\t'*}
    exe=${entry#*$'\t'}
    # Debug info is for local debugging only; the carried tree is limited to 64 MiB.
    objcopy --strip-debug "$exe" "$stage/tests/$name"
done
for tool in rcb-bench rcb-demo; do objcopy --strip-debug "target/release/$tool" "$stage/$tool"; done
# The C library itself, for tests/gpu/torch_flatten.py and real_graphs.py (ctypes, RCB_LIBRARY).
objcopy --strip-debug target/release/librocm_cmdbuf.so "$stage/librocm_cmdbuf.so"
cp tests/gpu/kernels.cu tests/gpu/rcb_ctypes.py tests/gpu/torch_flatten.py tests/gpu/real_graphs.py ci/gpu-run.sh "$stage/"
# The timing loops of tests/gpu/real_graphs.py (no CUDA header needed: it is given the functions).
cc -O2 -Wall -shared -fPIC -o "$stage/libreal_graphs_timer.so" tests/gpu/real_graphs_timer.c
# The replay of the patched XLA's calls, built here against the staged library, which it loads
# under its SONAME from its own directory (a copy: the device tool carries plain files).
cp "$stage/librocm_cmdbuf.so" "$stage/librocm_cmdbuf.so.0"
bash tests/xla_flow/run.sh --build-only "$stage" "$stage"
if [ -f tests/gpu/kernels.ptx ]; then cp tests/gpu/kernels.ptx "$stage/"; fi

# Never commit the staging area into that checkout.
exclude=$(git -C "$dest_root" rev-parse --git-path info/exclude)
case $exclude in /*) ;; *) exclude="$dest_root/$exclude" ;; esac
if ! git -C "$dest_root" check-ignore -q .gpu/rcb-bench; then
    mkdir -p "$(dirname "$exclude")"
    echo "/.gpu/" >> "$exclude"
fi

echo "staged in $stage ($(du -sh "$stage" | cut -f1)):"
ls -1 "$stage" "$stage/tests" | sed 's/^/  /'
echo
echo "run on the GPU machine (device tool, repository root $dest_root):"
echo "  command: bash .gpu/gpu-run.sh    carry: [\".gpu\"]"

#!/usr/bin/env bash
# Prepares a GPU run: builds the release test binaries of this crate, rcb-bench, rcb-demo,
# rcb-doctor and the library HERE (the GPU machine has no Rust toolchain), stages them with the test
# kernels and ci/gpu-run.sh into .gpu/ of the repository root (copy the repository with .gpu/ to
# the GPU machine), and prints the one command to run there.
#
#   ci/gpu.sh [--before REV] [REPO_ROOT]
#     REPO_ROOT: the checkout that is copied to the GPU machine (default: this one)
#     --before REV: also stages rcb-bench and the library built at commit REV in .gpu/before/, so
#       that ci/gpu-run.sh measures a change before and after in the same run
#
# Every test binary Cargo builds for this crate is staged, so later features' tests run too.
set -euo pipefail

before=
if [ "${1:-}" = --before ]; then
    before=$2
    shift 2
fi
here=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
dest_root=$(cd "${1:-$here}" && pwd)
stage="$dest_root/.gpu"

cd "$here"
if [ -n "$before" ]; then
    # A worktree of REV beside the build, in its own target directory (a first build of it
    # compiles the dependencies once).
    tree="$here/target/before-tree"
    git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
    git worktree add --detach "$tree" "$before" >/dev/null
    (cd "$tree" && CARGO_TARGET_DIR="$here/target/before" cargo build --release --bin rcb-bench --lib)
    git worktree remove --force "$tree"
fi
cargo build --release --bin rcb-bench --bin rcb-demo --bin rcb-doctor --lib
# Built once in the open, so that a test that does not compile stops the staging with its error
# instead of leaving its binary out of the run.
cargo test --release -p rocm_cmdbuf --no-run
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
for tool in rcb-bench rcb-demo rcb-doctor; do objcopy --strip-debug "target/release/$tool" "$stage/$tool"; done
# The C library itself, for tests/gpu/torch_flatten.py and real_graphs.py (ctypes, RCB_LIBRARY).
objcopy --strip-debug target/release/librocm_cmdbuf.so "$stage/librocm_cmdbuf.so"
cp tests/gpu/kernels.cu tests/gpu/gpu_deps.py tests/gpu/rcb_ctypes.py tests/gpu/torch_graphs.py tests/gpu/torch_flatten.py tests/gpu/two_ranks.py tests/gpu/torch_collectives.py tests/gpu/torch_collective_cache.py tests/gpu/real_graphs.py ci/gpu-run.sh "$stage/"
# What a GPU machine is expected to skip, and the comparison (ci/gpu-run.sh's `skips` check).
cp ci/skips.sh "$stage/"
cp tests/expected-skips/gpu.txt "$stage/expected-skips-gpu.txt"
cp tests/expected-skips/gpu-one-device.txt "$stage/expected-skips-gpu-one-device.txt"
cp tests/expected-skips/gpu-two-devices.txt "$stage/expected-skips-gpu-two-devices.txt"
# The timing loops of tests/gpu/real_graphs.py (no CUDA header needed: it is given the functions).
cc -O2 -Wall -shared -fPIC -o "$stage/libreal_graphs_timer.so" tests/gpu/real_graphs_timer.c
# The stand-in runtime that times the driver's node setters (RCB_CUDA_LIBRARY=.gpu/libsetter_timer.so
# for `rcb-bench update`'s split table), linked against a stub under libcuda.so.1's SONAME so that
# the GPU machine's driver is its dependency (this machine has none).
stub=$(mktemp -d)
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stub/libcuda.so.1" -x c /dev/null
cc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$stage/libsetter_timer.so" tests/gpu/setter_timer.c \
    -Wl,--no-as-needed "$stub/libcuda.so.1" -ldl
rm -rf "$stub"
# The replay of the patched XLA's calls, built here against the staged library, which it loads
# under its SONAME from its own directory (a copy, not a link: plain files travel best).
cp "$stage/librocm_cmdbuf.so" "$stage/librocm_cmdbuf.so.0"
bash tests/xla_flow/run.sh --build-only "$stage" "$stage"
if [ -f tests/gpu/kernels.ptx ]; then cp tests/gpu/kernels.ptx "$stage/"; fi
# The commit the run's figures belong to (and whether the tree differed from it).
{ git rev-parse --short HEAD; git diff --quiet HEAD -- . ':!.gpu' || echo "with uncommitted changes"; } | paste -sd' ' > "$stage/commit"
if [ -n "$before" ]; then
    mkdir -p "$stage/before"
    objcopy --strip-debug target/before/release/rcb-bench "$stage/before/rcb-bench"
    objcopy --strip-debug target/before/release/librocm_cmdbuf.so "$stage/before/librocm_cmdbuf.so"
    git rev-parse --short "$before" > "$stage/before/commit"
fi

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
echo "copy the repository with .gpu/ to a machine with a GPU and run, from its root:"
echo "  bash .gpu/gpu-run.sh"

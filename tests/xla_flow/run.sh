#!/usr/bin/env bash
# Builds each program of tests/xla_flow (one per *.cpp: C++17, against include/rocm_cmdbuf.hpp
# and the cdylib in $1, i.e. target/<profile>) under -Wall -Wextra -Werror, plain and with
# ASan+UBSan, and runs them on the software GPU ($1/libamdhip64.so). With --build-only OUT_DIR
# it only builds the plain binaries, as OUT_DIR/xla_flow-<name> (ci/gpu.sh stages them for the
# GPU machine, where ci/gpu-run.sh runs them with RCB_BACKEND=cuda).
set -euo pipefail
build_only=""
if [ "${1:-}" = "--build-only" ]; then build_only=$2; shift 2; fi
lib_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# The patch series' new profiler files, as 0006 creates them, for profiler.cpp (with the
# stand-ins of the XLA headers they include, in stubs/).
patched=$(mktemp -d)
trap 'rm -rf "$patched"' EXIT
(cd "$patched" && git apply --include='xla/backends/profiler/gpu/rocm_cmdbuf_correlation.*' \
    "$root/xla-patches/0006-rocm_cmdbuf-profiler.patch")
flags=(-std=c++17 -Wall -Wextra -Werror -pedantic -I"$root/include" -I"$here" -I"$patched" -I"$here/stubs")
programs=()
for src in "$here"/*.cpp; do programs+=("$(basename "$src" .cpp)"); done

if [ -n "$build_only" ]; then
    # On the GPU machine the library sits next to the binaries.
    for p in "${programs[@]}"; do
        g++ "${flags[@]}" -O2 -o "$build_only/xla_flow-$p" "$here/$p.cpp" -L"$lib_dir" -Wl,-rpath,'$ORIGIN' \
            -lrocm_cmdbuf -ldl -lpthread
    done
    exit 0
fi

out=$(mktemp -d)
trap 'rm -rf "$out" "$patched"' EXIT
mkdir "$out/lib" "$out/hip"
cp "$lib_dir/librocm_cmdbuf.so" "$out/lib/"
ln -s librocm_cmdbuf.so "$out/lib/librocm_cmdbuf.so.0"
# The software GPU under its SONAME in a directory of its own; the program and the library
# open this one file, so they share one instance.
cp "$lib_dir/libamdhip64.so" "$out/hip/libamdhip64.so.6"
link=(-L"$out/lib" -Wl,-rpath,"$out/lib" -lrocm_cmdbuf -ldl -lpthread)
for p in "${programs[@]}"; do
    g++ "${flags[@]}" -O1 -o "$out/$p" "$here/$p.cpp" "${link[@]}"
    g++ "${flags[@]}" -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
        -o "$out/$p-asan" "$here/$p.cpp" "${link[@]}"
    for exe in "$p" "$p-asan"; do
        echo "== $exe (software GPU)"
        RCB_BACKEND=hip XLA_FLOW_HIP="$out/hip/libamdhip64.so.6" RCB_HIP_LIBRARY="$out/hip/libamdhip64.so.6" \
            ASAN_OPTIONS=detect_leaks=0 "$out/$exe"
    done
done

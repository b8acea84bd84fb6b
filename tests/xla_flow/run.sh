#!/usr/bin/env bash
# Builds each program of tests/xla_flow (one per *.cpp: C++17, against include/rocm_cmdbuf.hpp
# and the cdylib in $1, i.e. target/<profile>) under -Wall -Wextra -Werror, plain and with
# ASan+UBSan, and runs them on the software GPU ($1/libamdhip64.so). The programs that compile
# the patch series' loader (patched.sh extracts it with the series' other compiled files) do not
# link the library (--as-needed drops it) and open it as the patched XLA does; flags.cpp runs
# again where the library cannot be opened and where the file found lacks its functions. With
# --build-only OUT_DIR it only builds the plain binaries, as OUT_DIR/xla_flow-<name> (ci/gpu.sh
# stages them for the GPU machine, where ci/gpu-run.sh runs them with RCB_BACKEND=cuda).
set -euo pipefail
build_only=""
if [ "${1:-}" = "--build-only" ]; then build_only=$2; shift 2; fi
lib_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
patched=$(mktemp -d)
trap 'rm -rf "$patched"' EXIT
bash "$here/patched.sh" "$patched"
flags=(-std=c++17 -Wall -Wextra -Werror -pedantic -I"$root/include" -I"$here" -I"$patched" -I"$here/stubs")
programs=()
for src in "$here"/*.cpp; do programs+=("$(basename "$src" .cpp)"); done

if [ -n "$build_only" ]; then
    # On the GPU machine the library sits next to the binaries.
    for p in "${programs[@]}"; do
        g++ "${flags[@]}" -O2 -o "$build_only/xla_flow-$p" "$here/$p.cpp" -L"$lib_dir" -Wl,-rpath,'$ORIGIN' \
            -Wl,--as-needed -lrocm_cmdbuf -ldl -lpthread
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
# An RPATH, not a RUNPATH: ASan intercepts dlopen and calls it from its own library, whose
# lookups a RUNPATH of the program does not reach, and the loader programs dlopen the library.
link=(-L"$out/lib" -Wl,-rpath,"$out/lib" -Wl,--disable-new-dtags -Wl,--as-needed -lrocm_cmdbuf -ldl -lpthread)
run() { RCB_BACKEND=hip XLA_FLOW_HIP="$out/hip/libamdhip64.so.6" RCB_HIP_LIBRARY="$out/hip/libamdhip64.so.6" \
    ASAN_OPTIONS=detect_leaks=0 "$@"; }
for p in "${programs[@]}"; do
    g++ "${flags[@]}" -O1 -o "$out/$p" "$here/$p.cpp" "${link[@]}"
    g++ "${flags[@]}" -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
        -o "$out/$p-asan" "$here/$p.cpp" "${link[@]}"
    for exe in "$p" "$p-asan"; do
        echo "== $exe (software GPU)"
        run "$out/$exe"
    done
done

# flags.cpp without a run path: librocm_cmdbuf.so.0 is not on the loader's path, then the one
# found there is a stand-in that has rcb_version only.
g++ "${flags[@]}" -O1 -o "$out/flags-no-path" "$here/flags.cpp" -ldl -lpthread
ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
echo "== flags missing (no librocm_cmdbuf.so.0 on the loader's path)"
if "$ldconfig" -p 2>/dev/null | grep -q 'librocm_cmdbuf\.so\.0 '; then
    echo "SKIPPED flags-missing: librocm_cmdbuf.so.0 is in the loader's cache, so it is never missing here"
else
    env -u LD_LIBRARY_PATH "$out/flags-no-path" missing
fi
echo "== flags partial (a librocm_cmdbuf.so.0 without the library's functions)"
mkdir "$out/partial"
printf 'const char *rcb_version(void) { return "0.0.0-partial"; }\n' |
    gcc -x c -shared -fPIC -Wl,-soname,librocm_cmdbuf.so.0 -o "$out/partial/librocm_cmdbuf.so.0" -
LD_LIBRARY_PATH="$out/partial" "$out/flags-no-path" partial

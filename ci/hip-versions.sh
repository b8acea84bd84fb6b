#!/usr/bin/env bash
# Checks the hip backend against Debian's real HIP of every ROCm version it supports: the system's
# 5.2 (libamdhip64-dev, installed by ci/setup.sh) and 5.7, 6.4 and 7.2 (downloaded, never
# installed, by ci/hip-fetch.sh into target/real-hip at the versions it pins, or the newest of
# the same major Debian has once a pinned one is gone; a rerun is offline).
#
# For each version:
#   - headers: the library's ABI table for that version (src/runtime/hip/abi.rs, written by an
#     ignored unit test) checked against the real headers by tests/hip_abi/probe.py: every
#     prototype it loads (names and order of the parameters, types), the sizes of the C types it
#     stands in for, every field offset and size of the structs it builds or reads, its constants
#     and node-type numbers;
#   - runtime: the real libamdhip64.so.N loaded through the library on this machine, which has no
#     AMD GPU, must give RCB_STATUS_NO_DEVICE with a message naming that version (the downloaded
#     ones run under their own suite's dynamic loader and libraries: they need a newer C library);
#   - the C suites that include HIP headers (tests/hipsim/run-c-tests.sh, tests/c/run.sh) built with
#     -Werror against those headers and run on the software GPU (5.2's run in ci/test.sh).
#
#   ci/hip-versions.sh [target/debug]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
lib_dir=$(realpath "${1:-target/debug}")

bash ci/apt-install.sh libamdhip64-dev clang-19
cargo build --quiet -p rocm_cmdbuf -p hipsim
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Header sets and runtimes: label, include directory, runtime, and the root whose dynamic loader
# runs it ("" for the system's).
sets=("5.2 (system)|/usr/include|/usr/lib/x86_64-linux-gnu/libamdhip64.so.5|")
fetched=$(bash ci/hip-fetch.sh) || { echo "ci/hip-versions.sh: the real HIP packages could not be fetched"; exit 1; }
while read -r major suite version suite_root; do
    sets+=("$version ($suite)|$suite_root/usr/include|$suite_root/usr/lib/x86_64-linux-gnu/libamdhip64.so.$major|$suite_root")
done <<<"$fetched"

# The error-path program of tests/c, for the no-device check.
mkdir -p "$work/lib"
cp "$lib_dir/librocm_cmdbuf.so" "$work/lib/"
ln -s librocm_cmdbuf.so "$work/lib/librocm_cmdbuf.so.0"
gcc -std=c11 -Wall -Wextra -Werror -I"$root/include" -o "$work/abi_errors" tests/c/abi_errors.c \
    -L"$work/lib" -Wl,-rpath,"$work/lib" -lrocm_cmdbuf

failed=0
fail() { echo "FAIL $*"; failed=1; }
for set in "${sets[@]}"; do
    IFS='|' read -r label include runtime suite_root <<<"$set"
    echo "== ROCm $label"
    version=$(printf '#include <hip/hip_version.h>\nHIP_VERSION\n' | g++ -E -P -I"$include" -x c++ - | tail -n 1)
    version=$((version))
    table=$work/table-$version.json
    RCB_HIP_ABI_VERSION=$version RCB_HIP_ABI_TABLE=$table \
        cargo test --quiet -p rocm_cmdbuf --lib -- --ignored --exact runtime::hip::abi::tests::write_table >"$work/table.log" 2>&1 ||
        { cat "$work/table.log"; fail "$label: the library's ABI table"; continue; }
    python3 tests/hip_abi/probe.py --table "$table" --include "$include" --work "$work/probe-$version" \
        --label "headers $label" || fail "$label: the library's ABI differs from the headers"

    # "(HIP 6.4.": the message names the version that was loaded.
    needle="(HIP $((version / 10000000)).$((version / 100000 % 100))."
    if [ -z "$suite_root" ]; then
        run=(env)
    else
        libs=$suite_root/usr/lib/x86_64-linux-gnu
        run=(env "$libs/ld-linux-x86-64.so.2" --library-path "$libs")
    fi
    if out=$(RCB_BACKEND=hip RCB_HIP_LIBRARY="$runtime" "${run[@]}" "$work/abi_errors" no-device "$needle" 2>&1); then
        echo "runtime $label: $(basename "$runtime") reports no device ($out)"
    else
        echo "$out" | sed 's/^/    /'
        fail "$label: $(basename "$runtime") on a machine without GPU"
    fi

    if [ -n "$suite_root" ]; then
        bash tests/hipsim/run-c-tests.sh "$lib_dir/libamdhip64.so" "$include" >"$work/hipsim-c.log" 2>&1 &&
            echo "hipsim C suite ($label headers): $(grep -c '^PASS' "$work/hipsim-c.log") passed" ||
            { cat "$work/hipsim-c.log"; fail "$label: the hipsim C suite with these headers"; }
        bash tests/c/run.sh "$lib_dir" "$include" >"$work/c.log" 2>&1 &&
            echo "tests/c ($label headers): passed" ||
            { cat "$work/c.log"; fail "$label: tests/c with these headers"; }
    fi
done
[ $failed = 0 ] && echo "== every ROCm version: as the library assumes" || echo "== some ROCm version differs (FAIL lines above)"
exit $failed

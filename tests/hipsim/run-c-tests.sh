#!/usr/bin/env bash
# Builds and runs the hipsim C suite against a built libamdhip64.so, with the HIP headers of
# /usr/include (Debian's ROCm 5.2) or of INCLUDE_DIR (ci/hip-versions.sh passes each real ROCm's).
# Usage: run-c-tests.sh path/to/libamdhip64.so [INCLUDE_DIR]
set -euo pipefail

lib=$(realpath "${1:?usage: $0 path/to/libamdhip64.so [INCLUDE_DIR]}")
include=${2:-/usr/include}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A directory holding only hipsim, so Debian's libamdhip64.so.5 can never be picked up.
mkdir -p "$work/lib"
cp "$lib" "$work/lib/libamdhip64.so"
ln -s libamdhip64.so "$work/lib/libamdhip64.so.6"

# Other headers than the system's as system headers too (as an installed ROCm's are): the tests
# are held to -Werror, AMD's headers are not.
hip_dir=(-I/usr/include)
[ "$include" = /usr/include ] || hip_dir=(-isystem "$include")
cflags=(-std=c11 -Wall -Wextra -Werror -D__HIP_PLATFORM_AMD__ "${hip_dir[@]}" -I"$here/tests" -g)
ldflags=(-L"$work/lib" -lamdhip64 -Wl,-rpath,"$work/lib" -lpthread -ldl)

failed=0
build() { # name variant extra-flags...
    local name=$1 variant=$2; shift 2
    gcc "${cflags[@]}" "$@" "$here/tests/$name.c" -o "$work/$name$variant" "${ldflags[@]}"
}
run() { # label binary [env...] -- [args...]
    local label=$1 bin=$2; shift 2
    local envs=()
    while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
    [[ $# -gt 0 ]] && shift
    if out=$(env "${envs[@]}" "$work/$bin" "$@" 2>&1); then
        echo "PASS $label"
    else
        echo "FAIL $label"; echo "$out" | sed 's/^/    /'
        failed=1
    fi
}

tests=(memory streams kernels graphs capture vmm signal knobs attributes stream_memops node_kinds)
for t in "${tests[@]}"; do build "$t" ""; done
build memcpy_params ""
build last_error ""

for t in "${tests[@]}"; do run "$t" "$t"; done
# The versions whose releases were read (Debian's trixie, sid and experimental binaries), and an
# unparsable one, which keeps the default (7.2.4).
run "memcpy_params 5.7.1" memcpy_params HIPSIM_VERSION=50731921 -- 50731921
run "memcpy_params 6.4.3" memcpy_params HIPSIM_VERSION=60443484 -- 60443484
run "memcpy_params 7.2.4" memcpy_params -- 70253211
run "memcpy_params malformed" memcpy_params HIPSIM_VERSION=6.4.3 -- 70253211
# The last error: every call's result up to 6.3 (clr's sources), failures only from 6.4 (the
# 6.4.3 and 7.2.4 binaries).
run "last_error 5.7.1" last_error HIPSIM_VERSION=50731921 -- every-call
run "last_error 6.3.0" last_error HIPSIM_VERSION=60300000 -- every-call
run "last_error 6.4.3" last_error HIPSIM_VERSION=60443484 -- failures
run "last_error 7.2.4" last_error -- failures
run "knobs env-fail" knobs HIPSIM_FAIL=hipMalloc:3,hipStreamCreate:2:801 -- env-fail
run "knobs env-quirks" knobs HIPSIM_QUIRKS=clr138 -- env-quirks
run "knobs env-kernarg" knobs HIPSIM_QUIRKS=kernarg_leak HIPSIM_KERNARG_POOL=1000 -- env-kernarg
# clr 6.2 and 6.3 capture kernel nodes alone, so their memset nodes stage nothing.
run "knobs chain-staging 6.3.0" knobs HIPSIM_VERSION=60300000 -- chain-staging-6.3
run "knobs env-latency" knobs HIPSIM_LATENCY=hipStreamCreate:40ms,hipGetDevice:1500us -- env-latency
run "knobs no-devices" knobs HIPSIM_DEVICES=0 -- no-devices
run "knobs one-device" knobs HIPSIM_DEVICES=1 -- one-device
if out=$(HIPSIM_STATS=1 "$work/knobs" stats 2>&1) && grep -q '^  hipMalloc 2$' <<<"$out" &&
    grep -q '^hipsim faults fired: 1$' <<<"$out"; then
    echo "PASS knobs stats"
else
    echo "FAIL knobs stats"; echo "$out" | sed 's/^/    /'; failed=1
fi

# Sanitizer pass: catches reads of freed or foreign memory in the C-visible contract. A compiler
# without the sanitizers fails the suite (the other suites need them too) unless
# HIPSIM_ALLOW_NO_SANITIZER=1, which skips the pass with a SKIPPED line.
if gcc -fsanitize=address,undefined -x c -o "$work/probe" - <<<'int main(void){return 0;}' 2>"$work/probe.log"; then
    for t in "${tests[@]}"; do
        build "$t" "-asan" -fsanitize=address,undefined -fno-sanitize-recover=undefined
        run "$t (asan+ubsan)" "$t-asan" ASAN_OPTIONS=detect_leaks=0
    done
elif [ "${HIPSIM_ALLOW_NO_SANITIZER:-}" = 1 ]; then
    echo "SKIPPED run-c-tests::asan+ubsan: every test (gcc cannot build with -fsanitize=address,undefined: $(head -n 1 "$work/probe.log"))"
else
    echo "FAIL asan+ubsan: gcc cannot build with -fsanitize=address,undefined (HIPSIM_ALLOW_NO_SANITIZER=1 skips the pass):"
    sed 's/^/    /' "$work/probe.log"
    failed=1
fi

exit $failed

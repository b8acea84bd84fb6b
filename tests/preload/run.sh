#!/usr/bin/env bash
# The LD_PRELOAD interposer against the software GPU: a program that creates and destroys 112
# streams 50 times makes hipsim count 5600 creations on its own and at most 112 with
# librocm_cmdbuf_preload.so preloaded (also when HIP is dlopen'ed late with RTLD_LOCAL), while
# the work on the streams still checks out; RCB_STREAM_CACHE=0, or a malformed value, turns the
# cache off.
# Usage: tests/preload/run.sh [target/debug]   (after `cargo build -p hipsim -p rocm_cmdbuf_preload`)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
target=$(realpath "${1:-$here/../../target/debug}")
preload="$target/librocm_cmdbuf_preload.so"
for f in "$target/libamdhip64.so" "$preload"; do
    [[ -f $f ]] || { echo "missing $f: run cargo build -p hipsim -p rocm_cmdbuf_preload" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A directory holding only hipsim (soname libamdhip64.so.6), so no installed HIP is picked up.
mkdir -p "$work/lib"
cp "$target/libamdhip64.so" "$work/lib/libamdhip64.so"
ln -s libamdhip64.so "$work/lib/libamdhip64.so.6"

cflags=(-std=c11 -Wall -Wextra -Werror -D__HIP_PLATFORM_AMD__ -g)
gcc "${cflags[@]}" -shared -fPIC "$here/workload.c" -o "$work/libworkload.so" \
    -L"$work/lib" -lamdhip64 -Wl,-rpath,"$work/lib"
gcc "${cflags[@]}" "$here/driver.c" -o "$work/linked" -L"$work" -lworkload -Wl,-rpath,"$work:$work/lib"
gcc "${cflags[@]}" -DLATE "$here/driver.c" -o "$work/late" -ldl

failed=0
# expect LABEL MIN MAX [ENV...] -- COMMAND...: the run succeeds and counts MIN..MAX creations.
expect() {
    local label=$1 min=$2 max=$3; shift 3
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    local out n
    if out=$(env "${envs[@]}" "$@" 2>&1) && n=$(sed -n 's/^stream creations: //p' <<<"$out") \
        && [[ -n $n ]] && ((n >= min && n <= max)); then
        echo "PASS $label: $n stream creations"
    else
        echo "FAIL $label (expected $min..$max creations)"; sed 's/^/    /' <<<"$out"
        failed=1
    fi
}

expect "no preload" 5600 5600 -- "$work/linked"
expect "preload" 1 112 LD_PRELOAD="$preload" -- "$work/linked"
expect "preload, RCB_STREAM_CACHE=0" 5600 5600 LD_PRELOAD="$preload" RCB_STREAM_CACHE=0 -- "$work/linked"
expect "preload, bound of 8 per key" 4032 4032 LD_PRELOAD="$preload" RCB_STREAM_CACHE_MAX_PER_KEY=8 -- "$work/linked"
expect "preload, malformed bound: cache off" 5600 5600 LD_PRELOAD="$preload" RCB_STREAM_CACHE_MAX_PER_KEY=lots -- "$work/linked"
expect "preload, HIP dlopen'ed late (RTLD_LOCAL)" 1 112 LD_PRELOAD="$preload" -- "$work/late" "$work/libworkload.so"
expect "no preload, HIP dlopen'ed late" 5600 5600 -- "$work/late" "$work/libworkload.so"
exit $failed

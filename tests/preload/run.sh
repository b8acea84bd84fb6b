#!/usr/bin/env bash
# The LD_PRELOAD interposer against the software GPU: a program that creates and destroys 112
# streams 50 times makes hipsim count 5600 creations on its own and at most 112 with
# librocm_cmdbuf_preload.so preloaded (also when HIP is dlopen'ed late with RTLD_LOCAL), while
# the work on the streams still checks out; RCB_STREAM_CACHE=0, or a malformed value, turns the
# cache off. lifecycle.c gets plain HIP's answers with the preload too: a second destroy of a
# stream (also two at once from two threads), a destroy after hipDeviceReset (also when hipGetDevice fails in it), a fork while
# another thread creates and destroys streams, a runtime that reports flag bits of its own.
# two_runtimes.c loads two copies of hipsim under different sonames behind RTLD_LOCAL objects: no
# stream of one reaches the other. The workload built as XLA up to rocm-jaxlib-v0.8.0 takes HIP
# (dlopen RTLD_LOCAL, then dlsym on that handle) gets the cache too; tail_call.c's calls, which
# reach HIP by tail calls from an RTLD_LOCAL object, succeed with the preload as without it.
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
# No HIP linked: the runtime is dlopen'ed by its soname, found through the program's runpath.
gcc "${cflags[@]}" -DTSL_LOADER "$here/workload.c" "$here/driver.c" -o "$work/tsl_loader" -ldl -Wl,-rpath,"$work/lib"
gcc "${cflags[@]}" -O2 -DOBJECT -shared -fPIC "$here/tail_call.c" -o "$work/libtail.so" \
    -L"$work/lib" -lamdhip64 -Wl,-rpath,"$work/lib"
for f in tail_create tail_create_with_flags tail_destroy; do
    objdump -d --no-show-raw-insn "$work/libtail.so" | sed -n "/^[0-9a-f]* <$f>:/,/^\$/p" | grep -q 'jmp.*@plt>' ||
        { echo "$f in libtail.so is not a tail call: the test would not test what it says" >&2; exit 2; }
done
gcc "${cflags[@]}" "$here/tail_call.c" -o "$work/tail_call" -ldl
gcc "${cflags[@]}" "$here/lifecycle.c" -o "$work/lifecycle" -pthread -L"$work/lib" -lamdhip64 -Wl,-rpath,"$work/lib"
# Two HIP runtimes: hipsim copied under two sonames of the same length (the string is patched in
# place), each linked by a user object of its own, both dlopen'ed RTLD_LOCAL by two_runtimes.
for which in a b; do
    mkdir -p "$work/$which"
    perl -0777 -pe "s/libamdhip64\.so\.6\0/libhipsim_$which.so.6\0/g" "$target/libamdhip64.so" >"$work/$which/libhipsim_$which.so.6"
    readelf -d "$work/$which/libhipsim_$which.so.6" | grep -q "soname: \[libhipsim_$which.so.6\]" ||
        { echo "could not give the copy of hipsim the soname libhipsim_$which.so.6" >&2; exit 2; }
    gcc "${cflags[@]}" -shared -fPIC "$here/runtime_user.c" -o "$work/$which/libuser_$which.so" \
        -L"$work/$which" -l:"libhipsim_$which.so.6" -Wl,-rpath,"$work/$which"
    # The same user taking its copy's functions from the copy's handle (dlsym), linking no HIP.
    gcc "${cflags[@]}" -DTSL_LOADER -DHIP_SONAME="\"libhipsim_$which.so.6\"" -shared -fPIC "$here/runtime_user.c" \
        -o "$work/$which/libuser_tsl_$which.so" -ldl -Wl,-rpath,"$work/$which"
done
gcc "${cflags[@]}" "$here/two_runtimes.c" -o "$work/two_runtimes" -ldl

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
# HIP taken from its own handle with dlsym, as XLA's STREAM_EXECUTOR_HIP_WRAP does.
expect "preload, HIP from dlsym(handle)" 1 112 LD_PRELOAD="$preload" -- "$work/tsl_loader"
expect "no preload, HIP from dlsym(handle)" 5600 5600 -- "$work/tsl_loader"
expect "preload, HIP from dlsym(handle), RCB_STREAM_CACHE=0" 5600 5600 LD_PRELOAD="$preload" RCB_STREAM_CACHE=0 -- "$work/tsl_loader"
# Tail calls from an RTLD_LOCAL object: the caller the preload sees has no HIP in its scope.
expect "preload, tail calls from an RTLD_LOCAL object" 1 16 LD_PRELOAD="$preload" -- "$work/tail_call" "$work/libtail.so"
expect "no preload, tail calls from an RTLD_LOCAL object" 160 160 -- "$work/tail_call" "$work/libtail.so"
# A runtime that reports flag bits of its own: streams are filed under the flags asked for.
expect "no preload, extra flag bits" 10 10 HIPSIM_QUIRKS=stream_flag_bits -- "$work/lifecycle" flag-bits
expect "preload, extra flag bits" 1 1 HIPSIM_QUIRKS=stream_flag_bits LD_PRELOAD="$preload" -- "$work/lifecycle" flag-bits

# Two runtimes in one process: every stream is live in the runtime of the object that asked for
# it, and every call succeeds; the preload caches while one runtime is loaded (phase 1) and makes
# every stream anew once there are two (phase 2), as plain HIP does.
# two_runtimes LABEL USER [ENV]: USER is the prefix of the user objects (libuser_: linked against
# their copy; libuser_tsl_: taking its functions from its handle, which the preload binds).
two_runtimes() {
    local label=$1 user=$2 env=${3:-} out p1 p2
    if out=$(env $env timeout 120 "$work/two_runtimes" "$work/a/${user}a.so" "$work/b/${user}b.so" 2>&1) &&
        p1=$(sed -n 's/^phase 1 creations: //p' <<<"$out") && p2=$(sed -n 's/^phase 2 creations: //p' <<<"$out") &&
        [[ -n $p1 && -n $p2 ]] && ((p2 == 80)) && if [[ -n $env ]]; then ((p1 >= 1 && p1 <= 4)); else ((p1 == 40)); fi; then
        echo "PASS $label: $p1 then $p2 stream creations"
    else
        echo "FAIL $label (expected $([[ -n $env ]] && echo 1..4 || echo 40) then 80 creations)"; sed 's/^/    /' <<<"$out"
        failed=1
    fi
}
two_runtimes "two runtimes" libuser_
two_runtimes "two runtimes, preload" libuser_ "LD_PRELOAD=$preload"
two_runtimes "two runtimes from dlsym(handle)" libuser_tsl_
two_runtimes "two runtimes from dlsym(handle), preload" libuser_tsl_ "LD_PRELOAD=$preload"

# Plain HIP's answers, with and without the preload: a second destroy (after the first, and racing
# it), a device reset, a fork.
for mode in double-destroy racing-destroy reset reset-no-device fork; do
    for env in "" "LD_PRELOAD=$preload"; do
        label="$mode${env:+, preload}"
        if out=$(env $env timeout 120 "$work/lifecycle" "$mode" 2>&1); then
            echo "PASS $label"
        else
            echo "FAIL $label"; sed 's/^/    /' <<<"$out"
            failed=1
        fi
    done
done
exit $failed

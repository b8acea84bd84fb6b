#!/usr/bin/env bash
# The fault matrix (see docs/reliability.md): every HIP call of each scenario failed in turn on
# the software GPU, in two parts.
#   1. fault_matrix.c: the library's scenarios in one process, each run checked for its status,
#      its results and the software GPU's live objects (ASan+UBSan build).
#   2. the tests/xla_flow programs, the patched XLA's call sequences, as a separate process per
#      fault (HIPSIM_FAIL=function:n): every call of every HIP function the library makes in
#      them. A run is classified by its exit status alone (tests/xla_flow/check.h): 0 passed
#      (every check held), 1 failed cleanly (a failed call or a check on what the library
#      reported), 3 a wrong result (a CHECK_RESULT on computed data failed), 4 a contract breach
#      (a CHECK_CONTRACT on a safety property failed, no result check did), and a crash for a
#      sanitizer report (exit 66: ASAN_OPTIONS/UBSAN_OPTIONS), a signal, a timeout or any other
#      status. Every fault must come back with exactly one class (a lost one fails the run).
#      (The process exits without freeing, so leaks are part 1's to count.)
#   Before part 2, a self-test proves the classifier: stand-in programs exiting with each status,
#   and tests/xla_flow/command_buffer.cpp under a fault that really corrupts a result (the first
#   exec kernel-node setter skipped while it reports success) must be classified as wrong.
# Usage: tests/faults/run.sh target/<profile> [--xla-stride K]
#   --xla-stride K: part 2 fails only every K-th call of each function (the first always).
# Prints both tables; exits non-zero on any leak, wrong result, contract breach or crash.
set -euo pipefail
lib_dir=$(cd "$1" && pwd)
shift
stride=1
if [ "${1:-}" = "--xla-stride" ]; then stride=$2; fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

mkdir "$out/lib" "$out/hip"
cp "$lib_dir/librocm_cmdbuf.so" "$out/lib/"
ln -s librocm_cmdbuf.so "$out/lib/librocm_cmdbuf.so.0"
# The software GPU under its SONAME in a directory of its own: the programs load this file, and
# the library's dlopen of it (RCB_HIP_LIBRARY) finds the same instance.
cp "$lib_dir/libamdhip64.so" "$out/hip/libamdhip64.so"
ln -s libamdhip64.so "$out/hip/libamdhip64.so.6"
hipsim=$out/hip/libamdhip64.so
# A sanitizer report exits 66, a status of its own.
export RCB_BACKEND=hip RCB_HIP_LIBRARY=$hipsim ASAN_OPTIONS=detect_leaks=0:exitcode=66 UBSAN_OPTIONS=exitcode=66:print_stacktrace=1
# The update budget at its fixed HIP default instead of measured, in the scenarios and the
# programs alike: the measurement's probe (src/cmdbuf/leak_probe.rs, made by each process's first
# command buffer) would add its 16 000 calls to every sweep, and keeps a 128-byte buffer for the
# process that a scenario's leak count would see; tests/update_budget_probe.rs fails each kind of
# its calls.
export RCB_EXEC_UPDATE_BUDGET=$((64 << 20))

# Every HIP function the software GPU exports (its test hooks and the two that return strings
# excepted): the matrix fails each call of each of them that a scenario makes.
nm -D --defined-only "$hipsim" | awk '$2 == "T" && $3 ~ /^hip/ && $3 !~ /^hipsim/ && $3 !~ /^hipGetError/ {print $3}' \
    >"$out/names"

echo "== fault matrix: the library's scenarios"
gcc -std=c11 -O1 -g -Wall -Wextra -Werror -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined -D__HIP_PLATFORM_AMD__ -I"$root/include" -I/usr/include \
    -o "$out/fault_matrix" "$here/fault_matrix.c" \
    -L"$out/lib" -Wl,-rpath,"$out/lib" -lrocm_cmdbuf -L"$out/hip" -Wl,-rpath,"$out/hip" -lamdhip64 -ldl
failed=0
"$out/fault_matrix" "$out/names" 2>"$out/matrix.log" || failed=1
if [ $failed -ne 0 ]; then
    grep -v '^\[' "$out/matrix.log" | head -n 60
    echo "FAIL: the fault matrix found leaks, wrong results or contract breaches (above)"
fi

echo "== fault matrix: the tests/xla_flow programs, one process per fault"
# One row per program. The program's own calls (memory, module, its stream, its
# synchronizations) are not the library's: left out. hipModuleLaunchKernel stays: it is the
# traced commands' work.
own='^(hipMalloc|hipFree|hipMemcpy|hipSetDevice|hipModuleLoadData|hipModuleGetFunction|hipStreamCreate|hipStreamSynchronize|hipGetError[A-Za-z]*|hipsim[A-Za-z]*) '
export XLA_FLOW_HIP=$hipsim
# One run: prints its class and the fault. A fault the program's own hipsimSetFaults replaced
# before its call never fires (the software GPU counts those that did): "unfired".
classify() {
    local exe=$1 spec=$2 own_fired=$3 log rc=0 fired
    log=$(HIPSIM_STATS=1 HIPSIM_FAIL=$spec timeout 300 "$exe" 2>&1) || rc=$?
    fired=$(sed -n 's/^hipsim faults fired: //p' <<<"$log")
    case $rc in
        0)
            if [ "${fired:-0}" -le "$own_fired" ]; then
                echo "unfired $spec"
            elif grep -q 'all checks passed' <<<"$log"; then
                echo "passed $spec"
            else
                echo "crash $spec (exit 0 without 'all checks passed')"
            fi
            ;;
        1) echo "failed $spec" ;;
        3)
            echo "wrong $spec"
            grep -E 'CHECK_RESULT' <<<"$log" | head -n 3 >&2 || true
            ;;
        4)
            echo "breach $spec"
            grep -E 'CHECK_CONTRACT' <<<"$log" | head -n 3 >&2 || true
            ;;
        66)
            echo "crash $spec (sanitizer report)"
            grep -E -m 3 'runtime error:|AddressSanitizer' <<<"$log" >&2 || true
            ;;
        *)
            echo "crash $spec (exit $rc)"
            tail -n 5 <<<"$log" >&2
            ;;
    esac
    return 0
}
export -f classify

echo "== fault matrix: the classifier's self-test"
mkdir "$out/fake"
for status in 0 1 3 4 66 segv; do
    case $status in
        segv) body='kill -SEGV $$' ;;
        0) body='echo "x: all checks passed"; echo "hipsim faults fired: 1" >&2' ;;
        *) body="exit $status" ;;
    esac
    printf '#!/usr/bin/env bash\n%s\n' "$body" >"$out/fake/exit-$status"
    chmod +x "$out/fake/exit-$status"
done
self_test() { # expected-class program own_fired [fault]
    local want=$1 exe=$2 own=$3 spec=${4:-self-test:1} got
    got=$(classify "$exe" "$spec" "$own" 2>/dev/null)
    if [ "${got%% *}" = "$want" ]; then
        echo "  $(basename "$exe") ${4:-}: $want"
    else
        echo "FAIL: the classifier says '$got' for $(basename "$exe") ${4:-}, expected '$want'"
        failed=1
    fi
}
self_test passed "$out/fake/exit-0" 0
self_test unfired "$out/fake/exit-0" 1
self_test failed "$out/fake/exit-1" 0
self_test wrong "$out/fake/exit-3" 0
self_test breach "$out/fake/exit-4" 0
self_test crash "$out/fake/exit-66" 0
self_test crash "$out/fake/exit-segv" 0
# Some programs compile the series' own files, as tests/xla_flow/run.sh extracts them
# (patched.sh), against the stand-ins of the XLA headers they include; those open the library
# through the series' loader instead of linking it (from the program's RPATH: ASan's dlopen
# interceptor does not see a RUNPATH).
patched=$out/patched
bash "$root/tests/xla_flow/patched.sh" "$patched"
g++ -std=c++17 -O1 -Wall -Wextra -Werror -pedantic -I"$root/include" -I"$root/tests/xla_flow" \
    -I"$patched" -I"$root/tests/xla_flow/stubs" \
    -o "$out/self-test-command_buffer" "$root/tests/xla_flow/command_buffer.cpp" \
    -L"$out/lib" -Wl,-rpath,"$out/lib" -lrocm_cmdbuf -ldl -lpthread
# A real wrong result: the first exec kernel-node setter skipped while reporting success (a fault
# with code 0), so an in-place move leaves a node at its old addresses.
self_test wrong "$out/self-test-command_buffer" 0 hipGraphExecKernelNodeSetParams:1:0

sweep="every call"
[ "$stride" -eq 1 ] || sweep="every ${stride}th call"
echo "| program | HIP calls of the library | faults injected | failed with a status | passed (all checks held) | wrong results | contract breaches | crashes | faults replaced by the program's own |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for src in "$root"/tests/xla_flow/*.cpp; do
    name=$(basename "$src" .cpp)
    exe=$out/xla_flow-$name
    g++ -std=c++17 -O1 -Wall -Wextra -Werror -pedantic -I"$root/include" -I"$root/tests/xla_flow" \
        -I"$patched" -I"$root/tests/xla_flow/stubs" \
        -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
        -o "$exe" "$src" -L"$out/lib" -Wl,-rpath,"$out/lib" -Wl,--disable-new-dtags -Wl,--as-needed \
        -lrocm_cmdbuf -ldl -lpthread
    # The calls of one run without faults (the software GPU prints them at exit).
    HIPSIM_STATS=1 "$exe" >/dev/null 2>"$out/stats" || { cat "$out/stats"; exit 1; }
    own_fired=$(sed -n 's/^hipsim faults fired: //p' "$out/stats")
    awk '/^  hip/ {print $1, $2}' "$out/stats" | grep -Ev "$own" >"$out/calls" || true
    calls=$(awk '{s += $2} END {print s + 0}' "$out/calls")
    [ "$calls" -gt 0 ] || continue
    : >"$out/faults"
    while read -r fn count; do
        for ((n = 1; n <= count; n++)); do
            if [ $(((n - 1) % stride)) -eq 0 ]; then echo "$fn:$n" >>"$out/faults"; fi
        done
    done <"$out/calls"
    xargs_rc=0
    xargs -P "$(nproc)" -I{} bash -c "classify '$exe' {} $own_fired" <"$out/faults" >"$out/results" || xargs_rc=$?
    # Every fault comes back with exactly one class: a helper that died lost its line.
    lost=$(comm -3 <(sort "$out/faults") <(awk '{print $2}' "$out/results" | sort))
    count() { grep -c "^$1 " "$out/results" || true; }
    injected=$(($(wc -l <"$out/faults") - $(count unfired)))
    echo "| $name.cpp ($sweep) | $calls | $injected | $(count failed) | $(count passed) | $(count wrong) | $(count breach) | $(count crash) | $(count unfired) |"
    if [ "$(count wrong)" != 0 ] || [ "$(count breach)" != 0 ] || [ "$(count crash)" != 0 ]; then
        grep -E '^(wrong|breach|crash) ' "$out/results" | head -n 20
        failed=1
    fi
    if [ -n "$lost" ] || [ $xargs_rc -ne 0 ]; then
        echo "FAIL: $name.cpp: results lost or duplicated (xargs exit $xargs_rc):"
        echo "$lost" | head -n 20 | sed 's/^/  /'
        failed=1
    fi
done
exit $failed

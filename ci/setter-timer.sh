#!/usr/bin/env bash
# The runtime's setters timed by a stand-in, on the software GPU: builds tests/gpu/setter_timer.c
# for HIP against the software GPU in $1 (target/<profile>: libamdhip64.so, rcb-bench), gives it
# to the library as its runtime (RCB_HIP_LIBRARY) and runs `rcb-bench --quick update
# update-after-writes`, which split each update into the time inside the runtime's setters and
# the library's own, and check in each call that the setters were called once per touched node;
# then `update-loop` split the same way, and with the kernel-node setters skipped
# (RCB_SETTER_TIMER_SKIP=1). Fails unless the split table has a row for each size, every row of
# update-after-writes is split, update-loop's skipped setters take no time and reach the software
# GPU's setter never where the timed ones take some and reach it once a push, and `update` is
# refused on a skipping stand-in. (ci/gpu.sh builds the CUDA stand-in
# for a GPU machine.)
set -euo pipefail
lib_dir=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The software GPU under its SONAME, which the stand-in names as its dependency.
cp "$lib_dir/libamdhip64.so" "$out/libamdhip64.so.6"
cc -O2 -Wall -Wextra -Werror -shared -fPIC -DSETTER_TIMER_HIP -o "$out/libsetter_timer.so" \
    "$root/tests/gpu/setter_timer.c" -Wl,--no-as-needed "$out/libamdhip64.so.6" -Wl,--disable-new-dtags,-rpath,"$out" -ldl
RCB_BACKEND=hip RCB_HIP_LIBRARY="$out/libsetter_timer.so" "$lib_dir/rcb-bench" --quick update update-after-writes > "$out/update.md"
rows=$(sed -n '/split in the same call/,/^The library.s runtime is/p' "$out/update.md" | grep -cE '^\| (100|1000) \|' || true)
if [ "$rows" != 2 ]; then
    echo "ci/setter-timer.sh: rcb-bench printed $rows of the 2 rows of the split table" >&2
    cat "$out/update.md" >&2
    exit 1
fi
# update-after-writes --quick: 1000 nodes, primary and nested, three sizes of writes each: six
# rows, each split (its last three cells, after N, the command buffer, W, (c), (d′), their ratio
# and the difference per site, none "—").
after=$(sed -n '/^### update-after-writes/,/^Each median/p' "$out/update.md" | grep -E '^\| 1000 \|' || true)
split_rows=$(printf '%s\n' "$after" | awk -F'|' 'NF > 11 && $9 !~ /—/ && $10 !~ /—/ && $11 !~ /—/' | wc -l)
if [ "$split_rows" != 6 ]; then
    echo "ci/setter-timer.sh: update-after-writes printed $split_rows split rows of the 6 expected:" >&2
    cat "$out/update.md" >&2
    exit 1
fi
sed -n '/split in the same call/,/^| 1000 |/p' "$out/update.md"
printf '%s\n' "$after"
# update-loop split by the stand-in, and with its kernel-node setters skipped (RCB_SETTER_TIMER_SKIP=1):
# nothing inside the setters then (no clock read) and no call reaching the software GPU's setter
# (its own count, HIPSIM_STATS=1), each call still pushing every touched node through the
# stand-in once (rcb-bench checks the count); any other scenario is refused on a skipping one.
loop_row() {
    HIPSIM_STATS=1 RCB_SETTER_TIMER_SKIP=$1 RCB_BENCH_LOOP_ONLY="1000 primary" RCB_BACKEND=hip \
        RCB_HIP_LIBRARY="$out/libsetter_timer.so" "$lib_dir/rcb-bench" --quick update-loop > "$out/loop$1.md" 2> "$out/loop$1.err"
    grep -E '^\| 1000 \| primary \| 100 \|' "$out/loop$1.md" || true
}
timed=$(loop_row 0)
skipped=$(loop_row 1)
inside() { printf '%s\n' "$1" | awk -F'|' 'NF == 10 { gsub(/ /, "", $8); print $8 }'; }
# The software GPU's own count of exec kernel-node setter calls: 21 calls of 100 touched nodes.
reached() { awk '$1 == "hipGraphExecKernelNodeSetParams" { n = $2 } END { print n + 0 }' "$out/loop$1.err"; }
if [ -z "$(inside "$timed")" ] || [ "$(inside "$timed")" = 0ns ] || [ "$(reached 0)" != 2100 ] ||
    [ "$(inside "$skipped")" != 0ns ] || [ "$(reached 1)" != 0 ]; then
    echo "ci/setter-timer.sh: update-loop's split rows are not as expected (timed: time inside the setters and" \
        "2100 calls reaching the software GPU's setter, $(reached 0) did; skipped: none of either, $(reached 1) did)" >&2
    cat "$out/loop0.md" "$out/loop0.err" "$out/loop1.md" "$out/loop1.err" >&2
    exit 1
fi
if RCB_SETTER_TIMER_SKIP=1 RCB_BACKEND=hip RCB_HIP_LIBRARY="$out/libsetter_timer.so" "$lib_dir/rcb-bench" --quick update \
    > "$out/refused.md" 2>&1 || [ $? != 2 ] || ! grep -q 'only update-loop can run on, not update' "$out/refused.md"; then
    echo "ci/setter-timer.sh: rcb-bench update ran, or failed otherwise than refused, with the kernel-node setters skipped:" >&2
    cat "$out/refused.md" >&2
    exit 1
fi
printf '%s\n%s\n' "$timed" "$skipped"
echo "setter timer: the split table has its rows, every call pushed through the stand-in's setters once per touched node, update-loop is split and its skipped setters take no time and reach no setter of the software GPU, and a skipping stand-in runs nothing else"

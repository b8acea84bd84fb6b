#!/usr/bin/env bash
# Applies the rocm_cmdbuf patch series to an XLA checkout, in order, with `git apply`.
#
#   xla-patches/apply.sh [--check] XLA_DIR
#
# XLA_DIR is a git checkout of ROCm/xla. The series is tested on two commits:
#   183fa00cb5d82384463a1a7aed1ab06bc9026974  main (DebugOptions "Next id: 540")
#   b6351b25ef2e9d09e4066da8c213f1b7afde1758  rocm-jaxlib-v0.11.1 (jaxlib 0.11.1, "Next id: 534")
# Another commit gets a warning, and the series is applied if it fits. The flag patch exists once
# per target (their xla.proto differs); the right one is chosen from the checkout's xla.proto.
# 0008 (the VMM pool's results defined after their copy back) is applied only where
# GpuExecutable keeps a buffer definition plan (main; not rocm-jaxlib-v0.11.1).
# The patches are numbered [PATCH n/8] on both targets: 0003 to 0007 are one file for both,
# so their numbers cannot differ per target; on rocm-jaxlib-v0.11.1 the series is 1/8 to 7/8,
# with no 8/8, because 0008 is main-only.
#
# The whole series is first checked against the checkout's HEAD in a temporary index, so either
# every patch applies or nothing is changed. A tree with uncommitted changes to tracked files is
# refused (commit or stash them first). --check only tests that the series applies.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

usage() { echo "usage: $0 [--check] XLA_DIR" >&2; exit 2; }
check_only=0
[ "${1:-}" = "--check" ] && { check_only=1; shift; }
[ $# -eq 1 ] || usage
xla=$1
git -C "$xla" rev-parse --git-dir >/dev/null 2>&1 || { echo "$0: $xla is not a git checkout of XLA" >&2; exit 1; }
xla=$(cd "$xla" && git rev-parse --show-toplevel)
[ -f "$xla/xla/xla.proto" ] || { echo "$0: $xla has no xla/xla.proto: not an XLA checkout" >&2; exit 1; }

main_commit=183fa00cb5d82384463a1a7aed1ab06bc9026974
release_commit=b6351b25ef2e9d09e4066da8c213f1b7afde1758
head=$(git -C "$xla" rev-parse HEAD)
case $head in
    "$main_commit") target="main at ${main_commit:0:10}" ;;
    "$release_commit") target="rocm-jaxlib-v0.11.1 at ${release_commit:0:10}" ;;
    *)
        target="unsupported commit ${head:0:10}"
        echo "warning: $xla is at $head; the series is tested on ROCm/xla main at $main_commit" \
            "and on rocm-jaxlib-v0.11.1 at $release_commit" >&2
        ;;
esac

if grep -q 'optional bool xla_gpu_rocm_cmdbuf = ' "$xla/xla/xla.proto"; then
    echo "$0: $xla already has the rocm_cmdbuf flags: the series is already applied" >&2
    exit 1
elif grep -q '^  // Next id: 540$' "$xla/xla/xla.proto"; then
    flags=0002-rocm_cmdbuf-flags.main-183fa00.patch
elif grep -q '^  // Next id: 534$' "$xla/xla/xla.proto"; then
    flags=0002-rocm_cmdbuf-flags.rocm-jaxlib-v0.11.1.patch
else
    echo "$0: xla/xla.proto's DebugOptions is neither at \"Next id: 540\" (main) nor at" \
        "\"Next id: 534\" (rocm-jaxlib-v0.11.1): no flag patch fits this checkout" >&2
    exit 1
fi
series=(0001-rocm_cmdbuf-build-rule.patch "$flags" 0003-rocm_cmdbuf-command-buffer.patch
    0004-rocm_cmdbuf-update-in-place.patch 0005-rocm_cmdbuf-traced-commands-and-streams.patch
    0006-rocm_cmdbuf-profiler.patch 0007-rocm_cmdbuf-vmm-pool.patch)
if grep -q 'ThunkExecutor::DefinitionPlan definition_plan_;' "$xla/xla/service/gpu/gpu_executable.h"; then
    series+=(0008-rocm_cmdbuf-vmm-pool-definitions.patch)
fi

if [ $check_only -eq 0 ] && [ -n "$(git -C "$xla" status --porcelain --untracked-files=no)" ]; then
    echo "$0: $xla has uncommitted changes to tracked files; commit or stash them first" >&2
    exit 1
fi

# The series against HEAD in a throw-away index: later patches edit files earlier ones create.
index=$(mktemp)
trap 'rm -f "$index"' EXIT
GIT_INDEX_FILE=$index git -C "$xla" read-tree HEAD
for patch in "${series[@]}"; do
    if ! GIT_INDEX_FILE=$index git -C "$xla" apply --cached "$here/$patch"; then
        echo "$0: $patch does not apply to $xla ($target); nothing was changed" >&2
        exit 1
    fi
done
# Files the series creates must not exist untracked in the work tree.
for patch in "${series[@]}"; do
    while read -r path; do
        if [ -e "$xla/$path" ]; then
            echo "$0: $path already exists in $xla (untracked); remove it first" >&2
            exit 1
        fi
    done < <(sed -n 's|^+++ b/\(.*\)|\1|p' "$here/$patch" | while read -r p; do
        grep -q "^--- /dev/null" <(grep -B1 "^+++ b/$p\$" "$here/$patch") && echo "$p"; done)
done

if [ $check_only -eq 1 ]; then
    echo "the series applies to $xla ($target): ${series[*]}"
    exit 0
fi
for patch in "${series[@]}"; do
    git -C "$xla" apply "$here/$patch"
    echo "applied $patch"
done
echo "the series is applied to $xla ($target); build with ROCM_CMDBUF_PATH set (see xla-patches/README.md)"

#!/usr/bin/env bash
# Regenerates include/rocm_cmdbuf.h with the pinned cbindgen; `--verify` fails instead of
# writing when the committed header is stale. Also checks the header's version macros.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--verify" ]; then
    fresh=$(mktemp)
    trap 'rm -f "$fresh"' EXIT
    cbindgen -q --config cbindgen.toml --crate rocm_cmdbuf --output "$fresh"
    if ! cmp -s "$fresh" include/rocm_cmdbuf.h; then
        diff -u include/rocm_cmdbuf.h "$fresh" | head -40
        echo "include/rocm_cmdbuf.h is stale: run 'bash ci/header.sh' and commit the result"
        exit 1
    fi
else
    cbindgen -q --config cbindgen.toml --crate rocm_cmdbuf --output include/rocm_cmdbuf.h
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IFS=. read -r major minor patch <<<"$version"
for part in "MAJOR $major" "MINOR $minor" "PATCH $patch"; do
    set -- $part
    grep -q "^#define RCB_VERSION_$1 $2\$" include/rocm_cmdbuf.h ||
        { echo "RCB_VERSION_$1 in cbindgen.toml does not match Cargo.toml version $version"; exit 1; }
done

#!/usr/bin/env bash
# Builds the library (release; --debug: the dev profile) and installs it under PREFIX:
#   lib/librocm_cmdbuf.so.VERSION, librocm_cmdbuf.so.0 -> it, librocm_cmdbuf.so -> .so.0
#   lib/librocm_cmdbuf_preload.so
#   include/rocm_cmdbuf.h, include/rocm_cmdbuf.hpp (when present)
#   share/rocm_cmdbuf/BUILD.bazel (bazel/rocm_cmdbuf.BUILD; XLA reads ROCM_CMDBUF_PATH=PREFIX)
# Running it again over the same PREFIX gives the same result.
set -euo pipefail
usage() { echo "usage: $0 PREFIX [--debug]   (PREFIX: an absolute path)" >&2; exit 2; }
prefix="${1:-}"
case "$prefix" in /*) ;; *) usage ;; esac
profile=release
case "${2:-}" in "") ;; --debug) profile=debug ;; *) usage ;; esac
[ $# -le 2 ] || usage
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
[ -n "$version" ] || { echo "$0: no version in Cargo.toml" >&2; exit 1; }
flags=(--release)
[ "$profile" = release ] || flags=()
cargo build "${flags[@]}" --quiet --lib -p rocm_cmdbuf -p rocm_cmdbuf_preload
built="${CARGO_TARGET_DIR:-target}/$profile"
readelf -d "$built/librocm_cmdbuf.so" | grep -q 'Library soname: \[librocm_cmdbuf.so.0\]' ||
    { echo "$0: $built/librocm_cmdbuf.so has no SONAME librocm_cmdbuf.so.0" >&2; exit 1; }

install -d "$prefix/lib" "$prefix/include" "$prefix/share/rocm_cmdbuf"
install -m 0755 "$built/librocm_cmdbuf.so" "$prefix/lib/librocm_cmdbuf.so.$version"
ln -sfn "librocm_cmdbuf.so.$version" "$prefix/lib/librocm_cmdbuf.so.0"
ln -sfn librocm_cmdbuf.so.0 "$prefix/lib/librocm_cmdbuf.so"
install -m 0755 "$built/librocm_cmdbuf_preload.so" "$prefix/lib/librocm_cmdbuf_preload.so"
install -m 0644 include/rocm_cmdbuf.h "$prefix/include/rocm_cmdbuf.h"
if [ -f include/rocm_cmdbuf.hpp ]; then
    install -m 0644 include/rocm_cmdbuf.hpp "$prefix/include/rocm_cmdbuf.hpp"
else
    rm -f "$prefix/include/rocm_cmdbuf.hpp"
fi
install -m 0644 bazel/rocm_cmdbuf.BUILD "$prefix/share/rocm_cmdbuf/BUILD.bazel"

readelf -d "$prefix/lib/librocm_cmdbuf.so" | grep -q 'Library soname: \[librocm_cmdbuf.so.0\]' ||
    { echo "$0: installed library has the wrong SONAME" >&2; exit 1; }
echo "installed rocm_cmdbuf $version ($profile) in $prefix"

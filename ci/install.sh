#!/usr/bin/env bash
# Builds the library (release; --debug: the dev profile) and installs it under PREFIX:
#   lib/librocm_cmdbuf.so.VERSION, librocm_cmdbuf.so.0 -> it, librocm_cmdbuf.so -> .so.0
#   lib/librocm_cmdbuf_preload.so.VERSION, librocm_cmdbuf_preload.so.0 -> it, .so -> .so.0
#   include/rocm_cmdbuf.h, include/rocm_cmdbuf.hpp (when present)
#   lib/pkgconfig/rocm_cmdbuf.pc                                  (packaging/rocm_cmdbuf.pc.in)
#   lib/cmake/rocm_cmdbuf/rocm_cmdbufConfig.cmake, ...ConfigVersion.cmake (packaging/*.cmake.in):
#       the imported target rocm_cmdbuf::rocm_cmdbuf
#   share/rocm_cmdbuf/BUILD.bazel (bazel/rocm_cmdbuf.BUILD, for Bazel projects; XLA takes the headers from ROCM_CMDBUF_PATH=PREFIX)
#   share/doc/rocm_cmdbuf/LICENSE-MIT, LICENSE-APACHE, CHANGELOG.md (the licences travel with
#       the binaries they cover)
#   bin/rcb-doctor: says whether the library can work on this machine and how it is set
# VERSION is Cargo.toml's, the only place it is written; the templates get it from here.
# DESTDIR=DIR stages the files under DIR/PREFIX for a package (the files still name PREFIX).
# The build runs as the calling user; the copying runs under sudo only when the destination is
# not writable, and then the loader's cache is refreshed (ldconfig) if PREFIX/lib is in its path.
# Running it again over the same PREFIX gives the same result.
set -euo pipefail
usage() { echo "usage: [DESTDIR=DIR] $0 PREFIX [--debug]   (PREFIX: an absolute path)" >&2; exit 2; }
prefix="${1:-}"
case "$prefix" in /*) ;; *) usage ;; esac
prefix=${prefix%/}
[ -n "$prefix" ] || prefix=/
profile=release
case "${2:-}" in "") ;; --debug) profile=debug ;; *) usage ;; esac
[ $# -le 2 ] || usage
destdir=${DESTDIR:-}
case "$destdir" in "" | /*) ;; *) echo "$0: DESTDIR must be an absolute path" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
[[ "$version" =~ ^([0-9]+)\.[0-9]+\.[0-9]+$ ]] ||
    { echo "$0: Cargo.toml's version '$version' is not MAJOR.MINOR.PATCH" >&2; exit 1; }
major=${BASH_REMATCH[1]}
flags=(--release)
[ "$profile" = release ] || flags=()
cargo build "${flags[@]}" --quiet --lib --bin rcb-doctor -p rocm_cmdbuf -p rocm_cmdbuf_preload
built="${CARGO_TARGET_DIR:-target}/$profile"
soname=$(readelf -d "$built/librocm_cmdbuf.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "librocm_cmdbuf.so.$major" ] ||
    { echo "$0: $built/librocm_cmdbuf.so has SONAME '$soname', not librocm_cmdbuf.so.$major (Cargo.toml $version; build.rs sets it)" >&2; exit 1; }

# The generated files, with PREFIX and the version filled in.
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
escape() { printf '%s' "$1" | sed 's/[&|\\]/\\&/g'; }
for template in rocm_cmdbuf.pc rocm_cmdbufConfig.cmake rocm_cmdbufConfigVersion.cmake; do
    sed -e "s|@PREFIX@|$(escape "$prefix")|g" -e "s|@VERSION@|$version|g" -e "s|@MAJOR@|$major|g" \
        "packaging/$template.in" > "$gen/$template"
    if grep -n '@[A-Z]*@' "$gen/$template"; then
        echo "$0: packaging/$template.in has a placeholder this script does not fill" >&2
        exit 1
    fi
done

root="$destdir$prefix"
# Copy as root only if needed: the nearest existing directory of the destination is not writable.
as_root=()
existing="$root"
while [ ! -d "$existing" ]; do existing=$(dirname "$existing"); done
if [ "$(id -u)" -ne 0 ] && [ ! -w "$existing" ]; then
    as_root=(sudo)
    echo "$existing is not writable: installing with sudo"
fi
lib="$root/lib"
"${as_root[@]}" install -d "$lib/pkgconfig" "$lib/cmake/rocm_cmdbuf" "$root/include" "$root/share/rocm_cmdbuf" "$root/bin"
"${as_root[@]}" install -m 0755 "$built/librocm_cmdbuf.so" "$lib/librocm_cmdbuf.so.$version"
"${as_root[@]}" ln -sfn "librocm_cmdbuf.so.$version" "$lib/librocm_cmdbuf.so.$major"
"${as_root[@]}" ln -sfn "librocm_cmdbuf.so.$major" "$lib/librocm_cmdbuf.so"
"${as_root[@]}" install -m 0755 "$built/librocm_cmdbuf_preload.so" "$lib/librocm_cmdbuf_preload.so.$version"
"${as_root[@]}" ln -sfn "librocm_cmdbuf_preload.so.$version" "$lib/librocm_cmdbuf_preload.so.$major"
"${as_root[@]}" ln -sfn "librocm_cmdbuf_preload.so.$major" "$lib/librocm_cmdbuf_preload.so"
"${as_root[@]}" install -m 0755 "$built/rcb-doctor" "$root/bin/rcb-doctor"
"${as_root[@]}" install -m 0644 include/rocm_cmdbuf.h "$root/include/rocm_cmdbuf.h"
if [ -f include/rocm_cmdbuf.hpp ]; then
    "${as_root[@]}" install -m 0644 include/rocm_cmdbuf.hpp "$root/include/rocm_cmdbuf.hpp"
else
    "${as_root[@]}" rm -f "$root/include/rocm_cmdbuf.hpp"
fi
"${as_root[@]}" install -m 0644 "$gen/rocm_cmdbuf.pc" "$lib/pkgconfig/rocm_cmdbuf.pc"
"${as_root[@]}" install -m 0644 "$gen/rocm_cmdbufConfig.cmake" "$gen/rocm_cmdbufConfigVersion.cmake" \
    "$lib/cmake/rocm_cmdbuf/"
"${as_root[@]}" install -m 0644 bazel/rocm_cmdbuf.BUILD "$root/share/rocm_cmdbuf/BUILD.bazel"
"${as_root[@]}" install -d "$root/share/doc/rocm_cmdbuf"
"${as_root[@]}" install -m 0644 LICENSE-MIT LICENSE-APACHE CHANGELOG.md "$root/share/doc/rocm_cmdbuf/"

for name in librocm_cmdbuf librocm_cmdbuf_preload; do
    readelf -d "$lib/$name.so" | grep -q "Library soname: \[$name.so.$major\]" ||
        { echo "$0: installed $name.so has the wrong SONAME" >&2; exit 1; }
done
# A directory the loader reads from its cache (/usr/local/lib on Debian, an /etc/ld.so.conf.d
# entry for /opt/...) needs the cache refreshed before programs find the new SONAME.
ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
if [ -z "$destdir" ] && [ -x "$ldconfig" ] &&
    "$ldconfig" -v -N -X 2>/dev/null | awk -F: -v dir="$prefix/lib" '$1 == dir {found = 1} END {exit !found}'; then
    if [ "$(id -u)" -eq 0 ] || [ ${#as_root[@]} -gt 0 ]; then
        "${as_root[@]}" "$ldconfig"
    else
        echo "$prefix/lib is in the loader's path: run 'sudo ldconfig' to refresh its cache"
    fi
fi
echo "installed rocm_cmdbuf $version ($profile) in $root"

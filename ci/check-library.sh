#!/usr/bin/env bash
# Checks the libraries in $1 (target/<profile>, or an installed PREFIX/lib): the main library's
# SONAME, that it does not depend on libamdhip64 (the runtime is loaded at run time), and that its
# exports carry the versions of abi/librocm_cmdbuf.map: each function the header declares has the
# node the map lists it in as its default version (NAME@@NODE), and every other version of a name
# (NAME@NODE, kept for programs linked before) is of a declared function and a node of the map;
# then what a distribution checks in both libraries: the main one exports nothing but rcb_*, the
# preload one has its SONAME and exactly its interposers (HIP's and dlsym), unversioned; no
# RPATH/RUNPATH, no text relocations, no executable stack, no dependencies beyond the C runtime.
set -euo pipefail
dir=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
lib="$dir/librocm_cmdbuf.so"
preload="$dir/librocm_cmdbuf_preload.so"
readelf -d "$lib" | grep -q 'Library soname: \[librocm_cmdbuf.so.0\]' || { echo "$lib: SONAME is not librocm_cmdbuf.so.0"; exit 1; }
if readelf -d "$lib" | grep NEEDED | grep -q amdhip64; then
    echo "$lib links libamdhip64 at load time; it must only dlopen it"
    exit 1
fi
exports=$(nm -D --defined-only "$lib" | awk '{print $3}')
declared=$(grep -oE '\brcb_[a-z0-9_]+\(' include/rocm_cmdbuf.h | tr -d '(' | sort -u)
# NAME@@NODE for every function the map lists (comments removed; one name a line, as written).
listed=$(perl -0pe 's{/\*.*?\*/}{}gs' abi/librocm_cmdbuf.map |
    awk '/^[A-Za-z_][A-Za-z0-9_.]* *\{/ {node = $1} /^ *rcb_[a-z0-9_]+; *$/ {sub(/;.*/, "", $1); print $1 "@@" node}' | sort)
nodes=$(perl -0pe 's{/\*.*?\*/}{}gs' abi/librocm_cmdbuf.map | awk '/^[A-Za-z_][A-Za-z0-9_.]* *\{/ {print $1}')
unversioned=$(grep -E '^rcb_[a-z0-9_]+$' <<<"$exports" || true)
[ -z "$unversioned" ] || { echo "$lib exports without a version node (list them in abi/librocm_cmdbuf.map):"; echo "$unversioned"; exit 1; }
defaults=$(grep '@@' <<<"$exports" | sort)
if [ "$defaults" != "$listed" ]; then
    echo "default versions of the exports and abi/librocm_cmdbuf.map differ (< exported, > listed):"
    diff <(echo "$defaults") <(echo "$listed") || true
    exit 1
fi
if [ "$(sed 's/@@.*//' <<<"$listed" | sort)" != "$declared" ]; then
    echo "functions of abi/librocm_cmdbuf.map and header declarations differ (< listed, > declared):"
    diff <(sed 's/@@.*//' <<<"$listed" | sort) <(echo "$declared") || true
    exit 1
fi
older=$(grep -E '^rcb_[a-z0-9_]+@[^@]' <<<"$exports" || true)
while IFS=@ read -r name node; do
    [ -n "$name" ] || continue
    grep -qx "$name" <<<"$declared" && grep -qx "$node" <<<"$nodes" ||
        { echo "$lib: $name@$node is no older version of a declared function in a node of abi/librocm_cmdbuf.map"; exit 1; }
done <<<"$older"
echo "library checks passed: SONAME, no libamdhip64 dependency, $(wc -l <<<"$defaults") exports match the header, each with its node of abi/librocm_cmdbuf.map as default version ($(grep -c . <<<"$older" || true) older versions kept)"

# rustc hands the linker its own version script for a cdylib (the #[no_mangle] extern functions
# global, everything else local), and abi/librocm_cmdbuf.map ends in `local: *`, so no Rust,
# allocator or dependency symbol should leak.
others=$(nm -D --defined-only "$lib" | awk '$3 !~ /^rcb_/ {print $2, $3}')
[ -z "$others" ] || { echo "$lib exports symbols other than rcb_*:"; echo "$others"; exit 1; }
readelf -d "$preload" | grep -q 'Library soname: \[librocm_cmdbuf_preload.so.0\]' ||
    { echo "$preload: SONAME is not librocm_cmdbuf_preload.so.0"; exit 1; }
# dlsym too: lookups of the five in a HIP runtime's own handle get them bound to that runtime.
# Unversioned: a program references them with its HIP's or C library's version
# (hipStreamCreate@hip_4.2, dlsym@GLIBC_2.34), which binds only to a definition of that version or
# of none (preload/build.rs).
interposers=$'dlsym\nhipDeviceReset\nhipStreamCreate\nhipStreamCreateWithFlags\nhipStreamCreateWithPriority\nhipStreamDestroy'
preload_exports=$(nm -D --defined-only "$preload" | awk '{print $3}' | sort)
if [ "$preload_exports" != "$interposers" ]; then
    echo "$preload must export exactly the interposers, without a version (< exported, > expected):"
    diff <(echo "$preload_exports") <(echo "$interposers") || true
    exit 1
fi
for so in "$lib" "$preload"; do
    dynamic=$(readelf -dW "$so")
    if grep -E '\((RPATH|RUNPATH)\)' <<<"$dynamic"; then echo "$so: has an RPATH/RUNPATH"; exit 1; fi
    if grep TEXTREL <<<"$dynamic"; then echo "$so: has text relocations"; exit 1; fi
    needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dynamic" |
        grep -vxE 'libc\.so\.6|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0' || true)
    [ -z "$needed" ] || { echo "$so: depends on more than the C runtime: $needed"; exit 1; }
    readelf -lW "$so" | awk '$1 == "GNU_STACK" && $7 !~ /E/ {ok = 1} END {exit !ok}' ||
        { echo "$so: no GNU_STACK header or an executable stack"; exit 1; }
done
echo "hygiene: only rcb_* exported, the preload (librocm_cmdbuf_preload.so.0) exports only $(echo "$interposers" | wc -l) interposers (HIP's and dlsym), unversioned, no RPATH/RUNPATH, no TEXTREL, no executable stack, C runtime dependencies only"

# Every export's body must run inside the panic boundary: the first statement after the
# signature of each `extern "C" fn` in src/ffi/ is a call to boundary() or boundary_value().
unguarded=$(awk '
    /extern "C" fn rcb_/ { name = $0; sub(/.*fn /, "", name); sub(/\(.*/, "", name); pending = 1; body = 0 }
    pending && !body { if ($0 ~ /\{[[:space:]]*$/) body = 1; next }
    pending && body && NF {
        if ($0 !~ /boundary(_value)?\(/) print FILENAME ": " name
        pending = 0
    }
' $(find src/ffi -name '*.rs'))
if [ -n "$unguarded" ]; then
    echo "exports whose body does not start with boundary(...):"
    echo "$unguarded"
    exit 1
fi
echo "every export runs inside the panic boundary"

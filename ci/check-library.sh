#!/usr/bin/env bash
# Checks the built cdylib in $1 (target/<profile>): its SONAME, that it does not depend on
# libamdhip64 (the runtime is loaded at run time), and that its exported rcb_* functions are
# exactly the functions the header declares.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$1/librocm_cmdbuf.so"
readelf -d "$lib" | grep -q 'Library soname: \[librocm_cmdbuf.so.0\]' || { echo "$lib: SONAME is not librocm_cmdbuf.so.0"; exit 1; }
if readelf -d "$lib" | grep NEEDED | grep -q amdhip64; then
    echo "$lib links libamdhip64 at load time; it must only dlopen it"
    exit 1
fi
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^rcb_/ {print $3}' | sort)
declared=$(grep -oE '\brcb_[a-z0-9_]+\(' include/rocm_cmdbuf.h | tr -d '(' | sort -u)
if [ "$exported" != "$declared" ]; then
    echo "exported rcb_* symbols and header declarations differ (< exported only, > declared only):"
    diff <(echo "$exported") <(echo "$declared") || true
    exit 1
fi
echo "library checks passed: SONAME, no libamdhip64 dependency, $(echo "$exported" | wc -l) exports match the header"

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

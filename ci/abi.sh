#!/usr/bin/env bash
# The C ABI of librocm_cmdbuf.so against the committed baseline abi/librocm_cmdbuf.abi, with
# Debian's libabigail (abidw, abidiff) and ci/abi-compare.py, and the header's constants against
# abi/constants.txt.
#
#   ci/abi.sh [LIB_DIR]            check the library in LIB_DIR (default target/debug, built first)
#   ci/abi.sh --update [LIB_DIR]   write the baseline and the constants from it instead
#
# What is compared: the library's exports with their symbol versions and its SONAME, every
# function's signature, and every type of include/rocm_cmdbuf.h, used or not. libabigail reads
# types from C's debug information; the Rust library's own describes Rust types (module paths,
# the internals of every crate), which change with the toolchain and with refactorings that
# leave the C ABI alone. So the corpus is read from a stand-in: every function of the header
# compiled from the header with `gcc -g`, linked with the library's SONAME and
# abi/librocm_cmdbuf.map, with the library's older versions (NAME@NODE) as stubs, and checked to
# export exactly what the library exports, versions included. (The header is generated from the
# Rust types, and ci/check-library.sh checks that the exports are its functions.)
#
# Every value of the header is a #define (status codes, argument kinds, fallback reasons,
# backends, limits), which libabigail never sees: a program compiled with the header prints each
# one as programs get it, into the list abi/constants.txt, which is part of the baseline.
#
# ci/abi-compare.py applies the policy of docs/c-api.md, "What a release may change", to two recordings: additions are
# compatible (exports, functions, types; fields appended to a sized struct, one declared with
# sized_struct! in src/ffi/, at or past its old size, never in its tail padding; constants; a
# *_VERSION constant raised); any other change is not (a sized struct's existing fields changing
# name, offset or type, a record changing at all, a constant's value changing, a removal).
# libabigail compares them too, and a difference only it finds counts as incompatible. The check
# fails when
#   1. the library's ABI differs from the baseline at all: regenerate the baseline (--update) and
#      commit it with a CHANGELOG.md entry; the report lists the changes, compatible or not;
#   2. the baseline changed (uncommitted: against HEAD's; otherwise in the last commit that
#      changed one of its files) without CHANGELOG.md changing with it;
#   3. the baseline is incompatible with the last release's, that of the newest tag v* in the
#      history, and the SONAME is the same (an incompatible change needs a new major version:
#      docs/c-api.md, "What a release may change"). Every change in between counts, not only the last. Before the
#      first tag nothing is released and nothing is refused here; a CHANGELOG.md that lists a
#      tagged version whose tag the clone lacks (a shallow clone) fails, never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
git rev-parse --git-dir >/dev/null 2>&1 || { echo "ci/abi.sh: needs a git checkout (the baseline's history, the release tags)"; exit 2; }
update=0
if [ "${1:-}" = "--update" ]; then update=1; shift; fi
dir=${1:-target/debug}
if [ -z "${1:-}" ]; then cargo build --quiet --lib -p rocm_cmdbuf; fi
lib="$(cd "$dir" && pwd)/librocm_cmdbuf.so"
[ -f "$lib" ] || { echo "ci/abi.sh: no $lib (cargo build --lib -p rocm_cmdbuf)"; exit 2; }
bash ci/apt-install.sh abigail-tools gcc
baseline=abi/librocm_cmdbuf.abi
constants=abi/constants.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The stand-in: each prototype of the header as a definition that returns 0, each older version
# of a name as a stub of no parameters (what src/ffi/unsized_abi.rs exports), named after it.
exports=$(nm -D --defined-only "$lib" | awk '$3 ~ /^rcb_/ {print $3}' | sort)
{
    echo '#include "rocm_cmdbuf.h"'
    perl -0ne 's{/\*.*?\*/}{}gs; while (/^((?:const )?[a-z_]+ \**)(rcb_\w+)\(([^;]*?)\);/mg) { print "$1$2($3) { return 0; }\n" }' \
        include/rocm_cmdbuf.h
    grep -E '^rcb_[a-z0-9_]+@[^@]' <<<"$exports" | while IFS=@ read -r name node; do
        stub="${name}__${node//./_}"
        echo "rcb_status $stub(void) { return 0; }"
        echo "__asm__(\".symver $stub, $name@$node, remove\");"
    done
} >"$work/standin.c"
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
mkdir "$work/standin"
# Compiled in its directory, so that the debug information names it without the temporary path.
root=$PWD
(cd "$work" && gcc -std=c11 -g -O0 -fno-eliminate-unused-debug-types -shared -fPIC -w -I"$root/include" standin.c -o standin/librocm_cmdbuf.so \
    -Wl,-soname,"$soname" -Wl,--version-script="$root/abi/librocm_cmdbuf.map")
standin_exports=$(nm -D --defined-only "$work/standin/librocm_cmdbuf.so" | awk '$3 ~ /^rcb_/ {print $3}' | sort)
if [ "$standin_exports" != "$exports" ]; then
    echo "ci/abi.sh: the stand-in does not export what $lib does (< library, > stand-in):"
    diff <(echo "$exports") <(echo "$standin_exports") || true
    exit 1
fi
# Every type of the header, also those no function takes (rcb_arg_allocation).
abidw --load-all-types --no-corpus-path --no-comp-dir-path --no-show-locs --no-elf-needed --type-id-style hash \
    --out-file "$work/current.abi" "$work/standin/librocm_cmdbuf.so"
python3 ci/abi-compare.py check "$work/current.abi"

# The constants: every #define of the header with a value but its own version (RCB_VERSION_*,
# which ci/header.sh checks against Cargo.toml), as a program compiled with it sees them
# ((1 << 24) is 16777216, UINT32_MAX 4294967295). A constant that is not an integer fails to
# compile here: the list would have to learn its kind.
{
    echo '#include <stdio.h>'
    echo '#include "rocm_cmdbuf.h"'
    echo 'int main(void) {'
    sed -n 's/^#define \([A-Za-z_][A-Za-z0-9_]*\) .*/\1/p' include/rocm_cmdbuf.h | grep -v '^RCB_VERSION_' | sort |
        while read -r name; do
            echo "    if (($name) < 0) printf(\"$name %lld\\n\", (long long)($name));"
            echo "    else printf(\"$name %llu\\n\", (unsigned long long)($name));"
        done
    echo '    return 0;'
    echo '}'
} >"$work/constants.c"
gcc -std=c11 -w -Iinclude "$work/constants.c" -o "$work/constants"
{
    echo "# NAME VALUE: every constant (#define) of include/rocm_cmdbuf.h but RCB_VERSION_*, as programs"
    echo "# compiled with it get it. Written by bash ci/abi.sh --update; ci/abi.sh compares it."
    "$work/constants"
} >"$work/constants.txt"

if [ "$update" = 1 ]; then
    cp "$work/current.abi" "$baseline"
    cp "$work/constants.txt" "$constants"
    echo "wrote $baseline ($(grep -c '<elf-symbol ' "$baseline") symbols, SONAME $soname) and $constants ($(grep -vc '^#' "$constants") constants)"
    exit 0
fi
[ -f "$baseline" ] || { echo "ci/abi.sh: no $baseline (ci/abi.sh --update writes it)"; exit 1; }
[ -f "$constants" ] || { echo "ci/abi.sh: no $constants (ci/abi.sh --update writes it)"; exit 1; }

# What changed from the ABI in $1 (constants in $2) to that in $3 (constants in $4), by the rules
# of docs/c-api.md's "What a release may change" (ci/abi-compare.py, which takes the sized structs from
# src/ffi/): prints the changes and returns 0 (none), 1 (all compatible), 2 (one is not) or 3 (no
# verdict). libabigail compares the two as well; a difference it finds that the comparison does
# not is counted as incompatible, never let through.
compare() {
    local verdict=0 report
    python3 ci/abi-compare.py compare "$1" "$2" "$3" "$4" || verdict=$?
    [ "$verdict" -le 2 ] || return 3
    if [ "$verdict" = 0 ] && ! report=$(abidiff --no-show-locs "$1" "$3"); then
        echo "incompatible: libabigail finds a difference that ci/abi-compare.py does not place:"
        sed 's/^/    /' <<<"$report"
        verdict=2
    fi
    return "$verdict"
}

status=0
verdict=0
report=$(compare "$baseline" "$constants" "$work/current.abi" "$work/constants.txt") || verdict=$?
case $verdict in
    3) echo "$report"; exit 2 ;;
    0) echo "ABI: the library matches $baseline ($(grep -c '<elf-symbol ' "$baseline") symbols, SONAME $soname) and $constants ($(grep -vc '^#' "$constants") constants)" ;;
    *)
        echo "ABI: the library differs from $baseline and $constants:"
        sed 's/^/    /' <<<"$report"
        if [ "$verdict" = 2 ]; then
            echo "The difference is incompatible: it removes or changes what programs use."
        else
            echo "The difference is compatible: only additions (exports, functions, types, constants, fields appended to sized structs)."
        fi
        echo "If it is intended: bash ci/abi.sh --update, and commit the baseline with a CHANGELOG.md entry;"
        echo "an incompatible change also needs a new SONAME, a new major version (docs/c-api.md, \"What a release may change\")."
        status=1
        ;;
esac

# 2. CHANGELOG.md with the baseline's last change.
if ! git diff --quiet HEAD -- "$baseline" "$constants"; then
    change="the uncommitted change"
    before=HEAD
    changed_files=$(git diff --name-only HEAD)
else
    last=$(git log -1 --format=%H -- "$baseline" "$constants")
    change="commit ${last:0:12}"
    before="$last^"
    changed_files=$(git diff --name-only "$last^" "$last" 2>/dev/null || true)
fi
if ! git rev-parse -q --verify "$before^{commit}" >/dev/null; then
    echo "Changelog: the baseline's last change is not in this clone (a shallow clone): whether CHANGELOG.md came with it is not checked"
elif ! git cat-file -e "$before:$baseline" 2>/dev/null; then
    echo "Changelog: $change made the baseline"
else
    git show "$before:$baseline" >"$work/previous.abi"
    git show "$before:$constants" >"$work/previous-constants.txt" 2>/dev/null || true
    verdict=0
    report=$(compare "$work/previous.abi" "$work/previous-constants.txt" "$baseline" "$constants") || verdict=$?
    [ "$verdict" != 3 ] || { echo "$report"; exit 2; }
    if [ "$verdict" = 0 ]; then
        echo "Changelog: $change left the ABI the baseline records as it was"
    elif grep -qx CHANGELOG.md <<<"$changed_files"; then
        echo "Changelog: $change changed the ABI, with CHANGELOG.md"
    else
        echo "$baseline or $constants changed in $change without CHANGELOG.md: list the change under Added or Changed"
        status=1
    fi
fi

# 3. The release gate: the baseline against the last release's, whatever came in between.
soname_of() { sed -n "1s/.* soname='\([^']*\)'.*/\1/p" "$1"; }
tag=$(git tag --list 'v[0-9]*' --merged HEAD --sort=-version:refname | head -1)
released=$(grep -E '^## v?[0-9]+\.[0-9]+\.[0-9]+' CHANGELOG.md | grep -v 'not yet tagged' | head -1 |
    sed -E 's/^## v?([0-9]+\.[0-9]+\.[0-9]+).*/\1/' || true)
if [ -n "$tag" ]; then
    if [ -n "$released" ] && [ "v$released" != "$tag" ]; then
        echo "Release gate: the newest tag in the history is $tag, but CHANGELOG.md's last release is $released: fetch the tags (git fetch --tags)"
        exit 1
    fi
    git show "$tag:$baseline" >"$work/released.abi" || { echo "ci/abi.sh: $tag has no $baseline"; exit 1; }
    git show "$tag:$constants" >"$work/released-constants.txt" || { echo "ci/abi.sh: $tag has no $constants"; exit 1; }
    verdict=0
    report=$(compare "$work/released.abi" "$work/released-constants.txt" "$baseline" "$constants") || verdict=$?
    [ "$verdict" != 3 ] || { echo "$report"; exit 2; }
    old_soname=$(soname_of "$work/released.abi")
    new_soname=$(soname_of "$baseline")
    case $verdict in
        0) echo "Release gate: the ABI is that of the release $tag" ;;
        1) echo "Release gate: the ABI adds to that of the release $tag (compatible)" ;;
        *)
            if [ "$old_soname" != "$new_soname" ]; then
                echo "Release gate: the ABI is incompatible with that of $tag, under a new SONAME ($old_soname -> $new_soname)"
            else
                echo "Release gate: the ABI is incompatible with that of the release $tag and keeps its SONAME $new_soname:"
                sed 's/^/    /' <<<"$report"
                echo "Programs linked against $new_soname would load the new library and misbehave. Keep the old functions"
                echo "and structs (docs/c-api.md, \"Versions\"), or make a new major version with a new SONAME."
                status=1
            fi
            ;;
    esac
elif [ -n "$released" ]; then
    echo "Release gate: CHANGELOG.md lists the release $released, but no tag v* is in this clone's history"
    echo "(a shallow clone, or the tags were not fetched): fetch them (git fetch --tags --unshallow) to compare with it."
    status=1
else
    echo "Release gate: nothing is released (no tag v* in the history; CHANGELOG.md lists no tagged version), so no"
    echo "change is refused for breaking a release; from the first tag on, the ABI is compared with that tag's."
fi
exit $status

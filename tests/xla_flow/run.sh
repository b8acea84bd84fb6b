#!/usr/bin/env bash
# Builds each program of tests/xla_flow (one per *.cpp: C++17, against include/rocm_cmdbuf.hpp
# and the cdylib in $1, i.e. target/<profile>) under -Wall -Wextra -Werror, plain and with
# ASan+UBSan, and runs them on the software GPU ($1/libamdhip64.so). The programs that compile
# the patch series' loader (patched.sh extracts it with the series' other compiled files) do not
# link the library (--as-needed drops it) and open it as the patched XLA does; flags.cpp runs
# again where the library cannot be opened, where the file found lacks its functions and where
# its version has another interface, and so does the case of 0003's rocm_cmdbuf_library_test that
# starts before the first load. The series' xla_cc_tests (every *_test.cc a patch adds) are
# built with the file each tests against the same stand-ins and GoogleTest, and run the same way;
# gtest_skips.cc, linked into each, prints a SKIPPED line for every test that skips. Each runs
# shuffled (--gtest_shuffle, as XLA runs its tests), also built without ROCM_CMDBUF_AVAILABLE as
# XLA's default build compiles it, and fails when it ran no case unless its BUILD target allows it.
# First checks that the loader's table has every function
# of include/rocm_cmdbuf.h. With
# --build-only OUT_DIR it only builds the plain binaries, as OUT_DIR/xla_flow-<name> (ci/gpu.sh
# stages them for the GPU machine, where ci/gpu-run.sh runs them with RCB_BACKEND=cuda).
set -euo pipefail
build_only=""
if [ "${1:-}" = "--build-only" ]; then build_only=$2; shift 2; fi
lib_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
patched=$(mktemp -d)
trap 'rm -rf "$patched"' EXIT
bash "$here/patched.sh" "$patched"

# The loader's table (0003's rocm_cmdbuf_library.cc, which defines the functions of
# rocm_cmdbuf.h in XLA in place of the library's) names every function the header declares:
# the compiler checks each entry's prototype against the header, not that none is missing.
table=$(grep -o 'X([^,]*, rcb_[a-z0-9_]*,' "$patched/xla/stream_executor/rocm/rocm_cmdbuf_library.cc" |
    sed 's/.*, \(rcb_[a-z0-9_]*\),$/\1/' | sort)
declared=$(grep -v '^typedef' "$root/include/rocm_cmdbuf.h" |
    sed -n 's/^[A-Za-z_][A-Za-z0-9_ *]*[ *]\(rcb_[a-z0-9_]*\)(.*/\1/p' | sort)
[ -n "$declared" ] || { echo "no function found in include/rocm_cmdbuf.h"; exit 1; }
if [ "$table" != "$declared" ]; then
    echo "the loader's table in xla-patches/0003 (rocm_cmdbuf_library.cc) differs from include/rocm_cmdbuf.h:"
    diff <(echo "$table") <(echo "$declared") | sed -n 's/^</  in the table only:/p; s/^>/  in the header only:/p'
    exit 1
fi
echo "the loader's table names the $(echo "$declared" | wc -l) functions of include/rocm_cmdbuf.h"
flags=(-std=c++17 -Wall -Wextra -Werror -pedantic -I"$root/include" -I"$here" -I"$patched" -I"$here/stubs")
programs=()
for src in "$here"/*.cpp; do programs+=("$(basename "$src" .cpp)"); done
# The series' xla_cc_tests: each *_test.cc a patch adds, in XLA's gtest style, built with the file
# it tests (its name without _test) against the stand-ins and Debian's GoogleTest, as
# xla_flow-xla_test-<name>, so that the GPU machine runs them with the programs.
xla_tests=()
while IFS= read -r t; do xla_tests+=("$t"); done < <(cd "$patched" && find xla -name '*_test.cc' | sort)
[ ${#xla_tests[@]} -gt 0 ] || { echo "no *_test.cc in the patch series"; exit 1; }
# Per test, the other files of the series it links, and one build per target where the
# targets differ: the profiler's correlation id is 64-bit on main, 32-bit on the release branch.
xla_test_extra() { # TEST
    case $1 in
    */rocm_cmdbuf_correlation_test.cc)
        echo "-DROCM_CMDBUF_AVAILABLE=1 $patched/xla/stream_executor/rocm/rocm_cmdbuf_library.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc" ;;
    */rocm_cmdbuf_flags_test.cc) echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_options.cc" ;;
    */rocm_cmdbuf_command_buffer_test.cc)
        echo "-DROCM_CMDBUF_AVAILABLE=1 $patched/xla/stream_executor/rocm/rocm_cmdbuf_library.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_options.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_bridge.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_move_log.cc" ;;
    */rocm_cmdbuf_library_test.cc)
        echo "-DROCM_CMDBUF_AVAILABLE=1 $patched/xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc" ;;
    */rocm_cmdbuf_bridge_test.cc)
        echo "-DROCM_CMDBUF_AVAILABLE=1 $patched/xla/stream_executor/rocm/rocm_cmdbuf_library.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc" ;;
    */rocm_cmdbuf_move_log_test.cc)
        echo "-DROCM_CMDBUF_AVAILABLE=1 $patched/xla/stream_executor/rocm/rocm_cmdbuf_library.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc" ;;
    */rocm_cmdbuf_streams_test.cc)
        echo "-DROCM_CMDBUF_AVAILABLE=1 $patched/xla/stream_executor/rocm/rocm_cmdbuf_library.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_options.cc" ;;
    */rocm_cmdbuf_vmm_pool_test.cc)
        echo "-DROCM_CMDBUF_AVAILABLE=1 $patched/xla/stream_executor/rocm/rocm_cmdbuf_library.cc"
        echo "$patched/xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc" ;;
    esac
}
xla_test_variants() { # TEST: lines "SUFFIX FLAGS"
    case $1 in
    */rocm_cmdbuf_correlation_test.cc)
        echo "-id64 -DXLA_FLOW_CORRELATION_ID=uint64_t"
        echo "-id32 -DXLA_FLOW_CORRELATION_ID=uint32_t" ;;
    *) echo "" ;;
    esac
}
build_xla_test() { # OUT_FILE TEST EXTRA_FLAGS...
    local exe=$1 test=$2
    shift 2
    local extra
    extra=$(xla_test_extra "$test")
    [ -z "${NO_ROCM_CMDBUF:-}" ] || extra=${extra//-DROCM_CMDBUF_AVAILABLE=1/}
    # shellcheck disable=SC2086 # the extra files and defines split into words
    g++ "${flags[@]}" -O1 "$@" -o "$exe" "$patched/$test" "$patched/${test%_test.cc}.cc" \
        $extra "$here/gtest_skips.cc" -lgmock -lgtest_main -lgtest "${link[@]}"
}

if [ -n "$build_only" ]; then
    # On the GPU machine the library sits next to the binaries.
    link=(-L"$lib_dir" -Wl,-rpath,'$ORIGIN' -Wl,--as-needed -lrocm_cmdbuf -ldl -lpthread)
    for p in "${programs[@]}"; do
        g++ "${flags[@]}" -O2 -o "$build_only/xla_flow-$p" "$here/$p.cpp" "${link[@]}"
    done
    for t in "${xla_tests[@]}"; do
        while read -r suffix variant; do
            # shellcheck disable=SC2086 # a variant's flags split into words
            build_xla_test "$build_only/xla_flow-xla_test-$(basename "$t" .cc)$suffix" "$t" $variant
        done < <(xla_test_variants "$t")
    done
    exit 0
fi

out=$(mktemp -d)
trap 'rm -rf "$out" "$patched"' EXIT
mkdir "$out/lib" "$out/hip"
cp "$lib_dir/librocm_cmdbuf.so" "$out/lib/"
ln -s librocm_cmdbuf.so "$out/lib/librocm_cmdbuf.so.0"
# The software GPU under its SONAME in a directory of its own; the program and the library
# open this one file, so they share one instance.
cp "$lib_dir/libamdhip64.so" "$out/hip/libamdhip64.so.6"
# An RPATH, not a RUNPATH: ASan intercepts dlopen and calls it from its own library, whose
# lookups a RUNPATH of the program does not reach, and the loader programs dlopen the library.
link=(-L"$out/lib" -Wl,-rpath,"$out/lib" -Wl,--disable-new-dtags -Wl,--as-needed -lrocm_cmdbuf -ldl -lpthread)
run() { RCB_BACKEND=hip XLA_FLOW_HIP="$out/hip/libamdhip64.so.6" RCB_HIP_LIBRARY="$out/hip/libamdhip64.so.6" \
    ASAN_OPTIONS=detect_leaks=0 "$@"; }
for p in "${programs[@]}"; do
    # Named as ci/gpu.sh stages them, so that a SKIPPED line (`SKIPPED <program>: …`, compared
    # by ci/test.sh) names the program as on the GPU machine; the ASan build's ends in `-asan`.
    g++ "${flags[@]}" -O1 -o "$out/xla_flow-$p" "$here/$p.cpp" "${link[@]}"
    g++ "${flags[@]}" -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
        -o "$out/xla_flow-$p-asan" "$here/$p.cpp" "${link[@]}"
    for exe in "xla_flow-$p" "xla_flow-$p-asan"; do
        echo "== $exe (software GPU)"
        run "$out/$exe"
    done
done
# Whether the test's BUILD target in the series says fail_if_no_test_linked = False: XLA's
# xla_cc_test otherwise passes --gtest_fail_if_no_test_linked, which Debian's GoogleTest (1.12)
# lacks, so run_xla_test counts the cases that ran instead.
may_link_no_test() { # TEST
    sed -n "/^+    name = \"$(basename "$1" .cc)\",\$/,/^+)\$/p" "$root"/xla-patches/*.patch |
        grep -q '^+    fail_if_no_test_linked = False,'
}
run_xla_test() { # EXE TEST: shuffled, as XLA's test runner does
    local log cases
    log=$(mktemp)
    run "$1" --gtest_shuffle | tee "$log"
    cases=$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' "$log")
    rm -f "$log"
    [ -n "$cases" ] || { echo "$1: no GoogleTest summary"; return 1; }
    if [ "$cases" -eq 0 ] && ! may_link_no_test "$2"; then
        echo "$1 ran no test, which XLA's --gtest_fail_if_no_test_linked fails"
        return 1
    fi
}
for t in "${xla_tests[@]}"; do
    while read -r suffix variant; do
        name=xla_flow-xla_test-$(basename "$t" .cc)$suffix
        # shellcheck disable=SC2086 # a variant's flags split into words
        build_xla_test "$out/$name" "$t" $variant
        # shellcheck disable=SC2086
        build_xla_test "$out/$name-asan" "$t" $variant -fsanitize=address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined
        builds=("$name" "$name-asan")
        # As XLA builds it by default (ROCM_CMDBUF_PATH unset): without ROCM_CMDBUF_AVAILABLE,
        # so that the cases for a build without the library compile and run. Plain only.
        if xla_test_extra "$t" | grep -q ROCM_CMDBUF_AVAILABLE; then
            # shellcheck disable=SC2086
            NO_ROCM_CMDBUF=1 build_xla_test "$out/$name-no-library" "$t" $variant
            builds+=("$name-no-library")
        fi
        for exe in "${builds[@]}"; do
            echo "== $exe ($t, software GPU)"
            run_xla_test "$out/$exe" "$t"
        done
    done < <(xla_test_variants "$t")
done

# flags.cpp without a run path: librocm_cmdbuf.so.0 is not on the loader's path, then the one
# found there is a stand-in of the header's version that has rcb_version only, then one of a
# version whose interface differs (the next major: a minor release only adds), then one of the
# next minor, which the loader takes (and then finds without the header's functions).
g++ "${flags[@]}" -O1 -o "$out/xla_flow-flags-no-path" "$here/flags.cpp" -ldl -lpthread
ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
echo "== flags missing (no librocm_cmdbuf.so.0 on the loader's path)"
if "$ldconfig" -p 2>/dev/null | grep -q 'librocm_cmdbuf\.so\.0 '; then
    echo "SKIPPED xla_flow-flags-missing: librocm_cmdbuf.so.0 is in the loader's cache, so it is never missing here"
else
    env -u LD_LIBRARY_PATH "$out/xla_flow-flags-no-path" missing
fi
version() { sed -n "s/^#define RCB_VERSION_$1 \([0-9]*\)\$/\1/p" "$root/include/rocm_cmdbuf.h"; }
stand_in() {  # DIR VERSION: a librocm_cmdbuf.so.0 in DIR whose rcb_version says VERSION
    mkdir "$out/$1"
    printf 'const char *rcb_version(void) { return "%s"; }\n' "$2" |
        gcc -x c -shared -fPIC -Wl,-soname,librocm_cmdbuf.so.0 -o "$out/$1/librocm_cmdbuf.so.0" -
}
echo "== flags partial (a librocm_cmdbuf.so.0 of the header's version without the library's functions)"
stand_in partial "$(version MAJOR).$(version MINOR).$(version PATCH)"
LD_LIBRARY_PATH="$out/partial" "$out/xla_flow-flags-no-path" partial
echo "== flags version (a librocm_cmdbuf.so.0 whose version has another interface: the next major)"
stand_in version "$(($(version MAJOR) + 1)).0.0"
LD_LIBRARY_PATH="$out/version" "$out/xla_flow-flags-no-path" version
echo "== flags newer-minor (a librocm_cmdbuf.so.0 of the next minor, taken, without the header's functions)"
stand_in newer-minor "$(version MAJOR).$(($(version MINOR) + 1)).0"
LD_LIBRARY_PATH="$out/newer-minor" "$out/xla_flow-flags-no-path" partial

# The loader's xla_cc_test without a run path, in the same places: its case that starts where
# LoadRocmCmdbuf was never called checks that every call is refused before the first load and,
# where the library cannot be used, after it too, with one kLoad fallback.
link=(-Wl,--as-needed -ldl -lpthread)
build_xla_test "$out/xla_flow-xla_test-rocm_cmdbuf_library_test-no-path" \
    xla/stream_executor/rocm/rocm_cmdbuf_library_test.cc
first_load=(--gtest_filter='*.NothingIsCalledBeforeTheFirstLoad')
for where in missing partial version newer-minor; do
    echo "== rocm_cmdbuf_library_test $where"
    case $where in
    missing)
        if "$ldconfig" -p 2>/dev/null | grep -q 'librocm_cmdbuf\.so\.0 '; then
            echo "SKIPPED xla_flow-xla_test-rocm_cmdbuf_library_test-missing: librocm_cmdbuf.so.0 is in the loader's cache"
        else
            env -u LD_LIBRARY_PATH "$out/xla_flow-xla_test-rocm_cmdbuf_library_test-no-path" "${first_load[@]}"
        fi ;;
    *) LD_LIBRARY_PATH="$out/$where" "$out/xla_flow-xla_test-rocm_cmdbuf_library_test-no-path" "${first_load[@]}" ;;
    esac
done

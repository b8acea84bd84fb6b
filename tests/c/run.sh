#!/usr/bin/env bash
# Builds the C and C++ programs in tests/c against include/rocm_cmdbuf.h and the cdylib in
# $1 (target/<profile>), once plain under -Wall -Wextra -Werror and once with ASan+UBSan, and
# runs each in every mode its header comment describes. hpp_wrapper.cpp tests the C++ wrapper
# include/rocm_cmdbuf.hpp (also under -pedantic); correlator.c and correlator.cpp the profiler
# correlator through each header (no GPU runtime); exit_calls.cpp calls exports from atexit, a C++
# static destructor and a thread's key destructor; stream_fork.c forks while a thread uses the
# stream cache; budget_fork.c forks while the first command buffer measures the update budget;
# stats_at_exit.c makes known counts, which the RCB_STATS report at exit must hold.
# cmdbuf_flow, contracts, exit_calls, stream_fork, budget_fork and stats_at_exit also link the
# software GPU ($1/libamdhip64.so, from cargo build -p hipsim) through Debian's HIP headers: the
# system's (/usr/include), or those under the directory $2 (ci/hip-versions.sh passes each real
# ROCm's). Whether each real HIP runtime reports "no device" cleanly is checked by
# ci/hip-versions.sh. Exits non-zero on any failure.
set -euo pipefail
lib_dir=$(cd "$1" && pwd)
hip_include=${2:-/usr/include}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

hipsim="$lib_dir/libamdhip64.so"
# Stage the library under its file name and its SONAME, as an install would.
mkdir "$out/lib"
cp "$lib_dir/librocm_cmdbuf.so" "$out/lib/"
ln -s librocm_cmdbuf.so "$out/lib/librocm_cmdbuf.so.0"
warn=(-Wall -Wextra -Werror -I"$root/include" -L"$out/lib" -Wl,-rpath,"$out/lib")
san=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
# hipsim in a directory of its own under its SONAME (libamdhip64.so.6), so that neither Debian's
# libamdhip64.so.5 nor another copy can be picked up: the program loads this file, and the
# library's dlopen of the same file (RCB_HIP_LIBRARY) or of the SONAME (RTLD_NOLOAD) finds it.
mkdir "$out/hip"
if [ -e "$hipsim" ]; then
    cp "$hipsim" "$out/hip/libamdhip64.so"
    ln -s libamdhip64.so "$out/hip/libamdhip64.so.6"
fi
# Other headers than the system's as system headers too (as an installed ROCm's are): the programs
# here are held to -Werror, AMD's headers are not.
hip_dir=(-I/usr/include)
[ "$hip_include" = /usr/include ] || hip_dir=(-isystem "$hip_include")
hip=(-D__HIP_PLATFORM_AMD__ "${hip_dir[@]}" -L"$out/hip" -Wl,-rpath,"$out/hip" -lamdhip64)

build() { # name compiler std source flags... (the -l flags go after the source, for the linker)
    local name=$1 cc=$2 std=$3 src=$4
    shift 4
    local flags=() libs=()
    for flag in "$@"; do
        case $flag in -l*) libs+=("$flag") ;; *) flags+=("$flag") ;; esac
    done
    "$cc" -std="$std" "${warn[@]}" "${flags[@]}" -o "$out/$name" "$here/$src" -lrocm_cmdbuf "${libs[@]}"
}
# The C++ wrapper on its own, self-contained and clean under the stricter warnings of C++ hosts.
g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -pedantic -Wshadow -Wconversion -Wsign-conversion \
    -Wold-style-cast -fno-exceptions -fno-rtti -I"$root/include" -x c++ "$root/include/rocm_cmdbuf.hpp"
build c11 gcc c11 abi_errors.c
build cxx17 g++ c++17 abi_errors.cpp
build c11-asan gcc c11 abi_errors.c "${san[@]}"
build cxx17-asan g++ c++17 abi_errors.cpp "${san[@]}"
build correlator-c11 gcc c11 correlator.c
build correlator-c11-asan gcc c11 correlator.c "${san[@]}"
build correlator-hpp g++ c++17 correlator.cpp -pedantic -fno-exceptions -fno-rtti -pthread
build correlator-hpp-asan g++ c++17 correlator.cpp -pedantic -pthread "${san[@]}"
if [ -e "$hipsim" ]; then
    build flow-c11 gcc c11 cmdbuf_flow.c "${hip[@]}"
    build flow-cxx17 g++ c++17 cmdbuf_flow.cpp "${hip[@]}"
    build flow-c11-asan gcc c11 cmdbuf_flow.c "${hip[@]}" "${san[@]}"
    build flow-cxx17-asan g++ c++17 cmdbuf_flow.cpp "${hip[@]}" "${san[@]}"
    # The C++ wrapper include/rocm_cmdbuf.hpp: -pedantic, and no exceptions or RTTI needed.
    build hpp g++ c++17 hpp_wrapper.cpp -pedantic -fno-exceptions -fno-rtti "${hip[@]}"
    build hpp-asan g++ c++17 hpp_wrapper.cpp -pedantic "${hip[@]}" "${san[@]}"
    build contracts-c11 gcc c11 contracts.c "${hip[@]}"
    build contracts-cxx17 g++ c++17 contracts.cpp "${hip[@]}"
    build contracts-c11-asan gcc c11 contracts.c "${hip[@]}" "${san[@]}"
    build contracts-cxx17-asan g++ c++17 contracts.cpp "${hip[@]}" "${san[@]}"
    build exit-calls g++ c++17 exit_calls.cpp -pthread "${hip[@]}"
    build exit-calls-asan g++ c++17 exit_calls.cpp -pthread "${hip[@]}" "${san[@]}"
    build stream-fork gcc c11 stream_fork.c -pthread "${hip[@]}"
    build stats-at-exit gcc c11 stats_at_exit.c "${hip[@]}"
    build stream-fork-asan gcc c11 stream_fork.c -pthread "${hip[@]}" "${san[@]}"
    build budget-fork gcc c11 budget_fork.c -pthread "${hip[@]}"
    build budget-fork-asan gcc c11 budget_fork.c -pthread "${hip[@]}" "${san[@]}"
fi

failed=0
run() { # binary mode env...
    local bin=$1 mode=$2
    shift 2
    if env "$@" ASAN_OPTIONS=detect_leaks=0 "$out/$bin" "$mode"; then :; else
        echo "FAIL: $bin $mode ($*)"
        failed=1
    fi
}
for bin in c11 cxx17 c11-asan cxx17-asan; do
    run "$bin" basic
    run "$bin" unloadable RCB_BACKEND=hip RCB_HIP_LIBRARY=/nonexistent/libamdhip64.so.6
    run "$bin" bad-config RCB_BACKEND=rocm
    if [ -e "$hipsim" ]; then
        run "$bin" loads RCB_BACKEND=hip RCB_HIP_LIBRARY="$hipsim"
        run "flow-$bin" override RCB_BACKEND=hip RCB_HIP_LIBRARY="$out/hip/libamdhip64.so"
        run "flow-$bin" preloaded -u RCB_HIP_LIBRARY RCB_BACKEND=hip
        run "contracts-$bin" faults RCB_BACKEND=hip RCB_HIP_LIBRARY="$out/hip/libamdhip64.so"
    else
        echo "FAIL: software GPU missing at $hipsim (cargo build -p hipsim)"
        failed=1
    fi
done
for bin in correlator-c11 correlator-c11-asan correlator-hpp correlator-hpp-asan; do
    run "$bin" all
done
if [ -e "$hipsim" ]; then
    for bin in hpp hpp-asan; do
        run "$bin" flow RCB_BACKEND=hip RCB_HIP_LIBRARY="$out/hip/libamdhip64.so"
        run "$bin" long-message -u RCB_BACKEND
    done
    # Calls at exit and at a thread's exit, after the thread-locals are gone.
    for bin in exit-calls exit-calls-asan; do
        run "$bin" all RCB_BACKEND=hip RCB_HIP_LIBRARY="$out/hip/libamdhip64.so"
    done
    # A fork while another thread uses the stream cache: the child's cache starts empty.
    for bin in stream-fork stream-fork-asan; do
        run "$bin" all RCB_BACKEND=hip RCB_HIP_LIBRARY="$out/hip/libamdhip64.so"
    done
    # A fork while the first command buffer measures the update budget: the child's first
    # command buffer takes the fixed default at once.
    for bin in budget-fork budget-fork-asan; do
        run "$bin" all RCB_BACKEND=hip RCB_HIP_LIBRARY="$out/hip/libamdhip64.so" HIPSIM_LATENCY=hipGraphExecMemsetNodeSetParams:100us
    done
    # RCB_STATS: the report printed when the library is unloaded holds what the program read
    # from rcb_counters_get(NULL) before it exited; nothing is printed without RCB_STATS.
    stats_check() { # report-file program-stdout
        local line
        while IFS= read -r line; do
            grep -Eq "^ +${line% *} +${line##* }( |$)" "$1" || { echo "FAIL: RCB_STATS report lacks \"$line\":"; cat "$1"; failed=1; }
        done <"$2"
    }
    sim=(RCB_BACKEND=hip RCB_HIP_LIBRARY="$out/hip/libamdhip64.so")
    if env "${sim[@]}" RCB_STATS="$out/stats.txt" "$out/stats-at-exit" >"$out/stats.expect"; then
        stats_check "$out/stats.txt" "$out/stats.expect"
        grep -q '^rocm_cmdbuf .*what the library did:$' "$out/stats.txt" || { echo "FAIL: RCB_STATS report has no title"; failed=1; }
    else
        echo "FAIL: stats-at-exit (RCB_STATS=file)"; failed=1
    fi
    if env "${sim[@]}" RCB_STATS=1 "$out/stats-at-exit" >"$out/stats.expect" 2>"$out/stats.stderr"; then
        stats_check "$out/stats.stderr" "$out/stats.expect"
    else
        echo "FAIL: stats-at-exit (RCB_STATS=1)"; failed=1
    fi
    if env -u RCB_STATS "${sim[@]}" "$out/stats-at-exit" >/dev/null 2>"$out/stats.stderr"; then
        ! grep -q 'what the library did' "$out/stats.stderr" || { echo "FAIL: a report without RCB_STATS"; failed=1; }
    else
        echo "FAIL: stats-at-exit (no RCB_STATS)"; failed=1
    fi
fi
exit $failed

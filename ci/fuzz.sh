#!/usr/bin/env bash
# Fuzzes the C ABI (tests/fuzz/fuzz_abi.c, a libFuzzer target) for SECONDS (default 120) on the
# software GPU, starting from the committed corpus tests/fuzz/corpus, after replaying every
# input of tests/fuzz/regressions once. Exits non-zero on any finding; the input that found it
# is written to target/fuzz/findings/ (replay it: ci/fuzz.sh --replay FILE...).
#
# The target is built with Debian's clang (-fsanitize=fuzzer,address,undefined) and linked with
# a copy of the library built with SanitizerCoverage (target/fuzz/cargo), so that libFuzzer is
# guided by the library's own branches, not only the harness's; the software GPU is
# target/debug/libamdhip64.so (cargo build -p hipsim).
#
#   ci/fuzz.sh [SECONDS]          fuzz (new corpus entries go to target/fuzz/corpus)
#   ci/fuzz.sh --replay FILE...   run the given inputs once each, FUZZ_TRACE=1 for a trace
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
replay=()
seconds=120
if [ "${1:-}" = "--replay" ]; then
    shift
    replay=("$@")
else
    seconds=${1:-120}
fi

bash ci/apt-install.sh clang-19 libclang-rt-19-dev libamdhip64-dev
cargo build --quiet -p hipsim
# The library with coverage counters and comparison hooks for libFuzzer (host build scripts
# stay plain: RUSTFLAGS reach only the --target artifacts), and with frame pointers, which the
# sanitizers' fast unwinder follows to name the library's frames in a finding's stacks.
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions=on -Coverflow-checks=on -Cforce-frame-pointers=yes" \
    cargo build --quiet -p rocm_cmdbuf --lib --target x86_64-unknown-linux-gnu --target-dir target/fuzz/cargo

out=$root/target/fuzz
mkdir -p "$out/lib" "$out/hip" "$out/corpus" "$out/findings"
cp --remove-destination target/fuzz/cargo/x86_64-unknown-linux-gnu/debug/librocm_cmdbuf.so "$out/lib/"
ln -sf librocm_cmdbuf.so "$out/lib/librocm_cmdbuf.so.0"
# The software GPU under its SONAME: the harness links this file and the library opens it
# (RCB_HIP_LIBRARY), so both use one instance.
cp --remove-destination target/debug/libamdhip64.so "$out/hip/"
ln -sf libamdhip64.so "$out/hip/libamdhip64.so.6"
clang-19 -g -O1 -Wall -Wextra -Werror -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -D__HIP_PLATFORM_AMD__ -Iinclude tests/fuzz/fuzz_abi.c \
    -L"$out/lib" -Wl,-rpath,'$ORIGIN/lib' -lrocm_cmdbuf -L"$out/hip" -Wl,-rpath,'$ORIGIN/hip' -lamdhip64 -ldl -pthread \
    -o "$out/fuzz_abi.new"
mv "$out/fuzz_abi.new" "$out/fuzz_abi"

export RCB_BACKEND=hip RCB_HIP_LIBRARY=$out/hip/libamdhip64.so
# Leak checking stays on: the library and the software GPU free what each input made.
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1
if [ ${#replay[@]} -gt 0 ]; then
    exec "$out/fuzz_abi" -runs=1 "${replay[@]}"
fi
regressions=(tests/fuzz/regressions/*)
if [ -e "${regressions[0]}" ]; then
    echo "== fuzz: replaying ${#regressions[@]} regression input(s)"
    "$out/fuzz_abi" -runs=1 "${regressions[@]}" 2>&1 | tail -n 3
fi
echo "== fuzz: $seconds s from tests/fuzz/corpus"
# -timeout: an input running 20 s is a hang; -rss_limit_mb: above the software GPU's largest
# legitimate use by the harness.
"$out/fuzz_abi" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$out/findings/" "$out/corpus" tests/fuzz/corpus

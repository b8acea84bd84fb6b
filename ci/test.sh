#!/usr/bin/env bash
# Runs every test on a machine without a GPU (the software GPU stands in): set-up, build, lints, the
# documents' links (ci/doc-links.py), header drift and export checks, Rust tests of the whole
# workspace, the release-built soak of the update budget (tests/exec_budget.rs), rcb-doctor on the
# software GPU (tests/doctor), the C/C++ ABI tests, the fault matrix (tests/faults), a short soak
# (rcb-bench --quick soak), an update split by the stand-in that times the runtime's setters
# (ci/setter-timer.sh), two minutes of fuzzing the C ABI (ci/fuzz.sh), the software GPU's own C
# suite, the checks against the real HIP of each ROCm version (ci/hip-versions.sh), the LD_PRELOAD
# test, the Bazel consumer test (ci/bazel-test.sh) and the installed library's pkg-config and CMake
# consumers (tests/install/run.sh). The C ABI is checked against abi/librocm_cmdbuf.abi (ci/abi.sh)
# and with a program built against the previous header (tests/abi). GPU tests run on a GPU machine:
# ci/gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh

echo "== build"
cargo build --workspace --all-targets --quiet
echo "== lints (Cargo.toml [workspace.lints]: undocumented unsafe blocks, pointer casts)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== the documents' links, scripts and RCB_ names (ci/doc-links.py)"
python3 ci/doc-links.py
echo "== header and exports"
bash ci/header.sh --verify
bash ci/check-library.sh target/debug
echo "== the C ABI against its baseline (ci/abi.sh), and a program built against the previous header (tests/abi)"
bash ci/abi.sh target/debug
bash tests/abi/run.sh target/debug
echo "== Rust tests (software GPU)"
# Every check runs on the software GPU: the tests that skip are exactly those of
# tests/expected-skips/software-gpu.txt (ci/skips.sh compares the SKIPPED lines by name and count).
sw_log=$(mktemp)
trap 'rm -f "$sw_log" "${gpu_log:-}" "${flow_log:-}"' EXIT
cargo test --workspace --quiet -- --nocapture >"$sw_log" 2>&1 || { cat "$sw_log"; echo "Rust tests failed"; exit 1; }
grep -h '^test result:' "$sw_log" | awk '{p += $4; f += $6; i += $8} END {print p " passed, " f " failed, " i " ignored"}'
bash ci/skips.sh tests/expected-skips/software-gpu.txt "$sw_log"
echo "== soak (release build): 1 000 000 in-place updates of a 1 000-node command buffer under the software GPU's kernel-argument leak"
cargo build --release -p hipsim --quiet
cargo test --release --quiet -p rocm_cmdbuf --test exec_budget -- --ignored --nocapture 2>&1 | grep -E '^soak:|test result|panicked|FAILED'
echo "== rcb-doctor on the software GPU (tests/doctor/run.sh)"
bash tests/doctor/run.sh target/debug
echo "== GPU tests (RCB_BACKEND=cuda)"
# The same test bodies run on a real GPU through ci/gpu.sh; here they must skip, and say so.
# The skipped tests are exactly those of tests/expected-skips/no-gpu.txt, each as many times as it
# is listed: a GPU test body missing from the list, listed and no longer skipping, or skipping more
# or fewer checks than listed, fails here (ci/skips.sh prints the difference).
gpu_log=$(mktemp)
RCB_BACKEND=cuda cargo test --quiet -p rocm_cmdbuf --tests -- --nocapture >"$gpu_log" 2>&1 ||
    { cat "$gpu_log"; echo "GPU tests failed instead of skipping"; exit 1; }
grep -o -m1 'SKIPPED .*' "$gpu_log" || true
bash ci/skips.sh tests/expected-skips/no-gpu.txt "$gpu_log"
echo "(no GPU on this machine: these run on a GPU machine, see ci/gpu.sh)"
echo "== C and C++ ABI tests"
bash tests/c/run.sh target/debug
echo "== the patched XLA's call sequences (tests/xla_flow)"
# Every check of the programs runs on the software GPU: the SKIPPED lines they print are exactly
# those of tests/expected-skips/xla-flow-software-gpu.txt (none).
flow_log=$(mktemp)
bash tests/xla_flow/run.sh target/debug 2>&1 | tee "$flow_log"
bash ci/skips.sh tests/expected-skips/xla-flow-software-gpu.txt "$flow_log"
echo "== the fault matrix: every runtime call failed in turn (tests/faults; the tests/xla_flow programs every 50th call)"
bash tests/faults/run.sh target/debug --xla-stride 50
echo "== soak, short version (rcb-bench --quick soak; the figures in docs/reliability.md are the full one)"
RCB_BACKEND=hip RCB_HIP_LIBRARY="$PWD/target/debug/libamdhip64.so" target/debug/rcb-bench --quick soak
echo "== the runtime's setters timed by a stand-in (tests/gpu/setter_timer.c) on the software GPU: rcb-bench splits an update (ci/setter-timer.sh)"
bash ci/setter-timer.sh target/debug
echo "== fuzzing the C ABI for two minutes (ci/fuzz.sh; longer runs: ci/fuzz.sh SECONDS)"
bash ci/fuzz.sh 120
echo "== the software GPU's own C suite"
bash tests/hipsim/run-c-tests.sh target/debug/libamdhip64.so
echo "== Debian's real HIP of ROCm 5.2, 5.7, 6.4 and 7.2: the ABI the library assumes, no device without a GPU, the C suites on each header set (ci/hip-versions.sh)"
bash ci/hip-versions.sh target/debug
echo "== the LD_PRELOAD stream cache"
bash tests/preload/run.sh target/debug
echo "== Bazel: the installed library as @rocm_cmdbuf (tests/bazel)"
bash ci/bazel-test.sh
echo "== the installed library: layout, hygiene, pkg-config and CMake consumers (tests/install)"
bash tests/install/run.sh
echo "== all tests passed"

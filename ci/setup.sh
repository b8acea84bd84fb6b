#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine; idempotent.
#   - libamdhip64-dev: real ROCm 5.2 HIP headers (hip-runtime-sys builds against them) and a real
#     libamdhip64.so.5 (the tests check that it reports "no device" cleanly here).
#   - lld: the library is linked with ld.lld, which can give its exports their symbol versions
#     (build.rs); rustc brings its own on x86-64 from 1.90, older toolchains find Debian's.
#   - clang-19 and lld-19: build.rs compiles the test kernels (tests/gpu/kernels.hip) into AMD code
#     objects with them, and ci/hip-versions.sh reads the real HIP headers with clang.
#   - libabsl-dev and pkg-config: Abseil's hash maps for the baseline of `rcb-bench correlator`,
#     XLA's collector in C++ (build.rs uses std::unordered_map when they are missing).
#   - libgtest-dev and libgmock-dev: GoogleTest, for the patch series' xla_cc_tests that
#     tests/xla_flow/run.sh compiles and runs against stand-ins of XLA's headers.
#   - ziglang (PyPI, pinned by version and hash, in a virtual environment of its own): its clang 20
#     builds the code object of gfx950, which clang-19 does not know (ci/amdgpu-clang; python3-venv
#     for Debian's python3).
#   - cbindgen at the pinned version that generated include/rocm_cmdbuf.h.
#   - clippy, which checks the workspace lints of Cargo.toml (every unsafe block documented).
set -euo pipefail
CBINDGEN_VERSION=0.29.2

bash "$(dirname "$0")/apt-install.sh" libamdhip64-dev lld clang-19 lld-19 libabsl-dev pkg-config libgtest-dev libgmock-dev python3-venv
for tool in gcc g++ nm readelf; do
    command -v "$tool" >/dev/null || { echo "ci/setup.sh: $tool is missing (install gcc, g++, binutils)"; exit 1; }
done
if ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add clippy ||
        { echo "ci/setup.sh: clippy is missing and rustup could not add it (install the clippy component)"; exit 1; }
fi
if [ "$(cbindgen --version 2>/dev/null)" != "cbindgen $CBINDGEN_VERSION" ]; then
    cargo install --locked --quiet cbindgen --version "$CBINDGEN_VERSION"
fi
bash "$(dirname "$0")/amdgpu-clang" --install ||
    { echo "ci/setup.sh: could not install the clang that builds gfx950's code object (ci/amdgpu-clang)"; exit 1; }

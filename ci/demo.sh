#!/usr/bin/env bash
# The main job: builds the library (release), its header and the software GPU, then runs the
# demonstration, on the GPU when one is present and on the software GPU otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
cargo build --release --workspace --quiet
bash ci/header.sh
exec target/release/rcb-demo "$@"

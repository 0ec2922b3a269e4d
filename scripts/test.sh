#!/usr/bin/env bash
# Builds Kiln with its tests and runs them with ctest. GPU tests carry the ctest label "gpu" and
# skip (visibly) where no CUDA device exists.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh --all -DKILN_TESTS=ON
cd build
ctest --output-on-failure -j "${KILN_JOBS:-$(nproc)}" --timeout 600

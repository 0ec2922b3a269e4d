#!/usr/bin/env bash
# Configures and builds Kiln into build/ (Ninja, Release, 2 jobs by default; KILN_JOBS to change).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-$(nproc)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${KILN_BUILD_TYPE:-Release}" "$@"
cmake --build build -j "$jobs"

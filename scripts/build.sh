#!/usr/bin/env bash
# Configures and builds Kiln into build/ (Ninja, Release, every core by default; KILN_JOBS to change).
# By default only what `kiln run` needs: the kiln binary and its kernel hosts. --all builds the
# test suites too (scripts/test.sh). Other arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-$(nproc)}"
targets=(--target kiln)
args=()
for a in "$@"; do
  if [ "$a" = "--all" ]; then targets=(); else args+=("$a"); fi
done
start=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${KILN_BUILD_TYPE:-Release}" "${args[@]}"
cmake --build build -j "$jobs" "${targets[@]}"
echo "build: done in $(( $(date +%s) - start )) s"

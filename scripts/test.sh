#!/usr/bin/env bash
# Runs the test suite (ctest). Sets up first when a package or the build is missing, so
# it works as the very first command on a fresh Debian machine. Extra arguments go to
# ctest, e.g. `bash scripts/test.sh -L gpu` or `-R plan`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir="${HET_BUILD_DIR:-build}"
if bash scripts/setup.sh --check; then
  cmake --build "$build_dir" -j "$(nproc)"
else
  bash scripts/setup.sh
fi
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"

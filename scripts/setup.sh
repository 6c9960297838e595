#!/usr/bin/env bash
# Installs the build dependencies (Debian packages; idempotent, non-interactive) and builds
# hetplan and hetexec (Release) into build/. Safe to run again: it installs only what is
# missing and rebuilds only what changed.
#   HET_CMAKE_ARGS  extra CMake arguments, e.g. "-DHET_CUDA=OFF" or "-DHET_WERROR=ON"
#   HET_BUILD_DIR   build directory (default: build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Keep this list the single source of truth: test.sh and demo.sh check it too.
packages=(
  g++ cmake ninja-build pkg-config
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libeigen3-dev libtbb-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libibverbs-dev catch2 libmetis-dev libspdlog-dev libfmt-dev
  libssl-dev  # SHA-256 of the profiles a plan embeds
  zlib1g-dev  # the transport's CRC-32 (zlib's is several times faster than a byte table)
  openssl  # tests make throw-away TLS certificates with it (the TLS tests skip without it)
  python3-jsonschema  # tests check every plan against docs/plan.schema.json (skipped without it)
  python3-numpy  # the independent safetensors reader of the checkpoint export test (tests/read_safetensors.py)
  chromium fonts-dejavu-core  # tests render hetplan show's pictures headless (skipped without chromium)
  clang libclang-rt-14-dev  # libFuzzer harnesses (scripts/fuzz.sh; the fuzz test skips without them)
)

missing_packages() {
  local p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

if [[ "${1:-}" == "--check" ]]; then  # used by test.sh/demo.sh: exit 1 when something is missing
  [[ -z "$(missing_packages)" && -f "${HET_BUILD_DIR:-build}/build.ninja" ]]
  exit
fi

mapfile -t missing < <(missing_packages)
if (( ${#missing[@]} )); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} packages present"
fi

build_dir="${HET_BUILD_DIR:-build}"
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${HET_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$(nproc)"
echo "setup: built $build_dir/apps/hetplan/hetplan and $build_dir/apps/hetexec/hetexec"

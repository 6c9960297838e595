#!/usr/bin/env bash
# Packs a CUDA build for a GPU machine that has the CUDA toolkit and NCCL but none of our other
# dependencies (the device machines this project is lent): hetexec, hetplan, het_gpu_tests,
# het_nccl_tests and bench_gpu_layer, stripped, in the build directory's layout (so that
# HET_BUILD_DIR=<unpacked>/pkg works for scripts/gpu-runbook.sh and MEMORY_BACKEND=cuda
# scripts/bench-memory.sh, whose emulation/ hetexec is the real one here), with every library
# they link except glibc, the driver and the CUDA toolkit's (cudart, cuBLASLt, NCCL): those come
# from the target (LD_LIBRARY_PATH=pkg/lib:<its CUDA and NCCL library folders>).
# scripts/bundle.sh is the self-contained alternative (it carries cuBLASLt and NCCL: ~800 MB).
#   scripts/gpu-pack.sh [OUT.tgz]     (default .gpu/pkg.tgz; needs a build with HET_CUDA on)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${HET_BUILD_DIR:-$root/build}"
out="${1:-$root/.gpu/pkg.tgz}"
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
p="$stage/pkg"
mkdir -p "$p"/{apps/hetexec,apps/hetplan,tests,bench,lib,emulation/apps/hetexec} "$(dirname "$out")"
bins=(apps/hetexec/hetexec apps/hetplan/hetplan tests/het_gpu_tests tests/het_nccl_tests bench/bench_gpu_layer)
for b in "${bins[@]}"; do
  [[ -x "$build/$b" ]] || { echo "gpu-pack: $build/$b is missing (a CUDA build makes it)" >&2; exit 2; }
  cp "$build/$b" "$p/$b" && strip "$p/$b"
done
ln -s ../../../apps/hetexec/hetexec "$p/emulation/apps/hetexec/hetexec"
for b in "${bins[@]}"; do ldd "$p/$b" | awk '$3 ~ /^\// {print $3}'; done | sort -u |
  grep -v -E '/(libcuda|libcublas|libcublasLt|libcudart|libnccl|libc|libm|ld-linux|libdl|libpthread|librt)\.so' |
  xargs -I{} cp -L {} "$p/lib/"
tar czf "$out" -C "$stage" pkg
echo "gpu-pack: $out ($(du -h "$out" | cut -f1)): ${bins[*]} and $(ls "$p/lib" | wc -l) libraries"

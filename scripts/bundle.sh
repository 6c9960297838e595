#!/usr/bin/env bash
# Packs hetexec and hetplan with the shared libraries a GPU machine without package access may
# lack, so that they run there with one command:
#   scripts/bundle.sh [--build-dir DIR] [--out DIR] [--no-build] [--tar]
#   scp -r dist/hetexec-bundle gpu-node: && ssh gpu-node hetexec-bundle/bin/hetexec --version
# It builds the two programs in the build directory (default build/, configured Release if it
# is not yet; -j${HET_JOBS:-2}), or with --no-build uses what is there. Layout of the bundle:
#   bin/hetexec, bin/hetplan   wrappers: set LD_LIBRARY_PATH to ../lib, exec the real program
#   libexec/                   the real programs
#   lib/                       every library ldd names, except those the target must provide:
#                              glibc (libc, libm, libdl, libpthread, librt, ld-linux) and the
#                              CUDA driver (libcuda, libnvidia-*), which come with the driver
#   MANIFEST                   each library and where it came from; the newest glibc symbol
#                              version needed (the target's glibc must be at least that)
#   lib/ibverbs/               libibverbs' device providers (rdma-core's libmlx5-rdmav*.so ...,
#                              loaded at run time, so ldd does not name them); the wrappers name
#                              them to libibverbs (RDMAV_DRIVERS) where the target has no
#                              rdma-core of its own (no /etc/libibverbs.d); with neither, hetexec
#                              finds no RDMA device and falls back to TCP, saying so
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${HET_BUILD_DIR:-$root/build}"
out="$root/dist/hetexec-bundle"
build=1
tar=0
while (($#)); do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --tar) tar=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bundle: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if ((build)); then
  if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
    cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$build_dir" -j "${HET_JOBS:-2}" --target hetexec hetplan
fi
programs=("$build_dir/apps/hetexec/hetexec" "$build_dir/apps/hetplan/hetplan")
for p in "${programs[@]}"; do
  [[ -x "$p" ]] || { echo "bundle: $p is not built (run without --no-build, or pass --build-dir)" >&2; exit 1; }
done

# Provided by the target machine: glibc and the CUDA driver.
provided='^(linux-vdso|linux-gate|ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libutil|libresolv|libcuda|libnvidia-[^ ]*)\.so'

rm -rf "$out"
mkdir -p "$out/bin" "$out/libexec" "$out/lib"
manifest="$out/MANIFEST"
echo "# hetexec bundle: $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)" >"$manifest"
declare -A seen=()
ibverbs=""
# Copies every library `ldd $1` names into lib/ (once), except what the target provides; a
# library ldd cannot find stops the bundle.
collect() {
  local lib arrow path rest
  while read -r lib arrow path rest; do  # "libfoo.so.1 => /path/libfoo.so.1 (0x...)"
    [[ "$arrow" == "=>" ]] || continue
    if [[ "$path" == "not" ]]; then echo "bundle: $1 needs $lib, which is not found here" >&2; exit 1; fi
    [[ "$lib" =~ $provided ]] && continue
    [[ "$lib" == libibverbs.so* ]] && ibverbs="$path"
    [[ -n "${seen[$lib]:-}" ]] && continue
    seen[$lib]=1
    cp -L "$path" "$out/lib/$lib"
    echo "lib/$lib <- $path" >>"$manifest"
  done < <(ldd "$1")
}
for p in "${programs[@]}"; do
  name="$(basename "$p")"
  cp "$p" "$out/libexec/$name"
  collect "$p"
  cat >"$out/bin/$name" <<WRAPPER
#!/bin/sh
# $name from this bundle, with the bundle's libraries first, and the bundle's RDMA providers
# where the target has no rdma-core (libibverbs appends "-rdmavNN.so" to each path it is given).
here="\$(cd "\$(dirname "\$0")/.." && pwd)"
if [ -z "\${RDMAV_DRIVERS:-}" ] && [ ! -d /etc/libibverbs.d ]; then
  for provider in "\$here"/lib/ibverbs/lib*-rdmav*.so; do
    [ -e "\$provider" ] && RDMAV_DRIVERS="\${RDMAV_DRIVERS:+\$RDMAV_DRIVERS:}\${provider%-rdmav*.so}"
  done
  [ -n "\${RDMAV_DRIVERS:-}" ] && export RDMAV_DRIVERS
fi
LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/libexec/$name" "\$@"
WRAPPER
  chmod +x "$out/bin/$name"
done
# libibverbs' providers sit in the directory "libibverbs" beside it (rdma-core's layout).
if [[ -n "$ibverbs" && -d "$(dirname "$ibverbs")/libibverbs" ]]; then
  mkdir -p "$out/lib/ibverbs"
  for provider in "$(dirname "$ibverbs")"/libibverbs/lib*-rdmav*.so; do
    [[ -e "$provider" ]] || continue
    cp -L "$provider" "$out/lib/ibverbs/"
    echo "lib/ibverbs/$(basename "$provider") <- $provider" >>"$manifest"
    collect "$provider"
  done
else
  echo "bundle: no libibverbs providers found here; the bundle will use the target's rdma-core or TCP" >&2
fi
glibc="$(for f in "$out"/libexec/* "$out"/lib/* "$out"/lib/ibverbs/*; do objdump -T "$f" 2>/dev/null; done |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
echo "# needs the target's glibc to provide ${glibc:-GLIBC_?} (here: $(ldd --version | head -n 1))" >>"$manifest"
echo "bundle: $out ($(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1)); needs ${glibc:-an unknown glibc} on the target"
if ((tar)); then
  tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
  echo "bundle: $out.tar.gz"
fi

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
# Not bundled: libibverbs' device providers (rdma-core's libmlx5 etc., loaded at run time): a
# target without rdma-core finds no RDMA device and falls back to TCP, saying so.
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
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
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
for p in "${programs[@]}"; do
  name="$(basename "$p")"
  cp "$p" "$out/libexec/$name"
  # "libfoo.so.1 => /path/libfoo.so.1 (0x...)"; a library ldd cannot find stops the bundle.
  while read -r lib arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    if [[ "$path" == "not" ]]; then echo "bundle: $name needs $lib, which is not found here" >&2; exit 1; fi
    [[ "$lib" =~ $provided ]] && continue
    [[ -n "${seen[$lib]:-}" ]] && continue
    seen[$lib]=1
    cp -L "$path" "$out/lib/$lib"
    echo "lib/$lib <- $path" >>"$manifest"
  done < <(ldd "$p")
  cat >"$out/bin/$name" <<WRAPPER
#!/bin/sh
# $name from this bundle, with the bundle's libraries first.
here="\$(cd "\$(dirname "\$0")/.." && pwd)"
LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/libexec/$name" "\$@"
WRAPPER
  chmod +x "$out/bin/$name"
done
glibc="$(for f in "$out"/libexec/* "$out"/lib/*; do objdump -T "$f" 2>/dev/null; done |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
echo "# needs the target's glibc to provide ${glibc:-GLIBC_?} (here: $(ldd --version | head -n 1))" >>"$manifest"
echo "bundle: $out ($(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1)); needs ${glibc:-an unknown glibc} on the target"
if ((tar)); then
  tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
  echo "bundle: $out.tar.gz"
fi

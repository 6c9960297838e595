#!/usr/bin/env bash
# scripts/bundle.sh as a user runs it: bundle the built hetexec and hetplan into a temporary
# directory, then run both from the bundle with an empty LD_LIBRARY_PATH (real processes), and
# check that every library they load, other than glibc and the CUDA driver, comes from the
# bundle rather than from this machine.
#   tests/bundle_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1" build="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$src/scripts/bundle.sh" --no-build --build-dir "$build" --out "$tmp/bundle"
for p in hetexec hetplan; do
  out="$(env LD_LIBRARY_PATH= "$tmp/bundle/bin/$p" --version)"
  echo "$out" | head -n 1
  [[ "$out" == "$p "* ]] || { echo "FAIL: $p --version printed '$out'" >&2; exit 1; }
  # What the loader resolves with the wrapper's LD_LIBRARY_PATH: the bundle's copies.
  while read -r lib arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    [[ "$lib" =~ ^(libc|libm|libdl|libpthread|librt|libutil|libresolv|libcuda)\.so ]] && continue
    [[ "$path" == "$tmp/bundle/lib/"* ]] || { echo "FAIL: $p loads $lib from $path, not from the bundle" >&2; exit 1; }
  done < <(env LD_LIBRARY_PATH="$tmp/bundle/lib" ldd "$tmp/bundle/libexec/$p")
done
# libibverbs' providers: bundled where this machine has them, their libraries from the bundle,
# and each one loads against the bundle's libibverbs (the private ABI they are built for).
ibverbs_dir="$(dirname "$(env LD_LIBRARY_PATH= ldd "$build/apps/hetexec/hetexec" | awk '/libibverbs.so/{print $3; exit}')")/libibverbs"
if [[ -d "$ibverbs_dir" ]]; then
  n="$(ls "$tmp/bundle/lib/ibverbs/" | wc -l)"
  [[ "$n" -gt 0 && "$n" -eq "$(ls "$ibverbs_dir"/lib*-rdmav*.so | wc -l)" ]] || { echo "FAIL: $n providers bundled" >&2; exit 1; }
  for provider in "$tmp/bundle/lib/ibverbs/"*.so; do
    while read -r lib arrow path _; do
      [[ "$arrow" == "=>" ]] || continue
      [[ "$lib" =~ ^(libc|libm|libdl|libpthread|librt)\.so ]] && continue
      [[ "$path" == "$tmp/bundle/lib/"* ]] || { echo "FAIL: $provider loads $lib from $path" >&2; exit 1; }
    done < <(env LD_LIBRARY_PATH="$tmp/bundle/lib" ldd "$provider")
  done
  env LD_LIBRARY_PATH="$tmp/bundle/lib" python3 - "$tmp/bundle/lib" <<'PY'
import ctypes, glob, os, sys
lib = sys.argv[1]
ctypes.CDLL(glob.glob(os.path.join(lib, "libibverbs.so*"))[0], mode=ctypes.RTLD_GLOBAL)
for p in sorted(glob.glob(os.path.join(lib, "ibverbs", "*.so"))):
    ctypes.CDLL(p)
print("bundle: %d RDMA providers load against the bundled libibverbs" % len(glob.glob(os.path.join(lib, "ibverbs", "*.so"))))
PY
  # The wrapper names them to libibverbs only where the target has no rdma-core of its own.
  # (Its environment, as on a target without /etc/libibverbs.d: every entry plus libibverbs'
  # "-rdmavNN.so" names a bundled provider.)
  sed 's#/etc/libibverbs.d#/nonexistent/libibverbs.d#; s#^LD_LIBRARY_PATH=.*#echo "$RDMAV_DRIVERS"#' "$tmp/bundle/bin/hetexec" >"$tmp/bundle/bin/probe"
  drivers="$(env -u RDMAV_DRIVERS sh "$tmp/bundle/bin/probe")"
  [[ "$(echo "$drivers" | tr ':' '\n' | wc -l)" -eq "$n" ]] || { echo "FAIL: the wrapper names '$drivers'" >&2; exit 1; }
  for d in ${drivers//:/ }; do
    ls "$d"-rdmav*.so >/dev/null || { echo "FAIL: RDMAV_DRIVERS entry $d names no provider" >&2; exit 1; }
  done
fi
grep -q '^lib/libstdc++' "$tmp/bundle/MANIFEST" || { echo "FAIL: libstdc++ is not in the bundle" >&2; exit 1; }
grep -q 'needs the target.s glibc' "$tmp/bundle/MANIFEST" || { echo "FAIL: MANIFEST lacks the glibc requirement" >&2; exit 1; }
echo "bundle: hetexec and hetplan run from the bundle with an empty LD_LIBRARY_PATH"

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
grep -q '^lib/libstdc++' "$tmp/bundle/MANIFEST" || { echo "FAIL: libstdc++ is not in the bundle" >&2; exit 1; }
grep -q 'needs the target.s glibc' "$tmp/bundle/MANIFEST" || { echo "FAIL: MANIFEST lacks the glibc requirement" >&2; exit 1; }
echo "bundle: hetexec and hetplan run from the bundle with an empty LD_LIBRARY_PATH"

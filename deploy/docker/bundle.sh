#!/usr/bin/env bash
# Copies dapple binaries and the shared libraries they load into a folder that runs on another
# Linux image: OUT/bin/<binary>, OUT/lib/*.so*. The same rule as tests/gpu/bundle.sh: everything
# ldd resolves except glibc's own libraries and CUDA's (cudart, cuBLAS(Lt), NCCL come from the
# runtime image). UCX's loadable transport modules go to OUT/lib/ucx, where libucs looks for them.
#   deploy/docker/bundle.sh OUT BINARY...
# BUNDLE_SKIP_EXTRA: a regex of more library names to leave out (e.g. ^(libstdc\+\+|libgcc_s)\.
# on a base image whose own copies are newer).
set -euo pipefail
if (($# < 2)); then
  echo "usage: $0 OUT BINARY..." >&2
  exit 2
fi
out="$1"
shift
mkdir -p "$out/bin" "$out/lib"
skip='^(libc|libm|libpthread|libdl|librt|libresolv|ld-linux-x86-64|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.'
extra="${BUNDLE_SKIP_EXTRA:-}"
for b in "$@"; do
  strip --strip-debug -o "$out/bin/$(basename "$b")" "$b"
done
for b in "$@"; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  name="$(basename "$lib")"
  [[ "$name" =~ $skip ]] && continue
  [[ -n "$extra" && "$name" =~ $extra ]] && continue
  cp -L "$lib" "$out/lib/$name"
done
ucx_modules=/usr/lib/x86_64-linux-gnu/ucx
if ls "$out"/lib/libucs.so* >/dev/null 2>&1 && [[ -d "$ucx_modules" ]]; then
  mkdir -p "$out/lib/ucx"
  # cma: same-host copies between processes; tcp, posix and sysv are built into libuct.
  cp -L "$ucx_modules"/libuct_cma.so.0 "$out/lib/ucx/" 2>/dev/null || true
fi
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
echo "bundle: $out: $(ls "$out/bin" | tr '\n' ' ')+ $(ls "$out/lib" | grep -c '\.so') libraries"

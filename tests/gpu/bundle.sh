#!/usr/bin/env bash
# Builds the portable GPU bundle .gpu/dapple-gpu.tar.xz: the binaries tests/gpu/run.sh needs
# (stripped, in the build tree's layout), the non-CUDA, non-libc shared libraries they load, and
# Fashion-MNIST, so run.sh works on a GPU machine that has the CUDA 13 driver and libraries but
# none of the Debian packages dapple builds with. CUDA's own libraries (cudart, cuBLAS(Lt),
# NCCL) are never bundled: run.sh finds the machine's copies. Fails if the bundle reaches 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${DAPPLE_BUILD_DIR:-build}"
OUT=.gpu/dapple-gpu.tar.xz
BINARIES=(
  coordinator/dapple-coordinator worker/dapple-worker dapplectl/dapplectl tests/dapple-reference
  kernels/cuda/kernels_cuda_test worker/device/cuda_device_test worker/device/device_test
  worker/comm/cuda/comm_cuda_test worker/comm/cuda/comm_cuda_test_peer
  worker/runtime/cuda/cuda_stage_backend_test worker/runtime/cuda/cuda_schedule_test
  worker/runtime/cuda/cuda_stage_state_test worker/daemon/stage_links_test
  bench/linear_cuda_bench bench/gpt_cuda_bench
)

scripts/setup --no-build
export CCACHE_BASEDIR="$PWD"
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
targets=()
for b in "${BINARIES[@]}"; do targets+=("$(basename "$b")"); done
cmake --build "$BUILD_DIR" -j "${DAPPLE_BUILD_JOBS:-2}" --target "${targets[@]}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/dapple-gpu"
mkdir -p "$root/build" "$root/lib" "$root/data"
for b in "${BINARIES[@]}"; do
  mkdir -p "$root/build/$(dirname "$b")"
  strip --strip-debug -o "$root/build/$b" "$BUILD_DIR/$b"
done
# Libraries: everything ldd resolves except glibc's own and CUDA's (the machine brings those).
skip='^(libc|libm|libpthread|libdl|librt|libresolv|ld-linux-x86-64|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*)\.'
for b in "${BINARIES[@]}"; do
  ldd "$BUILD_DIR/$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  name="$(basename "$lib")"
  [[ "$name" =~ $skip ]] && continue
  cp -L "$lib" "$root/lib/$name"
done
strip --strip-unneeded "$root"/lib/*.so* 2>/dev/null || true
cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$root/data/"
mkdir -p .gpu
XZ_OPT=-6 tar -C "$stage" -cJf "$OUT" dapple-gpu
bytes=$(stat -c %s "$OUT")
echo "bundle: $OUT $((bytes / 1048576)) MiB ($(ls "$root/lib" | wc -l) libraries)"
if ((bytes >= 64 * 1048576)); then
  echo "bundle: $OUT is over 64 MiB" >&2
  exit 1
fi

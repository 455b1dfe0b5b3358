#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU: every gpu-labelled test (the GPT kernels and
# layers and the cuDNN image ops and layers against their CPU twins, with the tolerances their
# test files state: kernels/cuda/cudnn_ops_test.cc, image_layers_test.cc; GPT stages against the
# CPU backend among them), the Linear kernel benchmark against cuBLAS's own GEMM, the GPT
# kernels' benchmark, and jobs on one GPU (the demo job with 2 stages sharing the GPU; GPU-vs-CPU
# parity; a GPT on text; the ResNet example against the CPU reference; the demo job and the GPT
# again in bf16 against their fp32 runs, with each stage's achieved TFLOP/s and MFU), then a
# short table. The bf16 checks (training.precision bf16, the BGRADB bias gradient, MFU) are
# new and not yet run on hardware: kernels_cuda_test's LinearTest (SeparateBiasGrad paths) and
# LinearDeterminismTest, cuda_stage_backend_test's CudaBf16* tests, gpu_jobs.py check 7, and
# linear_cuda_bench's last column (which bias-gradient path each shape took).
# Under 8 minutes on one H200.
#
# From a bundle (tests/gpu/bundle.sh; .gpu/dapple-gpu.tar.xz present): runs on a machine without
# dapple's Debian packages, using the machine's CUDA libraries. Otherwise from the build tree.
# Logs go to /tmp/dapple-gpu-logs, and as one gpu-logs.tar.gz into $OUT when that is set.
# Exit 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGS=/tmp/dapple-gpu-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
SRC="$PWD"

if [[ -f .gpu/dapple-gpu.tar.xz ]]; then
  rm -rf /tmp/dapple-gpu && tar -C /tmp -xJf .gpu/dapple-gpu.tar.xz
  BUILD=/tmp/dapple-gpu/build
  DATA=/tmp/dapple-gpu/data
  libdirs=/tmp/dapple-gpu/lib
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9; do
    found="$(find -H /usr/local/cuda/lib64 /usr/local /usr/lib /opt \
               -name "$lib" 2>/dev/null | head -1)"
    if [[ -z "$found" ]]; then echo "run.sh: $lib not found on this machine" >&2; exit 1; fi
    libdirs="$libdirs:$(dirname "$found")"
  done
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  BUILD="$SRC/${DAPPLE_BUILD_DIR:-build}"
  DATA=/usr/share/datasets/fashion-mnist
fi
export DAPPLE_BUILD_DIR="$BUILD" DAPPLE_SOURCE_DIR="$SRC" DAPPLE_DATA_DIR="$DATA"
PY="$(command -v python3)"
gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
echo "== GPU: ${gpu:-none found}"

declare -a rows
status=0
echo "== gpu tests"
for t in kernels/cuda/kernels_cuda_test worker/device/cuda_device_test worker/device/device_test \
         worker/comm/cuda/comm_cuda_test worker/runtime/cuda/cuda_stage_backend_test \
         worker/daemon/stage_links_test; do
  name="$(basename "$t")"
  timeout 240 "$BUILD/$t" --gtest_brief=1 >"$LOGS/$name.log" 2>&1
  rc=$?
  passed="$(grep -c '^\[       OK \]' "$LOGS/$name.log")"
  summary="$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOGS/$name.log" | tr '\n' ' ')"
  [[ $rc -ne 0 ]] && status=1 && tail -40 "$LOGS/$name.log"
  rows+=("$(printf '%-26s rc=%-3s %s' "$name" "$rc" "$summary")")
done

echo "== Linear vs cuBLAS GEMM"
timeout 180 "$BUILD/bench/linear_cuda_bench" 2>&1 | tee "$LOGS/linear_cuda_bench.log"
[[ ${PIPESTATUS[0]} -ne 0 ]] && status=1

echo "== GPT kernels (GB/s, TFLOP/s)"
timeout 180 "$BUILD/bench/gpt_cuda_bench" 2>&1 | tee "$LOGS/gpt_cuda_bench.log"
[[ ${PIPESTATUS[0]} -ne 0 ]] && status=1

echo "== jobs on one GPU"
PYTHONUNBUFFERED=1 timeout 540 "$PY" tests/gpu/gpu_jobs.py 2>&1 | tee "$LOGS/gpu_jobs.log"
[[ ${PIPESTATUS[0]} -ne 0 ]] && status=1

echo
echo "== summary (GPU: ${gpu:-none})"
for r in "${rows[@]}"; do echo "$r"; done
grep -E '^(fp32|bf16|dtype)' "$LOGS/linear_cuda_bench.log" || true
grep -E '(transformer_block|attention)' "$LOGS/gpt_cuda_bench.log" || true
grep '^RESULT' "$LOGS/gpu_jobs.log" | sed 's/^RESULT //' || true
echo "overall: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
if [[ -n "${OUT:-}" ]]; then tar -C /tmp -czf "$OUT/gpu-logs.tar.gz" dapple-gpu-logs; fi
exit $status

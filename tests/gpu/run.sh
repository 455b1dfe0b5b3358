#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU: every gpu-labelled test (the GPT kernels and
# layers and the cuDNN image ops and layers against their CPU twins, with the tolerances their
# test files state: kernels/cuda/cudnn_ops_test.cc, image_layers_test.cc; GPT stages against the
# CPU backend among them), the Linear kernel benchmark against cuBLAS's own GEMM, the GPT
# kernels' benchmark, and jobs on one GPU (the demo job with 2 stages sharing the GPU; GPU-vs-CPU
# parity; a GPT on text; the ResNet example against the CPU reference; the demo job and the GPT
# again in bf16 against their fp32 runs, with each stage's achieved TFLOP/s and MFU), then a
# short table; the zero-bubble split and activation recomputation on CUDA stages
# (cuda_schedule_test; gpu_jobs.py's zb-h1 / zb-h2 / recompute parity jobs). The bf16 checks
# (training.precision bf16, the BGRADB bias gradient, MFU): kernels_cuda_test's LinearTest
# (SeparateBiasGrad paths) and LinearDeterminismTest, cuda_stage_backend_test's CudaBf16* tests,
# gpu_jobs.py check 7, and linear_cuda_bench's last column (which bias-gradient path each shape
# took).
# Bounded by DAPPLE_GPU_BUDGET_S (default 480) seconds in all: each part's timeout is cut to what
# is left, and a part with under 20 s left is skipped and reported (so a device lease with room
# for a rerun is never overrun; the logs come back whatever happened).
# DAPPLE_GPU_PARTS (default "tests linear jobs gptbench") runs a subset; DAPPLE_GPU_JOBS_CHECKS
# (gpu_jobs.py's check names, comma-separated) a subset of the jobs; GTEST_FILTER the tests'.
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
BUDGET_END=$(($(date +%s) + ${DAPPLE_GPU_BUDGET_S:-480}))
# limit SECONDS: SECONDS, or what is left of the budget when less; 0 when under 20 s are left.
limit() {
  local left=$((BUDGET_END - $(date +%s) - 10))
  if ((left < 20)); then echo 0; elif ((left < $1)); then echo "$left"; else echo "$1"; fi
}
skipped() { echo "SKIPPED (budget): $1"; rows+=("$(printf '%-26s skipped: out of budget' "$1")"); status=1; }
PARTS=" ${DAPPLE_GPU_PARTS:-tests linear jobs gptbench} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
echo "== gpu tests"
want tests && for t in worker/runtime/cuda/cuda_schedule_test worker/runtime/cuda/cuda_stage_backend_test \
         kernels/cuda/kernels_cuda_test worker/runtime/cuda/cuda_stage_state_test \
         worker/device/cuda_device_test worker/device/device_test \
         worker/comm/cuda/comm_cuda_test worker/daemon/stage_links_test; do
  name="$(basename "$t")"
  t_s=$(limit 240)
  if ((t_s == 0)); then skipped "$name"; continue; fi
  timeout "$t_s" "$BUILD/$t" --gtest_brief=1 >"$LOGS/$name.log" 2>&1
  rc=$?
  passed="$(grep -c '^\[       OK \]' "$LOGS/$name.log")"
  summary="$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOGS/$name.log" | tr '\n' ' ')"
  [[ $rc -ne 0 ]] && status=1 && tail -40 "$LOGS/$name.log"
  rows+=("$(printf '%-26s rc=%-3s %s' "$name" "$rc" "$summary")")
done

echo "== Linear vs cuBLAS GEMM"
t_s=$(limit 120)
if ! want linear; then echo "(not asked for)"; elif ((t_s == 0)); then skipped linear_cuda_bench; else
  timeout "$t_s" "$BUILD/bench/linear_cuda_bench" 2>&1 | tee "$LOGS/linear_cuda_bench.log"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi

echo "== jobs on one GPU"
t_s=$(limit 540)
if ! want jobs; then echo "(not asked for)"; elif ((t_s == 0)); then skipped gpu_jobs; else
  # The jobs script stops starting checks when its own deadline is near (and says which).
  DAPPLE_GPU_JOBS_DEADLINE=$(($(date +%s) + t_s - 15)) PYTHONUNBUFFERED=1 \
    timeout "$t_s" "$PY" tests/gpu/gpu_jobs.py 2>&1 | tee "$LOGS/gpu_jobs.log"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi

echo "== GPT kernels (GB/s, TFLOP/s)"
t_s=$(limit 120)
if ! want gptbench; then echo "(not asked for)"; elif ((t_s == 0)); then skipped gpt_cuda_bench; else
  timeout "$t_s" "$BUILD/bench/gpt_cuda_bench" 2>&1 | tee "$LOGS/gpt_cuda_bench.log"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi

echo
echo "== summary (GPU: ${gpu:-none})"
for r in "${rows[@]}"; do echo "$r"; done
grep -E '^(fp32|bf16|dtype)' "$LOGS/linear_cuda_bench.log" 2>/dev/null || true
grep -E '(transformer_block|attention)' "$LOGS/gpt_cuda_bench.log" 2>/dev/null || true
grep '^RESULT' "$LOGS/gpu_jobs.log" 2>/dev/null | sed 's/^RESULT //' || true
echo "overall: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
if [[ -n "${OUT:-}" ]]; then tar -C /tmp -czf "$OUT/gpu-logs.tar.gz" dapple-gpu-logs; fi
exit $status

#include <math_constants.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/loss.h"

namespace dapple::kernels::cuda {
namespace {

using internal::ToFloat;

constexpr int kMaxThreads = 256;
using internal::kFullMask;
using internal::kWarp;
using internal::WarpSum;

// A candidate maximum: value and column; column == kNone means "no element seen".
struct ArgMax {
  float value;
  int64_t column;
};
constexpr int64_t kNone = INT64_MAX;

// The first maximum, as the CPU's sequential `row[j] > row[best]` scan: a strictly larger value
// wins, equal values keep the smaller column. (With NaN logits the two scans may pick different
// columns; that row's loss is NaN either way.)
__device__ __forceinline__ ArgMax Better(ArgMax a, ArgMax b) {
  if (a.column == kNone) return b;
  if (b.column == kNone) return a;
  if (b.value > a.value) return b;
  if (a.value > b.value) return a;
  return b.column < a.column ? b : a;
}

// Block-wide reductions for blockDim.x a multiple of 32 (<= kMaxThreads); every thread gets the
// result. `scratch` holds one slot per warp; the trailing __syncthreads lets the caller reuse it.
__device__ ArgMax BlockArgMax(ArgMax v, ArgMax* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    ArgMax other;
    other.value = __shfl_xor_sync(kFullMask, v.value, offset);
    other.column = __shfl_xor_sync(kFullMask, v.column, offset);
    v = Better(v, other);
  }
  const int warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  if (threadIdx.x % kWarp == 0) scratch[warp] = v;
  __syncthreads();
  ArgMax result = scratch[0];
  for (int i = 1; i < warps; ++i) result = Better(result, scratch[i]);
  __syncthreads();
  return result;
}

// Sums in a fixed order (the same tree for a given blockDim), so a row's loss is reproducible.
__device__ double BlockSum(double v, double* scratch) {
  v = WarpSum(v);
  const int warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  if (threadIdx.x % kWarp == 0) scratch[warp] = v;
  __syncthreads();
  double result = scratch[0];
  for (int i = 1; i < warps; ++i) result += scratch[i];
  __syncthreads();
  return result;
}

__device__ __forceinline__ void Store(float* p, double v) { *p = static_cast<float>(v); }
__device__ __forceinline__ void Store(bf16* p, double v) { *p = __double2bfloat16(v); }

// One block per row (grid-stride over rows), the math of kernels/cpu/loss.cc's RowLoss: the max
// subtraction, the sum of exponentials and its log in double, and
// dlogits = (softmax - onehot) * grad_scale evaluated in double, rounded once.
template <typename T>
__global__ void SoftmaxCrossEntropyKernel(const T* __restrict__ logits,
                                          const int32_t* __restrict__ labels, int64_t n, int64_t c,
                                          float grad_scale, T* __restrict__ dlogits,
                                          double* __restrict__ row_loss,
                                          int32_t* __restrict__ row_correct) {
  __shared__ ArgMax argmax_scratch[kMaxThreads / kWarp];
  __shared__ double sum_scratch[kMaxThreads / kWarp];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const T* row = logits + r * c;
    ArgMax best{0.0f, kNone};
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      best = Better(best, ArgMax{ToFloat(row[j]), j});
    }
    best = BlockArgMax(best, argmax_scratch);
    const double max = best.value;

    double partial = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      partial += exp(static_cast<double>(ToFloat(row[j])) - max);
    }
    const double log_sum = log(BlockSum(partial, sum_scratch));

    const int32_t label = labels[r];
    const bool valid = label >= 0 && label < c;
    if (threadIdx.x == 0) {
      row_loss[r] = valid ? log_sum - (static_cast<double>(ToFloat(row[label])) - max) : CUDART_NAN;
      if (row_correct != nullptr) row_correct[r] = best.column == label ? 1 : 0;
    }
    if (dlogits != nullptr) {
      T* drow = dlogits + r * c;
      for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
        if (!valid) {
          Store(drow + j, 0.0);
          continue;
        }
        const double p = exp(static_cast<double>(ToFloat(row[j])) - max - log_sum);
        Store(drow + j, (p - (j == label ? 1.0 : 0.0)) * static_cast<double>(grad_scale));
      }
    }
  }
}

template <typename T>
absl::Status Launch(const KernelContext& ctx, const char* op, const T* logits,
                    const int32_t* labels, int64_t n, int64_t c, float grad_scale, T* dlogits,
                    double* row_loss, int32_t* row_correct) {
  if (n <= 0 || c <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": logits [", n, ", ", c, "] must have n > 0 and c > 0"));
  }
  if (logits == nullptr || labels == nullptr || row_loss == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": logits, labels and row_loss must be device pointers, not null"));
  }
  // Narrow blocks for narrow rows (10 classes need one warp), 256 threads for wide ones.
  int threads = kWarp;
  while (threads < kMaxThreads && threads < c) threads *= 2;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, int64_t{1} << 20));
  SoftmaxCrossEntropyKernel<T><<<blocks, threads, 0, ctx.stream>>>(logits, labels, n, c, grad_scale,
                                                                   dlogits, row_loss, row_correct);
  return internal::LaunchStatus(op);
}

}  // namespace

absl::Status SoftmaxCrossEntropy(const KernelContext& ctx, const float* logits,
                                 const int32_t* labels, int64_t n, int64_t c, float grad_scale,
                                 float* dlogits, double* row_loss, int32_t* row_correct) {
  return Launch(ctx, "SoftmaxCrossEntropy", logits, labels, n, c, grad_scale, dlogits, row_loss,
                row_correct);
}

absl::Status SoftmaxCrossEntropyBf16(const KernelContext& ctx, const bf16* logits,
                                     const int32_t* labels, int64_t n, int64_t c, float grad_scale,
                                     bf16* dlogits, double* row_loss, int32_t* row_correct) {
  return Launch(ctx, "SoftmaxCrossEntropyBf16", logits, labels, n, c, grad_scale, dlogits, row_loss,
                row_correct);
}

}  // namespace dapple::kernels::cuda

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/softmax.h"

namespace dapple::kernels::cuda {
namespace {

using internal::FromFloat;
using internal::ToFloat;

using internal::kFullMask;
using internal::kRowsPerBlock;
using internal::kWarp;
using internal::WarpSum;

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// One warp per row (rows = batch * seq, grid-stride in warp units); row r is row i = r % seq of
// its matrix.
template <typename T>
__global__ void ForwardKernel(T* s, int64_t rows, int64_t seq) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < rows;
       r += warps) {
    T* row = s + r * seq;
    const int64_t last = r % seq;  // columns 0 .. last are unmasked
    float max = -INFINITY;
    for (int64_t j = lane; j <= last; j += kWarp) max = fmaxf(max, ToFloat(row[j]));
    max = WarpMax(max);
    double sum = 0;
    for (int64_t j = lane; j <= last; j += kWarp) sum += expf(__fsub_rn(ToFloat(row[j]), max));
    const float total = static_cast<float>(WarpSum(sum));
    for (int64_t j = lane; j < seq; j += kWarp) {
      const float p = j <= last ? __fdiv_rn(expf(__fsub_rn(ToFloat(row[j]), max)), total) : 0.0f;
      row[j] = FromFloat<T>(p);
    }
  }
}

template <typename T>
__global__ void BackwardKernel(const T* __restrict__ p, const T* dp, T* ds, int64_t rows,
                               int64_t seq) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < rows;
       r += warps) {
    const T* pr = p + r * seq;
    const T* gr = dp + r * seq;
    T* out = ds + r * seq;
    const int64_t last = r % seq;
    double dot = 0;
    for (int64_t j = lane; j <= last; j += kWarp) {
      dot += static_cast<double>(ToFloat(pr[j])) * ToFloat(gr[j]);
    }
    const float d = static_cast<float>(WarpSum(dot));
    // Each lane reads and writes only its own columns, so ds may be dp.
    for (int64_t j = lane; j < seq; j += kWarp) {
      const float v = j <= last ? __fmul_rn(ToFloat(pr[j]), __fsub_rn(ToFloat(gr[j]), d)) : 0.0f;
      out[j] = FromFloat<T>(v);
    }
  }
}

absl::Status Check(const char* op, int64_t batch, int64_t seq) {
  if (batch < 0 || seq <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": batch ", batch, ", seq ", seq, ": need batch >= 0 and seq > 0"));
  }
  return absl::OkStatus();
}

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 1, int64_t{1} << 20));
}

template <typename T>
absl::Status Forward(const KernelContext& ctx, T* s, int64_t batch, int64_t seq) {
  DAPPLE_RETURN_IF_ERROR(Check("CausalSoftmaxForward", batch, seq));
  if (batch == 0) return absl::OkStatus();
  if (s == nullptr) return absl::InvalidArgumentError("CausalSoftmaxForward: null pointer");
  const int64_t rows = batch * seq;
  ForwardKernel<T><<<RowBlocks(rows), internal::kBlock, 0, ctx.stream>>>(s, rows, seq);
  return internal::LaunchStatus("CausalSoftmaxForward");
}

template <typename T>
absl::Status Backward(const KernelContext& ctx, const T* p, const T* dp, T* ds, int64_t batch,
                      int64_t seq) {
  DAPPLE_RETURN_IF_ERROR(Check("CausalSoftmaxBackward", batch, seq));
  if (batch == 0) return absl::OkStatus();
  if (p == nullptr || dp == nullptr || ds == nullptr) {
    return absl::InvalidArgumentError("CausalSoftmaxBackward: null pointer");
  }
  const int64_t rows = batch * seq;
  BackwardKernel<T><<<RowBlocks(rows), internal::kBlock, 0, ctx.stream>>>(p, dp, ds, rows, seq);
  return internal::LaunchStatus("CausalSoftmaxBackward");
}

}  // namespace

absl::Status CausalSoftmaxForward(const KernelContext& ctx, float* s, int64_t batch, int64_t seq) {
  return Forward(ctx, s, batch, seq);
}
absl::Status CausalSoftmaxForward(const KernelContext& ctx, bf16* s, int64_t batch, int64_t seq) {
  return Forward(ctx, s, batch, seq);
}
absl::Status CausalSoftmaxBackward(const KernelContext& ctx, const float* p, const float* dp,
                                   float* ds, int64_t batch, int64_t seq) {
  return Backward(ctx, p, dp, ds, batch, seq);
}
absl::Status CausalSoftmaxBackward(const KernelContext& ctx, const bf16* p, const bf16* dp,
                                   bf16* ds, int64_t batch, int64_t seq) {
  return Backward(ctx, p, dp, ds, batch, seq);
}

}  // namespace dapple::kernels::cuda

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/dropout.h"

namespace dapple::kernels::cuda {
namespace {

using internal::FromFloat;
using internal::ToFloat;

// Elements per thread before a block's threads move on: amortises the row key (five
// splitmix64 rounds) over several elements of the row.
constexpr int kElementsPerThread = 8;

// grid.y walks the rows (each thread derives its row's key once), grid.x the elements of a row.
// `in`, `residual` and `out` may alias (each element is read before it is written by the same
// thread), so none is __restrict__.
template <typename TIn, typename TOut>
__global__ void DropoutKernel(DropoutMask mask, bool active, int64_t rows, int64_t per_sample,
                              const TIn* in, const TOut* residual, TOut* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const uint64_t key = active ? mask.RowKey(r) : 0;
    const int64_t base = r * per_sample;
    for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < per_sample;
         e += stride) {
      float v = ToFloat(in[base + e]);
      if (active) {
        v = DropoutKeep(key, static_cast<uint64_t>(e), mask.threshold) ? __fmul_rn(v, mask.scale)
                                                                       : 0.0f;
      }
      if (residual != nullptr) v = __fadd_rn(ToFloat(residual[base + e]), v);
      out[base + e] = FromFloat<TOut>(v);
    }
  }
}

template <typename TIn, typename TOut>
absl::Status Launch(const KernelContext& ctx, const DropoutMask* mask, int64_t rows,
                    int64_t per_sample, const TIn* in, const TOut* residual, TOut* out) {
  if (rows < 0 || per_sample < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dropout: rows ", rows, " and per_sample ", per_sample, " must be >= 0"));
  }
  if (rows == 0 || per_sample == 0) return absl::OkStatus();
  if (in == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("Dropout: null device pointer");
  }
  if constexpr (std::is_same_v<TIn, TOut>) {
    // The identity in place: nothing to do.
    if (mask == nullptr && residual == nullptr && static_cast<const void*>(in) == out) {
      return absl::OkStatus();
    }
  }
  const int64_t per_block = int64_t{internal::kBlock} * kElementsPerThread;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((per_sample + per_block - 1) / per_block,
                                                          int64_t{1} << 16)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  DropoutKernel<TIn, TOut><<<grid, internal::kBlock, 0, ctx.stream>>>(
      mask != nullptr ? *mask : DropoutMask{}, mask != nullptr, rows, per_sample, in, residual,
      out);
  return internal::LaunchStatus("Dropout");
}

}  // namespace

absl::Status Dropout(const KernelContext& ctx, const DropoutMask* mask, int64_t rows,
                     int64_t per_sample, const float* in, const float* residual, float* out) {
  return Launch(ctx, mask, rows, per_sample, in, residual, out);
}
absl::Status Dropout(const KernelContext& ctx, const DropoutMask* mask, int64_t rows,
                     int64_t per_sample, const bf16* in, const bf16* residual, bf16* out) {
  return Launch(ctx, mask, rows, per_sample, in, residual, out);
}
absl::Status Dropout(const KernelContext& ctx, const DropoutMask* mask, int64_t rows,
                     int64_t per_sample, const bf16* in, const float* residual, float* out) {
  return Launch(ctx, mask, rows, per_sample, in, residual, out);
}

}  // namespace dapple::kernels::cuda

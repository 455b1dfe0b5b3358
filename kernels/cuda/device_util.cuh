// Internal helpers shared by the .cu files of kernels/cuda (not a public API): element
// conversions, grid sizing for grid-stride loops and the launch check every op returns.
#ifndef DAPPLE_KERNELS_CUDA_DEVICE_UTIL_CUH_
#define DAPPLE_KERNELS_CUDA_DEVICE_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_status.h"

namespace dapple::kernels::cuda::internal {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(bf16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 FromFloat<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

constexpr int kBlock = 256;

// Warp-level reductions (one row per warp in the row kernels of layernorm.cu, softmax.cu and
// loss.cu).
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRowsPerBlock = kBlock / kWarp;

// Butterfly sum over the warp: every lane gets the same total, added in the same order on every
// run (so results are deterministic).
__device__ __forceinline__ double WarpSum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Blocks for a grid-stride loop over `count` elements: enough to fill any current GPU several
// times over, few enough that each thread handles a handful of elements.
inline unsigned GridFor(int64_t count, int block = kBlock) {
  const int64_t blocks = (count + block - 1) / block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 16));
}

// The status of the launch just made (launch configuration errors, or an earlier asynchronous
// error surfacing here).
inline absl::Status LaunchStatus(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return CudaStatus(err, absl::StrCat(op, " kernel launch"));
}

inline absl::Status CheckCount(const char* op, int64_t count) {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": count ", count, " must be >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace dapple::kernels::cuda::internal

#endif  // DAPPLE_KERNELS_CUDA_DEVICE_UTIL_CUH_

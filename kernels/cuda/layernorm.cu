#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/layernorm.h"

namespace dapple::kernels::cuda {
namespace {

using internal::FromFloat;
using internal::ToFloat;

using internal::kFullMask;
using internal::kRowsPerBlock;
using internal::kWarp;
using internal::WarpSum;

// 1 / sqrt(var + eps) in fp32 with correctly rounded operations: kernels/cpu/layernorm.cc's
// `1.0f / std::sqrt(var + eps)`, bit for bit, whatever nvcc's math flags.
__device__ __forceinline__ float Rstd(float var, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));
}

__device__ __forceinline__ float Normalised(float x, float mean, float rstd) {
  return __fmul_rn(__fsub_rn(x, mean), rstd);
}

// One warp per row (grid-stride over rows in warp units).
template <typename T>
__global__ void ForwardKernel(const T* __restrict__ x, const float* __restrict__ gamma,
                              const float* __restrict__ beta, int64_t rows, int64_t cols, float eps,
                              T* __restrict__ y, float* __restrict__ mean_out,
                              float* __restrict__ var_out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < rows;
       r += warps) {
    const T* xr = x + r * cols;
    double sum = 0;
    for (int64_t c = lane; c < cols; c += kWarp) sum += ToFloat(xr[c]);
    const double m = WarpSum(sum) / static_cast<double>(cols);
    double sq = 0;
    for (int64_t c = lane; c < cols; c += kWarp) {
      const double d = ToFloat(xr[c]) - m;
      sq += d * d;
    }
    const float mean = static_cast<float>(m);
    const float var = static_cast<float>(WarpSum(sq) / static_cast<double>(cols));
    const float rstd = Rstd(var, eps);
    T* yr = y + r * cols;
    for (int64_t c = lane; c < cols; c += kWarp) {
      const float v =
          __fadd_rn(__fmul_rn(Normalised(ToFloat(xr[c]), mean, rstd), gamma[c]), beta[c]);
      yr[c] = FromFloat<T>(v);
    }
    if (lane == 0) {
      mean_out[r] = mean;
      var_out[r] = var;
    }
  }
}

// One warp per row: the two row means of the input gradient in double, then dx.
template <typename T>
__global__ void BackwardInputKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                    const float* __restrict__ mean, const float* __restrict__ var,
                                    const float* __restrict__ gamma, int64_t rows, int64_t cols,
                                    float eps, const T* residual, T* dx) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < rows;
       r += warps) {
    const T* xr = x + r * cols;
    const T* gr = dy + r * cols;
    const float m = mean[r];
    const float rstd = Rstd(var[r], eps);
    double sum_g = 0, sum_gx = 0;
    for (int64_t c = lane; c < cols; c += kWarp) {
      const float g = __fmul_rn(ToFloat(gr[c]), gamma[c]);
      const float xh = Normalised(ToFloat(xr[c]), m, rstd);
      sum_g += g;
      sum_gx += static_cast<double>(g) * xh;
    }
    const float mean_g = static_cast<float>(WarpSum(sum_g) / static_cast<double>(cols));
    const float mean_gx = static_cast<float>(WarpSum(sum_gx) / static_cast<double>(cols));
    T* out = dx + r * cols;
    const T* res = residual != nullptr ? residual + r * cols : nullptr;
    for (int64_t c = lane; c < cols; c += kWarp) {
      const float g = __fmul_rn(ToFloat(gr[c]), gamma[c]);
      const float xh = Normalised(ToFloat(xr[c]), m, rstd);
      float v = __fmul_rn(rstd, __fsub_rn(__fsub_rn(g, mean_g), __fmul_rn(xh, mean_gx)));
      if (res != nullptr) v = __fadd_rn(ToFloat(res[c]), v);
      out[c] = FromFloat<T>(v);
    }
  }
}

// Column sums over a chunk of rows (as linear.cu's bias gradient): block (32, 8), the 32
// threads of a warp on 32 consecutive columns of one row, the 8 warps interleaving rows; their
// 8 partial sums are added in a fixed order. One chunk: straight into dgamma / dbeta; several:
// into partial[(chunk * cols + column) * 2 + {0, 1}] for FinishWeightKernel.
constexpr int kColTile = 32;
constexpr int kRowThreads = 8;

template <typename T>
__global__ void WeightKernel(const T* __restrict__ x, const T* __restrict__ dy,
                             const float* __restrict__ mean, const float* __restrict__ var,
                             int64_t rows, int64_t cols, float eps, int64_t rows_per_chunk,
                             double* __restrict__ partial, float* __restrict__ dgamma,
                             float* __restrict__ dbeta) {
  __shared__ double tile_g[kRowThreads][kColTile + 1];
  __shared__ double tile_b[kRowThreads][kColTile + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t row_begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t row_end = min(rows, row_begin + rows_per_chunk);
  double sg = 0, sb = 0;
  if (col < cols) {
    for (int64_t r = row_begin + threadIdx.y; r < row_end; r += kRowThreads) {
      const float xh = Normalised(ToFloat(x[r * cols + col]), mean[r], Rstd(var[r], eps));
      const double d = ToFloat(dy[r * cols + col]);
      sg += d * static_cast<double>(xh);
      sb += d;
    }
  }
  tile_g[threadIdx.y][threadIdx.x] = sg;
  tile_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  double tg = tile_g[0][threadIdx.x], tb = tile_b[0][threadIdx.x];
  for (int i = 1; i < kRowThreads; ++i) {
    tg += tile_g[i][threadIdx.x];
    tb += tile_b[i][threadIdx.x];
  }
  if (partial != nullptr) {
    double* p = partial + (static_cast<int64_t>(blockIdx.y) * cols + col) * 2;
    p[0] = tg;
    p[1] = tb;
  } else {
    dgamma[col] += static_cast<float>(tg);
    dbeta[col] += static_cast<float>(tb);
  }
}

__global__ void FinishWeightKernel(const double* __restrict__ partial, int64_t chunks, int64_t cols,
                                   float* __restrict__ dgamma, float* __restrict__ dbeta) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += stride) {
    double tg = 0, tb = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      tg += partial[(k * cols + c) * 2];
      tb += partial[(k * cols + c) * 2 + 1];
    }
    dgamma[c] += static_cast<float>(tg);
    dbeta[c] += static_cast<float>(tb);
  }
}

absl::Status Check(const char* op, int64_t rows, int64_t cols, float eps,
                   std::initializer_list<const void*> required) {
  if (rows < 0 || cols <= 0 || !(eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": rows ", rows, ", cols ", cols, ", eps ",
                                                   eps, ": need rows >= 0, cols > 0, eps > 0"));
  }
  if (rows == 0) return absl::OkStatus();
  for (const void* p : required) {
    if (p == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": null device pointer"));
  }
  return absl::OkStatus();
}

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 1, int64_t{1} << 20));
}

template <typename T>
absl::Status Forward(const KernelContext& ctx, const T* x, const float* gamma, const float* beta,
                     int64_t rows, int64_t cols, float eps, T* y, float* mean, float* var) {
  DAPPLE_RETURN_IF_ERROR(
      Check("LayerNormForward", rows, cols, eps, {x, gamma, beta, y, mean, var}));
  if (rows == 0) return absl::OkStatus();
  ForwardKernel<T><<<RowBlocks(rows), internal::kBlock, 0, ctx.stream>>>(x, gamma, beta, rows, cols,
                                                                         eps, y, mean, var);
  return internal::LaunchStatus("LayerNormForward");
}

template <typename T>
absl::Status BackwardInput(const KernelContext& ctx, const T* x, const T* dy, const float* mean,
                           const float* var, const float* gamma, int64_t rows, int64_t cols,
                           float eps, const T* residual, T* dx) {
  DAPPLE_RETURN_IF_ERROR(
      Check("LayerNormBackwardInput", rows, cols, eps, {x, dy, mean, var, gamma, dx}));
  if (rows == 0) return absl::OkStatus();
  BackwardInputKernel<T><<<RowBlocks(rows), internal::kBlock, 0, ctx.stream>>>(
      x, dy, mean, var, gamma, rows, cols, eps, residual, dx);
  return internal::LaunchStatus("LayerNormBackwardInput");
}

// Splits the rows into chunks when ctx.workspace holds their partial sums, so that a narrow
// layer (few column tiles) still spreads over the GPU.
template <typename T>
absl::Status BackwardWeight(const KernelContext& ctx, const T* x, const T* dy, const float* mean,
                            const float* var, int64_t rows, int64_t cols, float eps, float* dgamma,
                            float* dbeta) {
  DAPPLE_RETURN_IF_ERROR(
      Check("LayerNormBackwardWeight", rows, cols, eps, {x, dy, mean, var, dgamma, dbeta}));
  if (rows == 0) return absl::OkStatus();
  constexpr int64_t kTargetBlocks = 1024;
  constexpr int64_t kMinRowsPerChunk = 64;
  const int64_t column_blocks = (cols + kColTile - 1) / kColTile;
  int64_t chunks = 1;
  if (ctx.workspace != nullptr && column_blocks < kTargetBlocks) {
    chunks = (kTargetBlocks + column_blocks - 1) / column_blocks;
    chunks = std::min(chunks, (rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk);
    chunks = std::min<int64_t>(chunks, 65535);
    chunks = std::min<int64_t>(
        chunks, static_cast<int64_t>(ctx.workspace_bytes / (2 * cols * sizeof(double))));
    chunks = std::max<int64_t>(chunks, 1);
  }
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  double* partial = chunks > 1 ? static_cast<double*>(ctx.workspace) : nullptr;
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(chunks));
  WeightKernel<T><<<grid, dim3(kColTile, kRowThreads), 0, ctx.stream>>>(
      x, dy, mean, var, rows, cols, eps, rows_per_chunk, partial, dgamma, dbeta);
  DAPPLE_RETURN_IF_ERROR(internal::LaunchStatus("LayerNormBackwardWeight"));
  if (chunks > 1) {
    FinishWeightKernel<<<internal::GridFor(cols), internal::kBlock, 0, ctx.stream>>>(
        partial, chunks, cols, dgamma, dbeta);
    DAPPLE_RETURN_IF_ERROR(internal::LaunchStatus("LayerNormBackwardWeight (partial sums)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LayerNormForward(const KernelContext& ctx, const float* x, const float* gamma,
                              const float* beta, int64_t rows, int64_t cols, float eps, float* y,
                              float* mean, float* var) {
  return Forward(ctx, x, gamma, beta, rows, cols, eps, y, mean, var);
}
absl::Status LayerNormForward(const KernelContext& ctx, const bf16* x, const float* gamma,
                              const float* beta, int64_t rows, int64_t cols, float eps, bf16* y,
                              float* mean, float* var) {
  return Forward(ctx, x, gamma, beta, rows, cols, eps, y, mean, var);
}

absl::Status LayerNormBackwardInput(const KernelContext& ctx, const float* x, const float* dy,
                                    const float* mean, const float* var, const float* gamma,
                                    int64_t rows, int64_t cols, float eps, const float* residual,
                                    float* dx) {
  return BackwardInput(ctx, x, dy, mean, var, gamma, rows, cols, eps, residual, dx);
}
absl::Status LayerNormBackwardInput(const KernelContext& ctx, const bf16* x, const bf16* dy,
                                    const float* mean, const float* var, const float* gamma,
                                    int64_t rows, int64_t cols, float eps, const bf16* residual,
                                    bf16* dx) {
  return BackwardInput(ctx, x, dy, mean, var, gamma, rows, cols, eps, residual, dx);
}

absl::Status LayerNormBackwardWeight(const KernelContext& ctx, const float* x, const float* dy,
                                     const float* mean, const float* var, int64_t rows,
                                     int64_t cols, float eps, float* dgamma, float* dbeta) {
  return BackwardWeight(ctx, x, dy, mean, var, rows, cols, eps, dgamma, dbeta);
}
absl::Status LayerNormBackwardWeight(const KernelContext& ctx, const bf16* x, const bf16* dy,
                                     const float* mean, const float* var, int64_t rows,
                                     int64_t cols, float eps, float* dgamma, float* dbeta) {
  return BackwardWeight(ctx, x, dy, mean, var, rows, cols, eps, dgamma, dbeta);
}

}  // namespace dapple::kernels::cuda

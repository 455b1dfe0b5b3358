#include "absl/strings/str_cat.h"
#include "kernels/cuda/batchnorm_stats.h"
#include "kernels/cuda/device_util.cuh"

namespace dapple::kernels::cuda {
namespace {

using internal::kBlock;
using internal::kWarp;
using internal::WarpSum;

// Block `ch` sums channel ch: each thread a strided share of the n x hw elements, then warps,
// then the block's warps in order.
__global__ void ChannelSumsKernel(const float* __restrict__ x, int64_t n, int64_t c, int64_t hw,
                                  double* __restrict__ sums) {
  __shared__ double warp_sum[kBlock / kWarp];
  __shared__ double warp_sq[kBlock / kWarp];
  const int64_t ch = blockIdx.x;
  const int64_t per_channel = n * hw;
  double s = 0, q = 0;
  for (int64_t i = threadIdx.x; i < per_channel; i += blockDim.x) {
    const int64_t sample = i / hw;
    const double v = x[(sample * c + ch) * hw + i % hw];
    s += v;
    q += v * v;
  }
  s = WarpSum(s);
  q = WarpSum(q);
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0) {
    warp_sum[warp] = s;
    warp_sq[warp] = q;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double ts = 0, tq = 0;
    for (int w = 0; w < kBlock / kWarp; ++w) {
      ts += warp_sum[w];
      tq += warp_sq[w];
    }
    sums[ch] += ts;
    sums[c + ch] += tq;
  }
}

}  // namespace

absl::Status AccumulateChannelSums(const KernelContext& ctx, const float* x, int64_t n, int64_t c,
                                   int64_t hw, double* sums) {
  if (n < 0 || c < 0 || hw < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batchnorm statistics: sizes n ", n, " c ", c, " hw ", hw, " must be >= 0"));
  }
  if (n == 0 || c == 0 || hw == 0) return absl::OkStatus();
  ChannelSumsKernel<<<static_cast<unsigned>(c), kBlock, 0, ctx.stream>>>(x, n, c, hw, sums);
  return internal::LaunchStatus("batchnorm statistics");
}

}  // namespace dapple::kernels::cuda

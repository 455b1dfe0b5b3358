// Batch normalisation's step statistics on the GPU: per channel the sum and the sum of squares
// of the input, in double, as kernels/cpu/batchnorm2d.h's BatchNormChannels accumulates them on
// the CPU (docs/layers.md, "Batch normalisation"): from x itself, not from cuDNN's float mean
// and variance, because the step's variance is a difference of sums over the whole global
// batch.
#ifndef DAPPLE_KERNELS_CUDA_BATCHNORM_STATS_H_
#define DAPPLE_KERNELS_CUDA_BATCHNORM_STATS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

// For x [n, c, hw] fp32: sums[ch] += sum of x over (n, hw) of channel ch and sums[c + ch] +=
// the sum of squares, both in double (sums: [2c] doubles of device memory). One block per
// channel, a fixed order of additions: deterministic. kInvalidArgument for negative sizes.
absl::Status AccumulateChannelSums(const KernelContext& ctx, const float* x, int64_t n, int64_t c,
                                   int64_t hw, double* sums);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_BATCHNORM_STATS_H_

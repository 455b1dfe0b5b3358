// Optimizer updates on the GPU, element for element the formulas of kernels/cpu/optimizer.h
// (torch.optim.SGD with dampening 0 and torch.optim.AdamW, single-tensor path), on fp32 weights
// (the master weights in mixed precision). `count` elements of w, g and each state array (all
// device memory, state zero-initialised by the caller before the first step); count >= 0.
// Hyper-parameters are host scalars. Stream-ordered (context.h).
#ifndef DAPPLE_KERNELS_CUDA_OPTIMIZER_H_
#define DAPPLE_KERNELS_CUDA_OPTIMIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

// d = g + wd * w; v = momentum * v + d; w -= lr * v (float scalars, as the CPU version).
absl::Status SgdStep(const KernelContext& ctx, float* w, const float* g, float* v, int64_t count,
                     float lr, float momentum, float weight_decay);

// Step t >= 1: w *= (1 - lr * wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), bc_i = 1 - beta_i^t computed in double on
// the host and rounded to float exactly as kernels/cpu/optimizer.cc does.
absl::Status AdamWStep(const KernelContext& ctx, float* w, const float* g, float* m, float* v,
                       int64_t count, double lr, double beta1, double beta2, double eps,
                       double weight_decay, int64_t t);

// Mixed precision helpers: out[i] = bf16(in[i]) (round to nearest even) and back.
absl::Status CastToBf16(const KernelContext& ctx, const float* in, bf16* out, int64_t count);
absl::Status CastToFloat(const KernelContext& ctx, const bf16* in, float* out, int64_t count);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_OPTIMIZER_H_

// Element-wise activations on the GPU, the CUDA twins of kernels/cpu/activations.h (same
// formulas: ReLU with subgradient 0 at 0; exact erf GELU). `count` elements, any count >= 0
// (0 enqueues nothing); count < 0 is kInvalidArgument. dx may alias dy. Stream-ordered
// (context.h). Flatten needs no kernel: it is the same bytes.
#ifndef DAPPLE_KERNELS_CUDA_ACTIVATIONS_H_
#define DAPPLE_KERNELS_CUDA_ACTIVATIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

absl::Status ReluForward(const KernelContext& ctx, const float* x, float* y, int64_t count);
// dx = dy where x > 0, else 0.
absl::Status ReluBackward(const KernelContext& ctx, const float* x, const float* dy, float* dx,
                          int64_t count);
absl::Status GeluForward(const KernelContext& ctx, const float* x, float* y, int64_t count);
// dx = dy * (Phi(x) + x * phi(x)).
absl::Status GeluBackward(const KernelContext& ctx, const float* x, const float* dy, float* dx,
                          int64_t count);

// bf16 twins (math in fp32, stored in bf16).
absl::Status ReluForwardBf16(const KernelContext& ctx, const bf16* x, bf16* y, int64_t count);
absl::Status ReluBackwardBf16(const KernelContext& ctx, const bf16* x, const bf16* dy, bf16* dx,
                              int64_t count);
absl::Status GeluForwardBf16(const KernelContext& ctx, const bf16* x, bf16* y, int64_t count);
absl::Status GeluBackwardBf16(const KernelContext& ctx, const bf16* x, const bf16* dy, bf16* dx,
                              int64_t count);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_ACTIVATIONS_H_

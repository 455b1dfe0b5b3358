// The causal softmax of masked self-attention on the GPU: the masking and softmax steps of
// kernels/cpu/attention.h (S[i, j] = -inf for j > i, then softmax by rows, which makes those
// entries exactly 0), fused. One warp per row; the row's sums in double, every stored value
// rounded once; reductions in a fixed order (bitwise reproducible run to run).
//
// Layout: `batch` matrices [seq, seq] (batch = samples x heads), row-major, contiguous. Row i
// of each matrix uses columns j <= i. Element types fp32 or bf16 (math in fp32 and double).
// batch >= 0, seq > 0 (else kInvalidArgument); batch == 0 enqueues nothing. Stream-ordered
// (context.h).
#ifndef DAPPLE_KERNELS_CUDA_SOFTMAX_H_
#define DAPPLE_KERNELS_CUDA_SOFTMAX_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

// In place: s[i, j] = exp(s[i, j] - max) / sum_{j' <= i} exp(s[i, j'] - max) for j <= i (max
// over j <= i), 0 for j > i. The entries above the diagonal are never read (may hold anything).
absl::Status CausalSoftmaxForward(const KernelContext& ctx, float* s, int64_t batch, int64_t seq);
absl::Status CausalSoftmaxForward(const KernelContext& ctx, bf16* s, int64_t batch, int64_t seq);

// ds = p * (dp - sum_{j <= i} p dp) for j <= i, 0 for j > i, from the forward's output p and
// dp = dL/dp. ds may alias dp (not p).
absl::Status CausalSoftmaxBackward(const KernelContext& ctx, const float* p, const float* dp,
                                   float* ds, int64_t batch, int64_t seq);
absl::Status CausalSoftmaxBackward(const KernelContext& ctx, const bf16* p, const bf16* dp,
                                   bf16* ds, int64_t batch, int64_t seq);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_SOFTMAX_H_

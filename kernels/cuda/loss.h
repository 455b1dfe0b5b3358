// Softmax cross-entropy on the GPU, fused forward and backward: the CUDA twin of
// kernels/cpu/loss.h. One thread block per row; the log-sum-exp runs in double, as on the CPU.
//
// logits [n, c] fp32, labels [n] int32 (device memory): one row per target, so per-sample logits
// [N, C] are N rows and a language model's per-token logits [N, T, V] are n = N T rows of
// c = V (labels row-major like the logits, as kernels/cpu/loss.h). Per-row results go to device
// arrays so the caller can sum them on the host in row order (the CPU reference's order):
//   row_loss[r]    = -log softmax(logits[r])[labels[r]] (NaN for a label outside [0, c))
//   row_correct[r] = 1 when argmax(logits[r]) == labels[r] (ties: the first maximum), else 0
//   dlogits[r]     = (softmax(logits[r]) - onehot(labels[r])) * grad_scale (zero row for a bad
//                    label); pass dlogits = null for evaluation.
// row_correct may be null. n > 0 and c > 0, else kInvalidArgument. Stream-ordered (context.h).
#ifndef DAPPLE_KERNELS_CUDA_LOSS_H_
#define DAPPLE_KERNELS_CUDA_LOSS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

absl::Status SoftmaxCrossEntropy(const KernelContext& ctx, const float* logits,
                                 const int32_t* labels, int64_t n, int64_t c, float grad_scale,
                                 float* dlogits, double* row_loss, int32_t* row_correct);

// bf16 logits and dlogits (math in fp32/double).
absl::Status SoftmaxCrossEntropyBf16(const KernelContext& ctx, const bf16* logits,
                                     const int32_t* labels, int64_t n, int64_t c, float grad_scale,
                                     bf16* dlogits, double* row_loss, int32_t* row_correct);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_LOSS_H_

// Softmax cross-entropy, fused forward and backward.
#ifndef DAPPLE_KERNELS_CPU_LOSS_H_
#define DAPPLE_KERNELS_CPU_LOSS_H_

#include <cstdint>

#include "kernels/cpu/tensor.h"

namespace dapple::kernels {

// logits: [N, C]; labels: N values in [0, C). Returns the SUM over the N samples of
// -log(softmax(logits)[label]) (a sum, so micro-batches add up to the global batch), computed
// with the max-subtraction trick. Writes dlogits = (softmax(logits) - onehot(label)) * grad_scale
// ([N, C], resized); pass grad_scale = 1 / global_batch for a mean loss over the global batch.
// `correct` (may be null) receives how many rows have argmax == label (ties: the first maximum).
// A label outside [0, C) makes the returned sum NaN and that row's dlogits zero (the caller's data
// reader validates labels; NaN makes a slip visible in the reported loss). logits must be rank 2
// with C > 0 (else abort: a programming error). Thread safety: pure function.
double SoftmaxCrossEntropy(const Tensor& logits, const int32_t* labels, float grad_scale,
                           Tensor* dlogits, int64_t* correct);

// Forward only (evaluation): the loss sum as above, and the count of correct argmax predictions.
double SoftmaxCrossEntropyEval(const Tensor& logits, const int32_t* labels, int64_t* correct);

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_LOSS_H_

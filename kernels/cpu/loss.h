// Softmax cross-entropy, fused forward and backward.
#ifndef DAPPLE_KERNELS_CPU_LOSS_H_
#define DAPPLE_KERNELS_CPU_LOSS_H_

#include <cstdint>

#include "kernels/cpu/tensor.h"

namespace dapple::kernels {

// logits: [N, C] (one target per sample) or [N, T, C] (one per position, a language model's):
// R = numel / C rows of C classes; labels: R values in [0, C), row-major like the logits.
// Returns the SUM over the R rows of -log(softmax(row)[label]) (a sum, so micro-batches add up
// to the global batch), computed with the max-subtraction trick, the log-sum-exp in double.
// Writes dlogits = (softmax(logits) - onehot(label)) * grad_scale (the logits' shape, resized);
// pass grad_scale = 1 / (global batch x targets per sample) for a mean over every target of the
// global batch. `correct` (may be null) receives how many rows have argmax == label (ties: the
// first maximum). A label outside [0, C) makes the returned sum NaN and that row's dlogits zero
// (the caller's data reader validates labels; NaN makes a slip visible in the reported loss).
// logits must be rank >= 2 with C > 0 (else abort: a programming error).
// Thread safety: pure function.
double SoftmaxCrossEntropy(const Tensor& logits, const int32_t* labels, float grad_scale,
                           Tensor* dlogits, int64_t* correct);

// Forward only (evaluation): the loss sum as above, and the count of correct argmax predictions.
double SoftmaxCrossEntropyEval(const Tensor& logits, const int32_t* labels, int64_t* correct);

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_LOSS_H_

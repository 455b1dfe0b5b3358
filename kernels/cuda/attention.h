// Causal multi-head scaled dot-product attention on the GPU (Vaswani et al., NeurIPS 2017,
// section 3.2; GPT-2's masked self-attention): the CUDA twin of kernels/cpu/attention.h, between
// the transformer block's qkv and output projections. Per sample and head h of width
// d = width / heads:
//   S = q_h k_h^T / sqrt(d) with S[i, j] = -inf for j > i,  P = softmax(S) by rows,  o_h = P v_h
// as strided-batched GEMMs over all samples and heads at once (batched_gemm.h), the causal
// softmax of softmax.h, and the layout changes of permute.h around them.
//
// Layouts (row-major; rows = n * seq, sample s's rows s * seq .. s * seq + seq - 1):
//   qkv       [rows, 3 width]: q | k | v, head h at columns h d .. h d + d - 1 of each third
//             (as on the CPU);
//   qkv_heads [3, n, heads, seq, d]: the same values head-major (permute.h), kept for the
//             backward in place of qkv;
//   probs     [n, heads, seq, seq]: P, zero above the diagonal (as the CPU's);
//   out       [rows, width]: the heads' outputs side by side;
//   scratch   AttentionScratchElements() elements, contents undefined between calls.
// Element types fp32 or bf16 (probabilities and scores in the element type; GEMMs accumulate in
// fp32). All sizes > 0 and heads dividing width (else kInvalidArgument). Buffers must not
// overlap. Stream-ordered (context.h).
#ifndef DAPPLE_KERNELS_CUDA_ATTENTION_H_
#define DAPPLE_KERNELS_CUDA_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

struct AttentionShape {
  int64_t n = 0;  // samples
  int64_t seq = 0;
  int64_t width = 0;
  int64_t heads = 0;
};

// Scratch (elements of the element type) for the forward, the backward and either.
int64_t AttentionForwardScratchElements(const AttentionShape& s);
int64_t AttentionBackwardScratchElements(const AttentionShape& s);

// Writes qkv_heads, probs and out from qkv.
absl::Status CausalAttentionForward(const KernelContext& ctx, const AttentionShape& shape,
                                    const float* qkv, float* qkv_heads, float* probs,
                                    float* scratch, float* out);
absl::Status CausalAttentionForward(const KernelContext& ctx, const AttentionShape& shape,
                                    const bf16* qkv, bf16* qkv_heads, bf16* probs, bf16* scratch,
                                    bf16* out);

// From the forward's qkv_heads and probs and dL/dout [rows, width], writes dL/dqkv [rows,
// 3 width] (overwrites): dv = P^T do, dP = do v^T, dS = softmax backward, dq = dS k / sqrt(d),
// dk = dS^T q / sqrt(d).
absl::Status CausalAttentionBackward(const KernelContext& ctx, const AttentionShape& shape,
                                     const float* qkv_heads, const float* probs, const float* dout,
                                     float* scratch, float* dqkv);
absl::Status CausalAttentionBackward(const KernelContext& ctx, const AttentionShape& shape,
                                     const bf16* qkv_heads, const bf16* probs, const bf16* dout,
                                     bf16* scratch, bf16* dqkv);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_ATTENTION_H_

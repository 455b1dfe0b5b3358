// Causal multi-head scaled dot-product attention (Vaswani et al., NeurIPS 2017, section 3.2;
// GPT-2's masked self-attention), the core of TransformerBlockLayer between its qkv and output
// projections. Per sample and head h of width d = C / heads:
//   S = q_h k_h^T / sqrt(d) with S[i, j] = -inf for j > i,  P = softmax(S) by rows,  o_h = P v_h
// GEMMs on OpenBLAS (one sgemm per sample and head), softmax on oneDNN (onednn_ops.h).
//
// Layouts (row-major fp32, rows = N * T, sample n's rows n * T .. n * T + T - 1):
//   qkv  [rows, 3C]: q | k | v, head h at columns h d .. h d + d - 1 of each third (PyTorch's
//        split of one [3C, C] projection);
//   probs [N, heads, T, T]: P, zero above the diagonal;
//   out  [rows, C]: the heads' outputs side by side (head h at columns h d ..).
// One thread per object.
#ifndef DAPPLE_KERNELS_CPU_ATTENTION_H_
#define DAPPLE_KERNELS_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "kernels/cpu/onednn_ops.h"

namespace dapple::kernels {

class CausalSelfAttention {
 public:
  // Requires seq, width, heads > 0 and heads dividing width.
  CausalSelfAttention(int64_t seq, int64_t width, int64_t heads);

  // Writes probs and out for n samples.
  void Forward(const float* qkv, int64_t n, float* probs, float* out);
  // From the forward's qkv and probs and dL/dout, writes dL/dqkv [rows, 3C] (overwrites).
  void Backward(const float* qkv, const float* probs, const float* dout, int64_t n, float* dqkv);

 private:
  int64_t seq_, width_, heads_, head_dim_;
  float scale_;  // 1 / sqrt(head_dim)
  SoftmaxOp softmax_;
  std::vector<float> dscores_;  // one sample's dL/dP then dL/dS, [heads, T, T]
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_ATTENTION_H_

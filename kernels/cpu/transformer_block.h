// One pre-LayerNorm GPT-2 block as one layer (common/model/transformer_block.cc fixes the math,
// the parameters and what is saved). On x [N, T, C], row-wise over the N T rows:
//   a = x + dropout_0(proj(attention(ln1(x))))        CausalSelfAttention (attention.h)
//   y = a + dropout_1(fc2(gelu(fc(ln2(a)))))          exact GELU, hidden width H
// with LayerNorm eps 1e-5 (layernorm.h), dropout at sites 0 and 1 of this layer (dropout.h,
// element t C + c of a sample, p = the spec's dropout), the four linear maps (qkv [3C, C],
// proj [C, C], fc [H, C], fc2 [C, H], each with a bias) on OpenBLAS (dense.h).
#ifndef DAPPLE_KERNELS_CPU_TRANSFORMER_BLOCK_H_
#define DAPPLE_KERNELS_CPU_TRANSFORMER_BLOCK_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/layer.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/onednn_ops.h"

namespace dapple::kernels {

// Parameters, in common/model's order and named "layer<index>.<name>": ln1.weight [C],
// ln1.bias [C], attn.qkv.weight [3C, C], attn.qkv.bias [3C], attn.proj.weight [C, C],
// attn.proj.bias [C], ln2.weight [C], ln2.bias [C], mlp.fc.weight [H, C], mlp.fc.bias [H],
// mlp.proj.weight [C, H], mlp.proj.bias [C].
//
// cache->saved after Forward (exactly common/model's list; per sample 7TC + 2TH + hT^2 + 4T
// floats), indexed by Saved. cache->grads after BackwardInput, indexed by Grad: the gradients
// w.r.t. the outputs of the four linear maps and of both LayerNorms, from which BackwardWeight
// computes the parameter gradients only (dW += g^T input and db += sum g per map, dgamma and
// dbeta per LayerNorm): Zero Bubble's B / W split (Qi et al., ICLR 2024).
//
// Shapes: x [N, T, C] -> y [N, T, C]; a mismatched x or dy aborts (kernels/cpu/check.h). dx
// must not alias x, y or dy. One thread per layer object.
class TransformerBlockLayer : public Layer {
 public:
  // The dropout sites of the block (dropout_mask.h): on the attention branch, on the MLP branch.
  static constexpr uint32_t kAttentionDropoutSite = 0;
  static constexpr uint32_t kMlpDropoutSite = 1;

  enum ParamIndex {
    kLn1Weight,
    kLn1Bias,
    kQkvWeight,
    kQkvBias,
    kProjWeight,
    kProjBias,
    kLn2Weight,
    kLn2Bias,
    kFcWeight,
    kFcBias,
    kFc2Weight,
    kFc2Bias,
    kNumParams
  };
  enum Saved {
    kLn1Out,  // [N, T, C]
    kQkv,     // [N, T, 3C]
    kProbs,   // [N, heads, T, T]
    kAttn,    // [N, T, C] merged heads, the projection's input
    kA,       // [N, T, C] the residual after attention
    kLn2Out,  // [N, T, C]
    kFc,      // [N, T, H] before GELU
    kGelu,    // [N, T, H]
    // [N, T] each: the LayerNorms' row statistics (mean, biased variance).
    kMean1,
    kVar1,
    kMean2,
    kVar2,
    kNumSaved
  };
  enum Grad {
    kGradFc2Out,   // [N, T, C] dL/d(fc2 output): dy through dropout_1
    kGradFcOut,    // [N, T, H] dL/d(fc output), before GELU
    kGradLn2Out,   // [N, T, C]
    kGradProjOut,  // [N, T, C] dL/d(proj output): dL/da through dropout_0
    kGradQkvOut,   // [N, T, 3C]
    kGradLn1Out,   // [N, T, C]
    kNumGrads
  };

  // Values and grads start at zero; call InitParams. Requires seq, width, heads, hidden > 0,
  // heads dividing width, dropout in [0, 1).
  TransformerBlockLayer(int layer_index, int64_t seq, int64_t width, int64_t heads, int64_t hidden,
                        double dropout);

  // Weight matrices U(-a, a), a = Gpt2InitBound() (std 0.02), from the streams (seed,
  // layer_index, kAttnQkvWeight / kAttnProjWeight / kMlpFcWeight / kMlpProjWeight); biases 0;
  // LayerNorm weights 1 and biases 0.
  void InitParams(uint64_t seed);

  std::string Type() const override { return "transformer_block"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
  void BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                      LayerCache* cache) override;
  std::vector<Param*> Params() override;

  Param& param(ParamIndex i) { return params_[i]; }

 private:
  // Rows N T of x (aborts unless x is [N, T, C] and dy, when given, has x's shape).
  int64_t Rows(const Tensor& x, const Tensor* dy) const;
  const float* Value(ParamIndex i) const { return params_[i].value.data.data(); }

  int layer_index_;
  int64_t seq_, width_, heads_, hidden_;
  double dropout_;
  std::array<Param, kNumParams> params_;
  LayerNormRows ln1_, ln2_;
  CausalSelfAttention attention_;
  GeluOp gelu_;
  // Scratch within one call (never carried between calls, so micro-batches may interleave).
  Tensor grad_a_;     // [rows, C] dL/da
  Tensor grad_attn_;  // [rows, C] dL/d(merged attention output)
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_TRANSFORMER_BLOCK_H_

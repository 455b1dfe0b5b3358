// The transformer block on the GPU, the twin of kernels/cpu/transformer_block.h: one
// pre-LayerNorm GPT-2 block, on x [N, T, C], row-wise over the N T rows:
//   a = x + dropout_0(proj(attention(ln1(x))))
//   y = a + dropout_1(fc2(gelu(fc(ln2(a)))))
// with the CPU block's parameters (TransformerBlockLayer::ParamIndex), its saved tensors
// (TransformerBlockLayer::Saved: the same list and sizes, with kQkv held head-major for the
// batched attention GEMMs) and its B / W split (TransformerBlockLayer::Grad: the gradients
// w.r.t. the four maps' outputs and both LayerNorms' outputs).
#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/transformer_block.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/layers_internal.h"
#include "kernels/cuda/typed_ops.h"

namespace dapple::kernels::cuda::internal {
namespace {

using Cpu = kernels::TransformerBlockLayer;

template <typename T>
class TransformerBlockLayer : public DeviceLayer {
 public:
  TransformerBlockLayer(const LayerInfo& info, int64_t heads, int64_t hidden, double dropout)
      : DeviceLayer(info, typed::kDtype<T>),
        seq_(info.input_shape[0]),
        width_(info.input_shape[1]),
        heads_(heads),
        hidden_(hidden),
        dropout_(dropout),
        eps_(static_cast<float>(kDefaultLayerNormEps)) {}

  std::string Type() const override { return "transformer_block"; }

  absl::StatusOr<LayerBuffers> Buffers(int64_t rows) const override {
    const int64_t r = rows * seq_;
    auto elems = [](int64_t count) { return static_cast<size_t>(count) * sizeof(T); };
    const size_t tc = elems(r * width_);
    const size_t th = elems(r * hidden_);
    const size_t stats = static_cast<size_t>(r) * sizeof(float);
    LayerBuffers b;
    b.saved.resize(Cpu::kNumSaved);
    b.saved[Cpu::kLn1Out] = b.saved[Cpu::kAttn] = b.saved[Cpu::kA] = b.saved[Cpu::kLn2Out] = tc;
    b.saved[Cpu::kQkv] = 3 * tc;
    b.saved[Cpu::kProbs] = elems(rows * heads_ * seq_ * seq_);
    b.saved[Cpu::kFc] = b.saved[Cpu::kGelu] = th;
    b.saved[Cpu::kMean1] = b.saved[Cpu::kVar1] = b.saved[Cpu::kMean2] = b.saved[Cpu::kVar2] = stats;
    b.grads.resize(Cpu::kNumGrads);
    b.grads[Cpu::kGradFc2Out] = b.grads[Cpu::kGradLn2Out] = b.grads[Cpu::kGradProjOut] =
        b.grads[Cpu::kGradLn1Out] = tc;
    b.grads[Cpu::kGradFcOut] = th;
    b.grads[Cpu::kGradQkvOut] = 3 * tc;
    const AttentionShape shape = Shape(rows);
    // Forward: the qkv projection's output, then the attention's scratch. Backward: dL/da,
    // dL/d(attention output), then the attention's scratch.
    const int64_t forward = 3 * r * width_ + AttentionForwardScratchElements(shape);
    const int64_t backward = 2 * r * width_ + AttentionBackwardScratchElements(shape);
    b.scratch = elems(std::max(forward, backward));
    return b;
  }

  absl::Status Forward(const KernelContext& ctx, const void* x_in, void* y_out, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch scratch) override {
    cache->ctx = fctx;
    const T* x = static_cast<const T*>(x_in);
    T* y = static_cast<T*>(y_out);
    const int64_t r = rows * seq_, c = width_;
    auto s = [&](Cpu::Saved i) { return static_cast<T*>(cache->saved[i]); };
    auto stat = [&](Cpu::Saved i) { return static_cast<float*>(cache->saved[i]); };
    T* qkv = static_cast<T*>(scratch.data);
    T* attention_scratch = qkv + 3 * r * c;
    DropoutMask m0, m1;
    const DropoutMask* mask0 = Mask(fctx, Cpu::kAttentionDropoutSite, &m0);
    const DropoutMask* mask1 = Mask(fctx, Cpu::kMlpDropoutSite, &m1);

    // Attention branch: a = x + dropout_0(proj(attention(ln1(x)))).
    DAPPLE_RETURN_IF_ERROR(LayerNormForward(ctx, x, Value(Cpu::kLn1Weight), Value(Cpu::kLn1Bias), r,
                                            c, eps_, s(Cpu::kLn1Out), stat(Cpu::kMean1),
                                            stat(Cpu::kVar1)));
    DAPPLE_RETURN_IF_ERROR(typed::LinearForward(ctx, s(Cpu::kLn1Out), Weight(Cpu::kQkvWeight),
                                                &param(Cpu::kQkvBias), qkv, r, c, 3 * c));
    DAPPLE_RETURN_IF_ERROR(CausalAttentionForward(
        ctx, Shape(rows), qkv, s(Cpu::kQkv), s(Cpu::kProbs), attention_scratch, s(Cpu::kAttn)));
    DAPPLE_RETURN_IF_ERROR(typed::LinearForward(ctx, s(Cpu::kAttn), Weight(Cpu::kProjWeight),
                                                &param(Cpu::kProjBias), s(Cpu::kA), r, c, c));
    DAPPLE_RETURN_IF_ERROR(Dropout(ctx, mask0, rows, seq_ * c, s(Cpu::kA), x, s(Cpu::kA)));

    // MLP branch: y = a + dropout_1(fc2(gelu(fc(ln2(a))))).
    DAPPLE_RETURN_IF_ERROR(LayerNormForward(ctx, s(Cpu::kA), Value(Cpu::kLn2Weight),
                                            Value(Cpu::kLn2Bias), r, c, eps_, s(Cpu::kLn2Out),
                                            stat(Cpu::kMean2), stat(Cpu::kVar2)));
    DAPPLE_RETURN_IF_ERROR(typed::LinearForward(ctx, s(Cpu::kLn2Out), Weight(Cpu::kFcWeight),
                                                &param(Cpu::kFcBias), s(Cpu::kFc), r, c, hidden_));
    DAPPLE_RETURN_IF_ERROR(typed::GeluForward(ctx, s(Cpu::kFc), s(Cpu::kGelu), r * hidden_));
    DAPPLE_RETURN_IF_ERROR(typed::LinearForward(ctx, s(Cpu::kGelu), Weight(Cpu::kFc2Weight),
                                                &param(Cpu::kFc2Bias), y, r, hidden_, c));
    return Dropout(ctx, mask1, rows, seq_ * c, y, s(Cpu::kA), y);
  }

  absl::Status BackwardInput(const KernelContext& ctx, const void* x_in, const void*,
                             const void* dy_in, void* dx_out, int64_t rows, DeviceCache* cache,
                             Scratch scratch) override {
    const T* x = static_cast<const T*>(x_in);
    const T* dy = static_cast<const T*>(dy_in);
    const int64_t r = rows * seq_, c = width_;
    auto s = [&](Cpu::Saved i) { return static_cast<const T*>(cache->saved[i]); };
    auto stat = [&](Cpu::Saved i) { return static_cast<const float*>(cache->saved[i]); };
    auto g = [&](Cpu::Grad i) { return static_cast<T*>(cache->grads[i]); };
    T* grad_a = static_cast<T*>(scratch.data);  // dL/da
    T* grad_attn = grad_a + r * c;              // dL/d(merged attention output)
    T* attention_scratch = grad_attn + r * c;
    DropoutMask m0, m1;
    const DropoutMask* mask0 = Mask(cache->ctx, Cpu::kAttentionDropoutSite, &m0);
    const DropoutMask* mask1 = Mask(cache->ctx, Cpu::kMlpDropoutSite, &m1);

    // MLP branch, from dy: fc2 (through dropout_1), GELU, fc, ln2; dL/da = dy + ln2's dx.
    DAPPLE_RETURN_IF_ERROR(Dropout(ctx, mask1, rows, seq_ * c, dy, static_cast<const T*>(nullptr),
                                   g(Cpu::kGradFc2Out)));
    DAPPLE_RETURN_IF_ERROR(typed::LinearBackwardInput(
        ctx, Weight(Cpu::kFc2Weight), g(Cpu::kGradFc2Out), g(Cpu::kGradFcOut), r, hidden_, c));
    DAPPLE_RETURN_IF_ERROR(
        typed::GeluBackward(ctx, s(Cpu::kFc), g(Cpu::kGradFcOut), g(Cpu::kGradFcOut), r * hidden_));
    DAPPLE_RETURN_IF_ERROR(typed::LinearBackwardInput(
        ctx, Weight(Cpu::kFcWeight), g(Cpu::kGradFcOut), g(Cpu::kGradLn2Out), r, c, hidden_));
    DAPPLE_RETURN_IF_ERROR(LayerNormBackwardInput(
        ctx, s(Cpu::kA), static_cast<const T*>(g(Cpu::kGradLn2Out)), stat(Cpu::kMean2),
        stat(Cpu::kVar2), Value(Cpu::kLn2Weight), r, c, eps_, dy, grad_a));

    // Attention branch, from dL/da: proj (through dropout_0), attention, qkv, ln1;
    // dx = dL/da + ln1's dx.
    DAPPLE_RETURN_IF_ERROR(Dropout(ctx, mask0, rows, seq_ * c, static_cast<const T*>(grad_a),
                                   static_cast<const T*>(nullptr), g(Cpu::kGradProjOut)));
    DAPPLE_RETURN_IF_ERROR(typed::LinearBackwardInput(ctx, Weight(Cpu::kProjWeight),
                                                      g(Cpu::kGradProjOut), grad_attn, r, c, c));
    DAPPLE_RETURN_IF_ERROR(CausalAttentionBackward(ctx, Shape(rows), s(Cpu::kQkv), s(Cpu::kProbs),
                                                   grad_attn, attention_scratch,
                                                   g(Cpu::kGradQkvOut)));
    DAPPLE_RETURN_IF_ERROR(typed::LinearBackwardInput(
        ctx, Weight(Cpu::kQkvWeight), g(Cpu::kGradQkvOut), g(Cpu::kGradLn1Out), r, c, 3 * c));
    if (dx_out == nullptr) return absl::OkStatus();
    return LayerNormBackwardInput(ctx, x, static_cast<const T*>(g(Cpu::kGradLn1Out)),
                                  stat(Cpu::kMean1), stat(Cpu::kVar1), Value(Cpu::kLn1Weight), r, c,
                                  eps_, static_cast<const T*>(grad_a), static_cast<T*>(dx_out));
  }

  absl::Status BackwardWeight(const KernelContext& ctx, const void* x_in, const void*, const void*,
                              int64_t rows, DeviceCache* cache, Scratch) override {
    const T* x = static_cast<const T*>(x_in);
    const int64_t r = rows * seq_, c = width_;
    auto s = [&](Cpu::Saved i) { return static_cast<const T*>(cache->saved[i]); };
    auto stat = [&](Cpu::Saved i) { return static_cast<const float*>(cache->saved[i]); };
    auto g = [&](Cpu::Grad i) { return static_cast<const T*>(cache->grads[i]); };
    auto grad = [&](Cpu::ParamIndex i) { return param(i).grad; };
    DAPPLE_RETURN_IF_ERROR(typed::LinearBackwardWeight(ctx, s(Cpu::kGelu), g(Cpu::kGradFc2Out),
                                                       grad(Cpu::kFc2Weight), grad(Cpu::kFc2Bias),
                                                       r, hidden_, c));
    DAPPLE_RETURN_IF_ERROR(typed::LinearBackwardWeight(ctx, s(Cpu::kLn2Out), g(Cpu::kGradFcOut),
                                                       grad(Cpu::kFcWeight), grad(Cpu::kFcBias), r,
                                                       c, hidden_));
    DAPPLE_RETURN_IF_ERROR(LayerNormBackwardWeight(ctx, s(Cpu::kA), g(Cpu::kGradLn2Out),
                                                   stat(Cpu::kMean2), stat(Cpu::kVar2), r, c, eps_,
                                                   grad(Cpu::kLn2Weight), grad(Cpu::kLn2Bias)));
    DAPPLE_RETURN_IF_ERROR(typed::LinearBackwardWeight(ctx, s(Cpu::kAttn), g(Cpu::kGradProjOut),
                                                       grad(Cpu::kProjWeight), grad(Cpu::kProjBias),
                                                       r, c, c));
    DAPPLE_RETURN_IF_ERROR(typed::LinearBackwardWeight(ctx, s(Cpu::kLn1Out), g(Cpu::kGradQkvOut),
                                                       grad(Cpu::kQkvWeight), grad(Cpu::kQkvBias),
                                                       r, c, 3 * c));
    return LayerNormBackwardWeight(ctx, x, g(Cpu::kGradLn1Out), stat(Cpu::kMean1), stat(Cpu::kVar1),
                                   r, c, eps_, grad(Cpu::kLn1Weight), grad(Cpu::kLn1Bias));
  }

 private:
  AttentionShape Shape(int64_t rows) const { return AttentionShape{rows, seq_, width_, heads_}; }
  const float* Value(Cpu::ParamIndex i) const { return param(i).value; }
  const T* Weight(Cpu::ParamIndex i) const { return typed::GemmWeight<T>(param(i)); }
  const DropoutMask* Mask(const ForwardContext& fctx, uint32_t site, DropoutMask* storage) const {
    return typed::MaskFor(fctx, info().index, site, dropout_, storage);
  }

  int64_t seq_, width_, heads_, hidden_;
  double dropout_;
  float eps_;  // the CPU block's LayerNorm eps, rounded to fp32 as it does
};

}  // namespace

// Dimensions from the declaration (hidden: mlp.fc.weight [H, C]), heads and dropout from the
// spec (an unset dropout reads as 0), as the CPU factory.
std::unique_ptr<DeviceLayer> MakeTransformerBlockLayer(const LayerInfo& info,
                                                       const v1::LayerSpec& spec, Dtype dtype) {
  const v1::TransformerBlockParams& p = spec.transformer_block();
  const int64_t hidden = info.params[Cpu::kFcWeight].shape[0];
  if (dtype == Dtype::kFp32) {
    return std::make_unique<TransformerBlockLayer<float>>(info, p.heads(), hidden, p.dropout());
  }
  return std::make_unique<TransformerBlockLayer<bf16>>(info, p.heads(), hidden, p.dropout());
}

}  // namespace dapple::kernels::cuda::internal

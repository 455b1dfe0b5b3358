#include "kernels/cpu/transformer_block.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/dense.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/init.h"

namespace dapple::kernels {
namespace {

// out[i] += in[i] for i < n.
void AddInto(const float* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] += in[i];
}

}  // namespace

TransformerBlockLayer::TransformerBlockLayer(int layer_index, int64_t seq, int64_t width,
                                             int64_t heads, int64_t hidden, double dropout)
    : layer_index_(layer_index),
      seq_(seq),
      width_(width),
      heads_(heads),
      hidden_(hidden),
      dropout_(dropout),
      ln1_(width, static_cast<float>(kDefaultLayerNormEps)),
      ln2_(width, static_cast<float>(kDefaultLayerNormEps)),
      attention_(seq, width, heads) {
  DAPPLE_KERNEL_CHECK(hidden > 0 && dropout >= 0 && dropout < 1, "layer", layer_index,
                      " (transformer_block) hidden ", hidden, " dropout ", dropout);
  const int64_t c = width, h = hidden;
  const struct {
    const char* name;
    std::vector<int64_t> shape;
  } kParams[kNumParams] = {
      {"ln1.weight", {c}},
      {"ln1.bias", {c}},
      {"attn.qkv.weight", {3 * c, c}},
      {"attn.qkv.bias", {3 * c}},
      {"attn.proj.weight", {c, c}},
      {"attn.proj.bias", {c}},
      {"ln2.weight", {c}},
      {"ln2.bias", {c}},
      {"mlp.fc.weight", {h, c}},
      {"mlp.fc.bias", {h}},
      {"mlp.proj.weight", {c, h}},
      {"mlp.proj.bias", {c}},
  };
  for (int i = 0; i < kNumParams; ++i) {
    params_[i].name = absl::StrCat("layer", layer_index, ".", kParams[i].name);
    params_[i].value = Tensor::Zeros(kParams[i].shape);
    params_[i].grad = Tensor::Zeros(kParams[i].shape);
  }
}

void TransformerBlockLayer::InitParams(uint64_t seed) {
  const float bound = Gpt2InitBound();
  FillSymmetricUniform(seed, layer_index_, InitTensor::kAttnQkvWeight, bound,
                       &params_[kQkvWeight].value);
  FillSymmetricUniform(seed, layer_index_, InitTensor::kAttnProjWeight, bound,
                       &params_[kProjWeight].value);
  FillSymmetricUniform(seed, layer_index_, InitTensor::kMlpFcWeight, bound,
                       &params_[kFcWeight].value);
  FillSymmetricUniform(seed, layer_index_, InitTensor::kMlpProjWeight, bound,
                       &params_[kFc2Weight].value);
  for (ParamIndex i : {kQkvBias, kProjBias, kFcBias, kFc2Bias, kLn1Bias, kLn2Bias}) {
    params_[i].value.Fill(0.0f);
  }
  params_[kLn1Weight].value.Fill(1.0f);
  params_[kLn2Weight].value.Fill(1.0f);
}

std::vector<Param*> TransformerBlockLayer::Params() {
  std::vector<Param*> out;
  out.reserve(kNumParams);
  for (Param& p : params_) out.push_back(&p);
  return out;
}

int64_t TransformerBlockLayer::Rows(const Tensor& x, const Tensor* dy) const {
  DAPPLE_KERNEL_CHECK(x.shape.size() == 3 && x.shape[1] == seq_ && x.shape[2] == width_, "layer",
                      layer_index_, " (transformer_block) expects x [N, ", seq_, ", ", width_,
                      "], got ", ShapeToString(x.shape));
  if (dy != nullptr) {
    DAPPLE_KERNEL_CHECK(dy->shape == x.shape, "layer", layer_index_,
                        " (transformer_block) expects dy ", ShapeToString(x.shape), ", got ",
                        ShapeToString(dy->shape));
  }
  return x.rows() * seq_;
}

void TransformerBlockLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                                    const ForwardContext& ctx) {
  cache->ctx = ctx;
  const int64_t rows = Rows(x, nullptr);
  const int64_t n = x.rows(), c = width_;
  std::vector<Tensor>& s = cache->saved;
  s.resize(kNumSaved);
  for (Saved i : {kLn1Out, kAttn, kA, kLn2Out}) s[i].Resize({n, seq_, c});
  s[kQkv].Resize({n, seq_, 3 * c});
  s[kProbs].Resize({n, heads_, seq_, seq_});
  s[kFc].Resize({n, seq_, hidden_});
  s[kGelu].Resize({n, seq_, hidden_});
  for (Saved i : {kMean1, kVar1, kMean2, kVar2}) s[i].Resize({n, seq_});
  y->Resize(x.shape);

  // Attention branch: a = x + dropout_0(proj(attention(ln1(x)))).
  ln1_.Forward(x.data.data(), rows, Value(kLn1Weight), Value(kLn1Bias), s[kLn1Out].data.data(),
               s[kMean1].data.data(), s[kVar1].data.data());
  DenseForward(s[kLn1Out].data.data(), rows, c, 3 * c, Value(kQkvWeight), Value(kQkvBias),
               s[kQkv].data.data());
  attention_.Forward(s[kQkv].data.data(), n, s[kProbs].data.data(), s[kAttn].data.data());
  float* a = s[kA].data.data();
  DenseForward(s[kAttn].data.data(), rows, c, c, Value(kProjWeight), Value(kProjBias), a);
  ApplyDropout(ctx, layer_index_, kAttentionDropoutSite, dropout_, n, seq_ * c, a, a);
  AddInto(x.data.data(), rows * c, a);

  // MLP branch: y = a + dropout_1(fc2(gelu(fc(ln2(a))))).
  ln2_.Forward(a, rows, Value(kLn2Weight), Value(kLn2Bias), s[kLn2Out].data.data(),
               s[kMean2].data.data(), s[kVar2].data.data());
  DenseForward(s[kLn2Out].data.data(), rows, c, hidden_, Value(kFcWeight), Value(kFcBias),
               s[kFc].data.data());
  gelu_.Forward(s[kFc].data.data(), s[kGelu].data.data(), rows * hidden_);
  float* out = y->data.data();
  DenseForward(s[kGelu].data.data(), rows, hidden_, c, Value(kFc2Weight), Value(kFc2Bias), out);
  ApplyDropout(ctx, layer_index_, kMlpDropoutSite, dropout_, n, seq_ * c, out, out);
  AddInto(a, rows * c, out);
}

void TransformerBlockLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy,
                                          Tensor* dx, LayerCache* cache) {
  const int64_t rows = Rows(x, &dy);
  const int64_t n = x.rows(), c = width_;
  const ForwardContext& ctx = cache->ctx;
  const std::vector<Tensor>& s = cache->saved;
  std::vector<Tensor>& g = cache->grads;
  g.resize(kNumGrads);
  for (Grad i : {kGradFc2Out, kGradLn2Out, kGradProjOut, kGradLn1Out}) g[i].Resize({n, seq_, c});
  g[kGradFcOut].Resize({n, seq_, hidden_});
  g[kGradQkvOut].Resize({n, seq_, 3 * c});
  grad_a_.Resize({rows, c});
  grad_attn_.Resize({rows, c});

  // MLP branch, from dy: fc2 (through dropout_1), GELU, fc, ln2; dL/da = dy + ln2's dx.
  float* g_fc2 = g[kGradFc2Out].data.data();
  ApplyDropout(ctx, layer_index_, kMlpDropoutSite, dropout_, n, seq_ * c, dy.data.data(), g_fc2);
  float* g_fc = g[kGradFcOut].data.data();
  DenseBackwardInput(g_fc2, rows, hidden_, c, Value(kFc2Weight), /*accumulate=*/false, g_fc);
  gelu_.Backward(s[kFc].data.data(), g_fc, g_fc, rows * hidden_);
  float* g_ln2 = g[kGradLn2Out].data.data();
  DenseBackwardInput(g_fc, rows, c, hidden_, Value(kFcWeight), /*accumulate=*/false, g_ln2);
  float* g_a = grad_a_.data.data();
  std::copy(dy.data.begin(), dy.data.end(), g_a);
  ln2_.BackwardInput(s[kA].data.data(), g_ln2, rows, s[kMean2].data.data(), s[kVar2].data.data(),
                     Value(kLn2Weight), /*accumulate=*/true, g_a);

  // Attention branch, from dL/da: proj (through dropout_0), attention, qkv, ln1;
  // dx = dL/da + ln1's dx.
  float* g_proj = g[kGradProjOut].data.data();
  ApplyDropout(ctx, layer_index_, kAttentionDropoutSite, dropout_, n, seq_ * c, g_a, g_proj);
  float* g_attn = grad_attn_.data.data();
  DenseBackwardInput(g_proj, rows, c, c, Value(kProjWeight), /*accumulate=*/false, g_attn);
  float* g_qkv = g[kGradQkvOut].data.data();
  attention_.Backward(s[kQkv].data.data(), s[kProbs].data.data(), g_attn, n, g_qkv);
  float* g_ln1 = g[kGradLn1Out].data.data();
  DenseBackwardInput(g_qkv, rows, c, 3 * c, Value(kQkvWeight), /*accumulate=*/false, g_ln1);
  if (dx == nullptr) return;
  dx->Resize(x.shape);
  std::copy(grad_a_.data.begin(), grad_a_.data.end(), dx->data.begin());
  ln1_.BackwardInput(x.data.data(), g_ln1, rows, s[kMean1].data.data(), s[kVar1].data.data(),
                     Value(kLn1Weight), /*accumulate=*/true, dx->data.data());
}

void TransformerBlockLayer::BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                                           LayerCache* cache) {
  const int64_t rows = Rows(x, &dy);
  const int64_t c = width_;
  const std::vector<Tensor>& s = cache->saved;
  const std::vector<Tensor>& g = cache->grads;
  DAPPLE_KERNEL_CHECK(g.size() == kNumGrads && g[kGradQkvOut].rows() == x.rows(), "layer",
                      layer_index_,
                      " (transformer_block): BackwardWeight without its "
                      "BackwardInput");
  auto grad = [&](ParamIndex i) { return params_[i].grad.data.data(); };
  DenseBackwardWeight(s[kGelu].data.data(), g[kGradFc2Out].data.data(), rows, hidden_, c,
                      grad(kFc2Weight), grad(kFc2Bias));
  DenseBackwardWeight(s[kLn2Out].data.data(), g[kGradFcOut].data.data(), rows, c, hidden_,
                      grad(kFcWeight), grad(kFcBias));
  ln2_.BackwardWeight(s[kA].data.data(), g[kGradLn2Out].data.data(), rows, s[kMean2].data.data(),
                      s[kVar2].data.data(), grad(kLn2Weight), grad(kLn2Bias));
  DenseBackwardWeight(s[kAttn].data.data(), g[kGradProjOut].data.data(), rows, c, c,
                      grad(kProjWeight), grad(kProjBias));
  DenseBackwardWeight(s[kLn1Out].data.data(), g[kGradQkvOut].data.data(), rows, c, 3 * c,
                      grad(kQkvWeight), grad(kQkvBias));
  ln1_.BackwardWeight(x.data.data(), g[kGradLn1Out].data.data(), rows, s[kMean1].data.data(),
                      s[kVar1].data.data(), grad(kLn1Weight), grad(kLn1Bias));
}

}  // namespace dapple::kernels

#include "kernels/cpu/residual_block.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/init.h"

namespace dapple::kernels {
namespace {

Param ConvWeight(const std::string& name, int64_t out, int64_t in, int64_t k) {
  Param p;
  p.name = name;
  p.value = Tensor::Zeros({out, in, k, k});
  p.grad = Tensor::Zeros(p.value.shape);
  return p;
}

// v[i] = max(v[i], 0).
void ReluInPlace(Tensor* t) {
  for (float& v : t->data) v = v > 0 ? v : 0.0f;
}

// g[i] = 0 where out[i] <= 0 (the gradient through a ReLU, from its output).
void MaskByPositive(const Tensor& out, Tensor* g) {
  const size_t n = g->data.size();
  const float* o = out.data.data();
  float* p = g->data.data();
  for (size_t i = 0; i < n; ++i) p[i] = o[i] > 0 ? p[i] : 0.0f;
}

}  // namespace

ResidualBlockLayer::ResidualBlockLayer(int layer_index, int64_t channels, int64_t height,
                                       int64_t width, int64_t out_channels, int64_t stride,
                                       double eps, double momentum)
    : layer_index_(layer_index),
      channels_(channels),
      height_(height),
      width_(width),
      out_channels_(out_channels),
      stride_(stride),
      out_h_(WindowOutputSize(height, 3, stride, 1)),
      out_w_(WindowOutputSize(width, 3, stride, 1)),
      projection_(stride != 1 || channels != out_channels),
      bn1_(absl::StrCat("layer", layer_index, ".bn1."), out_channels, eps, momentum),
      bn2_(absl::StrCat("layer", layer_index, ".bn2."), out_channels, eps, momentum) {
  DAPPLE_KERNEL_CHECK(channels > 0 && height > 0 && width > 0 && out_channels > 0 && stride > 0,
                      "residual_block layer ", layer_index, " input [", channels, ", ", height,
                      ", ", width, "] out_channels ", out_channels, " stride ", stride);
  const std::string prefix = absl::StrCat("layer", layer_index, ".");
  conv1_ = ConvWeight(prefix + "conv1.weight", out_channels, channels, 3);
  conv2_ = ConvWeight(prefix + "conv2.weight", out_channels, out_channels, 3);
  if (projection_) {
    shortcut_conv_ = ConvWeight(prefix + "shortcut.conv.weight", out_channels, channels, 1);
    shortcut_bn_ =
        std::make_unique<BatchNormChannels>(prefix + "shortcut.bn.", out_channels, eps, momentum);
  }
}

void ResidualBlockLayer::InitParams(uint64_t seed) {
  FillSymmetricUniform(seed, layer_index_, InitTensor::kConv1Weight, FanInInitBound(channels_ * 9),
                       &conv1_.value);
  FillSymmetricUniform(seed, layer_index_, InitTensor::kConv2Weight,
                       FanInInitBound(out_channels_ * 9), &conv2_.value);
  if (projection_) {
    FillSymmetricUniform(seed, layer_index_, InitTensor::kShortcutConvWeight,
                         FanInInitBound(channels_), &shortcut_conv_.value);
  }
}

std::vector<Param*> ResidualBlockLayer::Params() {
  std::vector<Param*> p{&conv1_, &bn1_.weight(), &bn1_.bias(),
                        &conv2_, &bn2_.weight(), &bn2_.bias()};
  if (projection_) {
    p.insert(p.end(), {&shortcut_conv_, &shortcut_bn_->weight(), &shortcut_bn_->bias()});
  }
  return p;
}

std::vector<BatchNormChannels*> ResidualBlockLayer::Norms() const {
  auto* self = const_cast<ResidualBlockLayer*>(this);
  std::vector<BatchNormChannels*> norms{&self->bn1_, &self->bn2_};
  if (projection_) norms.push_back(self->shortcut_bn_.get());
  return norms;
}

std::vector<Param*> ResidualBlockLayer::Buffers() {
  std::vector<Param*> b;
  for (BatchNormChannels* n : Norms()) b.insert(b.end(), {&n->running_mean(), &n->running_var()});
  return b;
}

int64_t ResidualBlockLayer::StepStatisticsSize() const {
  int64_t size = 0;
  for (const BatchNormChannels* n : Norms()) size += n->StepStatisticsSize();
  return size;
}

void ResidualBlockLayer::ReadStepStatistics(double* out) const {
  for (const BatchNormChannels* n : Norms()) {
    n->ReadStepStatistics(out);
    out += n->StepStatisticsSize();
  }
}

void ResidualBlockLayer::ApplyStepStatistics(const double* summed) {
  for (BatchNormChannels* n : Norms()) {
    n->ApplyStepStatistics(summed);
    summed += n->StepStatisticsSize();
  }
}

ConvGeometry ResidualBlockLayer::Conv1(int64_t n) const {
  return {n, channels_, height_, width_, out_channels_, 3, stride_, 1};
}
ConvGeometry ResidualBlockLayer::Conv2(int64_t n) const {
  return {n, out_channels_, out_h_, out_w_, out_channels_, 3, 1, 1};
}
ConvGeometry ResidualBlockLayer::Shortcut(int64_t n) const {
  return {n, channels_, height_, width_, out_channels_, 1, stride_, 0};
}

int64_t ResidualBlockLayer::Rows(const Tensor& x, const Tensor* dy) const {
  DAPPLE_KERNEL_CHECK(x.shape.size() == 4 && x.shape[1] == channels_ && x.shape[2] == height_ &&
                          x.shape[3] == width_,
                      "layer", layer_index_, " (residual_block) expects x [N, ", channels_, ", ",
                      height_, ", ", width_, "], got ", ShapeToString(x.shape));
  if (dy != nullptr) {
    const std::vector<int64_t> want{x.rows(), out_channels_, out_h_, out_w_};
    DAPPLE_KERNEL_CHECK(dy->shape == want, "layer", layer_index_, " (residual_block) expects dy ",
                        ShapeToString(want), ", got ", ShapeToString(dy->shape));
  }
  return x.rows();
}

void ResidualBlockLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                                 const ForwardContext& ctx) {
  cache->ctx = ctx;
  const int64_t n = Rows(x, nullptr);
  const std::vector<int64_t> out{n, out_channels_, out_h_, out_w_};
  const int64_t hw = out_h_ * out_w_;
  std::vector<Tensor>& s = cache->saved;
  s.resize(kNumSaved);
  s[kZ1].Resize(out);
  s[kA1].Resize(out);
  s[kZ2].Resize(out);
  y->Resize(out);
  conv1_op_.Forward(Conv1(n), x.data.data(), conv1_.value.data.data(), nullptr, s[kZ1].data.data());
  bn1_.Forward(s[kZ1].data.data(), n, hw, ctx, s[kA1].data.data(), &s[kMean1], &s[kVar1]);
  ReluInPlace(&s[kA1]);
  conv2_op_.Forward(Conv2(n), s[kA1].data.data(), conv2_.value.data.data(), nullptr,
                    s[kZ2].data.data());
  bn2_.Forward(s[kZ2].data.data(), n, hw, ctx, y->data.data(), &s[kMean2], &s[kVar2]);
  const float* sc = x.data.data();
  if (projection_) {
    s[kZs].Resize(out);
    shortcut_out_.Resize(out);
    shortcut_op_.Forward(Shortcut(n), x.data.data(), shortcut_conv_.value.data.data(), nullptr,
                         s[kZs].data.data());
    shortcut_bn_->Forward(s[kZs].data.data(), n, hw, ctx, shortcut_out_.data.data(), &s[kMeanS],
                          &s[kVarS]);
    sc = shortcut_out_.data.data();
  }
  float* yp = y->data.data();
  const size_t size = y->data.size();
  for (size_t i = 0; i < size; ++i) {
    const float v = yp[i] + sc[i];
    yp[i] = v > 0 ? v : 0.0f;
  }
}

void ResidualBlockLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy,
                                       Tensor* dx, LayerCache* cache) {
  const int64_t n = Rows(x, &dy);
  DAPPLE_KERNEL_CHECK(cache->ctx.training, "layer", layer_index_,
                      " (residual_block): backward of an evaluation forward");
  const int64_t hw = out_h_ * out_w_;
  const std::vector<Tensor>& s = cache->saved;
  std::vector<Tensor>& g = cache->grads;
  g.resize(kNumGrads);
  // Through the final ReLU: y > 0 exactly where the sum was.
  grad_sum_ = dy;
  MaskByPositive(y, &grad_sum_);
  g[kGradZ2].Resize(dy.shape);
  bn2_.BackwardInput(s[kZ2].data.data(), grad_sum_.data.data(), n, hw, s[kMean2], s[kVar2],
                     g[kGradZ2].data.data(), &g[kDGamma2], &g[kDBeta2]);
  grad_a1_.Resize(dy.shape);
  conv2_op_.BackwardData(Conv2(n), g[kGradZ2].data.data(), conv2_.value.data.data(),
                         grad_a1_.data.data());
  MaskByPositive(s[kA1], &grad_a1_);
  g[kGradZ1].Resize(dy.shape);
  bn1_.BackwardInput(s[kZ1].data.data(), grad_a1_.data.data(), n, hw, s[kMean1], s[kVar1],
                     g[kGradZ1].data.data(), &g[kDGamma1], &g[kDBeta1]);
  if (projection_) {
    g[kGradZs].Resize(dy.shape);
    shortcut_bn_->BackwardInput(s[kZs].data.data(), grad_sum_.data.data(), n, hw, s[kMeanS],
                                s[kVarS], g[kGradZs].data.data(), &g[kDGammaS], &g[kDBetaS]);
  }
  if (dx == nullptr) return;
  dx->Resize(x.shape);
  conv1_op_.BackwardData(Conv1(n), g[kGradZ1].data.data(), conv1_.value.data.data(),
                         dx->data.data());
  if (projection_) {
    grad_x_.Resize(x.shape);
    shortcut_op_.BackwardData(Shortcut(n), g[kGradZs].data.data(), shortcut_conv_.value.data.data(),
                              grad_x_.data.data());
    AddInto(grad_x_, dx);
  } else {
    AddInto(grad_sum_, dx);
  }
}

void ResidualBlockLayer::BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                                        LayerCache* cache) {
  const int64_t n = Rows(x, &dy);
  if (n == 0) return;
  const std::vector<Tensor>& s = cache->saved;
  const std::vector<Tensor>& g = cache->grads;
  dweight_.Resize(conv1_.value.shape);
  conv1_op_.BackwardWeights(Conv1(n), x.data.data(), g[kGradZ1].data.data(), dweight_.data.data(),
                            nullptr);
  AddInto(dweight_, &conv1_.grad);
  dweight_.Resize(conv2_.value.shape);
  conv2_op_.BackwardWeights(Conv2(n), s[kA1].data.data(), g[kGradZ2].data.data(),
                            dweight_.data.data(), nullptr);
  AddInto(dweight_, &conv2_.grad);
  bn1_.BackwardWeight(g[kDGamma1], g[kDBeta1]);
  bn2_.BackwardWeight(g[kDGamma2], g[kDBeta2]);
  if (!projection_) return;
  dweight_.Resize(shortcut_conv_.value.shape);
  shortcut_op_.BackwardWeights(Shortcut(n), x.data.data(), g[kGradZs].data.data(),
                               dweight_.data.data(), nullptr);
  AddInto(dweight_, &shortcut_conv_.grad);
  shortcut_bn_->BackwardWeight(g[kDGammaS], g[kDBetaS]);
}

}  // namespace dapple::kernels

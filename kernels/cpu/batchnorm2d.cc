#include "kernels/cpu/batchnorm2d.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"

namespace dapple::kernels {
namespace {

Param Vector(const std::string& name, int64_t n, float value, bool trainable) {
  Param p;
  p.name = name;
  p.value = Tensor::Zeros({n});
  p.value.Fill(value);
  if (trainable) p.grad = Tensor::Zeros({n});
  return p;
}

}  // namespace

BatchNormChannels::BatchNormChannels(const std::string& prefix, int64_t channels, double eps,
                                     double momentum)
    : channels_(channels),
      eps_(static_cast<float>(eps)),
      momentum_(momentum),
      weight_(Vector(prefix + "weight", channels, 1.0f, true)),
      bias_(Vector(prefix + "bias", channels, 0.0f, true)),
      running_mean_(Vector(prefix + "running_mean", channels, 0.0f, false)),
      running_var_(Vector(prefix + "running_var", channels, 1.0f, false)),
      step_(static_cast<size_t>(2 * channels + 1), 0.0) {
  DAPPLE_KERNEL_CHECK(channels > 0 && eps > 0 && eps < 1 && momentum >= 0 && momentum <= 1, prefix,
                      " batch norm channels ", channels, " eps ", eps, " momentum ", momentum);
}

void BatchNormChannels::Forward(const float* x, int64_t n, int64_t hw, const ForwardContext& ctx,
                                float* y, Tensor* mean, Tensor* var) {
  if (!ctx.training) {
    op_.ForwardInference(n, channels_, hw, eps_, x, weight_.value.data.data(),
                         bias_.value.data.data(), running_mean_.value.data.data(),
                         running_var_.value.data.data(), y);
    return;
  }
  mean->Resize({channels_});
  var->Resize({channels_});
  op_.ForwardTraining(n, channels_, hw, eps_, x, weight_.value.data.data(), bias_.value.data.data(),
                      y, mean->data.data(), var->data.data());
  if (ctx.recompute) return;
  // The step's statistics from x itself in double (not from the float mean and variance
  // above): the step's variance is a difference of sums over the whole global batch.
  double* sum = step_.data();
  double* sumsq = sum + channels_;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < channels_; ++c) {
      const float* p = x + (i * channels_ + c) * hw;
      double s = 0, q = 0;
      for (int64_t j = 0; j < hw; ++j) {
        const double v = p[j];
        s += v;
        q += v * v;
      }
      sum[c] += s;
      sumsq[c] += q;
    }
  }
  step_[2 * channels_] += static_cast<double>(n * hw);
}

void BatchNormChannels::BackwardInput(const float* x, const float* dy, int64_t n, int64_t hw,
                                      const Tensor& mean, const Tensor& var, float* dx,
                                      Tensor* dgamma, Tensor* dbeta) {
  dgamma->Resize({channels_});
  dbeta->Resize({channels_});
  if (dx == nullptr) {
    // oneDNN computes the parameter gradients together with dx.
    scratch_.resize(static_cast<size_t>(n * channels_ * hw));
    dx = scratch_.data();
  }
  op_.Backward(n, channels_, hw, eps_, x, dy, mean.data.data(), var.data.data(),
               weight_.value.data.data(), dx, dgamma->data.data(), dbeta->data.data());
}

void BatchNormChannels::BackwardWeight(const Tensor& dgamma, const Tensor& dbeta) {
  for (int64_t c = 0; c < channels_; ++c) {
    weight_.grad.data[c] += dgamma.data[c];
    bias_.grad.data[c] += dbeta.data[c];
  }
}

void BatchNormChannels::ReadStepStatistics(double* out) const {
  std::copy(step_.begin(), step_.end(), out);
}

void UpdateRunningStatistics(const double* summed, int64_t channels, double momentum,
                             float* running_mean, float* running_var) {
  const double count = summed[2 * channels];
  if (count <= 0) return;
  for (int64_t c = 0; c < channels; ++c) {
    const double mean = summed[c] / count;
    float& rm = running_mean[c];
    rm = static_cast<float>((1 - momentum) * rm + momentum * mean);
    if (count < 2) continue;
    // Clamped at 0: the difference of sums may round below it for a constant channel.
    const double var = std::max(0.0, (summed[channels + c] - summed[c] * mean) / (count - 1));
    float& rv = running_var[c];
    rv = static_cast<float>((1 - momentum) * rv + momentum * var);
  }
}

void BatchNormChannels::ApplyStepStatistics(const double* summed) {
  UpdateRunningStatistics(summed, channels_, momentum_, running_mean_.value.data.data(),
                          running_var_.value.data.data());
  std::fill(step_.begin(), step_.end(), 0.0);
}

BatchNorm2dLayer::BatchNorm2dLayer(int layer_index, int64_t channels, int64_t height, int64_t width,
                                   double eps, double momentum)
    : layer_index_(layer_index),
      height_(height),
      width_(width),
      norm_(absl::StrCat("layer", layer_index, "."), channels, eps, momentum) {}

int64_t BatchNorm2dLayer::Rows(const Tensor& x, const Tensor* dy) const {
  const std::vector<int64_t> want{norm_.channels(), height_, width_};
  DAPPLE_KERNEL_CHECK(
      x.shape.size() == 4 && std::vector<int64_t>(x.shape.begin() + 1, x.shape.end()) == want,
      "layer", layer_index_, " (batchnorm2d) expects x [N, ", norm_.channels(), ", ", height_, ", ",
      width_, "], got ", ShapeToString(x.shape));
  if (dy != nullptr) {
    DAPPLE_KERNEL_CHECK(dy->shape == x.shape, "layer", layer_index_, " (batchnorm2d) expects dy ",
                        ShapeToString(x.shape), ", got ", ShapeToString(dy->shape));
  }
  return x.rows();
}

void BatchNorm2dLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                               const ForwardContext& ctx) {
  cache->ctx = ctx;
  const int64_t n = Rows(x, nullptr);
  y->Resize(x.shape);
  cache->saved.resize(2);
  norm_.Forward(x.data.data(), n, height_ * width_, ctx, y->data.data(), &cache->saved[0],
                &cache->saved[1]);
}

void BatchNorm2dLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                     LayerCache* cache) {
  const int64_t n = Rows(x, &dy);
  DAPPLE_KERNEL_CHECK(cache->ctx.training, "layer", layer_index_,
                      " (batchnorm2d): backward of an evaluation forward");
  if (dx != nullptr) dx->Resize(x.shape);
  cache->grads.resize(2);
  norm_.BackwardInput(x.data.data(), dy.data.data(), n, height_ * width_, cache->saved[0],
                      cache->saved[1], dx != nullptr ? dx->data.data() : nullptr, &cache->grads[0],
                      &cache->grads[1]);
}

void BatchNorm2dLayer::BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                                      LayerCache* cache) {
  Rows(x, &dy);
  norm_.BackwardWeight(cache->grads[0], cache->grads[1]);
}

}  // namespace dapple::kernels

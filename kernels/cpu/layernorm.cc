#include "kernels/cpu/layernorm.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"

namespace dapple::kernels {

LayerNormRows::LayerNormRows(int64_t cols, float eps) : cols_(cols), eps_(eps) {
  DAPPLE_KERNEL_CHECK(cols > 0 && eps > 0, "layernorm width ", cols, " eps ", eps);
}

void LayerNormRows::Forward(const float* x, int64_t rows, const float* gamma, const float* beta,
                            float* y, float* mean, float* var) {
  op_.Forward(x, gamma, beta, rows, cols_, eps_, y, mean, var);
}

void LayerNormRows::BackwardInput(const float* x, const float* dy, int64_t rows, const float* mean,
                                  const float* var, const float* gamma, bool accumulate,
                                  float* dx) {
  const int64_t n = rows * cols_;
  scratch_.resize(static_cast<size_t>(n));
  float* g = scratch_.data();
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = dy + r * cols_;
    float* out = g + r * cols_;
    for (int64_t c = 0; c < cols_; ++c) out[c] = in[c] * gamma[c];
  }
  if (!accumulate) {
    op_.BackwardData(x, g, mean, var, rows, cols_, eps_, dx);
    return;
  }
  op_.BackwardData(x, g, mean, var, rows, cols_, eps_, g);
  for (int64_t i = 0; i < n; ++i) dx[i] += g[i];
}

void LayerNormRows::BackwardWeight(const float* x, const float* dy, int64_t rows, const float* mean,
                                   const float* var, float* dgamma, float* dbeta) {
  // Sums over every row of a micro-batch (N x T, thousands): double, rounded once, keeps them
  // within rounding of PyTorch's whatever the row count.
  sums_.assign(static_cast<size_t>(2 * cols_), 0.0);
  double* sg = sums_.data();
  double* sb = sg + cols_;
  for (int64_t r = 0; r < rows; ++r) {
    // As oneDNN's forward normalised: rstd in float from the saved variance.
    const float rstd = 1.0f / std::sqrt(var[r] + eps_);
    const float m = mean[r];
    const float* xr = x + r * cols_;
    const float* gr = dy + r * cols_;
    for (int64_t c = 0; c < cols_; ++c) {
      sg[c] += static_cast<double>(gr[c]) * static_cast<double>((xr[c] - m) * rstd);
      sb[c] += gr[c];
    }
  }
  for (int64_t c = 0; c < cols_; ++c) {
    dgamma[c] += static_cast<float>(sg[c]);
    dbeta[c] += static_cast<float>(sb[c]);
  }
}

LayerNormLayer::LayerNormLayer(int layer_index, int64_t width, double eps)
    : layer_index_(layer_index), norm_(width, static_cast<float>(eps)) {
  weight_.name = absl::StrCat("layer", layer_index, ".weight");
  weight_.value = Tensor::Zeros({width});
  weight_.value.Fill(1.0f);
  weight_.grad = Tensor::Zeros({width});
  bias_.name = absl::StrCat("layer", layer_index, ".bias");
  bias_.value = Tensor::Zeros({width});
  bias_.grad = Tensor::Zeros({width});
}

int64_t LayerNormLayer::Rows(const Tensor& x, const Tensor* dy) const {
  DAPPLE_KERNEL_CHECK(x.shape.size() >= 2 && x.shape.back() == norm_.cols(), "layer", layer_index_,
                      " (layernorm) expects x [N, ..., ", norm_.cols(), "], got ",
                      ShapeToString(x.shape));
  if (dy != nullptr) {
    DAPPLE_KERNEL_CHECK(dy->shape == x.shape, "layer", layer_index_, " (layernorm) expects dy ",
                        ShapeToString(x.shape), ", got ", ShapeToString(dy->shape));
  }
  return x.numel() / norm_.cols();
}

void LayerNormLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                             const ForwardContext& ctx) {
  cache->ctx = ctx;
  const int64_t rows = Rows(x, nullptr);
  y->Resize(x.shape);
  cache->saved.resize(2);
  cache->saved[0].Resize({rows});
  cache->saved[1].Resize({rows});
  norm_.Forward(x.data.data(), rows, weight_.value.data.data(), bias_.value.data.data(),
                y->data.data(), cache->saved[0].data.data(), cache->saved[1].data.data());
}

void LayerNormLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                   LayerCache* cache) {
  const int64_t rows = Rows(x, &dy);
  if (dx == nullptr) return;
  dx->Resize(x.shape);
  norm_.BackwardInput(x.data.data(), dy.data.data(), rows, cache->saved[0].data.data(),
                      cache->saved[1].data.data(), weight_.value.data.data(),
                      /*accumulate=*/false, dx->data.data());
}

void LayerNormLayer::BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                                    LayerCache* cache) {
  const int64_t rows = Rows(x, &dy);
  norm_.BackwardWeight(x.data.data(), dy.data.data(), rows, cache->saved[0].data.data(),
                       cache->saved[1].data.data(), weight_.grad.data.data(),
                       bias_.grad.data.data());
}

}  // namespace dapple::kernels

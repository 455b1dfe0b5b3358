#include "kernels/cpu/dropout.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/check.h"

namespace dapple::kernels {

bool DropoutActive(const ForwardContext& ctx, double p) { return ctx.training && p > 0; }

uint32_t DropoutThreshold(double p) { return static_cast<uint32_t>(std::llround(p * 16777216.0)); }

float DropoutScale(double p) { return static_cast<float>(1.0 / (1.0 - p)); }

DropoutMask MakeDropoutMask(const ForwardContext& ctx, int layer, uint32_t site, double p) {
  DropoutMask mask;
  mask.seed = ctx.seed;
  mask.step = ctx.step;
  mask.first_sample = ctx.first_sample;
  mask.layer = layer;
  mask.site = site;
  mask.threshold = DropoutThreshold(p);
  mask.scale = DropoutScale(p);
  return mask;
}

void ApplyDropout(const ForwardContext& ctx, int layer, uint32_t site, double p, int64_t rows,
                  int64_t per_sample, const float* in, float* out) {
  DAPPLE_KERNEL_CHECK(p >= 0 && p < 1, "layer", layer, " dropout probability ", p,
                      " is outside [0, 1)");
  const int64_t n = rows * per_sample;
  if (!DropoutActive(ctx, p)) {
    if (out != in) std::copy(in, in + n, out);
    return;
  }
  const DropoutMask mask = MakeDropoutMask(ctx, layer, site, p);
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t key = mask.RowKey(r);
    const float* src = in + r * per_sample;
    float* dst = out + r * per_sample;
    for (int64_t e = 0; e < per_sample; ++e) {
      const bool keep = DropoutKeep(key, static_cast<uint64_t>(e), mask.threshold);
      dst[e] = keep ? src[e] * mask.scale : 0.0f;
    }
  }
}

DropoutLayer::DropoutLayer(int layer_index, double p) : layer_index_(layer_index), p_(p) {
  DAPPLE_KERNEL_CHECK(p >= 0 && p < 1, "layer", layer_index, " (dropout) p ", p,
                      " is outside [0, 1)");
}

void DropoutLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                           const ForwardContext& ctx) {
  cache->ctx = ctx;
  y->Resize(x.shape);
  ApplyDropout(ctx, layer_index_, kDropoutSite, p_, x.rows(), x.cols(), x.data.data(),
               y->data.data());
}

void DropoutLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                 LayerCache* cache) {
  DAPPLE_KERNEL_CHECK(dy.shape == x.shape, "layer", layer_index_, " (dropout) expects dy ",
                      ShapeToString(x.shape), ", got ", ShapeToString(dy.shape));
  if (dx == nullptr) return;
  dx->Resize(x.shape);
  ApplyDropout(cache->ctx, layer_index_, kDropoutSite, p_, x.rows(), x.cols(), dy.data.data(),
               dx->data.data());
}

}  // namespace dapple::kernels

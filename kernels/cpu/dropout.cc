#include "kernels/cpu/dropout.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/check.h"
#include "kernels/cpu/init.h"

namespace dapple::kernels {
namespace {

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kDropoutDomain = 0x44524F504F555431ULL;  // "DROPOUT1"

}  // namespace

bool DropoutActive(const ForwardContext& ctx, double p) { return ctx.training && p > 0; }

uint64_t DropoutKey(uint64_t seed, int64_t step, int64_t sample, int layer, uint32_t site) {
  // One mixing round per ingredient (as InitStreamKey): nearby tuples get unrelated keys.
  uint64_t k = SplitMix64Mix(SplitMix64Mix(seed + kGoldenGamma) ^ kDropoutDomain);
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(step) + kGoldenGamma));
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(sample) + 2 * kGoldenGamma));
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(static_cast<uint32_t>(layer)) + 3 * kGoldenGamma));
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(site) + 4 * kGoldenGamma));
  return k;
}

uint32_t DropoutThreshold(double p) { return static_cast<uint32_t>(std::llround(p * 16777216.0)); }

void ApplyDropout(const ForwardContext& ctx, int layer, uint32_t site, double p, int64_t rows,
                  int64_t per_sample, const float* in, float* out) {
  DAPPLE_KERNEL_CHECK(p >= 0 && p < 1, "layer", layer, " dropout probability ", p,
                      " is outside [0, 1)");
  const int64_t n = rows * per_sample;
  if (!DropoutActive(ctx, p)) {
    if (out != in) std::copy(in, in + n, out);
    return;
  }
  const uint64_t threshold = DropoutThreshold(p);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t key = DropoutKey(ctx.seed, ctx.step, ctx.first_sample + r, layer, site);
    const float* src = in + r * per_sample;
    float* dst = out + r * per_sample;
    for (int64_t e = 0; e < per_sample; ++e) {
      const bool keep = (SplitMix64At(key, static_cast<uint64_t>(e)) >> 40) >= threshold;
      dst[e] = keep ? src[e] * scale : 0.0f;
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
  ApplyDropout(ctx, layer_index_, 0, p_, x.rows(), x.cols(), x.data.data(), y->data.data());
}

void DropoutLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                 LayerCache* cache) {
  DAPPLE_KERNEL_CHECK(dy.shape == x.shape, "layer", layer_index_, " (dropout) expects dy ",
                      ShapeToString(x.shape), ", got ", ShapeToString(dy.shape));
  if (dx == nullptr) return;
  dx->Resize(x.shape);
  ApplyDropout(cache->ctx, layer_index_, 0, p_, x.rows(), x.cols(), dy.data.data(),
               dx->data.data());
}

}  // namespace dapple::kernels

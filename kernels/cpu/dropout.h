// Dropout (Srivastava et al., JMLR 2014) in its inverted form, as torch.nn.Dropout: in training
// each element is zeroed with probability p and the others are scaled by 1 / (1 - p); in
// evaluation it is the identity. The one mask function of every layer that drops (the dropout
// layer, the embedding, the transformer block's two sites).
//
// The mask is a pure function of (seed, step, sample, layer, site, element), never of how a
// step's global batch is split into micro-batches, replicas and stages, so a pipeline trains
// exactly like one device (design.md, "Tests": the parity harness), and the backward recomputes
// it from LayerCache::ctx instead of keeping it. Exactly (all integer arithmetic but the final
// multiply; Mix = SplitMix64Mix, G = 0x9E3779B97F4A7C15, + and * modulo 2^64, kernels/cpu/init.h):
//
//   key  = Mix(Mix(seed + G) ^ 0x44524F504F555431)            ("DROPOUT1": apart from init)
//   key  = Mix(key ^ (uint64(step) + G))
//   key  = Mix(key ^ (uint64(sample) + 2G))                   sample = ctx.first_sample + row
//   key  = Mix(key ^ (uint64(uint32(layer)) + 3G))            layer = its index in the model
//   key  = Mix(key ^ (uint64(site) + 4G))                     site = which dropout of the layer
//   bits = SplitMix64At(key, element) = Mix(key + (element + 1) G)
//                                      element = index within the sample (row-major)
//   keep = (bits >> 40) >= threshold,  threshold = round(p * 2^24) (in double)
//   out  = keep ? in * scale : 0,      scale = float(1 / (1 - p)) (in double, rounded once)
//
// so the drop probability is threshold / 2^24 (p within 3e-8). Another backend (kernels/cuda)
// must compute this same function to drop the same elements.
//
// Thread safety: pure functions; DropoutLayer as every Layer (layer.h).
#ifndef DAPPLE_KERNELS_CPU_DROPOUT_H_
#define DAPPLE_KERNELS_CPU_DROPOUT_H_

#include <cstdint>
#include <string>

#include "kernels/cpu/layer.h"

namespace dapple::kernels {

// True when dropout with probability p changes anything: ctx.training and p > 0.
bool DropoutActive(const ForwardContext& ctx, double p);

// The per-sample key above.
uint64_t DropoutKey(uint64_t seed, int64_t step, int64_t sample, int layer, uint32_t site);

// round(p * 2^24): an element is kept when the top 24 bits of its hash are >= this. p in [0, 1).
uint32_t DropoutThreshold(double p);

// Dropout of `rows` samples of `per_sample` elements each (row r is sample
// ctx.first_sample + r): out[r, e] = keep ? in[r, e] * scale : 0. The backward is the same call
// on dL/dout with the forward's ctx. When !DropoutActive(ctx, p), out = in. `out` may equal
// `in`; otherwise they must not overlap.
void ApplyDropout(const ForwardContext& ctx, int layer, uint32_t site, double p, int64_t rows,
                  int64_t per_sample, const float* in, float* out);

// The dropout layer: [N, ...] -> the same shape, ApplyDropout at site 0 of its own index.
// Backward: dx = the same mask and scale applied to dy. No parameters, nothing saved.
class DropoutLayer : public Layer {
 public:
  // Requires p in [0, 1).
  DropoutLayer(int layer_index, double p);

  std::string Type() const override { return "dropout"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;

 private:
  int layer_index_;
  double p_;
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_DROPOUT_H_

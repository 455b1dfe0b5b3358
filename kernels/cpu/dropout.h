// Dropout (Srivastava et al., JMLR 2014) in its inverted form, as torch.nn.Dropout: in training
// each element is zeroed with probability p and the others are scaled by 1 / (1 - p); in
// evaluation it is the identity. The one mask function of every layer that drops (the dropout
// layer, the embedding, the transformer block's two sites).
//
// The mask is a pure function of (seed, step, sample, layer, site, element), never of how a
// step's global batch is split into micro-batches, replicas and stages, so a pipeline trains
// exactly like one device (design.md, "Tests": the parity harness), and the backward recomputes
// it from LayerCache::ctx instead of keeping it. The exact function (all integer arithmetic but
// the final multiply) is dropout_mask.h's, shared with the GPU kernels (kernels/cuda/dropout.h),
// which therefore drop the same elements; the drop probability is DropoutThreshold(p) / 2^24
// (p within 3e-8).
//
// Thread safety: pure functions; DropoutLayer as every Layer (layer.h).
#ifndef DAPPLE_KERNELS_CPU_DROPOUT_H_
#define DAPPLE_KERNELS_CPU_DROPOUT_H_

#include <cstdint>
#include <string>

#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/layer.h"

namespace dapple::kernels {

// True when dropout with probability p changes anything: ctx.training and p > 0.
bool DropoutActive(const ForwardContext& ctx, double p);

// round(p * 2^24) (in double): an element is kept when the top 24 bits of its hash are >= this.
// p in [0, 1).
uint32_t DropoutThreshold(double p);

// float(1 / (1 - p)) (in double, rounded once): what a kept element is multiplied by.
float DropoutScale(double p);

// The mask of site `site` of layer `layer` with probability p for rows starting at
// ctx.first_sample of ctx's step (dropout_mask.h). Only meaningful when DropoutActive(ctx, p).
DropoutMask MakeDropoutMask(const ForwardContext& ctx, int layer, uint32_t site, double p);

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
  // Its dropout site.
  static constexpr uint32_t kDropoutSite = 0;

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

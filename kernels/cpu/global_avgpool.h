// Global average pooling: [C, H, W] -> [C] (common/model/global_avgpool.cc), on oneDNN
// (onednn_conv.h).
#ifndef DAPPLE_KERNELS_CPU_GLOBAL_AVGPOOL_H_
#define DAPPLE_KERNELS_CPU_GLOBAL_AVGPOOL_H_

#include <cstdint>
#include <string>

#include "kernels/cpu/layer.h"
#include "kernels/cpu/onednn_conv.h"

namespace dapple::kernels {

// global_avgpool: x [N, C, H, W] -> y [N, C], the mean of each channel's H x W plane
// (nn.AdaptiveAvgPool2d(1) then flatten; common/model/global_avgpool.cc): oneDNN's average
// pooling with one H x W window. No parameters, nothing saved; dx = dy / (H W) on every element
// of the plane. A mismatched x or dy aborts. One thread per layer object.
class GlobalAvgPoolLayer : public Layer {
 public:
  // Requires positive sizes.
  GlobalAvgPoolLayer(int layer_index, int64_t channels, int64_t height, int64_t width);

  std::string Type() const override { return "global_avgpool"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;

 private:
  // The geometry of x's batch (aborts unless x is [N, C, H, W] and dy, when given, [N, C]).
  PoolGeometry Geometry(const Tensor& x, const Tensor* dy) const;

  int layer_index_;
  PoolGeometry shape_;  // n unused
  Pool2dOp op_{PoolKind::kAverage};
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_GLOBAL_AVGPOOL_H_

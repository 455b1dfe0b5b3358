// Max and average pooling over square windows of a [C, H, W] input, each channel on its own:
// maxpool2d is PyTorch's nn.MaxPool2d(kernel, stride, padding), avgpool2d nn.AvgPool2d(kernel,
// stride, padding, count_include_pad=True) (common/model/pool2d.cc), on oneDNN (onednn_conv.h).
#ifndef DAPPLE_KERNELS_CPU_POOL2D_H_
#define DAPPLE_KERNELS_CPU_POOL2D_H_

#include <cstdint>
#include <string>

#include "kernels/cpu/layer.h"
#include "kernels/cpu/onednn_conv.h"

namespace dapple::kernels {

// No parameters. x [N, C, H, W] -> y [N, C, H', W'] (onednn_conv.h WindowOutputSize).
// cache->saved after a max pooling Forward: [0] oneDNN's workspace (the position of each
// window's maximum, Pool2dOp::WorkspaceBytes bytes held in a float tensor); the backward routes
// dy to those positions. Average pooling saves nothing. A mismatched x or dy aborts
// (kernels/cpu/check.h); dx must not alias x, y or dy. One thread per layer object.
class Pool2dLayer : public Layer {
 public:
  // Requires positive sizes, stride >= 1, 0 <= padding <= kernel / 2, kernel <= H + 2 padding
  // and W + 2 padding.
  Pool2dLayer(int layer_index, PoolKind kind, int64_t channels, int64_t height, int64_t width,
              int64_t kernel, int64_t stride, int64_t padding);

  // "maxpool2d" or "avgpool2d".
  std::string Type() const override;
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;

 private:
  // Rows N of x (aborts unless x is [N, C, H, W] and dy, when given, is [N, C, H', W']).
  int64_t Rows(const Tensor& x, const Tensor* dy) const;

  int layer_index_;
  PoolGeometry shape_;  // n unused
  Pool2dOp op_;
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_POOL2D_H_

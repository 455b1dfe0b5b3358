#include "kernels/cpu/global_avgpool.h"

#include <vector>

#include "kernels/cpu/check.h"

namespace dapple::kernels {

GlobalAvgPoolLayer::GlobalAvgPoolLayer(int layer_index, int64_t channels, int64_t height,
                                       int64_t width)
    : layer_index_(layer_index) {
  DAPPLE_KERNEL_CHECK(channels > 0 && height > 0 && width > 0, "global_avgpool layer ", layer_index,
                      " input [", channels, ", ", height, ", ", width, "]");
  shape_.c = channels;
  shape_.h = height;
  shape_.w = width;
  shape_.kernel_h = height;
  shape_.kernel_w = width;
}

PoolGeometry GlobalAvgPoolLayer::Geometry(const Tensor& x, const Tensor* dy) const {
  DAPPLE_KERNEL_CHECK(x.shape.size() == 4 && x.shape[1] == shape_.c && x.shape[2] == shape_.h &&
                          x.shape[3] == shape_.w,
                      "layer", layer_index_, " (global_avgpool) expects x [N, ", shape_.c, ", ",
                      shape_.h, ", ", shape_.w, "], got ", ShapeToString(x.shape));
  if (dy != nullptr) {
    const std::vector<int64_t> want{x.rows(), shape_.c};
    DAPPLE_KERNEL_CHECK(dy->shape == want, "layer", layer_index_, " (global_avgpool) expects dy ",
                        ShapeToString(want), ", got ", ShapeToString(dy->shape));
  }
  PoolGeometry g = shape_;
  g.n = x.rows();
  return g;
}

void GlobalAvgPoolLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                                 const ForwardContext& ctx) {
  cache->ctx = ctx;
  const PoolGeometry g = Geometry(x, nullptr);
  // [N, C, 1, 1] in memory is [N, C].
  y->Resize({g.n, g.c});
  op_.Forward(g, x.data.data(), y->data.data(), nullptr);
}

void GlobalAvgPoolLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy,
                                       Tensor* dx, LayerCache* cache) {
  const PoolGeometry g = Geometry(x, &dy);
  if (dx == nullptr) return;
  dx->Resize(x.shape);
  op_.Backward(g, dy.data.data(), nullptr, dx->data.data());
}

}  // namespace dapple::kernels

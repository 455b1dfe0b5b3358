#include "kernels/cpu/pool2d.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"

namespace dapple::kernels {
namespace {

// Aborts unless x is [N, C, H, W] of `g` and dy, when given, is [N, C, H', W'].
void CheckShapes(int layer_index, const std::string& type, const PoolGeometry& g, const Tensor& x,
                 const Tensor* dy) {
  DAPPLE_KERNEL_CHECK(
      x.shape.size() == 4 && x.shape[1] == g.c && x.shape[2] == g.h && x.shape[3] == g.w, "layer",
      layer_index, " (", type, ") expects x [N, ", g.c, ", ", g.h, ", ", g.w, "], got ",
      ShapeToString(x.shape));
  if (dy == nullptr) return;
  const std::vector<int64_t> want{x.rows(), g.c, g.OutH(), g.OutW()};
  DAPPLE_KERNEL_CHECK(dy->shape == want, "layer", layer_index, " (", type, ") expects dy ",
                      ShapeToString(want), ", got ", ShapeToString(dy->shape));
}

PoolGeometry WithRows(PoolGeometry g, int64_t n) {
  g.n = n;
  return g;
}

// Floats that hold `bytes`.
int64_t FloatsFor(int64_t bytes) {
  return (bytes + static_cast<int64_t>(sizeof(float)) - 1) / static_cast<int64_t>(sizeof(float));
}

}  // namespace

Pool2dLayer::Pool2dLayer(int layer_index, PoolKind kind, int64_t channels, int64_t height,
                         int64_t width, int64_t kernel, int64_t stride, int64_t padding)
    : layer_index_(layer_index), op_(kind) {
  shape_.c = channels;
  shape_.h = height;
  shape_.w = width;
  shape_.kernel_h = kernel;
  shape_.kernel_w = kernel;
  shape_.stride = stride;
  shape_.padding = padding;
  DAPPLE_KERNEL_CHECK(channels > 0 && height > 0 && width > 0 && kernel > 0 && stride > 0 &&
                          padding >= 0 && 2 * padding <= kernel && kernel <= height + 2 * padding &&
                          kernel <= width + 2 * padding,
                      "pooling layer ", layer_index, " input [", channels, ", ", height, ", ",
                      width, "] kernel ", kernel, " stride ", stride, " padding ", padding);
}

std::string Pool2dLayer::Type() const {
  return op_.kind() == PoolKind::kMax ? "maxpool2d" : "avgpool2d";
}

int64_t Pool2dLayer::Rows(const Tensor& x, const Tensor* dy) const {
  CheckShapes(layer_index_, Type(), shape_, x, dy);
  return x.rows();
}

void Pool2dLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                          const ForwardContext& ctx) {
  cache->ctx = ctx;
  const PoolGeometry g = WithRows(shape_, Rows(x, nullptr));
  y->Resize({g.n, g.c, g.OutH(), g.OutW()});
  const int64_t bytes = op_.WorkspaceBytes(g);
  cache->saved.resize(bytes > 0 ? 1 : 0);
  if (bytes > 0) cache->saved[0].Resize({FloatsFor(bytes)});
  op_.Forward(g, x.data.data(), y->data.data(), bytes > 0 ? cache->saved[0].data.data() : nullptr);
}

void Pool2dLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                LayerCache* cache) {
  const PoolGeometry g = WithRows(shape_, Rows(x, &dy));
  if (dx == nullptr) return;
  dx->Resize(x.shape);
  op_.Backward(g, dy.data.data(), cache->saved.empty() ? nullptr : cache->saved[0].data.data(),
               dx->data.data());
}

}  // namespace dapple::kernels

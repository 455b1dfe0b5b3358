#include "kernels/cpu/linear.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/dense.h"
#include "kernels/cpu/init.h"

namespace dapple::kernels {

LinearLayer::LinearLayer(int layer_index, int64_t in, int64_t out)
    : layer_index_(layer_index), in_(in), out_(out) {
  DAPPLE_KERNEL_CHECK(in > 0 && out > 0, "linear layer ", layer_index, " in ", in, " out ", out);
  weight_.name = absl::StrCat("layer", layer_index, ".weight");
  weight_.value = Tensor::Zeros({out, in});
  weight_.grad = Tensor::Zeros({out, in});
  bias_.name = absl::StrCat("layer", layer_index, ".bias");
  bias_.value = Tensor::Zeros({out});
  bias_.grad = Tensor::Zeros({out});
}

void LinearLayer::InitParams(uint64_t seed) {
  const float bound = FanInInitBound(in_);
  FillSymmetricUniform(seed, layer_index_, InitTensor::kWeight, bound, &weight_.value);
  FillSymmetricUniform(seed, layer_index_, InitTensor::kBias, bound, &bias_.value);
}

void LinearLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                          const ForwardContext& ctx) {
  cache->ctx = ctx;
  DAPPLE_KERNEL_CHECK(x.shape.size() == 2 && x.shape[1] == in_, "layer", layer_index_,
                      " (linear) expects x [N, ", in_, "], got ", ShapeToString(x.shape));
  const int64_t n = x.rows();
  y->Resize({n, out_});
  DenseForward(x.data.data(), n, in_, out_, weight_.value.data.data(), bias_.value.data.data(),
               y->data.data());
}

void LinearLayer::CheckBackwardShapes(const Tensor& x, const Tensor& dy) const {
  DAPPLE_KERNEL_CHECK(x.shape.size() == 2 && x.shape[1] == in_, "layer", layer_index_,
                      " (linear) expects x [N, ", in_, "], got ", ShapeToString(x.shape));
  DAPPLE_KERNEL_CHECK(dy.shape.size() == 2 && dy.shape[0] == x.rows() && dy.shape[1] == out_,
                      "layer", layer_index_, " (linear) expects dy [", x.rows(), ", ", out_,
                      "], got ", ShapeToString(dy.shape));
}

void LinearLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                LayerCache* cache) {
  CheckBackwardShapes(x, dy);
  if (dx == nullptr) return;
  const int64_t n = x.rows();
  dx->Resize({n, in_});
  DenseBackwardInput(dy.data.data(), n, in_, out_, weight_.value.data.data(),
                     /*accumulate=*/false, dx->data.data());
}

void LinearLayer::BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                                 LayerCache* cache) {
  CheckBackwardShapes(x, dy);
  DenseBackwardWeight(x.data.data(), dy.data.data(), x.rows(), in_, out_, weight_.grad.data.data(),
                      bias_.grad.data.data());
}

}  // namespace dapple::kernels

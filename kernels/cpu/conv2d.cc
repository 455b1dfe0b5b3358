#include "kernels/cpu/conv2d.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/init.h"

namespace dapple::kernels {

void AddInto(const Tensor& delta, Tensor* grad) {
  DAPPLE_KERNEL_CHECK(delta.data.size() == grad->data.size(),
                      "AddInto: ", ShapeToString(delta.shape), " into ",
                      ShapeToString(grad->shape));
  float* g = grad->data.data();
  const float* d = delta.data.data();
  const size_t n = grad->data.size();
  for (size_t i = 0; i < n; ++i) g[i] += d[i];
}

Conv2dLayer::Conv2dLayer(int layer_index, int64_t channels, int64_t height, int64_t width,
                         int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
                         bool bias)
    : layer_index_(layer_index), has_bias_(bias) {
  shape_.c = channels;
  shape_.h = height;
  shape_.w = width;
  shape_.out_channels = out_channels;
  shape_.kernel = kernel;
  shape_.stride = stride;
  shape_.padding = padding;
  DAPPLE_KERNEL_CHECK(channels > 0 && height > 0 && width > 0 && out_channels > 0 && kernel > 0 &&
                          stride > 0 && padding >= 0 && kernel <= height + 2 * padding &&
                          kernel <= width + 2 * padding,
                      "conv2d layer ", layer_index, " input [", channels, ", ", height, ", ", width,
                      "] out_channels ", out_channels, " kernel ", kernel, " stride ", stride,
                      " padding ", padding);
  weight_.name = absl::StrCat("layer", layer_index, ".weight");
  weight_.value = Tensor::Zeros({out_channels, channels, kernel, kernel});
  weight_.grad = Tensor::Zeros(weight_.value.shape);
  if (bias) {
    bias_.name = absl::StrCat("layer", layer_index, ".bias");
    bias_.value = Tensor::Zeros({out_channels});
    bias_.grad = Tensor::Zeros({out_channels});
  }
}

void Conv2dLayer::InitParams(uint64_t seed) {
  const float bound = FanInInitBound(shape_.c * shape_.kernel * shape_.kernel);
  FillSymmetricUniform(seed, layer_index_, InitTensor::kWeight, bound, &weight_.value);
  if (has_bias_) FillSymmetricUniform(seed, layer_index_, InitTensor::kBias, bound, &bias_.value);
}

std::vector<Param*> Conv2dLayer::Params() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

ConvGeometry Conv2dLayer::Geometry(int64_t n) const {
  ConvGeometry g = shape_;
  g.n = n;
  return g;
}

int64_t Conv2dLayer::Rows(const Tensor& x, const Tensor* dy) const {
  DAPPLE_KERNEL_CHECK(x.shape.size() == 4 && x.shape[1] == shape_.c && x.shape[2] == shape_.h &&
                          x.shape[3] == shape_.w,
                      "layer", layer_index_, " (conv2d) expects x [N, ", shape_.c, ", ", shape_.h,
                      ", ", shape_.w, "], got ", ShapeToString(x.shape));
  if (dy != nullptr) {
    const std::vector<int64_t> want{x.rows(), shape_.out_channels, shape_.OutH(), shape_.OutW()};
    DAPPLE_KERNEL_CHECK(dy->shape == want, "layer", layer_index_, " (conv2d) expects dy ",
                        ShapeToString(want), ", got ", ShapeToString(dy->shape));
  }
  return x.rows();
}

void Conv2dLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                          const ForwardContext& ctx) {
  cache->ctx = ctx;
  const ConvGeometry g = Geometry(Rows(x, nullptr));
  y->Resize({g.n, g.out_channels, g.OutH(), g.OutW()});
  op_.Forward(g, x.data.data(), weight_.value.data.data(),
              has_bias_ ? bias_.value.data.data() : nullptr, y->data.data());
}

void Conv2dLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                LayerCache* cache) {
  const ConvGeometry g = Geometry(Rows(x, &dy));
  if (dx == nullptr) return;
  dx->Resize(x.shape);
  op_.BackwardData(g, dy.data.data(), weight_.value.data.data(), dx->data.data());
}

void Conv2dLayer::BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                                 LayerCache* cache) {
  const ConvGeometry g = Geometry(Rows(x, &dy));
  if (g.n == 0) return;
  dweight_.Resize(weight_.value.shape);
  if (has_bias_) dbias_.Resize(bias_.value.shape);
  op_.BackwardWeights(g, x.data.data(), dy.data.data(), dweight_.data.data(),
                      has_bias_ ? dbias_.data.data() : nullptr);
  AddInto(dweight_, &weight_.grad);
  if (has_bias_) AddInto(dbias_, &bias_.grad);
}

}  // namespace dapple::kernels

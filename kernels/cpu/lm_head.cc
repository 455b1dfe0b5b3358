#include "kernels/cpu/lm_head.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/dense.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/init.h"

namespace dapple::kernels {

LmHeadLayer::LmHeadLayer(int layer_index, int64_t width, int64_t vocab, std::string tied_to)
    : layer_index_(layer_index), width_(width), vocab_(vocab), weight_(&own_) {
  DAPPLE_KERNEL_CHECK(width > 0 && vocab > 0, "layer", layer_index, " (lm_head) width ", width,
                      " vocab ", vocab);
  own_.name = absl::StrCat("layer", layer_index, ".weight");
  own_.value = Tensor::Zeros({vocab, width});
  own_.grad = Tensor::Zeros({vocab, width});
  own_.tied_to = std::move(tied_to);
}

void LmHeadLayer::InitParams(uint64_t seed, int tied_layer) {
  if (own_.tied_to.empty()) {
    FillSymmetricUniform(seed, layer_index_, InitTensor::kWeight, Gpt2InitBound(), &own_.value);
  } else {
    InitTokenEmbedding(seed, tied_layer, &own_.value);
  }
}

bool LmHeadLayer::ShareTiedParam(const std::string& copy_name, Param* owner) {
  if (own_.tied_to.empty() || copy_name != own_.name) return false;
  const std::vector<int64_t> shape = {vocab_, width_};
  DAPPLE_KERNEL_CHECK(owner->value.shape == shape, "layer", layer_index_, " (lm_head) tied to ",
                      owner->name, " of shape ", ShapeToString(owner->value.shape), ", expects ",
                      ShapeToString(shape));
  weight_ = owner;
  own_.value = Tensor();
  own_.grad = Tensor();
  return true;
}

int64_t LmHeadLayer::Rows(const Tensor& x, const Tensor* dy) const {
  DAPPLE_KERNEL_CHECK(x.shape.size() >= 2 && x.shape.back() == width_, "layer", layer_index_,
                      " (lm_head) expects x [N, ..., ", width_, "], got ", ShapeToString(x.shape));
  if (dy != nullptr) {
    bool ok = dy->shape.size() == x.shape.size() && dy->shape.back() == vocab_;
    for (size_t i = 0; ok && i + 1 < x.shape.size(); ++i) ok = dy->shape[i] == x.shape[i];
    DAPPLE_KERNEL_CHECK(ok, "layer", layer_index_, " (lm_head) expects dy [..., ", vocab_,
                        "] matching x ", ShapeToString(x.shape), ", got ",
                        ShapeToString(dy->shape));
  }
  return x.numel() / width_;
}

void LmHeadLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                          const ForwardContext& ctx) {
  cache->ctx = ctx;
  const int64_t rows = Rows(x, nullptr);
  std::vector<int64_t> shape = x.shape;
  shape.back() = vocab_;
  y->Resize(shape);
  DenseForward(x.data.data(), rows, width_, vocab_, weight_->value.data.data(), nullptr,
               y->data.data());
}

void LmHeadLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                LayerCache* cache) {
  const int64_t rows = Rows(x, &dy);
  if (dx == nullptr) return;
  dx->Resize(x.shape);
  DenseBackwardInput(dy.data.data(), rows, width_, vocab_, weight_->value.data.data(),
                     /*accumulate=*/false, dx->data.data());
}

void LmHeadLayer::BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                                 LayerCache* cache) {
  const int64_t rows = Rows(x, &dy);
  DenseBackwardWeight(x.data.data(), dy.data.data(), rows, width_, vocab_,
                      weight_->grad.data.data(), nullptr);
}

}  // namespace dapple::kernels

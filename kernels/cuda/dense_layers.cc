// The GEMM layers on the GPU, the twins of kernels/cpu/linear.h and kernels/cpu/lm_head.h, on
// kernels/cuda/linear.h (cuBLAS): y = x W^T (+ b) over the rows of the input's last dimension.
#include <memory>

#include "kernels/cuda/layers_internal.h"
#include "kernels/cuda/typed_ops.h"

namespace dapple::kernels::cuda::internal {
namespace {

// Parameters: weight [out, in] (index 0) and, with a bias, bias [out] (index 1). Each sample is
// `rows_per_sample` rows of `in` features (1 for linear, T for an LM head on [T, C]). Nothing
// is saved: the backward reads x and dy.
template <typename T>
class DenseLayer : public DeviceLayer {
 public:
  DenseLayer(const LayerInfo& info, std::string type, int64_t rows_per_sample, int64_t in,
             int64_t out, bool bias)
      : DeviceLayer(info, typed::kDtype<T>),
        type_(std::move(type)),
        rows_per_sample_(rows_per_sample),
        in_(in),
        out_(out),
        bias_(bias) {}

  std::string Type() const override { return type_; }
  absl::StatusOr<LayerBuffers> Buffers(int64_t rows) const override {
    (void)rows;
    return LayerBuffers{};
  }

  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    return typed::LinearForward(ctx, static_cast<const T*>(x), typed::GemmWeight<T>(param(0)),
                                bias_ ? &param(1) : nullptr, static_cast<T*>(y),
                                rows * rows_per_sample_, in_, out_);
  }

  absl::Status BackwardInput(const KernelContext& ctx, const void*, const void*, const void* dy,
                             void* dx, int64_t rows, DeviceCache*, Scratch) override {
    if (dx == nullptr) return absl::OkStatus();
    return typed::LinearBackwardInput(ctx, typed::GemmWeight<T>(param(0)),
                                      static_cast<const T*>(dy), static_cast<T*>(dx),
                                      rows * rows_per_sample_, in_, out_);
  }

  absl::Status BackwardWeight(const KernelContext& ctx, const void* x, const void*, const void* dy,
                              int64_t rows, DeviceCache*, Scratch) override {
    return typed::LinearBackwardWeight(ctx, static_cast<const T*>(x), static_cast<const T*>(dy),
                                       param(0).grad, bias_ ? param(1).grad : nullptr,
                                       rows * rows_per_sample_, in_, out_);
  }

 private:
  std::string type_;
  int64_t rows_per_sample_, in_, out_;
  bool bias_;
};

std::unique_ptr<DeviceLayer> MakeDense(Dtype dtype, const LayerInfo& info, std::string type,
                                       int64_t rows_per_sample, int64_t in, int64_t out,
                                       bool bias) {
  if (dtype == Dtype::kFp32) {
    return std::make_unique<DenseLayer<float>>(info, std::move(type), rows_per_sample, in, out,
                                               bias);
  }
  return std::make_unique<DenseLayer<bf16>>(info, std::move(type), rows_per_sample, in, out, bias);
}

}  // namespace

std::unique_ptr<DeviceLayer> MakeLinearLayer(const LayerInfo& info, const v1::LayerSpec&,
                                             Dtype dtype) {
  return MakeDense(dtype, info, "linear", 1, info.input_shape[0], info.output_shape[0], true);
}

// The weight is [vocab, C] (tied or not: a tied head's is the embedding's table, bound by the
// caller as the owner's buffers, or its own copy).
std::unique_ptr<DeviceLayer> MakeLmHeadLayer(const LayerInfo& info, const v1::LayerSpec&,
                                             Dtype dtype) {
  const int64_t width = info.input_shape.back();
  const int64_t vocab = info.params[0].shape[0];
  return MakeDense(dtype, info, "lm_head", NumElements(info.input_shape) / width, width, vocab,
                   false);
}

}  // namespace dapple::kernels::cuda::internal

// The layernorm layer on the GPU, the twin of kernels/cpu/layernorm.h's LayerNormLayer on
// kernels/cuda/layernorm.h: x [N, ..., C] normalised by rows of C.
#include <memory>

#include "kernels/cpu/layernorm.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/layers_internal.h"
#include "kernels/cuda/typed_ops.h"

namespace dapple::kernels::cuda::internal {
namespace {

// Parameters: weight [C] (gamma), bias [C] (beta). Saved: the mean and the biased variance of
// each row, fp32 (common/model's 2 floats per row).
template <typename T>
class LayerNormLayer : public DeviceLayer {
 public:
  enum SavedIndex { kMean, kVar };

  LayerNormLayer(const LayerInfo& info, float eps)
      : DeviceLayer(info, typed::kDtype<T>),
        cols_(info.input_shape.back()),
        rows_per_sample_(NumElements(info.input_shape) / cols_),
        eps_(eps) {}

  std::string Type() const override { return "layernorm"; }

  absl::StatusOr<LayerBuffers> Buffers(int64_t rows) const override {
    const size_t stats = static_cast<size_t>(rows * rows_per_sample_) * sizeof(float);
    LayerBuffers b;
    b.saved = {stats, stats};
    return b;
  }

  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    return LayerNormForward(ctx, static_cast<const T*>(x), param(0).value, param(1).value,
                            rows * rows_per_sample_, cols_, eps_, static_cast<T*>(y),
                            Saved(cache, kMean), Saved(cache, kVar));
  }

  absl::Status BackwardInput(const KernelContext& ctx, const void* x, const void*, const void* dy,
                             void* dx, int64_t rows, DeviceCache* cache, Scratch) override {
    if (dx == nullptr) return absl::OkStatus();
    return LayerNormBackwardInput(ctx, static_cast<const T*>(x), static_cast<const T*>(dy),
                                  Saved(cache, kMean), Saved(cache, kVar), param(0).value,
                                  rows * rows_per_sample_, cols_, eps_,
                                  static_cast<const T*>(nullptr), static_cast<T*>(dx));
  }

  absl::Status BackwardWeight(const KernelContext& ctx, const void* x, const void*, const void* dy,
                              int64_t rows, DeviceCache* cache, Scratch) override {
    return LayerNormBackwardWeight(ctx, static_cast<const T*>(x), static_cast<const T*>(dy),
                                   Saved(cache, kMean), Saved(cache, kVar), rows * rows_per_sample_,
                                   cols_, eps_, param(0).grad, param(1).grad);
  }

 private:
  static float* Saved(DeviceCache* cache, SavedIndex i) {
    return static_cast<float*>(cache->saved[i]);
  }

  int64_t cols_;
  int64_t rows_per_sample_;
  float eps_;
};

}  // namespace

// eps as the CPU layer takes it: the spec's, else PyTorch's default, rounded to fp32.
std::unique_ptr<DeviceLayer> MakeLayerNormLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                Dtype dtype) {
  const float eps = static_cast<float>(spec.layernorm().has_eps() ? spec.layernorm().eps()
                                                                  : kDefaultLayerNormEps);
  if (dtype == Dtype::kFp32) return std::make_unique<LayerNormLayer<float>>(info, eps);
  return std::make_unique<LayerNormLayer<bf16>>(info, eps);
}

}  // namespace dapple::kernels::cuda::internal

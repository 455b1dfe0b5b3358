// The parameter-free layers on the GPU: ReLU, GELU, Flatten and Dropout, the twins of
// kernels/cpu/activations.h and kernels/cpu/dropout.h's DropoutLayer. Each maps the
// features of a sample element by element, so y has x's element count.
#include <cuda_runtime.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/layers_internal.h"
#include "kernels/cuda/typed_ops.h"

namespace dapple::kernels::cuda::internal {
namespace {

// What the four share: the element count of a micro-batch and no buffers.
template <typename T>
class ElementwiseLayer : public DeviceLayer {
 public:
  explicit ElementwiseLayer(const LayerInfo& info)
      : DeviceLayer(info, typed::kDtype<T>), features_(NumElements(info.input_shape)) {}
  absl::StatusOr<LayerBuffers> Buffers(int64_t rows) const override {
    (void)rows;
    return LayerBuffers{};
  }

 protected:
  int64_t Count(int64_t rows) const { return rows * features_; }
  int64_t features() const { return features_; }

 private:
  int64_t features_;
};

template <typename T>
class ReluLayer : public ElementwiseLayer<T> {
 public:
  using ElementwiseLayer<T>::ElementwiseLayer;
  std::string Type() const override { return "relu"; }
  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    return typed::ReluForward(ctx, static_cast<const T*>(x), static_cast<T*>(y), this->Count(rows));
  }
  absl::Status BackwardInput(const KernelContext& ctx, const void* x, const void*, const void* dy,
                             void* dx, int64_t rows, DeviceCache*, Scratch) override {
    if (dx == nullptr) return absl::OkStatus();
    return typed::ReluBackward(ctx, static_cast<const T*>(x), static_cast<const T*>(dy),
                               static_cast<T*>(dx), this->Count(rows));
  }
};

template <typename T>
class GeluLayer : public ElementwiseLayer<T> {
 public:
  using ElementwiseLayer<T>::ElementwiseLayer;
  std::string Type() const override { return "gelu"; }
  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    return typed::GeluForward(ctx, static_cast<const T*>(x), static_cast<T*>(y), this->Count(rows));
  }
  absl::Status BackwardInput(const KernelContext& ctx, const void* x, const void*, const void* dy,
                             void* dx, int64_t rows, DeviceCache*, Scratch) override {
    if (dx == nullptr) return absl::OkStatus();
    return typed::GeluBackward(ctx, static_cast<const T*>(x), static_cast<const T*>(dy),
                               static_cast<T*>(dx), this->Count(rows));
  }
};

// The same bytes in the same order: a device-to-device copy each way.
template <typename T>
class FlattenLayer : public ElementwiseLayer<T> {
 public:
  using ElementwiseLayer<T>::ElementwiseLayer;
  std::string Type() const override { return "flatten"; }
  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    return Copy(ctx, x, y, rows, "flatten");
  }
  absl::Status BackwardInput(const KernelContext& ctx, const void*, const void*, const void* dy,
                             void* dx, int64_t rows, DeviceCache*, Scratch) override {
    if (dx == nullptr) return absl::OkStatus();
    return Copy(ctx, dy, dx, rows, "flatten backward");
  }

 private:
  absl::Status Copy(const KernelContext& ctx, const void* from, void* to, int64_t rows,
                    const char* what) const {
    const size_t bytes = static_cast<size_t>(this->Count(rows)) * sizeof(T);
    if (bytes == 0 || from == to) return absl::OkStatus();
    return CudaStatus(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, ctx.stream), what);
  }
};

// kernels/cpu/dropout.h's DropoutLayer: the mask of site kDropoutSite of its own index; the
// backward applies the forward's mask (from cache->ctx) to dy.
template <typename T>
class DropoutLayer : public ElementwiseLayer<T> {
 public:
  DropoutLayer(const LayerInfo& info, double p) : ElementwiseLayer<T>(info), p_(p) {}
  std::string Type() const override { return "dropout"; }
  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    return Apply(ctx, fctx, x, y, rows);
  }
  absl::Status BackwardInput(const KernelContext& ctx, const void*, const void*, const void* dy,
                             void* dx, int64_t rows, DeviceCache* cache, Scratch) override {
    if (dx == nullptr) return absl::OkStatus();
    return Apply(ctx, cache->ctx, dy, dx, rows);
  }

 private:
  absl::Status Apply(const KernelContext& ctx, const ForwardContext& fctx, const void* in,
                     void* out, int64_t rows) const {
    DropoutMask storage;
    const DropoutMask* mask =
        typed::MaskFor(fctx, this->info().index, kernels::DropoutLayer::kDropoutSite, p_, &storage);
    return Dropout(ctx, mask, rows, this->features(), static_cast<const T*>(in),
                   static_cast<const T*>(nullptr), static_cast<T*>(out));
  }

  double p_;
};

template <template <typename> class L, typename... Args>
std::unique_ptr<DeviceLayer> Make(Dtype dtype, const LayerInfo& info, Args... args) {
  if (dtype == Dtype::kFp32) return std::make_unique<L<float>>(info, args...);
  return std::make_unique<L<bf16>>(info, args...);
}

}  // namespace

std::unique_ptr<DeviceLayer> MakeReluLayer(const LayerInfo& info, const v1::LayerSpec&,
                                           Dtype dtype) {
  return Make<ReluLayer>(dtype, info);
}
std::unique_ptr<DeviceLayer> MakeGeluLayer(const LayerInfo& info, const v1::LayerSpec&,
                                           Dtype dtype) {
  return Make<GeluLayer>(dtype, info);
}
std::unique_ptr<DeviceLayer> MakeFlattenLayer(const LayerInfo& info, const v1::LayerSpec&,
                                              Dtype dtype) {
  return Make<FlattenLayer>(dtype, info);
}
// An unset p reads as 0, as on the CPU (common/model validated it).
std::unique_ptr<DeviceLayer> MakeDropoutLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                              Dtype dtype) {
  return Make<DropoutLayer>(dtype, info, spec.dropout().p());
}

}  // namespace dapple::kernels::cuda::internal

// The embedding layer on the GPU, the twin of kernels/cpu/embedding.h's EmbeddingLayer on
// kernels/cuda/embedding.h: token ids [N, T] (fp32 values) -> [N, T, dim].
#include <cuda_runtime.h>

#include <memory>

#include "common/status.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/layers_internal.h"
#include "kernels/cuda/typed_ops.h"

namespace dapple::kernels::cuda::internal {
namespace {

// Parameters: token_embedding [vocab, dim] (index 0), position_embedding [positions, dim]
// (index 1). Nothing saved (the backward recomputes the mask from cache->ctx); the backward's
// sort needs scratch.
template <typename T>
class EmbeddingLayer : public DeviceLayer {
 public:
  EmbeddingLayer(const LayerInfo& info, double dropout)
      : DeviceLayer(info, typed::kDtype<T>), dropout_(dropout) {}

  std::string Type() const override { return "embedding"; }

  absl::StatusOr<LayerBuffers> Buffers(int64_t rows) const override {
    LayerBuffers b;
    // With dropout configured, room for the masked gradient whether or not a step trains.
    DAPPLE_ASSIGN_OR_RETURN(b.scratch, EmbeddingBackwardScratchBytes(Shape(rows), dropout_ > 0));
    return b;
  }

  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    DropoutMask storage;
    return EmbeddingForward(ctx, Shape(rows), static_cast<const float*>(x), param(0).value,
                            param(1).value, Mask(fctx, &storage), static_cast<T*>(y));
  }

  // Token ids have no gradient: dx, when asked for, is zeros of x's shape (as on the CPU).
  absl::Status BackwardInput(const KernelContext& ctx, const void*, const void*, const void*,
                             void* dx, int64_t rows, DeviceCache*, Scratch) override {
    if (dx == nullptr) return absl::OkStatus();
    const size_t bytes = static_cast<size_t>(rows * Seq()) * sizeof(float);
    return CudaStatus(cudaMemsetAsync(dx, 0, bytes, ctx.stream), "embedding backward (zero dx)");
  }

  absl::Status BackwardWeight(const KernelContext& ctx, const void* x, const void*, const void* dy,
                              int64_t rows, DeviceCache* cache, Scratch scratch) override {
    DropoutMask storage;
    return EmbeddingBackwardWeight(ctx, Shape(rows), static_cast<const float*>(x),
                                   static_cast<const T*>(dy), Mask(cache->ctx, &storage),
                                   scratch.data, scratch.bytes, param(0).grad, param(1).grad);
  }

 private:
  int64_t Seq() const { return info().input_shape[0]; }
  EmbeddingShape Shape(int64_t rows) const {
    const std::vector<int64_t>& table = info().params[0].shape;  // [vocab, dim]
    return EmbeddingShape{rows, Seq(), table[1], table[0]};
  }
  const DropoutMask* Mask(const ForwardContext& fctx, DropoutMask* storage) const {
    return typed::MaskFor(fctx, info().index, kernels::EmbeddingLayer::kDropoutSite, dropout_,
                          storage);
  }

  double dropout_;
};

}  // namespace

// An unset dropout reads as 0, as on the CPU.
std::unique_ptr<DeviceLayer> MakeEmbeddingLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                Dtype dtype) {
  const double dropout = spec.embedding().dropout();
  if (dtype == Dtype::kFp32) return std::make_unique<EmbeddingLayer<float>>(info, dropout);
  return std::make_unique<EmbeddingLayer<bf16>>(info, dropout);
}

}  // namespace dapple::kernels::cuda::internal

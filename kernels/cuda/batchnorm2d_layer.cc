// The batchnorm2d layer on the GPU, the twin of kernels/cpu/batchnorm2d.h's BatchNorm2dLayer
// (batchnorm_channels.h: cuDNN, the same step statistics), fp32: x [N, C, H, W] -> y of the
// same shape. Parameters weight (gamma) [C], bias (beta) [C]; buffers running_mean,
// running_var [C]. Saved after a training Forward: the batch mean and rstd ([C] each, fp32:
// common/model's 2C floats); grads after BackwardInput: dgamma and dbeta ([C] each).
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/batchnorm2d.h"
#include "kernels/cuda/batchnorm_channels.h"
#include "kernels/cuda/layers_internal.h"

namespace dapple::kernels::cuda::internal {
namespace {

class BatchNorm2dLayer : public DeviceLayer {
 public:
  BatchNorm2dLayer(const LayerInfo& info, double eps, double momentum)
      : DeviceLayer(info, Dtype::kFp32),
        hw_(info.input_shape[1] * info.input_shape[2]),
        norm_(info.input_shape[0], eps, momentum) {}

  std::string Type() const override { return "batchnorm2d"; }

  absl::StatusOr<LayerBuffers> Buffers(int64_t rows) const override {
    const size_t channel = static_cast<size_t>(norm_.channels()) * sizeof(float);
    LayerBuffers b;
    b.saved = {channel, channel};
    b.grads = {channel, channel};
    // dx when the caller wants none (cuDNN computes it with the parameter gradients).
    b.scratch = static_cast<size_t>(rows * norm_.channels() * hw_) * sizeof(float);
    return b;
  }

  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    DAPPLE_RETURN_IF_ERROR(BindNorm());
    return norm_.Forward(ctx, static_cast<const float*>(x), rows, hw_, fctx, static_cast<float*>(y),
                         Saved(cache, 0), Saved(cache, 1));
  }

  absl::Status BackwardInput(const KernelContext& ctx, const void* x, const void*, const void* dy,
                             void* dx, int64_t rows, DeviceCache* cache, Scratch scratch) override {
    if (!cache->ctx.training) {
      return absl::FailedPreconditionError(
          absl::StrCat(Name(), ": backward of an evaluation forward"));
    }
    DAPPLE_RETURN_IF_ERROR(BindNorm());
    if (dx == nullptr) dx = scratch.data;
    return norm_.BackwardInput(ctx, static_cast<const float*>(x), static_cast<const float*>(dy),
                               rows, hw_, Saved(cache, 0), Saved(cache, 1), static_cast<float*>(dx),
                               Grad(cache, 0), Grad(cache, 1));
  }

  absl::Status BackwardWeight(const KernelContext& ctx, const void*, const void*, const void*,
                              int64_t rows, DeviceCache* cache, Scratch) override {
    if (rows == 0) return absl::OkStatus();
    DAPPLE_RETURN_IF_ERROR(BindNorm());
    return norm_.BackwardWeight(ctx, Grad(cache, 0), Grad(cache, 1));
  }

  int64_t StepStatisticsSize() const override { return norm_.StepStatisticsSize(); }
  absl::Status ReadStepStatistics(const KernelContext& ctx, double* host) override {
    return norm_.ReadStepStatistics(ctx, host);
  }
  absl::Status ApplyStepStatistics(const KernelContext& ctx, const double* summed) override {
    DAPPLE_RETURN_IF_ERROR(BindNorm());
    return norm_.ApplyStepStatistics(ctx, summed);
  }

 private:
  static float* Saved(DeviceCache* cache, int i) { return static_cast<float*>(cache->saved[i]); }
  static float* Grad(DeviceCache* cache, int i) { return static_cast<float*>(cache->grads[i]); }
  absl::Status BindNorm() {
    if (!bound()) {
      return absl::FailedPreconditionError(
          absl::StrCat(Name(), ": parameters and running statistics not bound"));
    }
    norm_.Bind(param(0), param(1), buffer(0), buffer(1));
    return absl::OkStatus();
  }

  int64_t hw_;
  DeviceBatchNorm norm_;
};

}  // namespace

std::unique_ptr<DeviceLayer> MakeBatchNorm2dLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                  Dtype) {
  const v1::BatchNorm2dParams& p = spec.batchnorm2d();
  return std::make_unique<BatchNorm2dLayer>(
      info, p.has_eps() ? p.eps() : kDefaultBatchNormEps,
      p.has_momentum() ? p.momentum() : kDefaultBatchNormMomentum);
}

}  // namespace dapple::kernels::cuda::internal

// The residual_block layer on the GPU, the twin of kernels/cpu/residual_block.h's
// ResidualBlockLayer (ResNet's basic block, He et al., CVPR 2016) on cuDNN, fp32, with the same
// parameters (conv1.weight, bn1.weight, bn1.bias, conv2.weight, bn2.weight, bn2.bias[,
// shortcut.conv.weight, shortcut.bn.weight, shortcut.bn.bias]), buffers (each batch norm's
// running_mean, running_var) and step statistics (bn1's, bn2's[, shortcut.bn's] in that order).
//
// Saved (Saved): z1, a1 = relu(bn1(z1)), z2[, zs] ([N, O, H', W'] each: common/model's 3 or 4
// per sample) and each batch norm's mean and rstd ([O]). Grads (Grad): dL/dz1, dL/dz2[, dL/dzs]
// and the batch norms' parameter gradients, so BackwardWeight computes only the convolutions'
// filter gradients (Zero Bubble's B / W split). Scratch: two [N, O, H', W'] tensors.
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/batchnorm2d.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/batchnorm_channels.h"
#include "kernels/cuda/cudnn_ops.h"
#include "kernels/cuda/layers_internal.h"

namespace dapple::kernels::cuda::internal {
namespace {

// Sub-buffers of the scratch start on 256-byte boundaries (cuDNN's preferred alignment).
size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

class ResidualBlockLayer : public DeviceLayer {
 public:
  enum Saved { kZ1, kMean1, kRstd1, kA1, kZ2, kMean2, kRstd2, kZs, kMeanS, kRstdS, kNumSaved };
  enum Grad {
    kGradZ1,
    kGradZ2,
    kGradZs,
    kDGamma1,
    kDBeta1,
    kDGamma2,
    kDBeta2,
    kDGammaS,
    kDBetaS,
    kNumGrads
  };

  ResidualBlockLayer(const LayerInfo& info, int64_t stride, double eps, double momentum)
      : DeviceLayer(info, Dtype::kFp32),
        channels_(info.input_shape[0]),
        height_(info.input_shape[1]),
        width_(info.input_shape[2]),
        out_channels_(info.output_shape[0]),
        out_hw_(info.output_shape[1] * info.output_shape[2]),
        stride_(stride),
        projection_(info.params.size() == 9),
        bn1_(out_channels_, eps, momentum),
        bn2_(out_channels_, eps, momentum),
        bns_(out_channels_, eps, momentum) {}

  std::string Type() const override { return "residual_block"; }

  absl::StatusOr<LayerBuffers> Buffers(int64_t rows) const override {
    const size_t act = static_cast<size_t>(rows * out_channels_ * out_hw_) * sizeof(float);
    const size_t ch = static_cast<size_t>(out_channels_) * sizeof(float);
    const size_t zs = projection_ ? act : 0, chs = projection_ ? ch : 0;
    LayerBuffers b;
    b.saved = {act, ch, ch, act, act, ch, ch, zs, chs, chs};
    b.grads = {act, act, zs, ch, ch, ch, ch, chs, chs};
    b.scratch = 2 * Aligned(act);  // shortcut.bn's output (forward); dL/dsum, dL/da1
    return b;
  }

  absl::Status Forward(const KernelContext& ctx, const void* xv, void* yv, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch scratch) override {
    cache->ctx = fctx;
    if (rows == 0) return absl::OkStatus();
    DAPPLE_RETURN_IF_ERROR(BindNorms());
    const auto* x = static_cast<const float*>(xv);
    auto* y = static_cast<float*>(yv);
    const int64_t n = rows, count = rows * out_channels_ * out_hw_;
    DAPPLE_RETURN_IF_ERROR(
        conv1_.Forward(ctx, Conv1(n), x, param(0).value, nullptr, S(cache, kZ1)));
    DAPPLE_RETURN_IF_ERROR(bn1_.Forward(ctx, S(cache, kZ1), n, out_hw_, fctx, S(cache, kA1),
                                        S(cache, kMean1), S(cache, kRstd1)));
    DAPPLE_RETURN_IF_ERROR(ReluForward(ctx, S(cache, kA1), S(cache, kA1), count));
    DAPPLE_RETURN_IF_ERROR(
        conv2_.Forward(ctx, Conv2(n), S(cache, kA1), param(3).value, nullptr, S(cache, kZ2)));
    DAPPLE_RETURN_IF_ERROR(
        bn2_.Forward(ctx, S(cache, kZ2), n, out_hw_, fctx, y, S(cache, kMean2), S(cache, kRstd2)));
    const float* sc = x;
    if (projection_) {
      float* shortcut_out = Part(scratch, rows, 0);
      DAPPLE_RETURN_IF_ERROR(
          convs_.Forward(ctx, Shortcut(n), x, param(6).value, nullptr, S(cache, kZs)));
      DAPPLE_RETURN_IF_ERROR(bns_.Forward(ctx, S(cache, kZs), n, out_hw_, fctx, shortcut_out,
                                          S(cache, kMeanS), S(cache, kRstdS)));
      sc = shortcut_out;
    }
    DAPPLE_RETURN_IF_ERROR(AddInto(ctx, sc, y, count));
    return ReluForward(ctx, y, y, count);
  }

  absl::Status BackwardInput(const KernelContext& ctx, const void* xv, const void* yv,
                             const void* dyv, void* dxv, int64_t rows, DeviceCache* cache,
                             Scratch scratch) override {
    if (!cache->ctx.training) {
      return absl::FailedPreconditionError(
          absl::StrCat(Name(), ": backward of an evaluation forward"));
    }
    if (rows == 0) return absl::OkStatus();
    DAPPLE_RETURN_IF_ERROR(BindNorms());
    const int64_t n = rows, count = rows * out_channels_ * out_hw_;
    float* grad_sum = Part(scratch, rows, 0);
    float* grad_a1 = Part(scratch, rows, 1);
    // Through the final ReLU: y > 0 exactly where the sum was.
    DAPPLE_RETURN_IF_ERROR(ReluBackward(ctx, static_cast<const float*>(yv),
                                        static_cast<const float*>(dyv), grad_sum, count));
    DAPPLE_RETURN_IF_ERROR(bn2_.BackwardInput(ctx, S(cache, kZ2), grad_sum, n, out_hw_,
                                              S(cache, kMean2), S(cache, kRstd2), G(cache, kGradZ2),
                                              G(cache, kDGamma2), G(cache, kDBeta2)));
    DAPPLE_RETURN_IF_ERROR(
        conv2_.BackwardData(ctx, Conv2(n), G(cache, kGradZ2), param(3).value, grad_a1));
    DAPPLE_RETURN_IF_ERROR(ReluBackward(ctx, S(cache, kA1), grad_a1, grad_a1, count));
    DAPPLE_RETURN_IF_ERROR(bn1_.BackwardInput(ctx, S(cache, kZ1), grad_a1, n, out_hw_,
                                              S(cache, kMean1), S(cache, kRstd1), G(cache, kGradZ1),
                                              G(cache, kDGamma1), G(cache, kDBeta1)));
    if (projection_) {
      DAPPLE_RETURN_IF_ERROR(bns_.BackwardInput(
          ctx, S(cache, kZs), grad_sum, n, out_hw_, S(cache, kMeanS), S(cache, kRstdS),
          G(cache, kGradZs), G(cache, kDGammaS), G(cache, kDBetaS)));
    }
    if (dxv == nullptr) return absl::OkStatus();
    auto* dx = static_cast<float*>(dxv);
    DAPPLE_RETURN_IF_ERROR(
        conv1_.BackwardData(ctx, Conv1(n), G(cache, kGradZ1), param(0).value, dx));
    if (projection_) {
      return convs_.BackwardData(ctx, Shortcut(n), G(cache, kGradZs), param(6).value, dx,
                                 /*accumulate=*/true);
    }
    return AddInto(ctx, grad_sum, dx, count);
  }

  absl::Status BackwardWeight(const KernelContext& ctx, const void* xv, const void*, const void*,
                              int64_t rows, DeviceCache* cache, Scratch) override {
    if (rows == 0) return absl::OkStatus();
    DAPPLE_RETURN_IF_ERROR(BindNorms());
    const auto* x = static_cast<const float*>(xv);
    const int64_t n = rows;
    DAPPLE_RETURN_IF_ERROR(
        conv1_.BackwardFilter(ctx, Conv1(n), x, G(cache, kGradZ1), param(0).grad, nullptr));
    DAPPLE_RETURN_IF_ERROR(conv2_.BackwardFilter(ctx, Conv2(n), S(cache, kA1), G(cache, kGradZ2),
                                                 param(3).grad, nullptr));
    DAPPLE_RETURN_IF_ERROR(bn1_.BackwardWeight(ctx, G(cache, kDGamma1), G(cache, kDBeta1)));
    DAPPLE_RETURN_IF_ERROR(bn2_.BackwardWeight(ctx, G(cache, kDGamma2), G(cache, kDBeta2)));
    if (!projection_) return absl::OkStatus();
    DAPPLE_RETURN_IF_ERROR(
        convs_.BackwardFilter(ctx, Shortcut(n), x, G(cache, kGradZs), param(6).grad, nullptr));
    return bns_.BackwardWeight(ctx, G(cache, kDGammaS), G(cache, kDBetaS));
  }

  int64_t StepStatisticsSize() const override {
    return (projection_ ? 3 : 2) * bn1_.StepStatisticsSize();
  }
  absl::Status ReadStepStatistics(const KernelContext& ctx, double* host) override {
    for (DeviceBatchNorm* bn : Norms()) {
      DAPPLE_RETURN_IF_ERROR(bn->ReadStepStatistics(ctx, host));
      host += bn->StepStatisticsSize();
    }
    return absl::OkStatus();
  }
  absl::Status ApplyStepStatistics(const KernelContext& ctx, const double* summed) override {
    DAPPLE_RETURN_IF_ERROR(BindNorms());
    for (DeviceBatchNorm* bn : Norms()) {
      DAPPLE_RETURN_IF_ERROR(bn->ApplyStepStatistics(ctx, summed));
      summed += bn->StepStatisticsSize();
    }
    return absl::OkStatus();
  }

 private:
  static float* S(DeviceCache* cache, Saved i) { return static_cast<float*>(cache->saved[i]); }
  static float* G(DeviceCache* cache, Grad i) { return static_cast<float*>(cache->grads[i]); }
  // The i-th [rows, O, H', W'] part of the scratch.
  float* Part(Scratch scratch, int64_t rows, int i) const {
    const size_t act = static_cast<size_t>(rows * out_channels_ * out_hw_) * sizeof(float);
    return reinterpret_cast<float*>(static_cast<char*>(scratch.data) + i * Aligned(act));
  }
  std::vector<DeviceBatchNorm*> Norms() {
    std::vector<DeviceBatchNorm*> norms{&bn1_, &bn2_};
    if (projection_) norms.push_back(&bns_);
    return norms;
  }
  absl::Status BindNorms() {
    if (!bound()) {
      return absl::FailedPreconditionError(
          absl::StrCat(Name(), ": parameters and running statistics not bound"));
    }
    bn1_.Bind(param(1), param(2), buffer(0), buffer(1));
    bn2_.Bind(param(4), param(5), buffer(2), buffer(3));
    if (projection_) bns_.Bind(param(7), param(8), buffer(4), buffer(5));
    return absl::OkStatus();
  }
  ConvGeometry Conv1(int64_t n) const {
    return {n, channels_, height_, width_, out_channels_, 3, stride_, 1};
  }
  ConvGeometry Conv2(int64_t n) const {
    return {n, out_channels_, info().output_shape[1], info().output_shape[2], out_channels_, 3, 1,
            1};
  }
  ConvGeometry Shortcut(int64_t n) const {
    return {n, channels_, height_, width_, out_channels_, 1, stride_, 0};
  }

  int64_t channels_, height_, width_, out_channels_, out_hw_, stride_;
  bool projection_;
  CudnnConv2d conv1_, conv2_, convs_;
  DeviceBatchNorm bn1_, bn2_, bns_;  // bns_ unused without a projection
};

}  // namespace

std::unique_ptr<DeviceLayer> MakeResidualBlockLayer(const LayerInfo& info,
                                                    const v1::LayerSpec& spec, Dtype) {
  const v1::ResidualBlockParams& p = spec.residual_block();
  return std::make_unique<ResidualBlockLayer>(info, p.has_stride() ? p.stride() : 1,
                                              kDefaultBatchNormEps, kDefaultBatchNormMomentum);
}

}  // namespace dapple::kernels::cuda::internal

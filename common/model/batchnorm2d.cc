// batchnorm2d: batch normalisation of each channel of a [C, H, W] input over (N, H, W) (Ioffe &
// Szegedy, ICML 2015; PyTorch's nn.BatchNorm2d with affine and running statistics):
//   y = (x - mean) / sqrt(var + eps) * weight + bias        (biased var over N x H x W values)
// In training the statistics are those of the rows of each forward call (one micro-batch on one
// replica); the running statistics evaluation uses are updated once per step from the step's
// whole batch on every replica: running = (1 - momentum) running + momentum stat, the variance
// unbiased (docs/layers.md, "Batch normalisation"). [C, H, W] -> the same.
//
// Parameters (in this order): weight (gamma) [C], bias (beta) [C]. Buffers: running_mean [C]
// (starts at 0), running_var [C] (starts at 1). The backward needs the input and each channel's
// mean and variance of the micro-batch: 2C floats per micro-batch, not per sample, so the saved
// bytes per sample are 0.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/model/image_layers.h"
#include "common/model/layer_types.h"

namespace dapple::model_types {
namespace {

class BatchNorm2dType : public LayerType {
 public:
  absl::string_view name() const override { return "batchnorm2d"; }
  absl::string_view example() const override { return "{type: batchnorm2d}"; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    const v1::BatchNorm2dParams& p = spec.batchnorm2d();
    if (p.has_eps() && !(p.eps() > 0 && p.eps() < 1)) {
      return LayerError(ctx, absl::StrCat(".eps ", p.eps(), " must be in (0, 1)"));
    }
    if (p.has_momentum() && !(p.momentum() >= 0 && p.momentum() <= 1)) {
      return LayerError(ctx, absl::StrCat(".momentum ", p.momentum(),
                                          " must be in [0, 1]: the weight of a step's batch "
                                          "statistics in the running ones"));
    }
    absl::StatusOr<Image> in = ImageInput(ctx, name());
    if (!in.ok()) return in.status();
    LayerInfo info;
    info.output_shape = in->Shape();
    AddBatchNorm("", *in, &info);
    const double n = static_cast<double>(in->Elements());
    info.forward_flops = kBatchNormForwardPerElement * n;
    info.backward_flops = kBatchNormBackwardPerElement * n;
    info.backward_weight_flops = kBatchNormBackwardWeightPerElement * n;
    return info;
  }
};

}  // namespace

void AddBatchNorm(absl::string_view prefix, const Image& normalised, LayerInfo* info) {
  const int64_t channels = normalised.c;
  const int64_t values = normalised.h * normalised.w;
  info->batch_norm_values_per_sample = info->batch_norm_values_per_sample == 0
                                           ? values
                                           : std::min(info->batch_norm_values_per_sample, values);
  info->params.push_back({absl::StrCat(prefix, "weight"), {channels}, ""});
  info->params.push_back({absl::StrCat(prefix, "bias"), {channels}, ""});
  info->param_count += 2 * channels;
  info->buffers.push_back({absl::StrCat(prefix, "running_mean"), {channels}, ""});
  info->buffers.push_back({absl::StrCat(prefix, "running_var"), {channels}, ""});
  info->buffer_count += 2 * channels;
}

const LayerType& BatchNorm2d() {
  static const BatchNorm2dType kType;
  return kType;
}

}  // namespace dapple::model_types

// layernorm: layer normalisation over the last dimension (Ba et al., 2016) with a learned scale
// (weight, starts at 1) and shift (bias, starts at 0): PyTorch's nn.LayerNorm(C, eps).
#include "absl/strings/str_cat.h"
#include "common/model/layer_types.h"

namespace dapple::model_types {
namespace {

constexpr double kForwardPerElement = 8;
constexpr double kBackwardPerElement = 12;
constexpr double kBackwardWeightPerElement = 4;  // of the 12: the gradients of scale and shift

class LayerNormType : public LayerType {
 public:
  absl::string_view name() const override { return "layernorm"; }
  absl::string_view example() const override { return "{type: layernorm}"; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    if (ctx.token_input) {
      return LayerError(ctx,
                        " (layernorm) cannot read token ids: the first layer of a token "
                        "model is an embedding");
    }
    const v1::LayerNormParams& p = spec.layernorm();
    if (p.has_eps() && !(p.eps() > 0 && p.eps() < 1)) {
      return LayerError(ctx, absl::StrCat(".eps ", p.eps(), " must be in (0, 1)"));
    }
    const int64_t c = ctx.input_shape.back();
    const int64_t rows = NumElements(ctx.input_shape) / c;
    LayerInfo info;
    info.output_shape = ctx.input_shape;
    info.params = {{"weight", {c}, ""}, {"bias", {c}, ""}};
    info.param_count = 2 * c;
    const double n = static_cast<double>(NumElements(ctx.input_shape));
    info.forward_flops = kForwardPerElement * n;
    info.backward_flops = kBackwardPerElement * n;
    info.backward_weight_flops = kBackwardWeightPerElement * n;
    // The mean and variance of each row (oneDNN's LayerNorm backward takes the variance; PyTorch
    // keeps 1 / std instead: the same count).
    info.saved_bytes = 2 * rows * static_cast<int64_t>(sizeof(float));
    return info;
  }
};

}  // namespace

const LayerType& LayerNorm() {
  static const LayerNormType kType;
  return kType;
}

}  // namespace dapple::model_types

// linear: y = x W^T + b over a flat per-sample input (PyTorch's nn.Linear).
#include "absl/strings/str_cat.h"
#include "common/model/layer_types.h"
#include "common/model/limits.h"

namespace dapple::model_types {
namespace {

class LinearType : public LayerType {
 public:
  absl::string_view name() const override { return "linear"; }
  absl::string_view example() const override { return "{type: linear, out: 10}"; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    if (!spec.linear().has_out()) {
      return LayerError(ctx, ".out is required for linear layers, e.g. {type: linear, out: 10}");
    }
    const int64_t out = spec.linear().out();
    if (out <= 0) return LayerError(ctx, absl::StrCat(".out ", out, " must be > 0"));
    if (out > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(".out ", out, " is more than the maximum 2^24 (",
                                          kMaxSampleElements, ") output elements per sample"));
    }
    if (ctx.token_input) {
      return LayerError(ctx,
                        " (linear) cannot read token ids: the first layer of a token model "
                        "is an embedding");
    }
    if (ctx.input_shape.size() != 1) {
      return LayerError(
          ctx, absl::StrCat(" (linear) needs a flat input, got ", ShapeText(ctx.input_shape),
                            " from ", ctx.input_from, ": add a flatten layer before it"));
    }
    const int64_t in = ctx.input_shape[0];
    LayerInfo info;
    info.output_shape = {out};
    // in, out <= 2^24, so in * out + out cannot overflow.
    info.params = {{"weight", {out, in}, ""}, {"bias", {out}, ""}};
    info.param_count = in * out + out;
    info.forward_flops = 2.0 * static_cast<double>(in) * static_cast<double>(out);
    info.backward_flops = 4.0 * static_cast<double>(in) * static_cast<double>(out);
    info.backward_weight_flops = info.forward_flops;  // dW = dy^T x
    return info;
  }
};

}  // namespace

const LayerType& Linear() {
  static const LinearType kType;
  return kType;
}

}  // namespace dapple::model_types

// dropout: inverted dropout (zero with probability p, scale the rest by 1 / (1 - p)) in
// training, the identity in evaluation. Its mask is a pure function of (seed, step, sample,
// layer, element) (kernels/cpu/dropout.h), so it is recomputed in the backward rather than kept,
// and training does not change with the pipeline layout.
#include "absl/strings/str_cat.h"
#include "common/model/layer_types.h"

namespace dapple::model_types {
namespace {

class DropoutType : public LayerType {
 public:
  absl::string_view name() const override { return "dropout"; }
  absl::string_view example() const override { return "{type: dropout, p: 0.1}"; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    if (!spec.dropout().has_p()) {
      return LayerError(ctx, ".p is required for dropout layers, e.g. {type: dropout, p: 0.1}");
    }
    const double p = spec.dropout().p();
    if (!(p >= 0 && p < 1)) return LayerError(ctx, absl::StrCat(".p ", p, " must be in [0, 1)"));
    if (ctx.token_input) {
      return LayerError(ctx,
                        " (dropout) cannot read token ids: the first layer of a token model "
                        "is an embedding");
    }
    LayerInfo info;
    info.output_shape = ctx.input_shape;
    const double n = static_cast<double>(NumElements(ctx.input_shape));
    info.forward_flops = 2 * n;  // the mask's hash and the multiply
    info.backward_flops = 2 * n;
    return info;
  }
};

}  // namespace

const LayerType& Dropout() {
  static const DropoutType kType;
  return kType;
}

}  // namespace dapple::model_types

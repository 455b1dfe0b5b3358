// flatten, relu, gelu: the layers without parameters that keep (or, for flatten, merge) the
// elements of their input.
#include "absl/strings/str_cat.h"
#include "common/model/layer_types.h"

namespace dapple::model_types {
namespace {

// Per-element cost guesses. Only their relative size matters: the planner prefers measured
// profiles, and these keep estimates sane where none exist. GELU's exact form evaluates erf (a
// rational approximation of a few dozen operations) and its backward also exp, hence its
// larger factors.
constexpr double kReluForwardFlopsPerElement = 1;
constexpr double kReluBackwardFlopsPerElement = 1;
constexpr double kGeluForwardFlopsPerElement = 20;
constexpr double kGeluBackwardFlopsPerElement = 40;

// An element-wise layer: the output has the input's shape.
class Elementwise : public LayerType {
 public:
  Elementwise(absl::string_view name, absl::string_view example, double forward, double backward)
      : name_(name), example_(example), forward_(forward), backward_(backward) {}
  absl::string_view name() const override { return name_; }
  absl::string_view example() const override { return example_; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    if (ctx.token_input) {
      return LayerError(ctx, absl::StrCat(" (", name_,
                                          ") cannot read token ids: the first layer "
                                          "of a token model is an embedding"));
    }
    LayerInfo info;
    info.output_shape = ctx.input_shape;
    const double n = static_cast<double>(NumElements(ctx.input_shape));
    info.forward_flops = forward_ * n;
    info.backward_flops = backward_ * n;
    return info;
  }

 private:
  absl::string_view name_;
  absl::string_view example_;
  double forward_;
  double backward_;
};

class FlattenType : public LayerType {
 public:
  absl::string_view name() const override { return "flatten"; }
  absl::string_view example() const override { return "{type: flatten}"; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    if (ctx.token_input) {
      return LayerError(ctx,
                        " (flatten) cannot read token ids: the first layer of a token model "
                        "is an embedding");
    }
    LayerInfo info;
    info.output_shape = {NumElements(ctx.input_shape)};
    return info;
  }
};

}  // namespace

const LayerType& Flatten() {
  static const FlattenType kType;
  return kType;
}

const LayerType& Relu() {
  static const Elementwise kType("relu", "{type: relu}", kReluForwardFlopsPerElement,
                                 kReluBackwardFlopsPerElement);
  return kType;
}

const LayerType& Gelu() {
  static const Elementwise kType("gelu", "{type: gelu}", kGeluForwardFlopsPerElement,
                                 kGeluBackwardFlopsPerElement);
  return kType;
}

}  // namespace dapple::model_types

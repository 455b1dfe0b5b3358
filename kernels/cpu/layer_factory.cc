#include "kernels/cpu/layer_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/linear.h"

namespace dapple::kernels {
namespace {

using Factory = std::unique_ptr<Layer> (*)(const LayerInfo& info, const v1::LayerSpec& spec,
                                           uint64_t seed);

std::unique_ptr<Layer> MakeLinear(const LayerInfo& info, const v1::LayerSpec& spec,
                                  uint64_t seed) {
  // Weights depend on (seed, global layer index) only, never on the range being built.
  auto linear = std::make_unique<LinearLayer>(info.index, info.input_shape[0],
                                              info.output_shape[0]);
  linear->InitParams(seed);
  return linear;
}

std::unique_ptr<Layer> MakeRelu(const LayerInfo&, const v1::LayerSpec&, uint64_t) {
  return std::make_unique<ReluLayer>();
}
std::unique_ptr<Layer> MakeGelu(const LayerInfo&, const v1::LayerSpec&, uint64_t) {
  return std::make_unique<GeluLayer>();
}
std::unique_ptr<Layer> MakeFlatten(const LayerInfo&, const v1::LayerSpec&, uint64_t) {
  return std::make_unique<FlattenLayer>();
}

struct Entry {
  absl::string_view type;
  Factory make;
};

constexpr Entry kFactories[] = {
    {"flatten", MakeFlatten},
    {"linear", MakeLinear},
    {"relu", MakeRelu},
    {"gelu", MakeGelu},
};

}  // namespace

absl::StatusOr<std::unique_ptr<Layer>> MakeCpuLayer(const LayerInfo& info,
                                                    const v1::LayerSpec& spec, uint64_t seed) {
  for (const Entry& e : kFactories) {
    if (e.type == info.type) return e.make(info, spec, seed);
  }
  return absl::InternalError(
      absl::StrCat("model.layers[", info.index, "]: type '", info.type, "' has no CPU kernel"));
}

}  // namespace dapple::kernels

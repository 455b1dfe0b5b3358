#include "kernels/cpu/model.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_info.h"
#include "common/status.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/linear.h"

namespace dapple::kernels {

absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildLayers(const v1::ModelSpec& model,
                                                                int first_layer, int last_layer,
                                                                uint64_t seed) {
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> infos, InferLayers(model));
  const int num_layers = static_cast<int>(infos.size());
  if (first_layer > last_layer) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer range [", first_layer, ", ", last_layer,
                     "] is empty: first_layer must be <= last_layer"));
  }
  if (first_layer < 0 || last_layer >= num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layer range [", first_layer, ", ", last_layer,
                                                   "] is outside the model's layers [0, ",
                                                   num_layers - 1, "]"));
  }
  std::vector<std::unique_ptr<Layer>> layers;
  layers.reserve(last_layer - first_layer + 1);
  for (int i = first_layer; i <= last_layer; ++i) {
    const LayerInfo& info = infos[i];
    if (info.type == "linear") {
      // Weights depend on (seed, global layer index) only, never on the range being built.
      auto linear = std::make_unique<LinearLayer>(i, info.input_shape[0], info.output_shape[0]);
      linear->InitParams(seed);
      layers.push_back(std::move(linear));
    } else if (info.type == "relu") {
      layers.push_back(std::make_unique<ReluLayer>());
    } else if (info.type == "gelu") {
      layers.push_back(std::make_unique<GeluLayer>());
    } else if (info.type == "flatten") {
      layers.push_back(std::make_unique<FlattenLayer>());
    } else {
      // InferLayers accepts exactly the types above; reaching here means the two lists diverged.
      return absl::InternalError(
          absl::StrCat("model.layers[", i, "]: type '", info.type, "' has no CPU kernel"));
    }
  }
  return layers;
}

std::vector<Param*> CollectParams(const std::vector<std::unique_ptr<Layer>>& layers) {
  std::vector<Param*> params;
  for (const std::unique_ptr<Layer>& layer : layers) {
    for (Param* p : layer->Params()) params.push_back(p);
  }
  return params;
}

void ZeroGrads(const std::vector<Param*>& params) {
  for (Param* p : params) p->grad.Fill(0.0f);
}

}  // namespace dapple::kernels

#include "kernels/cpu/model.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_info.h"
#include "common/status.h"
#include "kernels/cpu/layer_factory.h"

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
    DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer,
                            MakeCpuLayer(infos[i], model.layers(i), seed));
    layers.push_back(std::move(layer));
  }
  // A tied copy whose owner is in the same range computes with the owner itself: one
  // parameter, into which both layers' gradients accumulate (as in one device's model).
  std::vector<Param*> params = CollectParams(layers);
  for (const std::unique_ptr<Layer>& layer : layers) {
    for (Param* p : layer->Params()) {
      if (p->tied_to.empty()) continue;
      for (Param* owner : params) {
        if (owner->name == p->tied_to && owner->tied_to.empty()) {
          layer->ShareTiedParam(p->name, owner);
        }
      }
    }
  }
  return layers;
}

std::vector<Param*> CollectParams(const std::vector<std::unique_ptr<Layer>>& layers) {
  std::vector<Param*> params;
  for (const std::unique_ptr<Layer>& layer : layers) {
    for (Param* p : layer->Params()) {
      // A shared tied parameter is listed by its owner's layer only.
      if (std::find(params.begin(), params.end(), p) == params.end()) params.push_back(p);
    }
  }
  return params;
}

int FirstLayerWithParams(const std::vector<std::unique_ptr<Layer>>& layers) {
  for (size_t k = 0; k < layers.size(); ++k) {
    if (!layers[k]->Params().empty()) return static_cast<int>(k);
  }
  return static_cast<int>(layers.size());
}

void ZeroGrads(const std::vector<Param*>& params) {
  for (Param* p : params) p->grad.Fill(0.0f);
}

}  // namespace dapple::kernels

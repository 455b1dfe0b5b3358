// global_avgpool: the mean of each channel of a [C, H, W] input over its H x W positions,
// [C, H, W] -> [C] (PyTorch's nn.AdaptiveAvgPool2d(1) followed by flatten): ResNet's head before
// its linear classifier. No parameters; its backward spreads each gradient / (H W) over the
// channel and keeps nothing.
#include "absl/strings/str_cat.h"
#include "common/model/image_layers.h"
#include "common/model/layer_types.h"

namespace dapple::model_types {
namespace {

class GlobalAvgPoolType : public LayerType {
 public:
  absl::string_view name() const override { return "global_avgpool"; }
  absl::string_view example() const override { return "{type: global_avgpool}"; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    absl::StatusOr<Image> in = ImageInput(ctx, name());
    if (!in.ok()) return in.status();
    LayerInfo info;
    info.output_shape = {in->c};
    const double n = static_cast<double>(in->Elements());
    info.forward_flops = n;
    info.backward_flops = n;
    return info;
  }
};

}  // namespace

const LayerType& GlobalAvgPool() {
  static const GlobalAvgPoolType kType;
  return kType;
}

}  // namespace dapple::model_types

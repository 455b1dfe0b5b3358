#include "kernels/cuda/layer_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/layers_internal.h"

namespace dapple::kernels::cuda {
namespace {

struct Entry {
  absl::string_view type;
  internal::LayerFactory make;
  bool fp32_only = false;  // the image layers (cuDNN in fp32)
};

constexpr Entry kFactories[] = {
    {"flatten", internal::MakeFlattenLayer},
    {"linear", internal::MakeLinearLayer},
    {"relu", internal::MakeReluLayer},
    {"gelu", internal::MakeGeluLayer},
    {"dropout", internal::MakeDropoutLayer},
    {"embedding", internal::MakeEmbeddingLayer},
    {"layernorm", internal::MakeLayerNormLayer},
    {"transformer_block", internal::MakeTransformerBlockLayer},
    {"lm_head", internal::MakeLmHeadLayer},
    {"conv2d", internal::MakeConv2dLayer, true},
    {"maxpool2d", internal::MakeMaxPool2dLayer, true},
    {"avgpool2d", internal::MakeAvgPool2dLayer, true},
    {"global_avgpool", internal::MakeGlobalAvgPoolLayer, true},
    {"batchnorm2d", internal::MakeBatchNorm2dLayer, true},
    {"residual_block", internal::MakeResidualBlockLayer, true},
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceLayer>> MakeCudaLayer(const LayerInfo& info,
                                                           const v1::LayerSpec& spec, Dtype dtype) {
  for (const Entry& e : kFactories) {
    if (e.type != info.type) continue;
    if (e.fp32_only && dtype != Dtype::kFp32) {
      return absl::InvalidArgumentError(absl::StrCat("model.layers[", info.index, "]: type '",
                                                     info.type, "' has no ", DtypeName(dtype),
                                                     " CUDA kernel (fp32 only)"));
    }
    return e.make(info, spec, dtype);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model.layers[", info.index, "]: type '", info.type, "' has no CUDA kernel"));
}

}  // namespace dapple::kernels::cuda

#include "kernels/cpu/layer_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/batchnorm2d.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/global_avgpool.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/lm_head.h"
#include "kernels/cpu/pool2d.h"
#include "kernels/cpu/residual_block.h"
#include "kernels/cpu/transformer_block.h"

namespace dapple::kernels {
namespace {

using Factory = std::unique_ptr<Layer> (*)(const LayerInfo& info, const v1::LayerSpec& spec,
                                           uint64_t seed);

std::unique_ptr<Layer> MakeLinear(const LayerInfo& info, const v1::LayerSpec& spec, uint64_t seed) {
  // Weights depend on (seed, global layer index) only, never on the range being built.
  auto linear =
      std::make_unique<LinearLayer>(info.index, info.input_shape[0], info.output_shape[0]);
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

// The GPT layers: dimensions from `info` (common/model's shapes), options from the spec. An
// unset optional field reads as 0 (no dropout); layernorm's eps defaults as PyTorch's.
std::unique_ptr<Layer> MakeDropout(const LayerInfo& info, const v1::LayerSpec& spec, uint64_t) {
  return std::make_unique<DropoutLayer>(info.index, spec.dropout().p());
}

std::unique_ptr<Layer> MakeEmbedding(const LayerInfo& info, const v1::LayerSpec& spec,
                                     uint64_t seed) {
  const std::vector<int64_t>& table = info.params[0].shape;      // [vocab, dim]
  const std::vector<int64_t>& positions = info.params[1].shape;  // [positions, dim]
  auto layer = std::make_unique<EmbeddingLayer>(info.index, table[0], table[1], positions[0],
                                                info.input_shape[0], spec.embedding().dropout());
  layer->InitParams(seed);
  return layer;
}

std::unique_ptr<Layer> MakeLayerNorm(const LayerInfo& info, const v1::LayerSpec& spec, uint64_t) {
  const double eps = spec.layernorm().has_eps() ? spec.layernorm().eps() : kDefaultLayerNormEps;
  return std::make_unique<LayerNormLayer>(info.index, info.input_shape.back(), eps);
}

std::unique_ptr<Layer> MakeTransformerBlock(const LayerInfo& info, const v1::LayerSpec& spec,
                                            uint64_t seed) {
  const v1::TransformerBlockParams& p = spec.transformer_block();
  const int64_t hidden = info.params[TransformerBlockLayer::kFcWeight].shape[0];  // [H, C]
  auto layer = std::make_unique<TransformerBlockLayer>(
      info.index, info.input_shape[0], info.input_shape[1], p.heads(), hidden, p.dropout());
  layer->InitParams(seed);
  return layer;
}

std::unique_ptr<Layer> MakeLmHead(const LayerInfo& info, const v1::LayerSpec& spec, uint64_t seed) {
  const ParamInfo& weight = info.params[0];  // [vocab, C]
  auto layer =
      std::make_unique<LmHeadLayer>(info.index, weight.shape[1], weight.shape[0], weight.tied_to);
  layer->InitParams(seed, info.tied_layer);
  return layer;
}

// The image layers: the input [C, H, W] from `info` (common/model's shapes), keys from the spec
// with their defaults (docs/layers.md; PyTorch's).
std::unique_ptr<Layer> MakeConv2d(const LayerInfo& info, const v1::LayerSpec& spec, uint64_t seed) {
  const v1::Conv2dParams& p = spec.conv2d();
  const std::vector<int64_t>& in = info.input_shape;
  auto layer = std::make_unique<Conv2dLayer>(info.index, in[0], in[1], in[2], p.out_channels(),
                                             p.kernel(), p.has_stride() ? p.stride() : 1,
                                             p.padding(), p.has_bias() ? p.bias() : true);
  layer->InitParams(seed);
  return layer;
}

std::unique_ptr<Layer> MakePool(const LayerInfo& info, const v1::Pool2dParams& p, PoolKind kind) {
  const std::vector<int64_t>& in = info.input_shape;
  return std::make_unique<Pool2dLayer>(info.index, kind, in[0], in[1], in[2], p.kernel(),
                                       p.has_stride() ? p.stride() : p.kernel(), p.padding());
}
std::unique_ptr<Layer> MakeMaxPool2d(const LayerInfo& info, const v1::LayerSpec& spec, uint64_t) {
  return MakePool(info, spec.maxpool2d(), PoolKind::kMax);
}
std::unique_ptr<Layer> MakeAvgPool2d(const LayerInfo& info, const v1::LayerSpec& spec, uint64_t) {
  return MakePool(info, spec.avgpool2d(), PoolKind::kAverage);
}

std::unique_ptr<Layer> MakeGlobalAvgPool(const LayerInfo& info, const v1::LayerSpec&, uint64_t) {
  const std::vector<int64_t>& in = info.input_shape;
  return std::make_unique<GlobalAvgPoolLayer>(info.index, in[0], in[1], in[2]);
}

std::unique_ptr<Layer> MakeBatchNorm2d(const LayerInfo& info, const v1::LayerSpec& spec, uint64_t) {
  const v1::BatchNorm2dParams& p = spec.batchnorm2d();
  const std::vector<int64_t>& in = info.input_shape;
  return std::make_unique<BatchNorm2dLayer>(
      info.index, in[0], in[1], in[2], p.has_eps() ? p.eps() : kDefaultBatchNormEps,
      p.has_momentum() ? p.momentum() : kDefaultBatchNormMomentum);
}

std::unique_ptr<Layer> MakeResidualBlock(const LayerInfo& info, const v1::LayerSpec& spec,
                                         uint64_t seed) {
  const v1::ResidualBlockParams& p = spec.residual_block();
  const std::vector<int64_t>& in = info.input_shape;
  auto layer = std::make_unique<ResidualBlockLayer>(
      info.index, in[0], in[1], in[2], p.out_channels(), p.has_stride() ? p.stride() : 1,
      kDefaultBatchNormEps, kDefaultBatchNormMomentum);
  layer->InitParams(seed);
  return layer;
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
    {"dropout", MakeDropout},
    {"embedding", MakeEmbedding},
    {"layernorm", MakeLayerNorm},
    {"transformer_block", MakeTransformerBlock},
    {"lm_head", MakeLmHead},
    {"conv2d", MakeConv2d},
    {"maxpool2d", MakeMaxPool2d},
    {"avgpool2d", MakeAvgPool2d},
    {"global_avgpool", MakeGlobalAvgPool},
    {"batchnorm2d", MakeBatchNorm2d},
    {"residual_block", MakeResidualBlock},
};

}  // namespace

std::vector<std::string> CpuKernelTypes() {
  std::vector<std::string> types;
  for (const Entry& e : kFactories) types.emplace_back(e.type);
  return types;
}

absl::StatusOr<std::unique_ptr<Layer>> MakeCpuLayer(const LayerInfo& info,
                                                    const v1::LayerSpec& spec, uint64_t seed) {
  for (const Entry& e : kFactories) {
    if (e.type == info.type) return e.make(info, spec, seed);
  }
  return absl::InternalError(
      absl::StrCat("model.layers[", info.index, "]: type '", info.type, "' has no CPU kernel"));
}

}  // namespace dapple::kernels

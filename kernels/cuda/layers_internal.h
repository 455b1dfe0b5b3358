// Internal to kernels/cuda (the layer table of layer_factory.cc and its tests): one factory per
// layer type, each building the type's DeviceLayer for `dtype` from its declaration (`info`,
// from common/model) and spec, as kernels/cpu/layer_factory.cc's do for the CPU layers.
#ifndef DAPPLE_KERNELS_CUDA_LAYERS_INTERNAL_H_
#define DAPPLE_KERNELS_CUDA_LAYERS_INTERNAL_H_

#include <memory>

#include "common/model/layer_type.h"
#include "dapple/v1/job.pb.h"
#include "kernels/cuda/layer.h"

namespace dapple::kernels::cuda::internal {

using LayerFactory = std::unique_ptr<DeviceLayer> (*)(const LayerInfo& info,
                                                      const v1::LayerSpec& spec, Dtype dtype);

// elementwise_layers.cc
std::unique_ptr<DeviceLayer> MakeReluLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                           Dtype dtype);
std::unique_ptr<DeviceLayer> MakeGeluLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                           Dtype dtype);
std::unique_ptr<DeviceLayer> MakeFlattenLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                              Dtype dtype);
std::unique_ptr<DeviceLayer> MakeDropoutLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                              Dtype dtype);
// dense_layers.cc
std::unique_ptr<DeviceLayer> MakeLinearLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                             Dtype dtype);
std::unique_ptr<DeviceLayer> MakeLmHeadLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                             Dtype dtype);
// layernorm_layer.cc
std::unique_ptr<DeviceLayer> MakeLayerNormLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                Dtype dtype);
// embedding_layer.cc
std::unique_ptr<DeviceLayer> MakeEmbeddingLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                Dtype dtype);
// transformer_block_layer.cc
std::unique_ptr<DeviceLayer> MakeTransformerBlockLayer(const LayerInfo& info,
                                                       const v1::LayerSpec& spec, Dtype dtype);

// The image layers (fp32 only: the factory refuses bf16 for them).
// conv2d_layer.cc
std::unique_ptr<DeviceLayer> MakeConv2dLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                             Dtype dtype);
// pool2d_layer.cc
std::unique_ptr<DeviceLayer> MakeMaxPool2dLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                Dtype dtype);
std::unique_ptr<DeviceLayer> MakeAvgPool2dLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                Dtype dtype);
std::unique_ptr<DeviceLayer> MakeGlobalAvgPoolLayer(const LayerInfo& info,
                                                    const v1::LayerSpec& spec, Dtype dtype);
// batchnorm2d_layer.cc
std::unique_ptr<DeviceLayer> MakeBatchNorm2dLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                  Dtype dtype);
// residual_block_layer.cc
std::unique_ptr<DeviceLayer> MakeResidualBlockLayer(const LayerInfo& info,
                                                    const v1::LayerSpec& spec, Dtype dtype);

}  // namespace dapple::kernels::cuda::internal

#endif  // DAPPLE_KERNELS_CUDA_LAYERS_INTERNAL_H_

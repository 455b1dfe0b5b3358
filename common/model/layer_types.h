// The built-in layer types, one accessor per file of common/model/ (the table in
// layer_registry.cc lists them). Internal to common/model: callers use layer_registry.h.
#ifndef DAPPLE_COMMON_MODEL_LAYER_TYPES_H_
#define DAPPLE_COMMON_MODEL_LAYER_TYPES_H_

#include "common/model/layer_type.h"

namespace dapple::model_types {

const LayerType& Flatten();           // activations.cc
const LayerType& Relu();              // activations.cc
const LayerType& Gelu();              // activations.cc
const LayerType& Linear();            // linear.cc
const LayerType& Embedding();         // embedding.cc
const LayerType& TransformerBlock();  // transformer_block.cc
const LayerType& LayerNorm();         // layernorm.cc
const LayerType& LmHead();            // lm_head.cc
const LayerType& Dropout();           // dropout.cc
const LayerType& Conv2d();            // conv2d.cc
const LayerType& MaxPool2d();         // pool2d.cc
const LayerType& AvgPool2d();         // pool2d.cc
const LayerType& GlobalAvgPool();     // global_avgpool.cc
const LayerType& BatchNorm2d();       // batchnorm2d.cc
const LayerType& ResidualBlock();     // residual_block.cc

}  // namespace dapple::model_types

#endif  // DAPPLE_COMMON_MODEL_LAYER_TYPES_H_

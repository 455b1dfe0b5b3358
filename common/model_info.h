// Shape inference and cost estimates for the built-in layers of a ModelSpec. Pure functions;
// used by validation, the planner and the kernels' model builder.
#ifndef DAPPLE_COMMON_MODEL_INFO_H_
#define DAPPLE_COMMON_MODEL_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"

namespace dapple {

struct LayerInfo {
  int index = 0;                      // position in ModelSpec.layers
  std::string type;                   // flatten | linear | relu | gelu
  std::vector<int64_t> input_shape;   // per sample, without the batch dimension
  std::vector<int64_t> output_shape;  // per sample
  int64_t param_count = 0;            // floats (linear: in * out + out)
  double forward_flops = 0;           // per sample (linear: 2 * in * out)
  double backward_flops = 0;          // per sample (linear: 4 * in * out)
  int64_t output_bytes = 0;           // per sample, fp32
};

// Walks the layers from model.input_shape. kInvalidArgument naming the layer
// ("model.layers[3]: unknown layer type 'conv9'; known: flatten, linear, relu, gelu",
// "model.layers[1] (linear) needs a flat input, got [1, 28, 28]: add a flatten layer before it",
// "model.layers[2].out 0 must be > 0", an empty model or input shape).
absl::StatusOr<std::vector<LayerInfo>> InferLayers(const v1::ModelSpec& model);

// Product of the dims; 1 for an empty shape.
int64_t NumElements(const std::vector<int64_t>& shape);

}  // namespace dapple

#endif  // DAPPLE_COMMON_MODEL_INFO_H_

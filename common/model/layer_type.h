// One layer type of the model, declared once (design.md, "Models, data and losses"; adding a
// type: docs/layers.md). A LayerType says what a layer of its type is, from its spec alone:
// the keys it takes (the fields of its parameter message in job.proto, LayerSpec.params), the
// rules they obey, its output shape, its parameters, and what it costs (FLOPs and activation
// memory per sample). Everything else asks it: the job spec parser (keys), validation, shape
// inference (common/model_info.h InferLayers), the planner's estimated profile and memory model,
// the checkpoints (parameter names) and the kernels' model builders (kernels/cpu/layer_factory.h,
// kernels/cuda), which look up the same type name.
//
// Thread safety: LayerType objects are immutable singletons; every method is a pure function.
#ifndef DAPPLE_COMMON_MODEL_LAYER_TYPE_H_
#define DAPPLE_COMMON_MODEL_LAYER_TYPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/job.pb.h"

namespace dapple {

// One parameter tensor of a layer.
struct ParamInfo {
  // Within the layer: "weight", "bias", "token_embedding", "ln1.weight". The checkpoint and
  // parameter name is "layer<i>.<name>" (ParamName).
  std::string name;
  std::vector<int64_t> shape;
  // A tied copy: the full name of the parameter it copies ("layer0.token_embedding"), whose
  // layer is `LayerInfo::tied_layer`. Copies start equal to it, get their gradients summed with
  // it every step, and are counted once by the gradient norm and checkpoints. Empty: its own.
  std::string tied_to;
};

// "layer3.weight".
std::string ParamName(int layer_index, absl::string_view name);

// What one layer of a model is (per sample: shapes exclude the batch dimension).
struct LayerInfo {
  int index = 0;                      // position in ModelSpec.layers
  std::string type;                   // the LayerType's name
  std::vector<int64_t> input_shape;   // per sample
  std::vector<int64_t> output_shape;  // per sample
  bool token_input = false;           // the input holds token ids (an embedding's)
  std::vector<ParamInfo> params;      // in the order the kernels list them
  int64_t param_count = 0;            // floats over `params`, tied copies included
  // Non-trainable state the layer keeps across steps and checkpoints with its parameters (a
  // batch norm's running statistics), named and shaped like parameters (tied_to empty), in the
  // order the kernels list them; no gradient, no optimizer state.
  std::vector<ParamInfo> buffers;
  int64_t buffer_count = 0;  // floats over `buffers`
  double forward_flops = 0;  // per sample
  // Per sample: the input gradient plus the weight gradient (kernels/cpu/layer.h BackwardInput
  // and BackwardWeight); backward_weight_flops is the weight gradient's part of it.
  double backward_flops = 0;
  double backward_weight_flops = 0;
  // Per sample, fp32: the output, and what the layer keeps from its forward for its backward
  // beyond its input and output (attention probabilities, normalised inputs, dropout masks).
  // A micro-batch in flight holds input + output_bytes + saved_bytes of every layer.
  int64_t output_bytes = 0;
  int64_t saved_bytes = 0;
  int tied_layer = -1;  // the layer whose parameter a tied copy in `params` copies, or -1
  // The values per channel of one sample that the layer's batch norms normalise over (H x W of
  // the image they see; the smallest of its norms), so a replica computing n rows of a
  // micro-batch normalises over n x this many; 0 when the layer normalises nothing over the
  // batch (model_info.h BatchNormOverOneValue).
  int64_t batch_norm_values_per_sample = 0;
};

// Where a layer sits, for its type's Infer.
struct InferContext {
  const v1::ModelSpec* model = nullptr;
  int index = 0;
  std::string path;                  // "model.layers[3]": every message starts with it
  std::vector<int64_t> input_shape;  // per sample
  bool token_input = false;          // the input holds token ids (model.input_type tokens)
  std::string input_from;            // "model.input_shape", "model.layers[2] (flatten)"
  const std::vector<LayerInfo>* earlier = nullptr;  // the layers before this one, in order
};

class LayerType {
 public:
  virtual ~LayerType() = default;
  // The spec's `type` ("transformer_block"); also the name of its parameter message's field in
  // LayerSpec.params (none for a type without parameters).
  virtual absl::string_view name() const = 0;
  // A minimal spec of this type for messages and docs: "{type: linear, out: 10}".
  virtual absl::string_view example() const = 0;
  // Checks `spec` (whose params are this type's, or unset) at `ctx` and describes the layer:
  // every field of LayerInfo but `index` and `type`, which the caller fills. Errors are
  // kInvalidArgument, one line starting with ctx.path and naming the key, its value and the
  // rule ("model.layers[3].heads 5 does not divide the width 128 of its input [64, 128]"), or
  // both shapes when the input does not fit ("model.layers[2] (transformer_block) needs a
  // [T, C] input, got [784] from model.layers[1] (flatten)").
  virtual absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                          const InferContext& ctx) const = 0;
};

// A kInvalidArgument error whose message is `ctx.path` + `suffix` (the suffix starts with
// ".key ..." or " ..."): the form every Infer uses, so the parser can point at the key.
absl::Status LayerError(const InferContext& ctx, absl::string_view suffix);

// "[64, 128]".
std::string ShapeText(const std::vector<int64_t>& shape);

// Product of the dims; 1 for an empty shape.
int64_t NumElements(const std::vector<int64_t>& shape);

}  // namespace dapple

#endif  // DAPPLE_COMMON_MODEL_LAYER_TYPE_H_

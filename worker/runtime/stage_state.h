// What a checkpoint holds of one stage (StageBackend::ExportState / ImportState; the shard
// format is proto/dapple/v1/checkpoint.proto): its parameters, its optimizer state and the
// number of updates applied, as named fp32 host tensors.
//
// Names use GLOBAL layer indices, so a tensor means the same thing under any pipeline layout:
//   parameters        "layer<i>.weight" [out, in], "layer<i>.bias" [out]
//   buffers           non-trainable layer state (kernels::Layer::Buffers), named like
//                     parameters: "layer<i>.running_mean" [C], "layer<i>.bn1.running_var" [C]
//   optimizer state   "<param name>.<state>": "momentum" (sgd's velocity buffer),
//                     "adam_m" / "adam_v" (adamw's first and second moments); same shape as the
//                     parameter.
// A tied weight is counted once: a tied copy (kernels::Param::tied_to, an lm_head tied to the
// embedding on another stage) is not exported, and a stage holding one imports the owner's
// tensors ("layer0.token_embedding", "layer0.token_embedding.momentum") into it: the copies are
// bitwise equal, their optimizer state too (the same gradients every step).
#ifndef DAPPLE_WORKER_RUNTIME_STAGE_STATE_H_
#define DAPPLE_WORKER_RUNTIME_STAGE_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/layer.h"

namespace dapple::worker {

// A named fp32 tensor on the host, row-major.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // prod(shape) values
};

struct StageState {
  std::vector<NamedTensor> params;           // in the stage's parameter order
  std::vector<NamedTensor> buffers;          // in the stage's buffer order (HostBuffers)
  std::vector<NamedTensor> optimizer_state;  // for each state name, every parameter's
  int64_t optimizer_steps = 0;               // updates applied (AdamW's bias correction)
};

// The optimizer state names of an optimizer type: {"momentum"} for sgd, {"adam_m", "adam_v"}
// for adamw; empty for another type.
std::vector<std::string> OptimizerStateNames(const std::string& optimizer_type);

// "layer3.weight" -> 3 (also for "layer3.weight.momentum"); -1 when `name` has another form.
int LayerOfTensor(const std::string& name);

// The name `param`'s tensors have in a checkpoint: its owner's for a tied copy, else its own.
const std::string& CheckpointName(const kernels::Param& param);

// For an importer: the tensor named `name` among `tensors`, which must have `shape`.
// kInvalidArgument "checkpoint has no tensor layer3.weight.momentum" / "checkpoint tensor
// layer3.weight has shape [32, 784], the stage needs [64, 784]" / "... has 10 values for shape
// [64, 784]".
absl::StatusOr<const NamedTensor*> FindTensor(const std::vector<NamedTensor>& tensors,
                                              const std::string& name,
                                              const std::vector<int64_t>& shape);

// Every tensor of `tensors` must be one of `expected` names (an import takes exactly the
// stage's tensors). kInvalidArgument "checkpoint tensor layer7.weight is not a tensor of this
// stage".
absl::Status CheckNoExtraTensors(const std::vector<NamedTensor>& tensors,
                                 const std::vector<std::string>& expected);

// An import's checkpoint tensors matched to a stage, checked before anything changes (so a
// refused import leaves the stage as it was): params[i] belongs to stage_params[i], and
// optimizer_state[k][i] is "<stage_params[i]->name>.<state_names[k]>", buffers[j] belongs to
// stage_buffers[j]. The pointers point into the StageState passed to MatchStageState.
struct MatchedStageState {
  std::vector<const NamedTensor*> params;
  std::vector<const NamedTensor*> buffers;
  std::vector<std::vector<const NamedTensor*>> optimizer_state;  // [state name][parameter]
};

// Every backend's ImportState check: the state holds exactly the stage's parameters (by
// CheckpointName), exactly its buffers (`stage_buffers`, by name) and, for each of
// `state_names` (OptimizerStateNames), exactly one tensor per parameter, each of its
// parameter's (buffer's) shape, and optimizer_steps >= 0. Errors (kInvalidArgument): FindTensor's
// and CheckNoExtraTensors' messages (parameters first, then buffers, then optimizer state),
// "checkpoint optimizer_steps -1 must be >= 0".
absl::StatusOr<MatchedStageState> MatchStageState(const StageState& state,
                                                  const std::vector<kernels::Param*>& stage_params,
                                                  const std::vector<kernels::Param*>& stage_buffers,
                                                  const std::vector<std::string>& state_names);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_STAGE_STATE_H_

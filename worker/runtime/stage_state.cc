#include "worker/runtime/stage_state.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/tensor.h"

namespace dapple::worker {

std::vector<std::string> OptimizerStateNames(const std::string& optimizer_type) {
  if (optimizer_type == "sgd") return {"momentum"};
  if (optimizer_type == "adamw") return {"adam_m", "adam_v"};
  return {};
}

int LayerOfTensor(const std::string& name) {
  constexpr absl::string_view kPrefix = "layer";
  if (!absl::StartsWith(name, kPrefix)) return -1;
  const size_t dot = name.find('.');
  if (dot == std::string::npos || dot == kPrefix.size()) return -1;
  int layer = -1;
  if (!absl::SimpleAtoi(absl::string_view(name).substr(kPrefix.size(), dot - kPrefix.size()),
                        &layer) ||
      layer < 0) {
    return -1;
  }
  return layer;
}

const std::string& CheckpointName(const kernels::Param& param) {
  return param.tied_to.empty() ? param.name : param.tied_to;
}

absl::StatusOr<const NamedTensor*> FindTensor(const std::vector<NamedTensor>& tensors,
                                              const std::string& name,
                                              const std::vector<int64_t>& shape) {
  for (const NamedTensor& t : tensors) {
    if (t.name != name) continue;
    if (t.shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint tensor ", name, " has shape ", kernels::ShapeToString(t.shape),
                       ", the stage needs ", kernels::ShapeToString(shape)));
    }
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (static_cast<int64_t>(t.data.size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint tensor ", name, " has ",
                                                     t.data.size(), " values for shape ",
                                                     kernels::ShapeToString(shape)));
    }
    return &t;
  }
  return absl::InvalidArgumentError(absl::StrCat("checkpoint has no tensor ", name));
}

absl::Status CheckNoExtraTensors(const std::vector<NamedTensor>& tensors,
                                 const std::vector<std::string>& expected) {
  for (const NamedTensor& t : tensors) {
    if (std::find(expected.begin(), expected.end(), t.name) == expected.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint tensor ", t.name, " is not a tensor of this stage"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<MatchedStageState> MatchStageState(const StageState& state,
                                                  const std::vector<kernels::Param*>& stage_params,
                                                  const std::vector<kernels::Param*>& stage_buffers,
                                                  const std::vector<std::string>& state_names) {
  MatchedStageState out;
  std::vector<std::string> param_names;
  for (const kernels::Param* p : stage_params) {
    DAPPLE_ASSIGN_OR_RETURN(const NamedTensor* t,
                            FindTensor(state.params, CheckpointName(*p), p->value.shape));
    out.params.push_back(t);
    param_names.push_back(CheckpointName(*p));
  }
  DAPPLE_RETURN_IF_ERROR(CheckNoExtraTensors(state.params, param_names));
  std::vector<std::string> buffer_names;
  for (const kernels::Param* b : stage_buffers) {
    DAPPLE_ASSIGN_OR_RETURN(const NamedTensor* t,
                            FindTensor(state.buffers, b->name, b->value.shape));
    out.buffers.push_back(t);
    buffer_names.push_back(b->name);
  }
  DAPPLE_RETURN_IF_ERROR(CheckNoExtraTensors(state.buffers, buffer_names));
  out.optimizer_state.resize(state_names.size());
  std::vector<std::string> names;
  for (size_t k = 0; k < state_names.size(); ++k) {
    for (const kernels::Param* p : stage_params) {
      const std::string name = absl::StrCat(CheckpointName(*p), ".", state_names[k]);
      DAPPLE_ASSIGN_OR_RETURN(const NamedTensor* t,
                              FindTensor(state.optimizer_state, name, p->value.shape));
      out.optimizer_state[k].push_back(t);
      names.push_back(name);
    }
  }
  DAPPLE_RETURN_IF_ERROR(CheckNoExtraTensors(state.optimizer_state, names));
  if (state.optimizer_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint optimizer_steps ", state.optimizer_steps, " must be >= 0"));
  }
  return out;
}

}  // namespace dapple::worker

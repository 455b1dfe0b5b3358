#include "coordinator/planner/stage_memory.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/profile/cluster_topology.h"
#include "common/profile/format_bytes.h"

namespace dapple::coordinator {

namespace {

memory::ReplicaMemory PredictAs(const PlanningProblem& problem, const HybridPlan& plan, int s,
                                const ActivationMemory& activations,
                                schedule::ScheduleKind schedule, bool recompute) {
  const profile::ChainProfile& profile = problem.profile;
  const StagePlan& stage = plan.stages[static_cast<size_t>(s)];
  memory::ReplicaPlace place;
  place.schedule = schedule;
  place.stage = s;
  place.micro_batches = plan.micro_batches;
  place.vertical_sync = problem.vertical_sync;
  place.recompute = recompute;
  for (const StagePlan& st : plan.stages) {
    place.replicas.push_back(static_cast<int>(st.devices.size()));
  }
  const double rows = memory::ReplicaRows(place, static_cast<double>(plan.micro_batch_size));
  const double scale = rows / static_cast<double>(profile.batch_size);
  memory::StageSizes sizes;
  for (int l = stage.first_layer; l <= stage.last_layer; ++l) {
    sizes.parameter_bytes += static_cast<double>(profile.parameter_bytes[l]);
  }
  sizes.optimizer_state_copies = problem.optimizer_state_factor;
  sizes.activation_bytes = activations.PerMicroBatch(stage.first_layer, stage.last_layer, rows);
  sizes.input_bytes = activations.InputBytes(stage.first_layer) * scale;
  // What crosses the cut after the stage; the last stage's output (its logits) otherwise.
  sizes.output_bytes = static_cast<double>(stage.last_layer + 1 < profile.num_layers()
                                               ? profile.cut_bytes[stage.last_layer]
                                               : profile.activation_bytes[stage.last_layer]) *
                       scale;
  // The first stage's backward stops at its first layer with parameters (no input gradient).
  int from = stage.first_layer;
  while (s == 0 && from <= stage.last_layer && profile.parameter_bytes[from] == 0) ++from;
  for (int l = from; l < stage.last_layer; ++l) {
    sizes.inner_output_bytes.push_back(static_cast<double>(profile.activation_bytes[l]) * scale);
  }
  return memory::PredictReplicaMemory(place, sizes);
}

}  // namespace

bool StageRecomputes(const PlanningProblem& problem, const HybridPlan& plan, int s,
                     const ActivationMemory& activations, schedule::ScheduleKind schedule) {
  switch (problem.recompute) {
    case RecomputeMode::kNone:
      return plan.stages[static_cast<size_t>(s)].recompute;
    case RecomputeMode::kAll:
      return true;
    case RecomputeMode::kAuto:
      break;
  }
  const int64_t peak =
      PredictAs(problem, plan, s, activations, schedule, /*recompute=*/false).PeakBytes();
  for (int d : plan.stages[static_cast<size_t>(s)].devices) {
    if (peak > profile::DeviceMemoryBytes(problem.topology, d)) return true;
  }
  return false;
}

HybridPlan WithRecompute(const PlanningProblem& problem, HybridPlan plan,
                         schedule::ScheduleKind schedule) {
  const ActivationMemory activations(problem.profile);
  std::vector<bool> chosen(plan.stages.size());
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    chosen[s] = StageRecomputes(problem, plan, static_cast<int>(s), activations, schedule);
  }
  for (size_t s = 0; s < plan.stages.size(); ++s) plan.stages[s].recompute = chosen[s];
  return plan;
}

memory::ReplicaMemory PredictStageMemory(const PlanningProblem& problem, const HybridPlan& plan,
                                         int s, const ActivationMemory& activations,
                                         schedule::ScheduleKind schedule) {
  return PredictAs(problem, plan, s, activations, schedule,
                   StageRecomputes(problem, plan, s, activations, schedule));
}

std::string StageMemoryParts(const StagePrediction& stage) {
  std::string out = absl::StrCat("weights ", profile::FormatBytes(stage.weight_bytes),
                                 ", activations ", profile::FormatBytes(stage.activation_bytes));
  if (stage.buffer_bytes > 0) {
    absl::StrAppend(&out, ", buffers ", profile::FormatBytes(stage.buffer_bytes));
  }
  return out;
}

}  // namespace dapple::coordinator

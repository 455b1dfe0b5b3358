#include "coordinator/planner/stage_memory.h"

#include <string>
#include <utility>
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
  // The rank's layer ranges: its chunks under interleaved 1F1B (chunk c is virtual stage
  // c * P + s), else its one range. Under interleaved each chunk's sizes are its own
  // (memory_model.h StageSizes.chunks), as the worker runtime computes them
  // (worker/runtime/stage_runtime_create.cc).
  std::vector<std::pair<int, int>> ranges;
  for (const v1::StageRange& c : stage.chunks) ranges.emplace_back(c.first_layer(), c.last_layer());
  if (ranges.empty()) ranges.emplace_back(stage.first_layer, stage.last_layer);
  const int v = static_cast<int>(ranges.size());
  place.chunks = v;
  memory::StageSizes sizes;
  sizes.optimizer_state_copies = problem.optimizer_state_factor;
  for (int c = 0; c < v; ++c) {
    const auto [first, last] = ranges[static_cast<size_t>(c)];
    for (int l = first; l <= last; ++l) {
      sizes.parameter_bytes += static_cast<double>(profile.parameter_bytes[l]);
    }
    memory::ChunkSizes chunk;
    chunk.activation_bytes = activations.PerMicroBatch(first, last, rows);
    chunk.input_bytes = activations.InputBytes(first) * scale;
    // What crosses the cut after the range; the model's last layer's output (its logits)
    // otherwise.
    chunk.output_bytes =
        static_cast<double>(last + 1 < profile.num_layers() ? profile.cut_bytes[last]
                                                            : profile.activation_bytes[last]) *
        scale;
    // The first stage's backward stops at its first layer with parameters (no input gradient).
    int from = first;
    while (s == 0 && c == 0 && from <= last && profile.parameter_bytes[from] == 0) ++from;
    for (int l = from; l < last; ++l) {
      chunk.inner_output_bytes.push_back(static_cast<double>(profile.activation_bytes[l]) * scale);
    }
    memory::AddChunkSizes(std::move(chunk), v, &sizes);
  }
  const int last = ranges.back().second;
  const double output_per_sample =
      static_cast<double>(last + 1 < profile.num_layers() ? profile.cut_bytes[last]
                                                          : profile.activation_bytes[last]) /
      static_cast<double>(profile.batch_size);
  place.evaluates_between_steps = problem.evaluates_between_steps;
  sizes.eval_piece_output_bytes = output_per_sample * static_cast<double>(problem.eval_piece_rows);
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

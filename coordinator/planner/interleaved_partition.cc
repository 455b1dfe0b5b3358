#include "coordinator/planner/interleaved_partition.h"

#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/partition.h"

namespace dapple::coordinator {

absl::StatusOr<std::vector<std::vector<v1::StageRange>>> PartitionInterleaved(
    const std::vector<double>& layer_costs, int num_stages, int chunks) {
  if (num_stages < 1 || chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("interleaved partition needs P >= 1 and v >= 1, got P = ", num_stages,
                     " and v = ", chunks));
  }
  // One balanced cut over all P * v virtual stages: balancing each rank's total instead would
  // leave the virtual stages uneven, and the interleaved schedule waits on the slowest of them
  // at every hop.
  absl::StatusOr<std::vector<v1::StageRange>> virtual_stages =
      PartitionBalanced(layer_costs, num_stages * chunks);
  if (!virtual_stages.ok()) return virtual_stages.status();
  std::vector<std::vector<v1::StageRange>> result(static_cast<size_t>(num_stages));
  for (int c = 0; c < chunks; ++c) {
    for (int r = 0; r < num_stages; ++r) {
      result[static_cast<size_t>(r)].push_back(
          (*virtual_stages)[static_cast<size_t>(c * num_stages + r)]);
    }
  }
  return result;
}

absl::Status SetStageChunks(const std::vector<std::vector<v1::StageRange>>& chunks,
                            v1::ParallelPlanSummary* summary) {
  if (static_cast<int>(chunks.size()) != summary->stages_size()) {
    return absl::InvalidArgumentError(absl::StrCat("interleaved chunks for ", chunks.size(),
                                                   " ranks, but the plan has ",
                                                   summary->stages_size(), " stages"));
  }
  for (size_t r = 0; r < chunks.size(); ++r) {
    if (chunks[r].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("interleaved rank ", r, " has no chunk"));
    }
  }
  for (size_t r = 0; r < chunks.size(); ++r) {
    v1::PlanStageSummary* stage = summary->mutable_stages(static_cast<int>(r));
    stage->set_first_layer(chunks[r].front().first_layer());
    stage->set_last_layer(chunks[r].front().last_layer());
    stage->clear_chunks();
    for (const v1::StageRange& range : chunks[r]) *stage->add_chunks() = range;
  }
  return absl::OkStatus();
}

int ChunksOf(const HybridPlan& plan) {
  if (plan.stages.empty() || plan.stages.front().chunks.empty()) return 1;
  return static_cast<int>(plan.stages.front().chunks.size());
}

std::vector<VirtualStage> VirtualStagesOf(const HybridPlan& plan) {
  const int p = static_cast<int>(plan.stages.size());
  const int v = ChunksOf(plan);
  std::vector<VirtualStage> out;
  out.reserve(static_cast<size_t>(p) * v);
  for (int k = 0; k < p * v; ++k) {
    const StagePlan& stage = plan.stages[static_cast<size_t>(k % p)];
    VirtualStage vs;
    vs.rank = k % p;
    if (v == 1 && stage.chunks.empty()) {
      vs.first_layer = stage.first_layer;
      vs.last_layer = stage.last_layer;
    } else {
      const v1::StageRange& range = stage.chunks[static_cast<size_t>(k / p)];
      vs.first_layer = range.first_layer();
      vs.last_layer = range.last_layer();
    }
    out.push_back(vs);
  }
  return out;
}

absl::StatusOr<HybridPlan> InterleavedPlan(const PlanningProblem& problem, int replicas,
                                           const std::string& planner) {
  const profile::ChainProfile& profile = problem.profile;
  if (replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("interleaved plan needs at least 1 replica per stage, got ", replicas));
  }
  if (problem.micro_batch_size <= 0 || problem.global_batch % problem.micro_batch_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("interleaved plan needs a micro_batch_size ", "that divides global_batch ",
                     problem.global_batch, ", got ", problem.micro_batch_size));
  }
  // The schedule waits on the slowest virtual stage at every hop: balance compute, forward and
  // backward together (the profile's per-layer times at its batch size scale alike).
  std::vector<double> costs(profile.forward_ms.size());
  for (size_t l = 0; l < costs.size(); ++l) {
    costs[l] =
        profile.forward_ms[l] + (l < profile.backward_ms.size() ? profile.backward_ms[l] : 0);
  }
  absl::StatusOr<std::vector<std::vector<v1::StageRange>>> chunks =
      PartitionInterleaved(costs, problem.num_stages, problem.interleave);
  if (!chunks.ok()) return chunks.status();
  HybridPlan plan;
  plan.planner = planner;
  plan.micro_batch_size = problem.micro_batch_size;
  plan.micro_batches = static_cast<int>(problem.global_batch / problem.micro_batch_size);
  int device = 0;
  for (std::vector<v1::StageRange>& rank : *chunks) {
    StagePlan stage;
    stage.first_layer = rank.front().first_layer();
    stage.last_layer = rank.front().last_layer();
    stage.chunks = std::move(rank);
    for (int r = 0; r < replicas; ++r) stage.devices.push_back(device++);
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

}  // namespace dapple::coordinator

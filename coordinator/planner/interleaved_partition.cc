#include "coordinator/planner/interleaved_partition.h"

#include <cstddef>

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

}  // namespace dapple::coordinator

#include "common/schedule/ranks.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace dapple::schedule {

int StageReplicas(const v1::ParallelPlanSummary& plan, int stage) {
  if (stage < 0 || stage >= plan.stages_size()) return 1;
  return std::max(1, plan.stages(stage).replicas());
}

int RankIndex(const v1::ParallelPlanSummary& plan, int stage, int replica) {
  int index = 0;
  for (int s = 0; s < stage; ++s) index += StageReplicas(plan, s);
  return index + replica;
}

int NumRanks(const v1::ParallelPlanSummary& plan) { return RankIndex(plan, plan.stages_size(), 0); }

std::string RankName(int stage, int replica, int replicas) {
  return replicas > 1 ? absl::StrCat("stage ", stage, " replica ", replica)
                      : absl::StrCat("stage ", stage);
}

std::vector<v1::StageRange> StageChunks(const v1::ParallelPlanSummary& plan, int stage) {
  const v1::PlanStageSummary& st = plan.stages(stage);
  if (st.chunks_size() > 0) return {st.chunks().begin(), st.chunks().end()};
  v1::StageRange range;
  range.set_first_layer(st.first_layer());
  range.set_last_layer(st.last_layer());
  return {range};
}

RowRange SplitRows(int64_t rows, int replicas, int replica) {
  const int64_t base = rows / replicas;
  const int64_t extra = rows % replicas;
  RowRange r;
  r.begin = replica * base + std::min<int64_t>(replica, extra);
  r.end = r.begin + base + (replica < extra ? 1 : 0);
  return r;
}

RowRange RowOverlap(RowRange a, RowRange b) {
  return RowRange{std::max(a.begin, b.begin), std::min(a.end, b.end)};
}

RowRange ReplicaRows(int64_t micro_batch, int replicas, int replica, bool whole_micro_batches) {
  return whole_micro_batches ? RowRange{0, micro_batch} : SplitRows(micro_batch, replicas, replica);
}

std::vector<RowRange> StepRowGroups(int64_t global_batch, int64_t micro_batch, int replicas,
                                    bool whole_micro_batches) {
  std::vector<RowRange> groups;
  const int shares = whole_micro_batches ? 1 : replicas;
  for (int64_t begin = 0; begin < global_batch; begin += micro_batch) {
    for (int r = 0; r < shares; ++r) {
      const RowRange rows = ReplicaRows(micro_batch, replicas, r, whole_micro_batches);
      if (rows.size() > 0) groups.push_back({begin + rows.begin, begin + rows.end});
    }
  }
  return groups;
}

std::vector<int> NeighbourStages(const v1::ParallelPlanSummary& plan, int stage) {
  const int p = plan.stages_size();
  const bool wrap = p > 1 && StageChunks(plan, stage).size() > 1;
  std::vector<int> out;
  for (int other : {stage - 1, stage + 1}) {
    if (wrap) other = (other + p) % p;
    if (other < 0 || other >= p || other == stage) continue;
    if (std::find(out.begin(), out.end(), other) == out.end()) out.push_back(other);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace dapple::schedule

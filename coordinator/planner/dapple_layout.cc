#include "coordinator/planner/dapple_layout.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/baseline_planners.h"

namespace dapple::coordinator::dapple_search {

HybridPlan ToPlan(const Layout& layout, int64_t micro_batch_size, int64_t global_batch) {
  HybridPlan plan;
  plan.planner = "dapple";
  plan.placement_policy = std::string(PlacementPolicyName(layout.policy));
  for (size_t s = 0; s < layout.ranges.size(); ++s) {
    StagePlan st;
    st.first_layer = layout.ranges[s].first;
    st.last_layer = layout.ranges[s].second;
    st.devices = layout.devices[s];
    plan.stages.push_back(std::move(st));
  }
  plan.micro_batch_size = micro_batch_size;
  plan.micro_batches = static_cast<int>(global_batch / micro_batch_size);
  return plan;
}

std::string LayoutKey(const Layout& layout) {
  std::string key;
  for (size_t s = 0; s < layout.ranges.size(); ++s) {
    absl::StrAppend(&key, layout.ranges[s].first, "-", layout.ranges[s].second, ":");
    for (int d : layout.devices[s]) absl::StrAppend(&key, d, ",");
    key += ";";
  }
  return key;
}

Layout PlaceLayout(const PlanningProblem& problem, const std::vector<std::pair<int, int>>& ranges,
                   const std::vector<int>& replicas, PlacementPolicy policy) {
  Layout layout;
  layout.ranges = ranges;
  layout.replicas = replicas;
  layout.policy = policy;
  layout.devices = PlaceStages(problem.topology, UsableDeviceCount(problem), replicas, policy);
  return layout;
}

double LayoutScorer::EstimateAt(const Layout& layout, int64_t micro_batch_size) const {
  const HybridPlan plan = ToPlan(layout, micro_batch_size, problem_.global_batch);
  if (!estimator_.Memory(plan).fits) return std::numeric_limits<double>::infinity();
  return estimator_.Latency(plan).step_ms;
}

Scored LayoutScorer::Score(const Layout& layout) const {
  Scored best;
  best.layout = layout;
  best.peak_bytes = std::numeric_limits<int64_t>::max();
  for (int64_t b : MicroBatchSizes(problem_, layout.replicas)) {
    const HybridPlan plan = ToPlan(layout, b, problem_.global_batch);
    const MemoryEstimate memory = estimator_.Memory(plan);
    if (!memory.fits) {
      if (!best.fits && memory.peak_bytes < best.peak_bytes) {
        best.peak_bytes = memory.peak_bytes;
        best.micro_batch_size = b;
      }
      continue;
    }
    const double t = estimator_.Latency(plan).step_ms;
    // Sizes ascend, so ties keep the larger M (the smaller micro-batch): less memory.
    if (!best.fits || t < best.estimate_ms * (1 - 1e-12)) {
      best.fits = true;
      best.estimate_ms = t;
      best.micro_batch_size = b;
      best.peak_bytes = memory.peak_bytes;
    }
  }
  return best;
}

void CandidatePool::Add(Layout layout) {
  if (layout.ranges.empty()) return;
  const PlanningProblem& problem = scorer_.problem();
  if (problem.num_stages > 0 && static_cast<int>(layout.ranges.size()) != problem.num_stages) {
    return;
  }
  const std::string key = LayoutKey(layout);
  if (!seen_.insert(key).second) return;
  Scored scored = scorer_.Score(layout);
  if (scored.micro_batch_size == 0) return;
  scored_.push_back(std::move(scored));
}

void CandidatePool::Sort() {
  std::sort(scored_.begin(), scored_.end(), [](const Scored& a, const Scored& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.estimate_ms < b.estimate_ms;
    return a.peak_bytes < b.peak_bytes;
  });
}

}  // namespace dapple::coordinator::dapple_search

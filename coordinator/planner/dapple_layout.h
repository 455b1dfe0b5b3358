// Part of DAPPLE's planner search (dapple_planner.h; docs/planner.md, "DAPPLE planner"): a
// candidate layout (a plan without its micro-batch size), its analytical score (DAPPLE section
// 5.2 via plan_estimator.h: the fastest micro-batch size that fits memory) and the pool of
// distinct scored layouts the search collects. Internal to the planner; exposed for its pieces.
#ifndef DAPPLE_COORDINATOR_PLANNER_DAPPLE_LAYOUT_H_
#define DAPPLE_COORDINATOR_PLANNER_DAPPLE_LAYOUT_H_

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/planner/placement.h"
#include "coordinator/planner/plan_estimator.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator::dapple_search {

// A plan without its micro-batch size: per stage an inclusive layer range (first, last), a
// replica count and that many global device indices, and the policy that placed them.
struct Layout {
  std::vector<std::pair<int, int>> ranges;
  std::vector<int> replicas;
  std::vector<std::vector<int>> devices;
  PlacementPolicy policy = PlacementPolicy::kAppendFirst;
};

// The plan of `layout` at `micro_batch_size` samples per micro-batch (micro_batches =
// global_batch / micro_batch_size), planner "dapple", placement_policy named after the policy.
HybridPlan ToPlan(const Layout& layout, int64_t micro_batch_size, int64_t global_batch);

// A string equal for two layouts exactly when their stage ranges and devices are.
std::string LayoutKey(const Layout& layout);

// A layout with `ranges` and `replicas`, its devices placed by `policy` (PlaceStages over the
// problem's usable devices). Precondition as PlaceStages'.
Layout PlaceLayout(const PlanningProblem& problem, const std::vector<std::pair<int, int>>& ranges,
                   const std::vector<int>& replicas, PlacementPolicy policy);

// A layout with the micro-batch size the analytical model prefers.
struct Scored {
  Layout layout;
  // When fits: the size among MicroBatchSizes with the smallest estimate_ms (ties: the smaller
  // size) and its PlanEstimator step time in ms and largest per-replica peak in bytes. When no
  // size fits memory: the size with the smallest peak_bytes, estimate_ms infinite; 0 when
  // MicroBatchSizes allows none.
  int64_t micro_batch_size = 0;
  double estimate_ms = std::numeric_limits<double>::infinity();
  int64_t peak_bytes = 0;
  bool fits = false;
};

// Scores layouts of one problem with its estimator (both must outlive the scorer). Immutable;
// thread-safe.
class LayoutScorer {
 public:
  LayoutScorer(const PlanningProblem& problem, const PlanEstimator& estimator)
      : problem_(problem), estimator_(estimator) {}

  const PlanningProblem& problem() const { return problem_; }
  const PlanEstimator& estimator() const { return estimator_; }

  // The best micro-batch size for `layout` by the analytical model (see Scored).
  Scored Score(const Layout& layout) const;
  // The estimated step ms of `layout` at `micro_batch_size`; infinity when it does not fit
  // memory by PlanEstimator::Memory.
  double EstimateAt(const Layout& layout, int64_t micro_batch_size) const;

 private:
  const PlanningProblem& problem_;
  const PlanEstimator& estimator_;
};

// The distinct layouts a search has found, scored. Not thread-safe.
class CandidatePool {
 public:
  explicit CandidatePool(const LayoutScorer& scorer) : scorer_(scorer) {}

  // Scores and keeps `layout` unless it is empty, has a stage count other than a fixed
  // problem.num_stages, was added before (same LayoutKey) or allows no micro-batch size.
  void Add(Layout layout);
  // Orders the pool: layouts that fit memory by estimate_ms ascending, then the others by
  // peak_bytes ascending.
  void Sort();
  const std::vector<Scored>& scored() const { return scored_; }

 private:
  const LayoutScorer& scorer_;
  std::vector<Scored> scored_;
  std::set<std::string> seen_;
};

}  // namespace dapple::coordinator::dapple_search

#endif  // DAPPLE_COORDINATOR_PLANNER_DAPPLE_LAYOUT_H_

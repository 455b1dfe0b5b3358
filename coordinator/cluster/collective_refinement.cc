#include "coordinator/cluster/collective_refinement.h"

#include <algorithm>
#include <cmath>

#include "common/median.h"

namespace dapple::coordinator {

double CollectiveRefinement::OverheadMs() const {
  absl::MutexLock l(&mu_);
  return Median(history_);
}

int CollectiveRefinement::jobs() const {
  absl::MutexLock l(&mu_);
  return jobs_;
}

double CollectiveRefinement::Observe(double planned_overhead_ms, double excess_ms,
                                     int collectives) {
  if (collectives < 1 || !std::isfinite(planned_overhead_ms) || !std::isfinite(excess_ms)) {
    return -1;
  }
  const double observed =
      std::clamp(planned_overhead_ms + excess_ms / collectives, 0.0, kMaxOverheadMs);
  absl::MutexLock l(&mu_);
  history_.push_back(observed);
  if (static_cast<int>(history_.size()) > kHistory) history_.pop_front();
  ++jobs_;
  return observed;
}

}  // namespace dapple::coordinator

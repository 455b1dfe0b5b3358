#include "coordinator/cluster/collective_refinement.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
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

v1::CollectiveRefinementState CollectiveRefinement::State() const {
  absl::MutexLock l(&mu_);
  v1::CollectiveRefinementState state;
  state.mutable_observations_ms()->Add(history_.begin(), history_.end());
  state.set_jobs(jobs_);
  return state;
}

absl::Status CollectiveRefinement::Restore(const v1::CollectiveRefinementState& state) {
  if (state.observations_ms_size() > kHistory) {
    return absl::InvalidArgumentError(absl::StrCat("the collective overhead has ",
                                                   state.observations_ms_size(),
                                                   " observations, at most ", kHistory));
  }
  for (double ms : state.observations_ms()) {
    if (!(ms >= 0 && ms <= kMaxOverheadMs)) {
      return absl::InvalidArgumentError(absl::StrCat("a collective overhead observation of ", ms,
                                                     " ms is outside [0, ", kMaxOverheadMs, "]"));
    }
  }
  if (state.jobs() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the collective overhead's job count must be at least 0, got ", state.jobs()));
  }
  absl::MutexLock l(&mu_);
  history_.assign(state.observations_ms().begin(), state.observations_ms().end());
  jobs_ = state.jobs();
  return absl::OkStatus();
}

}  // namespace dapple::coordinator

#include "coordinator/cluster/profile_refinement.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/median.h"

namespace dapple::coordinator {

ProfileRefinement::ProfileRefinement(int num_layers) : history_(std::max(0, num_layers)) {}

std::vector<double> ProfileRefinement::Factors() const {
  std::vector<double> factors(history_.size(), 1.0);
  for (size_t l = 0; l < history_.size(); ++l) {
    if (!history_[l].empty()) factors[l] = Median(history_[l]);
  }
  return factors;
}

absl::StatusOr<int> ProfileRefinement::Observe(const std::vector<double>& planned,
                                               const std::vector<StageMeasurement>& stages,
                                               std::vector<std::string>* not_taken) {
  const int layers = static_cast<int>(history_.size());
  if (static_cast<int>(planned.size()) != layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the job was planned on factors of ", planned.size(), " layers, the profile has ", layers));
  }
  for (const StageMeasurement& stage : stages) {
    for (const v1::StageRange& r : stage.layers) {
      if (r.first_layer() < 0 || r.first_layer() > r.last_layer() || r.last_layer() >= layers) {
        return absl::InvalidArgumentError(absl::StrCat("layers [", r.first_layer(), ", ",
                                                       r.last_layer(), "] are not within the ",
                                                       layers, " layers of the profile"));
      }
    }
  }
  int taken = 0;
  auto refuse = [&](const StageMeasurement& stage, const std::string& why) {
    if (not_taken != nullptr) {
      not_taken->push_back(absl::StrCat("stage ", stage.stage, " not taken: ", why));
    }
  };
  for (const StageMeasurement& stage : stages) {
    const double layers = stage.predicted_ms - stage.overhead_ms - stage.contention_ms;
    if (!(layers > 0) || !(stage.measured_ms > 0)) {
      refuse(stage, absl::StrFormat("no layer time to compare (predicted %.1f ms, measured %.1f)",
                                    layers, stage.measured_ms));
      continue;
    }
    if (!(stage.contention_ms <= kMaxContentionShare * layers)) {
      refuse(stage, absl::StrFormat("its predicted contention %.1f ms is %.0f%% of its layer time "
                                    "%.1f ms, over %.0f%%",
                                    stage.contention_ms, 100 * stage.contention_ms / layers, layers,
                                    100 * kMaxContentionShare));
      continue;
    }
    const double ratio = (stage.measured_ms - stage.overhead_ms - stage.contention_ms) / layers;
    if (!(ratio >= kMinRatio && ratio <= kMaxRatio)) {
      refuse(stage, absl::StrFormat("measured %.2fx its predicted layer time, outside [%.1f, %.1f]",
                                    ratio, kMinRatio, kMaxRatio));
      continue;
    }
    ++taken;
    for (const v1::StageRange& r : stage.layers) {
      for (int l = r.first_layer(); l <= r.last_layer(); ++l) {
        std::deque<double>& h = history_[l];
        h.push_back(planned[l] * ratio);
        if (static_cast<int>(h.size()) > kHistory) h.pop_front();
      }
    }
  }
  if (taken > 0) ++jobs_;
  return taken;
}

v1::ProfileRefinementState ProfileRefinement::State() const {
  v1::ProfileRefinementState state;
  for (const std::deque<double>& h : history_) {
    state.add_layers()->mutable_observations()->Add(h.begin(), h.end());
  }
  state.set_jobs(jobs_);
  return state;
}

absl::StatusOr<ProfileRefinement> ProfileRefinement::FromState(
    int num_layers, const v1::ProfileRefinementState& state) {
  if (state.layers_size() != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("the refinement has ", state.layers_size(),
                                                   " layers, the profile ", num_layers));
  }
  if (state.jobs() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the refinement's job count must be at least 0, got ", state.jobs()));
  }
  ProfileRefinement refinement(num_layers);
  for (int l = 0; l < num_layers; ++l) {
    const auto& observations = state.layers(l).observations();
    if (observations.size() > kHistory) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", l, " of the refinement has ",
                                                     observations.size(), " observations, at most ",
                                                     kHistory));
    }
    for (double f : observations) {
      if (!(std::isfinite(f) && f > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", l, " of the refinement has factor ", f,
                         ": a factor must be a positive finite number"));
      }
    }
    refinement.history_[l].assign(observations.begin(), observations.end());
  }
  refinement.jobs_ = state.jobs();
  return refinement;
}

v1::ModelProfile ProfileRefinement::Apply(const v1::ModelProfile& raw) const {
  if (jobs_ == 0 || raw.layers_size() != static_cast<int>(history_.size())) return raw;
  const std::vector<double> factors = Factors();
  v1::ModelProfile refined = raw;
  for (int l = 0; l < refined.layers_size(); ++l) {
    v1::LayerProfile& layer = *refined.mutable_layers(l);
    const double f = factors[l];
    layer.set_forward_ms(layer.forward_ms() * f);
    layer.set_backward_ms(layer.backward_ms() * f);
    layer.set_optimizer_ms(layer.optimizer_ms() * f);
    layer.set_half_batch_forward_ms(layer.half_batch_forward_ms() * f);
    layer.set_half_batch_backward_ms(layer.half_batch_backward_ms() * f);
  }
  const auto [lo, hi] = std::minmax_element(factors.begin(), factors.end());
  refined.set_source(
      absl::StrFormat("%s; layer times refined by the measured steps of %d job%s "
                      "(x%.2f to x%.2f)",
                      raw.source(), jobs_, jobs_ == 1 ? "" : "s", *lo, *hi));
  return refined;
}

}  // namespace dapple::coordinator

#include "coordinator/jobs/stage_metrics_tracker.h"

#include <algorithm>

#include "common/median.h"

namespace dapple::coordinator {

bool StageMetricsTracker::OnStep(const v1::ProgressReport& report, int64_t now_unix_ms,
                                 v1::Job* job) {
  if (!report.has_stats()) return false;
  const v1::StageStepStats& stats = report.stats();
  Rank& rank = ranks_[{report.stage(), report.replica()}];
  if (stats.step() <= rank.newest_step) return false;
  rank.newest_step = stats.step();
  rank.window.emplace_back(stats.samples(), stats.step_seconds());
  rank.samples_sum += stats.samples();
  if (static_cast<int>(rank.window.size()) > kWindow) {
    rank.samples_sum -= rank.window.front().first;
    rank.window.pop_front();
  }
  // Seconds are summed afresh over the window: subtracting old terms would let rounding drift
  // over a long job.
  double seconds = 0;
  for (const auto& [samples, secs] : rank.window) seconds += secs;
  rank.seconds_sum = seconds;
  if (++rank.reports > kWarmupSteps && !stats.skipped()) {
    const double compute =
        stats.forward_seconds() + stats.backward_seconds() + stats.optimizer_seconds();
    rank.compute_ms.push_back(compute * 1e3);
    rank.non_compute_ms.push_back((stats.step_seconds() - compute) * 1e3);
    if (static_cast<int>(rank.compute_ms.size()) > kComputeHistory) {
      rank.compute_ms.pop_front();
      rank.non_compute_ms.pop_front();
    }
  }

  auto* all = job->mutable_stage_metrics();
  auto it = std::find_if(all->begin(), all->end(), [&](const v1::StageMetrics& m) {
    return m.stage() == report.stage() && m.replica() == report.replica();
  });
  v1::StageMetrics* m = nullptr;
  if (it != all->end()) {
    m = &*it;
  } else {
    m = all->Add();
    m->set_stage(report.stage());
    m->set_replica(report.replica());
    std::sort(all->begin(), all->end(), [](const v1::StageMetrics& a, const v1::StageMetrics& b) {
      return std::make_pair(a.stage(), a.replica()) < std::make_pair(b.stage(), b.replica());
    });
    for (v1::StageMetrics& e : *all) {
      if (e.stage() == report.stage() && e.replica() == report.replica()) m = &e;
    }
  }
  m->set_worker_id(report.worker_id());
  *m->mutable_last() = stats;
  m->set_last_step_unix_ms(now_unix_ms);
  if (stats.skipped()) m->set_skipped_steps(m->skipped_steps() + 1);
  m->set_samples_per_second(
      rank.seconds_sum > 0 ? static_cast<double>(rank.samples_sum) / rank.seconds_sum : 0.0);
  return true;
}

std::optional<double> StageMetricsTracker::MedianOf(int stage, int replica, int min_steps,
                                                    std::deque<double> Rank::*series) const {
  auto it = ranks_.find({stage, replica});
  if (it == ranks_.end()) return std::nullopt;
  const std::deque<double>& values = it->second.*series;
  if (values.empty() || static_cast<int>(values.size()) < min_steps) return std::nullopt;
  return Median(values);
}

std::optional<double> StageMetricsTracker::MedianComputeMs(int stage, int replica,
                                                           int min_steps) const {
  return MedianOf(stage, replica, min_steps, &Rank::compute_ms);
}

std::optional<double> StageMetricsTracker::MedianNonComputeMs(int stage, int replica,
                                                              int min_steps) const {
  return MedianOf(stage, replica, min_steps, &Rank::non_compute_ms);
}

}  // namespace dapple::coordinator

// Per-rank step metrics of a running job (Job.stage_metrics, job.proto StageMetrics) from the
// PROGRESS_STEP reports that every rank sends every step (ProgressReport.stats). The job's loss,
// throughput and ETA stay with ProgressTracker (last stage only).
//
// Thread safety: thread-compatible (the coordinator service calls it under its mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_STAGE_METRICS_TRACKER_H_
#define DAPPLE_COORDINATOR_JOBS_STAGE_METRICS_TRACKER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <utility>

#include "dapple/v1/job.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

class StageMetricsTracker {
 public:
  // Steps of one rank averaged for samples_per_second.
  static constexpr int kWindow = 20;

  // A PROGRESS_STEP report of rank (report.stage, report.replica) that carries stats. Finds or
  // adds that rank's entry of job->stage_metrics (kept sorted by stage, then replica) and sets
  // worker_id, last = report.stats, last_step_unix_ms = now_unix_ms, skipped_steps (+1 when
  // stats.skipped) and samples_per_second = sum of stats.samples / sum of stats.step_seconds
  // over the rank's last kWindow steps (0 while that time is 0). Returns false and changes
  // nothing for a report without stats or whose stats.step is not newer than the rank's newest
  // (a report delivered twice).
  bool OnStep(const v1::ProgressReport& report, int64_t now_unix_ms, v1::Job* job);

  // A rank's first steps of a run allocate their buffers and fill the caches: its compute
  // median leaves them out. It keeps the newest kComputeHistory steps after them.
  static constexpr int kWarmupSteps = 3;
  static constexpr int kComputeHistory = 256;
  // The median forward + backward + optimizer milliseconds per step (StageStepStats) of rank
  // (stage, replica) over its steps after its first kWarmupSteps reports, skipped steps left
  // out; nullopt with fewer than `min_steps` such steps (or an unknown rank).
  std::optional<double> MedianComputeMs(int stage, int replica, int min_steps) const;
  // The same steps' median milliseconds outside forward, backward and optimizer (step_seconds
  // less them: waits, transfers, collectives); nullopt as MedianComputeMs.
  std::optional<double> MedianNonComputeMs(int stage, int replica, int min_steps) const;

 private:
  struct Rank {
    int64_t newest_step = 0;
    std::deque<std::pair<int64_t, double>> window;  // (samples, step seconds), oldest first
    int64_t samples_sum = 0;
    double seconds_sum = 0;
    int reports = 0;
    // After the warm-up, oldest first: compute and the rest of the step, ms.
    std::deque<double> compute_ms;
    std::deque<double> non_compute_ms;
  };
  // The median of one of rank (stage, replica)'s series (MedianComputeMs' rule).
  std::optional<double> MedianOf(int stage, int replica, int min_steps,
                                 std::deque<double> Rank::*series) const;

  std::map<std::pair<int, int>, Rank> ranks_;  // by (stage, replica)
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_STAGE_METRICS_TRACKER_H_

// Job metrics (v1::JobMetrics) derived from the progress reports of a running job's last stage.
//
// Thread safety: thread-compatible (the coordinator service calls it under its mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_PROGRESS_TRACKER_H_
#define DAPPLE_COORDINATOR_JOBS_PROGRESS_TRACKER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>

#include "common/steps.h"  // TotalSteps: the same step count the workers run
#include "dapple/v1/job.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

class ProgressTracker {
 public:
  // Step reports averaged for throughput and ETA.
  static constexpr int kWindow = 20;

  // Steps whose loss shares wait for the other replicas' (loss_shares > 1) at most: a replica's
  // report that never comes leaves its step out rather than growing without bound.
  static constexpr size_t kMaxPendingSteps = 64;

  // `running_since_unix_ms`: when the job entered RUNNING (elapsed time counts from there).
  // `loss_shares`: how many of the last stage's replicas report a loss over their own share of
  // each step's batch (schedule::LossReplicas: Pipe-SGD's replicas, which reduce gradients only),
  // to be combined; 1: one report's loss is the batch's (the synchronous schedules' replicas add
  // their loss sums in their AllReduce).
  ProgressTracker(int64_t global_batch, int64_t running_since_unix_ms, int loss_shares = 1)
      : global_batch_(global_batch),
        running_since_unix_ms_(running_since_unix_ms),
        loss_shares_(loss_shares) {}

  // A PROGRESS_STEP report of the last stage that carries a loss. Sets metrics.step, epoch,
  // loss, elapsed_seconds; samples_per_second = global_batch / mean step_seconds of the last
  // kWindow reports; eta_seconds = (total_steps - step) * that mean; and appends the loss to
  // job->step_losses so that step_losses[i] is step i + 1 (a skipped step is recorded as NaN,
  // a repeated or older step only updates the window). Leaves metrics.total_steps as it is.
  // With loss_shares > 1 a step's loss is the mean of its replicas' losses weighted by their
  // samples (stats.samples), recorded once every replica reported it.
  void OnStep(const v1::ProgressReport& report, int64_t now_unix_ms, v1::Job* job);

  // A PROGRESS_EVAL report of the last stage: a text dataset's validation_loss,
  // validation_bits_per_byte and validation_accuracy when the report has validation_loss,
  // otherwise test_accuracy and test_loss; eval_step = report.step.
  void OnEval(const v1::ProgressReport& report, int64_t now_unix_ms, v1::Job* job);

  // A PROGRESS_SAMPLE report of the last stage: job->sample_text, cut to kMaxSampleTextBytes
  // (common/eval_metrics.h) and made display text (common/utf8.h DisplayText) whatever the
  // worker sent.
  void OnSample(const v1::ProgressReport& report, int64_t now_unix_ms, v1::Job* job);

  int loss_shares() const { return loss_shares_; }

  // Seconds since the job entered RUNNING (never negative).
  double ElapsedSeconds(int64_t now_unix_ms) const;

 private:
  struct Shares {
    double weighted_loss = 0;  // sum of loss x samples
    double samples = 0;
    std::set<int> replicas;  // those that reported (a replayed report counts once)
  };

  int64_t global_batch_;
  int64_t running_since_unix_ms_;
  int loss_shares_;
  std::deque<double> recent_step_seconds_;
  std::map<int64_t, Shares> pending_;  // step -> the shares reported so far
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_PROGRESS_TRACKER_H_

// Job metrics (v1::JobMetrics) derived from the progress reports of a running job's last stage.
//
// Thread safety: thread-compatible (the coordinator service calls it under its mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_PROGRESS_TRACKER_H_
#define DAPPLE_COORDINATOR_JOBS_PROGRESS_TRACKER_H_

#include <cstdint>
#include <deque>

#include "common/steps.h"  // TotalSteps: the same step count the workers run
#include "dapple/v1/job.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

class ProgressTracker {
 public:
  // Step reports averaged for throughput and ETA.
  static constexpr int kWindow = 20;

  // `running_since_unix_ms`: when the job entered RUNNING (elapsed time counts from there).
  ProgressTracker(int64_t global_batch, int64_t running_since_unix_ms)
      : global_batch_(global_batch), running_since_unix_ms_(running_since_unix_ms) {}

  // A PROGRESS_STEP report of the last stage that carries a loss. Sets metrics.step, epoch,
  // loss, elapsed_seconds; samples_per_second = global_batch / mean step_seconds of the last
  // kWindow reports; eta_seconds = (total_steps - step) * that mean; and appends the loss to
  // job->step_losses so that step_losses[i] is step i + 1 (a skipped step is recorded as NaN,
  // a repeated or older step only updates the window). Leaves metrics.total_steps as it is.
  void OnStep(const v1::ProgressReport& report, int64_t now_unix_ms, v1::Job* job);

  // A PROGRESS_EVAL report of the last stage: a text dataset's validation_loss,
  // validation_bits_per_byte and validation_accuracy when the report has validation_loss,
  // otherwise test_accuracy and test_loss; eval_step = report.step.
  void OnEval(const v1::ProgressReport& report, int64_t now_unix_ms, v1::Job* job);

  // A PROGRESS_SAMPLE report of the last stage: job->sample_text, cut to kMaxSampleTextBytes
  // (common/eval_metrics.h) and made display text (common/utf8.h DisplayText) whatever the
  // worker sent.
  void OnSample(const v1::ProgressReport& report, int64_t now_unix_ms, v1::Job* job);

  // Seconds since the job entered RUNNING (never negative).
  double ElapsedSeconds(int64_t now_unix_ms) const;

 private:
  int64_t global_batch_;
  int64_t running_since_unix_ms_;
  std::deque<double> recent_step_seconds_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_PROGRESS_TRACKER_H_

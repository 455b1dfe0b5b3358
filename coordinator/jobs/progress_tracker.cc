#include "coordinator/jobs/progress_tracker.h"

#include <algorithm>
#include <limits>

#include "common/eval_metrics.h"
#include "common/utf8.h"

namespace dapple::coordinator {

double ProgressTracker::ElapsedSeconds(int64_t now_unix_ms) const {
  return std::max<int64_t>(now_unix_ms - running_since_unix_ms_, 0) / 1000.0;
}

void ProgressTracker::OnStep(const v1::ProgressReport& report, int64_t now_unix_ms, v1::Job* job) {
  if (report.step_seconds() > 0) {
    recent_step_seconds_.push_back(report.step_seconds());
    if (recent_step_seconds_.size() > kWindow) recent_step_seconds_.pop_front();
  }
  v1::JobMetrics* m = job->mutable_metrics();
  m->set_elapsed_seconds(ElapsedSeconds(now_unix_ms));
  double mean = 0;
  for (double s : recent_step_seconds_) mean += s;
  if (!recent_step_seconds_.empty()) mean /= static_cast<double>(recent_step_seconds_.size());
  if (mean > 0) m->set_samples_per_second(static_cast<double>(global_batch_) / mean);

  if (report.step() <= m->step()) return;  // a duplicate or late report: nothing new to show
  double loss = report.loss();
  if (loss_shares_ > 1) {
    Shares& s = pending_[report.step()];
    if (!s.replicas.insert(report.replica()).second) return;
    // A replica's share of the batch; without stats, an equal one.
    const double samples = report.stats().samples() > 0
                               ? static_cast<double>(report.stats().samples())
                               : static_cast<double>(global_batch_) / loss_shares_;
    s.weighted_loss += loss * samples;
    s.samples += samples;
    if (static_cast<int>(s.replicas.size()) < loss_shares_) {
      if (pending_.size() > kMaxPendingSteps) pending_.erase(pending_.begin());
      return;
    }
    loss = s.weighted_loss / s.samples;
    pending_.erase(pending_.begin(), pending_.upper_bound(report.step()));
  }
  m->set_step(report.step());
  m->set_epoch(report.epoch());
  m->set_loss(loss);
  // step_losses[i] is step i + 1; a step whose report never came stays visible as NaN.
  while (job->step_losses_size() < report.step() - 1) {
    job->add_step_losses(std::numeric_limits<double>::quiet_NaN());
  }
  job->add_step_losses(loss);
  const int64_t remaining = std::max<int64_t>(m->total_steps() - m->step(), 0);
  m->set_eta_seconds(static_cast<double>(remaining) * mean);
}

void ProgressTracker::OnEval(const v1::ProgressReport& report, int64_t now_unix_ms, v1::Job* job) {
  v1::JobMetrics* m = job->mutable_metrics();
  if (report.has_validation_loss()) {
    m->set_validation_loss(report.validation_loss());
    m->set_validation_bits_per_byte(report.validation_bits_per_byte());
    m->set_validation_accuracy(report.validation_accuracy());
  } else {
    m->set_test_accuracy(report.test_accuracy());
    m->set_test_loss(report.test_loss());
  }
  m->set_eval_step(report.step());
  m->set_elapsed_seconds(ElapsedSeconds(now_unix_ms));
}

void ProgressTracker::OnSample(const v1::ProgressReport& report, int64_t now_unix_ms,
                               v1::Job* job) {
  job->set_sample_text(DisplayText(report.sample_text(), kMaxSampleTextBytes));
  job->mutable_metrics()->set_elapsed_seconds(ElapsedSeconds(now_unix_ms));
}

}  // namespace dapple::coordinator

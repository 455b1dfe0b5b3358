#include "dapplectl/progress.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dapplectl/format.h"

namespace dapple::ctl {

double EstimateEtaSeconds(const v1::JobMetrics& metrics) {
  if (metrics.total_steps() <= 0) return -1;
  if (metrics.step() >= metrics.total_steps()) return 0;
  if (metrics.eta_seconds() > 0) return metrics.eta_seconds();
  // Fallback for a coordinator that does not fill eta_seconds: the mean step time so far.
  if (metrics.step() > 0 && metrics.elapsed_seconds() > 0) {
    return metrics.elapsed_seconds() / static_cast<double>(metrics.step()) *
           static_cast<double>(metrics.total_steps() - metrics.step());
  }
  return -1;
}

std::string ValidationSummary(const v1::JobMetrics& metrics) {
  if (!metrics.has_validation_loss()) return "";
  return absl::StrCat("validation loss ", FormatLoss(metrics.validation_loss()), " (",
                      FormatLoss(metrics.validation_bits_per_byte()), " bits/byte)");
}

std::string RenderProgressLine(const v1::Job& job, const ProgressStyle& style) {
  const v1::JobMetrics& m = job.metrics();
  const bool total_known = m.total_steps() > 0;
  const double fraction =
      total_known ? std::clamp(static_cast<double>(m.step()) / m.total_steps(), 0.0, 1.0) : 0.0;

  std::vector<std::string> parts = {job.id(), JobStateName(job.state())};
  if (total_known && style.bar) {
    const int width = std::max(1, style.bar_width);
    // Truncate so the bar is full only when every step is done.
    const int filled = std::min(width, static_cast<int>(fraction * width));
    parts.push_back(
        absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '.'), "]"));
  }
  // Before the first step of a job whose length is not known yet there is nothing to count.
  const bool counting = total_known || m.step() > 0;
  if (counting) {
    std::string step = absl::StrCat("step ", FormatSteps(m.step(), m.total_steps()));
    if (total_known && !style.bar) {
      absl::StrAppend(&step, " (", static_cast<int>(fraction * 100), "%)");
    }
    parts.push_back(std::move(step));
  }
  if (counting && m.epochs() > 0) {
    parts.push_back(absl::StrCat("epoch ", m.epoch(), "/", m.epochs()));
  } else if (m.epoch() > 0) {
    parts.push_back(absl::StrCat("epoch ", m.epoch()));
  }
  // NaN: no step has reported a loss in this run yet (a resumed job before its first step).
  if (m.step() > 0 && !std::isnan(m.loss())) {
    // An emulated job's loss is a constant of the emulated device, not a result.
    parts.push_back(absl::StrCat("loss ", FormatLoss(m.loss()),
                                 job.plan().emulated() ? " (emulated, not real)" : ""));
  }
  if (m.has_validation_loss()) parts.push_back(ValidationSummary(m));
  if (m.samples_per_second() > 0) {
    parts.push_back(absl::StrCat(FormatRate(m.samples_per_second()), " samples/s"));
  }
  if (total_known) parts.push_back(absl::StrCat("ETA ", FormatClock(EstimateEtaSeconds(m))));
  return absl::StrJoin(parts, " ");
}

std::string RenderSummaryLine(const v1::Job& job) {
  const v1::JobMetrics& m = job.metrics();
  std::string head = absl::StrCat(job.id(), " ", JobStateName(job.state()),
                                  job.plan().emulated() ? " (emulated)" : "");
  if ((job.state() == v1::JOB_STATE_FAILED || job.state() == v1::JOB_STATE_CANCELLED) &&
      !job.message().empty()) {
    absl::StrAppend(&head, " (", job.message(), ")");
  }
  std::vector<std::string> parts;
  if (m.has_validation_loss()) parts.push_back(ValidationSummary(m));
  if (m.has_test_accuracy()) {
    parts.push_back(absl::StrCat("test accuracy ", FormatPercent(m.test_accuracy())));
  }
  if (m.samples_per_second() > 0) {
    parts.push_back(absl::StrCat(FormatRate(m.samples_per_second()), " samples/s"));
  }
  if (m.step() > 0 || m.total_steps() > 0) {
    std::string steps = absl::StrCat(FormatSteps(m.step(), m.total_steps()), " steps");
    if (m.elapsed_seconds() > 0) absl::StrAppend(&steps, " in ", FormatClock(m.elapsed_seconds()));
    parts.push_back(std::move(steps));
  }
  if (parts.empty()) return head;
  return absl::StrCat(head, ": ", absl::StrJoin(parts, ", "));
}

std::string FitToWidth(const std::string& line, int columns) {
  if (columns <= 1 || line.size() < static_cast<size_t>(columns)) return line;
  return line.substr(0, columns - 1);
}

bool PlainProgressThrottle::ShouldPrint(v1::JobState state, absl::Time now) {
  const bool print = !printed_any_ || state != last_state_ || now - last_print_ >= interval_;
  if (print) {
    printed_any_ = true;
    last_state_ = state;
    last_print_ = now;
  }
  return print;
}

}  // namespace dapple::ctl

// What `dapplectl watch` prints: the live progress line, the throttle for non-terminal output,
// and the final summary line. Pure functions of the job snapshot; thread-safe except
// PlainProgressThrottle (one per watch).
#ifndef DAPPLE_DAPPLECTL_PROGRESS_H_
#define DAPPLE_DAPPLECTL_PROGRESS_H_

#include <string>

#include "absl/time/time.h"
#include "dapple/v1/job.pb.h"

namespace dapple::ctl {

struct ProgressStyle {
  // Draw "[#####.....]" when the total number of steps is known; otherwise print the
  // percentage after the step count instead.
  bool bar = true;
  int bar_width = 20;  // characters between the brackets
};

// Seconds until the job finishes: metrics.eta_seconds when the coordinator set it (> 0),
// otherwise extrapolated from elapsed_seconds over the steps done; 0 once step >= total;
// -1 when unknown (no total, or no step finished yet).
double EstimateEtaSeconds(const v1::JobMetrics& metrics);

// A text dataset's last evaluation in words, "validation loss 1.2345 (1.7810 bits/byte)"
// (JobMetrics.validation_loss and validation_bits_per_byte: a language model's headline
// metric); "" before the first evaluation and for jobs evaluated on a test set.
std::string ValidationSummary(const v1::JobMetrics& metrics);

// One line, no newline, e.g.
//   "job-3 RUNNING [#########...........] step 120/702 epoch 1/3 loss 0.4213 1234 samples/s ETA
//   0:42"
// (a text dataset's job also shows its last evaluation after the loss: "loss 1.3012 validation
// loss 1.2345 (1.7810 bits/byte)")
// (style.bar = false: "job-3 RUNNING step 120/702 (17%) epoch 1/3 ..."). Fields the snapshot
// does not have yet are left out: no step and epoch fields before the first step when the
// total is unknown, no loss before the first step, no samples/s while 0; with an unknown total (0)
// there is no bar, no percentage and no ETA; "ETA -" when the total is known but the rate
// is not yet.
std::string RenderProgressLine(const v1::Job& job, const ProgressStyle& style = {});

// The line printed when the watch ends, e.g.
//   "job-3 SUCCEEDED: test accuracy 87.12%, 1234 samples/s, 702/702 steps in 1:23"
//   "job-4 SUCCEEDED: validation loss 1.2345 (1.7810 bits/byte), 910 samples/s, 500/500 steps
//   in 4:10" (a text dataset)
//   "job-3 FAILED (stage 1: worker w-2 stopped sending heartbeats): 120/702 steps in 0:10"
// The job's message appears (in parentheses) for FAILED and CANCELLED.
std::string RenderSummaryLine(const v1::Job& job);

// Cuts `line` to columns - 1 characters (so a terminal does not wrap it and "\r" keeps
// rewriting a single line). columns <= 1 means unknown: the line is returned as is.
std::string FitToWidth(const std::string& line, int columns);

// Decides which snapshots a watch prints when stdout is not a terminal, so logs stay readable:
// the first one, every one whose state differs from the last printed, and otherwise at most
// one per `interval`.
class PlainProgressThrottle {
 public:
  static constexpr absl::Duration kDefaultInterval = absl::Seconds(2);

  explicit PlainProgressThrottle(absl::Duration interval = kDefaultInterval)
      : interval_(interval) {}

  // True when the snapshot in `state` observed at `now` should be printed; a true answer is
  // recorded as the last print.
  bool ShouldPrint(v1::JobState state, absl::Time now);

 private:
  absl::Duration interval_;
  bool printed_any_ = false;
  v1::JobState last_state_ = v1::JOB_STATE_UNSPECIFIED;
  absl::Time last_print_ = absl::InfinitePast();
};

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_PROGRESS_H_

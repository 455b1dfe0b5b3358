#include "coordinator/jobs/restart_policy.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dapple::coordinator {

absl::string_view FailureCauseName(FailureCause cause) {
  switch (cause) {
    case FailureCause::kWorkerLost:
      return "worker_lost";
    case FailureCause::kRankError:
      return "rank_error";
    case FailureCause::kDiverged:
      return "diverged";
    case FailureCause::kCheckpointUnreadable:
      return "checkpoint_unreadable";
  }
  return "rank_error";
}

FailureCause ClassifyRankFailure(absl::string_view message) {
  // The worker's non-finite failures all say "training diverged" (worker/runtime
  // gradient_exchange.cc, the pipedream / pipesgd runtimes); they would come back at the same
  // step from the same checkpoint. "non-finite" alone is no sign: a lost peer of the step's
  // non-finite check names the check.
  if (absl::StrContains(absl::AsciiStrToLower(message), "training diverged")) {
    return FailureCause::kDiverged;
  }
  // worker/checkpoint/stage_checkpointer.h Resume prefixes every failure to load the run's
  // checkpoint so.
  if (absl::StrContains(message, "resume from '")) return FailureCause::kCheckpointUnreadable;
  return FailureCause::kRankError;
}

namespace {

// The wait before restart restarts_done + 1: backoff * 2^restarts_done, at most max_backoff.
int64_t BackoffMs(const v1::RestartSpec& policy, int restarts_done) {
  // The exponent is bounded so the double stays finite.
  const double doubled = policy.backoff_seconds() * std::ldexp(1.0, std::min(restarts_done, 60));
  const double seconds = std::min(doubled, policy.max_backoff_seconds());
  return static_cast<int64_t>(std::llround(std::max(0.0, seconds) * 1000.0));
}

}  // namespace

RestartDecision DecideRestart(const v1::RestartSpec& policy, FailureCause cause,
                              int restarts_done) {
  RestartDecision d;
  if (policy.max_restarts() <= 0) return d;
  if (cause == FailureCause::kDiverged) {
    d.why_not = "not restarted: a divergence would come back from the same checkpoint";
    return d;
  }
  if (cause == FailureCause::kCheckpointUnreadable) {
    d.why_not =
        "not restarted: the checkpoint its run resumes from cannot be loaded, and a restart "
        "would load it again";
    return d;
  }
  if (cause == FailureCause::kRankError && !policy.on_rank_error()) {
    d.why_not = "not restarted: training.restart.on_rank_error is false";
    return d;
  }
  if (restarts_done >= policy.max_restarts()) {
    d.why_not =
        absl::StrCat("restart policy exhausted: ", restarts_done, " of ", policy.max_restarts(),
                     " restarts used (training.restart.max_restarts)");
    return d;
  }
  d.restart = true;
  d.backoff_ms = BackoffMs(policy, restarts_done);
  return d;
}

RestartWait ResumedRestartWait(const v1::Job& job) {
  RestartWait wait;
  wait.since_ms = job.restart_history().empty()
                      ? job.updated_unix_ms()
                      : job.restart_history(job.restart_history_size() - 1).unix_ms();
  wait.not_before_ms =
      wait.since_ms + BackoffMs(job.spec().training().restart(), std::max(0, job.restarts() - 1));
  return wait;
}

ReplanDecision DecideReplan(const v1::RestartSpec& policy, const RestartWait& wait,
                            const RestartCluster& cluster, int spec_devices, int64_t now_ms) {
  ReplanDecision d;
  if (now_ms < wait.not_before_ms) {
    d.message =
        absl::StrFormat("restarting in %.1f s (backoff)", (wait.not_before_ms - now_ms) / 1000.0);
    return d;
  }
  const int64_t bound_ms =
      static_cast<int64_t>(std::llround(policy.wait_for_workers_seconds() * 1000.0));
  const bool out_of_time = now_ms - wait.not_before_ms >= bound_ms;
  // The failed run's ranks free their workers within a heartbeat or two; planning before
  // would leave them out (a smaller plan than needed). Bounded like the wait for workers.
  if (cluster.stopping_workers > 0 && !out_of_time) {
    d.message = absl::StrCat("restarting: waiting for ", cluster.stopping_workers,
                             cluster.stopping_workers == 1 ? " rank" : " ranks",
                             " of the failed run to stop");
    return d;
  }
  if (cluster.idle_workers < 1) {
    if (out_of_time) {
      d.action = ReplanDecision::Action::kFail;
      d.message = absl::StrFormat(
          "no usable worker for %.0f s after the restart's backoff "
          "(training.restart.wait_for_workers_seconds %g)",
          (now_ms - wait.not_before_ms) / 1000.0, policy.wait_for_workers_seconds());
      return d;
    }
    d.message =
        absl::StrFormat("restarting: waiting for an idle worker (%.0f s of %g)",
                        (now_ms - wait.not_before_ms) / 1000.0, policy.wait_for_workers_seconds());
    return d;
  }
  d.action = ReplanDecision::Action::kReplan;
  d.devices = std::min(cluster.idle_workers, std::max(1, spec_devices));
  return d;
}

}  // namespace dapple::coordinator

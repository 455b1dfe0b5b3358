// The restart policy of a job (training.restart; docs/job_spec.md, "Restarts"): the decisions
// the coordinator service applies when a RUNNING job loses a worker or a rank fails, and while
// the job is RESTARTING. Pure functions of their arguments (the clock is an argument), so the
// rules are tested with direct calls (restart_policy_test.cc); the service
// (coordinator/service/coordinator_service_restart.cc) only applies them.
//
// The rules:
// - Counted failures: a worker lost (dead: no heartbeat for --worker-timeout-ms; shut down)
//   always; a rank's own error (PROGRESS_FAILED / ABORTED: a lost peer, a transport error)
//   when on_rank_error. Never a divergence (non-finite loss or gradient: it would diverge
//   again from the same checkpoint) nor anything refused at submission (a spec error never
//   reaches a running job).
// - A counted failure restarts the job when fewer than max_restarts restarts happened; the
//   k-th restart (1-based) waits backoff_seconds * 2^(k-1), at most max_backoff_seconds.
// - RESTARTING: after the backoff, and once the failed run's ranks stopped (their workers are
//   idle again or silent), the job is planned again on the live idle workers, at most
//   parallel.devices of them (growing back to the spec's devices happens only at a restart:
//   a running job never changes shape); with no usable worker for wait_for_workers_seconds
//   after the backoff it FAILS, saying why.
//
// Thread safety: stateless; thread-safe.
#ifndef DAPPLE_COORDINATOR_JOBS_RESTART_POLICY_H_
#define DAPPLE_COORDINATOR_JOBS_RESTART_POLICY_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

// Why a running job's run ended before its last step.
enum class FailureCause {
  kWorkerLost,  // a worker of the job died, stopped heartbeating or shut down
  kRankError,   // a rank reported an error (FAILED) or aborted on its own
  kDiverged,    // a rank reported non-finite values: never restarted
  // A rank could not load the checkpoint its run resumes from (a corrupt or truncated shard):
  // never restarted, a restart would read the same checkpoint.
  kCheckpointUnreadable,
};

// "worker_lost", "rank_error", "diverged", "checkpoint_unreadable": JobRestart.cause.
absl::string_view FailureCauseName(FailureCause cause);

// The cause of a rank's PROGRESS_FAILED / PROGRESS_ABORTED report with `message`: kDiverged
// for the non-finite failures the worker reports ("training diverged ..."),
// kCheckpointUnreadable for its failures to load the run's checkpoint (StageCheckpointer::Resume:
// "resume from '<manifest>': ..."), else kRankError (also a lost peer of the step's non-finite
// check, which names "non-finite values").
FailureCause ClassifyRankFailure(absl::string_view message);

// What to do with a RUNNING job whose run failed with `cause` after `restarts_done` restarts.
struct RestartDecision {
  bool restart = false;
  int64_t backoff_ms = 0;  // when restart: how long to wait before planning again
  // When !restart: why not, for the job's FAILED message ("" when restarts are off: the
  // failure's own message says it all). E.g. "restart policy exhausted: 3 of 3 restarts used".
  std::string why_not;
};
RestartDecision DecideRestart(const v1::RestartSpec& policy, FailureCause cause, int restarts_done);

// A RESTARTING job's wait: since_ms when it failed, not_before_ms = since_ms + backoff.
struct RestartWait {
  int64_t since_ms = 0;
  int64_t not_before_ms = 0;
};

// The wait of a RESTARTING job read back by a restarted coordinator: since its newest
// restart_history entry (when it failed; the job's updated_unix_ms without one), for the backoff
// of its job.restarts()-th restart. A job is RESTARTING only between its failure and its next
// run, so what the old coordinator waited for is stored with the job.
RestartWait ResumedRestartWait(const v1::Job& job);

// What the cluster looks like to a RESTARTING job now.
struct RestartCluster {
  int idle_workers = 0;      // live, idle, fitting the job's device_type
  int stopping_workers = 0;  // still running the failed run (heartbeating, not yet idle)
};

struct ReplanDecision {
  enum class Action { kWait, kReplan, kFail };
  Action action = Action::kWait;
  int devices = 0;      // kReplan: plan on this many workers
  std::string message;  // kWait: the job's message; kFail: why it failed
};
// `spec_devices` is the spec's parallel.devices (the most a restart plans on).
ReplanDecision DecideReplan(const v1::RestartSpec& policy, const RestartWait& wait,
                            const RestartCluster& cluster, int spec_devices, int64_t now_ms);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_RESTART_POLICY_H_

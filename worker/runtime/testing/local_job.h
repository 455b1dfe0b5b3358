// Every rank of a job in one process, for the runtime's unit tests (a fake: real jobs run one
// rank per worker over UCX and Gloo; tests/integration runs those): each rank (stage, replica)
// is a StageRuntime on its own thread, ranks talk through the in-memory transport
// (local_transport.h) keyed by schedule::RankIndex, and every collective the job needs (the
// replicas of each stage, the tied weights' group, the job-wide one for clipping;
// gradient_exchange.h) is a LocalCollective group (worker/comm/testing/local_collective.h).
// Programs are what the coordinator hands out: schedule::JobPrograms(spec, plan, 0).
// For tests only (links GoogleTest).
#ifndef DAPPLE_WORKER_RUNTIME_TESTING_LOCAL_JOB_H_
#define DAPPLE_WORKER_RUNTIME_TESTING_LOCAL_JOB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/plan.pb.h"
#include "kernels/cpu/layer.h"
#include "worker/comm/testing/local_collective.h"
#include "worker/data/dataset.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_transport.h"

namespace dapple::worker::parity {

// `plan` with replicas[s] replicas on stage s (replicas.size() == its stages).
v1::ParallelPlanSummary WithReplicas(v1::ParallelPlanSummary plan,
                                     const std::vector<int>& replicas);

class LocalJob {
 public:
  // Builds every rank of `spec` on `plan` (its stages' layer ranges and replicas) over `train`
  // / `test` (must outlive the job). A receive whose message never comes fails after
  // `recv_timeout` (kDeadlineExceeded "no message": what a real rank sees of a dead peer).
  // Errors: BuildPrograms', StageRuntime::Create's (prefixed with the rank).
  static absl::StatusOr<std::unique_ptr<LocalJob>> Create(
      const v1::JobSpec& spec, const v1::ParallelPlanSummary& plan, const Dataset* train,
      const Dataset* test, absl::Duration recv_timeout = absl::Seconds(30));

  // What one rank saw in Run.
  struct RankRun {
    absl::Status status;
    std::vector<StepResult> steps;
    // The rank's parameters (name and values) after every step.
    std::vector<std::vector<kernels::Param>> params_after_step;
    EvalResult eval;  // from Evaluate(1) after the last step (when asked)
  };
  // Runs steps [first_step, first_step + steps) on every rank at once (one thread each), then
  // Evaluate(1) when `evaluate`. Per rank (RankIndex order).
  std::vector<RankRun> Run(int64_t first_step, int steps, bool evaluate);

  int num_ranks() const { return static_cast<int>(runtimes_.size()); }
  StageRuntime& runtime(int rank) { return *runtimes_[rank]; }
  // Takes the runtime of `rank` (for parity::ExpectMatchesReference); the job must not Run
  // afterwards.
  std::unique_ptr<StageRuntime> TakeRuntime(int rank) { return std::move(runtimes_[rank]); }
  const v1::ParallelPlanSummary& plan() const { return plan_; }
  // Collective calls completed by each group, in creation order: the replicas' groups of the
  // stages with D > 1 (stage order), then the tied group, then the job group (those present).
  const std::vector<std::unique_ptr<testing::LocalCollectiveGroup>>& groups() const {
    return groups_;
  }

 private:
  LocalJob() = default;

  v1::JobSpec spec_;
  v1::ParallelPlanSummary plan_;
  std::unique_ptr<Mailbox> box_;
  std::vector<std::unique_ptr<testing::LocalCollectiveGroup>> groups_;
  std::vector<std::unique_ptr<testing::LocalCollective>> collectives_;  // owned members
  std::vector<std::unique_ptr<LocalTransport>> transports_;             // per rank
  std::vector<std::unique_ptr<StageRuntime>> runtimes_;                 // per rank
};

}  // namespace dapple::worker::parity

#endif  // DAPPLE_WORKER_RUNTIME_TESTING_LOCAL_JOB_H_

#include "coordinator/jobs/restart_policy.h"

#include <gtest/gtest.h>

namespace dapple::coordinator {
namespace {

v1::RestartSpec Policy(int max_restarts) {
  v1::RestartSpec p;
  p.set_max_restarts(max_restarts);
  p.set_backoff_seconds(1);
  p.set_max_backoff_seconds(5);
  p.set_on_rank_error(true);
  p.set_wait_for_workers_seconds(60);
  return p;
}

TEST(RestartPolicyTest, OffByDefaultSaysNothing) {
  const RestartDecision d = DecideRestart(v1::RestartSpec(), FailureCause::kWorkerLost, 0);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.why_not, "");
}

TEST(RestartPolicyTest, BackoffDoublesAndIsCapped) {
  const v1::RestartSpec p = Policy(10);
  EXPECT_EQ(DecideRestart(p, FailureCause::kWorkerLost, 0).backoff_ms, 1000);
  EXPECT_EQ(DecideRestart(p, FailureCause::kWorkerLost, 1).backoff_ms, 2000);
  EXPECT_EQ(DecideRestart(p, FailureCause::kRankError, 2).backoff_ms, 4000);
  EXPECT_EQ(DecideRestart(p, FailureCause::kWorkerLost, 3).backoff_ms, 5000);
  EXPECT_EQ(DecideRestart(p, FailureCause::kWorkerLost, 9).backoff_ms, 5000);
}

// A restarted coordinator reads a RESTARTING job back: its wait runs from the failure the job
// stored, for the backoff of the restart it is in.
TEST(RestartPolicyTest, AResumedWaitRunsFromTheStoredFailure) {
  v1::Job job;
  *job.mutable_spec()->mutable_training()->mutable_restart() = Policy(10);
  job.set_updated_unix_ms(50'000);
  job.set_restarts(1);
  job.add_restart_history()->set_unix_ms(10'000);
  RestartWait wait = ResumedRestartWait(job);
  EXPECT_EQ(wait.since_ms, 10'000);
  EXPECT_EQ(wait.not_before_ms, 11'000);  // the first restart's 1 s
  job.set_restarts(2);
  job.add_restart_history()->set_unix_ms(20'000);
  wait = ResumedRestartWait(job);
  EXPECT_EQ(wait.since_ms, 20'000);
  EXPECT_EQ(wait.not_before_ms, 22'000);  // the second's 2 s
  job.clear_restart_history();            // written without a history: since its last update
  EXPECT_EQ(ResumedRestartWait(job).since_ms, 50'000);
}

TEST(RestartPolicyTest, ExhaustedSaysSo) {
  const RestartDecision d = DecideRestart(Policy(3), FailureCause::kWorkerLost, 3);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.why_not,
            "restart policy exhausted: 3 of 3 restarts used (training.restart.max_restarts)");
  EXPECT_TRUE(DecideRestart(Policy(3), FailureCause::kWorkerLost, 2).restart);
}

TEST(RestartPolicyTest, DivergenceAndUncountedRankErrorsAreNotRestarted) {
  EXPECT_FALSE(DecideRestart(Policy(3), FailureCause::kDiverged, 0).restart);
  v1::RestartSpec p = Policy(3);
  p.set_on_rank_error(false);
  EXPECT_FALSE(DecideRestart(p, FailureCause::kRankError, 0).restart);
  EXPECT_TRUE(DecideRestart(p, FailureCause::kWorkerLost, 0).restart);
}

TEST(RestartPolicyTest, ClassifiesRankFailures) {
  EXPECT_EQ(ClassifyRankFailure("training diverged: non-finite loss (NaN) at stage 1"),
            FailureCause::kDiverged);
  // A corrupt shard of the checkpoint the run resumes from would fail every restart alike.
  EXPECT_EQ(ClassifyRankFailure("resume from '/c/job-3/step-500/manifest.pb': checkpoint shard "
                                "'/c/job-3/step-500/stage0.replica0.shard' is corrupt: it does "
                                "not parse"),
            FailureCause::kCheckpointUnreadable);
  const RestartDecision unreadable =
      DecideRestart(Policy(3), FailureCause::kCheckpointUnreadable, 0);
  EXPECT_FALSE(unreadable.restart);
  EXPECT_EQ(unreadable.why_not,
            "not restarted: the checkpoint its run resumes from cannot be loaded, and a restart "
            "would load it again");
  EXPECT_EQ(ClassifyRankFailure("receiving activations from stage 0: connection reset"),
            FailureCause::kRankError);
  EXPECT_EQ(ClassifyRankFailure("the step's job-wide check of the gradients (non-finite values; "
                                "the norm for clipping): AllGather: Connection reset by peer"),
            FailureCause::kRankError);
  EXPECT_EQ(FailureCauseName(FailureCause::kWorkerLost), "worker_lost");
}

TEST(RestartPolicyTest, ReplanWaitsForBackoffThenStoppingRanks) {
  const v1::RestartSpec p = Policy(3);
  const RestartWait wait{10'000, 11'000};
  ReplanDecision d = DecideReplan(p, wait, {3, 0}, 4, 10'500);
  EXPECT_EQ(d.action, ReplanDecision::Action::kWait);
  EXPECT_EQ(d.message, "restarting in 0.5 s (backoff)");
  d = DecideReplan(p, wait, {1, 2}, 4, 11'000);
  EXPECT_EQ(d.action, ReplanDecision::Action::kWait);
  EXPECT_EQ(d.message, "restarting: waiting for 2 ranks of the failed run to stop");
  d = DecideReplan(p, wait, {3, 0}, 4, 11'000);
  EXPECT_EQ(d.action, ReplanDecision::Action::kReplan);
  EXPECT_EQ(d.devices, 3);
  // Never more than the spec's devices (growing back happens only up to them).
  EXPECT_EQ(DecideReplan(p, wait, {6, 0}, 4, 11'000).devices, 4);
  // Ranks that never stop do not hold the job forever: after the bound, plan on the idle ones.
  d = DecideReplan(p, wait, {1, 2}, 4, 71'000);
  EXPECT_EQ(d.action, ReplanDecision::Action::kReplan);
  EXPECT_EQ(d.devices, 1);
}

TEST(RestartPolicyTest, NoWorkersFailsAfterTheBound) {
  const v1::RestartSpec p = Policy(3);
  const RestartWait wait{10'000, 11'000};
  ReplanDecision d = DecideReplan(p, wait, {0, 0}, 4, 70'999);
  EXPECT_EQ(d.action, ReplanDecision::Action::kWait);
  EXPECT_EQ(d.message, "restarting: waiting for an idle worker (60 s of 60)");
  d = DecideReplan(p, wait, {0, 0}, 4, 71'000);
  EXPECT_EQ(d.action, ReplanDecision::Action::kFail);
  EXPECT_EQ(d.message,
            "no usable worker for 60 s after the restart's backoff "
            "(training.restart.wait_for_workers_seconds 60)");
}

}  // namespace
}  // namespace dapple::coordinator

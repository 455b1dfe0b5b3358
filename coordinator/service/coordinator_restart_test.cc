// A coordinator that restarts (stop, crash, kill -9) keeps its jobs and workers' ids: running
// jobs' ranks claim their rank back when they register again (docs/coordinator.md,
// "Coordinator restarts"; coordinator_service_reattach.cc).
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/service/coordinator_service_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(CoordinatorServiceTest,
       RestartKeepsTerminalJobsAndPendingOnesAndFailsRunningOnesNotClaimed) {
  std::string w1, w2;
  const std::string done = StartTwoStageJob(&w1, &w2);
  now_ += 1000;
  ASSERT_TRUE(Report(w2, done, 1, v1::PROGRESS_STEP, [](v1::ProgressReport* r) {
                r->set_step(1);
                r->set_epoch(1);
                r->set_loss(2.25);
                r->set_step_seconds(0.25);
              }).ok());
  ASSERT_TRUE(Report(w2, done, 1, v1::PROGRESS_EVAL, [](v1::ProgressReport* r) {
                r->set_test_accuracy(0.5);
              }).ok());
  ASSERT_TRUE(Report(w1, done, 0, v1::PROGRESS_DONE).ok());
  ASSERT_TRUE(Report(w2, done, 1, v1::PROGRESS_DONE).ok());
  Heartbeat(w1, "");
  Heartbeat(w2, "");
  ASSERT_TRUE(Submit(Spec(2)).ok());  // job-2: will be RUNNING
  svc_->Tick();
  ASSERT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);
  // A step report within the persist interval is saved at shutdown at the latest.
  ASSERT_TRUE(Report(w2, "job-2", 1, v1::PROGRESS_STEP, [](v1::ProgressReport* r) {
                r->set_step(1);
                r->set_loss(2.0);
              }).ok());
  ASSERT_TRUE(Submit(Spec(2)).ok());  // job-3: stays PENDING
  const v1::Job before = Get(done);

  svc_.reset();
  now_ += 60000;
  svc_ = Open();
  ASSERT_NE(svc_, nullptr);
  v1::Job after = Get(done);
  EXPECT_EQ(after.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
  EXPECT_THAT(after.step_losses(), ElementsAre(2.25));
  EXPECT_DOUBLE_EQ(after.metrics().test_accuracy(), 0.5);
  v1::Job interrupted = Get("job-2");
  // RUNNING, waiting for its workers to claim their ranks back.
  EXPECT_EQ(interrupted.state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(interrupted.step_losses(), ElementsAre(2.0));
  EXPECT_EQ(Get("job-3").state(), v1::JOB_STATE_PENDING);
  svc_->Tick();  // the wait (worker_timeout_ms) starts with the first pass

  // The old workers are unknown to the new coordinator; registered again without a claim (new
  // processes), job-3 runs on them, and a worker still running job-2 is told to stop it.
  EXPECT_TRUE(Heartbeat(w1, "job-2").unknown_worker());
  const std::string n1 = Register("a");
  const std::string n2 = Register("b");
  EXPECT_THAT(Heartbeat(n1, "job-2").abort_job_ids(), ElementsAre("job-2"));
  Heartbeat(n1, "");
  svc_->Tick();
  EXPECT_EQ(Get("job-3").state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(Get("job-3").worker_ids(), ElementsAre("a", "b"));
  auto next = Submit(Spec(2));
  EXPECT_EQ(next->id(), "job-4");
  // job-2's workers never claimed their ranks: it fails as a job that lost its workers.
  now_ += 5000;
  svc_->Tick();
  interrupted = Get("job-2");
  EXPECT_EQ(interrupted.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(interrupted.message(),
              HasSubstr("did not register again within 5.0 s of the coordinator restart"));
  EXPECT_THAT(interrupted.message(), HasSubstr(absl::StrCat("worker ", w1)));
  EXPECT_EQ(interrupted.events(interrupted.events_size() - 2).reason(), "WorkerLost");
}

// A worker registering again after the restart, claiming `stage` of `job` as `id`, with the
// credential of `id` unless `caller` is given.
v1::RegisterWorkerResponse Claim(CoordinatorService* svc, const std::string& id,
                                 const std::string& job, int stage, int pid, bool done = false,
                                 int64_t last_step = 1,
                                 std::optional<auth::Identity> caller = std::nullopt) {
  v1::RegisterWorkerRequest req;
  req.set_hostname("localhost");
  req.set_pid(pid);
  req.add_devices("cpu");
  req.mutable_reattach()->set_worker_id(id);
  req.mutable_reattach()->set_job_id(job);
  req.mutable_reattach()->set_stage(stage);
  req.mutable_reattach()->set_last_step(last_step);
  req.mutable_reattach()->set_done(done);
  v1::RegisterWorkerResponse resp;
  EXPECT_TRUE(svc->RegisterWorker(caller.value_or(auth::TestWorker(id)), req, &resp).ok());
  return resp;
}

TEST_F(CoordinatorServiceTest, RestartReattachesTheRunningJobsWorkersAndItRunsOn) {
  std::string w1, w2;
  const std::string job = StartTwoStageJob(&w1, &w2);
  now_ += 1000;
  ReportStepThenRestart(w2, job);
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(job).events(Get(job).events_size() - 1).reason(), "CoordinatorRestarted");
  EXPECT_TRUE(Heartbeat(w1, job).unknown_worker());
  // Reports of a worker not back yet: "unknown worker" (the rank retries them).
  EXPECT_EQ(Report(w2, job, 1, v1::PROGRESS_STEP).status().code(), absl::StatusCode::kNotFound);

  // A claim proves nothing without the claimed worker's own credential (docs/security.md).
  for (const auth::Identity& caller : {auth::TestJoin(), auth::TestWorker(w2)}) {
    v1::RegisterWorkerResponse stolen = Claim(svc_.get(), w1, job, 0, 899, false, 1, caller);
    EXPECT_FALSE(stolen.reattached());
    EXPECT_THAT(stolen.reattach_refused(), HasSubstr("must carry that worker's credential"));
    EXPECT_NE(stolen.worker_id(), w1);
  }
  // Identity: a worker may take back only the rank the database says it held.
  v1::RegisterWorkerResponse wrong = Claim(svc_.get(), w2, job, 0, 900);
  EXPECT_FALSE(wrong.reattached());
  EXPECT_THAT(wrong.reattach_refused(), HasSubstr(absl::StrCat("held by ", w1, ", not ", w2)));
  EXPECT_NE(wrong.worker_id(), w2);
  EXPECT_THAT(Heartbeat(wrong.worker_id(), job).abort_job_ids(), ElementsAre(job));
  EXPECT_FALSE(Claim(svc_.get(), w1, "job-9", 0, 901).reattached());

  v1::RegisterWorkerResponse back1 = Claim(svc_.get(), w1, job, 0, 902);
  EXPECT_TRUE(back1.reattached());
  EXPECT_EQ(back1.worker_id(), w1);
  // A retry whose answer was lost gets the same answer; another process may not take it.
  EXPECT_EQ(Claim(svc_.get(), w1, job, 0, 902).worker_id(), w1);
  EXPECT_FALSE(Claim(svc_.get(), w1, job, 0, 903).reattached());
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_BUSY);
  EXPECT_TRUE(Heartbeat(w1, job).abort_job_ids().empty());
  // Half the ranks back: still waiting, not failed at the deadline's half.
  now_ += 2500;
  svc_->Tick();
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);
  // The ranks trained on while the coordinator was away: the event names their newest step,
  // not the job row's (step 1).
  EXPECT_TRUE(Claim(svc_.get(), w2, job, 1, 904, /*done=*/false, /*last_step=*/7).reattached());
  EXPECT_EQ(Get(job).events(Get(job).events_size() - 1).reason(), "Reattached");
  EXPECT_THAT(Get(job).events(Get(job).events_size() - 1).message(),
              HasSubstr("running on from step 7"));
  now_ += 5000;
  Heartbeat(w1, job);
  Heartbeat(w2, job);
  svc_->Tick();
  ASSERT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);

  // The last stage delivers its history again: step 1 is not counted twice, step 2 follows.
  for (int64_t step : {1, 2, 3}) {
    ASSERT_TRUE(Report(w2, job, 1, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
                  r->set_step(step);
                  r->set_loss(step == 1 ? 2.0 : 1.0 / static_cast<double>(step));
                }).ok());
  }
  EXPECT_THAT(Get(job).step_losses(), ElementsAre(2.0, 0.5, 1.0 / 3.0));
  EXPECT_EQ(Get(job).metrics().step(), 3);
  ASSERT_TRUE(Report(w1, job, 0, v1::PROGRESS_DONE).ok());
  ASSERT_TRUE(Report(w2, job, 1, v1::PROGRESS_DONE).ok());
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_SUCCEEDED);
  // It ran 11.5 s, the 3 s outage included (the ranks trained on meanwhile).
  EXPECT_DOUBLE_EQ(Get(job).metrics().elapsed_seconds(), 11.5);
}

// A rank that dies while the coordinator is down: the restart counts the steps the surviving
// ranks' claims say they did, not the job row's older step (a fresh SRE's job restarted "after
// step 200, 0 steps redone" with its rank at step 232).
TEST_F(CoordinatorServiceTest, ARestartAfterACoordinatorRestartCountsTheClaimedSteps) {
  std::string w1, w2;
  const std::string id = StartTwoStageJob(
      &w1, &w2,
      absl::StrReplaceAll(
          Spec(2), {{"  max_steps: 3\n", "  max_steps: 3\n  restart: {max_restarts: 1}\n"}}));
  ReportStepThenRestart(w2, id);
  ASSERT_TRUE(Claim(svc_.get(), w1, id, 0, 902, /*done=*/false, /*last_step=*/2).reattached());
  // w2 never comes back: the job restarts once the wait for its ranks is over.
  for (int i = 0; i < 4 && Get(id).state() == v1::JOB_STATE_RUNNING; ++i) {
    now_ += 2500;
    Heartbeat(w1, id);
    svc_->Tick();
  }
  const v1::Job restarted = Get(id);
  ASSERT_EQ(restarted.state(), v1::JOB_STATE_RESTARTING) << restarted.message();
  ASSERT_EQ(restarted.restart_history_size(), 1);
  EXPECT_EQ(restarted.restart_history(0).failed_after_step(), 2);
}

TEST_F(CoordinatorServiceTest, RestartCountsARankClaimedAsDone) {
  std::string w1, w2;
  const std::string job = StartTwoStageJob(&w1, &w2);
  svc_.reset();
  svc_ = Open();
  // Stage 0 finished (its DONE was acknowledged by the previous coordinator only).
  EXPECT_TRUE(Claim(svc_.get(), w1, job, 0, 910, /*done=*/true, 3).reattached());
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_IDLE);
  EXPECT_TRUE(Claim(svc_.get(), w2, job, 1, 911).reattached());
  ASSERT_TRUE(Report(w2, job, 1, v1::PROGRESS_DONE).ok());
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_SUCCEEDED);
}

// Every rank finished while the coordinator was away (a new user's job then SUCCEEDED at the
// re-attach with 46 of its 150 steps, no test accuracy and no checkpoint: the ranks' reports
// came a millisecond later and were refused). The job ends once their reports are in: every
// rank's DONE again, or no report for kFinishGraceHeartbeats heartbeats (a rank whose DONE the
// old coordinator had acknowledged sends none).
TEST_F(CoordinatorServiceTest, RanksThatFinishedWhileItWasAwayDeliverTheirReportsFirst) {
  std::string w1, w2;
  const std::string job = StartTwoStageJob(&w1, &w2);
  svc_.reset();
  svc_ = Open();
  EXPECT_TRUE(Claim(svc_.get(), w1, job, 0, 920, /*done=*/true, 3).reattached());
  EXPECT_TRUE(Claim(svc_.get(), w2, job, 1, 921, /*done=*/true, 3).reattached());
  svc_->Tick();
  ASSERT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);
  for (int64_t step : {1, 2, 3}) {
    ASSERT_TRUE(Report(w2, job, 1, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
                  r->set_step(step);
                  r->set_loss(1.0 / static_cast<double>(step));
                }).ok());
  }
  ASSERT_TRUE(Report(w2, job, 1, v1::PROGRESS_EVAL, [](v1::ProgressReport* r) {
                r->set_step(3);
                r->set_test_accuracy(0.85);
              }).ok());
  ASSERT_TRUE(Report(w2, job, 1, v1::PROGRESS_DONE).ok());
  svc_->Tick();
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);  // stage 0 may still deliver
  now_ += 4 * 500;
  svc_->Tick();
  const v1::Job j = Get(job);
  ASSERT_EQ(j.state(), v1::JOB_STATE_SUCCEEDED) << j.message();
  EXPECT_EQ(j.metrics().step(), 3);
  EXPECT_EQ(j.step_losses_size(), 3);
  EXPECT_DOUBLE_EQ(j.metrics().test_accuracy(), 0.85);
}

// docs/coordinator.md: generated ids are never handed out again, also after a restart (kill -9
// included: the sequence is saved when an id is answered, not at shutdown).
TEST_F(CoordinatorServiceTest, GeneratedWorkerIdsAreNotReusedAfterARestart) {
  std::string w1, w2;
  const std::string job = StartTwoStageJob(&w1, &w2);
  EXPECT_EQ(w1, "w-1");
  EXPECT_EQ(w2, "w-2");
  EXPECT_EQ(Register(), "w-3");  // never in a job: only the saved sequence remembers it
  EXPECT_EQ(Register("named"), "named");

  svc_.reset();
  svc_ = Open();
  ASSERT_NE(svc_, nullptr);
  EXPECT_THAT(Get(job).worker_ids(), ElementsAre("w-1", "w-2"));
  EXPECT_EQ(Register(), "w-4");
  EXPECT_EQ(Register(), "w-5");

  svc_.reset();  // a second restart continues from there
  svc_ = Open();
  ASSERT_NE(svc_, nullptr);
  EXPECT_EQ(Register(), "w-6");
}

// A database whose jobs name generated-looking ids the sequence never produced (a worker may
// be named "w-7"; or a database written before the sequence was saved): new ids start past
// every one of them.
TEST_F(CoordinatorServiceTest, GeneratedWorkerIdsStartPastEveryIdTheStoredJobsName) {
  Register("w-7");
  Register("w-8");
  ASSERT_TRUE(Submit(Spec(2)).ok());
  svc_->Tick();
  ASSERT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(Get("job-1").worker_ids(), ElementsAre("w-7", "w-8"));

  svc_.reset();
  svc_ = Open();
  ASSERT_NE(svc_, nullptr);
  EXPECT_EQ(Register(), "w-9");
  svc_.reset();
  svc_ = Open();
  ASSERT_NE(svc_, nullptr);
  EXPECT_EQ(Register(), "w-10");
}

}  // namespace
}  // namespace dapple::coordinator

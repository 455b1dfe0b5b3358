// Automatic restarts of a failed job (training.restart; coordinator_service_restart.cc), also
// across a coordinator restart during the backoff.
#include <string>

#include "absl/strings/str_replace.h"
#include "coordinator/service/coordinator_service_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::ElementsAre;

// training.restart (coordinator_service_restart.cc): a dead worker sends the job RESTARTING (its
// other rank told to abort), and after the backoff, once that rank stopped, the same job runs
// again on the live idle workers from step 0 (no checkpoint); the next failure finds the policy
// exhausted and fails the job saying so.
TEST_F(CoordinatorServiceTest, ALostWorkerRestartsTheJobOnTheLiveWorkers) {
  const std::string w1 = Register(), w2 = Register(), w3 = Register();
  auto job = Submit(absl::StrReplaceAll(
      Spec(2), {{"  max_steps: 3\n", "  max_steps: 3\n  restart: {max_restarts: 1}\n"}}));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  svc_->Tick();
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  ASSERT_THAT(Get(id).worker_ids(), ElementsAre(w1, w2));
  EXPECT_TRUE(Heartbeat(w1).has_assignment());
  EXPECT_TRUE(Heartbeat(w2).has_assignment());
  now_ += 4000;
  Heartbeat(w1, id);
  Heartbeat(w3);
  now_ += 1000;  // w2 silent for the timeout
  svc_->Tick();
  v1::Job j = Get(id);
  EXPECT_EQ(j.state(), v1::JOB_STATE_RESTARTING);
  EXPECT_EQ(j.message(),
            "restart 1 of 1 in 1.0 s after: worker w-2 (stage 1 of job job-1) stopped "
            "heartbeating (no heartbeat for 5.0 s)");
  EXPECT_EQ(j.restarts(), 1);
  ASSERT_EQ(j.restart_history_size(), 1);
  EXPECT_EQ(j.restart_history(0).cause(), "worker_lost");
  // The surviving rank is stopped as a cancel stops it.
  EXPECT_THAT(Heartbeat(w1, id).abort_job_ids(), ElementsAre(id));
  svc_->Tick();
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RESTARTING);  // backoff
  Heartbeat(w1, "");
  now_ += 1000;
  svc_->Tick();
  j = Get(id);
  ASSERT_EQ(j.state(), v1::JOB_STATE_RUNNING) << j.message();
  EXPECT_EQ(j.id(), id);
  EXPECT_THAT(j.worker_ids(), ElementsAre(w1, w3));
  EXPECT_EQ(j.restart_history(0).resumed_after_step(), 0);
  EXPECT_GT(j.restart_history(0).resumed_unix_ms(), 0);
  EXPECT_EQ(j.metrics().step(), 0);
  EXPECT_TRUE(Heartbeat(w1).has_assignment());
  EXPECT_TRUE(Heartbeat(w3).has_assignment());

  // The policy is spent: the next failure fails the job, saying so.
  ASSERT_TRUE(Report(w3, id, 1, v1::PROGRESS_FAILED, [](v1::ProgressReport* r) {
                r->set_message("receiving activations: connection lost");
              }).ok());
  j = Get(id);
  EXPECT_EQ(j.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(j.message(),
            "stage 1 (worker w-3): receiving activations: connection lost (restart policy "
            "exhausted: 1 of 1 restarts used (training.restart.max_restarts))");
}

// After a restart the job's trace is the resumed run's: the failed run's traced steps (perhaps
// of another layout, and of steps the resumed run does again) no longer mix in.
// Found by a fresh SRE: a worker killed and restarted at once with its --name came back as w-N
// (the silent old process still held the name until the heartbeat timeout), its DEAD alert kept
// firing and its job waited for that timeout. A new process of the name on the same host takes
// it once the holder missed kNameTakeoverIntervals heartbeats: the holder is DEAD, its job
// restarts at once. A holder still heartbeating keeps its name.
TEST_F(CoordinatorServiceTest, ARestartedWorkerTakesItsNameBack) {
  const std::string a = Register("cpu-a"), b = Register("cpu-b");
  auto job = Submit(absl::StrReplaceAll(
      Spec(2), {{"  max_steps: 3\n", "  max_steps: 3\n  restart: {max_restarts: 1}\n"}}));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  svc_->Tick();
  ASSERT_THAT(Get(id).worker_ids(), ElementsAre(a, b));
  EXPECT_TRUE(Heartbeat(a).has_assignment());
  EXPECT_TRUE(Heartbeat(b).has_assignment());
  now_ += 400;
  Heartbeat(a, id);
  Heartbeat(b, id);
  const std::string duplicate = Register("cpu-a");  // a live holder keeps its name
  EXPECT_NE(duplicate, "cpu-a");
  EXPECT_EQ(Worker("cpu-a").state(), v1::WORKER_STATE_BUSY);

  now_ += 2000;  // cpu-a killed: silent for 2 s, within the 5 s timeout
  Heartbeat(b, id);
  Heartbeat(duplicate);
  EXPECT_EQ(Register("cpu-a"), "cpu-a");
  EXPECT_EQ(Worker("cpu-a").state(), v1::WORKER_STATE_IDLE);
  const v1::Job j = Get(id);
  EXPECT_EQ(j.state(), v1::JOB_STATE_RESTARTING);
  EXPECT_EQ(j.message(),
            "restart 1 of 1 in 1.0 s after: worker cpu-a (stage 0 of job job-1) restarted: "
            "replaced by a new process of its name on host localhost (pid 103; this one, pid 100, "
            "sent no heartbeat for 2.0 s)");
}

TEST_F(CoordinatorServiceTest, ARestartedJobsTraceIsTheResumedRunsOwn) {
  const std::string w1 = Register(), w2 = Register(), w3 = Register();
  auto job = Submit(absl::StrReplaceAll(
      Spec(2), {{"  max_steps: 3\n", "  max_steps: 3\n  restart: {max_restarts: 1}\n"}}));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  svc_->Tick();
  EXPECT_TRUE(Heartbeat(w1).has_assignment());
  EXPECT_TRUE(Heartbeat(w2).has_assignment());
  auto traced_step = [&](const std::string& worker, int stage, const std::string& device) {
    return Report(worker, id, stage, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
      r->set_step(1);
      r->set_epoch(1);
      r->mutable_stats()->set_step(1);
      v1::StepTrace* t = r->mutable_trace();
      t->set_step(1);
      t->set_device(device);
      t->add_events()->set_kind(v1::FORWARD);
    });
  };
  ASSERT_TRUE(traced_step(w1, 0, "first-run").ok());
  ASSERT_TRUE(traced_step(w2, 1, "first-run").ok());
  v1::GetJobTraceRequest req;
  req.set_job_id(id);
  v1::JobTrace trace;
  ASSERT_TRUE(svc_->GetJobTrace(auth::TestAdmin(), req, &trace).ok());
  EXPECT_EQ(trace.steps_size(), 2);
  // w2 dies; the job restarts on w1 and w3.
  now_ += 4000;
  Heartbeat(w1, id);
  Heartbeat(w3);
  now_ += 1000;
  svc_->Tick();
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RESTARTING);
  Heartbeat(w1, id);
  Heartbeat(w1, "");
  now_ += 1000;
  svc_->Tick();
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING) << Get(id).message();
  ASSERT_TRUE(svc_->GetJobTrace(auth::TestAdmin(), req, &trace).ok());
  EXPECT_EQ(trace.steps_size(), 0);
  EXPECT_EQ(trace.num_stages(), 2);
  EXPECT_TRUE(Heartbeat(w1).has_assignment());
  EXPECT_TRUE(Heartbeat(w3).has_assignment());
  now_ += 100;
  ASSERT_TRUE(traced_step(w3, 1, "resumed").ok());
  ASSERT_TRUE(svc_->GetJobTrace(auth::TestAdmin(), req, &trace).ok());
  ASSERT_EQ(trace.steps_size(), 1);
  EXPECT_EQ(trace.steps(0).device(), "resumed");
  EXPECT_EQ(trace.steps(0).worker_id(), w3);
}

// A coordinator restart during a restart's backoff does not fail the job (a new user's job
// failed "coordinator restarted while the job was RESTARTING" with 1 of 2 restarts used): the
// restarted coordinator waits out the rest of the backoff and restarts it as the old one would
// have.
TEST_F(CoordinatorServiceTest, ACoordinatorRestartDuringTheBackoffGoesOnRestarting) {
  const std::string w1 = Register(), w2 = Register();
  auto job = Submit(absl::StrReplaceAll(
      Spec(2), {{"  max_steps: 3\n",
                 "  max_steps: 3\n  restart: {max_restarts: 2, backoff_seconds: 15}\n"}}));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  svc_->Tick();
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(Heartbeat(w1).has_assignment());
  EXPECT_TRUE(Heartbeat(w2).has_assignment());
  // Stage 1's rank fails: the job goes RESTARTING.
  auto fail_stage1 = [&](const std::string& worker) {
    ASSERT_TRUE(Report(worker, id, 1, v1::PROGRESS_FAILED, [](v1::ProgressReport* r) {
                  r->set_message("receiving activations: connection lost");
                }).ok());
    ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RESTARTING);
  };
  // Stage 1's rank (which reports the loss, and so the elapsed time) takes its assignment and
  // reports its first step.
  auto first_step = [&](const std::string& worker) {
    EXPECT_TRUE(Heartbeat(worker).has_assignment());
    ASSERT_TRUE(Report(worker, id, 1, v1::PROGRESS_STEP, [](v1::ProgressReport* r) {
                  r->set_step(1);
                  r->set_epoch(1);
                  r->set_loss(2.3);
                }).ok());
  };
  fail_stage1(w2);
  EXPECT_THAT(Heartbeat(w1, id).abort_job_ids(), ElementsAre(id));

  now_ += 5000;
  svc_.reset();
  now_ += 2000;
  svc_ = Open();
  v1::Job j = Get(id);
  ASSERT_EQ(j.state(), v1::JOB_STATE_RESTARTING) << j.message();
  EXPECT_EQ(j.events(j.events_size() - 1).reason(), "CoordinatorRestarted");
  EXPECT_EQ(j.events(j.events_size() - 1).message(),
            "coordinator restarted while the job was RESTARTING: restart 1 of 2 goes on, planned "
            "again in 8.0 s (the rest of its backoff)");
  const std::string w3 = Register(), w4 = Register();
  svc_->Tick();
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RESTARTING);  // 8 s of backoff left
  now_ += 8000;
  Heartbeat(w3);
  Heartbeat(w4);
  svc_->Tick();
  j = Get(id);
  ASSERT_EQ(j.state(), v1::JOB_STATE_RUNNING) << j.message();
  EXPECT_THAT(j.worker_ids(), ElementsAre(w3, w4));
  EXPECT_EQ(j.restarts(), 1);
  // Its elapsed time counts the backoff and the coordinator's outage within it: 15 s since it
  // started RUNNING (it failed at once) at its first step's report.
  first_step(w4);
  EXPECT_DOUBLE_EQ(Get(id).metrics().elapsed_seconds(), 15.0);

  // Its backoff over while the coordinator was away: planned again once the workers had time
  // to register again, not on the first one that did.
  fail_stage1(w4);
  svc_.reset();
  now_ += 60'000;
  svc_ = Open();
  j = Get(id);
  EXPECT_EQ(j.events(j.events_size() - 1).message(),
            "coordinator restarted while the job was RESTARTING: restart 2 of 2 goes on, planned "
            "again in 5.0 s (time for the workers to register again (--worker-timeout-ms))");
  const std::string w5 = Register();
  svc_->Tick();
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RESTARTING);  // one worker back: not yet
  const std::string w6 = Register();
  now_ += 5000;
  Heartbeat(w5);
  Heartbeat(w6);
  svc_->Tick();
  j = Get(id);
  ASSERT_EQ(j.state(), v1::JOB_STATE_RUNNING) << j.message();
  EXPECT_THAT(j.worker_ids(), ElementsAre(w5, w6));
  first_step(w6);
  EXPECT_DOUBLE_EQ(Get(id).metrics().elapsed_seconds(), 15.0 + 65.0);
}

// A divergence is never restarted: it would come back from the same checkpoint.
TEST_F(CoordinatorServiceTest, ADivergenceIsNotRestarted) {
  const std::string w1 = Register(), w2 = Register();
  auto job = Submit(absl::StrReplaceAll(
      Spec(2), {{"  max_steps: 3\n", "  max_steps: 3\n  restart: {max_restarts: 3}\n"}}));
  ASSERT_TRUE(job.ok()) << job.status();
  svc_->Tick();
  Heartbeat(w1);
  Heartbeat(w2);
  ASSERT_TRUE(Report(w2, job->id(), 1, v1::PROGRESS_FAILED, [](v1::ProgressReport* r) {
                r->set_message("training diverged at step 2: loss nan");
              }).ok());
  const v1::Job j = Get(job->id());
  EXPECT_EQ(j.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(j.restarts(), 0);
  EXPECT_EQ(j.message(),
            "stage 1 (worker w-2): training diverged at step 2: loss nan (not restarted: a "
            "divergence would come back from the same checkpoint)");
}

}  // namespace
}  // namespace dapple::coordinator

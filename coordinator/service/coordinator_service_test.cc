// CoordinatorService's job lifecycle through direct handler calls: submit, schedule, progress,
// cancel, failures, reports checked against the plan, watches and the background thread.
#include "coordinator/service/coordinator_service.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/profile/model_profile.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/job_store.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(CoordinatorServiceTest, InvalidSpecIsRejectedWithTheParsersMessageAndNotStored) {
  for (const std::string& yaml :
       {std::string("name: x\ntrainig: {}\n"), std::string("name: [unclosed\n"),
        absl::StrReplaceAll(Spec(2), {{"micro_batch: 32", "micro_batch: 48"}})}) {
    auto expected = ParseJobSpec(yaml, "bad.yaml");
    ASSERT_FALSE(expected.ok());
    auto job = Submit(yaml, "bad.yaml");
    ASSERT_FALSE(job.ok());
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(job.status().message(), expected.status().message());
  }
  v1::ListJobsResponse list;
  ASSERT_TRUE(svc_->ListJobs(auth::TestAdmin(), {}, &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
  // Nothing stored means the next id is still job-1.
  EXPECT_EQ(Submit(Spec())->id(), "job-1");
}

TEST_F(CoordinatorServiceTest, SubmitScheduleAssignProgressDoneSucceeds) {
  const std::string w1 = Register();
  const std::string w2 = Register();
  EXPECT_EQ(w1, "w-1");
  EXPECT_EQ(w2, "w-2");
  auto submitted = Submit(Spec(2));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->id(), "job-1");
  EXPECT_EQ(submitted->state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(submitted->spec().name(), "demo");

  now_ += 100;
  svc_->Tick();
  v1::Job job = Get("job-1");
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_THAT(job.worker_ids(), ElementsAre("w-1", "w-2"));
  ASSERT_EQ(job.plan().stages_size(), 2);
  EXPECT_THAT(job.plan().stages(0).worker_ids(), ElementsAre("w-1"));
  EXPECT_THAT(job.plan().stages(1).worker_ids(), ElementsAre("w-2"));
  EXPECT_EQ(job.plan().stages(0).last_layer(), 2);
  EXPECT_EQ(job.metrics().total_steps(), 3);  // min(1 * 234, max_steps 3)
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_BUSY);
  EXPECT_EQ(Worker(w2).job_id(), "job-1");
  EXPECT_EQ(Worker(w2).stage(), 1);

  // The assignment comes exactly once, in the next heartbeat.
  v1::HeartbeatResponse hb = Heartbeat(w2);
  ASSERT_TRUE(hb.has_assignment());
  const v1::StageAssignment& a = hb.assignment();
  EXPECT_EQ(a.job_id(), "job-1");
  EXPECT_EQ(a.stage(), 1);
  EXPECT_EQ(a.replica(), 0);
  EXPECT_EQ(a.num_stages(), 2);
  EXPECT_EQ(a.first_step(), 0);
  EXPECT_EQ(a.program().stage(), 1);
  EXPECT_GT(a.program().actions_size(), 0);
  EXPECT_EQ(a.spec().training().global_batch(), 256);
  EXPECT_THAT(a.plan().stages(1).worker_ids(), ElementsAre("w-2"));
  EXPECT_TRUE(hb.abort_job_ids().empty());
  EXPECT_FALSE(Heartbeat(w2, "job-1").has_assignment());
  EXPECT_TRUE(Heartbeat(w2, "job-1").abort_job_ids().empty());
  v1::HeartbeatResponse hb1 = Heartbeat(w1);
  ASSERT_TRUE(hb1.has_assignment());
  EXPECT_EQ(hb1.assignment().stage(), 0);
  EXPECT_FALSE(Heartbeat(w1, "job-1").has_assignment());

  // Rendezvous.
  for (auto [worker, stage] : {std::pair{w1, 0}, std::pair{w2, 1}}) {
    v1::GetPeersRequest peers_req;
    peers_req.set_job_id("job-1");
    v1::GetPeersResponse peers;
    ASSERT_TRUE(svc_->GetPeers(auth::TestWorker("w-1"), peers_req, &peers).ok());
    EXPECT_FALSE(peers.complete());
    EXPECT_FALSE(peers.job_ended());
    v1::PublishEndpointRequest pub;
    pub.set_job_id("job-1");
    pub.set_worker_id(worker);
    pub.set_stage(stage);
    pub.set_ucx_address(absl::StrCat("addr-", stage));
    v1::PublishEndpointResponse pub_resp;
    ASSERT_TRUE(svc_->PublishEndpoint(auth::TestWorker((pub).worker_id()), pub, &pub_resp).ok());
  }
  {
    v1::PublishEndpointRequest wrong;
    wrong.set_job_id("job-1");
    wrong.set_worker_id(w1);
    wrong.set_stage(1);
    v1::PublishEndpointResponse r;
    absl::Status s = svc_->PublishEndpoint(auth::TestWorker((wrong).worker_id()), wrong, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(s.message(), "worker w-1 is not stage 1 of job job-1 (w-2 is)");
  }
  v1::GetPeersRequest peers_req;
  peers_req.set_job_id("job-1");
  v1::GetPeersResponse peers;
  ASSERT_TRUE(svc_->GetPeers(auth::TestWorker("w-1"), peers_req, &peers).ok());
  EXPECT_TRUE(peers.complete());
  ASSERT_EQ(peers.peers_size(), 2);
  EXPECT_EQ(peers.peers(0).worker_id(), "w-1");
  EXPECT_EQ(peers.peers(1).ucx_address(), "addr-1");

  // Progress: stage 0's steps only show liveness; the last stage's carry the loss.
  ASSERT_TRUE(Report(w1, "job-1", 0, v1::PROGRESS_STEP, [](v1::ProgressReport* r) {
                r->set_step(1);
                r->set_step_seconds(0.5);
              }).ok());
  EXPECT_EQ(Get("job-1").metrics().step(), 0);
  const double losses[] = {2.3, 1.7, 1.2};
  for (int step = 1; step <= 3; ++step) {
    now_ += 500;
    auto ack = Report(w2, "job-1", 1, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
      r->set_step(step);
      r->set_epoch(1);
      r->set_loss(losses[step - 1]);
      r->set_step_seconds(0.5);
    });
    ASSERT_TRUE(ack.ok()) << ack.status();
    EXPECT_FALSE(ack->abort());
  }
  job = Get("job-1");
  EXPECT_EQ(job.metrics().step(), 3);
  EXPECT_EQ(job.metrics().epoch(), 1);
  EXPECT_DOUBLE_EQ(job.metrics().loss(), 1.2);
  EXPECT_THAT(job.step_losses(), ElementsAre(2.3, 1.7, 1.2));
  EXPECT_DOUBLE_EQ(job.metrics().samples_per_second(), 512.0);
  EXPECT_DOUBLE_EQ(job.metrics().eta_seconds(), 0.0);
  EXPECT_DOUBLE_EQ(job.metrics().elapsed_seconds(), 1.5);
  ASSERT_TRUE(Report(w2, "job-1", 1, v1::PROGRESS_EVAL, [](v1::ProgressReport* r) {
                r->set_test_accuracy(0.81);
                r->set_test_loss(0.52);
              }).ok());
  EXPECT_DOUBLE_EQ(Get("job-1").metrics().test_accuracy(), 0.81);

  // DONE from every rank.
  auto ack = Report(w1, "job-1", 0, v1::PROGRESS_DONE);
  ASSERT_TRUE(ack.ok());
  EXPECT_FALSE(ack->abort());
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_IDLE);
  // A finished rank that still lists the running job is not told to abort it, and a late
  // ABORTED from it does not fail the job.
  EXPECT_TRUE(Heartbeat(w1, "job-1").abort_job_ids().empty());
  ASSERT_TRUE(Report(w1, "job-1", 0, v1::PROGRESS_ABORTED).ok());
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  now_ += 500;
  ack = Report(w2, "job-1", 1, v1::PROGRESS_DONE);
  ASSERT_TRUE(ack.ok());
  EXPECT_FALSE(ack->abort());
  job = Get("job-1");
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.message(), "");
  EXPECT_DOUBLE_EQ(job.metrics().elapsed_seconds(), 2.0);
  EXPECT_EQ(job.updated_unix_ms(), now_.load());
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_IDLE);
  EXPECT_EQ(Worker(w2).state(), v1::WORKER_STATE_IDLE);
  EXPECT_EQ(Worker(w2).job_id(), "");

  // After the end: late reports are told to stop; the rendezvous says ended.
  auto late = Report(w2, "job-1", 1, v1::PROGRESS_STEP);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->abort());
  ASSERT_TRUE(svc_->GetPeers(auth::TestWorker("w-1"), peers_req, &peers).ok());
  EXPECT_TRUE(peers.job_ended());
  EXPECT_TRUE(Heartbeat(w2, "job-1").abort_job_ids().size() == 1);
}

// A language model's reports (the coordinator keeps whatever the last stage measured; the
// demo spec stands in for a text job): validation metrics, then the sample, which the job keeps
// after it ended and across a coordinator restart.
TEST_F(CoordinatorServiceTest, ValidationMetricsAndTheSampleArePersisted) {
  std::string w1, w2;
  const std::string id = StartTwoStageJob(&w1, &w2);
  ASSERT_TRUE(Report(w2, id, 1, v1::PROGRESS_EVAL, [](v1::ProgressReport* r) {
                r->set_step(3);
                r->set_validation_loss(1.5);
                r->set_validation_bits_per_byte(2.164);
                r->set_validation_accuracy(0.4);
              }).ok());
  v1::Job job = Get(id);
  EXPECT_DOUBLE_EQ(job.metrics().validation_loss(), 1.5);
  EXPECT_DOUBLE_EQ(job.metrics().validation_bits_per_byte(), 2.164);
  EXPECT_DOUBLE_EQ(job.metrics().validation_accuracy(), 0.4);
  EXPECT_EQ(job.metrics().eval_step(), 3);
  EXPECT_FALSE(job.metrics().has_test_accuracy());
  // Only the last stage's sample counts.
  ASSERT_TRUE(Report(w1, id, 0, v1::PROGRESS_SAMPLE, [](v1::ProgressReport* r) {
                r->set_sample_text("not from the last stage");
              }).ok());
  EXPECT_FALSE(Get(id).has_sample_text());
  ASSERT_TRUE(Report(w2, id, 1, v1::PROGRESS_SAMPLE, [](v1::ProgressReport* r) {
                r->set_step(3);
                r->set_sample_text("And God said,\nLet there be light");
              }).ok());
  EXPECT_EQ(Get(id).sample_text(), "And God said,\nLet there be light");
  ASSERT_TRUE(Report(w1, id, 0, v1::PROGRESS_DONE).ok());
  ASSERT_TRUE(Report(w2, id, 1, v1::PROGRESS_DONE).ok());
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);

  svc_.reset();
  svc_ = Open();
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.sample_text(), "And God said,\nLet there be light");
  EXPECT_DOUBLE_EQ(job.metrics().validation_loss(), 1.5);
}

TEST_F(CoordinatorServiceTest, AJobThatDoesNotFitDoesNotBlockTheOnesBehindIt) {
  ASSERT_TRUE(Submit(Spec(2)).ok());
  ASSERT_TRUE(Submit(Spec(1)).ok());
  const std::string w1 = Register();
  svc_->Tick();
  // job-1 needs 2 of the 1 idle worker: job-2 behind it starts (no head-of-line blocking), and
  // job-1 gets no part of what it needs (all or nothing).
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(Get("job-2").worker_ids(), ElementsAre(w1));
  const std::string w2 = Register();
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_PENDING);
  const std::string w3 = Register();
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(Get("job-1").worker_ids(), ElementsAre(w2, w3));
  v1::ListJobsResponse list;
  ASSERT_TRUE(svc_->ListJobs(auth::TestAdmin(), {}, &list).ok());
  ASSERT_EQ(list.jobs_size(), 2);
  EXPECT_EQ(list.jobs(0).id(), "job-2");  // newest first
}

TEST_F(CoordinatorServiceTest, FailureReportFailsTheJobNamingStageAndWorker) {
  std::string w1, w2;
  const std::string id = StartTwoStageJob(&w1, &w2);
  auto ack = Report(w2, id, 1, v1::PROGRESS_FAILED,
                    [](v1::ProgressReport* r) { r->set_message("loss is NaN at step 2"); });
  ASSERT_TRUE(ack.ok());
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.message(), "stage 1 (worker w-2): loss is NaN at step 2");
  EXPECT_EQ(Worker(w2).state(), v1::WORKER_STATE_IDLE);
  // The other rank is told to stop and stays BUSY while it still runs the job.
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_BUSY);
  EXPECT_THAT(Heartbeat(w1, id).abort_job_ids(), ElementsAre(id));
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_BUSY);
  EXPECT_TRUE(Heartbeat(w1, "").abort_job_ids().empty());
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_IDLE);
}

TEST_F(CoordinatorServiceTest, CancelMidRunAbortsWorkersUntilTheyStop) {
  std::string w1, w2;
  const std::string id = StartTwoStageJob(&w1, &w2);
  auto cancelled = Cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(cancelled->message(), "cancelled by user");
  EXPECT_THAT(Heartbeat(w1, id).abort_job_ids(), ElementsAre(id));
  EXPECT_THAT(Heartbeat(w2, id).abort_job_ids(), ElementsAre(id));
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_BUSY);
  // w-1 reports ABORTED; w-2 simply stops listing the job.
  auto ack = Report(w1, id, 0, v1::PROGRESS_ABORTED);
  ASSERT_TRUE(ack.ok());
  EXPECT_TRUE(ack->abort());
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_IDLE);
  Heartbeat(w2, "");
  EXPECT_EQ(Worker(w2).state(), v1::WORKER_STATE_IDLE);

  auto again = Cancel(id);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(), "job job-1 already CANCELLED");
  auto missing = Cancel("job-9");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no job job-9");
}

TEST_F(CoordinatorServiceTest, CancelBeforeDeliveryFreesWorkersAtOnce) {
  const std::string w1 = Register();
  ASSERT_TRUE(Submit(Spec(1)).ok());
  ASSERT_TRUE(Submit(Spec(1)).ok());  // a second one to show the worker is reusable
  svc_->Tick();
  ASSERT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(Cancel("job-1").ok());
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_IDLE);
  svc_->Tick();
  EXPECT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);
  v1::HeartbeatResponse hb = Heartbeat(w1);
  ASSERT_TRUE(hb.has_assignment());
  EXPECT_EQ(hb.assignment().job_id(), "job-2");
}

TEST_F(CoordinatorServiceTest, CancelPendingJob) {
  ASSERT_TRUE(Submit(Spec(2)).ok());
  auto job = Cancel("job-1");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED);
  Register();
  Register();
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(CoordinatorServiceTest, ANewJobWaitsUntilTheWorkerStopsReportingAnOldOne) {
  const std::string w1 = Register();
  // The worker still runs something this coordinator does not know (e.g. from before a
  // restart): it is told to stop it and gets nothing new meanwhile.
  EXPECT_THAT(Heartbeat(w1, "job-77").abort_job_ids(), ElementsAre("job-77"));
  ASSERT_TRUE(Submit(Spec(1)).ok());
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_PENDING);
  EXPECT_FALSE(Heartbeat(w1, "job-77").has_assignment());
  EXPECT_FALSE(Heartbeat(w1, "").has_assignment());
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(Heartbeat(w1, "").has_assignment());
}

TEST_F(CoordinatorServiceTest, AssignmentIsHeldWhileTheWorkerStillReportsAnEndedJob) {
  std::string w1, w2;
  const std::string id = StartTwoStageJob(&w1, &w2);
  // Both report DONE, but w-1's heartbeat still lists the job once more.
  ASSERT_TRUE(Report(w1, id, 0, v1::PROGRESS_DONE).ok());
  ASSERT_TRUE(Report(w2, id, 1, v1::PROGRESS_DONE).ok());
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(Submit(Spec(2)).ok());
  svc_->Tick();
  ASSERT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);
  v1::HeartbeatResponse hb = Heartbeat(w1, id);
  EXPECT_FALSE(hb.has_assignment());
  EXPECT_THAT(hb.abort_job_ids(), ElementsAre(id));
  hb = Heartbeat(w1, "");
  ASSERT_TRUE(hb.has_assignment());
  EXPECT_EQ(hb.assignment().job_id(), "job-2");
}

TEST_F(CoordinatorServiceTest, AnEmptyJobIdIsAnInvalidArgumentNotAMissingJob) {
  v1::GetJobRequest get;
  v1::Job job;
  absl::Status s = svc_->GetJob(auth::TestAdmin(), get, &job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job_id must not be empty");
  auto cancelled = Cancel("");
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cancelled.status().message(), "job_id must not be empty");
  v1::WatchJobRequest watch;
  s = svc_->WatchJob(
      auth::TestAdmin(), watch, [](const v1::JobEvent&) { return true; }, [] { return false; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job_id must not be empty");
}

TEST_F(CoordinatorServiceTest, EndWatchesEndsOpenAndLaterWatchesButNothingElse) {
  ASSERT_TRUE(Submit(Spec(2)).ok());
  v1::WatchJobRequest req;
  req.set_job_id("job-1");
  std::thread ender([&] {
    absl::SleepFor(absl::Milliseconds(30));
    svc_->EndWatches();
  });
  int sent = 0;
  const absl::Time start = absl::Now();
  absl::Status s = svc_->WatchJob(
      auth::TestAdmin(), req, [&](const v1::JobEvent&) { return ++sent > 0; },
      [] { return false; });
  ender.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "coordinator is shutting down");
  EXPECT_EQ(sent, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // A later watch ends at once, without a snapshot; other calls still work.
  sent = 0;
  s = svc_->WatchJob(
      auth::TestAdmin(), req, [&](const v1::JobEvent&) { return ++sent > 0; },
      [] { return false; });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sent, 0);
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_PENDING);
  const std::string w1 = Register();
  const std::string w2 = Register();
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
}

TEST_F(CoordinatorServiceTest, PlannerFailureFailsTheJobWithItsMessage) {
  // Submit validates everything the planner checks, so plant a stored PENDING job whose spec
  // the planner rejects (as an older coordinator version might have accepted).
  svc_.reset();
  {
    auto store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok());
    v1::Job job;
    job.set_id("job-1");
    job.set_state(v1::JOB_STATE_PENDING);
    ASSERT_TRUE(ParseJobSpec(Spec(2), "x").ok());
    *job.mutable_spec() = *ParseJobSpec(Spec(2), "x");
    job.mutable_spec()->mutable_parallel()->set_planner("magic");
    ASSERT_TRUE((*store)->Put(job).ok());
  }
  svc_ = Open();
  Register();
  Register();
  svc_->Tick();
  v1::Job job = Get("job-1");
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.message(),
            "parallel.planner 'magic' is unknown; known: balanced, uniform, manual, dapple, "
            "pipedream, pipedream-code, dp");
  EXPECT_EQ(Worker("w-1").state(), v1::WORKER_STATE_IDLE);
}

TEST_F(CoordinatorServiceTest, ReportsAreCheckedAgainstThePlan) {
  std::string w1, w2;
  const std::string id = StartTwoStageJob(&w1, &w2);
  auto wrong = Report(w1, id, 1, v1::PROGRESS_STEP);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied);  // w2's rank
  // A worker's credential acts for that worker alone, and only workers report.
  v1::ProgressReport theirs;
  theirs.set_worker_id(w1);
  theirs.set_job_id(id);
  theirs.set_kind(v1::PROGRESS_STEP);
  v1::ProgressAck ack;
  for (const auth::Identity& caller : {auth::TestWorker(w2), auth::TestAdmin(),
                                       auth::TestUser("team-a", "alice"), auth::TestJoin()}) {
    EXPECT_EQ(svc_->ReportProgress(caller, theirs, &ack).code(),
              absl::StatusCode::kPermissionDenied);
  }
  v1::GetPeersRequest peers;
  peers.set_job_id(id);
  v1::GetPeersResponse peers_resp;
  EXPECT_EQ(svc_->GetPeers(auth::TestWorker("w-9"), peers, &peers_resp).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(svc_->GetPeers(auth::TestWorker(w2), peers, &peers_resp).ok());
  auto outside = Report(w1, id, 5, v1::PROGRESS_STEP);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Report(w1, "job-9", 0, v1::PROGRESS_STEP).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Report(w1, id, 0, v1::PROGRESS_KIND_UNSPECIFIED).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  // A rank that aborts on its own while the job runs fails the job instead of hanging it.
  ASSERT_TRUE(Report(w1, id, 0, v1::PROGRESS_ABORTED, [](v1::ProgressReport* r) {
                r->set_message("worker shutting down");
              }).ok());
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Get(id).message(), "stage 0 (worker w-1) aborted: worker shutting down");
}

TEST_F(CoordinatorServiceTest, WatchJobStreamsChangesUntilTheTerminalState) {
  std::string w1, w2;
  const std::string id = StartTwoStageJob(&w1, &w2);
  absl::Mutex mu;
  std::vector<v1::Job> events;
  absl::Status result;
  std::atomic<bool> finished{false};
  std::thread watcher([&] {
    v1::WatchJobRequest req;
    req.set_job_id(id);
    result = svc_->WatchJob(
        auth::TestAdmin(), req,
        [&](const v1::JobEvent& e) {
          absl::MutexLock lock(&mu);
          events.push_back(e.job());
          return true;
        },
        [] { return false; });
    finished = true;
  });
  auto count = [&] {
    absl::MutexLock lock(&mu);
    return events.size();
  };
  auto wait_for = [&](size_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (count() < n && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
    return count() >= n;
  };
  ASSERT_TRUE(wait_for(1));
  ASSERT_TRUE(Report(w2, id, 1, v1::PROGRESS_STEP, [](v1::ProgressReport* r) {
                r->set_step(1);
                r->set_loss(2.0);
              }).ok());
  ASSERT_TRUE(wait_for(2));
  ASSERT_TRUE(Cancel(id).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!finished && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_TRUE(finished.load());
  watcher.join();
  EXPECT_TRUE(result.ok()) << result;
  absl::MutexLock lock(&mu);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(events[1].metrics().step(), 1);
  EXPECT_EQ(events.back().state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(CoordinatorServiceTest, WatchJobEndsOnClientCancelAndShutdown) {
  ASSERT_TRUE(Submit(Spec(2)).ok());
  v1::WatchJobRequest req;
  req.set_job_id("job-1");
  int sent = 0;
  std::atomic<bool> gone{false};
  std::thread client([&] {
    absl::SleepFor(absl::Milliseconds(30));
    gone = true;
  });
  const absl::Time start = absl::Now();
  absl::Status s = svc_->WatchJob(
      auth::TestAdmin(), req, [&](const v1::JobEvent&) { return ++sent > 0; },
      [&] { return gone.load(); });
  client.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(sent, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));

  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(30));
    svc_->Shutdown();
  });
  s = svc_->WatchJob(
      auth::TestAdmin(), req, [](const v1::JobEvent&) { return true; }, [] { return false; });
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);

  req.set_job_id("job-9");
  EXPECT_EQ(svc_->WatchJob(
                    auth::TestAdmin(), req, [](const v1::JobEvent&) { return true; },
                    [] { return false; })
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(CoordinatorServiceThreadTest, BackgroundThreadSchedulesAndDetectsDeadWorkers) {
  CoordinatorOptions options;
  options.measure_profiles = false;
  options.db_path = FreshDbPath();
  options.worker_timeout_ms = 300;
  options.tick_interval_ms = 20;
  auto svc = CoordinatorService::Create(options);
  ASSERT_TRUE(svc.ok()) << svc.status();
  (*svc)->Start();
  v1::RegisterWorkerResponse reg;
  ASSERT_TRUE((*svc)->RegisterWorker(auth::TestJoin(), {}, &reg).ok());
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml(Spec(1));
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE((*svc)->SubmitJob(auth::TestAdmin(), submit, &submitted).ok());
  v1::GetJobRequest get;
  get.set_job_id(submitted.job().id());
  v1::Job job;
  // Scheduled without any explicit Tick, then failed by the health check once the worker is
  // silent for 300 ms.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool seen_running = false;
  while (absl::Now() < deadline) {
    ASSERT_TRUE((*svc)->GetJob(auth::TestAdmin(), get, &job).ok());
    seen_running |= job.state() == v1::JOB_STATE_RUNNING;
    if (job.state() == v1::JOB_STATE_FAILED) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(seen_running);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("worker w-1 (stage 0 of job job-1) stopped heartbeating"));
  (*svc)->Shutdown();
}

}  // namespace
}  // namespace dapple::coordinator

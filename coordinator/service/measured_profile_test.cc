// The coordinator measures a job's model on a worker before planning it (ProfileCache), and
// refines that profile by the measured steps of the jobs planned on it (ProfileRefinement).
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/profile/model_profile.h"
#include "coordinator/jobs/sqlite_db.h"
#include "coordinator/service/coordinator_service_test_fixture.h"

namespace dapple::coordinator {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

// What a worker's layer profiler reports for `request` (fixed times; the real measurement is
// tested in worker/runtime/layer_profiler_test.cc and end to end in tests/integration).
v1::ReportProfileRequest MeasuredAnswer(const std::string& worker,
                                        const v1::ProfileRequest& request) {
  v1::ReportProfileRequest r;
  r.set_worker_id(worker);
  r.set_request_id(request.request_id());
  v1::ModelProfile* p = r.mutable_profile();
  p->set_source("measured on cpu");
  p->set_device_kind(request.device());
  p->set_batch_size(request.batch_size());
  p->set_model_fingerprint(profile::ModelFingerprint(request.spec().model()));
  for (const v1::LayerSpec& l : request.spec().model().layers()) {
    v1::LayerProfile* layer = p->add_layers();
    layer->set_name(l.type());
    layer->set_forward_ms(1);
    layer->set_backward_ms(2);
    layer->set_activation_bytes(1024);
  }
  return r;
}

constexpr char kWaitingForABusyWorker[] =
    "waiting to measure the model's layers on cpu: every free worker is measuring another model";

TEST_F(CoordinatorServiceTest, MeasuredProfileAJobWaitsForItsModelToBeMeasuredThenIsReplanned) {
  OpenMeasuring();
  const std::string w1 = Register();
  const std::string w2 = Register();
  auto submitted = Submit(Spec(2));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_THAT(submitted->plan().profile_source(), HasSubstr("estimated"));
  svc_->Tick();
  v1::Job job = Get(submitted->id());
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(job.message(), HasSubstr("measuring the model's layers on cpu"));
  // The first free worker is asked, once, in its heartbeat reply; a busy one never is.
  EXPECT_FALSE(Heartbeat(w2).has_profile_request());
  v1::HeartbeatResponse hb = Heartbeat(w1);
  ASSERT_TRUE(hb.has_profile_request());
  EXPECT_EQ(hb.profile_request().batch_size(), 32);
  EXPECT_EQ(hb.profile_request().device(), "cpu");
  EXPECT_FALSE(Heartbeat(w1).has_profile_request());
  svc_->Tick();
  EXPECT_EQ(Get(job.id()).state(), v1::JOB_STATE_PENDING);

  v1::ReportProfileResponse resp;
  ASSERT_TRUE(
      svc_->ReportProfile(auth::TestWorker((MeasuredAnswer(w1, hb.profile_request())).worker_id()),
                          MeasuredAnswer(w1, hb.profile_request()), &resp)
          .ok());
  svc_->Tick();
  job = Get(job.id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_EQ(job.plan().profile_source(), "measured on cpu by worker w-1");
  EXPECT_GT(job.plan().predicted_step_ms(), 0);

  // The next job of the same model uses the cached measurement at once.
  auto second = Submit(Spec(2));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->plan().profile_source(), "measured on cpu by worker w-1");
}

TEST_F(CoordinatorServiceTest, MeasuredProfileFailureOrDeathRunsTheEstimatedPlanSayingWhy) {
  OpenMeasuring();
  const std::string w1 = Register();
  const std::string w2 = Register();
  auto submitted = Submit(Spec(2));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  svc_->Tick();
  v1::HeartbeatResponse hb = Heartbeat(w1);
  ASSERT_TRUE(hb.has_profile_request());
  // A report from another worker is refused and changes nothing.
  v1::ReportProfileResponse resp;
  EXPECT_EQ(
      svc_->ReportProfile(auth::TestWorker((MeasuredAnswer(w2, hb.profile_request())).worker_id()),
                          MeasuredAnswer(w2, hb.profile_request()), &resp)
          .code(),
      absl::StatusCode::kPermissionDenied);
  v1::ReportProfileRequest failed;
  failed.set_worker_id(w1);
  failed.set_request_id(hb.profile_request().request_id());
  failed.set_error("model.layers[1] (linear): out of memory");
  ASSERT_TRUE(svc_->ReportProfile(auth::TestWorker((failed).worker_id()), failed, &resp).ok());
  svc_->Tick();
  v1::Job job = Get(submitted->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_THAT(job.plan().profile_source(), HasSubstr("estimated"));
  EXPECT_THAT(job.plan().notes(),
              Contains(HasSubstr("planned on the estimated profile: worker w-1 could not profile "
                                 "the model: model.layers[1] (linear): out of memory")));
}

TEST_F(CoordinatorServiceTest, MeasuredProfileWorkerThatNeverAnswersTimesOut) {
  OpenMeasuring();
  Register();
  Register();
  auto submitted = Submit(Spec(2));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  svc_->Tick();
  ASSERT_TRUE(Heartbeat("w-1").has_profile_request());
  // Both workers stay alive (heartbeats every 2 s); the measurement never comes.
  for (int t = 2'000; t < 60'000; t += 2'000) {
    now_ += 2'000;
    Heartbeat("w-1");
    Heartbeat("w-2");
    svc_->Tick();
    ASSERT_EQ(Get(submitted->id()).state(), v1::JOB_STATE_PENDING) << t;
  }
  now_ += 2'000;  // past the 60 s profile timeout
  Heartbeat("w-1");
  Heartbeat("w-2");
  svc_->Tick();
  v1::Job job = Get(submitted->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_THAT(job.plan().notes(), Contains(HasSubstr("did not report the profile before its "
                                                     "deadline")));
}

// The demo model with narrower hidden layers: another model (another fingerprint), 1 stage.
std::string OtherModelSpec() { return absl::StrReplaceAll(Spec(1), {{"out: 1024", "out: 512"}}); }

TEST_F(CoordinatorServiceTest, MeasuredProfileAWorkerStillMeasuringIsNotAskedAgain) {
  OpenMeasuring();
  const std::string w1 = Register();
  const std::string w2 = Register();
  auto big = Submit(Spec(1));
  ASSERT_TRUE(big.ok()) << big.status();
  svc_->Tick();
  ASSERT_TRUE(Heartbeat(w1).has_profile_request());
  // Cancelled while w-1 measures its model: w-1 goes on measuring (and answers later).
  ASSERT_TRUE(Cancel(big->id()).ok());
  auto small = Submit(OtherModelSpec());
  ASSERT_TRUE(small.ok()) << small.status();
  svc_->Tick();
  EXPECT_THAT(Get(small->id()).message(), HasSubstr("measuring the model's layers on cpu"));
  EXPECT_FALSE(Heartbeat(w1).has_profile_request());
  v1::HeartbeatResponse hb = Heartbeat(w2);
  ASSERT_TRUE(hb.has_profile_request());
  EXPECT_EQ(hb.profile_request().spec().name(), "demo");
  EXPECT_EQ(hb.profile_request().spec().model().layers(1).linear().out(), 512);
  v1::ReportProfileResponse resp;
  ASSERT_TRUE(
      svc_->ReportProfile(auth::TestWorker((MeasuredAnswer(w2, hb.profile_request())).worker_id()),
                          MeasuredAnswer(w2, hb.profile_request()), &resp)
          .ok());
  svc_->Tick();
  v1::Job job = Get(small->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_EQ(job.plan().profile_source(), "measured on cpu by worker w-2");
}

TEST_F(CoordinatorServiceTest, MeasuredProfileAJobWaitsWhileEveryFreeWorkerMeasuresAnother) {
  OpenMeasuring();
  const std::string w1 = Register();
  auto big = Submit(Spec(1));
  ASSERT_TRUE(big.ok()) << big.status();
  svc_->Tick();
  v1::HeartbeatResponse big_request = Heartbeat(w1);
  ASSERT_TRUE(big_request.has_profile_request());
  ASSERT_TRUE(Cancel(big->id()).ok());
  auto small = Submit(OtherModelSpec());
  ASSERT_TRUE(small.ok()) << small.status();
  svc_->Tick();
  v1::Job job = Get(small->id());
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.message(), kWaitingForABusyWorker);
  EXPECT_FALSE(Heartbeat(w1).has_profile_request());
  // The first measurement ends (and is cached); then w-1 is asked for the second model.
  v1::ReportProfileResponse resp;
  ASSERT_TRUE(
      svc_->ReportProfile(
              auth::TestWorker((MeasuredAnswer(w1, big_request.profile_request())).worker_id()),
              MeasuredAnswer(w1, big_request.profile_request()), &resp)
          .ok());
  svc_->Tick();
  EXPECT_THAT(Get(small->id()).message(), HasSubstr("measuring the model's layers on cpu"));
  v1::HeartbeatResponse hb = Heartbeat(w1);
  ASSERT_TRUE(hb.has_profile_request());
  EXPECT_EQ(hb.profile_request().spec().model().layers(1).linear().out(), 512);

  // A worker that is measuring when asked (its heartbeat had not said so yet) answers "busy" at
  // once: the request is asked again when it is done, not given up for the estimate.
  v1::ReportProfileRequest busy;
  busy.set_worker_id(w1);
  busy.set_request_id(hb.profile_request().request_id());
  busy.set_busy_with_request_id("profile-x-9");
  busy.set_error(absl::StrCat("worker ", w1, " is measuring another model (request profile-x-9)"));
  ASSERT_TRUE(svc_->ReportProfile(auth::TestWorker((busy).worker_id()), busy, &resp).ok());
  svc_->Tick();
  job = Get(small->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_PENDING) << job.message();
  EXPECT_EQ(job.message(), kWaitingForABusyWorker);
  EXPECT_FALSE(Heartbeat(w1).has_profile_request());  // its heartbeat says it is done now
  svc_->Tick();
  hb = Heartbeat(w1);
  ASSERT_TRUE(hb.has_profile_request());
  ASSERT_TRUE(
      svc_->ReportProfile(auth::TestWorker(w1), MeasuredAnswer(w1, hb.profile_request()), &resp)
          .ok());
  svc_->Tick();
  job = Get(small->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_EQ(job.plan().profile_source(), "measured on cpu by worker w-1");
}

// Registers a cpu worker that says it is measuring `measuring` (a request of a previous
// coordinator), and returns a function that sends its heartbeat saying what it measures then.
std::pair<std::string, std::function<v1::HeartbeatResponse(const std::string&)>> RegisterMeasuring(
    CoordinatorService* svc, const std::string& measuring) {
  v1::RegisterWorkerRequest reg;
  reg.set_hostname("host-a");
  reg.set_pid(4242);
  reg.add_devices("cpu");
  reg.set_measuring_request_id(measuring);
  v1::RegisterWorkerResponse reg_resp;
  EXPECT_TRUE(svc->RegisterWorker(auth::TestJoin(), reg, &reg_resp).ok());
  const std::string id = reg_resp.worker_id();
  return {id, [svc, id](const std::string& now_measuring) {
            v1::HeartbeatRequest req;
            req.set_worker_id(id);
            req.set_measuring_request_id(now_measuring);
            v1::HeartbeatResponse resp;
            EXPECT_TRUE(svc->Heartbeat(auth::TestWorker(id), req, &resp).ok());
            return resp;
          }};
}

// A worker that measures a model a previous coordinator asked for says so when it registers
// and in its heartbeats: the restarted coordinator waits for it (or asks another worker)
// instead of asking it (a new user's job ran the FLOP estimate after a coordinator restart
// because the only worker answered "is measuring another model"), and keeps its answer.
TEST_F(CoordinatorServiceTest,
       MeasuredProfileAWorkerStillMeasuringForAPreviousCoordinatorIsNotAsked) {
  OpenMeasuring();
  auto [w1, heartbeat] = RegisterMeasuring(svc_.get(), "profile-old-1");
  auto submitted = Submit(Spec(1));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  svc_->Tick();
  v1::Job job = Get(submitted->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_PENDING) << job.message();
  EXPECT_EQ(job.message(), kWaitingForABusyWorker);
  EXPECT_FALSE(heartbeat("profile-old-1").has_profile_request());

  // Answers for requests it did not say it measures, or without a profile, are refused.
  v1::ProfileRequest old_request;
  old_request.set_request_id("profile-old-1");
  *old_request.mutable_spec() = submitted->spec();
  old_request.set_device("cpu");
  old_request.set_batch_size(32);
  v1::ReportProfileRequest other = MeasuredAnswer(w1, old_request);
  other.set_request_id("profile-old-7");
  v1::ReportProfileResponse resp;
  EXPECT_EQ(svc_->ReportProfile(auth::TestWorker(w1), other, &resp).code(),
            absl::StatusCode::kNotFound);
  heartbeat("profile-old-1");  // any answer says the worker is done measuring
  v1::ReportProfileRequest failed;
  failed.set_worker_id(w1);
  failed.set_request_id("profile-old-1");
  failed.set_error("out of memory");
  EXPECT_EQ(svc_->ReportProfile(auth::TestWorker(w1), failed, &resp).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Get(submitted->id()).state(), v1::JOB_STATE_PENDING);

  // Its measurement for the previous coordinator is kept: the job is planned on it, and the
  // worker is asked nothing more.
  heartbeat("profile-old-1");
  ASSERT_TRUE(
      svc_->ReportProfile(auth::TestWorker(w1), MeasuredAnswer(w1, old_request), &resp).ok());
  svc_->Tick();
  job = Get(submitted->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_EQ(job.plan().profile_source(), "measured on cpu by worker w-1");
  EXPECT_FALSE(heartbeat("").has_profile_request());
}

// When the previous coordinator's measurement fails, the worker is asked once it is done.
TEST_F(CoordinatorServiceTest, MeasuredProfileAWorkerDoneMeasuringForAPreviousCoordinatorIsAsked) {
  OpenMeasuring();
  auto [w1, heartbeat] = RegisterMeasuring(svc_.get(), "profile-old-1");
  auto submitted = Submit(Spec(1));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  svc_->Tick();
  EXPECT_EQ(Get(submitted->id()).message(), kWaitingForABusyWorker);
  v1::ReportProfileRequest failed;
  failed.set_worker_id(w1);
  failed.set_request_id("profile-old-1");
  failed.set_error("out of memory");
  v1::ReportProfileResponse resp;
  EXPECT_EQ(svc_->ReportProfile(auth::TestWorker(w1), failed, &resp).code(),
            absl::StatusCode::kInvalidArgument);
  svc_->Tick();
  v1::HeartbeatResponse hb = heartbeat("");
  ASSERT_TRUE(hb.has_profile_request());
  ASSERT_TRUE(
      svc_->ReportProfile(auth::TestWorker(w1), MeasuredAnswer(w1, hb.profile_request()), &resp)
          .ok());
  svc_->Tick();
  v1::Job job = Get(submitted->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_EQ(job.plan().profile_source(), "measured on cpu by worker w-1");
}

// A worker measuring one model for longer than the profile deadline holds no job back: it is
// asked, and its busy answer fails the request (the job runs its estimate, saying why).
TEST_F(CoordinatorServiceTest, MeasuredProfileAWorkerMeasuringPastTheDeadlineHoldsNoJobBack) {
  OpenMeasuring();
  auto [w1, heartbeat] = RegisterMeasuring(svc_.get(), "profile-old-2");
  auto submitted = Submit(Spec(1));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  svc_->Tick();
  EXPECT_EQ(Get(submitted->id()).message(), kWaitingForABusyWorker);
  now_ += 60'000;
  EXPECT_FALSE(heartbeat("profile-old-2").has_profile_request());
  svc_->Tick();
  v1::HeartbeatResponse hb = heartbeat("profile-old-2");
  ASSERT_TRUE(hb.has_profile_request());
  v1::ReportProfileRequest busy;
  busy.set_worker_id(w1);
  busy.set_request_id(hb.profile_request().request_id());
  busy.set_busy_with_request_id("profile-old-2");
  busy.set_error(
      absl::StrCat("worker ", w1, " is measuring another model (request profile-old-2)"));
  v1::ReportProfileResponse resp;
  ASSERT_TRUE(svc_->ReportProfile(auth::TestWorker(w1), busy, &resp).ok());
  svc_->Tick();
  v1::Job job = Get(submitted->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_THAT(job.plan().notes(),
              Contains("planned on the estimated profile: worker w-1 could not profile the "
                       "model: worker w-1 is measuring another model (request profile-old-2) for "
                       "more than 60 s"));
}

// Measurements are kept per tenant: after the operator's job had its model measured, a tenant's
// plan of the same model is on the FLOP estimate (it once read "measured on cpu by worker w2;
// layer times refined by the measured steps of 1 job": another team had trained that model).
TEST_F(CoordinatorServiceTest, MeasuredProfileATenantsPlanDoesNotShowAnotherTenantsMeasurement) {
  OpenMeasuring();
  const std::string w1 = Register();
  auto submitted = Submit(Spec(1));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  svc_->Tick();
  v1::HeartbeatResponse hb = Heartbeat(w1);
  ASSERT_TRUE(hb.has_profile_request());
  v1::ReportProfileResponse resp;
  ASSERT_TRUE(
      svc_->ReportProfile(auth::TestWorker(w1), MeasuredAnswer(w1, hb.profile_request()), &resp)
          .ok());
  auto source_for = [&](const auth::Identity& caller) {
    v1::PlanJobRequest req;
    req.set_spec_yaml(Spec(1));
    v1::PlanJobResponse plan;
    absl::Status s = svc_->PlanJob(caller, req, &plan);
    EXPECT_TRUE(s.ok()) << s;
    return plan.plan().profile_source();
  };
  EXPECT_EQ(source_for(auth::TestAdmin()), "measured on cpu by worker w-1");
  EXPECT_THAT(source_for(auth::TestUser("team-b", "bob")), HasSubstr("estimated"));
}

// A worker that deregisters (or dies) while measuring fails its request at once, and another
// worker is asked, once (a new user's job ran 30% slower than planned on the FLOP estimate after
// the measuring worker was killed); a second loss runs the estimated plan, saying why.
TEST_F(CoordinatorServiceTest, MeasuredProfileAWorkerLostWhileMeasuringIsReplacedOnce) {
  OpenMeasuring();
  const std::string w1 = Register();
  const std::string w2 = Register();
  const std::string w3 = Register();
  auto submitted = Submit(Spec(1));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto deregister = [&](const std::string& worker) {
    v1::DeregisterWorkerRequest req;
    req.set_worker_id(worker);
    v1::DeregisterWorkerResponse resp;
    ASSERT_TRUE(svc_->DeregisterWorker(auth::TestWorker(worker), req, &resp).ok());
  };
  svc_->Tick();
  ASSERT_TRUE(Heartbeat(w1).has_profile_request());
  deregister(w1);
  svc_->Tick();  // no time passed: not the 60 s deadline
  v1::Job job = Get(submitted->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_PENDING) << job.message();
  EXPECT_EQ(job.events(job.events_size() - 1).message(),
            "worker w-1 shut down before reporting the profile: asking worker w-2");
  ASSERT_TRUE(Heartbeat(w2).has_profile_request());
  deregister(w2);
  svc_->Tick();
  job = Get(submitted->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_EQ(job.worker_ids(0), w3);
  EXPECT_THAT(job.plan().notes(),
              Contains("planned on the estimated profile: worker w-2 shut down before reporting "
                       "the profile"));
}

// Reports 20 steps of every rank of running `job` (one replica per stage) and DONE: stage 0
// computes `stage0_ratio` x its predicted layer time per step, the other stages their
// prediction, except in their 3 warm-up steps (4x: left out of the medians); every rank spends
// `outside_extra_ms` per step more outside its layers than the plan predicts for it.
class RefinementTest : public CoordinatorServiceTest {
 protected:
  // The demo MLP on 2 stages for `steps` steps.
  static std::string TwoStageSpec(int steps = 20) {
    return absl::StrReplaceAll(Spec(2), {{"max_steps: 3", absl::StrCat("max_steps: ", steps)}});
  }

  // On a measuring service: registers w-1 and w-2, submits `spec` `copies` times, answers the
  // measurement w-1 is asked for (MeasuredAnswer, kept in answer_) and starts the first job,
  // which it returns RUNNING with both assignments delivered (the other copies wait).
  v1::Job StartFirstMeasured(const std::string& spec, int copies = 1) {
    OpenMeasuring();
    w1_ = Register();
    w2_ = Register();
    std::string first;
    for (int i = 0; i < copies; ++i) {
      auto submitted = Submit(spec);
      EXPECT_TRUE(submitted.ok()) << submitted.status();
      if (submitted.ok() && first.empty()) first = submitted->id();
    }
    svc_->Tick();
    v1::HeartbeatResponse hb = Heartbeat(w1_);
    EXPECT_TRUE(hb.has_profile_request());
    answer_ = MeasuredAnswer(w1_, hb.profile_request());
    v1::ReportProfileResponse resp;
    EXPECT_TRUE(svc_->ReportProfile(auth::TestWorker(w1_), answer_, &resp).ok());
    svc_->Tick();
    v1::Job job = Get(first);
    EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
    EXPECT_TRUE(Heartbeat(w1_).has_assignment());
    EXPECT_TRUE(Heartbeat(w2_).has_assignment());
    return job;
  }

  std::string w1_, w2_;
  v1::ReportProfileRequest answer_;

  void RunToSuccess(const v1::Job& job, double stage0_ratio, double outside_extra_ms = 0) {
    for (int step = 1; step <= 20; ++step) {
      for (int stage = 0; stage < job.plan().stages_size(); ++stage) {
        const v1::PlanStageSummary& s = job.plan().stages(stage);
        const double fixed_ms = s.overhead_ms() + s.contention_ms();
        const double ms = fixed_ms + (s.compute_ms() - fixed_ms) *
                                         (stage == 0 ? stage0_ratio : (step <= 3 ? 4 : 1));
        const double step_ms =
            ms + job.plan().predicted_step_ms() - s.compute_ms() + outside_extra_ms;
        ASSERT_TRUE(
            Report(s.worker_ids(0), job.id(), stage, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
              r->set_step(step);
              r->set_loss(2.0);
              r->set_step_seconds(step_ms / 1e3);
              v1::StageStepStats* st = r->mutable_stats();
              st->set_step(step);
              st->set_step_seconds(step_ms / 1e3);
              st->set_forward_seconds(ms / 3 / 1e3);
              st->set_backward_seconds(ms * 2 / 3 / 1e3);
              st->set_samples(256);
            }).ok());
      }
    }
    for (int stage = 0; stage < job.plan().stages_size(); ++stage) {
      ASSERT_TRUE(
          Report(job.plan().stages(stage).worker_ids(0), job.id(), stage, v1::PROGRESS_DONE).ok());
    }
  }
};

// A job planned on the measured profile reports each rank's compute per step; when it succeeds,
// those medians refine the cached profile (coordinator/cluster/profile_refinement.h) and the
// next plan of the model reads the refined layer times.
TEST_F(RefinementTest, ASucceededJobsStepsRefineTheProfileForTheNextPlan) {
  const std::string spec = TwoStageSpec();
  v1::Job job = StartFirstMeasured(spec);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.plan().profile_source(), "measured on cpu by worker w-1");
  ASSERT_EQ(job.plan().stages_size(), 2);
  const v1::ReportProfileRequest answer = answer_;

  // Stage 0 computes 1.5x its predicted layer time; stage 1 as predicted, but in its 3 warm-up
  // steps 4x (left out of its median).
  const v1::PlanStageSummary s0 = job.plan().stages(0);
  ASSERT_GT(s0.compute_ms(), s0.overhead_ms() + s0.contention_ms());
  RunToSuccess(job, /*stage0_ratio=*/1.5, /*outside_extra_ms=*/4);
  job = Get(job.id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.message();
  std::vector<std::string> measured_events;
  for (const v1::JobEventRecord& e : job.events()) {
    if (e.reason() == "Measured") measured_events.push_back(e.message());
  }
  EXPECT_THAT(measured_events,
              Contains(AllOf(HasSubstr("compute per step, median after the warm-up: stage 0"),
                             HasSubstr("refined the layer times of the model's profile on cpu "
                                       "(2 of 2 stages taken)"),
                             HasSubstr(", 1 collective): each collective +4.00 ms"))));

  // The cache's profile: stage 0's layers 1.5x as long, stage 1's as measured.
  std::optional<v1::ModelProfile> refined =
      cache_->Lookup(ProfileCache::KeyOf(job.spec().model(), "cpu"));
  ASSERT_TRUE(refined.has_value());
  EXPECT_EQ(refined->source(),
            "measured on cpu by worker w-1; layer times refined by the measured steps of 1 job "
            "(x1.00 to x1.50)");
  for (int l = 0; l < refined->layers_size(); ++l) {
    const double f = l <= s0.last_layer() ? 1.5 : 1.0;
    EXPECT_NEAR(refined->layers(l).forward_ms(), answer.profile().layers(l).forward_ms() * f, 1e-9)
        << l;
    EXPECT_NEAR(refined->layers(l).backward_ms(), answer.profile().layers(l).backward_ms() * f,
                1e-9)
        << l;
  }
  // The next job of the model is planned on it.
  auto second = Submit(spec);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->plan().profile_source(), refined->source());
  EXPECT_GT(second->plan().predicted_step_ms(), job.plan().predicted_step_ms());
  // ... and on the workers' topology with each collective (its GLOBAL_NORM) 4 ms dearer.
  EXPECT_THAT(second->plan().cluster_source(),
              HasSubstr("; collectives +4.00 ms each (measured by the steps of 1 job)"));
  // Planned at submission on the refined profile, it refines it again when it succeeds (its
  // stage 0 measured as predicted: that layer's observations are 1.5 and 1.5).
  svc_->Tick();
  job = Get(second->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_TRUE(Heartbeat(w1_).has_assignment());
  EXPECT_TRUE(Heartbeat(w2_).has_assignment());
  RunToSuccess(job, /*stage0_ratio=*/1.0);
  refined = cache_->Lookup(ProfileCache::KeyOf(job.spec().model(), "cpu"));
  EXPECT_THAT(refined->source(), HasSubstr("refined by the measured steps of 2 jobs"));
  EXPECT_NEAR(refined->layers(0).forward_ms(), answer.profile().layers(0).forward_ms() * 1.5, 1e-9);
}

// What the coordinator measured and learned is kept in its database (profile_store.h): a
// restarted coordinator plans the model on the refined profile and the learned collective
// overhead at once, without measuring it again, unless the profile is older than
// --profile-max-age-h.
TEST_F(RefinementTest, ARestartedCoordinatorPlansOnWhatItMeasuredAndLearned) {
  const std::string spec = TwoStageSpec();
  v1::Job job = StartFirstMeasured(spec);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  RunToSuccess(job, /*stage0_ratio=*/1.5, /*outside_extra_ms=*/4);
  ASSERT_EQ(Get(job.id()).state(), v1::JOB_STATE_SUCCEEDED);
  const ProfileCache::Key key = ProfileCache::KeyOf(job.spec().model(), "cpu");
  const std::optional<v1::ModelProfile> refined = cache_->Lookup(key);
  ASSERT_TRUE(refined.has_value());
  ASSERT_THAT(refined->source(), HasSubstr("refined by the measured steps of 1 job"));

  svc_.reset();
  now_ += 3'600'000;
  svc_ = Open();  // a new, empty cache
  const std::string w3 = Register();
  Register();
  auto after_restart = Submit(spec);
  ASSERT_TRUE(after_restart.ok()) << after_restart.status();
  EXPECT_EQ(after_restart->plan().profile_source(), refined->source());
  EXPECT_THAT(after_restart->plan().cluster_source(),
              HasSubstr("; collectives +4.00 ms each (measured by the steps of 1 job)"));
  EXPECT_EQ(cache_->Lookup(key)->SerializeAsString(), refined->SerializeAsString());
  svc_->Tick();
  EXPECT_EQ(Get(after_restart->id()).state(), v1::JOB_STATE_RUNNING)
      << Get(after_restart->id()).message();
  EXPECT_FALSE(Heartbeat(w3).has_profile_request());  // nothing measured again

  // A profile measured longer ago than --profile-max-age-h is measured again; the cluster's
  // collective overhead is the cluster's, not the model's, and stays.
  svc_.reset();
  profile_max_age_ms_ = 3'600'000 - 1;
  svc_ = Open();
  Register();
  Register();
  auto stale = Submit(spec);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_THAT(stale->plan().profile_source(), HasSubstr("estimated"));
  EXPECT_THAT(stale->plan().cluster_source(), HasSubstr("; collectives +4.00 ms each"));
  EXPECT_EQ(cache_->StateOf(key), ProfileCache::State::kMissing);

  // A table it cannot read (an edited database) costs the measurements, not the start.
  svc_.reset();
  {
    absl::StatusOr<sqlite3*> db = OpenSqliteDatabase(path_);
    ASSERT_TRUE(db.ok()) << db.status();
    EXPECT_TRUE(
        ExecSql(*db, "DROP TABLE measured_profiles; CREATE TABLE measured_profiles (x TEXT)").ok());
    sqlite3_close(*db);
  }
  svc_ = Open();
  ASSERT_NE(svc_, nullptr);
  EXPECT_EQ(cache_->StateOf(key), ProfileCache::State::kMissing);
}

// A job queued behind another of the same model starts on what that one measured: its plan,
// made while it waited, is made again once the profile was refined (a new user's 12 queued jobs
// all ran the plan made on the first measurement).
TEST_F(RefinementTest, AQueuedJobIsPlannedAgainOnTheProfileTheJobsBeforeItRefined) {
  v1::Job job = StartFirstMeasured(TwoStageSpec(), /*copies=*/2);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  const std::string queued = "job-2";
  svc_->Tick();  // the queued job's plan is prepared on the profile as measured
  EXPECT_EQ(Get(queued).state(), v1::JOB_STATE_PENDING);
  RunToSuccess(job, /*stage0_ratio=*/1.5);
  ASSERT_EQ(Get(job.id()).state(), v1::JOB_STATE_SUCCEEDED);
  Heartbeat(w1_);
  Heartbeat(w2_);
  svc_->Tick();
  const v1::Job started = Get(queued);
  ASSERT_EQ(started.state(), v1::JOB_STATE_RUNNING) << started.message();
  EXPECT_THAT(started.plan().profile_source(),
              HasSubstr("; layer times refined by the measured steps of 1 job"));
  EXPECT_GT(started.plan().predicted_step_ms(), job.plan().predicted_step_ms());
}

// A run started by the job's restart policy is planned on the cached profile too, and its steps
// refine it when it succeeds (a new user's restarted job refined nothing).
TEST_F(RefinementTest, ARestartedRunRefinesTheProfileItWasPlannedOn) {
  v1::Job job = StartFirstMeasured(absl::StrReplaceAll(
      TwoStageSpec(), {{"  max_steps: 20\n", "  max_steps: 20\n  restart: {max_restarts: 1}\n"}}));
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  const std::string w3 = Register();
  now_ += 4000;
  Heartbeat(w1_, job.id());
  Heartbeat(w3);
  now_ += 1000;  // w-2 silent for the worker timeout
  svc_->Tick();
  ASSERT_EQ(Get(job.id()).state(), v1::JOB_STATE_RESTARTING);
  Heartbeat(w1_, "");
  Heartbeat(w3);
  now_ += 1000;  // the backoff
  svc_->Tick();
  job = Get(job.id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_EQ(job.plan().profile_source(), "measured on cpu by worker w-1");
  EXPECT_TRUE(Heartbeat(w1_).has_assignment());
  EXPECT_TRUE(Heartbeat(w3).has_assignment());
  RunToSuccess(job, /*stage0_ratio=*/1.5);
  job = Get(job.id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.message();
  EXPECT_EQ(job.events(job.events_size() - 2).reason(), "Measured");
  EXPECT_THAT(cache_->Lookup(ProfileCache::KeyOf(job.spec().model(), "cpu"))->source(),
              HasSubstr("refined by the measured steps of 1 job"));
}

TEST_F(RefinementTest, AJobOfOnlyWarmUpStepsRefinesNothing) {
  v1::Job job = StartFirstMeasured(TwoStageSpec(/*steps=*/3));  // 3 steps: all warm-up
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  for (int step = 1; step <= 3; ++step) {
    for (int stage = 0; stage < 2; ++stage) {
      ASSERT_TRUE(Report(job.plan().stages(stage).worker_ids(0), job.id(), stage, v1::PROGRESS_STEP,
                         [&](v1::ProgressReport* r) {
                           r->set_step(step);
                           r->set_loss(2.0);
                           r->mutable_stats()->set_step(step);
                           r->mutable_stats()->set_forward_seconds(1.0);
                         })
                      .ok());
    }
  }
  for (int stage = 0; stage < 2; ++stage) {
    ASSERT_TRUE(
        Report(job.plan().stages(stage).worker_ids(0), job.id(), stage, v1::PROGRESS_DONE).ok());
  }
  ASSERT_EQ(Get(job.id()).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(cache_->Lookup(ProfileCache::KeyOf(job.spec().model(), "cpu"))->source(),
            "measured on cpu by worker w-1");
}

}  // namespace
}  // namespace dapple::coordinator

// The CoordinatorService test fixture shared by the service's direct-call tests
// (coordinator_service_test.cc, measured_profile_test.cc): a service on a fresh database with a
// clock the test moves, and helpers that play the workers and the user.
#ifndef DAPPLE_COORDINATOR_SERVICE_COORDINATOR_SERVICE_TEST_FIXTURE_H_
#define DAPPLE_COORDINATOR_SERVICE_COORDINATOR_SERVICE_TEST_FIXTURE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {

constexpr int64_t kStart = 1'700'000'000'000;

// The demo MLP with 2 stages and 3 steps; {P} and {STEPS} may be replaced.
constexpr char kSpec[] = R"(name: demo
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: linear, out: 1024}
    - {type: relu}
    - {type: linear, out: 1024}
    - {type: relu}
    - {type: linear, out: 10}
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
training:
  global_batch: 256
  micro_batch: 32
  epochs: 1
  max_steps: 3
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
parallel:
  schedule: dapple
  planner: balanced
  stages: {P}
  devices: {P}
)";

inline std::string Spec(int stages = 2) {
  return absl::StrReplaceAll(kSpec, {{"{P}", absl::StrCat(stages)}});
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { svc_ = Open(); }

  std::unique_ptr<CoordinatorService> Open(int64_t dead_worker_retention_ms = 600'000,
                                           int64_t stall_grace_ms = 0) {
    CoordinatorOptions options;
    // The tests move the clock by whole seconds between passes, which would read as stalls.
    options.stall_grace_ms = stall_grace_ms;
    options.measure_profiles = measure_;  // the MeasuredProfile tests play the measuring worker
    options.db_path = path_;
    options.profile_max_age_ms = profile_max_age_ms_;
    options.heartbeat_interval_ms = 500;
    options.worker_timeout_ms = 5000;
    options.dead_worker_retention_ms = dead_worker_retention_ms;
    options.watch_min_interval_ms = 10;
    options.now_unix_ms = [this] { return now_.load(); };
    // A fresh cache per service, as a coordinator's restart starts with an empty one.
    cache_ = std::make_shared<ProfileCache>();
    options.profile_cache = cache_;
    auto svc = CoordinatorService::Create(options);
    EXPECT_TRUE(svc.ok()) << svc.status();
    return svc.ok() ? std::move(*svc) : nullptr;
  }

  int next_pid_ = 100;
  std::string Register(const std::string& name = "", const std::string& device = "cpu") {
    v1::RegisterWorkerRequest req;
    req.set_hostname("localhost");
    req.set_pid(next_pid_++);  // each worker is its own process
    req.add_devices(device);
    req.set_name(name);
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(svc_->RegisterWorker(auth::TestJoin(), req, &resp).ok());
    EXPECT_EQ(resp.heartbeat_interval_ms(), 500);
    return resp.worker_id();
  }

  v1::HeartbeatResponse Heartbeat(const std::string& worker, const std::string& running = "") {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_running_job_id(running);
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(svc_->Heartbeat(auth::TestWorker((req).worker_id()), req, &resp).ok());
    return resp;
  }
  // Registers four workers, submits `spec` (2 stages x 2 replicas) as job-1 and starts it:
  // checks the plan, the placement (w-1, w-2 on stage 0) and the assignments. Returns the
  // workers in rank order.
  std::vector<std::string> StartTwoByTwo(const std::string& spec, const std::string& schedule) {
    std::vector<std::string> w;
    for (int i = 0; i < 4; ++i) w.push_back(Register());
    auto submitted = Submit(spec);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    if (!submitted.ok()) return w;
    EXPECT_EQ(submitted->plan().schedule(), schedule);
    EXPECT_EQ(submitted->plan().stages_size(), 2);
    for (const v1::PlanStageSummary& stage : submitted->plan().stages()) {
      EXPECT_EQ(stage.replicas(), 2);
    }
    svc_->Tick();
    v1::Job job = Get("job-1");
    EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
    EXPECT_THAT(job.worker_ids(), ::testing::ElementsAre("w-1", "w-2", "w-3", "w-4"));
    EXPECT_THAT(job.plan().stages(0).worker_ids(), ::testing::ElementsAre("w-1", "w-2"));
    EXPECT_THAT(job.plan().stages(1).worker_ids(), ::testing::ElementsAre("w-3", "w-4"));
    ExpectTwoByTwoAssignments(w, schedule);
    return w;
  }

  // The assignments of a job of 2 stages x 2 replicas on workers `w` (ranks in order): (stage,
  // replica) by rank index, `schedule`, and one ALLREDUCE in every step of every program
  // (pipedream's: the whole run of the replica, schedule::JobPrograms).
  void ExpectTwoByTwoAssignments(const std::vector<std::string>& w, const std::string& schedule) {
    for (int i = 0; i < 4; ++i) {
      v1::HeartbeatResponse hb = Heartbeat(w[i]);
      ASSERT_TRUE(hb.has_assignment()) << w[i];
      const v1::StageAssignment& a = hb.assignment();
      EXPECT_EQ(a.stage(), i / 2);
      EXPECT_EQ(a.replica(), i % 2);
      EXPECT_EQ(a.num_stages(), 2);
      EXPECT_EQ(a.spec().parallel().schedule(), schedule);
      EXPECT_EQ(a.plan().stages(i / 2).replicas(), 2);
      EXPECT_EQ(a.plan().stages(i / 2).worker_ids(i % 2), w[i]);
      EXPECT_EQ(a.program().stage(), i / 2);
      EXPECT_EQ(a.program().replica(), i % 2);
      EXPECT_EQ(a.program().phases().empty(), schedule != "pipedream");
      EXPECT_EQ(a.program().whole_micro_batches(), schedule == "pipedream");
      std::vector<const google::protobuf::RepeatedPtrField<v1::Action>*> steps = {
          &a.program().actions()};
      if (!a.program().phases().empty()) steps.clear();
      for (const v1::ProgramPhase& phase : a.program().phases()) {
        for (const v1::StepActions& step : phase.cycle()) steps.push_back(&step.actions());
      }
      for (const auto* actions : steps) {
        int allreduces = 0;
        for (const v1::Action& action : *actions) allreduces += action.kind() == v1::ALLREDUCE;
        EXPECT_EQ(allreduces, 1) << w[i];
      }
    }
  }

  absl::StatusOr<v1::ProgressAck> Report(
      const std::string& worker, const std::string& job, int stage, v1::ProgressKind kind,
      const std::function<void(v1::ProgressReport*)>& fill = {}) {
    v1::ProgressReport req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_stage(stage);
    req.set_kind(kind);
    if (fill) fill(&req);
    v1::ProgressAck ack;
    absl::Status s = svc_->ReportProgress(auth::TestWorker((req).worker_id()), req, &ack);
    if (!s.ok()) return s;
    return ack;
  }

  absl::StatusOr<v1::Job> Submit(const std::string& yaml, const std::string& source = "job.yaml") {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(yaml);
    req.set_source_name(source);
    v1::SubmitJobResponse resp;
    absl::Status s = svc_->SubmitJob(auth::TestAdmin(), req, &resp);
    if (!s.ok()) return s;
    return resp.job();
  }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(svc_->GetJob(auth::TestAdmin(), req, &job).ok()) << id;
    return job;
  }

  absl::StatusOr<v1::Job> Cancel(const std::string& id) {
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    absl::Status s = svc_->CancelJob(auth::TestAdmin(), req, &job);
    if (!s.ok()) return s;
    return job;
  }

  v1::WorkerInfo Worker(const std::string& id) {
    v1::ListWorkersResponse resp;
    EXPECT_TRUE(svc_->ListWorkers(auth::TestAdmin(), {}, &resp).ok());
    for (const v1::WorkerInfo& w : resp.workers()) {
      if (w.id() == id) return w;
    }
    ADD_FAILURE() << "no worker " << id;
    return {};
  }

  // Submits the 2-stage demo with two fresh workers and starts it; both assignments delivered.
  std::string StartTwoStageJob(std::string* w1, std::string* w2,
                               const std::string& spec = Spec(2)) {
    *w1 = Register();
    *w2 = Register();
    auto job = Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    svc_->Tick();
    EXPECT_EQ(Get(job->id()).state(), v1::JOB_STATE_RUNNING);
    EXPECT_TRUE(Heartbeat(*w1).has_assignment());
    EXPECT_TRUE(Heartbeat(*w2).has_assignment());
    return job->id();
  }

  // Stage 1's `worker` reports step 1 of `job` (loss 2.0); then the coordinator goes away and a
  // new one opens on the same database 3 s later and ticks once (a coordinator restart).
  void ReportStepThenRestart(const std::string& worker, const std::string& job) {
    ASSERT_TRUE(Report(worker, job, 1, v1::PROGRESS_STEP, [](v1::ProgressReport* r) {
                  r->set_step(1);
                  r->set_loss(2.0);
                }).ok());
    svc_.reset();
    now_ += 3000;
    svc_ = Open();
    svc_->Tick();
  }

  // Opens a fresh service that measures models before planning.
  void OpenMeasuring() {
    svc_.reset();
    measure_ = true;
    svc_ = Open();
  }

  bool measure_ = false;
  int64_t profile_max_age_ms_ = int64_t{168} * 3'600'000;
  std::string path_ = FreshDbPath();
  std::atomic<int64_t> now_{kStart};
  std::shared_ptr<ProfileCache> cache_;  // the service's measured profiles
  std::unique_ptr<CoordinatorService> svc_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_COORDINATOR_SERVICE_TEST_FIXTURE_H_

#include "coordinator/service/emulation.h"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/job_spec.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/cluster/profile_store.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;

// MLP 784-64-10 on [1, 28, 28] (4 layers), 2 stages, emulated on `profile`.
v1::JobSpec Spec(const std::string& profile, double scale) {
  v1::JobSpec spec;
  v1::ModelSpec* m = spec.mutable_model();
  for (int d : {1, 28, 28}) m->add_input_shape(d);
  m->add_layers()->set_type("flatten");
  v1::LayerSpec* l = m->add_layers();
  l->set_type("linear");
  l->mutable_linear()->set_out(64);
  m->add_layers()->set_type("relu");
  l = m->add_layers();
  l->set_type("linear");
  l->mutable_linear()->set_out(10);
  m->set_loss("softmax_cross_entropy");
  v1::TrainingSpec* t = spec.mutable_training();
  t->set_global_batch(64);
  t->set_micro_batch(16);
  t->mutable_optimizer()->set_type("sgd");
  t->mutable_optimizer()->set_lr(0.1);
  v1::ParallelSpec* p = spec.mutable_parallel();
  p->set_schedule("dapple");
  p->set_planner("balanced");
  p->set_stages(2);
  p->set_devices(2);
  p->set_device_type("emulated");
  p->mutable_emulation()->set_profile(profile);
  p->mutable_emulation()->set_scale(scale);
  return spec;
}

// A graph.txt profile at batch 16 (from the file name): an Input node and `layers` layers of
// forward 1 ms, backward 2 ms, with sizes unlike the model's. Named after the running test:
// ctest runs this binary's tests as parallel processes, which must not share a file.
std::string WriteProfile(int layers) {
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "/", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
      "-emu", layers, "-pbs-16.txt");
  std::ofstream f(path);
  f << "node0 -- Input -- forward_compute_time=0.00, backward_compute_time=0.00, "
       "activation_size=1, parameter_size=0\n";
  for (int k = 1; k <= layers; ++k) {
    f << "node" << k << " -- Conv2d(" << k << ") -- forward_compute_time=1.0, "
      << "backward_compute_time=2.0, activation_size=99, parameter_size=7\n";
  }
  for (int k = 0; k < layers; ++k) f << "\tnode" << k << " -- node" << k + 1 << "\n";
  return path;
}

TEST(Emulation, ProfileHasTheFilesScaledTimesAndTheModelsSizes) {
  const std::string path = WriteProfile(4);
  absl::StatusOr<std::optional<v1::ModelProfile>> p = EmulatedProfileOf(Spec(path, 3));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->has_value());
  const v1::ModelProfile& prof = **p;
  EXPECT_EQ(prof.source(), absl::StrCat("emulated: ", path, " x 3"));
  EXPECT_EQ(prof.batch_size(), 16);
  ASSERT_EQ(prof.layers_size(), 4);
  EXPECT_DOUBLE_EQ(prof.layers(1).forward_ms(), 3.0);
  EXPECT_DOUBLE_EQ(prof.layers(1).backward_ms(), 6.0);
  EXPECT_EQ(prof.layers(1).activation_bytes(), 16 * 64 * 4);
  EXPECT_EQ(prof.layers(1).parameter_bytes(), (784 * 64 + 64) * 4);
  EXPECT_EQ(prof.layers(1).name(), "linear (emulated as node2 'Conv2d(2)')");
  EXPECT_EQ(prof.layers(0).activation_bytes(), 16 * 784 * 4);
}

TEST(Emulation, PlanIsMarkedAndPredictsTheProfilesCosts) {
  const std::string path = WriteProfile(4);
  absl::StatusOr<v1::ParallelPlan> plan = MakeJobPlan(Spec(path, 1), PlanInputs());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::ParallelPlanSummary& s = plan->summary();
  EXPECT_TRUE(s.emulated());
  EXPECT_EQ(s.profile_source(), absl::StrCat("emulated: ", path, " x 1"));
  EXPECT_THAT(s.notes(), ::testing::Contains(HasSubstr("emulated devices")));
  // 4 layers of 3 ms (forward + backward) at 16 samples: 2 stages of 6 ms per micro-batch at
  // best, M = 4: a step takes at least (M + P - 1) * 6 ms = 30 ms.
  EXPECT_GE(s.predicted_step_ms(), 30.0 - 1e-9);
}

TEST(Emulation, RefusesAProfileWithAnotherLayerCountNamingBoth) {
  const std::string path = WriteProfile(5);
  absl::StatusOr<std::optional<v1::ModelProfile>> p = EmulatedProfileOf(Spec(path, 1));
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr(absl::StrCat("parallel.emulation.profile ", path,
                                     " has 5 layers (Input nodes excluded) but the model has 4")));
  p = EmulatedProfileOf(Spec("/nonexistent/x-pbs-4.txt", 1));
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("parallel.emulation.profile: "));
  EXPECT_THAT(p.status().message(), HasSubstr("/nonexistent/x-pbs-4.txt"));
}

// The spec Spec() describes, as the YAML a user submits; the profile's value is at 17:24.
std::string SpecYaml(const std::string& profile) {
  return absl::StrCat(R"(name: emu
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: linear, out: 64}
    - {type: relu}
    - {type: linear, out: 10}
training:
  global_batch: 64
  micro_batch: 16
  optimizer: {type: sgd, lr: 0.1}
parallel:
  stages: 2
  devices: 2
  device_type: emulated
  emulation: {profile: )",
                      profile, "}\n");
}

// With the submitted text, every refusal of the profile file starts with the spec's location of
// parallel.emulation.profile, like the parser's refusals (docs/job_spec.md).
TEST(Emulation, RefusalsWithTheSpecTextPointAtTheProfileField) {
  const auto refusal = [](const std::string& profile) {
    const std::string yaml = SpecYaml(profile);
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    const SpecText text{yaml, "job.yaml"};
    absl::StatusOr<std::optional<v1::ModelProfile>> p = EmulatedProfileOf(*spec, &text);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    absl::StatusOr<v1::ParallelPlan> plan = MakeJobPlan(*spec, PlanInputs(), &text);
    EXPECT_EQ(plan.status(), p.status());
    return std::string(p.status().message());
  };
  const std::string five = WriteProfile(5);
  EXPECT_EQ(refusal(five),
            absl::StrCat("job.yaml:17:24: parallel.emulation.profile ", five,
                         " has 5 layers (Input nodes excluded) but the model has 4 "
                         "(model.layers): an emulation profile needs exactly one entry per model "
                         "layer"));
  EXPECT_EQ(refusal("/nonexistent/x-pbs-4.txt"),
            "job.yaml:17:24: parallel.emulation.profile: /nonexistent/x-pbs-4.txt: No such file "
            "or directory");
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(refusal(dir),
            absl::StrCat("job.yaml:17:24: parallel.emulation.profile: ", dir, ": Is a directory"));
  // A good profile with the text is accepted as without it.
  const std::string four = WriteProfile(4);
  const std::string yaml = SpecYaml(four);
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const SpecText text{yaml, "job.yaml"};
  absl::StatusOr<v1::ParallelPlan> plan = MakeJobPlan(*spec, PlanInputs(), &text);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->summary().emulated());
}

TEST(Emulation, OtherJobsAreNotEmulated) {
  v1::JobSpec spec = Spec("", 1);
  spec.mutable_parallel()->set_device_type("cpu");
  spec.mutable_parallel()->clear_emulation();
  absl::StatusOr<std::optional<v1::ModelProfile>> p = EmulatedProfileOf(spec);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->has_value());
  absl::StatusOr<v1::ParallelPlan> plan = MakeJobPlan(spec, PlanInputs());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->summary().emulated());
}

// ---- an emulated job through the service's handlers, by direct calls ----

constexpr int64_t kStart = 1'700'000'000'000;

// MLP 784-64-10 (4 layers), 2 stages on 2 devices, emulated on `profile`.
std::string EmulatedSpec(const std::string& profile) {
  return absl::StrCat(R"(name: emu
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: linear, out: 64}
    - {type: relu}
    - {type: linear, out: 10}
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
training:
  global_batch: 64
  micro_batch: 16
  epochs: 1
  max_steps: 3
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
parallel:
  schedule: dapple
  planner: balanced
  stages: 2
  devices: 2
  device_type: emulated
  emulation: {profile: )",
                      profile, "}\n");
}

class EmulatedJobTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    svc_.reset();
    CoordinatorOptions options;
    options.measure_profiles = false;
    options.db_path = path_;
    options.now_unix_ms = [this] { return now_.load(); };
    options.data_roots.push_back(::testing::TempDir());  // the profiles are written there
    auto svc = CoordinatorService::Create(options);
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
  }

  std::string Register() {
    v1::RegisterWorkerRequest req;
    req.set_hostname("localhost");
    req.set_pid(next_pid_++);
    req.add_devices("cpu");
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(svc_->RegisterWorker(auth::TestJoin(), req, &resp).ok());
    return resp.worker_id();
  }

  std::string path_ = FreshDbPath();
  std::atomic<int64_t> now_{kStart};
  int next_pid_ = 100;
  std::unique_ptr<CoordinatorService> svc_;
};

// A new user saw `dapplectl get` list an emulated job's stage devices as "cpu,cpu" while the
// worker log said "stage 0 on emulated" and the trace "(w-1, emulated)": the plan now says
// emulated too, and each assignment still names the worker's own device.
TEST_F(EmulatedJobTest, PlanDevicesSayEmulatedAndAssignmentsKeepTheWorkersDevice) {
  const std::string w[2] = {Register(), Register()};
  v1::SubmitJobRequest req;
  req.set_spec_yaml(EmulatedSpec(WriteProfile(4)));
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(svc_->SubmitJob(auth::TestAdmin(), req, &resp).ok());
  svc_->Tick();

  v1::GetJobRequest get;
  get.set_job_id(resp.job().id());
  v1::Job job;
  ASSERT_TRUE(svc_->GetJob(auth::TestAdmin(), get, &job).ok());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_TRUE(job.plan().emulated());
  ASSERT_EQ(job.plan().stages_size(), 2);
  for (const v1::PlanStageSummary& stage : job.plan().stages()) {
    EXPECT_THAT(stage.devices(), ::testing::ElementsAre("emulated"));
    EXPECT_THAT(stage.hostnames(), ::testing::ElementsAre("localhost"));
  }

  for (const std::string& worker : w) {
    v1::HeartbeatRequest hb;
    hb.set_worker_id(worker);
    v1::HeartbeatResponse hb_resp;
    ASSERT_TRUE(svc_->Heartbeat(auth::TestWorker((hb).worker_id()), hb, &hb_resp).ok());
    ASSERT_TRUE(hb_resp.has_assignment()) << worker;
    const v1::StageAssignment& a = hb_resp.assignment();
    EXPECT_EQ(a.device(), "cpu") << worker;  // one of the worker's devices (worker.proto)
    EXPECT_TRUE(a.has_emulated_profile());
    EXPECT_THAT(a.plan().stages(a.stage()).devices(), ::testing::ElementsAre("emulated"));
  }
}

// The collective overhead the cluster's real jobs measured (kept in the database) is learned
// from ranks that keep the host's cores busy; an emulated job's ranks wait instead, and its plan
// leaves the overhead out (a new user's emulated job was predicted 87.9 ms with +7.8 of it and
// measured 82.2).
TEST_F(EmulatedJobTest, ItsPlanLeavesOutTheCollectiveOverheadOfComputingJobs) {
  {
    auto store = ProfileStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    v1::CollectiveRefinementState learned;
    learned.add_observations_ms(7.8);
    learned.set_jobs(1);
    ASSERT_TRUE((*store)->SaveCollectives(learned).ok());
  }
  Open();
  Register();
  Register();
  v1::SubmitJobRequest req;
  req.set_spec_yaml(EmulatedSpec(WriteProfile(4)));
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(svc_->SubmitJob(auth::TestAdmin(), req, &resp).ok());
  EXPECT_EQ(resp.job().plan().cluster_source(), "2 registered workers (emulated) on 1 host");
  // The same model computing for real is planned with it.
  v1::PlanJobRequest plan;
  plan.set_spec_yaml(absl::StrReplaceAll(
      EmulatedSpec("x"), {{"  device_type: emulated\n", ""}, {"  emulation: {profile: x}\n", ""}}));
  v1::PlanJobResponse planned;
  ASSERT_TRUE(svc_->PlanJob(auth::TestAdmin(), plan, &planned).ok());
  EXPECT_THAT(planned.plan().cluster_source(),
              HasSubstr("; collectives +7.80 ms each (measured by the steps of 1 job)"));
}

}  // namespace
}  // namespace dapple::coordinator

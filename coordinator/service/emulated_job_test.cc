// An emulated job (parallel.device_type: emulated) through CoordinatorService's handlers, by
// direct calls: what its plan and assignments say about devices.
#include <atomic>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::ElementsAre;

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

// A graph.txt profile at batch 16: an Input node and 4 layers of 1 ms forward, 2 ms backward.
// Named after the running test (ctest runs tests of one binary as parallel processes).
std::string WriteProfile() {
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-pbs-16.txt");
  std::ofstream f(path);
  f << "node0 -- Input -- forward_compute_time=0.00, backward_compute_time=0.00, "
       "activation_size=1, parameter_size=0\n";
  for (int k = 1; k <= 4; ++k) {
    f << "node" << k << " -- Linear(" << k << ") -- forward_compute_time=1.0, "
      << "backward_compute_time=2.0, activation_size=1, parameter_size=1\n";
  }
  for (int k = 0; k < 4; ++k) f << "\tnode" << k << " -- node" << k + 1 << "\n";
  return path;
}

class EmulatedJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.measure_profiles = false;
    options.db_path = path_;
    options.now_unix_ms = [this] { return now_.load(); };
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
    EXPECT_TRUE(svc_->RegisterWorker(req, &resp).ok());
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
  req.set_spec_yaml(EmulatedSpec(WriteProfile()));
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(svc_->SubmitJob(req, &resp).ok());
  svc_->Tick();

  v1::GetJobRequest get;
  get.set_job_id(resp.job().id());
  v1::Job job;
  ASSERT_TRUE(svc_->GetJob(get, &job).ok());
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_TRUE(job.plan().emulated());
  ASSERT_EQ(job.plan().stages_size(), 2);
  for (const v1::PlanStageSummary& stage : job.plan().stages()) {
    EXPECT_THAT(stage.devices(), ElementsAre("emulated"));
    EXPECT_THAT(stage.hostnames(), ElementsAre("localhost"));
  }

  for (const std::string& worker : w) {
    v1::HeartbeatRequest hb;
    hb.set_worker_id(worker);
    v1::HeartbeatResponse hb_resp;
    ASSERT_TRUE(svc_->Heartbeat(hb, &hb_resp).ok());
    ASSERT_TRUE(hb_resp.has_assignment()) << worker;
    const v1::StageAssignment& a = hb_resp.assignment();
    EXPECT_EQ(a.device(), "cpu") << worker;  // one of the worker's devices (worker.proto)
    EXPECT_TRUE(a.has_emulated_profile());
    EXPECT_THAT(a.plan().stages(a.stage()).devices(), ElementsAre("emulated"));
  }
}

}  // namespace
}  // namespace dapple::coordinator

// Checkpoint state of the CUDA backend (ExportState / ImportState, stage_backend.h): a state
// exported after some steps and imported into a fresh backend exports back bit for bit, the
// resumed stage's next step gives the loss of the uninterrupted one, and a wrong tensor is
// refused by name. One P = 1 stage of a small MLP; well under a second of GPU work. Skipped
// without a GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/schedule/lowering.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/device.h"
#include "worker/runtime/cuda/cuda_stage_backend.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;

class CudaStageStateTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (ProbeCuda().count == 0) GTEST_SKIP() << "no GPU: " << ProbeCuda().reason;
    parity::SpecOptions o;
    o.global_batch = 64;
    o.micro_batch = 32;
    o.optimizer = GetParam();
    o.hidden1 = 64;
    o.hidden2 = 32;
    o.seed = 5;
    spec_ = parity::ParitySpec(o);
    plan_ = parity::UniformPlan(spec_.model().layers_size(), 1);
    programs_ = schedule::BuildPrograms(schedule::ScheduleKind::kDapple, 1, 2).value();
  }

  // A P = 1 runtime on its own CudaDevice handle (kept in devices_).
  std::unique_ptr<StageRuntime> NewRuntime() {
    auto dev = CudaDevice::Open(0);
    EXPECT_TRUE(dev.ok()) << dev.status();
    if (!dev.ok()) return nullptr;
    devices_.push_back(std::move(*dev));
    auto backend =
        MakeCudaStageBackend(spec_, 0, spec_.model().layers_size() - 1, devices_.back().get());
    EXPECT_TRUE(backend.ok()) << backend.status();
    if (!backend.ok()) return nullptr;
    auto rt =
        StageRuntime::Create(parity::Assignment(spec_, plan_, 0, programs_[0]), &parity::TrainSet(),
                             &parity::TestSet(), nullptr, std::move(*backend));
    EXPECT_TRUE(rt.ok()) << rt.status();
    return rt.ok() ? std::move(*rt) : nullptr;
  }

  v1::JobSpec spec_;
  v1::ParallelPlanSummary plan_;
  std::vector<v1::RankProgram> programs_;
  std::vector<std::unique_ptr<CudaDevice>> devices_;
};

void ExpectSameTensors(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].shape, want[i].shape) << got[i].name;
    ASSERT_EQ(got[i].data.size(), want[i].data.size()) << got[i].name;
    for (size_t j = 0; j < got[i].data.size(); ++j) {
      // Bitwise: the values only travelled through memcpy.
      if (std::memcmp(&got[i].data[j], &want[i].data[j], sizeof(float)) != 0) {
        ADD_FAILURE() << got[i].name << "[" << j << "]: got " << got[i].data[j] << ", expected "
                      << want[i].data[j];
        break;
      }
    }
  }
}

TEST_P(CudaStageStateTest, RoundTripAndResume) {
  std::unique_ptr<StageRuntime> a = NewRuntime();
  ASSERT_NE(a, nullptr);
  for (int64_t step = 0; step < 2; ++step) ASSERT_TRUE(a->RunStep(step).ok());
  absl::StatusOr<StageState> saved = a->backend().ExportState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->optimizer_steps, 2);
  const size_t states = GetParam() == "sgd" ? 1 : 2;
  EXPECT_EQ(saved->optimizer_state.size(), states * saved->params.size());
  EXPECT_EQ(saved->params[0].name, "layer1.weight");
  EXPECT_EQ(saved->optimizer_state[0].name,
            GetParam() == "sgd" ? "layer1.weight.momentum" : "layer1.weight.adam_m");
  // After two updates the state is not all zero (a test that exports zeros would pass anyway).
  double norm = 0;
  for (float v : saved->optimizer_state[0].data) norm += std::fabs(v);
  EXPECT_GT(norm, 0);

  std::unique_ptr<StageRuntime> b = NewRuntime();
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->backend().ImportState(*saved).ok());
  absl::StatusOr<StageState> back = b->backend().ExportState();
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameTensors(back->params, saved->params);
  ExpectSameTensors(back->optimizer_state, saved->optimizer_state);
  EXPECT_EQ(back->optimizer_steps, 2);

  // Step 3 of the resumed stage against step 3 of the uninterrupted one, same device and
  // kernels: only a difference in the imported state could move the loss.
  absl::StatusOr<StepResult> ra = a->RunStep(2);
  absl::StatusOr<StepResult> rb = b->RunStep(2);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_NEAR(rb->loss, ra->loss, 1e-6 * std::fabs(ra->loss))
      << "resumed " << rb->loss << ", uninterrupted " << ra->loss;
}

TEST_P(CudaStageStateTest, RefusesWrongTensorsByName) {
  std::unique_ptr<StageRuntime> a = NewRuntime();
  ASSERT_NE(a, nullptr);
  absl::StatusOr<StageState> state = a->backend().ExportState();
  ASSERT_TRUE(state.ok()) << state.status();
  StageState bad = *state;
  bad.params[0].shape[0] += 1;
  absl::Status s = a->backend().ImportState(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("layer1.weight has shape"));
  bad = *state;
  bad.optimizer_state.pop_back();
  s = a->backend().ImportState(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("checkpoint has no tensor layer"));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CudaStageStateTest, ::testing::Values("sgd", "adamw"));

}  // namespace
}  // namespace dapple::worker

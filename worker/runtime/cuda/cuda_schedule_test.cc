// The zero-bubble split (BackwardInput / BackwardWeight: schedules zb-h1, zb-h2) and activation
// recomputation on the CUDA backend, against the single-device CPU reference within 1e-5
// relative (per-step loss and final weights; fp32 GEMMs without TF32, only summation order
// differs): the MLP through the pipeline runtime with the coordinator's programs (P = 2 and 4
// stages on threads of one process, all on cuda:0, exchanging through the in-memory device
// transport), and the small GPT of gpt_parity_testing.h (live dropout, tied LM head) through the
// backend alone; the split bitwise the whole backward on the GPU. bf16: the split and the replay
// round like the whole backward (the first steps within 1% of fp32's losses) and train. Batch
// norm under recomputation: cuda_stage_backend_test's CnnStage tests. Skipped without a GPU.
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/schedule/lowering.h"
#include "gtest/gtest.h"
#include "worker/device/device.h"
#include "worker/runtime/cuda/cuda_stage_backend.h"
#include "worker/runtime/cuda/cuda_testing.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/gpt_parity_testing.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

struct Case {
  schedule::ScheduleKind kind;
  int stages;         // P
  int micro_batches;  // M
  bool recompute;     // every stage
  std::string optimizer;
};

std::string CaseName(const Case& c) {
  // gtest names take no '-': "zb-h1" becomes "zb_h1".
  return absl::StrCat(absl::StrReplaceAll(schedule::ScheduleKindName(c.kind), {{"-", "_"}}), "_P",
                      c.stages, "_M", c.micro_batches, c.recompute ? "_recompute_" : "_",
                      c.optimizer);
}

class CudaScheduleParityTest : public GpuParamTest<Case> {};

// The runtimes of `spec` on P CUDA stages of cuda:0 under `kind`'s programs, each stage
// recomputing when `recompute`. Empty (with a gtest failure) when one cannot be made.
struct GpuPipeline {
  DeviceMailbox box;
  std::vector<std::unique_ptr<CudaDevice>> devices;
  std::vector<std::unique_ptr<DeviceTestTransport>> transports;
  std::vector<std::unique_ptr<StageRuntime>> runtimes;
};

std::unique_ptr<GpuPipeline> MakeGpuPipeline(const v1::JobSpec& spec, schedule::ScheduleKind kind,
                                             int stages, int micro_batches, bool recompute) {
  auto programs = schedule::BuildPrograms(kind, stages, micro_batches);
  EXPECT_TRUE(programs.ok()) << programs.status();
  if (!programs.ok()) return nullptr;
  v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), stages);
  for (v1::PlanStageSummary& stage : *plan.mutable_stages()) stage.set_recompute(recompute);
  auto p = std::make_unique<GpuPipeline>();
  for (int s = 0; s < stages; ++s) {
    auto dev = CudaDevice::Open(0);
    EXPECT_TRUE(dev.ok()) << dev.status();
    if (!dev.ok()) return nullptr;
    p->devices.push_back(std::move(*dev));
    p->transports.push_back(
        std::make_unique<DeviceTestTransport>(&p->box, s, p->devices.back().get()));
    auto backend =
        MakeCudaStageBackend(spec, plan.stages(s).first_layer(), plan.stages(s).last_layer(),
                             p->devices.back().get(), recompute);
    EXPECT_TRUE(backend.ok()) << backend.status();
    if (!backend.ok()) return nullptr;
    auto rt =
        StageRuntime::Create(parity::Assignment(spec, plan, s, (*programs)[s]), &parity::TrainSet(),
                             &parity::TestSet(), p->transports.back().get(), std::move(*backend));
    EXPECT_TRUE(rt.ok()) << rt.status();
    if (!rt.ok()) return nullptr;
    p->runtimes.push_back(std::move(*rt));
  }
  return p;
}

// SGD cases take micro-batches of 8 samples (any M); AdamW ones a global batch of 128 (M must
// divide it), as CudaParityTest: Adam divides each gradient element by its own root mean
// square, so where a small batch leaves an element's gradient at rounding-noise size, two correct
// fp32 summation orders step it differently by O(lr) (on an H200 at 8 samples per micro-batch:
// 1.1e-5 to 1.6e-5 relative in the first layer's weights after 4 steps;
// SplitBackwardIsTheWholeBackwardBitwise below shows the split itself adds nothing).
v1::JobSpec MlpSpec(const Case& c) {
  parity::SpecOptions o;
  o.micro_batch = c.optimizer == "adamw" ? 128 / c.micro_batches : 8;
  o.global_batch = o.micro_batch * c.micro_batches;
  o.optimizer = c.optimizer;
  o.weight_decay = c.optimizer == "sgd" ? 1e-4 : 0.01;
  o.hidden1 = 128;
  o.hidden2 = 64;
  o.extra_blocks = c.stages > 2 ? 1 : 0;  // 8 layers: two per stage at P = 4
  o.seed = 13;
  return parity::ParitySpec(o);
}

TEST_P(CudaScheduleParityTest, MatchesCpuReference) {
  const Case c = GetParam();
  constexpr int kSteps = 4;
  const v1::JobSpec spec = MlpSpec(c);
  std::unique_ptr<GpuPipeline> p =
      MakeGpuPipeline(spec, c.kind, c.stages, c.micro_batches, c.recompute);
  ASSERT_NE(p, nullptr);
  parity::PipelineRun run = parity::RunPipeline(p->runtimes, kSteps);
  parity::ExpectMatchesReference(spec, kSteps, p->runtimes, run);
}

std::vector<Case> Cases() {
  using schedule::ScheduleKind;
  return {
      {ScheduleKind::kZbH1, 2, 2, false, "sgd"},    {ScheduleKind::kZbH1, 2, 5, false, "sgd"},
      {ScheduleKind::kZbH1, 2, 4, false, "adamw"},  {ScheduleKind::kZbH2, 2, 8, false, "sgd"},
      {ScheduleKind::kZbH1, 4, 8, false, "adamw"},  {ScheduleKind::kZbH2, 4, 9, false, "sgd"},
      {ScheduleKind::kDapple, 2, 4, true, "adamw"}, {ScheduleKind::kGPipe, 2, 5, true, "sgd"},
      {ScheduleKind::kDapple, 4, 8, true, "sgd"},
  };
}

INSTANTIATE_TEST_SUITE_P(All, CudaScheduleParityTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return CaseName(info.param); });

// The split backward computes the whole backward's numbers: the same kernels on the same inputs,
// and zb-h1 / zb-h2 run their BACKWARD_WEIGHTs in micro-batch order, so the gradients add in
// 1F1B's order. Per-step losses and final weights bitwise those of dapple on the GPU, under
// AdamW on small micro-batches (where the comparison with the CPU is noise-bound, above).
TEST(CudaScheduleTest, SplitBackwardIsTheWholeBackwardBitwise) {
  if (ProbeCuda().count == 0) GTEST_SKIP() << "no GPU: " << ProbeCuda().reason;
  constexpr int kSteps = 4;
  parity::SpecOptions o;
  o.micro_batch = 8;
  o.global_batch = 40;  // M = 5
  o.optimizer = "adamw";
  o.weight_decay = 0.01;
  o.hidden1 = 128;
  o.hidden2 = 64;
  o.seed = 13;
  const v1::JobSpec spec = parity::ParitySpec(o);
  auto weights = [](GpuPipeline& p) {
    std::map<std::string, std::vector<float>> out;
    for (auto& rt : p.runtimes) {
      auto params = rt->Params();
      EXPECT_TRUE(params.ok()) << params.status();
      if (!params.ok()) continue;
      for (const kernels::Param* param : *params) out[param->name] = param->value.data;
    }
    return out;
  };
  std::unique_ptr<GpuPipeline> whole =
      MakeGpuPipeline(spec, schedule::ScheduleKind::kDapple, 2, 5, false);
  ASSERT_NE(whole, nullptr);
  const parity::PipelineRun want = parity::RunPipeline(whole->runtimes, kSteps);
  for (const absl::Status& st : want.status) ASSERT_TRUE(st.ok()) << st;
  const std::map<std::string, std::vector<float>> want_weights = weights(*whole);
  ASSERT_FALSE(want_weights.empty());
  for (auto kind : {schedule::ScheduleKind::kZbH1, schedule::ScheduleKind::kZbH2}) {
    SCOPED_TRACE(schedule::ScheduleKindName(kind));
    std::unique_ptr<GpuPipeline> split = MakeGpuPipeline(spec, kind, 2, 5, false);
    ASSERT_NE(split, nullptr);
    const parity::PipelineRun got = parity::RunPipeline(split->runtimes, kSteps);
    for (const absl::Status& st : got.status) ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(got.losses, want.losses);
    const std::map<std::string, std::vector<float>> got_weights = weights(*split);
    ASSERT_EQ(got_weights.size(), want_weights.size());
    for (const auto& [name, values] : want_weights) {
      auto it = got_weights.find(name);
      ASSERT_NE(it, got_weights.end()) << name;
      int64_t differ = 0;
      for (size_t i = 0; i < values.size(); ++i) differ += it->second[i] != values[i];
      EXPECT_EQ(differ, 0) << name << ": " << differ << " of " << values.size()
                           << " weights differ from the whole backward's";
    }
  }
}

// bf16 (training.precision): the split backward and the replayed forward keep the stage
// boundary in fp32 and round as the whole backward does. As CudaBf16MlpTest
// (cuda_stage_backend_test.cc, which says why not the loss after the run): the first 5 steps'
// losses within 1% of the fp32 run's (bf16's rounding alone), and the bf16 run trains.
TEST(CudaScheduleBf16Test, SplitAndRecomputeRoundLikeFp32AndTrain) {
  if (ProbeCuda().count == 0) GTEST_SKIP() << "no GPU: " << ProbeCuda().reason;
  constexpr int kSteps = 30;
  for (const Case& c : {Case{schedule::ScheduleKind::kZbH2, 2, 4, false, "adamw"},
                        Case{schedule::ScheduleKind::kDapple, 2, 4, true, "adamw"}}) {
    parity::PipelineRun runs[2];
    for (int bf16 = 0; bf16 < 2; ++bf16) {
      // CudaBf16MlpTest's model and batch.
      parity::SpecOptions o;
      o.global_batch = 128;
      o.micro_batch = 128 / c.micro_batches;
      o.optimizer = c.optimizer;
      o.hidden1 = 256;
      o.hidden2 = 128;
      o.seed = 3;
      v1::JobSpec spec = parity::ParitySpec(o);
      spec.mutable_parallel()->set_device_type("cuda");
      if (bf16 == 1) spec.mutable_training()->set_precision("bf16");
      std::unique_ptr<GpuPipeline> p =
          MakeGpuPipeline(spec, c.kind, c.stages, c.micro_batches, c.recompute);
      ASSERT_NE(p, nullptr) << CaseName(c);
      runs[bf16] = parity::RunPipeline(p->runtimes, kSteps);
      for (const absl::Status& st : runs[bf16].status) {
        ASSERT_TRUE(st.ok()) << CaseName(c) << ": " << st;
      }
    }
    const std::vector<double>& got = runs[1].losses;
    const std::vector<double>& want = runs[0].losses;
    ASSERT_EQ(got.size(), want.size()) << CaseName(c);
    ASSERT_GE(want.size(), 5u) << CaseName(c);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(std::isfinite(got[i])) << CaseName(c) << " step " << i + 1;
      if (i < 5) {
        EXPECT_NEAR(got[i] / want[i], 1.0, 0.01) << CaseName(c) << " step " << i + 1;
      }
    }
    std::cout << "  " << CaseName(c) << ": test loss bf16 " << runs[1].eval_loss << " fp32 "
              << runs[0].eval_loss << "\n";
    EXPECT_GT(runs[1].eval_loss, 0) << CaseName(c);
    EXPECT_LT(runs[1].eval_loss, 0.5 * got.front()) << CaseName(c) << ": bf16 did not train";
  }
}

struct GptCase {
  std::string name;
  std::vector<bool> recompute;  // per stage (two stages: embedding + block | the rest)
  int micro_batches;
  bool split;  // BackwardInput of every micro-batch, then every BackwardWeight
};

class CudaGptScheduleTest : public GpuParamTest<GptCase> {};

// The GPT (embedding, transformer blocks with live dropout, layernorm, the head tied to the
// embedding on another stage) on two CUDA stages: per-step and evaluation loss and every weight
// within 1e-5 relative of the CPU reference, with the split backward (every micro-batch's B,
// then every W: the longest a slot keeps its B's state) or recomputing stages (the replay must
// drop exactly the first forward's dropout elements).
TEST_P(CudaGptScheduleTest, MatchesCpuReference) {
  const GptCase& c = GetParam();
  parity::GptOptions o;
  o.global_batch = 40;  // divisible by every M below
  const v1::JobSpec spec = parity::GptSpec(o);
  constexpr int kSteps = 3;
  absl::StatusOr<parity::Run> want = parity::TrainReference(spec, kSteps);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<std::unique_ptr<CudaDevice>> devices;  // outlive the pipeline's backends
  parity::Pipeline p;
  p.first_layers = {0, 2};
  for (int s = 0; s < 2; ++s) {
    const int last = s == 0 ? 1 : spec.model().layers_size() - 1;
    auto dev = CudaDevice::Open(0);
    ASSERT_TRUE(dev.ok()) << dev.status();
    devices.push_back(std::move(*dev));
    auto stage =
        MakeCudaStageBackend(spec, p.first_layers[s], last, devices.back().get(), c.recompute[s]);
    ASSERT_TRUE(stage.ok()) << stage.status();
    p.stages.push_back(std::move(*stage));
  }
  absl::StatusOr<parity::Run> got =
      parity::TrainPipeline(spec, p, kSteps, c.micro_batches, AnyCopy, c.split);
  ASSERT_TRUE(got.ok()) << got.status();
  parity::ExpectGptMatchesReference(spec, *got, *want);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaGptScheduleTest,
                         ::testing::Values(GptCase{"SplitM4", {false, false}, 4, true},
                                           GptCase{"SplitM1", {false, false}, 1, true},
                                           GptCase{"RecomputeBothM5", {true, true}, 5, false},
                                           GptCase{"RecomputeFirstM8", {true, false}, 8, false}),
                         [](const auto& info) { return info.param.name; });

// A recomputing stage cannot split its backward (its replay set holds one micro-batch): the
// backend says so instead of training wrongly (submission refuses the pair first).
TEST(CudaScheduleTest, RecomputingStageRefusesTheSplit) {
  if (ProbeCuda().count == 0) GTEST_SKIP() << "no GPU: " << ProbeCuda().reason;
  const v1::JobSpec spec = MlpSpec(Case{schedule::ScheduleKind::kDapple, 1, 1, true, "sgd"});
  auto dev = CudaDevice::Open(0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto b = MakeCudaStageBackend(spec, 0, spec.model().layers_size() - 1, dev->get(), true);
  ASSERT_TRUE(b.ok()) << b.status();
  const absl::Status s = (*b)->BackwardInput(0, 0, 8, true, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace dapple::worker

// The GPT parity harness (testing/gpt_parity_testing.h) on CPU stages: a small GPT with live
// dropout and a tied LM head, split into two stages (the head's copy of the embedding table on
// the second, its gradient summed with the owner's) and into micro-batches, trains like one CPU
// backend holding the whole model and batch (1e-5 relative). The GPU stages run the same
// harness in worker/runtime/cuda/cuda_stage_backend_test.cc.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/runtime/testing/gpt_parity_testing.h"

namespace dapple::worker {
namespace {

absl::Status HostCopy(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

class GptParityTest : public ::testing::TestWithParam<bool> {};

// With GetParam() the zero-bubble split: every micro-batch's BackwardInput, then every
// BackwardWeight, through every GPT layer (embedding with dropout, transformer blocks, layer
// norm, the tied head).
TEST_P(GptParityTest, TwoCpuStagesAndMicroBatchesTrainLikeOneDevice) {
  const v1::JobSpec spec = parity::GptSpec(parity::GptOptions{});
  constexpr int kSteps = 3;
  absl::StatusOr<parity::Run> want = parity::TrainReference(spec, kSteps);
  ASSERT_TRUE(want.ok()) << want.status();
  // Learning happens: the loss falls below uniform guessing, ln(vocab) = 3.18.
  EXPECT_LT(want->losses.back(), want->losses.front());

  parity::Pipeline p;
  p.first_layers = {0, 2};  // embedding + block | block, layernorm, tied head
  for (int s = 0; s < 2; ++s) {
    const int last = s == 0 ? 1 : spec.model().layers_size() - 1;
    auto stage = MakeCpuStageBackend(spec, p.first_layers[s], last);
    ASSERT_TRUE(stage.ok()) << stage.status();
    p.stages.push_back(std::move(*stage));
  }
  absl::StatusOr<parity::Run> got = parity::TrainPipeline(spec, p, kSteps, 4, HostCopy, GetParam());
  ASSERT_TRUE(got.ok()) << got.status();
  parity::ExpectGptMatchesReference(spec, *got, *want);
}

INSTANTIATE_TEST_SUITE_P(Backward, GptParityTest, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "Split" : "Whole");
});

// Activation recomputation (layer_recompute.h): stages that keep only their inputs and run each
// micro-batch's forward again before its backward train exactly like the reference, live
// dropout included (its masks are a pure function of the ForwardContext the replay reuses).
// The harness runs every forward before every backward (GPipe's order), so all M micro-batches
// share the one scratch set between their forward and their backward.
struct RecomputeCase {
  std::vector<int> first_layers;  // P stages
  int micro_batches;              // M
  std::vector<bool> recompute;    // per stage
};

std::string RecomputeCaseName(const RecomputeCase& c) {
  std::string pattern;
  for (bool r : c.recompute) pattern += r ? "R" : "K";
  return absl::StrCat("P", c.first_layers.size(), "_M", c.micro_batches, "_", pattern);
}

class GptRecomputeParityTest : public ::testing::TestWithParam<RecomputeCase> {};

TEST_P(GptRecomputeParityTest, RecomputingStagesTrainLikeOneDevice) {
  const RecomputeCase& c = GetParam();
  parity::GptOptions o;
  // Divisible by every M of the cases of its P: {2, 5, 8} and {4, 9, 8}.
  o.global_batch = c.first_layers.size() == 2 ? 40 : 72;
  const v1::JobSpec spec = parity::GptSpec(o);
  constexpr int kSteps = 2;
  absl::StatusOr<parity::Run> want = parity::TrainReference(spec, kSteps);
  ASSERT_TRUE(want.ok()) << want.status();
  parity::Pipeline p;
  p.first_layers = c.first_layers;
  const int stages = static_cast<int>(c.first_layers.size());
  for (int s = 0; s < stages; ++s) {
    const int last = s + 1 < stages ? c.first_layers[s + 1] - 1 : spec.model().layers_size() - 1;
    auto stage = MakeCpuStageBackend(spec, c.first_layers[s], last, c.recompute[s]);
    ASSERT_TRUE(stage.ok()) << stage.status();
    p.stages.push_back(std::move(*stage));
  }
  absl::StatusOr<parity::Run> got =
      parity::TrainPipeline(spec, p, kSteps, c.micro_batches, HostCopy);
  ASSERT_TRUE(got.ok()) << got.status();
  parity::ExpectGptMatchesReference(spec, *got, *want);
}

std::vector<RecomputeCase> RecomputeCases() {
  std::vector<RecomputeCase> cases;
  // embedding + block | block, layernorm, tied head; then one stage per layer but the last two.
  for (int m : {2, 5, 8}) cases.push_back({{0, 2}, m, {true, true}});
  for (int m : {4, 9, 8}) cases.push_back({{0, 1, 2, 3}, m, {true, true, true, true}});
  cases.push_back({{0, 1, 2, 3}, 8, {true, false, true, false}});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, GptRecomputeParityTest, ::testing::ValuesIn(RecomputeCases()),
                         [](const auto& info) { return RecomputeCaseName(info.param); });

}  // namespace
}  // namespace dapple::worker

// The GPT parity harness (testing/gpt_parity_testing.h) on CPU stages: a small GPT with live
// dropout and a tied LM head, split into two stages (the head's copy of the embedding table on
// the second, its gradient summed with the owner's) and into micro-batches, trains like one CPU
// backend holding the whole model and batch (1e-5 relative). The GPU stages run the same
// harness in worker/runtime/cuda/cuda_stage_backend_test.cc.
#include <cstring>
#include <string>

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

}  // namespace
}  // namespace dapple::worker

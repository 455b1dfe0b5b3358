#include "worker/runtime/emulated_stage_backend.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/model_info.h"
#include "common/testing/assert_ok.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records what the backend asks to wait; never sleeps (a unit test times nothing).
class RecordingSleeper : public Sleeper {
 public:
  explicit RecordingSleeper(std::vector<double>* ms) : ms_(ms) {}
  absl::Status Sleep(absl::Duration d) override {
    ms_->push_back(absl::ToDoubleMilliseconds(d));
    return absl::OkStatus();
  }

 private:
  std::vector<double>* ms_;
};

// MLP 784-64-10 on [1, 28, 28]: flatten, linear 64, relu, linear 10.
v1::JobSpec Spec() {
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
  spec.mutable_training()->set_seed(1);
  v1::OptimizerSpec* opt = spec.mutable_training()->mutable_optimizer();
  opt->set_type("sgd");
  opt->set_lr(0.1);
  opt->set_momentum(0.9);
  return spec;
}

// Layer k: forward k + 1 ms, backward 2 (k + 1) ms, optimizer 0.5 ms, at 32 samples; an Input
// node first (dropped).
v1::ModelProfile Profile() {
  v1::ModelProfile p;
  p.set_batch_size(32);
  v1::LayerProfile* in = p.add_layers();
  in->set_name("Input");
  in->set_input(true);
  in->set_forward_ms(100);  // never waited: Input nodes are data loading
  for (int k = 0; k < 4; ++k) {
    v1::LayerProfile* l = p.add_layers();
    l->set_forward_ms(k + 1);
    l->set_backward_ms(2 * (k + 1));
    l->set_optimizer_ms(0.5);
  }
  return p;
}

TEST(EmulatedStageBackend, WaitsTheStageLayersProfiledTimesScaledByRows) {
  std::vector<double> ms;
  auto b_or =
      MakeEmulatedStageBackend(Spec(), 1, 3, Profile(), std::make_unique<RecordingSleeper>(&ms));
  ASSERT_TRUE(b_or.ok()) << b_or.status();
  std::unique_ptr<StageBackend> b = std::move(*b_or);
  EXPECT_EQ(b->device(), "emulated");
  EXPECT_FALSE(b->device_memory());
  ASSERT_OK(b->Input(0, 16).status());
  ASSERT_OK(b->Forward(0, 16, kernels::ForwardContext{}));  // layers 1..3: (2 + 3 + 4) ms * 16 / 32
  ASSERT_OK(b->GradInput(0, 16).status());
  ASSERT_OK(b->Backward(0, 0, 16, /*last_stage=*/false, /*need_dx=*/true));  // 18 ms * 0.5
  EXPECT_EQ(b->OptimizerUpdates(), 0);
  ASSERT_OK(b->OptimizerStep());        // 3 layers * 0.5 ms, whatever the rows
  EXPECT_EQ(b->OptimizerUpdates(), 1);  // counted as a real update (checkpoints, lr schedule)
  ASSERT_OK(b->Input(1, 64).status());
  ASSERT_OK(b->Forward(1, 64, kernels::ForwardContext{}));  // 9 ms * 2
  ASSERT_EQ(ms.size(), 4u);
  EXPECT_THAT(ms, ElementsAre(DoubleNear(4.5, 1e-9), DoubleNear(9.0, 1e-9), DoubleNear(1.5, 1e-9),
                              DoubleNear(18.0, 1e-9)));
}

// The zero-bubble split waits the two halves of the backward (schedule::kBackwardWeightFraction)
// and keeps the inner layers' output gradients per slot until the weight part, as the CPU
// backend does.
TEST(EmulatedStageBackend, SplitBackwardWaitsTheTwoHalves) {
  std::vector<double> ms;
  auto b_or =
      MakeEmulatedStageBackend(Spec(), 1, 3, Profile(), std::make_unique<RecordingSleeper>(&ms));
  ASSERT_TRUE(b_or.ok()) << b_or.status();
  std::unique_ptr<StageBackend> b = std::move(*b_or);
  ASSERT_OK(b->Input(0, 16).status());
  ASSERT_OK(b->Forward(0, 16, kernels::ForwardContext{}));
  ASSERT_OK(b->GradInput(0, 16).status());
  const int64_t before = b->Held().activations;
  ASSERT_OK(b->BackwardInput(0, 0, 16, /*last_stage=*/false, /*need_dx=*/true));  // 18 * 0.5 / 2
  // dL/d input (784 floats per sample) to send, and layers 1 and 2's output gradients (64 + 64
  // floats per sample) kept for the weight part.
  EXPECT_EQ(b->Held().activations - before, 16 * (784 + 64 + 64) * 4);
  ASSERT_OK(b->BackwardWeight(0, 0, 16, /*last_stage=*/false));
  EXPECT_EQ(b->BackwardWeight(0, 0, 16, false).code(), absl::StatusCode::kInternal);
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_THAT(ms, ElementsAre(DoubleNear(4.5, 1e-9), DoubleNear(4.5, 1e-9), DoubleNear(4.5, 1e-9)));
}

TEST(EmulatedStageBackend, RecomputationWaitsTheForwardAgainBeforeTheBackward) {
  std::vector<double> ms;
  auto b_or = MakeEmulatedStageBackend(Spec(), 1, 3, Profile(),
                                       std::make_unique<RecordingSleeper>(&ms), /*recompute=*/true);
  ASSERT_TRUE(b_or.ok()) << b_or.status();
  std::unique_ptr<StageBackend> b = std::move(*b_or);
  ASSERT_OK(b->Input(0, 16).status());
  ASSERT_OK(b->Forward(0, 16, kernels::ForwardContext{}));  // (2 + 3 + 4) ms * 16 / 32
  ASSERT_OK(b->GradInput(0, 16).status());
  ASSERT_OK(b->Backward(0, 0, 16, /*last_stage=*/false, /*need_dx=*/true));  // 4.5, then 9
  EXPECT_THAT(ms, ElementsAre(DoubleNear(4.5, 1e-9), DoubleNear(4.5, 1e-9), DoubleNear(9.0, 1e-9)));
}

// Three micro-batches in flight: without recomputation each slot holds its inner outputs and
// saved bytes; with it, one scratch set holds them (and the output) for all.
TEST(EmulatedStageBackend, RecomputationHoldsOneScratchSetInsteadOfOnePerSlot) {
  absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(Spec().model());
  ASSERT_TRUE(infos.ok()) << infos.status();
  const int64_t out = (*infos)[3].output_bytes;
  const int64_t kept = StageActivationBytesPerSample(*infos, 1, 3) - InputBytes((*infos)[1]) - out;
  ASSERT_GT(kept, 0);
  constexpr int kSlots = 3;
  constexpr int64_t kRows = 16;
  int64_t held[2];
  for (bool recompute : {false, true}) {
    std::vector<double> ms;
    auto b = MakeEmulatedStageBackend(Spec(), 1, 3, Profile(),
                                      std::make_unique<RecordingSleeper>(&ms), recompute);
    ASSERT_TRUE(b.ok()) << b.status();
    for (int slot = 0; slot < kSlots; ++slot) {
      ASSERT_OK((*b)->Input(slot, kRows).status());
      ASSERT_OK((*b)->Forward(slot, kRows, kernels::ForwardContext{}));
    }
    held[recompute] = (*b)->Held().activations;
  }
  EXPECT_EQ(held[0] - held[1], kSlots * kRows * kept - kRows * (kept + out));
}

TEST(EmulatedStageBackend, BuffersAndGradientsHaveTheModelsRealSizes) {
  std::vector<double> ms;
  // Stage 1 of 2: layers 2..3 (relu, linear 64 -> 10).
  auto b_or =
      MakeEmulatedStageBackend(Spec(), 2, 3, Profile(), std::make_unique<RecordingSleeper>(&ms));
  ASSERT_TRUE(b_or.ok()) << b_or.status();
  std::unique_ptr<StageBackend> b = std::move(*b_or);
  EXPECT_EQ(b->GradientFloats(), 64 * 10 + 10);
  auto params_or = b->HostParams();
  ASSERT_TRUE(params_or.ok()) << params_or.status();
  std::vector<kernels::Param*> params = std::move(*params_or);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "layer3.weight");
  EXPECT_EQ(params[0]->value.numel() + params[1]->value.numel(), 650);

  // The input buffer holds rows x 64 floats: the whole buffer is writable (a receive fills it).
  auto in_or = b->Input(0, 8);
  ASSERT_TRUE(in_or.ok()) << in_or.status();
  void* in = std::move(*in_or);
  static_cast<float*>(in)[8 * 64 - 1] = 1.0f;
  ASSERT_OK(b->Forward(0, 8, kernels::ForwardContext{}));
  int64_t correct = -1;
  auto loss_or = b->Loss(0, nullptr, 8, 1.0f, true, &correct);
  ASSERT_TRUE(loss_or.ok()) << loss_or.status();
  double loss = std::move(*loss_or);
  EXPECT_DOUBLE_EQ(loss, 8 * kEmulatedLossPerSample);
  EXPECT_EQ(correct, 0);
  auto out_or = b->OutputForSend(0, 5, 8);
  ASSERT_TRUE(out_or.ok()) << out_or.status();
  const void* out = std::move(*out_or);
  EXPECT_NE(out, nullptr);
  ASSERT_OK(b->Backward(0, 0, 8, /*last_stage=*/true, /*need_dx=*/true));
  EXPECT_EQ(static_cast<const float*>(b->GradForSend(0))[8 * 64 - 1], 0.0f);  // rows x 64

  std::vector<float> grads(b->GradientFloats(), 7.0f);
  ASSERT_OK(b->ReadGradients(grads.data()));
  for (float g : grads) ASSERT_EQ(g, 0.0f);
  ASSERT_OK(b->WriteGradients(grads.data()));

  auto state_or = b->ExportState();
  ASSERT_TRUE(state_or.ok()) << state_or.status();
  StageState state = std::move(*state_or);
  EXPECT_EQ(state.params.size(), 2u);
  EXPECT_EQ(state.optimizer_state.size(), 2u);  // sgd momentum: one array per parameter
  ASSERT_OK(b->ImportState(state));
  state.params.pop_back();
  EXPECT_FALSE(b->ImportState(state).ok());
}

TEST(EmulatedStageBackend, OutputAndMessagesReadBackAsTheInterfaceSays) {
  std::vector<double> ms;
  auto b_or =
      MakeEmulatedStageBackend(Spec(), 2, 3, Profile(), std::make_unique<RecordingSleeper>(&ms));
  ASSERT_TRUE(b_or.ok()) << b_or.status();
  std::unique_ptr<StageBackend> b = std::move(*b_or);
  ASSERT_TRUE(b->Input(0, 2).ok());
  ASSERT_OK(b->Forward(0, 2, kernels::ForwardContext{}));
  // Nothing is computed: the output [2, 10] reads back as zeros; outside it is an error.
  std::vector<float> out(10, 7.0f);
  ASSERT_OK(b->ReadOutput(0, 10, 10, out.data()));
  for (float v : out) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(b->ReadOutput(0, 15, 10, out.data()).code(), absl::StatusCode::kInternal);
  // Messages round-trip through the buffer.
  auto buffer = b->MessageBuffer(sizeof(int32_t));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const int32_t token = 101;
  ASSERT_OK(b->WriteMessage(&token, sizeof(token)));
  int32_t back = 0;
  ASSERT_OK(b->ReadMessage(&back, sizeof(back)));
  EXPECT_EQ(back, 101);
  EXPECT_EQ(b->ReadMessage(&back, 1 << 20).code(), absl::StatusCode::kInternal);
}

TEST(EmulatedStageBackend, RefusesAProfileOfAnotherModel) {
  v1::ModelProfile p = Profile();
  p.mutable_layers()->RemoveLast();
  absl::StatusOr<std::unique_ptr<StageBackend>> b = MakeEmulatedStageBackend(Spec(), 0, 3, p);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(),
              HasSubstr("emulated_profile has 3 layers (Input nodes excluded), the model 4"));

  p = Profile();
  p.set_batch_size(0);
  b = MakeEmulatedStageBackend(Spec(), 0, 3, p);
  EXPECT_THAT(b.status().message(), HasSubstr("emulated_profile.batch_size 0 must be > 0"));

  p = Profile();
  p.mutable_layers(2)->set_backward_ms(-1);
  b = MakeEmulatedStageBackend(Spec(), 0, 3, p);
  EXPECT_THAT(b.status().message(), HasSubstr("emulated_profile.layers[1].backward_ms -1"));

  b = MakeEmulatedStageBackend(Spec(), 2, 4, Profile());
  EXPECT_THAT(b.status().message(), HasSubstr("layers [2, 4] outside a model of 4 layers"));
}

// Sets `flag` after `delay` on its own thread (joined by the destructor).
class AbortLater {
 public:
  AbortLater(std::atomic<bool>* flag, std::chrono::milliseconds delay)
      : thread_([flag, delay] {
          std::this_thread::sleep_for(delay);
          flag->store(true);
        }) {}
  ~AbortLater() { thread_.join(); }

 private:
  std::thread thread_;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A cancelled job must not keep its workers for the rest of a long wait: a 30 s wait returns
// kAborted soon after the flag is set (the bound is generous: the slice is 10 ms).
TEST(PreciseSleeper, AbortEndsALongWaitWithAborted) {
  std::atomic<bool> abort{false};
  PreciseSleeper sleeper(&abort);
  const auto start = std::chrono::steady_clock::now();
  absl::Status s;
  {
    AbortLater later(&abort, std::chrono::milliseconds(50));
    s = sleeper.Sleep(absl::Seconds(30));
  }
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("aborted during an emulated wait"));

  // Once aborted, every further wait returns at once.
  const auto again = std::chrono::steady_clock::now();
  EXPECT_EQ(sleeper.Sleep(absl::Seconds(30)).code(), absl::StatusCode::kAborted);
  EXPECT_LT(SecondsSince(again), 1.0);
}

TEST(PreciseSleeper, WaitsTheWholeDurationWhenNotAborted) {
  std::atomic<bool> abort{false};
  PreciseSleeper sleeper(&abort);
  const auto start = std::chrono::steady_clock::now();
  // Longer than several abort-poll slices: the slices add up to the whole wait.
  ASSERT_OK(sleeper.Sleep(absl::Milliseconds(35)));
  EXPECT_GE(SecondsSince(start), 0.035);
  PreciseSleeper no_flag;
  ASSERT_OK(no_flag.Sleep(absl::Milliseconds(1)));
}

TEST(EmulatedStageBackend, AbortEndsAForwardOrBackwardWaitWithAborted) {
  v1::ModelProfile p = Profile();
  for (v1::LayerProfile& l : *p.mutable_layers()) {
    l.set_forward_ms(10'000);  // layers 1..3 at 32 rows: a 30 s forward, 60 s backward
    l.set_backward_ms(20'000);
  }
  std::atomic<bool> abort{false};
  auto b_or = MakeEmulatedStageBackend(Spec(), 1, 3, p, std::make_unique<PreciseSleeper>(&abort));
  ASSERT_TRUE(b_or.ok()) << b_or.status();
  std::unique_ptr<StageBackend> b = std::move(*b_or);
  ASSERT_OK(b->Input(0, 32).status());
  const auto start = std::chrono::steady_clock::now();
  absl::Status s;
  {
    AbortLater later(&abort, std::chrono::milliseconds(50));
    s = b->Forward(0, 32, kernels::ForwardContext{});
  }
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;

  ASSERT_OK(b->GradInput(0, 32).status());
  const auto backward = std::chrono::steady_clock::now();
  s = b->Backward(0, 0, 32, /*last_stage=*/false, /*need_dx=*/true);
  EXPECT_LT(SecondsSince(backward), 1.0);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
}

}  // namespace
}  // namespace dapple::worker

// StageRuntime::Generate: a text sample through the pipeline, in one process (every stage a
// thread, the in-memory transport of worker/runtime/testing), against a direct loop over the
// whole model on one CPU backend; and the backend calls generation needs.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/model_info.h"
#include "common/schedule/lowering.h"
#include "common/testing/assert_ok.h"
#include "gtest/gtest.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_transport.h"
#include "worker/runtime/testing/parity_testing.h"
#include "worker/runtime/token_sampler.h"

namespace dapple::worker {
namespace {

using parity::LocalTransport;
using parity::Mailbox;

constexpr int64_t kSeqLen = 8;
constexpr int64_t kVocab = 256;

// A small byte-level GPT on [kSeqLen] tokens: embedding, two transformer blocks, layernorm,
// lm_head: 5 layers, output [kSeqLen, vocab].
v1::JobSpec GptSpec(uint64_t seed, const std::string& prompt, int32_t tokens, double temperature,
                    int64_t vocab = kVocab) {
  v1::JobSpec spec;
  spec.set_name("gpt");
  v1::ModelSpec* m = spec.mutable_model();
  m->add_input_shape(kSeqLen);
  m->set_input_type("tokens");
  m->set_loss("softmax_cross_entropy");
  v1::LayerSpec* l = m->add_layers();
  l->set_type("embedding");
  l->mutable_embedding()->set_vocab(vocab);
  l->mutable_embedding()->set_dim(16);
  for (int b = 0; b < 2; ++b) {
    l = m->add_layers();
    l->set_type("transformer_block");
    l->mutable_transformer_block()->set_heads(2);
  }
  m->add_layers()->set_type("layernorm");
  l = m->add_layers();
  l->set_type("lm_head");
  l->mutable_lm_head()->set_vocab(vocab);
  spec.mutable_data()->set_dataset("text");
  spec.mutable_data()->set_seq_len(kSeqLen);
  v1::TrainingSpec* t = spec.mutable_training();
  t->set_global_batch(4);
  t->set_micro_batch(4);
  t->set_epochs(1);
  t->set_seed(seed);
  t->mutable_optimizer()->set_type("sgd");
  t->mutable_optimizer()->set_lr(0.1);
  v1::SampleSpec* s = spec.mutable_sample();
  s->set_prompt(prompt);
  s->set_tokens(tokens);
  s->set_temperature(temperature);
  return spec;
}

// Generation reads no data, but Create checks that stage 0's and the last stage's datasets
// fit the model: an empty split of [kSeqLen] byte tokens with kSeqLen targets.
class NoTokens final : public Dataset {
 public:
  int64_t size() const override { return 0; }
  const std::vector<int64_t>& sample_shape() const override { return shape_; }
  int64_t targets_per_sample() const override { return kSeqLen; }
  int64_t num_classes() const override { return kVocab; }
  bool token_inputs() const override { return true; }
  void Gather(const int64_t*, int64_t, float*, int32_t*) const override {}

 private:
  std::vector<int64_t> shape_ = {kSeqLen};
};

const Dataset& NoData(const v1::JobSpec& spec) {
  static const Dataset* tokens = new NoTokens();
  return TokenInput(spec.model()) ? *tokens : parity::TrainSet();
}

struct Pipeline {
  Mailbox box;
  std::vector<std::unique_ptr<LocalTransport>> transports;
  std::vector<std::unique_ptr<StageRuntime>> runtimes;
};

// `spec` on `stages` uniform stages, one replica each.
std::unique_ptr<Pipeline> MakePipeline(const v1::JobSpec& spec, int stages) {
  auto p = std::make_unique<Pipeline>();
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), stages);
  auto programs = schedule::BuildPrograms(schedule::ScheduleKind::kDapple, stages, 1).value();
  for (int s = 0; s < stages; ++s) {
    p->transports.push_back(std::make_unique<LocalTransport>(&p->box, s));
    auto rt = StageRuntime::Create(parity::Assignment(spec, plan, s, programs[s]), &NoData(spec),
                                   &NoData(spec), stages > 1 ? p->transports[s].get() : nullptr);
    EXPECT_TRUE(rt.ok()) << rt.status();
    if (!rt.ok()) return nullptr;
    p->runtimes.push_back(std::move(*rt));
  }
  return p;
}

// Runs Generate on every stage (a thread each); the last stage's bytes, or the first error.
absl::StatusOr<std::string> Generate(Pipeline& p) {
  const int stages = static_cast<int>(p.runtimes.size());
  std::vector<absl::StatusOr<GenerateResult>> results(stages, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int s = 0; s < stages; ++s) {
    threads.emplace_back([&, s] { results[s] = p.runtimes[s]->Generate(); });
  }
  for (std::thread& t : threads) t.join();
  for (int s = 0; s < stages; ++s) {
    if (!results[s].ok()) return results[s].status();
    EXPECT_EQ(results[s]->has_text, s == stages - 1) << "stage " << s;
  }
  return results.back()->bytes;
}

absl::StatusOr<std::string> GenerateOn(const v1::JobSpec& spec, int stages) {
  std::unique_ptr<Pipeline> p = MakePipeline(spec, stages);
  if (p == nullptr) return absl::InternalError("no pipeline");
  return Generate(*p);
}

// The sample as a direct loop over the whole model on one CPU backend: the context window and
// the draw as stage_runtime.h describes them, without slots, stages or messages.
std::string DirectSample(const v1::JobSpec& spec) {
  const v1::SampleSpec& sample = spec.sample();
  auto backend = MakeCpuStageBackend(spec, 0, spec.model().layers_size() - 1).value();
  std::string text = sample.prompt();
  std::string generated;
  std::vector<float> input(kSeqLen), logits(kVocab);
  for (int64_t i = 0; i < sample.tokens(); ++i) {
    const int64_t context = std::min<int64_t>(kSeqLen, static_cast<int64_t>(text.size()));
    std::fill(input.begin(), input.end(), 0.0f);
    for (int64_t k = 0; k < context; ++k) {
      input[k] = static_cast<uint8_t>(text[text.size() - context + k]);
    }
    EXPECT_TRUE(backend->LoadInput(0, input.data(), 1).ok());
    EXPECT_TRUE(backend->Forward(0, 1, kernels::ForwardContext{}).ok());
    EXPECT_TRUE(backend->ReadOutput(0, (context - 1) * kVocab, kVocab, logits.data()).ok());
    const auto byte = static_cast<char>(
        SampleToken(logits.data(), kVocab, sample.temperature(), spec.training().seed(), i));
    text.push_back(byte);
    generated.push_back(byte);
  }
  return generated;
}

TEST(StageRuntimeGenerateTest, OneAndThreeStagesGiveTheDirectLoopsSample) {
  // A prompt longer than the context: the window slides from the first byte on.
  const v1::JobSpec spec = GptSpec(42, "In the beginning God", 40, 0.8);
  const std::string direct = DirectSample(spec);
  ASSERT_EQ(direct.size(), 40u);
  for (int stages : {1, 3}) {
    absl::StatusOr<std::string> sample = GenerateOn(spec, stages);
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(*sample, direct) << stages << " stages";
  }
}

TEST(StageRuntimeGenerateTest, ShortPromptsStartAtPositionZero) {
  // "\n" then 20 bytes: contexts of 1..8 tokens, then a sliding window.
  const v1::JobSpec spec = GptSpec(7, "\n", 20, 0.0);
  const std::string direct = DirectSample(spec);
  for (int stages : {1, 3}) {
    absl::StatusOr<std::string> sample = GenerateOn(spec, stages);
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(*sample, direct) << stages << " stages";
  }
}

TEST(StageRuntimeGenerateTest, DeterministicForASeed) {
  const v1::JobSpec spec = GptSpec(42, "\n", 30, 1.0);
  absl::StatusOr<std::string> a = GenerateOn(spec, 3);
  absl::StatusOr<std::string> b = GenerateOn(spec, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
  // Another seed: other weights and other draws.
  absl::StatusOr<std::string> c = GenerateOn(GptSpec(43, "\n", 30, 1.0), 3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(*a, *c);
}

TEST(StageRuntimeGenerateTest, TwoSamplesInARowAreTheSame) {
  // Generate leaves nothing behind that changes the next one (slots, buffers, message tags).
  std::unique_ptr<Pipeline> p = MakePipeline(GptSpec(5, "\n", 12, 0.8), 3);
  ASSERT_NE(p, nullptr);
  absl::StatusOr<std::string> a = Generate(*p);
  ASSERT_TRUE(a.ok()) << a.status();
  // The messages of the first sample were all received: nothing is left in the mailbox to be
  // taken by the second, whose tags are the same.
  absl::StatusOr<std::string> b = Generate(*p);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
}

TEST(StageRuntimeGenerateTest, PromptByteOutsideTheVocabulary) {
  const v1::JobSpec spec = GptSpec(1, "caf\xC3\xA9", 5, 0.8, /*vocab=*/128);
  std::unique_ptr<Pipeline> p = MakePipeline(spec, 1);
  ASSERT_NE(p, nullptr);
  absl::StatusOr<GenerateResult> r = p->runtimes[0]->Generate();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "sample.prompt byte 3 (0xC3) is outside the model's vocabulary of 128 tokens: use a "
            "prompt of bytes below 128");
}

TEST(StageRuntimeGenerateTest, NoSampleWithoutTokensOrForAModelOfImages) {
  std::unique_ptr<Pipeline> p = MakePipeline(GptSpec(1, "\n", 0, 0.8), 1);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->runtimes[0]->GeneratesSample());
  EXPECT_EQ(p->runtimes[0]->Generate().status().code(), absl::StatusCode::kFailedPrecondition);

  v1::JobSpec mlp = parity::ParitySpec({});
  mlp.mutable_sample()->set_tokens(10);  // the validation refuses it; the runtime ignores it
  p = MakePipeline(mlp, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->runtimes[0]->GeneratesSample());
  EXPECT_EQ(p->runtimes[0]->Generate().status().code(), absl::StatusCode::kFailedPrecondition);
}

// The CPU backend's calls for generation, on the parity MLP (output [10] per sample).
TEST(StageBackendGenerateTest, CpuReadsTheOutputAndCarriesMessages) {
  const v1::JobSpec spec = parity::ParitySpec({});
  auto b = MakeCpuStageBackend(spec, 0, spec.model().layers_size() - 1).value();
  std::vector<float> images(2 * 784);
  for (size_t k = 0; k < images.size(); ++k) images[k] = static_cast<float>(k % 7) * 0.1f;
  ASSERT_OK(b->LoadInput(0, images.data(), 2));
  ASSERT_OK(b->Forward(0, 2, kernels::ForwardContext{}));
  const auto* sent = static_cast<const float*>(b->OutputForSend(0, 0, 2).value());
  std::vector<float> row(10);
  ASSERT_OK(b->ReadOutput(0, 10, 10, row.data()));
  EXPECT_EQ(std::memcmp(row.data(), sent + 10, 10 * sizeof(float)), 0);
  EXPECT_EQ(b->ReadOutput(0, 11, 10, row.data()).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(b->ReadOutput(0, -1, 1, row.data()).code(), absl::StatusCode::kInternal);

  void* buffer = b->MessageBuffer(sizeof(int32_t)).value();
  const int32_t token = 200;
  ASSERT_OK(b->WriteMessage(&token, sizeof(token)));
  int32_t in_buffer = 0;
  std::memcpy(&in_buffer, buffer, sizeof(in_buffer));  // host memory: what a transport sends
  EXPECT_EQ(in_buffer, 200);
  const int32_t received = 17;
  std::memcpy(buffer, &received, sizeof(received));  // what a transport receives into it
  int32_t back = 0;
  ASSERT_OK(b->ReadMessage(&back, sizeof(back)));
  EXPECT_EQ(back, 17);
  EXPECT_EQ(b->WriteMessage(&token, 1 << 20).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace dapple::worker

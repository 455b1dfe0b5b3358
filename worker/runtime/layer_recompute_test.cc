// Activation recomputation's replay (layer_recompute.h) against plain forwards, on the layers of
// the CNN example (examples/resnet_fmnist.yaml: conv, batch norm, residual blocks with their
// batch norms) and of a small GPT with live dropout: the replay rebuilds bitwise the outputs
// and caches the first forward made, and batch norm counts every micro-batch once in the step
// statistics.
#include "worker/runtime/layer_recompute.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/model.h"
#include "worker/runtime/step_statistics.h"
#include "worker/runtime/testing/gpt_parity_testing.h"

namespace dapple::worker {
namespace {

using kernels::ForwardContext;
using kernels::Tensor;

v1::JobSpec ExampleSpec(const std::string& name) {
  std::ifstream in(std::string(DAPPLE_SOURCE_ROOT) + "/examples/" + name);
  std::stringstream yaml;
  yaml << in.rdbuf();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(yaml.str(), name);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

ForwardContext Training(int64_t step, int64_t first_sample) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 42;
  ctx.step = step;
  ctx.first_sample = first_sample;
  return ctx;
}

// Deterministic values in [-1, 1) (or token ids below `vocab` when vocab > 0).
Tensor Input(const std::vector<int64_t>& shape, int64_t vocab) {
  Tensor x;
  x.Resize(shape);
  for (size_t i = 0; i < x.data.size(); ++i) {
    x.data[i] = vocab > 0 ? static_cast<float>((i * 7 + 3) % vocab)
                          : static_cast<float>((i * 37 + 11) % 101) / 50.5f - 1.0f;
  }
  return x;
}

std::vector<double> Statistics(const LayerList& layers) {
  std::vector<double> out(static_cast<size_t>(StepStatisticsSize(layers)));
  ReadStepStatistics(layers, out.data());
  return out;
}

// Plain forwards of `x` through `plain` (as a stage without recomputation runs them) against
// LayerRecompute::Forward and Replay through `layers` (a second copy with the same weights).
// `vocab`: the token ids' range of a model that reads tokens (0: float inputs).
void ExpectReplayMatches(const v1::JobSpec& spec, const Tensor& x, const ForwardContext& ctx,
                         int64_t vocab) {
  const int last = spec.model().layers_size() - 1;
  auto plain = kernels::BuildLayers(spec.model(), 0, last, spec.training().seed());
  auto layers = kernels::BuildLayers(spec.model(), 0, last, spec.training().seed());
  ASSERT_TRUE(plain.ok() && layers.ok());
  const size_t n = plain->size();
  std::vector<Tensor> acts(n + 1);
  std::vector<kernels::LayerCache> caches(n);
  acts[0] = x;
  for (size_t k = 0; k < n; ++k) (*plain)[k]->Forward(acts[k], &acts[k + 1], &caches[k], ctx);

  LayerRecompute recompute(&*layers);
  Tensor y;
  recompute.Forward(x, ctx, &y);
  EXPECT_EQ(y.shape, acts.back().shape);
  EXPECT_EQ(y.data, acts.back().data);
  const std::vector<double> once = Statistics(*layers);
  EXPECT_EQ(once, Statistics(*plain));

  // Another micro-batch's forward in between overwrites the scratch set, as under 1F1B.
  Tensor other = Input(x.shape, vocab);
  std::reverse(other.data.begin(), other.data.end());
  recompute.Forward(other, Training(ctx.step, ctx.first_sample + x.rows()), &y);
  const std::vector<double> two = Statistics(*layers);

  recompute.Replay(x, ctx);
  for (size_t k = 0; k < n; ++k) {
    SCOPED_TRACE(::testing::Message() << "layer " << k << " (" << (*plain)[k]->Type() << ")");
    const int i = static_cast<int>(k);
    EXPECT_EQ(recompute.Input(i, x).data, acts[k].data);
    EXPECT_EQ(recompute.Output(i).data, acts[k + 1].data);
    const kernels::LayerCache& c = *recompute.Cache(i);
    ASSERT_EQ(c.saved.size(), caches[k].saved.size());
    for (size_t t = 0; t < c.saved.size(); ++t) EXPECT_EQ(c.saved[t].data, caches[k].saved[t].data);
    EXPECT_EQ(c.ctx.step, ctx.step);
    EXPECT_TRUE(c.ctx.recompute);
  }
  // The replay added nothing to the step statistics.
  EXPECT_EQ(Statistics(*layers), two);
  EXPECT_GT(recompute.HeldBytes(), 0);
}

TEST(LayerRecomputeTest, ReplaysTheCnnExampleWithoutCountingBatchNormTwice) {
  const v1::JobSpec spec = ExampleSpec("resnet_fmnist.yaml");
  ASSERT_GT(spec.model().layers_size(), 0);
  const int64_t rows = 4;
  const Tensor x = Input({rows, 1, 28, 28}, 0);
  auto layers = kernels::BuildLayers(spec.model(), 0, spec.model().layers_size() - 1, 1);
  ASSERT_TRUE(layers.ok());
  ASSERT_GT(StepStatisticsSize(*layers), 0);  // the example has batch norms to check
  ExpectReplayMatches(spec, x, Training(3, 8), 0);
}

TEST(LayerRecomputeTest, ReplaysLiveDropoutWithTheSameMasks) {
  parity::GptOptions o;
  o.dropout = 0.3;
  const v1::JobSpec spec = parity::GptSpec(o);
  const Tensor tokens = Input({3, o.seq}, o.vocab);
  ExpectReplayMatches(spec, tokens, Training(5, 6), o.vocab);
  // A replay under another context would not match: the masks depend on it.
  const int last = spec.model().layers_size() - 1;
  auto layers = kernels::BuildLayers(spec.model(), 0, last, spec.training().seed());
  ASSERT_TRUE(layers.ok());
  LayerRecompute recompute(&*layers);
  Tensor y;
  recompute.Forward(tokens, Training(5, 6), &y);
  recompute.Replay(tokens, Training(5, 9));
  EXPECT_NE(recompute.Output(last).data, y.data);
}

}  // namespace
}  // namespace dapple::worker

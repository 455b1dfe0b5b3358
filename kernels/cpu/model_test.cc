#include "kernels/cpu/model.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/loss.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;

// flatten, linear 32, relu, linear 16, relu, linear 10 on [1, 4, 4].
v1::ModelSpec SmallMlp() {
  v1::ModelSpec m;
  for (int64_t d : {1, 4, 4}) m.add_input_shape(d);
  const std::vector<std::pair<std::string, int64_t>> layers = {
      {"flatten", 0}, {"linear", 32}, {"relu", 0}, {"linear", 16}, {"relu", 0}, {"linear", 10}};
  for (const auto& [type, out] : layers) {
    v1::LayerSpec* l = m.add_layers();
    l->set_type(type);
    if (type == "linear") l->mutable_linear()->set_out(out);
  }
  m.set_loss("softmax_cross_entropy");
  return m;
}

std::vector<std::unique_ptr<Layer>> Build(const v1::ModelSpec& m, int first, int last,
                                          uint64_t seed) {
  absl::StatusOr<std::vector<std::unique_ptr<Layer>>> layers = BuildLayers(m, first, last, seed);
  EXPECT_TRUE(layers.ok()) << layers.status();
  return layers.ok() ? std::move(*layers) : std::vector<std::unique_ptr<Layer>>{};
}

TEST(BuildLayersTest, TypesAndParamNames) {
  std::vector<std::unique_ptr<Layer>> layers = Build(SmallMlp(), 0, 5, 42);
  ASSERT_EQ(layers.size(), 6u);
  const std::vector<std::string> types = {"flatten", "linear", "relu", "linear", "relu", "linear"};
  for (size_t i = 0; i < types.size(); ++i) EXPECT_EQ(layers[i]->Type(), types[i]);
  std::vector<Param*> params = CollectParams(layers);
  std::vector<std::string> names;
  for (Param* p : params) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"layer1.weight", "layer1.bias", "layer3.weight",
                                             "layer3.bias", "layer5.weight", "layer5.bias"}));
  EXPECT_EQ(params[0]->value.shape, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(params[2]->value.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(params[5]->value.shape, (std::vector<int64_t>{10}));
}

TEST(BuildLayersTest, AnySplitGivesBitwiseTheSameWeights) {
  const v1::ModelSpec m = SmallMlp();
  std::vector<std::unique_ptr<Layer>> whole = Build(m, 0, 5, 42);
  std::vector<std::unique_ptr<Layer>> head = Build(m, 0, 2, 42);
  std::vector<std::unique_ptr<Layer>> tail = Build(m, 3, 5, 42);
  std::vector<Param*> all = CollectParams(whole);
  std::vector<Param*> split = CollectParams(head);
  for (Param* p : CollectParams(tail)) split.push_back(p);
  ASSERT_EQ(all.size(), split.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i]->name, split[i]->name);
    EXPECT_EQ(all[i]->value.shape, split[i]->value.shape);
    EXPECT_EQ(all[i]->value.data, split[i]->value.data) << all[i]->name;  // bitwise
  }
  // Building a single middle layer also matches.
  std::vector<std::unique_ptr<Layer>> only3 = Build(m, 3, 3, 42);
  EXPECT_EQ(CollectParams(only3)[0]->value.data, all[2]->value.data);
}

TEST(BuildLayersTest, SeedsAndLayersGetDifferentWeights) {
  const v1::ModelSpec m = SmallMlp();
  std::vector<std::unique_ptr<Layer>> a = Build(m, 0, 5, 42);
  std::vector<std::unique_ptr<Layer>> b = Build(m, 0, 5, 43);
  std::vector<Param*> pa = CollectParams(a);
  std::vector<Param*> pb = CollectParams(b);
  for (size_t i = 0; i < pa.size(); ++i) {
    int same = 0;
    for (size_t k = 0; k < pa[i]->value.data.size(); ++k) {
      same += pa[i]->value.data[k] == pb[i]->value.data[k];
    }
    EXPECT_EQ(same, 0) << pa[i]->name;  // 24-bit draws: a coincidence is ~1e-7 per element
  }
  // Weight and bias of one layer come from different streams.
  EXPECT_NE(pa[1]->value.data[0], pa[0]->value.data[0]);
  // Bounds 1/sqrt(in): 0.25 for layer 1 (in 16), 1/sqrt(32) for layer 3.
  for (float v : pa[0]->value.data) EXPECT_LT(std::fabs(v), 0.25f + 1e-7f);
  for (float v : pa[2]->value.data) EXPECT_LE(std::fabs(v), 0.1767767f);
}

TEST(FirstLayerWithParamsTest, SkipsTheParameterFreeLayersInFront) {
  const v1::ModelSpec m = SmallMlp();
  EXPECT_EQ(FirstLayerWithParams(Build(m, 0, 5, 1)), 1);  // flatten, then linear
  EXPECT_EQ(FirstLayerWithParams(Build(m, 2, 5, 1)), 1);  // relu, then linear (stage-relative)
  EXPECT_EQ(FirstLayerWithParams(Build(m, 1, 5, 1)), 0);
  EXPECT_EQ(FirstLayerWithParams(Build(m, 0, 0, 1)), 1);  // flatten alone: none
}

TEST(BuildLayersTest, BadRangesAndSpecs) {
  const v1::ModelSpec m = SmallMlp();
  struct Case {
    int first, last;
    std::string message;
  };
  const std::vector<Case> cases = {
      {-1, 2, "layer range [-1, 2] is outside the model's layers [0, 5]"},
      {3, 6, "layer range [3, 6] is outside the model's layers [0, 5]"},
      {4, 2, "layer range [4, 2] is empty: first_layer must be <= last_layer"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<std::unique_ptr<Layer>>> r = BuildLayers(m, c.first, c.last, 1);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.message);
  }
  v1::ModelSpec bad = m;
  bad.mutable_layers(2)->set_type("conv9");
  absl::StatusOr<std::vector<std::unique_ptr<Layer>>> r = BuildLayers(bad, 0, 1, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "model.layers[2]: unknown layer type 'conv9'; known: flatten, linear, "
            "relu, gelu, dropout, embedding, layernorm, transformer_block, lm_head, conv2d, "
            "maxpool2d, avgpool2d, global_avgpool, batchnorm2d, residual_block");
}

// Forward + loss + backward over samples [begin, begin + count) of (x, labels), accumulating into
// the params' grads with grad_scale 1 / total.
double ForwardBackward(std::vector<std::unique_ptr<Layer>>& layers, const Tensor& x,
                       const std::vector<int32_t>& labels, int64_t begin, int64_t count,
                       int64_t total) {
  const int64_t per_sample = x.cols();
  std::vector<Tensor> acts(layers.size() + 1);
  acts[0].shape = {count, 1, 4, 4};
  acts[0].data.assign(x.data.begin() + begin * per_sample,
                      x.data.begin() + (begin + count) * per_sample);
  std::vector<LayerCache> caches(layers.size());
  for (size_t k = 0; k < layers.size(); ++k) {
    layers[k]->Forward(acts[k], &acts[k + 1], &caches[k], {});
  }
  Tensor dy;
  const double loss = SoftmaxCrossEntropy(acts.back(), labels.data() + begin,
                                          1.0f / static_cast<float>(total), &dy, nullptr);
  for (int k = static_cast<int>(layers.size()) - 1; k >= 0; --k) {
    Tensor dx;
    layers[k]->Backward(acts[k], acts[k + 1], dy, k > 0 ? &dx : nullptr, &caches[k]);
    dy = std::move(dx);
  }
  return loss;
}

TEST(GradientAccumulationTest, TwoHalfBatchesEqualOneFullBatch) {
  const v1::ModelSpec m = SmallMlp();
  const int64_t batch = 16;
  const Tensor x = RandomTensor({batch, 1, 4, 4}, 71, 0, 1);
  std::vector<int32_t> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>((i * 7) % 10);

  std::vector<std::unique_ptr<Layer>> full = Build(m, 0, 5, 9);
  std::vector<std::unique_ptr<Layer>> halves = Build(m, 0, 5, 9);
  const double full_loss = ForwardBackward(full, x, labels, 0, batch, batch);
  const double half_loss = ForwardBackward(halves, x, labels, 0, batch / 2, batch) +
                           ForwardBackward(halves, x, labels, batch / 2, batch / 2, batch);
  EXPECT_NEAR(half_loss, full_loss, 1e-6 * std::fabs(full_loss));

  std::vector<Param*> pf = CollectParams(full);
  std::vector<Param*> ph = CollectParams(halves);
  ASSERT_EQ(pf.size(), ph.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    // Relative to the tensor's largest gradient: the two orders of float summation differ by
    // rounding only (~1e-7 of the summands), while an element near zero has no useful
    // element-wise relative error.
    float scale = 0;
    for (float g : pf[i]->grad.data) scale = std::max(scale, std::fabs(g));
    ASSERT_GT(scale, 0) << pf[i]->name;
    for (size_t k = 0; k < pf[i]->grad.data.size(); ++k) {
      EXPECT_NEAR(ph[i]->grad.data[k], pf[i]->grad.data[k], 1e-6 * scale)
          << pf[i]->name << " element " << k;
    }
  }

  ZeroGrads(pf);
  for (Param* p : pf) {
    for (float g : p->grad.data) ASSERT_EQ(g, 0.0f) << p->name;
  }
}

}  // namespace
}  // namespace dapple::kernels

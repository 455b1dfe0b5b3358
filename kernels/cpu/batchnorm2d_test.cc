#include "kernels/cpu/batchnorm2d.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/image_reference_testing.h"
#include "kernels/cpu/layer_testing.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;

std::unique_ptr<BatchNorm2dLayer> MakeLayer(uint64_t stream, double momentum = 0.1) {
  auto layer = std::make_unique<BatchNorm2dLayer>(2, 3, 4, 5, 1e-5, momentum);
  layer->norm().weight().value = RandomTensor({3}, stream, 0.5, 1.5);
  layer->norm().bias().value = RandomTensor({3}, stream + 1, -1, 1);
  return layer;
}

ForwardContext Training() { return testing::TrainingContext(1, 0, 0); }

TEST(BatchNorm2dLayerTest, ParamsAndBuffersAreNamedAndStartAsPytorchs) {
  BatchNorm2dLayer layer(2, 3, 4, 5, 1e-5, 0.1);
  EXPECT_EQ(layer.Type(), "batchnorm2d");
  std::vector<Param*> params = layer.Params();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "layer2.weight");
  EXPECT_EQ(params[0]->value.data, std::vector<float>(3, 1.0f));
  EXPECT_EQ(params[1]->name, "layer2.bias");
  EXPECT_EQ(params[1]->value.data, std::vector<float>(3, 0.0f));
  std::vector<Param*> buffers = layer.Buffers();
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0]->name, "layer2.running_mean");
  EXPECT_EQ(buffers[0]->value.data, std::vector<float>(3, 0.0f));
  EXPECT_EQ(buffers[1]->name, "layer2.running_var");
  EXPECT_EQ(buffers[1]->value.data, std::vector<float>(3, 1.0f));
  EXPECT_TRUE(buffers[0]->grad.data.empty());
  EXPECT_EQ(layer.StepStatisticsSize(), 7);
}

TEST(BatchNorm2dLayerTest, TrainingForwardNormalisesWithTheBatchStatistics) {
  std::unique_ptr<BatchNorm2dLayer> layer = MakeLayer(1);
  const Tensor x = RandomTensor({2, 3, 4, 5}, 3, -1, 3);
  LayerCache cache;
  Tensor y;
  layer->Forward(x, &y, &cache, Training());
  const testing::BatchNormReference ref =
      testing::BatchNormRef(2, 3, 20, 1e-5, x.data, layer->norm().weight().value.data,
                            layer->norm().bias().value.data, {});
  ASSERT_EQ(y.shape, x.shape);
  for (size_t i = 0; i < y.data.size(); ++i) {
    EXPECT_NEAR(y.data[i], ref.y[i], 1e-5 * (1 + std::fabs(ref.y[i]))) << i;
  }
  ASSERT_EQ(cache.saved.size(), 2u);
  for (int64_t c = 0; c < 3; ++c) EXPECT_NEAR(cache.saved[1].data[c], ref.var[c], 1e-6);
}

TEST(BatchNorm2dLayerTest, GradientsMatchFiniteDifferences) {
  std::unique_ptr<BatchNorm2dLayer> layer = MakeLayer(5);
  // Channels of spread ~1 (var ~ 0.3): third derivatives are O(1), so the O(h^2) truncation of
  // central differences stays below 1e-4 (as layernorm_test).
  testing::ExpectGradientsMatchFiniteDifferences(layer.get(), RandomTensor({2, 3, 4, 5}, 6, -1, 1),
                                                 Training(), 7, /*check_dx=*/true, 5e-4, 1e-3);
}

TEST(BatchNorm2dLayerTest, SplitBackwardMatchesPlainBackward) {
  testing::ExpectSplitBackwardMatches([] { return MakeLayer(8); },
                                      RandomTensor({3, 3, 4, 5}, 9, -1, 1), Training(),
                                      RandomTensor({2, 3, 4, 5}, 10, -2, 2), Training(), 11, 1e-6);
}

TEST(BatchNorm2dLayerTest, StepStatisticsUpdateRunningStatisticsFromTheWholeBatch) {
  // Two micro-batches (as two replicas or two Forwards of one step) give the running
  // statistics of their concatenation, with PyTorch's update and unbiased variance.
  const double momentum = 0.25;
  std::unique_ptr<BatchNorm2dLayer> a = MakeLayer(12, momentum);
  std::unique_ptr<BatchNorm2dLayer> b = MakeLayer(12, momentum);
  const Tensor x = RandomTensor({3, 3, 4, 5}, 13, -1, 3);
  Tensor x1, x2;
  x1.Resize({2, 3, 4, 5});
  x2.Resize({1, 3, 4, 5});
  std::copy(x.data.begin(), x.data.begin() + 120, x1.data.begin());
  std::copy(x.data.begin() + 120, x.data.end(), x2.data.begin());
  LayerCache c1, c2;
  Tensor y;
  a->Forward(x1, &y, &c1, Training());
  b->Forward(x2, &y, &c2, Training());
  // An evaluation Forward adds nothing.
  b->Forward(x1, &y, &c1, ForwardContext{});
  std::vector<double> sa(7), sb(7);
  a->ReadStepStatistics(sa.data());
  b->ReadStepStatistics(sb.data());
  EXPECT_EQ(sa[6], 40);
  EXPECT_EQ(sb[6], 20);
  std::vector<double> sum(7);
  for (int i = 0; i < 7; ++i) sum[i] = sa[i] + sb[i];
  a->ApplyStepStatistics(sum.data());
  b->ApplyStepStatistics(sum.data());
  const testing::BatchNormReference ref = testing::BatchNormRef(
      3, 3, 20, 1e-5, x.data, std::vector<float>(3, 1), std::vector<float>(3, 0), {});
  for (int64_t c = 0; c < 3; ++c) {
    const double unbiased = ref.var[c] * 60 / 59;
    EXPECT_NEAR(a->Buffers()[0]->value.data[c], momentum * ref.mean[c], 1e-7);
    EXPECT_NEAR(a->Buffers()[1]->value.data[c], (1 - momentum) + momentum * unbiased, 1e-6);
  }
  EXPECT_EQ(a->Buffers()[0]->value.data, b->Buffers()[0]->value.data);
  EXPECT_EQ(a->Buffers()[1]->value.data, b->Buffers()[1]->value.data);
  // Applying cleared the accumulation.
  a->ReadStepStatistics(sa.data());
  EXPECT_EQ(sa, std::vector<double>(7, 0.0));
}

TEST(BatchNorm2dLayerTest, EvaluationUsesTheRunningStatistics) {
  std::unique_ptr<BatchNorm2dLayer> layer = MakeLayer(14);
  layer->Buffers()[0]->value = RandomTensor({3}, 15, -1, 1);
  layer->Buffers()[1]->value = RandomTensor({3}, 16, 0.5, 2);
  const Tensor x = RandomTensor({2, 3, 4, 5}, 17, -1, 1);
  LayerCache cache;
  Tensor y;
  layer->Forward(x, &y, &cache, ForwardContext{});
  for (size_t i = 0; i < x.data.size(); ++i) {
    const size_t c = (i / 20) % 3;
    const double want = (x.data[i] - layer->Buffers()[0]->value.data[c]) /
                            std::sqrt(layer->Buffers()[1]->value.data[c] + 1e-5) *
                            layer->norm().weight().value.data[c] +
                        layer->norm().bias().value.data[c];
    EXPECT_NEAR(y.data[i], want, 1e-5 * (1 + std::fabs(want))) << i;
  }
}

TEST(BatchNorm2dLayerDeathTest, WrongShapeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BatchNorm2dLayer layer(2, 3, 4, 5, 1e-5, 0.1);
  LayerCache cache;
  Tensor y;
  EXPECT_DEATH(layer.Forward(Tensor::Zeros({2, 3, 5, 4}), &y, &cache, {}),
               "layer2 \\(batchnorm2d\\) expects x \\[N, 3, 4, 5\\], got \\[2, 3, 5, 4\\]");
}

}  // namespace
}  // namespace dapple::kernels

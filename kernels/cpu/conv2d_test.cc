#include "kernels/cpu/conv2d.h"

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

std::unique_ptr<Conv2dLayer> MakeLayer(bool bias) {
  // [2, 5, 6] -> [3, 3, 3]: stride 2 with padding 1.
  auto layer = std::make_unique<Conv2dLayer>(4, 2, 5, 6, 3, 3, 2, 1, bias);
  layer->InitParams(7);
  return layer;
}

TEST(Conv2dLayerTest, ParamsAreNamedShapedAndInitialisedAsPytorch) {
  std::unique_ptr<Conv2dLayer> layer = MakeLayer(true);
  EXPECT_EQ(layer->Type(), "conv2d");
  std::vector<Param*> params = layer->Params();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "layer4.weight");
  EXPECT_EQ(params[0]->value.shape, (std::vector<int64_t>{3, 2, 3, 3}));
  EXPECT_EQ(params[1]->name, "layer4.bias");
  EXPECT_EQ(params[1]->value.shape, (std::vector<int64_t>{3}));
  // kaiming_uniform_(a = sqrt 5): U(-1/sqrt(C k^2), 1/sqrt(C k^2)), bias the same bound.
  const float bound = 1.0f / std::sqrt(18.0f);
  for (const Param* p : params) {
    EXPECT_LE(testing::MaxAbs(p->value.data), bound) << p->name;
    EXPECT_GT(testing::MaxAbs(p->value.data), 0.5f * bound) << p->name;
  }
  // A pure function of (seed, layer index).
  EXPECT_EQ(MakeLayer(true)->weight().value.data, params[0]->value.data);
  EXPECT_TRUE(layer->Buffers().empty());
  EXPECT_EQ(layer->StepStatisticsSize(), 0);

  std::unique_ptr<Conv2dLayer> no_bias = MakeLayer(false);
  ASSERT_EQ(no_bias->Params().size(), 1u);
  EXPECT_EQ(no_bias->weight().value.data, params[0]->value.data);
}

TEST(Conv2dLayerTest, ForwardMatchesReference) {
  std::unique_ptr<Conv2dLayer> layer = MakeLayer(true);
  const Tensor x = RandomTensor({2, 2, 5, 6}, 1, -1, 1);
  LayerCache cache;
  Tensor y;
  layer->Forward(x, &y, &cache, {});
  ASSERT_EQ(y.shape, (std::vector<int64_t>{2, 3, 3, 3}));
  const testing::Reference ref = testing::ConvForwardReference(
      layer->Geometry(2), x.data, layer->weight().value.data, layer->bias().value.data);
  for (size_t i = 0; i < y.data.size(); ++i) {
    EXPECT_NEAR(y.data[i], ref.value[i], 2e-6 * ref.scale[i]) << i;
  }
}

TEST(Conv2dLayerTest, GradientsMatchFiniteDifferences) {
  // Linear in x and in the parameters: central differences are exact up to the rounding of
  // y (float sums of <= 19 terms of magnitude <= 1) over 2 h.
  for (bool bias : {true, false}) {
    std::unique_ptr<Conv2dLayer> layer = MakeLayer(bias);
    testing::ExpectGradientsMatchFiniteDifferences(
        layer.get(), RandomTensor({2, 2, 5, 6}, 2, -1, 1), {}, 3, /*check_dx=*/true, 2e-4, 1e-4);
  }
}

TEST(Conv2dLayerTest, SplitBackwardMatchesPlainBackward) {
  testing::ExpectSplitBackwardMatches([] { return MakeLayer(true); },
                                      RandomTensor({3, 2, 5, 6}, 4, -1, 1), {},
                                      RandomTensor({2, 2, 5, 6}, 5, -2, 2), {}, 6, 1e-6);
}

TEST(Conv2dLayerDeathTest, WrongShapeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::unique_ptr<Conv2dLayer> layer = MakeLayer(true);
  LayerCache cache;
  Tensor y;
  EXPECT_DEATH(layer->Forward(Tensor::Zeros({2, 3, 5, 6}), &y, &cache, {}),
               "layer4 \\(conv2d\\) expects x \\[N, 2, 5, 6\\], got \\[2, 3, 5, 6\\]");
}

}  // namespace
}  // namespace dapple::kernels

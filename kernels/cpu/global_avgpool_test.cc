#include "kernels/cpu/global_avgpool.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/layer_testing.h"

namespace dapple::kernels {
namespace {

TEST(GlobalAvgPoolLayerTest, ForwardIsTheMeanOfEachPlane) {
  GlobalAvgPoolLayer layer(3, 4, 5, 3);
  EXPECT_EQ(layer.Type(), "global_avgpool");
  const Tensor x = testing::RandomTensor({2, 4, 5, 3}, 1, -1, 1);
  LayerCache cache;
  Tensor y;
  layer.Forward(x, &y, &cache, {});
  ASSERT_EQ(y.shape, (std::vector<int64_t>{2, 4}));
  for (int64_t p = 0; p < 8; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < 15; ++i) sum += x.data[p * 15 + i];
    EXPECT_NEAR(y.data[p], sum / 15, 1e-6) << p;
  }
}

TEST(GlobalAvgPoolLayerTest, GradientsMatchFiniteDifferences) {
  GlobalAvgPoolLayer layer(3, 3, 4, 4);
  testing::ExpectGradientsMatchFiniteDifferences(
      &layer, testing::RandomTensor({2, 3, 4, 4}, 2, -1, 1), {}, 3, /*check_dx=*/true, 1e-5, 1e-4);
}

TEST(GlobalAvgPoolLayerDeathTest, WrongShapeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GlobalAvgPoolLayer layer(6, 2, 4, 4);
  LayerCache cache;
  Tensor y;
  EXPECT_DEATH(layer.Forward(Tensor::Zeros({2, 8}), &y, &cache, {}),
               "layer6 \\(global_avgpool\\) expects x \\[N, 2, 4, 4\\], got \\[2, 8\\]");
}

}  // namespace
}  // namespace dapple::kernels

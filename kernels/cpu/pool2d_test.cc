#include "kernels/cpu/pool2d.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/image_reference_testing.h"
#include "kernels/cpu/layer_testing.h"

namespace dapple::kernels {
namespace {

// Distinct values 1/32 apart: moving one by the finite-difference step (1/128) never changes
// which element of a window is its maximum.
Tensor Separated(const std::vector<int64_t>& shape, uint64_t stream) {
  Tensor t = Tensor::Zeros(shape);
  std::vector<int64_t> order(t.data.size());
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[SplitMix64At(stream, i) % i]);
  }
  const auto n = static_cast<float>(order.size());
  for (size_t i = 0; i < order.size(); ++i) t.data[i] = (order[i] - n / 2) / 32;
  return t;
}

TEST(Pool2dLayerTest, TypesAndShapes) {
  Pool2dLayer max(1, PoolKind::kMax, 2, 7, 7, 3, 2, 1);
  Pool2dLayer avg(2, PoolKind::kAverage, 2, 8, 6, 2, 2, 0);
  EXPECT_EQ(max.Type(), "maxpool2d");
  EXPECT_EQ(avg.Type(), "avgpool2d");
  EXPECT_TRUE(max.Params().empty());
  LayerCache cache;
  Tensor y;
  max.Forward(Tensor::Zeros({3, 2, 7, 7}), &y, &cache, {});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{3, 2, 4, 4}));
  // The maxima's positions, one byte per output (common/model's saved bytes).
  ASSERT_EQ(cache.saved.size(), 1u);
  EXPECT_EQ(cache.saved[0].numel(), (3 * 2 * 4 * 4 + 3) / 4);
  avg.Forward(Tensor::Zeros({3, 2, 8, 6}), &y, &cache, {});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{3, 2, 4, 3}));
  EXPECT_TRUE(cache.saved.empty());
}

TEST(Pool2dLayerTest, ForwardMatchesReference) {
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
    Pool2dLayer layer(1, kind, 3, 7, 5, 3, 2, 1);
    const Tensor x = testing::RandomTensor({2, 3, 7, 5}, 1, -1, 1);
    LayerCache cache;
    Tensor y;
    layer.Forward(x, &y, &cache, {});
    const testing::Reference ref =
        testing::PoolReference({2, 3, 7, 5, 3, 3, 2, 1}, kind, x.data, nullptr);
    for (size_t i = 0; i < y.data.size(); ++i) {
      EXPECT_NEAR(y.data[i], ref.value[i], 1e-6 * ref.scale[i]) << i;
    }
  }
}

TEST(Pool2dLayerTest, GradientsMatchFiniteDifferences) {
  // Piecewise linear with no maximum changing under the step: exact up to rounding.
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
    Pool2dLayer layer(1, kind, 2, 6, 5, 3, 2, 1);
    testing::ExpectGradientsMatchFiniteDifferences(&layer, Separated({2, 2, 6, 5}, 2), {}, 3,
                                                   /*check_dx=*/true, 1e-4, 1e-4);
  }
}

TEST(Pool2dLayerDeathTest, WrongShapeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Pool2dLayer layer(5, PoolKind::kMax, 2, 4, 4, 2, 2, 0);
  LayerCache cache;
  Tensor y;
  EXPECT_DEATH(layer.Forward(Tensor::Zeros({2, 2, 4, 5}), &y, &cache, {}),
               "layer5 \\(maxpool2d\\) expects x \\[N, 2, 4, 4\\], got \\[2, 2, 4, 5\\]");
}

}  // namespace
}  // namespace dapple::kernels

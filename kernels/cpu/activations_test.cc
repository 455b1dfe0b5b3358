#include "kernels/cpu/activations.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"

namespace dapple::kernels {
namespace {

using testing::Dot;
using testing::ExpectGradientsNear;
using testing::NumericalGradient;
using testing::PushAwayFromZero;
using testing::RandomTensor;

// See linear_test.cc: float forward rounding over 2h = 1/64, plus O(h^2) curvature for GELU
// (h^2 / 6 * |GELU'''| <= 2e-5).
constexpr double kFdAtol = 5e-4;
constexpr double kFdRtol = 1e-3;

// Checks layer.Backward's dx against central differences of sum(Forward(x) * r).
void CheckBackward(Layer* layer, Tensor x, uint64_t stream) {
  LayerCache cache;
  Tensor y;
  layer->Forward(x, &y, &cache, {});
  const Tensor r = RandomTensor(y.shape, stream, -1, 1);
  Tensor dx;
  layer->Backward(x, y, r, &dx, &cache);
  ASSERT_EQ(dx.shape, x.shape);
  auto objective = [&]() {
    Tensor yy;
    layer->Forward(x, &yy, &cache, {});
    return Dot(yy, r);
  };
  ExpectGradientsNear(dx.data, NumericalGradient(objective, &x.data), kFdAtol, kFdRtol,
                      layer->Type().c_str());
}

TEST(ReluLayerTest, Forward) {
  LayerCache cache;
  ReluLayer relu;
  Tensor x;
  x.shape = {2, 3};
  x.data = {-1.5f, 0.0f, 2.0f, 3.25f, -0.0f, -7.0f};
  Tensor y;
  relu.Forward(x, &y, &cache, {});
  EXPECT_EQ(y.shape, x.shape);
  EXPECT_EQ(y.data, (std::vector<float>{0, 0, 2, 3.25f, 0, 0}));
  EXPECT_TRUE(relu.Params().empty());
}

TEST(ReluLayerTest, NanPropagates) {
  LayerCache cache;
  ReluLayer relu;
  Tensor x;
  x.shape = {1, 1};
  x.data = {std::nanf("")};
  Tensor y;
  relu.Forward(x, &y, &cache, {});
  EXPECT_TRUE(std::isnan(y.data[0]));
}

TEST(ReluLayerTest, BackwardMatchesFiniteDifferences) {
  ReluLayer relu;
  Tensor x = RandomTensor({3, 2, 4}, 11, -1, 1);
  PushAwayFromZero(&x, 2 * testing::kFdStep);
  CheckBackward(&relu, x, 12);
}

TEST(ReluLayerTest, BackwardMasksByInputSign) {
  LayerCache cache;
  ReluLayer relu;
  Tensor x;
  x.shape = {1, 4};
  x.data = {-1, 0, 1, 2};
  Tensor y, dx;
  relu.Forward(x, &y, &cache, {});
  Tensor dy;
  dy.shape = {1, 4};
  dy.data = {5, 6, 7, 8};
  relu.Backward(x, y, dy, &dx, &cache);
  EXPECT_EQ(dx.data, (std::vector<float>{0, 0, 7, 8}));
}

// Long enough for the vectorized body and its scalar remainder; in place (dx aliasing dy, which
// the header allows) as well as into a tensor of its own.
TEST(ReluLayerTest, BackwardOverALongTensorAndInPlace) {
  LayerCache cache;
  ReluLayer relu;
  Tensor x = RandomTensor({3, 37}, 21, -1, 1);
  x.data[5] = 0.0f;  // the subgradient at 0 is 0
  const Tensor dy = RandomTensor({3, 37}, 22, -1, 1);
  std::vector<float> expected(x.data.size());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = x.data[i] > 0 ? dy.data[i] : 0.0f;
  Tensor y, dx;
  relu.Forward(x, &y, &cache, {});
  relu.Backward(x, y, dy, &dx, &cache);
  EXPECT_EQ(dx.data, expected);
  Tensor in_place = dy;
  relu.Backward(x, y, in_place, &in_place, &cache);
  EXPECT_EQ(in_place.data, expected);
}

TEST(GeluLayerTest, ForwardIsTheExactErfForm) {
  LayerCache cache;
  GeluLayer gelu;
  Tensor x;
  x.shape = {1, 5};
  x.data = {-3, -1, 0, 0.5f, 1};
  Tensor y;
  gelu.Forward(x, &y, &cache, {});
  // x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2 evaluated in double (Python math.erf):
  //   -3 * Phi(-3) = -0.00404969409489031, -1 * Phi(-1) = -0.15865525393145707,
  //   0.5 * Phi(0.5) = 0.34573123063700656, 1 * Phi(1) = 0.8413447460685429.
  // The tanh approximation gives 0.8411920 at 1, off by 1.5e-4: the tolerance rejects it.
  const std::vector<double> expected = {-0.00404969409489031, -0.15865525393145707, 0.0,
                                        0.34573123063700656, 0.8413447460685429};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(y.data[i], expected[i], 1e-6) << i;
}

TEST(GeluLayerTest, BackwardMatchesFiniteDifferences) {
  GeluLayer gelu;
  CheckBackward(&gelu, RandomTensor({4, 5}, 21, -3, 3), 22);
}

TEST(GeluLayerTest, DerivativeAtKnownPoints) {
  LayerCache cache;
  GeluLayer gelu;
  Tensor x;
  x.shape = {1, 3};
  x.data = {0, 1, -1};
  Tensor y, dx;
  gelu.Forward(x, &y, &cache, {});
  Tensor dy;
  dy.shape = {1, 3};
  dy.data = {1, 1, 2};
  gelu.Backward(x, y, dy, &dx, &cache);
  // GELU'(x) = Phi(x) + x phi(x): at 0 it is 0.5; at 1, 0.8413447461 + 0.2419707245 =
  // 1.0833154706; at -1, 0.1586552539 - 0.2419707245 = -0.0833154706 (times dy = 2).
  EXPECT_NEAR(dx.data[0], 0.5, 1e-6);
  EXPECT_NEAR(dx.data[1], 1.0833154706, 1e-6);
  EXPECT_NEAR(dx.data[2], 2 * -0.0833154706, 1e-6);
}

TEST(FlattenLayerTest, ForwardKeepsRowMajorOrder) {
  LayerCache cache;
  FlattenLayer flatten;
  Tensor x = RandomTensor({2, 3, 2, 2}, 31, -1, 1);
  Tensor y;
  flatten.Forward(x, &y, &cache, {});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(y.data, x.data);
}

TEST(FlattenLayerTest, BackwardReshapesToInput) {
  LayerCache cache;
  FlattenLayer flatten;
  CheckBackward(&flatten, RandomTensor({3, 1, 2, 3}, 41, -1, 1), 42);
  Tensor x = RandomTensor({2, 2, 2}, 43, -1, 1);
  Tensor y, dx;
  flatten.Forward(x, &y, &cache, {});
  const Tensor dy = RandomTensor({2, 4}, 44, -1, 1);
  flatten.Backward(x, y, dy, &dx, &cache);
  EXPECT_EQ(dx.shape, x.shape);
  EXPECT_EQ(dx.data, dy.data);
}

}  // namespace
}  // namespace dapple::kernels

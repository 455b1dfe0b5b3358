#include "kernels/cpu/linear.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"

namespace dapple::kernels {
namespace {

using testing::Dot;
using testing::ExpectGradientsNear;
using testing::NumericalGradient;
using testing::RandomTensor;

// Finite differences of a float forward: the objective's rounding error is about
// 1e-7 * |objective| per evaluation, divided by 2h = 1/64, so ~1e-5 on gradients of order 1.
// 5e-4 + 1e-3 relative leaves margin and still flags a wrong transpose or a dropped term
// (errors of order 0.1 to 1 with these shapes).
constexpr double kFdAtol = 5e-4;
constexpr double kFdRtol = 1e-3;

LinearLayer MakeLayer(int64_t in, int64_t out, uint64_t stream) {
  LinearLayer layer(3, in, out);
  layer.weight().value = RandomTensor({out, in}, stream, -1, 1);
  layer.bias().value = RandomTensor({out}, stream + 1, -1, 1);
  return layer;
}

TEST(LinearLayerTest, ParamsNamesShapesAndZeroGrads) {
  LinearLayer layer(4, 3, 2);
  EXPECT_EQ(layer.Type(), "linear");
  std::vector<Param*> params = layer.Params();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "layer4.weight");
  EXPECT_EQ(params[0]->value.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(params[0]->grad.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(params[1]->name, "layer4.bias");
  EXPECT_EQ(params[1]->value.shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(params[1]->grad.data, std::vector<float>(2, 0.0f));
}

TEST(LinearLayerTest, InitParamsWithinPytorchBound) {
  LinearLayer layer(1, 16, 8);
  layer.InitParams(7);
  const float bound = 0.25f;  // 1 / sqrt(16)
  for (const Param* p : layer.Params()) {
    float lo = 1, hi = -1;
    for (float v : p->value.data) {
      EXPECT_GE(v, -bound);
      EXPECT_LT(v, bound);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_LT(lo, 0) << p->name;  // both signs drawn: not all zero or one-sided
    EXPECT_GT(hi, 0) << p->name;
  }
}

TEST(LinearLayerTest, ForwardMatchesNaiveLoop) {
  LayerCache cache;
  const int64_t n = 5, in = 7, out = 4;
  LinearLayer layer = MakeLayer(in, out, 100);
  Tensor x = RandomTensor({n, in}, 200, -2, 2);
  Tensor y;
  layer.Forward(x, &y, &cache, {});
  ASSERT_EQ(y.shape, (std::vector<int64_t>{n, out}));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < out; ++j) {
      double expected = layer.bias().value.data[j];
      for (int64_t k = 0; k < in; ++k) {
        expected += static_cast<double>(x.data[r * in + k]) *
                    static_cast<double>(layer.weight().value.data[j * in + k]);
      }
      // 7 float products summed: a few float ulps of values up to ~15.
      EXPECT_NEAR(y.data[r * out + j], expected, 1e-5 * (1 + std::fabs(expected)))
          << "row " << r << " col " << j;
    }
  }
}

TEST(LinearLayerTest, ForwardReusesOutputAndHandlesEmptyBatch) {
  LayerCache cache;
  LinearLayer layer = MakeLayer(3, 2, 1);
  Tensor y;
  layer.Forward(RandomTensor({4, 3}, 2, -1, 1), &y, &cache, {});
  layer.Forward(Tensor::Zeros({0, 3}), &y, &cache, {});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(y.data.empty());
}

TEST(LinearLayerTest, BackwardMatchesFiniteDifferences) {
  LayerCache cache;
  const int64_t n = 4, in = 6, out = 5;
  LinearLayer layer = MakeLayer(in, out, 300);
  Tensor x = RandomTensor({n, in}, 400, -1, 1);
  const Tensor r = RandomTensor({n, out}, 500, -1, 1);  // dL/dy for L = sum(y * r)
  Tensor y;
  layer.Forward(x, &y, &cache, {});
  Tensor dx;
  layer.Backward(x, y, r, &dx, &cache);
  ASSERT_EQ(dx.shape, x.shape);

  auto objective = [&]() {
    Tensor yy;
    layer.Forward(x, &yy, &cache, {});
    return Dot(yy, r);
  };
  ExpectGradientsNear(dx.data, NumericalGradient(objective, &x.data), kFdAtol, kFdRtol, "dx");
  ExpectGradientsNear(layer.weight().grad.data,
                      NumericalGradient(objective, &layer.weight().value.data), kFdAtol, kFdRtol,
                      "dW");
  ExpectGradientsNear(layer.bias().grad.data,
                      NumericalGradient(objective, &layer.bias().value.data), kFdAtol, kFdRtol,
                      "db");
}

TEST(LinearLayerTest, BackwardAccumulatesParamGradsAndOverwritesDx) {
  LayerCache cache;
  const int64_t n = 3, in = 4, out = 2;
  LinearLayer layer = MakeLayer(in, out, 600);
  const Tensor x = RandomTensor({n, in}, 700, -1, 1);
  const Tensor dy = RandomTensor({n, out}, 800, -1, 1);
  Tensor y, dx1, dx2;
  layer.Forward(x, &y, &cache, {});
  layer.Backward(x, y, dy, &dx1, &cache);
  const std::vector<float> dw1 = layer.weight().grad.data;
  const std::vector<float> db1 = layer.bias().grad.data;
  dx2 = RandomTensor({n, in}, 900, -5, 5);  // stale contents must be overwritten
  layer.Backward(x, y, dy, &dx2, &cache);
  EXPECT_EQ(dx2.data, dx1.data);
  // Accumulation adds in a different order than 2 * g, so allow float rounding (values ~1).
  for (size_t i = 0; i < dw1.size(); ++i) {
    EXPECT_NEAR(layer.weight().grad.data[i], 2 * dw1[i], 1e-6) << i;
  }
  for (size_t i = 0; i < db1.size(); ++i) {
    EXPECT_NEAR(layer.bias().grad.data[i], 2 * db1[i], 1e-6) << i;
  }
  // A null dx still accumulates the parameter gradients.
  layer.Backward(x, y, dy, nullptr, &cache);
  for (size_t i = 0; i < dw1.size(); ++i) {
    EXPECT_NEAR(layer.weight().grad.data[i], 3 * dw1[i], 1e-6) << i;
  }
  for (size_t i = 0; i < db1.size(); ++i) {
    EXPECT_NEAR(layer.bias().grad.data[i], 3 * db1[i], 1e-6) << i;
  }
}

TEST(LinearLayerDeathTest, WrongInputShapeAborts) {
  LayerCache cache;
  // OpenBLAS starts threads at load: re-exec rather than fork the threaded process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  LinearLayer layer(2, 4, 3);
  Tensor y;
  EXPECT_DEATH(layer.Forward(Tensor::Zeros({2, 5}), &y, &cache, {}),
               "layer2 \\(linear\\) expects x \\[N, 4\\]");
}

}  // namespace
}  // namespace dapple::kernels

#include "kernels/cpu/onednn_conv.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/image_reference_testing.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;
using testing::Reference;

// Float sums of any order are within a few ulps of the sum of |terms| (the sums here have at
// most a few hundred terms, whose rounding errors add like a random walk).
constexpr double kSumTol = 2e-6;

void ExpectNearReference(const std::vector<float>& got, const Reference& want, const char* what) {
  ASSERT_EQ(got.size(), want.value.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want.value[i], kSumTol * want.scale[i] + 1e-30) << what << " " << i;
  }
}

std::vector<float> Values(const std::vector<int64_t>& shape, uint64_t stream) {
  return RandomTensor(shape, stream, -1, 1).data;
}

// Odd sizes and strides that skip trailing input, with and without padding.
const ConvGeometry kConvs[] = {
    {2, 3, 7, 6, 4, 3, 1, 1},
    {2, 3, 8, 9, 5, 3, 2, 1},
    {1, 4, 5, 5, 2, 1, 2, 0},
    {3, 2, 6, 6, 3, 5, 1, 2},
};

TEST(Conv2dOpTest, WindowOutputSizeIsPytorchsFloorRule) {
  EXPECT_EQ(WindowOutputSize(28, 3, 1, 1), 28);
  EXPECT_EQ(WindowOutputSize(28, 3, 2, 1), 14);
  EXPECT_EQ(WindowOutputSize(8, 3, 2, 0), 3);  // the last input column is never read
  EXPECT_EQ(WindowOutputSize(7, 2, 2, 0), 3);
}

TEST(Conv2dOpTest, ForwardMatchesReference) {
  Conv2dOp op;
  uint64_t stream = 1;
  for (const ConvGeometry& g : kConvs) {
    for (bool bias : {true, false}) {
      const std::vector<float> x = Values({g.n, g.c, g.h, g.w}, stream++);
      const std::vector<float> w = Values({g.out_channels, g.c, g.kernel, g.kernel}, stream++);
      const std::vector<float> b = bias ? Values({g.out_channels}, stream++) : std::vector<float>{};
      std::vector<float> y(g.n * g.out_channels * g.OutH() * g.OutW(), NAN);
      op.Forward(g, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
      ExpectNearReference(y, testing::ConvForwardReference(g, x, w, b), "y");
    }
  }
}

TEST(Conv2dOpTest, BackwardMatchesReference) {
  Conv2dOp op;
  uint64_t stream = 100;
  for (const ConvGeometry& g : kConvs) {
    for (bool bias : {true, false}) {
      const std::vector<float> x = Values({g.n, g.c, g.h, g.w}, stream++);
      const std::vector<float> w = Values({g.out_channels, g.c, g.kernel, g.kernel}, stream++);
      const std::vector<float> dy = Values({g.n, g.out_channels, g.OutH(), g.OutW()}, stream++);
      std::vector<float> dx(x.size(), NAN), dw(w.size(), NAN), db(g.out_channels, NAN);
      op.BackwardData(g, dy.data(), w.data(), dx.data());
      op.BackwardWeights(g, x.data(), dy.data(), dw.data(), bias ? db.data() : nullptr);
      ExpectNearReference(dx, testing::ConvBackwardReference(g, x, w, dy, /*data=*/true), "dx");
      ExpectNearReference(dw, testing::ConvBackwardReference(g, x, w, dy, /*data=*/false), "dw");
      if (!bias) continue;
      const int64_t plane = g.OutH() * g.OutW();
      for (int64_t o = 0; o < g.out_channels; ++o) {
        double sum = 0, scale = 0;
        for (int64_t n = 0; n < g.n; ++n)
          for (int64_t i = 0; i < plane; ++i) {
            const double d = dy[(n * g.out_channels + o) * plane + i];
            sum += d;
            scale += std::fabs(d);
          }
        EXPECT_NEAR(db[o], sum, kSumTol * scale) << "db " << o;
      }
    }
  }
}

// Overlapping windows, padding, windows that skip trailing input, a global window.
const PoolGeometry kPools[] = {
    {2, 3, 7, 7, 3, 3, 2, 1},
    {2, 2, 8, 6, 2, 2, 2, 0},
    {1, 2, 9, 9, 3, 3, 3, 0},
    {2, 4, 5, 3, 5, 3, 1, 0},
};

TEST(Pool2dOpTest, ForwardAndBackwardMatchReference) {
  uint64_t stream = 200;
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
    Pool2dOp op(kind);
    for (const PoolGeometry& g : kPools) {
      const std::vector<float> x = Values({g.n, g.c, g.h, g.w}, stream++);
      const std::vector<float> dy = Values({g.n, g.c, g.OutH(), g.OutW()}, stream++);
      std::vector<float> y(dy.size(), NAN), dx(x.size(), NAN);
      std::vector<uint8_t> workspace(op.WorkspaceBytes(g));
      EXPECT_EQ(workspace.empty(), kind == PoolKind::kAverage);
      op.Forward(g, x.data(), y.data(), workspace.data());
      op.Backward(g, dy.data(), workspace.data(), dx.data());
      ExpectNearReference(y, testing::PoolReference(g, kind, x, nullptr), "y");
      ExpectNearReference(dx, testing::PoolReference(g, kind, x, &dy), "dx");
    }
  }
}

TEST(Pool2dOpTest, MaxOfTiedWindowGivesTheGradientToOneElement) {
  // After a ReLU whole windows are 0: the window's gradient goes to exactly one element, the
  // first (as PyTorch's CPU kernel).
  const PoolGeometry g{1, 1, 4, 4, 2, 2, 2, 0};
  Pool2dOp op(PoolKind::kMax);
  const std::vector<float> x(16, 0.0f);
  const std::vector<float> dy = {1, 2, 3, 4};
  std::vector<float> y(4), dx(16);
  std::vector<uint8_t> workspace(op.WorkspaceBytes(g));
  op.Forward(g, x.data(), y.data(), workspace.data());
  op.Backward(g, dy.data(), workspace.data(), dx.data());
  ExpectNearReference(dx, testing::PoolReference(g, PoolKind::kMax, x, &dy), "dx");
}

TEST(BatchNormOpTest, TrainingForwardBackwardAndInferenceMatchReference) {
  struct Shape {
    int64_t n, c, hw;
  };
  BatchNormOp op;
  uint64_t stream = 300;
  const float eps = 1e-5f;
  for (const Shape& s : {Shape{4, 3, 25}, Shape{2, 5, 1}, Shape{1, 2, 49}, Shape{8, 16, 16}}) {
    // Off-centre inputs of different spreads per channel, as after a convolution.
    std::vector<float> x = RandomTensor({s.n, s.c, s.hw}, stream++, -1, 3).data;
    for (size_t i = 0; i < x.size(); ++i) x[i] *= 1 + (i / s.hw) % s.c;
    const std::vector<float> gamma = RandomTensor({s.c}, stream++, 0.5, 1.5).data;
    const std::vector<float> beta = Values({s.c}, stream++);
    const std::vector<float> dy = Values({s.n, s.c, s.hw}, stream++);
    const testing::BatchNormReference ref =
        testing::BatchNormRef(s.n, s.c, s.hw, eps, x, gamma, beta, dy);
    std::vector<float> y(x.size()), mean(s.c), var(s.c), dx(x.size()), dgamma(s.c), dbeta(s.c);
    op.ForwardTraining(s.n, s.c, s.hw, eps, x.data(), gamma.data(), beta.data(), y.data(),
                       mean.data(), var.data());
    op.Backward(s.n, s.c, s.hw, eps, x.data(), dy.data(), mean.data(), var.data(), gamma.data(),
                dx.data(), dgamma.data(), dbeta.data());
    // Statistics within float rounding of their magnitude; y and dx (O(1)) within 1e-5 of it;
    // the parameter gradients, sums of n hw terms of O(1), within 1e-6 of that count.
    const double count = static_cast<double>(s.n * s.hw);
    double dx_scale = 0;
    for (double v : ref.dx) dx_scale = std::max(dx_scale, std::fabs(v));
    for (int64_t c = 0; c < s.c; ++c) {
      EXPECT_NEAR(mean[c], ref.mean[c], 1e-6 * (1 + std::fabs(ref.mean[c])));
      EXPECT_NEAR(var[c], ref.var[c], 1e-5 * ref.var[c] + 1e-7);
      EXPECT_NEAR(dgamma[c], ref.dgamma[c], 1e-6 * count);
      EXPECT_NEAR(dbeta[c], ref.dbeta[c], 1e-6 * count);
    }
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(y[i], ref.y[i], 1e-5 * (1 + std::fabs(ref.y[i]))) << i;
      EXPECT_NEAR(dx[i], ref.dx[i], 1e-5 * (1 + dx_scale)) << i;
    }
    // Inference with the batch's own statistics gives the training output.
    std::vector<float> y_inf(x.size());
    op.ForwardInference(s.n, s.c, s.hw, eps, x.data(), gamma.data(), beta.data(), mean.data(),
                        var.data(), y_inf.data());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y_inf[i], y[i], 1e-6 * (1 + std::fabs(y[i])));
  }
}

TEST(BatchNormOpTest, InferenceUsesTheGivenStatistics) {
  BatchNormOp op;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};  // [2, 2, 2]
  const std::vector<float> gamma = {2, 0.5}, beta = {1, -1}, mean = {0.5, 4}, var = {4, 0.25};
  std::vector<float> y(8);
  op.ForwardInference(2, 2, 2, 0.0f, x.data(), gamma.data(), beta.data(), mean.data(), var.data(),
                      y.data());
  for (int64_t i = 0; i < 8; ++i) {
    const int64_t c = (i / 2) % 2;
    EXPECT_FLOAT_EQ(y[i], (x[i] - mean[c]) / std::sqrt(var[c]) * gamma[c] + beta[c]) << i;
  }
}

}  // namespace
}  // namespace dapple::kernels

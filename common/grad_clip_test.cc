#include "common/grad_clip.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace dapple {
namespace {

TEST(GradClipTest, NoClippingWhenOffOrWithinTheNorm) {
  EXPECT_EQ(ClipCoefficient(0.0, 1e6), 1.0);   // max_grad_norm 0: off
  EXPECT_EQ(ClipCoefficient(1.0, 0.25), 1.0);  // norm 0.5
  EXPECT_EQ(ClipCoefficient(1.0, 0.0), 1.0);
  // 2 / (1 + 1e-6) > 1: within.
  EXPECT_EQ(ClipCoefficient(2.0, 1.0), 1.0);
}

TEST(GradClipTest, AsTorchClipGradNorm) {
  // Norm 2, max 1: 1 / (2 + 1e-6).
  EXPECT_DOUBLE_EQ(ClipCoefficient(1.0, 4.0), 1.0 / 2.000001);
  // Norm 5 (3-4-5), max 0.5: 0.5 / 5.000001.
  EXPECT_DOUBLE_EQ(ClipCoefficient(0.5, 25.0), 0.5 / 5.000001);
  // Exactly at the norm the epsilon still scales by a hair, as PyTorch does.
  EXPECT_DOUBLE_EQ(ClipCoefficient(1.0, 1.0), 1.0 / 1.000001);
  EXPECT_LT(ClipCoefficient(1.0, 1.0), 1.0);
}

TEST(GradClipTest, NonFiniteNormsGiveWhatPyTorchGives) {
  EXPECT_EQ(ClipCoefficient(1.0, std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_TRUE(std::isnan(ClipCoefficient(1.0, std::nan(""))));
}

}  // namespace
}  // namespace dapple

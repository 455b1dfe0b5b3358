#include "worker/runtime/token_sampler.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

// Frequencies of each token over `draws` positions.
std::vector<double> Frequencies(const std::vector<float>& logits, double temperature, uint64_t seed,
                                int draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    const int64_t k =
        SampleToken(logits.data(), static_cast<int64_t>(logits.size()), temperature, seed, i);
    EXPECT_GE(k, 0);
    EXPECT_LT(k, static_cast<int64_t>(logits.size()));
    ++counts[k];
  }
  std::vector<double> f;
  for (int c : counts) f.push_back(static_cast<double>(c) / draws);
  return f;
}

TEST(SampleUniformTest, InUnitIntervalAndAPureFunctionOfSeedAndPosition) {
  for (int64_t p = 0; p < 1000; ++p) {
    const double u = SampleUniform(42, p);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    EXPECT_EQ(u, SampleUniform(42, p));
  }
  EXPECT_NE(SampleUniform(42, 0), SampleUniform(43, 0));
  EXPECT_NE(SampleUniform(42, 0), SampleUniform(42, 1));
}

TEST(SampleTokenTest, TemperatureZeroIsTheFirstMostLikelyToken) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  for (int64_t p = 0; p < 20; ++p) EXPECT_EQ(SampleToken(logits.data(), 4, 0.0, 7, p), 1);
}

TEST(SampleTokenTest, FollowsTheSoftmaxOfTheLogits) {
  // Probabilities 0.1, 0.2, 0.7 at temperature 1; 10000 draws: a standard error below 0.005.
  const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.7f)};
  const std::vector<double> f = Frequencies(logits, 1.0, 42, 10000);
  EXPECT_NEAR(f[0], 0.1, 0.02);
  EXPECT_NEAR(f[1], 0.2, 0.02);
  EXPECT_NEAR(f[2], 0.7, 0.02);
  // Temperature 2 flattens them: softmax(log p / 2) is proportional to sqrt(p).
  const double z = std::sqrt(0.1) + std::sqrt(0.2) + std::sqrt(0.7);
  const std::vector<double> g = Frequencies(logits, 2.0, 42, 10000);
  EXPECT_NEAR(g[0], std::sqrt(0.1) / z, 0.02);
  EXPECT_NEAR(g[2], std::sqrt(0.7) / z, 0.02);
}

TEST(SampleTokenTest, ALowTemperatureAlmostAlwaysPicksTheMaximum) {
  const std::vector<float> logits = {1.0f, 1.5f, 0.0f};
  const std::vector<double> f = Frequencies(logits, 0.01, 3, 1000);
  EXPECT_EQ(f[1], 1.0);
}

TEST(SampleTokenTest, ReproducibleForASeed) {
  std::vector<float> logits(256);
  for (int k = 0; k < 256; ++k) logits[k] = static_cast<float>(std::sin(k * 0.37));
  std::vector<int64_t> a, b, c;
  for (int64_t p = 0; p < 200; ++p) {
    a.push_back(SampleToken(logits.data(), 256, 0.8, 42, p));
    b.push_back(SampleToken(logits.data(), 256, 0.8, 42, p));
    c.push_back(SampleToken(logits.data(), 256, 0.8, 43, p));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(SampleTokenTest, NanLogitsNeverWin) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 0.0f, nan, 0.0f};
  for (double t : {0.0, 1.0}) {
    for (int64_t p = 0; p < 100; ++p) {
      const int64_t k = SampleToken(logits.data(), 4, t, 1, p);
      EXPECT_TRUE(k == 1 || k == 3) << k;
    }
  }
  const std::vector<float> all_nan = {nan, nan};
  EXPECT_EQ(SampleToken(all_nan.data(), 2, 1.0, 1, 0), 0);
}

}  // namespace
}  // namespace dapple::worker

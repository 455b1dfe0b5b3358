#include "kernels/cpu/init.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace dapple::kernels {
namespace {

TEST(SplitMix64Test, MatchesReferenceSequence) {
  // The reference splitmix64 (Vigna, prng.di.unimi.it/splitmix64.c) seeded with 0 yields these.
  EXPECT_EQ(SplitMix64At(0, 0), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(SplitMix64At(0, 1), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(SplitMix64At(0, 2), 0x06C45D188009454FULL);
}

TEST(UnitFloat24Test, RangeAndResolution) {
  EXPECT_EQ(UnitFloat24(0), 0.0f);
  EXPECT_EQ(UnitFloat24(~0ULL), 1.0f - 1.0f / 16777216.0f);
  EXPECT_EQ(UnitFloat24(1ULL << 63), 0.5f);
  EXPECT_EQ(UnitFloat24((1ULL << 40) - 1), 0.0f);  // only the top 24 bits count
}

TEST(InitStreamKeyTest, DistinctForNearbyInputs) {
  std::vector<uint64_t> keys;
  for (uint64_t seed : {0ULL, 1ULL, 42ULL}) {
    for (int layer = 0; layer < 4; ++layer) {
      keys.push_back(InitStreamKey(seed, layer, InitTensor::kWeight));
      keys.push_back(InitStreamKey(seed, layer, InitTensor::kBias));
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = i + 1; j < keys.size(); ++j) EXPECT_NE(keys[i], keys[j]) << i << " " << j;
  }
}

TEST(FillSymmetricUniformTest, BoundedCenteredAndReproducible) {
  Tensor a = Tensor::Zeros({100, 100});
  Tensor b = Tensor::Zeros({100, 100});
  FillSymmetricUniform(42, 3, InitTensor::kWeight, 0.5f, &a);
  FillSymmetricUniform(42, 3, InitTensor::kWeight, 0.5f, &b);
  EXPECT_EQ(a.data, b.data);
  double sum = 0, sum_sq = 0;
  for (float v : a.data) {
    ASSERT_GE(v, -0.5f);
    ASSERT_LT(v, 0.5f);
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(a.data.size());
  // U(-0.5, 0.5): mean 0 (std error 0.0029 here), variance 1/12.
  EXPECT_NEAR(sum / n, 0.0, 0.015);
  EXPECT_NEAR(sum_sq / n, 1.0 / 12, 0.005);
  // A prefix of a bigger tensor is the smaller tensor: element i depends on i only.
  Tensor small = Tensor::Zeros({10});
  FillSymmetricUniform(42, 3, InitTensor::kWeight, 0.5f, &small);
  EXPECT_EQ(small.data, std::vector<float>(a.data.begin(), a.data.begin() + 10));
}

}  // namespace
}  // namespace dapple::kernels

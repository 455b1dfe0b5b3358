#include "common/non_finite.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace dapple {
namespace {

TEST(NonFiniteTest, FindsEveryKindAtEveryPositionAndNothingInFiniteValues) {
  using L = std::numeric_limits<float>;
  // 11 values: two 4-lane blocks and a tail of 3.
  const std::vector<float> finite = {0.0f,
                                     -0.0f,
                                     1.0f,
                                     -2.5f,
                                     L::max(),
                                     L::lowest(),
                                     L::min(),
                                     L::denorm_min(),
                                     -L::denorm_min(),
                                     1e-30f,
                                     3e38f};
  EXPECT_FALSE(AnyNonFinite(finite.data(), static_cast<int64_t>(finite.size())));
  EXPECT_FALSE(AnyNonFinite(finite.data(), 0));
  for (float bad :
       {L::infinity(), -L::infinity(), L::quiet_NaN(), -L::quiet_NaN(), L::signaling_NaN()}) {
    for (size_t at = 0; at < finite.size(); ++at) {
      std::vector<float> v = finite;
      v[at] = bad;
      EXPECT_TRUE(AnyNonFinite(v.data(), static_cast<int64_t>(v.size()))) << bad << " at " << at;
      // Only the first n values count.
      EXPECT_EQ(AnyNonFinite(v.data(), static_cast<int64_t>(at)), false) << at;
    }
  }
  // Unaligned starts.
  std::vector<float> v(37, 1.0f);
  v[36] = L::infinity();
  for (int start = 0; start < 4; ++start) {
    EXPECT_TRUE(AnyNonFinite(v.data() + start, 37 - start)) << start;
  }
}

}  // namespace
}  // namespace dapple

#include "common/squared_norm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace dapple {
namespace {

long double InOrder(const std::vector<float>& v, size_t from = 0) {
  long double sum = 0;
  for (size_t i = from; i < v.size(); ++i) sum += static_cast<long double>(v[i]) * v[i];
  return sum;
}

TEST(SquaredNormTest, MatchesAnExactSumAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (int n : {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 1000, 1860000}) {
    std::vector<float> v(static_cast<size_t>(n) + 1);
    for (float& x : v) x = dist(rng);
    for (size_t offset : {size_t{0}, size_t{1}}) {  // unaligned too
      SCOPED_TRACE(::testing::Message() << "n " << n << " offset " << offset);
      const std::vector<float> part(v.begin() + offset, v.begin() + offset + n);
      const double exact = static_cast<double>(InOrder(part));
      // The bound of any order of double summation of n non-negative terms: (n - 1) u.
      const double bound = std::max(0, n - 1) * std::ldexp(1.0, -53) * exact;
      EXPECT_NEAR(SquaredNorm(part.data(), n), exact, bound);
    }
  }
}

TEST(SquaredNormTest, IsTheSameForTheSameBufferAndPropagatesNonFiniteValues) {
  std::vector<float> v(1001, 0.5f);
  EXPECT_EQ(SquaredNorm(v.data(), 1001), 1001 * 0.25);
  EXPECT_EQ(SquaredNorm(v.data(), 1001), SquaredNorm(v.data(), 1001));
  v[500] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(SquaredNorm(v.data(), 1001)));
  v[1000] = std::numeric_limits<float>::quiet_NaN();  // in the tail
  EXPECT_TRUE(std::isnan(SquaredNorm(v.data(), 1001)));
  v[1000] = 0;
  v[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(SquaredNorm(v.data(), 1001)));
  EXPECT_EQ(SquaredNorm(v.data(), 0), 0.0);
}

}  // namespace
}  // namespace dapple

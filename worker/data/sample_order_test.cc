#include "worker/data/sample_order.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

bool IsPermutation(std::vector<int64_t> order, int64_t n) {
  if (static_cast<int64_t>(order.size()) != n) return false;
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < n; ++i) {
    if (order[i] != i) return false;
  }
  return true;
}

TEST(EpochOrderTest, IsAPermutation) {
  for (int64_t n : {0, 1, 2, 7, 1000, 60000}) {
    EXPECT_TRUE(IsPermutation(EpochOrder(n, 42, 0), n)) << n;
    EXPECT_TRUE(IsPermutation(EpochOrder(n, 42, 5), n)) << n;
  }
  EXPECT_TRUE(EpochOrder(-3, 1, 0).empty());
}

TEST(EpochOrderTest, IsDeterministic) {
  EXPECT_EQ(EpochOrder(60000, 42, 3), EpochOrder(60000, 42, 3));
  // Pinned so that a change of the algorithm, which would make workers built from different
  // versions disagree on the sample order, fails here.
  // The expected order was computed by an independent Python implementation of splitmix64 +
  // Lemire's bounded draw + Fisher-Yates.
  EXPECT_EQ(EpochOrder(10, 42, 0), (std::vector<int64_t>{6, 7, 0, 1, 3, 2, 8, 5, 4, 9}));
}

TEST(EpochOrderTest, DiffersAcrossEpochsAndSeeds) {
  const std::vector<int64_t> base = EpochOrder(60000, 42, 0);
  EXPECT_NE(base, EpochOrder(60000, 42, 1));
  EXPECT_NE(base, EpochOrder(60000, 43, 0));
  EXPECT_NE(EpochOrder(60000, 0, 1), EpochOrder(60000, 1, 0));
  // Not just a rotation or a small perturbation: most positions move.
  const std::vector<int64_t> next = EpochOrder(60000, 42, 1);
  int64_t same = 0;
  for (size_t i = 0; i < base.size(); ++i) same += base[i] == next[i];
  EXPECT_LT(same, 10);
  // Shuffled at all: the identity would leave every sample in place.
  int64_t fixed = 0;
  for (size_t i = 0; i < base.size(); ++i) fixed += base[i] == static_cast<int64_t>(i);
  EXPECT_LT(fixed, 10);
}

TEST(EpochOrderTest, AllPermutationsOfThreeAreEquallyLikely) {
  // Over 60000 seeds each of the 3! orders should appear about 10000 times (binomial standard
  // deviation ~91); 500 is more than 5 sigma.
  std::map<std::vector<int64_t>, int> counts;
  for (uint64_t seed = 0; seed < 60000; ++seed) ++counts[EpochOrder(3, seed, 0)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [order, count] : counts) EXPECT_NEAR(count, 10000, 500);
}

}  // namespace
}  // namespace dapple::worker

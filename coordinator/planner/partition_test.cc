#include "coordinator/planner/partition.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;

std::vector<std::pair<int, int>> Pairs(const std::vector<v1::StageRange>& ranges) {
  std::vector<std::pair<int, int>> out;
  for (const v1::StageRange& r : ranges) out.emplace_back(r.first_layer(), r.last_layer());
  return out;
}

double MaxStageCost(const std::vector<double>& costs, const std::vector<v1::StageRange>& ranges) {
  double worst = 0;
  for (const v1::StageRange& r : ranges) {
    double c = 0;
    for (int i = r.first_layer(); i <= r.last_layer(); ++i) c += costs[i];
    worst = std::max(worst, c);
  }
  return worst;
}

// The smallest maximum stage cost over every partition, by enumeration (small L only).
double BruteForceBest(const std::vector<double>& costs, int stages) {
  const int L = static_cast<int>(costs.size());
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int, int, double)> go = [&](int first, int left, double worst) {
    if (left == 1) {
      double c = 0;
      for (int i = first; i < L; ++i) c += costs[i];
      best = std::min(best, std::max(worst, c));
      return;
    }
    double c = 0;
    for (int end = first; end <= L - left; ++end) {
      c += costs[end];
      go(end + 1, left - 1, std::max(worst, c));
    }
  };
  go(0, stages, 0);
  return best;
}

TEST(PartitionBalancedTest, PutsTheHeavyLayerAlone) {
  auto r = PartitionBalanced({1, 1, 10, 1, 1}, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Pairs(*r), (std::vector<std::pair<int, int>>{{0, 1}, {2, 2}, {3, 4}}));
}

TEST(PartitionBalancedTest, TiesGoToTheEarliestBoundaries) {
  auto r = PartitionBalanced({1, 1, 1, 1, 1}, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Pairs(*r), (std::vector<std::pair<int, int>>{{0, 1}, {2, 4}}));
  auto zeros = PartitionBalanced({0, 0, 0}, 3);
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(Pairs(*zeros), (std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {2, 2}}));
}

TEST(PartitionBalancedTest, RejectsFewerLayersThanStagesAndBadCosts) {
  auto r = PartitionBalanced({1, 2, 3}, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "the model has 3 layers but the plan has 4 stages: every stage needs at least one "
            "layer");
  EXPECT_FALSE(PartitionBalanced({1, 2}, 0).ok());
  EXPECT_THAT(PartitionBalanced({1, -2}, 1).status().message(), HasSubstr("layer 1"));
}

TEST(PartitionBalancedTest, OptimalAndAPartitionForRandomInputs) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 400; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 12);
    const int P = 1 + static_cast<int>(rng() % L);
    std::vector<double> costs(L);
    // Small integers make ties common, which exercises the tie-break.
    for (double& c : costs) c = static_cast<double>(rng() % 6);
    auto r = PartitionBalanced(costs, P);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(static_cast<int>(r->size()), P);
    EXPECT_TRUE(CheckPartition(*r, L).ok()) << "L=" << L << " P=" << P;
    EXPECT_EQ(MaxStageCost(costs, *r), BruteForceBest(costs, P)) << "L=" << L << " P=" << P;
    // Deterministic.
    EXPECT_EQ(Pairs(*PartitionBalanced(costs, P)), Pairs(*r));
  }
}

TEST(PartitionBalancedTest, EveryLayerInExactlyOneStageForLargerInputs) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 50; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 200);
    const int P = 1 + static_cast<int>(rng() % std::min(L, 32));
    std::vector<double> costs(L);
    for (double& c : costs) c = std::uniform_real_distribution<double>(0, 1e9)(rng);
    auto r = PartitionBalanced(costs, P);
    ASSERT_TRUE(r.ok());
    std::vector<int> seen(L, 0);
    for (const v1::StageRange& range : *r) {
      ASSERT_LE(range.first_layer(), range.last_layer());
      for (int i = range.first_layer(); i <= range.last_layer(); ++i) ++seen[i];
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), L) << "L=" << L << " P=" << P;
  }
}

void ExpectUniform(int L, int P) {
  auto r = PartitionUniform(L, P);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(static_cast<int>(r->size()), P);
  EXPECT_TRUE(CheckPartition(*r, L).ok());
  int lo = L;
  int hi = 0;
  for (const v1::StageRange& range : *r) {
    const int n = range.last_layer() - range.first_layer() + 1;
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  EXPECT_LE(hi - lo, 1) << "L=" << L << " P=" << P;
  EXPECT_GE(lo, 1);
}

TEST(PartitionUniformTest, CountsDifferByAtMostOne) {
  ExpectUniform(30, 4);
  ExpectUniform(38, 8);
  ExpectUniform(61, 8);
  ExpectUniform(8, 8);
  ExpectUniform(1, 1);
  auto r = PartitionUniform(30, 4);
  EXPECT_EQ(Pairs(*r), (std::vector<std::pair<int, int>>{{0, 7}, {8, 15}, {16, 22}, {23, 29}}));
  for (int L = 1; L <= 40; ++L) {
    for (int P = 1; P <= L; ++P) ExpectUniform(L, P);
  }
}

TEST(PartitionUniformTest, RejectsFewerLayersThanStages) {
  auto r = PartitionUniform(3, 4);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("every stage needs at least one layer"));
}

v1::StageRange Range(int first, int last) {
  v1::StageRange r;
  r.set_first_layer(first);
  r.set_last_layer(last);
  return r;
}

TEST(CheckPartitionTest, NamesTheOffendingRange) {
  EXPECT_TRUE(CheckPartition({Range(0, 2), Range(3, 5)}, 6).ok());
  EXPECT_EQ(CheckPartition({Range(0, 2), Range(4, 5)}, 6).message(),
            "parallel.stages[1] [4, 5] starts at layer 4 but parallel.stages[0] ended at layer 2: "
            "ranges must be contiguous");
  EXPECT_THAT(CheckPartition({Range(1, 5)}, 6).message(), HasSubstr("must start at layer 0"));
  EXPECT_THAT(CheckPartition({Range(0, 2), Range(3, 2)}, 6).message(), HasSubstr("is empty"));
  EXPECT_THAT(CheckPartition({Range(0, 2), Range(3, 6)}, 6).message(),
              HasSubstr("ends past the model's last layer 5: end it at layer 5 at most"));
  EXPECT_THAT(CheckPartition({Range(0, 2)}, 6).message(), HasSubstr("cover every layer"));
  EXPECT_THAT(CheckPartition({}, 6).message(), HasSubstr("empty"));
}

}  // namespace
}  // namespace dapple::coordinator

#include "common/schedule/ranks.h"

#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

v1::ParallelPlanSummary Plan(std::initializer_list<int> replicas) {
  v1::ParallelPlanSummary plan;
  for (int r : replicas) plan.add_stages()->set_replicas(r);
  return plan;
}

TEST(RanksTest, IndexCountsTheReplicasOfEarlierStages) {
  const v1::ParallelPlanSummary plan = Plan({2, 1, 3});
  EXPECT_EQ(RankIndex(plan, 0, 0), 0);
  EXPECT_EQ(RankIndex(plan, 0, 1), 1);
  EXPECT_EQ(RankIndex(plan, 1, 0), 2);
  EXPECT_EQ(RankIndex(plan, 2, 2), 5);
  EXPECT_EQ(NumRanks(plan), 6);
}

TEST(RanksTest, OneReplicaPerStageMakesTheIndexTheStage) {
  const v1::ParallelPlanSummary plan = Plan({0, 1, 0, 1});  // 0: an older plan without replicas
  for (int s = 0; s < 4; ++s) EXPECT_EQ(RankIndex(plan, s, 0), s);
  EXPECT_EQ(StageReplicas(plan, 0), 1);
  EXPECT_EQ(NumRanks(plan), 4);
}

TEST(RanksTest, SplitRowsCoversEveryRowOnceAndBalances) {
  for (int64_t rows : {1, 7, 8, 64}) {
    for (int d : {1, 2, 3, 4}) {
      int64_t next = 0;
      for (int r = 0; r < d; ++r) {
        const RowRange range = SplitRows(rows, d, r);
        EXPECT_EQ(range.begin, next) << rows << " rows, " << d << " replicas";
        EXPECT_GE(range.size(), rows / d);
        EXPECT_LE(range.size(), rows / d + 1);
        next = range.end;
      }
      EXPECT_EQ(next, rows);
    }
  }
  EXPECT_EQ(SplitRows(7, 2, 0).size(), 4);
  EXPECT_EQ(SplitRows(7, 2, 1).size(), 3);
}

TEST(RanksTest, OverlapIsTheIntersection) {
  EXPECT_EQ(RowOverlap({0, 4}, {2, 6}).begin, 2);
  EXPECT_EQ(RowOverlap({0, 4}, {2, 6}).end, 4);
  EXPECT_LE(RowOverlap({0, 2}, {2, 6}).size(), 0);
}

TEST(RanksTest, StepRowGroupsAreEachMicroBatchsReplicaShares) {
  const std::vector<RowRange> groups = StepRowGroups(14, 7, 2, false);
  ASSERT_EQ(groups.size(), 4u);
  const int64_t want[4][2] = {{0, 4}, {4, 7}, {7, 11}, {11, 14}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(groups[i].begin, want[i][0]) << i;
    EXPECT_EQ(groups[i].end, want[i][1]) << i;
  }
  // 1F1B-RR: whole micro-batches; one replica: the micro-batches.
  for (bool rr : {true, false}) {
    const std::vector<RowRange> whole = StepRowGroups(12, 4, rr ? 3 : 1, rr);
    ASSERT_EQ(whole.size(), 3u);
    EXPECT_EQ(whole[2].begin, 8);
    EXPECT_EQ(whole[2].end, 12);
  }
  EXPECT_EQ(ReplicaRows(7, 2, 1, false).begin, SplitRows(7, 2, 1).begin);
  EXPECT_EQ(ReplicaRows(7, 2, 1, true).size(), 7);
}

}  // namespace
}  // namespace dapple::schedule

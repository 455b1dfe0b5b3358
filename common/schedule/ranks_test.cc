#include "common/schedule/ranks.h"

#include <vector>

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

// A plan without chunks holds [first_layer, last_layer]; an interleaved one its chunks, and its
// neighbours wrap around (rank 0's later chunks follow rank P - 1's earlier ones).
TEST(RanksTest, StageChunksAndNeighbours) {
  v1::ParallelPlanSummary plan = Plan({1, 1, 1});
  plan.mutable_stages(1)->set_first_layer(2);
  plan.mutable_stages(1)->set_last_layer(4);
  ASSERT_EQ(StageChunks(plan, 1).size(), 1u);
  EXPECT_EQ(StageChunks(plan, 1)[0].first_layer(), 2);
  EXPECT_EQ(StageChunks(plan, 1)[0].last_layer(), 4);
  EXPECT_EQ(NeighbourStages(plan, 0), std::vector<int>({1}));
  EXPECT_EQ(NeighbourStages(plan, 1), std::vector<int>({0, 2}));
  EXPECT_EQ(NeighbourStages(plan, 2), std::vector<int>({1}));
  for (int s = 0; s < 3; ++s) {
    for (int c = 0; c < 2; ++c) {
      v1::StageRange* r = plan.mutable_stages(s)->add_chunks();
      r->set_first_layer(c * 3 + s);
      r->set_last_layer(c * 3 + s);
    }
  }
  ASSERT_EQ(StageChunks(plan, 1).size(), 2u);
  EXPECT_EQ(StageChunks(plan, 1)[1].first_layer(), 4);
  EXPECT_EQ(NeighbourStages(plan, 0), std::vector<int>({1, 2}));
  EXPECT_EQ(NeighbourStages(plan, 2), std::vector<int>({0, 1}));
  v1::ParallelPlanSummary two = Plan({1, 1});
  for (int s = 0; s < 2; ++s) {
    two.mutable_stages(s)->add_chunks();
    two.mutable_stages(s)->add_chunks();
  }
  EXPECT_EQ(NeighbourStages(two, 0), std::vector<int>({1}));
  EXPECT_EQ(NeighbourStages(two, 1), std::vector<int>({0}));
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

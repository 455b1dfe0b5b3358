#include "coordinator/planner/interleaved_partition.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/schedule/ranks.h"
#include "coordinator/planner/partition.h"
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

TEST(PartitionInterleavedTest, RankGetsEveryPthVirtualStage) {
  // 8 equal layers, P = 2, v = 2: virtual stages [0,1] [2,3] [4,5] [6,7]; rank 0 holds virtual
  // stages 0 and 2, rank 1 holds 1 and 3.
  const std::vector<double> costs(8, 1.0);
  absl::StatusOr<std::vector<std::vector<v1::StageRange>>> chunks =
      PartitionInterleaved(costs, 2, 2);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  ASSERT_EQ(chunks->size(), 2u);
  EXPECT_EQ(Pairs((*chunks)[0]), (std::vector<std::pair<int, int>>{{0, 1}, {4, 5}}));
  EXPECT_EQ(Pairs((*chunks)[1]), (std::vector<std::pair<int, int>>{{2, 3}, {6, 7}}));
}

TEST(PartitionInterleavedTest, VirtualStagesAreTheBalancedPartition) {
  const std::vector<double> costs = {5, 1, 1, 1, 4, 2, 2, 1, 3, 1, 1, 6};
  for (int p = 1; p <= 4; ++p) {
    for (int v = 1; v * p <= static_cast<int>(costs.size()); ++v) {
      absl::StatusOr<std::vector<std::vector<v1::StageRange>>> chunks =
          PartitionInterleaved(costs, p, v);
      ASSERT_TRUE(chunks.ok()) << chunks.status();
      absl::StatusOr<std::vector<v1::StageRange>> balanced = PartitionBalanced(costs, p * v);
      ASSERT_TRUE(balanced.ok());
      ASSERT_EQ(static_cast<int>(chunks->size()), p);
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(static_cast<int>((*chunks)[r].size()), v);
        for (int c = 0; c < v; ++c) {
          EXPECT_EQ(Pairs({(*chunks)[r][c]}), Pairs({(*balanced)[c * p + r]}))
              << "P " << p << " v " << v << " rank " << r << " chunk " << c;
        }
      }
    }
  }
}

TEST(PartitionInterleavedTest, Errors) {
  const std::vector<double> costs(3, 1.0);
  EXPECT_THAT(PartitionInterleaved(costs, 0, 2).status().message(), HasSubstr("P >= 1"));
  EXPECT_THAT(PartitionInterleaved(costs, 2, 0).status().message(), HasSubstr("v >= 1"));
  // 3 layers cannot make 4 virtual stages.
  const absl::Status status = PartitionInterleaved(costs, 2, 2).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("4 stages"));
}

TEST(SetStageChunksTest, StageChunksReadsThemBack) {
  const std::vector<double> costs(12, 1.0);
  absl::StatusOr<std::vector<std::vector<v1::StageRange>>> chunks =
      PartitionInterleaved(costs, 3, 2);
  ASSERT_TRUE(chunks.ok());
  v1::ParallelPlanSummary summary;
  for (int r = 0; r < 3; ++r) summary.add_stages();
  ASSERT_TRUE(SetStageChunks(*chunks, &summary).ok());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(summary.stages(r).first_layer(), (*chunks)[r][0].first_layer());
    EXPECT_EQ(summary.stages(r).last_layer(), (*chunks)[r][0].last_layer());
    EXPECT_EQ(Pairs(schedule::StageChunks(summary, r)), Pairs((*chunks)[r]));
  }
  // Ranks 0 and 2 exchange across the wrap (virtual stage 2 -> 3).
  EXPECT_EQ(schedule::NeighbourStages(summary, 0), (std::vector<int>{1, 2}));
}

TEST(SetStageChunksTest, Errors) {
  const std::vector<std::vector<v1::StageRange>> chunks(2, std::vector<v1::StageRange>(1));
  v1::ParallelPlanSummary summary;
  summary.add_stages()->set_last_layer(7);
  EXPECT_THAT(SetStageChunks(chunks, &summary).message(), HasSubstr("has 1 stages"));
  EXPECT_EQ(summary.stages(0).last_layer(), 7);
  summary.add_stages();
  const std::vector<std::vector<v1::StageRange>> empty_rank = {{v1::StageRange()}, {}};
  EXPECT_THAT(SetStageChunks(empty_rank, &summary).message(), HasSubstr("rank 1 has no chunk"));
}

}  // namespace
}  // namespace dapple::coordinator

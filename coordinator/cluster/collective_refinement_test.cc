#include "coordinator/cluster/collective_refinement.h"

#include <limits>

#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

TEST(CollectiveRefinementTest, NoJobNoOverhead) {
  CollectiveRefinement r;
  EXPECT_EQ(r.OverheadMs(), 0);
  EXPECT_EQ(r.jobs(), 0);
}

TEST(CollectiveRefinementTest, TheExcessIsSharedByTheStepsCollectivesOnTopOfThePlannedOverhead) {
  CollectiveRefinement r;
  // Planned without overhead, 5 ms more per step with one collective: 5 ms each.
  EXPECT_DOUBLE_EQ(r.Observe(0, 5, 1), 5);
  // Planned with 5 ms, 2 ms more with two collectives (ALLREDUCE and GLOBAL_NORM): 6 ms.
  EXPECT_DOUBLE_EQ(r.Observe(5, 2, 2), 6);
  // Planned with 6, measured 1 ms less than predicted: 5.
  EXPECT_DOUBLE_EQ(r.Observe(6, -1, 1), 5);
  EXPECT_DOUBLE_EQ(r.OverheadMs(), 5);  // median of 5, 6, 5
  EXPECT_EQ(r.jobs(), 3);
}

TEST(CollectiveRefinementTest, ObservationsAreClampedAndOnlyTheLastOnesCount) {
  CollectiveRefinement r;
  EXPECT_EQ(r.Observe(1, -10, 1), 0);
  EXPECT_EQ(r.Observe(0, 1e6, 1), CollectiveRefinement::kMaxOverheadMs);
  for (int i = 0; i < CollectiveRefinement::kHistory; ++i) r.Observe(0, 3, 1);
  EXPECT_DOUBLE_EQ(r.OverheadMs(), 3);
}

TEST(CollectiveRefinementTest, NothingIsTakenWithoutCollectivesOrFromNonFiniteNumbers) {
  CollectiveRefinement r;
  EXPECT_EQ(r.Observe(0, 5, 0), -1);
  EXPECT_EQ(r.Observe(0, std::numeric_limits<double>::quiet_NaN(), 1), -1);
  EXPECT_EQ(r.Observe(std::numeric_limits<double>::infinity(), 1, 1), -1);
  EXPECT_EQ(r.jobs(), 0);
  EXPECT_EQ(r.OverheadMs(), 0);
}

}  // namespace
}  // namespace dapple::coordinator

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

TEST(CollectiveRefinementTest, ItsStateRestoresTheOverheadAndHistory) {
  CollectiveRefinement r;
  r.Observe(0, 4, 1);
  r.Observe(0, 6, 2);
  const v1::CollectiveRefinementState state = r.State();
  EXPECT_EQ(state.observations_ms_size(), 2);
  EXPECT_EQ(state.jobs(), 2);
  CollectiveRefinement restored;
  ASSERT_TRUE(restored.Restore(state).ok());
  EXPECT_DOUBLE_EQ(restored.OverheadMs(), r.OverheadMs());
  EXPECT_EQ(restored.jobs(), 2);
  r.Observe(0, 10, 1);
  restored.Observe(0, 10, 1);
  EXPECT_EQ(restored.State().SerializeAsString(), r.State().SerializeAsString());
}

TEST(CollectiveRefinementTest, AStateItCouldNotHaveWrittenIsRefusedChangingNothing) {
  CollectiveRefinement r;
  r.Observe(0, 2, 1);
  v1::CollectiveRefinementState bad;
  bad.add_observations_ms(CollectiveRefinement::kMaxOverheadMs + 1);
  EXPECT_EQ(r.Restore(bad).message(),
            "a collective overhead observation of 101 ms is outside [0, 100]");
  bad.Clear();
  bad.add_observations_ms(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(r.Restore(bad).code(), absl::StatusCode::kInvalidArgument);
  bad.Clear();
  for (int i = 0; i <= CollectiveRefinement::kHistory; ++i) bad.add_observations_ms(1);
  EXPECT_EQ(r.Restore(bad).message(), "the collective overhead has 6 observations, at most 5");
  bad.Clear();
  bad.set_jobs(-3);
  EXPECT_EQ(r.Restore(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(r.OverheadMs(), 2);
  EXPECT_EQ(r.jobs(), 1);
}

}  // namespace
}  // namespace dapple::coordinator

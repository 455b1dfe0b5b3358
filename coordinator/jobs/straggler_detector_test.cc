#include "coordinator/jobs/straggler_detector.h"

#include <optional>

#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::StageStepStats Compute(double forward, double backward = 0, double optimizer = 0,
                           double idle = 0) {
  v1::StageStepStats s;
  s.set_forward_seconds(forward);
  s.set_backward_seconds(backward);
  s.set_optimizer_seconds(optimizer);
  s.set_idle_seconds(idle);
  s.set_step_seconds(forward + backward + optimizer + idle);
  return s;
}

// Feeds `steps` steps to every replica of stage 0 (replica 1 computes `slow` seconds, the
// others 0.01 s) and returns replica 1's changes.
std::vector<StragglerDetector::Change> Feed(StragglerDetector& d, int replicas, int steps,
                                            double slow) {
  std::vector<StragglerDetector::Change> changes;
  for (int i = 0; i < steps; ++i) {
    for (int r = 0; r < replicas; ++r) {
      std::optional<StragglerDetector::Change> c =
          d.OnStep(0, r, r == 1 ? Compute(slow / 2, slow / 2) : Compute(0.005, 0.005));
      if (c.has_value()) changes.push_back(*c);
    }
  }
  return changes;
}

TEST(StragglerDetectorTest, ARankSlowerThanRatioTimesItsPeersForKReportsIsAStraggler) {
  StragglerDetector d;
  // Judged from the kWindow-th step; straggler after kConsecutive slow judgements.
  std::vector<StragglerDetector::Change> changes =
      Feed(d, 3, StragglerDetector::kWindow + StragglerDetector::kConsecutive - 2, 0.02);
  EXPECT_TRUE(changes.empty());
  EXPECT_FALSE(d.IsStraggler(0, 1));
  changes = Feed(d, 3, 1, 0.02);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].straggler);
  EXPECT_EQ(changes[0].stage, 0);
  EXPECT_EQ(changes[0].replica, 1);
  EXPECT_NEAR(changes[0].rank_seconds, 0.02, 1e-12);
  EXPECT_NEAR(changes[0].peers_seconds, 0.01, 1e-12);
  EXPECT_TRUE(d.IsStraggler(0, 1));
  EXPECT_FALSE(d.IsStraggler(0, 0));
  EXPECT_NEAR(d.Ratio(0, 1), 2.0, 1e-9);
  EXPECT_EQ(StragglerDetector::Describe(changes[0]),
            "stage 0 replica 1 computes 2.00x its stage's other replicas: median 20.0 ms vs "
            "10.0 ms of compute per step over the last 10 steps");
  // Recovers once its median is back within the ratio for kConsecutive reports.
  changes = Feed(d, 3, StragglerDetector::kWindow + StragglerDetector::kConsecutive, 0.01);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].straggler);
  EXPECT_FALSE(d.IsStraggler(0, 1));
}

TEST(StragglerDetectorTest, WithinTheRatioOrAloneInItsStageIsNeverAStraggler) {
  StragglerDetector within;
  EXPECT_TRUE(Feed(within, 2, 50, 0.0149).empty());  // 1.49x
  StragglerDetector alone;
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(alone.OnStep(0, 0, Compute(0.5)).has_value());
    EXPECT_FALSE(alone.OnStep(1, 0, Compute(0.01)).has_value());  // another stage: no peer
  }
}

TEST(StragglerDetectorTest, WaitingTimeDoesNotCountOnlyCompute) {
  StragglerDetector d;
  for (int i = 0; i < 50; ++i) {
    // Replica 0 waits long for its peer in every step; its compute is the same.
    EXPECT_FALSE(d.OnStep(0, 0, Compute(0.005, 0.005, 0, /*idle=*/1.0)).has_value());
    EXPECT_FALSE(d.OnStep(0, 1, Compute(0.005, 0.005)).has_value());
  }
}

TEST(StragglerDetectorTest, AFewSlowStepsDoNotMakeAStraggler) {
  StragglerDetector d;
  for (int i = 0; i < 40; ++i) {
    // Every fifth step of replica 1 is 10x slower: the median ignores them.
    const double t = i % 5 == 0 ? 0.1 : 0.01;
    EXPECT_FALSE(d.OnStep(0, 0, Compute(0.01)).has_value());
    EXPECT_FALSE(d.OnStep(0, 1, Compute(t)).has_value());
  }
}

}  // namespace
}  // namespace dapple::coordinator
